"""Nodes every protocol graph builds the same way (in the manner of LangGraph's prebuilt nodes; not
public): sync and async twins of one node, progress events, a node that asks one model once
(:func:`model_node`), and one member answering alone (:func:`solo_answer_node`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.config import get_stream_writer

from agora.agents.prompts import solver_messages
from agora.agents.seeds import SeedNode, call_seed, sampling
from agora.graphs._calls import Cost, Request, aask, ask, call_context, first_answer, shared_cost
from agora.graphs.context import context_as, pool_from
from agora.graphs.question import as_problem, take_shared
from agora.models.pool import Sample
from agora.traces.schema import CallRecord

try:  # LangGraph's node wrapper taking a sync and an async function (internal, stable since 0.2)
    from langgraph._internal._runnable import RunnableCallable
except ImportError:  # pragma: no cover - a LangGraph without it: nodes stay sync-only
    RunnableCallable = None


def sync_async_node(func: Callable[..., Any], afunc: Callable[..., Awaitable[Any]] | None = None) -> Any:
    """A graph node that runs ``func`` under ``invoke`` and ``afunc`` under ``ainvoke``/``astream``.

    LangGraph runs a sync-only node in a worker thread under ``ainvoke`` (≈ 0.1 ms per node hand-off
    here); a node that does no I/O runs inline instead (``afunc`` omitted: ``func`` called directly),
    and a node that calls a model awaits it (``afunc``). Same arguments (``state``, ``runtime``...).
    """
    if RunnableCallable is None:
        return func

    async def call_inline(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    functools.update_wrapper(call_inline, func)
    return RunnableCallable(func, afunc or call_inline, name=func.__name__, trace=False)


def emit(event: str, message: str, **fields: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); a no-op outside a streaming run."""
    try:
        writer = get_stream_writer()
    except Exception:  # noqa: BLE001 - outside a runnable context
        return
    writer({"event": event, "message": message, **fields})


def model_node(request: Callable[[Any, Any], Request], answered: Callable[..., dict[str, Any]],
               shared: Callable[[Any], list[Sample] | None] | None = None) -> Any:
    """A graph node that asks one model once, with its sync and async twins
    (:func:`agora.graphs._calls.ask` under ``invoke``, :func:`agora.graphs._calls.aask` under
    ``ainvoke``; :func:`sync_async_node`), in the manner of LangGraph's prebuilt nodes.

    ``request(state, runtime)`` gives the :class:`Request`; ``answered(state, model, samples,
    records, cost)`` turns what came back into the node's update. ``shared(state)``, when given,
    may answer without a call: the samples taken from the bench's shared candidates
    (:func:`agora.graphs.question.take_shared`; their rows are the draw's, their cost all shared,
    :func:`agora.graphs._calls.shared_cost`), then ``model`` is the state's ``model``; ``None`` asks.
    The node is named after ``answered`` (its leading ``_`` dropped) and has its docstring.
    """

    def taken(state: Any) -> tuple[str, list[Sample], list[CallRecord], Cost] | None:
        samples = shared(state) if shared is not None else None
        return None if samples is None else (state["model"], samples, [], shared_cost(samples))

    def node(state: Any, runtime: Any) -> dict[str, Any]:
        if (got := taken(state)) is not None:
            return answered(state, *got)
        req = request(state, runtime)
        return answered(state, req.model, *ask(*req))

    async def anode(state: Any, runtime: Any) -> dict[str, Any]:
        if (got := taken(state)) is not None:
            return answered(state, *got)
        req = request(state, runtime)
        return answered(state, req.model, *await aask(*req))

    node.__name__, node.__doc__ = answered.__name__.lstrip("_"), answered.__doc__
    return sync_async_node(node, anode)


def solo_answer_node(context: type, seed: str | SeedNode, node: str, role: str, *, who: str, into: str,
                     step: str) -> Any:
    """A node where one member answers the question alone (the solver prompt, one sample): MoA's
    proposers, the council's first answers. Its ``Send`` payload holds the question
    (:func:`agora.graphs.question.question_payload`), ``who`` (the member's position, also its
    seed's ``agent``) and ``model``, and ``share``: which of the model's shared candidates it takes
    (default 0, the first). ``seed`` is its node's name in :data:`agora.agents.seeds.NODES` or its own
    :class:`~agora.agents.seeds.SeedNode`;
    ``context`` the protocol's context class (its ``config`` gives sampling, ``shots`` and ``seed``).

    Its update: ``{into: [{who, "model", "answer", "how", "text"}], "costs": {step: cost}, "calls":
    records}``, nothing appended to ``into`` when the call failed.
    """

    def request(task: Any, runtime: Any) -> Request:
        problem = as_problem(task)
        cfg = context_as(runtime.context, context).config
        params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, seed, agent=task[who]))
        return Request(pool_from(runtime.context, context), task["model"], solver_messages(problem, cfg.shots),
                       params, call_context(problem, node, role, agent=task[who]))

    def answered(task: Any, model: str, samples: list[Sample], records: list[CallRecord], cost: Cost) -> dict[str, Any]:
        first = first_answer(samples, as_problem(task))
        return {into: [{who: task[who], "model": model, **first}] if first else [], "costs": {step: cost},
                "calls": records}

    def shared(task: Any) -> list[Sample] | None:
        return take_shared(task, task["model"], 1, start=task.get("share", 0))

    answered.__name__ = node
    answered.__doc__ = f"{role.capitalize()} {who} answers alone (or takes its shared candidate)."
    return model_node(request, answered, shared)
