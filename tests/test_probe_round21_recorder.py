"""The trace recorder in a user's app (round 21): a paused question whose ``question`` the app edited
(``update_state`` on the paused thread, then resumed through the same recorder), and more ways an app
drives it (``batch``/``abatch``, ``asyncio.gather``, ``asyncio.wait_for``, ``stream(subgraphs=True)``
and several stream modes, a ``Send`` fan-out, ``with_config``, ``recursion_limit``, ``durability``,
two protocols in one block, the recorder after its block, one ``question_id`` in two threads).
Models are the user's own ``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py);
each case counts the rows written against what the models were asked."""

import asyncio
import json
import operator
import threading
import time
from typing import Annotated

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.models.errors import ModelCallError
from db_rows import rows
from openai_stub import DROP, StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool
from test_probe_round20_recorder import echo_handler

ANSWERED = json.dumps({"questions": 1, "failed": 0})


# ----------------------------------------------------------------------------- 1. a paused question edited

@pytest.mark.parametrize("how, asynchronous", [("update_state", False), ("update_state", True), ("command", False),
                                                ("command", True)])
def test_a_paused_question_the_app_edited_is_recorded_with_the_question_its_models_were_asked(
        tmp_path, how, asynchronous):
    """ALIGN paused before its first node (``interrupt_before=["delegate"]``); the app edits the
    question (``update_state(thread, {"question": "What is 3 + 3?"})``, or resumes with
    ``Command(update={"question": ...})``) and resumes the thread through the same recorder: the
    models are asked 3 + 3 and answer 6. Before: the question was recorded as the first sitting's
    input, ``What is 2 + 2?`` with gold 4, its 6 scored wrong (after ``update_state`` the app's own
    output left it unscored; after a ``Command`` it was scored wrong there too). Now it is the
    edited question, with no gold: not scored."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["delegate"])
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(echo_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            config = {**thread, "callbacks": [recorder]}
            graph.invoke(QUESTION, config, context=context)
            resume = None
            if how == "update_state":
                graph.update_state(thread, {"question": "What is 3 + 3?"})
            else:
                resume = Command(update={"question": "What is 3 + 3?"})
            out = (asyncio.run(graph.ainvoke(resume, config, context=context)) if asynchronous
                   else graph.invoke(resume, config, context=context))
        assert len(server.requests) == 2
    assert out["answer"] == "6" and out["methods"]["align"]["correct"] is None
    assert rows(db, "select question_id, question, gold, answer, correct, model_calls from questions") == [
        ("q-2622f7aa", "What is 3 + 3?", None, "6", None, 4)]
    assert rows(db, "select question_id, count(*) from model_calls group by 1") == [("q-2622f7aa", 4)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "finished", ANSWERED)]


def test_a_paused_question_edited_back_to_its_own_text_keeps_its_input_and_gold(tmp_path):
    """The edit writes the question the input asked (no change): scored against the input's gold."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["delegate"])
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(echo_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            config = {**thread, "callbacks": [recorder]}
            graph.invoke({**QUESTION, "question_id": "mine"}, config, context=context)
            graph.update_state(thread, {"question": QUESTION["question"]})
            out = graph.invoke(None, config, context=context)
    assert out["methods"]["align"]["correct"] is True
    assert rows(db, "select question_id, question, gold, answer, correct, model_calls from questions") == [
        ("mine", "What is 2 + 2?", "4", "4", 1, 4)]


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str
    methods: dict  # the app keeps the protocol's methods (its results, scored on the way out)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_paused_subgraph_question_the_app_edited_is_recorded_with_the_question_its_models_were_asked(
        tmp_path, asynchronous):
    """ALIGN as the app's node, paused before its first node; the app edits the question in ALIGN's
    own state (``update_state`` on the subgraph's config, as Studio's state editor does) and resumes
    the app's thread: the models are asked 3 + 3 and answer 6. Before: recorded as the first
    sitting's ``What is 1 + 1?`` with gold 2, its 6 scored wrong, in the app's state too."""
    db = tmp_path / "app.db"
    builder = StateGraph(AppState, context_schema=DelegationContext)
    builder.add_node("protocol", build_delegation_graph().compile(interrupt_before=["delegate"]))
    builder.add_edge(START, "protocol")
    builder.add_edge("protocol", END)
    app = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(echo_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            config = {**thread, "callbacks": [recorder]}
            app.invoke({"question": "What is 1 + 1?", "gold": "2"}, config, context=context)
            paused = app.get_state(thread, subgraphs=True).tasks[0].state
            app.update_state(paused.config, {"question": "What is 3 + 3?"})
            out = (asyncio.run(app.ainvoke(None, config, context=context)) if asynchronous
                   else app.invoke(None, config, context=context))
        assert len(server.requests) == 2
    assert out["answer"] == "6" and out["methods"]["align"]["correct"] is None
    assert rows(db, "select question_id, question, gold, answer, correct, model_calls from questions") == [
        ("q-2622f7aa", "What is 3 + 3?", None, "6", None, 4)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "finished", ANSWERED)]


# ----------------------------------------------------------------------------- 2. a fan-out cancelled

class FanState(TypedDict, total=False):
    items: list
    answers: Annotated[list, operator.add]


def held_replies(release: threading.Event):
    """Every request answered (for the question it asks) once ``release`` is set."""
    def handler(path, body):
        release.wait(30)
        return echo_handler(path, body)
    return handler


def question_of(messages: str) -> str:
    return next(q for q in ("1 + 1", "2 + 2", "3 + 3") if q in messages)


@pytest.mark.parametrize("as_node", [False, True])
def test_a_fan_out_of_protocol_questions_cancelled_keeps_each_questions_calls_under_its_own_id(tmp_path, as_node):
    """The app's graph sends three questions (``Send``) to a node that awaits ALIGN (or to ALIGN's
    graph as the node), and the app cancels the invocation (``asyncio.wait_for``'s timeout) while
    the six requests wait for their replies. Before: the six cancelled attempts were all written
    under the first question's id (``q-59dc3423``, 1 + 1), two of them asking 2 + 2 and two 3 + 3,
    and the other two failed questions had none. Now each question has its own two."""
    db = tmp_path / "app.db"
    release = threading.Event()
    with StubServer(held_replies(release)) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        align = build_delegation_graph().compile()

        async def solve(state: dict) -> dict:
            out = await align.ainvoke({"question": state["question"], "gold": state["gold"]}, context=context)
            return {"answers": [out["answer"]]}

        builder = StateGraph(FanState, context_schema=DelegationContext)
        builder.add_node("solve", align if as_node else solve)
        builder.add_conditional_edges(START, lambda state: [Send("solve", item) for item in state["items"]])
        builder.add_edge("solve", END)
        app = builder.compile()
        items = [{"question": f"What is {n} + {n}?", "gold": str(2 * n)} for n in (1, 2, 3)]

        async def cancelled(recorder: TraceRecorder) -> None:
            task = asyncio.ensure_future(app.ainvoke({"items": items}, {"callbacks": [recorder]}, context=context))
            while len(server.requests) < 6:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        try:
            with TraceRecorder(db, run_id="app") as recorder:
                asyncio.run(cancelled(recorder))
        finally:
            release.set()
    recorded = rows(db, "select question_id, model, error, messages from model_calls")
    assert sorted((qid, model, error, question_of(messages)) for qid, model, error, messages in recorded) == [
        ("q-2622f7aa", "a", "cancelled", "3 + 3"), ("q-2622f7aa", "b", "cancelled", "3 + 3"),
        ("q-59dc3423", "a", "cancelled", "1 + 1"), ("q-59dc3423", "b", "cancelled", "1 + 1"),
        ("q-f465154e", "a", "cancelled", "2 + 2"), ("q-f465154e", "b", "cancelled", "2 + 2")]
    abandoned = "the invocation was abandoned (its asyncio task was cancelled)"
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, json.loads(summary)) == ("failed", {"questions": 0, "failed": 3, "failed_questions": {
        "q-59dc3423": abandoned, "q-f465154e": abandoned, "q-2622f7aa": abandoned}})


def test_a_fan_out_whose_branch_raises_keeps_the_calls_its_other_branches_had_in_flight(tmp_path):
    """The app's async node awaits ALIGN per ``Send`` branch; model ``a``'s connection to the 2 + 2
    question dies (``ModelCallError``) while the five other requests wait for their replies, and
    LangGraph cancels the other branches on its way out. Before: their cancellations reached the
    model calls after the invocation's end was recorded, and the four attempts of 1 + 1 and 3 + 3
    were never written (their questions failed without a row). Now each question has its own."""
    db = tmp_path / "app.db"
    release = threading.Event()
    server = StubServer()

    def handler(path, body):
        if body.get("model") == "a" and "2 + 2" in json.dumps(body.get("messages")):
            while len(server.requests) < 6:
                time.sleep(0.01)
            return 200, DROP
        return held_replies(release)(path, body)

    server.handler = handler
    with server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        align = build_delegation_graph().compile()

        async def solve(state: dict) -> dict:
            out = await align.ainvoke({"question": state["question"], "gold": state["gold"]}, context=context)
            return {"answers": [out["answer"]]}

        builder = StateGraph(FanState)
        builder.add_node("solve", solve)
        builder.add_conditional_edges(START, lambda state: [Send("solve", item) for item in state["items"]])
        builder.add_edge("solve", END)
        app = builder.compile()
        items = [{"question": f"What is {n} + {n}?", "gold": str(2 * n)} for n in (1, 2, 3)]
        try:
            with TraceRecorder(db, run_id="app") as recorder:
                with pytest.raises(ModelCallError):
                    asyncio.run(app.ainvoke({"items": items}, {"callbacks": [recorder]}))
        finally:
            release.set()
    recorded = rows(db, "select question_id, model, error, messages from model_calls")
    assert sorted((qid, model, error, question_of(messages)) for qid, model, error, messages in recorded) == [
        ("q-2622f7aa", "a", "cancelled", "3 + 3"), ("q-2622f7aa", "b", "cancelled", "3 + 3"),
        ("q-59dc3423", "a", "cancelled", "1 + 1"), ("q-59dc3423", "b", "cancelled", "1 + 1"),
        ("q-f465154e", "a", "OpenAIConnectionError: Connection error.", "2 + 2"),
        ("q-f465154e", "b", "cancelled", "2 + 2")]
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, json.loads(summary)["failed"]) == ("failed", 3)
