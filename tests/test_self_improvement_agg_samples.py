"""The self-improvement benchmark's aggregator arm fed by samples runs (``--samples-db``,
``--samples-runs``, ``--agg-eval-runs``) instead of ALIGN phases: the training candidate sets, the
held-out candidate sets and their majority votes, the pairing in the report, and the refusals, on a
scripted samples database checked by hand. No model is loaded: the greedy evaluation and GRPO are
replaced by stand-ins that record what they were given."""

import importlib.util
import json
from pathlib import Path

import pytest

from agora.tasks import Problem
from agora.traces.store import TraceStore
from agora.training.phases import PhaseBook

PROMPT = [{"role": "system", "content": "Solve the math problem."}, {"role": "user", "content": "Q"}]
#: Training questions (the samples run on GSM8K train) and held-out ones (the eval run on test).
TRAIN = [("train-1", "Cat has 1 + 1 ?", "2"), ("train-2", "Dan has 3 + 3 ?", "6"), ("train-3", "Eve has 2 + 2 ?", "4")]
TEST = [("test-1", "Ann has 2 + 3 ?", "5"), ("test-2", "Ben has 4 + 4 ?", "8"), ("test-3", "Cy has 1 + 0 ?", "1")]


def _script():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "self_improvement.py"
    spec = importlib.util.spec_from_file_location("_self_improvement_agg", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(store, run_id, questions, answers, model):
    """One samples run: ``questions`` (id, text, gold) and, per question id, the answers the model gave
    (each sample ``The answer is A.``; a ``(model, answer)`` tuple for another model's sample)."""
    store.db["runs"].insert({"run_id": run_id, "protocol": "align", "status": "finished"})
    store.db["questions"].insert_all([{"run_id": run_id, "question_id": q, "idx": i, "kind": "math", "question": text,
                                       "gold": gold, "source": "gsm8k"} for i, (q, text, gold) in enumerate(questions)])
    calls = []
    for q, said in answers.items():
        for i, a in enumerate(said):
            who, a = a if isinstance(a, tuple) else (model, a)
            calls.append({"call_id": f"{run_id}-{q}-{i}", "run_id": run_id, "question_id": q, "protocol": "align",
                          "node": "agent_sample", "role": "agent", "agent": 0, "model": who,
                          "messages": json.dumps(PROMPT), "completion": f"Adding. The answer is {a}.",
                          "finish_reason": "stop", "error": None, "created_at": f"2026-12-06T00:00:0{i}"})
    store.db["model_calls"].insert_all(calls)


@pytest.fixture
def setup(tmp_path):
    si = _script()
    target = si.TARGET
    db = tmp_path / "samples.db"
    store = TraceStore(db)
    # train-1: majority 3 (wrong) with a right sample: hard; train-2: majority 6 (right): easy;
    # train-3: 3 samples only (a failed call): no set of k = 4. The peer's sample and the held-out
    # question test-1 recorded in the training run are left out.
    _run(store, "s:samples", TRAIN + [TEST[0]], {
        "train-1": ["2", "3", "3", "3", ("qwen2.5-coder-1.5b", "2")], "train-2": ["6", "6", "6", "1"],
        "train-3": ["4", "5", "4"], "test-1": ["5", "5", "5", "5"]}, target)
    # test-1: 5, 6, 6, 5: a tie, the first seen (5) wins: right. test-2: 7, 7, 8, 9: 7 wrong, 8 right among
    # them. test-3 is sampled but not held out (--eval-questions 2): unused.
    _run(store, "s:eval", TEST, {"test-1": ["5", "6", "6", "5"], "test-2": ["7", "7", "8", "9"],
                                 "test-3": ["1", "1", "1", "1"]}, target)
    _run(store, "s:leak", [TRAIN[1]], {"train-2": ["6", "6", "6", "6"]}, target)  # a training question
    train_file, test_file = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train_file.write_text("".join(json.dumps({"question": t, "answer": f"#### {g}"}) + "\n" for _, t, g in TRAIN))
    test_file.write_text("".join(json.dumps({"question": t, "answer": f"#### {g}"}) + "\n" for _, t, g in TEST))
    argv = ["--run-id", "agg", "--out", str(tmp_path / "runs"), "--train-data", str(train_file), "--eval-data",
            str(test_file), "--train-questions", "3", "--eval-questions", "2", "--samples-db", str(db),
            "--samples-runs", "s:samples", "--agg-eval-runs", "s:eval", "--threads", "1"]
    held_out = [Problem(q, text, gold) for q, text, gold in TEST[:2]]
    return si, argv, held_out, store


def test_training_sets_are_the_targets_own_samples_k_from_the_data(setup):
    si, argv, held_out, _ = setup
    args = si.parse_args(argv)
    samples, runs = si.agg_training_samples(args, held_out)
    assert runs == ("s:samples",)
    # the target's 4 + 4 + 3 samples; the peer's and the held-out question's are not read
    assert [s.question_id for s in samples] == ["train-1"] * 4 + ["train-2"] * 4 + ["train-3"] * 3
    assert si.samples_per_question(samples) == 4
    assert si.samples_per_question(samples[:7]) == 4 and si.samples_per_question(samples[:5]) == 4  # 4, 1: 4
    assert si.samples_per_question(samples[:6]) == 4                                               # 4, 2: 4
    assert si.samples_per_question([]) == 0
    from agora.training.aggregator import candidate_sets

    sets = candidate_sets(samples, si.agg_config(args, 4))
    assert [(s["question_id"], s["difficulty"], s["majority"], s["any_correct"]) for s in sets] == [
        ("train-1", "hard", "3", True), ("train-2", "easy", "6", True)]
    # without --samples-runs: every run of the database but the held-out candidates' (the leak run is read)
    args = si.parse_args([a for a in argv if a not in ("--samples-runs", "s:samples")])
    _, runs = si.agg_training_samples(args, held_out)
    assert runs == ("s:samples", "s:leak")


def test_held_out_candidate_sets_and_their_majority_votes(setup):
    si, argv, held_out, _ = setup
    sets = si.agg_eval_sets(si.parse_args(argv), held_out)
    assert [e["problem"].id for e in sets] == ["test-1", "test-2"]
    assert [[c.answer for c in e["candidates"]] for e in sets] == [["5", "6", "6", "5"], ["7", "7", "8", "9"]]
    assert [(e["majority"], e["majority_correct"], e["any_correct"]) for e in sets] == [("5", True, True),
                                                                                      ("7", False, True)]


def test_the_eval_run_is_refused_when_missing_overlapping_or_short(setup, tmp_path):
    si, argv, held_out, _ = setup

    def with_eval(run, *extra):
        out = list(argv)
        out[out.index("--agg-eval-runs") + 1] = run
        return si.parse_args(out + list(extra))

    with pytest.raises(ValueError, match=r"samples.db: no run s:missing \(runs there: s:samples, s:eval, s:leak\)"):
        si.agg_eval_sets(with_eval("s:missing"), held_out)
    with pytest.raises(ValueError, match="run s:leak shares 1 question\\(s\\) with the training samples \\(first: "
                                         "train-2\\)"):
        si.agg_eval_sets(with_eval("s:leak", "--samples-runs", "s:samples"), held_out)
    with pytest.raises(ValueError, match="1 of 2 held-out questions have no sample of qwen2.5-coder-0.5b in s:eval "
                                         "\\(first: z\\)"):
        si.agg_eval_sets(with_eval("s:eval"), [held_out[0], Problem("z", "Zed ?", "1")])
    with pytest.raises(SystemExit):  # an eval run that is also training data: refused when parsed
        with_eval("s:samples")
    with pytest.raises(SystemExit):  # the eval runs live in --samples-db
        si.parse_args([a for a in argv if a not in ("--samples-db", str(tmp_path / "samples.db"))])
    # the whole script refuses up front, before any phase, in one line
    with pytest.raises(SystemExit, match="^--agg-eval-runs: .*no run s:missing"):
        si.main(argv[:argv.index("--agg-eval-runs") + 1] + ["s:missing", "--phases", "train,eval", "--arms", "agg"])
    assert not (tmp_path / "runs" / "agg" / "phases.json").exists() or "train:agg" not in (
        tmp_path / "runs" / "agg" / "phases.json").read_text()


def test_train_phase_feeds_grpo_the_own_sample_sets_without_align_traces(setup, monkeypatch):
    si, argv, held_out, store = setup
    import agora.training.pipeline as pipeline

    seen = {}

    class Stop(Exception):
        pass

    def grpo_member(store, run_id, spec, rows, out, settings, rewards, source=None):
        seen.update(run_id=run_id, spec=spec.name, rows=rows, source=source, g=settings.num_generations)
        raise Stop

    monkeypatch.setattr(pipeline, "grpo_member", grpo_member)
    args = si.parse_args(argv)
    book = PhaseBook(Path(args.out) / "p.json", {})
    with pytest.raises(Stop):
        si.train_phase(args, book, TraceStore(Path(args.out) / "traces.db"), [], "agg", held_out)
    assert seen["run_id"] == "agg:train:agg" and seen["spec"] == si.TARGET
    assert [(r["question_id"], r["difficulty"]) for r in seen["rows"]] == [("train-1", "hard"), ("train-2", "easy")]
    shown = seen["rows"][0]["prompt"][-1]["content"]
    assert shown.count("The answer is 3.") == 3 and shown.count("The answer is 2.") == 1  # all 4 of train-1's
    assert seen["source"] == {"aggregate": 4, "sets": 2, "prompts": "all", "samples_db": str(args.samples_db),
                              "runs": ["s:samples"], "model": si.TARGET}
    _run(store, "s:one", TRAIN[:2], {"train-1": ["2"], "train-2": ["6"]}, si.TARGET)  # one sample a question
    one = si.parse_args([a if a != "s:samples" else "s:one" for a in argv])
    with pytest.raises(ValueError, match="has 1 sample\\(s\\) a question in s:one; an aggregator needs at least 2"):
        si.train_phase(one, book, TraceStore(Path(args.out) / "traces.db"), [], "agg", held_out)


def test_grpo_prompts_solved_keeps_the_sets_holding_a_right_candidate(setup, monkeypatch):
    """--grpo-prompts solved on the aggregator: a set whose candidates are all wrong (every reward 0, no
    GRPO signal) is dropped; with the default, it is kept as a hard set."""
    si, argv, held_out, store = setup
    import agora.training.pipeline as pipeline

    _run(store, "s:none", [("train-9", "Dee has 4 + 5 ?", "9")], {"train-9": ["1", "1", "1", "2"]}, si.TARGET)
    seen = []

    class Stop(Exception):
        pass

    def grpo_member(store, run_id, spec, rows, out, settings, rewards, source=None):
        seen.append(([r["question_id"] for r in rows], source["prompts"]))
        raise Stop

    monkeypatch.setattr(pipeline, "grpo_member", grpo_member)
    base = [a if a != "s:samples" else "s:samples,s:none" for a in argv]
    for extra in ([], ["--grpo-prompts", "solved"]):
        args = si.parse_args(base + extra)
        with pytest.raises(Stop):
            si.train_phase(args, PhaseBook(Path(args.out) / "p.json", {}), TraceStore(Path(args.out) / "traces.db"),
                           [], "agg", held_out)
    assert seen == [(["train-1", "train-9", "train-2"], "all"), (["train-1", "train-2"], "solved")]


def test_main_runs_the_arm_without_align_phases_and_pairs_it_with_majority_vote(setup, monkeypatch, capsys):
    """Train (stand-in), then the aggregator and the untrained model as aggregator on the eval run's
    candidates (stand-in verdicts), paired per question with majority vote over the same candidates."""
    si, argv, _, _ = setup
    import agora.training.evaluation as evaluation

    verdicts = {("ADAPTER", "test-1"): 1, ("ADAPTER", "test-2"): 1, (None, "test-1"): 0, (None, "test-2"): 0}
    prompts = {}

    def greedy_outcomes(problems, base, adapter, path, **kw):
        prompts[Path(path).stem] = [p.question for p in problems]
        golds = {q: g for q, _, g in TEST}  # answers are read again from the text, against the question
        return [{"question_id": p.id, "correct": verdicts.get((adapter, p.id), 0),
                 "text": f"The answer is {golds[p.id] if verdicts.get((adapter, p.id), 0) else 0}.",
                 "completion_tokens": 1, "finish_reason": "stop"} for p in problems]

    monkeypatch.setattr(evaluation, "greedy_outcomes", greedy_outcomes)
    monkeypatch.setattr(si, "train_phase", lambda args, book, store, train, arm, held_out: {
        "arm": arm, "adapter": "ADAPTER", "pool_file": "x/pool.toml", "steps": 1, "rows": 2, "losses": [0.5],
        "train_cpu_s": 0.0, "constant_groups": None, "mean_reward": 0.5, "prompts": 2, "k": 4,
        "data": {"hard": 1, "easy": 1, "majority_correct": 1, "any_correct": 2}, "source": {"runs": ["s:samples"]}})
    si.main(argv + ["--phases", "train,eval", "--arms", "agg"])
    out = capsys.readouterr().out
    book = json.loads((Path(argv[argv.index("--out") + 1]) / "agg" / "phases.json").read_text())["phases"]
    assert not {"align-traces", "align-eval"} & set(book)
    agg, base = book["eval:agg"]["result"], book["eval:agg-base"]["result"]
    assert agg["question_ids"] == base["question_ids"] == ["test-1", "test-2"]
    assert (agg["correct"], agg["majority"], agg["any_correct"], base["correct"]) == ([1, 1], [1, 0], [1, 1], [0, 0])
    assert agg["candidates_per_question"] == 4.0 and agg["source"]["runs"] == ["s:eval"]
    assert prompts["agg"] == prompts["agg-base"] and prompts["agg"][1].count("The answer is 7.") == 2
    assert "base" not in prompts and "eval:base" not in book  # the arm alone pairs with majority vote only
    summary = json.loads((Path(argv[argv.index("--out") + 1]) / "agg" / "summary.json").read_text())["aggregator"]
    assert set(summary) == {"majority vote", "untrained aggregator", "untrained vs majority vote"}
    vote, untrained = summary["majority vote"], summary["untrained aggregator"]
    assert (vote["diff"], vote["gained"], vote["lost"]) == (0.5, 1, 0)          # [1, 0] → [1, 1]
    assert (untrained["diff"], untrained["gained"], untrained["lost"]) == (1.0, 2, 0)
    assert summary["untrained vs majority vote"]["diff"] == -0.5
    assert "ALIGN is not in this comparison" in out and "vs ALIGN" not in out
    assert "vs majority vote" in out and "50.0% [" in out


def test_the_sft_recipe_imitates_a_right_candidate_of_each_set_and_refuses_rows_over_max_length(setup, monkeypatch):
    """``--agg-recipe sft``: the same candidate sets, each with a right candidate made one SFT row
    (train-1's right sample, ``2``, as the target of its hard set; train-2's first right, ``6``); the
    source and the recipe are recorded; a row longer than ``--max-length`` is refused before training."""
    si, argv, held_out, store = setup
    import agora.training.pipeline as pipeline

    seen = {}

    class Stop(Exception):
        pass

    def sft_member(store, run_id, spec, rows, out, settings, source=None):
        seen.update(run_id=run_id, spec=spec.name, rows=rows, source=source, max_length=settings.max_length)
        raise Stop

    monkeypatch.setattr(pipeline, "sft_member", sft_member)
    monkeypatch.setattr(si, "row_tokens", lambda rows, base: [700, 900][:len(rows)])
    args = si.parse_args(argv + ["--agg-recipe", "sft", "--max-length", "1024"])
    book = PhaseBook(Path(args.out) / "p.json", {})
    with pytest.raises(Stop):
        si.train_phase(args, book, TraceStore(Path(args.out) / "traces.db"), [], "agg", held_out)
    assert seen["run_id"] == "agg:train:agg" and seen["spec"] == si.TARGET and seen["max_length"] == 1024
    assert [(r["question_id"], r["difficulty"], r["completion"][0]["content"]) for r in seen["rows"]] == [
        ("train-1", "hard", "Adding. The answer is 2."), ("train-2", "easy", "Adding. The answer is 6.")]
    assert [r["call_id"] for r in seen["rows"]] == ["s:samples-train-1-0", "s:samples-train-2-0"]
    assert seen["rows"][0]["prompt"][-1]["content"].count("The answer is 3.") == 3
    assert seen["source"] == {"aggregate": 4, "sets": 2, "recipe": "sft", "samples_db": str(args.samples_db),
                              "runs": ["s:samples"], "model": si.TARGET}
    short = si.parse_args(argv + ["--agg-recipe", "sft", "--max-length", "800"])
    with pytest.raises(ValueError, match=r"^1 of 2 aggregator rows are longer than --max-length 800 tokens "
                                         r"\(longest 900\); raise --max-length$"):
        si.train_phase(short, book, TraceStore(Path(args.out) / "traces.db"), [], "agg", held_out)
    with pytest.raises(SystemExit):
        si.parse_args(argv + ["--agg-recipe", "dpo"])


def test_an_aggregator_answering_with_a_candidate_word_for_word_is_read_against_the_question(setup, monkeypatch):
    """The aggregation prompt shows the candidates, so a reply that copies one of them is in the prompt;
    read against the prompt it was taken for an echo (no answer). It is read against the question."""
    si, argv, held_out, _ = setup
    import agora.training.evaluation as evaluation
    from agora.tasks import find_answer

    copied = "Ann has two apples and gets three more from Ben, so she has five in all. The answer is 5."
    shown = f"Ann has 2 + 3 ?\n\nResponses from several models:\n1. \"{copied}\""  # a candidate, copied
    assert find_answer(copied, "math", 4, question=shown).reason == "echo"
    assert find_answer(copied, "math", 4, question="Ann has 2 + 3 ?").answer == "5"

    def greedy_outcomes(problems, base, adapter, path, **kw):  # as read against the prompt: an echo
        return [{"question_id": p.id, "answer": None, "how": None, "correct": 0, "text": copied,
                 "completion_tokens": 6, "finish_reason": "stop"} for p in problems]

    monkeypatch.setattr(evaluation, "greedy_outcomes", greedy_outcomes)
    got = si.agg_samples_eval_phase(si.parse_args(argv), held_out, "agg", "ADAPTER")
    assert got["question_ids"] == ["test-1", "test-2"]
    assert got["correct"] == [1, 0]  # 5 is test-1's gold, not test-2's (8)


def test_a_finished_phase_redone_keeps_its_cost_and_is_computed_again(tmp_path):
    book = PhaseBook(tmp_path / "p.json", {"a": 1}, mutable=("redo",))
    assert book.run("eval:x", lambda: {"correct": [0]}) == {"correct": [0]}
    first = dict(book.phases["eval:x"])
    assert book.redo("eval:x") and not book.done("eval:x") and not book.redo("eval:x")
    again = PhaseBook(tmp_path / "p.json", {"a": 1, "redo": "eval:x"}, mutable=("redo",))  # a rerun reads it
    assert again.attempts["eval:x"]["attempts"] == 1 and again.attempts["eval:x"]["cpu_s"] == first["cpu_s"]
    assert again.run("eval:x", lambda: {"correct": [1]}) == {"correct": [1]}
    entry = again.phases["eval:x"]
    assert entry["attempts"] == 2 and entry["cpu_s"] >= first["cpu_s"] and entry["wall_s"] >= first["wall_s"]
    assert again.run("eval:x", lambda: {"correct": [2]}) == {"correct": [1]}  # done: not computed a third time
