"""The layer contract: ``cli > training > runs > graphs > traces > agents > models > tasks``, and no import cycles.

Every module's imports are read with :mod:`ast` (module-level, function-level and ``TYPE_CHECKING``
imports alike: a lazy import that hides a cycle is still a cycle). A module may import its own layer
and the layers below it; an import of a higher layer, or a cycle between modules, fails the test
with the offending ``file:line``. No module is imported, so the test is fast and needs no extras.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("tasks", "models", "agents", "traces", "graphs", "runs", "training", "cli")
"""Lowest first: a module may import its own layer and any layer before it in this tuple."""
RANK = {layer: i for i, layer in enumerate(LAYERS)}


@dataclass(frozen=True, slots=True)
class Edge:
    """One ``agora.*`` import: ``source`` imports ``target`` at ``file:line``."""

    source: str
    target: str
    file: str
    line: int

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _modules() -> dict[str, Path]:
    """``agora.<layer>.<name>`` → file, for every module of every layer (``__init__`` as the package)."""
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT / layer).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(["agora", layer, *parts])] = path
    return found


MODULES = _modules()


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _resolve(name: str) -> str | None:
    """The longest known module that ``name`` is or lies in (``agora.tasks.answers.find`` → ``agora.tasks.answers``)."""
    while name:
        if name in MODULES:
            return name
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return None


def _edges(module: str, source: str | None = None) -> list[Edge]:
    path = MODULES[module]
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source, filename=rel)
    edges = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(module).split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # ``from agora.graphs import runner`` imports the submodule; ``from agora.tasks import Problem`` the package.
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in MODULES else stem for alias in node.names]
        for target in targets:
            if not target.startswith("agora."):
                continue
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                edges.append(Edge(module, resolved, rel, node.lineno))
    return edges


EDGES = [edge for module in MODULES for edge in _edges(module)]


def _layer(module: str) -> str:
    return module.split(".")[1]


def test_every_layer_has_modules():
    assert {_layer(module) for module in MODULES} == set(LAYERS)
    assert EDGES, "no agora.* import found: the scanner is broken"


def test_no_upward_import():
    bad = [
        f"{edge.where()}: {edge.source} ({_layer(edge.source)}) imports {edge.target} ({_layer(edge.target)})"
        for edge in EDGES
        if RANK[_layer(edge.target)] > RANK[_layer(edge.source)]
    ]
    assert not bad, "upward imports (cli > training > runs > graphs > traces > agents > models > tasks):\n" + "\n".join(bad)


DRIVERS = {"run_bench": "runs/bench.py", "run_duels": "runs/duel.py", "run_session": "runs/selection.py",
           "session_settings": "runs/selection.py"}
"""Drivers (code that runs graphs but is not a graph) and their one home in ``runs/``."""


def test_drivers_live_in_runs_not_in_graphs():
    defined: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in DRIVERS:
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert defined == {name: [home] for name, home in DRIVERS.items()}
    assert RANK["graphs"] < RANK["runs"] < RANK["training"]  # a graph importing agora.runs fails test_no_upward_import
    assert not [e.where() for e in EDGES if _layer(e.source) == "graphs" and _layer(e.target) == "runs"]


REPORT = {"bench_report": "traces/bench.py", "report_markdown": "runs/report.py",
          "plot_accuracy_vs_tokens": "runs/report.py", "claims": "runs/report.py", "write_report": "runs/report.py"}
"""The bench report's parts and their one home: the data read from the trace store in ``traces/``,
its claims, markdown and plot beside the driver in ``runs/`` (issue 32 item 5)."""


def _imported_roots(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (any form, any level of the file)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_bench_report_renders_and_plots_in_runs_and_traces_only_reads():
    defined: dict[str, list[str]] = {}
    for path in MODULES.values():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in REPORT:
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert defined == {name: [home] for name, home in REPORT.items()}
    assert "matplotlib" not in _imported_roots(ROOT / "traces" / "bench.py")
    assert "matplotlib" in _imported_roots(ROOT / "runs" / "report.py")  # the check above reads imports at all
    tables = [f"{MODULES[m].relative_to(ROOT)}:{node.lineno}" for m in MODULES if _layer(m) == "traces"
              for node in ast.walk(ast.parse(MODULES[m].read_text(encoding="utf-8")))
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and "|---" in node.value]
    assert not tables, f"markdown tables rendered in traces/ (render them in runs/): {tables}"


def _cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with more than one module (Tarjan)."""
    graph: dict[str, list[Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, []).append(edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for edge in graph.get(v, []):
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)

    cycles = []
    for component in components:
        start = min(component)
        # Breadth-first search back to ``start`` inside the component gives one shortest cycle.
        parent: dict[str, Edge] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for edge in graph.get(v, []):
                    if edge.target not in component:
                        continue
                    if edge.target == start:
                        found = edge
                        break
                    if edge.target not in parent:
                        parent[edge.target] = edge
                        nxt.append(edge.target)
                if found:
                    break
            frontier = nxt
        path = [found]
        while path[0].source != start:
            path.insert(0, parent[path[0].source])
        cycles.append(path)
    return cycles


def _alias_of(path: Path) -> str | None:
    """Why ``path`` is an alias module (one that stands for another under an old path), or ``None``:
    it puts another module in ``sys.modules``, or (not a package's ``__init__``) holds nothing but
    imports, a docstring and ``__all__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        blocks = isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is None
        if isinstance(node, ast.Assign) and not blocks and any(  # sys.modules[name] = None blocks an import
                isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules" for t in node.targets):
            return f"line {node.lineno} replaces itself in sys.modules"
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if path.name != "__init__.py" and body and all(
            isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["__all__"]) for n in body):
        return "it only re-exports what it imports"
    return None


def test_no_alias_modules():
    """No module re-exports another under an old import path (``agents/pool.py`` standing for
    ``models/pool.py``): one module, one home; callers import it there."""
    aliases = {str(path.relative_to(ROOT)): why for path in MODULES.values() if (why := _alias_of(path))}
    assert not aliases, f"alias modules (import the module where it lives and delete these): {aliases}"


def test_the_alias_check_sees_both_kinds(tmp_path):
    moved = tmp_path / "pool.py"
    moved.write_text('"""Moved."""\nimport sys\n\nfrom agora.models import pool as _moved\n\nsys.modules[__name__] = _moved\n')
    reexport = tmp_path / "convert.py"
    reexport.write_text('"""Moved."""\n\nfrom agora.models.convert import (  # noqa: F401\n    export_hf,\n)\n')
    package = tmp_path / "__init__.py"
    package.write_text('"""A package naming what users import."""\n\nfrom agora.models.pool import ModelPool\n')
    assert _alias_of(moved) == "line 6 replaces itself in sys.modules"
    assert _alias_of(reexport) == "it only re-exports what it imports"
    assert _alias_of(package) is None and _alias_of(ROOT / "graphs" / "moa.py") is None


REEXPORTING = {"models/pool.py", "models/registry.py"}
"""The modules that name other modules' classes on purpose (the pool's and the backend registry's
public surface); package ``__init__`` files may too, and a module may declare such names in its ``__all__``.
Everywhere else a name is imported from its home."""


def _used_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` reads or binds, quoted annotations (``x: "Problem"``) included, and the names
    its ``__all__`` lists (a module that declares its surface there, as ``traces/store.py`` does, names it on purpose)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            used |= {n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        annotations = []
        if isinstance(node, ast.arg):
            annotations = [node.annotation]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations = [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in annotations:
            for part in ast.walk(annotation) if annotation is not None else ():
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    try:
                        used |= {n.id for n in ast.walk(ast.parse(part.value, mode="eval")) if isinstance(n, ast.Name)}
                    except SyntaxError:
                        pass
    return used


def _reexports(module: str, source: str | None = None) -> list[str]:
    """``file:line name`` for each ``agora.*`` name ``module`` imports at module level (``TYPE_CHECKING``
    and ``try`` blocks included) but never uses: it is there only for others to import. Submodule
    imports (``from agora.cli import align``, which registers commands) are not names and do not count."""
    path = MODULES[module]
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source, filename=rel)
    imports: list[ast.ImportFrom] = []
    statements = list(tree.body)
    while statements:
        node = statements.pop(0)
        if isinstance(node, ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            statements += node.body + node.orelse + getattr(node, "finalbody", [])
            statements += [s for handler in getattr(node, "handlers", []) for s in handler.body]
    used = _used_names(tree)
    found = []
    for node in imports:
        if node.level:
            base = _package(module).split(".")
            stem = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        if not stem.startswith("agora."):
            continue
        for alias in node.names:
            if f"{stem}.{alias.name}" not in MODULES and (alias.asname or alias.name) not in used:
                found.append(f"{rel}:{node.lineno} {alias.asname or alias.name}")
    return found


def test_no_module_reexports_names():
    """A module imports what it uses; an ``agora.*`` name imported and left unused (a ``# noqa: F401``
    re-export "for older imports") fails: its callers import it from its home module instead."""
    found = [hit for module, path in MODULES.items()
             if path.name != "__init__.py" and str(path.relative_to(ROOT)) not in REEXPORTING
             for hit in _reexports(module)]
    assert not found, "names imported only to be re-exported (import them from their home module):\n" + "\n".join(found)


def test_the_reexport_check_sees_an_unused_import_only():
    source = ('"""A module."""\nfrom typing import TYPE_CHECKING\n\nfrom agora.tasks.problem import AnswerKind, Problem'
              '  # noqa: F401\nfrom agora.tasks.values import ascii_digits as digits\nfrom agora.graphs import runner\n'
              'from agora.tasks.errors import InputError\nif TYPE_CHECKING:\n    from agora.tasks.scoring import score_answer\n\n'
              'def f(x: "Problem") -> None:\n    raise InputError(x)\n')
    assert _reexports("agora.tasks.loaders", source) == ["tasks/loaders.py:4 AnswerKind", "tasks/loaders.py:5 digits",
                                                         "tasks/loaders.py:9 score_answer"]
    assert _reexports("agora.tasks.loaders", source + '__all__ = ["AnswerKind"]\n') == [
        "tasks/loaders.py:5 digits", "tasks/loaders.py:9 score_answer"]
    assert _reexports("agora.models.pool") and not _reexports("agora.tasks.loaders")


def test_no_import_cycle():
    cycles = _cycles(EDGES)
    text = [" -> ".join(f"{edge.source} ({edge.where()})" for edge in cycle) + f" -> {cycle[0].source}" for cycle in cycles]
    hint = ("\n(a command module imports its Typer app from agora.cli._apps, not agora.cli.main, which imports "
            "the commands)") if any(edge.target == "agora.cli.main" for cycle in cycles for edge in cycle) else ""
    assert not cycles, "import cycles:\n" + "\n".join(text) + hint


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from agora.training import datasets\n", ["agora.training.datasets"]),
        ("def f():\n    from agora.graphs.runner import run_problems\n", ["agora.graphs.runner"]),
        ("import agora.traces.store as s\n", ["agora.traces.store"]),
        ("from .judge import Judge\n", ["agora.agents.judge"]),
        ("from . import judge\n", ["agora.agents.judge"]),
        ("from agora.tasks import Problem\n", ["agora.tasks"]),
        ("import json\nfrom typing import Any\n", []),
    ],
)
def test_scanner_reads_every_import_form(source, expected):
    """The scanner itself: module-level, function-level, relative and package imports all count."""
    assert [edge.target for edge in _edges("agora.agents.behaviour", source)] == expected


def test_an_upward_import_and_a_cycle_are_reported():
    """Fails as it should on a made-up upward import and a made-up two-module cycle."""
    up = Edge("agora.agents.x", "agora.training.y", "agents/x.py", 3)
    assert RANK[_layer(up.target)] > RANK[_layer(up.source)]
    cycle = _cycles([Edge("agora.tasks.a", "agora.tasks.b", "tasks/a.py", 1), Edge("agora.tasks.b", "agora.tasks.a", "tasks/b.py", 7)])
    assert [[edge.where() for edge in c] for c in cycle] == [["tasks/a.py:1", "tasks/b.py:7"]]
