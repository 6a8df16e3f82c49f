"""``agora run debate``: multi-agent debate on a benchmark, beside a vote on its first round."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agora.agents.debate import DebateConfig, agent_models
from agora.cli import _run
from agora.cli._apps import run_app
from agora.cli._shared import get_pool, user_errors
from agora.graphs.debate import METHODS, DebateContext


@run_app.command("debate", short_help="Multi-agent debate: agents answer, read each other, answer again; beside a first-round vote.")
def run_debate(
    ctx: typer.Context,
    data: Optional[Path] = _run.DATA,
    fmt: Optional[str] = _run.FORMAT,
    limit: Optional[int] = _run.LIMIT,
    agents: int = typer.Option(3, "--agents", "-n", min=1, help="Debate agents (agent i plays model i mod |models|)."),
    rounds: int = typer.Option(2, "--rounds", min=1, help="Rounds including the first, independent one."),
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated models the agents play in turn (default: the pool's)."),
    max_tokens: int = _run.MAX_TOKENS,
    temperature: float = _run.TEMPERATURE,
    shots: int = _run.SHOTS,
    seed: int = _run.SEED,
    pool: Optional[Path] = _run.POOL,
    db: Path = _run.DB,
    run_id: Optional[str] = _run.RUN_ID,
    concurrency: int = _run.CONCURRENCY,
    durability: _run.Durability = _run.DURABILITY,
    config_file: Optional[Path] = _run.CONFIG,
) -> None:
    """Agents answer each problem alone, then read the others' answers and answer again for each
    later round; the last round's plurality is compared with the first round's (first_round_vote)."""
    with user_errors():
        data, fmt_name, problems = _run.load_benchmark(data, fmt, limit, seed)
        config = _run.settings(ctx, DebateConfig, config_file, "debate", {
            "agents": agents, "rounds": rounds, "models": _run.names(models), "temperature": temperature,
            "max_tokens": max_tokens, "shots": shots, "seed": seed})
        the_pool = get_pool(pool)
        played = agent_models(config, the_pool.names)
        store, run_id, outcome = _run.run_benchmark(
            "debate", problems, context=DebateContext(the_pool, config), config=config, pool=the_pool, db=db,
            run_id=run_id, data=data, fmt_name=fmt_name, limit=limit,
            label=f"{config.agents} agents ({', '.join(played)}) × {config.rounds} rounds", durability=durability,
            concurrency=concurrency)
        _run.finish(store, run_id, outcome, len(problems), f"debate run {run_id}", METHODS)
