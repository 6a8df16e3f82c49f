"""The ``agora run align`` command as a user runs it (subprocess)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlite_utils

AGORA = [sys.executable, "-m", "agora.cli"]


def agora(*args, cwd=None, timeout=900):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "160"}
    return subprocess.run([*AGORA, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)


def test_malformed_line_is_one_line_error_without_traceback(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "Q?", "answer": "#### 1"}\n{"question": "R?", "answer": "no marker"}\n')
    out = agora("run", "align", "--data", data, "--format", "gsm8k", "--db", tmp_path / "t.db")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {data}:2: field 'answer': no '#### N' final answer"]


def test_bad_pool_file_names_the_entry_and_field(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "x"\nbackend = "llamacpp"\npath = "missing.gguf"\n')
    out = agora("run", "align", "--pool", pool, "--db", tmp_path / "t.db")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "models[0] (x): field 'path': no such file" in out.stderr


def write_jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["gsm8k", "gsm-hard", "mc"])
def test_embedded_pool_end_to_end(tmp_path, fmt, shared_data):
    if fmt == "gsm8k":
        data = shared_data / "gsm8k" / "test.jsonl"
    elif fmt == "gsm-hard":
        data = write_jsonl(tmp_path / "gsmhard.jsonl", [
            {"input": "Janet has 3 apples and buys 1500000 more. How many apples does she have?", "code": "", "target": 1500003.0},
            {"input": "A rope of 7.5 m is cut in 3 equal parts. How long is each part in meters?", "code": "", "target": 2.5},
        ])
    else:  # MedQA style
        data = write_jsonl(tmp_path / "medqa.jsonl", [
            {"question": "Which vitamin deficiency causes scurvy?", "options": {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"}, "answer_idx": "B"},
            {"question": "Which organ produces insulin?", "options": {"A": "Liver", "B": "Kidney", "C": "Pancreas", "D": "Spleen"}, "answer_idx": "C"},
        ])
    db = tmp_path / "t.db"
    out = agora("run", "align", "--data", data, "--limit", 2, "--agents", 2, "--samples", 2, "--max-tokens", 64,
                "--db", db, "--run-id", "e2e", "--pool", "tiny")
    assert out.returncode == 0, out.stderr
    for method in ("align", "single_agent", "self_consistency", "best_of_n"):
        assert method in out.stdout
    assert f"traces: {db}" in out.stdout
    tables = sqlite_utils.Database(db)
    assert tables["runs"].count == 1 and tables["questions"].count == 2 and tables["results"].count == 8
    calls = list(tables["model_calls"].rows)
    assert len(calls) == 2 * 2 * 2
    assert {c["model"] for c in calls} == {"smollm2-135m", "gemma3-270m"}
    assert all(c["error"] is None and c["completion_tokens"] > 0 and c["prompt_tokens"] > 0 for c in calls)


@pytest.mark.slow
def test_killed_run_resumes_with_same_run_id(tmp_path):
    db = tmp_path / "t.db"
    # Two questions in flight, so the kill lands while questions are half done and at least 3 rounds
    # remain (the embedded pool's default of 8 in flight would finish all of them at once).
    args = ["run", "align", "--format", "synthetic", "--limit", 8, "--agents", 2, "--samples", 2,
            "--max-tokens", 48, "--db", db, "--run-id", "killme", "--pool", "tiny", "--concurrency", 2]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([*AGORA, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 600
    done = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
        if db.exists():
            try:
                done = sqlite_utils.Database(db)["questions"].count
            except Exception:  # noqa: BLE001 - table not created yet
                done = 0
            if done >= 1:
                break
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = sqlite_utils.Database(db)["questions"].count
    assert 1 <= before < 8
    out = agora(*args)
    assert out.returncode == 0, out.stderr
    assert f"resumed: {before} of 8 questions already done" in out.stdout
    tables = sqlite_utils.Database(db)
    assert tables["questions"].count == 8 and tables["results"].count == 32
    rows = list(tables.query("select question_id, count(*) n from model_calls group by question_id"))
    assert len(rows) == 8 and all(r["n"] >= 4 for r in rows)
    # Calls of the question cut off by the kill may be redone, but never written twice.
    assert len({c["call_id"] for c in tables["model_calls"].rows}) == tables["model_calls"].count


def test_pool_errors_keep_their_brackets_and_reject_non_gguf_files(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("title = 'no models'\n")
    out = agora("run", "align", "--pool", empty, "--db", tmp_path / "t.db")
    assert out.returncode == 2 and "needs at least one [[models]] table" in out.stderr
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_text('{"not": "a model"}\n')
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "x"\nbackend = "llamacpp"\npath = "{not_gguf}"\n')
    out = agora("run", "align", "--pool", pool, "--db", tmp_path / "t.db")
    assert out.returncode == 2 and "is not a GGUF file" in out.stderr


def test_unknown_pool_fields_are_reported(tmp_path, caplog):
    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "x"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'model = "m"\ntemprature = 0.2\nfeatures = { latency_s = 0.4 }\n')
    with caplog.at_level("WARNING", logger="agora.pool"):
        spec = load_pool(pool)["x"].spec
    assert spec.extra == {"temprature": 0.2, "features": {"latency_s": 0.4}}
    assert "unknown field(s) temprature are ignored" in caplog.text and "features" not in caplog.text
