"""Probe round 16: a cold import in every child, and a fresh round of hostile programs.

- Round 13's ``from sympy.stats import Normal, P`` case came near its 8 s wall limit on loaded
  cores (3.7-6.2 s): the worker preloaded only ``sympy`` itself, so each child imported
  ``sympy.stats`` anew, and where its bytecode cache is missing (a read-only or
  ``PYTHONDONTWRITEBYTECODE`` install; the child may write nothing outside its folder) compiled
  its sources from scratch every time (1.6 s a child on loaded cores). The worker now imports every
  allowed sympy package once, at start (writing their cache where it can): a child's import of
  one is free.
- ``sympy.var`` writes the symbols it makes into its caller's globals (``sys._getframe(1)``): called
  from C code that library code drives (a ``map`` of ``var`` handed to ``parse_expr`` as its
  transformations, iterated in ``sympy_parser``'s frame), the caller is the library, and
  ``var('eval_expr', cls=E)`` replaced the sandbox's restricted evaluator in ``sympy_parser`` with
  the program's object: the next ``parse_expr`` handed it sympy's own namespace, whose ``eval`` is
  the interpreter's (unrestricted code: ``().__class__.__bases__[0]``). ``sympy.polys.rings.vring``,
  ``vfield`` and ``vfree_group`` write their generators two frames up the same way
  (``sympy.utilities.magic.pollute``), names starting with ``_`` (the program's hooks) included.
  In a child both now write only into the program's own globals, and never a name starting with ``_``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agora.models.recipes.sandbox import Sandbox, SandboxLimits

from sandbox_probes import hostile_failures, output_failures

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: resource probes: a second of CPU, a short wall limit
TIGHT = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=128, output_bytes=4096)
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


#: a program's object put in place of the sandbox's restricted evaluator of ``parse_expr``
EVAL_EXPR = ("import sympy, functools\nfrom sympy.parsing import sympy_parser\nfrom sympy.parsing.sympy_parser import parse_expr\n"
             "class E(sympy.Symbol):\n    def __call__(self, code, local_dict, global_dict):\n"
             "        return global_dict['eval']('().__class__.__bases__[0]')\n"
             "try:\n    parse_expr('1', transformations=map(functools.partial(sympy.var, cls=E), ['eval_expr']))\n"
             "except Exception as e:\n    print(e)\nprint(parse_expr('1'))")
VAR_FROM_LIBRARY = ("ValueError: var called from library code (the module 'sympy.parsing.sympy_parser') is not allowed "
                    "in the sandbox: it writes into its caller's globals")

# (case, program, the start of its error)
FRAME_WRITERS = [
    ("var into sympy_parser's globals", "import sympy\nfrom sympy.parsing import sympy_parser\n"
     "from sympy.parsing.sympy_parser import parse_expr\nparse_expr('1', transformations=map(sympy.var, ['zz']))\n"
     "print(sympy_parser.zz)", VAR_FROM_LIBRARY),
    ("var through sift", "import sympy\nfrom sympy.utilities import iterables\nfrom sympy.utilities.iterables import sift\n"
     "sift(['zz'], sympy.var)\nprint(iterables.zz)",
     "ValueError: var called from library code (the module 'sympy.utilities.iterables') is not allowed"),
    ("vring of a hook's name", "from sympy import QQ\nfrom sympy.polys.rings import vring\nvring('_getattr_', QQ)\n"
     "print((1).real)", "ValueError: vring of the names ['_getattr_'] is not allowed in the sandbox"),
    ("vring into sympy_parser's globals", "import sympy, functools\nfrom sympy import QQ\nfrom sympy.polys.rings import vring\n"
     "from sympy.parsing import sympy_parser\nfrom sympy.parsing.sympy_parser import parse_expr\n"
     "parse_expr('1', transformations=map(functools.partial(vring, domain=QQ), ['eval_expr']))\n"
     "print(sympy_parser.eval_expr)",
     "ValueError: vring called from library code (the module 'sympy.parsing.sympy_parser') is not allowed"),
    ("vfree_group of a hook's name", "from sympy.combinatorics.free_groups import vfree_group\n"
     "vfree_group('_write_')\nprint(1)", "ValueError: vfree_group of the names ['_write_'] is not allowed in the sandbox"),
]


def test_var_from_library_code_cannot_replace_the_restricted_evaluator(sandbox):
    run = sandbox.run(EVAL_EXPR, LIMITS)
    assert (run.status, run.output) == ("ok", VAR_FROM_LIBRARY.removeprefix("ValueError: ") + "\n1\n"), run.failure


def test_symbols_are_written_only_into_the_programs_own_globals(sandbox):
    assert hostile_failures(sandbox, FRAME_WRITERS, LIMITS) == []


# (case, program, its output): var, vring and vfield in the program itself, and in its functions
FRAME_WRITERS_KEPT = [
    ("var", "import sympy\nsympy.var('a b')\nprint(sympy.expand((a + b) ** 2))", "a**2 + 2*a*b + b**2\n"),
    ("var in a function", "from sympy import var\ndef f():\n    var('t')\n    return t + 1\nprint(f(), t)", "t + 1 t\n"),
    ("vring", "from sympy import ZZ\nfrom sympy.polys.rings import vring\nvring('x y', ZZ)\nprint((x + y) ** 2)",
     "x**2 + 2*x*y + y**2\n"),
    ("vfield", "from sympy import QQ\nfrom sympy.polys.fields import vfield\nvfield('u', QQ)\nprint(1 / u + u)", "(u**2 + 1)/u\n"),
    ("vfree_group", "from sympy.combinatorics.free_groups import vfree_group\nvfree_group('g h')\nprint(g * h * g ** -1)",
     "g*h*g**-1\n"),
]


def test_var_and_vring_in_the_program_keep_their_outputs(sandbox):
    assert output_failures(sandbox, FRAME_WRITERS_KEPT, LIMITS) == []
