"""Replay of SLM-MUX's methods: COMED's SLM-MUX baseline on a bench's shared candidates (its members'
samples are the candidates run's rows, mapped back to the members that took them) and the
best-member baseline ``mux_top``, each recorded with a scripted pool and replayed to the same answers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.agents.slm_mux import SLMMuxConfig
from agora.graphs.runner import run_protocol
from agora.graphs.slm_mux import SLMMuxContext
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks import Problem
from agora.traces.replay import replay, reproduced
from agora.traces.run_trace import load_run
from agora.traces.shared_candidates import shared_totals
from agora.traces.store import TraceStore
from test_bench_shared import TINY, args, scripted_tiny, write_math

A, B = TINY


def agora(*argv):
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "250"})
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory):
    """A scripted bench on shared candidates: A (COMED's anchor) answers right on its first two samples
    and 99 on its third, B always 0. SLM-MUX's members take each model's first N = 3 shared samples:
    B is the more self-consistent (1.0 against 0.67), so SLM-MUX answers 0 (wrong) where the anchor
    answers right."""
    tmp = tmp_path_factory.mktemp("mux")
    f = write_math(tmp)
    mp = pytest.MonkeyPatch()
    mp.setattr(bench_cli, "get_pool", lambda path: scripted_tiny(a_right=lambda i, j: j < 2,
                                                                 b_right=lambda i, j: False))
    try:
        result = CliRunner().invoke(app, args(f, tmp / "t.db", tmp / "b", "--limit", "3",
                                              "--protocols", "comed,slm-mux,mux_vote"))
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return tmp / "t.db"


def test_comeds_slm_mux_on_shared_candidates_replays_to_the_recorded_answers(bench_db):
    store = TraceStore(bench_db, readonly=True)
    run = load_run(store, "s1:arith:comed")
    recorded = {q.question_id: {m: r["answer"] for m, r in q.results.items()} for q in run.questions}
    assert recorded == {f"arith-{i}": {"comed": str(2 * i), "anchor": str(2 * i),
                                       "slm-mux": "0", "mux_vote": "0"} for i in (1, 2, 3)}
    mux = replay(run, "slm_mux")
    assert [r.unavailable for r in mux.rows] == [None] * 3
    assert [(r.answer, r.correct, r.samples) for r in mux.rows] == [("0", False, 6)] * 3
    assert reproduced(run, mux, "slm-mux") == (3, 3)
    assert mux.rows[0].why == (f"member 1 ({B}) is the most self-consistent; member 0 ({A}) '2' at 0.67; "
                               f"member 1 ({B}) '0' at 1.00")
    vote = replay(run, "plurality", {"roles": "member"})  # mux_vote: the plurality over the members' 6 samples
    assert reproduced(run, vote, "mux_vote") == (3, 3)
    # the members' samples are the candidates run's rows, member i on the pool's i-th model, its first N
    q = run.questions[0]
    members = [(s.agent, s.model, s.sample_index, s.answer, s.shared_from) for s in q.samples if s.role == "member"]
    assert members == [(0, A, 0, "2", "s1:arith:candidates"), (0, A, 1, "2", "s1:arith:candidates"),
                       (0, A, 2, "99", "s1:arith:candidates"), (1, B, 0, "0", "s1:arith:candidates"),
                       (1, B, 1, "0", "s1:arith:candidates"), (1, B, 2, "0", "s1:arith:candidates")]
    anchor_ids = [s.call_id for s in q.of("anchor")]
    assert anchor_ids == [s.call_id for s in q.samples if s.role == "member"][:3]  # the same rows as the anchor's
    # the run's own shared cost is still its anchor's: 3 samples × 3 questions
    assert shared_totals(store, "s1:arith:comed")["shared_calls"] == 9
    code, out = agora("replay", "--db", str(bench_db), "--run-id", "s1:arith:comed", "--rule", "slm_mux")
    assert code == 0 and "answers identical to the recorded slm-mux: 3/3 questions" in out
    code, out = agora("report", "question", "--db", str(bench_db), "--run-id", "s1:arith:comed", "--question-id",
                      "arith-1", "--json")
    why = {m["method"]: m["why"] for m in json.loads(out)["methods"]}
    assert code == 0 and why["slm-mux"].startswith(f"rule slm_mux: member 1 ({B}) is the most self-consistent")


def said(*answers):
    return [f"So the answer is {a}." for a in answers]


def test_mux_top_replays_the_best_dev_member(tmp_path):
    """mux_top answers with the member of the best dev accuracy: here the last one, whose answer is
    neither the most self-consistent member's nor the pooled vote's."""
    problems = [Problem(id=f"q{i}", question=f"What is {i} + {i}?", gold=str(2 * i), kind="math") for i in (1, 2)]
    models = {"steady": ScriptedChatModel(responses=said(8, 8, 8), cycle=True),
              "loose": ScriptedChatModel(responses=said(8, 5, 9), cycle=True),
              "expert": ScriptedChatModel(responses=said(4, 4, 7), cycle=True)}
    store = TraceStore(tmp_path / "t.db")
    config = SLMMuxConfig(dev_accuracy=("steady=0.2", "loose=0.3", "expert=0.8"))
    run_protocol("slm-mux", problems, store=store, run_id="mux", context=SLMMuxContext(ModelPool.from_chat_models(
        models, max_retries=0), config), config={}, pool_description=[], dataset={})
    run = load_run(store, "mux")
    assert {m: r["answer"] for m, r in run.questions[0].results.items()} == {"slm-mux": "8", "mux_vote": "8",
                                                                            "mux_top": "4"}
    top = replay(run, "mux_top")
    assert [(r.answer, r.samples) for r in top.rows] == [("4", 3), ("4", 3)]
    assert [r.correct for r in top.rows] == [False, True]  # gold 2, then 4
    assert reproduced(run, top, "mux_top") == (2, 2)
    assert top.rows[0].why == "member 2 (expert), dev accuracy 0.80: its plurality '4' at 0.67"
    assert [r.answer for r in replay(run, "mux_top", {"k": 1}).rows] == ["4", "4"]
    assert reproduced(run, replay(run, "slm_mux"), "slm-mux") == (2, 2)
    code, out = agora("replay", "--db", str(tmp_path / "t.db"), "--run-id", "mux", "--rule", "mux_top")
    assert code == 0 and "answers identical to the recorded mux_top: 2/2 questions" in out
    code, out = agora("replay", "--db", str(tmp_path / "t.db"), "--run-id", "mux", "--rule", "mux_top", "--param",
                      "k=-1")
    assert code == 2 and "--param k=-1: must be >= 0" in out
