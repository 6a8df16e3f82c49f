"""Chat model for any OpenAI-compatible server (``vllm serve``, llama.cpp's server, ...).

**Concurrency.** Graphs fan out with LangGraph ``Send``; the branches run in threads, and each
branch's synchronous call goes out at once on a shared, thread-safe ``openai.OpenAI`` client (one
per endpoint, with its own connection pool), so a fan-out of n agents reaches the server together
and vLLM batches it. Nothing here takes a lock around a request.

**n samples.** Asks for ``n`` choices in one request; a server that returns fewer (some ignore
``n``) is asked again for the rest, with the seed moved on by the number already received, so a
call yields ``n`` generations unless the server keeps returning none. Token usage per choice: the
server reports completion tokens for all choices together; each choice gets its own count when
log-probabilities are returned (one per token), else an equal share (:func:`split_tokens`).

**Endpoints.** A model may have several replicas; requests rotate over them. An endpoint that
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

import itertools
import logging
import threading
import time
from functools import lru_cache
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from agora.models._chat import NativeMember, fewshot_stops, generation, render_fewshot, to_dicts
from agora.models.errors import InvalidReplyError, ModelUnavailableError

log = logging.getLogger("agora.openai")


@lru_cache(maxsize=64)
def shared_client(base_url: str, api_key: str, timeout_s: float):
    """One ``openai.OpenAI`` client per endpoint, shared by every thread (the SDK is thread-safe).

    Retries are the pool's job (it logs each failed attempt), so the client makes none.
    """
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0)


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


def _is_refused_connection(exc: BaseException) -> bool:
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
            raise ValueError("endpoints must name at least one base URL")
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
            raise ValueError("OpenAICompatibleChatModel needs base_url or endpoints")
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

    def _send(self, request: dict[str, Any]) -> tuple[Any, str]:
        """Send one request to the next live endpoint; on a refused connection, try the others."""
        import openai

        errors = []
        for endpoint in self._rotation.order():
            api = self.client(endpoint)
            create = api.completions.create if self.prompt_format == "fewshot" else api.chat.completions.create
            try:
                try:
                    response = create(**request)
                except openai.BadRequestError as exc:
                    if not ({"response_format", "extra_body"} & request.keys()):
                        raise
                    plain = {k: v for k, v in request.items() if k not in ("response_format", "extra_body")}
                    response = create(**plain)  # raises again when the constraint was not the problem
                    self._schema_refused = True
                    log.warning("model %s at %s refused structured output (%s); asking without it from now "
                                "on, replies are parsed strictly", self.model_name or self.model, endpoint, exc)
            except Exception as exc:
                if not _is_refused_connection(exc):
                    raise
                # Logged once per outage, not once per request of a concurrent fan-out.
                level = logging.ERROR if self._rotation.mark_dead(endpoint) else logging.DEBUG
                log.log(level, "model %s: endpoint %s is unreachable (%s); skipping it for %.0f s",
                        self.model_name or self.model, endpoint, exc, self.dead_for_s)
                errors.append(f"{endpoint}: {exc}")
                continue
            self._rotation.mark_alive(endpoint)
            return response, endpoint
        raise ModelUnavailableError(f"no endpoint of {self.model!r} answers ({'; '.join(errors)})")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
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
        generations = []
        for _ in range(n):  # at most n requests: each returns at least one choice, or we stop
            # vLLM refuses n > 1 with greedy sampling (identical samples): ask for them one at a time.
            want = 1 if request["temperature"] == 0 else n - len(generations)
            if len(generations) >= n:
                break
            if seed is not None:
                request["seed"] = int(seed) + len(generations)
            start = time.perf_counter()
            response, endpoint = self._send({**request, "n": want})
            latency = time.perf_counter() - start
            if not hasattr(response, "choices"):  # the SDK hands back the body of a non-JSON reply (HTML...)
                raise InvalidReplyError(f"model {self.model_name or self.model} at {endpoint} sent a reply that is not "
                                 f"a completion: {str(response)[:200]!r}")
            choices = list(response.choices or [])[:want]
            if not choices:  # with no generation at all the pool logs a failed attempt and retries
                log.warning("model %s at %s returned no choices", self.model_name or self.model, endpoint)
                break
            usage = response.usage
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            parsed = [self._choice(c) for c in choices]
            shares = split_tokens(int(getattr(usage, "completion_tokens", 0) or 0), len(choices))
            for (text, lp, top, count), share, choice in zip(parsed, shares, choices):
                # a count of its own (one logprob per token), else its share of the request's usage
                mark = "unknown" if usage is None else "exact" if count is not None or len(choices) == 1 else "split"
                generations.append(generation(
                    text.strip(), prompt_tokens=prompt_tokens,
                    completion_tokens=count if count is not None else share, latency_s=latency / len(choices),
                    model_name=self.model_name or self.model, finish_reason=choice.finish_reason,
                    logprob=lp, extra={"endpoint": endpoint, "request_latency_s": latency, "usage": mark,
                                       **({"top_logprobs": top} if top else {})},
                ))
        if len(generations) < n:
            log.warning("model %s returned %d of %d samples", self.model_name or self.model, len(generations), n)
        return ChatResult(generations=generations)

    def _choice(self, choice: Any) -> tuple[str, float | None, tuple[dict[str, float], ...] | None, int | None]:
        """``(text, summed logprob, per-token top-k alternatives, token count)`` of one choice."""
        lp = getattr(choice, "logprobs", None)
        if self.prompt_format == "fewshot":
            text = choice.text or ""
            tokens = list(getattr(lp, "token_logprobs", None) or []) if lp is not None else []
            if not tokens:
                return text, None, None, None
            tops = tuple(dict(t) for t in (getattr(lp, "top_logprobs", None) or []) if t)
            return text, float(sum(x for x in tokens if x is not None)), tops or None, len(tokens)
        text = choice.message.content or ""
        content = list(getattr(lp, "content", None) or []) if lp is not None else []
        if not content:
            return text, None, None, None
        tops = tuple({a.token: float(a.logprob) for a in (t.top_logprobs or [])} for t in content)
        return text, float(sum(t.logprob for t in content)), tops if any(tops) else None, len(content)
