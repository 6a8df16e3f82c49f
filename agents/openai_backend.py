"""Chat model for any OpenAI-compatible server (``vllm serve``, llama.cpp's server, ...).

Asks for ``n`` choices in one request; a server that returns fewer (some ignore ``n``) is asked
again for the rest, so a call always yields ``n`` generations. Token usage per choice: the
server reports prompt tokens once and completion tokens for all choices together, so each choice
gets the prompt count and an equal share of the completion count unless the server reports
per-choice counts.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, PrivateAttr

from agora.agents._chat import generation, to_dicts


class OpenAICompatibleChatModel(BaseChatModel):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint as a LangChain chat model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str
    """Server root including ``/v1``, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """Model name as the server knows it (``/v1/models``)."""
    model_name: str = ""
    """Name recorded in traces (defaults to ``model``)."""
    api_key: str = "EMPTY"
    timeout_s: float = 120.0
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    _client: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "agora-openai-compatible"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "model": self.model}

    def client(self):
        if self._client is None:
            from openai import OpenAI

            # Retries are the pool's job (it logs each failed attempt), not the client's.
            self._client = OpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                  timeout=self.timeout_s, max_retries=0)
        return self._client

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        n = int(kwargs.pop("n", 1))
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_dicts(messages),
            "temperature": float(kwargs.pop("temperature", self.temperature)),
            "top_p": float(kwargs.pop("top_p", self.top_p)),
            "max_tokens": int(kwargs.pop("max_tokens", self.max_tokens)),
        }
        if stop:
            request["stop"] = list(stop)
        seed = kwargs.pop("seed", None)
        for key in ("logprobs", "top_logprobs", "response_format", "extra_body"):
            if key in kwargs and kwargs[key] is not None:
                request[key] = kwargs.pop(key)
        generations = []
        attempts = 0
        while len(generations) < n and attempts < n:
            attempts += 1
            want = n - len(generations)
            if seed is not None:
                request["seed"] = int(seed) + len(generations)
            start = time.perf_counter()
            response = self.client().chat.completions.create(n=want, **request)
            latency = time.perf_counter() - start
            choices = response.choices[:want]
            usage = response.usage
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            total_completion = int(getattr(usage, "completion_tokens", 0) or 0)
            share = total_completion // max(1, len(choices))
            for choice in choices:
                logprob = None
                lp = getattr(choice, "logprobs", None)
                if lp is not None and getattr(lp, "content", None):
                    logprob = float(sum(t.logprob for t in lp.content))
                generations.append(
                    generation(
                        (choice.message.content or "").strip(),
                        prompt_tokens=prompt_tokens,
                        completion_tokens=share,
                        latency_s=latency,
                        model_name=self.model_name or self.model,
                        finish_reason=choice.finish_reason,
                        logprob=logprob,
                    )
                )
        return ChatResult(generations=generations)
