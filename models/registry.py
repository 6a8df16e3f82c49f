"""Backends as plug-ins: the one list of pool-file backends (name → config class + factory).

A :class:`Backend` says how a ``[[models]]`` entry with ``backend = "<name>"`` is validated (its
pydantic :attr:`~Backend.config` class: types, ranges, required fields, one error naming the pool
file, the member and the field), how its chat model is built (:attr:`~Backend.factory`), and
whether ``agora serve`` can serve it (:attr:`~Backend.serve`). The pool loader
(:func:`agora.models.pool.load_pool`), ``agora serve`` (:mod:`agora.models.serving`) and
``agora pool list`` read this registry only; none of them names a backend.

The built-in backends (``llamacpp``, ``openai``, ``vllm``, ``transformers``, ``langchain``,
:mod:`agora.models.builtin_backends`) are registered here; what a backend is, :class:`Backend` and
:class:`BackendConfig`, is :mod:`agora.models.backend` (re-exported here for plug-ins). A package
outside Agora adds one through the entry point group ``agora.backends`` (:data:`ENTRY_POINT_GROUP`),
with no edit inside Agora::

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
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agora.tasks.errors import InputError
from agora.models.backend import (ENTRY_POINT_GROUP, MAX_POOL_TEMPERATURE, Backend, BackendConfig,  # noqa: F401
                                  FieldProblem, MemberBuildError, pool_path)  # the plug-in surface, re-exported
from agora.models.builtin_backends import BUILTIN_BACKENDS
from agora.models.errors import PoolConfigError, UnknownNameError

log = logging.getLogger("agora.registry")


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
            raise InputError(f"a backend named {backend.name!r} is already registered "
                             f"(by {_BACKENDS[backend.name].origin})")
        _BACKENDS[backend.name] = backend
        _FAILED.pop(backend.name, None)
    return backend


def unregister_backend(name: str) -> None:
    """Remove a backend registered from Python or an entry point (tests); built-ins stay (a backend
    registered from Python keeps the default ``origin`` ``"agora"``, so built-ins are told by identity)."""
    with _LOCK:
        if name in _BACKENDS and not any(_BACKENDS[name] is b for b in BUILTIN_BACKENDS):
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
        UnknownNameError (a ``KeyError``): no backend of that name (the message lists the known ones).
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
    raise UnknownNameError(f"{name!r} is not one of {', '.join(map(repr, backend_names()))} (a plug-in backend is a package "
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
    if name is not None and not isinstance(name, str):
        raise PoolConfigError(f"{where}: field 'name': must be text, got {name!r:.80}")
    if not isinstance(name, str) or not name.strip():
        raise PoolConfigError(f"{where}: field 'name': missing or empty")
    where = f"{where} ({name if name.isprintable() else repr(name)})"  # (a newline would split the one line)
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


for _backend in BUILTIN_BACKENDS:
    register_backend(_backend)
del _backend
