"""Replay and the reports of a bench's runs that took the shared candidates (issue 32): their first
samples' rows live in the candidates run only, and the trace tools read them from there, mapped as
the protocol took them (agent i on model j: that model's j-th share; COMED's anchor: its first N)."""

import json
import sqlite3

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.runs.shared import SHARED_KEY
from agora.traces import shared_candidates as trace_report
from agora.traces.replay import replay, reproduced
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore
from test_bench_shared import TINY, args, scripted_tiny, write_math

A, B = TINY


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory):
    """One scripted bench (default design: shared candidates, ALIGN and COMED with its baselines)."""
    tmp = tmp_path_factory.mktemp("shared")
    f = write_math(tmp)
    mp = pytest.MonkeyPatch()
    mp.setattr(bench_cli, "get_pool", lambda path: scripted_tiny())
    try:
        result = CliRunner().invoke(app, args(f, tmp / "t.db", tmp / "b", "--limit", "3"))
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return tmp / "t.db"


def agora(*argv):
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "250"})
    return result.exit_code, result.output


def test_the_key_is_the_benchs(bench_db):
    assert trace_report.SHARED_KEY == SHARED_KEY
    config = json.loads(TraceStore(bench_db).get_run("s1:arith:align")["config"])
    assert config[SHARED_KEY] == "s1:arith:candidates"


@pytest.mark.parametrize("run_id, rule, method", [
    ("s1:arith:align", "align", "align"), ("s1:arith:align", "plurality", "self_consistency"),
    ("s1:arith:align", "first_sample", "single_agent"), ("s1:arith:comed", "comed", "comed"),
    ("s1:arith:comed", "plurality", "anchor"), ("s1:arith:candidates", "plurality", "candidates")])
def test_replaying_the_recorded_rule_reproduces_every_answer(bench_db, run_id, rule, method):
    run = load_run(TraceStore(bench_db, readonly=True), run_id)
    assert reproduced(run, replay(run, rule), method) == (3, 3)
    code, out = agora("replay", "--db", str(bench_db), "--run-id", run_id, "--rule", rule)
    assert code == 0 and f"answers identical to the recorded {method}: 3/3 questions" in out


def test_the_align_agents_take_their_models_samples_in_order(bench_db):
    store = TraceStore(bench_db, readonly=True)
    q = load_run(store, "s1:arith:align", ["arith-1"]).questions[0]
    # scripted: A is right on samples 1, 2 (else 99), B on sample 0 (else 0); "What is 1 + 1?"
    assert [(s.agent, s.model, s.sample_index, s.answer, s.role) for s in q.samples] == [
        (0, A, 0, "99", "agent"), (0, A, 1, "2", "agent"), (0, A, 2, "2", "agent"),
        (1, B, 0, "2", "agent"), (1, B, 1, "0", "agent"), (1, B, 2, "0", "agent")]
    rows = {r["call_id"]: r for r in store.db.query("select call_id, run_id, model, sample_index from model_calls")}
    assert all(rows[s.call_id]["run_id"] == "s1:arith:candidates" and s.shared_from == "s1:arith:candidates"
               for s in q.samples)


def test_comeds_anchor_takes_its_models_first_n_and_first_sample_is_the_anchors_first(bench_db):
    store = TraceStore(bench_db, readonly=True)
    run = load_run(store, "s1:arith:comed")
    result = replay(run, "first_sample")
    for q, row in zip(run.questions, result.rows):
        anchor = q.detail["anchor"]
        assert [s.answer for s in q.of("anchor")] == anchor["answers"] and len(anchor["answers"]) == 3
        assert {s.model for s in q.of("anchor")} == {q.detail["route"]["anchor"]}
        assert row.answer == anchor["answers"][0] and row.samples == 1


def test_report_run_counts_the_shared_calls_beside_its_own(bench_db):
    code, out = agora("report", "run", "s1:arith:align", "--db", str(bench_db))
    text = " ".join(out.split())
    assert code == 0 and "0 model calls (one per sample; 0 failed attempts), 0 generated tokens" in text
    # 2 agents × 3 samples × 3 questions, 4 tokens each (scripted)
    assert "shared: 18 model calls, 72 generated tokens taken by its agents from the bench's shared candidates " \
           "(s1:arith:candidates;" in text
    s = json.loads(agora("report", "run", "s1:arith:comed", "--db", str(bench_db), "--json")[1])
    assert s["shared"] == {"shared_from": "s1:arith:candidates", "shared_calls": 9, "shared_prompt_tokens":
                           s["shared"]["shared_prompt_tokens"], "shared_completion_tokens": 36}
    # per method, the samples it took from the shared pool: the anchor's 3, MoA's proposers and the council's
    # members one per model (2), debate's first round one per agent (3, models round-robin), SLM-MUX's members
    # k = N = 3 per model (6)
    assert {m["method"]: m["shared_samples_per_question"] for m in s["methods"]} == {
        "anchor": 3.0, "comed": 3.0, "council": 2.0, "council_top": 2.0, "council_vote": 2.0, "debate": 3.0, "moa": 2.0,
        "slm-mux": 6.0, "mux_vote": 6.0}
    code, out = agora("report", "run", "s1:arith:comed", "--db", str(bench_db))
    assert code == 0 and "taken by its anchor from the bench's shared candidates" in " ".join(out.split())
    assert "shared/q" in out
    c = json.loads(agora("report", "run", "s1:arith:candidates", "--db", str(bench_db), "--json")[1])
    assert c["shared"]["shared_from"] is None and c["totals"]["calls"] == 18


def test_report_question_lists_the_shared_candidates_and_the_rules_agree(bench_db):
    code, out = agora("report", "question", "--db", str(bench_db), "--run-id", "s1:arith:align", "--question-id",
                      "arith-1", "--json")
    r = json.loads(out)
    assert code == 0 and len(r["samples"]) == 6
    assert {s["shared_from"] for s in r["samples"]} == {"s1:arith:candidates"}
    assert all("replay gives" not in m["why"] for m in r["methods"]) and {m["method"] for m in r["methods"]} >= {
        "align", "self_consistency", "single_agent"}
    code, out = agora("report", "question", "--db", str(bench_db), "--run-id", "s1:arith:align", "--question-id",
                      "arith-1")
    text = " ".join(out.split())
    assert code == 0 and "* taken from the bench's shared candidates: the row is in s1:arith:candidates" in text
    assert out.count("*") == 7  # each of the 6 samples marked, and the note


def test_the_candidates_run_replays_under_its_own_role_by_default(bench_db):
    code, out = agora("replay", "--db", str(bench_db), "--run-id", "s1:arith:candidates", "--rule", "first_sample")
    assert code == 0 and "no samples of role" not in out


def test_a_mapping_that_cannot_be_rebuilt_is_refused_in_one_line(bench_db, tmp_path):
    broken = tmp_path / "broken.db"
    with sqlite3.connect(bench_db) as src, sqlite3.connect(broken) as dst:
        src.backup(dst)
    with sqlite3.connect(broken) as db:
        db.execute("delete from model_calls where run_id = 's1:arith:candidates' and question_id = 'arith-2' "
                   "and model = ?", [B])
    code, out = agora("replay", "--db", str(broken), "--run-id", "s1:arith:align", "--rule", "align")
    assert code == 2 and "run 's1:arith:align' took shared candidates from 's1:arith:candidates', but question " \
                         "'arith-2'" in " ".join(out.split())
    with sqlite3.connect(broken) as db:
        db.execute("delete from runs where run_id = 's1:arith:candidates'")
    code, out = agora("report", "run", "s1:arith:comed", "--db", str(broken))
    assert code == 2 and "that run is not in this database" in out


def test_a_dev_split_benchs_calibration_and_routed_runs_replay_from_their_own_draws(tmp_path, monkeypatch):
    """With --dev the calibration run took the dev draw, the routed COMED its per-question anchor's."""
    f = write_math(tmp_path, n=6)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_tiny(a_right=lambda i, j: False,
                                                                          b_right=lambda i, j: j != 1))
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, args(f, db, tmp_path / "b", "--limit", "3", "--dev", "3", "--embedding", "tfidf",
                                          "--protocols", "align,comed"))
    assert result.exit_code == 0, result.output
    store = TraceStore(db, readonly=True)
    for run_id, rule, method in [("s1:arith:comed-dev", "comed", "comed"), ("s1:arith:comed-dev", "plurality", "anchor"),
                                 ("s1:arith:comed-routed", "first_sample", "router_only"),
                                 ("s1:arith:comed-routed", "comed", "comed")]:
        run = load_run(store, run_id)
        assert reproduced(run, replay(run, rule), method) == (3, 3), (run_id, rule)
    assert {s.shared_from for q in load_run(store, "s1:arith:comed-dev").questions for s in q.samples
            if s.role == "anchor"} == {"s1:arith:candidates-dev"}
    assert trace_report.shared_totals(store, "s1:arith:comed-routed")["shared_calls"] == 9  # 3 anchor samples × 3


def test_comeds_slm_mux_baseline_on_shared_samples_replays_from_the_members_shares(bench_db):
    run = load_run(TraceStore(bench_db, readonly=True), "s1:arith:comed")
    result = replay(run, "slm_mux")  # its members took the shared candidates: each model's first N = 3
    assert [r.unavailable for r in result.rows] == [None] * 3 and [r.samples for r in result.rows] == [6] * 3
    assert reproduced(run, result, "slm-mux") == (3, 3)
    code, out = agora("report", "question", "--db", str(bench_db), "--run-id", "s1:arith:comed", "--question-id",
                      "arith-1", "--json")
    why = {m["method"]: m["why"] for m in json.loads(out)["methods"]}
    assert code == 0 and why["slm-mux"].startswith("rule slm_mux: member 0 (smollm2-135m) is the most self-consistent")
