"""The trace store (schema: :mod:`agora.traces.schema`): :class:`TraceStore`, its writes (runs,
questions with their results and model calls, the resume rules applied by ``start_run``) on the
readers of :class:`~agora.traces.reading.TraceReader`.

One concern per module beside it: :mod:`~agora.traces.rows` (the rows written, their cleaning),
:mod:`~agora.traces.resume` (what a rerun compares), :mod:`~agora.traces.run_lock` (one process per
run on SQLite), :mod:`~agora.traces.sqlite_file` (opening a SQLite file), :mod:`~agora.traces.backfill`,
:mod:`~agora.traces.errors`; their public names are importable from here too. SQLite is the embedded default; a
``postgresql://`` URL opens :class:`agora.traces.postgres.PostgresTraceStore` (same interface).
"""


from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

import sqlite_utils

from agora.traces import schema
from agora.traces.errors import ResumeRefusedError, RunLockedError, TraceStoreError
from agora.traces.reading import TraceReader
from agora.traces.backfill import backfill
from agora.traces.resume import (
    QUESTION_HASHES,
    TRANSPORT_FIELDS,
    TRANSPORT_KWARGS,
    MAX_RUN_ID_CHARS,
    MAX_STORED_RUN_ID_CHARS,
    check_run_id,
    data_changes,
    lookalike_refusal,
    question_hash,
    recorded_settings,
    refusal,
)
from agora.traces.rows import (
    _bool,
    _clean_text,
    _json,
    _upsert,
    answer_fields,
    call_row,
    call_rows,
    clean_rows,
    code_revision,
    now,
    option_count,
)
from agora.traces.run_lock import fcntl, lock_path, run_lock
from agora.traces.sqlite_file import (
    BUSY_TIMEOUT_S,
    OWN_TABLES,
    _LockedDatabase,
    check_db_path,
    check_not_cut_short,
    check_same_file,
    check_schema,
    describe_sqlite_error,
    file_identity,
    read_existing,
    readonly_uri,
    schema_problem,
)

__all__ = [  # the names the layers above import from here (defined in the modules above)
    "BUSY_TIMEOUT_S", "MAX_RUN_ID_CHARS", "MAX_STORED_RUN_ID_CHARS", "OWN_TABLES", "QUESTION_HASHES", "TRANSPORT_FIELDS", "TRANSPORT_KWARGS", "ResumeRefusedError",
    "RunLockedError", "TraceReader", "TraceStore", "TraceStoreError", "answer_fields", "backfill", "call_row",
    "call_rows", "check_db_path", "check_run_id", "check_schema", "clean_rows", "code_revision",
    "describe_sqlite_error", "fcntl", "lock_path", "now", "option_count", "question_hash", "read_existing",
    "readonly_uri", "run_lock",
    "schema", "schema_problem", "store_backend", "BACKENDS",
]


#: Held while a store of this process opens its file (the schema check, the switch to WAL, the
#: schema created or completed): stores opened at once by an app's threads (one per request) then
#: open one after the other, and none meets another's half-done switch or schema ("database is
#: locked" at once, without SQLite's wait). Other processes are waited out by SQLite's lock.
_OPENING = threading.Lock()


class TraceStore(TraceReader):
    """The trace database. Thread-safe in one process: one re-entrant lock around its writes and
    around every ``db.query``/``db.execute`` on its shared connection (:class:`_LockedDatabase`).

    Args:
        path: SQLite file (created with its tables if missing). ``":memory:"`` for tests.
        readonly: open an existing file for reading only: nothing is created or written, not
            even the schema (reports).

    Raises:
        TraceStoreError: the path is a folder or not a regular file, not an SQLite database (or a
            corrupt one), cannot be created or written, stays locked by another process for
            :data:`BUSY_TIMEOUT_S`, or (``readonly``) does not exist.
    """

    _opened: tuple[str, tuple[int, int] | None] | None = None
    """The SQLite file this store opened: its absolute path (a later ``chdir`` changes nothing) and
    ``(st_dev, st_ino)``; every write first checks that it is still the file at that path
    (:func:`~agora.traces.sqlite_file.check_same_file`)."""

    def __new__(cls, path: str | Path | None = None, *args: Any, **kwargs: Any) -> "TraceStore":
        """``TraceStore(path)`` opens the store the path names: a ``postgresql://`` URL the Postgres
        store (:data:`BACKENDS`), anything else a SQLite file."""
        backend = store_backend(path) if cls is TraceStore else None
        if backend is not None:
            return super().__new__(backend)
        return super().__new__(cls)

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        if self.path == ":memory:":
            self.db = _LockedDatabase(memory=True, lock=self._lock)
            self._create_sqlite()
            return
        check_db_path(self.path)
        try:
            with _OPENING:  # one store of this process at a time checks, converts and completes a file
                self.db = self._open()
        except (sqlite3.Error, OSError) as exc:
            raise TraceStoreError(describe_sqlite_error(self.path, exc)) from None

    def _open(self) -> sqlite_utils.Database:
        if self.readonly:
            if not Path(self.path).is_file():
                raise TraceStoreError(f"{self.path}: no such trace database")
            check_not_cut_short(self.path)
            conn = sqlite3.connect(readonly_uri(self.path), uri=True,
                                   timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            conn.execute("select count(*) from sqlite_master").fetchone()  # not a database: fails here
            return _LockedDatabase(conn, lock=self._lock)
        check_schema(self.path)  # read-only: a database of another tool or version is left untouched
        parent = Path(self.path).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceStoreError(f"{self.path}: cannot create its folder {parent} ({exc.strerror})") from None
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        db = _LockedDatabase(conn, lock=self._lock)
        # WAL without an fsync per commit, as the runner's checkpointer (run_checkpoints.open_checkpointer):
        # ≈ 0.5 ms less per recorded question here. A crashed process loses nothing; a crashed
        # OS at most the last questions, which the rerun redoes (their checkpoints or a fresh run).
        db.enable_wal()
        db.execute("PRAGMA synchronous=NORMAL")
        self.db = db
        self._create_sqlite()
        self._opened = (os.path.abspath(self.path), file_identity(self.path))
        return db

    def check_open(self) -> None:
        """Raise :class:`TraceStoreError` (one line naming the database) when this store's SQLite
        connection was closed (:meth:`close`): before, the next read or write failed with sqlite3's
        bare ``Cannot operate on a closed database``, which names no file."""
        conn = getattr(getattr(self, "db", None), "conn", None)
        if isinstance(conn, sqlite3.Connection):
            try:
                conn.total_changes  # noqa: B018 - raises ProgrammingError on a closed connection
            except sqlite3.ProgrammingError:
                raise TraceStoreError(f"{self.path}: this trace store was closed (TraceStore.close()); open the "
                                      "database again (TraceStore(path)) to write to it") from None

    def _check_file(self) -> None:
        """Raise :class:`TraceStoreError` (one line) when the store was closed, or the open database
        file was deleted or replaced at its path since it was opened: rows written on would be lost."""
        self.check_open()
        if self._opened is not None and self._opened[1] is not None:
            check_same_file(self._opened[0], self._opened[1], shown=self.path)

    def _create_sqlite(self) -> None:
        """:meth:`_create` in one write transaction that holds SQLite's write lock from its start
        (``BEGIN IMMEDIATE``, which waits out another writer): checking which tables exist and then
        creating them in a transaction that began as a read fails at once ("database is locked", no
        wait) when another connection wrote in between, as stores opened at the same time by the
        threads of one app do."""
        with self._lock:
            self.db.conn.execute("BEGIN IMMEDIATE")
            try:
                self._create()
            except BaseException:
                self.db.conn.rollback()
                raise
            self.db.conn.commit()

    def _create(self) -> None:
        db = self.db
        db["runs"].create(schema.RUNS, pk="run_id", if_not_exists=True)
        db["questions"].create(schema.QUESTIONS, pk=("run_id", "question_id"), if_not_exists=True)
        db["results"].create(schema.RESULTS, pk=("run_id", "question_id", "method"), if_not_exists=True)
        db["model_calls"].create(schema.MODEL_CALLS, pk="call_id", if_not_exists=True)
        for table, columns in schema.TABLES.items():  # databases written before some columns existed
            have = db[table].columns_dict  # (ADDED_COLUMNS; schema_problem let only such a database in)
            for column, kind in columns.items():
                if column not in have:
                    db[table].add_column(column, kind)
        db["model_calls"].create_index(["run_id", "question_id"], if_not_exists=True)
        db["results"].create_index(["run_id", "method"], if_not_exists=True)

    # ------------------------------------------------------------------ runs

    def start_run(self, run_id: str, protocol: str, *, config: Any, pool: Any, dataset: Any,
                  pool_may_change: bool = False) -> bool:
        """Create the run, or mark an existing one running again. Returns True when resuming.

        ``pool_may_change``: a run whose members change between resumes by design (``agora
        evolve``'s duel run: each iteration's members carry newly trained adapters) stores the new
        pool instead of refusing it.

        Raises:
            ValueError: a run id that :func:`check_run_id` refuses (blank, control characters); the
                run id exists for another protocol, or with other settings, another
                pool (its models and their settings; how they are reached, :data:`TRANSPORT_FIELDS`,
                may change) or another dataset (format, edited questions, or a path whose file holds
                other questions: :meth:`data_changes`): resuming would mix two experiments in one run.
                A new run whose id is not in Unicode NFKC form, or looks like an existing run's id
                (:func:`~agora.traces.resume.lookalike_refusal`: ``rаn`` with a Cyrillic ``а`` beside
                ``ran``), is refused before its row is written.
        """
        check_run_id(run_id, "run id", max_chars=MAX_STORED_RUN_ID_CHARS)
        with self._lock, self.db.conn:
            existing = self.get_run(run_id)
            if existing is not None:
                before = self._run_json(existing, "dataset") or {}
                now_ds = json.loads(_json(dataset)) or {}
                refused = refusal(self, run_id, existing, protocol, config, pool, before, now_ds,
                                  pool_may_change=pool_may_change)
                if refused is not None:
                    raise ResumeRefusedError(refused)
                update: dict[str, Any] = {"status": "running", "finished_at": None}
                if pool_may_change:
                    update["pool"] = _clean_text(_json(pool))
                if isinstance(before, dict) and isinstance(now_ds, dict) and isinstance(now_ds.get(QUESTION_HASHES), dict):
                    # questions first seen now (a larger --limit) are checked from now on too, and
                    # counted: the run's limit and count say what it holds, not what it started with
                    hashes = {**now_ds[QUESTION_HASHES], **(before.get(QUESTION_HASHES) or {})}
                    grown = {**before, QUESTION_HASHES: hashes}
                    if "count" in before:
                        grown["count"] = len(hashes)
                    if "limit" in before and "limit" in now_ds:
                        old_limit, new_limit = before["limit"], now_ds["limit"]
                        grown["limit"] = (None if old_limit is None or new_limit is None
                                          else max(old_limit, new_limit))
                    update["dataset"] = _clean_text(_json(grown))
                self.db["runs"].update(run_id, update)
                return True
            lookalike = lookalike_refusal(run_id, self.run_ids())
            if lookalike is not None:
                raise ResumeRefusedError(lookalike)
            self.db["runs"].insert({
                "run_id": run_id, "protocol": protocol, "status": "running", "started_at": now(),
                "finished_at": None, "config": _clean_text(_json(recorded_settings(config))), "pool": _clean_text(_json(pool)),
                "dataset": _clean_text(_json(dataset)), "code_revision": code_revision(), "host": platform.node(),
                "summary": None,
            })
            return False

    def data_changes(self, run_id: str, before: Any, now_ds: Any) -> tuple[list[str], list[str]]:
        """What differs between the dataset run ``run_id`` was started on and the one a resume gives
        (:func:`agora.traces.resume.data_changes`, which raises ``ResumeRefusedError`` for edited questions)."""
        return data_changes(self, run_id, before, now_ds)

    def run_lock(self, run_id: str, *, shared: bool = False) -> contextlib.AbstractContextManager[None]:
        """The live-run lock of ``run_id`` on this database (:func:`run_lock`): a driver holds it
        while it runs the run, so a second process given the same run id is refused. ``shared``
        (a run whose questions several workers may share, :func:`agora.graphs.runner.run_problems`)
        changes nothing on SQLite: one process writes a run.

        Raises:
            RunLockedError: another live process holds it.
        """
        return run_lock(self.path, run_id)

    def finish_run(self, run_id: str, summary: Any = None, status: str = "finished") -> None:
        """Mark the run ``status`` (``finished``, ``failed``, ``interrupted``) with its summary.

        On a full disk the write is tried once more after a WAL checkpoint (which lets SQLite reuse
        the space of its write-ahead log), so that a run stopped by a full disk is not left
        ``running`` when it can be helped.
        """
        update = {"status": status, "finished_at": now(), "summary": _clean_text(_json(summary))}
        self._check_file()
        try:
            with self._lock, self.db.conn:
                self.db["runs"].update(run_id, update)
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc).lower():
                raise
            with self._lock:
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                with self.db.conn:
                    self.db["runs"].update(run_id, update)

    @staticmethod
    def mark_stopped(path: str | Path, run_id: str, status: str = "interrupted", summary: Any = None,
                     timeout_s: float = 2.0) -> bool:
        """Set a ``running`` run's status from outside its store (a signal handler about to end the
        process: the store's own connection may be in the middle of a write), through a connection
        of its own that waits at most ``timeout_s`` for SQLite's lock. Returns whether the row was
        marked; never raises (``":memory:"``: nothing to mark)."""
        if str(path) == ":memory:":
            return False
        backend = store_backend(path)
        if backend is not None:
            return backend.mark_stopped(path, run_id, status, summary, timeout_s)
        try:
            conn = sqlite3.connect(str(path), timeout=timeout_s)
            try:
                with conn:
                    cur = conn.execute("update runs set status = ?, finished_at = ?, summary = ? "
                                       "where run_id = ? and status = 'running'",
                                       [status, now(), _clean_text(_json(summary)), run_id])
                return cur.rowcount > 0
            finally:
                conn.close()
        except (sqlite3.Error, OSError, UnicodeError):
            return False

    def record_question(
        self,
        run_id: str,
        protocol: str,
        question: dict[str, Any],
        results: dict[str, dict[str, Any]],
        calls: Iterable[dict[str, Any]],
    ) -> None:
        """Write one finished question, its per-method results and its model calls, atomically.

        Upserts on primary keys, so writing the same question twice leaves one copy. A method
        whose answer drew on no sample (``samples == 0``: its model calls failed) is stored with
        ``correct`` NULL: failed, not wrong (:func:`agora.traces.report.method_table` counts it
        as failed).
        """
        qid = question["question_id"]
        n_choices = question.get("n_choices") or option_count(question.get("question"), question.get("kind"))
        rows = call_rows(calls, run_id, qid, protocol, kind=question.get("kind"), n_choices=n_choices,
                         question=question.get("question"))
        ok = [c for c in rows if not c["error"]]
        row = {
            "run_id": run_id, "question_id": qid, "idx": question.get("idx"), "source": question.get("source"),
            "kind": question.get("kind"), "question": question.get("question"), "gold": question.get("gold"),
            "answer": question.get("answer"), "correct": _bool(question.get("correct")),
            "wall_s": question.get("wall_s"), "model_calls": len(ok),
            "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in ok),
            "completion_tokens": sum(c["completion_tokens"] or 0 for c in ok),
            "detail": _json(question.get("detail")), "finished_at": now(), "n_choices": n_choices,
        }
        result_rows = [{"run_id": run_id, "question_id": qid, "method": method, "answer": r.get("answer"),
                        "correct": None if r.get("samples") == 0 else _bool(r.get("correct")),
                        "samples": r.get("samples"),
                        "completion_tokens": r.get("completion_tokens"),
                        "latency_s": r.get("latency_s"), "how": r.get("how"), "calls": r.get("calls"),
                        # the part drawn from a bench's shared candidate pool (NULL: none)
                        "shared_calls": r.get("shared_calls"), "shared_samples": r.get("shared_samples"),
                        "shared_tokens": r.get("shared_completion_tokens"),
                        "shared_latency_s": r.get("shared_latency_s")}
                       for method, r in results.items()]
        self._check_file()
        with self._lock, self.db.conn:
            # One statement per table, not sqlite-utils' two per row (33 → 3 statements for an
            # ALIGN question: ≈ 2.2 → 0.7 ms, the runner's per-question cost; orchestration.py).
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))
            _upsert(self.db.conn, "results", result_rows, ("run_id", "question_id", "method"))
            _upsert(self.db.conn, "questions", [row], ("run_id", "question_id"))

    def record_calls(self, run_id: str, protocol: str, question_id: str, calls: Iterable[dict[str, Any]]) -> None:
        """Write model-call records without a question row: the attempts of a question that failed
        (no answer recorded, retried by a rerun) or was aborted by an unreachable model."""
        rows = call_rows(calls, run_id, question_id, protocol)
        self._check_file()
        with self._lock, self.db.conn:
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """Hold the write lock and one SQLite transaction (committed on exit, rolled back on error);
        for protocol tables written together with their model calls (:func:`call_row`)."""
        self._check_file()
        with self._lock, self.db.conn:
            yield self.db

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Read the database as one consistent state: every read inside sees the rows committed when
        the first one ran, not those another process commits meanwhile (a run still being written:
        its question, results and calls land in one transaction, and a reader of one table after
        another would otherwise see the question's calls without its row). SQLite: one read
        transaction (a shared snapshot under WAL); nothing is written, so it ends in a rollback.
        Inside a transaction of this store already: that one is the snapshot."""
        conn = self.db.conn
        with self._lock:
            if conn.in_transaction:
                yield
                return
            conn.execute("BEGIN")
            try:
                yield
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    # ------------------------------------------------------------------ readers for training and reports

    @classmethod
    def reading(cls, db: str | Path | TraceStore | sqlite_utils.Database) -> TraceStore:
        """A store to read ``db``: a store as is, an open ``sqlite_utils.Database`` wrapped (nothing
        created or migrated in it), a path opened ``readonly``.

        Raises:
            FileNotFoundError: a path that is not a file.
            TraceStoreError: as :class:`TraceStore` with ``readonly=True``.
        """
        if isinstance(db, TraceStore):
            return db
        if isinstance(db, sqlite_utils.Database):
            store = cls.__new__(cls)
            store.path, store.readonly, store._lock, store.db = "<database>", True, threading.RLock(), db
            return store
        if store_backend(db) is None and not Path(db).is_file():
            raise FileNotFoundError(f"{db}: no such trace database")
        return cls(db, readonly=True)


#: Trace stores other than SQLite, by URL scheme: lazy ``"module:attr"`` entries (imported when a URL
#: of that scheme is opened, so SQLite users need none of their packages).
BACKENDS: dict[str, str] = {
    "postgresql": "agora.traces.postgres:PostgresTraceStore",
    "postgres": "agora.traces.postgres:PostgresTraceStore",
}


def store_backend(path: Any) -> type[TraceStore] | None:
    """The store class a ``--db`` value names (:data:`BACKENDS`, by its URL scheme), ``None`` for a
    SQLite path (or ``":memory:"``)."""
    text = str(path) if isinstance(path, (str, Path)) else ""
    scheme, sep, _ = text.partition("://")
    if not sep or scheme.lower() not in BACKENDS:
        return None
    module, attr = BACKENDS[scheme.lower()].split(":")
    return getattr(importlib.import_module(module), attr)
