"""How a run's questions are worked through: one after another on the calling thread, on
``concurrency`` worker threads recording each as it finishes (:func:`run_concurrently`), or as one
of several workers sharing a Postgres run's questions (:func:`run_claimed`); each question's graph on
an event loop of its thread (:func:`run_to_end`, :func:`close_loop`). On the first error, Ctrl-C or a
drain no new question starts, the running ones finish and are recorded, then the error (or
``GraphDrained``, :func:`raise_if_drained`) is raised. :func:`agora.graphs.runner.run_problems`
supplies the ``solve`` and ``record`` of each question.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from typing import Any, Callable

from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl

from agora.tasks.problem import Problem
from agora.traces.claims import Claims

log = logging.getLogger(__name__)


def raise_if_drained(control: RunControl | None) -> None:
    """Raise ``GraphDrained`` before new work starts once ``control`` asked for a drain."""
    if control is not None and control.drain_requested:
        raise GraphDrained(control.drain_reason or "shutdown")


def in_running_loop() -> bool:
    """Whether this thread runs an event loop (a notebook, an async app): questions then run in a
    worker thread with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_to_end(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """Run ``coro`` on ``loop``. If it stops early (Ctrl-C lands in the loop, an error), cancel it and
    let LangGraph finish its cleanup (writes of finished nodes saved) before re-raising."""
    task = loop.create_task(coro)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            try:
                loop.run_until_complete(task)
            except BaseException:  # noqa: BLE001 - the cancellation, or the error again
                pass
        raise


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Shut ``loop`` down (tasks still pending cancelled and run to their end, async generators, its
    default thread pool) and close it; from a helper thread when this thread runs a loop of its own
    (one thread may run one loop at a time).

    A question stopped by Ctrl-C can leave a graph's node tasks pending on the loop (the interrupt
    stops the loop where it lands); cancelled here, they finish their callbacks' error handlers on the
    loop instead of being collected after it closed ("coroutine ... was never awaited")."""
    def close() -> None:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                try:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                except BaseException:  # noqa: BLE001 - a second Ctrl-C: close anyway
                    log.debug("tasks still pending when the loop closed", exc_info=True)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    if in_running_loop():
        helper = threading.Thread(target=close, name="agora-loop-close")
        helper.start()
        helper.join()
    else:
        close()


def run_claimed(claims: Claims, todo: list[tuple[int, Problem]], solve: Callable, record: Callable,
                 concurrency: int, control: RunControl | None) -> None:
    """Work on ``todo`` as one of several workers of a run (:class:`agora.traces.claims.Claims`):
    ``concurrency`` threads each claim the next free question, solve it and record it (while the
    claim is still theirs), until every question of ``todo`` is done, by this worker or another;
    while the rest are claimed by live workers they wait, and take over a question whose lease
    expired (its worker died). On the first error or a drain no new question is claimed, the
    questions held are freed for the others, and the error (or ``GraphDrained``, unless every
    question of ``todo`` is done by then: the run ended, as a drain after a one-process run's last
    question ends it) is raised. An
    error on a question whose claim was taken over meanwhile (this worker's lease expired) is not
    this worker's to report: it is logged and the worker goes on (``record`` writes nothing for such
    a question either, :meth:`~agora.traces.claims.Claims.record`)."""
    by_id = {p.id: (idx, p) for idx, p in todo}
    ids = list(by_id)
    stop = threading.Event()
    errors: list[BaseException] = []
    record_lock = threading.Lock()

    def stopped() -> bool:
        return stop.is_set() or (control is not None and control.drain_requested)

    def taken_over(qid: str, exc: Exception) -> bool:
        """Whether ``qid``'s claim is no longer this thread's (then its error is discarded, logged)."""
        try:
            if claims.holds(qid):
                return False
        except Exception:  # noqa: BLE001 - the database is what failed: report the first error
            return False
        claims.abandon(qid)
        log.warning("run %r, question %s: %s: %s, discarded (this worker's claim was taken over)",
                    claims.run_id, qid, type(exc).__name__, exc)
        return True

    def work() -> None:
        while True:
            qid = claims.next(ids, stopped)
            if qid is None:
                return
            idx, problem = by_id[qid]
            try:
                result = solve(problem)
                with record_lock:  # (on_question callbacks run one at a time, as from the calling thread)
                    record(idx, problem, *result)
            except BaseException as exc:
                if isinstance(exc, Exception) and taken_over(qid, exc):
                    continue
                stop.set()
                errors.append(exc)
                if threading.current_thread() is threading.main_thread():
                    raise
                return

    claims.start()
    try:
        if concurrency == 1 and not in_running_loop():
            work()
        else:
            threads = [threading.Thread(target=work, name=f"agora-question-{i}", daemon=True) for i in range(concurrency)]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    t.join()
            except BaseException:  # Ctrl-C in the calling thread: the running questions finish, no new one starts
                stop.set()
                for t in threads:
                    t.join()
                raise
    finally:
        claims.stop()
    if errors:
        raise errors[0]
    if control is not None and control.drain_requested and claims.remaining(ids):
        raise_if_drained(control)  # (every question done, by this worker or others: the run ended, as one process's does)


class _NotStarted(Exception):
    """A queued question skipped because an earlier one failed."""


def run_concurrently(todo: list[tuple[int, Problem]], solve: Callable, record: Callable, concurrency: int,
                      control: RunControl | None) -> None:
    """Solve up to ``concurrency`` questions at once and record each as it finishes.

    On the first error or Ctrl-C: questions not yet started are cancelled, the running ones finish
    and are recorded, then the error propagates.
    """
    stop = threading.Event()

    def guarded(problem: Problem) -> Any:
        if stop.is_set() or (control is not None and control.drain_requested):
            raise _NotStarted  # an earlier question failed, or a stop was asked: leave it for the rerun
        try:
            return solve(problem)
        except BaseException:
            stop.set()  # before this worker thread takes the next question
            raise

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agora-question") as pool:
        futures = {pool.submit(guarded, problem): (idx, problem) for idx, problem in todo}
        recorded = set()
        try:
            for future in as_completed(futures):
                record(*futures[future], *future.result())  # a failed question raises here
                recorded.add(future)
        except BaseException as exc:  # an error, or Ctrl-C (which lands in this, the main, thread)
            stop.set()
            for future in futures:
                future.cancel()
            wait(futures)
            errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
            for future in futures:
                if future not in recorded and not future.cancelled() and future.exception() is None:
                    record(*futures[future], *future.result())
            if isinstance(exc, _NotStarted):  # seen before the failure (or drain) that stopped the run
                real = [e for e in errors if not isinstance(e, _NotStarted)]
                if real:
                    raise real[0] from None
                raise_if_drained(control)
            raise
