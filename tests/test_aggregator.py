"""The trained aggregator's pieces (agora.training.aggregator): its prompt, its reward, the candidate
sets drawn from recorded samples (hard and easy mixed), checked against hand values; and a short
GRPO run of a tiny model on aggregation prompts, served back as MoA's aggregator through a pool file."""

import json
import random

import pytest

from agora.training.aggregator import (
    AggregatorDataConfig,
    aggregation_reward,
    aggregator_prompt,
    aggregator_rows,
    aggregator_sft_rows,
    aggregator_stats,
    candidate_sets,
    plurality_answer,
)
from agora.training.own_samples import OwnSample

SYSTEM = ("Solve the math problem. Reason briefly step by step in words, not code, then end with 'The answer is N.' "
          "where N is the final number.")


def test_prompt_shows_the_candidates_shuffled_by_the_seed():
    messages = aggregator_prompt("What is 2+3?", ["A5", "B6", "C7"], seed=1, shots=0)
    order = ["A5", "B6", "C7"]
    random.Random(1).shuffle(order)
    assert order == ["B6", "C7", "A5"]
    assert messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 2+3?\n\nResponses from several models:\n1. \"B6\"\n\n2. \"C7\"\n\n"
                                    "3. \"A5\"\n\nSome of them may be wrong. Critically evaluate them and write one "
                                    "correct answer. End with 'The answer is N.' where N is the final answer."}]
    # another seed, another order; same seed, same prompt
    assert aggregator_prompt("What is 2+3?", ["A5", "B6", "C7"], seed=0, shots=0) != messages
    assert aggregator_prompt("What is 2+3?", ["A5", "B6", "C7"], seed=1, shots=0) == messages


def test_reward_is_the_scorer_on_the_answer_read():
    completions = [[{"role": "assistant", "content": "Both add up: 2+3=5. The answer is 5."}],
                   [{"role": "assistant", "content": "The answer is 6."}],
                   [{"role": "assistant", "content": "No idea."}],
                   [{"role": "assistant", "content": "The answer is (B)."}],
                   "The answer is 5."]
    got = aggregation_reward([None] * 5, completions, ["5", "5", "5", "B", None], ["math", "math", "math", "mc", "math"],
                             n_choices=[4, 4, 4, 4, 4])
    assert got == [1.0, 0.0, 0.0, 1.0, None]
    # with the question: the reply's answer is read as the protocols read it (the same verdicts here)
    asked = aggregation_reward([None] * 5, completions, ["5", "5", "5", "B", None],
                               ["math", "math", "math", "mc", "math"], n_choices=[4] * 5,
                               instruction=["What is 2+3?"] * 3 + ["Which? (A) x (B) y", "Q"])
    assert asked == got
    echo = ["Tom has 5 apples and eats none. How many are left?"]  # only the question repeated: no answer
    assert aggregation_reward([None], echo, ["5"], ["math"]) == [1.0]  # read without the question: a guess
    assert aggregation_reward([None], echo, ["5"], ["math"], instruction=echo) == [0.0]


def s(cid, q, text, answer, correct, model="m", gold="5"):
    return OwnSample(cid, model, "run", q, "gsm8k", q, gold, "math", (), text, answer, "marker", correct, True, 5)


def test_candidate_sets_hard_and_easy_and_majority():
    assert plurality_answer(["6", None, "5", "6", "5"]) == "6"  # ties: the first seen
    assert plurality_answer([None, None]) is None
    samples = ([s(f"a{i}", "Q1", f"t{i}", a, a == "5") for i, a in enumerate(["5", "6", "6", "6"])]     # hard
               + [s(f"b{i}", "Q2", f"u{i}", a, a == "5") for i, a in enumerate(["5", "5", "5", "7"])]   # easy
               + [s(f"c{i}", "Q3", f"v{i}", a, a == "5") for i, a in enumerate(["5", "5", "4", "5"])]   # easy
               + [s("d0", "Q4", "w", "5", True)])                                                       # too few
    cfg = AggregatorDataConfig(k=4, sets_per_question=1, easy_per_hard=1.0, seed=0)
    sets = candidate_sets(samples, cfg)
    # every hard set, and one easy set per hard one (seeded: which one is the draw's)
    assert [(x["question"], x["difficulty"], x["majority"]) for x in sets][0] == ("Q1", "hard", "6")
    assert [x["difficulty"] for x in sets] == ["hard", "easy"]
    assert sets[0]["any_correct"] and not sets[0]["majority_correct"]
    every = candidate_sets(samples, AggregatorDataConfig(k=4, sets_per_question=1, easy_per_hard=5.0))
    assert sorted(x["question"] for x in every) == ["Q1", "Q2", "Q3"]
    stats = aggregator_stats(every)
    assert (stats["sets"], stats["hard"], stats["easy"], stats["majority_correct"], stats["any_correct"]) == (
        3, 1, 2, 2, 3)
    rows = aggregator_rows(sets, cfg)
    assert rows[0]["gold"] == "5" and rows[0]["difficulty"] == "hard"
    assert sorted(c["answer"] for c in json.loads(rows[0]["candidates"])) == ["5", "6", "6", "6"]
    assert all(f'"{t}"' in rows[0]["prompt"][-1]["content"] for t in ("t0", "t1", "t2", "t3"))
    with pytest.raises(ValueError, match="k must be >= 2"):
        AggregatorDataConfig(k=1)


def test_sft_rows_imitate_a_right_finished_explicit_candidate_of_each_set_that_has_one():
    """The SFT recipe: one row per set with a usable right candidate (the first in recorded order that
    finished and states its answer explicitly), the same prompt GRPO's row shows, that candidate's text
    as the completion; a set without one gives no row."""
    cut = OwnSample("a0", "m", "run", "Q1", "gsm8k", "Q1", "5", "math", (), "t0", "5", "marker", True, False, 256)
    implicit = OwnSample("a1", "m", "run", "Q1", "gsm8k", "Q1", "5", "math", (), "t1", "5", "last_number", True,
                         True, 9)
    hard = [cut, implicit, s("a2", "Q1", "t2", "5", True), s("a3", "Q1", "t3", "6", False)]
    none_right = [s(f"n{i}", "Q2", f"x{i}", "7", False) for i in range(4)]
    cfg = AggregatorDataConfig(k=4, sets_per_question=1, easy_per_hard=5.0, seed=0)
    sets = candidate_sets(hard + none_right, cfg)
    # hard sets first: Q2 (every answer 7), then Q1 (5, 5, 5, 6: the majority is right, easy)
    assert [(x["question"], x["difficulty"]) for x in sets] == [("Q2", "hard"), ("Q1", "easy")]
    rows = aggregator_sft_rows(sets, cfg, model="trainee")
    assert len(rows) == 1  # Q2 holds no right candidate
    row = rows[0]
    assert row["difficulty"] == "easy" and row["majority_correct"] is True
    assert row["completion"] == [{"role": "assistant", "content": "t2"}]  # not the cut t0, not the implicit t1
    assert (row["call_id"], row["run_id"], row["model"], row["gold"], row["question_id"]) == (
        "a2", "run", "trainee", "5", "Q1")
    assert row["prompt"] == aggregator_rows(sets, cfg)[1]["prompt"]  # Q1's row: second position, its seed
    assert aggregator_sft_rows(sets, cfg)[0]["model"] == "m"  # without model: the candidate's author
    # the same set twice: two positions, two shuffles, so two prompts (both kept)
    assert len(aggregator_sft_rows([sets[1], sets[1]], cfg)) == 2
    assert aggregator_sft_rows([], cfg) == []


def test_answer_target_rows_name_only_the_right_answer_so_the_loss_is_on_the_choice():
    """``target="answer"``: the same prompts, the completion only ``The answer is N.`` of the set's
    first right candidate (a cut or implicit one counts: its answer is what is taught, not its text);
    an option letter for an mc set; an unknown target is refused naming the allowed ones."""
    cut = OwnSample("a0", "m", "run", "Q1", "gsm8k", "Q1", "5", "math", (), "t0", "5", "marker", True, False, 256)
    hard = [s("a1", "Q1", "t1", "6", False), cut, s("a2", "Q1", "t2", "5", True), s("a3", "Q1", "t3", "6", False)]
    mc = [OwnSample(f"m{i}", "m", "run", "Q3", "arc", "Q3", "B", "mc", (), f"x{i}", a, "marker", a == "B", True, 9)
          for i, a in enumerate("ACBA")]
    cfg = AggregatorDataConfig(k=4, sets_per_question=1, easy_per_hard=5.0, seed=0)
    sets = candidate_sets(hard + mc, cfg)
    assert [(x["question"], x["difficulty"]) for x in sets] == [("Q1", "hard"), ("Q3", "hard")]
    text_rows = aggregator_sft_rows(sets, cfg)
    rows = aggregator_sft_rows(sets, cfg, model="trainee", target="answer")
    assert [r["completion"][0]["content"] for r in rows] == ["The answer is 5.", "The answer is B."]
    assert [r["call_id"] for r in rows] == ["a0", "m2"]
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in text_rows[:1]] + [aggregator_rows(sets, cfg)[1]["prompt"]]
    assert rows[0]["model"] == "trainee" and rows[0]["difficulty"] == "hard"
    with pytest.raises(ValueError, match="one of text, answer, got 'choice'"):
        aggregator_sft_rows(sets, cfg, target="choice")


def test_cli_trains_an_aggregator_on_a_tiny_model_and_moa_uses_it(tmp_path):
    pytest.importorskip("trl")
    import sqlite_utils
    from test_verified_data import agora, call, question
    from tiny_lm import build_tiny_lm

    from agora.models.pool import load_pool

    db = tmp_path / "t.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert({"run_id": "b:gsm8k:candidates", "protocol": "candidates"}, pk="run_id")
    d["questions"].insert_all([question("b:gsm8k:candidates", f"q{n}", n, f"Tom has {n} apples + 2 ?", str(n + 2))
                               for n in range(3)], pk=("run_id", "question_id"))
    d["model_calls"].insert_all([
        call(f"c{n}{i}", "b:gsm8k:candidates", f"q{n}", f"The answer is {n + 2 + i % 2} .", 5, str(n + 2 + i % 2),
             "marker", model=("m", "m2")[i % 2], t=i)
        for n in range(3) for i in range(3)], pk="call_id")
    out = agora("train", "grpo", "--aggregate", 2, "--db", db, "--model", "m", "--out", tmp_path / "data",
                "--data-only", "--sets-per-question", 1, "--shots", 0)
    assert out.exit_code == 0, out.output
    stats = json.loads((tmp_path / "data" / "dataset" / "stats.json").read_text())
    assert stats["models"] == ["m", "m2"] and stats["source_runs"] == ["b:gsm8k:candidates"]

    tiny = build_tiny_lm(tmp_path / "tiny")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "transformers"\npath = "{tiny}"\n')
    out = agora("train", "grpo", "--aggregate", 2, "--db", db, "--model", "m", "--pool", pool, "--out",
                tmp_path / "agg", "--name", "agg", "--max-steps", 1, "--num-generations", 2, "--batch-size", 2,
                "--max-completion-length", 4, "--lr", "1e-2", "--lora-r", 4, "--threads", 1, "--shots", 0,
                "--run-id", "agg-1")
    assert out.exit_code == 0, out.output
    served = load_pool(tmp_path / "agg" / "pool.toml")
    assert served.names == ["m", "agg"] and served["agg"].spec.adapter == str(tmp_path / "agg" / "adapter")
    assert served["m"].spec.adapter is None  # the base member stays as it was
    ck = list(d["checkpoints"].rows)
    assert [(c["run_id"], c["kind"], c["steps"]) for c in ck] == [("agg-1", "grpo", 1)]
    [rec] = [r for r in d["training_datasets"].rows if r["run_id"] == "agg-1"]
    assert json.loads(rec["filters"])["source_runs"] == ["b:gsm8k:candidates"]

    # served back through the pool: MoA's aggregator setting names it
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"id": "t1", "question": "Tom has 1 apples + 2 ?", "answer": "So #### 3"}) + "\n")
    out = agora("run", "moa", "--pool", tmp_path / "agg" / "pool.toml", "--data", problems, "--proposers", "m",
                "--aggregator", "agg", "--max-tokens", 3, "--shots", 0, "--db", tmp_path / "moa.db", "--run-id", "moa-1")
    assert out.exit_code == 0, out.output
    calls = list(sqlite_utils.Database(tmp_path / "moa.db")["model_calls"].rows)
    assert {(c["role"], c["model"]) for c in calls if c["error"] is None} == {("proposer", "m"), ("aggregator", "agg")}


@pytest.mark.slow
def test_the_tiny_pool_end_to_end_traces_then_an_aggregator_and_own_data(tmp_path):
    """The built-in tiny pool (SmolLM2-135M, Gemma-3-270M): ALIGN records samples, an aggregator is
    trained from them for two GRPO steps and served back as MoA's aggregator; the own-data datasets
    are written from the same traces."""
    pytest.importorskip("trl")
    import sqlite_utils
    from test_verified_data import agora

    db = tmp_path / "t.db"
    out = agora("run", "align", "--pool", "tiny", "--format", "synthetic", "--limit", 3, "--agents", 2, "--samples", 2,
                "--max-tokens", 48, "--db", db, "--run-id", "a1")
    assert out.exit_code == 0, out.output
    out = agora("train", "sft", "--pool", "tiny", "--model", "smollm2-135m", "--db", db, "--out", tmp_path / "sft",
                "--data-only")
    assert out.exit_code == 0, out.output
    stats = json.loads((tmp_path / "sft" / "dataset" / "stats.json").read_text())
    assert stats["samples"] == 6 and stats["skipped_calls"]["held_out"] == 0  # 3 questions × 2 samples of its agent
    out = agora("train", "grpo", "--aggregate", 2, "--pool", "tiny", "--model", "smollm2-135m", "--db", db,
                "--out", tmp_path / "agg", "--name", "agg", "--max-steps", 2, "--num-generations", 2, "--batch-size", 2,
                "--max-completion-length", 16, "--lr", "1e-4", "--lora-r", 4, "--shots", 0, "--run-id", "agg-1")
    assert out.exit_code == 0, out.output
    d = sqlite_utils.Database(db)
    assert [(c["kind"], c["steps"]) for c in d["checkpoints"].rows] == [("grpo", 2)]
    out = agora("run", "moa", "--pool", tmp_path / "agg" / "pool.toml", "--format", "synthetic", "--limit", 1,
                "--proposers", "smollm2-135m,gemma3-270m", "--aggregator", "agg", "--max-tokens", 16,
                "--db", tmp_path / "moa.db", "--run-id", "m1")
    assert out.exit_code == 0, out.output
    calls = list(sqlite_utils.Database(tmp_path / "moa.db")["model_calls"].rows)
    assert {c["model"] for c in calls if c["role"] == "aggregator" and c["error"] is None} == {"agg"}


def test_aggregation_problem_keeps_the_problem_and_asks_the_aggregator_prompt():
    from agora.tasks import Problem
    from agora.training.aggregator import aggregation_problem, aggregator_prompt

    p = Problem("q1", "What is 2 + 3?", "5", "math")
    item = aggregation_problem(p, ["The answer is 5.", "The answer is 6."], seed=3)
    assert (item.id, item.gold, item.kind, item.n_choices) == ("q1", "5", "math", p.n_choices)
    assert item.question == aggregator_prompt(p.question, ["The answer is 5.", "The answer is 6."], kind="math",
                                              seed=3, shots=0, question_id="q1")[-1]["content"]
    assert "What is 2 + 3?" in item.question and "The answer is 6." in item.question
