"""The bench report's members section in ``bench.md``: each member's row per task and the pool's oracle.

Renders what :func:`agora.traces.bench_members.members_report` put in the report (``members``,
``pool_oracle``), with the formatters the rest of the page uses (:mod:`agora.runs.report_format`).
"""

from __future__ import annotations

from typing import Any

from agora.runs.report_format import fmt_ci, fmt_few, fmt_num, fmt_pct


def _acc(value: float | None, lo: float | None, hi: float | None, few: bool | None) -> str:
    if value is None:
        return "-"
    return f"{fmt_pct(value)} {fmt_ci(lo, hi)}{fmt_few({'too_few': few})}"


def members_markdown(report: dict[str, Any]) -> list[str]:
    """The section's lines (none when the report has no member rows)."""
    members, oracle = report.get("members") or [], report.get("pool_oracle") or []
    if not members and not oracle:
        return []
    lines = ["", "## Members and the pool's oracle", "",
             "A member is a pool entry, weights × recipe (two recipes on one weights file are two members). "
             "One sample: its expected one-sample accuracy, the mean share of its samples that are right (its share "
             "of the shared pool; a bench without one: its ALIGN candidates). Self-consistency: the plurality of its "
             "own share of the shared pool (no call of its own). The oracle: the share of questions on which some "
             "member's sample in the shared pool is right, the ceiling any per-question selection among these "
             "samples can reach.", "",
             "| member | task | questions | one sample | self-consistency | samples (vote) |", "|---|---|---|---|---|---|"]
    for m in members:
        lines.append(f"| `{m['member']}` | {m['task']} | {m['questions']} | "
                     f"{_acc(m['accuracy'], m['ci_low'], m['ci_high'], m['too_few'])} | "
                     f"{_acc(m['sc_accuracy'], m['sc_ci_low'], m['sc_ci_high'], m['sc_too_few'])} | "
                     f"{fmt_num(m['sc_samples_per_q'], 1)} |")
    if oracle:
        lines += ["", "| pool oracle | questions | any member right |", "|---|---|---|"]
        lines += [f"| {o['task']} | {o['questions']} | {_acc(o['accuracy'], o['ci_low'], o['ci_high'], o['too_few'])} |"
                  for o in oracle]
    return lines
