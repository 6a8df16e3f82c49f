"""A recorded run read once for replay: every question with its gold, recorded results and successful
samples (``model_calls`` rows with their extracted answers; schema :mod:`agora.traces.schema`).
:func:`load_run` is the one read; the rules (:mod:`agora.traces.replay_rules`) and the replay
(:mod:`agora.traces.replay`) work on what it returns, never on the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.traces.pg_sql import db_argument
from agora.traces.resume import lookalike_note
from agora.traces.shared_candidates import shared_takes
from agora.traces.store import TraceStore, answer_fields, option_count

# ---------------------------------------------------------------------------- a recorded run, read once


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One successful sample of a recorded question (a ``model_calls`` row)."""

    call_id: str
    node: str | None
    role: str | None
    agent: int | None
    model: str | None
    sample_index: int | None
    """Position among its request's samples (0 first)."""
    answer: str | None
    how: str | None
    """``marker``, ``boxed``, ``####``, ``fallback`` or ``none`` (no answer)."""
    completion_tokens: int
    latency_s: float
    partner: str | None
    completion: str | None
    shared_from: str | None = None
    """The bench's candidates run whose row this is, for a sample the run took from the shared pool
    (:func:`agora.traces.shared_candidates.shared_takes`: ``node`` and ``role`` are then the taker's); ``None``: the
    run's own row."""
    recipe: str | None = None
    """The member's recipe when it rewrote this call (``model_calls.recipe``: ``pot``...); ``None``
    without one, and in databases from before recipes."""


@dataclass(slots=True)
class QuestionTrace:
    """One recorded question: its row, its recorded method results and its samples in call order."""

    question_id: str
    idx: int | None
    kind: str
    n_choices: int | None
    gold: str | None
    question: str | None
    detail: dict[str, Any]
    results: dict[str, dict[str, Any]]
    """method → ``results`` row."""
    samples: list[SampleRow]

    def of(self, *roles: str) -> list[SampleRow]:
        """Samples whose role is one of ``roles`` (all without), in call order."""
        return [s for s in self.samples if not roles or s.role in roles]


@dataclass(slots=True)
class RunTrace:
    """A recorded run read for replay (:func:`load_run`)."""

    run_id: str
    protocol: str
    config: dict[str, Any]
    """The protocol's settings as the run stored them (``runs.config``)."""
    questions: list[QuestionTrace]


def load_run(store: TraceStore, run_id: str, question_ids: Sequence[str] | None = None) -> RunTrace:
    """Read run ``run_id`` (its recorded questions, ``question_ids`` only when given) with every
    successful sample. Databases without the answer-level columns (written before them, not
    backfilled) are read as well: answers and sample indices are then worked out here the way
    :func:`agora.traces.store.backfill` would store them.

    Raises:
        ValueError: no such run in ``store``.
    """
    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    if run is None:
        db, note = db_argument(store.path)  # without a password: libpq reads it from PGPASSWORD or ~/.pgpass
        raise InputError(f"{shown_url(str(store.path))}: no run {run_id!r} "
                         f"(`agora report runs --db {db}` lists them{' ' + note if note else ''})"
                         + lookalike_note(run_id, store.run_ids()))
    keep = None if question_ids is None else set(question_ids)
    questions: dict[str, QuestionTrace] = {}
    for q in store.questions(run_id):
        if keep is not None and q["question_id"] not in keep:
            continue
        kind = q.get("kind") or "math"
        questions[q["question_id"]] = QuestionTrace(
            question_id=q["question_id"], idx=q.get("idx"), kind=kind,
            n_choices=q.get("n_choices") or option_count(q.get("question"), kind), gold=q.get("gold"),
            question=q.get("question"), detail=json.loads(q.get("detail") or "{}") or {}, results={}, samples=[])
    for r in store.results(run_id):
        if r["question_id"] in questions:
            questions[r["question_id"]].results[r["method"]] = r
    have = set(store.db["model_calls"].columns_dict)
    cols = ["call_id", "question_id", "node", "role", "agent", "model", "completion", "completion_tokens",
            "latency_s", "created_at"] + [c for c in ("partner", "answer", "how", "sample_index", "recipe") if c in have]
    counter: dict[tuple, int] = {}
    for c in store.db.query(f"select {', '.join(cols)} from model_calls where run_id = ? and error is null "
                            "order by rowid", [run_id]):
        q = questions.get(c["question_id"])
        if q is None:
            continue
        key = (c["question_id"], c["node"], c["agent"], c["model"], c["created_at"])
        counter[key] = counter.get(key, -1) + 1
        answer, how, index = c.get("answer"), c.get("how"), c.get("sample_index")
        if how is None:  # not extracted: an old database
            answer, how = answer_fields(c["completion"], q.kind, q.n_choices, q.question)
        if index is None:
            index = counter[key]
        q.samples.append(SampleRow(c["call_id"], c["node"], c["role"], c["agent"], c["model"], index, answer, how,
                                   c["completion_tokens"] or 0, c["latency_s"] or 0.0, c.get("partner"),
                                   c["completion"], recipe=c.get("recipe")))
    # samples taken from the bench's shared candidates: their rows are the candidates run's
    takes = shared_takes(store, run_id, {q.question_id: q.detail for q in questions.values()})
    for qid, got in takes.items():
        q = questions[qid]
        q.samples[:0] = [SampleRow(s["call_id"], s["node"], s["role"], s["agent"], s["model"], s["sample_index"],
                                   s["answer"], s["how"], s["completion_tokens"], s["latency_s"], None,
                                   s["completion"], s["shared_from"]) for s in got]
    return RunTrace(run_id, run["protocol"], store.run_config(run_id) or {},
                    sorted(questions.values(), key=lambda q: (q.idx is None, q.idx or 0, q.question_id)))


# ---------------------------------------------------------------------------- rules
