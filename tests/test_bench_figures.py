"""A bench figure reads the same in ``bench.md`` and in ``agora bench``'s console summary: both print it
with the formatting functions of :mod:`agora.runs.report` (the console printed tokens/q with no
decimal, bench.md with one)."""

from __future__ import annotations

from types import SimpleNamespace

import agora.cli.bench as bench_cli
from agora.runs.report import report_markdown
from agora.runs.report_format import fmt_accuracy, fmt_thresholds, fmt_tokens


def _cell(task: str, method: str, accuracy: float, lo: float, hi: float, tokens: float, too_few: bool) -> dict:
    return {"task": task, "method": method, "accuracy": accuracy, "ci_low": lo, "ci_high": hi, "too_few": too_few,
            "questions": 12, "failed_questions": 0, "method_failed": 0, "missing": 0, "calls_per_q": 1.0,
            "samples_per_q": 4.0, "tokens_per_q": tokens, "model_s_per_q": 0.5, "wall_s_per_q": 0.75}


def _report() -> dict:
    """A one-task, one-method bench report with figures whose rounding shows: 2/3, 12.25 tokens/q, τ = 2/3."""
    cell = _cell("arith", "align", 2 / 3, 0.41666, 0.9, 12.25, True)
    macro = {**cell, "task": "macro", "all_tasks": True}
    return {
        "bench_id": "b1", "complete": True, "generated_at": "2026-12-04T00:00:00+00:00", "level": 0.95,
        "resamples": 1000, "seed": 0, "methods": ["align"], "settings": {},
        "tasks": [{"name": "arith", "path": "arith.jsonl", "format": "gsm8k", "questions": 12,
                   "runs": {"align": "b1:arith:align"}}],
        "cells": [cell], "macro": [macro], "single_models": [], "macro_single_models": [], "paired": [],
        "calibration": [{"scope": "*", "n_anchor": 3, "source": "defaults",
                         "thresholds": {"tau_hi": 2 / 3, "tau_lo": 1 / 3, "m_min": 0.0}}],
        "comed": [], "failed_questions": {}, "sharing": {}, "shared_pool": [], "model_self_consistency": [],
        "claims": [{"claim": "ALIGN − self-consistency ≥ 0", "value": 0.0123, "ci_low": -0.05, "ci_high": 0.0777,
                    "p_mcnemar": 0.5, "questions": 12, "holds": "too few questions"}],
    }


def test_the_formatting_functions_round_as_stated():
    assert fmt_tokens(12.25) == "12.2" and fmt_tokens(12.26) == "12.3" and fmt_tokens(float("nan")) == "-"
    assert fmt_accuracy({"accuracy": 2 / 3, "ci_low": 0.41666, "ci_high": 0.9, "too_few": True}) == "66.7 [41.7, 90.0] †"
    assert fmt_thresholds({"tau_hi": 2 / 3, "tau_lo": 1 / 3, "m_min": 0.0}) == "τ_hi = 0.6667, τ_lo = 0.3333, m_min = 0"


def test_console_summary_and_bench_md_print_each_figure_alike(capsys):
    report = _report()
    md = report_markdown(report)
    files = SimpleNamespace(markdown="bench.md", json="bench.json", png="accuracy_vs_tokens.png")
    capsys.readouterr()
    bench_cli._print_summary(report, files)
    console = capsys.readouterr().out

    # tokens per question: 12.2 in both (the console printed "12")
    assert "| align | arith | 1.00 | 4.00 | 12.2 | 0.50 | 0.75 |" in md
    row = next(line for line in console.splitlines() if "align" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == ["align", "66.7 [41.7, 90.0] †", "66.7 [41.7, 90.0] †", "12.2"]
    assert "| align | 66.7 [41.7, 90.0] † | **66.7** [41.7, 90.0] † |" in md
    # COMED's thresholds and the claim, to the same digits
    assert "- all tasks: τ_hi = 0.6667, τ_lo = 0.3333, m_min = 0 (N = 3); defaults" in md
    assert "COMED thresholds (all tasks): τ_hi = 0.6667, τ_lo = 0.3333, m_min = 0 (N = 3): defaults" in console
    assert "| ALIGN − self-consistency ≥ 0 | 1.2 | [-5.0, 7.8] | 0.5 | 12 | too few questions |" in md
    assert "claim: ALIGN − self-consistency ≥ 0: 1.2 pp [-5.0, 7.8] (12 paired questions): too few questions" in console


def test_console_claims_carry_bench_mds_qualifiers(capsys):
    """A claim's verdict rests on more than its value: COMED's call share and rescues vs harms, and a best
    single model picked on test questions. The console said neither (probe 15); both now say the same."""
    report = _report()
    report["claims"] = [
        {"claim": "COMED ≥ MoA with ≤ 50 % of its calls and rescues > harms", "value": 0.0, "ci_low": -0.1,
         "ci_high": 0.1, "p_mcnemar": 1.0, "questions": 40, "holds": "no", "calls_ratio": 2 / 3, "rescues": 0, "harms": 1},
        {"claim": "best multi-model − best single model ≥ 0", "value": 0.05, "ci_low": 0.01, "ci_high": 0.09,
         "p_mcnemar": None, "questions": 40, "holds": "yes", "note": "picked on the test questions (optimistic for it)"}]
    md = report_markdown(report)
    files = SimpleNamespace(markdown="bench.md", json="bench.json", png="accuracy_vs_tokens.png")
    capsys.readouterr()
    bench_cli._print_summary(report, files)
    console = " ".join(capsys.readouterr().out.split())
    comed = "COMED ≥ MoA with ≤ 50 % of its calls and rescues > harms; calls 66.7 % of it, rescues 0 vs harms 1"
    single = "best multi-model − best single model ≥ 0; picked on the test questions (optimistic for it)"
    assert f"| {comed} | 0.0 | [-10.0, 10.0] |" in md and f"{comed}: 0.0 pp [-10.0, 10.0] (40 paired questions): no" in console
    assert f"| {single} | 5.0 |" in md and f"{single}: 5.0 pp [1.0, 9.0] (40 paired questions): yes" in console


def test_console_has_bench_mds_one_sample_rows_and_per_model_marks(capsys):
    """The claims name the best single model; its one-sample row was only in bench.md, and bench.md's
    per-model self-consistency table left the † off the one-sample figure (probe 15, 4c and 4d)."""
    report = _report()
    one = {"task": "arith", "model": "m-small", "accuracy": 0.5, "ci_low": 0.25, "ci_high": 0.75, "too_few": True}
    report["single_models"] = [one]
    report["macro_single_models"] = [{**one, "task": "macro", "tasks": 1}]
    report["model_self_consistency"] = [{**one, "accuracy": 7 / 12, "samples_per_q": 3}]
    report["settings"] = {"shared": {"k": 3, "models": ["m-small"], "temperature": 0.7, "max_tokens": 16, "shots": 0}}
    md = report_markdown(report)
    files = SimpleNamespace(markdown="bench.md", json="bench.json", png="accuracy_vs_tokens.png")
    capsys.readouterr()
    bench_cli._print_summary(report, files)
    console = capsys.readouterr().out
    assert "| model `m-small` (one sample) | 50.0 [25.0, 75.0] † | **50.0** [25.0, 75.0] † |" in md
    row = next(line for line in console.splitlines() if "one sample" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == ["model m-small (one sample)", "50.0 [25.0, 75.0] †",
                                                          "50.0 [25.0, 75.0] †", ""]
    assert "| `m-small` | arith | 3 | 58.3 [25.0, 75.0] † | 50.0 [25.0, 75.0] † |" in md
