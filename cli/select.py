"""``agora select``: choose a model from your own pairwise preferences (CUPID, protocols.md §4).

The terminal shows two anonymous answers side by side and reads ``A``, ``B`` or ``tie``; ``q`` (or
end of input) stops, and the same ``--thread`` continues later from the same duel (the report
files in ``--out`` are named after the thread, made a safe file name: ``../x`` stays inside). With
``--simulate THETA`` a simulated user with hidden preference ``θ`` answers instead, and the report
adds a cumulative-regret plot against uniform random pairs and RUCB.

The session is :func:`agora.runs.selection.run_session` (checkpoints beside the trace DB in
``<db>.checkpoints``; model calls in ``model_calls``, one ``questions`` row per prompt, protocol
``cupid``, run id = thread id); this command builds the pool, asks the human (or the simulated user)
through its ``choose`` callback, prints the progress and writes the report.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.panel import Panel

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.models import safe_file_name
from agora.agents.cupid import CupidConfig
from agora.agents.cupid_features import LATENCY, feature_table, parse_theta, trace_features
from agora.agents.cupid_simulation import (
    CupidPolicy,
    RucbPolicy,
    SimulatedUser,
    UniformPolicy,
    duel_regret,
    persona_variants,
    simulate_regret,
)
from agora.cli._shared import Table, console, err_console, from_options, get_pool, new_run_id, user_errors
from agora.cli._apps import app
from agora.graphs.postgres_checkpoint import CHECKPOINT_SCHEMA
from agora.graphs.run_checkpoints import checkpoint_path
from agora.graphs.selection import SPEC, known_features, parse_choice
from agora.runs.selection import run_session, session_settings
from agora.tasks.loaders import load_problems
from agora.traces.pg_sql import db_argument
from agora.traces.store import TraceStore, check_run_id, readonly_uri, store_backend
from agora.traces.plots import plot_regret
from agora.models.contract import MAX_TOKENS_LIMIT


@app.command("select")
def select(
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompts (JSONL: prompt/instruction/text/question per line); needed to start a session."),
    budget_cost: Optional[float] = typer.Option(None, "--budget-cost", min=0.0, help="Most spent on generations, in the pool's cost_per_1k_tokens unit (default: no limit)."),
    budget_rounds: int = typer.Option(20, "--budget-rounds", min=1, help="Most duels to judge (at least 1)."),
    budget_time: Optional[float] = typer.Option(None, "--budget-time", min=0.0, help="Most model seconds spent generating (default: no limit)."),
    simulate: Optional[str] = typer.Option(None, "--simulate", help="Simulated user's hidden θ, e.g. 'latency_s=-1' (feature=weight, comma-separated)."),
    noisy: bool = typer.Option(True, "--noisy/--noiseless", help="Simulated user answers by Bradley–Terry draws (noisy) or always by utility."),
    thread: Optional[str] = typer.Option(None, "--thread", help="Session id; an existing id continues that session with its first settings."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, tiny; see `agora pool list`). Default: the embedded Qwen pool."),
    variants: Optional[bool] = typer.Option(None, "--variants/--no-variants", help="Add concise and tutor persona variants of every model (default: when the pool has fewer than 3 models)."),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max generated tokens per answer."),
    beta: float = typer.Option(1.0, "--beta", min=0.0, help="UCB confidence width β."),
    delta: float = typer.Option(0.05, "--delta", min=1e-6, max=0.5, help="Stop when P(best) ≥ 1 − δ."),
    seed: int = typer.Option(0, "--seed", min=0),
    sim_seeds: int = typer.Option(20, "--sim-seeds", min=1, help="Simulated runs per policy in the regret plot."),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    out: Path = typer.Option(Path("agora-select"), "--out", help="Folder for the report (JSON) and regret plot (PNG)."),
) -> None:
    """Find the model you prefer by judging pairs of anonymous answers (CUPID dueling bandit)."""
    with user_errors("rounds"):
        given_thread = thread is not None
        thread = new_run_id("select") if thread is None else check_run_id(thread, "--thread")
        checked_items = checked_pool = None
        if store_backend(db) is None and not Path(db).exists():  # a new session for sure: its inputs are checked
            # before the DB is created
            checked_items = _check_prompts(prompts)
            checked_pool = get_pool(pool)
            if variants or (variants is None and len(checked_pool) < 3):
                checked_pool = persona_variants(checked_pool)
            if simulate:  # (no traces yet: the features are the pool file's)
                names, _ = feature_table({m: {LATENCY: 0.0, **v} for m, v in known_features(
                    checked_pool, checked_pool.names, {}).items()}, checked_pool.names)
                parse_theta(simulate, names)
        elif prompts is None and not _has_checkpoint(db, thread):
            # no such session in this DB, so this one is new: refused before the DB is opened (opening
            # would add Agora's tables or columns to it)
            raise InputError("--prompts FILE is needed to start a session"
                             + (f" (no session {thread} in {shown_url(db)})" if given_thread else ""))
        store = TraceStore(db)
        settings = session_settings(store, thread)
        resumed = settings is not None
        if settings is None:
            if prompts is None:
                raise InputError("--prompts FILE is needed to start a session")
            from_options(CupidConfig, budget_rounds="budget_rounds", budget_cost="budget_cost",
                         budget_time_s="budget_time", beta="beta", delta="delta", max_tokens="max_tokens", seed="seed")
            settings = {
                "config": asdict(CupidConfig(budget_rounds=budget_rounds, budget_cost=budget_cost,
                                             budget_time_s=budget_time, beta=beta, delta=delta,
                                             max_tokens=max_tokens, seed=seed)),
                "pool_file": str(pool) if pool else None, "variants": variants,
                "simulate": simulate, "noisy": noisy, "prompts_file": str(prompts)}
        else:
            from_options(CupidConfig)  # the session's stored settings: no option gave them
        config = CupidConfig(**settings["config"])
        if checked_pool is not None and not resumed:
            the_pool = checked_pool
        else:
            the_pool = get_pool(Path(settings["pool_file"]) if settings["pool_file"] else None)
            if settings["variants"] or (settings["variants"] is None and len(the_pool) < 3):
                the_pool = persona_variants(the_pool)
        items, given = None, None
        if resumed:
            console.print(f"continuing session [bold]{escape(thread)}[/bold] with its first settings", highlight=False)
        else:
            items = checked_items or _check_prompts(Path(settings["prompts_file"]))
            arms = the_pool.names
            given = trace_features(store, arms)
            if settings["simulate"]:
                names, _ = feature_table({m: {LATENCY: 0.0, **v}
                                          for m, v in known_features(the_pool, arms, given).items()}, arms)
                parse_theta(settings["simulate"], names)
            console.print(f"session [bold]{escape(thread)}[/bold]: {len(arms)} models ({escape(', '.join(arms))}), "
                          f"{len(items)} prompts, up to {config.budget_rounds} rounds", highlight=False)
        choose = ((lambda payload, values: _simulated_choice(values, settings)) if settings["simulate"]
                  else (lambda payload, values: _ask_terminal(payload)))
        try:
            values = run_session(the_pool, store, thread, settings, choose, features=given,
                                 prompts=None if items is None else [{"id": p.id, "text": p.question} for p in items],
                                 dataset={"path": settings["prompts_file"], "format": "prompts"}, on_event=_show_event)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/yellow]: judged rounds are saved; rerun with the same --thread")
            raise typer.Exit(130) from None
    if not SPEC.finished(values):
        console.print(f"stopped after {values.get('round', 0)} rounds: continue with "
                      f"[bold]{escape(shlex.join(['agora', 'select', '--thread', thread]))}[/bold]"
                      f"{'' if db == 'agora.db' else escape(' --db ' + ' '.join(filter(None, db_argument(db))))}",
                      highlight=False)
        return
    _report(values, settings, thread, out, sim_seeds)


def _has_checkpoint(db: str, thread: str) -> bool:
    """Whether ``db``'s checkpoints hold thread ``thread``, read without writing anything: the checkpoint
    file beside a SQLite file, or the ``agora_checkpoints`` schema of a Postgres database (a file or a
    database that cannot be read as one counts as yes: opening it then reports the error)."""
    if store_backend(db) is not None:
        return _has_postgres_checkpoint(db, thread)
    path = Path(checkpoint_path(db))
    if not path.exists():
        return False
    try:
        conn = sqlite3.connect(readonly_uri(path), uri=True)
        try:
            return conn.execute("select 1 from checkpoints where thread_id = ? limit 1", [thread]).fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:
        return True


def _has_postgres_checkpoint(url: str, thread: str) -> bool:
    """:func:`_has_checkpoint` on Postgres: a checkpoint row of ``thread`` in schema ``agora_checkpoints``
    (none before the first run there created it)."""
    try:
        import psycopg
    except ImportError:
        return True  # (opening the store names the missing extra)
    try:
        with psycopg.connect(url, connect_timeout=30) as conn:
            if conn.execute("select to_regclass(%s)", [f"{CHECKPOINT_SCHEMA}.checkpoints"]).fetchone()[0] is None:
                return False
            return conn.execute(f"select 1 from {CHECKPOINT_SCHEMA}.checkpoints where thread_id = %s limit 1",
                                [thread]).fetchone() is not None
    except psycopg.Error:
        return True


def _check_prompts(prompts: Path | None) -> list:
    """The prompts of ``--prompts`` for a new session.

    Raises:
        ValueError: no ``--prompts``, or a file with no prompts; FileNotFoundError,
            TaskFormatError: as :func:`agora.tasks.loaders.load_problems`.
    """
    if prompts is None:
        raise InputError("--prompts FILE is needed to start a session")
    items = load_problems(Path(prompts), "prompts")
    if not items:
        raise InputError(f"--prompts {prompts}: no prompts in the file")
    return items


def _show_event(event: dict) -> None:
    """Print the session's progress events (features measured, duels judged, budget, recommendation)."""
    if event.get("event") in ("measured", "judged", "budget", "recommend"):
        console.print(f"[dim]{escape(event['message'])}[/dim]", highlight=False)


def _simulated_choice(values: dict, settings: dict) -> str:
    duel = values["duel"]
    arms = values["arms"]
    theta = parse_theta(settings["simulate"], values["feature_names"])
    config = CupidConfig(**settings["config"])
    user = SimulatedUser(theta, np.array(values["x"]), noisy=settings["noisy"], seed=(config.seed, duel["round"], 3))
    y = user.prefer(arms.index(duel["shown"][0]), arms.index(duel["shown"][1]))
    return "A" if y == 1 else "B" if y == 0 else "tie"


def _ask_terminal(payload: dict) -> str | None:
    """Show the duel and read A, B or tie; ``None`` when the user stops (``q`` or end of input)."""
    console.rule(f"round {payload['round']}")
    console.print(Panel(escape(payload["prompt"]), title="prompt", title_align="left"))
    answers = Table.grid(expand=True, padding=(0, 1))
    answers.add_column(ratio=1)
    answers.add_column(ratio=1)
    answers.add_row(Panel(escape(payload["A"]), title="A"), Panel(escape(payload["B"]), title="B"))
    console.print(answers)
    while True:
        try:
            reply = typer.prompt("Which answer is better? A, B or tie (q stops; continue later)")
        except typer.Abort:
            return None
        if reply.strip().lower() in ("q", "quit", "stop"):
            return None
        choice = parse_choice(reply)
        if choice is not None:
            return choice
        console.print("please answer A, B, tie or q")


def _report(values: dict, settings: dict, thread: str, out: Path, sim_seeds: int) -> None:
    rec = values["recommendation"]
    table = Table(title=f"CUPID session {escape(thread)}")
    for col in ("model", "P(best)", "posterior utility", "duels", "wins"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rec["ranking"]:
        table.add_row(escape(r["model"]), f"{r['p_best']:.3f}", f"{r['utility']:+.3f}", str(r["duels"]), f"{r['wins']:g}")
    console.print(table)
    console.print(f"[bold]recommended[/bold]: {escape(rec['model'])} (P(best) = {rec['p_best']:.3f})", highlight=False)
    console.print(f"rounds used: {rec['rounds']}; cost spent: {rec['spent_cost']:.4g}; model time: "
                  f"{rec['spent_time_s']:.1f} s; stopped by: {rec['stop_reason']}", highlight=False)
    report: dict[str, Any] = {"thread": thread, "recommendation": rec, "arms": values["arms"],
                              "feature_names": values["feature_names"], "raw_features": values["raw_features"],
                              "history": values.get("history") or []}
    out.mkdir(parents=True, exist_ok=True)
    if settings["simulate"]:
        config = CupidConfig(**settings["config"])
        x = np.array(values["x"])
        theta = parse_theta(settings["simulate"], values["feature_names"])
        best = values["arms"][SimulatedUser(theta, x).best]
        arms = values["arms"]
        session = np.cumsum([duel_regret(theta, x, arms.index(h["a"]), arms.index(h["b"]))
                             for h in values.get("history") or []])
        rounds = max(config.budget_rounds, 1)
        seeds = list(range(config.seed, config.seed + sim_seeds))
        curves = {
            "CUPID": simulate_regret(lambda s: CupidPolicy(x, config), theta, x, rounds, seeds, noisy=settings["noisy"]),
            "uniform pairs": simulate_regret(lambda s: UniformPolicy(len(arms), seed=(s, 2)), theta, x, rounds, seeds,
                                             noisy=settings["noisy"]),
            "RUCB": simulate_regret(lambda s: RucbPolicy(len(arms), seed=(s, 2)), theta, x, rounds, seeds,
                                    noisy=settings["noisy"]),
        }
        png = out / f"{safe_file_name(thread)}-regret.png"
        plot_regret(curves, session, png, title=f"simulated user θ: {settings['simulate']}")
        verdict = "[green]yes[/green]" if rec["model"] == best else "[red]no[/red]"
        console.print(f"simulated user's best model: {escape(best)}; recommended it: {verdict}", highlight=False)
        console.print(f"cumulative regret after {rounds} rounds, mean of {len(seeds)} simulated runs: "
                      + ", ".join(f"{name} {c[:, -1].mean():.2f}" for name, c in curves.items()), highlight=False)
        console.print(f"this session: {session[-1] if session.size else 0:.2f} after {session.size} rounds",
                      highlight=False)
        console.print(f"regret plot: {escape(str(png))}", highlight=False)
        report.update(simulated_best=best, theta=theta.tolist(), session_regret=session.tolist(),
                      mean_regret={k: c.mean(axis=0).tolist() for k, c in curves.items()}, plot=str(png))
    path = out / f"{safe_file_name(thread)}.json"
    path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    console.print(f"report: {escape(str(path))}", highlight=False)
