"""Bad input, one case per kind (issue 16): each is refused with one line naming what is wrong
(exit 2), or made safe, and nothing in a data file runs code. Fast (no real model): CI runs it."""

import json
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from test_selection_graph import LATENCIES, scripted_pool
from typer.testing import CliRunner

import agora.cli.align as align_cli
import agora.cli.select as select_cli
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.cli.main import app
from agora.graphs.runner import open_checkpointer


def agora(*args, **kw):
    result = CliRunner().invoke(app, [str(a) for a in args], **kw)
    return result.exit_code, result.output  # stdout and stderr


def one_error_line(output: str) -> str:
    """The ``error: ...`` line of a refused command (there is exactly one, and no traceback)."""
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output
    return errors[0]


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
    assert one_error_line(output) == f"error: {data}:0: cannot read the file: Input/output error"


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
        assert code == 2 and "Invalid value for '--temperature'" in output, output


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
