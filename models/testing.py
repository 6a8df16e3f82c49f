"""A scripted chat model for tests and examples: protocol logic without a real model.

``ScriptedChatModel(responses=["The answer is 4.", ...])`` returns the scripted texts in order,
one per sample (cycling when ``cycle=True``), or ``ScriptedChatModel(respond=fn)`` answers with
``fn(messages_as_dicts, sample_index)``. Token counts are word counts; latency is ``latency_s``.
Every call is recorded in ``.calls`` (messages and keyword arguments) for assertions. A ``None``
text (or ``""``) is a null (empty) reply, which the pool counts as a failed attempt. The model
implements the member contract itself, as Agora's backends do (:class:`agora.models._chat.NativeMember`).

Under ``agenerate`` (async graph runs) a model without ``latency_s`` answers inline on the event
loop, like a native async client, so a ``respond`` function must not block; with ``latency_s`` it
runs in a worker thread, as LangChain runs sync-only models.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, PrivateAttr

from agora.models._chat import NativeMember, generation, to_dicts


class ScriptedChatModel(NativeMember, BaseChatModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: list[str | None] = []
    respond: Callable[[list[dict], int], str | None] | None = None
    cycle: bool = False
    fail_times: int = 0
    """Raise ``RuntimeError`` on the first ``fail_times`` calls (to test retries)."""
    latency_s: float = 0.0
    name_: str = "scripted"
    _i: int = PrivateAttr(default=0)
    _failures: int = PrivateAttr(default=0)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    calls: list[dict[str, Any]] = []

    @property
    def _llm_type(self) -> str:
        return "agora-scripted"

    def _next(self, chat: list[dict], index: int) -> str:
        if self.respond is not None:
            return self.respond(chat, index)
        if self._i >= len(self.responses):
            if not self.cycle or not self.responses:
                raise RuntimeError(f"ScriptedChatModel ran out of responses after {self._i}")
            self._i = 0
        text = self.responses[self._i]
        self._i += 1
        return text

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        chat = to_dicts(messages)
        with self._lock:
            self.calls.append({"messages": chat, "stop": stop, **kwargs})
            if self._failures < self.fail_times:
                self._failures += 1
                raise RuntimeError("scripted failure")
            texts = [self._next(chat, i) for i in range(int(kwargs.get("n", 1)))]
        if self.latency_s:
            time.sleep(self.latency_s)
        prompt_tokens = sum(len(m["content"].split()) for m in chat)
        return ChatResult(generations=[  # a None text is a null reply (content: null): an empty sample
            generation(t or "", prompt_tokens=prompt_tokens, completion_tokens=len((t or "").split()),
                       latency_s=self.latency_s, model_name=self.name_, finish_reason="stop")
            for t in texts
        ])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        if self.latency_s:  # a slow model: a worker thread, as for any sync-only chat model
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        return self._generate(messages, stop=stop, **kwargs)
