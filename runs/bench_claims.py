"""The claims a bench report makes, and what counts as holding: ALIGN against self-consistency on the
same candidates, the best multi-model method against the best single model, COMED against each dense
collaboration (accuracy, calls and rescues against harms). Each claim is a function of the report's
data, the bench's spec and the runs' per-question data (:mod:`agora.traces.bench`) giving its rows;
:func:`agora.runs.report.claims` measures them all (:data:`CLAIMS`, in the report's order).

A judgment on the data (which methods to compare, what counts as holding), not a reading of it:
``runs``, above ``traces``.
"""

from __future__ import annotations

from typing import Any, Callable

from agora.runs.matched_single import MULTI_MEMBER
from agora.runs.report_format import fmt_num
from agora.traces.bench import expected_gap, macro_pair, model_sc_pair
from agora.traces.bench_data import BenchData
from agora.traces.bench_spec import BenchSpec
from agora.traces.matched_single import matched_pairs
from agora.traces.report import TOO_FEW, too_few

MULTI_MODEL = ("align", "self_consistency", "best_of_n", "comed", "moa", "debate")
"""The multi-model methods claim 2 picks its best from (macro accuracy, every task)."""
DENSE = ("moa", "debate")
"""The dense collaborations COMED is held against in claim 3 when the bench recorded none in its
settings (``settings.comed.baselines``: a bench of the first edition)."""


def _holds(value: float, low: float, bound: float, strict: bool = False) -> str:
    """Whether a claim ``value ≥ bound`` (``> bound`` when ``strict``) holds: ``yes`` when the whole
    CI satisfies it, ``no`` when the estimate does not, else ``undecided``."""
    if value != value:
        return "-"
    if low > bound or (not strict and low >= bound):
        return "yes"
    if value < bound or (strict and value <= bound):
        return "no"
    return "undecided"


def _paired_claim(claim: str, pair: dict[str, Any], *, strict: bool = False, note: str | None = None,
                  **extra: Any) -> dict[str, Any]:
    """One claim row from a paired comparison (``diff``, ``ci_low``, ``ci_high``, ``p_mcnemar``,
    ``questions``): its value and interval, and ``holds`` (:data:`TOO_FEW` on too few questions or a
    degenerate interval, else :func:`_holds` against 0); ``extra`` fields are added as given."""
    row = {"claim": claim, "value": pair["diff"], "ci_low": pair["ci_low"], "ci_high": pair["ci_high"],
           "p_mcnemar": pair["p_mcnemar"], **extra, "questions": pair["questions"],
           "holds": TOO_FEW if too_few(pair["questions"], pair["ci_low"], pair["ci_high"])
           else _holds(pair["diff"], pair["ci_low"], 0.0, strict=strict)}
    if note is not None:
        row["note"] = note
    return row


def _full_macro(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Method → its macro row, for the methods scored on every task."""
    return {m["method"]: m for m in report["macro"] if m["all_tasks"]}


def _align_vs_sc(report: dict[str, Any], spec: BenchSpec, data: BenchData, seed: int) -> list[dict[str, Any]]:
    """Claim 1: ALIGN ≥ self-consistency on the same candidates (the report's macro paired row)."""
    p = next((p for p in report["paired"] if p["task"] == "macro" and p["method"] == "align"
              and p["baseline"] == "self_consistency"), None)
    if not p:
        return []
    return [_paired_claim("ALIGN − self-consistency on the same n·k candidates ≥ 0 (macro, paired)", p)]


def _multi_vs_single(report: dict[str, Any], spec: BenchSpec, data: BenchData, seed: int) -> list[dict[str, Any]]:
    """Claim 2: the best multi-model method > the best single model. Paired against ``single_agent``
    when the single model was chosen on the dev split; else against the test-chosen model's expected
    one-sample accuracy (no McNemar), said so in the note."""
    macro = _full_macro(report)
    matched = bool(data.matched)  # --matched-single: the matched rows replace the k-share vote's row below
    multi = [m for m in (MULTI_MEMBER if matched else MULTI_MODEL) if m in macro]
    singles = [s for s in report["macro_single_models"] if s["tasks"] == len(spec.tasks)]
    chosen = ((spec.settings.get("shared") or {}).get("single_model") or {})
    on_dev = bool(chosen) and all(c.get("on_dev") for c in chosen.values())
    if multi and on_dev and "single_agent" in macro:
        best_multi = max(multi, key=lambda m: macro[m]["accuracy"])
        pair = macro_pair(spec, data, best_multi, "single_agent", seed)
        if pair is None:
            return []
        models = ", ".join(sorted({c["model"] for c in chosen.values()}))
        out = [_paired_claim(f"best multi-model method ({best_multi}) − the dev-chosen best single model "
                             f"({models}, its first sample), macro, paired", pair, strict=True,
                             note="the best single model is chosen on the dev split, never on test questions")]
        # the same model given more samples: its own self-consistency over its share of the pool
        sc = None if matched else model_sc_pair(spec, data, best_multi, {t: c["model"] for t, c in chosen.items()}, seed)
        if sc is not None:
            out.append(_paired_claim(
                f"best multi-model method ({best_multi}) − the dev-chosen best single model's own self-consistency "
                f"({models}, majority over its {fmt_num(sc['samples_per_q'], 1)} samples in the shared pool), "
                "macro, paired", sc, strict=True,
                note=f"samples per question: {best_multi} {fmt_num(macro[best_multi]['samples_per_q'], 1)}, "
                     f"the single model's vote {fmt_num(sc['samples_per_q'], 1)}"))
        return out
    if multi and singles:
        best_multi = max(multi, key=lambda m: macro[m]["accuracy"])
        best_single = max(singles, key=lambda s: s["accuracy"])
        gap = expected_gap(spec, data, best_multi, best_single["model"], seed)
        return [_paired_claim(f"best multi-model method ({best_multi}) − best single model ({best_single['model']}, "
                              "expected one-sample accuracy), macro", {**gap, "p_mcnemar": None}, strict=True,
                              note="the best single model was NOT chosen on a dev split: it is picked on the test "
                                   "questions themselves (optimistic for it)")]
    return []


def _comed_vs_dense(report: dict[str, Any], spec: BenchSpec, data: BenchData, seed: int) -> list[dict[str, Any]]:
    """Claim 3, once per COMED variant (``comed``, its fixed anchor; ``comed_routed``, its routed
    anchor, when the bench ran it) and dense method (the COMED baselines the bench recorded in its
    settings, e.g. MoA, debate and the council; MoA and debate for a bench that recorded none): COMED ≥
    it in accuracy with ≤ 50 % of its calls and rescues > harms (its own, against its own anchor)."""
    macro = _full_macro(report)
    dense_methods = ((report.get("settings") or {}).get("comed") or {}).get("baselines") or DENSE
    variants = [("comed", "COMED", report["comed"]),
                ("comed_routed", "COMED (routed anchor)", report.get("comed_routed") or [])]
    out = []
    for method, name, blocks in variants:
        if method not in macro:
            continue
        rescues = sum(c["rescues"] for c in blocks)
        harms = sum(c["harms"] for c in blocks)
        for dense in dense_methods:
            pair = macro_pair(spec, data, method, dense, seed)
            if pair is None:
                continue
            calls = {m: macro[m]["calls_per_q"] for m in (method, dense) if m in macro}
            ratio = calls[method] / calls[dense] if len(calls) == 2 and calls[dense] else float("nan")
            row = _paired_claim(f"{name} ≥ {dense} in accuracy (macro, paired) with ≤ 50 % of its model calls and "
                                "rescues > harms", pair, calls_ratio=ratio, rescues=rescues, harms=harms)
            if row["holds"] != TOO_FEW:  # the calls and rescues parts decide before the accuracy does
                row["holds"] = "-" if ratio != ratio else "no" if ratio > 0.5 or rescues <= harms else row["holds"]
            out.append(row)
    return out


def _multi_vs_matched_single(report: dict[str, Any], spec: BenchSpec, data: BenchData,
                             seed: int) -> list[dict[str, Any]]:
    """Claim 2 at matched samples (a bench run with ``--matched-single``): the best multi-member
    method (:data:`~agora.runs.matched_single.MULTI_MEMBER`, by macro accuracy over every task) −
    the dev-chosen best member's own plurality over as many of its own samples as the method used
    on each question (:func:`agora.traces.matched_single.matched_pairs`): one row per task, then
    ``macro``; each with ``task``, ``wins``, ``losses`` and the samples per question in its note."""
    macro = _full_macro(report)
    multi = [m for m in MULTI_MEMBER if m in macro]
    if not data.matched or not multi:
        return []
    best = max(multi, key=lambda m: macro[m]["accuracy"])
    pairs = matched_pairs(spec, {t: d.results.get(best, {}) for t, d in data.tasks.items()}, data.matched, seed)
    if pairs is None:
        return []
    rows = []
    for task, pair in [*pairs["tasks"].items(), ("macro", pairs["macro"])]:
        members = ", ".join(sorted({data.matched[t].member for t in (pairs["tasks"] if task == "macro" else [task])}))
        note = (f"samples per question: {best} {fmt_num(pair['samples_method'], 1)}, {members}'s own vote "
                f"{fmt_num(pair['samples_member'], 1)} ({fmt_num(pair['samples_member_shared'], 1)} of them from the "
                "shared pool)")
        if pair["short"]:
            note += f"; on {pair['short']} questions the member had fewer samples than {best} used"
        note += "; the member is chosen on the dev split, the method by its macro accuracy on the test questions"
        rows.append(_paired_claim(
            f"best multi-member method ({best}) − the dev-chosen best single member ({members}) at matched samples "
            f"(its own vote over as many of its samples as {best} used), {task}, paired", pair, strict=True,
            note=note, task=task, wins=pair["wins"], losses=pair["losses"]))
    return rows


Claim = Callable[[dict[str, Any], BenchSpec, BenchData, int], list[dict[str, Any]]]

CLAIMS: tuple[Claim, ...] = (_align_vs_sc, _multi_vs_single, _multi_vs_matched_single, _comed_vs_dense)
"""The bench report's claims (ALIGN over self-consistency, several models over one, COMED over the
dense protocols), in the report's order: each maps (report data, spec, the runs' data,
seed) to its rows (none when the bench lacks its methods). The report's Claims section and the
console lines render whatever rows these give."""
