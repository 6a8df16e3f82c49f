"""Method tables from the trace store: accuracy with a bootstrap CI and cost per method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agora.agents.stats import bootstrap_ci  # noqa: F401 (its home is agents/, below traces)
from agora.traces.store import TraceStore


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

    @property
    def too_few(self) -> bool:
        """Too few scored questions (or a degenerate interval) to read the accuracy as a finding."""
        return too_few(self.questions, self.ci_low, self.ci_high)


def method_table(store: TraceStore, run_id: str, order: Sequence[str] = ()) -> list[MethodRow]:
    """One row per method of a run, in ``order`` first, then alphabetically."""
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


def unknown_tokens_note(totals: dict[str, float]) -> str:
    """``" (+ unknown for N samples whose model reports no usage)"``, or ``""`` when every sample's
    tokens are known: printed after a token total so that a sum missing some samples says so."""
    unknown = int(totals.get("calls_unknown_usage") or 0)
    return f" (+ unknown for {unknown} sample{'s' * (unknown != 1)} whose model reports no usage)" if unknown else ""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run of a trace DB, as ``agora report runs`` lists it."""

    run_id: str
    protocol: str
    status: str
    """As stored: ``running``, ``finished``, ``partial`` (a bench waiting for its next round),
    ``interrupted`` (Ctrl-C or a drain: rerun to resume), ``failed``."""
    questions: int
    """Items recorded (answered questions; duels and sessions count their recorded questions)."""
    accuracy: float | None
    """Share of recorded questions with gold whose main answer is right (``None`` without any)."""
    started_at: str
    finished_at: str | None
    last_activity: str | None
    """When the run last recorded anything (its newest question, else its start)."""
    host: str | None
    stale: bool
    """``running`` with nothing recorded for over ``stale_after_s``: probably killed (``kill -9``,
    a crash, a machine gone) rather than running; rerun it to resume."""


def run_rows(store: TraceStore, stale_after_s: float = 3600.0, now: str | None = None) -> list[RunRow]:
    """Every run of ``store``, oldest first, with its recorded questions and last activity.

    ``now``: an ISO timestamp to judge staleness against (default: the current UTC time)."""
    from datetime import datetime, timezone

    if "runs" not in store.db.table_names():
        return []
    has_q = "questions" in store.db.table_names()
    counts: dict[str, tuple[int, int, int, str | None]] = {}
    if has_q:
        for r in store.db.query("select run_id, count(*) as n, sum(correct is not null) as scored, "
                                "sum(coalesce(correct, 0)) as right, max(finished_at) as last "
                                "from questions group by run_id"):
            counts[r["run_id"]] = (r["n"], r["scored"] or 0, r["right"] or 0, r["last"])
    moment = datetime.fromisoformat(now) if now else datetime.now(timezone.utc)
    rows = []
    for run in store.db.query("select * from runs order by rowid"):
        n, scored, right, last = counts.get(run["run_id"], (0, 0, 0, None))
        last = last or run["started_at"]
        stale = False
        if run["status"] == "running" and last:
            seen = datetime.fromisoformat(last)
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=timezone.utc)
            stale = (moment - seen).total_seconds() > stale_after_s
        rows.append(RunRow(run["run_id"], run["protocol"], run["status"], n, right / scored if scored else None,
                           run["started_at"], run["finished_at"], last, run.get("host"), stale))
    return rows


def run_summary(store: TraceStore, run_id: str) -> dict[str, object]:
    """A run at a glance (``agora report run``): its row (protocol, status, times, host, code),
    questions recorded and failed, model calls and tokens, each method's accuracy with its CI (and
    ``too_few``: fewer than :data:`MIN_QUESTIONS` scored questions or a degenerate interval), how the samples' answers were found (``marker``, ``boxed``, ``####``,
    ``fallback``, ``none``; ``unknown`` in an old database not backfilled), and on how many
    questions the methods disagree.

    Raises:
        ValueError: no such run.
    """
    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    if run is None:
        raise ValueError(f"{store.path}: no run {run_id!r} (`agora report runs --db {store.path}` lists them)")
    totals = run_totals(store, run_id)
    hows: dict[str, int] = {}
    if "how" in store.db["model_calls"].columns_dict:
        for r in store.db.query("select coalesce(how, 'unknown') as how, count(*) as n from model_calls "
                                "where run_id = ? and error is null group by 1 order by 2 desc", [run_id]):
            hows[r["how"]] = r["n"]
    answers: dict[str, set] = {}
    for r in store.results(run_id):
        answers.setdefault(r["question_id"], set()).add(r["answer"])
    return {
        "run_id": run_id, "protocol": run["protocol"], "status": run["status"], "started_at": run["started_at"],
        "finished_at": run["finished_at"], "host": run.get("host"), "code_revision": run.get("code_revision"),
        "totals": totals, "methods": method_table(store, run_id), "sample_answers": hows,
        "questions_methods_disagree": sum(len(a) > 1 for a in answers.values()),
    }
