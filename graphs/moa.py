"""Mixture-of-Agents as a LangGraph state machine: proposers answer in parallel, an aggregator
combines their answers (Wang et al., arXiv 2406.04692; the two-layer "MoA-Lite" shape).

    START ─Send×P─▶ moa_propose ─▶ moa_aggregate ─▶ END

One ``Send`` per proposer (every pool model, or ``MoAConfig.proposers``) runs ``moa_propose``: one
answer from that model alone. ``moa_aggregate`` shows every proposal (in proposer order) to the
aggregator (``MoAConfig.aggregator``, else the first pool model), which writes the final answer.

Methods (``state["methods"]``): ``moa`` (the aggregator's answer; cost: every proposal and the
aggregation) and ``proposal_vote`` (the plurality of the proposals, no aggregation: what the
aggregator adds over a vote on the same samples). Each carries ``calls`` (requests), ``samples``,
``completion_tokens`` and ``latency_s``. The aggregator's call carries ``partner`` (the proposers).

COMED embeds this graph as its MoA baseline (:mod:`agora.graphs.escalation`, aggregator = the anchor).

Usage::

    from agora.graphs.moa import build_moa_graph, MoAContext
    out = build_moa_graph().compile().invoke({"question": "...", "gold": "7"}, context=MoAContext(pool=my_pool))
    out["answer"], out["methods"]["moa"]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from agora.agents.delegation import plurality
from agora.agents.moa import MoAConfig, aggregator_messages, check_pool, run_label
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import Cost, Request, add_costs, call_context, found, how_of, method_result, partner
from agora.graphs._calls import total_cost
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit, model_node, solo_answer_node
from agora.graphs.question import as_problem, protocol_input, question_payload
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.state import MemberAnswer, MethodsOutput, MethodsState
from agora.graphs.spec import BenchRole, DenseBaseline, ProtocolSpec, RunCommand, detail_keys

METHODS = ("moa", "proposal_vote")

MoAContext = protocol_context("MoAContext", MoAConfig, "MoA settings: proposers, aggregator, sampling.")
MoAInput = protocol_input("MoAInput")


class MoAOutput(MethodsOutput):
    """What the graph returns: the aggregator's ``answer``, the ``costs`` of ``propose`` and
    ``aggregate``, and the ``methods`` ``moa`` (the aggregator) and ``proposal_vote`` (the plurality
    of the proposals)."""

    proposals: list[MemberAnswer]
    """One per proposer that answered, in proposer order."""
    aggregator: str
    """The pool member that read the proposals and wrote the answer."""


class MoAState(MoAInput, MethodsState, total=False):
    """Full state of one MoA question."""

    proposals: Annotated[list[MemberAnswer], operator.add]
    """Appended by the proposers in parallel (its reducer adds an update's list to it: through the
    state API, ``{"proposals": {"__overwrite__": [...]}}`` replaces it instead)."""
    aggregator: str


class ProposerTask(MoAInput, total=False):
    """One proposer's ``Send`` payload: the problem and who proposes."""

    agent: int
    model: str
    share: int
    """Proposers before this one that play the same model: it takes that model's shared sample
    ``share`` (``agora bench``'s shared candidates)."""


def _config(runtime: Runtime) -> MoAConfig:
    return context_as(runtime.context, MoAContext).config


def to_proposers(state: MoAState, runtime: Runtime[MoAContext]) -> list[Send]:
    """One ``Send`` per proposer (every pool model unless configured)."""
    cfg = _config(runtime)
    pool = pool_from(runtime.context, MoAContext)
    check_pool(cfg, pool.names)
    proposers = list(cfg.proposers or pool.names)
    return [Send("moa_propose", ProposerTask(**question_payload(state, m), agent=i, model=m,
                                             share=proposers[:i].count(m)))
            for i, m in enumerate(proposers)]


def _aggregate_request(state: MoAState, runtime: Runtime[MoAContext]) -> Request:
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, MoAContext)
    model = cfg.aggregator or pool.names[0]
    proposals = sorted(state.get("proposals") or [], key=lambda p: p["agent"])
    emit("moa_propose", f"MoA proposals {[p['answer'] for p in proposals]}", answers=[p["answer"] for p in proposals])
    params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, "moa.aggregator"))
    return Request(pool, model, aggregator_messages(problem, [p["text"] for p in proposals], cfg.shots), params,
                   call_context(problem, "moa_aggregate", "aggregator", partner=partner(p["model"] for p in proposals)))


def _moa_aggregate(state: MoAState, model: str, samples: list, records: list[dict], cost: Cost) -> dict[str, Any]:
    """MoA final layer: the aggregator reads every proposal and writes one answer."""
    problem = as_problem(state)
    answer, how = found(samples[0].text if samples else None, problem)
    proposals = sorted(state.get("proposals") or [], key=lambda p: p["agent"])
    costs = add_costs(state.get("costs"), {"aggregate": cost})
    vote = plurality([p["answer"] for p in proposals])[0]
    methods = {  # unscored: the runner scores (agora.tasks.scoring)
        "moa": method_result(answer, how, total_cost(costs.values())),
        "proposal_vote": method_result(vote, how_of(vote, [(p["answer"], p["how"]) for p in proposals]),
                                       total_cost([costs["propose"]] if "propose" in costs else [])),
    }
    emit("moa_aggregate", f"MoA aggregator {model} answered {answer}", answer=answer)
    return {"aggregator": model, "answer": answer, "how": how, "costs": {"aggregate": cost},
            "calls": records, "methods": methods}


def build_moa_graph() -> StateGraph:
    """The Mixture-of-Agents graph, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`MoAInput`; output: :class:`MoAOutput`; run-time context: :class:`MoAContext`.
    """
    builder = ProtocolGraph(MoAState, context_schema=MoAContext, input_schema=MoAInput, output_schema=MoAOutput)
    builder.add_node("moa_propose", solo_answer_node(MoAContext, "moa.proposer", "moa_propose", "proposer",
                                                     who="agent", into="proposals", step="propose"))
    builder.add_node("moa_aggregate", model_node(_aggregate_request, _moa_aggregate))
    builder.add_conditional_edges(START, to_proposers, ["moa_propose"])
    builder.add_edge("moa_propose", "moa_aggregate")
    builder.add_edge("moa_aggregate", END)
    return builder


SPEC = ProtocolSpec(
    name="moa", graph_id="moa", module=__name__,
    build=build_moa_graph, context=MoAContext, config=MoAConfig, input=MoAInput, output=MoAOutput,
    methods=METHODS, detail=detail_keys("aggregator", "proposals"), cli=("run moa",), docs="moa.md",
    run=RunCommand(
        short_help="Mixture-of-Agents: every model proposes, one aggregates; beside a vote on the proposals.",
        help="Each proposer answers every problem alone, the aggregator reads all proposals and answers; "
             "compare with the plurality of the same proposals (proposal_vote).",
        check=check_pool, label=run_label, title="MoA"),
    bench=BenchRole(methods=("moa",), sharing={
        "moa": "its own samples: one proposal per pool model and the aggregator's answer"}, shared_sharing={
        "moa": "the shared pool (k samples per model and question, drawn once): one proposal per proposer "
               "(its model's first sample); adds the aggregator"}),
    dense=DenseBaseline(context=lambda comed, pool, anchor: MoAContext(pool, comed.moa_config(aggregator=anchor)),
                        order=10),
    description=("Mixture-of-Agents: every proposer model answers the question alone (one Send each, in "
                 "parallel), then an aggregator reads all proposals and writes one answer; the plurality of "
                 "the proposals is scored beside it, every method cost-counted."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
