"""Using the protocol graphs from another LangGraph app: subgraph, streaming, checkpointed resume."""

import operator
import sqlite3
from typing import Annotated

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.agents.delegation import DelegationConfig
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.graphs.delegation import DelegationContext, build_delegation_graph


def pool_of(fail_first: bool = False):
    state = {"armed": fail_first}

    class Crash(BaseException):
        """Not an Exception: the pool does not retry it, the whole run stops (like a killed process)."""

    def b(chat, index):
        if state["armed"]:
            state["armed"] = False
            raise Crash
        return "The answer is 9."

    pool = ModelPool.from_chat_models({
        "a": ScriptedChatModel(responses=["The answer is 9.", "The answer is 4."], cycle=True),
        "b": ScriptedChatModel(respond=b),
    })
    return pool, Crash


CONFIG = DelegationConfig(n_agents=2, k_samples=2, tau=0.5)


def test_delegation_graph_as_a_subgraph_node_of_a_parent_app():
    class AppState(TypedDict, total=False):
        question: str
        answer: str | None
        log: Annotated[list[str], operator.add]

    def route(state: AppState):
        return {"log": ["routing to ALIGN"]}

    parent = StateGraph(AppState, context_schema=DelegationContext)
    parent.add_node("route", route)
    parent.add_node("align", build_delegation_graph().compile())
    parent.add_edge(START, "route")
    parent.add_edge("route", "align")
    parent.add_edge("align", END)
    pool, _ = pool_of()
    out = parent.compile().invoke({"question": "What is 4 + 5?"}, context=DelegationContext(pool, CONFIG))
    assert out["answer"] == "9" and out["log"] == ["routing to ALIGN"]


def test_output_schema_is_respected():
    pool, _ = pool_of()
    out = build_delegation_graph().compile().invoke({"question": "What is 4 + 5?", "gold": "9"},
                                                    context=DelegationContext(pool, CONFIG))
    assert set(out) == {"answer", "selection", "proposals", "methods"}
    assert out["methods"]["align"]["correct"] is True


def test_stream_yields_custom_progress_events_and_updates():
    pool, _ = pool_of()
    graph = build_delegation_graph().compile()
    events, updates = [], []
    for _ns, mode, chunk in graph.stream({"question": "What is 4 + 5?"}, context=DelegationContext(pool, CONFIG),
                                         stream_mode=["custom", "updates"], subgraphs=True):
        (events if mode == "custom" else updates).append(chunk)
    kinds = [e["event"] for e in events]
    assert kinds.count("proposal") == 2 and kinds[0] == "delegate" and kinds[-1] == "selection"
    proposal = next(e for e in events if e["event"] == "proposal" and e["agent"] == 1)
    assert proposal["message"] == "agent 1 proposed 9 (vote share 1.00)"
    assert any("principal_select" in u for u in updates)


def test_resume_after_a_crash_gives_the_uninterrupted_final_state(tmp_path):
    pool, _ = pool_of()
    reference = build_delegation_graph().compile().invoke({"question": "What is 4 + 5?"},
                                                          context=DelegationContext(pool, CONFIG))

    pool, crash = pool_of(fail_first=True)
    conn = sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False)
    graph = build_delegation_graph().compile(checkpointer=SqliteSaver(conn))
    thread = {"configurable": {"thread_id": "t1"}}
    with pytest.raises(crash):
        graph.invoke({"question": "What is 4 + 5?"}, thread, context=DelegationContext(pool, CONFIG))
    assert graph.get_state(thread).next  # stopped mid-graph
    resumed = graph.invoke(None, thread, context=DelegationContext(pool, CONFIG))
    for key in ("answer", "selection", "methods"):
        assert resumed[key] == reference[key]
    assert [(p["agent"], p["answer"], p["signal"]) for p in resumed["proposals"]] == \
           [(p["agent"], p["answer"], p["signal"]) for p in reference["proposals"]]
    conn.close()
