"""``agora replay --rule align`` on ALIGN runs recorded with the ``calibrated`` utility: replay weighs
each proposal by the member reliabilities the run recorded (its ``dev_accuracy``, or its dev run),
as the run did, and refuses in one line when they cannot be read. Scripted models only.

By hand: one question (gold 7); member a says 12 three times, b says 7 three times, so agent 0 (a)
proposes 12 and agent 1 (b) proposes 7, each with share 1. Agreement: U(12) = U(7) = 1/2, a tie
that goes to agent 0's 12. Calibrated with a = 0.25, b = 0.75: U(12) = 0.25, U(7) = 0.75, so 7;
with the dev run below (a 0 of 3 right, b 3 of 3): U(12) = 0, U(7) = 1, so 7."""

import json

import pytest

import agora.cli.align as align_cli
from agora.traces.replay import replay, reproduced
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore
from cli_runs import agora, one_error_line
from test_align_principal import pool_of


@pytest.fixture
def data(tmp_path, monkeypatch):
    pool, _ = pool_of(a=["The answer is 12."], b=["The answer is 7."], agg=["The answer is 12."])
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Tom has 3 apples and buys 4 more. How many?",
                                "answer": "#### 7"}) + "\n")
    return path


def run_align(data, db, run_id, *extra):
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", run_id, "--models", "a,b",
                         "--concurrency", "1", *extra)
    assert code == 0, output
    return load_run(TraceStore(db, readonly=True), run_id)


def test_a_calibrated_run_replays_with_its_recorded_dev_accuracy(data, tmp_path):
    db = tmp_path / "t.db"
    run = run_align(data, db, "C", "--utility", "calibrated", "--dev-accuracy", "a=0.25,b=0.75")
    assert run.config["utility"] == "calibrated"
    result = replay(run, "align")
    assert [(r.answer, r.correct) for r in result.rows] == [("7", True)]  # the agreement rule would give 12
    assert reproduced(run, result, "align") == (1, 1)
    assert result.rows[0].why == ("agent 1's proposal, U 0.75 >= τ 0.5; proposals: agent 0 '12' (share 1.00, U 0.25); "
                                  "agent 1 '7' (share 1.00, U 0.75)")
    # best-of-n·k over the 6 candidates under the same U: 7 (U 0.75), as the run recorded
    best = replay(run, "best_of_n")
    assert [r.answer for r in best.rows] == ["7"] and reproduced(run, best, "best_of_n") == (1, 1)
    # the agreement utility, asked for deliberately: the tie goes to agent 0's 12
    code, output = agora("replay", "--db", db, "--run-id", "C", "--rule", "align", "--param", "utility=agreement",
                         "--json")
    assert code == 0, output
    out = json.loads(output)
    assert [r["answer"] for r in out["rows"]] == ["12"] and out["identical"] == [0, 1]
    code, output = agora("replay", "--db", db, "--run-id", "C", "--rule", "align", "--json")
    assert code == 0 and json.loads(output)["identical"] == [1, 1], output


def test_a_calibrated_run_replays_with_its_dev_run_and_refuses_once_it_is_gone(data, tmp_path):
    dev_db = tmp_path / "dev.db"
    run_align(data, dev_db, "D")  # a: 0 of 3 samples right, b: 3 of 3
    db = tmp_path / "t.db"
    run = run_align(data, db, "C", "--utility", "calibrated", "--dev-run", "D", "--dev-db", dev_db)
    result = replay(run, "align")
    assert [r.answer for r in result.rows] == ["7"]
    assert "U 1.00 >= τ 0.5" in result.rows[0].why and "agent 0 '12' (share 1.00, U 0.00)" in result.rows[0].why
    dev_db.rename(tmp_path / "moved.db")
    code, output = agora("replay", "--db", db, "--run-id", "C", "--rule", "align")
    assert code == 2
    assert one_error_line(output) == (
        f"error: run 'C' was recorded with utility = calibrated, and replay cannot read its member reliabilities "
        f"(dev run 'D': trace database {dev_db} not found); give --param utility=agreement to replay it under the "
        "agreement utility instead")
    code, output = agora("replay", "--db", db, "--run-id", "C", "--rule", "align", "--param", "utility=agreement",
                         "--json")
    assert code == 0 and [r["answer"] for r in json.loads(output)["rows"]] == ["12"], output


def test_a_model_principal_on_a_calibrated_run_keeps_its_answer_and_shows_the_calibrated_u(data, tmp_path):
    db = tmp_path / "t.db"
    dev_db = tmp_path / "dev.db"
    run_align(data, dev_db, "D")
    run = run_align(data, db, "P", "--utility", "calibrated", "--dev-run", "D", "--dev-db", dev_db,
                    "--principal", "agg")
    result = replay(run, "align")
    assert [r.answer for r in result.rows] == ["12"]  # agg's, not the calibrated rule's 7
    assert reproduced(run, result, "align") == (1, 1)
    assert result.rows[0].why == ("the model principal agg answered '12' (recorded, not asked again; agent 0's "
                                  "proposal, U 0.00 < τ 0.5, its answer stands either way); proposals: agent 0 '12' "
                                  "(share 1.00, U 0.00); agent 1 '7' (share 1.00, U 1.00)")
    dev_db.rename(tmp_path / "moved.db")  # the U cannot be recomputed: the answer stands, no U is shown
    result = replay(run, "align")
    assert [r.answer for r in result.rows] == ["12"]
    assert result.rows[0].why == ("the model principal agg answered '12' (recorded, not asked again; agent 0's "
                                  "proposal, calibrated U not recomputed: the run's member reliabilities cannot be "
                                  "read, its answer stands either way); proposals: agent 0 '12' (share 1.00); "
                                  "agent 1 '7' (share 1.00)")


def test_calibrated_asked_of_an_agreement_run_without_reliabilities_is_refused(data, tmp_path):
    db = tmp_path / "t.db"
    run_align(data, db, "R")
    code, output = agora("replay", "--db", db, "--run-id", "R", "--rule", "align", "--param", "utility=calibrated")
    assert code == 2
    assert one_error_line(output) == (
        "error: --param utility=calibrated on run 'R': replay cannot read its member reliabilities (no dev accuracy "
        "for member(s) a, b in its dev_accuracy); give --param utility=agreement to replay it under the agreement "
        "utility instead")
    code, output = agora("replay", "--db", db, "--run-id", "R", "--rule", "align", "--param", "utility=best")
    assert (code, one_error_line(output)) == (2, "error: --param utility=best: choose from agreement, calibrated")
