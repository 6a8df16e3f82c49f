"""CUPID's simulation (:mod:`agora.agents.cupid`): a simulated user with a hidden preference ``θ``,
the regret of a duel, the policies of the regret plot (CUPID, uniform random pairs, RUCB) and the
loop that runs them, and pool variants that turn two models into six arms (personas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol, Sequence

import numpy as np

from agora.tasks.errors import InputError
from agora.agents.cupid import CupidConfig, bt_probability, laplace_update, prior_belief, sigmoid, ucb_pair
from agora.models.pool import ModelPool, PoolMember

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

    Variants are :func:`agora.agents.personas.persona_specs` with the persona's temperature, and share
    their base member's chat model (same weights, loaded once). Base members keep their names, so
    their traced features still apply.
    """
    from agora.agents.personas import persona_specs

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
    """CUPID without budgets: :func:`agora.agents.cupid.ucb_pair` on the belief, :func:`agora.agents.cupid.laplace_update` after each duel."""

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
            raise InputError(f"alpha must be > 0.5, got {alpha}")
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
