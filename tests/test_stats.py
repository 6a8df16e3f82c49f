"""The statistics module (:mod:`agora.agents.stats`) against hand-computed values, and the rule that
each interval and test has one implementation in the code base."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from agora.agents.stats import (
    bootstrap_ci,
    macro_bootstrap_ci,
    mcnemar_exact,
    mean_ci,
    mean_difference,
    paired_bootstrap_ci,
    proportion_ci,
    proportion_difference,
    t_mean_ci,
)

ROOT = Path(__file__).resolve().parents[1]
Z95 = 1.959964


def test_mcnemar_exact_on_a_known_table():
    # 2×2 table: both right 30, only A right 2, only B right 9, both wrong 19. Only the discordant
    # cells count: n = 11, P(X ≤ 2) = (C(11,0) + C(11,1) + C(11,2)) / 2¹¹ = (1 + 11 + 55) / 2048.
    assert mcnemar_exact(2, 9) == 2 * 67 / 2048 == 0.0654296875
    assert mcnemar_exact(9, 2) == mcnemar_exact(2, 9)          # symmetric
    assert mcnemar_exact(5, 0) == 0.0625                        # 2 · 0.5⁵
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 3)


def test_mcnemar_exact_equals_scipys_binomial_test():
    binomtest = pytest.importorskip("scipy.stats").binomtest
    for wins, losses in [(0, 1), (1, 4), (7, 2), (40, 55), (100, 130)]:
        assert mcnemar_exact(wins, losses) == pytest.approx(binomtest(wins, wins + losses, 0.5).pvalue, rel=1e-12)


def test_wilson_interval_for_33_of_200():
    # p̂ = 0.165, z² = 3.841459: centre = (0.165 + z²/400) / (1 + z²/200) = 0.171313,
    # half = z·√(0.165·0.835/200 + z²/160000) / (1 + z²/200) = 0.051345  →  [0.11997, 0.22266].
    share, lo, hi = proportion_ci(33, 200)
    assert share == 0.165
    assert lo == pytest.approx(0.11997, abs=1e-5) and hi == pytest.approx(0.22266, abs=1e-5)
    assert proportion_ci(0, 4)[1] == 0.0 and proportion_ci(4, 4)[2] == 1.0
    assert all(math.isnan(v) for v in proportion_ci(0, 0))


def test_newcombe_difference():
    d, lo, hi = proportion_difference(56, 70, 48, 80)  # Newcombe (1998), example (a), method 10: [0.0524, 0.3339]
    assert d == pytest.approx(0.2) and lo == pytest.approx(0.0524, abs=1e-3) and hi == pytest.approx(0.3339, abs=1e-3)


def test_bootstrap_percentiles_on_a_fixed_seed():
    # x = [1, 1, 1, 0, 0]: a resample's sum is Binomial(5, 0.6). P(S ≤ 0) = 0.010 and P(S ≤ 1) = 0.087, so the
    # 2.5 % quantile is 1/5; P(S ≤ 4) = 0.922, so the 97.5 % quantile is 5/5. With 2000 resamples (seed 0)
    # the empirical quantiles land on those values.
    assert bootstrap_ci([1, 1, 1, 0, 0]) == (0.6, 0.2, 1.0)
    assert bootstrap_ci([1, 0, 1, 1, 0, 1, 0, 1, 1, 1], seed=0) == (0.7, 0.4, 0.9)
    assert bootstrap_ci([1, 1, 1, 1]) == (1.0, 1.0, 1.0)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_paired_and_macro_bootstrap():
    x, y = [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]
    assert paired_bootstrap_ci(x, y) == bootstrap_ci([1, 1, 1, 0, 0])  # the bootstrap of the differences
    assert paired_bootstrap_ci(x, x) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same questions"):
        paired_bootstrap_ci([1, 0], [1])
    assert macro_bootstrap_ci([[1, 1], [0, 0, 0]]) == (0.5, 0.5, 0.5)  # each task keeps its weight, not 2/5
    assert macro_bootstrap_ci([[1, 0], []])[0] == 0.5


def test_normal_mean_and_welch_difference():
    mean, lo, hi = mean_ci([2.0, 4.0, 6.0])  # s = 2, half = z · 2 / √3 = 2.2632
    assert mean == 4.0 and hi - mean == pytest.approx(Z95 * 2 / math.sqrt(3), abs=1e-5) and mean - lo == pytest.approx(hi - mean)
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    mean, lo, hi = t_mean_ci([2.0, 4.0, 6.0])  # t(2 df, 0.975) = 4.302653, half = 4.302653 · 2 / √3 = 4.9683
    assert mean == 4.0 and hi - mean == pytest.approx(4.302653 * 2 / math.sqrt(3), abs=1e-5)
    assert t_mean_ci([5.0]) == (5.0, 5.0, 5.0) and all(math.isnan(v) for v in t_mean_ci([]))
    # a = [1, 2, 3], b = [2, 4, 6]: s_a² = 1, s_b² = 4, half = z · √(1/3 + 4/3) = 2.5303
    d, lo, hi = mean_difference([1, 2, 3], [2, 4, 6])
    assert d == -2.0 and hi - d == pytest.approx(Z95 * math.sqrt(5 / 3), abs=1e-5)
    assert all(math.isnan(v) for v in mean_difference([1.0], [1.0, 2.0]))


def _code_files() -> list[Path]:
    """Every tracked-looking Python file of the package layers, benchmarks and examples (not tests, not .venv)."""
    files: list[Path] = []
    for folder in sorted(ROOT.iterdir()):
        if not folder.is_dir() or folder.name.startswith(".") or folder.name in {"tests", "docs"} \
                or folder.name.endswith(".egg-info"):
            continue
        files += [p for p in folder.rglob("*.py") if ".venv" not in p.parts and "site-packages" not in p.parts]
    return files


@pytest.mark.parametrize("pattern, home", [
    (r"def\s+\w*mcnemar\w*\s*\(", "agents/stats.py"),
    (r"def\s+\w*(wilson|proportion_ci)\w*\s*\(", "agents/stats.py"),
    (r"def\s+\w*bootstrap\w*\s*\(", "agents/stats.py"),
    (r"def\s+\w*(mean_ci|mean_difference|proportion_difference)\s*\(", "agents/stats.py"),
])
def test_one_implementation_in_the_code_base(pattern, home):
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _code_files()
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if re.search(pattern, line, re.IGNORECASE)]
    assert {f.rsplit(":", 1)[0] for f in found} == {home}, f"{pattern} is defined outside {home}: {found}"
    if "mcnemar" in pattern:
        assert len(found) == 1, found
