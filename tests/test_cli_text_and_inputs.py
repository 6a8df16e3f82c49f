"""What the CLI prints of recorded text, the run settings it refuses as input, the next command it
prints, how a stopped worker leaves a shared run, and misspelt graph input keys."""

from __future__ import annotations

import pytest
import typer


# ---------------------------------------------------------------------------- run settings are input

@pytest.mark.parametrize("call, said", [
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, concurrency=0), "concurrency must be an integer >= 1, got 0"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, durability="fast"), "durability must be one of sync, async, exit, got 'fast'"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_protocol"]).run_protocol("duel", []),
     "protocol 'duel' is a "),
    (lambda: __import__("agora.traces.claims", fromlist=["lease_s"]).lease_s(),
     "AGORA_LEASE_S='soon': a lease is a number of seconds"),
])
def test_run_settings_refused_as_input_not_as_a_bug(monkeypatch, capsys, call, said):
    """These refusals were plain ValueErrors, which the CLI prints as an 'internal error' with a
    traceback (exit 1); they are input: one 'error:' line, exit 2."""
    from agora.cli._shared import user_errors

    monkeypatch.setenv("AGORA_LEASE_S", "soon")
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(typer.Exit) as stopped:
        with user_errors():
            call()
    assert stopped.value.exit_code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: " + said) and "internal error" not in err, err


# ---------------------------------------------------------------------------- the next command printed

@pytest.mark.parametrize("db, shown, note", [
    ("agora.db", "agora.db", ""),
    ("my runs/a.db", "'my runs/a.db'", ""),
    ("postgresql://ann@db.example/traces", "postgresql://ann@db.example/traces", ""),
    ("postgresql://ann:s3cr%40t@db.example:5432/traces?sslmode=require",
     "'postgresql://ann@db.example:5432/traces?sslmode=require'", "PGPASSWORD"),
    ("postgres://db.example/traces?password=s3cret&sslmode=require", "'postgres://db.example/traces?sslmode=require'",
     "PGPASSWORD"),
    ("postgres://db.example/traces?sslmode=require&password=s3cret", "'postgres://db.example/traces?sslmode=require'",
     "PGPASSWORD"),
])
def test_a_printed_commands_db_leaves_out_only_the_password(db, shown, note):
    from agora.cli._shared import db_argument

    argument, said = db_argument(db)
    assert argument == shown and (note in said if note else said == "")


def test_converse_prints_a_next_command_that_connects(postgres_server, tmp_path, monkeypatch):
    """The next command was printed with the password as '***' (shown_url), so it could not
    connect; and the line before it ('recorded in ...') printed the URL with its password."""
    import shlex

    from typer.testing import CliRunner

    import agora.cli.converse as converse_cli
    from agora.cli.main import app
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({
        "a": ScriptedChatModel(respond=lambda chat, i: "I think it is 4."),
        "b": ScriptedChatModel(respond=lambda chat, i: "It is 4."),
    })
    monkeypatch.setattr(converse_cli, "load_pool", lambda path: pool)
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    url = postgres_server.database() + "&password=hunter2"  # the test server trusts its socket's user
    result = CliRunner().invoke(app, ["converse", "--pool", "pool.toml", "--limit", "1", "--turns", "2",
                                      "--db", url, "--run-id", "c"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "***" in result.output  # 'recorded in' shows the URL redacted
    line = next(line for line in result.output.splitlines() if "next: " in line)
    command, note = line.split("next: ", 1)[1].split(" (", 1)
    assert shlex.split(command) == ["agora", "report", "diversity", "--db", url.removesuffix("&password=hunter2"),
                                    "--out", "diversity/"]
    assert note.startswith("the password is left out: set PGPASSWORD")
    report = CliRunner().invoke(app, shlex.split(command)[1:] + ["--min-turns", "1", "--panel-size", "2"])
    assert report.exit_code == 0, report.output
