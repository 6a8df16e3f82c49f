"""Every ``agora report`` subcommand that takes a run takes it as ``--run-id`` (the older spellings,
``report run RUN_ID`` and ``report diversity --run``, still work)."""

import json

from typer.testing import CliRunner

from agora.cli.main import app
from agora.traces.store import TraceStore


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def two_runs(path):
    """Two one-model runs, a (2 questions, answers 4 and 5, gold 4) and b (1 question)."""
    store = TraceStore(path)
    for run, n in (("a", 2), ("b", 1)):
        store.start_run(run, "sc", config={}, dataset={}, pool=[{"name": "m", "family": "f"}])
        for q in range(n):
            calls = [{"call_id": f"{run}{q}", "model": "m", "node": "sample", "role": "sample",
                      "completion": f"The answer is {4 + q}."}]
            store.record_question(run, "sc", {"question_id": f"q{q}", "idx": q, "kind": "math", "gold": "4",
                                              "question": "What is 2 + 2?"},
                                  {"sc": {"answer": str(4 + q), "correct": q == 0, "samples": 1}}, calls)
        store.finish_run(run)
    store.close()
    return path


def test_report_run_takes_run_id_as_option_or_argument(tmp_path):
    db = two_runs(tmp_path / "t.db")
    by_option = invoke("report", "run", "--run-id", "a", "--db", db, "--json")
    by_argument = invoke("report", "run", "a", "--db", db, "--json")
    assert by_option.exit_code == 0, by_option.output
    assert by_option.output == by_argument.output
    s = json.loads(by_option.output)
    assert s["run_id"] == "a" and int(s["totals"]["questions"]) == 2
    assert invoke("report", "run", "a", "--run-id", "a", "--db", db, "--json").output == by_option.output
    both = invoke("report", "run", "a", "--run-id", "b", "--db", db)
    assert both.exit_code == 2
    assert both.output.strip() == "error: RUN_ID 'a' and --run-id 'b' name different runs: give one"
    neither = invoke("report", "run", "--db", db)
    assert neither.exit_code == 2
    assert neither.output.strip() == "error: no run given: `agora report run --run-id RUN_ID` (see `agora report runs`)"


def test_report_question_takes_run_id(tmp_path):
    db = two_runs(tmp_path / "t.db")
    r = invoke("report", "question", "--run-id", "a", "--question-id", "q1", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    q = json.loads(r.output)
    assert [s["answer"] for s in q["samples"]] == ["5"]


def test_report_diversity_takes_run_id_and_still_run(tmp_path):
    db = two_runs(tmp_path / "t.db")
    new = invoke("report", "diversity", "--db", db, "--out", tmp_path / "o1", "--run-id", "b")
    old = invoke("report", "diversity", "--db", db, "--out", tmp_path / "o2", "--run", "b")
    assert new.exit_code == 0, new.output
    assert "1 responses (0 with a partner) from 1 run(s)" in new.output
    assert new.output.replace("o1", "o2") == old.output
    both = invoke("report", "diversity", "--db", db, "--out", tmp_path / "o3", "--run-id", "a", "--run", "b")
    assert both.exit_code == 0 and "3 responses (0 with a partner) from 2 run(s)" in both.output


def test_report_duels_takes_run_id(tmp_path):
    TraceStore(tmp_path / "t.db").close()
    r = invoke("report", "duels", "--db", tmp_path / "t.db", "--out", tmp_path / "plots", "--run-id", "d")
    assert r.exit_code == 2 and "No such option" not in r.output and "no duel runs" in r.output


def test_traces_backfill_refuses_a_run_id_the_database_does_not_hold(tmp_path):
    """`agora traces backfill --run-id nope` said '0 model calls and 0 questions filled' (exit 0): a
    mistyped run id did nothing without a word."""
    db = two_runs(tmp_path / "t.db")
    result = invoke("traces", "backfill", "--db", db, "--run-id", "a", "--run-id", "nope")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {db}: no run 'nope' (`agora report runs` lists them)"
    result = invoke("traces", "backfill", "--db", db, "--run-id", "a")
    assert result.exit_code == 0 and "0 model calls and 0 questions filled" in result.output, result.output
