"""Probe round 13: what a program's child does when the program's own objects misbehave, and a layer
under RestrictedPython that does not depend on the kernel.

- An exception's message is the program's code (``__str__`` of a class made with
  ``numbers.ABCMeta``): one that raised, returned a non-``str`` or raised ``SystemExit`` made the
  child die while reporting, and the sample failed as ``Killed: ... (its memory cap, or a refused
  system call)`` with what it printed lost. Now the error names the exception and says its message
  could not be shown; the printed output is kept.
- A program may print a lone surrogate or a NUL: no trace store keeps those (SQLite's UTF-8
  encoder refuses the one, PostgreSQL text the other). The worker replaces each with U+FFFD.
- ``datetime``'s ``strftime``, ``timetuple`` and ``strptime`` import ``time`` / ``_strptime`` from
  C through the program's import hook, which refused them: legitimate date programs failed. Those
  C-level imports are admitted; a program's own ``import time`` is still refused.
- ``type`` itself is reachable (``collections.Counter.copy(int)`` is ``int.__class__(int)``), so a
  program can make a metaclass by calling it; a ``class`` statement still refuses a class of it.
- A new layer, the child's audit hook (PEP 578): processes, signals, sockets, ``ctypes``, the
  collector's walks, code and functions made by hand, changes to the file system, reads outside
  the folder and Python's own folders, and writes outside the folder are refused to code that got
  past RestrictedPython, where the kernel gives no Landlock or seccomp too. The C functions that
  raise no audit event (``_posixsubprocess.fork_exec`` started a shell past the hook;
  ``pidfd_open`` with ``pidfd_send_signal`` signals any process) are withheld, and their modules
  cannot be made anew (``_imp.create_builtin`` raised no event). Tested with plain (unrestricted)
  code in a child process, as ``tests/test_sandbox.py`` tests the kernel layers.
- seccomp refused ``kill`` and ``ptrace`` but not the other ways to another process: ``tgkill``,
  pidfds (``pidfd_send_signal``, ``pidfd_getfd``), ``process_vm_readv``, ``setpriority``... (a
  root child reaches every process). Refused now.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from agora.models.recipes.sandbox import SandboxLimits

from sandbox_probes import hostile_failures, output_failures, restricted_module

LIMITS = SandboxLimits(cpu_s=2, wall_s=8, memory_mb=256, output_bytes=4096)
#: an exception class whose message is the program's code
RAISES = "from numbers import ABCMeta\nE = ABCMeta('E', (Exception,), {'__str__': %s})\n"


# (case, program, what it prints before it raises, its error)
MESSAGES = [
    ("a __str__ that raises", RAISES % "lambda self: 1 / 0" + "print('before')\nraise E()", "before\n",
     "E: <its message could not be shown: ZeroDivisionError>"),
    ("a __str__ that returns a number", RAISES % "lambda self: 5" + "raise E()", "",
     "E: <its message could not be shown: TypeError>"),
    ("a __str__ that raises SystemExit", "from numbers import ABCMeta\ndef s(self):\n    raise SystemExit(3)\n"
     "E = ABCMeta('E', (Exception,), {'__str__': s})\nprint('hi')\nraise E()", "hi\n",
     "E: <its message could not be shown: SystemExit>"),
    ("a SyntaxError of an object whose __str__ raises", "from numbers import ABCMeta\n"
     "O = ABCMeta('O', (), {'__str__': lambda self: 1 / 0})\nraise SyntaxError(O())", "",
     "SyntaxError: <its message could not be shown: ZeroDivisionError>"),
    ("an exception class named by a str subclass", "from numbers import ABCMeta\n"
     "S = ABCMeta('S', (str,), {'__format__': lambda self, spec: 'Lie'})\nE = ABCMeta(S('E'), (Exception,), {})\n"
     "raise E('m')", "", "TypeError: class S: a subclass of a built-in value type (str, int, tuple, dict...) with "
     "attributes of its own is not allowed in the sandbox"),
]


def test_an_exception_whose_message_is_hostile_is_a_failed_sample_that_keeps_its_output(sandbox):
    got = [(case, *(lambda r: (r.status, r.output, r.error))(sandbox.run(program, LIMITS)))
           for case, program, _, _ in MESSAGES]
    assert got == [(case, "error", output, error) for case, _, output, error in MESSAGES]
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"  # the worker survived them all


def test_output_a_trace_store_cannot_keep_is_replaced(sandbox):
    run = sandbox.run("print('a\\ud800b\\x00c')\nraise ValueError('\\udfff')", LIMITS)
    assert (run.status, run.output, run.error) == ("error", "a\ufffdb\ufffdc\n", "ValueError: \ufffd")
    run.output.encode("utf-8")  # what a trace store does with it: no UnicodeEncodeError


# (case, program, the start of its error)
HOSTILE = [
    ("the program's own import of time", "import time\nprint(time.sleep)", "ImportError: import of 'time' is not allowed"),
    ("a from-import of time", "from time import sleep\nprint(sleep)", "ImportError: import of 'time' is not allowed"),
    ("_strptime", "import _strptime\nprint(1)", "SyntaxError"),
    ("a class of a metaclass made by calling type", "import collections\nT = collections.Counter.copy(int)\n"
     "M = T('M', (T,), {})\nX = M('X', (), {})\nclass C(X):\n    pass\nprint(C)",
     "TypeError: the sandbox does not give a program the built-in type"),
]


def test_imports_from_c_code_do_not_open_imports_to_programs(sandbox):
    assert hostile_failures(sandbox, HOSTILE, LIMITS) == []


def test_a_c_level_recursion_that_overflows_the_stack_fails_the_sample_and_spares_the_worker(sandbox):
    run = sandbox.run("it = iter([1])\nfor i in range(10**6):\n    it = map(abs, it)\nprint(next(it))", LIMITS)
    assert not run.ok
    assert run.failure.startswith(("Killed: the program was stopped by signal SIGSEGV", "RecursionError",
                                   "TimeoutError", "MemoryError")), run.failure
    assert sandbox.run("print(2 + 2)", LIMITS).output == "4\n"


# (case, program, its output)
LEGITIMATE = [
    ("strftime", "import datetime\nd = datetime.date(2024, 1, 1)\nprint(d.strftime('%A %d %B %Y'), d.timetuple().tm_yday)",
     "Monday 01 January 2024 1\n"),
    ("strptime", "import datetime\nd = datetime.datetime.strptime('2024-03-01 10:30', '%Y-%m-%d %H:%M')\n"
     "print(d.weekday(), (d - datetime.datetime(2024, 1, 1)).days)", "4 60\n"),
    ("a sympy module imported lazily (files read under the audit hook)", "import sympy\nfrom sympy.stats import Normal, P\n"
     "X = Normal('X', 0, 1)\nprint(P(X > 0))", "1/2\n"),
    ("lambdify, solve, simplify", "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x**2 + 1)\n"
     "print(f(3), sympy.solve(x**2 - 4, x), sympy.simplify((x**2 - 1) / (x - 1)))", "10 [-2, 2] x + 1\n"),
    ("attribute reads in a loop", "from fractions import Fraction\nt = Fraction(0)\nfor i in range(1, 200):\n"
     "    t += Fraction(1, i * (i + 1))\nprint(t.numerator, t.denominator)", "199 200\n"),
]


def test_the_programs_a_model_writes_keep_their_outputs(sandbox):
    assert output_failures(sandbox, LEGITIMATE, LIMITS) == []


def test_every_run_names_the_audit_hook_among_its_layers(sandbox):
    assert "audit-hook" in sandbox.run("print(1)", LIMITS).layers


def test_the_dangerous_built_ins_are_still_refused_by_identity():
    """``_refused`` now calls ``id`` only for built-in functions, classes and functions (each ``id`` is
    an audit event of the child's hook); every object it refused by identity is still refused."""
    import _operator
    import builtins
    import io
    import types

    restricted = restricted_module("_sandbox_restricted_round13")
    allowed = frozenset({"math", "sympy"})
    for value in (builtins.eval, builtins.exec, builtins.open, builtins.type, builtins.getattr, builtins.__import__,
                  io.open, types.FunctionType, types.CodeType, types.FrameType, _operator.attrgetter):
        assert restricted._refused(value, allowed), value
    assert restricted._refused(len, allowed) is None and restricted._refused(abs, allowed) is None


#: plain Python, run in a child process of its own: installs the child's audit hook for a folder and
#: tries what code past RestrictedPython would do (the hook cannot be removed: never in this process)
AUDIT_PROBE = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("_sandbox_kernel", os.path.join(sys.argv[1], "_sandbox_kernel.py"))
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
folder, outside = sys.argv[2], sys.argv[3]
os.chdir(folder)
import _imp, ctypes, gc, resource, shutil, socket, subprocess
print(json.dumps({"installed": kernel._audit_hook(folder)}))
os.path.realpath = lambda path, *a, **k: folder  # what escaped code would try: the hook holds its own helpers
tries = {
    "os.system": lambda: os.system("true"), "subprocess": lambda: subprocess.run(["true"]),
    "fork": os.fork, "kill": lambda: os.kill(os.getppid(), 0), "socket": socket.socket,
    "ctypes": lambda: ctypes.CDLL(None), "gc": gc.get_objects, "setrlimit": lambda: resource.setrlimit(
        resource.RLIMIT_CPU, (1000, 1000)), "chdir": lambda: os.chdir("/"),
    "write outside": lambda: open(outside, "w"), "os.open outside": lambda: os.open(outside, os.O_WRONLY | os.O_CREAT),
    "append outside": lambda: open(outside, "a"), "read /etc/passwd": lambda: open("/etc/passwd").read(),
    "read through ..": lambda: open(os.path.join(folder, "..", "..", "etc", "passwd")).read(),
    "read /proc": lambda: open("/proc/self/environ", "rb").read(), "list /": lambda: os.listdir("/"),
    "remove": lambda: os.remove(outside), "rmtree": lambda: shutil.rmtree(outside),
    "symlink": lambda: os.symlink("/etc/passwd", "link"), "rename": lambda: os.rename("x", outside),
    "write a descriptor": lambda: open(1, "w", closefd=False), "/proc/self/mem": lambda: open("/proc/self/mem", "r+b"),
    # C functions that raise no audit event: withheld, and their modules cannot be made anew
    "fork_exec": lambda: subprocess._fork_exec(), "pidfd_open": lambda: os.pidfd_open(os.getppid()),
    "pidfd_send_signal": lambda: __import__("signal").pidfd_send_signal(0, 0),
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19),
    "posix anew": lambda: _imp.create_builtin(importlib.util.find_spec("posix")).pidfd_open,
    "_posixsubprocess anew": lambda: importlib.util.module_from_spec(importlib.util.find_spec("_posixsubprocess")),
    "_posixshmem": lambda: __import__("_posixshmem"),
}
result = {}
for name, attempt in tries.items():
    try:
        attempt()
        result[name] = "allowed"
    except PermissionError as exc:
        result[name] = str(exc)
    except Exception as exc:
        result[name] = f"other: {type(exc).__name__}: {exc}"
with open("inside.txt", "w") as fh:
    fh.write("ok")
result["inside"] = open("inside.txt").read()
result["python's folder"] = len(open(json.__file__).read()) > 0
result["a built-in module imported late"] = __import__("_symtable").__name__
print(json.dumps(result))
"""


def test_the_audit_hook_refuses_what_code_past_restrictedpython_would_do(tmp_path):
    import json

    if not hasattr(sys, "addaudithook"):
        return
    folder = Path(tempfile.mkdtemp(prefix="agora-round13-"))
    outside = tmp_path / "outside.txt"
    try:
        worker_dir = Path(sys.modules["agora.models.recipes.sandbox"].__file__).parent
        run = subprocess.run([sys.executable, "-I", "-c", AUDIT_PROBE, str(worker_dir), str(folder), str(outside)],
                             capture_output=True, text=True, timeout=120)
        installed, result = [json.loads(line) for line in run.stdout.splitlines()]
        assert installed == {"installed": True}
        assert result.pop("inside") == "ok" and result.pop("python's folder") is True
        assert result.pop("a built-in module imported late") == "_symtable"
        processes = {"os.system", "subprocess", "fork", "kill", "socket", "ctypes", "gc", "setrlimit", "chdir",
                     "remove", "rmtree", "symlink", "rename"}
        withheld = {"fork_exec", "pidfd_open", "pidfd_send_signal", "setpriority", "posix anew",
                    "_posixsubprocess anew", "_posixshmem"}
        not_refused = {name: why for name, why in result.items() if not why.startswith(
            "[Errno 1] Operation not permitted (the sandbox's audit hook refuses" if name in processes
            else "[Errno 1] Operation not permitted (the sandbox" if name in withheld
            else "[Errno 13] Permission denied (the sandbox's audit hook")}
        assert not_refused == {}
        assert sorted(result) == sorted(processes | withheld | {"write outside", "os.open outside", "append outside",
                                                     "read /etc/passwd", "read through ..", "read /proc", "list /",
                                                     "write a descriptor", "/proc/self/mem"})
        assert not outside.exists()
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


#: plain Python in a process of its own: applies the child's seccomp filter and reaches for other
#: processes by the system calls ``kill`` and ``ptrace`` do not cover
SECCOMP_PROBE = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("_sandbox_kernel", os.path.join(sys.argv[1], "_sandbox_kernel.py"))
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
if not kernel._seccomp():
    print(json.dumps(None))
    raise SystemExit
result = {}
for name, attempt in {"pidfd_open": lambda: os.pidfd_open(os.getppid()),
                      "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19),
                      "sched_setaffinity": lambda: os.sched_setaffinity(os.getppid(), {0})}.items():
    try:
        attempt()
        result[name] = "allowed"
    except OSError as exc:
        result[name] = exc.errno
result["still runs"] = sum(range(10))
print(json.dumps(result))
"""


def test_seccomp_refuses_the_calls_that_reach_other_processes_past_kill():
    """A root child could signal any process through a pidfd (``pidfd_open`` + ``pidfd_send_signal``),
    take its descriptors (``pidfd_getfd``), read its memory (``process_vm_readv``) or lower its
    priority: seccomp now refuses those calls too (EPERM)."""
    import errno
    import json

    worker_dir = Path(sys.modules["agora.models.recipes.sandbox"].__file__).parent
    run = subprocess.run([sys.executable, "-I", "-c", SECCOMP_PROBE, str(worker_dir)], capture_output=True,
                         text=True, timeout=120)
    result = json.loads(run.stdout)
    if result is None:
        return  # no libseccomp here: the audit hook withholds these functions instead (above)
    assert result == {"pidfd_open": errno.EPERM, "setpriority": errno.EPERM, "sched_setaffinity": errno.EPERM,
                      "still runs": 45}
