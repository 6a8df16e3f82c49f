"""LLM council as a LangGraph state machine: members answer, rank each other's anonymised answers,
a chair writes the final answer (rules, ballots and prompts: :mod:`agora.agents.council`).

    START ─Send×n─▶ council_answer ─▶ council_collect ─Send×n─▶ council_review ─▶ council_chair
          ─▶ END

One ``Send`` per member runs ``council_answer`` (the member's first answer; from the bench's shared
candidate pool when the input carries one, :func:`agora.graphs.question.take_shared`).
``council_collect`` sends every member that answered the others' answers, shuffled by its own seeded
permutation and labelled ``Response A``, ``B``... (its own left out, no model names: 
:func:`agora.agents.council.ballot_order`); each ``council_review`` returns its ranking.
``council_chair`` aggregates the ballots (normalised Borda, :func:`agora.agents.council.aggregate`)
and shows the chair every first answer and the aggregate ranking.

Methods (``state["methods"]``): ``council`` (the chair's answer; cost: answers, ballots, chair),
``council_top`` (the top-ranked first answer; cost: answers and ballots: what the ranking alone
picks) and ``council_vote`` (the plurality of the first answers; cost: the answers). Each carries
``calls``, ``samples``, ``completion_tokens`` and ``latency_s`` (and the shared parts taken from a
bench's candidate pool). Review and chair calls carry ``partner`` (the members whose answers they read).

COMED runs it as a dense baseline through the registry (the spec's ``dense``: chair = COMED's anchor),
and ``agora bench`` reports its three methods beside MoA's and debate's.

Usage::

    from agora.graphs.council import build_council_graph, CouncilContext
    out = build_council_graph().compile().invoke({"question": "...", "gold": "7"}, context=CouncilContext(pool=my_pool))
    out["answer"], out["ranking"], out["methods"]["council_top"]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from agora.agents.council import ANSWER_SEED, CHAIR_SEED, REVIEW_SEED, CouncilConfig, aggregate, ballot_order
from agora.agents.council import chair_messages, chair_of, check_pool, council_members, parse_ranking
from agora.agents.council import review_messages, run_label, standings_table
from agora.agents.delegation import plurality
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import Cost, Request, add_costs, call_context, found, how_of, method_result, partner
from agora.graphs._calls import total_cost
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit, model_node, solo_answer_node, sync_async_node
from agora.graphs.question import as_problem, protocol_input, question_payload
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.state import MethodsOutput, MethodsState
from agora.graphs.spec import BenchRole, DenseBaseline, ProtocolSpec, RunCommand
from agora.models.pool import ModelPool

CouncilContext = protocol_context("CouncilContext", CouncilConfig, "Council settings: members, chair, sampling.")
CouncilInput = protocol_input("CouncilInput")
METHODS = ("council", "council_top", "council_vote")


class FirstAnswer(TypedDict):
    member: int
    """The member's position in the member list."""
    model: str
    answer: str | None
    how: str | None
    text: str


class Review(TypedDict):
    reviewer: int
    """The reviewing member."""
    model: str
    shown: list[int]
    """The members whose answers it ranked, in the order shown (``Response A`` first); never itself."""
    ranking: list[int]
    """The members it ranked, best first (those it left out are not listed)."""
    text: str


class CouncilStanding(TypedDict):
    member: int
    model: str
    borda: float
    """Mean normalised Borda points over the ballots that showed its answer (1 = always ranked first)."""
    mean_rank: float
    ballots: int


class CouncilOutput(MethodsOutput):
    """What the graph returns: the chair's ``answer``, the ``costs`` of the stages ``answer``,
    ``review`` and ``chair``, and the ``methods`` ``council``, ``council_top`` and ``council_vote``."""

    answers: list[FirstAnswer]
    """The members' first answers, in member order."""
    reviews: list[Review]
    """Every ballot, in reviewer order."""
    ranking: list[CouncilStanding]
    """The aggregate ranking, best first."""
    chair: str
    """The pool member that wrote the final answer."""


class CouncilState(CouncilInput, MethodsState, total=False):
    """Full state of one council question."""

    answers: Annotated[list[FirstAnswer], operator.add]
    reviews: Annotated[list[Review], operator.add]
    ranking: list[CouncilStanding]
    first_answers: list[str | None]
    """The members' first answers, in member order, once all are in (what the ballots rank)."""
    chair: str


class MemberTask(CouncilInput, total=False):
    """One ``Send`` payload: a member's first answer, or its ballot (``shown``: what it ranks)."""

    member: int
    model: str
    shown: list[int]
    texts: list[str]
    models: list[str]


def _config(runtime: Runtime) -> CouncilConfig:
    return context_as(runtime.context, CouncilContext).config


def _answers(state: CouncilState) -> list[FirstAnswer]:
    return sorted(state.get("answers") or [], key=lambda a: a["member"])


# ---------------------------------------------------------------------------- stage 1: first answers


def to_members(state: CouncilState, runtime: Runtime[CouncilContext]) -> list[Send]:
    """One ``Send`` per member (every pool model unless configured), with its shared candidates if any."""
    members = council_members(_config(runtime), pool_from(runtime.context, CouncilContext).names)
    return [Send("council_answer", MemberTask(**question_payload(state, m), member=i, model=m))
            for i, m in enumerate(members)]


def council_collect(state: CouncilState) -> dict[str, Any]:
    """Every first answer is in (the barrier before the ballots)."""
    answers = _answers(state)
    emit("council_answer", f"council first answers {[a['answer'] for a in answers]}",
         answers=[a["answer"] for a in answers])
    return {"first_answers": [a["answer"] for a in answers]}


# ---------------------------------------------------------------------------- stage 2: ballots


def to_reviewers(state: CouncilState, runtime: Runtime[CouncilContext]) -> list[Send] | str:
    """One ``Send`` per member that answered, with the *other* answers in its own seeded order."""
    cfg = _config(runtime)
    answers = {a["member"]: a for a in _answers(state)}
    base = question_payload(state)
    sends = []
    for i, a in answers.items():
        shown = ballot_order(i, list(answers), cfg.seed, base["question_id"])
        if shown:
            sends.append(Send("council_review", MemberTask(**base, member=i, model=a["model"], shown=shown,
                                                           texts=[answers[j]["text"] for j in shown],
                                                           models=[answers[j]["model"] for j in shown])))
    return sends or "council_chair"


def _review_request(task: MemberTask, runtime: Runtime[CouncilContext]) -> Request:
    problem = as_problem(task)
    cfg = _config(runtime)
    params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, REVIEW_SEED, agent=task["member"]),
                      temperature=cfg.review_temperature, max_tokens=cfg.review_max_tokens)
    return Request(pool_from(runtime.context, CouncilContext), task["model"],
                   review_messages(problem, task["texts"], cfg.shots), params,
                   call_context(problem, "council_review", "reviewer", agent=task["member"],
                                partner=partner(task["models"])))


def _council_review(task: MemberTask, model: str, samples: list, records: list[dict], cost: Cost) -> dict[str, Any]:
    """Stage 2: one member ranks the others' anonymised answers."""
    text = samples[0].text if samples else ""
    ranked = parse_ranking(text, len(task["shown"]))
    review = Review(reviewer=task["member"], model=model, shown=list(task["shown"]),
                    ranking=[task["shown"][p] for p in ranked], text=text)
    return {"reviews": [review], "costs": {"review": cost}, "calls": records}


# ---------------------------------------------------------------------------- stage 3: chair


def _standings(state: CouncilState) -> list[CouncilStanding]:
    answers = _answers(state)
    reviews = sorted(state.get("reviews") or [], key=lambda r: r["reviewer"])
    ballots = [(r["shown"], [r["shown"].index(m) for m in r["ranking"]]) for r in reviews]
    table = aggregate(ballots, [a["member"] for a in answers])
    return [CouncilStanding(**row) for row in standings_table(table, {a["member"]: a["model"] for a in answers})]


def _chair_request(state: CouncilState, runtime: Runtime[CouncilContext]) -> Request:
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, CouncilContext)
    answers = _answers(state)
    position = {a["member"]: i for i, a in enumerate(answers)}
    ranking = [(position[s["member"]], s["borda"]) for s in _standings(state)]
    params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, CHAIR_SEED))
    return Request(pool, chair_of(cfg, pool.names), chair_messages(problem, [a["text"] for a in answers], ranking,
                                                                   cfg.shots),
                   params, call_context(problem, "council_chair", "chair", partner=partner(a["model"] for a in answers)))


def _council_chair(state: CouncilState, model: str, samples: list, records: list[dict], cost: Cost) -> dict[str, Any]:
    """Stage 3: the chair reads every answer and the aggregate ranking and writes the final answer."""
    problem = as_problem(state)
    answer, how = found(samples[0].text if samples else None, problem)
    answers = _answers(state)
    standings = _standings(state)
    costs = add_costs(state.get("costs"), {"chair": cost})
    stages = {k: [costs[k]] if k in costs else [] for k in ("answer", "review")}
    top = next((a for s in standings for a in answers if a["member"] == s["member"]), None)
    vote = plurality([a["answer"] for a in answers])[0]
    methods = {  # unscored: the runner scores (agora.tasks.scoring)
        "council": method_result(answer, how, total_cost(costs.values())),
        "council_top": method_result(top["answer"] if top else None, top["how"] if top else None,
                                     total_cost(stages["answer"] + stages["review"])),
        "council_vote": method_result(vote, how_of(vote, [(a["answer"], a["how"]) for a in answers]),
                                      total_cost(stages["answer"])),
    }
    emit("council_chair", f"council chair {model} answered {answer} (top-ranked {top['answer'] if top else None})",
         answer=answer)
    return {"chair": model, "ranking": standings, "answer": answer, "how": how, "costs": {"chair": cost},
            "calls": records, "methods": methods}


def build_council_graph() -> StateGraph:
    """The council graph, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`CouncilInput`; output: :class:`CouncilOutput`; run-time context: :class:`CouncilContext`.
    """
    builder = ProtocolGraph(CouncilState, context_schema=CouncilContext, input_schema=CouncilInput,
                            output_schema=CouncilOutput)
    builder.add_node("council_answer", solo_answer_node(CouncilContext, ANSWER_SEED, "council_answer", "member",
                                                        who="member", into="answers", step="answer"))
    builder.add_node("council_collect", sync_async_node(council_collect))
    builder.add_node("council_review", model_node(_review_request, _council_review))
    builder.add_node("council_chair", model_node(_chair_request, _council_chair))
    builder.add_conditional_edges(START, to_members, ["council_answer"])
    builder.add_edge("council_answer", "council_collect")
    builder.add_conditional_edges("council_collect", to_reviewers, ["council_review", "council_chair"])
    builder.add_edge("council_review", "council_chair")
    builder.add_edge("council_chair", END)
    return builder


def council_detail(values: dict[str, Any]) -> dict[str, Any]:
    """What the runner stores in ``questions.detail`` for a council question: answers, ballots, ranking, chair."""
    return {"chair": values.get("chair"), "ranking": values.get("ranking"),
            "answers": [{k: a[k] for k in ("member", "model", "answer")} for a in values.get("answers") or []],
            "reviews": [{k: r[k] for k in ("reviewer", "model", "shown", "ranking")}
                        for r in values.get("reviews") or []]}


def comed_council(comed: Any, pool: ModelPool, anchor: str) -> CouncilContext:
    """The council as COMED's dense baseline: every pool model a member, COMED's anchor the chair,
    COMED's sampling, shots and seed (:class:`agora.agents.escalation.EscalationConfig`)."""
    return CouncilContext(pool, CouncilConfig(chair=anchor, temperature=comed.temperature, top_p=comed.top_p,
                                              max_tokens=comed.max_tokens, shots=comed.shots, seed=comed.seed))


_POOL = "the shared pool (k samples per model and question, drawn once)"

SPEC = ProtocolSpec(
    name="council", graph_id="council", module=__name__,
    build=build_council_graph, context=CouncilContext, config=CouncilConfig, input=CouncilInput,
    output=CouncilOutput, methods=METHODS, detail=council_detail,
    cli=("run council",), docs="council.md",
    run=RunCommand(
        short_help="LLM council: members answer, rank each other anonymously, a chair answers.",
        help="Each member answers every problem alone, ranks the other members' anonymised answers, and the "
             "chair writes the final answer from all answers and the aggregate (Borda) ranking; compare with "
             "the top-ranked answer (council_top) and the plurality of the first answers (council_vote).",
        check=check_pool, label=run_label, title="council"),
    bench=BenchRole(methods=METHODS, sharing={
        "council": "its own samples: one first answer per pool model, every member's ranking and the chair's answer",
        "council_top": "the council's first answers and rankings (the top-ranked first answer)",
        "council_vote": "the council's first answers (their plurality)"}, shared_sharing={
        "council": f"{_POOL}: one first answer per member (its model's first sample); adds every member's "
                   "ranking and the chair's answer",
        "council_top": f"{_POOL}: the members' first samples; adds the rankings (the top-ranked answer)",
        "council_vote": f"{_POOL}: the members' first samples (their plurality); adds nothing"}),
    description=("LLM council: every member answers alone, every member ranks the others' answers anonymised "
                 "(Response A, B... shuffled per reviewer, its own left out), the rankings are aggregated by "
                 "normalised Borda count, and a chair writes the final answer from all answers and the ranking; "
                 "the top-ranked answer and the plurality of the first answers are scored beside it."),
    dense=DenseBaseline(context=comed_council, order=30),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
