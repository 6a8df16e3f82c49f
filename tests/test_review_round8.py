"""Findings of a review of round 8's changes: each test failed before its fix."""

from __future__ import annotations

from cli_runs import agora


def test_evolve_refuses_a_judge_max_tokens_beyond_any_context_naming_that_option(tmp_path):
    """`agora evolve --max-tokens 64 --judge-max-tokens 2000000` said
    'error: --max-tokens: JudgeConfig.max_tokens must be at most 1000000 ...': the option typed and
    named was not the one whose value was refused (every other --*-max-tokens option has the cap)."""
    instructions = tmp_path / "ins.jsonl"
    instructions.write_text('{"question": "What is 2 + 2?", "answer": "#### 4"}\n', encoding="utf-8")
    code, output = agora("evolve", "--instructions", instructions, "--max-tokens", "64", "--judge-max-tokens",
                         "2000000", "--db", tmp_path / "t.db", "--out", tmp_path / "out", env={"COLUMNS": "200"})
    assert code == 2, output
    assert output.strip() == "error: --judge-max-tokens: must be an integer from 1 to 1000000, got 2000000", output
    assert "--max-tokens:" not in output, output
    assert not (tmp_path / "t.db").exists()


def test_the_resume_command_printed_on_a_stop_leaves_a_postgres_password_out(monkeypatch, capsys):
    """SIGTERM's 'resume with: agora ...' line (and a second Ctrl-C's) repeated the command line as
    typed: a --db postgresql://user:PASSWORD@... URL was printed whole, password and all."""
    import signal
    import sys

    import pytest
    import typer

    from agora.cli import _shared

    monkeypatch.setattr(sys, "argv", ["agora", "run", "align", "--db", "postgresql://agora:hunter2@db.example/traces",
                                      "--dev-db=postgres://agora@db.example/dev?password=hunter2&sslmode=require",
                                      "--limit", "3"])
    command = _shared.resume_command("r1")
    assert command == ("agora run align --db postgresql://agora@db.example/traces "
                       "'--dev-db=postgres://agora@db.example/dev?sslmode=require' --limit 3 --run-id r1")
    monkeypatch.setattr(_shared._stop, "signal", signal.SIGTERM)
    monkeypatch.setattr(_shared._stop, "run_id", "r1")
    with pytest.raises(typer.Exit):
        with _shared.user_errors("questions"):
            raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert "hunter2" not in err, err
    assert f"resume with: {command} (the password is left out: set PGPASSWORD" in " ".join(err.split()), err
    # a command line without a password is repeated as typed
    monkeypatch.setattr(sys, "argv", ["agora", "run", "align", "--db", "postgresql://agora@db.example/traces"])
    assert _shared.resume_command("r1") == "agora run align --db postgresql://agora@db.example/traces --run-id r1"


def test_a_pool_member_named_exactly_as_another_is_not_said_to_match_it_once_normalised(tmp_path):
    """Two entries both named "a" were refused with "'a' is the name of models[0] ('a') once
    normalised (NFKC)": the names are the same as written, no normalisation is involved."""
    import pytest

    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    stub = 'backend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    pool = tmp_path / "p.toml"
    pool.write_text(f'[[models]]\nname = "a"\n{stub}\n[[models]]\nname = "b"\n{stub}\n[[models]]\nname = "a"\n{stub}',
                    encoding="utf-8")
    with pytest.raises(PoolConfigError) as raised:
        load_pool(pool)
    assert str(raised.value) == (f"{pool}: models[2] (a): field 'name': 'a' is the name of models[0] too; give each "
                                 "member its own name")


def test_a_dev_run_url_with_a_password_is_not_recorded_in_the_runs_settings(postgres_server, tmp_path):
    """`agora run align --dev-run R` reads the dev run from --db by default: the run's recorded
    settings (runs.config, which `agora report run --json` prints and `agora export` carries to others)
    held dev_db as the --db URL whole, password and all. The run still resumes under the same command."""
    import json

    from agora.traces.store import TraceStore

    fake = "langchain_core.language_models.fake_chat_models:FakeListChatModel"
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "langchain"\nclass = "{fake}"\n'
                            f'kwargs = {{responses = ["The answer is 4."]}}\n\n' for m in ("a", "b")))
    url = postgres_server.database() + "&password=hunter2"  # the test server trusts its socket's user
    base = ["run", "align", "--format", "synthetic", "--limit", "1", "--pool", pool, "--db", url]
    code, output = agora(*base, "--run-id", "dev")
    assert code == 0, output
    command = [*base, "--run-id", "main", "--utility", "calibrated", "--dev-run", "dev"]
    code, output = agora(*command)
    assert code == 0, output
    store = TraceStore(url)
    config = json.loads(store.get_run("main")["config"])
    store.close()
    assert config["dev_run"] == "dev" and config["dev_db"].startswith("postgresql://")
    assert "hunter2" not in json.dumps(config), config
    code, output = agora(*command)  # the same command again: the finished run, not "started with other settings"
    assert code == 0, output
    code, output = agora("report", "run", "main", "--db", url, "--json")
    assert code == 0 and "hunter2" not in output, output


def test_a_run_recorded_with_a_password_in_its_settings_still_resumes_and_a_new_one_records_none(tmp_path):
    """Settings holding a Postgres URL (dev_db) are recorded with the password as ***; a run whose row
    holds the URL whole (recorded before) resumes with the same settings, and one with other
    settings is refused naming the difference, not the password."""
    import json

    import pytest

    from agora.traces.errors import ResumeRefusedError
    from agora.traces.store import TraceStore

    url = "postgresql://agora:hunter2@db.example/dev"
    store = TraceStore(tmp_path / "t.db")
    assert store.start_run("r", "align", config={"dev_db": url, "tau": 0.5}, pool=[], dataset={}) is False
    assert json.loads(store.get_run("r")["config"]) == {"dev_db": "postgresql://agora:***@db.example/dev", "tau": 0.5}
    store.db["runs"].update("r", {"config": json.dumps({"dev_db": url, "tau": 0.5})})  # as recorded before
    assert store.start_run("r", "align", config={"dev_db": url, "tau": 0.5}, pool=[], dataset={}) is True
    with pytest.raises(ResumeRefusedError) as refused:
        store.start_run("r", "align", config={"dev_db": url, "tau": 0.7}, pool=[], dataset={})
    assert "tau" in str(refused.value) and "dev_db" not in str(refused.value) and "hunter2" not in str(refused.value)
