"""CUPID: choosing a model from a user's pairwise preferences with a feature-based dueling bandit.

Source: Nguyen, Liu, Senanayake, "CUPID in the Model Zoo: Online Matchmaking for Selecting Your
Dream LLM", arXiv 2606.00846 (ICML 2026). The paper's method text was not available: what follows
is **reconstructed** from its abstract (``shared/docs/protocols.md`` §4) and the standard pieces it
names. Every choice the abstract leaves open is a field of :class:`CupidConfig` or written in the
docstring of the function that makes it.

The model
    Model ``i`` has a feature vector ``x_i`` (accuracy per task, cost per 1k tokens, median latency;
    see :func:`feature_table`). The user's latent utility is ``θᵀx`` and a duel follows
    Bradley–Terry, ``P(a ≻ b) = σ(θᵀ(x_a − x_b))`` (:func:`bt_probability`). The belief over ``θ``
    is Gaussian ``N(μ, Σ)``, updated after each duel by a Laplace step (:func:`laplace_update`).
    Pairs are chosen by a belief-aware UCB rule within the remaining budgets (:func:`ucb_pair`);
    selection stops when a budget is spent or ``P(a is best) ≥ 1 − δ`` (:func:`prob_best`).

Also here: a simulated user with a hidden ``θ`` (:class:`SimulatedUser`), the regret of a duel
(:func:`duel_regret`), the two baselines of the regret plot (uniform random pairs and RUCB), pool
variants that turn two models into six arms (:func:`persona_variants`), and the model features read
from the trace store (:func:`trace_features`). No LangGraph here; the graph is
:mod:`agora.graphs.selection`.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Protocol, Sequence

import numpy as np

from agora.agents._checks import check_count, check_number, check_sampling, is_count
from agora.models.pool import ModelPool, PoolMember

COST = "cost_per_1k_tokens"
"""Feature name: price of 1000 (prompt + completion) tokens, from ``ModelSpec.cost_per_1k_tokens``."""
LATENCY = "latency_s"
"""Feature name: median seconds per answer, from the traces or measured."""
ACCURACY_PREFIX = "acc:"
"""Feature names ``acc:<task>``: fraction of a model's traced answers on ``<task>`` that were right."""
JUDGING_ROLES = ("judge", "verifier", "principal", "router", "critic")
"""Trace roles whose completions judge other answers instead of answering; not scored for accuracy."""

Choice = Literal["A", "B", "tie"]


@dataclass(frozen=True, slots=True)
class CupidConfig:
    """Settings of one CUPID selection session (protocols.md §4; the abstract gives no defaults,
    so these are ours, sized for a person answering in a terminal).

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    budget_rounds: int = 20
    """Most duels the user is asked to judge (the time budget of the person); at least 1, as with
    no duel there is no preference to learn and the features' latency calls would be wasted."""
    budget_cost: float | None = None
    """Most money spent on generations, in the unit of ``cost_per_1k_tokens``; ``None`` = no limit."""
    budget_time_s: float | None = None
    """Most model seconds spent on generations (sum of latencies); ``None`` = no limit."""
    beta: float = 1.0
    """Width of the confidence bonus ``β‖x‖_Σ`` in the UCB pair rule."""
    delta: float = 0.05
    """Stop early when the leader's posterior probability of being best reaches ``1 − δ``."""
    prior_sd: float = 1.0
    """Prior ``θ ~ N(0, prior_sd² I)`` over the (min–max normalised) feature weights."""
    mc_samples: int = 2000
    """Posterior draws used to estimate ``P(a is best)``."""
    max_tokens: int = 64
    """Upper bound on generated tokens per answer (answers are read by a person)."""
    temperature: float = 0.7
    """Sampling temperature of the answers (a pool member's own ``temperature`` overrides it)."""
    seed: int = 0
    """Seeds generation, the A/B order of each duel and the Monte Carlo estimate."""

    def __post_init__(self):
        owner = "CupidConfig"
        if not is_count(self.budget_rounds) or self.budget_rounds < 1:
            raise ValueError(f"CupidConfig.budget_rounds must be >= 1 (a session with no duel learns no preference), "
                             f"got {self.budget_rounds!r}")
        for name in ("budget_cost", "budget_time_s"):
            check_number(owner, name, getattr(self, name), 0.0, optional=True)
        check_number(owner, "beta", self.beta, 0.0)
        check_number(owner, "delta", self.delta, 0.0, 1.0, low_open=True, high_open=True)
        check_number(owner, "prior_sd", self.prior_sd, 0.0, low_open=True)
        check_count(owner, "mc_samples", self.mc_samples)
        check_sampling(owner, self, top_p=False, shots=False)


# ----------------------------------------------------------------------------- Bradley–Terry belief


def sigmoid(x: float | np.ndarray) -> float | np.ndarray:
    """The logistic function ``σ(x) = 1 / (1 + e^{−x})``, computed without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=float)))


def bt_probability(theta: np.ndarray, x_a: np.ndarray, x_b: np.ndarray) -> float:
    """Bradley–Terry probability that ``a`` is preferred to ``b``: ``σ(θᵀ(x_a − x_b))``.

    Args: ``theta``, ``x_a``, ``x_b``: vectors of length ``d``. Source: protocols.md §4.
    """
    return float(sigmoid(np.dot(theta, np.asarray(x_a) - np.asarray(x_b))))


def prior_belief(d: int, prior_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """The prior ``N(0, prior_sd² I)`` as ``(μ, Σ⁻¹)``: shapes ``(d,)`` and ``(d, d)``."""
    return np.zeros(d), np.eye(d) / prior_sd**2


def laplace_update(mu: np.ndarray, precision: np.ndarray, z: np.ndarray, y: float) -> tuple[np.ndarray, np.ndarray]:
    """One Laplace step of the Gaussian belief after a duel (protocols.md §4).

    With ``z = x_a − x_b`` and ``p = σ(μᵀz)``::

        Σ⁻¹ ← Σ⁻¹ + p(1−p) z zᵀ
        μ   ← μ + Σ z (y − p)          (Σ = the updated covariance)

    the online Laplace approximation of Bayesian logistic regression (Chapelle & Li, NeurIPS 2011,
    Algorithm 3, one observation at a time).

    Args:
        mu: belief mean, shape ``(d,)``.
        precision: belief precision ``Σ⁻¹``, shape ``(d, d)``.
        z: feature difference of the duel, shape ``(d,)``.
        y: 1 when ``a`` won, 0 when ``b`` won, 0.5 for a tie (a tie is the logistic likelihood with
            a soft label of one half: our reading, the abstract does not treat ties).

    Returns:
        ``(μ, Σ⁻¹)`` after the update (new arrays).
    """
    z = np.asarray(z, dtype=float)
    p = float(sigmoid(mu @ z))
    precision = precision + p * (1.0 - p) * np.outer(z, z)
    mu = mu + np.linalg.solve(precision, z) * (y - p)
    return mu, precision


def sigma_norm(v: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``‖v‖_Σ = sqrt(vᵀ Σ v)`` for one vector ``(d,)`` or each row of a matrix ``(m, d)``."""
    rows = np.atleast_2d(v)
    out = np.sqrt(np.maximum(np.einsum("id,de,ie->i", rows, cov, rows), 0.0))
    return out if np.ndim(v) == 2 else out[0]


def ucb_pair(mu: np.ndarray, cov: np.ndarray, x: np.ndarray, beta: float,
             allowed: np.ndarray | None = None) -> tuple[int, int] | None:
    """The belief-aware UCB pair (protocols.md §4)::

        a = argmax_i  μᵀx_i + β‖x_i‖_Σ
        b = argmax_{j≠a}  μᵀ(x_j − x_a) + β‖x_j − x_a‖_Σ

    Args:
        mu: belief mean ``(d,)``; cov: belief covariance Σ ``(d, d)``; x: features ``(m, d)``.
        beta: width of the confidence bonus.
        allowed: ``(m, m)`` boolean matrix of the pairs the budgets still allow
            (:func:`affordable_pairs`); ``a`` ranges over models with at least one allowed partner.
            ``None`` allows every pair.

    Returns:
        ``(a, b)`` model indices, or ``None`` when no pair is allowed. Ties go to the lower index.
    """
    m = x.shape[0]
    allowed = ~np.eye(m, dtype=bool) if allowed is None else allowed & ~np.eye(m, dtype=bool)
    candidates = np.flatnonzero(allowed.any(axis=1))
    if candidates.size == 0:
        return None
    score_a = x @ mu + beta * sigma_norm(x, cov)
    a = int(candidates[np.argmax(score_a[candidates])])
    diff = x - x[a]
    score_b = diff @ mu + beta * sigma_norm(diff, cov)
    partners = np.flatnonzero(allowed[a])
    b = int(partners[np.argmax(score_b[partners])])
    return a, b


def answer_cost(cost_per_1k_tokens: float, tokens: float) -> float:
    """Price of an answer of ``tokens`` (prompt + completion) tokens: ``cost_per_1k_tokens · tokens / 1000``."""
    return cost_per_1k_tokens * tokens / 1000.0


def affordable_pairs(cost: np.ndarray, time_s: np.ndarray, remaining_cost: float | None,
                     remaining_time_s: float | None) -> np.ndarray:
    """Which pairs fit the remaining budgets: ``cost_a + cost_b ≤ remaining_cost`` and likewise time.

    Args:
        cost: expected cost of each model's next answer ``(m,)`` (0 for an answer already generated).
        time_s: expected model seconds of each model's next answer ``(m,)``.
        remaining_cost / remaining_time_s: what is left of each budget; ``None`` = unlimited.

    Returns:
        ``(m, m)`` boolean matrix, ``False`` on the diagonal.
    """
    m = len(cost)
    ok = ~np.eye(m, dtype=bool)
    if remaining_cost is not None:
        ok &= (cost[:, None] + cost[None, :]) <= remaining_cost + 1e-12
    if remaining_time_s is not None:
        ok &= (time_s[:, None] + time_s[None, :]) <= remaining_time_s + 1e-12
    return ok


def prob_best(mu: np.ndarray, cov: np.ndarray, x: np.ndarray, samples: int, seed: int | Sequence[int]) -> np.ndarray:
    """Posterior probability that each model is the user's best, by seeded Monte Carlo.

    Draws ``θ ~ N(μ, Σ)`` ``samples`` times and counts how often each model maximises ``θᵀx``
    (models with identical features: the lower index wins the tie).

    Returns:
        ``(m,)`` probabilities summing to 1.
    """
    rng = np.random.default_rng(seed)
    chol = np.linalg.cholesky(cov + 1e-12 * np.eye(len(mu)))
    thetas = mu + rng.standard_normal((samples, len(mu))) @ chol.T
    winners = np.argmax(thetas @ x.T, axis=1)
    return np.bincount(winners, minlength=x.shape[0]) / samples


# ----------------------------------------------------------------------------- features


def normalize_features(raw: np.ndarray) -> np.ndarray:
    """The ``x_i`` of the model: each feature column of ``raw`` ``(m, d)`` min–max scaled to
    ``[0, 1]`` across the pool, then centred on the pool mean.

    The scale makes one prior and one ``β`` fit features in seconds, prices and accuracies alike
    (the sign is kept); a constant column becomes 0. Centring changes no Bradley–Terry probability
    (they depend on differences only) but makes the UCB bonus ``β‖x_i‖_Σ`` the uncertainty of model
    ``i``'s utility relative to the pool average rather than to an arbitrary origin (our choice;
    measured on 140 simulated users, 6 models, 3 features, 30 rounds: best model found 120 times
    centred, 115 times not).
    """
    raw = np.asarray(raw, dtype=float)
    lo, hi = raw.min(axis=0), raw.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    scaled = np.where(hi > lo, (raw - lo) / span, 0.0)
    return scaled - scaled.mean(axis=0)


def _feature_order(name: str) -> tuple[int, str]:
    return (0 if name.startswith(ACCURACY_PREFIX) else 1 if name == COST else 2 if name == LATENCY else 3, name)


def feature_table(values: Mapping[str, Mapping[str, float]], models: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The raw feature matrix of ``models`` from per-model feature values.

    Columns are the union of the feature names (``acc:*`` sorted, then ``cost_per_1k_tokens``, then
    ``latency_s``, then others). A model without a value for a feature gets the mean of the models
    that have one (mean imputation: a missing value then says nothing for or against the model).
    Non-finite values count as missing.

    Returns:
        ``(names, raw)``: ``d`` feature names and the ``(m, d)`` matrix.
    """
    names = sorted({n for m in models for n, v in values.get(m, {}).items() if v is not None and math.isfinite(v)},
                   key=_feature_order)
    raw = np.full((len(models), len(names)), np.nan)
    for i, m in enumerate(models):
        for j, n in enumerate(names):
            v = values.get(m, {}).get(n)
            if v is not None and math.isfinite(v):
                raw[i, j] = float(v)
    for j in range(len(names)):
        col = raw[:, j]
        col[np.isnan(col)] = np.nanmean(col)
    return names, raw


def spec_features(pool: ModelPool, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Features a pool file states: ``cost_per_1k_tokens`` and the optional ``features`` table.

    A pool entry may carry ``features = { latency_s = 0.4, "acc:gsm8k" = 0.31 }`` (kept in
    ``ModelSpec.extra``): measured elsewhere, or synthetic for experiments.

    Raises:
        ValueError: a ``features`` value that is not a finite number, or a negative cost, latency or
        accuracy (names the pool's source, model and field).
    """
    out: dict[str, dict[str, float]] = {}
    for m in models:
        spec = pool[m].spec
        table = spec.extra.get("features") or {}
        if not isinstance(table, dict):
            raise ValueError(f"{pool.source}: model {m!r}: field 'features' must be a table of numbers, got {table!r}")
        row = {}
        for field, name, value in [(COST, COST, spec.cost_per_1k_tokens),
                                   *((f"features.{n}", str(n), v) for n, v in table.items())]:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{pool.source}: model {m!r}: field {field!r}: expected a finite number, got {value!r}")
            if value < 0 and (name in (COST, LATENCY) or name.startswith(ACCURACY_PREFIX)):
                raise ValueError(f"{pool.source}: model {m!r}: field {field!r}: must be >= 0, got {value!r}")
            row[name] = float(value)
        out[m] = row
    return out


def _n_options(question: str) -> int:
    return max(2, len(re.findall(r"^[A-J]\. ", question or "", flags=re.MULTILINE)))


def trace_features(store: Any, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-model features measured in a trace store: ``acc:<task>`` and ``latency_s``.

    ``acc:<task>``: over the successful calls of the model on questions with a gold answer (a
    ``model_calls`` row joined with its ``questions`` row; ``<task>`` is the question's ``source``),
    the share whose completion's extracted answer is correct. Calls of judging roles
    (:data:`JUDGING_ROLES`) are not answers and are skipped. ``latency_s``: the median latency of
    the model's successful calls. Models absent from the store get no entry.

    Args:
        store: an :class:`agora.traces.TraceStore`.
        models: pool member names to look up.
    """
    from agora.tasks.answers import extract_answer
    from agora.tasks.comparison import is_correct

    if not models:
        return {}
    marks = ", ".join("?" for _ in models)
    out: dict[str, dict[str, float]] = {}
    latencies: dict[str, list[float]] = {}
    for row in store.db.query(f"select model, latency_s from model_calls where error is null "
                              f"and latency_s is not null and model in ({marks})", list(models)):
        latencies.setdefault(row["model"], []).append(row["latency_s"])
    for m, values in latencies.items():
        out.setdefault(m, {})[LATENCY] = statistics.median(values)
    judges = ", ".join("?" for _ in JUDGING_ROLES)
    scores: dict[tuple[str, str], list[bool]] = {}
    for row in store.db.query(
            f"select c.model, q.source, q.kind, q.question, q.gold, c.completion from model_calls c "
            f"join questions q on q.run_id = c.run_id and q.question_id = c.question_id "
            f"where c.error is null and c.completion is not null and q.gold is not null "
            f"and coalesce(c.role, '') not in ({judges}) and c.model in ({marks})",
            [*JUDGING_ROLES, *models]):
        kind = row["kind"] or "math"
        if kind not in ("math", "mc"):
            continue
        pred = extract_answer(row["completion"], kind, _n_options(row["question"]), question=row["question"])
        scores.setdefault((row["model"], row["source"] or "task"), []).append(is_correct(pred, row["gold"], kind))
    for (m, task), correct in scores.items():
        out.setdefault(m, {})[f"{ACCURACY_PREFIX}{task}"] = sum(correct) / len(correct)
    return out


def parse_theta(text: str, names: Sequence[str]) -> np.ndarray:
    """A preference vector ``θ`` from ``"latency_s=-1, cost_per_1k_tokens=-0.5"`` (unnamed features
    weigh 0) or from ``d`` comma-separated numbers in feature order.

    Raises:
        ValueError: unknown feature name (lists the known ones), a value that is not a finite number,
        or the wrong count of plain numbers.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    theta = np.zeros(len(names))
    if parts and all("=" not in p for p in parts):
        if len(parts) != len(names):
            raise ValueError(f"theta {text!r}: {len(parts)} numbers for {len(names)} features "
                             f"({', '.join(names)}); or name them, e.g. {names[-1] if names else 'latency_s'}=-1")
        try:
            theta = np.array([float(p) for p in parts])
        except ValueError:
            raise ValueError(f"theta {text!r}: not a list of numbers") from None
    else:
        for p in parts:
            name, _, value = p.partition("=")
            name = name.strip()
            if name not in names:
                raise ValueError(f"theta {text!r}: unknown feature {name!r}; features: {', '.join(names)}")
            try:
                theta[list(names).index(name)] = float(value)
            except ValueError:
                raise ValueError(f"theta {text!r}: feature {name!r}: {value.strip()!r} is not a number") from None
    if not np.isfinite(theta).all():
        raise ValueError(f"theta {text!r}: weights must be finite numbers")
    return theta


# ----------------------------------------------------------------------------- pool variants


@dataclass(frozen=True, slots=True)
class Persona:
    """A system prompt and temperature that turn one model into another pool member."""

    name: str
    system_prompt: str
    """Appended to any system prompt the base member has."""
    temperature: float | None = None
    """``None`` keeps the base member's temperature."""


DEFAULT_PERSONAS = (
    Persona("concise", "Answer in one short sentence.", 0.2),
    Persona("tutor", "Explain your reasoning step by step, then state the answer.", 1.0),
)
"""Two personas: with the base members, two embedded models become six arms."""


def persona_variants(pool: ModelPool, personas: Sequence[Persona] = DEFAULT_PERSONAS) -> ModelPool:
    """The pool's members and, after each, its ``<model>-<persona>`` variants.

    Variants are :func:`agora.agents.panel.persona_specs` with the persona's temperature, and share
    their base member's chat model (same weights, loaded once). Base members keep their names, so
    their traced features still apply.
    """
    from agora.agents.panel import persona_specs

    members = []
    for base in pool:
        members.append(base)
        specs = persona_specs([base.spec], {p.name: p.system_prompt for p in personas})
        for p, spec in zip(personas, specs):
            spec = replace(spec, temperature=p.temperature if p.temperature is not None else spec.temperature)
            members.append(PoolMember(spec, base.chat_model))
    return ModelPool(members, source=f"{pool.source} with personas")


# ----------------------------------------------------------------------------- simulated user and regret


def duel_regret(theta: np.ndarray, x: np.ndarray, a: int, b: int) -> float:
    """Regret of showing the pair ``(a, b)`` to a user with utility ``θᵀx``::

        r = (P(a* ≻ a) + P(a* ≻ b)) / 2 − 1/2,     a* = argmax_i θᵀx_i, P from Bradley–Terry

    the average of the two preference gaps (Zoghi et al., "Relative Upper Confidence Bound for the
    K-armed dueling bandit problem", ICML 2014, §2). Zero exactly when both shown models are best.
    """
    u = x @ theta
    best = u.max()
    return float((sigmoid(best - u[a]) + sigmoid(best - u[b])) / 2 - 0.5)


class SimulatedUser:
    """A user with a hidden preference ``θ`` over features ``x``, answering duels.

    ``noisy=True``: prefers ``a`` with the Bradley–Terry probability ``σ(θᵀ(x_a − x_b))``.
    ``noisy=False``: always prefers the higher utility; equal utilities are a tie.

    Args:
        theta: ``(d,)``; x: ``(m, d)`` features the user judges by; seed: seeds the noise.
    """

    def __init__(self, theta: np.ndarray, x: np.ndarray, *, noisy: bool = True, seed: int | Sequence[int] = 0):
        self.theta = np.asarray(theta, dtype=float)
        self.x = np.asarray(x, dtype=float)
        if self.theta.shape != (self.x.shape[1],):
            raise ValueError(f"theta has {self.theta.size} weights for {self.x.shape[1]} features")
        self.noisy = noisy
        self._rng = np.random.default_rng(seed)

    @property
    def utilities(self) -> np.ndarray:
        """``θᵀx_i`` for every model, ``(m,)``."""
        return self.x @ self.theta

    @property
    def best(self) -> int:
        """Index of the user's best model (lowest index among equals)."""
        return int(np.argmax(self.utilities))

    def prefer(self, a: int, b: int) -> float:
        """``y``: 1 if ``a`` is preferred, 0 if ``b``, 0.5 for a tie (noiseless equal utilities)."""
        if self.noisy:
            return float(self._rng.random() < bt_probability(self.theta, self.x[a], self.x[b]))
        ua, ub = self.utilities[a], self.utilities[b]
        return 1.0 if ua > ub else 0.0 if ua < ub else 0.5

    def regret(self, a: int, b: int) -> float:
        """:func:`duel_regret` of the pair for this user."""
        return duel_regret(self.theta, self.x, a, b)


# ----------------------------------------------------------------------------- policies (simulation)


class DuelPolicy(Protocol):
    """A pair-selection policy for simulated runs: choose a pair, observe the outcome."""

    name: str

    def select(self, t: int) -> tuple[int, int]: ...

    def observe(self, a: int, b: int, y: float) -> None: ...


class CupidPolicy:
    """CUPID without budgets: :func:`ucb_pair` on the belief, :func:`laplace_update` after each duel."""

    name = "CUPID"

    def __init__(self, x: np.ndarray, config: CupidConfig = CupidConfig()):
        self.x, self.config = x, config
        self.mu, self.precision = prior_belief(x.shape[1], config.prior_sd)

    def select(self, t: int) -> tuple[int, int]:
        pair = ucb_pair(self.mu, np.linalg.inv(self.precision), self.x, self.config.beta)
        assert pair is not None  # every pair is allowed without budgets
        return pair

    def observe(self, a: int, b: int, y: float) -> None:
        self.mu, self.precision = laplace_update(self.mu, self.precision, self.x[a] - self.x[b], y)


class UniformPolicy:
    """Baseline: a uniformly random pair of distinct models each round."""

    name = "uniform pairs"

    def __init__(self, m: int, seed: int | Sequence[int] = 0):
        self.m, self._rng = m, np.random.default_rng(seed)

    def select(self, t: int) -> tuple[int, int]:
        a, b = self._rng.choice(self.m, size=2, replace=False)
        return int(a), int(b)

    def observe(self, a: int, b: int, y: float) -> None:
        pass


class RucbPolicy:
    """Baseline: Relative Upper Confidence Bound (Zoghi et al., ICML 2014, Algorithm 1), a plain
    dueling bandit that ignores the features.

    ``U = W / N + sqrt(α ln t / N)`` with ``N = W + Wᵀ`` (``x/0 := 1``), ``U_ii = 1/2``;
    ``c`` is drawn uniformly from the candidates ``{c : U_cj ≥ 1/2 ∀j}`` (all models when empty);
    ``d = argmax_j U_jc`` (ties at random, ``d = c`` allowed). Simplified: without the paper's
    hypothesis set ``B``. Ties add 1/2 a win to both sides.
    """

    name = "RUCB"

    def __init__(self, m: int, alpha: float = 0.51, seed: int | Sequence[int] = 0):
        if alpha <= 0.5:
            raise ValueError(f"alpha must be > 0.5, got {alpha}")
        self.wins = np.zeros((m, m))
        self.alpha = alpha
        self._rng = np.random.default_rng(seed)

    def upper_bounds(self, t: int) -> np.ndarray:
        """``U`` at round ``t`` (1-based), ``(m, m)``."""
        n = self.wins + self.wins.T
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(n > 0, self.wins / n + np.sqrt(self.alpha * math.log(max(t, 1)) / n), 1.0)
        np.fill_diagonal(u, 0.5)
        return u

    def select(self, t: int) -> tuple[int, int]:
        u = self.upper_bounds(t)
        cands = np.flatnonzero((u >= 0.5).all(axis=1))
        c = int(self._rng.choice(cands if cands.size else np.arange(len(u))))
        col = u[:, c]
        d = int(self._rng.choice(np.flatnonzero(col == col.max())))
        return c, d

    def observe(self, a: int, b: int, y: float) -> None:
        if a != b:
            self.wins[a, b] += y
            self.wins[b, a] += 1.0 - y


def simulate_regret(make_policy, theta: np.ndarray, x: np.ndarray, rounds: int, seeds: Sequence[int],
                    *, noisy: bool = True) -> np.ndarray:
    """Cumulative regret of a policy against a simulated user, one row per seed.

    Args:
        make_policy: ``seed -> DuelPolicy`` (a fresh policy per seed).
        theta, x: the user's hidden preference ``(d,)`` and the models' features ``(m, d)``.
        rounds: duels per run (no early stop: curves over the same horizon).
        seeds: one run per seed; the user's noise is seeded by ``(seed, 1)``.

    Returns:
        ``(len(seeds), rounds)`` cumulative :func:`duel_regret`.
    """
    out = np.zeros((len(seeds), rounds))
    for s, seed in enumerate(seeds):
        user = SimulatedUser(theta, x, noisy=noisy, seed=(seed, 1))
        policy: DuelPolicy = make_policy(seed)
        total = 0.0
        for t in range(rounds):
            a, b = policy.select(t + 1)
            policy.observe(a, b, user.prefer(a, b))
            total += user.regret(a, b)
            out[s, t] = total
    return out
