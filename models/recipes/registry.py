"""Recipes as plug-ins: the one list of member recipes (name → :class:`Recipe` class).

A pool member is weights × recipe. The recipe says how the member is asked and how its reply
becomes its answer: chain-of-thought (``cot``, the default: the protocol's prompt as it is),
program-of-thought (``pot``: the model writes a program, Agora runs it in the sandbox and the
printed result is the answer), a persona (``persona``) or a few-shot set of one's own
(``fewshot``). A pool file names it per entry::

    [[models]]
    name = "qwen1.5b+pot"
    path = "builtin:qwen2.5-coder-1.5b"
    recipe = "pot"                                  # or a table with the recipe's settings:
    # recipe = { name = "pot", cpu_s = 2, imports = ["math", "fractions"] }

A recipe is one module of this package holding a :class:`Recipe` subclass and a module-level
``RECIPE = ThatClass`` (found by :func:`recipe_names`, which imports the package's modules; no list
to edit); a package outside Agora adds one through the ``agora.recipes`` entry point group
(:data:`ENTRY_POINT_GROUP`), and Python code may call :func:`register_recipe`. The shape mirrors
the backends' registry (:mod:`agora.models.registry`): a pydantic class validates the entry, one
error line names the pool file, the member and the field.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import threading
import unicodedata
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, field_validator

from agora.tasks.errors import InputError
from agora.models.errors import UnknownNameError

#: The entry point group a third-party package registers its recipes in.
ENTRY_POINT_GROUP = "agora.recipes"

#: The trace roles (``model_calls.role``) of calls that answer the question: the calls a recipe
#: rewrites by default. A judge's score, a council reviewer's review and a conversation's turn
#: are left as the protocol asked for them.
ANSWER_ROLES: tuple[str, ...] = ("agent", "candidate", "member", "proposer", "aggregator", "debater", "chair",
                                 "follower", "principal")

#: Every trace role a protocol gives its calls: a recipe's ``roles`` must name some of these (a
#: misspelt role, or one no protocol writes, would make the recipe never apply). COMED's anchor,
#: probe and escalation peers, the council's reviewers, a conversation's speakers and a judge
#: (:mod:`agora.agents.judge`) besides :data:`ANSWER_ROLES`; a test checks the list against the
#: roles the graphs and agents write.
KNOWN_ROLES: tuple[str, ...] = (*ANSWER_ROLES, "anchor", "probe", "peer", "reviewer", "speaker", "judge")

#: Modules of this package that are not recipes.
_NOT_RECIPES = frozenset({"registry", "sandbox"})


@dataclass(frozen=True, slots=True)
class Finished:
    """A reply after its recipe: the text the protocol reads, and fields for its trace row."""

    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra ``model_calls`` columns (``program``, ``program_output``, ``program_error``, ``program_s``)."""


class Recipe(BaseModel):
    """A recipe's settings (validated from the pool file) and behaviour.

    Subclasses set the class variables :attr:`name` (an identifier, the pool file's ``recipe``)
    and :attr:`summary` (one line for ``agora pool list``), declare their settings as fields, and
    override :meth:`prepare` and/or :meth:`finish`. Instances are frozen.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    runs_programs: ClassVar[bool] = False
    """Whether :meth:`finish` runs code (the pool runs it off the event loop)."""

    roles: tuple[StrictStr, ...] = ANSWER_ROLES
    """The trace roles of the calls this recipe rewrites (:data:`ANSWER_ROLES`); a call made without
    a role (a user's own ``pool.sample``) is rewritten too."""

    @field_validator("roles", mode="before")
    @classmethod
    def _known_roles(cls, value: Any) -> Any:
        """Refuse a role no protocol gives (:data:`KNOWN_ROLES`), naming the known ones, and an empty
        list (the recipe would never apply); a value that is not a string is left to the type check."""
        unknown = [r for r in value if isinstance(r, str) and r not in KNOWN_ROLES] \
            if isinstance(value, (list, tuple)) else []
        if unknown:
            raise InputError(f"unknown role {unknown[0]!r}; known roles: {', '.join(KNOWN_ROLES)}")
        if isinstance(value, (list, tuple)) and not value:
            raise InputError("no roles: the recipe would apply to no protocol call; name some (agent, candidate, "
                             "...) or leave roles out for the answering roles")
        return value

    def applies(self, context: dict[str, Any] | None) -> bool:
        """Whether a call with this trace context is asked the recipe's way."""
        role = (context or {}).get("role")
        return role is None or role in self.roles

    def prepare(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The chat sent to the model for the protocol's ``messages`` (``{"role", "content"}`` dicts)."""
        return messages

    def finish(self, text: str) -> Finished:
        """The reply as the protocol reads it, from the model's ``text``."""
        return Finished(text)

    def describe(self) -> dict[str, Any]:
        """The recipe for run records and ``agora pool list``: its name and the settings that differ
        from the defaults."""
        return {"name": self.name, **self.model_dump(exclude_defaults=True, mode="json")}

    def label(self) -> str:
        """``pot`` or ``pot(cpu_s=2)``: the recipe in one short word for tables."""
        settings = {k: v for k, v in self.describe().items() if k != "name"}
        return self.name + (f"({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else "")


def plain_text(value: str) -> str:
    """``value`` when it holds no control character but newline, tab and carriage return (and no
    lone surrogate): the text a recipe puts into a prompt.

    Raises:
        ValueError: one line naming the first such character and its position (``control character
            U+0000 at position 7``), as a pydantic validator's message.
    """
    for i, c in enumerate(value):
        if c not in "\n\t\r" and unicodedata.category(c) in ("Cc", "Cs"):
            what = "a lone surrogate" if unicodedata.category(c) == "Cs" else "control character"
            raise InputError(f"{what} U+{ord(c):04X} at position {i}: a prompt's text may hold newlines and tabs, "
                             "no other control characters")
    return value


class RecipeError(InputError):
    """A recipe entry that cannot be used: ``field`` names the pool-file field (``recipe`` or
    ``recipe.<setting>``)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


_LOCK = threading.RLock()
_RECIPES: dict[str, type[Recipe]] = {}
_FOUND = False


def _check(cls: Any) -> type[Recipe]:
    if not (isinstance(cls, type) and issubclass(cls, Recipe)):
        raise TypeError(f"a recipe must be a subclass of agora.models.recipes.Recipe, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name.isidentifier():
        raise InputError(f"recipe {cls.__name__}: name must be an identifier, got {cls.name!r}")
    return cls


def register_recipe(cls: type[Recipe], *, replace_existing: bool = False) -> type[Recipe]:
    """Add a recipe class (from Python; packages use the entry point group).

    Raises:
        TypeError: not a :class:`Recipe` subclass. ValueError: its name is not an identifier, or a
            recipe of that name is registered and ``replace_existing`` is false.
    """
    _check(cls)
    _discover()
    with _LOCK:
        if cls.name in _RECIPES and _RECIPES[cls.name] is not cls and not replace_existing:
            raise InputError(f"a recipe named {cls.name!r} is already registered ({_RECIPES[cls.name].__module__})")
        _RECIPES[cls.name] = cls
    return cls


def unregister_recipe(name: str) -> None:
    """Remove a recipe registered from Python (tests); the package's own stay."""
    with _LOCK:
        cls = _RECIPES.get(name)
        if cls is not None and not cls.__module__.startswith(__package__ + "."):
            del _RECIPES[name]


def _discover() -> None:
    """Import this package's recipe modules once (each holds ``RECIPE``)."""
    global _FOUND
    with _LOCK:
        if _FOUND:
            return
        _FOUND = True
        package = importlib.import_module(__package__)
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_") or info.name in _NOT_RECIPES:
                continue
            module = importlib.import_module(f"{__package__}.{info.name}")
            cls = _check(getattr(module, "RECIPE"))
            _RECIPES.setdefault(cls.name, cls)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def get_recipe(name: str) -> type[Recipe]:
    """The recipe class called ``name``.

    Raises:
        UnknownNameError (a ``KeyError``): no recipe of that name (the message lists the known ones).
    """
    _discover()
    with _LOCK:
        if name in _RECIPES:
            return _RECIPES[name]
        for ep in _entry_points():
            if ep.name == name:
                try:
                    cls = _check(ep.load())
                except Exception as exc:  # noqa: BLE001 - a broken plug-in is one line, not a traceback
                    raise UnknownNameError(f"recipe {name!r} (entry point {ENTRY_POINT_GROUP}: {ep.value}) failed to load: "
                                   f"{type(exc).__name__}: {exc}") from None
                if cls.name != name:
                    raise UnknownNameError(f"recipe {name!r} (entry point {ENTRY_POINT_GROUP}: {ep.value}) names itself "
                                   f"{cls.name!r}")
                _RECIPES[name] = cls
                return cls
    raise UnknownNameError(f"unknown recipe {name!r}; choose one of {', '.join(recipe_names())}")


def recipe_names() -> list[str]:
    """The registered recipes' names (built-ins first), then installed entry points not loaded yet."""
    _discover()
    with _LOCK:
        names = list(_RECIPES)
    return names + sorted({ep.name for ep in _entry_points()} - set(names))


def recipe_from_entry(value: Any) -> Recipe:
    """A pool entry's ``recipe`` (a name, a table with ``name`` and settings, or a :class:`Recipe`)
    as a validated :class:`Recipe`.

    Raises:
        RecipeError: not a string or table, no ``name``, an unknown recipe (listing the known ones),
            or a bad setting (``field`` is ``recipe.<setting>``).
    """
    if isinstance(value, Recipe):
        return value
    if isinstance(value, str):
        table: dict[str, Any] = {"name": value}
    elif isinstance(value, dict):
        table = dict(value)
    else:
        raise RecipeError("recipe", f"must be a recipe name or a table with name = ..., got {value!r:.80}")
    name = table.pop("name", None)
    if not isinstance(name, str) or not name.strip():
        raise RecipeError("recipe.name", f"missing: say which recipe ({', '.join(recipe_names())})")
    try:
        cls = get_recipe(name)
    except KeyError as exc:
        raise RecipeError("recipe", exc.args[0]) from None
    try:
        return cls.model_validate(table)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            known = ", ".join(["name", *cls.model_fields])
            raise RecipeError(f"recipe.{loc}", f"recipe {name!r} has no setting {loc!r} (it takes {known})") from None
        error = (err.get("ctx") or {}).get("error")
        message = str(error) if isinstance(error, Exception) else f"{err['msg'][:1].lower()}{err['msg'][1:]}"
        if err["type"] == "missing":
            raise RecipeError(f"recipe.{loc}", f"missing: recipe {name!r} needs {loc!r}") from None
        if not loc:  # a check of the whole recipe (a model validator)
            raise RecipeError("recipe", message) from None
        raise RecipeError(f"recipe.{loc}", f"{message}, got {err.get('input')!r:.80}") from None
