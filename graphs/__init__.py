"""The games: one module per protocol, each building a LangGraph ``StateGraph`` from ``agora.agents``
parts. Builders return an **uncompiled** graph: compile it with your checkpointer, or without one,
and pass the pool and settings as the run-time context (``context=...``), so one compiled graph
serves many pools. The context is the graph's own context type or a mapping of its fields (its pool
a ``ModelPool``, a built-in pool name or a pool file); anything else is refused with one line
(:class:`agora.graphs.context.ContextError`; docs/embedding.md). Each module also has ``graph``,
compiled without a checkpointer, for LangGraph Studio (``langgraph.json``, ``agora studio``).

| protocol | builder | context | input / output |
|---|---|---|---|
| ALIGN delegation | ``build_delegation_graph`` | ``DelegationContext`` | ``DelegationInput`` / ``DelegationOutput`` |
| COMED escalation | ``build_escalation_graph`` | ``EscalationContext`` | ``EscalationInput`` / ``EscalationOutput`` |
| duel (Sparta, Stackelberg) | ``build_duel_graph`` | ``DuelContext`` | ``DuelInput`` / ``DuelOutput`` |
| CUPID selection | ``build_selection_graph`` | ``SelectionContext`` | ``SelectionInput`` / ``SelectionOutput`` |
| conversation (panel data) | ``build_conversation_graph`` | ``ConversationContext`` | ``ConversationInput`` / ``ConversationOutput`` |
| Mixture-of-Agents | ``build_moa_graph`` | ``MoAContext`` | ``MoAInput`` / ``MoAOutput`` |
| multi-agent debate | ``build_debate_graph`` | ``DebateContext`` | ``DebateInput`` / ``DebateOutput`` |

The list comes from the protocol registry (:mod:`agora.graphs.registry`: one
:class:`~agora.graphs.spec.ProtocolSpec` per protocol, declared in its module). Names load lazily, so
``from agora.graphs import build_delegation_graph`` imports only that module.
``run_problems`` (:mod:`agora.graphs.runner`) runs a benchmark graph over a problem list, traced
and resumable; ``TraceRecorder`` (:mod:`agora.graphs.recording`), a LangChain callback, records the
protocol questions of any invocation of yours the same way.
"""

from __future__ import annotations

import importlib
from typing import Any

from agora.graphs import registry
from agora.graphs.spec import ProtocolSpec

# Each protocol's builder, context, input and output, as its registry entry lists them.
_WHERE = {**registry.exports(), "run_problems": "agora.graphs.runner", "TraceRecorder": "agora.graphs.recording"}
__all__ = sorted([*_WHERE, "ProtocolSpec", "registry"])


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'agora.graphs' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
