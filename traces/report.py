"""Method tables from the trace store: accuracy with a bootstrap CI and cost per method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agora.tasks.errors import InputError
from agora.agents.stats import bootstrap_ci
from agora.traces import schema
from agora.traces.store import TraceStore, TraceStoreError


MIN_QUESTIONS = 30
"""Fewest (paired) questions a cell, difference or claim needs before a report states it as a
finding; below it, or with a degenerate interval (low == high), it reads :data:`TOO_FEW`."""
TOO_FEW = "too few questions"


def too_few(questions: int, low: float, high: float) -> bool:
    """Whether an estimate on ``questions`` (paired) questions with interval ``[low, high]`` is too
    thin to report as a finding: fewer than :data:`MIN_QUESTIONS` questions, or a degenerate
    (``low == high``: every resample equal) or missing interval.

    >>> too_few(2, 0.0, 0.0), too_few(40, -0.1, 0.2), too_few(40, 0.0, 0.0)
    (True, False, True)
    """
    return questions < MIN_QUESTIONS or low != low or high != high or low == high


@dataclass(frozen=True, slots=True)
class MethodRow:
    method: str
    questions: int
    """Questions with a gold answer that this method answered (or failed to)."""
    accuracy: float
    ci_low: float
    ci_high: float
    samples_per_question: float
    """Mean model samples (calls) the method's answer was drawn from."""
    completion_tokens: int
    """Generated tokens of those samples, over all questions."""
    model_time_s: float
    """Sum of the model latencies of those samples, seconds."""
    failed: int = 0
    """Recorded questions on which this method failed: its answer drew on no sample (its model
    calls failed), so it is neither right nor wrong and not in ``questions`` or ``accuracy``.
    Questions that failed altogether are not recorded: :func:`failed_questions`."""
    guessed: int = 0
    """Scored questions whose answer came from the scorer's fallback (the last number or letter
    of an output without an explicit final answer: docs/scoring.md), not from a stated answer."""
    shared_samples_per_question: float = 0.0
    """Of ``samples_per_question``, the mean samples taken from a bench's shared candidate pool
    (drawn once per question by the bench's candidates run and counted there; 0 outside a bench)."""
    unscored: int = 0
    """Recorded questions this method answered that could not be scored (no gold answer, as a
    ``prompts`` file gives, or a kind no scorer checks): neither right nor wrong, not in ``questions``."""

    @property
    def too_few(self) -> bool:
        """Too few scored questions (or a degenerate interval) to read the accuracy as a finding."""
        return too_few(self.questions, self.ci_low, self.ci_high)


def _check_results_columns(store: TraceStore) -> None:
    """Refuse a ``results`` table without one of the columns every Agora database has
    (:data:`agora.traces.schema.RESULTS` less :data:`~agora.traces.schema.ADDED_COLUMNS`, which
    older databases lack and are read as unknown). No ``results`` table passes (no rows to read)."""
    if "results" not in store.db.table_names():
        return
    have = store.db["results"].columns_dict
    added = schema.ADDED_COLUMNS.get("results", ())
    missing = [c for c in schema.RESULTS if c not in have and c not in added]
    if missing:
        raise TraceStoreError(f"{store.path}: its results table lacks {', '.join(missing)} (renamed or dropped?): "
                              "not a trace database Agora can read")


def method_table(store: TraceStore, run_id: str, order: Sequence[str] = ()) -> list[MethodRow]:
    """One row per method of a run, in ``order`` first, then alphabetically.

    Raises:
        TraceStoreError: the ``results`` table lacks a column every Agora database has (one a user
            renamed or dropped), named with the file.
    """
    _check_results_columns(store)
    by_method: dict[str, list[dict]] = {}
    for row in store.results(run_id):
        by_method.setdefault(row["method"], []).append(row)
    names = [m for m in order if m in by_method] + sorted(m for m in by_method if m not in order)
    rows = []
    for m in names:
        rs = by_method[m]
        scored = [r["correct"] for r in rs if r["correct"] is not None and r["samples"] != 0]
        mean, lo, hi = bootstrap_ci(scored)
        rows.append(MethodRow(
            method=m, questions=len(scored), accuracy=mean, ci_low=lo, ci_high=hi,
            samples_per_question=float(np.mean([r["samples"] or 0 for r in rs])),
            completion_tokens=int(sum(r["completion_tokens"] or 0 for r in rs)),
            model_time_s=float(sum(r["latency_s"] or 0.0 for r in rs)),
            failed=sum(r["samples"] == 0 for r in rs),
            guessed=sum(r.get("how") == "fallback" for r in rs if r["correct"] is not None and r["samples"] != 0),
            shared_samples_per_question=float(np.mean([r.get("shared_samples") or 0 for r in rs])),
            unscored=sum(r["correct"] is None and r["samples"] != 0 for r in rs),
        ))
    return rows


def failed_questions(store: TraceStore, run_id: str) -> dict[str, str]:
    """Questions of a run with model calls but no recorded answer (failed, or aborted by an
    unreachable model; a rerun retries them), each with its last model-call error."""
    rows = store.db.query(
        "select c.question_id, c.error from model_calls c where c.run_id = ? and not exists "
        "(select 1 from questions q where q.run_id = c.run_id and q.question_id = c.question_id) "
        "order by c.created_at, c.attempt", [run_id])
    out: dict[str, str] = {}
    for r in rows:
        if r["error"] or r["question_id"] not in out:
            out[r["question_id"]] = r["error"] or ""
    return out


def run_totals(store: TraceStore, run_id: str) -> dict[str, float]:
    """Model calls, tokens and failed attempts of a run, from ``model_calls``, question wall time,
    and ``failed_questions`` (:func:`failed_questions`; meaningful for benchmark runs only, whose
    model calls belong to questions). ``calls_unknown_usage``: samples whose model reported no
    token usage (NULL tokens, not in the token sums: :func:`unknown_tokens_note`)."""
    q = store.db.query(
        "select count(*) as questions, coalesce(sum(wall_s), 0) as wall_s from questions where run_id = ?",
        [run_id])
    c = store.db.query(
        "select sum(error is null) as calls, sum(error is not null) as failed, "
        "coalesce(sum(prompt_tokens), 0) as prompt_tokens, coalesce(sum(completion_tokens), 0) as completion_tokens, "
        "sum(error is null and completion_tokens is null) as calls_unknown_usage "
        "from model_calls where run_id = ?", [run_id])
    out = {**next(q), **next(c), "failed_questions": len(failed_questions(store, run_id))}
    return {k: (v or 0) for k, v in out.items()}


def disagreements(store: TraceStore, run_id: str, a: str, b: str) -> list[dict[str, object]]:
    """The questions of run ``run_id`` on which methods ``a`` and ``b`` answered differently, in
    question order: ``{"question_id", "gold", a: {"answer", "correct"}, b: {...}}`` (``correct``
    ``None``: unscored, or a method whose answer drew on no sample). A question one method has no
    result for is left out.

    Raises:
        ValueError: ``a`` or ``b`` is not a method of the run (one line naming the run's methods).
    """
    by_q: dict[str, dict[str, dict]] = {}
    for r in store.results(run_id):
        by_q.setdefault(r["question_id"], {})[r["method"]] = r
    methods = sorted({m for ms in by_q.values() for m in ms})
    for m in (a, b):
        if m not in methods:
            raise InputError(f"{store.path}: run {run_id!r} has no method {m!r} (its methods: "
                             f"{', '.join(methods) or 'none recorded'})")
    gold = {q["question_id"]: q["gold"] for q in store.questions(run_id)}
    out: list[dict[str, object]] = []
    for qid, ms in by_q.items():
        if a in ms and b in ms and ms[a]["answer"] != ms[b]["answer"]:
            out.append({"question_id": qid, "gold": gold.get(qid),
                        **{m: {"answer": ms[m]["answer"], "correct": None if ms[m]["correct"] is None
                               else bool(ms[m]["correct"])} for m in (a, b)}})
    return out


def unknown_tokens_note(totals: dict[str, float]) -> str:
    """``" (+ unknown for N samples whose model reports no usage)"``, or ``""`` when every sample's
    tokens are known: printed after a token total so that a sum missing some samples says so."""
    unknown = int(totals.get("calls_unknown_usage") or 0)
    return f" (+ unknown for {unknown} sample{'s' * (unknown != 1)} whose model reports no usage)" if unknown else ""
