"""Shared parts of the sandbox probe-round tests (``test_probe_round*_sandbox.py``; their ``sandbox``
fixture, one worker per module, is in ``conftest.py``): the check of a list of hostile programs (each a failed run whose error starts as written)
and of legitimate ones (each ``ok`` with its exact output), and ``_sandbox_restricted.py`` loaded by
path, as the worker loads it."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Sequence

from agora.models.recipes.sandbox import Sandbox, SandboxLimits


def hostile_failures(box: Sandbox, cases: Sequence[tuple[str, str, str]], limits: SandboxLimits,
                     leaked: Sequence[str] = ()) -> list[tuple]:
    """The ``(case, program, error)`` cases that did not fail with an error starting ``error``, or
    whose error holds one of ``leaked`` (a payload's output shown in the error): ``[]`` when all
    were contained; each failure as ``(case, status, output, failure)``."""
    failures = []
    for case, program, error in cases:
        run = box.run(program, limits)
        failure = run.failure or ""
        if run.ok or not failure.startswith(error) or any(text in failure for text in leaked):
            failures.append((case, run.status, run.output, run.failure))
    return failures


def output_failures(box: Sandbox, cases: Sequence[tuple[str, str, str]], limits: SandboxLimits) -> list[tuple]:
    """The ``(case, program, output)`` cases that did not run ``ok`` printing exactly ``output``."""
    failures = []
    for case, program, output in cases:
        run = box.run(program, limits)
        if (run.status, run.output) != ("ok", output):
            failures.append((case, run.status, run.output, run.failure))
    return failures


def restricted_module(name: str) -> types.ModuleType:
    """``_sandbox_restricted.py`` loaded by path under the module name ``name``, as the worker loads it."""
    path = Path(sys.modules["agora.models.recipes.sandbox"].__file__).with_name("_sandbox_restricted.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
