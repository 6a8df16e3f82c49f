"""Where a model's output states an answer: the explicit statements (a final-answer marker, a
``\\boxed{}``/``\\fbox{}``, a ``#### N`` line) in order, one statement marked several ways counted
once as its outermost mark (``docs/scoring.md``, rule 1), and the sentence boundaries the reader
needs around them. :mod:`agora.tasks.extraction` reads the values of what this module finds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

How = Literal["marker", "boxed", "####", "fallback"]
"""How an answer was found: an explicit final-answer marker, a ``\\boxed{}``, a ``#### N`` line, or
the fallback (the output's last number or letter: guessed rather than stated)."""

_MARKER = re.compile(
    r"\bfinal\s+answer\b(?:\s*(?:is|would\s+be|will\s+be|:|=))?"
    r"|\b(?<!our\s)(?<!my\s)(?<!your\s)(?<!this\s)(?:the\s+)?(?:correct\s+|right\s+|best\s+|final\s+)?(?:answer|option|choice)\s*"
    r"(?:is|would\s+be|should\s+be|will\s+be|must\s+be|:|=)(?=\W|$)"
    r"|\b(?:the\s+)?(?:correct\s+|right\s+|final\s+)?answer\s+(?=(?:isn't|cannot\s+be|can't\s+be)\b)",
    re.I)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*([^\n]*)")
CALC_NOTE = re.compile(r"<<[^<>\n]*>>")


@dataclass(frozen=True, slots=True)
class Statement:
    start: int
    end: int
    how: How
    span: str
    latex: bool
    """The span is LaTeX (a box's content, ``$...$``): read whole, not as plain text."""
    closed: bool = True
    """``False`` for a ``\\boxed{`` the output never closes (cut off: no answer)."""


def _box_content(text: str, open_brace: int) -> tuple[str, int] | None:
    """Content of the braces opening at ``open_brace`` and the index after them; ``None`` if unclosed."""
    depth, i = 1, open_brace + 1
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1:i], i + 1
        i += 1
    return None


def sentence_end(text: str, start: int) -> int:
    """End of the sentence starting at ``start``: a newline, or ``.``/``!``/``?`` before a space
    (not a decimal point), outside ``$...$`` math and braces."""
    depth, dollars, i = 0, 0, start
    while i < len(text):
        ch = text[i]
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth = max(0, depth - 1)
        elif ch == "$" and (dollars or (i + 1 < len(text) and not (text[i + 1].isdigit() or text[i + 1].isspace()))):
            dollars ^= 1  # into or out of $...$ math; "$18" is a currency sign
        elif ch == "\n" and depth == 0:
            return i
        elif ch in ".!?" and depth == 0 and not dollars and (i + 1 == len(text) or text[i + 1].isspace()):
            return i
        i += 1
    return len(text)


def _marker_span(text: str, end: int) -> tuple[str, int, bool, bool]:
    """The statement after a marker ending at ``end``: its text, where it ends, whether LaTeX, and
    whether it is closed (not a box the output never closes)."""
    m = re.match(r"[\s:*]*", text[end:])
    i = end + m.end()
    for opening, closing in (("\\[", "\\]"), ("$$", "$$"), ("\\(", "\\)")):
        if text.startswith(opening, i):
            j = text.find(closing, i + len(opening))
            j = len(text) if j < 0 else j
            return text[i + len(opening):j], j + len(closing), True, True
    stop = sentence_end(text, i)
    span = text[i:stop]
    box = _BOX.search(span)
    if box:
        inner = _box_content(text, i + box.end() - 1)
        if inner is None:
            return text[i + box.end():], len(text), True, False
        return inner[0], inner[1], True, True
    dollar = re.match(r"\$(?=[^\d\s$])([^$]*)\$", span)
    if dollar:
        return dollar.group(1), i + dollar.end(), True, True
    return span, stop, False, True


def find_statements(text: str) -> list[Statement]:
    """Every explicit statement, in order; a box or ``####`` inside a marker's statement is part of it."""
    found: list[Statement] = []
    for m in _MARKER.finditer(text):
        span, stop, latex, closed = _marker_span(text, m.end())
        found.append(Statement(m.start(), max(stop, m.end()), "marker", span, latex, closed))
    for m in _BOX.finditer(text):
        inner = _box_content(text, m.end() - 1)
        span, stop = inner if inner else (text[m.end():], len(text))
        found.append(Statement(m.start(), stop, "boxed", span, True, inner is not None))
    for m in _HASHES.finditer(text):
        found.append(Statement(m.start(), m.end(), "####", m.group(1), False))
    rank = {"marker": 0, "boxed": 1, "####": 2}
    found.sort(key=lambda s: (s.start, rank[s.how]))
    kept: list[Statement] = []
    for s in found:
        if kept and s.start < kept[-1].end and rank[s.how] > rank[kept[-1].how]:
            continue  # nested in the statement before: counted once, as its outer mark
        kept.append(s)
    return kept


def next_sentence(text: str, end: int) -> str:
    """The rest of the sentence a statement ending at ``end`` is in, and the sentence after it."""
    after = text[end:]
    following = len(after) - len(after[sentence_end(after, 0) + 1:].lstrip())
    return after[:sentence_end(after, following)]
