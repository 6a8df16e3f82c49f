"""``agora replay`` names each member's recipe: in its "why" text (``member 2 (expert [pot])``, as
``agora report question`` shows a member) and, per recorded member, in its JSON rows."""

from __future__ import annotations

import json
import sqlite3

from typer.testing import CliRunner

from agora.agents.slm_mux import SLMMuxConfig
from agora.cli.main import app
from agora.graphs.runner import run_protocol
from agora.graphs.slm_mux import SLMMuxContext
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks import Problem
from agora.traces.replay import replay
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore


def said(*answers):
    return [f"So the answer is {a}." for a in answers]


def mux_db(tmp_path):
    """A scripted SLM-MUX run on one question (gold 2) whose member 2, ``expert``, ran under recipe
    ``pot`` (its rows' ``recipe`` column); the others under none."""
    problems = [Problem(id="q1", question="What is 1 + 1?", gold="2", kind="math")]
    models = {"steady": ScriptedChatModel(responses=said(8, 8, 8), cycle=True),
              "loose": ScriptedChatModel(responses=said(8, 5, 9), cycle=True),
              "expert": ScriptedChatModel(responses=said(4, 4, 7), cycle=True)}
    db = tmp_path / "t.db"
    store = TraceStore(db)
    config = SLMMuxConfig(dev_accuracy=("steady=0.2", "loose=0.3", "expert=0.8"))
    run_protocol("slm-mux", problems, store=store, run_id="mux", context=SLMMuxContext(ModelPool.from_chat_models(
        models, max_retries=0), config), config={}, pool_description=[], dataset={})
    with sqlite3.connect(db) as con:
        assert con.execute("UPDATE model_calls SET recipe = 'pot' WHERE model = 'expert'").rowcount == 3
    return db


def test_replay_why_and_json_name_each_members_recipe(tmp_path):
    db = mux_db(tmp_path)
    run = load_run(TraceStore(db, readonly=True), "mux")
    top = replay(run, "mux_top")
    assert top.rows[0].why == "member 2 (expert [pot]), dev accuracy 0.80: its plurality '4' at 0.67"
    mux = replay(run, "slm_mux")  # steady is the most self-consistent (3 of 3 on '8')
    assert mux.rows[0].why == ("member 0 (steady) is the most self-consistent; member 0 (steady) '8' at 1.00, dev 0.20; "
                               "member 1 (loose) '8' at 0.33, dev 0.30; member 2 (expert [pot]) '4' at 0.67, dev 0.80")
    assert [(m["agent"], m["model"], m["recipe"]) for m in top.rows[0].members if m["role"] == "member"] == [
        (0, "steady", None), (1, "loose", None), (2, "expert", "pot")]
    result = CliRunner().invoke(app, ["replay", "--db", str(db), "--run-id", "mux", "--rule", "mux_top", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)["rows"]
    assert row["why"].startswith("member 2 (expert [pot])")
    assert {(m["role"], m["agent"], m["model"], m["recipe"]) for m in row["members"]} >= {
        ("member", 0, "steady", None), ("member", 1, "loose", None), ("member", 2, "expert", "pot")}
