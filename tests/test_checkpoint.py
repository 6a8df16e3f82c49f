"""InlineAsyncSqliteSaver: SqliteSaver's async methods, run inline; group commit of task writes."""

import asyncio
import operator
import sqlite3
import threading
from typing import Annotated

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from agora.graphs.runner import checkpoint_path, open_checkpointer

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}}


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def graph_with_a_question_for_the_user():
    builder = StateGraph(State)
    builder.add_node("work", lambda s: {"steps": ["work"]})
    builder.add_node("ask", lambda s: {"steps": [interrupt("pick A or B?")]})
    builder.add_edge(START, "work")
    builder.add_edge("work", "ask")
    return builder


def test_async_writes_are_committed_when_they_return(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db")
    other = sqlite3.connect(checkpoint_path(tmp_path / "t.db"))  # sees committed rows only

    async def one_task_finishes():
        await saver.aput_writes(CONFIG, [("x", 1), ("y", 2)], "task1")
        return other.execute("select count(*) from writes").fetchone()[0]

    assert asyncio.run(one_task_finishes()) == 2
    assert not saver.conn.in_transaction
    saver.close()


def test_an_interrupted_async_run_is_on_disk_for_the_next_process(tmp_path):
    thread = {"configurable": {"thread_id": "t"}}
    saver = open_checkpointer(tmp_path / "t.db")
    graph = graph_with_a_question_for_the_user().compile(checkpointer=saver)
    asyncio.run(graph.ainvoke({"steps": []}, thread))
    assert not saver.conn.in_transaction
    saver.close()  # as a process that ends here

    again = graph_with_a_question_for_the_user().compile(checkpointer=open_checkpointer(tmp_path / "t.db"))
    state = again.get_state(thread)
    assert state.values == {"steps": ["work"]} and state.next == ("ask",)
    assert [i.value for task in state.tasks for i in task.interrupts] == ["pick A or B?"]


def test_alist_stopped_early_blocks_no_later_call(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db")
    graph = graph_with_a_question_for_the_user().compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t"}}

    async def newest_then_state():
        await graph.ainvoke({"steps": []}, thread)
        async for newest in saver.alist(thread):
            break
        state = await graph.aget_state(thread)
        return newest.checkpoint["id"], state.config["configurable"]["checkpoint_id"]

    result = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(newest_then_state())), daemon=True)
    runner.start()
    runner.join(timeout=20)  # a lock held by the suspended generator would hang here
    assert not runner.is_alive(), "aget_state blocked after an alist consumer stopped early"
    newest_id, state_id = result[0]
    assert newest_id == state_id


def test_group_commit_shares_one_commit_that_lands_within_the_delay(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db", group_commit=True)
    other = sqlite3.connect(checkpoint_path(tmp_path / "t.db"))

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
    assert committed() == 3 and saver.conn.in_transaction
    saver.commit()  # what the owner does when a run ends or stops
    assert committed() == 4 and not saver.conn.in_transaction
    saver.close()


def test_group_commit_a_checkpoint_commits_the_pending_task_writes(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db", group_commit=True)
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


def test_group_commit_a_deleted_thread_is_gone_for_its_saver_at_once_and_on_disk_at_the_next_commit(tmp_path):
    saver = open_checkpointer(tmp_path / "t.db", group_commit=True)
    other = sqlite3.connect(checkpoint_path(tmp_path / "t.db"))
    saver.put_writes(CONFIG, [("x", 1)], "task1")
    saver.delete_thread("t")
    assert saver.conn.execute("select count(*) from writes").fetchone()[0] == 0
    assert other.execute("select count(*) from writes").fetchone()[0] == 1
    saver.close()
    assert other.execute("select count(*) from writes").fetchone()[0] == 0
