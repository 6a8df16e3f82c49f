"""Probes of bad input, round 6: what a task file, a pool file, a --db value or a protocol's
settings can hold that used to get through (a NUL that a Postgres store cannot take, a key given
twice, a 50 MB line, a member name --models cannot select, a mysql:// URL taken as a file name, a
million agents from a context)."""

from __future__ import annotations

import json

import pytest

from agora.tasks import loaders
from agora.tasks.loaders import TaskFormatError, iter_records, load_problems


def _write(tmp_path, text: str, name: str = "t.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


GOOD = json.dumps({"question": "What is 9 + 9?", "answer": "9 + 9 = 18\n#### 18"})


# ---------------------------------------------------------------------------------------- task files

def test_nul_in_a_question_is_refused_with_file_line_and_field(tmp_path):
    """A NUL reached Postgres' jsonb checkpoint and stopped the run with a psycopg traceback."""
    path = _write(tmp_path, GOOD + "\n" + json.dumps({"question": "What\u0000 is 1 + 1?", "answer": "#### 2"}) + "\n")
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, "gsm8k")
    assert str(err.value) == (f"{path}:2: field 'question': a NUL character (\\u0000), "
                              "which the trace database cannot store")


def test_nul_in_a_key_is_refused(tmp_path):
    path = _write(tmp_path, json.dumps({"question": "What is 1 + 1?", "answer": "#### 2", "no\u0000te": 1}) + "\n")
    with pytest.raises(TaskFormatError, match=r":1: a NUL character .* in the key 'no\\x00te'$"):
        list(iter_records(path))


def test_a_key_given_twice_is_refused_not_the_last_one_kept(tmp_path):
    """json.loads keeps the last of two equal keys: the gold silently became 7."""
    path = _write(tmp_path, GOOD + '\n{"question": "What is 9 + 9?", "answer": "#### 18", "answer": "#### 7"}\n')
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, "gsm8k")
    assert str(err.value) == f"{path}:2: field 'answer': given twice in one JSON object (which one is meant?)"


def test_a_key_given_twice_inside_a_nested_object_is_refused(tmp_path):
    line = {"question": "Pick", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}
    text = json.dumps(line).replace('"B": "y"', '"B": "y", "B": "z"')
    path = _write(tmp_path, text + "\n")
    with pytest.raises(TaskFormatError, match=r":1: field 'B': given twice"):
        load_problems(path, "mc")


def test_equal_values_under_other_keys_are_fine(tmp_path):
    path = _write(tmp_path, json.dumps({"question": "18?", "answer": "#### 18", "note": "#### 18"}) + "\n")
    [problem] = load_problems(path, "gsm8k")
    assert problem.gold == "18"


def test_a_line_over_the_bound_is_refused_with_its_line(tmp_path, monkeypatch):
    """A 50 MB question was sent to every model and kept in every checkpoint (a 650 MB file)."""
    monkeypatch.setattr(loaders, "MAX_LINE_BYTES", 200)
    short = json.dumps({"question": "x" * 100, "answer": "#### 1"})
    at_bound = json.dumps({"question": "y" * (200 - len(short) + 100), "answer": "#### 1"})
    assert len(at_bound.encode()) == 200
    long = json.dumps({"question": "z" * 400, "answer": "#### 1"})
    path = _write(tmp_path, short + "\r\n" + at_bound + "\r\n" + long + "\n" + short + "\n")
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, "gsm8k")
    assert str(err.value) == (f"{path}:3: a line longer than 200 bytes (no problem is that long: "
                              "is this a JSONL file with one problem a line?)")
    path.write_text(short + "\n" + at_bound + "\n", encoding="utf-8")
    assert [p.id for p in load_problems(path, "gsm8k")] == ["t-1", "t-2"]


def test_a_huge_line_is_not_read_whole(tmp_path):
    import tracemalloc

    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"question": "What? " + "x" * (12 << 20), "answer": "#### 1"}) + "\n", encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(TaskFormatError, match=r"huge.jsonl:1: a line longer than 1,048,576 bytes"):
            load_problems(path, "gsm8k")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # the bound and a little, not the 12 MB line


def test_the_line_bound_is_one_mebibyte():
    assert loaders.MAX_LINE_BYTES == 1 << 20


def test_graph_input_with_a_nul_is_refused_before_any_model_call():
    from agora.graphs.question import checked_input
    from agora.tasks.errors import InputError

    with pytest.raises(InputError) as err:
        checked_input({"question": "What\x00 is 2 + 2?"})
    assert str(err.value) == "graph input field 'question': a NUL character (\\u0000), which the trace database cannot store"
    with pytest.raises(InputError, match=r"^graph input field 'gold': a NUL character"):
        checked_input({"question": "What is 2 + 2?", "gold": "4\x00"})
    assert checked_input({"question": "What is 2 + 2?", "gold": 4}) == {"question": "What is 2 + 2?", "gold": "4"}


# ---------------------------------------------------------------------------------------- pool files

def _pool(tmp_path, name: str):
    path = tmp_path / "pool.toml"
    path.write_text(f'[[models]]\nname = {json.dumps(name)}\nbackend = "openai"\n'
                    'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "why"), [
    ("a,b", "'a,b' holds ',', which separates names in --models and member=value lists; pick a name without it"),
    ("a=b", "'a=b' holds '=', which separates names in --models and member=value lists; pick a name without it"),
    ("a\u0000x", "'a\\x00x' holds the control character '\\x00' at position 1; use visible characters"),
    ("qwen\u200b", "'qwen\\u200b' holds the control character '\\u200b' at position 4; use visible characters"),
    ("a\nb", "'a\\nb' holds the control character '\\n' at position 1; use visible characters"),
    (" a", "' a' starts or ends with a space, which --models drops; remove it"),
])
def test_member_names_that_cannot_be_selected_or_stored_are_refused(tmp_path, name, why):
    """'a,b' loaded, then --models a,b said "model 'a' is not in the pool (a,b)"; a NUL became
    U+FFFD in a Postgres trace, another name than the pool's."""
    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    path = _pool(tmp_path, name)
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    assert str(err.value).endswith(f"field 'name': {why}")
    assert str(err.value).startswith(f"{path}: models[0] (")


@pytest.mark.parametrize("name", ["qwen1.5b+pot", "my-model_2", "Qwen/Qwen2.5 0.5B", "模型"])
def test_ordinary_member_names_still_load(tmp_path, name):
    from agora.models.pool import load_pool

    assert load_pool(_pool(tmp_path, name)).names == [name]


# ---------------------------------------------------------------------------------------- --db values

@pytest.mark.parametrize(("db", "message"), [
    ("mysql://ann:s3cret@h/db", "mysql://ann:***@h/db: a mysql:// URL; a trace database is a SQLite file path or a postgresql:// URL"),
    ("sqlite:///x.db", "sqlite:///x.db: a sqlite:// URL; a trace database is a SQLite file path or a postgresql:// URL"),
    ("", "'': an empty database path; give a SQLite file or a postgresql:// URL"),
    ("  ", "'  ': an empty database path; give a SQLite file or a postgresql:// URL"),
])
def test_db_values_that_are_not_a_file_or_postgres_are_refused(tmp_path, monkeypatch, db, message):
    """mysql://x@h/db made a folder 'mysql:' and a SQLite file in it; '' said ': is a folder'."""
    from agora.traces.store import TraceStore, TraceStoreError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(TraceStoreError) as err:
        TraceStore(db)
    assert str(err.value) == message
    assert list(tmp_path.iterdir()) == []


def test_a_file_path_and_memory_still_open(tmp_path):
    from agora.traces.store import TraceStore

    TraceStore(str(tmp_path / "a.db"))
    TraceStore(":memory:")
    assert (tmp_path / "a.db").is_file()


# ---------------------------------------------------------------------------------------- fan-out bounds

@pytest.mark.parametrize(("make", "message"), [
    (lambda: __import__("agora.agents.delegation", fromlist=["x"]).DelegationConfig(n_agents=10**6),
     "DelegationConfig.n_agents must be at most 64 (each agent is a branch of every question), got 1000000"),
    (lambda: __import__("agora.agents.delegation", fromlist=["x"]).DelegationConfig(k_samples=257),
     "DelegationConfig.k_samples must be at most 256 (each is a model sample, every question), got 257"),
    (lambda: __import__("agora.agents.escalation", fromlist=["x"]).EscalationConfig(n_anchor=10**5),
     "EscalationConfig.n_anchor must be at most 256 (each is a model sample, every question), got 100000"),
    (lambda: __import__("agora.agents.escalation", fromlist=["x"]).EscalationConfig(debate_agents=17),
     "EscalationConfig.debate_agents must be at most 16 (as DebateConfig.agents), got 17"),
    (lambda: __import__("agora.agents.escalation", fromlist=["x"]).EscalationConfig(debate_rounds=11),
     "EscalationConfig.debate_rounds must be at most 10 (as DebateConfig.rounds), got 11"),
    (lambda: __import__("agora.agents.slm_mux", fromlist=["x"]).SLMMuxConfig(k_samples=1000),
     "SLMMuxConfig.k_samples must be at most 256 (each is a model sample, every question), got 1000"),
])
def test_fan_out_counts_are_bounded(make, message):
    """n_agents = 1,000,000 from a context built a million branches: 120 s, 0.9 GB, no end.
    COMED's own debate baseline took any number of agents and rounds where DebateConfig stops at 16 and 10."""
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


def test_fan_out_bounds_themselves_are_accepted():
    from agora.agents.delegation import DelegationConfig
    from agora.agents.escalation import EscalationConfig

    cfg = DelegationConfig(n_agents=64, k_samples=256)
    assert (cfg.n_agents, cfg.k_samples) == (64, 256)
    assert EscalationConfig(n_anchor=256, debate_agents=16, debate_rounds=10).debate_rounds == 10


def test_a_context_with_a_million_agents_is_refused_before_any_branch():
    from agora.graphs.context import context_as
    from agora.graphs.delegation import DelegationContext

    with pytest.raises(ValueError, match=r"^DelegationConfig.n_agents must be at most 64 \(each agent is a branch of every question\), got 1000000$"):
        context_as({"config": {"n_agents": 10**6, "k_samples": 1}}, DelegationContext)


# ---------------------------------------------------------------------------------------- graph input

@pytest.mark.parametrize(("inp", "message"), [
    ({"question": "What is 9 + 9?", "kind": "bogus"}, "graph input field 'kind' must be one of math, mc, open, not 'bogus'"),
    ({"question": "Pick", "kind": "mc", "n_choices": "4"},
     "graph input field 'n_choices' must be an integer in 0..10 (options A to J), not '4'"),
    ({"question": "Pick", "kind": "mc", "n_choices": 11},
     "graph input field 'n_choices' must be an integer in 0..10 (options A to J), not 11"),
])
def test_a_graph_input_with_an_unknown_kind_is_refused_before_any_model_call(inp, message):
    """kind 'bogus' from Studio's API ran as math and said nothing; n_choices '4' reached int()."""
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.errors import InputError

    model = ScriptedChatModel(responses=["The answer is 18."], cycle=True)
    pool = ModelPool.from_chat_models({"m": model})
    graph = build_delegation_graph().compile()
    with pytest.raises(InputError) as err:
        graph.invoke(inp, context=DelegationContext(pool=pool))
    assert str(err.value) == message
    assert model.calls == []
