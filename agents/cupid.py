"""CUPID: choosing a model from a user's pairwise preferences with a feature-based dueling bandit.

Source: Nguyen, Liu, Senanayake, "CUPID in the Model Zoo: Online Matchmaking for Selecting Your
Dream LLM", arXiv 2606.00846 (ICML 2026). The paper's method text was not available: what follows
is **reconstructed** from its abstract (``shared/docs/protocols.md`` §4) and the standard pieces it
names. Every choice the abstract leaves open is a field of :class:`CupidConfig` or written in the
docstring of the function that makes it.

The model
    Model ``i`` has a feature vector ``x_i`` (accuracy per task, cost per 1k tokens, median latency;
    see :func:`agora.agents.cupid_features.feature_table`). The user's latent utility is ``θᵀx`` and a duel follows
    Bradley–Terry, ``P(a ≻ b) = σ(θᵀ(x_a − x_b))`` (:func:`bt_probability`). The belief over ``θ``
    is Gaussian ``N(μ, Σ)``, updated after each duel by a Laplace step (:func:`laplace_update`).
    Pairs are chosen by a belief-aware UCB rule within the remaining budgets (:func:`ucb_pair`);
    selection stops when a budget is spent or ``P(a is best) ≥ 1 − δ`` (:func:`prob_best`).

This module holds the settings and the belief (the update, the pair rule, the budgets, the stopping
probability). The model features (:func:`~agora.agents.cupid_features.feature_table`, read from pool
files and the trace store) are :mod:`agora.agents.cupid_features`; the simulated user with a hidden
``θ``, the regret of a duel, the two baselines of the regret plot (uniform random pairs and RUCB) and
pool variants that turn two models into six arms are :mod:`agora.agents.cupid_simulation`. No
LangGraph here; the graph is :mod:`agora.graphs.selection`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Sequence

import numpy as np

from agora.agents._checks import DrawSeed, MaxTokens, Temperature
from agora.models.validation import Count, Number, settings

Choice = Literal["A", "B", "tie"]


@settings
class CupidConfig:
    """Settings of one CUPID selection session (protocols.md §4; the abstract gives no defaults,
    so these are ours, sized for a person answering in a terminal).

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    budget_rounds: Annotated[int, Count(1, expected=">= 1 (a session with no duel learns no preference)")] = 20
    """Most duels the user is asked to judge (the time budget of the person); at least 1, as with
    no duel there is no preference to learn and the features' latency calls would be wasted."""
    budget_cost: Annotated[float | None, Number(0.0, optional=True)] = None
    """Most money spent on generations, in the unit of ``cost_per_1k_tokens``; ``None`` = no limit."""
    budget_time_s: Annotated[float | None, Number(0.0, optional=True)] = None
    """Most model seconds spent on generations (sum of latencies); ``None`` = no limit."""
    beta: Annotated[float, Number(0.0)] = 1.0
    """Width of the confidence bonus ``β‖x‖_Σ`` in the UCB pair rule."""
    delta: Annotated[float, Number(0.0, 1.0, low_open=True, high_open=True)] = 0.05
    """Stop early when the leader's posterior probability of being best reaches ``1 − δ``."""
    prior_sd: Annotated[float, Number(0.0, low_open=True)] = 1.0
    """Prior ``θ ~ N(0, prior_sd² I)`` over the (min–max normalised) feature weights."""
    mc_samples: Annotated[int, Count(1)] = 2000
    """Posterior draws used to estimate ``P(a is best)``."""
    max_tokens: MaxTokens = 64
    """Upper bound on generated tokens per answer (answers are read by a person)."""
    temperature: Temperature = 0.7
    """Sampling temperature of the answers (a pool member's own ``temperature`` overrides it)."""
    seed: DrawSeed = 0
    """Seeds generation, the A/B order of each duel and the Monte Carlo estimate."""


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
