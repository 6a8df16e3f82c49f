"""Probes of the CLI, round 15: corrupt trace databases given as ``--db``, ``nan`` and ``inf`` as
float options, run ids thousands of characters long, and a new user's or an attacker's misuse of
the commands and the trace store. The models are scripted (tests/test_align_principal.py's pool),
never a real one."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

import agora.cli.align as align_cli
from cli_runs import agora, one_error_line
from test_align_principal import pool_of


def _unwrapped(output: str) -> str:
    """A usage error's box, unwrapped into one line of words."""
    return " ".join(output.replace("│", " ").split())


def _data(tmp_path, n: int = 2):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"})
                            + "\n" for i in range(1, n + 1)))
    return path


@pytest.fixture
def scripted(monkeypatch):
    """`agora run align` on a scripted pool of two members and an aggregator."""
    pool, _ = pool_of(a=["The answer is 2."], b=["The answer is 2."], agg=["The answer is 2."])
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    return pool


# ---------------------------------------------------------------------------------- run id length


def test_a_run_id_of_5000_characters_is_refused_in_one_line_before_the_db_is_created(tmp_path, scripted):
    """Before: accepted and stored (a 5000-character id in every table row, report and printed command)."""
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", _data(tmp_path), "--db", db, "--run-id", "r" * 5000,
                         "--models", "a,b", "--concurrency", "1")
    assert code == 2, output
    assert one_error_line(output) == ("error: --run-id " + repr("r" * 40) + "… (5000 characters): a run id has at "
                                      "most 200 characters; give a shorter one")
    assert not db.exists()
    code, output = agora("run", "align", "--data", _data(tmp_path), "--db", db, "--run-id", "r" * 200,
                         "--models", "a,b", "--concurrency", "1")
    assert code == 0, output
    code, output = agora("report", "runs", "--db", db, "--json")
    assert code == 0 and [json.loads(line)["run_id"] for line in output.splitlines()] == ["r" * 200], output


def test_stored_and_derived_run_ids_have_room_above_the_users_limit():
    """The ids Agora derives from a user's (``<bench>:<task>:<protocol>``) pass the store's check."""
    from agora.tasks.errors import InputError
    from agora.traces.store import MAX_RUN_ID_CHARS, MAX_STORED_RUN_ID_CHARS, check_run_id

    derived = "b" * MAX_RUN_ID_CHARS + ":gsm8k:align"
    assert check_run_id(derived, "run id", max_chars=MAX_STORED_RUN_ID_CHARS) == derived
    with pytest.raises(InputError, match=r"\(201 characters\): a run id has at most 200 characters"):
        check_run_id("b" * 201)
    with pytest.raises(InputError, match=r"run id 'bbb.*\(5000 characters\): a run id has at most 1000"):
        check_run_id("b" * 5000, "run id", max_chars=MAX_STORED_RUN_ID_CHARS)


# ---------------------------------------------------------------------------------- nan and inf


@pytest.mark.parametrize("args, said", [
    (("--tau", "nan"), "error: --tau: must be a finite number from 0 to 1, got nan"),
    (("--tau", "NaN"), "error: --tau: must be a finite number from 0 to 1, got NaN"),
    (("--tau", "inf"), "error: --tau: must be a finite number from 0 to 1, got inf"),
    (("--tau", "-1e400"), "error: --tau: must be a finite number from 0 to 1, got -1e400"),
    (("--tau", "1.5"), "error: --tau: must be a finite number from 0 to 1, got 1.5"),
    (("--tau", "half"), "error: --tau: must be a finite number from 0 to 1, got 'half'"),
    (("--temperature", "nan"), "error: --temperature: must be a finite number from 0 to 2, got nan"),
])
def test_nan_and_inf_float_options_are_refused_saying_so(tmp_path, scripted, args, said):
    """Before: ``--tau nan`` got typer's ``Input should be greater than or equal to 0``, which does
    not say that NaN is the problem; then typer's usage box (round 16: Agora's one line)."""
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", _data(tmp_path), "--db", db, *args, "--models", "a,b")
    assert code == 2, output
    assert output.strip() == said, output
    assert not db.exists()


@pytest.mark.parametrize("option", ["--lambda", "--max-calls", "--tau-hi", "--m-min"])
def test_nan_in_an_unbounded_float_option_is_refused_before_anything_runs(tmp_path, option):
    code, output = agora("bench", "--tasks", _data(tmp_path), "--db", tmp_path / "t.db", option, "nan")
    assert code == 2, output
    assert output.strip() == f"error: {option}: must be a finite number, got nan", output


def test_float_options_still_take_numbers_and_their_defaults():
    from agora.cli._apps import finite_float

    parse = finite_float(0.0, 1.0)
    assert (parse("0.25"), parse(" 1 "), parse("0"), parse(0.5), parse(None)) == (0.25, 1.0, 0.0, 0.5, None)
    assert finite_float()("-3e5") == -300000.0


# ---------------------------------------------------------------------------------- corrupt databases


def _recorded(tmp_path) -> "os.PathLike":
    """A copy of a trace database holding run ``r`` of 12 questions (the scripted pool), its write-ahead
    log checkpointed into it (the copy has none beside it)."""
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", _data(tmp_path, 12), "--db", db, "--run-id", "r",
                         "--models", "a,b", "--concurrency", "1")
    assert code == 0, output
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    return copy


def _cut_short(db):
    data = db.read_bytes()
    db.write_bytes(data[:len(data) // 2])


def _page_garbled(db):
    """Every page after the schema's overwritten with bytes that are no B-tree page."""
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(2 * page, len(data), page):
        data[start:start + page] = bytes([0x0d, 0xff, 0xff]) + os.urandom(page - 3)
    db.write_bytes(bytes(data))


def _random_bytes(db):
    db.write_bytes(os.urandom(5000))


def _header_only(db):
    db.write_bytes(db.read_bytes()[:100])


COMMANDS = {
    "report runs": ("report", "runs"),
    "report run": ("report", "run", "--run-id", "r"),
    "report question": ("report", "question", "--run-id", "r", "--question-id", "q1"),
    "export": ("export", "--run-id", "r", "--out", "{tmp}/o.jsonl.gz"),
    "replay": ("replay", "--run-id", "r", "--rule", "plurality"),
    "traces backfill": ("traces", "backfill"),
    "run align": ("run", "align", "--data", "{tmp}/q.jsonl", "--run-id", "r", "--models", "a,b", "--concurrency", "1"),
}


@pytest.mark.parametrize("damage", [_cut_short, _page_garbled, _random_bytes, _header_only])
def test_a_corrupt_trace_db_is_named_in_one_line_by_every_command(tmp_path, scripted, damage):
    """Before: a database cut short or with garbled pages opened, and the first query that reached a
    missing page failed as ``error: trace database: not an SQLite database, or a corrupt one
    (database disk image is malformed)``, naming no file."""
    db = _recorded(tmp_path)
    damage(db)
    before = db.read_bytes()
    for name, command in COMMANDS.items():
        args = [a.format(tmp=tmp_path) for a in command]
        code, output = agora(*args, "--db", db)
        assert code == 2, (name, output)
        line = one_error_line(output)
        assert line.startswith(f"error: {db}: not a readable Agora trace database ("), (name, line)
        assert db.read_bytes() == before, name



@pytest.mark.parametrize("command", [("export", "--run-id", "r", "--out", "{tmp}/o.jsonl.gz"),
                                     ("replay", "--run-id", "r", "--rule", "plurality"), ("replay", "--run-id", "r")])
def test_export_and_replay_name_a_database_of_another_tool_as_such(tmp_path, command):
    """Before: ``error: other.db: no run 'r' (`agora report runs` lists them)``, though the file holds
    no Agora traces at all (which `agora report runs` then said)."""
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table x (a)")
    code, output = agora(*(a.format(tmp=tmp_path) for a in command), "--db", db)
    assert code == 2, output
    assert one_error_line(output) == f"error: {db}: holds no Agora traces (no runs table; its tables: x)"


@pytest.mark.parametrize("name", ["nl\nx.jsonl", "bidi\u202ex.jsonl", "bell\x07.jsonl"])
def test_a_bench_task_file_whose_name_cannot_be_part_of_a_run_id_is_refused_before_any_run(tmp_path, monkeypatch,
                                                                                          name):
    """Before: the task name (the file's stem) went into the cells' run ids unchecked: the first
    task's cells ran, then recording the second's failed on its run id."""
    import agora.cli.bench as bench_cli

    pool, _ = pool_of(a=["The answer is 2."], b=["The answer is 2."], agg=["The answer is 2."])
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: pool)
    row = json.dumps({"id": "x", "question": "What is 1 + 1?", "answer": "#### 2"}) + "\n"
    (tmp_path / "ok.jsonl").write_text(row)
    (tmp_path / name).write_text(row)
    db = tmp_path / "b.db"
    code, output = agora("bench", "--tasks", f"{tmp_path / 'ok.jsonl'},{tmp_path / name}", "--db", db,
                         "--protocols", "align", "--run-id", "b")
    assert code == 2, output
    stem = name[:-len(".jsonl")]
    assert one_error_line(output).startswith(f"error: --tasks: task name {stem!r} (from {str(tmp_path / name)!r}) "
                                             "holds a character a run id may not"), output
    assert not db.exists() or not sqlite3.connect(db).execute(
        "select count(*) from sqlite_master where name = 'runs'").fetchone()[0] or not sqlite3.connect(db).execute(
        "select count(*) from runs").fetchone()[0]
