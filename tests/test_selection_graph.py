"""The CUPID selection graph and ``agora select`` with scripted models: interrupt and resume through
a checkpointer without double counting, budgets, early stop, and the terminal flow through stdin."""

import json
import sqlite3

import numpy as np
import pytest
import sqlite_utils
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from typer.testing import CliRunner

import agora.cli.select as select_cli
from agora.agents.cupid import CupidConfig
from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.cli.main import app
from agora.graphs.selection import SelectionContext, build_selection_graph, parse_choice

WORDS8 = "w w w w w w w w"


def scripted_pool(latencies: dict[str, float], cost: float = 0.0) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    """Models answering ``"<name> says w w w ..."`` with stated latencies (pool-file ``features``)."""
    models = {m: ScriptedChatModel(respond=lambda chat, i, m=m: f"{m} {WORDS8}") for m in latencies}
    members = [PoolMember(ModelSpec(m, "openai", cost_per_1k_tokens=cost, extra={"features": {"latency_s": lat}}),
                          models[m]) for m, lat in latencies.items()]
    return ModelPool(members), models


def fastest_wins(values) -> str:
    """A user who prefers the lower latency (models are named by latency rank in these tests)."""
    shown = values["duel"]["shown"]
    lat = dict(zip(values["arms"], np.array(values["raw_features"])[:, values["feature_names"].index("latency_s")]))
    return "A" if lat[shown[0]] < lat[shown[1]] else "B"


LATENCIES = {"fast": 0.5, "mid": 1.0, "slow": 2.0, "slowest": 3.0}


@pytest.fixture(params=["memory", "sqlite"])
def saver(request, tmp_path):
    if request.param == "memory":
        yield InMemorySaver()
    else:
        conn = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
        yield SqliteSaver(conn)
        conn.close()


def test_pauses_with_anonymous_answers_and_resumes_without_double_counting(saver):
    pool, models = scripted_pool(LATENCIES, cost=1.0)
    graph = build_selection_graph().compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t1"}}
    ctx = SelectionContext(pool, CupidConfig(budget_rounds=3, seed=1))
    graph.invoke({"prompts": ["alpha beta", "gamma delta"]}, thread, context=ctx)
    state = graph.get_state(thread)
    assert state.next == ("ask_user",)
    payload = state.interrupts[0].value
    assert set(payload) == {"round", "prompt", "A", "B", "options"} and payload["round"] == 1
    shown = state.values["duel"]["shown"]
    # anonymous: the payload carries the answers (which name their model here) but no model field
    assert payload["A"] == f"{shown[0]} {WORDS8}" and payload["B"] == f"{shown[1]} {WORDS8}"
    spent = state.values["spent_cost"]
    # each answer: prompt 2 words + 9 completion words = 11 tokens at 1.0 per 1k
    assert spent == pytest.approx(2 * 0.011)
    n_calls = sum(len(m.calls) for m in models.values())
    assert n_calls == 2 and len(state.values["calls"]) == 2

    # re-running the paused node (no resume value, then an invalid one) neither regenerates nor charges
    graph.invoke(None, thread, context=ctx)
    graph.invoke(Command(resume="maybe"), thread, context=ctx)
    state = graph.get_state(thread)
    assert state.next == ("ask_user",) and state.interrupts[0].value["error"] == "expected A, B or tie, got 'maybe'"
    assert sum(len(m.calls) for m in models.values()) == 2 and state.values["spent_cost"] == pytest.approx(spent)

    while graph.get_state(thread).next:
        graph.invoke(Command(resume=fastest_wins(graph.get_state(thread).values)), thread, context=ctx)
    values = graph.get_state(thread).values
    history = values["history"]
    assert [h["round"] for h in history] == [1, 2, 3] and all(h["winner"] for h in history)
    gens = values["generations"]
    # one model call per generated answer, answers reused when a model meets a prompt again
    assert sum(len(m.calls) for m in models.values()) == len(gens) == len(values["calls"])
    assert values["spent_cost"] == pytest.approx(sum(g["cost"] for g in gens.values()))
    rec = values["recommendation"]
    assert rec["rounds"] == 3 and rec["stop_reason"] == "rounds" and rec["spent_cost"] == values["spent_cost"]


def test_order_is_random_but_fixed_per_round():
    pool, _ = scripted_pool(LATENCIES)
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "order"}}
    ctx = SelectionContext(pool, CupidConfig(budget_rounds=12, delta=1e-6))
    graph.invoke({"prompts": ["p"]}, thread, context=ctx)
    first_is_a = []
    while graph.get_state(thread).next:
        values = graph.get_state(thread).values
        first_is_a.append(values["duel"]["shown"][0] == values["duel"]["a"])
        graph.invoke(Command(resume=fastest_wins(values)), thread, context=ctx)
    assert len(first_is_a) == 12 and 0 < sum(first_is_a) < 12


def test_cost_budget_stops_before_overspending():
    # every answer costs 11 tokens at 1.0 per 1k = 0.011; four distinct prompts, so no answer is reused
    pool, models = scripted_pool(LATENCIES, cost=1.0)
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "budget"}}
    ctx = SelectionContext(pool, CupidConfig(budget_rounds=10, budget_cost=0.05, max_tokens=10))
    graph.invoke({"prompts": ["a b", "c d", "e f", "g h"]}, thread, context=ctx)
    while graph.get_state(thread).next:
        graph.invoke(Command(resume="tie"), thread, context=ctx)
    rec = graph.get_state(thread).values["recommendation"]
    # round 1 expects max_tokens + 3/4 = 10.75 tokens per answer (0.0215 a pair) and spends 0.022;
    # round 2 expects the 11 seen and spends 0.044 in all; a third pair needs 0.022 > 0.006 left
    assert rec["rounds"] == 2 and rec["stop_reason"] == "budget"
    assert rec["spent_cost"] == pytest.approx(0.044) and sum(len(m.calls) for m in models.values()) == 4


def test_time_budget_counts_model_seconds():
    pool, _ = scripted_pool(LATENCIES)
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "time"}}
    # stated latencies are the time estimates; the scripted models take 0 s, so spending stays 0 and
    # only pairs whose two stated latencies sum to <= 1.6 s fit: (fast, mid) alone
    ctx = SelectionContext(pool, CupidConfig(budget_rounds=3, budget_time_s=1.6))
    graph.invoke({"prompts": ["a b", "c d", "e f"]}, thread, context=ctx)
    pairs = []
    while graph.get_state(thread).next:
        duel = graph.get_state(thread).values["duel"]
        pairs.append({duel["a"], duel["b"]})
        graph.invoke(Command(resume="A"), thread, context=ctx)
    assert pairs == [{"fast", "mid"}] * 3


def test_confident_stop_and_recommendation():
    pool, _ = scripted_pool(LATENCIES)
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "conf"}}
    ctx = SelectionContext(pool, CupidConfig(budget_rounds=50, delta=0.05))
    graph.invoke({"prompts": ["p"]}, thread, context=ctx)
    while graph.get_state(thread).next:
        graph.invoke(Command(resume=fastest_wins(graph.get_state(thread).values)), thread, context=ctx)
    rec = graph.get_state(thread).values["recommendation"]
    assert rec["model"] == "fast" and rec["stop_reason"] == "confident"
    assert rec["p_best"] >= 0.95 and rec["rounds"] < 50
    assert [r["model"] for r in rec["ranking"]][0] == "fast"


def test_latency_is_measured_when_unknown_and_the_answer_reused():
    models = {m: ScriptedChatModel(respond=lambda chat, i, m=m: f"{m} answer") for m in ("a", "b")}
    pool = ModelPool.from_chat_models(models)
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "m"}}
    graph.invoke({"prompts": ["only prompt"]}, thread, context=SelectionContext(pool, CupidConfig(budget_rounds=1)))
    values = graph.get_state(thread).values
    assert values["feature_names"] == ["cost_per_1k_tokens", "latency_s"]
    assert {c["node"] for c in values["calls"]} == {"model_features"}
    graph.invoke(Command(resume="B"), thread, context=SelectionContext(pool, CupidConfig(budget_rounds=1)))
    assert [len(m.calls) for m in models.values()] == [1, 1]  # the duel reused the measuring answers


def test_parse_choice():
    assert [parse_choice(v) for v in ("a", " B ", "TIE", "t", {"choice": "b"}, "c", 1)] == \
        ["A", "B", "tie", "tie", "B", None, None]


def test_graph_input_errors_name_the_field():
    pool, _ = scripted_pool({"x": 1.0, "y": 2.0})
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match=r"prompts\[1\]: expected a non-empty string"):
        graph.invoke({"prompts": ["ok", ""]}, {"configurable": {"thread_id": "e"}}, context=SelectionContext(pool))
    with pytest.raises(ValueError, match="at least two distinct models"):
        graph.invoke({"prompts": ["ok"], "models": ["x"]}, {"configurable": {"thread_id": "e2"}},
                     context=SelectionContext(pool))


# ---------------------------------------------------------------------------- the terminal command


@pytest.fixture
def cli_pool(monkeypatch):
    pool, models = scripted_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    return models


def write_prompts(tmp_path, n=3):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Prompt number {i}"}) + "\n" for i in range(n)))
    return path


def test_terminal_session_stops_after_three_choices_and_continues(tmp_path, cli_pool):
    runner = CliRunner()
    prompts, db = write_prompts(tmp_path), tmp_path / "t.db"
    args = ["select", "--prompts", str(prompts), "--budget-rounds", "5", "--delta", "0.001", "--db", str(db),
            "--thread", "s1", "--out", str(tmp_path / "out")]
    first = runner.invoke(app, args, input="A\nnonsense\nB\ntie\nq\n")
    assert first.exit_code == 0, first.output
    assert "please answer A, B, tie or q" in first.output
    assert "stopped after 3 rounds: continue with agora select --thread s1 --db" in first.output
    assert "round 4" in first.output and "round 5" not in first.output
    calls_before = sum(len(m.calls) for m in cli_pool.values())
    rows = sqlite_utils.Database(db)["model_calls"].count
    assert rows == calls_before > 0  # every call traced by the command

    second = runner.invoke(app, ["select", "--thread", "s1", "--db", str(db), "--out", str(tmp_path / "out")],
                           input="A\nA\n")
    assert second.exit_code == 0, second.output
    assert "continuing session s1" in second.output
    assert "round 4" in second.output and "round 5" in second.output and "round 3" not in second.output
    assert "rounds used: 5" in second.output and "recommended" in second.output
    report = json.loads((tmp_path / "out" / "s1.json").read_text())
    assert [h["choice"] for h in report["history"]] == ["A", "B", "tie", "A", "A"]
    # round 4's answers were generated once, before the stop, and shown again after it
    assert sqlite_utils.Database(db)["model_calls"].count == sum(len(m.calls) for m in cli_pool.values())
    run = sqlite_utils.Database(db)["runs"].get("s1")
    assert run["protocol"] == "cupid" and run["status"] == "finished"


def test_simulated_user_recommends_its_best_and_plots_regret(tmp_path, cli_pool):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--budget-rounds", "30",
                                      "--simulate", "latency_s=-2", "--db", str(tmp_path / "t.db"),
                                      "--thread", "sim", "--out", str(out), "--sim-seeds", "5"])
    assert result.exit_code == 0, result.output
    assert "simulated user's best model: fast; recommended it: yes" in result.output
    assert (out / "sim-regret.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "sim.json").read_text())
    assert report["recommendation"]["model"] == "fast" and set(report["mean_regret"]) == {
        "CUPID", "uniform pairs", "RUCB"}


def test_zero_rounds_is_refused_before_any_model_call(tmp_path, cli_pool):
    result = CliRunner().invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--budget-rounds", "0",
                                      "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --budget-rounds: must be at least 1, got 0", result.output
    assert not any(m.calls for m in cli_pool.values()) and not (tmp_path / "t.db").exists()
    with pytest.raises(ValueError, match=r"budget_rounds must be >= 1 \(a session with no duel learns no preference\), got 0"):
        CupidConfig(budget_rounds=0)


def test_bad_theta_is_one_line_error(tmp_path, cli_pool):
    result = CliRunner().invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--simulate", "speed=1",
                                      "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert "unknown feature 'speed'; features: cost_per_1k_tokens, latency_s" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--simulate",
                                      "latency_s=1e400", "--db", str(tmp_path / "t2.db")])
    assert result.exit_code == 2
    assert "theta 'latency_s=1e400': weights must be finite numbers" in result.output


def test_non_finite_pool_feature_is_one_line_error_naming_file_and_field(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "{m}"\nfeatures = {{ latency_s = {lat} }}\n\n'
                            for m, lat in (("a", "1e400"), ("b", "1.0"), ("c", "2.0"))))
    result = CliRunner().invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--pool", str(pool),
                                      "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2, result.output
    assert f"error: {pool}: model 'a': field 'features.latency_s': expected a finite number, got inf" in \
        result.output.replace("\n", "")
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_embedded_pool_simulated_session(tmp_path):
    """The embedded pool under three personas (six arms), tiny answers, a simulated user."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "sum", "prompt": "What is 12 + 30?"}\n')
    db, out = tmp_path / "t.db", tmp_path / "out"
    result = CliRunner().invoke(app, ["select", "--prompts", str(prompts), "--simulate", "latency_s=-4",
                                      "--budget-rounds", "6", "--max-tokens", "8", "--db", str(db),
                                      "--thread", "emb", "--out", str(out), "--sim-seeds", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "emb.json").read_text())
    assert len(report["arms"]) == 6 and report["recommendation"]["rounds"] <= 6
    assert report["simulated_best"] in report["arms"] and (out / "emb-regret.png").is_file()
    # six measuring answers to the single prompt, reused by every duel: six traced calls
    assert sqlite_utils.Database(db)["model_calls"].count == 6
