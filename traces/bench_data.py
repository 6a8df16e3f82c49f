"""A bench's runs read back from the trace store (its test questions only): per task, each method's
result rows, each protocol's question rows and failed questions, each pool model's expected
one-sample accuracy and its own self-consistency over the shared pool (:func:`read_bench`,
:class:`BenchData`); and COMED's calibration inputs from a dev run (:func:`comed_dev_outcomes`).
:func:`agora.traces.bench.bench_report` computes the report from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from agora.agents.escalation_calibration import DevOutcome
from agora.tasks.answers import extract_answer
from agora.tasks.scoring import score_answer
from agora.traces.bench_spec import BenchTask, BenchSpec
from agora.traces.matched_single import MemberSamples, read_matched
from agora.traces.report import failed_questions
from agora.traces.store import TraceStore


_OPTION_LINE = re.compile(r"^[A-J]\. ", re.MULTILINE)


@dataclass
class TaskData:
    """One task's runs read back (its test questions only)."""

    results: dict[str, dict[str, dict[str, Any]]]
    """method → question id → results row."""
    questions: dict[str, dict[str, dict[str, Any]]]
    """protocol → question id → questions row (detail decoded)."""
    failed: dict[str, dict[str, str]]
    """protocol → failed question id → last error."""
    agents_used: dict[str, int]
    """ALIGN question id → agents (requests) with a successful sample."""


def _read_task(store: TraceStore, task: BenchTask, methods: dict[str, str],
               renames: dict[str, dict[str, str]] | None = None) -> TaskData:
    ids = set(task.question_ids)
    renames = renames or {}
    data = TaskData({}, {}, {}, {})
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


def _single_models(store: TraceStore, task: BenchTask, data: TaskData) -> dict[str, dict[str, float]]:
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
        answer = extract_answer(c["completion"] or "", kind, len(_OPTION_LINE.findall(q["question"] or "")) or 4,
                                question=q["question"])  # an echo of the question is no answer
        by.setdefault(c["model"], {}).setdefault(c["question_id"], []).append(bool(score_answer(answer, q["gold"], kind)))
    return {m: {q: sum(v) / len(v) for q, v in per_q.items()} for m, per_q in by.items()}


@dataclass(frozen=True, slots=True)
class BenchData:
    """A bench's runs as read back from the trace store, per task: what the report's numbers and
    the claims (:mod:`agora.runs.report`) are computed from."""

    tasks: dict[str, TaskData]
    """Task name → its results, questions and failed questions per method / protocol."""
    single_values: dict[str, dict[str, dict[str, float]]]
    """Task name → pool model → question id → expected one-sample accuracy (0..1)."""
    model_sc: dict[str, dict[str, dict[str, tuple[int, int]]]] = field(default_factory=dict)
    """Task name → pool model → question id → (its self-consistency over its own share of the
    shared pool right: 0/1, the samples it voted over); empty without a shared pool."""
    matched: dict[str, MemberSamples] = field(default_factory=dict)
    """Task name → the dev-chosen best member's own samples per question (shared, then its matched
    draw; :mod:`agora.traces.matched_single`); empty for a bench without ``--matched-single``."""


def _model_sc(store: TraceStore, task: BenchTask) -> dict[str, dict[str, tuple[int, int]]]:
    """The candidates run's ``sc:<model>`` results of ``task``'s test questions, per model and question."""
    run = task.runs.get("candidates")
    if run is None:
        return {}
    ids, out = set(task.question_ids), {}
    for r in store.results(run):
        if r["method"].startswith("sc:") and r["question_id"] in ids and r["correct"] is not None and r["samples"]:
            out.setdefault(r["method"][3:], {})[r["question_id"]] = (int(r["correct"]), int(r["samples"]))
    return out


def read_bench(store: TraceStore, spec: BenchSpec) -> BenchData:
    """Read every run of the bench ``spec`` describes (its test questions only) from ``store``."""
    tasks: dict[str, TaskData] = {}
    singles: dict[str, dict[str, dict[str, float]]] = {}
    model_sc: dict[str, dict[str, dict[str, tuple[int, int]]]] = {}
    matched: dict[str, MemberSamples] = {}
    for task in spec.tasks:
        tasks[task.name] = _read_task(store, task, spec.methods, spec.renames)
        singles[task.name] = _single_models(store, task, tasks[task.name])
        model_sc[task.name] = _model_sc(store, task)
        drawn = read_matched(store, task)
        if drawn is not None:
            matched[task.name] = drawn
    return BenchData(tasks, singles, model_sc, matched)
