"""Protocol graphs without a scorer in them (not public; :mod:`agora.tasks.scoring` is the scorer).

A protocol graph's nodes write each method's answer, mark and cost with ``correct`` left ``None``,
and its state has no ``gold`` channel: a ``gold`` key in the input is dropped by LangGraph (input
keys the input schema does not declare are ignored), so no state channel holds one. The runner
(:func:`agora.graphs.runner.run_problems`) and the trace recorder score a finished question from
its problem with :func:`agora.tasks.scoring.score_results`.

For callers that pass ``gold`` in the input (scripts, notebooks, the documented examples, Studio's
form: the input schema offers it, :data:`agora.graphs.question.GOLD_FIELD`), a graph built as a
:class:`ProtocolGraph` scores what it returns against that gold on the way out, with the same
function (``invoke``, ``ainvoke``, ``stream``, ``astream``): the nodes and the state still never
see it. LangGraph keeps a checkpointed run's raw input, as given, in its input checkpoint's
``__start__`` channel, and a run that resumes a paused thread (input ``None`` or a ``Command``: an
interrupt answered, a breakpoint passed) is scored against the gold of that input, so a pause does
not drop scoring. The runner passes no gold, so its checkpoints hold none. The input stays as given
so that callbacks, :class:`agora.graphs.recording.TraceRecorder` among them, see the caller's gold
and score with it. A graph embedded in an app without gold carries no scoring work.

LangGraph's server (``agora studio``, ``langgraph dev``) drops context keys the context schema does
not list before a graph sees them; a compiled protocol graph is also the server's graph factory
(:meth:`ScoredCompiledGraph.__call__`), which sees the run's context as sent and refuses such keys
in one line, as a Python caller's context is refused.
"""

from __future__ import annotations

import contextlib
import functools
import difflib
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
from langgraph._internal._runnable import RunnableCallable
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.constants import START
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel._read import ChannelRead
from langgraph.pregel._write import ChannelWrite, ChannelWriteEntry
from langgraph.types import Overwrite

from agora.graphs.context import check_context_keys
from agora.graphs.question import as_problem, checked_input
from agora.tasks.errors import InputError
from agora.models.studio_schema import markdown_schema
from agora.tasks.scoring import score_results

try:  # the type LangGraph's server recognises a graph factory's runtime parameter by (langgraph-sdk)
    from langgraph_sdk.runtime import ServerRuntime
except ImportError:  # pragma: no cover - an SDK without it: the server passes its config instead
    ServerRuntime = None


#: Custom stream events whose message names the gold answer when the caller gave one (the final
#: event of the conversation and of COMED: ``… (gold 7)``); the nodes that emit them never see it.
GOLD_NOTED_EVENTS = frozenset({"conclude", "score"})


def noted_event(event: dict[str, Any], problem: Any) -> dict[str, Any]:
    """A custom stream event as shown to a person: a :data:`GOLD_NOTED_EVENTS` event's message
    gets `` (gold …)`` when ``problem`` (a :class:`~agora.tasks.Problem`) has a gold answer; any
    other event, or no gold, unchanged. The runner's progress events use it."""
    return event if problem.gold is None else _scored(event, "custom", problem)


def _gold_problem(inp: Any) -> Any:
    """The problem of an input mapping that carries a gold answer, else ``None``."""
    if isinstance(inp, Mapping) and inp.get("gold") is not None and isinstance(inp.get("question"), str) \
            and inp["question"].strip():
        return as_problem(inp)
    return None


INPUT_WALK = 100_000
"""Checkpoints walked back from a resumed one to the input checkpoint it descends from, at most."""


def _resumed_checkpoint(config: Any) -> dict[str, Any]:
    """The config of the checkpoint a resume of ``config``'s thread starts from (a checkpointer's
    ``get_tuple``): the top graph's; the replayed one (``checkpoint_id``: time travel), else the
    thread's newest. Its ancestors lead to the input it came from, so a thread that later took
    another input (or a fork, newer than that input) is scored against the right one."""
    configurable = dict((config or {}).get("configurable") or {})
    return {"configurable": {**configurable, "checkpoint_ns": configurable.get("checkpoint_ns", "")}}


def _asked_input(chain: list[Any]) -> Any:
    """The raw input of a resumed thread as its question is asked now: ``chain`` is the resumed
    checkpoint and its ancestors (newest first, each its parent's child: a fork's own line, not the
    thread's newest checkpoints) back to an input checkpoint, whose input it is. When the app edited
    the state's ``question`` on that line since (``update_state``, then a replay of that edit: a
    fork), the edited question replaces the input's, without the input's ``gold`` and
    ``question_id`` (those of the question it replaced). ``None``: no input checkpoint found."""
    if not chain or "__start__" not in (chain[-1].checkpoint.get("channel_values") or {}):
        return None
    raw = chain[-1].checkpoint["channel_values"]["__start__"]
    if not isinstance(raw, Mapping):
        return raw

    def question(saved: Any) -> Any:
        values = saved.checkpoint.get("channel_values") or {}
        return values.get("question", raw.get("question") if "__start__" in values else None)

    edited = any((saved.metadata or {}).get("source") == "update" and question(saved) != question(parent)
                 for saved, parent in zip(chain, chain[1:]))
    now = question(chain[0])
    if not edited or not isinstance(now, str) or now == raw.get("question"):
        return raw
    return {**{k: v for k, v in raw.items() if k not in ("gold", "question_id")}, "question": now}


def _input_chain(checkpointer: Any, at: Any) -> list[Any]:
    """The checkpoint ``at`` names (a config) and its ancestors, newest first, back to the input
    checkpoint it descends from (at most :data:`INPUT_WALK`): what :func:`_asked_input` reads."""
    chain, saved = [], checkpointer.get_tuple(at)
    while saved is not None and len(chain) < INPUT_WALK:
        chain.append(saved)
        if "__start__" in (saved.checkpoint.get("channel_values") or {}):
            break
        saved = checkpointer.get_tuple(saved.parent_config) if saved.parent_config else None
    return chain


async def _ainput_chain(checkpointer: Any, at: Any) -> list[Any]:
    chain, saved = [], await checkpointer.aget_tuple(at)
    while saved is not None and len(chain) < INPUT_WALK:
        chain.append(saved)
        if "__start__" in (saved.checkpoint.get("channel_values") or {}):
            break
        saved = await checkpointer.aget_tuple(saved.parent_config) if saved.parent_config else None
    return chain


def _commanded(input: Any, asked: Any) -> Any:  # noqa: A002 - LangGraph's name
    """``asked`` (:func:`_asked_input`) as a resume's ``Command(update={"question": ...})`` edits it:
    the command's question (written before the resumed steps run) replaces the input's, without its
    ``gold`` and ``question_id``, as an ``update_state`` edit does. ``asked`` unchanged for any other
    resume, or a command that writes the question the input asked."""
    update = getattr(input, "update", None)
    pairs = update.items() if isinstance(update, Mapping) else update if isinstance(update, (list, tuple)) else ()
    now = next((pair[1] for pair in reversed(list(pairs))
                if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "question"), None)
    if not isinstance(asked, Mapping) or not isinstance(now, str) or not now.strip() or now == asked.get("question"):
        return asked
    return {**{k: v for k, v in asked.items() if k not in ("gold", "question_id")}, "question": now}


def misspelt_keys(keys: Any, known: Any) -> list[tuple[str, str]]:
    """``(key, known key)`` for each key of ``keys`` that is not among ``known`` but close to one of
    them (:func:`difflib.get_close_matches`, its default cutoff 0.6): ``golden`` for ``gold``,
    ``questoin`` for ``question``. A key close to none (another graph's state key) is not listed."""
    known = sorted(known)
    found = []
    for key in keys:
        if isinstance(key, str) and key not in known and (close := difflib.get_close_matches(key, known, n=1)):
            found.append((key, close[0]))
    return found


def _nested(config: Any) -> bool:
    """Whether the graph runs as a node of a parent graph (LangGraph gives the run a checkpoint
    namespace then, ``node:task``): the input is the parent's state, whose other keys are no mistake."""
    return bool(((config or {}).get("configurable") or {}).get("checkpoint_ns"))


def _resumes(graph: Any, input: Any, config: Any) -> bool:  # noqa: A002 - LangGraph's name
    """Whether this run resumes a thread of ``graph``'s checkpointer (no new input of its own) and
    returns methods to score (a duel or a CUPID session has none: no checkpoint is read)."""
    return (not isinstance(input, Mapping) and "methods" in graph.channels
            and graph.checkpointer not in (None, False, True)
            and bool(((config or {}).get("configurable") or {}).get("thread_id")))


def scored_output(inp: Any, out: Any) -> Any:
    """``out`` with its ``methods`` scored by :func:`~agora.tasks.scoring.score_results` against the
    ``gold`` (and ``kind``) of the input mapping ``inp``; ``out`` unchanged when ``inp`` has no gold
    or ``out`` is not a state with ``methods`` (``output_keys`` without it, a node's other update)."""
    problem = _gold_problem(inp)
    return out if problem is None else _scored(out, "values", problem)


def _scored(data: Any, mode: Any, problem: Any, top: bool = True) -> Any:
    """One stream item of ``mode`` with the caller's gold applied: a state's (``values``) or a node
    update's (``updates``) ``methods`` scored, a :data:`GOLD_NOTED_EVENTS` event's message noted."""
    if mode == "values" and isinstance(data, dict) and isinstance(data.get("methods"), dict):
        return {**data, "methods": score_results(data["methods"], problem)}
    if mode == "updates" and isinstance(data, dict):
        return {node: _scored(update, "values", problem) for node, update in data.items()}
    if (mode == "custom" and top and isinstance(data, dict) and data.get("event") in GOLD_NOTED_EVENTS
            and isinstance(data.get("message"), str)):
        return {**data, "message": f"{data['message']} (gold {problem.gold})"}
    return data


def _scored_chunk(chunk: Any, stream_mode: Any, subgraphs: bool, problem: Any) -> Any:
    """A ``stream`` chunk (any of LangGraph's v1 shapes, or a v2 stream part) with :func:`_scored`
    applied to its payload."""
    if isinstance(chunk, dict) and {"type", "ns", "data"} <= chunk.keys():  # version="v2"
        return {**chunk, "data": _scored(chunk["data"], chunk["type"], problem, not chunk["ns"])}
    several = not isinstance(stream_mode, str)
    if subgraphs and several and isinstance(chunk, tuple) and len(chunk) == 3:
        ns, mode, data = chunk
        return ns, mode, _scored(data, mode, problem, not ns)
    if subgraphs and not several and isinstance(chunk, tuple) and len(chunk) == 2:
        ns, data = chunk
        return ns, _scored(data, stream_mode, problem, not ns)
    if several and isinstance(chunk, tuple) and len(chunk) == 2:
        mode, data = chunk
        return mode, _scored(data, mode, problem)
    return chunk if several else _scored(chunk, stream_mode, problem)


FINISHED_KEYS = ("methods", "record", "recommendation")
"""The state keys whose value (not ``None``) tells a finished question (a protocol's ``methods``), duel
(``record``) or CUPID session (``recommendation``): the ``ProtocolSpec.finished`` of each graph."""

def _fresh_resets(builder: Any, input: Any, values: Mapping[str, Any]) -> dict[str, Any]:  # noqa: A002
    """The writes that start the new question ``input`` (the raw input mapping) from clean
    per-question state when the graph's state ``values`` (as the thread holds it when the input
    arrives) is a finished question's, one with a :data:`FINISHED_KEYS` key set: each appended key
    (``proposals``, ``calls``; ``costs``, whose steps add up) replaced by an empty one (LangGraph's
    ``Overwrite``), each input field the earlier question had and this one leaves out
    (``question_id``, ``kind``, ``n_choices``) and the finished key itself set to ``None``, read as
    absent (so this question, paused, is not taken for a finished one). Other keys a step sets
    (``answer``) are set again by this question's steps. ``{}`` for an input that is not a mapping,
    on an empty thread, and on a question not finished: a paused one (its finished key is unset: the
    thread's first question's never was, a later one's was cleared when it started) or one a run
    goes on over, as the runner's rerun of a question cut short, keep their state.

    ``builder``: the graph's :class:`ProtocolGraph` (its ``channels`` and input schema)."""
    channels = builder.channels
    if not isinstance(input, Mapping) or not any(
            values.get(key) is not None for key in FINISHED_KEYS if key in channels):
        return {}
    inputs = set(builder.schemas.get(builder.input_schema, ()))
    resets: dict[str, Any] = {key: None for key in inputs if key not in input and values.get(key) is not None}
    resets.update({key: None for key in FINISHED_KEYS if values.get(key) is not None})
    resets.update({key: Overwrite(type(value)()) for key, value in values.items()
                   if key not in inputs and isinstance(channels.get(key), BinaryOperatorAggregate)
                   and isinstance(value, (list, dict))})
    return resets


def _fresh_question(builder: Any, input: Any, config: RunnableConfig) -> Any:  # noqa: A002 - LangGraph's name
    """The first writer of a protocol graph's ``__start__`` step (the step that writes a new input to
    the state; a resume does not run it): reads the state as the thread holds it (LangGraph's
    ``ChannelRead``, the channels before this step's writes) and writes :func:`_fresh_resets` with
    the input. Decided in the graph, so every caller gets it: ``invoke``/``stream`` from Python, a
    server that reads the run from other asyncio tasks (langgraph-api), a graph run as a node.
    Returns ``input`` unchanged for the input's own writer."""
    values = ChannelRead.do_read(config, select=list(builder.channels), fresh=False)
    if resets := _fresh_resets(builder, input, values):
        ChannelWrite.do_write(config, [ChannelWriteEntry(key, value) for key, value in resets.items()])
    return input


async def _afresh_question(builder: Any, input: Any, config: RunnableConfig) -> Any:  # noqa: A002 - LangGraph's name
    return _fresh_question(builder, input, config)  # reads and writes in memory only


class ScoredCompiledGraph(CompiledStateGraph):
    """A compiled protocol graph that applies an input's ``gold`` to what it returns: ``invoke`` /
    ``ainvoke`` / ``stream`` / ``astream`` score every state or node update that carries ``methods``
    (:func:`~agora.tasks.scoring.score_results`) and note the gold in the final progress event
    (:data:`GOLD_NOTED_EVENTS`). The graph itself, its state and its checkpoints never hold the
    gold: an input without one streams exactly what the nodes wrote (``correct`` ``None``).
    Everything else is LangGraph's ``CompiledStateGraph``."""

    def __call__(self, runtime: Any = None) -> ScoredCompiledGraph:
        """The graph itself, as LangGraph's server calls a graph factory (with its runtime) for
        every run and read: for a run, the context as the client sent it is checked first, and a
        key the context class does not have is refused in one line
        (:func:`agora.graphs.context.check_context_keys`; the server would drop it silently).

        Raises:
            ContextError: ``MoAContext: unknown field(s) pol; its fields are pool, config``.
        """
        context = getattr(runtime, "context", None)
        if isinstance(context, Mapping) and self.context_schema is not None:
            check_context_keys(self.context_schema, context)
        return self

    if ServerRuntime is not None:
        __call__.__annotations__["runtime"] = ServerRuntime

    def get_input_jsonschema(self, config: Any = None) -> dict[str, Any]:
        """The input's JSON schema as Studio's form shows it (descriptions in Markdown)."""
        return markdown_schema(super().get_input_jsonschema(config))

    def get_output_jsonschema(self, config: Any = None) -> dict[str, Any]:
        """The output's JSON schema (descriptions in Markdown)."""
        return markdown_schema(super().get_output_jsonschema(config))

    def get_context_jsonschema(self) -> dict[str, Any] | None:
        """The context's JSON schema as Studio's form shows it (descriptions in Markdown)."""
        schema = super().get_context_jsonschema()
        return None if schema is None else markdown_schema(schema)

    def accepted_keys(self) -> frozenset[str]:
        """The keys a top-level input mapping may hold: the input schema's (the bench's
        ``shared_candidates`` among them), and ``gold`` where the graph returns ``methods`` to score."""
        keys = frozenset(self.builder.schemas.get(self.builder.input_schema, ()))
        return keys | {"gold"} if "methods" in self.channels else keys

    def _refuse_unknown(self, input: Any, config: Any) -> None:  # noqa: A002 - LangGraph's name
        """Refuse a top-level input mapping with a key the graph does not take (:meth:`accepted_keys`):
        LangGraph would drop it, so a misspelt ``golden`` ran unscored and a misspelt ``kind`` ran
        as math. A protocol graph run as a node of a parent graph (:func:`_nested`) gets the parent's
        whole state, which is not checked.

        Raises:
            InputError: ``graph input: unknown field(s) golden (did you mean gold?); its fields are
            question, question_id, kind, n_choices, gold``."""
        if not isinstance(input, Mapping) or _nested(config):
            return
        accepted = self.accepted_keys()
        unknown = [key for key in input if key not in accepted]
        if not unknown:
            return
        close = dict(misspelt_keys(unknown, accepted))
        shown = {key: f"{key:.60}" if isinstance(key, str) and key.isprintable() else f"{key!r:.60}" for key in unknown}
        named = ", ".join(f"{shown[key]} (did you mean {close[key]}?)" if key in close else shown[key] for key in unknown)
        fields = ", ".join(self.get_input_jsonschema().get("properties", ()))  # the form's fields
        raise InputError(f"graph input: unknown field(s) {named}; its fields are {fields}")

    def _object_input(self, input: Any) -> Any:  # noqa: A002 - LangGraph's name
        """Refuse an input that is text, a number or a list (``"What is 2+2?"`` sent as the whole input):
        LangGraph would fail writing it to the state, in lines naming none of the graph's fields.
        A mapping, a resume's ``None`` or ``Command`` and any other object pass unchanged.

        Raises:
            InputError: one line naming the input form's fields."""
        if isinstance(input, (str, bytes, int, float, list, tuple)):
            fields = ", ".join(self.get_input_jsonschema().get("properties", ()))  # the form's fields
            raise InputError(f"graph input must be an object of its fields ({fields}), "
                             f"not {type(input).__name__} {input!r:.60}")
        return input

    def _thread_input(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        """On a resume (:func:`_resumes`): the raw input of the input checkpoint the resumed checkpoint
        (the replayed one, ``checkpoint_id``, else the thread's newest) descends from, as asked
        (:func:`_asked_input`: a question the app edited since replaces it, as does one a resume's
        ``Command(update=...)`` writes: :func:`_commanded`), else ``None``."""
        if not _resumes(self, input, config):
            return None
        return _commanded(input, _asked_input(_input_chain(self.checkpointer, _resumed_checkpoint(config))))

    async def _athread_input(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        if not _resumes(self, input, config):
            return None
        return _commanded(input, _asked_input(await _ainput_chain(self.checkpointer, _resumed_checkpoint(config))))

    def _nested_checkpoint(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        """``(checkpointer, the config of this graph's newest checkpoint)`` when it runs as a parent
        graph's node (input: the parent's state) under a checkpointer, else ``None``."""
        configurable = (config or {}).get("configurable") or {}
        checkpointer = configurable.get(CONFIG_KEY_CHECKPOINTER)
        if (not _nested(config) or not isinstance(input, Mapping) or "methods" not in self.channels
                or checkpointer in (None, False, True) or configurable.get("thread_id") is None):
            return None
        return checkpointer, {"configurable": {"thread_id": configurable["thread_id"],
                                               "checkpoint_ns": configurable["checkpoint_ns"]}}

    @staticmethod
    def _edited_nested(input: Any, chain: list[Any]) -> Any:  # noqa: A002 - LangGraph's name
        """A nested run that resumes its own paused checkpoint (``chain``: it and its ancestors back
        to its input checkpoint) whose question the app edited since (``update_state`` on the
        subgraph's config, as Studio's state editor does): the input as its question is asked now
        (:func:`_asked_input`, without the parent's gold), else ``None`` (a fresh run, or no edit)."""
        asked = _asked_input(chain)
        if not isinstance(asked, Mapping) or asked.get("question") == input.get("question"):
            return None
        return asked

    def _nested_input(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        """:meth:`_edited_nested` of this run, read from the checkpointer (``None`` when not nested)."""
        found = self._nested_checkpoint(input, config)
        if found is None:
            return None
        return self._edited_nested(input, _input_chain(*found))

    async def _anested_input(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        found = self._nested_checkpoint(input, config)
        if found is None:
            return None
        return self._edited_nested(input, await _ainput_chain(*found))

    def _gold(self, input: Any, config: Any) -> Any:  # noqa: A002 - LangGraph's name
        """The problem whose gold this run's output is scored against: the input's, or on a resume
        the thread's input checkpoint's (``None`` without gold)."""
        if _resumes(self, input, config):
            return _gold_problem(self._thread_input(input, config))
        return _gold_problem(input)

    def _writer(self, parent: Any) -> str | None:
        """The node a state edit without ``as_node`` comes from: the one node whose tasks made the
        latest step's checkpoint under the one edited (``parent``: the snapshot before that step's),
        when they were all the same node (a ``Send`` fan-out such as MoA's proposers). LangGraph itself
        picks ``__start__`` there (a ``Send`` task records no channel it saw), whose branch then runs
        again with no context: ``Missing required config key 'N/A' for 'to_proposers'`` in Studio's
        state editor at a breakpoint after the fan-out. ``None``: LangGraph's own choice."""
        names = {task.name for task in parent.tasks} if parent is not None else set()
        return names.pop() if len(names) == 1 and next(iter(names)) in self.nodes and "__start__" not in names else None

    EDITS_WALKED = 64
    """Earlier edits looked through for the step under them (a longer run of edits: LangGraph's choice)."""

    def update_state(self, config: Any, values: Any, as_node: str | None = None,
                     task_id: str | None = None) -> Any:
        if as_node is None and self.checkpointer is not None:
            snap = self.get_state(config)
            for _ in range(self.EDITS_WALKED):  # edits' checkpoints, back to the step they edit
                if (snap.metadata or {}).get("source") != "update" or not snap.parent_config:
                    break
                snap = self.get_state(snap.parent_config)
            if (snap.metadata or {}).get("source") == "loop" and snap.parent_config:
                as_node = self._writer(self.get_state(snap.parent_config))
        return super().update_state(config, values, as_node, task_id)

    async def aupdate_state(self, config: Any, values: Any, as_node: str | None = None,
                            task_id: str | None = None) -> Any:
        if as_node is None and self.checkpointer is not None:
            snap = await self.aget_state(config)
            for _ in range(self.EDITS_WALKED):
                if (snap.metadata or {}).get("source") != "update" or not snap.parent_config:
                    break
                snap = await self.aget_state(snap.parent_config)
            if (snap.metadata or {}).get("source") == "loop" and snap.parent_config:
                as_node = self._writer(await self.aget_state(snap.parent_config))
        return await super().aupdate_state(config, values, as_node, task_id)


    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002 - LangGraph's name
        input = checked_input(self._object_input(input))  # noqa: A001 - refused or coerced before any model is asked
        self._refuse_unknown(input, config)
        resumed = self._thread_input(input, config)
        problem = _gold_problem(resumed if _resumes(self, input, config) else input)
        if resumed is None and (resumed := self._nested_input(input, config)) is not None:
            problem = None  # (a subgraph's question the app edited: the parent's gold is the other question's)
        token = _note_resumed(config, resumed)
        try:
            chunks = super().stream(input, config, **kwargs)
            if problem is None:
                yield from chunks
                return
            mode, subgraphs = kwargs.get("stream_mode") or self.stream_mode, bool(kwargs.get("subgraphs"))
            for chunk in chunks:
                yield _scored_chunk(chunk, mode, subgraphs, problem)
        finally:
            _forget_resumed(token)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        input = checked_input(self._object_input(input))  # noqa: A001 - refused or coerced before any model is asked
        self._refuse_unknown(input, config)
        resumed = await self._athread_input(input, config)
        problem = _gold_problem(resumed if _resumes(self, input, config) else input)
        if resumed is None and (resumed := await self._anested_input(input, config)) is not None:
            problem = None  # (a subgraph's question the app edited: the parent's gold is the other question's)
        token = _note_resumed(config, resumed)
        try:
            mode, subgraphs = kwargs.get("stream_mode") or self.stream_mode, bool(kwargs.get("subgraphs"))
            # LangGraph's stream closed with this one: an app's ``aclose()`` returns once the graph's end
            # (its stream closed) is reported to the callbacks, not later, in a task the event loop's
            # generator finalizer starts (a trace recorder's block that ended meanwhile took it for a
            # stream still open)
            async with contextlib.aclosing(super().astream(input, config, **kwargs)) as chunks:
                async for chunk in chunks:
                    yield chunk if problem is None else _scored_chunk(chunk, mode, subgraphs, problem)
        finally:
            _forget_resumed(token)


RESUMED_INPUT: ContextVar[tuple[str, str | None, dict[str, Any]] | None] = ContextVar("agora_resumed_input",
                                                                                      default=None)
"""While a protocol graph resumes a thread of its checkpointer (input ``None`` or a ``Command``), or,
run as a parent graph's node, resumes its own paused checkpoint whose question the app edited:
``(thread_id, the replayed checkpoint_id or None, the raw input of the thread's input checkpoint)``.
A callback meeting the graph's run without its input reads it there: the trace recorder records a
replay from an earlier checkpoint (time travel) as a question of its own."""


def _note_resumed(config: Any, resumed: Any) -> Token | None:
    if not isinstance(resumed, Mapping):
        return None
    configurable = (config or {}).get("configurable") or {}
    return RESUMED_INPUT.set((str(configurable.get("thread_id")), configurable.get("checkpoint_id"), dict(resumed)))


def _forget_resumed(token: Token | None) -> None:
    if token is not None:
        with contextlib.suppress(ValueError, RuntimeError):  # (a stream closed in another context)
            RESUMED_INPUT.reset(token)


GRAPH_METADATA_KEY = "agora_graph"
"""The run metadata key naming a protocol graph's context class (``"DelegationContext"``): callbacks
(the trace recorder) see which protocol a graph run is before any of its nodes ran, as when it
pauses at a breakpoint on its first node. An outer protocol's value wins in the graphs it runs."""


class ProtocolGraph(StateGraph):
    """The builder of a protocol graph: a LangGraph ``StateGraph`` whose ``compile`` returns a
    :class:`ScoredCompiledGraph` (same arguments, same graph), whose runs carry the metadata
    :data:`GRAPH_METADATA_KEY`."""

    def compile(self, *args: Any, **kwargs: Any) -> ScoredCompiledGraph:
        compiled = super().compile(*args, **kwargs)
        compiled.__class__ = ScoredCompiledGraph  # LangGraph builds the instance; only the streams differ
        # a new question on a thread that holds a finished one: its first step empties the appended keys
        compiled.nodes[START].writers.insert(0, RunnableCallable(
            functools.partial(_fresh_question, self), functools.partial(_afresh_question, self),
            name="fresh_question", trace=False, recurse=False))
        if self.context_schema is not None:
            config = dict(compiled.config or {})
            config["metadata"] = {**(config.get("metadata") or {}), GRAPH_METADATA_KEY: self.context_schema.__name__}
            compiled.config = config
        return compiled
