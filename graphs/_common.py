"""Helpers shared by the protocol graphs (not public)."""

from __future__ import annotations

import functools
import typing
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import fields, is_dataclass
from functools import lru_cache
from typing import Any, NotRequired, TypeVar

from typing_extensions import TypedDict

from langgraph.config import get_stream_writer

try:  # LangGraph's node wrapper taking a sync and an async function (internal, stable since 0.2)
    from langgraph._internal._runnable import RunnableCallable
except ImportError:  # pragma: no cover - a LangGraph without it: nodes stay sync-only
    RunnableCallable = None

from agora.models.pool import ModelPool
from agora.agents.seeds import item_seed
from agora.tasks.loaders import Problem


class ProblemState(TypedDict, total=False):
    """A problem as it travels in graph state."""

    question_id: str
    question: str
    gold: str | None
    kind: str
    n_choices: int


class QuestionInput(TypedDict):
    """What a caller passes to a per-question protocol graph (MoA, debate)."""

    question: str
    """The problem text (for multiple choice, with lettered options)."""
    question_id: NotRequired[str]
    gold: NotRequired[str | None]
    """Gold answer, if known: each method's ``correct`` is then filled in."""
    kind: NotRequired[str]
    """``math`` (default) or ``mc``: how answers are extracted."""
    n_choices: NotRequired[int]


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


def problem_input(problem: Problem) -> dict[str, Any]:
    """Graph input fields for a :class:`~agora.tasks.Problem`."""
    return {"question_id": problem.id, "question": problem.question, "gold": problem.gold,
            "kind": problem.kind, "n_choices": problem.n_choices}


def as_problem(state: dict[str, Any]) -> Problem:
    """The problem described by a graph state's input fields."""
    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("graph input needs a non-empty 'question'")
    qid = state.get("question_id") or f"q-{zlib.crc32(question.encode()):08x}"
    return Problem(id=qid, question=question, gold=state.get("gold"), kind=state.get("kind") or "math",
                   n_choices=int(state.get("n_choices") or 0))


@lru_cache(maxsize=1)
def _default_pool() -> ModelPool:
    from agora.models.pool import default_pool

    return default_pool()


def pool_from(context: Any) -> ModelPool:
    """The pool in the runtime context, or the embedded default pool (Studio runs pass none)."""
    pool = getattr(context, "pool", None) if context is not None else None
    return pool if pool is not None else _default_pool()


S = TypeVar("S")


def settings_from(value: Any, cls: type[S]) -> S:
    """``value`` as the frozen settings dataclass ``cls``: ``value`` itself, ``cls()`` for ``None``,
    or built from a dict, as JSON clients send it (LangGraph Studio, the ``langgraph dev`` HTTP API),
    nested settings and tuples included.

    Raises:
        ValueError: not settings nor a dict, an unknown field (named), or the settings' own checks.
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"{cls.__name__}: expected {cls.__name__} or a dict, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(value) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for name, v in value.items():
        hint = hints[name]
        kinds = {hint, *typing.get_args(hint)}
        nested = next((k for k in kinds if is_dataclass(k)), None)
        if isinstance(v, dict) and nested is not None:
            v = settings_from(v, nested)
        elif isinstance(v, list) and any(typing.get_origin(k) is tuple for k in kinds):
            v = tuple(v)
        kwargs[name] = v
    return cls(**kwargs)


def question_seed(base: int, question_id: str) -> int:
    """A per-question seed: :func:`agora.agents.seeds.item_seed` (nodes use
    :func:`agora.agents.seeds.call_seed`)."""
    return item_seed(base, question_id)


def emit(event: str, message: str, **fields: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); a no-op outside a streaming run."""
    try:
        writer = get_stream_writer()
    except Exception:  # noqa: BLE001 - outside a runnable context
        return
    writer({"event": event, "message": message, **fields})
