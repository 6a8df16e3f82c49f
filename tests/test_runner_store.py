"""Trace store and resumable runner: rows written, resume without redoing or duplicating work."""

import asyncio
import json
import sys
import threading
import time

import pytest
import sqlite_utils

from agora.agents.delegation import DelegationConfig
from agora.models.pool import ModelPool, SamplingParams
from agora.models.testing import ScriptedChatModel
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.runner import run_problems
from agora.tasks import Problem
from agora.agents.stats import bootstrap_ci
from agora.traces.report import method_table, run_totals
from agora.traces.store import TraceStore
from waiting import wait_until

PROBLEMS = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(1, 4)]


def answer_twice(chat, index):
    # "What is i + i?" -> right for agent a, wrong for b on odd i
    i = int(chat[-1]["content"].split()[2])
    return f"So the answer is {2 * i}."


def run(store, pool, run_id="r1", problems=PROBLEMS, config=DelegationConfig(n_agents=2, k_samples=2), **kw):
    return run_problems(build_delegation_graph(), problems, store=store, run_id=run_id, protocol="align",
                        context=DelegationContext(pool, config), config={"n": 2}, pool_description=pool.describe(),
                        dataset={"format": "test"}, **kw)


def test_rows_in_every_table(trace_db):
    store = TraceStore(trace_db)
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=answer_twice),
                                       "b": ScriptedChatModel(responses=["The answer is 4."], cycle=True)})
    out = run(store, pool)
    assert [q.answer for q in out.outcomes] == ["2", "4", "6"] or len(out.outcomes) == 3
    db = store.db
    assert db["runs"].count == 1 and db["questions"].count == 3
    assert db["results"].count == 3 * 4
    assert db["model_calls"].count == 3 * 2 * 2
    run_row = store.get_run("r1")
    assert run_row["status"] == "finished" and run_row["protocol"] == "align"
    call = next(db["model_calls"].rows)
    assert call["node"] == "agent_sample" and call["role"] == "agent" and call["completion_tokens"] > 0
    # self-consistency: a says 2i twice, b says 4 twice -> ties go to a (first seen), so all correct
    table = {r.method: r for r in method_table(store, "r1")}
    assert table["self_consistency"].accuracy == 1.0
    assert table["single_agent"].samples_per_question == 1.0
    totals = run_totals(store, "r1")
    assert totals["calls"] == 12 and totals["failed"] == 0


@pytest.mark.parametrize("durability", ["async", "exit"])
def test_interrupted_run_resumes_without_redoing_or_duplicating(trace_db, durability):
    store = TraceStore(trace_db)
    state = {"armed": True}
    branches = set()  # q2's agent branches: asyncio tasks, which LangGraph names after their node

    def a_respond(chat, index):  # (a answers inline, on the question's event loop)
        if "2 + 2" in chat[-1]["content"] and state["armed"]:
            branches.update(t for t in asyncio.all_tasks() if t.get_name() == "agent_sample")
        return answer_twice(chat, index)

    def b_respond(chat, index):
        if "2 + 2" in chat[-1]["content"] and state["armed"]:
            # agent a's branch finishes first: once its task is done, LangGraph's commit of its writes
            # (a done-callback, queued on the loop) runs before b's error reaches the loop
            wait_until(lambda: len(branches) == 2 and sum(not t.done() for t in branches) == 1,
                       "agent a's q2 branch to finish (b's still running)")
            raise KeyboardInterrupt  # the user presses Ctrl-C while agent b works on q2
        return "The answer is 4."

    a = ScriptedChatModel(respond=a_respond)
    # b blocks (sleeps), so it runs in a worker thread as real sync backends do (latency_s)
    pool = ModelPool.from_chat_models({"a": a, "b": ScriptedChatModel(respond=b_respond, latency_s=0.001)})
    with pytest.raises(KeyboardInterrupt):
        run(store, pool, durability=durability)
    assert store.finished_questions("r1") == {"q1"}
    assert store.get_run("r1")["status"] == "interrupted"  # not left "running" by a process that stopped
    calls_to_a_before = len(a.calls)

    state["armed"] = False
    out = run(store, pool, durability=durability)
    assert out.resumed and out.skipped == 1
    assert [q.problem.id for q in out.outcomes] == ["q2", "q3"]
    db = store.db
    assert db["questions"].count == 3 and db["results"].count == 12
    assert db["model_calls"].count == 12
    assert store.get_run("r1")["status"] == "finished"
    # q3 costs agent a one call; a's finished branch of q2 was checkpointed, so it is not asked again
    assert len(a.calls) - calls_to_a_before == 1

    again = run(store, pool)  # a third run of a finished run id does nothing
    assert again.skipped == 3 and not again.outcomes and db["model_calls"].count == 12


def test_a_requests_prompt_is_kept_once_in_state_and_in_every_trace_row(trace_db):
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(responses=["4", "5", "6"])})
    samples, records = pool.sample("a", chat, SamplingParams(n=3))
    assert [s.text for s in samples] == ["4", "5", "6"]
    assert records[0]["messages"] == chat
    assert [r["messages"] for r in records[1:]] == [None, None]
    assert [r["messages_of"] for r in records[1:]] == [records[0]["call_id"]] * 2
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    store.record_question("r", "align", {"question_id": "q", "question": "What is 2 + 2?"}, {}, records)
    rows = store.calls("r")
    assert sorted(r["completion"] for r in rows) == ["4", "5", "6"]
    assert [json.loads(r["messages"]) for r in rows] == [chat] * 3


def test_run_problems_works_inside_a_running_event_loop(tmp_path):
    """A notebook or an async app calls the (sync) runner while its own loop runs: the questions
    then run in a worker thread with a loop of their own, with the same results."""
    import asyncio

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=answer_twice),
                                       "b": ScriptedChatModel(respond=lambda chat, i: "The answer is 4.")})

    async def app():
        return run(TraceStore(tmp_path / "t.db"), pool)

    out = asyncio.run(app())
    assert [q.problem.id for q in out.outcomes] == ["q1", "q2", "q3"]
    assert [q.methods["self_consistency"]["answer"] for q in out.outcomes] == ["2", "4", "6"]


def test_record_question_is_idempotent(trace_db):
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    calls = [{"call_id": "c1", "model": "m", "messages": [], "completion": "x", "prompt_tokens": 3,
              "completion_tokens": 1, "latency_s": 0.1}]
    for _ in range(2):
        store.record_question("r", "align", {"question_id": "q", "idx": 0, "gold": "1", "answer": "1", "correct": True},
                              {"align": {"answer": "1", "correct": True, "samples": 1, "completion_tokens": 1}}, calls)
    assert store.db["questions"].count == 1 and store.db["model_calls"].count == 1 and store.db["results"].count == 1
    q = store.questions("r")[0]
    assert (q["model_calls"], q["prompt_tokens"], q["correct"]) == (1, 3, 1)


def test_run_id_of_another_protocol_is_refused(trace_db):
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    try:
        store.start_run("r", "comed", config={}, pool=[], dataset={})
    except ValueError as exc:
        assert "align" in str(exc)
    else:  # pragma: no cover
        raise AssertionError


def test_bootstrap_ci_hand_checked():
    mean, lo, hi = bootstrap_ci([1, 1, 1, 1])
    assert (mean, lo, hi) == (1.0, 1.0, 1.0)
    mean, lo, hi = bootstrap_ci([1, 0] * 50)
    assert mean == 0.5 and 0.38 < lo < 0.42 and 0.58 < hi < 0.62  # ±1.96·sqrt(.25/100) ≈ ±0.098
    assert bootstrap_ci([])[0] != bootstrap_ci([])[0]  # nan


@pytest.mark.parametrize("durability", ["async", "exit"])
def test_ctrl_c_in_the_main_thread_during_the_agents_fan_out_resumes_that_question(trace_db, durability):
    """SIGINT lands in the main thread while Send branches run: the checkpoint then has no ``next``
    node, only pending tasks; the rerun must resume them, not record an empty question."""
    import signal

    store = TraceStore(trace_db)
    state = {"armed": True}
    delivered = threading.Event()

    def on_sigint(signum, frame):
        delivered.set()
        raise KeyboardInterrupt

    main = threading.main_thread().ident

    def respond(chat, index):
        if "2 + 2" in chat[-1]["content"] and state["armed"]:
            state["armed"] = False
            # a real SIGINT sent to the main thread, as a terminal's Ctrl-C is: it wakes the event loop
            # out of its wait at once (``_thread.interrupt_main`` only sets a flag, which a loop waiting
            # on the fan-out's futures did not see for the whole wait on a busy machine)
            signal.pthread_kill(main, signal.SIGINT)
            # keep this branch running until the main thread has taken the Ctrl-C (however loaded
            # the machine is), so it always lands during the fan-out
            delivered.wait(30)
        return "The answer is 4."

    # blocking models run in worker threads (latency_s), so the Ctrl-C lands in the runner's event loop
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond, latency_s=0.001),
                                       "b": ScriptedChatModel(respond=respond, latency_s=0.001)})
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(store, pool, durability=durability)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert delivered.is_set()
    assert store.finished_questions("r1") == {"q1"}
    out = run(store, pool, durability=durability)
    assert [q.problem.id for q in out.outcomes] == ["q2", "q3"]
    assert all(set(q.methods) == {"align", "single_agent", "self_consistency", "best_of_n"} for q in out.outcomes)
    db = store.db
    assert db["results"].count == 12
    assert [(r["answer"], r["correct"]) for r in store.questions("r1")] == [("4", 0), ("4", 1), ("4", 0)]


def test_resuming_a_run_id_with_other_settings_or_data_is_refused(trace_db):
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={"n": 2}, pool=[], dataset={"path": "a.jsonl", "format": "gsm8k", "limit": 5})
    assert store.start_run("r", "align", config={"n": 2}, pool=[], dataset={"path": "a.jsonl", "format": "gsm8k", "limit": 9})
    for config, dataset, what in (({"n": 3}, {"path": "a.jsonl", "format": "gsm8k"}, "settings"),
                                  ({"n": 2}, {"path": None, "format": "synthetic"}, "path, format")):
        try:
            store.start_run("r", "align", config=config, pool=[], dataset=dataset)
        except ValueError as exc:
            assert f"was started with other {what}" in str(exc)
        else:  # pragma: no cover
            raise AssertionError(what)


def test_concurrent_questions_are_in_flight_together_and_recorded_in_order(trace_db):
    """Three questions, concurrency 3: the model answers only once all three wait at a barrier
    (sequential questions would break it), and every question keeps its position ``idx``."""
    barrier = threading.Barrier(3, timeout=10)

    class AtTheBarrier(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            barrier.wait()  # raises BrokenBarrierError (a failed call) unless 3 calls are in flight
            return super()._generate(messages, stop, run_manager, **kwargs)

    store = TraceStore(trace_db)
    pool = ModelPool.from_chat_models({"a": AtTheBarrier(respond=answer_twice)})
    out = run(store, pool, config=DelegationConfig(n_agents=1, k_samples=1), concurrency=3)
    assert sorted(q.problem.id for q in out.outcomes) == ["q1", "q2", "q3"]
    rows = {r["question_id"]: r for r in store.questions("r1")}
    assert [(rows[q]["idx"], rows[q]["answer"], rows[q]["correct"]) for q in ("q1", "q2", "q3")] == \
           [(0, "2", 1), (1, "4", 1), (2, "6", 1)]
    assert store.get_run("r1")["status"] == "finished"


def test_concurrent_run_stops_on_an_interrupt_keeps_running_questions_and_resumes(trace_db, monkeypatch):
    """Concurrency 2 over 4 questions; q2's model call is interrupted. q1 (running beside it) is
    recorded, q3 and q4 never start; the rerun finishes q2–q4 with no duplicates."""
    state = {"armed": True}
    asked = []
    stop_flags = []  # the runner's "stop taking questions" flags (threading.Event) of this run

    class WatchedEvent(threading.Event):
        def __init__(self):
            super().__init__()
            if sys._getframe(1).f_globals.get("__name__", "").startswith("agora.graphs."):
                stop_flags.append(self)

    monkeypatch.setattr(threading, "Event", WatchedEvent)

    def respond(chat, index):
        text = chat[-1]["content"]
        asked.append(text)
        if "2 + 2" in text and state["armed"]:
            raise KeyboardInterrupt
        return answer_twice(chat, index)

    class SlowOnQ1(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if "1 + 1" in messages[-1].content and state["armed"]:
                # still running when q2 fails: q1 answers only once q2's failure has flagged the run
                # to stop, before q1's worker could take q3. (It waits here, outside the scripted
                # model's lock, which q2's call needs.)
                wait_until(lambda: any(flag.is_set() for flag in stop_flags), "q2's failure to stop the run",
                           timeout_s=120)
            return super()._generate(messages, stop, run_manager, **kwargs)

    problems = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(1, 5)]
    store = TraceStore(trace_db)
    pool = ModelPool.from_chat_models({"a": SlowOnQ1(respond=respond, latency_s=0.001)})  # blocks: a thread
    cfg = DelegationConfig(n_agents=1, k_samples=1)
    with pytest.raises(KeyboardInterrupt):
        run(store, pool, problems=problems, config=cfg, concurrency=2)
    assert store.finished_questions("r1") == {"q1"}
    assert not any("3 + 3" in t or "4 + 4" in t for t in asked)
    state["armed"] = False
    out = run(store, pool, problems=problems, config=cfg, concurrency=2)
    assert out.skipped == 1 and sorted(q.problem.id for q in out.outcomes) == ["q2", "q3", "q4"]
    assert store.db["model_calls"].count == 4
    assert [r["correct"] for r in store.questions("r1")] == [1, 1, 1, 1]


@pytest.mark.parametrize("kw, field", [({"concurrency": 0}, "concurrency"), ({"durability": "never"}, "durability")])
def test_bad_runner_settings_are_refused(tmp_path, kw, field):
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=answer_twice)})
    with pytest.raises(ValueError, match=field):
        run(TraceStore(tmp_path / "t.db"), pool, **kw)


@pytest.mark.parametrize("durability, concurrency", [("async", 1), ("exit", 1), ("exit", 2)])
def test_drain_stops_at_the_step_boundary_and_resumes_without_asking_again(trace_db, durability, concurrency):
    """A drain asked while agent b works on q2 (as Ctrl-C does through ``graceful_stop``): the step
    finishes with both agents' samples checkpointed, q3 never starts, GraphDrained is raised; the
    rerun finishes q2 without asking either agent again about it."""
    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

    control = RunControl()
    asked = []

    def respond(chat, index):
        text = chat[-1]["content"]
        asked.append(text)
        if "2 + 2" in text and not control.drain_requested:
            control.request_drain("test")
        return answer_twice(chat, index)

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond), "b": ScriptedChatModel(respond=respond)})
    store = TraceStore(trace_db)
    with pytest.raises(GraphDrained):
        run(store, pool, durability=durability, concurrency=concurrency, control=control)
    finished = store.finished_questions("r1")
    assert "q2" not in finished
    if concurrency == 1:  # with 2 in flight, q3 may start (even finish) beside q2 before the drain
        assert "q3" not in finished and not any("3 + 3" in t for t in asked)
    q2_asked = sum("2 + 2" in t for t in asked)
    assert q2_asked == 2 * 2  # both agents sampled k = 2 in the drained step

    out = run(store, pool, durability=durability, concurrency=concurrency)
    assert sum("2 + 2" in t for t in asked) == q2_asked  # q2 resumed from its checkpoint
    assert {q.problem.id for q in out.outcomes} | finished == {"q1", "q2", "q3"}
    assert [r["correct"] for r in store.questions("r1")] == [1, 1, 1]
    assert store.db["model_calls"].count == 12


def test_an_unreachable_model_marks_the_run_failed_and_a_rerun_finishes_it(trace_db):
    from agora.models.pool import ModelCallError, ModelUnavailableError

    def unreachable(chat, index):
        raise ModelUnavailableError("connection refused")

    store = TraceStore(trace_db)
    broken = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=unreachable)}, max_retries=0)
    with pytest.raises(ModelCallError):
        run(store, broken, config=DelegationConfig(n_agents=1, k_samples=1))
    row = store.get_run("r1")
    assert row["status"] == "failed" and "ModelCallError" in row["summary"]
    working = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=answer_twice)})
    out = run(store, working, config=DelegationConfig(n_agents=1, k_samples=1))
    assert out.resumed and len(out.outcomes) == 3 and store.get_run("r1")["status"] == "finished"


def test_run_ids_lists_runs_by_prefix_oldest_first(trace_db):
    store = TraceStore(trace_db)
    assert store.run_ids() == []
    for rid in ("b1:gsm8k:align", "other", "b1:gsm8k:comed", "b10:x:align"):
        store.start_run(rid, "align", config={}, pool=[], dataset={})
    assert store.run_ids("b1:") == ["b1:gsm8k:align", "b1:gsm8k:comed"]
    assert store.run_ids() == ["b1:gsm8k:align", "other", "b1:gsm8k:comed", "b10:x:align"]


def test_report_runs_lists_statuses_counts_and_flags_a_killed_run(tmp_path):
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.run_list import run_rows

    store = TraceStore(tmp_path / "t.db")
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=lambda chat, i: "The answer is 4."),
                                       "b": ScriptedChatModel(respond=lambda chat, i: "The answer is 4.")})
    run(store, pool)  # r1: three questions, q2 (2 + 2) right
    store.start_run("killed", "align", config={}, pool=[], dataset={})  # left running, as after kill -9
    rows = {r.run_id: r for r in run_rows(store, now="2999-01-01T00:00:00+00:00")}
    assert (rows["r1"].status, rows["r1"].questions, rows["r1"].accuracy, rows["r1"].stale) == ("finished", 3, 1 / 3, False)
    assert rows["killed"].status == "running" and rows["killed"].stale and rows["killed"].questions == 0
    assert not {r.run_id: r for r in run_rows(store)}["killed"].stale  # just started: not stale yet
    out = CliRunner().invoke(app, ["report", "runs", "--db", str(tmp_path / "t.db"), "--stale-after", "0"],
                             terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "(stale)" in out.output and "probably killed" in out.output and "33.3" in out.output
    js = CliRunner().invoke(app, ["report", "runs", "--db", str(tmp_path / "t.db"), "--json"])
    assert [json.loads(line)["run_id"] for line in js.output.splitlines()] == ["r1", "killed"]
    missing = CliRunner().invoke(app, ["report", "runs", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "no such trace database" in missing.output


@pytest.mark.parametrize("durability", ["async", "exit"])
def test_a_resumed_questions_wall_time_counts_its_earlier_sittings_kept_steps_not_the_gap(tmp_path, durability):
    """q2's agents take 0.4 s in the first sitting, which a drain then stops; the rerun, 1 s later,
    only runs the principal. Its ``wall_s`` is both sittings' kept parts (≥ 0.4 s), not the last
    sitting's alone (≈ 0) and not the gap between them (1 s)."""
    from langgraph.runtime import RunControl
    from langgraph.errors import GraphDrained

    from agora.graphs.run_checkpoints import checkpoint_path

    control = RunControl()

    def respond(chat, index):
        if "2 + 2" in chat[-1]["content"] and not control.drain_requested:
            time.sleep(0.4)  # the first sitting's kept time, which wall_s must count
            control.request_drain("test")
        return answer_twice(chat, index)

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond, latency_s=0.001),
                                       "b": ScriptedChatModel(respond=respond, latency_s=0.001)})
    store = TraceStore(tmp_path / "t.db")
    with pytest.raises(GraphDrained):
        run(store, pool, durability=durability, control=control)
    assert store.finished_questions("r1") == {"q1"}
    time.sleep(1.0)  # the gap between sittings, which wall_s must not count: the thing under test
    out = run(store, pool, durability=durability)
    [q2] = [q for q in out.outcomes if q.problem.id == "q2"]
    q3 = next(q for q in out.outcomes if q.problem.id == "q3")
    assert q2.resumed and not q3.resumed
    walls = {r["question_id"]: r["wall_s"] for r in store.questions("r1")}
    assert 0.4 <= walls["q2"] < 0.4 + 0.9 and walls["q2"] == pytest.approx(q2.wall_s)
    assert walls["q3"] < 0.4  # a question run in one sitting: its own time only
    assert not sqlite_utils.Database(checkpoint_path(tmp_path / "t.db"))["checkpoints"].count  # threads deleted


def test_kept_wall_s_reads_the_latest_checkpoints_sitting_and_ignores_foreign_metadata():
    from langgraph.checkpoint.base import CheckpointTuple

    from agora.graphs.run_checkpoints import KEPT_WALL_S, SITTING_STARTED, kept_wall_s

    def tup(ts, **meta):
        return CheckpointTuple({"configurable": {}}, {"ts": ts}, meta)

    started = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert kept_wall_s(None) == 0.0
    assert kept_wall_s(tup("2027-01-15T08:00:12.5+00:00", **{SITTING_STARTED: started, KEPT_WALL_S: 30.0})) == 42.5
    assert kept_wall_s(tup("2027-01-15T07:59:59+00:00", **{SITTING_STARTED: started})) == 0.0  # clock went back
    assert kept_wall_s(tup("2027-01-15T08:00:12+00:00")) == 0.0  # written outside the runner
    assert kept_wall_s(tup("2027-01-15T08:00:12+00:00", **{SITTING_STARTED: "x"})) == 0.0
