"""Reputation of the models in a duel pool: Sparta's rating update and reputation-weighted scores.

Source: Jiang et al., "SPARTA ALIGNMENT: Collectively Aligning Multiple Language Models through
Combat", arXiv 2506.04721 (NeurIPS 2025), Eq. 8 (reputation-weighted aggregation) and Eq. 9
(rating update); defaults from ``shared/docs/protocols.md`` §2. Two choices follow the authors'
code where the equations leave them open: the decay count ``n`` includes the current update
(the first update uses ``n = 1``), and a model keeps its previous ``σ`` until it has two deltas.
Both followers are updated from the ratings before the duel (symmetric), not one after the other.

State is a plain dict (:class:`ReputationState`) so it travels in graph state and trace rows.
"""

from __future__ import annotations

import math
from typing import Annotated, Mapping

import numpy as np
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.models.validation import Count, Number, settings

#: A positive finite number.
_POSITIVE = Number(0.0, low_open=True)


@settings
class ReputationConfig:
    """Settings of Sparta's reputation system (Eq. 9); defaults from protocols.md §2.

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    initial: Annotated[float, _POSITIVE] = 100.0
    """Reputation ``R`` of a model that has not duelled yet."""
    initial_sigma: Annotated[float, _POSITIVE] = 0.5
    """``σ`` of a model with fewer than two recorded deltas."""
    k0: Annotated[float, _POSITIVE] = 10.0
    """Initial step ``K_0``."""
    k_min: Annotated[float, _POSITIVE] = 5.0
    """Floor ``K_min`` of the decayed step."""
    alpha: Annotated[float, Number(0.0, 1.0, low_open=True)] = 0.9
    """Decay base ``α`` of ``K_t = max(K_min, K_0·α^(n/n_s))``."""
    n_s: Annotated[float, _POSITIVE] = 10.0
    """Decay scale ``n_s`` (updates per factor ``α``)."""
    lam: Annotated[float, _POSITIVE] = 20.0
    """Scaling ``λ`` dividing the step."""
    epsilon: Annotated[float, Number(0.0, 1.0, low_open=True)] = 0.01
    """Lower bound ``ε`` of the confidence factor ``|Φ(z) − Φ(−z)|``."""
    window: Annotated[int, Count(2)] = 20
    """``W``: ``σ`` is the standard deviation of a model's last ``W`` deltas."""
    sigma_min: Annotated[float, _POSITIVE] = 0.1
    """Lower bound of ``σ``."""
    floor: Annotated[float, Number(0.0)] = 10.0
    """Lowest reputation a model can fall to."""


class ReputationState(TypedDict):
    """Everything the reputation system needs to continue (serialisable)."""

    ratings: dict[str, float]
    """Model name → reputation ``R`` (models not listed have ``initial``)."""
    deltas: dict[str, list[float]]
    """Model name → its last ``W`` applied reputation changes, oldest first."""
    updates: int
    """Number of duel updates applied so far (``n``)."""


def aggregate_score(scores: Mapping[str, float], ratings: Mapping[str, float]) -> float:
    """Reputation-weighted mean judge score ``s̄ = Σ_k R_k s^(k) / Σ_k R_k`` (Sparta Eq. 8).

    Args:
        scores: judge name → that judge's score of one answer (1–10).
        ratings: judge name → reputation ``R_k`` (every judge in ``scores`` must be present).

    Raises:
        ValueError: no judges, or the judges' reputations sum to zero.
    """
    total = sum(ratings[k] for k in scores)
    if not scores or total <= 0:
        raise InputError("aggregate_score needs at least one judge with positive reputation")
    return sum(ratings[k] * s for k, s in scores.items()) / total


def k_factor(n: int, cfg: ReputationConfig = ReputationConfig()) -> float:
    """Decayed step ``K_t = max(K_min, K_0·α^(n/n_s))`` after ``n`` updates (Sparta Eq. 9)."""
    return max(cfg.k_min, cfg.k0 * cfg.alpha ** (n / cfg.n_s))


def confidence_factor(r_i: float, r_j: float, sigma_i: float, sigma_j: float,
                      cfg: ReputationConfig = ReputationConfig()) -> float:
    """``max(|Φ(z) − Φ(−z)|, ε)`` with ``z = (R_i − R_j)/sqrt(σ_i² + σ_j²)`` (Sparta Eq. 9).

    ``Φ(z) − Φ(−z) = erf(z/√2)``; the factor is symmetric in ``i, j`` and grows with the
    reputation gap, so equal reputations move by the floor ``ε`` only.
    """
    z = (r_i - r_j) / math.sqrt(sigma_i**2 + sigma_j**2)
    return max(abs(math.erf(z / math.sqrt(2.0))), cfg.epsilon)


def rating_delta(r_i: float, r_j: float, sigma_i: float, sigma_j: float, s_i: float, s_j: float, k: float,
                 cfg: ReputationConfig = ReputationConfig()) -> float:
    """Change of ``R_i`` after a duel with ``j`` (Sparta Eq. 9), before the floor:
    ``(K_t/λ)·(s̄_i − s̄_j)·tanh(σ_i)·max(|Φ(z) − Φ(−z)|, ε)``.

    Args:
        r_i, r_j: reputations before the duel; sigma_i, sigma_j: their deviations.
        s_i, s_j: reputation-weighted judge scores of i's and j's answers (1–10).
        k: the step ``K_t`` (:func:`k_factor`).
    """
    return (k / cfg.lam) * (s_i - s_j) * math.tanh(sigma_i) * confidence_factor(r_i, r_j, sigma_i, sigma_j, cfg)


def deviation(deltas: list[float], cfg: ReputationConfig = ReputationConfig()) -> float:
    """``σ`` of a model: population std of its last ``W`` deltas, at least ``σ_min``; the initial
    ``σ`` while it has fewer than two deltas (Sparta's code)."""
    recent = deltas[-cfg.window:]
    if len(recent) < 2:
        return cfg.initial_sigma
    return max(cfg.sigma_min, float(np.std(recent)))


class Reputation:
    """Reputations of a pool's models, updated after each duel (Sparta Eq. 9).

    >>> rep = Reputation()
    >>> rep.rating("a")
    100.0
    """

    def __init__(self, config: ReputationConfig = ReputationConfig(), state: ReputationState | None = None):
        self.config = config
        state = state or ReputationState(ratings={}, deltas={}, updates=0)
        self._ratings = dict(state["ratings"])
        self._deltas = {m: list(d)[-config.window:] for m, d in state["deltas"].items()}
        self.updates = int(state["updates"])

    def rating(self, model: str) -> float:
        return self._ratings.get(model, self.config.initial)

    def sigma(self, model: str) -> float:
        return deviation(self._deltas.get(model, []), self.config)

    def ratings(self, models: list[str]) -> dict[str, float]:
        """Name → reputation for ``models`` (the initial value for newcomers)."""
        return {m: self.rating(m) for m in models}

    def update(self, i: str, j: str, s_i: float, s_j: float) -> tuple[float, float]:
        """Apply one duel between ``i`` and ``j`` with aggregated scores ``s_i``, ``s_j``.

        Both changes use the ratings and deviations from before the duel; a rating never
        falls below ``floor``. A tie applies (and records) a zero change.

        Returns:
            The applied changes ``(ΔR_i, ΔR_j)`` (after the floor).
        """
        if i == j:
            raise InputError(f"a model cannot duel itself ({i!r})")
        self.updates += 1
        k = k_factor(self.updates, self.config)
        r_i, r_j, sig_i, sig_j = self.rating(i), self.rating(j), self.sigma(i), self.sigma(j)
        applied = []
        for me, r_me, r_other, sig_me, sig_other, s_me, s_other in (
            (i, r_i, r_j, sig_i, sig_j, s_i, s_j), (j, r_j, r_i, sig_j, sig_i, s_j, s_i)
        ):
            new = max(self.config.floor, r_me + rating_delta(r_me, r_other, sig_me, sig_other, s_me, s_other, k,
                                                             self.config))
            self._ratings[me] = new
            history = self._deltas.setdefault(me, [])
            history.append(new - r_me)
            del history[: -self.config.window]
            applied.append(new - r_me)
        return applied[0], applied[1]

    def state(self) -> ReputationState:
        return ReputationState(ratings=dict(self._ratings), deltas={m: list(d) for m, d in self._deltas.items()},
                               updates=self.updates)
