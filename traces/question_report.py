"""One recorded question explained (``agora report question``): its samples, every recorded method
with the replay rule that reproduces it, and its failed attempts."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agora.tasks.errors import InputError
from agora.tasks.scoring import score_answer
from agora.traces.members import read_program_run
from agora.traces.store import TraceStore
from agora.traces.replay import replay
from agora.traces.replay_rules import RULES, ReliabilitiesError
from agora.traces.run_trace import load_run

# ---------------------------------------------------------------------------- one question, explained


_ERROR = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)


def failed_attempts(store: TraceStore, run_id: str, question_id: str) -> list[dict[str, Any]]:
    """The failed model calls (``model_calls`` rows with an error) of one question, in call order:
    node, role, agent, model, attempt (0 first), ``error_class`` and ``message`` (the recorded
    ``"Class: message"`` split; ``None`` class when the error is not in that form), created_at."""
    if "model_calls" not in store.db.table_names():
        return []
    out = []
    for c in store.db.query("select node, role, agent, model, attempt, error, created_at from model_calls "
                            "where run_id = ? and question_id = ? and error is not null order by rowid",
                            [run_id, question_id]):
        m = _ERROR.match(c["error"] or "")
        out.append({"node": c["node"], "role": c["role"], "agent": c["agent"], "model": c["model"],
                    "attempt": c["attempt"], "error_class": m.group(1) if m else None,
                    "message": m.group(2) if m else c["error"], "created_at": c["created_at"]})
    return out


def program_runs(store: TraceStore, run_id: str, question_id: str) -> dict[str, dict[str, Any] | None]:
    """Call id → its ``program_run`` read tolerantly (:func:`agora.traces.members.read_program_run`),
    for the question's calls (empty for a database from before recipes)."""
    if "program_run" not in store.db["model_calls"].columns_dict:
        return {}
    return {r["call_id"]: read_program_run(r["program_run"]) for r in store.db.query(
        "select call_id, program_run from model_calls where run_id = ? and question_id = ? and program_run is not null",
        [run_id, question_id])}


def failed_program(run: dict[str, Any] | None) -> bool:
    """Whether a sample's program failed (an error, a time-out, an unreadable record): a failed
    sample, never a wrong answer (docs/recipes.md)."""
    return run is not None and run.get("error") is not None


def question_report(store: TraceStore, run_id: str, question_id: str) -> dict[str, Any]:
    """One recorded question in full (``agora report question``): the question (kind, options, gold),
    every sample (node, role, agent, model, sample index, extracted answer, how it was found, whether
    it is right, how many samples of the question give the same answer), every recorded method
    (answer, correct, samples, how) with why it chose that answer: the ``why`` of the registered rule
    that reproduces it under the run's settings (and whether the replay agrees), else "recorded";
    and its failed attempts (:func:`failed_attempts`). ``notes``: lines on what could not be
    explained (a run of the ``calibrated`` utility whose dev database or dev run is gone: its
    utilities cannot be recomputed, so ALIGN and best-of-n are shown as recorded). A sample the run took from a bench's shared
    candidates carries ``shared_from`` (the candidates run holding its row; ``None`` for its own).

    A failed question (model calls but no recorded answer: ``failed`` True) has no question row:
    its report holds the failed attempts, ``successful_calls`` (its calls without an error), and
    ``None`` for the question's text, kind and gold.

    Raises:
        ValueError: no such run, or neither a recorded question nor model calls of that id in it.
    """
    run = load_run(store, run_id, [question_id])
    failures = failed_attempts(store, run_id, question_id)
    if not run.questions:
        ok = next(iter(store.db.query("select count(*) as n from model_calls where run_id = ? and question_id = ? "
                                      "and error is null", [run_id, question_id])))["n"]
        if not failures and not ok:
            raise InputError(f"{store.path}: run {run_id!r} has no recorded question {question_id!r}")
        return {"run_id": run_id, "protocol": run.protocol, "question_id": question_id, "failed": True,
                "kind": None, "n_choices": None, "gold": None, "question": None, "samples": [], "methods": [],
                "detail": {}, "failed_attempts": failures, "successful_calls": ok, "notes": []}
    q = run.questions[0]
    votes = Counter(s.answer for s in q.samples if s.answer is not None)
    programs = program_runs(store, run_id, question_id)
    samples = [{"node": s.node, "role": s.role, "agent": s.agent, "model": s.model, "sample_index": s.sample_index,
                "answer": s.answer, "how": s.how, "votes": votes.get(s.answer, 0) if s.answer is not None else 0,
                "correct": None if failed_program(programs.get(s.call_id)) else score_answer(s.answer, q.gold, q.kind),
                "program_failed": failed_program(programs.get(s.call_id)),
                "partner": s.partner, "completion_tokens": s.completion_tokens, "call_id": s.call_id,
                "completion": s.completion, "shared_from": s.shared_from, "recipe": s.recipe} for s in q.samples]
    explain: dict[str, tuple[str, Any]] = {}
    notes: list[str] = []
    for spec in RULES.values():
        method = spec.reproduces.get(run.protocol)
        if method and method in q.results and not spec.needs_dev:
            try:
                result = replay(run, spec.name, rules={spec.name: spec})
            except ReliabilitiesError as exc:  # the dev DB or run the calibrated utility read is gone
                note = f"the calibrated utilities cannot be recomputed: {exc.reason}"
                if note not in notes:
                    notes.append(note)
                explain[method] = (spec.name, None)
                continue
            explain[method] = (spec.name, result.rows[0])
    methods = []
    for m, r in q.results.items():
        rule, row = explain.get(m, (None, None))
        why = "recorded (no replay rule reproduces this method)"
        if rule is not None and row is None:
            why = f"recorded (rule {rule} cannot recompute its calibrated utilities: see the note)"
        elif row is not None and row.unavailable is not None:
            why = f"recorded (rule {rule} cannot replay this question: {row.unavailable})"
        elif row is not None:
            agrees = row.unavailable is None and row.answer == r["answer"]
            why = f"rule {rule}: {row.why}" + ("" if agrees else f" [replay gives {row.answer!r}, recorded "
                                                                   f"{r['answer']!r}]")
        methods.append({"method": m, "answer": r["answer"], "correct": None if r["correct"] is None else bool(r["correct"]),
                        "how": r.get("how"), "samples": r["samples"], "calls": r.get("calls"), "why": why})
    return {"run_id": run_id, "protocol": run.protocol, "question_id": q.question_id, "failed": False,
            "kind": q.kind, "n_choices": q.n_choices, "gold": q.gold, "question": q.question, "samples": samples,
            "methods": methods, "detail": q.detail, "failed_attempts": failures,
            "successful_calls": len(q.samples), "notes": notes}
