"""``agora run moa``: Mixture-of-Agents on a benchmark, beside a vote on the same proposals."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agora.agents.moa import MoAConfig, check_pool
from agora.cli import _run
from agora.cli._apps import run_app
from agora.cli._shared import get_pool, user_errors
from agora.graphs.moa import METHODS, MoAContext


@run_app.command("moa", short_help="Mixture-of-Agents: every model proposes, one aggregates; beside a vote on the proposals.")
def run_moa(
    ctx: typer.Context,
    data: Optional[Path] = _run.DATA,
    fmt: Optional[str] = _run.FORMAT,
    limit: Optional[int] = _run.LIMIT,
    proposers: Optional[str] = typer.Option(None, "--proposers", help="Comma-separated proposer models (default: every pool model)."),
    aggregator: Optional[str] = typer.Option(None, "--aggregator", help="Aggregator model (default: the first pool model)."),
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
    """Each proposer answers every problem alone, the aggregator reads all proposals and answers;
    compare with the plurality of the same proposals (proposal_vote)."""
    with user_errors():
        data, fmt_name, problems = _run.load_benchmark(data, fmt, limit, seed)
        config = _run.settings(ctx, MoAConfig, config_file, "moa", {
            "proposers": _run.names(proposers), "aggregator": aggregator, "temperature": temperature,
            "max_tokens": max_tokens, "shots": shots, "seed": seed})
        the_pool = get_pool(pool)
        check_pool(config, the_pool.names)
        label = f"{len(config.proposers or the_pool.names)} proposers, aggregator {config.aggregator or the_pool.names[0]}"
        store, run_id, outcome = _run.run_benchmark(
            "moa", problems, context=MoAContext(the_pool, config), config=config, pool=the_pool, db=db, run_id=run_id,
            data=data, fmt_name=fmt_name, limit=limit, label=label, durability=durability, concurrency=concurrency)
        _run.finish(store, run_id, outcome, len(problems), f"MoA run {run_id}", METHODS)
