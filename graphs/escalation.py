"""COMED controlled escalation as a LangGraph state machine (protocols.md §3), with the
dense-collaboration baselines computed in the same run and pool.

    route ─▶ anchor ─▶ decide ─┬─▶ accept ───────────────┐
                               ├─▶ verify ─┬─▶ accept     ├─▶ [moa] ─▶ [debate] ─▶ score ─▶ END
                               │           └─▶ escalate   │
                               └─▶ escalate ──────────────┘

``route`` picks the anchor (the router's best model, or a fixed one) and, with a router, the margin
``M = score₁ − score₂``; ``anchor`` draws N samples, SC = plurality share; ``decide`` accepts
(SC ≥ τ_hi and M ≥ m_min), escalates (SC < τ_lo) or verifies with one short greedy answer from a
peer probe (agree → accept, disagree → escalate); ``escalate`` asks every peer after showing it the
anchor's answer and replaces the anchor's answer with a vote. Then the baselines, each a protocol of
its own embedded as a compiled subgraph: Mixture-of-Agents (:mod:`agora.graphs.moa`: every pool model
proposes, the anchor aggregates) and multi-agent debate (:mod:`agora.graphs.debate`: 3 agents × 2
rounds), and ``score`` writes every method's result and cost.

Methods (``state["methods"]``): ``comed``; ``anchor`` (the anchor's plurality answer: COMED without
escalation); ``router_only`` (the routed model's first sample; only with a router); ``moa``;
``debate``. Each carries ``calls`` (requests sent; N samples of one prompt are one request),
``samples``, ``completion_tokens`` (decoded tokens) and ``latency_s``, counting only the calls that
method's answer needed.

Every call whose prompt showed another model's answer (peers, debate rounds after the first, the
MoA aggregator) carries ``partner`` (those models, comma-separated) in its trace record.

Source: Alballa et al., arXiv 2609.26913, reconstructed (see :mod:`agora.agents.escalation`).

Usage::

    from agora.graphs.escalation import build_escalation_graph, EscalationContext
    graph = build_escalation_graph().compile()
    out = graph.invoke({"question": "...", "gold": "B", "kind": "mc", "n_choices": 4},
                       context=EscalationContext(pool=my_pool))
    out["answer"], out["decision"], out["methods"]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.delegation import plurality
from agora.agents.escalation import Decision, EscalationConfig, decide as decide_rule, escalates, escalation_vote
from agora.agents.escalation import peer_messages, use_baseline_source
from agora.agents.escalation_records import AnchorInfo, EscalationInfo, ProbeInfo, RouteInfo
from agora.agents.escalation_records import comed_detail, comed_outcome
from agora.agents.prompts import solver_messages
from agora.agents.router import KNNRouter
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import Cost, MethodResult, add_costs as _add_costs, ask as _ask, call_context as _context
from agora.graphs._calls import found as _found, how_of as _how_of, shared_cost, total_cost
from agora.graphs.context import ContextError, context_as, pool_from, protocol_context
from agora.models.validation import Convert
from agora.graphs.dense_baselines import baseline_node, dense_baselines, next_baseline
from agora.graphs.nodes import emit
from agora.graphs.question import as_problem, protocol_input, take_shared
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import ProtocolSpec
from agora.models.studio_schema import studio_schema
from agora.tasks.answers import extract_answer
from agora.tasks.problem import Problem

OWN_METHODS = ("comed", "anchor", "router_only")
"""COMED's own methods; its dense baselines' follow them (:func:`comed_methods`)."""


def _router(value: object) -> KNNRouter | None:
    """A context's ``router``: a :class:`KNNRouter` (built in Python) or ``None``; JSON (Studio, the
    HTTP API) has no way to send one, so anything else is refused in one line, not at the first route."""
    if value is None or isinstance(value, KNNRouter):
        return value
    raise ContextError(f"EscalationContext.router: expected a KNNRouter (from Python) or null (a fixed anchor), "
                       f"got {type(value).__name__} {value!r:.60}")


EscalationContext = protocol_context(
    "EscalationContext", EscalationConfig,
    "COMED settings: thresholds, anchor samples N, anchor/probe/peers, sampling, baselines.",
    extra=[("router", Annotated[KNNRouter | None, Convert(_router)], None,
            "Router over past traces; ``None`` (or a fixed ``config.anchor``) = fixed anchor, no margin.")])


MC_EXAMPLE = {"question": "Which gas do plants absorb from the air for photosynthesis?\nA. Oxygen\nB. Nitrogen\n"
                          "C. Carbon dioxide\nD. Helium", "kind": "mc", "n_choices": 4}
"""The worked example of COMED's input schema (Studio fills its form with it)."""


EscalationInput = protocol_input("EscalationInput", MC_EXAMPLE)


@studio_schema()
class EscalationOutput(TypedDict):
    """What the graph returns."""

    answer: str | None
    """COMED's final answer."""
    decision: Decision
    """The decide rule's verdict on the anchor: ``accept``, ``verify`` or ``escalate``."""
    outcome: str
    """``accept``, ``verify_accept``, ``verify_escalate`` or ``escalate``."""
    route: RouteInfo
    """Who plays: the anchor, the probe and the peers, and the router's scores and margin."""
    anchor: AnchorInfo
    """The anchor's N samples: their answers, the plurality answer and its self-consistency."""
    probe: ProbeInfo
    """The peer probe's answer and whether it agrees with the anchor (when COMED verified)."""
    escalation: EscalationInfo
    """The peers' answers and their vote (when COMED escalated)."""
    costs: dict[str, Cost]
    """Cost of each step that ran: ``anchor``, ``verify``, ``escalate``, ``moa``, ``debate``."""
    methods: dict[str, MethodResult]
    """COMED and its baselines (anchor, router-only, MoA, debate), each with answer, correctness and cost."""


def _merge(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    return {**(a or {}), **(b or {})}


class EscalationState(EscalationInput, total=False):
    """Full state of one COMED question."""

    route: RouteInfo
    anchor: AnchorInfo
    decision: Decision
    probe: ProbeInfo
    escalation: EscalationInfo
    moa: dict[str, Any]
    """MoA proposals (model, answer, text) and the aggregator's answer."""
    debate: Annotated[list[list[dict[str, Any]]], operator.add]
    """Debate rounds, each a list of ``{"agent", "model", "answer", "text"}``."""
    dense: Annotated[dict[str, Any], _merge]
    """Every dense baseline that ran, by protocol name: what COMED keeps of its output
    (:attr:`agora.graphs.spec.DenseBaseline.keep`; ``moa`` and ``debate`` also under their own keys)."""
    dense_methods: Annotated[dict[str, MethodResult], _merge]
    """The dense baselines' methods (their specs' bench methods), as each subgraph computed them."""
    costs: Annotated[dict[str, Cost], _add_costs]
    """Cost per step: ``anchor``, ``verify``, ``escalate``, ``moa``, ``debate``."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written to the trace store by the runner)."""
    outcome: str
    methods: dict[str, MethodResult]
    answer: str | None


DECLARED_BASELINES = frozenset(("moa", "debate"))
"""Baselines :class:`EscalationState` keeps under a key of their own (older callers read them there)."""


def _config(runtime: Runtime) -> EscalationConfig:
    return context_as(runtime.context, EscalationContext).config


def _answer(text: str, problem: Problem) -> str | None:
    return extract_answer(text, problem.kind, problem.n_choices or 4, question=problem.question)


# ---------------------------------------------------------------------------- COMED nodes


def route(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """Pick the anchor (router or fixed), the probe model and the peers."""
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, EscalationContext)
    router = context_as(runtime.context, EscalationContext).router
    scores = margin = None
    if router is not None and cfg.anchor is None:
        verdict = router.route(problem.question)
        ranking = [m for m in verdict["ranking"] if m in pool]
        if len(ranking) < 2:
            raise InputError(f"router ranks {verdict['ranking']}, fewer than two of which are in the pool ({', '.join(pool.names)})")
        anchor, runner_up = ranking[0], ranking[1]
        scores, margin = verdict["scores"], verdict["margin"]
    else:
        anchor = cfg.anchor or pool.names[0]
        runner_up = next((m for m in pool.names if m != anchor), None)
    peers = list(cfg.peers) or [m for m in pool.names if m != anchor]
    probe = cfg.probe or runner_up
    for what, name in [("anchor", anchor), ("probe", probe), *(("peers", p) for p in peers)]:
        if name is None or name not in pool:
            raise InputError(f"EscalationConfig.{what}: {name!r} is not in the pool ({', '.join(pool.names)}); "
                             "COMED needs an anchor and at least one other model")
    info = RouteInfo(anchor=anchor, probe=probe, peers=peers, routed=scores is not None, scores=scores, margin=margin)
    emit("route", f"anchor {anchor}" + (f" (router margin {margin:.2f})" if margin is not None else " (fixed)"),
         question_id=problem.id, **info)
    return {"question_id": problem.id, "route": info}


def anchor(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """N samples from the anchor; self-consistency SC = the plurality answer's share."""
    problem = as_problem(state)
    cfg = _config(runtime)
    model = state["route"]["anchor"]
    params = sampling(cfg, n=cfg.n_anchor, seed=call_seed(cfg.seed, problem.id, "comed.anchor"))
    shared = take_shared(state, model, cfg.n_anchor)  # the bench's shared pool: the anchor model's first N
    if shared is not None:
        samples, records, cost = shared, [], shared_cost(shared)
    else:
        samples, records, cost = _ask(pool_from(runtime.context, EscalationContext), model,
                                      solver_messages(problem, cfg.shots), params, _context(problem, "anchor", "anchor"))
    found = [_found(s.text, problem) for s in samples] + [(None, None)] * (cfg.n_anchor - len(samples))
    answers = [a for a, _how in found]
    answer, sc = plurality(answers)
    text = next((s.text for s, a in zip(samples, answers) if a == answer), samples[0].text if samples else "")
    first = ({"answer": answers[0], "how": found[0][1], "completion_tokens": samples[0].completion_tokens,
              "latency_s": samples[0].latency_s} if samples else {"answer": None, "completion_tokens": 0, "latency_s": 0.0})
    info = AnchorInfo(model=model, answers=answers, answer=answer, how=_how_of(answer, found), sc=sc, text=text,
                      first=first)
    emit("anchor", f"{model} answered {answers}: {answer} with SC {sc:.2f}", answers=answers, answer=answer, sc=sc)
    return {"anchor": info, "costs": {"anchor": cost}, "calls": records}


def decide(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """Accept, verify or escalate from SC and the router margin."""
    cfg = _config(runtime)
    decision = decide_rule(state["anchor"]["sc"], state["route"]["margin"], cfg.thresholds)
    t = cfg.thresholds
    emit("decide", f"SC {state['anchor']['sc']:.2f}, margin {state['route']['margin']} → {decision} "
         f"(τ_hi {t.tau_hi}, τ_lo {t.tau_lo}, m_min {t.m_min})", decision=decision)
    return {"decision": decision}


def after_decide(state: EscalationState, runtime: Runtime[EscalationContext]) -> str:
    return "verify" if _config(runtime).explore else state["decision"]


def accept(state: EscalationState) -> dict[str, Any]:
    """Keep the anchor's answer (its update says which: ``score`` writes the same one as COMED's)."""
    emit("accept", f"accepted the anchor's answer {state['anchor']['answer']}")
    return {"answer": state["anchor"]["answer"]}


def verify(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """Peer probe: one short greedy answer from the probe model, compared with the anchor's."""
    problem = as_problem(state)
    cfg = _config(runtime)
    model = state["route"]["probe"]
    params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, "comed.probe"), temperature=0.0, top_p=1.0,
                      max_tokens=cfg.probe_max_tokens)
    samples, records, cost = _ask(pool_from(runtime.context, EscalationContext), model, solver_messages(problem, cfg.shots), params,
                                  _context(problem, "verify", "probe"))
    answer = _answer(samples[0].text, problem) if samples else None
    agrees = answer is not None and answer == state["anchor"]["answer"]
    emit("verify", f"probe {model} answered {answer}: {'agrees' if agrees else 'disagrees'}", answer=answer, agrees=agrees)
    return {"probe": ProbeInfo(model=model, answer=answer, agrees=agrees), "costs": {"verify": cost}, "calls": records}


def after_verify(state: EscalationState, runtime: Runtime[EscalationContext]) -> str:
    return "escalate" if _config(runtime).explore or not state["probe"]["agrees"] else "accept"


def escalate(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """Each peer answers after seeing the anchor's answer; a vote replaces the anchor's answer."""
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, EscalationContext)
    anchor_info, route_info = state["anchor"], state["route"]
    messages = peer_messages(problem, anchor_info["text"], cfg.shots)
    peers, records, costs = [], [], {}
    for i, model in enumerate(route_info["peers"]):
        params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, "comed.peer", agent=i))
        samples, recs, cost = _ask(pool, model, messages, params,
                                   _context(problem, "escalate", "peer", agent=i, partner=anchor_info["model"]))
        answer, how = _found(samples[0].text if samples else None, problem)
        peers.append({"model": model, "answer": answer, "how": how})
        records += recs
        costs = _add_costs(costs, {"escalate": cost})
    answer = escalation_vote(anchor_info["answer"], anchor_info["sc"], [p["answer"] for p in peers])
    emit("escalate", f"peers answered {[p['answer'] for p in peers]} after seeing {anchor_info['answer']}: vote {answer}",
         peers=peers, answer=answer)
    how = _how_of(answer, [(anchor_info["answer"], anchor_info.get("how"))] + [(p["answer"], p["how"]) for p in peers])
    return {"escalation": EscalationInfo(peers=peers, answer=answer, how=how), "costs": costs, "calls": records}


# ---------------------------------------------------------------------------- dense baselines (subgraphs)

use_baseline_source(lambda: tuple(s.name for s in dense_baselines()))  # EscalationConfig.baselines checks the registry


def comed_methods() -> tuple[str, ...]:
    """Every method a COMED run can report, in report order: its own, then each registered dense
    baseline's bench methods (``moa``, ``debate``, ``council``, ``council_top``, ``council_vote``...)."""
    return OWN_METHODS + tuple(m for spec in dense_baselines() for m in spec.bench.methods)


METHODS = comed_methods()
"""COMED's methods when this module loaded (:func:`comed_methods` reads the registry again)."""


# ---------------------------------------------------------------------------- scoring


def score(state: EscalationState, runtime: Runtime[EscalationContext]) -> dict[str, Any]:
    """COMED's final answer, and every method's answer and cost (``correct`` left ``None``: the
    runner scores, :func:`agora.tasks.scoring.score_results`)."""
    costs = state.get("costs") or {}
    anchor_info, decision = state["anchor"], state["decision"]
    probe_agrees = (state.get("probe") or {}).get("agrees")
    escalated = escalates(decision, probe_agrees)

    def result(answer: str | None, *steps: str, how: str | None = None) -> MethodResult:
        return MethodResult(answer=answer, correct=None, **total_cost([costs[s] for s in steps if s in costs]),
                            how=how if answer is not None else None)

    comed_steps = ["anchor"] + (["verify"] if decision == "verify" else []) + (["escalate"] if escalated else [])
    final = state["escalation"]["answer"] if escalated else anchor_info["answer"]
    final_how = state["escalation"].get("how") if escalated else anchor_info.get("how")
    methods = {"comed": result(final, *comed_steps, how=final_how),
               "anchor": result(anchor_info["answer"], "anchor", how=anchor_info.get("how"))}
    if state["route"]["routed"]:
        first = anchor_info["first"]
        methods["router_only"] = MethodResult(
            answer=first["answer"], correct=None,
            calls=1, samples=1 if costs.get("anchor", {}).get("samples") else 0,  # 0: the anchor's call failed
            completion_tokens=first["completion_tokens"], latency_s=first["latency_s"], how=first.get("how"))
        if costs.get("anchor", {}).get("shared_samples"):  # the anchor's samples came from the bench's shared pool
            r = methods["router_only"]
            methods["router_only"].update(shared_calls=1, shared_samples=r["samples"],
                                          shared_completion_tokens=r["completion_tokens"], shared_latency_s=r["latency_s"])
    methods.update(state.get("dense_methods") or {})  # the baselines', in the order they ran
    outcome = comed_outcome(decision, probe_agrees)
    emit("score", f"COMED {outcome}: {final} (anchor {anchor_info['answer']})", outcome=outcome)
    return {"methods": methods, "answer": final, "outcome": outcome}


# ---------------------------------------------------------------------------- graph


def build_escalation_graph() -> StateGraph:
    """The COMED graph with its baselines, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`EscalationInput`; output: :class:`EscalationOutput`; run-time context:
    :class:`EscalationContext` (pool, settings, router; defaults to the embedded pool, fixed anchor).
    """
    builder = ProtocolGraph(EscalationState, context_schema=EscalationContext,
                          input_schema=EscalationInput, output_schema=EscalationOutput)
    for name, node in [("route", route), ("anchor", anchor), ("decide", decide), ("accept", accept),
                       ("verify", verify), ("escalate", escalate), ("score", score)]:
        builder.add_node(name, node)
    dense = dense_baselines()
    names = [spec.name for spec in dense]
    for spec in dense:  # MoA, debate, the council, ...: each protocol as a subgraph (registry order)
        builder.add_node(spec.name, baseline_node(spec, EscalationContext, DECLARED_BASELINES))
    builder.add_edge(START, "route")
    builder.add_edge("route", "anchor")
    builder.add_edge("anchor", "decide")
    builder.add_conditional_edges("decide", after_decide, ["accept", "verify", "escalate"])
    builder.add_conditional_edges("verify", after_verify, ["accept", "escalate"])
    for node in ("accept", "escalate"):
        builder.add_conditional_edges(node, next_baseline(names, None, EscalationContext), [*names, "score"])
    for i, name in enumerate(names):
        if i + 1 < len(names):
            builder.add_conditional_edges(name, next_baseline(names, name, EscalationContext), [*names[i + 1:], "score"])
        else:
            builder.add_edge(name, "score")
    builder.add_edge("score", END)
    return builder


SPEC = ProtocolSpec(
    name="comed", graph_id="comed_escalation", module=__name__,
    build=build_escalation_graph, context=EscalationContext, config=EscalationConfig, input=EscalationInput,
    output=EscalationOutput, methods=METHODS, detail=comed_detail, cli=("run comed", "calibrate comed"),
    docs="comed.md",
    description=("COMED: route to an anchor, sample it N times, accept if self-consistent (and the router margin is "
                 "large), verify with a peer probe if ambiguous, escalate to peers who see the anchor's answer "
                 "otherwise; the registry's dense baselines (Mixture-of-Agents, debate, the LLM council) in the "
                 "same pool, every method cost-counted."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
