"""Protocol graphs without a scorer in them (not public; :mod:`agora.tasks.scoring` is the scorer).

A protocol graph's nodes write each method's answer, mark and cost with ``correct`` left ``None``,
and its state has no ``gold`` channel: a ``gold`` key in the input is dropped by LangGraph (input
keys the input schema does not declare are ignored), so no state channel holds one. The runner
(:func:`agora.graphs.runner.run_problems`) and the trace recorder score a finished question from
its problem with :func:`agora.tasks.scoring.score_results`.

For callers that pass ``gold`` in the input (scripts, notebooks, the documented examples), a graph
built as a :class:`ProtocolGraph` scores what it returns against that gold on the way out, with the
same function (``invoke``, ``ainvoke``, ``stream``, ``astream``): the nodes and the state still
never see it. (LangGraph keeps a checkpointed run's raw input, as given, in its first checkpoint's
``__start__`` channel; the runner passes no gold, so its checkpoints hold none. The input stays as
given so that callbacks, :class:`agora.graphs.recording.TraceRecorder` among them, see the caller's
gold and score with it.) A graph embedded in an app without gold carries no scoring work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from agora.graphs.question import as_problem
from agora.tasks.scoring import score_results


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


class ScoredCompiledGraph(CompiledStateGraph):
    """A compiled protocol graph that applies an input's ``gold`` to what it returns: ``invoke`` /
    ``ainvoke`` / ``stream`` / ``astream`` score every state or node update that carries ``methods``
    (:func:`~agora.tasks.scoring.score_results`) and note the gold in the final progress event
    (:data:`GOLD_NOTED_EVENTS`). The graph itself, its state and its checkpoints never hold the
    gold: an input without one streams exactly what the nodes wrote (``correct`` ``None``).
    Everything else is LangGraph's ``CompiledStateGraph``."""

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002 - LangGraph's name
        problem = _gold_problem(input)
        chunks = super().stream(input, config, **kwargs)
        if problem is None:
            yield from chunks
            return
        mode, subgraphs = kwargs.get("stream_mode") or self.stream_mode, bool(kwargs.get("subgraphs"))
        for chunk in chunks:
            yield _scored_chunk(chunk, mode, subgraphs, problem)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        problem = _gold_problem(input)
        mode, subgraphs = kwargs.get("stream_mode") or self.stream_mode, bool(kwargs.get("subgraphs"))
        async for chunk in super().astream(input, config, **kwargs):
            yield chunk if problem is None else _scored_chunk(chunk, mode, subgraphs, problem)


class ProtocolGraph(StateGraph):
    """The builder of a protocol graph: a LangGraph ``StateGraph`` whose ``compile`` returns a
    :class:`ScoredCompiledGraph` (same arguments, same graph)."""

    def compile(self, *args: Any, **kwargs: Any) -> ScoredCompiledGraph:
        compiled = super().compile(*args, **kwargs)
        compiled.__class__ = ScoredCompiledGraph  # LangGraph builds the instance; only the streams differ
        return compiled
