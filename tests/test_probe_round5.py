"""Probes of the settings rules: SamplingParams' fields checked like every settings class's (one line
naming class.field and the value), huge integers in number fields, values given by position."""

from __future__ import annotations

import dataclasses

import pytest

from agora.models.contract import SamplingParams
from agora.models.validation import is_number


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"temperature": "0.7"}, "SamplingParams.temperature must be a finite number >= 0, got '0.7'"),
    ({"temperature": True}, "SamplingParams.temperature must be a finite number >= 0, got True"),
    ({"temperature": float("inf")}, "SamplingParams.temperature must be a finite number >= 0, got inf"),
    ({"temperature": float("nan")}, "SamplingParams.temperature must be a finite number >= 0, got nan"),
    ({"top_p": 1.5}, "SamplingParams.top_p must be a finite number in (0, 1], got 1.5"),
    ({"n": 0}, "SamplingParams.n must be an integer >= 1, got 0"),
    ({"max_tokens": True}, "SamplingParams.max_tokens must be an integer >= 1, got True"),
    ({"max_tokens": 2.0}, "SamplingParams.max_tokens must be an integer >= 1, got 2.0"),
    ({"seed": True}, "SamplingParams.seed must be an integer or None, got True"),
    # a bare string would be read as its letters: stop at any of 'a', 'b', 'c'
    ({"stop": "abc"}, "SamplingParams.stop must be a tuple of strings, got 'abc'"),
    ({"stop": [1]}, "SamplingParams.stop must be a tuple of strings, got [1]"),
    ({"logprobs": 21}, "SamplingParams.logprobs must be None or an integer in 0..20, got 21"),
])
def test_sampling_params_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs)
    assert str(err.value) == message


def test_sampling_params_good_values_kept():
    p = SamplingParams(n=2, temperature=0, top_p=1, max_tokens=8, seed=-3, stop=["x"], logprobs=0)
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.seed, p.stop, p.logprobs) == (2, 0, 1, 8, -3, ["x"], 0)
    with pytest.raises(ValueError, match=r"^SamplingParams.temperature must be a finite number >= 0, got 'x'$"):
        dataclasses.replace(p, temperature="x")


def test_huge_int_is_a_number_not_an_overflow():
    assert is_number(10**400)
    with pytest.raises(ValueError, match=r"^SamplingParams.top_p must be a finite number in \(0, 1\], got 1000"):
        SamplingParams(top_p=10**400)


def test_positional_value_named_by_field():
    with pytest.raises(ValueError) as err:
        SamplingParams(0.5)
    assert str(err.value) == "SamplingParams.n must be an integer >= 1, got 0.5"


def test_postgres_bad_percent_token_does_not_print_password():
    """libpq quotes the password it cannot percent-decode; the one-line error must not."""
    pytest.importorskip("psycopg")
    from agora.traces.errors import TraceStoreError
    from agora.traces.pg_database import PostgresDatabase

    for url in ("postgresql://u:s3cret%PW@127.0.0.1:9/db", "postgresql://u@127.0.0.1:9/db?password=s3c%ret"):
        with pytest.raises(TraceStoreError) as err:
            PostgresDatabase(url)
        line = str(err.value)
        assert "s3c" not in line and "\n" not in line
        assert "cannot connect to the Postgres trace store" in line and "***" in line


def test_without_password_hand_cases():
    from agora.traces.pg_sql import without_password

    url = "postgresql://ann:p%40ss@h/db"
    assert without_password('bad token "p%40ss" or "p@ss" in ' + url, url) == \
        'bad token "***" or "***" in postgresql://ann:***@h/db'
    assert without_password("no secret here", "postgresql://ann@h/db") == "no secret here"


def test_bench_task_format_refusal_does_not_point_to_a_missing_option(tmp_path):
    """agora bench has no --format: its refusal must not tell the user to pass one."""
    from agora.runs.bench_tasks import load_tasks
    from agora.tasks.loaders import TaskFormatError

    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    with pytest.raises(TaskFormatError) as err:
        load_tasks(str(data))
    line = str(err.value)
    assert line.startswith(f"{data}:1: cannot tell the format from fields ['answer', 'question']; agora bench has no --format")
    assert "pass --format" not in line


def test_a_rule_comparing_another_type_refuses_in_one_line():
    """A Rule's test that cannot compare the value ('zz' > 0) refuses it with the rule's message
    instead of leaking the comparison's TypeError."""
    from agora.training.config import TrainSettings
    from agora.training.datasets import PairFilter

    with pytest.raises(ValueError) as err:
        TrainSettings(learning_rate="zz")
    assert str(err.value) == "learning_rate must be > 0, got zz"
    with pytest.raises(ValueError) as err:
        PairFilter(min_margin="x")
    assert str(err.value) == "PairFilter.min_margin must be >= 0, got x"


def test_train_settings_epochs_and_max_steps_checked():
    """epochs and max_steps had no rule: a string reached the cross-field check's '<=' (TypeError)."""
    from agora.training.config import DPOSettings, TrainSettings

    with pytest.raises(ValueError) as err:
        TrainSettings(epochs="zz")
    assert str(err.value) == "epochs must be a finite number, got 'zz'"
    with pytest.raises(ValueError) as err:
        DPOSettings(max_steps="5")
    assert str(err.value) == "max_steps must be an integer, got '5'"
    assert TrainSettings(epochs=0, max_steps=10).max_steps == 10


@pytest.mark.parametrize(("make", "message"), [
    # Rule's own test passes True (True >= 1): the declared int/float type refuses the bool
    (lambda: __import__("agora.training.config").training.config.TrainSettings(batch_size=True),
     "TrainSettings.batch_size must be an integer, got True"),
    (lambda: __import__("agora.training.config").training.config.GRPOSettings(grad_accum=True),
     "GRPOSettings.grad_accum must be an integer, got True"),
    (lambda: __import__("agora.training.config").training.config.LoraSettings(dropout=False),
     "LoraSettings.dropout must be a number, got False"),
    # a field with no rule at all, declared int
    (lambda: __import__("agora.training.config").training.config.TrainSettings(seed=True),
     "TrainSettings.seed must be an integer, got True"),
    # a marker with its own expected text keeps it
    (lambda: SamplingParams(n=True), "SamplingParams.n must be an integer >= 1, got True"),
])
def test_bool_refused_in_int_and_float_fields(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


def test_numeric_kind_of_declared_types():
    from typing import Optional

    from agora.models.validation import _numeric_kind

    assert _numeric_kind(int) == "an integer"
    assert _numeric_kind(float) == "a number"
    assert _numeric_kind(int | float) == "a number"
    assert _numeric_kind(Optional[int]) == "an integer or None"
    assert _numeric_kind(float | None) == "a number or None"
    assert _numeric_kind(bool) is None and _numeric_kind(str) is None and _numeric_kind(int | str) is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"beta": "zz"}, "beta must be a finite number >= 0, got 'zz'"),
    ({"epsilon": "zz"}, "epsilon must be a finite number > 0, got 'zz'"),
    ({"beta": -0.5}, "beta must be a finite number >= 0, got -0.5"),
    ({"epsilon": 0}, "epsilon must be a finite number > 0, got 0"),
    ({"beta": float("nan")}, "beta must be a finite number >= 0, got nan"),
])
def test_grpo_beta_epsilon_one_line(kwargs, message):
    """beta and epsilon had no rule: a string reached the cross-field check's '<' as a TypeError."""
    from agora.training.config import GRPOSettings

    with pytest.raises(ValueError) as err:
        GRPOSettings(**kwargs)
    assert str(err.value) == message
    assert (GRPOSettings(beta=0, epsilon=0.1).beta, GRPOSettings(beta=0, epsilon=0.1).epsilon) == (0, 0.1)


@pytest.mark.parametrize("methods", [True, 3, [["align"]], "align"])
def test_bench_config_methods_not_a_tuple_of_names(methods):
    """A bool reached the iteration ('bool' object is not iterable), a list an unhashable lookup, and a
    bare string was read as its letters."""
    from agora.runs.bench_plan import BenchConfig

    with pytest.raises(ValueError) as err:
        BenchConfig(methods=methods)
    assert str(err.value) == f"BenchConfig.methods must be a tuple of method names, got {methods!r}"
    assert BenchConfig(methods=["align"]).methods == ["align"]


def test_llama_engine_variable_checked_up_front(monkeypatch):
    """AGORA_LLAMA_ENGINE was 'text' (anything passed the up-front check): 'agora pool show' said nothing."""
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.models.environment import EnvironmentVariableError, check_environment

    with pytest.raises(EnvironmentVariableError) as err:
        check_environment({"AGORA_LLAMA_ENGINE": "bogus"})
    assert str(err.value) == (
        "AGORA_LLAMA_ENGINE='bogus': llama-cpp-python is the one embedded engine and it is not an engine's name "
        "(accepted: unset or llama-cpp-python, llama_cpp_python, llamacpp, llama-cpp, python, native, any case); "
        "unset AGORA_LLAMA_ENGINE")
    for accepted in ("", "llama-cpp-python", " Native "):
        check_environment({"AGORA_LLAMA_ENGINE": accepted})
    with pytest.raises(EnvironmentVariableError, match="AGORA_LLAMA_ENGINE='  '"):  # spaces alone, as elsewhere
        check_environment({"AGORA_LLAMA_ENGINE": "  "})
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "bogus")
    out = CliRunner().invoke(app, ["pool", "show", "tiny"])
    assert out.exit_code == 2, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: AGORA_LLAMA_ENGINE='bogus': ")


def test_matched_single_needs_a_multi_member_method(tmp_path):
    """--matched-single with only single-member methods was accepted: there is no method to match."""
    import json

    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.runs.bench_plan import BenchConfig, plan

    multi = "align, self_consistency, best_of_n, comed, moa, debate, council, slm-mux, mux_vote"
    with pytest.raises(ValueError) as err:
        plan("b", [], BenchConfig(methods=("single_agent", "anchor"), shared=True, matched_single=True), dev=[object()])
    assert str(err.value) == (f"--matched-single needs a multi-member method to match the best member against "
                              f"({multi}); --protocols chose only single_agent, anchor")
    f = tmp_path / "q.jsonl"
    f.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                         for i in range(1, 7)))
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["bench", "--tasks", str(f), "--db", str(db), "--limit", "3", "--dev", "3",
                                      "--shared-candidates", "--matched-single", "--protocols", "single_agent",
                                      "--pool", "tiny"])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error")]
    assert errors == [f"error: --matched-single needs a multi-member method to match the best member against "
                      f"({multi}); --protocols chose only single_agent"], result.output
    assert not db.exists()


def test_protocol_spec_and_bench_role_fields_checked_before_the_cross_field_rules():
    """BenchRole(methods=True) and ProtocolSpec(cli=True) reached the cross-field rules' 'in' and
    iteration as TypeErrors."""
    from agora.graphs.spec import BenchRole, ProtocolSpec

    cases = [
        (lambda: BenchRole(methods=True, sharing={}), "BenchRole.methods must be a tuple of non-empty names, got True"),
        (lambda: BenchRole(methods=("a",), sharing=None), "BenchRole.sharing must be a mapping of method to text, got None"),
        (lambda: BenchRole(methods=[["a"]], sharing={}), "BenchRole.methods must be a tuple of non-empty names, got [['a']]"),
    ]
    base = dict(name="x", graph_id="g", description="", build=lambda: None, context=int, config=int, input=int,
                output=int, module="m")
    cases += [(lambda kw=kw: ProtocolSpec(**{**base, **kw}), message) for kw, message in [
        ({"name": True}, "ProtocolSpec.name must be a non-empty string, got True"),
        ({"cli": True}, "ProtocolSpec.cli must be a tuple of non-empty names, got True"),
        ({"methods": True}, "ProtocolSpec.methods must be a tuple of non-empty names, got True"),
    ]]
    for make, message in cases:
        with pytest.raises(ValueError) as err:
            make()
        assert str(err.value) == message
    assert ProtocolSpec(**base, methods=("x",), cli=("run x",)).methods == ("x",)
