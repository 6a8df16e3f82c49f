"""The runner's SQLite checkpointer: LangGraph's ``SqliteSaver``, usable from async graph runs.

``SqliteSaver`` has no async methods (it points to ``AsyncSqliteSaver``, which goes through
aiosqlite: a thread hop and a future per statement, ≈ 17 ms per ALIGN question here against
≈ 2 ms for the same statements run straight). The runner drives graphs with ``ainvoke`` on its own
event loop, so that nodes and checkpoint writes run inline instead of being handed to threads
(``benchmarks/orchestration.py``). :class:`InlineAsyncSqliteSaver` gives ``SqliteSaver`` the async
methods LangGraph calls there, each running the sync method inline: a local SQLite statement
(≈ 50–150 µs here) blocks the loop less than handing it to a thread costs.

Same tables, serialisation, locking and durability as ``SqliteSaver``: ``aput`` returns once the
checkpoint is committed. Sync callers (``graph.invoke``, ``get_state``) use it like ``SqliteSaver``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver


class InlineAsyncSqliteSaver(SqliteSaver):
    """``SqliteSaver`` whose async methods run its sync ones inline (see the module docstring).

    Meant for a local SQLite file used by one process; for a database shared over the network
    use an async saver (``AsyncSqliteSaver``, ``AsyncPostgresSaver``).
    """

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)
