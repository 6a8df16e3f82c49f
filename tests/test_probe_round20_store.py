"""Probes of the trace stores, round 20: the Postgres path of checks so far tested on SQLite (a source
run still running, look-alike run ids), then new kinds: a Postgres role without the CREATE right
(or with reads only), a SQLite database reached through a symbolic link (the live-run lock, a link
to nowhere, a link loop), a path with spaces and non-ASCII letters. Scripted rows and stores only; no
model is loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runs import agora, fake_pool, one_error_line  # noqa: E402
from test_probe_round14_training import make_db  # noqa: E402
from test_probe_round19_cli import _data  # noqa: E402
from test_verified_data import call  # noqa: E402

from agora.traces.errors import ResumeRefusedError, RunLockedError, TraceStoreError  # noqa: E402
from agora.traces.run_lock import run_lock  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402


def _as_role(url: str, server, role: str) -> str:
    return url.replace(f"{server.user}@", f"{role}@", 1)


def _role(server, name: str) -> None:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        if not conn.execute("select 1 from pg_roles where rolname = %s", [name]).fetchone():
            conn.execute(f'create role "{name}" login')


# ------------------------------------------------------------------ known 1 and 2 on Postgres: checks that held


def test_a_source_run_still_running_on_postgres_gets_the_sqlite_warning(postgres_server, tmp_path):
    from test_postgres_commands import copy_to_postgres

    rows = [call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
            call("c2", "r", "q1", "So 5. The answer is 5.", 10, "5", "marker", t=2)]
    db = make_db(tmp_path / "a.db", rows, runs=({"run_id": "r", "protocol": "x", "status": "running"},
                                                 {"run_id": "s", "protocol": "x", "status": "finished"}))
    url = copy_to_postgres(db, postgres_server.database())
    code, output = agora("train", "sft", "--data-only", "--db", url, "--model", "m", "--out", tmp_path / "o",
                         env={"COLUMNS": "1000"})
    assert code == 0, output
    assert [line for line in output.splitlines() if line.startswith("warning")] == [
        f"warning: source run 'r' of {url} is still running (or stopped without finishing): the samples recorded so "
        "far are read, and the same command run later may read more"]


def test_look_alike_run_ids_are_refused_on_postgres_and_the_run_meant_resumes(postgres_server):
    url = postgres_server.database()
    store = TraceStore(url)
    assert store.start_run("ran", "align", config={}, pool=[], dataset={}) is False
    for typed, said in (("r\u0430n", "looks like the existing run 'ran' ('\u0430' (CYRILLIC SMALL LETTER A) at "
                                     "position 1 where it has 'a')"),
                        ("ran.", "looks like the existing run 'ran' (yours ends in '.')"),
                        ("\uff52an", "is a compatibility form of 'r'")):
        with pytest.raises(ResumeRefusedError, match=r"\(nothing was run or recorded\)") as info:
            store.start_run(typed, "align", config={}, pool=[], dataset={})
        assert said in str(info.value)
    assert store.start_run("ran", "align", config={}, pool=[], dataset={}) is True
    assert store.run_ids() == ["ran"]
    store.close()
    code, output = agora("report", "run", "r\u0430n", "--db", url, env={"COLUMNS": "1000"})
    assert code == 2 and one_error_line(output).endswith(
        "the run 'ran' looks like it ('\u0430' (CYRILLIC SMALL LETTER A) at position 1 where it has 'a')"), output


# ------------------------------------------------------------------ new kinds: Postgres roles


def test_a_role_without_the_create_right_is_one_line_not_a_traceback(postgres_server, tmp_path):
    """Before: ``psycopg.errors.InsufficientPrivilege: permission denied for schema public`` with a
    traceback, exit 1 (Postgres 15 gives no role but the owner CREATE in ``public``)."""
    _role(postgres_server, "r20_nocreate")
    url = _as_role(postgres_server.database(), postgres_server, "r20_nocreate")
    with pytest.raises(TraceStoreError) as info:
        TraceStore(url)
    assert str(info.value) == (f"{url}: cannot create the trace tables (permission denied for schema public); open it "
                               "as a role that may create tables in its schema, or have its owner run the command "
                               "once first")
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", url,
                         "--run-id", "r", env={"COLUMNS": "1000"})
    assert code == 2 and one_error_line(output) == f"error: {info.value}", output


def test_a_role_granted_reads_and_writes_on_tables_its_owner_made_records_a_run(postgres_server):
    """Before: refused as above, though every table was there: each open re-ran ``CREATE OR REPLACE
    FUNCTION``, ``CREATE SCHEMA/TABLE/INDEX IF NOT EXISTS``, which need the CREATE right (or the
    owner) even when nothing is missing."""
    import psycopg

    _role(postgres_server, "r20_writer")
    owner_url = postgres_server.database()
    TraceStore(owner_url).close()  # the owner makes the tables
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for schema in ("public", "agora_claims"):
            conn.execute(f"grant usage on schema {schema} to r20_writer")
            conn.execute(f"grant select, insert, update, delete on all tables in schema {schema} to r20_writer")
    store = TraceStore(_as_role(owner_url, postgres_server, "r20_writer"))
    assert store.start_run("w", "align", config={}, pool=[], dataset={}) is False
    store.record_question("w", "align", {"question_id": "q1", "question": "1+1?", "gold": "2", "answer": "2",
                                         "correct": True}, {"align": {"answer": "2", "correct": True, "samples": 1}},
                          [{"call_id": "c1", "model": "a", "text": "The answer is 2.", "answer": "2"}])
    store.finish_run("w", summary={"n": 1})
    assert (store.get_run("w")["status"], store.db["questions"].count, store.db["model_calls"].count) == ("finished", 1, 1)
    store.close()


def test_a_read_only_role_running_a_run_is_one_line_naming_the_table(postgres_server, tmp_path):
    """A role that may read but not write: one line naming the URL and the right missing."""
    import psycopg

    _role(postgres_server, "r20_reader")
    owner_url = postgres_server.database()
    TraceStore(owner_url).close()
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for schema in ("public", "agora_claims"):
            conn.execute(f"grant usage on schema {schema} to r20_reader")
            conn.execute(f"grant select on all tables in schema {schema} to r20_reader")
    url = _as_role(owner_url, postgres_server, "r20_reader")
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", url,
                         "--run-id", "r", env={"COLUMNS": "1000"})
    assert code == 2, output
    line = one_error_line(output)  # (the run's checkpoints, opened first, are refused the same right)
    assert line.startswith(f"error: {url}: ") and "permission denied" in line, output
    code, output = agora("report", "runs", "--db", url, env={"COLUMNS": "1000"})  # reading stays open to it
    assert code == 0 and "Traceback" not in output, output


# ------------------------------------------------------------------ new kinds: SQLite paths


def test_a_run_through_a_symlink_takes_the_lock_of_the_file_it_points_to(tmp_path):
    """Before: the lock sat beside the name given (``link.db.locks/``), so a process given the link
    and one given the file ran one run at once on one database."""
    real = tmp_path / "real.db"
    TraceStore(real).close()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    with run_lock(real, "r"):
        with pytest.raises(RunLockedError, match="is being run by another process"):
            with run_lock(link, "r"):
                pass
    with run_lock(link, "r"):
        assert (tmp_path / "real.db.locks").is_dir() and not (tmp_path / "link.db.locks").exists()


def test_a_symlink_to_a_missing_folder_or_to_itself_is_named_as_such(tmp_path):
    """Before: both said '(no file can be created in the folder ...: it is read-only)', of a writable folder."""
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "nowhere" / "x.db")
    loop = tmp_path / "loop.db"
    loop.symlink_to(loop)
    for path, said in ((dangling, f"{dangling}: a symbolic link to {tmp_path / 'nowhere' / 'x.db'}, whose folder "
                                  f"{tmp_path / 'nowhere'} does not exist; create it, or give the database file's "
                                  "own path"),
                       (loop, f"{loop}: a symbolic link that points back to itself (a loop); give the database "
                              "file's own path")):
        with pytest.raises(TraceStoreError) as info:
            TraceStore(path)
        assert str(info.value) == said
    fresh = tmp_path / "fresh.db"  # a link to a new file in an existing folder: the file is made there
    fresh.symlink_to(tmp_path / "target.db")
    TraceStore(fresh).close()
    assert (tmp_path / "target.db").is_file() and fresh.is_symlink()


def test_a_database_on_a_path_with_spaces_and_non_ascii_letters_holds_a_run(tmp_path):
    db = tmp_path / "dir with spaces é 日本" / "trace db ü.db"
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", db,
                         "--run-id", "r")
    assert code == 0, output
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", db,
                         "--run-id", "r")
    assert code == 0 and "resumed: 1 of 1 questions already done" in output, output
    assert TraceStore(db, readonly=True).run_ids() == ["r"]
