"""SLM-MUX (agents/slm_mux.py, graphs/slm_mux.py) and ALIGN's calibrated utility
(agents/delegation.py): the rules against hand-computed values, a scripted pool where selection is
right and the vote over every sample is wrong, the graph end to end recorded in a trace DB, the CLI
through the registry, and reliabilities read from a dev run."""

from __future__ import annotations

import json

import pytest

from agora.agents.delegation import (
    DelegationConfig,
    agreement_utility,
    best_of_n,
    calibrated_utility,
    principal_utility,
)
from agora.agents.reliability import dev_accuracy_pairs
from agora.agents.slm_mux import SLMMuxConfig, member_confidence, mux_select, top_member, vote_all


def conf(member, model, answer, confidence, acc=None):
    return {"member": member, "model": model, "answer": answer, "confidence": confidence, "dev_accuracy": acc}


# ---------------------------------------------------------------------------- the rules, by hand


def test_member_confidence_is_the_share_of_k_on_the_plurality():
    # f(7) = 2/4, f(8) = 1/4, one sample without an answer still counts in k = 4
    c = member_confidence({"member": 0, "model": "a", "answers": ["7", "8", "7", None]}, {"a": 0.3})
    assert (c["answer"], c["confidence"], c["dev_accuracy"]) == ("7", 0.5, 0.3)
    # no answer at all: s = 0
    assert member_confidence({"member": 1, "model": "b", "answers": [None, None]})["confidence"] == 0.0
    # an answer tie inside one member goes to the answer sampled first
    assert member_confidence({"member": 0, "model": "a", "answers": ["9", "4", "4", "9"]})["answer"] == "9"


def test_mux_select_highest_confidence_then_dev_accuracy_then_order():
    # the paper's worked example: SLM 1 (A, 2/3) and SLM 2 (B, 2/3) tie; SLM 1's validation accuracy is higher
    chosen = mux_select([conf(0, "slm1", "A", 2 / 3, 0.7), conf(1, "slm2", "B", 2 / 3, 0.4), conf(2, "slm3", "A", 1 / 3, 0.9)])
    assert (chosen["model"], chosen["answer"], chosen["tie"]) == ("slm1", "A", True)
    # confidence first: the less accurate member wins with 3/3 against 2/3
    chosen = mux_select([conf(0, "a", "A", 2 / 3, 0.9), conf(1, "b", "B", 1.0, 0.1)])
    assert (chosen["member"], chosen["answer"], chosen["confidence"], chosen["tie"]) == (1, "B", 1.0, False)
    # a measured accuracy beats an unmeasured one; with none measured the earlier member wins
    assert mux_select([conf(0, "a", "A", 0.5), conf(1, "b", "B", 0.5, 0.0)])["model"] == "b"
    assert mux_select([conf(0, "a", "A", 0.5), conf(1, "b", "B", 0.5)])["model"] == "a"
    # a member without answers never wins over one with an answer; none at all: no answer
    assert mux_select([conf(0, "a", None, 0.0, 1.0), conf(1, "b", "B", 1 / 3, 0.1)])["answer"] == "B"
    assert mux_select([conf(0, "a", None, 0.0)])["answer"] is None
    assert mux_select([])["member"] == -1


def test_top_member_and_the_pooled_vote():
    cs = [conf(0, "a", "A", 1.0, 0.2), conf(1, "b", "B", 1 / 3, 0.6)]
    assert top_member(cs)["model"] == "b"
    assert top_member([conf(0, "a", "A", 1.0), conf(1, "b", "B", 1.0)])["model"] == "a"
    votes = [{"member": 1, "model": "b", "answers": ["5", "5", None]}, {"member": 0, "model": "a", "answers": ["7", "5", "7"]}]
    assert vote_all(votes) == ("5", 3 / 6)


def test_settings_are_checked_in_one_line():
    assert SLMMuxConfig(dev_accuracy={"a": 0.5, "b": 1}).dev_accuracy == (("a", 0.5), ("b", 1.0))
    assert SLMMuxConfig(dev_accuracy=("a=0.25", " b = 0.5")).dev_accuracy == (("a", 0.25), ("b", 0.5))
    assert SLMMuxConfig(dev_accuracy=[["a", 0.25]]).dev_accuracy == (("a", 0.25),)
    for bad, said in [({"a": 1.5}, "a's accuracy must be a finite number in [0, 1], got 1.5"),
                      (("a:0.5",), "entry 'a:0.5' is not member=accuracy"),
                      (("a=x",), "'x' is not a number"),
                      (("a=0.1", "a=0.2"), "'a' is given twice"),
                      ({"a": True}, "got True"),
                      ("a=0.5", "must be a mapping")]:
        with pytest.raises(ValueError, match="^SLMMuxConfig.dev_accuracy") as err:
            SLMMuxConfig(dev_accuracy=bad)
        assert said in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="SLMMuxConfig.k_samples must be an integer >= 1, got 0"):
        SLMMuxConfig(k_samples=0)
    with pytest.raises(ValueError, match="SLMMuxConfig.models must be a tuple of non-empty names"):
        SLMMuxConfig(models="ab")
    assert dev_accuracy_pairs("X", "f", {}) == ()


# ---------------------------------------------------------------------------- ALIGN's calibrated utility


def test_calibrated_utility_by_hand():
    props = [{"model": "big", "answer": "4", "signal": 1.0},
             {"model": "small", "answer": "5", "signal": 2 / 3},
             {"model": "mid", "answer": "5", "signal": 1 / 3}]
    r = {"big": 0.6, "small": 0.15, "mid": 0.3}
    # weights r·s: 0.6, 0.1, 0.1 -> U(4) = 0.6/0.8 = 0.75, U(5) = 0.2/0.8 = 0.25
    assert calibrated_utility(["4", "5", None, "9"], props, r) == pytest.approx([0.75, 0.25, 0.0, 0.0])
    # unweighted agreement on the same proposals: U(4) = 1/2, U(5) = 1/2
    assert agreement_utility(["4", "5"], props) == pytest.approx([0.5, 0.5])
    # equal reliabilities give the agreement utility back
    assert calibrated_utility(["4", "5"], props, {m: 0.4 for m in r}) == pytest.approx([0.5, 0.5])
    assert calibrated_utility(["4"], props, {m: 0.0 for m in r}) == [0.0]
    assert principal_utility("agreement", ["4"], props) == pytest.approx([0.5])
    with pytest.raises(KeyError, match="no dev accuracy for member\\(s\\) mid"):
        calibrated_utility(["4"], props, {"big": 0.6, "small": 0.1})


def test_best_of_n_takes_the_configured_utility():
    cands = [{"agent": 0, "index": 0, "answer": "5"}, {"agent": 1, "index": 0, "answer": "4"}]
    props = [{"model": "small", "answer": "5", "signal": 1.0}, {"model": "big", "answer": "4", "signal": 0.5}]
    assert best_of_n(cands, props)[0] == "5"  # U(5) = 2/3 unweighted
    answer, u = best_of_n(cands, props, "calibrated", {"small": 0.1, "big": 0.8})  # 0.4 / 0.5 for 4
    assert (answer, u) == ("4", pytest.approx(0.8))


def test_delegation_config_names_and_checks_the_utility():
    cfg = DelegationConfig(utility="calibrated", dev_accuracy=("a=0.5",))
    assert cfg.dev_accuracy == (("a", 0.5),)
    assert DelegationConfig(utility="calibrated", dev_run="dev").dev_run == "dev"
    with pytest.raises(ValueError, match="DelegationConfig.utility must be 'agreement' or 'calibrated', got 'judge'"):
        DelegationConfig(utility="judge")
    with pytest.raises(ValueError, match="DelegationConfig.utility 'calibrated' needs member reliabilities"):
        DelegationConfig(utility="calibrated")
    with pytest.raises(ValueError, match="DelegationConfig.dev_accuracy: b's accuracy"):
        DelegationConfig(dev_accuracy={"b": -0.1})
