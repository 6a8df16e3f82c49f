"""Bad input, told apart from Agora's own bugs.

:class:`InputError` is the ``ValueError`` Agora raises where it checks what a user gave it: a file, a
command-line option, a setting, an environment variable, a name, a stored run to resume or replay.
The CLI prints it (and the other input errors: a missing file, an unknown name) as one ``error:``
line with exit status 2; any other ``ValueError`` comes from a bug in Agora and is printed as an
``internal error`` line followed by its traceback. Every class of a more specific input error
(``TaskFormatError``, ``PoolConfigError``, ``BundleError``...) derives from it; code that catches
``ValueError`` catches it too.

A settings class's refusal (:func:`agora.models.validation.one_line`) stays a plain ``ValueError``,
as its callers expect, and is marked as input with :func:`as_input` instead.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)

#: The attribute :func:`as_input` sets on an exception that is bad input but not an :class:`InputError`.
MARK = "agora_input"


class InputError(ValueError):
    """A value, file, option or name a user gave that Agora refuses; the message is one line naming
    the thing (file:line, ``Class.field``, ``--option``) and what is wrong with it."""


def as_input(exc: E) -> E:
    """``exc``, marked as bad input (:func:`is_input`) without changing its type."""
    setattr(exc, MARK, True)
    return exc


def is_input(exc: BaseException) -> bool:
    """Whether ``exc`` is bad input: an :class:`InputError` or an exception marked by :func:`as_input`."""
    return isinstance(exc, InputError) or getattr(exc, MARK, False) is True
