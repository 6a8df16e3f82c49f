"""Hostile programs in the program-of-thought sandbox: each contained, each a failed sample with its
error, and no file written outside the program's folder."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.recipes.sandbox import Sandbox, SandboxLimits, run_program, sandbox_layers
from agora.models.testing import ScriptedChatModel
from agora.tasks.answers import find_answer

LIMITS = SandboxLimits(cpu_s=1, wall_s=4, memory_mb=256, output_bytes=65_536)
POT = {"name": "pot", "cpu_s": 1, "wall_s": 4, "memory_mb": 256}


def hostile(marker: Path) -> list[tuple[str, str, str]]:
    """(case, program, the start of its error): the issue's list, with ``marker`` a path outside the folder."""
    return [
        ("infinite loop", "while True:\n    pass", "TimeoutError: the program "),  # its CPU-time limit, or on a loaded machine its wall-time limit first
        ("fork bomb", "import os\nwhile True:\n    os.fork()", "ImportError: import of 'os' is not allowed"),
        ("10 GB allocation", "x = bytearray(10 * 1024 ** 3)\nprint(len(x))", "MemoryError"),
        ("10 GB list", "x = [0] * (10 ** 10 // 8)\nprint(len(x))", "MemoryError"),
        ("os.system", f"import os\nos.system('touch {marker}')\nprint(1)", "ImportError: import of 'os' is not allowed"),
        ("subprocess", f"import subprocess\nsubprocess.run(['touch', '{marker}'])", "ImportError: import of 'subprocess'"),
        ("read /etc/passwd", "print(open('/etc/passwd').read())", "NameError: name 'open' is not defined"),
        ("write outside", f"f = open('{marker}', 'w')\nf.write('x')\nprint(1)", "NameError: name 'open' is not defined"),
        ("import socket", "import socket\ns = socket.create_connection(('127.0.0.1', 80))", "ImportError: import of 'socket'"),
        ("100 MB of output", "print('x' * 100_000_000)", "OutputLimit: the program printed more than 65536 bytes"),
        ("output in a loop", "while True:\n    print('y' * 1000)", "OutputLimit"),
        ("__import__", "os = __import__('os')\nprint(os.listdir('/'))", "SyntaxError: Line 1: \"__import__\" is an invalid"),
        ("subclasses walk", "print(().__class__.__bases__[0].__subclasses__())", "SyntaxError: Line 1: \"__subclasses__\""),
        ("getattr trick", "c = getattr((), '__class__')\nprint(c)", "AttributeError: \"__class__\" is an invalid attribute"),
        ("format trick", "print('{0.__class__}'.format(()))", "AttributeError: \"__class__\" is an invalid attribute"),
        ("a module's os", "import sympy\nprint(sympy.utilities.misc.os.getcwd())", "AttributeError: 'os' is the module 'os'"),
        ("from-import of os", "from sympy.utilities.misc import os\nprint(os.getcwd())", "ImportError: sympy.utilities.misc.os is the module 'os'"),
        ("eval", "print(eval('1 + 1'))", "SyntaxError: Line 1: Eval calls are not allowed"),
        ("sympy parse_expr", "from sympy.parsing.sympy_parser import parse_expr\nprint(parse_expr(\"__import__('os').getcwd()\"))",
         "SyntaxError: Line 1: \"__import__\" is an invalid"),
        ("sympify", "import sympy\nprint(sympy.sympify(\"__import__('os').getcwd()\"))", "SympifyError"),
        ("sympy given a string", "import sympy\nprint(sympy.simplify('().__class__'))", "SympifyError"),
        ("lambdify of an odd name", "import sympy\nf = sympy.lambdify([], sympy.Symbol(\"__import__('os').getcwd()\"))\nprint(f())",
         "ValueError: lambdify of the name"),
        ("operator.attrgetter", "import operator\nprint(operator.attrgetter('__class__')(1))",
         "AttributeError: '__class__' is an invalid attribute"),
        ("operator.methodcaller", "import operator\nprint(operator.methodcaller('__reduce_ex__', 2)(1))",
         "AttributeError: '__reduce_ex__' is an invalid attribute"),
        ("open through parse_expr", f"from sympy.parsing.sympy_parser import parse_expr\nprint(parse_expr(\"open('{marker}', 'w')\"))",
         "NameError: name 'open' is not defined"),
        ("sympify unevaluated", "import sympy\nprint(sympy.sympify('x + 1', evaluate=False))",
         "ValueError: sympy parsing with evaluate=False is not available"),
        ("never prints", "x = 6 * 7", "NoOutput: the program printed nothing"),
        ("recursion", "def f(n):\n    return f(n + 1)\nprint(f(0))", "RecursionError"),
    ]


def _folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "agora-program-*")))


def test_a_program_runs_and_prints(tmp_path):
    run = run_program("from fractions import Fraction\nimport math\nprint(Fraction(1, 3) + Fraction(1, 6), math.comb(5, 2))",
                      LIMITS)
    assert (run.status, run.output, run.error, run.ok) == ("ok", "1/2 10\n", None, True)
    assert {"restrictedpython", "rlimits", "fresh-folder"} <= set(run.layers)


def test_counting_with_augmented_item_assignment_and_str_format_work():
    program = ("counts = {}\nfor c in 'abca':\n    counts[c] = counts.get(c, 0)\n    counts[c] += 1\n"
               "print('{:.2f} {a}'.format(counts['a'] / 3, a=counts['b']), f'{counts[\"c\"]:03d}')")
    assert run_program(program, LIMITS).output == "0.67 1 001\n"


def test_every_hostile_program_is_contained_and_fails_with_its_error(tmp_path):
    marker = tmp_path / "outside.txt"
    before = _folders()
    sandbox = Sandbox(workers=1)
    try:
        sandbox.run("print(1)", LIMITS)  # the worker's start (seconds on a busy machine) is not a program's time
        for case, program, error in hostile(marker):
            run = sandbox.run(program, LIMITS)
            assert not run.ok, case
            assert (run.failure or "").startswith(error), (case, run.failure)
            assert run.seconds < LIMITS.wall_s + 3, case
        # the worker survived all of them and still runs programs
        assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"
    finally:
        sandbox.close()
    assert not marker.exists()
    # each program's folder was removed; a folder another process's sandbox (a concurrent test run) holds
    # while its program runs is gone within seconds, ours would stay
    deadline = time.monotonic() + 15
    while not _folders() <= before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _folders() <= before


def test_the_wall_time_limit_kills_a_program_that_does_not_use_cpu_time():
    run = run_program("while True:\n    pass", SandboxLimits(cpu_s=60, wall_s=1))
    assert run.status == "timeout" and run.failure.startswith("TimeoutError: the program ran past its wall-time limit of 1")
    assert 1 <= run.seconds < 4


@pytest.mark.parametrize("case, program, error", hostile(Path(tempfile.gettempdir()) / "agora-sandbox-marker"),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 24 else None)
def test_a_hostile_program_from_a_pot_member_is_a_failed_sample(case, program, error):
    model = ScriptedChatModel(responses=[f"```python\n{program}\n```"])
    pool = ModelPool([PoolMember(ModelSpec(name="q+pot", backend="langchain", recipe=POT), model)])
    [s], [r] = pool.sample("q+pot", [{"role": "user", "content": "What is 6 times 7?"}], context={"role": "agent"})
    assert r["program_error"].startswith(error) and r["error"] is None
    assert find_answer(s.text, "math").answer is None and find_answer(s.text, "mc").answer is None
    assert not (Path(tempfile.gettempdir()) / "agora-sandbox-marker").exists()


def test_limits_are_checked_by_name():
    with pytest.raises(ValueError, match=r"^cpu_s: must be a number of seconds in \[0.01, 600.0\], got 0"):
        SandboxLimits(cpu_s=0)
    with pytest.raises(ValueError, match=r"^imports: os, socket may not be allowed"):
        SandboxLimits(imports=("math", "socket", "os"))


KERNEL_PROBE = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import _sandbox_worker as w
folder, outside = sys.argv[2], sys.argv[3]
pid = os.fork()
if pid == 0:
    got = []
    if w._landlock(folder):
        open(os.path.join(folder, "inside.txt"), "w").write("ok")
        try:
            open(outside, "w").write("x")
            got.append("landlock:wrote")
        except PermissionError:
            got.append("landlock:refused")
        try:
            open("/etc/passwd").read()
            got.append("landlock:read")
        except PermissionError:
            got.append("landlock:read-refused")
        import calendar, wave  # a lazy import still reads Python's own folders
        got.append("landlock:imported")
    if w._seccomp():
        try:
            child = os.fork()
            if child == 0:
                os._exit(0)
            got.append("seccomp:forked")
        except PermissionError:
            got.append("seccomp:refused")
    print(" ".join(got), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_the_kernel_layers_refuse_writes_outside_the_folder_and_fork_where_present(tmp_path):
    """Below RestrictedPython: Landlock (no write or read outside the folder, Python's folders still
    readable) and seccomp (no fork), tested with a plain (unrestricted) program."""
    folder, outside = tmp_path / "folder", tmp_path / "outside.txt"
    folder.mkdir()
    worker_dir = Path(sys.modules["agora.models.recipes.sandbox"].__file__).parent
    out = subprocess.run([sys.executable, "-I", "-c", KERNEL_PROBE, str(worker_dir), str(folder), str(outside)],
                         capture_output=True, text=True, timeout=120).stdout.split()
    layers = set(sandbox_layers())
    assert ("landlock:refused" in out) == ("landlock" in layers) and "landlock:wrote" not in out
    assert ("landlock:read-refused" in out) == ("landlock" in layers) and "landlock:read" not in out
    assert ("landlock:imported" in out) == ("landlock" in layers)
    assert ("seccomp:refused" in out) == ("seccomp" in layers) and "seccomp:forked" not in out
    assert not outside.exists()
    if "landlock" in layers:
        assert (folder / "inside.txt").read_text() == "ok"
    if not {"landlock", "seccomp"} & layers:
        pytest.skip("this kernel gives neither Landlock nor seccomp")


def test_a_worker_killed_from_outside_is_replaced():
    sandbox = Sandbox(workers=1)
    try:
        assert sandbox.run("print(1)", LIMITS).output == "1\n"
        [worker] = list(sandbox._idle.queue)
        worker.proc.kill()
        worker.proc.wait()
        run = sandbox.run("print(2)", LIMITS)
        assert (run.status, run.output) == ("ok", "2\n")
        assert sandbox._started == 1 and len(sandbox._idle.queue) == 1
    finally:
        sandbox.close()
    assert sandbox._started == 0


def test_a_library_that_writes_files_cannot_write_outside_the_folder(tmp_path):
    """RestrictedPython leaves an allowed library's own file writes alone (sympy's codegen writes
    C files); Landlock stops those outside the folder."""
    if "landlock" not in sandbox_layers():
        pytest.skip("this kernel has no Landlock: only RestrictedPython and rlimits contain such a write")
    program = ("from sympy import symbols\nfrom sympy.utilities.codegen import codegen\nx = symbols('x')\n"
               "codegen(('f', x + 1), 'C', {prefix!r}, to_files=True)\nprint('written')")
    outside = tmp_path / "evil"
    run = run_program(program.format(prefix=str(outside)), SandboxLimits(cpu_s=5, wall_s=10))
    assert run.failure.startswith("PermissionError: [Errno 13] Permission denied") and not list(tmp_path.iterdir())
    inside = run_program(program.format(prefix="inside"), SandboxLimits(cpu_s=5, wall_s=10))
    assert (inside.status, inside.output) == ("ok", "written\n")  # in its own folder, removed afterwards


def test_sympy_strings_still_parse_in_the_sandbox():
    run = run_program("import sympy\nprint(sympy.sympify('x**2 - 4'), sympy.solve('x**2 - 4'))", LIMITS)
    assert (run.status, run.output) == ("ok", "x**2 - 4 [-2, 2]\n")
    run = run_program("import sympy\nx = sympy.Symbol('x')\nprint(sympy.lambdify(x, x**2 + 1)(3))", LIMITS)
    assert (run.status, run.output) == ("ok", "10\n")


def test_the_worker_checks_the_childs_result():
    import importlib.util

    import agora.models.recipes.sandbox as sandbox_module

    path = Path(sandbox_module.__file__).with_name("_sandbox_worker.py")
    spec = importlib.util.spec_from_file_location("_sandbox_worker_under_test", path)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    good = {"status": "ok", "output": "42\n", "error": None, "layers": ["rlimits"], "extra": 1}
    assert worker._checked(good) == {"status": "ok", "output": "42\n", "error": None, "layers": ["rlimits"]}
    with pytest.raises(ValueError, match="field 'output' is a int"):
        worker._checked({**good, "output": 42})
    with pytest.raises(ValueError, match="field 'status'"):
        worker._checked({**good, "status": "timeout"})
    with pytest.raises(ValueError, match="no field 'layers'"):
        worker._checked({"status": "ok", "output": "", "error": None})


def test_a_recipe_whose_finish_raises_gives_a_failed_sample(monkeypatch):
    from agora.models.recipes.pot import ProgramOfThought

    def broken(self, text):
        raise TypeError("expected str, got int")

    monkeypatch.setattr(ProgramOfThought, "finish", broken)
    model = ScriptedChatModel(responses=["```python\nprint(42)\n```"])
    pool = ModelPool([PoolMember(ModelSpec(name="q+pot", backend="langchain", recipe=POT), model)])
    [s], [r] = pool.sample("q+pot", [{"role": "user", "content": "What is 6 times 7?"}], context={"role": "agent"})
    assert r["program_error"] == "RecipeError: TypeError: expected str, got int" and r["error"] is None
    assert find_answer(s.text, "math").answer is None


# Library routes past RestrictedPython's import hook: each refused in the program's own layer (the
# kernel layers, where present, contain them too; without Landlock and seccomp they were escapes).
LIBRARY_ROUTES = [
    ("import_module of os", "from sympy.external import import_module\nprint(import_module('os').getcwd())",
     "AttributeError: 'NoneType' object has no attribute 'getcwd'"),
    ("a module's import_module", "import sympy.stats\nprint(sympy.stats.rv.import_module('subprocess').getoutput('id'))",
     "AttributeError: 'NoneType' object has no attribute 'getoutput'"),
    ("get_class of eval", "from sympy.utilities.source import get_class\nprint(get_class('builtins.eval')('1 + 1'))",
     "ImportError: import of 'builtins.eval' is not allowed"),
    ("importlib through sympy", "import sympy\nprint(sympy.core.cache.import_module('os').getcwd())",
     "AttributeError: 'import_module' belongs to the module 'importlib', which is not allowed"),
    ("from-import of importlib's function", "from sympy.core.cache import import_module\nprint(import_module('os'))",
     "ImportError: sympy.core.cache.import_module belongs to the module 'importlib', which is not allowed"),
    ("subprocess through sympy", "from sympy.utilities.autowrap import check_output\nprint(check_output(['id']))",
     "ImportError: sympy.utilities.autowrap.check_output belongs to the module 'subprocess'"),
    ("FunctionType through sympy", "from sympy.matrices.reductions import FunctionType\nprint(FunctionType)",
     "ImportError: sympy.matrices.reductions.FunctionType is a built-in the sandbox does not give"),
    ("attrgetter to importlib", "import operator, sympy\nprint(operator.attrgetter('core.cache.import_module')(sympy))",
     "AttributeError: 'import_module' belongs to the module 'importlib'"),
    ("lambdify of eval", "import sympy\nx = sympy.Symbol('x')\nprint(sympy.lambdify(x, sympy.Function('eval')(x))('1 + 1'))",
     "SyntaxError: Line 2: Eval calls are not allowed"),
    ("lambdify of open", "import sympy\nx = sympy.Symbol('x')\nprint(sympy.lambdify(x, sympy.Function('open')(x))('pyvenv.cfg'))",
     "NameError: name 'open' is not defined"),
    ("lambdify of builtins", "import sympy\nprint(sympy.lambdify([], sympy.Symbol('builtins'))().open)",
     "AttributeError: 'types.SimpleNamespace' object has no attribute 'open'"),
    ("lambdify of a matrix's name", "import sympy\nm = sympy.MatrixSymbol(\"__import__('os').getcwd()\", 1, 1)\n"
     "print(sympy.lambdify([], m)())", "SyntaxError: Line 2: \"__import__\" is an invalid variable name"),
]


def test_library_routes_around_the_import_hook_are_refused():
    sandbox = Sandbox(workers=1)
    try:
        for case, program, error in LIBRARY_ROUTES:
            run = sandbox.run(program, LIMITS)
            assert not run.ok, case
            assert (run.failure or "").startswith(error), (case, run.failure)
    finally:
        sandbox.close()


def test_a_missing_attribute_is_an_error_not_none():
    """RestrictedPython's guarded getattr gives ``None`` for a missing attribute: a program's typo
    would print ``None`` as its answer."""
    run = run_program("import math\nprint(math.pie)", LIMITS)
    assert run.failure == "AttributeError: module 'math' has no attribute 'pie'"
    run = run_program("print(getattr(5, 'nope', 7), getattr(5, 'real'), hasattr(5, 'nope'))", LIMITS)
    assert (run.status, run.output) == ("ok", "7 5 False\n")


def test_lambdify_still_runs_what_sympy_prints():
    program = ("import sympy\nx, n = sympy.symbols('x n')\nf = sympy.Function('f')\n"
               "print(sympy.lambdify(n, sympy.Sum(x, (x, 1, n)))(4), sympy.lambdify(x, sympy.Piecewise((x, x > 0), (-x, True)))(-3),\n"
               "      sympy.lambdify(x, sympy.sin(x) + sympy.Rational(1, 4), 'math')(0), sympy.lambdify(f(x), f(x)**2 + 1)(3),\n"
               "      sympy.lambdify([x], x**2 + x, cse=True)(2))")
    run = run_program(program, SandboxLimits(cpu_s=5, wall_s=10))
    assert (run.status, run.output) == ("ok", "10 3 0.25 10 6\n")
