"""``agora bench``: every protocol on every task file, one report (markdown, JSON, PNG) with
paired statistics, cost and COMED's calibration stated. Runs: :mod:`agora.runs.bench`;
report: :mod:`agora.runs.report` (its data: :mod:`agora.traces.bench`)."""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TimeElapsedColumn,
)

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.escalation_calibration import load_thresholds
from agora.models.pool import ModelPool
from agora.agents.router import KNNRouter, history_from_store
from agora.cli import _run
from agora.cli._shared import (
    MAX_TEMPERATURE,
    Table,
    console,
    err_console,
    FieldColumn,
    check_out_path,
    from_options,
    get_pool,
    graceful_stop,
    new_run_id,
    user_errors,
)
from agora.cli._apps import app
from agora.runs.bench import BenchProgress, CalibrationError, run_bench
from agora.runs.bench_plan import (
    questions_in_flight,
    DEFAULT_SOURCE,
    BenchConfig,
    Step,
    check_matched_single,
    plan,
    remaining,
    resolve_methods,
    time_left_s,
)
from agora.runs.bench_tasks import DevSplit, TaskFile, disjoint, load_tasks
from agora.graphs.runner import QuestionOutcome
from agora.tasks.loaders import detect_format, load_problems
from agora.runs.report import write_report
from agora.runs.report_format import (any_too_few, claim_lines, fmt_accuracy, fmt_thresholds, fmt_tokens,
                                      principal_line, single_model_rows)
from agora.traces.bench_spec import read_bench_spec
from agora.traces.pg_sql import db_argument
from agora.traces.report import MIN_QUESTIONS, TOO_FEW
from agora.traces.store import TraceStore, check_run_id
from agora.models.contract import MAX_TOKENS_LIMIT


class _Bar(BenchProgress):
    """One rich progress bar over every question still to run, with the current task and protocol."""

    def __init__(self, progress: Progress, total: int, store: TraceStore | None = None, steps: Sequence[Step] = (),
                 in_flight: int = 1):
        self.progress = progress
        self.store, self.steps, self.in_flight = store, list(steps), in_flight
        self.task = progress.add_task("bench", total=total, label="bench", status="", eta=self.eta())

    def step(self, step: Step, todo: int) -> None:
        what = "COMED dev (calibration)" if step.kind == "calibrate" else step.kind.upper()
        scope = "all tasks" if step.task == "*" else step.task
        self.progress.update(self.task, label=f"{scope} · {what}", status=f"{todo} to run" if todo else "done before")
        if not self.progress.console.is_terminal:  # a log file gets a line per run instead of a live bar
            t = self.progress.tasks[0]
            part = f" round {step.round[0]}/{step.round[1]}" if step.round else ""
            if not todo:  # done in an earlier sitting: no counts or time left to give
                self.progress.console.print(f"{escape(step.run_id)}{part}: done before", highlight=False)
                return
            # from each run's own recorded question times (runs differ 10× in cost per question);
            # a run kind with no finished question yet: unknown, never another kind's rate
            left = time_left_s(self.store, self.steps, self.in_flight) if self.store is not None and self.steps else None
            eta = ", time left unknown" if left is None else f", about {left / 60:.0f} min left overall"
            self.progress.console.print(f"{escape(step.run_id)}{part}: {todo} of {len(step.problems)} questions to run "
                                        f"({int(t.completed)} of the {int(t.total or 0)} bench questions left at the start "
                                        f"done since{eta})",
                                        highlight=False)

    def question(self, step: Step, outcome: QuestionOutcome) -> None:
        self.progress.advance(self.task)
        self.progress.update(self.task, eta=self.eta())

    def eta(self) -> str:
        """The bar's time left, from each run kind's own finished questions (:func:`time_left_s`);
        ``unknown`` while a run left to do has no measured kind to go by."""
        left = time_left_s(self.store, self.steps, self.in_flight) if self.store is not None and self.steps else None
        if left is None:
            return "unknown"
        left = int(round(left))
        return f"{left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"

    def event(self, step: Step, event: dict[str, Any]) -> None:
        self.progress.update(self.task, status=escape(str(event.get("message", "")))[:60])

    def note(self, text: str) -> None:
        self.progress.console.print(escape(text), highlight=False, soft_wrap=True)


def default_out(bench_id: str) -> Path:
    """The default report folder ``bench-<id>``, one folder in the current one: path separators and
    ``..`` in the id are replaced by ``_`` (``--run-id ../../x`` → ``bench-______x``). An explicit
    ``--out`` is taken as given."""
    return Path("bench-" + re.sub(r"[/\\]", "_", bench_id).replace("..", "__"))


def check_out_writable(out: Path) -> None:
    """Refuse a report folder ``out`` that cannot be written (it, or the nearest folder above it that
    exists, is read-only or not ours), before any run starts: the report is written after the last one.

    Raises:
        InputError: naming ``--out`` and the folder.
    """
    folder = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: cannot write in the folder {folder} (not writable); give --out a folder you "
                         "can write")


def _write_report(store: TraceStore, spec: Any, out: Path, **kwargs: Any) -> tuple[dict[str, Any], Any]:
    """:func:`write_report`, whose failure to write a file (a full disk, a folder made read-only
    meanwhile) is one line that says the runs are saved and how to write the report elsewhere."""
    try:
        return write_report(store, spec, out, **kwargs)
    except OSError as exc:
        where = exc.filename or out
        raise InputError(f"--out {out}: cannot write {where} ({exc.strerror or exc}); the runs are saved: write the "
                         f"report with --report-only --run-id {shlex.quote(spec.bench_id)} --out <another folder>"
                         ) from None


def _dev_splits(calibrate_on: str | None, dev: int, tasks: list[TaskFile]) -> list[DevSplit]:
    """The dev splits of ``--calibrate-on`` / ``--dev``, with every test question dropped from them."""
    tests = [p for t in tasks for p in t.problems]
    splits: list[tuple[str, str, list]] = []
    if calibrate_on:
        files = [Path(f.strip()) for f in calibrate_on.split(",") if f.strip()]
        if len(files) not in (1, len(tasks)):
            raise InputError(f"--calibrate-on: {len(files)} files for {len(tasks)} tasks; give one file (thresholds "
                             "for every task) or one per task, in the order of --tasks")
        for i, f in enumerate(files):
            problems = load_problems(f, detect_format(f), dev or None)
            scope = "*" if len(files) == 1 else tasks[i].name
            what = f"{f}" + (f" (its first {dev} questions)" if dev else "")
            splits.append((scope, what, problems))
    elif dev:
        for t in tasks:
            splits.append((t.name, f"{t.path}: its last {len(t.dev)} questions (never test questions)", list(t.dev)))
    out = []
    for scope, what, problems in splits:
        kept, dropped = disjoint(problems, tests)
        if not kept:
            raise InputError(f"--calibrate-on: {what} has no question that is not a test question")
        note = f"; {dropped} of its questions are test questions and were dropped" if dropped else ""
        out.append(DevSplit(scope, what + note, tuple(kept)))
    return out


def _router(store: TraceStore, pool: ModelPool, bench_id: str, questions: set[str], k: int,
            embedding: str) -> KNNRouter | None:
    """A kNN router over the DB's runs outside this bench, never on its test or dev questions."""
    own = store.run_ids(prefix=f"{bench_id}:")
    try:
        router = KNNRouter(history_from_store(store, exclude_runs=own, exclude_questions=questions), pool.names,
                           k=k, embedding=embedding)
    except ValueError as exc:
        console.print(f"{escape(str(exc))}: no router, fixed anchor {escape(pool.names[0])}", highlight=False,
                      soft_wrap=True)
        return None
    console.print(f"router: kNN (k={k}, {escape(router.embedder.name)}) over past traces in {escape(shown_url(str(store.path)))} "
                  "outside this bench",
                  highlight=False, soft_wrap=True)
    return router


@app.command("bench", short_help="Every protocol on every task file: one table with paired statistics, cost, "
                                 "COMED's calibration and a plot.")
def bench(
    tasks: str = typer.Option("sample", "--tasks", help="Comma-separated task files (any loader format, detected), "
                              "each optionally name=path; 'sample' = the 5 GSM8K problems shipped with Agora."),
    protocols: str = typer.Option("all", "--protocols", help="Comma-separated: all, align (with single_agent, "
                                  "self_consistency, best_of_n), comed (with anchor, router_only), moa, debate, or "
                                  "any method name."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, "
                                        "tiny; see `agora pool list`). Default: the embedded Qwen pool."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Test questions per task: the first N of each file."),
    seed: int = typer.Option(0, "--seed", min=0, help="Sampling seeds of every protocol, and the bootstrap's."),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file, or a postgresql:// URL (several workers may share a run there)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Bench id; rerun the same id to resume (runs "
                                         "<id>:<task>:<protocol>)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report folder (default: bench-<run-id>)."),
    agents: int = typer.Option(2, "--agents", "-n", min=1, help="ALIGN agents n."),
    samples: int = typer.Option(3, "--samples", "-k", min=1, help="ALIGN candidates per agent k."),
    tau: float = typer.Option(0.5, "--tau", min=0.0, max=1.0, help="ALIGN's committed threshold on U."),
    principal: Optional[str] = typer.Option(None, "--principal",
                                            help="ALIGN's model principal: a pool member (e.g. a trained aggregator) "
                                                 "that reads each question and the agents' proposals and answers for "
                                                 "ALIGN, in place of the utility rule (as in `agora run align`)."),
    anchor_samples: Optional[int] = typer.Option(None, "--anchor-samples", "-N", min=1,
                                                 help="COMED anchor samples N (default 3, or the thresholds file's)."),
    thresholds: Optional[Path] = typer.Option(None, "--thresholds", help="COMED thresholds file from `agora "
                                              "calibrate comed` (calibrated outside this bench)."),
    tau_hi: Optional[float] = typer.Option(None, "--tau-hi", help="COMED: accept when SC >= tau_hi (default 0.67)."),
    tau_lo: Optional[float] = typer.Option(None, "--tau-lo", help="COMED: escalate when SC < tau_lo (default 0.34)."),
    m_min: Optional[float] = typer.Option(None, "--m-min", help="COMED: least router margin for a direct accept."),
    calibrate_on: Optional[str] = typer.Option(None, "--calibrate-on", help="Dev file(s) to calibrate COMED on "
                                               "first: one for every task, or one per task; test questions are "
                                               "dropped from them."),
    dev: int = typer.Option(0, "--dev", min=0, help="With --calibrate-on: use its first N questions; without it: "
                            "calibrate each task on its file's last N questions (never test questions)."),
    lam: float = typer.Option(0.01, "--lambda", help="Calibration cost weight λ (accuracy one extra call per "
                              "question must buy)."),
    max_calls: Optional[float] = typer.Option(None, "--max-calls", help="Calibration budget: COMED's mean model "
                                              "calls per dev question, anchor included."),
    anchor: Optional[str] = typer.Option(None, "--anchor", help="COMED's fixed anchor (default: the first pool model)."),
    router: bool = typer.Option(False, "--router/--no-router", help="Route COMED's anchor with kNN over runs in "
                                "--db outside this bench (off: fixed anchor)."),
    router_k: int = typer.Option(5, "--router-k", min=1),
    embedding: str = typer.Option("auto", "--embedding", help="Router embedding: auto, minilm or tfidf."),
    debate_agents: int = typer.Option(3, "--debate-agents", min=1),
    debate_rounds: int = typer.Option(2, "--debate-rounds", min=1, help="Debate rounds including the first."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max generated tokens per sample, every method."),
    probe_max_tokens: int = typer.Option(64, "--probe-max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                         help="Max tokens of COMED's probe answer."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, max=MAX_TEMPERATURE),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help=_run.CONCURRENCY_HELP),
    durability: Literal["async", "sync", "exit"] = typer.Option("async", "--durability",
                                                                help="When questions are checkpointed (see run align)."),
    round_size: int = typer.Option(10, "--round-size", min=0, help="Test questions per task and run in one round: "
                                   "every task's runs go in rounds, so an interrupted bench has every cell on fewer "
                                   "questions (0: each run in one go)."),
    report_only: bool = typer.Option(False, "--report-only", help="Run nothing: write the report of --run-id "
                                     "from --db (e.g. of an interrupted bench)."),
    shared_candidates: bool = typer.Option(True, "--shared-candidates/--no-shared-candidates",
                                           help="One candidate pool per question: k samples from every pool model, "
                                           "drawn once and shared by every protocol's first step; with --dev/"
                                           "--calibrate-on the best single model and COMED's anchor are chosen on dev "
                                           "and comed_routed is added (docs/bench.md)."),
    matched_single: bool = typer.Option(False, "--matched-single/--no-matched-single",
                                        help="Give the dev-chosen best member as many of its own samples per question "
                                        "as the multi-member methods used (run <id>:<task>:matched-single), and claim "
                                        "the best multi-member method against its vote at matched samples, per task "
                                        "and macro (needs shared candidates and --dev/--calibrate-on)."),
) -> None:
    """Run ALIGN (with single-agent, self-consistency and best-of-n·k on its candidates) and COMED
    (with anchor, router-only, MoA and debate) on every task file, then write the report: accuracy
    per method × task with 95% CIs and the macro-average, paired differences against single-agent
    and self-consistency with McNemar p-values, cost per question, COMED's shares, rescues and harms
    and thresholds, and accuracy against generated tokens as a PNG."""
    with user_errors("questions"):
        check_out_path(out)  # an existing file as --out: refused now, not after every run finished
        if out is not None:
            check_out_writable(out)
        if report_only:
            if run_id is None:
                raise InputError("--report-only needs the --run-id of a bench")
            store = TraceStore(db, readonly=True)
            spec = read_bench_spec(store, run_id)
            if spec is None:
                started = sorted(store.run_ids(f"{run_id}:"))
                if started:  # the spec is recorded once the dev runs have chosen the test runs' settings
                    raise InputError(f"{shown_url(db)}: bench {run_id!r} has no report yet: it is in its dev phase "
                                     f"({len(started)} runs so far: {', '.join(started)}); its spec and report start "
                                     f"when the dev runs finish (progress: agora report runs --db {' '.join(filter(None, db_argument(db)))})")
                raise InputError(f"{shown_url(db)}: no bench {run_id!r}")
            report, files = _write_report(store, spec, out or default_out(run_id), seed=seed, record=False)
            _print_summary(report, files)
            return
        for flag, value in (("--lambda", lam), ("--max-calls", max_calls)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(f"{flag} must be a finite number >= 0, got {value}")
        methods = resolve_methods(protocols)
        task_files = load_tasks(tasks, limit, 0 if calibrate_on else dev)
        if thresholds is not None and (calibrate_on or dev):
            raise InputError("--thresholds and --calibrate-on/--dev both choose COMED's thresholds; give one")
        file = load_thresholds(thresholds) if thresholds else None
        given = {k: v for k, v in {"tau_hi": tau_hi, "tau_lo": tau_lo, "m_min": m_min}.items() if v is not None}
        if file is not None and file.n_anchor is not None and anchor_samples not in (None, file.n_anchor):
            raise InputError(f"--anchor-samples {anchor_samples}: the thresholds in {thresholds} were calibrated with "
                             f"n_anchor = {file.n_anchor}; drop --anchor-samples or recalibrate")
        n_anchor = anchor_samples or (file.n_anchor if file and file.n_anchor else 3)
        base = file.thresholds if file else EscalationThresholds()
        source = DEFAULT_SOURCE
        if file is not None:
            header = thresholds.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
            source = f"from {thresholds}, calibrated outside this bench ({header})"
        if given:
            source = (source if file else "fixed thresholds given on the command line, not calibrated on a dev split") \
                + f"; {', '.join(given)} set on the command line"
        if embedding not in ("auto", "minilm", "tfidf"):
            raise InputError(f"--embedding must be auto, minilm or tfidf, got {embedding!r}")
        from_options(DelegationConfig, n_agents="agents", k_samples="samples", tau="tau", max_tokens="max_tokens",
                     temperature="temperature", seed="seed", principal="principal")
        from_options(EscalationConfig, thresholds=("thresholds", "tau_hi", "tau_lo", "m_min"),
                     n_anchor=("anchor_samples", "thresholds"), anchor="anchor", debate_agents="debate_agents",
                     debate_rounds="debate_rounds", max_tokens="max_tokens", probe_max_tokens="probe_max_tokens",
                     temperature="temperature", seed="seed")
        from_options(EscalationThresholds, tau_hi=("tau_hi", "thresholds"), tau_lo=("tau_lo", "thresholds"),
                     m_min=("m_min", "thresholds"))
        from_options(BenchConfig, methods="protocols", lam="lam", max_calls="max_calls", concurrency="concurrency", durability="durability",
                     round_size="round_size", shared="shared_candidates", router_k="router_k", embedding="embedding",
                     matched_single="matched_single")
        config = BenchConfig(
            align=DelegationConfig(n_agents=agents, k_samples=samples, tau=tau, max_tokens=max_tokens,
                                   temperature=temperature, seed=seed, principal=principal),
            comed=EscalationConfig(thresholds=EscalationThresholds(**{**asdict(base), **given}), n_anchor=n_anchor,
                                   anchor=anchor, debate_agents=debate_agents, debate_rounds=debate_rounds,
                                   max_tokens=max_tokens, probe_max_tokens=probe_max_tokens, temperature=temperature,
                                   seed=seed),
            methods=methods, thresholds_source=source, lam=lam, max_calls=max_calls, concurrency=concurrency,
            durability=durability, round_size=round_size or None, shared=shared_candidates, router_k=router_k,
            embedding=embedding, matched_single=matched_single)
        dev_splits = (_dev_splits(calibrate_on, dev, task_files)
                      if "comed" in config.protocols or shared_candidates else [])
        check_matched_single(config, bool(dev_splits))  # before any DB is opened
        if principal is not None and "align" not in config.methods:
            raise InputError(f"--principal {principal}: the model principal answers for the align method, which "
                             f"--protocols did not choose ({', '.join(config.methods)})")
        the_pool = get_pool(pool)
        _run.check_principal(principal, the_pool)
        bench_id = new_run_id("bench") if run_id is None else check_run_id(run_id)
        out_dir = out or default_out(bench_id)
        check_out_path(out_dir)
        check_out_writable(out_dir)
        store = TraceStore(db)
        the_router = None
        if router and "comed" in config.protocols and anchor is None:
            questions = {p.question for t in task_files for p in t.problems} | {p.question for d in dev_splits
                                                                                for p in d.problems}
            the_router = _router(store, the_pool, bench_id, questions, router_k, embedding)
        steps = plan(bench_id, task_files, config, dev_splits)
        todo = remaining(store, steps)
        total_q = sum(len(s.problems) for s in steps)
        # questions in flight per run, for the time left: the concurrency (default: the pool's), capped by a round
        in_flight = min(questions_in_flight(config, the_pool), config.round_size or total_q or 1)
        console.print(f"bench [bold]{escape(bench_id)}[/bold]: {len(task_files)} tasks "
                      f"({escape(', '.join(f'{t.name} {len(t.problems)}' for t in task_files))}), runs "
                      f"{', '.join(dict.fromkeys(s.kind for s in steps))}, pool {escape(', '.join(the_pool.names))}; "
                      f"{sum(todo.values())} of {total_q} questions to run", highlight=False)
        progress = Progress(FieldColumn("{task.fields[label]}", style="bold"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), FieldColumn("eta {task.fields[eta]}"),
                            FieldColumn("{task.fields[status]}", style="dim"), console=console,
                            speed_estimate_period=600, disable=not sys.stdout.isatty() and total_q == 0)
        try:
            # (shared: on Postgres several bench workers run one bench together; SQLite: one process)
            with progress, graceful_stop(bench_id) as control, store.run_lock(bench_id, shared=True):
                result = run_bench(task_files, pool=the_pool, store=store, bench_id=bench_id, config=config,
                                   dev=dev_splits, router=the_router, control=control, steps=steps,
                                   progress=_Bar(progress, sum(todo.values()), store, steps, in_flight=in_flight))
        except CalibrationError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        report, files = _write_report(store, result.spec, out_dir, seed=seed)
        _print_summary(report, files)
        failed = result.failed
        if failed:
            shown = "; ".join(f"{r} {q.problem.id}: {q.error}"[:300] for r, q in failed[:5])
            err_console.print(f"[red]error:[/red] {len(failed)} test questions failed: no model call answered, so they "
                              f"are not scored ({escape(shown)}{'; ...' if len(failed) > 5 else ''}); rerun with "
                              f"--run-id {escape(bench_id)} to retry them", highlight=False, soft_wrap=True)
            raise typer.Exit(1)


def _print_summary(report: dict[str, Any], files: Any) -> None:
    tasks = [t["name"] for t in report["tasks"]]
    cells = {(c["task"], c["method"]): c for c in report["cells"]}
    macro = {m["method"]: m for m in report["macro"]}
    table = Table(title=f"bench {escape(report['bench_id'])}: accuracy % [95% CI]" + ("" if report["complete"] else " (incomplete)"))
    for col in ["method", *tasks, "macro", "tokens/q"]:
        table.add_column(escape(col), justify="left" if col == "method" else "right", no_wrap=col == "method")
    for m in report["methods"]:
        if m not in macro:
            continue
        # the figures as bench.md prints them (runs/report.py's fmt_*), to the same decimals
        row = [fmt_accuracy(cells[t, m]) if (t, m) in cells else "-" for t in tasks]
        table.add_row(escape(m), *row, fmt_accuracy(macro[m]), fmt_tokens(macro[m]["tokens_per_q"]))
    for s, row in single_model_rows(report, tasks):  # bench.md's one-sample rows: the models the claims name
        table.add_row(f"model {escape(s['model'])} (one sample)", *row, fmt_accuracy(s), "")
    console.print(table)
    if any_too_few(report):
        console.print(f"† {TOO_FEW}: fewer than {MIN_QUESTIONS} scored questions or a degenerate interval; no finding",
                      highlight=False)
    if principal_line(report):
        console.print(escape(principal_line(report)), highlight=False, soft_wrap=True)
    for c in report["calibration"]:
        t = c["thresholds"]
        scope = "all tasks" if c["scope"] == "*" else c["scope"]
        console.print(f"COMED thresholds ({escape(scope)}): {fmt_thresholds(t)} (N = {c['n_anchor']}): "
                      f"{escape(str(c['source']))}",
                      highlight=False, soft_wrap=True)
    for line in claim_lines(report):  # "too few questions" under 30 paired questions, never yes/no
        console.print(f"claim: {escape(line)}", highlight=False, soft_wrap=True)
    failed = sum(len(ids) for per in report["failed_questions"].values() for ids in per.values())
    if failed:
        console.print(f"failed questions: {failed} (not scored; see the report)", highlight=False)
    console.print(f"report: {escape(f'{files.markdown}, {files.json}, {files.png}')}", highlight=False)
