"""Probes of the CLI, round 18: usage errors typer showed in its box of five lines (an extra
argument, an unknown option or command, an option without its value, ``--show-completion``), a
``--db`` in a read-only folder, and checks that already held (a key given twice in a task file, a
bundle of another version, ``AGORA_*`` variables bad together or empty). Nothing here reaches a
model: each command is refused before a run starts (the pool is fake, ``FakeListChatModel``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cli_runs import agora, fake_pool

_pool = fake_pool


def _data(folder: Path, name: str = "q.jsonl") -> Path:
    path = folder / name
    path.write_text(json.dumps({"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    return path


# ---------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args, said", [
    (("report", "runs", "EXTRA"),
     "error: agora report runs: Got unexpected extra argument(s) (EXTRA); see 'agora report runs --help'"),
    (("report", "runs", "--bogus"),
     "error: agora report runs: No such option: --bogus; see 'agora report runs --help'"),
    (("nosuch",), "error: agora: No such command 'nosuch'; see 'agora --help'"),
    (("--bogus",), "error: agora: No such option: --bogus; see 'agora --help'"),
    (("run", "align", "--limit"),
     "error: Option '--limit' requires an argument"),
    (("--show-completion",),
     "error: --show-completion: agora installs no shell completion (its commands are listed by 'agora --help')"),
    (("--install-completion",),
     "error: --install-completion: agora installs no shell completion (its commands are listed by 'agora --help')"),
])
def test_a_usage_error_is_one_line_naming_the_command(tmp_path, args, said):
    """Before: typer's usage box (``Usage: root report runs [OPTIONS]`` ... ``╭─ Error ─``)."""
    code, output = agora(*args)
    assert code == 2 and output.strip() == said, output


def test_the_console_script_prints_the_same_one_line(tmp_path):
    """``agora report runs EXTRA`` as a user runs it (``python -m agora.cli``): the same line, exit 2."""
    import sys

    done = subprocess.run([sys.executable, "-m", "agora.cli", "report", "runs", "EXTRA"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("error: agora report runs: Got unexpected extra argument(s) (EXTRA); "
                                   "see 'agora report runs --help'"), done.stderr


# ---------------------------------------------------------------------------------- a key given twice


@pytest.mark.parametrize("command", [("run", "align", "--data"), ("bench", "--tasks"), ("duel", "--instructions")])
def test_a_key_given_twice_in_a_task_file_is_refused_naming_file_line_and_key(tmp_path, command):
    """Held already (``object_pairs_hook``): kept as a check of every command that reads a task file."""
    data = tmp_path / "dup.jsonl"
    data.write_text(json.dumps({"id": "q0", "question": "What is 1 + 1?", "answer": "#### 2"}) + "\n"
                    + '{"id": "q1", "question": "a", "question": "What is 2 + 2?", "answer": "#### 4"}\n')
    code, output = agora(*command, data, "--pool", _pool(tmp_path), "--db", tmp_path / "t.db")
    assert code == 2 and output.strip() == (f"error: {data}:2: field 'question': given twice in one JSON object "
                                            "(which one is meant?)"), output
    assert not (tmp_path / "t.db").exists()


# ---------------------------------------------------------------------------------- a read-only --db


def _read_only(path: Path) -> None:
    """Make ``path`` read-only for this process: ``chattr +i`` (which binds root too) where it works,
    else ``chmod`` (which binds others than root); skip when neither does."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        if os.geteuid() == 0:
            pytest.skip("root writes read-only folders and chattr +i is not available here")
        path.chmod(0o555)


def _writable(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o755)


@pytest.fixture
def bundle(tmp_path):
    from agora.traces.store import TraceStore

    store = TraceStore(tmp_path / "src.db")
    store.start_run("r1", "align", config={}, pool=[], dataset={})
    store.close()
    out = tmp_path / "r1.agora.jsonl.gz"
    code, output = agora("export", "--db", tmp_path / "src.db", "--run-id", "r1", "--out", out)
    assert code == 0, output
    return out


@pytest.mark.parametrize("command", ["run", "import"])
def test_a_db_in_a_read_only_folder_is_one_line_saying_so(tmp_path, bundle, command):
    """Before: ``cannot open the database file (does its folder exist, and is it writable?)``."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "t.db"
    args = (("run", "align", "--data", _data(tmp_path), "--pool", _pool(tmp_path)) if command == "run"
            else ("import", bundle))
    _read_only(folder)
    try:
        code, output = agora(*args, "--db", db)
    finally:
        _writable(folder)
    assert code == 2 and output.strip() == (f"error: {db}: not writable (no file can be created in the folder "
                                            f"{folder}: it is read-only)"), output
    assert not db.exists()

