"""How each figure of the bench report reads: one function per kind of figure (an accuracy with its
CI, a difference in pp, a p-value, tokens per question, COMED's thresholds, a claim's line), used
by ``bench.md`` (:func:`agora.runs.report.report_markdown`) and by the console summary of
``agora bench`` and ``agora bench --report-only`` (:mod:`agora.cli.bench`), so that a figure reads
the same, to the same decimals, in both.
"""

from __future__ import annotations

from typing import Any, Sequence


def fmt_pct(x: float | None) -> str:
    """An accuracy, share or difference on the 0..1 scale as % (or pp) with one decimal:
    ``0.6667`` → ``66.7``; ``-`` for ``None`` or NaN."""
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def fmt_ci(lo: float, hi: float) -> str:
    """A 95 % CI on the 0..1 scale as ``[lo, hi]`` in % with one decimal; ``-`` when NaN."""
    return "-" if lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def fmt_num(x: float | None, digits: int = 2) -> str:
    """A per-question cost (calls, samples, seconds) with ``digits`` decimals; ``-`` for ``None`` or NaN."""
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def fmt_tokens(x: float | None) -> str:
    """Generated tokens per question, one decimal: ``12.25`` → ``12.2`` (as Python rounds the float)."""
    return fmt_num(x, 1)


def fmt_p(p: float | None) -> str:
    """A McNemar p-value: 3 significant digits, or ``1.2e-05`` form below 0.001; ``-`` when unpaired."""
    return "-" if p is None else (f"{p:.3g}" if p >= 0.001 else f"{p:.1e}")


def fmt_few(entry: dict[str, Any]) -> str:
    """`` †`` after a figure on too few questions (``entry["too_few"]``), else ``""``."""
    return " †" if entry.get("too_few") else ""


def fmt_accuracy(entry: dict[str, Any]) -> str:
    """A cell's (or macro row's) accuracy with its CI and the too-few mark: ``66.7 [41.7, 90.0] †``."""
    return f"{fmt_pct(entry['accuracy'])} {fmt_ci(entry['ci_low'], entry['ci_high'])}{fmt_few(entry)}"


def fmt_thresholds(t: dict[str, float]) -> str:
    """COMED's thresholds, 4 significant digits: ``τ_hi = 0.6667, τ_lo = 0.3333, m_min = 0``."""
    return f"τ_hi = {t['tau_hi']:.4g}, τ_lo = {t['tau_lo']:.4g}, m_min = {t['m_min']:.4g}"


def single_model_rows(report: dict[str, Any], tasks: Sequence[str]) -> list[tuple[dict[str, Any], list[str]]]:
    """Each pool model's one-sample figures: its macro entry and its formatted cell per task
    (``"-"`` where it has none), in the report's order."""
    rows = []
    for s in report["macro_single_models"]:
        row = []
        for t in tasks:
            c = next((x for x in report["single_models"] if x["task"] == t and x["model"] == s["model"]), None)
            row.append("-" if c is None else fmt_accuracy(c))
        rows.append((s, row))
    return rows


def principal_line(report: dict[str, Any], quote: str = "") -> str | None:
    """Who answered for ALIGN when a model principal did (the bench's ``settings.align.principal``):
    ``ALIGN's answers are the model principal agg's: ...`` (the name between ``quote``s: a backtick
    in ``bench.md``); ``None`` for ALIGN's committed utility rule (a bench without ``--principal``)
    or a bench without ALIGN."""
    name = ((report.get("settings") or {}).get("align") or {}).get("principal")
    if not name:
        return None
    return (f"ALIGN's answers are the model principal {quote}{name}{quote}'s: it reads each question and the agents' "
            "proposals and answers (one more call per question, counted in align's cost), in place of the "
            "utility rule; the other ALIGN methods use no principal")


def any_too_few(report: dict[str, Any]) -> bool:
    return any(c.get("too_few") for key in ("cells", "macro", "single_models", "macro_single_models")
               for c in report.get(key) or [])


def claim_qualifier(claim: dict[str, Any]) -> str:
    """What a claim's verdict rests on besides its value, as ``"; ..."`` (``""`` when nothing): COMED's
    share of the dense method's calls and its rescues vs harms, and the claim's note (e.g. a best single
    model picked on test questions). The same words on the console and in ``bench.md``."""
    extra = ""
    if "calls_ratio" in claim:
        extra = f"; calls {fmt_pct(claim['calls_ratio'])} % of it, rescues {claim['rescues']} vs harms {claim['harms']}"
    if claim.get("note"):
        extra += f"; {claim['note']}"
    return extra


def claim_lines(report: dict[str, Any]) -> list[str]:
    """The report's claims as console lines: ``claim; qualifier: value pp [CI] (n questions): holds``."""
    return [f"{c['claim']}{claim_qualifier(c)}: {fmt_pct(c['value'])} pp {fmt_ci(c['ci_low'], c['ci_high'])} "
            f"({c.get('questions', '?')} paired questions): {c['holds']}" for c in report.get("claims") or []]
