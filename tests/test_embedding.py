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


# ---------------------------------------------------------------------------- traces from an embedded run

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from agora.agents.escalation import EscalationConfig, EscalationThresholds  # noqa: E402
from agora.graphs.escalation import EscalationContext, build_escalation_graph  # noqa: E402
from agora.graphs.recording import TraceRecorder  # noqa: E402
from agora.graphs.runner import run_protocol  # noqa: E402
from agora.tasks.problem import Problem  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402
from agora.training.datasets import align_pairs  # noqa: E402

QUESTION = Problem(id="q1", question="What is 4 + 5?", gold="9", kind="math")


def parent_app(node_graph, context_schema=None):
    """An app whose one node is a protocol graph (a subgraph, as in the tests above)."""

    class AppState(TypedDict, total=False):
        question: str
        question_id: str
        gold: str | None
        kind: str
        n_choices: int
        answer: str | None

    parent = StateGraph(AppState, context_schema=context_schema)
    parent.add_node("protocol", node_graph)
    parent.add_edge(START, "protocol")
    parent.add_edge("protocol", END)
    return parent.compile()


def comparable(rows: list[dict], drop=("run_id", "pair_id", "created_at", "finished_at", "started_at", "call_id",
                                       "wall_s", "latency_s", "idx", "messages_of")) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def split_pool() -> ModelPool:
    """Model a answers 9 (right), model b 4 (wrong): ALIGN's two proposals make one preference pair."""
    return ModelPool.from_chat_models({"a": ScriptedChatModel(responses=["The answer is 9."], cycle=True),
                                       "b": ScriptedChatModel(responses=["The answer is 4."], cycle=True)})


def test_an_embedded_align_run_is_recorded_like_a_cli_run_and_feeds_dpo(trace_db):
    db = trace_db  # a SQLite file, or a postgresql:// URL (an app's workers sharing one trace store)
    pool = split_pool()
    with TraceRecorder(db, run_id="app") as recorder:
        app = parent_app(build_delegation_graph().compile(), DelegationContext)
        out = app.invoke({"question": QUESTION.question, "question_id": "q1", "gold": "9"},
                         {"callbacks": [recorder]}, context=DelegationContext(pool, CONFIG))
    assert recorder.run_ids == {"align": "app-align"} and recorder.recorded == {"align": 1}

    pool = split_pool()  # the same question through the runner (what `agora run align` does)
    store = TraceStore(db)
    run_protocol("align", [QUESTION], store=store, run_id="cli", context=DelegationContext(pool, CONFIG),
                 config=CONFIG, pool_description=pool.describe(), dataset={"path": "q", "format": "jsonl"})

    # the same rows: question, results, model calls, and the DPO pairs drawn from them
    embedded, cli = store.questions("app-align"), store.questions("cli")
    assert comparable(embedded) == comparable(cli) and embedded[0]["answer"] == out["answer"]
    assert comparable(store.results("app-align")) == comparable(store.results("cli"))
    calls = store.calls("app-align")
    volatile = ("run_id", "call_id", "request_id", "created_at", "latency_s", "messages_of")  # per call
    assert len(calls) == 4 and comparable(calls, drop=volatile) == comparable(store.calls("cli"), drop=volatile)
    pairs = {p["run_id"]: p for p in align_pairs(db)}
    assert set(pairs) == {"app-align", "cli"}  # agent 0 proposed 9 (correct), agent 1 4: one pair per run
    assert comparable([pairs["app-align"]]) == comparable([pairs["cli"]])
    assert pairs["app-align"]["chosen"] == "The answer is 9." and pairs["app-align"]["rejected"] == "The answer is 4."

    # `agora report runs` lists it like the CLI run
    report = subprocess.run([sys.executable, "-m", "agora.cli", "report", "runs", "--db", str(db), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    rows = {r["run_id"]: r for r in map(json.loads, report.stdout.splitlines())}
    assert (rows["app-align"]["protocol"], rows["app-align"]["status"], rows["app-align"]["questions"]) == \
        ("align", "finished", 1)
    assert rows["app-align"]["accuracy"] == rows["cli"]["accuracy"] == 1.0


def test_an_embedded_comed_run_with_its_moa_baseline_is_one_comed_question(tmp_path):
    def respond(chat, index):
        return "The answer is C."

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond), "b": ScriptedChatModel(respond=respond)})
    config = EscalationConfig(thresholds=EscalationThresholds(tau_hi=0.7, tau_lo=0.34), n_anchor=2, shots=0,
                              baselines=("moa",))
    mc = {"question": "Which gas?\nA. O2\nB. N2\nC. CO2\nD. He", "question_id": "mc1", "gold": "C", "kind": "mc",
          "n_choices": 4}
    with TraceRecorder(tmp_path / "t.db", run_id="app") as recorder:
        out = build_escalation_graph().compile().invoke(mc, {"callbacks": [recorder]},
                                                        context=EscalationContext(pool, config))
    assert out["methods"]["moa"]["answer"] == "C"
    assert recorder.run_ids == {"comed": "app-comed"} and recorder.recorded == {"comed": 1}  # MoA inside: not its own
    store = TraceStore(tmp_path / "t.db")
    [question] = store.questions("app-comed")
    assert question["answer"] == "C" and question["correct"] == 1
    assert {r["method"] for r in store.results("app-comed")} == {"comed", "anchor", "moa"}
    # 2 anchor samples, then MoA: 2 proposers and the aggregator, each call once (none counted twice)
    assert len(store.calls("app-comed")) == 5
