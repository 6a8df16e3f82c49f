"""Opening a trace database file in SQLite: the checks before anything is written, the one-line
error messages, the read-only open, and the locked ``sqlite_utils.Database`` the store's threads share."""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

import sqlite_utils

from agora.models.urls import shown_url
from agora.traces import schema
from agora.traces.errors import TraceStoreError


#: Seconds a write waits for a lock held by another connection or process (SQLite's busy
#: timeout) before it fails with "database is locked".
BUSY_TIMEOUT_S = 30.0


#: How a full disk's line ends for a command that records a run (it resumes).
RESUME_HINT = "rerun with the same --run-id to resume (what was recorded is kept)"


def describe_sqlite_error(path: str | Path, exc: BaseException, what: str = "Agora trace database",
                          again: str = RESUME_HINT) -> str:
    """One line for an SQLite (or file-system) error on the database ``path``, which Agora reads as
    ``what`` (named when the file is not a database or a corrupt one). ``again``: what to do once a
    full disk or a refused write is fixed (a command that records no run: ``"run the command again"``)."""
    msg = str(exc)
    low = msg.lower()
    if "disk is full" in low or isinstance(exc, OSError) and exc.errno == 28:  # SQLITE_FULL, ENOSPC
        return f"{path}: the disk is full ({msg}); free some space, then {again}"
    if "disk i/o error" in low:  # SQLITE_IOERR: a write refused (a file-size limit, a full or failing device)
        return (f"{path}: a disk I/O error ({msg}: a full disk or file-size limit, or a failing device); fix it, then "
                f"{again}")
    if "locked" in low or "busy" in low:
        return (f"{path}: the database is locked by another process (waited {BUSY_TIMEOUT_S:g} s); "
                "try again once it is done")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"{path}: not a readable {what} (not an SQLite database, or a corrupt one: {msg})"
    if "readonly" in low or "read-only" in low or isinstance(exc, PermissionError):
        return f"{path}: not writable ({msg})"
    if "unable to open" in low:
        folder = Path(path).parent
        if not folder.is_dir():
            return f"{path}: cannot open the database file: its folder {folder} does not exist"
        if not Path(path).exists():  # SQLite could not create it: the folder is read-only (or immutable)
            return f"{path}: not writable (no file can be created in the folder {folder}: it is read-only)"
        return f"{path}: cannot open the database file (does its folder exist, and is it writable?)"
    return f"{path}: {msg}"


#: ``scheme://`` at the start of a ``--db`` value: a URL, not a file path.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def check_db_path(path: str | Path) -> None:
    """Refuse a database path that is empty, ``-`` (standard input or output), a URL of a database
    Agora cannot store traces in (``mysql://...``: it would otherwise become a SQLite file named like
    the URL), a folder, or not a regular file (``/dev/null``), before SQLite opens it.

    Raises:
        TraceStoreError: naming the path.
    """
    if isinstance(path, str) and not path.strip():
        raise TraceStoreError(f"{path!r}: an empty database path; give a SQLite file or a postgresql:// URL")
    if str(path) == "-":  # (standard input or output, by the usual convention: never a file named "-" unasked)
        raise TraceStoreError("-: a trace database is a file, not standard input or output; give a file name (for a "
                              "file named '-', write ./-)")
    if isinstance(path, str) and (url := _URL.match(path)):
        scheme = url.group(0)[:-3]
        raise TraceStoreError(f"{shown_url(path)}: a {scheme}:// URL; a trace database is a SQLite file path "
                              "or a postgresql:// URL")
    p = Path(path)
    if p.is_symlink() and not p.exists():  # (else SQLite's "unable to open" read as a read-only folder)
        try:
            p.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise TraceStoreError(f"{path}: a symbolic link that points back to itself (a loop); give the "
                                      "database file's own path") from None
        target = Path(os.path.realpath(p))
        if not target.parent.is_dir():
            raise TraceStoreError(f"{path}: a symbolic link to {os.readlink(p)}, whose folder {target.parent} does "
                                  "not exist; create it, or give the database file's own path")
    if p.is_dir():
        raise TraceStoreError(f"{path}: is a folder, not a database file")
    if p.exists() and not p.is_file():
        raise TraceStoreError(f"{path}: not a regular file (a database needs one)")


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """The file at ``path`` as the kernel knows it, ``(st_dev, st_ino)``; ``None`` when none is there."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_same_file(path: str | Path, opened: tuple[int, int], *, shown: str | Path | None = None) -> None:
    """Refuse to write on when the database file at ``path`` is no longer the file the store opened
    (``opened``, its :func:`file_identity` then): deleted, or replaced by another file (moved over,
    restored from a copy), so that the rows would go to a file nobody can read (an unlinked inode)
    or beside a database that is not this run's. ``shown``: the path as the user gave it (default ``path``).

    Raises:
        TraceStoreError: one line naming the path and what to do.
    """
    now = file_identity(path)
    if now != opened:
        raise TraceStoreError(f"{shown or path}: the trace database was deleted or replaced while this process was writing "
                              f"to it ({'no file is there now' if now is None else 'another file is there now'}); "
                              "nothing more was written. Put the file back, or rerun with another --db")


#: Tables Agora writes besides the core ones (:data:`agora.traces.schema.TABLES`): a database that
#: holds only these (and SQLite's own) is Agora's; any other table without the core ones marks a
#: database of another tool, which a writable store refuses to touch (:func:`schema_problem`).
OWN_TABLES = frozenset({"duels", "reputation_snapshots", "leader_snapshots", "preference_pairs", "benches",
                        "bench_cells"})


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """Why an existing SQLite database cannot take Agora's traces, as one phrase, or ``None``.

    Read-only (``sqlite_master`` and ``PRAGMA table_info``), against the declared schema
    (:data:`agora.traces.schema.TABLES`, ``PRIMARY_KEYS``), so a column added there is checked
    without changing this function. Accepted: an empty database; core tables with Agora's primary
    key that lack columns (an older Agora's database, e.g. without those of ``ADDED_COLUMNS``: the
    store adds them, every Agora column being nullable, NULL in old rows); extra columns that are
    nullable or have a default (a newer Agora's, whose rows this one writes without them).
    Refused: tables of another tool and none of Agora's; a core table that is a view; a core table
    with another primary key, or with an extra ``NOT NULL`` column without a default (an insert
    would fail after the first question's work); runs recorded but no ``questions`` table (renamed
    or dropped: a resume would redo, and record again, every question it held).
    """
    objects = {name: kind for kind, name in conn.execute(
        "select type, name from sqlite_master where type in ('table', 'view')")}
    core = [t for t in schema.TABLES if t in objects]
    if not core:
        foreign = sorted(n for n in objects if not n.startswith("sqlite_") and n not in OWN_TABLES)
        if foreign:
            shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
            return f"not an Agora trace database (it holds {shown}, and no runs table); give --db a new file"
        return None
    for table in core:
        if objects[table] != "table":
            return f"{table} is a {objects[table]}, not a table: not a trace database Agora can write"
        info = conn.execute(f"PRAGMA table_info([{table}])").fetchall()  # cid, name, type, notnull, default, pk
        have = {r[1]: r for r in info}
        pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        want = schema.PRIMARY_KEYS[table]
        if pk != want:
            return (f"table {table} has primary key ({', '.join(pk) or 'none'}), Agora's has ({', '.join(want)}): "
                    "a database of another tool or version; give --db a new file")
        required = [n for n, r in have.items() if n not in schema.TABLES[table] and r[3] and r[4] is None and not r[5]]
        if required:
            return (f"table {table} has NOT NULL column(s) {', '.join(required)} without a default, which this "
                    "Agora does not write (a database of a newer version?); upgrade Agora or give --db a new file")
    if "questions" not in objects and "runs" in objects and conn.execute("select 1 from runs limit 1").fetchone():
        # every Agora database that holds a run has it: one renamed or dropped would be created empty,
        # and a resumed run would redo (and record again) every question its rows held
        return (f"it has no questions table beside {_and(core)} (renamed or dropped?): a run would redo the "
                "questions its runs recorded; restore the table or give --db a new file")
    return None


def _and(names: list[str]) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def readonly_uri(path: str | Path) -> str:
    """The SQLite URI that opens ``path`` for reading without creating anything beside it.

    ``?mode=ro`` alone is not enough for a database in WAL mode: SQLite then creates its ``-shm``
    and ``-wal`` files and, being read-only, cannot remove them on close. When the file is in WAL
    mode (header byte 18 is 2) and no ``-wal`` file exists (no connection has it open and every
    commit is in the main file), ``immutable=1`` is added, so SQLite reads the main file alone. A
    writer that opens it during the read is not seen (a report of a run that starts meanwhile
    shows it as it was). With a ``-wal`` file present (a live run) the normal read-only open is
    used and reads that run's latest commits.
    """
    p = Path(path).resolve()
    uri = f"{p.as_uri()}?mode=ro"
    try:
        with open(p, "rb") as f:
            header = f.read(20)
    except OSError:
        return uri
    wal_mode = len(header) == 20 and header[:16] == b"SQLite format 3\x00" and header[18] == 2
    if wal_mode and not Path(f"{p}-wal").exists():
        uri += "&immutable=1"
    return uri


T = TypeVar("T")


def read_existing(path: str | Path, read: Callable[[sqlite3.Connection], T]) -> T | None:
    """``read(conn)`` on the existing SQLite file ``path`` opened read-only (its journal mode,
    tables and columns left as they were), before anything writes to it; ``None`` for a missing or
    empty file (nothing to read: the writer creates it).

    Raises:
        TraceStoreError: the file cannot be read as a database (:func:`describe_sqlite_error`).
    """
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return None
    try:
        conn = sqlite3.connect(readonly_uri(p), uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            return read(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise TraceStoreError(describe_sqlite_error(path, exc)) from None


def check_not_cut_short(path: str | Path) -> None:
    """Refuse a SQLite file shorter than the size its header gives (page size × page count): a copy or
    download cut short, whose later pages SQLite reads only when a query reaches them, failing then
    with "database disk image is malformed". The header's count is used only where SQLite itself
    trusts it (bytes 92-95 equal the change counter, bytes 24-27) and no ``-wal`` file with pages in it
    is beside the file (a live writer's checkpoint may be extending it). A missing file or one without SQLite's
    header passes (SQLite's own open names those).

    Raises:
        TraceStoreError: ``<path>: not a readable Agora trace database (cut short: N of the M bytes
            its header gives ...)``.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            header = f.read(100)
    except OSError:
        return
    try:
        logged = Path(f"{p}-wal").stat().st_size
    except OSError:
        logged = 0
    if len(header) < 100 or header[:16] != b"SQLite format 3\x00" or logged:
        return
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[92:96] == header[24:28] and size < page_size * pages:
        raise TraceStoreError(f"{path}: not a readable Agora trace database (cut short: {size} of the "
                              f"{page_size * pages} bytes its header gives; a copy or download that did not "
                              "finish?); copy it again, or give --db another file")


def check_schema(path: str | Path) -> None:
    """Refuse an existing database that cannot take Agora's traces (:func:`schema_problem`) before
    anything is written to it: it is opened read-only (:func:`read_existing`), so its journal mode,
    tables and columns are left as they were. A missing or empty file passes (the store creates the schema).

    Raises:
        TraceStoreError: naming the file and the problem.
    """
    check_not_cut_short(path)
    problem = read_existing(path, schema_problem)
    if problem:
        raise TraceStoreError(f"{path}: {problem} (nothing was written to it)")


class _LockedDatabase(sqlite_utils.Database):
    """A :class:`sqlite_utils.Database` whose :meth:`query` and :meth:`execute` hold the store's lock.

    The store's one connection is shared by the threads of the questions in flight. sqlite-utils runs
    every ``query`` inside a savepoint of one fixed name (``sqlite_utils_query``) and commits after an
    ``execute`` that found no transaction open; two threads doing either at once on one connection
    release each other's savepoint ("no such savepoint: sqlite_utils_query", which stopped a bench
    with 8 questions in flight) or commit another thread's half-written transaction. The lock is the
    store's own re-entrant lock, so a store method that already holds it (its writes) goes on. Rows of
    a ``query`` are still read lazily, after the lock is let go (one SQLite connection serialises its
    statements itself)."""

    def __init__(self, *args: Any, lock: threading.RLock, **kwargs: Any):
        self.lock = lock  # (before sqlite-utils' own __init__, which already executes statements)
        super().__init__(*args, **kwargs)

    def query(self, *args: Any, **kwargs: Any):  # noqa: D102 - as sqlite_utils.Database.query
        with self.lock:
            return super().query(*args, **kwargs)

    def execute(self, *args: Any, **kwargs: Any):  # noqa: D102 - as sqlite_utils.Database.execute
        with self.lock:
            return super().execute(*args, **kwargs)
