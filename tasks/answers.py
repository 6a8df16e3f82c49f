"""The answer reader (:func:`find_answer`, :func:`extract_answer`), under one scoring policy for every
task kind (``docs/scoring.md``).

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
   words are not part of a value. Numbers in other notations are the number written (``0x10`` is 16,
   ``1_000`` and ``1 000`` are 1000, ``3 million`` is 3000000, ``3\\frac{1}{2}`` is 3.5); a whole
   number before an improper fraction (``3 5/2``) is two values, not a mixed number.
5. **Comparison**: equivalence is `math-verify <https://github.com/huggingface/Math-Verify>`_'s
   (``\\frac{1}{2} == 0.5``, intervals, sets, expressions). Numbers: an integer gold answer compares
   exactly; a non-integer one (GSM-Hard's float targets) within a relative tolerance of
   :data:`agora.tasks.comparison.REL_TOL`. Option letters compare as letters.
6. **Option letters** are read only as letters: a capital ``A``..``J`` (within the options), or one in
   parentheses; not the article ``a`` (``a bit unclear``), not the pronoun ``I`` (``I think``).

Where each part lives: the statements (rule 1) in :mod:`agora.tasks.statements`, the cues of rules 2
and 3 in :mod:`agora.tasks.cues`, reading values and digits (rule 4) in :mod:`agora.tasks.values`,
which statement answers (rules 1 to 3, 6) in :mod:`agora.tasks.extraction`, an answer that only
repeats the question in :mod:`agora.tasks.echo`, and comparison (rule 5) in
:mod:`agora.tasks.comparison`.
"""

from __future__ import annotations

import functools

from agora.tasks.echo import is_echo
from agora.tasks.extraction import Extraction, read_answer
from agora.tasks.values import AnswerKind

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
    found = read_answer(text, kind, n_choices)
    if question and found.answer is not None and is_echo(text, question, kind, n_choices):
        return Extraction(None, None, "echo", span=found.span)
    return found


def extract_answer(text: str, kind: AnswerKind = "math", n_choices: int = 4, *,
                   question: str | None = None) -> str | None:
    """The final answer of a model's output: :func:`find_answer`'s ``answer``.

    Args:
        text: the completion.
        kind: ``"math"`` (a number or expression) or ``"mc"`` (an option letter).
        n_choices: number of options for ``"mc"``; letters beyond it are ignored.
        question: the question, when known: an echo of it is no answer (:func:`is_echo`).

    Returns:
        The canonical answer string (see :func:`agora.tasks.comparison.answer_key`; several values joined by ``", "``), or
        ``None`` when the output has no answer (nothing extractable, negated, a refusal, unfinished,
        an echo).
    """
    return find_answer(text, kind, n_choices, question=question).answer
