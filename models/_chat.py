"""Shared pieces of the chat-model backends: message conversion, sample metadata, few-shot
rendering, and :class:`NativeMember`, the member contract of Agora's own chat models."""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration

from agora.models.contract import Sample, SamplingParams
from agora.models.environment import env_int

_ROLE = {"human": "user", "ai": "assistant", "system": "system", "user": "user", "assistant": "assistant"}


def default_threads() -> int:
    """Threads for the embedded llama.cpp engine: ``AGORA_LLAMA_THREADS`` or the cores this
    process may use.

    Raises:
        EnvironmentVariableError: ``AGORA_LLAMA_THREADS`` is not a whole number from 1 to 512 in ASCII digits."""
    env = env_int("AGORA_LLAMA_THREADS")  # a bad value: one line naming the variable
    if env:
        return env
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


MAX_CHARS_PER_TOKEN = 32
"""Characters per allowed token past which a reply is cut (``max_tokens`` × this): real text averages
3-5 characters per token, so only a server that ignored ``max_tokens`` reaches it."""
CUT_MARKER = " [... cut by Agora: the reply ran far past max_tokens]"
"""Appended to a reply cut at ``MAX_CHARS_PER_TOKEN × max_tokens`` characters (no digits, so no
answer is read from it)."""


def cap_reply(text: str, max_tokens: int) -> tuple[str, int]:
    """``(text, characters cut)``: ``text`` cut at ``MAX_CHARS_PER_TOKEN * max_tokens`` characters
    with :data:`CUT_MARKER` appended, or unchanged (0 cut) when shorter.

    >>> cap_reply("x" * 100, 2)
    ('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx [... cut by Agora: the reply ran far past max_tokens]', 36)
    """
    limit = MAX_CHARS_PER_TOKEN * max(1, int(max_tokens))
    if len(text) <= limit:
        return text, 0
    return text[:limit] + CUT_MARKER, len(text) - limit


def to_dicts(messages: Sequence[BaseMessage | dict]) -> list[dict[str, str]]:
    """LangChain messages (or OpenAI-style dicts) -> ``[{"role", "content"}]``."""
    out = []
    for m in messages:
        if isinstance(m, dict):
            out.append({"role": _ROLE.get(m["role"], m["role"]), "content": str(m["content"])})
        else:
            out.append({"role": _ROLE.get(m.type, m.type), "content": m.text if hasattr(m, "text") else str(m.content)})
    return out


def to_messages(dicts: Sequence[dict]) -> list[BaseMessage]:
    """``[{"role", "content"}]`` -> LangChain messages."""
    kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    return [kinds[d["role"]](content=d["content"]) for d in dicts]


def to_sample(gen: ChatGeneration, *, latency_s: float, seed: int | None, usage: str | None = None,
              completion_tokens: int | None = None) -> Sample:
    """A :class:`Sample` of one LangChain generation: its text, its ``usage_metadata`` tokens
    (``usage="unknown"`` and zero counts when it has none; ``usage`` overrides the mark and
    ``completion_tokens`` the count, when it has usage), and its
    ``response_metadata`` ``latency_s``/``finish_reason``/``logprob``/``top_logprobs`` (``latency_s``
    the argument when it has none). ``model`` and ``call_id`` are left for the pool."""
    msg = gen.message
    tokens = msg.usage_metadata if isinstance(msg, AIMessage) else None
    meta = msg.response_metadata or {}
    info = gen.generation_info or {}
    mark = usage or meta.get("usage") or ("exact" if tokens else "unknown")
    content = msg.content
    text = content if isinstance(content, str) else (msg.text if content else "")
    return Sample(
        text=text or "", model="",
        prompt_tokens=int(tokens.get("input_tokens", 0) or 0) if tokens else 0,
        completion_tokens=(completion_tokens if completion_tokens is not None else
                           int(tokens.get("output_tokens", 0) or 0)) if tokens else 0,
        latency_s=float(meta.get("latency_s", latency_s)),
        finish_reason=meta.get("finish_reason", info.get("finish_reason")),
        logprob=meta.get("logprob"), top_logprobs=meta.get("top_logprobs"), seed=seed,
        usage="unknown" if not tokens else mark)


def _seed(params: SamplingParams, i: int) -> int | None:
    return None if params.seed is None else int(params.seed) + i


class NativeMember:
    """The member contract (:class:`agora.models.contract.ModelMember`) for Agora's own chat models
    (llama.cpp, OpenAI-compatible, transformers, vLLM, the scripted fake): they take every
    :class:`SamplingParams` field as a ``generate`` keyword, honour ``n`` and count each
    sample's tokens, so a call is one ``_generate`` (``_agenerate``) and its generations become
    the samples (sample ``i`` seeded ``seed + i``). LangChain's callback layer is skipped: the
    pool traces every call itself."""

    tops_up = True
    """Fewer than ``n`` samples means the model kept returning fewer: the OpenAI-compatible backend
    already asked its server again for the rest (:mod:`agora.models.openai_backend`), so the pool
    accepts them (:class:`agora.models.contract.ModelMember`)."""

    def sample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        start = time.perf_counter()
        result = self._generate(to_messages(messages), stop=list(params.stop) or None,  # type: ignore[attr-defined]
                                **params.backend_kwargs())
        return self._samples(result.generations, params, start)

    async def asample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        start = time.perf_counter()
        result = await self._agenerate(to_messages(messages), stop=list(params.stop) or None,  # type: ignore[attr-defined]
                                       **params.backend_kwargs())
        return self._samples(result.generations, params, start)

    @staticmethod
    def _samples(generations: list, params: SamplingParams, start: float) -> list[Sample]:
        share = (time.perf_counter() - start) / max(1, len(generations))
        return [to_sample(g, latency_s=share, seed=_seed(params, i)) for i, g in enumerate(generations)]


def generation(
    text: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    latency_s: float,
    model_name: str,
    finish_reason: str | None,
    logprob: float | None = None,
    extra: dict[str, Any] | None = None,
    cached_tokens: int = 0,
) -> ChatGeneration:
    """One sample as a ChatGeneration carrying token usage and latency in standard fields
    (``extra={"usage": "split"}`` marks completion tokens that are a share of the request's;
    ``cached_tokens``, prompt tokens read from a cache instead of evaluated, go to langchain-core's
    ``usage_metadata["input_token_details"]["cache_read"]``)."""
    meta = {"model_name": model_name, "finish_reason": finish_reason, "latency_s": latency_s}
    if logprob is not None:
        meta["logprob"] = logprob
    if extra:
        meta.update(extra)
    usage = {
        "input_tokens": prompt_tokens,
        "output_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens:
        usage["input_token_details"] = {"cache_read": int(cached_tokens)}
    message = AIMessage(
        content=text,
        usage_metadata=usage,
        response_metadata=meta,
    )
    return ChatGeneration(message=message, generation_info={"finish_reason": finish_reason})


def render_fewshot(messages: list[dict[str, str]], labels: tuple[str, str] = ("Question", "Answer")) -> str:
    """Render a chat as a plain few-shot transcript for base (non-chat) models.

    ``[system, user, assistant, ..., user]`` becomes::

        {system}

        Question: {user}
        Answer: {assistant}

        Question: {user}
        Answer:
    """
    q, a = labels
    parts: list[str] = []
    for m in messages:
        if m["role"] == "system":
            parts.append(m["content"].strip() + "\n\n")
        elif m["role"] == "user":
            parts.append(f"{q}: {m['content'].strip()}\n{a}:")
        else:
            parts.append(f" {m['content'].strip()}\n\n")
    text = "".join(parts)
    if messages and messages[-1]["role"] == "assistant":  # continue the last answer
        text = text.rstrip("\n")
    return text


def fewshot_stops(labels: tuple[str, str] = ("Question", "Answer")) -> list[str]:
    """Stop sequences that end a few-shot answer before the model writes the next question."""
    return [f"\n{labels[0]}:", f"\n\n{labels[0]}", "\n\n\n"]
