"""The trace store on Postgres: the same tables, rules and readers as the SQLite store, on psycopg 3
with a connection pool (``psycopg_pool``), chosen by a ``postgresql://`` URL wherever a database path
is taken (``--db``, ``TraceStore(url)``, Studio's context).

How: :class:`~agora.traces.pg_database.PostgresDatabase` gives the SQLite store's code the part of
sqlite-utils it uses, on psycopg (:mod:`agora.traces.pg_database`), so every write, resume rule and
reader of :class:`~agora.traces.store.TraceStore` runs here unchanged; this class adds what differs:
opening (the tables created by one process at a time), ``start_run`` serialised per run id, the run
lock and ``mark_stopped``. Readers that open SQLite files with ``sqlite3`` themselves read a
``postgresql://`` URL through this store instead (``agora.traces.diversity.read_exchanges``).

Several processes may write one Postgres run at once (``agora run --db postgresql://...`` started N
times): the store takes no run lock (:meth:`PostgresTraceStore.run_lock`), ``start_run`` is
serialised per run id by an advisory lock, and the questions are shared out through the ``claims``
table (:mod:`agora.traces.claims`).

Needs the ``postgres`` extra: ``pip install -e '.[postgres]'`` (psycopg, psycopg-pool,
langgraph-checkpoint-postgres).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from agora.models.urls import shown_url
from agora.traces.errors import RunLockedError, TraceStoreError
from agora.traces.pg_database import SETUP, PostgresDatabase, is_postgres_url, pg_reason
from agora.traces.rows import _clean_text, _json, now
from agora.traces.store import TraceStore

__all__ = ["PostgresTraceStore", "PostgresDatabase", "is_postgres_url"]


class PostgresTraceStore(TraceStore):
    """:class:`~agora.traces.store.TraceStore` on Postgres (see the module docstring): every method
    and reader of the SQLite store, on :class:`PostgresDatabase`. ``TraceStore(url)`` with a
    ``postgresql://`` URL opens one.

    Args:
        path: the URL.
        readonly: create nothing (reports); the tables must exist.

    Raises:
        TraceStoreError: psycopg missing, the server unreachable, or (``readonly``) no trace tables.
    """

    def __init__(self, path: str, *, readonly: bool = False):
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        self.db = PostgresDatabase(self.path)
        if readonly:
            if "runs" not in self.db.table_names():
                self.db.close()
                raise TraceStoreError(f"{shown_url(self.path)}: no trace tables in this database")
            return
        import psycopg

        try:
            with self.db.conn:  # one process at a time creates the tables (others wait, then find them)
                self.db.execute("select pg_advisory_xact_lock(hashtext('agora-trace-schema'))")
                # Only what is missing is created: a role with no CREATE right (tables made by their
                # owner, the role granted reads and writes) opens a complete database as its owner does.
                if not self.db.execute("select to_regprocedure('julianday(text)') is not null and "
                                       "to_regprocedure('sum(boolean)') is not null").fetchone()[0]:
                    self.db.executescript(SETUP)
                self._create()
                from agora.traces.claims import create_claims_table

                create_claims_table(self.db)
        except psycopg.Error as exc:
            self.db.close()
            # the role's rights only when the server said so (SQLSTATE 42501); a timeout or a lost
            # connection is said as such, without advice about rights
            advice = ("; open it as a role that may create tables in its schema, or have its owner run the command "
                      "once first") if getattr(exc, "sqlstate", None) == "42501" else ""
            raise TraceStoreError(f"{shown_url(self.path)}: cannot create the trace tables "
                                  f"({pg_reason(exc, self.path)}){advice}") from None

    def start_run(self, run_id: str, protocol: str, **kwargs: Any) -> bool:
        """As :meth:`TraceStore.start_run`, serialised per run id across processes (workers of one
        run start at once: one creates the row, the others resume it)."""
        with self._lock, self.db.conn:
            self.db.execute("select pg_advisory_xact_lock(hashtext(?))", [f"agora-run:{run_id}"])
            return super().start_run(run_id, protocol, **kwargs)

    def run_lock(self, run_id: str, *, shared: bool = False) -> contextlib.AbstractContextManager[None]:
        """``shared`` (a benchmark run: :func:`agora.graphs.runner.run_problems`): no lock, several
        processes run it together, sharing its questions (:mod:`agora.traces.claims`). Otherwise (a
        duel run, a CUPID session: state carried from one step to the next) one process at a time:
        a session advisory lock on the run id, which Postgres releases when its holder's connection
        ends, however the process ends (``kill -9`` included).

        Raises:
            RunLockedError: another live process holds it.
        """
        if shared:
            return contextlib.nullcontext()
        return self._exclusive(run_id)

    @contextlib.contextmanager
    def _exclusive(self, run_id: str) -> Iterator[None]:
        import psycopg

        conn = psycopg.connect(self.path, autocommit=True)
        try:
            got = conn.execute("select pg_try_advisory_lock(hashtext(%s))", [f"agora-run-lock:{run_id}"]).fetchone()[0]
            if not got:
                raise RunLockedError(f"run id {run_id!r} is being run by another process on {shown_url(self.path)}; "
                                     "wait for it to end (or stop it), or pick a new --run-id")
            try:
                yield
            finally:  # released now: the server drops a closed session's locks only when its backend
                # has ended, after close() returns, so a rerun at once could find the lock still held
                with contextlib.suppress(psycopg.Error):
                    conn.execute("select pg_advisory_unlock(hashtext(%s))", [f"agora-run-lock:{run_id}"])
        finally:
            conn.close()  # (ends the session: the lock goes with it, whatever happened above)

    def finish_run(self, run_id: str, summary: Any = None, status: str = "finished") -> None:
        with self._lock, self.db.conn:
            self.db["runs"].update(run_id, {"status": status, "finished_at": now(),
                                            "summary": _clean_text(_json(summary))})

    @staticmethod
    def mark_stopped(path: str, run_id: str, status: str = "interrupted", summary: Any = None,
                     timeout_s: float = 2.0) -> bool:
        try:
            import psycopg

            with psycopg.connect(str(path), connect_timeout=max(1, int(timeout_s)), autocommit=True) as conn:
                cur = conn.execute("update runs set status = %s, finished_at = %s, summary = %s "
                                   "where run_id = %s and status = 'running'",
                                   [status, now(), _clean_text(_json(summary)), run_id])
                return cur.rowcount > 0
        except Exception:  # noqa: BLE001 - never raises (a signal handler)
            return False

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """:meth:`agora.traces.store.TraceStore.snapshot` on Postgres: one REPEATABLE READ transaction
        on this thread's connection (every read inside sees the state of its first query)."""
        if self.db.conn.in_transaction:
            yield
            return
        with self.db.conn:
            self.db.execute("set transaction isolation level repeatable read")
            yield

    def close(self) -> None:
        self.db.close()
