"""The trace recorder in a user's app (round 16, as an app developer drives LangGraph): an async
stream the app consumes in part and closes inside the recorder's block, a config deep-copied (or a
recorder pickled), and ``finish()`` called before the block ends. Models are the user's own
``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py); each case counts the rows
written against what the models were asked."""

import asyncio
import copy
import json
import pickle

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.traces.errors import RunLockedError
from agora.traces.store import TraceStore
from db_rows import rows
from openai_stub import StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool

ABANDONED = json.dumps({"questions": 0, "failed": 1, "failed_questions": {
    "q-f465154e": "the invocation was abandoned (its stream closed before the end)"}})


@pytest.mark.parametrize("mode", ["updates", "debug", ["updates", "custom", "messages"]])
def test_an_async_stream_closed_inside_the_block_is_a_failed_question_with_its_calls(tmp_path, mode, caplog):
    """Before: ``async for ... break`` after ALIGN's samples, then ``await stream.aclose()`` inside the
    ``with`` block: both members were asked (2 requests, 4 samples), and nothing was written, not even a
    run row, with a logged warning that "the run's summary counts it as unfinished" (there was no run):
    LangGraph reports an ``aclose()``d stream's end a few event-loop turns after ``aclose()`` returns,
    so the block had ended first. The sync ``stream`` closed the same way records the failed question."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                stream = graph.astream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode=mode)
                async for chunk in stream:
                    if "agent_propose" in str(chunk):  # (after the samples)
                        break
                await stream.aclose()

        asyncio.run(app())
        assert len(server.requests) == 2
    assert "unfinished" not in caplog.text
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select question_id, count(*), count(distinct call_id) from model_calls group by 1") == [
        ("q-f465154e", 4, 4)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "failed", ABANDONED)]


def test_a_deep_copied_config_shares_its_recorder_and_a_pickled_one_is_refused_in_one_line(tmp_path):
    """Before: ``copy.deepcopy(config)`` of a config holding the recorder raised ``TypeError: cannot
    pickle '_thread.RLock' object`` (naming neither the recorder nor what to do), and ``copy.copy``
    made a second recorder sharing the first's state but not its end: used after the block, it wrote
    a question into the finished run, uncounted by its summary."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            config = copy.deepcopy({"callbacks": [recorder], "configurable": {"user": "u1"}})
            assert config["callbacks"][0] is recorder and copy.copy(recorder) is recorder
            graph.invoke(QUESTION, config, context=context)
            with pytest.raises(TypeError) as refused:
                pickle.dumps(recorder)
        with pytest.raises(RuntimeError, match="used after its with block ended"):
            graph.invoke(QUESTION, {"callbacks": [copy.copy(recorder)]}, context=context)
        assert len(server.requests) == 2
    assert str(refused.value) == (
        f"TraceRecorder 'app' cannot be pickled (sent to another process): it records the invocations of the "
        f"process that made it, into {db}; make a TraceRecorder in each process, each with its own run_id")
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 1, "failed": 0}))]


def test_a_question_recorded_after_finish_takes_the_run_again_until_the_block_ends(tmp_path):
    """Before: after ``recorder.finish()`` inside the block (its live-run locks released), the next
    question was written into the run marked ``finished`` without the lock, so a second recorder of
    the same run id recorded beside it (two writers of one run: the same question ids), and the
    block's end marked the run again over the other recorder's. Now the question takes the run again
    (``running``, locked) until the block ends; a ``finish()`` with nothing recorded since the last one
    leaves the runs as that one marked them."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
            recorder.finish("interrupted")
            recorder.finish()  # nothing recorded since: the runs stay as the first marked them
            assert rows(db, "select status, summary from runs") == [
                ("interrupted", json.dumps({"questions": 1, "failed": 0}))]
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
            assert rows(db, "select status from runs") == [("running",)]
            with TraceRecorder(db, run_id="app") as other:
                with pytest.raises(RunLockedError, match="is being recorded by another TraceRecorder"):
                    graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [other]},
                                 context=context)
        assert len(server.requests) == 6  # (the refused one asked its models; nothing of it is written)
    assert rows(db, "select question_id, model_calls from questions order by idx") == [
        ("q-f465154e", 4), ("q-f465154e-2", 4)]
    assert rows(db, "select count(*) from model_calls") == [(8,)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 2, "failed": 0}))]
    store = TraceStore(db)
    try:
        assert store.get_run("app-align")["status"] == "finished"
    finally:
        store.close()


class AppState(TypedDict, total=False):
    question: str
    gold: str
    answer: str


def test_a_stream_of_the_apps_graph_closed_early_says_so_for_its_protocol_subgraph(tmp_path):
    """The app's graph with ALIGN as a subgraph node, streamed with ``subgraphs=True`` and closed after
    ALIGN's samples: LangGraph cancels the subgraph's task as the stream closes. Before: the failed
    question's error read ``the invocation was abandoned (its asyncio task was cancelled)``, though
    the app cancelled no task: it closed its stream."""
    db = tmp_path / "app.db"
    builder = StateGraph(AppState, context_schema=DelegationContext)
    builder.add_node("align", build_delegation_graph().compile())
    builder.add_edge(START, "align")
    builder.add_edge("align", END)
    app_graph = builder.compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                stream = app_graph.astream(QUESTION, {"callbacks": [recorder]}, context=context,
                                           stream_mode="updates", subgraphs=True)
                async for _namespace, chunk in stream:
                    if "agent_propose" in str(chunk):
                        break
                await stream.aclose()

        asyncio.run(app())
        assert len(server.requests) == 2
    assert rows(db, "select question_id, count(*), count(distinct call_id) from model_calls group by 1") == [
        ("q-f465154e", 4, 4)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "failed", ABANDONED)]


def test_a_postgres_url_with_a_password_is_shown_without_it_in_the_recorders_refusals(postgres_server):
    """Before: the recorder's one-line refusals named the trace database by the URL it was given, so a
    ``postgresql://user:PASSWORD@...`` store printed its password (a repeated ``question_id``, a pickled
    recorder), where the store's own messages show ``user:***@``."""
    url = postgres_server.database().replace("postgresql://postgres@", "postgresql://postgres:s3cret@", 1)
    shown = url.replace(":s3cret@", ":***@", 1)
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(url, run_id="app") as recorder:
            graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]}, context=context)
            with pytest.raises(ValueError) as repeated:
                graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]}, context=context)
            with pytest.raises(TypeError) as pickled:
                pickle.dumps(recorder)
        assert len(server.requests) == 2
    assert str(repeated.value) == (
        f"{shown}: question id 'q1' is already recorded in run 'app-align': give each invocation its own "
        "question_id, or none (one is made per invocation); nothing of this invocation was written")
    assert "s3cret" not in str(pickled.value) and f"into {shown};" in str(pickled.value)
    store = TraceStore(url)
    try:
        assert store.question_ids("app-align") == {"q1"}
    finally:
        store.close()


def test_a_stream_left_open_and_read_after_the_block_says_no_run_counts_it_when_none_was_written(tmp_path):
    """A sync stream read for its first update inside the block and to its end after it: its question
    is not recorded (the runs were ended). Before: the one-line ``RuntimeError`` said "the run's summary
    counts it as unfinished", though the recorder had written no run, so nothing counted it."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            stream = graph.stream(QUESTION, {"callbacks": [recorder]}, context=context, stream_mode="updates")
            next(stream)  # ("delegate": no model asked yet)
        with pytest.raises(RuntimeError) as late:
            list(stream)
        assert len(server.requests) == 2
    assert str(late.value) == (
        "TraceRecorder 'app': its with block ended while this invocation ran, so its questions were not recorded "
        "(the recorder had written no run whose summary could count it as unfinished); end the block after the "
        "invocations that use the recorder")
    assert rows(db, "select count(*) from runs") == [(0,)]
