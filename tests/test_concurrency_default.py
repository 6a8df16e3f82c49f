"""The default number of questions in flight (issue 29 item 2): 8 on the embedded llama.cpp pool,
whose concurrent requests share decode batches, 1 on any other pool (no model is loaded here)."""

import pytest

from agora.models.llamacpp import LlamaCppChatModel
from agora.models.model_pool import EMBEDDED_CONCURRENCY
from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.runs.bench_plan import BenchConfig


def pool_of(*models):
    return ModelPool([PoolMember(ModelSpec(name=f"m{i}", backend="langchain"), m) for i, m in enumerate(models)])


def embedded(**fields):
    return LlamaCppChatModel(model_path="never-loaded.gguf", **fields)


def test_the_embedded_pool_keeps_eight_questions_in_flight():
    assert EMBEDDED_CONCURRENCY == 8
    assert pool_of(embedded(), embedded()).suggested_concurrency() == 8


@pytest.mark.parametrize("models", [
    (ScriptedChatModel(responses=["4"]),),                       # a user's own model: it may be rate-limited
    (embedded(), ScriptedChatModel(responses=["4"])),            # one member that does not batch is enough
    (embedded(share_batches=False),),                            # every request decodes alone: nothing to gain
    (embedded(batched=False),),                                  # samples one after the other
], ids=["scripted", "mixed", "share-off", "sequential"])
def test_other_pools_run_one_question_at_a_time(models):
    assert pool_of(*models).suggested_concurrency() == 1


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "4"])
def test_a_bench_refuses_a_bad_concurrency(value):
    with pytest.raises(ValueError, match="BenchConfig.concurrency"):
        BenchConfig(concurrency=value)


def test_a_bench_takes_none_as_the_pools_suggestion():
    assert BenchConfig(concurrency=None).concurrency is None
    assert BenchConfig().concurrency == 1  # the Python API's default is unchanged; the CLI passes None


@pytest.mark.parametrize("value, why", [("server", "removed on 2026-12-04"), (" XLLAMACPP ", "removed on 2026-12-04"),
                                        ("bogus", "not an engine's name")])
def test_a_removed_engine_asked_for_by_name_is_refused_not_ignored(monkeypatch, value, why):
    """The server engine on trial was removed (issue 29: one engine); a user who still sets
    AGORA_LLAMA_ENGINE gets a clear error instead of silently another engine."""
    from agora.models.llamacpp import check_engine_env

    monkeypatch.setenv("AGORA_LLAMA_ENGINE", value)
    with pytest.raises(ValueError) as refused:
        check_engine_env()
    text = str(refused.value)
    assert text.startswith(f"AGORA_LLAMA_ENGINE={value!r}: llama-cpp-python is the one embedded engine and ")
    assert text.endswith("; unset AGORA_LLAMA_ENGINE")
    assert why in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="unset AGORA_LLAMA_ENGINE"):  # constructed directly: pydantic's error
        embedded()
    for accepted in ("", "llama-cpp-python", " LLAMA-CPP-PYTHON ", "python", "native"):
        monkeypatch.setenv("AGORA_LLAMA_ENGINE", accepted)
        check_engine_env()
        assert embedded().batches_concurrent_requests


def test_the_cli_refuses_a_removed_engine_in_one_line(monkeypatch, tmp_path):
    """Through a pool file (the factory checks before constructing), the CLI prints one error line."""
    from typer.testing import CliRunner

    from agora.cli.main import app

    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "server")
    (tmp_path / "never-loaded.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # a GGUF header: the pool file's check passes
    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "m"\nbackend = "llamacpp"\npath = "never-loaded.gguf"\n')
    out = CliRunner().invoke(app, ["run", "align", "--pool", str(pool), "--limit", "1", "--db", str(tmp_path / "t.db")])
    assert out.exit_code == 2, out.output
    errors = [line for line in out.output.splitlines() if "AGORA_LLAMA_ENGINE" in line]
    assert len(errors) == 1 and "removed on 2026-12-04" in errors[0] and "validation error" not in out.output
    assert not (tmp_path / "t.db").exists()
