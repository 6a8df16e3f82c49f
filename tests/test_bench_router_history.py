"""The bench's routed-anchor COMED (``comed_routed``) with a pool member that never answered on the
dev split: the dev router leaves that member out (and says so), or, when no member has scored dev
answers, the bench stops before any test question."""

import json
import re

from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore

A, B, MUTE = "alpha", "beta", "stub+fewshot"


def write_math(tmp_path, n=6):
    f = tmp_path / "arith.jsonl"
    f.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                         for i in range(1, n + 1)))
    return f


def pool_with_mute(answering=(A, B)):
    """A is always wrong (99), B always right; MUTE (and any model not in ``answering``) returns an
    empty reply every time, which the pool counts as a failed attempt."""
    def make(model):
        def respond(chat, j):
            if model not in answering:
                return ""
            i = int(re.search(r"What is (\d+) \+", chat[-1]["content"]).group(1))
            return f"The answer is {2 * i if model == B else 99}."
        return respond

    return ModelPool.from_chat_models({m: ScriptedChatModel(respond=make(m), latency_s=0.001) for m in (A, B, MUTE)})


def bench_args(f, db, out):
    return ["bench", "--tasks", f"arith={f}", "--db", str(db), "--out", str(out), "--run-id", "r1",
            "--max-tokens", "16", "--limit", "3", "--dev", "3", "--shared-candidates", "--embedding", "tfidf",
            "--protocols", "align,comed"]


def test_a_member_without_dev_answers_is_left_out_of_the_dev_router(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: pool_with_mute())
    f, db, out = write_math(tmp_path), tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, bench_args(f, db, out))
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "left out of" in ln]
    assert len(lines) == 1 and MUTE in lines[0] and "no scored dev answer" in lines[0], result.output
    store = TraceStore(db)
    routed = [json.loads(q["detail"])["route"] for q in store.questions("r1:arith:comed-routed")]
    assert len(routed) == 3 and all(r["routed"] and r["anchor"] == B for r in routed)
    assert all(set(r["scores"]) == {A, B} for r in routed)  # the router ranks only the members with history
    report = json.loads((out / "bench.json").read_text())
    assert {c["method"]: c for c in report["cells"]}["comed_routed"]["questions"] == 3
    assert report["settings"]["router_left_out"] == {"arith": [MUTE]}
    assert f"`{MUTE}`" in next(ln for ln in (out / "bench.md").read_text().splitlines() if "left out of" in ln)


def test_fewer_than_two_members_with_dev_answers_stop_before_the_test_questions(tmp_path, monkeypatch):
    """Only A answers on dev: fewer than two members to route between; the bench stops before any test
    question with one line naming the members and what to do (no member at all answering fails the dev
    draw itself, as before)."""
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: pool_with_mute(answering=(A,)))
    f, db, out = write_math(tmp_path), tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, bench_args(f, db, out))
    assert result.exit_code == 2, result.output
    err = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "r1:arith:candidates-dev" in err[0] and "--run-id" in err[0], result.output
    store = TraceStore(db)
    assert store.questions("r1:arith:comed") == [] and store.questions("r1:arith:candidates") == []
