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
    aggregator_stats,
    candidate_sets,
    plurality_answer,
)
from agora.training.verified import OwnSample

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
