"""A run while a driver runs it (:func:`recorded_run`): its ``runs`` row started or resumed under its
live-run lock, its checkpointer open, and its final status written when the driver's ``with`` block
ends (``finished``, ``partial``, ``failed``, ``interrupted``); the runs this process is running
(:func:`mark_live_runs`, for a signal handler that ends the process at once). Every driver runs
inside it: :func:`agora.graphs.runner.run_problems`, :func:`agora.runs.duel.run_duels`,
:func:`agora.runs.selection.run_session`.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from langgraph.errors import GraphDrained

from agora.graphs.checkpoint import InlineAsyncSqliteSaver
from agora.graphs.run_checkpoints import open_checkpointer, reclaim_free_pages
from agora.traces.store import TraceStore


_live_runs: dict[tuple[str, str], "RecordedRun"] = {}
_live_lock = threading.Lock()
_runs_started = 0


def runs_started() -> int:
    """How many runs this process has started or resumed (their ``runs`` row written by
    :meth:`TraceStore.start_run` inside :func:`recorded_run`) so far: a command compares it with
    the count before it ran to tell whether any of its work can have been saved (a trace DB that
    refuses the run's first write saved nothing)."""
    return _runs_started


def mark_live_runs(status: str = "interrupted", reason: str = "stopped") -> list[str]:
    """Mark every run this process is running (inside :func:`recorded_run`) ``status``, through a
    connection of its own (:meth:`TraceStore.mark_stopped`): what a signal handler calls before it
    ends the process at once (a second Ctrl-C, a SIGTERM whose drain takes too long), so that no
    run is left ``running``, except a shared run (Postgres, several workers) on which other workers
    still hold questions (:attr:`RecordedRun.others_working`): its row stays ``running`` for them,
    and the last of them writes its status, as when this worker stops after a drain. Returns the
    run ids marked; never raises."""
    runs: list[RecordedRun] = []
    for _ in range(3):  # no lock: a signal handler may interrupt the thread that holds it
        try:
            runs = list(_live_runs.values())
            break
        except RuntimeError:  # the dict changed size while being read
            continue
    marked = []
    for run in runs:
        try:
            if run.others_working():
                continue
        except Exception:  # noqa: BLE001 - never raises: unknown is not a reason to leave the row running
            pass
        try:
            summary = {**run.progress(), "error": reason}
        except Exception:  # noqa: BLE001 - a summary is a nicety here
            summary = {"error": reason}
        if TraceStore.mark_stopped(run.store.path, run.run_id, status, summary):
            marked.append(run.run_id)
    return marked


STOPPED = (GraphDrained, KeyboardInterrupt)
"""What ends a run ``interrupted`` (a drain asked for, Ctrl-C) rather than ``failed``."""


@dataclass
class RecordedRun:
    """A run while a driver runs it (:func:`recorded_run`): its ``runs`` row and its checkpointer."""

    store: TraceStore
    run_id: str
    saver: InlineAsyncSqliteSaver
    """The checkpointer beside the trace DB (closed when the run's ``with`` block ends)."""
    resumed: bool
    """The run's row existed: this is a rerun of it."""
    progress: Callable[[], dict[str, Any]] = dict
    """The row's summary when the run stops on an error, a drain or Ctrl-C (``"error"`` is added)."""
    done: bool = False
    """:meth:`finish` has written the row's final status."""
    others_working: Callable[[], bool] = lambda: False
    """Whether other workers still hold questions of the run (a shared run on Postgres:
    :meth:`agora.traces.claims.Claims.others_working_apart`): :func:`mark_live_runs` then leaves its
    row ``running`` for them. Called from a signal handler: it must not use the store's connection."""

    def finish(self, summary: Any = None, status: str = "finished") -> None:
        """Write the row's final ``status`` (``finished``, ``partial``, ``failed``, ``interrupted``)
        and ``summary``; the ``with`` block then leaves the row as it is."""
        self.store.finish_run(self.run_id, summary=summary, status=status)
        self.done = True


@contextmanager
def recorded_run(store: TraceStore, run_id: str, protocol: str, *, config: Any, pool: Any, dataset: Any,
                 pool_may_change: bool = False, group_commit: bool = False,
                 shared: bool = False) -> Iterator[RecordedRun]:
    """What every driver does around its work (``run_problems``, ``runs.duel.run_duels``,
    ``runs.selection.run_session``): open the checkpointer (:func:`open_checkpointer`, with
    ``group_commit``), start or resume the run's row (``TraceStore.start_run``, with its refusal
    rules and ``pool_may_change``), and, when the ``with`` block ends, write the row's status, give
    the checkpoints file's free pages back (:func:`reclaim_free_pages`) and close the checkpointer.

    The block ends the row with :meth:`RecordedRun.finish` (default: ``finished``, no summary, when
    the block returns without calling it). An exception leaving the block marks the row
    ``interrupted`` (``GraphDrained``, ``KeyboardInterrupt``) or ``failed``, with
    ``{**run.progress(), "error": "Type: message"}`` as its summary, then propagates; a trace DB
    that cannot take even that write keeps the first error. A row never stays ``running``.

    The run id's live-run lock (:meth:`TraceStore.run_lock`) is held from before the checkpointer
    opens until the block ends, so a second process given the same run id is refused before it
    touches anything; a lock left by a dead process is taken over. ``shared`` (``run_problems``): on
    a Postgres store the run takes no lock, its workers share its questions
    (:mod:`agora.traces.claims`); SQLite keeps one process per run. While the block runs the run is
    one of this process's live runs (:func:`mark_live_runs`).

    Raises:
        RunLockedError: another live process runs this run id (nothing touched).
        TraceStoreError: the checkpoint file cannot be opened (before the row is touched).
        ValueError: ``start_run`` refuses the rerun (another protocol, settings, pool or dataset);
            the row is left as it was and the checkpointer closed.
    """
    with ExitStack() as held:
        held.enter_context(store.run_lock(run_id, shared=shared))
        saver = open_checkpointer(store.path, group_commit=group_commit)
        try:
            resumed = store.start_run(run_id, protocol, config=config, pool=pool, dataset=dataset,
                                      pool_may_change=pool_may_change)
        except BaseException:
            saver.close()
            raise
        global _runs_started
        _runs_started += 1
        run = RecordedRun(store=store, run_id=run_id, saver=saver, resumed=resumed)
        key = (store.path, run_id)
        with _live_lock:
            _live_runs[key] = run
        failed = False
        try:
            yield run
            if not run.done:
                run.finish()
        except BaseException as exc:
            failed = True
            if not run.done:
                try:
                    store.finish_run(run_id, summary={**run.progress(), "error": f"{type(exc).__name__}: {exc}"[:500]},
                                     status="interrupted" if isinstance(exc, STOPPED) else "failed")
                except Exception:  # noqa: BLE001 - the trace DB itself is what failed: keep the first error
                    pass
            raise
        finally:
            with _live_lock:
                _live_runs.pop(key, None)
            try:
                if not failed and isinstance(saver, InlineAsyncSqliteSaver):
                    saver.commit()  # raises a deferred commit's failure (once): the vacuum's own commit would swallow it
                with suppress(sqlite3.Error):  # best effort: a failed pending commit is raised by close() below
                    reclaim_free_pages(saver)
            finally:
                if failed:  # a full disk fails the checkpointer's last commit too: keep the first error
                    with suppress(sqlite3.Error):
                        saver.close()
                else:
                    saver.close()
