"""The Stackelberg leader: EXP3 over the instruction pool, rewarded for informative duels.

Source: Hahn, Feng, Light, Roy, Gonen, Tsvetkov, "Multi-LLM Collaborative Alignment via
Stackelberg Games", arXiv 2609.39076, Section 2 and App. C; formulas and defaults from
``shared/docs/protocols.md`` §2. The leader samples instruction ``k`` with
``p_k = (1−γ)·w_k/Σw + γ/K`` (uniformly in iteration 0), watches the duel's aggregated scores
and rewards instructions whose duels are neither trivial nor hopeless (``r_diff``) and whose
score gap sits near a target that shrinks over the iterations (``r_pref``).

Step size: the paper writes ``η = 1/K`` per duel; the authors' code uses ``γ/K`` once per
iteration. :class:`Exp3Config` takes ``η`` as a parameter (``None`` = ``1/K``) and the leader
reports the value it used (:attr:`Exp3Leader.eta`), which the duel traces record.

Weights live in log space and are renormalised after each update (``Σ w = 1``). Instructions
never updated share one log weight, so :class:`LeaderState` stores only the others (sparse).
"""

from __future__ import annotations

import math
from typing import Annotated, Sequence

import numpy as np
from pydantic import model_validator
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.models.validation import Flag, Number, check_all, settings
from agora.models.studio_schema import studio_schema


@settings
class Exp3Config:
    """Settings of the EXP3 leader and its rewards; defaults from protocols.md §2.

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    gamma: Annotated[float, Number(0.0, 1.0)] = 0.2
    """Exploration share ``γ`` mixed uniformly into the sampling distribution."""
    eta: Annotated[float | None, Number(0.0, low_open=True, optional=True, expected="a finite number > 0 (or None for 1/K)")] = None
    """Step ``η`` of ``log w_k += η·r_k/p_k``; ``None`` = ``1/K`` (the paper's per-duel step)."""
    uniform_first_iteration: Annotated[bool, Flag] = True
    """Iteration 0 samples uniformly (weights are still updated)."""
    s_min: Annotated[float, Number()] = 1.0
    """Lowest judge score."""
    s_max: Annotated[float, Number()] = 10.0
    """Highest judge score."""
    tau_th: Annotated[float, Number()] = 3.0
    """``τ_th``: answers scored below it are noise and earn no difficulty reward."""
    g_start: Annotated[float, Number(0.0, 1.0)] = 0.6
    """Target normalised score gap ``g*`` in iteration 0."""
    g_end: Annotated[float, Number(0.0, 1.0)] = 0.15
    """Target normalised score gap in the last iteration."""
    sigma_r: Annotated[float, Number(0.0, low_open=True)] = 0.15
    """Width ``σ_r`` of the gap kernel of ``r_pref``."""
    lambda_diff: Annotated[float, Number(0.0)] = 0.3
    """Weight ``λ₁`` of ``r_diff``."""
    lambda_pref: Annotated[float, Number(0.0)] = 0.7
    """Weight ``λ₂`` of ``r_pref``."""

    @model_validator(mode="after")
    def _scale(self) -> Exp3Config:
        if not self.s_min < self.s_max:
            raise InputError(f"Exp3Config.s_min must be < s_max, got {self.s_min} and {self.s_max}")
        check_all([("tau_th", Number(self.s_min, self.s_max, low_open=True, high_open=True), self.tau_th)], "Exp3Config")
        return self


def annealed(t: int, iterations: int, start: float, end: float) -> float:
    """Linear schedule over iterations: ``end + (start − end)·(1 − t/(T−1))``.

    ``start`` at ``t = 0``, ``end`` at ``t = T−1``; with ``T = 1`` the only iteration gets
    ``start``. Used for the leader's target gap ``g*_t`` and the Stackelberg matcher's ``g*``.
    """
    if iterations < 1 or not 0 <= t < iterations:
        raise ValueError(f"iteration t={t} is outside 0..{iterations - 1}")
    progress = t / (iterations - 1) if iterations > 1 else 0.0
    return end + (start - end) * (1.0 - progress)


def target_gap(t: int, iterations: int, cfg: Exp3Config = Exp3Config()) -> float:
    """``g*_t = g_end + (g_start − g_end)(1 − t/(T−1))`` (Stackelberg App. C)."""
    return annealed(t, iterations, cfg.g_start, cfg.g_end)


def exp3_probabilities(log_weights: np.ndarray, gamma: float) -> np.ndarray:
    """``p_k = (1−γ)·w_k/Σw + γ/K`` from log weights (shape ``(K,)``), computed stably."""
    w = np.exp(log_weights - log_weights.max())
    return (1.0 - gamma) * w / w.sum() + gamma / len(w)


def r_diff(s: float, cfg: Exp3Config = Exp3Config()) -> float:
    """Difficulty reward of one answer's score: ``(s_max − s)/(s_max − τ_th)`` if ``s ≥ τ_th`` else 0."""
    return (cfg.s_max - s) / (cfg.s_max - cfg.tau_th) if s >= cfg.tau_th else 0.0


def r_pref(s_i: float, s_j: float, g_star: float, cfg: Exp3Config = Exp3Config()) -> float:
    """Preference reward ``exp(−(|s_i − s_j|/(s_max − s_min) − g*)² / (2σ_r²))``: highest when the
    normalised score gap equals the target ``g*``."""
    gap = abs(s_i - s_j) / (cfg.s_max - cfg.s_min)
    return math.exp(-((gap - g_star) ** 2) / (2 * cfg.sigma_r**2))


def leader_reward(s_i: float, s_j: float, g_star: float, cfg: Exp3Config = Exp3Config()) -> float:
    """Reward of the instruction of one duel: ``½ Σ_{s ∈ {s_i, s_j}} [λ₁ r_diff(s) + λ₂ r_pref]``.

    Args:
        s_i, s_j: the two answers' reputation-weighted judge scores.
        g_star: the target gap of this iteration (:func:`target_gap`).
    """
    pref = r_pref(s_i, s_j, g_star, cfg)
    return 0.5 * sum(cfg.lambda_diff * r_diff(s, cfg) + cfg.lambda_pref * pref for s in (s_i, s_j))


def exp3_update(log_weights: np.ndarray, k: int, reward: float, p_k: float, eta: float) -> np.ndarray:
    """``log w_k += η·r_k/p_k`` (importance-weighted reward), then renormalise so ``Σ w = 1``.

    Returns new log weights; the input is not modified.
    """
    out = log_weights.copy()
    out[k] += eta * reward / p_k
    top = out.max()
    return out - (top + math.log(np.exp(out - top).sum()))


@studio_schema()
class LeaderState(TypedDict):
    """The leader's weights, sparse: instructions absent from ``log_w`` have ``log_w_rest``."""

    log_w_rest: float
    """Normalised log weight shared by every instruction never updated."""
    log_w: dict[str, float]
    """Instruction id → normalised log weight, for the instructions whose weight moved."""


class Exp3Leader:
    """EXP3 over ``K`` instructions (ids), with the Stackelberg rewards.

    Args:
        ids: the instruction ids, in pool order (``K = len(ids)``).
        config: settings.
        state: weights to continue from (default: uniform).

    Raises:
        ValueError: no instructions, duplicate ids, or a state naming an unknown id.
    """

    def __init__(self, ids: Sequence[str], config: Exp3Config = Exp3Config(), state: LeaderState | None = None):
        if not ids:
            raise InputError("the leader needs at least one instruction")
        self.ids = tuple(ids)
        self._index = {name: i for i, name in enumerate(self.ids)}
        if len(self._index) != len(self.ids):
            raise InputError("instruction ids must be unique")
        self.config = config
        k = len(self.ids)
        if state is None:
            self.log_weights = np.full(k, -math.log(k))
        else:
            self.log_weights = np.full(k, float(state["log_w_rest"]))
            for name, value in state["log_w"].items():
                if name not in self._index:
                    raise InputError(f"leader state names instruction {name!r}, which is not in the pool")
                self.log_weights[self._index[name]] = float(value)

    @property
    def eta(self) -> float:
        """The step in use: ``config.eta``, or ``1/K``."""
        return self.config.eta if self.config.eta is not None else 1.0 / len(self.ids)

    def probabilities(self, iteration: int) -> np.ndarray:
        """The sampling distribution over instructions (shape ``(K,)``) in ``iteration``."""
        if iteration == 0 and self.config.uniform_first_iteration:
            return np.full(len(self.ids), 1.0 / len(self.ids))
        return exp3_probabilities(self.log_weights, self.config.gamma)

    def sample(self, rng: np.random.Generator, iteration: int) -> tuple[int, float]:
        """Draw an instruction index and the probability it had."""
        p = self.probabilities(iteration)
        k = int(rng.choice(len(p), p=p))
        return k, float(p[k])

    def update(self, k: int, reward: float, p_k: float) -> None:
        """EXP3 step for the sampled instruction ``k`` drawn with probability ``p_k``."""
        self.log_weights = exp3_update(self.log_weights, k, reward, p_k, self.eta)

    def state(self) -> LeaderState:
        """Sparse weights: the most common log weight as ``log_w_rest``, the others by id."""
        values, counts = np.unique(self.log_weights, return_counts=True)
        rest = float(values[int(np.argmax(counts))])
        return LeaderState(log_w_rest=rest, log_w={self.ids[i]: float(v) for i, v in enumerate(self.log_weights)
                                                   if v != rest})
