"""``agora run comed`` and ``agora calibrate comed``: COMED controlled escalation on a benchmark,
with anchor-only, router-only, MoA and debate in the same run, and the rescue–harm report."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from agora.agents.escalation import (
    BASELINES,
    DevOutcome,
    EscalationConfig,
    EscalationThresholds,
    RescueHarm,
    ThresholdsFile,
    calibrate,
    check_pool,
    decision_grid,
    load_thresholds,
    rescue_harm,
    score_policy,
    write_thresholds,
)
from agora.agents.pool import ModelPool
from agora.agents.router import KNNRouter, history_from_store
from agora.cli._shared import (
    MAX_TEMPERATURE,
    console,
    exit_if_failed,
    fmt_ci,
    fmt_pct,
    get_pool,
    graceful_stop,
    new_run_id,
    question_progress,
    user_errors,
)
from agora.cli._apps import calibrate_app, run_app
from agora.graphs.escalation import METHODS, EscalationContext, build_escalation_graph, comed_detail
from agora.graphs.runner import RunOutcome, run_problems
from agora.tasks.loaders import FORMATS, Problem, detect_format, load_problems
from agora.traces.bench import comed_dev_outcomes
from agora.traces.report import MethodRow, failed_questions, method_table
from agora.traces.store import TraceStore

DEFAULT_LAMBDA = 0.01
"""Calibration cost weight λ: the accuracy gain (fraction; 0.01 = 1 pp) one extra model call per
question must buy (ours; protocols.md §3 gives none). See ``calibration_objective``."""
DEFAULT_SAMPLES = 3
"""Anchor samples N when neither ``--samples`` nor the thresholds file gives one."""


def _problems(data: Path | None, fmt: str | None, limit: int | None, seed: int) -> tuple[str, list[Problem]]:
    if data is None:
        return "synthetic", load_problems(None, "synthetic", limit or 5, seed=seed)
    fmt_name = fmt or detect_format(data)
    problems = load_problems(data, fmt_name, limit)
    if not problems:
        raise ValueError(f"{data}: no problems to run")
    return fmt_name, problems


def _router(use: bool, store: TraceStore, pool: ModelPool, run_id: str, k: int, embedding: str,
            anchor: str | None, problems: list[Problem]) -> KNNRouter | None:
    """A kNN router fitted on the store's past runs (never on this run's questions), or ``None``
    (fixed anchor) with a note why."""
    if k < 1:
        raise ValueError(f"--router-k must be >= 1, got {k}")
    if embedding not in ("auto", "minilm", "tfidf"):
        raise ValueError(f"--embedding must be auto, minilm or tfidf, got {embedding!r}")
    if not use or anchor is not None:
        return None
    try:
        history = history_from_store(store, exclude_runs=[run_id], exclude_questions={p.question for p in problems})
        router = KNNRouter(history, pool.names, k=k, embedding=embedding)
    except ValueError as exc:
        console.print(f"{exc}: no router, fixed anchor {pool.names[0]}", highlight=False)
        return None
    console.print(f"router: kNN (k={k}, {router.embedder.name}) over past traces in {store.path}", highlight=False)
    return router


def _run(problems: list[Problem], fmt_name: str, data: Path | None, limit: int | None, *, config: EscalationConfig,
         pool: ModelPool, router: KNNRouter | None, store: TraceStore, run_id: str, label: str) -> RunOutcome:
    with question_progress(len(problems)) as progress, graceful_stop() as control:
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
            raise ValueError(f"--samples {given}: the thresholds in {path} were calibrated with n_anchor = "
                             f"{file.n_anchor} (SC takes the values k/N); drop --samples or recalibrate with it")
        return file.n_anchor
    return DEFAULT_SAMPLES if given is None else given


def _grid(n_anchor: int, t: EscalationThresholds, routed: bool) -> str:
    """The decide rule on every SC value of this N, e.g. ``SC 3/3 accept, 2/3 verify, ...``."""
    cells = ", ".join(f"{k}/{n_anchor} {d}" for k, d in decision_grid(n_anchor, t))
    return f"decide: SC {cells}" + (f" (accept needs router margin M >= {t.m_min:.4g}, else verify)" if routed else "")


def _check_out(out: Path) -> None:
    """Refuse an ``--out`` the thresholds cannot be written to before the dev run: its folder is
    created (as other commands create theirs) and must be writable."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give a file name, e.g. {out / 'comed-thresholds.toml'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot create the folder {out.parent} ({exc.strerror})") from None
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ValueError(f"--out {out}: not writable")


def _baselines(spec: str) -> tuple[str, ...]:
    names = tuple(b.strip() for b in spec.split(",") if b.strip() and b.strip() != "none")
    unknown = [b for b in names if b not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines: unknown {unknown}; choose from {', '.join(BASELINES)} or none")
    return names


@run_app.command("comed", short_help="COMED: accept confident anchor answers, verify ambiguous ones, "
                                     "escalate the rest.")
def run_comed(
    data: Optional[Path] = typer.Option(None, "--data", help="Problem file (JSONL). Default: generated arithmetic problems."),
    fmt: Optional[str] = typer.Option(None, "--format", help=f"One of {', '.join(FORMATS)}; guessed from the file when omitted."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use the first N problems (default: all; 5 generated)."),
    thresholds: Optional[Path] = typer.Option(None, "--thresholds", help="Thresholds file written by `agora calibrate comed`."),
    tau_hi: Optional[float] = typer.Option(None, "--tau-hi", help="Accept when SC >= tau_hi (default 0.67, or the file's)."),
    tau_lo: Optional[float] = typer.Option(None, "--tau-lo", help="Escalate when SC < tau_lo (default 0.34, or the file's)."),
    m_min: Optional[float] = typer.Option(None, "--m-min", help="Least router margin for a direct accept (default 0)."),
    samples: Optional[int] = typer.Option(None, "--samples", "-N", help="Anchor samples N for self-consistency "
                                          "(default: the thresholds file's n_anchor, else 3)."),
    anchor: Optional[str] = typer.Option(None, "--anchor", help="Fixed anchor model (no router)."),
    probe: Optional[str] = typer.Option(None, "--probe", help="Peer-probe model (default: router runner-up / next model)."),
    router: bool = typer.Option(True, "--router/--no-router", help="Route with kNN over past traces in --db (when any)."),
    router_k: int = typer.Option(5, "--router-k", help="Neighbours of the kNN router."),
    embedding: str = typer.Option("auto", "--embedding", help="Router embedding: auto, minilm or tfidf."),
    baselines: str = typer.Option("moa,debate", "--baselines", help="Dense baselines in the same run: moa, debate, none."),
    debate_agents: int = typer.Option(3, "--debate-agents"),
    debate_rounds: int = typer.Option(2, "--debate-rounds", help="Rounds including the first."),
    max_tokens: int = typer.Option(128, "--max-tokens", help="Max generated tokens per sample."),
    probe_max_tokens: int = typer.Option(64, "--probe-max-tokens", help="Max generated tokens of the probe's answer."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE),
    seed: int = typer.Option(0, "--seed"),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, tiny; see `agora pool list`). Default: the embedded Qwen pool."),
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database (SQLite); also the router's history."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id; an existing id resumes that run."),
) -> None:
    """Accept confident anchor answers, verify ambiguous ones with a peer probe, escalate the rest;
    compare with anchor-only, router-only, Mixture-of-Agents and debate on the same questions."""
    with user_errors():
        file = load_thresholds(thresholds) if thresholds else None
        base = file.thresholds if file else EscalationThresholds()
        given = {k: v for k, v in {"tau_hi": tau_hi, "tau_lo": tau_lo, "m_min": m_min}.items() if v is not None}
        samples = _samples(samples, file, thresholds)
        config = EscalationConfig(
            thresholds=EscalationThresholds(**{**asdict(base), **given}), n_anchor=samples, anchor=anchor, probe=probe,
            baselines=_baselines(baselines), debate_agents=debate_agents, debate_rounds=debate_rounds,
            max_tokens=max_tokens, probe_max_tokens=probe_max_tokens, temperature=temperature, seed=seed)
        fmt_name, problems = _problems(data, fmt, limit, seed)
        the_pool = get_pool(pool)
        check_pool(config, the_pool.names)
        run_id = run_id or new_run_id("comed")
        store = TraceStore(db)
        the_router = _router(router, store, the_pool, run_id, router_k, embedding, anchor, problems)
        t = config.thresholds
        console.print(f"run [bold]{run_id}[/bold]: {len(problems)} {fmt_name} problems, pool {', '.join(the_pool.names)}, "
                      f"N={samples}, τ_hi={t.tau_hi}, τ_lo={t.tau_lo}, m_min={t.m_min}", highlight=False)
        console.print(_grid(samples, t, the_router is not None), highlight=False)
        outcome = _run(problems, fmt_name, data, limit, config=config, pool=the_pool, router=the_router,
                       store=store, run_id=run_id, label="COMED")
        print_comed_report(comed_summary(store, run_id), store, run_id)
        exit_if_failed(outcome, len(problems), run_id)


@calibrate_app.command("comed", short_help="Choose COMED's thresholds on a dev split and write them to --out.")
def calibrate_comed(
    data: Path = typer.Option(..., "--data", help="Dev split (JSONL) with gold answers."),
    fmt: Optional[str] = typer.Option(None, "--format", help=f"One of {', '.join(FORMATS)}; guessed when omitted."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use the first N problems."),
    out: Path = typer.Option(Path("comed-thresholds.toml"), "--out", help="Thresholds file to write (for --thresholds)."),
    lam: float = typer.Option(DEFAULT_LAMBDA, "--lambda", help="Cost weight λ: accuracy gain (0.01 = 1 pp) one extra "
                              "model call per question must buy."),
    max_calls: Optional[float] = typer.Option(None, "--max-calls", help="Budget: COMED's mean model calls per question "
                                              "on the dev split, anchor included (e.g. half a dense baseline's)."),
    samples: int = typer.Option(DEFAULT_SAMPLES, "--samples", "-N", help="Anchor samples N (written to --out)."),
    anchor: Optional[str] = typer.Option(None, "--anchor", help="Fixed anchor model (no router)."),
    probe: Optional[str] = typer.Option(None, "--probe", help="Peer-probe model."),
    router: bool = typer.Option(True, "--router/--no-router", help="Route with kNN over past traces in --db (when any)."),
    router_k: int = typer.Option(5, "--router-k"),
    embedding: str = typer.Option("auto", "--embedding", help="auto, minilm or tfidf."),
    max_tokens: int = typer.Option(128, "--max-tokens"),
    probe_max_tokens: int = typer.Option(64, "--probe-max-tokens"),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE),
    seed: int = typer.Option(0, "--seed"),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, tiny; see `agora pool list`). Default: the embedded Qwen pool."),
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database (SQLite)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id; an existing id resumes that run."),
) -> None:
    """Run every COMED branch (probe and escalation) on each dev question, then choose the
    thresholds maximising rescue − harm − λ·cost and write them to --out."""
    with user_errors():
        if not 0 <= lam < math.inf:
            raise ValueError(f"--lambda must be a finite number >= 0, got {lam}")
        if max_calls is not None and not max_calls >= 1:
            raise ValueError(f"--max-calls must be >= 1 (each question costs the anchor's one model call), got {max_calls}")
        config = EscalationConfig(n_anchor=samples, anchor=anchor, probe=probe, explore=True, baselines=(),
                                  max_tokens=max_tokens, probe_max_tokens=probe_max_tokens,
                                  temperature=temperature, seed=seed)
        fmt_name, problems = _problems(data, fmt, limit, seed)
        the_pool = get_pool(pool)
        check_pool(config, the_pool.names)
        _check_out(out)
        run_id = run_id or new_run_id("comed-dev")
        store = TraceStore(db)
        the_router = _router(router, store, the_pool, run_id, router_k, embedding, anchor, problems)
        console.print(f"calibration run [bold]{run_id}[/bold]: {len(problems)} {fmt_name} dev problems, "
                      f"every branch on every question", highlight=False)
        dev = _run(problems, fmt_name, data, limit, config=config, pool=the_pool, router=the_router, store=store,
                   run_id=run_id, label="COMED dev")
        exit_if_failed(dev, len(problems), run_id, unit="dev questions")  # no thresholds from a partial dev run
        outcomes = dev_outcomes(store, run_id)
        best = calibrate(outcomes, lam, max_calls)
        write_thresholds(out, best, n_anchor=samples, lam=lam, max_calls=max_calls,
                         source=f"{data} ({len(outcomes)} questions, run {run_id}, anchor "
                                f"{'routed by kNN' if the_router else 'fixed'}; run with the same anchor mode)")
        policies = [("chosen", best), ("defaults", score_policy(outcomes, EscalationThresholds(), lam))]
        if max_calls is not None:
            policies.append(("without the budget", calibrate(outcomes, lam)))
        for name, p in policies:
            t = p.thresholds
            console.print(f"{name}: τ_hi={t.tau_hi:.4g}, τ_lo={t.tau_lo:.4g}, m_min={t.m_min:.4g}: objective "
                          f"{p.objective:.4f} (rescues {p.rescues}, harms {p.harms}, extra calls {p.extra_calls}, "
                          f"{p.calls_per_question:.2f} model calls per question)", highlight=False)
        console.print(_grid(samples, best.thresholds, the_router is not None), highlight=False)
        console.print(f"thresholds written to {out}; use them with `agora run comed --thresholds {out}`", highlight=False)


# ---------------------------------------------------------------------------- report


def dev_outcomes(store: TraceStore, run_id: str) -> list[DevOutcome]:
    """Calibration inputs from an ``explore`` run: one :class:`DevOutcome` per question with a
    gold answer and every branch recorded (:func:`agora.traces.bench.comed_dev_outcomes`)."""
    return comed_dev_outcomes(store, run_id)


@dataclass(frozen=True, slots=True)
class ComedSummary:
    rows: list[MethodRow]
    calls_per_question: dict[str, float]
    """Mean model calls (requests) per question, per method."""
    tokens_per_question: dict[str, float]
    """Mean decoded tokens per question, per method."""
    decisions: dict[str, int]
    """Questions per decision of the decide step: ``accept``, ``verify``, ``escalate``."""
    outcomes: dict[str, int]
    """Questions per outcome: ``accept``, ``verify_accept``, ``verify_escalate``, ``escalate``."""
    rescue_harm: RescueHarm
    """Over questions with a gold answer; the identity is checked on each of them."""


def comed_summary(store: TraceStore, run_id: str) -> ComedSummary:
    """The COMED report of a run, from the trace store.

    Raises:
        ValueError: the rescue–harm identity fails on some question (see :func:`rescue_harm`).
    """
    details = {q["question_id"]: json.loads(q["detail"] or "{}") for q in store.questions(run_id)}
    calls: dict[str, list[int]] = {}
    by_q: dict[str, dict[str, Any]] = {}
    tokens: dict[str, list[int]] = {}
    for r in store.results(run_id):
        by_q.setdefault(r["question_id"], {})[r["method"]] = r
        tokens.setdefault(r["method"], []).append(r["completion_tokens"] or 0)
        n = r.get("calls")  # results.calls; databases from before it keep the count in the detail JSON
        if n is None:
            n = (details.get(r["question_id"], {}).get("method_calls") or {}).get(r["method"])
        calls.setdefault(r["method"], []).append(n or 0)
    scored = [q for q, ms in by_q.items() if ms.get("comed", {}).get("correct") is not None]
    rh = rescue_harm([bool(by_q[q]["anchor"]["correct"]) for q in scored],
                     [bool(by_q[q]["comed"]["correct"]) for q in scored],
                     [bool(details[q].get("escalated")) for q in scored])
    return ComedSummary(
        rows=method_table(store, run_id, order=METHODS),
        calls_per_question={m: sum(v) / len(v) for m, v in calls.items()},
        tokens_per_question={m: sum(v) / len(v) for m, v in tokens.items()},
        decisions=dict(Counter(d.get("decision") for d in details.values())),
        outcomes=dict(Counter(d.get("outcome") for d in details.values())), rescue_harm=rh)


def print_comed_report(s: ComedSummary, store: TraceStore, run_id: str) -> None:
    table = Table(title=f"COMED run {run_id}")
    for col in ("method", "questions", "failed", "accuracy %", "95% CI", "calls/q", "samples/q", "decoded tok/q"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=col == "method")
    for r in s.rows:
        table.add_row(r.method, str(r.questions), str(r.failed), fmt_pct(r.accuracy), fmt_ci(r.ci_low, r.ci_high),
                      f"{s.calls_per_question[r.method]:.2f}", f"{r.samples_per_question:.2f}",
                      f"{s.tokens_per_question[r.method]:.1f}")
    console.print(table)
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
    console.print(f"traces: {store.path}", highlight=False)
