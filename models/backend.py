"""What a pool-file backend is: :class:`Backend` (a name, a config class, a factory, how ``agora
serve`` treats it) and :class:`BackendConfig` (the fields every ``[[models]]`` entry takes, with their
bounds), the errors a config's validators and a factory raise (:class:`FieldProblem`,
:class:`MemberBuildError`), and :func:`pool_path`. The registry of backends is
:mod:`agora.models.registry` (plug-ins import these names from there); the built-in backends are
:mod:`agora.models.builtin_backends`.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from annotated_types import Ge, Gt, Le
from pydantic import (AllowInfNan, BaseModel, ConfigDict, Field, Strict, StrictInt, StrictStr, ValidationInfo,
                      field_validator, model_validator)

from agora.tasks.errors import InputError
from agora.models.errors import PoolConfigError
from agora.models.validation import Rule, settings

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


class FieldProblem(InputError):
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



# ----------------------------------------------------------------------------- config classes


#: Characters a member name may not hold: ``,`` separates names in ``--models``, ``=`` a name from
#: its value in ``member=accuracy`` lists (``--dev-accuracy``, ``dev_accuracy``).
_NAME_SEPARATORS = ",="


def check_member_name(name: str) -> str:
    """``name`` if it can name a pool member everywhere it is written (the CLI's comma-separated
    ``--models``, ``member=accuracy`` lists, tables, the trace DB: a Postgres store cannot hold NUL).

    Raises:
        InputError: the name has a ``,`` or ``=``, a control or format character (NUL, a newline,
            a zero-width or bidirectional mark), or spaces at its ends (which ``--models`` strips);
            the message names the character.
    """
    for i, char in enumerate(name):
        if char in _NAME_SEPARATORS:
            raise InputError(f"{name!r} holds {char!r}, which separates names in --models and member=value "
                             "lists; pick a name without it")
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InputError(f"{name!r} holds the control character {char!r} at position {i}; use visible characters")
    if name != name.strip():
        raise InputError(f"{name!r} starts or ends with a space, which --models drops; remove it")
    return name


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
            raise InputError("missing or empty")
        return check_member_name(value)

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
            raise InputError(problem)
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


def pool_path(value: str, info: ValidationInfo | None, field: str = "path") -> Path:
    """``value`` as a path, relative to the pool file's folder (``context["base_dir"]``) when relative.

    Raises:
        FieldProblem: (naming ``field``) ``~name/...`` for a user this system does not have."""
    try:
        p = Path(value).expanduser()
    except RuntimeError:  # Path.expanduser: "Could not determine home directory."
        raise FieldProblem(field, f"{value.split('/', 1)[0]!r} is no user's home folder (no such user)") from None
    base_dir = (info.context or {}).get("base_dir") if info is not None else None
    return Path(base_dir) / p if not p.is_absolute() and base_dir is not None else p


Serve = Literal["vllm", "copy", "no"]


@settings
class Backend:
    """One pool-file backend.

    ``factory(spec)`` gets the validated :class:`agora.models.pool.ModelSpec` (the common fields as
    attributes, the config class's own fields in ``spec.options``, unknown keys in ``spec.extra``)
    and returns a LangChain ``BaseChatModel`` (the pool wraps it) or an object implementing the
    member contract (:class:`agora.models.contract.ModelMember`). It should not load weights
    (the first call does). It raises :class:`MemberBuildError` for a value it cannot use.
    """

    name: Annotated[str, Rule(lambda v: isinstance(v, str) and v.isidentifier(), "backend name must be an identifier, got {value!r}")]
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

    @model_validator(mode="after")
    def _usable(self) -> Backend:
        if not (isinstance(self.config, type) and issubclass(self.config, BackendConfig)):
            raise TypeError(f"backend {self.name!r}: config must be a subclass of agora.models.registry.BackendConfig")
        if not callable(self.factory):
            raise TypeError(f"backend {self.name!r}: factory must be callable")
        if self.serve not in ("vllm", "copy", "no"):
            raise InputError(f"backend {self.name!r}: serve must be 'vllm', 'copy' or 'no', got {self.serve!r}")
        if self.serve == "vllm" and self.model_source is None:
            raise InputError(f"backend {self.name!r}: serve = 'vllm' needs model_source")
        return self
