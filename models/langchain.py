"""Any LangChain chat model as a pool member: :class:`LangChainMember`, the adapter of the member
contract (:mod:`agora.models.contract`) over ``langchain_core``'s ``BaseChatModel``.

``ModelPool.from_chat_models({"m": ChatOpenAI(...)})`` and a pool file entry
``backend = "langchain"`` (``class = "pkg.mod:ChatClass"``) both end here
(:func:`langchain_member`). What the adapter guarantees, whatever the model supports:

* **n samples.** The model's own ``n`` where it honours it (a ``ChatOpenAI``, a model with an
  ``n`` field, or one that takes ``n`` as a call keyword); where it returns fewer, further
  requests for the rest, seeded ``seed + i``. A model that refuses ``n`` (``TypeError``, the
  ``ChatOllama`` shape) is asked ``n`` times without it, and the member remembers that.
* **Tokens per sample.** Each generation's ``usage_metadata``. Where a request of several samples
  reports one usage repeated on every sample (``ChatOpenAI`` with ``n > 1``), its completion
  tokens are split over the samples (:func:`agora.models.openai_backend.split_tokens`, marked
  ``usage="split"``) so the request's total is counted once; per-choice counts from
  log-probabilities are exact. A model without usage is recorded as unknown, said once.
* **Parameters.** ``temperature``, ``top_p``, ``seed``, ``max_tokens`` go to the field the model
  declares (``max_tokens``, ``max_completion_tokens``, ``num_predict``, ``max_output_tokens``...;
  set on a shallow copy per request, the way ``ChatOllama`` and most integrations read them), else
  as call keywords; ``stop`` as LangChain's ``stop``. A ``ChatOpenAI`` gets call keywords, and,
  pointed at a server other than api.openai.com, ``max_tokens`` in the body as well (it sends
  ``max_completion_tokens``, which llama.cpp's server ignores). A parameter the model cannot take
  is said once per member, not silently dropped.
* **Replies far over ``max_tokens``** (a server that ignored it) are stored cut at
  :data:`~agora.models._chat.MAX_CHARS_PER_TOKEN` characters per allowed token, marked with
  :data:`~agora.models._chat.CUT_MARKER` and ``finish_reason="length"``, said once per member.
* **JSON schemas** (``SamplingParams.json_schema``): ``response_format`` json_schema for a
  ``ChatOpenAI``, the model's own ``with_structured_output`` where it has one, else the schema in
  the prompt; replies are parsed strictly by the caller either way
  (:func:`agora.models.structured.parse_json_reply`).

Errors propagate to the pool, which classifies them (:mod:`agora.models.retry`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.language_models import BaseChatModel

from agora.models._chat import CUT_MARKER, cap_reply, to_messages, to_sample
from agora.models.contract import Sample, SamplingParams

log = logging.getLogger("agora.langchain")

CALL_THREADS = 1024
"""Threads of :func:`call_threads`, created as calls need them: blocking model calls in flight at once."""
_threads: ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def call_threads() -> ThreadPoolExecutor:
    """The process-wide pool in which async callers run LangChain chat models' blocking calls
    (:meth:`LangChainMember.asample`): up to :data:`CALL_THREADS` calls at once, whatever the
    event loop's default executor."""
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix="agora-chat-model")
        return _threads

#: Model fields that take each sampling parameter, in order of preference.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "seed": ("seed", "random_seed"),
    "max_tokens": ("max_tokens", "max_completion_tokens", "num_predict", "max_output_tokens", "max_new_tokens"),
    "n": ("n",),
}


def _is_chat_openai(model: Any) -> bool:
    """A ``langchain_openai`` chat model (``ChatOpenAI``, ``AzureChatOpenAI``...)."""
    return any(c.__module__.startswith("langchain_openai") for c in type(model).__mro__)


def _split(total: int, parts: int) -> list[int]:
    base, rest = divmod(max(0, total), parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


class LangChainMember:
    """A ``BaseChatModel`` as a member of the pool (module docstring).

    Args:
        chat_model: any ``langchain_core`` chat model.
        name: the member's name (in messages said once per member).

    Thread-safe: a request works on its own shallow copy when fields are set, and what the member
    learns about its model (it refuses call keywords, it ignores ``n``) is set once under a lock.
    """

    tops_up = True
    """Fewer than ``n`` samples means the model kept returning fewer after further requests
    (:meth:`sample`): the pool accepts them (:class:`agora.models.contract.ModelMember`)."""

    def __init__(self, chat_model: BaseChatModel, *, name: str):
        self.chat_model = chat_model
        self.name = name
        fields = set(getattr(type(chat_model), "model_fields", {}) or {})
        self.openai = _is_chat_openai(chat_model)
        self.fields = {p: next((a for a in aliases if a in fields), None) for p, aliases in FIELD_ALIASES.items()}
        self.takes_keywords = True
        """False once the model refused call keywords with ``TypeError`` (then fields only)."""
        self.one_per_request = False
        """True once the model returned fewer samples than ``n`` asked for (or refused ``n``)."""
        self.structured = ("response_format" if self.openai else
                           "method" if type(chat_model).with_structured_output is not BaseChatModel.with_structured_output
                           else "prompt")
        self._said: set[str] = set()
        self._lock = threading.Lock()
        if self.openai and getattr(chat_model, "max_retries", None) != 0:
            self.say("client-retries", "its client retries failed requests itself (max_retries=%s); set "
                     "max_retries=0 so the pool's retries, which it logs and traces, are the only ones",
                     getattr(chat_model, "max_retries", None))

    def __repr__(self) -> str:
        return f"LangChainMember({type(self.chat_model).__name__}, name={self.name!r})"

    def say(self, key: str, message: str, *args: Any, level: int = logging.WARNING) -> None:
        """Log ``message`` once per member and ``key``."""
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        log.log(level, f"model %s (%s): {message}", self.name, type(self.chat_model).__name__, *args)

    # ------------------------------------------------------------------ one request

    def _request(self, messages: list[dict[str, str]], params: SamplingParams, n: int,
                 seed: int | None) -> tuple[BaseChatModel, list, dict[str, Any]]:
        """``(model to call, LangChain messages, call keywords)`` of one request for ``n`` samples."""
        values: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p,
                                  "max_tokens": params.max_tokens}
        if seed is not None:
            values["seed"] = seed
        if n > 1:
            values["n"] = n
        kwargs: dict[str, Any] = {}
        update: dict[str, Any] = {}
        if self.openai:
            kwargs.update(values)
            base = str(getattr(self.chat_model, "openai_api_base", None) or "")
            if base and "api.openai.com" not in base:  # llama.cpp's server reads max_tokens only
                kwargs["extra_body"] = {**(getattr(self.chat_model, "extra_body", None) or {}),
                                        "max_tokens": params.max_tokens}
            if params.logprobs is not None:
                kwargs["logprobs"] = True
                if params.logprobs > 0:
                    kwargs["top_logprobs"] = params.logprobs
        else:
            dropped = []
            for param, value in values.items():
                field = self.fields[param]
                if field is not None:
                    update[field] = value
                elif self.takes_keywords:
                    kwargs[param] = value
                elif param != "n":
                    dropped.append(param)
            if dropped:
                self.say("dropped:" + ",".join(dropped), "takes no %s (no such field, and it refuses call "
                         "keywords): sampling without", ", ".join(dropped))
            if params.logprobs is not None:
                self.say("logprobs", "log-probabilities are not read from this model: samples have none")
        if params.json_schema is not None:
            if self.structured == "response_format":
                kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "reply", "schema": params.json_schema, "strict": True}}
            elif self.structured == "prompt":
                self.say("schema-prompt", "has no structured output: the JSON schema goes in the prompt and "
                         "replies are parsed strictly", level=logging.INFO)
                messages = _schema_in_prompt(messages, params.json_schema)
        model = self.chat_model.model_copy(update=update) if update else self.chat_model
        return model, to_messages(messages), kwargs

    def _usage_marks(self, gens: list, params: SamplingParams) -> list[tuple[str | None, int | None]]:
        """Per generation ``(usage mark, completion tokens override)``: a usage repeated on every
        generation of a request is the request's, split; per-choice logprob counts are exact."""
        counts = [_logprob_count(g) for g in gens] if params.logprobs is not None else [None] * len(gens)
        usages = [getattr(g.message, "usage_metadata", None) for g in gens]
        if len(gens) > 1 and usages[0] and all(u == usages[0] for u in usages):
            shares = _split(int(usages[0].get("output_tokens", 0) or 0), len(gens))
            return [("exact", c) if c is not None else ("split", s) for c, s in zip(counts, shares)]
        return [("exact", c) if c is not None else (None, None) for c in counts]

    def _samples(self, gens: list, params: SamplingParams, first_seed: int | None, wall: float) -> list[Sample]:
        out = []
        marks = self._usage_marks(gens, params)
        for i, (g, (mark, count)) in enumerate(zip(gens, marks)):
            s = to_sample(g, latency_s=wall / max(1, len(gens)), seed=None if first_seed is None else first_seed + i,
                          usage=mark, completion_tokens=count)
            if params.logprobs is not None:
                s = _with(s, **_logprobs(g, params.logprobs))
            text, cut = cap_reply(s.text, params.max_tokens)
            if cut:  # a server that ignored max_tokens: store a bounded reply, marked (models/_chat.py)
                self.say("cut", "sent a reply of %d characters for max_tokens=%d: replies this far past max_tokens "
                         "are stored cut at %d characters, marked %r, finish_reason 'length'",
                         len(s.text), params.max_tokens, len(text) - len(CUT_MARKER), CUT_MARKER.strip())
                s = _with(s, text=text, finish_reason="length")
            out.append(s)
        return out

    def _plan(self, params: SamplingParams, got: int) -> tuple[int, int | None]:
        """``(samples to ask for, seed of the first)`` of the next request, ``got`` samples in hand."""
        want = params.n - got
        one = (self.one_per_request or params.temperature == 0 or self.structured == "method"
               and params.json_schema is not None or (not self.takes_keywords and self.fields["n"] is None
                                                       and not self.openai))
        seed = None if params.seed is None else int(params.seed) + got
        return (1 if one else want), seed

    def _refused(self, exc: TypeError, kwargs: dict[str, Any]) -> bool:
        """After a ``TypeError``: whether it was the call keywords (then drop them and ask again)."""
        if not kwargs or self.openai:
            return False
        with self._lock:
            self.takes_keywords = False
            self.one_per_request = True
        self.say("keywords", "refused call keywords %s (%s): it gets its fields only, and n samples as n requests",
                 ", ".join(sorted(kwargs)), exc)
        return True

    def _learn(self, asked: int, got: int) -> None:
        if asked > 1 and 0 < got < asked and not self.one_per_request:
            with self._lock:
                self.one_per_request = True
            self.say("ignores-n", "returned %d of %d samples for n=%d: the rest come from further requests "
                     "(seed + i), one sample each from now on", got, asked, asked, level=logging.INFO)

    def sample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        samples: list[Sample] = []
        for _ in range(params.n + 1):  # at most n requests that return something, plus one refused try
            if len(samples) >= params.n:
                break
            n, seed = self._plan(params, len(samples))
            model, lc_messages, kwargs = self._request(messages, params, n, seed)
            start = time.perf_counter()
            try:
                gens = self._call(model, lc_messages, params, kwargs)
            except TypeError as exc:
                if self._refused(exc, kwargs):
                    continue
                raise
            self._learn(n, len(gens))
            if not gens:
                break
            samples += self._samples(gens[:n], params, seed, time.perf_counter() - start)
        return samples

    async def asample(self, messages: list[dict[str, str]], params: SamplingParams) -> list[Sample]:
        """:meth:`sample` in a worker thread of :func:`call_threads`. A chat model's own async client
        may be bound to the first event loop that used it (langchain-openai caches one
        ``httpx.AsyncClient``): a second ``asyncio.run``, or the runner's per-thread loops under
        ``--concurrency``, then failed with "bound to a different event loop" or "Event loop is
        closed" and lost samples. The sync client works from any thread, so every loop gets the
        same, correct behaviour. Not asyncio's default pool: its ``min(32, cpus + 4)`` threads (6 on
        2 cores) would hold back all but 6 of an app's concurrent calls."""
        call = functools.partial(contextvars.copy_context().run, self.sample, messages, params)
        return await asyncio.get_running_loop().run_in_executor(call_threads(), call)

    def _call(self, model: BaseChatModel, lc_messages: list, params: SamplingParams, kwargs: dict[str, Any]) -> list:
        stop = list(params.stop) or None
        if params.json_schema is not None and self.structured == "method":
            return [_structured_generation(model.with_structured_output(params.json_schema, include_raw=True)
                                           .invoke(lc_messages))]
        return list(model.generate([lc_messages], stop=stop, **kwargs).generations[0])


def langchain_member(chat_model: BaseChatModel, *, name: str) -> LangChainMember:
    """The pool member of a LangChain chat model (what a ``backend = "langchain"`` factory returns,
    and what :class:`agora.models.pool.PoolMember` wraps a plain ``BaseChatModel`` in)."""
    return LangChainMember(chat_model, name=name)


# ----------------------------------------------------------------------------- helpers


def _with(sample: Sample, **changes: Any) -> Sample:
    from dataclasses import replace

    return replace(sample, **changes)


def _schema_in_prompt(messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    """The chat with the schema appended to its last user message."""
    note = ("\n\nReply with only a JSON object (no prose, no code fence) that follows this JSON Schema:\n"
            + json.dumps(schema))
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] += note
            break
    else:
        out.append({"role": "user", "content": note.strip()})
    return out


def _structured_generation(result: dict[str, Any]):
    """A ``with_structured_output(include_raw=True)`` result as one generation whose text is the JSON."""
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration

    raw = result.get("raw")
    parsed = result.get("parsed")
    text = raw.content if isinstance(getattr(raw, "content", None), str) and raw.content.strip() else ""
    if not text and parsed is not None:
        text = parsed.model_dump_json() if hasattr(parsed, "model_dump_json") else json.dumps(parsed)
    message = AIMessage(content=text, usage_metadata=getattr(raw, "usage_metadata", None),
                        response_metadata=dict(getattr(raw, "response_metadata", None) or {}))
    return ChatGeneration(message=message)


def _logprob_content(gen: Any) -> list:
    lp = (gen.generation_info or {}).get("logprobs") or (gen.message.response_metadata or {}).get("logprobs")
    return list((lp or {}).get("content") or []) if isinstance(lp, dict) else []


def _logprob_count(gen: Any) -> int | None:
    content = _logprob_content(gen)
    return len(content) if content else None


def _logprobs(gen: Any, k: int) -> dict[str, Any]:
    content = _logprob_content(gen)
    if not content:
        return {}
    total = float(sum(t.get("logprob", 0.0) for t in content))
    tops = tuple({a["token"]: float(a["logprob"]) for a in (t.get("top_logprobs") or [])} for t in content)
    return {"logprob": total, "top_logprobs": tops if k > 0 and any(tops) else None}
