"""Scorers apart from graphs (issue 30, item 2): protocol graphs return answers per method with
``correct`` left ``None`` and hold no gold in their state or checkpoints; the runner scores every
method from the problem with the one scorer (agora.tasks.scoring), as replay does."""

import json
import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agora.agents.debate import DebateConfig
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.moa import MoAConfig
from agora.graphs import delegation
from agora.graphs.question import problem_input
from agora.graphs.debate import DebateContext, build_debate_graph
from agora.graphs.delegation import DelegationContext, DelegationState, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.moa import MoAContext, build_moa_graph
from agora.graphs.run_checkpoints import open_checkpointer
from agora.graphs.runner import run_problems, run_protocol
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks import Problem, score_answer, score_results
from agora.traces import replay
from agora.traces.store import TraceStore

MC = "Which gas do plants absorb?\nA. Oxygen\nB. Nitrogen\nC. Carbon dioxide\nD. Helium"


def fixed(text):
    return ScriptedChatModel(responses=[text], cycle=True)


def align_pool():
    # agent 0 (a) says 12 twice, agent 1 (b) says 7 twice
    return ModelPool.from_chat_models({"a": fixed("The answer is 12."), "b": fixed("The answer is 7.")})


ALIGN = DelegationConfig(n_agents=2, k_samples=2, tau=0.5)


def has_gold(value) -> bool:
    """Whether a ``gold`` key appears anywhere in a (nested) state or checkpoint value."""
    if isinstance(value, dict):
        return "gold" in value or any(has_gold(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_gold(v) for v in value)
    return False


# ---------------------------------------------------------------------------- the one scorer


def test_score_answer_is_the_tasks_checker_or_none():
    assert score_answer("12", "12", "math") is True and score_answer("7", "12") is False
    assert score_answer(None, "12") is False  # no answer against a gold: wrong
    assert score_answer("b", "B", "mc") is True
    assert score_answer("12", None) is None and score_answer("12", "12", "open") is None


def test_score_results_fills_correct_and_keeps_every_other_field():
    rows = {"align": {"answer": "12", "correct": None, "samples": 4, "how": "marker"},
            "single_agent": {"answer": None, "correct": True, "samples": 0, "how": None}}
    scored = score_results(rows, Problem("q", "Q?", "12"))
    assert scored == {"align": {"answer": "12", "correct": True, "samples": 4, "how": "marker"},
                      "single_agent": {"answer": None, "correct": None, "samples": 0, "how": None}}  # failed, not wrong
    assert rows["align"]["correct"] is None  # not changed in place
    assert score_results(rows, Problem("q", "Q?", None))["align"]["correct"] is None


def test_replay_scores_with_the_same_function():
    assert replay.score_answer is score_answer


# ---------------------------------------------------------------------------- graphs hold no gold


def test_align_graph_runs_without_gold_and_its_checkpoints_hold_none():
    assert "gold" not in build_delegation_graph().channels
    saver = InMemorySaver()
    graph = build_delegation_graph().compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t"}}
    out = graph.invoke({"question": "What is 6 + 6?", "question_id": "q1"}, thread,
                       context=DelegationContext(align_pool(), ALIGN))
    assert out["answer"] == "12" and out["selection"]["accepted"] is True
    assert {m: (r["answer"], r["correct"]) for m, r in out["methods"].items()} == {
        "align": ("12", None), "single_agent": ("12", None), "self_consistency": ("12", None), "best_of_n": ("12", None)}
    history = list(graph.get_state_history(thread))
    assert len(history) > 3 and not any(has_gold(s.values) for s in history)
    assert not has_gold(graph.get_state(thread).values)

    assert not any(has_gold(t.checkpoint) or has_gold(t.metadata) for t in saver.list(thread))

    # a caller's gold is accepted and scored on the way out, and still no state holds it (LangGraph
    # keeps the raw input as given in the first checkpoint's __start__ channel only)
    thread2 = {"configurable": {"thread_id": "t2"}}
    out = graph.invoke({"question": "What is 6 + 6?", "question_id": "q1", "gold": "12"}, thread2,
                       context=DelegationContext(align_pool(), ALIGN))
    assert out["methods"]["align"]["correct"] is True
    assert not any(has_gold(s.values) for s in graph.get_state_history(thread2))
    assert not any(has_gold({k: v for k, v in t.checkpoint["channel_values"].items() if k != "__start__"})
                   for t in saver.list(thread2))


def test_graph_nodes_never_write_correctness_even_when_the_caller_gives_gold():
    """The node updates LangGraph checkpoints carry ``correct`` None; only the output is scored."""
    saver = InMemorySaver()
    graph = build_delegation_graph().compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": "What is 6 + 6?", "question_id": "q1", "gold": "12"}, thread,
                 context=DelegationContext(align_pool(), ALIGN))
    stored = graph.get_state(thread).values["methods"]
    assert {r["correct"] for r in stored.values()} == {None}


@pytest.mark.parametrize("which", ["moa", "debate", "comed"])
def test_moa_debate_and_comed_leave_correct_to_the_runner(tmp_path, which):
    models = {"a": fixed("The answer is B."), "b": fixed("The answer is C.")}
    pool = ModelPool.from_chat_models(models)
    builder, context = {
        "moa": (build_moa_graph, MoAContext(pool, MoAConfig())),
        "debate": (build_debate_graph, DebateContext(pool, DebateConfig())),
        "comed": (build_escalation_graph, EscalationContext(pool, EscalationConfig(
            baselines=("moa", "debate"), thresholds=EscalationThresholds(0.9, 0.0), anchor="a"))),
    }[which]
    assert "gold" not in builder().channels
    out = builder().compile().invoke({"question": MC, "question_id": "q1", "kind": "mc", "n_choices": 4},
                                     context=context)
    assert out["methods"] and {r["correct"] for r in out["methods"].values()} == {None}

    store = TraceStore(tmp_path / "t.db")
    problems = [Problem("q1", MC, "B", "mc", 4), Problem("q2", MC, "C", "mc", 4)]
    outcome = run_protocol(which, problems, store=store, run_id="r", context=context, config={},
                           pool_description=pool.describe(), dataset={})
    recorded = {(r["question_id"], r["method"]): (r["answer"], r["correct"]) for r in store.results("r")}
    # each method's correctness is exactly the one scorer applied to its recorded answer
    assert recorded and all(c == int(score_answer(a, {"q1": "B", "q2": "C"}[q], "mc"))
                            for (q, _m), (a, c) in recorded.items())
    methods = outcome.outcomes[0].methods
    assert {m: r["correct"] for m, r in methods.items()} == {m: r["answer"] == "B" for m, r in methods.items()}
    if which == "comed":  # the branch correctness COMED's calibration reads, scored from the problem too
        details = [json.loads(q["detail"]) for q in store.questions("r")]
        assert [d["anchor_correct"] for d in details] == [True, False]


# ---------------------------------------------------------------------------- the runner scores


def test_runner_records_hand_computed_correctness(tmp_path):
    """a says 2i (right), b says 4 (right only for i = 2); 2 agents x 2 samples."""
    def a(chat, index):
        i = int(chat[-1]["content"].split()[2])
        return f"So the answer is {2 * i}."

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=a), "b": fixed("The answer is 4.")})
    problems = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in (1, 2, 3)]
    problems.append(Problem("q9", "What is 9 + 9?", "5"))  # a gold nobody gives: all wrong
    store = TraceStore(tmp_path / "t.db")
    run_problems(build_delegation_graph(), problems, store=store, run_id="r", protocol="align",
                 context=DelegationContext(pool, ALIGN), config={}, pool_description=pool.describe(), dataset={})
    got = {(r["question_id"], r["method"]): (r["answer"], r["correct"]) for r in store.results("r")}
    # U ties between a's and b's proposals (1/2 each): the principal keeps the first agent's (a's)
    expected = {}
    for q, right in [("q1", "2"), ("q2", "4"), ("q3", "6"), ("q9", None)]:
        answer = {"q9": "18"}.get(q, right)
        for method in ("align", "single_agent", "self_consistency", "best_of_n"):
            expected[(q, method)] = (answer, 1 if right is not None else 0)
    assert got == expected
    questions = {r["question_id"]: (r["gold"], r["correct"]) for r in store.questions("r")}
    assert questions == {"q1": ("2", 1), "q2": ("4", 1), "q3": ("6", 1), "q9": ("5", 0)}


def test_old_checkpoint_with_gold_in_state_resumes_and_is_scored_from_the_problem(tmp_path):
    """A question checkpointed by a graph that still kept ``gold`` in its state (before this change)
    resumes under the current graph, and the runner scores it from the problem, not from the state."""

    class OldInput(TypedDict, total=False):
        question: str
        question_id: str
        gold: str | None
        kind: str
        n_choices: int

    class OldState(DelegationState, OldInput, total=False):
        pass

    old = StateGraph(OldState, context_schema=DelegationContext, input_schema=OldInput)
    old.add_node("delegate", delegation.delegate)
    old.add_node("agent_sample", delegation.agent_sample, destinations=("agent_propose",))
    old.add_node("agent_propose", delegation.agent_propose)
    old.add_node("principal_select", delegation.principal_select)
    old.add_edge(START, "delegate")
    old.add_conditional_edges("delegate", delegation.fan_out, ["agent_sample"])
    old.add_edge("agent_propose", "principal_select")
    old.add_edge("principal_select", END)

    db = tmp_path / "t.db"
    problem = Problem("q1", "What is 6 + 6?", "12")
    saver = open_checkpointer(db)
    thread = {"configurable": {"thread_id": "r:q1"}}
    first = align_pool()
    old.compile(checkpointer=saver, interrupt_before=["principal_select"]).invoke(
        {**problem_input(problem), "gold": "wrong gold kept by the old graph"}, thread,
        context=DelegationContext(first, ALIGN))
    assert has_gold(saver.get_tuple(thread).checkpoint["channel_values"])  # the old graph kept it in state
    saver.close()
    con = sqlite3.connect(db.with_name(db.name + ".checkpoints"))
    assert con.execute("select count(*) from checkpoints").fetchone()[0] > 0
    con.close()

    models = {"a": fixed("The answer is 12."), "b": fixed("The answer is 7.")}
    again = ModelPool.from_chat_models(models)  # a fresh pool: resuming must not sample again
    store = TraceStore(db)
    out = run_problems(build_delegation_graph(), [problem], store=store, run_id="r", protocol="align",
                       context=DelegationContext(again, ALIGN), config={}, pool_description=again.describe(),
                       dataset={})
    assert [q.resumed for q in out.outcomes] == [True]
    assert [len(m.calls) for m in models.values()] == [0, 0]
    rows = {r["method"]: (r["answer"], r["correct"]) for r in store.results("r")}
    assert rows == {m: ("12", 1) for m in ("align", "single_agent", "self_consistency", "best_of_n")}


def test_conversation_scored_by_the_runner_and_its_progress_still_names_the_gold(tmp_path):
    from agora.graphs.conversation import ConversationContext

    pool = ModelPool.from_chat_models({"a": fixed("The answer is 6."), "b": fixed("The answer is 7.")})
    events = []
    store = TraceStore(tmp_path / "t.db")
    run_protocol("converse", [Problem("q1", "What is 3 + 4?", "7")], store=store, run_id="r",
                 context=ConversationContext(pool), config={}, pool_description=pool.describe(), dataset={},
                 on_event=events.append)
    rows = {r["method"]: (r["answer"], r["correct"]) for r in store.results("r")}
    assert rows == {"converse": ("6", 0), "opening": ("6", 0)}  # a speaks turns 1 and 3
    [conclude] = [e for e in events if e["event"] == "conclude"]
    assert conclude["message"].endswith("(gold 7)")
