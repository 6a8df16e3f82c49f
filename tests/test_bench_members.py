"""A bench's members (weights × recipe) and its pool's oracle, and the best single member at matched
samples: hand-computed figures on hand-built bench data, and the matched draw's graph on a scripted pool."""

from types import SimpleNamespace

import pytest

from agora.graphs.matched_single import MatchedSingleConfig, MatchedSingleContext, build_matched_single_graph
from agora.graphs.candidates import CANDIDATE_SEED
from agora.agents.seeds import call_seed
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.bench_members import member_rows, pool_oracle
from agora.traces.matched_single import MemberSamples, matched_pairs, matched_vote


def task(name, *runs):
    return SimpleNamespace(name=name, runs={r: f"b:{name}:{r}" for r in runs})


# Two tasks; two members on the same weights would be two names: "q" (chain-of-thought) and "q+pot".
SPEC = SimpleNamespace(tasks=(task("t1", "candidates", "align"), task("t2", "candidates", "align")),
                       settings={"pool": ["q", "q+pot"]})
DATA = SimpleNamespace(
    single_values={"t1": {"q": {"a": 1 / 3, "b": 0.0, "c": 2 / 3}, "q+pot": {"a": 0.0, "b": 0.0, "c": 1.0}},
                   "t2": {"q": {"d": 0.0, "e": 0.0}, "q+pot": {"d": 1 / 3, "e": 0.0}}},
    model_sc={"t1": {"q": {"a": (0, 3), "b": (0, 3), "c": (1, 3)}, "q+pot": {"a": (0, 3), "b": (0, 3), "c": (1, 3)}},
              "t2": {"q": {"d": (0, 3), "e": (0, 3)}, "q+pot": {"d": (0, 2), "e": (0, 3)}}})


def test_each_member_has_its_row_per_task_by_its_name_not_its_weights():
    rows = {(r["task"], r["member"]): r for r in member_rows(SPEC, DATA)}
    assert list(rows) == [("t1", "q"), ("t1", "q+pot"), ("t2", "q"), ("t2", "q+pot"), ("macro", "q"), ("macro", "q+pot")]
    assert rows["t1", "q"]["accuracy"] == pytest.approx(1 / 3) and rows["t1", "q"]["questions"] == 3
    assert rows["t1", "q+pot"]["accuracy"] == pytest.approx(1 / 3) and rows["t1", "q+pot"]["sc_accuracy"] == pytest.approx(1 / 3)
    assert rows["t2", "q+pot"]["accuracy"] == pytest.approx(1 / 6) and rows["t2", "q+pot"]["sc_accuracy"] == 0.0
    assert rows["t2", "q+pot"]["sc_samples_per_q"] == 2.5  # one draw of 2 successful samples, one of 3
    # macro: the mean of the per-task figures
    assert rows["macro", "q"]["accuracy"] == pytest.approx((1 / 3 + 0) / 2) and rows["macro", "q"]["tasks"] == 2
    assert rows["macro", "q+pot"]["accuracy"] == pytest.approx((1 / 3 + 1 / 6) / 2)
    assert rows["macro", "q"]["sc_accuracy"] == pytest.approx((1 / 3 + 0) / 2) and rows["macro", "q"]["sc_questions"] == 5
    assert all(r["too_few"] for r in rows.values())  # 2 or 3 questions: no finding


def test_the_pools_oracle_is_the_share_of_questions_some_members_sample_got_right():
    rows = {r["task"]: r for r in pool_oracle(SPEC, DATA)}
    assert rows["t1"]["accuracy"] == pytest.approx(2 / 3) and rows["t1"]["questions"] == 3  # a (q), c (both); not b
    assert rows["t2"]["accuracy"] == 0.5 and rows["t2"]["members"] == 2  # d (q+pot); not e
    assert rows["macro"]["accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2) and rows["macro"]["questions"] == 5
    # without a shared pool there is no oracle (ALIGN's candidates are not every member's)
    no_pool = SimpleNamespace(tasks=(task("t1", "align"),), settings={})
    assert pool_oracle(no_pool, DATA) == []


def test_the_matched_vote_takes_the_first_n_own_samples():
    s = [("3", False), ("7", True), ("7", True), ("3", False), ("3", False)]
    assert matched_vote(s, 3) == (1, 3)      # 3, 7, 7: 7 wins
    assert matched_vote(s, 5) == (0, 5)      # three 3s beat two 7s
    assert matched_vote(s, 2) == (0, 2)      # a tie goes to the answer seen first: 3
    assert matched_vote(s, 9) == (0, 5)      # fewer own samples than asked: all of them
    assert matched_vote([(None, False), ("7", True)], 2) == (1, 2)  # no answer never wins
    assert matched_vote([(None, False)], 1) == (0, 1)


def test_matched_pairs_per_task_and_macro_hand_computed():
    spec = SimpleNamespace(tasks=(task("t1"), task("t2")))
    results = {"t1": {"a": {"correct": True, "samples": 5}, "b": {"correct": False, "samples": 3},
                      "x": {"correct": None, "samples": 3}},  # no gold: left out
               "t2": {"d": {"correct": True, "samples": 1}, "e": {"correct": True, "samples": 4}}}
    matched = {"t1": MemberSamples("B", {"a": [("3", False), ("7", True), ("7", True), ("3", False), ("3", False)],
                                         "b": [("7", True), ("7", True), ("1", False), ("1", False)]}),
               "t2": MemberSamples("B", {"d": [("2", False), ("9", True)], "e": [("9", True), ("9", True)],
                                         "f": [("9", True)]})}  # f: the method has no row there
    got = matched_pairs(spec, results, matched)
    t1, t2, macro = got["tasks"]["t1"], got["tasks"]["t2"], got["macro"]
    # t1: method right on a, wrong on b; member's 5-vote on a says 3 (wrong), its 3-vote on b says 7 (right)
    assert (t1["questions"], t1["diff"], t1["wins"], t1["losses"]) == (2, 0.0, 1, 1)
    assert (t1["samples_method"], t1["samples_member"], t1["short"]) == (4.0, 4.0, 0)
    # t2: d: member's first sample 2 (wrong); e: method used 4, the member has 2 (9, 9: right), one short
    assert (t2["questions"], t2["diff"], t2["wins"], t2["losses"], t2["short"]) == (2, 0.5, 1, 0, 1)
    assert (t2["samples_method"], t2["samples_member"]) == (2.5, 1.5)
    assert t2["method_accuracy"] == 1.0 and t2["member_accuracy"] == 0.5
    assert macro["diff"] == pytest.approx(0.25) and (macro["wins"], macro["losses"]) == (2, 1)
    assert macro["p_mcnemar"] == pytest.approx(1.0) and macro["questions"] == 4 and macro["tasks"] == 2
    assert macro["method_accuracy"] == pytest.approx(0.75) and macro["member_accuracy"] == pytest.approx(0.5)
    assert macro["too_few"] and macro["ci_low"] <= 0.25 <= macro["ci_high"]
    assert matched_pairs(spec, results, {}) is None


def test_the_matched_draw_continues_the_members_shared_seed_stream_and_votes_over_all_its_samples():
    def respond(chat, j):
        return f"The answer is {7 if j < 2 else 5}."

    member = ScriptedChatModel(respond=respond)
    pool = ModelPool.from_chat_models({"other": ScriptedChatModel(responses=["The answer is 1."]), "m": member})
    shared = {"m": [{"model": "m", "text": "The answer is 5.", "call_id": f"c{i}", "sample_index": i, "seed": 1,
                     "prompt_tokens": 1, "completion_tokens": 2, "latency_s": 0.1, "finish_reason": "stop",
                     "answer": "5", "how": "marker"} for i in range(2)]}
    graph = build_matched_single_graph().compile()
    ctx = MatchedSingleContext(pool, MatchedSingleConfig(member="m", index=1, k_shared=2))
    out = graph.invoke({"question": "What is 3 + 4?", "question_id": "q1", "shared_candidates": shared,
                        "matched_extra": 3, "gold": "7"}, context=ctx)
    result = out["methods"]["matched-single"]
    # own samples: 5, 5 (shared), then 7, 7, 5 (drawn): 5 wins 3 to 2
    assert [d["answer"] for d in out["drawn"]] == ["7", "7", "5"] and [d["sample_index"] for d in out["drawn"]] == [2, 3, 4]
    assert (result["answer"], result["correct"], result["samples"], result["shared_samples"]) == ("5", False, 5, 2)
    base = call_seed(0, "q1", CANDIDATE_SEED, agent=1)  # the shared request's seed: its samples drew from base + 0, 1
    assert [c["seed"] for c in out["calls"]] == [base + 2, base + 3, base + 4]
    assert {(c["node"], c["role"], c["model"]) for c in out["calls"]} == {("matched_draw", "candidate", "m")}
    none = graph.invoke({"question": "What is 3 + 4?", "question_id": "q1", "shared_candidates": shared,
                         "matched_extra": 0}, context=ctx)
    assert none["calls"] == [] and none["methods"]["matched-single"]["samples"] == 2  # nothing to draw
    with pytest.raises(ValueError, match="member must be a non-empty string"):
        MatchedSingleConfig(member=" ")
