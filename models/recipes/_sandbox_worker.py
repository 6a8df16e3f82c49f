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
4. compiles the program with RestrictedPython (``compile_restricted``: no name or attribute that
   starts with ``_``, so no ``__class__.__bases__`` walk, no ``__import__``) and runs it with a
   small set of built-ins (no ``open``, ``eval``, ``exec``, ``getattr`` is RestrictedPython's
   ``safer_getattr``), an import hook that admits only the allowed modules, and a ``print`` that
   collects at most ``output_bytes`` (more: ``output_limit``). A module attribute that is a module
   outside the allowed ones (``sympy.utilities.misc.os``) is refused too;
5. writes its result to a file in its folder and exits; the worker reads it and removes the folder.
"""

from __future__ import annotations

import ast
import ctypes
import ctypes.util
import gc
import json
import os
import resource
import select
import shutil
import signal
import string
import sys
import tempfile
import time
import types

import _string
from RestrictedPython import RestrictingNodeTransformer, compile_restricted
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import (guarded_iter_unpack_sequence, guarded_unpack_sequence, safe_builtins,
                                     safer_getattr)

#: Modules imported at start when present (a child's import of one of them is then free).
PRELOAD = ("math", "cmath", "fractions", "decimal", "itertools", "functools", "collections", "statistics",
           "operator", "string", "re", "datetime", "heapq", "bisect", "numbers", "random", "sympy")
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

_BUILTIN_NAMES = ("abs", "all", "any", "bin", "bool", "chr", "complex", "dict", "divmod", "enumerate", "filter",
                  "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len",
                  "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr", "reversed", "round",
                  "set", "slice", "sorted", "str", "sum", "tuple", "zip", "object", "property", "staticmethod",
                  "classmethod", "callable", "ascii", "bytes", "bytearray", "super")

_LAYERS: list[str] = ["restrictedpython", "rlimits", "fresh-folder"]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


_LINUX = sys.platform.startswith("linux")  # Landlock, seccomp and namespaces are Linux's


def _private_network() -> None:
    """Move the worker into a new network namespace (no interfaces), when the kernel allows it."""
    if not _LINUX:
        return
    libc = _libc()
    if libc.unshare(0x40000000) == 0 or libc.unshare(0x10000000 | 0x40000000) == 0:  # NEWNET, or NEWUSER|NEWNET
        _LAYERS.append("network-namespace")


# ----------------------------------------------------------------------------- kernel layers (child)

_SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self (x86_64 and aarch64 alike)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


#: Folders a program may read below (Python's own: a lazy import inside an allowed module reads them).
_READABLE = sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path)
                    if p and os.path.isdir(p)})


def _landlock(folder: str) -> bool:
    """Forbid, for this process, reading outside ``folder`` and Python's folders (:data:`_READABLE`),
    writing, removing or making any file outside ``folder``, executing any file, and TCP; ``False``
    when the kernel has no Landlock."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_LANDLOCK[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return False
    read = (1 << 2) | (1 << 3)  # READ_FILE, READ_DIR
    write = (1 << 1) | sum(1 << b for b in range(4, 13))  # WRITE_FILE, REMOVE_*, MAKE_*
    if abi >= 2:
        write |= 1 << 13  # REFER
    if abi >= 3:
        write |= 1 << 14  # TRUNCATE
    handled = 1 | read | write  # EXECUTE too: allowed nowhere
    attr = (ctypes.c_uint64 * 2)(handled, 3 if abi >= 4 else 0)  # handled net: BIND_TCP | CONNECT_TCP
    size = 16 if abi >= 4 else 8
    fd = libc.syscall(_SYS_LANDLOCK[0], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return False
    ok = True
    for path, rights in [(folder, read | write), *((p, read) for p in _READABLE)]:
        try:
            dir_fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
        except OSError:
            continue
        rule = _PathBeneath(rights, dir_fd)
        ok = ok and libc.syscall(_SYS_LANDLOCK[1], fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) == 0
        os.close(dir_fd)
    ok = ok and libc.prctl(38, 1, 0, 0, 0) == 0 and libc.syscall(_SYS_LANDLOCK[2], fd, ctypes.c_uint32(0)) == 0
    os.close(fd)
    return ok


_DENIED_CALLS = ("fork", "vfork", "clone", "clone3", "execve", "execveat", "socket", "socketpair", "connect",
                 "bind", "listen", "accept", "accept4", "kill", "tkill", "ptrace", "unshare", "setns", "mount",
                 "umount2", "chroot", "pivot_root", "reboot", "setuid", "setgid", "process_vm_writev")


def _load_seccomp() -> ctypes.CDLL | None:
    """libseccomp, loaded once by the worker (``find_library`` runs programs: never in a child)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    except OSError:
        return None


_SECCOMP_LIB = _load_seccomp() if _LINUX else None


def _seccomp() -> bool:
    """Make the system calls of :data:`_DENIED_CALLS` fail with EPERM; ``False`` without libseccomp."""
    lib = _SECCOMP_LIB
    if lib is None:
        return False
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    ctx = lib.seccomp_init(0x7FFF0000)  # SCMP_ACT_ALLOW
    if not ctx:
        return False
    deny = 0x00050000 | 1  # SCMP_ACT_ERRNO(EPERM)
    for call in _DENIED_CALLS:
        nr = lib.seccomp_syscall_resolve_name(call.encode())
        if nr >= 0:
            lib.seccomp_rule_add(ctx, deny, nr, 0)
    ok = lib.seccomp_load(ctx) == 0
    lib.seccomp_release(ctx)
    return ok


def _address_space() -> int:
    """Bytes of address space this process holds now (``/proc/self/statm``), 0 when unknown."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _limit(which: int, value: int, hard: int | None = None) -> None:
    try:
        resource.setrlimit(which, (value, value if hard is None else hard))
    except (ValueError, OSError):
        pass


# ----------------------------------------------------------------------------- the restricted run (child)


class _OutputLimit(Exception):
    pass


class _Printer:
    """RestrictedPython's ``_print_``: collects printed text, at most ``cap`` bytes."""

    def __init__(self, cap: int):
        self.parts: list[str] = []
        self.size, self.cap, self.over = 0, cap, False

    def __call__(self, _getattr_=None) -> "_Printer":  # one collector per program (and per function)
        return self

    def write(self, text: str) -> None:
        self.size += len(text.encode("utf-8", "replace"))
        if self.size > self.cap:
            self.over = True
            raise _OutputLimit(f"the program printed more than {self.cap} bytes")
        self.parts.append(text)

    def _call_print(self, *objects, **kwargs) -> None:
        kwargs.pop("file", None)
        print(*objects, file=self, **kwargs)


def _importer(allowed: frozenset[str]):
    real = __import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.split(".")[0] not in allowed:
            raise ImportError(f"import of {name!r} is not allowed (allowed: {', '.join(sorted(allowed))})")
        module = real(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            if item == "*":
                continue
            value = getattr(module, item, None)
            if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in allowed:
                raise ImportError(f"{name}.{item} is the module {value.__name__!r}, which is not allowed")
        return module

    return guarded_import


class _SafeFormatter(string.Formatter):
    """``str.format`` whose fields go through the guarded ``getattr``/item access (RestrictedPython
    refuses ``str.format`` outright, since ``"{0.__class__}".format(x)`` would reach private
    attributes; programs format numbers with it)."""

    def __init__(self, guarded_getattr):
        self.guarded_getattr = guarded_getattr

    def get_field(self, field_name, args, kwargs):
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self.guarded_getattr(obj, key) if is_attr else default_guarded_getitem(obj, key)
        return obj, first


def _getattr_guard(allowed: frozenset[str]):
    def guarded_getattr(obj, name, default=None):
        if isinstance(obj, str) and name in ("format", "format_map"):
            formatter = _SafeFormatter(guarded_getattr)
            if name == "format":
                return lambda *args, **kwargs: formatter.vformat(obj, args, kwargs)
            return lambda mapping: formatter.vformat(obj, (), mapping)
        value = safer_getattr(obj, name, default)
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in allowed:
            raise AttributeError(f"{name!r} is the module {value.__name__!r}, which is not allowed")
        return value

    return guarded_getattr


def _inplacevar(op: str, x, y):
    ops = {"+=": lambda: x + y, "-=": lambda: x - y, "*=": lambda: x * y, "/=": lambda: x / y,
           "//=": lambda: x // y, "%=": lambda: x % y, "**=": lambda: x ** y, "<<=": lambda: x << y,
           ">>=": lambda: x >> y, "|=": lambda: x | y, "^=": lambda: x ^ y, "&=": lambda: x & y,
           "@=": lambda: x @ y}
    if op not in ops:
        raise SyntaxError(f"operator {op} is not allowed")
    return ops[op]()


class _Policy(RestrictingNodeTransformer):
    """RestrictedPython's policy, with ``x[i] += y`` and ``obj.a += y`` read as ``x[i] = x[i] + y``
    (RestrictedPython refuses augmented assignment of items and attributes; programs count with it)."""

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.target, (ast.Subscript, ast.Attribute)):
            load = ast.parse(ast.unparse(node.target), mode="eval").body
            assign = ast.Assign(targets=[node.target], value=ast.BinOp(left=load, op=node.op, right=node.value))
            ast.copy_location(assign, node)
            ast.fix_missing_locations(assign)
            return self.visit(assign)
        return super().visit_AugAssign(node)


def _restricted_globals(printer: _Printer, allowed: frozenset[str]) -> dict:
    import builtins

    names = dict(safe_builtins)
    names.update({n: getattr(builtins, n) for n in _BUILTIN_NAMES if hasattr(builtins, n)})
    for n in ("open", "compile", "eval", "exec", "globals", "locals", "vars", "dir", "input", "breakpoint",
              "memoryview", "help", "setattr", "delattr", "getattr"):
        names.pop(n, None)
    guarded_getattr = _getattr_guard(allowed)
    names["__import__"] = _importer(allowed)
    names["getattr"] = guarded_getattr
    names["hasattr"] = lambda obj, name: not name.startswith("_") and hasattr(obj, name)
    return {"__builtins__": names, "__name__": "__main__", "__metaclass__": type,
            "_print_": printer, "_getattr_": guarded_getattr, "_getitem_": default_guarded_getitem,
            "_getiter_": default_guarded_getiter, "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence, "_write_": lambda ob: ob, "_inplacevar_": _inplacevar,
            "_apply_": lambda f, *a, **k: f(*a, **k)}


def _child(request: dict, folder: str, result_path: str) -> None:
    """Runs in the forked child; never returns."""
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
        _limit(resource.RLIMIT_FSIZE, 4 * cap + 65536)  # the result file holds the output, JSON-escaped
        _limit(resource.RLIMIT_CORE, 0)
        _limit(resource.RLIMIT_NPROC, 0)
        layers = list(_LAYERS)
        if _LINUX and _landlock(folder):
            layers.append("landlock")
        if _LINUX and _seccomp():
            layers.append("seccomp")
        allowed = frozenset(request["imports"])
        printer = _Printer(cap)
        error = None
        try:
            compiled = compile_restricted(request["program"], filename="<program>", mode="exec", policy=_Policy)
            exec(compiled, _restricted_globals(printer, allowed))  # noqa: S102 - restricted code, in the limited child
        except SyntaxError as exc:  # RestrictedPython's refusals arrive as SyntaxError too
            why = exc.msg if isinstance(exc.msg, str) else "; ".join(map(str, exc.args[0] if exc.args else ()))
            error = f"SyntaxError: {why or exc}"[:2000]
        except _OutputLimit as exc:
            error = f"OutputLimit: {exc}"
        except RecursionError:
            error = "RecursionError: maximum recursion depth exceeded"
        except BaseException as exc:  # noqa: BLE001 - the program's own error is its result
            error = f"{type(exc).__name__}: {exc}"[:2000]
        output = "".join(printer.parts)
        status = "output_limit" if printer.over else ("error" if error else "ok")
        with open(result_path, "w", encoding="utf-8") as fh:
            json.dump({"status": status, "output": output, "error": error, "layers": layers}, fh)
    except BaseException:  # noqa: BLE001 - a failure to set up or report: the worker sees no result file
        code = 70
    os._exit(code)


def _wait(pid: int, wall_s: float) -> tuple[int | None, bool]:
    """``(wait status, timed out)``: the child's status, after killing its group at ``wall_s``."""
    deadline = time.monotonic() + wall_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        left = deadline - time.monotonic()
        if pidfd is not None:
            select.select([pidfd], [], [], max(0.0, left))
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
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


def run(request: dict) -> dict:
    """One program in a forked child: the reply of the module docstring."""
    folder = tempfile.mkdtemp(prefix="agora-program-")
    result_path = os.path.join(folder, ".result.json")
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(request, folder, result_path)
    status, timed_out = _wait(pid, float(request["wall_s"]))
    seconds = time.perf_counter() - start
    reply = {"status": "killed", "output": "", "error": None, "seconds": seconds, "layers": list(_LAYERS)}
    try:
        with open(result_path, encoding="utf-8") as fh:
            reply.update(json.load(fh))
    except (OSError, ValueError):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)
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
