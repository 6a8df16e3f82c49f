"""One benchmark item (:class:`Problem`), shared by the loaders and the synthetic generator."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

AnswerKind = Literal["math", "mc", "open"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One benchmark item."""

    id: str
    """Stable identifier (from the file's id field, else ``<source>-<line>``)."""
    question: str
    """Text shown to the models; for multiple choice it includes the lettered options."""
    gold: str | None
    """Gold answer: a number/expression for math, a letter for ``mc``; ``None`` for bare prompts."""
    kind: AnswerKind = "math"
    """How answers are extracted and compared (see :mod:`agora.tasks.answers`)."""
    n_choices: int = 0
    """Number of options for ``mc`` problems."""
    source: str = ""
    """Format or dataset name."""
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Extra fields kept from the file (subject, level, ...)."""


#: How a refusal says two question ids are one (:func:`id_key`).
SAME_ID = "the same id once compared as ids are (Unicode NFKC, white space at the ends ignored)"


def id_key(question_id: str) -> str:
    """What question ids are compared by: the id in Unicode NFKC form (full-width ``ｑ１`` is
    ``q1``), stripped of white space at its ends (``"q1 "`` is ``q1``). Two ids of one task file,
    run or bundle with one key and different spellings are refused, naming both: they print and
    are typed alike, so ``agora report question ID`` and a resume could not tell them apart."""
    return unicodedata.normalize("NFKC", question_id).strip()


def id_clash(ids: Any, question_id: str) -> str | None:
    """The id of ``ids`` that ``question_id`` is once compared as ids are (:func:`id_key`) while
    spelled differently, or ``None`` (none, or only ``question_id`` itself)."""
    key = id_key(question_id)
    return next((other for other in ids if other != question_id and id_key(other) == key), None)
