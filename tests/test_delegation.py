"""ALIGN rules and graph with scripted fake models (hand-checked values)."""

import pytest

from agora.agents.delegation import (
    DelegationConfig,
    agreement_utility,
    best_of_n,
    plurality,
    principal_select,
    propose,
    self_consistency,
    single_agent,
)
from agora.models.pool import ModelPool, SamplingParams
from agora.models.testing import ScriptedChatModel
from agora.graphs.delegation import DelegationContext, build_delegation_graph


def cand(agent, index, answer, tokens=10):
    return {"agent": agent, "model": f"m{agent}", "index": index, "text": f"The answer is {answer}.",
            "answer": answer, "prompt_tokens": 5, "completion_tokens": tokens, "latency_s": 0.5, "call_id": f"{agent}-{index}"}


def test_plurality_counts_abstentions_and_breaks_ties_by_first_seen():
    assert plurality(["3", "5", "3", None]) == ("3", 0.5)
    assert plurality(["5", "3", "3", "5"]) == ("5", 0.5)
    assert plurality([None, None]) == (None, 0.0)


def test_propose_plurality_and_first_rules():
    cands = [cand(0, 0, "7"), cand(0, 1, "9"), cand(0, 2, "9"), cand(1, 0, "1")]
    p = propose(0, "m0", cands, "plurality")
    assert (p["answer"], p["candidate_index"], p["signal"]) == ("9", 1, pytest.approx(2 / 3))
    f = propose(0, "m0", cands, "first")
    assert (f["answer"], f["candidate_index"], f["signal"]) == ("7", 0, pytest.approx(1 / 3))
    empty = propose(2, "m2", cands)
    assert (empty["answer"], empty["candidate_index"], empty["signal"]) == (None, -1, 0.0)


def test_agreement_utility_hand_computed():
    proposals = [{"answer": "4", "signal": 1.0}, {"answer": "5", "signal": 0.5}, {"answer": "4", "signal": 0.25}]
    # U(4) = (1 + .25) / 1.75, U(5) = .5 / 1.75
    assert agreement_utility(["4", "5", "6", None], proposals) == pytest.approx([1.25 / 1.75, 0.5 / 1.75, 0.0, 0.0])
    assert agreement_utility(["4"], [{"answer": "4", "signal": 0.0}]) == [0.0]


def test_principal_select_threshold_and_fallback():
    proposals = [{"agent": 0, "answer": "4", "signal": 0.4}, {"agent": 1, "answer": "5", "signal": 0.6}]
    u = agreement_utility([p["answer"] for p in proposals], proposals)  # [0.4, 0.6]
    accepted = principal_select(proposals, u, tau=0.5)
    assert (accepted["answer"], accepted["agent"], accepted["accepted"]) == ("5", 1, True)
    fallback = principal_select(proposals, u, tau=0.9)
    assert (fallback["answer"], fallback["accepted"]) == ("5", False)
    # equal U: the higher signal wins, then the lower agent index
    tie = [{"agent": 0, "answer": "1", "signal": 0.5}, {"agent": 1, "answer": "2", "signal": 0.5}]
    assert principal_select(tie, [0.5, 0.5], 0.5)["agent"] == 0
    assert principal_select([], [], 0.5)["answer"] is None


def test_baselines_use_the_same_candidates():
    cands = [cand(0, 0, "3"), cand(0, 1, "8"), cand(1, 0, "8"), cand(1, 1, "2")]
    assert single_agent(cands) == "3"
    assert self_consistency(cands) == ("8", 0.5)
    proposals = [{"agent": 0, "answer": "3", "signal": 0.5}, {"agent": 1, "answer": "2", "signal": 1.0}]
    assert best_of_n(cands, proposals) == ("2", pytest.approx(1 / 1.5))


@pytest.mark.parametrize("kwargs", [{"n_agents": 0}, {"k_samples": 0}, {"tau": 1.5}, {"proposal_rule": "x"}])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        DelegationConfig(**kwargs)


def scripted_pool(scripts: dict[str, list[str]]) -> ModelPool:
    return ModelPool.from_chat_models({name: ScriptedChatModel(responses=texts) for name, texts in scripts.items()})


def test_graph_selects_and_scores_all_methods_from_one_pool():
    pool = scripted_pool({
        "a": ["The answer is 12.", "The answer is 12.", "The answer is 7."],
        "b": ["The answer is 7.", "The answer is 7.", "I am not sure."],
        "c": ["The answer is 7.", "The answer is 12.", "The answer is 12."],
    })
    graph = build_delegation_graph().compile()
    cfg = DelegationConfig(n_agents=3, k_samples=3, tau=0.5)
    out = graph.invoke({"question": "Q?", "gold": "12", "question_id": "q1"}, context=DelegationContext(pool, cfg))
    # proposals: a -> 12 (2/3), b -> 7 (2/3), c -> 12 (2/3); U(12) = 4/3 / 2 = 2/3, U(7) = 1/3
    assert [(p["agent"], p["answer"]) for p in out["proposals"]] == [(0, "12"), (1, "7"), (2, "12")]
    assert out["selection"] == {"agent": 0, "answer": "12", "utility": pytest.approx(2 / 3), "accepted": True}
    methods = out["methods"]
    assert methods["align"]["answer"] == "12" and methods["align"]["correct"] is True
    assert methods["single_agent"] == {**methods["single_agent"], "answer": "12", "samples": 1}
    # self-consistency over 9: 12 x4, 7 x4, None x1 -> tie broken by first seen (agent a's 12)
    assert methods["self_consistency"]["answer"] == "12"
    assert all(m["samples"] == 9 for k, m in methods.items() if k != "single_agent")
    assert methods["align"]["completion_tokens"] == sum(
        len(t.split()) for t in ["The answer is 12."] * 4 + ["The answer is 7."] * 4 + ["I am not sure."])


def test_graph_records_every_call_with_context_and_survives_a_dead_model():
    dead = ScriptedChatModel(responses=[], fail_times=10)
    pool = ModelPool.from_chat_models({"ok": ScriptedChatModel(responses=["The answer is 5."] * 2), "dead": dead},
                                      max_retries=1)
    graph = build_delegation_graph().compile()
    state = graph.invoke({"question": "Q?", "gold": "5"}, context=DelegationContext(pool, DelegationConfig(2, 2)))
    assert state["answer"] == "5"
    assert len(dead.calls) == 2  # first try + 1 retry


def test_pool_retries_then_succeeds_and_logs_each_attempt():
    flaky = ScriptedChatModel(responses=["hi"], fail_times=1)
    pool = ModelPool.from_chat_models({"f": flaky}, max_retries=2)
    samples, records = pool.sample("f", [{"role": "user", "content": "x"}], SamplingParams(n=1),
                                   context={"node": "n"})
    assert [s.text for s in samples] == ["hi"]
    assert [r["error"] is None for r in records] == [False, True]
    assert records[0]["node"] == "n" and records[0]["attempt"] == 0 and records[1]["attempt"] == 1
