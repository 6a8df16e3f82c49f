"""CUPID pieces against hand-computed values: Laplace update, UCB pair, budgets, P(best), features,
simulated user, baselines, and recovery of a simulated user's best model."""

import numpy as np
import pytest

from agora.agents.cupid import (
    CupidConfig,
    affordable_pairs,
    answer_cost,
    bt_probability,
    laplace_update,
    prior_belief,
    prob_best,
    sigma_norm,
    sigmoid,
    ucb_pair,
)
from agora.agents.cupid_features import (
    ACCURACY_PREFIX,
    feature_table,
    normalize_features,
    parse_theta,
    spec_features,
    trace_features,
)
from agora.agents.cupid_simulation import (CupidPolicy, Persona, RucbPolicy, SimulatedUser, UniformPolicy, duel_regret,
                                           persona_variants, simulate_regret)
from agora.models.pool import ModelPool, ModelSpec, PoolMember, SamplingParams
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore


def test_laplace_update_two_steps_by_hand():
    mu, precision = prior_belief(2, 1.0)
    # step 1: z = (1, 0), y = 1, p = σ(0) = 1/2 -> Σ⁻¹ = diag(1.25, 1), μ = Σ z (1 − 1/2) = (0.4, 0)
    mu, precision = laplace_update(mu, precision, np.array([1.0, 0.0]), 1.0)
    assert mu == pytest.approx([0.4, 0.0])
    assert precision == pytest.approx(np.array([[1.25, 0.0], [0.0, 1.0]]))
    # step 2: z = (1, 1), y = 0, p = σ(0.4) = 0.598687660, w = p(1 − p) = 0.240260746
    # Σ⁻¹ = [[1.25 + w, w], [w, 1 + w]], det = 1.25 + 2.25 w = 1.790586678, Σ z = (1, 1.25) / det
    # μ = (0.4, 0) − p (1, 1.25) / det = (0.065647205, −0.417940994)
    mu, precision = laplace_update(mu, precision, np.array([1.0, 1.0]), 0.0)
    assert precision == pytest.approx(np.array([[1.490260746, 0.240260746], [0.240260746, 1.240260746]]))
    assert mu == pytest.approx([0.065647205, -0.417940994])


def test_tie_is_a_half_label():
    mu, precision = laplace_update(np.array([0.4]), np.array([[1.0]]), np.array([1.0]), 0.5)
    # p = σ(0.4) = 0.598687660, Σ⁻¹ = 1 + 0.240260746, μ = 0.4 + (0.5 − p) / 1.240260746 = 0.32042991
    assert mu == pytest.approx([0.32042991], abs=1e-7)


def test_sigmoid_and_bradley_terry():
    assert sigmoid(1000.0) == 1.0 and sigmoid(-1000.0) == 0.0
    assert bt_probability(np.array([2.0, -1.0]), np.array([1.0, 1.0]), np.array([0.5, 0.0])) == pytest.approx(
        0.5)  # θᵀ(x_a − x_b) = 2·0.5 − 1·1 = 0
    assert bt_probability(np.array([1.0]), np.array([1.0]), np.array([0.0])) == pytest.approx(0.7310585786)


def test_ucb_pair_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    mu, cov = np.array([0.5, 0.0]), np.diag([1.0, 4.0])
    assert sigma_norm(np.array([1.0, -1.0]), cov) == pytest.approx(np.sqrt(5.0))
    # a: 0.5 + 1 = 1.5, 0 + 2 = 2, 0 -> a = 1
    # b: x0 − x1 = (1, −1): 0.5 + √5 = 2.736; x2 − x1 = (0, −1): 0 + 2 = 2 -> b = 0
    assert ucb_pair(mu, cov, x, beta=1.0) == (1, 0)
    # β = 0: a = argmax μᵀx = 0; b: x1 − x0 = (−1, 1) and x2 − x0 = (−1, 0) both score −0.5 -> lower index
    assert ucb_pair(mu, cov, x, beta=0.0) == (0, 1)
    # model 1 unaffordable: a = 0 (1.5); b: x2 − x0 = (−1, 0) is the only partner
    allowed = np.array([[False, False, True], [False, False, False], [True, False, False]])
    assert ucb_pair(mu, cov, x, beta=1.0, allowed=allowed) == (0, 2)
    assert ucb_pair(mu, cov, x, beta=1.0, allowed=np.zeros((3, 3), dtype=bool)) is None


def test_affordable_pairs_and_answer_cost():
    assert answer_cost(2.0, 250) == pytest.approx(0.5)
    ok = affordable_pairs(np.array([0.3, 0.5, 0.1]), np.array([1.0, 1.0, 5.0]), 0.5, None)
    assert ok.tolist() == [[False, False, True], [False, False, False], [True, False, False]]
    ok = affordable_pairs(np.array([0.3, 0.5, 0.1]), np.array([1.0, 1.0, 5.0]), 0.5, 5.5)
    assert not ok.any()  # (0, 2) costs 0.4 but takes 6 s
    assert affordable_pairs(np.zeros(2), np.zeros(2), None, None).tolist() == [[False, True], [True, False]]


def test_prob_best_is_seeded_and_follows_the_belief():
    x = np.array([[1.0], [0.0]])
    p = prob_best(np.zeros(1), np.eye(1), x, 4000, seed=3)
    assert p.sum() == pytest.approx(1.0) and abs(p[0] - 0.5) < 0.05
    assert (prob_best(np.zeros(1), np.eye(1), x, 4000, seed=3) == p).all()
    # θ ~ N(1, 1): P(θ > 0) = Φ(1) = 0.841
    assert prob_best(np.ones(1), np.eye(1), x, 20000, seed=0)[0] == pytest.approx(0.841, abs=0.01)


def test_features_are_imputed_and_normalised():
    names, raw = feature_table({"a": {"latency_s": 1.0, "cost_per_1k_tokens": 0.0, "acc:gsm8k": 0.5},
                                "b": {"latency_s": 3.0, "cost_per_1k_tokens": 0.0},
                                "c": {"latency_s": 2.0, "cost_per_1k_tokens": 0.0, "acc:gsm8k": 0.1,
                                      "extra": float("nan")}}, ["a", "b", "c"])
    assert names == ["acc:gsm8k", "cost_per_1k_tokens", "latency_s"]
    assert raw.tolist() == [[0.5, 0.0, 1.0], [pytest.approx(0.3), 0.0, 3.0], [0.1, 0.0, 2.0]]
    # min–max: [[1, 0, 0], [.5, 0, 1], [0, 0, .5]]; column means (.5, 0, .5) subtracted
    assert normalize_features(raw) == pytest.approx(np.array([[0.5, 0.0, -0.5], [0.0, 0.0, 0.5], [-0.5, 0.0, 0.0]]))


def test_parse_theta():
    names = ["acc:gsm8k", "cost_per_1k_tokens", "latency_s"]
    assert parse_theta("latency_s=-1, acc:gsm8k=2", names).tolist() == [2.0, 0.0, -1.0]
    assert parse_theta("1, 0, -0.5", names).tolist() == [1.0, 0.0, -0.5]
    with pytest.raises(ValueError, match="unknown feature 'speed'; features: acc:gsm8k, cost_per_1k_tokens"):
        parse_theta("speed=1", names)
    with pytest.raises(ValueError, match="'x' is not a number"):
        parse_theta("latency_s=x", names)
    with pytest.raises(ValueError, match="2 numbers for 3 features"):
        parse_theta("1, 2", names)
    for text in ("latency_s=1e400", "latency_s=nan", "0, inf, 0"):
        with pytest.raises(ValueError, match="weights must be finite numbers"):
            parse_theta(text, names)


def test_config_rejects_bad_values():
    for kwargs, field in [({"delta": 1.0}, "delta"), ({"budget_rounds": -1}, "budget_rounds"),
                          ({"budget_cost": -1.0}, "budget_cost"), ({"prior_sd": 0.0}, "prior_sd"),
                          ({"beta": -1.0}, "beta"), ({"mc_samples": 0}, "mc_samples"),
                          ({"beta": float("inf")}, "beta"), ({"budget_time_s": float("inf")}, "budget_time_s"),
                          ({"budget_cost": float("nan")}, "budget_cost")]:
        with pytest.raises(ValueError, match=field):
            CupidConfig(**kwargs)


def test_duel_regret_and_simulated_user():
    theta, x = np.array([1.0]), np.array([[2.0], [0.0], [1.0]])
    # best u = 2: (σ(2) + σ(1)) / 2 − 1/2 = (0.880797 + 0.731059) / 2 − 0.5
    assert duel_regret(theta, x, 1, 2) == pytest.approx(0.3059278283)
    assert duel_regret(theta, x, 0, 0) == 0.0
    user = SimulatedUser(theta, x, noisy=False)
    assert user.best == 0 and user.prefer(0, 2) == 1.0 and user.prefer(1, 2) == 0.0 and user.prefer(1, 1) == 0.5
    noisy = SimulatedUser(theta, x, noisy=True, seed=0)
    wins = np.mean([noisy.prefer(2, 1) for _ in range(4000)])
    assert wins == pytest.approx(0.731, abs=0.02)  # σ(1)
    with pytest.raises(ValueError, match="2 weights for 1 features"):
        SimulatedUser(np.zeros(2), x)


def test_rucb_upper_bounds_by_hand():
    policy = RucbPolicy(3, alpha=0.51, seed=0)
    policy.observe(0, 1, 1.0)
    policy.observe(0, 1, 1.0)
    policy.observe(1, 0, 1.0)
    u = policy.upper_bounds(3)
    # N01 = 3: U01 = 2/3 + sqrt(0.51 ln 3 / 3) = 1.098829, U10 = 1/3 + the same = 0.765495; unplayed -> 1
    assert u[0, 1] == pytest.approx(1.0988287764) and u[1, 0] == pytest.approx(0.7654954430)
    assert u[0, 2] == 1.0 and u[2, 2] == 0.5
    with pytest.raises(ValueError, match="alpha"):
        RucbPolicy(3, alpha=0.5)


def _recommend_after(theta, x, rounds, seed, config):
    user = SimulatedUser(theta, x, noisy=True, seed=(seed, 1))
    policy = CupidPolicy(x, config)
    for t in range(rounds):
        a, b = policy.select(t + 1)
        policy.observe(a, b, user.prefer(a, b))
    p = prob_best(policy.mu, np.linalg.inv(policy.precision), x, config.mc_samples, seed=seed)
    return int(np.argmax(p)), user.best


def test_simulated_users_best_model_is_recovered_in_most_seeds():
    hits = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x = normalize_features(rng.random((6, 3)))
        theta = rng.normal(0, 3, size=3)
        got, best = _recommend_after(theta, x, 30, seed, CupidConfig(mc_samples=1000))
        hits += got == best
    assert hits >= 16  # measured: 18 of 20 (the misses: best two models 0.12 and 0.24 apart in utility)


def test_cupid_regret_beats_uniform_and_rucb_with_features():
    rng = np.random.default_rng(0)
    x = normalize_features(rng.random((6, 3)))
    theta = np.array([2.0, -3.0, 1.0])
    seeds = range(10)
    cupid = simulate_regret(lambda s: CupidPolicy(x), theta, x, 30, seeds)
    uniform = simulate_regret(lambda s: UniformPolicy(6, seed=s), theta, x, 30, seeds)
    rucb = simulate_regret(lambda s: RucbPolicy(6, seed=s), theta, x, 30, seeds)
    assert cupid.shape == (10, 30) and (np.diff(cupid, axis=1) >= 0).all()
    # measured: CUPID 6.4, uniform 11.5, RUCB 10.2; the floor of any rule with b ≠ a is 30 × 0.195 = 5.85
    assert cupid[:, -1].mean() < 0.6 * uniform[:, -1].mean()
    assert cupid[:, -1].mean() < rucb[:, -1].mean()


def test_persona_variants_share_weights_and_apply_personas():
    base = ScriptedChatModel(responses=["ok"], cycle=True)
    pool = ModelPool.from_chat_models({"m": base, "n": ScriptedChatModel(responses=["ok"], cycle=True)},
                                      cost_per_1k_tokens=0.5)
    variants = persona_variants(pool, [Persona("short", "Be brief.", 0.1), Persona("warm", "Be kind.")])
    assert variants.names == ["m", "m-short", "m-warm", "n", "n-short", "n-warm"]
    assert variants["m-short"].chat_model is base and variants["m-short"].spec.cost_per_1k_tokens == 0.5
    assert variants["m-warm"].spec.temperature is None
    variants.sample("m-short", [{"role": "user", "content": "hi"}], SamplingParams())
    assert base.calls[-1]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert base.calls[-1]["temperature"] == 0.1


def test_spec_features_from_pool_file_fields():
    pool = ModelPool([PoolMember(ModelSpec("a", "openai", cost_per_1k_tokens=0.2,
                                           extra={"features": {"latency_s": 0.4, "acc:gsm8k": 0.3}}),
                                 ScriptedChatModel()),
                      PoolMember(ModelSpec("b", "openai"), ScriptedChatModel())])
    assert spec_features(pool, ["a", "b"]) == {"a": {"cost_per_1k_tokens": 0.2, "latency_s": 0.4, "acc:gsm8k": 0.3},
                                               "b": {"cost_per_1k_tokens": 0.0}}
    bad = ModelPool([PoolMember(ModelSpec("c", "openai", extra={"features": {"latency_s": "fast"}}),
                                ScriptedChatModel())])
    with pytest.raises(ValueError, match="model 'c': field 'features.latency_s'"):
        spec_features(bad, ["c"])
    for field, spec in [("features.latency_s", ModelSpec("d", "openai", extra={"features": {"latency_s": 1e400}})),
                        ("features.acc:gsm8k", ModelSpec("d", "openai", extra={"features": {"acc:gsm8k": float("nan")}})),
                        ("cost_per_1k_tokens", ModelSpec("d", "openai", cost_per_1k_tokens=float("inf")))]:
        with pytest.raises(ValueError, match=f"pool.toml: model 'd': field '{field}': expected a finite number"):
            spec_features(ModelPool([PoolMember(spec, ScriptedChatModel())], source="pool.toml"), ["d"])
    negative = ModelPool([PoolMember(ModelSpec("e", "openai", extra={"features": {"latency_s": -0.5, "score": -2}}),
                                     ScriptedChatModel())])
    with pytest.raises(ValueError, match="field 'features.latency_s': must be >= 0, got -0.5"):
        spec_features(negative, ["e"])


def test_trace_features_score_answers_and_take_median_latency():
    store = TraceStore(":memory:")

    def call(cid, model, completion, latency, role="agent", qid="q1"):
        return {"call_id": cid, "model": model, "completion": completion, "latency_s": latency, "role": role,
                "question_id": qid}

    store.start_run("r", "align", config={}, pool=[], dataset={})
    store.record_question("r", "align", {"question_id": "q1", "source": "gsm8k", "kind": "math",
                                         "question": "2+2?", "gold": "4"},
                          {}, [call("c1", "a", "The answer is 4.", 1.0), call("c2", "a", "The answer is 5.", 3.0),
                               call("c3", "a", "The answer is 5.", 2.0, role="judge"),
                               call("c4", "b", "The answer is 4.", 0.5)])
    store.record_question("r", "align", {"question_id": "q2", "source": "gsm8k", "kind": "math",
                                         "question": "3+3?", "gold": "6"},
                          {}, [call("c5", "a", "The answer is 6.", 4.0, qid="q2")])
    feats = trace_features(store, ["a", "b", "z"])
    # a: answers 4 (right), 5 (wrong), 6 (right), judge call skipped -> 2/3; latency median of 1,3,2,4 = 2.5
    assert feats == {"a": {"latency_s": 2.5, f"{ACCURACY_PREFIX}gsm8k": pytest.approx(2 / 3)},
                     "b": {"latency_s": 0.5, f"{ACCURACY_PREFIX}gsm8k": 1.0}}


def test_trace_features_count_an_echo_of_the_question_as_wrong():
    store = TraceStore(":memory:")
    question = "Sam had 20 apples and gave 8 away, so he has 12 apples left. How many apples does he have left?"
    store.start_run("r", "align", config={}, pool=[], dataset={})
    store.record_question("r", "align", {"question_id": "q1", "source": "gsm8k", "kind": "math",
                                         "question": question, "gold": "12"},
                          {}, [{"call_id": "c1", "model": "a", "completion": question, "latency_s": 1.0,
                                "role": "agent", "question_id": "q1"},
                               {"call_id": "c2", "model": "b", "completion": "The answer is 12.", "latency_s": 1.0,
                                "role": "agent", "question_id": "q1"}])
    feats = trace_features(store, ["a", "b"])
    # a only repeats the question (its 12 is the question's): no answer, so wrong; b answers 12
    assert feats == {"a": {"latency_s": 1.0, f"{ACCURACY_PREFIX}gsm8k": 0.0},
                     "b": {"latency_s": 1.0, f"{ACCURACY_PREFIX}gsm8k": 1.0}}
