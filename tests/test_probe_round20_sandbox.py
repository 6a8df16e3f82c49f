"""Probe round 20: the program-of-thought recipe's handling of a model's reply, and a fresh round of
hostile programs.

- Finding a reply's fenced blocks took time quadratic in the reply's length when its backticks had no
  line after them (a small model stuck repeating a fence): a regular expression looked for the end of
  the line anew from each of the reply's backticks, in Agora's own process, with no time limit (48 KB
  of ``````` took 1.4 CPU seconds, so 400 KB about a minute and a half). The blocks are now found in one pass; what
  is found is what the expression found.
- Refused or limited, as before, with the worker healthy for the next program: ``Enum`` classes with
  a value type whose ``member``/``nonmember`` or ``StrEnum`` methods shadow ``str``'s, frames reached
  through an exception's arguments or a ``match`` class pattern, writes into a ``singledispatch``
  registry, modules and types reached through ``collections.abc``, ``re`` and ``enum``, a decimal
  context of the program's making; C-level recursion through nested iterators, huge binomials,
  fractions, decimals, padding, joins and translations, colliding hashes, exception chains.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys

from agora.models.recipes.pot import extract_program, fenced_blocks
from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, resource_failures

#: The expression the fenced blocks were found with before this round: the reference for what they are.
OLD_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def test_fenced_blocks_are_what_the_expression_found():
    pieces = ["```", "``", "`", "\n", "python", "py ", " \t", "x = 1", "print(2)", "-+_", "é", " ```", "\r\n"]
    rng = random.Random(20)
    texts = ["", "```", "```\n", "a\n```text\n1\n```\n```python\nprint(2)\n```", "```python\nprint(5)",
             "````\nx\n````", "``` ```\nbody\n```", "```py extra words\nprint(1)\n```tail```\n2"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30))) for _ in range(3000)]
    for text in texts:
        assert fenced_blocks(text) == OLD_FENCE.findall(text), repr(text)


class _OverTime(Exception):
    pass


def _within_cpu_seconds(seconds: float, function, *args):
    """``function(*args)``, or ``_OverTime`` once this process has used ``seconds`` more CPU seconds
    (``ITIMER_PROF``; the regular-expression engine checks for signals as it runs)."""
    def over(signum, frame):
        raise _OverTime(f"more than {seconds} CPU seconds")

    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return function(*args)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_a_reply_of_repeated_fences_is_read_in_linear_time():
    # 400 KB replies: before, over a minute of CPU each (the scan is quadratic; 48 KB took 1.4 s);
    # one pass takes milliseconds: the bound is far from both, whatever the machine
    replies = ("```" * 133_000, "``` " * 100_000, "```python " * 40_000, "x\n" + "```" * 133_000)
    for reply in replies:
        assert _within_cpu_seconds(5.0, extract_program, reply) is None, reply[:12]
    assert _within_cpu_seconds(5.0, extract_program, "```" * 133_000 + "\nprint(1)\n```") == "print(1)"
    assert extract_program("```python\nprint(5)") == "print(5)"


# ----------------------------------------------------------------------------- programs in the sandbox

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: resource probes: a second of CPU, a short wall limit
TIGHT = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=128, output_bytes=4096)
SHADOW = "TypeError: class E: a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"

# (case, program, the start of its error): hostile programs of kinds earlier rounds did not try
HOSTILE = [
    ("StrEnum shadowing upper", "import enum\nclass E(enum.StrEnum):\n    A = enum.auto()\n    def upper(self):\n"
     "        return '__class__'\nprint(E.A.upper())", SHADOW),
    ("enum nonmember shadowing split", "import enum\nclass E(str, enum.Enum):\n    A = 'a'\n"
     "    split = enum.nonmember(lambda *a: 1)\nprint(E.A.split('x'))", SHADOW),
    ("enum member shadowing startswith", "import enum\nclass E(str, enum.Enum):\n    A = 'a'\n"
     "    startswith = enum.member('zz')\nprint(E.A.startswith('_'))", SHADOW),
    ("functional enum member named startswith", "import enum\nE = enum.Enum('E', [('startswith', 'x')], type=str)\n"
     "print(E.startswith)", SHADOW),
    ("enum's _missing_", "import enum\nclass E(enum.Enum):\n    A = 1\nprint(E._missing_)",
     'SyntaxError: Line 4: "_missing_" is an invalid attribute name because it starts with "_".'),
    ("enum's DynamicClassAttribute", "import enum\nprint(enum.DynamicClassAttribute)",
     "AttributeError: 'DynamicClassAttribute' belongs to the module 'types', which is not allowed"),
    ("collections.abc's sys", "import collections.abc as c\nprint(c.sys)",
     "AttributeError: module 'collections.abc' has no attribute 'sys'"),
    ("re's sre_parse", "import re\nprint(re.sre_parse)", "AttributeError: module 're' has no attribute 'sre_parse'"),
    ("singledispatch registry written", "import functools\n@functools.singledispatch\ndef f(x):\n    return 0\n"
     "f.registry[int] = print\nprint(f(1))", "TypeError: 'mappingproxy' object does not support item assignment"),
    ("decimal context of a program object", "import decimal\nclass C:\n    prec = 5\ndecimal.setcontext(C())",
     "TypeError: argument must be a context"),
    ("generator frame through an exception's args", "def g():\n    yield 1\ntry:\n    raise ValueError(g())\n"
     "except ValueError as e:\n    print(e.args[0].gi_frame)",
     'SyntaxError: Line 6: "gi_frame" is a restricted name, that is forbidden to access in RestrictedPython.'),
    ("class pattern keyword reading gi_frame", "def g():\n    yield 1\nx = g()\nnext(x)\nmatch x:\n"
     "    case object(gi_frame=f):\n        print(f)", "SyntaxError: Line 5: Match statements are not allowed."),
    ("cached_property's instance dict", "import functools\nclass A:\n    @functools.cached_property\n"
     "    def x(self):\n        return 5\nprint(A.__dict__)",
     'SyntaxError: Line 6: "__dict__" is an invalid attribute name because it starts with "_".'),
    ("namedtuple's module read back", "import collections\nP = collections.namedtuple('P', 'a', module='sympy')\n"
     "print(P.__module__)", 'SyntaxError: Line 3: "__module__" is an invalid attribute name because it starts with "_".'),
    ("dir of a module", "import sympy.parsing.sympy_parser as p\nprint(dir(p))", "NameError: name 'dir' is not defined"),
    ("copy module", "import copy\nprint(copy)", "ImportError: import of 'copy' is not allowed"),
    ("format spec with a field", "print(format(1+2j, '{0.__class__}'))", "ValueError: Invalid format specifier"),
    ("super object's format", "class S(str):\n    pass\nprint(super(S, S('{0.__class__}')).format)",
     "NotImplementedError: 'format' of a super() object is not available in the sandbox"),
]


def test_a_dom_builder_that_opens_urls_is_not_reachable_through_sympys_mathml_printer(sandbox):
    # the printer's ``dom`` is an ``xml.dom.minidom`` document; its implementation's ``createDOMBuilder``
    # gave a builder whose ``parseURI`` opens URLs through ``urllib`` (stopped before only because
    # importing ``http`` failed in a child): ``xml`` is now unreachable, like ``urllib``
    run = sandbox.run("from sympy.printing.mathml import MathMLContentPrinter\n"
                      "b = MathMLContentPrinter().dom.implementation.createDOMBuilder\nprint(b)", LIMITS)
    assert run.failure == ("AttributeError: 'createDOMBuilder' belongs to the module 'xml.dom.xmlbuilder', "
                           "which is not allowed"), (run.status, run.output)
    # sympy's MathML printing itself still runs
    ok = sandbox.run("import sympy\nx = sympy.Symbol('x')\nprint(sympy.mathml(x + 1))", LIMITS)
    assert (ok.status, ok.output) == ("ok", "<apply><plus/><ci>x</ci><cn>1</cn></apply>\n")


def test_hostile_programs_of_new_kinds_are_refused(sandbox):
    assert hostile_failures(sandbox, HOSTILE, LIMITS, leaked=("ESCAPED",)) == []
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"


#: resource probes' outcomes: a limit (CPU or wall time, memory, recursion, digits)
LIMITED = ("TimeoutError: the program ", "MemoryError", "Killed: ", "RecursionError", "OutputLimit: ",
           "ValueError: Exceeds the limit",
           # the memory cap met inside C code that does not report its failed allocation (a deque grown
           # from ``itertools.count()`` under 128 MB, on some machines): the program stops, the worker lives
           "SystemError: <class 'collections.deque'> returned NULL without setting an exception")

# (case, program): programs that exhaust a resource, each far past the limits on any machine
RESOURCES = [
    ("choices of a billion", "import random\nprint(len(random.choices(range(10), k=10**9)))"),
    ("a huge binomial", "import math\nprint(math.comb(10**7, 5 * 10**6) % 7)"),
    ("a fraction of a huge exponent", "from fractions import Fraction\nprint(Fraction('1e1000000000') > 1)"),
    ("a decimal of a huge exponent to int", "import decimal\nprint(int(decimal.Decimal('1e100000000')) % 7)"),
    ("combinations without end", "import itertools\nn = 0\nfor c in itertools.combinations(range(100), 50):\n    n += 1\nprint(n)"),
    ("a deque of count", "import collections, itertools\nd = collections.deque(itertools.count())"),
    ("nested heapq merges", "import heapq\nx = iter([1])\nfor i in range(10**6):\n    x = heapq.merge(x)\nprint(next(x))"),
    ("nested maps", "x = iter([1])\nfor i in range(10**6):\n    x = map(abs, x)\nprint(next(x))"),
    ("nested zips", "x = iter([1])\nfor i in range(10**6):\n    x = zip(x)\nprint(next(x))"),
    ("nested chains", "import itertools\nx = iter([1])\nfor i in range(10**6):\n    x = itertools.chain(x)\nprint(next(x))"),
    ("median of a billion", "import statistics\nprint(statistics.median(range(10**9)))"),
    ("center to ten billion", "print(len('x'.center(10**10)))"),
    ("format width of ten billion", "print(len('{:>{w}}'.format(1, w=10**10)))"),
    ("colliding hashes", "class K:\n    def __init__(self, v):\n        self.v = v\n    def __hash__(self):\n        return 0\n"
     "    def __eq__(self, o):\n        return self.v == o.v\nd = {}\nfor i in range(10**5):\n    d[K(i)] = i\nprint(len(d))"),
    ("a hundred million lists", "x = [[] for _ in range(10**8)]\nprint(len(x))"),
    ("a deep exception context chain", "def f(n):\n    try:\n        raise ValueError(n)\n    except ValueError:\n"
     "        if n:\n            f(n - 1)\n        raise\nf(5000)"),
    ("percent format of a huge int", "print('%d' % (10 ** 5000))"),
    ("translate to ten billion characters", "t = {97: 'x' * 10**6}\nprint(len(('a' * 10**4).translate(t)))"),
    ("bytes join of ten gigabytes", "print(len(b''.join([b'x' * 10**6] * 10**4)))"),
    ("empty prints without end", "for i in range(10**8):\n    print('', end='')\nprint(1)"),
    ("primes below a billion", "import sympy\nprint(len(list(sympy.primerange(1, 10**9))))"),
    ("str of a huge factorial", "import math\nprint(str(math.factorial(10**5))[:5])"),
]


def test_resource_probes_end_in_a_limit_and_spare_the_worker(sandbox):
    # the wall limit, and the fork, kill and reply around it on loaded cores: generous
    assert resource_failures(sandbox, [(case, program, LIMITED) for case, program in RESOURCES], TIGHT, 12) == []


# (case, program): what models write, each giving plain Python's output
LEGITIMATE = [
    ('datetime now type', 'import datetime\nn = datetime.datetime.now()\nprint(n.year > 2000, datetime.date.today().year > 2000)'),
    ('StrEnum', "import enum\nclass C(enum.StrEnum):\n    RED = enum.auto()\n    BLUE = 'b'\nprint(C.RED, C.RED.upper(), C('b').name, list(C))"),
    ('IntFlag', 'import enum\nclass P(enum.IntFlag):\n    R = 4\n    W = 2\n    X = 1\nprint(P.R | P.W, int(P.R | P.X), P(6))'),
    ('NormalDist', 'import statistics\nd = statistics.NormalDist(100, 15)\nprint(round(d.cdf(130), 4), round(d.inv_cdf(0.5), 2))'),
    ('linear regression', 'import statistics\nr = statistics.linear_regression([1, 2, 3, 4], [2, 4, 6, 8.5])\nprint(round(r.slope, 3), round(r.intercept, 3), round(statistics.correlation([1,2,3],[1,2,4]), 4))'),
    ('pairwise', 'import itertools\nprint(list(itertools.pairwise([1, 4, 9, 16])))'),
    ('math newer', 'import math\nprint(math.comb(10, 3), math.perm(5, 2), math.isqrt(99), math.lcm(4, 6, 10), math.prod([1, 2, 3, 4]), math.dist((0, 0), (3, 4)))'),
    ('deque chainmap ordereddict', "from collections import deque, ChainMap, OrderedDict\nd = deque([1, 2, 3])\nd.rotate(1)\nc = ChainMap({'a': 1}, {'a': 2, 'b': 3})\no = OrderedDict(a=1, b=2)\no.move_to_end('a')\nprint(list(d), c['a'], c['b'], list(o))"),
    ('counter arithmetic', "from collections import Counter\na = Counter('aabbc')\nb = Counter('abd')\nprint(sorted((a - b).items()), sorted((a & b).items()), (a + b).total())"),
    ('decimal quantize', "from decimal import Decimal, ROUND_HALF_UP\nprint(Decimal('2.675').quantize(Decimal('0.01'), rounding=ROUND_HALF_UP), Decimal('1') / Decimal('3'))"),
    ('random seeded', "import random\nrandom.seed(42)\nprint(random.randint(1, 100), random.choice('abc'), round(random.random(), 6))"),
    ('cmath', 'import cmath\nprint(cmath.phase(-1), abs(cmath.sqrt(-4)), cmath.polar(1j))'),
    ('heapq merge bisect insort', 'import heapq, bisect\nprint(list(heapq.merge([1, 4], [2, 3])))\nL = [1, 3]\nbisect.insort(L, 2)\nprint(L)'),
    ('regex named groups', "import re\nm = re.fullmatch(r'(?P<h>\\d+):(?P<m>\\d+)', '12:30')\nprint(m.group('h'), m['m'], m.groupdict(), re.split(r'[,;]', 'a,b;c'))"),
    ('string constants', "import string\nprint(string.ascii_lowercase[:5], string.digits, string.capwords('hello world'))"),
    ('cmp_to_key itemgetter', "import functools, operator\nL = [(1, 'b'), (2, 'a')]\nprint(sorted(L, key=operator.itemgetter(1)), sorted([3, 1, 2], key=functools.cmp_to_key(lambda a, b: b - a)))"),
    ('print sep', "print(*[1, 2, 3], sep=', ')"),
    ('fstring debug', "x = 7\nprint(f'{x=}', f'{x*2 = }', f'{3.14159:.2f}')"),
    ('walrus', 'data = [1, 5, 9]\nif (n := len(data)) > 2:\n    print(n)\nprint([y for x in data if (y := x * 2) > 4])'),
    ('fraction ops', 'from fractions import Fraction\nf = Fraction(22, 7)\nprint(f.limit_denominator(5), f.numerator, round(float(f), 2), Fraction(1, 3) ** 2)'),
    ('date weekday', "import datetime\nd = datetime.date(2024, 3, 15)\nprint(d.weekday(), d.isoformat(), d.isocalendar()[1], datetime.datetime(2024, 1, 1, 12).strftime('%Y-%m-%d %H:%M'), datetime.datetime.strptime('2024-02-03', '%Y-%m-%d').day)"),
    ('operator functions', "import operator\nfrom functools import reduce\nprint(reduce(operator.mul, range(1, 6)), operator.add(2, 3), operator.attrgetter('real')(3+4j), operator.methodcaller('upper')('ab'))"),
    ('itertools misc', "import itertools\nprint(list(itertools.islice(itertools.cycle('ab'), 5)), list(itertools.groupby('aabbbc'))[1][0], list(itertools.zip_longest([1, 2], [3], fillvalue=0)), list(itertools.compress('abc', [1, 0, 1])))"),
    ('dict and set comprehension', 'sq = {i: i * i for i in range(5)}\nev = {x for x in range(10) if x % 2 == 0}\nprint(sq, sorted(ev), sum(sq.values()))'),
    ('class inheritance super', 'class A:\n    def __init__(self, x):\n        self.x = x\n    def f(self):\n        return self.x\nclass B(A):\n    def __init__(self, x, y):\n        super().__init__(x)\n        self.y = y\n    def f(self):\n        return super().f() + self.y\nprint(B(1, 2).f(), isinstance(B(1, 2), A))'),
    ('math inf nan', "import math\nprint(math.inf > 10**100, math.isnan(float('nan')), math.isclose(0.1 + 0.2, 0.3), math.gcd(0, 5), round(2.5), round(3.5))"),
    ('divmod pow mod inverse', "print(divmod(17, 5), pow(3, -1, 7), pow(2, 100, 1000), int('ff', 16), bin(10), f'{255:08b}')"),
    ('sympy rational answer', "import sympy\nx = sympy.symbols('x')\nprint(sympy.solve(sympy.Eq(3 * x + 2, 11), x)[0], sympy.Rational(3, 4) + sympy.Rational(1, 4), sympy.sqrt(50))"),
    ('statistics mode and quantiles', "import statistics\nprint(statistics.mode([1, 1, 2]), statistics.multimode('aabbc'), statistics.quantiles([1, 2, 3, 4, 5, 6, 7, 8], n=4), statistics.pvariance([1, 2, 3, 4]))"),
]


def plain_python(program: str) -> str:
    """What ``program`` prints under plain Python (this interpreter, no sandbox)."""
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_programs_a_model_writes_give_plain_pythons_output(sandbox):
    assert len(LEGITIMATE) >= 25
    cases = [(case, program, plain_python(program)) for case, program in LEGITIMATE]
    assert output_failures(sandbox, cases, LIMITS) == []
