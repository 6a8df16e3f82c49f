"""Guessed answers are marked (issue 15, docs/scoring.md §5): each method's answer carries how it was
found, the trace stores it in ``results.how``, and databases written before the column still open."""

import sqlite3

import sqlite_utils

from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.runner import run_problems
from agora.tasks import Problem
from agora.traces.store import TraceStore

PROBLEMS = [Problem("q1", "What is 2 + 2?", "4"), Problem("q2", "What is 3 + 3?", "6")]


def stated(chat, index):
    i = int(chat[-1]["content"].split()[2])
    return f"{i} + {i} makes {2 * i}. The answer is {2 * i}."


def guessed(chat, index):
    i = int(chat[-1]["content"].split()[2])
    return f"{i} and {i} together make {2 * i}"


def test_align_results_store_how_each_answer_was_found(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=guessed), "b": ScriptedChatModel(respond=stated)})
    run_problems(build_delegation_graph(), PROBLEMS, store=store, run_id="r", protocol="align",
                 context=DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=1)), config={},
                 pool_description=pool.describe(), dataset={"format": "test"})
    rows = {(r["question_id"], r["method"]): r for r in sqlite_utils.Database(tmp_path / "t.db")["results"].rows}
    # agent 0 (model a) guesses from its last number; the answer is the same as b's, which b stated
    assert rows[("q1", "single_agent")]["how"] == "fallback"
    assert rows[("q1", "single_agent")]["correct"] == 1
    assert {rows[(q, "self_consistency")]["how"] for q in ("q1", "q2")} == {"fallback"}  # first candidate's mark
    counted = store.db.execute("select sum(how = 'fallback'), count(answer) from results where run_id = 'r' "
                               "and method = 'single_agent'").fetchone()
    assert counted == (2, 2)
    from agora.traces.report import method_table

    table = {row.method: row for row in method_table(store, "r")}
    assert table["single_agent"].guessed == 2 and table["single_agent"].questions == 2


def test_no_answer_has_no_mark():
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(responses=["The answer is not 4."], cycle=True)})
    out = build_delegation_graph().compile().invoke(
        {"question": "What is 2 + 2?", "gold": "4"},
        context=DelegationContext(pool, DelegationConfig(n_agents=1, k_samples=1)))
    assert out["methods"]["single_agent"] == {"answer": None, "correct": False, "samples": 1,
                                              "completion_tokens": out["methods"]["single_agent"]["completion_tokens"],
                                              "latency_s": 0.0, "how": None}


def test_comed_methods_carry_the_mark_of_their_answer():
    mc = {"question": "Which?\nA. 1\nB. 2\nC. 3\nD. 4", "kind": "mc", "n_choices": 4, "gold": "B"}
    pool = ModelPool.from_chat_models({
        # anchor: 2 boxed, 1 guessed; then a's MoA proposal and its aggregation
        "a": ScriptedChatModel(responses=["\\boxed{B}", "\\boxed{B}", "Option B fits.", "#### B", "The answer is B."]),
        "b": ScriptedChatModel(responses=["#### B"], cycle=True)})
    cfg = EscalationConfig(baselines=("moa",), thresholds=EscalationThresholds(0.5, 0.34), anchor="a")
    out = build_escalation_graph().compile().invoke(mc, context=EscalationContext(pool, cfg))
    assert out["anchor"]["answers"] == ["B", "B", "B"] and out["anchor"]["how"] == "boxed"
    assert out["methods"]["comed"]["how"] == out["methods"]["anchor"]["how"] == "boxed"
    assert (out["methods"]["moa"]["answer"], out["methods"]["moa"]["how"]) == ("B", "marker")


def test_a_trace_db_written_before_the_column_opens_and_gains_it(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the results table as it was before results.how
        conn.execute("create table results (run_id text, question_id text, method text, answer text, correct integer, "
                     "samples integer, completion_tokens integer, latency_s float, "
                     "primary key (run_id, question_id, method))")
        conn.execute("insert into results values ('old', 'q', 'align', '4', 1, 2, 10, 0.5)")
    store = TraceStore(path)
    assert "how" in store.db["results"].columns_dict
    assert [(r["answer"], r["how"]) for r in store.db["results"].rows] == [("4", None)]
    store.start_run("new", "align", config={}, pool=[], dataset={})
    store.record_question("new", "align", {"question_id": "q", "idx": 0, "gold": "4", "answer": "4", "correct": True},
                          {"align": {"answer": "4", "correct": True, "samples": 1, "completion_tokens": 1,
                                     "how": "fallback"}}, [])
    assert store.db.execute("select how from results where run_id = 'new'").fetchone() == ("fallback",)
