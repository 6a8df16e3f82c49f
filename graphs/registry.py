"""The protocol registry: the one list of Agora's protocols (the shape of lm-eval's task registry).

Entries are lazy ``"module:attr"`` strings naming a :class:`~agora.graphs.spec.ProtocolSpec`; a spec's
module is imported only when the spec is asked for. Everything that needs the list of protocols reads
it here: ``agora.graphs`` (its exports), ``langgraph.json`` (:func:`langgraph_config`; a test checks the
file against it, ``python -m agora.graphs --write`` regenerates it), the CLI (the ``run``
commands: a spec's ``run`` is its command), and the docs tests.

Adding a protocol: declare ``SPEC = ProtocolSpec(...)`` at the end of its graph module (a top-level
statement, ``name`` a string literal): the registry finds it by reading the package's modules, without
importing them (``docs/architecture.md`` walks through it). Another package adds its own with
:func:`register`.

    from agora.graphs import registry
    spec = registry.get("moa")
    graph = spec.build().compile()
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agora.tasks.errors import InputError
from agora.graphs.spec import ProtocolSpec
from agora.models.errors import UnknownNameError


@dataclass(frozen=True, slots=True)
class Entry:
    """A registered protocol: where its spec lives, and the names ``agora.graphs`` exports from its module."""

    target: str
    """``"module:attr"`` of the :class:`ProtocolSpec`."""
    exports: tuple[str, ...] = ()
    dense: bool | None = field(default=None, compare=False)
    """Whether the spec declares a COMED dense baseline (``dense=``), read from the source without
    importing it; ``None``: unknown until the spec is loaded (an entry added by target)."""

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]


_SPEC_START = re.compile(r"^SPEC(?:\s*:\s*ProtocolSpec)?\s*=\s*ProtocolSpec\(", re.MULTILINE)


def _entry(path: Path) -> tuple[str, Entry] | None:
    """The protocol a graph module declares (``SPEC = ProtocolSpec(name="...", build=..., ...)`` at
    top level, ``SPEC: ProtocolSpec = ...`` too), read from its source without importing it;
    ``None`` for a module without one.

    Raises:
        TypeError: the spec's ``name`` is not a string literal, or its ``build``, ``context``,
            ``input`` or ``output`` is not a plain name of the module (what ``agora.graphs`` exports).
    """
    text = path.read_text(encoding="utf-8")
    match = _SPEC_START.search(text)
    if match is None:
        return None
    tree = ast.parse(text[match.start():])  # from the SPEC statement on: a few lines, not the whole module
    call = tree.body[0].value
    kw = {k.arg: k.value for k in call.keywords}
    if not isinstance(kw.get("name"), ast.Constant) or not isinstance(kw["name"].value, str):
        raise TypeError(f"{path}: SPEC's name must be a string literal (the registry reads it without importing)")
    odd = [k for k in ("build", "context", "input", "output") if k in kw and not isinstance(kw[k], ast.Name)]
    if odd:
        raise TypeError(f"{path}: SPEC's {', '.join(odd)} must be plain names defined in the module "
                        "(agora.graphs exports them by name)")
    exports = tuple(kw[k].id for k in ("build", "context", "input", "output") if k in kw)
    dense = "dense" in kw and not (isinstance(kw["dense"], ast.Constant) and kw["dense"].value is None)
    return kw["name"].value, Entry(f"agora.graphs.{path.stem}:SPEC", exports, dense)


def _discover() -> dict[str, Entry]:
    """Every graph module of this package that declares a ``SPEC``, by module name."""
    found: dict[str, Entry] = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if not path.name.startswith("_") and (entry := _entry(path)) is not None:
            if entry[0] in found:
                raise TypeError(f"protocol {entry[0]!r} is declared twice: {found[entry[0]].target}, {entry[1].target}")
            found[entry[0]] = entry[1]
    return found


PROTOCOLS: dict[str, Entry] = _discover()
"""Protocol name → entry: every ``graphs/<module>.py`` declaring a ``SPEC`` (by module name), then
what :func:`register` adds. A new protocol module is found here, nothing to edit."""

_loaded: dict[str, ProtocolSpec] = {}
_lock = threading.RLock()  # re-entrant: a spec module may itself ask for another spec while it loads


def register(spec: ProtocolSpec | str, target: str | None = None, exports: tuple[str, ...] = ()) -> None:
    """Add a protocol: a :class:`ProtocolSpec` object (an app's or a test's), or a name and its spec's
    ``"module:attr"`` (nothing is imported until it is asked for). A registered protocol is in every
    list read from here: ``agora bench``'s methods (its spec's ``bench``) and COMED's dense baselines
    (its ``dense``) included. :func:`unregister` undoes it.

        registry.register(MY_SPEC)          # or register("mine", "my_pkg.graphs:SPEC")

    Raises:
        ValueError: the name is taken by another spec or target, or ``target`` is not ``"module:attr"``
            (or missing with a name, or given with a spec).
    """
    if isinstance(spec, ProtocolSpec):
        if target is not None:
            raise InputError(f"register({spec.name!r}): give a spec or a name and a target, not both")
        with _lock:
            if spec.name in PROTOCOLS and _loaded.get(spec.name) is not spec:
                raise InputError(f"protocol {spec.name!r} is already registered as {PROTOCOLS[spec.name].target}")
            PROTOCOLS[spec.name] = Entry(f"{spec.module}:SPEC", tuple(exports), spec.dense is not None)
            _loaded[spec.name] = spec
        return
    name = spec
    if target is None or target.count(":") != 1 or not all(target.split(":")):
        raise InputError(f"register({name!r}): target must be 'module:attr', got {target!r}")
    if name in PROTOCOLS and PROTOCOLS[name].target != target:
        raise InputError(f"protocol {name!r} is already registered as {PROTOCOLS[name].target}")
    PROTOCOLS[name] = Entry(target, tuple(exports), PROTOCOLS[name].dense if name in PROTOCOLS else None)


def unregister(name: str) -> None:
    """Remove protocol ``name`` (what a test registered); a package protocol comes back on the next
    import of the registry only.

    Raises:
        UnknownNameError (a ``KeyError``): an unknown name.
    """
    with _lock:
        if name not in PROTOCOLS:
            raise UnknownNameError(f"unknown protocol {name!r}")
        del PROTOCOLS[name]
        _loaded.pop(name, None)


def names() -> list[str]:
    """Registered protocol names, in registry order."""
    return list(PROTOCOLS)


def get(name: str) -> ProtocolSpec:
    """The spec of protocol ``name`` (its module imported on first use).

    Raises:
        UnknownNameError (a ``KeyError``): an unknown name (the message lists the known ones).
        TypeError: the entry does not name a :class:`ProtocolSpec`, or one of another name.
    """
    if name not in PROTOCOLS:
        raise UnknownNameError(f"unknown protocol {name!r}; choose one of {', '.join(sorted(PROTOCOLS))}")
    with _lock:
        if name not in _loaded:
            module, attr = PROTOCOLS[name].target.split(":")
            spec = getattr(importlib.import_module(module), attr)
            if not isinstance(spec, ProtocolSpec):
                raise TypeError(f"{PROTOCOLS[name].target} is a {type(spec).__name__}, not a ProtocolSpec")
            if spec.name != name:
                raise TypeError(f"{PROTOCOLS[name].target} declares protocol {spec.name!r}, registered as {name!r}")
            _loaded[name] = spec
        return _loaded[name]


def specs() -> list[ProtocolSpec]:
    """Every registered spec, in registry order (imports every protocol module)."""
    return [get(name) for name in PROTOCOLS]


def dense_baselines() -> list[ProtocolSpec]:
    """The specs that declare a COMED dense baseline (:class:`~agora.graphs.spec.DenseBaseline`), in
    their ``order`` (then name) order: MoA, debate, then the others. Only those modules are imported
    (the registry reads ``dense=`` from each package module's source), so COMED's own module may
    call this while it loads."""
    found = [get(n) for n, e in list(PROTOCOLS.items()) if e.dense is not False]
    dense = [s for s in found if s.dense is not None]
    return sorted(dense, key=lambda s: (s.dense.order, s.name))


def bench_specs() -> list[ProtocolSpec]:
    """The specs that take part in ``agora bench`` by themselves (a :class:`~agora.graphs.spec.BenchRole`):
    today the dense baselines, which run inside COMED's run, in the same order."""
    return [s for s in dense_baselines() if s.bench is not None]


def by_graph_id(graph_id: str) -> ProtocolSpec:
    """The spec whose Studio id is ``graph_id``.

    Raises:
        UnknownNameError (a ``KeyError``): no registered protocol has that id.
    """
    for spec in specs():
        if spec.graph_id == graph_id:
            return spec
    raise UnknownNameError(f"no protocol has graph id {graph_id!r}")


def exports() -> dict[str, str]:
    """Name → module for what ``agora.graphs`` exports from the protocol modules (no import)."""
    return {name: entry.module for entry in PROTOCOLS.values() for name in entry.exports}


def langgraph_config() -> dict[str, Any]:
    """The ``langgraph.json`` that lists every registered protocol's compiled graph for Studio."""
    return {
        "$schema": "https://langgra.ph/schema.json",
        "dependencies": ["."],
        "graphs": {spec.graph_id: {"path": spec.studio_path, "description": spec.description} for spec in specs()},
        "python_version": "3.11",
    }


def write_langgraph_json(path: str | Path) -> Path:
    """Write :func:`langgraph_config` to ``path`` (``langgraph.json`` at the repository root)."""
    path = Path(path)
    path.write_text(json.dumps(langgraph_config(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
