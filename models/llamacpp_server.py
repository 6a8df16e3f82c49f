"""In-process GGUF chat model on llama.cpp's own server (xllamacpp): requests from concurrent
questions and agents share decode batches.

`xllamacpp <https://pypi.org/project/xllamacpp/>`_ runs llama.cpp's ``llama-server`` inside the
Python process from a prebuilt portable wheel (no compiler, no AMX crash: ``GGML_NATIVE=OFF``).
One :class:`xllamacpp.Server` per model file (and LoRA adapter) holds ``n_parallel`` slots; a
request for ``n`` samples takes ``n`` slots and shares one prompt pass, and requests of other
threads decode in the same batches (llama.cpp's continuous batching). Each slot holds the model
entry's ``n_ctx`` tokens (the KV cache is ``n_ctx × n_parallel`` cells, not unified, so a busy
server never runs out of cells mid-request).

What this module adds on top of the server, measured on xllamacpp 2026.10 (issue 29,
``docs/platform-notes.md``):

* **Per-sample token counts.** The reply's ``usage`` of an ``n > 1`` request counts the first
  choice only, so requests are streamed and each choice's own ``usage`` chunk is read:
  ``completion_tokens`` is the number of tokens llama.cpp sampled for that sample, the stop
  string's tokens and a final end-of-generation token included (one more than
  :class:`agora.models.llamacpp.LlamaCppChatModel` reports for a sample that ended on its end token).
* **Seeds.** Sample ``i`` of a request is drawn with ``seed + i`` (llama.cpp's own rule for ``n``);
  a request larger than the slots runs in chunks, the seeds continuing. The prompt cache is off
  (``cache_prompt: false``), so a request run alone gives the same texts every time; texts are not
  bit-identical across different batch compositions (llama.cpp PR #6950): resume rests on stored
  traces, never on regenerating.
* **Exit.** Every server is deleted explicitly at interpreter exit (``atexit``): one process hung
  at exit after an HTTP 400 when the server was left to the garbage collector.
* **The loopback port.** llama.cpp's HTTP server always listens on 127.0.0.1 (a random port); it is
  given a random API key so that no other local process can use it. Calls go in-process.

Threads: ``AGORA_LLAMA_THREADS`` (:func:`default_threads`, the same rule as the current engine's); slots:
``AGORA_LLAMA_SLOTS`` (:func:`default_slots`). Selected for the pool's ``llamacpp`` backend with
``AGORA_LLAMA_ENGINE=server`` (see :class:`agora.models.llamacpp.LlamaCppChatModel`).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import threading
import time
from typing import Any, ClassVar, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field

from agora.models._chat import NativeMember, default_threads, fewshot_stops, generation, render_fewshot, to_dicts
from agora.models.errors import ModelUnavailableError

#: Environment variable choosing the embedded engine of the pool's ``llamacpp`` backend.
ENGINE_ENV = "AGORA_LLAMA_ENGINE"
#: Environment variable setting the slots (sequences decoded together) of each model's server.
SLOTS_ENV = "AGORA_LLAMA_SLOTS"
#: Default slots per model: on 2 cores batching across requests buys 1.2–1.8× at most (issue 29),
#: and each slot holds ``n_ctx`` KV cells (Qwen-1.5B, 4096 tokens: ≈ 117 MB per slot).
DEFAULT_SLOTS = 8

_SERVERS: dict[tuple, "_Engine"] = {}
_SERVERS_LOCK = threading.Lock()


def default_slots() -> int:
    """Slots per model server: ``AGORA_LLAMA_SLOTS`` or :data:`DEFAULT_SLOTS`.

    Raises:
        ValueError: ``AGORA_LLAMA_SLOTS`` is not a positive integer.
    """
    value = os.environ.get(SLOTS_ENV, "").strip()
    if not value:
        return DEFAULT_SLOTS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SLOTS_ENV}={value!r}: expected a positive integer (slots per model server)")
    return int(value)


def server_engine_selected() -> bool:
    """Whether ``AGORA_LLAMA_ENGINE`` selects this engine (``server``) for the pool's ``llamacpp``
    backend. Unset or ``llama-cpp-python``: the current engine.

    Raises:
        ValueError: any other value.
    """
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    if value in ("", "llama-cpp-python", "python"):
        return False
    if value == "server":
        return True
    raise ValueError(f"{ENGINE_ENV}={value!r}: expected 'server' or 'llama-cpp-python'")


class _Engine:
    """One loaded xllamacpp server: its request handlers and an API key for its loopback port."""

    def __init__(self, key: tuple, server: Any, slots: int):
        self.key, self.server, self.slots = key, server, slots

    def close(self) -> None:
        server, self.server = self.server, None
        del server  # the last reference: ~Server stops the main loop and joins its thread


def _close_all() -> None:
    """Delete every server (atexit): llama.cpp's loop thread must stop before the interpreter does."""
    with _SERVERS_LOCK:
        engines = list(_SERVERS.values())
        _SERVERS.clear()
    for engine in engines:
        engine.close()


atexit.register(_close_all)


def close_servers() -> None:
    """Stop and forget every loaded server (tests, benchmarks switching settings); the next call loads again."""
    _close_all()


def _load(path: str, n_ctx: int, n_threads: int, slots: int, lora_path: str | None, lora_scale: float) -> _Engine:
    """The server of one model file (and adapter), loaded once per process and setting.

    Raises:
        ModelUnavailableError: the file is missing or not a GGUF, or llama.cpp cannot load it
            (or its LoRA adapter).
        ImportError: xllamacpp is not installed (``pip install xllamacpp``).
    """
    key = (path, n_ctx, n_threads, slots, lora_path, lora_scale)
    with _SERVERS_LOCK:
        engine = _SERVERS.get(key)
        if engine is not None:
            return engine
        for what, file in (("model", path), ("LoRA adapter", lora_path)):
            if file is None:
                continue
            try:
                with open(file, "rb") as fh:
                    magic = fh.read(4)
            except OSError as exc:
                raise ModelUnavailableError(f"{file}: cannot read the {what}: {exc.strerror}") from None
            if magic != b"GGUF":
                raise ModelUnavailableError(f"{file}: not a GGUF file (the {what} of llama.cpp's server)")
        try:
            import xllamacpp
        except ImportError:
            raise ImportError("AGORA_LLAMA_ENGINE=server needs xllamacpp: pip install 'agora-llm[server-engine]'") from None

        params = xllamacpp.CommonParams()
        params.model.path = path
        params.n_parallel = slots
        params.n_ctx = n_ctx * slots  # split evenly: every slot holds n_ctx tokens
        params.kv_unified = False
        params.cpuparams.n_threads = n_threads
        params.cpuparams_batch.n_threads = n_threads
        params.warmup = False
        params.cache_ram_mib = 0  # no host-memory prompt cache: a request starts from an empty slot
        params.verbosity = -1  # llama.cpp's server log off (errors come back in the replies)
        params.api_keys = [secrets.token_urlsafe(24)]  # its loopback port answers no one else
        if lora_path:
            params.lora_adapters = [xllamacpp.CommonAdapterLoraInfo(lora_path, float(lora_scale))]
        try:
            server = xllamacpp.Server(params)
        except RuntimeError as exc:
            adapter = f" with the LoRA adapter {lora_path}" if lora_path else ""
            raise ModelUnavailableError(f"llama.cpp's server could not load {path}{adapter} "
                                        f"({n_ctx} tokens × {slots} slots): {exc}") from None
        engine = _SERVERS[key] = _Engine(key, server, slots)
        return engine


class ServerReplyError(RuntimeError):
    """llama.cpp's server answered a request with an error: its message, and its HTTP status as
    ``status_code`` (read by :mod:`agora.models.retry` as for any OpenAI-compatible server)."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class LlamaCppServerChatModel(NativeMember, BaseChatModel):
    """A GGUF model run in-process by llama.cpp's server (xllamacpp), as a LangChain chat model.

    Same fields and generation metadata as :class:`agora.models.llamacpp.LlamaCppChatModel`:
    ``prompt_format="chat"`` applies the GGUF's chat template (llama.cpp's Jinja), ``"fewshot"``
    renders the conversation as a ``Question:/Answer:`` transcript (raw completion). A call returns
    ``n`` generations with seeds ``seed, seed+1, ...``, each with ``usage_metadata`` (the request's
    prompt tokens; the sample's own completion tokens, see the module docstring) and
    ``response_metadata`` ``latency_s`` (its share of the request's wall time: prompt time split
    evenly, decoding in proportion to its tokens), ``request_latency_s``, ``batch_size`` and
    ``finish_reason``. Keyword arguments of ``generate``: ``n``, ``seed``, ``temperature``,
    ``top_p``, ``max_tokens``, ``logprobs`` (``0``: ``response_metadata["logprob"]``, the summed
    token log-probability; ``k >= 1``: also ``top_logprobs``, per token ``{token: logprob}``) and
    ``json_schema`` (the reply follows the schema, llama.cpp's grammar sampling).

    Thread-safe: concurrent calls (questions, agents) decode together in the model's server.
    Instances with the same file, ``n_ctx``, threads, slots and adapter share one server.

    Raises (from ``generate``):
        ModelUnavailableError: the model cannot be loaded.
        ServerReplyError: the server refused the request (e.g. a prompt longer than ``n_ctx``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    """Path to the ``.gguf`` file."""
    model_name: str = "llamacpp"
    """Name recorded in traces."""
    prompt_format: Literal["chat", "fewshot"] = "chat"
    n_ctx: int = 2048
    """Tokens per slot: a request's prompt plus its completion."""
    n_threads: int = Field(default_factory=default_threads)
    n_parallel: int = Field(default_factory=default_slots)
    """Slots of the model's server: sequences decoded together (``n`` of a request, summed over
    the requests in flight); a request for more samples runs in chunks."""
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    fewshot_labels: tuple[str, str] = ("Question", "Answer")
    lora_path: str | None = None
    """A GGUF LoRA adapter applied on top of the model (``None``: the model alone)."""
    lora_scale: float = 1.0
    """Multiplier of the adapter's ``alpha / r`` (1: as trained)."""

    #: Concurrent requests share the server's decode batches (its slots).
    batches_concurrent_requests: ClassVar[bool] = True

    @property
    def _llm_type(self) -> str:
        return "agora-llamacpp-server"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "prompt_format": self.prompt_format, "lora_path": self.lora_path}

    def engine(self) -> _Engine:
        """The model's server (loaded on first use)."""
        return _load(self.model_path, self.n_ctx, self.n_threads, self.n_parallel, self.lora_path, self.lora_scale)

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
        schema = kwargs.pop("json_schema", None)
        body: dict[str, Any] = {
            "temperature": float(kwargs.pop("temperature", self.temperature)),
            "top_p": float(kwargs.pop("top_p", self.top_p)),
            "max_tokens": int(kwargs.pop("max_tokens", self.max_tokens)),
            "cache_prompt": False,  # a seeded request's text must not depend on the request before it
            "stream": True,  # each choice's own usage (the non-streamed usage counts choice 0 only)
            "stream_options": {"include_usage": True},
        }
        stops = list(stop or [])
        chat = to_dicts(messages)
        fewshot = self.prompt_format == "fewshot"
        if fewshot:
            body["prompt"] = render_fewshot(chat, self.fewshot_labels)
            stops += [s for s in fewshot_stops(self.fewshot_labels) if s not in stops]
        else:
            body["messages"] = chat
        if stops:
            body["stop"] = stops
        if logprobs is not None:
            if fewshot:
                body["logprobs"] = max(1, int(logprobs))
            else:
                body["logprobs"] = True
                body["top_logprobs"] = int(logprobs)
        if schema is not None:
            if fewshot:
                body["json_schema"] = schema
            else:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        engine = self.engine()
        base = int(seed) if seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        generations = []
        for first in range(0, n, engine.slots):
            m = min(engine.slots, n - first)
            generations += self._request(engine, dict(body, n=m, seed=base + first), m, fewshot, logprobs)
        return ChatResult(generations=generations)

    def _request(self, engine: _Engine, body: dict[str, Any], m: int, fewshot: bool,
                 logprobs: int | None) -> list:
        """One streamed request for ``m`` choices; its generations in choice order."""
        chunks: list[dict] = []
        server = engine.server
        if server is None:  # closed (interpreter exit, close_servers) while this call waited
            raise ModelUnavailableError(f"llama.cpp's server of {self.model_path} was closed")
        start = time.perf_counter()
        handle = server.handle_completions if fewshot else server.handle_chat_completions
        handle(body, chunks.append)
        wall = time.perf_counter() - start
        choices = _collect(chunks, m, self.model_path)
        total = sum(c["completion_tokens"] for c in choices) or 1
        prefill = min(wall, max((c["prompt_ms"] for c in choices), default=0.0) / 1000)
        out = []
        for c in choices:
            share = prefill / m + (wall - prefill) * c["completion_tokens"] / total
            extra: dict[str, Any] = {"request_latency_s": wall, "batch_size": m}
            logprob = None
            if logprobs is not None:
                logprob = float(sum(t["logprob"] for t in c["tokens"]))
                if logprobs > 0:
                    extra["top_logprobs"] = tuple({a["token"]: float(a["logprob"]) for a in t.get("top_logprobs") or []}
                                                  for t in c["tokens"])
            out.append(generation(c["text"].strip(), prompt_tokens=c["prompt_tokens"],
                                  completion_tokens=c["completion_tokens"], latency_s=share,
                                  model_name=self.model_name, finish_reason=c["finish_reason"],
                                  logprob=logprob, extra=extra))
        return out


def _collect(chunks: list[dict], m: int, path: str) -> list[dict[str, Any]]:
    """The ``m`` choices of a streamed reply: text, finish reason, token log-probabilities, and
    the choice's own ``usage`` (a chat stream sends it in a chunk of its own right after the
    choice's last chunk; a completion stream in the last chunk itself).

    Raises:
        ServerReplyError: an error reply, or a choice without its finish reason or usage.
    """
    choices = [{"text": "", "finish_reason": None, "tokens": [], "completion_tokens": None, "prompt_tokens": 0,
                "prompt_ms": 0.0} for _ in range(m)]
    last = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise ServerReplyError(f"llama.cpp's server ({path}) sent a chunk that is not JSON: {str(chunk)[:200]}")
        if "error" in chunk or ("code" in chunk and "message" in chunk):
            err = chunk.get("error", chunk)
            code = err.get("code") if isinstance(err.get("code"), int) else None
            if err.get("type") == "exceed_context_size_error":  # worded as llama-cpp-python words it
                raise ServerReplyError(f"Requested tokens ({err.get('n_prompt_tokens')}) exceed context window of "
                                       f"{err.get('n_ctx')} (llama.cpp's server, {path}: n_ctx is per slot)", code)
            raise ServerReplyError(f"llama.cpp's server ({path}): HTTP {code}: {err.get('message')}", code)
        for ch in chunk.get("choices") or []:
            i = int(ch.get("index", 0))
            if not 0 <= i < m:
                raise ServerReplyError(f"llama.cpp's server ({path}) sent choice {i} of a request for {m}")
            c, last = choices[i], i
            delta = ch.get("delta")
            c["text"] += (delta.get("content") if delta is not None else ch.get("text")) or ""
            if ch.get("finish_reason"):
                c["finish_reason"] = ch["finish_reason"]
            c["tokens"] += (ch.get("logprobs") or {}).get("content") or []
        if "timings" in chunk and last is not None:
            choices[last]["prompt_ms"] = float(chunk["timings"].get("prompt_ms", 0.0))
        if "usage" in chunk:
            if last is None:
                raise ServerReplyError(f"llama.cpp's server ({path}) sent a usage before any choice")
            choices[last]["completion_tokens"] = int(chunk["usage"]["completion_tokens"])
            choices[last]["prompt_tokens"] = int(chunk["usage"]["prompt_tokens"])
    for i, c in enumerate(choices):
        if c["finish_reason"] is None or c["completion_tokens"] is None:
            raise ServerReplyError(f"llama.cpp's server ({path}) ended choice {i} of {m} without its finish "
                                   f"reason or usage ({len(chunks)} chunks: {json.dumps(chunks[-2:])[:300]})")
    return choices
