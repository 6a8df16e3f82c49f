"""Run a protocol graph over a list of problems: checkpointed, traced, resumable.

The convention every benchmark graph follows: its state has ``answer`` (the protocol's final
answer), ``methods`` (method name → ``{"answer", "correct", "samples", "completion_tokens"}``, the
protocol and the baselines computed in the same run) and ``calls`` (trace records of every model
call). The runner, not the nodes, writes them to the :class:`~agora.traces.TraceStore`, one
question per transaction, after the question finished. The runner also scores them: the graph
leaves every ``correct`` ``None`` and never sees the gold answer, and the runner fills ``correct``
in from the problem with :func:`agora.tasks.scoring.score_results` (:func:`scored_values`).

Resuming: each question runs on its own checkpoint thread ``<run_id>:<question_id>`` in a SQLite
checkpointer beside the trace DB. A rerun with the same run id skips recorded questions and picks
an interrupted question up from its last finished step (agents that already sampled are not asked
again). Its ``wall_s`` adds what its earlier sittings spent on the steps kept (:func:`~agora.graphs.run_checkpoints.kept_wall_s`).

Failed questions: a question whose protocol answer drew on no successful model call (every call
failed after its retries: HTTP errors, bad replies, timeouts, a model that cannot load) is not
recorded as answered: its model calls are stored (each failed attempt a row, with its error), its
checkpoint is dropped, the run goes on with the next question and ends ``failed``, and a rerun with
the same run id retries it from the start (:attr:`RunOutcome.failed`, :func:`question_failed`).
A question some of whose calls failed is answered from the others (docs/guarantees.md).

Execution: each question runs with ``ainvoke`` on an event loop owned by the runner (one per
worker thread with ``concurrency > 1``; from a worker thread when the caller already runs a loop,
as in a notebook), so nodes with an async twin and the checkpoint writes
(:class:`~agora.graphs.checkpoint.InlineAsyncSqliteSaver`) run without a thread hand-off per step;
sync-only nodes run in the loop's thread pool, as LangGraph arranges. How the questions are worked
through (one thread, worker threads, or the workers of a shared Postgres run) is
:mod:`agora.graphs.question_workers`.

The run's row and checkpointer: :func:`agora.graphs.recorded_runs.recorded_run`, which the other
drivers (:func:`agora.runs.duel.run_duels`, :func:`agora.runs.selection.run_session`) share; the
checkpointer file: :mod:`agora.graphs.run_checkpoints`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Sequence, get_args

from langgraph.errors import GraphBubbleUp
from langgraph.graph import StateGraph
from langgraph.runtime import RunControl
from langgraph.types import Durability

from agora.models.pool import ModelCallError, unreturned_attempts
from agora.graphs.question import problem_input
from agora.graphs.question_workers import close_loop, in_running_loop, raise_if_drained, run_claimed, run_concurrently
from agora.graphs.question_workers import run_to_end
from agora.graphs.recorded_runs import recorded_run
from agora.graphs.registry import get as protocol_spec
from agora.graphs.run_checkpoints import KEPT_WALL_S, SITTING_STARTED, kept_wall_s
from agora.graphs.scoring import noted_event
from agora.graphs.spec import methods_written
from agora.tasks.problem import Problem
from agora.tasks.errors import InputError
from agora.tasks.scoring import score_results
from agora.traces.claims import Claims, run_ending
from agora.traces.postgres import is_postgres_url
from agora.traces.store import QUESTION_HASHES, TraceStore, question_hash

log = logging.getLogger(__name__)

EventHandler = Callable[[dict[str, Any]], None]

MODEL_CALL_THREADS = 64
"""Model calls of one question (one event loop) in flight at once, for sync-only backends: a served
pool gets a question's whole fan-out (n agents, judges) as one batch."""


@dataclass
class QuestionOutcome:
    problem: Problem
    answer: str | None
    methods: dict[str, dict[str, Any]]
    calls: list[dict[str, Any]]
    wall_s: float
    resumed: bool = False
    failed: bool = False
    """No answer: the model calls its protocol's answer draws on all failed (:func:`question_failed`)."""
    error: str | None = None
    """A failed question's last model-call error."""


@dataclass
class RunOutcome:
    run_id: str
    resumed: bool
    skipped: int
    outcomes: list[QuestionOutcome] = field(default_factory=list)
    """The questions answered and recorded by this call, in the order they finished."""
    failed: list[QuestionOutcome] = field(default_factory=list)
    """The questions that failed (not recorded as answered; a rerun retries them)."""


def question_failed(protocol: str, methods: dict[str, dict[str, Any]], calls: list[dict[str, Any]]) -> bool:
    """Whether a finished question has no answer to record: none of its model calls succeeded (and
    its protocol's method took no sample from a bench's shared candidate pool), or its protocol's
    method drew on no sample (``methods[protocol]["samples"] == 0``)."""
    main = methods.get(protocol) or {}
    if not any(not c.get("error") for c in calls) and not main.get("shared_samples"):
        return True  # (samples from a bench's shared candidate pool have their rows in its candidates run)
    return main.get("samples") == 0


def scored_values(values: dict[str, Any], problem: Problem) -> dict[str, Any]:
    """A finished question's final state as it is recorded: its ``methods`` scored against
    ``problem`` by :func:`agora.tasks.scoring.score_results` (the one scorer: graphs leave
    ``correct`` ``None``; a resumed checkpoint of an older run is re-scored the same way) and the
    problem's ``gold`` beside them, for a protocol's ``detail`` that scores more than its methods
    (COMED's branches, :func:`agora.agents.escalation_records.comed_detail`). The graph's state holds no gold."""
    return {**values, "methods": score_results(values.get("methods") or {}, problem), "gold": problem.gold}


def default_detail(values: dict[str, Any]) -> dict[str, Any]:
    return {k: values[k] for k in ("proposals", "selection", "decision", "trace") if k in values}


def run_dataset(dataset: dict[str, Any], problems: Sequence[Problem]) -> dict[str, Any]:
    """The ``runs.dataset`` a run of ``problems`` records: ``dataset`` (path, format, ...) with
    ``count`` and each question's content hash by id (:data:`QUESTION_HASHES`), which a resume
    compares (:meth:`TraceStore.data_changes`: an edited file is refused, the same questions at
    another path resume)."""
    hashes = {p.id: question_hash(p.question, p.gold, p.kind, p.n_choices) for p in problems}
    return {**dataset, "count": len(problems), QUESTION_HASHES: hashes}


def run_problems(
    builder: StateGraph,
    problems: Sequence[Problem],
    *,
    store: TraceStore,
    run_id: str,
    protocol: str,
    context: Any,
    config: Any,
    pool_description: Any,
    dataset: dict[str, Any],
    on_event: EventHandler | None = None,
    on_question: Callable[[QuestionOutcome], None] | None = None,
    detail: Callable[[dict[str, Any]], dict[str, Any]] = default_detail,
    durability: Durability = "async",
    concurrency: int = 1,
    control: RunControl | None = None,
    finished: Callable[[dict[str, Any]], bool] = methods_written,
    only: Collection[str] | None = None,
    inputs: Callable[[Problem], dict[str, Any]] | None = None,
    on_start: Callable[[RunOutcome], None] | None = None,
) -> RunOutcome:
    """Run ``builder``'s graph on each problem, recording every question in ``store``.

    Args:
        builder: an uncompiled protocol graph (compiled here with a SQLite checkpointer).
        problems: the questions, in order.
        run_id: the run's id; an existing id resumes that run.
        protocol: protocol name stored with the run (``align``, ``comed``...).
        context: the graph's runtime context (pool and settings).
        config / pool_description / dataset: stored in the ``runs`` row.
        on_event: called with each custom stream event (progress display); from worker threads
            when ``concurrency > 1`` or when the caller runs an event loop. Without it the graph
            runs with ``ainvoke`` (no stream consumer).
        on_question: called after each question is recorded (from the calling thread).
        on_start: called once the run's row is started or resumed (its refusal rules passed) and
            before any question runs, with the outcome so far (``resumed``, ``skipped``): a caller
            prints its header and progress there, so a refused rerun prints only its error.
        detail: picks the state fields stored as the question's ``detail`` JSON.
        finished: whether a checkpointed state is a finished question (default: its ``methods``
            are written; a protocol's ``ProtocolSpec.finished``).
        only: run just these question ids of ``problems`` this call (the others keep their place,
            ``idx``, for later calls: ``agora bench`` runs its runs in rounds). While some question
            of ``problems`` is still unrecorded the run's row ends ``partial``.
        inputs: extra graph-input fields per question, merged into :func:`problem_input`'s
            (``agora bench``: ``shared_candidates``, :class:`agora.graphs.question.SharedCandidate`);
            read when the question starts, not when it resumes from a checkpoint.
        durability: when LangGraph checkpoints a question (its ``durability``): ``"async"``
            (default) or ``"sync"`` after every step, so even a killed process resumes a question
            from its last finished step; ``"exit"`` once, when the question ends, drains (see
            ``control``) or fails (an error keeps the steps and samples finished before it; a
            ``KeyboardInterrupt`` or a killed process redoes the interrupted step or question).
            ``"exit"`` saves ≈ 0.25 ms per step (``benchmarks/orchestration.py``).
        concurrency: questions in flight at once (threads). A served pool (vLLM) and the embedded
            llama.cpp pool (continuous batching, :mod:`agora.models._llama_batch`) batch the
            requests of concurrent questions. Questions are recorded as they finish; ``idx`` keeps
            their order.
        control: LangGraph's ``RunControl`` for a graceful stop (e.g. on Ctrl-C, see
            ``agora.cli._shared.graceful_stop``): after ``control.request_drain()`` each running
            question stops at its next step boundary with that step checkpointed (whatever the
            ``durability``), no new question starts, and ``GraphDrained`` is raised once the
            finished questions are recorded.

    Raises:
        InputError: ``concurrency < 1`` or an unknown ``durability`` (a ``ValueError``).
        GraphDrained: the run stopped because ``control`` asked it to; rerun to resume.
        On any other exception the run's row is marked ``failed`` (with the error in its summary;
        ``interrupted`` after a drain or Ctrl-C); a rerun marks it ``running`` again and resumes.
        Failed questions (see the module docstring) raise nothing: they are in
        :attr:`RunOutcome.failed` and the run's row ends ``failed``. When a node fails (e.g. an unreachable
        model raises ``ModelCallError``), LangGraph cancels the other nodes of that step still
        running under ``ainvoke``: the rerun redoes those (nodes that finished are kept); every model
        call of the question is stored (:func:`raised_question_calls`): its finished nodes' samples
        and failed attempts, the attempts of the call that raised, and its requests then in flight
        (error ``cancelled``); the rerun that answers it writes those rows again, not twice.
        KeyboardInterrupt and model errors propagate after the finished questions are stored
        (with ``concurrency > 1``, after the questions already running have finished and been
        stored; the ones not started are left for the rerun); rerunning with the same ``run_id``
        resumes.

    A sync function: called from async code (a notebook cell, an async app) it blocks the caller's
    event loop until the run ends; ``await asyncio.to_thread(run_problems, ...)`` keeps the loop free.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InputError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if durability not in get_args(Durability):
        raise InputError(f"durability must be one of {', '.join(get_args(Durability))}, got {durability!r}")
    with recorded_run(store, run_id, protocol, config=config, pool=pool_description,
                      dataset=run_dataset(dataset, problems),
                      group_commit=True,  # its checkpointer commits after each question (solve)
                      shared=True) as run:  # on Postgres, several workers may run it together
        saver = run.saver
        done = store.finished_questions(run_id)
        outcome = RunOutcome(run_id=run_id, resumed=run.resumed, skipped=sum(p.id in done for p in problems))
        run.progress = lambda: {"questions": len(problems), "recorded": len(outcome.outcomes),
                                "failed": len(outcome.failed)}
        todo = [(idx, p) for idx, p in enumerate(problems) if p.id not in done and (only is None or p.id in only)]
        if on_start is not None:
            on_start(outcome)
        graph = builder.compile(checkpointer=saver)

        keys = list(builder.channels)  # the whole state, so no get_state after a question
        # workers of one run on Postgres share its questions out (traces/claims.py)
        claims = Claims(store, run_id) if is_postgres_url(store.path) else None
        loops: dict[int, asyncio.AbstractEventLoop] = {}
        loops_lock = threading.Lock()

        def thread_loop() -> asyncio.AbstractEventLoop:
            """This thread's event loop for this run (created on first use, closed when the run ends)."""
            with loops_lock:
                loop = loops.get(threading.get_ident())
                if loop is None:
                    loop = loops[threading.get_ident()] = asyncio.new_event_loop()
                    # Sync-only chat models (llama.cpp, the OpenAI-compatible client) run in the loop's
                    # default pool; asyncio's default (cpus + 4 threads) would queue a wider fan-out.
                    loop.set_default_executor(ThreadPoolExecutor(max_workers=MODEL_CALL_THREADS,
                                                                 thread_name_prefix="agora-model-call"))
                return loop

        async def run_graph(inp: dict[str, Any] | None, thread: dict[str, Any], problem: Problem) -> dict[str, Any]:
            if on_event is None:
                return await graph.ainvoke(inp, thread, context=context, durability=durability, control=control,
                                           output_keys=keys)
            values: dict[str, Any] = {}
            async for ns, mode, chunk in graph.astream(inp, thread, context=context, stream_mode=["custom", "values"],
                                                       subgraphs=True, durability=durability, control=control,
                                                       output_keys=keys):
                if mode == "custom":
                    on_event({"question_id": problem.id, **noted_event(chunk, problem)})
                elif not ns:
                    values = chunk
            return values

        def solve(problem: Problem) -> tuple[dict[str, Any], float, bool]:
            """Run (or resume) one question's graph; its final state, wall seconds (earlier sittings'
            kept part included, :func:`~agora.graphs.run_checkpoints.kept_wall_s`), whether resumed."""
            thread_id = f"{run_id}:{problem.id}"
            start = time.perf_counter()
            inp: dict[str, Any] | None = problem_input(problem) | (inputs(problem) if inputs is not None else {})
            was_started = False
            latest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
            before = kept_wall_s(latest)
            # every checkpoint of this sitting carries when it started and what earlier sittings kept
            thread = {"configurable": {"thread_id": thread_id},
                      "metadata": {SITTING_STARTED: time.time(), KEPT_WALL_S: before}}
            if latest is not None:  # a checkpoint exists: finish or resume it
                snapshot = graph.get_state(thread)
                was_started = bool(snapshot.values)
                # Work is pending when a node is due (``next``) or a task is: fanned-out ``Send``
                # branches appear in ``tasks`` only. A question counts as finished only once the graph
                # has written its ``methods``; anything else runs (or resumes) the graph.
                pending = bool(snapshot.next) or bool(snapshot.tasks)
                if was_started and not pending and finished(snapshot.values):
                    return snapshot.values, before + time.perf_counter() - start, was_started
                inp = None if pending else inp
            try:
                # failed attempts of calls cut short by the error, requests then in flight included
                with unreturned_attempts(in_flight=True) as unreturned:
                    values = run_to_end(thread_loop(), run_graph(inp, thread, problem))
            except GraphBubbleUp:  # a drain (a graceful stop): the question resumes from its checkpoint
                raise
            except Exception as exc:  # an unreachable model, any node's error: keep every call, then stop the run
                attempts = raised_question_calls(exc, unreturned, checkpointed_calls(graph, thread))
                if claims is None:
                    store.record_calls(run_id, protocol, problem.id, attempts)
                else:
                    with claims.holding(problem.id, "failed calls") as mine:  # a claim taken over: not ours to write
                        if mine:
                            store.record_calls(run_id, protocol, problem.id, attempts)
                raise
            finally:
                saver.commit()  # task writes waiting for a shared commit (an error or a stop leaves some)
            return values, before + time.perf_counter() - start, was_started

        def record(idx: int, problem: Problem, values: dict[str, Any], wall: float, was_started: bool) -> None:
            values = scored_values(values, problem)  # the one scorer, here and not in the graph
            methods = values["methods"]
            main = methods.get(protocol) or {}
            calls = values.get("calls") or []
            if question_failed(protocol, methods, calls):  # no answer: store its calls, retry it on a rerun
                store.record_calls(run_id, protocol, problem.id, calls)
                saver.delete_thread(f"{run_id}:{problem.id}")
                errors = [c["error"] for c in calls if c.get("error")]
                q = QuestionOutcome(problem, None, methods, calls, wall, resumed=was_started, failed=True,
                                    error=errors[-1] if errors else "no model call was made")
                outcome.failed.append(q)
                if on_question is not None:
                    on_question(q)
                return
            store.record_question(
                run_id, protocol,
                {"question_id": problem.id, "idx": idx, "source": problem.source, "kind": problem.kind,
                 "question": problem.question, "gold": problem.gold, "answer": values.get("answer"),
                 "correct": main.get("correct"), "wall_s": wall, "detail": detail(values)},
                methods, values.get("calls") or [],
            )
            saver.delete_thread(f"{run_id}:{problem.id}")
            q = QuestionOutcome(problem, values.get("answer"), methods, values.get("calls") or [], wall,
                                resumed=was_started)
            outcome.outcomes.append(q)
            if on_question is not None:
                on_question(q)

        if claims is not None:  # join (or start) the run's sitting, and its questions' claims
            claims.seed([(idx, p.id) for idx, p in todo])

            def record_claimed(idx: int, problem: Problem, values: dict[str, Any], wall: float, was_started: bool) -> None:
                with claims.record(problem.id) as mine:  # only while the claim is still ours: written once
                    if mine:
                        record(idx, problem, values, wall, was_started)
                if not mine and claims.done([problem.id]):  # taken over and finished by another worker, which
                    saver.delete_thread(f"{run_id}:{problem.id}")  # dropped its thread before this one's last steps

            def drop_done_threads() -> None:
                """Drop the checkpoints of the run's done questions: left by a stale worker whose graph
                went on writing after the worker that took its question over dropped the thread (as
                :func:`record` drops a recorded question's thread; a question not done keeps its own)."""
                try:
                    saver.delete_threads([f"{run_id}:{q}" for q in claims.done(ids)])
                except Exception as exc:  # noqa: BLE001 - housekeeping: never the run's error
                    log.warning("run %r: the checkpoints of its finished questions were not dropped (%s: %s)",
                                run_id, type(exc).__name__, exc)

        ids = [p.id for p in problems if only is None or p.id in only]
        try:
            if claims is not None:
                run.others_working = lambda: claims.others_working_apart(ids)  # (an ending at once: mark_live_runs)
                try:
                    run_claimed(claims, todo, solve, record_claimed, concurrency, control)
                except BaseException:
                    drop_done_threads()
                    with suppress(Exception):  # (the DB may be down: then recorded_run marks the row as it can)
                        if claims.others_working(ids):  # other workers still on the run write its status
                            run.done = True
                        elif claims.remaining(ids) == 0:  # every question done (by others): the run's own
                            run.done = claims.finish([p.id for p in problems], ids) is not None  # ending, not this stop
                    raise
                drop_done_threads()
                claims.finish([p.id for p in problems], ids)  # the whole run's, whichever worker ends last
                run.done = True  # (written, or left to a worker still holding a question of it)
                return outcome
            elif concurrency == 1 and not in_running_loop():
                for idx, problem in todo:
                    raise_if_drained(control)
                    record(idx, problem, *solve(problem))
            else:
                run_concurrently(todo, solve, record, concurrency, control)
            recorded = done | {q.problem.id for q in outcome.outcomes}
            failed = {q.problem.id: q.error for q in outcome.failed}
            status, summary = run_ending(
                len(problems), sum(p.id in recorded for p in problems if only is None or p.id in only),
                {p.id: failed[p.id] for p in problems if p.id in failed},  # in the run's order
                sum(p.id not in recorded and p.id not in failed for p in problems))
            run.finish(summary, status=status)
        finally:  # then recorded_run marks a stopped run "interrupted", a failed one "failed"
            for loop in loops.values():
                close_loop(loop)
            if claims is not None:
                claims.leave()
    return outcome


def checkpointed_calls(graph: Any, thread: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace records (``calls``) of the nodes of a question's checkpoint thread that finished
    before it raised: those of its checkpointed steps (its state's ``calls``) and of the step that
    raised (the writes LangGraph kept for the nodes of that step that finished, which a resume does
    not run again). ``[]`` when the checkpoint cannot be read (logged)."""
    try:
        snapshot = graph.get_state(thread)
    except Exception as exc:  # noqa: BLE001 - the question's own error is the one raised
        log.warning("the model calls of a question's finished nodes were not read from its checkpoint (%s: %s)",
                    type(exc).__name__, exc)
        return []
    calls = list((snapshot.values or {}).get("calls") or [])
    for task in snapshot.tasks:
        result = getattr(task, "result", None)
        if isinstance(result, dict):
            calls.extend(result.get("calls") or [])
    return calls


def raised_question_calls(error: BaseException, unreturned: list[dict[str, Any]],
                          kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every model call of a question whose graph raised ``error``, each once (by ``call_id``): the
    calls of its finished nodes, answered or not (``kept``: :func:`checkpointed_calls`; the rerun that
    resumes it writes the same rows again, not more), the attempts of the call that raised
    (``ModelCallError.records``), and those of the calls cut short beside it (``unreturned``: from
    :func:`agora.models.pool.unreturned_attempts`, requests then in flight as ``cancelled``)."""
    attempts: list[dict[str, Any]] = []
    seen: set[str] = set()
    raised = error.records if isinstance(error, ModelCallError) else []
    for record in kept + list(raised) + list(unreturned):
        if record.get("call_id") not in seen:
            seen.add(record.get("call_id"))
            attempts.append(record)
    return attempts


def run_protocol(name: str, problems: Sequence[Problem], **kwargs: Any) -> RunOutcome:
    """:func:`run_problems` for the registered benchmark protocol ``name``: its graph, its name as the
    run's protocol, its ``detail`` and ``finished`` from its :class:`~agora.graphs.spec.ProtocolSpec`.
    Other arguments as for :func:`run_problems` (``store``, ``run_id``, ``context``, ...).

    Raises:
        KeyError: an unknown protocol. InputError (a ``ValueError``): a protocol that is not a benchmark one.
    """
    spec = protocol_spec(name)
    if spec.kind != "benchmark":
        raise InputError(f"protocol {name!r} is a {spec.kind} protocol; run_protocol runs benchmark ones")
    return run_problems(spec.build(), problems, protocol=spec.name, detail=spec.detail or default_detail,
                        finished=spec.finished, **kwargs)


