"""COMED: decide rule, escalation vote, rescue–harm identity, calibration, and the graph with
scripted fake models (every branch reached with hand-set SC and margins)."""

import itertools
import json
import re

import pytest
from typer.testing import CliRunner

from agora.agents.escalation import (
    EscalationConfig,
    EscalationThresholds,
    check_pool,
    decide,
    decision_grid,
    escalation_vote,
)
from agora.agents.escalation_records import comed_detail
from agora.agents.escalation_calibration import (
    DevOutcome,
    calibrate,
    calibration_objective,
    candidate_thresholds,
    load_thresholds,
    rescue_harm,
    score_policy,
    ThresholdsFile,
    write_thresholds,
)
from agora.models.pool import ModelPool
from agora.agents.router import KNNRouter, RouterExample
from agora.models.testing import ScriptedChatModel
import agora.cli.comed as comed_cli
from agora.cli.main import app
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.runner import run_problems
from agora.tasks.problem import Problem
from agora.traces.bench_data import comed_dev_outcomes
from agora.traces.comed import calibrate_run, comed_summary
from agora.traces.store import TraceStore

T = EscalationThresholds(tau_hi=0.67, tau_lo=0.34, m_min=0.2)
MC = {"question": "Which?\nA. w\nB. x\nC. y\nD. z", "gold": "A", "kind": "mc", "n_choices": 4, "question_id": "q1"}


# ---------------------------------------------------------------------------- settings


@pytest.mark.parametrize("kwargs, field", [
    ({"tau_hi": 0.3, "tau_lo": 0.5}, "tau_lo"),
    ({"tau_hi": 1.2}, "tau_hi"),
    ({"m_min": -0.1}, "m_min"),
])
def test_thresholds_refuse_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"EscalationThresholds.{field}"):
        EscalationThresholds(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"n_anchor": -2}, "n_anchor"), ({"n_anchor": 0}, "n_anchor"), ({"debate_rounds": 0}, "debate_rounds"),
    ({"baselines": ("moa", "vote")}, "baselines"), ({"top_p": 0.0}, "top_p"),
])
def test_config_refuses_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"EscalationConfig.{field}"):
        EscalationConfig(**kwargs)


# ---------------------------------------------------------------------------- rules


@pytest.mark.parametrize("sc, margin, expected", [
    (1.0, None, "accept"), (0.67, None, "accept"), (1.0, 0.2, "accept"),
    (1.0, 0.1, "verify"),  # confident anchor, but the router is unsure
    (0.5, None, "verify"), (0.34, 0.9, "verify"),
    (0.33, None, "escalate"), (0.0, 1.0, "escalate"),
])
def test_decide_rule(sc, margin, expected):
    assert decide(sc, margin, T) == expected


def test_default_thresholds_split_the_three_sample_grid_three_ways():
    # N = 3: SC is k/3. τ_hi = 0.67 is above 2/3 and τ_lo = 0.34 above 1/3, so a unanimous anchor is
    # accepted, a 2-of-3 majority is verified and no majority (or no answer at all) escalates
    defaults = EscalationThresholds()
    assert [decide(k / 3, None, defaults) for k in (3, 2, 1, 0)] == ["accept", "verify", "escalate", "escalate"]
    assert decision_grid(3, defaults) == [(3, "accept"), (2, "verify"), (1, "escalate"), (0, "escalate")]
    # thresholds on the grid points themselves: SC >= 2/3 accepts, SC = 1/3 is not < 1/3, so it verifies
    assert decision_grid(3, EscalationThresholds(2 / 3, 1 / 3)) == [(3, "accept"), (2, "accept"), (1, "verify"),
                                                                     (0, "escalate")]
    # N = 5 with the defaults: 4/5 = 0.8 accepts, 3/5 and 2/5 verify, 1/5 escalates
    assert [d for _, d in decision_grid(5, defaults)] == ["accept", "accept", "verify", "verify", "escalate", "escalate"]
    with pytest.raises(ValueError, match="n_anchor must be an integer >= 1, got 0"):
        decision_grid(0, defaults)


def test_escalation_vote_weights_anchor_by_sc_and_breaks_ties_to_the_anchor():
    assert escalation_vote("A", 1 / 3, ["B"]) == "B"
    assert escalation_vote("A", 2 / 3, ["B", "A"]) == "A"  # A: 2/3 + 1, B: 1
    assert escalation_vote("A", 1.0, ["B"]) == "A"  # tie 1 vs 1 -> anchor
    assert escalation_vote(None, 0.0, ["C", "B", "B"]) == "B"
    assert escalation_vote("A", 0.5, [None]) == "A"
    assert escalation_vote(None, 0.0, [None]) is None


def test_rescue_harm_identity_on_constructed_outcomes():
    anchor = [1, 0, 1, 0, 1, 0]
    final = [1, 1, 0, 0, 1, 0]
    escalated = [0, 1, 1, 1, 1, 0]  # q1 rescued, q2 harmed, q3 stays wrong, q4 stays right
    rh = rescue_harm(anchor, final, escalated)
    assert (rh.rescues, rh.harms, rh.escalated, rh.anchor_correct, rh.final_correct) == (1, 1, 4, 3, 3)
    assert rh.gain == 0.0
    rh2 = rescue_harm([0, 0, 1], [1, 1, 1], [1, 1, 0])
    assert (rh2.rescues, rh2.harms) == (2, 0) and rh2.gain == pytest.approx(2 / 3)


def test_rescue_harm_refuses_a_change_without_escalation():
    with pytest.raises(ValueError, match="question 1 was not escalated"):
        rescue_harm([1, 0], [1, 1], [0, 0])


# ---------------------------------------------------------------------------- calibration


def dev(sc, anchor_ok, probe_agrees, esc_ok, margin=None):
    return DevOutcome(sc=sc, margin=margin, anchor_correct=anchor_ok, probe_agrees=probe_agrees,
                      escalation_correct=esc_ok, probe_calls=1, escalation_calls=2)


DEV = [dev(1.0, True, True, True, 0.5), dev(1.0, False, False, True, 0.05), dev(2 / 3, True, True, False, 0.3),
       dev(2 / 3, False, False, True, 0.1), dev(1 / 3, False, False, True, 0.0), dev(1 / 3, True, False, False, 0.4),
       dev(2 / 3, True, False, True, 0.6)]


def test_calibration_objective_and_policy_score_hand_computed():
    assert calibration_objective(3, 1, 10, 20, 0.01) == pytest.approx(0.095)
    # defaults τ_hi .67, τ_lo .34, m_min 0: q0,q1 accept; q2,q3,q6 verify (q3,q6 disagree -> escalate);
    # q4,q5 escalate. rescues: q3, q4; harms: q5. extra calls: 3 probes + 4 escalations * 2 = 11
    s = score_policy(DEV, EscalationThresholds(), lam=0.01)
    assert (s.rescues, s.harms, s.extra_calls) == (2, 1, 11)
    assert s.objective == pytest.approx((2 - 1 - 0.11) / 7)
    assert s.calls_per_question == pytest.approx((7 + 11) / 7)  # one anchor request per question + extras


def test_calibration_picks_what_a_brute_force_grid_picks():
    lam = 0.01
    grid = [i / 20 for i in range(21)] + [1 / 3, 2 / 3]
    brute = max(score_policy(DEV, EscalationThresholds(hi, lo, m), lam).objective
                for lo, hi, m in itertools.product(grid, grid, grid) if lo <= hi)
    best = calibrate(DEV, lam)
    assert best.objective == pytest.approx(brute)
    # the optimum here: rescue q1 (m_min above .05 sends it to verify), q3 and q4, and keep q5 and q2
    assert (best.rescues, best.harms) == (3, 0)
    assert score_policy(DEV, best.thresholds, lam) == best
    assert all(t.tau_lo <= t.tau_hi for t in candidate_thresholds(DEV))


def test_candidates_sit_between_observed_values():
    # SC observed on the N = 3 grid: cuts at 0 and halfway between 0, 1/3, 2/3, 1; margins likewise
    candidates = candidate_thresholds(DEV)
    assert sorted({t.tau_hi for t in candidates}) == pytest.approx([0, 1 / 6, 1 / 2, 5 / 6])
    assert sorted({t.m_min for t in candidates}) == pytest.approx(
        [0, 0.025, 0.075, 0.2, 0.35, 0.45, 0.55, 0.8])  # observed 0 .05 .1 .3 .4 .5 .6, and 1
    assert {t.m_min for t in candidate_thresholds([dev(1.0, True, True, True)])} == {0.0}  # no router
    # τ_hi = 1/2 accepts SC 2/3 however 2/3 was rounded; τ_hi = 5/6 only SC 1
    assert decide(0.6666666666666665, None, EscalationThresholds(0.5, 1 / 6)) == "accept"
    assert decide(2 / 3, None, EscalationThresholds(5 / 6, 1 / 6)) == "verify"


def test_calibration_charges_cost():
    # one rescue that needs an escalation costing 2 calls: worth it at λ=0.1, not at λ=0.6
    outcomes = [dev(1 / 3, False, False, True), dev(1.0, True, True, True)]
    assert calibrate(outcomes, 0.1).rescues == 1
    expensive = calibrate(outcomes, 0.6)
    assert (expensive.rescues, expensive.extra_calls, expensive.objective) == (0, 0, 0.0)
    with pytest.raises(ValueError, match="no dev outcomes"):
        calibrate([], 0.1)


def test_calibration_budget_keeps_only_affordable_thresholds():
    free = calibrate(DEV, 0.01)
    assert (free.rescues, free.harms) == (3, 0) and free.calls_per_question > 2.0
    # at most 2 calls per question = 7 extra calls over 7 questions. Hand-checked: verifying the SC 2/3
    # questions (7 calls) forces the SC 1/3 ones to verify or escalate too; escalating SC 1/3 rescues q4
    # but harms q5. The best fit accepts every SC and verifies the low-margin q1 (M .05) and q4 (M 0)
    # with m_min between .05 and .1: both probes disagree, both escalations rescue: 2 rescues for 6 extra calls
    budget = calibrate(DEV, 0.01, max_calls=2.0)
    assert (budget.thresholds.tau_hi, budget.thresholds.tau_lo, budget.thresholds.m_min) == (0.0, 0.0, pytest.approx(0.075))
    assert (budget.rescues, budget.harms, budget.extra_calls) == (2, 0, 6)
    assert budget.calls_per_question == pytest.approx(13 / 7)
    feasible = [score_policy(DEV, t, 0.01) for t in candidate_thresholds(DEV)]
    assert budget.objective == max(p.objective for p in feasible if p.calls_per_question <= 2.0)
    # at 1.5 calls per question (3 extra) only q4's probe and escalation fit (m_min between 0 and .05)
    tight = calibrate(DEV, 0.01, max_calls=1.5)
    assert (tight.thresholds.m_min, tight.rescues, tight.harms, tight.extra_calls) == (pytest.approx(0.025), 1, 0, 3)
    assert calibrate(DEV, 0.01, max_calls=1.0).calls_per_question == 1.0  # anchor only always fits
    with pytest.raises(ValueError, match="below the anchor's own 1.00 model calls per question"):
        calibrate(DEV, 0.01, max_calls=0.9)


def test_thresholds_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "t.toml"
    best = calibrate(DEV, 0.01)
    write_thresholds(path, best, n_anchor=3, lam=0.01, source="dev")
    assert load_thresholds(path) == ThresholdsFile(best.thresholds, 3)
    assert "[comed]" in path.read_text() and "n_anchor = 3" in path.read_text()
    (tmp_path / "hand.toml").write_text("[comed]\ntau_hi = 0.9\n")
    assert load_thresholds(tmp_path / "hand.toml") == ThresholdsFile(EscalationThresholds(tau_hi=0.9), None)
    (tmp_path / "neg.toml").write_text("[comed]\nn_anchor = -2\n")
    with pytest.raises(ValueError, match=r"neg.toml: \[comed\] field 'n_anchor' must be an integer >= 1, got -2"):
        load_thresholds(tmp_path / "neg.toml")
    (tmp_path / "bad.toml").write_text("[comed]\ntau_hi = 0.2\ntau_lo = 0.5\n")
    with pytest.raises(ValueError, match=r"bad.toml: EscalationThresholds.tau_lo \(0.5\) must be <= tau_hi"):
        load_thresholds(tmp_path / "bad.toml")
    (tmp_path / "typo.toml").write_text("[comed]\ntau_high = 0.2\n")
    with pytest.raises(ValueError, match="field 'tau_high': unknown"):
        load_thresholds(tmp_path / "typo.toml")


# ---------------------------------------------------------------------------- graph


def answers(*letters):
    return [f"The answer is {x}." for x in letters]


def pool_of(a, b):
    models = {"a": ScriptedChatModel(responses=answers(*a)), "b": ScriptedChatModel(responses=answers(*b))}
    return ModelPool.from_chat_models(models), models


def run(pool, router=None, **cfg):
    cfg = {"baselines": (), "thresholds": T, **cfg}
    graph = build_escalation_graph().compile()
    return graph.invoke(MC, context=EscalationContext(pool, EscalationConfig(**cfg), router))


def test_accept_branch_keeps_the_anchor_and_asks_nobody_else():
    pool, models = pool_of("AAA", "")
    out = run(pool)
    assert (out["decision"], out["outcome"], out["answer"]) == ("accept", "accept", "A")
    assert out["anchor"]["sc"] == 1.0 and models["b"].calls == []
    assert {k: out["methods"]["comed"][k] for k in ("calls", "samples", "correct")} == {"calls": 1, "samples": 3, "correct": True}
    assert "router_only" not in out["methods"]  # fixed anchor: no router


def test_verify_branch_probe_agrees():
    pool, models = pool_of("ABA", "A")
    out = run(pool, thresholds=EscalationThresholds(0.9, 0.34))
    assert (out["decision"], out["outcome"], out["answer"]) == ("verify", "verify_accept", "A")
    assert out["probe"] == {"model": "b", "answer": "A", "agrees": True}
    assert models["b"].calls[0]["temperature"] == 0.0 and models["b"].calls[0]["max_tokens"] == 64
    assert out["methods"]["comed"]["calls"] == 2 and out["methods"]["anchor"]["calls"] == 1


def test_verify_branch_probe_disagrees_then_escalates():
    pool, models = pool_of("ABA", "CC")  # probe C, then the peer (seeing A) says C: C (1) beats A (2/3)
    out = run(pool, thresholds=EscalationThresholds(0.9, 0.34))
    assert (out["decision"], out["outcome"], out["answer"]) == ("verify", "verify_escalate", "C")
    assert out["escalation"] == {"peers": [{"model": "b", "answer": "C", "how": "marker"}], "answer": "C", "how": "marker"}
    assert "The answer is A." in models["b"].calls[1]["messages"][-1]["content"]  # the peer saw the anchor
    assert out["methods"]["comed"]["calls"] == 3 and out["methods"]["comed"]["correct"] is False
    assert out["methods"]["anchor"]["correct"] is True


def test_escalate_branch_on_low_sc():
    pool, models = pool_of("BCD", "A")
    out = run(pool)
    assert out["anchor"]["sc"] == pytest.approx(1 / 3)
    assert (out["decision"], out["outcome"], out["answer"]) == ("escalate", "escalate", "A")
    assert len(models["b"].calls) == 1  # no probe, one peer answer
    assert out["methods"]["comed"]["correct"] is True and out["methods"]["anchor"]["correct"] is False


def toy_router():
    history = [RouterExample("apples and pears in a basket", "a", 1.0), RouterExample("apples and pears in a basket", "b", 0.0),
               RouterExample("integrals of smooth functions", "a", 0.0), RouterExample("integrals of smooth functions", "b", 1.0)]
    return KNNRouter(history, ["a", "b"], k=1, embedding="tfidf")


def test_router_margin_gates_accept_and_router_only_is_reported():
    question = {**MC, "question": "Integrals of smooth functions?\nA. 1\nB. 2\nC. 3\nD. 4", "gold": "B"}
    graph = build_escalation_graph().compile()
    # the router puts b first with margin 1 - 0 = 1: SC 1 and M >= m_min -> accept
    pool, models = pool_of("", "BBB")
    cfg = EscalationConfig(baselines=(), thresholds=EscalationThresholds(0.67, 0.34, m_min=1.0))
    out = graph.invoke(question, context=EscalationContext(pool, cfg, toy_router()))
    assert out["route"]["anchor"] == "b" and out["route"]["probe"] == "a" and out["route"]["margin"] == 1.0
    assert out["decision"] == "accept" and models["a"].calls == []
    assert out["methods"]["router_only"] == {"answer": "B", "correct": True, "calls": 1, "samples": 1,
                                             "completion_tokens": 4, "latency_s": 0.0, "how": "marker"}
    # same SC, but demand a larger margin than the router's: verify, with the runner-up as probe
    pool2, models2 = pool_of("B", "BBB")
    router2 = KNNRouter([RouterExample("integrals of smooth functions", "a", 0.5),
                         RouterExample("integrals of smooth functions", "b", 1.0)], ["a", "b"], k=1, embedding="tfidf")
    out2 = graph.invoke(question, context=EscalationContext(pool2, cfg, router2))
    assert out2["route"]["margin"] == 0.5 and out2["decision"] == "verify" and out2["outcome"] == "verify_accept"
    assert len(models2["a"].calls) == 1


def test_explore_mode_runs_every_branch_but_counts_only_the_decision():
    pool, models = pool_of("AAA", "BC")
    out = run(pool, explore=True)
    assert out["decision"] == "accept" and out["answer"] == "A"
    assert out["probe"]["answer"] == "B" and out["escalation"]["answer"] == "A"  # C (1) vs A (1): tie -> anchor
    assert out["methods"]["comed"]["calls"] == 1
    d = comed_detail(out | {"gold": "A", "kind": "mc"})
    assert (d["probe_calls"], d["escalation_calls"], d["anchor_correct"], d["escalation_correct"]) == (1, 1, True, True)


def respond_by_role(letter_first, letter_later):
    """A fake that answers ``letter_later`` once it has seen other answers, else ``letter_first``."""
    def respond(messages, i):
        shown = "other agents" in messages[-1]["content"] or "Responses from several" in messages[-1]["content"]
        return f"The answer is {letter_later if shown else letter_first}."
    return respond


def test_dense_baselines_count_calls_and_record_partners():
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond_by_role("A", "B")),
                                       "b": ScriptedChatModel(respond=respond_by_role("C", "B"))})
    problem = Problem(id="q1", question=MC["question"], gold="B", kind="mc", n_choices=4)
    store = TraceStore(":memory:")
    run_problems(build_escalation_graph(), [problem], store=store, run_id="r1", protocol="comed",
                 context=EscalationContext(pool, EscalationConfig(thresholds=T)), config={}, pool_description=[],
                 dataset={}, detail=comed_detail)
    res = {r["method"]: r for r in store.results("r1")}
    assert res["comed"]["answer"] == "A" and res["anchor"]["answer"] == "A"  # SC 1: accepted
    assert res["moa"]["answer"] == "B" and res["debate"]["answer"] == "B"
    # MoA: 2 proposers + 1 aggregator; debate: round 1 = a (agents 0, 2 in one request) + b, round 2 = 3 agents
    detail = json.loads(store.questions("r1")[0]["detail"])
    assert detail["method_calls"] == {"comed": 1, "anchor": 1, "moa": 3, "debate": 5}
    assert (res["moa"]["samples"], res["debate"]["samples"]) == (3, 6)
    calls = store.calls("r1")
    partners = sorted((c["node"], c["role"], c["model"], c["partner"]) for c in calls if c["partner"])
    assert partners == [("debate_round", "debater", "a", "a,b"), ("debate_round", "debater", "a", "b,a"),
                        ("debate_round", "debater", "b", "a"), ("moa_aggregate", "aggregator", "a", "a,b")]
    assert {c["role"] for c in calls if not c["partner"]} == {"anchor", "proposer", "debater"}
    summary = comed_summary(store, "r1")
    assert summary.calls_per_question["debate"] == 5 and summary.decisions == {"accept": 1}
    assert (summary.rescue_harm.rescues, summary.rescue_harm.harms) == (0, 0)


def scripted_dev_run() -> TraceStore:
    """A two-question explore (dev) run "dev": q1 anchor B (SC 1/3), a peer (b) says A; q2 anchor A unanimous."""
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(responses=answers("B", "C", "D", "A", "A", "A")),
                                       "b": ScriptedChatModel(responses=answers("X", "A", "X", "C"))})
    problems = [Problem(id=f"q{i}", question=MC["question"], gold="A", kind="mc", n_choices=4) for i in (1, 2)]
    store = TraceStore(":memory:")
    run_problems(build_escalation_graph(), problems, store=store, run_id="dev", protocol="comed",
                 context=EscalationContext(pool, EscalationConfig(thresholds=T, baselines=(), explore=True)),
                 config={}, pool_description=[], dataset={}, detail=comed_detail)
    return store


def test_summary_identity_and_dev_outcomes_from_a_run():
    # q1: anchor B (SC 1/3) escalates to A -> rescue; q2: anchor A accepted
    store = scripted_dev_run()
    outcomes = comed_dev_outcomes(store, "dev")
    assert [(o.sc, o.anchor_correct, o.probe_agrees, o.escalation_correct) for o in outcomes] == [
        (pytest.approx(1 / 3), False, False, True), (1.0, True, False, True)]
    s = comed_summary(store, "dev")
    rh = s.rescue_harm
    assert (rh.n, rh.rescues, rh.harms, rh.anchor_correct, rh.final_correct) == (2, 1, 0, 1, 2)
    assert s.outcomes == {"escalate": 1, "accept": 1}


def test_calibrate_run_scores_the_chosen_thresholds_against_the_defaults():
    # the dev run above: q1 anchor B (SC 1/3) and one peer (b) rescues it; q2 anchor A unanimous
    store = scripted_dev_run()
    c = calibrate_run(store, "dev", lam=0.01)
    assert len(c.outcomes) == 2 and [name for name, _ in c.policies] == ["chosen", "defaults"]
    defaults = dict(c.policies)["defaults"]  # 0.67/0.34: q1 escalates (1 extra call, a rescue), q2 accepted
    assert (defaults.rescues, defaults.harms, defaults.extra_calls) == (1, 0, 1)
    assert defaults.objective == pytest.approx((1 - 0.01 * 1) / 2)
    assert c.chosen == calibrate(c.outcomes, 0.01) and c.chosen.objective >= defaults.objective
    # a budget of the anchor's one call per question leaves only never-escalating thresholds
    budget = calibrate_run(store, "dev", lam=0.01, max_calls=1)
    assert [name for name, _ in budget.policies] == ["chosen", "defaults", "without the budget"]
    assert (budget.chosen.extra_calls, budget.chosen.objective) == (0, 0.0)
    assert dict(budget.policies)["without the budget"] == c.chosen


def test_cli_refuses_bad_thresholds_with_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["run", "comed", "--tau-hi", "0.3", "--tau-lo", "0.6", "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert "tau_lo (0.6) must be <= tau_hi (0.3)" in result.output
    result = runner.invoke(app, ["run", "comed", "--samples", "-2", "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and "n_anchor must be an integer >= 1, got -2" in result.output
    # the same mistakes in a thresholds file: one line naming the file and the field, no traceback
    for text, message in [("tau_hi = 0.3\ntau_lo = 0.6\n", "EscalationThresholds.tau_lo (0.6) must be <= tau_hi (0.3)"),
                          ("n_anchor = -2\n", "[comed] field 'n_anchor' must be an integer >= 1, got -2")]:
        (tmp_path / "bad.toml").write_text("[comed]\n" + text)
        result = runner.invoke(app, ["run", "comed", "--thresholds", str(tmp_path / "bad.toml"), "--db", str(tmp_path / "t.db")])
        assert result.exit_code == 2
        assert message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    # thresholds calibrated for N = 3 are refused with another N
    (tmp_path / "n3.toml").write_text("[comed]\ntau_hi = 0.67\nn_anchor = 3\n")
    result = runner.invoke(app, ["run", "comed", "--thresholds", str(tmp_path / "n3.toml"), "--samples", "5",
                                 "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and "calibrated with n_anchor = 3" in result.output
    result = runner.invoke(app, ["calibrate", "comed", "--data", str(tmp_path / "none.jsonl"), "--max-calls", "0.5",
                                 "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and "--max-calls must be >= 1 (each question costs the anchor's one model call), got 0.5" in result.output


def test_check_pool_names_the_missing_model():
    names = ["a", "b"]
    check_pool(EscalationConfig(anchor="b", probe="a", peers=("a",)), names)
    for cfg, message in [({"anchor": "z"}, "EscalationConfig.anchor: 'z' is not in the pool (a, b)"),
                         ({"peers": ("a", "z")}, "EscalationConfig.peers: 'z' is not in the pool (a, b)"),
                         ({"moa_aggregator": "z"}, "EscalationConfig.moa_aggregator: 'z' is not in the pool")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_pool(EscalationConfig(**cfg), names)
    with pytest.raises(ValueError, match="at least one other model; the pool has only a"):
        check_pool(EscalationConfig(), ["a"])
    for lam in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
            calibrate(DEV, lam)


def write_mc(path, n=2):
    path.write_text("".join(json.dumps({"id": f"m{i}", "question": f"Which {i}?", "answer_idx": "A",
                                        "options": {"A": "w", "B": "x", "C": "y", "D": "z"}}) + "\n" for i in range(n)))
    return path


def test_cli_refuses_before_the_run_starts(tmp_path, monkeypatch):
    """Mistakes in the thresholds file, --lambda, --out or a model name are one-line errors before
    anything runs: no model is called and no trace DB (no `running` run) is left behind."""
    pool, models = pool_of([], [])  # any model call would fail: none may happen
    monkeypatch.setattr(comed_cli, "get_pool", lambda path: pool)
    data, db = write_mc(tmp_path / "dev.jsonl"), tmp_path / "t.db"
    (tmp_path / "other.toml").write_text("[thresholds]\ntau_hi = 0.9\n")
    (tmp_path / "empty.toml").write_text("[comed]\n")
    (tmp_path / "a-file").write_text("")
    runner = CliRunner()
    for args, message in [
        (["run", "comed", "--thresholds", str(tmp_path / "other.toml")],
         "other.toml: no thresholds: expected a [comed] table with m_min, n_anchor, tau_hi, tau_lo"),
        (["run", "comed", "--thresholds", str(tmp_path / "empty.toml")], "empty.toml: no thresholds"),
        (["run", "comed", "--anchor", "nosuch"], "EscalationConfig.anchor: 'nosuch' is not in the pool (a, b)"),
        (["run", "comed", "--probe", "nosuch", "--no-router"], "EscalationConfig.probe: 'nosuch' is not in the pool"),
        (["calibrate", "comed", "--data", str(data), "--anchor", "nosuch"], "EscalationConfig.anchor: 'nosuch'"),
        (["calibrate", "comed", "--data", str(data), "--lambda", "nan"], "error: --lambda: must be a finite number, got nan"),
        (["calibrate", "comed", "--data", str(data), "--lambda", "inf"], "error: --lambda: must be a finite number, got inf"),
        (["calibrate", "comed", "--data", str(data), "--lambda", "-1"], "--lambda must be a finite number >= 0, got -1"),
        (["calibrate", "comed", "--data", str(data), "--out", str(tmp_path / "a-file" / "x.toml")],
         f"--out {tmp_path / 'a-file' / 'x.toml'}: cannot create the folder {tmp_path / 'a-file'}"),
        (["calibrate", "comed", "--data", str(data), "--out", str(tmp_path)], "is a folder; give a file name"),
    ]:
        result = runner.invoke(app, [*args, "--db", str(db)])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not db.exists()
    assert not models["a"].calls and not models["b"].calls


def test_calibrate_creates_the_out_folder(tmp_path, monkeypatch):
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: "The answer is A.")
                                       for m in ("a", "b")})
    monkeypatch.setattr(comed_cli, "get_pool", lambda path: pool)
    out = tmp_path / "new" / "dir" / "t.toml"
    result = CliRunner().invoke(app, ["calibrate", "comed", "--data", str(write_mc(tmp_path / "dev.jsonl")),
                                      "--no-router", "--out", str(out), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 0, result.output
    assert load_thresholds(out).n_anchor == 3


def mmlu_as_medqa(src, dst, rows):
    """MMLU dev rows (choices[], answer index) rewritten in MedQA's format (options{A..}, answer_idx)."""
    lines = src.read_text().splitlines()[:rows]
    out = []
    for i, line in enumerate(lines):
        r = json.loads(line)
        letters = "ABCD"[: len(r["choices"])]
        out.append(json.dumps({"id": f"mmlu-{i}", "question": r["question"], "options": dict(zip(letters, r["choices"])),
                               "answer_idx": letters[r["answer"]]}))
    dst.write_text("\n".join(out) + "\n")


@pytest.mark.slow
def test_end_to_end_on_the_embedded_pool(shared_data, tmp_path):
    data = tmp_path / "medqa.jsonl"
    mmlu_as_medqa(shared_data / "mmlu" / "mmlu_dev.jsonl", data, 3)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, [
        "run", "comed", "--data", str(data), "--samples", "2", "--max-tokens", "16", "--probe-max-tokens", "16",
        "--debate-agents", "2", "--no-router", "--db", str(db), "--run-id", "e2e", "--pool", "tiny"])
    assert result.exit_code == 0, result.output
    assert "identity checked on every question: holds" in result.output
    store = TraceStore(db)
    methods = {r["method"] for r in store.results("e2e")}
    assert methods == {"comed", "anchor", "moa", "debate"}
    summary = comed_summary(store, "e2e")
    assert summary.rescue_harm.n == 3 and sum(summary.decisions.values()) == 3
    assert summary.calls_per_question["moa"] == 3 and summary.calls_per_question["debate"] == 4
    calls = store.calls("e2e")
    assert {c["model"] for c in calls} == {"smollm2-135m", "gemma3-270m"}
    assert any(c["partner"] for c in calls if c["role"] == "debater")


def test_run_comed_takes_settings_from_a_config_file_and_the_command_line_wins(tmp_path, monkeypatch):
    answer = lambda chat, i: "The answer is 4."  # noqa: E731
    monkeypatch.setattr(comed_cli, "get_pool", lambda path: ModelPool.from_chat_models(
        {m: ScriptedChatModel(respond=answer) for m in ("a", "b")}))
    (tmp_path / "comed.toml").write_text("[comed]\nmax_tokens = 32\ndebate_rounds = 1\nshots = 0\nn_anchor = 5\n"
                                         "baselines = []\n[comed.thresholds]\ntau_hi = 0.5\ntau_lo = 0.2\n")
    db = tmp_path / "t.db"

    def config(*extra):
        rid = f"r{len(extra)}"
        result = CliRunner().invoke(app, ["run", "comed", "--limit", "1", "--no-router", "--db", str(db),
                                          "--run-id", rid, "--config", str(tmp_path / "comed.toml"), *extra])
        assert result.exit_code == 0, result.output
        return json.loads(TraceStore(db).get_run(rid)["config"])

    c = config()
    assert (c["max_tokens"], c["debate_rounds"], c["shots"], c["n_anchor"], c["baselines"]) == (32, 1, 0, 5, [])
    assert (c["thresholds"]["tau_hi"], c["thresholds"]["tau_lo"]) == (0.5, 0.2)
    c = config("--max-tokens", "16", "--samples", "3", "--tau-hi", "0.9")
    assert (c["max_tokens"], c["n_anchor"], c["debate_rounds"]) == (16, 3, 1)  # typed options win, the rest from the file
    assert (c["thresholds"]["tau_hi"], c["thresholds"]["tau_lo"]) == (0.9, 0.34)  # --tau-hi replaces the file's thresholds
    (tmp_path / "comed.toml").write_text("[comed]\nmax_tokns = 3\n")
    result = CliRunner().invoke(app, ["run", "comed", "--db", str(db), "--config", str(tmp_path / "comed.toml")])
    assert result.exit_code == 2 and "[comed] EscalationConfig: unknown field(s) max_tokns" in result.output
