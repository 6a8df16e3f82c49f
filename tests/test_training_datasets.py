"""Trace DB → TRL datasets on a hand-made trace DB (exact rows, ties, dedupe, split, export)."""

import json

import pytest
import sqlite_utils

from agora.training.datasets import (
    PairFilter,
    align_pairs,
    dpo_rows,
    export_jsonl,
    export_parquet,
    filter_pairs,
    grpo_rows_from_duels,
    grpo_rows_from_problems,
    load_duels,
    load_preference_pairs,
    split_by_instruction,
    to_dataset,
)
from agora.tasks import Problem

SYSTEM = {"role": "system", "content": "Answer briefly."}


def msgs(x):
    return json.dumps([SYSTEM, {"role": "user", "content": x}])


def pair(pid, prompt, chosen, rejected, cm, rm, cs, rs, iteration=0, run="duel-1", gold=None, kind=None):
    return {"pair_id": pid, "run_id": run, "duel_id": f"d-{pid}", "iteration": iteration, "prompt": prompt,
            "prompt_messages": msgs(prompt), "chosen": chosen, "rejected": rejected, "chosen_model": cm,
            "rejected_model": rm, "chosen_score": cs, "rejected_score": rs, "margin": cs - rs,
            "judge_scores": json.dumps({"chosen": {"m3": cs}, "rejected": {"m3": rs}}), "reputations": json.dumps({cm: 100.0, rm: 100.0}),
            "gold": gold, "kind": kind, "created_at": f"2026-01-01T00:00:0{pid[-1]}+00:00"}


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.db"
    d = sqlite_utils.Database(path)
    d["preference_pairs"].insert_all([
        pair("p1", "2+2?", "4", "5", "m1", "m2", 8.0, 6.0, gold="4", kind="math"),
        pair("p2", "Name a colour.", "Red.", "Blue.", "m1", "m2", 5.0, 5.0),            # tie: equal scores
        pair("p3", "2+2?", " 4", "5 ", "m1", "m2", 7.0, 6.5, iteration=1, gold="4", kind="math"),  # dupe of p1
        pair("p4", "Name a colour.", "Green.", "Blue.", "m2", "m3", 6.5, 6.0),
        pair("p5", "Capital of France?", "Paris.", "Lyon.", "m3", "m1", 9.0, 7.5),
        pair("p6", "Capital of France?", "Paris.", "Paris.", "m1", "m3", 7.0, 6.0),      # tie: same text
    ], pk="pair_id")
    d["duels"].insert_all([
        duel(0, "2+2?", ("m1", "4", 8.0), ("m2", "5", 6.0), gold="4", kind="math"),
        duel(1, "Name a colour.", ("m1", "Red.", 5.0), ("m2", "Blue.", 5.0)),            # tie
        duel(2, "Name a colour.", ("m2", "Green.", 6.5), ("m3", "Blue.", 6.0)),
        duel(3, "Capital of France?", ("m3", "Paris.", 9.0), ("m1", "Lyon.", 7.5)),
        duel(4, "2+2?", ("m2", "4", 7.0), ("m3", "four", 7.0), iteration=1, gold="4", kind="math"),
    ], pk="duel_id")
    return path


def duel(n, prompt, a, b, iteration=0, gold=None, kind=None):
    return {"duel_id": f"duel-1:{iteration}:{n}", "run_id": "duel-1", "iteration": iteration, "duel_number": n,
            "instruction": prompt, "gold": gold, "kind": kind, "prompt_messages": msgs(prompt),
            "model_a": a[0], "answer_a": a[1], "score_a": a[2], "model_b": b[0], "answer_b": b[1], "score_b": b[2],
            "tie": int(a[2] == b[2])}


def test_load_preference_pairs_decodes_json_and_orders(db):
    pairs = load_preference_pairs(db)
    assert [p["pair_id"] for p in pairs] == ["p1", "p2", "p4", "p5", "p6", "p3"]  # iteration 1 last
    assert pairs[0]["prompt_messages"] == [SYSTEM, {"role": "user", "content": "2+2?"}]
    assert pairs[0]["judge_scores"] == {"chosen": {"m3": 8.0}, "rejected": {"m3": 6.0}}


def test_dpo_rows_exact_ties_out_and_dedupe(db):
    rows = dpo_rows(load_preference_pairs(db))
    assert [r["pair_id"] for r in rows] == ["p1", "p4", "p5"]
    assert rows[0] == {
        "prompt": [SYSTEM, {"role": "user", "content": "2+2?"}],
        "chosen": [{"role": "assistant", "content": "4"}],
        "rejected": [{"role": "assistant", "content": "5"}],
        "pair_id": "p1", "source": "duel", "instruction": "2+2?", "chosen_model": "m1", "rejected_model": "m2",
        "margin": 2.0,
    }
    # without dedupe the repeated pair (same prompt, same answers up to whitespace) comes back
    assert [r["pair_id"] for r in dpo_rows(load_preference_pairs(db), PairFilter(dedupe=False))] == [
        "p1", "p4", "p5", "p3"]


def test_filters_margin_model_run_iteration(db):
    pairs = load_preference_pairs(db)
    assert [p["pair_id"] for p in filter_pairs(pairs, PairFilter(min_margin=1.5))] == ["p1", "p5"]
    assert [p["pair_id"] for p in filter_pairs(pairs, PairFilter(model="m3"))] == ["p4", "p5"]
    assert [p["pair_id"] for p in filter_pairs(pairs, PairFilter(iterations=(1,)))] == ["p3"]
    assert filter_pairs(pairs, PairFilter(run_ids=("other",))) == []
    with pytest.raises(ValueError, match="min_margin"):
        PairFilter(min_margin=-1)


def test_split_is_disjoint_by_instruction_and_seeded():
    rows = [{"instruction": f"q{i % 10}", "n": i} for i in range(30)]
    train, val = split_by_instruction(rows, 0.2, seed=1)
    assert len(val) == 6 and len(train) == 24  # 2 of 10 instructions, 3 rows each
    assert not {r["instruction"] for r in train} & {r["instruction"] for r in val}
    assert split_by_instruction(rows, 0.2, seed=1) == (train, val)
    assert split_by_instruction(rows, 0.2, seed=2)[1] != val
    assert len(split_by_instruction(rows[:2], 0.01)[1]) == 1  # at least one held-out instruction
    assert split_by_instruction(rows, 0.0) == (rows, [])
    with pytest.raises(ValueError, match="validation_fraction"):
        split_by_instruction(rows, 1.0)


def test_grpo_rows_from_duels_keep_ties_and_judge_scores(db):
    duels = load_duels(db)
    assert len(duels) == 5 and duels[0]["prompt_messages"] == [SYSTEM, {"role": "user", "content": "2+2?"}]
    assert [d["duel_number"] for d in load_duels(db, iterations=(1,))] == [4]
    rows = grpo_rows_from_duels(duels)
    assert [r["instruction"] for r in rows] == ["2+2?", "Name a colour.", "Capital of France?"]
    assert rows[0]["gold"] == "4" and rows[0]["kind"] == "math" and rows[1]["kind"] == "open"
    assert rows[0]["prompt"] == [SYSTEM, {"role": "user", "content": "2+2?"}]
    assert json.loads(rows[0]["judge_scores"]) == [
        {"text": "4", "model": "m1", "score": 8.0}, {"text": "5", "model": "m2", "score": 6.0},
        {"text": "four", "model": "m3", "score": 7.0}]
    assert json.loads(rows[1]["judge_scores"]) == [  # the tied duel counts; "Blue." kept once
        {"text": "Red.", "model": "m1", "score": 5.0}, {"text": "Blue.", "model": "m2", "score": 5.0},
        {"text": "Green.", "model": "m2", "score": 6.5}]
    assert [r["instruction"] for r in grpo_rows_from_duels(duels, model="m3")] == [
        "Name a colour.", "Capital of France?", "2+2?"]


def test_grpo_rows_from_problems():
    rows = grpo_rows_from_problems([Problem("a", "Tom has 2 apples and gets 3 more. How many?", "5", "math")], shots=1)
    assert rows[0]["gold"] == "5" and rows[0]["kind"] == "math" and rows[0]["judge_scores"] == "[]"
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user", "assistant", "user"]


def test_align_pairs_correct_over_incorrect(tmp_path):
    d = sqlite_utils.Database(tmp_path / "a.db")
    d["runs"].insert({"run_id": "align-1", "protocol": "align"}, pk="run_id")
    proposals = [
        {"agent": 0, "model": "m1", "answer": "7", "text": "3 + 4 = 7. The answer is 7.", "signal": 1.0},
        {"agent": 1, "model": "m2", "answer": "8", "text": "The answer is 8.", "signal": 0.5},
        {"agent": 2, "model": "m1", "answer": None, "text": "I am not sure.", "signal": 0.0},
    ]
    d["questions"].insert_all([
        {"run_id": "align-1", "question_id": "q1", "idx": 0, "kind": "math", "question": "3+4?", "gold": "7",
         "detail": json.dumps({"proposals": proposals}), "finished_at": "t"},
        {"run_id": "align-1", "question_id": "q2", "idx": 1, "kind": "math", "question": "no gold", "gold": None,
         "detail": json.dumps({"proposals": proposals}), "finished_at": "t"},
    ], pk=("run_id", "question_id"))
    logged = [SYSTEM, {"role": "user", "content": "3+4?"}]
    d["model_calls"].insert({"call_id": "c0", "run_id": "align-1", "question_id": "q1", "node": "agent_sample",
                             "agent": 0, "messages": json.dumps(logged), "error": None}, pk="call_id")
    pairs = align_pairs(d)
    assert [(p["pair_id"], p["chosen_model"], p["rejected_model"], p["margin"]) for p in pairs] == [
        ("align-1:q1:0>1", "m1", "m2", 1.0), ("align-1:q1:0>2", "m1", "m1", 1.0)]
    rows = dpo_rows(pairs)
    assert rows[0]["prompt"] == logged and rows[0]["source"] == "align"
    assert rows[1]["rejected"] == [{"role": "assistant", "content": "I am not sure."}]
    assert align_pairs(d, run_ids=("other",)) == []


def test_prompt_must_end_with_user_turn(db):
    pairs = load_preference_pairs(db)
    pairs[0]["prompt_messages"] = [SYSTEM]
    with pytest.raises(ValueError, match="p1"):
        dpo_rows(pairs)


def test_exports_open_with_datasets_and_pass_trl_format_checks(db, tmp_path):
    datasets = pytest.importorskip("datasets")
    data_utils = pytest.importorskip("trl.data_utils")
    rows = dpo_rows(load_preference_pairs(db))
    path = export_jsonl(rows, tmp_path / "out" / "dpo.jsonl")
    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert loaded.to_list() == rows
    parquet = datasets.load_dataset("parquet", data_files=str(export_parquet(rows, tmp_path / "dpo.parquet")),
                                    split="train")
    assert parquet.to_list() == rows
    for example in loaded:
        assert data_utils.is_conversational(example)
        # TRL's prompt extraction leaves an explicit-prompt conversational row as it is
        assert data_utils.maybe_extract_prompt(example) == example
    assert data_utils.is_conversational(to_dataset(grpo_rows_from_duels(load_duels(db)))[0])
    with pytest.raises(ValueError, match="empty"):
        to_dataset([])
