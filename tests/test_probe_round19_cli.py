"""Probes of the CLI, round 19: look-alike run ids (a Cyrillic letter, full-width forms, a trailing
dot) that started a second run beside the one the user meant to resume, a read-only ``--db`` file
whose refusal claimed "finished questions are saved" although nothing ran, a run stopped by SIGINT
and resumed, a task file mixing math and multiple-choice questions, and checks that already held
(``--data`` a folder, a blank task file, a task or pool file with a byte-order mark and CRLF line
ends, a pool file that is a folder, a 10,000-character run id). The pool is LangChain's scripted
``FakeListChatModel`` (:func:`cli_runs.fake_pool`); no model is loaded."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runs import agora, fake_pool, one_error_line
from test_probe_round18_cli import _read_only, _writable


def _data(folder: Path, rows: list[dict] | None = None, name: str = "q.jsonl") -> Path:
    path = folder / name
    rows = rows or [{"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("select run_id from runs order by rowid")]


# ---------------------------------------------------------------------------------- checks that held


def test_data_that_is_a_folder_or_blank_is_one_line(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    blank = tmp_path / "blank.jsonl"
    blank.write_text("  \n\t\n   \n")
    for data, said in ((folder, f"error: {folder}: is a directory, not a JSONL file"),
                       (blank, f"error: {blank}: file has no records")):
        code, output = agora("run", "align", "--data", data, "--pool", fake_pool(tmp_path), "--db", tmp_path / "t.db")
        assert code == 2 and one_error_line(output) == said, output
    assert not (tmp_path / "t.db").exists()


def test_task_and_pool_files_with_a_byte_order_mark_and_crlf_load(tmp_path):
    rows = [{"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"},
            {"id": "q2", "question": "What is 1 + 3?", "answer": "#### 4"}]
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\r\n" for r in rows).encode())
    pool = tmp_path / "bom.toml"
    pool.write_bytes(b"\xef\xbb\xbf" + fake_pool(tmp_path).read_text().replace("\n", "\r\n").encode())
    code, output = agora("run", "align", "--data", data, "--pool", pool, "--db", tmp_path / "t.db", "--run-id", "r")
    assert code == 0, output
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("select question_id from questions order by question_id").fetchall() == [("q1",), ("q2",)]


@pytest.mark.parametrize("name", ["pools", "pool.toml"])
def test_a_pool_file_that_is_a_folder_is_one_line(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", folder, "--db", tmp_path / "t.db")
    assert code == 2 and one_error_line(output) == (f"error: {folder}: a folder, not a pool file; give the path of "
                                                    "a TOML pool file"), output


def test_a_ten_thousand_character_run_id_is_one_line(tmp_path):
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path),
                         "--db", tmp_path / "t.db", "--run-id", "x" * 10_000)
    assert code == 2 and one_error_line(output) == (f"error: --run-id {'x' * 40!r}… (10000 characters): a run id has "
                                                    "at most 200 characters; give a shorter one"), output
    assert not (tmp_path / "t.db").exists()


# ---------------------------------------------------------------------------------- look-alike run ids


@pytest.mark.parametrize("typed, said", [
    ("r\u0430n", "error: run id 'r\u0430n': looks like the existing run 'ran' ('\u0430' (CYRILLIC SMALL LETTER A) "
                 "at position 1 where it has 'a'); to resume that run give its id exactly ('ran'), or choose an id "
                 "that does not look like it (nothing was run or recorded)"),
    ("ran.", "error: run id 'ran.': looks like the existing run 'ran' (yours ends in '.'); to resume that run give "
             "its id exactly ('ran'), or choose an id that does not look like it (nothing was run or recorded)"),
    ("\uff52an", "error: run id '\uff52an': '\uff52' (FULLWIDTH LATIN SMALL LETTER R) at position 0 is a compatibility "
                 "form of 'r'; a new run's id must be in Unicode NFKC form: use 'ran' (nothing was run or recorded)"),
])
def test_a_look_alike_of_an_existing_run_id_is_refused_naming_it(tmp_path, typed, said):
    """Before: each look-alike started a second run (``agora report runs`` listed ``ran``, ``rаn``,
    ``ｒａｎ`` and ``ran.``), redoing every question the user meant to resume."""
    args = ("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", tmp_path / "t.db")
    assert agora(*args, "--run-id", "ran")[0] == 0
    code, output = agora(*args, "--run-id", typed)
    assert code == 2 and one_error_line(output) == said, output
    assert _run_ids(tmp_path / "t.db") == ["ran"]
    code, output = agora(*args, "--run-id", "ran")  # the run meant resumes
    assert code == 0 and "resumed: 1 of 1 questions already done" in output, output


def test_a_full_width_run_id_is_refused_even_without_a_look_alike(tmp_path):
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path),
                         "--db", tmp_path / "t.db", "--run-id", "ｒ１")
    assert code == 2 and one_error_line(output) == (
        "error: run id 'ｒ１': 'ｒ' (FULLWIDTH LATIN SMALL LETTER R) at position 0 is a compatibility form of 'r'; "
        "a new run's id must be in Unicode NFKC form: use 'r1' (nothing was run or recorded)"), output
    assert _run_ids(tmp_path / "t.db") == []


def test_ids_of_other_scripts_that_look_like_no_existing_run_start(tmp_path):
    """Letters of any script stay fine: a Cyrillic id beside Latin ones that look otherwise."""
    args = ("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", tmp_path / "t.db")
    for run_id in ("ran", "ablation-é-日本", "прогон", "ran2", "Ran"):
        code, output = agora(*args, "--run-id", run_id)
        assert code == 0, output
    assert _run_ids(tmp_path / "t.db") == ["ran", "ablation-é-日本", "прогон", "ran2", "Ran"]


def test_resume_refusal_names_the_look_alike_before_a_bench_records_anything(tmp_path):
    from agora.traces.resume import resume_refusal
    from agora.traces.store import TraceStore

    store = TraceStore(tmp_path / "t.db")
    store.start_run("b1:gsm8k:align", "align", config={}, pool=[], dataset={})
    assert resume_refusal(store, "b1:gsm8k:align", "align", {}, []) is None
    assert resume_refusal(store, "b1:gsm8k:align.", "align", {}, []) == (
        "run id 'b1:gsm8k:align.': looks like the existing run 'b1:gsm8k:align' (yours ends in '.'); to resume that "
        "run give its id exactly ('b1:gsm8k:align'), or choose an id that does not look like it (nothing was run or "
        "recorded)")
    store.close()


# ---------------------------------------------------------------------------------- a read-only --db file


@pytest.mark.parametrize("run_id", ["new", "r"])
def test_a_read_only_db_file_is_one_accurate_line(tmp_path, run_id):
    """Before: ``error: t.db: not writable (attempt to write a readonly database); finished questions
    are saved``: nothing ran, nothing was saved (``r``: a run the file holds, ``new``: one it does not)."""
    data, pool, db = _data(tmp_path), fake_pool(tmp_path), tmp_path / "t.db"
    assert agora("run", "align", "--data", data, "--pool", pool, "--db", db, "--run-id", "r")[0] == 0
    before = db.read_bytes()
    _read_only(db)
    try:
        code, output = agora("run", "align", "--data", data, "--pool", pool, "--db", db, "--run-id", run_id)
    finally:
        _writable(db)
    assert code == 2 and one_error_line(output) == (f"error: {db}: not writable (attempt to write a readonly "
                                                    "database)"), output
    assert db.read_bytes() == before


# ---------------------------------------------------------------------------------- Ctrl-C, then a rerun


def _counts(db: Path) -> dict[str, object]:
    """Rows of run ``s`` in ``db``: questions, results (all, and distinct question × method), and
    model calls per question."""
    with sqlite3.connect(db) as conn:
        one = lambda sql: conn.execute(sql).fetchone()  # noqa: E731
        return {"questions": one("select count(*), count(distinct question_id) from questions where run_id = 's'"),
                "results": one("select count(*), count(distinct question_id || '/' || method) from results "
                               "where run_id = 's'"),
                "calls": dict(conn.execute("select question_id, count(*) from model_calls where run_id = 's' "
                                           "group by question_id").fetchall())}


def test_a_run_stopped_by_sigint_resumes_without_redoing_or_doubling(tmp_path, monkeypatch):
    """``agora run align`` as a user runs it, Ctrl-C (SIGINT) once its first question is recorded:
    exit 130 and the resume hint; the rerun with the same run id does only the rest, and the run's
    rows and ``agora report run`` agree (each question once, each method on every question). Held."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + 2?", "answer": f"#### {i + 2}"} for i in range(6)]
    data, db = _data(tmp_path, rows), tmp_path / "t.db"
    pool = tmp_path / "slow.toml"  # each sample takes 0.4 s: the run is still going when the signal comes
    pool.write_text(fake_pool(tmp_path).read_text().replace("kwargs = {", "kwargs = {sleep = 0.4, "))
    args = ["run", "align", "--data", str(data), "--pool", str(pool), "--db", str(db), "--run-id", "s"]
    proc = subprocess.Popen([sys.executable, "-m", "agora.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 900  # (the interpreter's start is slow on a loaded machine)
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                    if conn.execute("select count(*) from questions").fetchone()[0]:
                        break
            except sqlite3.Error:  # not created yet
                continue
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted: finished questions are saved; rerun with the same --run-id to resume" in err
    assert "Traceback" not in err, err
    stopped = _counts(db)
    done = stopped["questions"][0]
    assert 1 <= done < 6 and stopped["questions"] == (done, done) and stopped["results"] == (4 * done, 4 * done)
    assert set(stopped["calls"].values()) == {6}  # 2 agents × 3 samples, the three baselines reuse them
    code, output = agora(*args)
    assert code == 0 and f"resumed: {done} of 6 questions already done" in output, output
    after = _counts(db)
    assert after["questions"] == (6, 6) and after["results"] == (24, 24)
    assert after["calls"] == {**{f"q{i}": 6 for i in range(6)}, **stopped["calls"]}  # the finished ones not redone
    code, output = agora("report", "run", "s", "--db", db, "--json")
    assert code == 0, output
    report = json.loads(output)
    assert {m["method"]: (m["questions"], m["failed"]) for m in report["methods"]} == {
        m: (6, 0) for m in ("align", "single_agent", "self_consistency", "best_of_n")}
    assert report["status"] == "finished"


# ---------------------------------------------------------------------------------- math and mc in one file


def test_a_file_mixing_math_and_multiple_choice_scores_alike_in_run_report_and_replay(tmp_path):
    """Guessed from its first line (gsm8k), the mc line is refused naming file:line; as ``--format
    prompts`` each line keeps its own kind, and the run's table, ``agora report run`` and ``agora
    replay`` count and score the same (the fake answers ``4``: right for the sum, no option letter
    for the choice). Held."""
    rows = [{"id": "m1", "question": "What is 2 + 2?", "answer": "#### 4"},
            {"id": "c1", "question": "Which is 2 + 2?", "options": {"A": "3", "B": "4"}, "answer_idx": "B"},
            {"id": "p1", "problem": "What is $2 + 2$?", "answer": "4"}]
    data, pool, db = _data(tmp_path, rows), fake_pool(tmp_path), tmp_path / "t.db"
    code, output = agora("run", "align", "--data", data, "--pool", pool, "--db", db)
    assert code == 2 and one_error_line(output) == f"error: {data}:2: field 'answer': missing", output
    assert not db.exists()
    code, output = agora("run", "align", "--data", data, "--format", "prompts", "--pool", pool, "--db", db,
                         "--run-id", "mix")
    assert code == 0 and "3 prompts problems" in output, output
    line = next(r for r in output.splitlines() if "self_consistency" in r)
    assert [cell.strip() for cell in line.split("│")[2:6]] == ["3", "0", "0", "66.7"], line  # questions .. accuracy
    with sqlite3.connect(db) as conn:
        assert dict(conn.execute("select question_id, kind from questions")) == {"m1": "math", "c1": "mc",
                                                                                  "p1": "math"}
    code, output = agora("report", "run", "mix", "--db", db, "--json")
    assert code == 0, output
    methods = {m["method"]: (m["questions"], round(m["accuracy"], 4)) for m in json.loads(output)["methods"]}
    assert methods == {m: (3, 0.6667) for m in ("align", "single_agent", "self_consistency", "best_of_n")}
    code, output = agora("replay", "--db", db, "--run-id", "mix", "--rule", "plurality", "--json")
    assert code == 0, output
    replayed = json.loads(output)
    assert {r["question_id"]: r["correct"] for r in replayed["rows"]} == {"m1": True, "c1": False, "p1": True}
    assert replayed["identical"] == [3, 3]


# ---------------------------------------------------------------------------------- a look-alike asked for


@pytest.mark.parametrize("command", ["report", "replay"])
def test_asking_for_a_look_alike_of_a_run_names_the_run_it_looks_like(tmp_path, command):
    """Before: ``no run 'rаn' (`agora report runs --db t.db` lists them)``, and the list shows
    ``ran``, which prints as the id typed."""
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", _data(tmp_path), "--pool", fake_pool(tmp_path), "--db", db,
                         "--run-id", "ran")
    assert code == 0, output
    args = ("report", "run", "r\u0430n", "--db", db) if command == "report" else (
        "replay", "--db", db, "--run-id", "r\u0430n", "--rule", "plurality")
    code, output = agora(*args)
    assert code == 2 and one_error_line(output) == (
        f"error: {db}: no run 'r\u0430n' (`agora report runs --db {db}` lists them); the run 'ran' looks like it "
        "('\u0430' (CYRILLIC SMALL LETTER A) at position 1 where it has 'a')"), output
