"""The trace recorder on a protocol graph whose first step is a fan-out from START (SLM-MUX sends
one task per member): LangGraph then traces its input step ``__start__`` as a node run, which is no
node of the protocol. A pause and resume through the same recorder records the question once, whole,
and a repeated ``question_id`` is refused before any model is asked, as for ALIGN."""


import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agora.graphs.recording import QuestionRecordedError, TraceRecorder
from agora.graphs.slm_mux import build_slm_mux_graph
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from db_rows import rows

QUESTION = {"question": "What is 3 + 4?", "gold": "7"}
CONTEXT_CONFIG = {"k_samples": 2}


class Counting(ScriptedChatModel):
    """A scripted model that counts the requests it answers."""

    requests: int = 0

    def _generate(self, *args, **kwargs):
        self.requests += 1
        return super()._generate(*args, **kwargs)


def scripted_pool() -> tuple[ModelPool, list[Counting]]:
    models = [Counting(responses=["3 + 4 = 7. The answer is 7."], cycle=True),
              Counting(responses=["The answer is 8."], cycle=True)]
    return ModelPool.from_chat_models({"a": models[0], "b": models[1]}), models


def test_an_slm_mux_question_paused_and_resumed_is_recorded_once_whole(tmp_path):
    db = tmp_path / "app.db"
    pool, models = scripted_pool()
    graph = build_slm_mux_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["mux_select"])
    context = {"pool": pool, "config": CONTEXT_CONFIG}
    with TraceRecorder(db, run_id="app") as recorder:
        config = {"configurable": {"thread_id": "t1"}, "callbacks": [recorder]}
        graph.invoke(QUESTION, config, context=context)
        assert graph.get_state(config).next == ("mux_select",)
        out = graph.invoke(None, config, context=context)
    assert out["answer"] == "7"  # 'a' is sure of 7, 'b' of 8: a confidence tie, pool order
    assert recorder.recorded == {"slm-mux": 1} and recorder.failed == {}
    # 2 members x 2 samples, all drawn before the pause, in the one recorded question
    assert rows(db, "select count(*) from model_calls where run_id = 'app-slm-mux'") == [(4,)]
    assert rows(db, "select answer, correct, model_calls from questions") == [("7", 1, 4)]


def test_a_repeated_question_id_is_refused_before_slm_mux_asks_a_model(tmp_path):
    db = tmp_path / "app.db"
    pool, models = scripted_pool()
    graph = build_slm_mux_graph().compile()
    context = {"pool": pool, "config": CONTEXT_CONFIG}
    with TraceRecorder(db, run_id="app") as recorder:
        graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]}, context=context)
        asked = [m.requests for m in models]
        with pytest.raises(QuestionRecordedError, match="question id 'q1' is already recorded in run 'app-slm-mux'"):
            graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]}, context=context)
        assert [m.requests for m in models] == asked  # no model was asked for the refused invocation
    assert rows(db, "select question_id from questions") == [("q1",)]
