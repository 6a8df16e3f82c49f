"""In-process GGUF chat model on llama-cpp-python.

Two things make it run on any CPU without the user doing anything:

* **AMX.** The default llama.cpp build crashes (SIGSEGV) at the first decode on CPUs with AMX,
  in the AMX matmul of the "extra buffer type" (upstream llama.cpp #20824). ``Llama(...)`` has no
  argument for it, so :func:`_disable_extra_buffer_types` wraps ``llama_model_default_params`` so
  the params it returns have ``use_extra_bufts = False``. Measured: no crash and the same speed.
* **Threads.** Decoding with more threads than free cores collapses throughput (≈35 → ≈3 tok/s
  when two threads fight another busy process), so every in-process model shares one process-wide
  lock and uses at most the cores this process may run on (``AGORA_LLAMA_THREADS`` overrides).

Also, llama.cpp's log shows errors only (:func:`_log_errors_only`): llama-cpp-python's own log
callback reads an older ``ggml_log_level`` numbering, so with ``verbose=False`` it printed warnings
(Gemma's ``llama_kv_cache_iswa: using full-size SWA cache``) and hid errors.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from functools import lru_cache
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from agora.tasks.errors import InputError
from agora.models._chat import NativeMember, default_threads, fewshot_stops, generation, render_fewshot, to_dicts
from agora.models.environment import env_value

#: One in-process decode at a time: two llama.cpp contexts decoding at once on a 2-core machine
#: run slower together than one after the other. Public: a benchmark script that drives a model's
#: :func:`batch_decoder` itself holds it too.
DECODE_LOCK = threading.RLock()
_LOAD_LOCK = threading.Lock()
_PATCHED = False
#: ``enum ggml_log_level`` of ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line).
_GGML_LOG_ERROR, _GGML_LOG_CONT = 4, 5
_log_level = 0
_log_callback = None


def _disable_extra_buffer_types() -> None:
    """Make every model load with ``use_extra_bufts = False`` (AMX crash workaround, see module doc)."""
    global _PATCHED
    if _PATCHED:
        return
    import llama_cpp.llama_cpp as lib

    original = lib.llama_model_default_params
    field_names = {name for name, _ in getattr(lib.llama_model_params, "_fields_", [])}

    def patched():
        params = original()
        if "use_extra_bufts" in field_names:
            params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = patched
    _PATCHED = True


def _print_errors(level: int, text: bytes, user_data: Any = None) -> None:
    """llama.cpp log callback: print error lines (and their continuations) to stderr, drop the rest."""
    global _log_level
    if level != _GGML_LOG_CONT:
        _log_level = level
    if _log_level == _GGML_LOG_ERROR:
        print(text.decode("utf-8", errors="replace"), end="", file=sys.stderr, flush=True)


class _KeepStreams:
    """Stands in for llama-cpp-python's ``suppress_stdout_stderr``, which with ``verbose=False``
    points file descriptors 1 and 2 of the whole process at ``/dev/null`` while a model loads: any
    other thread's output in that window (an app printing a graph's streamed events) was lost. The
    log callback (:func:`_print_errors`) already keeps llama.cpp to its errors."""

    def __init__(self, disable: bool = True) -> None:
        pass

    def __enter__(self) -> "_KeepStreams":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _keep_std_streams() -> None:
    """Load models without llama-cpp-python's process-wide redirect of stdout and stderr."""
    import llama_cpp._internals
    import llama_cpp.llama

    for module in (llama_cpp.llama, llama_cpp._internals):
        if hasattr(module, "suppress_stdout_stderr"):
            module.suppress_stdout_stderr = _KeepStreams


def _log_errors_only() -> None:
    """Install :func:`_print_errors` as llama.cpp's log callback (replacing llama-cpp-python's)."""
    global _log_callback
    if _log_callback is not None:
        return
    import llama_cpp

    _log_callback = llama_cpp.llama_log_callback(_print_errors)  # kept: llama.cpp holds only a pointer
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


@lru_cache(maxsize=8)
def _load(path: str, n_ctx: int, n_threads: int, lora_path: str | None = None, lora_scale: float = 1.0):
    from llama_cpp import Llama

    _disable_extra_buffer_types()
    _log_errors_only()
    _keep_std_streams()
    extra = {"lora_path": lora_path, "lora_scale": lora_scale} if lora_path else {}
    llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False,
                **extra)
    if lora_path and not llm._lora_adapter:  # llama-cpp-python 0.3 keeps a NULL adapter that crashes at decode
        llm.close()
        raise InputError(f"llama.cpp could not load the LoRA adapter {lora_path} for {path} (see its message above)")
    return llm


def check_engine_env() -> None:
    """Refuse an ``AGORA_LLAMA_ENGINE`` that asks for another embedded engine than llama-cpp-python
    (the check of :mod:`agora.models.environment`, which every ``agora`` command also runs first).

    The variable once chose a server engine (xllamacpp), which Agora no longer has (llama-cpp-python is
    the one embedded engine; benchmarks/README.md says why); left set, it would otherwise
    be ignored silently. Case and surrounding spaces do not matter; unset, empty, ``llama-cpp-python``
    (and its spellings, :data:`agora.models.environment.ENGINE_NAMES`) are accepted.

    Raises:
        agora.models.environment.EnvironmentVariableError: a ``ValueError``, one line naming the value,
            the accepted values and what to do.
    """
    env_value("AGORA_LLAMA_ENGINE")


class LlamaCppChatModel(NativeMember, BaseChatModel):
    """A GGUF model run in-process by llama.cpp, as a LangChain chat model.

    ``prompt_format="chat"`` applies the GGUF's chat template; ``"fewshot"`` renders the
    conversation as a ``Question:/Answer:`` transcript for base models without one (Gemma 3 270M).
    Each call returns ``n`` generations with seeds ``seed, seed+1, ...``, each carrying
    ``usage_metadata`` and ``response_metadata["latency_s"]``. With ``batched=True`` (the default)
    the prompt is evaluated once and the ``n`` sequences are decoded together in one llama.cpp batch
    (:mod:`agora.models._llama_batch`); a sample's ``latency_s`` is then its share of the request's
    wall time (prompt time split evenly, decode time in proportion to its tokens), so the samples'
    latencies add up to the request's wall time, which ``response_metadata["request_latency_s"]``
    gives (with other requests in flight, that wall time includes the steps it shared with them and
    any wait for room in the batch). ``batched=False`` draws the ``n`` samples one after the other (each its own wall time).
    Instances with the same ``model_path`` (and ``lora_path``) share weights. ``lora_path`` is a GGUF
    LoRA adapter (:func:`agora.models.lora_gguf.export_lora_gguf` writes one from a peft folder)
    applied at ``lora_scale`` on top of the model, on both decoding paths. Batched calls made at the
    same time from several threads (questions in flight with ``--concurrency``, a question's agents)
    share the model's decode batches (continuous batching, :mod:`agora.models._llama_batch`). A call
    that runs alone starts from an empty context, so a seeded call's text depends only on its prompt,
    seeds and ``n``, not on what ran before; a call that shared its batches with others may differ in
    its last logit bits, hence sometimes in its text (resume rests on stored traces).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    """Path to the ``.gguf`` file."""
    model_name: str = "llamacpp"
    """Name recorded in traces."""
    prompt_format: Literal["chat", "fewshot"] = "chat"
    n_ctx: int = 2048
    n_threads: int = Field(default_factory=default_threads)
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    fewshot_labels: tuple[str, str] = ("Question", "Answer")
    batched: bool = True
    """Decode a request's ``n`` samples together in one batch (see the class docstring)."""
    share_batches: bool = Field(default_factory=lambda: os.environ.get("AGORA_LLAMA_SHARE_BATCHES", "1") != "0")
    """Let this model's batched requests share decode batches with concurrent requests to the same
    weights (continuous batching; the default). ``False`` (or ``AGORA_LLAMA_SHARE_BATCHES=0``): each
    request waits until nothing else is in flight on these weights and decodes alone, so every seeded
    request is reproducible whatever runs beside it, at the cost of the speed-up."""
    prefix_cache: bool = Field(default_factory=lambda: os.environ.get("AGORA_LLAMA_PREFIX_CACHE", "1") != "0")
    """With shared batches, let a request admitted beside others reuse the KV cells of the prompt
    prefix it shares with a recent request (a question's later steps repeat its system prompt,
    few-shot turns and question) instead of evaluating it again; a request that starts alone still
    evaluates its whole prompt. ``False`` (or ``AGORA_LLAMA_PREFIX_CACHE=0``): every prompt is
    evaluated whole (see :mod:`agora.models._llama_batch`)."""
    lora_path: str | None = None
    """A GGUF LoRA adapter applied on top of the model (``None``: the model alone)."""
    lora_scale: float = 1.0
    """Multiplier of the adapter's ``alpha / r`` (1: as trained)."""
    _llm: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_engine(self) -> "LlamaCppChatModel":
        check_engine_env()
        return self

    @property
    def batches_concurrent_requests(self) -> bool:
        """Whether concurrent requests share decode batches (so questions in flight pay off)."""
        return self.batched and self.share_batches

    @property
    def _llm_type(self) -> str:
        return "agora-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "prompt_format": self.prompt_format, "lora_path": self.lora_path}

    def llm(self):
        """The underlying ``llama_cpp.Llama`` (loaded on first use)."""
        if self._llm is None:
            with _LOAD_LOCK:
                self._llm = _load(self.model_path, self.n_ctx, self.n_threads, self.lora_path, self.lora_scale)
        return self._llm

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        n = int(kwargs.pop("n", 1))
        seed = kwargs.pop("seed", None)
        params = {
            "temperature": float(kwargs.pop("temperature", self.temperature)),
            "top_p": float(kwargs.pop("top_p", self.top_p)),
            "max_tokens": int(kwargs.pop("max_tokens", self.max_tokens)),
        }
        stops = list(stop or [])
        chat = to_dicts(messages)
        llm = self.llm()
        prompt = None
        if self.prompt_format == "fewshot":
            prompt = render_fewshot(chat, self.fewshot_labels)
            stops += [s for s in fewshot_stops(self.fewshot_labels) if s not in stops]
        if self.batched:
            return ChatResult(generations=self._generate_batched(llm, chat, prompt, stops, n, seed, params))
        generations = []
        # One request holds the decode lock for all its samples and starts from an empty context:
        # llama.cpp reuses the cached prefix of whatever ran before, and a reused prefix gives
        # slightly different logits than a fresh prefill, so without the reset a seeded request's
        # text would depend on the previous request (another agent's, another run's).
        with DECODE_LOCK:
            llm.reset()
            for i in range(n):
                sample_seed = (int(seed) + i) if seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
                start = time.perf_counter()
                if prompt is not None:
                    out = llm.create_completion(prompt, stop=stops or None, seed=sample_seed, **params)
                    text = out["choices"][0]["text"]
                else:
                    out = llm.create_chat_completion(chat, stop=stops or None, seed=sample_seed, **params)
                    text = out["choices"][0]["message"]["content"] or ""
                latency = time.perf_counter() - start
                usage = out.get("usage") or {}
                generations.append(
                    generation(
                        text.strip(),
                        prompt_tokens=int(usage.get("prompt_tokens", 0)),
                        completion_tokens=int(usage.get("completion_tokens", 0)),
                        latency_s=latency,
                        model_name=self.model_name,
                        finish_reason=out["choices"][0].get("finish_reason"),
                    )
                )
        return ChatResult(generations=generations)

    def _prompt_tokens(self, llm: Any, chat: list[dict], prompt: str | None) -> tuple[list[int], list[str]]:
        """The prompt's tokens and the template's stop strings, as ``create_(chat_)completion`` builds them."""
        if prompt is not None:
            return llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True), []
        formatter = _chat_formatter(llm)
        result = formatter(messages=chat)
        stops = result.stop if isinstance(result.stop, list) else [result.stop] if result.stop else []
        return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True), stops

    def _generate_batched(self, llm: Any, chat: list[dict], prompt: str | None, stops: list[str], n: int,
                          seed: Any, params: dict[str, Any]) -> list:
        from agora.models._llama_batch import MAX_SEQ

        tokens, template_stops = self._prompt_tokens(llm, chat, prompt)
        stops = stops + [s for s in template_stops if s and s not in stops]
        base = int(seed) if seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        with DECODE_LOCK:
            decoder = batch_decoder(llm, self.n_threads)
        # Not under the lock: the decoder takes it step by step, so concurrent callers' requests
        # share its decode batches (continuous batching), or with share_batches off wait for the
        # decoder to be idle and run alone (agora.models._llama_batch).
        generations = []
        for first in range(0, n, MAX_SEQ):
            m = min(MAX_SEQ, n - first)
            start = time.perf_counter()
            results = decoder.generate(tokens, m, max_tokens=params["max_tokens"],
                                       temperature=params["temperature"], top_p=params["top_p"],
                                       seeds=[base + first + i for i in range(m)], stops=stops,
                                       n_ctx_limit=self.n_ctx, alone=not self.share_batches,
                                       reuse_prefix=self.prefix_cache)
            wall = time.perf_counter() - start
            total = sum(r.completion_tokens for r in results) or 1
            prefill = min(results[0].prefill_s if results else 0.0, wall)
            for r in results:
                share = prefill / m + (wall - prefill) * r.completion_tokens / total
                generations.append(generation(
                    r.text.strip(), prompt_tokens=len(tokens), completion_tokens=r.completion_tokens,
                    latency_s=share, model_name=self.model_name, finish_reason=r.finish_reason,
                    extra={"request_latency_s": wall, "batch_size": m}, cached_tokens=r.reused_tokens))
        return generations


def batch_decoder(llm: Any, n_threads: int):
    """The batch decoder of a loaded model (kept on the ``Llama`` object; created under
    :data:`DECODE_LOCK`, which the caller holds), as the member's sampler and the benchmark scripts use it."""
    from agora.models._llama_batch import BatchDecoder

    decoder = getattr(llm, "_agora_decoder", None)
    if decoder is None:
        decoder = llm._agora_decoder = BatchDecoder(llm, n_threads, lock=DECODE_LOCK)
    return decoder


def _chat_formatter(llm: Any):
    """The GGUF chat template as llama-cpp-python renders it for ``create_chat_completion``.

    Raises:
        ValueError: the GGUF has no chat template (use ``prompt_format="fewshot"``).
    """
    formatter = getattr(llm, "_agora_chat_formatter", None)
    if formatter is None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = (llm.metadata or {}).get("tokenizer.chat_template")
        if not template:
            raise InputError("this GGUF has no chat template: use prompt_format = \"fewshot\"")
        eos_id, bos_id = llm.token_eos(), llm.token_bos()
        eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
        formatter = llm._agora_chat_formatter = Jinja2ChatFormatter(template=template, eos_token=eos,
                                                                    bos_token=bos, stop_token_ids=[eos_id])
    return formatter
