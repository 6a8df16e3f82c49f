"""Shared parts of the sandbox probe-round tests (``test_probe_round*_sandbox.py``; their ``sandbox``
fixture, one worker per module, is in ``conftest.py``): the check of a list of hostile programs (each a failed run whose error starts as written), of resource probes (each ending in a limit, the worker spared)
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


def resource_failures(box: Sandbox, cases: Sequence[tuple[str, str, str | tuple[str, ...]]], limits: SandboxLimits,
                      slack_s: float) -> list[tuple]:
    """The ``(case, program, outcome)`` resource probes that ran ``ok``, failed with an error not
    starting with ``outcome`` (a prefix or a tuple of them: a limit), or took more than
    ``limits.wall_s + slack_s`` seconds (the fork, kill and reply around the wall limit, on loaded
    cores); and each probe after which the worker did not run ``print(2 + 2)`` (``"the next
    program"``). ``[]`` when every probe ended in its limit and spared the worker."""
    failures = []
    for case, program, outcome in cases:
        run = box.run(program, limits)
        if run.ok or not (run.failure or "").startswith(outcome) or run.seconds > limits.wall_s + slack_s:
            failures.append((case, run.status, run.output[:200], run.failure, round(run.seconds, 1)))
        health = box.run("print(2 + 2)", limits)
        if health.output != "4\n":
            failures.append((case, "the next program", health.status, health.failure))
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
