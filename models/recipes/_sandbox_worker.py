"""The sandbox's worker process (run as a script: ``python -I _sandbox_worker.py``; imports nothing of Agora).

It reads one JSON request per line on stdin, ``{"program", "cpu_s", "wall_s", "memory_mb",
"output_bytes", "imports"}``, runs the program in a forked child and writes one JSON reply per line
on stdout, ``{"status", "output", "error", "seconds", "layers"}``. ``status`` is ``ok``, ``error``
(the program raised, or was refused when compiled), ``timeout`` (wall or CPU time), ``killed`` (a
signal: the memory cap hit outside Python, a refused system call) or ``output_limit``.

The worker imports RestrictedPython and the allowed modules once, at start (the "pre-forked
worker": a child costs a ``fork``, not an interpreter start and its imports), and moves itself into
a network namespace of its own when the kernel lets it (no interfaces: no network). Each child:

1. starts a session of its own (the worker kills its process group at the wall-time limit), moves
   to a fresh empty temporary folder and points stdin/stdout/stderr at ``/dev/null``;
2. sets OS limits (``resource.setrlimit``): CPU seconds, address space (what the worker holds plus
   ``memory_mb``), file size (``output_bytes``), no core files, no new processes (``RLIMIT_NPROC``
   0: not enforced for root, hence 4);
3. when the kernel has them (Linux: Landlock, libseccomp): Landlock forbids reading outside the
   folder and Python's own folders, writing, removing or making any file outside the folder,
   executing any file and TCP; seccomp makes ``fork``,
   ``clone``, ``execve``, ``socket``, ``kill``, ``ptrace``, ``unshare``, ``mount`` ... fail with EPERM;
   last, an audit hook (``sys.addaudithook``, on any kernel) refuses processes, signals, sockets,
   ``ctypes``, the collector's walks, code made by hand, changes to the file system, reads outside
   the folder and Python's folders and writes outside the folder;
4. compiles the program with RestrictedPython (``compile_restricted``: no name or attribute that
   starts with ``_``, so no ``__class__.__bases__`` walk, no ``__import__``) and runs it with a
   small set of built-ins (no ``open``, ``eval``, ``exec``, ``getattr`` is RestrictedPython's
   ``safer_getattr``), an import hook that admits only the allowed modules, and a ``print`` that
   collects at most ``output_bytes`` (more: ``output_limit``); what library code prints to ``sys.stdout``
   (``sympy.pprint``) is collected the same way. A module attribute that is a module
   outside the allowed ones (``sympy.utilities.misc.os``) is refused too, and of sympy only the
   allow-listed mathematical modules, and their functions and classes, are reachable; attributes
   of modules, classes and functions the program did not define cannot be set or deleted;
   sympy's string evaluation (``sympify("...")``, ``parse_expr``) is compiled the same restricted way;
5. writes its result to a pipe the worker opened before the fork (not a file the program could
   forge) and exits (an exception whose message is hostile is named, not shown); the worker checks
   the result's keys and types, replaces a NUL or lone surrogate in the output and error with
   U+FFFD, and removes the folder.

Steps 2 and 3 are ``_sandbox_kernel.py``, step 4 ``_sandbox_restricted.py`` (both beside this file,
loaded by path).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import types

from RestrictedPython import compile_restricted


def _sibling(name: str) -> types.ModuleType:
    """The module ``name`` beside this file, loaded by path (``python -I`` puts no folder of ours on
    ``sys.path``, and none is added: a program's imports see only the allowed modules)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The child's kernel layers (Landlock, seccomp, rlimits, the network namespace) and its restricted run.
_kernel = _sibling("_sandbox_kernel")
_restricted = _sibling("_sandbox_restricted")
_LAYERS, _LINUX = _kernel._LAYERS, _kernel._LINUX
_address_space, _audit_hook, _landlock, _limit, _private_network, _seccomp = (
    _kernel._address_space, _kernel._audit_hook, _kernel._landlock, _kernel._limit, _kernel._private_network,
    _kernel._seccomp)
_OutputLimit, _Policy, _Printer, _restricted_globals, _route_sympy = (
    _restricted._OutputLimit, _restricted._Policy, _restricted._Printer, _restricted._restricted_globals,
    _restricted._route_sympy)

#: Modules imported at start when present (a child's import of one of them is then free).
PRELOAD = ("math", "cmath", "fractions", "decimal", "itertools", "functools", "collections", "statistics",
           "operator", "string", "re", "datetime", "heapq", "bisect", "numbers", "random", "enum", "typing", "sympy")
for _name in PRELOAD:
    try:
        __import__(_name)
    except ImportError:
        pass


def _warm_sympy() -> None:
    """Run sympy's common calls once in the worker: their lazy imports and caches are then inherited
    by every child (a child's first ``solve`` otherwise costs about 150 ms, later ones about 2 ms)."""
    try:
        import sympy
    except ImportError:
        return
    x = sympy.symbols("x")
    sympy.solve(x**2 - 5 * x + 6, x)
    sympy.solve([x + 1], [x])
    sympy.simplify((x**2 - 1) / (x - 1))
    sympy.factor(x**3 - x)
    sympy.expand((x + 1) ** 3)
    sympy.integrate(x**2, (x, 0, 1))
    sympy.diff(sympy.sin(x) * x, x)
    sympy.factorint(360)
    sympy.nsimplify(0.75)
    sympy.N(sympy.sqrt(8) + sympy.Rational(1, 3) + sympy.pi)
    sympy.Eq(x, 1)
    sympy.binomial(10, 3)
    sympy.isprime(97)


_warm_sympy()
if "sympy" in sys.modules:
    # every sympy package a program may import, once, here: a child cannot write a bytecode cache
    # (its writes stay in its folder), so where an install has none (``PYTHONDONTWRITEBYTECODE``, a
    # read-only site-packages) each child compiled ``sympy.stats``'s sources anew, about 1.6 s; the
    # routes below then cover these modules as well (the worker itself writes their cache where it can)
    for _name in _restricted.SYMPY_PACKAGES:
        try:
            __import__(_name)
        except ImportError:
            pass
for _name in _restricted.CODE_RUNNERS:  # loaded here, so that every child replaces their exec (see there)
    try:
        __import__(_name)
    except ImportError:
        pass
_restricted._route_importers()  # once, before any fork (a child's allowed modules are set in the child)
_restricted._route_containers()
_restricted._route_user_string()
_restricted._route_functools()
_restricted._route_reconstruction()
_restricted._route_annotations()
_restricted._route_var()
_restricted._route_pollute()
_restricted._route_priority()
_restricted._route_mpmath_names()
_restricted._route_attribute_helpers()
_restricted._route_printer_getattr()
_restricted._route_predicates()
_restricted._route_lazy_function()
_restricted._route_public()
_restricted._route_hyp_summator()
_restricted._route_library_registries()
_restricted._route_library_classes()
_restricted._route_metaclasses()  # after the routes that replace a metaclass's __init__
_restricted.warm_star_views(frozenset(n for n in PRELOAD if n in sys.modules))  # ``from sympy import *``


def _type_name(exc: BaseException) -> str:
    """The name of ``exc``'s class as a plain ``str`` (a class a program made may carry a ``str``
    subclass as its name, whose ``__format__`` is the program's), as it is when it is an identifier,
    else quoted with its control characters escaped (``repr``): a class made by a metaclass call may
    have any name, and one like ``'E\\x1b[31m\\nFAKE\\r'`` or ``'ValueError: x'`` put terminal codes or
    a made-up error at the start of the result's error."""
    name = type.__dict__["__name__"].__get__(type(exc))
    name = str.__str__(name) if isinstance(name, str) else "Exception"
    return name if name.isidentifier() else repr(name)


def _error_text(exc: BaseException) -> str:
    """``Type: message`` of the program's exception ``exc``, at most 2000 characters. Its message
    is the program's code (``__str__``): one that raises, or returns something that is not a
    ``str``, gives ``Type: <its message could not be shown: Error>`` instead (the sample fails with
    that error, and what it printed is kept); one that runs past the CPU limit is a timeout."""
    try:
        text = str.__str__(str(exc)[:2000])
    except BaseException as inner:  # noqa: BLE001 - whatever the program's __str__ raised
        text = f"<its message could not be shown: {_type_name(inner)}>"
    return f"{_type_name(exc)}: {text}"[:2000]


def _child(request: dict, folder: str, result_fd: int) -> None:
    """Runs in the forked child; never returns. The result goes to the pipe ``result_fd`` (the
    program has no ``os`` to reach it; the worker checks what arrives)."""
    code = 0
    try:
        os.setsid()
        os.chdir(folder)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.environ.clear()
        cap = int(request["output_bytes"])
        cpu = max(1, int(-(-float(request["cpu_s"]) // 1)))
        _limit(resource.RLIMIT_CPU, cpu, cpu + 1)  # SIGXCPU at the soft limit
        _limit(resource.RLIMIT_AS, _address_space() + int(request["memory_mb"]) * 2**20)
        _limit(resource.RLIMIT_FSIZE, 4 * cap + 65536)  # what the program writes in its folder
        _limit(resource.RLIMIT_CORE, 0)
        _limit(resource.RLIMIT_NPROC, 0)
        layers = list(_LAYERS)
        if _LINUX and _landlock(folder):
            layers.append("landlock")
        if _LINUX and _seccomp():
            layers.append("seccomp")
        if _audit_hook(folder):  # last: the layers above use ctypes, which the hook refuses
            layers.append("audit-hook")
        allowed = frozenset(request["imports"])
        printer = _Printer(cap)
        error = None
        try:
            compiled = compile_restricted(request["program"], filename="<program>", mode="exec", policy=_Policy)
            env = _restricted_globals(printer, allowed, confined_writes="landlock" in layers)
            _route_sympy(env)
            # library functions that print (``sympy.pprint``, mpmath's ``nprint``) write to ``sys.stdout``:
            # the program's output, under its cap (a stand-in with no attribute the program may set)
            sys.stdout = _restricted._Stdout(printer)
            exec(compiled, env)  # noqa: S102 - restricted code, in the limited child
        except SyntaxError as exc:  # RestrictedPython's refusals arrive as SyntaxError too
            try:
                why = exc.msg if isinstance(exc.msg, str) else "; ".join(map(str, exc.args[0] if exc.args else ()))
                error = f"SyntaxError: {str.__str__(why or str(exc))}"[:2000]
            except BaseException:  # noqa: BLE001 - a SyntaxError the program raised with an odd message
                error = _error_text(exc)
        except _OutputLimit as exc:
            error = f"OutputLimit: {exc}"
        except RecursionError:
            error = "RecursionError: maximum recursion depth exceeded"
        except BaseException as exc:  # noqa: BLE001 - the program's own error is its result
            error = _error_text(exc)
        try:
            output = "".join(printer.parts)
            status = "output_limit" if printer.over else ("error" if error else "ok")
            data = json.dumps({"status": status, "output": output, "error": error, "layers": layers}).encode()
        except BaseException as exc:  # noqa: BLE001 - said as it is, not as a child that died
            data = json.dumps({"status": "error", "output": "", "layers": layers,
                               "error": f"SandboxError: the program's result could not be read ({_type_name(exc)})"}
                              ).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(result_fd, view):]
    except BaseException:  # noqa: BLE001 - a failure to set up or report: the worker sees no result file
        code = 70
    os._exit(code)


def _wait(pid: int, wall_s: float, result_fd: int, chunks: list[bytes], limit: int = 2**62,
          overflow: list[bool] | None = None) -> tuple[int | None, bool]:
    """``(wait status, timed out)``: the child's status, after killing its group at ``wall_s``;
    what the child writes to the pipe ``result_fd`` is drained into ``chunks`` meanwhile, at most
    ``limit`` bytes (more: ``chunks`` is emptied and ``overflow[0]`` set)."""
    os.set_blocking(result_fd, False)
    overflow = overflow if overflow is not None else [False]

    def drain() -> None:
        while True:
            try:
                part = os.read(result_fd, 65536)
            except BlockingIOError:
                return
            if not part:
                return
            if sum(map(len, chunks)) + len(part) > limit:  # more than a capped output can be: not kept
                chunks.clear()
                chunks.append(b"")  # the mark of an overflow (see run)
                overflow[0] = True
            if not overflow[0]:
                chunks.append(part)

    deadline = time.monotonic() + wall_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        left = deadline - time.monotonic()
        if pidfd is not None:
            select.select([pidfd, result_fd], [], [], max(0.0, left))
        drain()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            drain()
            if pidfd is not None:
                os.close(pidfd)
            return status, False
        if left <= 0:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            if pidfd is not None:
                os.close(pidfd)
            return status, True
        if pidfd is None:
            time.sleep(min(0.002, max(0.0, left)))


#: Characters a program may print that no trace store keeps: NUL and lone UTF-16 surrogates.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

_RESULT_TYPES = {"status": (str,), "output": (str,), "error": (str, type(None)), "layers": (list,)}
_STATUSES = ("ok", "error", "output_limit")


def _checked(result) -> dict:
    """The child's result with its keys and types checked: unknown keys dropped; a wrong type or
    status raises ``ValueError`` naming the field."""
    if not isinstance(result, dict):
        raise ValueError(f"the child's result is a {type(result).__name__}, not an object")
    out = {}
    for key, types_ in _RESULT_TYPES.items():
        if key not in result:
            raise ValueError(f"the child's result has no field {key!r}")
        if not isinstance(result[key], types_):
            raise ValueError(f"the child's result field {key!r} is a {type(result[key]).__name__}")
        out[key] = result[key]
    if out["status"] not in _STATUSES:
        raise ValueError(f"the child's result field 'status' is {out['status']!r}")
    if not all(isinstance(x, str) for x in out["layers"]):
        raise ValueError("the child's result field 'layers' holds a non-string")
    return out


def run(request: dict) -> dict:
    """One program in a forked child: the reply of the module docstring."""
    folder = tempfile.mkdtemp(prefix="agora-program-")
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(request, folder, write_fd)
    os.close(write_fd)
    chunks: list[bytes] = []
    overflow = [False]
    # a result holds at most output_bytes of output, JSON-escaped (at most 6 bytes a byte), and a short error
    limit = 6 * int(request["output_bytes"]) + 2**20
    try:
        status, timed_out = _wait(pid, float(request["wall_s"]), read_fd, chunks, limit, overflow)
    finally:
        os.close(read_fd)
    seconds = time.perf_counter() - start
    reply = {"status": "killed", "output": "", "error": None, "seconds": seconds, "layers": list(_LAYERS)}
    try:
        if overflow[0]:
            reply.update(status="output_limit", error=f"OutputLimit: the program printed more than {request['output_bytes']} bytes")
        elif chunks:
            reply.update(_checked(json.loads(b"".join(chunks))))
    except ValueError as exc:
        reply.update(status="error", error=f"SandboxError: {exc}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # a lone surrogate or a NUL in the output or the error is no answer, and a trace store cannot keep
    # it (UTF-8 encoders refuse surrogates, PostgreSQL text refuses NUL): each becomes U+FFFD
    for key in ("output", "error"):
        if isinstance(reply[key], str) and _UNSTORABLE.search(reply[key]):
            reply[key] = _UNSTORABLE.sub("\ufffd", reply[key])
    # the child's own cap is the program's to change (``printed``, RestrictedPython's collector, is its
    # object): the output and error are bounded here, outside the child
    cap = int(request["output_bytes"])
    if len(reply["output"].encode("utf-8", "replace")) > cap:
        reply.update(status="output_limit", output=reply["output"].encode("utf-8", "replace")[:cap].decode("utf-8", "ignore"),
                     error=f"OutputLimit: the program printed more than {cap} bytes")
    if isinstance(reply["error"], str) and len(reply["error"]) > 2000:
        reply["error"] = reply["error"][:2000]
    if timed_out:
        reply.update(status="timeout", error=f"TimeoutError: the program ran past its wall-time limit of {request['wall_s']} s")
    elif reply["error"] is None and reply["status"] == "killed":
        sig = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        if sig == signal.SIGXCPU:
            reply.update(status="timeout", error=f"TimeoutError: the program used its CPU-time limit of {request['cpu_s']} s")
        elif sig is not None:
            reply["error"] = f"Killed: the program was stopped by signal {signal.Signals(sig).name}"
        else:
            reply["error"] = "Killed: the program ended without a result (its memory cap, or a refused system call)"
    return reply


def main() -> None:
    _private_network()
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of the children's collections: fewer copied pages
    out = sys.stdout
    print(json.dumps({"ready": True, "layers": _LAYERS}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - a bad request is answered, the worker stays up
            reply = {"status": "error", "output": "", "error": f"SandboxError: {type(exc).__name__}: {exc}",
                     "seconds": 0.0, "layers": list(_LAYERS)}
        print(json.dumps(reply), file=out, flush=True)


if __name__ == "__main__":
    main()