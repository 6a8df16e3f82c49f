"""A small LangGraph agent that answers with Agora's protocols, on models you bring.

Math questions go to ALIGN delegation, multiple-choice questions to COMED escalation; both
protocol graphs run as subgraphs (invoked from a node, so their events stream and checkpoint under
the parent's). The pool and settings travel in the app's runtime context, not in globals: a
``ModelPool`` of your own LangChain chat models (:func:`pool_of_chat_models`), or a built-in pool
name (``tiny``, ``default``) or a pool file, which the protocol graphs resolve themselves. The app
streams the protocols' progress events, records every protocol question in a trace database
(:class:`agora.graphs.recording.TraceRecorder`) and prints a report of the recorded runs.

    python examples/agent_app.py                          # the tiny built-in pool, traces in agent_app.db
    python examples/agent_app.py --pool default           # the embedded Qwen pool (slower, better)
    python examples/agent_app.py --openai-url http://127.0.0.1:8000/v1 --openai-model my-model
                                                          # your own model behind an OpenAI-compatible API

Then ``agora report runs --db agent_app.db``; ``agora train dpo --align --db agent_app.db ...`` trains
on the ALIGN questions.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.recording import TraceRecorder
from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.traces.run_list import run_rows
from agora.traces.store import TraceStore

ALIGN = build_delegation_graph().compile()
COMED = build_escalation_graph().compile()
_OPTION = re.compile(r"^\s*([A-J])[.)]\s", re.MULTILINE)

QUESTIONS = (
    "Mia has 4 bags with 5 marbles in each bag. How many marbles does she have?",
    "Which gas do plants absorb from the air for photosynthesis?\nA. Oxygen\nB. Nitrogen\n"
    "C. Carbon dioxide\nD. Helium",
)


@dataclass
class AppContext:
    pool: ModelPool | str | None = None
    """Models for both protocols: a ``ModelPool``, a built-in pool name or a pool file; ``None`` =
    the embedded pool."""
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
    # The protocol graph's own context type: an app's context object would be refused (one line).
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


def pool_of_chat_models(models: dict[str, BaseChatModel],
                        temperatures: dict[str, float] | None = None) -> ModelPool:
    """Your own LangChain chat models as an Agora pool (retried, traced sampling; any
    ``BaseChatModel``: ``ChatOpenAI``, ``ChatOllama``, a fake in tests). Give ALIGN and COMED two or
    more members: a pool of one model runs, but its agents and peers are all the same model.

    ``temperatures`` gives a member a sampling temperature of its own (``ModelSpec.temperature``),
    which overrides the protocol's. A chat model's own field (``ChatOpenAI(temperature=1.0)``)
    does not: the protocol sets the temperature of every request it makes."""
    temperatures = temperatures or {}
    return ModelPool([PoolMember(ModelSpec(name=name, backend="langchain", temperature=temperatures.get(name)), model)
                      for name, model in models.items()])


def run(context: AppContext, db: str | Path, run_id: str = "agent-app", questions: Iterable[str] = QUESTIONS,
        out=sys.stdout) -> TraceRecorder:
    """Answer ``questions`` with the app, printing the protocols' progress events as they stream, record
    every protocol question in ``db`` under ``<run_id>-align`` / ``<run_id>-comed``, then print the runs
    of ``db`` (as ``agora report runs`` lists them). Returns the recorder (its ``run_ids``, ``recorded``)."""
    app = build_app().compile()
    with TraceRecorder(db, run_id=run_id) as recorder:
        for question in questions:
            print(f"Q: {question.splitlines()[0]}", file=out)
            final: dict = {}
            # subgraphs=True: the protocol graphs' events too (without it a parent sees only its own nodes)
            for namespace, mode, chunk in app.stream({"question": question}, {"callbacks": [recorder]},
                                                     context=context, stream_mode=["custom", "updates"],
                                                     subgraphs=True):
                if mode == "custom":
                    print(f"   [{chunk['event']}] {chunk['message']}", file=out)
                elif not namespace:  # the app's own nodes: its state as it fills in
                    for update in chunk.values():
                        final.update(update or {})
            print(f"-> {final['protocol']}: {final['answer']}  ({final['explanation']})\n", file=out)
    print(f"traces in {db}:", file=out)
    for row in run_rows(TraceStore(db, readonly=True)):
        accuracy = "-" if row.accuracy is None else f"{100 * row.accuracy:.0f} %"
        print(f"  {row.run_id}  {row.protocol}  {row.status}  {row.questions} question(s)  accuracy {accuracy}",
              file=out)
    return recorder


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", default="tiny", help="built-in pool name (tiny, default) or a pool file")
    parser.add_argument("--openai-url", help="your own model: an OpenAI-compatible server's base URL")
    parser.add_argument("--openai-model", help="the model name to ask that server for")
    parser.add_argument("--db", default="agent_app.db", help="trace database: a SQLite file or a postgresql:// URL")
    parser.add_argument("--run-id", default="agent-app")
    args = parser.parse_args(argv)
    pool: ModelPool | str = args.pool
    if args.openai_url:  # a user-supplied chat model, as two members sampling at two temperatures
        from langchain_openai import ChatOpenAI  # pip install langchain-openai (yours to install)

        model = args.openai_model or "default"
        # max_retries=0: the pool retries, and logs and records every attempt; the client's own
        # retries would be invisible
        client = {"base_url": args.openai_url, "model": model, "api_key": "EMPTY", "max_retries": 0}
        pool = pool_of_chat_models({f"{model}-t0": ChatOpenAI(**client), f"{model}-t1": ChatOpenAI(**client)},
                                   temperatures={f"{model}-t0": 0.0, f"{model}-t1": 1.0})
    run(AppContext(pool=pool), args.db, args.run_id)


if __name__ == "__main__":
    main()
