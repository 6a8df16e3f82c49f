"""Running model-written programs: one small execution interface and its default implementation.

``run_program(program, limits) -> ProgramRun`` (program in; its printed output, error, status and
seconds out). Never an ``exec`` in Agora's process: programs run in a child of a separate worker
process (``_sandbox_worker.py``, started with ``python -I`` and an empty environment), one fresh
child per program.

What was chosen, and why:

- **RestrictedPython** (Zope Foundation, on PyPI since 2001, maintained; 9.0) compiles the program
  under a policy: no name or attribute that starts with ``_`` (so no ``().__class__.__bases__[0]
  .__subclasses__()`` walk and no ``__import__``), guarded ``getattr``/item access/iteration, and a
  ``print`` Agora collects. The program gets a small set of built-ins (no ``open``, ``eval``,
  ``exec``, ``compile``, ``globals``) and an import hook that admits only :attr:`SandboxLimits.imports`;
  a module attribute that is another module outside the list (``sympy.utilities.misc.os``) is
  refused, of sympy only an allow-list of its mathematical modules (and their functions and
  classes) is reachable, and attributes of modules and of classes and functions the program did
  not define cannot be set or deleted, nor written by library helpers (``functools.total_ordering``,
  ``abc.ABCMeta.register``); the built-in ``type`` is never a program's value (its ``type(x)`` gives
  ``x``'s class) and a metaclass call is judged like a ``class`` statement (``_sandbox_restricted.py``
  says why); of ``typing``, what annotations use (not ``get_type_hints``, ``get_origin``,
  ``ForwardRef``..., which hand out ``type`` or evaluate strings). ``math`` and ``cmath``, when
  allowed, are bound without an import (``_sandbox_restricted.PREBOUND``). A program over
  :data:`MAX_PROGRAM_BYTES` is refused before it is sent. RestrictedPython alone is not a security
  boundary (its own docs say so), hence:
- **OS limits in the child** (``resource.setrlimit``): CPU seconds (``RLIMIT_CPU``), address space
  (``RLIMIT_AS``: the worker's plus :attr:`~SandboxLimits.memory_mb`), file size, no core files, no
  new processes (``RLIMIT_NPROC`` 0, which the kernel does not enforce for root), a fresh empty
  temporary folder as the working directory (removed afterwards), stdin/stdout/stderr on
  ``/dev/null`` and an empty environment; the worker kills the child's process group at the
  wall-time limit.
- **Kernel layers where the kernel offers them, without root**: Landlock (Linux ≥ 5.13) forbids
  reading outside the folder and Python's own folders, writing, removing or making files outside
  the folder, executing any file, and TCP; seccomp
  (through libseccomp, loaded with ``ctypes``) makes ``fork``/``clone``/``execve``/``socket``/
  ``kill``/``ptrace``/``unshare``/``mount`` fail; the worker enters a network namespace of its own
  (no interfaces). :func:`sandbox_layers` says which layers this machine gives.
- **An audit hook in the child** (PEP 578, on every machine): processes, signals, sockets,
  ``ctypes``, the collector's walks, code made by hand and changes to the file system fail, and so
  do reads outside the folder and Python's own folders and writes outside the folder; in-process,
  so weaker than the kernel layers, but there where they are not (``_sandbox_kernel._audit_hook``).
- **A pre-forked worker** instead of a fresh interpreter per program: the worker imports
  RestrictedPython and the allowed modules (sympy included) once; a program then costs a ``fork``
  and its run (``benchmarks/sandbox_overhead.py``; benchmarks/README.md has the figures).

smolagents' ``LocalPythonExecutor`` (an AST interpreter) was the other candidate: it runs the
program inside the caller's process (limits on operations, not on memory or CPU), and brings an
agent framework as a dependency. PAL (reasoning-machines/pal) runs programs with a bare ``exec``
and a timeout.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from agora.tasks.errors import InputError
from agora.models.validation import Convert, Rule, settings

#: The modules a program may import unless a recipe says otherwise (sympy when installed).
DEFAULT_IMPORTS: tuple[str, ...] = ("math", "cmath", "fractions", "decimal", "itertools", "functools",
                                    "collections", "statistics", "operator", "string", "re", "datetime",
                                    "heapq", "bisect", "numbers", "random", "enum", "typing", "sympy")
#: Modules that may never be allowed: they reach the file system, processes or the network.
FORBIDDEN_IMPORTS = frozenset({"os", "sys", "subprocess", "socket", "shutil", "pathlib", "io", "builtins",
                               "importlib", "ctypes", "multiprocessing", "threading", "signal", "resource",
                               "pickle", "marshal", "tempfile", "glob", "urllib", "http", "requests", "asyncio",
                               "code", "codeop", "inspect", "gc", "posix", "pty", "select", "mmap", "numpy",
                               "pandas", "sqlite3", "types", "runpy", "zipfile", "tarfile", "webbrowser"})

#: The most bytes (UTF-8) of a program the sandbox runs: a larger one is refused before it is sent
#: (sending, parsing and compiling megabytes took seconds past the wall-time limit, which starts at
#: the child's fork). A model's program is a few kilobytes; this leaves room for data tables.
MAX_PROGRAM_BYTES = 2**20

ProgramStatus = Literal["ok", "error", "timeout", "killed", "output_limit"]

_WORKER = Path(__file__).with_name("_sandbox_worker.py")


def _seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0.01 <= value <= 600.0


def _whole(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def imports_problem(modules: Any) -> str | None:
    """What is wrong with ``modules`` as the modules a program may import, or ``None``: entries that
    are not top-level module names (``'math.fsum'``, a path, a number), else modules that are
    never allowed (:data:`FORBIDDEN_IMPORTS`). One line, without the field's name."""
    if odd := [m for m in modules if not (isinstance(m, str) and m.isidentifier())]:
        return f"{', '.join(map(repr, odd))}: not top-level module names (write 'math', not 'math.fsum' or a path)"
    if bad := sorted(set(modules) & FORBIDDEN_IMPORTS):
        return f"{', '.join(bad)} may not be allowed (file system, processes or network)"
    return None


def _allowed_imports(value: Any) -> Any:
    """``value`` unchanged when it is a list of top-level module names none of them forbidden.

    Raises:
        ValueError: ``imports: ...`` naming the entries at fault (:func:`imports_problem`).
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InputError(f"imports: must be a list of module names, got {value!r}")
    if problem := imports_problem(value):
        raise InputError(f"imports: {problem}")
    return value


@settings
class SandboxLimits:
    """What one program may use. Raises ``ValueError`` naming the field on a bad value."""

    cpu_s: Annotated[float, Rule(_seconds, "cpu_s: must be a number of seconds in [0.01, 600.0], got {value!r}")] = 2.0
    """CPU seconds (``RLIMIT_CPU``, rounded up to whole seconds)."""
    wall_s: Annotated[float, Rule(_seconds, "wall_s: must be a number of seconds in [0.01, 600.0], got {value!r}")] = 4.0
    """Wall-clock seconds before the child's process group is killed."""
    memory_mb: Annotated[int, Rule(lambda v: _whole(v, 16, 65_536), "memory_mb: must be a whole number in [16, 65536], got {value!r}")] = 512
    """MiB of address space the program may add to what the worker holds (``RLIMIT_AS``)."""
    output_bytes: Annotated[int, Rule(lambda v: _whole(v, 16, 64 * 2**20), "output_bytes: must be a whole number in [16, 67108864], got {value!r}")] = 65_536
    """Bytes the program may print; more is an ``output_limit`` failure."""
    imports: Annotated[tuple[str, ...], Convert(_allowed_imports)] = DEFAULT_IMPORTS
    """Modules the program may import (top-level names; never one of :data:`FORBIDDEN_IMPORTS`)."""


@dataclass(frozen=True, slots=True)
class ProgramRun:
    """What running one program gave."""

    status: ProgramStatus
    output: str
    """What it printed (at most ``output_bytes``)."""
    error: str | None
    """``Type: message`` when it did not finish cleanly; ``None`` otherwise."""
    seconds: float
    """Wall seconds from the request to the reply, sandbox included."""
    layers: tuple[str, ...] = field(default=())
    """The containment layers the run had (:func:`sandbox_layers`)."""

    @property
    def ok(self) -> bool:
        """It finished without error and printed something."""
        return self.status == "ok" and bool(self.output.strip())

    @property
    def failure(self) -> str | None:
        """Why it gives no answer (``None`` when :attr:`ok`): its error, or that it printed nothing."""
        if self.ok:
            return None
        return self.error or "NoOutput: the program printed nothing"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxError(RuntimeError):
    """The worker could not be started (RestrictedPython missing, the interpreter not runnable)."""


class _Worker:
    """One worker process: one program at a time."""

    def __init__(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-I", str(_WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                                     bufsize=1, cwd="/", start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        try:
            hello = json.loads(line)
        except ValueError:
            err = self.proc.stderr.read()[-2000:] if self.proc.stderr else ""
            self.close()
            raise SandboxError(f"the sandbox worker did not start: {err.strip() or 'no reply'}") from None
        self.layers = tuple(hello.get("layers", ()))

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SandboxError("the sandbox worker exited")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # a request still buffered for a worker that died: nobody reads it
                    pass


class Sandbox:
    """Up to ``workers`` worker processes, started on first use and reused; thread-safe.

    ``run(program, limits)`` takes an idle worker (or starts one, or waits for one), sends the
    program and returns its :class:`ProgramRun`. A worker that dies is replaced.
    """

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._started = 0
        self._lock = threading.Lock()

    def _take(self) -> _Worker:
        """An idle worker, a new one while fewer than ``workers`` run, or the next one freed."""
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                start = self._started < self.workers
                if start:
                    self._started += 1
            if start:
                try:
                    return _Worker()
                except BaseException:
                    with self._lock:
                        self._started -= 1
                    raise
            try:  # a worker that dies is not given back: look again rather than wait for ever
                return self._idle.get(timeout=0.25)
            except queue.Empty:
                continue

    def _drop(self, worker: _Worker) -> None:
        worker.close()
        with self._lock:
            self._started -= 1

    def run(self, program: str, limits: SandboxLimits = SandboxLimits()) -> ProgramRun:
        """Run ``program`` under ``limits``. A worker found dead (killed from outside) is replaced
        and the program sent to the new one. A program over :data:`MAX_PROGRAM_BYTES` is not run: an
        ``error`` run whose error (``ProgramTooLarge: ...``) names its size and the cap.

        Raises:
            SandboxError: no worker could be started (the program is not run).
        """
        start = time.perf_counter()
        size = len(program.encode("utf-8", "surrogatepass"))
        if size > MAX_PROGRAM_BYTES:
            return ProgramRun("error", "", f"ProgramTooLarge: the program is {size} bytes, more than the sandbox "
                              f"runs ({MAX_PROGRAM_BYTES} bytes); nothing was run", time.perf_counter() - start, ())
        request = {"program": program, "cpu_s": limits.cpu_s, "wall_s": limits.wall_s,
                   "memory_mb": limits.memory_mb, "output_bytes": limits.output_bytes, "imports": list(limits.imports)}
        for attempt in range(2):
            worker = self._take()
            try:
                reply = worker.run(request)
            except (SandboxError, OSError, ValueError) as exc:
                self._drop(worker)
                if attempt == 0:
                    continue
                return ProgramRun("killed", "", f"SandboxError: {exc}", time.perf_counter() - start, ())
            self._idle.put(worker)
            return ProgramRun(reply["status"], reply.get("output") or "", reply.get("error"),
                              time.perf_counter() - start, tuple(reply.get("layers") or ()))
        raise AssertionError("unreachable")  # pragma: no cover

    def layers(self) -> tuple[str, ...]:
        """The containment layers this machine gives a program (a worker is started if none is)."""
        worker = self._take()
        try:
            return worker.layers
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        """Stop the idle workers (busy ones stop when their program ends and they are closed later)."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            self._drop(worker)


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process's shared :class:`Sandbox` (two workers, stopped when the process exits)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def run_program(program: str, limits: SandboxLimits = SandboxLimits()) -> ProgramRun:
    """Run ``program`` in the shared sandbox (:class:`Sandbox`): its output, error, status and seconds.
    A program that fails, runs out of time or prints nothing is a :class:`ProgramRun` whose
    :attr:`~ProgramRun.failure` says why; nothing is raised for it."""
    return default_sandbox().run(program, limits)


def sandbox_layers() -> tuple[str, ...]:
    """The containment layers of this machine: always ``restrictedpython``, ``rlimits``,
    ``fresh-folder``; ``network-namespace``, ``landlock`` and ``seccomp`` where the kernel allows;
    ``audit-hook`` where Python has audit hooks (3.8 and later)."""
    return run_program("print(1)").layers
