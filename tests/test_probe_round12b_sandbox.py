"""Probe round 12b: classes a program makes, and library paths that write its names into sympy.

The routes of probe rounds 11 and 12 share one root: a program makes a class of its own, most often
a subclass of ``str`` whose ``==``, ``hash``, ``split`` or ``+`` lie, and hands it to library code
that takes it for a name or a key. A ``class`` statement may no longer make a metaclass, use a
metaclass the program made, or give a subclass of a built-in value type (``str``, ``int``,
``tuple``, ``dict``...) attributes of its own, nor write attributes onto such a class or its bases
afterwards; ``class S(str): pass`` stays. Calling a reachable metaclass may not make a metaclass
either. Classes made by calling a reachable metaclass (``numbers.ABCMeta('S', (str,), {...})``) stay
possible (earlier rounds' tests pin what their uses raise), so the library paths that take a name
from them are checked each: ``expand``'s hints, ``Domain.convert_from``'s alias, the LaTeX printer's
``'_print_' + name``, writes onto ``sympy.S``, new ``OptionType`` and ``Singleton`` classes,
``doctest_depends_on`` of a module, ``copy`` of a state naming ``__class__``, and
``init_printing``'s ``sys.displayhook``. Each hostile program must be a failed sample with the
sandbox's refusal; the worker survives them, and the programs a model writes keep their outputs.
"""

from __future__ import annotations

import sys

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, restricted_module

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: a ``str`` subclass whose ``'prefix' + s`` is ``'__init__'`` (its ``__radd__`` chooses the name)
RADD = "from numbers import ABCMeta\nS = ABCMeta('S', (str,), {'__radd__': lambda self, o: %r})\n"


# (case, program, the start of its error)
HOSTILE = [
    ("a str subclass with its own split", "class S(str):\n    def split(self, *a):\n        return ['math']\n"
     "from sympy.external import import_module\nprint(import_module(S('os')))",
     "TypeError: class S: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own "
     "is not allowed in the sandbox"),
    ("a tuple subclass with a class attribute", "class T(tuple):\n    n = 1\nprint(T((1,)).n)",
     "TypeError: class T: a subclass of a built-in value type"),
    ("a subclass of a made str subclass", "from numbers import ABCMeta\n"
     "S = ABCMeta('S', (str,), {'split': lambda self, *a: []})\nclass T(S):\n    pass\nprint(T('a').split())",
     "TypeError: class S: a subclass of a built-in value type"),
    ("a method written onto an empty str subclass", "class S(str):\n    pass\nS.split = lambda self, *a: ['math']\n"
     "from sympy.external import import_module\nprint(import_module(S('os')))",
     "TypeError: the sandbox does not let a program change the attribute 'split' of 'S'"),
    ("a method written onto the base of a str subclass", "class A:\n    pass\nclass S(A, str):\n    pass\n"
     "A.split = lambda self, *a: ['math']\nprint(S('a').split())",
     "TypeError: the sandbox does not let a program change the attribute 'split' of 'A'"),
    ("a metaclass", "from numbers import ABCMeta\nclass M(ABCMeta):\n    pass\nprint(M)",
     "TypeError: class M: a class deriving from type (a metaclass) is not allowed in the sandbox"),
    ("a metaclass made by calling ABCMeta", "from numbers import ABCMeta\n"
     "M = ABCMeta('M', (ABCMeta,), {})\nX = M('X', (), {})\nclass C(X):\n    pass\nprint(C)",
     "TypeError: class M: a class deriving from type (a metaclass) is not allowed"),
    ("a metaclass made by calling FunctionClass", "from sympy.core.function import FunctionClass\n"
     "M = FunctionClass('M', (FunctionClass,), {})\nprint(M)",
     "TypeError: class M: a class deriving from type (a metaclass) is not allowed"),
    ("expand of a hint whose name is made", RADD % "__class__" + "import sympy\nx = sympy.Symbol('x')\n"
     "print(x.expand(**{S('q'): True}))", "TypeError: class S: a subclass of a built-in value type"),
    ("convert_from of an alias that names __setattr__", RADD % "__setattr__" + "from sympy import ZZ\n"
     "K = ABCMeta('K', (), {'alias': S('ZZ')})\nZZ.convert_from('dtype', K())\nprint(ZZ(3))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("latex of a function whose class name is made", RADD % "__init__" + "import sympy\n"
     "from sympy.core.function import FunctionClass\nF = FunctionClass(S('g'), (sympy.Function,), {'nargs': 1})\n"
     "print(sympy.latex(F(sympy.Symbol('x'))**2))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("a write onto sympy.S", "import sympy\nsympy.S.Zero = 5\nprint(sympy.S.Zero)",
     "TypeError: the sandbox does not let a program change the attribute 'Zero'"),
    ("a polys option class", "from sympy.polys.polyoptions import Expand\nclass E(Expand):\n    option = 'gens'\n"
     "print(1)", "TypeError: a new polys option class (metaclass OptionType) is not available in the sandbox"),
    ("a polys option class by OptionType", "from sympy.polys.polyoptions import OptionType\n"
     "OptionType('E', (), {'option': '__init__'})\nprint(1)", "TypeError: a new polys option class"),
    ("a singleton that replaces S.Zero", "from sympy.core.numbers import Zero\nclass Zero(Zero):\n    pass\n"
     "import sympy\nprint(type(sympy.S.Zero))",
     "ValueError: a singleton class named 'Zero' is not allowed in the sandbox"),
    ("a singleton by Singleton", "import sympy\nfrom sympy.core.singleton import Singleton\n"
     "Singleton('Half', (sympy.Expr,), {})\nprint(sympy.S.Half)",
     "ValueError: a singleton class named 'Half' is not allowed in the sandbox"),
    ("doctest_depends_on of a module", "import sympy\nfrom sympy.utilities.decorator import doctest_depends_on\n"
     "doctest_depends_on(modules=['x'])(sympy)\nprint(1)",
     "TypeError: doctest_depends_on of the module 'sympy' is not allowed in the sandbox"),
    ("copy of a state that names __class__", "from numbers import ABCMeta\nimport sympy\n"
     "from sympy.polys.agca.modules import copy\nclass C:\n    pass\n"
     "R = ABCMeta('R', (), {'__reduce_ex__': lambda self, p: (sympy.Integer, (0,), {'__class__': C})})\n"
     "copy(R())\nprint(type(sympy.S.Zero))",
     "TypeError: copy of an object whose state is not a dict of plain attribute names is not available in the sandbox"),
]


def test_every_made_class_route_is_a_failed_sample(sandbox):
    assert hostile_failures(sandbox, HOSTILE, LIMITS) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


def test_type_with_three_arguments_stays_unreachable(sandbox):
    run = sandbox.run("print(type('S', (str,), {'split': lambda self: []}))", LIMITS)
    assert (run.ok, run.failure) == (False, "TypeError: type(name, bases, namespace) is not available in the sandbox "
                                            "(write a class statement)")


# (case, program, its output)
LEGITIMATE = [
    ("classes", "class S(str):\n    pass\nclass A:\n    def __init__(self, v):\n        self.v = v\n"
     "    def double(self):\n        return 2 * self.v\nclass B(A):\n    def double(self):\n"
     "        return super().double() + 1\nB.k = 1\nB.k += 1\nprint(S('a') + 'b', B(3).double(), B.k)", "ab 7 2\n"),
    ("a Function subclass", "import sympy\nclass f(sympy.Function):\n    @classmethod\n    def eval(cls, x):\n"
     "        if x.is_Number:\n            return 2 * x\nx = sympy.Symbol('x')\n"
     "print(f(3), f(x), sympy.latex(f(x)**2), sympy.latex(sympy.sin(x)**2), sympy.ccode(sympy.gamma(x)))",
     "6 f(x) f^{2}{\\left(x \\right)} \\sin^{2}{\\left(x \\right)} tgamma(x)\n"),
    ("expand", "import sympy\nx, y = sympy.symbols('x y')\nprint(sympy.expand((x + 1)**2), "
     "sympy.sin(x + y).expand(trig=True), sympy.expand(sympy.log(x*y), force=True), "
     "sympy.Matrix([[(x + 1)**2]]).expand())",
     "x**2 + 2*x + 1 sin(x)*cos(y) + sin(y)*cos(x) log(x) + log(y) Matrix([[x**2 + 2*x + 1]])\n"),
    ("domains", "import sympy\nfrom sympy import ZZ, QQ\nx = sympy.Symbol('x')\n"
     "print(ZZ.convert_from(QQ(4), QQ), QQ.convert(ZZ(3), ZZ), sympy.Poly(x**2 / 2 + 1, x).domain, "
     "sympy.Poly(x + 1, x, domain='QQ').as_expr())", "4 3 QQ x + 1\n"),
    ("copy", "import sympy\nfrom sympy.polys.agca.modules import copy\nx = sympy.Symbol('x', positive=True)\n"
     "class P:\n    pass\np = P()\np.v = [x]\nq = copy(p)\nprint(copy(x), copy(sympy.Matrix([[x, 1]])), q.v, "
     "copy(sympy.Poly(x**2 + 1)), copy(sympy.S.Half), copy(sympy.QQ(1, 2)))",
     "x Matrix([[x, 1]]) [x] Poly(x**2 + 1, x, domain='ZZ') 1/2 1/2\n"),
    ("init_printing and S", "import sympy\nsympy.init_printing(use_unicode=False)\n"
     "print(sympy.S.Half + sympy.S(1), sympy.S.Zero)", "3/2 0\n"),
]


def test_the_programs_a_model_writes_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []


def test_init_printing_leaves_the_displayhook():
    """``init_printing()`` sets ``sys.displayhook``; in a child it is put back (a program's
    ``str_printer`` would otherwise run as the interpreter's hook). Checked in this process with
    the routes applied, then undone."""
    import sympy
    from sympy.core.expr import Expr
    from sympy.core.singleton import Singleton
    from sympy.polys.domains.domain import Domain
    from sympy.polys.polyoptions import OptionType
    from sympy.printing.printer import Printer

    restricted = restricted_module("_sandbox_restricted_round12b")
    methods = {(owner, name): vars(owner)[name] for owner, name in (
        (Expr, "expand"), (Domain, "convert_from"), (OptionType, "__init__"), (Singleton, "__init__"))}
    sympy_modules = [m for m in list(sys.modules.values()) if str(getattr(m, "__name__", "")).startswith("sympy")
                     and isinstance(getattr(m, "__dict__", None), dict)]
    held = {(module, name): vars(module)[name] for module in sympy_modules
            for name in ("init_printing", "doctest_depends_on") if name in vars(module)}
    hook, settings = sys.displayhook, dict(Printer._global_settings)
    try:
        restricted._route_library_registries()
        restricted._PROGRAM_GLOBALS[0] = {}
        sympy.init_printing(str_printer=lambda e: "x", use_unicode=False)
        assert sys.displayhook is hook
    finally:
        restricted._PROGRAM_GLOBALS[0] = None
        sys.displayhook = hook
        Printer._global_settings.clear()
        Printer._global_settings.update(settings)
        for (owner, name), value in methods.items():
            setattr(owner, name, value)
        for (module, name), value in held.items():
            vars(module)[name] = value
