"""The trace recorder in a user's app (round 15 probes): a recorder only the graph's nodes inherit, a
replay from an earlier checkpoint (time travel), and more ways an app drives it. Models are the user's
own ``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py) or scripted chat models;
each case counts the rows written against what the models were asked."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import RecorderNotInheritedError, TraceRecorder
from agora.traces.store import TraceStore
from cli_runs import agora
from db_rows import rows
from openai_stub import StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str


def test_a_recorder_only_the_graphs_nodes_inherit_is_refused_before_any_model_is_asked(tmp_path):
    """Before: ``config={"callbacks": CallbackManager([], inheritable_handlers=[recorder])}`` (the
    recorder given to the child runs, not to the graph's own run) ran the question, asked the models
    (2 requests) and recorded nothing, not even a run row, without a word: the recorder saw each node
    as a run of its own and never the question's input, end or answer."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(RecorderNotInheritedError) as refused:
                graph.invoke(QUESTION, {"callbacks": CallbackManager([], inheritable_handlers=[recorder])},
                             context=context)
            assert server.requests == []
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2  # the second invocation's only
    assert str(refused.value) == (
        "TraceRecorder 'app' sees this graph's nodes but not the graph's own run (it was passed to the child runs "
        "only, as CallbackManager([], inheritable_handlers=[recorder]) passes it), so its questions could not be "
        'recorded; pass it in a list, config={"callbacks": [recorder]}; no model was asked')
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]


def test_an_inherited_recorder_under_an_apps_graph_it_does_not_see_records_the_protocol_question(tmp_path):
    """The app's own graph run unseen (the recorder given to its child runs only), the protocol graph
    called from the app's node is seen whole: its question is recorded, nothing refused."""
    db = tmp_path / "app.db"
    align = build_delegation_graph().compile()

    def solve(state: AppState, config) -> dict:
        return {"answer": align.invoke({"question": state["question"], "gold": state["gold"]}, config,
                                       context=DelegationContext(pool, CONFIG))["answer"]}

    builder = StateGraph(AppState)
    builder.add_node("solve", solve)
    builder.add_edge(START, "solve")
    builder.add_edge("solve", END)
    app = builder.compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            out = app.invoke(QUESTION, {"callbacks": CallbackManager([], inheritable_handlers=[recorder])})
        assert len(server.requests) == 2
    assert out["answer"] == "4"
    assert rows(db, "select question_id, model_calls, correct from questions") == [("q-f465154e", 4, 1)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]



# ---------------------------------------------------------------- time travel

def _earlier(graph, thread: dict, question: str, next_node: str = "agent_sample") -> dict:
    """The config of the checkpoint of ``question`` (on ``thread``) whose next step is ``next_node``."""
    for state in graph.get_state_history(thread):  # newest first
        if state.next and state.next[0] == next_node and state.values.get("question") == question:
            return state.config
    raise AssertionError(f"no checkpoint before {next_node} of {question!r}")


def test_a_replay_from_an_earlier_checkpoint_is_recorded_as_a_question_of_its_own(tmp_path):
    """Before: ``invoke(None, {"configurable": {"thread_id": t, "checkpoint_id": earlier}})`` asked both
    members again (2 requests, 4 samples) and recorded nothing of it (a logged warning): the samples
    had no rows. Now the replay is ``<id>-replay`` with its 4 calls, the original stays as it was, and a
    second replay is ``-replay-2``."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            earlier = _earlier(graph, thread, QUESTION["question"])
            for _ in range(2):
                out = graph.invoke(None, {**earlier, "callbacks": [recorder]}, context=context)
        assert len(server.requests) == 6
    assert out["answer"] == "4" and out["methods"]["align"]["correct"] is True
    assert rows(db, "select question_id, question, gold, model_calls, correct from questions order by idx") == [
        ("q-f465154e", "What is 2 + 2?", "4", 4, 1), ("q-f465154e-replay", "What is 2 + 2?", "4", 4, 1),
        ("q-f465154e-replay-2", "What is 2 + 2?", "4", 4, 1)]
    assert rows(db, "select question_id, count(*), count(distinct call_id) from model_calls group by 1 order by 1") == [
        ("q-f465154e", 4, 4), ("q-f465154e-replay", 4, 4), ("q-f465154e-replay-2", 4, 4)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 3, "failed": 0}))]


def test_a_replay_that_asks_no_model_records_nothing(tmp_path):
    """A replay from the checkpoint before ALIGN's ``principal_select``: the agents' samples come from
    the checkpoint (no request), so the replay asks no model; it is not written (as a question with
    no successful call it would have been a failed question, the run ``failed``), and the original
    question keeps its 4 rows."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    question = {**QUESTION, "question_id": "mine"}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(question, {**thread, "callbacks": [recorder]}, context=context)
            out = graph.invoke(None, {**_earlier(graph, thread, QUESTION["question"], "principal_select"),
                                      "callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2
    assert out["answer"] == "4"
    assert rows(db, "select question_id, model_calls, correct from questions order by idx") == [("mine", 4, 1)]
    assert rows(db, "select question_id, count(*) from model_calls group by 1") == [("mine", 4)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 1, "failed": 0}))]


def test_a_replay_is_scored_against_the_gold_of_the_input_it_came_from(tmp_path):
    """Before: a replay of the thread's first question, after a second question on the same thread,
    was scored against the second question's gold (the thread's newest input): its right answer 4
    came back ``correct`` False (gold 6)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {**thread, "callbacks": [recorder]},
                         context=context)
            out = graph.invoke(None, {**_earlier(graph, thread, QUESTION["question"]), "callbacks": [recorder]},
                               context=context)
    assert out["answer"] == "4" and out["methods"]["align"]["correct"] is True
    assert rows(db, "select question_id, gold, answer, correct from questions where question_id like '%replay'") == [
        ("q-f465154e-replay", "4", "4", 1)]


# ---------------------------------------------------------------- several processes, one trace database

WORKER = Path(__file__).with_name("recorder_worker.py")


def _worker(db: str, run_id: str, n: int = 10, **hang) -> subprocess.Popen:
    args = [sys.executable, str(WORKER), db, run_id, str(n)]
    if hang:
        args += ["--hang-at", str(hang["at"]), "--marker", str(hang["marker"])]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return out.strip()


def _report(db: str, run_id: str) -> dict:
    code, out = agora("report", "run", run_id, "--db", db, "--json")
    assert code == 0, out
    return json.loads(out)


def _check_run(db: str, run_id: str, n: int = 10) -> None:
    """Run ``run_id`` holds questions q1..qn once each, 4 model calls apiece, none failed, all correct,
    and ``agora report run`` counts the same."""
    store = TraceStore(db)
    try:
        questions = store.db.query("select question_id, model_calls, correct from questions where run_id = ? "
                                   "order by idx", [run_id])
        assert [(q["question_id"], q["model_calls"], q["correct"]) for q in questions] == [
            (f"q{i}", 4, 1) for i in range(1, n + 1)]
        calls = list(store.db.query("select question_id, count(*) as n, count(distinct call_id) as ids "
                                    "from model_calls where run_id = ? group by question_id", [run_id]))
        assert sorted((c["question_id"], c["n"], c["ids"]) for c in calls) == sorted(
            (f"q{i}", 4, 4) for i in range(1, n + 1))
        assert store.get_run(run_id)["status"] == "finished"
    finally:
        store.close()
    report = _report(db, run_id)
    assert (report["totals"]["questions"], report["totals"]["calls"], report["totals"]["failed"]) == (n, 4 * n, 0)
    assert {m["method"]: (m["questions"], m["accuracy"]) for m in report["methods"]}["align"] == (n, 1.0)


@pytest.mark.slow
def test_four_processes_recording_into_one_database_each_record_every_question_once(trace_db):
    """4 app processes, each a TraceRecorder of its own run id, each asking 10 questions, all at once
    into one trace database (a SQLite file, or Postgres)."""
    procs = [_worker(trace_db, f"w{i}") for i in range(4)]
    assert [_finished(p) for p in procs] == ["done 10 0"] * 4
    for i in range(4):
        _check_run(trace_db, f"w{i}-align")


@pytest.mark.slow
def test_a_process_killed_mid_question_leaves_the_others_whole_and_its_rerun_resumes(trace_db, tmp_path):
    """3 processes record while a fourth is killed (``kill -9``) in its 4th question's first model call:
    the three runs are whole; the killed run keeps its 3 questions, status ``running``; rerun with the
    same run id, it skips those 3 and records the other 7, and ends ``finished``."""
    marker = tmp_path / "hanging"
    killed = _worker(trace_db, "k", at=4, marker=marker)
    procs = [_worker(trace_db, f"w{i}") for i in range(3)]
    deadline = time.monotonic() + 900
    while not marker.exists():
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()[1][-3000:]
        time.sleep(0.2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=60)
    assert [_finished(p) for p in procs] == ["done 10 0"] * 3
    for i in range(3):
        _check_run(trace_db, f"w{i}-align")
    store = TraceStore(trace_db)
    try:
        assert sorted(store.question_ids("k-align")) == ["q1", "q2", "q3"]
        assert store.get_run("k-align")["status"] == "running"
    finally:
        store.close()
    assert _finished(_worker(trace_db, "k")) == "done 7 3"
    _check_run(trace_db, "k-align")


# ---------------------------------------------------------------- the app's own callbacks

class RaisesOnStart(BaseCallbackHandler):
    """A user's callback handler that raises when the invocation starts (``raise_error``: LangChain
    lets its error end the invocation, and reports no end of that run to any handler)."""

    raise_error = True

    def on_chain_start(self, serialized, inputs, *, parent_run_id=None, **kwargs):
        if parent_run_id is None:
            raise RuntimeError("the app's callback refused this run")


def test_an_invocation_another_callback_refused_as_it_started_leaves_no_trace_in_the_recorder(tmp_path):
    """Before: the recorder kept the run it saw start (no end ever came), and the run's summary counted
    it as ``unfinished`` though it had ended (raised) before anything ran."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(RuntimeError, match="the app's callback refused this run"):
                graph.invoke(QUESTION, {"callbacks": [recorder, RaisesOnStart()]}, context=context)
            assert server.requests == []
            with pytest.raises(RuntimeError, match="the app's callback refused this run"):
                graph.invoke(QUESTION, {"callbacks": [recorder, RaisesOnStart()]}, context=context)
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]
