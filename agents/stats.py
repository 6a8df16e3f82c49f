"""Statistics shared by protocols, reports, benches and training (no I/O): every interval and test
of the project has its one home here.

Intervals (each returns ``(estimate, low, high)``; ``(nan, nan, nan)`` where it is undefined):

* :func:`bootstrap_ci`: a mean and its percentile-bootstrap interval (Efron & Tibshirani 1993, §13.3).
* :func:`paired_bootstrap_ci`: ``mean(x) − mean(y)`` on the same questions, pairs resampled together.
* :func:`macro_bootstrap_ci`: the macro-average over groups (tasks), stratified bootstrap.
* :func:`proportion_ci`: a share with the Wilson score interval (Wilson 1927).
* :func:`proportion_difference`: two independent shares, Newcombe's hybrid score interval (Newcombe 1998, method 10).
* :func:`mean_ci`: a mean with the normal-approximation (Wald) interval ``± z·s/√n``.
* :func:`t_mean_ci`: a mean of few values with Student's t interval ``± t_{n−1}·s/√n``.
* :func:`mean_difference`: two independent means, Welch's normal interval.
* :func:`phi_ci`: the phi coefficient of two paired 0/1 outcomes (error correlation), paired bootstrap.

Test: :func:`mcnemar_exact`, the two-sided exact McNemar p-value (McNemar 1947; the exact
binomial form, Agresti 2013, §11.1).

Paired comparison: :func:`macro_paired`, two methods' 0/1 outcomes on the same questions of one or
more tasks: the macro difference with its stratified interval, wins, losses and the McNemar p-value.

``level`` is the two-sided confidence level (0.95 for 95 %); ``z`` below is the standard normal
quantile ``Φ⁻¹(1 − (1 − level)/2)`` (1.95996 for 0.95). The bootstrap defaults (2000 resamples, seed 0)
make every interval reproducible.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np
from agora.tasks.errors import InputError

LEVEL = 0.95
"""Default two-sided confidence level."""
RESAMPLES = 2000
"""Default number of bootstrap resamples."""

_NAN3 = (float("nan"), float("nan"), float("nan"))


def _z(level: float) -> float:
    """Standard normal quantile ``Φ⁻¹(1 − (1 − level)/2)``: 1.95996 for ``level = 0.95``."""
    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample variance (``n − 1``) of two or more values."""
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


# ---------------------------------------------------------------------------- bootstrap


def bootstrap_ci(outcomes: Sequence[bool | int | float], *, level: float = LEVEL, resamples: int = RESAMPLES,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``outcomes`` (0/1 correctness, or any real values such as per-response cue rates)
    and its percentile-bootstrap confidence interval.

    The ``resamples`` means of ``n`` outcomes drawn with replacement (seeded generator,
    :func:`numpy.random.default_rng`) give the interval's ends as their ``(1 − level)/2`` and
    ``(1 + level)/2`` quantiles (Efron & Tibshirani 1993, §13.3). Returns ``(mean, low, high)``;
    ``(nan, nan, nan)`` for no outcomes.
    """
    x = np.asarray(outcomes, dtype=float)
    if x.size == 0:
        return _NAN3
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    return float(x.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def paired_bootstrap_ci(x: Sequence[float], y: Sequence[float], *, level: float = LEVEL,
                        resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """``mean(x) − mean(y)`` over paired outcomes (same questions, same order) and its percentile
    bootstrap CI: questions are resampled with replacement, each keeping both of its outcomes, which
    is :func:`bootstrap_ci` of the per-question differences ``x_i − y_i``. ``(nan, nan, nan)`` for no pairs.

    Raises:
        ValueError: ``x`` and ``y`` differ in length.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_bootstrap_ci: {a.size} outcomes against {b.size}; pairs need the same questions")
    return bootstrap_ci(a - b, level=level, resamples=resamples, seed=seed)


def macro_bootstrap_ci(groups: Sequence[Sequence[float]], *, level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = 0) -> tuple[float, float, float]:
    """The macro-average ``(1/G)·Σ_g mean(group_g)`` and its stratified percentile bootstrap CI: each
    group (task) is resampled within itself, so every task keeps its weight (Davison & Hinkley 1997,
    §3.7). Empty groups are left out; ``(nan, nan, nan)`` when all are."""
    kept = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not kept:
        return _NAN3
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for g in kept:
        means += g[rng.integers(0, g.size, size=(resamples, g.size))].mean(axis=1)
    means /= len(kept)
    alpha = (1 - level) / 2
    return (float(np.mean([g.mean() for g in kept])), float(np.quantile(means, alpha)),
            float(np.quantile(means, 1 - alpha)))


# ---------------------------------------------------------------------------- tests


def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs of a paired comparison: ``wins``
    questions only the first method got right (wrong → right), ``losses`` only the second
    (right → wrong). Under H0 a discordant pair is a fair coin, so with ``n = wins + losses`` and
    ``X ~ Bin(n, 1/2)``: ``p = min(1, 2·P(X ≤ min(wins, losses)))`` (McNemar 1947; the exact form,
    Agresti 2013, §11.1; equal to :func:`scipy.stats.binomtest` at 1/2, two-sided). 1.0 without
    discordant pairs. Computed with exact integers, so it holds for any ``n``.

    >>> mcnemar_exact(5, 0)  # 2 · 0.5⁵
    0.0625

    Raises:
        ValueError: a count is negative.
    """
    if wins < 0 or losses < 0:
        raise InputError(f"mcnemar_exact: counts must be >= 0, got {wins}, {losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def macro_paired(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, level: float = LEVEL,
                 resamples: int = RESAMPLES, seed: int = 0) -> dict[str, float | int] | None:
    """Two methods' paired 0/1 outcomes ``(x, y)`` per task (the same questions, in the same order),
    compared: ``diff``, the mean over tasks of ``mean(x) − mean(y)`` (0..1 scale), with its stratified
    bootstrap interval ``ci_low``/``ci_high`` (:func:`macro_bootstrap_ci` of the per-question
    differences; for one task the same draws as :func:`paired_bootstrap_ci`); ``wins`` and
    ``losses``, the questions only ``x`` or only ``y`` got right, over every task; ``p_mcnemar``
    (:func:`mcnemar_exact` on them) and ``questions``, the pairs. Tasks without pairs are left out;
    ``None`` when none has any.

    >>> macro_paired([([1, 1, 0], [0, 1, 0])])["wins"], macro_paired([])
    (1, None)
    """
    kept = [(x, y) for x, y in pairs if len(x)]
    if not kept:
        return None
    wins = sum(u > v for x, y in kept for u, v in zip(x, y))
    losses = sum(u < v for x, y in kept for u, v in zip(x, y))
    d, lo, hi = macro_bootstrap_ci([[u - v for u, v in zip(x, y)] for x, y in kept], level=level,
                                   resamples=resamples, seed=seed)
    return {"diff": d, "ci_low": lo, "ci_high": hi, "wins": wins, "losses": losses,
            "p_mcnemar": mcnemar_exact(wins, losses), "questions": sum(len(x) for x, _ in kept)}


# ---------------------------------------------------------------------------- closed-form intervals


def proportion_ci(successes: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """``(p̂, low, high)`` for ``p̂ = successes/n`` with the Wilson score interval (Wilson 1927):
    ``(p̂ + z²/2n ± z·√(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n)``, clipped to [0, 1];
    ``(nan, nan, nan)`` for ``n = 0``."""
    if n == 0:
        return _NAN3
    z = _z(level)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def proportion_difference(s1: int, n1: int, s2: int, n2: int, level: float = LEVEL) -> tuple[float, float, float]:
    """``(p̂₁ − p̂₂, low, high)`` for two independent shares, Newcombe's hybrid score interval from the
    two Wilson intervals ``[l_i, u_i]`` (Newcombe 1998, method 10):
    ``d − √((p̂₁ − l₁)² + (u₂ − p̂₂)²)`` to ``d + √((u₁ − p̂₁)² + (p̂₂ − l₂)²)``;
    ``(nan, nan, nan)`` when either ``n`` is 0."""
    if n1 == 0 or n2 == 0:
        return _NAN3
    p1, l1, u1 = proportion_ci(s1, n1, level)
    p2, l2, u2 = proportion_ci(s2, n2, level)
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean with a normal-approximation (Wald) interval ``± z·s/√n``
    (sample standard deviation, ``n − 1``); ``(nan, nan, nan)`` for no values, a zero-width interval
    for one."""
    n = len(values)
    if n == 0:
        return _NAN3
    if n == 1:
        one = float(values[0])
        return one, one, one
    mean, var = _mean_var(values)
    half = _z(level) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def t_mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean with Student's t interval ``± t_{n−1, (1+level)/2}·s/√n`` (sample
    standard deviation, ``n − 1``; Student 1908), for a handful of values such as repeated timing rounds;
    ``(nan, nan, nan)`` for no values, a zero-width interval for one."""
    from scipy.stats import t as student_t

    n = len(values)
    if n == 0:
        return _NAN3
    if n == 1:
        one = float(values[0])
        return one, one, one
    mean, var = _mean_var(values)
    half = float(student_t.ppf(1 - (1 - level) / 2, n - 1)) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def mean_difference(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean(a) − mean(b), low, high)`` for two independent samples, Welch's normal interval
    ``± z·√(s_a²/n_a + s_b²/n_b)`` (sample variances, ``n − 1``; Welch 1947, with the normal quantile
    in place of Student's); ``(nan, nan, nan)`` when either has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return _NAN3
    (ma, va), (mb, vb) = _mean_var(a), _mean_var(b)
    half = _z(level) * math.sqrt(va / len(a) + vb / len(b))
    return ma - mb, ma - mb - half, ma - mb + half


def phi_coefficient(x: Sequence[bool | int], y: Sequence[bool | int]) -> float:
    """The phi coefficient of two paired 0/1 outcomes (Pearson's r on binary data; Yule 1912):
    ``(n11·n00 − n10·n01) / √(n1·· n0·· n·1 n·0)`` over the 2×2 table of ``(x_i, y_i)``; with
    ``x``, ``y`` the error indicators of two members, their error correlation. In [−1, 1]; ``nan``
    when a margin is 0 (one of them always or never errs) or there are no pairs.

    >>> phi_coefficient([1, 1, 0, 0], [1, 0, 0, 0])
    0.5773502691896258

    Raises:
        ValueError: ``x`` and ``y`` differ in length.
    """
    if len(x) != len(y):
        raise ValueError(f"phi_coefficient: {len(x)} outcomes against {len(y)}; pairs need the same questions")
    a, b = np.asarray(x, dtype=bool), np.asarray(y, dtype=bool)
    n11, n10 = int(np.sum(a & b)), int(np.sum(a & ~b))
    n01, n00 = int(np.sum(~a & b)), int(np.sum(~a & ~b))
    margins = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    return (n11 * n00 - n10 * n01) / math.sqrt(margins) if margins else float("nan")


def phi_ci(x: Sequence[bool | int], y: Sequence[bool | int], *, level: float = LEVEL, resamples: int = RESAMPLES,
           seed: int = 0) -> tuple[float, float, float]:
    """:func:`phi_coefficient` of the paired outcomes and its percentile-bootstrap CI, the pairs
    resampled together (questions with replacement); resamples where phi is undefined (a margin
    of 0) are left out. ``(nan, nan, nan)`` when phi itself is undefined.

    Raises:
        ValueError: ``x`` and ``y`` differ in length.
    """
    phi = phi_coefficient(x, y)
    if math.isnan(phi):
        return _NAN3
    a, b = np.asarray(x, dtype=bool), np.asarray(y, dtype=bool)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    ra, rb = a[idx], b[idx]
    n11 = (ra & rb).sum(axis=1).astype(float)
    n10 = (ra & ~rb).sum(axis=1).astype(float)
    n01 = (~ra & rb).sum(axis=1).astype(float)
    n00 = (~ra & ~rb).sum(axis=1).astype(float)
    margins = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    ok = margins > 0
    phis = (n11[ok] * n00[ok] - n10[ok] * n01[ok]) / np.sqrt(margins[ok])
    alpha = (1 - level) / 2
    return phi, float(np.quantile(phis, alpha)), float(np.quantile(phis, 1 - alpha))
