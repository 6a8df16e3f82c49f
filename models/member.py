"""A pool member: :class:`ModelSpec` (one ``[[models]]`` entry of a pool file, validated by its
backend's config class) and :class:`PoolMember` (a spec with its model, as the member contract)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import model_validator

from agora.models.contract import ModelMember
from agora.models.errors import PoolConfigError
from agora.models.langchain import langchain_member
from agora.models.recipes import Recipe, RecipeError, recipe_from_entry
from agora.models.urls import shown_url
from agora.models.backend import spec_problem
from agora.models.validation import settings

log = logging.getLogger("agora.pool")

#: A backend name: a built-in or a plug-in's (:func:`agora.models.registry.backend_names`).
Backend = str
#: The built-in backends (plug-ins add theirs through the registry).
BACKENDS = ("llamacpp", "openai", "vllm", "transformers", "langchain")
StructuredOutputs = Literal["response_format", "vllm", "none"]


@settings
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

    @model_validator(mode="after")
    def _python_spec(self) -> ModelSpec:
        if problem := spec_problem(self):  # a spec made in Python gets the pool file's bounds
            raise PoolConfigError(f"model {self.name!r}: {problem}")
        if self.recipe is not None and not isinstance(self.recipe, Recipe):
            try:
                object.__setattr__(self, "recipe", recipe_from_entry(self.recipe))  # a name or a table, as built
            except RecipeError as exc:
                raise PoolConfigError(f"model {self.name!r}: field '{exc.field}': {exc}") from None
        return self

    def describe(self) -> dict[str, Any]:
        """The spec as a dict for run records, without empty fields and secrets (``api_key``, a
        password or key in ``base_url`` or ``endpoints``, shown as ``***``, and option, kwarg or
        unknown field keys that name a key, token, secret or password)."""
        d = {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) not in (None, {}, "", ())}
        d.pop("api_key", None)
        if "base_url" in d:  # a password in a server's URL is a secret too (nothing reads it back)
            d["base_url"] = shown_url(d["base_url"])
        if "endpoints" in d:
            d["endpoints"] = tuple(shown_url(u) if isinstance(u, str) else u for u in d["endpoints"])
        if self.recipe is not None:
            d["recipe"] = self.recipe.describe()
        for table in ("options", "extra"):  # (extra: fields the pool file gave that no backend reads)
            if table in d:
                d[table] = _redacted(d[table])
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
                                  f"(agora.models.contract.ModelMember, docs/models.md){_wrapper_hint(model)}")

    @property
    def name(self) -> str:
        return self.spec.name

    def say_once(self, key: str, level: int, message: str, *args: Any) -> None:
        """Log ``message`` the first time ``key`` comes up for this member."""
        if key not in self._said:
            self._said.add(key)
            log.log(level, message, *args)


def _wrapper_hint(model: Any) -> str:
    """For a LangChain wrapper of a chat model (``.with_retry()``, ``.with_fallbacks()``, ``.bind()``,
    ``.with_config()``, ``.configurable_fields()``): what to pass instead, or ``""``."""
    from langchain_core.runnables.retry import RunnableRetry

    inner = getattr(model, "bound", None) or getattr(model, "runnable", None) or getattr(model, "default", None)
    if not isinstance(inner, BaseChatModel):
        return ""
    if isinstance(model, RunnableRetry):
        return ("; pass the chat model itself, without .with_retry(): the pool retries failed calls "
                "(max_retries, with backoff) and records every attempt")
    if hasattr(model, "fallbacks"):
        return "; pass the chat model itself, without .with_fallbacks(), and its fallbacks as members of their own"
    return ("; pass the chat model itself: sampling settings (temperature, max_tokens...) are set per request by "
            "the protocol, and a member's own on its ModelSpec")


def _shown(value: Any, width: int = 60) -> str:
    """``value`` in a message: its type and a short repr (``a str ('The answer is 4.')``)."""
    text = repr(value)
    text = text if len(text) <= width else text[:width - 3] + "..."
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} ({text})"


#: Failed attempts of the model calls that ended by raising (:class:`ModelCallError`) or were
