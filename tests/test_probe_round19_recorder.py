"""The trace recorder in a user's app (round 19): a protocol graph called from the app's own node,
sync and async; streams closed after their first chunk, inside and after the recorder's block; a
protocol graph under ``.with_retry()`` asked asynchronously; an app callback handler that raises in
``on_chain_error``; a question paused in one ``with`` block and resumed in the next; two questions
sent on one checkpointer thread at once. Models are the user's own ``ChatOpenAI`` clients on the
loopback OpenAI stub (tests/openai_stub.py); each case counts the rows written against what the
models were asked."""

import asyncio
import json
import time

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.models.errors import ModelCallError
from db_rows import rows
from openai_stub import StubServer, default_handler
from test_probe_round12_recorder import first_request_of_a_dropped
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool
from test_probe_round16_recorder_app import ABANDONED
from test_recorder_app import paused_app

ANSWERED = json.dumps({"questions": 1, "failed": 0})


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str
    note: str


def app_calling_align(context: DelegationContext, *, asynchronous: bool):
    """The user's graph: one node that asks ALIGN itself (``graph.invoke`` / ``await graph.ainvoke``)."""
    align = build_delegation_graph().compile()

    def solve(state: AppState) -> dict:
        return {"answer": align.invoke({"question": state["question"], "gold": state["gold"]},
                                       context=context)["answer"]}

    async def asolve(state: AppState) -> dict:
        out = await align.ainvoke({"question": state["question"], "gold": state["gold"]}, context=context)
        return {"answer": out["answer"]}

    builder = StateGraph(AppState)
    builder.add_node("solve", asolve if asynchronous else solve)
    builder.add_edge(START, "solve")
    builder.add_edge("solve", END)
    return builder.compile()


# ----------------------------------------------------------------------------- 1. called from a node

@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_protocol_graph_called_from_the_apps_node_is_recorded_once(tmp_path, asynchronous):
    db = tmp_path / "app.db"
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        app = app_calling_align(context, asynchronous=asynchronous)
        with TraceRecorder(db, run_id="app") as recorder:
            if asynchronous:
                out = asyncio.run(app.ainvoke(QUESTION, {"callbacks": [recorder]}))
            else:
                out = app.invoke(QUESTION, {"callbacks": [recorder]})
        assert len(server.requests) == 2
    assert out["answer"] == "4"
    assert rows(db, "select question_id, answer, correct, model_calls from questions") == [("q-f465154e", "4", 1, 4)]
    assert rows(db, "select count(*), count(error) from model_calls") == [(4, 0)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "finished", ANSWERED)]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_protocol_graph_called_from_the_apps_node_that_raises_is_a_failed_question(tmp_path, asynchronous):
    """Model ``a``'s connection dies: the app's node raises ``ModelCallError`` through its graph."""
    db = tmp_path / "app.db"
    with StubServer(first_request_of_a_dropped()) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        app = app_calling_align(context, asynchronous=asynchronous)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ModelCallError):
                if asynchronous:
                    asyncio.run(app.ainvoke(QUESTION, {"callbacks": [recorder]}))
                else:
                    app.invoke(QUESTION, {"callbacks": [recorder]})
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select question_id, model, error is not null from model_calls where model = 'a'") == [
        ("q-f465154e", "a", 1)]
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, list(json.loads(summary)["failed_questions"])) == ("failed", ["q-f465154e"])


# ----------------------------------------------------------------------------- 2. closed after one chunk

@pytest.mark.parametrize("mode", ["updates", "custom"])
def test_a_sync_stream_closed_after_its_first_chunk_inside_the_block_is_a_failed_question(tmp_path, mode):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            stream = graph.stream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode=mode)
            next(stream)
            stream.close()
        asked = len(server.requests)
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select count(*) from model_calls") == [(2 * asked,)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "failed", ABANDONED)]


@pytest.mark.parametrize("mode", ["updates", "custom"])
def test_an_async_stream_closed_after_its_first_chunk_inside_the_block_is_a_failed_question(tmp_path, mode):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                stream = graph.astream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode=mode)
                await anext(stream)
                await stream.aclose()

        asyncio.run(app())
        asked = len(server.requests)
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select count(*) from model_calls where error is null") == [(2 * asked,)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "failed", ABANDONED)]


def test_a_sync_stream_closed_after_the_block_is_counted_unfinished_and_not_written(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]}, context=context)
            stream = graph.stream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode="updates")
            next(stream)
        stream.close()
    assert rows(db, "select question_id from questions") == [("q-2622f7aa",)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0, "unfinished": 1}))]


def test_an_async_stream_closed_after_the_block_is_counted_unfinished_and_not_written(tmp_path):
    """The block ended with the stream open (read for one chunk): it is ``unfinished``; its later
    ``aclose()`` is not the app closing it inside the block, so nothing of it is written then. Before:
    recorded as a failed question and the runs marked again (the protocol graph's ``astream`` left
    LangGraph's stream to the event loop's generator finalizer, which reported its end in a task of its
    own after ``aclose()`` returned, so an ``aclose()`` inside the block also ended after it)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                await graph.ainvoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]},
                                    context=context)
                stream = graph.astream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode="updates")
                await anext(stream)
            await asyncio.sleep(0.05)
            await stream.aclose()
            await asyncio.sleep(0.05)

        asyncio.run(app())
    assert rows(db, "select question_id from questions") == [("q-2622f7aa",)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0, "unfinished": 1}))]


# ----------------------------------------------------------------------------- 3. with_retry, async

@pytest.mark.parametrize("how", ["ainvoke", "abatch"])
def test_a_protocol_graph_under_with_retry_asked_async_is_one_answered_question(tmp_path, how):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile().with_retry(stop_after_attempt=3, wait_exponential_jitter=False)
    with StubServer(first_request_of_a_dropped()) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app():
            with TraceRecorder(db, run_id="app") as recorder:
                if how == "ainvoke":
                    return await graph.ainvoke(QUESTION, {"callbacks": [recorder]}, context=context)
                return (await graph.abatch([QUESTION], {"callbacks": [recorder]}, context=context))[0]

        out = asyncio.run(app())
    assert out["answer"] == "4"
    assert rows(db, "select question_id, model_calls, answer, correct from questions") == [("q-f465154e", 4, "4", 1)]
    # the first try's failed attempts: model a's dropped request (and b's, when the error cancelled it)
    assert rows(db, "select question_id, model, error from model_calls where model = 'a' and error is not null") == [
        ("q-f465154e", "a", "OpenAIConnectionError: Connection error.")]
    assert rows(db, "select count(*) from model_calls where error is null") == [(4,)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "finished", ANSWERED)]


# ----------------------------------------------------------------------------- 4. a handler raising on errors

class ErrorRaisingHandler(BaseCallbackHandler):
    """The app's own handler, passed before the recorder, whose ``on_chain_error`` raises (with
    ``raise_error``: LangChain lets its error through, and the handlers after it hear nothing)."""

    raise_error = True

    def on_chain_error(self, error, *, run_id, **kwargs) -> None:
        raise RuntimeError("the app's error handler failed")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_apps_handler_raising_in_on_chain_error_leaves_a_failed_question_with_its_calls(tmp_path, asynchronous):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer(first_request_of_a_dropped()) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        config = {"callbacks": [ErrorRaisingHandler(), TraceRecorder(db, run_id="app")]}
        with config["callbacks"][1]:
            with pytest.raises(RuntimeError, match="the app's error handler failed"):
                if asynchronous:
                    asyncio.run(graph.ainvoke(QUESTION, config, context=context))
                else:
                    graph.invoke(QUESTION, config, context=context)
        asked_b = any(body.get("model") == "b" for body in server.bodies())
    assert rows(db, "select count(*) from questions") == [(0,)]
    # model a's dropped request; b's 2 samples (a sync fan-out joins b's call; an async one may cancel
    # it: recorded as a failed call once it was started, or never started and never sent on a busy
    # machine, where a's failure cancels b's task before it runs: then nothing of b's, and the server
    # saw no request from b either)
    recorded = rows(db, "select model, count(*), count(error) from model_calls group by 1")
    allowed = [[("a", 1, 1), ("b", 2, 0)]]
    if asynchronous:
        allowed += [[("a", 1, 1), ("b", 1, 1)]] + ([] if asked_b else [[("a", 1, 1)]])
    assert recorded in allowed, (recorded, asked_b)
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, json.loads(summary)) == ("failed", {"questions": 0, "failed": 1, "failed_questions": {
        "q-f465154e": "RuntimeError: the app's error handler failed"}})


# ----------------------------------------------------------------------------- 5. paused in one block, resumed in the next

@pytest.mark.parametrize("where", ["top-level", "subgraph"])
def test_a_question_paused_in_one_block_and_finished_in_the_next_is_no_longer_counted_paused(tmp_path, where):
    """ALIGN paused before its principal selects (``interrupt_before``) in the first block, resumed to
    its end in the second, which does not record it (it did not see it start). Before: the run's
    summary still counted it ``paused`` (the first block's count, carried on)."""
    db = tmp_path / "app.db"
    saver = InMemorySaver()
    graph = (paused_app(saver) if where == "subgraph"
             else build_delegation_graph().compile(checkpointer=saver, interrupt_before=["principal_select"]))
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
        assert rows(db, "select summary from runs") == [(json.dumps({"questions": 0, "failed": 0, "paused": 1}),)]
        with TraceRecorder(db, run_id="app") as recorder:
            out = graph.invoke(None, {**thread, "callbacks": [recorder]}, context=context)
        assert out["answer"] == "4" and len(server.requests) == 2
    assert rows(db, "select count(*) from questions") == [(0,)]  # (resumed through another recorder)
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 0, "failed": 0}))]


def test_a_subgraph_question_paused_again_in_the_next_block_is_counted_paused_once(tmp_path):
    """ALIGN as the app's node, paused before its proposals and before its selection: the first block
    pauses it, the second resumes it to its second pause. Before: counted ``paused`` twice (the first
    block's count and the second's)."""
    db = tmp_path / "app.db"
    builder = StateGraph(AppState, context_schema=DelegationContext)
    builder.add_node("align", build_delegation_graph().compile(interrupt_before=["agent_propose", "principal_select"]))
    builder.add_edge(START, "align")
    builder.add_edge("align", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(None, {**thread, "callbacks": [recorder]}, context=context)
            assert graph.get_state(thread, subgraphs=True).tasks[0].state.next == ("principal_select",)
        assert len(server.requests) == 2
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select status, summary from runs") == [
        ("finished", json.dumps({"questions": 0, "failed": 0, "paused": 1}))]


# ----------------------------------------------------------------------------- 6. two questions on one thread at once

def slow_handler(path, body):
    """Every request answered after 0.3 s, so two questions sent together are in flight together."""
    time.sleep(0.3)
    return default_handler(path, body)


def test_two_questions_sent_on_one_thread_at_once_are_two_questions_each_with_its_own_calls(tmp_path):
    """Two asyncio tasks send a question each on one checkpointer thread, the second while the
    first's requests are in flight: two questions, each with its own 4 samples, none lost or merged."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(slow_handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app():
            with TraceRecorder(db, run_id="app") as recorder:
                config = {**thread, "callbacks": [recorder]}
                first = asyncio.create_task(graph.ainvoke(QUESTION, config, context=context))
                await asyncio.sleep(0.1)
                second = await graph.ainvoke({"question": "What is 3 + 3?", "gold": "6"}, config, context=context)
                return await first, second

        outs = asyncio.run(app())
        assert len(server.requests) == 4
    assert [len(out["proposals"]) for out in outs] == [2, 2]
    assert rows(db, "select question_id, question, model_calls from questions order by question") == [
        ("q-f465154e", "What is 2 + 2?", 4), ("q-2622f7aa", "What is 3 + 3?", 4)]
    assert rows(db, "select question_id, count(distinct call_id) from model_calls group by 1 order by 1") == [
        ("q-2622f7aa", 4), ("q-f465154e", 4)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 2, "failed": 0}))]
