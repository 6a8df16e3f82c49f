"""``agora duel``: duel-then-judge rounds (Sparta or Stackelberg) producing preference pairs, and
``agora report duels``: reputation, leader-weight and win-rate plots of a duel run."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.models.pool import ModelCallError, builtin_pool_name, load_pool
from agora.cli._shared import (
    MAX_TEMPERATURE,
    Table,
    console,
    err_console,
    fmt_pct,
    from_options,
    graceful_stop,
    new_run_id,
    question_progress,
    user_errors,
)
from agora.cli._apps import app, report_app
from agora.graphs.duel import DuelConfig, DuelContext, duel_pool
from agora.runs.duel import run_duels
from agora.tasks.loaders import FORMATS, load_problems
from agora.traces import duels as duel_traces
from agora.traces.report import run_totals
from agora.traces.store import TraceStore, check_run_id, store_backend
from agora.models.contract import MAX_TOKENS_LIMIT


@app.command("duel", short_help="Duel-then-judge rounds whose non-tied duels become preference pairs.")
def duel(
    instructions: Path = typer.Option(..., "--instructions", help="Instruction file (JSONL): GSM8K, MATH, MBPP, "
                                      "multiple choice or plain prompts."),
    fmt: str = typer.Option("prompts", "--format", help=f"One of {', '.join(FORMATS)}; 'prompts' reads any of them "
                            "and keeps gold answers when present."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use the first N instructions (default: all)."),
    mode: str = typer.Option("stackelberg", "--mode", help="stackelberg (EXP3 leader) or sparta (uniform "
                             "instructions, closest-reputation matching)."),
    duels: int = typer.Option(64, "--duels", "-D", min=1, help="Duels per iteration (D)."),
    iterations: int = typer.Option(8, "--iterations", "-T", min=1, help="Iterations (T)."),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max tokens of a follower's answer "
                                   "(the paper uses 256; 64 keeps CPU runs short)."),
    judge_max_tokens: int = typer.Option(64, "--judge-max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                         help="Max tokens of a judge's reply."),
    judge_shots: int = typer.Option(2, "--judge-shots", min=0, max=2, help="Worked judge exemplars (0 = Sparta's "
                                    "prompt alone)."),
    presentation: str = typer.Option("single", "--presentation", help="single (one answer per judge prompt), pair "
                                     "(both shown), both_orders (pair in both orders: measures position bias)."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE, help="Followers' sampling temperature."),
    eta: Optional[float] = typer.Option(None, "--eta", help="Leader step η > 0 (default 1/K, the paper's)."),
    seed: int = typer.Option(0, "--seed", min=0),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML), at least 3 models. Default: the "
                                        "embedded models plus a persona variant of each."),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id; an existing id resumes that run."),
) -> None:
    """Two pool members answer an instruction, the others judge both answers (1–10), reputations
    move and the leader learns which instructions make informative duels; every non-tied duel
    becomes a preference pair in the trace DB."""
    with user_errors("duels"):
        problems = load_problems(instructions, fmt, limit)
        if not problems:
            raise InputError(f"{instructions}: no instructions")
        from_options(DuelConfig, mode="mode", duels="duels", iterations="iterations", seed="seed",
                     temperature="temperature", max_tokens="max_tokens")
        from_options(JudgeConfig, max_tokens="judge_max_tokens", shots="judge_shots", presentation="presentation")
        from_options(Exp3Config, eta="eta")
        config = DuelConfig(mode=mode, duels=duels, iterations=iterations, seed=seed, temperature=temperature,
                            max_tokens=max_tokens,
                            judge=JudgeConfig(max_tokens=judge_max_tokens, shots=judge_shots,
                                              presentation=presentation),
                            leader=Exp3Config(eta=eta))
        the_pool = duel_pool(builtin_pool_name(pool) or load_pool(pool) if pool is not None else None)
        run_id = new_run_id(mode) if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        total = duels * iterations
        console.print(f"run [bold]{escape(run_id)}[/bold] ({mode}): {total} duels ({iterations} × {duels}) on "
                      f"{len(problems)} instructions, pool {escape(', '.join(the_pool.names))}", highlight=False)
        try:
            with question_progress(total) as progress, graceful_stop(run_id) as control:
                task = progress.add_task("duels", total=total, label="duels", status="")
                outcome = run_duels(
                    store, run_id, DuelContext(pool=the_pool, config=config, instructions=problems),
                    dataset={"path": str(instructions), "format": fmt, "limit": limit},
                    on_event=lambda e: progress.update(task, status=e.get("message", "")[:70]),
                    on_duel=lambda rec: progress.advance(task), control=control)
                progress.update(task, completed=total, status="done")
        except ModelCallError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}; finished duels are saved: rerun with --run-id "
                              f"{escape(shlex.quote(run_id))} "
                              f"to resume", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        if outcome.skipped:
            console.print(f"resumed: {outcome.skipped} duels were already recorded", highlight=False)
        print_duel_table(store, run_id)


def print_duel_table(store: TraceStore, run_id: str) -> None:
    """The end table: per model reputation, win/tie rates and judge parse failures; then totals."""
    table = Table(title=f"duel run {escape(run_id)}")
    for col in ("model", "reputation", "σ", "duels", "win %", "tie %", "loss %", "judge calls", "parse fail %"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in duel_traces.model_table(store, run_id):
        table.add_row(escape(r.model), f"{r.reputation:.3f}", f"{r.sigma:.3f}", str(r.duels), fmt_pct(r.win_rate),
                      fmt_pct(r.tie_rate), fmt_pct(r.losses / r.duels if r.duels else float("nan")),
                      str(r.judge_calls), fmt_pct(r.parse_failures / r.judge_calls if r.judge_calls else float("nan")))
    console.print(table)
    s = duel_traces.summary(store, run_id)
    totals = run_totals(store, run_id)
    bias = "" if s["position_bias"] is None else f", position bias {s['position_bias']:+.2f}"
    console.print(
        f"duels: {s['duels']}, ties: {s['ties']} ({fmt_pct(s['tie_rate'])}%), preference pairs written: {s['pairs']}, "
        f"judge parse failures: {s['parse_failures']}/{s['judge_calls']} ({fmt_pct(s['parse_failure_rate'])}%){bias}",
        highlight=False)
    console.print(f"model calls: {int(totals['calls'])} (failed attempts: {int(totals['failed'])}), generated tokens: "
                  f"{int(totals['completion_tokens'])}; traces: {escape(shown_url(str(store.path)))}", highlight=False)


@report_app.command("duels")
def report_duels(
    db: str = typer.Option(..., "--db", help="Trace database with duel runs (a file or a postgresql:// URL)."),
    out: Path = typer.Option(..., "--out", help="Folder for the PNGs."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Duel run (default: the latest)."),
    top: int = typer.Option(20, "--top", min=1, help="Instructions in the leader-weight heatmap."),
) -> None:
    """Reputation trajectories, leader weights of the most-changed instructions, pairwise win rates."""
    with user_errors():
        if store_backend(db) is None and not Path(db).is_file():
            raise FileNotFoundError(f"{db}: no such trace database")
        store = TraceStore(db, readonly=True)  # a report writes nothing into the database, not even tables
        runs = duel_traces.duel_runs(store)
        if run_id is not None and run_id not in runs and (
                "runs" not in store.db.table_names() or store.get_run(run_id) is None):
            raise InputError(f"{shown_url(db)}: no run {run_id!r} in this database; "
                             + (f"duel runs: {', '.join(runs)}" if runs else "it holds no duel runs (run `agora duel` first)"))
        if not runs:
            raise InputError(f"{db}: no duel runs (run `agora duel` first)")
        if run_id is not None and run_id not in runs:
            raise InputError(f"{db}: no duels for run {run_id!r}; duel runs: {', '.join(runs)}")
        run_id = run_id or runs[-1]
        print_duel_table(store, run_id)
        for path in duel_traces.plot_duels(store, run_id, out, top=top):
            console.print(f"wrote {escape(str(path))}", highlight=False)
