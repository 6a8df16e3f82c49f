"""Pieces shared by the CLI commands: errors as one line, pools, run ids, progress."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sqlite3
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import typer
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agora.models.pool import (
    MAX_POOL_TEMPERATURE,
    ModelCallError,
    ModelPool,
    PoolConfigError,
    default_pool,
    load_pool,
)
from agora.agents.prompts import MATH_SHOTS, MC_SHOTS
from agora.tasks.loaders import TaskFormatError
from agora.traces.store import describe_sqlite_error

# Off a terminal rich would wrap tables at 80 columns; logs and CI read better wider.
#: Output width: the terminal's, else ``$COLUMNS``, else 120 (a log file or pipe).
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

#: Bound of ``--shots``: the worked exemplars there are (3 math, 2 multiple choice; a kind with fewer uses all).
MAX_SHOTS = max(len(MATH_SHOTS), len(MC_SHOTS))
#: Bound of ``--temperature`` for sampling answers: the OpenAI API's range (above it answers are mostly noise);
#: a pool entry's ``temperature`` has the same bound.
MAX_TEMPERATURE = MAX_POOL_TEMPERATURE

#: Errors a user can act on: printed as one line, exit status 2, no traceback.
USER_ERRORS = (TaskFormatError, PoolConfigError, ValueError, FileNotFoundError, KeyError)


@contextlib.contextmanager
def user_errors(unit: str = "questions") -> Iterator[None]:
    """Turn user-facing errors into ``error: ...`` on stderr and exit 2; an unreachable model into exit 1;
    Ctrl-C into exit 130. ``unit``: what a run saves as it goes, named in the resume hint."""
    try:
        yield
    except typer.Exit:
        raise
    except (KeyboardInterrupt, GraphDrained):
        err_console.print(f"[yellow]interrupted[/yellow]: finished {unit} are saved; rerun with the same "
                          "--run-id to resume")
        raise typer.Exit(130) from None
    except ModelCallError as exc:  # a model server went away: the run stops, resumable
        err_console.print(f"[red]error:[/red] {escape(str(exc))}\nfinished {unit} are saved; rerun with the same --run-id "
                          "to resume once the model answers again", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except USER_ERRORS as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        err_console.print(f"[red]error:[/red] {escape(str(message))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except sqlite3.Error as exc:  # the trace DB or its checkpoints failed mid-run (locked, disk full...)
        err_console.print(f"[red]error:[/red] {escape(describe_sqlite_error('trace database', exc))}; "
                          f"finished {unit} are saved", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def exit_if_failed(outcome: Any, total: int, run_id: str, unit: str = "questions") -> None:
    """After a run's report: when questions failed (no model call of theirs succeeded; see
    :attr:`agora.graphs.runner.RunOutcome.failed`), list them on stderr and exit 1."""
    failed = outcome.failed
    if not failed:
        return
    shown = "; ".join(f"{q.problem.id}: {q.error}"[:300] for q in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    err_console.print(f"[red]error:[/red] {len(failed)} of {total} {unit} failed: no model call answered, so they "
                      f"are not recorded as answered ({escape(shown)}{more}); rerun with --run-id {run_id} to "
                      "retry them", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@contextlib.contextmanager
def graceful_stop() -> Iterator[RunControl]:
    """Ctrl-C stops a run at the next step boundary instead of mid-step; a second Ctrl-C at once.

    Yields the ``RunControl`` to pass to :func:`agora.graphs.runner.run_problems` (or
    ``run_duels``). The first SIGINT asks LangGraph to drain: the running step finishes and is
    checkpointed with every sample it drew, then ``GraphDrained`` is raised and
    :func:`user_errors` prints the resume hint. The second SIGINT ends the process at once (exit
    130): model calls in flight run in worker threads that cannot be interrupted, and LangGraph
    would wait for them. Finished questions and checkpointed steps are already on disk; the
    resumed run redoes the running step. Outside the main thread (where signal handlers cannot be
    set) it only yields the control.
    """
    control = RunControl()
    if threading.current_thread() is not threading.main_thread():
        yield control
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if control.drain_requested:
            err_console.print("[yellow]stopped[/yellow]: model calls in flight abandoned; finished work is saved; "
                              "rerun with the same --run-id to resume")
            console.show_cursor(True)  # a progress display hides it
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(130)
        control.request_drain("interrupted")
        err_console.print("[yellow]stopping[/yellow] after the running step, which is saved "
                          "(model calls in flight finish first); Ctrl-C again to stop at once")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield control
    finally:
        signal.signal(signal.SIGINT, previous)


def get_pool(path: Path | None) -> ModelPool:
    """The pool from ``--pool FILE``, or the embedded default pool."""
    return load_pool(path) if path is not None else default_pool()


def new_run_id(protocol: str) -> str:
    return f"{protocol}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def question_progress(total: int) -> Progress:
    return Progress(
        TextColumn("[bold]{task.fields[label]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}", style="dim"),
        console=console, transient=False, disable=not sys.stdout.isatty() and total == 0,
    )


def fmt_pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}"


def fmt_ci(lo: float, hi: float) -> str:
    return "-" if lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def echo_kv(items: dict[str, Any]) -> None:
    for k, v in items.items():
        console.print(f"[bold]{k}[/bold]: {v}", highlight=False, soft_wrap=True)
