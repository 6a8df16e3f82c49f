"""Probes of the trace data path and the training data commands, round 19, as a new user and an
attacker meet them: what an import summary says of identical rows, the calls of a database that
recorded calls but never a question, ``agora evolve``'s held-out refusals naming the file; then new
kinds: gzip streams cut, joined, padded, appended to or damaged, a bundle with a byte order mark or
CRLF line ends, a Postgres URL nobody answers, source runs named twice or still running, training
data whose every answer is right or wrong, held-out files in other spellings. Every figure by
hand, on scripted trace DBs; no model is loaded."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
import sqlite_utils

sys.path.insert(0, str(Path(__file__).parent))
from cli_runs import agora, one_error_line  # noqa: E402
from test_probe_round16_data import ROWS, RUN, _record, counts, crafted  # noqa: E402
from test_probe_round14_training import make_db, only_lines  # noqa: E402
from test_verified_data import call, question  # noqa: E402

from agora.traces.bundle import BundleError  # noqa: E402
from agora.traces.bundle_reading import check_bundle  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> tuple[Path, Path, bytes]:
    """Run R's database (ALIGN, members a and b, q1 and q2: 23 rows), its exported bundle and the
    bundle's text, uncompressed."""
    folder = tmp_path_factory.mktemp("r19")
    db = _record(folder)
    out = folder / "r.agora.jsonl.gz"
    code, output = agora("export", "--db", db, "--run-id", RUN, "--out", out)
    assert code == 0, output
    return db, out, gzip.decompress(out.read_bytes())


def refusal(path: Path) -> str:
    with pytest.raises(BundleError) as info:
        check_bundle(path)
    return str(info.value)


# ------------------------------------------------------------------ known 1: what an import skipped


def test_a_reimport_says_how_many_rows_were_new_identical_and_conflicting(bundle, tmp_path):
    """'already present: 1' was read as 'one row conflicts': the summary says rows added (new), rows
    skipped as identical to rows already in --db, and, under --force, rows replaced (conflicting)."""
    db, out, _ = bundle
    target = tmp_path / "t.db"
    code, output = agora("import", out, "--db", target)
    assert code == 0, output
    assert output.endswith("rows added: runs 1, questions 2, results 8, model_calls 12; rows skipped: none\n"), output
    code, output = agora("import", out, "--db", target, "--force")
    assert code == 0, output
    assert output.endswith(f"rows added: none; rows skipped: 23 identical to rows already in {target}; rows replaced "
                           "(--force): 0\n"), output
    assert "already present" not in output and counts(target) == ROWS


# ------------------------------------------------------------------ known 2: calls of a database without questions


def test_calls_of_a_database_that_never_recorded_a_question_are_counted_as_not_read(tmp_path):
    """Every question of every run failed, so the database has runs and model_calls but no
    questions table: the training data read nothing and counted nothing (skipped_calls all 0), and
    the warning said no more than '0 of its samples read'."""
    from agora.training.own_samples import VerifiedConfig, own_samples

    db = tmp_path / "a.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert({"run_id": "r", "protocol": "x"}, pk="run_id")
    d["model_calls"].insert_all([
        call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", "r", "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("c3", "r", "q2", "The answer is 4.", 8, "4", "marker", model="x", t=3),  # another member's
        call("c4", "r", "q3", "", 0, None, None, t=4, error="RuntimeError: down"),    # a failed call: never counted
    ], pk="call_id")
    samples, skipped = own_samples(db, VerifiedConfig(model="m"))
    assert samples == []
    assert skipped == {"held_out": 0, "no_gold": 2, "not_solver": 0, "recipe": 0, "no_prompt": 0}
    code, output = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o")
    assert code == 0, output  # (--data-only writes the empty dataset; the warning says why it is empty)
    assert "warning: no verified answers to train 'm' on: 0 of its samples read (0 right); calls not read: no_gold 2" \
        in " ".join(output.split()), output
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert stats["skipped_calls"] == {"held_out": 0, "no_gold": 2, "not_solver": 0, "recipe": 0, "no_prompt": 0}


# ------------------------------------------------------------------ known 3: evolve's held-out refusals name the file


def test_evolve_names_the_held_out_file_and_line_of_a_problem_without_gold(tmp_path, monkeypatch):
    """'1 held-out problems have no gold answer to score against (first: 'h2')' named no file: the
    overlap refusal beside it names file and line, and so does this one now."""
    import agora.training.evolve as evolve_module
    from test_probe_round15_training import _evolve

    monkeypatch.setattr(evolve_module, "trainable", lambda specs, names=(): ["a"])
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "prompt": "What is 7+1?"}) + "\n"
                    + json.dumps({"id": "h2", "prompt": "What is 7+2?"}) + "\n")
    out = _evolve(tmp_path, monkeypatch, "--held-out", held)
    assert out.exit_code == 2, out.output
    assert only_lines(out) == [f"error: {held}:1: held-out problem 'h1' has no gold answer to score against (2 "
                               "held-out problems in all have none); hold out problems with gold answers"]
    assert not (tmp_path / "t.db").exists()


# ------------------------------------------------------------------ new kinds: gzip streams


def test_bytes_appended_after_the_gzip_stream_are_named_as_such(bundle, tmp_path):
    """A bundle with bytes appended (a log line, half a download of another file) was refused as
    'Not a gzipped file (b'ga')', though it starts as one."""
    _, out, _ = bundle
    bad = tmp_path / "b.agora.jsonl.gz"
    bad.write_bytes(out.read_bytes() + b"garbage!")
    assert refusal(bad) == (f"{bad}: bytes that are not gzip data after the end of its gzip stream (the file was "
                            "appended to or damaged after export); nothing was imported")
    code, output = agora("import", bad, "--db", tmp_path / "t.db")
    assert code == 2 and not (tmp_path / "t.db").exists(), output
    assert one_error_line(output) == f"error: {refusal(bad)}"


@pytest.mark.parametrize("damage, said", [
    (lambda b: b[: len(b) // 2], "not a readable gzip bundle (Compressed file ended before the end-of-stream marker "
     "was reached)"),
    (lambda b: b[:-8] + bytes(8), "not a readable gzip bundle (CRC check failed 0x0 != {crc})"),
    (lambda b: gzip.decompress(b), "not a readable gzip bundle (Not a gzipped file (b'{{\"'))"),
    (lambda b: b + b, "{line}: a row after the footer; nothing was imported"),
])
def test_a_gzip_stream_cut_damaged_uncompressed_or_doubled_is_refused_in_one_line(bundle, tmp_path, damage, said):
    """Cut mid-stream (an interrupted copy), its CRC damaged, stored uncompressed, or two copies
    joined (``cat b b > c``: two gzip members, read as one stream, so the second header comes after
    the footer)."""
    _, out, text = bundle
    bad = tmp_path / "b.agora.jsonl.gz"
    bad.write_bytes(damage(out.read_bytes()))
    crc = hex(int.from_bytes(out.read_bytes()[-8:-4], "little"))
    lines = text.count(b"\n")  # (the second copy's header: the line after the first copy's footer)
    assert refusal(bad) == f"{bad}" + ("" if said.startswith("{line}") else ": ") + said.format(
        line=f":{lines + 1}", crc=crc)


@pytest.mark.parametrize("make", [
    lambda t: gzip.compress(t[: t.index(b"\n") + 1]) + gzip.compress(t[t.index(b"\n") + 1:]),  # two members
    lambda t: gzip.compress(t) + bytes(64),                                                      # zero padding
    lambda t: gzip.compress(t.replace(b"\n", b"\r\n")),                                          # CRLF line ends
])
def test_a_bundle_in_two_gzip_members_padded_or_with_crlf_lines_is_the_same_bundle(bundle, tmp_path, make):
    """What gzip and a Windows editor may make of a bundle, its rows unchanged: read whole, the
    checksums of rows and header still good, and imported row for row."""
    _, _, text = bundle
    same = tmp_path / "b.agora.jsonl.gz"
    same.write_bytes(make(text))
    assert check_bundle(same) == json.loads(text.split(b"\n")[0])
    code, output = agora("import", same, "--db", tmp_path / "t.db")
    assert code == 0, output
    assert counts(tmp_path / "t.db") == ROWS


def test_a_bundle_saved_with_a_byte_order_mark_names_line_1(bundle, tmp_path):
    _, _, text = bundle
    bom = tmp_path / "b.agora.jsonl.gz"
    bom.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text))
    assert refusal(bom) == f"{bom}:1: not JSON (Unexpected UTF-8 BOM (decode using utf-8-sig))"


# ------------------------------------------------------------------ new kinds: a Postgres URL nobody answers


@pytest.mark.parametrize("command", ["import", "export"])
def test_a_postgres_url_nobody_answers_is_one_line_without_its_password(bundle, tmp_path, command):
    _, out, _ = bundle
    url = "postgresql://u:s3cret@127.0.0.1:1/agora"
    args = ("import", out, "--db", url) if command == "import" else (
        "export", "--db", url, "--run-id", RUN, "--out", tmp_path / "x.agora.jsonl.gz")
    code, output = agora(*args)
    assert code == 2, output
    line = one_error_line(output)
    assert line.startswith("error: postgresql://u:***@127.0.0.1:1/agora: cannot connect to the Postgres trace store")
    assert "s3cret" not in output and not (tmp_path / "x.agora.jsonl.gz").exists()


# ------------------------------------------------------------------ new kinds: training data read from odd sources


RIGHT = [call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
         call("c2", "r", "q1", "So 5. The answer is 5.", 10, "5", "marker", t=2)]
WRONG = [call("c1", "r", "q1", "The answer is 6.", 10, "6", "marker", t=1),
         call("c2", "r", "q1", "So 7. The answer is 7.", 10, "7", "marker", t=2)]


def data_only(tmp_path, command, db, *flags) -> tuple[int, str, dict]:
    """``agora train sft|dpo --data-only`` (dpo: ``--pairs own --validation 0``): exit code, output, stats.json."""
    out = tmp_path / "o"
    extra = ("--pairs", "own", "--validation", 0) if command == "dpo" else ()
    code, output = agora("train", command, "--data-only", "--db", db, "--model", "m", "--out", out, *extra, *flags)
    stats = out / "dataset" / "stats.json"
    return code, output, json.loads(stats.read_text()) if stats.exists() else {}


def test_a_source_run_still_running_is_read_with_a_warning(tmp_path):
    """A run another process still records (status running) was read without a word: the dataset
    holds its samples so far, and the same command a minute later gives another dataset."""
    db = make_db(tmp_path / "a.db", RIGHT, runs=({"run_id": "r", "protocol": "x", "status": "running"},
                                                  {"run_id": "s", "protocol": "x", "status": "finished"}))
    code, output, stats = data_only(tmp_path, "sft", db)
    assert code == 0, output
    assert (stats["samples"], stats["sft_rows"], stats["source_runs"]) == (2, 2, ["r"])
    assert [line for line in output.splitlines() if line.startswith("warning")] == [
        f"warning: source run 'r' of {db} is still running (or stopped without finishing): the samples recorded so far "
        "are read, and the same command run later may read more"]
    # a finished run, named alone: no warning
    code, output, _ = data_only(tmp_path, "sft", make_db(tmp_path / "b.db", RIGHT, runs=(
        {"run_id": "r", "protocol": "x", "status": "finished"},)))
    assert code == 0 and "warning" not in output, output


def test_a_held_out_ids_file_with_no_id_is_refused_as_an_empty_problem_file_is(tmp_path):
    """An empty .txt of held-out ids held nothing out without a word (the samples of every question
    were trained on), while an empty held-out JSONL is refused as 'file has no records'."""
    db = make_db(tmp_path / "a.db", RIGHT)
    for text in ("", "\ufeff\n  \n\t\n"):
        ids = tmp_path / "held.txt"
        ids.write_text(text, encoding="utf-8")
        code, output, _ = data_only(tmp_path, "sft", db, "--held-out", ids)
        assert code == 2, output
        assert one_error_line(output) == (f"error: {ids}: no question ids (the file is empty or every line blank): "
                                          "nothing would be held out")
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["What\tis 2+3?\u00a0", " What  is\r\n2+3? "])
def test_a_held_out_question_differing_in_whitespace_is_held_out(tmp_path, text):
    """Tabs, no-break spaces and line ends collapse as spaces do: the question is not trained on."""
    from agora.training.own_samples import HeldOut, VerifiedConfig, own_samples

    db = make_db(tmp_path / "a.db", RIGHT)
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "question": text, "answer": "#### 5"}) + "\n", encoding="utf-8")
    samples, skipped = own_samples(db, VerifiedConfig(model="m", held_out=HeldOut.from_file(held)))
    assert samples == [] and skipped["held_out"] == 2


def test_held_out_ids_with_a_byte_order_mark_and_crlf_lines_are_held_out(tmp_path):
    from agora.training.own_samples import HeldOut

    ids = tmp_path / "held.txt"
    ids.write_bytes(b"\xef\xbb\xbfq1\r\nq2\r\n")
    assert HeldOut.from_file(ids).question_ids == frozenset({"q1", "q2"})


@pytest.mark.parametrize("answers, sft, dpo", [
    (RIGHT, (2, 2, 2), "0 right-over-wrong pairs before the length filter"),
    (WRONG, (2, 0, 0), "2 of its samples read (0 right)"),
])
def test_training_data_where_every_answer_is_right_or_every_answer_wrong(tmp_path, answers, sft, dpo):
    """Every answer right: SFT rows but no DPO pair (nothing wrong to reject); every answer wrong:
    neither. Each empty dataset is written with a one-line warning saying why (the run is not refused:
    --data-only writes what there is)."""
    db = make_db(tmp_path / "a.db", answers)
    code, output, stats = data_only(tmp_path, "sft", db)
    assert code == 0, output
    assert (stats["samples"], stats["correct"], stats["sft_rows"]) == sft
    code, output, stats = data_only(tmp_path, "dpo", db)
    assert code == 0, output
    assert stats["pairs"] == 0 and stats["rows"] == 0
    warning = " ".join(output.split())
    assert "warning: no preference pairs to train 'm' on" in warning and dpo in warning, output


def test_a_source_run_given_twice_is_read_once(tmp_path):
    db = make_db(tmp_path / "a.db", RIGHT)
    code, output, stats = data_only(tmp_path, "sft", db, "--source-run", "r", "--source-run", "r")
    assert code == 0, output
    assert (stats["samples"], stats["sft_rows"], stats["source_runs"]) == (2, 2, ["r"])


def test_aggregate_on_a_database_without_questions_counts_its_calls(tmp_path):
    """``--aggregate`` reads every model's calls: the calls-only database's two are under no_gold."""
    db = tmp_path / "a.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert({"run_id": "r", "protocol": "x"}, pk="run_id")
    d["model_calls"].insert_all(RIGHT, pk="call_id")
    code, output = agora("train", "sft", "--aggregate", 2, "--data-only", "--db", db, "--model", "m", "--out",
                         tmp_path / "o", "--shots", 0)
    assert code == 0, output
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["sets"], stats["rows"]) == (0, 0)
    assert stats["skipped_calls"] == {"held_out": 0, "no_gold": 2, "not_solver": 0, "recipe": 0, "no_prompt": 0}


@pytest.mark.parametrize("flags, said", [
    (("--aggregate", 1), "error: --aggregate: AggregatorDataConfig.k must be >= 2 (one candidate is nothing to "
                         "aggregate), got 1"),
    (("--source-run", "nope"), "error: --source-run 'nope': no such run in {db} (its runs: r)"),
    (("--held-out", "{t}/nope.jsonl"), "error: {t}/nope.jsonl: no such held-out question file"),
    (("--held-out", "{t}"), "error: {t}: is a folder; give a held-out problem file (JSONL) or a .txt file of "
                            "question ids"),
])
def test_sft_data_only_refusals_name_the_option_or_file(tmp_path, flags, said):
    db = make_db(tmp_path / "a.db", RIGHT)
    flags = [str(f).format(t=tmp_path) for f in flags]
    code, output, _ = data_only(tmp_path, "sft", db, *flags)
    assert code == 2, output
    assert one_error_line(output) == said.format(db=db, t=tmp_path)


def test_a_missing_training_database_is_refused_and_not_created(tmp_path):
    code, output, _ = data_only(tmp_path, "sft", tmp_path / "missing.db")
    assert code == 2 and not (tmp_path / "missing.db").exists(), output
    assert one_error_line(output) == (f"error: {tmp_path / 'missing.db'}: no such trace database (run `agora run`, "
                                      "`agora bench` or `agora comed` first)")


# ------------------------------------------------------------------ new kinds: report and replay of odd runs


def _copy(db: Path, to: Path, *sql: str) -> Path:
    import sqlite3

    with sqlite3.connect(db) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    with sqlite3.connect(to) as c:
        for statement in sql:
            c.execute(statement)
    return to


def test_replaying_a_run_whose_every_question_failed_says_why_not_that_it_has_no_call(bundle, tmp_path):
    """Run R's 12 successful calls, its questions (and results) gone as when every question fails:
    'holds no successful model call' was said of a run that holds 12."""
    db, _, _ = bundle
    calls_only = _copy(db, tmp_path / "c.db", "delete from results", "delete from questions")
    code, output = agora("replay", "--db", calls_only, "--run-id", RUN, "--rule", "plurality")
    assert code == 0, output
    assert " ".join(output.split()) == (
        "nothing to replay: run R (align, 0 questions) recorded no question: its 12 successful model calls are of "
        "questions that failed (no questions row, so no gold to score a replay against)")


def test_a_run_still_running_is_reported_and_replayed_as_it_stands(bundle, tmp_path):
    """A run another process still records: `report runs` says running; replay reads its questions so far."""
    db, _, _ = bundle
    running = _copy(db, tmp_path / "r.db", "update runs set status = 'running', finished_at = null")
    code, output = agora("report", "runs", "--db", running, "--json")
    assert code == 0, output
    [row] = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert (row["run_id"], row["status"], row["questions"]) == (RUN, "running", 2)
    code, output = agora("replay", "--db", running, "--run-id", RUN, "--rule", "plurality", "--json")
    assert code == 0, output
    assert len(json.loads(output)["rows"]) == 2


def test_a_bundle_given_as_the_trace_database_is_named_as_not_one(bundle):
    _, out, _ = bundle
    for args in (("report", "run", RUN, "--db", out), ("replay", "--db", out, "--run-id", RUN, "--rule", "plurality")):
        code, output = agora(*args)
        assert code == 2, output
        assert one_error_line(output) == (f"error: {out}: not a readable Agora trace database (not an SQLite database, "
                                          "or a corrupt one: file is not a database)")
