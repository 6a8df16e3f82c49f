"""Answer extraction and equivalence.

Math answers go through `math-verify <https://github.com/huggingface/Math-Verify>`_ (LaTeX and plain
expressions, thousands separators, ``$`` and units, ``\\frac{1}{2} == 0.5``) with a relative float
tolerance on top for GSM-Hard's float targets. Multiple-choice answers are option letters.

An output from which no answer can be extracted is never correct.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from typing import Literal

from math_verify import parse, verify

AnswerKind = Literal["math", "mc"]

#: Relative tolerance for numeric answers (GSM-Hard targets are floats such as 3.3333333).
REL_TOL = 1e-4

logging.getLogger("math_verify").setLevel(logging.ERROR)

_MC_PATTERNS = [
    re.compile(r"answer\s*(?:is|:)?\s*[:\-]?\s*\(?\**([A-J])\b\)?", re.IGNORECASE),
    re.compile(r"^\s*\(?([A-J])\)?\s*(?:[.):]|$)", re.MULTILINE),
    re.compile(r"\(([A-J])\)"),
    re.compile(r"\b([A-J])\b(?=[.)]?\s*$)"),
]


def _timeouts() -> dict:
    # math-verify uses signal.alarm, which only works in the main thread; LangGraph runs parallel
    # branches in worker threads, where we parse without its timeout.
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"parsing_timeout": None}


def _verify_kwargs() -> dict:
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"timeout_seconds": None}


def _parse_math(text: str) -> list:
    if not text or not text.strip():
        return []
    try:
        return parse(text, **_timeouts())
    except Exception:  # pragma: no cover - math-verify swallows most errors itself
        return []


@functools.lru_cache(maxsize=4096)
def _parse_given(answer: str) -> tuple:
    """Parse a bare answer (gold, or an extracted one): LaTeX like ``\\sqrt{2}`` needs a wrapper.

    Cached: a question's gold is compared with every method's answer, and answers repeat across
    candidates (the parsed sympy values are immutable).
    """
    if any(ch in answer for ch in "\\{}^"):
        parsed = _parse_math(f"\\boxed{{{answer}}}")
        if parsed:
            return tuple(parsed)
    return tuple(_parse_math(answer))


def _as_float(parsed: list) -> float | None:
    for item in parsed:
        if isinstance(item, str):
            continue
        try:
            value = float(item)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            return value
    return None


def extract_answer(text: str, kind: AnswerKind = "math", n_choices: int = 4) -> str | None:
    """Extract the final answer from a model's output.

    Args:
        text: the completion.
        kind: ``"math"`` (a number or expression) or ``"mc"`` (an option letter).
        n_choices: number of options for ``"mc"``; letters beyond it are ignored.

    Returns:
        The canonical answer string (see :func:`answer_key`), or ``None`` when nothing can be
        extracted.
    """
    if kind == "mc":
        letters = "ABCDEFGHIJ"[: max(1, n_choices)]
        for pattern in _MC_PATTERNS:
            for match in pattern.finditer(text or ""):
                letter = match.group(1).upper()
                if letter in letters:
                    return letter
        return None
    parsed = _parse_math(text)
    if not parsed:
        return None
    return _canonical(parsed)


def _canonical(parsed: list) -> str:
    value = _as_float(parsed)
    if value is not None:
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return repr(round(value, 10))
    return str(parsed[-1])


def answer_key(answer: str | None, kind: AnswerKind = "math") -> str | None:
    """Canonical form of an answer used to group votes (``"0.5"``, ``"\\frac{1}{2}"`` -> ``"0.5"``)."""
    if answer is None:
        return None
    if kind == "mc":
        return answer.strip().upper() or None
    parsed = _parse_given(answer)
    return _canonical(parsed) if parsed else answer.strip() or None


def is_correct(predicted: str | None, gold: str, kind: AnswerKind = "math") -> bool:
    """Whether ``predicted`` (an extracted answer, or ``None``) matches ``gold``.

    Math answers are equal when math-verify says so or, for numbers, when they agree within a
    relative tolerance of :data:`REL_TOL` (absolute for values below 1). ``None`` is never correct.
    """
    if predicted is None or not str(predicted).strip():
        return False
    if kind == "mc":
        return predicted.strip().upper() == gold.strip().upper()
    gold_parsed = _parse_given(gold)
    pred_parsed = _parse_given(predicted)
    if not gold_parsed or not pred_parsed:
        return False
    g, p = _as_float(gold_parsed), _as_float(pred_parsed)
    if g is not None and p is not None:
        return abs(g - p) <= REL_TOL * max(1.0, abs(g))
    try:
        return bool(verify(list(gold_parsed), list(pred_parsed), **_verify_kwargs()))
    except Exception:
        return False
