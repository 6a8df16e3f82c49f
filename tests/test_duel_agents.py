"""Duel players: reputation (Sparta Eq. 8–9), EXP3 leader and its rewards, matchers, judge parsing.

Every expected value is computed by hand from the formula in protocols.md §2 (constants written
out: tanh(0.5) = 0.46211716, erf(1) = 0.84270079, 0.9^0.1 = 0.98951926).
"""

import math

import numpy as np
import pytest

from agora.agents.exp3 import (
    Exp3Config,
    Exp3Leader,
    annealed,
    exp3_probabilities,
    exp3_update,
    leader_reward,
    r_diff,
    r_pref,
    target_gap,
)
from agora.agents.judge import Judge, JudgeConfig, judge_means, judge_messages, parse_score, position_bias
from agora.agents.matching import (
    MatchConfig,
    Matcher,
    match_target_gap,
    normalised_gaps,
    sparta_opponent_probabilities,
    stackelberg_opponent_probabilities,
)
from agora.models.pool import ModelCallError, ModelPool
from agora.agents.reputation import (
    Reputation,
    ReputationConfig,
    aggregate_score,
    confidence_factor,
    deviation,
    k_factor,
    rating_delta,
)
from agora.models.testing import ScriptedChatModel

TANH_HALF = 0.46211715726000974
ERF_ONE = 0.8427007929497149


# ----------------------------------------------------------------------------- reputation


def test_aggregate_score_is_reputation_weighted():
    # (120·8 + 80·4) / 200 = 6.4
    assert aggregate_score({"j1": 8.0, "j2": 4.0}, {"j1": 120.0, "j2": 80.0, "other": 1e6}) == pytest.approx(6.4)
    with pytest.raises(ValueError):
        aggregate_score({}, {"j1": 100.0})


def test_k_factor_decays_to_its_floor():
    assert k_factor(0) == 10.0
    assert k_factor(10) == pytest.approx(9.0)  # 10 · 0.9^(10/10)
    assert k_factor(1) == pytest.approx(10 * 0.98951926)
    assert k_factor(100) == 5.0  # 10 · 0.9^10 = 3.49 < K_min


def test_confidence_factor_and_one_rating_delta():
    assert confidence_factor(100, 100, 0.5, 0.5) == 0.01  # Φ(0) − Φ(0) = 0 → ε
    # z = 1 / sqrt(0.25 + 0.25) = √2, Φ(√2) − Φ(−√2) = erf(1)
    assert confidence_factor(101, 100, 0.5, 0.5) == pytest.approx(ERF_ONE)
    # (K/λ)(s_i − s_j) tanh(σ_i) · factor = (10/20) · 4 · tanh(0.5) · erf(1)
    assert rating_delta(101, 100, 0.5, 0.5, 8.0, 4.0, k=10.0) == pytest.approx(0.5 * 4 * TANH_HALF * ERF_ONE)
    assert rating_delta(100, 101, 0.5, 0.5, 4.0, 8.0, k=10.0) == pytest.approx(-0.5 * 4 * TANH_HALF * ERF_ONE)


def test_deviation_window_floor_and_initial():
    assert deviation([]) == 0.5 and deviation([3.0]) == 0.5  # fewer than two deltas: initial σ
    assert deviation([1.0, 3.0]) == pytest.approx(1.0)  # population std
    assert deviation([0.01, 0.02]) == 0.1  # std 0.005, floored
    cfg = ReputationConfig(window=2)
    assert deviation([100.0, 1.0, 3.0], cfg) == pytest.approx(1.0)  # only the last W


def test_reputation_update_first_duel_by_hand():
    rep = Reputation()
    d_i, d_j = rep.update("a", "b", 8.0, 4.0)
    # n = 1: K = 10 · 0.9^0.1; equal ratings: factor ε = 0.01; σ = 0.5 for both
    expected = (10 * 0.98951926 / 20) * 4 * TANH_HALF * 0.01
    assert d_i == pytest.approx(expected, rel=1e-7) and d_j == pytest.approx(-expected, rel=1e-7)
    assert rep.rating("a") == pytest.approx(100 + expected, rel=1e-9)
    assert rep.rating("b") == pytest.approx(100 - expected, rel=1e-9)
    assert rep.updates == 1 and rep.rating("newcomer") == 100.0


def test_reputation_floor_tie_and_state_round_trip():
    rep = Reputation(state={"ratings": {"a": 10.2, "b": 400.0}, "deltas": {"a": [-5.0, -4.0]}, "updates": 0})
    d_a, _ = rep.update("a", "b", 1.0, 10.0)
    assert rep.rating("a") == 10.0 and d_a == pytest.approx(-0.2)  # floored; the applied change is recorded
    before = rep.state()
    assert rep.update("a", "b", 6.0, 6.0) == (0.0, 0.0)  # a tie moves nobody but counts as an update
    assert rep.updates == 2 and rep.state()["deltas"]["a"] == [-5.0, -4.0, pytest.approx(-0.2), 0.0]
    again = Reputation(state=before)
    assert again.state() == before and again.sigma("a") == rep_sigma_of([-5.0, -4.0, before["deltas"]["a"][-1]])
    with pytest.raises(ValueError):
        rep.update("a", "a", 1.0, 2.0)


def rep_sigma_of(deltas):
    return max(0.1, float(np.std(deltas)))


@pytest.mark.parametrize("kwargs", [{"k0": 0}, {"alpha": 1.5}, {"window": 1}, {"floor": -1}, {"lam": 0}])
def test_reputation_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ReputationConfig(**kwargs)


# ----------------------------------------------------------------------------- leader


def test_exp3_probabilities_by_hand():
    # w = [0.75, 0.25], γ = 0.2, K = 2: p = 0.8·w + 0.1
    p = exp3_probabilities(np.log([3.0, 1.0]), 0.2)
    assert p == pytest.approx([0.7, 0.3])
    assert exp3_probabilities(np.zeros(4), 0.2) == pytest.approx([0.25] * 4)


def test_exp3_update_by_hand():
    # uniform over 2, k = 0, r = 0.5, p = 0.5, η = 0.5: log w_0 += 0.5 → w_0 = e^0.5 / (e^0.5 + 1)
    new = exp3_update(np.log([0.5, 0.5]), 0, 0.5, 0.5, 0.5)
    assert np.exp(new) == pytest.approx([0.62245933, 0.37754067])
    assert np.exp(new).sum() == pytest.approx(1.0)


def test_schedules():
    assert target_gap(0, 8) == pytest.approx(0.6) and target_gap(7, 8) == pytest.approx(0.15)
    assert target_gap(1, 3) == pytest.approx(0.375)  # 0.15 + 0.45 · (1 − 1/2)
    assert annealed(0, 1, 0.6, 0.15) == 0.6  # one iteration: the start value
    assert match_target_gap(0, 8) == 1.0 and match_target_gap(7, 8) == 0.0 and match_target_gap(2, 5) == 0.5
    with pytest.raises(ValueError):
        target_gap(8, 8)


def test_r_diff_at_known_points():
    assert r_diff(10.0) == 0.0
    assert r_diff(3.0) == 1.0  # (10 − 3) / (10 − 3)
    assert r_diff(6.5) == pytest.approx(0.5)
    assert r_diff(2.9) == 0.0  # below τ_th


def test_r_pref_and_leader_reward_at_known_points():
    assert r_pref(8.0, 2.6, 0.6) == pytest.approx(1.0)  # gap 5.4 / 9 = 0.6 = g*
    assert r_pref(5.0, 5.0, 0.15) == pytest.approx(math.exp(-0.5))  # (0 − 0.15)² / (2 · 0.15²)
    # r_diff(8) = 2/7, r_diff(5) = 5/7; gap 3/9 = g* → r_pref = 1: ½ (0.3 · 1 + 2 · 0.7 · 1) = 0.85
    assert leader_reward(8.0, 5.0, 1 / 3) == pytest.approx(0.85)


def test_leader_uniform_first_iteration_eta_and_sparse_state():
    leader = Exp3Leader(["q0", "q1", "q2", "q3"])
    assert leader.eta == 0.25  # 1/K
    leader.update(2, 1.0, 0.25)  # log w_2 += 0.25 · 1 / 0.25 = 1
    w = np.exp(leader.log_weights)
    assert w == pytest.approx(np.array([1, 1, math.e, 1]) / (3 + math.e))
    assert leader.probabilities(0) == pytest.approx([0.25] * 4)  # iteration 0 samples uniformly
    assert leader.probabilities(1) == pytest.approx(0.8 * w + 0.05)
    state = leader.state()
    assert set(state["log_w"]) == {"q2"} and state["log_w_rest"] == pytest.approx(math.log(1 / (3 + math.e)))
    again = Exp3Leader(leader.ids, state=state)
    assert np.array_equal(again.log_weights, leader.log_weights)
    assert Exp3Leader(["a", "b"], Exp3Config(eta=0.05)).eta == 0.05
    with pytest.raises(ValueError):
        Exp3Leader(["a"], state={"log_w_rest": 0.0, "log_w": {"zzz": 1.0}})


@pytest.mark.parametrize("kwargs", [{"gamma": 1.5}, {"eta": 0.0}, {"eta": math.inf}, {"tau_th": 11.0}, {"sigma_r": 0}])
def test_exp3_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Exp3Config(**kwargs)


# ----------------------------------------------------------------------------- matching


RATINGS = {"a": 100.0, "b": 101.0, "c": 103.0, "d": 110.0, "e": 90.0}


def test_sparta_opponent_probabilities_by_hand():
    p = sparta_opponent_probabilities("a", RATINGS)
    # distances b 1, c 3, d 10, e 10: closest 3 = b, c, d (tie with e broken by pool order)
    assert p == pytest.approx({"b": 0.05 + 0.8 / 3, "c": 0.05 + 0.8 / 3, "d": 0.05 + 0.8 / 3, "e": 0.05})
    assert sum(p.values()) == pytest.approx(1.0)


def test_stackelberg_opponent_probabilities_by_hand():
    ratings = {"a": 100.0, "b": 101.0, "c": 103.0, "d": 110.0}
    assert normalised_gaps("a", ratings) == pytest.approx({"b": 0.1, "c": 0.3, "d": 1.0})
    # g* = 0: κ = exp(−ĝ²/(2·0.15²)) = exp(−0.2222), exp(−2), exp(−22.2)
    kb, kc, kd = math.exp(-0.01 / 0.045), math.exp(-2.0), math.exp(-1 / 0.045)
    total = kb + kc + kd
    near = stackelberg_opponent_probabilities("a", ratings, 0.0)
    assert near == pytest.approx({m: 0.2 / 3 + 0.8 * k / total for m, k in zip("bcd", (kb, kc, kd))})
    assert near["b"] == pytest.approx(0.75100447)
    far = stackelberg_opponent_probabilities("a", ratings, 1.0)
    assert far["d"] == pytest.approx(0.2 / 3 + 0.8 / (1 + math.exp(-0.49 / 0.045) + math.exp(-0.81 / 0.045)))
    # all equal: every opponent has ĝ = 0, so the draw is uniform
    assert stackelberg_opponent_probabilities("a", dict.fromkeys("abc", 100.0), 1.0) == pytest.approx(
        {"b": 0.5, "c": 0.5})


def test_matcher_round_robin_and_draw_frequencies():
    models = list(RATINGS)
    stack = Matcher("stackelberg")
    rng = np.random.default_rng(0)
    assert [stack.pick(models, RATINGS, duel_number=n, iteration=0, iterations=2, rng=rng)["active"]
            for n in range(7)] == ["a", "b", "c", "d", "e", "a", "b"]
    sparta = Matcher("sparta", MatchConfig(p_rand=0.2))
    draws = [sparta.pick(models, RATINGS, duel_number=0, iteration=0, iterations=1, rng=rng) for _ in range(4000)]
    from_a = [d["opponent"] for d in draws if d["active"] == "a"]
    assert 600 < len(from_a) < 1000  # active model uniform: 800 expected
    assert from_a.count("e") / len(from_a) == pytest.approx(0.05, abs=0.03)
    assert all(d["opponent"] != d["active"] for d in draws)
    with pytest.raises(ValueError):
        Matcher("elo")


# ----------------------------------------------------------------------------- judge


@pytest.mark.parametrize("reply, expected", [
    ('{"score": 8}', (8.0, True)),
    ('Sure! {"score": 7.5} is my verdict', (7.5, True)),
    ('{"score": "9"}', (9.0, True)),
    ('{"score": 7', (7.0, True)),  # unclosed object
    ("Score: 6", (6.0, True)),
    ("7", (7.0, True)),
    ("8/10", (8.0, True)),
    ('{"score": 11}', (5.0, False)),  # out of range
    ('{"score": 0}', (5.0, False)),
    ("12", (5.0, False)),
    ('{"score": true}', (5.0, False)),
    ("The answer is 4.", (5.0, False)),
    ("garbage", (5.0, False)),
    ("", (5.0, False)),
])
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


def test_a_judge_reply_of_a_runaway_number_is_unparsed_not_a_crash():
    """A small judge that repeats a digit until its token cap: a JSON number past a float's range
    (OverflowError) or past the digits json reads (ValueError) is no score: the fallback, unparsed;
    a valid score later in the reply still counts."""
    for digits in (400, 5000):
        runaway = "9" * digits
        assert parse_score('{"score": ' + runaway + "}") == (5.0, False)
        assert parse_score('{"score": ' + runaway + '} then {"score": 7}') == (7.0, True)
        assert parse_score('{"score": "' + runaway + '"}') == (5.0, False)


def test_judge_messages_shots_and_presentation():
    single = judge_messages("Q?", ["ans"], 0, JudgeConfig(shots=0))
    assert [m["role"] for m in single] == ["system", "user"]
    assert "Response to be evaluated: ans" in single[1]["content"]
    shots = judge_messages("Q?", ["ans"], 0, JudgeConfig(shots=2))
    assert [m["content"] for m in shots if m["role"] == "assistant"] == ['{"score": 2}', '{"score": 9}']
    pair = judge_messages("Q?", ["first", "second"], 1, JudgeConfig(shots=0))
    assert "Response A: first" in pair[1]["content"] and "Rate Response B only" in pair[1]["content"]


def _position_loving_judge():
    """Scores 7 the answer it is asked about when shown first (A), 6 when shown second."""
    def respond(messages, i):
        last = messages[-1]["content"]
        if "Rate Response" not in last:
            return '{"score": 5}'
        return '{"score": 7}' if "Rate Response A" in last else '{"score": 6}'
    return ScriptedChatModel(respond=respond)


def test_judge_scores_both_answers_with_partner_and_position_bias():
    pool = ModelPool.from_chat_models({"j": _position_loving_judge()})
    single, records = Judge(pool, "j", JudgeConfig()).score("Q?", [("a", "x"), ("b", "y")],
                                                            context={"question_id": "d1"})
    assert [(j["target"], j["slot"], j["position"], j["score"]) for j in single] == [("a", 0, None, 5.0),
                                                                                     ("b", 1, None, 5.0)]
    assert [(r["role"], r["partner"], r["question_id"]) for r in records] == [("judge", "a", "d1"),
                                                                              ("judge", "b", "d1")]
    both, records = Judge(pool, "j", JudgeConfig(presentation="both_orders")).score("Q?", [("a", "x"), ("b", "y")])
    assert len(both) == 4 and {r["partner"] for r in records} == {"a,b", "b,a"}
    assert position_bias(both) == pytest.approx(1.0)  # 7 when first, 6 when second
    assert judge_means(both) == [{"j": 6.5}, {"j": 6.5}]
    assert position_bias(single) is None


def test_judge_without_reply_raises():
    pool = ModelPool.from_chat_models({"dead": ScriptedChatModel(fail_times=5)}, max_retries=0)
    with pytest.raises(ModelCallError) as err:
        Judge(pool, "dead").score("Q?", [("a", "x"), ("b", "y")])
    assert err.value.records and err.value.records[0]["error"]


@pytest.mark.parametrize("kwargs", [{"shots": 3}, {"presentation": "both"}, {"fallback": 11.0}])
def test_judge_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        JudgeConfig(**kwargs)
