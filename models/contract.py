"""The member contract: what a model must do to be a member of the pool.

A member takes a chat and :class:`SamplingParams` and returns exactly the samples asked for, each
with its own tokens, latency share, finish reason and seed (the shape of simple-evals'
``SamplerBase.__call__`` and Inspect AI's ``ModelAPI.generate``, with ``n`` samples per call)::

    class MyMember:
        def sample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]: ...
        async def asample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]: ...

The pool (:class:`agora.models.pool.ModelPool`) does the rest, the same way for every member:
the member's ``system_prompt`` and ``temperature``, retries with backoff for transient errors
(:mod:`agora.models.retry`), an empty or null reply as a failed attempt, trace records, call ids.
Agora's own backends implement the contract themselves (:class:`agora.models._chat.NativeMember`);
any other LangChain ``BaseChatModel`` is wrapped by :class:`agora.models.langchain.LangChainMember`.
docs/models.md says what a member must support and how its tokens are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from agora.models.validation import Check, Count, Number, is_count, settings

#: How a sample's token counts were obtained: ``exact`` (the backend counted this sample's tokens),
#: ``split`` (the provider reported one usage for a request of several samples; each sample holds
#: its share of the completion tokens, so the request's total is counted once) or ``unknown``
#: (no usage reported: the sample's counts are 0 and its trace record holds ``None``).
Usage = Literal["exact", "split", "unknown"]

#: The most tokens one sample may be asked for (``max_tokens``): beyond the context of any model
#: served today (1M tokens); a larger value is a typo, not a request a server can honour.
MAX_TOKENS_LIMIT = 1_000_000


@settings
class SamplingParams:
    """Sampling settings for one call. ``n`` samples are returned per call."""

    n: Annotated[int, Count(1)] = 1
    temperature: Annotated[float, Number(0)] = 0.7
    top_p: Annotated[float, Number(0, 1, low_open=True)] = 0.95
    max_tokens: Annotated[int, Count(1), Check(lambda v: v <= MAX_TOKENS_LIMIT,
                                               f"at most {MAX_TOKENS_LIMIT} (beyond any model's context)")] = 256
    """Upper bound on generated tokens per sample."""
    seed: Annotated[int | None, Check(is_count, "an integer or None", optional=True)] = None
    """Seed of the first sample; sample ``i`` uses ``seed + i``."""
    stop: Annotated[tuple[str, ...], Check(lambda v: isinstance(v, (tuple, list)) and all(isinstance(s, str) for s in v),
                                           "a tuple of strings")] = ()
    """Stop strings (a tuple or list; a bare string is refused, as it would be read as its letters)."""
    logprobs: Annotated[int | None, Check(lambda v: is_count(v) and 0 <= v <= 20, "None or an integer in 0..20",
                                          optional=True)] = None
    """``None``: no log-probabilities; ``0``: each sample's summed token log-probability
    (:attr:`Sample.logprob`); ``k >= 1``: also the top-k alternatives of every generated token
    (:attr:`Sample.top_logprobs`). Backends without them leave the fields empty."""
    json_schema: dict[str, Any] | None = None
    """JSON Schema the reply must follow (structured outputs where the backend supports them; parse
    replies with :func:`agora.models.structured.parse_json_reply` either way)."""

    def as_dict(self) -> dict[str, Any]:
        d = {"n": self.n, "temperature": self.temperature, "top_p": self.top_p,
             "max_tokens": self.max_tokens, "seed": self.seed, "stop": list(self.stop)}
        d.update({k: getattr(self, k) for k in ("logprobs", "json_schema") if getattr(self, k) is not None})
        return d

    def backend_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of Agora's own chat models' ``generate`` (``stop`` goes separately)."""
        kwargs = {"n": self.n, "temperature": self.temperature, "top_p": self.top_p,
                  "max_tokens": self.max_tokens, "seed": self.seed}
        kwargs.update({k: getattr(self, k) for k in ("logprobs", "json_schema") if getattr(self, k) is not None})
        return kwargs


@dataclass(frozen=True, slots=True)
class Sample:
    """One generated text with its cost."""

    text: str
    model: str
    prompt_tokens: int
    """Tokens of the prompt this sample was generated from (each sample of a request saw the
    whole prompt); 0 when ``usage == "unknown"``."""
    completion_tokens: int
    """Tokens this sample generated: its own count (``usage == "exact"``), its share of the
    request's count (``"split"``), or 0 when unknown (``"unknown"``; the trace record says ``None``)."""
    latency_s: float
    """This sample's share of the wall time of the request that produced it, in seconds: the
    samples of one request add up to its wall time, so summing over samples gives model time
    without counting a batched request n times (the backend's ``response_metadata`` has the
    request's own ``request_latency_s`` where it batches)."""
    finish_reason: str | None = None
    logprob: float | None = None
    """Sum of token log-probabilities, when the backend returns them."""
    top_logprobs: tuple[dict[str, float], ...] | None = None
    """Per generated token, the top-k alternatives ``{token: logprob}`` (``SamplingParams.logprobs >= 1``)."""
    call_id: str = ""
    """Id of the trace record of this sample (set by the pool)."""
    seed: int | None = None
    """The seed this sample was drawn with (``None``: unseeded, or the model takes no seed)."""
    usage: Usage = "exact"
    """How its token counts were obtained (:data:`Usage`)."""


@runtime_checkable
class ModelMember(Protocol):
    """A pool member: ``params.n`` samples per call, sync and async.

    ``messages`` are ``{"role", "content"}`` dicts (roles ``system``, ``user``, ``assistant``),
    the member's system prompt already prepended. The returned samples' ``call_id`` is left empty
    and ``model`` may be anything: the pool sets both.

    A member returns a ``list`` of exactly ``params.n`` :class:`Sample` objects. The pool checks
    what it gets (:class:`agora.models.pool.ModelPool`): more than ``n`` keeps the first ``n``
    (a warning, once per member); an empty list is a reply without choices (a failed attempt,
    retried); anything else (fewer than ``n``, not a list, items that are not :class:`Sample`,
    plain strings) is a :class:`~agora.models.errors.MemberContractError`: a failed attempt naming
    the member and what it returned, not retried. A member that already asks its model again for
    missing samples, and so returns fewer only when the model keeps returning fewer, says so with
    a class attribute ``tops_up = True`` (Agora's backends and the LangChain adapter do); the pool
    then accepts fewer. Sample ``i`` of a seeded call uses ``params.seed + i``. An empty text is
    allowed (the pool counts it as a failed attempt and asks again). Errors propagate: the pool
    classifies them (:func:`agora.models.retry.is_transient`) and retries the transient ones.
    """

    def sample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        """``params.n`` samples for one chat."""
        ...

    async def asample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        """:meth:`sample` for async callers (must not block the event loop for long)."""
        ...
