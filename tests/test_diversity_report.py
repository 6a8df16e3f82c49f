"""Conversation graph, exchange reader and ``agora report diversity`` on fake trace DBs shaped like
those of ``agora converse``, COMED and duels; a small real ``agora converse`` run (slow)."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agora.agents.panel import analyse
from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.cli.converse import ordered_pairs
from agora.cli.main import app
from agora.graphs.conversation import (
    ConversationConfig,
    ConversationContext,
    build_conversation_graph,
    conversation_messages,
)
from agora.graphs.runner import run_problems
from agora.tasks.loaders import load_problems
from agora.tasks.problem import Problem
from agora.traces.diversity import read_exchanges
from agora.traces.store import TraceStore, call_row


def agora(*args, timeout=600):
    """The console script in a subprocess, as a user runs it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agora.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def agora_here(*args):
    """The same command in this process (the console script's start-up is slow on a busy machine)."""
    return CliRunner().invoke(app, [str(a) for a in args])


def scripted_pool(scripts, families):
    members = [PoolMember(ModelSpec(name=n, backend="openai", family=families[n]),
                          ScriptedChatModel(respond=fn)) for n, fn in scripts.items()]
    return ModelPool(members)


def test_conversation_alternates_speakers_and_traces_partners():
    pool = scripted_pool({
        "a": lambda chat, i: f"I think it is 7. The answer is {7 + len(chat)}.",
        "b": lambda chat, i: "I disagree, it should be 8. The answer is 8.",
    }, {"a": "x", "b": "y"})
    graph = build_conversation_graph().compile()
    out = graph.invoke({"question": "What is 3 + 5?", "gold": "8"},
                       context=ConversationContext(pool=pool, config=ConversationConfig(turns=4, shots=0)))
    turns = out["turns"]
    assert [(t["turn"], t["speaker"], t["partner"]) for t in turns] == [
        (1, "a", None), (2, "b", "a"), (3, "a", "b"), (4, "b", "a")]
    # a sees [system, question] first, then [system, question, own answer, b's reply]
    assert [t["answer"] for t in turns] == ["9", "8", "11", "8"]
    assert out["answer"] == "8"
    assert out["methods"]["opening"]["answer"] == "9" and out["methods"]["opening"]["correct"] is False
    assert out["methods"]["converse"]["correct"] is True and out["methods"]["converse"]["samples"] == 4
    b_view = pool["b"].chat_model.calls[0]["messages"]
    assert [m["role"] for m in b_view] == ["system", "user"]
    assert b_view[1]["content"].startswith("What is 3 + 5?\n\nAnother assistant answered:\n\nI think it is 7.")


def test_conversation_messages_keep_own_turns_as_assistant():
    problem = Problem(id="p", question="Q?", gold=None, kind="open")
    history = [{"turn": 1, "speaker": "a", "partner": None, "text": "A1", "answer": None, "call_id": "1"},
               {"turn": 2, "speaker": "b", "partner": "a", "text": "B2", "answer": None, "call_id": "2"}]
    msgs = conversation_messages(problem, 0, history, "a")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == "A1" and "B2" in msgs[3]["content"]


def test_conversation_config_checks():
    pool = scripted_pool({"a": lambda c, i: "x", "b": lambda c, i: "y"}, {"a": None, "b": None})
    assert ConversationConfig().speakers(pool) == ("a", "b")
    assert ConversationConfig(speaker_a="b").speakers(pool) == ("b", "a")
    assert ConversationConfig(speaker_b="a").speakers(pool) == ("b", "a")
    with pytest.raises(ValueError, match="not in the pool"):
        ConversationConfig(speaker_a="zz").speakers(pool)
    with pytest.raises(ValueError, match="turns"):
        ConversationConfig(turns=1)
    with pytest.raises(ValueError, match="speaker_b"):
        ConversationConfig(speaker_a="a", speaker_b="a")


def test_ordered_pairs():
    pool = scripted_pool({n: (lambda c, i: "x") for n in "abc"}, dict.fromkeys("abc"))
    assert ordered_pairs(pool, None, None) == [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]
    assert ordered_pairs(pool, "c,a", None) == [("c", "a"), ("a", "c")]
    assert ordered_pairs(pool, None, "a:b, c:a") == [("a", "b"), ("c", "a")]
    for models, pairs, message in [(None, "a-b", "not A:B"), (None, "a:a", "itself"), ("a", None, "two models"),
                                   (None, "a:zz", "not in the pool")]:
        with pytest.raises((ValueError, KeyError), match=message):
            ordered_pairs(pool, models, pairs)


HEDGER = "I think the answer might be {n}, but I am not sure. The answer is {n}."
BLUNT = "The answer is {n}."


def converse_db(path):
    """A DB written by the conversation graph through the runner, as `agora converse` does."""
    pool = scripted_pool({
        "hedger": lambda chat, i: HEDGER.format(n=4),
        "blunt": lambda chat, i: BLUNT.format(n=4),
        "blunt-cautious": lambda chat, i: ("Maybe " if "might" in chat[-1]["content"] else "") + BLUNT.format(n=5),
    }, {"hedger": "h", "blunt": "b", "blunt-cautious": "b"})
    store = TraceStore(path)
    problems = load_problems(None, "synthetic", 5, seed=0)
    for a, b in ordered_pairs(pool, None, None):
        config = ConversationConfig(speaker_a=a, speaker_b=b, turns=3, shots=0)
        run_problems(build_conversation_graph(), problems, store=store, run_id=f"conv:{a}>{b}", protocol="converse",
                     context=ConversationContext(pool=pool, config=config), config={}, dataset={},
                     pool_description=pool.describe())
    store.close()
    return path


def test_reader_and_analysis_on_a_converse_db(tmp_path):
    data = read_exchanges(converse_db(tmp_path / "c.db"))
    # 6 ordered pairs × 5 questions × 3 turns
    assert len(data.rows) == 90
    assert data.families == {"hedger": "h", "blunt": "b", "blunt-cautious": "b"}
    assert data.model_order == ["hedger", "blunt", "blunt-cautious"]
    assert {r["partner_source"] for r in data.rows if r["partner"]} == {"column"}
    assert sum(r["partner"] is None for r in data.rows) == 30  # the opening answers
    assert {r["answer"] for r in data.rows if r["speaker"] == "hedger"} == {"4"}
    report = analyse(data.rows, data.families, model_order=data.model_order)
    cells = {(c.speaker, c.partner): c for c in report.cells}
    # each ordered cell: 5 questions × (turn 2 of one order + turn 3 of the other) = 10 turns
    assert cells[("blunt-cautious", "hedger")].turns == 10
    # blunt-cautious hedges ("maybe" in 5 tokens) only when its partner's last turn hedged
    assert cells[("blunt-cautious", "hedger")].cues["hedging"].mean == pytest.approx(20.0)
    assert cells[("blunt-cautious", "blunt")].cues["hedging"].mean == 0.0
    shift = next(s for s in report.shifts if s.speaker == "blunt-cautious" and s.cue == "hedging")
    assert shift.partners == 2 and shift.shift == float("inf")
    hedger = next(s for s in report.shifts if s.speaker == "hedger" and s.cue == "hedging")
    assert hedger.shift == pytest.approx(0.0)
    # agreement: hedger always 4; blunt-cautious always 5
    i, j = report.models.index("hedger"), report.models.index("blunt-cautious")
    assert report.agreement[i, j] == 0.0 and report.agreement_n[i, j] == 5
    assert data.runs[0]["protocol"] == "converse" and data.runs[0]["responses"] == 15
    only = read_exchanges(tmp_path / "c.db", ["conv"])
    assert len(only.rows) == 90 and len(read_exchanges(tmp_path / "c.db", ["conv:hedger>blunt"]).rows) == 15


def comed_db(path):
    """Shaped like a COMED run: anchor samples alone, escalation peers see the anchor (partner column)."""
    store = TraceStore(path)
    store.start_run("comed-1", "comed", config={}, dataset={},
                    pool=[{"name": "anchor-m", "family": "qwen"}, {"name": "peer-1", "family": "qwen"},
                          {"name": "peer-2", "family": "llama"}])
    for q in range(6):
        calls = [{"call_id": f"{q}-a{k}", "model": "anchor-m", "node": "anchor", "role": "anchor",
                  "completion": f"Perhaps 4. The answer is {4 + k % 2}."} for k in range(3)]
        calls += [{"call_id": f"{q}-p1", "model": "peer-1", "node": "escalate", "role": "peer", "partner": "anchor-m",
                   "completion": "I disagree, it is 5. The answer is 5."},
                  {"call_id": f"{q}-p2", "model": "peer-2", "node": "escalate", "role": "peer", "partner": "anchor-m",
                   "completion": "Maybe it is 4. The answer is 4."},
                  {"call_id": f"{q}-fail", "model": "peer-2", "node": "escalate", "role": "peer", "completion": None,
                   "error": "RuntimeError: boom"}]
        store.record_question("comed-1", "comed", {"question_id": f"q{q}", "idx": q, "kind": "math",
                                                   "question": f"What is {q} + 4?"}, {}, calls)
    store.close()
    return path


def duel_db(path):
    """Shaped like a duel run: followers answer alone, judges see both answers; no questions rows."""
    store = TraceStore(path)
    store.start_run("duel-1", "duel", config={}, dataset={},
                    pool=[{"name": "m1", "family": "f"}, {"name": "m2", "family": "g"}, {"name": "m3", "family": "g"}])
    with store.transaction() as db:
        rows = []
        for q in range(3):
            rows += [call_row({"call_id": f"{q}-1", "model": "m1", "role": "follower", "node": "duel",
                               "completion": "Probably a poem about the sea."}, "duel-1", f"i{q}", "duel"),
                     call_row({"call_id": f"{q}-2", "model": "m2", "role": "follower", "node": "duel",
                               "completion": "A poem about the sea."}, "duel-1", f"i{q}", "duel"),
                     call_row({"call_id": f"{q}-j", "model": "m3", "role": "judge", "node": "judge",
                               "partner": "m1,m2", "completion": '{"score": 7}'}, "duel-1", f"i{q}", "duel")]
        db["model_calls"].upsert_all(rows, pk="call_id")
    store.close()
    return path


def test_reader_on_comed_and_duel_shaped_dbs(tmp_path):
    comed = read_exchanges(comed_db(tmp_path / "comed.db"))
    assert len(comed.rows) == 30  # the failed attempt is left out
    peers = [r for r in comed.rows if r["role"] == "peer"]
    assert {r["partner"] for r in peers} == {"anchor-m"}
    assert {r["answer"] for r in comed.rows if r["speaker"] == "peer-1"} == {"5"}
    report = analyse(comed.rows, comed.families, model_order=comed.model_order)
    assert report.models == ["anchor-m", "peer-1", "peer-2"]
    a, p1, p2 = range(3)
    assert report.agreement[a, p2] == 1.0 and report.agreement[a, p1] == 0.0  # anchor's plurality is 4

    duel = read_exchanges(duel_db(tmp_path / "duel.db"))
    judges = [r for r in duel.rows if r["role"] == "judge"]
    assert len(judges) == 3 and all(r["partner"] is None and r["partners"] == 2 for r in judges)
    assert any("questions" in n for n in duel.notes) is False  # the table exists, it is just empty
    assert all(r["answer"] is None for r in duel.rows)
    report = analyse(duel.rows, duel.families, model_order=duel.model_order)
    assert report.models == ["m1", "m2"]  # the judge's rows are left out


def old_db(path):
    """A DB from before the partner column, without runs or questions tables."""
    conn = sqlite3.connect(path)
    conn.execute("create table model_calls (call_id text primary key, run_id text, question_id text, "
                 "role text, model text, messages text, completion text, error text)")
    anchor = "The total is 12 because 5 + 7 = 12. The answer is 12."
    conn.executemany("insert into model_calls values (?, ?, ?, ?, ?, ?, ?, ?)", [
        ("1", "r", "q", "anchor", "m1", json.dumps([{"role": "user", "content": "5 + 7?"}]), anchor, None),
        ("2", "r", "q", "peer", "m2", json.dumps([{"role": "user", "content": f"5 + 7?\nOther: {anchor}"}]),
         "I think it is 12.", None),
        ("3", "r", "q", "peer", "m3", json.dumps([{"role": "user", "content": "5 + 7? Other: 12"}]), "12", None),
    ])
    conn.commit()
    conn.close()
    return path


def test_reader_falls_back_to_prompt_contents_on_old_dbs(tmp_path):
    data = read_exchanges(old_db(tmp_path / "old.db"))
    by_call = {r["call_id"]: r for r in data.rows}
    assert (by_call["2"]["partner"], by_call["2"]["partner_source"]) == ("m1", "content")
    assert by_call["3"]["partner"] is None  # "12" is too short to count as evidence
    assert by_call["1"]["partner"] is None
    assert data.families == {} and any("no partner column" in n for n in data.notes)
    assert any("no runs table" in n for n in data.notes) and any("no questions table" in n for n in data.notes)


def test_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such trace database"):
        read_exchanges(tmp_path / "missing.db")
    sqlite3.connect(tmp_path / "empty.db").close()
    with pytest.raises(ValueError, match="no model_calls table"):
        read_exchanges(tmp_path / "empty.db")


def test_report_cli_on_fake_dbs(tmp_path):
    for name, make in (("converse", converse_db), ("comed", comed_db), ("duel", duel_db), ("old", old_db)):
        db, out = make(tmp_path / f"{name}.db"), tmp_path / f"out-{name}"
        res = agora_here("report", "diversity", "--db", db, "--out", out, "--panel-size", "2")
        assert res.exit_code == 0, res.output
        assert "Cue rates per 100 word tokens" in res.stdout and "family-label-only panel" in res.stdout
        for png in ("hedging_by_partner.png", "distance_matrix.png"):
            assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        report = json.loads((out / "diversity.json").read_text())
        assert len(report["panel"]["members"]) == 2
    assert "challenge†" in res.stdout and "† exploratory lexicon" in res.stdout
    converse = json.loads((tmp_path / "out-converse" / "diversity.json").read_text())
    assert converse["models"] == ["hedger", "blunt", "blunt-cautious"]
    assert converse["families"] == {"hedger": "h", "blunt": "b", "blunt-cautious": "b"}


def test_report_cli_errors_are_one_line(tmp_path):
    res = agora("report", "diversity", "--db", tmp_path / "nope.db", "--out", tmp_path / "o")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == f"error: {tmp_path / 'nope.db'}: no such trace database"
    db = comed_db(tmp_path / "c.db")
    res = agora_here("report", "diversity", "--db", db, "--out", tmp_path / "o", "--run", "other")
    assert res.exit_code == 2 and "no successful model calls in run(s) other" in res.stderr


def test_converse_refuses_out_of_range_shots_and_temperature():
    for flag, value, message in (("--shots", "4", "error: --shots: must be an integer from 0 to 3, got 4"),
                                 ("--temperature", "1e9", "error: --temperature: must be a finite number from 0 to 2, got 1e9"),
                                 ("--temperature", "nan", "error: --temperature: must be a finite number from 0 to 2, got nan"),
                                 ("--temperature", "-1", "error: --temperature: must be a finite number from 0 to 2, got -1")):
        res = agora_here("converse", flag, value)
        assert res.exit_code == 2 and message in res.stderr, (flag, value, res.stderr)
        if message.startswith("error:"):  # Agora's one line, not typer's usage box
            assert res.stderr.strip() == message, res.stderr


@pytest.mark.slow
def test_converse_on_the_embedded_pool_then_report(tmp_path):
    db, out = tmp_path / "conv.db", tmp_path / "out"
    res = agora("converse", "--limit", "2", "--turns", "2", "--max-tokens", "12", "--db", db,
                "--models", "smollm2-135m,smollm2-135m-cautious,gemma3-270m", "--run-id", "c1", "--pool", "tiny")
    assert res.returncode == 0, res.stderr
    data = read_exchanges(db)
    assert len(data.rows) == 6 * 2 * 2  # ordered pairs × prompts × turns
    assert data.families["smollm2-135m-cautious"] == "smollm2"
    assert sum(r["partner"] is not None for r in data.rows) == 12
    res = agora("report", "diversity", "--db", db, "--out", out, "--min-turns", "2")
    assert res.returncode == 0, res.stderr
    assert (out / "hedging_by_partner.png").is_file() and (out / "distance_matrix.png").is_file()
    report = json.loads((out / "diversity.json").read_text())
    assert set(report["models"]) == {"smollm2-135m", "smollm2-135m-cautious", "gemma3-270m"}
    assert all(s["partners"] == 2 for s in report["shifts"])


def test_reader_reads_an_echo_of_the_question_as_no_answer(tmp_path):
    question = "Sam had 20 apples and gave 8 away, so he has 12 apples left. How many apples does he have left?"
    store = TraceStore(tmp_path / "e.db")
    store.start_run("r", "converse", config={}, pool=[], dataset={})
    store.record_question("r", "converse", {"question_id": "q1", "question": question, "gold": "12", "kind": "math"},
                          {}, [{"call_id": "c1", "question_id": "q1", "model": "echo", "role": "speaker",
                                "completion": question},
                               {"call_id": "c2", "question_id": "q1", "model": "solver", "role": "speaker",
                                "completion": "The answer is 12."}])
    store.close()
    data = read_exchanges(tmp_path / "e.db")
    assert {r["speaker"]: r["answer"] for r in data.rows} == {"echo": None, "solver": "12"}
