"""benchmarks/agg_vs_align.py: the candidates ALIGN saw, rebuilt from a bench's shared draw, and the
aggregator paired against majority vote and ALIGN on them (scripted bench, scripted aggregator)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.traces.store import TraceStore

from test_bench_shared import args, scripted_tiny, write_math

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "agg_vs_align.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("agg_vs_align", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench_db(tmp_path, monkeypatch):
    """A scripted bench (ALIGN only, shared draw) on 3 questions "What is i + i?": A's sample 0 says 99,
    its samples 1, 2 are right; B's sample 0 is right, its samples 1, 2 say 0."""
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_tiny())
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, args(write_math(tmp_path), db, out, "--limit", "3", "--protocols", "align",
                                          "--shared-candidates"))
    assert result.exit_code == 0, result.output
    return db


def test_align_candidates_are_the_agents_shares_of_the_draw_with_the_recorded_verdicts(script, bench_db):
    items = script.align_candidates(TraceStore.reading(bench_db), "s1", "arith")
    assert [i["problem"].id for i in items] == ["arith-1", "arith-2", "arith-3"]
    for n, item in enumerate(items, start=1):
        right = str(2 * n)
        # agent 0 plays A (samples 0..2), agent 1 plays B (samples 0..2): by hand
        assert item["answers"] == ["99", right, right, right, "0", "0"]
        assert item["candidates"][0] == "The answer is 99." and item["candidates"][3] == f"The answer is {right}."
        assert item["majority"] == right == item["majority_recorded"]
        assert (item["majority_correct"], item["align_correct"], item["any_correct"]) == (1, 1, 1)
        assert item["problem"].gold == right and item["problem"].kind == "math"


def test_a_missing_run_is_refused_naming_it(script, bench_db):
    with pytest.raises(ValueError, match=r"no run s1:gsm8k:align"):
        script.align_candidates(TraceStore.reading(bench_db), "s1", "gsm8k")
    with pytest.raises(ValueError, match="no adapter folder"):
        script.parse_aggregator("trained=/nonexistent/adapter")
    assert script.parse_aggregator("base") == ("base", None)


def test_main_pairs_the_aggregator_with_majority_and_align_and_resumes(script, bench_db, tmp_path, monkeypatch, capsys):
    seen = []

    def fake_greedy(problems, base, adapter, out_file, **kw):
        """An aggregator that answers 99 (wrong) on the first question, right on the others."""
        seen.append((base, adapter, len(problems)))
        rows = []
        for p in problems:
            assert "The answer is 99." in p.question and "What is" in p.question  # the candidates are shown
            n = int(re.search(r"What is (\d+) \+", p.question).group(1))
            rows.append({"question_id": p.id, "text": f"The answer is {99 if n == 1 else 2 * n}."})
        return rows

    monkeypatch.setattr(script, "greedy_outcomes", fake_greedy)
    record = tmp_path / "rec.json"
    argv = ["--db", str(bench_db), "--bench", "s1", "--tasks", "arith", "--aggregator", "base",
            "--out", str(tmp_path / "ans"), "--record", str(record)]
    script.main(argv)
    rec = json.loads(record.read_text())
    cell = rec["cells"]["base/arith"]
    assert cell["correct"] == [0, 1, 1] and cell["majority"] == [1, 1, 1] and cell["align"] == [1, 1, 1]
    assert rec["checks"]["arith"] == {"questions": 3, "majority_agrees": 3, "candidates": 6,
                                      "top_votes": [3, 3, 3]}  # the right answer: A's 2 + B's 1, by hand
    assert seen == [("qwen2.5-coder-0.5b", None, 3)]
    out = capsys.readouterr().out
    assert "vs majority -33.3 pp" in out and "+0/−1" in out
    script.main(argv)  # finished cells are not redone
    assert len(seen) == 1
    figures = script.report(rec)
    assert figures["base"]["arith"]["accuracy"] == pytest.approx(2 / 3)
    assert figures["base"]["arith"]["vs_align"]["lost"] == 1


def test_the_vote_first_gate_by_hand(script):
    """Question 1: the plurality has 2 of 6 votes, the vote is wrong and the aggregator right; question 2:
    4 of 6, the vote right and the aggregator wrong; question 3: 3 of 6, both right."""
    cell = {"aggregator": "base", "task": "t", "status": "finished", "correct": [1, 0, 1], "majority": [0, 1, 1],
            "align": [0, 1, 1], "any_correct": [1, 1, 1]}
    checks = {"t": {"candidates": 6, "top_votes": [2, 4, 3]}}
    assert script.gated([cell], checks, 1) == ([0, 1, 1], [0, 1, 1])  # never asked: the vote
    assert script.gated([cell], checks, 2) == ([1, 1, 1], [0, 1, 1])  # asked on question 1 only
    assert script.gated([cell], checks, 4) == ([1, 0, 1], [0, 1, 1])  # asked everywhere: the aggregator
    figures = script.report({"cells": {"base/t": cell}, "checks": checks})["base"]["gated"]
    assert figures[2]["asked"] == pytest.approx(1 / 3) and figures[2]["accuracy"] == 1.0
    assert (figures[2]["vs_majority"]["gained"], figures[2]["vs_majority"]["lost"]) == (1, 0)
    assert (figures[5]["vs_majority"]["gained"], figures[5]["vs_majority"]["lost"]) == (1, 1)
    assert script.top_votes(["1", None, "2", "1"]) == 2 and script.top_votes([None, None]) == 0
