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
