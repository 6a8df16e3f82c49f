"""Bad input, one case per kind (issue 16): each is refused with one line naming what is wrong
(exit 2), or made safe, and nothing in a data file runs code. Fast (no real model): CI runs it."""

import json
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from test_selection_graph import LATENCIES, scripted_pool

import agora.cli.align as align_cli
import agora.cli.select as select_cli
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.graphs.run_checkpoints import open_checkpointer
from cli_runs import agora, one_error_line


@pytest.fixture
def scripted(monkeypatch):
    """``run align`` on scripted models: every agent answers 4."""
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a", "b")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    return pool


def write(path: Path, *lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# ----------------------------------------------------------------------------- item 1: checkpoints

def test_a_crafted_checkpoint_is_refused_on_resume_and_runs_nothing(tmp_path, scripted):
    data = write(tmp_path / "g.jsonl", {"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"})
    db, sentinel = tmp_path / "t.db", tmp_path / "ran"
    saver = open_checkpointer(db)  # the row a resumed run reads for question q1 of run R
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"question": ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {sentinel}"]))}
    saver.put({"configurable": {"thread_id": "R:q1", "checkpoint_ns": ""}}, checkpoint, {}, {})
    saver.close()
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R")
    assert code == 2, output
    line = one_error_line(output)
    assert "t.db.checkpoints: thread 'R:q1': a checkpoint holds os.system" in line
    assert not sentinel.exists()


# ----------------------------------------------------------------------------- item 5: problem files

@pytest.mark.parametrize("fmt, line, needle", [
    ("mc", {"question": {"stem": "Q?", "choices": ["a", "b"]}, "answerKey": "A"}, "field 'question.choices'"),
    ("mc", {"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "2"]}, "answerKey": "0"},
     "field 'answerKey': '0' is not one of the labels"),
    ("mc", {"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "2"]}, "answerKey": "11"},
     "field 'answerKey': '11' is not one of the labels"),
    ("mc", {"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "5"]}, "answerKey": "5"},
     "field 'choices': numeric labels must be 1, 2"),
    ("gsm-hard", '{"input": "Q?", "target": Infinity}', "field 'target': not a finite number"),
    ("gsm-hard", '{"input": "Q?", "target": 1e400}', "field 'target': not a finite number"),
    ("gsm-hard", '{"input": "Q?", "target": NaN}', "field 'target': not a finite number"),
    ("mc", {"question": "Q?", "options": {"A": "x", "a": "y"}, "answer_idx": "a"}, "field 'options': duplicate option labels"),
])
def test_a_bad_problem_line_is_one_error_with_file_line_and_field(tmp_path, scripted, fmt, line, needle):
    data = write(tmp_path / "bad.jsonl", line)
    code, output = agora("run", "align", "--data", data, "--format", fmt, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {data}:1: {needle}")


def test_a_read_error_is_one_error_naming_the_file(tmp_path, scripted, monkeypatch):
    import errno
    import pathlib

    data = write(tmp_path / "g.jsonl", {"question": "Q?", "answer": "#### 4"})

    def failing_open(self, *args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(pathlib.Path, "open", failing_open)
    code, output = agora("run", "align", "--data", data, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == f"error: {data}: cannot read the file: Input/output error"


# ----------------------------------------------------------------------------- item 7: agora serve pool entries

@pytest.mark.parametrize("vllm_args, needle", [
    ('{host = "0.0.0.0"}', "'host' is refused"),
    ("{port = 80}", "'port' is refused"),
    ("{trust_remote_code = true}", "'trust_remote_code' is refused"),
])
def test_serve_refuses_vllm_args_that_move_the_server_or_run_remote_code(tmp_path, vllm_args, needle):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "vllm"\nmodel = "/hf/m"\nvllm_args = {vllm_args}\n')
    code, output = agora("serve", "--pool", pool, "--out", tmp_path / "served.toml")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {pool}: models[0] (m): field 'vllm_args': {needle}")
    assert not (tmp_path / "served.toml").exists()


# ----------------------------------------------------------------------------- item 8: paths out of their folder

def test_select_thread_names_stay_inside_out(tmp_path, monkeypatch):
    pool, _ = scripted_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    prompts = write(tmp_path / "prompts.jsonl", {"id": "q0", "prompt": "Say hi."}, {"id": "q1", "prompt": "Say bye."})
    out = tmp_path / "a" / "b" / "out"
    code, output = agora("select", "--prompts", prompts, "--budget-rounds", "2", "--simulate", "latency_s=-2",
                         "--sim-seeds", "2", "--db", tmp_path / "t.db", "--thread", "../../x", "--out", out)
    assert code == 0, output
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 2 and all(name.startswith("_.._.._x-") for name in written), written
    assert not (tmp_path / "a" / "x.json").exists() and not (tmp_path / "a" / "x-regret.png").exists()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]


# ----------------------------------------------------------------------------- item 9: bounds and ignored options

def test_comed_temperature_is_bounded_like_align(tmp_path, scripted, monkeypatch):
    import agora.cli.comed as comed_cli

    monkeypatch.setattr(comed_cli, "get_pool", lambda path: scripted)  # no real model, whatever happens
    for command in (["run", "comed"], ["calibrate", "comed", "--data", tmp_path / "dev.jsonl"]):
        code, output = agora(*command, "--temperature", "1e9", "--db", tmp_path / "t.db")
        assert (code, output.strip()) == (2, "error: --temperature: must be a finite number from 0 to 2, got 1e9"), output


@pytest.mark.parametrize("value", ["1e9", "nan", "inf", "2.5"])
def test_a_pool_temperature_above_the_cap_is_refused(tmp_path, value):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
                    f"temperature = {value}\n")
    code, output = agora("run", "align", "--format", "synthetic", "--pool", pool, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {pool}: models[0] (m): field 'temperature': ")


def test_synthetic_format_with_a_data_file_is_refused(tmp_path, scripted):
    data = write(tmp_path / "g.jsonl", {"question": "Q?", "answer": "#### 4"})
    code, output = agora("run", "align", "--format", "synthetic", "--data", data, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert "format 'synthetic' generates its problems and reads no file" in one_error_line(output)


def test_grpo_temperature_is_capped_as_every_pool_temperature():
    from agora.training.config import GRPOSettings

    assert GRPOSettings(temperature=2.0).temperature == 2.0
    for bad in (0.0, 2.5, 1e9):
        with pytest.raises(ValueError, match=r"temperature must be in \(0, 2.0\]"):
            GRPOSettings(temperature=bad)


# ----------------------------------------------------------------------------- issue 33: bad data at load time

@pytest.mark.parametrize("fmt, line, needle", [
    # a lone UTF-16 surrogate, written as a JSON escape: no UTF-8 text holds it (the trace DB could not store it)
    ("gsm8k", '{"question": "Q\\ud800?", "answer": "#### 4"}',
     "field 'question': not UTF-8 text: a lone UTF-16 surrogate (\\ud800)"),
    ("mc", '{"question": "Q?", "choices": ["a", "b\\udfff"], "answer": 0}',
     "field 'choices[1]': not UTF-8 text: a lone UTF-16 surrogate (\\udfff)"),
    # a GSM8K gold that is not a number: no answer could ever match it
    ("gsm8k", {"question": "Q?", "answer": "so\n#### seven"}, "field 'answer': the final answer after '####' is not a number"),
    # non-string options would be shown to the models as "A. None"
    ("mc", {"question": "Q?", "options": {"A": None, "B": "x"}, "answer_idx": "B"},
     "field 'options': option A is not a string: None"),
    ("mc", {"question": "Q?", "choices": ["a", 3], "answer": 0}, "field 'choices': option B is not a string: 3"),
    ("mc", {"question": "Q?", "choices": {"text": ["a", ["b"]], "label": ["A", "B"]}, "answerKey": "A"},
     "field 'choices': option B is not a string: ['b']"),
    # JSON nested 200,000 deep (RecursionError before), and a 5000-digit integer (no file or line before)
    ("gsm8k", '{"question": "Q?", "answer": "#### 4", "x": ' + "[" * 200_000 + "]" * 200_000 + "}",
     "JSON nested more than 64 levels deep"),
    ("gsm8k", '{"question": "Q?", "answer": "#### 4", "x": ' + "[" * 100 + "]" * 100 + "}",
     "field 'x': JSON nested more than 64 levels deep"),
    ("gsm-hard", '{"input": "Q?", "target": ' + "1" * 5000 + "}", "invalid JSON (an integer of more than 4300 digits)"),
])
def test_bad_data_is_refused_at_load_with_file_line_and_field(tmp_path, scripted, fmt, line, needle):
    data = write(tmp_path / "bad.jsonl", line)
    code, output = agora("run", "align", "--data", data, "--format", fmt, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {data}:1: {needle}")
    assert not (tmp_path / "t.db").exists()  # refused before anything is written


def test_a_surrogate_pair_is_one_character_not_a_lone_surrogate(tmp_path):
    from agora.tasks import load_problems

    data = write(tmp_path / "ok.jsonl", '{"question": "Q \\ud83d\\ude00?", "answer": "#### 4"}')
    assert load_problems(data, "gsm8k")[0].question == "Q \U0001F600?"


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_as_data_is_not_a_regular_file(tmp_path, scripted, special):
    import os

    path = tmp_path / "fifo" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)
    code, output = agora("run", "align", "--data", path, "--format", "gsm8k", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {path}: not a regular file")


@pytest.mark.parametrize("command, fmt, needle", [
    (["run", "align"], "mc", "--format mc needs a file: give --data FILE"),
    (["run", "align"], "synthtic", "--format 'synthtic': unknown format; choose one of gsm8k,"),
    (["run", "align"], "GSM8K", "--format 'GSM8K': unknown format"),
    (["run", "comed"], "math", "--format math needs a file: give --data FILE"),
    (["run", "comed"], "prompt", "--format 'prompt': unknown format"),
    (["converse"], "mc", "--format mc needs a file: give --prompts FILE"),
    (["train", "grpo", "--model", "qwen2.5-coder-0.5b", "--out", "o"], "mc", "--format mc reads a --data file"),
])
def test_a_format_without_a_file_is_refused_not_ignored(tmp_path, scripted, monkeypatch, command, fmt, needle):
    import agora.cli.comed as comed_cli
    import agora.cli.converse as converse_cli

    monkeypatch.setattr(comed_cli, "get_pool", lambda path: scripted)
    monkeypatch.setattr(converse_cli, "get_pool", lambda path: scripted, raising=False)
    code, output = agora(*command, "--format", fmt, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert needle in one_error_line(output)


def test_gsm8k_or_synthetic_format_without_a_file_is_honoured():
    from agora.cli._run import load_benchmark
    from agora.tasks.samples import sample_path

    data, fmt, problems = load_benchmark(None, "gsm8k", 2, 0)
    assert (data, fmt, len(problems), problems[0].source) == (sample_path("gsm8k")[0], "gsm8k", 2, "gsm8k")
    assert load_benchmark(None, "synthetic", 2, 0)[1:] == ("synthetic", load_benchmark(None, "synthetic", 2, 0)[2])
    assert load_benchmark(None, "synthetic", 2, 0)[2][0].source == "synthetic"


# ----------------------------------------------------------------------------- issue 33: pool values, encodings, vllm_args, bounds

DEAD_SERVER = 'backend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'


@pytest.mark.parametrize("line, needle", [
    ("timeout_s = inf", "field 'timeout_s': input should be a finite number, got inf"),
    ("timeout_s = 0", "field 'timeout_s': input should be greater than 0, got 0"),
    ("timeout_s = 1e9", "field 'timeout_s': input should be less than or equal to 86400"),
    ("n_ctx = 0", "field 'n_ctx': input should be greater than or equal to 16, got 0"),
    ('n_ctx = "4096"', "field 'n_ctx': input should be a valid integer, got '4096'"),
    ("system_prompt = 5", "field 'system_prompt': input should be a valid string, got 5"),
    ("family = true", "field 'family': input should be a valid string, got True"),
    ("max_retries = 1000000", "field 'max_retries': input should be less than or equal to 20"),
    ("cost_per_1k_tokens = inf", "field 'cost_per_1k_tokens': input should be a finite number"),
])
def test_pool_values_that_would_fail_every_call_are_refused_at_load(tmp_path, line, needle):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\n{DEAD_SERVER}{line}\n')
    code, output = agora("run", "align", "--format", "synthetic", "--pool", pool, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {pool}: models[0] (m): {needle}")


def test_a_utf16_pool_file_is_one_line_naming_the_file(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\n{DEAD_SERVER}', encoding="utf-16")
    code, output = agora("run", "align", "--format", "synthetic", "--pool", pool, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == (f"error: {pool}: a pool file must be UTF-8 text; it looks like UTF-16 "
                                      "(a byte-order mark or NUL bytes): save it as UTF-8")
    pool.write_bytes(b"\xef\xbb\xbf" + f'[[models]]\nname = "m"\n{DEAD_SERVER}'.encode())  # UTF-8 with a BOM is fine
    from agora.models.pool import load_pool

    assert load_pool(pool).names == ["m"]


@pytest.mark.parametrize("vllm_args, needle", [
    ('{compilation_config = {backend = "evil.module.compile"}}', "'compilation_config.backend' is refused: vLLM's "
     "compilation_config takes import paths"),
    ('{compilation_config = {inductor_passes = {p = "evil:run"}}}', "'compilation_config.inductor_passes' is refused"),
    ('{compilation_config = "{\\"backend\\": \\"evil.fn\\"}"}', "'compilation_config' must be an optimisation level"),
    ('{download_dir = "/etc"}', "'download_dir' is refused: it loads or writes files"),
    ("{a_flag_from_a_later_vllm = true}", "'a_flag_from_a_later_vllm' is refused: not one of the vLLM engine "
     "arguments a pool file may set"),
])
def test_vllm_args_outside_the_allow_list_are_refused(tmp_path, vllm_args, needle):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "vllm"\nmodel = "/hf/m"\nvllm_args = {vllm_args}\n')
    code, output = agora("serve", "--pool", pool, "--out", tmp_path / "served.toml")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {pool}: models[0] (m): field 'vllm_args': {needle}")
    assert not (tmp_path / "served.toml").exists()


def test_compilation_config_as_a_level_or_safe_keys_still_passes():
    from agora.models.vllm_args import vllm_args_problem

    assert vllm_args_problem({"compilation_config": 3}) is None
    assert vllm_args_problem({"compilation_config": {"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}}) is None


@pytest.mark.parametrize("setting, needle", [
    ("rounds = 100000", "DebateConfig.rounds must be at most 10 (each question costs agents × rounds model calls), "
     "got 100000"),
    ("agents = 5000", "DebateConfig.agents must be at most 16"),
])
def test_a_debate_config_file_with_unbounded_rounds_is_refused(tmp_path, setting, needle):
    config = tmp_path / "debate.toml"
    config.write_text(f"[debate]\n{setting}\n")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\n{DEAD_SERVER}')
    code, output = agora("run", "debate", "--format", "synthetic", "--pool", pool, "--config", config,
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert needle in one_error_line(output)


# ----------------------------------------------------------------------------- issue 33: malformed preference_pairs rows

def _pair_row(**changes) -> dict:
    row = {"pair_id": "p1", "run_id": "duel-1", "duel_id": "d1", "iteration": 0, "prompt": "2+2?",
           "prompt_messages": json.dumps([{"role": "user", "content": "2+2?"}]), "chosen": "4", "rejected": "5",
           "chosen_model": "qwen2.5-coder-0.5b", "rejected_model": "m2", "chosen_score": 8.0, "rejected_score": 6.0,
           "margin": 2.0, "judge_scores": "{}", "reputations": "{}", "gold": None, "kind": None, "created_at": "t"}
    return {**row, **changes}


@pytest.mark.parametrize("changes, needle", [
    ({"prompt_messages": '{"a": 1}'}, "column 'prompt_messages': expected a JSON list, got {'a': 1}"),  # TypeError before
    ({"prompt_messages": '["hi"]'}, "column 'prompt_messages': message 0 is not a"),  # TypeError before
    ({"margin": "big"}, "column 'margin': expected a finite number, got str 'big'"),  # TypeError before
    ({"chosen": None}, "column 'chosen': expected text, got NULL"),  # AttributeError before
    ({"rejected": 5}, "column 'rejected': expected text, got int 5"),  # AttributeError before
    ({"judge_scores": "{oops"}, "column 'judge_scores': not JSON (Expecting property name"),  # no table, row or column
])
def test_a_malformed_preference_pair_is_one_line_naming_table_row_and_column(tmp_path, changes, needle):
    import sqlite_utils

    db = tmp_path / "t.db"
    sqlite_utils.Database(db)["preference_pairs"].insert_all([_pair_row(**changes)], pk="pair_id")
    code, output = agora("train", "dpo", "--db", db, "--model", "qwen2.5-coder-0.5b", "--out", tmp_path / "out")
    assert code == 2, output
    assert one_error_line(output).startswith(f"error: {db}: table preference_pairs, row pair_id='p1': {needle}")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- issue 33: rich markup in user strings

def test_markup_in_a_run_id_or_member_name_is_printed_as_written(tmp_path, monkeypatch):
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a[/x]", "b[bold]")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    for run_id in ("[/x]", "exp[v2]"):  # MarkupError, and "exp" printed, before
        code, output = agora("run", "align", "--format", "synthetic", "--limit", "1", "--db", tmp_path / "t.db",
                             "--run-id", run_id)
        assert code == 0, output
        assert f"run {run_id}: 1 synthetic problem," in output and f"ALIGN run {run_id}" in output
        assert "pool a[/x], b[bold]" in output


def test_the_failed_questions_hint_names_the_run_id_as_typed(capsys):
    import typer
    from types import SimpleNamespace

    from agora.cli._shared import exit_if_failed

    failed = SimpleNamespace(problem=SimpleNamespace(id="q[/x]"), error="boom [red]")
    with pytest.raises(typer.Exit):
        exit_if_failed(SimpleNamespace(failed=[failed]), 1, "exp[v2]")
    err = capsys.readouterr().err
    assert "(q[/x]: boom [red])" in err and "rerun with --run-id 'exp[v2]' to retry them" in " ".join(err.split())


def test_select_prints_a_thread_with_markup_as_written(tmp_path, monkeypatch):
    pool, _ = scripted_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    prompts = write(tmp_path / "prompts.jsonl", {"id": "q0", "prompt": "Say hi."})
    code, output = agora("select", "--prompts", prompts, "--budget-rounds", "1", "--simulate", "latency_s=-2",
                         "--sim-seeds", "1", "--db", tmp_path / "t.db", "--thread", "exp[v2]", "--out", tmp_path / "out")
    assert code == 0, output
    assert "session exp[v2]:" in output and "CUPID session exp[v2]" in output


def test_calibrate_comed_refuses_an_existing_out_file(tmp_path):
    from typer.testing import CliRunner as _Runner

    from agora.cli.main import app as _app

    data = tmp_path / "dev.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    keep = tmp_path / "keep.toml"
    keep.write_text("mine")
    result = _Runner().invoke(_app, ["calibrate", "comed", "--data", str(data), "--format", "gsm8k", "--out", str(keep),
                                     "--db", str(tmp_path / "c.db")])
    assert result.exit_code == 2 and "the file exists" in result.output and "--force" in result.output
    assert keep.read_text() == "mine" and not (tmp_path / "c.db").exists()
