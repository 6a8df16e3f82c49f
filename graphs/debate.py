"""Multi-agent debate as a LangGraph state machine (Du et al., arXiv 2305.14325): agents answer,
read each other's answers and answer again; the last round's plurality is the answer.

    START ─Send×M─▶ debate_round ─▶ debate_tally ─┬─Send×A─▶ debate_round  (rounds left)
                                                  └─▶ debate_vote ─▶ END

Agent i plays model i mod |models| (``DebateConfig.models``, else the pool's). The first round is
independent: agents that play the same model share one request (one ``Send`` per distinct model,
n = its agents). Each later round sends one ``Send`` per agent, whose prompt shows the other agents'
latest answers. ``debate_tally`` collects a round (in agent order); ``debate_vote`` scores.

Methods (``state["methods"]``): ``debate`` (plurality of the last round; cost: every round) and
``first_round_vote`` (plurality of the independent first round, its cost only: what debating adds
over voting). Every call after the first round carries ``partner`` (the agents' models it saw).

COMED embeds this graph as its debate baseline (:mod:`agora.graphs.escalation`).

Usage::

    from agora.graphs.debate import build_debate_graph, DebateContext
    out = build_debate_graph().compile().invoke({"question": "...", "gold": "7"}, context=DebateContext(pool=my_pool))
    out["answer"], out["rounds"], out["methods"]["debate"]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from agora.agents.debate import DebateConfig, agent_models, debate_messages, run_label
from agora.agents.delegation import plurality
from agora.agents.prompts import solver_messages
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import Cost, Request, call_context, found, how_of, method_result, partner, total_cost
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit, model_node, sync_async_node
from agora.graphs.question import as_problem, protocol_input, question_payload, take_shared
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.state import MemberAnswer, MethodsOutput, MethodsState
from agora.graphs.spec import BenchRole, DenseBaseline, ProtocolSpec, RunCommand

METHODS = ("debate", "first_round_vote")


DebateContext = protocol_context("DebateContext", DebateConfig, "Debate settings: agents, rounds, models, sampling.")
DebateInput = protocol_input("DebateInput")


class DebateOutput(MethodsOutput):
    """What the graph returns: the last round's plurality as ``answer``, the ``costs`` of each round
    (``round_1``, ``round_2``...), and the ``methods`` ``debate`` (the last round's plurality) and
    ``first_round_vote``."""

    rounds: list[list[MemberAnswer]]
    """Each round's answers, in agent order (an agent whose call failed is missing)."""


class DebateState(DebateInput, MethodsState, total=False):
    """Full state of one debate."""

    answers: Annotated[list[dict[str, Any]], operator.add]
    """Every agent's answer of every round (with its ``round``), appended by the requests in parallel."""
    rounds: Annotated[list[list[MemberAnswer]], operator.add]
    """Appended by ``debate_tally``, one list per finished round."""


class DebaterTask(DebateInput, total=False):
    """One request's ``Send`` payload: the round, the model, the agents it answers for (one, after
    the first round), its seed offset and the answers it is shown."""

    round: int
    model: str
    agents: list[int]
    offset: int
    others: list[dict[str, Any]]


def _config(runtime: Runtime) -> DebateConfig:
    return context_as(runtime.context, DebateContext).config


def _tasks(state: DebateState, runtime: Runtime[DebateContext]) -> list[Send]:
    """The requests of the next round: per distinct model in the first, per agent afterwards."""
    models = agent_models(_config(runtime), pool_from(runtime.context, DebateContext).names)
    rounds = state.get("rounds") or []
    r = len(rounds)
    if r == 0:
        return [Send("debate_round", DebaterTask(**question_payload(state, model), round=0, model=model, offset=10 * j,
                                                 agents=[i for i, m in enumerate(models) if m == model]))
                for j, model in enumerate(dict.fromkeys(models))]
    # later rounds draw new answers (no shared candidates in their payloads)
    previous = {a["agent"]: a for a in rounds[-1]}
    return [Send("debate_round", DebaterTask(**question_payload(state), round=r, model=model, offset=i, agents=[i],
                                             others=[{"model": previous[j]["model"], "text": previous[j]["text"]}
                                                     for j in sorted(previous) if j != i]))
            for i, model in enumerate(models)]


def first_round(state: DebateState, runtime: Runtime[DebateContext]) -> list[Send]:
    return _tasks(state, runtime)


def next_round(state: DebateState, runtime: Runtime[DebateContext]) -> list[Send] | str:
    """Another round while rounds are left, else the vote."""
    if len(state.get("rounds") or []) < _config(runtime).rounds:
        return _tasks(state, runtime)
    return "debate_vote"


def _request(task: DebaterTask, runtime: Runtime[DebateContext]) -> Request:
    problem = as_problem(task)
    cfg = _config(runtime)
    r, agents = task["round"], task["agents"]
    params = sampling(cfg, n=len(agents),
                      seed=call_seed(cfg.seed, problem.id, "debate.round", agent=task["offset"], step=r))
    if r == 0:
        messages = solver_messages(problem, cfg.shots)
        context = call_context(problem, "debate_round", "debater", agent=agents[0], round=r)
    else:
        others = task.get("others") or []
        messages = debate_messages(problem, [o["text"] for o in others], cfg.shots)
        context = call_context(problem, "debate_round", "debater", agent=agents[0], round=r,
                               partner=partner(o["model"] for o in others))
    return Request(pool_from(runtime.context, DebateContext), task["model"], messages, params, context)


def _debate_round(task: DebaterTask, model: str, samples: list, records: list[dict], cost: Cost) -> dict[str, Any]:
    """One request of a round: alone in the first round (or from the shared candidates), after the
    others' answers later."""
    problem = as_problem(task)
    answers = []
    for agent, sample in zip(task["agents"], samples):
        answer, how = found(sample.text, problem)
        answers.append({"round": task["round"], "agent": agent, "model": model, "answer": answer, "how": how,
                        "text": sample.text})
    return {"answers": answers, "costs": {f"round_{task['round'] + 1}": cost}, "calls": records}


def _shared_first(task: DebaterTask) -> list | None:
    """A first-round request answered from the bench's shared candidates (its model's first
    samples, one per agent that plays it); ``None`` otherwise."""
    return take_shared(task, task["model"], len(task["agents"])) if task["round"] == 0 else None


def debate_tally(state: DebateState) -> dict[str, Any]:
    """Collect the round just answered, in agent order."""
    r = len(state.get("rounds") or [])
    answers = sorted((a for a in state.get("answers") or [] if a["round"] == r), key=lambda a: a["agent"])
    current = [MemberAnswer(**{k: a[k] for k in MemberAnswer.__annotations__}) for a in answers]
    emit("debate_round", f"debate round {r + 1}: {[a['answer'] for a in current]}", round=r + 1)
    return {"rounds": [current]}


def debate_vote(state: DebateState) -> dict[str, Any]:
    """The last round's plurality (``debate``) and the first round's (``first_round_vote``)."""
    rounds, costs = state.get("rounds") or [[]], state.get("costs") or {}

    def vote(answers: list[MemberAnswer]) -> tuple[str | None, str | None]:
        winner = plurality([a["answer"] for a in answers])[0]
        return winner, how_of(winner, [(a["answer"], a["how"]) for a in answers])

    answer, how = vote(rounds[-1])
    first, first_how = vote(rounds[0])
    methods = {"debate": method_result(answer, how, total_cost(costs.values())),  # unscored: the runner scores
               "first_round_vote": method_result(first, first_how, total_cost([costs[k] for k in ("round_1",) if k in costs]))}
    emit("debate_vote", f"debate answer {answer} after {len(rounds)} rounds (first round {first})", answer=answer)
    return {"answer": answer, "how": how, "methods": methods}


def build_debate_graph() -> StateGraph:
    """The debate graph, uncompiled. Compile it with or without a checkpointer.

    Input: :class:`DebateInput`; output: :class:`DebateOutput`; run-time context: :class:`DebateContext`.
    """
    builder = ProtocolGraph(DebateState, context_schema=DebateContext, input_schema=DebateInput,
                          output_schema=DebateOutput)
    builder.add_node("debate_round", model_node(_request, _debate_round, shared=_shared_first))
    builder.add_node("debate_tally", sync_async_node(debate_tally))
    builder.add_node("debate_vote", sync_async_node(debate_vote))
    builder.add_conditional_edges(START, first_round, ["debate_round"])
    builder.add_edge("debate_round", "debate_tally")
    builder.add_conditional_edges("debate_tally", next_round, ["debate_round", "debate_vote"])
    builder.add_edge("debate_vote", END)
    return builder


def debate_detail(values: dict[str, Any]) -> dict[str, Any]:
    """What the runner stores in ``questions.detail`` for a debate: each round's agents and answers."""
    return {"rounds": [[{k: a[k] for k in ("agent", "model", "answer")} for a in r] for r in values.get("rounds") or []]}


SPEC = ProtocolSpec(
    name="debate", graph_id="debate", module=__name__,
    build=build_debate_graph, context=DebateContext, config=DebateConfig, input=DebateInput, output=DebateOutput,
    methods=METHODS, detail=debate_detail, cli=("run debate",), docs="debate.md",
    run=RunCommand(
        short_help="Multi-agent debate: agents answer, read each other, answer again; beside a first-round vote.",
        help="Agents answer each problem alone, then read the others' answers and answer again for each later "
             "round; the last round's plurality is compared with the first round's (first_round_vote).",
        check=agent_models, label=run_label, title="debate"),
    bench=BenchRole(methods=("debate",), sharing={"debate": "its own samples: every agent in every round"},
                    shared_sharing={"debate": "the shared pool (k samples per model and question, drawn once): the first round "
                                              "(its agents' models' first samples); adds every later round"}),
    dense=DenseBaseline(context=lambda comed, pool, anchor: DebateContext(pool, comed.debate_config()),
                        keep=lambda out: out.get("rounds") or [], order=20),
    description=("Multi-agent debate: agents (pool models in turn) answer alone, then for each later round read "
                 "the other agents' latest answers and answer again (one Send per request, in parallel); the "
                 "last round's plurality is the answer, the first round's vote is scored beside it."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
