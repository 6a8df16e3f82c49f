"""Reading the values an answer expression names, in the digits of any script, as canonical strings
(``docs/scoring.md``, rule 4): ``\\boxed{x = 5}`` is 5, ``25 or 20`` names two values, ``1e1`` is 10,
``12:30`` is a clock time, not 12; numbers in other notations (``0x10``, ``1 000``, ``3 million``) are
read as plain digits first (:func:`plain_numerals`). Values are parsed by `math-verify
<https://github.com/huggingface/Math-Verify>`_. Which statement of an output holds the answer is
:mod:`agora.tasks.extraction`'s; whether two values are the same is :mod:`agora.tasks.comparison`'s.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import unicodedata
from decimal import Decimal
from typing import Literal

from math_verify import parse

AnswerKind = Literal["math", "mc"]
"""What an answer is: ``math`` (a number or expression; any kind but ``mc`` reads as math) or ``mc``
(option letters)."""

logging.getLogger("math_verify").setLevel(logging.ERROR)

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


# ----------------------------------------------------------------------------- numerals

#: A Python integer literal in base 16, 2 or 8 (``0x10``, ``0b101``, ``0o17``, ``0XFF``), standing alone.
_BASE_LITERAL = re.compile(r"(?<![\w.])0(?:[xX][0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|[bB][01]+(?:_[01]+)*|[oO][0-7]+(?:_[0-7]+)*)"
                           r"(?![\w]|\.\d)")
#: Digits grouped in threes by underscores (``1_000``, ``1_000_000``); not a subscript (``1011_2``).
_UNDERSCORE_GROUPS = re.compile(r"(?<![\w.])\d{1,3}(?:_\d{3})+(?![\w]|\.\d)")
#: The spaces that group thousands: a space, a no-break space (U+00A0), a thin space (U+2009) and a
#: narrow no-break space (U+202F).
_GROUP_SPACE = "[ \u00a0\u2009\u202f]"
#: Thousands grouped by spaces (``1 000 000``, ``12 345``): a first group of 1 to 3 digits, then groups
#: of exactly 3; not when the run goes on with more digits (``12 345 6``, ``1 0000``), follows a number
#: (``12 13 345``), or is a mixed number's fraction (``3 100/200``).
_SPACE_GROUPS = re.compile(rf"(?<![\w.,/])(?<!\d{_GROUP_SPACE})\d{{1,3}}(?:{_GROUP_SPACE}\d{{3}})+"
                           rf"(?![\w/]|{_GROUP_SPACE}?\d|\s*/|,\d)")
#: A LaTeX mixed number in running text (``3\frac{1}{2}``, ``3\dfrac12``): a whole number of its own
#: (not inside a ``{...}`` argument, a power or a subscript) before a fraction of digits.
_LATEX_MIXED = re.compile(r"(?<![\w.^_{}\\/])(\d+)\s*\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d)(?!\d))")
_SCALES = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE_WORD = r"(?:hundred|thousand|million|billion|trillion)(?![\w-])"
_SCALE_NUMBER = r"(?<![\w.,/])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
#: A number and a scale word (``3 million``, ``1.5 billion``, ``3 hundred thousand``, ``3\text{ million}``):
#: the whole number. Singular only: a plural counts units (``3 hundreds`` in place value is 3).
#: Not a fraction's denominator (``1/2 million`` stays: its value is not 1/2000000).
_SCALED = re.compile(rf"{_SCALE_NUMBER}\s*(?:\\(?:text|mathrm|mbox)\s*\{{\s*({_SCALE_WORD}(?:\s+{_SCALE_WORD})*)\s*\}}"
                     rf"|({_SCALE_WORD}(?:\s+{_SCALE_WORD})*))")
#: Money with a multiplier suffix (``$1.5k``, ``$3M``, ``$2bn``): after a currency sign only, where
#: the letter cannot be a variable (``4k``) or a unit; not a ``$`` that opens LaTeX inline math
#: (``$4k+1$``, ``$3M$``: :data:`_CLOSING_DOLLAR`).
_MONEY_SUFFIX = re.compile(r"([$€£]\s*)(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s?(k|K|M|mn|B|bn)(?![A-Za-z0-9])")
_SUFFIXES = {"k": 3, "K": 3, "M": 6, "mn": 6, "B": 9, "bn": 9}
#: The rest of a line up to a ``$`` that closes inline math: the next ``$``, unescaped and not a
#: money sign before an amount (``$2k and $500`` is money; ``$4k + 1$`` math).
_CLOSING_DOLLAR = re.compile(r"[^\n$]*(?<!\\)\$(?!\s*-?\d)")


def _times_ten(number: str, power: int) -> str:
    """``number`` (digits, thousands commas, a decimal point) times ``10**power``, exactly."""
    value = Decimal(number.replace(",", "")).scaleb(power)
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _scaled(m: re.Match) -> str:
    words = (m.group(2) or m.group(3)).split()
    return _times_ten(m.group(1), sum(_SCALES[w] for w in words))


def _mixed_latex(text: str) -> str:
    """A LaTeX mixed number (``3\\frac{1}{2}``) written as a plain one (``3 1/2``); other text unchanged."""
    return _LATEX_MIXED.sub(lambda m: f"{m[1]} {m[2] or m[3]}/{m[4] or m[5]}", text)


def plain_numerals(text: str) -> str:
    """``text`` with numbers written in other notations as plain digits, so the reader takes the
    value the writer wrote (``docs/scoring.md``, section 3):

    - Python integer literals in base 16, 2 and 8: ``0x10`` → ``16``, ``0b101`` → ``5``, ``0o17`` → ``15``
      (not ``0 x 10``, a product);
    - digits grouped in threes by underscores or spaces (also U+00A0, U+2009, U+202F): ``1_000`` and
      ``1 000 000`` → ``1000`` and ``1000000`` (a first group of 1 to 3 digits, then groups of 3;
      ``12 13`` and ``1234 567`` stay two numbers);
    - a LaTeX mixed number in running text: ``3\\frac{1}{2}`` → ``3 1/2`` (a mixed number; one with an
      improper fraction is two values, :func:`read_values`);
    - a number with a scale word: ``3 million`` → ``3000000``, ``2.5 billion`` → ``2500000000``,
      ``3 hundred thousand`` → ``300000``; money with a suffix: ``$1.5k`` → ``$1500``, ``$3M`` → ``$3000000``
      (not in LaTeX inline math: ``$4k+1$`` stays).

    Everything else is unchanged (``1011_2``, ``7 dozen``, ``1.5k``). Applied to outputs and gold
    answers alike, after :func:`ascii_digits`."""
    if not any(ch.isdigit() for ch in text):
        return text
    text = _BASE_LITERAL.sub(lambda m: str(int(m.group(), 0)), text)
    text = _UNDERSCORE_GROUPS.sub(lambda m: m.group().replace("_", ""), text)
    text = _SPACE_GROUPS.sub(lambda m: re.sub(_GROUP_SPACE, "", m.group()), text)
    text = _mixed_latex(text)
    text = _SCALED.sub(_scaled, text)
    return _MONEY_SUFFIX.sub(lambda m: _money(m, text), text)


def _money(m: re.Match, text: str) -> str:
    """``$1.5k`` as ``$1500``; unchanged when its ``$`` (not an escaped ``\\$``) opens inline math
    that a later ``$`` on the line closes (``$4k+1$``: ``k`` is a variable)."""
    sign = m[1].rstrip()
    escaped = m.start() > 0 and text[m.start() - 1] == "\\"
    if sign == "$" and not escaped and _CLOSING_DOLLAR.match(text, m.end()):
        return m.group()
    return m[1] + _times_ten(m[2], _SUFFIXES[m[3]])


# ----------------------------------------------------------------------------- math-verify


def _timeouts() -> dict:
    # math-verify uses signal.alarm, which only works in the main thread; LangGraph runs parallel
    # branches in worker threads, where we parse without its timeout.
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"parsing_timeout": None}


def verify_kwargs() -> dict:
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
def parse_value(answer: str) -> tuple:
    """Parse one bare value (gold, or an extracted one): LaTeX like ``\\sqrt{2}`` needs a wrapper.

    Cached: a question's gold is compared with every method's answer, and answers repeat across
    candidates (the parsed sympy values are immutable).
    """
    if re.search(r"[\\{}^()\[\],A-Za-z]", answer):  # LaTeX, tuples, intervals, variables
        parsed = _parse_math(f"\\boxed{{{answer}}}")
        if parsed:
            return tuple(parsed)
    return tuple(_parse_math(answer))


def as_float(parsed) -> float | None:
    return _first_number(parsed)[1]


def _first_number(parsed) -> tuple[object, float | None]:
    """The first parsed item with a finite float value, and that value (``(None, None)``: none)."""
    for item in parsed:
        if isinstance(item, str):
            continue
        try:
            value = float(item)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            return item, value
    return None, None


def _exact_integer(item, number: float) -> int:
    """The integer an integral expression ``item`` (``10000000000000000000001*3``, ``2^{70}+1``) is,
    when its float ``number`` is past a float's exact integers (2**53): evaluated with enough digits,
    not rounded through the float (which read those two as ``...000`` and ``2^{70}``)."""
    if abs(number) < 2 ** 53 or getattr(item, "is_integer", None) is not True:
        return int(number)
    try:
        return int(round(item.evalf(len(str(int(abs(number)))) + 10)))
    except (TypeError, ValueError, ArithmeticError):
        return int(number)


_SCIENTIFIC = re.compile(r"[-+]?\d+(?:\.\d+)?[eE][-+]?\d+")
#: A number in scientific notation inside an expression (``1e20/3``): read as ``1\cdot 10^{20}``
#: (math-verify reads ``1e20`` there as 1·e·20, Euler's number). Exponents of up to 3 digits.
_SCIENTIFIC_PART = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([-+]?\d{1,3})(?![\w.])")
CLOCK = re.compile(r"\d+(?::\d+)+")
#: A bracket right after a number or a closing bracket (``2(3)``, ``(2)(3)``, ``6/2(1+2)``): a product.
_JUXTAPOSED = re.compile(r"(?<=[\d)])\s*\((?=[^()]*\))")
#: A mixed number (``3 1/2``, ``-2 3/4``): its whole part plus its proper fraction (math-verify read
#: ``3 1/2`` as 1 and ``2 3/4`` as 3).
_MIXED = re.compile(r"([-−]?)(\d{1,15})\s+(\d{1,15})\s*/\s*(\d{1,15})")


#: An integer as written (sign and digits), at most Python's 4300 digits for ``int(str)``: read
#: exactly, not through ``float`` (which makes 2**53 + 1 into 2**53).
INTEGER = re.compile(r"[-+]?\d{1,4300}")


def canonical_value(value: str) -> str | None:
    """One value's canonical string: ``"2125"`` (an integer exactly, however large), ``"0.5"``, else
    math-verify's reading of it.
    Scientific notation (``1e1``, ``2.5E-3``) is read as a number (one past a float's range,
    ``1E+400``, stays as written, normalised: ``1e400``); a clock time or ratio
    (``12:30``) stays as written (it is not 12); one on the hour (``2:00``) is the hour."""
    if INTEGER.fullmatch(value):
        return str(int(value))
    if _SCIENTIFIC.fullmatch(value):
        number = float(value)
        if not math.isfinite(number):  # past a float's range (1e400): the number as written, normalised
            mantissa, exponent = re.split("[eE]", value.lstrip("+"))
            return f"{mantissa}e{'-' if exponent.startswith('-') else ''}{exponent.lstrip('+-').lstrip('0') or '0'}"
        if number == int(number):  # an integral float as its integer: "1e16" is "10000000000000000"
            exact = Decimal(value)  # as written: "1e23" is 10**23, not the float's 99999999999999991611392
            return str(int(exact)) if exact == exact.to_integral_value() else str(int(number))
        return repr(round(number, 10))
    if (mixed := _MIXED.fullmatch(value)) and 0 < int(mixed[3]) < int(mixed[4]):  # "3 1/2" is 3.5
        number = int(mixed[2]) + int(mixed[3]) / int(mixed[4])
        return repr(round(-number if mixed[1] else number, 10))
    if CLOCK.fullmatch(value):  # a clock time on the hour (2:00) is the hour, as in the fallback
        return value.split(":")[0].lstrip("0") or "0" if re.fullmatch(r"\d+(?::0+)+", value) else value
    value = _JUXTAPOSED.sub(r"\\cdot(", value)  # "2(3)" is 2·3 (math-verify read it as 2 + 3)
    parsed = parse_value(value)
    scientific = _SCIENTIFIC_PART.sub(r"(\1\\cdot 10^{\2})", value)
    if scientific != value:  # "1e20/3" is 10^20/3; one past a float's range ("1e400/3") stays as written
        parsed = parse_value(scientific)
        if _first_number(parsed)[1] is None:
            return value.strip()
    if not parsed:
        return None
    item, number = _first_number(parsed)
    if number is not None:
        if number == int(number):  # an integral value as its integer, exactly: "2^{70}+1" is 1180591620717411303425
            return str(_exact_integer(item, number))
        return repr(round(number, 10))
    return str(parsed[-1]).strip() or None


# ----------------------------------------------------------------------------- reading values

NUM = r"\d+(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
#: A number in running text (the fallback's candidates): sign, thousands commas, a fraction ``5/2``
#: or a mixed number ``3 1/2``;
#: not an ordinal (``10th``), a label (``horse #12``) or the minutes of a clock time (``2:00`` reads 2).
NUMBER = re.compile(rf"(?:(?:(?<=[\s=($])|^)-(?=\d))?(?<![\w.,#:])(?:\d+ (?=\d+/\d))?(?:{NUM})(?:\s*/\s*(?:{NUM}))?"
                    r"(?!\d|(?:st|nd|rd|th)\b)")
#: A thousands comma (``2,125``, LaTeX ``10,\!080``): not a list separator.
_THOUSANDS = re.compile(r"(?<=\d),(?:\\!\s*)?(?=\d{3}(?!\d))")
_CMD_WORDS = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}|\\[A-Za-z]+")
_OPEN, _CLOSE = "([{", ")]}"
_PLAIN_VALUE = re.compile(
    r"(?:[A-Za-z]\s*=\s*)?[-−+]?\s*(?:[$€£]\s*)?(?:\d|\.\d|\()"
    r"(?:(?<=\d)[eE][-+]?\d+(?![A-Za-z])|(?<=\d):(?=\d)|[\d\s.,+\-−*/×÷^=()<>$€£%]|[xX](?=\s*[\d$(])"
    r"|[A-Za-z]+(?=\s*[*/×÷=]))*")
#: What joins several values in plain text: ``or``/``and``/``to``/a dash (``25 or 20``), a hedge word
#: (``12 or maybe 10``, ``12 or else 10``, ``12 (possibly 10)``), ``\pm``/``±`` (``3 \pm 1``).
_PLAIN_JOIN = re.compile(
    r"\s*(?:(?:[A-Za-z]+\s+){0,3}?(?:or|and|to|through|–|—)(?:\s+(?:maybe|possibly|perhaps|else|even|probably))?"
    r"|(?:maybe|possibly|perhaps)|\\pm\b|\\mp\b|±|∓)\s*(?=(?:[$€£]\s*)?[-−]?\s*\.?\d)", re.I)
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


def unclosed(text: str) -> bool:
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
    ``;``, ``\\pm``, ranges (``5-7``, ``5 – 7``, ``5 to 7``), bare numbers side by side (``12 13``),
    and a whole number before an improper fraction (``3 5/2``, ``3\\frac{5}{2}``: not a mixed number)."""
    expr = _THOUSANDS.sub("", expr)
    pieces: list[str] = []
    for part in _top_level(expr, ","):
        for sub in _top_level(part, _LATEX_SEPARATORS):
            rng = _RANGE.fullmatch(sub)
            if rng:
                pieces += [rng.group(1), rng.group(2) or rng.group(3)]
            elif _BARE_NUMBERS.fullmatch(sub):
                pieces += sub.split()  # "12 13": two values
            elif (mixed := _MIXED.fullmatch(_mixed_latex(sub.strip()))) and not 0 < int(mixed[3]) < int(mixed[4]):
                pieces += [mixed[1] + mixed[2], f"{mixed[3]}/{mixed[4]}"]  # "3 5/2": not a mixed number, two values
            else:
                pieces.append(sub)
    return [p.strip() for p in pieces if p.strip()]


def clean_value(value: str) -> str:
    value = value.replace("−", "-").replace("×", "*").replace("÷", "/")
    value = re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", "*", value)
    value = re.sub(r"\\%|%|\\\$|[$€£]", "", value)
    return value.strip().rstrip(".,;:!").strip()


#: Markdown bold (``**42**``): a ``**`` not between two operands. ``2**3`` is a power (8), not 23.
BOLD = re.compile(r"(?<![\w)\]}])\*\*|\*\*(?![\w(\[{])")
#: Markdown emphasis other than bold: ``*42*``, ``_42_``, ``__42__`` (group 2 is what it emphasises),
#: on one line, the opening mark not after an operand and the closing one not before one (``2*3*4``,
#: ``2 * 3 * 4`` and subscripts ``x_1`` are not emphasis).
EMPHASIS = re.compile(r"(?<![\w)\]}*\\])(\*|__?)(?=[^\s*_])([^*_\n]{0,200}?[^\s*_\\])\1(?![\w(\[{*])")


def read_values(expr: str) -> tuple[list[str], str | None]:
    """Canonical values of one answer expression (an equation's value, each of several values)."""
    expr = BOLD.sub("", expr).replace("**", "^")  # what bold leaves is Python's power: 2**3 is 2^3
    if re.search(r"<<(?![^<]*>>)", expr) or unclosed(expr) \
            or re.search(r"(?:[-+*/^=(]|\\|\\frac\s*\{[^{}]*\})\s*$", expr.strip()):
        return [], "unfinished"
    out: list[str] = []
    pieces = _split_values(expr)
    if len(pieces) > 1 and len(_top_level(expr, "=")) > 1 and not _has_variables(_top_level(expr, "=")[0]):
        pieces = _split_values(_equation_value(expr))  # "3 + 4 = 7, 8": the calculation's values
    for piece in pieces:
        canon = canonical_value(clean_value(_equation_value(piece)))
        if canon is not None and canon not in out:
            out.append(canon)
    return out, (None if out else "none")


def plain_values(text: str) -> tuple[list[str], int]:
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
