"""Every attempt a row, in the app's recorder and in ``agora run`` (round 12 probes, continued): the
requests still in flight when another member's call raised, the answered calls of a question that
raised, and how ``agora report run`` shows the samples of failed questions. Models are the loopback
OpenAI stub (tests/openai_stub.py); each case counts the rows against what the server was asked."""

import asyncio
import json
import threading

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from openai_stub import DROP, StubServer, default_handler
from typer.testing import CliRunner

from agora.agents.delegation import DelegationConfig
from agora.cli.main import app
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.graphs.runner import run_problems
from agora.models.pool import ModelCallError, ModelSpec, pool_from_specs
from agora.tasks.problem import Problem
from db_rows import rows

CONFIG = DelegationConfig(n_agents=2, k_samples=2)  # one request of n=2 to member a, one to member b
QUESTION = {"question": "What is 2 + 2?", "gold": "4"}


def pool(url: str):
    return pool_from_specs([ModelSpec(name=n, backend="openai", model=n, base_url=url, max_retries=0, timeout_s=10)
                            for n in "ab"])


def run(db, url, run_id="r"):
    from agora.traces.store import TraceStore

    the_pool = pool(url)
    return run_problems(build_delegation_graph(), [Problem("q1", QUESTION["question"], "4")], store=TraceStore(db),
                        run_id=run_id, protocol="align", context=DelegationContext(pool=the_pool, config=CONFIG),
                        config={"n": 2}, pool_description=the_pool.describe(), dataset={"format": "test"})


class InFlight:
    """A server on which member ``b``'s request is held (in flight) and member ``a``'s connection
    is dropped once ``b``'s has arrived: ``a``'s call raises ``ModelCallError`` while ``b``'s waits."""

    def __init__(self):
        self.arrived, self.release = threading.Event(), threading.Event()

    def __call__(self, path, body):
        if body.get("model") == "b":
            self.arrived.set()
            self.release.wait(20)
            return default_handler(path, body)
        self.arrived.wait(20)
        threading.Timer(1.0, self.release.set).start()  # (b's reply comes after its call was cancelled)
        return 200, DROP


def test_a_request_in_flight_when_another_members_call_raised_is_a_row_in_the_recorder(tmp_path):
    """Before: member ``b``'s request, cancelled when ``a``'s call raised, had no row, though the server
    was asked (only ``a``'s failed attempt was written)."""
    db = tmp_path / "app.db"
    handler = InFlight()
    graph = build_delegation_graph().compile()
    with StubServer(handler) as server:
        context = DelegationContext(pool(server.base_url), CONFIG)
        try:
            with TraceRecorder(db, run_id="app") as recorder:
                with pytest.raises(ModelCallError):
                    asyncio.run(graph.ainvoke(QUESTION, {"callbacks": [recorder]}, context=context))
        finally:
            handler.release.set()
        assert sorted(r["body"]["model"] for r in server.requests) == ["a", "b"]
    assert rows(db, "select question_id, model, attempt, substr(error, 1, 41) from model_calls order by model") == [
        ("q-f465154e", "a", 0, "ModelUnavailableError: no endpoint of 'a'"), ("q-f465154e", "b", 0, "cancelled")]
    assert rows(db, "select count(*) from questions") == [(0,)]
    [failed] = json.loads(rows(db, "select summary from runs")[0][0])["failed_questions"].items()
    assert failed[0] == "q-f465154e" and failed[1].startswith("ModelCallError: model 'a' is unreachable")


def test_a_request_in_flight_when_another_members_call_raised_is_a_row_in_agora_run(tmp_path):
    db = tmp_path / "t.db"
    handler = InFlight()
    with StubServer(handler) as server:
        try:
            with pytest.raises(ModelCallError):
                run(db, server.base_url)
        finally:
            handler.release.set()
        assert sorted(r["body"]["model"] for r in server.requests) == ["a", "b"]
    assert rows(db, "select question_id, model, attempt, substr(error, 1, 41) from model_calls order by model") == [
        ("q1", "a", 0, "ModelUnavailableError: no endpoint of 'a'"), ("q1", "b", 0, "cancelled")]
    [(latency,)] = rows(db, "select latency_s from model_calls where model = 'b'")
    assert 0 < latency < 1  # the time until it was cancelled (no reply came)


class LateDrop:
    """Member ``a`` answers at once; member ``b``'s connection is dropped once ``a``'s reply has gone
    (``a``'s node finished), while ``broken``; afterwards every request is answered."""

    def __init__(self):
        self.broken, self.answered = True, threading.Event()

    def __call__(self, path, body):
        if body.get("model") == "a":
            self.answered.set()
            return default_handler(path, body)
        if self.broken:
            self.answered.wait(20)
            threading.Event().wait(0.3)  # (a's reply read, its node ended)
            return 200, DROP
        return default_handler(path, body)


def test_a_question_that_raised_keeps_its_answered_calls_and_a_resume_does_not_double_them(tmp_path):
    """Before: member ``a``'s 2 answered samples were not written (only ``b``'s failed attempt), so a
    question never resumed lost them; they are written with the failed question, and the resume that
    answers it writes each call once."""
    db = tmp_path / "app.db"
    handler = LateDrop()
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(handler) as server:
        context = DelegationContext(pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ModelCallError):
                graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            assert rows(db, "select model, substr(error, 1, 41) from model_calls order by model") == [
                ("a", None), ("a", None), ("b", "ModelUnavailableError: no endpoint of 'b'")]
            assert recorder.failed == {"align": 1}
            handler.broken = False
            out = graph.invoke(None, {**thread, "callbacks": [recorder]}, context=context)
        assert out["answer"] == "4"
        assert [r["body"]["model"] for r in server.requests].count("a") == 1  # a's node kept by the checkpoint
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select model, count(*), count(error) from model_calls group by model order by model") == [
        ("a", 2, 0), ("b", 3, 1)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 1, "failed": 0}))]


def test_agora_run_keeps_the_answered_calls_of_a_question_that_raised_and_the_rerun_does_not_double_them(tmp_path):
    db = tmp_path / "t.db"
    handler = LateDrop()
    with StubServer(handler) as server:
        with pytest.raises(ModelCallError):
            run(db, server.base_url)
        assert rows(db, "select question_id, model, substr(error, 1, 41) from model_calls order by model") == [
            ("q1", "a", None), ("q1", "a", None), ("q1", "b", "ModelUnavailableError: no endpoint of 'b'")]
        handler.broken = False
        out = run(db, server.base_url)
        assert [q.answer for q in out.outcomes] == ["4"]
        assert [r["body"]["model"] for r in server.requests].count("a") == 1  # resumed: a's node kept
    assert rows(db, "select question_id, model_calls from questions") == [("q1", 4)]
    assert rows(db, "select model, count(*), count(error) from model_calls group by model order by model") == [
        ("a", 2, 0), ("b", 3, 1)]


def test_report_run_shows_the_samples_of_failed_questions_under_their_own_label(tmp_path):
    """Before: ``samples' answers found by: unknown 2 (100%)``: the samples of a question that failed are
    not read for an answer (the question has no row), which is no unknown way of finding one."""
    db = tmp_path / "t.db"
    handler = LateDrop()
    with StubServer(handler) as server:
        with pytest.raises(ModelCallError):
            run(db, server.base_url)
    out = CliRunner().invoke(app, ["report", "run", "r", "--db", str(db)])
    assert out.exit_code == 0, out.output
    [line] = [x for x in out.output.splitlines() if x.startswith("samples' answers found by")]
    assert line == "samples' answers found by: failed question 2 (100%)"
    out = CliRunner().invoke(app, ["report", "run", "r", "--db", str(db), "--json"])
    assert json.loads(out.output)["sample_answers"] == {"failed question": 2}
    with StubServer() as server:  # the rerun answers it: its samples are read
        run(db, server.base_url)
    out = CliRunner().invoke(app, ["report", "run", "r", "--db", str(db), "--json"])
    assert json.loads(out.output)["sample_answers"] == {"marker": 4}
