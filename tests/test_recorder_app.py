"""The trace recorder as a user's own app uses it: the user's ``ChatOpenAI`` clients on a loopback
OpenAI stub (tests/openai_stub.py), the protocol graphs invoked directly under ``TraceRecorder``.
Each case counts the rows written: questions, model calls per question, failed attempts, status."""

import json
import os
import socket
import threading
from typing import TypedDict

import pytest
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agora.agents.delegation import DelegationConfig
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import QuestionRecordedError, TraceRecorder
from agora.graphs.runner import run_protocol
from agora.models.pool import ModelCallError, ModelPool
from agora.tasks.problem import Problem
from agora.traces.report import failed_questions, run_totals
from agora.traces.store import TraceStore, TraceStoreError
from openai_stub import DROP, StubServer, chat_reply
from db_rows import rows

CONFIG = DelegationConfig(n_agents=2, k_samples=2, tau=0.5)  # 2 requests of n=2: 4 samples a question
QUESTION = "What is 2 + 2?"


def user_pool(url_a: str, url_b: str | None = None) -> ModelPool:
    """The user's own clients (no retries in the client: Agora's pool makes them, here none)."""
    return ModelPool.from_chat_models({
        "a": ChatOpenAI(base_url=url_a, api_key="k", model="a", max_retries=0, timeout=10),
        "b": ChatOpenAI(base_url=url_b or url_a, api_key="k", model="b", max_retries=0, timeout=10)},
        max_retries=0)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def calls_per_question(db, run_id):
    """Question id → (its ``questions.model_calls``, its successful ``model_calls`` rows, its failed ones)."""
    stored = dict(rows(db, "select question_id, model_calls from questions where run_id = ?", run_id))
    ok = dict(rows(db, "select question_id, count(*) from model_calls where run_id = ? and error is null "
                       "group by question_id", run_id))
    bad = dict(rows(db, "select question_id, count(*) from model_calls where run_id = ? and error is not null "
                        "group by question_id", run_id))
    return {q: (stored.get(q), ok.get(q, 0), bad.get(q, 0)) for q in set(stored) | set(ok) | set(bad)}


# ----------------------------------------------------------------------------- 1. repeated questions

def test_the_same_question_asked_by_four_threads_is_four_questions_whose_counts_agree(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            def ask():
                graph.invoke({"question": QUESTION, "gold": "4"}, {"callbacks": [recorder]},
                             context=DelegationContext(pool, CONFIG))
            threads = [threading.Thread(target=ask) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert len(server.requests) == 8  # 4 questions × 2 agents, one request of n=2 each
    assert recorder.recorded == {"align": 4} and recorder.failed == {}
    per_question = calls_per_question(db, "app-align")
    assert len(per_question) == 4 and set(per_question.values()) == {(4, 4, 0)}
    store = TraceStore(db)
    totals = run_totals(store, "app-align")
    assert (totals["questions"], totals["calls"], totals["failed"]) == (4, 16, 0)
    assert sorted(r[0] for r in rows(db, "select idx from questions")) == [0, 1, 2, 3]
    assert rows(db, "select count(*), sum(correct) from results where method = 'align'") == [(4, 4)]
    from typer.testing import CliRunner

    from agora.cli.main import app
    result = CliRunner().invoke(app, ["report", "run", "app-align", "--db", str(db), "--json"])
    report = json.loads(result.output)  # the header's totals and the method table's counts agree
    align = next(m for m in report["methods"] if m["method"] == "align")
    assert (report["totals"]["questions"], report["totals"]["calls"]) == (4, 16)
    assert (align["questions"], align["samples_per_question"] * align["questions"]) == (4, 16)


def test_two_recorder_blocks_asking_the_same_question_record_two_questions(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        for _ in range(2):
            with TraceRecorder(db, run_id="app") as recorder:
                graph.invoke({"question": QUESTION, "gold": "4"}, {"callbacks": [recorder]},
                             context=DelegationContext(pool, CONFIG))
            assert recorder.recorded == {"align": 1}
    per_question = calls_per_question(db, "app-align")
    assert len(per_question) == 2 and set(per_question.values()) == {(4, 4, 0)}
    assert sorted(r[0] for r in rows(db, "select idx from questions")) == [0, 1]
    totals = run_totals(TraceStore(db), "app-align")
    assert (totals["questions"], totals["calls"]) == (2, 8)
    # the summary counts both blocks' questions, as the totals do
    assert json.loads(TraceStore(db).get_run("app-align")["summary"]) == {"questions": 2, "failed": 0}


def test_a_repeated_explicit_question_id_is_refused_in_one_line_and_nothing_of_it_written(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({"question": QUESTION, "question_id": "q1"}, {"callbacks": [recorder]},
                         context=DelegationContext(pool, CONFIG))
            with pytest.raises(QuestionRecordedError) as refused:
                graph.invoke({"question": "What is 3 + 3?", "question_id": "q1"}, {"callbacks": [recorder]},
                             context=DelegationContext(pool, CONFIG))
        assert len(server.requests) == 2  # refused before its first node: no model was asked
    assert recorder.recorded == {"align": 1} and recorder.failed == {}
    assert str(refused.value) == (
        f"{db}: question id 'q1' is already recorded in run 'app-align': give each invocation its own "
        "question_id, or none (one is made per invocation); nothing of this invocation was written")
    assert "\n" not in str(refused.value)
    assert calls_per_question(db, "app-align") == {"q1": (4, 4, 0)}
    assert rows(db, "select question from questions") == [(QUESTION,)]


# ----------------------------------------------------------------------------- 2. a pause inside the graph

class AppState(TypedDict, total=False):
    question: str
    question_id: str
    gold: str
    answer: str


def paused_app(checkpointer):
    """A user's app whose one node is the ALIGN graph, paused before the principal selects."""
    app = StateGraph(AppState, context_schema=DelegationContext)
    app.add_node("protocol", build_delegation_graph().compile(interrupt_before=["principal_select"]))
    app.add_edge(START, "protocol")
    app.add_edge("protocol", END)
    return app.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("where", ["subgraph", "top-level", "app interrupt"])
def test_a_question_paused_and_resumed_is_recorded_once_whole(tmp_path, where):
    db = tmp_path / "app.db"
    saver = InMemorySaver()
    if where == "subgraph":
        graph = paused_app(saver)
    elif where == "top-level":
        graph = build_delegation_graph().compile(checkpointer=saver, interrupt_before=["principal_select"])
    else:  # the app asks its user before the protocol runs, and again after (an `interrupt` in its nodes)
        def confirm(state):
            interrupt("go?")
            return {}

        def review(state):
            interrupt("ok?")
            return {}
        app = StateGraph(AppState, context_schema=DelegationContext)
        app.add_node("confirm", confirm)
        app.add_node("protocol", build_delegation_graph().compile(interrupt_before=["principal_select"]))
        app.add_node("review", review)
        app.add_edge(START, "confirm")
        app.add_edge("confirm", "protocol")
        app.add_edge("protocol", "review")
        app.add_edge("review", END)
        graph = app.compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            config = {**thread, "callbacks": [recorder]}
            graph.invoke({"question": QUESTION, "question_id": "q1", "gold": "4"}, config,
                         context=DelegationContext(pool, CONFIG))
            assert rows(db, "select count(*) from questions") in ([], [(0,)])  # paused: nothing yet
            while graph.get_state(thread).next:  # resumed until it finishes
                paused_at_interrupt = bool(graph.get_state(thread).interrupts)
                graph.invoke(Command(resume="yes") if paused_at_interrupt else None, config,
                             context=DelegationContext(pool, CONFIG))
        assert len(server.requests) == 2
    assert recorder.recorded == {"align": 1} and recorder.failed == {}
    assert calls_per_question(db, "app-align") == {"q1": (4, 4, 0)}
    assert rows(db, "select answer, correct from questions") == [("4", 1)]
    assert rows(db, "select count(*), sum(samples) from results where method = 'align'") == [(1, 4)]
    run = TraceStore(db).get_run("app-align")
    assert run["status"] == "finished" and json.loads(run["summary"]) == {"questions": 1, "failed": 0}


# ----------------------------------------------------------------------------- 3. an invocation that raises

def test_a_question_stopped_by_an_unreachable_member_records_its_failed_attempts_as_the_runner_does(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url, closed_port_url())  # member b is unreachable
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ModelCallError, match="unreachable"):
                graph.invoke({"question": QUESTION, "question_id": "q1", "gold": "4"}, {"callbacks": [recorder]},
                             context=DelegationContext(pool, CONFIG))
        store = TraceStore(db)
        with pytest.raises(ModelCallError, match="unreachable"):  # the CLI's runner, the same question
            run_protocol("align", [Problem("q1", QUESTION, "4")], store=store, run_id="cli",
                         context=DelegationContext(pool, CONFIG), config=CONFIG, pool_description=pool.describe(),
                         dataset={"format": "test"})
    assert recorder.recorded == {} and recorder.failed == {"align": 1}
    embedded, cli = calls_per_question(db, "app-align"), calls_per_question(db, "cli")
    assert list(embedded) == list(cli) == ["q1"] and embedded["q1"][0] is cli["q1"][0] is None  # no question row
    for run_id in ("app-align", "cli"):  # every request sent is a row (docs/guarantees.md)
        [(error,)] = rows(db, "select error from model_calls where run_id = ? and model = 'b'", run_id)
        assert error.startswith(("APIConnectionError", "OpenAIConnectionError"))  # b's one failed attempt
        # a's request: its 2 samples when its node finished before b's refusal stopped the question,
        # else one attempt cancelled while in flight (async, the runner) or no row (sync: never sent)
        assert rows(db, "select count(*), group_concat(distinct coalesce(error, 'ok')) from model_calls "
                        "where run_id = ? and model = 'a'", run_id) in ([(2, "ok")], [(1, "cancelled")], [(0, None)])
    assert list(failed_questions(store, "app-align")) == list(failed_questions(store, "cli")) == ["q1"]
    run = store.get_run("app-align")
    summary = json.loads(run["summary"])
    assert run["status"] == "failed" and summary["failed"] == 1 and list(summary["failed_questions"]) == ["q1"]
    assert summary["failed_questions"]["q1"].startswith("ModelCallError")


def test_questions_against_a_server_that_resets_connections_are_each_a_failed_question(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    n = 20
    with StubServer(lambda path, body: (200, DROP)) as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            for i in range(n):
                with pytest.raises(ModelCallError):
                    graph.invoke({"question": f"What is {i} + 2?"}, {"callbacks": [recorder]},
                                 context=DelegationContext(pool, CONFIG))
        requests = len(server.requests)
    assert recorder.recorded == {} and recorder.failed == {"align": n}
    per_question = calls_per_question(db, "app-align")
    assert len(per_question) == n and all(v[:2] == (None, 0) and v[2] >= 1 for v in per_question.values())
    assert sum(v[2] for v in per_question.values()) == requests  # every attempt sent is a row
    run = TraceStore(db).get_run("app-align")
    assert run["status"] == "failed" and json.loads(run["summary"])["failed"] == n


def test_an_invocation_stopped_by_an_unreachable_member_and_resumed_is_one_question_answered_whole(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    with StubServer() as server:
        with TraceRecorder(db, run_id="app") as recorder:
            config["callbacks"] = [recorder]
            with pytest.raises(ModelCallError):  # member b down: agent 1 stops the question
                graph.invoke({"question": QUESTION, "gold": "4"}, config,
                             context=DelegationContext(user_pool(server.base_url, closed_port_url()), CONFIG))
            assert recorder.failed == {"align": 1}
            out = graph.invoke(None, config, context=DelegationContext(user_pool(server.base_url), CONFIG))  # b back
        assert len(server.requests) == 2  # agent 0 (kept in the checkpoint) is not asked again
    assert out["answer"] == "4" and recorder.recorded == {"align": 1} and recorder.failed == {}
    [qid] = calls_per_question(db, "app-align")
    assert calls_per_question(db, "app-align") == {qid: (4, 4, 1)}  # the earlier try's failed attempt kept, once
    run = TraceStore(db).get_run("app-align")
    assert run["status"] == "finished" and json.loads(run["summary"]) == {"questions": 1, "failed": 0}


def test_a_question_still_paused_when_the_recorder_finishes_is_counted_not_recorded(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["principal_select"])
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            build_delegation_graph().compile().invoke({"question": QUESTION}, {"callbacks": [recorder]},
                                                      context=DelegationContext(pool, CONFIG))
            graph.invoke({"question": "What is 3 + 3?"}, {"configurable": {"thread_id": "t"}, "callbacks": [recorder]},
                         context=DelegationContext(pool, CONFIG))
    assert rows(db, "select question from questions") == [(QUESTION,)]
    assert json.loads(TraceStore(db).get_run("app-align")["summary"]) == {"questions": 1, "failed": 0, "paused": 1}


# ----------------------------------------------------------------------------- 7. the database file changed

@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_a_trace_db_deleted_or_replaced_between_questions_stops_the_recorder_in_one_line(tmp_path, change):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        recorder = TraceRecorder(db, run_id="app")
        graph.invoke({"question": QUESTION}, {"callbacks": [recorder]}, context=DelegationContext(pool, CONFIG))
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{db}{suffix}"):
                os.unlink(f"{db}{suffix}")
        if change == "replaced":
            TraceStore(tmp_path / "other.db").close()
            os.replace(tmp_path / "other.db", db)
        with pytest.raises(TraceStoreError) as stopped:
            graph.invoke({"question": "What is 3 + 3?"}, {"callbacks": [recorder]},
                         context=DelegationContext(pool, CONFIG))
    message = str(stopped.value)
    assert "\n" not in message and message.startswith(f"{db}: the trace database was deleted or replaced")
    assert os.path.exists(db) == (change == "replaced")
    if change == "replaced":
        assert rows(db, "select count(*) from model_calls") == [(0,)]


@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_agora_run_stops_in_one_line_when_its_trace_db_is_deleted_or_replaced_mid_run(tmp_path, change):
    from typer.testing import CliRunner

    from agora.cli.main import app

    db = tmp_path / "t.db"
    seen = []

    def handler(path, body):  # the second question's request: the file is deleted (or replaced) meanwhile
        seen.append(body)
        if len(seen) == 2:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(f"{db}{suffix}"):
                    os.unlink(f"{db}{suffix}")
            if change == "replaced":
                TraceStore(tmp_path / "other.db").close()
                os.replace(tmp_path / "other.db", db)
        return 200, chat_reply(body)

    with StubServer(handler) as server:
        pool = tmp_path / "pool.toml"
        pool.write_text(f'[[models]]\nname = "m"\nbackend = "openai"\nmodel = "m"\nbase_url = "{server.base_url}"\n'
                        "max_retries = 0\n")
        result = CliRunner().invoke(app, [str(a) for a in ("run", "align", "--limit", 3, "--agents", 1, "--samples",
                                                            1, "--pool", pool, "--db", db, "--run-id", "r")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "traces:" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {db}: the trace database was deleted or replaced")
    assert len(seen) == 2  # stopped at the question whose record found the file changed


def test_two_invocations_of_one_question_id_at_once_record_one_and_refuse_the_other(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    errors = []
    with StubServer() as server:
        pool = user_pool(server.base_url)
        with TraceRecorder(db, run_id="app") as recorder:
            def ask():
                try:
                    graph.invoke({"question": QUESTION, "question_id": "q1"}, {"callbacks": [recorder]},
                                 context=DelegationContext(pool, CONFIG))
                except QuestionRecordedError as exc:
                    errors.append(exc)
            threads = [threading.Thread(target=ask) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert len(errors) == 1 and "question id 'q1' is already recorded in run 'app-align'" in str(errors[0])
    assert recorder.recorded == {"align": 1} and calls_per_question(db, "app-align") == {"q1": (4, 4, 0)}


def test_a_stream_abandoned_after_two_chunks_is_a_failed_question_with_its_calls(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        with TraceRecorder(db, run_id="app") as recorder:
            chunks = graph.stream({"question": QUESTION, "question_id": "q1", "gold": "4"}, {"callbacks": [recorder]},
                                  context=DelegationContext(user_pool(server.base_url), CONFIG),
                                  stream_mode="updates")
            next(chunks), next(chunks)  # both members have sampled: 2 requests of n=2
            chunks.close()
    assert recorder.recorded == {} and recorder.failed == {"align": 1}
    assert calls_per_question(db, "app-align") == {"q1": (None, 4, 0)}  # no question row, its 4 samples kept
    run = TraceStore(db).get_run("app-align")
    summary = json.loads(run["summary"])
    assert run["status"] == "failed" and summary["failed"] == 1
    assert summary["failed_questions"]["q1"].startswith("the invocation was abandoned")


def test_an_invocation_after_the_with_block_is_refused_and_writes_nothing(tmp_path):
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({"question": QUESTION, "gold": "4"}, {"callbacks": [recorder]}, context=context)
        with pytest.raises(RuntimeError, match="used after its with block ended"):
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]}, context=context)
    assert recorder.recorded == {"align": 1}
    assert rows(db, "select count(*) from questions") == [(1,)]
    assert json.loads(TraceStore(db).get_run("app-align")["summary"])["questions"] == 1
