"""Probes of the trace stores, round 21: Postgres faults in the middle of a command (a connection
ended by the server, an admin's ``statement_timeout`` or ``idle_session_timeout``) and Postgres URLs
whose password holds characters a URL reserves. Scripted rows and stores only; no model is loaded."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runs import agora, one_error_line  # noqa: E402

from agora.models.urls import shown_url  # noqa: E402
from agora.traces.pg_sql import without_password  # noqa: E402
from agora.traces.errors import TraceStoreError  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402


def _one_run(url: str, run_id: str = "r") -> None:
    store = TraceStore(url)
    store.start_run(run_id, "align", config={}, pool=[], dataset={})
    store.record_question(run_id, "align", {"question_id": "q1", "question": "1+1?", "gold": "2", "answer": "2",
                                            "correct": True}, {"align": {"answer": "2", "correct": True, "samples": 1}},
                          [{"call_id": f"{run_id}-c1", "model": "a", "text": "The answer is 2.", "answer": "2"}])
    store.finish_run(run_id, summary={"questions": 1})
    store.close()


def _admin(server, sql: str) -> None:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(sql)


def _dbname(url: str) -> str:
    return url.split("/")[3].split("?")[0]


# ------------------------------------------------------------------ a Postgres error mid-command


def test_an_admins_statement_timeout_is_one_line_naming_the_url(postgres_server, tmp_path):
    """Before: ``psycopg.errors.QueryCanceled: canceling statement due to statement timeout`` with a
    traceback (exit 1) from `report runs` and `export`."""
    url = postgres_server.database()
    _one_run(url)
    _admin(postgres_server, f'alter database "{_dbname(url)}" set statement_timeout = \'1ms\'')
    for args in (["report", "runs", "--db", url], ["export", "--db", url, "--out", tmp_path / "e.jsonl.gz"]):
        code, output = agora(*args, env={"COLUMNS": "1000"})
        assert code == 2 and one_error_line(output) == (
            f"error: {url}: the Postgres trace store failed in the middle of the command (canceling statement "
            "due to statement timeout)"), (args, output)


def test_a_connection_ended_by_the_server_mid_report_is_one_line(postgres_server, monkeypatch):
    """The server ends the session `report run` reads on (an admin's ``pg_terminate_backend``, a
    server shutting down): before, ``psycopg.errors.AdminShutdown`` and its traceback."""
    from agora.traces import pg_database

    url = postgres_server.database()
    _one_run(url)
    real = pg_database.PostgresDatabase._connection
    ended = []

    @contextlib.contextmanager
    def ending(self):
        with real(self) as conn:
            if not ended:  # the first statement's session is ended under it
                ended.append(conn.info.backend_pid)
                _admin(postgres_server, f"select pg_terminate_backend({conn.info.backend_pid})")
                time.sleep(0.2)
            yield conn

    monkeypatch.setattr(pg_database.PostgresDatabase, "_connection", ending)
    code, output = agora("report", "run", "r", "--db", url, env={"COLUMNS": "1000"})
    assert ended and code == 2, output
    assert one_error_line(output) == (f"error: {url}: the Postgres trace store failed in the middle of the command "
                                      "(terminating connection due to administrator command)")
    assert output.count("\n") == 1, output  # nothing else: no psycopg pool warnings either


def test_an_import_into_a_read_only_postgres_database_is_one_line(postgres_server, tmp_path):
    """A database its admin made read-only (``default_transaction_read_only``, as a standby's): the
    import's first write is refused; before, ``psycopg.errors.ReadOnlySqlTransaction`` and its traceback."""
    source = tmp_path / "s.db"
    _one_run(str(source), "a")
    bundle = tmp_path / "a.jsonl.gz"
    assert agora("export", "--db", source, "--run-id", "a", "--out", bundle)[0] == 0
    url = postgres_server.database()
    TraceStore(url).close()
    _admin(postgres_server, f'alter database "{_dbname(url)}" set default_transaction_read_only = on')
    code, output = agora("import", bundle, "--db", url, env={"COLUMNS": "1000"})
    assert code == 2 and one_error_line(output) == (
        f"error: {url}: the Postgres trace store failed in the middle of the command (cannot execute INSERT in a "
        "read-only transaction)"), output


def test_a_failure_mid_run_says_its_finished_questions_are_saved(postgres_server, tmp_path, monkeypatch):
    """A run whose store fails after its run row was written: the line ends as a SQLite failure's
    does, with what the rerun keeps."""
    from cli_runs import fake_pool
    from test_probe_round19_cli import _data

    from agora.traces import postgres

    url = postgres_server.database()

    def failing(self, *args, **kwargs):
        import psycopg

        raise psycopg.OperationalError("the connection is lost")

    monkeypatch.setattr(postgres.PostgresTraceStore, "finish_run", failing)
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", url,
                         "--run-id", "r", env={"COLUMNS": "1000"})
    assert code == 2 and one_error_line(output) == (
        f"error: {url}: the Postgres trace store failed in the middle of the command (the connection is lost); "
        "finished questions are saved"), output


def test_psycopgs_pool_warnings_are_left_out_of_the_commands_output(monkeypatch):
    """A Postgres server restarted mid-run printed a pair of psycopg pool lines per lost connection
    ('error connecting in 'agora-checkpoints': ...', 'discarding closed connection: ...'): psycopg
    sets its logger to WARNING on import, which the CLI took for a level an application chose."""
    import logging

    import psycopg  # noqa: F401 - (its import sets the level)

    from agora.cli._shared import show_logs_visibly

    monkeypatch.setattr(logging.getLogger("psycopg"), "level", logging.getLogger("psycopg").level)
    show_logs_visibly()
    assert not logging.getLogger("psycopg.pool").isEnabledFor(logging.WARNING)
    assert logging.getLogger("psycopg.pool").isEnabledFor(logging.ERROR)


def test_a_table_lock_held_by_another_session_is_waited_out_for_a_while_then_one_line(postgres_server, monkeypatch):
    """Another session holds a lock on the trace tables (an admin's ``LOCK TABLE``, a ``VACUUM FULL``):
    before, every command waited with no limit and no word (SQLite gives up after its busy timeout).
    Here the lock is let go after 10 s, and the wait is cut to 1 s."""
    import threading

    import psycopg

    from agora.traces import pg_database

    url = postgres_server.database()
    _one_run(url)
    monkeypatch.setattr(pg_database, "LOCK_TIMEOUT_S", 1.0)
    holder = psycopg.connect(url)
    holder.execute("lock table runs in access exclusive mode")
    release = threading.Timer(10, holder.rollback)
    release.start()
    try:
        started = time.monotonic()
        code, output = agora("report", "runs", "--db", url, env={"COLUMNS": "1000"})
        waited = time.monotonic() - started
    finally:
        release.join()
        holder.close()
    assert code == 2 and one_error_line(output) == (
        f"error: {url}: the Postgres trace store failed in the middle of the command (canceling statement due to "
        "lock timeout)"), output
    assert waited < 9, waited
    assert agora("report", "runs", "--db", url)[0] == 0  # the lock gone: as before


# ------------------------------------------------------------------ an admin's idle_session_timeout


def test_pooled_connections_ended_by_idle_session_timeout_are_replaced(postgres_server):
    """Before: a run whose questions took longer than the database's ``idle_session_timeout`` failed
    on its next write (``IdleSessionTimeout: terminating connection due to idle-session timeout``):
    the pool handed out connections the server had ended while they sat idle."""
    from agora.graphs.postgres_checkpoint import open_postgres_checkpointer
    from agora.traces.claims import Claims

    url = postgres_server.database()
    TraceStore(url).close()
    _admin(postgres_server, f'alter database "{_dbname(url)}" set idle_session_timeout = \'2s\'')
    store = TraceStore(url)
    saver = open_postgres_checkpointer(url)
    try:
        store.start_run("r", "align", config={}, pool=[], dataset={})
        claims = Claims(store, "r")
        claims.seed([(0, "q1")])
        time.sleep(3)  # every connection idle past the timeout
        store.record_question("r", "align", {"question_id": "q1", "question": "1+1?", "answer": "2"},
                              {"align": {"answer": "2", "samples": 1}},
                              [{"call_id": "c1", "model": "a", "text": "The answer is 2.", "answer": "2"}])
        assert saver.get_tuple({"configurable": {"thread_id": "r:q1"}}) is None
        assert claims.others_working(["q1"]) is False
        time.sleep(3)
        store.finish_run("r", summary={"questions": 1})
        assert (store.get_run("r")["status"], store.db["questions"].count) == ("finished", 1)
        claims.leave()
    finally:
        saver.close()
        store.close()


# ------------------------------------------------------------------ passwords with reserved characters


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:p/ss@host/db", "postgresql://u:***@host/db"),
    ("postgresql://u:p#ss@host/db", "postgresql://u:***@host/db"),
    ("postgresql://u:p?ss@host:5432/db?sslmode=require", "postgresql://u:***@host:5432/db?sslmode=require"),
    ("postgresql://u:p@ss/w:rd#?&=%x y@/p1?host=/tmp", "postgresql://u:***@/p1?host=/tmp"),
    ("postgresql://u:p%40ss%2Fw@host/db", "postgresql://u:***@host/db"),
    ("postgresql://u@host/db?application_name=a:b@c", "postgresql://u@host/db?application_name=a:b@c"),
])
def test_a_password_with_a_reserved_character_is_never_shown(url, shown):
    """Before: the password was cut at its first ``/``, ``?`` or ``#`` and the rest shown (``u:p/ss@x``
    shown whole; ``u:p@ss/w:rd#...@/db`` as ``u:***@ss/w:rd#...``)."""
    assert shown_url(url) == shown


def test_an_unencoded_password_is_left_out_of_the_drivers_message_and_the_error_line():
    """A password holding a ``/`` left unencoded: libpq reads the URL its own way (``u:p%zz/ss@h``: the
    host ``u``, the port ``p%zz``), and what its message quotes of the password is not shown."""
    url = "postgresql://u:p%zz/ss@host/db"
    assert without_password(f'invalid percent-encoded token: "p%zz/ss" or "p%zz" in {url}', url) == \
        'invalid percent-encoded token: "***" or "***" in postgresql://u:***@host/db'
    code, output = agora("report", "runs", "--db", "postgresql://ann:p@ss/w:rd@/db?host=/no/such/folder",
                         env={"COLUMNS": "1000"})
    line = one_error_line(output)
    assert code == 2 and "ss/w:rd" not in line and "p@ss" not in line, line
    assert line.startswith("error: postgresql://ann:***@/db?host=/no/such/folder: cannot connect"), line


# ------------------------------------------------------------------ import on a full disk


def test_an_import_refused_by_the_file_system_says_to_run_it_again_not_to_resume_a_run(tmp_path):
    """`agora import` whose writes the file system refuses (a file-size limit, as a nearly full disk):
    before, its line ended 'rerun with the same --run-id to resume', an option import does not take."""
    import resource
    import signal
    import subprocess

    source = TraceStore(tmp_path / "source.db")
    for r in ("a", "b", "c"):
        source.start_run(r, "align", config={}, pool=[], dataset={})
        for i in range(40):
            source.record_question(r, "align", {"question_id": f"q{i}", "question": f"{i}?" + " pad" * 300,
                                                "answer": "2"}, {"align": {"answer": "2", "samples": 1}},
                                   [{"call_id": f"{r}-{i}", "model": "a", "text": "The answer is 2." * 50}])
        source.finish_run(r, summary={})
    source.close()
    bundle = tmp_path / "all.jsonl.gz"
    code, output = agora("export", "--db", tmp_path / "source.db", "--run-id", "a", "--run-id", "b", "--run-id", "c",
                         "--out", bundle)
    assert code == 0, output

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))

    proc = subprocess.run([sys.executable, "-m", "agora.cli", "import", str(bundle), "--db", "t.db"],
                          capture_output=True, text=True, cwd=tmp_path, preexec_fn=small_files, timeout=300)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert line.startswith("error: t.db: ") and line.endswith(", then run the command again"), line


# ------------------------------------------------------------------ a break-it pass after round 21


@pytest.mark.parametrize("url, field", [("postgresql://u:ab%C3@localhost:1/db", "password"),
                                        ("postgresql://u:ab%FF@localhost:1/db", "password"),
                                        ("postgresql://%FFu:pw@localhost:1/db", "user name"),
                                        ("postgresql://u:pw@localhost:1/d%C3", "database name")])
def test_a_percent_escape_that_is_not_utf8_is_one_line_naming_the_part(url, field):
    """Before: ``error: 'utf-8' codec can't decode byte 0xc3 in position 2: unexpected end of data``,
    naming neither the URL nor the part (psycopg's conninfo parser raised it). No server is reached."""
    code, output = agora("report", "runs", "--db", url)
    assert code == 2, output
    line = one_error_line(output)
    assert line.endswith(f": the {field}'s %-escapes do not decode as UTF-8 text; write it in UTF-8 with each byte "
                         "%-encoded (e.g. é as %C3%A9)"), line
    assert "ab%" not in line and "pw" not in line  # the password is not shown


def test_a_role_statement_timeout_while_creating_the_tables_is_not_blamed_on_rights(postgres_server):
    """A role whose ``statement_timeout`` (set by an admin) cancels the table creation. Before: "open it
    as a role that may create tables in its schema ...", advice about rights the role has; now the
    server's reason alone."""
    import psycopg

    name = "r21_slow"
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        if not conn.execute("select 1 from pg_roles where rolname = %s", [name]).fetchone():
            conn.execute(f'create role "{name}" login superuser')
        conn.execute(f"alter role \"{name}\" set statement_timeout = '1ms'")
    url = postgres_server.database().replace(f"{postgres_server.user}@", f"{name}@", 1)
    with pytest.raises(TraceStoreError) as info:
        TraceStore(url)
    assert str(info.value) in (f"{url}: cannot create the trace tables (canceling statement due to {why})"
                               for why in ("statement timeout", "user request"))  # (the server's words vary)
