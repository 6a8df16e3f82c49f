"""Chat model for any OpenAI-compatible server (``vllm serve``, llama.cpp's server, ...).

**Concurrency.** Graphs fan out with LangGraph ``Send``; every branch's request goes out at once,
so a fan-out of n agents reaches the server together and vLLM batches it. Sync callers share a
thread-safe ``openai.OpenAI`` client per endpoint; async callers (``ModelPool.asample``, the async
graph nodes, an app's ``await graph.ainvoke``) await an ``openai.AsyncOpenAI`` client of their own
event loop (one per loop and endpoint, the endpoints sharing the loop's connection pool,
:func:`~agora.models.openai_endpoints.async_client`): no worker thread per request, so
asyncio's default thread pool (``min(32, cpus + 4)`` threads) does not cap how many requests are
in flight. Nothing here takes a lock around a request.

**Server errors in a 200 reply.** A body ``{"error": {...}}`` with status 200 (some servers answer
that way when a request fails after it was accepted) raises :class:`InvalidReplyError` carrying
the server's message, and the error's ``code`` as ``status_code`` (so a 500 is retried, a 401
not: :func:`agora.models.retry.is_transient`).

**Replies far over ``max_tokens``.** A server that ignores ``max_tokens`` can send megabytes; a
reply longer than :data:`~agora.models._chat.MAX_CHARS_PER_TOKEN` characters per allowed token is cut there, its
``finish_reason`` set to ``"length"`` and :data:`~agora.models._chat.CUT_MARKER` appended (so the trace row says so),
and a warning names the model and both lengths.

**n samples.** Asks for ``n`` choices in one request; a server that returns fewer (some ignore
``n``) is asked again for the rest, with the seed moved on by the number already received, so a
call yields ``n`` generations unless the server keeps returning none. Token usage per choice: the
server reports completion tokens for all choices together; each choice gets its own count when
log-probabilities are returned (one per token), else an equal share (:func:`split_tokens`).

**Endpoints.** A model may have several replicas; requests rotate over them
(:class:`~agora.models.openai_endpoints.EndpointRotation`). An endpoint that
refuses connections is logged, skipped for ``dead_for_s`` seconds, and the request goes to the
next one. When every endpoint refuses, :class:`~agora.models.pool.ModelUnavailableError` is
raised: the pool retries, then stops the run so it can be resumed once the server is back.

**Structured outputs.** A ``json_schema`` keyword constrains the reply: as ``response_format``
json_schema (OpenAI, vLLM, llama.cpp's server) or as vLLM's
``extra_body={"structured_outputs": {"json": schema}}`` (``structured_outputs="vllm"``; the old
``guided_json`` key is ignored by current vLLM). A server that refuses the constraint (HTTP 400)
is asked again without it, once logged per model; replies are parsed strictly by
:func:`agora.models.structured.parse_json_reply` either way.

**Few-shot.** ``prompt_format="fewshot"`` renders the chat as a ``Question:/Answer:`` transcript
and uses ``/v1/completions``, for base models without a chat template (as the llama.cpp backend).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from agora.tasks.errors import InputError
from agora.models._chat import (CUT_MARKER, NativeMember, cap_reply, fewshot_stops, generation, render_fewshot,
                                to_dicts)
from agora.models.errors import InvalidReplyError, ModelUnavailableError
from agora.models.openai_endpoints import EndpointRotation, async_client, is_refused_connection, shared_client
from agora.models.urls import shown_url

log = logging.getLogger("agora.openai")


def split_tokens(total: int, parts: int) -> list[int]:
    """Share ``total`` completion tokens over ``parts`` choices: equal shares, the remainder going
    one token each to the first choices, so the shares add up to ``total``.

    >>> split_tokens(10, 3)
    [4, 3, 3]
    """
    if parts <= 0:
        return []
    base, rest = divmod(max(0, total), parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def _token_count(value: Any) -> int | None:
    """A reply's usage field as a token count: a whole number >= 0 (``None`` or missing: 0), else
    ``None`` (a string, a negative or fractional number: the server's count is not usable)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        return None
    return int(value) if value >= 0 else None


class OpenAICompatibleChatModel(NativeMember, BaseChatModel):
    """An OpenAI-compatible server (one or several replica endpoints) as a LangChain chat model.

    ``generate`` keywords: ``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop``,
    ``logprobs`` (``None``, ``0`` or top-k count), ``json_schema`` (a JSON Schema dict). Each
    generation's ``response_metadata`` carries ``latency_s`` (its share of the request's wall time:
    the request's ``request_latency_s`` over the choices it returned), ``finish_reason``, ``endpoint`` and,
    with logprobs, ``logprob`` (sum over tokens) and ``top_logprobs`` (per token ``{token: lp}``).

    It implements the member contract itself (:class:`agora.models._chat.NativeMember`): ``n``
    samples per call, each with its own completion tokens where the server returns logprobs, else
    its share of the request's (``response_metadata["usage"] == "split"``).

    Raises:
        ModelUnavailableError: every endpoint refused the connection.
        InvalidReplyError: a reply that is not a completion (an HTML page).
        openai.APIError: any other server error (timeouts, HTTP 4xx/5xx), classified by the pool
            (:func:`agora.models.retry.is_transient`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    endpoints: list[str] = Field(default_factory=list)
    """Server roots including ``/v1``, e.g. ``["http://127.0.0.1:8000/v1"]``; requests rotate."""
    base_url: str | None = None
    """A single endpoint (kept for older callers; prepended to ``endpoints``)."""
    model: str
    """Model name as the server knows it (``/v1/models``)."""
    model_name: str = ""
    """Name recorded in traces (defaults to ``model``)."""
    api_key: str = "EMPTY"
    timeout_s: float = 120.0
    dead_for_s: float = 30.0
    """Seconds an endpoint that refused a connection is tried only after the live ones."""
    prompt_format: Literal["chat", "fewshot"] = "chat"
    structured_outputs: Literal["response_format", "vllm", "none"] = "response_format"
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    _rotation: EndpointRotation | None = PrivateAttr(default=None)
    _schema_refused: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _merge_endpoints(self):
        urls = ([self.base_url] if self.base_url else []) + list(self.endpoints)
        self.endpoints = list(dict.fromkeys(u.rstrip("/") for u in urls))
        if not self.endpoints:
            raise InputError("OpenAICompatibleChatModel needs base_url or endpoints")
        self._rotation = EndpointRotation(self.endpoints, self.dead_for_s)
        return self

    @property
    def _llm_type(self) -> str:
        return "agora-openai-compatible"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"endpoints": self.endpoints, "model": self.model}

    def client(self, endpoint: str | None = None):
        """The shared client of ``endpoint`` (default: the first one)."""
        return shared_client(endpoint or self.endpoints[0], self.api_key or "EMPTY", float(self.timeout_s))

    # ------------------------------------------------------------------ requests

    def _schema_fields(self, schema: dict[str, Any] | None) -> dict[str, Any]:
        if schema is None or self.structured_outputs == "none" or self._schema_refused:
            return {}
        if self.structured_outputs == "vllm" or self.prompt_format == "fewshot":
            return {"extra_body": {"structured_outputs": {"json": schema}}}
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "reply", "schema": schema, "strict": True}}}

    def _create(self, api: Any):
        return api.completions.create if self.prompt_format == "fewshot" else api.chat.completions.create

    def _schema_dropped(self, endpoint: str, exc: Exception) -> None:
        self._schema_refused = True
        log.warning("model %s at %s refused structured output (%s); asking without it from now "
                    "on, replies are parsed strictly", self.model_name or self.model, shown_url(endpoint), exc)

    def _refused(self, endpoint: str, exc: Exception, errors: list[str]) -> None:
        """Note a refused connection (logged once per outage, not once per request of a fan-out)."""
        level = logging.ERROR if self._rotation.mark_dead(endpoint) else logging.DEBUG
        log.log(level, "model %s: endpoint %s is unreachable (%s); skipping it for %.0f s",
                self.model_name or self.model, shown_url(endpoint), exc, self.dead_for_s)
        errors.append(f"{shown_url(endpoint)}: {exc}")

    def _send(self, request: dict[str, Any]) -> tuple[Any, str]:
        """Send one request to the next live endpoint; on a refused connection, try the others."""
        import openai

        errors: list[str] = []
        for endpoint in self._rotation.order():
            create = self._create(self.client(endpoint))
            try:
                try:
                    response = create(**request)
                except openai.BadRequestError as exc:
                    if not ({"response_format", "extra_body"} & request.keys()):
                        raise
                    response = create(**_plain(request))  # raises again when the constraint was not the problem
                    self._schema_dropped(endpoint, exc)
            except Exception as exc:
                if not is_refused_connection(exc):
                    raise
                self._refused(endpoint, exc, errors)
                continue
            self._rotation.mark_alive(endpoint)
            return response, endpoint
        raise ModelUnavailableError(f"no endpoint of {self.model!r} answers ({'; '.join(errors)})")

    async def _asend(self, request: dict[str, Any]) -> tuple[Any, str]:
        """:meth:`_send` on this event loop's async clients (:func:`~agora.models.openai_endpoints.async_client`)."""
        import openai

        errors: list[str] = []
        for endpoint in self._rotation.order():
            create = self._create(async_client(endpoint, self.api_key or "EMPTY", float(self.timeout_s)))
            try:
                try:
                    response = await create(**request)
                except openai.BadRequestError as exc:
                    if not ({"response_format", "extra_body"} & request.keys()):
                        raise
                    response = await create(**_plain(request))
                    self._schema_dropped(endpoint, exc)
            except Exception as exc:
                if not is_refused_connection(exc):
                    raise
                self._refused(endpoint, exc, errors)
                continue
            self._rotation.mark_alive(endpoint)
            return response, endpoint
        raise ModelUnavailableError(f"no endpoint of {self.model!r} answers ({'; '.join(errors)})")

    def _request(self, messages: list[BaseMessage], stop: list[str] | None,
                 kwargs: dict[str, Any]) -> tuple[dict[str, Any], int, int | None]:
        """``(request body, n, seed)`` of a ``generate`` call."""
        n = int(kwargs.pop("n", 1))
        seed = kwargs.pop("seed", None)
        logprobs = kwargs.pop("logprobs", None)
        chat = to_dicts(messages)
        stops = list(stop or [])
        request: dict[str, Any] = {
            "model": self.model,
            "temperature": float(kwargs.pop("temperature", self.temperature)),
            "top_p": float(kwargs.pop("top_p", self.top_p)),
            "max_tokens": int(kwargs.pop("max_tokens", self.max_tokens)),
            **self._schema_fields(kwargs.pop("json_schema", None)),
        }
        if self.prompt_format == "fewshot":
            request["prompt"] = render_fewshot(chat)
            stops += [s for s in fewshot_stops() if s not in stops]
            if logprobs is not None:
                request["logprobs"] = int(logprobs)
        else:
            request["messages"] = chat
            if logprobs is not None:
                request["logprobs"] = True
                if logprobs > 0:
                    request["top_logprobs"] = int(logprobs)
        if stops:
            request["stop"] = stops
        return request, n, seed

    def _next(self, request: dict[str, Any], n: int, seed: int | None, got: int) -> dict[str, Any] | None:
        """The next request for the samples still missing (``got`` in hand), or ``None`` when done."""
        if got >= n:
            return None
        # vLLM refuses n > 1 with greedy sampling (identical samples): ask for them one at a time.
        want = 1 if request["temperature"] == 0 else n - got
        if seed is not None:
            request["seed"] = int(seed) + got
        return {**request, "n": want}

    def _received(self, response: Any, endpoint: str, latency: float, want: int, max_tokens: int) -> list:
        """The generations of one reply (empty: the server returned no choice).

        Raises:
            InvalidReplyError: the reply is not a completion, or is a server error sent with status 200
                (its message kept, its ``code`` as ``status_code``).
        """
        name = self.model_name or self.model
        if not hasattr(response, "choices"):  # the SDK hands back the body of a non-JSON reply (HTML...)
            raise InvalidReplyError(f"model {name} at {shown_url(endpoint)} sent a reply that is not "
                                    f"a completion: {str(response)[:200]!r}")
        error = (getattr(response, "model_extra", None) or {}).get("error")
        if error is not None and not response.choices:
            raise _server_error(name, endpoint, error)
        choices = list(response.choices or [])[:want]
        if not choices:  # with no generation at all the pool logs a failed attempt and retries
            log.warning("model %s at %s returned no choices", name, shown_url(endpoint))
            return []
        usage = response.usage
        prompt_tokens, completion_tokens = (_token_count(getattr(usage, f, 0)) for f in ("prompt_tokens", "completion_tokens"))
        if usage is not None and (prompt_tokens is None or completion_tokens is None):
            log.warning("model %s at %s reported token usage that is not a count (%.120r): stored as unknown",
                        name, shown_url(endpoint), usage)
            usage = None  # the choices are good; only the counts are unknown
        prompt_tokens = prompt_tokens if usage is not None else 0
        parsed = [self._choice(c, f"model {name} at {shown_url(endpoint)}") for c in choices]
        shares = split_tokens(completion_tokens if usage is not None else 0, len(choices))
        generations = []
        for (text, lp, top, count), share, choice in zip(parsed, shares, choices):
            # a count of its own (one logprob per token), else its share of the request's usage
            mark = "unknown" if usage is None else "exact" if count is not None or len(choices) == 1 else "split"
            text, cut = cap_reply(text.strip(), max_tokens)
            finish = choice.finish_reason
            if cut:
                finish = "length"
                log.warning("model %s at %s sent a reply of %d characters for max_tokens=%d: stored cut at %d "
                            "characters, marked %r", name, shown_url(endpoint), len(text) - len(CUT_MARKER) + cut, max_tokens,
                            len(text) - len(CUT_MARKER), CUT_MARKER.strip())
            generations.append(generation(
                text, prompt_tokens=prompt_tokens,
                completion_tokens=count if count is not None else share, latency_s=latency / len(choices),
                model_name=name, finish_reason=finish,
                logprob=lp, extra={"endpoint": endpoint, "request_latency_s": latency, "usage": mark,
                                   **({"top_logprobs": top} if top else {}),
                                   **({"cut_chars": cut} if cut else {})},
            ))
        return generations

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        request, n, seed = self._request(messages, stop, kwargs)
        generations: list = []
        for _ in range(n):  # at most n requests: each returns at least one choice, or we stop
            if (body := self._next(request, n, seed, len(generations))) is None:
                break
            start = time.perf_counter()
            response, endpoint = self._send(body)
            got = self._received(response, endpoint, time.perf_counter() - start, body["n"], request["max_tokens"])
            if not got:
                break
            generations += got
        return self._result(generations, n)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        """:meth:`_generate` on the event loop's own async client: no thread per request."""
        request, n, seed = self._request(messages, stop, kwargs)
        generations: list = []
        for _ in range(n):
            if (body := self._next(request, n, seed, len(generations))) is None:
                break
            start = time.perf_counter()
            response, endpoint = await self._asend(body)
            got = self._received(response, endpoint, time.perf_counter() - start, body["n"], request["max_tokens"])
            if not got:
                break
            generations += got
        return self._result(generations, n)

    def _result(self, generations: list, n: int) -> ChatResult:
        if len(generations) < n:
            log.warning("model %s returned %d of %d samples", self.model_name or self.model, len(generations), n)
        return ChatResult(generations=generations)

    def _choice(self, choice: Any, where: str) -> tuple[str, float | None, tuple[dict[str, float], ...] | None,
                                                    int | None]:
        """``(text, summed logprob, per-token top-k alternatives, token count)`` of one choice (``where``:
        ``model NAME at URL``, for errors).

        Raises:
            InvalidReplyError: message content that is neither text nor a list of content parts.
        """
        lp = getattr(choice, "logprobs", None)
        if self.prompt_format == "fewshot":
            text = choice.text or ""
            tokens = list(getattr(lp, "token_logprobs", None) or []) if lp is not None else []
            if not tokens:
                return text, None, None, None
            tops = tuple(dict(t) for t in (getattr(lp, "top_logprobs", None) or []) if t)
            return text, float(sum(x for x in tokens if x is not None)), tops or None, len(tokens)
        text = _content_text(choice.message.content, where)
        content = list(getattr(lp, "content", None) or []) if lp is not None else []
        if not content:
            return text, None, None, None
        tops = tuple({a.token: float(a.logprob) for a in (t.top_logprobs or [])} for t in content)
        return text, float(sum(t.logprob for t in content)), tops if any(tops) else None, len(content)


def _content_text(content: Any, where: str) -> str:
    """The text of a chat message's ``content``: a string as is, ``None`` as ``""``, a list of
    OpenAI-style content parts (``[{"type": "text", "text": "..."}, ...]``, or strings) as its text
    parts joined (LangChain's ``AIMessage.text``; image, audio and refusal parts are left out).

    Raises:
        InvalidReplyError: any other content (a number, an object, a list of neither strings nor parts).
    """
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(part, (str, dict)) for part in content):
        return AIMessage(content=content).text
    raise InvalidReplyError(f"{where} sent message content that is neither text nor a list of content parts: "
                            f"{str(content)[:200]!r}")


def _plain(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` without its structured-output constraint."""
    return {k: v for k, v in request.items() if k not in ("response_format", "extra_body")}


def _server_error(name: str, endpoint: str, error: Any) -> InvalidReplyError:
    """The error of a 200 reply whose body is ``{"error": ...}``: the server's message, type and code."""
    if isinstance(error, dict):
        message = str(error.get("message") or error)
        kind, code = error.get("type"), error.get("code")
    else:
        message, kind, code = str(error), None, None
    details = ", ".join(str(x) for x in (kind, code) if x not in (None, ""))
    exc = InvalidReplyError(f"model {name} at {shown_url(endpoint)} sent an error with status 200: {message[:500]}"
                            + (f" ({details})" if details else ""))
    try:
        status = int(code)
    except (TypeError, ValueError):
        status = None
    if status is not None and 100 <= status <= 599:
        exc.status_code = status  # type: ignore[attr-defined]  # read by agora.models.retry.status_code
    return exc
