"""Protocol settings are checked where they are built: a wrong type, a bool for a count, NaN/inf or
an out-of-range value is one ``ValueError`` naming the class, the field and the value, whether the
settings are built in Python or sent as a dict in a graph's context (as Studio and the HTTP API do);
and a CUPID session is blind (no model behind A or B is named) until it ends."""

import json
import re

import numpy as np
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from typer.testing import CliRunner

import agora.cli.select as select_cli
from agora.agents.council import CouncilConfig
from agora.agents.cupid import CupidConfig
from agora.agents.debate import DebateConfig
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.agents.matching import MatchConfig
from agora.agents.moa import MoAConfig
from agora.agents.panel import DiversityConfig
from agora.agents.reputation import ReputationConfig
from agora.cli.main import app
from agora.graphs import registry
from agora.graphs.context import pool_base_dir, resolve_pool
from agora.graphs.candidates import CandidatesConfig, CandidatesContext
from agora.graphs.conversation import ConversationConfig
from agora.graphs.duel import DuelConfig
from agora.graphs.selection import SelectionContext, build_selection_graph
from agora.models.pool import ModelPool, ModelSpec, PoolConfigError, PoolMember
from agora.models.testing import ScriptedChatModel

NAN, INF = float("nan"), float("inf")

BAD = [
    # (settings class, field, bad value, the message's "must be ..." part)
    (DelegationConfig, "k_samples", True, "an integer >= 1"),
    (DelegationConfig, "n_agents", "2", "an integer >= 1"),
    (DelegationConfig, "n_agents", 2.0, "an integer >= 1"),
    (DelegationConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (DelegationConfig, "temperature", NAN, "a finite number in [0, 2]"),
    (DelegationConfig, "tau", -0.1, "a finite number in [0, 1]"),
    (DelegationConfig, "tau", NAN, "a finite number in [0, 1]"),
    (DelegationConfig, "top_p", 0.0, "a finite number in (0, 1]"),
    (DelegationConfig, "max_tokens", True, "an integer >= 1"),
    (DelegationConfig, "shots", -1, "an integer >= 0"),
    (DelegationConfig, "seed", "0", "an integer"),
    (DelegationConfig, "models", "qwen", "a tuple of non-empty names"),
    (DelegationConfig, "proposal_rule", "best", "'plurality' or 'first'"),
    (DiversityConfig, "min_turns", True, "an integer >= 1"),
    (DiversityConfig, "panel_size", 1, "an integer >= 2"),
    (DiversityConfig, "level", NAN, "a finite number in (0, 1)"),
    (DiversityConfig, "resamples", 10.5, "an integer >= 1"),
    (DiversityConfig, "exclude_roles", "judge", "a tuple of non-empty names"),
    (CupidConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (CupidConfig, "mc_samples", True, "an integer >= 1"),
    (CupidConfig, "delta", NAN, "a finite number in (0, 1)"),
    (CupidConfig, "beta", -1.0, "a finite number >= 0"),
    (CupidConfig, "prior_sd", INF, "a finite number > 0"),
    (CupidConfig, "budget_cost", -1.0, "a finite number >= 0 or None"),
    (CupidConfig, "budget_time_s", "10", "a finite number >= 0 or None"),
    (CupidConfig, "max_tokens", 0, "an integer >= 1"),
    (JudgeConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (JudgeConfig, "shots", True, "an integer in 0..2"),
    (JudgeConfig, "shots", 3, "an integer in 0..2"),
    (JudgeConfig, "s_min", NAN, "a finite number"),
    (JudgeConfig, "fallback", 11.0, "a finite number in [1, 10]"),
    (JudgeConfig, "presentation", "grid", "one of 'single', 'pair', 'both_orders'"),
    (Exp3Config, "gamma", NAN, "a finite number in [0, 1]"),
    (Exp3Config, "gamma", True, "a finite number in [0, 1]"),
    (Exp3Config, "uniform_first_iteration", 1, "True or False"),
    (Exp3Config, "tau_th", 10.0, "a finite number in (1, 10)"),
    (Exp3Config, "sigma_r", 0.0, "a finite number > 0"),
    (Exp3Config, "lambda_pref", -0.5, "a finite number >= 0"),
    (ReputationConfig, "window", True, "an integer >= 2"),
    (ReputationConfig, "k0", NAN, "a finite number > 0"),
    (ReputationConfig, "epsilon", 2.0, "a finite number in (0, 1]"),
    (ReputationConfig, "alpha", 0.0, "a finite number in (0, 1]"),
    (ReputationConfig, "floor", INF, "a finite number >= 0"),
    (MatchConfig, "n_opp", True, "an integer >= 1"),
    (MatchConfig, "p_rand", NAN, "a finite number in [0, 1]"),
    (MatchConfig, "sigma_g", INF, "a finite number > 0"),
    (EscalationConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (EscalationConfig, "n_anchor", True, "an integer >= 1"),
    (EscalationConfig, "shots", True, "an integer >= 0"),
    (EscalationConfig, "probe_max_tokens", 0, "an integer >= 1"),
    (EscalationConfig, "seed", 1.5, "an integer"),
    (EscalationConfig, "explore", "yes", "True or False"),
    (EscalationConfig, "peers", "ab", "a tuple of non-empty names"),
    (EscalationConfig, "anchor", "", "a non-empty string or None"),
    (CouncilConfig, "review_temperature", NAN, "a finite number in [0, 2]"),
    (CouncilConfig, "seed", None, "an integer"),
    (CouncilConfig, "members", "ab", "a tuple of non-empty names"),
    (CouncilConfig, "chair", 3, "a non-empty string or None"),
    (DuelConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (DuelConfig, "duels", True, "an integer >= 1"),
    (DuelConfig, "top_p", NAN, "a finite number in (0, 1]"),
    (DuelConfig, "judge", {"shots": 0}, "a JudgeConfig"),
    (ConversationConfig, "turns", True, "an integer in 2..100"),
    (ConversationConfig, "temperature", 1e9, "a finite number in [0, 2]"),
    (ConversationConfig, "speaker_a", "", "a non-empty string or None"),
]


@pytest.mark.parametrize("cls, name, value, expected", BAD,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v, _ in BAD])
def test_a_bad_value_is_one_error_naming_class_field_and_value(cls, name, value, expected):
    assert_one_error_naming_class_field_and_value(cls, name, value, expected)


def assert_one_error_naming_class_field_and_value(cls, name, value, expected):
    with pytest.raises(ValueError) as err:
        cls(**{name: value})
    assert str(err.value) == f"{cls.__name__}.{name} must be {expected}, got {value!r}"


def test_defaults_bounds_and_numpy_integers_are_accepted():
    for cls in (DelegationConfig, DiversityConfig, CupidConfig, JudgeConfig, Exp3Config, ReputationConfig,
                MatchConfig, EscalationConfig, CouncilConfig, DuelConfig, ConversationConfig):
        cls()
    for t in (0, 0.0, 2, 2.0):
        assert DelegationConfig(temperature=t).temperature == t
    assert DelegationConfig(tau=0, k_samples=np.int64(4), models=["a", "b"]).k_samples == 4
    assert DelegationConfig(tau=1.0).tau == 1.0
    assert CupidConfig(budget_cost=0, budget_time_s=None).budget_cost == 0
    assert Exp3Config(eta=None).eta is None and Exp3Config(eta=0.5).eta == 0.5
    assert EscalationConfig(seed=-3).seed == -3


def test_messages_the_tests_and_the_cli_already_rely_on_are_kept():
    with pytest.raises(ValueError, match=re.escape(
            "CupidConfig.budget_rounds must be >= 1 (a session with no duel learns no preference), got True")):
        CupidConfig(budget_rounds=True)
    with pytest.raises(ValueError, match=re.escape("Exp3Config.eta must be a finite number > 0 (or None for 1/K), "
                                                   "got nan")):
        Exp3Config(eta=NAN)
    with pytest.raises(ValueError, match=re.escape("JudgeConfig.s_min must be < s_max, got 5.0 and 5.0")):
        JudgeConfig(s_min=5.0, s_max=5.0, fallback=5.0)


# ---------------------------------------------------------------------------- through a graph's context


def scripted_pool(names=("alpha-7b", "beta-3b", "gamma-1b"), latencies=(0.5, 1.0, 2.0)):
    """Members whose answers do not name them ("Answer number k."), with stated latencies."""
    models = {m: ScriptedChatModel(respond=lambda chat, i: '{"score": 7} The answer is 7.') for m in names}
    return ModelPool([PoolMember(ModelSpec(m, "openai", max_retries=0, extra={"features": {"latency_s": lat}}),
                                 models[m]) for m, lat in zip(names, latencies)]), models


THROUGH_CONTEXT = [
    ("align", {"question": "What is 3 + 4?"}, {"k_samples": True},
     "DelegationConfig.k_samples must be an integer >= 1, got True"),
    ("align", {"question": "What is 3 + 4?"}, {"temperature": 1e9},
     "DelegationConfig.temperature must be a finite number in [0, 2], got 1000000000.0"),
    ("comed", {"question": "What is 3 + 4?"}, {"n_anchor": "2"},
     "EscalationConfig.n_anchor must be an integer >= 1, got '2'"),
    ("comed", {"question": "What is 3 + 4?"}, {"thresholds": {"tau_lo": NAN}},
     "EscalationThresholds.tau_lo must be a number in [0, 1], got nan"),
    ("council", {"question": "What is 3 + 4?"}, {"shots": True}, "CouncilConfig.shots must be an integer >= 0, got True"),
    ("moa", {"question": "What is 3 + 4?"}, {"max_tokens": True}, "MoAConfig.max_tokens must be an integer >= 1, got True"),
    ("converse", {"question": "What is 3 + 4?"}, {"temperature": 1e9},
     "ConversationConfig.temperature must be a finite number in [0, 2], got 1000000000.0"),
    ("duel", {"run_id": "r"}, {"judge": {"shots": True}}, "JudgeConfig.shots must be an integer in 0..2, got True"),
    ("duel", {"run_id": "r"}, {"leader": {"gamma": NAN}}, "Exp3Config.gamma must be a finite number in [0, 1], got nan"),
    ("duel", {"run_id": "r"}, {"reputation": {"window": True}}, "ReputationConfig.window must be an integer >= 2, got True"),
    ("duel", {"run_id": "r"}, {"match": {"n_opp": True}}, "MatchConfig.n_opp must be an integer >= 1, got True"),
    ("duel", {"run_id": "r"}, {"temperature": 1e9}, "DuelConfig.temperature must be a finite number in [0, 2], got 1000000000.0"),
    ("cupid", {"prompts": ["Say hi."]}, {"delta": NAN}, "CupidConfig.delta must be a finite number in (0, 1), got nan"),
    ("cupid", {"prompts": ["Say hi."]}, {"mc_samples": True}, "CupidConfig.mc_samples must be an integer >= 1, got True"),
]


@pytest.mark.parametrize("protocol, inp, config, message", THROUGH_CONTEXT,
                         ids=[f"{p}-{next(iter(c))}" for p, _, c, _ in THROUGH_CONTEXT])
def test_a_bad_setting_in_a_graphs_context_is_the_same_one_line_error_before_any_model_call(protocol, inp, config,
                                                                                             message):
    pool, models = scripted_pool()
    graph = registry.get(protocol).build().compile(checkpointer=InMemorySaver())
    with pytest.raises(ValueError) as err:
        graph.invoke(inp, {"configurable": {"thread_id": "t"}}, context={"pool": pool, "config": config})
    assert str(err.value) == message
    assert sum(len(m.calls) for m in models.values()) == 0


# ---------------------------------------------------------------------------- CUPID is blind until it ends

NAMES = ("alpha-7b", "beta-3b", "gamma-1b")


def blind_pool():
    """Three members whose answers do not name them, so a name in what the user sees is a leak."""
    models = {m: ScriptedChatModel(respond=lambda chat, i, k=k: f"Answer number {k}.") for k, m in enumerate(NAMES)}
    return ModelPool([PoolMember(ModelSpec(m, "openai", extra={"features": {"latency_s": lat}}), models[m])
                      for m, lat in zip(NAMES, (0.5, 1.0, 2.0))]), models


def names_in(value) -> set[str]:
    text = json.dumps(value, default=str)
    return {m for m in NAMES if m in text}


def test_the_api_never_names_the_model_behind_a_or_b_before_the_recommendation():
    pool, _ = blind_pool()
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread, ctx = {"configurable": {"thread_id": "blind"}}, SelectionContext(pool, CupidConfig(budget_rounds=3,
                                                                                                 mc_samples=200))
    command, rounds = {"prompts": ["Say hello.", "Greet me."]}, 0
    while True:
        events, output = [], None
        # as the HTTP API streams a run (langgraph_api: output_keys = the graph's output channels)
        for mode, chunk in graph.stream(command, thread, context=ctx, stream_mode=["custom", "values"],
                                        output_keys=graph.output_channels):
            if mode == "custom":
                events.append(chunk)
            else:
                output = chunk
        state = graph.get_state(thread)
        if not state.next:
            break
        rounds += 1
        payload = state.interrupts[0].value
        # what the person (or an HTTP client) is given while the session runs
        assert names_in(payload) == set() and set(payload) == {"round", "prompt", "A", "B", "options"}
        # the per-round events (the session's start may list the pool: that tells nobody who is A or B)
        assert names_in([e for e in events if e["event"] not in ("features", "measured")]) == set(), events
        assert names_in(graph.invoke(None, thread, context=ctx) | {"arms": None}) == set()
        assert not {"history", "calls", "p_best", "judged", "duel", "generations"} & set(output), set(output)
        # the state does know who is who (a simulated user reads it; the checkpoint needs it)
        assert set(state.values["duel"]["shown"]) <= set(NAMES)
        command = Command(resume="A")
    assert rounds == 3
    done = graph.invoke(None, thread, context=ctx)
    assert [h["round"] for h in done["history"]] == [1, 2, 3]  # revealed with the recommendation
    assert all(h["winner"] == h["shown"][0] for h in done["history"])
    assert done["recommendation"]["model"] in NAMES and events[-1]["event"] == "recommend"


def test_the_terminal_session_shows_no_model_name_until_its_report(tmp_path, monkeypatch):
    pool, _ = blind_pool()
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Prompt number {i}"}) + "\n" for i in range(3)))
    args = ["select", "--prompts", str(prompts), "--budget-rounds", "3", "--delta", "0.001",
            "--db", str(tmp_path / "t.db"), "--thread", "s", "--out", str(tmp_path / "out")]
    first = CliRunner().invoke(app, args, input="A\nB\nq\n")
    assert first.exit_code == 0, first.output
    duels = first.output[first.output.index("round 1"):]
    assert "round 3" in duels and names_in(duels) == set(), duels
    second = CliRunner().invoke(app, ["select", "--thread", "s", "--db", str(tmp_path / "t.db"),
                                      "--out", str(tmp_path / "out")], input="tie\n")
    assert second.exit_code == 0, second.output
    before_report = second.output[:second.output.index("recommended")]
    assert names_in(before_report) == set(), before_report
    assert "recommended" in second.output and names_in(second.output)  # named once the session has ended


# ---------------------------------------------------------------------------- MoA, debate and the bench's shared draw

SAMPLING_BAD = [
    # (settings class, field, bad value, the message's "must be ..." part)
    *[(cls, name, value, expected) for cls in (MoAConfig, DebateConfig) for name, value, expected in [
        ("temperature", "0.7", "a finite number"),
        ("temperature", None, "a finite number"),
        ("temperature", [0.7], "a finite number"),
        ("temperature", True, "a finite number"),
        ("temperature", NAN, "a finite number"),
        ("top_p", "0.9", "a finite number in (0, 1]"),
        ("top_p", None, "a finite number in (0, 1]"),
        ("top_p", True, "a finite number in (0, 1]"),
        ("top_p", 0.0, "a finite number in (0, 1]"),
        ("shots", "2", "an integer >= 0"),
        ("shots", None, "an integer >= 0"),
        ("shots", [2], "an integer >= 0"),
        ("shots", True, "an integer >= 0"),
        ("shots", NAN, "an integer >= 0"),
        ("shots", INF, "an integer >= 0"),
        ("shots", -1, "an integer >= 0"),
        ("seed", True, "an integer"),
        ("seed", NAN, "an integer"),
        ("seed", INF, "an integer"),
        ("seed", "3", "an integer"),
        ("seed", None, "an integer"),
        ("seed", [1], "an integer"),
        ("max_tokens", True, "an integer >= 1"),
    ]],
    (MoAConfig, "proposers", "ab", "a tuple of non-empty names"),
    (MoAConfig, "aggregator", "", "a non-empty string or None"),
    (DebateConfig, "agents", True, "an integer >= 1"),
    (DebateConfig, "rounds", "2", "an integer >= 1"),
    (DebateConfig, "models", "ab", "a tuple of non-empty names"),
    *[(CandidatesConfig, name, value, expected) for name, value, expected in [
        ("k", True, "an integer >= 1"),
        ("temperature", NAN, "a finite number in [0, 2]"),
        ("temperature", INF, "a finite number in [0, 2]"),
        ("temperature", True, "a finite number in [0, 2]"),
        ("temperature", "0.7", "a finite number in [0, 2]"),
        ("temperature", None, "a finite number in [0, 2]"),
        ("temperature", 5.0, "a finite number in [0, 2]"),
        ("top_p", NAN, "a finite number in (0, 1]"),
        ("top_p", True, "a finite number in (0, 1]"),
        ("top_p", None, "a finite number in (0, 1]"),
        ("top_p", 1.5, "a finite number in (0, 1]"),
        ("max_tokens", INF, "an integer >= 1"),
        ("max_tokens", True, "an integer >= 1"),
        ("max_tokens", "256", "an integer >= 1"),
        ("max_tokens", 0, "an integer >= 1"),
        ("shots", NAN, "an integer >= 0"),
        ("shots", True, "an integer >= 0"),
        ("shots", "2", "an integer >= 0"),
        ("shots", None, "an integer >= 0"),
        ("seed", INF, "an integer"),
        ("seed", True, "an integer"),
        ("seed", "0", "an integer"),
        ("seed", None, "an integer"),
        ("models", "ab", "a tuple of non-empty names"),
        ("single_model", "", "a non-empty string or None"),
    ]],
]


@pytest.mark.parametrize("cls, name, value, expected", SAMPLING_BAD,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v, _ in SAMPLING_BAD])
def test_moa_debate_and_the_shared_draw_refuse_a_bad_value_naming_class_field_and_value(cls, name, value, expected):
    assert_one_error_naming_class_field_and_value(cls, name, value, expected)


def test_moa_and_debate_keep_the_messages_their_tests_pin():
    for cls in (MoAConfig, DebateConfig):
        with pytest.raises(ValueError) as err:
            cls(temperature=5.0)
        assert str(err.value) == f"{cls.__name__}.temperature must be in [0, 2.0], got 5.0"
        with pytest.raises(ValueError) as err:
            cls(max_tokens=True)
        assert str(err.value) == f"{cls.__name__}.max_tokens must be an integer >= 1, got True"
    with pytest.raises(ValueError) as err:
        DebateConfig(rounds=11)
    assert str(err.value) == ("DebateConfig.rounds must be at most 10 (each question costs agents × rounds model calls), "
                              "got 11")
    with pytest.raises(ValueError) as err:
        CandidatesConfig(models=("a", "b"), single_model="c")
    assert str(err.value) == "CandidatesConfig.single_model 'c' is not one of models ('a', 'b')"


def test_moa_debate_and_the_shared_draw_accept_defaults_bounds_and_numpy_integers():
    for cls in (MoAConfig, DebateConfig, CandidatesConfig):
        assert cls() == cls()
        for t in (0, 0.0, 2, 2.0):
            assert cls(temperature=t).temperature == t
        settings = cls(top_p=1, shots=np.int64(0), seed=np.int64(-3), max_tokens=np.int64(1))
        assert (settings.top_p, settings.shots, settings.seed, settings.max_tokens) == (1, 0, -3, 1)
    assert MoAConfig(proposers=["a", "b"], aggregator="a").proposers == ["a", "b"]
    assert DebateConfig(agents=16, rounds=10, models=("a",)).rounds == 10
    assert CandidatesConfig(k=np.int64(2), models=("a", "b"), single_model="b").k == 2


@pytest.mark.parametrize("protocol, config, message", [
    ("moa", {"shots": "2"}, "MoAConfig.shots must be an integer >= 0, got '2'"),
    ("moa", {"seed": None}, "MoAConfig.seed must be an integer, got None"),
    ("debate", {"top_p": True}, "DebateConfig.top_p must be a finite number in (0, 1], got True"),
    ("debate", {"temperature": "0.7"}, "DebateConfig.temperature must be a finite number, got '0.7'"),
])
def test_a_bad_moa_or_debate_setting_in_a_graphs_context_is_one_line_before_any_model_call(protocol, config, message):
    pool, models = scripted_pool()
    graph = registry.get(protocol).build().compile(checkpointer=InMemorySaver())
    with pytest.raises(ValueError) as err:
        graph.invoke({"question": "What is 3 + 4?"}, {"configurable": {"thread_id": "t"}},
                     context={"pool": pool, "config": config})
    assert str(err.value) == message
    assert sum(len(m.calls) for m in models.values()) == 0


def test_a_bad_shared_draw_setting_in_its_context_is_one_line():
    with pytest.raises(ValueError) as err:
        CandidatesContext(pool=scripted_pool()[0], config={"max_tokens": INF})
    assert str(err.value) == "CandidatesConfig.max_tokens must be an integer >= 1, got inf"


@pytest.mark.parametrize("command, line, message", [
    ("moa", 'shots = "2"', "MoAConfig.shots must be an integer >= 0, got '2'"),
    ("moa", "seed = true", "MoAConfig.seed must be an integer, got True"),
    ("debate", "shots = nan", "DebateConfig.shots must be an integer >= 0, got nan"),
])
def test_run_with_a_bad_sampling_setting_in_its_config_file_is_one_error_line(tmp_path, command, line, message):
    config = tmp_path / "bad.toml"
    config.write_text(f"[{command}]\n{line}\n")
    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "m"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    result = CliRunner().invoke(app, ["run", command, "--format", "synthetic", "--pool", str(pool),
                                      "--config", str(config), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: --config {config}:2: [{command}] {message}"], result.output
    assert not (tmp_path / "t.db").exists()


def test_a_missing_relative_pool_file_names_the_folder_it_was_read_from(tmp_path, monkeypatch):
    from agora.graphs.delegation import DelegationContext

    monkeypatch.setenv("AGORA_POOL_DIR", str(tmp_path))
    assert pool_base_dir() == str(tmp_path)
    expected = (f"pools/missing.toml: pool file not found in {tmp_path} (a relative pool path is read from "
                "$AGORA_POOL_DIR, else the current folder; built-in pools: default, tiny, diverse)")
    with pytest.raises(PoolConfigError) as err:
        resolve_pool("pools/missing.toml")
    assert str(err.value) == expected
    with pytest.raises(PoolConfigError) as err:
        DelegationContext(pool="pools/missing.toml")
    assert str(err.value) == expected
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "missing.toml").write_text(
        '[[models]]\nname = "x"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    assert resolve_pool("pools/missing.toml").names == ["x"]  # found once it is there
    absent = tmp_path / "elsewhere" / "pool.toml"  # an absolute path: its own message, as before
    with pytest.raises(PoolConfigError) as err:
        resolve_pool(str(absent))
    assert str(err.value) == f"{absent}: pool file not found (built-in pools: default, tiny, diverse)"
