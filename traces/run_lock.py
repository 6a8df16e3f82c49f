"""The live-run lock of a run id on a SQLite trace database: one process runs a run at a time."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from pathlib import Path
from typing import Iterator

try:  # POSIX: a run id's live-run lock (TraceStore.run_lock); elsewhere runs are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from agora.traces.errors import RunLockedError, TraceStoreError
from agora.traces.rows import now


def lock_path(db_path: str | Path, run_id: str) -> Path:
    """The live-run lock file of ``run_id`` on the trace database ``db_path``:
    ``<db>.locks/<sha256 of the run id>.lock`` (any run id gives a safe, distinct file name), beside
    the file a symbolic link ``db_path`` points to: a run started through the link and one started
    on the file itself take one lock. (Two hard links of one file are two names: not detected.)"""
    p = Path(os.path.realpath(db_path))
    digest = hashlib.sha256(str(run_id).encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return p.with_name(p.name + ".locks") / f"{digest}.lock"


@contextlib.contextmanager
def run_lock(db_path: str | Path, run_id: str) -> Iterator[None]:
    """Hold the live-run lock of ``run_id`` on the database ``db_path`` while the block runs.

    An exclusive ``flock`` on :func:`lock_path`, taken without waiting: the kernel releases it when
    the holder ends however it ends (``kill -9`` included), so a lock left by a dead process is
    simply taken over; the file holds the holder's pid, host and start time for the refusal
    message. Two threads of one process are refused as two processes are (a lock belongs to an
    open file). The file is removed when the block ends. Taken once per run, not per step.
    ``":memory:"`` databases and systems without ``fcntl`` (Windows) are not locked.

    Raises:
        RunLockedError: another live process (or thread) holds the lock; names its pid and host.
        TraceStoreError: the lock folder cannot be created.
    """
    if str(db_path) == ":memory:" or fcntl is None:
        yield
        return
    path = lock_path(db_path, run_id)
    while True:
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder was removed by a holder releasing its lock: again
            continue
        except OSError as exc:
            raise TraceStoreError(f"{path.parent}: cannot create the run lock ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").split("\n")
            os.close(fd)
            who = (f"pid {holder[0]} on {holder[1]}, since {holder[2]}" if len(holder) >= 3 and holder[0]
                   else "a process that is starting")
            raise RunLockedError(f"run id {run_id!r} is being run by another process ({who}) on {db_path}; wait "
                                 "for it to end (or stop it), or pick a new --run-id") from None
        try:  # the file may have been unlinked by its last holder between our open and flock: retry
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{platform.node()}\n{now()}\n{run_id}\n".encode("utf-8", "replace"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)  # releases the flock
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # when no other run holds a lock there
