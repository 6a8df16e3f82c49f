"""The PNG figures of Agora's reports, drawn with matplotlib (Agg backend, no display needed).

``agora report diversity``'s heatmaps and ``agora select``'s regret curves are here; ``agora bench``
draws its accuracy-against-tokens plot in :mod:`agora.runs.report`, beside the report it plots
(a plot of the report's data, not of the trace store).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from agora.agents.panel import NO_PARTNER, DiversityReport


def heatmap(matrix: np.ndarray, rows: list[str], cols: list[str], title: str, label: str, path: Path,
             axes: tuple[str, str], counts: np.ndarray | None = None) -> None:
    """One annotated heatmap PNG at ``path``: ``matrix`` (rows × cols; NaN cells left blank) on a
    colour scale from 0 to its largest finite value, each cell labelled with its value (and
    ``n=`` from ``counts``); ``axes`` = (x label, y label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    longest = max(len(r) for r in rows)  # room for the row labels and the colour bar, in inches
    fig, ax = plt.subplots(figsize=(2.7 + 0.09 * longest + 1.2 * len(cols), 1.6 + 0.6 * len(rows)))
    finite = matrix[np.isfinite(matrix)]
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0  # rates and distances are >= 0
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap="viridis", aspect="auto", vmin=0.0, vmax=top)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    for i, j in itertools.product(range(len(rows)), range(len(cols))):
        if np.isfinite(matrix[i, j]):
            text = f"{matrix[i, j]:.2f}" + (f"\nn={int(counts[i, j])}" if counts is not None else "")
            bright = image.norm(matrix[i, j]) > 0.6
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="black" if bright else "white")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_heatmaps(report: DiversityReport, out: Path) -> list[Path]:
    """``hedging_by_partner.png`` (speaker × partner mean hedging rate, blank where no data) and
    ``distance_matrix.png`` (behavioural distances) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    partners = [m for m in report.models if any(c.partner == m for c in report.cells)]
    partners += sorted({c.partner for c in report.cells if c.partner and c.partner not in partners})
    cols = partners + [None]
    hedge = np.full((len(report.models), len(cols)), np.nan)
    n = np.zeros_like(hedge)
    for c in report.cells:
        i, j = report.models.index(c.speaker), cols.index(c.partner)
        hedge[i, j], n[i, j] = c.cues["hedging"].mean, c.turns
    paths = [out / "hedging_by_partner.png", out / "distance_matrix.png"]
    heatmap(hedge, report.models, [p or NO_PARTNER for p in cols],
             "Hedging cues per 100 tokens, speaker × partner", "hedges / 100 tokens", paths[0],
             ("partner (whose answer the speaker saw)", "speaker"), n)
    heatmap(report.distance, report.models, report.models, "Behavioural distance", "distance", paths[1],
             ("model", "model"))
    return paths


def plot_regret(curves: dict[str, np.ndarray], session: np.ndarray, path: Path, title: str = "") -> None:
    """Mean cumulative regret vs round of each policy (band: ± one standard error over seeds), and
    the session's own curve. ``curves``: name → ``(seeds, rounds)``; ``session``: ``(rounds_used,)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, c in curves.items():
        t = np.arange(1, c.shape[1] + 1)
        mean = c.mean(axis=0)
        se = c.std(axis=0, ddof=1) / np.sqrt(c.shape[0]) if c.shape[0] > 1 else np.zeros_like(mean)
        ax.plot(t, mean, label=f"{name} (mean of {c.shape[0]})")
        ax.fill_between(t, mean - se, mean + se, alpha=0.2)
    if session.size:
        ax.plot(np.arange(1, session.size + 1), session, "k.--", label="this session")
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative regret")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
