"""``agora bench`` probes: a refused rerun changes nothing, ``--protocols`` runs only what it names
(and sizes the shared draw for it), the progress estimate never borrows another run kind's rate,
the live and ``--report-only`` reports are the same files, the default report folder stays one
folder here, calibration settings are checked without a dev split, and the one-sample rows say
where their samples came from."""

import json
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
import agora.traces.bench as traces_bench
from agora.cli.main import app
from agora.runs.bench_plan import Step
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore
from test_bench import bench_args, scripted_pool, write_tasks

GENERATED_AT = "2026-12-03T00:00:00+00:00"


def _report(tmp_path: Path, name: str) -> tuple[str, str]:
    """bench.md and bench.json of ``--report-only`` on bench b1 of tmp_path/t.db."""
    out = tmp_path / name
    got = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(tmp_path / "t.db"), "--report-only",
                                   "--out", str(out)])
    assert got.exit_code == 0, got.output
    return (out / "bench.md").read_text(), (out / "bench.json").read_text()


def _bench(tmp_path, monkeypatch, *extra, design="--no-shared-candidates", counter=None):
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter))
    monkeypatch.setattr(traces_bench, "now", lambda: GENERATED_AT)
    return CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "t.db", tmp_path / "b", *extra,
                                              design=design))


def _db_rows(db: Path) -> dict[str, list]:
    store = TraceStore(db)
    return {t: list(store.db.query(f"select * from {t}")) for t in ("runs", "benches", "questions", "model_calls")}


def test_a_refused_rerun_with_other_debate_agents_changes_nothing(tmp_path, monkeypatch):
    assert _bench(tmp_path, monkeypatch, "--limit", "2").exit_code == 0
    before, rows = _report(tmp_path, "before"), _db_rows(tmp_path / "t.db")
    math_file, mc_file = tmp_path / "arith.jsonl", tmp_path / "quiz.jsonl"
    refused = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "t.db", tmp_path / "b2", "--limit", "2",
                                                 "--debate-agents", "4"))
    assert refused.exit_code != 0 and "b1:arith:comed" in refused.output and "debate_agents" in refused.output
    assert _db_rows(tmp_path / "t.db") == rows  # not even the bench's spec
    after = _report(tmp_path, "after")
    assert after == before and "debate_agents = 3" in after[0] and "debate_agents = 4" not in after[0]


def test_a_refused_rerun_with_fewer_protocols_and_questions_changes_nothing(tmp_path, monkeypatch):
    assert _bench(tmp_path, monkeypatch, "--limit", "2").exit_code == 0
    before = _report(tmp_path, "before")
    refused = CliRunner().invoke(app, bench_args(tmp_path / "arith.jsonl", tmp_path / "quiz.jsonl", tmp_path / "t.db",
                                                 tmp_path / "b2", "--protocols", "moa", "--limit", "1"))
    assert refused.exit_code != 0 and "pick a new --run-id" in refused.output
    after = _report(tmp_path, "after")
    assert after == before
    methods = json.loads(after[1])["methods"]
    assert "comed" in methods and "align" in methods and json.loads(after[1])["tasks"][0]["questions"] == 2


def test_protocols_moa_runs_only_the_shared_draw_and_the_aggregator(tmp_path, monkeypatch):
    result = _bench(tmp_path, monkeypatch, "--protocols", "moa", "--limit", "2", design="--shared-candidates")
    assert result.exit_code == 0, result.output
    store = TraceStore(tmp_path / "t.db")
    per_node = {(r["run_id"], r["node"]): r["n"] for r in store.db.query(
        "select run_id, node, count(*) as n from model_calls group by run_id, node")}
    # MoA's two proposers (a, b: one sample each) come from the shared draw, sized for them alone (k = 1,
    # not COMED's N = 3); then one aggregator call per question; no anchor, probe or peer call
    assert per_node == {("b1:arith:candidates", "candidates"): 4, ("b1:arith:comed", "moa_aggregate"): 2,
                        ("b1:quiz:candidates", "candidates"): 4, ("b1:quiz:comed", "moa_aggregate"): 2}
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert report["methods"] == ["moa"] and report["settings"]["comed"]["own_steps"] is False
    assert {r["method"] for r in store.db.query("select distinct method from results where run_id like '%comed'")} \
        == {"moa"}


class _Times:
    """A store stand-in: recorded question times per run and finished questions."""

    def __init__(self, times, done):
        self.times, self.done = times, done

    def question_times(self, run_ids):
        return {r: t for r, t in self.times.items() if r in run_ids}

    def finished_questions(self, run_id):
        return self.done.get(run_id, set())


def test_progress_time_left_uses_each_run_kinds_own_questions_else_says_unknown():
    problems = tuple(Problem(id=f"q{i}", question=f"What is {i} + {i}?", gold=str(2 * i)) for i in range(3))
    steps = [Step("align", "t", "b:t:align", problems, None, "gsm8k"),
             Step("comed", "t", "b:t:comed", problems, None, "gsm8k")]
    store = _Times({"b:t:align": (3, 0.01)}, {"b:t:align": {"q0", "q1", "q2"}})
    console = Console(record=True, width=200, force_terminal=False)
    bar = bench_cli._Bar(Progress(console=console), 3, store, steps)
    assert bar.eta() == "unknown"  # COMED has no finished question: not ALIGN's 0.01 s per question
    bar.step(steps[1], 3)
    assert "time left unknown" in console.export_text() and "min left" not in console.export_text()
    store.times["b:t:comed"], store.done["b:t:comed"] = (1, 40.0), {"q0"}
    assert bar.eta() == "0:01:20"  # 2 questions left × 40 s
    bar.step(steps[0], 0)  # a run finished in an earlier sitting: no "0 of the 0 ... 0 min left" (probe 15, 4e)
    assert console.export_text().splitlines()[-1] == "b:t:align: done before"


def test_live_report_and_report_only_are_the_same_files(tmp_path, monkeypatch):
    result = _bench(tmp_path, monkeypatch, "--limit", "2", design="--shared-candidates")
    assert result.exit_code == 0, result.output
    live = (tmp_path / "b" / "bench.md").read_text(), (tmp_path / "b" / "bench.json").read_text()
    assert "baselines = ['moa'" in live[0] and "('moa'" not in live[0]
    assert _report(tmp_path, "again") == live


def test_default_out_folder_replaces_path_separators_and_dot_dot(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    here = tmp_path / "x" / "y"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    result = CliRunner().invoke(app, ["bench", "--tasks", f"{math_file},{mc_file}", "--db", str(tmp_path / "t.db"),
                                      "--run-id", "../../esc", "--limit", "1", "--protocols", "align",
                                      "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    assert (here / "bench-______esc" / "bench.md").is_file()
    assert not (tmp_path / "esc").exists() and not list(tmp_path.glob("*/esc"))
    assert bench_cli.default_out("a\\b") == Path("bench-a_b")


def test_lambda_and_max_calls_are_checked_without_a_dev_split(tmp_path, monkeypatch):
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    for flag, value in (("--lambda", "nan"), ("--lambda", "-0.5"), ("--max-calls", "-1"), ("--max-calls", "inf")):
        got = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp_path / "t.db", tmp_path / "b", flag, value))
        # nan and inf are refused as the option is parsed, a negative value by the bench: one line each
        said = (f"error: {flag}: must be a finite number, got {value}" if value in ("nan", "inf")
                else f"error: {flag} must be a finite number >= 0, got {float(value)}")
        assert got.exit_code == 2 and got.output.strip() == said, got.output
    assert not (tmp_path / "t.db").exists()


def test_one_sample_rows_say_where_their_samples_came_from(tmp_path, monkeypatch):
    (tmp_path / "s").mkdir()
    shared = _bench(tmp_path / "s", monkeypatch, "--limit", "2", "--protocols", "council", design="--shared-candidates")
    assert shared.exit_code == 0, shared.output
    md = (tmp_path / "s" / "b" / "bench.md").read_text()
    assert "(one sample)" in md and "its k samples in the shared candidate pool" in md and "ALIGN run" not in md
    (tmp_path / "n").mkdir()
    alone = _bench(tmp_path / "n", monkeypatch, "--limit", "2", "--protocols", "council")
    assert alone.exit_code == 0, alone.output
    md = (tmp_path / "n" / "b" / "bench.md").read_text()
    assert "(one sample)" not in md and "one-sample row" not in md  # no ALIGN run, no pool: no rows
    (tmp_path / "a").mkdir()
    assert _bench(tmp_path / "a", monkeypatch, "--limit", "2", "--protocols", "align").exit_code == 0
    assert "its ALIGN candidates, on the ALIGN run's questions" in (tmp_path / "a" / "b" / "bench.md").read_text()
