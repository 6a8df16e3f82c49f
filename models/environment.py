"""The ``AGORA_*`` environment variables: the one list of every variable Agora reads, with its type
and meaning (:data:`VARIABLES`), and their checks.

Every ``agora`` command checks them all before it does anything (:func:`check_environment`), so a
bad value is one line naming the variable and its value, not a traceback from deep inside a model
load; code that reads one (:func:`env_int`, :func:`env_folder`) applies the same check, so a
library user gets the same line. A set ``AGORA_*`` variable that is not in the list (a typo such as
``AGORA_LLAMA_THREAD``) is named in a warning (:func:`unknown_variables`), with the closest known
name, since it changes nothing.

The list is also the documentation: ``docs/environment.md`` shows it, and a test checks that every
``AGORA_*`` name in the package's source is in it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from agora.tasks.errors import InputError

Kind = Literal["folder", "new_folder", "positive_int", "positive_number", "flag", "executable", "modules", "engine",
               "text"]
"""How a variable's value is checked: ``folder`` an existing folder; ``new_folder`` a folder or a
path where one can be made (no file in the way); ``positive_int`` an integer from 1 to :data:`MAX_INT`;
``positive_number`` a finite number above 0; ``flag`` ``0`` or ``1``; ``executable`` a program file
that may be run, or a program name on ``PATH``; ``modules`` comma-separated module names; ``engine``
one of :data:`ENGINE_NAMES` (the embedded llama.cpp engine, case and surrounding spaces aside); ``text``
any value. Numbers are written in ASCII digits (``٣`` or ``３`` is refused, though Python reads it)."""

MAX_INT = 512
"""The largest ``positive_int`` value accepted (``AGORA_LLAMA_THREADS``): a fixed bound, the same on
every machine, far above any core count llama.cpp gains from and below what makes it allocate
absurdly (threads past the cores only slow decoding)."""


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One ``AGORA_*`` variable Agora reads."""

    name: str
    kind: Kind
    meaning: str
    """What it does, and its default when unset."""
    scope: Literal["agora", "tests"] = "agora"
    """``agora``: read by the package; ``tests``: read only by the test suite and benchmark scripts."""


VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("AGORA_CACHE_DIR", "new_folder",
           "Folder of the joined built-in GGUF files (under `gguf/`); default: the user cache (`~/.cache/agora`)."),
    EnvVar("AGORA_POOL_DIR", "folder",
           "Folder a relative pool-file path in a graph's context is read from; `agora studio` sets it to the "
           "folder it was started in; default: the current folder."),
    EnvVar("AGORA_LLAMA_THREADS", "positive_int",
           "Threads of the embedded llama.cpp engine; default: the cores this process may run on."),
    EnvVar("AGORA_LLAMA_SHARE_BATCHES", "flag",
           "`0`: each embedded request decodes alone (reproducible whatever runs beside it); default `1`: "
           "concurrent requests share decode batches."),
    EnvVar("AGORA_LLAMA_PREFIX_CACHE", "flag",
           "`0`: every prompt is evaluated whole; default `1`: a request beside others reuses the KV cells "
           "of a prompt prefix it shares with a recent one."),
    EnvVar("AGORA_LEASE_S", "positive_number",
           "Seconds a question claimed by a worker stays its own without a renewal (shared trace stores); "
           "default: `agora.traces.claims.LEASE_S`."),
    EnvVar("AGORA_LLAMA_ENGINE", "engine",
           "Retired (it chose a server engine on trial); only `llama-cpp-python` or unset is accepted."),
    EnvVar("AGORA_VLLM_PYTHON", "executable",
           "The Python interpreter that has vLLM (a path, or a name on PATH), for `agora serve`; default: the "
           "current one."),
    EnvVar("AGORA_HIDE_MODULES", "modules",
           "Set by Agora for the vLLM processes it starts: installed packages that cannot be imported there."),
    EnvVar("AGORA_REQUIRE_VLLM", "flag", "Tests: `1` makes the vLLM tests fail instead of skipping.", "tests"),
    EnvVar("AGORA_REQUIRE_POSTGRES", "flag", "Tests: `1` makes the Postgres tests fail instead of skipping.",
           "tests"),
    EnvVar("AGORA_WRITE_GOLDEN", "flag", "Tests: `1` rewrites the golden files the tests compare with.", "tests"),
    EnvVar("AGORA_DATA", "text", "Benchmark scripts: the folder of the task files.", "tests"),
    EnvVar("AGORA_VENV", "text", "Benchmark scripts: the virtual environment to run in.", "tests"),
    EnvVar("AGORA_REF", "text", "Benchmark scripts: the name of the reference run (`ref-3`).", "tests"),
    EnvVar("AGORA_REF_DIR", "text", "Benchmark scripts: the folder of the reference run's files.", "tests"),
)
"""Every ``AGORA_*`` variable Agora reads, in the order ``docs/environment.md`` shows them."""

BY_NAME = {v.name: v for v in VARIABLES}

ENGINE_NAMES = ("llama-cpp-python", "llama_cpp_python", "llamacpp", "llama-cpp", "python", "native")
"""The values ``AGORA_LLAMA_ENGINE`` takes (unset or empty too): spellings of llama-cpp-python, the one
embedded engine. The variable once chose a server engine, which Agora no longer has; left set to it
(or to anything else), it would otherwise be ignored silently."""

_REMOVED_ENGINES = ("server", "xllamacpp", "llama-server", "llamacpp-server")


def engine_problem(value: str) -> str | None:
    """What is wrong with ``value`` as ``AGORA_LLAMA_ENGINE`` (``None``: an accepted value): one
    line naming the accepted values and ending ``; unset AGORA_LLAMA_ENGINE``."""
    engine = value.strip().lower()
    if not value or engine in ENGINE_NAMES:  # empty is unset; spaces alone are refused, as for every variable
        return None
    why = ("the server engine was removed on 2026-12-04 (see benchmarks/README.md)" if engine in _REMOVED_ENGINES
           else "it is not an engine's name")
    return (f"llama-cpp-python is the one embedded engine and {why} (accepted: unset or {', '.join(ENGINE_NAMES)}, "
            "any case); unset AGORA_LLAMA_ENGINE")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class EnvironmentVariableError(InputError):
    """An ``AGORA_*`` variable with a value Agora cannot use: ``NAME='value': what is wrong; what to do``."""

    def __init__(self, name: str, value: str, problem: str):
        self.name, self.value = name, value
        super().__init__(f"{name}={value!r}: {problem}")


def _check(var: EnvVar, value: str) -> None:
    """Raise :class:`EnvironmentVariableError` when ``value`` does not fit ``var.kind``."""
    def fail(problem: str) -> None:
        what = re.split(r"[;.]\s", var.meaning, maxsplit=1)[0].rstrip(".")
        raise EnvironmentVariableError(var.name, value, f"{problem} ({what[0].lower()}{what[1:]}); fix or unset it")

    if var.kind in ("positive_int", "positive_number") and not value.isascii() and any(c.isdigit() for c in value):
        fail("not written in ASCII digits 0-9")  # int() and float() read ٣ and ３: refuse what a reader would misread
    if var.kind == "positive_int":
        if not re.fullmatch(r"\s*\+?[0-9]+\s*", value):
            fail("not a whole number from 1")
        digits = value.strip().lstrip("+").lstrip("0")  # compared as text: int() refuses 4,300+ digits
        if not digits:
            fail("not a whole number from 1")
        if len(digits) > len(str(MAX_INT)) or int(digits) > MAX_INT:
            fail(f"above {MAX_INT}, the most it takes")
    elif var.kind == "positive_number":
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            fail("not a number above 0")
    elif var.kind == "flag":
        if value.strip() not in ("0", "1"):
            fail("not 0 or 1")
    elif var.kind in ("folder", "new_folder"):
        if not value.strip():
            fail("empty, not a folder")
        try:
            path = Path(value).expanduser()
        except RuntimeError:  # "~name/..." for a user this system does not have
            fail(f"{value.split('/', 1)[0]!r} is no user's home folder (no such user)")
        if path.exists():
            if not path.is_dir():
                fail("a file, not a folder")
            return
        if var.kind == "folder":
            fail("no such folder")
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            fail(f"{parent} is a file, so no folder can be made there")
    elif var.kind == "executable":
        if os.sep not in value and shutil.which(value):  # a program name, found on PATH as a subprocess finds it
            return
        path = Path(value).expanduser()
        if not path.is_file():
            fail("no such program file" if not path.exists() else "not a program file")
        if not os.access(path, os.X_OK):
            fail("not executable")
    elif var.kind == "engine":
        if (problem := engine_problem(value)) is not None:
            raise EnvironmentVariableError(var.name, value, problem)
    elif var.kind == "modules":
        bad = [m for m in value.split(",") if m and not _MODULE.fullmatch(m)]
        if bad:
            fail(f"{bad[0]!r} is not a module name")


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the known variable ``name`` checked for its kind; ``None`` when unset or empty.

    Raises:
        EnvironmentVariableError: one line naming the variable, its value and what is wrong.
        KeyError: ``name`` is not in :data:`VARIABLES` (a programming error).
    """
    var = BY_NAME[name]
    value = (os.environ if environ is None else environ).get(name)
    if value is None or value == "":
        return None
    _check(var, value)
    return value


def env_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """A ``positive_int`` variable as an ``int`` (``None`` when unset); raises as :func:`env_value`."""
    value = env_value(name, environ)
    return None if value is None else int(value.strip().lstrip("+").lstrip("0"))  # checked: 1..MAX_INT


def env_folder(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """A ``folder`` or ``new_folder`` variable as a ``Path`` (``~`` expanded; ``None`` when unset);
    raises as :func:`env_value`."""
    value = env_value(name, environ)
    return None if value is None else Path(value).expanduser()


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Check every set variable of :data:`VARIABLES` (the ``agora`` command runs this first).

    Raises:
        EnvironmentVariableError: the first bad one, in :data:`VARIABLES` order.
    """
    environ = os.environ if environ is None else environ
    for var in VARIABLES:
        env_value(var.name, environ)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per set ``AGORA_*`` variable that Agora does not read, with the closest known name
    (``AGORA_LLAMA_THREAD is set, but Agora reads no such variable (did you mean AGORA_LLAMA_THREADS?)``)."""
    environ = os.environ if environ is None else environ
    lines = []
    for name in sorted(n for n in environ if n.startswith("AGORA_") and n not in BY_NAME):
        close = difflib.get_close_matches(name, list(BY_NAME), n=1)
        hint = f"did you mean {close[0]}?" if close else "docs/environment.md lists the ones it reads"
        lines.append(f"{name} is set, but Agora reads no such variable ({hint})")
    return lines
