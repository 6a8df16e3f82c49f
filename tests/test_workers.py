"""Several workers on one Postgres run: ``agora run`` started N times on one run id shares the
questions out (``traces/claims.py``), a killed worker's question is taken over once its lease
expires, and the run holds exactly what one uninterrupted process records, nothing doubled.

The models are a loopback OpenAI stub (tests/openai_stub.py) whose replies depend on the prompt
only, so every worker, and a single process, gets the same answers. The worker to kill is the one
holding the question the stub is holding back (read from the ``claims`` table once the stub has that
request): the test waits on that event, not on time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from openai_stub import StubServer, chat_reply

N_QUESTIONS = 12
HELD = "q5"  # the question whose first request the stub holds until its worker is killed



def started(results: dict, name: str, db: str, work) -> threading.Thread:
    """A daemon thread running ``work(store)`` on its own store of ``db``; ``results[name]`` gets what
    it returns or the exception it raised (the test reads it)."""
    from agora.traces.store import TraceStore

    def go():
        store = TraceStore(db)
        try:
            results[name] = work(store)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            results[name] = exc
        finally:
            store.close()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread

def problems_file(path: Path) -> Path:
    rows = [{"id": f"q{i}", "question": f"Tom has {i} apples and gets {i} more. How many apples now?",
             "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(1, N_QUESTIONS + 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pool_file(path: Path, url: str) -> Path:
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nmodel = "{m}"\nbase_url = "{url}"\n'
                            "max_retries = 1\ntimeout_s = 120\n\n" for m in ("a", "b")))
    return path


class Replies:
    """Deterministic replies (the question's number read from the prompt: model ``a`` right, ``b``
    right on even numbers), holding back the first request for :data:`HELD` until ``release``."""

    def __init__(self) -> None:
        self.held_arrived = threading.Event()
        self.release = threading.Event()
        self.hold = True
        self.lock = threading.Lock()

    def __call__(self, path: str, body: dict) -> tuple[int, dict]:
        text = json.dumps(body.get("messages", ""))
        found = re.findall(r"Tom has (\d+) apples", text)
        i = int(found[-1]) if found else 0
        if i == int(HELD[1:]):
            with self.lock:
                hold, self.hold = self.hold, False
            if hold:
                self.held_arrived.set()
                self.release.wait(120)
                return 500, {"error": {"message": "worker gone"}}
        right = body.get("model") == "a" or i % 2 == 0
        return 200, chat_reply(body, [f"So the answer is {2 * i if right else 2 * i + 1}."])


def agora_run(pool: Path, data: Path, db: str, run_id: str = "r", **env: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "agora.cli", "run", "align", "--agents", "2", "--samples", "1", "--pool", str(pool),
           "--data", str(data), "--db", db, "--run-id", run_id, "--durability", "sync"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "AGORA_LEASE_S": "2", **env})


def recorded(url: str, run_id: str = "r") -> dict:
    import psycopg

    with psycopg.connect(url) as conn:
        questions = conn.execute("select question_id, answer, correct, model_calls, prompt_tokens, completion_tokens "
                                 "from questions where run_id = %s order by question_id", [run_id]).fetchall()
        results = conn.execute("select question_id, method, answer, correct, samples from results where run_id = %s "
                               "order by question_id, method", [run_id]).fetchall()
        calls = conn.execute("select question_id, count(*) from model_calls where run_id = %s and error is null "
                             "group by question_id order by question_id", [run_id]).fetchall()
        status = conn.execute("select status from runs where run_id = %s", [run_id]).fetchone()
    return {"questions": questions, "results": results, "calls": calls, "status": status[0] if status else None}


def test_three_workers_one_killed_record_what_one_process_records(tmp_path, postgres_server):
    data = problems_file(tmp_path / "apples.jsonl")
    replies = Replies()
    with StubServer(replies) as srv:
        pool = pool_file(tmp_path / "pool.toml", srv.base_url)
        # the reference: one uninterrupted process (nothing held back for it)
        replies.hold = False
        alone = postgres_server.database()
        one = agora_run(pool, data, alone)
        out, _ = one.communicate(timeout=300)
        assert one.returncode == 0, out
        reference = recorded(alone)
        assert len(reference["questions"]) == N_QUESTIONS and reference["status"] == "finished"

        replies.hold = True
        shared = postgres_server.database()
        workers = [agora_run(pool, data, shared) for _ in range(3)]
        try:
            for _ in range(240):  # the held request, or every worker gone (then their output says why)
                if replies.held_arrived.wait(1) or all(w.poll() is not None for w in workers):
                    break
            assert replies.held_arrived.is_set(), [w.communicate()[0][-2000:] for w in workers]
            import psycopg

            with psycopg.connect(shared) as conn:
                [(holder,)] = conn.execute("select worker from agora_claims.claims where run_id = 'r' and question_id = %s",
                                           [HELD]).fetchall()
            pid = int(holder.split(":")[-2])
            victim = next(w for w in workers if w.pid == pid)
            victim.send_signal(signal.SIGKILL)
            victim.wait(60)
            replies.release.set()
            outputs = {w.pid: w.communicate(timeout=300)[0] for w in workers if w is not victim}
        finally:
            replies.release.set()
            for w in workers:
                if w.poll() is None:
                    w.kill()
        for w in workers:
            if w is not victim:
                assert w.returncode == 0, outputs[w.pid]
        assert victim.returncode == -signal.SIGKILL
        got = recorded(shared)
        assert got["questions"] == reference["questions"]
        assert got["results"] == reference["results"]
        assert got["calls"] == reference["calls"]  # model_calls per question: nothing doubled, nothing lost
        assert [n for _, n in got["calls"]] == [q[3] for q in got["questions"]]
        assert got["status"] == "finished"
        with psycopg.connect(shared) as conn:
            claims = conn.execute("select count(*), sum(done::int), max(attempts) from agora_claims.claims "
                                  "where run_id = 'r'").fetchone()
            held_attempts = conn.execute("select attempts from agora_claims.claims where run_id = 'r' and question_id = %s",
                                         [HELD]).fetchone()[0]
        assert claims[0] == N_QUESTIONS and claims[1] == N_QUESTIONS
        assert held_attempts == 2  # the killed worker's, then the one that took it over


def test_a_second_process_on_one_sqlite_run_is_still_refused(tmp_path):
    from agora.traces.store import RunLockedError, TraceStore

    store = TraceStore(tmp_path / "t.db")
    with store.run_lock("r"):
        with pytest.raises(RunLockedError, match="being run by another process"):
            with TraceStore(tmp_path / "t.db").run_lock("r"):
                pass


class BenchReplies:
    """Replies that depend on the prompt only: arithmetic "What is i + i?" answered right by model
    ``a``, by ``b`` right on even i; any prompt that shows other answers gets the right one."""

    def __call__(self, path: str, body: dict) -> tuple[int, dict]:
        text = json.dumps(body.get("messages", ""))
        m = re.findall(r"What is (\d+) \+", text)
        i = int(m[-1]) if m else 0
        right = body.get("model") == "a" or i % 2 == 0 or "nother" in text or "esponses" in text
        return 200, chat_reply(body, [f"The answer is {2 * i if right else 2 * i + 1}."])


def test_three_bench_workers_on_one_postgres_bench_report_what_one_process_reports(tmp_path, postgres_server):
    math_file = tmp_path / "arith.jsonl"
    math_file.write_text("".join(json.dumps({"id": f"a{i}", "question": f"What is {i} + {i}?",
                                             "answer": f"{i} plus {i}\n#### {2 * i}"}) + "\n" for i in range(1, 7)))
    with StubServer(BenchReplies()) as srv:
        pool = pool_file(tmp_path / "pool.toml", srv.base_url)

        def bench(db: str, out: Path) -> subprocess.Popen:
            cmd = [sys.executable, "-m", "agora.cli", "bench", "--tasks", str(math_file), "--protocols", "align,moa",
                   "--pool", str(pool), "--db", db, "--run-id", "b1", "--out", str(out), "--samples", "2",
                   "--max-tokens", "16"]
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "AGORA_LEASE_S": "5"})

        alone = postgres_server.database()
        one = bench(alone, tmp_path / "one")
        out, _ = one.communicate(timeout=400)
        assert one.returncode == 0, out
        shared = postgres_server.database()
        workers = [bench(shared, tmp_path / f"w{i}") for i in range(3)]
        outs = [w.communicate(timeout=400)[0] for w in workers]
        assert all(w.returncode == 0 for w in workers), outs
    reference = json.loads((tmp_path / "one" / "bench.json").read_text())
    for i in range(3):
        report = json.loads((tmp_path / f"w{i}" / "bench.json").read_text())
        assert report["cells"] == reference["cells"] or _cells(report) == _cells(reference)
    got, ref = recorded(shared, "b1:arith:align"), recorded(alone, "b1:arith:align")
    assert got["questions"] == ref["questions"] and got["calls"] == ref["calls"] and len(got["questions"]) == 6


def _cells(report: dict) -> list[tuple]:
    return sorted((c["task"], c["method"], c["accuracy"], c["questions"], c.get("samples_per_q"), c.get("calls_per_q"))
                  for c in report["cells"])


def test_a_carried_run_on_postgres_is_one_process_at_a_time_and_its_lock_dies_with_it(postgres_server):
    """Duels and CUPID sessions carry state from step to step: on Postgres they keep a run lock (an
    advisory lock of the holder's session), released when the holder goes."""
    from agora.traces.store import RunLockedError, TraceStore

    url = postgres_server.database()
    first, second = TraceStore(url), TraceStore(url)
    with first.run_lock("duels"):
        with pytest.raises(RunLockedError, match="being run by another process"):
            with second.run_lock("duels"):
                pass
        with second.run_lock("duels", shared=True):  # a benchmark run's workers share it
            pass
    with second.run_lock("duels"):  # released
        pass
    first.close()
    second.close()


# ----------------------------------------------------------------------------- the run's status, whoever ends last


def _two_workers_setup(postgres_server, monkeypatch, fail_first: bool):
    """Four arithmetic questions on one Postgres run for two in-process workers (``run_problems`` in
    two threads: two claimants). ``q0``'s model calls wait for ``release``, then with ``fail_first``
    raise (a failed question). Leases of 5 s: a waiting worker looks every 1 s."""
    monkeypatch.setenv("AGORA_LEASE_S", "5")
    url = postgres_server.database()
    held, release = threading.Event(), threading.Event()

    def respond(n: int) -> str:
        if n == 0:
            held.set()
            release.wait(120)
            if fail_first:
                raise RuntimeError("server down")
        return f"The answer is {2 * n}."

    return url, held, release, _in_process_workers(url, respond)


def _in_process_workers(url: str, respond, questions: int = 4):
    """``worker(results, name, **run_protocol_kwargs)``: a thread running ALIGN on ``questions``
    arithmetic questions ("What is i + i?", ``q0``…) of run ``r`` of ``url``, with its own store and
    models (as a process has), one question at a time; each model call answers ``respond(i)`` (or
    raises what it raises)."""
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.problem import Problem

    problems = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(questions)]

    def reply(chat, _i):
        return respond(int(re.findall(r"What is (\d+) \+", chat[-1]["content"])[-1]))

    def worker(results: dict, name: str, **kw) -> threading.Thread:
        pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=reply) for m in ("a", "b")}, max_retries=0)

        return started(results, name, url, lambda store: run_protocol(
            "align", problems, store=store, run_id="r",
            context=DelegationContext(pool=pool, config=DelegationConfig(n_agents=2, k_samples=1)), config={},
            pool_description=pool.describe(), dataset={"format": "test"}, concurrency=1, **kw))

    return worker


def _run_row(url: str) -> tuple[str, dict]:
    from agora.traces.store import TraceStore

    store = TraceStore(url, readonly=True)
    row = store.get_run("r")
    store.close()
    return row["status"], json.loads(row["summary"]) if isinstance(row["summary"], str) else row["summary"]


def test_a_run_whose_failed_question_another_worker_recorded_ends_failed_whichever_worker_ends_last(
        postgres_server, monkeypatch):
    url, held, release, worker = _two_workers_setup(postgres_server, monkeypatch, fail_first=True)
    results: dict = {}
    b = worker(results, "b")  # alone at first: q0 (held, then it fails)
    assert held.wait(60)
    a = worker(results, "a")  # q1, q2 and q3, then waits for q0
    for _ in range(600):
        if len(recorded_ids(url)) == 3:
            break
        threading.Event().wait(0.1)
    assert _run_row(url)[0] == "running"
    release.set()
    b.join(120)
    a.join(120)  # a looks once a second: it ends after b, and had no failed question of its own
    assert [len(results["b"].failed), len(results["b"].outcomes), len(results["a"].failed),
            len(results["a"].outcomes)] == [1, 0, 0, 3]
    status, summary = _run_row(url)
    assert status == "failed"
    assert (summary["questions"], summary["recorded"], summary["failed"]) == (4, 3, 1)
    assert list(summary["failed_questions"]) == ["q0"] and "server down" in summary["failed_questions"]["q0"]
    assert recorded_ids(url) == ["q1", "q2", "q3"]


def test_a_worker_that_stops_while_another_holds_a_question_leaves_the_run_to_it(postgres_server, monkeypatch):
    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

    url, held, release, worker = _two_workers_setup(postgres_server, monkeypatch, fail_first=False)
    results: dict = {}
    b = worker(results, "b")  # q0 (held)
    assert held.wait(60)
    control = RunControl()
    a = worker(results, "a", control=control)  # q1, q2 and q3, then waits for q0
    for _ in range(600):
        if len(recorded_ids(url)) == 3:
            break
        threading.Event().wait(0.1)
    control.request_drain("test")
    a.join(60)
    assert isinstance(results["a"], GraphDrained)
    assert _run_row(url)[0] == "running"  # b still holds q0: not 'interrupted' while it works
    release.set()
    b.join(120)
    assert _run_row(url) == ("finished", {"questions": 4})
    assert recorded_ids(url) == ["q0", "q1", "q2", "q3"]


def recorded_ids(url: str) -> list[str]:
    """The run's recorded question ids, in order."""
    import psycopg

    with psycopg.connect(url) as conn:
        return [q for (q,) in conn.execute("select question_id from questions where run_id = 'r' order by question_id")]


# ----------------------------------------------------------------------------- a bench in rounds, one process or two workers


def _round_bench(tmp_path, db: str, results: dict, name: str) -> threading.Thread:
    """``agora bench``'s runs in rounds (ALIGN only, 6 arithmetic questions, rounds of 2) on ``db`` in
    a thread, with its own store and scripted models (as a process has). "What is 2 + 2?" (round 1)
    and "What is 6 + 6?" (round 3) always fail (their model calls raise); the others are answered right by ``a`` and by ``b`` on even i.
    ``results[name]``: the :class:`~agora.runs.bench.BenchResult`, or the exception raised."""
    from agora.agents.delegation import DelegationConfig
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.runs.bench import run_bench
    from agora.runs.bench_plan import ALIGN_METHODS, BenchConfig
    from agora.runs.bench_tasks import load_tasks

    path = tmp_path / "arith.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"id": f"a{i}", "question": f"What is {i} + {i}?",
                                            "answer": f"{i} plus {i}\n#### {2 * i}"}) + "\n" for i in range(1, 7)))
    tasks = load_tasks(str(path))

    def respond_as(model: str):
        def respond(chat, _i):
            n = int(re.findall(r"What is (\d+) \+", chat[-1]["content"])[-1])
            if n in (2, 6):
                raise RuntimeError("server down")
            return f"The answer is {2 * n if model == 'a' or n % 2 == 0 else 2 * n + 1}."
        return respond

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=respond_as(m)) for m in ("a", "b")}, max_retries=0)
    config = BenchConfig(align=DelegationConfig(n_agents=2, k_samples=1), methods=tuple(ALIGN_METHODS), round_size=2)

    return started(results, name, db, lambda store: run_bench(tasks, pool=pool, store=store, bench_id="b", config=config))


def _bench_rows(db: str) -> tuple[list, list]:
    """Every run's ``(run_id, status, summary)`` and every recorded ``(run_id, question_id, idx, answer,
    correct)`` of ``db``, sorted."""
    from agora.traces.store import TraceStore

    store = TraceStore(db, readonly=True)
    runs = sorted((r["run_id"], r["status"], json.loads(r["summary"]) if isinstance(r["summary"], str) else r["summary"])
                  for r in store.db.query("select run_id, status, summary from runs"))
    questions = sorted(tuple(r.values()) for r in store.db.query(
        "select run_id, question_id, idx, answer, correct from questions"))
    store.close()
    return runs, questions


def test_a_bench_in_rounds_with_failed_questions_ends_as_one_process_ends_it(tmp_path, postgres_server, monkeypatch):
    """Questions that fail (a2 in round 1, a6 in round 3) are left for a rerun: every round ends the
    run's row as one process ends it (round 3: ``failed``, its summary counting the questions of the
    round recorded; a later round than a failed question's: ``partial``), whether one process ran
    the bench on SQLite or two workers shared it on Postgres, in the first sitting and in the rerun
    (a2 and a6 fail again; a5, recorded in the first sitting, is counted the same way); the same
    questions and answers."""
    from agora.traces.postgres import PostgresTraceStore
    from agora.traces.store import TraceStore

    monkeypatch.setenv("AGORA_LEASE_S", "5")
    alone, shared = str(tmp_path / "alone.db"), postgres_server.database()
    error = "RuntimeError: server down"
    written: dict[str, list] = {"sqlite": [], "postgres": []}  # every final status written, per database

    def noting(cls, db: str):
        finish_run = cls.finish_run

        def noted(self, run_id, summary=None, status="finished"):
            written[db].append((status, json.dumps(summary, sort_keys=True)))
            return finish_run(self, run_id, summary=summary, status=status)
        monkeypatch.setattr(cls, "finish_run", noted)

    noting(TraceStore, "sqlite")
    noting(PostgresTraceStore, "postgres")
    rounds = [("failed", {"questions": 6, "recorded": 1, "failed": 1, "failed_questions": {"a2": error}, "later": 4}),
              ("partial", {"questions": 6, "later": 3}),  # a2 (failed in round 1), a5 and a6 unrecorded
              ("failed", {"questions": 6, "recorded": 1, "failed": 1, "failed_questions": {"a6": error}, "later": 1})]
    for sitting in (1, 2):
        results: dict = {}
        written["sqlite"].clear()
        written["postgres"].clear()
        _round_bench(tmp_path, alone, results, "alone").join(300)
        workers = [_round_bench(tmp_path, shared, results, w) for w in ("w1", "w2")]
        for w in workers:
            w.join(300)
        for name in ("alone", "w1", "w2"):
            assert not isinstance(results[name], BaseException), results[name]
        assert sorted(q.problem.id for _, q in results["alone"].failed) == ["a2", "a6"]
        # (a worker that reaches a round after the other ended it may try its failed question again,
        # as a rerun does: each failed question fails once or twice here)
        assert {q.problem.id for w in ("w1", "w2") for _, q in results[w].failed} == {"a2", "a6"}
        reference, got = _bench_rows(alone), _bench_rows(shared)
        assert [r[:2] for r in reference[0]] == [("b:arith:align", "failed")]
        assert reference[0][0][2] == {"questions": 6, "recorded": 1, "failed": 1, "later": 1,
                                      "failed_questions": {"a6": error}}, sitting
        assert got[0] == reference[0], sitting
        assert got[1] == reference[1]
        assert [q for _, q, *_ in got[1]] == ["a1", "a3", "a4", "a5"]
        # each round's end (each worker may write it; the last to end, last)
        if sitting == 2:  # a1, a3, a4 and a5 recorded in the first sitting: only a2 and a6 left
            rounds = [(rounds[0][0], {**rounds[0][1], "later": 1}), ("partial", {"questions": 6, "later": 2}), rounds[2]]
        assert [(st, json.loads(sm)) for st, sm in written["sqlite"]] == rounds, sitting
        # on Postgres, the first worker to end a round writes what one process writes (before any
        # worker starts the next round), and the last write is the run's end; a worker that ends a
        # round after the other recorded questions of the next one writes a row counting those too
        # (overwritten by its own next round's)
        pg = [(st, json.loads(sm)) for st, sm in written["postgres"]]
        left = iter(pg)
        assert all(r in left for r in rounds), (sitting, pg)  # rounds, in order, among the writes
        assert pg[-1] == rounds[-1], sitting


# ----------------------------------------------------------------------------- sittings and stale claims


def _wait_for(check, what: str, timeout_s: float = 60) -> None:
    """Poll ``check()`` every 0.1 s until it is true; fail naming ``what`` after ``timeout_s``."""
    for _ in range(int(timeout_s * 10)):
        if check():
            return
        threading.Event().wait(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _claim(url: str, question_id: str) -> dict:
    """The ``claims`` row of ``question_id`` in run ``r``."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute("select * from agora_claims.claims where run_id = 'r' and question_id = %s",
                            [question_id]).fetchone()


def _calls(url: str, question_id: str) -> tuple[int, int]:
    """``(answered, failed)`` model calls recorded for ``question_id`` in run ``r``."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("select count(*) filter (where error is null), count(*) filter (where error is not null) "
                            "from model_calls where run_id = 'r' and question_id = %s", [question_id]).fetchone()


def _in_sitting(url: str) -> int:
    """Workers present in run ``r``'s sitting (holders of its shared sitting lock) in this database."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("select count(*) from pg_locks where locktype = 'advisory' and mode = 'ShareLock' and granted "
                            "and database = (select oid from pg_database where datname = current_database())").fetchone()[0]


def test_workers_joining_a_sitting_share_it_and_a_worker_after_them_starts_the_next(postgres_server):
    from agora.traces.claims import Claims
    from agora.traces.store import TraceStore

    store = TraceStore(postgres_server.database())
    first, second, later = (Claims(store, "r") for _ in range(3))
    first.seed([(0, "q0")])
    second.seed([(0, "q0")])  # while the first is present: its sitting
    assert first.sitting is not None and second.sitting == first.sitting
    first.leave()
    second.leave()
    later.seed([(0, "q0")])  # nobody present: a rerun, a new sitting
    assert later.sitting not in (None, first.sitting)
    later.leave()
    store.close()


def test_a_question_that_fails_is_attempted_once_per_sitting_however_many_workers_join_it(postgres_server, monkeypatch):
    """q0 always fails. Sitting 1: worker a, alone, fails q0 and then holds q1; b joins meanwhile (the
    same sitting) and does q2 and q3 but not q0 again. Sitting 2 (a rerun, both gone): a retries q0,
    once; b, joining while a holds it, does not take it again. As one process: one attempt per sitting."""
    monkeypatch.setenv("AGORA_LEASE_S", "5")
    url = postgres_server.database()
    arrived, release = threading.Event(), threading.Event()
    hold = {"n": 1}

    def respond(n: int) -> str:
        if n == hold["n"]:
            arrived.set()
            release.wait(120)
        if n == 0:
            raise RuntimeError("server down")
        return f"The answer is {2 * n}."

    worker = _in_process_workers(url, respond)
    per_attempt = 0
    for sitting, held in ((1, 1), (2, 0)):
        hold["n"] = held
        arrived.clear()
        release.clear()
        results: dict = {}
        a = worker(results, "a")
        assert arrived.wait(60)  # sitting 1: q0 failed, q1 held; sitting 2: q0 held
        b = worker(results, "b")
        if sitting == 1:
            _wait_for(lambda: recorded_ids(url) == ["q2", "q3"], "b to record q2 and q3")
        else:
            _wait_for(lambda: _in_sitting(url) == 2, "b to join a's sitting")
        release.set()
        a.join(120)
        b.join(120)
        for name in ("a", "b"):
            assert not isinstance(results[name], BaseException), results[name]
        assert [q.problem.id for q in results["a"].failed] == ["q0"] and results["b"].failed == []
        if sitting == 1:
            per_attempt = _calls(url, "q0")[1]
            assert per_attempt > 0 and _calls(url, "q0")[0] == 0
        assert _claim(url, "q0")["attempts"] == sitting
        assert _calls(url, "q0") == (0, sitting * per_attempt)
        status, summary = _run_row(url)
        assert (status, summary["recorded"], list(summary["failed_questions"])) == ("failed", 3, ["q0"])
        assert recorded_ids(url) == ["q1", "q2", "q3"]


def test_a_worker_whose_lease_expired_writes_nothing_over_the_worker_that_took_its_question(
        postgres_server, monkeypatch, caplog):
    """a's first model call on q0 hangs past a's lease (expired by force here); b takes q0 over,
    records it and ends the run ``finished``. Then a's call fails (the model unreachable): a's failed
    calls and its error are discarded and logged, nothing is written over b's work (no failed call
    for q0, the run's row stays ``finished``), and a ends without error."""
    import logging

    import psycopg

    from agora.models.errors import ModelUnavailableError

    monkeypatch.setenv("AGORA_LEASE_S", "30")  # a renews every 10 s; a waiting b looks every second
    url = postgres_server.database()
    arrived, release, lock = threading.Event(), threading.Event(), threading.Lock()
    first = [True]

    def respond(n: int) -> str:
        if n == 0:
            with lock:
                hang, first[0] = first[0], False
            if hang:
                arrived.set()
                release.wait(120)
                raise ModelUnavailableError("connection refused")
        return f"The answer is {2 * n}."

    worker = _in_process_workers(url, respond)
    results: dict = {}
    caplog.set_level(logging.WARNING)
    a = worker(results, "a")
    assert arrived.wait(60)
    slow = _claim(url, "q0")["worker"]
    b = worker(results, "b")
    _wait_for(lambda: recorded_ids(url) == ["q1", "q2", "q3"], "b to record q1, q2 and q3")
    with psycopg.connect(url, autocommit=True) as conn:

        def expired_and_taken() -> bool:
            conn.execute("update agora_claims.claims set lease_until = now() - interval '1 second' "
                         "where run_id = 'r' and question_id = 'q0' and worker = %s", [slow])
            return _claim(url, "q0")["worker"] != slow

        _wait_for(expired_and_taken, "b to take q0 over")
    b.join(120)
    assert _run_row(url) == ("finished", {"questions": 4})
    release.set()
    a.join(120)
    assert not isinstance(results["a"], BaseException), results["a"]
    assert (len(results["a"].outcomes), len(results["a"].failed), len(results["b"].outcomes)) == (0, 0, 4)
    assert _run_row(url) == ("finished", {"questions": 4})
    assert recorded_ids(url) == ["q0", "q1", "q2", "q3"]
    assert _calls(url, "q0") == (_calls(url, "q1")[0], 0)  # b's calls only: a's failed attempt not written
    assert _claim(url, "q0")["attempts"] == 2 and _claim(url, "q0")["done"]
    said = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert any("question q0" in m and "failed calls discarded" in m for m in said), said
    assert any("question q0" in m and "ModelCallError" in m and "discarded" in m for m in said), said


def test_a_claim_taken_over_by_another_thread_of_the_same_worker_is_the_new_claims_alone(postgres_server):
    """One worker, two threads: the first claims q0, its lease expires and the second claims it
    again. The token tells them apart: the first thread's write is refused, the second's taken."""
    from agora.traces.claims import Claims
    from agora.traces.store import TraceStore

    url = postgres_server.database()
    store = TraceStore(url)
    claims = Claims(store, "r", lease=30)
    claims.seed([(0, "q0")])
    claimed, reclaimed, seen = threading.Event(), threading.Event(), {}

    def first_thread():
        seen["claimed"] = claims.claim_next(["q0"])
        claimed.set()
        reclaimed.wait(60)
        with claims.record("q0") as mine:
            seen["mine"] = mine

    t = threading.Thread(target=first_thread)
    t.start()
    assert claimed.wait(60) and seen["claimed"] == "q0"
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("update agora_claims.claims set lease_until = now() - interval '1 second' where question_id = 'q0'")
    assert claims.claim_next(["q0"]) == "q0"
    reclaimed.set()
    t.join(60)
    assert seen["mine"] is False and not _claim(url, "q0")["done"]
    with claims.record("q0") as mine:
        assert mine
    assert _claim(url, "q0")["done"] and _claim(url, "q0")["attempts"] == 2
    claims.leave()
    store.close()


# ----------------------------------------------------------------------------- a worker whose question was taken over


def _checkpoint_rows(url: str, run_id: str = "r") -> dict[str, int]:
    """Rows of run ``run_id``'s question threads (``<run_id>:<question_id>``) in each of LangGraph's
    Postgres checkpoint tables."""
    import psycopg

    with psycopg.connect(url) as conn:
        return {table: conn.execute(f"select count(*) from agora_checkpoints.{table} where thread_id like %s",
                                    [f"{run_id}:%"]).fetchone()[0]
                for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")}


def _stale_worker(postgres_server, monkeypatch):
    """Worker a's first model call on q0 hangs until ``release``; worker b records q1, q2 and q3,
    takes q0 over once a's lease on it is expired (by force here), records it and ends the run.
    Returns ``(url, results, a, release, control)``: a is still running, holding its stale q0, with
    ``control`` its RunControl."""
    import psycopg
    from langgraph.runtime import RunControl

    monkeypatch.setenv("AGORA_LEASE_S", "30")  # a renews every 10 s; a waiting b looks every second
    url = postgres_server.database()
    arrived, release, lock = threading.Event(), threading.Event(), threading.Lock()
    first = [True]

    def respond(n: int) -> str:
        if n == 0:
            with lock:
                hang, first[0] = first[0], False
            if hang:
                arrived.set()
                release.wait(120)
        return f"The answer is {2 * n}."

    worker = _in_process_workers(url, respond)
    results: dict = {}
    control = RunControl()
    a = worker(results, "a", control=control)
    assert arrived.wait(60)
    slow = _claim(url, "q0")["worker"]
    b = worker(results, "b")
    _wait_for(lambda: recorded_ids(url) == ["q1", "q2", "q3"], "b to record q1, q2 and q3")
    with psycopg.connect(url, autocommit=True) as conn:

        def expired_and_taken() -> bool:
            conn.execute("update agora_claims.claims set lease_until = now() - interval '1 second' "
                         "where run_id = 'r' and question_id = 'q0' and worker = %s", [slow])
            return _claim(url, "q0")["worker"] != slow

        _wait_for(expired_and_taken, "b to take q0 over")
    b.join(120)
    assert not isinstance(results["b"], BaseException), results["b"]
    assert len(results["b"].outcomes) == 4 and _run_row(url) == ("finished", {"questions": 4})
    return url, results, a, release, control


def test_a_stale_worker_leaves_no_checkpoints_of_a_question_another_worker_finished(postgres_server, monkeypatch):
    """a's graph on q0 goes on after b recorded q0 and dropped its thread: a's later checkpoints of
    q0 (its agents' step, the steps after it) are nobody's to resume, and a drops them when it finds
    its result discarded; the run's question threads leave no checkpoint rows behind, as on SQLite."""
    url, results, a, release, _ = _stale_worker(postgres_server, monkeypatch)
    assert _checkpoint_rows(url) == {"checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0}
    release.set()
    a.join(120)
    assert not isinstance(results["a"], BaseException), results["a"]
    assert (len(results["a"].outcomes), len(results["a"].failed)) == (0, 0)
    assert _run_row(url) == ("finished", {"questions": 4})
    assert _checkpoint_rows(url) == {"checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0}


def test_a_stale_worker_stopped_after_the_run_finished_leaves_it_finished(postgres_server, monkeypatch):
    """a is asked to drain (Ctrl-C, SIGTERM) while its stale q0 runs, after b finished the whole
    run: every question is done, so the run stays ``finished`` (not ``interrupted`` by the worker
    that wrote last), a ends without error as one process whose last question finished under a
    drain does, and a's checkpoints of q0 are dropped."""
    url, results, a, release, control = _stale_worker(postgres_server, monkeypatch)
    control.request_drain("test")
    release.set()
    a.join(120)
    assert _run_row(url) == ("finished", {"questions": 4})
    assert not isinstance(results["a"], BaseException), results["a"]
    assert recorded_ids(url) == ["q0", "q1", "q2", "q3"]
    assert _checkpoint_rows(url) == {"checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0}
