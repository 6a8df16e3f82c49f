"""Run a protocol graph over a list of problems: checkpointed, traced, resumable.

The convention every benchmark graph follows: its state has ``answer`` (the protocol's final
answer), ``methods`` (method name → ``{"answer", "correct", "samples", "completion_tokens"}``, the
protocol and the baselines computed in the same run) and ``calls`` (trace records of every model
call). The runner, not the nodes, writes them to the :class:`~agora.traces.TraceStore`, one
question per transaction, after the question finished.

Resuming: each question runs on its own checkpoint thread ``<run_id>:<question_id>`` in a SQLite
checkpointer beside the trace DB. A rerun with the same run id skips recorded questions and picks
an interrupted question up from its last finished step (agents that already sampled are not asked
again).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import StateGraph

from agora.graphs._common import problem_input
from agora.tasks.loaders import Problem
from agora.traces.store import TraceStore

EventHandler = Callable[[dict[str, Any]], None]


def checkpoint_path(db_path: str | Path) -> str:
    """Where the checkpointer of a trace DB lives: ``<db>.checkpoints`` next to it."""
    p = Path(db_path)
    return str(p.with_name(p.name + ".checkpoints"))


@dataclass
class QuestionOutcome:
    problem: Problem
    answer: str | None
    methods: dict[str, dict[str, Any]]
    calls: list[dict[str, Any]]
    wall_s: float
    resumed: bool = False


@dataclass
class RunOutcome:
    run_id: str
    resumed: bool
    skipped: int
    outcomes: list[QuestionOutcome] = field(default_factory=list)


def default_detail(values: dict[str, Any]) -> dict[str, Any]:
    return {k: values[k] for k in ("proposals", "selection", "decision", "trace") if k in values}


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
) -> RunOutcome:
    """Run ``builder``'s graph on each problem, recording every question in ``store``.

    Args:
        builder: an uncompiled protocol graph (compiled here with a SQLite checkpointer).
        problems: the questions, in order.
        run_id: the run's id; an existing id resumes that run.
        protocol: protocol name stored with the run (``align``, ``comed``...).
        context: the graph's runtime context (pool and settings).
        config / pool_description / dataset: stored in the ``runs`` row.
        on_event: called with each custom stream event (progress display).
        on_question: called after each question is recorded.

    Raises:
        KeyboardInterrupt and model errors propagate after the finished questions are stored;
        rerunning with the same ``run_id`` resumes.
    """
    resumed = store.start_run(run_id, protocol, config=config, pool=pool_description,
                              dataset={**dataset, "count": len(problems)})
    done = store.finished_questions(run_id)
    outcome = RunOutcome(run_id=run_id, resumed=resumed, skipped=0)
    conn = sqlite3.connect(checkpoint_path(store.path) if store.path != ":memory:" else ":memory:",
                           check_same_thread=False)
    # WAL without an fsync per commit: LangGraph commits after every step, and a synced commit
    # (~10 ms) would dwarf the step. A crash of the process loses nothing; of the OS, at most the
    # last steps, which the resumed run redoes.
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    graph = builder.compile(checkpointer=saver)
    try:
        for idx, problem in enumerate(problems):
            if problem.id in done:
                outcome.skipped += 1
                continue
            thread = {"configurable": {"thread_id": f"{run_id}:{problem.id}"}}
            snapshot = graph.get_state(thread)
            was_started = bool(snapshot.values)
            # Work is pending when a node is due (``next``) or a task is: fanned-out ``Send``
            # branches appear in ``tasks`` only. A question counts as finished only once the graph
            # has written its ``methods``; anything else runs (or resumes) the graph.
            pending = bool(snapshot.next) or bool(snapshot.tasks)
            finished = was_started and not pending and "methods" in snapshot.values
            start = time.perf_counter()
            if not finished:
                inp = None if pending else problem_input(problem)
                for _ns, mode, chunk in graph.stream(inp, thread, context=context,
                                                     stream_mode=["custom", "updates"], subgraphs=True):
                    if mode == "custom" and on_event is not None:
                        on_event({"question_id": problem.id, **chunk})
            values = graph.get_state(thread).values
            wall = time.perf_counter() - start
            methods = values.get("methods") or {}
            main = methods.get(protocol) or {}
            store.record_question(
                run_id, protocol,
                {"question_id": problem.id, "idx": idx, "source": problem.source, "kind": problem.kind,
                 "question": problem.question, "gold": problem.gold, "answer": values.get("answer"),
                 "correct": main.get("correct"), "wall_s": wall, "detail": detail(values)},
                methods, values.get("calls") or [],
            )
            saver.delete_thread(thread["configurable"]["thread_id"])
            q = QuestionOutcome(problem, values.get("answer"), methods, values.get("calls") or [], wall,
                                resumed=was_started)
            outcome.outcomes.append(q)
            if on_question is not None:
                on_question(q)
        store.finish_run(run_id, summary={"questions": len(problems)})
    finally:
        conn.close()
    return outcome
