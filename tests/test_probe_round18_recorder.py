"""The trace recorder in a user's app (round 18): a run recorded by two ``with TraceRecorder`` blocks
one after the other, and a question stopped by LangGraph's recursion limit. Models are the user's
own ``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py); each case counts the
rows written against the run's summary."""

import json

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.errors import GraphRecursionError

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from db_rows import rows
from openai_stub import StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool


def test_two_blocks_one_after_the_other_on_one_run_id_count_both_blocks_questions(tmp_path):
    """Before: the second block's end wrote the run's summary from its own counts only
    (``{"questions": 1, ...}``), though the run holds both blocks' questions (2 rows), and the
    first block's failed question was dropped from ``failed_questions``."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
            with pytest.raises(GraphRecursionError):
                graph.invoke({"question": "What is 5 + 5?", "gold": "10"},
                             {"callbacks": [recorder], "recursion_limit": 3}, context=context)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({"question": "What is 3 + 3?", "gold": "6"}, {"callbacks": [recorder]}, context=context)
    assert rows(db, "select count(*) from questions") == [(2,)]
    (status, summary), = rows(db, "select status, summary from runs")
    summary = json.loads(summary)
    assert (status, summary["questions"], summary["failed"], list(summary["failed_questions"])) == (
        "failed", 2, 1, ["q-a621b331"])


def test_a_recursion_limit_failure_is_stored_as_one_line(tmp_path):
    """LangGraph's ``GraphRecursionError`` message has a second line (``For troubleshooting, visit:
    ...``). Before: the run's ``failed_questions`` stored it with its newline. Now the first line."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(GraphRecursionError):
                graph.invoke(QUESTION, {"callbacks": [recorder], "recursion_limit": 3}, context=context)
        assert len(server.requests) == 2
    (summary,), = rows(db, "select summary from runs")
    assert json.loads(summary)["failed_questions"] == {"q-f465154e": (
        "GraphRecursionError: Recursion limit of 3 reached without hitting a stop condition. You can increase "
        "the limit by setting the `recursion_limit` config key.")}
    assert rows(db, "select count(*), count(error) from model_calls") == [(4, 0)]


class AppHandler(BaseCallbackHandler):
    """The app's own callback handler, passed before the recorder, whose ``on_chain_end`` raises (with
    ``raise_error``, so LangChain lets its error through) on the run named ``name`` (``None``: the
    outermost run)."""

    raise_error = True

    def __init__(self, name: str | None) -> None:
        self.name, self.runs = name, {}

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        self.runs[run_id] = (kwargs.get("name"), parent_run_id)

    def on_chain_end(self, outputs, *, run_id, **kwargs) -> None:
        name, parent = self.runs[run_id]
        if (parent is None) if self.name is None else name == self.name:
            raise ValueError("the app's handler failed")


def test_an_apps_handler_raising_on_the_graphs_end_before_the_recorder_leaves_the_question_answered(tmp_path):
    """Before: the recorder heard of the graph's end only as an error (LangGraph reports the app
    handler's error to every handler), so the question the graph answered was written as failed
    (``ValueError: the app's handler failed``). Now it is recorded answered, with its 4 samples; the
    app's error still reaches the app."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ValueError, match="the app's handler failed"):
                graph.invoke(QUESTION, {"callbacks": [AppHandler(None), recorder]}, context=context)
        assert len(server.requests) == 2
    assert rows(db, "select question_id, answer, correct, model_calls from questions") == [("q-f465154e", "4", 1, 4)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 1, "failed": 0}))]


def test_an_apps_handler_raising_on_a_nodes_end_before_the_recorder_keeps_that_nodes_calls(tmp_path):
    """The app's handler raises on the (one) agent's sampling node's end: the invocation raised, so
    the question failed. Before: the node's 2 samples were lost (the recorder never heard of its
    end: no ``model_calls`` row); now its update is taken from the end the handler refused."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), {"n_agents": 1, "k_samples": 2})
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ValueError, match="the app's handler failed"):
                graph.invoke(QUESTION, {"callbacks": [AppHandler("agent_sample"), recorder]}, context=context)
        assert len(server.requests) == 1
    assert rows(db, "select count(*) from questions") == [(0,)]
    assert rows(db, "select count(*), count(error) from model_calls") == [(2, 0)]
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, json.loads(summary)["failed_questions"]) == (
        "failed", {"q-f465154e": "ValueError: the app's handler failed"})



def test_batch_with_return_exceptions_records_the_answered_and_the_failed_question(tmp_path):
    """``graph.batch([...], [config, config_with_a_recursion_limit], return_exceptions=True)``: the
    app gets one answer and one exception; the run holds one answered and one failed question."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            outs = graph.batch([QUESTION, {"question": "What is 5 + 5?", "gold": "10"}],
                               [{"callbacks": [recorder]}, {"callbacks": [recorder], "recursion_limit": 3}],
                               context=context, return_exceptions=True)
        assert len(server.requests) == 4
    assert outs[0]["answer"] == "4" and isinstance(outs[1], GraphRecursionError)
    assert rows(db, "select question_id, answer from questions") == [("q-f465154e", "4")]
    assert rows(db, "select question_id, count(*) from model_calls group by 1 order by 1") == [
        ("q-a621b331", 4), ("q-f465154e", 4)]
    (status, summary), = rows(db, "select status, summary from runs")
    assert (status, json.loads(summary)["questions"], json.loads(summary)["failed"]) == ("failed", 1, 1)


@pytest.mark.parametrize("how", ["run_name", "updates_and_custom"])
def test_a_renamed_graph_and_a_two_mode_stream_are_recorded(tmp_path, how):
    """``graph.with_config(run_name="my-align")`` (the graph's run is reported under the app's name)
    and ``stream(stream_mode=["updates", "custom"])``: one question, its 4 samples."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            if how == "run_name":
                out = graph.with_config(run_name="my-align").invoke(QUESTION, {"callbacks": [recorder]},
                                                                    context=context)
                assert out["answer"] == "4"
            else:
                chunks = list(graph.stream(QUESTION, {"callbacks": [recorder]}, context=context,
                                           stream_mode=["updates", "custom"]))
                assert {mode for mode, _ in chunks} == {"updates", "custom"}
        assert len(server.requests) == 2
    assert rows(db, "select question_id, answer, model_calls from questions") == [("q-f465154e", "4", 4)]
    assert rows(db, "select status, summary from runs") == [("finished", json.dumps({"questions": 1, "failed": 0}))]
