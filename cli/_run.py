"""The run scaffold shared by the ``agora run <protocol>`` commands (not public).

A benchmark command is: its options (the common ones are here), its settings dataclass, and one call
to :func:`run_benchmark`, which loads the problems, opens the trace store, shows progress, runs the
protocol's registered graph through :func:`agora.graphs.runner.run_problems` (resumable, Ctrl-C
drains), prints the method table and exits 1 when questions failed. ``agora run moa`` and
``agora run debate`` are built this way.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar

import typer
from rich.table import Table

from agora.agents.pool import ModelPool
from agora.cli._shared import (
    MAX_TEMPERATURE,
    console,
    exit_if_failed,
    fmt_ci,
    fmt_pct,
    graceful_stop,
    new_run_id,
    question_progress,
)
from agora.graphs._common import settings_from
from agora.graphs.registry import get as protocol
from agora.graphs.runner import RunOutcome, run_protocol
from agora.tasks.loaders import FORMATS, detect_format, load_problems
from agora.tasks.problem import Problem
from agora.tasks.samples import sample_path
from agora.traces.report import method_table, run_totals
from agora.traces.store import TraceStore

Durability = Literal["async", "sync", "exit"]

# The options every benchmark command shares (one declaration, reused as defaults).
DATA = typer.Option(None, "--data", help="Problem file (JSONL). Default: 5 GSM8K test problems shipped with Agora "
                                         "(--format synthetic: generated arithmetic).")
FORMAT = typer.Option(None, "--format", help=f"One of {', '.join(FORMATS)}; guessed from the file when omitted.")
LIMIT = typer.Option(None, "--limit", min=1, help="Use the first N problems (default: all; 5 generated).")
MAX_TOKENS = typer.Option(128, "--max-tokens", min=1, help="Max generated tokens per sample.")
TEMPERATURE = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE)
SHOTS = typer.Option(2, "--shots", min=0, max=3, help="Worked exemplars in each prompt.")
SEED = typer.Option(0, "--seed")
POOL = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, tiny; see `agora pool "
                                         "list`). Default: the embedded Qwen pool.")
DB = typer.Option(Path("agora.db"), "--db", help="Trace database (SQLite).")
RUN_ID = typer.Option(None, "--run-id", help="Run id; an existing id resumes that run.")
CONCURRENCY = typer.Option(1, "--concurrency", min=1, help="Questions in flight at once. >1 pays off on a served "
                                                             "pool (vLLM batches their requests).")
DURABILITY = typer.Option("async", "--durability", help="Checkpoint each question after every step (async, sync) "
                                                        "or only when it ends or stops (exit).")
CONFIG = typer.Option(None, "--config", help="Settings file (TOML): a table named after the protocol ([moa], "
                                             "[debate]) with its settings' fields; options given on the command "
                                             "line win over the file.")

S = TypeVar("S")


def settings(ctx: typer.Context, cls: type[S], config_file: Path | None, table: str, given: dict[str, Any]) -> S:
    """The settings dataclass ``cls`` from the command's options (``given``: field → option value, the
    option named as the field) and, with ``--config FILE``, the file's ``[table]``: a field the
    command line set wins, else the file's value, else the option's default.

    Raises:
        ValueError: a missing or invalid file, no ``[table]`` in it, an unknown field (named), or a
            bad value (the settings' own check, naming the field).
    """
    if config_file is None:
        return cls(**given)
    path = Path(config_file)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    try:
        table_values = tomllib.loads(path.read_text(encoding="utf-8")).get(table)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path}: invalid TOML: {exc}") from None
    if not isinstance(table_values, dict):
        raise ValueError(f"--config {path}: no [{table}] table (fields: {', '.join(f.name for f in fields(cls))})")
    # Typer vendors click (typer._click): compare the source by name, not by click's enum.
    typed = {k: v for k, v in given.items() if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"}
    try:
        return settings_from({**given, **table_values, **typed}, cls)
    except ValueError as exc:
        raise ValueError(f"--config {path}: [{table}] {exc}") from None


def names(value: Optional[str]) -> tuple[str, ...]:
    """``"a, b"`` → ``("a", "b")``; ``None`` → ``()``."""
    return tuple(m.strip() for m in value.split(",") if m.strip()) if value else ()


def load_benchmark(data: Path | None, fmt: str | None, limit: int | None, seed: int,
                   load: Callable[..., list[Problem]] = load_problems) -> tuple[Path | None, str, list[Problem]]:
    """``(data, format, problems)``: ``--data`` in ``--format`` (guessed when omitted), the generated
    arithmetic for ``--format synthetic`` without a file, else the shipped GSM8K sample (``load``:
    the loader, :func:`agora.tasks.load_problems`).

    Raises:
        TaskFormatError / ValueError: a bad file or format, or no problems.
    """
    if data is None and fmt == "synthetic":
        return None, "synthetic", load(None, "synthetic", limit or 5, seed=seed)
    if data is None:
        data, fmt_name = sample_path("gsm8k")
    else:
        fmt_name = fmt or detect_format(data)
    problems = load(data, fmt_name, limit)
    if not problems:
        raise ValueError(f"{data}: no problems to run")
    return data, fmt_name, problems


def run_benchmark(name: str, problems: Sequence[Problem], *, context: Any, config: Any, pool: ModelPool, db: Path,
                  run_id: str | None, data: Path | None, fmt_name: str, limit: int | None, label: str,
                  durability: Durability = "async", concurrency: int = 1) -> tuple[TraceStore, str, RunOutcome]:
    """Run the registered benchmark protocol ``name`` on ``problems`` and record it in ``db``.

    Returns the store, the run id and the runner's outcome (the caller prints its report).
    """
    spec = protocol(name)
    run_id = run_id or new_run_id(name)
    store = TraceStore(db)
    console.print(f"run [bold]{run_id}[/bold]: {len(problems)} {fmt_name} problems, {label}, "
                  f"pool {', '.join(pool.names)}", highlight=False)
    with question_progress(len(problems)) as progress, graceful_stop() as control:
        task = progress.add_task(name, total=len(problems), label=name, status="")
        outcome = run_protocol(
            spec.name, problems, store=store, run_id=run_id, context=context,
            config=asdict(config), pool_description=pool.describe(),
            dataset={"path": str(data) if data else None, "format": fmt_name, "limit": limit},
            on_event=lambda e: progress.update(task, status=e.get("message", "")[:70]),
            on_question=lambda q: progress.advance(task),
            durability=durability, concurrency=concurrency, control=control,
        )
        progress.update(task, completed=len(problems), status="done")
    if outcome.skipped:
        console.print(f"resumed: {outcome.skipped} of {len(problems)} questions already done", highlight=False)
    return store, run_id, outcome


def print_methods(store: TraceStore, run_id: str, title: str, order: Sequence[str]) -> None:
    """The method table (accuracy, CI, requests/samples/tokens per question) and the run's totals."""
    rows = method_table(store, run_id, order=order)
    totals = run_totals(store, run_id)
    table = Table(title=title)
    for col in ("method", "questions", "failed", "accuracy %", "95% CI", "samples/q", "gen. tokens", "model time s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        table.add_row(r.method, str(r.questions), str(r.failed), fmt_pct(r.accuracy), fmt_ci(r.ci_low, r.ci_high),
                      f"{r.samples_per_question:.1f}", str(r.completion_tokens), f"{r.model_time_s:.1f}")
    console.print(table)
    console.print(f"samples drawn: {int(totals['calls'])} (failed attempts: {int(totals['failed'])}), generated tokens: "
                  f"{int(totals['completion_tokens'])}, question time: {totals['wall_s']:.1f} s; traces: {store.path}",
                  highlight=False)


def finish(store: TraceStore, run_id: str, outcome: RunOutcome, total: int, title: str, order: Sequence[str]) -> None:
    """Print the report, then exit 1 when questions failed (listing them)."""
    print_methods(store, run_id, title, order)
    exit_if_failed(outcome, total, run_id)
