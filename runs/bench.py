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

What a bench runs (its methods, settings and runs in order) is :mod:`agora.runs.bench_plan`; its
task files and dev splits :mod:`agora.runs.bench_tasks`.

Layers: a driver (:mod:`agora.runs`): this module runs the ``graphs`` and uses ``agents``, ``tasks`` and
``traces``; the report's data is read by :mod:`agora.traces.bench`, its claims and files are written by
:mod:`agora.runs.report`, and the command line is :mod:`agora.cli.bench`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

from langgraph.graph import END, START
from langgraph.runtime import RunControl

from agora.agents.escalation import EscalationConfig, check_pool
from agora.agents.escalation_records import comed_detail
from agora.agents.escalation_calibration import calibrate
from agora.models.pool import ModelPool
from agora.models.validation import recorded
from agora.agents.router import KNNRouter
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import (
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
from agora.graphs.matched_single import MatchedSingleContext, build_matched_single_graph
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.runner import QuestionOutcome, RunOutcome, run_dataset, run_problems
from agora.runs.bench_plan import BenchConfig, Step, plan, protocol_of, questions_in_flight, run_id_of, sharing
from agora.runs.bench_plan import shared_methods
from agora.runs.bench_tasks import DevSplit, TaskFile
from agora.runs.matched_single import matched_config, matched_inputs, ready_questions
from agora.runs.shared import SHARED_KEY, best_on_dev, candidates_config, check_edition, dev_router, shared_inputs
from agora.traces.bench_data import comed_dev_outcomes
from agora.traces.bench_spec import BenchSpec, BenchTask, record_bench
from agora.traces.matched_single import MATCHED_RUN
from agora.traces.resume import resume_refusal
from agora.traces.store import ResumeRefusedError, TraceStore


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


class BenchProgress:
    """What a bench reports as it goes (the CLI draws a progress bar from it); no-ops here."""

    def step(self, step: Step, todo: int) -> None:
        """A run starts: ``todo`` of its questions are not recorded yet."""

    def question(self, step: Step, outcome: QuestionOutcome) -> None:
        """A question finished (recorded, or failed)."""

    def event(self, step: Step, event: dict[str, Any]) -> None:
        """A graph's custom stream event (``event["message"]``)."""

    def note(self, text: str) -> None:
        """A one-line notice about the bench itself (e.g. a member left out of a router)."""


class CalibrationError(RuntimeError):
    """A dev run some of whose questions failed: no thresholds from a partial dev split."""


@dataclass
class BenchResult:
    spec: BenchSpec
    runs: dict[str, RunOutcome] = field(default_factory=dict)
    """Run id → what that run did in this call."""

    @property
    def failed(self) -> list[tuple[str, QuestionOutcome]]:
        """Test questions that failed in this call (every model call failed), with their run id; the
        dev runs (``<bench>:<scope>:comed-dev``, ``…:candidates-dev``) are not test runs."""
        return [(r, q) for r, o in self.runs.items() if not r.endswith("-dev") for q in o.failed]


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
    # one candidate pool per question, and the best single model chosen on dev
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
        if step.kind == MATCHED_RUN:  # a question waits until every other run of its task has recorded it
            ready = ready_questions(store, runs[step.task], [p.id for p in step.problems])
            only = ready if only is None else only & ready
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

    router_left_out: dict[str, list[str]] = {}
    """Task → the members its ``comed_routed`` router leaves out (no scored dev answer)."""
    for step in steps:  # comed_routed's routers, before any test question: a dev draw with too few answers stops here
        if step.kind != "comed-routed":
            continue
        dev_run = candidates_of(step.task, dev_run=True)
        fresh = dev_run not in routers
        if fresh:
            routers[dev_run] = dev_router(store, dev_run, pool.names, k=config.router_k, embedding=config.embedding)
        left = [m for m in pool.names if m not in routers[dev_run].models]
        if left:
            router_left_out[step.task] = left
            if fresh:
                progress.note(f"{', '.join(left)} left out of comed_routed's router: no scored dev answer in {dev_run} "
                              f"(every dev call failed); it routes among {', '.join(routers[dev_run].models)}")

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
    settings = {"align": _short(recorded(config.align)), "comed": _short(comed_run_config(comed_cfg)),
                "pool": pool.names, "methods": list(config.methods)}
    if router_left_out:
        settings["router_left_out"] = router_left_out
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
        methods, shares = shared_methods(methods, shares, config, routed)
        if routed:
            renames["comed-routed"] = {"comed": "comed_routed"}
        settings["shared"] = _shared_settings(shared_cfg, best_model, tasks, pool.names)
    if config.align.principal is not None and "align" in shares:  # the model principal's call is its own
        shares = {**shares, "align": _principal_sharing(shares["align"], config.align.principal)}
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
                    {**recorded(config.align), **({SHARED_KEY: shared_from} if shared_from else {})}, "align", None, inputs)
        if step.kind == MATCHED_RUN:  # the dev-chosen best member's extra samples, to match the methods' counts
            cfg_m = matched_config(shared_cfg, best_for(step.task)["model"], pool.names)
            return (build_matched_single_graph(), MatchedSingleContext(pool=pool, config=cfg_m), asdict(cfg_m),
                    MATCHED_RUN, None, matched_inputs(store, inputs, runs[step.task], methods, renames, cfg_m.member))
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


def _principal_sharing(text: str, principal: str) -> str:
    """ALIGN's sharing text with a model principal: its pick (free under the utility rule) is the
    member's answer, one more call per question of its own."""
    picks = ("the principal's pick among all of them", "the principal's pick is free")
    said = (f"the model principal {principal} reads the agents' proposals and answers (one more call per "
            "question, its own)")
    for pick in picks:
        if pick in text:
            return text.replace(pick, said)
    return f"{text}; {said}"


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
