"""Member reliabilities measured on dev questions: each pool member's accuracy alone, as settings
give it (no LangGraph, no trace store: :mod:`agora.traces.reliability` reads them from a dev run).

A member's reliability ``r_m`` is its per-sample accuracy on dev questions (questions disjoint from
the ones it is used on), in ``[0, 1]``. Two rules use it: SLM-MUX breaks confidence ties by it
(its "validation accuracy", Wang et al., arXiv 2510.05077) and ALIGN's ``calibrated`` principal
utility weights each proposal's agreement by it (:func:`agora.agents.delegation.calibrated_utility`).

Settings hold reliabilities as a tuple of ``(member, accuracy)`` pairs (hashable, as frozen
settings are), written in any of three forms, all read by :func:`dev_accuracy_pairs`:

    {"qwen1.5b": 0.62, "qwen0.5b": 0.31}          # Python, Studio's JSON, a TOML table
    ("qwen1.5b=0.62", "qwen0.5b=0.31")             # the command line: --dev-accuracy qwen1.5b=0.62,qwen0.5b=0.31
    (("qwen1.5b", 0.62), ("qwen0.5b", 0.31))       # as stored
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agora.tasks.errors import InputError
from agora.models.validation import Name, check_all, is_number

DevAccuracy = tuple[tuple[str, float], ...]
"""``(member, accuracy on dev questions)`` pairs, in the order given."""


def dev_accuracy_pairs(owner: str, name: str, value: Any) -> DevAccuracy:
    """``value`` (a mapping, ``"member=accuracy"`` strings or ``(member, accuracy)`` pairs) as
    :data:`DevAccuracy`, each accuracy a finite number in ``[0, 1]``, each member named once.

    Raises:
        ValueError: one line naming ``<owner>.<name>``, the entry and what was wrong.
    """
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (tuple, list)):
        items = []
        for entry in value:
            if isinstance(entry, str):
                member, sep, number = entry.partition("=")
                if not sep:
                    raise InputError(f"{owner}.{name}: entry {entry!r} is not member=accuracy (e.g. qwen1.5b=0.62)")
                try:
                    items.append((member.strip(), float(number)))
                except ValueError:
                    raise InputError(f"{owner}.{name}: entry {entry!r}: {number.strip()!r} is not a number") from None
            elif isinstance(entry, (tuple, list)) and len(entry) == 2:
                items.append((entry[0], entry[1]))
            else:
                raise InputError(f"{owner}.{name}: entry {entry!r} is not member=accuracy nor a (member, accuracy) pair")
    else:
        raise InputError(f"{owner}.{name} must be a mapping member → accuracy, or member=accuracy entries, got {value!r}")
    out: dict[str, float] = {}
    for member, accuracy in items:
        check_all([(name, Name(optional=False), member)], owner)
        if not is_number(accuracy) or not 0.0 <= accuracy <= 1.0:
            raise InputError(f"{owner}.{name}: {member}'s accuracy must be a finite number in [0, 1], got {accuracy!r}")
        if member in out:
            raise InputError(f"{owner}.{name}: {member!r} is given twice")
        out[member] = float(accuracy)
    return tuple(out.items())
