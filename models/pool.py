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
``backend = "langchain"`` builds any LangChain chat model (``class = "pkg.mod:ChatClass"``, a
``[models.kwargs]`` table). Every backend, and each entry's validation, comes from the registry
(:mod:`agora.models.registry`): a package adds one through the ``agora.backends`` entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import tomllib
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

from langchain_core.language_models import BaseChatModel

from agora.models._chat import to_dicts
from agora.models.contract import ModelMember, Sample, SamplingParams  # noqa: F401 (re-exported)
from agora.models.langchain import langchain_member
from agora.models.recipes import Recipe, RecipeError, recipe_from_entry
from agora.models.retry import backoff_s, cause, is_transient, is_unreachable
from agora.models.builtins import BUILTIN_MODELS, BUILTIN_POOLS, BUILTINS  # noqa: F401 (BUILTIN_MODELS re-exported)
from agora.models.errors import (EmptyResponseError, MemberContractError, ModelCallError,  # noqa: F401
                                 ModelUnavailableError, PoolConfigError)
from agora.models.registry import (MAX_POOL_TEMPERATURE, MemberBuildError, _AdapterError,  # noqa: F401 (re-exported)
                                   build_member, resolve_builtin, shadowing_plugins, spec_problem,
                                   validate_entry)

log = logging.getLogger("agora.pool")

#: A backend name: a built-in or a plug-in's (:func:`agora.models.registry.backend_names`).
Backend = str
#: The built-in backends (plug-ins add theirs through the registry).
BACKENDS = ("llamacpp", "openai", "vllm", "transformers", "langchain")
StructuredOutputs = Literal["response_format", "vllm", "none"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One ``[[models]]`` entry of a pool file, validated by its backend's config class
    (:mod:`agora.models.registry`)."""

    name: str
    backend: str
    """A registered backend (:func:`agora.models.registry.get_backend`): ``llamacpp``, ``openai``,
    ``vllm``, ``transformers``, ``langchain`` or a plug-in's."""
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
    options: dict[str, Any] = field(default_factory=dict)
    """The fields a backend's config class declares beyond these (``class`` and ``kwargs`` of a
    ``langchain`` entry, a plug-in's own settings), validated; its factory reads them."""
    recipe: Recipe | None = None
    """How the member is asked and how its reply becomes its answer (:mod:`agora.models.recipes`):
    ``None`` is the protocol's own chain-of-thought prompt, as before recipes. A spec made in
    Python may give a name (``"pot"``) or a table (``{"name": "pot", "cpu_s": 2}``)."""

    def __post_init__(self):
        if problem := spec_problem(self):  # a spec made in Python gets the pool file's bounds
            raise PoolConfigError(f"model {self.name!r}: {problem}")
        if self.recipe is not None and not isinstance(self.recipe, Recipe):
            try:
                object.__setattr__(self, "recipe", recipe_from_entry(self.recipe))
            except RecipeError as exc:
                raise PoolConfigError(f"model {self.name!r}: field '{exc.field}': {exc}") from None

    def describe(self) -> dict[str, Any]:
        """The spec as a dict for run records, without empty fields and secrets (``api_key``, and
        option or kwarg keys that name a key, token, secret or password)."""
        d = {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) not in (None, {}, "", ())}
        d.pop("api_key", None)
        if self.recipe is not None:
            d["recipe"] = self.recipe.describe()
        if "options" in d:
            d["options"] = _redacted(d["options"])
        return d


def _redacted(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced by ``"***"`` (nested tables too)."""
    if not isinstance(value, dict):
        return value
    secret = ("key", "token", "secret", "password", "passwd", "authorization", "auth", "cookie", "credential")

    def hidden(k: Any, v: Any) -> bool:
        return any(s in str(k).lower() for s in secret) or (isinstance(v, str) and v.lower().startswith(("bearer ", "basic ")))

    return {k: "***" if hidden(k, v) else _redacted(v) for k, v in value.items()}


@dataclass
class PoolMember:
    """A named model of the pool: its spec and its model, and :attr:`sampler`, the model as the
    member contract (:class:`agora.models.contract.ModelMember`).

    ``chat_model`` is what the backend's factory returned: an object implementing the contract
    (Agora's own backends) or any LangChain ``BaseChatModel``, wrapped here, once, in
    :class:`agora.models.langchain.LangChainMember`. The pool calls :attr:`sampler` only.
    """

    spec: ModelSpec
    chat_model: BaseChatModel | ModelMember
    sampler: ModelMember = field(init=False, repr=False, compare=False)
    _said: set = field(init=False, repr=False, compare=False, default_factory=set)

    def __post_init__(self) -> None:
        model = self.chat_model
        if isinstance(model, ModelMember):
            self.sampler = model
        elif isinstance(model, BaseChatModel):
            self.sampler = langchain_member(model, name=self.spec.name)
        else:
            raise PoolConfigError(f"model {self.spec.name!r}: {_shown(model)} is not a model: a member is a "
                                  "langchain_core BaseChatModel or an object with sample() and asample() "
                                  "(agora.models.contract.ModelMember, docs/models.md)")

    @property
    def name(self) -> str:
        return self.spec.name

    def say_once(self, key: str, level: int, message: str, *args: Any) -> None:
        """Log ``message`` the first time ``key`` comes up for this member."""
        if key not in self._said:
            self._said.add(key)
            log.log(level, message, *args)


def _shown(value: Any, width: int = 60) -> str:
    """``value`` in a message: its type and a short repr (``a str ('The answer is 4.')``)."""
    text = repr(value)
    text = text if len(text) <= width else text[:width - 3] + "..."
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} ({text})"


#: Failed attempts of the model calls that ended by raising (:class:`ModelCallError`) or were
#: cancelled, while :func:`unreturned_attempts` collects them (``None``: nobody does).
_UNRETURNED: ContextVar[list[dict[str, Any]] | None] = ContextVar("agora_unreturned_attempts", default=None)


@contextlib.contextmanager
def unreturned_attempts() -> Iterator[list[dict[str, Any]]]:
    """Collect the failed-attempt trace records of model calls that do not return them.

    A call returns its records with its samples; one that raises :class:`ModelCallError` (an
    unreachable model) carries its own in ``exc.records``, but when several members are unreachable
    at once, a graph stops at the first error and cancels (or drops the errors of) the other
    calls of that step. Inside this context (and in asyncio tasks created inside it, which copy
    it), every call that raises or is cancelled adds its failed attempts (records with ``error``
    set) to the yielded list, so the runner stores every attempt that failed, not one member's.
    """
    sink: list[dict[str, Any]] = []
    token = _UNRETURNED.set(sink)
    try:
        yield sink
    finally:
        _UNRETURNED.reset(token)


def build_chat_model(spec: ModelSpec) -> Any:
    """The chat model for a spec, made by its backend's factory (:mod:`agora.models.registry`);
    weights load lazily, on the first call. A LangChain ``BaseChatModel`` for the built-in backends.

    Raises:
        PoolConfigError: an unknown backend (the message lists the registered ones), or the
            factory refused a value (:class:`MemberBuildError`: ``model 'name': field 'x': ...``).
        MemberBuildError: a plug-in's factory raised, or a factory returned something that is not a
            model: ``model 'name': field 'backend': backend 'x' (entry point ...): what went wrong``
            (:func:`agora.models.registry.build_member`).
    """
    return build_member(spec)


class PythonObject:
    """Mixin for objects only Python callers can pass in a graph's run-time context (a pool, a
    router): pydantic takes an instance as is and gives JSON clients the schema ``null``, so
    LangGraph Studio can build the context schema of a graph whose context holds one."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.json_or_python_schema(json_schema=core_schema.none_schema(),
                                                 python_schema=core_schema.is_instance_schema(cls))


#: Questions in flight by default on the embedded llama.cpp pool (measured in
#: ``benchmarks/batched_sampling.py --mode engines``, benchmarks/README.md).
EMBEDDED_CONCURRENCY = 8


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
        """A pool of ready models (LangChain chat models, or objects implementing the member contract,
        e.g. fakes in tests); specs say ``backend="langchain"``."""
        members = [PoolMember(ModelSpec(name=name, backend="langchain", **spec_fields), model)
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

    def suggested_concurrency(self) -> int:
        """Questions to keep in flight when the user gives no ``--concurrency``:
        :data:`EMBEDDED_CONCURRENCY` when every member is an in-process llama.cpp model whose
        concurrent requests share decode batches (``batches_concurrent_requests``: the embedded
        pool's continuous batching), else 1 (a user's API model may be rate-limited; a served
        pool's best setting depends on its server: pass it)."""
        if all(getattr(m.sampler, "batches_concurrent_requests", False) for m in self):
            return EMBEDDED_CONCURRENCY
        return 1

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
            messages: LangChain messages or ``{"role", "content"}`` dicts. The member's recipe
                (:mod:`agora.models.recipes`), if any and if it applies to ``context["role"]``,
                rewrites them first (program-of-thought: its own prompt) and turns each reply into
                the text returned (a program run, its printed result as ``The answer is ...``);
                then the member's ``system_prompt``, if any, is prepended.
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
        try:
            while (request := call.next_request()) is not None:
                start = time.perf_counter()
                try:
                    got = call.checked(call.sampler.sample(call.chat, request), request)
                except Exception as exc:  # noqa: BLE001 - classified once (agora.models.retry), logged, maybe retried
                    if wait := call.failed(exc, start):
                        time.sleep(wait)
                    continue
                call.received(got, start)
        except BaseException:  # ModelCallError, a cancellation, Ctrl-C: its failed attempts stay known
            call.unreturned()
            raise
        call.finish()
        return call.result()

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
        try:
            while (request := call.next_request()) is not None:
                start = time.perf_counter()
                try:
                    pending = call.sampler.asample(call.chat, request)
                    if not inspect.isawaitable(pending):
                        raise MemberContractError(f"model {call.base['model']!r} (member {type(call.sampler).__name__}): "
                                                  f"asample() returned {_shown(pending)}, not an awaitable: define it "
                                                  "with async def (docs/models.md)")
                    got = call.checked(await pending, request)
                except Exception as exc:  # noqa: BLE001 - classified once (agora.models.retry), logged, maybe retried
                    if wait := call.failed(exc, start):
                        await asyncio.sleep(wait)
                    continue
                call.received(got, start)
        except BaseException:  # ModelCallError, a cancellation (a sibling node failed), Ctrl-C
            call.unreturned()
            raise
        await call.afinish()
        return call.result()


def _started_at(start: float) -> str:
    """The wall-clock time of ``time.perf_counter()`` value ``start`` (when an attempt began), as
    ISO-8601 UTC with milliseconds: its trace row's ``created_at`` (the call's start, not the
    time the row is written)."""
    began = datetime.now(timezone.utc) - timedelta(seconds=time.perf_counter() - start)
    return began.isoformat(timespec="milliseconds")


class _Call:
    """One :meth:`ModelPool.sample` call: its chat, settings, attempts, samples and trace records
    (shared by the sync and async paths, which differ only in how they wait).

    Attempts: an error is classified once (:func:`agora.models.retry.is_transient`): a transient
    one is retried after :func:`~agora.models.retry.backoff_s` (``Retry-After`` when the server
    gave one), a permanent one ends the call at once. Empty or null texts are failed samples: they
    are recorded as one failed attempt and asked for again, with seeds after those already used.
    """

    def __init__(self, member: PoolMember, messages: Sequence[Any], params: SamplingParams,
                 context: dict[str, Any] | None) -> None:
        spec = member.spec
        chat = to_dicts(messages)
        self.recipe = spec.recipe if spec.recipe is not None and spec.recipe.applies(context) else None
        if self.recipe is not None:
            chat = self.recipe.prepare(chat)
        if spec.system_prompt:
            chat = [{"role": "system", "content": spec.system_prompt}] + chat
        if spec.temperature is not None:
            params = replace(params, temperature=spec.temperature)
        self.member, self.sampler, self.chat, self.params = member, member.sampler, chat, params
        self.attempts, self.attempt, self.asked, self.done = spec.max_retries + 1, 0, 0, False
        self.base = {"model": spec.name, "messages": chat, "params": params.as_dict(), **(context or {})}
        if self.recipe is not None:
            self.base["recipe"] = self.recipe.name
        self.samples: list[Sample] = []
        self.records: list[dict[str, Any]] = []

    def next_request(self) -> SamplingParams | None:
        """The settings of the next attempt (the samples still missing, seeds after those used), or
        ``None`` when the call is over."""
        if self.done or self.attempt >= self.attempts:
            return None
        if not self.asked:
            return self.params
        seed = None if self.params.seed is None else self.params.seed + self.asked
        return replace(self.params, n=self.params.n - len(self.samples), seed=seed)

    def checked(self, samples: Any, request: SamplingParams) -> list[Sample]:
        """What a member returned for ``request``, checked against the member contract
        (docs/models.md, "What a member must support"): a list (or tuple) of :class:`Sample`, at
        most ``request.n`` of them (more: the first ``n`` are kept, said once per member).

        Raises:
            EmptyResponseError: none (zero choices), so the attempt is logged and retried.
            MemberContractError: not a list of :class:`Sample`, or fewer than ``request.n`` from a
                member that does not top up itself (``tops_up``): a permanent error, one failed
                attempt naming the member and what it returned.
        """
        name = self.base["model"]
        if type(samples) is not list:
            if not isinstance(samples, (list, tuple)):
                raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                          f"{_shown(samples)}, not a list of agora.models.contract.Sample "
                                          "(docs/models.md)")
            samples = list(samples)
        for i, s in enumerate(samples):
            if not isinstance(s, Sample):
                raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                          f"a list holding {_shown(s)} at index {i}, not an agora.models.contract."
                                          "Sample (docs/models.md)")
        n = request.n
        if not samples:
            raise EmptyResponseError(f"model {name!r} returned no samples (zero choices)")
        if len(samples) > n:
            self.member.say_once("too-many", logging.WARNING, "model %r (member %s): sample() returned %d samples for "
                                 "n=%d: the first %d are kept (a member returns exactly n; said once per member)",
                                 name, type(self.sampler).__name__, len(samples), n, n)
            return samples[:n]
        if len(samples) < n and not getattr(self.sampler, "tops_up", False):
            raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                      f"{len(samples)} sample{'s' if len(samples) != 1 else ''} for n={n}; a member "
                                      "returns exactly n (or sets tops_up = True when it already asked its model "
                                      "again for the rest: docs/models.md)")
        return samples

    def _failure(self, attempt: int, error: str, start: float, **fields: Any) -> None:
        self.records.append({**self.base, "call_id": uuid.uuid4().hex, "attempt": attempt, "completion": None,
                             "prompt_tokens": 0, "completion_tokens": 0, "latency_s": time.perf_counter() - start,
                             "error": error[:2000], "created_at": _started_at(start), **fields})

    def failed(self, exc: Exception, start: float) -> float:
        """Record a failed attempt; the seconds to wait before the next one (0: none follows).

        Raises:
            ModelCallError: the last attempt failed because the model is unreachable
                (:func:`agora.models.retry.is_unreachable`).
        """
        name, attempt = self.base["model"], self.attempt
        self.attempt += 1
        self._failure(attempt, f"{type(exc).__name__}: {exc}", start)
        if not is_transient(exc):
            self.done = True
            self.member.say_once(f"permanent:{type(exc).__name__}", logging.ERROR,
                                 "model %r failed, not retried (a permanent error): %s", name, cause(exc))
            return 0.0
        log.warning("model %s failed (attempt %d/%d): %s", name, attempt + 1, self.attempts, cause(exc))
        if self.attempt < self.attempts:
            return backoff_s(attempt, exc)
        if is_unreachable(exc):
            raise ModelCallError(f"model {name!r} is unreachable after {attempt + 1} attempts: {cause(exc)}",
                                 self.records) from exc
        return 0.0

    def received(self, samples: list[Sample], start: float) -> None:
        """Record one attempt's samples; empty ones make a failed attempt and are asked for again."""
        name, attempt = self.base["model"], self.attempt
        self.attempt += 1
        self.asked += len(samples)
        created = _started_at(start)
        empty = 0
        for s in samples:
            if not s.text or not s.text.strip():
                empty += 1
                continue
            call_id = uuid.uuid4().hex
            known = s.usage != "unknown"
            record = {**self.base, "call_id": call_id, "attempt": attempt, "completion": s.text,
                      "prompt_tokens": s.prompt_tokens if known else None,
                      "completion_tokens": s.completion_tokens if known else None,
                      "latency_s": s.latency_s, "finish_reason": s.finish_reason, "error": None,
                      "created_at": created, "usage": s.usage, "seed": s.seed}
            if self.samples:  # later samples point at the first one's messages (see ModelPool.sample)
                record.update(messages=None, messages_of=self.samples[0].call_id)
            if not known:
                self.member.say_once("no-usage", logging.WARNING, "model %r reports no token usage: its samples' "
                                     "tokens are recorded as unknown (NULL), not 0", name)
            self.samples.append(Sample(s.text, name, s.prompt_tokens, s.completion_tokens, s.latency_s, s.finish_reason,
                                       s.logprob, s.top_logprobs, call_id, s.seed, s.usage))  # dataclasses.replace: 5x slower
            self.records.append(record)
        if not empty:
            self.done = True
            return
        log.warning("model %s gave %d empty or null repl%s of %d (attempt %d/%d)", name, empty,
                    "y" if empty == 1 else "ies", len(samples), attempt + 1, self.attempts)
        self._failure(attempt, f"EmptyResponseError: model {name!r} returned {empty} empty or null "
                      f"repl{'y' if empty == 1 else 'ies'} of {len(samples)}", start)

    def unreturned(self) -> None:
        """The call ends without returning (it raised or was cancelled): its failed attempts go to
        the collecting :func:`unreturned_attempts`, if any."""
        sink = _UNRETURNED.get()
        if sink is not None:
            sink.extend(r for r in self.records if r.get("error"))

    def finish(self) -> None:
        """Each sample's text after the member's recipe (a program-of-thought program run): the
        sample's text and its record's ``completion`` become the recipe's text, and the record gets
        the recipe's fields (``program``, ``program_output``, ``program_error``, ``program_s``)."""
        if self.recipe is None or not self.samples:
            return
        records = {r["call_id"]: r for r in self.records if not r.get("error")}
        for i, s in enumerate(self.samples):
            done = self.recipe.finish(s.text)
            self.samples[i] = replace(s, text=done.text)
            record = records.get(s.call_id)
            if record is not None:
                record.update(completion=done.text, **done.fields)

    async def afinish(self) -> None:
        """:meth:`finish` off the event loop when the recipe runs programs."""
        if self.recipe is not None and self.samples and self.recipe.runs_programs:
            await asyncio.to_thread(self.finish)
        else:
            self.finish()

    def result(self) -> tuple[list[Sample], list[dict[str, Any]]]:
        if 0 < len(self.samples) < self.params.n and self.asked > len(self.samples):
            log.warning("model %s: %d of %d samples after %d attempts (the others were empty)",
                        self.base["model"], len(self.samples), self.params.n, self.attempt)
        return self.samples, self.records


# ----------------------------------------------------------------------------- pool files

#: ``ModelSpec`` fields a pool entry sets (the rest of an entry goes to ``extra`` or ``options``).
_SPEC_FIELDS = ("name", "backend", "path", "prompt_format", "base_url", "model", "api_key", "family",
                "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "n_ctx", "endpoints",
                "timeout_s", "structured_outputs", "adapter", "recipe")

#: Keys read by other tools from ``ModelSpec.extra`` (serving, CUPID features).
_EXTRA_KEYS = {"vllm_args", "chat_template", "adapters", "features"}


def _spec_from_dict(entry: dict[str, Any], where: str, base_dir: Path | None) -> ModelSpec:
    """One ``[[models]]`` entry as a :class:`ModelSpec`, validated by its backend's config class.

    Raises:
        PoolConfigError: ``where (name): field 'x': what is wrong``.
    """
    config = validate_entry(entry, where, base_dir)
    return spec_from_config(config, where=f"{where} ({config.name})")


def spec_from_config(config: Any, where: str = "") -> ModelSpec:
    """A :class:`ModelSpec` from a validated backend config (:class:`agora.models.registry.BackendConfig`):
    its common fields as attributes, fields only its class declares in ``options`` (by their pool-file
    name), keys no class declares in ``extra`` (unknown ones logged: a typo should not pass unseen)."""
    base = {name for name in type(config).model_fields if name in _SPEC_FIELDS}
    kwargs: dict[str, Any] = {name: getattr(config, name) for name in base}
    kwargs["endpoints"] = tuple(kwargs.get("endpoints") or ())
    dumped = config.model_dump(by_alias=True)
    options: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, info in type(config).model_fields.items():
        key = info.alias or name
        if name in _SPEC_FIELDS:
            continue
        if name in _EXTRA_KEYS:  # declared by BackendConfig (vllm_args), read from extra as before
            if key in config.model_fields_set:
                extra[key] = dumped[key]
        else:
            options[key] = dumped[key]
    extra.update(config.model_extra or {})
    unknown = sorted(set(config.model_extra or {}) - _EXTRA_KEYS)
    if unknown:  # kept for forward compatibility, but a typo ("temprature") should not pass unseen
        log.warning("%s: unknown field(s) %s are ignored", where or config.name, ", ".join(unknown))
    return ModelSpec(**kwargs, extra=extra, options=options)


def _read_pool_file(path: Path) -> dict[str, Any]:
    """The TOML table of a pool file.

    Raises:
        PoolConfigError: unreadable, not UTF-8 text (a UTF-16 file says so), or invalid TOML (with line).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PoolConfigError(f"{path}: cannot read the pool file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")  # a UTF-8 byte-order mark is accepted
    except UnicodeDecodeError as exc:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(raw) > 1 and b"\x00" in raw[:64])
        kind = "it looks like UTF-16 (a byte-order mark or NUL bytes)" if utf16 else f"byte {exc.start} is not UTF-8"
        raise PoolConfigError(f"{path}: a pool file must be UTF-8 text; {kind}: save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PoolConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise PoolConfigError(f"{path}: invalid TOML: nested too deeply") from None


def load_pool(path: str | Path) -> ModelPool:
    """Build a :class:`ModelPool` from a TOML pool file (format in the module docstring), or the
    built-in pool of that name (``default``, ``tiny``) when no such file exists.

    Every entry is validated by its backend's config class (:mod:`agora.models.registry`; a
    plug-in backend's own class for a plug-in), then built by its factory.

    Raises:
        PoolConfigError: missing or unreadable file, text that is not UTF-8, TOML syntax error (with
        line), or a bad entry: ``file: models[i] (name): field 'x': what is wrong``.
    """
    name = builtin_pool_name(path)
    if name is not None:
        return builtin_pool(name)
    path = Path(path)
    if not path.is_file():
        raise PoolConfigError(f"{path}: pool file not found (built-in pools: {', '.join(BUILTIN_POOLS)})")
    data = _read_pool_file(path)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise PoolConfigError(f"{path}: needs at least one [[models]] table")
    specs = [_spec_from_dict(e, f"{path}: models[{i}]", path.parent) for i, e in enumerate(entries)]
    shadowing_plugins()  # a plug-in named like a built-in is refused: said once, as a warning
    members = []
    for i, spec in enumerate(specs):
        try:
            members.append(PoolMember(spec, build_chat_model(spec)))
        except MemberBuildError as exc:  # a class that does not import, an adapter that does not fit its model
            raise PoolConfigError(f"{path}: models[{i}] ({spec.name}): field '{exc.field}': {exc.detail}") from None
    return ModelPool(members, source=str(path))


def pool_from_specs(specs: Sequence[ModelSpec], source: str = "<memory>") -> ModelPool:
    """A pool of specs made in Python (each built by its backend's factory).

    Raises:
        PoolConfigError: an unknown backend, or a factory refused a value (:class:`MemberBuildError`).
    """
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
