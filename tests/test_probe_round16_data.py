"""Probes of the trace data path, round 16, as a new user and an attacker meet it: bundles crafted
with a valid checksum (a header naming a run twice or as a string, a table without a primary key, a
byte that is not UTF-8 far from line 1), a run exported while another process
still writes it, reports and replays of runs whose questions are unscored, and the training data
read from calls whose question was never recorded. Every figure by hand; the models are scripted,
never a real one."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import agora.cli.align as align_cli
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from cli_runs import agora, one_error_line

RUN = "R"
ROWS = {"runs": 1, "questions": 2, "results": 8, "model_calls": 12}
"""An ALIGN run of two members, three samples each, on two questions: 4 methods a question."""


def _record(folder: Path, answer: str = "The answer is 2.") -> Path:
    """Run R: members a and b always answer ``answer``, on q1 (1 + 1, gold 2) and q2 (2 + 2, gold 4)."""
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=[answer], cycle=True) for m in ("a", "b")})
    data = folder / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"})
                            + "\n" for i in (1, 2)))
    db = folder / "t.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(align_cli, "get_pool", lambda path: pool)
        code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", RUN, "--models", "a,b",
                             "--concurrency", "1")
    assert code == 0, output
    return db


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The run's database and its exported bundle's lines (header, rows, footer), parsed."""
    folder = tmp_path_factory.mktemp("r16")
    db = _record(folder)
    out = folder / "r.agora.jsonl.gz"
    code, output = agora("export", "--db", db, "--run-id", RUN, "--out", out)
    assert code == 0, output
    with gzip.open(out, "rt", encoding="utf-8") as f:
        return db, [json.loads(line) for line in f.read().splitlines()]


def crafted(path: Path, head: dict, rows: list[dict]) -> Path:
    """A bundle of ``head`` and ``rows`` with the footer an exporter would write (counts and both
    checksums recomputed): what an attacker or a hand-edit produces, which no checksum catches."""
    head_line = json.dumps(head, ensure_ascii=False) + "\n"
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["t"]] = counts.get(r["t"], 0) + 1
    footer = {"end": True, "rows": counts, "sha256": hashlib.sha256(body.encode()).hexdigest(),
              "header_sha256": hashlib.sha256(head_line.encode()).hexdigest()}
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(head_line + body + json.dumps(footer) + "\n")
    return path


def counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        tables = [t for (t,) in c.execute("select name from sqlite_master where type = 'table' order by rowid")]
        return {t: c.execute(f"select count(*) from [{t}]").fetchone()[0] for t in tables}


def refused(bundle: Path, target: Path) -> str:
    code, output = agora("import", bundle, "--db", target)
    assert code == 2, output
    assert not target.exists()
    return one_error_line(output)


# ------------------------------------------------------------------ bundles crafted with a valid checksum


def test_the_recorded_bundle_itself_imports_whole(recorded, tmp_path):
    _, lines = recorded
    bundle = crafted(tmp_path / "b.agora.jsonl.gz", lines[0], lines[1:-1])
    code, output = agora("import", bundle, "--db", tmp_path / "t.db")
    assert code == 0, output
    assert counts(tmp_path / "t.db") == ROWS
    assert output.endswith("rows added: runs 1, questions 2, results 8, model_calls 12; rows skipped: none\n")


@pytest.mark.parametrize("runs, said", [
    ("R", "runs: \"R\" is not a list of run ids"),
    ({"R": 1}, "runs: {\"R\": 1} is not a list of run ids"),
    (["R", "R"], "runs: run 'R' is named twice"),
])
def test_a_header_whose_runs_are_not_a_list_of_distinct_ids_is_refused(recorded, tmp_path, runs, said):
    """A string was read character by character (``"RS"``: 'the header names run S' of a bundle
    whose header says "RS"), an object by its keys, and a run named twice was counted twice
    ('imported ...: 2 runs' of one run)."""
    _, lines = recorded
    head = copy.deepcopy(lines[0])
    head["runs"] = runs
    bundle = crafted(tmp_path / "b.agora.jsonl.gz", head, lines[1:-1])
    assert refused(bundle, tmp_path / "t.db") == f"error: {bundle}:1: {said}; nothing was imported"


def test_a_header_whose_benches_are_a_string_is_refused(recorded, tmp_path):
    """Before: "the header names bench 'x'" of a header whose benches were "xx"."""
    _, lines = recorded
    head = copy.deepcopy(lines[0])
    head["benches"] = "xx"
    bundle = crafted(tmp_path / "b.agora.jsonl.gz", head, lines[1:-1])
    assert refused(bundle, tmp_path / "t.db") == (
        f"error: {bundle}:1: benches: \"xx\" is not a list of bench ids; nothing was imported")


def test_a_table_without_a_primary_key_is_refused(recorded, tmp_path):
    """Its rows were inserted again by every import: a second import of the same bundle was refused
    as 'a new row for run R' (and --force stored the row twice). Every table an export writes has one."""
    _, lines = recorded
    head = copy.deepcopy(lines[0])
    head["tables"]["notes"] = {"columns": {"run_id": "TEXT", "note": "TEXT"}, "primary_key": []}
    bundle = crafted(tmp_path / "b.agora.jsonl.gz", head, lines[1:-1] + [{"t": "notes", "v": [RUN, "hello"]}])
    assert refused(bundle, tmp_path / "t.db") == (
        f"error: {bundle}:1: tables.notes.primary_key: none; a bundle's tables each have one (else a second import "
        "would add their rows again); nothing was imported")


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3 "])
def test_a_byte_that_is_not_utf8_is_named_at_its_own_line(recorded, tmp_path, bad):
    """A bad byte in the question row (line 3) was reported on line 1, 'at byte 3183 of a chunk'."""
    db, _ = recorded
    out = tmp_path / "r.agora.jsonl.gz"
    assert agora("export", "--db", db, "--run-id", RUN, "--out", out)[0] == 0
    raw = gzip.decompress(out.read_bytes())
    line_3 = raw.split(b"\n")[2]
    at = line_3.index(b"What is 1 + 1?") + len(b"What is 1 ")
    out.write_bytes(gzip.compress(raw.replace(b"What is 1 + 1?", b"What is 1 " + bad + b" 1?")))
    assert refused(out, tmp_path / "t.db") == (
        f"error: {out}:3: not UTF-8 text (byte {at + 1} of the line); nothing was imported")


def test_a_byte_that_is_not_utf8_in_the_header_is_named_at_line_1(recorded, tmp_path):
    """'{"f\xe9rmat"': the fourth byte of line 1."""
    db, _ = recorded
    out = tmp_path / "r.agora.jsonl.gz"
    assert agora("export", "--db", db, "--run-id", RUN, "--out", out)[0] == 0
    raw = gzip.decompress(out.read_bytes())
    out.write_bytes(gzip.compress(raw.replace(b'"format"', b'"f\xe9rmat"', 1)))
    assert refused(out, tmp_path / "t.db") == f"error: {out}:1: not UTF-8 text (byte 4 of the line); nothing was imported"


def test_a_character_cut_by_the_read_chunk_is_no_error(recorded, tmp_path, monkeypatch):
    """Two-byte characters across every chunk boundary: read as the text they are."""
    import agora.traces.bundle_reading as reading

    db, lines = recorded
    head, rows = lines[0], copy.deepcopy(lines[1:-1])
    rows[1]["v"][5] = "é" * 5000  # questions.question of q1
    bundle = crafted(tmp_path / "b.agora.jsonl.gz", head, rows)
    monkeypatch.setattr(reading, "_UTF8_CHUNK", 7)
    assert reading.check_bundle(bundle) == head


# ------------------------------------------------------------------ export while another process writes


def test_a_run_exported_while_it_is_written_is_one_consistent_snapshot(tmp_path, monkeypatch):
    """Each table was read in a statement of its own: a question finished by the running process
    between the reads of questions and results left its results (and calls) in the bundle without
    their question, and the bundle could never be imported ('an orphan')."""
    import agora.cli.export as export_cli

    _record(tmp_path)
    opened = export_cli.open_trace_store

    def store_written_to_meanwhile(path):
        store = opened(path)
        read = store.db.execute
        done = []

        def execute(sql, params=None):
            if "from [results]" in sql and not done:  # the other process records q3 now
                done.append(1)
                with sqlite3.connect(path) as other:
                    cols = [c[1] for c in other.execute("pragma table_info(questions)")]
                    q2 = dict(zip(cols, other.execute("select * from questions where question_id = 'q2'").fetchone()))
                    other.execute(f"insert into questions values ({', '.join('?' * len(cols))})",
                                  list({**q2, "question_id": "q3", "idx": 2}.values()))
                    for r in other.execute("select * from results where question_id = 'q2'").fetchall():
                        other.execute(f"insert into results values ({', '.join('?' * len(r))})", (r[0], "q3", *r[2:]))
            return read(sql, params) if params is not None else read(sql)

        store.db.execute = execute
        return store

    monkeypatch.setattr(export_cli, "open_trace_store", store_written_to_meanwhile)
    out = tmp_path / "r.agora.jsonl.gz"
    code, output = agora("export", "--db", tmp_path / "t.db", "--run-id", RUN, "--out", out)
    assert code == 0, output
    assert "rows: runs 1, questions 2, results 8, model_calls 12;" in output
    code, output = agora("import", out, "--db", tmp_path / "copy.db")
    assert code == 0, output
    assert counts(tmp_path / "copy.db") == ROWS
    assert counts(tmp_path / "t.db") == {"runs": 1, "questions": 3, "results": 12, "model_calls": 12}
    # the next export holds what was written meanwhile
    monkeypatch.setattr(export_cli, "open_trace_store", opened)
    code, output = agora("export", "--db", tmp_path / "t.db", "--run-id", RUN, "--out", tmp_path / "later.agora.jsonl.gz")
    assert "rows: runs 1, questions 3, results 12, model_calls 12;" in output


# ------------------------------------------------------------------ reports and replays of unscored runs


@pytest.fixture(scope="module")
def unscored(tmp_path_factory) -> Path:
    """Run P on a prompts file (no gold answers): both questions answered '2', neither scored."""
    folder = tmp_path_factory.mktemp("r16p")
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 2."], cycle=True)
                                       for m in ("a", "b")})
    data = folder / "p.jsonl"
    data.write_text('{"id": "q1", "prompt": "Say 2"}\n{"id": "q2", "prompt": "Say 3"}\n')
    db = folder / "p.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(align_cli, "get_pool", lambda path: pool)
        code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "P", "--models", "a,b",
                             "--concurrency", "1")
    assert code == 0, output
    return db


def test_the_report_of_a_run_without_gold_says_its_answers_are_unscored(unscored):
    """Each method read '0 questions ... too few questions' of a run that answered 2 questions: the
    reason is that none has a gold answer, not that there are too few."""
    code, output = agora("report", "run", "--db", unscored, "--run-id", "P", "--json")
    assert code == 0, output
    methods = {m["method"]: (m["questions"], m["unscored"], m["failed"]) for m in json.loads(output)["methods"]}
    assert methods == {m: (0, 2, 0) for m in ("align", "best_of_n", "self_consistency", "single_agent")}
    from agora.cli.runs import _method_note
    from agora.traces.report import MethodRow

    row = MethodRow("align", 0, 0.0, 0.0, 0.0, 6.0, 48, 0.0, unscored=2)
    assert _method_note(row) == "2 unscored (no gold answer)"
    assert _method_note(MethodRow("align", 3, 1.0, 1.0, 1.0, 6.0, 48, 0.0, unscored=1)) == (
        "too few questions; 1 unscored (no gold answer)")
    assert _method_note(MethodRow("align", 3, 1.0, 1.0, 1.0, 6.0, 48, 0.0)) == "too few questions"


def test_the_replay_of_a_run_without_gold_says_why_there_is_no_paired_table(unscored):
    """It printed the paired table's title and header over no row."""
    code, output = agora("replay", "--db", unscored, "--run-id", "P", "--rule", "plurality")
    assert code == 0, output
    text = " ".join(output.split())
    assert "answers identical to the recorded self_consistency: 2/2 questions" in text
    assert ("no paired table: no question of run P is scored both by the replay and by a recorded method (a question "
            "without a gold answer, or of a kind no scorer checks, is unscored)") in text
    assert "vs each recorded method" not in text


# ------------------------------------------------------------------ training data


def test_a_failed_questions_samples_are_counted_as_not_read(tmp_path):
    """Samples of a question recorded without its questions row (it failed) were dropped without a
    word: stats.json's skipped_calls counted nothing, and 'calls not read' did not name them."""
    from test_probe_round14_training import make_db
    from test_verified_data import call

    db = make_db(tmp_path / "a.db", [
        call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", "r", "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("c3", "r", "q9", "The answer is 7.", 8, "7", "marker", t=3),  # q9 failed: no questions row
    ])
    code, output = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o")
    assert code == 0, output
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["samples"], stats["correct"], stats["sft_rows"]) == (2, 1, 1)
    assert stats["skipped_calls"] == {"held_out": 0, "no_gold": 1, "not_solver": 0, "recipe": 0, "no_prompt": 0}


def _copy(db: Path, to: Path, *edits: str) -> Path:
    with sqlite3.connect(db) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
        for sql in edits:
            dst.execute(sql)
    return to


def test_a_replay_after_a_gold_was_edited_warns_that_the_recorded_scores_are_stale(recorded, tmp_path):
    """q1's gold edited from 2 to 3 after the run: plurality, which gives the recorded
    self_consistency answers exactly, read as losing q1 to every recorded method (scored against
    the old gold), without a word."""
    db = _copy(recorded[0], tmp_path / "g.db", "update questions set gold = '3' where question_id = 'q1'")
    code, output = agora("replay", "--db", db, "--run-id", RUN, "--rule", "plurality")
    assert code == 0, output
    text = " ".join(output.split())
    assert ("warning: 4 recorded results of run R are not scored as their answer scores against the stored gold now "
            "(first: question q1; was its gold edited after the run?): the table compares the replay, scored against "
            "the gold as it is, with the recorded scores") in text
    code, output = agora("replay", "--db", recorded[0], "--run-id", RUN, "--rule", "plurality")
    assert code == 0 and "warning" not in output, output


def test_a_replay_of_a_run_without_results_says_so(recorded, tmp_path):
    db = _copy(recorded[0], tmp_path / "n.db", "delete from results")
    code, output = agora("replay", "--db", db, "--run-id", RUN, "--rule", "plurality")
    assert code == 0, output
    assert "no paired table: run R records no method's results to compare with" in " ".join(output.split())
    assert "vs each recorded method" not in output


def test_export_reads_one_snapshot_on_every_backend(trace_db, tmp_path):
    """The store's snapshot (SQLite: one read transaction; Postgres: REPEATABLE READ): a question,
    its results, committed by another connection between the export's reads of questions and of
    results, are in neither (before, on Postgres as on SQLite: its results without it)."""
    from test_store_backends import record_align_run

    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_reading import check_bundle
    from agora.traces.store import TraceStore

    store = TraceStore(trace_db)
    record_align_run(store)
    writer = TraceStore(trace_db)
    read = store.db.execute
    done = []

    def execute(sql, params=None):
        if "from [results]" in sql and not done:
            done.append(1)
            with writer.db.conn:
                writer.db.execute("insert into questions (run_id, question_id, idx, question, gold, kind) select "
                                  "run_id, 'late', 99, question, gold, kind from questions where run_id = ? and "
                                  "question_id = ?", ["r1", "q1"])
                writer.db.execute("insert into results (run_id, question_id, method, answer, correct, samples) "
                                  "select run_id, 'late', method, answer, correct, samples from results where "
                                  "run_id = ? and question_id = ?", ["r1", "q1"])
        return read(sql, params) if params is not None else read(sql)

    store.db.execute = execute
    bundle = tmp_path / "r1.agora.jsonl.gz"
    summary = export_bundle(store, bundle, ["r1"])
    check_bundle(bundle)
    late = [r for r in writer.db.query("select question_id from results where question_id = 'late'")]
    assert done and len(late) > 0  # written meanwhile, and not exported: the 4 questions and their results alone
    assert (summary.rows["questions"], summary.rows["results"]) == (4, 4 * len(late))
    store.close()
    writer.close()
