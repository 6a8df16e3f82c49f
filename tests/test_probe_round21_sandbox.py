"""Probe round 21: ``typing`` for programs, what the sandbox returns for a program's odd exception
and output, the modules models use without importing them, and a fresh round of hostile programs.

- ``from typing import List`` (and ``Optional``, ``Dict``, ``Tuple``) was refused, though small models
  write it routinely: ``typing`` is now a default import. What of it would open a hole is refused
  wherever it is reached (``typing`` objects were already reachable through sympy's modules):
  ``get_type_hints`` (hands out a library's annotations, ``type`` among them), ``get_origin`` and
  ``get_args`` (``get_origin(Type)`` is ``type``), ``ForwardRef``, and the helpers that write onto the
  object they are given (``final``, ``no_type_check``, ``runtime_checkable``, ``dataclass_transform``).
  Two holes were open before this round, through the aliases sympy's modules hold: an alias passes
  writes of its attributes to the class it stands for (``Sequence.count = f`` wrote into
  ``collections.abc.Sequence``; ``typing.Counter.most_common = f`` into ``collections.Counter``),
  and ``Type.mro`` (and ``super(numbers.ABCMeta, numbers.ABCMeta).mro``) was ``type.mro`` unbound,
  whose ``mro(numbers.ABCMeta)`` holds ``type``, which C code (``itertools.starmap(operator.call,
  ...)``) then called to make a ``str`` subclass with a ``startswith`` of its own. And a class made
  by ``typing.NamedTuple`` (a tuple subclass, whatever its bases say) took methods of its own.
- An exception class whose name holds control characters (made with a metaclass call) put them raw at
  the start of the result's error (``'E\\x1b[31m\\nFAKE\\r: boom'``): the name is now shown escaped.
- ``printed`` (RestrictedPython's name for what was printed) was the sandbox's collector itself, so
  ``printed.parts.append(5)`` made the child die building its result, reported as a memory cap or a
  refused system call: ``printed`` is now the text printed so far (a ``str``), and the collector
  takes only text.
- In a benchmark's 3,840 programs, 29 failed with ``NameError`` on ``math`` or ``cmath`` used without
  an import: both are bound in a program's namespace when allowed (a program's own ``import math``
  or ``math = ...`` works as before); and 2 were refused for ``if __name__ == "__main__":`` alone: a program
  may now read ``__name__`` (``'__main__'``), not write it.
"""

from __future__ import annotations

import subprocess
import sys

from agora.models.recipes.sandbox import DEFAULT_IMPORTS, SandboxLimits, run_program

from sandbox_probes import hostile_failures, output_failures, resource_failures, restricted_module

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
TIGHT = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=128, output_bytes=4096)
NO_MATH = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096,
                        imports=tuple(m for m in DEFAULT_IMPORTS if m not in ("math", "cmath")))


# ----------------------------------------------------------------------------- typing

def test_typing_is_a_default_import():
    assert "typing" in DEFAULT_IMPORTS


def test_programs_with_type_annotations_from_typing_run(sandbox):
    cases = [
        ("List Optional Dict Tuple", "from typing import List, Optional, Dict, Tuple\n"
         "def f(xs: List[int], d: Optional[Dict[str, int]] = None) -> Tuple[int, int]:\n"
         "    return sum(xs), len(xs)\nprint(f([1, 2, 3]))", "(6, 3)\n"),
        ("import typing", "import typing\ndef g(x: typing.Union[int, float]) -> typing.Any:\n    return x * 2\n"
         "print(g(2.5))", "5.0\n"),
        ("Callable and Iterable", "from typing import Callable, Iterable\n"
         "def apply(f: Callable[[int], int], xs: Iterable[int]) -> list:\n    return [f(x) for x in xs]\n"
         "print(apply(lambda v: v * v, range(4)))", "[0, 1, 4, 9]\n"),
        ("Generic class", "from typing import Generic, TypeVar, List\nT = TypeVar('T')\n"
         "class Stack(Generic[T]):\n    def __init__(self) -> None:\n        self.items: List[T] = []\n"
         "    def push(self, x: T) -> None:\n        self.items.append(x)\ns = Stack[int]()\ns.push(3)\ns.push(4)\n"
         "print(s.items)", None),
        ("functional NamedTuple", "from typing import NamedTuple\nP = NamedTuple('P', [('x', int), ('y', int)])\n"
         "p = P(1, 2)\nprint(p.x + p.y, p)", "3 P(x=1, y=2)\n"),
        ("cast NewType Set FrozenSet", "from typing import cast, NewType, Set, FrozenSet\nUserId = NewType('UserId', int)\n"
         "s: Set[int] = set()\nprint(cast(int, UserId(5)) + 1)", None),
        ("typing Counter and DefaultDict", "import typing\nc = typing.Counter('aab')\n"
         "d = typing.DefaultDict[str, int](int)\nd['k'] += 2\nprint(c.most_common(1), dict(d))",
         "[('a', 2)] {'k': 2}\n"),
        ("overload and Literal", "from typing import overload, Literal, Sequence\n"
         "def h(x: Sequence[int], mode: Literal['sum', 'max'] = 'sum') -> int:\n"
         "    return sum(x) if mode == 'sum' else max(x)\nprint(h([1, 5, 2]), h([1, 5, 2], 'max'))", "8 5\n"),
    ]
    # annotated assignments (``self.items: List[T] = []``) are refused by RestrictedPython's policy
    expected = {"Generic class": "SyntaxError: Line 5: AnnAssign statements are not allowed.",
                "cast NewType Set FrozenSet": "SyntaxError: Line 3: AnnAssign statements are not allowed."}
    runs = {case: sandbox.run(program, LIMITS) for case, program, _ in cases}
    assert {case: (r.status, r.output if case not in expected else r.error) for case, r in runs.items()} == {
        case: ("error", expected[case]) if case in expected else ("ok", output) for case, _, output in cases}
    # the same programs without annotated assignments
    fixed = sandbox.run(cases[3][1].replace("self.items: List[T] = []", "self.items = []"), LIMITS)
    assert (fixed.status, fixed.output) == ("ok", "[3, 4]\n")
    fixed = sandbox.run(cases[5][1].replace("s: Set[int] = set()\n", ""), LIMITS)
    assert (fixed.status, fixed.output) == ("ok", "6\n")


TYPING_REFUSED = [
    ("get_type_hints imported", "from typing import get_type_hints",
     "ImportError: typing.get_type_hints belongs to the module 'typing', which is not allowed (it hands out "
     "annotations' objects, the built-in type among them)"),
    ("get_origin read", "import typing\nprint(typing.get_origin(typing.Type))",
     "AttributeError: 'get_origin' belongs to the module 'typing', which is not allowed (get_origin(Type) is the "
     "built-in type)"),
    ("get_origin mapped", "import typing\nprint(list(map(typing.get_origin, [typing.Type])))",
     "AttributeError: 'get_origin' belongs to the module 'typing', which is not allowed"),
    ("get_args", "from typing import get_args", "ImportError: typing.get_args belongs to the module 'typing'"),
    ("ForwardRef", "import typing\nprint(typing.ForwardRef('1'))",
     "AttributeError: 'ForwardRef' belongs to the module 'typing', which is not allowed (it evaluates a string)"),
    ("final writes onto a library function", "import typing, statistics\ntyping.final(statistics.mean)",
     "AttributeError: 'final' belongs to the module 'typing', which is not allowed (it writes onto what it is given)"),
    ("no_type_check writes onto a library class", "from typing import no_type_check\nimport collections\n"
     "no_type_check(collections.Counter)", "ImportError: typing.no_type_check belongs to the module 'typing'"),
    ("runtime_checkable", "import typing\ntyping.runtime_checkable(typing.SupportsInt)",
     "AttributeError: 'runtime_checkable' belongs to the module 'typing', which is not allowed"),
    ("dataclass_transform", "import typing\nprint(typing.dataclass_transform())",
     "AttributeError: 'dataclass_transform' belongs to the module 'typing', which is not allowed"),
    ("get_overloads", "import typing\nprint(typing.get_overloads)",
     "AttributeError: 'get_overloads' belongs to the module 'typing', which is not allowed"),
    ("typing's sys", "import typing\nprint(typing.sys.modules)", "AttributeError: 'sys' is the module 'sys'"),
    ("typing's types", "import typing\nprint(typing.types.FunctionType)", "AttributeError: 'types' is the module 'types'"),
    ("typing's dict", "import typing\nprint(typing.__dict__)", 'SyntaxError: Line 2: "__dict__" is an invalid attribute'),
    ("typing's private eval", "import typing\nprint(typing._eval_type)", 'SyntaxError: Line 2: "_eval_type" is an invalid'),
    ("the real typing through sympy", "from sympy.printing.smtlib import typing\nprint(typing.get_type_hints)",
     "AttributeError: 'get_type_hints' belongs to the module 'typing', which is not allowed"),
    ("typing NamedTuple class with an attribute shadowing tuple's", "import typing\nclass P(typing.NamedTuple):\n"
     "    index = 5\nprint(P().index)",
     "TypeError: class P: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
]


def test_what_of_typing_would_open_a_hole_is_refused(sandbox):
    typing_limits = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096,
                                  imports=(*DEFAULT_IMPORTS, "typing") if "typing" not in DEFAULT_IMPORTS else DEFAULT_IMPORTS)
    assert hostile_failures(sandbox, TYPING_REFUSED, typing_limits) == []


# holes open before this round, through the typing aliases sympy's modules hold (default imports)
ALIAS_HOLES = [
    ("an alias passes a write to its class", "from sympy.polys.matrices.dense import Sequence\nimport collections.abc\n"
     "Sequence.count = print\nprint(collections.abc.Sequence.count)",
     "TypeError: the sandbox does not let a program change the attribute 'count' of"),
    ("typing.Counter passes a write to collections.Counter", "import typing\ntyping.Counter.most_common = print",
     "TypeError: the sandbox does not let a program change the attribute 'most_common' of"),
    ("an alias passes a delete to its class", "from sympy.polys.matrices.dense import Sequence\ndel Sequence.index",
     "TypeError: the sandbox does not let a program delete the attribute 'index' of"),
    ("Type.mro is type.mro unbound", "from sympy.core.evalf import Type\nimport numbers\nprint(Type.mro(numbers.ABCMeta))",
     "AttributeError: 'mro' is a built-in the sandbox does not give"),
    ("type called by C code with Type.mro", "from sympy.core.evalf import Type\nimport numbers, itertools, operator\n"
     "S = list(itertools.starmap(operator.call, zip(Type.mro(numbers.ABCMeta)[1:2], ['S'], [(str,)],\n"
     "    [{'startswith': lambda *a: False}])))[0]\nprint(S('__x').startswith('_'))",
     "AttributeError: 'mro' is a built-in the sandbox does not give"),
    ("super of a metaclass reaches type.mro", "import numbers\nprint(super(numbers.ABCMeta, numbers.ABCMeta).mro)",
     "AttributeError: 'mro' is a built-in the sandbox does not give"),
    ("Type.mro in a format field", "from sympy.core.evalf import Type\nprint('{0.mro}'.format(Type))",
     "AttributeError: 'mro' is a built-in the sandbox does not give"),
    ("Type.mro through attrgetter", "import operator\nfrom sympy.core.evalf import Type\n"
     "print(operator.attrgetter('mro')(Type))", "AttributeError: 'mro' is a built-in the sandbox does not give"),
    ("NamedTuple class with methods of its own", "from sympy.utilities.matchpy_connector import NamedTuple\n"
     "class P(NamedTuple):\n    def count(self, x):\n        return '__class__'\nprint(P().count(1))",
     "TypeError: class P: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
    ("TypedDict class with methods of its own", "import typing\nclass D(typing.TypedDict):\n    def keys(self):\n"
     "        return ['__class__']\nprint(D(a=1).keys())",
     "TypeError: class D: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"),
]


def test_typing_aliases_pass_no_write_and_give_no_type(sandbox):
    assert hostile_failures(sandbox, ALIAS_HOLES, LIMITS) == []
    # what stays: reading an alias's class's attributes, subscripting, int.mro()
    run = sandbox.run("import typing\nprint(typing.Dict.fromkeys('ab', 0), typing.List[int], int.mro())", LIMITS)
    assert (run.status, run.output) == ("ok", "{'a': 0, 'b': 0} typing.List[int] [<class 'int'>, <class 'object'>]\n")


# ----------------------------------------------------------------------------- what the sandbox returns

def test_an_exception_class_name_with_control_characters_is_shown_escaped(sandbox):
    run = sandbox.run("import numbers\nE = numbers.ABCMeta('E\\x1b[31m\\nFAKE\\r', (Exception,), {})\nraise E('boom')",
                      LIMITS)
    assert (run.status, run.error) == ("error", "'E\\x1b[31m\\nFAKE\\r': boom")
    # a name that is an identifier is shown as it is; so is one with a dot or non-ASCII letters
    run = sandbox.run("import numbers\nE = numbers.ABCMeta('Ärger', (Exception,), {})\nraise E('x')", LIMITS)
    assert run.error == "Ärger: x"
    run = sandbox.run("import numbers\nE = numbers.ABCMeta('ValueError: fake', (Exception,), {})\nraise E('x')", LIMITS)
    assert run.error == "'ValueError: fake': x"


def test_printed_is_the_text_printed_so_far_and_the_collector_is_out_of_reach(sandbox):
    run = sandbox.run("print(1)\nprint(repr(printed))", LIMITS)
    assert (run.status, run.output) == ("ok", "1\n'1\\n'\n")
    run = sandbox.run("def f():\n    print('a')\n    return printed\nx = f()\nprint(len(x) > 0)", LIMITS)
    assert (run.status, run.output) == ("ok", "a\nTrue\n")
    for program, error in (("print(1)\nprinted.parts.append(5)", "AttributeError: 'str' object has no attribute 'parts'"),
                           ("print(1)\nprinted.write(5)", "AttributeError: 'str' object has no attribute 'write'"),
                           ("print(1)\nprinted.cap = 10**9", "AttributeError: 'str' object has no attribute 'cap'")):
        run = sandbox.run(program, LIMITS)
        assert (run.status, run.output, run.error) == ("error", "1\n", error), program


def test_the_collector_takes_only_text():
    restricted = restricted_module("_r21_printer")
    printer = restricted._Printer(100)
    try:
        printer.write(5)
    except TypeError as exc:
        assert str(exc) == "write() argument must be str, not int"
    else:
        raise AssertionError("a non-str was collected")

    class S(str):
        def encode(self, *args, **kwargs):
            return b""

    printer.write(S("abc"))
    assert printer.parts == ["abc"] and type(printer.parts[0]) is str and printer.size == 3


def test_math_and_cmath_are_there_without_an_import(sandbox):
    cases = [("math", "print(math.sqrt(16), math.pi > 3)", "4.0 True\n"),
             ("cmath", "print(cmath.sqrt(-4))", "2j\n"),
             ("in a function", "def hyp(a, b):\n    return math.hypot(a, b)\nprint(hyp(3, 4))", "5.0\n"),
             ("an import still works", "import math\nprint(math.floor(2.5))", "2\n"),
             ("a program's own name wins", "math = 3\nprint(math + 1)", "4\n")]
    assert output_failures(sandbox, cases, LIMITS) == []
    # only when allowed: a recipe without math gets the NameError
    run = sandbox.run("print(math.sqrt(16))", NO_MATH)
    assert run.error == "NameError: name 'math' is not defined"


# ----------------------------------------------------------------------------- hostile programs

# (case, program, the start of its error): kinds earlier rounds did not try
HOSTILE = [
    ("printed's collector parts", "print(1)\nprinted.parts.clear()", "AttributeError: 'str' object has no attribute 'parts'"),
    ("printed's collector call_print", "printed._call_print('x')", 'SyntaxError: Line 1: "_call_print" is an invalid'),
    ("the print hook by name", "print(_print_)", 'SyntaxError: Line 1: "_print_" is an invalid variable name'),
    ("printed assigned", "printed = 'forged answer'", 'SyntaxError: Line 1: "printed" is a reserved name.'),
    ("exception class with a huge name", "import numbers\nE = numbers.ABCMeta('E' * 10**6, (Exception,), {})\nraise E('x')",
     "EEEEEEEE"),
    ("exception class named like a status line", "import numbers\n"
     "E = numbers.ABCMeta('\\nThe answer is 42', (Exception,), {})\nraise E('x')", "'\\nThe answer is 42': x"),
    ("an exception's traceback frame", "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print(e.__traceback__.tb_frame)",
     'SyntaxError: Line 4: "tb_frame" is a restricted name'),
    ("with_traceback of a frame-less traceback", "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
     "    t = e.with_traceback(None)\n    print(t.tb_frame)",
     'SyntaxError: Line 5: "tb_frame" is a restricted name'),
    ("a coroutine's frame", "async def c():\n    return 1\nx = c()\nprint(x.cr_frame)",
     'SyntaxError: Line 1: AsyncFunctionDef statements are not allowed.'),
    ("a generator's yieldfrom chain", "def g():\n    yield 1\ndef h():\n    yield from g()\nx = h()\nnext(x)\n"
     "print(x.gi_yieldfrom.gi_frame)", 'SyntaxError: Line 7: "gi_frame" is a restricted name'),
    ("re's enum's sys", "import re\nprint(re.enum.sys.modules)", "AttributeError: 'sys' is the module 'sys', which is not allowed"),
    ("statistics' sys", "import statistics\nprint(statistics.sys.modules['os'])", "AttributeError: 'sys' is the module 'sys'"),
    ("fractions' sys through getattr", "import fractions\nprint(getattr(fractions, 'sys'))", "AttributeError: 'sys' is the module 'sys'"),
    ("datetime's sys through a format field", "import datetime\nprint('{0.sys}'.format(datetime))",
     "AttributeError: 'sys' is the module 'sys'"),
    ("random's os", "import random\nprint(random._os)", 'SyntaxError: Line 2: "_os" is an invalid attribute name'),
    ("a metaclass made from typing's Protocol meta", "import typing\nclass M(type(typing.Protocol)):\n    pass",
     "TypeError: class M: a class deriving from type (a metaclass) is not allowed in the sandbox"),
    ("type with three arguments", "T = type('T', (str,), {'startswith': lambda s, p: False})",
     "TypeError: type(name, bases, namespace) is not available in the sandbox"),
    ("a decorator handing back type", "import sympy\n@sympy.Basic.func.fget\nclass C:\n    pass\nprint(C)", "TypeError"),
    ("signal through a reachable module", "import sympy.utilities.timeutils as t\nprint(t.signal)",
     "ImportError: import of 'sympy.utilities.timeutils' is not allowed"),
    ("fork through a reachable module", "import random\nprint(random.os.fork)", "AttributeError: module 'random' has no attribute 'os'"),
    ("typing.Type called to make a class", "import typing\nprint(typing.Type('X', (str,), {}))",
     "TypeError: Type Type cannot be instantiated"),
    ("typing.Type subscripted and called", "import typing\nprint(typing.Type[str]('X', (str,), {}))",
     "TypeError: Type Type cannot be instantiated"),
    ("builtins reassigned", "__builtins__ = {}\nprint(1)", 'SyntaxError: Line 1: "__builtins__" is an invalid variable name'),
    ("a Generic alias's origin", "import typing\nprint(typing.List.__origin__)", 'SyntaxError: Line 2: "__origin__" is an invalid'),
]


def test_hostile_programs_of_new_kinds_are_refused(sandbox):
    assert len(HOSTILE) >= 20
    assert hostile_failures(sandbox, HOSTILE, LIMITS, leaked=("ESCAPED",)) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"


LIMITED = ("TimeoutError: the program ", "MemoryError", "Killed: ", "RecursionError", "OutputLimit: ",
           "ValueError: Exceeds the limit")

RESOURCES = [
    ("a power tower", "x = 10 ** 10 ** 8\nprint(x % 7)"),
    ("a string of a terabyte", "print(len('x' * 10**12))"),
    ("a nested list's repr", "a = []\nfor _ in range(10**6):\n    a = [a]\nprint(a)"),
    ("a deep recursion through a typing alias", "import typing\ndef f(t):\n    return f(typing.List[t])\nf(int)"),
    ("printed read back in a loop", "print('x' * 100)\nfor i in range(10**6):\n    print(printed)"),
]


def test_resource_probes_end_in_a_limit_and_spare_the_worker(sandbox):
    assert resource_failures(sandbox, [(case, program, LIMITED) for case, program in RESOURCES], TIGHT, 12) == []


# ----------------------------------------------------------------------------- legitimate programs

LEGITIMATE = [
    ("typing List Optional", "from typing import List, Optional\n"
     "def first_even(xs: List[int]) -> Optional[int]:\n    for x in xs:\n        if x % 2 == 0:\n            return x\n"
     "    return None\nprint(first_even([3, 5, 8, 10]), first_even([1]))"),
    ("typing Dict Tuple", "from typing import Dict, Tuple\n"
     "def stats(d: Dict[str, int]) -> Tuple[int, float]:\n    return sum(d.values()), sum(d.values()) / len(d)\n"
     "print(stats({'a': 2, 'b': 4}))"),
    ("typing Union Any Callable", "from typing import Union, Any, Callable\n"
     "def twice(f: Callable[[Any], Any], x: Union[int, str]) -> Any:\n    return f(f(x))\nprint(twice(lambda v: v * 2, 3), twice(str.upper, 'ab'))"),
    ("typing TypeVar Generic", "from typing import TypeVar, Generic\nT = TypeVar('T')\nclass Box(Generic[T]):\n"
     "    def __init__(self, v: T) -> None:\n        self.v = v\n    def get(self) -> T:\n        return self.v\nprint(Box(7).get(), Box[str]('s').get())"),
    ("typing NamedTuple", "from typing import NamedTuple\nPoint = NamedTuple('Point', [('x', float), ('y', float)])\n"
     "p = Point(3.0, 4.0)\nprint((p.x ** 2 + p.y ** 2) ** 0.5, p)"),
    ("typing Iterator generator", "from typing import Iterator\ndef fib(n: int) -> Iterator[int]:\n    a, b = 0, 1\n"
     "    for _ in range(n):\n        yield a\n        a, b = b, a + b\nprint(list(fib(10)))"),
    ("typing Set FrozenSet Sequence Mapping", "from typing import Set, FrozenSet, Sequence, Mapping\n"
     "def uniq(xs: Sequence[int]) -> FrozenSet[int]:\n    return frozenset(xs)\ndef keys(m: Mapping[str, int]) -> Set[str]:\n"
     "    return set(m)\nprint(sorted(uniq([1, 1, 2])), sorted(keys({'b': 1, 'a': 2})))"),
    ("typing cast and Literal", "from typing import cast, Literal\nMode = Literal['a', 'b']\n"
     "def pick(m: Mode) -> int:\n    return 1 if m == 'a' else 2\nprint(pick(cast(Mode, 'b')))"),
    ("a function defined and called with annotations", "import math\nfrom typing import List\n"
     "def mean(xs: List[float]) -> float:\n    return math.fsum(xs) / len(xs)\nprint(mean([1.0, 2.0, 4.5]))"),
    ("int mro and isinstance", "print(int.mro(), isinstance(True, int), issubclass(bool, int))"),
    ("Type in an annotation", "from typing import Type\ndef make(cls: Type[int]) -> int:\n    return cls(5)\nprint(make(int))"),
]


def plain_python(program: str) -> str:
    """What ``program`` prints under plain Python (this interpreter, no sandbox)."""
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_programs_a_model_writes_give_plain_pythons_output(sandbox):
    cases = [(case, program, plain_python(program)) for case, program in LEGITIMATE]
    assert len(cases) >= 10
    assert output_failures(sandbox, cases, LIMITS) == []


def test_the_main_guard_runs_and_name_stays_unwritable(sandbox):
    # ``if __name__ == "__main__": main()``: 2 of a benchmark's 3,840 programs were refused for it
    cases = [("main guard", "def main():\n    print(6 * 7)\nif __name__ == '__main__':\n    main()", "42\n"),
             ("name read in a function", "def f():\n    return __name__\nprint(f())", "__main__\n"),
             ("a class's module", "class A:\n    pass\nprint(repr(A))", "<class '__main__.A'>\n")]
    assert output_failures(sandbox, cases, LIMITS) == []
    refused = [("name assigned", "__name__ = 'sympy.core'\nclass A:\n    pass",
                'SyntaxError: Line 1: "__name__" is an invalid variable name because it starts with "_"'),
               ("name deleted", "del __name__", 'SyntaxError: Line 1: "__name__" is an invalid variable name'),
               ("name as a loop target", "for __name__ in ['x']:\n    pass",
                'SyntaxError: Line 1: "__name__" is an invalid variable name'),
               ("name as a parameter", "def f(__name__):\n    return 1", 'SyntaxError: Line 1: "__name__" is an invalid'),
               ("name's attribute", "print(__name__.__class__)", 'SyntaxError: Line 1: "__class__" is an invalid attribute'),
               ("other dunder globals", "print(__builtins__)", 'SyntaxError: Line 1: "__builtins__" is an invalid variable')]
    assert hostile_failures(sandbox, refused, LIMITS) == []


# ------------------------------------------------------------------ a break-it pass after round 21

def test_from_future_import_annotations_runs_and_the_module_stays_out_of_reach():
    """Typed code's usual first line was refused (``import of '__future__' is not allowed``); the
    features are compiler directives, so ``from __future__ import ...`` of a feature name runs, while
    the module itself and a name that is no feature stay refused."""
    typed = "from __future__ import annotations\ndef f(x: int) -> list[int]:\n    return [x + 1]\nprint(f(2))\n"
    assert (run_program(typed, LIMITS).status, run_program(typed, LIMITS).output) == ("ok", "[3]\n")
    aliased = "from __future__ import annotations as a, division\nprint(a.getOptionalRelease())\n"
    assert run_program(aliased, LIMITS).output == "(3, 7, 0, 'beta', 1)\n"
    module = run_program("import __future__\nprint(__future__)\n", LIMITS)
    assert module.status == "error" and module.error.startswith('SyntaxError: Line 1: "__future__" is an invalid')
    unknown = run_program("from __future__ import sys\n", LIMITS)
    assert (unknown.status, unknown.error) == ("error", "SyntaxError: future feature sys is not defined")
