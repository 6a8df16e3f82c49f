"""The trace store's guarantees on both backends (SQLite file, Postgres URL: the ``trace_db``
fixture): a recorded run read back by the reports, replay and the training-data readers with the
same values, trace bundles moved between the backends unchanged, the run row's resume rules, and the
Postgres checkpointer as strict as the SQLite one."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agora.agents.delegation import DelegationConfig
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.run_checkpoints import open_checkpointer
from agora.graphs.runner import run_problems
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks import Problem
from agora.traces.bundle_export import export_bundle
from agora.traces.bundle_import import import_bundle
from agora.traces.question_report import question_report
from agora.traces.replay import replay
from agora.traces.run_trace import load_run
from agora.traces.report import method_table, run_totals
from agora.traces.run_list import open_trace_store, run_rows, run_summary
from agora.traces.store import TraceStore
from agora.training.datasets import align_pairs

PROBLEMS = [Problem(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(1, 5)]


def right(chat, index):
    i = int(chat[-1]["content"].split()[2])
    return f"So the answer is {2 * i}."


def record_align_run(store: TraceStore, run_id: str = "r1"):
    """ALIGN, 2 agents × 2 samples: agent a always right, b always says 4 (right on q2 only)."""
    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=right),
                                       "b": ScriptedChatModel(responses=["The answer is 4."], cycle=True)})
    return run_problems(build_delegation_graph(), PROBLEMS, store=store, run_id=run_id, protocol="align",
                        context=DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=2)), config={"n": 2},
                        pool_description=pool.describe(), dataset={"format": "test"})


def table_rows(store: TraceStore, table: str) -> list[dict]:
    order = {"runs": "run_id", "questions": "run_id, question_id", "results": "run_id, question_id, method",
             "model_calls": "call_id"}[table]
    return list(store.db.query(f"select * from {table} order by {order}"))


def test_a_recorded_run_reads_back_the_same_through_reports_replay_and_training_data(trace_db):
    store = TraceStore(trace_db)
    out = record_align_run(store)
    assert len(out.outcomes) == 4
    assert [r["question_id"] for r in store.questions("r1")] == ["q1", "q2", "q3", "q4"]
    assert store.finished_questions("r1") == {"q1", "q2", "q3", "q4"}
    totals = run_totals(store, "r1")
    assert totals["calls"] == 4 * 2 * 2 and totals["failed"] == 0 and totals["questions"] == 4
    table = {r.method: r for r in method_table(store, "r1")}
    assert table["single_agent"].accuracy == 1.0  # agent a answers first
    assert table["single_agent"].samples_per_question == 1.0
    store.close()

    reader = open_trace_store(trace_db)  # read-only, as the report commands open it
    [row] = run_rows(reader)
    assert (row.run_id, row.protocol, row.status, row.questions) == ("r1", "align", "finished", 4)
    summary = run_summary(reader, "r1")
    assert summary["status"] == "finished" and summary["protocol"] == "align"
    q = question_report(reader, "r1", "q3")
    assert q["gold"] == "6" and len(q["samples"]) == 4 and q["successful_calls"] == 4 and not q["failed"]
    result = replay(load_run(reader, "r1"), "plurality")
    assert len(result.rows) == 4
    pairs = align_pairs(reader)  # a right over b wrong, on every question but q2 (where b's 4 is right)
    assert sorted({(p["duel_id"], p["chosen_model"], p["rejected_model"]) for p in pairs}) == [
        ("q1", "a", "b"), ("q3", "a", "b"), ("q4", "a", "b")]
    reader.close()


def test_the_resume_rules_hold(trace_db):
    store = TraceStore(trace_db)
    assert store.start_run("r", "align", config={"n": 2}, pool=[{"name": "m"}], dataset={"path": "a"}) is False
    assert store.start_run("r", "align", config={"n": 2}, pool=[{"name": "m", "base_url": "http://x"}],
                           dataset={"path": "a"}) is True  # a transport field may change
    with pytest.raises(ValueError, match="other settings"):
        store.start_run("r", "align", config={"n": 3}, pool=[{"name": "m"}], dataset={"path": "a"})
    with pytest.raises(ValueError, match="already holds a align run"):
        store.start_run("r", "comed", config={}, pool=[], dataset={})
    with pytest.raises(ValueError, match="blank run id"):
        store.start_run(" ", "align", config={}, pool=[], dataset={})
    store.finish_run("r", {"questions": 0}, status="interrupted")
    assert store.get_run("r")["status"] == "interrupted"
    store.close()


def test_mark_stopped_reaches_a_running_run_from_outside(trace_db):
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    assert TraceStore.mark_stopped(trace_db, "r", "interrupted", {"error": "SIGTERM"}) is True
    assert TraceStore.mark_stopped(trace_db, "r") is False  # not running any more
    assert store.get_run("r")["status"] == "interrupted"
    store.close()


@pytest.mark.parametrize("target", ["sqlite", "postgres"])
def test_a_bundle_moves_a_run_between_backends_unchanged(trace_db, target, tmp_path, request):
    store = TraceStore(trace_db)
    record_align_run(store)
    bundle = tmp_path / "r1.jsonl.gz"
    export_bundle(store, bundle, ["r1"])
    to = str(tmp_path / "to.db") if target == "sqlite" else request.getfixturevalue("postgres_server").database()
    other = TraceStore(to)
    summary = import_bundle(bundle, other)
    assert summary.runs == ("r1",) and summary.rows["model_calls"] == 16
    for table in ("runs", "questions", "results", "model_calls"):
        assert table_rows(other, table) == table_rows(store, table), table
    again = import_bundle(bundle, other)  # importing twice adds nothing
    assert sum(again.rows.values()) == 0 and again.skipped == summary.skipped + sum(summary.rows.values())
    store.close()
    other.close()


def test_the_postgres_checkpointer_refuses_a_crafted_row(postgres_server, tmp_path):
    import ormsgpack
    from langgraph.checkpoint.base import empty_checkpoint

    from agora.graphs.checkpoint import UnsafeCheckpointError

    url = postgres_server.database()
    saver = open_checkpointer(url)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"steps": ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "true"]))}
    checkpoint["channel_versions"] = {"steps": "1"}  # (Postgres keeps a channel's value as a blob per version)
    saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {"steps": "1"})
    with pytest.raises(UnsafeCheckpointError, match=r"agora_checkpoints\): thread 't': a checkpoint holds os.system"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    with pytest.raises(UnsafeCheckpointError):
        asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "t"}}))
    saver.close()


def _steady(value):
    """``value`` without what differs between two recordings of one run (times, ids, host)."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items()
                if k not in ("started_at", "finished_at", "created_at", "host", "code_revision", "call_id",
                             "request_id", "latency_s", "wall_s", "last_activity")}
    if isinstance(value, (list, tuple)):
        return [_steady(v) for v in value]
    if dataclasses.is_dataclass(value):
        return _steady({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return value


def test_reports_replay_and_training_data_are_the_same_on_both_backends(tmp_path, postgres_server):
    seen = []
    for db in (str(tmp_path / "t.db"), postgres_server.database()):
        store = TraceStore(db)
        record_align_run(store)
        store.close()
        reader = open_trace_store(db)
        seen.append(_steady({
            "summary": run_summary(reader, "r1"), "methods": method_table(reader, "r1"),
            "questions": [question_report(reader, "r1", q.id) for q in PROBLEMS],
            "replay": replay(load_run(reader, "r1"), "plurality").rows, "pairs": align_pairs(reader)}))
        reader.close()
    assert seen[0] == seen[1]


def test_export_import_and_backfill_commands_take_a_postgres_url(tmp_path, postgres_server):
    from typer.testing import CliRunner

    from agora.cli.main import app

    url = postgres_server.database()
    store = TraceStore(url)
    record_align_run(store)
    bundle = tmp_path / "r1.agora.jsonl.gz"
    out = CliRunner().invoke(app, ["export", "--db", url, "--run-id", "r1", "--out", str(bundle)])
    assert out.exit_code == 0, out.output
    assert "1 runs" in out.output and "model_calls 16" in out.output
    other = postgres_server.database()
    back = CliRunner().invoke(app, ["import", str(bundle), "--db", other])
    assert back.exit_code == 0, back.output
    assert table_rows(TraceStore(other), "model_calls") == table_rows(store, "model_calls")
    filled = CliRunner().invoke(app, ["traces", "backfill", "--db", url])
    assert filled.exit_code == 0 and "0 model calls and 0 questions filled" in filled.output, filled.output
    store.close()


@pytest.mark.parametrize("completion, tokens, stored, stored_tokens", [
    ("x\ud800y", 5, {"x\ufffdy"}, 5),                     # a lone surrogate: U+FFFD on both
    ("a\x00b", 5, {"a\x00b", "a\ufffdb"}, 5),             # NUL: kept by SQLite, U+FFFD on Postgres
    ("ok", 10**30, {"ok"}, None),                         # usage beyond 64 bits: NULL on both
])
def test_a_value_a_backend_cannot_store_does_not_lose_the_question(trace_db, completion, tokens, stored,
                                                                  stored_tokens):
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    store.record_question("r", "align", {"question_id": "q", "idx": 0, "kind": "math", "question": "1 + 1?",
                                         "gold": "2", "answer": "2", "correct": True},
                          {"align": {"answer": "2", "correct": True, "samples": 1}},
                          [{"call_id": "c", "model": "m", "messages": [], "completion": completion,
                            "prompt_tokens": 3, "completion_tokens": tokens}])
    [call] = store.calls("r", "q")
    assert call["completion"] in stored and call["completion_tokens"] == stored_tokens
    assert store.finished_questions("r") == {"q"}
    store.close()


def test_calls_come_by_question_in_dataset_order_then_in_the_order_written(trace_db):
    """Question ``a`` (idx 1) is written before ``b`` (idx 0), after a failed question ``f`` with no
    ``questions`` row; call ids run against the write order. The (run_id, question_id) index gives
    a, b, f, and the primary key c0, c1, c5, c9: neither is the order asked for."""
    store = TraceStore(trace_db)
    store.start_run("r", "align", config={}, pool=[], dataset={})
    store.record_calls("r", "align", "f", [{"call_id": "c0", "model": "m", "messages": [], "error": "Boom: down"}])

    def record(qid, idx, call_ids):
        store.record_question("r", "align", {"question_id": qid, "idx": idx, "kind": "math", "question": "1 + 1?",
                                             "gold": "2", "answer": "2", "correct": True},
                              {"align": {"answer": "2", "correct": True, "samples": len(call_ids)}},
                              [{"call_id": c, "model": "m", "messages": [], "completion": "2"} for c in call_ids])

    record("a", 1, ["c9", "c1"])
    record("b", 0, ["c5"])
    assert [(c["question_id"], c["call_id"]) for c in store.calls("r")] == \
        [("b", "c5"), ("a", "c9"), ("a", "c1"), ("f", "c0")]
    assert [c["call_id"] for c in store.calls("r", "a")] == ["c9", "c1"]
    store.close()


def test_an_unreachable_postgres_url_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("psycopg")
    from typer.testing import CliRunner

    from agora.cli.main import app

    url = f"postgresql://nobody@/nodb?host={tmp_path}"  # no server listens there
    out = CliRunner().invoke(app, ["report", "runs", "--db", url])
    assert out.exit_code == 2 and "Traceback" not in out.output
    [line] = [l for l in out.output.splitlines() if l.startswith("error:")]
    assert "cannot connect to the Postgres trace store" in line and "nodb" in line


def test_workers_creating_one_table_at_once_do_not_collide(postgres_server):
    """``CREATE TABLE IF NOT EXISTS`` from several processes at once collides in Postgres's catalog;
    the store's schema changes take turns (four stores, one barrier, the same new table)."""
    import threading

    url = postgres_server.database()
    stores = [TraceStore(url) for _ in range(4)]
    barrier, errors = threading.Barrier(4), []

    def create(store):
        barrier.wait()
        try:
            with store.transaction() as db:
                db["benches"].create({"bench_id": str, "spec": str}, pk="bench_id", if_not_exists=True)
                db["benches"].upsert({"bench_id": "b", "spec": "{}"}, pk="bench_id")
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and [r["bench_id"] for r in stores[0].db.query("select bench_id from benches")] == ["b"]
    for s in stores:
        s.close()


def test_a_bundle_of_a_postgres_run_carries_no_work_sharing_state(tmp_path, postgres_server):
    import gzip
    import json

    from agora.traces.claims import Claims

    store = TraceStore(postgres_server.database())
    record_align_run(store)
    Claims(store, "r1").seed([(0, "q1")])  # (what a worker of the run leaves)
    bundle = tmp_path / "r1.agora.jsonl.gz"
    export_bundle(store, bundle, ["r1"])
    with gzip.open(bundle, "rt") as f:
        tables = list(json.loads(f.readline())["tables"])
    assert tables == ["runs", "questions", "results", "model_calls"]
    store.close()
