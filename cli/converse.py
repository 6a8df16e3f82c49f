"""``agora converse`` (two-model conversations for partner-conditioned data) and
``agora report diversity`` (cue rates per speaker and partner, Δ_m, distances, panel choice)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.agents.panel import NO_PARTNER, DiversityConfig, DiversityReport, analyse
from agora.agents.personas import converse_default_specs
from agora.models.pool import ModelPool, builtin_pool_name, load_pool, pool_from_specs
from agora.cli._shared import (
    MAX_SHOTS,
    MAX_TEMPERATURE,
    Table,
    console,
    from_options,
    graceful_stop,
    new_run_id,
    question_progress,
    user_errors,
)
from agora.cli._apps import app, report_app
from agora.cli._run import member_names
from agora.graphs.conversation import (
    ConversationConfig,
    ConversationContext,
    build_conversation_graph,
    conversation_detail,
)
from agora.graphs.runner import run_problems
from agora.tasks.loaders import FORMATS, detect_format, load_problems
from agora.traces.diversity import read_exchanges
from agora.traces.pg_sql import db_argument
from agora.traces.plots import write_heatmaps
from agora.traces.store import TraceStore, check_run_id
from agora.models.contract import MAX_TOKENS_LIMIT


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def ordered_pairs(pool: ModelPool, models: Optional[str], pairs: Optional[str]) -> list[tuple[str, str]]:
    """The ordered (A, B) pairs to run: ``--pairs a:b,...`` as given, else every ordered pair of
    ``--models`` (default: the whole pool).

    Raises:
        ValueError: an unknown model, a pair of one model, a malformed pair, or fewer than 2 models.
    """
    if pairs:
        out = []
        for item in _names(pairs):
            a, sep, b = item.partition(":")
            if not sep or not a.strip() or not b.strip():
                raise InputError(f"--pairs: {item!r} is not A:B")
            a, b = a.strip(), b.strip()
            if a == b:
                raise InputError(f"--pairs: {item!r} pairs a model with itself")
            pool[a], pool[b]
            out.append((a, b))
        return out
    names = list(member_names(models)) if models is not None else pool.names
    for n in names:
        pool[n]
    if len(set(names)) < 2:
        raise InputError(f"a conversation needs two models; got {', '.join(names) or 'none'}")
    return list(itertools.permutations(dict.fromkeys(names), 2))


@app.command("converse", short_help="Two-model conversations for every ordered pair, for `agora report diversity`.")
def converse(
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Questions or prompts (JSONL). Default: generated arithmetic problems."),
    fmt: Optional[str] = typer.Option(None, "--format", help=f"One of {', '.join(FORMATS)}; guessed from the file when omitted."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use the first N prompts (default: all; 3 generated)."),
    turns: int = typer.Option(3, "--turns", min=2, help="Responses per conversation: A, B, A, ..."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML). Default: the embedded models plus a 'cautious' persona variant of each."),
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated members; every ordered pair of them talks."),
    pairs: Optional[str] = typer.Option(None, "--pairs", help="Ordered pairs A:B,C:D instead of all pairs."),
    max_tokens: int = typer.Option(96, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max generated tokens per turn."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE),
    shots: int = typer.Option(2, "--shots", min=0, max=MAX_SHOTS, help="Worked exemplars in the prompt (math, multiple choice)."),
    seed: int = typer.Option(0, "--seed"),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Base run id (each pair runs as <id>:<A>><B>); an existing id resumes."),
) -> None:
    """Run two-model conversations (A answers, B replies to A, A replies, ...) for every ordered
    pair, tracing each response with its partner, for `agora report diversity`."""
    with user_errors("questions"):
        if prompts is None and fmt not in (None, "synthetic"):
            raise InputError(f"--format {fmt} needs a file: give --prompts FILE, or leave out --format "
                             "(generated arithmetic)")
        if prompts is None:
            fmt_name, problems = "synthetic", load_problems(None, "synthetic", limit or 3, seed=seed)
        else:
            fmt_name = fmt or detect_format(prompts)
            problems = load_problems(prompts, fmt_name, limit)
        if not problems:
            raise InputError(f"{prompts}: no prompts to run")
        builtin_name = builtin_pool_name(pool) if pool is not None else "default"
        the_pool = (load_pool(pool) if builtin_name is None
                    else pool_from_specs(converse_default_specs(builtin_name), source=f"builtin:converse-{builtin_name}"))
        todo = ordered_pairs(the_pool, models, pairs)
        base = new_run_id("converse") if run_id is None else check_run_id(run_id)
        from_options(ConversationConfig, turns="turns", max_tokens="max_tokens", temperature="temperature",
                     shots="shots", seed="seed")
        ConversationConfig(turns=turns, max_tokens=max_tokens, temperature=temperature, shots=shots,
                           seed=seed)  # its settings refused before the trace database is created
        store = TraceStore(db)
        console.print(f"run [bold]{escape(base)}[/bold]: {len(todo)} ordered pairs × {len(problems)} {escape(fmt_name)} "
                      f"prompts × {turns} turns; pool {escape(', '.join(the_pool.names))}", highlight=False)
        calls = 0
        with question_progress(len(todo) * len(problems)) as progress, graceful_stop(base) as control:
            task = progress.add_task("converse", total=len(todo) * len(problems), label="converse", status="")
            for a, b in todo:
                config = ConversationConfig(speaker_a=a, speaker_b=b, turns=turns, max_tokens=max_tokens,
                                            temperature=temperature, shots=shots, seed=seed)
                outcome = run_problems(
                    build_conversation_graph(), problems, store=store, run_id=f"{base}:{a}>{b}",
                    protocol="converse", context=ConversationContext(pool=the_pool, config=config),
                    config=asdict(config), pool_description=the_pool.describe(),
                    dataset={"path": str(prompts) if prompts else None, "format": fmt_name, "limit": limit},
                    on_event=lambda e: progress.update(task, status=e.get("message", "")[:70]),
                    on_question=lambda q: progress.advance(task),
                    detail=conversation_detail,
                    control=control,
                )
                progress.advance(task, outcome.skipped)
                calls += sum(len(q.calls) for q in outcome.outcomes)
            progress.update(task, status="done")
        db_arg, note = db_argument(db)
        console.print(f"{calls} model calls recorded in {escape(shown_url(str(store.path)))}; next: "
                      f"agora report diversity --db {escape(db_arg)} --out diversity/"
                      + (f" {escape(note)}" if note else ""), highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- report


def _fmt(x: float, digits: int = 1) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def print_report(report: DiversityReport) -> None:
    cfg = report.config
    table = Table(title=f"Cue rates per 100 word tokens, speaker × partner (mean [{cfg.level:.0%} CI])")
    table.add_column("speaker", no_wrap=True)
    table.add_column("partner", no_wrap=True)
    table.add_column("turns", justify="right", no_wrap=True)
    for name, exploratory in report.detectors:
        table.add_column(escape(name) + ("†" if exploratory else ""), justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for c in report.cells:
        cues = [f"{_fmt(e.mean)} [{_fmt(e.low)}, {_fmt(e.high)}]" for e in c.cues.values()]
        style = None if c.enough or c.partner is None else "dim"
        table.add_row(escape(c.speaker), escape(c.partner or NO_PARTNER), str(c.turns) + ("" if c.enough else "*"), *cues,
                      _fmt(c.mean_tokens, 1), style=style)
    console.print(table)
    console.print(f"† exploratory lexicon (not validated); * fewer than {cfg.min_turns} turns: shown, not used "
                  "for Δ_m; tokens: mean word tokens per response", highlight=False)

    shifts = Table(title="Partner-conditioned hedging shift Δ_m = (max_p h − min_p h) / min_p h")
    for col in ("model", "family", "partners", "lowest h (partner)", "highest h (partner)", "Δ_m"):
        shifts.add_column(col, justify="left" if col in ("model", "family") else "right")
    for s in report.shifts:
        if s.cue != "hedging":
            continue
        pct = "-" if math.isnan(s.shift) else ("inf" if math.isinf(s.shift) else f"{100 * s.shift:.0f}%")
        shifts.add_row(escape(s.speaker), escape(report.families.get(s.speaker) or "-"), str(s.partners),
                       f"{_fmt(s.low)} ({escape(s.low_partner or '-')})", f"{_fmt(s.high)} ({escape(s.high_partner or '-')})",
                       pct)
    console.print(shifts)

    dist = Table(title="Behavioural distance")
    dist.add_column("", no_wrap=True)
    for m in report.models:
        dist.add_column(escape(m), justify="right")
    for i, m in enumerate(report.models):
        dist.add_row(escape(m), *[f"{_fmt(v, 2)}" + (f" (n={int(n)})" if i != j and n else "")
                          for j, (v, n) in enumerate(zip(report.distance[i], report.agreement_n[i]))])
    console.print(dist)
    console.print("distance: root mean square of the min–max normalised differences in cue rates and mean "
                  "length, and of 1 − answer agreement (n: questions both models answered)", highlight=False)

    p = report.panel
    if p is not None:
        console.print(f"suggested panel of {p.size} ({'exact' if p.exact else 'local search'}): "
                      f"[bold]{escape(', '.join(p.members))}[/bold], total distance {p.total:.2f}", highlight=False)
        ties = (f"; {p.family_ties} panels tie on family labels, totals {p.family_total_range[0]:.2f}–"
                f"{p.family_total_range[1]:.2f}" if p.family_ties > 1 else "")
        console.print(f"family-label-only panel: {escape(', '.join(p.family_members))}, total distance "
                      f"{p.family_total:.2f}{ties}", highlight=False)
    for note in report.notes:
        console.print(f"note: {escape(str(note))}", highlight=False)


@report_app.command("diversity", short_help="Cue rates per speaker and partner, behavioural distances and a "
                                             "suggested panel.")
def report_diversity(
    db: str = typer.Option(..., "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    out: Path = typer.Option(..., "--out", help="Folder for the heatmaps and diversity.json."),
    runs: Optional[list[str]] = typer.Option(None, "--run-id", "--run", help="Only this run id (repeatable; a converse base id selects its pairs)."),
    min_turns: int = typer.Option(5, "--min-turns", min=1, help="Turns a speaker × partner cell needs to count for Δ_m."),
    panel_size: int = typer.Option(3, "--panel-size", min=2, help="Members of the suggested panel."),
    seed: int = typer.Option(0, "--seed", min=0, help="Bootstrap seed."),
) -> None:
    """Hedging, repair and challenge cue rates per speaker and partner with bootstrap CIs, the
    partner-conditioned shift Δ_m, behavioural distances, and the panel maximising them beside a
    family-label-only choice. Writes heatmaps (PNG) and diversity.json to --out."""
    with user_errors():
        from_options(DiversityConfig, min_turns="min_turns", panel_size="panel_size", seed="seed")
        config = DiversityConfig(min_turns=min_turns, panel_size=panel_size, seed=seed)
        data = read_exchanges(db, runs or ())
        if not data.rows:
            raise InputError(f"{shown_url(db)}: no successful model calls"
                             + (f" in run(s) {', '.join(runs)}" if runs else ""))
        report = analyse(data.rows, data.families, config, model_order=data.model_order, notes=data.notes)
        protocols = sorted({r["protocol"] or "?" for r in data.rows})
        exchanged = sum(r["partner"] is not None for r in data.rows)
        console.print(f"{escape(shown_url(db))}: {len(data.rows)} responses ({exchanged} with a partner) from "
                      f"{len({r['run_id'] for r in data.rows})} run(s), protocols {escape(', '.join(protocols))}",
                      highlight=False)
        print_report(report)
        paths = write_heatmaps(report, out)
        (out / "diversity.json").write_text(json.dumps(report.as_dict(), indent=2), encoding="utf-8")
        console.print(f"wrote {escape(', '.join(str(p) for p in [*paths, out / 'diversity.json']))}", highlight=False)
