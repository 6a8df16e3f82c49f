"""The trace recorder in a user's app (round 17): an ``astream_events`` iteration broken off inside
the block, a pause after an explicit ``finish()``, what ``stream_mode="messages"`` yields, and more
ways an app drives the recorder. Models are the user's own ``ChatOpenAI`` clients on the loopback
OpenAI stub (tests/openai_stub.py); each case counts the rows written against what the models were
asked, and the run's summary against the totals ``agora report run`` prints."""

import asyncio
import json
from decimal import Decimal

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.tasks.errors import InputError
from agora.traces.report import run_totals
from agora.traces.store import TraceStore
from db_rows import rows
from openai_stub import StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool
from test_probe_round16_recorder_app import ABANDONED


def test_an_astream_events_iteration_broken_off_says_the_stream_closed(tmp_path):
    """``async for event in graph.astream_events(...)``, broken off after ALIGN's samples and closed
    inside the block. Before: the failed question's error read ``the invocation was abandoned (its
    asyncio task was cancelled)``, though the app cancelled no task: ``astream_events`` runs the graph
    in a task of its own and cancels it when its stream is closed. Now it says what the plain
    ``astream`` broken off says."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> None:
            with TraceRecorder(db, run_id="app") as recorder:
                stream = graph.astream_events(QUESTION, {"callbacks": [recorder]}, context=context, version="v2")
                async for event in stream:
                    if event["event"] == "on_chain_end" and event["name"] == "agent_propose":
                        break
                await stream.aclose()

        asyncio.run(app())
        assert len(server.requests) == 2
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select question_id, count(*), count(distinct call_id) from model_calls group by 1") == [
        ("q-f465154e", 4, 4)]
    assert rows(db, "select run_id, status, summary from runs") == [("app-align", "failed", ABANDONED)]


def test_a_question_paused_after_finish_is_counted_in_its_runs_summary(tmp_path):
    """``recorder.finish()`` inside the block releases the run; a later question that pauses (a
    breakpoint) took nothing, so the block's end marked nothing: the run's summary stayed
    ``{"questions": 1, "failed": 0}``, not counting the paused question whose models were asked.
    Now the pause takes the run again at the block's end, which counts it."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["principal_select"])
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder], "configurable": {"thread_id": "t1"}}, context=context)
            graph.invoke(None, {"callbacks": [recorder], "configurable": {"thread_id": "t1"}}, context=context)
            recorder.finish()
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"},
                         {"callbacks": [recorder], "configurable": {"thread_id": "t2"}}, context=context)  # paused
        assert len(server.requests) == 4
    assert rows(db, "select status, summary from runs") == [
        ("finished", json.dumps({"questions": 1, "failed": 0, "paused": 1}))]
    store = TraceStore(db)  # the totals `agora report run` prints
    try:
        totals = run_totals(store, "app-align")
    finally:
        store.close()
    assert (totals["questions"], totals["failed_questions"], totals["calls"]) == (1, 0, 4)


def test_stream_mode_messages_yields_no_pool_call_and_updates_carry_each_sample(tmp_path):
    """What ``docs/embedding.md`` says of ``stream_mode="messages"``: the pool calls a member's chat
    model outside LangChain's callbacks (``n`` samples a request, retried, seeded, traced), so an
    async stream of ALIGN yields no message chunk (nor ``astream_events`` any ``on_chat_model_*``
    event); each sample's text comes in its sampling node's update (``calls[i]["completion"]``), and
    each agent's proposal as a custom event. The recorder records the question whole beside it."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        async def app() -> tuple[list, list]:
            with TraceRecorder(db, run_id="app") as recorder:
                items = [item async for item in graph.astream(QUESTION, {"callbacks": [recorder]}, context=context,
                                                               stream_mode=["messages", "custom", "updates"])]
                events = [e["event"] async for e in graph.astream_events(
                    {**QUESTION, "question": "What is 2 + 2 ?"}, {"callbacks": [recorder]}, context=context,
                    version="v2")]
            return items, events

        items, events = asyncio.run(app())
        assert len(server.requests) == 4
    assert [mode for mode, _ in items if mode == "messages"] == []
    assert not [e for e in events if e.startswith(("on_chat_model", "on_llm"))]
    assert [chunk["event"] for mode, chunk in items if mode == "custom" and chunk["event"] == "proposal"] == [
        "proposal"] * 2
    completions = [call["completion"] for mode, chunk in items if mode == "updates"
                   for update in chunk.values() if isinstance(update, dict) for call in update.get("calls") or []]
    assert completions == ["The answer is 4."] * 4
    assert rows(db, "select count(*), sum(model_calls) from questions") == [(2, 8)]


def test_a_gold_given_as_a_decimal_is_its_number_and_a_nan_one_is_refused_before_any_model_is_asked(tmp_path):
    """An app reading its gold answers from a database column of type ``numeric`` gets ``Decimal`` values.
    Before: ``Decimal("4")`` was refused as "must be text or a number, not Decimal", though it is a
    number. Now it is its text (``"4"``, ``Decimal("1E+2")`` as ``"100"``), as an ``int`` or ``float``
    is, and a ``Decimal("NaN")`` is refused as a float NaN is, in one line, before any model is asked."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({"question": "What is 2 + 2?", "gold": Decimal("4")}, {"callbacks": [recorder]},
                         context=context)
            graph.invoke({"question": "What is 10 * 10?", "gold": Decimal("1E+2")}, {"callbacks": [recorder]},
                         context=context)
            with pytest.raises(InputError) as refused:
                graph.invoke({"question": "What is 0 / 0?", "gold": Decimal("NaN")}, {"callbacks": [recorder]},
                             context=context)
        assert len(server.requests) == 4
    assert str(refused.value) == "graph input field 'gold' must be a finite number or text, not Decimal('NaN')"
    assert rows(db, "select question_id, gold, correct from questions order by idx") == [
        ("q-f465154e", "4", 1), ("q-1276ba65", "100", 0)]
