"""What ``agora bench`` runs: the methods a bench reports and the protocol whose run computes each,
the samples each draws on, the protocols' settings (:class:`BenchConfig`), the runs in the order
they run (:class:`Step`, :func:`plan`), and what they have left (:func:`remaining`, :func:`time_left_s`).

The methods are read from the protocol registry (:func:`agora.graphs.registry.bench_specs`) on every
call, so a protocol registered after this module loaded is in them. :mod:`agora.runs.bench` runs
the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Sequence, get_args

from agora.tasks.errors import InputError
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.agents.router import EmbeddingName
from agora.graphs import registry
from agora.graphs.delegation import METHODS as ALIGN_METHODS
from agora.graphs.escalation import OWN_METHODS as COMED_OWN_METHODS
from agora.models.validation import Check, Choice, Convert, Count, Flag, Instance, Name, Number, settings
from agora.runs.bench_tasks import DevSplit, TaskFile
from agora.runs.matched_single import MULTI_MEMBER
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore

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
            raise InputError(f"--protocols: unknown {n!r}; choose from all, {', '.join(named)} or a method "
                             f"({', '.join(every)})")
    return tuple(m for m in every if m in chosen)


def _known_methods(methods: Any) -> Any:
    """``methods`` unchanged when it is a tuple (or list) naming at least one method, each known
    (:func:`protocol_of`); anything else raises a one-line ``ValueError``."""
    every = protocol_of()
    if not isinstance(methods, (tuple, list)) or not all(isinstance(m, str) for m in methods):
        raise InputError(f"BenchConfig.methods must be a tuple of method names, got {methods!r}")
    unknown = [m for m in methods if m not in every]
    if unknown or not methods:
        raise InputError(f"BenchConfig.methods: unknown {unknown} or none; choose from {', '.join(every)}")
    return methods


def _whole(value: Any) -> bool:
    """An ``int`` >= 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@settings
class BenchConfig:
    """The protocols' settings for a bench (the CLI builds it from its options).

    Raises:
        ValueError: a bad value; one line naming ``BenchConfig.<field>`` and the value
            (:mod:`agora.models.validation`), e.g. ``BenchConfig.router_k must be an integer >= 1, got '5'``.
    """

    align: Annotated[DelegationConfig, Instance(DelegationConfig)] = field(default_factory=DelegationConfig)
    comed: Annotated[EscalationConfig, Instance(EscalationConfig, "an EscalationConfig")] = field(
        default_factory=EscalationConfig)
    """COMED's settings; its thresholds are the fixed ones, used unless a dev split calibrates them."""
    methods: Annotated[tuple[str, ...], Convert(_known_methods)] = field(default_factory=lambda: tuple(protocol_of()))
    """The methods to report (default: every method of :func:`protocol_of`)."""
    thresholds_source: Annotated[str, Name(optional=False)] = DEFAULT_SOURCE
    """Where ``comed.thresholds`` came from, for the report, when no dev split is given."""
    lam: Annotated[float, Number(0)] = 0.01
    """Calibration cost weight λ (:func:`agora.agents.escalation_calibration.calibration_objective`)."""
    max_calls: Annotated[float | None, Number(0, optional=True)] = None
    """Calibration budget: COMED's mean model calls per dev question (anchor included)."""
    concurrency: Annotated[int | None, Check(_whole, "an integer >= 1 or None", optional=True)] = 1
    """Questions in flight per run; ``None``: the pool's
    :meth:`~agora.models.pool.ModelPool.suggested_concurrency` (8 on the embedded llama.cpp pool)."""
    durability: Annotated[Literal["async", "sync", "exit"], Choice("async", "sync", "exit")] = "async"
    """LangGraph's checkpoint durability for every run of the bench."""
    round_size: Annotated[int | None, Check(_whole, "an integer >= 1 or None", optional=True)] = 10
    """Test questions per task and run in one round: the bench runs every task's ALIGN and COMED
    runs on their first ``round_size`` questions, then on the next ones, so an interrupted bench
    already has every cell of its table, on fewer questions. ``None``: each run in one go.
    Rounds change only the order: the questions, their runs and their results are the same."""
    shared: Annotated[bool, Flag] = False
    """One candidate pool per question: draw k samples from every pool model once per
    question (run ``<bench>:<task>:candidates``) and give them to every protocol that starts from
    independent samples; with a dev split, also choose the best single model (``single_agent``, COMED's
    fixed anchor) on dev and add ``comed_routed`` (kNN router trained on the dev draw). ``False``:
    the first edition's bench (each protocol draws its own samples; ``single_agent`` is ALIGN's agent 0)."""
    router_k: Annotated[int, Count(1)] = 5
    """Neighbours of ``comed_routed``'s dev-trained kNN router."""
    embedding: Annotated[EmbeddingName, Choice(*get_args(EmbeddingName))] = "auto"
    """Embedding of ``comed_routed``'s router: ``auto``, ``minilm`` or ``tfidf``."""
    matched_single: Annotated[bool, Flag] = False
    """Give the dev-chosen best member as many of its own samples per question as the multi-member
    methods used (run ``<bench>:<task>:matched-single``, :mod:`agora.runs.matched_single`), for the
    claim at matched samples. Needs ``shared`` and a dev split (:func:`plan` refuses it otherwise)."""

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

    kind: Literal["calibrate", "align", "comed", "candidates", "candidates-dev", "comed-routed", "matched-single"]
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


def run_id_of(bench_id: str, task: str, protocol: str) -> str:
    """``<bench>:<task>:<protocol>`` (``all`` for a dev split that serves every task)."""
    return f"{bench_id}:{'all' if task == '*' else task}:{protocol}"


def check_matched_single(config: BenchConfig, has_dev: bool) -> None:
    """Refuse ``config.matched_single`` when the bench cannot make its claim: without shared candidates
    or a dev split (``has_dev``; the best member is chosen on dev questions), or without a multi-member
    method (:data:`agora.runs.matched_single.MULTI_MEMBER`) to match the member against.

    Raises:
        ValueError: one line naming what is missing.
    """
    if not config.matched_single:
        return
    if not (config.shared and has_dev):
        raise InputError("--matched-single needs shared candidates and a dev split (--dev N or --calibrate-on FILE): "
                         "the best member is chosen on dev questions")
    if not any(m in MULTI_MEMBER for m in config.methods):
        multi = ", ".join(m for m in protocol_of() if m in MULTI_MEMBER)
        raise InputError(f"--matched-single needs a multi-member method to match the best member against "
                         f"({multi}); --protocols chose only {', '.join(config.methods)}")


def plan(bench_id: str, tasks: Sequence[TaskFile], config: BenchConfig, dev: Sequence[DevSplit] = ()) -> list[Step]:
    """The runs of a bench in the order they run: the dev draws (shared candidates), the dev
    calibrations, then per task the shared draw, ALIGN, COMED, COMED with a routed anchor and, with
    ``config.matched_single``, the best member's matched draw (last: it reads the others' samples).

    Raises:
        ValueError: ``matched_single`` without shared candidates, a dev split or a multi-member method
            (:func:`check_matched_single`).
    """
    check_matched_single(config, bool(dev))
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
        if config.matched_single:
            protocols += ("matched-single",)
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


def shared_methods(methods: dict[str, str], shares: dict[str, str], config: BenchConfig,
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
