"""Traces from any run: a LangChain callback handler that records every Agora protocol question an
app's invocation runs (top-level or embedded as a subgraph, ``invoke`` or ``astream``) in a
:class:`~agora.traces.TraceStore`, as ``agora run`` records its questions: the question, every
method's result, the protocol's detail and every model call. An app's runs are then listed by
``agora report runs``, replayed, and trained on (``agora train dpo --align``) like CLI runs.

    from agora.graphs.recording import TraceRecorder

    with TraceRecorder("agora.db", run_id="my-app") as recorder:
        app.invoke({"question": "..."}, config={"callbacks": [recorder]}, context=...)
    recorder.run_ids        # {"align": "my-app-align"}: one run per protocol

How it finds the questions: LangGraph reports every graph and node run to the callbacks. A run of a
protocol graph is one whose nodes ran under it and whose output has ``methods`` led by a registered
benchmark protocol's main method (``align``, ``comed``, ``moa``, ``debate``, ``converse``); its model
calls are the ``calls`` of its own nodes' updates. A protocol graph run inside another (COMED's MoA
and debate baselines) belongs to the outer one. Questions are written when the outermost run the
recorder saw ends, one transaction per question (:meth:`TraceStore.record_question`).

What it does not record: a question resumed from a checkpoint (the nodes that ran before the stop
are not seen again: use :func:`agora.graphs.runner.run_problems` for resumable runs), duels and CUPID
sessions (they have their own drivers and records: :func:`agora.runs.duel.run_duels`,
:func:`agora.runs.selection.run_session`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from agora.graphs import registry
from agora.graphs.question import as_problem
from agora.graphs.runner import default_detail, question_failed, scored_values
from agora.traces.store import TraceStore, check_run_id


@dataclass
class _Run:
    """One chain run the recorder saw start."""

    parent: UUID | None
    name: str
    node: bool
    """A graph node (``metadata["langgraph_node"]`` is its name)."""
    inputs: Any = None
    outputs: Any = None
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    children: list[UUID] = field(default_factory=list)
    ended: bool = False


def _update_of(outputs: Any) -> dict[str, Any] | None:
    """A node's state update: its dict, or a ``Command``'s ``update``."""
    if isinstance(outputs, dict):
        return outputs
    update = getattr(outputs, "update", None)
    return update if isinstance(update, dict) else None


class TraceRecorder(BaseCallbackHandler):
    """Record the protocol questions of the runs it is passed to (``config={"callbacks": [it]}``).

    Args:
        db: the trace database (a path, created if missing, or an open :class:`TraceStore`).
        run_id: the recording's name: protocol ``p``'s questions go to run ``<run_id>-<p>`` (a
            run row holds one protocol), created on its first question; the same ``run_id`` again
            adds to those runs (a question recorded twice is kept once).
        config: what the runs' rows store as their settings (default: ``{"recorded_by": "TraceRecorder"}``).
        pool: the pool the runs' rows describe (a ``ModelPool`` or a list of member dicts); default:
            the names of the models the recorded calls went to, at the first question.

    Recording errors (the database, a run id that holds another protocol) are raised in the
    invocation that ran the question (``raise_error``), not logged and lost.

    Run status: as ``agora run`` records it (:func:`agora.graphs.runner.run_problems`): ``failed``
    when any of a protocol's questions failed (their ids and last errors in the summary's
    ``failed_questions``), else the status :meth:`finish` is given (``finished`` on a clean exit).

    Raises:
        ValueError: a ``run_id`` that :func:`agora.traces.store.check_run_id` refuses (blank, control
            characters), before the database is opened or created.
    """

    raise_error = True

    def __init__(self, db: str | Path | TraceStore, run_id: str, *, config: Any = None, pool: Any = None):
        super().__init__()
        self.run_id = check_run_id(run_id, "run_id")
        self.store = db if isinstance(db, TraceStore) else TraceStore(db)
        self.config = config if config is not None else {"recorded_by": "TraceRecorder"}
        self.pool = pool.describe() if hasattr(pool, "describe") else pool
        self.run_ids: dict[str, str] = {}
        """Protocol → the run id its questions are recorded under."""
        self.recorded: dict[str, int] = {}
        """Protocol → questions recorded by this recorder."""
        self.failed: dict[str, int] = {}
        """Protocol → questions whose every model call failed (their calls are stored, no answer)."""
        self.failed_questions: dict[str, dict[str, str]] = {}
        """Protocol → failed question id → its last model-call error (as the runner's summary)."""
        self._runs: dict[UUID, _Run] = {}
        self._lock = threading.RLock()
        self._protocols = {spec.name: spec for spec in registry.specs() if spec.kind == "benchmark"}

    # ------------------------------------------------------------------ LangChain callbacks

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or ""
        node = (metadata or {}).get("langgraph_node") == name
        with self._lock:
            self._runs[run_id] = _Run(parent=parent_run_id, name=name, node=node, inputs=inputs)
            if parent_run_id in self._runs:
                self._runs[parent_run_id].children.append(run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return
            run.outputs, run.ended, run.wall_s = outputs, True, time.perf_counter() - run.started
            if run.parent not in self._runs:  # the outermost run this recorder saw: record what ran under it
                try:
                    self._record_tree(run_id)
                finally:
                    self._forget(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.parent not in self._runs:
                self._forget(run_id)  # a failed invocation: its questions did not finish

    # ------------------------------------------------------------------ recording

    def _forget(self, root: UUID) -> None:
        todo = [root]
        while todo:
            run = self._runs.pop(todo.pop(), None)
            if run is not None:
                todo.extend(run.children)

    def _protocol_of(self, run: _Run) -> str | None:
        """The benchmark protocol whose graph ``run`` is (see the module docstring), else ``None``."""
        methods = run.outputs.get("methods") if isinstance(run.outputs, dict) else None
        if not isinstance(methods, dict) or not methods or not run.ended:
            return None
        first = next(iter(methods))
        if first not in self._protocols:
            return None
        if not any(self._runs[c].node for c in run.children if c in self._runs):
            return None  # a node that writes methods (principal_select), not a graph
        return first

    def _record_tree(self, root: UUID) -> None:
        found: list[tuple[UUID, str]] = []
        todo = [root]
        while todo:  # outermost protocol runs only: a protocol run's inner graphs belong to it
            rid = todo.pop()
            run = self._runs.get(rid)
            if run is None:
                continue
            protocol = self._protocol_of(run)
            if protocol is not None:
                found.append((rid, protocol))
            else:
                todo.extend(run.children)
        for rid, protocol in found:
            self._record_question(self._runs[rid], protocol)

    def _record_question(self, graph_run: _Run, protocol: str) -> None:
        inputs = graph_run.inputs if isinstance(graph_run.inputs, dict) else None
        if not inputs or not inputs.get("question"):
            return  # resumed from a checkpoint (input None): its earlier nodes were not seen
        values: dict[str, Any] = {}
        for child in graph_run.children:
            run = self._runs.get(child)
            update = _update_of(run.outputs) if run is not None and run.node and run.ended else None
            for key, value in (update or {}).items():
                if isinstance(value, list) and isinstance(values.get(key), list):
                    values[key] = values[key] + value
                else:
                    values[key] = value
        values.update(graph_run.outputs)
        calls = values.get("calls") or []
        problem = as_problem(inputs)  # the caller's input: its gold, if any, scores the methods
        values = scored_values(values, problem)
        spec = self._protocols[protocol]
        methods = values["methods"]
        run_id = self._start(protocol, calls)
        if question_failed(protocol, methods, calls):
            self.store.record_calls(run_id, protocol, problem.id, calls)
            self.failed[protocol] = self.failed.get(protocol, 0) + 1
            errors = [c.get("error") for c in calls if c.get("error")]
            self.failed_questions.setdefault(protocol, {})[problem.id] = (errors[-1] if errors else
                                                                           "no sample for the protocol's method")[:200]
            return
        main = methods.get(protocol) or {}
        self.store.record_question(
            run_id, protocol,
            {"question_id": problem.id, "idx": self.recorded.get(protocol, 0), "source": problem.source,
             "kind": problem.kind, "question": problem.question, "gold": problem.gold,
             "answer": values.get("answer"), "correct": main.get("correct"), "wall_s": graph_run.wall_s,
             "detail": (spec.detail or default_detail)(values)},
            methods, calls)
        self.recorded[protocol] = self.recorded.get(protocol, 0) + 1

    def _start(self, protocol: str, calls: list[dict[str, Any]]) -> str:
        """The run id of ``protocol``'s questions, its row started on first use."""
        if protocol not in self.run_ids:
            run_id = f"{self.run_id}-{protocol}"
            pool = self.pool if self.pool is not None else [{"name": m} for m in sorted({c["model"] for c in calls})]
            self.store.start_run(run_id, protocol, config=self.config, pool=pool,
                                 dataset={"source": "embedded", "recorded_by": "TraceRecorder"})
            self.run_ids[protocol] = run_id
        return self.run_ids[protocol]

    # ------------------------------------------------------------------ the runs' rows

    def finish(self, status: str = "finished") -> None:
        """Mark every run this recorder wrote ``status``, with ``{"questions", "failed"}`` as summary
        (and ``failed_questions``: id → last error, the first 50). A run with failed questions is
        marked ``failed`` instead of ``finished``, as :func:`agora.graphs.runner.run_problems` marks
        a CLI run (``interrupted`` and ``failed`` are kept as given)."""
        for protocol, run_id in self.run_ids.items():
            failed = self.failed.get(protocol, 0)
            summary: dict[str, Any] = {"questions": self.recorded.get(protocol, 0), "failed": failed}
            if failed:
                summary["failed_questions"] = dict(list(self.failed_questions.get(protocol, {}).items())[:50])
            self.store.finish_run(run_id, summary=summary,
                                  status="failed" if failed and status == "finished" else status)

    def __enter__(self) -> "TraceRecorder":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.finish("finished" if exc_type is None else "interrupted" if exc_type is KeyboardInterrupt else "failed")
