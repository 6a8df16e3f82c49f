"""Every command that takes a trace database takes a ``postgresql://`` URL too, on a real Postgres
(the session's throw-away server, ``tests/postgres_server.py``): ``agora train`` (its data-only
readers), ``agora evolve``, ``agora select`` (a session stopped and continued from its Postgres
checkpoint), ``agora converse`` and ``agora report diversity``. Each reads or writes what the same
command does on a SQLite file.

A URL given to an option typed as a path lost one of its slashes (``postgresql:/...``), and the
store then made a SQLite file of that name: each test checks that nothing was created in the
working folder."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import sqlite_utils
from typer.testing import CliRunner

import agora.cli.converse as converse_cli
import agora.cli.select as select_cli
from agora.cli.main import app
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore

from test_selection_graph import LATENCIES, scripted_pool, write_prompts
from test_verified_data import db as _verified_db  # noqa: F401 - the fixture, under another name
from test_verified_data import jsonl


def agora(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder (where a mangled URL would have become a SQLite file)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def copy_to_postgres(sqlite_path: Path, url: str) -> str:
    """The rows of a SQLite trace file's runs, questions and model_calls, written into the Postgres
    database ``url`` (its trace tables created by the store)."""
    src = sqlite_utils.Database(sqlite_path)
    store = TraceStore(url)
    for table, pk in (("runs", "run_id"), ("questions", ("run_id", "question_id")), ("model_calls", "call_id")):
        store.db[table].insert_all(list(src[table].rows), pk=pk)
    store.close()
    return url


def test_train_data_only_reads_a_postgres_database_as_a_sqlite_file(_verified_db, postgres_server, tmp_path, workdir):
    url = copy_to_postgres(_verified_db, postgres_server.database())
    held = tmp_path / "held.txt"
    held.write_text("q2\n")
    got = {}
    for name, db in (("sqlite", _verified_db), ("postgres", url)):
        out = agora("train", "dpo", "--pairs", "own", "--data-only", "--db", db, "--model", "m",
                    "--out", tmp_path / name / "dpo", "--held-out", held, "--validation", 0)
        assert out.exit_code == 0, out.output
        out = agora("train", "sft", "--data-only", "--db", db, "--model", "m", "--out", tmp_path / name / "sft",
                    "--source-run", "b:gsm8k:candidates")
        assert out.exit_code == 0, out.output
        out = agora("train", "grpo", "--aggregate", 2, "--data-only", "--db", db, "--model", "m",
                    "--out", tmp_path / name / "grpo")
        assert out.exit_code == 0, out.output
        got[name] = {kind: jsonl(tmp_path / name / kind / "dataset" / "train.jsonl") for kind in ("dpo", "sft", "grpo")}
    assert got["postgres"] == got["sqlite"]
    # the hand-checked figures of the SQLite test (tests/test_verified_data.py), from Postgres
    assert [r["rejected"][0]["content"] for r in got["postgres"]["dpo"]] == [
        "The answer is 6.", "So 2+3 = 4. The answer is 4."]
    assert [(r["question_id"], r["completion"][0]["content"]) for r in got["postgres"]["sft"]] == [
        ("q1", "2+3=5. The answer is 5."), ("q2", "The answer is 2.")]
    stats = json.loads((tmp_path / "postgres" / "grpo" / "dataset" / "stats.json").read_text())
    assert stats["source"]["db"] == url
    out = agora("train", "sft", "--data-only", "--db", url, "--model", "m", "--out", tmp_path / "x",
                "--source-run", "nope")
    assert out.exit_code == 2
    assert f"error: --source-run 'nope': no such run in {url} (its runs: b:gsm8k:candidates, align-1)" in out.output
    assert list(workdir.iterdir()) == []


def test_evolve_records_into_the_postgres_database_it_is_given(postgres_server, tmp_path, workdir, monkeypatch):
    import agora.training.evolve as evolve_module

    url = postgres_server.database()
    seen = {}

    def fake_evolve(store, run_id, specs, problems, cfg, out, **kwargs):  # the loop itself is tested elsewhere
        seen.update(type=type(store).__name__, path=store.path)
        store.start_run(run_id, "evolve", config={}, pool=[], dataset={})
        from agora.tasks.errors import InputError

        raise InputError("stopped by the test")  # a refusal the CLI shows in one line

    monkeypatch.setattr(evolve_module, "evolve", fake_evolve)
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    out = agora("evolve", "--instructions", instructions, "--db", url, "--out", tmp_path / "o", "--run-id", "ev1")
    assert out.exit_code == 2 and "error: stopped by the test" in out.output
    assert seen == {"type": "PostgresTraceStore", "path": url}
    assert TraceStore(url, readonly=True).get_run("ev1")["protocol"] == "evolve"
    assert list(workdir.iterdir()) == []


def test_a_select_session_on_postgres_stops_and_continues_from_its_checkpoint(postgres_server, tmp_path, workdir,
                                                                           monkeypatch):
    pool, models = scripted_pool(LATENCIES)
    monkeypatch.setattr(select_cli, "get_pool", lambda path: pool)
    url = postgres_server.database()
    runner = CliRunner()
    first = runner.invoke(app, ["select", "--prompts", str(write_prompts(tmp_path)), "--budget-rounds", "5",
                                "--delta", "0.001", "--db", url, "--thread", "s1", "--out", str(tmp_path / "out")],
                          input="A\nB\ntie\nq\n")
    assert first.exit_code == 0, first.output
    assert (f"stopped after 3 rounds: continue with agora select --thread s1 --db {shlex.quote(url)}"
            in first.output.replace("\n", ""))
    # no --prompts: only a session found in the Postgres checkpoints continues
    second = runner.invoke(app, ["select", "--thread", "s1", "--db", url, "--out", str(tmp_path / "out")],
                           input="A\nA\n")
    assert second.exit_code == 0, second.output
    assert "continuing session s1" in second.output and "rounds used: 5" in second.output
    report = json.loads((tmp_path / "out" / "s1.json").read_text())
    assert [h["choice"] for h in report["history"]] == ["A", "B", "tie", "A", "A"]
    store = TraceStore(url, readonly=True)
    assert len(store.calls("s1")) == sum(len(m.calls) for m in models.values()) > 0  # every call traced, once
    assert (store.get_run("s1")["protocol"], store.get_run("s1")["status"]) == ("cupid", "finished")
    unknown = runner.invoke(app, ["select", "--thread", "s2", "--db", url, "--out", str(tmp_path / "out")])
    assert unknown.exit_code == 2 and "--prompts FILE is needed to start a session (no session s2 in" in unknown.output
    assert list(workdir.iterdir()) == []


def test_converse_and_report_diversity_on_postgres_match_sqlite(postgres_server, tmp_path, workdir, monkeypatch):
    pool = ModelPool.from_chat_models({
        "hedger": ScriptedChatModel(respond=lambda chat, i: "I think the answer might be 4, maybe. The answer is 4."),
        "blunt": ScriptedChatModel(respond=lambda chat, i: "The answer is 4."),
        "other": ScriptedChatModel(respond=lambda chat, i: ("Maybe " if "might" in chat[-1]["content"] else "")
                                   + "The answer is 5."),
    })
    monkeypatch.setattr(converse_cli, "load_pool", lambda path: pool)
    url = postgres_server.database()
    reports = {}
    for name, db in (("sqlite", str(tmp_path / "c.db")), ("postgres", url)):
        out = agora("converse", "--pool", "pool.toml", "--limit", 2, "--turns", 3, "--db", db, "--run-id", "c")
        assert out.exit_code == 0, out.output
        out = agora("report", "diversity", "--db", db, "--out", tmp_path / name, "--min-turns", 2, "--panel-size", 2)
        assert out.exit_code == 0, out.output
        reports[name] = json.loads((tmp_path / name / "diversity.json").read_text())
    assert reports["postgres"] == reports["sqlite"]
    from agora.traces.diversity import read_exchanges

    data = read_exchanges(url, ["c"])
    assert len(data.rows) == 6 * 2 * 3  # ordered pairs × prompts × turns
    assert sum(r["partner"] is not None for r in data.rows) == 6 * 2 * 2  # every turn after the first
    assert {r["answer"] for r in data.rows if r["speaker"] == "blunt"} == {"4"}
    assert [r["run_id"] for r in data.runs] == ["c:hedger>blunt", "c:hedger>other", "c:blunt>hedger",
                                                "c:blunt>other", "c:other>hedger", "c:other>blunt"]
    empty = agora("report", "diversity", "--db", url, "--out", tmp_path / "o", "--run", "zz")
    assert empty.exit_code == 2 and f"{url}: no successful model calls in run(s) zz" in empty.output
    assert list(workdir.iterdir()) == []


def test_calibrate_and_run_comed_on_postgres(postgres_server, tmp_path, workdir, monkeypatch):
    import agora.cli.comed as comed_cli
    from test_escalation import write_mc

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: "The answer is A.")
                                       for m in ("a", "b")})
    monkeypatch.setattr(comed_cli, "get_pool", lambda path: pool)
    url = postgres_server.database()
    data = write_mc(tmp_path / "dev.jsonl", n=3)
    out = agora("calibrate", "comed", "--data", data, "--no-router", "--out", tmp_path / "t.toml", "--db", url,
                "--run-id", "dev")
    assert out.exit_code == 0, out.output
    out = agora("run", "comed", "--data", data, "--no-router", "--thresholds", tmp_path / "t.toml", "--db", url,
                "--run-id", "test")
    assert out.exit_code == 0, out.output
    store = TraceStore(url, readonly=True)
    for run in ("dev", "test"):
        assert store.get_run(run)["status"] == "finished"
        assert sorted(q["question_id"] for q in store.db.query("select question_id from questions where run_id = ?",
                                                                [run])) == ["m0", "m1", "m2"]
    assert {r["method"] for r in store.results("test")} >= {"comed", "anchor"}
    store.close()
    assert list(workdir.iterdir()) == []
