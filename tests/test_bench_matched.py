"""``agora bench --matched-single`` on a scripted pool: the dev-chosen best member draws the samples it
lacks to match the best multi-member method per question (its own run, resumed and reused), the claim
compares the two per task and macro, and the report has each member's row and the pool's oracle."""

import json
import re
import threading

from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore

A, B = "qa", "qb+pot"  # two members (a recipe-like name: members are named, never grouped by weights)

# Each member's answers to "What is i + i?", by how many times it was asked that question before
# (its shared samples are 0..2, B's extra matched draw 3..5). Test questions 1..3; dev questions 4..6:
# A always wrong (99), B always right, so B is the dev-chosen best member.
ANSWERS = {
    A: {1: [2, 2, 2], 2: [4, 97, 98], 3: [97, 97, 98]},
    B: {1: [2, 2, 0, 0, 0, 0], 2: [0, 0, 4, 4, 4, 4], 3: [6, 6, 6, 0, 0, 0]},
}


def write_math(tmp_path, n=6):
    f = tmp_path / "arith.jsonl"
    f.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                         for i in range(1, n + 1)))
    return f


def scripted(counter):
    lock = threading.Lock()

    def make(model):
        def respond(chat, j):
            text = chat[-1]["content"]
            i = int(re.search(r"What is (\d+) \+", text).group(1))
            if "Responses from several models" in text:  # MoA's aggregator: always wrong, not counted
                return "The answer is 1."
            with lock:
                s = counter.get((model, i), 0)
                counter[model, i] = s + 1
                counter["total"] = counter.get("total", 0) + 1
            if i > 3:
                return f"The answer is {99 if model == A else 2 * i}."
            return f"The answer is {ANSWERS[model][i][s]}."
        return respond

    return ModelPool.from_chat_models({A: ScriptedChatModel(respond=make(A), latency_s=0.001),
                                       B: ScriptedChatModel(respond=make(B), latency_s=0.001)})


def args(f, db, out, *extra):
    return ["bench", "--tasks", str(f), "--db", str(db), "--out", str(out), "--run-id", "m1", "--max-tokens", "16",
            "--limit", "3", "--dev", "3", "--shared-candidates", "--protocols", "single_agent,slm-mux,moa",
            "--embedding", "tfidf", *extra]


def test_the_best_member_at_matched_samples_per_task_and_macro(tmp_path, monkeypatch):
    f = write_math(tmp_path)
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted(counter))
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, args(f, db, out, "--matched-single"))
    assert result.exit_code == 0, result.output
    # B drew exactly 3 more samples of each test question (6 = what SLM-MUX and its vote used), in its own run
    assert all(counter[B, i] == 6 and counter[A, i] == 3 for i in (1, 2, 3)), counter
    store = TraceStore(db)
    extra = list(store.db.query("select question_id, count(*) as n, min(sample_index) as lo from model_calls "
                                "where run_id = 'm1:arith:matched-single' and node = 'matched_draw' and model = ? "
                                "group by question_id", [B]))
    assert sorted((r["question_id"], r["n"]) for r in extra) == [("arith-1", 3), ("arith-2", 3), ("arith-3", 3)]
    report = json.loads((out / "bench.json").read_text())
    assert report["settings"]["shared"]["single_model"]["arith"]["model"] == B
    cells = {c["method"]: c for c in report["cells"]}
    # slm-mux: q1 A (conf 1 > 2/3) right, q2 B (0, 0, 4: conf 2/3 > 1/3) wrong, q3 B (conf 1) right;
    # mux_vote over the 6: q1 2, q2 4 (tie 4/0: 4 seen first), q3 6: all right, so it is the best method
    assert cells["slm-mux"]["accuracy"] == 2 / 3 and cells["mux_vote"]["accuracy"] == 1.0
    assert cells["mux_vote"]["samples_per_q"] == 6 and cells["moa"]["accuracy"] == 0.0  # its aggregator says 1
    # B's own vote over its first 6 samples: q1 2,2,0,0,0,0 -> 0 wrong; q2 0,0,4,4,4,4 -> 4 right;
    # q3 6,6,6,0,0,0 -> tie, 6 seen first: right. So mux_vote − matched B = 1 − 2/3, one win, no loss.
    rows = [c for c in report["claims"] if "at matched samples" in c["claim"]]
    assert [r["task"] for r in rows] == ["arith", "macro"]
    for r in rows:
        assert "mux_vote" in r["claim"] and B in r["claim"]
        assert abs(r["value"] - 1 / 3) < 1e-9 and r["questions"] == 3 and r["p_mcnemar"] == 1.0
        assert (r["wins"], r["losses"]) == (1, 0) and r["holds"] == "too few questions"
        assert "samples per question: mux_vote 6.0, " + B + "'s own vote 6.0 (3.0 of them from the shared pool)" \
            in r["note"]
    # today's unmatched row (the member's vote over its 3 shared samples only) is not made with the option
    assert not any("majority over its" in c["claim"] for c in report["claims"])
    # each member's row (expected one-sample accuracy, own self-consistency over its 3 shared samples)
    members = {(m["task"], m["member"]): m for m in report["members"]}
    assert abs(members["arith", A]["accuracy"] - 4 / 9) < 1e-9 and members["arith", A]["sc_accuracy"] == 2 / 3
    assert abs(members["arith", B]["accuracy"] - 2 / 3) < 1e-9 and members["arith", B]["sc_accuracy"] == 2 / 3
    assert members["arith", B]["sc_samples_per_q"] == 3
    oracle = {o["task"]: o for o in report["pool_oracle"]}
    assert oracle["arith"]["accuracy"] == 1.0 and oracle["macro"]["accuracy"] == 1.0
    md = (out / "bench.md").read_text()
    assert "## Members and the pool's oracle" in md and f"| `{B}` | arith |" in md
    assert "at matched samples" in md
    # resuming draws nothing; --report-only rebuilds the same claims from the DB
    again = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted(again))
    assert CliRunner().invoke(app, args(f, db, out, "--matched-single")).exit_code == 0
    assert again == {}
    rebuilt = CliRunner().invoke(app, ["bench", "--run-id", "m1", "--db", str(db), "--report-only", "--out",
                                       str(tmp_path / "r")])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads((tmp_path / "r" / "bench.json").read_text())["claims"] == report["claims"]


def test_matched_single_needs_a_dev_split_to_choose_the_member(tmp_path, monkeypatch):
    f = write_math(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted({}))
    result = CliRunner().invoke(app, ["bench", "--tasks", str(f), "--db", str(tmp_path / "t.db"), "--limit", "3",
                                      "--matched-single", "--protocols", "single_agent,slm-mux,moa"])
    assert result.exit_code != 0
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and "--matched-single" in errors[0] and "--dev" in errors[0], result.output
    assert not (tmp_path / "t.db").exists() or not TraceStore(tmp_path / "t.db").run_ids("")
