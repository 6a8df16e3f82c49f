"""Probes of the training commands as a new user and an attacker meet them (round 15): a dataset
folder written over another kind of dataset or cut by an interruption, a run named twice, the same
question with two golds, questions without text, and ``agora evolve``'s refusals, each given before
it says that a run starts. Every figure by hand, on scripted trace DBs; no model is loaded."""

import json
import sys
from pathlib import Path

import pytest
import sqlite_utils
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_verified_data import agora, call, question  # noqa: E402
from test_probe_round14_training import RUN, make_db, only_lines  # noqa: E402
from test_cli_training_options import fake_pool  # noqa: E402

from agora.training.own_samples import VerifiedConfig, own_samples  # noqa: E402


@pytest.fixture
def one_question(tmp_path):
    """m: one right and one wrong answer to q1; x and y answer it too."""
    return make_db(tmp_path / "a.db", [
        call("c1", RUN, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", RUN, "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("c5", RUN, "q1", "The answer is 5.", 5, "5", "marker", model="x", t=5),
        call("c6", RUN, "q1", "The answer is 6.", 5, "6", "marker", model="y", t=6),
    ])


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------ the dataset folder


def test_sft_data_over_a_dpo_dataset_leaves_no_stale_validation_split(tmp_path, one_question):
    """train sft --data-only into the folder of a DPO dataset kept its validation.jsonl (DPO pairs)
    beside the new SFT rows: a later reader took both as one dataset."""
    out = tmp_path / "o"
    done = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", one_question, "--model", "m", "--out", out,
                 "--validation", 0.5)
    assert done.exit_code == 0, done.output
    assert files(out / "dataset") == ["stats.json", "train.jsonl", "validation.jsonl"]
    done = agora("train", "sft", "--data-only", "--db", one_question, "--model", "m", "--out", out)
    assert done.exit_code == 0, done.output
    assert files(out / "dataset") == ["stats.json", "train.jsonl"]
    [row] = [json.loads(line) for line in (out / "dataset" / "train.jsonl").open()]
    assert (row["call_id"], row["completion"]) == ("c1", [{"role": "assistant", "content": "2+3=5. The answer is 5."}])


def test_an_interrupted_data_only_write_leaves_the_previous_dataset_whole(tmp_path, one_question, monkeypatch):
    """An interruption mid-write left a cut train.jsonl (and the previous stats.json, describing other
    rows). Files are now written beside their place and moved in whole; a rerun completes."""
    import agora.training.datasets as datasets

    out = tmp_path / "o"
    assert agora("train", "sft", "--data-only", "--db", one_question, "--model", "m", "--out", out).exit_code == 0
    before = {name: (out / "dataset" / name).read_text() for name in files(out / "dataset")}
    real = datasets.export_jsonl

    def killed(rows, path):
        Path(path).write_text('{"prompt": [')  # cut short, then the process is stopped
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "export_jsonl", killed)
    stopped = agora("train", "sft", "--data-only", "--db", one_question, "--model", "m", "--out", out,
                    "--per-question", 2)
    assert stopped.exit_code == 130
    assert {name: (out / "dataset" / name).read_text() for name in files(out / "dataset")} == before
    monkeypatch.setattr(datasets, "export_jsonl", real)
    rerun = agora("train", "sft", "--data-only", "--db", one_question, "--model", "m", "--out", out, "--per-question", 2)
    assert rerun.exit_code == 0, rerun.output
    assert files(out / "dataset") == ["stats.json", "train.jsonl"]
    assert json.loads((out / "dataset" / "stats.json").read_text())["settings"]["max_sft_per_question"] == 2


# ------------------------------------------------------------------ what is read


def test_a_source_run_named_twice_is_read_once(tmp_path, one_question):
    """--source-run r --source-run r read every sample twice: stats said 4 samples, 2 right."""
    out = tmp_path / "o"
    done = agora("train", "sft", "--data-only", "--db", one_question, "--model", "m", "--out", out,
                 "--source-run", RUN, "--source-run", RUN)
    assert done.exit_code == 0, done.output
    stats = json.loads((out / "dataset" / "stats.json").read_text())
    assert (stats["samples"], stats["correct"], stats["rows"]) == (2, 1, 1)


@pytest.fixture
def two_golds(tmp_path):
    """The same question recorded by two runs with different golds (5 and 6); m answered 5 in r1 and
    6 in r2, x and y answered too."""
    return make_db(tmp_path / "g.db", [
        call("a1", "r1", "q1", "The answer is 5.", 5, "5", "marker", t=1),
        call("a2", "r2", "q1", "The answer is 6.", 5, "6", "marker", t=2),
        call("x1", "r1", "q1", "The answer is 5.", 5, "5", "marker", model="x", t=3),
        call("y1", "r2", "q1", "The answer is 6.", 5, "6", "marker", model="y", t=4),
    ], questions=[question("r1", "q1", 0, "What is 2+3?", "5"), question("r2", "q1", 0, "What is  2+3?", "6")],
        runs=("r1", "r2"))


GOLDS = ("error: question 'What is 2+3?' has gold '5' (math) in run 'r1' (question id 'q1') and '6' (math) in run "
         "'r2' (question id 'q1'); read the runs that agree (--source-run) or hold the question out (--held-out)")


@pytest.mark.parametrize("command", [("sft", "--model", "m"), ("dpo", "--pairs", "own", "--model", "m"),
                                     ("grpo", "--aggregate", "2", "--model", "m")])
def test_one_question_with_two_golds_is_refused(tmp_path, two_golds, command):
    """Both answers were 'right' (each against its own run's gold): SFT taught 5 and 6 for one
    question, and the aggregator's set was scored against the first gold only."""
    out = agora("train", *command, "--data-only", "--db", two_golds, "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [" ".join(only_lines(out))] == [GOLDS]
    assert not (tmp_path / "o").exists()
    one = agora("train", *command, "--data-only", "--db", two_golds, "--out", tmp_path / "r1", "--source-run", "r1")
    assert one.exit_code == 0, one.output


def test_golds_the_checker_counts_equal_are_one_gold(tmp_path):
    db = make_db(tmp_path / "g.db", [call("a1", "r1", "q1", "The answer is 5.", 5, "5", "marker", t=1),
                                     call("a2", "r2", "q1", "The answer is 5.", 5, "5", "marker", t=2)],
                 questions=[question("r1", "q1", 0, "What is 2+3?", "5"), question("r2", "q1", 0, "What is 2+3?", "5.0")],
                 runs=("r1", "r2"))
    samples, _ = own_samples(db, VerifiedConfig(model="m"))
    assert [s.correct for s in samples] == [True, True]


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_a_question_without_text_is_not_read(tmp_path, text):
    """Questions recorded without text all had the text '': grouped as one question (the aggregator
    drew candidates of different questions into one set, under an empty question) and never matched
    by a held-out file's texts."""
    db = make_db(tmp_path / "t.db", [call("a1", RUN, "q1", "The answer is 5.", 5, "5", "marker", t=1),
                                     call("a2", RUN, "q2", "The answer is 2.", 5, "2", "marker", model="x", t=2)],
                 questions=[question(RUN, "q1", 0, text, "5"), question(RUN, "q2", 1, text, "2")])
    samples, skipped = own_samples(db, VerifiedConfig(model="m"))
    assert samples == [] and skipped["no_prompt"] == 1
    out = agora("train", "grpo", "--aggregate", "2", "--model", "m", "--data-only", "--db", db, "--out", tmp_path / "o")
    assert out.exit_code == 0, out.output
    assert (tmp_path / "o" / "dataset" / "train.jsonl").read_text() == ""


# ------------------------------------------------------------------ agora evolve


def _evolve(tmp_path, monkeypatch, *flags, pool=None, fmt="gsm8k"):
    import agora.cli.evolve as evolve_cli

    monkeypatch.setattr(evolve_cli, "require_train_extra", lambda: None, raising=False)  # as with the extra installed
    instructions = tmp_path / "i.jsonl"
    if not instructions.exists():
        instructions.write_text(json.dumps({"id": "i1", "question": "What is 2+3?", "answer": "#### 5"}) + "\n")
    from agora.cli.main import app

    return CliRunner().invoke(app, ["evolve", "--instructions", str(instructions), "--format", fmt,
                                    "--pool", str(pool or fake_pool(tmp_path)), "--db", str(tmp_path / "t.db"),
                                    "--out", str(tmp_path / "o"), "-D", "1", "-T", "1", *map(str, flags)])


@pytest.mark.parametrize("flags, message", [
    (("--algo", "grpo", "--data", "own"),
     "error: --algo grpo --data own: GRPO trains on the duels' instructions, not on stored answers; use --algo grpo "
     "--data duels (the default), --algo dpo --data own or --algo sft --data own"),
    (("--algo", "sft"),
     "error: --algo sft --data duels: SFT trains on each member's own right answers; use --algo sft --data own, or "
     "--algo dpo / --algo grpo with --data duels"),
    (("--held-out-limit", "3"), "error: --held-out-limit: an option of --held-out FILE; here it would be ignored"),
    (("--length-ratio", "2"), "error: --length-ratio: an option of --data own; here it would be ignored"),
    (("--data", "own", "--min-margin", "0.5"),
     "error: --min-margin: an option of --data duels (the judges' score margins); here it would be ignored"),
    (("--reward", "correctness"), "error: --reward: an option of --algo grpo; here it would be ignored"),
    (("--num-generations", "8"), "error: --num-generations: an option of --algo grpo; here it would be ignored"),
])
def test_evolve_option_mismatches_name_what_works(tmp_path, monkeypatch, flags, message):
    """--algo grpo --data own was refused as 'EvolveConfig.data 'own' feeds dpo and sft', naming no
    option; options of another algorithm or data source were silently ignored."""
    out = _evolve(tmp_path, monkeypatch, *flags)
    assert out.exit_code == 2, out.output
    assert [" ".join(only_lines(out))] == [message]
    assert not (tmp_path / "t.db").exists()


def test_evolve_with_no_member_to_train_is_refused_before_any_duel(tmp_path, monkeypatch):
    """A pool without local weights printed the run line, then played every duel and trained nobody."""
    out = _evolve(tmp_path, monkeypatch)
    assert out.exit_code == 2, out.output
    assert only_lines(out) == ["error: no member of the pool (a, b, c) has local weights to train (a llamacpp GGUF "
                               "or a transformers HF folder): the iterations would only play duels"]
    assert not (tmp_path / "t.db").exists()


def test_evolve_refusals_come_before_the_run_line(tmp_path, monkeypatch):
    """--train-models naming a member not in the pool, held-out problems among the instructions, a
    run id started with other settings: each printed 'run ...: 1 iterations × 1 duels' first."""
    import agora.training.evolve as evolve_module
    from agora.traces.store import TraceStore

    out = _evolve(tmp_path, monkeypatch, "--train-models", "zz")
    assert only_lines(out) == ["error: train model 'zz' is not in the pool (a, b, c)"]
    monkeypatch.setattr(evolve_module, "trainable", lambda specs, names=(): ["a"])  # as if 'a' had weights
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "question": "What is 2+3? ", "answer": "#### 5"}) + "\n")
    out = _evolve(tmp_path, monkeypatch, "--held-out", held)
    assert only_lines(out) == [f"error: {held}:1: held-out problem 'h1' ('What is 2+3?') is also instruction 'i1' of "
                               f"the duels ({tmp_path / 'i.jsonl'}:1; texts compared with whitespace collapsed); hold "
                               "out problems the duels do not play"]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "h1", "prompt": "What is 7+1?"}) + "\n")
    out = _evolve(tmp_path, monkeypatch, "--held-out", prompts)
    assert only_lines(out) == [f"error: {prompts}:1: held-out problem 'h1' has no gold answer to score against; "
                               "hold out problems with gold answers"]
    assert not (tmp_path / "t.db").exists()
    store = TraceStore(tmp_path / "t.db")
    store.start_run("ev", "evolve", config={"other": 1}, pool=[], dataset={"instructions": 1})
    store.finish_run("ev", status="failed")
    out = _evolve(tmp_path, monkeypatch, "--run-id", "ev")
    assert out.exit_code == 2 and not any(line.startswith("run ") for line in only_lines(out))
    assert only_lines(out)[0].startswith("error: run id 'ev' in ") and "was started with other settings" in out.output
    assert [(r["run_id"], r["status"]) for r in sqlite_utils.Database(tmp_path / "t.db")["runs"].rows] == [("ev", "failed")]


def test_evolve_own_data_needs_instructions_with_gold(tmp_path, monkeypatch):
    """--data own on instructions without gold answers played the duels and found no right answer."""
    import agora.training.evolve as evolve_module

    monkeypatch.setattr(evolve_module, "trainable", lambda specs, names=(): ["a"])
    (tmp_path / "i.jsonl").write_text(json.dumps({"id": "i1", "prompt": "Write a poem."}) + "\n")
    out = _evolve(tmp_path, monkeypatch, "--data", "own", fmt="prompts")
    assert [" ".join(only_lines(out))] == [
        "error: data 'own': none of the 1 instructions has a gold answer (math or multiple choice) to check the "
        "members' answers against; give a problem file with gold answers, or train on the judges' preferences "
        "(data 'duels')"]
    assert not (tmp_path / "t.db").exists()


# ------------------------------------------------------------------ --held-out files


def _sft_rows(tmp_path, db, held):
    out = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o", "--held-out", held)
    rows = ([json.loads(line) for line in (tmp_path / "o" / "dataset" / "train.jsonl").open()]
            if out.exit_code == 0 else None)
    return out, rows


@pytest.mark.parametrize("name, data", [("bom.txt", "\ufeffq1\n".encode()), ("ids.TXT", b"q1\r\n"),
                                        ("mac.txt", b"q0\rq1\r")])
def test_an_ids_file_with_a_byte_order_mark_or_odd_suffix_or_line_ends_holds_its_ids_out(tmp_path, one_question,
                                                                                          name, data):
    """A UTF-8 byte-order mark made the first id '\\ufeffq1' (matching nothing: the held-out question
    was trained on, silently); ids.TXT was read as a JSONL problem file."""
    held = tmp_path / name
    held.write_bytes(data)
    out, rows = _sft_rows(tmp_path, one_question, held)
    assert out.exit_code == 0, out.output
    assert rows == []


@pytest.mark.parametrize("data, message", [
    ("q1\n".encode("utf-16"), "error: {path}:1: not UTF-8 text: it looks like UTF-16"),
    ("q\xe9\n".encode("latin-1"), "error: {path}:1: not UTF-8 text (byte 2 of the line)"),
    (json.dumps({"id": "z", "question": "What is 2+3?", "answer": "#### 5"}).encode() + b"\n",
     "error: {path}:1: a JSON object, not a question id: a problem file is read by its ids and texts when it is "
     "named .jsonl"),
])
def test_an_unreadable_ids_file_is_refused_naming_it(tmp_path, one_question, data, message):
    """UTF-16 and Latin-1 gave 'utf-8 codec can't decode byte 0xff in position 0' naming no file; a
    problem file named .txt held nothing out (its lines taken as ids)."""
    held = tmp_path / "held.txt"
    held.write_bytes(data)
    out, _ = _sft_rows(tmp_path, one_question, held)
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert " ".join(only_lines(out)).startswith(message.format(path=held))
    assert not (tmp_path / "o").exists()


def test_a_held_out_folder_is_called_a_folder(tmp_path, one_question):
    """It was 'no such held-out question file'."""
    (tmp_path / "held").mkdir()
    out, _ = _sft_rows(tmp_path, one_question, tmp_path / "held")
    assert only_lines(out) == [f"error: {tmp_path / 'held'}: is a folder; give a held-out problem file (JSONL) or a "
                               ".txt file of question ids"]


# ------------------------------------------------------------------ hand-made trace databases


def test_values_of_the_wrong_type_in_a_hand_made_database_are_read_or_left_out(tmp_path):
    """A completion stored as a BLOB, token counts stored as text, a gold stored as a number: a
    TypeError (joining bytes as text; comparing '8' with 1), an internal error with a traceback."""
    db = make_db(tmp_path / "t.db", [  # (a text value makes completion_tokens a TEXT column)
        {**call("a1", RUN, "q1", "x", "7 tokens", "5", "marker", t=1), "completion": b"The answer is 5."},
        call("a2", RUN, "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("a3", RUN, "q1", "The answer is 5.", 5, "5", "marker", t=3),
    ], questions=[question(RUN, "q1", 0, "What is 2+3?", 5)])
    assert [r["completion_tokens"] for r in sqlite_utils.Database(db)["model_calls"].rows] == ["7 tokens", "8", "5"]
    samples, _ = own_samples(db, VerifiedConfig(model="m"))
    assert [(s.call_id, s.tokens, s.gold, s.correct) for s in samples] == [("a2", None, "5", False),
                                                                           ("a3", None, "5", True)]
    out = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o",
                "--validation", 0)
    assert out.exit_code == 0, out.output
    [row] = [json.loads(line) for line in (tmp_path / "o" / "dataset" / "train.jsonl").open()]
    assert (row["chosen"], row["rejected"]) == ([{"role": "assistant", "content": "The answer is 5."}],
                                                [{"role": "assistant", "content": "The answer is 6."}])


# ------------------------------------------------------------------ --aggregate K with too few candidates


@pytest.mark.parametrize("flags, note", [
    (("--aggregate", "5"), "no question has 5 recorded samples to show (the most for one question: 4, over 1 "
                           "questions with gold); lower --aggregate or record more samples"),
    (("--aggregate", "2", "--source-run", "easy"),
     "every candidate set drawn has a right majority (easy) and none a wrong one (hard), and --easy-per-hard 1 "
     "keeps that many easy sets per hard one"),
])
def test_an_empty_aggregator_dataset_says_why(tmp_path, flags, note):
    """Both warned 'no prompts to train 'm' on', naming no cause."""
    db = make_db(tmp_path / "a.db", [
        call("c1", RUN, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),
        call("c2", RUN, "q1", "The answer is 6.", 8, "6", "marker", t=2),
        call("c5", RUN, "q1", "The answer is 5.", 5, "5", "marker", model="x", t=5),
        call("c6", RUN, "q1", "The answer is 6.", 5, "6", "marker", model="y", t=6),
        call("e1", "easy", "q1", "The answer is 5.", 5, "5", "marker", t=7),
        call("e2", "easy", "q1", "So 5. The answer is 5.", 5, "5", "marker", model="x", t=8),
    ], questions=[question(RUN, "q1", 0, "What is 2+3?", "5"), question("easy", "q1", 0, "What is 2+3?", "5")],
        runs=(RUN, "easy"))
    run = ("--source-run", RUN) if "--source-run" not in flags else ()
    out = agora("train", "grpo", *flags, *run, "--model", "m", "--data-only", "--db", db, "--out", tmp_path / "o")
    assert out.exit_code == 0, out.output
    said = " ".join(out.output.split())
    assert f"warning: no prompts to train 'm' on: {note} (training would refuse this dataset)" in said


def test_an_empty_grpo_prompt_set_says_why(tmp_path, one_question):
    """'no prompts to train 'm' on' whether the database held no duel or --held-out took every prompt."""
    pool = fake_pool(tmp_path, names=("m", "x", "y"))
    out = agora("train", "grpo", "--model", "m", "--pool", pool, "--data-only", "--db", one_question,
                "--out", tmp_path / "o")
    assert out.exit_code == 0, out.output
    assert (f"warning: no prompts to train 'm' on: no duel of m recorded in {one_question} (--all-prompts: every "
            "duel's instruction); play duels first (agora duel), or give problems with --data (training would "
            "refuse this dataset)") in " ".join(out.output.split())
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"id": "p1", "question": "What is 2+3?", "answer": "#### 5"}) + "\n")
    out = agora("train", "grpo", "--model", "m", "--pool", pool, "--data-only", "--data", data, "--held-out", data,
                "--out", tmp_path / "o2")
    assert out.exit_code == 0, out.output
    assert (f"warning: no prompts to train 'm' on: all 1 problems read from {data} are held out by --held-out {data} "
            "(training would refuse this dataset)") in " ".join(out.output.split())


def test_evolve_out_naming_a_file_is_refused_before_any_duel(tmp_path, monkeypatch):
    """--out was not checked: the duels were played and recorded, then writing it0/pool.toml failed."""
    (tmp_path / "o").write_text("x")
    out = _evolve(tmp_path, monkeypatch)
    assert only_lines(out) == [f"error: --out {tmp_path / 'o'}: names an existing file; it must be a folder (give a "
                               "new or existing folder)"]
    assert not (tmp_path / "t.db").exists()


def test_an_ids_file_is_refused_where_questions_are_matched_by_text(tmp_path, duel_pairs_db, one_question):
    """Duel pairs and duel instructions carry no question id: a .txt of ids held nothing out, silently."""
    ids = tmp_path / "held.txt"
    ids.write_text("q1\n")
    said = (f"error: --held-out {ids}: a file of question ids, but {{what}} carry no question ids (they are matched "
            "by question text): give the held-out problem file (JSONL) instead")
    out = agora("train", "dpo", "--model", "a", "--data-only", "--db", duel_pairs_db, "--out", tmp_path / "o",
                "--held-out", ids)
    assert [" ".join(only_lines(out))] == [said.format(what="duel pairs")]
    out = agora("train", "grpo", "--model", "m", "--pool", fake_pool(tmp_path, names=("m", "x", "y")), "--data-only",
                "--db", one_question, "--out", tmp_path / "o", "--held-out", ids)
    assert [" ".join(only_lines(out))] == [said.format(what="duel instructions")]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seed", range(6))
def test_a_question_written_two_ways_lands_on_one_side_of_the_split(seed):
    """'What is 2+3?' and 'What is  2+3?' (one question, recorded by two runs under two prompts) were
    two instructions: one could train and the other validate, scoring the adapter on a question it
    was trained on."""
    from agora.training.datasets import split_by_instruction

    rows = [{"instruction": "What is 2+3?", "n": 1}, {"instruction": "What is  2+3?", "n": 2},
            {"instruction": "What is 1+1?", "n": 3}]
    train, val = split_by_instruction(rows, 0.5, seed=seed)
    sides = {frozenset(r["n"] for r in side) for side in (train, val)}
    assert sides in ({frozenset({1, 2}), frozenset({3})},)


def test_evolve_whose_duel_run_id_is_taken_is_refused_before_the_run_line(tmp_path, monkeypatch):
    """An `agora duel --run-id ev-duels` run in the database: evolve 'ev' recorded its run, then its
    duels resumed (or refused) that other run."""
    import agora.training.evolve as evolve_module
    from agora.traces.store import TraceStore

    monkeypatch.setattr(evolve_module, "trainable", lambda specs, names=(): ["a"])
    store = TraceStore(tmp_path / "t.db")
    store.start_run("ev-duels", "stackelberg", config={}, pool=[], dataset={})
    out = _evolve(tmp_path, monkeypatch, "--run-id", "ev")
    assert only_lines(out) == [f"error: run id 'ev' would play its duels as run ev-duels, which {store.path} already "
                               "holds (a stackelberg run of another command); pick a new --run-id"]
    assert [r["run_id"] for r in sqlite_utils.Database(tmp_path / "t.db")["runs"].rows] == ["ev-duels"]
