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

import re
import shlex
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



#: Byte-order marks of the Unicode encodings other than UTF-8 (UTF-32-LE's, FF FE 00 00, first: it
#: begins with UTF-16-LE's), with the name ``iconv`` reads the file as.
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "UTF-32"),
         (b"\xff\xfe", "UTF-16 (little-endian)", "UTF-16"), (b"\xfe\xff", "UTF-16 (big-endian)", "UTF-16"))


def utf16_guess(raw: bytes) -> tuple[str, str] | None:
    """What ``raw`` (a file's first bytes; a few dozen are enough) looks like when it is UTF-16 or
    UTF-32 text rather than UTF-8, and the encoding name ``iconv -f`` reads it by:
    ``("UTF-16 (little-endian) with a byte-order mark", "UTF-16")``, or
    ``("UTF-16 (little-endian), no byte-order mark", "UTF-16LE")`` where every other byte is NUL
    (text of ASCII characters in UTF-16, as Windows PowerShell 5's ``>`` writes it). ``None`` when
    it looks like neither (UTF-8 text starts with no such mark and holds no NUL byte)."""
    for bom, name, iconv in _BOMS:
        if raw.startswith(bom):
            return f"{name} with a byte-order mark", iconv
    head = raw[:64]
    if len(head) >= 4:
        even, odd = head[0::2], head[1::2]
        if odd.count(0) == len(odd) and not even.count(0):
            return "UTF-16 (little-endian), no byte-order mark", "UTF-16LE"
        if even.count(0) == len(even) and not odd.count(0):
            return "UTF-16 (big-endian), no byte-order mark", "UTF-16BE"
    return None


def not_utf8(path: object, raw: bytes) -> str | None:
    """The refusal's text (after ``path:``) for a file whose first bytes ``raw`` look like UTF-16 or
    UTF-32 (:func:`utf16_guess`): the encoding, and how to convert the file; ``None`` otherwise."""
    guess = utf16_guess(raw)
    if guess is None:
        return None
    return (f"not UTF-8 text: it looks like {guess[0]}; save it as UTF-8 (e.g. iconv -f {guess[1]} -t UTF-8 "
            f"{shlex.quote(str(path))} > copy.utf8, or your editor's Save as: Encoding UTF-8)")


def bare_cr_as_lf(text: str) -> str:
    """``text`` with each bare CR (an old Mac file's line ending, not followed by LF) made LF; CRLF
    and LF are kept. For TOML files: TOML ends lines in LF or CRLF and allows a bare CR nowhere, so
    this changes nothing a TOML reader would accept, and line numbers stay those an editor shows."""
    return re.sub(r"\r(?!\n)", "\n", text)
