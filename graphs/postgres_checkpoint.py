"""The runner's checkpointer on Postgres: LangGraph's ``PostgresSaver`` (``langgraph-checkpoint-postgres``)
on a psycopg connection pool, for a ``postgresql://`` trace store; the workers of one run share it, so
a question a killed worker left half done is resumed by another from its last step.

Its tables live in the trace database's schema ``agora_checkpoints`` (Agora's own ``checkpoints``
table, of trained models, keeps its name). It deserialises as strictly as the SQLite one
(:func:`agora.graphs.checkpoint.checkpoint_serializer`: plain data and the allowed types; a row naming
another type raises :class:`~agora.graphs.checkpoint.UnsafeCheckpointError` before anything is
imported), and gives the async methods the runner's ``ainvoke`` calls by running the sync ones
inline (:class:`~agora.graphs.checkpoint.InlineAsync`, as the SQLite saver does).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agora.graphs.checkpoint import (
    CheckedReads,
    CorruptCheckpointError,
    InlineAsync,
    UnsafeCheckpointError,
    checkpoint_serializer,
)
from agora.models.urls import shown_url
from agora.traces.errors import TraceStoreError

#: The Postgres schema holding LangGraph's checkpoint tables in a trace database.
CHECKPOINT_SCHEMA = "agora_checkpoints"


def open_postgres_checkpointer(url: str) -> "InlineAsyncPostgresSaver":
    """LangGraph's Postgres checkpointer in the trace database ``url`` (schema
    :data:`CHECKPOINT_SCHEMA`), its tables created (once, by one process at a time); close it with
    ``saver.close()``.

    Raises:
        TraceStoreError: ``langgraph-checkpoint-postgres`` is missing, or the server cannot be reached.
    """
    try:
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError:
        raise TraceStoreError("a postgresql:// store needs the postgres extra: pip install 'agora-llm[postgres]'") from None
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=30) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {CHECKPOINT_SCHEMA}")
    except psycopg.errors.UniqueViolation:  # two workers created it at once
        pass
    except psycopg.Error as exc:
        raise TraceStoreError(f"{shown_url(url)}: cannot open the checkpoints ({str(exc).strip()[:200]})") from None
    pool = ConnectionPool(url, min_size=1, max_size=8, open=True, name="agora-checkpoints",
                          check=ConnectionPool.check_connection,  # (as the trace store's: pg_database.py)
                          kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                                  "options": f"-c search_path={CHECKPOINT_SCHEMA}"})
    saver = InlineAsyncPostgresSaver(pool, url=url)
    try:
        _setup_once(saver, pool)
    except BaseException:
        pool.close()
        raise
    return saver


def _setup_once(saver: "InlineAsyncPostgresSaver", pool: Any) -> None:
    """Run LangGraph's migrations unless they are all applied, one process at a time: on one
    connection that holds a session advisory lock, taken by polling ``pg_try_advisory_lock`` (a
    worker blocked in ``pg_advisory_lock`` would hold a snapshot that the migrations' ``CREATE INDEX
    CONCURRENTLY`` waits for)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    latest = len(PostgresSaver.MIGRATIONS) - 1
    with pool.connection() as conn:
        if _applied(conn) >= latest:
            return
        while not conn.execute("select pg_try_advisory_lock(hashtext('agora-checkpoint-schema')) as got").fetchone()["got"]:
            time.sleep(0.05)
        try:
            if _applied(conn) < latest:
                PostgresSaver(conn, serde=saver.serde).setup()
        finally:
            conn.execute("select pg_advisory_unlock(hashtext('agora-checkpoint-schema'))")


def _applied(conn: Any) -> int:
    """The last LangGraph checkpoint migration applied in this schema (-1: none)."""
    exists = conn.execute("select to_regclass('checkpoint_migrations') is not null as ok").fetchone()["ok"]
    if not exists:
        return -1
    row = conn.execute("select max(v) as v from checkpoint_migrations").fetchone()
    return -1 if row["v"] is None else int(row["v"])


try:
    from langgraph.checkpoint.postgres import PostgresSaver as _PostgresSaver
except ImportError:  # pragma: no cover - without the postgres extra: open_postgres_checkpointer says so
    _PostgresSaver = object  # type: ignore[assignment,misc]


class InlineAsyncPostgresSaver(CheckedReads, InlineAsync, _PostgresSaver):  # type: ignore[misc,valid-type]
    """``PostgresSaver`` on a pool, strict, with inline async methods (see the module docstring).
    ``commit`` is a no-op (every write is committed when its method returns)."""

    def __init__(self, pool: Any, *, url: str, serde: Any = None) -> None:
        super().__init__(pool, serde=serde if serde is not None else checkpoint_serializer())
        self.url = url
        self.group_commit = False

    def with_allowlist(self, extra_allowlist: Any) -> "InlineAsyncPostgresSaver":
        """As :meth:`InlineAsyncSqliteSaver.with_allowlist`: in place."""
        if isinstance(self.serde, JsonPlusSerializer):
            self.serde = maybe_add_typed_methods(self.serde.with_msgpack_allowlist(extra_allowlist))
        return self

    def _where(self, exc: Exception, config: RunnableConfig | None) -> ValueError:
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        where = f"{shown_url(self.url)} ({CHECKPOINT_SCHEMA})" + (f": thread {thread!r}" if thread else "")
        if isinstance(exc, UnsafeCheckpointError):
            return UnsafeCheckpointError(f"{where}: {exc}")
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        return CorruptCheckpointError(f"{where}: a checkpoint row cannot be read ({type(exc).__name__}: {detail}); "
                                      "it was changed or damaged outside Agora: delete the thread or use a new run id")

    def delete_threads(self, thread_ids: Sequence[str]) -> None:
        """Delete every checkpoint, blob and write of the threads ``thread_ids`` (all their
        namespaces): ``delete_thread`` for many threads at once, three statements in all.

        Raises:
            psycopg.Error: the database refused or could not be reached.
        """
        if not thread_ids:
            return
        ids = [str(t) for t in thread_ids]
        with self._cursor(pipeline=True) as cur:
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                cur.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", (ids,))

    def commit(self) -> None:
        """Nothing waits for a commit here."""

    def close(self) -> None:
        self.conn.close()

