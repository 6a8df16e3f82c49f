"""Probe round 11: sympy in the sandbox is an allow-list of its mathematical modules, not a deny-list.

Each hostile program tries one route to code outside the sandbox through sympy (a module that
evaluates strings, imports modules, or touches files and processes; an attribute walk; undoing the
sandbox's own replacements); its payload would write a canary file under the temporary folder. Each
must be a failed sample with its error, and the canary must not exist. The legitimate programs a
model writes must keep their right outputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
CANARY = Path(tempfile.gettempdir()) / f"agora-round11-canary-{os.getpid()}"
TOUCH = f"open({str(CANARY)!r}, 'w').write('escaped')"
SHELL = f"touch {CANARY}"


# (case, program, the start of its error)
HOSTILE = [
    # lambdify's module (its exec/compile are the sandbox's; its import tables are public)
    ("lambdify's module dict", "import sympy\nprint(sympy.utilities.lambdify.__dict__)",
     'SyntaxError: Line 2: "__dict__" is an invalid attribute name'),
    ("lambdify's module imported", f"import sympy.utilities.lambdify as L\nL.exec({TOUCH!r})",
     "ImportError: import of 'sympy.utilities.lambdify' is not allowed (not one of sympy's mathematical modules)"),
    ("lambdify's module from its package", "from sympy.utilities import source\nprint(source)",
     "ImportError: sympy.utilities.source is the module 'sympy.utilities.source', which is not allowed"),
    # printing.preview: LaTeX, temporary files, a viewer process
    ("printing.preview", f"import sympy\nsympy.printing.preview(sympy.Symbol('x'), viewer='file', filename={str(CANARY)!r})",
     "AttributeError: 'preview' belongs to the module 'sympy.printing.preview', which is not allowed"),
    ("preview at the top", f"import sympy\nsympy.preview(1, viewer='file', filename={str(CANARY)!r})",
     "AttributeError: 'preview' belongs to the module 'sympy.printing.preview', which is not allowed"),
    ("from-import of preview", "from sympy.printing.preview import preview\nprint(preview)",
     "ImportError: sympy.printing.preview.preview belongs to the module 'sympy.printing.preview', which is not allowed"),
    ("preview through a star import", f"from sympy import *\npreview(1, viewer='file', filename={str(CANARY)!r})",
     "NameError: name 'preview' is not defined"),
    ("print_gtk", "import sympy\nprint(sympy.print_gtk)",
     "AttributeError: 'print_gtk' belongs to the module 'sympy.printing.gtk', which is not allowed"),
    # string evaluation: confined by RestrictedPython
    ("parse_expr of os.system", f"from sympy.parsing.sympy_parser import parse_expr\nparse_expr(\"__import__('os').system({SHELL!r})\")",
     'SyntaxError: Line 1: "__import__" is an invalid variable name'),
    ("sympify of open", f"import sympy\nprint(sympy.sympify({TOUCH!r}))", "NameError: name 'open' is not defined"),
    ("parse_mathematica", "from sympy.parsing.mathematica import parse_mathematica\nprint(parse_mathematica('Sin[x]'))",
     "ImportError: sympy.parsing.mathematica.parse_mathematica belongs to the module 'sympy.parsing.mathematica'"),
    ("parse_maxima", "from sympy.parsing.maxima import parse_maxima\nprint(parse_maxima('x'))",
     "ImportError: sympy.parsing.maxima.parse_maxima belongs to the module 'sympy.parsing.maxima'"),
    ("parse_latex", "import sympy.parsing.latex\nprint(1)",
     "ImportError: import of 'sympy.parsing.latex' is not allowed (not one of sympy's mathematical modules)"),
    ("Qasm", "from sympy.physics.quantum.qasm import Qasm\nprint(Qasm('qubit q0'))",
     "ImportError: sympy.physics.quantum.qasm.Qasm belongs to the module 'sympy.physics.quantum.qasm'"),
    # importers and package data
    ("external.importtools", f"import sympy\nsympy.external.importtools.import_module('os').system({SHELL!r})",
     "AttributeError: 'external' is the module 'sympy.external', which is not allowed"),
    ("import_module of os", f"from sympy.external.importtools import import_module\nimport_module('os').system({SHELL!r})",
     "AttributeError: 'NoneType' object has no attribute 'system'"),
    ("import_module of autowrap", "from sympy.external import import_module\n"
     "print(import_module('sympy.utilities.autowrap').autowrap)", "AttributeError: 'NoneType' object has no attribute"),
    ("pkgdata", "import sympy.utilities.pkgdata\nprint(1)",
     "ImportError: import of 'sympy.utilities.pkgdata' is not allowed (not one of sympy's mathematical modules)"),
    ("pkgdata's function", "from sympy.utilities.pkgdata import get_resource\nprint(get_resource('x').read())",
     "ImportError: sympy.utilities.pkgdata.get_resource belongs to the module 'sympy.utilities.pkgdata'"),
    # interactive sessions, test runners, plotting, compilers
    ("interactive.session", "import sympy\nc = sympy.interactive.session.init_python_session()\nprint(c)",
     "AttributeError: 'session' is the module 'sympy.interactive.session', which is not allowed"),
    ("interactive.traversal", "import sympy\nprint(sympy.interactive.traversal)",
     "AttributeError: 'traversal' is the module 'sympy.interactive.traversal', which is not allowed"),
    ("sympy.test", "from sympy import test\ntest('core')",  # a lazy proxy that says sympy.core.cache
     "ImportError: sympy.test belongs to the module 'sympy.testing.runtests_pytest', which is not allowed (sympy's test suite)"),
    ("sympy.doctest", "import sympy\nsympy.doctest('sympy.core')",
     "AttributeError: 'doctest' belongs to the module 'sympy.testing.runtests', which is not allowed (sympy's test suite)"),
    ("test through a star import", "from sympy import *\ntest('core')", "NameError: name 'test' is not defined"),
    ("utilities.runtests", "import sympy.utilities.runtests\nprint(1)",
     "ImportError: import of 'sympy.utilities.runtests' is not allowed (not one of sympy's mathematical modules)"),
    ("plotting", f"import sympy\nsympy.plot(sympy.Symbol('x')).save({str(CANARY)!r})",
     "AttributeError: 'plot' belongs to the module 'sympy.plotting.plot', which is not allowed"),
    ("plotting's package", "import sympy.plotting\nprint(1)",
     "ImportError: import of 'sympy.plotting' is not allowed (not one of sympy's mathematical modules)"),
    ("autowrap", "from sympy.utilities.autowrap import autowrap\nprint(autowrap)",
     "ImportError: sympy.utilities.autowrap.autowrap belongs to the module 'sympy.utilities.autowrap'"),
    ("autowrap imported", "import sympy.utilities.autowrap as a\nprint(a)",
     "ImportError: import of 'sympy.utilities.autowrap' is not allowed"),
    ("sympy.codegen", "import sympy.codegen.pyutils\nprint(1)",
     "ImportError: import of 'sympy.codegen.pyutils' is not allowed (not one of sympy's mathematical modules)"),
    # attribute walks
    ("a module's __globals__", "import sympy\nprint(sympy.core.basic.__globals__)",
     'SyntaxError: Line 2: "__globals__" is an invalid attribute name'),
    ("__init_subclass__", "import sympy\nprint(sympy.Symbol.__init_subclass__)",
     'SyntaxError: Line 2: "__init_subclass__" is an invalid attribute name'),
    ("type(x).__mro__", "import sympy\nprint(type(sympy.Symbol('x')).__mro__)",
     'SyntaxError: Line 2: "__mro__" is an invalid attribute name'),
    ("type() of a class", "import sympy\nprint(type(int), sympy.Symbol)", "TypeError: the sandbox does not give a program the built-in type"),
    ("a function's __code__", "import sympy\nprint(sympy.solve.__code__)", 'SyntaxError: Line 2: "__code__" is an invalid'),
    ("getattr of a dunder", "import sympy\nprint(getattr(sympy.solve, '__globals__'))",
     "AttributeError: \"__globals__\" is an invalid attribute name"),
    ("a generator's frame", "g = (i for i in [1])\nprint(getattr(g, 'gi_frame'))",
     "AttributeError: \"gi_frame\" is a restricted name"),
    ("a module's os", f"import sympy\nsympy.utilities.misc.os.system({SHELL!r})", "AttributeError: 'os' is the module 'os'"),
    ("find_executable", "import sympy\nprint(sympy.utilities.misc.find_executable('sh'))",
     "AttributeError: 'find_executable' belongs to the module 'sympy.utilities.misc', which is not allowed"),
    ("a module's builtins", "import sympy\nprint(sympy.parsing.sympy_parser.builtins)",
     "AttributeError: 'builtins' is the module 'builtins', which is not allowed"),
    ("importlib through cache", "import sympy\nprint(sympy.core.cache.import_module)",
     "AttributeError: 'import_module' belongs to the module 'importlib', which is not allowed"),
    ("getattr of preview", "import sympy\nprint(getattr(sympy, 'preview'))",
     "AttributeError: 'preview' belongs to the module 'sympy.printing.preview'"),
    ("str.format of preview", "import sympy\nprint('{0.preview}'.format(sympy))",
     "AttributeError: 'preview' belongs to the module 'sympy.printing.preview'"),
    ("attrgetter of the session", "import operator, sympy\nprint(operator.attrgetter('interactive.session')(sympy))",
     "AttributeError: 'session' is the module 'sympy.interactive.session'"),
    ("star import of a closed module", "from sympy.printing.preview import *\nprint(preview)",
     "NameError: name 'preview' is not defined"),
    ("star import of misc", "from sympy.utilities.misc import *\nprint(os)", "NameError: name 'os' is not defined"),
    ("type in a table", "from sympy.strategies.util import basic_fns\nprint(basic_fns['op'](lambda: 0))",
     "TypeError: the class of that object is a built-in the sandbox does not give"),
    # undoing the sandbox's replacements (attribute writes)
    ("del ast_parser.compile", "from sympy.parsing import ast_parser\ndel ast_parser.compile\n"
     f"ast_parser.parse_expr(\"f.__globals__['__builtins__']['open']({str(CANARY)!r}, 'w')\", {{'f': ast_parser.parse_expr}})",
     "TypeError: the sandbox does not let a program delete the attribute 'compile' of the module 'sympy.parsing.ast_parser'"),
    ("replaced eval_expr", "import sympy.parsing.sympy_parser as p\np.eval_expr = print\nprint(p.parse_expr('1'))",
     "TypeError: the sandbox does not let a program change the attribute 'eval_expr' of the module"),
    ("eval_expr's state", "import sympy.parsing.sympy_parser as p\np.eval_expr.restricted = {}\nprint(1)",
     "TypeError: the sandbox does not let a program change the attribute 'restricted'"),
    ("del experimental_lambdify.exec", "from sympy.plotting import experimental_lambdify as e\ndel e.exec\nprint(1)",
     "TypeError: the sandbox does not let a program delete the attribute 'exec'"),
    ("update_wrapper onto a module", "import functools\nfrom sympy.parsing import ast_parser\nclass H:\n    pass\nh = H()\n"
     f"h.compile = lambda a, f, m: {TOUCH!r}\nfunctools.update_wrapper(ast_parser, h, assigned=('compile',), updated=())\n"
     "print(ast_parser.parse_expr('1', {}))",
     "TypeError: the sandbox does not let a program change the attributes of the module 'sympy.parsing.ast_parser'"),
    ("wraps onto the parser", "import functools\nimport sympy.parsing.sympy_parser as p\nclass H:\n    pass\nh = H()\n"
     f"h.eval_expr = lambda code, l, g: g['eval']({TOUCH!r})\nfunctools.wraps(h, assigned=('eval_expr',), updated=())(p)\n"
     "print(p.parse_expr('1'))",
     "TypeError: the sandbox does not let a program change the attributes of the module 'sympy.parsing.sympy_parser'"),
    ("sympy's own update_wrapper", "import sympy.utilities.decorator as d\nimport sympy.parsing.sympy_parser as p\n"
     "d.update_wrapper(p, p, assigned=(), updated=())\nprint(1)",
     "TypeError: the sandbox does not let a program change the attributes of the module"),
    ("update_wrapper of __code__", "import functools\ndef f(x):\n    return x\n"
     "functools.update_wrapper(f, lambda y: y, assigned=('__code__',))\nprint(f(1))",
     "TypeError: update_wrapper of the attributes ['__code__'] is not allowed in the sandbox"),
    ("the program's globals through eval_expr", "import sympy.parsing.sympy_parser as p\n"
     "p.eval_expr.restricted['_getattr_'] = lambda o, n: n\nprint(p.x)",
     "AttributeError: '_RestrictedSympyEval' object has no attribute 'restricted'"),
    ("a hook through parse_expr's locals", "from sympy.parsing.sympy_parser import parse_expr\n"
     "print(parse_expr('x.y', local_dict={'_getattr_': lambda o, n: 'hooked'}))",
     "AttributeError: 'Symbol' object has no attribute 'y'"),
    ("a hook through eval_expr's locals", "from sympy.parsing.sympy_parser import eval_expr\n"
     "print(eval_expr('(1).y', {'_getattr_': lambda o, n: 'hooked'}, {}))",
     "AttributeError: 'int' object has no attribute 'y'"),
    ("a table of a closed module", "from sympy.plotting.plot import plot_backends\nprint(plot_backends)",
     "ImportError: sympy.plotting.plot.plot_backends belongs to the module 'sympy.plotting.plot', which is not allowed"),
    ("a table through a star import", "from sympy.plotting.plot import *\nprint(plot_backends)",
     "NameError: name 'plot_backends' is not defined"),
    ("a sympy class's attribute", "import sympy\nsympy.Symbol.is_commutative = False\nprint(1)",
     "TypeError: the sandbox does not let a program change the attribute 'is_commutative' of 'Symbol'"),
    ("a sympy function's attribute", "import sympy\nsympy.solve.x = 1\nprint(1)",
     "TypeError: the sandbox does not let a program change the attribute 'x' of 'solve'"),
]


def test_every_route_through_sympy_is_a_failed_sample_and_never_runs_its_payload(sandbox):
    CANARY.unlink(missing_ok=True)
    assert hostile_failures(sandbox, HOSTILE, LIMITS) == []
    assert not CANARY.exists()
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


# (case, program, its output)
LEGITIMATE = [
    ("star import", "from sympy import *\nx = symbols('x')\nprint(solve(x**2 - 4, x))", "[-2, 2]\n"),
    ("sp alias", "import sympy as sp\nprint(sp.Rational(1, 3) + sp.Rational(1, 6))", "1/2\n"),
    ("nsimplify", "import sympy\nprint(sympy.nsimplify(0.5), sympy.nsimplify(0.333333333333333))", "1/2 1/3\n"),
    ("matrices", "from sympy import Matrix\nM = Matrix([[1, 2], [3, 4]])\nprint(M.det(), M.inv(), M.T * M, M.rank())",
     "-2 Matrix([[-2, 1], [3/2, -1/2]]) Matrix([[10, 14], [14, 20]]) 2\n"),
    ("item assignment", "import sympy\nm = sympy.zeros(2)\nm[0, 1] = 5\nd = {}\nd['k'] = 1\nd['k'] += 1\nprint(m, d)",
     "Matrix([[0, 5], [0, 0]]) {'k': 2}\n"),
    ("integrate", "from sympy import *\nx = Symbol('x')\nprint(integrate(x**2, (x, 0, 3)), integrate(exp(-x), (x, 0, oo)), diff(x**3, x))",
     "9 1 3*x**2\n"),
    ("number theory", "from sympy import *\nprint(divisors(12), isprime(97), list(primerange(1, 20)), factorint(360), "
     "totient(10), mod_inverse(3, 7), gcd(12, 18), lcm(4, 6), nextprime(100))",
     "[1, 2, 3, 4, 6, 12] True [2, 3, 5, 7, 11, 13, 17, 19] {2: 3, 3: 2, 5: 1} 4 5 6 12 101\n"),
    ("sums and limits", "from sympy import *\nk, n, x = symbols('k n x')\nprint(summation(k, (k, 1, n)), Sum(k**2, (k, 1, 4)).doit(), "
     "Product(k, (k, 1, 5)).doit(), limit(sin(x)/x, x, 0), series(exp(x), x, 0, 3))",
     "n**2/2 + n/2 30 120 1 1 + x + x**2/2 + O(x**3)\n"),
    ("functions", "from sympy import *\nx = Symbol('x')\nprint(floor(Rational(7, 2)), ceiling(2.1), Abs(-3), log(E), cos(pi), "
     "Eq(x, 1), binomial(5, 2), factorial(5), N(pi, 10), I**2, sqrt(8))",
     "3 3 3 1 -1 Eq(x, 1) 10 120 3.141592654 -1 2*sqrt(2)\n"),
    ("algebra", "from sympy import *\nx, y = symbols('x y')\nprint(solveset(x**2 - 1, x, S.Reals), linsolve([x + y - 3, x - y - 1], [x, y]), "
     "Poly(x**2 + 2*x + 1, x).all_coeffs(), simplify(sin(x)**2 + cos(x)**2), expand((x + 1)**2), factor(x**2 - 1))",
     "{-1, 1} {(2, 1)} [1, 2, 1] 1 x**2 + 2*x + 1 (x - 1)*(x + 1)\n"),
    ("submodules", "from sympy.abc import x\nfrom sympy.ntheory.modular import crt\nfrom sympy.utilities.iterables import "
     "multiset_permutations\nfrom sympy.combinatorics import Permutation\nfrom sympy.stats import Die, P\n"
     "print(crt([3, 5], [2, 3]), len(list(multiset_permutations([1, 1, 2]))), Permutation([1, 0, 2]).order(), P(Die('d', 6) > 4))",
     "(8, 15) 3 2 1/3\n"),
    ("strings and lambdify", "import sympy\nx = sympy.Symbol('x')\nprint(sympy.sympify('x**2 - 4').subs(x, 3), sympy.solve('x**2 - 9'), "
     "sympy.lambdify(x, x**2 + 1)(3), sympy.latex(x**2), sympy.pycode(x**2))", "5 [-3, 3] 10 x^{2} x**2\n"),
    ("lambdify's table", "import sympy\nfrom sympy.utilities.lambdify import MODULES\nx = sympy.Symbol('x')\n"
     "print('math' in MODULES, sympy.lambdify(x, sympy.sqrt(x), modules='math')(16))", "True 4.0\n"),
    ("misc", "from sympy.utilities.misc import as_int, ordinal\nimport sympy\nprint(as_int(7), ordinal(3), sympy.filldedent('a b'))",
     "7 3rd \na b\n"),
    ("strategies", "from sympy.strategies.util import basic_fns\nimport sympy\nprint(basic_fns['op'](sympy.Integer(2)))",
     "<class 'sympy.core.numbers.Integer'>\n"),
    ("functools decorators", "import functools\ndef memo(g):\n    cache = {}\n    @functools.wraps(g)\n    def inner(n):\n"
     "        if n not in cache:\n            cache[n] = g(n)\n        return cache[n]\n    return inner\n@memo\ndef fib(n):\n"
     "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n@functools.lru_cache(maxsize=None)\ndef c(n):\n"
     "    return 1 if n < 2 else c(n - 1) + c(n - 2)\nprint(fib(30), c(30))", "832040 1346269\n"),
    ("the program's own objects", "class Counter:\n    total = 0\nc = Counter()\nc.n = 3\nCounter.total += c.n\n"
     "def f():\n    return 1\nf.memo = {}\nprint(Counter.total, c.n, f.memo)", "3 3 {}\n"),
]


def test_the_programs_a_model_writes_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, SandboxLimits(cpu_s=5, wall_s=15, output_bytes=4096)) == []


SCAN = r"""
import importlib, os, pkgutil, sys, types, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
import _sandbox_worker as w
R = w._restricted
import sympy
R._ALLOWED[0] = frozenset(["math", "fractions", "itertools", "collections", "sympy"])
R._WRITES_CONFINED[0] = True
for info in pkgutil.walk_packages(sympy.__path__, "sympy.", onerror=lambda name: None):
    if not R._library_refused(info.name) and not R._closed_module(info.name):
        try:
            importlib.import_module(info.name)
        except Exception:
            pass
found = set()
def look(where, value, depth):
    if depth > 2:
        return
    items = (value.items() if isinstance(value, dict) else enumerate(value)
             if isinstance(value, (list, tuple, set, frozenset)) else ())
    for key, item in list(items)[:1000]:
        if R._refused(item, R._ALLOWED[0]):
            found.add(where)
        look(where, item, depth + 1)
for name, module in list(sys.modules.items()):
    if isinstance(module, types.ModuleType) and name.startswith("sympy") and (
            not R._refused(module, R._ALLOWED[0]) or name in R.SYMPY_TABLES):
        for attr, value in list(vars(module).items()):
            if not attr.startswith("_"):
                look(f"{name}.{attr}", value, 0)
print("\n".join(sorted(found)))
"""


def test_no_table_of_a_holdable_sympy_module_holds_what_a_program_may_not_hold():
    """A value in a module's public dict or list reaches the program unchecked (``d.get(k)``,
    ``list(d.values())``). Every holdable sympy module is imported and its tables (two levels)
    scanned: ``sympy.strategies``' ``basic_fns['op']`` was the built-in ``type``. What remains:
    ``sympy.core.cache.CACHE``, the cached sympy functions called so far (one of a module outside
    the list is sympy's maths, called by sympy), and ``sympy.plot_backends``, plotting's classes
    (their ``matplotlib`` is not importable; the text backend prints nowhere)."""
    worker_dir = Path(sys.modules["agora.models.recipes.sandbox"].__file__).parent
    out = subprocess.run([sys.executable, "-I", "-c", SCAN, str(worker_dir)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert set(out.stdout.split()) <= {"sympy.core.cache.CACHE", "sympy.plot_backends", "sympy.plotting.plot_backends"}
