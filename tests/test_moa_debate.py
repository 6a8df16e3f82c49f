"""Mixture-of-Agents and debate as protocols of their own (graphs/moa.py, graphs/debate.py), with
scripted models: answers, methods and their costs (hand-counted), Send fan-out, partners and seeds,
async, checkpointed resume, COMED embedding them as subgraphs, and ``agora run moa|debate``."""

import asyncio
import sqlite3

import pytest
import sqlite_utils
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from openai_stub import StubServer, chat_reply
from typer.testing import CliRunner

from agora.agents.debate import DebateConfig, agent_models
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.moa import MoAConfig
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.cli.main import app
from agora.graphs.question import question_seed
from agora.graphs.debate import DebateContext, DebateOutput, build_debate_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.moa import MoAContext, MoAOutput, build_moa_graph
from agora.graphs.runner import run_problems
from agora.tasks import Problem
from agora.traces.store import TraceStore

MC = {"question": "Which gas do plants absorb?\nA. Oxygen\nB. Nitrogen\nC. Carbon dioxide\nD. Helium",
      "question_id": "q1", "kind": "mc", "n_choices": 4, "gold": "B"}


class Crash(BaseException):
    """Not an Exception: the pool does not retry it (like a killed process)."""


def respond_by_role(first, later, crash_at=None):
    """Answers ``later`` once it has seen other answers (aggregator, later debate rounds), else ``first``;
    raises :class:`Crash` at its ``crash_at``-th call."""
    count = {"n": 0}

    def respond(messages, i):
        count["n"] += 1
        if count["n"] == crash_at:
            raise Crash
        shown = "other agents" in messages[-1]["content"] or "Responses from several" in messages[-1]["content"]
        return f"The answer is {later if shown else first}."
    return respond


def pool_ab(crash_b=None):
    models = {"a": ScriptedChatModel(respond=respond_by_role("A", "B")),
              "b": ScriptedChatModel(respond=respond_by_role("C", "B", crash_b))}
    return ModelPool.from_chat_models(models, max_retries=0), models


def test_moa_proposers_in_parallel_then_the_aggregator_with_hand_counted_costs():
    pool, models = pool_ab()
    out = build_moa_graph().compile().invoke(MC, context=MoAContext(pool))
    assert set(out) == set(MoAOutput.__annotations__)
    assert [(p["agent"], p["model"], p["answer"]) for p in out["proposals"]] == [(0, "a", "A"), (1, "b", "C")]
    assert (out["aggregator"], out["answer"], out["how"]) == ("a", "B", "marker")
    # 2 proposals + 1 aggregation, 4 tokens each (ScriptedChatModel counts words)
    assert out["methods"]["moa"] == {"answer": "B", "correct": True, "calls": 3, "samples": 3,
                                     "completion_tokens": 12, "latency_s": 0.0, "how": "marker"}
    vote = out["methods"]["proposal_vote"]  # A vs C, one each: the first proposal's answer wins the tie
    assert (vote["answer"], vote["correct"], vote["calls"], vote["samples"]) == ("A", False, 2, 2)
    assert out["costs"]["propose"]["calls"] == 2 and out["costs"]["aggregate"]["calls"] == 1
    assert [len(m.calls) for m in models.values()] == [2, 1]  # a proposed and aggregated


def test_moa_calls_carry_nodes_partners_and_the_seeds_comed_always_used():
    pool, _ = pool_ab()
    out = build_moa_graph().compile().invoke(MC, context=MoAContext(pool, MoAConfig(aggregator="b", seed=3)),
                                             output_keys=["calls"])
    base = question_seed(3, "q1")
    assert [(c["node"], c["role"], c["model"], c.get("agent"), c["partner"], c["params"]["seed"]) for c in out["calls"]] == [
        ("moa_propose", "proposer", "a", 0, None, base + 301), ("moa_propose", "proposer", "b", 1, None, base + 302),
        ("moa_aggregate", "aggregator", "b", None, "a,b", base + 401)]


def test_moa_names_a_model_not_in_the_pool():
    pool, _ = pool_ab()
    with pytest.raises(ValueError, match=r"MoAConfig.aggregator: 'z' is not in the pool \(a, b\)"):
        build_moa_graph().compile().invoke(MC, context=MoAContext(pool, MoAConfig(aggregator="z")))
    with pytest.raises(ValueError, match="MoAConfig.top_p"):
        MoAConfig(top_p=0)


def test_debate_first_round_shares_a_request_per_model_then_every_agent_sees_the_others():
    pool, models = pool_ab()
    out = build_debate_graph().compile().invoke(MC, context=DebateContext(pool))
    assert set(out) == set(DebateOutput.__annotations__)
    assert [[(a["agent"], a["model"], a["answer"]) for a in r] for r in out["rounds"]] == [
        [(0, "a", "A"), (1, "b", "C"), (2, "a", "A")], [(0, "a", "B"), (1, "b", "B"), (2, "a", "B")]]
    # round 1: a (agents 0 and 2, one request of n = 2) + b; round 2: one request per agent
    assert out["methods"]["debate"]["calls"] == 5 and out["methods"]["debate"]["samples"] == 6
    first = out["methods"]["first_round_vote"]
    assert (first["answer"], first["correct"], first["calls"], first["samples"]) == ("A", False, 2, 3)
    assert (out["answer"], out["methods"]["debate"]["correct"]) == ("B", True)
    assert [len(m.calls) for m in models.values()] == [3, 2]
    assert agent_models(DebateConfig(agents=3, models=("b",)), ["a", "b"]) == ["b", "b", "b"]
    with pytest.raises(ValueError, match="DebateConfig.models: 'z' is not in the pool"):
        agent_models(DebateConfig(models=("z",)), ["a", "b"])


def test_debate_partners_and_seeds():
    pool, _ = pool_ab()
    out = build_debate_graph().compile().invoke(MC, context=DebateContext(pool, DebateConfig(seed=1)),
                                                output_keys=["calls"])
    base = question_seed(1, "q1") + 500
    got = sorted((c["params"]["seed"] - base, c["model"], c.get("agent"), c["partner"], c["params"]["n"]) for c in out["calls"])
    # one trace row per sample: a's round-1 request (n = 2, agents 0 and 2) is two rows
    assert got == [(0, "a", 0, None, 2), (0, "a", 0, None, 2), (10, "b", 1, None, 1),  # round 1: offset 10·j per model
                   (50, "a", 0, "b,a", 1), (51, "b", 1, "a", 1), (52, "a", 2, "a,b", 1)]  # round 2: 50 + agent


def test_async_runs_give_the_same_results():
    pool, _ = pool_ab()
    for build, ctx in ((build_moa_graph, MoAContext(pool)), (build_debate_graph, DebateContext(pool))):
        graph = build().compile()
        assert asyncio.run(graph.ainvoke(MC, context=ctx))["methods"] == graph.invoke(MC, context=ctx)["methods"]


def test_debate_resumes_after_a_crash_without_redoing_finished_requests(tmp_path):
    pool, _ = pool_ab()
    reference = build_debate_graph().compile(checkpointer=InMemorySaver())
    reference.invoke(MC, {"configurable": {"thread_id": "ref"}}, context=DebateContext(pool))
    pool, models = pool_ab(crash_b=2)  # b's round-2 answer, while a answers for agents 0 and 2
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_debate_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t"}}
        with pytest.raises(Crash):
            graph.invoke(MC, thread, context=DebateContext(pool))
        # the crashed round is pending: one task, or two when a's concurrent task was cut short too (load)
        assert set(graph.get_state(thread).next) == {"debate_round"}
        graph.invoke(None, thread, context=DebateContext(pool))
        resumed = graph.get_state(thread).values
    assert resumed["methods"] == reference.get_state({"configurable": {"thread_id": "ref"}}).values["methods"]
    # b: round 1, its crashed round-2 request, that request again; a: round 1 (one request for agents
    # 0 and 2) is not redone, its round-2 requests at most once more if the crash cut them short
    assert len(models["b"].calls) == 3 and 3 <= len(models["a"].calls) <= 5


def comed_config(**kw):
    return EscalationConfig(thresholds=EscalationThresholds(tau_hi=0.7, tau_lo=0.34), **kw)


def test_comed_embeds_moa_and_debate_as_the_standalone_protocols():
    """COMED's baselines are the MoA and debate graphs: same answers, costs and trace records as
    running those protocols alone with the anchor as MoA's aggregator."""
    pool, _ = pool_ab()
    comed = build_escalation_graph().compile().invoke(MC, context=EscalationContext(pool, comed_config()),
                                                      output_keys=["methods", "calls", "moa", "debate"])
    moa = build_moa_graph().compile().invoke(MC, context=MoAContext(pool, MoAConfig(aggregator="a")),
                                             output_keys=["methods", "calls"])
    debate = build_debate_graph().compile().invoke(MC, context=DebateContext(pool), output_keys=["methods", "calls", "rounds"])
    assert comed["methods"]["moa"] == moa["methods"]["moa"]
    assert comed["methods"]["debate"] == debate["methods"]["debate"]
    assert comed["debate"] == debate["rounds"]

    def rows(calls, nodes):
        return sorted(((c["node"], c["model"], c.get("agent"), c["partner"], c["params"]["seed"], c["completion"])
                       for c in calls if c["node"] in nodes), key=repr)

    assert rows(comed["calls"], {"moa_propose", "moa_aggregate"}) == rows(moa["calls"], {"moa_propose", "moa_aggregate"})
    assert rows(comed["calls"], {"debate_round"}) == rows(debate["calls"], {"debate_round"})


def test_comed_streams_the_subgraphs_events_and_resumes_inside_a_subgraph(tmp_path):
    pool, _ = pool_ab()
    cfg = comed_config(moa_aggregator="b")
    graph = build_escalation_graph().compile()
    events = [chunk["event"] for _, mode, chunk in graph.stream(MC, context=EscalationContext(pool, cfg),
                                                               stream_mode=["custom"], subgraphs=True)]
    # SC 1 (a answers A three times): accepted; then the two subgraphs' own events
    assert events == ["route", "anchor", "decide", "accept", "moa_propose", "moa_aggregate", "debate_round",
                      "debate_round", "debate_vote", "score"]

    reference = build_escalation_graph().compile(checkpointer=InMemorySaver())
    reference.invoke(MC, {"configurable": {"thread_id": "ref"}}, context=EscalationContext(pool, cfg))
    pool, models = pool_ab(crash_b=2)  # b's 1st call is its MoA proposal, its 2nd the aggregation
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_escalation_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t"}}
        with pytest.raises(Crash):
            graph.invoke(MC, thread, context=EscalationContext(pool, cfg))
        assert graph.get_state(thread).next == ("moa",)
        assert (len(models["a"].calls), len(models["b"].calls)) == (2, 2)  # anchor + proposal; proposal + crash
        graph.invoke(None, thread, context=EscalationContext(pool, cfg))
        resumed = graph.get_state(thread).values
    assert resumed["methods"] == reference.get_state({"configurable": {"thread_id": "ref"}}).values["methods"]
    # the MoA subgraph resumed at its aggregation: no proposal was asked again; then the debate
    # (a: round 1 for agents 0 and 2, round 2 twice; b: round 1, round 2)
    assert (len(models["a"].calls), len(models["b"].calls)) == (2 + 3, 2 + 1 + 2)


def test_run_problems_records_moa_and_debate_questions():
    pool, _ = pool_ab()
    store = TraceStore(":memory:")
    problem = Problem(id="q1", question=MC["question"], gold="B", kind="mc", n_choices=4)
    for name, builder, ctx in (("moa", build_moa_graph, MoAContext(pool)), ("debate", build_debate_graph, DebateContext(pool))):
        from agora.graphs.registry import get

        run_problems(builder(), [problem], store=store, run_id=name, protocol=name, context=ctx, config={},
                     pool_description=[], dataset={}, detail=get(name).detail)
        results = {r["method"]: r["answer"] for r in store.results(name)}
        assert results == ({"moa": "B", "proposal_vote": "A"} if name == "moa" else {"debate": "B", "first_round_vote": "A"})
    assert len(store.calls("moa")) == 3 and len(store.calls("debate")) == 6  # one row per sample
    # requests per method are a column of results (no longer only inside COMED's detail JSON)
    assert {r["method"]: r["calls"] for r in store.results("moa")} == {"moa": 3, "proposal_vote": 2}
    assert {r["method"]: r["calls"] for r in store.results("debate")} == {"debate": 5, "first_round_vote": 2}


def test_a_database_from_before_results_calls_opens_and_reads(tmp_path):
    import sqlite3 as sq

    from agora.traces.report import method_table

    path = tmp_path / "old.db"
    with sq.connect(path) as conn:  # the results table as it was: no calls column
        conn.execute("create table results (run_id text, question_id text, method text, answer text, correct "
                     "integer, samples integer, completion_tokens integer, latency_s float, how text, "
                     "primary key (run_id, question_id, method))")
        conn.execute("create table questions (run_id text, question_id text, idx integer, primary key (run_id, question_id))")
        conn.execute("insert into results values ('r', 'q', 'comed', 'A', 1, 3, 9, 0.5, 'marker')")
        conn.execute("insert into questions values ('r', 'q', 0)")
    [row] = method_table(TraceStore(path, readonly=True), "r")  # a report reads it as it is
    assert (row.method, row.accuracy) == ("comed", 1.0)
    store = TraceStore(path)  # a writer adds the column, NULL for old rows
    assert store.results("r")[0]["calls"] is None


def pool_file(path, url, models=("m1", "m2")):
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nmodel = "{m}"\nbase_url = "{url}"\n'
                            "max_retries = 0\n\n" for m in models))
    return path


@pytest.mark.parametrize("command", ["moa", "debate"])
def test_agora_run_moa_and_debate(tmp_path, command):
    db = tmp_path / "t.db"
    with StubServer(lambda path, body: (200, chat_reply(body, ["The answer is 4."]))) as server:
        pool = pool_file(tmp_path / "pool.toml", server.base_url)
        args = ["run", command, "--format", "synthetic", "--limit", "2", "--pool", str(pool), "--db", str(db),
                "--run-id", "r", "--max-tokens", "16"]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        methods = ("moa", "proposal_vote") if command == "moa" else ("debate", "first_round_vote")
        assert all(m in out.output for m in methods)
        t = sqlite_utils.Database(db)
        assert t["runs"].get("r")["protocol"] == command and t["questions"].count == 2
        assert {r["method"] for r in t["results"].rows} == set(methods)
        again = CliRunner().invoke(app, args)
        assert again.exit_code == 0 and "resumed: 2 of 2 questions already done" in again.output
    bad = CliRunner().invoke(app, ["run", command, "--format", "synthetic", "--pool", str(pool), "--db", str(db),
                                   *(["--aggregator", "zz"] if command == "moa" else ["--models", "zz"])])
    assert bad.exit_code == 2 and "'zz' is not in the pool" in bad.output


def test_settings_from_a_config_file_with_the_command_line_winning(tmp_path):
    import json

    db = tmp_path / "t.db"
    (tmp_path / "debate.toml").write_text("[debate]\nagents = 2\nrounds = 1\ntop_p = 0.5\nmodels = [\"m2\"]\n")
    (tmp_path / "bad.toml").write_text("[debate]\nagent = 2\n")
    with StubServer(lambda path, body: (200, chat_reply(body, ["The answer is 4."]))) as server:
        pool = pool_file(tmp_path / "pool.toml", server.base_url)
        base = ["run", "debate", "--format", "synthetic", "--limit", "1", "--pool", str(pool), "--db", str(db)]
        out = CliRunner().invoke(app, [*base, "--config", str(tmp_path / "debate.toml"), "--rounds", "2", "--run-id", "c"])
        assert out.exit_code == 0, out.output
        config = json.loads(sqlite_utils.Database(db)["runs"].get("c")["config"])
        assert (config["agents"], config["rounds"], config["top_p"], config["models"]) == (2, 2, 0.5, ["m2"])
        bad = CliRunner().invoke(app, [*base, "--config", str(tmp_path / "bad.toml")])
        assert bad.exit_code == 2 and "[debate] DebateConfig: unknown field(s) agent" in bad.output
        missing = CliRunner().invoke(app, [*base, "--config", str(tmp_path / "none.toml")])
        assert missing.exit_code == 2 and "no such file" in missing.output


@pytest.mark.parametrize(("command", "cls"), [("moa", MoAConfig), ("debate", DebateConfig)])
def test_options_are_the_settings_fields(tmp_path, command, cls):
    import dataclasses

    import typer.main

    params = {p.name: p for p in typer.main.get_command(app).commands["run"].commands[command].params}
    for f in dataclasses.fields(cls):
        assert f"--{f.name.replace('_', '-')}" in params[f.name].opts and params[f.name].help, f.name
    bad = CliRunner().invoke(app, ["run", command, "--format", "synthetic", "--temperature", "5", "--db", str(tmp_path / "t.db")])
    assert bad.exit_code == 2 and f"{cls.__name__}.temperature must be in [0, 2.0], got 5.0" in bad.output
