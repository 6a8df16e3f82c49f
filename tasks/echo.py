"""Echo detection: a reply whose answer is only in what it copies from the question is no answer
(``reason="echo"``, ``docs/scoring.md``): a small model that restates a question which contains its
own answer (``... so she has 12 left. How many are left?``) has not answered it.
"""

from __future__ import annotations

import functools
import re

from agora.tasks.extraction import read_answer
from agora.tasks.values import AnswerKind, ascii_digits

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
    return read_answer(rest, kind, n_choices).answer is None
