"""Answer extraction and equivalence, under one scoring policy for every task kind (``docs/scoring.md``).

Which statement of a model's output is its final answer, and when that answer counts:

1. **Explicit statements**: a final-answer marker (``The answer is``, ``Final answer:``, ``The correct
   option is``), a ``\\boxed{}`` (or ``\\fbox{}``), or a ``#### N`` line. Read in the order they appear,
   the **last** one is the final answer, so a later answer that corrects an earlier one wins. One
   statement marked several ways (``The final answer is \\boxed{5}``) counts once, as its outermost
   mark (marker, then ``\\boxed{}``, then ``####``). A marker followed by no value (``the answer is
   the sum of ...``) is not a statement.
2. **Fallback** when there is no explicit statement: the last number or math expression of the output
   (``math``), or the option letter(s) of its last sentence that names one (``mc``). Answers found
   this way are marked ``how="fallback"``: guessed, not stated. The rules of 3 apply to them too: a
   guess from a sentence that gives up or doubts (``It cannot be determined whether she has 12``,
   ``I'm not sure, but I think it's B``) is a refusal, and a bound or inequality (``at least 12``,
   ``x > 12``, ``12 or more``) is a bound.
3. **No answer** (``None``, always wrong): an empty output; a final statement that is negated
   (``The answer is not 25.``, ``Not A.``) or a refusal (``cannot be determined``, ``I don't know``,
   ``I'm not sure`` after the value); an unfinished expression (an output cut mid-calculation,
   ``= <<120*7/(7+1``, an unclosed ``\\boxed{``); a bound instead of a value (``at least 12``,
   ``no more than 12``, ``12 or more``).
   **The sentence after** the final statement counts only through short lists of cues: doubt
   (``The answer is 12. But I'm not sure.``: a refusal), a retraction (``Just kidding, it is not
   12.``: no answer, unless it names its own value), an alternative (``Alternatively, it could be
   13.``, ``Or maybe C.``: its value is added, so several values).
4. **Values**: an equation's value is its final right-hand side (``\\boxed{x = 5}`` is 5, ``3 + 4 = 7``
   is 7) when its left side is one variable or a calculation without variables; other equations
   (``5x - 7y + 11z + 4 = 0``) stay whole. A final answer that names several different values (a
   list ``3, 20``, ``25 or 20``, ``12 or maybe 10``, ``12 (maybe 10)``, bare numbers side by side
   ``12 13``, a range ``5-7``/``5 to 7``, ``\\pm``/``±``, several letters ``A or C``, ``B (or C)``,
   a letter range ``A-C``) is wrong unless the gold answer names the same values. ``1e1`` is 10; a
   clock time ``12:30`` is not 12 (``2:00`` is 2). ``$``, ``%``, thousands commas and units
   words are not part of a value.
5. **Comparison**: equivalence is `math-verify <https://github.com/huggingface/Math-Verify>`_'s
   (``\\frac{1}{2} == 0.5``, intervals, sets, expressions). Numbers: an integer gold answer compares
   exactly; a non-integer one (GSM-Hard's float targets) within a relative tolerance of
   :data:`REL_TOL`. Option letters compare as letters.
6. **Option letters** are read only as letters: a capital ``A``..``J`` (within the options), or one in
   parentheses; not the article ``a`` (``a bit unclear``), not the pronoun ``I`` (``I think``).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Literal

from math_verify import parse, verify

AnswerKind = Literal["math", "mc"]
How = Literal["marker", "boxed", "####", "fallback"]
"""How an answer was found: an explicit final-answer marker, a ``\\boxed{}``, a ``#### N`` line, or
the fallback (the output's last number or letter: guessed rather than stated)."""
NoAnswer = Literal["empty", "none", "negated", "refusal", "unfinished", "bound", "echo"]
"""Why an output has no answer: empty, nothing answer-like, a negated (or retracted) final statement,
a refusal (or doubt after the value, or in the next sentence), an unfinished expression, a bound
(``at least 12``) instead of a value, an echo (the answer is only in what the output copied from the
question, :func:`is_echo`)."""

#: Relative tolerance for non-integer numeric gold answers (GSM-Hard targets such as 3.3333333).
#: Integer gold answers compare exactly.
REL_TOL = 1e-4

logging.getLogger("math_verify").setLevel(logging.ERROR)


@dataclass(frozen=True, slots=True)
class Extraction:
    """What :func:`find_answer` read from one output."""

    answer: str | None
    """The canonical answer (see :func:`answer_key`); several values are joined by ``", "``;
    ``None`` when the output has no answer."""
    how: How | None
    """Which rule found the final statement; ``None`` when none was found."""
    reason: NoAnswer | None = None
    """Why ``answer`` is ``None``; ``None`` when there is an answer."""
    span: str | None = None
    """The text the answer was read from (the statement after its marker, a box's content, ...)."""
    several: bool = False
    """The answer names several different values (wrong against a single-valued gold answer)."""


# ----------------------------------------------------------------------------- digits

#: A decimal digit of a script other than ASCII (Unicode category Nd: Arabic-Indic ``٧``, Devanagari
#: ``७``, fullwidth ``７``, ...).
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")
#: The fullwidth forms of ASCII (U+FF01..U+FF5E: ``Ｂ``, ``（``, ``＝``) as their ASCII characters.
_FULLWIDTH = {0xFF01 + i: 0x21 + i for i in range(94)}
#: Arabic decimal and thousands separators between two digits (``٣٫٥`` is 3.5, not 3).
_SEPARATORS = {"٫": ".", "٬": ","}
_SEPARATOR = re.compile(r"(?<=[0-9])[٫٬](?=[0-9])")


def ascii_digits(text: str) -> str:
    """``text`` with every decimal digit written as its ASCII digit (``"#### ٧"`` → ``"#### 7"``,
    ``"１２"`` → ``"12"``), by its Unicode decimal value (:func:`unicodedata.decimal`); the decimal
    and thousands separators of those scripts between digits as ``.`` and ``,`` (``٣٫٥`` →
    ``3.5``); and the fullwidth forms of ASCII as ASCII (``（Ｂ）`` → ``(B)``). Nothing else
    changes (not superscripts, fractions or other compatibility forms NFKC would rewrite: ``x²``
    stays ``x²``). Applied to outputs and gold answers alike, so a gold and a reply in the same
    digits of any script compare as numbers."""
    if text.isascii():
        return text
    text = text.translate(_FULLWIDTH)
    text = _OTHER_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text)
    return _SEPARATOR.sub(lambda m: _SEPARATORS[m.group()], text)


# ----------------------------------------------------------------------------- math-verify


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


@functools.lru_cache(maxsize=8192)
def _parse_given(answer: str) -> tuple:
    """Parse one bare value (gold, or an extracted one): LaTeX like ``\\sqrt{2}`` needs a wrapper.

    Cached: a question's gold is compared with every method's answer, and answers repeat across
    candidates (the parsed sympy values are immutable).
    """
    if re.search(r"[\\{}^()\[\],A-Za-z]", answer):  # LaTeX, tuples, intervals, variables
        parsed = _parse_math(f"\\boxed{{{answer}}}")
        if parsed:
            return tuple(parsed)
    return tuple(_parse_math(answer))


def _as_float(parsed) -> float | None:
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


_SCIENTIFIC = re.compile(r"[-+]?\d+(?:\.\d+)?[eE][-+]?\d+")
_CLOCK = re.compile(r"\d+(?::\d+)+")


def _canonical_value(value: str) -> str | None:
    """One value's canonical string: ``"2125"``, ``"0.5"``, else math-verify's reading of it.
    Scientific notation (``1e1``, ``2.5E-3``) is read as a number; a clock time or ratio
    (``12:30``) stays as written (it is not 12); one on the hour (``2:00``) is the hour."""
    if _SCIENTIFIC.fullmatch(value):
        number = float(value)
        if number == int(number) and abs(number) < 1e15:
            return str(int(number))
        return repr(round(number, 10))
    if _CLOCK.fullmatch(value):  # a clock time on the hour (2:00) is the hour, as in the fallback
        return value.split(":")[0].lstrip("0") or "0" if re.fullmatch(r"\d+(?::0+)+", value) else value
    parsed = _parse_given(value)
    if not parsed:
        return None
    number = _as_float(parsed)
    if number is not None:
        if number == int(number) and abs(number) < 1e15:
            return str(int(number))
        return repr(round(number, 10))
    return str(parsed[-1]).strip() or None


# ----------------------------------------------------------------------------- reading values

_NUM = r"\d+(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
#: A number in running text (the fallback's candidates): sign, thousands commas, a fraction ``5/2``;
#: not an ordinal (``10th``), a label (``horse #12``) or the minutes of a clock time (``2:00`` reads 2).
_NUMBER = re.compile(rf"(?:(?:(?<=[\s=($])|^)-(?=\d))?(?<![\w.,#:])(?:{_NUM})(?:\s*/\s*(?:{_NUM}))?(?!\d|(?:st|nd|rd|th)\b)")
#: A thousands comma (``2,125``, LaTeX ``10,\!080``): not a list separator.
_THOUSANDS = re.compile(r"(?<=\d),(?:\\!\s*)?(?=\d{3}(?!\d))")
_CMD_WORDS = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}|\\[A-Za-z]+")
_OPEN, _CLOSE = "([{", ")]}"
_NEGATION = re.compile(r"^(?:not|isn't|is\s+not|never|cannot\s+be|can't\s+be|wouldn't\s+be)\b", re.I)
_CORRECTION = re.compile(r"^[^,;.]*(?:,|;|\.)?\s*(?:but|rather|instead|it'?s|it\s+is)\s+(?:rather\s+|actually\s+)?", re.I)
#: A refusal: the statement gives up instead of naming a value.
_REFUSAL = re.compile(
    r"\b(?:i\s+(?:do\s+not|don't|can\s*not|can't)\s+(?:know|say|tell|answer|determine|solve)|cannot\s+be\s+determined"
    r"|can't\s+be\s+determined|undetermined|indeterminate|not\s+enough\s+information|insufficient\s+information"
    r"|impossible\s+to\s+(?:say|tell|determine|know)|unable\s+to|no\s+way\s+to\s+(?:know|tell)|unclear|unknown"
    r"|no\s+idea|not\s+sure|unsure|none|no\s+(?:valid\s+|possible\s+|such\s+)?(?:solution|answer))\b", re.I)
#: Doubt or giving up after the value (``25, but I'm not sure``, ``... so it is not possible to
#: determine``): a hedge, not an answer.
_DOUBT = re.compile(
    r"\b(?:not\s+(?:sure|certain|confident)|unsure|i\s+(?:do\s+not|don't)\s+know|(?:might|may|could)\s+be\s+wrong"
    r"|i\s+(?:might|may)\s+be\s+mistaken|(?:not\s+possible|impossible)\s+to\s+(?:say|tell|determine|know|find)"
    r"|(?:can\s*not|can't)\s+be\s+(?:sure|certain)"
    r"|cannot\s+be\s+determined|can't\s+be\s+determined|not\s+enough\s+information)\b", re.I)
#: Giving up in the sentence of a guessed number (the fallback): ``It cannot be determined whether
#: she has 12``, ``I am unable to determine ...``: a refusal, whatever number the sentence names.
_GIVES_UP = re.compile(
    r"\b(?:(?:can\s*not|can't|could\s*not|couldn't|unable\s+to|impossible\s+to|not\s+possible\s+to|no\s+way\s+to)"
    r"\s+(?:determine|know|tell|say|solve|answer)|(?:can\s*not|can't|could\s*not|couldn't)\s+be\s+"
    r"(?:determined|known|calculated|computed|found|answered|solved)|(?:not\s+enough|insufficient|missing)\s+"
    r"(?:information|data)|undetermined|indeterminate|i\s+(?:do\s+not|don't)\s+know|no\s+idea)\b", re.I)
#: A bound just before a guessed number (the fallback): ``at least 12``, ``x > 12``, ``no more than
#: 12``, ``up to 12`` (not ``adds up to 12``, a total); an arrow (``=>``, ``->``) is not ``>``.
_BOUND_BEFORE = re.compile(
    r"(?:\bat\s+(?:least|most)|\b(?:no|not)\s+(?:more|less|fewer|greater|higher|lower)\s+than|\b(?:more|less|fewer"
    r"|greater|higher|lower)\s+than|(?<!\badd\s)(?<!adds\s)(?<!added\s)(?<!adding\s)(?<!sums\s)(?<!comes\s)"
    r"(?<!came\s)(?<!totals\s)\bup\s+to|\ba\s+(?:minimum|maximum)\s+of|\b(?:over|under)"
    r"|(?<=[^\s=<>-])\s*(?:>=?|<=?)|[≥≤])\s*(?:[$€£]\s*)?$", re.I)
#: A bound or inequality just after a guessed number: ``12 or more``, ``12 < x``.
_BOUND_AFTER_GUESS = re.compile(r"^\s*(?:<(?!<)|>(?!>)|≤|≥)")
_FILLER = re.compile(
    r"^(?:[:=\s*]|-(?=\s+[A-Za-z])|(?:therefore|thus|hence|so|then|simply|just|exactly|approximately|about|around|"
    r"roughly|probably|likely|clearly|indeed|now|actually|still|finally|that|option|choice|letter|i\s+think|"
    r"i\s+believe|we\s+get|we\s+have|equal\s+to|given\s+by|calculated\s+as)\b,?)+", re.I)
_SEVERAL_WORDS = re.compile(r"^(?:between|either|both|any\s+of|one\s+of|somewhere\s+between)\b\s*", re.I)
_PLAIN_VALUE = re.compile(
    r"(?:[A-Za-z]\s*=\s*)?[-−+]?\s*(?:[$€£]\s*)?(?:\d|\.\d|\()"
    r"(?:(?<=\d)[eE][-+]?\d+(?![A-Za-z])|(?<=\d):(?=\d)|[\d\s.,+\-−*/×÷^=()<>$€£%]|[xX](?=\s*[\d$(])"
    r"|[A-Za-z]+(?=\s*[*/×÷=]))*")
#: What joins several values in plain text: ``or``/``and``/``to``/a dash (``25 or 20``), a hedge word
#: (``12 or maybe 10``, ``12 or else 10``, ``12 (possibly 10)``), ``\pm``/``±`` (``3 \pm 1``).
_PLAIN_JOIN = re.compile(
    r"\s*(?:(?:[A-Za-z]+\s+){0,3}?(?:or|and|to|through|–|—)(?:\s+(?:maybe|possibly|perhaps|else|even|probably))?"
    r"|(?:maybe|possibly|perhaps)|\\pm\b|\\mp\b|±|∓)\s*(?=(?:[$€£]\s*)?[-−]?\s*\.?\d)", re.I)
#: A bound instead of a value: ``at least 12``, ``no more than 12``, ``≥ 12``.
_BOUND = re.compile(
    r"^(?:at\s+(?:least|most)|(?:no|not)\s+(?:more|less|fewer|greater|higher|lower)\s+than|(?:more|less|fewer|greater)"
    r"\s+than|up\s+to|a\s+(?:minimum|maximum)\s+of|(?:over|under)(?=\s*[$€£]?\s*\d)|>=|<=|≥|≤|>|<)", re.I)
_BOUND_AFTER = re.compile(
    r"^[\s,]*(?:[A-Za-z]+\s+)?(?:or\s+(?:more|less|fewer|greater|higher|lower|above|below|over|under)|at\s+(?:least|most)"
    r"|(?:and|or)\s+up)\b", re.I)
#: Several bare numbers side by side (``12 13``): several values, not one.
_BARE_NUMBERS = re.compile(r"\s*[$€£]?-?\d+(?:\.\d+)?(?:\s+[$€£]?-?\d+(?:\.\d+)?)+\s*")
_LATEX_SEPARATORS = re.compile(r"\\text\s*\{\s*(?:or|and)\s*\}|\\(?:quad|qquad|lor|vee)\b|\bor\b|\band\b|\\pm|\\mp|±|∓|;")
#: A range: ``5 to 7``, ``5–7``, ``-5 to -3``, or a hyphen without spaces ``5-7`` (``5 - 7`` is a subtraction).
_RANGE = re.compile(r"\s*\$?(-?\d+(?:\.\d+)?)(?:\s*(?:–|—|\bto\b|\bthrough\b)\s*\$?(-?\d+(?:\.\d+)?)|-(\d+(?:\.\d+)?))"
                    r"(?:\s*[A-Za-z]+)*\s*")


def _top_level(text: str, at: re.Pattern | str) -> list[str]:
    """Split ``text`` at ``at`` outside brackets (``()[]{}`` and ``\\left( ... \\right)``)."""
    pattern = re.compile(re.escape(at)) if isinstance(at, str) else at
    parts, depth, last, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0:
            m = pattern.match(text, i)
            if m and m.end() > i:
                parts.append(text[last:i])
                last = i = m.end()
                continue
        i += 1
    parts.append(text[last:])
    return parts


def _unclosed(text: str) -> bool:
    """An opening bracket is left open (a stray closing one, as in ``1)``, is not counted)."""
    depth = 0
    for ch in re.sub(r"\\[{}]|\\left.|\\right.", "", text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return depth > 0


def _has_variables(text: str) -> bool:
    """Letters outside LaTeX commands and ``\\text{}`` (plain words are units, not variables)."""
    bare = _CMD_WORDS.sub(" ", text)
    return bool(re.search(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])", re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", "*", bare)))


def _equation_value(expr: str) -> str:
    """The final right-hand side of an equation whose left side is one variable or a calculation
    (``x = 5``, ``y = 2x + 3``, ``20 chickens - 80 cups = -60 cups``); other text unchanged."""
    parts = _top_level(expr, re.compile(r"=|\\approx|≈|\\Rightarrow|\\implies"))
    if len(parts) < 2:
        return expr
    lhs = parts[0].strip()
    single_variable = re.fullmatch(r"[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+", lhs) is not None
    calculation = all(not _has_variables(p) for p in parts[:-1])
    return parts[-1].strip() if single_variable or calculation else expr


def _split_values(expr: str) -> list[str]:
    """The values an answer names: top-level list commas (not thousands commas), ``or``/``and``,
    ``;``, ``\\pm``, ranges (``5-7``, ``5 – 7``, ``5 to 7``), and bare numbers side by side (``12 13``)."""
    expr = _THOUSANDS.sub("", expr)
    pieces: list[str] = []
    for part in _top_level(expr, ","):
        for sub in _top_level(part, _LATEX_SEPARATORS):
            rng = _RANGE.fullmatch(sub)
            if rng:
                pieces += [rng.group(1), rng.group(2) or rng.group(3)]
            elif _BARE_NUMBERS.fullmatch(sub):
                pieces += sub.split()  # "12 13": two values
            else:
                pieces.append(sub)
    return [p.strip() for p in pieces if p.strip()]


def _clean_value(value: str) -> str:
    value = value.replace("−", "-").replace("×", "*").replace("÷", "/")
    value = re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", "*", value)
    value = re.sub(r"\\%|%|\\\$|[$€£]", "", value)
    return value.strip().rstrip(".,;:!").strip()


def _values(expr: str) -> tuple[list[str], NoAnswer | None]:
    """Canonical values of one answer expression (an equation's value, each of several values)."""
    expr = expr.replace("**", "")
    if re.search(r"<<(?![^<]*>>)", expr) or _unclosed(expr) \
            or re.search(r"(?:[-+*/^=(]|\\|\\frac\s*\{[^{}]*\})\s*$", expr.strip()):
        return [], "unfinished"
    out: list[str] = []
    pieces = _split_values(expr)
    if len(pieces) > 1 and len(_top_level(expr, "=")) > 1 and not _has_variables(_top_level(expr, "=")[0]):
        pieces = _split_values(_equation_value(expr))  # "3 + 4 = 7, 8": the calculation's values
    for piece in pieces:
        canon = _canonical_value(_clean_value(_equation_value(piece)))
        if canon is not None and canon not in out:
            out.append(canon)
    return out, (None if out else "none")


def _plain_values(text: str) -> tuple[list[str], int]:
    """The math expressions at the start of plain-text ``text`` (``18 eggs, ...`` → ``18``;
    ``x = 5``; ``25 or 20``, ``5 to 7`` → two) and where they end."""
    exprs, i = [], 0
    while True:
        m = _PLAIN_VALUE.match(text, i)
        if not m:
            break
        expr = re.sub(r"[\s.,:;(\-–—]+$", "", m.group(0))
        while expr.endswith(")") and expr.count(")") > expr.count("("):
            expr = re.sub(r"[\s.,:;(\-–—]+$", "", expr[:-1])  # "12 (maybe 10)": the hedge's bracket
        exprs.append(expr)
        i = m.end()
        join = _PLAIN_JOIN.match(text, i)
        if not join:
            break
        i = join.end()
    return exprs, i


# ----------------------------------------------------------------------------- statements

_MARKER = re.compile(
    r"\bfinal\s+answer\b(?:\s*(?:is|would\s+be|will\s+be|:|=))?"
    r"|\b(?<!our\s)(?<!my\s)(?<!your\s)(?<!this\s)(?:the\s+)?(?:correct\s+|right\s+|best\s+|final\s+)?(?:answer|option|choice)\s*"
    r"(?:is|would\s+be|should\s+be|will\s+be|must\s+be|:|=)(?=\W|$)"
    r"|\b(?:the\s+)?(?:correct\s+|right\s+|final\s+)?answer\s+(?=(?:isn't|cannot\s+be|can't\s+be)\b)",
    re.I)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*([^\n]*)")
_CALC_NOTE = re.compile(r"<<[^<>\n]*>>")


@dataclass(frozen=True, slots=True)
class _Statement:
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


def _sentence(text: str, start: int) -> int:
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
    stop = _sentence(text, i)
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


def _statements(text: str) -> list[_Statement]:
    """Every explicit statement, in order; a box or ``####`` inside a marker's statement is part of it."""
    found: list[_Statement] = []
    for m in _MARKER.finditer(text):
        span, stop, latex, closed = _marker_span(text, m.end())
        found.append(_Statement(m.start(), max(stop, m.end()), "marker", span, latex, closed))
    for m in _BOX.finditer(text):
        inner = _box_content(text, m.end() - 1)
        span, stop = inner if inner else (text[m.end():], len(text))
        found.append(_Statement(m.start(), stop, "boxed", span, True, inner is not None))
    for m in _HASHES.finditer(text):
        found.append(_Statement(m.start(), m.end(), "####", m.group(1), False))
    rank = {"marker": 0, "boxed": 1, "####": 2}
    found.sort(key=lambda s: (s.start, rank[s.how]))
    kept: list[_Statement] = []
    for s in found:
        if kept and s.start < kept[-1].end and rank[s.how] > rank[kept[-1].how]:
            continue  # nested in the statement before: counted once, as its outer mark
        kept.append(s)
    return kept


# ----------------------------------------------------------------------------- math


def _read_math(span: str, latex: bool) -> tuple[list[str], NoAnswer | None]:
    """Values of one statement; ``([], reason)`` when it is no answer, ``([], None)`` when it
    names no value (then it is not a statement)."""
    s = _FILLER.sub("", span.replace("**", "").strip()).strip()
    if _BOUND.match(s) and re.search(r"\d", s):
        return [], "bound"  # "at least 12": a bound, not a value
    if _NEGATION.match(s):
        rest = _NEGATION.sub("", s, count=1)
        fix = _CORRECTION.match(rest)  # "not 25, but 30": the correction is the statement
        if not fix:
            return [], "negated"
        s = _FILLER.sub("", rest[fix.end():]).strip()
    if not latex and re.match(r"[-−+]?\s*\\[A-Za-z]", s):
        latex = True
    if latex:
        s = re.sub(r"^\$|\$$", "", s.strip()).strip()
        return _values(s) if s else ([], None)
    several = _SEVERAL_WORDS.match(s)
    exprs, end = _plain_values(s[several.end():] if several else s)
    if not exprs:
        return [], ("refusal" if _REFUSAL.search(s) else None)
    values: list[str] = []
    for expr in exprs:
        found, reason = _values(expr)
        if reason == "unfinished":
            return [], reason
        values += [v for v in found if v not in values]
    if values and _DOUBT.search(s[end:]):
        return [], "refusal"
    if values and _BOUND_AFTER.match(s[end:]):
        return [], "bound"  # "12 or more"
    return values, (None if values else "none")


def _unfinished_end(text: str) -> bool:
    """The output stops mid-calculation: an unclosed ``<<`` note or bracket on its last line, a
    trailing operator, ``:`` or ``,``, or a number cut inside its thousands groups (``130,00``)."""
    tail = text.rstrip()
    last = tail.rsplit("\n", 1)[-1]
    if re.search(r"<<(?![^<]*>>)", last) or re.search(r"\d,\d{1,2}$", tail):
        return True
    if re.search(r"(?:[+/×÷^=(\\{:,]|(?<![-])-|(?<![*])\*)\s*$", tail):
        return True
    return _unclosed(_CALC_NOTE.sub("", last))


_LATEX_REGION = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|\$([^$\n]*[\\^{][^$\n]*)\$", re.S)
_HEDGE_BEFORE = re.compile(
    rf"(?:(-?(?:{_NUM}))\s*%?\s*(?:[A-Za-z]+\s+){{0,2}}?(?:or|to|through|–|—)\s*|\b(?:between|either)\s+\$?(-?(?:{_NUM}))"
    rf"\s*%?\s*(?:[A-Za-z]+\s+){{0,2}}?(?:and|or)\s*|(\d+(?:\.\d+)?)-)\$?\s*$", re.I)


def _fallback_math(text: str) -> Extraction:
    """No explicit statement: the output's last number or LaTeX math, if the output is finished."""
    if _unfinished_end(text):
        return Extraction(None, "fallback", "unfinished")
    candidates: list[tuple[int, int, str, bool]] = []  # end, start, text, latex
    for m in _LATEX_REGION.finditer(text):
        candidates.append((m.end(), m.start(), next(g for g in m.groups() if g is not None), True))
    regions = [(start, end) for end, start, _t, _l in candidates]
    for m in _NUMBER.finditer(text):
        if not any(s <= m.start() < e for s, e in regions):
            candidates.append((m.end(), m.start(), m.group(0), False))
    if not candidates:
        return Extraction(None, None, "refusal" if _REFUSAL.search(text) else "none")
    end, start, body, latex = max(candidates)
    clause = re.split(r"[,;:\n]|[.!?]\s", text[:start])[-1]
    if re.search(r"(?:\bnot|\bnever|\bcannot\s+be|\bcan't\s+be|n't)\s+(?:be\s+|equal\s+to\s+|exactly\s+)?\$?\s*$", clause, re.I):
        return Extraction(None, "fallback", "negated", span=body)
    after = text[end:]
    following = len(after) - len(after[_sentence(after, 0) + 1:].lstrip())  # where the next sentence starts
    window = after[:_sentence(after, following)]  # the rest of the value's sentence and the next one
    sentence = re.split(r"[.!?]\s|\n", text[:start])[-1]  # the value's sentence up to the value
    if _DOUBT.search(window) or _GIVES_UP.search(window) or _DOUBT.search(sentence) or _GIVES_UP.search(sentence):
        return Extraction(None, "fallback", "refusal", span=body)
    if not latex and (_BOUND_BEFORE.search(clause) or _BOUND_AFTER.match(after) or _BOUND_AFTER_GUESS.match(after)):
        return Extraction(None, "fallback", "bound", span=body)  # "at least 12", "x > 12", "12 or more"
    values, reason = _values(body if latex else re.sub(r"[.,]+$", "", body))
    hedge = None if latex else _HEDGE_BEFORE.search(text[max(0, start - 80):start])
    if hedge and values:
        other = _canonical_value(_clean_value(next(g for g in hedge.groups() if g is not None)))
        values = [other] + values if other is not None and other not in values else values
    return _result(values, reason, "fallback", body)


def _result(values: list[str], reason: NoAnswer | None, how: How, span: str) -> Extraction:
    if not values:
        return Extraction(None, how, reason or "none", span=span)
    if len(values) > 1:
        return Extraction(", ".join(values), how, span=span, several=True)
    return Extraction(values[0], how, span=span)


# ----------------------------------------------------------------------------- multiple choice

_LETTER_WORDS = {"is", "was", "or", "and", "because", "since", "as", "seems", "appears", "fits", "matches",
                 "best", "correct", "remains", "nor", "to", "through"}
_LETTER_NEGATION = re.compile(
    r"(?:\b(?:not|never|neither|nor|isn't|aren't|wasn't|except|rather\s+than|other\s+than|instead\s+of|no)|n't)"
    r"\s*(?:option|choice)?\s*[(\[*]*\s*$", re.I)
#: What lists letters together: ``,``, ``/``, ``or``, ``and``, a hedge (``B, or maybe C``, ``B (or C)``,
#: ``B (possibly C)``).
_LETTER_LIST = re.compile(
    r"^\s*[)\].*]*\s*\(?\s*(?:,|/|&|\+|\bor\b|\band\b|,\s*or\b|,\s*and\b|,?\s*(?:or\s+)?(?:maybe|possibly|perhaps)\b)"
    r"(?:\s+(?:maybe|possibly|perhaps|else|even))?\s*(?:(?:option|choice)\s+)?[(\[*]*\s*$", re.I)
#: A letter range: ``A-C``, ``A–C``, ``A to C``, ``A through C`` (every letter in it).
_LETTER_RANGE = re.compile(r"^(?:-|\s*[–—]\s*|\s+(?:to|through)\s+)$", re.I)


def _letters(span: str, letters: str) -> tuple[list[str], NoAnswer | None]:
    """Option letters a statement names (the first one and any listed with it by ``,``/``or``/``and``)."""
    tokens: list[tuple[int, int, str, bool]] = []  # start, end, letter, negated
    for m in re.finditer(r"(?<![A-Za-z0-9'’\\])([A-Ja-j])(?![A-Za-z0-9'’])", span):
        ch, after, before = m.group(1), span[m.end():], span[:m.start()]
        in_parens = before.rstrip("*").endswith("(") and after.lstrip("*").startswith(")")
        if ch.upper() not in letters:
            continue
        if ch.islower():
            if not (in_parens or re.match(r"[)\]]|\.?\s*$", after)):
                continue
        elif ch in "AI" and not in_parens:
            word = re.match(r"\s+([A-Za-z]+)", after)
            if word and word.group(1).lower() not in _LETTER_WORDS and not re.match(r"[.):,]", after):
                continue  # the article "A", the pronoun "I"
            if re.match(r"['’]", after):
                continue
        negated = _LETTER_NEGATION.search(before) is not None
        if tokens and tokens[-1][3] and _LETTER_LIST.match(span[tokens[-1][1]:m.start()]):
            negated = True  # "not A or B": the negation covers the list
        tokens.append((m.start(), m.end(), ch.upper(), negated))
    chosen: list[str] = []
    negated_any = False
    for k, (start, end, letter, negated) in enumerate(tokens):
        if negated:
            negated_any = True
            continue
        chosen.append(letter)
        prev_end = end
        for start2, end2, letter2, neg2 in tokens[k + 1:]:
            gap = span[prev_end:start2]
            if _LETTER_RANGE.match(gap) and not neg2 and letter2 > chosen[-1]:
                chosen += [c for c in letters if chosen[-1] < c <= letter2 and c not in chosen]
            elif not _LETTER_LIST.match(gap):
                break
            elif not neg2 and letter2 not in chosen:
                chosen.append(letter2)
            prev_end = end2
        break
    if chosen:
        return chosen, None
    if negated_any:
        return [], "negated"
    return [], ("refusal" if _REFUSAL.search(span) else None)


def _fallback_mc(text: str, letters: str) -> Extraction:
    sentences, start = [], 0
    while start < len(text):
        stop = _sentence(text, start)
        sentences.append(text[start:stop])
        start = stop + 1
    for k in range(len(sentences) - 1, -1, -1):
        sentence = sentences[k]
        found, reason = _letters(sentence, letters)
        if found and any(_DOUBT.search(s) or _GIVES_UP.search(s) for s in sentences[k:k + 2]):
            return _result([], "refusal", "fallback", sentence.strip())  # "I'm not sure, but I think it's B"
        if found or reason == "negated":
            return _result(found, reason, "fallback", sentence.strip())
    return Extraction(None, None, "refusal" if _REFUSAL.search(text) else "none")


# ----------------------------------------------------------------------------- the sentence after

#: A retraction opening the sentence after the final statement (``Just kidding, it is not 12.``).
_RETRACTION = re.compile(
    r"^\W*(?:(?:but|no|oh|wait|ok(?:ay)?)\W+)?(?:just\s+kidding|j/?k|scratch\s+that|never\s*mind|i\s+take\s+(?:that|it)\s+back"
    r"|disregard\s+(?:that|this|the\s+above)|ignore\s+(?:that|this|the\s+above))\b", re.I)
#: Another value offered in the sentence after the final statement (``Alternatively, it could be 13.``).
_ALTERNATIVE = re.compile(
    r"^\W*(?:alternatively|or(?:\s+(?:maybe|possibly|perhaps|else))?|maybe|perhaps|possibly)\b[\s,:]*"
    r"(?:(?:it|the\s+answer|that|this)\s+(?:could|might|may|can|would)\s+(?:also\s+)?be\b[\s:]*)?", re.I)
#: How a retraction's own statement opens (``..., it is not 12``).
_RESTATED = re.compile(r"^[\s,.:;!-]*(?:(?:it|that|the\s+answer)(?:'s|\s+is|\s+was)\s+)?", re.I)


def _next_sentence(text: str, end: int) -> str:
    """The rest of the sentence a statement ending at ``end`` is in, and the sentence after it."""
    after = text[end:]
    following = len(after) - len(after[_sentence(after, 0) + 1:].lstrip())
    return after[:_sentence(after, following)]


def _read_after(text: str, kind: AnswerKind, letters: str) -> tuple[list[str], NoAnswer | None]:
    """The value(s) a retraction or an alternative names, read like a statement's."""
    if kind == "mc":
        if not re.match(r"\W*(?:not\s+|no\s+)?[(\[*]*[A-J](?![A-Za-z0-9'’])", text):
            return [], None
        return _letters(text, letters)
    return _read_math(text, False)


def _after_statement(text: str, end: int, found: list[str], kind: AnswerKind,
                     letters: str) -> tuple[list[str], NoAnswer | None]:
    """The final statement's values as the sentence after it leaves them: a retraction takes them
    back (no answer, unless it names its own value), an alternative adds its values (several), doubt
    makes them a refusal. Only these short lists of cues count, and only in that one sentence."""
    window = _next_sentence(text, end)
    retraction = _RETRACTION.match(window)
    if retraction:
        rest = window[retraction.end():]
        own, _reason = _read_after(rest[_RESTATED.match(rest).end():], kind, letters)
        return (own, None) if own else ([], "negated")
    alternative = _ALTERNATIVE.match(re.sub(r"^[\s.!?]+", "", window))
    if alternative:
        rest = re.sub(r"^[\s.!?]+", "", window)[alternative.end():]
        other, _reason = _read_after(rest, kind, letters)
        found = found + [v for v in other if v not in found]
    if _DOUBT.search(window):
        return [], "refusal"
    return found, None


# ----------------------------------------------------------------------------- public API


@functools.lru_cache(maxsize=8192)
def find_answer(text: str, kind: AnswerKind = "math", n_choices: int = 4, *,
                question: str | None = None) -> Extraction:
    """Read the final answer of a model's output under the scoring policy (module docstring,
    ``docs/scoring.md``), and say how it was found.

    Args:
        text: the completion.
        kind: ``"math"`` (a number or expression; any kind but ``"mc"`` reads as math) or ``"mc"``
            (option letters).
        n_choices: number of options for ``"mc"`` (1 to 10, letters ``A``..``J``); letters beyond it
            are not option letters.
        question: the question the output answers, when known: an output whose answer is only in
            what it copies from the question is no answer (``reason="echo"``, :func:`is_echo`).

    Returns:
        An :class:`Extraction`: the canonical answer (``None`` when there is none), ``how`` it was
        found (``"marker"``, ``"boxed"``, ``"####"``, ``"fallback"``), and ``reason`` when there is
        no answer.

    Results are cached (the last 8192 distinct arguments; an :class:`Extraction` is immutable): the
    trace store reads each sample again when it records a question
    (:func:`agora.traces.rows.answer_fields`), with the arguments the graph used.

    >>> find_answer("So 3 + 4 = 7. The answer is 7.")
    Extraction(answer='7', how='marker', reason=None, span='7', several=False)
    """
    found = _find_answer(text, kind, n_choices)
    if question and found.answer is not None and is_echo(text, question, kind, n_choices):
        return Extraction(None, None, "echo", span=found.span)
    return found


#: Shortest run of words an output must copy from the question to count as repeating it.
ECHO_MIN_WORDS = 8
_WORD_EDGE = re.compile(r"^\W+|\W+$")


def _echo_words(text: str) -> list[str]:
    return [_WORD_EDGE.sub("", w).casefold() for w in ascii_digits(text).split()]


@functools.lru_cache(maxsize=1024)
def _question_grams(question: str, n: int) -> frozenset[tuple[str, ...]]:
    """The ``n``-word runs of ``question`` (:func:`_echo_words`), empty when it is shorter: computed
    once per question, not once per sample (the trace store reads every sample of a question)."""
    q = _echo_words(question)
    return frozenset(tuple(q[i:i + n]) for i in range(len(q) - n + 1))


def is_echo(text: str, question: str, kind: AnswerKind = "math", n_choices: int = 4) -> bool:
    """Whether ``text`` only repeats ``question`` as far as its answer goes: it names an answer,
    but none is left once every passage it copies from the question (a run of at least
    :data:`ECHO_MIN_WORDS` words found in the question in the same order, compared without case
    and edge punctuation) is taken out. So a reply that restates the question and then answers
    is no echo (its answer stays), and neither is a short reply that happens to name a number the
    question names (``"4"``, shorter than a passage); a reply that is the question, or its last
    sentences, when the question contains its own answer (``... so she has 12 left. How many
    are left?``), is.
    """
    words, raw = _echo_words(text), ascii_digits(text).split()
    n = ECHO_MIN_WORDS
    grams = _question_grams(question, n)
    if len(words) < n or not grams:
        return False
    copied = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(words[i:i + n]) in grams:
            copied[i:i + n] = [True] * n
    if not any(copied):
        return False
    rest = " ".join(w for w, c in zip(raw, copied) if not c)
    return _find_answer(rest, kind, n_choices).answer is None


#: A statement that names only a variable (``\\( a \\)``, ``x``): a name for a value, not one.
_BARE_VARIABLE = re.compile(r"[A-Za-z]")


def _find_answer(text: str, kind: AnswerKind, n_choices: int) -> Extraction:
    if not text or not text.strip():
        return Extraction(None, None, "empty")
    clean = _CALC_NOTE.sub("", ascii_digits(text))
    letters = "ABCDEFGHIJ"[: max(1, min(10, n_choices))]
    statements = _statements(clean)
    boxed = any(s.how == "boxed" for s in statements)
    for statement in reversed(statements):
        if not statement.closed:
            return Extraction(None, statement.how, "unfinished", span=statement.span.strip())
        if kind == "mc":
            found, reason = _letters(_CALC_NOTE.sub("", statement.span).replace("\\text", " "), letters)
        else:
            found, reason = _read_math(statement.span, statement.latex)
            if boxed and statement.how != "boxed" and len(found) == 1 and _BARE_VARIABLE.fullmatch(found[0]):
                continue  # "\\boxed{5} ... the answer is \\( a \\)": the box holds the value
        if found and statement.end >= len(clean.rstrip()) and _unfinished_end(clean):
            found, reason = [], "unfinished"  # the statement runs into the output's cut-off end
        elif found:
            found, reason = _after_statement(clean, statement.end, found, kind, letters)
        if found or reason is not None:
            return _result(found, reason, statement.how, statement.span.strip())
    return _fallback_mc(clean, letters) if kind == "mc" else _fallback_math(clean)


def extract_answer(text: str, kind: AnswerKind = "math", n_choices: int = 4, *,
                   question: str | None = None) -> str | None:
    """The final answer of a model's output: :func:`find_answer`'s ``answer``.

    Args:
        text: the completion.
        kind: ``"math"`` (a number or expression) or ``"mc"`` (an option letter).
        n_choices: number of options for ``"mc"``; letters beyond it are ignored.
        question: the question, when known: an echo of it is no answer (:func:`is_echo`).

    Returns:
        The canonical answer string (see :func:`answer_key`; several values joined by ``", "``), or
        ``None`` when the output has no answer (nothing extractable, negated, a refusal, unfinished,
        an echo).
    """
    return find_answer(text, kind, n_choices, question=question).answer


@functools.lru_cache(maxsize=8192)
def _answer_values(answer: str) -> tuple[str, ...]:
    """Canonical values of a bare answer (gold, or an extracted one); cached, as golds repeat."""
    values, _ = _values(ascii_digits(answer).strip())
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


def _same_value(gold: str, predicted: str) -> bool:
    if _CLOCK.fullmatch(gold) or _CLOCK.fullmatch(predicted):
        return gold == predicted  # "12:30" is a time or ratio, not 12
    g_parsed, p_parsed = _parse_given(gold), _parse_given(predicted)
    if not g_parsed or not p_parsed:
        return False
    g, p = _as_float(g_parsed), _as_float(p_parsed)
    if g is not None and p is not None:
        if g == int(g):
            return p == g  # integer golds compare exactly
        return abs(g - p) <= REL_TOL * max(1.0, abs(g))
    try:
        return bool(verify(list(g_parsed), list(p_parsed), **_verify_kwargs()))
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
