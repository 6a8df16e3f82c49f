"""Model-call errors, classified once for every backend: retry or not, how long to wait.

Modelled on Inspect AI's ``ModelAPI.should_retry``. The pool (:class:`agora.models.pool.ModelPool`)
asks :func:`is_transient` after every failed attempt:

* **transient**, retried with backoff: timeouts, connection errors, HTTP 408/409/429/5xx (a 429 or
  503 waits for its ``Retry-After``), a reply that is not a completion (HTML page, invalid JSON, a
  200 whose body is an error object, ``{"error": {...}}``),
  an empty or null reply (:class:`~agora.models.errors.EmptyResponseError`), and any error of a
  kind not listed below (a scripted failure, a crashed worker);
* **permanent**, not retried: HTTP 401, 403, 404 and 422 (a wrong key, a wrong model name), a
  ``TypeError``, ``NotImplementedError`` or ``ValueError`` raised by the client (a parameter the
  model does not take, a model file that will not load), a missing package or file, a member that
  breaks the member contract (:class:`~agora.models.errors.MemberContractError`: wrong types, too
  few samples).

HTTP 400 stays transient: the fault-injection suite (``tests/test_faults.py``) records a
context-length 400 as two attempts, and a server that refuses a structured-output constraint with
400 is asked again without it (:mod:`agora.models.openai_backend`).

Status codes are read from ``exc.status_code`` (openai, anthropic and most SDKs) or
``exc.response.status_code`` (httpx, requests); ``Retry-After`` from ``exc.response.headers``
(seconds, or an HTTP date).
"""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import parsedate_to_datetime

from agora.models.errors import EmptyResponseError, MemberContractError, ModelUnavailableError

#: HTTP statuses retried with backoff.
TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 521, 522, 524, 529})
#: HTTP statuses that fail at once (the request can never succeed as it is).
PERMANENT_STATUS = frozenset({401, 403, 404, 405, 422})
#: Longest ``Retry-After`` honoured, seconds (a longer one waits this long).
MAX_RETRY_AFTER_S = 60.0


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an API error (``exc.status_code`` or ``exc.response.status_code``), or ``None``."""
    code = getattr(exc, "status_code", None)
    if code is None:
        code = getattr(getattr(exc, "response", None), "status_code", None)
    try:
        return int(code) if code is not None else None
    except (TypeError, ValueError):
        return None


def _permanent_kinds() -> tuple[type, ...]:
    kinds: list[type] = [MemberContractError, TypeError, NotImplementedError, ImportError, FileNotFoundError, PermissionError]
    try:
        from langchain_core.exceptions import (ModelAuthenticationError, ModelNotFoundError,
                                               ModelPermissionDeniedError)

        kinds += [ModelAuthenticationError, ModelNotFoundError, ModelPermissionDeniedError]
    except ImportError:  # pragma: no cover - older langchain_core
        pass
    return tuple(kinds)


def _transient_kinds() -> tuple[type, ...]:
    kinds: list[type] = [TimeoutError, asyncio.TimeoutError, ConnectionError, EmptyResponseError,
                         json.JSONDecodeError]
    try:
        import openai

        kinds += [openai.APIConnectionError]  # includes APITimeoutError
        kinds += [openai.APIResponseValidationError]  # a 200 reply that is not a completion
    except ImportError:  # pragma: no cover
        pass
    try:
        import httpx

        kinds += [httpx.TransportError]  # timeouts, refused and dropped connections
    except ImportError:  # pragma: no cover
        pass
    try:
        from langchain_core.exceptions import ModelConnectionError, ModelRateLimitError, ModelTimeoutError

        kinds += [ModelConnectionError, ModelTimeoutError, ModelRateLimitError]
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


_PERMANENT: tuple[type, ...] | None = None
_TRANSIENT: tuple[type, ...] | None = None


def _kinds() -> tuple[tuple[type, ...], tuple[type, ...]]:
    global _PERMANENT, _TRANSIENT
    if _PERMANENT is None:
        _PERMANENT, _TRANSIENT = _permanent_kinds(), _transient_kinds()
    return _PERMANENT, _TRANSIENT


def is_transient(exc: BaseException) -> bool:
    """Whether a failed model call is worth another attempt (module docstring).

    >>> is_transient(TimeoutError()), is_transient(TypeError("unexpected keyword 'n'"))
    (True, False)
    """
    code = status_code(exc)
    if code is not None:
        if code in PERMANENT_STATUS:
            return False
        if code in TRANSIENT_STATUS or code >= 500 or code == 400:
            return True
    permanent, transient = _kinds()
    if isinstance(exc, transient):  # before ValueError: a JSONDecodeError is a garbled reply
        return True
    if isinstance(exc, permanent):
        return False
    if isinstance(exc, ValueError):
        # langchain-openai's reply to a 200 that is not a completion (an HTML page): a garbled reply;
        # and to a 200 whose body is an error object (``{"error": {...}}``, a server overloaded or
        # failing mid-request), raised as ``ValueError(body["error"])``: the server's error, as a 5xx is
        return (str(exc).startswith("Unexpected response type from OpenAI-compatible endpoint")
                or bool(exc.args) and isinstance(exc.args[0], dict))
    return True


def is_unreachable(exc: BaseException) -> bool:
    """A model that cannot be reached at all (refused or dropped connections, not a slow server):
    after its retries the pool raises :class:`~agora.models.errors.ModelCallError` and the run
    stops, whichever way the member was built (a TOML ``openai`` member or a ``ChatOpenAI``)."""
    if isinstance(exc, ModelUnavailableError):
        return True
    try:
        import openai

        if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
            return True
    except ImportError:  # pragma: no cover
        pass
    try:
        import httpx

        if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError)):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError))


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (``Retry-After``, ``retry-after-ms``), capped at
    :data:`MAX_RETRY_AFTER_S`; ``None`` when it did not say."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return min(MAX_RETRY_AFTER_S, max(0.0, float(ms) / 1000))
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            seconds = float(value)
        except ValueError:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        return min(MAX_RETRY_AFTER_S, max(0.0, seconds))
    except (TypeError, ValueError, AttributeError):
        return None


def backoff_s(attempt: int, exc: BaseException | None = None, *, base_s: float = 0.5, cap_s: float = 8.0) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based): the server's ``Retry-After``
    when it gave one, else ``base_s * 2**attempt`` capped at ``cap_s``."""
    if exc is not None:
        asked = retry_after(exc)
        if asked is not None:
            return asked
    return min(cap_s, base_s * 2**attempt)


def cause(exc: BaseException) -> str:
    """One line naming an error: ``HTTP 401 AuthenticationError: <message>``, at most 300 characters."""
    code = status_code(exc)
    text = " ".join(str(exc).split())
    head = f"HTTP {code} " if code is not None else ""
    return f"{head}{type(exc).__name__}: {text}"[:300]
