"""Probe round 16: a cold import in every child, and a fresh round of hostile programs.

- Round 13's ``from sympy.stats import Normal, P`` case came near its 8 s wall limit on loaded
  cores (3.7-6.2 s): the worker preloaded only ``sympy`` itself, so each child imported
  ``sympy.stats`` anew, and where its bytecode cache is missing (a read-only or
  ``PYTHONDONTWRITEBYTECODE`` install; the child may write nothing outside its folder) compiled
  its sources from scratch every time (1.6 s a child on loaded cores). The worker now imports every
  allowed sympy package once, at start (writing their cache where it can): a child's import of
  one is free.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agora.models.recipes.sandbox import SandboxLimits

WORKER = Path(sys.modules["agora.models.recipes.sandbox"].__file__).with_name("_sandbox_worker.py")


def test_the_worker_preloads_every_allowed_sympy_package():
    script = ("import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('w', {str(WORKER)!r})\n"
              "w = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(w)\n"
              "print([p for p in w._restricted.SYMPY_PACKAGES if p not in sys.modules])")
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "[]", done.stderr[-2000:]


def test_a_lazily_imported_sympy_package_costs_a_child_no_compile(sandbox):
    """With a second of CPU: compiling ``sympy.stats`` in the child took more than that."""
    program = "import sympy\nfrom sympy.stats import Normal, P\nX = Normal('X', 0, 1)\nprint(P(X > 0))"
    limits = SandboxLimits(cpu_s=1, wall_s=8, memory_mb=256, output_bytes=4096)
    runs = [sandbox.run(program, limits) for _ in range(3)]
    assert [(r.status, r.output) for r in runs] == [("ok", "1/2\n")] * 3, [r.failure for r in runs]

