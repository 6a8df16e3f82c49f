"""Probes of the CLI, round 21: SIGHUP (a closed terminal, a dropped ssh session) that killed a run
mid-question and left its row ``running``; trace databases whose schema a user altered (a core table
renamed: a resume redid every question and doubled its model calls; ``runs.status`` dropped: a run
added it back empty for the other runs, then ``agora report runs`` crashed; ``results.correct`` renamed: ``agora
report run`` crashed); a read-only ``--out`` that failed a bench with a traceback after every run
had finished; file names too long for the file system; a stdout that cannot print a run id's
letters; ``-`` as ``--db`` or export's ``--out`` (a file named ``-`` was written); ``COLUMNS=0``
(every table printed as nothing). Checks that held are at the end. The pool is LangChain's scripted
``FakeListChatModel`` (:func:`cli_runs.fake_pool`); no model is loaded."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runs import agora, fake_pool, one_error_line
from test_probe_round18_cli import _read_only, _writable


def _data(folder: Path, n: int = 3) -> Path:
    path = folder / "q.jsonl"
    rows = [{"id": f"q{i}", "question": f"What is {i} + 2?", "answer": f"#### {i + 2}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _recorded(folder: Path, run_id: str = "s") -> tuple[Path, list[str]]:
    """``folder/t.db`` holding run ``run_id`` of ``agora run align`` on 3 questions (finished); the
    arguments that ran it."""
    db = folder / "t.db"
    args = ["run", "align", "--data", str(_data(folder)), "--pool", str(fake_pool(folder)), "--db", str(db),
            "--run-id", run_id]
    code, output = agora(*args)
    assert code == 0, output
    return db, args


def _sql(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for s in statements:
            conn.execute(s)
    with sqlite3.connect(db) as conn:
        conn.execute("pragma wal_checkpoint(TRUNCATE)")


def _one(db: Path, sql: str) -> object:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchone()[0]


# ---------------------------------------------------------------------------------- SIGHUP


def test_sighup_drains_the_run_marks_it_interrupted_and_the_rerun_resumes(tmp_path):
    """Before: SIGHUP (the terminal closed) killed ``agora run`` at once, its row left ``running``
    with no word said. Now it stops as SIGTERM does: the running step finishes and is saved, the
    run is marked interrupted, exit 129; the rerun does only the rest, no question twice."""
    rows = 6
    data, db = _data(tmp_path, rows), tmp_path / "t.db"
    pool = tmp_path / "slow.toml"
    pool.write_text(fake_pool(tmp_path).read_text().replace("kwargs = {", "kwargs = {sleep = 0.4, "))
    args = ["run", "align", "--data", str(data), "--pool", str(pool), "--db", str(db), "--run-id", "s"]
    # started as from a terminal: SIGHUP at its default even when the tests run under nohup (which
    # the run would inherit, and then rightly ignore the hang-up)
    proc = subprocess.Popen([sys.executable, "-m", "agora.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 900
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                    if conn.execute("select count(*) from questions").fetchone()[0]:
                        break
            except sqlite3.Error:
                continue
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 129, err
    assert "Traceback" not in err, err
    assert "hung up (SIGHUP): finished questions are saved and the run is marked interrupted; resume with: agora " \
           in " ".join(err.split()), err
    assert _one(db, "select status from runs where run_id = 's'") == "interrupted"
    done = _one(db, "select count(*) from questions")
    assert 1 <= done < rows
    code, output = agora(*args)
    assert code == 0 and f"resumed: {done} of {rows} questions already done" in output, output
    assert _one(db, "select count(*) || '/' || count(distinct question_id) from questions") == f"{rows}/{rows}"
    with sqlite3.connect(db) as conn:  # 2 agents x 3 samples, each question once
        assert {n for (n,) in conn.execute("select count(*) from model_calls group by question_id")} == {6}


def test_a_run_started_under_nohup_keeps_ignoring_sighup():
    """``nohup agora run ...`` (SIGHUP ignored) must go on when the terminal closes."""
    from agora.cli._shared import graceful_stop

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with graceful_stop() as control:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            assert not control.drain_requested
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


# ---------------------------------------------------------------------------------- an altered schema


def test_a_renamed_core_table_is_refused_before_a_resume_redoes_its_questions(tmp_path):
    """Before: ``questions`` renamed to ``questions_old``; rerunning run s created an empty
    ``questions`` table, ran its 3 questions again and doubled its model calls (18 → 36)."""
    db, args = _recorded(tmp_path)
    _sql(db, "alter table questions rename to questions_old")
    before = db.read_bytes()
    code, output = agora(*args)
    assert code == 2, output
    assert one_error_line(output) == (
        f"error: {db}: it has no questions table beside runs, results and model_calls (renamed or dropped?): a "
        "run would redo the questions its runs recorded; restore the table or give --db a new file (nothing was "
        "written to it)")
    assert db.read_bytes() == before and _one(db, "select count(*) from model_calls") == 18


def test_a_run_that_adds_back_a_dropped_status_column_leaves_a_report_that_reads(tmp_path):
    """``runs.status`` dropped: ``agora run`` adds the column back (as for an older database), NULL
    for the runs already there. Before: ``agora report runs`` then crashed (``TypeError:
    unsupported operand type(s) for +: 'NoneType' and 'str'``); now such a run's status is
    ``unknown``."""
    db, args = _recorded(tmp_path)
    _sql(db, "alter table runs drop column status")
    code, output = agora(*args[:-1], "other")
    assert code == 0, output
    code, output = agora("report", "runs", "--db", db)
    assert code == 0, output
    assert "│ s      │ align    │ unknown  │         3 │" in output, output
    assert "│ other  │ align    │ finished │         3 │" in output, output


def test_report_run_of_a_results_table_with_a_renamed_column_is_one_line(tmp_path):
    """Before: ``KeyError: 'correct'`` and a traceback (``results.correct`` renamed ``is_correct``)."""
    db, _ = _recorded(tmp_path)
    _sql(db, "alter table results rename column correct to is_correct")
    for args in (("report", "run", "s"), ("report", "run", "s", "--json")):
        code, output = agora(*args, "--db", db)
        assert code == 2, output
        assert one_error_line(output) == (f"error: {db}: its results table lacks correct (renamed or dropped?): "
                                          "not a trace database Agora can read")


# ---------------------------------------------------------------------------------- --out and file names


def test_a_bench_with_a_read_only_out_folder_is_refused_before_it_runs(tmp_path):
    """Before: every run of the bench ran, then writing bench.md failed with a traceback
    (``PermissionError: [Errno 1] Operation not permitted: 'ro/bench.md'``)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    _read_only(folder)
    db = tmp_path / "b.db"
    try:
        for out in (folder, folder / "rep"):
            code, output = agora("bench", "--tasks", _data(tmp_path), "--protocols", "align", "--pool",
                                 fake_pool(tmp_path), "--db", db, "--run-id", "B", "--out", out)
            assert code == 2, output
            assert one_error_line(output) == (f"error: --out {out}: cannot write in the folder {folder} (not writable); "
                                              "give --out a folder you can write")
        assert not db.exists()
    finally:
        _writable(folder)


def test_a_report_that_cannot_be_written_after_the_runs_says_they_are_saved(tmp_path, monkeypatch):
    """A folder made read-only (or a disk filled) while the bench ran: one line that says the runs
    are saved and how to write the report elsewhere, not a traceback."""
    import agora.cli.bench as bench_cli

    db, out = tmp_path / "b.db", tmp_path / "rep"
    code, output = agora("bench", "--tasks", _data(tmp_path), "--protocols", "align", "--pool", fake_pool(tmp_path),
                         "--db", db, "--run-id", "B", "--out", out)
    assert code == 0, output

    def refused(store, spec, out, **kwargs):
        raise PermissionError(13, "Permission denied", str(out / "bench.md"))

    monkeypatch.setattr(bench_cli, "write_report", refused)
    code, output = agora("bench", "--report-only", "--run-id", "B", "--db", db, "--out", out)
    assert code == 2, output
    assert one_error_line(output) == (f"error: --out {out}: cannot write {out}/bench.md (Permission denied); the runs "
                                      "are saved: write the report with --report-only --run-id B --out <another "
                                      "folder>")


@pytest.mark.parametrize("command", ["run", "report", "train", "bench"])
def test_a_file_name_too_long_for_the_file_system_is_one_line(tmp_path, command):
    """Before: ``OSError: [Errno 36] File name too long`` and a traceback, for ``--db``, ``--out``
    and the bench's default report folder (``bench-<id>``, a 200-letter id in 400 bytes). (``agora
    export --out`` said it in one line already.)"""
    long = "n" * 300
    data, pool = _data(tmp_path), fake_pool(tmp_path)
    db = tmp_path / "t.db"
    args, name = {
        "run": (("run", "align", "--data", data, "--pool", pool, "--db", tmp_path / f"{long}.db"), f"{long}.db"),
        "report": (("report", "runs", "--db", tmp_path / f"{long}.db"), f"{long}.db"),
        "train": (("train", "sft", "--data-only", "--db", db, "--model", "a", "--out", tmp_path / long), long),
        "bench": (("bench", "--tasks", data, "--protocols", "align", "--pool", pool, "--db", db, "--run-id",
                   "é" * 200), "bench-" + "é" * 200),
    }[command]
    if command == "train":
        _recorded(tmp_path)
    code, output = _in(tmp_path, *args) if command == "bench" else agora(*args)
    assert code == 2, output
    line = one_error_line(output)
    assert line.startswith("error: ") and line.endswith(
        f"{name}: the file name is too long ({len(name.encode())} bytes; a file system takes at most 255 per "
        "name): give a shorter one"), line


def _in(folder: Path, *args: object) -> tuple[int, str]:
    """``agora ARGS`` run in ``folder`` (where the bench writes its default report folder)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        return agora(*args)
    finally:
        os.chdir(here)


# ---------------------------------------------------------------------------------- a stdout that is not UTF-8


def test_a_run_id_a_stdout_cannot_print_is_shown_escaped_and_the_run_runs(tmp_path):
    """Before: with an ASCII stdout (``PYTHONIOENCODING=ascii``, a Latin-1 terminal for other
    letters) ``--run-id é-run`` failed with ``UnicodeEncodeError`` and a traceback before its first
    question, and the run was marked failed. Now the letters are shown escaped and the run runs."""
    data, pool, db = _data(tmp_path), fake_pool(tmp_path), tmp_path / "t.db"
    done = subprocess.run([sys.executable, "-m", "agora.cli", "run", "align", "--data", str(data), "--pool", str(pool),
                           "--db", str(db), "--run-id", "é-run"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**os.environ, "PYTHONIOENCODING": "ascii"}, encoding="ascii",
                          errors="replace")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "run \\xe9-run: 3 gsm8k problems" in done.stdout, done.stdout
    assert _one(db, "select status from runs") == "finished"
    assert _one(db, "select run_id from runs") == "é-run"


# ---------------------------------------------------------------------------------- "-" for stdin or stdout


def test_export_to_dash_is_refused_instead_of_writing_a_file_named_dash(tmp_path):
    """Before: ``--out -`` (stdout, by the usual convention) wrote the bundle to a file named ``-``
    in the current folder, and said ``wrote -``."""
    db, _ = _recorded(tmp_path)
    code, output = _in(tmp_path, "export", "--db", db, "--run-id", "s", "--out", "-")
    assert code == 2, output
    assert one_error_line(output) == ("error: --out -: a bundle is written to a file, not to standard output; give "
                                      "a file name (for a file named '-', give its full path)")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", ["run", "report"])
def test_a_dash_db_is_refused_instead_of_a_database_file_named_dash(tmp_path, command):
    """Before: ``--db -`` created (or read) an SQLite file named ``-`` and its ``-.checkpoints``."""
    args = (("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path)) if command == "run"
            else ("report", "runs"))
    code, output = _in(tmp_path, *args, "--db", "-")
    assert code == 2, output
    assert one_error_line(output) == ("error: -: a trace database is a file, not standard input or output; give a "
                                      "file name (for a file named '-', write ./-)")
    assert not (tmp_path / "-").exists() and not (tmp_path / "-.checkpoints").exists()


# ---------------------------------------------------------------------------------- COLUMNS=0


def test_columns_zero_prints_the_report_at_the_default_width_not_nothing(tmp_path):
    """Before: ``COLUMNS=0`` (set by some shells and CI runners) gave rich a width of 0: ``agora
    report runs`` printed nothing at all and exited 0. A width that is not a positive number is
    now ignored (120 columns off a terminal)."""
    db, _ = _recorded(tmp_path)
    done = subprocess.run([sys.executable, "-m", "agora.cli", "report", "runs", "--db", str(db)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env={**os.environ, "COLUMNS": "0"})
    assert done.returncode == 0, done.stderr
    assert "│ s      │ align    │ finished │         3 │" in done.stdout, done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 120


# ---------------------------------------------------------------------------------- checks that held


@pytest.mark.parametrize("param, said", [
    ("tau==0.9", "error: --param tau==0.9: not a float"),
    ("tau=0.9=1", "error: --param tau=0.9=1: not a float"),
    ("proposal_rule=first=x", "error: --param proposal_rule=first=x: choose from plurality, first"),
])
def test_a_replay_param_value_holding_an_equals_sign_is_one_line(tmp_path, param, said):
    db, _ = _recorded(tmp_path)
    code, output = agora("replay", "--db", db, "--run-id", "s", "--rule", "align", "--param", param)
    assert code == 2 and one_error_line(output) == said, output


def test_pool_members_named_like_methods_stay_apart_from_the_methods_in_a_bench(tmp_path):
    """Members named ``single_agent`` and ``all``: the bench's one-sample rows are ``model NAME``,
    apart from the method rows of the same name."""
    pool = tmp_path / "pool.toml"
    pool.write_text(fake_pool(tmp_path).read_text().replace('name = "a"', 'name = "single_agent"')
                    .replace('name = "b"', 'name = "all"'))
    out = tmp_path / "rep"
    code, output = agora("bench", "--tasks", _data(tmp_path), "--protocols", "align", "--pool", pool, "--db",
                         tmp_path / "b.db", "--run-id", "B", "--out", out)
    assert code == 0, output
    report = json.loads((out / "bench.json").read_text())
    assert report["methods"] == ["align", "single_agent", "self_consistency", "best_of_n"]
    assert "| model `single_agent` (one sample) |" in (out / "bench.md").read_text()


@pytest.mark.parametrize("command", [["bench", "--tasks", "q.jsonl"], ["train", "sft", "--db", "t.db", "--model", "m"],
                                     ["evolve", "--instructions", "q.jsonl"]])
def test_a_dash_as_an_output_folder_is_refused_not_made_a_folder_named_dash(tmp_path, monkeypatch, command):
    """``--out -`` (standard output, by the usual convention) made a folder named ``-``; ``./-`` still
    names one on purpose."""
    monkeypatch.chdir(tmp_path)
    code, output = agora(*command, "--out", "-")
    assert code == 2, output
    assert one_error_line(output) == ("error: --out -: it names an output folder, not standard output; give a folder "
                                      "name (for a folder named '-', give its full path)")
    assert not (tmp_path / "-").exists()
    # what the message advises is taken (./- reaches the command as "-": not advised)
    from agora.cli._shared import check_out_path

    check_out_path(tmp_path / "-")
