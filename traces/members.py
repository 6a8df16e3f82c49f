"""Each member of a run, as its samples show it: recipe, samples, answers, per-sample accuracy and,
for program-of-thought members, how many programs failed (``agora report run`` prints it for a run
whose pool has recipes).

A member is weights × recipe (docs/recipes.md): ``qwen1.5b`` and ``qwen1.5b+pot`` are two rows.
Read from ``model_calls`` (samples of recorded questions: ``sample_index`` set) and ``questions``
(gold and kind), scored by :func:`agora.tasks.scoring.score_answer`.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from agora.tasks.scoring import score_answer
from agora.traces.store import TraceStore


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One member of a run."""

    model: str
    recipe: str | None
    """The recipe of its rewritten calls (``None``: chain-of-thought, the protocol's prompt)."""
    samples: int
    """Samples of recorded questions (every node and role)."""
    answered: int
    """Of ``samples``, those with an extracted answer."""
    correct: int
    """Of ``samples``, those whose answer is right (questions with gold)."""
    scored: int
    """Samples of questions with gold (the denominator of per-sample accuracy)."""
    programs: int
    """Program-of-thought samples (``program_run`` set)."""
    program_failures: int
    """Of ``programs``, those that gave no answer (an error, a time-out, no program, nothing printed)."""
    program_s_median: float | None
    """Median seconds of a program's run, sandbox included (``None`` without programs)."""
    scored_failures: int = 0
    """Of ``scored``, the samples whose program failed (never read as wrong answers)."""

    @property
    def accuracy(self) -> float:
        """Per-sample accuracy over scored samples (NaN when none)."""
        return self.correct / self.scored if self.scored else float("nan")

    @property
    def answered_accuracy(self) -> float:
        """Per-sample accuracy over the scored samples whose program did not fail: ``correct /
        (scored - scored_failures)`` (NaN when none); a failed program sample is a failure, not a
        wrong answer."""
        answered = self.scored - self.scored_failures
        return self.correct / answered if answered else float("nan")


#: What :func:`read_program_run` gives for a stored ``program_run`` that is not the JSON object
#: the store writes: the program is counted as failed, its value shown as unreadable.
UNREADABLE: dict[str, Any] = {"program": None, "output": None, "error": "unreadable program_run", "seconds": None}


def read_program_run(text: Any) -> dict[str, Any] | None:
    """A stored ``model_calls.program_run`` (JSON ``{"program", "output", "error", "seconds"}``) as a
    dict; ``None`` for NULL; :data:`UNREADABLE` for a value that is not that object (not JSON, an
    ``error`` that is not text, ``seconds`` not a number), never raising."""
    if text is None or text == "":
        return None
    try:
        run = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        run = None
    if not isinstance(run, dict) or not isinstance(run.get("error"), (str, type(None))) or \
            not isinstance(run.get("seconds"), (int, float, type(None))) or isinstance(run.get("seconds"), bool):
        return UNREADABLE
    return run


def has_recipes(store: TraceStore, run_id: str) -> bool:
    """Whether any sample of the run was asked under a recipe (``model_calls.recipe`` set)."""
    if "recipe" not in store.db["model_calls"].columns_dict:
        return False
    return any(store.db.query("select 1 from model_calls where run_id = ? and recipe is not null limit 1", [run_id]))


def member_rows(store: TraceStore, run_id: str) -> list[MemberRow]:
    """One :class:`MemberRow` per model of the run: the members of the run's pool (``runs.pool``) in
    the pool's order, then any other model that drew a sample (a recorder's own chat models) by
    name. The order never depends on which concurrent call finished first."""
    columns = store.db["model_calls"].columns_dict
    recipe = "c.recipe" if "recipe" in columns else "null"
    program = "c.program_run" if "program_run" in columns else "null"
    rows = store.db.query(
        f"select c.model, {recipe} as recipe, {program} as program_run, c.answer, q.gold, q.kind from model_calls c "
        "join questions q on q.run_id = c.run_id and q.question_id = c.question_id "
        "where c.run_id = ? and c.error is null and c.sample_index is not null order by c.created_at, c.call_id",
        [run_id])
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        m = seen.setdefault(r["model"], {"recipe": None, "samples": 0, "answered": 0, "correct": 0, "scored": 0,
                                         "programs": 0, "failures": 0, "seconds": [], "scored_failures": 0})
        m["recipe"] = m["recipe"] or r["recipe"]
        m["samples"] += 1
        m["answered"] += r["answer"] is not None
        ok = score_answer(r["answer"], r["gold"], r["kind"])
        run = read_program_run(r["program_run"])
        if ok is not None:
            m["scored"] += 1
            m["correct"] += bool(ok)
            m["scored_failures"] += run is not None and run.get("error") is not None
        if run is not None:
            m["programs"] += 1
            m["failures"] += run.get("error") is not None
            if run.get("seconds") is not None:
                m["seconds"].append(float(run["seconds"]))
    order = {name: i for i, name in enumerate(_pool_names(store, run_id))}
    ranked = sorted(seen, key=lambda model: (order.get(model, len(order)), model))
    return [MemberRow(model, (m := seen[model])["recipe"], m["samples"], m["answered"], m["correct"], m["scored"], m["programs"],
                      m["failures"], statistics.median(m["seconds"]) if m["seconds"] else None,
                      m["scored_failures"])
            for model in ranked]


def _pool_names(store: TraceStore, run_id: str) -> list[str]:
    """The member names of the run's stored pool (``runs.pool``, a JSON list of member settings), in
    its order; ``[]`` when the run has none or it is not that list."""
    run = store.get_run(run_id)
    try:
        pool = json.loads(run["pool"]) if run is not None and run.get("pool") else []
    except (TypeError, ValueError):
        return []
    if not isinstance(pool, list):
        return []
    return [m["name"] for m in pool if isinstance(m, dict) and isinstance(m.get("name"), str)]
