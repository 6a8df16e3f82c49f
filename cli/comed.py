"""``agora run comed`` and ``agora calibrate comed``: COMED controlled escalation on a benchmark,
with anchor-only, router-only, MoA and debate in the same run, and the rescue–harm report.

The options the two commands share are declared once below; the report and the calibration are
computed in :mod:`agora.traces.comed`, and this module prints them."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.tasks.loaders import missing_reason
from agora.agents.escalation import EscalationConfig, EscalationThresholds, check_pool, baseline_names, decision_grid
from agora.agents.escalation_records import comed_detail
from agora.agents.escalation_calibration import ThresholdsFile, load_thresholds, write_thresholds
from agora.models.pool import ModelPool
from agora.agents.router import KNNRouter, history_from_store
from agora.cli._apps import calibrate_app, run_app
from agora.cli._run import CONFIG, FORMAT, LIMIT, POOL, RUN_ID, counted, load_benchmark, settings
from agora.cli._shared import (
    MAX_TEMPERATURE,
    Table,
    console,
    exit_if_failed,
    fmt_ci,
    fmt_pct,
    from_options,
    get_pool,
    graceful_stop,
    new_run_id,
    nonempty_path,
    question_progress,
    user_errors,
)
from agora.graphs.escalation import METHODS, EscalationContext, build_escalation_graph
from agora.graphs.runner import RunOutcome, run_problems
from agora.tasks.problem import Problem
from agora.traces.comed import ComedSummary, calibrate_run, comed_summary
from agora.traces.report import failed_questions
from agora.traces.store import TraceStore
from agora.models.contract import MAX_TOKENS_LIMIT

DEFAULT_LAMBDA = 0.01
"""Calibration cost weight λ: the accuracy gain (fraction; 0.01 = 1 pp) one extra model call per
question must buy (ours; protocols.md §3 gives none). See ``calibration_objective``."""
_DEFAULTS = EscalationConfig()
DEFAULT_SAMPLES = _DEFAULTS.n_anchor
"""Anchor samples N when neither ``--samples`` nor the thresholds file gives one (3)."""

# Options of both commands, declared once, with the settings' own defaults; --format, --limit (run),
# --pool and --run-id are the benchmark scaffold's (cli/_run.py).
ANCHOR = typer.Option(None, "--anchor", help="Fixed anchor model (no router).")
PROBE = typer.Option(None, "--probe", help="Peer-probe model (default: router runner-up / next model).")
ROUTER = typer.Option(True, "--router/--no-router", help="Route with kNN over past traces in --db (when any).")
ROUTER_K = typer.Option(5, "--router-k", help="Neighbours of the kNN router.")
EMBEDDING = typer.Option("auto", "--embedding", help="Router embedding: auto, minilm or tfidf.")
MAX_TOKENS = typer.Option(_DEFAULTS.max_tokens, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                          help="Max generated tokens per sample.")
PROBE_MAX_TOKENS = typer.Option(_DEFAULTS.probe_max_tokens, "--probe-max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                help="Max generated tokens of the probe's answer.")
TEMPERATURE = typer.Option(_DEFAULTS.temperature, "--temperature", min=0.0, max=MAX_TEMPERATURE,
                           help="Sampling temperature of the anchor, peers and baselines (the probe is greedy).")
SEED = typer.Option(_DEFAULTS.seed, "--seed", help="Base seed: each model call mixes in its question's id "
                                                  "(and the generated problems use it).")
DB = typer.Option("agora.db", "--db", help="Trace database (a SQLite file or a postgresql:// URL); also the "
                 "router's history.")
# run comed only
DATA = typer.Option(None, "--data", parser=nonempty_path, metavar="<path>",
                    help="Problem file (JSONL). Default: generated arithmetic problems.")
# calibrate comed only
DEV_DATA = typer.Option(..., "--data", parser=nonempty_path, metavar="<path>",
                        help="Dev split (JSONL) with gold answers.")
DEV_LIMIT = typer.Option(None, "--limit", min=1, help="Use the first N problems.")


def _problems(data: Path | None, fmt: str | None, limit: int | None, seed: int) -> tuple[str, list[Problem]]:
    """``(format, problems)``: ``--data`` in ``--format`` (guessed when omitted), else ``limit or 5``
    generated arithmetic problems (``--format gsm8k`` without a file: the shipped sample; any other
    format without a file is refused by :func:`load_benchmark`)."""
    _, fmt_name, problems = load_benchmark(data, (fmt or "synthetic") if data is None else fmt, limit, seed)
    return fmt_name, problems


def _router(use: bool, store: TraceStore, pool: ModelPool, run_id: str, k: int, embedding: str,
            anchor: str | None, problems: list[Problem]) -> KNNRouter | None:
    """A kNN router fitted on the store's past runs (never on this run's questions), or ``None``
    (fixed anchor) with a note why."""
    if k < 1:
        raise InputError(f"--router-k must be >= 1, got {k}")
    if embedding not in ("auto", "minilm", "tfidf"):
        raise InputError(f"--embedding must be auto, minilm or tfidf, got {embedding!r}")
    if not use or anchor is not None:
        return None
    try:
        history = history_from_store(store, exclude_runs=[run_id], exclude_questions={p.question for p in problems})
        router = KNNRouter(history, pool.names, k=k, embedding=embedding)
    except ValueError as exc:
        console.print(f"{escape(str(exc))}: no router, fixed anchor {escape(pool.names[0])}", highlight=False)
        return None
    console.print(f"router: kNN (k={k}, {escape(router.embedder.name)}) over past traces in {escape(shown_url(str(store.path)))}",
                  highlight=False)
    return router


def _run(problems: list[Problem], fmt_name: str, data: Path | None, limit: int | None, *, config: EscalationConfig,
         pool: ModelPool, router: KNNRouter | None, store: TraceStore, run_id: str, label: str) -> RunOutcome:
    with question_progress(len(problems)) as progress, graceful_stop(run_id) as control:
        task = progress.add_task("comed", total=len(problems), label=label, status="")
        outcome = run_problems(
            build_escalation_graph(), problems, store=store, run_id=run_id, protocol="comed",
            context=EscalationContext(pool=pool, config=config, router=router),
            config={**asdict(config), "router": router.description if router else None},
            pool_description=pool.describe(),
            dataset={"path": str(data) if data else None, "format": fmt_name, "limit": limit},
            on_event=lambda e: progress.update(task, status=e.get("message", "")[:70]),
            on_question=lambda q: progress.advance(task), detail=comed_detail, control=control,
        )
        progress.update(task, completed=len(problems), status="done")
    if outcome.skipped:
        console.print(f"resumed: {outcome.skipped} of {len(problems)} questions already done", highlight=False)
    return outcome


def _samples(given: int | None, file: ThresholdsFile | None, path: Path | None) -> int:
    """Anchor samples N: ``--samples``, else the thresholds file's ``n_anchor``, else 3. A file's
    thresholds were chosen on the SC grid k/N of its N, so another N is refused."""
    if file is not None and file.n_anchor is not None:
        if given is not None and given != file.n_anchor:
            raise InputError(f"--samples {given}: the thresholds in {path} were calibrated with n_anchor = "
                             f"{file.n_anchor} (SC takes the values k/N); drop --samples or recalibrate with it")
        return file.n_anchor
    return DEFAULT_SAMPLES if given is None else given


def _grid(n_anchor: int, t: EscalationThresholds, routed: bool) -> str:
    """The decide rule on every SC value of this N, e.g. ``SC 3/3 accept, 2/3 verify, ...``."""
    cells = ", ".join(f"{k}/{n_anchor} {d}" for k, d in decision_grid(n_anchor, t))
    return f"decide: SC {cells}" + (f" (accept needs router margin M >= {t.m_min:.4g}, else verify)" if routed else "")


def _check_out(out: Path, force: bool = False) -> None:
    """Refuse an ``--out`` the thresholds cannot be written to before the dev run: its folder is
    created (as other commands create theirs) and must be writable."""
    if out.is_dir():
        raise InputError(f"--out {out}: is a folder; give a file name, e.g. {out / 'comed-thresholds.toml'}")
    if out.is_symlink() and not out.exists() and "itself" in (reason := missing_reason(out)):
        raise InputError(f"--out {out}: {reason}")  # (a link to a file not there yet is written through)
    if out.exists() and not force:
        raise InputError(f"--out {out}: the file exists; pick a new name, or pass --force to overwrite it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the folder {out.parent} ({exc.strerror})") from None
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise InputError(f"--out {out}: not writable")


# The options that set an EscalationConfig field, where not the option named as the field: a field
# one of them set on the command line is not taken from --config.
_OPTIONS_OF = {"thresholds": ("thresholds", "tau_hi", "tau_lo", "m_min"), "n_anchor": ("samples", "thresholds")}


def _baselines(spec: str) -> tuple[str, ...]:
    names = tuple(b.strip() for b in spec.split(",") if b.strip() and b.strip() != "none")
    known = baseline_names()  # the registry's dense baselines (agora.graphs.escalation sets the source)
    unknown = [b for b in names if b not in known]
    if unknown:
        raise InputError(f"--baselines: unknown {unknown}; choose from {', '.join(known)} or none")
    return names


@run_app.command("comed", short_help="COMED: accept confident anchor answers, verify ambiguous ones, "
                                     "escalate the rest.")
def run_comed(
    ctx: typer.Context,
    data: Optional[Path] = DATA,
    fmt: Optional[str] = FORMAT,
    limit: Optional[int] = LIMIT,
    thresholds: Optional[Path] = typer.Option(None, "--thresholds", help="Thresholds file written by `agora calibrate comed`."),
    tau_hi: Optional[float] = typer.Option(None, "--tau-hi", help="Accept when SC >= tau_hi (default 0.67, or the file's)."),
    tau_lo: Optional[float] = typer.Option(None, "--tau-lo", help="Escalate when SC < tau_lo (default 0.34, or the file's)."),
    m_min: Optional[float] = typer.Option(None, "--m-min", help="Least router margin for a direct accept (default 0)."),
    samples: Optional[int] = typer.Option(None, "--samples", "-N", help="Anchor samples N for self-consistency "
                                          "(default: the thresholds file's n_anchor, else 3)."),
    anchor: Optional[str] = ANCHOR,
    probe: Optional[str] = PROBE,
    router: bool = ROUTER,
    router_k: int = ROUTER_K,
    embedding: str = EMBEDDING,
    baselines: str = typer.Option(",".join(_DEFAULTS.baselines), "--baselines",
                                  help="Dense baselines in the same run: moa, debate, council (any registered dense baseline), none."),
    debate_agents: int = typer.Option(_DEFAULTS.debate_agents, "--debate-agents",
                                      help="Debate agents; agent i plays pool model i mod |pool|."),
    debate_rounds: int = typer.Option(_DEFAULTS.debate_rounds, "--debate-rounds", help="Rounds including the first."),
    max_tokens: int = MAX_TOKENS,
    probe_max_tokens: int = PROBE_MAX_TOKENS,
    temperature: float = TEMPERATURE,
    seed: int = SEED,
    pool: Optional[Path] = POOL,
    db: str = DB,
    run_id: Optional[str] = RUN_ID,
    config_file: Optional[Path] = CONFIG,
) -> None:
    """Accept confident anchor answers, verify ambiguous ones with a peer probe, escalate the rest;
    compare with anchor-only, router-only, Mixture-of-Agents and debate on the same questions.

    ``--config FILE.toml``: a ``[comed]`` table of EscalationConfig fields (``[comed.thresholds]``
    for tau_hi, tau_lo, m_min); options given on the command line win, and ``--thresholds`` or any
    ``--tau-*``/``--m-min`` replaces the file's thresholds."""
    with user_errors("questions"):
        file = load_thresholds(thresholds) if thresholds else None
        base = file.thresholds if file else EscalationThresholds()
        given = {k: v for k, v in {"tau_hi": tau_hi, "tau_lo": tau_lo, "m_min": m_min}.items() if v is not None}
        samples = _samples(samples, file, thresholds)
        from_options(EscalationThresholds, tau_hi=("tau_hi", "thresholds"), tau_lo=("tau_lo", "thresholds"),
                     m_min=("m_min", "thresholds"))  # a [comed.thresholds] table of --config: its lines instead
        config = settings(ctx, EscalationConfig, config_file, "comed", {
            "thresholds": asdict(EscalationThresholds(**{**asdict(base), **given})), "n_anchor": samples,
            "anchor": anchor, "probe": probe, "baselines": _baselines(baselines), "debate_agents": debate_agents,
            "debate_rounds": debate_rounds, "max_tokens": max_tokens, "probe_max_tokens": probe_max_tokens,
            "temperature": temperature, "seed": seed}, options=_OPTIONS_OF)
        if file is not None and file.n_anchor is not None and config.n_anchor != file.n_anchor:
            raise InputError(f"--config {config_file}: n_anchor {config.n_anchor}, but the thresholds in {thresholds} "
                             f"were calibrated with n_anchor = {file.n_anchor}")
        samples = config.n_anchor
        fmt_name, problems = _problems(data, fmt, limit, seed)
        the_pool = get_pool(pool)
        check_pool(config, the_pool.names)  # a refusal names the option or --config line of its field
        run_id = run_id or new_run_id("comed")
        store = TraceStore(db)
        the_router = _router(router, store, the_pool, run_id, router_k, embedding, anchor, problems)
        t = config.thresholds
        console.print(f"run [bold]{escape(run_id)}[/bold]: {counted(len(problems), escape(fmt_name) + ' problem')}, pool "
                      f"{escape(', '.join(the_pool.names))}, "
                      f"N={samples}, τ_hi={t.tau_hi}, τ_lo={t.tau_lo}, m_min={t.m_min}", highlight=False)
        console.print(_grid(samples, t, the_router is not None), highlight=False)
        outcome = _run(problems, fmt_name, data, limit, config=config, pool=the_pool, router=the_router,
                       store=store, run_id=run_id, label="COMED")
        print_comed_report(comed_summary(store, run_id, order=METHODS), store, run_id)
        exit_if_failed(outcome, len(problems), run_id)


@calibrate_app.command("comed", short_help="Choose COMED's thresholds on a dev split and write them to --out.")
def calibrate_comed(
    data: Path = DEV_DATA,
    fmt: Optional[str] = FORMAT,
    limit: Optional[int] = DEV_LIMIT,
    out: Path = typer.Option(Path("comed-thresholds.toml"), "--out", help="Thresholds file to write (for --thresholds)."),
    lam: float = typer.Option(DEFAULT_LAMBDA, "--lambda", help="Cost weight λ: accuracy gain (0.01 = 1 pp) one extra "
                              "model call per question must buy."),
    max_calls: Optional[float] = typer.Option(None, "--max-calls", help="Budget: COMED's mean model calls per question "
                                              "on the dev split, anchor included (e.g. half a dense baseline's)."),
    samples: int = typer.Option(DEFAULT_SAMPLES, "--samples", "-N", help="Anchor samples N (written to --out)."),
    anchor: Optional[str] = ANCHOR,
    probe: Optional[str] = PROBE,
    router: bool = ROUTER,
    router_k: int = ROUTER_K,
    embedding: str = EMBEDDING,
    max_tokens: int = MAX_TOKENS,
    probe_max_tokens: int = PROBE_MAX_TOKENS,
    temperature: float = TEMPERATURE,
    seed: int = SEED,
    pool: Optional[Path] = POOL,
    db: str = DB,
    run_id: Optional[str] = RUN_ID,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
) -> None:
    """Run every COMED branch (probe and escalation) on each dev question, then choose the
    thresholds maximising rescue − harm − λ·cost and write them to --out."""
    with user_errors("questions"):
        if not 0 <= lam < math.inf:
            raise InputError(f"--lambda must be a finite number >= 0, got {lam}")
        if max_calls is not None and not max_calls >= 1:
            raise InputError(f"--max-calls must be >= 1 (each question costs the anchor's one model call), got {max_calls}")
        config = EscalationConfig(n_anchor=samples, anchor=anchor, probe=probe, explore=True, baselines=(),
                                  max_tokens=max_tokens, probe_max_tokens=probe_max_tokens,
                                  temperature=temperature, seed=seed)
        fmt_name, problems = _problems(data, fmt, limit, seed)
        the_pool = get_pool(pool)
        check_pool(config, the_pool.names)
        _check_out(out, force)
        run_id = run_id or new_run_id("comed-dev")
        store = TraceStore(db)
        the_router = _router(router, store, the_pool, run_id, router_k, embedding, anchor, problems)
        console.print(f"calibration run [bold]{escape(run_id)}[/bold]: {len(problems)} {escape(fmt_name)} dev problems, "
                      f"every branch on every question", highlight=False)
        dev = _run(problems, fmt_name, data, limit, config=config, pool=the_pool, router=the_router, store=store,
                   run_id=run_id, label="COMED dev")
        exit_if_failed(dev, len(problems), run_id, unit="dev questions")  # no thresholds from a partial dev run
        calibration = calibrate_run(store, run_id, lam, max_calls)
        best = calibration.chosen
        write_thresholds(out, best, n_anchor=samples, lam=lam, max_calls=max_calls,
                         source=f"{data} ({len(calibration.outcomes)} questions, run {run_id}, anchor "
                                f"{'routed by kNN' if the_router else 'fixed'}; run with the same anchor mode)")
        for name, p in calibration.policies:
            t = p.thresholds
            console.print(f"{name}: τ_hi={t.tau_hi:.4g}, τ_lo={t.tau_lo:.4g}, m_min={t.m_min:.4g}: objective "
                          f"{p.objective:.4f} (rescues {p.rescues}, harms {p.harms}, extra calls {p.extra_calls}, "
                          f"{p.calls_per_question:.2f} model calls per question)", highlight=False)
        console.print(_grid(samples, best.thresholds, the_router is not None), highlight=False)
        console.print(f"thresholds written to {escape(str(out))}; use them with `agora run comed --thresholds "
                      f"{escape(shlex.quote(str(out)))}`", highlight=False)


# ---------------------------------------------------------------------------- report (computed in traces/comed.py)


def print_comed_decisions(s: ComedSummary) -> None:
    """Print the decisions' shares (accept, verify, escalate; verify's two outcomes) and the
    rescue–harm line (``agora run comed`` and ``agora report run`` on a COMED run)."""
    n = sum(s.decisions.get(k, 0) for k in ("accept", "verify", "escalate"))
    share = ", ".join(f"{k} {s.decisions.get(k, 0)}/{n} ({fmt_pct(s.decisions.get(k, 0) / n if n else float('nan'))}%)"
                      for k in ("accept", "verify", "escalate"))
    console.print(f"decisions: {share}; verify → accept {s.outcomes.get('verify_accept', 0)}, "
                  f"verify → escalate {s.outcomes.get('verify_escalate', 0)}", highlight=False)
    rh = s.rescue_harm
    console.print(
        f"rescue–harm over {rh.n} questions ({rh.escalated} escalated): Acc(COMED) − Acc(anchor) = "
        f"{rh.final_correct}/{rh.n} − {rh.anchor_correct}/{rh.n} = {fmt_pct(rh.gain)} pp = "
        f"rescues {rh.rescues} − harms {rh.harms} (identity checked on every question: holds)", highlight=False)


def print_comed_report(s: ComedSummary, store: TraceStore, run_id: str) -> None:
    """Print the run's method table, decisions, rescue–harm line, COMED's cost against the dense
    baselines and its failed questions."""
    table = Table(title=f"COMED run {escape(run_id)}")
    for col in ("method", "questions", "failed", "accuracy %", "95% CI", "calls/q", "samples/q", "decoded tok/q"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=col == "method")
    for r in s.rows:
        table.add_row(escape(r.method), str(r.questions), str(r.failed), fmt_pct(r.accuracy), fmt_ci(r.ci_low, r.ci_high),
                      f"{s.calls_per_question[r.method]:.2f}", f"{r.samples_per_question:.2f}",
                      f"{s.tokens_per_question[r.method]:.1f}")
    console.print(table)
    print_comed_decisions(s)
    samples = {r.method: r.samples_per_question for r in s.rows}
    for dense in ("moa", "debate"):
        if "comed" in samples and samples.get(dense):
            calls, dense_calls = s.calls_per_question["comed"], s.calls_per_question[dense]
            console.print(
                f"COMED vs {dense}: model calls {calls:.2f} vs {dense_calls:.2f} per question "
                f"({100 * calls / dense_calls:.0f}%); samples {samples['comed']:.2f} vs {samples[dense]:.2f} "
                f"({100 * samples['comed'] / samples[dense]:.0f}%); decoded tokens {s.tokens_per_question['comed']:.1f} "
                f"vs {s.tokens_per_question[dense]:.1f} ({100 * s.tokens_per_question['comed'] / max(1e-9, s.tokens_per_question[dense]):.0f}%)",
                highlight=False)
    failed = failed_questions(store, run_id)
    if failed:
        console.print(f"failed questions: {len(failed)} (every model call failed: no answer recorded, not counted "
                      "above; a rerun with this --run-id retries them)", highlight=False)
    console.print(f"traces: {escape(shown_url(str(store.path)))}", highlight=False)
