"""SLM-MUX as a LangGraph state machine: every member samples alone, the member whose own samples
agree most answers (Wang et al., arXiv 2510.05077; the rules are :mod:`agora.agents.slm_mux`).

    START ─Send×n─▶ mux_sample ─▶ mux_select ─▶ END

One ``Send`` per member (every pool model, or ``SLMMuxConfig.models``) runs ``mux_sample``: one
request of ``k`` samples from that member, on the solver prompt, seen by no other member.
``mux_select`` computes each member's plurality answer and confidence (the share of its ``k``
samples on it) and picks the most confident member, ties by accuracy on dev questions
(``dev_accuracy``, ``dev_run``), then by order.

Methods (``state["methods"]``), all from the same ``n·k`` samples: ``slm-mux`` (the selected
member's plurality answer), ``mux_vote`` (the plurality over every sample pooled: what selection
is compared with) and ``mux_top`` (the plurality of the member with the best dev accuracy: a static
choice of member; cost: its ``k`` samples). COMED embeds this graph as a dense baseline.

Usage::

    from agora.graphs.slm_mux import SLMMuxContext, build_slm_mux_graph
    out = build_slm_mux_graph().compile().invoke({"question": "...", "gold": "7"}, context=SLMMuxContext(pool=my_pool))
    out["answer"], out["selection"], out["methods"]["slm-mux"]
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any

from langgraph.graph import END, START
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from agora.agents.prompts import solver_messages
from agora.agents.seeds import call_seed, sampling
from agora.agents.slm_mux import MEMBER, MemberConfidence, MuxSelection, SLMMuxConfig, check_pool, member_confidence
from agora.agents.slm_mux import members, mux_select, run_label, top_member, vote_all
from agora.graphs._calls import Cost, Request, call_context, found, method_result, total_cost
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit, model_node, sync_async_node
from agora.graphs.question import as_problem, protocol_input, question_payload, take_shared
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import BenchRole, DenseBaseline, ProtocolSpec, RunCommand, detail_keys
from agora.graphs.state import MethodsOutput, MethodsState
from agora.models.studio_schema import studio_schema
from agora.models.pool import ModelPool
from agora.traces.reliability import DevRunError, reliabilities

METHODS = ("slm-mux", "mux_vote", "mux_top")

SLMMuxContext = protocol_context("SLMMuxContext", SLMMuxConfig, "SLM-MUX settings: members, k, dev accuracy, sampling.")
SLMMuxInput = protocol_input("SLMMuxInput")


@studio_schema()
class MemberSamples(TypedDict):
    """One member's ``k`` samples."""

    member: int
    """The member's position (the last tie-breaker)."""
    model: str
    answers: list[str | None]
    """Each sample's answer (``None``: none found), in sample order."""
    hows: list[str | None]
    """How each answer was found (``marker``, ``boxed``, ...)."""
    texts: list[str]
    cost: Cost
    """Its request's cost (shared when taken from the bench's shared candidates)."""


@studio_schema(docs={"answer": "The selected member's plurality answer.",
                     "how": "How that answer was found in the member's samples (``marker``, ``boxed``, ...).",
                     "costs": "Cost of each step: ``sample``.",
                     "methods": "``slm-mux``, ``mux_vote`` (plurality over every sample) and ``mux_top`` (the member "
                                "with the best dev accuracy): answer, correctness, cost."})
class SLMMuxOutput(MethodsOutput):
    """What the graph returns."""

    confidences: list[MemberConfidence]
    """Each member's plurality answer, confidence (share of its k samples) and dev accuracy, in member order."""
    selection: MuxSelection
    """The selected member, its answer and confidence, and whether a confidence tie was broken."""


class SLMMuxState(SLMMuxInput, MethodsState, total=False):
    """Full state of one SLM-MUX question."""

    samples: Annotated[list[MemberSamples], operator.add]
    """Appended by the members in parallel."""
    confidences: list[MemberConfidence]
    selection: MuxSelection


class MemberTask(SLMMuxInput, total=False):
    """One member's ``Send`` payload: the question and who samples."""

    member: int
    model: str
    share: int
    """Members before this one that play the same model: it takes that model's shared samples
    ``share·k .. share·k + k − 1`` (``agora bench``'s shared candidates)."""
    k_samples: int
    """Its samples k (the settings')."""


def _config(runtime: Runtime) -> SLMMuxConfig:
    return context_as(runtime.context, SLMMuxContext).config


def to_members(state: SLMMuxState, runtime: Runtime[SLMMuxContext]) -> list[Send]:
    """One ``Send`` per member: the members sample in parallel, none sees another's output."""
    cfg = _config(runtime)
    who = members(cfg, pool_from(runtime.context, SLMMuxContext).names)
    return [Send("mux_sample", MemberTask(**question_payload(state, m), member=i, model=m, share=who[:i].count(m),
                                          k_samples=cfg.k_samples))
            for i, m in enumerate(who)]


def _sample_request(task: MemberTask, runtime: Runtime[SLMMuxContext]) -> Request:
    problem = as_problem(task)
    cfg = _config(runtime)
    params = sampling(cfg, n=cfg.k_samples, seed=call_seed(cfg.seed, problem.id, MEMBER, agent=task["member"]))
    return Request(pool_from(runtime.context, SLMMuxContext), task["model"], solver_messages(problem, cfg.shots),
                   params, call_context(problem, "mux_sample", "member", agent=task["member"]))


def _sampled(task: MemberTask, model: str, samples: list, records: list[dict], cost: Cost) -> dict[str, Any]:
    """The member draws its k samples alone (or takes them from the bench's shared candidates)."""
    problem = as_problem(task)
    found_ = [found(s.text, problem) for s in samples]
    mine = MemberSamples(member=task["member"], model=model, answers=[a for a, _ in found_],
                         hows=[h for _, h in found_], texts=[s.text for s in samples], cost=cost)
    emit("mux_sample", f"member {task['member']} ({model}) sampled {mine['answers']}", member=task["member"],
         model=model, answers=mine["answers"])
    return {"samples": [mine], "costs": {"sample": cost}, "calls": records}


def _how(answer: str | None, votes: list[MemberSamples]) -> str | None:
    return next((h for v in votes for a, h in zip(v["answers"], v["hows"]) if answer is not None and a == answer), None)


def mux_select_step(state: SLMMuxState, runtime: Runtime[SLMMuxContext]) -> dict[str, Any]:
    """Each member's confidence, the most confident member's answer, and the baselines on the same
    samples (each method's ``correct`` is left ``None``: the runner scores)."""
    cfg = _config(runtime)
    votes = sorted(state.get("samples") or [], key=lambda v: v["member"])
    accuracy = reliabilities(cfg.dev_accuracy, cfg.dev_db, cfg.dev_run) if (cfg.dev_accuracy or cfg.dev_run) else {}
    confidences = [member_confidence(v, accuracy) for v in votes]
    selection = mux_select(confidences)
    every = total_cost(v["cost"] for v in votes)
    chosen = next((v for v in votes if v["member"] == selection["member"]), None)
    vote = vote_all(votes)[0]
    top = top_member(confidences)
    top_votes = next((v for v in votes if top is not None and v["member"] == top["member"]), None)
    methods = {
        "slm-mux": method_result(selection["answer"], _how(selection["answer"], [chosen] if chosen else []), every),
        "mux_vote": method_result(vote, _how(vote, votes), every),
        "mux_top": method_result(top["answer"] if top else None, _how(top["answer"] if top else None,
                                                                      [top_votes] if top_votes else []),
                                 top_votes["cost"] if top_votes else total_cost([])),
    }
    tie = " (confidence tie: dev accuracy, then order)" if selection["tie"] else ""
    emit("mux_select", f"SLM-MUX selected member {selection['member']} ({selection['model']}): "
         f"{selection['answer']} at confidence {selection['confidence']:.2f}{tie}", **selection)
    return {"confidences": confidences, "selection": selection, "answer": selection["answer"],
            "how": methods["slm-mux"]["how"], "methods": methods}


def build_slm_mux_graph() -> ProtocolGraph:
    """The SLM-MUX graph, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`SLMMuxInput`; output: :class:`SLMMuxOutput`; run-time context: :class:`SLMMuxContext`.
    """

    def shared(task: MemberTask) -> list | None:  # this member's k shared samples, or None: draw them
        k = task["k_samples"]
        return take_shared(task, task["model"], k, start=task.get("share", 0) * k)

    builder = ProtocolGraph(SLMMuxState, context_schema=SLMMuxContext, input_schema=SLMMuxInput,
                            output_schema=SLMMuxOutput)
    builder.add_node("mux_sample", model_node(_sample_request, _sampled, shared))
    builder.add_node("mux_select", sync_async_node(mux_select_step))
    builder.add_conditional_edges(START, to_members, ["mux_sample"])
    builder.add_edge("mux_sample", "mux_select")
    builder.add_edge("mux_select", END)
    return builder


def check_settings(config: SLMMuxConfig, names: Sequence[str]) -> None:
    """``agora run slm-mux``'s settings check, before the run row is created and any model asked:
    the members are in the pool (:func:`~agora.agents.slm_mux.check_pool`) and the dev run, when
    named, gives accuracies (it is read again, from the per-process cache, at each selection).

    Raises:
        ValueError: a member not in the pool, named.
        DevRunError: the dev run's database or run is missing, or it has no scored sample (one line,
            ``SLMMuxConfig.dev_db: ...`` or ``SLMMuxConfig.dev_run: ...``).
    """
    check_pool(config, names)
    if config.dev_run:
        try:
            reliabilities(config.dev_accuracy, config.dev_db, config.dev_run)
        except DevRunError as exc:  # named by the setting at fault (the default database: the dev run's)
            field = exc.field if config.dev_db is not None else "dev_run"
            raise DevRunError(f"SLMMuxConfig.{field}: {exc}", field) from None


def comed_slm_mux(comed: Any, pool: ModelPool, anchor: str) -> Any:
    """SLM-MUX as COMED's dense baseline: every pool model a member, ``k`` = COMED's ``N`` anchor
    samples, COMED's sampling, shots and seed (no dev accuracy: ties go by order)."""
    return SLMMuxContext(pool, SLMMuxConfig(k_samples=comed.n_anchor, temperature=comed.temperature, top_p=comed.top_p,
                                            max_tokens=comed.max_tokens, shots=comed.shots, seed=comed.seed))


SPEC = ProtocolSpec(
    name="slm-mux", graph_id="slm_mux", module=__name__,
    build=build_slm_mux_graph, context=SLMMuxContext, config=SLMMuxConfig, input=SLMMuxInput, output=SLMMuxOutput,
    methods=METHODS, detail=detail_keys("confidences", "selection"),
    cli=("run slm-mux",), docs="slm-mux.md",
    run=RunCommand(
        short_help="SLM-MUX: every member samples k times alone; the member whose samples agree most answers.",
        help="Each member draws k samples of every problem alone; the member whose own samples agree most "
             "(confidence = share of its samples on its plurality answer) answers, ties going to the better "
             "accuracy on dev questions (--dev-accuracy, or --dev-run in --dev-db), then to the earlier member; "
             "compare with the plurality over every sample (mux_vote) and the most accurate member alone (mux_top).",
        check=check_settings, label=run_label, title="SLM-MUX"),
    bench=BenchRole(methods=("slm-mux", "mux_vote"), sharing={
        "slm-mux": "its own samples: k per pool model (COMED's N), the most self-consistent member's plurality",
        "mux_vote": "SLM-MUX's samples (the plurality over all of them)"}, shared_sharing={
        "slm-mux": "the shared pool (k samples per model and question, drawn once): each member's first k samples "
                   "when the pool holds them (else it draws its own)",
        "mux_vote": "SLM-MUX's samples from the shared pool (the plurality over all of them)"}),
    dense=DenseBaseline(context=comed_slm_mux, order=40),
    description=("SLM-MUX: every member draws k samples alone (one Send each, in parallel); the member whose own "
                 "samples agree most answers with its plurality answer, confidence ties broken by accuracy on dev "
                 "questions, then member order; the plurality over all samples and the most accurate member alone "
                 "are scored beside it."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
