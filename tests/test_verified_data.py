"""Verified data from a member's own samples (agora.training.verified) on a scripted trace DB,
every figure checked by hand: which samples are read, scored, paired, length-filtered, deduplicated,
held out; the runs recorded; the CLI's data-only mode; the missing ``train`` extra."""

import json
import sys

import pytest
import sqlite_utils
from typer.testing import CliRunner

from agora.tasks import Problem
from agora.training.datasets import dpo_rows
from agora.training.own_samples import HeldOut, OwnSample, VerifiedConfig, own_samples
from agora.training.verified import length_ratio, own_pairs, sft_rows, source_runs, verified_stats

PROMPT = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 2+3?"}]
HELD = [{"role": "user", "content": "What is 1+1?"}]


def call(cid, run, qid, text, tokens, answer, how, *, model="m", role="candidate", finish="stop", messages=PROMPT,
         t=0, **extra):
    return {"call_id": cid, "run_id": run, "question_id": qid, "node": "x", "role": role, "model": model,
            "messages": json.dumps(messages), "completion": text, "completion_tokens": tokens, "answer": answer,
            "how": how, "finish_reason": finish, "error": None, "partner": None, "recipe": None,
            "created_at": f"2026-12-05T00:00:{t:02d}", "sample_index": 0, **extra}


def question(run, qid, idx, text, gold, kind="math", source="gsm8k"):
    return {"run_id": run, "question_id": qid, "idx": idx, "question": text, "gold": gold, "kind": kind,
            "source": source}


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.db"
    d = sqlite_utils.Database(path)
    d["runs"].insert_all([{"run_id": "b:gsm8k:candidates", "protocol": "candidates"},
                          {"run_id": "align-1", "protocol": "align"}], pk="run_id")
    d["questions"].insert_all([
        question("b:gsm8k:candidates", "q1", 0, "What is 2+3?", "5"),
        question("b:gsm8k:candidates", "q2", 1, "What is 1+1?", "2"),          # held out
        question("b:gsm8k:candidates", "q4", 2, "Write a poem.", None, kind="open"),
        question("align-1", "q3", 0, "What is  2+3?", "5"),                    # the same question, another run
    ], pk=("run_id", "question_id"))
    run = "b:gsm8k:candidates"
    d["model_calls"].insert_all([
        call("c1", run, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=1),   # right: chosen, SFT
        call("c2", run, "q1", "The answer is 6.", 8, "6", "marker", t=2),           # wrong, ratio 1.25: kept
        call("c3", run, "q1", "Adding " * 30 + "The answer is 6!", 40, "6", "marker", t=3),  # wrong, ratio 4: filtered
        call("c4", run, "q1", "2+3 is 5", 9, "5", "fallback", t=4),                 # right but a guess
        call("c5", run, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", t=5),   # duplicate of c1
        call("c8", run, "q1", "Long... The answer is 5.", 100, "5", "marker", finish="length", t=6),  # cut
        call("c6", run, "q1", "The answer is 7.", 8, "7", "marker", model="m2", t=7),  # another member
        call("j1", run, "q1", "Score: 8", 3, None, "none", role="judge", t=8),      # not a solver call
        call("h1", run, "q2", "The answer is 2.", 5, "2", "marker", messages=HELD, t=9),
        call("h2", run, "q2", "The answer is 3.", 5, "3", "marker", messages=HELD, t=10),
        call("o1", run, "q4", "Roses.", 2, None, "none", messages=[{"role": "user", "content": "Write a poem."}]),
        call("c7", "align-1", "q3", "So 2+3 = 4. The answer is 4.", 12, None, None, role="agent", t=1),  # re-extracted
    ], pk="call_id")
    return path


CFG = VerifiedConfig(model="m", held_out=HeldOut(frozenset({"q2"})))


def test_samples_read_scored_and_left_out(db):
    samples, skipped = own_samples(db, CFG)
    assert [(s.call_id, s.correct, s.finished, s.how) for s in samples] == [
        ("c1", True, True, "marker"), ("c2", False, True, "marker"), ("c3", False, True, "marker"),
        ("c4", True, True, "fallback"), ("c5", True, True, "marker"), ("c8", True, False, "marker"),
        ("c7", False, True, "marker")]
    assert samples[-1].answer == "4" and samples[-1].run_id == "align-1"
    assert skipped == {"held_out": 2, "no_gold": 1, "not_solver": 1, "recipe": 0, "no_prompt": 0}
    # q1 and q3: same text (up to whitespace) and prompt → one group
    assert len({s.group for s in samples}) == 1
    # the held-out set by text works as by id; reading one run only
    by_text = VerifiedConfig(model="m", held_out=HeldOut.from_problems([Problem("x", "What is 1+1?", "2")]))
    assert own_samples(db, by_text)[1]["held_out"] == 2
    only = own_samples(db, VerifiedConfig(model="m", run_ids=("align-1",)))[0]
    assert [s.call_id for s in only] == ["c7"]


def test_pairs_length_filter_dedupe_and_runs(db):
    samples, _ = own_samples(db, CFG)
    pairs = own_pairs(samples, CFG)
    assert [(p["chosen"], p["rejected"], p["source_runs"]) for p in pairs] == [
        ("2+3=5. The answer is 5.", "The answer is 6.", ["b:gsm8k:candidates"]),
        ("2+3=5. The answer is 5.", "So 2+3 = 4. The answer is 4.", ["align-1", "b:gsm8k:candidates"])]
    assert pairs[0]["pair_id"] == "b:gsm8k:candidates:q1:c1>c2" and pairs[0]["prompt_messages"] == PROMPT
    assert source_runs(pairs) == ["align-1", "b:gsm8k:candidates"]
    assert source_runs(pairs, [pairs[0]["pair_id"]]) == ["b:gsm8k:candidates"]
    rows = dpo_rows(pairs)
    assert rows[0]["prompt"] == PROMPT and rows[0]["source"] == "own"
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "2+3=5. The answer is 5."}]
    # no length filter: the 4x longer wrong answer comes back, third by the spreading order
    loose = own_pairs(samples, VerifiedConfig(model="m", held_out=CFG.held_out, length_ratio=0))
    assert [p["pair_id"][-5:] for p in loose] == ["c1>c2", "c1>c3", "c1>c7"]
    # the cap per question
    one = own_pairs(samples, VerifiedConfig(model="m", held_out=CFG.held_out, max_pairs_per_question=1))
    assert [p["pair_id"][-5:] for p in one] == ["c1>c2"]
    # a fallback guess may be chosen when explicit answers are not required
    guesses = own_pairs(samples, VerifiedConfig(model="m", held_out=CFG.held_out, explicit_only=False))
    assert {p["chosen"] for p in guesses} == {"2+3=5. The answer is 5.", "2+3 is 5"}


def test_sft_rows_and_stats(db):
    samples, skipped = own_samples(db, CFG)
    rows = sft_rows(samples, CFG)
    assert rows == [{"prompt": PROMPT, "completion": [{"role": "assistant", "content": "2+3=5. The answer is 5."}],
                     "instruction": "What is 2+3?", "question_id": "q1", "task": "gsm8k", "gold": "5",
                     "kind": "math", "model": "m", "run_id": "b:gsm8k:candidates", "call_id": "c1"}]
    stats = verified_stats(samples, CFG, skipped)
    assert {k: stats[k] for k in ("questions", "samples", "correct", "sft_rows", "pair_questions",
                                  "pairs_before_length_filter", "pairs_after_length_filter", "pairs",
                                  "length_filtered")} == {
        "questions": 1, "samples": 7, "correct": 4, "sft_rows": 1, "pair_questions": 1,
        "pairs_before_length_filter": 3, "pairs_after_length_filter": 2, "pairs": 2, "length_filtered": 1}
    assert stats["per_task"]["gsm8k"]["pairs"] == 2
    assert stats["pair_runs"] == ["align-1", "b:gsm8k:candidates"] and stats["sft_runs"] == ["b:gsm8k:candidates"]
    assert stats["settings"]["held_out"] == {"question_ids": 1, "questions": 0}


def _sample(text, tokens):
    return OwnSample("c", "m", "r", "q", "t", "Q", "1", "math", (), text, None, None, False, True, tokens)


def test_length_ratio_tokens_then_characters():
    assert length_ratio(_sample("a" * 10, 12), _sample("b", 8)) == 1.5       # tokens when both are known
    assert length_ratio(_sample("a" * 10, None), _sample("b" * 4, 8)) == 2.5  # else characters
    assert length_ratio(_sample("", None), _sample("b" * 3, None)) == 3.0     # an empty side counts as 1
    with pytest.raises(ValueError, match="length_ratio"):
        VerifiedConfig(model="m", length_ratio=0.5)


@pytest.mark.parametrize("owner", ["", "EvolveConfig."])
def test_one_length_ratio_rule_for_own_pairs_and_evolve(owner):
    """0 (no filter) and ratios >= 1 pass; anything between is refused in one line naming the field."""
    from agora.training.evolve import EvolveConfig

    def build(ratio):
        return EvolveConfig(length_ratio=ratio) if owner else VerifiedConfig(model="m", length_ratio=ratio)

    assert [build(r).length_ratio for r in (0, 1, 1.5, 4)] == [0, 1, 1.5, 4]
    for bad in (0.5, -1):
        with pytest.raises(ValueError) as err:
            build(bad)
        assert str(err.value) == f"{owner}length_ratio must be >= 1 (or 0: no filter), got {bad}"


def test_held_out_from_files(tmp_path):
    ids = tmp_path / "held.txt"
    ids.write_text("q1\n\nq7\n")
    assert HeldOut.from_file(ids).question_ids == {"q1", "q7"}
    problems = tmp_path / "held.jsonl"
    problems.write_text(json.dumps({"id": "t-1", "question": "What  is 1+1?", "answer": "So #### 2"}) + "\n")
    held = HeldOut.from_file(problems)
    assert held.excludes("other-id", "What is 1+1?") and held.excludes("t-1", "")
    with pytest.raises(FileNotFoundError, match="held-out"):
        HeldOut.from_file(tmp_path / "nope.txt")


# ----------------------------------------------------------------------------- the CLI


def agora(*args):
    from agora.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


def jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_data_only_own_pairs_and_sft(db, tmp_path):
    held = tmp_path / "held.txt"
    held.write_text("q2\n")
    out = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "dpo",
                "--held-out", held, "--validation", 0)
    assert out.exit_code == 0, out.output
    rows = jsonl(tmp_path / "dpo" / "dataset" / "train.jsonl")
    assert [r["rejected"][0]["content"] for r in rows] == ["The answer is 6.", "So 2+3 = 4. The answer is 4."]
    assert jsonl(tmp_path / "dpo" / "dataset" / "validation.jsonl") == []
    stats = json.loads((tmp_path / "dpo" / "dataset" / "stats.json").read_text())
    assert (stats["pairs_before_length_filter"], stats["pairs_after_length_filter"], stats["pairs"]) == (3, 2, 2)
    assert stats["source_runs"] == ["align-1", "b:gsm8k:candidates"] and stats["skipped_calls"]["held_out"] == 2
    out = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "sft",
                "--source-run", "b:gsm8k:candidates")
    assert out.exit_code == 0, out.output
    rows = jsonl(tmp_path / "sft" / "dataset" / "train.jsonl")  # no --held-out: q2's right answer is in
    assert [(r["question_id"], r["completion"][0]["content"]) for r in rows] == [
        ("q1", "2+3=5. The answer is 5."), ("q2", "The answer is 2.")]
    stats = json.loads((tmp_path / "sft" / "dataset" / "stats.json").read_text())
    assert stats["source_runs"] == ["b:gsm8k:candidates"] and stats["sft_rows"] == 2
    # nothing recorded in the trace DB
    assert [r["run_id"] for r in sqlite_utils.Database(db)["runs"].rows] == ["b:gsm8k:candidates", "align-1"]


def test_data_only_sft_on_a_teachers_right_answers(db, tmp_path):
    """``--teacher m2``: the rows are m2's right answers (here its one right, explicit answer to q1;
    its wrong c6 is left out), for training ``--model m``; the source records the teacher. A teacher
    with no recorded call is refused in one line naming --teacher."""
    d = sqlite_utils.Database(db)
    d["model_calls"].insert(call("t1", "b:gsm8k:candidates", "q1", "3 and 2 make 5. The answer is 5.", 11, "5",
                                 "marker", model="m2", t=11))
    out = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--teacher", "m2",
                "--out", tmp_path / "sft")
    assert out.exit_code == 0, out.output
    rows = jsonl(tmp_path / "sft" / "dataset" / "train.jsonl")
    assert [(r["question_id"], r["model"], r["completion"][0]["content"]) for r in rows] == [
        ("q1", "m2", "3 and 2 make 5. The answer is 5.")]
    stats = json.loads((tmp_path / "sft" / "dataset" / "stats.json").read_text())
    assert stats["source"]["teacher"] == "m2" and stats["source"]["verified"]["model"] == "m2"
    out = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--teacher", "zz",
                "--out", tmp_path / "sft2")
    assert out.exit_code == 2
    assert [line for line in out.output.splitlines() if line.strip()] == [
        f"error: --teacher 'zz': no recorded call of it in {db} (members recorded: m, m2)"]


@pytest.mark.parametrize("command", [("dpo", "--pairs", "own", "--model", "m"), ("dpo", "--model", "m"),
                                     ("sft", "--model", "m"),
                                     ("grpo", "--data", "synthetic", "--model", "qwen2.5-coder-0.5b")])
def test_training_without_the_train_extra_is_one_line_and_records_nothing(db, tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ImportError, as when it is not installed
    out = agora("train", *command, "--db", db, "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.strip()] == [
        "error: training needs the 'train' extra (missing: trl): pip install 'agora-llm[train]' (or -e '.[train]' in "
        "a checkout)"]
    assert [r["run_id"] for r in sqlite_utils.Database(db)["runs"].rows] == ["b:gsm8k:candidates", "align-1"]
    assert not (tmp_path / "o").exists()


def test_train_sft_and_own_dpo_on_a_tiny_model_record_their_source_runs(db, tmp_path):
    pytest.importorskip("trl")
    from tiny_lm import build_tiny_lm

    from agora.models.pool import load_pool

    tiny = build_tiny_lm(tmp_path / "tiny")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "transformers"\npath = "{tiny}"\n')
    common = ("--db", db, "--model", "m", "--pool", pool, "--max-steps", 2, "--batch-size", 1, "--lora-r", 4,
              "--lr", "1e-2", "--threads", 1, "--held-out", tmp_path / "held.txt")
    (tmp_path / "held.txt").write_text("q2\n")
    out = agora("train", "sft", *common, "--out", tmp_path / "sft", "--run-id", "sft-1")
    assert out.exit_code == 0, out.output
    assert load_pool(tmp_path / "sft" / "pool.toml")["m"].spec.adapter == str(tmp_path / "sft" / "adapter")
    out = agora("train", "dpo", "--pairs", "own", *common, "--validation", 0, "--out", tmp_path / "dpo",
                "--run-id", "dpo-1")
    assert out.exit_code == 0, out.output
    d = sqlite_utils.Database(db)
    ck = {c["run_id"]: (c["kind"], c["steps"], c["rows"], c["selected"]) for c in d["checkpoints"].rows}
    assert ck == {"sft-1": ("sft", 2, 1, 1), "dpo-1": ("dpo", 2, 2, 1)}
    recorded = {(r["run_id"], r["split"]): (r["rows"], json.loads(r["filters"])) for r in d["training_datasets"].rows}
    assert recorded[("sft-1", "train")][0] == 1
    assert recorded[("sft-1", "train")][1]["source_runs"] == ["b:gsm8k:candidates"]
    assert recorded[("dpo-1", "train")][0] == 2
    assert recorded[("dpo-1", "train")][1]["source_runs"] == ["align-1", "b:gsm8k:candidates"]
    assert recorded[("dpo-1", "train")][1]["pairs"] == "own"
    assert {r["run_id"]: r["status"] for r in d["runs"].rows if r["run_id"] in ("sft-1", "dpo-1")} == {
        "sft-1": "finished", "dpo-1": "finished"}


def test_duel_samples_pair_a_members_own_answers_across_duels():
    from agora.training.own_samples import duel_samples

    prompt = [{"role": "user", "content": "2+3?"}]

    def duel(n, a, b, extracted_a, extracted_b, gold="5"):
        return {"duel_id": f"d:0:{n}", "run_id": "d", "instruction_id": "i1", "instruction": "2+3?", "gold": gold,
                "kind": "math", "prompt_messages": prompt, "model_a": "m", "model_b": "x", "answer_a": a,
                "answer_b": b, "extracted_a": extracted_a, "extracted_b": extracted_b}

    duels = [duel(0, "2+3=5. The answer is 5.", "The answer is 6.", "5", "6"),
             duel(1, "2+3=4. The answer is 4.", "The answer is 5.", "4", "5"),
             duel(2, "The answer is 5.", "No.", "5", None, gold=None)]          # no gold: not verifiable
    samples = duel_samples(duels, "m")
    assert [(s.call_id, s.correct, s.how) for s in samples] == [("d:0:0:a", True, "marker"), ("d:0:1:a", False, "marker")]
    cfg = VerifiedConfig(model="m")
    assert [(p["chosen"], p["rejected"]) for p in own_pairs(samples, cfg)] == [
        ("2+3=5. The answer is 5.", "2+3=4. The answer is 4.")]


def test_evolve_sft_on_own_answers_records_each_rounds_held_out_score(tmp_path):
    """agora evolve with data 'own': each member trains on its own right answers of the round's duels,
    and its greedy held-out accuracy is recorded before the first round and after each."""
    pytest.importorskip("trl")
    from tiny_lm import build_tiny_lm

    from agora.graphs.duel import DuelConfig
    from agora.models.pool import ModelPool, ModelSpec, PoolMember
    from agora.models.testing import ScriptedChatModel
    from agora.traces.store import TraceStore
    from agora.training import tables
    from agora.training.config import LoraSettings, SFTSettings
    from agora.training.evolve import EvolveConfig, evolve

    tiny = str(build_tiny_lm(tmp_path / "tiny"))

    def respond(messages, _i):
        if "Response to be evaluated: " in messages[-1]["content"]:
            return '{"score": 7}'
        return "2 + 3 = 5 . The answer is 5 ."  # every follower answer is right

    specs = [ModelSpec(name="tiny-a", backend="transformers", path=tiny),
             ModelSpec(name="tiny-b", backend="transformers", path=tiny, system_prompt="Be brief ."),
             ModelSpec(name="judge-1", backend="openai", base_url="http://unused", model="x")]

    def make_pool(current):  # followers scripted, trained from their tiny weights
        return ModelPool([PoolMember(s, ScriptedChatModel(respond=respond)) for s in current])

    lora = LoraSettings(r=2, alpha=4, dropout=0.0, target_modules=("q_proj", "v_proj"))
    sft = SFTSettings(max_steps=1, batch_size=1, learning_rate=1e-2, warmup_ratio=0.0, threads=1, lora=lora)
    cfg = EvolveConfig(duel=DuelConfig(duels=2, iterations=1, max_tokens=4), algorithm="sft", data="own", sft=sft,
                       validation_fraction=0.0)
    problems = [Problem(f"p{n}", f"Tom has {n} + {5 - n} ?", "5") for n in range(2)]
    held = [Problem("h1", "Mia has 2 + 2 ?", "4")]
    store = TraceStore(tmp_path / "e.db")
    out = evolve(store, "ev", specs, problems, cfg, tmp_path / "out", make_pool=make_pool, held_out=held,
                 held_out_max_tokens=3)
    assert set(out.base_held_out) == {"tiny-a", "tiny-b"} and set(out.base_held_out.values()) <= {0.0, 1.0}
    [it] = out.iterations
    trained = [m for m in it.members if m.trained]
    assert trained and all(m.held_out_accuracy in (0.0, 1.0) for m in trained)
    assert {c["kind"] for c in tables.checkpoints(store, "ev")} == {"sft"}
    summary = json.loads(next(store.db.query("select summary from runs where run_id = 'ev'"))["summary"])
    assert summary["base_held_out"] == out.base_held_out
    assert (tmp_path / "out" / "held_out" / "base-tiny-a.jsonl").is_file()
    with pytest.raises(ValueError, match="set data 'own'"):
        EvolveConfig(algorithm="sft")


def test_cli_evolve_refuses_sft_on_duel_preferences_in_one_line(tmp_path):
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    out = agora("evolve", "--instructions", instructions, "--algo", "sft", "--db", tmp_path / "t.db",
                "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.startswith("error:")] == [
        "error: --algo sft --data duels: SFT trains on each member's own right answers; use --algo sft --data own, or "
        "--algo dpo / --algo grpo with --data duels"]


def test_a_bench_runs_samples_are_counted_under_its_task(tmp_path):
    d = sqlite_utils.Database(tmp_path / "b.db")
    d["runs"].insert({"run_id": "ref:arc:candidates", "protocol": "candidates",
                      "dataset": json.dumps({"bench": "ref", "format": "mc"})}, pk="run_id")
    d["questions"].insert(question("ref:arc:candidates", "q1", 0, "Which? A) x B) y", "A", kind="mc", source="mc"),
                          pk=("run_id", "question_id"))
    d["model_calls"].insert(call("c1", "ref:arc:candidates", "q1", "The answer is A.", 4, "A", "marker"), pk="call_id")
    [sample], _ = own_samples(tmp_path / "b.db", VerifiedConfig(model="m"))
    assert (sample.task, sample.correct) == ("arc", True)


def test_duel_pair_options_with_own_pairs_are_refused_in_one_line(db, tmp_path):
    out = agora("train", "dpo", "--pairs", "own", "--align", "--min-margin", 1, "--db", db, "--model", "m",
                "--out", tmp_path / "o", "--data-only")
    assert out.exit_code == 2
    assert [line for line in out.output.splitlines() if line.startswith("error:")] == [
        "error: --align, --min-margin: duel-pair options; --pairs own reads the member's own samples (choose them "
        "with --source-run)"]
    out = agora("train", "dpo", "--source-run", "x", "--db", db, "--model", "m", "--out", tmp_path / "o", "--data-only")
    assert out.exit_code == 2 and "--source-run chooses the runs of --pairs own" in out.output
    out = agora("train", "dpo", "--pairs", "mine", "--db", db, "--model", "m", "--out", tmp_path / "o")
    assert out.exit_code == 2 and "--pairs 'mine' is not one of duel, own" in out.output
    assert not (tmp_path / "o").exists()


def test_rows_pass_trls_format_checks(db, tmp_path):
    data_utils = pytest.importorskip("trl.data_utils")
    datasets = pytest.importorskip("datasets")
    from agora.training.aggregator import AggregatorDataConfig, aggregator_rows, candidate_sets
    from agora.training.datasets import export_jsonl
    from agora.training.own_samples import scored_samples

    samples, _ = own_samples(db, CFG)
    sft = export_jsonl(sft_rows(samples, CFG), tmp_path / "sft.jsonl")
    dpo = export_jsonl(dpo_rows(own_pairs(samples, CFG)), tmp_path / "dpo.jsonl")
    everyone, _ = scored_samples(db)
    agg = aggregator_rows(candidate_sets(everyone, AggregatorDataConfig(k=3, easy_per_hard=5)))
    assert agg
    for path in (sft, dpo, export_jsonl(agg, tmp_path / "agg.jsonl")):
        for example in datasets.load_dataset("json", data_files=str(path), split="train"):
            assert data_utils.is_conversational(example)
            assert data_utils.maybe_extract_prompt(example) == example


@pytest.mark.parametrize("command, message", [
    (("sft", "--model", "m", "--source-run", "nosuch"),
     "error: --source-run 'nosuch': no such run in {db} (its runs: b:gsm8k:candidates, align-1)"),
    (("dpo", "--pairs", "own", "--model", "m", "--source-run", "nosuch"),
     "error: --source-run 'nosuch': no such run in {db} (its runs: b:gsm8k:candidates, align-1)"),
    (("sft", "--model", "nosuch"),
     "error: --model 'nosuch': no recorded call of it in {db} (members recorded: {members})"),
    (("dpo", "--pairs", "own", "--model", "nosuch"),
     "error: --model 'nosuch': no recorded call of it in {db} (members recorded: {members})"),
])
def test_an_unknown_source_run_or_member_is_refused_in_one_line_naming_the_known_ones(db, tmp_path, command, message):
    members = ", ".join(m for (m,) in sqlite_utils.Database(db).execute(
        "select distinct model from model_calls order by model"))
    out = agora("train", *command, "--data-only", "--db", db, "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.strip()] == [message.format(db=db, members=members)]
    assert not (tmp_path / "o").exists()


def test_own_pairs_from_a_missing_db_name_the_commands_that_record_them(tmp_path):
    out = agora("train", "dpo", "--pairs", "own", "--model", "m", "--db", tmp_path / "none.db", "--out", tmp_path / "o")
    assert out.exit_code == 2
    assert "run `agora run` or `agora bench` first" in out.output and "agora duel" not in out.output


@pytest.mark.parametrize("flags, message", [
    (("--model", "nosuch"), "error: --model 'nosuch': in no preference pair of {db} (members in pairs: a, b)"),
    (("--model", "a", "--duel-run", "nosuch"),
     "error: --duel-run 'nosuch': no preference pair of such a run in {db} (runs with pairs: duel-1)"),
])
def test_duel_pairs_of_an_unknown_member_or_run_are_refused_in_one_line(tmp_path, duel_pairs_db, flags, message):
    db = duel_pairs_db
    out = agora("train", "dpo", *flags, "--data-only", "--db", db, "--out", tmp_path / "o")
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.strip()] == [message.format(db=db)]
    ok = agora("train", "dpo", "--model", "a", "--data-only", "--db", db, "--out", tmp_path / "k", "--validation", 0)
    assert ok.exit_code == 0, ok.output
    assert len(jsonl(tmp_path / "k" / "dataset" / "train.jsonl")) == 1
