"""Probe round 11b: routes past RestrictedPython through the standard library and mpmath.

Each hostile program reaches code that reads attributes or evaluates strings without the
sandbox's guards (``string.Formatter.get_field`` through ``super()``, the original
``operator.attrgetter`` that sympy's modules keep, mpmath's ``identify``, ``functools
.singledispatch`` evaluating a string annotation, ``copy`` writing a reduced state into a module,
``sympy.var`` writing the program's hooks, the sandbox's own replacements of sympy's
``exec``/``compile`` called with a write hook in their locals). Its payload would raise ``ValueError`` naming the
child's process id (``int('pid1234')``), so an escape shows in the error; each must be a failed
sample with the sandbox's refusal instead. The worker must survive them all, and the programs a
model writes with these tools must keep their outputs.
"""

from __future__ import annotations

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: unrestricted Python that reaches ``os`` (a subclass walk) and raises with the child's pid
WALK = ('int("pid%d" % [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "_wrap_close"][0]'
        '.__init__.__globals__["getpid"]())')
PAYLOAD = 'int("pid%d" % __import__("os").getpid())'
#: unrestricted Python that evaluates :data:`PAYLOAD` through a sympy function's ``__globals__``
GLOBALS_EVAL = "sympify.__globals__['__builtins__']['eval'](" + repr(PAYLOAD) + ")"


# (case, program, the start of its error)
HOSTILE = [
    ("Formatter through super", "from string import Formatter\nclass F(Formatter):\n    pass\n"
     "g = super(F, F()).get_field\nprint(g('0.__class__.__mro__', [1], {})[0])",
     "ImportError: string.Formatter is string.Formatter"),
    ("Formatter through a star import", "from string import *\nclass F(Formatter):\n    pass\nprint(F)",
     "NameError: name 'Formatter' is not defined"),
    ("str.format through super", "class S(str):\n    pass\nprint(super(S, S('{0.__class__.__mro__}')).format(1))",
     "NotImplementedError: 'format' of a super() object is not available in the sandbox"),
    ("UserString.format", "from collections import UserString\nprint(UserString('{0.__class__.__mro__}').format(1))",
     "AttributeError: \"__class__\" is an invalid attribute name"),
    ("sympy's attrgetter", "import sympy.core.add as A\nprint(A.attrgetter('__class__.__mro__')(1))",
     "AttributeError: 'attrgetter' is a built-in the sandbox does not give"),
    ("sympy's attrgetter imported", "from sympy.core.operations import attrgetter\nprint(attrgetter('__class__')(1))",
     "ImportError: sympy.core.operations.attrgetter is a built-in the sandbox does not give"),
    ("mpmath identify of a string", "from sympy.polys.numberfields.utilities import mp\n"
     f"print(mp.identify(0.5, [{PAYLOAD!r}]))", 'SyntaxError: Line 1: "__import__" is an invalid variable name'),
    ("mpmath identify of a walk", "from sympy.polys.numberfields.subfield import MPContext\n"
     f"print(MPContext().identify(3, [{WALK!r}]))", 'SyntaxError: Line 1: "__globals__" is an invalid attribute name'),
    ("singledispatch of a string annotation", "import functools\n@functools.singledispatch\ndef f(x):\n    return 0\n"
     f"def g(x: {WALK!r}):\n    return 1\nf.register(g)\nprint(f(1))",
     'SyntaxError: Line 1: "__globals__" is an invalid attribute name'),
    ("singledispatch in another namespace", "from numbers import ABCMeta\nimport functools\n@functools.singledispatch\n"
     "def f(x):\n    return 0\n"
     f"G = ABCMeta('G', (), {{'__annotations__': {{'x': {PAYLOAD!r}}}, '__globals__': {{}}}})\nf.register(G())\nprint(1)",
     "TypeError: the sandbox evaluates an annotation written as a string only in the program's own namespace"),
    ("copy writes a module", "from numbers import ABCMeta\nfrom sympy.polys.agca.modules import copy\n"
     "import sympy.parsing.sympy_parser as P\n"
     f"def ev(code, l, g):\n    return g['eval']({PAYLOAD!r}, g)\n"
     "def red(self, proto):\n    return (lambda: P, (), {'eval_expr': ev})\n"
     "X = ABCMeta('X', (), {'__reduce_ex__': red})\ncopy(X())\nprint(P.parse_expr('1'))",
     "TypeError: the sandbox does not let a program change the attributes of the module 'sympy.parsing.sympy_parser'"),
    ("var writes a hook", "from numbers import ABCMeta\nimport sympy\nimport sympy.parsing.sympy_parser as P\n"
     "W = ABCMeta('W', (sympy.Symbol,), {'__call__': lambda self, obj: obj})\nsympy.var('_write_', cls=W)\n"
     f"def ev(code, l, g):\n    return g['eval']({PAYLOAD!r}, g)\nP.eval_expr = ev\nprint(P.parse_expr('1'))",
     "ValueError: var of the names ['_write_'] is not allowed in the sandbox"),
    ("call_highest_priority of __getattribute__", "from numbers import ABCMeta\n"
     "from sympy.core.decorators import call_highest_priority\nimport sympy\n"
     "S = ABCMeta('S', (str,), {'_op_priority': 0})\nw = call_highest_priority('__getattribute__')(lambda a, b: 0)\n"
     "print(w(S('__class__'), sympy.Symbol('x')))",
     "TypeError: class S: a subclass of a built-in value type"),
    ("update_wrapper onto sympy's function", "import functools\nfrom numbers import ABCMeta\nimport sympy\n"
     "X = ABCMeta('X', (), {'_op_priority': 100})\n"
     "functools.update_wrapper(sympy.Basic.subs, X, assigned=(), updated=('__dict__',))\nprint(1)",
     "TypeError: the sandbox does not let a program change the attributes of 'Basic.subs' of the module 'sympy.core.basic'"),
    ("requires of __dict__", "from sympy.printing.codeprinter import requires\nimport sympy.parsing.sympy_parser as P\n"
     f"def ev(code, l, g):\n    return g['eval']({PAYLOAD!r}, g)\n"
     "requires(**{'__dict__': {'eval_expr': ev}})(lambda s: 0)(P)\nprint(P.parse_expr('1'))",
     "ValueError: requires of the attribute '__dict__' is not allowed in the sandbox"),
    ("cached_property of __globals__", "from sympy.core.cache import cached_property\nimport sympy\n"
     "def globals__(self):\n    return 0\ng = cached_property(globals__).fget(sympy.solve)\n"
     f"print(g['__builtins__']['eval']({PAYLOAD!r}, g))",
     "TypeError: the sandbox does not let a program reach the attribute '__globals__' of 'solve'"),
    ("memoize_property of the evaluator's state", "from sympy.utilities.decorator import memoize_property\n"
     "import sympy.parsing.sympy_parser as P\ndef restricted(self):\n    return 0\n"
     "env = memoize_property(restricted).fget(P.eval_expr)\nprint(sorted(env))",
     "TypeError: the sandbox does not let a program reach the attribute '_restricted' of"),
    ("a printer's printmethod", "from numbers import ABCMeta\nimport sympy\nfrom sympy.printing.str import StrPrinter\n"
     "P = ABCMeta('P', (str, StrPrinter), {'printmethod': '__getattribute__', '_str': staticmethod(lambda v: v), "
     "'__init__': lambda self, *a: None, '_print_level': 0, '_context': {}, '_settings': {}})\n"
     f"g = P('__globals__').doprint(sympy.solve)\nprint(g['__builtins__']['eval']({PAYLOAD!r}, g))",
     "TypeError: class P: a subclass of a built-in value type"),
    ("a sympy printer's printmethod set", "import sympy\nfrom sympy.printing.str import StrPrinter\np = StrPrinter()\n"
     "p.printmethod = '__reduce_ex__'\nprint(p.doprint(sympy.Symbol('x')))",
     "TypeError: the sandbox does not let a printer reach the attribute '__reduce_ex__'"),
    ("a predicate's handler", "from numbers import ABCMeta\nfrom sympy.assumptions.assume import Predicate\n"
     "import sympy.parsing.sympy_parser as P\nS = ABCMeta('__setattr__', (str,), {})\n"
     f"def ev(code, l, g):\n    return g['eval']({PAYLOAD!r}, g)\n"
     "Predicate('p', handlers=[P]).eval([S('eval_expr')], ev)\nprint(P.parse_expr('1'))",
     "NotImplementedError: a Predicate with handlers (sympy's deprecated AskHandler system) is not available"),
    ("lazy_function of os", "from sympy.core.cache import lazy_function\nf = lazy_function('os', 'getpid')\n"
     "print(int('pid%d' % f()))", "ImportError: lazy_function('os', 'getpid') is not available in the sandbox"),
    ("numpy through sympy", "import sympy\na = sympy.matrix2numpy(sympy.Matrix([[1, 2]]))\na.tofile('/tmp/x')\nprint(a)",
     "ModuleNotFoundError: import of numpy halted; None in sys.modules"),
    ("matplotlib through mpmath", "from sympy.polys.numberfields.utilities import mp\n"
     "mp.plot(lambda x: x, [0, 1], points=5, file='p.png')\nprint(1)",
     "ModuleNotFoundError: import of pylab halted; None in sys.modules"),
    ("var of the built-ins", "import sympy\nsympy.var('x __builtins__')\nprint(len([1]))",
     "ValueError: var of the names ['__builtins__'] is not allowed in the sandbox"),    ("experimental_lambdify's exec with a write hook in its locals", "import sympy.plotting.experimental_lambdify as E\n"
     "E.exec('import sympy\\ndel sympy.parsing.ast_parser.compile\\ndel sympy.parsing.ast_parser.eval', {}, "
     "{'_write_': lambda o: o})\nfrom sympy.parsing.ast_parser import parse_expr\n"
     f"print(parse_expr({GLOBALS_EVAL!r}, {{}}))",
     "AttributeError: 'exec' is the sandbox's own code runner, which a program may not hold"),
    ("lambdify's exec and compile imported", "from sympy.utilities.lambdify import exec as ex, compile as co\n"
     f"c = co({PAYLOAD!r}, '<lambdifygenerated-9>', 'exec')\nex(c, {{}}, {{'_write_': lambda o: o}})\nprint(1)",
     "ImportError: sympy.utilities.lambdify.exec is the sandbox's own code runner, which a program may not hold"),
    ("lambdify's compile imported", "from sympy.utilities.lambdify import compile as co\n"
     f"exec_ = co({PAYLOAD!r}, 'f', 'exec')\nprint(1)",
     "ImportError: sympy.utilities.lambdify.compile is the sandbox's own code runner, which a program may not hold"),
    ("lambdify's eval imported", "from sympy.utilities.lambdify import eval as ev\n"
     f"print(ev({PAYLOAD!r}, {{}}, {{'_write_': lambda o: o}}))",
     "ImportError: sympy.utilities.lambdify.eval is the sandbox's own code runner, which a program may not hold"),
    ("PlotInterval's eval", "import sympy.plotting.pygletplot.plot_interval as I\n"
     f"print(I.eval({PAYLOAD!r}, {{}}, {{'_write_': lambda o: o}}))",
     "AttributeError: 'eval' is the sandbox's own code runner, which a program may not hold"),
    ("ast_parser's refused compile", "from sympy.parsing.ast_parser import compile as co\n"
     f"print(co({PAYLOAD!r}, 'f', 'exec'))",
     "ImportError: sympy.parsing.ast_parser.compile is the sandbox's own code runner, which a program may not hold"),
]


def test_every_route_past_the_guards_is_a_failed_sample_and_never_runs_its_payload(sandbox):
    assert hostile_failures(sandbox, HOSTILE, LIMITS, leaked=("base 10: 'pid",)) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


# (case, program, its output)
LEGITIMATE = [
    ("var", "import sympy\nsympy.var('a b')\nprint(sympy.expand((a + b)**2))", "a**2 + 2*a*b + b**2\n"),
    ("var of functions", "import sympy\nsympy.var('f g', cls=sympy.Function)\nx = sympy.Symbol('x')\nprint(f(x) + g(x))",
     "f(x) + g(x)\n"),
    ("copy", "import sympy\nfrom sympy.polys.agca.modules import copy\nx = sympy.Symbol('x')\nclass P:\n    pass\n"
     "p = P()\np.v = [x]\nq = copy(p)\nq.w = 1\nprint(q.v, copy([1, 2]), copy(x + 1), hasattr(p, 'w'))",
     "[x] [1, 2] x + 1 False\n"),
    ("singledispatch", "import functools\n@functools.singledispatch\ndef f(x):\n    return 'any'\n@f.register\n"
     "def g(x: int):\n    return 'int'\n@f.register(str)\ndef h(x):\n    return 'str'\nprint(f(1), f('a'), f(1.5))",
     "int str any\n"),
    ("evalf of a function named __setattr__", "from numbers import ABCMeta\nimport sympy\n"
     "from sympy.core.function import FunctionClass\n"
     "E = ABCMeta('E', (sympy.Symbol,), {'_to_mpmath': lambda self, prec: 'mpf'})\n"
     "F = FunctionClass('__setattr__', (sympy.Function,), {'nargs': 2})\ntry:\n    F(E('a'), E('b')).evalf()\n"
     "except TypeError as e:\n    print(e)\nprint(sympy.Float(1.5) + 1, sympy.gamma(2.5).evalf(5), sympy.besselj(1, 2.5).evalf(5))",
     "expected mpmath number (mpf or mpc)\n2.50000000000000 1.3293 0.49709\n"),
    ("cacheit and wraps", "import functools\nfrom sympy import cacheit\n@cacheit\ndef f(n):\n    return n * 2\n"
     "def deco(g):\n    @functools.wraps(g)\n    def inner(*a):\n        return g(*a) + 1\n    return inner\n"
     "@deco\ndef h(n):\n    return n\nprint(f(21), h(1))", "42 2\n"),
    ("cached properties", "from sympy.core.cache import cached_property\nfrom sympy.utilities.decorator import memoize_property\n"
     "import sympy\nclass A:\n    @cached_property\n    def area(self):\n        return 6\n    @memoize_property\n"
     "    def side(self):\n        return 2\na = A()\nM = sympy.Matrix([[1, 2], [3, 4]])\n"
     "print(a.area, a.area, a.side, M.is_symmetric(), sympy.ccode(sympy.sqrt(sympy.Symbol('x'))))",
     "6 6 2 False sqrt(x)\n"),
    ("printers", "import sympy\nfrom sympy.printing.str import StrPrinter\nx = sympy.Symbol('x')\n"
     "class P(StrPrinter):\n    def emptyPrinter(self, expr):\n        return 'obj'\n"
     "class T:\n    pass\nprint(P().doprint(x**2 + 1), sympy.sstr(sympy.sin), sympy.latex(sympy.Matrix([[x]])), "
     "sympy.pretty(x**2, use_unicode=False), P().doprint(T()), sympy.sstr(abs))",
     "x**2 + 1 sin \\left[\\begin{matrix}x\\end{matrix}\\right]  2\nx  obj <built-in function abs>\n"),
    ("UserString", "from collections import UserString\nu = UserString('{0:.2f} {x}')\nprint(u.format(2, x='a'), u.upper())",
     "2.00 a {0:.2F} {X}\n"),
    ("assumptions", "import sympy\nfrom sympy.assumptions.assume import Predicate\nx = sympy.Symbol('x', positive=True)\n"
     "print(sympy.ask(sympy.Q.positive(x)), sympy.ask(sympy.Q.integer(x)), sympy.ask(Predicate('p')(x)), "
     "sympy.refine(sympy.sqrt(x**2), sympy.Q.positive(x)))", "True None None x\n"),
    ("identify", "from sympy.polys.numberfields.utilities import mp\nprint(mp.identify(0.75), mp.identify(mp.pi * 2, ['pi']))",
     "(3/4) (2*pi)\n"),
    ("str.format and the attrgetter of operator", "import operator\nclass P:\n    pass\np = P()\np.x = 2\n"
     "print('{0.x:03d} {1}'.format(p, operator.attrgetter('x')(p)))", "002 2\n"),    ("lambdify and experimental_lambdify", "import sympy\nfrom sympy.plotting.experimental_lambdify import "
     "experimental_lambdify\nx, y = sympy.symbols('x y')\nf = sympy.lambdify([x, y], [sympy.sqrt(x) + y, 2 * x], 'mpmath')\n"
     "g = sympy.lambdify(x, sympy.sin(x) + x**2)\nprint(f(4, 1), g(0.0), experimental_lambdify([x], x**2 + 1)(3))",
     "[mpf('3.0'), 8] 0.0 10\n"),
]


def test_the_programs_a_model_writes_with_these_tools_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []
