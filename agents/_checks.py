"""Checks of protocol settings, shared by the settings dataclasses' ``__post_init__``.

Each check raises one ``ValueError`` whose message names the settings class, the field and the bad
value, in the form MoA's and debate's settings use::

    DelegationConfig.k_samples must be an integer >= 1, got True

Rules: a ``bool`` is not a count or a number (``True`` is refused where an ``int`` is expected);
numbers are finite (``nan`` and ``inf`` are refused); a tuple of names is a tuple or list of
non-empty strings, never a bare string (which would be read as its letters).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

from agora.models.registry import MAX_POOL_TEMPERATURE

__all__ = ["check_choice", "check_count", "check_flag", "check_name", "check_names", "check_number",
           "check_sampling", "check_seed", "is_count", "is_number"]


def is_count(value: Any) -> bool:
    """An integer that is not a ``bool`` (numpy integers count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite real number that is not a ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _fail(owner: str, name: str, expected: str, value: Any) -> None:
    raise ValueError(f"{owner}.{name} must be {expected}, got {value!r}")


def check_count(owner: str, name: str, value: Any, low: int = 1, high: int | None = None) -> None:
    """``value`` is an integer (not a bool) in ``[low, high]`` (``high=None``: no upper bound).

    Raises:
        ValueError: ``"<owner>.<name> must be an integer >= <low>, got <value!r>"`` (or ``in <low>..<high>``).
    """
    expected = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
    if not is_count(value) or value < low or (high is not None and value > high):
        _fail(owner, name, expected, value)


def check_seed(owner: str, name: str, value: Any) -> None:
    """``value`` is an integer (any sign; not a bool)."""
    if not is_count(value):
        _fail(owner, name, "an integer", value)


def check_number(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, optional: bool = False) -> None:
    """``value`` is a finite number (not a bool) in the interval from ``low`` to ``high`` (``None``:
    unbounded on that side; ``*_open``: the bound itself is excluded); ``optional``: ``None`` passes.

    Raises:
        ValueError: e.g. ``"<owner>.<name> must be a finite number in [0, 1], got nan"``.
    """
    if value is None and optional:
        return
    if low is not None and high is not None:
        expected = f"a finite number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        expected = f"a finite number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        expected = f"a finite number {'<' if high_open else '<='} {high:g}"
    else:
        expected = "a finite number"
    if optional:
        expected += " or None"
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        _fail(owner, name, expected, value)


def check_flag(owner: str, name: str, value: Any) -> None:
    """``value`` is ``True`` or ``False`` (not ``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        _fail(owner, name, "True or False", value)


def check_choice(owner: str, name: str, value: Any, choices: Iterable[str]) -> None:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        _fail(owner, name, " or ".join(repr(c) for c in choices) if len(choices) < 3
              else f"one of {', '.join(repr(c) for c in choices)}", value)


def check_name(owner: str, name: str, value: Any, *, optional: bool = True) -> None:
    """``value`` is a non-empty string (a model's or role's name), or ``None`` when ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        _fail(owner, name, "a non-empty string" + (" or None" if optional else ""), value)


def check_names(owner: str, name: str, value: Any) -> None:
    """``value`` is a tuple (or list) of non-empty strings; a bare string is refused."""
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v.strip() for v in value):
        _fail(owner, name, "a tuple of non-empty names", value)


def check_sampling(owner: str, settings: Any, *, temperatures: Iterable[str] = ("temperature",),
                   top_p: bool = True, max_tokens: Iterable[str] = ("max_tokens",), shots: bool = True,
                   seed: bool = True) -> None:
    """The sampling fields most settings share: temperatures in ``[0, MAX_POOL_TEMPERATURE]`` (a pool
    member's own limit), ``top_p`` in ``(0, 1]``, token caps integers >= 1, ``shots`` an integer >= 0
    and ``seed`` an integer; each only when asked for."""
    for name in temperatures:
        check_number(owner, name, getattr(settings, name), 0.0, MAX_POOL_TEMPERATURE)
    if top_p:
        check_number(owner, "top_p", settings.top_p, 0.0, 1.0, low_open=True)
    for name in max_tokens:
        check_count(owner, name, getattr(settings, name))
    if shots:
        check_count(owner, "shots", settings.shots, 0)
    if seed:
        check_seed(owner, "seed", settings.seed)
