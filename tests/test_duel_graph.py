"""The duel graph and its runs with scripted fake models: a duel with known winner and reputations,
ties, pool size, resuming an interrupted run, the leader learning which instruction is informative,
and the duel tables and plots."""

import math
import re
import sqlite3

import pytest

from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.agents.matching import MatchConfig
from agora.models.pool import ModelCallError, ModelPool
from agora.models.testing import ScriptedChatModel
from agora.graphs.duel import DuelConfig, DuelContext, build_duel_graph, duel_pool
from agora.runs.duel import run_duels
from agora.tasks import Problem, synthetic_problems
from agora.traces import duels as duel_traces
from agora.traces.store import TraceStore

TANH_HALF = 0.46211715726000974
K_FIRST = 10 * 0.98951926  # K_t after one update: 10 · 0.9^(1/10)

_AUTHOR = re.compile(r"Response to be evaluated: answer by (\w+)")


def follower_text(name: str, question: str) -> str:
    return f"answer by {name} to [{question[:20]}]. The answer is 4."


def scripted(name: str, scores: dict[str, float] | None = None, fault: dict | None = None) -> ScriptedChatModel:
    """A fake member: answers as ``name``; as a judge, scores the answer's author from ``scores``.

    ``fault={"after": n}`` makes its judge replies fail once it has judged ``n`` answers, until
    ``fault["after"]`` is set to ``None``.
    """
    judged = {"n": 0}

    def respond(messages, i):
        last = messages[-1]["content"]
        m = _AUTHOR.search(last)
        if m is None:
            question = last
            return follower_text(name, question)
        if fault is not None and fault["after"] is not None and judged["n"] >= fault["after"]:
            raise RuntimeError("injected judge fault")
        judged["n"] += 1
        return '{"score": %s}' % (scores or {}).get(m.group(1), 5)

    return ScriptedChatModel(respond=respond)


def pool_of(models: dict[str, ScriptedChatModel]) -> ModelPool:
    return ModelPool.from_chat_models(models, max_retries=0)


def test_one_duel_known_winner_scores_and_reputations():
    # Ratings and a sharp kernel make the pairing certain: active a (round-robin), opponent c (ĝ = 1 = g*).
    pool = pool_of({"a": scripted("a"), "b": scripted("b", {"a": 8, "c": 4}), "c": scripted("c"),
                    "d": scripted("d", {"a": 6, "c": 7})})
    cfg = DuelConfig(duels=4, iterations=2, match=MatchConfig(p_rand=0.0, sigma_g=0.01))
    ratings = {"a": 100.0, "b": 90.0, "c": 150.0, "d": 120.0}
    out = build_duel_graph().compile().invoke(
        {"run_id": "r", "reputation": {"ratings": ratings, "deltas": {}, "updates": 0}},
        context=DuelContext(pool, cfg, synthetic_problems(3)))
    rec = out["record"]
    assert rec["duel_id"] == "r:0:0" and rec["followers"] == ["a", "c"]
    # Eq. 8 with judges b (R 90) and d (R 120): s̄_a = (90·8 + 120·6)/210, s̄_c = (90·4 + 120·7)/210
    s_a, s_c = 1440 / 210, 1200 / 210
    assert rec["scores"] == pytest.approx([s_a, s_c]) and rec["winner"] == "a"
    # Eq. 9, n = 1: z = −50/√0.5, so |Φ(z) − Φ(−z)| = 1; σ = 0.5 for both
    delta = K_FIRST / 20 * (s_a - s_c) * TANH_HALF
    assert rec["deltas"] == pytest.approx({"a": delta, "c": -delta})
    assert out["reputation"]["ratings"] == pytest.approx({**ratings, "a": 100 + delta, "c": 150 - delta})
    assert rec["ratings_after"]["b"] == 90.0 and out["reputation"]["updates"] == 1
    pair = rec["pair"]
    assert pair["chosen"] == follower_text("a", rec["instruction"]["question"])
    assert (pair["chosen_model"], pair["rejected_model"]) == ("a", "c")
    assert pair["margin"] == pytest.approx(s_a - s_c) and pair["reputations"] == ratings
    assert pair["judge_scores"] == {"chosen": {"b": 8.0, "d": 6.0}, "rejected": {"b": 4.0, "d": 7.0}}
    assert pair["prompt_messages"][-1] == {"role": "user", "content": rec["instruction"]["question"]}
    assert pair["gold"] == rec["instruction"]["gold"] and pair["kind"] == "math"
    roles = sorted((c["role"], c["model"], c.get("partner")) for c in out["calls"])
    assert roles == [("follower", "a", None), ("follower", "c", None), ("judge", "b", "a"), ("judge", "b", "c"),
                     ("judge", "d", "a"), ("judge", "d", "c")]
    # the leader's reward is recorded; in iteration 0 it was drawn uniformly (p = 1/3)
    assert rec["instruction"]["probability"] == pytest.approx(1 / 3) and rec["leader_updated"]


def test_ties_give_no_pair_and_no_reputation_change(tmp_path):
    pool = pool_of({n: scripted(n) for n in "abc"})  # every judge scores every answer 5
    store = TraceStore(tmp_path / "t.db")
    run_duels(store, "tie", DuelContext(pool, DuelConfig(mode="sparta", duels=3, iterations=1), synthetic_problems(4)))
    rows = duel_traces.duels(store, "tie")
    assert [(r["tie"], r["winner"], r["margin"]) for r in rows] == [(1, None, 0.0)] * 3
    assert store.db["preference_pairs"].count == 0
    ratings = {r["rating"] for r in store.db["reputation_snapshots"].rows}
    assert ratings == {100.0}
    assert duel_traces.summary(store, "tie")["pairs"] == 0


def test_pool_of_two_is_refused():
    with pytest.raises(ValueError, match="at least 3 models"):
        duel_pool(pool_of({"a": scripted("a"), "b": scripted("b")}))


QUALITY = {"a": 8, "b": 6, "c": 3}


def quality_pool(fault: dict | None = None) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    models = {n: scripted(n, QUALITY, fault if n == "c" else None) for n in QUALITY}
    return pool_of(models), models


def _duel_summary(store: TraceStore, run_id: str):
    return [(r["duel_id"], r["instruction_id"], r["model_a"], r["model_b"], r["score_a"], r["score_b"], r["winner"])
            for r in duel_traces.duels(store, run_id)]


def test_interrupted_run_resumes_without_duplicates_and_matches_an_uninterrupted_run(tmp_path, trace_db):
    cfg = DuelConfig(mode="stackelberg", duels=4, iterations=2, seed=3)
    problems = synthetic_problems(6)
    reference = TraceStore(tmp_path / "ref.db")
    run_duels(reference, "run", DuelContext(quality_pool()[0], cfg, problems))

    fault = {"after": 5}  # judge c fails at its 6th answer: in the middle of a duel
    pool, models = quality_pool(fault)
    store = TraceStore(trace_db)  # SQLite or Postgres; the reference on SQLite
    with pytest.raises(ModelCallError):
        run_duels(store, "run", DuelContext(pool, cfg, problems))
    recorded = store.db["duels"].count
    assert 0 < recorded < 8
    assert store.get_run("run")["status"] == "failed"  # not left "running" (issue 16 item 4)
    failed = list(store.db.query("select * from model_calls where error is not null"))
    assert failed and failed[0]["role"] == "judge" and failed[0]["question_id"] == f"run:{recorded // 4}:{recorded % 4}"
    follower_calls = sum(len(m.calls) for m in models.values())

    fault["after"] = None
    outcome = run_duels(store, "run", DuelContext(pool, cfg, problems))
    assert outcome.resumed and outcome.skipped == recorded and len(outcome.records) == 8 - recorded
    ids = [r["duel_id"] for r in store.db.query("select duel_id from duels")]
    assert len(ids) == len(set(ids)) == 8
    assert store.db["reputation_snapshots"].count == 8 * 3 and store.db["leader_snapshots"].count == 8
    assert _duel_summary(store, "run") == _duel_summary(reference, "run")
    assert duel_traces.load_state(store, "run", 20) == duel_traces.load_state(reference, "run", 20)
    # the interrupted duel's followers had answered: the resume did not ask them again
    # (judge c scores both answers again, 2 calls; each later duel: 2 answers + 2 judge calls)
    new_calls = sum(len(m.calls) for m in models.values()) - follower_calls
    assert new_calls == 2 + 4 * (8 - recorded - 1)
    # every call is traced: the judge's first reply in the interrupted duel was given twice
    ok_calls = store.db.execute("select count(*) from model_calls where error is null").fetchone()[0]
    assert reference.db.execute("select count(*) from model_calls").fetchone()[0] == 8 * 4
    assert ok_calls == 8 * 4 + 1
    assert store.get_run("run")["status"] == "finished"
    # a rerun of a finished run plays nothing; other settings are refused
    assert run_duels(store, "run", DuelContext(pool, cfg, problems)).records == []
    with pytest.raises(ValueError, match="duels|other settings"):
        run_duels(store, "run", DuelContext(pool, DuelConfig(mode="stackelberg", duels=5, iterations=2, seed=3),
                                            problems))


def test_drained_run_stops_between_steps_and_resumes_like_an_uninterrupted_run(tmp_path):
    """A drain asked (as the first Ctrl-C does) while the 3rd duel's followers answer: that step
    finishes and is checkpointed, no later duel starts, GraphDrained is raised; the rerun asks no
    follower of that duel again and ends with the uninterrupted run's duels."""
    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

    cfg = DuelConfig(mode="stackelberg", duels=4, iterations=1, seed=3)
    problems = synthetic_problems(6)
    reference = TraceStore(tmp_path / "ref.db")
    run_duels(reference, "run", DuelContext(quality_pool()[0], cfg, problems))

    control = RunControl()
    pool, models = quality_pool()
    answered = {"n": 0}
    inner = models["a"].respond

    def respond(messages, i):
        if not _AUTHOR.search(messages[-1]["content"]):
            answered["n"] += 1
            if answered["n"] == 2 and not control.drain_requested:
                control.request_drain("test")
        return inner(messages, i)

    models["a"].respond = respond
    store = TraceStore(tmp_path / "t.db")
    with pytest.raises(GraphDrained):
        run_duels(store, "run", DuelContext(pool, cfg, problems), control=control)
    recorded = store.db["duels"].count
    assert recorded < 4
    assert store.get_run("run")["status"] == "interrupted"
    calls_before = sum(len(m.calls) for m in models.values())
    outcome = run_duels(store, "run", DuelContext(pool, cfg, problems))
    assert len(outcome.records) == 4 - recorded
    assert _duel_summary(store, "run") == _duel_summary(reference, "run")
    # the drained duel resumes at its judging step: 2 judge calls for it, 4 calls per later duel
    assert sum(len(m.calls) for m in models.values()) - calls_before == 2 + 4 * (4 - recorded - 1)


INFORMATIVE = "INFORMATIVE instruction"


def informative_pool() -> ModelPool:
    """Judges (shown both answers) score by the followers' quality on the informative instruction:
    mid-range scores a 6, b 5, c 4, gaps near the target. On every other instruction they give
    Response A 10 and Response B 1: a one-sided duel, gap 1, which carries no information."""
    def member(name):
        def respond(messages, i):
            last = messages[-1]["content"]
            rated = re.search(r"Rate Response ([AB])", last)
            if rated is None:
                return f"answer by {name} to [{last[:24]}]"
            author = re.search(rf"Response {rated.group(1)}: answer by (\w)", last).group(1)
            if INFORMATIVE in last:
                return '{"score": %d}' % {"a": 6, "b": 5, "c": 4}[author]
            return '{"score": %d}' % (10 if rated.group(1) == "A" else 1)
        return ScriptedChatModel(respond=respond)
    return pool_of({n: member(n) for n in "abc"})


def leader_run(mode: str, seed: int) -> tuple[float, float]:
    problems = [Problem(id=f"q{i}", question=f"plain instruction {i}", gold=None, kind="open") for i in range(7)]
    problems.insert(3, Problem(id="q-info", question=INFORMATIVE, gold=None, kind="open"))
    store = TraceStore(":memory:")
    cfg = DuelConfig(mode=mode, duels=32, iterations=3, seed=seed, judge=JudgeConfig(presentation="pair"))
    run_duels(store, "lead", DuelContext(informative_pool(), cfg, problems))
    last = [r for r in duel_traces.duels(store, "lead") if r["iteration"] == 2]
    share = sum(r["instruction_id"] == "q-info" for r in last) / len(last)
    final = list(store.db.query("select log_w_rest, log_w from leader_snapshots order by duel_number desc limit 1"))[0]
    weight = math.exp(__import__("json").loads(final["log_w"]).get("q-info", final["log_w_rest"]))
    return share, weight


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_leader_concentrates_on_the_informative_instruction(seed):
    # K = 8: by chance the informative instruction gets 1/8 of the last iteration's 32 duels (4);
    # 13 or more by chance has probability < 1e-4 (binomial 32, 1/8)
    share, weight = leader_run("stackelberg", seed)
    assert share >= 0.4 and weight >= 0.8
    # Sparta's leader stays uniform: same pool, same seed
    sparta_share, sparta_weight = leader_run("sparta", seed)
    assert sparta_share <= 0.3 and sparta_weight == pytest.approx(1 / 8)


def test_tables_model_table_and_plots(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    cfg = DuelConfig(duels=6, iterations=2, seed=1, leader=Exp3Config(eta=0.5))
    run_duels(store, "p", DuelContext(quality_pool()[0], cfg, synthetic_problems(5)))
    rows = duel_traces.duels(store, "p")
    table = {r.model: r for r in duel_traces.model_table(store, "p")}
    # a always beats b and c, c always loses (judges score by author quality 8 > 6 > 3)
    assert table["a"].losses == 0 and table["c"].wins == 0 and table["a"].reputation > table["c"].reputation
    assert sum(t.duels for t in table.values()) == 2 * len(rows)
    assert sum(t.judge_calls for t in table.values()) == 2 * len(rows)
    models, wins, games = duel_traces.win_rates(store, "p")
    assert games.sum() == 2 * len(rows) and wins.sum() == len(rows)
    assert all(wins[models.index("c"), :] == 0)
    leader_rows = list(store.db["leader_snapshots"].rows)
    assert {r["eta"] for r in leader_rows} == {0.5}
    assert store.get_run("p")["config"].count('"eta_used": 0.5') == 1
    xs, history = duel_traces.reputation_history(store, "p")
    assert xs == list(range(13)) and all(len(v) == 13 for v in history.values())
    paths = duel_traces.plot_duels(store, "p", tmp_path / "plots")
    assert [p.name for p in paths] == ["reputation.png", "leader_weights.png", "win_rates.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    with sqlite3.connect(tmp_path / "t.db") as conn:
        cols = [c[1] for c in conn.execute("pragma table_info(preference_pairs)")]
    assert cols == ["pair_id", "run_id", "duel_id", "iteration", "prompt", "prompt_messages", "chosen", "rejected",
                    "chosen_model", "rejected_model", "chosen_score", "rejected_score", "margin", "judge_scores",
                    "reputations", "gold", "kind", "created_at"]


# ----------------------------------------------------------------------------- CLI


def invoke(*args):
    from typer.testing import CliRunner

    from agora.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_cli_refuses_a_pool_of_two_in_one_line(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{n}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "m"\n\n' for n in ("x", "y")))
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Say hi."}\n')
    out = invoke("duel", "--instructions", data, "--pool", pool, "--db", tmp_path / "t.db")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "a duel pool needs at least 3 models" in out.output and "x, y" in out.output


def test_cli_eta_bound_is_the_configs_exclusive_one(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Say hi."}\n')
    for eta in ("-1", "0"):
        out = invoke("duel", "--instructions", data, "--eta", eta, "--db", tmp_path / "t.db")
        assert out.exit_code == 2 and "Traceback" not in out.output
        assert out.output.strip() == (f"error: --eta: Exp3Config.eta must be a finite number > 0 (or None for 1/K), "
                                      f"got {float(eta)}")  # the option typed, then the setting it gives
    for eta in ("inf", "nan"):  # refused as the option is parsed
        out = invoke("duel", "--instructions", data, "--eta", eta, "--db", tmp_path / "t.db")
        assert out.exit_code == 2 and out.output.strip() == f"error: --eta: must be a finite number, got {eta}"
    assert not (tmp_path / "t.db").exists()


def test_cli_ctrl_c_says_finished_duels_are_saved(tmp_path, monkeypatch):
    import agora.cli.duel as duel_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(duel_cli, "run_duels", interrupted)
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{n}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "m"\n\n' for n in ("x", "y", "z")))
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Say hi."}\n')
    out = invoke("duel", "--instructions", data, "--pool", pool, "--db", tmp_path / "t.db")
    assert out.exit_code == 130
    assert "interrupted: finished duels are saved; rerun with the same --run-id to resume" in out.output


def test_cli_report_without_duels_is_a_user_error(tmp_path):
    TraceStore(tmp_path / "t.db").close()
    out = invoke("report", "duels", "--db", tmp_path / "t.db", "--out", tmp_path / "plots")
    assert out.exit_code == 2 and "no duel runs" in out.output


@pytest.mark.slow
def test_embedded_duel_pool_end_to_end(tmp_path, shared_data):
    db = tmp_path / "t.db"
    out = invoke("duel", "--instructions", shared_data / "gsm8k" / "train.jsonl", "--limit", 4, "--mode", "sparta",
                 "--duels", 2, "--iterations", 1, "--max-tokens", 8, "--judge-max-tokens", 8, "--db", db,
                 "--run-id", "e2e", "--pool", "tiny")
    assert out.exit_code == 0, out.output
    assert "preference pairs written" in out.output and "smollm2-135m-cautious" in out.output
    store = TraceStore(db)
    assert store.db["duels"].count == 2 and store.db["reputation_snapshots"].count == 2 * 4
    roles = {r["role"]: r["n"] for r in store.db.query("select role, count(*) as n from model_calls group by role")}
    assert roles == {"follower": 4, "judge": 8}
    report = invoke("report", "duels", "--db", db, "--out", tmp_path / "plots")
    assert report.exit_code == 0, report.output
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["leader_weights.png", "reputation.png",
                                                                      "win_rates.png"]
