"""How Agora's settings classes check their values: one mechanism, pydantic, with one-line messages.

Design. A settings class is a frozen pydantic dataclass made by :func:`settings` (so
``dataclasses.replace``, ``asdict``, ``fields``, equality and hashing work as on any dataclass).
Each checked field says its rule in its annotation, with a marker of this module
(``k: Annotated[int, Count(1)] = 3``) or a shared alias (``temperature: Temperature = 0.7``); a rule
across fields is a ``pydantic.model_validator(mode="after")`` that raises ``ValueError`` (or
another exception) with its full message. A marker validates the value as it is, with no coercion
(an ``int`` stays an ``int`` in a ``float`` field, a list stays a list), and keeps the field's type
for the JSON schema (LangGraph Studio's forms); a field with no marker is kept as given (pydantic
does not coerce it either). When a value is refused, :func:`settings`' ``__init__``
turns pydantic's ``ValidationError`` into the one exception a caller sees, in one line::

    DelegationConfig.k_samples must be an integer >= 1, got True

(the field rule's ``expected`` text). A :func:`Rule`, a :func:`Convert` function and a cross-field
rule raise their own message, which the caller sees unchanged with its exception type (e.g.
:class:`agora.models.errors.PoolConfigError`). A graph's run-time context is a settings class too
(``settings(frozen=False, slots=False)``): its ``pool`` and ``config`` convert by rule
(:func:`agora.graphs.context.protocol_context`).

Cost, measured on a loaded 2-core machine: building a settings class at import takes about 4 ms
(41 classes: 0.15 s); constructing one checks only the fields given (``DelegationConfig(k_samples=4,
models=("a", "b"))``: 5.8 µs, where the same checks written out in a ``__post_init__`` take 12.8 µs),
but the smallest classes pay pydantic's fixed cost (``SamplingParams``, once per model call: about
9 µs, where plain comparisons take 2.3 µs; noise beside the call itself).

Rules of the markers: a ``bool`` is not a count or a number (``True`` is refused where an ``int`` is
expected; in a field declared ``int``, ``float`` or ``int | float``, maybe ``| None``, whatever its
rule, even a :func:`Rule` whose test ``True >= 1`` would pass, or no rule at all); numbers are finite (``nan`` and ``inf`` are refused); a tuple of names is a tuple or list
of non-empty strings, never a bare string (which would be read as its letters).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from typing import Annotated, Any, Callable, Iterable, TypeVar

import pydantic.dataclasses
from pydantic import ConfigDict, GetCoreSchemaHandler, ValidationError
from pydantic_core import core_schema

from agora.tasks.errors import as_input

__all__ = ["Check", "Choice", "Convert", "Count", "Flag", "Instance", "Name", "Names", "Number", "Problem", "Rule", "SeedInt",
           "UNSET_UNRECORDED", "check_all", "expected_number", "is_count", "is_number", "is_settings", "one_line", "recorded", "settings"]

T = TypeVar("T")


def is_count(value: Any) -> bool:
    """An integer that is not a ``bool`` (numpy integers count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite real number that is not a ``bool`` (an integer of any size is finite: ``math.isfinite``
    would raise ``OverflowError`` on one beyond a float's range)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and (isinstance(value, numbers.Integral) or math.isfinite(value)))


class Problem(ValueError):
    """A field rule's refusal: ``expected`` is the message's ``must be ...`` part; ``error`` the
    exception type the caller sees (``ValueError`` but for a :func:`Rule` that names another)."""

    def __init__(self, expected: str, error: type[Exception] = ValueError):
        super().__init__(expected)
        self.expected = expected
        self.error = error


def _numeric_kind(source: Any) -> str | None:
    """The ``must be ...`` text for a ``bool`` given to a field declared ``int`` (``an integer``),
    ``float`` or ``int | float`` (``a number``), each maybe ``| None`` (`` or None``); ``None`` for
    any other declared type (a ``bool`` there is the field's own rule's business)."""
    args = typing.get_args(source) if typing.get_origin(source) in (typing.Union, types.UnionType) else (source,)
    kinds = {a for a in args if a is not type(None)}
    if not kinds or not kinds <= {int, float}:
        return None
    text = "an integer" if kinds == {int} else "a number"
    return text + (" or None" if type(None) in args else "")


# ----------------------------------------------------------------------------- field rules


@dataclasses.dataclass(frozen=True)
class Check:
    """A field rule: ``test(value)`` true, or the field is refused with ``must be <expected>``;
    ``convert(value)`` (when given) is what the field then holds. ``None`` passes when ``optional``.
    The other markers are made of it. Several rules on one field apply in order, each message its
    own (``Annotated[int, Count(1), Check(lambda v: v <= 8, "at most 8")]``)."""

    test: Callable[[Any], bool]
    expected: str
    convert: Callable[[Any], Any] | None = None
    optional: bool = False
    message: str | None = None
    """A whole message instead (``"port must be in 1..65535, got {value}"``, formatted with the value),
    raised as ``error``: for a class whose messages have their own form."""
    error: type[Exception] = ValueError

    def __call__(self, value: Any) -> Any:
        if value is None and self.optional:
            return None
        try:
            passed = self.test(value)
        except (TypeError, ArithmeticError):  # a test comparing a value of another type ('zz' >= 1)
            passed = False
        if not passed:
            if self.message is not None:
                raise self.error(self.message.format(value=value))
            raise Problem(self.expected)
        return value if self.convert is None else self.convert(value)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # Validation is the rules alone (no coercion), in the order written; the JSON schema is the
        # declared type's.
        # A field declared int or float refuses a bool whatever the rule's test says (True >= 1).
        inner = handler(source)
        kind = _numeric_kind(source)
        check = self if kind is None else functools.partial(self._not_bool, kind)
        if inner.get("type") in ("function-plain", "function-after"):  # a rule before this one
            return core_schema.no_info_after_validator_function(check, inner)
        return core_schema.no_info_plain_validator_function(check, json_schema_input_schema=inner)

    def _not_bool(self, kind: str, value: Any) -> Any:
        """``self(value)``, but a ``bool`` is refused as not ``kind`` (``an integer``, ``a number``):
        ``Class.field must be an integer, got True`` (the rule's ``expected`` text when it has one)."""
        if isinstance(value, bool):
            raise Problem(self.expected or kind, self.error)
        return self(value)


def Count(low: int = 1, high: int | None = None, expected: str | None = None) -> Check:  # noqa: N802 - a marker
    """An integer (not a bool; numpy integers too) in ``[low, high]`` (``high=None``: no upper bound).
    Message: ``must be an integer >= 1`` / ``must be an integer in 0..2``."""
    text = expected or (f"an integer >= {low}" if high is None else f"an integer in {low}..{high}")
    return Check(lambda v: is_count(v) and v >= low and (high is None or v <= high), text)


#: An integer of any sign (a seed), not a bool.
SeedInt = Check(is_count, "an integer")


def expected_number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
                    high_open: bool = False, optional: bool = False) -> str:
    """The ``must be ...`` text of :func:`Number`: ``a finite number in [0, 1]``, ``a finite number > 0``,
    ``a finite number >= 0 or None``."""
    if low is not None and high is not None:
        text = f"a finite number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        text = f"a finite number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        text = f"a finite number {'<' if high_open else '<='} {high:g}"
    else:
        text = "a finite number"
    return text + (" or None" if optional else "")


def Number(low: float | None = None, high: float | None = None, *, low_open: bool = False,  # noqa: N802
           high_open: bool = False, optional: bool = False, expected: str | None = None) -> Check:
    """A finite number (not a bool) from ``low`` to ``high`` (``None``: unbounded on that side;
    ``*_open``: the bound itself excluded); ``optional``: ``None`` passes."""
    def test(v: Any) -> bool:
        return (is_number(v) and (low is None or (v > low if low_open else v >= low))
                and (high is None or (v < high if high_open else v <= high)))

    text = expected or expected_number(low, high, low_open=low_open, high_open=high_open, optional=optional)
    return Check(test, text, optional=optional)


#: ``True`` or ``False`` (not ``1``, not ``"yes"``).
Flag = Check(lambda v: isinstance(v, bool), "True or False")


def Choice(*choices: str) -> Check:  # noqa: N802 - a marker
    """One of ``choices`` (strings). Message: ``'a' or 'b'``, or ``one of 'a', 'b', 'c'``."""
    text = (" or ".join(repr(c) for c in choices) if len(choices) < 3
            else f"one of {', '.join(repr(c) for c in choices)}")
    return Check(lambda v: isinstance(v, str) and v in choices, text)


def Name(optional: bool = True) -> Check:  # noqa: N802 - a marker
    """A non-empty string (a model's or a role's name), or ``None`` when ``optional``."""
    return Check(lambda v: isinstance(v, str) and bool(v.strip()),
                 "a non-empty string" + (" or None" if optional else ""), optional=optional)


#: A tuple (or list) of non-empty strings; a bare string is refused.
Names = Check(lambda v: isinstance(v, (tuple, list)) and all(isinstance(s, str) and s.strip() for s in v),
              "a tuple of non-empty names")


def Instance(kind: type, expected: str | None = None) -> Check:  # noqa: N802 - a marker
    """An instance of ``kind`` (a nested settings object; a dict is not built into one here)."""
    return Check(lambda v: isinstance(v, kind), expected or f"a {kind.__name__}")


def Rule(test: Callable[[Any], bool], message: str, error: type[Exception] = ValueError, *,  # noqa: N802
         optional: bool = False) -> Check:
    """``test(value)`` true, or ``error(message.format(value=value))``: a rule whose message is its
    own (``Rule(lambda v: v >= 1, "n must be >= 1, got {value}")``); the caller sees it unchanged."""
    return Check(test, "", optional=optional, message=message, error=error)


def Convert(convert: Callable[[Any], Any]) -> Check:  # noqa: N802 - a marker
    """The field holds ``convert(value)``; ``convert`` raises its own one-line error (which the
    caller sees unchanged, with its type) for a value it cannot use."""
    return Check(lambda v: True, "", convert=convert)


# ----------------------------------------------------------------------------- the class decorator


def one_line(owner: str, exc: ValidationError, names: tuple[str, ...] = ()) -> Exception:
    """The exception a caller sees for ``exc`` raised while building ``owner``: the first error's
    original exception when a cross-field rule raised it (its own message and type), otherwise a
    ``ValueError`` ``"<owner>.<field> must be <expected>, got <value!r>"`` (a field rule) or
    ``"<owner>.<field>: <pydantic's message>, got <value!r>"`` (pydantic's own type check).
    ``names``: the class's field names in order, which name a value given by position (pydantic's
    location is then its index). A ``ValueError`` returned is marked as bad input
    (:func:`agora.tasks.errors.as_input`: the CLI prints it as one line), its type kept."""
    err = exc.errors(include_url=False)[0]
    cause = (err.get("ctx") or {}).get("error")
    loc = list(err["loc"])
    if loc and isinstance(loc[0], int) and loc[0] < len(names):
        loc[0] = names[loc[0]]
    field = ".".join(str(p) for p in loc)
    if isinstance(cause, Problem) and field:
        return as_input(cause.error(f"{owner}.{field} must be {cause.expected}, got {err['input']!r}"))
    if isinstance(cause, BaseException) and not isinstance(cause, Problem):
        return as_input(cause) if isinstance(cause, ValueError) else cause
    if err["type"] == "missing_argument":
        return TypeError(f"{owner}: missing required argument {field!r}")
    if err["type"] == "unexpected_keyword_argument":
        return TypeError(f"{owner}: unexpected keyword argument {field!r}")
    where = f"{owner}.{field}" if field else owner
    message = str(cause) if isinstance(cause, BaseException) else err["msg"]
    return as_input(ValueError(f"{where}: {message}, got {err['input']!r}"))


def settings(cls: type[T] | None = None, /, *, frozen: bool = True, slots: bool = True,
             config: ConfigDict | None = None) -> Any:
    """Class decorator: ``cls`` as a pydantic dataclass (frozen, with slots, by default) whose
    bad values raise the one-line error of :func:`one_line` (not pydantic's ``ValidationError``; a
    keyword that is not a field, ``TypeError``, as for any class);
    its fields without a rule get :data:`AS_GIVEN`. (A graph's JSON schema takes its descriptions
    from the field docstrings through :func:`agora.models.studio_schema.studio_schema`.) Use bare (``@settings``) or with
    arguments (``@settings(frozen=False)``).

    Raises:
        pydantic.errors.PydanticUndefinedAnnotation: at import, an annotation that does not resolve
            (import the types the fields name at module level).
    """
    options = ConfigDict(arbitrary_types_allowed=True, extra="forbid", **(config or {}))  # an unknown keyword: TypeError

    def wrap(cls: type[T]) -> type[T]:
        _as_given_unless_ruled(cls)
        made = pydantic.dataclasses.dataclass(frozen=frozen, slots=slots, config=options)(cls)
        if not made.__pydantic_complete__:
            pydantic.dataclasses.rebuild_dataclass(made, raise_errors=True)
        _install_init(made)
        return made

    return wrap if cls is None else wrap(cls)


#: The rule of a field that states none: its value is kept as given (no check, no coercion).
AS_GIVEN = Check(lambda v: True, "")


def _as_given_unless_ruled(cls: type) -> None:
    """Give every field of ``cls``'s own body that has no rule of this module :data:`AS_GIVEN`, so
    pydantic neither checks nor converts it (a ``Path`` stays a ``Path`` in a ``str`` field, a list a
    list): a settings class checks what its rules say, nothing else."""
    own = cls.__dict__.get("__annotations__", {})
    hints = typing.get_type_hints(cls, include_extras=True)
    for name in own:
        hint = hints.get(name)
        if hint is None or typing.get_origin(hint) is typing.ClassVar:
            continue
        ruled = typing.get_origin(hint) is Annotated and any(isinstance(m, Check) for m in hint.__metadata__)
        if not ruled:
            own[name] = Annotated[hint, AS_GIVEN]


def _install_init(cls: type) -> None:
    """Wrap ``cls.__init__`` (pydantic's) so a ``ValidationError`` leaves it as :func:`one_line`'s error."""
    validating = cls.__init__

    @functools.wraps(validating)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            validating(self, *args, **kwargs)
        except ValidationError as exc:
            names = tuple(f.name for f in dataclasses.fields(type(self)))
            raise one_line(type(self).__name__, exc, names) from None

    __init__.__agora_settings__ = True
    cls.__init__ = __init__


#: Field metadata (``dataclasses.field(default=None, metadata=UNSET_UNRECORDED)``) of a setting
#: added after runs were recorded without it: :func:`recorded` leaves it out while it holds its
#: default, so such a run's recorded settings still equal a rerun's and it still resumes.
UNSET_UNRECORDED = {"recorded": "when set"}


def recorded(config: Any) -> dict[str, Any]:
    """``dataclasses.asdict(config)``, less each field marked :data:`UNSET_UNRECORDED` that holds
    its default: the settings a run's ``runs`` row records (and a resume compares)."""
    out = dataclasses.asdict(config)
    for f in dataclasses.fields(config):
        if f.metadata.get("recorded") == "when set" and out.get(f.name) == f.default:
            out.pop(f.name)
    return out


def is_settings(cls: Any) -> bool:
    """Whether ``cls`` is a class made by :func:`settings`."""
    return isinstance(cls, type) and getattr(cls.__init__, "__agora_settings__", False)


def check_all(rules: Iterable[tuple[str, Check, Any]], owner: str) -> None:
    """Apply ``(field, rule, value)`` rules outside a settings class (a function's arguments);
    the first refusal raises ``ValueError`` ``"<owner>.<field> must be <expected>, got <value!r>"``."""
    for field, rule, value in rules:
        try:
            rule(value)
        except Problem as problem:
            raise as_input(ValueError(f"{owner}.{field} must be {problem.expected}, got {value!r}")) from None
