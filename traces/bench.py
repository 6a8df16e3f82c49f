"""The bench report's data: every method on every task, read back from the trace store, with paired statistics.

:mod:`agora.runs.bench` runs the protocols of a bench as ordinary runs (one per task and
protocol, ids ``<bench>:<task>:<protocol>``) and describes them in a
:class:`~agora.traces.bench_spec.BenchSpec`; :func:`agora.traces.bench_data.read_bench` reads
those runs back, and this module builds the report's data from them (:func:`bench_report`, what
``bench.json`` holds but its claims): accuracy per method × task with a 95 % bootstrap CI and the
macro-average, paired differences against the single agent and against self-consistency on the
same questions (95 % paired-bootstrap CI, exact McNemar p-value from :mod:`agora.agents.stats`),
cost per question (model calls, samples, generated tokens, model and wall seconds), the expected
one-sample accuracy of each pool model, COMED's accept/verify/escalate shares with its rescues and
harms, and how COMED's thresholds were chosen. :mod:`agora.traces.bench_spec` records the report
in the trace DB and gives its JSON text. The claims, the markdown page and the PNG are
:mod:`agora.runs.report`'s (``agora bench`` writes the files with
:func:`agora.runs.report.write_report`): nothing here renders or plots.

Failed questions are never wrong: a question none of whose model calls succeeded has no
``questions`` row (:func:`agora.traces.report.failed_questions`) and a method that drew on no sample
has ``correct`` NULL; both are counted in their own columns and left out of accuracies and pairs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from agora.agents.escalation_calibration import rescue_harm
from agora.agents.stats import bootstrap_ci, macro_bootstrap_ci, macro_paired, mcnemar_exact, paired_bootstrap_ci
from agora.traces.bench_data import BenchData, TaskData, read_bench
from agora.traces.bench_members import members_report
from agora.traces.bench_spec import BenchSpec, BenchTask
from agora.traces.report import too_few
from agora.traces.store import TraceStore, now

LEVEL = 0.95
RESAMPLES = 2000
BASELINES = ("single_agent", "self_consistency")
"""The methods every other method is paired against."""


# ---------------------------------------------------------------------------- cells and pairs


def _calls(method: str, protocol: str, row: dict[str, Any], question: dict[str, Any], data: TaskData) -> float:
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


def _cell(method: str, protocol: str, task: BenchTask, data: TaskData, seed: int) -> dict[str, Any]:
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


#: The shared / added split of a cell's cost, per question.
SPLIT_KEYS = ("shared_calls_per_q", "shared_samples_per_q", "shared_tokens_per_q",
              "added_calls_per_q", "added_samples_per_q", "added_tokens_per_q")


def _shared_added(method: str, protocol: str, recorded: list[dict[str, Any]], questions: dict[str, Any],
                  data: TaskData) -> dict[str, float]:
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


def _pairs(data: TaskData, a: str, b: str) -> tuple[list[str], list[int], list[int]]:
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


def _pool(store: TraceStore, task: BenchTask, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The task's shared candidate pool: its cost per question (drawn once, for every
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


def _comed(task: BenchTask, questions: dict[str, dict[str, Any]] | None, anchor: dict[str, dict[str, Any]],
           final: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """COMED's decisions, rescues and harms on ``task``: ``questions`` of its run (with their
    ``detail``), its anchor's and its own result rows by question id."""
    if not questions:
        return None
    details = [questions[q]["detail"] for q in task.question_ids if q in questions]
    scored = [q for q in task.question_ids if q in questions
              and (final.get(q) or {}).get("correct") is not None and (anchor.get(q) or {}).get("correct") is not None]
    rh = rescue_harm([bool(anchor[q]["correct"]) for q in scored], [bool(final[q]["correct"]) for q in scored],
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


def macro_pair(spec: BenchSpec, data: BenchData, a: str, b: str, seed: int = 0) -> dict[str, Any] | None:
    """Method ``a`` against method ``b`` over every task, on the questions both were scored on
    (:func:`agora.agents.stats.macro_paired`'s figures); ``None`` without any pair."""
    pairs = [_pairs(data.tasks[t.name], a, b)[1:] for t in spec.tasks
             if a in data.tasks[t.name].results and b in data.tasks[t.name].results]
    return macro_paired(pairs, seed=seed)


def model_sc_pair(spec: BenchSpec, data: BenchData, method: str, models: dict[str, str],
                  seed: int = 0) -> dict[str, Any] | None:
    """Method ``method`` against a single model's own self-consistency (its plurality over its k
    samples in the shared pool, :attr:`BenchData.model_sc`), paired per question over every task;
    ``models`` names the model per task (the dev-chosen one). :func:`agora.agents.stats.macro_paired`'s figures, plus
    ``samples_per_q``: the mean samples the model's vote used. ``None`` without any pair."""
    pairs, samples = [], []
    for t in spec.tasks:
        rows = data.tasks[t.name].results.get(method, {})
        sc = data.model_sc.get(t.name, {}).get(models.get(t.name, ""), {})
        qs = [q for q in sc if q in rows and rows[q]["correct"] is not None and rows[q]["samples"] != 0]
        pairs.append(([int(rows[q]["correct"]) for q in qs], [sc[q][0] for q in qs]))
        samples += [sc[q][1] for q in qs]
    out = macro_paired(pairs, seed=seed)
    return None if out is None else {**out, "samples_per_q": sum(samples) / len(samples)}


def expected_gap(spec: BenchSpec, data: BenchData, method: str, model: str, seed: int = 0) -> dict[str, Any]:
    """Method ``method``'s correctness (0/1) minus pool model ``model``'s expected one-sample
    accuracy, per question both have, over every task: ``diff`` (mean of the per-task means, 0..1
    scale) with its 95 % stratified bootstrap CI ``ci_low``/``ci_high``, and ``questions``."""
    diffs = []
    for t in spec.tasks:
        rows, values = data.tasks[t.name].results.get(method, {}), data.single_values[t.name].get(model, {})
        diffs.append([int(rows[q]["correct"]) - values[q] for q in values
                      if q in rows and rows[q]["correct"] is not None and rows[q]["samples"] != 0])
    d, lo, hi = macro_bootstrap_ci(diffs, seed=seed)
    return {"diff": d, "ci_low": lo, "ci_high": hi, "questions": sum(len(x) for x in diffs)}


def bench_report(store: TraceStore, spec: BenchSpec, *, seed: int = 0, data: BenchData | None = None) -> dict[str, Any]:
    """The bench's report data, JSON-ready (see the module docstring); ``seed`` fixes every
    bootstrap; ``data`` is :func:`read_bench`'s reading of the runs (read here when not given).
    ``complete`` is false while some test question of some run is neither answered nor failed (an
    interrupted bench: rerun it with the same id). The claims are added by
    :func:`agora.runs.report.build_report`, which also writes the files."""
    methods = spec.methods
    data = read_bench(store, spec) if data is None else data
    per_task, single_values = data.tasks, data.single_values
    cells, paired, singles, comed, comed_routed = [], [], [], [], []
    pools: list[dict[str, Any]] = []
    model_sc: list[dict[str, Any]] = []
    for task in spec.tasks:
        mine = per_task[task.name]
        for m, protocol in methods.items():
            if protocol in task.runs and m in mine.results:
                cells.append(_cell(m, protocol, task, mine, seed))
        for b in BASELINES:
            for m in methods:
                if m != b and b in mine.results and m in mine.results:
                    _, x, y = _pairs(mine, m, b)
                    paired.append(_paired(task.name, m, b, x, y, seed))
        for model, values in single_values[task.name].items():
            acc, lo, hi = bootstrap_ci(list(values.values()), seed=seed)
            singles.append({"task": task.name, "model": model, "questions": len(values), "accuracy": acc,
                            "ci_low": lo, "ci_high": hi, "too_few": too_few(len(values), lo, hi)})
        c = _comed(task, mine.questions.get("comed"), mine.results.get("anchor", {}), mine.results.get("comed", {}))
        if c is not None:
            comed.append(c)
        routed_run = task.runs.get("comed-routed")
        if routed_run is not None and "comed_routed" in mine.results:  # its own anchor: the routed one's plurality
            ids = set(task.question_ids)
            anchor = {r["question_id"]: r for r in store.results(routed_run)
                      if r["method"] == "anchor" and r["question_id"] in ids}
            c = _comed(task, mine.questions.get("comed-routed"), anchor, mine.results["comed_routed"])
            if c is not None:
                comed_routed.append(c)
        pool_rows, sc_rows = _pool(store, task, seed)
        pools += pool_rows
        model_sc += sc_rows

    macro = []
    for m in methods:
        groups = [[int(r["correct"]) for r in per_task[t.name].results.get(m, {}).values()
                   if r["correct"] is not None and r["samples"] != 0] for t in spec.tasks]
        if not any(groups):
            continue
        mine_cells = [c for c in cells if c["method"] == m]
        acc, lo, hi = macro_bootstrap_ci(groups, seed=seed)
        macro.append({"method": m, "tasks": sum(1 for g in groups if g), "all_tasks": all(groups), "accuracy": acc,
                      "ci_low": lo, "ci_high": hi, "too_few": too_few(sum(len(g) for g in groups), lo, hi),
                      **{k: _mean([c[k] for c in mine_cells if c[k] == c[k]])
                         for k in ("calls_per_q", "samples_per_q", "tokens_per_q", "model_s_per_q", "wall_s_per_q",
                                   *SPLIT_KEYS)}})
    macro_pairs = []
    for b in BASELINES:
        for m in methods:
            pair = None if m == b else macro_pair(spec, data, m, b, seed)
            if pair is not None:
                macro_pairs.append({"task": "macro", "method": m, "baseline": b, "questions": pair["questions"],
                                     "diff": pair["diff"], "ci_low": pair["ci_low"], "ci_high": pair["ci_high"],
                                     "wins": pair["wins"], "losses": pair["losses"], "p_mcnemar": pair["p_mcnemar"],
                                     "too_few": too_few(pair["questions"], pair["ci_low"], pair["ci_high"])})
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
        "paired": sorted(paired + macro_pairs, key=lambda p: (
            BASELINES.index(p["baseline"]), list(methods).index(p["method"]),
            [t.name for t in spec.tasks].index(p["task"]) if p["task"] != "macro" else len(spec.tasks))),
        "single_models": singles, "macro_single_models": macro_singles, "comed": comed,
        **({"comed_routed": comed_routed} if comed_routed else {}),
        "shared_pool": pools, "model_self_consistency": model_sc, **members_report(spec, data, seed),
        "failed_questions": {t: f for t, f in failed.items() if f},
        "level": LEVEL, "resamples": RESAMPLES, "seed": seed,
    }
    return report


