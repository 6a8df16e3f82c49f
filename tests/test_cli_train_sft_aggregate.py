"""``agora train sft --aggregate K``: rejection-sampling SFT of an aggregator from the samples
recorded in --db (:func:`agora.training.aggregator.aggregator_sft_rows`), on a scripted trace DB with
every row checked by hand: which candidate is the target, which sets give no row; what is recorded;
the options refused with and without --aggregate; rows longer than --max-length refused before
training (no trainer is run: ``train_sft`` is replaced by a stand-in, the tokenizer is the tiny
test model's)."""

import json

import pytest
import sqlite_utils

from test_verified_data import agora, call, jsonl, question

RUN, RUN2 = "b:gsm8k:candidates", "align-2"


def ask(text):
    return [{"role": "user", "content": text}]


def lines(out):
    return [line for line in out.output.splitlines() if line.strip()]


@pytest.fixture
def sets_db(tmp_path):
    """Three candidates (m, x, y) for each of q1-q3, two for q4:

    * q1 (2+3, gold 5): 5 by m, 6 by x and y: hard (the majority is wrong), m's is the one right one;
    * q2 (1+1, gold 2): 3 by m and x, and y's right 2 only guessed (``fallback``, not explicit): hard,
      no row (no right, finished, explicit candidate to imitate);
    * q3 (3+3, gold 6; run align-2): m's 6 cut at the token limit, x's 6 finished, y's 7: easy; the target
      is x's (m's is right but unfinished);
    * q4: two samples, fewer than K = 3: no set."""
    path = tmp_path / "t.db"
    d = sqlite_utils.Database(path)
    d["runs"].insert_all([{"run_id": RUN, "protocol": "candidates"}, {"run_id": RUN2, "protocol": "align"}],
                         pk="run_id")
    d["questions"].insert_all([
        question(RUN, "q1", 0, "What is 2+3?", "5"), question(RUN, "q2", 1, "What is 1+1?", "2"),
        question(RUN, "q4", 2, "What is 2+2?", "4"), question(RUN2, "q3", 0, "What is 3+3?", "6")],
        pk=("run_id", "question_id"))
    q1, q2, q3, q4 = ask("What is 2+3?"), ask("What is 1+1?"), ask("What is 3+3?"), ask("What is 2+2?")
    d["model_calls"].insert_all([
        call("a1", RUN, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", messages=q1, t=1),
        call("a2", RUN, "q1", "The answer is 6.", 5, "6", "marker", model="x", messages=q1, t=2),
        call("a3", RUN, "q1", "So 6. The answer is 6.", 6, "6", "marker", model="y", messages=q1, t=3),
        call("b1", RUN, "q2", "The answer is 3.", 5, "3", "marker", messages=q2, t=4),
        call("b2", RUN, "q2", "1+1 is 3. The answer is 3.", 8, "3", "marker", model="x", messages=q2, t=5),
        call("b3", RUN, "q2", "maybe 2", 3, "2", "fallback", model="y", messages=q2, t=6),
        call("d1", RUN, "q4", "The answer is 4.", 5, "4", "marker", messages=q4, t=7),
        call("d2", RUN, "q4", "The answer is 4.", 5, "4", "marker", model="x", messages=q4, t=8),
        call("c1", RUN2, "q3", "Adding 3 and 3. The answer is 6.", 256, "6", "marker", finish="length", messages=q3,
             t=1),
        call("c2", RUN2, "q3", "3+3=6. The answer is 6.", 10, "6", "marker", model="x", messages=q3, t=2),
        call("c3", RUN2, "q3", "The answer is 7.", 5, "7", "marker", model="y", messages=q3, t=3),
    ], pk="call_id")
    return path


def test_data_only_rows_imitate_each_sets_right_finished_explicit_candidate(sets_db, tmp_path):
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "o",
                "--data-only", "--sets-per-question", 1, "--shots", 0)
    assert out.exit_code == 0, out.output
    rows = jsonl(tmp_path / "o" / "dataset" / "train.jsonl")
    # q2's set holds no usable right candidate (y's 2 is a guess), q4 has no set: two rows
    assert [(r["question_id"], r["difficulty"], r["call_id"], r["run_id"], r["model"], r["completion"])
            for r in rows] == [
        ("q1", "hard", "a1", RUN, "trainee", [{"role": "assistant", "content": "2+3=5. The answer is 5."}]),
        ("q3", "easy", "c2", RUN2, "trainee", [{"role": "assistant", "content": "3+3=6. The answer is 6."}])]
    # the prompt shows the question and the set's three candidates (--shots 0: no exemplars)
    [system, user] = rows[0]["prompt"]
    assert system["role"] == "system" and user["content"].startswith("What is 2+3?\n\nResponses from several models:")
    for text in ("2+3=5. The answer is 5.", "The answer is 6.", "So 6. The answer is 6."):
        assert user["content"].count(f'"{text}"') == 1
    assert '"Adding 3 and 3. The answer is 6."' in rows[1]["prompt"][-1]["content"]  # the cut one is shown
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["sets"], stats["hard"], stats["easy"], stats["any_correct"], stats["rows"]) == (3, 2, 1, 3, 2)
    assert stats["rows_by_difficulty"] == {"hard": 1, "easy": 1}
    assert stats["source_runs"] == [RUN2, RUN] and stats["models"] == ["m", "x", "y"]
    assert stats["source"] == {"db": str(sets_db), "aggregate": 3, "recipe": "sft", "target": "text", "sets": 3,
                               "sets_per_question": 1, "easy_per_hard": 1.0, "shots": 0, "held_out_questions": 0,
                               "source_run_filter": [], "source_runs": [RUN2, RUN]}
    # nothing recorded in the trace DB
    assert [r["run_id"] for r in sqlite_utils.Database(sets_db)["runs"].rows] == [RUN, RUN2]


def test_answer_target_rows_name_only_a_right_candidates_answer(sets_db, tmp_path):
    """--target answer: the same prompts, the completion only the sentence naming the answer; q2's set,
    whose only right candidate is a guess (no text to imitate), now gives a row too."""
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "o",
                "--data-only", "--sets-per-question", 1, "--shots", 0, "--target", "answer")
    assert out.exit_code == 0, out.output
    rows = jsonl(tmp_path / "o" / "dataset" / "train.jsonl")
    assert [(r["question_id"], r["difficulty"], r["completion"][0]["content"]) for r in rows] == [
        ("q1", "hard", "The answer is 5."), ("q2", "hard", "The answer is 2."), ("q3", "easy", "The answer is 6.")]
    text = jsonl(_data_only(sets_db, tmp_path / "t"))
    assert [r["prompt"] for r in rows if r["question_id"] != "q2"] == [r["prompt"] for r in text]
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["source"]["target"], stats["rows_by_difficulty"]) == ("answer", {"hard": 2, "easy": 1})
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "b",
                "--data-only", "--target", "choice")
    assert out.exit_code == 2 and "Traceback" not in out.output and "--target" in out.output


def _data_only(db, out, *flags):
    res = agora("train", "sft", "--aggregate", 3, "--db", db, "--model", "trainee", "--out", out, "--data-only",
                "--sets-per-question", 1, "--shots", 0, *flags)
    assert res.exit_code == 0, res.output
    return out / "dataset" / "train.jsonl"


def test_data_only_reads_the_source_runs_and_leaves_out_the_held_out_questions(sets_db, tmp_path):
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "o",
                "--data-only", "--source-run", RUN)
    assert out.exit_code == 0, out.output  # q1 and q2 (hard; q2 gives no row); q3 is align-2's
    assert [r["call_id"] for r in jsonl(tmp_path / "o" / "dataset" / "train.jsonl")] == ["a1"]
    stats = json.loads((tmp_path / "o" / "dataset" / "stats.json").read_text())
    assert (stats["sets"], stats["source_runs"], stats["source"]["source_run_filter"]) == (2, [RUN], [RUN])
    held = tmp_path / "held.txt"
    held.write_text("q1\n")
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "h",
                "--data-only", "--held-out", held)
    assert out.exit_code == 0, out.output
    assert [r["call_id"] for r in jsonl(tmp_path / "h" / "dataset" / "train.jsonl")] == ["c2"]  # q2: no row
    assert json.loads((tmp_path / "h" / "dataset" / "stats.json").read_text())["source"]["held_out_questions"] == 1


def test_an_empty_aggregator_sft_dataset_says_why(sets_db, tmp_path):
    """Sets drawn but none holding a usable right candidate, and no set at all: each warns with its cause."""
    held = tmp_path / "held.txt"
    held.write_text("q1\nq3\n")
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "o",
                "--data-only", "--held-out", held)
    assert out.exit_code == 0, out.output
    assert jsonl(tmp_path / "o" / "dataset" / "train.jsonl") == []
    said = " ".join(out.output.split())
    assert ("warning: no verified answers to train 'trainee' on: none of the 1 candidate sets drawn holds a right, "
            "finished, explicit candidate to imitate (training would refuse this dataset)") in said
    out = agora("train", "sft", "--aggregate", 4, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "p",
                "--data-only")
    said = " ".join(out.output.split())
    assert out.exit_code == 0, out.output
    assert ("warning: no verified answers to train 'trainee' on: no question has 4 recorded samples to show (the "
            "most for one question: 3, over 4 questions with gold); lower --aggregate or record more samples") in said


@pytest.mark.parametrize("flags, message", [
    (("--teacher", "x"), "error: --aggregate imitates a right candidate of each candidate set (any model's "
                         "samples): drop --teacher"),
    (("--teacher", "x", "--per-question", "2"), "error: --aggregate imitates a right candidate of each candidate "
                                                 "set (any model's samples): drop --teacher, --per-question"),
    (("--aggregate", "1"), None),
])
def test_options_that_select_own_answers_are_refused_with_aggregate(sets_db, tmp_path, flags, message):
    args = ("--aggregate", 3, *flags) if flags[0] != "--aggregate" else flags
    out = agora("train", "sft", *args, "--db", sets_db, "--model", "trainee", "--out", tmp_path / "o", "--data-only")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert lines(out) == [message or "error: --aggregate: AggregatorDataConfig.k must be >= 2 (one candidate is "
                                     "nothing to aggregate), got 1"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags", [("--sets-per-question", "3"), ("--easy-per-hard", "2"), ("--shots", "0"),
                                   ("--sets-per-question", "3", "--shots", "1"), ("--target", "answer")])
def test_aggregate_options_without_aggregate_are_refused(sets_db, tmp_path, flags):
    out = agora("train", "sft", *flags, "--db", sets_db, "--model", "m", "--out", tmp_path / "o", "--data-only")
    assert out.exit_code == 2 and "Traceback" not in out.output
    named = ", ".join(f for f in flags if f.startswith("--"))
    assert lines(out) == [f"error: {named}: options of --aggregate K (its candidate sets); without it they would be "
                          "ignored"]
    assert not (tmp_path / "o").exists()


@pytest.fixture
def tiny_pool(tmp_path, monkeypatch):
    """A pool of one member, the tiny test model (its tokenizer counts the rows' tokens), with the
    ``train`` extra taken as installed and TRL's trainer replaced by a stand-in that records its input."""
    pytest.importorskip("transformers")
    import agora.cli.train_sft as train_sft_cli
    import agora.training.pipeline as pipeline
    from agora.training.trainers import TrainResult
    from tiny_lm import build_tiny_lm

    tiny = build_tiny_lm(tmp_path / "tiny")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "transformers"\npath = "{tiny}"\n')
    seen = {}

    def train_sft(base, rows, out, settings, adapter=None):
        seen.update(base=base, rows=rows, max_length=settings.max_length)
        (out / "adapter").mkdir(parents=True, exist_ok=True)
        (out / "adapter" / "adapter_config.json").write_text("{}")
        return TrainResult("sft", out / "adapter", base, adapter, len(rows), 1, [0.5])

    monkeypatch.setattr(train_sft_cli, "require_train_extra", lambda: None)
    monkeypatch.setattr(pipeline, "train_sft", train_sft)
    return tiny, pool, seen


def test_training_records_the_aggregator_source_and_serves_it_beside_the_pool(sets_db, tmp_path, tiny_pool):
    """q1's wrong y candidate recorded by align-2 instead and q3 held out: the sets are q1's and q2's,
    the one row q1's (its target a1 from b:gsm8k:candidates); the runs recorded are every candidate's."""
    tiny, pool, seen = tiny_pool
    d = sqlite_utils.Database(sets_db)
    d["questions"].insert(question(RUN2, "q1", 1, "What is 2+3?", "5"))
    d["model_calls"].update("a3", {"run_id": RUN2})
    held = tmp_path / "held.txt"
    held.write_text("q3\n")
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--name", "agg", "--shots", 0, "--sets-per-question", 1, "--held-out", held,
                "--run-id", "agg-1")
    assert out.exit_code == 0, out.output
    assert [(r["call_id"], r["run_id"], r["model"]) for r in seen["rows"]] == [("a1", RUN, "m")]
    assert seen["base"] == str(tiny) and seen["max_length"] == 1024
    [rec] = [r for r in d["training_datasets"].rows if r["run_id"] == "agg-1"]
    filters = json.loads(rec["filters"])
    assert (rec["kind"], rec["rows"]) == ("sft", 1)
    # the runs of every candidate shown, not only the target's
    assert (filters["aggregate"], filters["recipe"], filters["sets"], filters["source_runs"]) == (3, "sft", 2,
                                                                                                   [RUN2, RUN])
    run = d["runs"].get("agg-1")
    config, dataset = json.loads(run["config"]), json.loads(run["dataset"])
    assert (config["model"], config["aggregate"], config["recipe"]) == ("m", 3, "sft")
    assert (dataset["aggregate"], dataset["recipe"], dataset["sets"], dataset["source_runs"]) == (3, "sft", 2,
                                                                                                   [RUN2, RUN])
    assert run["status"] == "finished"
    from agora.models.pool import load_pool

    served = load_pool(tmp_path / "agg" / "pool.toml")
    assert served.names == ["m", "agg"] and served["agg"].spec.adapter == str(tmp_path / "agg" / "adapter")


def test_rows_longer_than_max_length_are_refused_before_a_run_is_recorded(sets_db, tmp_path, tiny_pool):
    """TRL cuts a row at --max-length from its end, the completion first: refused, naming the option
    and the longest row's tokens (through the member's chat template)."""
    from transformers import AutoTokenizer

    tiny, pool, seen = tiny_pool
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--shots", 0, "--sets-per-question", 1, "--data-only")
    rows = jsonl(tmp_path / "agg" / "dataset" / "train.jsonl")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokens = [len(tokenizer.apply_chat_template([*r["prompt"], *r["completion"]], tokenize=True,
                                                return_dict=True)["input_ids"]) for r in rows]
    assert len(tokens) == 2 and 20 < min(tokens) < max(tokens)
    short = min(tokens)  # the shorter row fits, the longer does not
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--shots", 0, "--sets-per-question", 1, "--max-length", short, "--run-id", "agg-1")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert " ".join(lines(out)) == (f"error: 1 of 2 aggregator rows are longer than --max-length {short} tokens "
                                    f"(longest {max(tokens)}); raise --max-length")
    assert seen == {} and [r["run_id"] for r in sqlite_utils.Database(sets_db)["runs"].rows] == [RUN, RUN2]
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--shots", 0, "--sets-per-question", 1, "--max-length", max(tokens))
    assert out.exit_code == 0, out.output
    assert seen["max_length"] == max(tokens)


def test_a_name_of_another_pool_member_is_refused_before_a_run_is_recorded(sets_db, tmp_path, tiny_pool):
    tiny, pool, seen = tiny_pool
    pool.write_text(pool.read_text() + f'[[models]]\nname = "x"\nbackend = "transformers"\npath = "{tiny}"\n')
    out = agora("train", "sft", "--aggregate", 3, "--db", sets_db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--name", "x", "--shots", 0)
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert lines(out) == ["error: --name 'x' is another member of the pool; give the trained member a new name"]
    assert seen == {} and [r["run_id"] for r in sqlite_utils.Database(sets_db)["runs"].rows] == [RUN, RUN2]
