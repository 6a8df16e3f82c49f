"""The one place answers are scored against gold: the runner, the bench, the trace recorder, replay
and reports all call :func:`score_answer` or :func:`score_results`; protocol graphs never do.

A graph returns, per method, its answer, how it was found and its cost, with ``correct`` left
``None`` (``agora.traces.schema.MethodResult``); whoever holds the problem's gold fills it in
afterwards. So a graph embedded in an app needs no gold, its state and checkpoints hold none, and a
stored run is re-scored from its answers without calling a model (Inspect AI keeps solvers and
scorers apart in the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agora.tasks.comparison import is_correct
from agora.tasks.problem import AnswerKind, Problem


def score_answer(answer: str | None, gold: str | None, kind: AnswerKind | str | None = "math") -> bool | None:
    """Whether ``answer`` (an extracted answer, or ``None``) is correct against ``gold``: the task's
    checker :func:`agora.tasks.comparison.is_correct` (``docs/scoring.md``) for a ``math`` or ``mc``
    question; ``None`` without gold or for an ``open`` question (no checker). No answer against a
    gold is ``False``. ``kind`` ``None`` means ``math``."""
    if gold is None or kind == "open":
        return None
    return is_correct(answer, gold, kind or "math")  # type: ignore[arg-type]


def score_results(results: Mapping[str, Mapping[str, Any]], problem: Problem) -> dict[str, dict[str, Any]]:
    """Each method's result row with ``correct`` set by :func:`score_answer` against ``problem``'s
    gold and kind; every other field (answer, cost, ``how``) is kept. Returns new dicts in the same
    method order; ``results`` is not changed. A stored ``correct`` is recomputed, so rows scored by
    an older graph (a resumed checkpoint) come out the same as fresh ones.

    Args:
        results: method name → ``{"answer", ...}`` (a graph's ``methods``).
        problem: the question; its ``gold`` (``None``: every ``correct`` is ``None``) and ``kind``.
    """
    return {method: {**row, "correct": None if _failed(row) else score_answer(row.get("answer"), problem.gold,
                                                                              problem.kind)}
            for method, row in results.items()}


def _failed(row: Mapping[str, Any]) -> bool:
    """A method that drew no sample (every attempt failed) is failed, not wrong: as the store and
    report count it (``samples == 0``, or a ``failed`` flag)."""
    return bool(row.get("failed")) or (row.get("answer") is None and row.get("samples") == 0)
