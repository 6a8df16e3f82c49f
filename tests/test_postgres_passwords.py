"""A Postgres URL's password never reaches the terminal: the CLI's error lines (whose messages name
the database as the store knows it, the URL whole) and its report lines show it as ``***``."""

from cli_runs import agora

from agora.traces.store import TraceStore


def _url_with_password(postgres_server) -> str:
    url = postgres_server.database() + "&password=hunter2"  # the test server trusts its socket's user
    store = TraceStore(url)
    store.start_run("r1", "align", config={}, pool=[], dataset={})
    store.finish_run("r1", summary={}, status="finished")
    store.close()
    return url


def test_error_lines_leave_a_postgres_password_out(postgres_server):
    """`report run`, `replay` and `report question` on a run the database does not hold said
    '<URL>: no run ...', the URL with its password."""
    url = _url_with_password(postgres_server)
    for args in (["report", "run", "nope", "--db", url],
                 ["replay", "--db", url, "--run-id", "nope", "--rule", "align"],
                 ["report", "run", "r1", "--db", url, "--disagree", "align", "single_agent"]):
        code, out = agora(*args, env={"COLUMNS": "1000"})
        assert code == 2, out
        assert "hunter2" not in out and "password=***" in out, (args, out)


def test_report_and_backfill_lines_leave_a_postgres_password_out(postgres_server):
    """`report runs`' table title ('runs in <URL>') and `traces backfill`'s line printed the URL whole."""
    url = _url_with_password(postgres_server)
    for args in (["report", "runs", "--db", url], ["traces", "backfill", "--db", url]):
        code, out = agora(*args, env={"COLUMNS": "1000"})
        assert code == 0, out
        assert "hunter2" not in out and "password=***" in out, (args, out)


def test_a_training_report_leaves_a_postgres_password_out(capsys):
    """`agora train ...`'s closing 'traces:' line printed the --db URL whole."""
    from types import SimpleNamespace

    from agora.cli._train import report

    result = SimpleNamespace(adapter_dir="out/adapter", rows=4, steps=2, losses=[0.7, 0.5], wall_s=3.0, cpu_s=2.0)
    run = SimpleNamespace(result=result, validation_rows=[], validation_accuracy=None)
    report(run, "out/pool.toml", SimpleNamespace(path="postgresql://agora:hunter2@db.example/traces"))
    out = capsys.readouterr().out
    assert "hunter2" not in out and "traces: postgresql://agora:***@db.example/traces" in out, out
