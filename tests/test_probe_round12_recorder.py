"""The trace recorder as a user's app drives it (round 12 probes): the user's own ``ChatOpenAI`` clients
on the loopback OpenAI stub (tests/openai_stub.py), and the user's wrappers around the protocol graph
(``with_retry``, ``with_fallbacks``), a second recorder, a closed store and Ctrl-C. Each case counts
the rows written against what the models were asked."""

import contextlib
import json
import re
import threading
import time

import pytest
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import RecorderConflictError, TraceRecorder
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore, TraceStoreError
from openai_stub import DROP, StubServer, default_handler
from db_rows import rows

CONFIG = {"n_agents": 2, "k_samples": 2}  # 2 requests of n=2: 4 samples a question
QUESTION = {"question": "What is 2 + 2?", "gold": "4"}


def chat(url: str, name: str) -> ChatOpenAI:
    return ChatOpenAI(base_url=url, api_key="k", model=name, max_retries=0, timeout=10)


def user_pool(url: str) -> ModelPool:
    return ModelPool.from_chat_models({name: chat(url, name) for name in "ab"}, max_retries=0)


def first_request_of_a_dropped():
    """A server whose connection to model ``a``'s first request dies (an unreachable member: the
    invocation raises ``ModelCallError``); every other request is answered."""
    seen = {"a": 0}
    lock = threading.Lock()

    def handler(path, body):
        with lock:
            if body.get("model") == "a":
                seen["a"] += 1
                if seen["a"] == 1:
                    return 200, DROP
        return default_handler(path, body)

    return handler


class AppState(TypedDict, total=False):
    question: str
    answer: str


def _retried(kind, graph, context):
    """The user's way of asking the question again when it raised."""
    if kind == "with_retry":
        return graph.with_retry(stop_after_attempt=3, wait_exponential_jitter=False)
    if kind == "with_fallbacks":
        return graph.with_fallbacks([graph])

    def solve(state: AppState) -> dict:  # the app's own graph, a node asking ALIGN, retried as a whole
        return {"answer": graph.invoke({"question": state["question"], "gold": "4"}, context=context)["answer"]}

    builder = StateGraph(AppState)
    builder.add_node("solve", solve)
    builder.add_edge(START, "solve")
    builder.add_edge("solve", END)
    return builder.compile().with_retry(stop_after_attempt=3, wait_exponential_jitter=False)


@pytest.mark.parametrize("kind", ["with_retry", "with_fallbacks", "app_with_retry"])
def test_a_question_retried_by_the_apps_wrapper_is_one_answered_question(tmp_path, kind):
    """Before: the try that raised was recorded as a failed question ``q-<crc>`` and the retry that
    answered as another question ``q-<crc>-2``, so the run ended ``failed`` (1 failed of 2) while the
    app had its answer, and the question was counted twice."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer(first_request_of_a_dropped()) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            out = _retried(kind, graph, context).invoke(
                QUESTION if kind != "app_with_retry" else {"question": QUESTION["question"]},
                {"callbacks": [recorder]}, context=context)
        assert out["answer"] == "4"
    assert rows(db, "select question_id, model_calls, answer, correct from questions") == [("q-f465154e", 4, "4", 1)]
    # the failed attempt of the first try, and the 4 samples of the try that answered, under that one id
    assert rows(db, "select question_id, model, error from model_calls where error is not null") == [
        ("q-f465154e", "a", "OpenAIConnectionError: Connection error.")]
    assert rows(db, "select count(*) from model_calls where error is null") == [(4,)]
    assert rows(db, "select status, summary from runs") == [
        ("finished", json.dumps({"questions": 1, "failed": 0}))]
    assert recorder.recorded == {"align": 1} and recorder.failed == {}


def test_two_questions_of_one_text_side_by_side_stay_two_questions(tmp_path):
    """What a retry is not: an app node asking the same question twice (neither raised) records two."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        def twice(state: AppState) -> dict:
            return {"answer": [graph.invoke(QUESTION, context=context)["answer"] for _ in range(2)][-1]}

        builder = StateGraph(AppState)
        builder.add_node("twice", twice)
        builder.add_edge(START, "twice")
        builder.add_edge("twice", END)
        with TraceRecorder(db, run_id="app") as recorder:
            builder.compile().invoke({"question": QUESTION["question"]}, {"callbacks": [recorder]})
    assert rows(db, "select question_id, model_calls from questions order by idx") == [
        ("q-f465154e", 4), ("q-f465154e-2", 4)]


@pytest.mark.parametrize("where", ["same_invocation", "inner_invocation"])
def test_two_recorders_of_one_database_on_one_invocation_are_refused_before_it_runs(tmp_path, where):
    """Before: both recorded the question, and the second one's ``model_calls`` rows (keyed by call id)
    replaced the first's, so one run held a question counting 4 model calls and had none of them.
    Now the invocation is refused as it starts, in one line, before any model is asked."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="outer") as outer, TraceRecorder(db, run_id="inner") as inner:
            if where == "same_invocation":
                with pytest.raises(RecorderConflictError, match=r"^TraceRecorder 'inner': this invocation is "
                                   r"recorded into .*app\.db by TraceRecorder 'outer' too; .*so it was not run: pass one "
                                   "TraceRecorder per database to an invocation$"):
                    graph.invoke(QUESTION, {"callbacks": [outer, inner]}, context=context)
            else:
                def solve(state: AppState) -> dict:
                    out = graph.invoke(QUESTION, {"callbacks": [inner]}, context=context)
                    return {"answer": out["answer"]}

                builder = StateGraph(AppState)
                builder.add_node("solve", solve)
                builder.add_edge(START, "solve")
                builder.add_edge("solve", END)
                with pytest.raises(RecorderConflictError, match="by TraceRecorder '(outer|inner)' too; "):
                    builder.compile().invoke({"question": QUESTION["question"]}, {"callbacks": [outer]})
            assert not server.requests and outer.recorded == inner.recorded == {}
            graph.invoke(QUESTION, {"callbacks": [outer]}, context=context)  # each alone records as usual
            graph.invoke(QUESTION, {"callbacks": [inner]}, context=context)
        assert len(server.requests) == 4
    # every question's count is its rows, in its own run
    assert rows(db, "select q.run_id, q.question_id, q.model_calls, count(c.call_id) from questions q left join "
                    "model_calls c on c.run_id = q.run_id and c.question_id = q.question_id group by 1, 2 "
                    "having q.model_calls != count(c.call_id)") == []
    assert rows(db, "select run_id, question_id, model_calls from questions order by run_id") == [
        ("inner-align", "q-f465154e", 4), ("outer-align", "q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(8,)]
    assert rows(db, "select run_id, summary from runs order by run_id") == [
        ("inner-align", json.dumps({"questions": 1, "failed": 0})),
        ("outer-align", json.dumps({"questions": 1, "failed": 0}))]
    assert outer._runs == {} and inner._runs == {}


def test_recorders_of_one_database_in_two_threads_each_record_their_own(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    errors = []
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        def worker(run_id):
            try:
                with TraceRecorder(db, run_id=run_id) as recorder:
                    for _ in range(3):
                        graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert errors == []
    assert rows(db, "select run_id, count(*), sum(model_calls) from questions group by run_id order by run_id") == [
        ("t0-align", 3, 12), ("t1-align", 3, 12), ("t2-align", 3, 12)]
    assert rows(db, "select count(*) from model_calls") == [(36,)]


def test_a_closed_trace_store_is_named_in_one_line_and_no_model_is_asked(tmp_path):
    """Before: sqlite3's ``ProgrammingError: Cannot operate on a closed database.`` (no file named), from
    the invocation after the model calls were made, and again from the ``with`` block's end."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    closed = TraceStore(db)
    closed.close()
    with pytest.raises(TraceStoreError, match=r"app\.db: this trace store was closed \(TraceStore\.close\(\)\)"):
        TraceRecorder(closed, run_id="app")
    store = TraceStore(db)
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with pytest.raises(TraceStoreError, match=r"app\.db: this trace store was closed") as raised:
            with TraceRecorder(store, run_id="app") as recorder:
                graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
                store.close()
                with pytest.raises(TraceStoreError, match=r"app\.db: this trace store was closed"):
                    graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]},
                                 context=context)
                assert len(server.requests) == 2  # the second invocation asked no model
        assert "\n" not in str(raised.value)
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]


def _ctrl_c_pool(url: str) -> ModelPool:
    """Member ``a`` (the user's ChatOpenAI) answers at once; member ``b`` is interrupted by Ctrl-C
    after ``a``'s node has finished."""
    def pressed(messages, i):
        time.sleep(0.5)
        raise KeyboardInterrupt

    return ModelPool.from_chat_models({"a": chat(url, "a"), "b": ScriptedChatModel(respond=pressed)}, max_retries=0)


@pytest.mark.parametrize("caught", [False, True])
def test_ctrl_c_inside_a_question_keeps_the_answered_calls_and_counts_the_question(tmp_path, caught):
    """Before: the 2 samples member ``a`` returned were dropped and the question was nowhere: the run's
    summary said ``questions 0, failed 0`` (``finished`` when the app caught the interrupt and went on)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(_ctrl_c_pool(server.base_url), CONFIG)
        with pytest.raises(KeyboardInterrupt) if not caught else contextlib.nullcontext():
            with TraceRecorder(db, run_id="app") as recorder:
                try:
                    graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
                except KeyboardInterrupt:
                    if not caught:
                        raise
        assert [r["body"]["n"] for r in server.requests] == [2]
    assert rows(db, "select question_id, model, error from model_calls") == [
        ("q-f465154e", "a", None), ("q-f465154e", "a", None)]
    assert rows(db, "select count(*) from questions") == [(0,)]
    summary = {"questions": 0, "failed": 1,
               "failed_questions": {"q-f465154e": "KeyboardInterrupt: the invocation was interrupted (Ctrl-C)"}}
    assert rows(db, "select status, summary from runs") == [("failed" if caught else "interrupted", json.dumps(summary))]



def test_each_input_of_a_batch_stream_or_gather_is_its_own_question(tmp_path):
    """``batch``/``abatch``/``batch_as_completed``/``astream`` and ``asyncio.gather`` of ``ainvoke``: every
    input is one question with its own 4 calls, numbered on (``docs/guarantees.md``)."""
    import asyncio

    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    other = {"question": "What is 3 + 3?", "gold": "6"}
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            config = {"callbacks": [recorder]}
            list(graph.stream(QUESTION, config, context=context))
            graph.batch([QUESTION, other], config, context=context)
            list(graph.batch_as_completed([QUESTION, QUESTION], config, context=context))

            async def asked():
                await graph.abatch([QUESTION, other], config, context=context)
                async for _ in graph.astream(QUESTION, config, context=context, stream_mode="updates"):
                    pass
                await asyncio.gather(*[graph.ainvoke(QUESTION, config, context=context) for _ in range(3)])

            asyncio.run(asked())
        samples = sum(r["body"]["n"] for r in server.requests)
    assert samples == 11 * 4  # 9 of 2 + 2 and 2 of 3 + 3
    # (the stub answers 4: the two 3 + 3 questions are scored wrong)
    assert rows(db, "select count(*), sum(model_calls), sum(correct) from questions") == [(11, 44, 9)]
    assert rows(db, "select count(*), count(error) from model_calls") == [(44, 0)]
    assert sorted(q for (q,) in rows(db, "select question_id from questions")) == sorted(
        ["q-f465154e"] + [f"q-f465154e-{i}" for i in range(2, 10)] + ["q-2622f7aa", "q-2622f7aa-2"])
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 11, "failed": 0}))]


@pytest.mark.parametrize("change", ["config", "pool"])
def test_a_recorder_whose_run_holds_other_settings_is_refused_before_any_model_is_asked(tmp_path, change):
    """An app restarted with another ``config`` (or ``pool``) for its recorder: before, every invocation
    asked its models and then raised the command line's refusal (``... or pick a new --run-id``) as the
    question was to be written, losing the answers."""
    from agora.traces.errors import ResumeRefusedError

    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        other_pool = ModelPool.from_chat_models({name: chat(server.base_url, name) for name in "cd"}, max_retries=0)
        with TraceRecorder(db, run_id="app", config={"version": 1}, pool=pool) as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=DelegationContext(pool, CONFIG))
        assert len(server.requests) == 2
        given = {"config": {"version": 2}, "pool": pool} if change == "config" else {
            "config": {"version": 1}, "pool": other_pool}
        with pytest.raises(ResumeRefusedError) as refused:
            with TraceRecorder(db, run_id="app", **given) as recorder:
                graph.invoke(QUESTION, {"callbacks": [recorder]}, context=DelegationContext(given["pool"], CONFIG))
        assert len(server.requests) == 2  # no model asked
    first = str(refused.value).splitlines()[0]
    said = "settings (version: 2 here, 1 in the run)" if change == "config" else "pool"
    assert first.endswith(f"was started with other {said}; give this TraceRecorder another run_id, or the config and "
                          "pool that run was recorded with (no model was asked; nothing was written)"), first
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select run_id, status from runs") == [("app-align", "finished")]


@pytest.mark.parametrize("wrap, hint", [
    (lambda m: m.with_retry(stop_after_attempt=2),
     "; pass the chat model itself, without .with_retry(): the pool retries failed calls"),
    (lambda m: m.with_fallbacks([chat("http://127.0.0.1:9/v1", "b")]),
     "; pass the chat model itself, without .with_fallbacks(), and its fallbacks as members of their own"),
    (lambda m: m.bind(temperature=0.3), "; pass the chat model itself: sampling settings"),
])
def test_a_users_chat_model_in_a_langchain_wrapper_is_refused_saying_what_to_pass(wrap, hint):
    """Before: only "a RunnableRetry (...) is not a model", which does not say that the wrapped chat model
    is what the pool takes, nor why its retries and fallbacks belong to the pool."""
    from agora.models.errors import PoolConfigError

    with pytest.raises(PoolConfigError, match=r"^model 'a': a \w+ \(.*\) is not a model: .*" + re.escape(hint)):
        ModelPool.from_chat_models({"a": wrap(chat("http://127.0.0.1:9/v1", "a"))})
