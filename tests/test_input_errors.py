"""Bad input told apart from Agora's own bugs, settings checked by rule, replay of shared SLM-MUX
samples, and tables that fold long ids in a narrow terminal."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kwargs, message", [
    ({"lam": "x"}, "BenchConfig.lam must be a finite number >= 0, got 'x'"),
    ({"lam": -0.5}, "BenchConfig.lam must be a finite number >= 0, got -0.5"),
    ({"lam": float("inf")}, "BenchConfig.lam must be a finite number >= 0, got inf"),
    ({"max_calls": True}, "BenchConfig.max_calls must be a finite number >= 0 or None, got True"),
    ({"max_calls": "3"}, "BenchConfig.max_calls must be a finite number >= 0 or None, got '3'"),
    ({"router_k": "5"}, "BenchConfig.router_k must be an integer >= 1, got '5'"),
    ({"router_k": 0}, "BenchConfig.router_k must be an integer >= 1, got 0"),
    ({"router_k": 2.0}, "BenchConfig.router_k must be an integer >= 1, got 2.0"),
    ({"embedding": "bert"}, "BenchConfig.embedding must be one of 'auto', 'minilm', 'tfidf', got 'bert'"),
    ({"embedding": None}, "BenchConfig.embedding must be one of 'auto', 'minilm', 'tfidf', got None"),
    ({"durability": "fast"}, "BenchConfig.durability must be one of 'async', 'sync', 'exit', got 'fast'"),
    ({"shared": 1}, "BenchConfig.shared must be True or False, got 1"),
    ({"matched_single": "yes"}, "BenchConfig.matched_single must be True or False, got 'yes'"),
    ({"thresholds_source": 3}, "BenchConfig.thresholds_source must be a non-empty string, got 3"),
    ({"align": {}}, "BenchConfig.align must be a DelegationConfig, got {}"),
    ({"comed": None}, "BenchConfig.comed must be an EscalationConfig, got None"),
])
def test_bench_config_fields_are_checked_by_rule(kwargs, message):
    """These fields took anything from Python (a string λ reached the calibration's arithmetic)."""
    from agora.runs.bench_plan import BenchConfig

    with pytest.raises(ValueError) as err:
        BenchConfig(**kwargs)
    assert str(err.value) == message


def test_bench_config_accepts_good_values():
    from agora.agents.delegation import DelegationConfig
    from agora.runs.bench_plan import BenchConfig

    c = BenchConfig(lam=0, max_calls=2.5, router_k=3, embedding="tfidf", durability="sync", shared=True,
                    align=DelegationConfig(n_agents=3))
    assert (c.lam, c.max_calls, c.router_k, c.embedding, c.durability, c.shared, c.align.n_agents) == (
        0, 2.5, 3, "tfidf", "sync", True, 3)
    assert BenchConfig().lam == 0.01 and BenchConfig().max_calls is None


# ---------------------------------------------------------------------------- narrow terminals

LONG_RUN = "nightly-gsm8k-20261205-225802-abcd-with-a-long-descriptive-suffix"
LONG_Q = "gsm8k-test-question-0001-with-a-long-identifier"


def _column(out: str, index: int) -> str:
    """Column ``index`` of every table body line of ``out``, its folded pieces joined."""
    return "".join(line.split("│")[index + 1].strip() for line in out.splitlines()
                   if line.startswith("│") and line.count("│") > index + 1)


@pytest.fixture()
def narrow_db(tmp_path, monkeypatch):
    """A recorded SLM-MUX run with a long run id and long question ids, and the CLI's console 60 wide."""
    from agora.cli._shared import console
    from agora.graphs.runner import run_protocol
    from agora.graphs.slm_mux import SLMMuxContext
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks import Problem
    from agora.traces.store import TraceStore

    problems = [Problem(id=f"{LONG_Q}-{i}", question=f"What is {i} + {i}?", gold=str(2 * i), kind="math")
                for i in (1, 2)]
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["So the answer is 4."], cycle=True)
                                       for m in ("member-model-one", "member-model-two")}, max_retries=0)
    store = TraceStore(tmp_path / "t.db")
    run_protocol("slm-mux", problems, store=store, run_id=LONG_RUN, context=SLMMuxContext(pool), config={},
                 pool_description=[], dataset={})
    monkeypatch.setattr(console, "_width", 60)
    return str(tmp_path / "t.db")


def _cli(*argv):
    from typer.testing import CliRunner

    from agora.cli.main import app

    result = CliRunner().invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return result.output


def test_tables_fold_long_ids_whole_in_a_60_column_terminal(narrow_db):
    """A 60-column terminal cut ids to '…', cropped a table's right side, and squeezed the figures of
    the method table to nothing beside its one-line method and note columns."""
    runs = _cli("report", "runs", "--db", narrow_db)
    table = [line for line in runs.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 60 and line[-1] in "┓┃┩│┘" for line in table)  # nothing cropped
    assert _column(runs, 0) == LONG_RUN and "…" not in runs
    replayed = _cli("replay", "--db", narrow_db, "--run-id", LONG_RUN, "--rule", "slm_mux", "--questions")
    assert "…" not in replayed
    assert _column(replayed.split("questions")[-1], 0) == f"{LONG_Q}-1{LONG_Q}-2"
    summary = _cli("report", "run", LONG_RUN, "--db", narrow_db)
    methods = summary[summary.index("methods"):]
    # each method's row keeps its figures: 2 questions, 50.0 % accuracy (gold 2 and 4, every answer 4)
    assert _column(methods, 0) == "mux_topmux_voteslm-mux"
    assert _column(methods, 1) == "222" and _column(methods, 2) == "50.050.050.0"
    assert all(len(line) <= 60 for line in summary.splitlines() if line.startswith("│"))
    question = _cli("report", "question", "--db", narrow_db, "--run-id", LONG_RUN, "--question-id", f"{LONG_Q}-1")
    assert "…" not in question and "member-model-one" in _column(question, 4)


# ---------------------------------------------------------------------------- bad input or a bug


def _report_runs_with(tmp_path, monkeypatch, raise_it):
    """``agora report runs`` whose listing raises ``raise_it()`` (standing for a check in Agora's code)."""
    from typer.testing import CliRunner

    import agora.cli.runs as runs_cli
    from agora.cli.main import app
    from agora.traces.store import TraceStore

    def listing(*args, **kwargs):
        raise raise_it()

    monkeypatch.setattr(runs_cli, "run_rows", listing)
    TraceStore(tmp_path / "t.db").close()
    return CliRunner().invoke(app, ["report", "runs", "--db", str(tmp_path / "t.db")])


def test_a_value_error_from_a_bug_is_an_internal_error_with_its_traceback(tmp_path, monkeypatch):
    """A ValueError raised by Agora's own code (here numpy-like 'math domain error') was printed as a
    one-line 'error:' (exit 2) that blamed the user's input and hid where it came from."""
    result = _report_runs_with(tmp_path, monkeypatch, lambda: ValueError("math domain error"))
    assert isinstance(result.exception, ValueError) and result.exit_code == 1, result.output
    assert "error: math domain error" not in result.output.replace("internal error:", "")
    assert ("internal error: ValueError math domain error (a bug in Agora, not in your input; the traceback "
            "follows)") in " ".join(result.output.split())


@pytest.mark.parametrize("raise_it, said", [
    (lambda: __import__("agora.tasks.errors", fromlist=["InputError"]).InputError("--rule x: unknown"),
     "error: --rule x: unknown"),
    (lambda: __import__("json").JSONDecodeError("Expecting value", "{", 1), "error: Expecting value: line 1 column 2"),
])
def test_input_errors_stay_one_line(tmp_path, monkeypatch, raise_it, said):
    result = _report_runs_with(tmp_path, monkeypatch, raise_it)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(said), result.output


def test_a_settings_refusal_is_input_and_keeps_its_type():
    from agora.cli._shared import user_errors
    from agora.runs.bench_plan import BenchConfig
    from agora.tasks.errors import InputError, is_input

    with pytest.raises(ValueError) as err:
        BenchConfig(router_k="5")
    assert type(err.value) is ValueError and is_input(err.value)  # marked, its type unchanged
    assert not is_input(ValueError("x")) and is_input(InputError("x"))
    import typer

    with pytest.raises(typer.Exit) as stopped:
        with user_errors():
            BenchConfig(router_k="5")
    assert stopped.value.exit_code == 2


@pytest.mark.parametrize("argv, said", [
    # a few of the places that check what the user gave, each still one line (now an InputError)
    (["replay", "--db", "{db}", "--run-id", "r", "--rule", "nope"], "error: --rule nope: unknown; choose from"),
    (["report", "runs", "--db", "{db}", "--stale-after", "1"], None),
    (["export", "--db", "{db}", "--run-id", "nope", "--out", "{tmp}/x.jsonl.gz"], "error: "),
])
def test_the_clis_input_checks_raise_input_errors(tmp_path, argv, said):
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.store import TraceStore

    TraceStore(tmp_path / "t.db").close()
    argv = [a.format(db=tmp_path / "t.db", tmp=tmp_path) for a in argv]
    result = CliRunner().invoke(app, argv)
    if said is None:
        assert result.exit_code == 0, result.output
        return
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(said), result.output
