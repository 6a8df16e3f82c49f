"""ALIGN's model principal in ``agora bench --principal`` and in ``agora replay``: the bench records
it and its report names it, a resumed bench keeps it, benches without it record and resume as
before; replaying a model-principal run gives the principal's recorded answers, never the utility
rule's. Scripted models only (tests/test_bench.py's a and b, plus a principal ``agg``)."""

import json
import re
import threading

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.bench_spec import read_bench_spec
from agora.traces.question_report import question_report
from agora.traces.replay import replay, reproduced
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore
from test_bench import scripted_pool, write_tasks

ALIGN = "b1:arith:align"
#: What an ALIGN run recorded before the principal existed (tests/test_align_principal.py's
#: OLD_RECORD, with the bench's settings and JSON's lists).
OLD_BENCH_RECORD = {"n_agents": 2, "k_samples": 3, "tau": 0.5, "proposal_rule": "plurality", "utility": "agreement",
                    "temperature": 0.7, "top_p": 0.95, "max_tokens": 16, "shots": 2, "seed": 0, "models": [],
                    "dev_accuracy": [], "dev_run": None, "dev_db": None}


def principal_pool(counter=None):
    """tests/test_bench.py's models a and b (ALIGN's agents 0 and 1), and ``agg``, the principal:
    on "What is i + i?" it answers 2i, except on i = 4, where it answers 0 (agent 1's proposal).

    By hand, arith (4 questions): agent 0 (a) samples 2i, 2i, 2i for i <= 2 and 99, 2i, 2i for i >= 3,
    so it proposes 2i (share 1 or 2/3); agent 1 (b) samples 2i, 0, 0 and proposes 0 (share 2/3). The
    utility rule takes 2i every time (U 0.6, or a tie at 0.5 to agent 0): 4 of 4 right. With agg
    as principal ALIGN answers 2, 4, 6, 0: 3 of 4 right, arith-4 from agent 1's proposal."""
    lock = threading.Lock()

    def agg(chat, i):
        if counter is not None:
            with lock:
                counter["agg"] = counter.get("agg", 0) + 1
        n = int(re.search(r"What is (\d+) \+", chat[-1]["content"]).group(1))
        return f"The answer is {0 if n == 4 else 2 * n}."

    models = {m.spec.name: m.chat_model for m in scripted_pool(counter)}
    return ModelPool.from_chat_models({**models, "agg": ScriptedChatModel(respond=agg, latency_s=0.001)})


def bench(tmp_path, monkeypatch, *extra, counter=None, db="t.db"):
    """``agora bench`` on the arith file with ``principal_pool``: ALIGN and its baselines only, each
    protocol drawing its own samples unless ``extra`` says ``--shared-candidates``."""
    math_file, _ = write_tasks(tmp_path)
    extra = extra if "--shared-candidates" in extra else ("--no-shared-candidates", *extra)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: principal_pool(counter))
    result = CliRunner().invoke(app, ["bench", "--tasks", str(math_file), "--db", str(tmp_path / db), "--out",
                                      str(tmp_path / "b"), "--run-id", "b1", "--max-tokens", "16",
                                      "--protocols", "align", "--round-size", "0", *extra])
    return result.exit_code, result.output


@pytest.fixture
def principal_bench(tmp_path, monkeypatch):
    code, output = bench(tmp_path, monkeypatch, "--principal", "agg")
    assert code == 0, output
    return tmp_path / "t.db", output


def test_bench_principal_answers_for_align_and_the_report_names_it(principal_bench, tmp_path):
    db, output = principal_bench
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    cells = {c["method"]: c for c in report["cells"]}
    assert cells["align"]["accuracy"] == 0.75  # 2, 4, 6 right; arith-4: agg's 0
    # the baselines draw on the same candidates and use no principal (tests/test_bench.py's values)
    assert cells["single_agent"]["accuracy"] == 0.5 and cells["self_consistency"]["accuracy"] == 1.0
    assert cells["align"]["samples_per_q"] == 7.0 and cells["best_of_n"]["samples_per_q"] == 6.0  # + agg's call
    store = TraceStore(db, readonly=True)
    calls = list(store.db.query("select question_id, node, model, answer from model_calls where run_id = ? and "
                                "role = 'principal' order by question_id", [ALIGN]))
    assert calls == [{"question_id": f"arith-{i}", "node": "principal_select", "model": "agg",
                      "answer": "0" if i == 4 else str(2 * i)} for i in range(1, 5)]
    assert json.loads(store.get_run(ALIGN)["config"]) == {**OLD_BENCH_RECORD, "principal": "agg"}
    assert read_bench_spec(store, "b1").settings["align"]["principal"] == "agg"
    assert report["settings"]["align"]["principal"] == "agg"
    line = ("ALIGN's answers are the model principal `agg`'s: it reads each question and the agents' proposals and "
            "answers (one more call per question, counted in align's cost), in place of the utility rule; the other "
            "ALIGN methods use no principal.")
    assert line in (tmp_path / "b" / "bench.md").read_text()
    assert "ALIGN settings: n_agents = 2" in (tmp_path / "b" / "bench.md").read_text()
    assert "principal = agg" in (tmp_path / "b" / "bench.md").read_text()
    assert "the model principal agg reads the agents' proposals" in report["sharing"]["align"]
    assert "ALIGN's answers are the model principal agg's" in " ".join(output.split())


def test_a_resumed_bench_keeps_its_principal(principal_bench, tmp_path, monkeypatch):
    db, _ = principal_bench
    before = (tmp_path / "b" / "bench.json").read_text()
    again = {}
    code, output = bench(tmp_path, monkeypatch, "--principal", "agg", counter=again)
    assert code == 0, output
    assert again == {}  # every question recorded: not one model call
    after = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert after["cells"] == json.loads(before)["cells"] and after["settings"]["align"]["principal"] == "agg"
    # the report from the DB alone names it too
    result = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(db), "--report-only", "--out",
                                      str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert "model principal `agg`" in (tmp_path / "again" / "bench.md").read_text()
    # resuming it without the principal (or with another) would mix two ALIGNs: refused, nothing run
    for extra in ((), ("--principal", "a")):
        code, output = bench(tmp_path, monkeypatch, *extra, counter=again)
        assert code == 2 and "principal" in output and "nothing was run or recorded" in " ".join(output.split()), output
        assert again == {}


def test_the_default_shared_bench_takes_the_principal_too_and_replays_it(tmp_path, monkeypatch):
    """One candidate pool per question (the default design): the agents take a's and b's shared
    samples, which are the same answers as above, and agg answers as above."""
    code, output = bench(tmp_path, monkeypatch, "--principal", "agg", "--shared-candidates")
    assert code == 0, output
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert {c["method"]: (c["accuracy"], c["samples_per_q"]) for c in report["cells"]} == {
        "align": (0.75, 7.0), "single_agent": (0.5, 1.0), "self_consistency": (1.0, 6.0), "best_of_n": (1.0, 6.0)}
    assert report["sharing"]["align"] == (
        "the shared pool (k samples per model and question, drawn once): ALIGN's n·k candidates are its agents' "
        "models' shares; the model principal agg reads the agents' proposals and answers (one more call per "
        "question, its own)")
    run = load_run(TraceStore(tmp_path / "t.db", readonly=True), ALIGN)
    result = replay(run, "align")
    assert [r.answer for r in result.rows] == ["2", "4", "6", "0"] and reproduced(run, result, "align") == (4, 4)


def test_a_bench_without_principal_records_and_resumes_as_before(tmp_path, monkeypatch):
    counter = {}
    code, output = bench(tmp_path, monkeypatch, counter=counter)
    assert code == 0, output
    assert "agg" not in counter  # the pool's agg is no ALIGN agent (n = 2) and no principal
    store = TraceStore(tmp_path / "t.db", readonly=True)
    assert json.loads(store.get_run(ALIGN)["config"]) == OLD_BENCH_RECORD  # no principal key
    settings = read_bench_spec(store, "b1").settings
    assert "principal" not in settings["align"] and "model principal" not in (tmp_path / "b" / "bench.md").read_text()
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert {c["method"]: c["accuracy"] for c in report["cells"]}["align"] == 1.0
    assert report["sharing"]["align"] == "ALIGN's n·k candidates (the principal's pick among all of them)"
    # the existing spec and runs, without the field, resume: no model call, the same cells
    again = {}
    code, output = bench(tmp_path, monkeypatch, counter=again)
    assert code == 0, output
    assert again == {}
    assert json.loads((tmp_path / "b" / "bench.json").read_text())["cells"] == report["cells"]


def test_bench_refuses_a_principal_not_in_the_pool_in_one_line(tmp_path, monkeypatch):
    code, output = bench(tmp_path, monkeypatch, "--principal", "nobody")
    assert (code, output) == (2, "error: --principal: 'nobody' is not in the pool (a, b, agg)\n")
    assert not (tmp_path / "t.db").exists()  # before the trace DB is opened
    math_file, _ = write_tasks(tmp_path)
    result = CliRunner().invoke(app, ["bench", "--tasks", str(math_file), "--db", str(tmp_path / "t.db"),
                                      "--protocols", "comed", "--principal", "agg"])
    assert result.exit_code == 2 and result.output == (
        "error: --principal agg: the model principal answers for the align method, which --protocols did not choose "
        "(comed, anchor, router_only)\n"), result.output


# ---------------------------------------------------------------------------- replay


def test_replay_of_a_principal_run_gives_the_principals_recorded_answers(principal_bench):
    db, _ = principal_bench
    run = load_run(TraceStore(db, readonly=True), ALIGN)
    result = replay(run, "align")
    assert [(r.answer, r.correct, r.samples) for r in result.rows] == [
        ("2", True, 7), ("4", True, 7), ("6", True, 7), ("0", False, 7)]  # not the utility rule's 8 on arith-4
    assert reproduced(run, result, "align") == (4, 4)
    # arith-4: a proposes 8 (2 of 3), b proposes 0 (2 of 3): U 0.5 each
    assert result.rows[3].why == ("the model principal agg answered '0' (recorded, not asked again; agent 1's "
                                  "proposal, U 0.50 >= τ 0.5, its answer stands either way); proposals: agent 0 '8' "
                                  "(share 0.67, U 0.50); agent 1 '0' (share 0.67, U 0.50)")
    # another τ changes the verdict, never the principal's answer
    tau = replay(run, "align", {"tau": 0.9, "proposal_rule": "plurality"})
    assert [r.answer for r in tau.rows] == ["2", "4", "6", "0"]
    assert "U 0.50 < τ 0.9, its answer stands either way" in tau.rows[3].why
    # the other rules replay the baselines, which use no principal
    assert [r.answer for r in replay(run, "best_of_n").rows] == ["2", "4", "6", "8"]
    # agora report question explains the recorded align answer with the principal's
    [align] = [m for m in question_report(TraceStore(db, readonly=True), ALIGN, "arith-4")["methods"]
               if m["method"] == "align"]
    assert align["answer"] == "0" and align["why"].startswith("rule align: the model principal agg answered '0'")
    assert "replay gives" not in align["why"]


def test_replay_cli_says_the_answers_came_from_the_principal(principal_bench):
    db, _ = principal_bench
    runner = CliRunner()
    args = ["replay", "--db", str(db), "--run-id", ALIGN, "--rule", "align"]
    out = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert out["principal"] == "agg" and out["identical"] == [4, 4]
    assert [r["answer"] for r in out["rows"]] == ["2", "4", "6", "0"]
    assert all(r["why"].startswith("the model principal agg answered") for r in out["rows"])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "recorded answers of the run's model principal agg (not asked again: replay calls no model)" in text
    assert "answers identical to the recorded align: 4/4 questions" in text
    # other proposals would need the principal asked again: one line, no replay
    result = runner.invoke(app, [*args, "--param", "proposal_rule=first"])
    assert (result.exit_code, result.output) == (2, (
        "error: --param proposal_rule=first: run 'b1:arith:align''s ALIGN answers come from its model principal agg, "
        "which read the proposals made under proposal_rule=plurality; other proposals would need it asked again, and "
        "replay calls no model\n"))
    # another rule on the same run has no principal to name
    assert "principal" not in json.loads(runner.invoke(app, ["replay", "--db", str(db), "--run-id", ALIGN, "--rule",
                                                             "plurality", "--json"]).output)


def test_replay_of_a_rule_based_run_is_unchanged(tmp_path, monkeypatch):
    code, output = bench(tmp_path, monkeypatch)
    assert code == 0, output
    run = load_run(TraceStore(tmp_path / "t.db", readonly=True), ALIGN)
    result = replay(run, "align")
    assert [r.answer for r in result.rows] == ["2", "4", "6", "8"] and reproduced(run, result, "align") == (4, 4)
    assert result.rows[3].why.startswith("agent 0's proposal, U 0.50 >= τ 0.5")
    other = replay(run, "align", {"tau": 0.5, "proposal_rule": "first"})  # allowed: no principal to ask
    assert [r.answer for r in other.rows] == ["2", "4", "99", "99"]  # a's first sample on arith-3, 4 (tie to agent 0)
    out = json.loads(CliRunner().invoke(app, ["replay", "--db", str(tmp_path / "t.db"), "--run-id", ALIGN, "--rule",
                                              "align", "--json"]).output)
    assert "principal" not in out
