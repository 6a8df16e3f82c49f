"""What a protocol declares about itself: one :class:`ProtocolSpec` per protocol, in its graph module.

The registry (:mod:`agora.graphs.registry`) lists the specs; the package's exports, ``langgraph.json``
(LangGraph Studio), the CLI, the docs tests and the benchmarks read them from there. This module
imports no protocol, so every graph module can import it (no cycle through the registry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["benchmark", "carried", "interactive"]
"""How a protocol runs: ``benchmark`` (one question per invocation, run and recorded by
:func:`agora.graphs.runner.run_problems`), ``carried`` (one invocation per item with state carried
from item to item: duels) or ``interactive`` (a session paused at interrupts: CUPID)."""


def methods_written(values: Mapping[str, Any]) -> bool:
    """A benchmark item is finished once its graph has written ``methods`` (what the runner records)."""
    return "methods" in values


@dataclass(frozen=True, slots=True)
class RunCommand:
    """``agora run <protocol>`` from the shared CLI scaffold (``agora.cli._run.benchmark_command``):
    one option per field of the spec's ``config`` dataclass, the shared options (``--data``,
    ``--pool``, ``--db``, ``--run-id``...) and ``--config FILE.toml``. A benchmark protocol whose spec
    sets ``run`` gets the command without a CLI module of its own."""

    short_help: str
    """One line for ``agora run --help``."""
    help: str
    """The command's ``--help`` text."""
    check: Callable[[Any, list[str]], Any] | None = None
    """``check(config, pool names)`` raises ``ValueError`` for settings the pool cannot play."""
    label: Callable[[Any, list[str]], str] | None = None
    """``label(config, pool names)``: the run's one-line description (its first printed line)."""
    title: str = ""
    """The method table's title (default: the protocol's name)."""


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: its graph, types, methods, and how a finished item is told and recorded.

    Raises:
        ValueError: an empty name or graph id, or a benchmark protocol whose main method (its
            ``name``) is not among its ``methods`` (the runner scores a question by it).
    """

    name: str
    """The protocol's name: the ``runs.protocol`` of its traces and its main method (``align``)."""
    graph_id: str
    """Its id in ``langgraph.json`` (LangGraph Studio), e.g. ``align_delegation``."""
    description: str
    """One paragraph for Studio's graph list (``langgraph.json``)."""
    build: Callable[[], Any]
    """The builder: returns the uncompiled ``StateGraph`` (compile it with your checkpointer)."""
    context: type
    """The run-time context dataclass (pool and settings)."""
    config: type
    """The settings dataclass (``context.config``)."""
    input: type
    output: type
    module: str
    """The graph module (``agora.graphs.delegation``); its ``graph`` attribute is Studio's."""
    methods: tuple[str, ...] = ()
    """What a benchmark protocol scores per question (``state["methods"]`` keys), main method first."""
    kind: Kind = "benchmark"
    finished: Callable[[Mapping[str, Any]], bool] = methods_written
    """Whether a graph state is a finished item (a resumed run skips it)."""
    detail: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Benchmark protocols: what the runner stores as ``questions.detail``; its methods go to
    ``results`` and its calls to ``model_calls`` (:meth:`agora.traces.TraceStore.record_question`)."""
    record: Callable[..., Any] | None = None
    """Other kinds: the function that writes a finished item to the trace store, if there is one."""
    cli: tuple[str, ...] = ()
    """Its commands (``run align``), as typed after ``agora``."""
    run: RunCommand | None = None
    """Benchmark protocols: ``agora run <name>`` made from the settings, no CLI module needed."""
    docs: str = ""
    """Its page under ``docs/`` (``align.md``): the Mermaid picture there is the graph's."""

    def __post_init__(self):
        if not self.name or not self.graph_id:
            raise ValueError("ProtocolSpec.name and graph_id must be non-empty")
        if self.kind == "benchmark" and self.methods and self.methods[0] != self.name:
            raise ValueError(f"ProtocolSpec.methods: a benchmark protocol's first method is its main one, "
                             f"{self.name!r}; got {self.methods}")
        if self.run is not None and (self.kind != "benchmark" or f"run {self.name}" not in self.cli):
            raise ValueError(f"ProtocolSpec.run: only a benchmark protocol listing 'run {self.name}' in its cli "
                             f"gets a generated command")

    @property
    def studio_path(self) -> str:
        """``./graphs/<module>.py:graph``: where ``langgraph.json`` points LangGraph Studio."""
        return f"./graphs/{self.module.rsplit('.', 1)[-1]}.py:graph"

    def compiled(self) -> Any:
        """The module's ``graph`` (compiled without a checkpointer, as Studio loads it)."""
        import importlib

        return importlib.import_module(self.module).graph
