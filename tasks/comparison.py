"""When an extracted answer counts as the gold answer (``docs/scoring.md``, rules 4 and 5): equal
under math-verify, numbers exactly against an integer gold and within :data:`REL_TOL` against a
non-integer one, several values only against the same several values, option letters as letters;
and the canonical key that groups equal answers for a vote.
"""

from __future__ import annotations

import functools
import math
import re

from math_verify import verify

from agora.tasks.values import (CLOCK, INTEGER, AnswerKind, as_float, ascii_digits, parse_value, plain_numerals, read_values,
                               verify_kwargs)

#: Relative tolerance for non-integer numeric gold answers (GSM-Hard targets such as 3.3333333).
#: Integer gold answers compare exactly.
REL_TOL = 1e-4


@functools.lru_cache(maxsize=8192)
def _answer_values(answer: str) -> tuple[str, ...]:
    """Canonical values of a bare answer (gold, or an extracted one); cached, as golds repeat."""
    values, _ = read_values(plain_numerals(ascii_digits(answer)).strip())
    return tuple(values)


def answer_key(answer: str | None, kind: AnswerKind = "math") -> str | None:
    """Canonical form of an answer used to group votes (``"0.5"``, ``"\\frac{1}{2}"`` -> ``"0.5"``;
    several values joined by ``", "``); ``None`` for ``None`` or an empty answer."""
    if answer is None:
        return None
    if kind == "mc":
        return answer.strip().upper() or None
    values = _answer_values(answer)
    return ", ".join(values) if values else answer.strip() or None


_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _plain_number(value: str) -> int | float | None:
    """A canonical value written as a plain number: an integer exactly (``int``), a decimal or
    scientific one as a finite ``float``; ``None`` otherwise (LaTeX, a variable, a tuple)."""
    if INTEGER.fullmatch(value):
        return int(value)
    if _DECIMAL.fullmatch(value):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _same_value(gold: str, predicted: str) -> bool:
    if CLOCK.fullmatch(gold) or CLOCK.fullmatch(predicted):
        return gold == predicted  # "12:30" is a time or ratio, not 12
    g_number, p_number = _plain_number(gold), _plain_number(predicted)
    if g_number is not None and p_number is not None:  # (Python compares an int with a float exactly)
        if g_number == int(g_number):
            return p_number == g_number  # integer golds compare exactly, past a float's 2**53 too
        return abs(g_number - p_number) <= REL_TOL * max(1.0, abs(g_number))
    g_parsed, p_parsed = parse_value(gold), parse_value(predicted)
    if not g_parsed or not p_parsed:
        return False
    g, p = as_float(g_parsed), as_float(p_parsed)
    if g is not None and p is not None:
        if g == int(g):
            return p == g  # integer golds compare exactly
        return abs(g - p) <= REL_TOL * max(1.0, abs(g))
    try:
        return bool(verify(list(g_parsed), list(p_parsed), **verify_kwargs()))
    except Exception:
        return False


def is_correct(predicted: str | None, gold: str, kind: AnswerKind = "math") -> bool:
    """Whether ``predicted`` (an extracted answer, or ``None``) matches ``gold``.

    Math answers are equal when math-verify says so; numbers compare exactly against an integer
    gold and within a relative tolerance of :data:`REL_TOL` (absolute below 1) against a
    non-integer one. An answer naming several values is correct only against a gold answer naming
    the same values (in any order). Option letters compare as letters. ``None`` is never correct.
    """
    if predicted is None or not str(predicted).strip():
        return False
    if kind == "mc":
        return predicted.strip().upper() == gold.strip().upper()
    gold, predicted = ascii_digits(gold), ascii_digits(predicted)
    gold_values, pred_values = _answer_values(gold), _answer_values(predicted)
    if not gold_values or not pred_values or len(gold_values) != len(pred_values):
        return False
    if len(gold_values) == 1:
        return _same_value(gold_values[0], pred_values[0])
    unmatched = list(pred_values)
    for g in gold_values:
        hit = next((p for p in unmatched if _same_value(g, p)), None)
        if hit is None:
            return False
        unmatched.remove(hit)
    return True
