"""Shared pieces of the chat-model backends: message conversion, sample metadata, few-shot rendering."""

from __future__ import annotations

from typing import Any, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration

_ROLE = {"human": "user", "ai": "assistant", "system": "system", "user": "user", "assistant": "assistant"}


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
) -> ChatGeneration:
    """One sample as a ChatGeneration carrying token usage and latency in standard fields."""
    meta = {"model_name": model_name, "finish_reason": finish_reason, "latency_s": latency_s}
    if logprob is not None:
        meta["logprob"] = logprob
    if extra:
        meta.update(extra)
    message = AIMessage(
        content=text,
        usage_metadata={
            "input_tokens": prompt_tokens,
            "output_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
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
