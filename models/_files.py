"""File names from user-given names (model names, thread and run ids): never a path out of their folder."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
_MAX_LEN = 120


def safe_file_name(name: str) -> str:
    """``name`` as one file-name component inside a folder: unchanged when it is already safe
    (ASCII letters, digits, ``. _ + -``, not starting with a dot, at most 120 characters), else
    every other character becomes ``_``, a leading dot gets a ``_`` before it, and an 8-digit hash
    of the name is appended, so that different names keep different files.

    >>> safe_file_name("smollm2-135m")
    'smollm2-135m'
    >>> safe_file_name("../../x")
    '_.._.._x-9cdf6a50'
    """
    name = str(name)
    cleaned = _UNSAFE.sub("_", name)
    if cleaned.startswith(".") or not cleaned:
        cleaned = "_" + cleaned
    if cleaned == name and len(name) <= _MAX_LEN:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned[:_MAX_LEN]}-{digest}"
