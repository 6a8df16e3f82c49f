"""The default number of questions in flight (issue 29 item 2): 8 on the embedded llama.cpp pool,
whose concurrent requests share decode batches, 1 on any other pool (no model is loaded here)."""

import pytest

from agora.models.llamacpp import LlamaCppChatModel
from agora.models.pool import EMBEDDED_CONCURRENCY, ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.runs.bench import BenchConfig


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


@pytest.mark.parametrize("value", ["server", "xllamacpp"])
def test_a_removed_engine_asked_for_by_name_is_refused_not_ignored(monkeypatch, value):
    """The server engine on trial was removed (issue 29: one engine); a user who still sets
    AGORA_LLAMA_ENGINE gets a clear error instead of silently another engine."""
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", value)
    with pytest.raises(ValueError, match=f"AGORA_LLAMA_ENGINE='{value}'.*unset AGORA_LLAMA_ENGINE"):
        embedded()
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "llama-cpp-python")
    assert embedded().batches_concurrent_requests
