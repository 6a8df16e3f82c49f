"""Probe round 12: names the program makes, and code that libraries write from the program's values.

The sandbox checks many names a program hands to a library (``'__dict__'``, ``'_write_'``...). A
``str`` subclass made with a metaclass the program can reach (``numbers.ABCMeta``) carries its own
``startswith``, ``split``, ``__eq__``, ``__hash__`` and ``__radd__``: it passed each check and then
named what the check refused (a dict key that says ``'_write_'`` only from its second comparison
on; ``'__' + name`` that gives ``'gi_frame'``). Libraries also write a program's values into
source they ``exec`` with the interpreter's built-ins (``dataclasses``' field names, mpmath's
hypergeometric summators), or call an attribute of a module by a program's name
(``import_module``'s version attribute). Each hostile program's payload raises ``ValueError``
naming the child's process id (``int('pid1234')``), so an escape shows in the error; each must be
a failed sample with the sandbox's refusal instead, the worker must survive them, and the programs
a model writes with these tools keep their outputs.
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, restricted_module

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
PAYLOAD = 'int("pid%d" % __import__("os").getpid())'
#: a replacement for sympy's string evaluator that evaluates :data:`PAYLOAD` with the real ``eval``
#: sympy's ``parse_expr`` puts in its globals
EV = f"def ev(code, l, g):\n    return g['eval']({PAYLOAD!r}, g)\n"
#: a ``str`` subclass whose ``startswith`` says no to everything
LIAR = "from numbers import ABCMeta\nS = ABCMeta('S', (str,), {'startswith': lambda self, *a: False})\n"
#: a file a hostile program tries to make outside its folder
CANARY = Path(tempfile.gettempdir()) / f"agora-round12-canary-{os.getpid()}"


# (case, program, the start of its error)
HOSTILE = [
    ("import_module of a str subclass", "from numbers import ABCMeta\nfrom sympy.external import import_module\n"
     "S = ABCMeta('S', (str,), {'split': lambda self, *a: ['math']})\nprint(import_module(S('os')).getpid())",
     "TypeError: class S: a subclass of a built-in value type"),
    ("import_module's version attribute", "from sympy.external import import_module\n"
     f"import sympy.parsing.sympy_parser as P\n{EV}"
     "import_module('sympy.parsing.sympy_parser', min_module_version='0', module_version_attr='__setattr__', "
     "module_version_attr_call_args=('eval_expr', ev), import_kwargs={'fromlist': ['x']})\nprint(P.parse_expr('1'))",
     "ValueError: import_module with module_version_attr='__setattr__' is not available in the sandbox"),
    ("import_module's relative import", "from sympy.external import import_module\n"
     "print(import_module('math', import_kwargs={'level': 1, 'globals': {'__package__': 'os'}}))",
     "ValueError: import_module with import_kwargs="),
    ("import_module's fromlist of sympy's test suite", "from sympy.external import import_module\n"
     "print(import_module('sympy', import_kwargs={'fromlist': ['testing']}))",
     "ValueError: import_module with fromlist=['testing'] is not available in the sandbox"),
    ("public of a class named by a str subclass", f"{LIAR}from sympy.utilities.decorator import public\n"
     "public(ABCMeta(S('__builtins__'), (), {'__module__': 'sympy.core.basic'}))\nfrom sympy.core.basic import *\n"
     f"def f():\n    return getattr(f, '__globals__')['__builtins__']\nprint(f()['eval']({PAYLOAD!r}))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("public into a library module", "import sympy\nfrom sympy.utilities.decorator import public\npublic(sympy.solve)\n"
     "print(1)", "TypeError: public takes only the program's own functions and classes"),
    ("a parse_expr global whose key says _write_ later", "from numbers import ABCMeta\n"
     "from sympy.parsing.sympy_parser import parse_expr\nimport sympy.parsing.sympy_parser as P\nclass N:\n    n = 0\n"
     "def eq(self, other):\n    N.n += 1\n    return N.n > 1\n"
     "K = ABCMeta('K', (str,), {'startswith': lambda self, *a: False, '__hash__': lambda self: hash('_write_'), "
     f"'__eq__': eq}})\n{EV}"
     "parse_expr('[1 for P.eval_expr in [E]]', global_dict={K('zz'): lambda o: o, 'P': P, 'E': ev}, "
     "local_dict={}, transformations=())\nprint(P.parse_expr('1'))",
     "TypeError: class K: a subclass of a built-in value type"),
    ("var of a symbol named by a str subclass", f"{LIAR}import sympy\nimport sympy.parsing.sympy_parser as P\n"
     "W = ABCMeta('W', (sympy.Symbol,), {'__call__': lambda self, obj: obj, "
     "'name': property(lambda self: S('_write_'), lambda self, v: None)})\nsympy.var('q', cls=W)\n"
     f"{EV}P.eval_expr = ev\nprint(P.parse_expr('1'))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("requires of a str subclass", f"{LIAR}from sympy.printing.codeprinter import requires\n"
     f"import sympy.parsing.sympy_parser as P\n{EV}"
     "requires(**{S('__dict__'): {'eval_expr': ev}})(lambda s: 0)(P)\nprint(P.parse_expr('1'))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("a printmethod that is a str subclass", f"{LIAR}import sympy\nfrom sympy.printing.str import StrPrinter\n"
     "P = ABCMeta('P', (str, StrPrinter), {'printmethod': S('__getattribute__'), '_str': staticmethod(lambda v: v), "
     "'__init__': lambda self, *a: None, '_print_level': 0, '_context': {}, '_settings': {}})\n"
     f"g = P('__globals__').doprint(sympy.solve)\nprint(g['__builtins__']['eval']({PAYLOAD!r}, g))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("cached_property of a name whose __radd__ says gi_frame", "from numbers import ABCMeta\n"
     "from sympy.core.cache import cached_property\nfrom sympy import primerange\n"
     "S = ABCMeta('S', (str,), {'__radd__': lambda self, other: 'gi_frame'})\n"
     "T = ABCMeta('T', (str,), {'__radd__': lambda self, other: 'f_builtins'})\n"
     "F = ABCMeta('F', (), {'__name__': S('x'), '__call__': lambda self, o: 0})\n"
     "G = ABCMeta('G', (), {'__name__': T('y'), '__call__': lambda self, o: 0})\ng = primerange(1, 100)\nnext(g)\n"
     "b = cached_property(G()).fget(cached_property(F()).fget(g))\n"
     f"print(b['eval']({PAYLOAD!r}, {{'__builtins__': b}}))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("update_wrapper of a str subclass", f"{LIAR}import functools\nimport sympy\ngot = []\n"
     "W = ABCMeta('W', (), {'__setattr__': lambda self, name, value: got.append(value)})\n"
     "functools.update_wrapper(W(), sympy.solve, assigned=(S('__globals__'),), updated=())\n"
     f"b = got[0]['__builtins__']\nprint(b['eval']({PAYLOAD!r}, {{'__builtins__': b}}))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("attrgetter of a str subclass", "from numbers import ABCMeta\nimport operator\n"
     "S = ABCMeta('S', (str,), {'split': lambda self, *a: ['real']})\nprint(operator.attrgetter(S('__class__'))(1))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("dataclass of a field name that is code", "from numbers import ABCMeta\n"
     "from sympy.integrals.manualintegrate import dataclass\n"
     f"C = ABCMeta('C', (), {{'__annotations__': {{{'a,' + PAYLOAD!r}: int}}, 'a': 1}})\n"
     "D = dataclass(init=False, repr=False)(C)\nprint(D() == D())",
     "ImportError: sympy.integrals.manualintegrate.dataclass belongs to the module 'dataclasses', which is not allowed"),
    ("doctest_depends_on's closure of sympy's test suite", "from numbers import ABCMeta\n"
     "from sympy.utilities.decorator import doctest_depends_on\ngot = {}\n"
     "W = ABCMeta('W', (), {'__setattr__': lambda self, name, value: got.update({name: value})})\n"
     f"doctest_depends_on(disable_viewers=[{str(CANARY)!r}])(W())\nprint(got['__doctest_skip__']())",
     "ModuleNotFoundError: No module named 'sympy.testing.runtests'"),
    ("a library function's __dict__ through update_wrapper", "import functools\nfrom numbers import ABCMeta\n"
     "import sympy\nd = {}\nW = ABCMeta('W', (), {'__dict__': property(lambda self: d)})\n"
     "functools.update_wrapper(W(), sympy.symarray, assigned=(), updated=('__dict__',))\nprint(d['__doctest_skip__']())",
     "KeyError: '__doctest_skip__'"),
    ("mpmath's hypsum of a flag that is code", "from numbers import ABCMeta\n"
     "from sympy.polys.numberfields.utilities import mp\n"
     "S = ABCMeta('S', (str,), {'__eq__': lambda self, other: other == 'R', '__hash__': lambda self: 1})\n"
     f"flags = ('R', S({'x(): pass' + chr(10) + PAYLOAD + chr(10) + 'def y'!r}))\n"
     "print(mp.hypsum(1, 1, flags, [mp.mpf(1), mp.mpf(1)], mp.mpf(0.5)))",
     "TypeError: class S: a subclass of a built-in value type"),
]


def test_every_route_with_a_made_name_or_generated_code_is_a_failed_sample(sandbox):
    CANARY.unlink(missing_ok=True)
    assert hostile_failures(sandbox, HOSTILE, LIMITS, leaked=("base 10: 'pid",)) == []
    assert not CANARY.exists()
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


# (case, program, its output)
LEGITIMATE = [
    ("import_module", "from sympy.external import import_module\nm = import_module('math')\n"
     "s = import_module('sympy', min_module_version='1.0')\nprint(m.sqrt(16), s.Integer(3) + 1, import_module('os'))",
     "4.0 4 None\n"),
    ("wraps of a library function", "import functools\nimport sympy\n@functools.wraps(sympy.symarray)\n"
     "def f(*a):\n    return 1\n@functools.lru_cache(maxsize=None)\ndef g(n):\n    return n * 2\n"
     "print(f(), g(21), sympy.cacheit(sympy.factorint)(12))", "1 42 {2: 2, 3: 1}\n"),
    ("public of the program's own function", "from sympy.utilities.decorator import public\n@public\ndef f(x):\n"
     "    return x + 1\nprint(f(1))", "2\n"),
    ("hasattr", "class S(str):\n    pass\n"
     "class P:\n    pass\np = P()\np.v = 1\nprint(hasattr(p, 'v'), hasattr(p, S('v')), hasattr(1, S('__class__')), "
     "hasattr(1, 'real'))", "True True False True\n"),
    ("hypergeometric functions", "import sympy\nfrom sympy.polys.numberfields.utilities import mp\n"
     "print(mp.hyp2f1(1, 2, 3, 0.5), mp.hyp1f1(1, 2, 0.3), sympy.hyper([1, 2], [3], sympy.Rational(1, 2)).evalf(10), "
     "sympy.besselj(1, 2.5).evalf(5))", "1.54517744447956 1.16619602525334 1.545177444 0.49709\n"),
    ("parse_expr with its own dicts", "import sympy\nfrom sympy.parsing.sympy_parser import parse_expr\n"
     "x = sympy.Symbol('x')\nprint(parse_expr('2*x + k', local_dict={'k': 5}), "
     "parse_expr('f(3)', global_dict={'f': lambda v: v * 2, 'Integer': sympy.Integer}))", "2*x + 5 6\n"),
]


def test_the_programs_a_model_writes_with_these_tools_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []


def test_a_star_import_binds_only_plain_str_names():
    """``from m import *`` binds the names of its view's ``__all__``: a ``str`` subclass equal to
    ``'__builtins__'`` whose ``startswith`` says no bound the interpreter's built-ins in the
    program's globals. The view keeps plain ``str`` names only."""
    restricted = restricted_module("_sandbox_restricted_round12")

    class Liar(str):
        def startswith(self, *args):
            return False

    module = types.ModuleType("sympy.core.fake")
    module.__all__ = [Liar("__builtins__"), "x"]
    module.__builtins__ = {"eval": eval}
    module.x = 1
    view = restricted._new_star_view(module, frozenset({"sympy"}))
    assert view.__all__ == ["x"]
    assert [type(n) for n in vars(view) if n == "__builtins__"] == []
