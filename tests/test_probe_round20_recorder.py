"""The trace recorder in a user's app (round 20): an async stream of the app's own graph closed after
the recorder's block, a replay from an earlier checkpoint whose question the app edited
(``update_state``: a fork), and more ways an app drives it (an ``interrupt()`` in the app's own node
around a protocol graph resumed with ``Command(resume=...)``, ``astream_events`` read to its end,
``ThreadPoolExecutor`` workers sharing one recorder, a config's own ``run_name``, tags and metadata).
Models are the user's own ``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py);
each case counts the rows written against what the models were asked."""

import asyncio
import json

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from db_rows import rows
from openai_stub import StubServer, chat_reply
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str
    note: str


def app_with_align_as_its_node():
    """The user's graph: ALIGN's compiled graph as its one node."""
    builder = StateGraph(AppState, context_schema=DelegationContext)
    builder.add_node("align", build_delegation_graph().compile())
    builder.add_edge(START, "align")
    builder.add_edge("align", END)
    return builder.compile()


# ----------------------------------------------------------------------------- 1. closed after the block

def test_an_async_stream_of_the_apps_graph_closed_after_the_block_is_unfinished_and_not_written(tmp_path):
    """The app's graph (ALIGN as its node) streamed asynchronously, read for one chunk, the block ended,
    then ``aclose()``. Before: its end, reported in ``aclose()``, was taken for a stream closed inside
    the block: a failed question written after the block and the run marked ``failed`` again."""
    db = tmp_path / "app.db"
    graph = app_with_align_as_its_node()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                await graph.ainvoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]},
                                    context=context)
                stream = graph.astream(QUESTION, {"callbacks": [recorder]}, context=context,
                                       stream_mode="updates", subgraphs=True)
                await anext(stream)
            await asyncio.sleep(0.05)
            await stream.aclose()
            await asyncio.sleep(0.05)

        asyncio.run(app())
    assert rows(db, "select question_id from questions") == [("q-2622f7aa",)]
    assert rows(db, "select question_id, count(*) from model_calls group by 1") == [("q-2622f7aa", 4)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0, "unfinished": 1}))]


# ----------------------------------------------------------------------------- 2. time travel: a fork

def echo_handler(path, body):
    """Every request answered for the question it asks: 6 for "What is 3 + 3?", else 4."""
    return 200, chat_reply(body, ["The answer is 6." if "3 + 3" in json.dumps(body.get("messages")) else
                                  "The answer is 4."])


def before_delegate(graph, thread, question):
    """The config of the thread's checkpoint of ``question`` before ALIGN's first node."""
    for state in graph.get_state_history(thread):  # newest first
        if state.next == ("delegate",) and state.values.get("question") == question:
            return state.config
    raise AssertionError(f"no checkpoint before delegate of {question!r}")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_fork_whose_question_the_app_edited_is_recorded_with_the_question_its_models_were_asked(
        tmp_path, asynchronous):
    """``update_state(earlier, {"question": "What is 3 + 3?"})``, then the graph run from that edit:
    the models are asked 3 + 3 and answer 6. Before: the replay was recorded as ``What is 2 + 2?``
    with gold 4 and the answer 6 scored wrong (the thread's input), and the app's output said so too.
    Now its question is the edited one, with no gold (the input's is 2 + 2's): not scored."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(echo_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def fork(config):
            return await graph.ainvoke(None, config, context=context)

        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            forked = graph.update_state(before_delegate(graph, thread, QUESTION["question"]),
                                        {"question": "What is 3 + 3?"})
            config = {**forked, "callbacks": [recorder]}
            out = asyncio.run(fork(config)) if asynchronous else graph.invoke(None, config, context=context)
        assert len(server.requests) == 4
    assert out["answer"] == "6" and out["methods"]["align"]["correct"] is None
    assert rows(db, "select question_id, question, gold, answer, correct, model_calls from questions order by idx") == [
        ("q-f465154e", "What is 2 + 2?", "4", "4", 1, 4),
        ("q-2622f7aa-replay", "What is 3 + 3?", None, "6", None, 4)]
    assert rows(db, "select question_id, count(*) from model_calls where messages like '%What is 3 + 3?%' "
                    "group by 1") == [("q-2622f7aa-replay", 4)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 2, "failed": 0}))]


def test_a_fork_of_an_earlier_question_after_a_later_one_is_scored_against_its_own_input(tmp_path):
    """Question 2 + 2, then 3 + 3 on the same thread, then a fork of 2 + 2's checkpoint before its
    first node (``update_state`` leaving its question as it was): the models are asked 2 + 2 again.
    Before: the fork, its checkpoint newer than 3 + 3's input, was recorded as ``What is 3 + 3?``
    with gold 6 (the newest input before it by id, not the one it descends from) and its 4 scored wrong."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(echo_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {**thread, "callbacks": [recorder]},
                         context=context)
            forked = graph.update_state(before_delegate(graph, thread, QUESTION["question"]),
                                        {"question": QUESTION["question"]})
            out = graph.invoke(None, {**forked, "callbacks": [recorder]}, context=context)
        assert len(server.requests) == 6
    assert out["answer"] == "4" and out["methods"]["align"]["correct"] is True
    assert rows(db, "select question_id, question, gold, answer, correct from questions order by idx") == [
        ("q-f465154e", "What is 2 + 2?", "4", "4", 1), ("q-2622f7aa", "What is 3 + 3?", "6", "6", 1),
        ("q-f465154e-replay", "What is 2 + 2?", "4", "4", 1)]


# ----------------------------------------------------------------------------- 3. interrupt() in the app's node

def test_a_protocol_graph_answered_before_the_apps_node_paused_is_not_counted_paused_on_resume(tmp_path):
    """The app's node asks ALIGN (``graph.invoke``), then ``interrupt()`` for a review; resumed with
    ``Command(resume="yes")``, the node runs again and LangGraph gives ALIGN's answer from its
    checkpoint (no model asked, no node run). Before: that second run, no node under it, was taken
    for a question paused before its first node: the run's summary counted it ``paused`` though the
    question was answered and recorded, and nothing was paused."""
    db = tmp_path / "app.db"
    align = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        def solve(state: AppState) -> dict:
            out = align.invoke({"question": state["question"], "gold": state["gold"]}, context=context)
            return {"answer": out["answer"], "note": str(interrupt({"answer": out["answer"]}))}

        builder = StateGraph(AppState)
        builder.add_node("solve", solve)
        builder.add_edge(START, "solve")
        builder.add_edge("solve", END)
        app = builder.compile(checkpointer=InMemorySaver())
        thread = {"configurable": {"thread_id": "t1"}}
        with TraceRecorder(db, run_id="app") as recorder:
            app.invoke(QUESTION, {**thread, "callbacks": [recorder]})
            out = app.invoke(Command(resume="yes"), {**thread, "callbacks": [recorder]})
        assert len(server.requests) == 2
    assert (out["answer"], out["note"]) == ("4", "yes")
    assert rows(db, "select question_id, answer, correct, model_calls from questions") == [("q-f465154e", "4", 1, 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]
