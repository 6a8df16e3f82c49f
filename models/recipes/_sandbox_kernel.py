"""The kernel layers of a sandbox child (:mod:`_sandbox_worker`; loaded by path, imports nothing of
Agora): the worker's own network namespace, Landlock (no file read outside the child's folder and
Python's own, no write, no execute, no TCP), seccomp (``fork``, ``execve``, ``socket``, ... fail with
EPERM) and ``setrlimit`` limits. Each layer the kernel grants is named in :data:`_LAYERS`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys


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
                 "umount2", "chroot", "pivot_root", "reboot", "setuid", "setgid", "process_vm_writev",
                 # other processes reached without kill/ptrace (a root child may signal, read and take file
                 # descriptors of any process): tgkill, queued signals, pidfds, process_vm_readv, kcmp
                 "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
                 "process_vm_readv", "kcmp",
                 # io_uring runs file and network operations that seccomp does not see as system calls
                 "io_uring_setup", "io_uring_enter", "io_uring_register",
                 # the kernel's own state: modules, keys, BPF, perf, file handles, mounts, identities, clocks
                 "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf",
                 "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "open_by_handle_at",
                 "name_to_handle_at", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree",
                 "mount_setattr", "swapon", "swapoff", "setresuid", "setresgid", "setreuid", "setregid", "setgroups",
                 "setfsuid", "setfsgid", "capset", "sethostname", "setdomainname", "settimeofday", "clock_settime",
                 "clock_adjtime", "adjtimex", "acct", "quotactl", "syslog", "iopl", "ioperm",
                 # another process's priority, scheduling, processors and memory placement
                 "setpriority", "sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity",
                 "ioprio_set", "migrate_pages", "move_pages")


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


# ----------------------------------------------------------------------------- audit hook (child)

#: Audit events (PEP 578) a child refuses whatever raises them: processes, signals, network, raw
#: memory (``ctypes``), the collector's object walks, code and function objects made by hand,
#: unpickling, limits raised again, tracing, the working folder changed, and any change to the file
#: system but a file opened for writing in the child's own folder. None of them is on a path an
#: allowed library takes for a program; each is one that code past RestrictedPython would take.
_AUDIT_REFUSED = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "os.startfile", "os.chdir", "os.fchdir", "os.chroot", "subprocess.Popen", "pty.spawn", "signal.pthread_kill",
    "resource.setrlimit", "resource.prlimit", "sys.setprofile", "sys.settrace", "sys._current_frames",
    "sys._current_exceptions", "code.__new__", "function.__new__", "pickle.find_class", "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.mkfifo", "os.mknod", "os.chmod",
    "os.chown", "os.chflags", "os.lchflags", "os.link", "os.symlink", "os.truncate", "os.utime", "os.setxattr",
    "os.removexattr", "os.putenv", "os.unsetenv", "shutil.rmtree", "shutil.copyfile", "shutil.copymode",
    "shutil.copystat", "shutil.copytree", "shutil.move", "shutil.chown", "shutil.make_archive",
    "shutil.unpack_archive", "tempfile.mkstemp", "tempfile.mkdtemp", "fcntl.ioctl", "fcntl.fcntl", "fcntl.flock",
    "fcntl.lockf", "mmap.__new__", "sys.unraisablehook", "sys.excepthook", "cpython.run_command",
    "cpython.run_file", "cpython.run_module", "cpython.run_startup", "cpython.run_interactivehook",
    "cpython._PySys_ClearAuditHooks"})
#: Families of audit events a child refuses (``socket.connect``, ``ctypes.dlopen``, ``gc.get_objects``...).
_AUDIT_REFUSED_FAMILIES = ("socket.", "ctypes.", "gc.", "sqlite3.", "webbrowser.", "urllib.", "http.", "ftplib.",
                           "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "ssl.", "winreg.", "_winapi.",
                           "msvcrt.", "syslog.")
#: Audit events that read a file or folder by path: allowed below the child's folder and Python's
#: own folders (:data:`_READABLE`) only; ``open`` for writing below the child's folder only.
_AUDIT_PATHS = frozenset({"open", "os.listdir", "os.scandir", "glob.glob"})
#: ``os.open`` flags that write (``O_WRONLY``, ``O_RDWR``, ``O_CREAT``, ``O_TRUNC``, ``O_APPEND``).
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


#: C functions that reach another process without raising an audit event, as ``(module, name)``:
#: a child's modules hold a function that raises ``PermissionError`` in their place
#: (``_posixsubprocess.fork_exec`` starts a process, ``pidfd_open`` with ``pidfd_send_signal``
#: signals any process the user may signal, ``setpriority`` and ``sched_set*`` change another
#: process's share of the machine).
_UNAUDITED = (("_posixsubprocess", "fork_exec"), ("subprocess", "_fork_exec"), ("_signal", "pidfd_send_signal"),
              ("signal", "pidfd_send_signal"),
              *((module, name) for module in ("posix", "os") for name in (
                  "pidfd_open", "setpriority", "sched_setscheduler", "sched_setparam", "sched_setaffinity")))
#: Modules a child may not make anew (a new module object would hold those functions again), nor
#: load at all (``_posixshmem``, ``_multiprocessing``: shared memory and named semaphores, files in
#: ``/dev/shm`` made without an audit event): ``_imp.create_dynamic`` raises the audit event
#: ``import``, which the hook refuses for them, and ``_imp.create_builtin``, which raises none, is
#: routed through the hook (see :func:`_audit_hook`).
_UNAUDITED_MODULES = frozenset({"_posixsubprocess", "posix", "_signal", "_posixshmem", "_multiprocessing"})


def _audit_hook(folder: str) -> bool:
    """Install, in this process (a child, just before its program runs), a ``sys.addaudithook``
    hook that raises ``PermissionError`` (``EPERM`` as seccomp's refusals; ``EACCES`` for a path,
    as Landlock's) for the events of :data:`_AUDIT_REFUSED` and :data:`_AUDIT_REFUSED_FAMILIES`,
    for a read (``open``, ``os.listdir``...) of a path outside ``folder`` and Python's own
    folders, and for an ``open`` that writes outside ``folder``. The path an event names must be a
    plain ``str`` or ``bytes`` (an object's ``__fspath__`` could name another file when the file is
    opened) without a ``..`` part. Everything the hook uses is bound when it is made: code that got
    past RestrictedPython may replace module attributes and built-ins, not what the hook holds, and
    it cannot reach the hook or its helpers (no collector walks, no ``ctypes``; they are made here,
    not held by a module). A library that copes with Landlock's refusals (a bytecode cache it
    cannot write) copes with these. ``False`` where Python has no audit hooks. A hook cannot be
    removed: only ever call this in a child."""
    import sys

    add = getattr(sys, "addaudithook", None)
    if add is None:
        return False

    def normal_path(path: str, cwd: str) -> str | None:
        """``path`` (relative to ``cwd``) as an absolute path with ``.`` and empty parts taken out, by its
        text alone (no file system calls, no module function a program could replace); ``None`` for a
        path with a ``..`` part (a symbolic link before it would lead elsewhere than the text says)."""
        if not path.startswith("/"):
            path = cwd + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                return None
            if part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    cwd = normal_path(os.path.realpath(folder), "/") or folder
    # each of Python's folders as written (the paths imports open) and as resolved
    folders = [normal_path(q, "/") for p in _READABLE for q in (os.path.abspath(p), os.path.realpath(p))]
    readable = tuple(dict.fromkeys(r for r in (cwd, *folders, "/dev/null", "/dev/urandom") if r))
    writable = (cwd,)
    refused, families, paths, write_flags = _AUDIT_REFUSED, _AUDIT_REFUSED_FAMILIES, _AUDIT_PATHS, _WRITE_FLAGS
    normal, exact_type, plain_str, plain_bytes, plain_int, denied = normal_path, type, str, bytes, int, PermissionError

    def below(path, roots) -> bool:
        kind = exact_type(path)
        if kind is plain_bytes:
            path = plain_bytes.decode(path, "utf-8", "surrogateescape")
        elif kind is not plain_str:
            return False
        found = normal(path, cwd)
        if found is None:
            return False
        for root in roots:
            if found == root or plain_str.startswith(found, root + "/"):
                return True
        return False

    # ``_imp.create_builtin(spec)`` makes a built-in module anew (``posix``, with its ``pidfd_open``)
    # and raises no audit event. Its replacement holds no reference to it (a function's closure is
    # readable): it raises an event of the sandbox's own, and the hook, which nothing can reach,
    # makes the module from the name alone, read once (a spec's ``name`` may change between reads).
    import _imp
    import types

    create_builtin, audit, namespace_type, get = _imp.create_builtin, sys.audit, types.SimpleNamespace, getattr
    unaudited_modules, own_event = _UNAUDITED_MODULES, "agora.sandbox.create_builtin"

    def builtin_module(spec, box) -> None:
        name = get(spec, "name", None)
        if exact_type(name) is not plain_str or name in unaudited_modules:
            raise denied(1, f"Operation not permitted (the sandbox's audit hook refuses making the module {name!r})")
        box.append(create_builtin(namespace_type(name=name, origin="built-in", loader_state=None,
                                                 submodule_search_locations=None, parent=name.rpartition(".")[0])))

    def hook(event, args):
        if event in refused or plain_str.startswith(event, families):
            raise denied(1, f"Operation not permitted (the sandbox's audit hook refuses {event})")
        if event == own_event:
            return builtin_module(*args)
        if event == "import":  # a name that is not a plain str could answer ``in`` falsely
            if args and (exact_type(args[0]) is not plain_str or args[0] in unaudited_modules):
                raise denied(1, f"Operation not permitted (the sandbox's audit hook refuses importing {args[0]} anew)")
            return
        if event not in paths:
            return
        path = args[0] if args else None
        if event == "open":
            mode, flags = args[1], args[2]
            writes = exact_type(flags) is plain_int and flags & write_flags
            if exact_type(mode) is plain_str:
                for letter in "wax+":
                    writes = writes or letter in mode
            if exact_type(path) is plain_int:  # a descriptor already open: reading it is allowed, writing not
                if writes:
                    raise denied(13, "Permission denied (the sandbox's audit hook: writing to an open descriptor)", path)
                return
            if not below(path, writable if writes else readable):
                raise denied(13, f"Permission denied (the sandbox's audit hook: {'writing' if writes else 'reading'})", path)
            return
        if path is None or exact_type(path) is plain_int:  # the working folder, or a descriptor already open
            return
        if not below(path, readable):
            raise denied(13, f"Permission denied (the sandbox's audit hook: {event})", path)

    def withheld(*args, **kwargs):
        raise denied(1, "Operation not permitted (the sandbox withholds this function)")

    def routed_create_builtin(spec):
        box: list = []
        audit(own_event, spec, box)
        return box[0]

    for module_name, name in _UNAUDITED:
        namespace = getattr(sys.modules.get(module_name), "__dict__", None)
        if isinstance(namespace, dict) and name in namespace:
            namespace[name] = withheld
    vars(_imp)["create_builtin"] = routed_create_builtin
    add(hook)
    return True
