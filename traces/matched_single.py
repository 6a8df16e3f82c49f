"""The best single member at matched samples: its own vote over as many of its samples as a method used.

``agora bench --matched-single`` records, per task, the run ``<bench>:<task>:matched-single``
(:mod:`agora.graphs.matched_single`): the dev-chosen best member's samples of each test question
beyond its share of the shared candidate pool. Its own samples of a question are then, in order,
its shared ones (the candidates run, node ``candidates``) and the extra ones (node
``matched_draw``). For a method that used ``n`` samples in total on the question (its ``results``
row's ``samples``), the member's **matched self-consistency** is the plurality of its first ``n``
own samples (ties: the answer seen first; a sample without an answer counts in ``n`` and never
wins, :func:`agora.agents.delegation.plurality`), right when that answer is right.

:func:`read_matched` reads a task's samples from the store; :func:`matched_vote` votes;
:func:`matched_pairs` pairs a method with the member per question, per task and over the tasks
(95 % paired bootstrap CI, exact McNemar p), with the sample counts on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from agora.agents.delegation import plurality
from agora.agents.stats import macro_paired
from agora.tasks.scoring import score_answer
from agora.traces.report import too_few

#: The protocol key of the matched run in a bench task's ``runs``, and its protocol name.
MATCHED_RUN = "matched-single"


@dataclass(frozen=True, slots=True)
class MemberSamples:
    """One task's matched draw: the member, and per question its own samples in order (shared
    first, then the extra ones), each ``(answer, right)``."""

    member: str
    samples: dict[str, list[tuple[str | None, bool]]] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)
    """Question id → how many of its samples came from the shared pool."""


def _rows(store: Any, run_id: str, node: str, member: str) -> dict[str, list[str | None]]:
    out: dict[str, list[str | None]] = {}
    for r in store.db.query("select question_id, answer from model_calls where run_id = ? and node = ? and model = ? "
                            "and error is null order by question_id, sample_index", [run_id, node, member]):
        out.setdefault(r["question_id"], []).append(r["answer"])
    return out


def read_matched(store: Any, task: Any) -> MemberSamples | None:
    """``task``'s matched draw (:class:`MemberSamples`) for its test questions recorded in the
    matched run; ``None`` when the task has no matched run (a bench without ``--matched-single``)
    or no shared pool."""
    run, shared_run = task.runs.get(MATCHED_RUN), task.runs.get("candidates")
    if run is None or shared_run is None:
        return None
    member = (store.run_config(run) or {}).get("member")
    if not member:
        return None
    ids = set(task.question_ids)
    questions = {q["question_id"]: q for q in store.questions(run) if q["question_id"] in ids}
    shared, extra = _rows(store, shared_run, "candidates", member), _rows(store, run, "matched_draw", member)
    out = MemberSamples(member)
    for q, row in questions.items():
        if row["gold"] is None:
            continue
        kind = row["kind"] or "math"
        answers = shared.get(q, []) + extra.get(q, [])
        out.samples[q] = [(a, a is not None and bool(score_answer(a, row["gold"], kind))) for a in answers]
        out.shared[q] = len(shared.get(q, []))
    return out


def matched_vote(samples: Sequence[tuple[str | None, bool]], n: int) -> tuple[int, int]:
    """``(right, used)``: the plurality of the first ``n`` samples (``(answer, right)`` pairs) is
    right (1) or not (0), and how many samples it voted over (``min(n, len(samples))``).

    >>> matched_vote([("3", False), ("5", True), ("5", True), ("3", False)], 3)
    (1, 3)
    >>> matched_vote([("3", False), ("5", True), ("5", True), ("3", False)], 1)
    (0, 1)
    """
    used = list(samples[:max(0, n)])
    winner = plurality([a for a, _ in used])[0]
    right = next((r for a, r in used if a is not None and a == winner), False)
    return int(bool(right)), len(used)


def matched_pairs(spec: Any, results: dict[str, dict[str, dict[str, Any]]], matched: dict[str, MemberSamples],
                  seed: int = 0) -> dict[str, Any] | None:
    """A method against the matched member, per question: ``results`` is task → question id → the
    method's results row (``correct``, ``samples``); ``matched`` task → :class:`MemberSamples`.
    A question counts when the method was scored on it (``correct`` set, ``samples`` > 0) and the
    member's draw is recorded; the member votes over its first ``samples`` own samples.

    Returns ``None`` without any pair, else ``{"tasks": {task: pair}, "macro": pair}``, where a pair
    has ``diff`` (method − member, 0..1; macro: the mean of the per-task differences), ``ci_low``,
    ``ci_high`` (95 % paired bootstrap; macro: stratified by task), ``wins``, ``losses``,
    ``p_mcnemar`` (exact, on the discordant questions), ``questions``, ``too_few``,
    ``method_accuracy``, ``member_accuracy``, ``samples_method``, ``samples_member`` and
    ``samples_member_shared`` (means per question: the method's samples, the member's vote's, and
    how many of those came from the shared pool) and ``short`` (questions where the member had fewer own samples than the method used).
    """
    tasks: dict[str, dict[str, Any]] = {}
    every: list[tuple[list[int], list[int]]] = []
    counts: list[tuple[int, int, int]] = []
    for t in (t.name for t in spec.tasks):
        rows, mine = results.get(t) or {}, matched.get(t)
        if mine is None:
            continue
        x, y, used = [], [], []
        for q in sorted(mine.samples):
            r = rows.get(q)
            if r is None or r.get("correct") is None or not r.get("samples"):
                continue
            right, n = matched_vote(mine.samples[q], int(r["samples"]))
            x.append(int(bool(r["correct"])))
            y.append(right)
            used.append((int(r["samples"]), n, min(n, mine.shared.get(q, 0))))
        if not x:
            continue
        tasks[t] = _pair(macro_paired([(x, y)], seed=seed), [(x, y)], used)
        every.append((x, y))
        counts += used
    if not tasks:
        return None
    return {"tasks": tasks, "macro": {**_pair(macro_paired(every, seed=seed), every, counts), "tasks": len(tasks)}}


def _pair(pair: dict[str, Any], groups: list[tuple[list[int], list[int]]],
          used: list[tuple[int, int, int]]) -> dict[str, Any]:
    """``pair`` (:func:`agora.agents.stats.macro_paired`) with ``too_few``, both accuracies (the mean
    of the per-task ones) and the samples per question."""
    return {**pair, "too_few": too_few(pair["questions"], pair["ci_low"], pair["ci_high"]),
            "method_accuracy": sum(sum(x) / len(x) for x, _ in groups) / len(groups),
            "member_accuracy": sum(sum(y) / len(y) for _, y in groups) / len(groups),
            "samples_method": sum(n for n, _, _ in used) / len(used),
            "samples_member": sum(m for _, m, _ in used) / len(used),
            "samples_member_shared": sum(s for _, _, s in used) / len(used),
            "short": sum(m < n for n, m, _ in used)}
