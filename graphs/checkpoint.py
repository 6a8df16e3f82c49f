"""The runner's SQLite checkpointer: LangGraph's ``SqliteSaver``, usable from async graph runs.

``SqliteSaver`` has no async methods (it points to ``AsyncSqliteSaver``, which goes through
aiosqlite: a thread hop and a future per statement, ≈ 17 ms per ALIGN question here against
≈ 2 ms for the same statements run straight). The runner drives graphs with ``ainvoke`` on its own
event loop, so that nodes and checkpoint writes run inline instead of being handed to threads
(``benchmarks/orchestration.py``). :class:`InlineAsyncSqliteSaver` gives ``SqliteSaver`` the async
methods LangGraph calls there, each running the sync method inline: a local SQLite statement
(≈ 50–150 µs here) blocks the loop less than handing it to a thread costs.

Same tables, serialisation and locking as ``SqliteSaver``. One difference, group commit: the
writes of a finished task (``aput_writes``, one call per task, 9 per ALIGN question) are committed
together, by the next checkpoint (``aput``, which commits at once as ``SqliteSaver.put`` does) or
at most :attr:`InlineAsyncSqliteSaver.commit_delay_s` later, whichever comes first, instead of one
commit (≈ 55 µs here) each. A killed process can lose a task's writes from those last milliseconds;
the resumed run redoes that task. Sync callers (``graph.invoke``, ``get_state``) use it exactly like
``SqliteSaver``; :meth:`~InlineAsyncSqliteSaver.commit` commits what is pending, and
:meth:`~InlineAsyncSqliteSaver.close` commits and closes the connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver


class InlineAsyncSqliteSaver(SqliteSaver):
    """``SqliteSaver`` whose async methods run its sync ones inline, with group commit of task
    writes (see the module docstring).

    Meant for a local SQLite file used by one process; for a database shared over the network
    use an async saver (``AsyncSqliteSaver``, ``AsyncPostgresSaver``).
    """

    commit_delay_s: float = 0.005
    """Longest time (seconds) a task's writes wait for the commit they share with others."""

    def __init__(self, conn: sqlite3.Connection, *, serde: Any = None) -> None:
        super().__init__(conn, serde=serde)
        self._local = threading.local()  # .defer: the statement running in this thread joins the pending commit
        self._pending = False  # uncommitted writes in the connection's transaction
        self._timers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}

    @contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        with self.lock:
            self.setup()
            cur = self.conn.cursor()
            try:
                yield cur
            finally:
                cur.close()
                if transaction:
                    if getattr(self._local, "defer", False):
                        self._pending = True
                    else:
                        self.conn.commit()
                        self._pending = False

    def commit(self) -> None:
        """Commit task writes still waiting for their group commit."""
        with self.lock:
            if self._pending:
                self.conn.commit()
                self._pending = False

    def close(self) -> None:
        """Commit what is pending and close the connection."""
        self.commit()
        with self.lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
        self.conn.close()

    def _commit_later(self) -> None:
        loop = asyncio.get_running_loop()
        with self.lock:
            if loop not in self._timers:
                self._timers[loop] = loop.call_later(self.commit_delay_s, self._timer_fired, loop)

    def _timer_fired(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            self._timers.pop(loop, None)
        self.commit()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)  # commits pending task writes too

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self._local.defer = True
        try:
            self.put_writes(config, writes, task_id, task_path)
        finally:
            self._local.defer = False
        self._commit_later()

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)
