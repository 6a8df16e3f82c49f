"""The driver of ``agora bench``: every protocol on every task file, as ordinary resumable runs.

Per task file the bench runs ALIGN (its graph computes ``align``, ``single_agent``,
``self_consistency`` and ``best_of_n`` from the same n·k candidates) and COMED (``comed``,
``anchor``, ``router_only`` with a router, and the dense baselines ``moa`` and ``debate`` on the
same questions and pool), each through :func:`agora.graphs.runner.run_problems` with the run id
``<bench>:<task>:<protocol>``. Rerunning a bench id therefore skips every recorded question and
resumes an interrupted one from its last finished step, like any run.

COMED's thresholds are calibrated honestly when a dev split is given (:class:`DevSplit`): the
explore run ``<bench>:<scope>:comed-dev`` answers dev questions disjoint from every test question
it applies to (test questions are dropped from it, and counted), then
:func:`agora.agents.escalation_calibration.calibrate` picks the thresholds the test run uses. The thresholds
and their source go into the report (:mod:`agora.traces.bench`); without a dev split the report says
the fixed thresholds were used.

Layers: a driver (:mod:`agora.runs`): this module runs the ``graphs`` and uses ``agents``, ``tasks`` and
``traces``; the report's data is read by :mod:`agora.traces.bench`, its claims and files are written by
:mod:`agora.runs.report`, and the command line is :mod:`agora.cli.bench`.
"""

from __future__ import annotations

import json

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from langgraph.graph import END, START
from langgraph.runtime import RunControl

from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, check_pool, comed_detail
from agora.agents.escalation_calibration import calibrate
from agora.models.pool import ModelPool
from agora.agents.router import KNNRouter
from agora.graphs.delegation import METHODS as ALIGN_METHODS, DelegationContext, build_delegation_graph
from agora.graphs import registry
from agora.graphs.escalation import (
    OWN_METHODS as COMED_OWN_METHODS,
    EscalationContext,
    EscalationInput,
    EscalationOutput,
    EscalationState,
    DECLARED_BASELINES,
    route,
    build_escalation_graph,
)
from agora.graphs.dense_baselines import baseline_node, dense_baselines, next_baseline
from agora.graphs.candidates import CandidatesContext, build_candidates_graph
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.runner import QuestionOutcome, RunOutcome, run_dataset, run_problems
from agora.runs.shared import SHARED_KEY, best_on_dev, candidates_config, check_edition, dev_router, shared_inputs
from agora.tasks.loaders import Problem, detect_format, load_problems
from agora.tasks.samples import sample_path
from agora.traces.bench import BenchSpec, BenchTask, comed_dev_outcomes, record_bench
from agora.traces.store import ResumeRefusedError, TraceStore, _differences, _json, _models

_OWN_SHARING = {
    "align": "ALIGN's n·k candidates (the principal's pick among all of them)",
    "single_agent": "ALIGN's n·k candidates (agent 0's first sample only)",
    "self_consistency": "ALIGN's n·k candidates (majority over all of them)",
    "best_of_n": "ALIGN's n·k candidates (argmax of the principal's utility U over all of them)",
    "comed": "COMED's anchor samples (N), plus the probe's answer and the peers' answers when it verifies or escalates",
    "anchor": "COMED's anchor samples (N; their plurality)",
    "router_only": "COMED's anchor samples (the first one)",
}


def protocol_of() -> dict[str, str]:
    """Every method a bench reports, in report order, with the protocol whose run computes it: ALIGN's,
    COMED's own, then every registered protocol with a bench role
    (:func:`agora.graphs.registry.bench_specs`: MoA, debate, the council...), which runs inside COMED's
    run as one of its dense baselines. Read from the registry on every call, so a protocol registered
    after this module loaded is in it."""
    return {**{m: "align" for m in ALIGN_METHODS}, **{m: "comed" for m in COMED_OWN_METHODS},
            **{m: "comed" for spec in registry.bench_specs() for m in spec.bench.methods}}


def groups() -> dict[str, tuple[str, ...]]:
    """What ``--protocols`` accepts besides method names: a protocol, standing for its methods."""
    return {"align": ALIGN_METHODS, "comed": COMED_OWN_METHODS,
            **{spec.name: spec.bench.methods for spec in registry.bench_specs()}}


def sharing() -> dict[str, str]:
    """The samples each method draws on (methods naming the same samples share them); a registered
    protocol's come from its spec's :class:`~agora.graphs.spec.BenchRole`."""
    return {**_OWN_SHARING, **{m: text for spec in registry.bench_specs() for m, text in spec.bench.sharing.items()
                              if m in spec.bench.methods}}


def dense_baseline_of() -> dict[str, str]:
    """Method → the COMED dense baseline (protocol name) whose run computes it."""
    return {m: spec.name for spec in registry.bench_specs() for m in spec.bench.methods}


#: The registry's lists when this module loaded (the functions above read it again).
PROTOCOL_OF: dict[str, str] = protocol_of()
METHODS = tuple(PROTOCOL_OF)
GROUPS: dict[str, tuple[str, ...]] = groups()
SHARING = sharing()
DEFAULT_SOURCE = "fixed default thresholds, not calibrated on a dev split (give --calibrate-on FILE or --dev N)"


def resolve_methods(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The methods named by ``--protocols`` (comma-separated), in report order: ``all`` (or
    nothing) for every method; ``align`` for ALIGN with its three baselines; ``comed`` for COMED
    with its anchor and router-only baselines; any method name for itself (``moa``, ``debate``,
    ``self_consistency``...).

    Raises:
        ValueError: an unknown name (the message lists the choices).
    """
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec or ()) if s.strip()]
    every, named = tuple(protocol_of()), groups()
    if not names or names == ["all"]:
        return every
    chosen: set[str] = set()
    for n in names:
        if n in named:
            chosen.update(named[n])
        elif n in every:
            chosen.add(n)
        else:
            raise ValueError(f"--protocols: unknown {n!r}; choose from all, {', '.join(named)} or a method "
                             f"({', '.join(every)})")
    return tuple(m for m in every if m in chosen)


@dataclass(frozen=True, slots=True)
class TaskFile:
    """One task of a bench: its test questions and, for ``--dev N``, the dev questions after them."""

    name: str
    path: Path
    format: str
    problems: tuple[Problem, ...]
    dev: tuple[Problem, ...] = ()


_GENERIC = {"test", "dev", "train", "val", "valid", "validation", "data", "sample"}


def _task_name(path: Path, taken: set[str]) -> str:
    """The file's stem (``arc_challenge_test``), prefixed with its folder when the stem says
    nothing (``gsm8k/test.jsonl`` → ``gsm8k-test``) or is taken; run ids use it."""
    name = path.stem
    if name in _GENERIC or name in taken:
        name = f"{path.parent.name}-{name}" if path.parent.name else name
    base, i = name, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def load_tasks(spec: str, limit: int | None = None, dev: int = 0) -> list[TaskFile]:
    """The task files of ``--tasks``: comma-separated paths, each optionally ``name=path``, in any
    loader format (detected from the file); ``sample`` is the GSM8K sample shipped with Agora. The
    test questions are the first ``limit`` of each file (all without it); with ``dev``, the file's
    last ``dev`` questions form that task's dev split (and are never test questions). Taking them
    from the end keeps the dev split the same when a later rerun raises ``limit``.

    Raises:
        ValueError: no task, a duplicate name, a name that cannot be a run id part, a file without
            gold answers (``prompts``), or a file with fewer than ``limit + dev`` problems.
        TaskFormatError: a file that cannot be read (file:line: field).
    """
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise ValueError("--tasks: no task file given")
    tasks: list[TaskFile] = []
    taken: set[str] = set()
    for item in items:
        name, sep, rest = item.partition("=")
        given = rest if sep else item
        if given == "sample":
            path, fmt = sample_path("gsm8k")
            name = name if sep else "gsm8k-sample"
        else:
            path = Path(given)
            fmt = detect_format(path)
            name = name.strip() if sep else _task_name(path, taken)
        if not name or ":" in name or name in taken or name in ("all", "macro"):
            raise ValueError(f"--tasks: task name {name!r} is empty, has ':', is reserved or is used twice; "
                             "name it with name=path")
        if fmt == "prompts":
            raise ValueError(f"{path}: no gold answers (format prompts); a bench needs gold answers to score")
        problems = load_problems(path, fmt, None if dev else limit)
        if len(problems) < (limit or 1) + dev:
            raise ValueError(f"{path}: {len(problems)} problems, fewer than --limit {limit or 1} + --dev {dev}"
                             if dev else f"{path}: no problems")
        held_out = problems[len(problems) - dev:] if dev else []
        test = problems[: len(problems) - dev][:limit]
        taken.add(name)
        tasks.append(TaskFile(name, path, fmt, tuple(test), tuple(held_out)))
    return tasks


@dataclass(frozen=True, slots=True)
class DevSplit:
    """Dev questions for COMED's calibration, for one task (``scope`` its name) or all (``*``)."""

    scope: str
    source: str
    """Where the questions come from, in words (a file, or the rows after a task's test questions)."""
    problems: tuple[Problem, ...]


def disjoint(dev: Sequence[Problem], tests: Sequence[Problem]) -> tuple[list[Problem], int]:
    """``dev`` without any question that is also a test question (same text), and how many went."""
    seen = {p.question.strip() for p in tests}
    kept = [p for p in dev if p.question.strip() not in seen]
    return kept, len(dev) - len(kept)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """The protocols' settings for a bench (the CLI builds it from its options)."""

    align: DelegationConfig = field(default_factory=DelegationConfig)
    comed: EscalationConfig = field(default_factory=EscalationConfig)
    """COMED's settings; its thresholds are the fixed ones, used unless a dev split calibrates them."""
    methods: tuple[str, ...] = field(default_factory=lambda: tuple(protocol_of()))
    """The methods to report (default: every method of :func:`protocol_of`)."""
    thresholds_source: str = DEFAULT_SOURCE
    """Where ``comed.thresholds`` came from, for the report, when no dev split is given."""
    lam: float = 0.01
    """Calibration cost weight λ (:func:`agora.agents.escalation_calibration.calibration_objective`)."""
    max_calls: float | None = None
    """Calibration budget: COMED's mean model calls per dev question (anchor included)."""
    concurrency: int | None = 1
    """Questions in flight per run; ``None``: the pool's
    :meth:`~agora.models.pool.ModelPool.suggested_concurrency` (8 on the embedded llama.cpp pool)."""
    durability: Literal["async", "sync", "exit"] = "async"
    round_size: int | None = 10
    """Test questions per task and run in one round: the bench runs every task's ALIGN and COMED
    runs on their first ``round_size`` questions, then on the next ones, so an interrupted bench
    already has every cell of its table, on fewer questions. ``None``: each run in one go.
    Rounds change only the order: the questions, their runs and their results are the same."""
    shared: bool = False
    """One candidate pool per question (issue 32): draw k samples from every pool model once per
    question (run ``<bench>:<task>:candidates``) and give them to every protocol that starts from
    independent samples; with a dev split, also choose the best single model (``single_agent``, COMED's
    fixed anchor) on dev and add ``comed_routed`` (kNN router trained on the dev draw). ``False``:
    the first edition's bench (each protocol draws its own samples; ``single_agent`` is ALIGN's agent 0)."""
    router_k: int = 5
    """Neighbours of ``comed_routed``'s dev-trained kNN router."""
    embedding: str = "auto"
    """Embedding of ``comed_routed``'s router: ``auto``, ``minilm`` or ``tfidf``."""

    def __post_init__(self):
        every = protocol_of()
        unknown = [m for m in self.methods if m not in every]
        if unknown or not self.methods:
            raise ValueError(f"BenchConfig.methods: unknown {unknown} or none; choose from {', '.join(every)}")
        if self.concurrency is not None and (isinstance(self.concurrency, bool)
                                             or not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ValueError(f"BenchConfig.concurrency must be an integer >= 1 or None, got {self.concurrency!r}")
        if self.round_size is not None and (isinstance(self.round_size, bool) or not isinstance(self.round_size, int)
                                            or self.round_size < 1):
            raise ValueError(f"BenchConfig.round_size must be an integer >= 1 or None, got {self.round_size!r}")

    @property
    def protocols(self) -> tuple[str, ...]:
        """The runs a task needs: ``align`` and/or ``comed``."""
        every = protocol_of()
        return tuple(p for p in ("align", "comed") if any(every[m] == p for m in self.methods))

    @property
    def comed_own(self) -> bool:
        """Whether COMED's own methods are asked for (``comed``, ``anchor``, ``router_only``): without
        them COMED's run computes only the chosen dense baselines, and none of COMED's own steps
        (anchor, probe, peers) nor its dev calibration runs."""
        return any(m in COMED_OWN_METHODS for m in self.methods)

    @property
    def baselines(self) -> tuple[str, ...]:
        """The dense baselines COMED's run computes (only those asked for: they cost calls), in the
        registry's order (:func:`agora.graphs.registry.bench_specs`)."""
        of = dense_baseline_of()
        return tuple(dict.fromkeys(of[m] for m in protocol_of() if m in of and m in self.methods))


@dataclass(frozen=True, slots=True)
class Step:
    """One run of a bench: a dev calibration run, or a task's ALIGN or COMED run."""

    kind: Literal["calibrate", "align", "comed", "candidates", "candidates-dev", "comed-routed"]
    task: str
    """The task's name (``*``: a dev split for all tasks)."""
    run_id: str
    problems: tuple[Problem, ...]
    path: str | None
    format: str
    round: tuple[int, int] | None = None
    """(this round, rounds) while :func:`run_bench` runs the step in rounds
    (:attr:`BenchConfig.round_size`); the step's ``problems`` are still all its questions."""

    def round_ids(self, size: int | None) -> frozenset[str] | None:
        """The question ids of this step's current round (``None``: not in rounds)."""
        if self.round is None or size is None:
            return None
        r = self.round[0] - 1
        return frozenset(p.id for p in self.problems[r * size:(r + 1) * size])


def _dense_methods(state: dict[str, Any]) -> dict[str, Any]:
    """The dense baselines' methods, as each subgraph computed them (COMED's own are not run)."""
    return {"methods": dict(state.get("dense_methods") or {}), "answer": None}


def build_dense_graph() -> Any:
    """COMED's run without COMED's own steps (a bench whose ``--protocols`` names only dense
    baselines): ``route`` (no model call; it names the anchor the baselines take their context
    from), then each dense baseline the run's ``baselines`` asks for, as in
    :func:`agora.graphs.escalation.build_escalation_graph`, then their methods. Uncompiled."""
    builder = ProtocolGraph(EscalationState, context_schema=EscalationContext, input_schema=EscalationInput,
                            output_schema=EscalationOutput)
    builder.add_node("route", route)
    builder.add_node("score", _dense_methods)  # the name the baselines' routing ends at
    names = [spec.name for spec in dense_baselines()]
    for spec in dense_baselines():
        builder.add_node(spec.name, baseline_node(spec, EscalationContext, DECLARED_BASELINES))
    builder.add_edge(START, "route")
    builder.add_conditional_edges("route", next_baseline(names, None, EscalationContext), [*names, "score"])
    for i, name in enumerate(names):
        builder.add_conditional_edges(name, next_baseline(names, name, EscalationContext), [*names[i + 1:], "score"])
    builder.add_edge("score", END)
    return builder


def run_id_of(bench_id: str, task: str, protocol: str) -> str:
    """``<bench>:<task>:<protocol>`` (``all`` for a dev split that serves every task)."""
    return f"{bench_id}:{'all' if task == '*' else task}:{protocol}"


def plan(bench_id: str, tasks: Sequence[TaskFile], config: BenchConfig, dev: Sequence[DevSplit] = ()) -> list[Step]:
    """The runs of a bench in the order they run: the dev draws (shared candidates), the dev
    calibrations, then per task the shared draw, ALIGN, COMED and COMED with a routed anchor."""
    steps = []
    if config.shared:
        for d in dev:
            steps.append(Step("candidates-dev", d.scope, run_id_of(bench_id, d.scope, "candidates-dev"), d.problems,
                              d.source, "dev"))
    if config.comed_own:
        for d in dev:
            steps.append(Step("calibrate", d.scope, run_id_of(bench_id, d.scope, "comed-dev"), d.problems,
                              d.source, "dev"))
    for t in tasks:
        protocols = (("candidates",) if config.shared else ()) + config.protocols
        if config.shared and dev and config.comed_own:
            protocols += ("comed-routed",)
        for p in protocols:
            steps.append(Step(p, t.name, run_id_of(bench_id, t.name, p), t.problems, str(t.path), t.format))
    return steps


def remaining(store: TraceStore, steps: Sequence[Step]) -> dict[str, int]:
    """Questions each step still has to run (a rerun of a bench id skips recorded ones)."""
    out = {}
    for s in steps:
        done = store.finished_questions(s.run_id)
        out[s.run_id] = sum(p.id not in done for p in s.problems)
    return out


def questions_in_flight(config: BenchConfig, pool: Any) -> int:
    """Questions a run of the bench keeps in flight at once: ``config.concurrency``, else the pool's
    :meth:`~agora.models.pool.ModelPool.suggested_concurrency` (before any cap by a round's size)."""
    return config.concurrency if config.concurrency is not None else pool.suggested_concurrency()


def time_left_s(store: TraceStore, steps: Sequence[Step], in_flight: int = 1) -> float | None:
    """Seconds the questions not yet recorded should take: per run, its questions left × the mean
    wall time of its recorded questions (a run with none yet: the mean of the same kind of run on the
    other tasks), divided by ``in_flight``, the questions run at once (a question's wall time then
    overlaps the others'). ``None`` while some run left to do has no measured time to go by."""
    times = store.question_times([s.run_id for s in steps])
    by_kind: dict[str, list[float]] = {}
    for s in steps:
        if s.run_id in times:
            by_kind.setdefault(s.kind, []).append(times[s.run_id][1])
    total = 0.0
    for s, left in zip(steps, remaining(store, steps).values()):
        if not left:
            continue
        if s.run_id in times:
            per = times[s.run_id][1]
        elif by_kind.get(s.kind):
            per = sum(by_kind[s.kind]) / len(by_kind[s.kind])
        else:
            return None
        total += left * per
    return total / max(1, in_flight)


def resume_refusal(store: TraceStore, run_id: str, protocol: str, config: Any, pool: Any,
                   dataset: Any = None) -> str | None:
    """Why ``TraceStore.start_run`` would refuse to resume ``run_id`` with this protocol, settings,
    pool and ``dataset`` (as :func:`agora.graphs.runner.run_dataset` makes it; ``None``: not checked)
    (one line), or ``None`` (a new run, or the same). Checked for every run of a bench before the
    bench's spec is recorded, so a refused rerun changes nothing in the DB. Task files at another
    path holding the same questions (a bench moved to another machine) resume
    (:meth:`TraceStore.data_changes`); the runs keep the paths they started on, the bench's
    spec names the files of this call."""
    existing = store.get_run(run_id)
    if existing is None:
        return None
    if existing["protocol"] != protocol:
        return f"run id {run_id!r} already holds a {existing['protocol']} run in {store.path}; pick a new --run-id"
    try:
        changed, details = store.data_changes(run_id, store._run_json(existing, "dataset") or {},
                                              json.loads(_json(dataset)) or {}) if dataset is not None else ([], [])
    except ResumeRefusedError as exc:
        return f"{exc} (nothing was run or recorded)"
    if existing["config"] != _json(config):
        changed.append("settings")
        details += _differences(json.loads(_json(config)), store._run_json(existing, "config"))
    if _models(store._run_json(existing, "pool")) != _models(json.loads(_json(pool))):
        changed.append("pool")
    if not changed:
        return None
    said = f" ({'; '.join(details[:4])})" if details else ""
    return (f"run id {run_id!r} in {store.path} was started with other {', '.join(changed)}{said}; rerun with the same "
            "options to resume it, or pick a new --run-id (nothing was run or recorded)")


class BenchProgress:
    """What a bench reports as it goes (the CLI draws a progress bar from it); no-ops here."""

    def step(self, step: Step, todo: int) -> None:
        """A run starts: ``todo`` of its questions are not recorded yet."""

    def question(self, step: Step, outcome: QuestionOutcome) -> None:
        """A question finished (recorded, or failed)."""

    def event(self, step: Step, event: dict[str, Any]) -> None:
        """A graph's custom stream event (``event["message"]``)."""


class CalibrationError(RuntimeError):
    """A dev run some of whose questions failed: no thresholds from a partial dev split."""


@dataclass
class BenchResult:
    spec: BenchSpec
    runs: dict[str, RunOutcome] = field(default_factory=dict)
    """Run id → what that run did in this call."""

    @property
    def failed(self) -> list[tuple[str, QuestionOutcome]]:
        """Test questions that failed in this call (every model call failed), with their run id."""
        return [(r, q) for r, o in self.runs.items() if not r.endswith(("-dev")) for q in o.failed]


def run_bench(
    tasks: Sequence[TaskFile],
    *,
    pool: ModelPool,
    store: TraceStore,
    bench_id: str,
    config: BenchConfig,
    dev: Sequence[DevSplit] = (),
    router: KNNRouter | None = None,
    progress: BenchProgress | None = None,
    control: RunControl | None = None,
    steps: Sequence[Step] | None = None,
) -> BenchResult:
    """Run (or resume) every step of :func:`plan` and record the bench's spec in ``store``.

    ``router``: COMED's kNN router (the same for calibration and test runs), else a fixed anchor.
    ``steps``: the plan, when the caller already made it (to size a progress bar).

    Raises:
        ValueError: a pool COMED cannot run on, a dev split that is empty once test questions are
            dropped, or a run id that exists with other settings (see ``TraceStore.start_run``).
        CalibrationError: a dev question failed (rerun the bench id to retry it).
        KeyboardInterrupt, GraphDrained, ModelCallError: from the runner; finished questions are
            saved and a rerun with the same ``bench_id`` resumes.
    """
    progress = progress or BenchProgress()
    comed_cfg = replace(config.comed, baselines=config.baselines)
    if "comed" in config.protocols:
        check_pool(comed_cfg, pool.names)
    steps = list(steps) if steps is not None else plan(bench_id, tasks, config, dev)
    result = BenchResult(spec=None)  # type: ignore[arg-type]
    calibration: dict[str, dict[str, Any]] = {}
    # issue 32: one candidate pool per question, and the best single model chosen on dev
    check_edition(store, [s.run_id for s in steps if s.kind in ("align", "comed", "calibrate", "comed-routed")],
                  config.shared)
    shared_cfg = candidates_config(config.align if "align" in config.protocols else None,
                                   comed_cfg if "comed" in config.protocols else None, pool.names,
                                   config.baselines, anchor=config.comed_own) if config.shared else None
    best_model: dict[str, dict[str, Any]] = {}
    """Scope → the best single model on its dev draw: ``model``, ``means`` (every model's), ``run_id``."""
    routers: dict[str, KNNRouter] = {}

    def best_for(task: str) -> dict[str, Any] | None:
        return best_model.get(task) or best_model.get("*")

    def candidates_of(task: str, dev_run: bool = False) -> str:
        """The candidates run a step of ``task`` takes its shared samples from."""
        if not dev_run:
            return run_id_of(bench_id, task, "candidates")
        scope = task if any(s.kind == "candidates-dev" and s.task == task for s in steps) else "*"
        return run_id_of(bench_id, scope, "candidates-dev")

    def anchor_for(task: str) -> str | None:
        """COMED's fixed anchor: ``--anchor`` when given, else the dev-chosen best model (shared
        bench with a dev split), else the first pool model (:func:`agora.graphs.escalation.route`)."""
        if comed_cfg.anchor is not None or router is not None or not config.shared:
            return comed_cfg.anchor
        best = best_for(task)
        return best["model"] if best else None

    def go(step: Step, builder: Any, context: Any, run_config: dict[str, Any], protocol: str,
           detail: Callable | None = None, inputs: Callable | None = None) -> RunOutcome:
        done = store.finished_questions(step.run_id)
        only = step.round_ids(config.round_size)
        progress.step(step, sum(p.id not in done and (only is None or p.id in only) for p in step.problems))
        kwargs: dict[str, Any] = {"detail": detail} if detail is not None else {}
        if only is not None:
            kwargs["only"] = only
        if inputs is not None:
            kwargs["inputs"] = inputs
        outcome = run_problems(
            builder, list(step.problems), store=store, run_id=step.run_id, protocol=protocol, context=context,
            config=run_config, pool_description=pool.describe(),
            dataset=dataset_of(step),
            on_event=lambda e: progress.event(step, e), on_question=lambda q: progress.question(step, q),
            durability=config.durability, control=control, **kwargs,
            concurrency=questions_in_flight(config, pool))
        before = result.runs.get(step.run_id)
        if before is not None:  # an earlier round of the same run: one outcome per run
            outcome = RunOutcome(run_id=outcome.run_id, resumed=before.resumed, skipped=before.skipped,
                                 outcomes=before.outcomes + outcome.outcomes, failed=before.failed + outcome.failed)
        result.runs[step.run_id] = outcome
        return outcome

    def dataset_of(step: Step) -> dict[str, Any]:
        return {"path": step.path, "format": step.format, "limit": len(step.problems), "bench": bench_id}

    def comed_run_config(cfg: EscalationConfig, shared_from: str | None = None,
                         with_router: KNNRouter | None = None) -> dict[str, Any]:
        used = with_router or router
        out = {**asdict(cfg), "router": used.description if used else None}
        return {**out, SHARED_KEY: shared_from} if shared_from else out

    for step in steps:  # the shared draw on the dev questions, and the best single model there
        if step.kind != "candidates-dev":
            continue
        outcome = go(step, build_candidates_graph(), CandidatesContext(pool=pool, config=shared_cfg),
                     asdict(shared_cfg), "candidates")
        if outcome.failed:
            raise CalibrationError(
                f"{len(outcome.failed)} dev questions of {step.run_id} failed (no model call answered); no best model "
                f"from a partial dev split: rerun with --run-id {bench_id} to retry them")
        model, means = best_on_dev(store, step.run_id, pool.names)
        best_model[step.task] = {"scope": step.task, "model": model, "means": means, "run_id": step.run_id,
                                 "questions": len(step.problems), "source": step.path}

    for step in steps:
        if step.kind != "calibrate":
            continue
        dev_cfg = replace(comed_cfg, explore=True, baselines=(), anchor=anchor_for(step.task))
        dev_shared = candidates_of(step.task, dev_run=True) if config.shared else None
        outcome = go(step, build_escalation_graph(), EscalationContext(pool=pool, config=dev_cfg, router=router),
                     comed_run_config(dev_cfg, dev_shared), "comed", comed_detail,
                     inputs=shared_inputs(store, dev_shared) if dev_shared else None)
        if outcome.failed:
            raise CalibrationError(
                f"{len(outcome.failed)} dev questions of {step.run_id} failed (no model call answered); no thresholds "
                f"from a partial dev split: rerun with --run-id {bench_id} to retry them")
        outcomes = comed_dev_outcomes(store, step.run_id, [p.id for p in step.problems])
        best = calibrate(outcomes, config.lam, config.max_calls)
        calibration[step.task] = {
            "scope": step.task, "thresholds": asdict(best.thresholds), "n_anchor": comed_cfg.n_anchor,
            "run_id": step.run_id, "questions": len(outcomes), "objective": best.objective, "rescues": best.rescues,
            "harms": best.harms, "calls_per_question": best.calls_per_question, "lambda": config.lam,
            "max_calls": config.max_calls,
            "source": (f"calibrated on {step.path}; {len(outcomes)} dev questions, none of them a test question "
                       f"(run {step.run_id}; λ = {config.lam}, budget "
                       f"{'none' if config.max_calls is None else f'{config.max_calls} calls/question'}; dev "
                       f"objective {best.objective:.4f}: rescues {best.rescues}, harms {best.harms}, "
                       f"{best.calls_per_question:.2f} calls/question; anchor "
                       f"{'routed by kNN' if router else 'fixed'}"
                       + (f" {dev_cfg.anchor}, the best single model on dev" if config.shared and best_for(step.task)
                          and dev_cfg.anchor == best_for(step.task)["model"] else "") + ")"),
        }

    def thresholds_for(task: str) -> dict[str, Any]:
        return calibration.get(task) or calibration.get("*") or {
            "scope": task, "thresholds": asdict(comed_cfg.thresholds), "n_anchor": comed_cfg.n_anchor,
            "source": config.thresholds_source}

    runs: dict[str, dict[str, str]] = {t.name: {} for t in tasks}
    for step in steps:
        if step.kind in ("calibrate", "candidates-dev"):
            continue
        runs[step.task][step.kind] = step.run_id
    calib_rows: list[dict[str, Any]] = []
    if config.comed_own:
        calib_rows = list(calibration.values())
        if "*" not in calibration:
            uncalibrated = [t.name for t in tasks if t.name not in calibration]
            if uncalibrated:
                fixed = thresholds_for("*")
                calib_rows += ([{**fixed, "scope": "*"}] if len(uncalibrated) == len(tasks)
                               else [{**fixed, "scope": n} for n in uncalibrated])
    settings = {"align": _short(asdict(config.align)), "comed": _short(comed_run_config(comed_cfg)),
                "pool": pool.names, "methods": list(config.methods)}
    if "align" not in config.protocols:
        settings.pop("align")
    if "comed" not in config.protocols:
        settings.pop("comed")
    elif not config.comed_own:
        settings["comed"]["own_steps"] = False  # only the chosen dense baselines ran in COMED's run
    every, shares = protocol_of(), sharing()
    methods = {m: every[m] for m in config.methods if m != "router_only" or router is not None}
    renames: dict[str, dict[str, str]] = {}
    if config.shared:
        routed = any(s.kind == "comed-routed" for s in steps)
        methods, shares = _shared_methods(methods, shares, config, routed)
        if routed:
            renames["comed-routed"] = {"comed": "comed_routed"}
        settings["shared"] = _shared_settings(shared_cfg, best_model, tasks, pool.names)
    spec = BenchSpec(
        bench_id=bench_id,
        tasks=tuple(BenchTask(t.name, str(t.path), t.format, tuple(p.id for p in t.problems), runs[t.name])
                    for t in tasks),
        methods=methods, sharing={m: shares.get(m, "-") for m in methods}, calibration=tuple(calib_rows),
        settings=settings, renames=renames)
    def test_call(step: Step) -> tuple[Any, Any, dict[str, Any], str, Callable | None, Callable | None]:
        """What :func:`go` runs for a task's shared draw, ALIGN, COMED or routed-COMED run: the graph,
        its context, the run's settings, its protocol, its detail and its inputs."""
        shared_from = candidates_of(step.task) if config.shared else None
        inputs = shared_inputs(store, shared_from) if shared_from else None
        if step.kind == "candidates":
            best = best_for(step.task)
            cfg_c = replace(shared_cfg, single_model=best["model"] if best else None)
            return build_candidates_graph(), CandidatesContext(pool=pool, config=cfg_c), asdict(cfg_c), "candidates", \
                None, None
        if step.kind == "align":
            return (build_delegation_graph(), DelegationContext(pool=pool, config=config.align),
                    {**asdict(config.align), **({SHARED_KEY: shared_from} if shared_from else {})}, "align", None, inputs)
        t = thresholds_for(step.task)["thresholds"]
        if step.kind == "comed":
            cfg = replace(comed_cfg, thresholds=type(comed_cfg.thresholds)(**t), anchor=anchor_for(step.task))
            if not config.comed_own:  # only the chosen dense baselines: none of COMED's own calls
                return (build_dense_graph(), EscalationContext(pool=pool, config=cfg, router=router),
                        {**comed_run_config(cfg, shared_from), "own_steps": False}, "comed", comed_detail, inputs)
            return (build_escalation_graph(), EscalationContext(pool=pool, config=cfg, router=router),
                    comed_run_config(cfg, shared_from), "comed", comed_detail, inputs)
        # comed-routed: the same COMED, its anchor routed by kNN trained on the dev draw
        dev_run = candidates_of(step.task, dev_run=True)
        if dev_run not in routers:
            routers[dev_run] = dev_router(store, dev_run, pool.names, k=config.router_k, embedding=config.embedding)
        cfg = replace(comed_cfg, thresholds=type(comed_cfg.thresholds)(**t), anchor=None, baselines=())
        return (build_escalation_graph(), EscalationContext(pool=pool, config=cfg, router=routers[dev_run]),
                comed_run_config(cfg, shared_from, routers[dev_run]), "comed", comed_detail, inputs)

    tests = [s for s in steps if s.kind not in ("calibrate", "candidates-dev")]
    calls = {s.run_id: test_call(s) for s in tests}
    for s in tests:  # check first: a refused rerun changes nothing, not even the bench's recorded spec
        refused = resume_refusal(store, s.run_id, calls[s.run_id][3], calls[s.run_id][2], pool.describe(),
                                 run_dataset(dataset_of(s), s.problems))
        if refused:
            raise ResumeRefusedError(refused)
    result.spec = spec
    record_bench(store, spec)  # then the spec: an interrupted bench can still be reported

    def run_test(step: Step) -> None:
        """One task's shared draw, ALIGN, COMED or routed-COMED run (or one round of it)."""
        builder, context, run_config, protocol, detail, inputs = calls[step.run_id]
        go(step, builder, context, run_config, protocol, detail, inputs=inputs)

    size = config.round_size
    rounds = max((-(-len(s.problems) // size) for s in tests), default=0) if size else 1
    for r in range(1, rounds + 1):
        for step in tests:
            if size:
                if (r - 1) * size >= len(step.problems):
                    continue
                step = replace(step, round=(r, rounds))
            run_test(step)
    return result


def _shared_methods(methods: dict[str, str], shares: dict[str, str], config: BenchConfig,
                    routed: bool) -> tuple[dict[str, str], dict[str, str]]:
    """A shared bench's methods and what each draws on: ``single_agent`` from the candidates run (the
    dev-chosen best model's first sample), ``comed_routed`` and its ``router_only`` from the routed
    COMED run, every first step from the one candidate pool."""
    methods = dict(methods)
    if "single_agent" in methods:
        methods["single_agent"] = "candidates"
    if routed:
        methods["comed_routed"] = "comed-routed"
        if "router_only" in config.methods:
            methods["router_only"] = "comed-routed"
    pool = "the shared pool (k samples per model and question, drawn once)"
    shares = {**shares,
              "align": f"{pool}: ALIGN's n·k candidates are its agents' models' shares; the principal's pick is free",
              "single_agent": f"{pool}: the first sample of the best single model (chosen on dev when there is a dev split)",
              "self_consistency": f"{pool}: majority over ALIGN's n·k candidates",
              "best_of_n": f"{pool}: argmax of U over ALIGN's n·k candidates",
              "comed": f"{pool}: the anchor's first N samples; adds the probe's and the peers' answers",
              "anchor": f"{pool}: the anchor's first N samples (their plurality)",
              "comed_routed": f"{pool}: the routed anchor's first N samples; adds the probe's and the peers' answers",
              "router_only": f"{pool}: the routed anchor's first sample",
              **{m: text for spec in registry.bench_specs() for m, text in spec.bench.shared_sharing.items()}}
    return methods, shares


def _shared_settings(cfg: Any, best: dict[str, dict[str, Any]], tasks: Sequence[TaskFile],
                     names: Sequence[str]) -> dict[str, Any]:
    """The report's account of the shared pool and of how the single model was chosen."""
    chosen = {}
    for t in tasks:
        b = best.get(t.name) or best.get("*")
        chosen[t.name] = ({"model": b["model"], "on_dev": True, "dev_run": b["run_id"], "dev_means": b["means"],
                           "source": f"best expected one-sample accuracy on {b['questions']} dev questions "
                                     f"({b['source']}), never a test question"} if b else
                          {"model": names[0], "on_dev": False,
                           "source": "NOT chosen on dev (no dev split): the first pool model, as in the first edition"})
    return {"k": cfg.k, "models": list(cfg.models), "temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
            "shots": cfg.shots, "single_model": chosen}


def _short(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings for the report's header: nested dicts flattened (``thresholds.tau_hi``), empty
    values left out, tuples as lists (so the live report and ``--report-only`` print the same)."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        elif v not in ((), [], None, ""):
            out[k] = list(v) if isinstance(v, tuple) else v  # lists, as bench.json and --report-only read them
    return out
