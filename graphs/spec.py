"""What a protocol declares about itself: one :class:`ProtocolSpec` per protocol, in its graph module.

The registry (:mod:`agora.graphs.registry`) lists the specs; the package's exports, ``langgraph.json``
(LangGraph Studio), the CLI, the docs tests and the benchmarks read them from there. This module
imports no protocol, so every graph module can import it (no cycle through the registry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.models.validation import Instance, Name, Names, Rule, settings

Kind = Literal["benchmark", "carried", "interactive"]
"""How a protocol runs: ``benchmark`` (one question per invocation, run and recorded by
:func:`agora.graphs.runner.run_problems`), ``carried`` (one invocation per item with state carried
from item to item: duels) or ``interactive`` (a session paused at interrupts: CUPID)."""


def methods_written(values: Mapping[str, Any]) -> bool:
    """A benchmark item is finished once its graph has written ``methods`` (what the runner records;
    ``None`` while a later question on the thread has not: it was cleared when that question started)."""
    return values.get("methods") is not None


def detail_keys(*keys: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A spec's ``detail`` that keeps these keys of a finished item's state (those it has):
    ``detail=detail_keys("aggregator", "proposals")``."""

    def detail(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: values[k] for k in keys if k in values}

    detail.__doc__ = f"What the runner stores in ``questions.detail``: {', '.join(keys)}."
    return detail


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


@settings
class BenchRole:
    """How a protocol takes part in ``agora bench`` (:mod:`agora.runs.bench` reads it from the registry).

    A protocol with a :class:`DenseBaseline` runs inside COMED's run of each task (the same questions,
    pool and seeds), so its bench methods are listed under COMED's run; ``methods`` are what the
    bench reports for it, in report order, after ALIGN's and COMED's own.
    """

    methods: Annotated[tuple[str, ...], Names, Rule(bool, "BenchRole.methods must name at least one method")]
    """The methods the bench reports (a subset of the spec's ``methods``, the main one first)."""
    sharing: Annotated[Mapping[str, str], Instance(Mapping, "a mapping of method to text")]
    """Method → the samples it draws on, in words (the report's "shares" column); one per method."""
    shared_sharing: Annotated[Mapping[str, str], Instance(Mapping, "a mapping of method to text")] = field(
        default_factory=dict)
    """Method → the same in a bench with one shared candidate pool per question (``--shared-candidates``):
    which of its samples come from the pool and what it adds; a method without one keeps ``sharing``'s."""
    needs: str = "question"
    """The input it needs per question: ``question`` (the problem alone; with the bench's shared
    candidates, ``shared_candidates`` too, :func:`agora.graphs.question.take_shared`)."""

    @model_validator(mode="after")
    def _every_method_said(self) -> BenchRole:
        missing = [m for m in self.methods if m not in self.sharing]
        if missing:
            raise InputError(f"BenchRole.sharing: no text for {missing} (one per method)")
        return self


@dataclass(frozen=True, slots=True)
class DenseBaseline:
    """How COMED (:mod:`agora.graphs.escalation`) embeds a protocol as one of its dense-collaboration
    baselines: a compiled subgraph run on the same question and pool after COMED's own answer, whose
    ``methods`` (those of the spec's :class:`BenchRole`) COMED reports beside its own.

    ``EscalationConfig.baselines`` names it by the protocol's name; COMED's graph gets one node of that
    name per registered dense baseline, in ``order`` (then name) order.
    """

    context: Callable[[Any, Any, str], Any]
    """``context(comed_config, pool, anchor)``: the subgraph's run-time context, its settings taken
    from COMED's (sampling, seed, shots) and the question's anchor (MoA's aggregator, the council's chair)."""
    keep: Callable[[Mapping[str, Any]], Any] | None = None
    """What COMED keeps of the subgraph's output in its state key of the protocol's name (``None``:
    the output without ``methods``, ``costs`` and ``calls``)."""
    order: int = 100
    """Position among COMED's baselines and in the bench's report (lower first; MoA 10, debate 20)."""


@settings
class ProtocolSpec:
    """One protocol: its graph, types, methods, and how a finished item is told and recorded.

    Raises:
        ValueError: an empty name or graph id (their field rules); a benchmark protocol whose first
            method is not its main one, its ``name`` (the runner scores a question by it); a ``run``
            command on a protocol that is not a benchmark one listing ``run <name>`` in ``cli``; a
            ``dense`` baseline without a ``bench`` role.
    """

    name: Annotated[str, Name(optional=False)]
    """The protocol's name: the ``runs.protocol`` of its traces and its main method (``align``)."""
    graph_id: Annotated[str, Name(optional=False)]
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
    methods: Annotated[tuple[str, ...], Names] = ()
    """What a benchmark protocol scores per question (``state["methods"]`` keys), main method first."""
    kind: Kind = "benchmark"
    finished: Callable[[Mapping[str, Any]], bool] = methods_written
    """Whether a graph state is a finished item (a resumed run skips it)."""
    detail: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Benchmark protocols: what the runner stores as ``questions.detail``; its methods go to
    ``results`` and its calls to ``model_calls`` (:meth:`agora.traces.TraceStore.record_question`)."""
    record: Callable[..., Any] | None = None
    """Other kinds: the function that writes a finished item to the trace store, if there is one."""
    cli: Annotated[tuple[str, ...], Names] = ()
    """Its commands (``run align``), as typed after ``agora``."""
    run: RunCommand | None = None
    """Benchmark protocols: ``agora run <name>`` made from the settings, no CLI module needed."""
    docs: str = ""
    """Its page under ``docs/`` (``align.md``): the Mermaid picture there is the graph's."""
    bench: BenchRole | None = None
    """How it takes part in ``agora bench`` (``None``: it does not, or the bench runs it by hand:
    ALIGN and COMED)."""
    dense: DenseBaseline | None = None
    """How COMED runs it as a dense-collaboration baseline (``None``: it is not one). A dense
    baseline needs ``bench`` too: its bench methods are what COMED reports."""

    @model_validator(mode="after")
    def _consistent(self) -> ProtocolSpec:
        if self.kind == "benchmark" and self.methods and self.methods[0] != self.name:
            raise InputError(f"ProtocolSpec.methods: a benchmark protocol's first method is its main one, "
                             f"{self.name!r}; got {self.methods}")
        if self.run is not None and (self.kind != "benchmark" or f"run {self.name}" not in self.cli):
            raise InputError(f"ProtocolSpec.run: only a benchmark protocol listing 'run {self.name}' in its cli "
                             f"gets a generated command")
        if self.dense is not None and (self.bench is None or self.kind != "benchmark"):
            raise InputError(f"ProtocolSpec.dense: {self.name!r} must be a benchmark protocol with a BenchRole "
                             "(its bench methods are what COMED reports)")
        return self

    @property
    def studio_path(self) -> str:
        """``./graphs/<module>.py:graph``: where ``langgraph.json`` points LangGraph Studio."""
        return f"./graphs/{self.module.rsplit('.', 1)[-1]}.py:graph"

    def compile(self, **kwargs: Any) -> Any:
        """The protocol's graph compiled, named by its Studio id (``kwargs``: LangGraph's compile
        arguments, ``checkpointer=`` ...). A protocol module ends with ``graph = SPEC.compile()``:
        what Studio loads and :meth:`compiled` returns."""
        return self.build().compile(name=self.graph_id, **kwargs)

    def compiled(self) -> Any:
        """The module's ``graph`` (compiled without a checkpointer, as Studio loads it)."""
        import importlib

        return importlib.import_module(self.module).graph
