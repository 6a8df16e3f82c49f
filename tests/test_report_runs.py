"""``agora report runs``: its last-activity column, and what it says about a database without Agora's traces."""

from __future__ import annotations

import json
import sqlite3


from agora.traces.run_list import latest_time, run_rows
from agora.traces.store import TraceStore
from cli_runs import agora


def _run(store: TraceStore, run_id: str, *, started: str, question: str | None = None, call: str | None = None,
         finished: str | None = None, latency: float | list[float] | None = None) -> None:
    """A run with the given stored times: one question finished at ``question`` whose model call
    began at ``call``, finished at ``finished`` (left ``running`` without)."""
    store.start_run(run_id, "align", config={}, pool=[], dataset={})
    if question or call:
        store.record_question(run_id, "align", {"question_id": "q1", "question": "1 + 1?", "gold": "2",
                                                "answer": "2", "correct": True},
                              {"align": {"answer": "2", "correct": True, "samples": 1}},
                              [{"call_id": f"{run_id}-c{j}", "model": "a", "completion": "2", "created_at": call,
                                "latency_s": share, **({"messages_of": f"{run_id}-c0"} if j else {})}
                               for j, share in enumerate(latency if isinstance(latency, list) else [latency])])
    if finished:
        store.finish_run(run_id)
    with store.db.conn:
        store.db.conn.execute("update runs set started_at = ?, finished_at = ? where run_id = ?",
                              [started, finished, run_id])
        store.db.conn.execute("update questions set finished_at = ? where run_id = ?", [question, run_id])
        store.db.conn.execute("update model_calls set created_at = ? where run_id = ?", [call, run_id])


def test_last_activity_is_the_latest_of_start_questions_calls_and_finish(tmp_path):
    db = tmp_path / "t.db"
    store = TraceStore(db)
    # finished after its last question and call: the finish is its last activity (it was the question's)
    _run(store, "done", started="2026-12-01T10:00:00+00:00", question="2026-12-01T10:01:00+00:00",
         call="2026-12-01T10:00:30.250+00:00", finished="2026-12-01T10:03:00+00:00")
    # still running, a model request after its last recorded question: the request's end (it began at
    # created_at; its 3 samples' latency shares add up to its wall time, 12.25 s), in UTC to the ms
    _run(store, "calling", started="2026-12-01T11:00:00+00:00", question="2026-12-01T11:01:00+00:00",
         call="2026-12-01T12:05:00.500+01:00", latency=[4.0, 4.0, 4.25])
    # nothing recorded: its start
    _run(store, "idle", started="2026-12-01T12:00:00+00:00")
    store.close()

    rows = {r.run_id: r for r in run_rows(TraceStore(db, readonly=True), stale_after_s=3600,
                                          now="2026-12-01T12:04:00+00:00")}
    assert rows["done"].last_activity == "2026-12-01T10:03:00+00:00"
    assert rows["calling"].last_activity == "2026-12-01T11:05:12.750+00:00"
    assert rows["idle"].last_activity == "2026-12-01T12:00:00+00:00"
    # staleness follows the last activity: 59 min after the call ended (64 after the question) is not stale
    assert not rows["calling"].stale
    later = {r.run_id: r for r in run_rows(TraceStore(db, readonly=True), stale_after_s=3600,
                                           now="2026-12-01T12:05:13+00:00")}
    assert later["calling"].stale and not later["done"].stale

    code, output = agora("report", "runs", "--db", db, "--json")
    assert code == 0, output
    assert {(r := json.loads(line))["run_id"]: r["last_activity"] for line in output.splitlines()} == {
        "done": "2026-12-01T10:03:00+00:00", "calling": "2026-12-01T11:05:12.750+00:00",
        "idle": "2026-12-01T12:00:00+00:00"}
    code, output = agora("report", "runs", "--db", db)
    assert code == 0, output
    lines = [line for line in output.splitlines() if line.startswith("│")]
    at = next(i for i, line in enumerate(lines) if line.startswith("│ done "))
    folded = [lines[at]]
    for line in lines[at + 1:]:  # its cells' continuation lines (a narrow console folds them), until the next run
        if line.split("│")[1].strip():
            break
        folded.append(line)
    cell = "".join(line.split("│")[-2].strip() for line in folded)
    assert cell == "2026-12-01T10:03:00+00:00"


def test_latest_time_compares_times_not_text():
    assert latest_time("2026-01-01T10:30:00+01:00", "2026-01-01T10:00:00+00:00") == "2026-01-01T10:00:00+00:00"
    assert latest_time("2026-01-01T10:00:05Z", "2026-01-01T10:00:05.500+00:00") == "2026-01-01T10:00:05.500+00:00"
    assert latest_time("2026-01-01T10:00:05", None, "", "2026-01-01T10:00:04.999+00:00") == "2026-01-01T10:00:05"
    assert latest_time(None, "") is None


def _tables(db) -> list[str]:
    """Table names of ``db``, read with the sqlite3 module (not Agora)."""
    conn = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in conn.execute("select name from sqlite_master where type = 'table'"))
    finally:
        conn.close()


def _error_line(output: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


def test_a_database_without_agora_traces_is_refused_and_left_untouched(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("create table people (name text)")
    conn.execute("insert into people values ('ada')")
    conn.execute("create table orders (id integer primary key)")
    conn.commit()
    conn.close()
    mlflow = tmp_path / "mlflow.db"  # another tool's table named runs
    conn = sqlite3.connect(mlflow)
    conn.execute("create table runs (run_uuid text primary key, status text, start_time integer)")
    conn.commit()
    conn.close()
    before = {p: p.read_bytes() for p in (empty, other, mlflow)}

    for db, why in [(empty, "no runs table; an empty database, or one a run is creating right now"), (other, "no runs table; its tables: orders, people"),
                    (mlflow, "its runs table lacks run_id, protocol, started_at: a database of another tool")]:
        for extra in ([], ["--json"]):
            code, output = agora("report", "runs", "--db", db, *extra)
            assert code == 2, output
            assert _error_line(output) == f"error: {db}: holds no Agora traces ({why})"
    # opened read-only: no Agora table created, not a byte changed, no journal left beside it
    assert _tables(empty) == [] and _tables(other) == ["orders", "people"] and _tables(mlflow) == ["runs"]
    assert {p: p.read_bytes() for p in (empty, other, mlflow)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "mlflow.db", "other.db"]


def test_a_wal_database_read_for_a_report_gets_no_files_beside_it(tmp_path):
    """``?mode=ro`` on a database in WAL mode left ``-shm`` and ``-wal`` files beside it (probe 15, 2a):
    a foreign one and a finished Agora one are read as immutable; a live one (its ``-wal`` file is
    there) is read normally and shows its latest commit."""
    foreign = tmp_path / "fwal.db"
    conn = sqlite3.connect(foreign)
    conn.execute("pragma journal_mode=wal")
    conn.execute("create table runs (id integer, name text)")
    conn.commit()
    conn.close()
    store = TraceStore(tmp_path / "ag.db")  # Agora's store is in WAL mode
    _run(store, "r1", started="2026-12-04T10:00:00+00:00", question="2026-12-04T10:01:00+00:00",
         call="2026-12-04T10:00:30+00:00", finished="2026-12-04T10:02:00+00:00")
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ag.db", "fwal.db"]
    code, output = agora("report", "runs", "--db", foreign)
    assert code == 2 and "holds no Agora traces" in output
    code, output = agora("report", "runs", "--db", tmp_path / "ag.db", "--json")
    assert code == 0 and json.loads(output.splitlines()[0])["run_id"] == "r1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ag.db", "fwal.db"]

    live = TraceStore(tmp_path / "ag.db")  # a writer holds it open: its commits sit in the -wal file
    _run(live, "r2", started="2026-12-04T11:00:00+00:00")
    code, output = agora("report", "runs", "--db", tmp_path / "ag.db", "--json")
    assert code == 0 and {json.loads(line)["run_id"] for line in output.splitlines()} == {"r1", "r2"}
    live.close()


def test_report_run_and_question_refuse_a_folder_and_a_foreign_database_as_report_runs_does(tmp_path):
    """They said only "no run" on a database of another tool, and "no such trace database" for a
    folder (probe 15, 2c and the report run/question leftover)."""
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("create table people (name text)")
    conn.commit()
    conn.close()
    for args in (["report", "runs"], ["report", "run", "r1"], ["report", "question", "--run-id", "r1",
                                                                  "--question-id", "q1"]):
        code, output = agora(*args, "--db", other)
        assert (code, _error_line(output)) == (2, f"error: {other}: holds no Agora traces (no runs table; its "
                                                  "tables: people)"), args
        code, output = agora(*args, "--db", tmp_path)
        assert (code, _error_line(output)) == (2, f"error: {tmp_path}: is a folder, not a database file"), args
        code, output = agora(*args, "--db", tmp_path / "missing.db")
        assert (code, _error_line(output)) == (2, f"error: {tmp_path / 'missing.db'}: no such trace database"), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_an_agora_database_without_runs_lists_none(tmp_path):
    db = tmp_path / "t.db"
    TraceStore(db).close()
    code, output = agora("report", "runs", "--db", db)
    assert code == 0, output
    assert output.splitlines() == [f"no runs in {db}"]  # no empty table above it (probe 15, 2d)
    code, output = agora("report", "runs", "--db", db, "--json")
    assert (code, output) == (0, "")
