"""A thread of a checkpointer takes one question after another: each new question starts from clean
per-question state (appended lists, costs), while a paused question resumed on its thread keeps what
it gathered before the pause, and the trace recorder records each question of the thread."""

import asyncio
import json
import sqlite3
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agora.graphs import registry
from agora.graphs.moa import MoAContext, build_moa_graph
from agora.graphs.recording import TraceRecorder
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel

FIRST = {"question": "What is 2 + 2?", "gold": "4"}
SECOND = {"question": "What is 3 + 3?", "gold": "6"}
BENCHMARK = [s.name for s in registry.specs() if s.kind == "benchmark"]


def scripted_pool() -> ModelPool:
    return ModelPool.from_chat_models({n: ScriptedChatModel(responses=["The answer is 6."], cycle=True) for n in "abc"})


def without_call_ids(value: Any) -> Any:
    """``value`` without the per-call uuids and start times, at any depth."""
    if isinstance(value, dict):
        return {k: without_call_ids(v) for k, v in value.items() if k not in ("call_id", "messages_of", "created_at")}
    if isinstance(value, list):
        return [without_call_ids(v) for v in value]
    return value


def without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def timeless(value: Any) -> Any:
    """``value`` with latencies zeroed (the scripted model's wall clock differs between runs)."""
    if isinstance(value, dict):
        return {k: 0 if "latency" in k else timeless(v) for k, v in value.items()}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


@pytest.mark.parametrize("name", BENCHMARK)
def test_a_second_question_on_a_thread_is_answered_as_on_a_fresh_thread(name):
    """Before: the second question's appended lists and costs held the first question's too (MoA: 6
    proposals and 8 calls, not 3 and 4)."""
    spec = registry.get(name)
    context = spec.context(scripted_pool())
    graph = spec.build().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke(FIRST, thread, context=context)
    second = graph.invoke(SECOND, thread, context=context)
    fresh = graph.invoke(SECOND, {"configurable": {"thread_id": "fresh"}}, context=context)
    assert timeless(without_call_ids(second)) == timeless(without_call_ids(fresh))
    state, fresh_state = graph.get_state(thread).values, graph.get_state({"configurable": {"thread_id": "fresh"}}).values
    # an input field the first question had and this one leaves out is None (read as absent)
    assert timeless(without_call_ids(without_none(state))) == timeless(without_call_ids(without_none(fresh_state)))
    assert len(state["calls"]) == len(fresh_state["calls"]) > 0
    assert {c["question_id"] for c in state["calls"]} == {c["question_id"] for c in fresh_state["calls"]}


def test_moa_second_question_counts_hand_checked():
    """Three proposers and one aggregator: 3 proposals, 4 calls, for each question on the thread."""
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    graph = build_moa_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke(FIRST, thread, context=ctx)
    out = graph.invoke(SECOND, thread, context=ctx)
    assert len(out["proposals"]) == 3 and len(graph.get_state(thread).values["calls"]) == 4
    assert out["methods"]["moa"]["calls"] == 4 and out["methods"]["proposal_vote"]["calls"] == 3
    assert {k: c["calls"] for k, c in out["costs"].items()} == {"propose": 3, "aggregate": 1}
    assert graph.get_state(thread).values["proposals"] == out["proposals"]


@pytest.mark.parametrize("how", ["input_none", "second_pause"])
def test_a_paused_question_resumed_on_its_thread_keeps_its_earlier_calls(how):
    """Paused before the aggregator, then resumed: the proposals and calls gathered before the pause
    stay (3 proposals, 4 calls), also for a second question paused after a finished one."""
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    graph = build_moa_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["moa_aggregate"])
    thread = {"configurable": {"thread_id": "t"}}
    if how == "second_pause":
        graph.invoke(FIRST, thread, context=ctx)
        graph.invoke(None, thread, context=ctx)
    graph.invoke(SECOND, thread, context=ctx)
    paused = graph.get_state(thread).values
    assert len(paused["proposals"]) == 3 and len(paused["calls"]) == 3
    assert graph.get_state(thread).next == ("moa_aggregate",)
    out = graph.invoke(None, thread, context=ctx)
    assert len(out["proposals"]) == 3 and len(graph.get_state(thread).values["calls"]) == 4
    assert out["methods"]["moa"]["calls"] == 4 and out["methods"]["moa"]["correct"] is False
    assert sum(1 for c in chats.values() for _ in c.calls) == (8 if how == "second_pause" else 4)


def test_async_second_question_on_a_thread_starts_clean():
    asyncio.run(_async_second_question())


async def _async_second_question():
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    graph = build_moa_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke(FIRST, thread, context=ctx)
    out = await graph.ainvoke(SECOND, thread, context=ctx)
    assert len((await graph.aget_state(thread)).values["calls"]) == 4
    assert len(out["proposals"]) == 3 and out["methods"]["moa"]["correct"] is False


def test_the_recorder_records_both_questions_of_a_thread(tmp_path):
    """Two questions one after the other on one thread, recorded: each question's row has its own
    4 calls and its own methods' costs."""
    db = tmp_path / "app.db"
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    graph = build_moa_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    with TraceRecorder(db, run_id="app") as recorder:
        graph.invoke(FIRST, {**config, "callbacks": [recorder]}, context=ctx)
        graph.invoke(SECOND, {**config, "callbacks": [recorder]}, context=ctx)
    with sqlite3.connect(db) as conn:
        calls = conn.execute("select question_id, count(*) from model_calls group by 1 order by 1").fetchall()
        questions = conn.execute("select question_id from questions order by 1").fetchall()
        recorded = conn.execute("select question_id, model_calls from questions order by 1").fetchall()
        results = conn.execute("select question_id, method, calls, correct from results order by 1, 2").fetchall()
    assert len(questions) == 2
    assert [n for _, n in calls] == [4, 4]
    assert {q for q, _ in calls} == {q for (q,) in questions}
    assert recorded == [("q-2622f7aa", 4), ("q-f465154e", 4)]
    assert results == [("q-2622f7aa", "moa", 4, 0), ("q-2622f7aa", "proposal_vote", 3, 0),
                       ("q-f465154e", "moa", 4, 1), ("q-f465154e", "proposal_vote", 3, 1)]


def test_an_input_field_the_second_question_leaves_out_is_not_the_first_ones():
    """A multiple-choice question, then a math one without ``kind`` on the same thread: before, the
    second kept ``kind`` mc and ``n_choices`` 4, so its answer 6 was read among A-D (none found)."""
    chats = {n: ScriptedChatModel(responses=["The answer is 6."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    graph = build_moa_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": "Pick one.\nA. 1\nB. 2\nC. 3\nD. 4", "kind": "mc", "n_choices": 4,
                  "question_id": "mc-1", "gold": "A"}, thread, context=ctx)
    out = graph.invoke(SECOND, thread, context=ctx)
    assert out["answer"] == "6" and out["methods"]["moa"]["correct"] is True
    assert {c["question_id"] for c in graph.get_state(thread).values["calls"]} == {"q-2622f7aa"}


def _moa(**compile_kwargs: Any) -> tuple[Any, MoAContext]:
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    return build_moa_graph().compile(checkpointer=InMemorySaver(), **compile_kwargs), \
        MoAContext(ModelPool.from_chat_models(chats))


def test_a_second_question_through_langgraphs_own_stream_starts_clean():
    """The graph's own Pregel ``stream``/``astream`` (what a server that drives the run itself reaches,
    read from other asyncio tasks): before, only Agora's wrapper computed the reset, so this second
    question got 6 proposals and 8 calls."""
    graph, ctx = _moa()
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke(FIRST, thread, context=ctx)
    chunks = list(CompiledStateGraph.stream(graph, SECOND, thread, context=ctx, stream_mode="values"))
    assert len(chunks[-1]["proposals"]) == 3 and len(graph.get_state(thread).values["calls"]) == 4
    assert chunks[-1]["methods"]["moa"]["calls"] == 4


def test_a_second_question_paused_does_not_show_the_first_ones_methods():
    """Paused before its aggregator, a second question's state has no ``methods`` (before: the first
    question's, so the pause read as a finished question); a new input then goes on over the pause as
    on a paused first question (its proposals kept: 6), resumed it ends with its own 3 + 3."""
    graph, ctx = _moa(interrupt_before=["moa_aggregate"])
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke(FIRST, thread, context=ctx)
    graph.invoke(None, thread, context=ctx)
    assert graph.get_state(thread).values["methods"]["moa"]["calls"] == 4
    graph.invoke(SECOND, thread, context=ctx)
    paused = graph.get_state(thread)
    assert paused.next == ("moa_aggregate",) and paused.values.get("methods") is None
    assert registry.get("moa").finished(paused.values) is False       # the runner's test: not finished
    assert len(paused.values["proposals"]) == 3
    graph.invoke(SECOND, thread, context=ctx)
    assert len(graph.get_state(thread).values["proposals"]) == 6
    out = graph.invoke(None, thread, context=ctx)
    assert out["methods"]["moa"]["calls"] == 7 and len(out["proposals"]) == 6


@pytest.mark.parametrize("resumed", [False, True])
def test_a_recorded_second_question_paused_counts_as_paused_until_resumed(tmp_path, resumed):
    """Before: the paused second question's output held the first one's ``methods``, so the recorder
    wrote it as finished with them (moa 4 calls) and its 3 calls so far; it is counted paused, and
    recorded once resumed, with its own 4 calls."""
    db = tmp_path / "app.db"
    graph, ctx = _moa(interrupt_before=["moa_aggregate"])
    with TraceRecorder(db, run_id="app") as recorder:
        run = {"configurable": {"thread_id": "t"}, "callbacks": [recorder]}
        for inp in (FIRST, None, SECOND, *([None] if resumed else [])):
            graph.invoke(inp, run, context=ctx)
    with sqlite3.connect(db) as conn:
        questions = conn.execute("select question_id, model_calls from questions order by 1").fetchall()
        second = conn.execute("select method, calls, correct from results where question_id = 'q-2622f7aa' "
                              "order by 1").fetchall()
        summary = json.loads(conn.execute("select summary from runs").fetchone()[0])
    if resumed:
        assert questions == [("q-2622f7aa", 4), ("q-f465154e", 4)] and summary.get("paused", 0) == 0
        assert second == [("moa", 4, 0), ("proposal_vote", 3, 0)]
    else:
        assert questions == [("q-f465154e", 4)] and second == [] and summary["paused"] == 1


def test_a_protocol_graph_keeping_its_state_as_a_node_starts_each_question_clean():
    """A protocol graph compiled with ``checkpointer=True`` (its state kept on the parent's thread) and
    invoked by a node of an app's graph: before, the app's second question got 6 proposals."""
    chats = {n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"}
    ctx = MoAContext(ModelPool.from_chat_models(chats))
    moa = build_moa_graph().compile(checkpointer=True)

    class App(TypedDict, total=False):
        question: str
        proposals: int

    def ask(state: App, config: RunnableConfig) -> App:
        return {"proposals": len(moa.invoke({"question": state["question"]}, config)["proposals"])}

    builder = StateGraph(App, context_schema=MoAContext)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    app = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    assert [app.invoke({"question": q["question"]}, thread, context=ctx)["proposals"]
            for q in (FIRST, SECOND)] == [3, 3]
    assert sum(1 for c in chats.values() for _ in c.calls) == 8


@pytest.mark.slow
def test_two_questions_on_one_studio_thread_through_agora_studio(tmp_path):
    """The same through ``agora studio`` (langgraph-api supplies the checkpointer): the second question
    sent on a thread whose first finished gets 3 proposals and 4 calls of its own, as a fresh thread
    would, and is scored on its own gold."""
    from openai_stub import StubServer
    from test_studio import ROOT, post, start_studio, stop, wait_until_up

    with StubServer() as stub:
        pool = tmp_path / "stub.toml"
        pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{stub.base_url}"\n'
                                f'model = "stub"\n\n' for m in "abc"))
        proc, base, log, sink = start_studio(tmp_path, ROOT)
        try:
            wait_until_up(proc, base, log)
            context = {"pool": str(pool), "config": {"shots": 0}}
            thread = post(f"{base}/threads", {})["thread_id"]

            def ask(inp):
                return post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "moa", "input": inp,
                                                                  "context": context}, timeout_s=300)

            first = ask({"question": "What is 2 + 2?", "gold": "4"})
            second = ask({"question": "What is 3 + 3?", "gold": "7"})
            assert len(first["proposals"]) == 3 and len(second["proposals"]) == 3, second
            assert second["methods"]["moa"]["calls"] == 4, second["methods"]["moa"]
            assert second["methods"]["moa"]["correct"] is False          # its own gold, not the first's
        finally:
            stop(proc, sink)
