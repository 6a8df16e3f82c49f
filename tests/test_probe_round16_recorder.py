"""The trace recorder in a user's app (round 16): what round 15's changes left wrong. Models are the
user's own ``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py)."""

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from db_rows import rows
from openai_stub import StubServer
from test_probe_round14_recorder import CONFIG, QUESTION, user_pool
from test_probe_round15_recorder import RaisesOnStart


def test_after_another_callback_refused_a_start_the_apps_own_model_call_is_not_refused(tmp_path):
    """Before: the recorder kept the refused start in the context until its next recorded invocation
    or its ``with`` block's end, and took the app's next model call outside any graph for a call of
    that graph's unseen nodes (``RecorderNotInheritedError``, no model asked)."""
    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        pool = user_pool(server.base_url)
        context = DelegationContext(pool, CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            try:
                graph.invoke(QUESTION, {"callbacks": [recorder, RaisesOnStart()]}, context=context)
            except RuntimeError as exc:
                assert str(exc) == "the app's callback refused this run"
            samples, records = pool.sample("a", [{"role": "user", "content": "hello"}])
            assert len(samples) == 1 and [r.get("error") for r in records] == [None]
            graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)
        assert len(server.requests) == 3  # the app's own call, then the recorded question's 2
    # the app's own call is not the recorder's: only the recorded question's calls are stored
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
