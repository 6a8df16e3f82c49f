"""Statistics shared by protocols and reports (no I/O): the percentile bootstrap."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def bootstrap_ci(outcomes: Sequence[bool | int | float], *, level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``outcomes`` (0/1 correctness, or any real values such as per-response cue rates)
    and its percentile-bootstrap confidence interval.

    Returns ``(mean, low, high)``; ``(nan, nan, nan)`` for no outcomes. Resamples questions with
    replacement ``resamples`` times with a seeded generator, so the interval is reproducible.
    """
    x = np.asarray(outcomes, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    return float(x.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))
