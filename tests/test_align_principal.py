"""ALIGN with a model principal (``DelegationConfig.principal``, ``--principal``): a pool member (a
trained aggregator) reads the question and the proposals and answers for ALIGN. Scripted models only."""

import json
from dataclasses import asdict

import pytest
import sqlite_utils

import agora.cli.align as align_cli
from agora.agents.delegation import DelegationConfig, principal_choice
from agora.agents.moa import aggregator_prompt
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.models.validation import recorded
from agora.training import aggregator as training_aggregator
from cli_runs import agora

SYSTEM = ("Solve the math problem. Reason briefly step by step in words, not code, then end with "
          "'The answer is N.' where N is the final number.")

#: The settings a run recorded before the principal existed (``asdict`` of the defaults then).
OLD_RECORD = {"n_agents": 2, "k_samples": 3, "tau": 0.5, "proposal_rule": "plurality", "utility": "agreement",
              "temperature": 0.7, "top_p": 0.95, "max_tokens": 256, "shots": 2, "seed": 0, "models": (),
              "dev_accuracy": (), "dev_run": None, "dev_db": None}


def pool_of(**scripts) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    models = {name: ScriptedChatModel(responses=texts, cycle=True) for name, texts in scripts.items()}
    return ModelPool.from_chat_models(models), models


def run(pool, **cfg):
    graph = build_delegation_graph().compile()
    return graph.invoke({"question": "Tom has 3 apples and buys 4 more. How many?", "gold": "7", "question_id": "q1"},
                        context=DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=3, shots=0, **cfg)))


def test_the_prompt_builder_lives_in_agents_and_training_uses_the_same_one():
    assert training_aggregator.aggregator_prompt is aggregator_prompt


def test_the_principal_sees_the_question_and_the_proposals_and_its_answer_is_aligns():
    pool, models = pool_of(a=["The answer is 12."], b=["The answer is 7."],
                           agg=["Response 1 forgot the 3 apples Tom had. The answer is 7."])
    out = run(pool, models=("a", "b"), principal="agg")
    [call] = models["agg"].calls
    # the two proposals, shuffled by the principal call's seed (here they stay in agent order)
    assert call["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": (
            "Tom has 3 apples and buys 4 more. How many?\n\n"
            "Responses from several models:\n"
            "1. \"The answer is 12.\"\n\n"
            "2. \"The answer is 7.\"\n\n"
            "Some of them may be wrong. Critically evaluate them and write one correct answer. "
            "End with 'The answer is N.' where N is the final answer.")}]
    # one proposal per agent: a 12 (share 1), b 7 (share 1): U(12) = U(7) = 1/2; the rule would take agent 0's 12
    assert out["answer"] == "7"
    assert out["selection"] == {"agent": 1, "answer": "7", "utility": 0.5, "accepted": True, "principal": "agg"}
    align = out["methods"]["align"]
    assert (align["answer"], align["correct"], align["samples"], align["how"]) == ("7", True, 7, "marker")
    # tokens: 6 candidates of 4 words, the principal's 12 words (the scripted model counts words)
    assert align["completion_tokens"] == 6 * 4 + 12
    assert out["methods"]["best_of_n"]["samples"] == 6  # the baselines add no call


def test_no_match_or_a_tie_records_the_principals_answer_with_no_agent():
    pool, _ = pool_of(a=["The answer is 12."], b=["The answer is 7."], agg=["The answer is 9."])
    out = run(pool, models=("a", "b"), principal="agg")
    assert out["selection"] == {"agent": None, "answer": "9", "utility": 0.0, "accepted": False, "principal": "agg"}
    assert out["methods"]["align"]["answer"] == "9"
    tie = [{"agent": 0, "answer": "7"}, {"agent": 1, "answer": "7"}, {"agent": 2, "answer": "3"}]
    assert principal_choice(tie, "7", [2 / 3, 2 / 3, 1 / 3], 0.5, "agg")["agent"] is None
    assert principal_choice(tie, "3", [2 / 3, 2 / 3, 1 / 3], 0.5, "agg") == {
        "agent": 2, "answer": "3", "utility": 1 / 3, "accepted": False, "principal": "agg"}
    assert principal_choice(tie, None, [2 / 3, 2 / 3, 1 / 3], 0.5, "agg")["agent"] is None


def test_unset_principal_changes_nothing_and_asks_no_one():
    pool, models = pool_of(a=["The answer is 12."], b=["The answer is 7."], agg=["The answer is 9."])
    out = run(pool, models=("a", "b"))
    assert models["agg"].calls == []
    assert out["selection"] == {"agent": 0, "answer": "12", "utility": 0.5, "accepted": True}
    assert out["methods"]["align"]["samples"] == 6
    assert recorded(DelegationConfig()) == OLD_RECORD  # the recorded settings as before
    assert recorded(DelegationConfig(principal="agg")) == {**OLD_RECORD, "principal": "agg"}
    assert asdict(DelegationConfig())["principal"] is None


def test_a_principal_not_in_the_pool_is_refused_naming_the_field():
    pool, _ = pool_of(a=["The answer is 1."])
    with pytest.raises(ValueError, match=r"DelegationConfig.principal: 'nobody' is not in the pool \(a\)"):
        run(pool, principal="nobody")


@pytest.fixture
def cli_pool(monkeypatch):
    pool, models = pool_of(a=["The answer is 12."], b=["The answer is 7."],
                           agg=["Response 1 is wrong. The answer is 7."])
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    return models


def test_cli_principal_records_its_call_and_setting(tmp_path, cli_pool):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "Tom has 3 apples and buys 4 more. How many?",
                                "answer": "#### 7"}) + "\n")
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "P", "--models", "a,b",
                         "--principal", "agg", "--concurrency", "1")
    assert code == 0, output
    rows = sqlite_utils.Database(db)
    [principal] = list(rows.query("select node, role, model, partner from model_calls where run_id = 'P' "
                                  "and role = 'principal'"))
    assert principal == {"node": "principal_select", "role": "principal", "model": "agg", "partner": "a,b"}
    [result] = list(rows.query("select answer, correct from results where run_id = 'P' and method = 'align'"))
    assert result == {"answer": "7", "correct": 1}
    config = json.loads(next(rows.query("select config from runs where run_id = 'P'"))["config"])
    assert config["principal"] == "agg"
    # unset: the run's settings are recorded exactly as before the principal existed, and resume
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R", "--models", "a,b")
    assert code == 0, output
    config = json.loads(next(rows.query("select config from runs where run_id = 'R'"))["config"])
    assert config == {**OLD_RECORD, "models": ["a", "b"], "dev_accuracy": []}
    assert list(rows.query("select * from model_calls where run_id = 'R' and role = 'principal'")) == []
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R", "--models", "a,b")
    assert code == 0 and "resumed: 1 of 1 questions already done" in output, output
    # naming a principal on that run changes its settings: refused
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R", "--models", "a,b",
                         "--principal", "agg")
    assert code == 2 and "settings" in output, output


def test_studio_context_names_the_principal_and_the_async_run_asks_it():
    """Studio sends the context as JSON and runs the graph with ``ainvoke``."""
    import asyncio

    pool, models = pool_of(a=["The answer is 12."], b=["The answer is 7."], agg=["The answer is 7."])
    graph = build_delegation_graph().compile()
    context = {"pool": pool, "config": {"n_agents": 2, "k_samples": 3, "models": ["a", "b"], "shots": 0,
                                        "principal": "agg"}}
    out = asyncio.run(graph.ainvoke({"question": "Q?", "gold": "7", "question_id": "q1"}, context=context))
    assert (out["answer"], out["selection"]["agent"], out["selection"]["principal"]) == ("7", 1, "agg")
    assert len(models["agg"].calls) == 1
    fields = json.dumps(graph.get_context_jsonschema())  # Studio's form shows the setting
    assert '"principal": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null' in fields


def test_cli_refuses_a_principal_not_in_the_pool_naming_the_option(tmp_path, cli_pool):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "Q?", "answer": "#### 1"}) + "\n")
    code, output = agora("run", "align", "--data", data, "--db", tmp_path / "t.db", "--principal", "nobody")
    assert (code, output) == (2, "error: --principal: 'nobody' is not in the pool (a, b, agg)\n")
    assert not (tmp_path / "t.db").exists()  # refused before any run row
