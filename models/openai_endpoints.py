"""The HTTP side of an OpenAI-compatible server: the ``openai`` SDK clients every request goes through
(one thread-safe sync client per endpoint for the process, one async client per event loop and
endpoint, all sharing a connection pool and one TLS context) and the rotation over a model's replica
endpoints that skips one refusing connections. :class:`agora.models.openai_backend.OpenAICompatibleChatModel`
sends its requests through them.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import weakref
from functools import lru_cache
from typing import Any
from agora.tasks.errors import InputError


CONNECTIONS = 1024
"""Connections one HTTP client keeps open at most (every endpoint together): the sync client's for
the whole process, an async client's for its event loop."""


def _limits():
    import httpx

    return httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)


@lru_cache(maxsize=1)
def _tls():
    """One TLS context (certificates verified, httpx's defaults) for every HTTP client of the process:
    loading the CA bundle is most of the ≈ 20 ms an HTTP client costs to build, once per event loop."""
    import httpx

    return httpx.create_ssl_context()


@lru_cache(maxsize=16)
def _sync_root(api_key: str, timeout_s: float):
    from openai import DefaultHttpxClient, OpenAI

    return OpenAI(base_url="http://127.0.0.1/v1", api_key=api_key, timeout=timeout_s, max_retries=0,
                  http_client=DefaultHttpxClient(limits=_limits(), verify=_tls()))


@lru_cache(maxsize=4096)
def shared_client(base_url: str, api_key: str, timeout_s: float):
    """One ``openai.OpenAI`` client per endpoint, shared by every thread (the SDK is thread-safe).
    The endpoints' clients share one HTTP connection pool (:data:`CONNECTIONS`): a client of its
    own costs ≈ 20 ms of CPU to build, which 128 replicas would pay 128 times.

    Retries are the pool's job (it logs each failed attempt), so the client makes none.
    """
    return _sync_root(api_key or "EMPTY", timeout_s).with_options(base_url=base_url)


_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Any]]" = weakref.WeakKeyDictionary()
_async_lock = threading.Lock()


def async_client(base_url: str, api_key: str, timeout_s: float):
    """The ``openai.AsyncOpenAI`` client of ``base_url`` for the running event loop (created on first
    use; an async client's connections belong to the loop that opened them, so each loop, e.g. each
    of the runner's worker threads, gets its own). A loop's endpoints share one HTTP connection
    pool (:data:`CONNECTIONS`), built once per loop. No retries: the pool's job, as for
    :func:`shared_client`."""
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    loop = asyncio.get_running_loop()
    root_key = (api_key or "EMPTY", timeout_s)
    with _async_lock:
        clients = _async_clients.setdefault(loop, {})
        client, root = clients.get((base_url, *root_key)), clients.get(root_key)
    if client is not None:
        return client
    if root is None:  # built outside the lock (milliseconds); only this loop's thread builds its clients
        root = AsyncOpenAI(base_url=base_url, api_key=root_key[0], timeout=timeout_s, max_retries=0,
                           http_client=DefaultAsyncHttpxClient(limits=_limits(), verify=_tls()))
    with _async_lock:
        root = clients.setdefault(root_key, root)
        return clients.setdefault((base_url, *root_key), root.with_options(base_url=base_url))


def is_refused_connection(exc: BaseException) -> bool:
    """A connection the endpoint refused or dropped (not a timeout of a live, slow server)."""
    import openai

    return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


class EndpointRotation:
    """Round-robin over replica endpoints, skipping those that refused a connection recently.

    Thread-safe. ``order()`` gives every endpoint once: live ones from the next in turn, then the
    ones marked dead (tried last, in case they are back).
    """

    def __init__(self, endpoints: list[str], dead_for_s: float = 30.0):
        if not endpoints:
            raise InputError("endpoints must name at least one base URL")
        self.endpoints = list(endpoints)
        self.dead_for_s = dead_for_s
        self._turn = itertools.count()
        self._dead_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def order(self) -> list[str]:
        with self._lock:
            start = next(self._turn) % len(self.endpoints)
            now = time.monotonic()
            rotated = self.endpoints[start:] + self.endpoints[:start]
            live = [e for e in rotated if self._dead_until.get(e, 0.0) <= now]
            return live + [e for e in rotated if e not in live]

    def mark_dead(self, endpoint: str) -> bool:
        """Mark ``endpoint`` dead for ``dead_for_s``; True when it was live until now."""
        with self._lock:
            now = time.monotonic()
            was_live = self._dead_until.get(endpoint, 0.0) <= now
            self._dead_until[endpoint] = now + self.dead_for_s
            return was_live

    def mark_alive(self, endpoint: str) -> None:
        with self._lock:
            self._dead_until.pop(endpoint, None)
