"""Which statement of a model's output is its final answer, and what it says (``docs/scoring.md``,
rules 1 to 3 and 6): the last explicit statement (:mod:`agora.tasks.statements`) read for its values
(:mod:`agora.tasks.values`) or option letters, checked against the cues of
:mod:`agora.tasks.cues` and the sentence after it; without one, the output's last number or letter as
a guess (``how="fallback"``). :func:`read_answer` knows nothing of the question; the public reader
:func:`agora.tasks.answers.find_answer` adds the echo check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agora.tasks.cues import (ALTERNATIVE, BOUND, BOUND_AFTER, BOUND_AFTER_GUESS, BOUND_BEFORE, CORRECTION, DOUBT, FILLER,
                              GIVES_UP, NEGATION, REFUSAL, RESTATED, RETRACTION, SEVERAL_WORDS)
from agora.tasks.statements import CALC_NOTE, How, find_statements, next_sentence, sentence_end
from agora.tasks.values import (BOLD, EMPHASIS, NUM, NUMBER, AnswerKind, ascii_digits, canonical_value, clean_value,
                                plain_numerals, plain_values, read_values, unclosed)

NoAnswer = Literal["empty", "none", "negated", "refusal", "unfinished", "bound", "echo"]
"""Why an output has no answer: empty, nothing answer-like, a negated (or retracted) final statement,
a refusal (or doubt after the value, or in the next sentence), an unfinished expression, a bound
(``at least 12``) instead of a value, an echo (the answer is only in what the output copied from the
question, :func:`agora.tasks.echo.is_echo`)."""


@dataclass(frozen=True, slots=True)
class Extraction:
    """What :func:`agora.tasks.answers.find_answer` read from one output."""

    answer: str | None
    """The canonical answer (see :func:`agora.tasks.comparison.answer_key`); several values are joined by ``", "``;
    ``None`` when the output has no answer."""
    how: How | None
    """Which rule found the final statement; ``None`` when none was found."""
    reason: NoAnswer | None = None
    """Why ``answer`` is ``None``; ``None`` when there is an answer."""
    span: str | None = None
    """The text the answer was read from (the statement after its marker, a box's content, ...)."""
    several: bool = False
    """The answer names several different values (wrong against a single-valued gold answer)."""


# ----------------------------------------------------------------------------- math


#: LaTeX between numbers in plain text, as plain text writes it: a thousands ``1\,000``/``1{,}000``/
#: ``10,\!080`` is ``1000``, other spacing (``\,``, ``\;``, ``\!``) a space, ``\$`` is ``$``,
#: ``2 \cdot 3`` and ``2 \times 3`` are ``2 * 3``, ``6 \div 2`` is ``6 / 2``, ``2^{10}`` is ``2^10``.
#: (The plain reading stopped at the ``\``: ``2 \cdot 3`` was 2.)
_PLAIN_LATEX = ((re.compile(r"(?<=\d)(?:\\,|\{,\}|,\\!)(?=\d{3}(?!\d))"), ""),
                (re.compile(r"\\[,;:! ]"), " "),  # LaTeX spacing: "2\,\cdot\, 3" is 2 \cdot 3
                (re.compile(r"\\(?=[$%])"), ""),  # an escaped "\$", "\%" is the sign
                (re.compile(r"(?<=\d)\s*\\(?:cdot|times)(?![A-Za-z])\s*(?=[-−]?\d)"), " * "),
                (re.compile(r"(?<=\d)\s*\\div(?![A-Za-z])\s*(?=[-−]?\d)"), " / "),
                (re.compile(r"(?<=\d)\^\{([-−]?\d+)\}"), r"^(\1)"))


def _read_math(span: str, latex: bool) -> tuple[list[str], NoAnswer | None]:
    """Values of one statement; ``([], reason)`` when it is no answer, ``([], None)`` when it
    names no value (then it is not a statement)."""
    s = FILLER.sub("", BOLD.sub("", span).strip()).strip()
    if BOUND.match(s) and re.search(r"\d", s):
        return [], "bound"  # "at least 12": a bound, not a value
    if NEGATION.match(s):
        rest = NEGATION.sub("", s, count=1)
        fix = CORRECTION.match(rest)  # "not 25, but 30": the correction is the statement
        if not fix:
            return [], "negated"
        s = FILLER.sub("", rest[fix.end():]).strip()
    if not latex and re.match(r"[-−+]?\s*\\[A-Za-z]", s):
        latex = True
    if latex:
        s = re.sub(r"^\$|\$$", "", s.strip()).strip()
        return read_values(s) if s else ([], None)
    for pattern, plain in _PLAIN_LATEX:
        s = pattern.sub(plain, s)
    several = SEVERAL_WORDS.match(s)
    exprs, end = plain_values(s[several.end():] if several else s)
    if not exprs:
        return [], ("refusal" if REFUSAL.search(s) else None)
    values: list[str] = []
    for expr in exprs:
        found, reason = read_values(expr)
        if reason == "unfinished":
            return [], reason
        values += [v for v in found if v not in values]
    if values and DOUBT.search(s[end:]):
        return [], "refusal"
    if values and BOUND_AFTER.match(s[end:]):
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
    return unclosed(CALC_NOTE.sub("", last))


_LATEX_REGION = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|\$([^$\n]*[\\^{][^$\n]*)\$", re.S)
_HEDGE_BEFORE = re.compile(
    rf"(?:(-?(?:{NUM}))\s*%?\s*(?:[A-Za-z]+\s+){{0,2}}?(?:or|to|through|–|—)\s*|\b(?:between|either)\s+\$?(-?(?:{NUM}))"
    rf"\s*%?\s*(?:[A-Za-z]+\s+){{0,2}}?(?:and|or)\s*|(\d+(?:\.\d+)?)-)\$?\s*$", re.I)


def _fallback_math(text: str) -> Extraction:
    """No explicit statement: the output's last number or LaTeX math, if the output is finished."""
    if _unfinished_end(text):
        return Extraction(None, "fallback", "unfinished")
    candidates: list[tuple[int, int, str, bool]] = []  # end, start, text, latex
    for m in _LATEX_REGION.finditer(text):
        candidates.append((m.end(), m.start(), next(g for g in m.groups() if g is not None), True))
    regions = [(start, end) for end, start, _t, _l in candidates]
    for m in NUMBER.finditer(text):
        if not any(s <= m.start() < e for s, e in regions):
            candidates.append((m.end(), m.start(), m.group(0), False))
    if not candidates:
        return Extraction(None, None, "refusal" if REFUSAL.search(text) else "none")
    end, start, body, latex = max(candidates)
    clause = re.split(r"[,;:\n]|[.!?]\s", text[:start])[-1]
    if re.search(r"(?:\bnot|\bnever|\bcannot\s+be|\bcan't\s+be|n't)\s+(?:be\s+|equal\s+to\s+|exactly\s+)?\$?\s*$", clause, re.I):
        return Extraction(None, "fallback", "negated", span=body)
    after = text[end:]
    following = len(after) - len(after[sentence_end(after, 0) + 1:].lstrip())  # where the next sentence starts
    window = after[:sentence_end(after, following)]  # the rest of the value's sentence and the next one
    sentence = re.split(r"[.!?]\s|\n", text[:start])[-1]  # the value's sentence up to the value
    if DOUBT.search(window) or GIVES_UP.search(window) or DOUBT.search(sentence) or GIVES_UP.search(sentence):
        return Extraction(None, "fallback", "refusal", span=body)
    if not latex and (BOUND_BEFORE.search(clause) or BOUND_AFTER.match(after) or BOUND_AFTER_GUESS.match(after)):
        return Extraction(None, "fallback", "bound", span=body)  # "at least 12", "x > 12", "12 or more"
    values, reason = read_values(body if latex else re.sub(r"[.,]+$", "", body))
    hedge = None if latex else _HEDGE_BEFORE.search(text[max(0, start - 80):start])
    if hedge and values:
        other = canonical_value(clean_value(next(g for g in hedge.groups() if g is not None)))
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
    return [], ("refusal" if REFUSAL.search(span) else None)


def _fallback_mc(text: str, letters: str) -> Extraction:
    sentences, start = [], 0
    while start < len(text):
        stop = sentence_end(text, start)
        sentences.append(text[start:stop])
        start = stop + 1
    for k in range(len(sentences) - 1, -1, -1):
        sentence = sentences[k]
        found, reason = _letters(sentence, letters)
        if found and any(DOUBT.search(s) or GIVES_UP.search(s) for s in sentences[k:k + 2]):
            return _result([], "refusal", "fallback", sentence.strip())  # "I'm not sure, but I think it's B"
        if found or reason == "negated":
            return _result(found, reason, "fallback", sentence.strip())
    return Extraction(None, None, "refusal" if REFUSAL.search(text) else "none")


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
    window = next_sentence(text, end)
    retraction = RETRACTION.match(window)
    if retraction:
        rest = window[retraction.end():]
        own, _reason = _read_after(rest[RESTATED.match(rest).end():], kind, letters)
        return (own, None) if own else ([], "negated")
    alternative = ALTERNATIVE.match(re.sub(r"^[\s.!?]+", "", window))
    if alternative:
        rest = re.sub(r"^[\s.!?]+", "", window)[alternative.end():]
        other, _reason = _read_after(rest, kind, letters)
        found = found + [v for v in other if v not in found]
    if DOUBT.search(window):
        return [], "refusal"
    return found, None


#: A statement that names only a variable (``\\( a \\)``, ``x``): a name for a value, not one.
_BARE_VARIABLE = re.compile(r"[A-Za-z]")


def read_answer(text: str, kind: AnswerKind, n_choices: int) -> Extraction:
    if not text or not text.strip():
        return Extraction(None, None, "empty")
    clean = CALC_NOTE.sub("", EMPHASIS.sub(r"\2", plain_numerals(ascii_digits(text))))
    letters = "ABCDEFGHIJ"[: max(1, min(10, n_choices))]
    statements = find_statements(clean)
    boxed = any(s.how == "boxed" for s in statements)
    for statement in reversed(statements):
        if not statement.closed:
            return Extraction(None, statement.how, "unfinished", span=statement.span.strip())
        if kind == "mc":
            found, reason = _letters(CALC_NOTE.sub("", statement.span).replace("\\text", " "), letters)
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
