"""Dense baselines as subgraphs: every registered protocol with a
:class:`~agora.graphs.spec.DenseBaseline` (MoA, debate, the council, any protocol registered later)
embedded compiled in a host graph (COMED's, ``agora bench``'s dense run), run on the same problem
with a context the baseline builds from the host's settings and anchor, its output folded back into
the host's state (``dense``, ``costs``, ``calls``, ``dense_methods``).

The subgraphs are compiled without a checkpointer: they inherit the host's, so a resumed host
question resumes inside a baseline too.
"""

from __future__ import annotations

from typing import Any, get_type_hints

from langgraph.runtime import Runtime

from agora.graphs import registry
from agora.graphs._calls import total_cost
from agora.graphs.context import context_as, pool_from
from agora.graphs.nodes import sync_async_node
from agora.graphs.spec import ProtocolSpec

#: The problem's keys a baseline is given (the same question as the host's).
PROBLEM_KEYS = ("question", "question_id", "kind", "n_choices", "shared_candidates")
_compiled: dict[int, Any] = {}


def dense_baselines() -> list[ProtocolSpec]:
    """The possible dense baselines, in their order (:func:`agora.graphs.registry.dense_baselines`)."""
    return registry.dense_baselines()


def subgraph(spec: ProtocolSpec) -> Any:
    """The baseline's graph, compiled once per spec object."""
    if id(spec) not in _compiled:
        _compiled[id(spec)] = (spec, spec.build().compile(name=spec.name))
    return _compiled[id(spec)][1]


def next_baseline(names: list[str], after: str | None, context_type: type) -> Any:
    """The routing function after node ``after`` (``None``: after the host's own answer): the next
    of ``names`` that the run's ``baselines`` setting (``context.config.baselines`` of the host's
    ``context_type``) asks for, else ``score``."""
    rest = names[names.index(after) + 1:] if after is not None else names

    def to_baselines(state: dict[str, Any], runtime: Runtime) -> str:
        wanted = context_as(runtime.context, context_type).config.baselines
        return next((n for n in rest if n in wanted), "score")

    to_baselines.__name__ = "to_baselines" if after is None else f"after_{after}"
    return to_baselines


def _baseline_call(spec: ProtocolSpec, state: dict[str, Any], runtime: Runtime,
                   context_type: type) -> tuple[dict[str, Any], Any, list[str]]:
    """The subgraph's input (the same problem), context (from the host's settings and
    ``state["route"]["anchor"]``) and output keys."""
    pool = pool_from(runtime.context, context_type)
    context = spec.dense.context(context_as(runtime.context, context_type).config, pool, state["route"]["anchor"])
    keys = sorted(set(get_type_hints(spec.output)) | {"methods", "costs", "calls"})
    return {k: state[k] for k in PROBLEM_KEYS if k in state}, context, keys


def _baseline_update(spec: ProtocolSpec, out: dict[str, Any], declared: frozenset[str]) -> dict[str, Any]:
    """The host's update from a baseline's output: what it keeps (under ``dense``, and under the
    protocol's name too when it is in ``declared``), its total cost, its calls and its bench methods."""
    kept = (spec.dense.keep(out) if spec.dense.keep is not None
            else {k: v for k, v in out.items() if k not in ("methods", "costs", "calls")})
    methods = out.get("methods") or {}
    update = {"dense": {spec.name: kept}, "costs": {spec.name: total_cost((out.get("costs") or {}).values())},
              "calls": out.get("calls") or [],
              "dense_methods": {m: methods[m] for m in spec.bench.methods if m in methods}}
    if spec.name in declared:
        update[spec.name] = kept
    return update


def baseline_node(spec: ProtocolSpec, context_type: type, declared: frozenset[str] = frozenset()) -> Any:
    """The host's node running the dense baseline ``spec`` (sync and async), named after the
    protocol; ``context_type``: the host's context class (its ``pool`` and ``config``);
    ``declared``: the baselines the host's state keeps under a key of their own."""
    graph = subgraph(spec)

    def run(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        inp, context, keys = _baseline_call(spec, state, runtime, context_type)
        return _baseline_update(spec, graph.invoke(inp, context=context, output_keys=keys), declared)

    async def arun(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        inp, context, keys = _baseline_call(spec, state, runtime, context_type)
        return _baseline_update(spec, await graph.ainvoke(inp, context=context, output_keys=keys), declared)

    run.__doc__ = f"The {spec.name} baseline ({spec.module}), embedded as a compiled subgraph."
    return sync_async_node(run, arun)
