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
    assert "Invalid value for '--judge-max-tokens'" in output and "1000000" in output, output
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
