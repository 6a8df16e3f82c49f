"""``agora run align``: ALIGN delegation on a benchmark, with the fair baselines and a method table."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.agents.delegation import DelegationConfig
from agora.cli import _run
from agora.cli._apps import run_app
from agora.cli._shared import (MAX_TEMPERATURE, Table, console, exit_if_failed, fmt_ci, fmt_pct, from_options, get_pool,
                               user_errors)
from agora.graphs.delegation import METHODS, DelegationContext, calibrated_reliabilities
from agora.models.urls import shown_url
from agora.tasks.loaders import load_problems
from agora.traces.report import method_table, run_totals, unknown_tokens_note
from agora.traces.store import TraceStore
from agora.models.contract import MAX_TOKENS_LIMIT

_DEFAULTS = DelegationConfig()  # the options' defaults


@run_app.command("align", short_help="ALIGN delegation compared with single-agent, self-consistency and best-of-n·k.")
def run_align(
    data: Optional[Path] = _run.DATA,
    fmt: Optional[str] = _run.FORMAT,
    limit: Optional[int] = _run.LIMIT,
    agents: int = typer.Option(_DEFAULTS.n_agents, "--agents", "-n", min=1, help="Number of agents n."),
    samples: int = typer.Option(_DEFAULTS.k_samples, "--samples", "-k", min=1, help="Candidates each agent samples (k)."),
    tau: float = typer.Option(_DEFAULTS.tau, "--tau", min=0.0, max=1.0,
                              help="Principal's committed acceptance threshold on U."),
    max_tokens: int = typer.Option(_DEFAULTS.max_tokens, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max generated tokens per sample."),
    temperature: float = typer.Option(_DEFAULTS.temperature, "--temperature", min=0.0, max=MAX_TEMPERATURE),
    seed: int = typer.Option(_DEFAULTS.seed, "--seed"),
    pool: Optional[Path] = _run.POOL,
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated pool members to use as agents."),
    utility: str = typer.Option(_DEFAULTS.utility, "--utility",
                                help="Principal utility U: agreement (signal-weighted agreement of the proposals) or "
                                     "calibrated (also weighted by each member's accuracy on dev questions)."),
    dev_accuracy: Optional[str] = typer.Option(None, "--dev-accuracy",
                                               help="The calibrated utility's member accuracies on dev questions, "
                                                    "comma-separated member=accuracy (e.g. qwen1.5b=0.37,qwen0.5b=0.17)."),
    dev_run: Optional[str] = typer.Option(None, "--dev-run", help="A dev run whose samples give the member accuracies "
                                                                   "not in --dev-accuracy."),
    dev_db: Optional[str] = typer.Option(None, "--dev-db", help="The trace DB holding --dev-run (default: --db)."),
    principal: Optional[str] = typer.Option(None, "--principal",
                                            help="A pool member (e.g. a trained aggregator) that reads the question and "
                                                 "the proposals and answers for ALIGN, in place of the utility rule."),
    db: str = _run.DB,
    run_id: Optional[str] = _run.RUN_ID,
    concurrency: Optional[int] = _run.CONCURRENCY,
    durability: _run.Durability = typer.Option("async", "--durability",
                                   help="Checkpoint each question after every step (async, sync) or only when it "
                                        "ends or stops (exit: faster; a killed process redoes that question)."),
) -> None:
    """Delegate each problem to n agents (k samples each) and compare ALIGN with single-agent,
    self-consistency and best-of-n·k on the same candidates."""
    with user_errors("questions"):
        data, fmt_name, problems = _run.load_benchmark(data, fmt, limit, seed, load_problems)  # default: the GSM8K sample
        from_options(DelegationConfig, n_agents="agents", k_samples="samples", tau="tau", max_tokens="max_tokens",
                     temperature="temperature", seed="seed", models="models", utility="utility",
                     dev_accuracy="dev_accuracy", dev_run="dev_run", dev_db=("dev_db", "db"),
                     principal="principal")
        config = DelegationConfig(n_agents=agents, k_samples=samples, tau=tau, max_tokens=max_tokens,
                                  temperature=temperature, seed=seed,
                                  models=_run.member_names(models),
                                  utility=utility, dev_accuracy=_run.names(dev_accuracy), dev_run=dev_run,
                                  dev_db=dev_db or (db if dev_run else None), principal=principal)
        the_pool = get_pool(pool)
        for m in config.models:
            the_pool[m]
        _run.check_principal(config.principal, the_pool)
        calibrated_reliabilities(config, list(config.models) or the_pool.names)  # dev run and accuracies: before any run row
        store, run_id, outcome = _run.run_benchmark(
            "align", problems, context=DelegationContext(pool=the_pool, config=config), config=config, pool=the_pool,
            db=db, run_id=run_id, data=data, fmt_name=fmt_name, limit=limit,
            label=f"{agents} agents × {samples} samples", durability=durability, concurrency=concurrency)
        print_method_table(store, run_id)
        exit_if_failed(outcome, len(problems), run_id)


def print_method_table(store: TraceStore, run_id: str) -> None:
    rows = method_table(store, run_id, order=METHODS)
    totals = run_totals(store, run_id)
    table = Table(title=f"ALIGN run {escape(run_id)}")
    for col in ("method", "questions", "failed", "guessed", "accuracy %", "95% CI", "samples/q", "gen. tokens",
                "model time s"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=col == "method")
    for r in rows:
        table.add_row(escape(r.method), str(r.questions), str(r.failed), str(r.guessed), fmt_pct(r.accuracy),
                      fmt_ci(r.ci_low, r.ci_high),
                      f"{r.samples_per_question:.1f}", str(r.completion_tokens), f"{r.model_time_s:.1f}")
    console.print(table)
    if totals["failed_questions"]:
        console.print(f"failed questions: {int(totals['failed_questions'])} (every model call failed: no answer "
                      "recorded, not counted in accuracy; a rerun with this --run-id retries them)", highlight=False)
    console.print(
        f"samples drawn: {int(totals['calls'])} (one trace row each; failed attempts: {int(totals['failed'])}), "
        f"generated tokens: {int(totals['completion_tokens'])}{unknown_tokens_note(totals)}, prompt tokens: {int(totals['prompt_tokens'])}, "
        f"question time: {totals['wall_s']:.1f} s summed over {_run.counted(int(totals['questions']), 'question')}", highlight=False)
    console.print(f"traces: {escape(shown_url(str(store.path)))}", highlight=False)
