"""ALIGN delegation as a LangGraph state machine (protocols.md §1).

    delegate ──Send×n──▶ agent_sample ──Send──▶ agent_propose ──▶ principal_select ──▶ END

A principal delegates a question to ``n`` agents. Each agent privately samples ``k`` candidates
and proposes one with a confidence signal; the principal, committed in advance to a threshold
``tau`` on its utility ``U``, accepts the best proposal with ``U >= tau`` or falls back to argmax
``U``. With a model principal (``DelegationConfig.principal``, a pool member such as a trained
aggregator), ``principal_select`` instead shows that member the question and the proposals and its
answer is ALIGN's (its call is recorded with role ``principal``). From the **same candidate pool** the graph also computes the fair baselines: single-agent
(one sample), self-consistency over all ``n·k`` candidates, and best-of-``n·k`` by ``U``.

Source: Zhu et al., arXiv 2602.00127 (2026), reconstructed (see :mod:`agora.agents.delegation`).

Usage::

    from agora.graphs.delegation import build_delegation_graph, DelegationContext
    graph = build_delegation_graph().compile()
    out = graph.invoke({"question": "Tom has 3 apples and buys 4 more. How many?"},
                       context=DelegationContext(pool=my_pool))
    out["answer"], out["methods"]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.delegation import Candidate, DelegationConfig, Proposal, Selection, principal_utility
from agora.agents.delegation import best_of_n, principal_select as select_rule, propose, self_consistency
from agora.agents.delegation import principal_choice, single_agent
from agora.agents.moa import aggregator_prompt
from agora.agents.prompts import solver_messages
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import Cost, Request, aask, ask, call_context, found, partner
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit, sync_async_node
from agora.graphs.question import SharedCandidate, as_problem, protocol_input, take_shared
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import ProtocolSpec, detail_keys
from agora.models.studio_schema import studio_schema
from agora.tasks.answers import find_answer
from agora.traces.reliability import reliabilities
from agora.traces.schema import MethodResult

METHODS = ("align", "single_agent", "self_consistency", "best_of_n")


DelegationContext = protocol_context("DelegationContext", DelegationConfig,
                                     "ALIGN settings (n, k, tau, rules, sampling).")
DelegationInput = protocol_input("DelegationInput")


@studio_schema()
class DelegationOutput(TypedDict):
    """What the graph returns."""

    answer: str | None
    """The principal's selected answer (ALIGN)."""
    selection: Selection
    """The principal's choice: the selected agent, its answer, its utility U and whether U >= tau."""
    proposals: list[Proposal]
    """One proposal per agent (its answer, text and confidence signal), in agent order."""
    methods: dict[str, MethodResult]
    """ALIGN and the three baselines computed from the same candidates."""


class DelegationState(DelegationInput, total=False):
    """Full state of one delegation."""

    assignments: list[dict[str, Any]]
    """One ``{"agent", "model"}`` per agent, set by ``delegate``."""
    candidates: Annotated[list[Candidate], operator.add]
    """All n·k candidates, appended by the agents in parallel."""
    proposals: Annotated[list[Proposal], operator.add]
    """One proposal per agent."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written to the trace store by the runner)."""
    selection: Selection
    methods: dict[str, MethodResult]
    answer: str | None


class AgentState(TypedDict, total=False):
    """What one agent's steps see: a ``Send`` payload (its assignment, then its own candidates)."""

    agent: int
    model: str
    question_id: str
    question: str
    kind: str
    n_choices: int
    shared_candidates: dict[str, list[SharedCandidate]]
    """This agent's model's shared samples only (``agora bench``), when the question has them."""
    candidates: Annotated[list[Candidate], operator.add]
    proposals: Annotated[list[Proposal], operator.add]
    calls: Annotated[list[dict[str, Any]], operator.add]


def _config(runtime: Runtime) -> DelegationConfig:
    return context_as(runtime.context, DelegationContext).config


# ---------------------------------------------------------------------------- nodes


def delegate(state: DelegationState, runtime: Runtime[DelegationContext]) -> dict[str, Any]:
    """The principal assigns the question to n agents (agent i plays model i mod |models|)."""
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, DelegationContext)
    models = list(cfg.models) or pool.names
    for m in models:
        if m not in pool:
            raise InputError(f"DelegationConfig.models names {m!r}, which is not in the pool ({', '.join(pool.names)})")
    if cfg.principal is not None and cfg.principal not in pool:
        raise InputError(f"DelegationConfig.principal: {cfg.principal!r} is not in the pool ({', '.join(pool.names)})")
    calibrated_reliabilities(cfg, models)
    assignments = [{"agent": i, "model": models[i % len(models)]} for i in range(cfg.n_agents)]
    emit("delegate", f"delegating to {cfg.n_agents} agents × {cfg.k_samples} samples",
         question_id=problem.id, agents=assignments)
    return {"question_id": problem.id, "assignments": assignments}


def fan_out(state: DelegationState) -> list[Send]:
    """One ``Send`` per agent: the agents work in parallel."""
    base = {k: state.get(k) for k in ("question_id", "question", "kind", "n_choices")}
    shared = state.get("shared_candidates") or {}
    return [Send("agent_sample", {**base, **a, **({"shared_candidates": {a["model"]: shared[a["model"]]}}
                                                    if a["model"] in shared else {})})
            for a in state["assignments"]]


def _sample_request(state: AgentState, runtime: Runtime[DelegationContext]) -> tuple[Any, dict[str, Any]]:
    """What ``agent_sample`` asks the pool for: ``(problem, pool.sample keyword arguments)``."""
    problem = as_problem(state)
    cfg = _config(runtime)
    agent = state["agent"]
    params = sampling(cfg, n=cfg.k_samples, seed=call_seed(cfg.seed, problem.id, "align.agent", agent=agent))
    return problem, {"name": state["model"], "messages": solver_messages(problem, cfg.shots), "params": params,
                     "context": {"question_id": problem.id, "node": "agent_sample", "role": "agent", "agent": agent}}


def _shared_share(state: AgentState, runtime: Runtime[DelegationContext]) -> list[Any] | None:
    """This agent's k candidates from the bench's shared pool (agent ``i`` whose model ``j`` agents
    before it also play takes samples ``j·k .. j·k + k − 1``), or ``None``: draw them."""
    if not state.get("shared_candidates"):
        return None
    cfg = _config(runtime)
    models = list(cfg.models) or pool_from(runtime.context, DelegationContext).names
    share = sum(1 for a in range(state["agent"]) if models[a % len(models)] == state["model"])
    return take_shared(state, state["model"], cfg.k_samples, start=share * cfg.k_samples)


def _sampled(state: AgentState, problem: Any, samples: list[Any], records: list[dict[str, Any]],
             shared: bool = False) -> Command:
    """``agent_sample``'s result: candidates to the shared pool and to this agent's ``agent_propose``
    (``shared``: taken from the bench's shared candidates, whose rows are the draw's: no records)."""
    agent, model = state["agent"], state["model"]
    found = [find_answer(s.text, problem.kind, problem.n_choices or 4, question=problem.question) for s in samples]
    candidates = [
        Candidate(agent=agent, model=model, index=i, text=s.text, answer=f.answer,
                  how=f.how if f.answer is not None else None,
                  prompt_tokens=s.prompt_tokens, completion_tokens=s.completion_tokens,
                  latency_s=s.latency_s, call_id=s.call_id, **({"shared": True} if shared else {}))
        for i, (s, f) in enumerate(zip(samples, found))
    ]
    emit("sampled", f"agent {agent} ({model}) sampled {len(candidates)} candidates: "
         f"{[c['answer'] for c in candidates]}", agent=agent, model=model,
         answers=[c["answer"] for c in candidates], failed=not samples)
    own = {"agent": agent, "model": model, "candidates": candidates}
    return Command(update={"candidates": candidates, "calls": records}, goto=Send("agent_propose", own))


def agent_sample(state: AgentState, runtime: Runtime[DelegationContext]) -> Command[Literal["agent_propose"]]:
    """The agent privately samples k candidates and extracts each one's answer.

    Its candidates go to the shared pool (``candidates``) and, with a ``Send``, to this agent's
    own ``agent_propose``: an agent proposes from its candidates only.
    """
    problem, request = _sample_request(state, runtime)
    if (shared := _shared_share(state, runtime)) is not None:
        return _sampled(state, problem, shared, [], shared=True)
    return _sampled(state, problem, *pool_from(runtime.context, DelegationContext).sample(**request))


async def aagent_sample(state: AgentState, runtime: Runtime[DelegationContext]) -> Command[Literal["agent_propose"]]:
    """:func:`agent_sample` for async runs (``ainvoke``, Studio): awaits the model call."""
    problem, request = _sample_request(state, runtime)
    if (shared := _shared_share(state, runtime)) is not None:
        return _sampled(state, problem, shared, [], shared=True)
    return _sampled(state, problem, *await pool_from(runtime.context, DelegationContext).asample(**request))


def agent_propose(state: AgentState, runtime: Runtime[DelegationContext]) -> dict[str, Any]:
    """The agent proposes the candidate it expects the principal to value most."""
    cfg = _config(runtime)
    proposal = propose(state["agent"], state["model"], state.get("candidates", []), cfg.proposal_rule)
    emit("proposal", f"agent {proposal['agent']} proposed {proposal['answer']} "
         f"(vote share {proposal['signal']:.2f})", **{k: proposal[k] for k in ("agent", "model", "answer", "signal")})
    return {"proposals": [proposal]}


def calibrated_reliabilities(cfg: DelegationConfig, models: list[str]) -> dict[str, float] | None:
    """The ``calibrated`` utility's member reliabilities (``None`` for ``agreement``).

    Raises:
        ValueError: an agent's member with no dev accuracy (given or in the dev run), named.
    """
    if cfg.utility != "calibrated":
        return None
    found = reliabilities(cfg.dev_accuracy, cfg.dev_db, cfg.dev_run)
    missing = [m for m in dict.fromkeys(models) if m not in found]
    if missing:
        raise InputError(f"DelegationConfig.dev_accuracy: no accuracy for member(s) {', '.join(missing)} (give "
                         f"member=accuracy, or a dev_run with their samples)")
    return found


def _principal_request(state: DelegationState, runtime: Runtime[DelegationContext]) -> Request | None:
    """The model principal's request (``DelegationConfig.principal``): the question and the agents'
    proposals in agent order, shuffled with the call's seed (:func:`agora.agents.moa.aggregator_prompt`,
    the prompt the trained aggregator learnt on); ``None`` without a model principal (no call)."""
    cfg = _config(runtime)
    if cfg.principal is None:
        return None
    problem = as_problem(state)
    proposals = sorted(state.get("proposals", []), key=lambda p: p["agent"])
    seed = call_seed(cfg.seed, problem.id, "align.principal")
    messages = aggregator_prompt(problem.question, [p["text"] for p in proposals], kind=problem.kind,
                                 n_choices=problem.n_choices or 4, seed=seed, shots=cfg.shots, question_id=problem.id)
    return Request(pool_from(runtime.context, DelegationContext), cfg.principal, messages, sampling(cfg, seed=seed),
                   call_context(problem, "principal_select", "principal", partner=partner(p["model"] for p in proposals)))


def _selected(state: DelegationState, runtime: Runtime[DelegationContext],
              asked: tuple[list[Any], list[dict[str, Any]], Cost] | None) -> dict[str, Any]:
    """The principal's selection and the methods; ``asked``: the model principal's samples, trace
    records and cost (``None``: the committed rule, no call)."""
    cfg = _config(runtime)
    proposals = sorted(state.get("proposals", []), key=lambda p: p["agent"])
    candidates = state.get("candidates", [])
    reliability = calibrated_reliabilities(cfg, [p["model"] for p in proposals])
    utilities = principal_utility(cfg.utility, [p["answer"] for p in proposals], proposals, reliability)
    principal_how = None
    if asked is None:
        selection = select_rule(proposals, utilities, cfg.tau)
    else:
        samples, _records, _cost = asked
        answer, principal_how = found(samples[0].text if samples else None, as_problem(state))
        selection = principal_choice(proposals, answer, utilities, cfg.tau, cfg.principal)

    def result(answer: str | None, used: list[Candidate]) -> MethodResult:  # unscored: the runner scores
        out = MethodResult(answer=answer, correct=None, samples=len(used),
                           completion_tokens=sum(c["completion_tokens"] for c in used),
                           latency_s=sum(c["latency_s"] for c in used),
                           how=next((c.get("how") for c in used if answer is not None and c["answer"] == answer), None))
        shared = [c for c in used if c.get("shared")]
        if shared:  # from the bench's shared pool: one request per model drew them, none added here
            out.update(shared_calls=len({c["model"] for c in shared}), shared_samples=len(shared),
                       shared_completion_tokens=sum(c["completion_tokens"] for c in shared),
                       shared_latency_s=sum(c["latency_s"] for c in shared))
        return out

    first = [c for c in candidates if c["agent"] == 0 and c["index"] == 0]
    align = result(selection["answer"], candidates)
    if asked is not None:  # the principal's call adds to ALIGN's cost; its answer's mark is its own
        cost = asked[2]
        align.update(samples=align["samples"] + cost["samples"],
                     completion_tokens=align["completion_tokens"] + cost["completion_tokens"],
                     latency_s=align["latency_s"] + cost["latency_s"], how=principal_how)
    methods = {
        "align": align,
        "single_agent": result(single_agent(candidates), first),
        "self_consistency": result(self_consistency(candidates)[0], candidates),
        "best_of_n": result(best_of_n(candidates, proposals, cfg.utility, reliability)[0], candidates),
    }
    if asked is None:
        verdict = "accepted" if selection["accepted"] else f"no proposal reached tau={cfg.tau}; argmax fallback"
        emit("selection", f"principal selected {selection['answer']} from agent {selection['agent']} "
             f"(U={selection['utility']:.2f}, {verdict})", **selection)
        return {"selection": selection, "methods": methods, "answer": selection["answer"]}
    who = "no single agent" if selection["agent"] is None else f"agent {selection['agent']}"
    emit("selection", f"principal {cfg.principal} answered {selection['answer']} ({who}'s proposal, "
         f"U={selection['utility']:.2f})", **selection)
    return {"selection": selection, "methods": methods, "answer": selection["answer"], "calls": asked[1]}


def principal_select(state: DelegationState, runtime: Runtime[DelegationContext]) -> dict[str, Any]:
    """The principal applies its committed rule, or, with a model principal
    (``DelegationConfig.principal``), that member reads the proposals and answers; the baselines
    answer from the same candidates (each method's ``correct`` is left ``None``: the runner scores)."""
    request = _principal_request(state, runtime)
    return _selected(state, runtime, None if request is None else ask(*request))


async def aprincipal_select(state: DelegationState, runtime: Runtime[DelegationContext]) -> dict[str, Any]:
    """:func:`principal_select` for async runs (``ainvoke``, Studio): awaits the model principal's call."""
    request = _principal_request(state, runtime)
    return _selected(state, runtime, None if request is None else await aask(*request))


# ---------------------------------------------------------------------------- graph


def build_delegation_graph() -> StateGraph:
    """The ALIGN graph, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`DelegationInput`; output: :class:`DelegationOutput`; run-time context:
    :class:`DelegationContext` (pool and settings; defaults to the embedded pool).
    """
    builder = ProtocolGraph(DelegationState, context_schema=DelegationContext,
                          input_schema=DelegationInput, output_schema=DelegationOutput)
    # Each node runs natively under invoke and ainvoke (no thread hop per node in async runs).
    builder.add_node("delegate", sync_async_node(delegate))
    builder.add_node("agent_sample", sync_async_node(agent_sample, aagent_sample), destinations=("agent_propose",))
    builder.add_node("agent_propose", sync_async_node(agent_propose))
    builder.add_node("principal_select", sync_async_node(principal_select, aprincipal_select))
    builder.add_edge(START, "delegate")
    builder.add_conditional_edges("delegate", fan_out, ["agent_sample"])
    builder.add_edge("agent_propose", "principal_select")
    builder.add_edge("principal_select", END)
    return builder


SPEC = ProtocolSpec(
    name="align", graph_id="align_delegation", module=__name__,
    build=build_delegation_graph, context=DelegationContext, config=DelegationConfig,
    input=DelegationInput, output=DelegationOutput, methods=METHODS, detail=detail_keys("proposals", "selection"),
    cli=("run align",), docs="align.md",
    description=("ALIGN: a principal delegates a question to n agents (k samples each), each proposes one "
                 "candidate, the principal selects under a committed threshold rule; baselines from the same "
                 "candidates."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
