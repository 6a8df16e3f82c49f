"""What every protocol graph's nodes share: sync and async twins of one node, and progress events
(not public)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.config import get_stream_writer

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
