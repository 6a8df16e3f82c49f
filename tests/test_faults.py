"""Fault injection: a stub OpenAI server on 127.0.0.1 (tests/openai_stub.py) that answers HTTP 500,
invalid JSON, an HTML page, hangs past the timeout, returns fewer or zero choices, or dies mid-run;
and bad trace databases. Each test checks what is recorded and what a rerun does
(docs/guarantees.md). Issue 16, items 2, 3, 4, 6 and 9 (``model_calls.created_at``)."""

import json
import os
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlite_utils
from openai_stub import DROP, Raw, StubServer, chat_reply, default_handler
from waiting import wait_until
from typer.testing import CliRunner

from agora.agents.delegation import DelegationConfig
from agora.models.pool import ModelCallError, ModelPool, ModelSpec, pool_from_specs
from agora.models.testing import ScriptedChatModel
from agora.cli.main import app
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.runner import run_dataset, run_problems
from agora.tasks.problem import Problem
from agora.traces import store as store_module
from agora.traces.report import failed_questions, method_table, run_totals
from agora.traces.store import TraceStore, TraceStoreError

Q = [Problem("q1", "What is 2 + 2?", "4")]


def agora(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def pool_file(path: Path, url: str, models=("m",), max_retries: int = 1, timeout_s: float = 5) -> Path:
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nmodel = "{m}"\nbase_url = "{url}"\n'
                            f"max_retries = {max_retries}\ntimeout_s = {timeout_s}\n\n" for m in models))
    return path


def pool_of(url: str, *names: str, max_retries: int = 1, **fields):
    return pool_from_specs([ModelSpec(name=n, backend="openai", model=n, base_url=url, max_retries=max_retries,
                                      **fields) for n in names or ("m",)])


def run(store, pool, problems=Q, config=DelegationConfig(n_agents=1, k_samples=2), run_id="r", **kw):
    return run_problems(build_delegation_graph(), problems, store=store, run_id=run_id, protocol="align",
                        context=DelegationContext(pool=pool, config=config), config={"n": config.n_agents},
                        pool_description=pool.describe(), dataset={"format": "test"}, **kw)


def status(code: int, message: str = "boom"):
    return lambda path, body: (code, {"error": {"message": message}})


# ----------------------------------------------------------------------------- item 2: failed questions


def test_persistent_500_records_no_answer_exits_nonzero_and_a_rerun_on_a_working_server_answers_both(tmp_path):
    db = tmp_path / "t.db"
    with StubServer(status(500)) as broken:
        pool = pool_file(tmp_path / "pool.toml", broken.base_url)
        out = agora("run", "align", "--limit", 2, "--pool", pool, "--db", db, "--run-id", "r")
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output
    [line] = error_lines(out)
    assert "2 of 2 questions failed" in line and "InternalServerError" in line and "--run-id r" in line
    t = sqlite_utils.Database(db)
    assert t["questions"].count == 0 and t["results"].count == 0  # nothing recorded as answered
    calls = list(t["model_calls"].rows)
    assert len(calls) == 2 * 2 * 2  # 2 questions × 2 agents × (1 + 1 retry), every attempt a row
    assert all("InternalServerError" in c["error"] and c["completion"] is None for c in calls)
    run_row = t["runs"].get("r")
    assert run_row["status"] == "failed" and json.loads(run_row["summary"])["failed"] == 2

    with StubServer() as fixed:  # the same pool, its server back on another port
        pool_file(tmp_path / "pool.toml", fixed.base_url)
        out = agora("run", "align", "--limit", 2, "--pool", pool, "--db", db, "--run-id", "r")
    assert out.exit_code == 0, out.output
    assert "already done" not in out.output  # nothing was counted as done by the broken run
    rows = list(t["questions"].rows)
    assert len(rows) == 2 and all(r["answer"] == "4" for r in rows)
    assert t["runs"].get("r")["status"] == "finished"
    assert sum(c["error"] is None for c in t["model_calls"].rows) == 2 * 2 * 3


def hang(release: threading.Event):
    def slow(path, body):
        release.wait(10)
        return 200, chat_reply(body)
    return slow


NO_CHOICES_FIELD = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
FAULTS = {
    "http 500": (status(500), {}, "InternalServerError"),
    "http 502 html": (lambda p, b: (502, Raw("<html>bad gateway</html>", "text/html")), {}, "InternalServerError"),
    "invalid json": (lambda p, b: (200, Raw('{"choices": [')), {}, "JSONDecodeError"),
    "html page": (lambda p, b: (200, Raw("<html><body>maintenance</body></html>", "text/html")), {},
                  "not a completion"),
    "zero choices": (lambda p, b: (200, chat_reply(b, choices=0)), {}, "EmptyResponseError"),
    "no choices field": (lambda p, b: (200, NO_CHOICES_FIELD), {}, "EmptyResponseError"),
    "context too long": (status(400, "This model's maximum context length is 2048 tokens"), {}, "BadRequestError"),
    "hang": (None, {"timeout_s": 0.3}, "APITimeoutError"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_question_whose_every_call_fails_is_not_answered_and_a_rerun_retries_it(tmp_path, fault):
    handler, fields, error = FAULTS[fault]
    release = threading.Event()
    store = TraceStore(tmp_path / "t.db")
    with StubServer(handler or hang(release)) as srv:
        pool = pool_of(srv.base_url, **fields)
        first = run(store, pool)
        release.set()
        assert [q.problem.id for q in first.failed] == ["q1"] and first.outcomes == []
        assert error in first.failed[0].error
        assert store.questions("r") == [] and store.finished_questions("r") == set()
        calls = store.calls("r", "q1")
        assert len(calls) == 2 and all(error in c["error"] for c in calls)  # both attempts are rows
        assert [c["attempt"] for c in sorted(calls, key=lambda c: c["attempt"])] == [0, 1]
        assert store.get_run("r")["status"] == "failed"
        assert failed_questions(store, "r").keys() == {"q1"} and run_totals(store, "r")["failed_questions"] == 1

        srv.handler = default_handler  # the server is fixed
        second = run(store, pool)
    assert second.resumed and second.skipped == 0 and not second.failed
    assert [q.problem.id for q in second.outcomes] == ["q1"]
    [row] = store.questions("r")
    assert row["answer"] == "4" and row["correct"] == 1 and row["model_calls"] == 2
    assert store.get_run("r")["status"] == "finished"
    assert failed_questions(store, "r") == {}
    assert sum(c["error"] is not None for c in store.calls("r")) == 2  # the failed attempts stay, once


@pytest.mark.parametrize("error", [
    ValueError("Failed to load model from file: broken.gguf"),  # an unloadable GGUF (llama.cpp)
    ValueError("Requested tokens (3000) exceed context window of 2048"),  # a prompt longer than n_ctx
])
def test_an_in_process_model_that_always_raises_gives_a_failed_question(tmp_path, error):
    def raises(chat, index):
        raise error

    store = TraceStore(tmp_path / "t.db")
    broken = ModelPool.from_chat_models({"m": ScriptedChatModel(respond=raises)}, max_retries=0)
    out = run(store, broken)
    assert [q.problem.id for q in out.failed] == ["q1"] and str(error) in out.failed[0].error
    assert store.questions("r") == [] and store.get_run("r")["status"] == "failed"
    [row] = store.calls("r")
    assert str(error) in row["error"]
    working = ModelPool.from_chat_models({"m": ScriptedChatModel(responses=["The answer is 4."], cycle=True)})
    again = run(store, working)
    assert [q.problem.id for q in again.outcomes] == ["q1"] and store.questions("r")[0]["correct"] == 1


def test_partial_failure_answers_from_the_calls_that_succeeded_and_counts_the_failed_method(tmp_path):
    def by_model(path, body):
        return (500, {"error": {"message": "down"}}) if body["model"] == "bad" else (200, chat_reply(body))

    store = TraceStore(tmp_path / "t.db")
    with StubServer(by_model) as srv:
        out = run(store, pool_of(srv.base_url, "bad", "good"),
                  config=DelegationConfig(n_agents=2, k_samples=2, models=("bad", "good")))
    assert not out.failed and out.outcomes[0].answer == "4"
    [row] = store.questions("r")
    assert row["answer"] == "4" and row["correct"] == 1 and row["model_calls"] == 2
    results = {r["method"]: r for r in store.results("r")}
    # single_agent is agent 0's first sample: agent 0 ("bad") drew none, so it failed (NULL), not wrong (0)
    assert results["single_agent"]["samples"] == 0 and results["single_agent"]["correct"] is None
    assert results["align"]["correct"] == 1
    table = {m.method: m for m in method_table(store, "r")}
    assert (table["single_agent"].failed, table["single_agent"].questions) == (1, 0)
    assert (table["align"].failed, table["align"].accuracy) == (0, 1.0)
    errors = [c for c in store.calls("r") if c["error"]]
    assert len(errors) == 2 and {c["model"] for c in errors} == {"bad"}


def test_fewer_choices_than_asked_answers_from_those_returned(tmp_path):
    sent = []

    def one_then_none(path, body):
        sent.append(body["n"])
        return 200, chat_reply(body, choices=1 if len(sent) == 1 else 0)

    store = TraceStore(tmp_path / "t.db")
    with StubServer(one_then_none) as srv:
        out = run(store, pool_of(srv.base_url), config=DelegationConfig(n_agents=1, k_samples=3))
    assert sent == [3, 2]  # asked again for the two missing, got none, stopped
    assert out.outcomes[0].answer == "4" and out.outcomes[0].methods["align"]["samples"] == 1
    calls = store.calls("r", "q1")
    assert len(calls) == 1 and calls[0]["error"] is None


def test_a_server_that_dies_mid_question_stops_the_run_keeps_its_attempts_and_the_rerun_resumes(tmp_path):
    problems = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in (1, 2, 3)]

    def dies_on_q2(path, body):
        return (200, DROP) if "2 + 2" in body["messages"][-1]["content"] else (200, chat_reply(body))

    store = TraceStore(tmp_path / "t.db")
    with StubServer(dies_on_q2) as srv:
        pool = pool_of(srv.base_url, max_retries=1)
        with pytest.raises(ModelCallError):
            run(store, pool, problems)
        assert store.finished_questions("r") == {"q1"}
        failed = [c for c in store.calls("r") if c["error"]]
        assert len(failed) == 2 and {c["question_id"] for c in failed} == {"q2"}  # both attempts are rows
        assert all("ModelUnavailableError" in c["error"] for c in failed)
        assert store.get_run("r")["status"] == "failed"
        srv.handler = default_handler
        pool = pool_of(srv.base_url, max_retries=1)  # a fresh pool: the endpoint is not marked dead
        out = run(store, pool, problems)
    assert out.skipped == 1 and [q.problem.id for q in out.outcomes] == ["q2", "q3"]
    assert store.get_run("r")["status"] == "finished"
    assert [q["question_id"] for q in store.questions("r")] == ["q1", "q2", "q3"]


def test_comed_with_every_call_failing_records_nothing_and_a_rerun_answers(tmp_path):
    db = tmp_path / "t.db"
    args = ["run", "comed", "--limit", 2, "--db", db, "--run-id", "c", "--no-router", "--baselines", "none",
            "--samples", 2]
    with StubServer(status(500)) as broken:
        pool = pool_file(tmp_path / "pool.toml", broken.base_url, models=("a", "b"), max_retries=0)
        out = agora(*args, "--pool", pool)
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output and "2 of 2 questions failed" in error_lines(out)[0]
    t = sqlite_utils.Database(db)
    assert t["questions"].count == 0 and t["model_calls"].count > 0
    assert all(c["error"] for c in t["model_calls"].rows)
    with StubServer() as fixed:
        pool_file(tmp_path / "pool.toml", fixed.base_url, models=("a", "b"), max_retries=0)
        out = agora(*args, "--pool", pool)
    assert out.exit_code == 0, out.output
    assert [r["answer"] for r in t["questions"].rows] == ["4", "4"]


# ----------------------------------------------------------------------------- item 6: every attempt a row


def test_a_zero_choice_reply_is_a_model_calls_row(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    with StubServer(lambda p, b: (200, chat_reply(b, choices=0))) as srv:
        run(store, pool_of(srv.base_url, max_retries=0))
    [row] = sqlite_utils.Database(tmp_path / "t.db")["model_calls"].rows
    assert "zero choices" in row["error"] and row["question_id"] == "q1" and row["node"] == "agent_sample"


# ----------------------------------------------------------------------------- item 9: created_at


def test_created_at_is_when_the_call_started_not_when_it_was_recorded(tmp_path):
    def slow(path, body):
        time.sleep(1.6)  # the call's own latency: the thing this test measures
        return 200, chat_reply(body)

    store = TraceStore(tmp_path / "t.db")
    wall, mono = datetime.now(timezone.utc), time.monotonic()
    with StubServer(slow) as srv:
        run(store, pool_of(srv.base_url))
    [request] = srv.requests
    arrived = wall + timedelta(seconds=request["start"] - mono)  # when the server got the request
    rows = [c for c in store.calls("r") if c["error"] is None]
    assert len(rows) == 2
    for row in rows:  # the call's start (before the request reached the server), not ≥ 1.6 s after it
        assert -1.5 < (datetime.fromisoformat(row["created_at"]) - arrived).total_seconds() <= 0.05


# ----------------------------------------------------------------------------- item 3: another pool


def test_resuming_a_run_with_another_pool_is_refused_but_a_moved_server_is_not(tmp_path):
    db = tmp_path / "t.db"
    with StubServer() as srv:
        first = pool_file(tmp_path / "a.toml", srv.base_url)
        args = ["run", "align", "--limit", 1, "--agents", 1, "--samples", 1, "--db", db, "--run-id", "r"]
        assert agora(*args, "--pool", first).exit_code == 0
        other = pool_file(tmp_path / "b.toml", srv.base_url, models=("other",))
        out = agora(*args, "--pool", other, "--limit", 2)
        assert out.exit_code == 2 and "Traceback" not in out.output
        assert error_lines(out) == [f"error: run id 'r' in {db} was started with other pool; rerun with the "
                                    "same options to resume it, or pick a new --run-id"]
        changed = tmp_path / "c.toml"
        changed.write_text(first.read_text() + 'system_prompt = "Answer in French."\n')
        assert agora(*args, "--pool", changed).exit_code == 2
    with StubServer() as moved:  # the same models reached at another address: resumes
        pool_file(tmp_path / "a.toml", moved.base_url, max_retries=3, timeout_s=9)
        out = agora(*args, "--pool", first, "--limit", 2)
    assert out.exit_code == 0, out.output
    assert "resumed: 1 of 2" in out.output
    assert sqlite_utils.Database(db)["questions"].count == 2


def test_store_compares_the_pool_on_resume():
    store = TraceStore(":memory:")
    pool = [{"name": "m", "backend": "openai", "model": "x", "base_url": "http://a/v1"}]
    store.start_run("r", "align", config={}, pool=pool, dataset={})
    assert store.start_run("r", "align", config={}, pool=[{**pool[0], "base_url": "http://b/v1"}], dataset={})
    for other in ([{**pool[0], "model": "y"}], pool + [{"name": "n", "backend": "openai", "model": "x"}]):
        with pytest.raises(ValueError, match="other pool"):
            store.start_run("r", "align", config={}, pool=other, dataset={})


# ----------------------------------------------------------------------------- item 4: bad databases


@pytest.fixture
def served_pool(tmp_path):
    with StubServer() as srv:
        yield pool_file(tmp_path / "pool.toml", srv.base_url)


def run_align(pool, db, *extra):
    return agora("run", "align", "--limit", 1, "--agents", 1, "--samples", 1, "--pool", pool, "--db", db,
                 "--run-id", "r", *extra)


def corrupt(path: Path) -> Path:
    """A file with SQLite's header and garbage after it."""
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    return path


def folder(path: Path) -> Path:
    path.mkdir()
    return path


def csv_file(path: Path) -> Path:
    path.write_text("id,name\n1,x\n" * 100)
    return path


def under_a_file(path: Path) -> Path:
    path.write_text("x")
    return path / "t.db"


BAD_DBS = {
    "a folder": (folder, "is a folder"),
    "not sqlite": (csv_file, "not an SQLite database"),
    "corrupt": (corrupt, "not an SQLite database, or a corrupt one"),
    "/dev/null": (lambda p: Path("/dev/null"), "not a regular file"),
    "under a file": (under_a_file, "cannot create"),
}


@pytest.mark.parametrize("case", sorted(BAD_DBS))
def test_a_bad_db_path_is_one_line_and_exit_2(tmp_path, served_pool, case):
    make, message = BAD_DBS[case]
    db = make(tmp_path / "bad.db")
    before = db.read_bytes() if db.is_file() and db != Path("/dev/null") else None
    out = run_align(served_pool, db)
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    [line] = error_lines(out)
    assert line.startswith(f"error: {db}") and message in line
    if before is not None:
        assert db.read_bytes() == before  # not overwritten


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_db_file_is_one_line_and_exit_2(tmp_path, served_pool):
    db = tmp_path / "t.db"
    TraceStore(db).close()
    db.chmod(0o444)
    out = run_align(served_pool, db)
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = error_lines(out)
    assert line.startswith(f"error: {db}") and "not writable" in line


def test_a_checkpoints_path_that_is_a_folder_is_refused_before_the_run_starts(tmp_path, served_pool):
    db = tmp_path / "t.db"
    (tmp_path / "t.db.checkpoints").mkdir()
    out = run_align(served_pool, db)
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert error_lines(out) == [f"error: {db}.checkpoints: is a folder, not a database file"]
    assert sqlite_utils.Database(db)["runs"].count == 0  # no run row left "running"


def hold_write_lock(db: Path, seconds: float | None = None, until: threading.Event | None = None) -> threading.Thread:
    """Another connection takes the write lock of ``db`` (as a second process would) and holds it for
    ``seconds``, or until ``until`` is set; returns once the lock is held."""
    ready = threading.Event()

    def hold():
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        if until is not None:
            until.wait(300)
        else:
            time.sleep(seconds)  # the lock held for a set time: the contention under test
        conn.execute("COMMIT")
        conn.close()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert ready.wait(300), "the write lock was not taken"
    return t


def test_a_lock_held_past_the_busy_timeout_is_one_line_and_exit_2(tmp_path, served_pool, monkeypatch):
    db = tmp_path / "t.db"
    TraceStore(db).close()
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.3)
    # held until the run has ended: a lock held for a set time (2 s) was free again when a run on a
    # busy machine took longer than that to reach its first write, and the run then succeeded
    release = threading.Event()
    holder = hold_write_lock(db, until=release)
    try:
        out = run_align(served_pool, db)
    finally:
        release.set()
        holder.join()
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = error_lines(out)
    assert "locked by another process" in line
    assert sqlite_utils.Database(db)["runs"].count == 0


def test_a_lock_released_within_the_busy_timeout_is_waited_for(tmp_path, served_pool, monkeypatch):
    db = tmp_path / "t.db"
    TraceStore(db).close()
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 10.0)
    holder = hold_write_lock(db, 0.5)
    out = run_align(served_pool, db)
    holder.join()
    assert out.exit_code == 0, out.output
    assert sqlite_utils.Database(db)["questions"].count == 1


def test_an_sqlite_error_mid_run_marks_the_run_failed_and_exits_2(tmp_path, served_pool, monkeypatch):
    def locked(self, *args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(TraceStore, "record_question", locked)
    db = tmp_path / "t.db"
    out = run_align(served_pool, db)
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = error_lines(out)
    assert "locked by another process" in line
    assert sqlite_utils.Database(db)["runs"].get("r")["status"] == "failed"


def test_an_interrupted_run_is_marked_interrupted_not_running(tmp_path, served_pool, monkeypatch):
    def ctrl_c(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(TraceStore, "record_question", ctrl_c)
    out = run_align(served_pool, tmp_path / "t.db")
    assert out.exit_code == 130
    assert sqlite_utils.Database(tmp_path / "t.db")["runs"].get("r")["status"] == "interrupted"


@pytest.mark.parametrize("content", [None, b""])
def test_report_duels_on_a_missing_or_empty_db_writes_nothing(tmp_path, content):
    db = tmp_path / "t.db"
    if content is not None:
        db.write_bytes(content)
    out = agora("report", "duels", "--db", db, "--out", tmp_path / "out")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert len(error_lines(out)) == 1
    if content is None:
        assert not db.exists()
    else:
        assert db.read_bytes() == b""  # no schema written into it
    assert not any(p.name.startswith("t.db-") for p in tmp_path.iterdir())  # nor a WAL beside it


def test_readonly_store_refuses_a_missing_file_and_a_non_database():
    with pytest.raises(TraceStoreError, match="no such trace database"):
        TraceStore("/nonexistent/t.db", readonly=True)


# ============================================================================= issue 33: the third round
# Each test below fails on the code before issue 33 (commit 3ea9a0d) and passes now.

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from agora.graphs.checkpoint import InlineAsyncSqliteSaver, UnsafeCheckpointError  # noqa: E402
from agora.graphs.run_checkpoints import open_checkpointer  # noqa: E402
from agora.traces.store import RunLockedError, run_lock  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def subprocess_env() -> dict:
    """The environment of an ``agora`` subprocess: this source tree first on the path when its
    folder is named ``agora`` (else the installed package, editable or not, as in this process)."""
    first = [str(REPO.parent)] if REPO.name == "agora" else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*first, os.environ.get("PYTHONPATH", "")]), "COLUMNS": "300"}


def hold_run_lock(db: Path, run_id: str) -> subprocess.Popen:
    """Another process that holds ``run_id``'s live-run lock on ``db`` until killed."""
    code = ("import sys, time; from agora.traces.store import run_lock\n"
            "with run_lock(sys.argv[1], sys.argv[2]):\n    print('held', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db), run_id], stdout=subprocess.PIPE, text=True,
                            env=subprocess_env())
    assert proc.stdout.readline().strip() == "held"
    return proc


# ----------------------------------------------------------------------------- item 1: one process per run id


def test_a_run_id_running_in_another_process_is_refused_naming_it_and_a_dead_holders_lock_is_taken_over(
        tmp_path, served_pool):
    db = tmp_path / "t.db"
    other = hold_run_lock(db, "r")
    try:
        out = run_align(served_pool, db)
        assert out.exit_code == 2, out.output
        [line] = error_lines(out)
        assert f"pid {other.pid}" in line and "run id 'r' is being run by another process" in line
        assert not db.exists() or sqlite_utils.Database(db)["model_calls"].count == 0  # nothing ran twice
        assert run_align(served_pool, db, "--run-id", "other").exit_code == 0  # another run id is not held
    finally:
        other.kill()  # as kill -9: its lock file stays, its flock goes with the process
        other.wait()
    out = run_align(served_pool, db)
    assert out.exit_code == 0, out.output
    assert sqlite_utils.Database(db)["questions"].count == 2  # run r's and run other's
    assert not (tmp_path / "t.db.locks").exists()  # released when the run ended


def test_the_same_run_id_twice_at_once_in_one_process_is_refused_by_the_runner(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    with run_lock(store.path, "r"):
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            run(store, ModelPool.from_chat_models({"m": ScriptedChatModel(responses=["4"], cycle=True)}))
    assert store.get_run("r") is None  # refused before its row was written


# ----------------------------------------------------------------------------- item 2: lone surrogates


def test_a_lone_surrogate_in_a_model_reply_and_a_gold_answer_is_recorded_safely(tmp_path, caplog):
    store = TraceStore(tmp_path / "t.db")
    with StubServer(lambda p, b: (200, chat_reply(b, texts=["The answer is 4. \ud800"]))) as srv:
        out = run(store, pool_of(srv.base_url), problems=[Problem("q1", "What is 2 + 2?", "4\ud800")])
    assert not out.failed and [q.problem.id for q in out.outcomes] == ["q1"]
    [row] = store.questions("r")
    assert row["gold"] == "4\ufffd"
    calls = store.calls("r", "q1")
    assert len(calls) == 2 and all(c["completion"] == "The answer is 4. \ufffd" and c["error"] is None for c in calls)
    assert "U+FFFD" in caplog.text
    assert store.get_run("r")["status"] == "finished"


# ----------------------------------------------------------------------------- item 3: foreign and other-version DBs


def foreign_db(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("create table items (id integer primary key, name text)")
    db.execute("insert into items values (1, 'kept')")
    db.commit()
    db.close()
    return path


def foreign_runs_table(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("create table runs (id integer primary key, name text, started real)")
    db.commit()
    db.close()
    return path


def trace_db(path: Path, sql: str) -> Path:
    """A trace database with one question recorded, then changed by ``sql``."""
    store = TraceStore(path)
    store.start_run("old", "align", config={}, pool=[], dataset={})
    store.record_question("old", "align", {"question_id": "q0", "question": "1 + 1?", "gold": "2", "answer": "2"},
                          {}, [])
    store.close()
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.commit()
    db.execute("pragma wal_checkpoint(TRUNCATE)")
    db.close()
    return path


OTHER_DBS = {
    "another tool's tables": (foreign_db, "not an Agora trace database (it holds items"),
    "another tool's runs table": (foreign_runs_table, "table runs has primary key (id)"),
    "a newer NOT NULL column": (lambda p: trace_db(p, "alter table questions add column rubric text not null "
                                                      "default 'x'; create table q2 as select * from questions; "
                                                      "drop table questions; create table questions (run_id text, "
                                                      "question_id text, idx int, source text, kind text, question "
                                                      "text, gold text, answer text, correct int, wall_s float, "
                                                      "model_calls int, prompt_tokens int, completion_tokens int, "
                                                      "detail text, finished_at text, n_choices int, rubric text not "
                                                      "null, primary key (run_id, question_id)); insert into "
                                                      "questions select * from q2; drop table q2;"),
                                "has NOT NULL column(s) rubric without a default"),
    "a model_calls view": (lambda p: trace_db(p, "drop table model_calls; create view model_calls as select * from "
                                                 "results;"), "model_calls is a view"),
}


@pytest.mark.parametrize("case", sorted(OTHER_DBS))
def test_a_db_of_another_tool_or_version_is_refused_before_anything_is_written(tmp_path, served_pool, case):
    make, message = OTHER_DBS[case]
    db = make(tmp_path / "other.db")
    before = db.read_bytes()
    conn = sqlite3.connect(db)
    mode = conn.execute("pragma journal_mode").fetchone()[0]
    conn.close()
    out = run_align(served_pool, db)
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    [line] = error_lines(out)
    assert line.startswith(f"error: {db}: ") and message in line and "nothing was written" in line
    assert db.read_bytes() == before  # no table, column, row or journal-mode change
    conn = sqlite3.connect(db)
    assert conn.execute("pragma journal_mode").fetchone()[0] == mode
    conn.close()
    kept = ["other.db", "pool.toml"] if mode == "delete" else ["other.db", "other.db-shm", "other.db-wal", "pool.toml"]
    assert sorted(p.name for p in tmp_path.iterdir()) in (kept, ["other.db", "pool.toml"])  # no checkpoints, lock


@pytest.mark.parametrize("sql", ["alter table model_calls drop column partner;",
                                 "alter table questions drop column gold;"])
def test_an_older_trace_db_missing_a_column_gets_it_and_keeps_its_rows(tmp_path, served_pool, sql):
    """A column missing from a table with Agora's primary key is added (NULL in old rows) before the
    run starts: before issue 33 the first question's work was lost when its insert failed."""
    db = trace_db(tmp_path / "t.db", sql)
    out = run_align(served_pool, db)
    assert out.exit_code == 0, out.output
    t = sqlite_utils.Database(db)
    assert "partner" in t["model_calls"].columns_dict and "gold" in t["questions"].columns_dict
    assert {r["question_id"] for r in t["questions"].rows} == {"q0", "gsm8k_test_sample-1"}


def test_a_foreign_checkpoints_file_is_refused_untouched(tmp_path, served_pool):
    db = tmp_path / "t.db"
    foreign_db(tmp_path / "t.db.checkpoints")
    before = (tmp_path / "t.db.checkpoints").read_bytes()
    out = run_align(served_pool, db)
    assert out.exit_code == 2
    [line] = error_lines(out)
    assert "t.db.checkpoints: not an Agora checkpoints file (it holds items)" in line
    assert (tmp_path / "t.db.checkpoints").read_bytes() == before


# ----------------------------------------------------------------------------- item 4: an edited data file; settings named


def test_a_data_file_edited_between_a_run_and_its_resume_is_refused_naming_the_question(tmp_path, served_pool):
    data = tmp_path / "q.jsonl"
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in (1, 2, 3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "t.db"
    args = ["run", "align", "--data", data, "--agents", 1, "--samples", 1, "--pool", served_pool, "--db", db,
            "--run-id", "r"]
    assert agora(*args, "--limit", 2).exit_code == 0
    rows[2]["question"] = "What is 30 + 30?"  # not yet run: a larger --limit still resumes
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert agora(*args).exit_code == 0
    dataset = json.loads(sqlite_utils.Database(db)["runs"].get("r")["dataset"])
    assert (dataset["limit"], dataset["count"], len(dataset["question_sha256"])) == (None, 3, 3)  # what it holds now
    out = agora(*args, "--limit", 1)  # a smaller --limit on a resume: the run still holds 3
    assert out.exit_code == 0
    assert ": 1 gsm8k problem," in out.output and "resumed: 1 of 1 questions already done" in out.output
    assert "the run holds 3 questions (an earlier sitting ran more); the tables below cover all 3" in out.output
    dataset = json.loads(sqlite_utils.Database(db)["runs"].get("r")["dataset"])
    assert (dataset["limit"], dataset["count"]) == (None, 3)
    rows[1]["answer"] = "#### 5"  # a recorded question's gold changed
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = agora(*args)
    assert out.exit_code == 2, out.output
    [line] = error_lines(out)
    assert "the data changed since the run started: question(s) 'q2' differ" in line
    assert sqlite_utils.Database(db)["runs"].get("r")["status"] == "finished"  # left as it was


def test_a_run_resumes_on_its_data_file_at_another_path_and_refuses_one_with_other_questions(tmp_path, served_pool):
    """``agora run align`` moved to another machine (the data file elsewhere) resumes when the file there
    holds the same questions, with the results of a run in one go; a copy whose recorded question was
    edited is refused, naming the run id, both paths and how many questions differ."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in (1, 2, 3)]
    first, moved, edited = (folder(tmp_path / d) / "q.jsonl" for d in ("a", "b", "c"))
    for path in (first, moved):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = lambda data, db: ["run", "align", "--data", data, "--agents", 1, "--samples", 2, "--pool",  # noqa: E731
                             served_pool, "--db", db, "--run-id", "r"]
    db = tmp_path / "t.db"
    assert agora(*args(first, db), "--limit", 2).exit_code == 0
    out = agora(*args(moved, db))
    assert out.exit_code == 0, out.output
    assert "resumed: 2 of 3 questions already done" in out.output
    assert agora(*args(first, tmp_path / "once.db")).exit_code == 0
    key = "select question_id, method, answer, correct from results order by question_id, method"
    assert list(sqlite_utils.Database(db).query(key)) == list(sqlite_utils.Database(tmp_path / "once.db").query(key))
    assert json.loads(sqlite_utils.Database(db)["runs"].get("r")["dataset"])["path"] == str(first)  # as started
    rows[1]["answer"] = "#### 5"
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = agora(*args(edited, db))
    assert out.exit_code == 2, out.output
    line = " ".join(out.output.split())  # the console may wrap it
    assert (f"run id 'r' in {db} was started on \"{first}\" and is resumed on \"{edited}\": 1 of the 3 questions "
            "compared differ (text, gold or options; e.g. 'q2')") in line


def test_a_moved_run_whose_file_was_renamed_says_that_ids_come_from_the_files_name(tmp_path, served_pool):
    """Questions without an ``id`` field are numbered from the file's name (``q-1``...): a moved file
    under another name holds none of the run's ids, and the refusal says to keep the name (probe 15)."""
    rows = [{"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in (1, 2)]
    first, renamed = folder(tmp_path / "a") / "q.jsonl", folder(tmp_path / "b") / "other.jsonl"
    for path in (first, renamed):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = lambda data: ["run", "align", "--data", data, "--agents", 1, "--samples", 1, "--pool",  # noqa: E731
                         served_pool, "--db", tmp_path / "t.db", "--run-id", "r"]
    assert agora(*args(first), "--limit", 1).exit_code == 0
    out = agora(*args(renamed))
    assert out.exit_code == 2, out.output
    line = " ".join(out.output.split())
    assert ("none of its question ids is one of the run's; questions without an `id` field are numbered from "
            "the file's name: if it holds the same questions, name it 'q.jsonl' as before)") in line


def test_a_run_recorded_before_question_hashes_resumes_at_another_path_on_its_recorded_questions():
    """A run whose dataset has no per-question hashes (recorded before them) is compared on its
    ``questions`` rows: the same text and gold at another path resume (and the hashes are stored from
    then on), an edited one is refused, and with no recorded question to compare the path is a difference."""
    mc = Problem("m1", "Which?\nA. w\nB. x\nC. y\nD. z", "A", kind="mc", n_choices=4)
    problems = [Problem("q1", "What is 2 + 2?", "4"), mc]

    def old_run(store):
        store.start_run("r", "align", config={}, pool=[], dataset={"path": "/old/q.jsonl", "format": "gsm8k"})
        for i, p in enumerate(problems):
            store.record_question("r", "align", {"question_id": p.id, "idx": i, "kind": p.kind,
                                                 "question": p.question, "gold": p.gold}, {}, [])
        store.db.execute("update questions set n_choices = null")  # a row from before the column
        store.finish_run("r")

    def resume(store, moved):
        return store.start_run("r", "align", config={}, pool=[],
                               dataset=run_dataset({"path": "/new/q.jsonl", "format": "gsm8k"}, moved))

    store = TraceStore(":memory:")
    old_run(store)
    assert resume(store, problems + [Problem("q3", "What is 3 + 3?", "6")]) is True
    kept = json.loads(store.get_run("r")["dataset"])
    assert kept["path"] == "/old/q.jsonl" and set(kept["question_sha256"]) == {"q1", "m1", "q3"}
    store = TraceStore(":memory:")
    old_run(store)
    with pytest.raises(ValueError, match=r"1 of the 2 questions compared differ \(text, gold or options; e\.g\. 'q1'\)"):
        resume(store, [Problem("q1", "What is 2 + 2?", "5"), mc])
    with pytest.raises(ValueError, match=r"other path \(data path: \"/new/q.jsonl\" here, \"/old/q.jsonl\" in the run\)"):
        resume(store, [Problem("q9", "What is 9 + 9?", "18")])

    def long(path):  # a long path keeps its quotes and its end, where the file name is (probe 15, 1e)
        return store.start_run("r", "align", config={}, pool=[],
                               dataset=run_dataset({"path": path, "format": "gsm8k"}, [Problem("q9", "9 + 9?", "18")]))
    with pytest.raises(ValueError, match=r'data path: "/work/main/t…sm8k_test_sample_v2\.jsonl" here, '
                                         r'"/old/q\.jsonl" in the run'):
        long("/work/main/tasks/data/some/deep/folder/gsm8k_test_sample_v2.jsonl")


def test_a_refused_resume_names_the_setting_that_differs(tmp_path, served_pool):
    db = tmp_path / "t.db"
    assert run_align(served_pool, db, "--max-tokens", 64).exit_code == 0
    out = run_align(served_pool, db, "--max-tokens", 256)
    assert out.exit_code == 2
    [line] = error_lines(out)
    assert "was started with other settings (max_tokens: 256 here, 64 in the run)" in line
    # only the error: no run header, empty progress bar or blank line before it (probes 15, 1b, and 16)
    assert out.output.splitlines() == [line], out.output


# ----------------------------------------------------------------------------- item 5: one line, not a traceback


def test_a_full_disk_mid_run_is_one_line_marks_the_run_failed_and_the_rerun_resumes(tmp_path, monkeypatch, caplog):
    """The checkpointer's deferred commit (its timer) meets a full disk: no traceback per timer, one
    line, exit 2, the run marked failed, and a rerun once there is space finishes every question."""
    full = threading.Event()
    commit = InlineAsyncSqliteSaver.commit

    def commit_on_a_full_disk(self):
        if full.is_set() and self._pending:
            raise sqlite3.OperationalError("database or disk is full")
        return commit(self)

    record = TraceStore.record_question

    def record_then_fill(self, *args, **kwargs):
        record(self, *args, **kwargs)
        full.set()  # the disk fills up after the first question

    monkeypatch.setattr(InlineAsyncSqliteSaver, "commit", commit_on_a_full_disk)
    monkeypatch.setattr(TraceStore, "record_question", record_then_fill)
    delays = iter([0.0, 0.05] * 20)  # one agent answers later: the other's writes wait for the timer

    def slow(path, body):
        time.sleep(next(delays, 0.0))  # simulated model latency, the fault under test
        return 200, chat_reply(body)

    db = tmp_path / "t.db"
    with StubServer(slow) as srv:
        pool = pool_file(tmp_path / "pool.toml", srv.base_url)
        args = ["run", "align", "--limit", 3, "--agents", 2, "--samples", 1, "--pool", pool, "--db", db, "--run-id", "r"]
        out = agora(*args)
        assert out.exit_code == 2, out.output
        assert "Traceback" not in out.output and "Exception in callback" not in caplog.text
        [line] = error_lines(out)
        assert "the disk is full" in line and "rerun with the same --run-id" in line
        assert sqlite_utils.Database(db)["runs"].get("r")["status"] == "failed"
        full.clear()
        monkeypatch.setattr(TraceStore, "record_question", record)
        out = agora(*args)
    assert out.exit_code == 0, out.output
    assert sqlite_utils.Database(db)["questions"].count == 3


def test_a_server_reporting_1e30_usage_tokens_does_not_lose_the_question(tmp_path, caplog):
    def huge(path, body):
        reply = chat_reply(body)
        reply["usage"] = {"prompt_tokens": 10**30, "completion_tokens": 10**30, "total_tokens": 2 * 10**30}
        return 200, reply

    store = TraceStore(tmp_path / "t.db")
    with StubServer(huge) as srv:
        out = run(store, pool_of(srv.base_url))
    assert not out.failed and [q.problem.id for q in out.outcomes] == ["q1"]
    [row] = store.questions("r")
    assert row["answer"] == "4" and row["prompt_tokens"] is None  # beyond 64 bits: NULL, not a crash
    calls = store.calls("r", "q1")
    assert len(calls) == 2 and all(c["completion"] == "The answer is 4." for c in calls)
    assert "beyond 64 bits" in caplog.text


@pytest.mark.parametrize("command", [
    ("bench", "--limit", 1, "--protocols", "align"),
    ("train", "dpo", "--model", "m"),
    ("train", "grpo", "--model", "m", "--data", "synthetic"),
])
def test_out_naming_an_existing_file_is_refused_before_any_work(tmp_path, command):
    out_file = tmp_path / "report.md"
    out_file.write_text("mine")
    db = tmp_path / "t.db"
    out = agora(*command, "--db", db, "--out", out_file)
    assert out.exit_code == 2, out.output
    assert error_lines(out) == [f"error: --out {out_file}: names an existing file; it must be a folder (give a new "
                                "or existing folder)"]
    assert out_file.read_text() == "mine" and not db.exists()


@pytest.mark.parametrize("column", ["dataset", "config", "pool"])
def test_a_corrupt_json_runs_row_is_one_line_naming_the_row_and_column(tmp_path, served_pool, column):
    db = tmp_path / "t.db"
    assert run_align(served_pool, db).exit_code == 0
    sqlite_utils.Database(db)["runs"].update("r", {column: "{not json"})
    out = run_align(served_pool, db)
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = error_lines(out)
    assert f"runs row 'r', column {column}: not valid JSON" in line


# ----------------------------------------------------------------------------- item 7: signals


def agora_process(tmp_path, pool: Path, *extra) -> subprocess.Popen:
    args = ["run", "align", "--limit", 2, "--agents", 1, "--samples", 1, "--pool", pool, "--db", tmp_path / "t.db", *extra]
    return subprocess.Popen([sys.executable, "-m", "agora.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
                            cwd=tmp_path)


def test_sigterm_drains_marks_the_run_interrupted_and_exits_143_naming_the_resume_command(tmp_path):
    arrived, sent = threading.Event(), threading.Event()

    def slow(path, body):
        arrived.set()
        sent.wait(60)  # the call is in flight when SIGTERM comes: it answers only once the signal is sent
        return 200, chat_reply(body)

    with StubServer(slow) as srv:
        pool = pool_file(tmp_path / "pool.toml", srv.base_url)
        proc = agora_process(tmp_path, pool)  # no --run-id: the message names the generated one
        assert arrived.wait(300), proc.poll()  # the agora process's start: over 60 s on a busy machine
        proc.send_signal(signal.SIGTERM)
        sent.set()
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 143, err
        assert "Traceback" not in err
        [run_row] = sqlite_utils.Database(tmp_path / "t.db")["runs"].rows
        assert run_row["status"] == "interrupted"
        assert "resume with: agora run align --limit 2" in err and f"--run-id {run_row['run_id']}" in err
        resumed = agora("run", "align", "--limit", 2, "--agents", 1, "--samples", 1, "--pool", pool,
                        "--db", tmp_path / "t.db", "--run-id", run_row["run_id"])
    assert resumed.exit_code == 0, resumed.output
    assert sqlite_utils.Database(tmp_path / "t.db")["questions"].count == 2


def test_a_second_ctrl_c_ends_at_once_and_leaves_the_run_marked_interrupted(tmp_path):
    arrived, release = threading.Event(), threading.Event()

    def hangs(path, body):
        arrived.set()
        release.wait(30)
        return 200, chat_reply(body)

    with StubServer(hangs) as srv:
        pool = pool_file(tmp_path / "pool.toml", srv.base_url, timeout_s=30)
        proc = agora_process(tmp_path, pool, "--run-id", "r")
        lines, draining = [], threading.Event()

        def read_stderr():
            for line in proc.stderr:
                lines.append(line)
                if "Ctrl-C again" in line:  # the first Ctrl-C was handled: a drain is asked for
                    draining.set()

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        assert arrived.wait(300), proc.poll()  # the agora process's start: over 60 s on a busy machine
        proc.send_signal(signal.SIGINT)  # drain: waits for the model call in flight
        assert draining.wait(120), "".join(lines)
        proc.send_signal(signal.SIGINT)  # at once
        proc.wait(timeout=30)
        reader.join(30)
        err = "".join(lines)
        release.set()
    assert proc.returncode == 130, err
    assert "the run is marked interrupted" in err
    assert sqlite_utils.Database(tmp_path / "t.db")["runs"].get("r")["status"] == "interrupted"


# ----------------------------------------------------------------------------- item 9: JSON checkpoint rows


def test_a_json_typed_checkpoint_row_with_a_refused_constructor_raises(tmp_path):
    from langgraph.checkpoint.base import empty_checkpoint

    saver = open_checkpointer(tmp_path / "t.db")
    config = {"configurable": {"thread_id": "R:q1", "checkpoint_ns": ""}}
    saver.put(config, empty_checkpoint(), {}, {})
    crafted = {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": ["touch x"]}
    saver.conn.execute("update checkpoints set type = 'json', checkpoint = ?", [json.dumps(crafted).encode()])
    saver.conn.commit()
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        saver.get_tuple(config)
    saver.close()


def test_a_bench_id_running_elsewhere_is_refused(tmp_path, served_pool):
    db = tmp_path / "t.db"
    with run_lock(db, "b"):  # another holder of the bench id (a lock belongs to an open file)
        out = agora("bench", "--limit", 1, "--protocols", "align", "--pool", served_pool, "--db", db, "--run-id", "b",
                    "--out", tmp_path / "report")
    assert out.exit_code == 2, out.output
    [line] = error_lines(out)
    assert "run id 'b' is being run by another process" in line and f"pid {os.getpid()}" in line
    assert sqlite_utils.Database(db)["model_calls"].count == 0


def test_sigterm_asks_for_a_drain_and_the_handlers_are_restored(monkeypatch):
    from agora.cli import _shared

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with _shared.graceful_stop("r1") as control:
        os.kill(os.getpid(), signal.SIGTERM)
        assert control.drain_requested and control.drain_reason == "terminated"
        assert _shared._stop.signal == signal.SIGTERM
        assert _shared.resume_command().endswith("--run-id r1")
    assert {s: signal.getsignal(s) for s in before} == before  # and the grace timer is cancelled
    wait_until(lambda: not any(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate()),
               "the SIGTERM grace timer's thread to end", timeout_s=60)


def test_a_refused_resume_names_the_pool_and_data_differences():
    store = TraceStore(":memory:")
    pool = [{"name": "m", "backend": "openai", "model": "x"}]
    store.start_run("r", "align", config={"n": 2, "tau": 0.5}, pool=pool, dataset={"path": "a.jsonl", "format": "gsm8k"})
    with pytest.raises(ValueError) as refused:
        store.start_run("r", "align", config={"n": 2, "tau": 0.7}, pool=[{**pool[0], "model": "y"}],
                        dataset={"path": "b.jsonl", "format": "gsm8k"})
    first, second = str(refused.value).split("\n")
    assert "was started with other path, settings, pool (data path: \"b.jsonl\" here, \"a.jsonl\" in the run; " \
           "tau: 0.7 here, 0.5 in the run)" in first
    assert second == '  pool: m.model: "y" here, "x" in the run'


def test_a_bench_asks_the_same_refusal_start_run_raises_before_anything_runs():
    """``resume_refusal`` (asked by ``agora bench`` before it records anything) gives start_run's
    message, pool differences included, and says that nothing was run."""
    from agora.traces.resume import resume_refusal

    store = TraceStore(":memory:")
    pool = [{"name": "m", "backend": "openai", "model": "x"}]
    store.start_run("r", "align", config={"n": 2}, pool=pool, dataset={"path": "a.jsonl", "format": "gsm8k"})
    asked = resume_refusal(store, "r", "align", {"n": 3}, [{**pool[0], "model": "y"}],
                           {"path": "a.jsonl", "format": "gsm8k"})
    with pytest.raises(ValueError) as raised:
        store.start_run("r", "align", config={"n": 3}, pool=[{**pool[0], "model": "y"}],
                        dataset={"path": "a.jsonl", "format": "gsm8k"})
    first, second = asked.split("\n")
    assert first == ("run id 'r' in :memory: was started with other settings, pool (n: 3 here, 2 in the run); "
                     "rerun with the same options to resume it, or pick a new --run-id (nothing was run or recorded)")
    assert second == '  pool: m.model: "y" here, "x" in the run'
    assert str(raised.value) == asked.replace(" (nothing was run or recorded)", "")
    assert resume_refusal(store, "r", "align", {"n": 2}, pool, {"path": "a.jsonl", "format": "gsm8k"}) is None
    assert resume_refusal(store, "r", "comed", {"n": 2}, pool) == (
        "run id 'r' already holds a align run in :memory:; pick a new --run-id (nothing was run or recorded)")


def test_a_write_refused_by_the_file_system_mid_run_is_one_line_and_the_rerun_finishes(tmp_path, served_pool):
    """A real refused write, not a simulated one: the run's process may write files of at most
    400 kB (RLIMIT_FSIZE, as a nearly full disk), so its trace writes fail mid-run."""
    import resource

    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}? " + "x" * 2000,
                                        "answer": f"#### {2 * i}"}) + "\n" for i in range(40)))
    args = ["run", "align", "--data", data, "--agents", 2, "--samples", 2, "--pool", served_pool, "--db",
            tmp_path / "t.db", "--run-id", "r"]

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, resource.RLIM_INFINITY))

    proc = subprocess.run([sys.executable, "-m", "agora.cli", *map(str, args)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=tmp_path, preexec_fn=small_files, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception in callback" not in proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert "rerun with the same --run-id to resume" in line
    t = sqlite_utils.Database(tmp_path / "t.db")
    assert t["runs"].get("r")["status"] == "failed" and 0 < t["questions"].count < 40
    out = agora(*args)
    assert out.exit_code == 0, out.output
    assert t["questions"].count == 40


def test_a_lone_surrogate_in_a_duel_reply_is_recorded_safely(tmp_path, caplog):
    """Duels write through their own tables (traces/duels.py): a follower's reply with a lone
    surrogate is stored as U+FFFD, with a warning, and the duel is recorded (issue 33 item 2)."""
    from agora.graphs.duel import DuelConfig, DuelContext
    from agora.models.testing import ScriptedChatModel
    from agora.runs.duel import run_duels
    from agora.tasks import synthetic_problems

    def member(name):
        def respond(messages, i):
            last = messages[-1]["content"]
            return '{"score": 7}' if "Response to be evaluated" in last else f"{name} says \ud800 the answer is 4."
        return ScriptedChatModel(respond=respond)

    pool = ModelPool.from_chat_models({n: member(n) for n in ("a", "b", "c")}, max_retries=0)
    store = TraceStore(tmp_path / "t.db")
    out = run_duels(store, "d", DuelContext(pool, DuelConfig(mode="sparta", duels=1, iterations=1),
                                            synthetic_problems(2)))
    assert len(out.records) == 1
    [duel] = list(store.db.query("select answer_a, answer_b from duels where run_id = 'd'"))
    assert all("\ud800" not in duel[k] and duel[k].endswith(" the answer is 4.") for k in ("answer_a", "answer_b"))
    completions = [r["completion"] for r in store.db.query("select completion from model_calls where completion like '% says %'")]
    assert len(completions) == 2 and all("\ud800" not in c for c in completions)
