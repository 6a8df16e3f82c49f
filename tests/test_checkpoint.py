"""InlineAsyncSqliteSaver: SqliteSaver's async methods, run inline; group commit of task writes."""

import asyncio
import operator
import sqlite3
import threading
from pathlib import Path
from typing import Annotated

import pytest

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from agora.graphs.run_checkpoints import checkpoint_path, open_checkpointer

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
        await asyncio.sleep(saver.commit_delay_s * 5)  # the group-commit timer's delay is what this test checks
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


# ----------------------------------------------------------------------------- strict deserialisation

SENTINEL_CALLS = []


def plant_sentinel(path):
    """What a crafted checkpoint row would run: writes a file (it must never be called)."""
    SENTINEL_CALLS.append(path)
    Path(path).write_text("ran")


def ext(code, *parts):
    import ormsgpack

    return ormsgpack.Ext(code, ormsgpack.packb(list(parts)))


def crafted_rows(tmp_path):
    """Values an attacker could write into a checkpoint row: each would run code on a permissive load."""
    sentinel = tmp_path / "ran"
    return sentinel, {
        "os.system": ext(0, "os", "system", f"touch {sentinel}"),
        "a function, nested in state": [{"deep": ext(0, __name__, "plant_sentinel", str(sentinel))}],
        "positional args": ext(1, __name__, "plant_sentinel", [str(sentinel)]),
        "keyword args": ext(2, __name__, "plant_sentinel", {"path": str(sentinel)}),
        "a method": ext(3, "pathlib", "Path", str(sentinel), "touch"),
        "a pydantic model": ext(5, __name__, "plant_sentinel", {"path": str(sentinel)}, None),
    }


def test_a_crafted_checkpoint_row_is_refused_and_nothing_of_it_runs(tmp_path):
    from langgraph.checkpoint.base import empty_checkpoint

    from agora.graphs.checkpoint import UnsafeCheckpointError

    sentinel, rows = crafted_rows(tmp_path)
    for i, (what, value) in enumerate(rows.items()):
        db = tmp_path / f"t{i}.db"
        saver = open_checkpointer(db)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"steps": value}
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {})
        saver.close()
        graph = graph_with_a_question_for_the_user().compile(checkpointer=open_checkpointer(db))
        with pytest.raises(UnsafeCheckpointError, match=rf"t{i}.db.checkpoints: thread 't': a checkpoint holds "):
            asyncio.run(graph.ainvoke(None, {"configurable": {"thread_id": "t"}}))  # a resume
        with pytest.raises(UnsafeCheckpointError):
            graph.get_state({"configurable": {"thread_id": "t"}})
        assert not sentinel.exists() and not SENTINEL_CALLS, what


def test_a_crafted_pending_write_is_refused(tmp_path):
    from agora.graphs.checkpoint import UnsafeCheckpointError

    sentinel, rows = crafted_rows(tmp_path)
    thread = {"configurable": {"thread_id": "t"}}
    saver = open_checkpointer(tmp_path / "t.db")
    graph = graph_with_a_question_for_the_user().compile(checkpointer=saver)
    asyncio.run(graph.ainvoke({"steps": []}, thread))  # stops at the question for the user
    config = saver.get_tuple(thread).config
    saver.put_writes(config, [("steps", rows["os.system"])], "task-x")
    saver.close()
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        open_checkpointer(tmp_path / "t.db").get_tuple(thread)
    assert not sentinel.exists()


class _RunsCode:
    def __reduce__(self):
        return (plant_sentinel, ("unused",))


@pytest.mark.parametrize("damage", ["pickle checkpoint", "pickle write", "garbage metadata", "metadata without step"])
def test_a_damaged_checkpoint_row_is_one_clear_error_and_runs_nothing(tmp_path, damage):
    import pickle

    from agora.graphs.checkpoint import CorruptCheckpointError

    thread = {"configurable": {"thread_id": "t"}}
    db = tmp_path / "t.db"
    saver = open_checkpointer(db)
    graph = graph_with_a_question_for_the_user().compile(checkpointer=saver)
    asyncio.run(graph.ainvoke({"steps": []}, thread))  # stops at the question for the user
    saver.close()
    con = sqlite3.connect(checkpoint_path(db))
    if damage == "pickle checkpoint":
        con.execute("update checkpoints set type = 'pickle', checkpoint = ?", (pickle.dumps(_RunsCode()),))
    elif damage == "pickle write":
        con.execute("update writes set type = 'pickle', value = ?", (pickle.dumps(_RunsCode()),))
    elif damage == "metadata without step":  # valid JSON; LangGraph would fail mid-run with KeyError: 'step'
        con.execute("update checkpoints set metadata = ?", (b'{"source": "loop"}',))
    else:
        con.execute("update checkpoints set metadata = ?", (b"\x81\xff\xfe",))
    con.commit()
    con.close()
    try:
        open_checkpointer(db).get_tuple(thread)
    except CorruptCheckpointError as exc:
        assert "t.db.checkpoints: thread 't': a checkpoint row cannot be read" in str(exc) and "\n" not in str(exc)
    else:
        pytest.fail(f"{damage}: read without an error")
    assert not SENTINEL_CALLS


def test_agora_state_types_round_trip_through_the_strict_serializer():
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command, Interrupt, Send

    from agora.graphs.checkpoint import checkpoint_serializer

    serde = checkpoint_serializer()
    value = {"send": Send("agent_sample", {"agent": 0, "calls": [{"model": "a", "params": {"n": 2}}]}),
             "interrupt": Interrupt(value={"round": 1, "A": "x", "B": "y"}, id="i1"),
             "command": Command(resume="A"), "messages": [HumanMessage("hi"), AIMessage("4")],
             "plain": {"answer": "4", "correct": True, "latency_s": 0.5, "none": None, "ints": [1, 2]}}
    back = serde.loads_typed(serde.dumps_typed(value))
    command = back.pop("command")  # msgpack gives Command's goto () back as []
    assert isinstance(command, Command) and command.resume == "A" and not command.goto
    assert back == {k: v for k, v in value.items() if k != "command"}


def test_with_allowlist_extends_the_saver_in_place(tmp_path):
    """LangGraph asks for a copy with the graph's schema types under LANGGRAPH_STRICT_MSGPACK; a copy
    would keep its own pending-commit state, so the saver extends its own serializer instead."""
    saver = open_checkpointer(tmp_path / "t.db", group_commit=True)
    assert saver.with_allowlist([("my_pkg.models", "Thing")]) is saver
    assert ("my_pkg.models", "Thing") in saver.serde._allowed_msgpack_modules
    assert ("langgraph.types", "Send") in saver.serde._allowed_msgpack_modules
    saver.close()


# ----------------------------------------------------------------------------- giving free pages back


def put_big_threads(saver, n: int, size: int) -> None:
    """``n`` threads with one checkpoint each holding ``size`` bytes of state."""
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {"steps": ["x" * size]}
        saver.put({"configurable": {"thread_id": f"q{i}", "checkpoint_ns": ""}}, cp, {"step": 0}, {})


def pages(path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA page_count").fetchone()[0], conn.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        conn.close()


def test_a_run_gives_the_pages_of_deleted_checkpoints_back_when_it_ends(tmp_path):
    from agora.graphs.recorded_runs import recorded_run
    from agora.traces.store import TraceStore

    store = TraceStore(tmp_path / "t.db")
    path = checkpoint_path(tmp_path / "t.db")
    with recorded_run(store, "r", "align", config={}, pool=[], dataset={}, group_commit=True) as run:
        put_big_threads(run.saver, 8, 1_000_000)  # 8 MB of checkpoints: ~2000 pages of 4 KiB
        run.saver.commit()
        big, free = pages(path)
        for i in range(7):  # seven questions recorded: their checkpoints deleted (as the runner does)
            run.saver.delete_thread(f"q{i}")
        run.saver.commit()
        assert pages(path)[0] == big and pages(path)[1] > 7 * 1_000_000 // 4096  # the file keeps them
        live = big - pages(path)[1]
    page_count, freelist = pages(path)
    assert freelist == 0 and page_count <= live  # only the live pages are left (fewer pointer-map pages too)
    assert page_count < big // 4  # one of eight threads left
    assert Path(path).stat().st_size == page_count * 4096
    with recorded_run(store, "r2", "align", config={}, pool=[], dataset={}) as run:  # still a working file
        assert run.saver.get_tuple({"configurable": {"thread_id": "q7"}}) is not None


def test_reclaim_leaves_a_few_free_pages_and_an_older_file_alone(tmp_path):
    from agora.graphs.run_checkpoints import reclaim_free_pages

    saver = open_checkpointer(tmp_path / "t.db")
    put_big_threads(saver, 2, 100_000)
    saver.delete_thread("q0")
    assert 0 < pages(checkpoint_path(tmp_path / "t.db"))[1] < 256
    assert reclaim_free_pages(saver) == 0  # under the threshold: kept for the next checkpoints
    freed = pages(checkpoint_path(tmp_path / "t.db"))[1]
    assert reclaim_free_pages(saver, min_free_pages=1) == freed
    saver.close()

    old = tmp_path / "old.db"  # a checkpoints file created without auto_vacuum (an older Agora)
    sqlite3.connect(checkpoint_path(old)).execute("PRAGMA journal_mode=WAL").fetchall()
    saver = open_checkpointer(old)
    put_big_threads(saver, 2, 2_000_000)
    saver.delete_thread("q0")
    before = pages(checkpoint_path(old))
    assert reclaim_free_pages(saver) == 0 and pages(checkpoint_path(old)) == before
    saver.close()


def test_a_deferred_commit_failure_at_a_run_end_is_raised_not_lost_to_the_vacuum(tmp_path):
    """A group commit that failed in the saver's timer (a full disk) is raised by the saver's next
    call; at the end of a run the vacuum's own commit made that call and its error, swallowed as
    best effort, was never raised: the run ended as if its checkpoints were written."""
    from agora.graphs.recorded_runs import recorded_run
    from agora.traces.store import TraceStore

    store = TraceStore(tmp_path / "t.db")
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        with recorded_run(store, "r", "align", config={}, pool=[], dataset={}, group_commit=True) as run:
            run.saver._failure = sqlite3.OperationalError("database or disk is full")  # as _timer_fired leaves it
