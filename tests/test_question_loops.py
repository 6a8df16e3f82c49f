"""A question's event loop closed after Ctrl-C (graphs/question_workers.py): tasks still pending are
cancelled and run to their end on the loop, not collected after it closed."""

import asyncio
import gc

import pytest

from agora.graphs.question_workers import close_loop


def test_close_loop_cancels_the_tasks_a_ctrl_c_left_pending_and_runs_their_cleanup():
    seen = []

    async def node():  # a graph's node task, waiting on a model call when Ctrl-C lands elsewhere
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # its error callbacks need the loop (LangGraph awaits on_chain_error)
            seen.append("cleaned up on the loop")
            raise

    async def interrupted():
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    loop = asyncio.new_event_loop()
    task = loop.create_task(node())
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(interrupted())
    assert not task.done()
    close_loop(loop)
    assert loop.is_closed() and task.cancelled() and seen == ["cleaned up on the loop"]
    gc.collect()


def test_close_loop_on_a_loop_with_nothing_pending_just_closes_it():
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(asyncio.sleep(0, result=4)) == 4
    close_loop(loop)
    assert loop.is_closed()
