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
- ``functools.total_ordering`` of a class the program did not define is refused unless library code
  calls it, judged by its caller's frame: a library function's frame calling the program's key
  (``heapq.nsmallest(1, [Not], key=functools.total_ordering)``) passed, and wrote comparisons into
  sympy's ``Not``. Only a module being imported (its spec ``_initializing``) counts as library code now.
- Refused or limited, as before, with the worker healthy for the next program: frames of
  generators and tracebacks, ``__class_getitem__``/``__init_subclass__``/descriptors/metaclasses
  (in class statements and through ``numbers.ABCMeta``), format strings and ``format_map``,
  ``attrgetter``/``methodcaller``/``reduce`` over dunder names, pickling and ``copy``, ``sys``/``os``
  through library modules, library helpers that write (``update_wrapper``, ``register``), NFKC
  names (``ｅｖａｌ``), huge numbers, deep recursion, memory and CPU bombs, floods of output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, resource_failures

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
    ("total_ordering through heapq.nsmallest's key", "import functools, heapq\nfrom sympy.core.logic import Not\n"
     "heapq.nsmallest(1, [Not], key=functools.total_ordering)\nprint(Not('a') >= Not('b'))",
     "TypeError: total_ordering of 'Not' of the module 'sympy.core.logic' is not allowed in the sandbox"),
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
    ("ask, whose handlers are imported lazily and register themselves", "import sympy\nx = sympy.Symbol('x', positive=True)\n"
     "X = sympy.MatrixSymbol('X', 2, 2)\nprint(sympy.ask(sympy.Q.positive(x + 1)), sympy.ask(sympy.Q.symmetric(X * X.T)))",
     "True True\n"),
]


def test_var_and_vring_in_the_program_keep_their_outputs(sandbox):
    assert output_failures(sandbox, FRAME_WRITERS_KEPT, LIMITS) == []


#: resource probes' outcomes: a limit (CPU or wall time, memory, recursion, output) or the memory cap hit in C
LIMITED = ("TimeoutError: the program ", "MemoryError", "Killed: ", "SystemError", "RecursionError", "OutputLimit: ")

# (case, program, the start of its error): frames, class machinery, format strings, pickling, library modules'
# reach, library helpers that write, unicode names, built-ins a program is not given
ESCAPES = [
    ('gi_frame f_globals', 'def g():\n    yield 1\nx = g()\nprint(x.gi_frame.f_globals)', 'SyntaxError: Line 4: "f_globals" is a restricted name, that is forbidden to access in RestrictedPython.; Line '),
    ('gi_frame f_back', 'def g():\n    yield 1\nx = g()\nnext(x)\nprint(x.gi_frame.f_back)', 'SyntaxError: Line 5: "f_back" is a restricted name, that is forbidden to access in RestrictedPython.; Line 5: '),
    ('gi_code co_consts', 'def g():\n    yield 1\nprint(g().gi_code.co_consts)', 'SyntaxError: Line 3: "gi_code" is a restricted name, that is forbidden to access in RestrictedPython.'),
    ('tb_frame via exception', 'try:\n    1/0\nexcept Exception as e:\n    print(e.with_traceback(None), e.args)\n    tb = e.__traceback__\n', 'SyntaxError: Line 5: "__traceback__" is an invalid attribute name because it starts with "_".'),
    ('tb via sys.exc_info-less', "try:\n    1/0\nexcept Exception as e:\n    f = getattr(e, '__traceback__')\n    print(f.tb_frame.f_globals)", 'SyntaxError: Line 5: "f_globals" is a restricted name, that is forbidden to access in RestrictedPython.; Line '),
    ('getattr tb_frame', "try:\n    1/0\nexcept Exception as e:\n    t = getattr(e, 'with_traceback')\n    print(getattr(getattr(e, 'args'), 'count'))\n    import operator\n    print(operator.attrgetter('__traceback__.tb_frame.f_back.f_globals')(e))", "AttributeError: '__traceback__.tb_frame.f_back.f_globals' is an invalid attribute name because it starts with "),
    ('cr_frame coroutine', 'async def c():\n    return 1\nx = c()\nprint(x.cr_frame.f_globals)', 'SyntaxError: Line 1: AsyncFunctionDef statements are not allowed.; Line 4: "f_globals" is a restricted name, t'),
    ('ag_frame async gen', 'async def a():\n    yield 1\nprint(a().ag_frame.f_builtins)', 'SyntaxError: Line 1: AsyncFunctionDef statements are not allowed.; Line 3: "f_builtins" is a restricted name, '),
    ('f_locals via generator', 'def g():\n    secret = 1\n    yield 1\nx = g()\nnext(x)\nprint(x.gi_frame.f_locals)', 'SyntaxError: Line 6: "f_locals" is a restricted name, that is forbidden to access in RestrictedPython.; Line 6'),
    ('gi_yieldfrom', 'def g():\n    yield from iter([1])\nx = g(); next(x)\nprint(x.gi_yieldfrom)', 'SyntaxError: Line 4: "gi_yieldfrom" is a restricted name, that is forbidden to access in RestrictedPython.'),
    ('__class_getitem__', 'class A:\n    def __class_getitem__(cls, k):\n        return k\nprint(A[1])', 'SyntaxError: Line 2: "__class_getitem__" is an invalid variable name because it starts with "_"'),
    ('__init_subclass__', 'class A:\n    def __init_subclass__(cls, **kw):\n        print(cls)\nclass B(A):\n    pass', 'SyntaxError: Line 2: "__init_subclass__" is an invalid variable name because it starts with "_"'),
    ('__set_name__ descriptor', 'class D:\n    def __set_name__(self, owner, name):\n        print(owner)\nclass A:\n    d = D()', 'SyntaxError: Line 2: "__set_name__" is an invalid variable name because it starts with "_"'),
    ('descriptor __get__', 'class D:\n    def __get__(self, obj, typ):\n        return typ\nclass A:\n    d = D()\nprint(A.d)', 'SyntaxError: Line 2: "__get__" is an invalid variable name because it starts with "_"'),
    ('metaclass kw', 'import abc\nclass M(abc.ABCMeta):\n    pass\nclass A(metaclass=M):\n    pass\nprint(A)', 'SyntaxError: Line 4: The keyword argument "metaclass" is not allowed.'),
    ('metaclass __prepare__', 'import numbers\nclass A(metaclass=numbers.ABCMeta):\n    pass\nprint(type(A).mro(type(A)))', 'SyntaxError: Line 2: The keyword argument "metaclass" is not allowed.'),
    ('type(x).__subclasses__ via attrgetter', "import operator\nprint(operator.attrgetter('__subclasses__')(type(object()))())", 'AttributeError: \'__subclasses__\' is an invalid attribute name because it starts with "_"'),
    ('object subclasses via methodcaller', "import operator\nprint(operator.methodcaller('__subclasses__')(object))", 'AttributeError: \'__subclasses__\' is an invalid attribute name because it starts with "_"'),
    ('functools.reduce getattr dunders', "import functools\nprint(functools.reduce(getattr, ['__class__', '__base__', '__subclasses__'], ()))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('reduce attrgetter chain', "import functools, operator\nprint(functools.reduce(lambda a, n: operator.attrgetter(n)(a), ['__class__', '__mro__'], 1))", 'AttributeError: \'__class__\' is an invalid attribute name because it starts with "_"'),
    ('getattr dunder string concat', "n = '_' * 2 + 'class' + '_' * 2\nprint(getattr(1, n))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('vars of a class', 'class A:\n    pass\nprint(vars(A))', "NameError: name 'vars' is not defined"),
    ('dir then getattr', "print([getattr(1, n) for n in dir(1) if n.startswith('__cl')])", "NameError: name 'dir' is not defined"),
    ('format attribute access', "print('{0.__class__.__mro__}'.format(1))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('format item then attr', "print('{0[0].__class__}'.format([1]))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('format_map', "print('{x.__class__.__base__.__subclasses__}'.format_map({'x': 1}))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('format via str.format unbound', "print(str.format('{0.__globals__}', lambda: 1))", 'NotImplementedError: Using the format*() methods of `str` is not safe'),
    ('f-string !r of dunder', "x = 1\nprint(f'{x.__class__}')", 'SyntaxError: Line 2: "__class__" is an invalid attribute name because it starts with "_".'),
    ('string.Formatter get_field', "import string\nprint(string.Formatter().get_field('0.__class__', [1], {}))", 'NotImplementedError: string.Formatter is not safe'),
    ('string.Formatter format', "import string\nprint(string.Formatter().format('{0.__class__.__bases__}', 1))", 'NotImplementedError: string.Formatter is not safe'),
    ('format spec nested', "print('{0:{1.__class__}}'.format(1, 2))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('import pickle', 'import pickle\nprint(pickle.dumps(1))', "ImportError: import of 'pickle' is not allowed"),
    ('import copyreg', 'import copyreg\nprint(copyreg)', "ImportError: import of 'copyreg' is not allowed"),
    ('__reduce_ex__ call', 'print((1).__reduce_ex__(2))', 'SyntaxError: Line 1: "__reduce_ex__" is an invalid attribute name because it starts with "_".'),
    ('reduce via methodcaller', "import operator\nprint(operator.methodcaller('__reduce_ex__', 2)(object()))", 'AttributeError: \'__reduce_ex__\' is an invalid attribute name because it starts with "_"'),
    ('copy module', 'import copy\nprint(copy.copy(1))', "ImportError: import of 'copy' is not allowed"),
    ('fractions module attr sys', 'import fractions\nprint(fractions.sys)', "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ('decimal module attr sys', 'import decimal\nprint(decimal.sys)', "AttributeError: module 'decimal' has no attribute 'sys'"),
    ('sympy attr sys via core', 'import sympy\nprint(sympy.core.compatibility)', "AttributeError: module 'sympy.core' has no attribute 'compatibility'"),
    ('random _os', 'import random\nprint(random._os)', 'SyntaxError: Line 2: "_os" is an invalid attribute name because it starts with "_".'),
    ('statistics sys', 'import statistics\nprint(statistics.sys.modules)', "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ('functools reach sys via globals', 'import functools\nprint(functools.reduce.__globals__)', 'SyntaxError: Line 2: "__globals__" is an invalid attribute name because it starts with "_".'),
    ('re module sre reach', 'import re\nprint(re.enum.sys)', "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ('collections sys', "import collections\nprint(collections.sys.modules['os'])", "AttributeError: module 'collections' has no attribute 'sys'"),
    ('datetime time module', 'import datetime\nprint(datetime.time.__module__, datetime._time)', 'SyntaxError: Line 2: "__module__" is an invalid attribute name because it starts with "_".; Line 2: "_time" is'),
    ('numbers ABCMeta reach abc sys', 'import numbers\nprint(numbers.ABCMeta.__module__)\nimport abc\nprint(abc)', 'SyntaxError: Line 2: "__module__" is an invalid attribute name because it starts with "_".'),
    ('inspect via sympy', "import sympy\nprint(sympy.utilities.source.get_mod_func('os.system'))", "AttributeError: 'source' is the module 'sympy.utilities.source', which is not allowed"),
    ('import os', "import os\nos.system('id')", "ImportError: import of 'os' is not allowed"),
    ('import threading', 'import threading\nprint(threading)', "ImportError: import of 'threading' is not allowed"),
    ('import _thread', 'import _thread\nprint(_thread)', 'SyntaxError: Line 1: "_thread" is an invalid variable name because it starts with "_"; Line 2: "_thread" is an'),
    ('import signal', 'import signal\nsignal.alarm(1)', "ImportError: import of 'signal' is not allowed"),
    ('open /etc/passwd', "print(open('/etc/passwd').read())", "NameError: name 'open' is not defined"),
    ('open /proc/self/environ', "print(open('/proc/self/environ').read())", "NameError: name 'open' is not defined"),
    ('write outside via sympy codegen', "from sympy.utilities.codegen import codegen\nimport sympy\nx = sympy.Symbol('x')\ncodegen(('f', x), 'C', '/tmp/agora_r16_escape', to_files=True)\nprint(1)", "PermissionError: [Errno 13] Permission denied (the sandbox's audit hook: writing): '/tmp/agora_r16_escape.c'"),
    ('os via random', 'import random\nprint(random.os)', "AttributeError: module 'random' has no attribute 'os'"),
    ('environ via os of sympy', 'import sympy\nprint(sympy.core.cache.os.environ)', "AttributeError: module 'sympy.core.cache' has no attribute 'os'"),
    ('breakpoint', 'breakpoint()', 'SyntaxError: Line 1: "breakpoint" is a reserved name.'),
    ('exit', 'exit(0)', "NameError: name 'exit' is not defined"),
    ('quit', 'quit()', "NameError: name 'quit' is not defined"),
    ('help', 'help(1)', "NameError: name 'help' is not defined"),
    ('input', 'input()', "NameError: name 'input' is not defined"),
    ('memoryview', "print(memoryview(b'a'))", "NameError: name 'memoryview' is not defined"),
    ('globals', 'print(globals())', "NameError: name 'globals' is not defined"),
    ('locals', 'print(locals())', "NameError: name 'locals' is not defined"),
    ('vars no arg', 'print(vars())', "NameError: name 'vars' is not defined"),
    ('print to file kw', 'import sys\nprint(1, file=sys.stderr)', "ImportError: import of 'sys' is not allowed"),
    ('NFKC eval', "print(ｅｖａｌ('1+1'))", 'SyntaxError: Line 1: Eval calls are not allowed.'),
    ('NFKC exec', "ｅｘｅｃ('print(1)')", 'SyntaxError: Line 1: Exec calls are not allowed.'),
    ('NFKC dunder import', "print(＿＿import＿＿('os'))", 'SyntaxError: Line 1: SyntaxError: invalid character \'＿\' (U+FF3F) at statement: "print(＿＿import＿＿(\'os\'))"'),
    ('NFKC underscore attr', 'print((1).＿＿class＿＿)', "SyntaxError: Line 1: SyntaxError: invalid character '＿' (U+FF3F) at statement: 'print((1).＿＿class＿＿)'"),
    ('NFKC open', "print(ｏｐｅｎ('/etc/passwd').read())", "NameError: name 'open' is not defined"),
    ('mathematical bold getattr', "print(𝐠𝐞𝐭𝐚𝐭𝐭𝐫(1, '__class__'))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('ABCMeta __instancecheck__ meta', "from numbers import ABCMeta\nMt = ABCMeta('Mt', (ABCMeta,), {'__instancecheck__': lambda c, o: True})\nA = Mt('A', (), {})\nprint(isinstance(1, A))", 'TypeError: class Mt: a class deriving from type (a metaclass) is not allowed in the sandbox'),
    ('ABCMeta __subclasscheck__ str', "from numbers import ABCMeta\nMt = ABCMeta('Mt', (ABCMeta,), {'__subclasscheck__': lambda c, o: True})\nA = Mt('A', (str,), {})\nprint(issubclass(int, A))", 'TypeError: class Mt: a class deriving from type (a metaclass) is not allowed in the sandbox'),
    ('ABCMeta __eq__ str subclass', "from numbers import ABCMeta\nS = ABCMeta('S', (str,), {'__eq__': lambda s, o: True, '__hash__': lambda s: 1})\nprint(S('a') == 'b')", 'TypeError: class S: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own '),
    ('ABCMeta __class__ key', "from numbers import ABCMeta\nA = ABCMeta('A', (), {'__class__': int})\nprint(A().bit_length)", "AttributeError: 'A' object has no attribute 'bit_length'"),
    ('ABCMeta __call__ metaclass', "from numbers import ABCMeta\nMt = ABCMeta('Mt', (ABCMeta,), {'__call__': lambda c, *a: a})\nA = Mt('A', (), {})\nprint(A(1))", 'TypeError: class Mt: a class deriving from type (a metaclass) is not allowed in the sandbox'),
    ('ABCMeta __mro_entries__', "from numbers import ABCMeta\nA = ABCMeta('A', (), {'__mro_entries__': lambda s, b: (int,)})\nclass B(A()):\n    pass\nprint(B)", 'TypeError: class B: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own '),
    ('ABCMeta __prepare__', "from numbers import ABCMeta\nMt = ABCMeta('Mt', (ABCMeta,), {'__prepare__': classmethod(lambda m, n, b, **k: {'__builtins__': 1})})\nprint(Mt)", 'TypeError: class Mt: a class deriving from type (a metaclass) is not allowed in the sandbox'),
    ('namedtuple module sympy class write', "import collections\nP = collections.namedtuple('P', 'a', module='sympy')\nP.x = 1\nprint(P.x)", "TypeError: the sandbox does not let a program change the attribute 'x' of 'P' of the module 'sympy'"),
    ('namedtuple _make via getattr', "import collections\nP = collections.namedtuple('P', 'a')\nprint(getattr(P, '_make')([1]))", 'AttributeError: "_make" is an invalid attribute name because it starts with "_"'),
    ('parse_expr global_dict getattr', "import sympy\nprint(sympy.parse_expr('x.__class__', global_dict={'_getattr_': getattr, 'x': 1}))", 'SyntaxError: Line 1: "__class__" is an invalid attribute name because it starts with "_".'),
    ('parse_expr global_dict builtins', "import sympy\nprint(sympy.parse_expr('open', global_dict={'__builtins__': {'open': 1}}))", "NameError: name 'Symbol' is not defined"),
    ('sympify string dunder', "import sympy\nprint(sympy.sympify('(1).__class__.__mro__'))", "SympifyError: Sympify of expression 'could not parse '(1).__class__.__mro__'' failed, because of exception bei"),
    ('parse_expr transformations custom', "import sympy\nfrom sympy.parsing.sympy_parser import parse_expr\ndef t(tokens, local_dict, global_dict):\n    return tokens\nprint(parse_expr('1+1', transformations=(t,), global_dict={'__builtins__': __builtins__}))", 'SyntaxError: Line 5: "__builtins__" is an invalid variable name because it starts with "_"'),
    ('lambdify dummify printer', "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, sympy.Function('__import__')(x))\nprint(f('os'))", "ValueError: lambdify of the name '__import__' is not allowed in the sandbox"),
    ('lambdify Symbol name code', "import sympy\nx = sympy.Symbol('x); import os; (x')\nf = sympy.lambdify(x, x + 1)\nprint(f(1))", "ValueError: lambdify of the name 'x); import os; (x' is not allowed in the sandbox"),
    ('sympy Symbol name dunder attr', "import sympy\nx = sympy.Symbol('__class__')\nf = sympy.lambdify([], x)\nprint(f())", "ValueError: lambdify of the name '__class__' is not allowed in the sandbox"),
    ('os.urandom via random', 'import random\nprint(random.urandom)', "AttributeError: module 'random' has no attribute 'urandom'"),
    ('functools lru_cache cache_info', "import functools\n@functools.lru_cache\ndef f(x):\n    return x\nprint(f.cache_info(), getattr(f, '__wrapped__', None))", 'AttributeError: "__wrapped__" is an invalid attribute name because it starts with "_"'),
    ('functools update_wrapper assigned dunder', "import functools\ndef g():\n    pass\nfunctools.update_wrapper(g, print, assigned=('__globals__',))\nprint(g)", "TypeError: update_wrapper of the attributes ['__globals__'] is not allowed in the sandbox"),
    ('functools update_wrapper updated dict', "import functools\ndef g():\n    pass\nclass K:\n    pass\nfunctools.update_wrapper(K, g, assigned=(), updated=('__dict__',))\nprint(K)", "AttributeError: 'mappingproxy' object has no attribute 'update'"),
    ('operator.attrgetter module chain', "import operator, sympy\nprint(operator.attrgetter('core.cache.os')(sympy))", "AttributeError: module 'sympy.core.cache' has no attribute 'os'"),
    ('setattr on function', "def f():\n    pass\nsetattr(f, 'x', 1)\nprint(f.x)", "NameError: name 'setattr' is not defined"),
    ('setattr dunder on own class', "class A:\n    pass\nsetattr(A, '__getattr__', lambda s, n: n)\nprint(A().x)", "NameError: name 'setattr' is not defined"),
    ('delattr builtin module attr', "import math\ndelattr(math, 'pi')\nprint(math.pi)", "NameError: name 'delattr' is not defined"),
    ('str subclass via class stmt', "class S(str):\n    def upper(self):\n        return 'X'\nprint(S('a').upper())", 'TypeError: class S: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own '),
    ('update_wrapper onto a module dict', "from numbers import ABCMeta\nimport functools\nimport fractions\nA = ABCMeta('A', (), {'Fraction': 5})\nfunctools.update_wrapper(fractions, A, assigned=(), updated=('__dict__',))\nprint(fractions.Fraction)", "TypeError: the sandbox does not let a program change the attributes of the module 'fractions'"),
    ('update_wrapper onto a module assigned', 'from numbers import ABCMeta\nimport functools\nimport fractions\ndef g():\n    pass\nfunctools.update_wrapper(fractions, g)\nprint(fractions)', "TypeError: the sandbox does not let a program change the attributes of the module 'fractions'"),
    ('update_wrapper onto a library function', 'from numbers import ABCMeta\nimport functools\nimport sympy\ndef g():\n    pass\ng.x = 1\nfunctools.update_wrapper(sympy.simplify, g)\nprint(sympy.simplify.x)', "TypeError: the sandbox does not let a program change the attributes of 'simplify' of the module 'sympy.simplif"),
    ('wraps onto a library class', 'from numbers import ABCMeta\nimport functools\nimport collections\ndef g():\n    pass\nfunctools.wraps(g)(collections.Counter)\nprint(collections.Counter)', "TypeError: the sandbox does not let a program change the attributes of 'Counter' of the module 'collections'"),
    ('update_wrapper onto a library class dict', "from numbers import ABCMeta\nimport functools\nimport collections\nA = ABCMeta('A', (), {'most_common': 5})\nfunctools.update_wrapper(collections.Counter, A, assigned=('most_common',), updated=())\nprint(collections.Counter.most_common)", "TypeError: the sandbox does not let a program change the attributes of 'Counter' of the module 'collections'"),
    ('update_wrapper module dict dunder builtins', "from numbers import ABCMeta\nimport functools\nimport statistics\nA = ABCMeta('A', (), {'__builtins__': {}})\nfunctools.update_wrapper(statistics, A, assigned=(), updated=('__dict__',))\nprint(statistics.mean([1, 2]))", "TypeError: the sandbox does not let a program change the attributes of the module 'statistics'"),
    ('update_wrapper onto a function of the sandbox print', 'from numbers import ABCMeta\nimport functools\ndef g():\n    pass\ng.y = 2\nfunctools.update_wrapper(print, g)\nprint(1)', "TypeError: the sandbox does not let a program change the attributes of '_PrintScope._call_print' of the module '_"),
    ('update_wrapper updated custom attr', "from numbers import ABCMeta\nimport functools\nimport sympy\nA = ABCMeta('A', (), {'args': 5})\nfunctools.update_wrapper(sympy.Symbol, A, assigned=(), updated=('args',))\nprint(1)", "TypeError: the sandbox does not let a program change the attributes of 'Symbol' of the module 'sympy.core.symb"),
    ('total_ordering on library class', 'from numbers import ABCMeta\nimport functools\nimport fractions\nfunctools.total_ordering(fractions.Fraction)\nprint(1)', "TypeError: total_ordering of 'Fraction' of the module 'fractions' is not allowed in the sandbox (it writes int"),
    ('cached_property set_name on lib', "from numbers import ABCMeta\nimport functools\nimport collections\nc = functools.cached_property(lambda s: 1)\nc.__set_name__(collections.Counter, 'x')\nprint(1)", 'SyntaxError: Line 5: "__set_name__" is an invalid attribute name because it starts with "_".'),
    ('partialmethod', "from numbers import ABCMeta\nimport functools\nclass A:\n    f = functools.partialmethod(print, 'x')\nA().f()", "AttributeError: 'A' object has no attribute '_printer'"),
    ('abc register', 'import abc\nprint(abc)', "ImportError: import of 'abc' is not allowed"),
    ('numbers.Number.register str', "import numbers\nnumbers.Number.register(str)\nprint(isinstance('a', numbers.Number))", "TypeError: register of 'Number' of the module 'numbers' is not allowed in the sandbox (it writes into a class "),
    ('collections.abc register', 'import collections\ncollections.abc.Mapping.register(int)\nprint(1)', "TypeError: register of 'Mapping' of the module 'collections.abc' is not allowed in the sandbox (it writes into"),
    ('classmethod of ABCMeta call register', 'import numbers\nnumbers.ABCMeta.register(numbers.Number, int)\nprint(1)', "TypeError: register of 'Number' of the module 'numbers' is not allowed in the sandbox (it writes into a class "),
    ('Counter subclass missing', "import collections\nclass C(collections.Counter):\n    def __missing__(self, k):\n        return k\nprint(C()['a'])", 'TypeError: class C: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own '),
    ('map getattr dunder', "print(list(map(getattr, [1], ['__class__'])))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('filter with getattr partial', "import functools\nprint(list(map(functools.partial(getattr, 1), ['__class__'])))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('starmap getattr', "import itertools\nprint(list(itertools.starmap(getattr, [(1, '__class__')])))", 'AttributeError: "__class__" is an invalid attribute name because it starts with "_"'),
    ('min key attrgetter', "import operator\nprint(min([1], key=operator.attrgetter('__class__')))", 'AttributeError: \'__class__\' is an invalid attribute name because it starts with "_"'),
    ('super with args', 'class A:\n    def f(self):\n        return super(A, self).f\nprint(A().f())', "AttributeError: 'super' object has no attribute 'f'"),
    ('type three args', "print(type('X', (), {}))", 'TypeError: type(name, bases, namespace) is not available in the sandbox (write a class statement)'),
    ('object new', 'print(object.__new__)', 'SyntaxError: Line 1: "__new__" is an invalid attribute name because it starts with "_".'),
    ('iter callable sentinel', 'c = iter([1, 2, 3]).__next__\nprint(1)', 'SyntaxError: Line 1: "__next__" is an invalid attribute name because it starts with "_".'),
]

# (case, program, the start of its error): huge numbers, recursion, memory, CPU, output
RESOURCES = [
    ('decimal huge Emax power', 'import decimal\nc = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX)\nprint(c.power(decimal.Decimal(10), decimal.Decimal(10**17)))', LIMITED),
    ('math factorial huge', 'import math\nprint(len(str(math.factorial(10**7))))', LIMITED),
    ('ten to ten to eight', 'print(10**10**8)', LIMITED),
    ('pow huge', 'print(pow(7, 10**9, None) % 10)', LIMITED),
    ('sympy huge factorint', 'import sympy\nprint(sympy.factorint(2**512 - 1))', LIMITED),
    ('deep recursion', 'def f(n):\n    return f(n + 1)\nprint(f(0))', LIMITED),
    ('recursion through repr', 'class A:\n    def __repr__(self):\n        return repr(self)\nprint(A())', LIMITED),
    ('deep nested list repr', 'x = []\nfor i in range(10**6):\n    x = [x]\nprint(x)', LIMITED),
    ('bytearray bomb', 'b = bytearray(10**10)\nprint(len(b))', LIMITED),
    ('list repetition', 'x = [0] * 10**10\nprint(len(x))', LIMITED),
    ('string join bomb', "print(len(''.join('x' * 10**6 for i in range(10**5))))", LIMITED),
    ('growing list', "x = []\nwhile True:\n    x.append('x' * 10**6)", LIMITED),
    ('str multiply', "s = 'a' * (2**40)\nprint(len(s))", LIMITED),
    ('bytes multiply', "print(len(b'a' * 2**35))", LIMITED),
    ('dict comprehension bomb', 'd = {i: i for i in range(10**9)}', LIMITED),
    ('infinite loop', 'while True:\n    pass', LIMITED),
    ('busy generator', 'print(sum(i for i in range(10**12)))', LIMITED),
    ('regex catastrophic', "import re\nprint(re.match('(a+)+$', 'a' * 40 + 'b'))", LIMITED),
    ('itertools count', 'import itertools\nprint(list(itertools.count()))', LIMITED),
    ('itertools product bomb', 'import itertools\nprint(len(list(itertools.product(range(100), repeat=10))))', LIMITED),
    ('huge stdout', "while True:\n    print('x' * 10**5)", LIMITED),
    ('single huge print', "print('x' * 10**8)", LIMITED),
    ('format huge width', "print(len(format(1, '9999999999')))", LIMITED),
    ('percent format huge', "print(len('%*d' % (10**10, 1)))", LIMITED),
    ('math comb huge', 'import math\nprint(math.comb(10**7, 5 * 10**6) % 10)', LIMITED),
    ('fractions huge pow', 'from fractions import Fraction\nprint(Fraction(3, 2) ** 10**8)', LIMITED),
    ('decimal exp huge', 'import decimal\ndecimal.getcontext().prec = 10**6\nprint(str(decimal.Decimal(2).sqrt())[-3:])', LIMITED),
    ('statistics huge', 'import statistics\nprint(statistics.mean(range(10**9)))', LIMITED),
    ('sympy isprime huge', 'import sympy\nprint(sympy.nextprime(10**5000))', LIMITED),
    ('sympy print huge', 'import sympy\nprint(sympy.factorial(10**6))', LIMITED),
    ('itertools tee bomb', 'import itertools\na, b = itertools.tee(itertools.count())\nfor i in a:\n    pass', LIMITED),
    ('collections deque maxlen huge', 'import collections\nd = collections.deque(range(10**9))\nprint(len(d))', LIMITED),
    ('print sep huge', "print(1, 2, sep='x' * 10**7)", LIMITED),
    ('print many args', 'print(*range(10**6))', LIMITED),
    ('int of ten million nines', "print(int('9' * 10**7))", 'ValueError: Exceeds the limit (4300 digits)'),
    ('str of a huge int', 'x = 1 << 10**7\nprint(str(x))', 'ValueError: Exceeds the limit (4300 digits)'),
]

# (case, program, plain Python's output): GSM8K- and MATH-style programs
LEGITIMATE = [
    ('gsm8k eggs', 'eggs = 16\neaten = 3\nbaked = 4\nprice = 2\nprint((eggs - eaten - baked) * price)', '18\n'),
    ('gsm8k robe', 'blue = 2\nwhite = blue / 2\nprint(int(blue + white))', '3\n'),
    ('gsm8k house flip', 'cost = 80000\nrepairs = 50000\nvalue = cost * 2.5\nprint(int(value - cost - repairs))', '70000\n'),
    ('gsm8k sprints', 'print(3 * 3 * 60)', '540\n'),
    ('gsm8k percent', 'price = 40\ndiscount = 0.25\nprint(round(price * (1 - discount), 2))', '30.0\n'),
    ('gsm8k average with fractions', 'from fractions import Fraction\nscores = [Fraction(85), Fraction(92), Fraction(78)]\nprint(sum(scores) / len(scores))', '85\n'),
    ('gsm8k loop days', 'total = 0\nfor day in range(1, 8):\n    total += day * 3\nprint(total)', '84\n'),
    ('gsm8k dict inventory', "inv = {'apples': 12, 'pears': 7}\ninv['apples'] -= 5\ninv['plums'] = 3\nprint(sum(inv.values()), sorted(inv))", "17 ['apples', 'pears', 'plums']\n"),
    ('math quadratic sympy', "import sympy\nx = sympy.symbols('x')\nprint(sorted(sympy.solve(x**2 - 7*x + 10, x)))", '[2, 5]\n'),
    ('math gcd lcm', 'import math\nprint(math.gcd(84, 126), math.lcm(4, 6, 10))', '42 60\n'),
    ('math combinatorics', 'from math import comb, factorial\nprint(comb(10, 3), factorial(6) // (factorial(2) * factorial(2)))', '120 180\n'),
    ('math sum of digits', 'print(sum(int(d) for d in str(2**100)))', '115\n'),
    ('math primes under 100', 'primes = [n for n in range(2, 100) if all(n % p for p in range(2, int(n**0.5) + 1))]\nprint(len(primes), primes[-1])', '25 97\n'),
    ('math modular', 'print(pow(3, 200, 1000), pow(7, -1, 13))', '1 2\n'),
    ('math sympy rational sum', "import sympy\nn = sympy.symbols('n', integer=True, positive=True)\nprint(sympy.summation(1 / (n * (n + 1)), (n, 1, 99)))", '99/100\n'),
    ('math sympy integrate', "import sympy\nx = sympy.Symbol('x')\nprint(sympy.integrate(3 * x**2 + 2 * x, (x, 0, 2)))", '12\n'),
    ('math decimal money', "from decimal import Decimal, ROUND_HALF_UP\nprint((Decimal('19.99') * 3 * Decimal('1.0825')).quantize(Decimal('0.01'), rounding=ROUND_HALF_UP))", '64.92\n'),
    ('math itertools count triples', 'import itertools\nprint(sum(1 for a, b, c in itertools.combinations(range(1, 21), 3) if a + b + c == 30))', '45\n'),
    ('math statistics', 'import statistics\nd = [2, 4, 4, 4, 5, 5, 7, 9]\nprint(statistics.mean(d), statistics.median(d), statistics.pstdev(d))', '5 4.5 2.0\n'),
    ('math collections counter', "from collections import Counter\nc = Counter('mississippi')\nprint(c.most_common(2))", "[('i', 4), ('s', 4)]\n"),
    ('math class and function', 'class Account:\n    def __init__(self, balance):\n        self.balance = balance\n    def deposit(self, x):\n        self.balance += x\n        return self\nprint(Account(100).deposit(50).deposit(25).balance)', '175\n'),
    ('math bisect heapq', 'import bisect, heapq\nprint(bisect.bisect_left([1, 3, 5, 7], 5), heapq.nlargest(2, [5, 1, 9, 3]))', '2 [9, 5]\n'),
    ('math f-string format', "r = 2 / 3\nprint(f'{r:.4f} {1234567:,} {0.5:.0%}')", '0.6667 1,234,567 50%\n'),
    ('math datetime days', 'import datetime\nprint((datetime.date(2024, 3, 1) - datetime.date(2024, 2, 1)).days)', '29\n'),
    ('math cmath root', 'import cmath\nprint(cmath.sqrt(-4))', '2j\n'),
    ('mc letter', "options = {'A': 3, 'B': 5, 'C': 7}\nprint(max(options, key=options.get))", 'C\n'),
    ('math sympy nsimplify', 'import sympy\nprint(sympy.nsimplify(0.125), sympy.Rational(3, 4) + sympy.Rational(1, 6))', '1/8 11/12\n'),
    ('math while loop', 'n, steps = 27, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)', '111\n'),
    ('math recursion memo', 'import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint(fib(90))', '2880067194370816120\n'),
    ('math try except', 'try:\n    x = 1 / 0\nexcept ZeroDivisionError:\n    x = 0\nprint(x)', '0\n'),
    ('math string ops', "s = 'The quick brown fox'\nprint(len(s.split()), s.upper()[:3], s[::-1][:3])", '4 THE xof\n'),
    ('math unicode output', "print('π ≈', round(3.14159, 2), '√2', '½')", 'π ≈ 3.14 √2 ½\n'),
    ('math big int', 'print(2**200 % 10**9, len(str(3**1000)))', '835301376 478\n'),
    ('math sympy stats', "from sympy.stats import Die, E\nX = Die('X', 6)\nprint(E(X))", '7/2\n'),
]


def test_hostile_programs_of_new_kinds_are_refused(sandbox):
    assert hostile_failures(sandbox, ESCAPES, TIGHT) == []
    assert sandbox.run("print(2 + 2)", TIGHT).output == "4\n"


def test_resource_probes_end_in_a_limit_within_the_wall_limit_and_spare_the_worker(sandbox):
    # the wall limit, and the fork, kill and reply around it on loaded cores
    assert resource_failures(sandbox, RESOURCES, TIGHT, 6) == []


def test_programs_a_model_writes_give_plain_pythons_output(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []
