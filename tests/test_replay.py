"""``agora replay`` and answer-level traces (issue 30 items 1, 3, 4): a bench run with scripted models
(tests/test_bench.py's, whose every answer is worked out by hand there) is re-decided under other
selection rules with no model call, reproduces its recorded methods exactly under their own rules,
and explains one question; old databases without the answer-level columns read the same and are
backfilled to the same values."""

import json
import shutil
import sqlite3

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.traces.comed import calibrate_run
from agora.traces.replay import paired_table, replay, reproduced
from agora.traces.replay_rules import RULES, Choice, parse_params, selection_rule
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore
from test_bench import bench_args, scripted_pool, write_tasks

ALIGN, COMED, QUIZ_ALIGN = "b1:arith:align", "b1:arith:comed", "b1:quiz:align"


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory):
    """One scripted bench (arith: 4 questions, quiz: 3), ALIGN and COMED with MoA and debate."""
    tmp = tmp_path_factory.mktemp("bench")
    math_file, mc_file = write_tasks(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
        result = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp / "t.db", tmp / "b"))
    assert result.exit_code == 0, result.output
    return tmp / "t.db"


def calls_in(db) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from model_calls").fetchone()[0]


def test_every_sample_row_carries_its_answer_how_index_and_request(bench_db):
    store = TraceStore(bench_db, readonly=True)
    rows = list(store.db.query("select * from model_calls where run_id = ? and error is null order by rowid", [ALIGN]))
    assert len(rows) == 4 * 2 * 3  # 4 questions × 2 agents × 3 samples
    q3 = [r for r in rows if r["question_id"] == "arith-3"]
    # model a (agent 0): sample 0 says 99 for i >= 3, samples 1 and 2 are right; b (agent 1): 6, 0, 0
    assert [(r["agent"], r["sample_index"], r["answer"], r["how"]) for r in q3] == [
        (0, 0, "99", "marker"), (0, 1, "6", "marker"), (0, 2, "6", "marker"),
        (1, 0, "6", "marker"), (1, 1, "0", "marker"), (1, 2, "0", "marker")]
    assert len({r["request_id"] for r in q3}) == 2 and q3[0]["request_id"] == q3[0]["call_id"]
    assert {r["request_id"] for r in q3[:3]} == {q3[0]["call_id"]}
    n = {q["question_id"]: q["n_choices"] for q in store.db.query("select * from questions where run_id like 'b1:%'")}
    assert n["mc1"] == 4 and n["arith-1"] is None


def test_replay_under_three_other_rules_prints_paired_tables_without_a_model_call(bench_db):
    before = calls_in(bench_db)
    runner = CliRunner()
    for args in (["--rule", "align", "--param", "tau=0.9", "--param", "proposal_rule=first"],
                 ["--rule", "plurality"],
                 ["--rule", "weighted_vote", "--dev-run-id", QUIZ_ALIGN, "--param", "weight=accuracy"],
                 ["--rule", "best_of_n"]):
        result = runner.invoke(app, ["replay", "--db", str(bench_db), "--run-id", ALIGN, *args])
        assert result.exit_code == 0, result.output
        assert "0 model calls" in result.output and "McNemar p" in result.output
        for method in ("align", "best_of_n", "single_agent"):
            assert f"│ {method}" in result.output
        assert "too few questions" in result.output  # 4 questions
    assert calls_in(bench_db) == before
    # the numbers, through --json: plurality over the 6 candidates is self-consistency (all right);
    # against single_agent (wrong on arith-3 and arith-4) it wins 2, loses 0
    out = json.loads(runner.invoke(app, ["replay", "--db", str(bench_db), "--run-id", ALIGN, "--rule", "plurality",
                                         "--json"]).output)
    paired = {p["method"]: p for p in out["paired"]}
    assert (paired["single_agent"]["wins"], paired["single_agent"]["losses"]) == (2, 0)
    assert paired["single_agent"]["diff"] == 0.5 and paired["single_agent"]["p_mcnemar"] == pytest.approx(0.5)
    assert paired["self_consistency"]["diff"] == 0.0 and out["identical"] == [4, 4]
    assert all(p["too_few"] for p in out["paired"])
    # weighted by quiz accuracy, Laplace-smoothed: a 3 of its 9 quiz samples right → 4/11, b 9 of 9 → 10/11.
    # arith-1: "2" has a's 3 votes and b's first (3·4/11 + 10/11 = 2.0) against "0" with b's two (20/11):
    # right. arith-3: "6" has a's two and b's first (8/11 + 10/11) against "0" (20/11): wrong
    out = json.loads(runner.invoke(app, ["replay", "--db", str(bench_db), "--run-id", ALIGN, "--rule",
                                         "weighted_vote", "--dev-run-id", QUIZ_ALIGN, "--param", "weight=accuracy",
                                         "--json"]).output)
    assert [r["answer"] for r in out["rows"]] == ["2", "4", "0", "0"]
    assert calls_in(bench_db) == before


def test_replaying_the_recorded_rules_reproduces_the_recorded_results_exactly(bench_db):
    store = TraceStore(bench_db, readonly=True)
    for run_id, pairs in ((ALIGN, {"align": "align", "best_of_n": "best_of_n", "plurality": "self_consistency",
                                    "first_sample": "single_agent"}),
                          (QUIZ_ALIGN, {"align": "align", "best_of_n": "best_of_n", "plurality": "self_consistency",
                                        "first_sample": "single_agent"}),
                          (COMED, {"comed": "comed", "plurality": "anchor"}),
                          ("b1:quiz:comed", {"comed": "comed", "plurality": "anchor"})):
        run = load_run(store, run_id)
        for rule, method in pairs.items():
            assert RULES[rule].reproduces[run.protocol] == method
            result = replay(run, rule)
            recorded = {r["question_id"]: (r["answer"], bool(r["correct"])) for r in store.results(run_id)
                        if r["method"] == method}
            assert {r.question_id: (r.answer, r.correct) for r in result.rows} == recorded, (run_id, rule)
            assert reproduced(run, result, method) == (len(recorded), len(recorded))
            same = next(p for p in paired_table(run, result) if p["method"] == method)
            assert (same["diff"], same["wins"], same["losses"], same["p_mcnemar"]) == (0.0, 0, 0, 1.0)


def test_comed_thresholds_that_need_unrecorded_branches_leave_those_questions_out(bench_db):
    run = load_run(TraceStore(bench_db, readonly=True), COMED)
    # arith: questions 1, 2 unanimous (accepted: no probe, no escalation), 3, 4 at SC 2/3 verified and the probe
    # agreed (no escalation run). Escalating below SC 1 sends 3 and 4 to an escalation never run: unavailable
    result = replay(run, "comed", parse_params(RULES["comed"], ["tau_lo=1.0", "tau_hi=1.0"], run))
    assert [r.unavailable for r in result.rows] == [None, None] + ["escalate needs the escalation, which the run "
                                                                   "did not run"] * 2
    assert [r.answer for r in result.rows][:2] == ["2", "4"]
    assert next(p for p in paired_table(run, result) if p["method"] == "comed")["questions"] == 2
    # verifying every split anchor (τ_lo 0) reads the recorded probes: the anchor's answers stand
    result = replay(run, "comed", parse_params(RULES["comed"], ["tau_hi=1.0", "tau_lo=0.0"], run))
    assert result.unavailable == 0 and [r.answer for r in result.rows] == ["2", "4", "6", "8"]
    assert "probe '6' agrees" in result.rows[2].why


def test_parameters_are_typed_and_unknown_ones_refused(bench_db):
    run = load_run(TraceStore(bench_db, readonly=True), ALIGN)
    assert parse_params(RULES["align"], [], run) == {"tau": 0.5, "proposal_rule": "plurality"}  # the run's own
    assert parse_params(RULES["align"], ["tau=0.9"], run)["tau"] == 0.9
    with pytest.raises(ValueError, match="no such parameter; it takes tau, proposal_rule"):
        parse_params(RULES["align"], ["alpha=1"], run)
    with pytest.raises(ValueError, match="not a float"):
        parse_params(RULES["align"], ["tau=high"], run)
    with pytest.raises(ValueError, match="--dev-run-id"):
        replay(run, "weighted_vote")
    result = CliRunner().invoke(app, ["replay", "--db", str(bench_db), "--run-id", ALIGN, "--rule", "vote"])
    assert result.exit_code == 2 and "unknown; choose from" in result.output


def test_a_new_rule_is_one_registered_function(bench_db):
    @selection_rule("last_agent_first_sample_test", params={"agent": 1})
    def last(q, p, ctx):
        mine = [s for s in q.samples if s.role == "agent" and s.agent == p["agent"] and s.sample_index == 0]
        return Choice(mine[0].answer if mine else None, f"agent {p['agent']}'s first sample", len(mine))

    try:
        run = load_run(TraceStore(bench_db, readonly=True), ALIGN)
        result = replay(run, "last_agent_first_sample_test")
        assert [r.answer for r in result.rows] == ["2", "4", "6", "8"]  # b's sample 0 is right
        assert all(r.correct for r in result.rows)
        with pytest.raises(ValueError, match="already registered"):
            selection_rule("last_agent_first_sample_test")(last)
    finally:
        RULES.pop("last_agent_first_sample_test")


def test_report_question_shows_every_candidate_its_answer_and_why_each_method_chose(bench_db):
    result = CliRunner().invoke(app, ["report", "question", "--db", str(bench_db), "--run-id", ALIGN,
                                      "--question-id", "arith-3"], terminal_width=250)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "gold 6" in out and "candidates" in out and "│ 99 " in out and "│ 0 " in out
    assert "rule align: agent" in out and "rule plurality" in out
    data = json.loads(CliRunner().invoke(app, ["report", "question", "--db", str(bench_db), "--run-id", ALIGN,
                                               "--question-id", "arith-3", "--json"]).output)
    assert [(s["answer"], s["votes"], s["correct"]) for s in data["samples"]] == [
        ("99", 1, False), ("6", 3, True), ("6", 3, True), ("6", 3, True), ("0", 2, False), ("0", 2, False)]
    why = {m["method"]: m["why"] for m in data["methods"]}
    assert why["self_consistency"].startswith("rule plurality: 0.50 of 6 votes; '6'×3, '0'×2, '99'×1")
    assert "[replay gives" not in "".join(why.values())
    comed = json.loads(CliRunner().invoke(app, ["report", "question", "--db", str(bench_db), "--run-id",
                                                "b1:quiz:comed", "--question-id", "mc1", "--json"]).output)
    why = {m["method"]: m["why"] for m in comed["methods"]}
    assert "SC 0.33 → escalate" in why["comed"] and why["moa"].startswith("recorded")
    missing = CliRunner().invoke(app, ["report", "question", "--db", str(bench_db), "--run-id", ALIGN,
                                       "--question-id", "nope"])
    assert missing.exit_code == 2 and "no recorded question 'nope'" in missing.output


def test_report_run_is_a_compact_summary(bench_db):
    result = CliRunner().invoke(app, ["report", "run", ALIGN, "--db", str(bench_db)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "4 questions recorded, 0 failed" in result.output and "too few questions" in result.output
    assert "samples' answers found by: marker 24 (100%)" in result.output
    assert "questions where the methods disagree: 2" in result.output  # single_agent differs on arith-3, -4


def test_old_databases_read_the_same_and_backfill_to_the_same_values(bench_db, tmp_path):
    old = tmp_path / "old.db"
    shutil.copy(bench_db, old)
    for suffix in ("-wal", "-shm"):
        if (bench_db.parent / (bench_db.name + suffix)).exists():
            shutil.copy(bench_db.parent / (bench_db.name + suffix), tmp_path / ("old.db" + suffix))
    with sqlite3.connect(old) as conn:  # the schema before issue 30
        for col in ("answer", "how", "sample_index", "request_id"):
            conn.execute(f"alter table model_calls drop column {col}")
        conn.execute("alter table questions drop column n_choices")
    new_store, old_store = TraceStore(bench_db, readonly=True), TraceStore(old, readonly=True)
    for run_id, rule in ((ALIGN, "align"), (QUIZ_ALIGN, "plurality"), (COMED, "comed")):
        assert replay(load_run(old_store, run_id), rule) == replay(load_run(new_store, run_id), rule)
    old_store.close()
    result = CliRunner().invoke(app, ["traces", "backfill", "--db", str(old)])
    assert result.exit_code == 0, result.output
    cols = "call_id, answer, how, sample_index, request_id"
    want = list(new_store.db.query(f"select {cols} from model_calls where error is null and question_id not like "
                                   "'%:%' order by call_id"))
    got = list(TraceStore(old, readonly=True).db.query(f"select {cols} from model_calls where error is null and "
                                                      "question_id not like '%:%' order by call_id"))
    assert got == want and len(got) > 50
    assert "0 model calls" in CliRunner().invoke(app, ["traces", "backfill", "--db", str(old)]).output  # once only


def test_comed_calibration_is_a_replay_over_its_dev_run(tmp_path, monkeypatch):
    _, mc_file = write_tasks(tmp_path, n_math=1, n_mc=4)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    result = CliRunner().invoke(app, ["bench", "--tasks", str(mc_file), "--dev", "2", "--db",
                                      str(tmp_path / "t.db"), "--out", str(tmp_path / "b"), "--run-id", "c",
                                      "--protocols", "comed", "--max-tokens", "16", "--limit", "2",
                                      "--no-shared-candidates"])  # the first pool model anchors, as scripted
    assert result.exit_code == 0, result.output
    store = TraceStore(tmp_path / "t.db", readonly=True)
    cal = calibrate_run(store, "c:quiz:comed-dev", lam=0.01)
    # dev: SC 1/3 and every escalation rescues; the chosen thresholds escalate both, as the replay shows
    assert (cal.chosen.rescues, cal.chosen.harms) == (2, 0)
    assert [r.answer for r in cal.replayed.rows] == ["A", "A"] and all(r.correct for r in cal.replayed.rows)
    spec = json.loads((tmp_path / "b" / "bench.json").read_text())["calibration"]
    quiz = next(c for c in spec if c["scope"] == "quiz")
    assert quiz["thresholds"] == {k: getattr(cal.chosen.thresholds, k) for k in ("tau_hi", "tau_lo", "m_min")}


@pytest.mark.slow
def test_replay_on_a_tiny_pool_bench_calls_no_model_and_reproduces_it(shared_data, tmp_path):
    """The issue's done-when on real models: `agora bench --pool tiny --limit 2`, then three other rules."""
    from agora.tasks.samples import sample_path

    gsm8k, _ = sample_path("gsm8k")
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, [
        "bench", "--tasks", f"{gsm8k},{shared_data / 'arc' / 'arc_challenge_test.jsonl'}", "--limit", "2", "--pool",
        "tiny", "--db", str(db), "--out", str(tmp_path / "b"), "--run-id", "e2e", "--agents", "2", "--samples", "2",
        "--max-tokens", "24", "--probe-max-tokens", "8", "--protocols", "align,comed"])
    assert result.exit_code == 0, result.output
    before = calls_in(db)
    runs = ("e2e:gsm8k_test_sample:align", "e2e:arc_challenge_test:align")
    for run_id in runs:
        dev_run = runs[1] if run_id == runs[0] else runs[0]  # weights from the other task's run, never its own
        for args in (["--rule", "align", "--param", "tau=0.9"], ["--rule", "plurality"],
                     ["--rule", "weighted_vote", "--dev-run-id", dev_run]):
            out = CliRunner().invoke(app, ["replay", "--db", str(db), "--run-id", run_id, *args])
            assert out.exit_code == 0 and "McNemar p" in out.output, out.output
        run = load_run(TraceStore(db, readonly=True), run_id)
        for rule, method in (("align", "align"), ("best_of_n", "best_of_n"), ("plurality", "self_consistency"),
                             ("first_sample", "single_agent")):
            assert reproduced(run, replay(run, rule), method) == (2, 2), (run_id, rule)
    assert calls_in(db) == before


def test_score_results_gives_none_for_a_failed_method_and_false_for_a_wrong_one():
    from agora.tasks.scoring import score_results
    from agora.tasks.problem import Problem

    p = Problem(id="q", question="1+1?", gold="2", kind="math")
    out = score_results({"a": {"answer": None, "samples": 0}, "b": {"answer": "3", "samples": 2},
                         "c": {"answer": "2", "samples": 2}}, p)
    assert [out[m]["correct"] for m in "abc"] == [None, False, True]


def test_the_slm_mux_rule_reproduces_comeds_slm_mux_baseline(bench_db):
    store = TraceStore(bench_db, readonly=True)
    for run_id in (COMED, "b1:quiz:comed"):
        run = load_run(store, run_id)
        recorded = {r["question_id"]: (r["answer"], bool(r["correct"])) for r in store.results(run_id)
                    if r["method"] == "slm-mux"}
        assert recorded, run_id
        result = replay(run, "slm_mux")
        assert {r.question_id: (r.answer, r.correct) for r in result.rows} == recorded, run_id
        assert reproduced(run, result, "slm-mux") == (len(recorded), len(recorded))
        # its members are SLM-MUX's own (node mux_sample), not the council's members (role member too)
        assert all(r.samples == len([s for s in q.samples if s.node == "mux_sample"])
                   for r, q in zip(result.rows, run.questions))


@pytest.mark.parametrize("prior", ["nan", "inf"])
def test_a_weighted_vote_prior_that_is_not_a_finite_number_is_refused(prior):
    """--param prior=nan passed the '>= 0' check (nan < 0 is false): every weight became nan, no
    tally was close to the best, and the vote raised StopIteration (a traceback); inf did the same."""
    from types import SimpleNamespace

    from agora.traces.replay_rules import ReplayContext

    samples = [SimpleNamespace(role="agent", agent=0, model="a", sample_index=i, answer=ans, how="marker")
               for i, ans in enumerate(["4", "4", "5"])]
    ctx = ReplayContext(run=SimpleNamespace(protocol="align"), model_accuracy={"a": (3, 4)})
    rule = RULES["weighted_vote"]
    params = parse_params(rule, ["weight=accuracy", f"prior={prior}"])
    with pytest.raises(ValueError, match=f"--param prior={prior}: must be a finite number >= 0"):
        rule.decide(SimpleNamespace(samples=samples), params, ctx)
    assert rule.decide(SimpleNamespace(samples=samples), parse_params(rule, ["prior=1"]), ctx).answer == "4"
