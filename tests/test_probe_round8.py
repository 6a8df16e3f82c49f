"""Probes of bad input, round 8: a refused setting named by the option the user typed, a member
named twice in --models, a relative pool path that is a folder, control characters in --json
output, a bundle whose data lines were altered, unknown pool-file fields."""

from __future__ import annotations

from cli_runs import agora, one_error_line


def test_a_refused_setting_names_the_option_that_was_typed(tmp_path):
    """It named only the settings field (DelegationConfig.n_agents), not -n/--agents."""
    code, output = agora("run", "align", "-n", "100", "--format", "synthetic", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == ("error: -n/--agents: DelegationConfig.n_agents must be at most 64 (each agent is "
                                      "a branch of every question), got 100")
    assert not (tmp_path / "t.db").exists()


def test_a_refused_part_of_a_typed_option_names_the_option(tmp_path):
    """The value refused is one entry of the option (2.0 of a=2): the option typed is still named."""
    code, output = agora("run", "align", "--utility", "calibrated", "--dev-accuracy", "a=2", "--format", "synthetic",
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == ("error: --dev-accuracy: DelegationConfig.dev_accuracy: a's accuracy must be a "
                                      "finite number in [0, 1], got 2.0")


def test_a_field_set_from_a_config_file_is_not_pinned_on_an_option(tmp_path):
    config = tmp_path / "debate.toml"
    config.write_text("[debate]\nrounds = 100000\n")
    code, output = agora("run", "debate", "--format", "synthetic", "--config", config, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == (f"error: --config {config}:2: [debate] DebateConfig.rounds must be at most 10 "
                                      "(each question costs agents × rounds model calls), got 100000")


def test_a_refused_setting_of_a_generated_command_names_its_option(tmp_path):
    """Commands made from a settings class (agora run debate) name the option too."""
    code, output = agora("run", "debate", "--rounds", "100000", "--format", "synthetic", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == ("error: --rounds: DebateConfig.rounds must be at most 10 (each question costs "
                                      "agents × rounds model calls), got 100000")


import pytest  # noqa: E402

MEMBER = "qwen2.5-coder-0.5b"  # of the embedded pools


@pytest.mark.parametrize("command, option", [
    (["run", "align", "--format", "synthetic"], "--models"),
    (["run", "debate", "--format", "synthetic"], "--models"),
    (["run", "slm-mux", "--format", "synthetic"], "--models"),
    (["converse"], "--models"),
])
def test_a_member_named_twice_in_models_is_refused(tmp_path, command, option):
    """`--models a,a` was accepted (align, debate, converse: the member played twice as often)."""
    code, output = agora(*command, option, f"{MEMBER},{MEMBER}", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == (f"error: {option} {MEMBER},{MEMBER}: '{MEMBER}' named more than once; name each "
                                      "member once")
    assert not (tmp_path / "t.db").exists()


def test_a_member_named_twice_in_train_models_is_refused(tmp_path):
    code, output = agora("evolve", "--instructions", tmp_path / "none.jsonl", "--train-models", "a, b,a",
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == "error: --train-models a, b,a: 'a' named more than once; name each member once"


def test_a_relative_pool_path_that_is_a_folder_says_so(tmp_path, monkeypatch):
    """It said "pool file not found in <base>" about a folder that is there."""
    from agora.graphs.context import resolve_pool
    from agora.models.errors import PoolConfigError

    monkeypatch.setenv("AGORA_POOL_DIR", str(tmp_path))
    (tmp_path / "pools").mkdir()
    with pytest.raises(PoolConfigError) as err:
        resolve_pool("pools")
    assert str(err.value) == (f"pools: a folder ({tmp_path / 'pools'}), not a pool file; give the path of a TOML "
                              "pool file")


#: A model's words: a C1 CSI (8-bit), DEL, a C1 OSC and ST, an ESC; and text that is not a control.
HOSTILE = "\x9b2J\x7f\x9d0;pwned\x9c answer 4 \x1b[8m é×"


def _json_control_free(output: str) -> bool:
    return not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in output)


def test_json_output_escapes_c1_and_other_terminal_controls(tmp_path):
    """`--json` printed C1 controls (U+0080..U+009F) and DEL raw: a completion could drive the terminal."""
    import json

    from typer.testing import CliRunner

    from agora.agents.delegation import DelegationConfig
    from agora.cli.main import app
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.problem import Problem
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: HOSTILE) for m in ("a", "b")})
    config = DelegationConfig(n_agents=2, k_samples=1, tau=0.5)
    db = tmp_path / "t.db"
    run_protocol("align", [Problem(id="q\x9b1", question="What is 2 + 2?\x85", gold="4", kind="math")],
                 store=TraceStore(db), run_id="r", context=DelegationContext(pool, config), config=config,
                 pool_description=pool.describe(), dataset={"path": "q\x9b", "format": "jsonl"})
    for args in (["report", "question", "--run-id", "r", "--question-id", "q\x9b1"], ["report", "run", "r"],
                 ["report", "runs"], ["replay", "--run-id", "r", "--rule", "plurality"]):
        result = CliRunner().invoke(app, [*args, "--db", str(db), "--json"])
        assert result.exit_code == 0, result.output
        assert _json_control_free(result.output), (args, repr(result.output))
        if args[1] == "question":
            report = json.loads(result.output)  # still JSON, holding the very strings
            assert report["question"] == "What is 2 + 2?\x85"
            assert [s["completion"] for s in report["samples"]] == [HOSTILE, HOSTILE]
            assert "é×" in result.output  # other text is kept as written


def _align_run(db, text="The answer is 4."):
    """A two-question ALIGN run whose members (scripted) answer ``text``, recorded in ``db`` as run ``r``."""
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.problem import Problem
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: text) for m in ("a", "b")})
    config = DelegationConfig(n_agents=2, k_samples=1, tau=0.5)
    store = TraceStore(db)
    run_protocol("align", [Problem(id=f"q{n}", question=f"What is 2 + {n}?", gold=str(2 + n), kind="math")
                           for n in (2, 3)], store=store, run_id="r", context=DelegationContext(pool, config),
                 config=config, pool_description=pool.describe(), dataset={"path": "q", "format": "jsonl"})
    return store


def test_a_bundle_row_altered_after_export_is_refused_by_its_checksum(tmp_path):
    """A flipped byte in a row that still parses (an answer 4 made 5) was imported silently."""
    import gzip
    import hashlib
    import json

    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_reading import BundleError, check_bundle

    bundle = tmp_path / "r.agora.jsonl.gz"
    export_bundle(_align_run(tmp_path / "t.db"), bundle, ["r"])
    raw = gzip.open(bundle, "rb").read()
    lines = raw.split(b"\n")
    footer = json.loads(lines[-2])
    assert footer["sha256"] == hashlib.sha256(b"".join(line + b"\n" for line in lines[1:-2])).hexdigest()
    at = next(i for i, line in enumerate(lines) if b'"model_calls"' in line and b"The answer is 4." in line)
    flipped = tmp_path / "flipped.agora.jsonl.gz"
    flipped.write_bytes(gzip.compress(raw.replace(lines[at], lines[at].replace(b"is 4.", b"is 5.", 1), 1)))
    code, output = agora("import", flipped, "--db", tmp_path / "into.db")
    assert code == 2, output
    assert one_error_line(output) == (f"error: {flipped}: its rows do not match the footer's checksum (sha256): a line "
                                      "was altered or damaged after export; nothing was imported")
    assert not (tmp_path / "into.db").exists()
    with pytest.raises(BundleError, match="do not match the footer's checksum"):  # into an existing database too
        from agora.traces.bundle_import import import_bundle
        from agora.traces.store import TraceStore

        import_bundle(flipped, TraceStore(tmp_path / "existing.db"))
    assert TraceStore(tmp_path / "existing.db").run_ids() == []
    # a bundle written before the checksum (its footer has none) still imports; so does the untouched one
    older = tmp_path / "older.agora.jsonl.gz"
    del footer["sha256"]
    older.write_bytes(gzip.compress(b"\n".join([*lines[:-2], json.dumps(footer).encode(), b""])))
    assert check_bundle(older)["runs"] == ["r"]
    for good in (older, bundle):
        code, output = agora("import", good, "--db", tmp_path / f"{good.name}.db")
        assert code == 0 and "rows added" in output, output


def test_a_bundle_footer_whose_checksum_is_not_a_digest_is_refused(tmp_path):
    import gzip
    import json

    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_reading import BundleError, check_bundle

    bundle = tmp_path / "r.agora.jsonl.gz"
    export_bundle(_align_run(tmp_path / "t.db"), bundle, ["r"])
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    footer = {**json.loads(lines[-1]), "sha256": "xyz"}
    bad = tmp_path / "bad.agora.jsonl.gz"
    bad.write_bytes(gzip.compress(("\n".join([*lines[:-1], json.dumps(footer)]) + "\n").encode()))
    with pytest.raises(BundleError) as err:
        check_bundle(bad)
    assert str(err.value) == (f"{bad}:{len(lines)}: footer.sha256: \"xyz\" is not a SHA-256 digest (64 hexadecimal "
                              "digits); nothing was imported")


def test_unknown_pool_fields_warn_with_file_line_field_and_the_closest_known_field(tmp_path, caplog):
    """The warning named file, entry and field, but neither the line nor the field that was meant."""
    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('# two members\n[[models]]\nname = "x"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'model = "m"\ntemprature = 0.2\n\n[[models]]\nname = "y"\nbackend = "openai"\n'
                    'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n"system_promt" = "Be brief."\n'
                    'zzzz = 1\n[models.vllm_args]\nenforce_eager = true\n')
    with caplog.at_level("WARNING", logger="agora.pool"):
        load_pool(pool)
    assert [r.getMessage() for r in caplog.records] == [
        f"{pool}:7: models[0] (x): unknown field(s) temprature are ignored (did you mean 'temperature'?)",
        f"{pool}:14: models[1] (y): unknown field(s) system_promt, zzzz are ignored (system_promt on line 14: did "
        "you mean 'system_prompt'?; zzzz on line 15)"]


def test_an_unknown_field_of_an_inline_entry_warns_without_a_line(tmp_path, caplog):
    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('models = [{name = "x", backend = "openai", base_url = "http://127.0.0.1:9/v1", model = "m", '
                    'max_retires = 2}]\n')
    with caplog.at_level("WARNING", logger="agora.pool"):
        load_pool(pool)
    assert [r.getMessage() for r in caplog.records] == [
        f"{pool}: models[0] (x): unknown field(s) max_retires are ignored (did you mean 'max_retries'?)"]
