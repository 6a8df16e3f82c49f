"""Probes of the CLI, round 16: float options refused in Agora's one line, an option given twice,
paths holding spaces and newlines, empty ``AGORA_*`` variables, a trace database locked by another
writer, symbolic-link loops, unbounded conversation turns, and a new user's or an attacker's misuse
of the commands (odd unicode, truncated files, folders where files go). The models are fake
(``FakeListChatModel`` in a ``--pool`` TOML), never a real one."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from pathlib import Path

import pytest

from cli_runs import agora, one_error_line, fake_pool

_pool = fake_pool


def _data(folder: Path, name: str = "q.jsonl", n: int = 2) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"})
                            + "\n" for i in range(1, n + 1)))
    return path


def _run(tmp_path, *args, **kw):
    return agora("run", "align", "--pool", _pool(tmp_path), "--concurrency", "1", *args, **kw)


@pytest.fixture
def recorded(tmp_path):
    """A trace database holding run ``r`` of 2 questions."""
    db = tmp_path / "t.db"
    code, output = _run(tmp_path, "--data", _data(tmp_path), "--db", db, "--run-id", "r")
    assert code == 0, output
    return db


def _loop(path: Path) -> Path:
    """``path``, a symbolic link to a link back to it."""
    other = path.with_name(path.name + ".b")
    os.symlink(other, path)
    os.symlink(path, other)
    return path


# ---------------------------------------------------------------------------------- float options


@pytest.mark.parametrize("args, said", [
    (("bench", "--tasks", "x.jsonl", "--lambda", "nan"), "error: --lambda: must be a finite number, got nan"),
    (("bench", "--tasks", "x.jsonl", "--max-calls", "-inf"), "error: --max-calls: must be a finite number, got -inf"),
    (("calibrate", "comed", "--lambda", "1e999"), "error: --lambda: must be a finite number, got 1e999"),
    (("converse", "--temperature", "nan"), "error: --temperature: must be a finite number from 0 to 2, got nan"),
    (("run", "align", "--tau", "two"), "error: --tau: must be a finite number from 0 to 1, got 'two'"),
    (("duel", "--instructions", "x.jsonl", "--eta", "inf"), "error: --eta: must be a finite number, got inf"),
])
def test_a_float_option_refused_as_it_is_parsed_is_one_line(tmp_path, args, said):
    """Before: typer's usage box of 5 lines (``Invalid value for '--lambda': 'nan' is not a number``)."""
    code, output = agora(*args, "--db", tmp_path / "t.db")
    assert code == 2 and output.strip() == said, output
    assert not (tmp_path / "t.db").exists()


def test_the_float_parser_without_a_name_still_raises_bad_parameter():
    import typer

    from agora.cli._apps import finite_float

    with pytest.raises(typer.BadParameter, match=r"^must be a finite number from 0 to 1, got nan$"):
        finite_float(0.0, 1.0)("nan")
    assert finite_float(0.0, 1.0, "--tau")("0.5") == 0.5


# ---------------------------------------------------------------------------------- an option twice


def test_a_single_value_option_given_twice_keeps_the_last_as_click_does(tmp_path):
    """``--run-id a --run-id b`` records run ``b``: the last value wins, as in click and argparse, so
    that a script may append an override to a base command (``$BASE --limit 2``). Refusing it was
    tried and broke that idiom (Agora's own tests use it)."""
    db = tmp_path / "t.db"
    code, output = _run(tmp_path, "--data", _data(tmp_path), "--db", db, "--run-id", "a", "--run-id", "b")
    assert code == 0, output
    import sqlite3

    with sqlite3.connect(db) as con:
        assert [r for (r,) in con.execute("select run_id from runs")] == ["b"]


def test_repeatable_options_and_flags_given_twice_still_work(recorded, tmp_path):
    out = tmp_path / "b.agora.jsonl.gz"
    code, output = agora("export", "--db", recorded, "--run-id", "r", "--run-id", "r", "--out", out)
    assert code == 0 and "wrote" in output and out.is_file(), output
    code, output = agora("report", "runs", "--db", recorded, "--json", "--json")
    assert code == 0 and [json.loads(line)["run_id"] for line in output.splitlines()] == ["r"], output


# ---------------------------------------------------------------------------------- odd paths


def test_paths_with_spaces_and_newlines_run_report_and_export(tmp_path):
    folder = tmp_path / "my runs\nnew line"
    folder.mkdir()
    data, db, out = _data(folder, "q s.jsonl"), folder / "t b.db", folder / "b u.agora.jsonl.gz"
    code, output = _run(tmp_path, "--data", data, "--db", db, "--run-id", "r")
    assert code == 0, output
    code, output = agora("report", "runs", "--db", db, "--json")
    assert code == 0 and json.loads(output)["questions"] == 2, output
    code, output = agora("export", "--db", db, "--run-id", "r", "--out", out)
    assert code == 0 and out.is_file(), output


@pytest.mark.parametrize("args, said", [
    (("run", "align", "--data", "{d}/no\nsuch.jsonl"), "error: {d}/no\\nsuch.jsonl: file not found"),
    (("run", "align", "--data", "{d}/q.jsonl", "--pool", "{d}/no\npool.toml"),
     "error: {d}/no\\npool.toml: pool file not found (built-in pools: default, tiny, diverse)"),
    (("report", "runs"), "error: {d}/no\\nsuch.db: no such trace database"),
])
def test_a_newline_in_a_missing_path_stays_one_error_line(tmp_path, args, said):
    """Before: ``error: /tmp/no`` on one line and ``such.jsonl: file not found`` on the next."""
    _data(tmp_path)
    args = [a.format(d=tmp_path) for a in args]
    db = str(tmp_path / "no\nsuch.db") if args[0] == "report" else str(tmp_path / "t.db")
    if args[0] == "run":
        args += ["--pool", str(_pool(tmp_path))] if "--pool" not in args else []
    code, output = agora(*args, "--db", db)
    assert code == 2 and output.strip() == said.format(d=tmp_path), output


def test_error_line_escapes_newlines_and_controls():
    from agora.cli._shared import error_line

    assert error_line("a\nb\x1b[2Jc\td") == "a\\nb\\x1b[2Jc\td"


# ---------------------------------------------------------------------------------- environment


def _agora_variables():
    from agora.models.environment import VARIABLES

    return [v.name for v in VARIABLES if v.scope == "agora"]


@pytest.mark.parametrize("name", _agora_variables())
def test_an_empty_agora_variable_means_unset_and_spaces_alone_are_refused(name, monkeypatch):
    """Before: ``AGORA_LEASE_S=''`` passed the CLI's check but ``lease_s()`` refused it (``a lease is a
    number of seconds``); ``AGORA_LLAMA_ENGINE=' '`` was accepted where every other variable refuses
    spaces alone."""
    from agora.models.environment import EnvironmentVariableError, check_environment, env_value

    check_environment({name: ""})
    monkeypatch.setenv(name, "")
    assert env_value(name) is None
    with pytest.raises(EnvironmentVariableError, match=f"^{name}=' ': "):
        check_environment({name: " "})


def test_an_empty_lease_is_the_default_and_a_bad_one_names_the_variable(monkeypatch):
    from agora.models.environment import EnvironmentVariableError
    from agora.traces.claims import LEASE_S, lease_s

    monkeypatch.setenv("AGORA_LEASE_S", "")
    assert lease_s() == LEASE_S
    monkeypatch.setenv("AGORA_LEASE_S", " 2.5 ")
    assert lease_s() == 2.5
    monkeypatch.setenv("AGORA_LEASE_S", "nan")
    with pytest.raises(EnvironmentVariableError, match=r"^AGORA_LEASE_S='nan': not a number above 0 \(seconds"):
        lease_s()


def test_an_empty_variable_on_the_command_line_runs_and_spaces_are_one_line(tmp_path):
    code, output = _run(tmp_path, "--data", _data(tmp_path), "--db", tmp_path / "t.db",
                        env={"AGORA_LLAMA_THREADS": "", "AGORA_CACHE_DIR": "", "AGORA_LEASE_S": ""})
    assert code == 0, output
    code, output = _run(tmp_path, "--data", _data(tmp_path), "--db", tmp_path / "u.db",
                        env={"AGORA_LLAMA_ENGINE": "  "})
    assert code == 2 and one_error_line(output).startswith("error: AGORA_LLAMA_ENGINE='  ': llama-cpp-python is the "
                                                           "one embedded engine and it is not an engine's name"), output
    assert not (tmp_path / "u.db").exists()


# ---------------------------------------------------------------------------------- a locked database


@pytest.fixture
def short_wait(monkeypatch):
    """SQLite's wait for another writer's lock, 1 s instead of 30."""
    import agora.graphs.run_checkpoints as run_checkpoints
    import agora.traces.sqlite_file as sqlite_file
    import agora.traces.store as store

    for module in (run_checkpoints, sqlite_file, store):
        monkeypatch.setattr(module, "BUSY_TIMEOUT_S", 1.0)


def test_a_database_locked_by_another_writer(recorded, tmp_path, short_wait):
    """A run and an import wait out the lock and are refused in one line, writing nothing; a report
    and an export read the committed rows (write-ahead log) meanwhile; nothing is lost."""
    holder = sqlite3.connect(recorded, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, output = _run(tmp_path, "--data", _data(tmp_path), "--db", recorded, "--run-id", "second")
        assert code == 2 and one_error_line(output) == (f"error: {recorded}: the database is locked by another "
                                                        "process (waited 1 s); try again once it is done"), output
        code, output = agora("report", "runs", "--db", recorded, "--json")
        assert code == 0 and json.loads(output)["run_id"] == "r", output
        bundle = tmp_path / "b.agora.jsonl.gz"
        code, output = agora("export", "--db", recorded, "--run-id", "r", "--out", bundle)
        assert code == 0 and bundle.is_file(), output
        code, output = agora("import", bundle, "--db", recorded)
        assert code == 2 and "the database is locked by another process" in one_error_line(output), output
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    code, output = agora("report", "runs", "--db", recorded, "--json")
    assert code == 0 and [json.loads(line)["run_id"] for line in output.splitlines()] == ["r"], output
    assert json.loads(output)["questions"] == 2


# ---------------------------------------------------------------------------------- files and folders


def test_a_symbolic_link_loop_as_calibrate_out_is_refused_before_the_dev_run(tmp_path):
    """Before: the whole calibration ran, then an OSError traceback (ELOOP) writing --out, exit 1."""
    db = tmp_path / "t.db"
    code, output = agora("calibrate", "comed", "--pool", _pool(tmp_path), "--data", _data(tmp_path), "--db", db,
                         "--out", _loop(tmp_path / "loop.toml"))
    assert code == 2 and output.strip() == (f"error: --out {tmp_path / 'loop.toml'}: a symbolic link that links "
                                            "back to itself (a loop); give the file it should point to"), output
    assert not db.exists()


def test_a_symbolic_link_loop_as_a_bundle_says_so(tmp_path):
    """Before: ``no such bundle file``, though ``ls`` lists it."""
    code, output = agora("import", _loop(tmp_path / "b.agora.jsonl.gz"), "--db", tmp_path / "t.db")
    assert code == 2 and output.strip() == (f"error: {tmp_path / 'b.agora.jsonl.gz'}: a symbolic link that links "
                                            "back to itself (a loop); give the file it should point to"), output
    assert not (tmp_path / "t.db").exists()


def test_a_symbolic_link_loop_as_a_pool_says_so(tmp_path):
    """Before: ``pool file not found``, though ``ls`` lists it (``--data`` said it was a loop)."""
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--pool", _loop(tmp_path / "pool.toml"), "--data", _data(tmp_path),
                         "--db", db)
    assert code == 2 and output.strip() == (f"error: {tmp_path / 'pool.toml'}: a symbolic link that links back to "
                                            "itself (a loop); give the file it should point to"), output
    assert not db.exists()


def test_converse_turns_are_bounded_before_the_database_is_created(tmp_path):
    """Before: ``--turns 1e30`` ran on and on, its checkpoint file past 70 GB in ten minutes."""
    from agora.agents.conversation import MAX_TURNS

    db = tmp_path / "t.db"
    for turns in (str(10 ** 30), str(MAX_TURNS + 1)):
        code, output = agora("converse", "--pool", _pool(tmp_path), "--db", db, "--turns", turns)
        assert code == 2 and output.strip() == (f"error: --turns: ConversationConfig.turns must be an integer in "
                                                f"2..{MAX_TURNS}, got {turns}"), output
    assert not db.exists()


# ---------------------------------------------------------------------------------- probes that held


def _garbage_bundle(tmp_path):
    path = tmp_path / "g.agora.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"kind": "header"\nnot json\n'))
    return path


@pytest.mark.parametrize("make, args, said", [
    (lambda t: (t / "adir").mkdir(), ("report", "runs", "--db", "{t}/adir"), "error: {t}/adir: is a folder, not a "
                                                                              "database file"),
    (lambda t: (t / "q.jsonl").write_text('{"id": "q1", "question": "What is'),
     ("run", "align", "--pool", "{t}/pool.toml", "--data", "{t}/q.jsonl", "--db", "{t}/t.db"),
     "error: {t}/q.jsonl:1: invalid JSON (Unterminated string starting at column 26)"),  # (was "at at")
    (lambda t: (t / "q.jsonl").write_text(""), ("run", "align", "--pool", "{t}/pool.toml", "--data", "{t}/q.jsonl",
                                                "--db", "{t}/t.db"), "error: {t}/q.jsonl: file has no records"),
    (lambda t: None, ("run", "align", "--pool", "{t}/pool.toml", "--data", "/dev/null", "--db", "{t}/t.db"),
     "error: /dev/null: not a regular file (a FIFO, device or socket); give a JSONL file"),
    (lambda t: (t / "b.gz").write_bytes(gzip.compress(b"x" * 1000)[:40]), ("import", "{t}/b.gz", "--db", "{t}/t.db"),
     "error: {t}/b.gz:1: not JSON (Expecting value)"),
    (lambda t: (t / "b.gz").write_bytes(gzip.compress(('{"kind": "' + os.urandom(2000).hex() + '"}\n').encode())[:300]),
     ("import", "{t}/b.gz", "--db", "{t}/t.db"),
     "error: {t}/b.gz: not a readable gzip bundle (Compressed file ended before the end-of-stream marker was "
     "reached)"),
    (_garbage_bundle, ("import", "{t}/g.agora.jsonl.gz", "--db", "{t}/t.db"),
     "error: {t}/g.agora.jsonl.gz:1: not JSON (Expecting ',' delimiter)"),
    (lambda t: None, ("run", "align", "--pool", "{t}/pool.toml", "--data", "{t}/q.jsonl", "--db", "{t}/t.db",
                      "--run-id", "ab\u202ecd"),
     "error: --run-id 'ab\\u202ecd': holds the invisible format character '\\u202e' (RIGHT-TO-LEFT OVERRIDE) at "
     "position 2; run ids are printed and written to files, so use visible characters"),
    (lambda t: None, ("bench", "--pool", "{t}/pool.toml", "--tasks", ",,", "--db", "{t}/t.db"),
     "error: --tasks: no task file given"),
])
def test_probes_that_held_stay_one_line(tmp_path, make, args, said):
    _pool(tmp_path)
    if make(tmp_path) is None and not (tmp_path / "q.jsonl").exists():
        _data(tmp_path)
    code, output = agora(*[a.format(t=tmp_path) for a in args])
    assert code == 2, output
    line = one_error_line(output)
    assert line == said.format(t=tmp_path), output
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("param, said", [
    ("tau=nan", "error: --param tau=nan: must be in [0, 1]"),
    ("tau=1e999", "error: --param tau=inf: must be in [0, 1]"),
    ("tau", "error: --param 'tau': expected key=value"),
])
def test_replay_params_held(recorded, param, said):
    code, output = agora("replay", "--db", recorded, "--run-id", "r", "--rule", "align", "--param", param)
    assert code == 2 and output.strip() == said, output


def test_a_rule_with_a_newline_is_one_line(recorded):
    code, output = agora("replay", "--db", recorded, "--run-id", "r", "--rule", "x\ny")
    assert code == 2 and output.strip().startswith("error: --rule x\\ny: unknown; choose from align,"), output
