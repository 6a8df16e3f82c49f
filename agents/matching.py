"""Who duels whom: Sparta's and Stackelberg's matchmaking.

Sources (``shared/docs/protocols.md`` §2): Sparta (Jiang et al., arXiv 2506.04721): the first model
is drawn uniformly; with probability ``p_rand`` its opponent is uniform, otherwise uniform among
the ``n_opp`` models closest in reputation. Stackelberg (Hahn et al., arXiv 2609.39076, App. C):
the active model goes round-robin; the opponent's probability is a Gaussian kernel on the
normalised reputation gap ``ĝ`` around a target ``g*`` that moves from far opponents (1) to near
peers (0) over the iterations, mixed with a uniform opponent with probability ``p_rand``.

Each rule is a function returning the full opponent distribution, so it can be checked by hand;
:class:`Matcher` samples from it.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Mapping, Sequence

import numpy as np
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.exp3 import annealed
from agora.models.validation import Count, Number, settings

Mode = Literal["sparta", "stackelberg"]


@settings
class MatchConfig:
    """Matchmaking settings; defaults from protocols.md §2.

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    p_rand: Annotated[float, Number(0.0, 1.0)] = 0.2
    """Probability of a uniformly random opponent (both modes)."""
    n_opp: Annotated[int, Count(1)] = 3
    """Sparta: the opponent is drawn among the ``n_opp`` models closest in reputation."""
    sigma_g: Annotated[float, Number(0.0, low_open=True)] = 0.15
    """Stackelberg: width ``σ_g`` of the kernel on the normalised gap."""


def _opponents(active: str, ratings: Mapping[str, float]) -> list[str]:
    if active not in ratings:
        raise InputError(f"active model {active!r} has no rating")
    others = [m for m in ratings if m != active]
    if not others:
        raise InputError("a duel needs at least two models")
    return others


def sparta_opponent_probabilities(active: str, ratings: Mapping[str, float],
                                  cfg: MatchConfig = MatchConfig()) -> dict[str, float]:
    """Sparta: ``p(j) = p_rand/(m−1) + (1−p_rand)·[j among the n_opp closest]/n_closest``.

    ``ratings`` maps every pool model (in pool order) to its reputation; closeness ties are broken
    by pool order.
    """
    others = _opponents(active, ratings)
    closest = sorted(others, key=lambda m: abs(ratings[m] - ratings[active]))[: cfg.n_opp]
    return {m: cfg.p_rand / len(others) + (1 - cfg.p_rand) * (m in closest) / len(closest) for m in others}


def normalised_gaps(active: str, ratings: Mapping[str, float]) -> dict[str, float]:
    """``ĝ_ij = |R_i − R_j| / max_{k≠i} |R_i − R_k|`` for each opponent ``j`` (all 0 when every
    opponent has the active model's reputation)."""
    others = _opponents(active, ratings)
    gaps = {m: abs(ratings[active] - ratings[m]) for m in others}
    widest = max(gaps.values())
    return {m: (g / widest if widest > 0 else 0.0) for m, g in gaps.items()}


def stackelberg_opponent_probabilities(active: str, ratings: Mapping[str, float], g_star: float,
                                       cfg: MatchConfig = MatchConfig()) -> dict[str, float]:
    """Stackelberg: ``p(j) = p_rand/(m−1) + (1−p_rand)·κ_j/Σκ`` with
    ``κ_j = exp(−(ĝ_ij − g*)²/(2σ_g²))``."""
    gaps = normalised_gaps(active, ratings)
    kernel = {m: math.exp(-((g - g_star) ** 2) / (2 * cfg.sigma_g**2)) for m, g in gaps.items()}
    total = sum(kernel.values())
    return {m: cfg.p_rand / len(gaps) + (1 - cfg.p_rand) * k / total for m, k in kernel.items()}


def match_target_gap(t: int, iterations: int) -> float:
    """Stackelberg matcher's target ``g* = 1 − t/(T−1)``: far opponents early, near peers late."""
    return annealed(t, iterations, 1.0, 0.0)


class Match(TypedDict):
    """One pairing."""

    active: str
    """The model whose turn it is (first follower)."""
    opponent: str
    opponent_probability: float
    """Probability the rule gave the drawn opponent."""
    probabilities: dict[str, float]
    """The opponent distribution the draw used."""


class Matcher:
    """Draws the two followers of a duel.

    Args:
        mode: ``sparta`` (uniform active model, closest-reputation opponents) or ``stackelberg``
            (round-robin active model, annealed-gap kernel).
        config: settings.
    """

    def __init__(self, mode: Mode, config: MatchConfig = MatchConfig()):
        if mode not in ("sparta", "stackelberg"):
            raise InputError(f"mode must be 'sparta' or 'stackelberg', got {mode!r}")
        self.mode = mode
        self.config = config

    def pick(self, models: Sequence[str], ratings: Mapping[str, float], *, duel_number: int, iteration: int,
             iterations: int, rng: np.random.Generator) -> Match:
        """Draw ``(active, opponent)`` among ``models`` (pool order) given their ``ratings``.

        Args:
            duel_number: duels played before this one in the run (Stackelberg's round-robin).
            iteration, iterations: ``t`` and ``T`` (Stackelberg's ``g*`` schedule).
        """
        models = list(models)
        if len(models) < 2:
            raise InputError("a duel needs at least two models")
        table = {m: ratings[m] for m in models}
        if self.mode == "stackelberg":
            active = models[duel_number % len(models)]
            probs = stackelberg_opponent_probabilities(active, table, match_target_gap(iteration, iterations),
                                                       self.config)
        else:
            active = models[int(rng.integers(len(models)))]
            probs = sparta_opponent_probabilities(active, table, self.config)
        names = list(probs)
        opponent = names[int(rng.choice(len(names), p=np.array([probs[m] for m in names])))]
        return Match(active=active, opponent=opponent, opponent_probability=probs[opponent], probabilities=probs)
