"""The bench report: every method on every task, from the trace store, with paired statistics.

:mod:`agora.runs.bench` runs the protocols of a bench as ordinary runs (one per task and
protocol, ids ``<bench>:<task>:<protocol>``) and describes them in a :class:`BenchSpec`; this
module reads those runs back and builds the report (:func:`bench_report`): accuracy per method ×
task with a 95 % bootstrap CI and the macro-average, paired differences against the single agent
and against self-consistency on the same questions (95 % paired-bootstrap CI, exact McNemar
p-value), cost per question (model calls, samples, generated tokens, model and wall seconds), the
expected one-sample accuracy of each pool model, COMED's accept/verify/escalate shares with its
rescues and harms, and how COMED's thresholds were chosen. :func:`write_report` writes it as
markdown, JSON and one PNG (accuracy against generated tokens per question, with the Pareto front)
and records it in the trace DB (tables below).

Failed questions are never wrong: a question none of whose model calls succeeded has no
``questions`` row (:func:`agora.traces.report.failed_questions`) and a method that drew on no sample
has ``correct`` NULL; both are counted in their own columns and left out of accuracies and pairs.

Tables (one transaction per report; a rerun of the bench id replaces its rows):

``benches``: one row per bench (``bench_id`` primary key): spec (JSON :class:`BenchSpec`), report
    (JSON, what ``bench.json`` holds), complete (0/1: every test question of every run answered or
    failed), created_at, updated_at.
``bench_cells``: one row per bench, task and method (primary key ``bench_id, task, method``), the
    task ``"macro"`` for the macro-average: run_id, questions (scored), failed (questions or method
    failures, not scored), accuracy, ci_low, ci_high, calls_per_q, samples_per_q, tokens_per_q,
    model_s_per_q, wall_s_per_q.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agora.agents.escalation import DevOutcome, rescue_harm
from agora.agents.stats import macro_bootstrap_ci, mcnemar_exact, paired_bootstrap_ci  # noqa: F401 (their home)
from agora.tasks.answers import extract_answer
from agora.tasks.scoring import score_answer
from agora.traces.report import MIN_QUESTIONS, TOO_FEW, bootstrap_ci, failed_questions, too_few  # noqa: F401
from agora.traces.store import TraceStore, now

LEVEL = 0.95
RESAMPLES = 2000
BASELINES = ("single_agent", "self_consistency")
"""The methods every other method is paired against."""

BENCHES = {"bench_id": str, "spec": str, "report": str, "complete": int, "created_at": str, "updated_at": str}
BENCH_CELLS = {
    "bench_id": str, "task": str, "method": str, "run_id": str, "questions": int, "failed": int,
    "accuracy": float, "ci_low": float, "ci_high": float, "calls_per_q": float, "samples_per_q": float,
    "tokens_per_q": float, "model_s_per_q": float, "wall_s_per_q": float,
}


# ---------------------------------------------------------------------------- statistics


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates, for a cost ``x`` (lower is better) and an
    accuracy ``y`` (higher is better), ordered by cost. A point is dominated when another costs no
    more and is no less accurate, and is better in one of the two; NaN points are left out.

    >>> pareto_front([(1, 0.5), (2, 0.4), (3, 0.7), (3, 0.6)])
    [0, 2]
    """
    ok = [i for i, (x, y) in enumerate(points) if x == x and y == y]
    front = [i for i in ok if not any(
        points[j][0] <= points[i][0] and points[j][1] >= points[i][1]
        and (points[j][0] < points[i][0] or points[j][1] > points[i][1]) for j in ok)]
    seen: set[tuple[float, float]] = set()
    out = []
    for i in sorted(front, key=lambda i: (points[i][0], -points[i][1], i)):
        if tuple(points[i]) not in seen:  # two methods at the same point: one front vertex
            seen.add(tuple(points[i]))
            out.append(i)
    return out


# ---------------------------------------------------------------------------- the spec of a bench


@dataclass(frozen=True, slots=True)
class BenchTask:
    """One task of a bench: its file and the runs that answered its test questions."""

    name: str
    path: str | None
    format: str
    question_ids: tuple[str, ...]
    """The test questions, in order (every run of the task answers these)."""
    runs: dict[str, str]
    """Protocol → run id (``align``, ``comed``)."""


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """What a bench ran: enough to rebuild its report from the trace DB alone."""

    bench_id: str
    tasks: tuple[BenchTask, ...]
    methods: dict[str, str]
    """Method → the protocol whose run computes it, in report order."""
    sharing: dict[str, str]
    """Method → the samples it draws on (methods naming the same samples share them)."""
    calibration: tuple[dict[str, Any], ...] = ()
    """How COMED's thresholds were chosen, per scope (a task name, or ``*`` for all tasks):
    ``source`` (a sentence), ``thresholds``, ``n_anchor`` and, when calibrated here, the dev
    ``run_id``, ``questions``, ``objective``, ``rescues``, ``harms``, ``calls_per_question``,
    ``lambda``, ``max_calls``, ``dropped`` (dev questions dropped because they were test questions)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The protocols' settings and the pool (for the report's header)."""
    renames: dict[str, dict[str, str]] = field(default_factory=dict)
    """Protocol → {method as its run records it → method in this bench}: a run computing a method
    under another name (the routed COMED run's ``comed`` is the bench's ``comed_routed``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BenchSpec":
        tasks = tuple(BenchTask(**{**t, "question_ids": tuple(t["question_ids"])}) for t in data["tasks"])
        return cls(**{**data, "tasks": tasks, "calibration": tuple(data.get("calibration") or ())})


# ---------------------------------------------------------------------------- reading runs back

_OPTION_LINE = re.compile(r"^[A-J]\. ", re.MULTILINE)


@dataclass
class _TaskData:
    results: dict[str, dict[str, dict[str, Any]]]
    """method → question id → results row."""
    questions: dict[str, dict[str, dict[str, Any]]]
    """protocol → question id → questions row (detail decoded)."""
    failed: dict[str, dict[str, str]]
    """protocol → failed question id → last error."""
    agents_used: dict[str, int]
    """ALIGN question id → agents (requests) with a successful sample."""


def _read_task(store: TraceStore, task: BenchTask, methods: dict[str, str],
               renames: dict[str, dict[str, str]] | None = None) -> _TaskData:
    ids = set(task.question_ids)
    renames = renames or {}
    data = _TaskData({}, {}, {}, {})
    for protocol, run_id in task.runs.items():
        rows = {q["question_id"]: {**q, "detail": json.loads(q["detail"] or "{}")}
                for q in store.questions(run_id) if q["question_id"] in ids}
        data.questions[protocol] = rows
        data.failed[protocol] = {q: e for q, e in failed_questions(store, run_id).items() if q in ids and q not in rows}
        names = renames.get(protocol, {})
        for r in store.results(run_id):
            name = names.get(r["method"], r["method"])
            if r["question_id"] in rows and methods.get(name) == protocol:
                data.results.setdefault(name, {})[r["question_id"]] = {**r, "method": name}
    if "align" in task.runs:
        for r in store.db.query(
                "select question_id, count(distinct agent) as n from model_calls where run_id = ? and error is null "
                "and role = 'agent' group by question_id", [task.runs["align"]]):
            data.agents_used[r["question_id"]] = r["n"]
    return data


def comed_dev_outcomes(store: TraceStore, run_id: str, question_ids: Sequence[str] | None = None) -> list[DevOutcome]:
    """Calibration inputs from a COMED ``explore`` run: one :class:`DevOutcome` per recorded
    question (of ``question_ids``, when given) with a gold answer and every branch (probe and
    escalation) recorded."""
    keep = None if question_ids is None else set(question_ids)
    outcomes = (dev_outcome(json.loads(q["detail"] or "{}")) for q in store.questions(run_id)
                if keep is None or q["question_id"] in keep)
    return [o for o in outcomes if o is not None]


def dev_outcome(detail: dict[str, Any]) -> DevOutcome | None:
    """One COMED question's calibration input from its ``questions.detail``; ``None`` without gold
    or without both branches (probe and escalation) recorded."""
    d = detail
    if d.get("anchor_correct") is None or d.get("probe") is None or d.get("escalation") is None:
        return None
    return DevOutcome(sc=d["anchor"]["sc"], margin=(d.get("route") or {}).get("margin"),
                      anchor_correct=d["anchor_correct"], probe_agrees=d["probe"]["agrees"],
                      escalation_correct=d["escalation_correct"], probe_calls=d["probe_calls"] or 0,
                      escalation_calls=d["escalation_calls"] or 0,
                      anchor_calls=(d.get("method_calls") or {}).get("anchor") or 1)


def _calls(method: str, protocol: str, row: dict[str, Any], question: dict[str, Any], data: _TaskData) -> float:
    """Model calls (requests; N samples of one prompt are one) this method's answer needed."""
    if row.get("calls") is not None and protocol != "align":  # COMED's runs, the shared draw
        return float(row["calls"])
    if row.get("shared_calls") and protocol == "align":  # ALIGN on the shared pool: no rows of its own
        return float(row["shared_calls"])
    if protocol == "comed":
        return float((question["detail"].get("method_calls") or {}).get(method) or 0)
    if method == "single_agent":
        return 1.0 if row["samples"] else 0.0
    return float(data.agents_used.get(row["question_id"], 0))


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _cell(method: str, protocol: str, task: BenchTask, data: _TaskData, seed: int) -> dict[str, Any]:
    rows = data.results.get(method, {})
    questions = data.questions.get(protocol, {})
    scored = {q: r["correct"] for q, r in rows.items() if r["correct"] is not None and r["samples"] != 0}
    acc, lo, hi = bootstrap_ci(list(scored.values()), seed=seed)
    recorded = [rows[q] for q in task.question_ids if q in rows]
    return {
        "task": task.name, "method": method, "protocol": protocol, "run_id": task.runs.get(protocol),
        "questions": len(scored), "accuracy": acc, "ci_low": lo, "ci_high": hi,
        "too_few": too_few(len(scored), lo, hi),
        "method_failed": sum(r["samples"] == 0 for r in recorded),
        "failed_questions": len(data.failed.get(protocol, {})),
        "missing": sum(q not in questions and q not in data.failed.get(protocol, {}) for q in task.question_ids),
        "calls_per_q": _mean([_calls(method, protocol, r, questions[r["question_id"]], data) for r in recorded]),
        "samples_per_q": _mean([r["samples"] or 0 for r in recorded]),
        "tokens_per_q": _mean([r["completion_tokens"] or 0 for r in recorded]),
        "model_s_per_q": _mean([r["latency_s"] or 0.0 for r in recorded]),
        "wall_s_per_q": _mean([questions[r["question_id"]]["wall_s"] or 0.0 for r in recorded]),
        **_shared_added(method, protocol, recorded, questions, data),
    }


#: The shared / added split of a cell's cost (issue 32), per question.
SPLIT_KEYS = ("shared_calls_per_q", "shared_samples_per_q", "shared_tokens_per_q",
              "added_calls_per_q", "added_samples_per_q", "added_tokens_per_q")


def _shared_added(method: str, protocol: str, recorded: list[dict[str, Any]], questions: dict[str, Any],
                  data: _TaskData) -> dict[str, float]:
    """Per question, what the method took from the bench's shared candidate pool and what it added
    (total − shared; a row without shared columns added everything)."""
    calls = [_calls(method, protocol, r, questions[r["question_id"]], data) for r in recorded]
    sc = [float(r.get("shared_calls") or 0) for r in recorded]
    ss = [float(r.get("shared_samples") or 0) for r in recorded]
    st = [float(r.get("shared_tokens") or 0) for r in recorded]
    return {"shared_calls_per_q": _mean(sc), "shared_samples_per_q": _mean(ss), "shared_tokens_per_q": _mean(st),
            "added_calls_per_q": _mean([max(0.0, c - s) for c, s in zip(calls, sc)]),
            "added_samples_per_q": _mean([(r["samples"] or 0) - s for r, s in zip(recorded, ss)]),
            "added_tokens_per_q": _mean([(r["completion_tokens"] or 0) - t for r, t in zip(recorded, st)])}


def _pairs(data: _TaskData, a: str, b: str) -> tuple[list[str], list[int], list[int]]:
    """Questions both methods were scored on (neither failed), with each one's 0/1 outcomes."""
    ra, rb = data.results.get(a, {}), data.results.get(b, {})
    qs = [q for q in ra if q in rb and ra[q]["correct"] is not None and rb[q]["correct"] is not None
          and ra[q]["samples"] != 0 and rb[q]["samples"] != 0]
    return qs, [int(ra[q]["correct"]) for q in qs], [int(rb[q]["correct"]) for q in qs]


def _paired(task: str, a: str, b: str, x: Sequence[float], y: Sequence[float], seed: int) -> dict[str, Any]:
    diff, lo, hi = paired_bootstrap_ci(x, y, seed=seed)
    wins = sum(1 for u, v in zip(x, y) if u > v)
    losses = sum(1 for u, v in zip(x, y) if u < v)
    return {"task": task, "method": a, "baseline": b, "questions": len(x), "diff": diff, "ci_low": lo, "ci_high": hi,
            "wins": wins, "losses": losses, "p_mcnemar": mcnemar_exact(wins, losses),
            "too_few": too_few(len(x), lo, hi)}


def _single_models(store: TraceStore, task: BenchTask, data: _TaskData) -> dict[str, dict[str, float]]:
    """Each pool model's expected one-sample accuracy per question: the share of its samples
    (temperature-sampled) that are right: its share of the bench's shared candidate pool when the
    bench drew one (every pool model), else its ALIGN candidates (the agents' models)."""
    if "candidates" in task.runs:
        run, role, questions = task.runs["candidates"], "candidate", data.questions.get("candidates", {})
    elif "align" in task.runs:
        run, role, questions = task.runs["align"], "agent", data.questions.get("align", {})
    else:
        return {}
    by: dict[str, dict[str, list[bool]]] = {}
    for c in store.db.query("select question_id, model, completion from model_calls where run_id = ? and "
                            "error is null and role = ? order by model", [run, role]):
        q = questions.get(c["question_id"])
        if q is None or q["gold"] is None:
            continue
        kind = q["kind"] or "math"
        answer = extract_answer(c["completion"] or "", kind, len(_OPTION_LINE.findall(q["question"] or "")) or 4)
        by.setdefault(c["model"], {}).setdefault(c["question_id"], []).append(bool(score_answer(answer, q["gold"], kind)))
    return {m: {q: sum(v) / len(v) for q, v in per_q.items()} for m, per_q in by.items()}


def _pool(store: TraceStore, task: BenchTask, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The task's shared candidate pool (issue 32): its cost per question (drawn once, for every
    protocol) and each model's self-consistency over its own k samples (the candidates run's
    ``sc:<model>`` methods: free, no call of their own). Empty without a shared pool."""
    run = task.runs.get("candidates")
    if run is None:
        return [], []
    ids = set(task.question_ids)
    rows = [r for r in store.results(run) if r["question_id"] in ids]
    pool = [r for r in rows if r["method"] == "candidates"]
    out = [{"task": task.name, "run_id": run, "questions": len(pool),
            "calls_per_q": _mean([r["calls"] or 0 for r in pool]), "samples_per_q": _mean([r["samples"] or 0 for r in pool]),
            "tokens_per_q": _mean([r["completion_tokens"] or 0 for r in pool]),
            "model_s_per_q": _mean([r["latency_s"] or 0.0 for r in pool])}] if pool else []
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["method"].startswith("sc:"):
            by.setdefault(r["method"][3:], []).append(r)
    sc = []
    for model, mine in by.items():
        scored = [int(r["correct"]) for r in mine if r["correct"] is not None and r["samples"]]
        acc, lo, hi = bootstrap_ci(scored, seed=seed)
        sc.append({"task": task.name, "model": model, "questions": len(scored), "accuracy": acc, "ci_low": lo,
                   "ci_high": hi, "too_few": too_few(len(scored), lo, hi),
                   "samples_per_q": _mean([r["samples"] or 0 for r in mine])})
    return out, sc


def _comed(task: BenchTask, data: _TaskData) -> dict[str, Any] | None:
    questions = data.questions.get("comed")
    if not questions:
        return None
    details = [questions[q]["detail"] for q in task.question_ids if q in questions]
    res = data.results
    scored = [q for q in task.question_ids if q in questions
              and (res.get("comed", {}).get(q) or {}).get("correct") is not None
              and (res.get("anchor", {}).get(q) or {}).get("correct") is not None]
    rh = rescue_harm([bool(res["anchor"][q]["correct"]) for q in scored], [bool(res["comed"][q]["correct"]) for q in scored],
                     [bool(questions[q]["detail"].get("escalated")) for q in scored])
    decisions = Counter(d.get("decision") for d in details)
    outcomes = Counter(d.get("outcome") for d in details)
    return {"task": task.name, "questions": len(details),
            "decisions": {k: decisions.get(k, 0) for k in ("accept", "verify", "escalate")},
            "outcomes": {k: outcomes.get(k, 0) for k in ("accept", "verify_accept", "verify_escalate", "escalate")},
            "scored": rh.n, "escalated": rh.escalated, "rescues": rh.rescues, "harms": rh.harms,
            "anchor_correct": rh.anchor_correct, "comed_correct": rh.final_correct, "gain": rh.gain,
            "identity_holds": True}


# ---------------------------------------------------------------------------- the report


def bench_report(store: TraceStore, spec: BenchSpec, *, seed: int = 0) -> dict[str, Any]:
    """The bench's report as JSON-ready data (see the module docstring); ``seed`` fixes every
    bootstrap. ``complete`` is false while some test question of some run is neither answered nor
    failed (an interrupted bench: rerun it with the same id)."""
    methods = spec.methods
    cells, paired, singles, comed = [], [], [], []
    pools: list[dict[str, Any]] = []
    model_sc: list[dict[str, Any]] = []
    per_task: dict[str, _TaskData] = {}
    single_values: dict[str, dict[str, dict[str, float]]] = {}
    for task in spec.tasks:
        data = per_task[task.name] = _read_task(store, task, methods, spec.renames)
        for m, protocol in methods.items():
            if protocol in task.runs and m in data.results:
                cells.append(_cell(m, protocol, task, data, seed))
        for b in BASELINES:
            for m in methods:
                if m != b and b in data.results and m in data.results:
                    _, x, y = _pairs(data, m, b)
                    paired.append(_paired(task.name, m, b, x, y, seed))
        single_values[task.name] = _single_models(store, task, data)
        for model, values in single_values[task.name].items():
            acc, lo, hi = bootstrap_ci(list(values.values()), seed=seed)
            singles.append({"task": task.name, "model": model, "questions": len(values), "accuracy": acc,
                            "ci_low": lo, "ci_high": hi, "too_few": too_few(len(values), lo, hi)})
        c = _comed(task, data)
        if c is not None:
            comed.append(c)
        pool_rows, sc_rows = _pool(store, task, seed)
        pools += pool_rows
        model_sc += sc_rows

    macro = []
    for m in methods:
        groups = [[int(r["correct"]) for r in per_task[t.name].results.get(m, {}).values()
                   if r["correct"] is not None and r["samples"] != 0] for t in spec.tasks]
        if not any(groups):
            continue
        mine = [c for c in cells if c["method"] == m]
        acc, lo, hi = macro_bootstrap_ci(groups, seed=seed)
        macro.append({"method": m, "tasks": sum(1 for g in groups if g), "all_tasks": all(groups), "accuracy": acc,
                      "ci_low": lo, "ci_high": hi, "too_few": too_few(sum(len(g) for g in groups), lo, hi),
                      **{k: _mean([c[k] for c in mine if c[k] == c[k]])
                         for k in ("calls_per_q", "samples_per_q", "tokens_per_q", "model_s_per_q", "wall_s_per_q",
                                   *SPLIT_KEYS)}})
    macro_paired = []
    for b in BASELINES:
        for m in methods:
            if m == b:
                continue
            diffs, wins, losses, n = [], 0, 0, 0
            for t in spec.tasks:
                data = per_task[t.name]
                if b in data.results and m in data.results:
                    _, x, y = _pairs(data, m, b)
                    diffs.append([u - v for u, v in zip(x, y)])
                    wins += sum(u > v for u, v in zip(x, y))
                    losses += sum(u < v for u, v in zip(x, y))
                    n += len(x)
            if n:
                d, lo, hi = macro_bootstrap_ci(diffs, seed=seed)
                macro_paired.append({"task": "macro", "method": m, "baseline": b, "questions": n, "diff": d,
                                     "ci_low": lo, "ci_high": hi, "wins": wins, "losses": losses,
                                     "p_mcnemar": mcnemar_exact(wins, losses), "too_few": too_few(n, lo, hi)})
    macro_singles = []
    models = sorted({s["model"] for s in singles})
    for model in models:
        groups = [list(single_values[t.name].get(model, {}).values()) for t in spec.tasks]
        acc, lo, hi = macro_bootstrap_ci(groups, seed=seed)
        macro_singles.append({"model": model, "tasks": sum(1 for g in groups if g), "accuracy": acc,
                              "ci_low": lo, "ci_high": hi, "too_few": too_few(sum(len(g) for g in groups), lo, hi)})

    runs_done = {t.name: {p: {"answered": len(per_task[t.name].questions.get(p, {})),
                              "failed": len(per_task[t.name].failed.get(p, {})),
                              "missing": sum(q not in per_task[t.name].questions.get(p, {})
                                             and q not in per_task[t.name].failed.get(p, {}) for q in t.question_ids)}
                          for p in t.runs} for t in spec.tasks}
    missing = sum(r["missing"] for per in runs_done.values() for r in per.values())
    failed = {t.name: {p: sorted(per_task[t.name].failed.get(p, {})) for p in t.runs if per_task[t.name].failed.get(p)}
              for t in spec.tasks}
    report = {
        "bench_id": spec.bench_id, "generated_at": now(), "complete": missing == 0, "runs_done": runs_done,
        "tasks": [{"name": t.name, "path": t.path, "format": t.format, "questions": len(t.question_ids),
                   "runs": t.runs} for t in spec.tasks],
        "methods": list(methods), "sharing": spec.sharing, "calibration": list(spec.calibration),
        "settings": spec.settings, "cells": cells, "macro": macro,
        "paired": sorted(paired + macro_paired, key=lambda p: (
            BASELINES.index(p["baseline"]), list(methods).index(p["method"]),
            [t.name for t in spec.tasks].index(p["task"]) if p["task"] != "macro" else len(spec.tasks))),
        "single_models": singles, "macro_single_models": macro_singles, "comed": comed,
        "shared_pool": pools, "model_self_consistency": model_sc,
        "failed_questions": {t: f for t, f in failed.items() if f},
        "level": LEVEL, "resamples": RESAMPLES, "seed": seed,
    }
    report["claims"] = _claims(report, spec, per_task, single_values, seed)
    return report


def _claims(report: dict[str, Any], spec: BenchSpec, per_task: dict[str, _TaskData],
            single_values: dict[str, dict[str, dict[str, float]]], seed: int) -> list[dict[str, Any]]:
    """The three claims of issue 18, measured (whatever the numbers are). A claim on fewer than
    :data:`MIN_QUESTIONS` paired questions, or with a degenerate interval, ``holds`` "too few
    questions" (:data:`TOO_FEW`), never yes or no."""
    out: list[dict[str, Any]] = []
    align_sc = next((p for p in report["paired"] if p["task"] == "macro" and p["method"] == "align"
                     and p["baseline"] == "self_consistency"), None)
    if align_sc:
        out.append({"claim": "ALIGN − self-consistency on the same n·k candidates ≥ 0 (macro, paired)",
                    "value": align_sc["diff"], "ci_low": align_sc["ci_low"], "ci_high": align_sc["ci_high"],
                    "p_mcnemar": align_sc["p_mcnemar"], "questions": align_sc["questions"],
                    "holds": TOO_FEW if align_sc["too_few"] else _holds(align_sc["diff"], align_sc["ci_low"], 0.0)})
    macro = {m["method"]: m for m in report["macro"] if m["all_tasks"]}
    multi = [m for m in ("align", "self_consistency", "best_of_n", "comed", "moa", "debate") if m in macro]
    singles = [s for s in report["macro_single_models"] if s["tasks"] == len(spec.tasks)]
    chosen = ((spec.settings.get("shared") or {}).get("single_model") or {})
    on_dev = bool(chosen) and all(c.get("on_dev") for c in chosen.values())
    if multi and on_dev and "single_agent" in macro:
        best_multi = max(multi, key=lambda m: macro[m]["accuracy"])
        pair = _macro_pair(spec, per_task, best_multi, "single_agent", seed)
        if pair is not None:
            models = ", ".join(sorted({c["model"] for c in chosen.values()}))
            out.append({"claim": f"best multi-model method ({best_multi}) − the dev-chosen best single model "
                                 f"({models}, its first sample), macro, paired", "value": pair["diff"],
                        "ci_low": pair["ci_low"], "ci_high": pair["ci_high"], "p_mcnemar": pair["p_mcnemar"],
                        "questions": pair["questions"],
                        "holds": TOO_FEW if too_few(pair["questions"], pair["ci_low"], pair["ci_high"])
                        else _holds(pair["diff"], pair["ci_low"], 0.0, strict=True),
                        "note": "the best single model is chosen on the dev split, never on test questions"})
    elif multi and singles:
        best_multi = max(multi, key=lambda m: macro[m]["accuracy"])
        best_single = max(singles, key=lambda s: s["accuracy"])
        diffs = []
        for t in spec.tasks:
            rows, values = per_task[t.name].results.get(best_multi, {}), single_values[t.name].get(best_single["model"], {})
            diffs.append([int(rows[q]["correct"]) - values[q] for q in values
                          if q in rows and rows[q]["correct"] is not None and rows[q]["samples"] != 0])
        d, lo, hi = macro_bootstrap_ci(diffs, seed=seed)
        n = sum(len(x) for x in diffs)
        out.append({"claim": f"best multi-model method ({best_multi}) − best single model ({best_single['model']}, "
                             "expected one-sample accuracy), macro", "value": d, "ci_low": lo, "ci_high": hi,
                    "p_mcnemar": None, "questions": n,
                    "holds": TOO_FEW if too_few(n, lo, hi) else _holds(d, lo, 0.0, strict=True),
                    "note": "the best single model was NOT chosen on a dev split: it is picked on the test questions "
                            "themselves (optimistic for it)"})
    for dense in ("moa", "debate"):
        pair = _macro_pair(spec, per_task, "comed", dense, seed)
        if pair is None:
            continue
        calls = {m: macro[m]["calls_per_q"] for m in ("comed", dense) if m in macro}
        ratio = calls["comed"] / calls[dense] if len(calls) == 2 and calls[dense] else float("nan")
        rescues = sum(c["rescues"] for c in report["comed"])
        harms = sum(c["harms"] for c in report["comed"])
        out.append({"claim": f"COMED ≥ {dense} in accuracy (macro, paired) with ≤ 50 % of its model calls and "
                             "rescues > harms", "value": pair["diff"], "ci_low": pair["ci_low"], "ci_high": pair["ci_high"],
                    "p_mcnemar": pair["p_mcnemar"], "calls_ratio": ratio, "rescues": rescues, "harms": harms,
                    "questions": pair["questions"],
                    "holds": TOO_FEW if too_few(pair["questions"], pair["ci_low"], pair["ci_high"])
                    else "-" if ratio != ratio else ("no" if ratio > 0.5 or rescues <= harms
                                                     else _holds(pair["diff"], pair["ci_low"], 0.0))})
    return out


def _macro_pair(spec: BenchSpec, per_task: dict[str, _TaskData], a: str, b: str, seed: int) -> dict[str, Any] | None:
    diffs, wins, losses, n = [], 0, 0, 0
    for t in spec.tasks:
        data = per_task[t.name]
        if a in data.results and b in data.results:
            _, x, y = _pairs(data, a, b)
            diffs.append([u - v for u, v in zip(x, y)])
            wins += sum(u > v for u, v in zip(x, y))
            losses += sum(u < v for u, v in zip(x, y))
            n += len(x)
    if not any(diffs):
        return None
    d, lo, hi = macro_bootstrap_ci(diffs, seed=seed)
    return {"diff": d, "ci_low": lo, "ci_high": hi, "p_mcnemar": mcnemar_exact(wins, losses), "questions": n}


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


# ---------------------------------------------------------------------------- markdown, PNG, DB


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def _ci(lo: float, hi: float) -> str:
    return "-" if lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def _p(p: float | None) -> str:
    return "-" if p is None else (f"{p:.3g}" if p >= 0.001 else f"{p:.1e}")


def _few(entry: dict[str, Any]) -> str:
    return " †" if entry.get("too_few") else ""


def _any_few(report: dict[str, Any]) -> bool:
    return any(c.get("too_few") for key in ("cells", "macro", "single_models", "macro_single_models")
               for c in report.get(key) or [])


def claim_lines(report: dict[str, Any]) -> list[str]:
    """The report's claims as console lines: ``claim: value pp [CI] (n questions): holds``."""
    return [f"{c['claim']}: {_pct(c['value'])} pp {_ci(c['ci_low'], c['ci_high'])} "
            f"({c.get('questions', '?')} paired questions): {c['holds']}" for c in report.get("claims") or []]


def report_markdown(report: dict[str, Any]) -> str:
    """The report as a markdown page (``bench.md``)."""
    tasks = [t["name"] for t in report["tasks"]]
    cells = {(c["task"], c["method"]): c for c in report["cells"]}
    macro = {m["method"]: m for m in report["macro"]}
    lines = [f"# Bench `{report['bench_id']}`", ""]
    if not report["complete"]:
        left = "; ".join(f"{t} {p}: {r['missing']}" for t, per in report["runs_done"].items() for p, r in per.items()
                         if r["missing"])
        lines += ["**Incomplete**: some test questions have not run yet (" + left + "); rerun `agora bench` with the "
                  "same `--run-id` to finish (nothing finished is redone).", ""]
    lines += [f"Generated {report['generated_at']}. Accuracies in %, with {int(100 * report['level'])} % "
              f"percentile-bootstrap CIs ({report['resamples']} resamples, seed {report['seed']}); the macro-average is "
              "the mean over tasks, its CI resamples each task within itself. Failed questions (every model call "
              "failed) and method failures (the method got no sample) are counted apart, never as wrong.", ""]
    lines += ["## Tasks", "", "| task | file | format | test questions | runs |", "|---|---|---|---|---|"]
    for t in report["tasks"]:
        lines.append(f"| {t['name']} | `{t['path']}` | {t['format']} | {t['questions']} | "
                     + ", ".join(f"`{r}`" for r in t["runs"].values()) + " |")
    settings = report.get("settings") or {}
    if settings.get("pool"):
        lines += ["", "Pool: " + ", ".join(f"`{m}`" for m in settings["pool"]) + "."]
    for key in ("align", "comed"):
        if settings.get(key):
            lines += ["", f"{key.upper()} settings: " + ", ".join(f"{k} = {v}" for k, v in settings[key].items()) + "."]

    lines += ["", "## Accuracy", "", "| method | " + " | ".join(tasks) + " | macro |",
              "|---|" + "---|" * (len(tasks) + 1)]
    for m in report["methods"]:
        if not any((t, m) in cells for t in tasks):
            continue
        row = [f"{_pct(cells[t, m]['accuracy'])} {_ci(cells[t, m]['ci_low'], cells[t, m]['ci_high'])}{_few(cells[t, m])}"
               if (t, m) in cells else "-" for t in tasks]
        mac = macro.get(m)
        row.append("-" if mac is None else f"**{_pct(mac['accuracy'])}** {_ci(mac['ci_low'], mac['ci_high'])}{_few(mac)}"
                   + ("" if mac["all_tasks"] else " (not every task)"))
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    if report["macro_single_models"]:
        for s in report["macro_single_models"]:
            row = []
            for t in tasks:
                c = next((x for x in report["single_models"] if x["task"] == t and x["model"] == s["model"]), None)
                row.append("-" if c is None else f"{_pct(c['accuracy'])} {_ci(c['ci_low'], c['ci_high'])}{_few(c)}")
            lines.append(f"| model `{s['model']}` (one sample) | " + " | ".join(row)
                         + f" | **{_pct(s['accuracy'])}** {_ci(s['ci_low'], s['ci_high'])}{_few(s)} |")
        lines += ["", "A model's one-sample row is the share of its ALIGN candidates that are right (its expected "
                  "accuracy from one temperature sample), on the ALIGN run's questions."]
    if _any_few(report):
        lines += ["", f"† {TOO_FEW}: fewer than {MIN_QUESTIONS} scored questions, or a degenerate interval "
                  "(every resample equal); the number is shown, but it is no finding."]
    lines += ["", "Questions scored / failed per cell:", "", "| method | " + " | ".join(tasks) + " |",
              "|---|" + "---|" * len(tasks)]
    for m in report["methods"]:
        if any((t, m) in cells for t in tasks):
            lines.append(f"| {m} | " + " | ".join(
                f"{cells[t, m]['questions']} / {cells[t, m]['failed_questions'] + cells[t, m]['method_failed']}"
                + (f" ({cells[t, m]['missing']} not run)" if cells[t, m]["missing"] else "")
                if (t, m) in cells else "-" for t in tasks) + " |")

    lines += ["", "## Paired differences", "",
              "Same questions, both methods scored: difference in accuracy (pp) with a 95 % paired-bootstrap CI, "
              "wins/losses (questions only one of the two got right) and the exact McNemar p-value (two-sided "
              "binomial test on the discordant pairs); `macro` pools the tasks (mean of per-task differences, "
              "McNemar on all discordant pairs).", "",
              "| method | vs | task | questions | diff pp | 95% CI | wins / losses | McNemar p | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in report["paired"]:
        lines.append(f"| {p['method']} | {p['baseline']} | {p['task']} | {p['questions']} | {_pct(p['diff'])} | "
                     f"{_ci(p['ci_low'], p['ci_high'])} | {p['wins']} / {p['losses']} | {_p(p['p_mcnemar'])} | "
                     f"{TOO_FEW if p.get('too_few') else ''} |")

    lines += ["", "## Cost per question", "",
              "Model calls are requests (N samples of one prompt are one call); tokens are generated tokens; model "
              "seconds sum the latencies of the samples a method drew on; wall seconds are the question time of the "
              "run that computed the method (methods of one run share it).", "",
              "| method | task | calls/q | samples/q | gen. tokens/q | model s/q | wall s/q (run) |",
              "|---|---|---|---|---|---|---|"]
    for m in report["methods"]:
        for t in tasks + ["macro"]:
            c = macro.get(m) if t == "macro" else cells.get((t, m))
            if c is not None:
                lines.append(f"| {m} | {t} | {_num(c['calls_per_q'])} | {_num(c['samples_per_q'])} | "
                             f"{_num(c['tokens_per_q'], 1)} | {_num(c['model_s_per_q'])} | {_num(c['wall_s_per_q'])} |")

    lines += _shared_markdown(report, tasks, cells, macro)

    lines += ["", "## Shared samples", "", "| method | draws on |", "|---|---|"]
    lines += [f"| {m} | {report['sharing'].get(m, '-')} |" for m in report["methods"]]

    lines += ["", "## COMED thresholds", ""]
    if not report["calibration"]:
        lines.append("No COMED run.")
    for c in report["calibration"]:
        t = c["thresholds"]
        scope = "all tasks" if c["scope"] == "*" else f"task {c['scope']}"
        lines.append(f"- {scope}: τ_hi = {t['tau_hi']:.4g}, τ_lo = {t['tau_lo']:.4g}, m_min = {t['m_min']:.4g} "
                     f"(N = {c['n_anchor']}); {c['source']}")
    if report["comed"]:
        lines += ["", "## COMED decisions, rescues and harms", "",
                  "| task | questions | accept | verify | escalate | verify → accept | verify → escalate | escalated | "
                  "rescues | harms | Acc(COMED) − Acc(anchor) pp |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in report["comed"]:
            n = c["questions"] or 1
            d, o = c["decisions"], c["outcomes"]
            lines.append(f"| {c['task']} | {c['questions']} | " + " | ".join(
                f"{d[k]} ({_pct(d[k] / n)}%)" for k in ("accept", "verify", "escalate"))
                + f" | {o['verify_accept']} | {o['verify_escalate']} | {c['escalated']} | {c['rescues']} | {c['harms']} | "
                  f"{_pct(c['gain'])} |")
        lines += ["", "Acc(COMED) − Acc(anchor) = (rescues − harms) / questions, checked on every question."]

    if report["claims"]:
        lines += ["", "## Claims", "", "| claim | value pp | 95% CI | McNemar p | paired questions | holds |",
                  "|---|---|---|---|---|---|"]
        for c in report["claims"]:
            extra = ""
            if "calls_ratio" in c:
                extra = f"; calls {_pct(c['calls_ratio'])} % of it, rescues {c['rescues']} vs harms {c['harms']}"
            if c.get("note"):
                extra += f"; {c['note']}"
            lines.append(f"| {c['claim']}{extra} | {_pct(c['value'])} | {_ci(c['ci_low'], c['ci_high'])} | "
                         f"{_p(c['p_mcnemar'])} | {c.get('questions', '-')} | {c['holds']} |")
        lines += ["", "`yes`: the whole 95 % CI is on the claim's side; `undecided`: the estimate is, the CI is not; "
                  "`no`: the estimate is not (or, for COMED, the calls or rescues part fails); "
                  f"`{TOO_FEW}`: fewer than {MIN_QUESTIONS} paired questions, or a degenerate interval: no verdict."]
    if report["failed_questions"]:
        lines += ["", "## Failed questions", "", "Every model call of these questions failed: they are not scored; a "
                  "rerun with the same `--run-id` retries them.", ""]
        for t, per in report["failed_questions"].items():
            for p, ids in per.items():
                lines.append(f"- {t} / {p}: {len(ids)} ({', '.join(ids[:10])}{', ...' if len(ids) > 10 else ''})")
    return "\n".join(lines) + "\n"


def _shared_markdown(report: dict[str, Any], tasks: list[str], cells: dict[tuple[str, str], dict[str, Any]],
                     macro: dict[str, dict[str, Any]]) -> list[str]:
    """The report's issue-32 sections: the shared pool's cost, each method's shared and added
    compute (matched-compute comparison: the added calls column), the single model's choice, and each
    model's self-consistency over its own share of the pool."""
    shared = (report.get("settings") or {}).get("shared")
    lines = ["", "## Shared and added compute", ""]
    if not shared:
        lines.append("No shared candidate pool: every protocol drew its own samples (first edition; "
                     "`--shared-candidates` draws one pool per question for all of them). Everything below is added.")
    else:
        lines.append(f"One candidate pool per question: k = {shared['k']} samples from each of "
                     + ", ".join(f"`{m}`" for m in shared["models"])
                     + f" (temperature {shared['temperature']}, max {shared['max_tokens']} tokens, {shared['shots']} "
                       "shots, the neutral solver prompt), drawn once and given to every protocol that starts from "
                       "independent samples.")
        for p in report.get("shared_pool") or []:
            lines.append(f"- {p['task']}: the pool cost {_num(p['calls_per_q'])} calls, {_num(p['samples_per_q'])} "
                         f"samples, {_num(p['tokens_per_q'], 1)} generated tokens per question (`{p['run_id']}`).")
        for t, c in (shared.get("single_model") or {}).items():
            lines.append(f"- {t}: single model `{c['model']}`: {c['source']}.")
    lines += ["", "Per question: shared = taken from the pool (drawn once for all methods); added = the method's own "
              "calls beyond it. Compare methods at matched compute on the added calls.", "",
              "| method | task | shared calls | shared samples | shared tokens | added calls | added samples | "
              "added tokens |", "|---|---|---|---|---|---|---|---|"]
    for m in report["methods"]:
        for t in tasks + ["macro"]:
            c = macro.get(m) if t == "macro" else cells.get((t, m))
            if c is not None and "added_calls_per_q" in c:
                lines.append(f"| {m} | {t} | {_num(c['shared_calls_per_q'])} | {_num(c['shared_samples_per_q'])} | "
                             f"{_num(c['shared_tokens_per_q'], 1)} | **{_num(c['added_calls_per_q'])}** | "
                             f"{_num(c['added_samples_per_q'])} | {_num(c['added_tokens_per_q'], 1)} |")
    sc = report.get("model_self_consistency") or []
    if sc:
        lines += ["", "## Per-model self-consistency (free)", "",
                  "Each model's plurality over its own share of the pool (no call of its own), beside its expected "
                  "one-sample accuracy.", "", "| model | task | samples | self-consistency | one sample |",
                  "|---|---|---|---|---|"]
        one = {(x["task"], x["model"]): x for x in report.get("single_models") or []}
        for x in sc:
            o = one.get((x["task"], x["model"]))
            lines.append(f"| `{x['model']}` | {x['task']} | {_num(x['samples_per_q'], 0)} | {_pct(x['accuracy'])} "
                         f"{_ci(x['ci_low'], x['ci_high'])}{_few(x)} | "
                         + ("-" if o is None else f"{_pct(o['accuracy'])} {_ci(o['ci_low'], o['ci_high'])}") + " |")
    return lines


def plot_accuracy_vs_tokens(report: dict[str, Any], path: str | Path) -> Path:
    """One PNG: accuracy against generated tokens per question, a point per method and task
    (marker per method, colour per task) with its 95 % CI as a vertical bar, and each task's Pareto
    front (dashed). Methods at the same point (ALIGN's baselines often coincide) are spread
    sideways by a few points and labelled, so none hides another; a hollow marker is a cell on too
    few questions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D

    cells = [c for c in report["cells"] if c["accuracy"] == c["accuracy"] and c["tokens_per_q"] == c["tokens_per_q"]]
    tasks = [t["name"] for t in report["tasks"]]
    markers = dict(zip(report["methods"], "os^vDP*XhpH<>"))
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 5))
    groups: dict[tuple[float, float], list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault((round(c["tokens_per_q"], 6), round(c["accuracy"], 6)), []).append(i)
    from matplotlib.transforms import offset_copy

    for members in groups.values():
        for rank, i in enumerate(members):
            c = cells[i]
            shift = 7.0 * (rank - (len(members) - 1) / 2)  # points, sideways: coincident methods stay visible
            where = offset_copy(ax.transData, fig=fig, x=shift, y=0.0, units="points")
            colour = colours(tasks.index(c["task"]) % 10)
            x, y = c["tokens_per_q"], 100 * c["accuracy"]
            ax.update_datalim([(x, y)])  # shifted artists do not widen the axes themselves
            if c["ci_low"] == c["ci_low"]:
                ax.errorbar([x], [y], yerr=[[y - 100 * c["ci_low"]], [100 * c["ci_high"] - y]], fmt="none",
                            ecolor=colour, elinewidth=0.9, alpha=0.6, capsize=2, transform=where, zorder=2)
            ax.scatter([x], [y], marker=markers.get(c["method"], "o"), s=55, alpha=0.9, zorder=3, transform=where,
                       facecolors="none" if c.get("too_few") else colour, edgecolors=colour)
            if len(members) > 1:
                down = y > 50  # the label runs away from the nearer edge, one upright label per marker
                ax.annotate(c["method"], (x, y), xytext=(shift, -7 if down else 7), textcoords="offset points",
                            fontsize=6, color=colour, ha="center", va="top" if down else "bottom", rotation=90)
    ax.autoscale_view()
    if cells:
        left, right = ax.get_xlim()
        ax.set_xlim(left - 0.04 * (right - left or 1), right + 0.04 * (right - left or 1))  # room for the spread
    points = [(c["tokens_per_q"], c["accuracy"]) for c in cells]
    for t in tasks:
        mine = [i for i, c in enumerate(cells) if c["task"] == t]
        front = [mine[i] for i in pareto_front([points[i] for i in mine])]
        if front:
            ax.plot([points[i][0] for i in front], [100 * points[i][1] for i in front], "--",
                    color=colours(tasks.index(t) % 10), lw=1, zorder=2)
    handles = [Line2D([], [], ls="", marker=markers[m], color="0.35", label=m) for m in report["methods"]
               if any(c["method"] == m for c in cells)]
    handles += [Line2D([], [], ls="--", color=colours(i % 10), label=f"{t} (Pareto front dashed)")
                for i, t in enumerate(tasks)]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="0.35",
                          label=f"hollow: {TOO_FEW} (< {MIN_QUESTIONS})"))
    ax.set_xlabel("generated tokens per question")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-5, 105)
    ax.set_title(f"bench {report['bench_id']}: accuracy vs generated tokens per question")
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


def _finite(value: Any) -> Any:
    """NaN as ``null``: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def record_bench(store: TraceStore, spec: BenchSpec, report: dict[str, Any] | None = None) -> None:
    """Write the bench's spec (and, when given, its report and cells) to ``benches`` / ``bench_cells``."""
    with store.transaction() as db:
        db["benches"].create(BENCHES, pk="bench_id", if_not_exists=True)
        db["bench_cells"].create(BENCH_CELLS, pk=("bench_id", "task", "method"), if_not_exists=True)
        old = next(iter(db["benches"].rows_where("bench_id = ?", [spec.bench_id])), None)
        db["benches"].upsert({
            "bench_id": spec.bench_id, "spec": json.dumps(spec.to_json(), default=_json_default),
            "report": None if report is None else json.dumps(_finite(report), default=_json_default),
            "complete": None if report is None else int(report["complete"]),
            "created_at": old["created_at"] if old else now(), "updated_at": now()}, pk="bench_id")
        if report is None:
            return
        db.execute("delete from bench_cells where bench_id = ?", [spec.bench_id])
        rows = [{"bench_id": spec.bench_id, "failed": c["failed_questions"] + c["method_failed"],
                 **{k: c[k] for k in BENCH_CELLS if k in c and k not in ("bench_id", "failed")}} for c in report["cells"]]
        rows += [{"bench_id": spec.bench_id, "task": "macro", "method": m["method"], "run_id": None,
                  "questions": None, "failed": None,
                  **{k: m[k] for k in BENCH_CELLS if k in m and k not in ("bench_id", "task", "method")}}
                 for m in report["macro"]]
        if rows:
            db["bench_cells"].insert_all([{k: _finite(v) for k, v in r.items()} for r in rows], pk=("bench_id", "task", "method"))


def read_bench_spec(store: TraceStore, bench_id: str) -> BenchSpec | None:
    """The spec a bench recorded, or ``None``."""
    if "benches" not in store.db.table_names():
        return None
    row = next(iter(store.db["benches"].rows_where("bench_id = ?", [bench_id])), None)
    return None if row is None else BenchSpec.from_json(json.loads(row["spec"]))


@dataclass(frozen=True, slots=True)
class ReportFiles:
    markdown: Path
    json: Path
    png: Path


def write_report(store: TraceStore, spec: BenchSpec, out: str | Path, *, seed: int = 0,
                 record: bool = True) -> tuple[dict[str, Any], ReportFiles]:
    """Build the report and write ``bench.md``, ``bench.json`` and ``accuracy_vs_tokens.png`` to
    ``out`` (created); with ``record``, also its rows in the trace DB (:func:`record_bench`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = bench_report(store, spec, seed=seed)
    files = ReportFiles(out / "bench.md", out / "bench.json", out / "accuracy_vs_tokens.png")
    files.markdown.write_text(report_markdown(report), encoding="utf-8")
    files.json.write_text(json.dumps(_finite(report), indent=2, ensure_ascii=False, default=_json_default) + "\n",
                          encoding="utf-8")
    plot_accuracy_vs_tokens(report, files.png)
    if record:
        record_bench(store, spec, report)
    return report, files
