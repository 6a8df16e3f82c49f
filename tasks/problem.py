"""One benchmark item (:class:`Problem`), shared by the loaders and the synthetic generator."""

from __future__ import annotations

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
