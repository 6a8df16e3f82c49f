"""Quiet failures a fresh user of the trace tools found (issue 30 follow-up): each is now refused with
one line naming the file, run or field (exit 2), or shown; fast (scripted models, no real one)."""

import gzip
import json
import sqlite3

import pytest

import agora.cli._shared as shared_cli
import agora.cli.bench as bench_cli
import agora.cli.select as select_cli
from agora.agents.delegation import DelegationConfig
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import TraceRecorder
from agora.graphs.runner import run_protocol
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore, check_run_id
from test_bench import bench_args, scripted_pool, write_tasks
from test_bundles import exported, table_counts  # noqa: F401 (exported: a fixture)
from test_selection_graph import LATENCIES
from test_selection_graph import scripted_pool as select_pool
from cli_runs import agora

ALIGN, COMED = "b1:arith:align", "b1:arith:comed"


def error_line(output: str) -> str:
    """The one ``error: ...`` line of a refused command (no traceback), whitespace joined."""
    assert "Traceback" not in output, output
    text = " ".join(output.split())
    assert text.count("error: ") == 1, output
    return text[text.index("error: "):]


@pytest.fixture(scope="module")
def bench(exported):
    """The scripted bench of tests/test_bench.py (arith: 4 questions, quiz: 3) and its bundle
    (tests/test_bundles.py's fixture, made once per module)."""
    return exported


def bundle_lines(bundle):
    return [json.loads(line) for line in gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()]


def write_bundle(path, lines):
    """``lines`` (header, rows, footer) as a bundle, the footer's counts made to match the rows."""
    counts = {}
    for line in lines[1:-1]:
        counts[line["t"]] = counts.get(line["t"], 0) + 1
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for line in lines[:-1] + [{"end": True, "rows": counts}]:
            f.write(json.dumps(line) + "\n")
    return path


def row_index(lines, table, **where):
    """(line number in the file, index in ``lines``) of the first row of ``table`` matching ``where``."""
    for i, line in enumerate(lines):
        if line.get("t") != table:
            continue
        row = dict(zip(lines[0]["tables"][table]["columns"], line["v"]))
        if all(row[k] == v for k, v in where.items()):
            return i + 1, i
    raise AssertionError(f"no {table} row {where}")


def set_value(lines, index, table, column, value):
    cols = list(lines[0]["tables"][table]["columns"])
    lines[index] = {**lines[index], "v": [value if c == column else v for c, v in zip(cols, lines[index]["v"])]}


# ----------------------------------------------------------------------------- 1. import: orphans and conflicts

def test_import_refuses_orphan_results_and_model_calls_and_creates_no_database(bench, tmp_path):
    _, bundle = bench
    lines = bundle_lines(bundle)
    line_no, i = row_index(lines, "results", run_id=ALIGN, question_id="arith-3", method="align")
    set_value(lines, i, "results", "question_id", "ghost")
    orphan = write_bundle(tmp_path / "orphan-results.agora.jsonl.gz", lines)
    target = tmp_path / "t.db"
    code, output = agora("import", orphan, "--db", target)
    assert code == 2
    assert error_line(output) == (
        f"error: {orphan}:{line_no}: results: run '{ALIGN}' has results for question 'ghost', which is not among the "
        "bundle's questions of that run (an orphan); nothing was imported")
    assert not target.exists()

    lines = bundle_lines(bundle)
    line_no, i = row_index(lines, "model_calls", run_id=ALIGN, question_id="arith-2")
    set_value(lines, i, "model_calls", "question_id", "ghost")
    orphan = write_bundle(tmp_path / "orphan-calls.agora.jsonl.gz", lines)
    code, output = agora("import", orphan, "--db", target)
    assert code == 2
    assert error_line(output) == (
        f"error: {orphan}:{line_no}: model_calls: run '{ALIGN}' has model calls for question 'ghost', which is not "
        "among the bundle's questions of that run and has no failed attempt (an orphan, not a failed question); "
        "nothing was imported")
    assert not target.exists()
    # into an existing database: refused the same way, nothing written
    TraceStore(target).close()
    before = table_counts(target)
    assert agora("import", orphan, "--db", target)[0] == 2 and table_counts(target) == before

    # a failed question (its calls failed, no questions row) is not an orphan: accepted
    lines = bundle_lines(bundle)
    _, i = row_index(lines, "model_calls", run_id=ALIGN, question_id="arith-2")
    set_value(lines, i, "model_calls", "question_id", "arith-9")
    set_value(lines, i, "model_calls", "error", "RuntimeError: server down")
    failed = write_bundle(tmp_path / "failed.agora.jsonl.gz", lines)
    code, output = agora("import", failed, "--db", tmp_path / "ok.db")
    assert code == 0, output


def test_import_refuses_a_row_whose_key_exists_with_other_content_unless_force(bench, tmp_path):
    _, bundle = bench
    copy = tmp_path / "copy.db"
    assert agora("import", bundle, "--db", copy)[0] == 0
    lines = bundle_lines(bundle)
    line_no, i = row_index(lines, "model_calls", run_id=ALIGN, question_id="arith-3", agent=1, sample_index=0)
    call_id = dict(zip(lines[0]["tables"]["model_calls"]["columns"], lines[i]["v"]))["call_id"]
    set_value(lines, i, "model_calls", "completion", "The answer is 7.")
    edited = write_bundle(tmp_path / "edited.agora.jsonl.gz", lines)
    before = table_counts(copy)
    order = [r[0] for r in sqlite3.connect(copy).execute("select call_id from model_calls order by rowid")]

    code, output = agora("import", edited, "--db", copy)
    assert code == 2
    assert error_line(output) == (
        f"error: {edited}:{line_no}: model_calls: the row call_id='{call_id}' already exists in {copy} with other "
        "content (completion differ); nothing was imported (--force replaces such rows with the bundle's)")
    assert table_counts(copy) == before
    stored = sqlite3.connect(copy).execute("select completion from model_calls where call_id = ?", [call_id]).fetchone()
    assert stored == ("The answer is 6.",)

    code, output = agora("import", edited, "--db", copy, "--force")
    assert code == 0, output
    assert "rows added: none" in output and "rows replaced (--force): 1 whose key" in output
    assert f"rows skipped: {sum(before.values()) - 1} identical to rows already in {copy};" in output
    conn = sqlite3.connect(copy)
    assert conn.execute("select completion from model_calls where call_id = ?", [call_id]).fetchone() == (
        "The answer is 7.",)
    assert [r[0] for r in conn.execute("select call_id from model_calls order by rowid")] == order  # call order kept
    assert table_counts(copy) == before


def test_import_refuses_a_bundle_whose_run_ids_are_blank_or_hold_control_characters(bench, tmp_path):
    _, bundle = bench
    lines = bundle_lines(bundle)
    lines[0] = {**lines[0], "runs": lines[0]["runs"] + ["a\x07b"]}
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", lines)
    code, output = agora("import", bad, "--db", tmp_path / "t.db")
    assert code == 2 and not (tmp_path / "t.db").exists()
    assert error_line(output) == (f"error: {bad}:1: runs: run id 'a\\x07b': holds the control character '\\x07' at "
                                  "position 1; run ids are printed and written to files, so use visible characters; "
                                  "nothing was imported")


# ----------------------------------------------------------------------------- 2. replay: roles and protocols

def test_replay_refuses_an_unknown_role_listing_the_known_ones(bench):
    db, _ = bench
    code, output = agora("replay", "--db", db, "--run-id", ALIGN, "--rule", "plurality", "--param", "roles=nobody")
    assert code == 2
    assert error_line(output) == f"error: --param roles=nobody: run '{ALIGN}' has no samples of role(s) 'nobody'; its roles: agent"
    code, output = agora("replay", "--db", db, "--run-id", COMED, "--rule", "first_sample", "--param",
                         "roles=anchor,judge")
    assert code == 2
    assert error_line(output) == (f"error: --param roles=anchor,judge: run '{COMED}' has no samples of role(s) "
                                  "'judge'; its roles: aggregator, anchor, chair, debater, member, probe, proposer, reviewer")
    # known roles still replay
    assert agora("replay", "--db", db, "--run-id", COMED, "--rule", "plurality", "--param", "roles=anchor")[0] == 0


def test_replay_refuses_a_rule_for_another_protocol_naming_the_runs_protocol_and_its_rules(bench):
    db, _ = bench
    code, output = agora("replay", "--db", db, "--run-id", ALIGN, "--rule", "comed")
    assert code == 2
    assert error_line(output) == (f"error: --rule comed: applies to comed runs only; run '{ALIGN}' has protocol align, "
                                  "whose rules are align, best_of_n, first_sample, plurality, weighted_vote")
    code, output = agora("replay", "--db", db, "--run-id", COMED, "--rule", "align")
    assert code == 2
    assert error_line(output) == (f"error: --rule align: applies to align runs only; run '{COMED}' has protocol comed, "
                                  "whose rules are comed, first_sample, plurality, slm_mux, weighted_vote")


# ----------------------------------------------------------------------------- 3 and 7: a failed question

def failing_pool():
    """Models a and b answer 4 (right on "2 + 2"), and raise on "What is 3 + 3?" (no retry)."""
    def respond(chat, i):
        if "What is 3 + 3?" in chat[-1]["content"]:
            raise RuntimeError("server down")
        return "The answer is 4."
    return ModelPool.from_chat_models({m: ScriptedChatModel(respond=respond) for m in ("a", "b")}, max_retries=0)


PROBLEMS = [Problem(id="q1", question="What is 2 + 2?", gold="4", kind="math"),
            Problem(id="q2", question="What is 3 + 3?", gold="6", kind="math")]
CONFIG = DelegationConfig(n_agents=2, k_samples=2, tau=0.5)


@pytest.fixture
def failed_run(tmp_path):
    """One ALIGN run (``cli``, as `agora run align` records it) whose question q2 failed: every call raised."""
    db = tmp_path / "t.db"
    pool = failing_pool()
    store = TraceStore(db)
    outcome = run_protocol("align", PROBLEMS, store=store, run_id="cli", context=DelegationContext(pool, CONFIG),
                           config=CONFIG, pool_description=pool.describe(), dataset={"path": "q", "format": "jsonl"})
    assert [q.problem.id for q in outcome.failed] == ["q2"]
    return db, store


def test_report_question_shows_a_failed_questions_attempts(failed_run):
    db, _ = failed_run
    code, output = agora("report", "question", "--db", db, "--run-id", "cli", "--question-id", "q2")
    assert code == 0, output
    text = " ".join(output.split())
    assert ("q2 in cli (align): failed, no answer recorded: 2 failed attempts, 0 successful calls; rerun the run with "
            "its --run-id to retry it") in text
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]
    assert rows == [["0", "agent_sample", "agent", "0", "a", "1", "RuntimeError", "server down"],  # attempt 1 of 1
                    ["1", "agent_sample", "agent", "1", "b", "1", "RuntimeError", "server down"]]
    code, output = agora("report", "question", "--db", db, "--run-id", "cli", "--question-id", "q2", "--json")
    report = json.loads(output)
    assert report["failed"] is True and report["successful_calls"] == 0
    assert [(f["model"], f["attempt"], f["error_class"], f["message"]) for f in report["failed_attempts"]] == [
        ("a", 0, "RuntimeError", "server down"), ("b", 0, "RuntimeError", "server down")]
    # an answered question has none, and a question with no call at all is still refused
    assert json.loads(agora("report", "question", "--db", db, "--run-id", "cli", "--question-id", "q1",
                            "--json")[1])["failed_attempts"] == []
    code, output = agora("report", "question", "--db", db, "--run-id", "cli", "--question-id", "q3")
    assert code == 2 and error_line(output) == f"error: {db}: run 'cli' has no recorded question 'q3'"


def test_trace_recorder_marks_a_run_with_a_failed_question_as_the_cli_does(failed_run):
    db, store = failed_run
    graph = build_delegation_graph().compile()
    pool = failing_pool()
    with TraceRecorder(store, run_id="app") as recorder:
        for p in PROBLEMS:
            graph.invoke({"question": p.question, "question_id": p.id, "gold": p.gold, "kind": p.kind},
                         {"callbacks": [recorder]}, context=DelegationContext(pool, CONFIG))
    assert recorder.recorded == {"align": 1} and recorder.failed == {"align": 1}
    cli, embedded = store.get_run("cli"), store.get_run("app-align")
    assert cli["status"] == embedded["status"] == "failed"
    assert json.loads(embedded["summary"]) == {"questions": 1, "failed": 1,
                                               "failed_questions": {"q2": "RuntimeError: server down"}}
    assert json.loads(cli["summary"])["failed_questions"] == {"q2": "RuntimeError: server down"}
    # no failure: finished, as before
    with TraceRecorder(store, run_id="clean") as recorder:
        graph.invoke({"question": PROBLEMS[0].question, "question_id": "q1", "gold": "4"}, {"callbacks": [recorder]},
                     context=DelegationContext(pool, CONFIG))
    assert store.get_run("clean-align")["status"] == "finished"


# ----------------------------------------------------------------------------- 4. select validates before creating

@pytest.mark.parametrize("case", ["missing", "empty", "not json", "no option"])
def test_select_refuses_bad_prompts_before_creating_the_database(tmp_path, monkeypatch, case):
    pool, _ = select_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    prompts = tmp_path / "prompts.jsonl"
    if case == "empty":
        prompts.write_text("")
    elif case == "not json":
        prompts.write_text("hello\n")
    args = [] if case == "no option" else ["--prompts", prompts]
    db = tmp_path / "t.db"
    code, output = agora("select", *args, "--db", db, "--simulate", "latency_s=-2", "--out", tmp_path / "out")
    assert code == 2
    expected = {"missing": f"error: {prompts}: file not found",
                "empty": f"error: --prompts {prompts}: no prompts in the file",
                "not json": f"error: {prompts}:1: invalid JSON (Expecting value at column 1)",
                "no option": "error: --prompts FILE is needed to start a session"}[case]
    assert error_line(output) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if case in ("missing", "no option") else ["prompts.jsonl"])


def test_select_without_prompts_leaves_an_existing_database_untouched(tmp_path, monkeypatch):
    """An existing file that holds no session (here a user's own SQLite DB) is refused before it is
    opened: no Agora tables are added to it and no checkpoint file appears beside it."""
    pool, _ = select_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    db = tmp_path / "mine.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table notes (x text)")
    before = db.read_bytes()
    code, output = agora("select", "--db", db, "--thread", "s1", "--out", tmp_path / "out")
    assert code == 2
    assert error_line(output) == f"error: --prompts FILE is needed to start a session (no session s1 in {db})"
    code, output = agora("select", "--db", db, "--out", tmp_path / "out")  # no --thread: no made-up id named
    assert code == 2 and error_line(output) == "error: --prompts FILE is needed to start a session"
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine.db"]
    # an Agora DB whose checkpoint file holds other threads (here an older schema, missing columns): the
    # same refusal, and the DB is not opened (it would have been migrated)
    agora_db = tmp_path / "agora.db"
    TraceStore(agora_db).close()
    conn = sqlite3.connect(agora_db)
    conn.execute("alter table model_calls drop column how")
    conn.commit()
    conn.close()  # (the last connection to close writes the WAL back into the file)
    from agora.graphs.run_checkpoints import open_checkpointer
    open_checkpointer(agora_db).close()
    conn = sqlite3.connect(f"{agora_db}.checkpoints")
    conn.execute("insert into checkpoints (thread_id, checkpoint_ns, checkpoint_id) values ('other', '', 'c1')")
    conn.commit()
    conn.close()
    old = agora_db.read_bytes()
    code, output = agora("select", "--db", agora_db, "--thread", "s1", "--out", tmp_path / "out")
    assert code == 2 and error_line(output).endswith(f"(no session s1 in {agora_db})")
    assert agora_db.read_bytes() == old


def test_select_refuses_a_bad_simulated_theta_before_creating_the_database(tmp_path, monkeypatch):
    pool, _ = select_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "q0", "prompt": "Say hi."}) + "\n")
    code, output = agora("select", "--prompts", prompts, "--db", tmp_path / "t.db", "--simulate", "speed=1")
    assert code == 2 and "speed" in error_line(output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.jsonl"]


# ----------------------------------------------------------------------------- 5. report runs never truncates ids

def test_report_runs_prints_long_run_ids_whole(tmp_path):
    db = tmp_path / "t.db"
    long_id = "bench-2026-12-03:" + "".join(f"{i:02d}" for i in range(60)) + ":arith:align"
    store = TraceStore(db)
    store.start_run(long_id, "align", config={}, pool=[], dataset={})
    store.start_run("short", "align", config={}, pool=[], dataset={})
    store.close()
    code, output = agora("report", "runs", "--db", db)
    assert code == 0, output
    assert "…" not in output
    cells = [line.split("│")[1].strip() for line in output.splitlines() if line.startswith("│")]
    cells = [c for c in cells if c]  # (a row's other folded columns may take more lines)
    assert "".join(cells[:-1]) == long_id and cells[-1] == "short"
    assert len(cells) > 2  # folded onto several lines, not cut


# ----------------------------------------------------------------------------- 6. blank and control-character run ids

@pytest.mark.parametrize("bad, said", [
    (" ", "' ': a blank run id; give a name (letters, digits, - _ : . …)"),
    ("", "'': a blank run id; give a name (letters, digits, - _ : . …)"),
    ("a\x07b", "'a\\x07b': holds the control character '\\x07' at position 1; run ids are printed and written to "
               "files, so use visible characters"),
    (" a", "' a': leading or trailing white space in a run id; remove it"),
])
def test_blank_or_control_character_run_ids_are_refused_everywhere(bench, tmp_path, monkeypatch, bad, said):
    db, _ = bench
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    monkeypatch.setattr(shared_cli, "get_pool", lambda path: scripted_pool())
    new_db = tmp_path / "new.db"
    for args, option in [
        (["run", "align", "--data", data, "--db", new_db, "--run-id", bad], "--run-id"),
        (["select", "--prompts", data, "--db", new_db, "--thread", bad], "--thread"),
        (["replay", "--db", db, "--run-id", bad, "--rule", "plurality"], "--run-id"),
        (["replay", "--db", db, "--run-id", ALIGN, "--rule", "weighted_vote", "--dev-run-id", bad], "--dev-run-id"),
        (["report", "question", "--db", db, "--run-id", bad, "--question-id", "arith-1"], "--run-id"),
        (["report", "run", bad, "--db", db], "RUN_ID"),
        (["export", "--db", db, "--run-id", bad, "--out", tmp_path / "x.agora.jsonl.gz"], "--run-id"),
        (["bench", "--tasks", data, "--db", new_db, "--run-id", bad], "--run-id"),
        (["duel", "--instructions", data, "--db", new_db, "--run-id", bad], "--run-id"),
        (["converse", "--prompts", data, "--db", new_db, "--run-id", bad], "--run-id"),
        (["evolve", "--instructions", data, "--db", new_db, "--run-id", bad], "--run-id"),
    ]:
        code, output = agora(*args)
        assert code == 2, (args, output)
        assert error_line(output) == f"error: {option} {said}", args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl"]  # no database, no bundle
    with pytest.raises(ValueError, match="run_id"):
        TraceRecorder(new_db, run_id=bad)
    assert not new_db.exists()
    with pytest.raises(ValueError, match="^run id "):
        TraceStore(":memory:").start_run(bad, "align", config={}, pool=[], dataset={})


def test_check_run_id_keeps_ordinary_ids():
    for ok in ("b1:arith:align", "exp[v2]", "../../x", "select-20261203-1200-ab12", "séance ü"):
        assert check_run_id(ok) == ok


# ----------------------------------------------------------------------------- 8. import checks the whole bundle first

def malformed(lines, case):
    """``lines`` edited as the tester did; returns (line number the refusal names, the message after it)."""
    run_cols = list(lines[0]["tables"]["runs"]["columns"])
    if case == "unknown table":
        line_no, i = row_index(lines, "results", run_id=ALIGN, question_id="arith-1", method="align")
        lines[i] = {**lines[i], "t": "resluts"}
        return line_no, ("a row of unknown table 'resluts' (the header's tables: runs, questions, results, "
                         "model_calls, benches, bench_cells); nothing was imported")
    if case == "wrong count":
        line_no, i = row_index(lines, "questions", run_id=ALIGN, question_id="arith-2")
        lines[i] = {**lines[i], "v": lines[i]["v"][:-1]}
        n = len(lines[0]["tables"]["questions"]["columns"])
        return line_no, f"questions: {n - 1} values for {n} columns; nothing was imported"
    if case == "v not a list":
        line_no, i = row_index(lines, "runs", run_id=COMED)
        lines[i] = {"t": "runs", "v": "abc"}
        return line_no, "runs: the row's values \"v\" are not a list (str \"abc\"); nothing was imported"
    if case == "two contents under one key":
        line_no, i = row_index(lines, "questions", run_id=ALIGN, question_id="arith-2")
        lines.insert(i + 1, dict(lines[i]))
        set_value(lines, i + 1, "questions", "answer", "5")
        return line_no + 1, (f"questions: the row run_id='{ALIGN}', question_id='arith-2' is also on line {line_no} "
                             f"with other content: the bundle contradicts itself (lines {line_no} and {line_no + 1}); "
                             "nothing was imported, --force or not")
    if case == "text in an integer column":
        line_no, i = row_index(lines, "questions", run_id=ALIGN, question_id="arith-3")
        set_value(lines, i, "questions", "correct", "yes")
        return line_no, "questions.correct: \"yes\" is not an integer; nothing was imported"
    if case == "text in a real column":
        line_no, i = row_index(lines, "model_calls", run_id=COMED, question_id="arith-1")
        set_value(lines, i, "model_calls", "latency_s", "fast")
        return line_no, "model_calls.latency_s: \"fast\" is not a real number; nothing was imported"
    if case == "run not in the header":
        lines[0] = {**lines[0], "runs": [r for r in lines[0]["runs"] if r != COMED]}
        line_no, _ = row_index(lines, "runs", run_id=COMED)
        return line_no, (f"runs: run_id '{COMED}' is not one of the bundle header's runs ('b1:arith:align', "
                         "'b1:quiz:align', 'b1:quiz:comed'); nothing was imported")
    if case == "version true":
        lines[0] = {**lines[0], "version": True}
        return 1, "version: true is not a version number (an integer from 1); this Agora reads versions up to 1"
    raise AssertionError(case)


CASES = ["unknown table", "wrong count", "v not a list", "two contents under one key", "text in an integer column",
         "text in a real column", "run not in the header", "version true"]


@pytest.mark.parametrize("case", CASES)
def test_import_refuses_a_malformed_bundle_naming_its_line_and_creates_no_database(bench, tmp_path, case):
    _, bundle = bench
    lines = bundle_lines(bundle)
    line_no, said = malformed(lines, case)
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", lines)
    target = tmp_path / "new.db"
    for force in ((), ("--force",)):
        code, output = agora("import", bad, "--db", target, *force)
        assert code == 2, output
        assert error_line(output) == f"error: {bad}:{line_no}: {said}"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.agora.jsonl.gz"]  # no new.db, no -wal
    # into an existing database (the whole bundle is checked before it is touched): refused the same way
    copy = tmp_path / "copy.db"
    assert agora("import", bundle, "--db", copy)[0] == 0
    before = table_counts(copy)
    for force in ((), ("--force",)):
        code, output = agora("import", bad, "--db", copy, *force)
        assert code == 2 and error_line(output) == f"error: {bad}:{line_no}: {said}"
    assert table_counts(copy) == before


def test_import_accepts_identical_twin_rows_and_values_sqlite_stores_alike(bench, tmp_path):
    _, bundle = bench
    lines = bundle_lines(bundle)
    _, i = row_index(lines, "questions", run_id=ALIGN, question_id="arith-3")
    lines.insert(i + 1, dict(lines[i]))  # the same row twice: no contradiction, imported once
    _, j = row_index(lines, "questions", run_id=ALIGN, question_id="arith-1")
    set_value(lines, j, "questions", "correct", True)  # stored as 1
    set_value(lines, j, "questions", "model_calls", 12.0)  # stored as 12
    ok = write_bundle(tmp_path / "ok.agora.jsonl.gz", lines)
    target = tmp_path / "t.db"
    code, output = agora("import", ok, "--db", target)
    assert code == 0, output
    assert "rows skipped: 1 repeated within the bundle\n" in output
    row = sqlite3.connect(target).execute("select correct, model_calls from questions where run_id = ? and "
                                          "question_id = 'arith-1'", [ALIGN]).fetchone()
    assert row == (1, 12) and type(row[1]) is int
    assert agora("report", "run", ALIGN, "--db", target)[0] == 0


def test_a_refusal_found_only_against_the_new_database_removes_it(bench, tmp_path, monkeypatch):
    import agora.cli.export as export_cli
    from agora.traces.bundle import BundleError

    def refuse(path, store, force=False):
        store.db["runs"].insert({"run_id": "x"}, alter=True)  # something written, then refused
        raise BundleError(f"{path}: refused")

    _, bundle = bench
    monkeypatch.setattr(export_cli, "import_bundle", refuse)
    target = tmp_path / "new.db"
    code, output = agora("import", bundle, "--db", target)
    assert code == 2 and error_line(output) == f"error: {bundle}: refused"
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- 9. export carries shared candidates

def test_export_of_a_run_that_took_shared_candidates_carries_the_candidates_run(tmp_path, monkeypatch):
    from agora.runs.shared import SHARED_KEY
    from agora.traces.bundle import SHARED_CANDIDATES_KEY

    assert SHARED_CANDIDATES_KEY == SHARED_KEY
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    db = tmp_path / "b.db"
    code, output = agora(*bench_args(math_file, mc_file, db, tmp_path / "out", design="--shared-candidates"))
    assert code == 0, output
    store = TraceStore(db, readonly=True)
    assert json.loads(store.get_run(ALIGN)["config"])[SHARED_KEY] == "b1:arith:candidates"
    bundle = tmp_path / "align.agora.jsonl.gz"
    code, output = agora("export", "--db", db, "--run-id", ALIGN, "--out", bundle)
    assert code == 0, output
    assert " ".join(output.split()).startswith(
        f"wrote {bundle}: 1 runs + run b1:arith:candidates (its shared candidates); rows: runs 2, ")
    assert bundle_lines(bundle)[0]["runs"] == [ALIGN, "b1:arith:candidates"]

    target = tmp_path / "empty.db"
    code, output = agora("import", bundle, "--db", target)
    assert code == 0, output
    src, dst = sqlite3.connect(db), sqlite3.connect(target)
    query = "select * from model_calls where run_id = ? order by rowid"
    candidates = src.execute(query, ["b1:arith:candidates"]).fetchall()
    assert len(candidates) > 0 and dst.execute(query, ["b1:arith:candidates"]).fetchall() == candidates
    # every shared sample the align run's results count is a model call of the imported candidates run
    shared = src.execute("select sum(shared_samples) from results where run_id = ? and method = 'align'",
                         [ALIGN]).fetchone()[0]
    assert shared > 0
    report = [json.loads(agora("report", "run", ALIGN, "--db", d, "--json")[1]) for d in (db, target)]
    assert report[0]["totals"] == report[1]["totals"]

    # a run whose candidates run is gone: refused, not exported without its samples
    copy = tmp_path / "partial.db"
    assert agora("import", bundle, "--db", copy)[0] == 0
    with sqlite3.connect(copy) as conn:
        conn.execute("delete from runs where run_id = 'b1:arith:candidates'")
    code, output = agora("export", "--db", copy, "--run-id", ALIGN, "--out", tmp_path / "x.agora.jsonl.gz")
    assert code == 2
    assert error_line(output) == (f"error: {copy}: run '{ALIGN}' took its shared candidates from run "
                                  "'b1:arith:candidates', which is not in the database; its samples cannot be exported")

    # a bundle whose run names a candidates run that neither it nor the database holds (as one written
    # by hand, or before export carried them): imported, with a warning naming both runs
    lines = [json.loads(line) for line in gzip.open(bundle, "rt")]
    cols = list(lines[0]["tables"]["runs"]["columns"])
    for line in lines[1:]:
        if line.get("t") == "runs" and line["v"][cols.index("run_id")] == ALIGN:
            config = json.loads(line["v"][cols.index("config")])
            config[SHARED_KEY] = "b1:arith:gone"
            line["v"][cols.index("config")] = json.dumps(config)
    del lines[-1]["sha256"]  # as a bundle written by hand, or before bundles carried their rows' checksum
    edited = tmp_path / "edited.agora.jsonl.gz"
    with gzip.open(edited, "wt") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    code, output = agora("import", edited, "--db", tmp_path / "warned.db")
    assert code == 0, output
    assert (f"warning: run {ALIGN} took its shared candidates from run b1:arith:gone, which is neither in the "
            f"bundle nor in {tmp_path / 'warned.db'}") in " ".join(output.split())
    code, output = agora("import", bundle, "--db", tmp_path / "whole.db")
    assert code == 0 and "warning" not in output, output
