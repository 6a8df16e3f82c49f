"""The runner's SQLite checkpointer: LangGraph's ``SqliteSaver``, usable from async graph runs.

``SqliteSaver`` has no async methods (it points to ``AsyncSqliteSaver``, which goes through
aiosqlite: a thread hop and a future per statement, ≈ 17 ms per ALIGN question here against
≈ 2 ms for the same statements run straight). The runner drives graphs with ``ainvoke`` on its own
event loop, so that nodes and checkpoint writes run inline instead of being handed to threads
(``benchmarks/orchestration.py``). :class:`InlineAsyncSqliteSaver` gives ``SqliteSaver`` the async
methods LangGraph calls there, each running the sync method inline: a local SQLite statement
(≈ 50–150 µs here) blocks the loop less than handing it to a thread costs.

By default it has ``SqliteSaver``'s tables, serialisation, locking and durability: every write is
committed before its method returns. With ``group_commit=True`` (the runner's choice) the writes
of finished tasks (``aput_writes``: one call per task, 9 per ALIGN question) share a commit: the
next checkpoint's (``aput`` commits at once), or one at most :attr:`~InlineAsyncSqliteSaver.commit_delay_s`
later while the event loop runs, or the owner's :meth:`~InlineAsyncSqliteSaver.commit` /
:meth:`~InlineAsyncSqliteSaver.close`; so does a thread's deletion (``delete_thread``). Each commit rewrites the pages it touched, so one commit
for a step's task writes instead of one each saves ≈ 1 ms per ALIGN question here. The owner
must call :meth:`~InlineAsyncSqliteSaver.commit` when a run ends or stops (the runner does, after
every question): after an error or an ``interrupt`` no checkpoint follows the last task writes,
and an event loop that closes drops the timer.
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
    """``SqliteSaver`` whose async methods run its sync ones inline (see the module docstring).

    Args:
        conn: an SQLite connection opened with ``check_same_thread=False``.
        serde: as for ``SqliteSaver``.
        group_commit: let the async task writes of one step share a commit (then call
            :meth:`commit` when a run ends or stops).

    Meant for a local SQLite file used by one process; for a database shared over the network
    use an async saver (``AsyncSqliteSaver``, ``AsyncPostgresSaver``). Close it with :meth:`close`.
    """

    commit_delay_s: float = 0.005
    """With ``group_commit``: the longest time (seconds) a task's writes wait for a shared commit
    while the event loop runs."""

    def __init__(self, conn: sqlite3.Connection, *, serde: Any = None, group_commit: bool = False) -> None:
        super().__init__(conn, serde=serde)
        self.group_commit = group_commit
        self._local = threading.local()  # .defer: this thread's statement joins the shared commit
        self._pending = False  # uncommitted task writes in the connection's transaction
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
        """Commit task writes still waiting for a shared commit (a no-op without any)."""
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

    def _commit_soon(self) -> None:
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
        # ``SqliteSaver.list`` holds the saver's lock until it is exhausted: read everything
        # first, so a consumer that stops early or awaits between items blocks no other call.
        for item in list(self.list(config, filter=filter, before=before, limit=limit)):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)  # commits pending task writes too

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        if not self.group_commit:
            self.put_writes(config, writes, task_id, task_path)
            return
        self._local.defer = True
        try:
            self.put_writes(config, writes, task_id, task_path)
        finally:
            self._local.defer = False
        self._commit_soon()

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints and writes; with ``group_commit`` the deletion is committed
        with the next commit (a thread the owner no longer needs: losing the deletion in a crash
        only leaves its rows behind)."""
        if not self.group_commit:
            super().delete_thread(thread_id)
            return
        self._local.defer = True
        try:
            super().delete_thread(thread_id)
        finally:
            self._local.defer = False

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)
