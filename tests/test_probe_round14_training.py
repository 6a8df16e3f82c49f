"""Probes of the training side as a new user meets it (round 14): a member's own samples with odd
shapes, the same question under two tasks, an interrupted run's resume record, empty datasets
refused before a run is recorded, held-out overlap in ``agora evolve``. Every figure by hand, on
scripted trace DBs; no model is loaded."""

import json
import sys
from pathlib import Path

import pytest
import sqlite_utils

sys.path.insert(0, str(Path(__file__).parent))
from test_verified_data import agora, call, question  # noqa: E402

from agora.training.own_samples import VerifiedConfig, own_samples  # noqa: E402
from agora.training.verified import own_pairs, sft_rows, verified_stats  # noqa: E402

RUN = "r"


def make_db(path, calls, questions=None, runs=(RUN,)):
    d = sqlite_utils.Database(path)
    d["runs"].insert_all([r if isinstance(r, dict) else {"run_id": r, "protocol": "x"} for r in runs], pk="run_id")
    d["questions"].insert_all(questions or [question(RUN, "q1", 0, "What is 2+3?", "5")],
                              pk=("run_id", "question_id"))
    d["model_calls"].insert_all(calls, pk="call_id")
    return path


def run_ids(db):
    return [r["run_id"] for r in sqlite_utils.Database(db)["runs"].rows]


def test_answers_differing_only_in_whitespace_are_one_answer(tmp_path):
    """Three right answers differing in spacing and line breaks were three SFT rows (filling the
    per-question cap with one answer) and three pairs against the same wrong answer."""
    db = make_db(tmp_path / "t.db", [
        call("a", RUN, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("b", RUN, "q1", "2+3=5.  The answer is 5.", 10, "5", "marker", t=2),
        call("c", RUN, "q1", "2+3=5.\nThe answer is 5.", 10, "5", "marker", t=3),
        call("d", RUN, "q1", "The answer is 6.", 8, "6", "marker", t=4),
        call("e", RUN, "q1", "The  answer is 6.", 8, "6", "marker", t=5),
    ])
    cfg = VerifiedConfig(model="m", length_ratio=0)
    samples, skipped = own_samples(db, cfg)
    assert [s.call_id for s in samples] == ["a", "b", "c", "d", "e"]
    assert [r["call_id"] for r in sft_rows(samples, cfg)] == ["a"]
    assert [(p["chosen"], p["rejected"]) for p in own_pairs(samples, cfg)] == [
        ("2+3=5. The answer is 5.", "The answer is 6.")]
    stats = verified_stats(samples, cfg, skipped)
    assert (stats["samples"], stats["correct"], stats["sft_rows"], stats["pairs_before_length_filter"],
            stats["pairs"]) == (5, 3, 1, 1, 1)


def test_a_question_read_under_two_tasks_counts_once_under_the_first(tmp_path):
    """The same question in a bench's run (task gsm8k) and in an ALIGN run without a source (task
    'math') formed one group; the statistics then failed with KeyError 'math' (a traceback from
    --data-only). The group, its pair and its SFT row count under the first sample's task."""
    bench = "b:gsm8k:candidates"
    db = make_db(tmp_path / "t.db", [
        call("a1", bench, "q1", "The answer is 6.", 5, "6", "marker", t=1),
        call("b1", "align-1", "x9", "2+3=5. The answer is 5.", 7, "5", "marker", role="agent", t=2),
    ], questions=[question(bench, "q1", 0, "What is 2+3?", "5"),
                  question("align-1", "x9", 0, "What is 2+3?", "5", source=None)],
        runs=({"run_id": bench, "protocol": "candidates", "dataset": json.dumps({"bench": "b"})}, "align-1"))
    cfg = VerifiedConfig(model="m")
    samples, skipped = own_samples(db, cfg)
    assert [(s.call_id, s.task) for s in samples] == [("a1", "gsm8k"), ("b1", "math")]
    stats = verified_stats(samples, cfg, skipped)
    assert list(stats["per_task"]) == ["gsm8k"]
    assert {k: stats["per_task"]["gsm8k"][k] for k in ("questions", "samples", "correct", "sft_rows", "pairs")} == {
        "questions": 1, "samples": 2, "correct": 1, "sft_rows": 1, "pairs": 1}
    assert [p["task"] for p in own_pairs(samples, cfg)] == ["gsm8k"]
    out = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o",
                "--validation", 0)
    assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (written["pairs"], written["source_runs"]) == (1, ["align-1", bench])


@pytest.mark.parametrize("text", ['{"fingerpr', "[1]", b"\xff\xfe"])
def test_an_unreadable_resume_record_starts_afresh(tmp_path, text):
    """``agora_resume.json`` cut short by an interruption (or not the object Agora writes) stopped the
    rerun with a JSON error naming no file; its checkpoints are now another run's: removed, and the
    run starts afresh under the new fingerprint."""
    from agora.training.resume import resume_point

    trainer = tmp_path / "trainer"
    (trainer / "checkpoint-2").mkdir(parents=True)
    meta = trainer / "agora_resume.json"
    meta.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert resume_point(trainer, "abc", 2) is None
    assert json.loads(meta.read_text()) == {"fingerprint": "abc"}
    assert not (trainer / "checkpoint-2").exists()


@pytest.fixture
def judged_only(tmp_path):
    """A member whose only call is a judge's score: no sample of its own to learn from."""
    db = make_db(tmp_path / "j.db", [call("j1", RUN, "q1", "Score: 8", 3, None, "none", role="judge"),
                                     call("x1", RUN, "q1", "The answer is 5.", 4, "5", "marker", model="x")])
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "config.json").write_text("{}")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "transformers"\npath = "{fake}"\n')
    return db, pool


@pytest.mark.parametrize("command, message", [
    (("sft",), "error: no verified answers to train 'm' on: 0 of its samples read (0 right); calls not read: "
               "not_solver 1"),
    (("dpo", "--pairs", "own"), "error: no preference pairs to train 'm' on (0 own pairs, 0 of them held out for "
                                "validation): 0 of its samples read (0 right), 0 right-over-wrong pairs before the "
                                "length filter and 0 after it; calls not read: not_solver 1"),
])
def test_empty_own_data_is_refused_before_a_run_is_recorded(tmp_path, judged_only, command, message):
    """Training on an empty dataset of the member's own samples recorded a 'failed' run before it was
    refused, and --pairs own was told to 'run more duels or relax --min-margin' (an option it
    refuses). It is refused before any run row, saying what was read."""
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    db, pool = judged_only
    out = agora("train", *command, "--db", db, "--model", "m", "--pool", pool, "--out", tmp_path / "o",
                "--threads", 1)
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.strip()] == [message]
    assert run_ids(db) == [RUN]


def test_data_only_warning_of_empty_own_pairs_says_what_was_read(tmp_path, judged_only):
    db, _pool = judged_only
    out = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o")
    assert out.exit_code == 0, out.output
    text = out.output.replace("\n", "")
    assert "0 right-over-wrong pairs before the length filter and 0 after it; calls not read: not_solver 1" in text
    assert "min-margin" not in text and "run more duels" not in text


def test_evolve_refuses_held_out_problems_that_differ_from_an_instruction_only_in_whitespace(tmp_path):
    """The overlap check stripped the ends only: a held-out problem written with a double space or a
    line break was played in the duels and scored as unseen."""
    from agora.models.pool import ModelSpec
    from agora.tasks import Problem
    from agora.traces.store import TraceStore
    from agora.training.evolve import EvolveConfig, evolve

    specs = [ModelSpec(name=f"t{i}", backend="transformers", path=str(tmp_path / "w")) for i in range(3)]
    problems = [Problem("p1", "Tom has 2 apples and 3 more.\nHow many?", "5")]
    held = [Problem("h1", "Tom has  2 apples and 3 more. How many?", "5")]
    store = TraceStore(tmp_path / "e.db")
    with pytest.raises(ValueError, match="held-out problem 'h1' .* is also instruction 'p1' of the duels"):
        evolve(store, "ev", specs, problems, EvolveConfig(), tmp_path / "o", held_out=held)
    assert store.get_run("ev") is None


@pytest.fixture
def two_questions(tmp_path):
    """m: right and wrong on q1 and q2; x and y answer too (the aggregator's candidates)."""
    return make_db(tmp_path / "a.db", [
        call("c1", RUN, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", RUN, "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("c3", RUN, "q2", "The answer is 2.", 5, "2", "marker", t=3),
        call("c4", RUN, "q2", "The answer is 3.", 5, "3", "marker", t=4),
        call("c5", RUN, "q1", "The answer is 5.", 5, "5", "marker", model="x", t=5),
        call("c6", RUN, "q1", "The answer is 6.", 5, "6", "marker", model="y", t=6),
        call("c7", RUN, "q2", "The answer is 2.", 5, "2", "marker", model="x", t=7),
    ], questions=[question(RUN, "q1", 0, "What is 2+3?", "5"), question(RUN, "q2", 1, "What is 1+1?", "2")])


def only_lines(out):
    return [line for line in out.output.splitlines() if line.strip()]


@pytest.mark.parametrize("command, message", [
    (("dpo", "--pairs", "own", "--model", "m", "--length-ratio", "0.5"),
     "error: --length-ratio: VerifiedConfig.length_ratio must be >= 1 (or 0: no filter), got 0.5"),
    (("grpo", "--aggregate", "1", "--model", "m"),
     "error: --aggregate: AggregatorDataConfig.k must be >= 2 (one candidate is nothing to aggregate), got 1"),
    (("grpo", "--aggregate", "2", "--model", "m", "--source-run", "nosuch"),
     "error: --source-run 'nosuch': no such run in {db} (its runs: r)"),
])
def test_data_settings_refused_in_one_line_naming_the_option(tmp_path, two_questions, command, message):
    """--length-ratio 0.5 and --aggregate 1 were refused without naming the option; an unknown
    --source-run of --aggregate gave an empty dataset with a 'no prompts' warning."""
    out = agora("train", *command, "--data-only", "--db", two_questions, "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert only_lines(out) == [message.format(db=two_questions)]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags", [("--source-run", RUN), ("--sets-per-question", "3"), ("--easy-per-hard", "2")])
def test_aggregate_options_without_aggregate_are_refused(tmp_path, flags):
    """Without --aggregate these were silently ignored."""
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"id": "p1", "question": "What is 2+3?", "answer": "#### 5"}) + "\n")
    out = agora("train", "grpo", "--data", data, *flags, "--data-only", "--model", "qwen2.5-coder-0.5b",
                "--out", tmp_path / "o")
    assert out.exit_code == 2
    assert only_lines(out) == [f"error: {flags[0]}: options of --aggregate K (its candidate sets); without it they "
                               "would be ignored"]


def test_grpo_prompts_leave_the_held_out_questions_out(tmp_path):
    """train grpo --data FILE --held-out FILE trained on the held-out problems (the option was read by
    --aggregate only). They are left out by id or by text, and counted in the dataset's source."""
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{n}", "question": q, "answer": f"#### {a}"}) + "\n"
                            for n, (q, a) in enumerate((("What is 2+3?", 5), ("What is 1+1?", 2), ("What is 3+3?", 6)))))
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "other", "question": "What is  2+3?", "answer": "#### 5"}) + "\n")
    ids = tmp_path / "held.txt"
    ids.write_text("p2\n")
    for held_file, left in ((held, ["What is 1+1?", "What is 3+3?"]), (ids, ["What is 2+3?", "What is 1+1?"])):
        out = agora("train", "grpo", "--data", data, "--held-out", held_file, "--data-only",
                    "--model", "qwen2.5-coder-0.5b", "--out", tmp_path / held_file.suffix)
        assert out.exit_code == 0, out.output
        rows = [json.loads(line) for line in (tmp_path / held_file.suffix / "dataset" / "train.jsonl").open()]
        assert [r["instruction"] for r in rows] == left
        stats = json.loads((tmp_path / held_file.suffix / "dataset" / "stats.json").read_text())
        assert stats["source"]["held_out_prompts"] == 1


@pytest.mark.parametrize("blocker", ["dataset", "dataset/stats.json"])
def test_data_only_into_a_folder_whose_dataset_path_is_taken_is_one_line(tmp_path, two_questions, blocker):
    """OUT/dataset an existing file, or OUT/dataset/stats.json a folder: a FileExistsError or
    IsADirectoryError traceback."""
    out_dir = tmp_path / "o"
    if blocker == "dataset":
        out_dir.mkdir()
        (out_dir / "dataset").write_text("x")
    else:
        (out_dir / blocker).mkdir(parents=True)
    out = agora("train", "sft", "--data-only", "--db", two_questions, "--model", "m", "--out", out_dir)
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = only_lines(out)
    assert line.startswith(f"error: --out {out_dir}: cannot write {out_dir}/dataset")
