"""Probes of the trace data path and the training data commands, round 17: what an import summary
says it skipped (rows already in the database vs rows the bundle repeats), the calls of runs that
recorded calls but no question, and ``agora evolve``'s held-out overlap refusal naming file, line
and question; then new kinds (see each test's docstring). Every figure by hand, on scripted trace
DBs; no model is loaded."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runs import agora, one_error_line  # noqa: E402
from test_probe_round16_data import ROWS, RUN, _record, crafted  # noqa: E402
from test_verified_data import call, question  # noqa: E402
from test_probe_round14_training import make_db, only_lines  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Run R's database (ALIGN, members a and b, q1 and q2) and its exported bundle's lines, parsed."""
    import gzip

    folder = tmp_path_factory.mktemp("r17")
    db = _record(folder)
    out = folder / "r.agora.jsonl.gz"
    code, output = agora("export", "--db", db, "--run-id", RUN, "--out", out)
    assert code == 0, output
    with gzip.open(out, "rt", encoding="utf-8") as f:
        return db, [json.loads(line) for line in f.read().splitlines()]


def counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        tables = [t for (t,) in c.execute("select name from sqlite_master where type = 'table' order by rowid")]
        return {t: c.execute(f"select count(*) from [{t}]").fetchone()[0] for t in tables}


# ------------------------------------------------------------------ 1a: what an import skipped, and why


def test_an_import_summary_tells_rows_already_in_the_db_from_rows_the_bundle_repeats(recorded, tmp_path):
    """A bundle holding one questions row twice, imported into a new database, printed 'already
    present: 1' though the database held nothing: the row was the bundle's own twin."""
    _, lines = recorded
    rows = lines[1:-1]
    i = next(n for n, r in enumerate(rows) if r["t"] == "questions")
    twin = crafted(tmp_path / "twin.agora.jsonl.gz", lines[0], rows[: i + 1] + [dict(rows[i])] + rows[i + 1:])
    target = tmp_path / "t.db"
    code, output = agora("import", twin, "--db", target)
    assert code == 0, output
    assert counts(target) == ROWS
    assert output.endswith("rows added: runs 1, questions 2, results 8, model_calls 12; rows skipped: 1 repeated "
                           "within the bundle\n"), output
    assert "already" not in output
    # again: the 23 rows are in the database now, and the bundle still repeats one of them
    code, output = agora("import", twin, "--db", target)
    assert code == 0, output
    assert output.endswith(f"rows added: none; rows skipped: 23 identical to rows already in {target}, 1 repeated "
                           "within the bundle\n"), output
    assert counts(target) == ROWS


def test_a_forced_import_says_how_many_conflicting_rows_it_replaced(recorded, tmp_path):
    """--force printed 'already present: 22; replaced (--force): 1': the replaced row is a row whose
    key held other content, and that is what the summary says."""
    db, lines = recorded
    target = tmp_path / "t.db"
    with sqlite3.connect(db) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    rows = [dict(r) for r in lines[1:-1]]
    cols = lines[0]["tables"]["questions"]["columns"]
    i = next(n for n, r in enumerate(rows) if r["t"] == "questions")
    rows[i] = {"t": "questions", "v": [("What is 1 + 1 ?" if c == "question" else v)
                                        for c, v in zip(cols, rows[i]["v"])]}
    edited = crafted(tmp_path / "e.agora.jsonl.gz", lines[0], rows)
    code, output = agora("import", edited, "--db", target, "--force")
    assert code == 0, output
    assert output.endswith(f"rows added: none; rows skipped: 22 identical to rows already in {target}; rows "
                           f"replaced (--force): 1 whose key {target} held with other content\n"), output


# ------------------------------------------------------------------ 1b: calls of runs without questions


def test_calls_of_a_run_that_recorded_no_question_are_counted_as_not_read(tmp_path):
    """A run whose every question failed (calls recorded, no questions row) was passed over without
    a word, while a failed question's calls in a run with questions counted under no_gold."""
    db = make_db(tmp_path / "a.db", [
        call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", "r", "q9", "The answer is 7.", 8, "7", "marker", t=2),            # q9 failed: no_gold 1
        call("d1", "D", "q1", "The answer is 5.", 8, "5", "marker", t=3),            # run D: no questions rows
        call("d2", "D", "q2", "The answer is 4.", 8, "4", "marker", t=4),
        call("d3", "D", "q2", "The answer is 4.", 8, "4", "marker", model="x", t=5),  # another member's
        call("d4", "D", "q3", "", 0, None, None, t=6, error="RuntimeError: down"),    # failed call: never counted
    ], runs=("r", "D"))
    code, output = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o")
    assert code == 0, output
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["samples"], stats["correct"], stats["sft_rows"]) == (1, 1, 1)
    assert stats["skipped_calls"] == {"held_out": 0, "no_gold": 3, "not_solver": 0, "recipe": 0, "no_prompt": 0}
    # read alone, run D gives no row, and the refusal names the calls it could not read
    code, output = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--source-run", "D",
                         "--out", tmp_path / "o2")
    assert "calls not read: no_gold 2" in " ".join(output.split()), output


# ------------------------------------------------------------------ 1c: evolve's held-out overlap refusal


def test_evolve_names_the_held_out_file_line_and_question_that_is_also_an_instruction(tmp_path, monkeypatch):
    """'1 held-out problems are also instructions of the duels; hold out others' named neither the
    file nor which problem, on which line."""
    import agora.training.evolve as evolve_module
    from test_probe_round15_training import _evolve

    monkeypatch.setattr(evolve_module, "trainable", lambda specs, names=(): ["a"])
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h0", "question": "What is 9+9?", "answer": "#### 18"}) + "\n"
                    + json.dumps({"id": "h1", "question": "What is  2+3? ", "answer": "#### 5"}) + "\n")
    out = _evolve(tmp_path, monkeypatch, "--held-out", held)
    assert out.exit_code == 2, out.output
    assert only_lines(out) == [
        f"error: {held}:2: held-out problem 'h1' ('What is 2+3?') is also instruction 'i1' of the duels "
        f"({tmp_path / 'i.jsonl'}:1; texts compared with whitespace collapsed); hold out problems the duels do not "
        "play"]
    assert not (tmp_path / "t.db").exists()


# ------------------------------------------------------------------ new kinds: unicode in held-out questions


NFC = "Zoë has 2 apples and 3 more. How many?"
NFD = "Zoe\u0308 has 2 apples and 3 more. How many?"  # the same text, its ë as e + combining diaeresis


def test_a_held_out_question_written_in_another_unicode_form_is_still_held_out(tmp_path):
    """The run recorded the question decomposed (NFD, as some datasets ship it), the held-out file
    holds it composed (NFC): the texts print alike but compared unequal, so the evaluation question
    was trained on."""
    from agora.training.own_samples import HeldOut, VerifiedConfig, own_samples

    db = make_db(tmp_path / "a.db", [call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1)],
                 questions=[question("r", "q1", 0, NFD, "5")])
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "question": NFC, "answer": "#### 5"}) + "\n", encoding="utf-8")
    samples, skipped = own_samples(db, VerifiedConfig(model="m", held_out=HeldOut.from_file(held)))
    assert samples == [] and skipped["held_out"] == 1


def test_held_out_question_ids_are_compared_as_question_ids_are(tmp_path):
    """A .txt held-out id 'ｑ１' (full width) is the id q1 everywhere else in Agora (NFKC: a task
    file or bundle refuses the two as one id), but the held-out set compared ids byte for byte and
    let q1 through."""
    from agora.training.own_samples import HeldOut, VerifiedConfig, own_samples

    db = make_db(tmp_path / "a.db", [call("c1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1)])
    ids = tmp_path / "held.txt"
    ids.write_text("ｑ１\n", encoding="utf-8")
    samples, skipped = own_samples(db, VerifiedConfig(model="m", held_out=HeldOut.from_file(ids)))
    assert samples == [] and skipped["held_out"] == 1


# ------------------------------------------------------------------ new kinds: stats totals


def test_stats_count_a_question_asked_under_two_tasks_once_in_the_totals(tmp_path):
    """One question text, asked by a gsm8k run and by a run of source 'arith' with another system
    prompt (two groups, one per task): each task counts it, and the totals summed the tasks, so
    stats.json said 2 questions (and 2 questions with a pair) for 1."""
    from agora.training.own_samples import VerifiedConfig, own_samples
    from agora.training.verified import verified_stats

    other = [{"role": "system", "content": "Think."}, {"role": "user", "content": "What is 2+3?"}]
    db = make_db(tmp_path / "a.db", [
        call("a1", "r", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("a2", "r", "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("b1", "s", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=3, messages=other),
        call("b2", "s", "q1", "The answer is 6.", 8, "6", "marker", t=4, messages=other),
    ], questions=[question("r", "q1", 0, "What is 2+3?", "5"),
                  question("s", "q1", 0, "What is  2+3?", "5", source="arith")], runs=("r", "s"))
    cfg = VerifiedConfig(model="m", length_ratio=0)
    stats = verified_stats(*own_samples(db, cfg)[:1], cfg)
    assert {t: (s["questions"], s["pairs"], s["pair_questions"]) for t, s in stats["per_task"].items()} == {
        "arith": (1, 1, 1), "gsm8k": (1, 1, 1)}
    assert (stats["questions"], stats["samples"], stats["pairs"], stats["pair_questions"]) == (1, 4, 2, 1)


# ------------------------------------------------------------------ new kinds: export selecting nothing


def test_exporting_a_bench_that_has_no_run_names_the_bench_not_the_options(tmp_path):
    """A bench recorded (its benches row) whose runs are not in the database was refused as
    'nothing to export: give --run-id or --bench-id', though --bench-id was given."""
    from agora.traces.store import TraceStore

    db = tmp_path / "t.db"
    store = TraceStore(db)
    store.start_run("other", "align", config={}, pool=[], dataset={})
    store.db["benches"].insert({"bench_id": "b1", "spec": "{}"}, pk="bench_id", alter=True)
    store.close()
    out = tmp_path / "b.agora.jsonl.gz"
    code, output = agora("export", "--db", db, "--bench-id", "b1", "--out", out)
    assert code == 2, output
    assert one_error_line(output) == (f"error: {db}: bench 'b1' has no run in the database (runs b1:...); nothing "
                                      "to export")
    assert not out.exists()


def test_a_dpo_split_keeps_one_question_in_two_unicode_forms_on_one_side():
    """Two runs recorded one question, one composed (NFC) and one decomposed (NFD): the split by
    instruction counted two instructions and could put one on each side, the validation question
    trained on."""
    from agora.training.datasets import split_by_instruction

    rows = [{"instruction": NFC, "n": 1}, {"instruction": NFD, "n": 2}]
    train, val = split_by_instruction(rows, 0.5, seed=0)
    assert ([r["n"] for r in train], val) == ([1, 2], [])


# ------------------------------------------------------------------ new kinds: two imports into one new database


def test_a_refused_import_never_removes_a_database_another_import_created_meanwhile(recorded, tmp_path, monkeypatch):
    """Two `agora import`s into one new --db path at once: both saw no file, so both took the
    database for their own new one; the one refused (its bundle conflicts with the other's rows)
    removed the file, and with it the rows the other had just imported."""
    import agora.cli.export as export_cli
    from agora.traces.bundle_import import import_bundle
    from agora.traces.store import TraceStore

    _, lines = recorded
    first = crafted(tmp_path / "a.agora.jsonl.gz", lines[0], lines[1:-1])
    rows = [dict(r) for r in lines[1:-1]]
    cols = lines[0]["tables"]["questions"]["columns"]
    i = next(n for n, r in enumerate(rows) if r["t"] == "questions")
    rows[i] = {"t": "questions", "v": [("What is 1 + 1 ?" if c == "question" else v) for c, v in zip(cols, rows[i]["v"])]}
    second = crafted(tmp_path / "b.agora.jsonl.gz", lines[0], rows)
    target = tmp_path / "t.db"
    check = export_cli.check_bundle

    def meanwhile(path):  # the other import, done while this one checks its bundle
        store = TraceStore(target)
        import_bundle(first, store)
        store.close()
        return check(path)

    monkeypatch.setattr(export_cli, "check_bundle", meanwhile)
    code, output = agora("import", second, "--db", target)
    assert code == 2 and "already exists in" in one_error_line(output), output
    assert counts(target) == ROWS
