"""A per-question graph's input is checked before any model is asked: a number ``gold`` or
``question_id`` becomes its text, any other type and a lone surrogate in ``question`` are refused
in one line naming the field (agora.graphs.question.checked_input, applied by every protocol graph)."""

import asyncio

import pytest

from agora.agents.delegation import DelegationConfig
from agora.agents.moa import MoAConfig
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.moa import MoAContext, build_moa_graph
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel


def models():
    return {"a": ScriptedChatModel(responses=["The answer is 7."], cycle=True),
            "b": ScriptedChatModel(responses=["The answer is 7."], cycle=True)}


def align(chats):
    return build_delegation_graph().compile(), DelegationContext(
        ModelPool.from_chat_models(chats), DelegationConfig(n_agents=2, k_samples=1, tau=0.5))


def moa(chats):
    return build_moa_graph().compile(), MoAContext(ModelPool.from_chat_models(chats), MoAConfig())


@pytest.mark.parametrize("build", [align, moa])
def test_number_gold_and_question_id_become_text_and_score(build):
    chats = models()
    graph, ctx = build(chats)
    out = graph.invoke({"question": "What is 3 + 4?", "question_id": 5, "gold": 7}, context=ctx)
    assert {r["correct"] for r in out["methods"].values()} == {True}


@pytest.mark.parametrize("build", [align, moa])
@pytest.mark.parametrize("inp, field", [
    ({"question": "What is 3 + 4?", "gold": [7]}, "'gold'"),
    ({"question": "What is 3 + 4?", "gold": {"a": 7}}, "'gold'"),
    ({"question": "What is 3 + 4?", "question_id": ["q"]}, "'question_id'"),
    ({"question": "What is 3 + 4? \ud800"}, "'question'"),
])
def test_bad_input_is_refused_in_one_line_before_any_model_call(build, inp, field):
    chats = models()
    graph, ctx = build(chats)
    with pytest.raises(ValueError) as err:
        graph.invoke(inp, context=ctx)
    assert field in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError):
        asyncio.run(graph.ainvoke(inp, context=ctx))
    assert all(not c.calls for c in chats.values())
