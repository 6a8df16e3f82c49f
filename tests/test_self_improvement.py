"""Issue 19's building blocks: DPO pairs from ALIGN traces (hand-made trace rows), the paired-difference
and proportion CIs against hand-computed values, the phase book's resumability, and one DPO step plus a
resumable greedy evaluation on the tiny local LM."""

import json
import math
from pathlib import Path

import pytest

from agora.tasks import Problem
from agora.traces.store import TraceStore
from agora.training.align_pairs import AlignPairConfig, align_target_pairs, candidate_stats
from agora.training.datasets import dpo_rows
from agora.agents.stats import mcnemar_exact as mcnemar_exact_p, mean_ci, proportion_ci
from agora.training.evaluation import paired_difference
from agora.training.phases import PhaseBook, PhaseBookError, machine

SMALL, BIG = "qwen-0.5b", "qwen-1.5b"
PROMPT = [{"role": "system", "content": "Solve the math problem ."}, {"role": "user", "content": "Tom has 3 + 4 ?"}]


def _calls(run_id, qid, rows):
    out = []
    for i, (agent, model, text, finish, error) in enumerate(rows):
        out.append({"call_id": f"{qid}-c{i}", "run_id": run_id, "question_id": qid, "protocol": "align",
                    "node": "agent_sample", "role": "agent", "agent": agent, "model": model,
                    "messages": json.dumps(PROMPT), "completion": text, "finish_reason": finish, "error": error,
                    "created_at": f"2026-12-01T00:00:0{i}"})
    return out


@pytest.fixture
def traces(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    store.db["runs"].insert({"run_id": "a", "protocol": "align", "status": "finished"})
    store.db["runs"].insert({"run_id": "d", "protocol": "sparta", "status": "finished"})
    questions = [("q1", "7"), ("q2", "5"), ("q3", None), ("q4", "2"), ("q5", "9")]
    store.db["questions"].insert_all([{"run_id": "a", "question_id": q, "idx": i, "kind": "math",
                                       "question": f"question {q}", "gold": g, "finished_at": "t"}
                                      for i, (q, g) in enumerate(questions)])
    calls = []
    calls += _calls("a", "q1", [
        (0, SMALL, "3 + 4 = 7. The answer is 7.", "stop", None),     # own, correct, explicit: chosen first
        (0, SMALL, "3 + 4 = 8. The answer is 8.", "stop", None),     # own, wrong: rejected
        (0, SMALL, "3 + 4 makes 7", "stop", None),                   # correct but guessed (fallback): not chosen
        (0, SMALL, "3 + 4 = 8. The answer is 8.", "stop", None),     # duplicate text: one rejected
        (1, BIG, "Add them: 3 + 4 = 7. The answer is 7.", "stop", None),  # peer, correct: chosen second
        (1, BIG, "The answer is 7", "length", None),                 # capped: not chosen
        (1, BIG, "The answer is 9.", "stop", None),                  # peer, wrong: rejected only with "any"
        (1, BIG, "The answer is 7.", "stop", "HTTP 500"),            # failed call: ignored
    ])
    calls += _calls("a", "q2", [(0, SMALL, "The answer is 4.", "stop", None), (1, BIG, "The answer is 6.", "stop", None)])
    calls += _calls("a", "q3", [(0, SMALL, "The answer is 1.", "stop", None), (1, BIG, "The answer is 2.", "stop", None)])
    calls += _calls("a", "q4", [(0, SMALL, "The answer is 2.", "stop", None), (1, BIG, "The answer is 2.", "stop", None)])
    # q5: the target got it wrong, only the peer right: the peer's answer is the chosen side
    calls += _calls("a", "q5", [(0, SMALL, "The answer is 8.", "stop", None), (1, BIG, "4 + 5 = 9. The answer is 9.", "stop", None)])
    store.db["model_calls"].insert_all(calls)
    return store


def test_align_pairs_from_trace_rows(traces):
    pairs = align_target_pairs(traces, AlignPairConfig(target=SMALL), ["a"])
    got = [(p["duel_id"], p["chosen"], p["rejected"], p["chosen_model"], p["rejected_model"]) for p in pairs]
    assert got == [
        ("q1", "3 + 4 = 7. The answer is 7.", "3 + 4 = 8. The answer is 8.", SMALL, SMALL),
        ("q1", "Add them: 3 + 4 = 7. The answer is 7.", "3 + 4 = 8. The answer is 8.", BIG, SMALL),
        ("q5", "4 + 5 = 9. The answer is 9.", "The answer is 8.", BIG, SMALL),
    ]
    assert all(p["prompt_messages"] == PROMPT and p["margin"] == 1.0 and p["source"] == "align" for p in pairs)
    rows = dpo_rows(pairs)
    assert len(rows) == 3 and rows[0]["prompt"] == PROMPT
    assert rows[2]["chosen"] == [{"role": "assistant", "content": "4 + 5 = 9. The answer is 9."}]


def test_align_pairs_options(traces):
    one = align_target_pairs(traces, AlignPairConfig(target=SMALL, max_pairs_per_question=1), ["a"])
    assert [(p["duel_id"], p["chosen_model"]) for p in one] == [("q1", SMALL), ("q5", BIG)]
    own_only = align_target_pairs(traces, AlignPairConfig(target=SMALL, peers_chosen=False), ["a"])
    assert [(p["duel_id"], p["chosen_model"]) for p in own_only] == [("q1", SMALL)]
    anyone = align_target_pairs(traces, AlignPairConfig(target=SMALL, rejected_from="any", max_pairs_per_question=9), ["a"])
    q1 = [(p["chosen_model"], p["rejected"]) for p in anyone if p["duel_id"] == "q1"]
    assert q1 == [(SMALL, "3 + 4 = 8. The answer is 8."), (SMALL, "The answer is 9."),
                  (BIG, "3 + 4 = 8. The answer is 8."), (BIG, "The answer is 9.")]
    # the peer as target: its wrong q1 answer against the right ones, the 0.5B's first only after its own
    big = align_target_pairs(traces, AlignPairConfig(target=BIG), ["a"])
    assert [(p["duel_id"], p["chosen_model"], p["rejected"]) for p in big] == [
        ("q1", BIG, "The answer is 9."), ("q1", SMALL, "The answer is 9.")]
    assert align_target_pairs(traces, AlignPairConfig(target=SMALL), ["other"]) == []
    with pytest.raises(ValueError, match="rejected_from"):
        AlignPairConfig(target=SMALL, rejected_from="nobody")


def test_solved_questions(traces):
    from agora.training.align_pairs import solved_questions

    assert solved_questions(traces, ["a"]) == {"q1", "q4", "q5"}
    assert solved_questions(traces, ["a"], models=[SMALL]) == {"q1", "q4"}


def test_align_pairs_take_one_requests_samples_in_their_order_not_their_random_call_ids(tmp_path):
    """One request's n samples share their ``created_at``; their call ids are random (uuid4). The
    candidates keep the samples' order (``sample_index``), so two identical seeded runs give the same
    pairs: with the call ids sorting the other way round, the pair taken was the second sample's."""
    store = TraceStore(tmp_path / "t.db")
    store.db["runs"].insert({"run_id": "a", "protocol": "align", "status": "finished"})
    store.db["questions"].insert({"run_id": "a", "question_id": "q1", "idx": 0, "kind": "math",
                                  "question": "question q1", "gold": "7", "finished_at": "t"})
    texts = ["3 + 4 = 7. The answer is 7.", "4 + 3 = 7. The answer is 7.", "The answer is 8.", "The answer is 9."]
    store.db["model_calls"].insert_all([
        {"call_id": f"{'zyxw'[i]}{i}", "run_id": "a", "question_id": "q1", "protocol": "align", "node": "agent_sample",
         "role": "agent", "agent": 0, "model": SMALL, "messages": json.dumps(PROMPT), "completion": text,
         "finish_reason": "stop", "error": None, "created_at": "2026-12-01T00:00:00.000", "sample_index": i,
         "request_id": "z0"} for i, text in enumerate(texts)])
    [pair] = align_target_pairs(store, AlignPairConfig(target=SMALL, max_pairs_per_question=1), ["a"])
    assert (pair["chosen"], pair["rejected"]) == (texts[0], texts[2])


def test_candidate_stats(traces):
    stats = candidate_stats(traces, ["a"])
    # gold questions q1, q2, q4, q5; q1 has 4 own candidates (2 correct), q4 1 correct, q2 and q5 wrong
    assert stats[SMALL]["candidates"] == 7 and stats[SMALL]["correct_share"] == pytest.approx(3 / 7)
    assert stats[SMALL]["any_correct_share"] == pytest.approx(2 / 4)
    assert stats[BIG]["capped_share"] == pytest.approx(1 / 6)


def test_paired_difference_arithmetic():
    before, after = [1, 0, 0, 1, 0], [1, 1, 0, 1, 1]
    d = paired_difference(before, after, resamples=2000)
    sd = math.sqrt((3 * 0.4 ** 2 + 2 * 0.6 ** 2) / 4)          # differences 0, 1, 0, 0, 1
    half = 1.959964 * sd / math.sqrt(5)
    assert d["n"] == 5 and d["before"] == pytest.approx(0.4) and d["after"] == pytest.approx(0.8)
    assert d["diff"] == pytest.approx(0.4)
    assert d["wald_low"] == pytest.approx(0.4 - half, abs=1e-5) and d["wald_high"] == pytest.approx(0.4 + half, abs=1e-5)
    assert (d["gained"], d["lost"]) == (2, 0) and d["mcnemar_p"] == pytest.approx(0.5)
    assert 0.0 <= d["boot_low"] <= 0.4 <= d["boot_high"] <= 0.8
    same = paired_difference([1, 0, 1], [1, 0, 1])
    assert same["diff"] == 0 and same["wald_low"] == same["wald_high"] == same["boot_low"] == same["boot_high"] == 0
    with pytest.raises(ValueError, match="same questions"):
        paired_difference([1, 0], [1])


def test_proportion_and_mean_intervals():
    share, lo, hi = proportion_ci(3, 10)                        # Wilson 95 %: [0.1078, 0.6032]
    assert share == 0.3 and lo == pytest.approx(0.1078, abs=1e-4) and hi == pytest.approx(0.6032, abs=1e-4)
    assert proportion_ci(0, 4)[1] == 0.0 and math.isnan(proportion_ci(0, 0)[0])
    mean, lo, hi = mean_ci([2.0, 4.0, 6.0])                      # s = 2, half = 1.96 · 2 / √3
    assert mean == 4.0 and hi - mean == pytest.approx(1.959964 * 2 / math.sqrt(3), abs=1e-5)
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    assert mcnemar_exact_p(1, 4) == pytest.approx(2 * (1 + 5) / 32) and mcnemar_exact_p(0, 0) == 1.0
    from agora.agents.stats import proportion_difference

    d, lo, hi = proportion_difference(56, 70, 48, 80)            # Newcombe (1998), example (a), method 10: [0.0524, 0.3339]
    assert d == pytest.approx(0.2) and lo == pytest.approx(0.0524, abs=1e-3) and hi == pytest.approx(0.3339, abs=1e-3)


def test_phase_book_resumes_and_refuses_other_settings(tmp_path):
    path = tmp_path / "run" / "phases.json"
    calls = []

    def phase(value):
        def fn():
            calls.append(value)
            return {"value": value}
        return fn

    book = PhaseBook(path, {"steps": 4, "phases": "a,b"}, mutable=("phases",))
    assert book.run("a", phase(1)) == {"value": 1}
    with pytest.raises(KeyboardInterrupt):
        book.run("b", lambda: (calls.append("b"), (_ for _ in ()).throw(KeyboardInterrupt()))[1])
    assert not book.done("b") and book.attempts["b"]["attempts"] == 1

    again = PhaseBook(path, {"steps": 4, "phases": "b"}, mutable=("phases",))  # a mutable key changed
    assert again.run("a", phase(2)) == {"value": 1}               # finished: not redone
    assert again.run("b", phase(3)) == {"value": 3}               # unfinished: redone
    assert calls == [1, "b", 3]
    costs = again.costs()
    assert list(costs) == ["a", "b"] and all(c["cpu_s"] >= 0 and c["wall_s"] >= 0 for c in costs.values())
    assert again.phases["b"]["attempts"] == 2 and "b" not in again.attempts
    assert json.loads(path.read_text())["phases"]["a"]["result"] == {"value": 1}
    with pytest.raises(PhaseBookError, match="steps"):
        PhaseBook(path, {"steps": 8, "phases": "b"}, mutable=("phases",))


def test_phase_book_record_outlives_the_run_folder(tmp_path):
    """A second copy (``record=``, e.g. in the checkout) brings a run back on a machine that lost its folder."""
    path, record = tmp_path / "runs" / "phases.json", tmp_path / "checkout" / "phases.json"
    book = PhaseBook(path, {"steps": 4}, record=record)
    book.run("a", lambda: {"value": 1})
    with pytest.raises(KeyboardInterrupt):
        book.run("b", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert json.loads(record.read_text()) == json.loads(path.read_text())

    path.unlink()                                                  # a new machine: the run folder is gone
    again = PhaseBook(path, {"steps": 4}, record=record)
    assert again.run("a", lambda: {"value": 2}) == {"value": 1}     # finished elsewhere: not redone
    assert again.attempts["b"]["attempts"] == 1                     # the lost attempt's cost still counts
    assert path.is_file() and json.loads(path.read_text())["phases"]["a"]["result"] == {"value": 1}
    with pytest.raises(PhaseBookError, match="steps"):              # the copy is held to the same settings
        path.unlink()
        PhaseBook(path, {"steps": 8}, record=record)


def test_each_phase_records_the_kind_of_machine_it_ran_on(tmp_path):
    """Greedy llama.cpp decoding reproduces only between machines of one kind (AVX2 vs AVX-512 sum
    in other orders), so a phase's record says which kind it ran on."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n\n"
                       "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert machine(cpuinfo) | {"cores": 0} == {"cpu": "AMD EPYC", "isa": "avx2", "cores": 0}
    cpuinfo.write_text("model name\t: Intel Xeon\nflags\t\t: avx avx2 avx512f avx512bw\n")
    assert machine(cpuinfo)["isa"] == "avx512"
    cpuinfo.write_text("model name\t: Intel Xeon\nflags\t\t: avx2 avx512f amx_tile amx_bf16\n")
    assert machine(cpuinfo)["isa"] == "amx"
    assert machine(tmp_path / "missing")["cores"] >= 1                # no cpuinfo: still an answer
    book = PhaseBook(tmp_path / "phases.json", {"steps": 4})
    book.run("a", lambda: 1)
    assert book.phases["a"]["machine"] == machine()


def test_a_read_only_book_writes_nothing(tmp_path):
    """``--report`` while the run goes on: the reader must not put an older book back over a phase
    the running process has just finished."""
    path, record = tmp_path / "runs" / "phases.json", tmp_path / "checkout" / "phases.json"
    running = PhaseBook(path, {"steps": 4, "phases": "b"}, mutable=["phases"], record=record)
    running.run("a", lambda: {"value": 1})
    reader = PhaseBook(path, {"steps": 4, "phases": "all"}, mutable=["phases"], record=record, read_only=True)
    running.run("b", lambda: {"value": 2})                          # finished after the reader opened
    assert reader.run("a", lambda: {"value": 9}) == {"value": 1}    # what was finished reads as before
    with pytest.raises(PhaseBookError, match="read-only"):
        reader.run("c", lambda: {"value": 3})
    reader._write()
    for copy in (path, record):
        data = json.loads(copy.read_text())
        assert set(data["phases"]) == {"a", "b"} and data["settings"]["phases"] == "b"
    assert not PhaseBook(tmp_path / "none.json", {"steps": 4}, read_only=True).path.exists()


def test_dpo_step_on_align_pairs_then_resumable_evaluation(traces, tmp_path):
    pytest.importorskip("trl")
    from tiny_lm import build_tiny_lm

    from agora.training.config import DPOSettings, LoraSettings
    from agora.training.evaluation import greedy_outcomes
    from agora.training.trainers import train_dpo

    tiny = str(build_tiny_lm(tmp_path / "tiny"))
    rows = dpo_rows(align_target_pairs(traces, AlignPairConfig(target=SMALL), ["a"]))
    settings = DPOSettings(max_steps=1, batch_size=2, learning_rate=1e-2, warmup_ratio=0.0, threads=1,
                           max_length=64, lora=LoraSettings(r=2, alpha=4, dropout=0.0, target_modules=("q_proj", "v_proj")))
    result = train_dpo(tiny, rows, tmp_path / "arm", settings)
    assert result.steps == 1 and (result.adapter_dir / "adapter_config.json").is_file()

    problems = [Problem("p1", "Tom has 3 + 4 ?", "7"), Problem("p2", "Mia has 2 + 2 ?", "4")]
    out = tmp_path / "eval" / "arm.jsonl"
    first = greedy_outcomes(problems[:1], tiny, str(result.adapter_dir), out, max_tokens=4, batch_size=1, threads=1)
    assert [r["question_id"] for r in first] == ["p1"] and first[0]["correct"] in (0, 1)
    out.write_text(out.read_text() + '{"question_id": "p2", "cut')  # a line cut by a kill is redone
    both = greedy_outcomes(problems, tiny, str(result.adapter_dir), out, max_tokens=4, batch_size=2, threads=1)
    assert [r["question_id"] for r in both] == ["p1", "p2"] and both[0] == first[0]


def test_trained_entry_loads_from_a_relative_out_folder(tmp_path, monkeypatch):
    """``--out runs/x`` (relative): the pool file written in runs/x must still find its adapter."""
    from pathlib import Path

    from agora.models.pool import ModelSpec, load_pool
    from agora.training.pool_entries import trained_entry, write_pool_file
    from agora.training.trainers import TrainResult

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "x" / "adapter").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "adapter" / "adapter_config.json").write_text("{}")
    result = TrainResult(kind="dpo", adapter_dir=Path("runs/x/adapter"), base="builtin:smollm2", previous_adapter=None,
                         rows=1, steps=1, losses=[0.7])
    entry = trained_entry(ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2"), result)
    assert entry["adapter"] == str(tmp_path / "runs" / "x" / "adapter") and entry["path"] == "builtin:smollm2"
    spec = load_pool(write_pool_file([entry], Path("runs/x/pool.toml")))["m"].spec
    assert spec.adapter == str(tmp_path / "runs" / "x" / "adapter")


def _benchmark_script():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "self_improvement.py"
    spec = importlib.util.spec_from_file_location("_self_improvement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_leader_table_from_recorded_duels():
    """The leader's table needs only the duels' record (iteration, tie, margin, instruction), by hand."""
    si = _benchmark_script()

    def duel(it, margin, instruction="q1"):
        return {"iteration": it, "tie": margin is None, "margin": margin, "instruction_id": instruction}

    table = si.leader_table({
        "sparta": [duel(0, None), duel(0, None), duel(1, 2.0), duel(1, None, "q2")],
        "stackelberg": [duel(0, 1.0), duel(0, None), duel(1, 3.0), duel(1, 1.0)],
    })
    assert table["sparta"][0]["non_tie"] == 0 and table["sparta"][1]["gap"] == pytest.approx(1.0)
    assert table["sparta"][1]["instructions"] == 2
    assert table["stackelberg"][1]["share"] == 1.0 and table["stackelberg"][1]["gap"] == pytest.approx(2.0)
    active = table["leader_active"]                   # iterations ≥ 1: Stackelberg 2/2, Sparta 1/2
    assert active["stackelberg"] == (2, 2) and active["sparta"] == (1, 2)
    assert active["diff"] == pytest.approx(0.5)
    # gaps in iterations ≥ 1: Stackelberg [3, 1] (mean 2, s² 2), Sparta [2, 0] (mean 1, s² 2):
    # 2 − 1 = 1 ± 1.96·√(2/2 + 2/2)
    assert active["gap"] == {"stackelberg": pytest.approx(2.0), "sparta": pytest.approx(1.0)}
    assert active["gap_diff"] == pytest.approx(1.0)
    assert active["gap_high"] - active["gap_diff"] == pytest.approx(1.959964 * 2 ** 0.5, rel=1e-5)


def test_record_path_is_not_a_setting(tmp_path):
    """Where the book's copy is kept may change between machines: it is not part of the run's settings."""
    si = _benchmark_script()
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    files = ["--train-data", str(data), "--eval-data", str(data)]
    a = si.settings_of(si.parse_args(files + ["--record", "x/phases.json"]))
    b = si.settings_of(si.parse_args(files))
    assert a == b and "record" not in a and "out" not in a


def test_each_arm_is_paired_with_a_base_evaluation_from_its_kind_of_machine(tmp_path, monkeypatch):
    """An arm evaluated on AVX-512 pairs with the base evaluated on AVX-512 (``eval:base@avx512``),
    not with the AVX2 one recorded on an earlier machine; the report prints the machine effect."""
    si = _benchmark_script()
    here = {"cpu": "x", "isa": "avx512", "cores": 2}
    monkeypatch.setattr(si, "machine", lambda: here)
    book = PhaseBook(tmp_path / "phases.json", {"steps": 4})
    assert si.base_phase_here(book) == "eval:base"                 # nothing yet: the plain name
    book.phases["eval:base"] = {"result": {"correct": [1, 0, 0, 1]}, "wall_s": 1, "cpu_s": 1,
                                "machine": {"isa": "avx2"}}
    assert si.base_phase_here(book) == "eval:base@avx512"         # recorded on AVX2: again, here
    book.phases["eval:align-dpo"] = {"result": {"correct": [1, 1, 0, 1]}, "wall_s": 1, "cpu_s": 1,
                                     "machine": here}
    assert si.base_for(book, "align-dpo") == "eval:base"          # no base here yet: cross-machine
    book.phases["eval:base@avx512"] = {"result": {"correct": [1, 0, 1, 1]}, "wall_s": 1, "cpu_s": 1,
                                       "machine": here}
    assert si.base_for(book, "align-dpo") == "eval:base@avx512"
    monkeypatch.setattr(si, "machine", lambda: {"isa": "avx512"})
    assert si.base_phase_here(book) == "eval:base@avx512"         # done: the main loop skips it
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    args = si.parse_args(["--train-data", str(data), "--eval-data", str(data), "--out", str(tmp_path)])
    summary = si.report(args, book, TraceStore(tmp_path / "t.db"))
    arm = summary["eval"]["align-dpo"]
    assert arm["paired_with"] == "eval:base@avx512" and arm["same_machine"]
    assert arm["paired"]["gained"] == 1 and arm["paired"]["lost"] == 1   # [1,0,1,1] → [1,1,0,1]
    effect = summary["eval"]["machine_effect:base@avx512"]
    assert effect["gained"] == 1 and effect["lost"] == 0 and effect["diff"] == pytest.approx(0.25)


def test_report_on_a_machine_without_the_run_folder_writes_nothing(tmp_path, monkeypatch, capsys):
    """``--report`` from the committed record alone prints the figures and leaves no run folder
    (no empty traces.db, no summary.json) behind."""
    si = _benchmark_script()
    monkeypatch.setattr(si, "configure", lambda args: None)
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    argv = ["--train-data", str(data), "--eval-data", str(data), "--out", str(tmp_path / "runs"),
            "--record", str(tmp_path / "checkout" / "phases.json")]
    writer = PhaseBook(tmp_path / "elsewhere" / "phases.json", si.settings_of(si.parse_args(argv)),
                       mutable=si.MUTABLE, record=tmp_path / "checkout" / "phases.json")
    writer.run("eval:base", lambda: {"name": "base", "correct": [1, 0, 0, 1], "question_ids": list("abcd"),
                                     "completion_tokens": 10.0, "capped": 0.0})
    si.main(argv + ["--report"])
    out = capsys.readouterr().out + capsys.readouterr().err
    assert "50.0%" in out and "eval:base" in out                      # 2 of 4, and its cost line
    assert not (tmp_path / "runs").exists()


def test_own_arms_read_the_targets_verified_samples_held_out_questions_out(traces, tmp_path, monkeypatch):
    """The own arms' data (own-dpo, own-sft): the target's right and wrong ALIGN answers, hand-counted."""
    import argparse

    from agora.training.verified import own_pairs, sft_rows

    si = _benchmark_script()
    monkeypatch.setattr(si, "TARGET", SMALL)
    args = argparse.Namespace(run_id="si", samples_db=None, samples_runs="a", length_ratio=1.5, pairs_per_question=2,
                              sft_per_question=4)
    cfg, samples, skipped = si.own_data(args, traces, held_out=[Problem("x", "question q4", "2")])
    # q1: 4 own samples (one failed call of the peer's ignored), q2 and q5 one wrong each; q3 has no gold; q4 held out
    assert [(s.question_id, s.correct) for s in samples] == [
        ("q1", True), ("q1", False), ("q1", True), ("q1", False), ("q2", False), ("q5", False)]
    assert skipped["held_out"] == 1 and skipped["no_gold"] == 1
    assert [(p["chosen"], p["rejected"]) for p in own_pairs(samples, cfg)] == [
        ("3 + 4 = 7. The answer is 7.", "3 + 4 = 8. The answer is 8.")]
    assert [r["completion"][0]["content"] for r in sft_rows(samples, cfg)] == ["3 + 4 = 7. The answer is 7."]
    cfg, samples, _ = si.own_data(args, traces, held_out=[])
    assert [r["question_id"] for r in sft_rows(samples, cfg)] == ["q1", "q4"]


def test_distill_arm_reads_the_teachers_right_answers_to_train_the_target(traces, tmp_path, monkeypatch, capsys):
    """``distill-sft``: the rows are ``--teacher``'s (default: the peer's) right answers, never the
    target's; ``--teacher`` is refused without that arm and when it names no pool member."""
    import argparse

    from agora.training.verified import sft_rows

    si = _benchmark_script()
    monkeypatch.setattr(si, "TARGET", SMALL)
    monkeypatch.setattr(si, "PEER", BIG)
    args = argparse.Namespace(run_id="si", samples_db=None, samples_runs="a", length_ratio=1.5, pairs_per_question=2,
                              sft_per_question=4, teacher=None)
    assert (si.teacher_of(args, "distill-sft"), si.teacher_of(args, "own-sft")) == (BIG, SMALL)
    cfg, samples, _ = si.own_data(args, traces, held_out=[], arm="distill-sft")
    assert cfg.model == BIG and {s.model for s in samples} == {BIG}
    rows = sft_rows(samples, cfg)
    assert rows and all(r["model"] == BIG for r in rows)
    assert {r["call_id"] for r in rows} <= {s.call_id for s in samples if s.correct}
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    common = ["--train-data", str(data), "--eval-data", str(data)]
    assert si.parse_args(common + ["--arms", "distill-sft", "--teacher", "qwen2.5-coder-1.5b"]).teacher == \
        "qwen2.5-coder-1.5b"
    for argv, message in ((["--arms", "own-sft", "--teacher", "qwen2.5-coder-1.5b"],
                           "--teacher is an option of --arms distill-sft"),
                          (["--arms", "distill-sft", "--teacher", "gpt"], "--teacher 'gpt': not a member")):
        with pytest.raises(SystemExit):
            si.parse_args(common + argv)
        assert message in capsys.readouterr().err


def test_the_aggregator_arm_is_scored_on_the_held_out_candidates_beside_majority_and_align(tmp_path, monkeypatch,
                                                                                           capsys):
    """eval:agg-base on two held-out questions' recorded candidates (a tiny model as aggregator): its
    prompt shows every candidate, and majority vote and ALIGN are read from the same run's results."""
    pytest.importorskip("trl")
    import argparse

    from tiny_lm import build_tiny_lm

    si = _benchmark_script()
    monkeypatch.setattr(si, "BASE", str(build_tiny_lm(tmp_path / "tiny")))
    store = TraceStore(tmp_path / "t.db")
    store.db["runs"].insert({"run_id": "si:align-eval", "protocol": "align", "status": "finished"})
    held = [Problem("h1", "Tom has 3 + 4 ?", "7"), Problem("h2", "Mia has 2 + 2 ?", "4"), Problem("h3", "none", "1")]
    store.db["questions"].insert_all([{"run_id": "si:align-eval", "question_id": p.id, "idx": i, "kind": "math",
                                       "question": p.question, "gold": p.gold} for i, p in enumerate(held[:2])])
    store.db["model_calls"].insert_all(_calls("si:align-eval", "h1", [
        (0, SMALL, "The answer is 7 .", "stop", None), (1, BIG, "The answer is 8 .", "stop", None)])
        + _calls("si:align-eval", "h2", [(0, SMALL, "The answer is 5 .", "stop", None),
                                          (1, BIG, "The answer is 5 .", "stop", "HTTP 500")]))
    store.db["results"].insert_all([
        {"run_id": "si:align-eval", "question_id": q, "method": m, "correct": c}
        for q, m, c in (("h1", "align", 1), ("h1", "self_consistency", 0), ("h2", "align", 0),
                        ("h2", "self_consistency", 0))])
    args = argparse.Namespace(run_id="si", seed=0, out=tmp_path / "runs", max_tokens=3, eval_batch=2, threads=1,
                              eval_backend="transformers", align_samples=1)
    got = si.agg_eval_phase(args, store, held, "agg-base", None)
    assert (got["question_ids"], got["majority"], got["align"]) == (["h1", "h2"], [0, 0], [1, 0])
    assert got["candidates_per_question"] == 1.5 and set(got["correct"]) <= {0, 1}
    lines = [json.loads(x) for x in (tmp_path / "runs" / "si" / "eval" / "agg-base.jsonl").read_text().splitlines()]
    assert [r["question_id"] for r in lines] == ["h1", "h2"]

    class Book:
        def done(self, name):
            return name == "eval:agg"

        def result(self, name):
            return {**got, "correct": [1, 0]}

    report = si.aggregator_report(Book())
    assert (report["majority vote"]["diff"], report["ALIGN"]["diff"]) == (0.5, 0.0)
    assert "vs majority vote" in capsys.readouterr().out


def test_a_run_adopts_another_runs_base_evaluation_only_when_it_means_the_same(tmp_path):
    """``--base-from``: one base-model evaluation paired with several runs' arms. It is copied with its
    costs and machine (so the cross-machine rule still applies) and refused when the evaluation set,
    its size or the answer budget differ; settings a book leaves out count at their defaults."""
    other = PhaseBook(tmp_path / "a" / "phases.json", {"eval_questions": 200, "max_tokens": 256})
    other.run("eval:base", lambda: {"correct": [1, 0, 1]})
    same = {"eval_questions": None, "max_tokens": None, "eval_backend": "transformers"}

    book = PhaseBook(tmp_path / "b" / "phases.json", {"eval_questions": 200, "max_tokens": 256, "steps": 48})
    assert book.adopt("eval:base", other.path, same=same)
    copied = book.phases["eval:base"]
    assert copied["result"] == {"correct": [1, 0, 1]} and copied["adopted_from"] == str(other.path)
    assert copied["machine"] == other.phases["eval:base"]["machine"]
    assert json.loads(book.path.read_text())["phases"]["eval:base"]["result"] == {"correct": [1, 0, 1]}
    assert not book.adopt("eval:base", other.path, same=same)       # already there: nothing copied
    assert book.run("eval:base", lambda: {"correct": [0, 0, 0]}) == {"correct": [1, 0, 1]}  # not redone

    for i, (settings, named) in enumerate((({"eval_questions": 100, "max_tokens": 256}, "eval_questions 200 there, 100 here"),
                            ({"eval_questions": 200, "max_tokens": 256, "eval_backend": "llamacpp"},
                             "eval_backend 'transformers' there, 'llamacpp' here"))):
        fresh = PhaseBook(tmp_path / f"fresh{i}" / "phases.json", settings)
        with pytest.raises(PhaseBookError, match=named):
            fresh.adopt("eval:base", other.path, same=same)
        assert not fresh.done("eval:base")
    with pytest.raises(PhaseBookError, match="'eval:agg' has not finished"):
        book.adopt("eval:agg", other.path, same=same)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PhaseBookError, match="bad.json: not a readable phase book"):
        PhaseBook(tmp_path / "c.json", {}).adopt("eval:base", tmp_path / "bad.json")


def test_base_from_is_checked_by_the_benchmark_script(tmp_path):
    si = _benchmark_script()
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    files = ["--train-data", str(data), "--eval-data", str(data)]
    with pytest.raises(SystemExit):
        si.parse_args(files + ["--base-from", str(tmp_path / "missing.json")])
    assert "base_from" not in si.settings_of(si.parse_args(files))  # older runs' settings unchanged


def test_eval_offset_takes_the_next_questions_and_leaves_older_settings_unchanged(tmp_path):
    """``--eval-offset 2 --eval-questions 2`` holds out questions 3 and 4 (ids from their lines), a
    set disjoint from the first two; at its default the setting stays out of the book (older runs resume)."""
    si = _benchmark_script()
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(f'{{"question": "{i} + 1?", "answer": "#### {i + 1}"}}\n' for i in range(1, 6)))
    files = ["--train-data", str(data), "--eval-data", str(data), "--train-questions", "0"]
    args = si.parse_args(files + ["--eval-questions", "2", "--eval-offset", "2"])
    _, held_out = si.problems_of(args)
    assert [p.question for p in held_out] == ["3 + 1?", "4 + 1?"]
    assert [p.id for p in held_out] == ["gsm8k-3", "gsm8k-4"]
    assert si.settings_of(args)["eval_offset"] == 2
    assert "eval_offset" not in si.settings_of(si.parse_args(files))
    with pytest.raises(SystemExit, match="3 held-out questions after --eval-offset 2, not the 4"):
        si.problems_of(si.parse_args(files + ["--eval-questions", "4", "--eval-offset", "2"]))
    with pytest.raises(SystemExit):
        si.parse_args(files + ["--eval-offset", "-1"])


def _record(path: Path, settings: dict, base: list[int], arm: list[int], ids: list[str], isa: str = "avx512"):
    phase = {"wall_s": 1, "cpu_s": 1, "machine": {"isa": isa}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "phases": {
        "eval:base": {"result": {"correct": base, "question_ids": ids}, **phase},
        "eval:distill-sft": {"result": {"correct": arm, "question_ids": ids}, **phase}}}))
    return path


def test_pooled_report_pairs_each_question_within_its_own_run_then_pools(tmp_path, capsys):
    """Two records on disjoint held-out slices: each question's base and arm verdicts come from its own
    record, pooled over all questions; by hand: run a [1,0,0,1] → [1,1,0,1] (+1/−0), run b [0,0,1,1] →
    [1,0,0,1] (+1/−1): pooled +2/−1 of 8, +12.5 pp."""
    si = _benchmark_script()
    settings = {"run_id": "a", "steps": 48, "eval_data": "/x/test.jsonl", "samples_db": "/m1/s.db"}
    a = _record(tmp_path / "a.json", settings, [1, 0, 0, 1], [1, 1, 0, 1], ["t-1", "t-2", "t-3", "t-4"], "amx")
    b = _record(tmp_path / "b.json", {**settings, "run_id": "b", "eval_offset": 4, "samples_db": "/m2/s.db",
                                      "eval_data": "/y/test.jsonl"},
                [0, 0, 1, 1], [1, 0, 0, 1], ["t-5", "t-6", "t-7", "t-8"])
    out = si.pooled_report([a, b], ["distill-sft", "own-sft"])
    pooled = out["distill-sft"]["pooled"]
    assert (pooled["n"], pooled["gained"], pooled["lost"]) == (8, 2, 1)
    assert pooled["diff"] == pytest.approx(0.125) and pooled["before"] == pytest.approx(0.5)
    assert pooled == paired_difference([1, 0, 0, 1, 0, 0, 1, 1], [1, 1, 0, 1, 1, 0, 0, 1])
    assert [r["paired"]["diff"] for r in out["distill-sft"]["runs"]] == [pytest.approx(0.25), 0.0]
    assert "own-sft" not in out                                      # evaluated by neither: left out
    text = capsys.readouterr().out
    assert "pooled (n = 8)" in text and "+12.5" in text and "amx" in text
    # the same held-out question in both: refused, naming it
    c = _record(tmp_path / "c.json", {**settings, "run_id": "c"}, [1], [1], ["t-4"])
    with pytest.raises(SystemExit, match="t-4 is in both"):
        si.pooled_report([a, c], ["distill-sft"])
    # another training recipe is not the same measurement
    d = _record(tmp_path / "d.json", {**settings, "run_id": "d", "steps": 32}, [1], [1], ["t-9"])
    with pytest.raises(SystemExit, match="steps 48 vs 32"):
        si.pooled_report([a, d], ["distill-sft"])
    with pytest.raises(SystemExit, match="not a readable phases.json"):
        si.pooled_report([a, tmp_path / "missing.json"], ["distill-sft"])


def test_report_separates_gains_from_fewer_cut_answers(tmp_path, monkeypatch, capsys):
    """By hand: base [1,0,0,1,0] cuts b and c, the arm [1,1,1,0,0] cuts d: both gains (b, c) were answers
    the base cut, the loss (d) one the arm cut; on the questions neither cut (a, e) nothing changed. The
    cut answers come from the record, else from the evaluation's answers on this machine."""
    si = _benchmark_script()
    here = {"cpu": "x", "isa": "avx512", "cores": 2}
    monkeypatch.setattr(si, "machine", lambda: here)
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    args = si.parse_args(["--train-data", str(data), "--eval-data", str(data), "--out", str(tmp_path)])
    ids = list("abcde")
    book = PhaseBook(tmp_path / "phases.json", {"steps": 4})
    book.phases["eval:base"] = {"result": {"correct": [1, 0, 0, 1, 0], "question_ids": ids, "capped_ids": ["b", "c"]},
                                "wall_s": 1, "cpu_s": 1, "machine": here}
    book.phases["eval:own-sft"] = {"result": {"correct": [1, 1, 1, 0, 0], "question_ids": ids}, "wall_s": 1,
                                   "cpu_s": 1, "machine": here}
    assert si.uncapped_difference(args, book, "own-sft", "eval:base") is None   # the arm's cuts unknown
    folder = tmp_path / args.run_id / "eval"
    folder.mkdir(parents=True)
    (folder / "own-sft.jsonl").write_text("".join(
        json.dumps({"question_id": q, "finish_reason": "length" if q == "d" else "stop"}) + "\n" for q in ids))
    u = si.uncapped_difference(args, book, "own-sft", "eval:base")
    assert (u["gained_where_base_cut"], u["lost_where_arm_cut"], u["base_cut"], u["arm_cut"]) == (2, 1, 2, 1)
    assert (u["n"], u["gained"], u["lost"], u["diff"]) == (2, 0, 0, 0.0)
    summary = si.report(args, book, TraceStore(tmp_path / "t.db"))
    assert summary["eval"]["own-sft"]["uncapped"]["n"] == 2
    assert "2 of the +2 were cut by the base, 1 of the −1 by the arm" in capsys.readouterr().out


def test_a_second_round_starts_from_the_first_rounds_adapter(traces, tmp_path, monkeypatch, capsys):
    """``--target-adapter``: the base evaluation is that adapter, an own arm trains the target from it
    (the member spec carries it, so training goes on from it), and a folder that is no peft adapter is
    refused in one line."""
    import agora.training.evaluation as evaluation
    import agora.training.pipeline as pipeline

    si = _benchmark_script()
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    common = ["--train-data", str(data), "--eval-data", str(data), "--out", str(tmp_path / "runs")]
    with pytest.raises(SystemExit):
        si.parse_args(common + ["--target-adapter", str(tmp_path)])
    assert "not a peft adapter folder (no adapter_config.json)" in capsys.readouterr().err
    first = tmp_path / "round1" / "adapter"
    first.mkdir(parents=True)
    (first / "adapter_config.json").write_text("{}")
    args = si.parse_args(common + ["--target-adapter", str(first), "--arms", "own-sft", "--samples-runs", "a",
                                   "--train-questions", "0"])
    assert si.settings_of(args)["target_adapter"] == str(first.resolve())
    assert "target_adapter" not in si.settings_of(si.parse_args(common))      # older runs resume

    seen = {}

    def fake_outcomes(problems, base, adapter, out_file, **kw):
        seen["eval"] = adapter
        return [{"question_id": p.id, "correct": 1, "completion_tokens": 5, "finish_reason": "stop"} for p in problems]

    monkeypatch.setattr(evaluation, "greedy_outcomes", fake_outcomes)
    _, held_out = si.problems_of(args)
    assert si.eval_phase(args, held_out, "base", None)["adapter"] == str(first.resolve())
    assert seen["eval"] == str(first.resolve())
    si.eval_phase(args, held_out, "own-sft", "/x/own-sft/adapter")
    assert seen["eval"] == "/x/own-sft/adapter"                                # an arm: its own adapter

    class Stop(Exception):
        pass

    def fake_sft(store, run_id, spec, rows, out, settings, source=None):
        seen["spec"] = spec
        raise Stop

    monkeypatch.setattr(pipeline, "sft_member", fake_sft)
    monkeypatch.setattr(si, "TARGET", SMALL)
    specs = [replace_spec(s, SMALL) for s in si.builtin_pool_specs(si.POOL)]
    monkeypatch.setattr(si, "builtin_pool_specs", lambda pool: specs)
    with pytest.raises(Stop):
        si.train_phase(args, None, traces, [], "own-sft", held_out)
    assert seen["spec"].name == SMALL and seen["spec"].adapter == str(first.resolve())


def replace_spec(spec, name):
    """The first built-in member renamed to the scripted DB's target (the others as they are)."""
    from dataclasses import replace

    return replace(spec, name=name) if spec is not None and spec.name == "qwen2.5-coder-0.5b" else spec


def test_a_second_round_adopts_the_first_rounds_evaluation_of_its_adapter_as_its_base(tmp_path, monkeypatch):
    """``--target-adapter A --base-from R1/phases.json``: R1's ``eval:<arm>`` of the arm whose training
    wrote A becomes this run's ``eval:base`` (same questions and machine: the same greedy answers), marked
    ``book#phase``; a book that never evaluated A is refused naming it."""
    si = _benchmark_script()
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    adapter = tmp_path / "r1" / "distill-sft" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    common = ["--train-data", str(data), "--eval-data", str(data), "--out", str(tmp_path / "runs"),
              "--train-questions", "0", "--eval-questions", "1"]
    first = tmp_path / "r1.json"
    writer = PhaseBook(first, si.settings_of(si.parse_args(common)))
    writer.run("train:distill-sft", lambda: {"adapter": str(adapter), "losses": []})
    writer.run("eval:distill-sft", lambda: {"name": "distill-sft", "correct": [1], "question_ids": ["gsm8k-1"]})
    args = si.parse_args(common + ["--target-adapter", str(adapter), "--base-from", str(first)])
    assert si.first_round_eval(args) == "eval:distill-sft"
    book = PhaseBook(tmp_path / "r2.json", si.settings_of(args))
    assert book.adopt("eval:base", first, source="eval:distill-sft",
                      same={k: si.OMITTED_DEFAULTS.get(k) for k in si.BASE_SETTINGS if k != "target_adapter"})
    assert book.result("eval:base")["correct"] == [1]
    assert book.phases["eval:base"]["adopted_from"] == f"{first}#eval:distill-sft"
    other = tmp_path / "other" / "adapter"
    other.mkdir(parents=True)
    (other / "adapter_config.json").write_text("{}")
    with pytest.raises(PhaseBookError, match="no finished evaluation of the --target-adapter"):
        si.first_round_eval(si.parse_args(common + ["--target-adapter", str(other), "--base-from", str(first)]))
