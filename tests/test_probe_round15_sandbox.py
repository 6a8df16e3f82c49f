"""Probe round 15: the built-in ``type`` kept by C code, library registries, and a fresh round.

- ``type`` was still a value in a program's data, where no inline check sees it: C code called a
  library function that gives ``type`` when handed a class (``map(collections.Counter.copy,
  [int])``, ``UserList.copy``, the getter of ``sympy.Basic.func``, ``itertools.groupby``'s key,
  ``iter(partial(...), None)``) and kept the result in a list, and C code then called it with the
  program's arguments (``itertools.starmap(operator.call, ...)``, ``starmap(map, ...)``,
  ``functools.partial(*L)``): a ``str`` subclass whose ``==`` lies was made past every check of a
  ``class`` statement. A scan of every function and method of the holdable modules and their tables,
  called with classes, finds those three origins only, all library functions read from a class or a
  property: the guarded ``getattr`` now hands out such functions with their result checked, whoever
  calls them, and the unpacked arguments of ``f(*args)`` are checked too.
- Library registries a program writes (``sympy.core.sympify.converter``, ``decimal``'s context,
  ``random``'s state, a ``singledispatch`` registry) change only its own child: the next program in
  the same worker sees them as they were (``random`` is seeded anew in every child).
"""

from __future__ import annotations

from agora.models.recipes.sandbox import Sandbox, SandboxLimits

from sandbox_probes import hostile_failures, output_failures

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: resource probes: a second of CPU, a short wall limit
TIGHT = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=128, output_bytes=4096)
NO_TYPE = "TypeError: the sandbox does not give a program the built-in type"

# (case, program, the start of its error): ``type`` kept by C code, then called by C code
PIPELINES = [
    ('starmap(operator.call) of Counter.copy', "import itertools, operator, collections\nC = collections.Counter.copy\nL = list(map(C, [int])) + ['S', (str,), {'__eq__': lambda s, o: True, '__hash__': lambda s: 1}]\nS = list(itertools.starmap(operator.call, [L]))[0]\nprint(S('a') == 'b')",
     NO_TYPE),
    ('starmap(map) of UserList.copy', "import itertools, collections\nL = list(map(collections.UserList.copy, [int])) + [['S'], [(str,)], [{'__eq__': lambda s, o: True}]]\nS = list(itertools.chain.from_iterable(itertools.starmap(map, [L])))[0]\nprint(S('a') == 'b')",
     NO_TYPE),
    ("partial(*L) of Basic.func's getter", "import functools, sympy\np = functools.partial(*(list(map(sympy.Basic.func.fget, [int])) + ['S', (str,)]))\nS = p({'__eq__': lambda s, o: True})\nprint(S('a') == 'b')",
     NO_TYPE),
    ("groupby's key", "import itertools, collections, operator\nk = list(list(itertools.groupby([int], key=collections.Counter.copy))[0])\nS = list(itertools.starmap(operator.call, [k[:1] + ['S', (str,), {'__eq__': lambda s, o: True}]]))[0]\nprint(S('a') == 'b')",
     NO_TYPE),
    ('copy of a reduced state', "import numbers, collections\nimport sympy.polys.agca.modules as M\nL2 = list(map(collections.Counter.copy, [int])) + [('S', (str,), {'__eq__': lambda s, o: True})]\nX = numbers.ABCMeta('X', (), {'__reduce_ex__': lambda self, p: tuple(L2)})\nS = M.copy.copy(X())\nprint(S('a') == 'b')",
     NO_TYPE),
    ("sift's keys", "import collections\nfrom sympy.utilities.iterables import sift\nprint(list(sift([int], collections.Counter.copy))[0]('S', (str,), {}))",
     NO_TYPE),
    ('iter(partial, None)', "import itertools, functools, collections, operator\nit = iter(functools.partial(collections.Counter.copy, int), None)\nL = list(itertools.islice(it, 1)) + ['S', (str,), {'__eq__': lambda s, o: True}]\nprint(list(itertools.starmap(operator.call, [L]))[0]('a') == 'b')",
     NO_TYPE),
    ("a defaultdict's factory", "import collections, functools, operator, itertools\nd = collections.defaultdict(functools.partial(collections.Counter.copy, int))\ntry:\n    d['k']\nexcept TypeError:\n    pass\nL = list(d.values()) + ['S', (str,), {'__eq__': lambda s, o: True}]\nprint(list(itertools.starmap(operator.call, [L]))[0]('a') == 'b')",
     "TypeError: 'str' object is not callable"),
    ('methodcaller of fget', "import operator, itertools, sympy\nL = list(map(operator.methodcaller('fget', int), [sympy.Basic.func])) + ['S', (str,), {'__eq__': lambda s, o: True}]\nprint(list(itertools.starmap(operator.call, [L]))[0]('a') == 'b')",
     NO_TYPE),
    ('operator.call(*L)', "import collections, operator\nL = [*map(collections.Counter.copy, [int])] + ['S', (str,), {}]\nprint(operator.call(*L))",
     NO_TYPE),
    ('starmap of a list', 'import collections, operator, itertools\nL = list(map(collections.Counter.copy, [int]))\nM = list(itertools.starmap(operator.call, [L + [[]]]))\nprint(M)',
     NO_TYPE),
    ("a subclass's copy", "import collections, sympy\nclass K(collections.Counter):\n    pass\nL = list(map(K.copy, [int])) + ['S', (str,), {}]\nprint(sympy.Lambda)\nimport itertools, operator\nprint(list(itertools.starmap(operator.call, [L])))\n",
     NO_TYPE),
]


def test_type_kept_by_c_code_is_refused_where_it_comes_from(sandbox):
    assert hostile_failures(sandbox, PIPELINES, LIMITS) == []


def test_library_registries_a_program_writes_stay_in_its_own_child():
    """Each program runs in a fresh child of the worker: what it writes into a library's tables
    (sympy's converters, ``decimal``'s context, ``random``'s state, a ``singledispatch`` registry)
    is gone for the next program of the same worker."""
    poison = ("import sympy, decimal, random, functools, fractions\nfrom sympy.core.sympify import converter\n"
              "converter[int] = lambda v: sympy.Integer(42)\n"
              "decimal.getcontext().prec = 3\nrandom.seed(7)\n"
              "converter[fractions.Fraction] = lambda v: sympy.Integer(0)\n"
              "@functools.singledispatch\ndef f(x):\n    return 1\nf.register(int, lambda x: 2)\n"
              "print(sympy.sympify(3), decimal.Decimal(1) / 7)")
    check = ("import sympy, decimal, fractions, random\n"
             "print(sympy.sympify(3), sympy.sympify(fractions.Fraction(1, 2)), decimal.Decimal(1) / 7)\n"
             "print(random.random())")
    box = Sandbox(workers=1)
    try:
        before = box.run(check, LIMITS)
        poisoned = box.run(poison, LIMITS)
        after = box.run(check, LIMITS)
    finally:
        box.close()
    assert (poisoned.status, poisoned.output) == ("ok", "42 0.143\n")
    assert before.output.startswith("3 1/2 0.1428571428571428571428571429\n")
    # random is seeded anew in each child (``os.register_at_fork``): the poisoned seed does not carry over
    assert after.output.splitlines()[0] == before.output.splitlines()[0]
    assert after.output.splitlines()[1] != "0.32383276483316237"  # random.seed(7)'s first value


# (case, program, the start of its error): a fresh round of kinds not in the earlier rounds
HOSTILE = [
    ('print(math.__loader__)', 'import math\nprint(math.__loader__)',
     'SyntaxError: Line 2: "__loader__" is an invalid attribute na'),
    ('print(math.__spec__)', 'import math\nprint(math.__spec__)',
     'SyntaxError: Line 2: "__spec__" is an invalid attribute name'),
    ('print(().__class__)', 'print(().__class__)',
     'SyntaxError: Line 1: "__class__" is an invalid attribute nam'),
    ('print(sympy.Basic.func.fget.__globals__)', 'import sympy\nprint(sympy.Basic.func.fget.__globals__)',
     'SyntaxError: Line 2: "__globals__" is an invalid attribute n'),
    ('print(collections.Counter.copy.__wrapped__)', 'import collections\nprint(collections.Counter.copy.__wrapped__)',
     'SyntaxError: Line 2: "__wrapped__" is an invalid attribute n'),
    ('print(f.__closure__)', 'import collections\nf = collections.Counter.copy\nprint(f.__closure__)',
     'SyntaxError: Line 3: "__closure__" is an invalid attribute n'),
    ('f.x = 1', 'import collections\nf = collections.Counter.copy\nf.x = 1',
     'TypeError: the sandbox does not let a program change the att'),
    ("print(list(itertools.starmap(getattr, [(1, '__clas", "import itertools, operator\nprint(list(itertools.starmap(getattr, [(1, '__class__')])))",
     'AttributeError: "__class__" is an invalid attribute name bec'),
    ("print(operator.call(getattr, 1, '__class__'))", "import operator\nprint(operator.call(getattr, 1, '__class__'))",
     'AttributeError: "__class__" is an invalid attribute name bec'),
    ("print(operator.attrgetter('__class__')(1))", "import operator\nprint(operator.attrgetter('__class__')(1))",
     "AttributeError: '__class__' is an invalid attribute name bec"),
    ('print(x.func.__mro__)', "import sympy\nx = sympy.Symbol('x')\nprint(x.func.__mro__)",
     'SyntaxError: Line 3: "__mro__" is an invalid attribute name '),
    ('print(sympy.sympify("x.__class__"))', 'import sympy\nprint(sympy.sympify("x.__class__"))',
     "SympifyError: Sympify of expression 'could not parse 'x.__cl"),
    ('print(sympy.parse_expr("(lambda: 1).__globals__"))', 'import sympy\nprint(sympy.parse_expr("(lambda: 1).__globals__"))',
     'SyntaxError: Line 1: "__globals__" is an invalid attribute n'),
    ('print(sympy.sympify("open(\'/etc/passwd\').read()"))', 'import sympy\nprint(sympy.sympify("open(\'/etc/passwd\').read()"))',
     "NameError: name 'open' is not defined"),
    ('print(sympy.sympify("__import__(\'os\').getpid()"))', 'import sympy\nprint(sympy.sympify("__import__(\'os\').getpid()"))',
     'SympifyError: Sympify of expression \'could not parse "__impo'),
    ("print(re.compile('a').__class__)", "import re\nprint(re.compile('a').__class__)",
     'SyntaxError: Line 2: "__class__" is an invalid attribute nam'),
    ("print('{0.__class__}'.format(1))", "print('{0.__class__}'.format(1))",
     'AttributeError: "__class__" is an invalid attribute name bec'),
    ("print(f'{(1).__class__}')", "print(f'{(1).__class__}')",
     'SyntaxError: Line 1: "__class__" is an invalid attribute nam'),
    ("print(format(1, '__class__'))", "print(format(1, '__class__'))",
     "ValueError: Invalid format specifier '__class__' for object "),
    ("print('%(a)s' % {'a': 1}, '%s' % (open,))", "print('%(a)s' % {'a': 1}, '%s' % (open,))",
     "NameError: name 'open' is not defined"),
    ("x = eval('1+1')", "x = eval('1+1')",
     'SyntaxError: Line 1: Eval calls are not allowed.'),
    ("exec('print(1)')", "exec('print(1)')",
     'SyntaxError: Line 1: Exec calls are not allowed.'),
    ('import os', 'import os',
     "ImportError: import of 'os' is not allowed (allowed: bisect,"),
    ('import sys', 'import sys',
     "ImportError: import of 'sys' is not allowed (allowed: bisect"),
    ('import builtins', 'import builtins',
     'SyntaxError: Line 1: "builtins" is a reserved name.'),
    ("__import__('os')", "__import__('os')",
     'SyntaxError: Line 1: "__import__" is an invalid variable nam'),
    ('from math import __loader__', 'from math import __loader__',
     'SyntaxError: Line 1: "__loader__" is an invalid variable nam'),
    ('import importlib', 'import importlib',
     "ImportError: import of 'importlib' is not allowed (allowed: "),
    ('print(os)', 'from sympy import *\nprint(os)',
     "NameError: name 'os' is not defined"),
    ('print(sys)', 'from sympy import *\nprint(sys)',
     "NameError: name 'sys' is not defined"),
    ('print(c.import_module)', 'import sympy.core.cache as c\nprint(c.import_module)',
     "AttributeError: 'import_module' belongs to the module 'impor"),
    ("print(sympy.external.importtools.import_module('os", "import sympy\nprint(sympy.external.importtools.import_module('os'))",
     "AttributeError: 'external' is the module 'sympy.external', w"),
    ('print(sympy.utilities.lambdify.builtins)', 'import sympy\nprint(sympy.utilities.lambdify.builtins)',
     "AttributeError: 'function' object has no attribute 'builtins"),
    ('print(f(2))', "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x + 1, modules=['os'])\nprint(f(2))",
     "NameError: 'os' module cannot be used for lambdification"),
    ('print(random._os)', 'import random\nprint(random._os)',
     'SyntaxError: Line 2: "_os" is an invalid attribute name beca'),
    ('print(r.__dict__)', 'import random\nr = random.Random()\nprint(r.__dict__)',
     'SyntaxError: Line 3: "__dict__" is an invalid attribute name'),
    ('print(random.os)', 'import random\nprint(random.os)',
     "AttributeError: module 'random' has no attribute 'os'"),
    ('print(decimal.sys)', 'import decimal\nprint(decimal.sys)',
     "AttributeError: module 'decimal' has no attribute 'sys'"),
    ('import time', 'import time',
     "ImportError: import of 'time' is not allowed (allowed: bisec"),
    ('print(fractions.re, fractions.sys)', 'import fractions\nprint(fractions.re, fractions.sys)',
     "AttributeError: 'sys' is the module 'sys', which is not allo"),
    ('print(functools.reduce.__self__)', 'import functools\nprint(functools.reduce.__self__)',
     'SyntaxError: Line 2: "__self__" is an invalid attribute name'),
    ('f.register(g)', 'import functools\n@functools.singledispatch\ndef f(x):\n    return 1\ndef g(x: "().__class__.__base__.__subclasses__()"):\n    return 2\nf.register(g)',
     'SyntaxError: Line 1: "__subclasses__" is an invalid attribut'),
    ('print(A.__subclasses__())', 'class A:\n    pass\nprint(A.__subclasses__())',
     'SyntaxError: Line 3: "__subclasses__" is an invalid attribut'),
    ('print(object.__subclasses__())', 'print(object.__subclasses__())',
     'SyntaxError: Line 1: "__subclasses__" is an invalid attribut'),
    ('print(isinstance.__self__)', 'print(isinstance.__self__)',
     'SyntaxError: Line 1: "__self__" is an invalid attribute name'),
    ('print(print.__self__)', 'print(print.__self__)',
     'SyntaxError: Line 1: "__self__" is an invalid attribute name'),
    ('print([].__class__.__base__)', 'print([].__class__.__base__)',
     'SyntaxError: Line 1: "__base__" is an invalid attribute name'),
    ('print(f.__code__)', 'def f():\n    pass\nprint(f.__code__)',
     'SyntaxError: Line 3: "__code__" is an invalid attribute name'),
    ('print(f.__globals__)', 'def f():\n    pass\nprint(f.__globals__)',
     'SyntaxError: Line 3: "__globals__" is an invalid attribute n'),
    ('print(g.gi_frame)', 'g = (i for i in range(3))\nprint(g.gi_frame)',
     'SyntaxError: Line 2: "gi_frame" is a restricted name, that i'),
    ("print(getattr(g, 'gi_code'))", "g = (i for i in range(3))\nprint(getattr(g, 'gi_code'))",
     'AttributeError: "gi_code" is a restricted name, that is forb'),
    ('print(c.cr_frame)', 'async def f():\n    pass\nc = f()\nprint(c.cr_frame)',
     'SyntaxError: Line 1: AsyncFunctionDef statements are not all'),
    ('print(e.__traceback__.tb_frame)', 'try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame)',
     'SyntaxError: Line 4: "tb_frame" is a restricted name, that i'),
    ("print(getattr(e, '__traceback__'))", "try:\n    1/0\nexcept Exception as e:\n    print(getattr(e, '__traceback__'))",
     'AttributeError: "__traceback__" is an invalid attribute name'),
    ("print(sympy.Symbol('x').__reduce_ex__(2))", "import sympy\nprint(sympy.Symbol('x').__reduce_ex__(2))",
     'SyntaxError: Line 2: "__reduce_ex__" is an invalid attribute'),
    ("print(operator.methodcaller('__reduce_ex__', 2)(sy", "import operator\nprint(operator.methodcaller('__reduce_ex__', 2)(sympy))",
     "AttributeError: '__reduce_ex__' is an invalid attribute name"),
    ('x.__init__([2])', 'x = [1]\nx.__init__([2])',
     'SyntaxError: Line 2: "__init__" is an invalid attribute name'),
    ('print(f())', 'def f(*, a=__builtins__):\n    return a\nprint(f())',
     'SyntaxError: Line 1: "__builtins__" is an invalid variable n'),
    ('print(__builtins__)', 'print(__builtins__)',
     'SyntaxError: Line 1: "__builtins__" is an invalid variable n'),
    ('print(_getattr_)', 'print(_getattr_)',
     'SyntaxError: Line 1: "_getattr_" is an invalid variable name'),
    ('_print_ = 1', '_print_ = 1',
     'SyntaxError: Line 1: "_print_" is an invalid variable name b'),
    ('print(sympy.Basic.func.fget(sympy.Symbol))', 'import sympy\nprint(sympy.Basic.func.fget(sympy.Symbol))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(collections.Counter.copy(int))', 'import collections\nprint(collections.Counter.copy(int))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(collections.UserList.copy(int))', 'import collections\nprint(collections.UserList.copy(int))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(list(map(collections.UserList.copy, [int])))', 'import collections\nprint(list(map(collections.UserList.copy, [int])))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(list(map(StdFactKB.copy, [int])))', 'import sympy\nfrom sympy.core.assumptions import StdFactKB\nprint(list(map(StdFactKB.copy, [int])))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(list(map(sympy.logic.boolalg.Application.fun', 'import sympy\nprint(list(map(sympy.logic.boolalg.Application.func.fget, [int])))',
     'TypeError: the sandbox does not give a program the built-in '),
    ('print(list(map(collections.OrderedDict.copy, [int]', 'import collections\nprint(list(map(collections.OrderedDict.copy, [int])))',
     "TypeError: descriptor 'copy' for 'collections.OrderedDict' o"),
    ('print(list(map(K.copy, [int])))', 'import collections\nclass K(collections.UserDict):\n    pass\nprint(list(map(K.copy, [int])))',
     "AttributeError: type object 'int' has no attribute 'data'"),
    ('print(list(map(P.func.fget, [int])))', 'import sympy\nclass P(sympy.Basic):\n    pass\nprint(list(map(P.func.fget, [int])))',
     'TypeError: the sandbox does not give a program the built-in '),
    ("print(list(map(super(sympy.Symbol, sympy.Symbol('x", "import sympy\nprint(list(map(super(sympy.Symbol, sympy.Symbol('x')).func.fget if False else sympy.Symbol.func.fget, [int])))",
     'TypeError: the sandbox does not give a program the built-in '),
    ('f(0)', 'def f(n):\n    return f(n + 1)\nf(0)',
     'RecursionError: maximum recursion depth exceeded'),
    ("re.compile('(' * 100000)", "import re\nre.compile('(' * 100000)",
     'RecursionError: maximum recursion depth exceeded'),
    ('print(decimal.Decimal(10) ** (10 ** 17))', 'import decimal\ndecimal.getcontext().Emax = 10 ** 18\nprint(decimal.Decimal(10) ** (10 ** 17))',
     'ValueError: valid range for Emax is [0, MAX_EMAX]'),
    ('print(fractions.Fraction(10 ** 5000, 3))', 'import fractions\nprint(fractions.Fraction(10 ** 5000, 3))',
     'ValueError: Exceeds the limit (4300 digits) for integer stri'),
    ("print(int('9' * 100000))", "print(int('9' * 100000))",
     'ValueError: Exceeds the limit (4300 digits) for integer stri'),
    ('import sys as s', 'import sys as s',
     "ImportError: import of 'sys' is not allowed (allowed: bisect"),
    ('from . import x', 'from . import x',
     "ImportError: import of '' is not allowed (allowed: bisect, c"),
    ('import math as __builtins__', 'import math as __builtins__',
     'SyntaxError: Line 1: "__builtins__" is an invalid variable n'),
    ("__slots__ = ('__dict__',)", "class A:\n    __slots__ = ('__dict__',)",
     'SyntaxError: Line 2: "__slots__" is an invalid variable name'),
    ('return 1', 'class A:\n    def __getattribute__(self, n):\n        return 1',
     'SyntaxError: Line 2: "__getattribute__" is an invalid variab'),
    ('pass', 'class A:\n    def __set_name__(self, o, n):\n        pass',
     'SyntaxError: Line 2: "__set_name__" is an invalid variable n'),
    ('return 1', 'class A:\n    def __class_getitem__(cls, i):\n        return 1',
     'SyntaxError: Line 2: "__class_getitem__" is an invalid varia'),
    ("return (print, ('x',))", "class A:\n    def __reduce__(self):\n        return (print, ('x',))",
     'SyntaxError: Line 2: "__reduce__" is an invalid variable nam'),
    ('return 1', 'class A:\n    def __new__(cls):\n        return 1',
     'SyntaxError: Line 2: "__new__" is an invalid variable name b'),
    ('pass', 'class A(type):\n    pass',
     'TypeError: metaclass conflict: the metaclass of a derived cl'),
    ('print(A)', 'import numbers\nclass A(metaclass=numbers.ABCMeta):\n    pass\nprint(A)',
     'SyntaxError: Line 2: The keyword argument "metaclass" is not'),
    ('pass', 'import numbers\nclass M(numbers.ABCMeta):\n    pass',
     'TypeError: class M: a class deriving from type (a metaclass)'),
    ('import abc', 'import abc',
     "ImportError: import of 'abc' is not allowed (allowed: bisect"),
    ('print(numbers.ABCMeta.register(numbers.Number, str', 'import numbers\nprint(numbers.ABCMeta.register(numbers.Number, str))',
     "TypeError: register of 'Number' of the module 'numbers' is n"),
    ('collections.Counter.most_common = None', 'import collections\ncollections.Counter.most_common = None',
     'TypeError: the sandbox does not let a program change the att'),
    ("collections.namedtuple('P', ['__class__'])", "import collections\ncollections.namedtuple('P', ['__class__'])",
     "ValueError: Field names cannot start with an underscore: '__"),
    ('P = collections.namedtuple(\'P\', \'x, y=__import__("', 'import collections\nP = collections.namedtuple(\'P\', \'x, y=__import__("os")\')',
     'ValueError: Type names and field names must be valid identif'),
    ('sympy.S.Zero = 1', 'import sympy\nsympy.S.Zero = 1',
     'TypeError: the sandbox does not let a program change the att'),
    ('print(sympy.sympify(3))', 'import sympy\nsympy.core.sympify.converter[int] = lambda x: sympy.Integer(42)\nprint(sympy.sympify(3))',
     "AttributeError: 'function' object has no attribute 'converte"),
    ('print(f.cache_info, f.__wrapped__)', 'import functools\nf = functools.lru_cache(maxsize=None)(print)\nprint(f.cache_info, f.__wrapped__)',
     'SyntaxError: Line 3: "__wrapped__" is an invalid attribute n'),
    ('print(functools.partial.__new__)', 'import functools\nprint(functools.partial.__new__)',
     'SyntaxError: Line 2: "__new__" is an invalid attribute name '),
    ("f.write('x')", "with open('x', 'w') as f:\n    f.write('x')",
     "NameError: name 'open' is not defined"),
    ('import io', 'import io',
     "ImportError: import of 'io' is not allowed (allowed: bisect,"),
    ('sympy.Matrix([[1]]).__class__', 'import sympy\nsympy.Matrix([[1]]).__class__',
     'SyntaxError: Line 2: "__class__" is an invalid attribute nam'),
]

# (program, the starts its error may have), under TIGHT
RESOURCES = [
    ('import itertools\nit = itertools.count()\nwhile True:\n    next(it)', ('TimeoutError', 'MemoryError')),
    ('x = 1\nwhile x:\n    x = x * 2', ('TimeoutError', 'MemoryError')),
    ('print(10 ** 10 ** 10)', ('TimeoutError', 'MemoryError')),
    ('import math\nprint(math.factorial(10 ** 7))', ('TimeoutError', 'MemoryError')),
    ("print('a' * (2 ** 40))", ('MemoryError', 'TimeoutError')),
    ('s = set(range(10 ** 9))', ('TimeoutError', 'MemoryError')),
    ('import itertools\nprint(len(list(itertools.permutations(range(12)))))', ('TimeoutError', 'MemoryError')),
    ('import sympy\nprint(sympy.factorint(2 ** 400 + 1))', ('TimeoutError', 'MemoryError')),
    ("import sympy\nx = sympy.Symbol('x')\nprint(sympy.integrate(sympy.exp(x ** 7 + sympy.sin(x ** 3)), x))", ('TimeoutError', 'MemoryError')),
    ('import collections\nd = collections.deque(maxlen=None)\nwhile True:\n    d.append(1)', ('TimeoutError', 'MemoryError')),
    ('import heapq\nh = []\nfor i in range(10 ** 9):\n    heapq.heappush(h, i)', ('TimeoutError', 'MemoryError')),
]


def test_a_fresh_round_of_hostile_programs_is_contained(sandbox):
    assert hostile_failures(sandbox, HOSTILE, LIMITS) == []
    assert hostile_failures(sandbox, [(p[:30], p, e) for p, e in RESOURCES], TIGHT) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


# (case, program, its exact output): what a small model writes for GSM8K and MATH questions
LEGITIMATE = [
    ('eggs = 16', "# Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4; sells rest at $2.\neggs = 16\nremaining = eggs - 3 - 4\nprint(remaining * 2)",
     '18\n'),
    ('total = Fraction(3, 4) * 120', 'from fractions import Fraction\ntotal = Fraction(3, 4) * 120\nprint(int(total))',
     '90\n'),
    ('def solution():', 'def solution():\n    price = 80000\n    repairs = 50000\n    value = (price + repairs) * 2.5\n    return value - price - repairs\nprint(solution())',
     '195000.0\n'),
    ('print(math.comb(8, 3) * math.factorial(2', 'import math\nprint(math.comb(8, 3) * math.factorial(2))',
     '112\n'),
    ("x = sympy.symbols('x')", "import sympy\nx = sympy.symbols('x')\nprint(sympy.solve(sympy.Eq(3 * x + 5, 20), x)[0])",
     '5\n'),
    ("a, b = symbols('a b')", "from sympy import symbols, solve, Eq\na, b = symbols('a b')\nsol = solve([Eq(a + b, 10), Eq(a - b, 2)], [a, b])\nprint(sol[a], sol[b])",
     '6 4\n'),
    ('count = 0', 'import itertools\ncount = 0\nfor combo in itertools.product(range(1, 7), repeat=2):\n    if sum(combo) == 7:\n        count += 1\nprint(count)',
     '6\n'),
    ('p = Fraction(6, 36)', 'from fractions import Fraction\np = Fraction(6, 36)\nprint(p)',
     '1/6\n'),
    ('scores = [88, 92, 79, 93, 85]', 'import statistics\nscores = [88, 92, 79, 93, 85]\nprint(statistics.mean(scores), statistics.median(scores))',
     '87.4 88\n'),
    ("word = 'MISSISSIPPI'", "from collections import Counter\nword = 'MISSISSIPPI'\nc = Counter(word)\nimport math\nn = math.factorial(len(word))\nfor v in c.values():\n    n //= math.factorial(v)\nprint(n)",
     '34650\n'),
    ('d1 = datetime.date(2023, 1, 1)', 'import datetime\nd1 = datetime.date(2023, 1, 1)\nd2 = datetime.date(2023, 3, 15)\nprint((d2 - d1).days)',
     '73\n'),
    ('print(sympy.isprime(97), sympy.nextprime', 'import sympy\nprint(sympy.isprime(97), sympy.nextprime(100), list(sympy.primerange(1, 20)))',
     'True 101 [2, 3, 5, 7, 11, 13, 17, 19]\n'),
    ("x = sympy.Symbol('x')", "import sympy\nx = sympy.Symbol('x')\nexpr = (x + 2) * (x - 3)\nprint(sympy.expand(expr))",
     'x**2 - x - 6\n'),
    ("x = sympy.Symbol('x')", "import sympy\nx = sympy.Symbol('x')\nprint(sympy.integrate(3 * x ** 2, (x, 0, 2)))",
     '8\n'),
    ("x = sympy.Symbol('x')", "import sympy\nx = sympy.Symbol('x')\nprint(sympy.limit(sympy.sin(x) / x, x, 0))",
     '1\n'),
    ('print(sympy.gcd(48, 180), sympy.lcm(12, ', 'import sympy\nprint(sympy.gcd(48, 180), sympy.lcm(12, 18))',
     '12 36\n'),
    ('print(reduce(gcd, [12, 18, 24]))', 'from math import gcd\nfrom functools import reduce\nprint(reduce(gcd, [12, 18, 24]))',
     '6\n'),
    ('total = 0', 'total = 0\nfor i in range(1, 101):\n    if i % 3 == 0 or i % 5 == 0:\n        total += i\nprint(total)',
     '2418\n'),
    ('hours = 40', 'hours = 40\nrate = 12.5\novertime = 5\npay = hours * rate + overtime * rate * 1.5\nprint(f"{pay:.2f}")',
     '593.75\n'),
    ('r = 3', 'import math\nr = 3\narea = math.pi * r ** 2\nprint(round(area, 2))',
     '28.27\n'),
    ('def is_prime(n):', 'def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):\n        if n % i == 0:\n            return False\n    return True\nprint(sum(1 for n in range(100) if is_prime(n)))',
     '25\n'),
    ("print(len(set(permutations('AABB'))))", "from itertools import permutations\nprint(len(set(permutations('AABB'))))",
     '6\n'),
    ("n = sympy.Symbol('n', integer=True)", "import sympy\nn = sympy.Symbol('n', integer=True)\nprint(sympy.summation(n ** 2, (n, 1, 10)))",
     '385\n'),
    ("price = Decimal('19.99')", "from decimal import Decimal\nprice = Decimal('19.99')\nprint(price * 3)",
     '59.97\n'),
    ('print(sympy.Rational(1, 3) + sympy.Ratio', 'import sympy\nprint(sympy.Rational(1, 3) + sympy.Rational(1, 6))',
     '1/2\n'),
    ('A = sympy.Matrix([[2, 1], [1, 3]])', 'import sympy\nA = sympy.Matrix([[2, 1], [1, 3]])\nprint(A.det(), A.inv())',
     '5 Matrix([[3/5, -1/5], [-1/5, 2/5]])\n'),
    ('nums = [3, 1, 4, 1, 5, 9, 2, 6]', 'nums = [3, 1, 4, 1, 5, 9, 2, 6]\nnums.sort()\nprint(nums[len(nums) // 2], max(nums) - min(nums))',
     '4 8\n'),
    ('speed = 60', 'speed = 60\ntime_hours = 2.5\ndistance = speed * time_hours\nprint(int(distance))',
     '150\n'),
    ('groups = defaultdict(int)', "from collections import defaultdict\ngroups = defaultdict(int)\nfor w in ['apple', 'avocado', 'banana', 'blueberry', 'cherry']:\n    groups[w[0]] += 1\nprint(dict(groups))",
     "{'a': 2, 'b': 2, 'c': 1}\n"),
    ('print(math.sqrt(144) + math.log(math.e *', 'import math\nprint(math.sqrt(144) + math.log(math.e ** 2) + math.log10(1000))',
     '17.0\n'),
    ("x = sympy.Symbol('x')", "import sympy\nx = sympy.Symbol('x')\nroots = sympy.solve(x ** 2 - 5 * x + 6, x)\nprint(sum(roots), sorted(roots))",
     '5 [2, 3]\n'),
    ('print(sympy.factorint(2024), sympy.divis', 'import sympy\nprint(sympy.factorint(2024), sympy.divisor_count(2024), sympy.totient(36))',
     '{2: 3, 11: 1, 23: 1} 16 12\n'),
    ('def fib(n):', 'def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\nprint(fib(30))',
     '832040\n'),
    ('coins = [1, 5, 10, 25]', 'import itertools\ncoins = [1, 5, 10, 25]\nways = 0\nfor combo in itertools.combinations_with_replacement(coins, 3):\n    if sum(combo) == 30:\n        ways += 1\nprint(ways)',
     '1\n'),
    ('x = Fraction(1)', 'from fractions import Fraction\nx = Fraction(1)\nfor k in range(2, 6):\n    x += Fraction(1, k)\nprint(x, float(x))',
     '137/60 2.283333333333333\n'),
    ('angle = math.radians(30)', 'import math\nangle = math.radians(30)\nprint(round(math.sin(angle), 4), round(math.degrees(math.atan(1)), 1))',
     '0.5 45.0\n'),
    ("x, y = sympy.symbols('x y')", "import sympy\nx, y = sympy.symbols('x y')\nprint(sympy.simplify((x ** 2 - y ** 2) / (x - y)))",
     'x + y\n'),
    ("Point = collections.namedtuple('Point', ", "import collections\nPoint = collections.namedtuple('Point', ['x', 'y'])\np = Point(3, 4)\nprint((p.x ** 2 + p.y ** 2) ** 0.5)",
     '5.0\n'),
    ("tasks = [(3, 'c'), (1, 'a'), (2, 'b')]", "import heapq\ntasks = [(3, 'c'), (1, 'a'), (2, 'b')]\nheapq.heapify(tasks)\nprint([heapq.heappop(tasks)[1] for _ in range(3)])",
     "['a', 'b', 'c']\n"),
    ("x = sympy.Symbol('x')", "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x ** 2 + 1)\nprint(f(3), sympy.N(sympy.pi, 6))",
     '10 3.14159\n'),
    ("c = collections.Counter('hello world')", "import collections\nc = collections.Counter('hello world')\nk = collections.Counter.copy(c)\nprint(k.most_common(1), collections.Counter.copy is collections.Counter.copy)",
     "[('l', 3)] True\n"),
    ('print(Fraction.from_float(0.25), sympy.M', 'from fractions import Fraction\nimport sympy\nprint(Fraction.from_float(0.25), sympy.Matrix.zeros(2, 2).shape, sympy.Basic.func.fget(sympy.Integer(3)))',
     "1/4 (2, 2) <class 'sympy.core.numbers.Integer'>\n"),
    ('print(list(itertools.starmap(operator.mu', "import operator, itertools, functools\nprint(list(itertools.starmap(operator.mul, [(2, 3), (4, 5)])), functools.reduce(operator.add, [1, 2, 3]),\n      operator.call(max, 1, 5), list(map(operator.methodcaller('upper'), ['a'])))",
     "[6, 20] 6 5 ['A']\n"),
    ('nums = [1, 2, 3]', "nums = [1, 2, 3]\nargs = [2, 10]\nprint(pow(*args), max(*nums), dict(**{'a': 1}))\n",
     "1024 3 {'a': 1}\n"),
]


def test_the_programs_a_model_writes_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []
