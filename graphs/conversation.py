"""A two-model conversation, to collect partner-conditioned responses (protocols.md §5).

    answer ──▶ reply ⟲ (until ``turns`` responses) ──▶ conclude ──▶ END

Speaker A answers the question; B replies to A's answer; A replies to B's; and so on for
``turns`` responses in all. Every call is traced with ``role="speaker"``, ``agent`` 0 (A) or 1
(B) and ``partner`` (the model whose answer the prompt showed; ``None`` for A's opening answer),
which is what :mod:`agora.traces.diversity` reads to condition a model's behaviour on its partner.

Each speaker sees the question (with the solver prompt and few-shot exemplars of
:func:`agora.agents.prompts.solver_messages`), its own earlier turns as its assistant messages and
the partner's turns as user messages asking for a reply. The method table compares ``opening``
(A's first answer) with ``converse`` (the last turn's answer).

Source of the analysis it feeds: Zhang et al., arXiv 2606.20632 (reconstructed; see
:mod:`agora.agents.panel`).

Usage::

    from agora.agents.conversation import ConversationConfig
    from agora.graphs.conversation import ConversationContext, build_conversation_graph
    graph = build_conversation_graph().compile()
    out = graph.invoke({"question": "Tom has 3 apples and buys 4 more. How many?"},
                       context=ConversationContext(pool=my_pool, config=ConversationConfig(turns=3)))
    [(t["speaker"], t["partner"], t["answer"]) for t in out["turns"]]
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Sequence

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agora.agents.conversation import ConversationConfig, conversation_messages
from agora.agents.seeds import call_seed, sampling
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit
from agora.graphs.question import as_problem, protocol_input
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import ProtocolSpec
from agora.models.studio_schema import studio_schema
from agora.tasks.answers import extract_answer
from agora.traces.schema import MethodResult

METHODS = ("converse", "opening")

ConversationContext = protocol_context("ConversationContext", ConversationConfig,
                                       "Conversation settings: speakers, turns, sampling.")
ConversationInput = protocol_input("ConversationInput", shared=False)


class Turn(TypedDict):
    """One response of the conversation."""

    turn: int
    """1-based position."""
    speaker: str
    partner: str | None
    """The model whose answer this turn replied to (``None`` for the opening answer)."""
    text: str
    """The response (empty when the model failed after its retries)."""
    answer: str | None
    """Answer extracted from ``text``."""
    call_id: str


@studio_schema()
class ConversationOutput(TypedDict):
    """What the graph returns."""

    answer: str | None
    """The last turn's answer."""
    turns: list[Turn]
    """Every response in order: speaker, the partner it replied to, text and extracted answer."""
    methods: dict[str, MethodResult]
    """``converse`` (last turn) and ``opening`` (A's first answer)."""


class ConversationState(ConversationInput, total=False):
    """Full state of one conversation."""

    speakers: list[str]
    """``[A, B]``, set by ``answer``."""
    turns: Annotated[list[Turn], operator.add]
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written by the runner)."""
    usage: Annotated[list[dict[str, Any]], operator.add]
    """Per turn ``{"completion_tokens", "latency_s"}``."""
    methods: dict[str, MethodResult]
    answer: str | None


def _config(runtime: Runtime) -> ConversationConfig:
    return context_as(runtime.context, ConversationContext).config


def _speak(state: ConversationState, runtime: Runtime[ConversationContext], speakers: Sequence[str],
           node: str) -> dict[str, Any]:
    """The next turn: the speaker whose turn it is answers, seeing the conversation so far."""
    problem = as_problem(state)
    cfg = _config(runtime)
    pool = pool_from(runtime.context, ConversationContext)
    history = state.get("turns") or []
    t = len(history) + 1
    agent = (t - 1) % 2
    speaker, partner = speakers[agent], (speakers[1 - agent] if history else None)
    params = sampling(cfg, seed=call_seed(cfg.seed, problem.id, "conversation.turn", step=t))
    samples, records = pool.sample(
        speaker, conversation_messages(problem, cfg.shots, history, speaker), params,
        context={"question_id": problem.id, "node": node, "role": "speaker", "agent": agent, "partner": partner})
    sample = samples[0] if samples else None
    text = sample.text if sample else ""
    turn = Turn(turn=t, speaker=speaker, partner=partner, text=text, call_id=sample.call_id if sample else "",
                answer=extract_answer(text, problem.kind, problem.n_choices or 4) if problem.kind != "open" else None)
    emit("turn", f"turn {t}: {speaker}" + (f" replied to {partner}" if partner else " answered") +
         (f" ({turn['answer']})" if turn["answer"] else ""), turn=t, speaker=speaker, partner=partner,
         answer=turn["answer"], failed=sample is None)
    usage = {"completion_tokens": sample.completion_tokens if sample else 0,
             "latency_s": sample.latency_s if sample else 0.0}
    return {"turns": [turn], "calls": records, "usage": [usage]}


# ---------------------------------------------------------------------------- nodes


def answer(state: ConversationState, runtime: Runtime[ConversationContext]) -> dict[str, Any]:
    """Speaker A answers the question alone."""
    problem = as_problem(state)
    speakers = list(_config(runtime).speakers(pool_from(runtime.context, ConversationContext)))
    return {"question_id": problem.id, "speakers": speakers, **_speak(state, runtime, speakers, "answer")}


def reply(state: ConversationState, runtime: Runtime[ConversationContext]) -> dict[str, Any]:
    """The next speaker replies to its partner's last turn."""
    return _speak(state, runtime, state["speakers"], "reply")


def more_turns(state: ConversationState, runtime: Runtime[ConversationContext]) -> str:
    """``reply`` until ``turns`` responses exist, then ``conclude``."""
    return "reply" if len(state.get("turns") or []) < _config(runtime).turns else "conclude"


def conclude(state: ConversationState) -> dict[str, Any]:
    """A's opening answer and the last turn's answer as methods (``correct`` left ``None``: the
    runner scores, :func:`agora.tasks.scoring.score_results`)."""
    turns, usage = state["turns"], state.get("usage") or []

    def result(turn: Turn, used: list[dict[str, Any]]) -> MethodResult:
        return MethodResult(answer=turn["answer"], correct=None, samples=len(used),
                            completion_tokens=sum(u["completion_tokens"] for u in used),
                            latency_s=sum(u["latency_s"] for u in used))

    methods = {"converse": result(turns[-1], usage), "opening": result(turns[0], usage[:1])}
    emit("conclude", f"opening answer {turns[0]['answer']}, final answer {turns[-1]['answer']} after "
         f"{len(turns)} turns",
         opening=turns[0]["answer"], answer=turns[-1]["answer"])
    return {"methods": methods, "answer": turns[-1]["answer"]}


# ---------------------------------------------------------------------------- graph


def build_conversation_graph() -> StateGraph:
    """The conversation graph, uncompiled.

    Input: :class:`ConversationInput`; output: :class:`ConversationOutput`; run-time context:
    :class:`ConversationContext` (defaults: embedded pool, its first two models, 3 turns).
    """
    builder = ProtocolGraph(ConversationState, context_schema=ConversationContext,
                          input_schema=ConversationInput, output_schema=ConversationOutput)
    builder.add_node("answer", answer)
    builder.add_node("reply", reply)
    builder.add_node("conclude", conclude)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "reply")
    builder.add_conditional_edges("reply", more_turns, ["reply", "conclude"])
    builder.add_edge("conclude", END)
    return builder


def conversation_detail(values: dict[str, Any]) -> dict[str, Any]:
    """What the runner stores in ``questions.detail``: each turn's speaker, partner and answer."""
    return {"turns": [{k: t[k] for k in ("turn", "speaker", "partner", "answer")} for t in values.get("turns") or []]}


SPEC = ProtocolSpec(
    name="converse", graph_id="conversation", module=__name__,
    build=build_conversation_graph, context=ConversationContext, config=ConversationConfig,
    input=ConversationInput, output=ConversationOutput, methods=METHODS, detail=conversation_detail,
    cli=("converse", "report diversity"), docs="conversation.md",
    description=("Two-model conversation for panel-diversity data: A answers, B replies to A's answer, A replies, "
                 "for N turns; every call traced with its partner (the model whose answer it saw)."),
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
