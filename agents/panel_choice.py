"""Behavioural distance between models and the panel of size p that maximises it, beside the
family-label-only distance (:mod:`agora.agents.panel`; source: arXiv 2606.20632, protocols.md §5,
reconstructed).
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Mapping, Sequence

import numpy as np
from agora.tasks.errors import InputError


def behavioural_distance(features: np.ndarray, agreement: np.ndarray) -> np.ndarray:
    """Pairwise behavioural distance between models, in [0, 1].

    ``d(a, b) = sqrt( (Σ_k δ_k(a, b)² + (1 − A_ab)²) / c_ab )`` with
    ``δ_k(a, b) = |x_ak − x_bk| / (max_m x_mk − min_m x_mk)``: each feature (cue rates, mean
    length) min–max normalised over the pool, ``A_ab`` the answer agreement rate, and ``c_ab`` the
    number of terms present. A feature constant over the pool is left out; a ``nan`` feature or
    agreement leaves its term out for the pairs it touches; a pair with no term gets ``nan``.
    (Our definition: the paper compares behaviour vectors without fixing a metric.)

    Args:
        features: ``m×K`` feature values (``nan`` = unknown).
        agreement: ``m×m`` agreement rates in [0, 1] (``nan`` = no shared question).

    Returns:
        ``m×m`` symmetric matrix with a zero diagonal.
    """
    x = np.asarray(features, dtype=float)
    a = np.asarray(agreement, dtype=float)
    m = x.shape[0]
    if a.shape != (m, m):
        raise InputError(f"agreement must be {m}x{m}, got {a.shape}")
    if m == 0:
        return np.zeros((0, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-nan feature: no span, left out
        span = np.nanmax(x, axis=0) - np.nanmin(x, axis=0)
    keep = np.isfinite(span) & (span > 0)
    scaled = x[:, keep] / span[keep]
    diff = scaled[:, None, :] - scaled[None, :, :]
    sq = diff**2
    terms = np.isfinite(sq).sum(axis=2) + np.isfinite(a)
    total = np.nansum(sq, axis=2) + np.where(np.isfinite(a), (1 - a) ** 2, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.sqrt(total / terms)
    np.fill_diagonal(d, 0.0)
    return d


def panel_total(distance: np.ndarray, members: Sequence[int]) -> float:
    """Total pairwise distance ``Σ_{i<j ∈ S} D_ij`` of a panel ``S`` (``nan`` counts as 0)."""
    d = np.nan_to_num(np.asarray(distance, dtype=float))
    idx = list(members)
    return float(d[np.ix_(idx, idx)].sum() / 2)


def optimal_panels(distance: np.ndarray, size: int, *, max_exact: int = 200_000,
                   tol: float = 1e-9) -> tuple[list[tuple[int, ...]], bool]:
    """Panels of ``size`` members maximising :func:`panel_total`.

    Exhaustive when there are at most ``max_exact`` candidate panels: returns every optimal panel
    (totals within ``tol`` of the best), in lexicographic index order, and ``True``. Otherwise a
    greedy start (the farthest pair, then the member adding most) improved by single swaps until
    none helps: one panel and ``False``.

    Raises:
        ValueError: ``size`` outside ``[1, m]``.
    """
    d = np.nan_to_num(np.asarray(distance, dtype=float))
    m = d.shape[0]
    if not 1 <= size <= m:
        raise InputError(f"panel size must be in [1, {m}], got {size}")
    if math.comb(m, size) <= max_exact:
        combos = np.array(list(itertools.combinations(range(m), size)), dtype=int).reshape(-1, size)
        totals = np.zeros(len(combos))
        for i, j in itertools.combinations(range(size), 2):
            totals += d[combos[:, i], combos[:, j]]
        best = totals.max()
        ties = combos[totals >= best - tol * max(1.0, abs(best))]
        return [tuple(int(v) for v in row) for row in ties], True
    i, j = np.unravel_index(np.argmax(d), d.shape)
    panel = sorted({int(i), int(j)})
    while len(panel) < size:
        gain = d[:, panel].sum(axis=1)
        gain[panel] = -np.inf
        panel = sorted(panel + [int(np.argmax(gain))])
    improved = True
    while improved:
        improved = False
        current = panel_total(d, panel)
        for pos, out in itertools.product(range(size), range(m)):
            if out in panel:
                continue
            trial = sorted(panel[:pos] + [out] + panel[pos + 1:])
            if panel_total(d, trial) > current + tol:
                panel, improved = trial, True
                break
    return [tuple(panel)], False


def family_distance(names: Sequence[str], families: Mapping[str, str | None]) -> np.ndarray:
    """``m×m`` 0/1 matrix: 1 where two models' family labels differ (a missing label counts as
    the model's own name, i.e. a family of its own)."""
    labels = [families.get(n) or n for n in names]
    return np.array([[float(a != b) for b in labels] for a in labels])
