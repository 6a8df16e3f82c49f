"""A small LangGraph agent that answers with Agora's protocols.

Math questions go to ALIGN delegation, multiple-choice questions to COMED escalation; both
protocol graphs run as subgraphs (called from a node, so their events stream and checkpoint under
the parent's). The pool and settings travel in the app's runtime context, not in globals.

    python examples/agent_app.py            # one math and one multiple-choice question, embedded pool
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.models.pool import ModelPool
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph

ALIGN = build_delegation_graph().compile()
COMED = build_escalation_graph().compile()
_OPTION = re.compile(r"^\s*([A-J])[.)]\s", re.MULTILINE)


@dataclass
class AppContext:
    pool: ModelPool | None = None
    """Models for both protocols; ``None`` = the embedded pool."""
    align: DelegationConfig = field(default_factory=lambda: DelegationConfig(n_agents=2, k_samples=2, max_tokens=64))
    comed: EscalationConfig = field(default_factory=lambda: EscalationConfig(n_anchor=3, max_tokens=48, baselines=()))


class AppState(TypedDict, total=False):
    question: str
    """The user's question; multiple choice when it lists options as lines ``A. ...``."""
    protocol: str
    """``align`` or ``comed``, chosen by ``classify``."""
    answer: str | None
    explanation: str


def classify(state: AppState) -> dict:
    options = _OPTION.findall(state["question"])
    return {"protocol": "comed" if len(options) >= 2 else "align"}


def solve_math(state: AppState, runtime: Runtime[AppContext]) -> dict:
    ctx = runtime.context or AppContext()
    out = ALIGN.invoke({"question": state["question"], "kind": "math"},
                       context=DelegationContext(pool=ctx.pool, config=ctx.align))
    sel = out["selection"]
    return {"answer": out["answer"],
            "explanation": f"ALIGN: agent {sel['agent']} proposed it, U={sel['utility']:.2f}, "
                           f"{'accepted' if sel['accepted'] else 'argmax fallback'}"}


def solve_multiple_choice(state: AppState, runtime: Runtime[AppContext]) -> dict:
    ctx = runtime.context or AppContext()
    n_choices = len(_OPTION.findall(state["question"]))
    out = COMED.invoke({"question": state["question"], "kind": "mc", "n_choices": n_choices},
                       context=EscalationContext(pool=ctx.pool, config=ctx.comed))
    return {"answer": out["answer"], "explanation": f"COMED: {out['decision']}"}


def build_app() -> StateGraph:
    builder = StateGraph(AppState, context_schema=AppContext)
    builder.add_node("classify", classify)
    builder.add_node("solve_math", solve_math)
    builder.add_node("solve_multiple_choice", solve_multiple_choice)
    builder.add_edge(START, "classify")
    builder.add_conditional_edges("classify", lambda s: s["protocol"],
                                  {"align": "solve_math", "comed": "solve_multiple_choice"})
    builder.add_edge("solve_math", END)
    builder.add_edge("solve_multiple_choice", END)
    return builder


def main() -> None:
    app = build_app().compile()
    context = AppContext()
    for question in (
        "Mia has 4 bags with 5 marbles in each bag. How many marbles does she have?",
        "Which gas do plants absorb from the air for photosynthesis?\nA. Oxygen\nB. Nitrogen\n"
        "C. Carbon dioxide\nD. Helium",
    ):
        out = app.invoke({"question": question}, context=context)
        print(f"Q: {question.splitlines()[0]}\n-> {out['protocol']}: {out['answer']}  ({out['explanation']})\n")


if __name__ == "__main__":
    main()
