"""InlineAsyncSqliteSaver: SqliteSaver's async methods inline, with group commit of task writes."""

import asyncio
import sqlite3

from langgraph.checkpoint.base import empty_checkpoint

from agora.graphs.runner import checkpoint_path, open_checkpointer

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}}


def test_task_writes_share_one_commit_that_lands_within_the_delay(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db")
    other = sqlite3.connect(checkpoint_path(tmp_path / "t.db"))  # sees committed rows only

    def committed() -> int:
        return other.execute("select count(*) from writes").fetchone()[0]

    async def two_tasks_finish():
        await saver.aput_writes(CONFIG, [("x", 1)], "task1")
        await saver.aput_writes(CONFIG, [("y", 2)], "task2")
        before = committed()
        await asyncio.sleep(saver.commit_delay_s * 5)
        return before, committed()

    assert asyncio.run(two_tasks_finish()) == (0, 2)
    saver.put_writes(CONFIG, [("z", 3)], "task3")  # the sync method commits at once, as SqliteSaver's
    assert committed() == 3
    asyncio.run(saver.aput_writes(CONFIG, [("w", 4)], "task4"))  # its loop ends before the timer fires
    assert committed() == 3
    saver.close()  # commits what is pending
    assert committed() == 4


def test_a_checkpoint_commits_the_pending_task_writes_and_reads_see_them(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db")
    other = sqlite3.connect(checkpoint_path(tmp_path / "t.db"))

    async def step():
        await saver.aput_writes(CONFIG, [("x", 1)], "task1")
        pending = other.execute("select count(*) from writes").fetchone()[0]
        checkpoint = empty_checkpoint()
        checkpoint["id"] = "c1"
        await saver.aput({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {})
        tup = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
        return pending, other.execute("select count(*) from writes").fetchone()[0], tup.pending_writes

    pending, committed, writes = asyncio.run(step())
    assert (pending, committed) == (0, 1)
    assert writes == [("task1", "x", 1)]
    saver.close()
