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
recorder saw ends, one transaction per question (:meth:`TraceStore.record_question`); a protocol
graph run still running then (one the app started in a thread of its own and did not wait for) is
kept and recorded when it ends, as an outermost run of its own. A protocol
run that ends without ``methods`` (paused, or stopped by an error) is known by its nodes' names
(those of a registered protocol's graph).

Each invocation is its own question (``docs/guarantees.md``, "Recording from an app"):

- **Ids**: a question without a ``question_id`` gets ``q-<crc32 of its text>``, or, when that id is
  taken in the run (an answered or failed question), the first free ``q-<crc32>-2``, ``-3``, ...
  A ``question_id`` given by the caller that the run already answered is refused
  (:class:`QuestionRecordedError`, one line naming the id) before the protocol graph's first node
  runs (two invocations of one id at once: the second when it ends), and nothing of it is written; one that only failed before is retried under its id, as ``agora run`` retries it.
- **Pauses** (an ``interrupt``, ``interrupt_before``/``interrupt_after``, a Studio breakpoint): the
  nodes that ran before the pause are held, in memory, under the run's checkpoint thread and
  namespace, and the question is recorded once, whole, when a later invocation through the same
  recorder finishes it. A fresh input on that thread drops what was held for it. A question whose
  ``question`` the app edited while it was paused (``update_state``, or a resume's
  ``Command(update=...)``) is recorded as edited, without the input's gold
  (:data:`agora.graphs.scoring.RESUMED_INPUT`, as the resumed graph scores it).
- **Errors**: an invocation that raises (an unreachable member's ``ModelCallError``, any other
  error) leaves its protocol question failed: every model call it made (the samples and failed
  attempts of the nodes that finished, the attempts of the call that raised, and those of the calls
  cut short beside it: async requests then in flight as failed attempts with error ``cancelled``,
  each under the question whose graph run made it)
  is written as a ``model_calls`` row under the question's id, with no ``questions`` row, and the
  run ends ``failed`` with the id in its summary's ``failed_questions``, as ``agora run`` writes
  them. With a checkpointer, resuming the invocation finishes the question, which is then recorded
  whole (the rows written before are written again, not twice: a row is keyed by its call id).
  Ctrl-C inside an invocation (``KeyboardInterrupt``) leaves a failed question too, as a stream
  closed early does.
- **Retries within an invocation**: a question asked again, with the same input, after a try of it
  raised (a ``with_retry`` or ``with_fallbacks`` around the protocol graph or the app's graph, or
  the app's own retry loop) is the same question: its tries are recorded under one id, and it is
  answered once a try answers (an earlier try's failed attempts are kept, not the samples it got
  before it raised: the question's samples are the answering try's).
- **Replays** from an earlier checkpoint (time travel: ``invoke(None, {"configurable": {"thread_id": ...,
  "checkpoint_id": ...}})``): a question of its own, ``<id>-replay`` (``-replay-2``, ...) of the
  question last recorded on the thread, with the calls the replay made; its input is the thread's
  (:data:`agora.graphs.scoring.RESUMED_INPUT`, the input the replayed checkpoint descends from; a
  fork whose ``question`` the app edited with ``update_state`` is that question, without gold).
- **One recorder per database on an invocation**: a second recorder of the same database (another
  ``run_id``) on an invocation the first records is refused as the invocation starts
  (:class:`RecorderConflictError`): the two would write the same model calls.

What it does not record: a question resumed through another recorder (or process) than the one
that saw it start (its earlier nodes are not known: it is skipped, with a logged warning, and no
longer counted ``paused`` in its run's summary once finished; use
:func:`agora.graphs.runner.run_problems` for resumable runs), duels and CUPID sessions (they have
their own drivers and records: :func:`agora.runs.duel.run_duels`,
:func:`agora.runs.selection.run_session`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import sys
import threading
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.constants import START
from langgraph.errors import GraphBubbleUp

from agora.tasks.errors import InputError
from agora.graphs import registry
from agora.graphs.question import as_problem, check_question_id
from agora.tasks.problem import SAME_ID, id_clash
from agora.graphs.runner import default_detail, question_failed, scored_values
from agora.graphs.scoring import GRAPH_METADATA_KEY, RESUMED_INPUT
from agora.models.pool import unreturned_attempts
from agora.models.urls import shown_url
from agora.traces.errors import ResumeRefusedError, RunLockedError
from agora.traces.resume import refusal
from agora.traces.store import MAX_STORED_RUN_ID_CHARS, TraceStore, check_run_id

log = logging.getLogger("agora.recording")


_REPLAY_OF = "__agora_replay_of__"
"""The inputs key a replayed question's run carries (the recorder's own): the id of the question it
replays (a replay from an earlier checkpoint is recorded as ``<that id>-replay``, ``-replay-2``, ...)."""


class QuestionRecordedError(InputError):
    """A caller's ``question_id`` that the recording's run has already answered (one line)."""


class RecorderConflictError(RuntimeError):
    """Two recorders of one trace database on one invocation (one line): each model call is one row,
    keyed by its call id, so the second recorder's rows would replace the first's."""


def _inside_graph_node() -> bool:
    """Whether the code running now is inside a LangGraph node (the runnable config LangChain
    keeps in the context names one): a model call made there belongs to that graph's run; one
    made outside any graph is the app's own."""
    from langchain_core.runnables.config import var_child_runnable_config

    metadata = (var_child_runnable_config.get() or {}).get("metadata") or {}
    return "langgraph_node" in metadata or GRAPH_METADATA_KEY in metadata


def _calling_run() -> UUID | None:
    """The id of the run a model call is made in now (the callback manager of the runnable config
    LangChain keeps in the context: a graph node's run, under its graph's), or ``None`` outside one."""
    from langchain_core.runnables.config import var_child_runnable_config

    callbacks = (var_child_runnable_config.get() or {}).get("callbacks")
    return getattr(callbacks, "parent_run_id", None)


class RecorderNotInheritedError(RuntimeError):
    """A recorder the invocation's nodes do not inherit (one line): it would see no question."""


_LIVE: dict[str, "weakref.WeakSet[TraceRecorder]"] = {}
"""Trace database → the recorders of this process writing to it (their invocations are checked
against each other's: :class:`RecorderConflictError`)."""
_LIVE_LOCK = threading.Lock()

_OPEN_TOP: ContextVar[tuple["TraceRecorder", UUID] | None] = ContextVar("agora_recorder_top", default=None)
"""The outermost run a recorder last started in this context: one whose start another callback
refused (it raised in ``on_chain_start`` after the recorder's: no end is ever reported for it) is
found here and dropped (:meth:`TraceRecorder._drop_dead_start`)."""


def _database_key(store: TraceStore) -> str:
    """What names ``store``'s database within this process: an SQLite file's real path, a URL as
    given, an in-memory database by its store."""
    path = str(store.path)
    if path == ":memory:" or path.startswith("<"):
        return f"{path}#{id(store)}"
    return path if "://" in path else os.path.realpath(path)


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
    error: BaseException | None = None
    thread: tuple[str, str] | None = None
    """``(thread_id, checkpoint_ns)`` of a run under a checkpointer's thread (what a resume finds)."""
    unreturned: Any = None
    """The outermost run's :func:`agora.models.pool.unreturned_attempts` context (entered, its list)."""
    top_token: Any = None
    """The outermost run's :data:`_OPEN_TOP` token."""
    graph: str | None = None
    """A protocol graph's context class name (:data:`agora.graphs.scoring.GRAPH_METADATA_KEY`)."""
    task: Any = None
    """The outermost run's: the asyncio task it started in (:func:`_current_task`)."""
    closed: bool = False
    """The outermost run's: it ended because the app closed its stream before the end (``GeneratorExit``,
    or an ``astream_events`` stream closed: :func:`_events_stream_closed`)."""
    pool_check: str | None = None
    """A protocol graph run of a recorder given no ``pool``, whose protocol's run exists in the
    database: the protocol whose recorded pool its first model call's pool is compared with."""
    pool_seen: Any = None
    """The outermost run's: the description of the pool its first model call went through."""
    origins: dict[Any, UUID | None] = field(default_factory=dict)
    """The outermost run's: ``call_id`` of each attempt cut short under it → the run that made the call
    (:func:`_calling_run`), so each stopped question gets its own."""
    unseen_graph: str | None = None
    """A node whose parent run this recorder did not see (it was given to the child runs only, as
    ``CallbackManager([], inheritable_handlers=[recorder])`` gives it): the protocol graph's context
    class its run metadata names (:data:`~agora.graphs.scoring.GRAPH_METADATA_KEY`), if any."""


@dataclass
class _Held:
    """The part of a protocol question seen before it paused or raised, kept for its resume."""

    protocol: str
    inputs: dict[str, Any]
    updates: list[dict[str, Any]]
    wall_s: float
    question_id: str | None = None
    """Set once the question was written as failed (its attempts are under this id)."""


_NO_POOL_ADVICE = ("this TraceRecorder was given no pool=, so the pool its invocations' model calls go through is "
                   "compared; give it another run_id, or the pool that run was recorded with")


def _described(pool: Any) -> Any:
    """A pool's description as a run row stores it (``ModelPool.describe()``; a list as it is)."""
    return pool.describe() if hasattr(pool, "describe") else pool


def _thread_key(thread: tuple[str, str], inputs: dict[str, Any]) -> tuple[str, str, str, str]:
    """A question asked on a checkpointer's thread: its thread, namespace, text and caller's id."""
    return (*thread, str(inputs.get("question")), str(inputs.get("question_id") or ""))


def _current_task() -> asyncio.Task | None:
    """The asyncio task running now (``None`` outside an event loop: a sync invocation)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _events_stream_closed(error: BaseException | None, task: asyncio.Task | None) -> bool:
    """Whether ``error``, ending an outermost run started in ``task``, is LangChain's ``astream_events``
    closing that task because the app closed the event stream (broke off its ``async for``):
    ``astream_events`` consumes the graph's ``astream`` in a task of its own (``consume_astream``) and
    cancels it once on its way out; when the app's own task was cancelled it cancels it first with
    that cancellation, so twice (``Task.cancelling()``)."""
    if not isinstance(error, asyncio.CancelledError) or task is None:
        return False
    name = getattr(task.get_coro(), "__qualname__", "") or ""
    return name.endswith(".consume_astream") and task.cancelling() == 1


def _raised_in_chain_end(error: BaseException) -> list[tuple[UUID, Any]]:
    """``(run id, outputs)`` of each chain run whose ``on_chain_end`` callback raised ``error`` (another
    handler of the invocation, with ``raise_error``), found in ``error``'s traceback: LangChain's
    ``handle_event`` frame holds the event's outputs and run id. Empty for an error the run raised."""
    found = []
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if (frame.f_code.co_name in ("handle_event", "_ahandle_event_for_handler")
                and frame.f_globals.get("__name__") == "langchain_core.callbacks.manager"):
            local = frame.f_locals
            args, kwargs = local.get("args") or (), local.get("kwargs") or {}
            if local.get("event_name") == "on_chain_end" and args and isinstance(kwargs.get("run_id"), UUID):
                found.append((kwargs["run_id"], args[0]))
        tb = tb.tb_next
    return found


def _hear_first(recorder: "TraceRecorder") -> None:
    """Put ``recorder`` first among the handlers of the callback manager starting the outermost run
    it is told of now (found on the stack: LangChain's ``CallbackManager.on_chain_start`` frame), and
    among the handlers its child runs inherit, so it hears each run's end and error before the app's
    own handlers: one of them raising there (with ``raise_error``) stops LangChain telling the
    handlers after it, and a question whose error the recorder never heard was left ``unfinished``,
    its calls unwritten. The lists are the invocation's own (LangChain copies the app's handlers into
    them); the recorder moves while LangChain iterates the list past it, which keeps the handlers after
    it in their places (those before it were told already)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return
        if (frame.f_code.co_name == "on_chain_start"
                and frame.f_globals.get("__name__") == "langchain_core.callbacks.manager"):
            break
        frame = frame.f_back
    else:
        return
    manager = frame.f_locals.get("self")
    for handlers in (getattr(manager, "handlers", None), getattr(manager, "inheritable_handlers", None)):
        if not isinstance(handlers, list):
            continue
        at = next((n for n, h in enumerate(handlers) if h is recorder), None)
        # ahead of the app's handlers, not of other recorders: their order decides which one records
        # an invocation both were given (the first; the second is refused)
        to = next((n for n, h in enumerate(handlers) if not isinstance(h, TraceRecorder) or h is recorder), None)
        if at is not None and to is not None and to < at:
            handlers.insert(to, handlers.pop(at))


def _update_of(outputs: Any) -> dict[str, Any] | None:
    """A node's state update: its dict, or a ``Command``'s ``update``."""
    if isinstance(outputs, dict):
        return outputs
    update = getattr(outputs, "update", None)
    return update if isinstance(update, dict) else None


@functools.cache
def _protocol_nodes() -> dict[str, frozenset[str]]:
    """Benchmark protocol → the names of its graph's nodes (built once, when first needed)."""
    return {spec.name: frozenset(spec.build().nodes) for spec in registry.specs() if spec.kind == "benchmark"}


@functools.cache
def _protocol_entries() -> dict[str, frozenset[str] | None]:
    """Benchmark protocol → the nodes its graph runs first (an edge or a branch from ``START``), every
    question of it starts there; ``None`` where a branch from ``START`` may go anywhere."""
    entries: dict[str, frozenset[str] | None] = {}
    for spec in registry.specs():
        if spec.kind != "benchmark":
            continue
        builder = spec.build()
        first = {end for start, end in builder.edges if start == START}
        ends = [getattr(branch, "ends", None) for branch in builder.branches.get(START, {}).values()]
        entries[spec.name] = None if any(e is None for e in ends) else frozenset(
            first.union(*(e.values() for e in ends)))
    return entries


def _merged(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """Node updates folded into one state: lists concatenated (the protocols' list channels add), other
    values replaced."""
    values: dict[str, Any] = {}
    for update in updates:
        for key, value in update.items():
            if isinstance(value, list) and isinstance(values.get(key), list):
                values[key] = values[key] + value
            else:
                values[key] = value
    return values


class TraceRecorder(BaseCallbackHandler):
    """Record the protocol questions of the runs it is passed to (``config={"callbacks": [it]}``).

    Args:
        db: the trace database (a path, created if missing, or an open :class:`TraceStore`).
        run_id: the recording's name: protocol ``p``'s questions go to run ``<run_id>-<p>`` (a
            run row holds one protocol), created on its first question; the same ``run_id`` again
            adds to those runs (each invocation its own question: the module docstring).
        config: what the runs' rows store as their settings (default: ``{"recorded_by": "TraceRecorder"}``).
        pool: the pool the runs' rows describe (a ``ModelPool`` or a list of member dicts); default:
            the pool the first model call of a run's first question went through (its
            ``describe()``). Without it, a run found in the database is compared with the pool of
            an invocation's first model call before that call sends anything
            (:class:`~agora.traces.errors.ResumeRefusedError` for other models: no model asked).

    Recording errors (the database, a run id that holds another protocol, a repeated
    ``question_id``: :class:`QuestionRecordedError`, a database file deleted or replaced since it
    was opened, or a store the app closed: :class:`~agora.traces.errors.TraceStoreError`, another
    recorder of the same database on the invocation: :class:`RecorderConflictError`, a recorder the
    graph's nodes do not inherit, ``CallbackManager([recorder])``, or one only they inherit,
    ``CallbackManager([], inheritable_handlers=[recorder])``: :class:`RecorderNotInheritedError`,
    before the first model call) are raised in
    the invocation that ran the question (``raise_error``), not logged and lost.

    Run status: as ``agora run`` records it (:func:`agora.graphs.runner.run_problems`): ``failed``
    when any of a protocol's questions failed (their ids and last errors in the summary's
    ``failed_questions``), else the status :meth:`finish` is given (``finished`` on a clean exit).

    Raises:
        ValueError: a ``run_id`` that :func:`agora.traces.store.check_run_id` refuses (blank, control
            characters), before the database is opened or created; a ``TraceStore`` opened read-only.
        TraceStoreError: a ``TraceStore`` that was closed (one line naming its file).
        RuntimeError: in an invocation started after the recorder's ``with`` block ended (its runs
            are marked ended; nothing is written).

    A stream closed before its end (``GeneratorExit``) or an async invocation cancelled
    (``asyncio.CancelledError``: ``task.cancel()``, ``asyncio.wait_for``'s timeout) leaves a failed
    question: the calls of its finished nodes are written, its error ``the invocation was abandoned ...``;
    a cancelled invocation's async model calls then in flight are written as failed attempts (error
    ``cancelled``). The question keeps its id, so the next invocation of its text is another question.
    """

    raise_error = True
    run_inline = True
    """Called in the invocation's own context, async runs too: the outermost run collects the failed
    attempts of model calls cut short (:func:`agora.models.pool.unreturned_attempts`). It also puts
    itself first among the invocation's handlers (:func:`_hear_first`): an app handler raising in
    ``on_chain_error`` or ``on_chain_end`` no longer hides a run's end from it."""

    def __init__(self, db: str | Path | TraceStore, run_id: str, *, config: Any = None, pool: Any = None):
        super().__init__()
        self.run_id = check_run_id(run_id, "run_id", max_chars=MAX_STORED_RUN_ID_CHARS)
        if isinstance(db, TraceStore) and db.readonly:
            raise ValueError(f"TraceRecorder {self.run_id!r}: the trace store {shown_url(str(db.path))} is open read-only; "
                             "give the database path (or a TraceStore opened for writing)")
        self.store = db if isinstance(db, TraceStore) else TraceStore(db)
        self.config = config if config is not None else {"recorded_by": "TraceRecorder"}
        self.pool = pool.describe() if hasattr(pool, "describe") else pool
        self.run_ids: dict[str, str] = {}
        """Protocol → the run id its questions are recorded under."""
        self.recorded: dict[str, int] = {}
        """Protocol → questions recorded by this recorder."""
        self.failed: dict[str, int] = {}
        """Protocol → questions that failed (every model call failed, or the invocation raised): their
        failed attempts are stored, no answer."""
        self.failed_questions: dict[str, dict[str, str]] = {}
        """Protocol → failed question id → its last error (as the runner's summary)."""
        self._runs: dict[UUID, _Run] = {}
        self._held: dict[tuple[str, str], _Held] = {}
        self._lock = threading.RLock()
        self._protocols = {spec.name: spec for spec in registry.specs() if spec.kind == "benchmark"}
        self._by_context = {spec.context.__name__: spec.name for spec in self._protocols.values()}
        self._closed = False
        """Set when the ``with`` block ends: its runs are marked ended, an invocation after it is refused."""
        self._locks: dict[str, contextlib.ExitStack] = {}
        """Protocol → the live-run lock of its run (:attr:`run_ids`), held from the run's first question
        (or its first question after a :meth:`finish`) to :meth:`finish`."""
        self._status = "finished"
        """The status :meth:`finish` was last given (a closed stream's end reported after it: its question
        is recorded and the run marked again with it)."""
        self._resumable: set[str] = set()
        """Protocols whose run in the database was found to take this recorder's questions."""
        self._resolved: dict[str, Any] = {}
        """Without a ``pool``: protocol → the pool its run in the database was recorded with, once
        the pool of a first model call was found to be that one (:meth:`_before_call`)."""
        self._late: set[UUID] = set()
        """Invocations still running when :meth:`finish` marked the runs: not written when they end."""
        self._marked_paused: dict[str, int] = {}
        """Protocol → the ``paused`` count :meth:`finish` last wrote in its run's summary."""
        self._before: dict[str, dict[str, Any]] = {}
        """Protocol → the summary its run's row held when this recorder first took it (an earlier
        ``with`` block's of the same ``run_id``): :meth:`finish` counts those questions too."""
        self._resumed: dict[str, int] = {}
        """Protocol → questions this recorder saw finish but not start (paused in an earlier ``with``
        block of the run_id, or by another recorder): :meth:`finish` counts that many fewer of the
        earlier blocks' ``paused``."""
        self._marked_resumed: dict[str, int] = {}
        """Protocol → the :attr:`_resumed` count :meth:`finish` last took off its run's ``paused``."""
        self._dropped: dict[str, int] = {}
        """Protocol → paused questions dropped by a fresh input on their thread (not recorded)."""
        self._written: dict[UUID, tuple[dict[UUID, tuple[str, str]], tuple[str, str]]] = {}
        """Outermost run recorded with stopped questions → (each run under a stopped question → its
        ``(protocol, question id)``, the first stopped question's): where the attempts of calls cut
        short that report after the invocation was recorded are written (:meth:`_collected`)."""
        self._seen: Any = None
        """While an invocation's questions are written: the pool its first model call went through."""
        self._thread_questions: dict[tuple[str, str, str, str], str] = {}
        """``(thread_id, checkpoint_ns, question, question_id)`` (:func:`_thread_key`) → the id of the
        question last recorded on the thread from that input (answered or failed): what a replay
        from one of its checkpoints replays."""
        self.store.check_open()
        self._shown = shown_url(str(self.store.path))
        """The database as the recorder's messages name it (a URL's password as ``***``)."""
        self._database = _database_key(self.store)
        with _LIVE_LOCK:
            _LIVE.setdefault(self._database, weakref.WeakSet()).add(self)

    @property
    def parent_run_id(self) -> None:
        """Not a callback manager's attribute: LangChain reads ``parent_run_id`` of a ``callbacks``
        value that is not a list, taking it for a callback manager; for a recorder passed alone
        (``{"callbacks": recorder}``) that read fails here with the fix.

        Raises:
            TypeError: always (``pass the TraceRecorder in a list: config={"callbacks": [recorder]}``).
        """
        raise TypeError(f"TraceRecorder {self.run_id!r} was passed as callbacks alone; pass it in a list: "
                        'config={"callbacks": [recorder]}')

    # ------------------------------------------------------------------ LangChain callbacks

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or ""
        metadata = metadata or {}
        # LangGraph's own input step (``__start__``, traced when a conditional edge or ``Send`` fan-out
        # leaves START) is no node of a protocol: it neither starts one nor tells which protocol ran
        node = metadata.get("langgraph_node") == name and name != START
        thread_id = (metadata.get("configurable") or {}).get("thread_id", metadata.get("thread_id"))
        thread = (str(thread_id), str(metadata.get("checkpoint_ns") or "")) if thread_id is not None else None
        self._refuse_shared(run_id, parent_run_id)
        if parent_run_id not in self._runs and not self._closed:
            self.store.check_open()  # (a store the app closed: one line naming it, before anything runs)
        with self._lock:
            run = self._runs[run_id] = _Run(parent=parent_run_id, name=name, node=node, inputs=inputs, thread=thread,
                                            graph=None if node else metadata.get(GRAPH_METADATA_KEY))
            if node and parent_run_id is not None and parent_run_id not in self._runs:
                run.unseen_graph = metadata.get(GRAPH_METADATA_KEY)
            if not node and not isinstance(inputs, dict) and metadata.get("checkpoint_id") and thread is not None \
                    and thread not in self._held:
                run.inputs = self._replayed_input(thread, str(metadata["checkpoint_id"])) or inputs
            if not node and thread is not None and thread in self._held and (not isinstance(inputs, dict) or thread[1]):
                self._edited_while_paused(thread)  # (resumed: with None or a Command, or as a parent graph's node)
            if parent_run_id not in self._runs and self._closed:
                del self._runs[run_id]
                raise RuntimeError(
                    f"TraceRecorder {self.run_id!r}: used after its with block ended (its runs are marked ended); "
                    "make a new TraceRecorder for later invocations")
            if parent_run_id in self._runs:
                parent = self._runs[parent_run_id]
                if node and not any(self._runs[c].node for c in parent.children if c in self._runs):
                    # a graph's first node (each of a fan-out's): a repeated question_id stops here
                    try:
                        self._refuse_unresumable(parent, name)
                        self._refuse_repeat(parent, name)
                    except BaseException:
                        del self._runs[run_id]  # (it never runs: not left behind as an unfinished run)
                        raise
                parent.children.append(run_id)
                return
            if thread is not None and isinstance(inputs, dict):  # a fresh start on the thread: no resume
                for key in [k for k in self._held if k[0] == thread[0]]:
                    dropped = self._held.pop(key)
                    if dropped.question_id is None:  # paused, never finished: counted as paused
                        self._dropped[dropped.protocol] = self._dropped.get(dropped.protocol, 0) + 1
        _hear_first(self)
        self._drop_dead_start(run_id)
        collector = unreturned_attempts(in_flight=True, before_call=functools.partial(self._before_call, run_id),
                                        collected=functools.partial(self._collected, run_id))
        run.unreturned = (collector, collector.__enter__())
        run.top_token = _OPEN_TOP.set((self, run_id))
        run.task = _current_task()

    @staticmethod
    def _drop_dead_start(starting: UUID | None = None) -> None:
        """Forget the outermost run a recorder last started in this context if it never got going:
        not ended, no node started under it. Another callback handler of the invocation raised in
        its ``on_chain_start`` after the recorder's (LangChain then reports no end to anyone), so
        the invocation raised before anything ran; kept, it counted as ``unfinished`` in the runs'
        summaries. Called when a recorder starts another outermost run in the context and when its
        ``with`` block ends (until then its model-call hook stays in the context: a model call made
        there without a recorder is refused, ``RecorderNotInheritedError``). ``starting``: the run
        being started now; the same run in the context is the same invocation seen by another
        recorder (two recorders passed to one invocation), which is not a dead start."""
        found = _OPEN_TOP.get()
        if found is None:
            return
        recorder, rid = found
        if rid == starting:
            return
        with recorder._lock:
            run = recorder._runs.get(rid)
            if run is None or run.ended or run.error is not None or run.children:
                return
            del recorder._runs[rid]
        with contextlib.suppress(ValueError, RuntimeError):
            _OPEN_TOP.reset(run.top_token)
        if run.unreturned is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                run.unreturned[0].__exit__(None, None, None)

    def _replayed_input(self, thread: tuple[str, str], checkpoint_id: str) -> Any:
        """A protocol graph run replaying its thread from an earlier checkpoint (time travel:
        ``invoke(None, {"configurable": {"thread_id": ..., "checkpoint_id": ...}})``): the thread's
        input (:data:`agora.graphs.scoring.RESUMED_INPUT`) marked as a replay of the question this
        recorder recorded on the thread (else of the input's ``question_id``, else of its text's
        ``q-<crc32>``), so it is recorded as a question of its own; ``None`` when it is none."""
        resumed = RESUMED_INPUT.get()
        if resumed is None or resumed[0] != thread[0] or resumed[1] != checkpoint_id:
            return None
        inputs = resumed[2]
        if not isinstance(inputs.get("question"), str) or not inputs["question"].strip():
            return None
        original = (self._thread_questions.get(_thread_key(thread, inputs)) or inputs.get("question_id")
                    or as_problem(inputs).id)
        return {**inputs, _REPLAY_OF: str(original)}

    def _edited_while_paused(self, thread: tuple[str, str]) -> None:
        """A held question's thread resumed (input ``None`` or a ``Command``) after the app edited its
        ``question`` (``update_state`` on the paused thread): what is held of it takes the input as
        the resumed graph asks and scores it (:data:`agora.graphs.scoring.RESUMED_INPUT`: the edited
        question, without the first input's ``gold`` and ``question_id``), so it is recorded as the
        app's output shows it, not as the first sitting's input. An edit that leaves the question as
        it was changes nothing."""
        resumed = RESUMED_INPUT.get()
        held = self._held[thread]
        if resumed is None or resumed[0] != thread[0] or not held.inputs:
            return
        asked = resumed[2]
        if isinstance(asked.get("question"), str) and asked["question"].strip() \
                and asked["question"] != held.inputs.get("question"):
            held.inputs = dict(asked)

    def _collected(self, root: UUID, records: list[dict[str, Any]]) -> None:
        """The failed attempts of a model call under the outermost run ``root`` that raised or was
        cancelled (:func:`agora.models.calls.unreturned_attempts`), told in the call's context: the
        run that made it is noted, so each stopped question gets its own. Attempts told after
        ``root`` was recorded (an async fan-out's other branches, cancelled by LangGraph after the
        error that ended the invocation left it) are written now, under the stopped question whose
        run made the call (else the first stopped), while its run is this recorder's."""
        origin = _calling_run()
        with self._lock:
            written = self._written.get(root)
            if written is None:
                run = self._runs.get(root)
                if run is not None:
                    run.origins.update((r.get("call_id"), origin) for r in records)
                return
            owners, first = written
            protocol, qid = owners.get(origin, first)
            if protocol not in self._locks:  # (the runs were marked since: finish() or the block's end)
                return
            self.store.record_calls(self.run_ids[protocol], protocol, qid, [{**r, "question_id": qid} for r in records])

    def _refuse_shared(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        """Raise :class:`RecorderConflictError` when another recorder of the same database records the
        run starting (both passed to one invocation, or one to an invocation inside the other's):
        the two would write the same model calls, and the second one's rows would replace the
        first's (a ``model_calls`` row is keyed by its call id alone), leaving the first run's
        questions without their calls. Checked on the topmost run the two share (not on each node
        under it); the run never starts, and the other recorder forgets it. Two recorders of one
        ``run_id`` are left to the run's live-run lock (:class:`RunLockedError` when they record)."""
        with _LIVE_LOCK:
            others = [r for r in _LIVE.get(self._database, ()) if r is not self and r.run_id != self.run_id]
        for other in others:
            if run_id in other._runs and not (parent_run_id in self._runs and parent_run_id in other._runs):
                other._drop_refused(run_id)
                raise RecorderConflictError(
                    f"TraceRecorder {self.run_id!r}: this invocation is recorded into {self._shown} by "
                    f"TraceRecorder {other.run_id!r} too; two recorders of one database would write the same model "
                    "calls (the second's rows replacing the first's), so it was not run: pass one TraceRecorder "
                    "per database to an invocation")

    def _drop_refused(self, run_id: UUID) -> None:
        """Forget a run that another recorder refused as it started (:meth:`_refuse_shared`: it never
        runs, so no end is reported for it)."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is None:
                return
            parent = self._runs.get(run.parent)
            if parent is not None and run_id in parent.children:
                parent.children.remove(run_id)
        if run.unreturned is not None:
            with contextlib.suppress(ValueError):
                run.unreturned[0].__exit__(None, None, None)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, outputs, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        # an app's callback handler placed before this one that raised in a run's on_chain_end: that
        # run finished (this recorder never heard of its end), so it is ended with its outputs; the
        # graph's own end among them is recorded as answered (the app's error still reaches the app)
        for rid, outputs in _raised_in_chain_end(error):
            with self._lock:
                run = self._runs.get(rid)
                if run is None or run.ended or run.error is not None:
                    continue
            self._ended(rid, outputs, None)
            if rid == run_id:
                return
        self._ended(run_id, None, error)

    def _ended(self, run_id: UUID, outputs: Any, error: BaseException | None) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return
            run.outputs, run.error, run.ended = outputs, error, error is None
            run.wall_s = time.perf_counter() - run.started
            if run.parent in self._runs:
                return
            run.closed = isinstance(error, GeneratorExit) or _events_stream_closed(error, run.task)
            closed_late = False
            try:  # the outermost run this recorder saw: record what ran under it
                if run_id in self._late:
                    self._late.discard(run_id)
                    # an asyncio task the app cancelled before finish() (``task.cancel()``, an
                    # ``astream_events`` stream closed: its task cancelled): the cancellation reaches the
                    # task a few event-loop turns later, after the block's end; it was cancelled in the
                    # block, so it is recorded, and the runs marked again. A stream closed with
                    # ``close()`` or ``aclose()`` reports its end before the call returns (a protocol
                    # graph's ``astream`` closes LangGraph's with it): closed after the block, not in it
                    closed_late = isinstance(error, asyncio.CancelledError) and run.task is not None
                    if closed_late:
                        self._record_tree(run_id)
                    else:
                        self._refuse_late(error)
                else:
                    self._record_tree(run_id)
            finally:
                self._forget(run_id)
                if run.top_token is not None:
                    with contextlib.suppress(ValueError, RuntimeError):  # (ended in another context)
                        _OPEN_TOP.reset(run.top_token)
                if run.unreturned is not None:
                    try:
                        run.unreturned[0].__exit__(None, None, None)
                    except ValueError:  # (ended in another context than it started: nothing to restore)
                        pass
            if closed_late:
                self.finish(self._status)

    def _refuse_late(self, error: BaseException | None) -> None:
        """An invocation that was running when :meth:`finish` marked the runs ended: its questions are
        not written (the runs' rows and summaries are final, their live-run locks released; the
        summary counted it as ``unfinished``, where the recorder had written a run).

        Raises:
            RuntimeError: the invocation ended normally (one line); one that raised keeps its own
                error (logged here).
        """
        counted = ("the run's summary counts it as unfinished" if self.run_ids else
                   "the recorder had written no run whose summary could count it as unfinished")
        message = (f"TraceRecorder {self.run_id!r}: its with block ended while this invocation ran, so its "
                   f"questions were not recorded ({counted}); end the block "
                   "after the invocations that use the recorder")
        if error is None:
            raise RuntimeError(message)
        log.warning("%s", message)

    # ------------------------------------------------------------------ recording

    def _refuse_repeat(self, graph_run: _Run, first_node: str) -> None:
        """Before a protocol graph's first node runs: raise :class:`QuestionRecordedError` when its
        caller's ``question_id`` is answered in that protocol's run already (no model call made)."""
        inputs = graph_run.inputs
        if graph_run.node or not isinstance(inputs, dict) or not inputs.get("question_id") or not inputs.get("question"):
            return
        if inputs.get(_REPLAY_OF):
            return  # a replay from an earlier checkpoint: a question of its own (``<id>-replay``)
        if graph_run.thread is not None and graph_run.thread in self._held:
            return  # a paused or stopped question resumed: the same invocation
        protocols = [p for p, names in _protocol_nodes().items() if first_node in names]
        if len(protocols) == 1:
            self._refuse_repeat_id(protocols[0], inputs)

    def _refuse_unresumable(self, graph_run: _Run, first_node: str) -> None:
        """Before a protocol graph's first node runs, the first time this recorder meets the
        protocol: raise :class:`~agora.traces.errors.ResumeRefusedError` (no model asked) when the
        protocol's run in the database was recorded with another protocol, other settings
        (``config``) or, when given, another ``pool`` (before, the models answered first and the
        refusal came when the question was to be written, with the command line's advice)."""
        inputs = graph_run.inputs
        if graph_run.node or not isinstance(inputs, dict) or not inputs.get("question"):
            return
        protocols = [p for p, names in _protocol_nodes().items() if first_node in names]
        if len(protocols) != 1 or protocols[0] in self.run_ids:
            return
        protocol = protocols[0]
        if protocol not in self._resumable:
            message = self._refusal(protocol, self.pool, " (no model was asked; nothing was written)")
            if message:
                raise ResumeRefusedError(message)
            self._resumable.add(protocol)
        if (self.pool is None and protocol not in self._resolved
                and self.store.get_run(f"{self.run_id}-{protocol}") is not None):
            graph_run.pool_check = protocol  # its pool is known at its first model call: compared there

    def _before_call(self, root: UUID, pool: Any, name: str) -> None:
        """Before a model call of the invocation ``root`` sends anything (:func:`agora.models.calls.
        before_call`): the pool it goes through is the invocation's pool when the recorder was given
        none (the default pool of a new run); a protocol run in the database whose graph is waiting
        for that pool (:attr:`_Run.pool_check`) is compared with it, and a run recorded with another
        pool is refused here, before any request (:meth:`_pool_refusal`).

        Raises:
            ResumeRefusedError: the run was recorded with another pool (one line naming ``pool=``,
                then the pools' differences).
            RecorderNotInheritedError: the recorder saw the invocation's graph start but none of its
                nodes (passed as a handler that child runs do not inherit): the question could not
                be recorded, so no model is asked."""
        self._refuse_uninherited(root)
        if self.pool is not None:
            return
        with self._lock:
            top = self._runs.get(root)
            if top is None:
                return
            described = None
            if top.pool_seen is None:
                described = top.pool_seen = _described(pool)
            waiting, todo = [], [root]
            while todo:
                run = self._runs.get(todo.pop())
                if run is None:
                    continue
                if run.pool_check is not None and run.pool_check not in self._resolved:
                    waiting.append(run.pool_check)
                todo.extend(run.children)
            for protocol in dict.fromkeys(waiting):
                described = described if described is not None else _described(pool)
                message, stored = self._pool_refusal(protocol, described)
                if message:
                    raise ResumeRefusedError(message)
                self._resolved[protocol] = stored

    def _refuse_uninherited(self, root: UUID) -> None:
        """Raise :class:`RecorderNotInheritedError` when a model call is about to be made under the
        graph run ``root`` while the recorder has seen none of that graph's nodes: it was given as a
        handler the graph's child runs do not inherit (``config={"callbacks": CallbackManager([recorder])}``,
        whose handlers are the top run's only), so it would see the graph start and end but no
        node, no model call and no question. A model call is always made inside a node. Also
        when ``root`` is a protocol graph's node whose graph run the recorder did not see (given to
        the child runs only: ``CallbackManager([], inheritable_handlers=[recorder])``): it would see
        the nodes but not the question's input, end or answer."""
        with self._lock:
            top = self._runs.get(root)
            if top is None:
                return
            if top.node:  # a node of a protocol graph whose own run this recorder did not see
                if top.unseen_graph not in self._by_context or any(
                        self._runs[c].node for c in top.children if c in self._runs):
                    return  # (the app's node, or a protocol graph run as the app's node: its nodes are seen)
                raise RecorderNotInheritedError(
                    f"TraceRecorder {self.run_id!r} sees this graph's nodes but not the graph's own run (it was "
                    "passed to the child runs only, as CallbackManager([], inheritable_handlers=[recorder]) passes "
                    "it), so its questions could not be recorded; pass it in a list, "
                    'config={"callbacks": [recorder]}; no model was asked')
            if top.children:
                return
            if top.graph not in self._by_context and top.name != "LangGraph":
                return  # (not a graph: a runnable of the app's own that asks a pool directly)
            dead = not _inside_graph_node()
        if dead:  # a start another callback refused (no node ever ran): the app's own call, unrecorded
            self._drop_dead_start()
            return
        raise RecorderNotInheritedError(
            f"TraceRecorder {self.run_id!r} sees this graph's run but none of its nodes (it was passed as a handler "
            "that child runs do not inherit, as CallbackManager([recorder]) is), so its questions could not be "
            'recorded; pass it in a list, config={"callbacks": [recorder]}; no model '
            "was asked")

    def _pool_refusal(self, protocol: str, pool: Any) -> tuple[str | None, Any]:
        """``(why protocol's run cannot take calls through pool, the run's recorded pool)`` for a
        recorder given no ``pool``: a run recorded with a pool description is compared with
        ``pool``'s as when ``pool=`` is given (:func:`agora.traces.resume.refusal`); one recorded
        with member names only (the models its first question's calls went to) takes any pool
        holding those names."""
        run_id = f"{self.run_id}-{protocol}"
        existing = self.store.get_run(run_id)
        if existing is None:
            return None, None
        stored = self.store._run_json(existing, "pool")
        if isinstance(stored, list) and all(isinstance(m, dict) and set(m) == {"name"} for m in stored):
            missing = [m["name"] for m in stored if m["name"] not in {d.get("name") for d in pool}]
            if not missing:
                return None, stored
            return (f"run id {run_id!r} in {self._shown} was recorded with models {', '.join(missing)}, which "
                    f"the pool of this invocation's model calls ({', '.join(str(d.get('name')) for d in pool)}) "
                    f"lacks; {_NO_POOL_ADVICE} (no model was asked; nothing was written)"), stored
        message = refusal(self.store, run_id, existing, protocol, self.config, pool,
                          suffix=" (no model was asked; nothing was written)", advice=_NO_POOL_ADVICE)
        return message, stored

    def _refusal(self, protocol: str, pool: Any, suffix: str) -> str | None:
        """Why ``protocol``'s run in the database cannot take this recorder's questions
        (:func:`agora.traces.resume.refusal`, with a recorder's advice), or ``None``. ``pool=None``:
        the pool is not compared (the default pool is known from the first question's calls)."""
        run_id = f"{self.run_id}-{protocol}"
        existing = self.store.get_run(run_id)
        if existing is None:
            return None
        return refusal(self.store, run_id, existing, protocol, self.config, pool, pool_may_change=pool is None,
                       suffix=suffix, advice="give this TraceRecorder another run_id, or the config and pool "
                                             "that run was recorded with")

    def _refuse_repeat_id(self, protocol: str, inputs: Any) -> None:
        """Raise :class:`QuestionRecordedError` when ``inputs``' ``question_id`` is answered in
        ``protocol``'s run already."""
        if isinstance(inputs, dict) and inputs.get("question_id") and inputs.get("question"):
            self._question_id(protocol, inputs)

    def _forget(self, root: UUID) -> None:
        todo = [root]
        while todo:
            run = self._runs.pop(todo.pop(), None)
            if run is not None:
                todo.extend(run.children)

    def _protocol_of(self, run: _Run) -> str | None:
        """The benchmark protocol whose graph ``run`` is and that finished (see the module docstring)."""
        methods = run.outputs.get("methods") if isinstance(run.outputs, dict) else None
        if not isinstance(methods, dict) or not methods or not run.ended:
            return None
        first = next(iter(methods))
        if first not in self._protocols:
            return None
        nodes = {self._runs[c].name for c in run.children if c in self._runs and self._runs[c].node}
        if not nodes:
            return None  # a node that writes methods (principal_select), not a graph
        if not nodes <= _protocol_nodes()[first]:
            return None  # the app's own graph, whose state keeps the protocol's methods: its protocol run is inside
        return first

    def _unfinished_protocol(self, run: _Run) -> str | None:
        """The protocol of a graph run that ended without ``methods`` (paused, or stopped by an error):
        the one held for its thread, else the one protocol whose graph has every node that ran."""
        if run.node:
            return None
        held = self._held.get(run.thread) if run.thread is not None else None
        if held is not None:
            return held.protocol
        nodes = {self._runs[c].name for c in run.children if c in self._runs and self._runs[c].node}
        if not isinstance(run.inputs, dict) or not run.inputs.get("question"):
            return None
        if not nodes:  # paused before its first node (a breakpoint there): known by its graph's metadata
            # (a graph run inside another pauses by raising GraphInterrupt; one that ended without an
            # error and ran no node got its answer from its checkpoint: a protocol graph called in the
            # app's node, answered before the node paused and run again on its resume; that question
            # was recorded as it was answered, and nothing is paused)
            nested = bool(run.thread[1]) if run.thread is not None else False
            paused = run.thread is not None and (isinstance(run.error, GraphBubbleUp)
                                                 or (run.error is None and not nested))
            return self._by_context.get(run.graph) if paused else None
        matches = [p for p, names in _protocol_nodes().items() if nodes <= names]
        return matches[0] if len(matches) == 1 else None

    def _still_running_protocol(self, run: _Run) -> bool:
        """Whether ``run`` is a protocol graph run that has not ended (neither answered, paused nor
        stopped) while the outermost run it was started under has: a branch the app left running
        (a thread it started with the node's config and did not join)."""
        if run.node or run.ended or run.error is not None or not isinstance(run.inputs, dict):
            return False
        if not run.inputs.get("question"):
            return False
        if run.graph in self._by_context:
            return True
        nodes = {self._runs[c].name for c in run.children if c in self._runs and self._runs[c].node}
        return bool(nodes) and any(nodes <= names for names in _protocol_nodes().values())

    def _detach(self, rid: UUID) -> None:
        """Keep the still-running protocol graph run ``rid`` (and the runs under it) when the outermost
        run it was started under is forgotten: it becomes an outermost run itself, so its question
        is recorded, whole, when it ends (:meth:`_ended`), instead of its nodes' ends finding no run."""
        run = self._runs[rid]
        parent = self._runs.get(run.parent)
        if parent is not None and rid in parent.children:
            parent.children.remove(rid)
        run.parent = None

    def _record_tree(self, root: UUID) -> None:
        found: list[tuple[UUID, str, bool]] = []
        todo = [root]
        while todo:  # outermost protocol runs only: a protocol run's inner graphs belong to it
            rid = todo.pop()
            run = self._runs.get(rid)
            if run is None:
                continue
            if rid != root and self._still_running_protocol(run):
                self._detach(rid)  # recorded when it ends, as an invocation of its own
            elif (protocol := self._protocol_of(run)) is not None:
                found.append((rid, protocol, True))
            elif (protocol := self._unfinished_protocol(run)) is not None:
                found.append((rid, protocol, False))
            else:  # (in the order they started: ids and idx follow the order the questions were asked)
                todo.extend(reversed(run.children))
        unreturned = self._runs[root].unreturned
        # the attempts cut short (calls that raised or were cancelled without returning them), each given
        # to the stopped question whose run made it; those of no stopped question to the first one stopped
        stopped_runs = {rid for rid, _, finished in found if not finished}
        origins = self._runs[root].origins
        own: dict[UUID, list[dict[str, Any]]] = {}
        cut_short = []
        for record in list(unreturned[1]) if unreturned is not None else []:
            owner = self._owner(origins.get(record.get("call_id")), stopped_runs)
            (own.setdefault(owner, []) if owner is not None else cut_short).append(record)
        # the app closed its stream (LangGraph then cancels the tasks of the subgraphs it ran: their
        # questions' error is the closed stream, not a task the app cancelled)
        closed = self._runs[root].closed
        self._seen = self._runs[root].pool_seen  # (under the lock: the default pool of a run started now)
        stopped: list[tuple[_Run, str, str]] = []
        """The questions stopped by an error so far in this invocation: (run, protocol, id)."""
        written: list[tuple[UUID, str, str]] = []
        """Every question written as stopped: (its run, protocol, id)."""
        for n, (rid, protocol, finished) in enumerate(found):
            run = self._runs[rid]
            again = None
            for i in range(len(stopped) - 1, -1, -1):  # the latest try of this question, if it was asked before
                if stopped[i][1] == protocol and self._asked_again(stopped[i][0], run):
                    again = stopped.pop(i)[2]
                    break
            if finished:
                self._record_question(run, protocol, again)
            else:
                answered_later = any(done and p == protocol and self._asked_again(run, self._runs[later])
                                     for later, p, done in found[n + 1:])
                qid = self._hold(rid, protocol, own.pop(rid, []) + cut_short, again, answered_later=answered_later,
                                 closed=closed)
                cut_short = []  # (given to the first question stopped: one invocation, one error)
                if qid is not None:
                    stopped.append((run, protocol, qid))
                    written.append((rid, protocol, qid))
        if written:  # (where attempts told after this are written: _collected)
            owners: dict[UUID, tuple[str, str]] = {}
            for rid, protocol, qid in written:
                todo = [rid]
                while todo:
                    current = todo.pop()
                    owners.setdefault(current, (protocol, qid))
                    if current in self._runs:
                        todo.extend(self._runs[current].children)
            self._written[root] = (owners, written[0][1:])

    def _owner(self, rid: UUID | None, questions: set[UUID]) -> UUID | None:
        """The run among ``questions`` (protocol graph runs) that the run ``rid`` is under, itself
        included, else ``None``."""
        for _ in range(len(self._runs) + 1):
            if rid is None or rid in questions:
                return rid
            run = self._runs.get(rid)
            rid = run.parent if run is not None else None
        return None

    @staticmethod
    def _asked_again(stopped: _Run, run: _Run) -> bool:
        """Whether ``run`` asks again the question ``stopped`` raised on, within one invocation: the
        next try of a ``with_retry`` or ``with_fallbacks`` around the protocol graph or the app's
        graph, or of the app's own retry loop: the same input, started after the stopped one ended
        (not beside it, as a fan-out's)."""
        return (run.inputs == stopped.inputs and stopped.error is not None
                and not isinstance(stopped.error, GraphBubbleUp) and run.started >= stopped.started + stopped.wall_s)

    def _node_updates(self, graph_run: _Run) -> list[dict[str, Any]]:
        """The state updates of the nodes that finished under ``graph_run``, in the order they started."""
        updates = []
        for child in graph_run.children:
            run = self._runs.get(child)
            update = _update_of(run.outputs) if run is not None and run.node and run.ended else None
            if update:
                updates.append(update)
        return updates

    def _failed_attempts(self, rid: UUID) -> list[dict[str, Any]]:
        """The trace records of model calls that raised under run ``rid`` (``ModelCallError.records``)."""
        records, todo = [], [rid]
        while todo:
            run = self._runs.get(todo.pop())
            if run is None:
                continue
            records.extend(getattr(run.error, "records", None) or [])
            todo.extend(run.children)
        return records

    def _hold(self, rid: UUID, protocol: str, cut_short: list[dict[str, Any]],
              again: str | None = None, *, answered_later: bool = False, closed: bool = False) -> str | None:
        """A protocol question that ended without an answer: paused (kept for its resume), or stopped
        by an error (every call it made written now, the question failed; kept for a resume too).
        ``again``: the id of the earlier try this one repeats (:meth:`_asked_again`), taken as its id.
        ``answered_later``: a later try of it in the same invocation answered it (a ``with_retry``):
        this try's failed attempts are written, not the samples its finished nodes got (the
        question's samples are those of the try that answered).
        ``closed``: the invocation's stream was closed before its end (a cancelled subgraph task's
        question says so).
        Returns the id a stopped question was written under (``None`` when paused or refused)."""
        run = self._runs[rid]
        held = self._held.pop(run.thread, None) if run.thread is not None else None
        paused = run.error is None or isinstance(run.error, GraphBubbleUp)
        if held is None and paused and isinstance(run.inputs, dict) and self._resumed_unseen(run, protocol, run.inputs):
            # paused again, a question another recorder saw start: no longer that one's pause, this one's;
            # held without its input, so not recorded when it ends (its first part is unknown here)
            self._resumed[protocol] = self._resumed.get(protocol, 0) + 1
            held = _Held(protocol, {}, [], 0.0)
        inputs = held.inputs if held is not None else run.inputs
        held = _Held(protocol, inputs, (held.updates if held else []) + self._node_updates(run),
                     (held.wall_s if held else 0.0) + run.wall_s, held.question_id if held else None)
        error = run.error
        if isinstance(error, (QuestionRecordedError, ResumeRefusedError)):
            return None  # refused before it ran (or before its first model call): nothing of it is written
        if not held.updates and held.question_id is None and (error is None or isinstance(error, GraphBubbleUp)):
            self._refuse_repeat_id(protocol, inputs)  # paused before its first node: refused now, as there
        if error is not None and not isinstance(error, GraphBubbleUp):  # stopped: a failed question
            # every call the question made is a row (docs/guarantees.md, "every attempt a row"): those of
            # its finished nodes, answered or not (a resume or a retry that answers it rewrites the same
            # rows: a row is keyed by its call id), the attempts of the call that raised, and those of
            # the calls cut short beside it: async requests still in flight when the error (another
            # member's, an abandoned stream's, a cancelled task's, Ctrl-C's) cancelled them (``cancelled``)
            abandoned = isinstance(error, (GeneratorExit, asyncio.CancelledError, KeyboardInterrupt))
            calls = [c for c in _merged(held.updates).get("calls") or [] if not answered_later or c.get("error")]
            attempts, seen = [], set()
            for record in calls + self._failed_attempts(rid) + cut_short:
                if record.get("call_id") not in seen:
                    seen.add(record.get("call_id"))
                    attempts.append(record)
            if held.question_id is None:
                held.question_id = again or self._question_id(protocol, inputs, failing=True)
            if held.question_id is not None:
                qid = held.question_id
                if run.thread is not None:
                    self._thread_questions[_thread_key(run.thread, inputs or {})] = (inputs or {}).get(_REPLAY_OF) or qid
                run_id = self._start(protocol, attempts)
                self.store.record_calls(run_id, protocol, qid, [{**c, "question_id": qid} for c in attempts])
                if isinstance(error, Exception):
                    self._failed(protocol, qid, f"{type(error).__name__}: {error}")
                elif isinstance(error, KeyboardInterrupt):
                    self._failed(protocol, qid, "KeyboardInterrupt: the invocation was interrupted (Ctrl-C)")
                elif isinstance(error, asyncio.CancelledError) and not closed:
                    self._failed(protocol, qid, "the invocation was abandoned (its asyncio task was cancelled)")
                elif abandoned:
                    self._failed(protocol, qid, "the invocation was abandoned (its stream closed before the end)")
        if run.thread is not None:
            self._held[run.thread] = held
        return held.question_id if error is not None and not isinstance(error, GraphBubbleUp) else None

    def _failed(self, protocol: str, question_id: str, error: str) -> None:
        questions = self.failed_questions.setdefault(protocol, {})
        # one line (a summary's errors are shown in tables): LangGraph's GraphRecursionError adds a
        # second, "For troubleshooting, visit: ..."
        questions[question_id] = (error.strip().splitlines() or [""])[0][:200]
        self.failed[protocol] = len(questions)

    def _question_id(self, protocol: str, inputs: dict[str, Any], *, failing: bool = False) -> str | None:
        """The id an invocation's question is recorded under (module docstring): the caller's
        ``question_id``, else the first id of its text that the run has not taken.

        Raises:
            QuestionRecordedError: the caller's ``question_id`` is answered in the run already, or
                is an id of the run spelled otherwise (the same id once compared as ids are:
                :func:`agora.tasks.problem.id_key`, ``q1 `` or ``ｑ１`` for ``q1``), naming both
                (``failing``: ``None`` instead, the invocation's own error is the one raised).
            InputError: the caller's ``question_id`` holds a control or invisible character
                (:func:`agora.graphs.question.check_question_id`)."""
        run_id = f"{self.run_id}-{protocol}"
        given = inputs.get("question_id")
        if inputs.get(_REPLAY_OF):  # a replay from an earlier checkpoint: <the replayed id>-replay, -replay-2, ...
            return self._free_id(protocol, f"{inputs[_REPLAY_OF]}-replay")
        if given:
            check_question_id(str(given))  # (before the first node: no model asked)
            other = id_clash(self.store.question_ids(run_id) | set(self.failed_questions.get(protocol, {})), given)
            if other is not None:
                if failing:
                    return None
                raise QuestionRecordedError(
                    f"{self._shown}: question id {given!r} and question id {other!r} of run {run_id!r} are "
                    f"{SAME_ID}; give this invocation {other!r} (the same question) or an id of its own; nothing "
                    "of this invocation was written")
            if given in self.store.question_ids(run_id, given, answered=True):
                if failing:
                    return None
                raise QuestionRecordedError(
                    f"{self._shown}: question id {given!r} is already recorded in run {run_id!r}: give each "
                    "invocation its own question_id, or none (one is made per invocation); nothing of this "
                    "invocation was written")
            return given
        return self._free_id(protocol, as_problem(inputs).id)

    def _free_id(self, protocol: str, base: str) -> str:
        """``base``, else the first of ``base-2``, ``base-3``, ... that ``protocol``'s run has not taken."""
        run_id = f"{self.run_id}-{protocol}"
        # a failed question keeps its id though it has no row (cancelled with every call in flight)
        taken = self.store.question_ids(run_id, base) | set(self.failed_questions.get(protocol, {})) | {
            h.question_id for h in self._held.values() if h.protocol == protocol and h.question_id}
        qid, n = base, 1
        while qid in taken:
            n += 1
            qid = f"{base}-{n}"
        return qid

    def _record_question(self, graph_run: _Run, protocol: str, again: str | None = None) -> None:
        """Write a finished protocol question (with what was held of it before a pause or an error);
        ``again``: the id of the earlier try this one repeats (:meth:`_asked_again`), its id too."""
        held = self._held.pop(graph_run.thread, None) if graph_run.thread is not None else None
        inputs = held.inputs if held is not None else graph_run.inputs
        inputs = inputs if isinstance(inputs, dict) else None
        unseen = held is None and self._resumed_unseen(graph_run, protocol, inputs)
        if unseen:
            self._resumed[protocol] = self._resumed.get(protocol, 0) + 1
        if unseen or not inputs or not inputs.get("question"):
            log.warning("TraceRecorder: a %s question resumed from a checkpoint was not recorded: this recorder "
                        "did not see it start (its earlier nodes are unknown)", protocol)
            return
        values = _merged((held.updates if held else []) + self._node_updates(graph_run))
        values.update(graph_run.outputs)
        wall_s = (held.wall_s if held else 0.0) + graph_run.wall_s
        qid = (held.question_id if held is not None and held.question_id
               else again or self._question_id(protocol, inputs))
        calls = [{**c, "question_id": qid} for c in values.get("calls") or []]
        if inputs.get(_REPLAY_OF) and not calls:
            return  # a replay that asked no model (every step it ran kept its samples from the checkpoint)
        if graph_run.thread is not None:
            self._thread_questions[_thread_key(graph_run.thread, inputs)] = inputs.get(_REPLAY_OF) or qid
        problem = as_problem({**inputs, "question_id": qid})  # the caller's input: its gold scores the methods
        values = scored_values(values, problem)
        spec = self._protocols[protocol]
        methods = values["methods"]
        run_id = self._start(protocol, calls)
        if question_failed(protocol, methods, calls):
            self.store.record_calls(run_id, protocol, qid, calls)
            errors = [c.get("error") for c in calls if c.get("error")]
            self._failed(protocol, qid, errors[-1] if errors else "no sample for the protocol's method")
            return
        self.store.record_question(
            run_id, protocol,
            {"question_id": qid, "idx": self.store.question_times([run_id]).get(run_id, (0, 0.0))[0],
             "source": problem.source,
             "kind": problem.kind, "question": problem.question, "gold": problem.gold,
             "answer": values.get("answer"), "correct": methods.get(protocol, {}).get("correct"), "wall_s": wall_s,
             "detail": (spec.detail or default_detail)(values)},
            methods, calls)
        self.recorded[protocol] = self.recorded.get(protocol, 0) + 1
        if qid in self.failed_questions.get(protocol, {}):  # failed before, answered on its resume or retry
            del self.failed_questions[protocol][qid]
            self.failed[protocol] = len(self.failed_questions[protocol])
            if not self.failed[protocol]:
                del self.failed[protocol], self.failed_questions[protocol]

    def _resumed_unseen(self, graph_run: _Run, protocol: str, inputs: dict[str, Any] | None) -> bool:
        """Whether the protocol graph run ``graph_run`` (nothing held of it) goes on with a question
        another recorder saw start (paused or stopped there): resumed with ``None`` or a ``Command``
        (no question in its input), or, as a node of the app's graph (given the app's state), none
        of the nodes its graph starts with ran (:func:`_protocol_entries`). A replay from an earlier
        checkpoint is a question of its own."""
        if not inputs or not inputs.get("question"):
            return graph_run.thread is not None
        if inputs.get(_REPLAY_OF) or graph_run.thread is None:
            return False
        entries = _protocol_entries().get(protocol)
        ran = {self._runs[c].name for c in graph_run.children if c in self._runs and self._runs[c].node}
        return entries is not None and bool(ran) and not ran & entries

    def _default_pool(self, protocol: str, calls: list[dict[str, Any]]) -> Any:
        """The pool ``protocol``'s run row describes: the recorder's ``pool``; without one, the pool
        its run in the database was found to be recorded with (:meth:`_before_call`), else the pool
        the invocation's first model call went through (:attr:`_Run.pool_seen`), else the names of
        the models ``calls`` went to (calls made outside this recorder's invocation context: a
        thread the app started)."""
        if self.pool is not None:
            return self.pool
        if protocol in self._resolved:
            return self._resolved[protocol]
        if self._seen is not None:
            return self._seen
        return [{"name": m} for m in sorted({c["model"] for c in calls})]

    def _start(self, protocol: str, calls: list[dict[str, Any]]) -> str:
        """The run id of ``protocol``'s questions, its row started on first use, holding the run id's
        live-run lock until :meth:`finish` (one recorder or driver records a run at a time: two would
        take the same question ids and merge their questions).

        Raises:
            RunLockedError: another recorder (of this process or another) or a driver holds the run id.
        """
        if protocol not in self._locks:  # its first question, or its first since finish() released the run
            run_id = f"{self.run_id}-{protocol}"
            lock = contextlib.ExitStack()
            try:
                lock.enter_context(self.store.run_lock(run_id))
            except RunLockedError as exc:
                holder = re.search(r"\((pid .*?|a process that is starting)\) on ", str(exc))
                raise RunLockedError(
                    f"{self._shown}: run id {run_id!r} is being recorded by another TraceRecorder or process"
                    f"{f' ({holder.group(1)})' if holder else ''}: one TraceRecorder records an app's threads at "
                    "once, so share it, or give each recorder its own run_id; nothing of this invocation was "
                    "written") from None
            try:
                if protocol not in self.run_ids:  # (taken first: what earlier recorders' summary counted)
                    before = self.store.get_run(run_id)
                    summary = self.store._run_json(before, "summary") if before is not None else None
                    self._before[protocol] = summary if isinstance(summary, dict) else {}
                existing = self.store.get_run(run_id) if protocol in self.run_ids else None
                # (a run this recorder wrote and finish() released: taken again with the pool its row holds)
                pool = (self.store._run_json(existing, "pool") if existing is not None
                        else self._default_pool(protocol, calls))
                self.store.start_run(run_id, protocol, config=self.config, pool=pool,
                                     dataset={"source": "embedded", "recorded_by": "TraceRecorder"})
            except ResumeRefusedError as exc:
                lock.close()
                raise ResumeRefusedError(self._refusal(protocol, pool, " (nothing of this invocation was written)")
                                         or str(exc)) from None
            except BaseException:
                lock.close()
                raise
            self._locks[protocol] = lock
            self.run_ids[protocol] = run_id
        return self.run_ids[protocol]

    # ------------------------------------------------------------------ the runs' rows

    def finish(self, status: str = "finished") -> None:
        """Mark every run this recorder wrote ``status``, with ``{"questions", "failed"}`` as summary
        (and ``failed_questions``: id → last error, the first 50; ``paused``: questions paused and not
        resumed, unrecorded, those dropped by a fresh input on their thread included; a protocol whose
        questions all paused gets its run row for this). A run with failed questions is marked ``failed`` instead of
        ``finished``, as :func:`agora.graphs.runner.run_problems` marks a CLI run (``interrupted``
        and ``failed`` are kept as given). ``unfinished``: invocations still running (another thread's, a
        stream left open); their questions are not written when they end (the invocation raises a
        one-line ``RuntimeError``), since the runs are ended; except an asyncio task the app
        cancelled before it (its end reported after this: it is recorded, and the runs marked again).
        Only the runs whose locks this recorder holds are marked: a question recorded after a
        ``finish()`` takes its run again (:meth:`_start`), and a ``finish()`` with nothing recorded
        since the last leaves the runs as that one marked them."""
        self._drop_dead_start()
        with self._lock:
            self._written.clear()  # (attempts told after this are not written: the runs are marked)
            self._late = {rid for rid, run in self._runs.items() if run.parent not in self._runs and not run.ended}
            unfinished = len(self._late)
            paused: dict[str, int] = dict(self._dropped)
            for held in self._held.values():
                if held.question_id is None:
                    paused[held.protocol] = paused.get(held.protocol, 0) + 1
        self._status = status
        try:
            self._seen = None
            for protocol in {**paused, **self._resumed}:  # a protocol whose questions all paused: its run's row
                # says so (and a run released by an earlier finish() whose paused count changed since, or
                # one whose earlier paused question this recorder saw finish, is taken again)
                if protocol not in self._locks and (
                        paused.get(protocol, 0) != self._marked_paused.get(protocol, 0)
                        or (self._resumed.get(protocol, 0) != self._marked_resumed.get(protocol, 0)
                            and self.store.get_run(f"{self.run_id}-{protocol}") is not None)):
                    self._start(protocol, [])
            for protocol in list(self._locks):  # (a run finished before and not taken since: left as marked)
                run_id = self.run_ids[protocol]
                # the run's questions, those an earlier recorder of this run_id wrote too (its block's end
                # counted them in the row's summary): answered ones from the rows, failed ones not answered since
                before = self._before.get(protocol) or {}
                self.store.check_open()  # (a store the app closed: one line naming it)
                answered = self.store.question_ids(run_id, answered=True)
                earlier = before.get("failed_questions") if isinstance(before.get("failed_questions"), dict) else {}
                failed_questions = {q: e for q, e in earlier.items() if q not in answered}
                failed_questions.update(self.failed_questions.get(protocol, {}))
                unlisted = before.get("failed", 0) - len(earlier) if isinstance(before.get("failed"), int) else 0
                failed = len(failed_questions) + max(0, unlisted)
                summary: dict[str, Any] = {"questions": len(answered), "failed": failed}
                if failed_questions:
                    summary["failed_questions"] = dict(list(failed_questions.items())[:50])
                earlier_paused = before.get("paused") if isinstance(before.get("paused"), int) else 0
                # (less those paused there that this recorder saw finish: counted once, as answered or paused)
                earlier_paused = max(0, earlier_paused - self._resumed.get(protocol, 0))
                if paused.get(protocol, 0) + earlier_paused:
                    summary["paused"] = paused.get(protocol, 0) + earlier_paused
                self._marked_paused[protocol] = paused.get(protocol, 0)
                self._marked_resumed[protocol] = self._resumed.get(protocol, 0)
                if unfinished:
                    summary["unfinished"] = unfinished
                self.store.finish_run(run_id, summary=summary,
                                      status="failed" if failed and status == "finished" else status)
        finally:
            while self._locks:  # the runs' live-run locks: another recorder may take the run ids now
                self._locks.popitem()[1].close()

    def __copy__(self) -> "TraceRecorder":
        """The recorder itself: a copy would share its runs and questions but not its end (used after
        the block, it would write into runs marked ended)."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "TraceRecorder":
        """The recorder itself, as a database connection is shared: a config deep-copied by the app
        (``copy.deepcopy(config)``) records through the same recorder."""
        return self

    def __reduce__(self) -> Any:
        """Raises:
            TypeError: always (one line): a recorder records the invocations of the process that made it."""
        raise TypeError(f"TraceRecorder {self.run_id!r} cannot be pickled (sent to another process): it records the "
                        f"invocations of the process that made it, into {self._shown}; make a TraceRecorder in "
                        "each process, each with its own run_id")

    def __enter__(self) -> "TraceRecorder":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._closed = True
        self.finish("finished" if exc_type is None else "interrupted" if exc_type is KeyboardInterrupt else "failed")
