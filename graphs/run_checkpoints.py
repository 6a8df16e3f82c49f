"""A run's checkpointer beside its trace DB: where it lives (:func:`checkpoint_path`), opening it
(:func:`open_checkpointer`: SQLite in WAL, or the Postgres store's own schema), refusing a checkpoints
file that belongs to another tool (:func:`check_checkpoint_schema`), giving the pages of deleted
checkpoints back to the file system when a run ends (:func:`reclaim_free_pages`), and the wall time a
resumed question's checkpoints keep from its earlier sittings (:func:`kept_wall_s`).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

from langgraph.checkpoint.base import CheckpointTuple

from agora.graphs.checkpoint import InlineAsyncSqliteSaver
from agora.graphs.postgres_checkpoint import open_postgres_checkpointer
from agora.traces.postgres import is_postgres_url
from agora.traces.store import BUSY_TIMEOUT_S, TraceStoreError, check_db_path, describe_sqlite_error, read_existing


def checkpoint_path(db_path: str | Path) -> str:
    """Where the checkpointer of a trace DB lives: ``<db>.checkpoints`` next to it."""
    p = Path(db_path)
    return str(p.with_name(p.name + ".checkpoints"))


def open_checkpointer(db_path: str | Path, *, group_commit: bool = False) -> InlineAsyncSqliteSaver:
    """LangGraph's SQLite checkpointer at :func:`checkpoint_path` of a trace DB (``":memory:"``
    stays in memory), usable from worker threads and async runs
    (:class:`~agora.graphs.checkpoint.InlineAsyncSqliteSaver`, with its ``group_commit``); close
    it with ``saver.close()``.

    WAL without an fsync per commit: LangGraph commits after every step, and a synced commit
    (~10 ms) would dwarf the step. A crash of the process loses nothing; of the OS, at most the
    last steps, which the resumed run redoes.

    A new file is created with ``auto_vacuum=INCREMENTAL``, so that the pages of finished questions'
    checkpoints (deleted by the runner) can be given back when the run ends (:func:`reclaim_free_pages`);
    a file created before keeps its setting (SQLite changes it only through a full ``VACUUM``).
    """
    if is_postgres_url(str(db_path)):  # the trace database's own schema agora_checkpoints, shared by its workers
        return open_postgres_checkpointer(str(db_path))  # type: ignore[return-value]
    memory = str(db_path) == ":memory:"
    path = ":memory:" if memory else checkpoint_path(db_path)
    if not memory:
        check_db_path(path)
        check_checkpoint_schema(path)
    try:
        conn = sqlite3.connect(path, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before WAL writes the header: takes effect on a new file only
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = InlineAsyncSqliteSaver(conn, group_commit=group_commit)
        saver.setup()  # a corrupt or unwritable file fails here, before any question runs
    except sqlite3.Error as exc:
        raise TraceStoreError(describe_sqlite_error(path, exc, "checkpoint database")) from None
    return saver


#: Free pages (4 KiB each by default) a checkpoints file keeps at the end of a run without giving them
#: back: fewer are reused by the next run's checkpoints, and giving them back costs a write.
RECLAIM_MIN_FREE_PAGES = 256


def reclaim_free_pages(saver: object, *, min_free_pages: int = RECLAIM_MIN_FREE_PAGES) -> int:
    """At the end of a run, give the free pages of a SQLite checkpoints file (those of deleted
    checkpoints: the runner deletes a question's checkpoints once it is recorded) back to the file
    system, on the saver's own connection: commit what is pending, ``PRAGMA incremental_vacuum`` when
    the file has at least ``min_free_pages`` free pages, then a ``wal_checkpoint(TRUNCATE)`` that
    shrinks the file at once (when another process is reading it, the file shrinks at a later
    checkpoint instead). Both are ordinary writes under SQLite's locks, safe while other runs use the
    same file; no full ``VACUUM`` is run.

    A file created without ``auto_vacuum=INCREMENTAL`` (by an older Agora), an in-memory or Postgres
    checkpointer: nothing is done.

    Returns:
        The number of pages given back (0 when nothing was done).

    Raises:
        sqlite3.Error: the pending commit or the vacuum failed (a full disk, an I/O error).
    """
    if not isinstance(saver, InlineAsyncSqliteSaver):
        return 0
    saver.commit()
    with saver.lock:
        conn = saver.conn
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
            return 0
        before = conn.execute("PRAGMA page_count").fetchone()[0]
        if conn.execute("PRAGMA freelist_count").fetchone()[0] < min_free_pages:
            return 0
        # executescript: the sqlite3 module's execute() steps this pragma once (one page), not to its end
        conn.executescript("PRAGMA incremental_vacuum;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return before - conn.execute("PRAGMA page_count").fetchone()[0]


#: The tables of LangGraph's SQLite checkpointer: a checkpoints file holding any other table belongs
#: to another tool and is left untouched (:func:`check_checkpoint_schema`).
CHECKPOINT_TABLES = frozenset({"checkpoints", "writes"})


#: Checkpoint metadata the runner writes (through the invocation's ``config["metadata"]``, which
#: LangGraph copies into every checkpoint of that invocation): when the question's sitting started
#: (epoch seconds) and the wall seconds its earlier sittings kept (:func:`kept_wall_s`).
SITTING_STARTED = "agora_sitting_started"
KEPT_WALL_S = "agora_kept_wall_s"


def kept_wall_s(latest: CheckpointTuple | None) -> float:
    """The wall seconds a question spent, in the sittings before this one, on the steps its latest
    checkpoint keeps: that checkpoint's sitting's part (from the sitting's start to the checkpoint's
    ``ts``) plus what the sittings before it kept. Work after the last checkpoint of a stopped sitting
    is redone, so it is not counted; neither is the time between sittings. 0 without a checkpoint,
    or for a checkpoint written without the runner's metadata (by an older Agora, or by a graph run
    outside the runner).

    Used for ``questions.wall_s`` of a resumed question, which is then its wall time over all sittings
    (not only its last sitting's part)."""
    if latest is None:
        return 0.0
    meta = latest.metadata or {}
    started, kept = meta.get(SITTING_STARTED), meta.get(KEPT_WALL_S, 0.0)
    if not isinstance(started, (int, float)) or not isinstance(kept, (int, float)):
        return 0.0
    try:
        ts = datetime.fromisoformat(str(latest.checkpoint["ts"])).timestamp()
    except (KeyError, TypeError, ValueError):
        return float(kept)
    return float(kept) + max(0.0, ts - float(started))


def check_checkpoint_schema(path: str | Path) -> None:
    """Refuse an existing checkpoints file that holds tables other than LangGraph's
    (:data:`CHECKPOINT_TABLES`), reading it read-only, before its journal mode or tables change.

    Raises:
        TraceStoreError: naming the file and its foreign tables.
    """
    names = read_existing(path, lambda conn: {r[0] for r in conn.execute(
        "select name from sqlite_master where type in ('table', 'view')")}) or set()
    foreign = sorted(n for n in names - CHECKPOINT_TABLES if not n.startswith("sqlite_"))
    if foreign:
        raise TraceStoreError(f"{path}: not an Agora checkpoints file (it holds {', '.join(foreign[:4])}); move it "
                              "away or give --db another file (nothing was written to it)")
