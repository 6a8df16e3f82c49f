"""The trace recorder as a user's app drives it (round 11 probes): the user's ``ChatOpenAI`` clients on
the loopback OpenAI stub (tests/openai_stub.py), each case counting the rows written against what the
server was really asked."""

import json
import threading

import pytest
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from agora.graphs import registry
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import QuestionRecordedError, TraceRecorder
from agora.models.pool import ModelPool
from openai_stub import StubServer, default_handler
from db_rows import rows

CONFIG = {"n_agents": 2, "k_samples": 2}  # 2 requests of n=2: 4 samples a question
QUESTION = {"question": "What is 2 + 2?", "gold": "4"}


def user_pool(url: str) -> ModelPool:
    return ModelPool.from_chat_models(
        {name: ChatOpenAI(base_url=url, api_key="k", model=name, max_retries=0, timeout=10) for name in "ab"},
        max_retries=0)


def test_an_invocation_still_running_when_the_block_ends_is_counted_and_not_written_after_the_run_ended(tmp_path):
    """A thread's invocation that outlives the recorder's ``with`` block: before, its question was written
    after the run was marked finished (summary ``questions: 1`` over 2 recorded questions) and without
    the run's live-run lock, which the block's end had released."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    release, arrived = threading.Event(), threading.Semaphore(0)

    def held_back(path, body):  # the late invocation's requests wait until the block has ended
        if body["messages"][-1]["content"].find("3 + 3") >= 0:
            arrived.release()
            release.wait(10)
        return default_handler(path, body)

    outcome = {}
    with StubServer(held_back) as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=DelegationContext(pool, CONFIG))

            def late():
                try:
                    graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]},
                                 context=DelegationContext(pool, CONFIG))
                except RuntimeError as exc:
                    outcome["error"] = str(exc)

            thread = threading.Thread(target=late)
            thread.start()
            assert arrived.acquire(timeout=10) and arrived.acquire(timeout=10)  # both agents' requests sent
        release.set()
        thread.join(10)
        assert len(server.requests) == 4
    assert "with block ended while this invocation ran" in outcome["error"] and "\n" not in outcome["error"]
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    [(status, summary)] = rows(db, "select status, summary from runs")
    assert status == "finished"
    assert json.loads(summary) == {"questions": 1, "failed": 0, "unfinished": 1}
    assert recorder.recorded == {"align": 1}


def _first_nodes(builder) -> list[str]:
    return sorted({edge.target for edge in builder.compile().get_graph().edges if edge.source == "__start__"})


@pytest.mark.parametrize("protocol", ["align", "moa", "council", "slm-mux"])
def test_a_question_paused_before_its_first_node_and_resumed_is_recorded_once_whole(tmp_path, protocol):
    """A breakpoint on a protocol graph's first node (``interrupt_before=[first]``, as Studio sets one):
    before, the first sitting ran no node, so the recorder could not tell the protocol, held nothing,
    and on resume logged "did not see it start" and recorded nothing of a question it had seen."""
    db = tmp_path / "app.db"
    builder = registry.get(protocol).build()
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=_first_nodes(builder))
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            thread = {"callbacks": [recorder], "configurable": {"thread_id": "t1"}}
            graph.invoke(QUESTION, thread, context={"pool": pool, "config": {}})
            assert graph.get_state(thread).next and not server.requests  # paused before any model call
            while graph.get_state(thread).next:
                graph.invoke(None, thread, context={"pool": pool, "config": {}})
            # a question paused there and never resumed is counted, not recorded
            other = {"callbacks": [recorder], "configurable": {"thread_id": "t2"}}
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, other, context={"pool": pool, "config": {}})
        samples = sum(r["body"].get("n", 1) for r in server.requests)
    assert samples > 0 and recorder.recorded == {protocol: 1}
    assert rows(db, "select question_id, model_calls, correct, gold from questions") == [
        ("q-f465154e", samples, 1, "4")]
    assert rows(db, "select count(*), count(error) from model_calls") == [(samples, 0)]
    assert json.loads(rows(db, "select summary from runs")[0][0]) == {"questions": 1, "failed": 0, "paused": 1}


def test_a_repeated_question_id_paused_before_the_first_node_is_refused_before_any_model_call(tmp_path):
    db = tmp_path / "app.db"
    builder = build_delegation_graph()
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=_first_nodes(builder))
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            build_delegation_graph().compile().invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]},
                                                      context=DelegationContext(pool, CONFIG))
            asked = len(server.requests)
            with pytest.raises(QuestionRecordedError, match="'q1' is already recorded"):
                graph.invoke({**QUESTION, "question_id": "q1"},
                             {"callbacks": [recorder], "configurable": {"thread_id": "t"}},
                             context=DelegationContext(pool, CONFIG))
        assert len(server.requests) == asked
    assert rows(db, "select question_id from questions") == [("q1",)]


def test_a_paused_question_dropped_by_a_fresh_input_on_its_thread_is_counted_as_paused(tmp_path):
    """A fresh input on a paused question's thread starts another question and drops the paused one
    (its calls are not recorded): before, the run's summary did not count it at all, though the
    server answered its calls; a question still paused at the end was counted (``paused``)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["principal_select"])
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            thread = {"callbacks": [recorder], "configurable": {"thread_id": "t1"}}
            graph.invoke(QUESTION, thread, context=DelegationContext(pool, CONFIG))  # paused: 4 samples
            graph.invoke(QUESTION, thread, context=DelegationContext(pool, CONFIG))  # a fresh start: 4 more
            graph.invoke(None, thread, context=DelegationContext(pool, CONFIG))      # finished
        assert sum(r["body"]["n"] for r in server.requests) == 8
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert json.loads(rows(db, "select summary from runs")[0][0]) == {"questions": 1, "failed": 0, "paused": 1}


def test_invocations_refused_for_a_repeated_question_id_are_not_counted_as_unfinished(tmp_path):
    """A refused invocation's first node stayed in the recorder's memory as if it were still running."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            for _ in range(3):
                try:
                    graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]},
                                 context=DelegationContext(pool, CONFIG))
                except QuestionRecordedError:
                    pass
        assert len(server.requests) == 2
    assert recorder._runs == {}
    assert json.loads(rows(db, "select summary from runs")[0][0]) == {"questions": 1, "failed": 0}


def test_questions_that_all_stayed_paused_leave_a_run_row_that_counts_them(tmp_path):
    """Before, a recorder whose questions all paused wrote no run row, so the summary's ``paused``
    count that the guarantees promise was nowhere (the database held nothing of 4 answered calls)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["principal_select"])
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder], "configurable": {"thread_id": "t1"}},
                         context=DelegationContext(pool, CONFIG))
        assert len(server.requests) == 2
    assert rows(db, "select run_id, protocol, status, summary from runs") == [
        ("app-align", "align", "finished", json.dumps({"questions": 0, "failed": 0, "paused": 1}))]
    assert rows(db, "select count(*) from questions") == [(0,)]
    with TraceRecorder(db, run_id="app"):  # the run id's lock was released
        pass


def test_questions_of_one_invocation_are_numbered_in_the_order_they_were_asked(tmp_path):
    """An app node asking ALIGN three questions in turn: before, they were recorded last first, so the
    last question got idx 0 and the bare id ``q-<crc>``, and the one asked before it ``q-<crc>-2``."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class AppState(TypedDict, total=False):
        question: str
        answers: list

    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)

        def ask_three(state: AppState) -> dict:
            texts = [state["question"], "What is 3 + 3?", "What is 3 + 3?"]
            return {"answers": [graph.invoke({"question": t}, context=DelegationContext(pool, CONFIG))["answer"]
                                for t in texts]}

        builder = StateGraph(AppState)
        builder.add_node("ask_three", ask_three)
        builder.add_edge(START, "ask_three")
        builder.add_edge("ask_three", END)
        with TraceRecorder(db, run_id="app") as recorder:
            builder.compile().invoke({"question": QUESTION["question"]}, {"callbacks": [recorder]})
    assert rows(db, "select idx, question_id, question from questions order by idx") == [
        (0, "q-f465154e", "What is 2 + 2?"), (1, "q-2622f7aa", "What is 3 + 3?"), (2, "q-2622f7aa-2", "What is 3 + 3?")]
    assert recorder.recorded == {"align": 3}


def test_a_read_only_trace_store_is_refused_by_the_recorder_in_one_line(tmp_path):
    """Before: the first question failed inside the invocation with sqlite3's ``no such table:
    model_calls`` (or ``attempt to write a readonly database``)."""
    from agora.traces.store import TraceStore

    db = tmp_path / "app.db"
    TraceStore(db)  # an existing trace database, with its tables
    with pytest.raises(ValueError, match=r"^TraceRecorder 'app': the trace store .*app\.db is open read-only; give "):
        TraceRecorder(TraceStore(db, readonly=True), run_id="app")
