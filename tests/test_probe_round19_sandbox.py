"""Probe round 19: programs of any size, ``Enum`` classes with a value type, and a fresh round of
hostile programs.

- A program of several megabytes ran past its wall-time limit: the worker's clock starts at the
  fork, and sending, parsing and compiling 7 MB took seconds more (a 4 s limit gave a run of 7 to
  29 s). A program over :data:`~agora.models.recipes.sandbox.MAX_PROGRAM_BYTES` is now refused
  before it is sent, in one line naming its size and the cap; a program under the cap keeps its
  wall-time limit (a generous margin: the machine is busy).
- ``from enum import Enum`` and ``class E(str, Enum): A = 'a'`` (what models write) were refused:
  ``enum`` was no allowed module, and a class deriving from ``str`` with anything in its body was
  refused whatever its metaclass. ``enum`` is now among the default imports (its ``global_enum``,
  which writes members into any module, and ``pickle_by_enum_name``, which hands out ``getattr``,
  are not), and an ``Enum`` class with a value type may have members of plain values and methods
  whose names are no attribute of its bases; the rest of the rule stays.
- An *instance* of a subclass of a built-in value type took attributes: ``s = S('__class__');
  s.startswith = f`` made ``s.startswith('_')`` the program's answer (so did ``d.keys`` of a
  ``dict`` subclass, an enum member's ``split``, and a slot made by ``numbers.ABCMeta('D', (dict,),
  {'__slots__': ('keys',)})``), which is what the rule on such classes keeps out. Such an instance's
  attributes are now as a library class's: not writable, but for the fields a library's class
  declares (``defaultdict.default_factory``); its items stay writable. A subclass of a C type
  (``class D(collections.defaultdict): pass``) is no longer refused for the C type's own attributes.
- Refused or limited, as before, with the worker healthy: format-string attribute walks (``str.format``
  read from the class, through ``map``, ``partial``, ``methodcaller``, nested specs), class tricks
  (``__init_subclass__``, ``__class_getitem__``, ``__set_name__``, descriptors, ``__mro_entries__``,
  metaclass keywords, generic aliases), frames of generators, coroutines and tracebacks, modules
  reached through library objects (``fractions.sys``, ``re.copyreg``, numpy through ``lambdify``,
  mpmath's context), pickling hooks, codecs, signals, threads and ``time``; huge ints, strings,
  allocations, recursion, backtracking regular expressions and deep sympy expressions end in a limit.
"""

from __future__ import annotations

import subprocess
import sys

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, resource_failures

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: resource probes: a second of CPU, a short wall limit
TIGHT = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=128, output_bytes=4096)


def plain_python(program: str) -> str:
    """What ``program`` prints under plain Python (this interpreter, no sandbox)."""
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_huge_program_is_refused_before_it_runs_in_one_line(sandbox):
    from agora.models.recipes.sandbox import MAX_PROGRAM_BYTES

    program = "x = 1\n" * (7 * 2**20 // 6) + "print(x)"
    run = sandbox.run(program, TIGHT)
    assert run.status == "error" and run.output == ""
    assert run.error == (f"ProgramTooLarge: the program is {len(program.encode())} bytes, more than the sandbox "
                         f"runs ({MAX_PROGRAM_BYTES} bytes); nothing was run")
    assert "\n" not in run.error
    assert run.seconds < 1.0  # refused before it is sent: no worker time
    # a program of multibyte characters is counted in bytes
    wide = "# " + "é" * (MAX_PROGRAM_BYTES // 2) + "\nprint(1)"
    assert sandbox.run(wide, TIGHT).error.startswith(f"ProgramTooLarge: the program is {len(wide.encode())} bytes")


def test_a_large_program_under_the_cap_keeps_its_wall_time_limit(sandbox):
    from agora.models.recipes.sandbox import MAX_PROGRAM_BYTES

    # (memory for compiling 170,000 statements: at 256 MB the program ends in a MemoryError, also a limit)
    limits = SandboxLimits(cpu_s=30, wall_s=3, memory_mb=2048, output_bytes=4096)
    assert sandbox.run("print(1)", limits).output == "1\n"  # the worker started: its start is not timed
    endless = "x = 1\n" * ((MAX_PROGRAM_BYTES - 200) // 6) + "while True:\n    x += 1\n"
    assert len(endless.encode()) <= MAX_PROGRAM_BYTES
    run = sandbox.run(endless, limits)
    assert run.status == "timeout" and run.error.startswith("TimeoutError: the program ran past its wall-time limit")
    assert run.seconds < limits.wall_s + 6  # generous: a busy 2-core machine
    # just under the cap, a program that does little still runs
    small = "# " + "a" * (MAX_PROGRAM_BYTES - 100) + "\nprint(6 * 7)"
    run = sandbox.run(small, SandboxLimits(cpu_s=10, wall_s=30, memory_mb=256, output_bytes=4096))
    assert (run.status, run.output) == ("ok", "42\n")


# (case, program): enum classes as models write them, each giving plain Python's output
ENUMS = [
    ("str enum", "from enum import Enum\nclass Color(str, Enum):\n    RED = 'red'\n    GREEN = 'green'\n"
     "print(Color.RED.value, Color('green').name, Color.RED == 'red', [c.value for c in Color])"),
    ("str enum with a method", "from enum import Enum\nclass Op(str, Enum):\n    ADD = '+'\n    SUB = '-'\n"
     "    def apply(self, a, b):\n        return a + b if self is Op.ADD else a - b\n"
     "print(Op.ADD.apply(3, 4), Op('-').apply(3, 4), len(Op), list(Op))"),
    ("int enum", "from enum import IntEnum\nclass Level(IntEnum):\n    LOW = 1\n    HIGH = 3\n"
     "print(Level.LOW + Level.HIGH, Level(3).name, max(Level).name, sorted([Level.HIGH, Level.LOW]))"),
    ("int mixin with auto", "import enum\nclass N(int, enum.Enum):\n    A = enum.auto()\n    B = enum.auto()\n"
     "print(N.A.value, N.B.value, N.B * 10, N(2))"),
    ("str enum with a property", "from enum import Enum\nclass Suit(str, Enum):\n    HEARTS = 'h'\n    SPADES = 's'\n"
     "    @property\n    def red(self):\n        return self.value == 'h'\n"
     "print(Suit.HEARTS.red, Suit.SPADES.red, Suit['SPADES'].value)"),
    ("plain enum", "from enum import Enum, auto\nclass D(Enum):\n    N = auto()\n    S = auto()\n"
     "    def opposite(self):\n        return D.S if self is D.N else D.N\nprint(D.N.opposite(), D.N.value, repr(D.S))"),
    ("flag", "from enum import Flag, auto\nclass P(Flag):\n    R = auto()\n    W = auto()\n    X = auto()\n"
     "rw = P.R | P.W\nprint(P.R in rw, P.X in rw, rw.value)"),
    ("str enum functional", "from enum import Enum\nE = Enum('E', {'A': 'a', 'B': 'b'}, type=str)\n"
     "print(E.A.value, E('b').name, E.A == 'a')"),
    ("unique", "from enum import Enum, unique\n@unique\nclass U(Enum):\n    A = 1\n    B = 2\nprint([u.name for u in U])"),
    ("sympy's Enum with a str mixin", "from sympy.combinatorics.galois import Enum\nclass E(str, Enum):\n    A = 'x'\nprint(E.A, E.A.upper())"),
    ("str enum of tuples and auto", "from enum import Enum, auto\nclass E(str, Enum):\n    A = auto()\n    B = ('b',)\nprint(E.A.value, E.B.value, E.B == 'b')"),
    ("str enum with a static and a class method", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\n"
     "    @staticmethod\n    def parse(s):\n        return E(s.lower())\n    @classmethod\n    def names(cls):\n        return [m.name for m in cls]\n"
     "print(E.parse('A'), E.names())"),
]


def test_enum_classes_with_a_value_type_give_plain_pythons_output(sandbox):
    cases = [(case, program, plain_python(program)) for case, program in ENUMS]
    assert output_failures(sandbox, cases, LIMITS) == []


# (case, program, the start of its error): what stays refused of enum
ENUM_REFUSED = [
    ("global_enum writes into a module", "import enum\nclass E(enum.Enum):\n    json = 1\nenum.global_enum(E)\nprint(1)",
     "AttributeError: 'global_enum' belongs to the module 'enum', which is not allowed"),
    ("from enum import global_enum", "from enum import global_enum\nprint(global_enum)",
     "ImportError: enum.global_enum belongs to the module 'enum', which is not allowed"),
    ("pickle_by_enum_name hands out getattr", "import enum\nclass E(enum.Enum):\n    A = 1\n"
     "g = enum.pickle_by_enum_name(E.A, 2)[0]\nprint(g(1, '__class__'))",
     "AttributeError: 'pickle_by_enum_name' belongs to the module 'enum', which is not allowed"),
    ("enum's sys", "import enum\nprint(enum.sys.modules)", "AttributeError: 'sys' is the module 'sys'"),
    ("enum's builtins", "import enum\nprint(enum.bltns.eval)", "AttributeError: 'bltns' is the module 'builtins'"),
    ("str enum shadowing startswith", "from enum import Enum\nclass E(str, Enum):\n    A = '__class__'\n"
     "    def startswith(self, x):\n        return False\nprint(E.A.startswith('_'))",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum shadowing split", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\n    split = 'b'\nprint(1)",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum shadowing value", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\n"
     "    @property\n    def value(self):\n        return '__class__'\nprint(E.A.value)",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum with its own __eq__", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\n"
     "    def __eq__(self, other):\n        return True\n    def __hash__(self):\n        return 1\nprint(E.A == 'z')",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum with __str__", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\n"
     "    def __str__(self):\n        return '__class__'\nprint(E.A)",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("functional str enum with a lambda", "from enum import Enum\nE = Enum('E', {'A': 'x', 'startswith': lambda s, p: False}, type=str)\nprint(E.A.startswith('x'))",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("functional str enum with a code name", "from enum import Enum\nE = Enum('E', {'A); import os; (': 'x'}, type=str)\nprint(str(list(E)[0]))",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("functional str enum with a code class name", "from enum import Enum\nE = Enum('__import__(\"os\")', {'A': 'x'}, type=str)\nprint(str(E.A))",
     "TypeError: class __import__(\"os\"): a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum of a program's object", "from enum import Enum\nclass V:\n    def __str__(self):\n        return '__class__'\n"
     "class E(str, Enum):\n    A = V()\nprint(E.A)",
     "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("str enum member written over", "from enum import Enum\nclass E(str, Enum):\n    A = 'a'\nE.startswith = lambda s, p: False\nprint(1)",
     "TypeError: the sandbox does not let a program change the attribute 'startswith' of 'E'"),
    ("enum subclass of a program's str enum", "from enum import Enum\nclass E(str, Enum):\n    def helper(self):\n        return 1\n"
     "class F(E):\n    A = 'a'\n    def split(self):\n        return 1\nprint(F.A)",
     "TypeError: class F: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
]


def test_what_stays_refused_of_enum(sandbox):
    assert hostile_failures(sandbox, ENUM_REFUSED, LIMITS) == []


# (case, program, the start of its error): hostile programs of kinds earlier rounds did not try
FORMAT_WALKS = [
    ('str.format read from the class', "f = str.format\nprint(f('{0.__class__.__mro__}', 1))",
     'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('str.format_map read from the class', "print(str.format_map('{a.__class__}', {'a': 1}))",
     'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('str.format through map', "print(list(map(str.format, ['{0.__class__}'], [1])))",
     'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('str.format through partial', "import functools\nprint(functools.partial(str.format, '{0.__class__}')(1))",
     'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('str.format through methodcaller', "import operator\nprint(operator.methodcaller('format', 1)('{0.__class__}'))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
    ('str.format nested spec field', "print('{0:{1.__class__}}'.format(1, 2))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
    ('str.format index then attribute', "print('{0[0].__class__}'.format([1]))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
    ("str.format of a sympy object's globals", "import sympy\nprint('{0.func.__globals__}'.format(sympy.Symbol('x')))",
     'AttributeError: "__globals__" is an invalid attribute name because it start'),
    ('format_map with a dict subclass missing', "class D(dict):\n    def __missing__(self, k):\n        return k\nprint('{x.__class__}'.format_map(D()))",
     'TypeError: class D: a subclass of a built-in value type (str, int, tuple, d'),
    ('str.format of a bound method read by getattr', "g = getattr('{0.__class__}', 'format')\nprint(g(1))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
    ('sympy printer format of a str', "import sympy\nprint(sympy.sstr('{0.__class__}').format(1))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
    ('decimal format spec', "import decimal\nprint(format(decimal.Decimal(1), '{0.__class__}'))",
     'ValueError: invalid format string'),
    ('datetime strftime field', "import datetime\nprint(datetime.date(2020, 1, 1).strftime('{0.__class__}').format(1))",
     'AttributeError: "__class__" is an invalid attribute name because it starts '),
]

CLASS_TRICKS = [
    ('__init_subclass__ defined', 'class A:\n    def __init_subclass__(cls, **kw):\n        print(cls)\nclass B(A):\n    pass',
     'SyntaxError: Line 2: "__init_subclass__" is an invalid variable name becaus'),
    ('__class_getitem__ defined', 'class A:\n    def __class_getitem__(cls, item):\n        return item\nprint(A[1])',
     'SyntaxError: Line 2: "__class_getitem__" is an invalid variable name becaus'),
    ('__set_name__ defined', 'class D:\n    def __set_name__(self, owner, name):\n        print(name)\nclass A:\n    x = D()',
     'SyntaxError: Line 2: "__set_name__" is an invalid variable name because it '),
    ('descriptor __get__', 'class D:\n    def __get__(self, obj, owner):\n        return 1\nclass A:\n    x = D()\nprint(A().x)',
     'SyntaxError: Line 2: "__get__" is an invalid variable name because it start'),
    ('metaclass keyword', 'import abc\nclass A(metaclass=abc.ABCMeta):\n    pass\nprint(A)',
     'SyntaxError: Line 2: The keyword argument "metaclass" is not allowed.'),
    ('metaclass from type(x) of a class', 'import numbers\nM = type(numbers.Number)\nclass X(M):\n    pass\nprint(X)',
     'TypeError: class X: a class deriving from type (a metaclass) is not allowed'),
    ("metaclass keyword of a sympy class's metaclass", "import sympy\nM = type(sympy.Function('f'))\nclass F(sympy.Basic, metaclass=M):\n    pass\nprint(F)",
     'SyntaxError: Line 3: The keyword argument "metaclass" is not allowed.'),
    ('mro entries', 'class A:\n    def __mro_entries__(self, bases):\n        return (int,)\nclass B(A()):\n    pass',
     'SyntaxError: Line 2: "__mro_entries__" is an invalid variable name because '),
    ('classmethod over property', 'class A:\n    @classmethod\n    @property\n    def x(cls):\n        return cls.__name__\nprint(A.x)',
     'SyntaxError: Line 5: "__name__" is an invalid attribute name because it sta'),
    ('property of a builtin reading a class', 'class A:\n    x = property(str.format)\nprint(A().x)',
     'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('generic alias of a program class origin', 'print(list[int].__origin__)',
     'SyntaxError: Line 1: "__origin__" is an invalid attribute name because it s'),
    ('generic alias call makes type', 'G = type(list[int])\nprint(G(type, int))',
     "TypeError: the class of that object belongs to the module 'types', which is"),
    ('singledispatchmethod register of a string', "import functools\nclass A:\n    @functools.singledispatchmethod\n    def f(self, x):\n        return 0\n    @f.register\n    def _(self, x: '().__class__.__base__.__subclasses__()'):\n        return 1\nprint(A().f(1))",
     'SyntaxError: Line 1: "__subclasses__" is an invalid attribute name because '),
    ('typing NamedTuple with a code annotation', 'from sympy.utilities.matchpy_connector import NamedTuple\nclass P(NamedTuple):\n    x: \'__import__("os").system("echo ESCAPED")\'\nprint(P(1))',
     'SyntaxError: Line 3: AnnAssign statements are not allowed.'),
    ('abc register of str under Number', "import numbers\nnumbers.Number.register(str)\nprint(isinstance('x', numbers.Number))",
     "TypeError: register of 'Number' of the module 'numbers' is not allowed in t"),
    ('super of type', 'class A:\n    pass\nprint(super(type, A).mro())',
     'TypeError: super() argument 1 must be a type, not _ProgramType'),
]

FRAMES = [
    ('generator frame', 'def g():\n    yield 1\nx = g()\nnext(x)\nprint(x.gi_frame.f_back)',
     'SyntaxError: Line 5: "f_back" is a restricted name, that is forbidden to ac'),
    ('generator frame by getattr', "def g():\n    yield 1\nx = g()\nnext(x)\nprint(getattr(x, 'gi_' + 'frame'))",
     'AttributeError: "gi_frame" is a restricted name, that is forbidden to acces'),
    ('generator frame by attrgetter', "import operator\ndef g():\n    yield 1\nx = g()\nprint(operator.attrgetter('gi_frame.f_globals')(x))",
     'AttributeError: "gi_frame" is a restricted name, that is forbidden to acces'),
    ('generator frame by format', "def g():\n    yield 1\nx = g()\nprint('{0.gi_frame.f_back}'.format(x))",
     'AttributeError: "gi_frame" is a restricted name, that is forbidden to acces'),
    ('generator code', 'def g():\n    yield 1\nprint(g().gi_code.co_code)',
     'SyntaxError: Line 3: "co_code" is a restricted name, that is forbidden to a'),
    ('coroutine frame', 'async def c():\n    return 1\nprint(c().cr_frame)',
     'SyntaxError: Line 1: AsyncFunctionDef statements are not allowed.; Line 3: '),
    ('async generator frame', 'async def a():\n    yield 1\nprint(a().ag_frame)',
     'SyntaxError: Line 1: AsyncFunctionDef statements are not allowed.; Line 3: '),
    ('generator yieldfrom chain', "def g():\n    yield 1\ndef h():\n    yield from g()\nx = h()\nnext(x)\nprint(getattr(x.gi_yieldfrom, 'gi_frame'))",
     'SyntaxError: Line 7: "gi_yieldfrom" is a restricted name, that is forbidden'),
    ('traceback frame', 'try:\n    1 / 0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame)',
     'SyntaxError: Line 4: "tb_frame" is a restricted name, that is forbidden to '),
    ('traceback by getattr', "try:\n    1 / 0\nexcept Exception as e:\n    t = getattr(e, '__trace' + 'back__')\n    print(t)",
     'AttributeError: "__traceback__" is an invalid attribute name because it sta'),
    ('traceback by with_traceback', "try:\n    1 / 0\nexcept Exception as e:\n    print(getattr(e.with_traceback(None), 'tb_frame', 'no'))",
     'AttributeError: "tb_frame" is a restricted name, that is forbidden to acces'),
    ('traceback by format', "try:\n    1 / 0\nexcept Exception as e:\n    print('{0.__traceback__.tb_frame.f_globals}'.format(e))",
     'AttributeError: "__traceback__" is an invalid attribute name because it sta'),
    ('frame of a sympy deprecation warning', "import sympy\nfrom sympy.utilities.exceptions import SymPyDeprecationWarning\nw = SymPyDeprecationWarning('m', deprecated_since_version='1.0', active_deprecations_target='x')\nprint(getattr(w, 'tb_frame', None) or w.with_traceback)",
     'AttributeError: "tb_frame" is a restricted name, that is forbidden to acces'),
    ('stop iteration value frame', "def g():\n    return (yield)\nx = g()\nnext(x)\ntry:\n    x.send(1)\nexcept StopIteration as e:\n    print(getattr(e.value, 'f_globals', 'ok'))",
     'AttributeError: "f_globals" is a restricted name, that is forbidden to acce'),
]

LIBRARY_REACH = [
    ("fractions' sys", 'import fractions\nprint(fractions.sys.modules)',
     "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ("decimal context's module", 'import decimal\nc = decimal.getcontext()\nprint(type(c).__module__)',
     'SyntaxError: Line 3: "__module__" is an invalid attribute name because it s'),
    ("decimal's sys through a context", 'import decimal\nprint(decimal.getcontext().sys)',
     "AttributeError: 'decimal.Context' object has no attribute 'sys'"),
    ("statistics' sys", "import statistics\nprint(statistics.sys.modules['os'])",
     "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ("random's os", 'import random\nprint(random.os)',
     "AttributeError: module 'random' has no attribute 'os'"),
    ("re's copyreg", 'import re\nprint(re.copyreg.dispatch_table)',
     "AttributeError: 'copyreg' is the module 'copyreg', which is not allowed"),
    ("re's functools then sys", 'import re\nprint(re.functools.sys)',
     "AttributeError: module 'functools' has no attribute 'sys'"),
    ("sympy's numpy through lambdify", "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x, modules='numpy')\nprint(f(1))",
     "ImportError: Cannot import 'numpy' with 'import numpy; from numpy import *;"),
    ("sympy's copy module", 'import sympy.core.basic as b\nprint(b.copy)',
     "AttributeError: module 'sympy.core.basic' has no attribute 'copy'"),
    ("mpmath context's timing", 'import sympy.core.evalf as e\nprint(e.mp.timing(print))',
     "AttributeError: 'MPContext' object has no attribute 'timing'"),
    ('mpmath libmp backend os', 'import sympy.core.evalf as e\nprint(e.mpmath.libmp.backend.os)',
     "AttributeError: module 'sympy.core.evalf' has no attribute 'mpmath'"),
    ("collections' sys", 'import collections\nprint(collections.sys)',
     "AttributeError: module 'collections' has no attribute 'sys'"),
    ("heapq's C module", 'import heapq\nprint(heapq._heapq)',
     'SyntaxError: Line 2: "_heapq" is an invalid attribute name because it start'),
    ("datetime's sys", 'import datetime\nprint(datetime.sys)',
     "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ("enum's global_str then sys", 'import enum\nprint(enum.global_str.__globals__)',
     'SyntaxError: Line 2: "__globals__" is an invalid attribute name because it '),
    ("sympy decorator's threading", 'import sympy.utilities.decorator as d\nprint(d.threading)',
     "AttributeError: module 'sympy.utilities.decorator' has no attribute 'thread"),
    ('functools cache wrapped', 'import functools\n@functools.cache\ndef f(x):\n    return x\nprint(f.__wrapped__)',
     'SyntaxError: Line 5: "__wrapped__" is an invalid attribute name because it '),
]

PICKLING = [
    ('copyreg reconstructor', 'import sympy.core.basic as b\nprint(b.copyreg)',
     "AttributeError: module 'sympy.core.basic' has no attribute 'copyreg'"),
    ('reduce_ex of an int', 'print((1).__reduce_ex__(2))',
     'SyntaxError: Line 1: "__reduce_ex__" is an invalid attribute name because i'),
    ('reduce_ex by getattr', "print(getattr(1, '__reduce_' + 'ex__')(2))",
     'AttributeError: "__reduce_ex__" is an invalid attribute name because it sta'),
    ('reduce_ex by methodcaller', "import operator\nprint(operator.methodcaller('__reduce_ex__', 2)(1))",
     "AttributeError: '__reduce_ex__' is an invalid attribute name because it sta"),
    ("copy module's reconstruct through sympy", 'from sympy.core.basic import copy\nprint(copy)',
     "ImportError: cannot import name 'copy' from 'sympy.core.basic' ("),
    ('decimal reduce', 'import decimal\nprint(decimal.Decimal(1).__reduce__())',
     'SyntaxError: Line 2: "__reduce__" is an invalid attribute name because it s'),
    ('enum member global_enum via unique', 'import enum\n@enum.global_enum\nclass E(enum.Enum):\n    json = 1\nprint(1)',
     "AttributeError: 'global_enum' belongs to the module 'enum', which is not al"),
]

CODECS = [
    ('encode with a codec module name', "print('x'.encode('os'))",
     'LookupError: unknown encoding: os'),
    ('encode with a dotted codec', "print('x'.encode('..os'))",
     'LookupError: unknown encoding: ..os'),
    ('bytes decode with zlib codec', "print(b'x'.decode('zlib_codec'))",
     "LookupError: 'zlib_codec' is not a text encoding; use codecs.decode() to ha"),
    ('rot13 of a string', "print('abc'.encode('rot13'))",
     "LookupError: 'rot13' is not a text encoding; use codecs.encode() to handle "),
]

SIGNALS_THREADS = [
    ('signal import', 'import signal\nsignal.alarm(0)\nprint(1)',
     "ImportError: import of 'signal' is not allowed (allowed: bisect, cmath, col"),
    ('signal through a sympy module', 'import sympy.utilities.decorator as d\nprint(d.signal)',
     "AttributeError: module 'sympy.utilities.decorator' has no attribute 'signal"),
    ('threading import', 'import threading\nthreading.Thread(target=print, args=(1,)).start()',
     "ImportError: import of 'threading' is not allowed (allowed: bisect, cmath, "),
    ('thread module through functools', 'import functools\nprint(functools.RLock)',
     "AttributeError: 'RLock' belongs to the module '_thread', which is not allow"),
    ('thread lock of functools', 'import functools\nprint(functools.RLock())',
     "AttributeError: 'RLock' belongs to the module '_thread', which is not allow"),
    ('time module', 'import time\ntime.sleep(100)',
     "ImportError: import of 'time' is not allowed (allowed: bisect, cmath, colle"),
    ("datetime's time for sleep", 'import datetime\nprint(datetime.time.sleep)',
     "AttributeError: type object 'datetime.time' has no attribute 'sleep'"),
    ('sympy cache thread local', 'import sympy.core.cache as c\nprint(c.threading)',
     "AttributeError: module 'sympy.core.cache' has no attribute 'threading'"),
    ('queue import', 'import queue\nprint(queue.Queue())',
     "ImportError: import of 'queue' is not allowed (allowed: bisect, cmath, coll"),
    ('contextvars through decimal', 'import decimal\nprint(decimal.contextvars)',
     "AttributeError: module 'decimal' has no attribute 'contextvars'"),
    ('os.kill through random', 'import random\nprint(random._os.kill)',
     'SyntaxError: Line 2: "_os" is an invalid attribute name because it starts w'),
]

HOSTILE = FORMAT_WALKS + CLASS_TRICKS + FRAMES + LIBRARY_REACH + PICKLING + CODECS + SIGNALS_THREADS


def test_hostile_programs_of_new_kinds_are_refused(sandbox):
    assert len(HOSTILE) >= 60
    assert hostile_failures(sandbox, HOSTILE, LIMITS, leaked=("ESCAPED",)) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"


#: resource probes' outcomes: a limit (CPU or wall time, memory, recursion, digits) or a refusal
LIMITED = ("TimeoutError: the program ", "MemoryError", "Killed: ", "RecursionError", "OutputLimit: ",
           "ValueError: Exceeds the limit", "SyntaxError: Line 1: SyntaxError: too many nested parentheses")

# (case, program): programs that exhaust a resource
RESOURCES = [
    ('huge power', 'print(len(str(10 ** 10 ** 8)))'),
    ('huge int to str', 'x = 7 ** 100000\nprint(str(x))'),
    ('huge string repeat', "s = 'a' * 10 ** 10\nprint(len(s))"),
    ('huge bytearray', 'b = bytearray(10 ** 10)\nprint(len(b))'),
    ('huge list', 'x = [0] * 10 ** 10\nprint(len(x))'),
    ('deep recursion', 'def f(n):\n    return f(n + 1)\nprint(f(0))'),
    ("deep recursion through a class's repr", 'class A:\n    def __repr__(self):\n        return repr(self)\nprint(A())'),
    ('deep nesting of lists', 'x = []\nfor i in range(10 ** 6):\n    x = [x]\nprint(str(x)[:10])'),
    ('factorial CPU', 'import math\nprint(math.factorial(10 ** 7) % 7)'),
    ('decimal max precision', 'import decimal\nc = decimal.Context(prec=decimal.MAX_PREC)\nprint(str(c.sqrt(decimal.Decimal(2)))[:5])'),
    ('regex catastrophic backtracking', "import re\nprint(re.match('(a+)+$', 'a' * 40 + 'b'))"),
    ('itertools product list', 'import itertools\nprint(len(list(itertools.product(range(10), repeat=12))))'),
    ('dict of huge keys', "d = {}\ni = 0\nwhile True:\n    d[i] = 'x' * 1000\n    i += 1"),
    ('pow with a huge modulus chain', 'x = 3\nfor i in range(40):\n    x = x * x\nprint(x % 7)'),
    ('deep parenthesis program', 'print(' + '(' * 5000 + '1' + ')' * 5000 + ')'),
    ('deep sympy expression', "import sympy\nx = sympy.Symbol('x')\ne = x\nfor i in range(100000):\n    e = sympy.Add(e, x, evaluate=False) if i % 2 else sympy.Mul(e, x, evaluate=False)\nprint(sympy.srepr(e)[:10])"),
    ('generator of generators', 'def g(n):\n    if n:\n        yield from g(n - 1)\n    yield n\nprint(sum(g(100000)))'),
    ('sorted with a slow key', 'print(sorted(range(10 ** 7), key=lambda v: -v)[0])'),
]
RESOURCES.append(("punycode of a huge string", "print(len(('\\u00e9' * 10**7).encode('punycode')))"))


def test_resource_probes_end_in_a_limit_and_spare_the_worker(sandbox):
    # the wall limit, and the fork, kill and reply around it on loaded cores: generous
    assert resource_failures(sandbox, [(case, program, LIMITED) for case, program in RESOURCES], TIGHT, 12) == []


# (case, program): what models write, each giving plain Python's output
LEGITIMATE = [
    ('format of numbers', "x = 3.14159\nprint('{:.2f} {:>6} {:,}'.format(x, 'ab', 1234567), f'{x:.3e}', format(255, '#x'))"),
    ('format_map', "print('{a} + {b} = {c}'.format_map({'a': 1, 'b': 2, 'c': 3}))"),
    ('percent formatting', "print('%5.2f|%-4d|%s' % (2.5, 7, [1]))"),
    ('template', "import string\nprint(string.Template('$who likes $what').substitute(who='tim', what='pie'))"),
    ('generator pipeline', 'def evens(n):\n    for i in range(n):\n        if i % 2 == 0:\n            yield i\nprint(sum(x * x for x in evens(20)), list(evens(7)))'),
    ('generator send', 'def acc():\n    total = 0\n    while True:\n        v = yield total\n        total += v\ng = acc()\nnext(g)\nprint(g.send(3), g.send(4))'),
    ('exceptions and finally', "def f(x):\n    try:\n        return 10 // x\n    except ZeroDivisionError as e:\n        return str(e)\n    finally:\n        print('done', x)\nprint(f(2), f(0))"),
    ('custom exception', "class Bad(ValueError):\n    pass\ntry:\n    raise Bad('no')\nexcept ValueError as e:\n    print(isinstance(e, Bad), e.args)"),
    ('property and classmethod', 'class C:\n    def __init__(self, r):\n        self.r = r\n    @property\n    def area(self):\n        return round(3.14159 * self.r ** 2, 2)\n    @classmethod\n    def unit(cls):\n        return cls(1)\nprint(C(2).area, C.unit().area)'),
    ('namedtuple', "from collections import namedtuple\nP = namedtuple('P', 'x y')\np = P(1, 2)\nprint(p, p.x + p.y, P(*reversed(p)))"),
    ('decimal context', "import decimal\nwith decimal.localcontext() as c:\n    c.prec = 5\n    print(decimal.Decimal(1) / 7)\nprint(decimal.Decimal('1.10') + decimal.Decimal('2.205'))"),
    ('fractions', "from fractions import Fraction\nprint(Fraction(3, 4) + Fraction(1, 6), Fraction('0.125'), Fraction(7, 3).limit_denominator(2))"),
    ('big ints', 'print(2 ** 200 % 1000007, len(str(3 ** 1000)), (10 ** 30) // 7)'),
    ('recursion memoized', 'import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint(fib(200))'),
    ('sorting with keys', "people = [('ann', 31), ('bob', 25), ('cy', 31)]\nprint(sorted(people, key=lambda p: (-p[1], p[0])))"),
    ('itertools', "import itertools\nprint(list(itertools.combinations('abc', 2)), list(itertools.accumulate([1, 2, 3, 4])), len(list(itertools.permutations(range(5)))))"),
    ('counter and defaultdict', "from collections import Counter, defaultdict\nc = Counter('mississippi')\nd = defaultdict(list)\nfor w in ['a', 'bb', 'cc']:\n    d[len(w)].append(w)\nprint(c.most_common(2), dict(d))"),
    ('sympy solve and format', "import sympy\nx = sympy.Symbol('x')\nr = sympy.solve(x ** 2 - 5 * x + 6, x)\nprint('roots: {}'.format(r), sympy.factorint(360))"),
    ('statistics', 'import statistics\nprint(statistics.mean([1, 2, 3, 4]), statistics.median([3, 1, 2]), round(statistics.stdev([2, 4, 4, 4, 5, 5, 7, 9]), 4))'),
    ('datetime arithmetic', "import datetime\nd = datetime.date(2024, 2, 28) + datetime.timedelta(days=2)\nprint(d, d.strftime('%A'), (datetime.date(2025, 1, 1) - datetime.date(2024, 1, 1)).days)"),
    ('heapq and bisect', 'import heapq, bisect\nh = [5, 1, 8, 3]\nheapq.heapify(h)\nprint(heapq.nsmallest(2, h), bisect.bisect_left([1, 3, 5, 7], 4))'),
    ('regex', "import re\nprint(re.findall(r'\\d+', 'a1b22c333'), re.sub(r'(\\w)(\\d)', r'\\2\\1', 'a1 b2'))"),
    ('nonlocal closure counter', 'def counter():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    return inc\nc = counter()\nc()\nprint(c(), c())'),
    ('class with dunder methods', "class V:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n    def __add__(self, o):\n        return V(self.x + o.x, self.y + o.y)\n    def __repr__(self):\n        return f'V({self.x}, {self.y})'\n    def __eq__(self, o):\n        return (self.x, self.y) == (o.x, o.y)\nprint(V(1, 2) + V(3, 4), V(1, 1) == V(1, 1))"),
    ('template with an odd idpattern', "import string\nclass T(string.Template):\n    idpattern = '[a-z]+_?'\nprint(T('$ab_ and $c').substitute({'ab_': 1, 'c': 2}))"),
    ('generator throw', "def g():\n    try:\n        yield 1\n    except Exception as e:\n        yield e\nx = g()\nnext(x)\nprint(x.throw(ValueError('v')).args, x.gi_running)"),
    ('unicode escape', "print(b'\\\\x41\\\\n'.decode('unicode_escape') + 'B')"),
]



def test_programs_a_model_writes_give_plain_pythons_output(sandbox):
    assert len(LEGITIMATE) >= 20
    cases = [(case, program, plain_python(program)) for case, program in LEGITIMATE]
    assert output_failures(sandbox, cases, LIMITS) == []


WRITTEN = "TypeError: the sandbox does not let a program change the attribute "
# (case, program, the start of its error): attributes written onto an instance of a value type's subclass
INSTANCE_WRITES = [
    ("str subclass instance's startswith", "class S(str):\n    pass\ns = S('__class__')\ns.startswith = lambda *a: False\nprint(s.startswith('_'))",
     WRITTEN + "'startswith' of 'S'"),
    ("dict subclass instance's keys", "class D(dict):\n    pass\nd = D(a=1)\nd.keys = lambda: ['__class__']\nprint(d.keys())",
     WRITTEN + "'keys' of 'D'"),
    ("int subclass instance's bit_length", 'class I(int):\n    pass\ni = I(3)\ni.bit_length = lambda: 99\nprint(i.bit_length())',
     WRITTEN + "'bit_length' of 'I'"),
    ("enum member's split", "from enum import Enum\nclass E(str, Enum):\n    A = 'a.b'\nE.A.split = lambda *a: ['__class__']\nprint(E.A.split('.'))",
     WRITTEN + "'split' of 'E'"),
    ('slots through a metaclass call', "import numbers\nD = numbers.ABCMeta('D', (dict,), {'__slots__': ('keys',)})\nd = D(a=1)\nd.keys = lambda: ['__class__']\nprint(d.keys())",
     WRITTEN + "'keys' of 'D'"),
    ('slots on a float', "import numbers\nF = numbers.ABCMeta('F', (float,), {'__slots__': ('hex',)})\nf = F(1.5)\nf.hex = lambda: 'x'\nprint(f.hex())",
     WRITTEN + "'hex' of 'F'"),
    ('symbol of a str subclass with startswith', "import sympy\nclass S(str):\n    pass\ns = S('_x')\ns.startswith = lambda *a: False\nprint(sympy.Symbol(s))",
     WRITTEN + "'startswith' of 'S'"),
    ("counter's method shadowed", "import collections\nc = collections.Counter('aab')\nc.most_common = lambda *a: ['__class__']\nprint(c.most_common())",
     WRITTEN + "'most_common' of 'Counter'"),
]
# (case, program): what stays writable of such instances
INSTANCE_KEPT = [
    ('defaultdict default_factory', "import collections\nd = collections.defaultdict(int)\nd.default_factory = list\nd['a'].append(1)\nprint(dict(d))"),
    ('program defaultdict subclass factory', "import collections\nclass D(collections.defaultdict):\n    pass\nd = D(int)\nd.default_factory = list\nd['a'].append(2)\nprint(dict(d))"),
    ('counter item write', "import collections\nc = collections.Counter()\nc['x'] += 2\nprint(c)"),
    ('dict subclass items', "class D(dict):\n    pass\nd = D()\nd['k'] = 1\nd['k'] += 1\nprint(d)"),
]


def test_an_instance_of_a_value_types_subclass_takes_no_attributes(sandbox):
    assert hostile_failures(sandbox, INSTANCE_WRITES, LIMITS) == []
    cases = [(case, program, plain_python(program)) for case, program in INSTANCE_KEPT]
    assert output_failures(sandbox, cases, LIMITS) == []
