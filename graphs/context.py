"""A protocol graph's run-time context: its pool (a pool, a built-in pool name or a pool file) and
its settings, as Python callers pass them and as Studio's JSON sends them (not public).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import field, fields, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

from agora.tasks.errors import InputError
from agora.models.studio_schema import studio_schema
from agora.models.builtins import BUILTIN_POOLS
from agora.models.pool import ModelPool, PoolConfigError, builtin_pool, builtin_pool_name, load_pool
from agora.models.validation import Convert, is_settings, settings

S = TypeVar("S")
C = TypeVar("C")


def settings_from(value: Any, cls: type[S]) -> S:
    """``value`` as the frozen settings dataclass ``cls``: ``value`` itself, ``cls()`` for ``None``,
    or built from a dict, as JSON clients send it (LangGraph Studio, the ``langgraph dev`` HTTP API),
    nested settings and tuples included.

    Raises:
        ValueError: not settings nor a dict, an unknown field (named), or the settings' own checks.
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise InputError(f"{cls.__name__}: expected {cls.__name__} or a dict, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(value) - {f.name for f in fields(cls)})
    if unknown:
        raise InputError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for name, v in value.items():
        hint = hints[name]
        kinds = {hint, *typing.get_args(hint)}
        nested = next((k for k in kinds if is_dataclass(k)), None)
        if isinstance(v, dict) and nested is not None:
            v = settings_from(v, nested)
        elif isinstance(v, list) and any(typing.get_origin(k) is tuple for k in kinds):
            v = tuple(v)
        kwargs[name] = v
    return cls(**kwargs)


# ---------------------------------------------------------------------------- run-time context


class ContextError(TypeError):
    """A graph's run-time context that is neither its own context type nor a mapping of that type's
    fields, or a ``pool`` that is neither a pool, a built-in pool name nor a pool file. One line."""


@lru_cache(maxsize=1)
def _default_pool() -> ModelPool:
    from agora.models.pool import default_pool

    return default_pool()


_POOL_CACHE: dict[tuple[Any, ...], ModelPool] = {}
_POOL_LOCK = threading.Lock()  # a server's parallel first runs build a named pool once


def clear_pool_cache() -> None:
    """Forget the pools built from names and files (tests; a long-lived server after editing weights)."""
    with _POOL_LOCK:
        _POOL_CACHE.clear()


POOL_DIR_ENV = "AGORA_POOL_DIR"
"""Environment variable: the folder a relative pool-file path in a context is read from. ``agora
studio`` sets it to the folder it was started in (its server runs in a private temporary folder)."""


def pool_base_dir() -> str:
    """The folder relative pool paths are resolved against: ``$AGORA_POOL_DIR``, else the current
    folder. Under a plain ``langgraph dev``, whose ASGI server refuses ``os.getcwd()`` inside a
    request as a blocking call (blockbuster), the shell's ``$PWD`` stands in for it."""
    base = os.environ.get(POOL_DIR_ENV)
    if base:
        return base
    try:
        return os.getcwd()
    except Exception:  # blockbuster's BlockingError
        pwd = os.environ.get("PWD")
        if pwd and os.path.isabs(pwd):
            return pwd
        raise


def resolve_pool(value: Any, *, builtin: Callable[[str], ModelPool] = builtin_pool,
                 where: str = "context") -> ModelPool | None:
    """A context's ``pool`` as a :class:`ModelPool`: a pool as is, ``None`` or an empty string as
    ``None`` (the graph's embedded pool), a built-in pool name (``"tiny"``, ``"default"``: ``builtin(name)``) or the path
    of a TOML pool file (:func:`agora.models.pool.load_pool`); a relative path is read from
    :func:`pool_base_dir` (under ``agora studio``, the folder it was started in). A pool built from a name or a file is
    built once per process and reused (a Studio server does not reload weights per run or node);
    a file edited since is built again.

    Raises:
        ContextError: any other type (one line naming what is accepted).
        PoolConfigError: a pool file that is missing or invalid (its own one-line message; a missing relative
            path names the folder it was read from), or a path that is a folder (said so).
    """
    if value is None or isinstance(value, ModelPool):
        return value
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(value, str) and not text.strip():  # Studio's form sends "" for a field left empty
            return None
        name = builtin_pool_name(text)
        if name is not None:
            key: tuple[Any, ...] = ("builtin", name, builtin)
            make = functools.partial(builtin, name)
        else:
            try:
                path = Path(text).expanduser()
            except RuntimeError:  # Path.expanduser: "Could not determine home directory."
                raise PoolConfigError(f"{text}: {text.split('/', 1)[0]!r} is no user's home folder (no such user); "
                                      "give the pool file's path") from None
            base = None if path.is_absolute() else pool_base_dir()
            if base is not None:  # against the launch folder: `agora studio` serves from a private one
                path = Path(base) / path
            path = Path(os.path.normpath(path))
            stat = path.stat() if path.is_file() else None
            if stat is None and base is not None and path.is_dir():
                raise PoolConfigError(f"{text}: a folder ({path}), not a pool file; give the path of a TOML pool file")
            if stat is None and base is not None:  # say where a relative path was looked for
                raise PoolConfigError(f"{text}: pool file not found in {base} (a relative pool path is read from "
                                      f"${POOL_DIR_ENV}, else the current folder; built-in pools: "
                                      f"{', '.join(BUILTIN_POOLS)})")
            key = ("file", str(path), stat and stat.st_mtime_ns, stat and stat.st_size)
            make = functools.partial(load_pool, path if stat else Path(text))
        with _POOL_LOCK:
            if key not in _POOL_CACHE:
                _POOL_CACHE[key] = make()
            return _POOL_CACHE[key]
    raise ContextError(f"{where}.pool: expected a ModelPool, a built-in pool name ({', '.join(BUILTIN_POOLS)}) "
                       f"or a pool file path, got {type(value).__name__}")


def _context_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.init]


def check_context_keys(cls: type, keys: typing.Iterable[str]) -> None:
    """Refuse context keys the context class ``cls`` does not have, in one line naming its fields.

    Raises:
        ContextError: ``MoAContext: unknown field(s) pol; its fields are pool, config``.
    """
    names = _context_fields(cls) if is_dataclass(cls) else list(typing.get_type_hints(cls))
    unknown = sorted(set(keys) - set(names))
    if unknown:
        raise ContextError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; its fields are {', '.join(names)}")


def graph_context(cls: type[C]) -> type[C]:
    """Class decorator (above ``@dataclass``) for a graph's run-time context: keyword fields the
    class does not have are refused with one line naming its fields (LangGraph builds the context
    from a JSON mapping with ``cls(**mapping)``), and its JSON schema gets field descriptions
    (:func:`studio_schema`). Its ``pool`` resolves to a pool (:func:`resolve_pool`).
    A protocol does not write such a class: :func:`protocol_context` makes it."""
    init = cls.__init__
    names = _context_fields(cls)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_context_keys(cls, kwargs)
        if len(args) > len(names):
            raise ContextError(f"{cls.__name__}: {len(args)} positional arguments; its fields are {', '.join(names)}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    _describe_settings(cls)
    return studio_schema()(cls)


def _describe_settings(cls: type, seen: set[type] | None = None) -> None:
    """Give every settings dataclass reachable from ``cls``'s fields (``config``, and the settings
    nested in it, :func:`agora.models.validation.settings` classes included) :func:`studio_schema`'s
    descriptions, unless it declares its own pydantic config:
    a settings field without a docstring then still gets :data:`SHARED_FIELD_DOCS`' description."""
    seen = set() if seen is None else seen
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: no schema help, nothing else lost
        return
    for f in fields(cls):
        for kind in {hints.get(f.name), *typing.get_args(hints.get(f.name))}:
            if isinstance(kind, type) and is_dataclass(kind) and kind not in seen:
                seen.add(kind)
                if "__pydantic_config__" not in vars(kind) or is_settings(kind):
                    studio_schema()(kind)
                _describe_settings(kind, seen)


_DEFAULT_CONTEXTS: dict[type, Any] = {}


def context_as(context: Any, cls: type[C]) -> C:
    """The run's context as the graph's own context type ``cls``: ``context`` itself when it is one,
    built from a mapping of ``cls``'s fields (an app's dict, Studio's JSON; a ``pool`` given by name
    or path, settings as a dict), or ``cls()`` for ``None`` (no context given: the graph's embedded
    pool and default settings).

    Raises:
        ContextError: anything else (another class, even one with ``pool`` and ``config``
            attributes), or a mapping with fields ``cls`` does not have: one line naming ``cls`` and
            its fields. A graph never runs on a default pool in place of a context it did not understand.
    """
    if isinstance(context, cls):
        return context
    if context is None:
        if cls not in _DEFAULT_CONTEXTS:
            _DEFAULT_CONTEXTS[cls] = cls()
        return _DEFAULT_CONTEXTS[cls]
    if isinstance(context, Mapping):
        return cls(**context)
    raise ContextError(f"context: expected a {cls.__name__} or a mapping with its fields "
                       f"({', '.join(_context_fields(cls))}), got {type(context).__module__}.{type(context).__qualname__}")


def pool_from(context: Any, cls: type | None = None) -> ModelPool:
    """The pool of the run-time context (:func:`context_as` ``(context, cls)`` when ``cls`` is given),
    or the embedded default pool when the context names none.

    Raises:
        ContextError: as :func:`context_as`.
    """
    if cls is not None:
        context = context_as(context, cls)
    pool = getattr(context, "pool", None) if context is not None else None
    if pool is not None and not isinstance(pool, ModelPool):
        pool = resolve_pool(pool)
    return pool if pool is not None else _default_pool()


# ---------------------------------------------------------------------------- a protocol's context, made

POOL_DOC = ("The models: a ``ModelPool`` (Python callers), a built-in pool name (``tiny``, ``default``) or a "
            "TOML pool-file path; ``None`` = the embedded default pool (two Qwen2.5-Coder models).")
"""What a protocol context's ``pool`` field says in Studio's form and in ``help()``."""


def protocol_context(name: str, config: type, about: str, *,
                     extra: typing.Sequence[tuple[str, Any, Any, str]] = (), pool_doc: str = POOL_DOC,
                     builtin: Callable[[str], ModelPool] = builtin_pool, module: str | None = None) -> type:
    """A protocol's run-time context class: a dataclass named ``name`` with ``pool`` (a pool, a
    built-in pool name or a pool file, resolved by :func:`resolve_pool` with ``builtin`` for names),
    ``config`` (the settings dataclass ``config``, built from a dict as Studio's JSON sends it,
    :func:`settings_from`) and the ``extra`` fields, each ``(field, type, default, docstring)``.
    It refuses fields it does not have in one line (:func:`graph_context`) and its JSON schema
    describes every field (``about``: what ``config`` holds, in a few words).

        MoAContext = protocol_context("MoAContext", MoAConfig, "MoA settings: proposers, aggregator, sampling.")
        MoAContext(pool=my_pool, config=MoAConfig(proposers=("a", "b")))   # or {"pool": "tiny", "config": {...}}

    The class belongs to the calling module (``module``, default: the caller's ``__name__``), so a
    protocol's spec names it like any class of its own (``context=MoAContext``).
    """
    pool_rule = Convert(functools.partial(resolve_pool, builtin=builtin, where=name))  # a name or a pool file
    config_rule = Convert(functools.partial(settings_from, cls=config))  # JSON clients (Studio) send a dict
    specs = [("pool", Annotated[ModelPool | str | None, pool_rule], field(default=None)),
             ("config", Annotated[config, config_rule], field(default_factory=config)),
             *((f, kind, field(default=default)) for f, kind, default, _doc in extra)]
    docs = {"pool": pool_doc, "config": about, **{f: doc for f, _kind, _default, doc in extra}}
    fields_list = ", ".join(f for f, *_ in specs)
    doc = (f"Run-time context: {fields_list}.\n\nPass one, or a mapping of its fields (``{{\"pool\": \"tiny\", "
           f"\"config\": {{...}}}}``, as Studio and the HTTP API send it); any other object, or a field it does not "
           f"have, is refused (:class:`ContextError`).")
    owner = module or sys._getframe(1).f_globals.get("__name__", __name__)
    cls = types.new_class(name, exec_body=lambda ns: ns.update({
        "__annotations__": {f: kind for f, kind, _ in specs}, **{f: default for f, _, default in specs},
        "__doc__": doc, "__module__": owner, "__qualname__": name, "__field_docs__": docs}))
    return graph_context(settings(cls, frozen=False, slots=False))
