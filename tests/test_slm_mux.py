"""SLM-MUX (agents/slm_mux.py, graphs/slm_mux.py) and ALIGN's calibrated utility
(agents/delegation.py): the rules against hand-computed values, a scripted pool where selection is
right and the vote over every sample is wrong, the graph end to end recorded in a trace DB, the CLI
through the registry, and reliabilities read from a dev run."""

from __future__ import annotations

import json

import pytest

from agora.agents.delegation import (
    DelegationConfig,
    agreement_utility,
    best_of_n,
    calibrated_utility,
    principal_utility,
)
from agora.agents.reliability import dev_accuracy_pairs
from agora.agents.slm_mux import SLMMuxConfig, member_confidence, mux_select, top_member, vote_all


def conf(member, model, answer, confidence, acc=None):
    return {"member": member, "model": model, "answer": answer, "confidence": confidence, "dev_accuracy": acc}


# ---------------------------------------------------------------------------- the rules, by hand


def test_member_confidence_is_the_share_of_k_on_the_plurality():
    # f(7) = 2/4, f(8) = 1/4, one sample without an answer still counts in k = 4
    c = member_confidence({"member": 0, "model": "a", "answers": ["7", "8", "7", None]}, {"a": 0.3})
    assert (c["answer"], c["confidence"], c["dev_accuracy"]) == ("7", 0.5, 0.3)
    # no answer at all: s = 0
    assert member_confidence({"member": 1, "model": "b", "answers": [None, None]})["confidence"] == 0.0
    # an answer tie inside one member goes to the answer sampled first
    assert member_confidence({"member": 0, "model": "a", "answers": ["9", "4", "4", "9"]})["answer"] == "9"


def test_mux_select_highest_confidence_then_dev_accuracy_then_order():
    # the paper's worked example: SLM 1 (A, 2/3) and SLM 2 (B, 2/3) tie; SLM 1's validation accuracy is higher
    chosen = mux_select([conf(0, "slm1", "A", 2 / 3, 0.7), conf(1, "slm2", "B", 2 / 3, 0.4), conf(2, "slm3", "A", 1 / 3, 0.9)])
    assert (chosen["model"], chosen["answer"], chosen["tie"]) == ("slm1", "A", True)
    # confidence first: the less accurate member wins with 3/3 against 2/3
    chosen = mux_select([conf(0, "a", "A", 2 / 3, 0.9), conf(1, "b", "B", 1.0, 0.1)])
    assert (chosen["member"], chosen["answer"], chosen["confidence"], chosen["tie"]) == (1, "B", 1.0, False)
    # a measured accuracy beats an unmeasured one; with none measured the earlier member wins
    assert mux_select([conf(0, "a", "A", 0.5), conf(1, "b", "B", 0.5, 0.0)])["model"] == "b"
    assert mux_select([conf(0, "a", "A", 0.5), conf(1, "b", "B", 0.5)])["model"] == "a"
    # a member without answers never wins over one with an answer; none at all: no answer
    assert mux_select([conf(0, "a", None, 0.0, 1.0), conf(1, "b", "B", 1 / 3, 0.1)])["answer"] == "B"
    assert mux_select([conf(0, "a", None, 0.0)])["answer"] is None
    assert mux_select([])["member"] == -1


def test_top_member_and_the_pooled_vote():
    cs = [conf(0, "a", "A", 1.0, 0.2), conf(1, "b", "B", 1 / 3, 0.6)]
    assert top_member(cs)["model"] == "b"
    assert top_member([conf(0, "a", "A", 1.0), conf(1, "b", "B", 1.0)])["model"] == "a"
    votes = [{"member": 1, "model": "b", "answers": ["5", "5", None]}, {"member": 0, "model": "a", "answers": ["7", "5", "7"]}]
    assert vote_all(votes) == ("5", 3 / 6)


def test_settings_are_checked_in_one_line():
    assert SLMMuxConfig(dev_accuracy={"a": 0.5, "b": 1}).dev_accuracy == (("a", 0.5), ("b", 1.0))
    assert SLMMuxConfig(dev_accuracy=("a=0.25", " b = 0.5")).dev_accuracy == (("a", 0.25), ("b", 0.5))
    assert SLMMuxConfig(dev_accuracy=[["a", 0.25]]).dev_accuracy == (("a", 0.25),)
    for bad, said in [({"a": 1.5}, "a's accuracy must be a finite number in [0, 1], got 1.5"),
                      (("a:0.5",), "entry 'a:0.5' is not member=accuracy"),
                      (("a=x",), "'x' is not a number"),
                      (("a=0.1", "a=0.2"), "'a' is given twice"),
                      ({"a": True}, "got True"),
                      ("a=0.5", "must be a mapping")]:
        with pytest.raises(ValueError, match="^SLMMuxConfig.dev_accuracy") as err:
            SLMMuxConfig(dev_accuracy=bad)
        assert said in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="SLMMuxConfig.k_samples must be an integer >= 1, got 0"):
        SLMMuxConfig(k_samples=0)
    with pytest.raises(ValueError, match="SLMMuxConfig.models must be a tuple of non-empty names"):
        SLMMuxConfig(models="ab")
    assert dev_accuracy_pairs("X", "f", {}) == ()


# ---------------------------------------------------------------------------- ALIGN's calibrated utility


def test_calibrated_utility_by_hand():
    props = [{"model": "big", "answer": "4", "signal": 1.0},
             {"model": "small", "answer": "5", "signal": 2 / 3},
             {"model": "mid", "answer": "5", "signal": 1 / 3}]
    r = {"big": 0.6, "small": 0.15, "mid": 0.3}
    # weights r·s: 0.6, 0.1, 0.1 -> U(4) = 0.6/0.8 = 0.75, U(5) = 0.2/0.8 = 0.25
    assert calibrated_utility(["4", "5", None, "9"], props, r) == pytest.approx([0.75, 0.25, 0.0, 0.0])
    # unweighted agreement on the same proposals: U(4) = 1/2, U(5) = 1/2
    assert agreement_utility(["4", "5"], props) == pytest.approx([0.5, 0.5])
    # equal reliabilities give the agreement utility back
    assert calibrated_utility(["4", "5"], props, {m: 0.4 for m in r}) == pytest.approx([0.5, 0.5])
    assert calibrated_utility(["4"], props, {m: 0.0 for m in r}) == [0.0]
    assert principal_utility("agreement", ["4"], props) == pytest.approx([0.5])
    with pytest.raises(KeyError, match="no dev accuracy for member\\(s\\) mid"):
        calibrated_utility(["4"], props, {"big": 0.6, "small": 0.1})


def test_best_of_n_takes_the_configured_utility():
    cands = [{"agent": 0, "index": 0, "answer": "5"}, {"agent": 1, "index": 0, "answer": "4"}]
    props = [{"model": "small", "answer": "5", "signal": 1.0}, {"model": "big", "answer": "4", "signal": 0.5}]
    assert best_of_n(cands, props)[0] == "5"  # U(5) = 2/3 unweighted
    answer, u = best_of_n(cands, props, "calibrated", {"small": 0.1, "big": 0.8})  # 0.4 / 0.5 for 4
    assert (answer, u) == ("4", pytest.approx(0.8))


def test_delegation_config_names_and_checks_the_utility():
    cfg = DelegationConfig(utility="calibrated", dev_accuracy=("a=0.5",))
    assert cfg.dev_accuracy == (("a", 0.5),)
    assert DelegationConfig(utility="calibrated", dev_run="dev").dev_run == "dev"
    with pytest.raises(ValueError, match="DelegationConfig.utility must be 'agreement' or 'calibrated', got 'judge'"):
        DelegationConfig(utility="judge")
    with pytest.raises(ValueError, match="DelegationConfig.utility 'calibrated' needs member reliabilities"):
        DelegationConfig(utility="calibrated")
    with pytest.raises(ValueError, match="DelegationConfig.dev_accuracy: b's accuracy"):
        DelegationConfig(dev_accuracy={"b": -0.1})


# ---------------------------------------------------------------------------- the graph, end to end

from openai_stub import StubServer, chat_reply  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from agora.agents.seeds import call_seed  # noqa: E402
from agora.agents.slm_mux import MEMBER  # noqa: E402
from agora.graphs.delegation import DelegationContext, build_delegation_graph  # noqa: E402
from agora.graphs.runner import run_protocol  # noqa: E402
from agora.graphs.slm_mux import SLMMuxContext, build_slm_mux_graph  # noqa: E402
from agora.models.pool import ModelPool  # noqa: E402
from agora.models.testing import ScriptedChatModel  # noqa: E402
from agora.tasks import Problem  # noqa: E402
from agora.traces.reliability import DevRunError, dev_accuracy  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402

APPLES = Problem(id="q1", question="Tom has 3 apples and buys 4 more. How many apples does he have?", gold="7",
                 kind="math")


def said(*answers):
    return [f"So the answer is {a}." for a in answers]


def correlated_pool():
    """One reliable member (7, 7, 7) and two members wrong the same way (8, 8, 9 and 8, 8, 5): the
    plurality over all nine samples is 8 (four votes against three), the most self-consistent member
    says 7."""
    models = {"reliable": ScriptedChatModel(responses=said(7, 7, 7), cycle=True),
              "wrong1": ScriptedChatModel(responses=said(8, 8, 9), cycle=True),
              "wrong2": ScriptedChatModel(responses=said(8, 8, 5), cycle=True)}
    return ModelPool.from_chat_models(models, max_retries=0), models


def test_selection_beats_the_vote_on_a_pool_with_correlated_errors(tmp_path):
    pool, models = correlated_pool()
    db = tmp_path / "t.db"
    store = TraceStore(db)
    run_protocol("slm-mux", [APPLES], store=store, run_id="mux", context=SLMMuxContext(pool),
                 config={}, pool_description=[], dataset={})
    results = {r["method"]: (r["answer"], r["correct"], r["samples"], r["calls"]) for r in store.results("mux")}
    assert results == {"slm-mux": ("7", 1, 9, 3), "mux_vote": ("8", 0, 9, 3), "mux_top": ("7", 1, 3, 1)}
    calls = store.calls("mux")
    assert len(calls) == 9 and {c["role"] for c in calls} == {"member"} and {c["node"] for c in calls} == {"mux_sample"}
    assert all(c["partner"] is None for c in calls)  # no member saw another's output
    [q] = store.questions("mux")
    detail = json.loads(q["detail"])
    assert [(c["model"], c["answer"], round(c["confidence"], 4)) for c in detail["confidences"]] == [
        ("reliable", "7", 1.0), ("wrong1", "8", 0.6667), ("wrong2", "8", 0.6667)]
    assert detail["selection"] == {"member": 0, "model": "reliable", "answer": "7", "confidence": 1.0, "tie": False}
    # one request of k = 3 per member, seeded per member
    seeds = {m: c.calls[0]["seed"] for m, c in models.items()}
    assert seeds == {m: call_seed(0, "q1", MEMBER, agent=i) for i, m in enumerate(models)}
    assert all(len(c.calls) == 1 and c.calls[0]["n"] == 3 for c in models.values())


def test_align_with_the_calibrated_utility_follows_the_reliable_member():
    pool, _ = correlated_pool()
    problem = {"question": APPLES.question, "question_id": "q1", "kind": "math"}
    graph = build_delegation_graph().compile()
    plain = graph.invoke(problem, context=DelegationContext(pool, DelegationConfig(n_agents=3, k_samples=3)))
    # agreement: U(8) = (2/3 + 2/3) / (1 + 4/3) = 4/7 beats U(7) = 3/7
    assert plain["answer"] == "8" and plain["selection"]["utility"] == pytest.approx(4 / 7)
    pool, _ = correlated_pool()
    cfg = DelegationConfig(n_agents=3, k_samples=3, utility="calibrated",
                           dev_accuracy={"reliable": 0.9, "wrong1": 0.2, "wrong2": 0.2})
    out = graph.invoke(problem, context=DelegationContext(pool, cfg))
    # weights r·s: 0.9, 0.2·2/3, 0.2·2/3 -> U(7) = 0.9 / (0.9 + 0.8/3) = 27/35
    assert out["answer"] == "7" and out["selection"]["utility"] == pytest.approx(27 / 35)
    assert out["selection"]["accepted"] and out["methods"]["best_of_n"]["answer"] == "7"
    assert out["methods"]["self_consistency"]["answer"] == "8"
    missing = DelegationConfig(n_agents=3, utility="calibrated", dev_accuracy={"reliable": 0.9})
    with pytest.raises(ValueError, match="DelegationConfig.dev_accuracy: no accuracy for member\\(s\\) wrong1, wrong2"):
        graph.invoke(problem, context=DelegationContext(correlated_pool()[0], missing))


def test_dev_accuracy_read_from_a_dev_run_breaks_a_confidence_tie(tmp_path):
    db = tmp_path / "t.db"
    store = TraceStore(db)
    dev = Problem(id="d1", question="What is 2 + 2?", gold="4", kind="math")
    dev_models = {"a": ScriptedChatModel(responses=said(4, 5, 5), cycle=True),
                  "b": ScriptedChatModel(responses=said(4, 4, 9), cycle=True)}
    run_protocol("slm-mux", [dev], store=store, run_id="dev", context=SLMMuxContext(ModelPool.from_chat_models(dev_models)),
                 config={}, pool_description=[], dataset={})
    assert dev_accuracy(db, "dev") == pytest.approx({"a": 1 / 3, "b": 2 / 3})
    with pytest.raises(DevRunError, match="dev run 'nope': no such run in"):
        dev_accuracy(db, "nope")
    with pytest.raises(DevRunError, match="trace database .*missing.db not found"):
        dev_accuracy(tmp_path / "missing.db", "dev")
    # a tie: a says 7 twice, b says 8 twice (2/3 each); the dev run ranks b first
    tied = {"a": ScriptedChatModel(responses=said(7, 7, 1), cycle=True),
            "b": ScriptedChatModel(responses=said(8, 8, 2), cycle=True)}
    pool = ModelPool.from_chat_models(tied)
    graph = build_slm_mux_graph().compile()
    q = {"question": APPLES.question, "question_id": "q1", "kind": "math"}
    out = graph.invoke(q, context=SLMMuxContext(pool, SLMMuxConfig(dev_run="dev", dev_db=str(db))))
    assert (out["answer"], out["selection"]["model"], out["selection"]["tie"]) == ("8", "b", True)
    assert [c["dev_accuracy"] for c in out["confidences"]] == pytest.approx([1 / 3, 2 / 3])
    assert out["methods"]["mux_top"]["answer"] == "8"
    # a given accuracy wins over the dev run's; none at all: the earlier member
    given = SLMMuxConfig(dev_run="dev", dev_db=str(db), dev_accuracy=("a=0.9",))
    assert graph.invoke(q, context=SLMMuxContext(pool, given))["answer"] == "7"
    assert graph.invoke(q, context=SLMMuxContext(pool, SLMMuxConfig()))["answer"] == "7"


def test_members_take_the_bench_shared_candidates_and_async_runs_agree():
    import asyncio

    pool, models = correlated_pool()
    shared = [{"model": "wrong1", "text": t, "call_id": f"s{i}", "sample_index": i, "completion_tokens": 2,
               "latency_s": 0.5} for i, t in enumerate(said(7, 7, 8))]
    q = {"question": APPLES.question, "question_id": "q1", "kind": "math", "shared_candidates": {"wrong1": shared}}
    graph = build_slm_mux_graph().compile()
    out = asyncio.run(graph.ainvoke(q, context=SLMMuxContext(pool)))
    assert models["wrong1"].calls == []  # its three samples came from the shared pool
    assert [c["answer"] for c in out["confidences"]] == ["7", "7", "8"]
    assert out["methods"]["mux_vote"]["answer"] == "7"  # 7 ×5 against 8 ×3
    assert out["methods"]["slm-mux"]["shared_samples"] == 3 and out["costs"]["sample"]["calls"] == 3
    with pytest.raises(ValueError, match="SLMMuxConfig.models: 'zz' is not in the pool"):
        graph.invoke(q, context={"pool": pool, "config": {"models": ["zz"]}})


def test_agora_run_slm_mux_through_the_registry(tmp_path):
    from agora.cli.main import app

    db = tmp_path / "t.db"
    with StubServer(lambda path, body: (200, chat_reply(body, ["The answer is 4."] * body.get("n", 1)))) as server:
        pool = tmp_path / "pool.toml"
        pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nmodel = "{m}"\nbase_url = '
                                f'"{server.base_url}"\nmax_retries = 0\n\n' for m in ("m1", "m2")))
        args = ["run", "slm-mux", "--format", "synthetic", "--limit", "2", "--pool", str(pool), "--db", str(db),
                "--run-id", "r", "--max-tokens", "16", "--k-samples", "2", "--dev-accuracy", "m1=0.4,m2=0.6"]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        assert "2 members × 2 samples" in out.output and all(m in out.output for m in ("slm-mux", "mux_vote", "mux_top"))
        run = TraceStore(db, readonly=True).get_run("r")
        assert run["protocol"] == "slm-mux"
        assert json.loads(run["config"])["dev_accuracy"] == [["m1", 0.4], ["m2", 0.6]]
    bad = CliRunner().invoke(app, ["run", "slm-mux", "--format", "synthetic", "--db", str(db), "--dev-accuracy", "m1=2"])
    assert bad.exit_code == 2 and "SLMMuxConfig.dev_accuracy: m1's accuracy must be a finite number in [0, 1], got 2.0" in bad.output


def test_agora_run_align_with_the_calibrated_utility(tmp_path):
    from agora.cli.main import app

    db = tmp_path / "t.db"
    with StubServer(lambda path, body: (200, chat_reply(body, ["The answer is 4."] * body.get("n", 1)))) as server:
        pool = tmp_path / "pool.toml"
        pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nmodel = "{m}"\nbase_url = '
                                f'"{server.base_url}"\nmax_retries = 0\n\n' for m in ("m1", "m2")))
        base = ["run", "align", "--format", "synthetic", "--limit", "1", "--pool", str(pool), "--db", str(db),
                "--max-tokens", "16", "--samples", "2"]
        out = CliRunner().invoke(app, [*base, "--run-id", "dev"])
        assert out.exit_code == 0, out.output
        out = CliRunner().invoke(app, [*base, "--run-id", "cal", "--utility", "calibrated", "--dev-run", "dev",
                                       "--dev-accuracy", "m1=0.5"])
        assert out.exit_code == 0, out.output
        config = json.loads(TraceStore(db, readonly=True).get_run("cal")["config"])
        assert (config["utility"], config["dev_accuracy"], config["dev_run"], config["dev_db"]) == (
            "calibrated", [["m1", 0.5]], "dev", str(db))
    bad = CliRunner().invoke(app, [*base, "--run-id", "x", "--utility", "calibrated"])
    assert bad.exit_code == 2 and "DelegationConfig.utility 'calibrated' needs member reliabilities" in bad.output
    bad = CliRunner().invoke(app, [*base, "--run-id", "y", "--utility", "judge"])
    assert bad.exit_code == 2 and "DelegationConfig.utility must be 'agreement' or 'calibrated', got 'judge'" in bad.output


def test_slm_mux_is_a_comed_baseline_and_a_bench_method_through_the_registry():
    from agora.agents.escalation import EscalationConfig, EscalationThresholds
    from agora.graphs.escalation import EscalationContext, build_escalation_graph
    from agora.runs.bench_plan import BenchConfig, protocol_of, resolve_methods, sharing

    assert resolve_methods("slm-mux") == ("slm-mux", "mux_vote")
    assert protocol_of()["slm-mux"] == protocol_of()["mux_vote"] == "comed"
    assert sharing()["mux_vote"].startswith("SLM-MUX's samples")
    assert BenchConfig(methods=("comed", "mux_vote")).baselines == ("slm-mux",)
    pool, models = correlated_pool()
    cfg = EscalationConfig(thresholds=EscalationThresholds(0.5, 0.34), anchor="wrong1", baselines=("slm-mux",))
    graph = build_escalation_graph().compile()
    assert "slm-mux" in graph.get_graph().nodes
    q = {"question": APPLES.question, "question_id": "q1", "kind": "math", "gold": "7"}
    out = graph.invoke(q, context=EscalationContext(pool, cfg), output_keys=["methods", "calls", "costs"])
    assert (out["methods"]["slm-mux"]["answer"], out["methods"]["mux_vote"]["answer"]) == ("7", "8")
    # k = COMED's N = 3 per member, one request each
    assert out["methods"]["slm-mux"]["calls"] == out["costs"]["slm-mux"]["calls"] == 3
    assert len([c for c in out["calls"] if c["node"] == "mux_sample"]) == 9


def test_a_member_named_twice_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^SLMMuxConfig\.models: 'A' named more than once"):
        SLMMuxConfig(models=["A", "A"])


def test_dev_accuracy_of_a_member_outside_the_pool_is_refused_naming_the_members():
    from agora.agents.slm_mux import check_pool
    config = SLMMuxConfig(dev_accuracy=(("a", 0.5), ("zz", 0.3)))
    with pytest.raises(ValueError, match=r"^SLMMuxConfig\.dev_accuracy: 'zz' not among the members \(a, b\)$"):
        check_pool(config, ["a", "b"])
    check_pool(SLMMuxConfig(dev_accuracy=(("a", 0.5),)), ["a", "b"])  # a known member passes
