"""The trace recorder in a user's app (round 14 probes): an app whose state keeps the protocol's
``methods``, a recorder passed in a ``CallbackManager``, a server that answers 200 with an error body,
and a multiple-choice gold given as a number. Models are the user's own ``ChatOpenAI`` clients on the
loopback OpenAI stub (tests/openai_stub.py); each case counts the rows written against what the
server was asked."""

import json
import threading

import pytest
from langchain_core.callbacks import CallbackManager
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import RecorderNotInheritedError, TraceRecorder
from agora.models.pool import ModelPool
from agora.tasks.errors import InputError
from db_rows import rows
from openai_stub import StubServer, chat_reply, default_handler
from test_probe_round12_recorder import chat

CONFIG = {"n_agents": 2, "k_samples": 2}  # one request of n=2 to member a, one to member b: 4 samples
QUESTION = {"question": "What is 2 + 2?", "gold": "4"}


def user_pool(url: str, max_retries: int = 0) -> ModelPool:
    return ModelPool.from_chat_models({name: chat(url, name) for name in "ab"}, max_retries=max_retries)


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str
    methods: dict  # the app keeps the protocol's methods (its results and costs)
    note: str


def review(state: AppState) -> dict:
    return {"note": str(interrupt({"answer": state.get("answer")}))}


@pytest.mark.parametrize("paused", [False, True])
def test_an_apps_graph_whose_state_keeps_the_methods_records_the_protocols_question(tmp_path, paused):
    """Before: the app's own graph, whose output held ``methods`` led by ``align``, was taken for the
    protocol's graph: the question was written as failed (``no sample for the protocol's method``,
    no ``model_calls`` row for its 4 samples) and the run ended ``failed``, though the app got its
    answer; paused in the app's node after the protocol, it was not recorded at all."""
    db = tmp_path / "app.db"
    builder = StateGraph(AppState, context_schema=DelegationContext)
    builder.add_node("align", build_delegation_graph().compile())
    builder.add_edge(START, "align")
    if paused:
        builder.add_node("review", review)
        builder.add_edge("align", "review")
        builder.add_edge("review", END)
    else:
        builder.add_edge("align", END)
    app = builder.compile(checkpointer=InMemorySaver() if paused else None)
    config = {"configurable": {"thread_id": "t1"}} if paused else {}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            out = app.invoke(QUESTION, {**config, "callbacks": [recorder]}, context=context)
            if paused:
                out = app.invoke(Command(resume="ok"), {**config, "callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2
    assert out["answer"] == "4" and out["methods"]["align"]["correct"] is True
    assert rows(db, "select question_id, model_calls, answer, correct from questions") == [("q-f465154e", 4, "4", 1)]
    assert rows(db, "select count(*), count(error) from model_calls") == [(4, 0)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]


def test_a_recorder_its_graphs_nodes_do_not_inherit_is_refused_before_any_model_is_asked(tmp_path):
    """Before: ``config={"callbacks": CallbackManager([recorder])}`` (handlers the child runs do not
    inherit) ran the question, asked the models (2 requests, 4 samples) and recorded nothing, without
    a word: the recorder saw the graph start and end but none of its nodes."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(RecorderNotInheritedError) as refused:
                graph.invoke(QUESTION, {"callbacks": CallbackManager([recorder])}, context=context)
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2  # the second invocation's only
    assert str(refused.value) == (
        "TraceRecorder 'app' sees this graph's run but none of its nodes (it was passed as a handler that child runs "
        "do not inherit, as CallbackManager([recorder]) is), so its questions could not be recorded; pass it in a "
        'list, config={"callbacks": [recorder]}; no model was asked')
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]


class ErrorBodyOnce:
    """Member ``a``'s first request is answered ``200 {"error": {...}}`` (a server overloaded mid-request,
    as some OpenAI-compatible servers and proxies reply); every other request is answered."""

    def __init__(self):
        self.lock, self.sent = threading.Lock(), False

    def __call__(self, path, body):
        with self.lock:
            if body.get("model") == "a" and not self.sent:
                self.sent = True
                return 200, {"error": {"message": "overloaded", "type": "server_error"}}
        return default_handler(path, body)


def test_a_200_reply_with_an_error_body_is_retried_and_every_attempt_is_a_row(tmp_path):
    """Before: langchain-openai's ``ValueError({'message': 'overloaded', ...})`` was taken for a
    permanent error: member ``a`` was not asked again (``max_retries=2``), so the question was answered
    from ``b``'s 2 samples alone."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer(ErrorBodyOnce()) as server:
        context = DelegationContext(user_pool(server.base_url, max_retries=2), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            assert graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)["answer"] == "4"
        assert sorted(r["body"]["model"] for r in server.requests) == ["a", "a", "b"]
    assert rows(db, "select model, attempt, error from model_calls where error is not null") == [
        ("a", 0, "ValueError: {'message': 'overloaded', 'type': 'server_error'}")]
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]


def test_a_multiple_choice_gold_given_as_a_number_is_refused_before_any_model_is_asked(tmp_path):
    """Before: ``gold=1`` became ``'1'``, past the option-letter check (text only), and every method
    was scored wrong (no answer can be ``1``); ``'F'`` of 4 options was refused."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()

    def letter_b(path, body):
        return 200, chat_reply(body, ["The answer is B."])

    with StubServer(letter_b) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(InputError) as refused:
                graph.invoke({"question": "Which is 2 + 2? A) 3 B) 4 C) 5 D) 6", "kind": "mc", "n_choices": 4,
                              "gold": 1}, {"callbacks": [recorder]}, context=context)
        assert server.requests == []
    assert str(refused.value) == ("graph input field 'gold' of a multiple-choice question must be one of the option "
                                  "letters A-D, not 1 (no answer could match it)")
    assert rows(db, "select count(*) from questions") == [(0,)]
