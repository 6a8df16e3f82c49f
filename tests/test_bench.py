"""``agora bench`` (issue 18): the statistics against hand-computed values, a bench on two tiny
task files with scripted models (every number of the report checked by hand), failed questions
counted apart, honest COMED calibration, and resuming an interrupted bench without redoing
anything finished."""

import json
import math
import re
import threading
from math import comb

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.cli.main import app
from agora.runs.bench_plan import PROTOCOL_OF, resolve_methods
from agora.runs.bench_tasks import load_tasks
from agora.agents.stats import macro_bootstrap_ci, mcnemar_exact, paired_bootstrap_ci
from agora.runs.report import pareto_front
from agora.traces.bench_spec import read_bench_spec
from agora.traces.store import TraceStore


# ---------------------------------------------------------------------------- statistics


def two_sided_binomial(k: int, n: int) -> float:
    """By hand: twice the smaller tail of Binomial(n, 1/2), at most 1."""
    tail = sum(comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("wins, losses, expected", [
    (5, 0, 2 / 32),              # 2 · (1/2)^5
    (8, 2, 2 * (1 + 10 + 45) / 1024),  # 2 · P(X <= 2), X ~ Bin(10, 1/2) = 0.109375
    (0, 0, 1.0),                 # no discordant pair: no evidence
    (3, 3, 1.0),
    (1, 0, 1.0),                 # one discordant pair can never be significant
    (0, 6, 2 / 64),
])
def test_mcnemar_exact_matches_hand_computed_values(wins, losses, expected):
    assert mcnemar_exact(wins, losses) == pytest.approx(expected)
    assert mcnemar_exact(wins, losses) == pytest.approx(two_sided_binomial(wins, wins + losses))


def test_mcnemar_refuses_negative_counts():
    with pytest.raises(ValueError, match="counts must be >= 0"):
        mcnemar_exact(-1, 2)


def test_paired_bootstrap_ci_is_the_difference_with_a_sane_interval():
    x = [1, 1, 1, 0, 1, 0, 1, 1, 0, 1]
    y = [0, 1, 0, 0, 1, 0, 0, 1, 0, 1]
    diff, lo, hi = paired_bootstrap_ci(x, y)
    assert diff == pytest.approx(0.3)  # 7/10 − 4/10
    assert -1 <= lo <= diff <= hi <= 1 and lo < hi
    assert lo >= 0.0  # every question's difference is 0 or +1: no resample can be negative
    assert paired_bootstrap_ci(x, x) == (0.0, 0.0, 0.0)
    assert paired_bootstrap_ci(x, y, seed=3) == paired_bootstrap_ci(x, y, seed=3)  # seeded
    with pytest.raises(ValueError, match="same questions"):
        paired_bootstrap_ci([1, 0], [1])
    assert all(math.isnan(v) for v in paired_bootstrap_ci([], []))


def test_macro_bootstrap_keeps_each_task_in_its_stratum():
    # constant tasks: every resample of each task has the same mean, so the CI collapses to 0.5
    assert macro_bootstrap_ci([[1, 1], [0, 0, 0]]) == (0.5, 0.5, 0.5)
    mean, lo, hi = macro_bootstrap_ci([[1, 0, 1, 1], [0, 0, 1]])
    assert mean == pytest.approx((0.75 + 1 / 3) / 2)
    assert 0 <= lo <= mean <= hi <= 1
    assert macro_bootstrap_ci([[1, 0], []])[0] == 0.5  # an empty task is left out
    assert all(math.isnan(v) for v in macro_bootstrap_ci([[], []]))


def test_pareto_front_keeps_the_non_dominated_points_by_cost():
    points = [(10, 0.5), (20, 0.4), (30, 0.7), (30, 0.6), (5, 0.2), (40, 0.7), (float("nan"), 1.0)]
    assert pareto_front(points) == [4, 0, 2]
    assert pareto_front([(1, 0.5), (1, 0.5)]) == [0]  # two methods on one point: one vertex


def test_protocols_option_names_protocols_and_methods():
    assert resolve_methods("all") == tuple(PROTOCOL_OF)
    assert resolve_methods("align") == ("align", "single_agent", "self_consistency", "best_of_n")
    assert resolve_methods("moa,comed") == ("comed", "anchor", "router_only", "moa")
    assert resolve_methods("self_consistency, debate") == ("self_consistency", "debate")
    with pytest.raises(ValueError, match="unknown 'vote'"):
        resolve_methods("align,vote")


# ---------------------------------------------------------------------------- scripted tasks and pool


def write_tasks(tmp_path, n_math=4, n_mc=3):
    math_file, mc_file = tmp_path / "arith.jsonl", tmp_path / "quiz.jsonl"
    math_file.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"{i} plus {i}\n#### {2 * i}"})
                                 + "\n" for i in range(1, n_math + 1)))
    mc_file.write_text("".join(json.dumps({"id": f"mc{i}", "question": f"Quiz {i}: which letter?",
                                           "options": {"A": "w", "B": "x", "C": "y", "D": "z"}, "answer_idx": "A"})
                               + "\n" for i in range(1, n_mc + 1)))
    return math_file, mc_file


def scripted_pool(counter=None, interrupt_at=None):
    """Two models whose answers depend only on the question and the sample index, so every number
    of the report can be worked out by hand (see test_bench_on_two_task_files_...).

    Arithmetic "What is i + i?": model a's sample 0 is right for i <= 2 and says 99 for i >= 3,
    its samples 1 and 2 are right; model b's sample 0 is right, its others say 0.
    Quiz (gold A): a answers B, C, A by sample index; b answers A. Any model that has seen other
    answers (COMED peer, debate round 2, MoA aggregator) answers right.
    """
    lock = threading.Lock()

    def make(model):
        def respond(chat, i):
            if counter is not None:
                with lock:
                    counter[model] = counter.get(model, 0) + 1
                    counter["total"] = counter.get("total", 0) + 1
                    if interrupt_at is not None and counter["total"] == interrupt_at[0]:
                        raise KeyboardInterrupt
            text = chat[-1]["content"]
            m = re.search(r"What is (\d+) \+", text)
            seen = any(s in text for s in ("Another model answered", "other agents", "Responses from several"))
            if m:
                right = str(2 * int(m.group(1)))
                if seen:
                    return f"The answer is {right}."
                if model == "a":
                    return f"The answer is {right if i > 0 or int(m.group(1)) <= 2 else '99'}."
                return f"The answer is {right if i == 0 else '0'}."
            if seen:
                return "The answer is A."
            return f"The answer is {'BCA'[i % 3] if model == 'a' else 'A'}."
        return respond

    return ModelPool.from_chat_models({m: ScriptedChatModel(respond=make(m), latency_s=0.001) for m in ("a", "b")})


def bench_args(math_file, mc_file, db, out, *extra, design="--no-shared-candidates"):
    """The scripted bench's arguments. The hand-checked values below are the first edition's design, where
    every protocol draws its own samples (`--no-shared-candidates`); tests/test_bench_shared.py checks the
    default, one candidate pool per question."""
    return ["bench", "--tasks", f"{math_file},{mc_file}", "--db", str(db), "--out", str(out), "--run-id", "b1",
            "--max-tokens", "16", design, *extra]


def test_bench_on_two_task_files_writes_hand_checked_markdown_json_and_png(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, bench_args(math_file, mc_file, db, out))
    assert result.exit_code == 0, result.output
    for name in ("bench.md", "bench.json", "accuracy_vs_tokens.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "accuracy_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "bench.json").read_text())
    assert report["complete"] is True and [t["name"] for t in report["tasks"]] == ["arith", "quiz"]
    assert report["tasks"][0]["runs"] == {"align": "b1:arith:align", "comed": "b1:arith:comed"}
    acc = {(c["task"], c["method"]): c["accuracy"] for c in report["cells"]}
    # arith: agent 0 (a) is wrong on its first sample of questions 3 and 4; every vote is right
    # (a: 2-3 right of 3, b: 1 right of 3 → the right answer has 3-4 votes of 6)
    assert acc["arith", "single_agent"] == 0.5 and acc["arith", "self_consistency"] == 1.0
    # quiz: a says B first; the votes are A 4 (a once, b three times), B 1, C 1
    assert acc["quiz", "single_agent"] == 0.0 and acc["quiz", "self_consistency"] == 1.0
    # COMED's anchor a: arith 1, 2 unanimous (accept), 3, 4 at 2/3 (verify, the probe b agrees);
    # quiz SC 1/3 → escalate, the peer b says A: every question rescued, the anchor's plurality (B) wrong
    assert acc["arith", "comed"] == acc["arith", "anchor"] == 1.0
    assert acc["quiz", "comed"] == 1.0 and acc["quiz", "anchor"] == 0.0
    assert acc["quiz", "moa"] == acc["quiz", "debate"] == 1.0
    macro = {m["method"]: m for m in report["macro"]}
    assert macro["single_agent"]["accuracy"] == 0.25 and macro["self_consistency"]["accuracy"] == 1.0
    assert macro["single_agent"]["ci_low"] <= 0.25 <= macro["single_agent"]["ci_high"]
    paired = {(p["task"], p["method"], p["baseline"]): p for p in report["paired"]}
    sc = paired["arith", "self_consistency", "single_agent"]
    assert (sc["questions"], sc["diff"], sc["wins"], sc["losses"]) == (4, 0.5, 2, 0)
    assert sc["p_mcnemar"] == pytest.approx(0.5)  # 2 · (1/2)^2
    assert paired["quiz", "self_consistency", "single_agent"]["p_mcnemar"] == pytest.approx(0.25)
    pooled = paired["macro", "self_consistency", "single_agent"]
    assert (pooled["wins"], pooled["losses"], pooled["diff"]) == (5, 0, 0.75)  # mean of 0.5 and 1.0
    assert pooled["p_mcnemar"] == pytest.approx(2 / 32)
    assert paired["quiz", "comed", "self_consistency"]["diff"] == 0.0
    assert paired["quiz", "comed", "self_consistency"]["p_mcnemar"] == 1.0
    comed = {c["task"]: c for c in report["comed"]}
    assert comed["arith"]["decisions"] == {"accept": 2, "verify": 2, "escalate": 0}
    assert comed["arith"]["outcomes"]["verify_accept"] == 2 and comed["arith"]["rescues"] == 0
    assert comed["quiz"]["decisions"] == {"accept": 0, "verify": 0, "escalate": 3}
    assert (comed["quiz"]["rescues"], comed["quiz"]["harms"], comed["quiz"]["gain"]) == (3, 0, 1.0)
    cost = {(c["task"], c["method"]): c for c in report["cells"]}
    assert cost["arith", "comed"]["calls_per_q"] == 1.5  # 1, 1, 2, 2 (anchor, + probe)
    assert cost["quiz", "comed"]["calls_per_q"] == 2.0  # anchor + one peer
    assert cost["arith", "moa"]["calls_per_q"] == 3.0 and cost["arith", "debate"]["calls_per_q"] == 5.0
    assert cost["arith", "single_agent"]["calls_per_q"] == 1.0 and cost["arith", "align"]["calls_per_q"] == 2.0
    assert cost["arith", "align"]["samples_per_q"] == 6.0 and cost["arith", "single_agent"]["samples_per_q"] == 1.0
    assert cost["arith", "single_agent"]["tokens_per_q"] == 4.0  # "The answer is 2." = 4 words
    assert all(c["wall_s_per_q"] > 0 and c["failed_questions"] == 0 for c in report["cells"])
    singles = {(s["task"], s["model"]): s["accuracy"] for s in report["single_models"]}
    assert singles["arith", "a"] == pytest.approx((1 + 1 + 2 / 3 + 2 / 3) / 4)
    assert singles["arith", "b"] == pytest.approx(1 / 3) and singles["quiz", "b"] == 1.0
    assert singles["quiz", "a"] == pytest.approx(1 / 3)
    assert report["sharing"]["self_consistency"].startswith("ALIGN's n·k candidates")
    assert report["sharing"]["single_agent"].startswith("ALIGN's n·k candidates")
    assert report["calibration"][0]["scope"] == "*" and "fixed default thresholds" in report["calibration"][0]["source"]
    md = (out / "bench.md").read_text()
    for text in ("## Accuracy", "## Paired differences", "## Cost per question", "## Shared samples",
                 "## COMED thresholds", "fixed default thresholds, not calibrated", "## COMED decisions",
                 "| self_consistency | single_agent | macro | 7 | 75.0 |", "## Claims"):
        assert text in md, text
    # the trace DB holds the bench: its spec, its report and one row per cell (and macro)
    store = TraceStore(db)
    assert read_bench_spec(store, "b1").tasks[1].runs["comed"] == "b1:quiz:comed"
    cells = {(r["task"], r["method"]): r for r in store.db["bench_cells"].rows_where("bench_id = ?", ["b1"])}
    assert cells["macro", "single_agent"]["accuracy"] == 0.25 and cells["quiz", "comed"]["calls_per_q"] == 2.0
    assert json.loads(next(store.db["benches"].rows)["report"])["complete"] is True


def test_interrupted_bench_resumes_without_redoing_anything_finished(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path)
    db, out = tmp_path / "t.db", tmp_path / "b"
    full = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(full))
    assert CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "ref.db", out)).exit_code == 0
    # the same bench, interrupted (Ctrl-C) at the 30th model call: inside arith's COMED run
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter, interrupt_at=[30]))
    result = CliRunner().invoke(app, bench_args(math_file, mc_file, db, out))
    assert result.exit_code == 130 and "rerun with the same --run-id" in result.output
    store = TraceStore(db)
    assert store.get_run("b1:arith:comed")["status"] == "interrupted"
    done_before = {r: store.finished_questions(r) for r in ("b1:arith:align", "b1:arith:comed", "b1:quiz:align")}
    assert len(done_before["b1:arith:align"]) == 4 and not done_before["b1:quiz:align"]
    calls_before = counter["total"]
    # the report of what has run so far, from the DB alone
    partial = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(db), "--report-only", "--out",
                                       str(tmp_path / "partial")])
    assert partial.exit_code == 0, partial.output
    report = json.loads((tmp_path / "partial" / "bench.json").read_text())
    assert report["complete"] is False and "**Incomplete**" in (tmp_path / "partial" / "bench.md").read_text()
    cells = {(c["task"], c["method"]): c for c in report["cells"]}
    assert cells["arith", "align"]["questions"] == 4 and ("arith", "comed") not in cells  # q1 was mid-run
    assert report["runs_done"]["arith"]["comed"] == {"answered": 0, "failed": 0, "missing": 4}
    assert report["runs_done"]["quiz"]["align"]["missing"] == 3
    # resumed: only what was not finished runs
    resumed = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(resumed))
    result = CliRunner().invoke(app, bench_args(math_file, mc_file, db, out))
    assert result.exit_code == 0, result.output
    assert calls_before - 1 + resumed["total"] <= full["total"] + 2  # at most the interrupted step's calls redone
    assert resumed["total"] < full["total"]
    rows = store.db.query("select count(*) as n from model_calls").__next__()["n"]
    reference = TraceStore(tmp_path / "ref.db")
    assert json.loads((out / "bench.json").read_text())["complete"] is True
    assert {r["question_id"] for r in store.db["questions"].rows} == {r["question_id"] for r in reference.db["questions"].rows}
    assert store.db["questions"].count == reference.db["questions"].count == 2 * (4 + 3)
    assert store.db["results"].count == reference.db["results"].count
    assert rows >= reference.db["model_calls"].count
    # a third run has nothing left: no model call at all, and the same report
    again = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(again))
    before = json.loads((out / "bench.json").read_text())
    result = CliRunner().invoke(app, bench_args(math_file, mc_file, db, out))
    assert result.exit_code == 0, result.output
    assert again == {}  # not one model call
    after = json.loads((out / "bench.json").read_text())
    assert before["cells"] == after["cells"] and before["paired"] == after["paired"]


@pytest.mark.parametrize("interrupt_at", [5, 17, 40])
def test_interrupted_default_bench_resumes_to_the_same_results(tmp_path, monkeypatch, interrupt_at):
    """The default design (one candidate pool per question), interrupted at the nth model call: in the
    candidate draw, in ALIGN/COMED's later steps; the resumed bench redoes at most the step in flight and
    its results are those of a bench run in one go."""
    math_file, mc_file = write_tasks(tmp_path)
    full = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(full))
    args = lambda db, out: bench_args(math_file, mc_file, db, out, design="--shared-candidates")  # noqa: E731
    assert CliRunner().invoke(app, args(tmp_path / "ref.db", tmp_path / "ref")).exit_code == 0
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter, interrupt_at=[interrupt_at]))
    db, out = tmp_path / "t.db", tmp_path / "b"
    cut = CliRunner().invoke(app, args(db, out))
    assert cut.exit_code == 130 and "rerun with the same --run-id" in cut.output, cut.output
    resumed = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(resumed))
    result = CliRunner().invoke(app, args(db, out))
    assert result.exit_code == 0, result.output
    # at most the step in flight redone: one question's draw is 2 models × 3 samples (a scripted call each)
    assert interrupt_at - 1 + resumed["total"] <= full["total"] + 6
    key = "select run_id, question_id, method, answer, correct from results order by run_id, question_id, method"
    assert list(TraceStore(db).db.query(key)) == list(TraceStore(tmp_path / "ref.db").db.query(key))
    want = json.loads((tmp_path / "ref" / "bench.json").read_text())
    got = json.loads((out / "bench.json").read_text())
    untimed = lambda cells: [{k: v for k, v in c.items() if not k.endswith("_s_per_q")} for c in cells]  # noqa: E731
    assert got["complete"] and untimed(got["cells"]) == untimed(want["cells"])


def test_rounds_interleave_tasks_and_runs_and_change_nothing_else(tmp_path, monkeypatch):
    """--round-size 2: every task's ALIGN and COMED runs on questions 1-2, then 3-4; an interrupted
    bench then has every cell; the results are those of a bench run in one go."""
    math_file, mc_file = write_tasks(tmp_path)
    calls = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(calls))
    whole = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "whole.db", tmp_path / "w",
                                               "--round-size", "0"))
    assert whole.exit_code == 0, whole.output
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, bench_args(math_file, mc_file, db, tmp_path / "r", "--round-size", "2"))
    assert result.exit_code == 0, result.output
    order = [(r["run_id"].split(":", 1)[1], r["idx"])
             for r in TraceStore(db).db.query("select run_id, idx from questions order by rowid")]
    assert order == [("arith:align", 0), ("arith:align", 1), ("arith:comed", 0), ("arith:comed", 1),
                     ("quiz:align", 0), ("quiz:align", 1), ("quiz:comed", 0), ("quiz:comed", 1),
                     ("arith:align", 2), ("arith:align", 3), ("arith:comed", 2), ("arith:comed", 3),
                     ("quiz:align", 2), ("quiz:comed", 2)]
    assert all(TraceStore(db).get_run(f"b1:{t}:{p}")["status"] == "finished"
               for t in ("arith", "quiz") for p in ("align", "comed"))
    w = json.loads((tmp_path / "w" / "bench.json").read_text())
    r = json.loads((tmp_path / "r" / "bench.json").read_text())
    drop = ("wall_s_per_q", "model_s_per_q")
    assert [{k: v for k, v in c.items() if k not in drop} for c in w["cells"]] == \
        [{k: v for k, v in c.items() if k not in drop} for c in r["cells"]]
    assert w["paired"] == r["paired"] and w["comed"] == r["comed"]

    # Ctrl-C after the 11th recorded question (round 2: arith's ALIGN q3, q4, COMED q3): every
    # cell already has its first 2 questions
    seen = []

    def question(self, step, outcome):
        seen.append(outcome)
        if len(seen) == 11:
            raise KeyboardInterrupt

    monkeypatch.setattr(bench_cli._Bar, "question", question)
    cut = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "cut.db", tmp_path / "c",
                                             "--round-size", "2"))
    assert cut.exit_code == 130, cut.output
    cut_store = TraceStore(tmp_path / "cut.db")
    assert cut_store.get_run("b1:arith:comed")["status"] == "interrupted"
    assert cut_store.get_run("b1:quiz:align")["status"] == "partial"
    part = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(tmp_path / "cut.db"), "--report-only",
                                    "--out", str(tmp_path / "p")])
    assert part.exit_code == 0, part.output
    report = json.loads((tmp_path / "p" / "bench.json").read_text())
    assert report["complete"] is False
    cells = {(c["task"], c["method"]): c["questions"] for c in report["cells"]}
    assert {m for _, m in cells} == set(PROTOCOL_OF) - {"router_only"}
    assert len(cells) == 2 * len({m for _, m in cells}) and all(n >= 2 for n in cells.values()), cells


def test_report_only_on_a_bench_still_in_its_dev_phase_says_so(tmp_path, monkeypatch):
    """The spec (and so the report) is recorded when the dev runs finish; before, --report-only names the
    dev runs recorded so far instead of claiming there is no such bench."""
    math_file, mc_file = write_tasks(tmp_path, n_math=6)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool({}, interrupt_at=[3]))
    cut = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "t.db", tmp_path / "b", "--dev", "2",
                                             design="--shared-candidates"))
    assert cut.exit_code == 130, cut.output
    got = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(tmp_path / "t.db"), "--report-only"])
    assert got.exit_code == 2
    line = " ".join(got.output.split())
    assert f"error: {tmp_path / 't.db'}: bench 'b1' has no report yet: it is in its dev phase (1 runs so far: " \
           "b1:arith:candidates-dev); its spec and report start when the dev runs finish" in line, line
    other = CliRunner().invoke(app, ["bench", "--run-id", "b2", "--db", str(tmp_path / "t.db"), "--report-only"])
    assert other.exit_code == 2 and "no bench 'b2'" in other.output


def test_a_bench_result_counts_failed_test_questions_not_dev_ones():
    from agora.graphs.runner import RunOutcome
    from agora.runs.bench import BenchResult

    runs = {rid: RunOutcome(rid, resumed=False, skipped=0, failed=[f"{rid}/q1", f"{rid}/q2"])
            for rid in ("b:t:comed-dev", "b:all:candidates-dev", "b:t:align", "b:t:comed", "b:t-dev:align")}
    assert BenchResult(spec=None, runs=runs).failed == [
        ("b:t:align", "b:t:align/q1"), ("b:t:align", "b:t:align/q2"),
        ("b:t:comed", "b:t:comed/q1"), ("b:t:comed", "b:t:comed/q2"),
        ("b:t-dev:align", "b:t-dev:align/q1"), ("b:t-dev:align", "b:t-dev:align/q2")]


@pytest.mark.parametrize("name", ["concurrency", "round_size"])
def test_a_bool_for_a_bench_count_is_refused_with_the_fields_own_rule(name):
    from agora.runs.bench_plan import BenchConfig
    for bad in (True, False, 0, -1, 2.0, "4"):
        with pytest.raises(ValueError) as err:
            BenchConfig(**{name: bad})
        assert str(err.value) == f"BenchConfig.{name} must be an integer >= 1 or None, got {bad!r}"
    assert getattr(BenchConfig(**{name: 3}), name) == 3 and getattr(BenchConfig(**{name: None}), name) is None


def test_round_size_must_be_a_positive_integer_or_none():
    from agora.runs.bench_plan import BenchConfig
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="round_size"):
            BenchConfig(round_size=bad)
    assert BenchConfig(round_size=None).round_size is None


def test_bench_with_limit_then_rerun_with_a_larger_limit_runs_only_the_new_questions(tmp_path, monkeypatch):
    math_file, _ = write_tasks(tmp_path)
    db, out = tmp_path / "t.db", tmp_path / "b"
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter))
    args = ["bench", "--tasks", str(math_file), "--db", str(db), "--out", str(out), "--run-id", "lim",
            "--protocols", "align", "--max-tokens", "16"]
    assert CliRunner().invoke(app, [*args, "--limit", "2"]).exit_code == 0
    assert counter["total"] == 2 * 2 * 3  # 2 questions × 2 agents × 3 samples
    again = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(again))
    assert CliRunner().invoke(app, [*args, "--limit", "2"]).exit_code == 0 and again == {}
    more = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(more))
    result = CliRunner().invoke(app, [*args, "--limit", "4"])
    assert result.exit_code == 0, result.output
    assert more["total"] == 2 * 2 * 3  # only questions 3 and 4
    report = json.loads((out / "bench.json").read_text())
    assert {c["method"] for c in report["cells"]} == {"align", "single_agent", "self_consistency", "best_of_n"}
    assert {c["questions"] for c in report["cells"]} == {4}
    assert report["calibration"] == [] and report["comed"] == []


def test_failed_questions_are_counted_apart_never_as_wrong(tmp_path, monkeypatch):
    math_file, _ = write_tasks(tmp_path)

    def respond(chat, i):
        if "What is 2 +" in chat[-1]["content"]:
            raise RuntimeError("server down")
        return "The answer is 99."  # wrong on every other question

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=respond) for m in ("a", "b")}, max_retries=0)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: pool)
    out = tmp_path / "b"
    result = CliRunner().invoke(app, ["bench", "--tasks", str(math_file), "--db", str(tmp_path / "t.db"), "--out",
                                      str(out), "--run-id", "f", "--max-tokens", "16",
                                      "--protocols", "align,comed", "--no-shared-candidates"])
    assert result.exit_code == 1
    assert "2 test questions failed" in result.output and "not scored" in result.output
    report = json.loads((out / "bench.json").read_text())
    cells = {c["method"]: c for c in report["cells"]}
    assert cells["single_agent"]["questions"] == 3 and cells["single_agent"]["failed_questions"] == 1
    assert cells["single_agent"]["accuracy"] == 0.0  # 0 of the 3 answered, not 0 of 4
    assert cells["comed"]["failed_questions"] == 1 and cells["comed"]["missing"] == 0
    assert report["failed_questions"] == {"arith": {"align": ["arith-2"], "comed": ["arith-2"]}}
    assert "## Failed questions" in (out / "bench.md").read_text()


def test_calibrate_on_a_dev_file_drops_test_questions_and_states_its_thresholds(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path, n_math=2, n_mc=2)
    dev = tmp_path / "dev.jsonl"  # quiz 1 is a test question: dropped; quiz 7, 8 stay
    dev.write_text("".join(json.dumps({"id": f"d{i}", "question": f"Quiz {i}: which letter?",
                                       "options": {"A": "w", "B": "x", "C": "y", "D": "z"}, "answer_idx": "A"}) + "\n"
                           for i in (1, 7, 8)))
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    out = tmp_path / "b"
    result = CliRunner().invoke(app, ["bench", "--tasks", f"{math_file},{mc_file}", "--calibrate-on", str(dev),
                                      "--db", str(tmp_path / "t.db"), "--out", str(out), "--run-id", "c",
                                      "--protocols", "comed", "--max-tokens", "16", "--no-shared-candidates"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    [cal] = report["calibration"]
    assert cal["scope"] == "*" and cal["run_id"] == "c:all:comed-dev" and cal["questions"] == 2
    assert "1 of its questions are test questions and were dropped" in cal["source"]
    # dev: SC 1/3, escalation always rescues: escalate everything (τ_lo above 1/3) beats accepting
    assert cal["thresholds"]["tau_lo"] > 1 / 3 and cal["rescues"] == 2 and cal["harms"] == 0
    store = TraceStore(tmp_path / "t.db")
    assert {q["question_id"] for q in store.questions("c:all:comed-dev")} == {"d7", "d8"}
    assert "calibrated on" in (out / "bench.md").read_text()


def test_dev_option_calibrates_each_task_on_the_last_questions_of_its_file(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path, n_math=5, n_mc=5)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    out = tmp_path / "b"
    args = ["bench", "--tasks", f"{math_file},{mc_file}", "--dev", "2", "--db", str(tmp_path / "t.db"), "--out",
            str(out), "--run-id", "d", "--protocols", "comed", "--max-tokens", "16", "--no-shared-candidates"]
    result = CliRunner().invoke(app, [*args, "--limit", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert [(c["scope"], c["run_id"], c["questions"]) for c in report["calibration"]] == [
        ("arith", "d:arith:comed-dev", 2), ("quiz", "d:quiz:comed-dev", 2)]
    store = TraceStore(tmp_path / "t.db")
    assert [q["question_id"] for q in store.questions("d:arith:comed-dev")] == ["arith-4", "arith-5"]
    assert [q["question_id"] for q in store.questions("d:arith:comed")] == ["arith-1", "arith-2"]
    # quiz: escalation rescues every dev question, so its thresholds escalate
    quiz = report["calibration"][1]
    assert quiz["rescues"] == 2 and quiz["thresholds"]["tau_lo"] > 1 / 3
    assert {c["task"]: c["decisions"]["escalate"] for c in report["comed"]}["quiz"] == 2
    # a larger --limit keeps the same dev split and thresholds: the runs resume, only question 3 runs
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter))
    result = CliRunner().invoke(app, [*args, "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert [q["question_id"] for q in store.questions("d:arith:comed")] == ["arith-1", "arith-2", "arith-3"]
    assert json.loads((out / "bench.json").read_text())["calibration"] == report["calibration"]
    asked = counter["total"]
    assert 0 < asked <= 2 * 20  # the new question of each task, no dev question again
    result = CliRunner().invoke(app, [*args, "--limit", "4"])  # would take a dev question as a test question
    assert result.exit_code == 2 and "fewer than --limit 4 + --dev 2" in result.output


def test_dev_split_is_the_end_of_the_file(tmp_path):
    math_file, _ = write_tasks(tmp_path, n_math=5)
    [task] = load_tasks(str(math_file), limit=2, dev=3)
    assert [p.id for p in task.problems] == ["arith-1", "arith-2"]
    assert [p.id for p in task.dev] == ["arith-3", "arith-4", "arith-5"]
    [task] = load_tasks(str(math_file), dev=2)  # no limit: every question but the dev ones
    assert [p.id for p in task.problems] == ["arith-1", "arith-2", "arith-3"]
    with pytest.raises(ValueError, match="fewer than --limit 2 \\+ --dev 4"):
        load_tasks(str(math_file), limit=2, dev=4)
    other = tmp_path / "copy"  # another file of the same stem (the same file twice is refused)
    other.mkdir()
    other_file = other / "arith.jsonl"
    other_file.write_text(math_file.read_text())
    named = load_tasks(f"x={math_file},{other_file}", limit=1)
    assert [t.name for t in named] == ["x", "arith"]
    first, second = load_tasks(f"{math_file},{other_file}")  # the same stem twice: the second gets its folder
    assert first.name == "arith" and second.name == "copy-arith"
    with pytest.raises(ValueError, match="used twice"):
        load_tasks(f"x={math_file},x={other_file}")


def test_bench_refuses_bad_options_in_one_line(tmp_path, monkeypatch):
    math_file, _ = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    db = tmp_path / "t.db"
    for args, message in [
        (["--protocols", "vote"], "--protocols: unknown 'vote'"),
        (["--dev", "4"], "fewer than --limit 1 + --dev 4"),
        (["--calibrate-on", f"{math_file},{math_file},{math_file}"], "3 files for 1 tasks"),
        (["--report-only"], "--report-only needs the --run-id"),
    ]:
        result = CliRunner().invoke(app, ["bench", "--tasks", str(math_file), "--db", str(db), *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and len(result.output.strip().splitlines()) == 1, (args, result.output)


@pytest.mark.slow
def test_bench_end_to_end_on_the_tiny_pool(shared_data, tmp_path):
    """`agora bench --tasks <gsm8k sample>,<arc file> --limit 2 --pool tiny` (short answers to fit CI's 2 cores)."""
    from agora.tasks.samples import sample_path

    gsm8k, _ = sample_path("gsm8k")
    arc = shared_data / "arc" / "arc_challenge_test.jsonl"
    out, db = tmp_path / "b", tmp_path / "t.db"
    args = ["bench", "--tasks", f"{gsm8k},{arc}", "--limit", "2", "--pool", "tiny", "--db", str(db), "--out", str(out),
            "--run-id", "e2e", "--agents", "2", "--samples", "2", "--max-tokens", "24", "--probe-max-tokens", "8",
            "--debate-agents", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["complete"] and [t["name"] for t in report["tasks"]] == ["gsm8k_test_sample", "arc_challenge_test"]
    assert {c["method"] for c in report["cells"]} == {"align", "single_agent", "self_consistency", "best_of_n",
                                                      "comed", "anchor", "moa", "debate",
                                                      "council", "council_top", "council_vote",
                                                      "slm-mux", "mux_vote"}  # registry (issue 32)
    assert all(c["questions"] + c["failed_questions"] + c["method_failed"] == 2 for c in report["cells"])
    assert (out / "accuracy_vs_tokens.png").stat().st_size > 0 and "## Paired differences" in (out / "bench.md").read_text()
    store = TraceStore(db)
    calls = store.db["model_calls"].count
    assert CliRunner().invoke(app, args).exit_code == 0  # the rerun redoes nothing
    assert store.db["model_calls"].count == calls


def test_router_uses_only_runs_outside_the_bench_and_adds_router_only(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    db = tmp_path / "t.db"

    def bench(run_id, tasks, *extra):
        return CliRunner().invoke(app, ["bench", "--tasks", tasks, "--db", str(db), "--out", str(tmp_path / run_id),
                                        "--run-id", run_id, "--protocols", "comed,moa", "--max-tokens", "16",
                                        "--router", "--embedding", "tfidf", "--no-shared-candidates", *extra])

    first = bench("h", str(mc_file))  # a fresh DB has no history: fixed anchor
    assert first.exit_code == 0, first.output
    assert "no router, fixed anchor a" in first.output
    second = bench("r", str(math_file))  # routed by what bench h left in the DB
    assert second.exit_code == 0, second.output
    assert "router: kNN" in second.output and "outside this bench" in second.output
    report = json.loads((tmp_path / "r" / "bench.json").read_text())
    assert "router_only" in report["methods"] and any(c["method"] == "router_only" for c in report["cells"])
    assert report["settings"]["comed"]["router.kind"] == "knn"
    again = bench("r", str(math_file))  # resuming: its own runs stay out of its history, same router
    assert again.exit_code == 0, again.output


def test_time_left_is_each_runs_questions_left_times_its_own_mean_time():
    from agora.runs.bench_plan import Step, time_left_s
    from agora.tasks.problem import Problem

    store = TraceStore(":memory:")
    qs = tuple(Problem(id=f"q{i}", question=f"Q{i}", gold="1", kind="math") for i in range(4))
    steps = [Step("align", "a", "b:a:align", qs, None, "gsm8k"), Step("comed", "a", "b:a:comed", qs, None, "gsm8k"),
             Step("align", "z", "b:z:align", qs, None, "gsm8k")]
    assert time_left_s(store, steps) is None  # nothing measured yet
    for run_id, walls in (("b:a:align", [10.0, 20.0]), ("b:a:comed", [60.0])):
        for i, w in enumerate(walls):
            store.db["questions"].insert({"run_id": run_id, "question_id": f"q{i}", "idx": i, "wall_s": w})
    # a:align 2 left × 15 s; a:comed 3 left × 60 s; z:align (none yet) 4 left × the align runs' mean, 15 s
    assert time_left_s(store, steps) == pytest.approx(2 * 15 + 3 * 60 + 4 * 15)
    assert time_left_s(store, steps[:2]) == pytest.approx(2 * 15 + 3 * 60)
    assert time_left_s(store, [Step("calibrate", "*", "b:all:comed-dev", qs, None, "dev")]) is None
    # 4 questions in flight: each question's wall time overlaps 3 others', so the time left is a quarter
    assert time_left_s(store, steps, in_flight=4) == pytest.approx((2 * 15 + 3 * 60 + 4 * 15) / 4)


def test_a_task_named_with_no_file_after_the_equals_sign_is_refused_as_such():
    """--tasks 'arith=' was read as the path '' (the current folder): 'error: .: is a directory, not
    a JSONL file', naming neither the task nor the option."""
    with pytest.raises(ValueError, match=r"^--tasks 'arith=': no task file after '=' \(give name=path\)$"):
        load_tasks("arith=")
