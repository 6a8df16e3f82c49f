"""examples/agent_app.py: routes math to ALIGN and multiple choice to COMED, as subgraphs, on a pool of
the user's chat models (scripted here) or a built-in pool named in its context; streams the protocols'
events, records their questions in a trace database and prints the runs."""

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel

APP = Path(__file__).resolve().parents[1] / "examples" / "agent_app.py"


def load_app():
    spec = importlib.util.spec_from_file_location("agent_app", APP)
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_app"] = module
    spec.loader.exec_module(module)
    return module


def test_app_routes_each_question_to_its_protocol():
    app = load_app()

    def respond(chat, index):
        return "The answer is C." if "\nC. " in chat[-1]["content"] else "The answer is 20."

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=respond), "b": ScriptedChatModel(respond=respond)})
    graph = app.build_app().compile()
    ctx = app.AppContext(pool=pool)
    math = graph.invoke({"question": "Mia has 4 bags with 5 marbles each. How many marbles?"}, context=ctx)
    assert (math["protocol"], math["answer"]) == ("align", "20")
    mc = graph.invoke({"question": "Which gas?\nA. O2\nB. N2\nC. CO2\nD. He"}, context=ctx)
    assert (mc["protocol"], mc["answer"]) == ("comed", "C")
    assert mc["explanation"] == "COMED: accept"  # three agreeing anchor samples: SC = 1 >= tau_hi


def scripted_respond(chat, index):
    return "The answer is C." if "\nC. " in chat[-1]["content"] else "The answer is 20."


def test_run_streams_the_protocol_events_records_the_questions_and_reports(tmp_path):
    app = load_app()
    # "your own models": any LangChain chat models (scripted ones here)
    pool = app.pool_of_chat_models({"mine": ScriptedChatModel(respond=scripted_respond),
                                    "also-mine": ScriptedChatModel(respond=scripted_respond)})
    out = io.StringIO()
    recorder = app.run(app.AppContext(pool=pool), tmp_path / "app.db", run_id="demo", out=out)
    text = out.getvalue()
    assert recorder.run_ids == {"align": "demo-align", "comed": "demo-comed"}
    assert recorder.recorded == {"align": 1, "comed": 1}
    # the protocols' own progress events reached the app's stream (subgraphs=True)
    assert "[delegate] delegating to 2 agents × 2 samples" in text and "[selection] principal selected 20" in text
    assert "[accept] accepted the anchor's answer C" in text
    assert "-> align: 20" in text and "-> comed: C  (COMED: accept)" in text
    assert "  demo-align  align  finished  1 question(s)  accuracy -" in text  # no gold: no accuracy
    assert "  demo-comed  comed  finished  1 question(s)  accuracy -" in text


@pytest.mark.slow
def test_app_runs_on_the_tiny_pool(tmp_path):
    db = tmp_path / "app.db"
    out = subprocess.run([sys.executable, str(APP), "--db", str(db)], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    assert "-> align:" in out.stdout and "-> comed:" in out.stdout and "[delegate]" in out.stdout
    report = subprocess.run([sys.executable, "-m", "agora.cli", "report", "runs", "--db", str(db), "--json"],
                            capture_output=True, text=True, timeout=300)
    rows = {r["run_id"]: r for r in map(json.loads, report.stdout.splitlines())}
    assert {r: (rows[r]["protocol"], rows[r]["questions"]) for r in rows} == {
        "agent-app-align": ("align", 1), "agent-app-comed": ("comed", 1)}


def test_the_openai_members_sample_at_their_own_temperatures_without_client_retries(tmp_path, caplog):
    """``--openai-url``: two members of one served model, at temperatures 0 and 1. The stub records
    each request's temperature: the members' own settings reach the server (the protocol's 0.7 does
    not override them), and the clients make no retries of their own (Agora's warning stays silent)."""
    pytest.importorskip("langchain_openai")
    import logging

    from openai_stub import StubServer, chat_reply

    app = load_app()

    def respond(path, body):
        content = body["messages"][-1]["content"]
        return 200, chat_reply(body, ["The answer is C." if "\nC. " in content else "The answer is 20."])

    with StubServer(respond) as srv, caplog.at_level(logging.WARNING, logger="agora.langchain"):
        app.main(["--openai-url", srv.base_url, "--openai-model", "stub", "--db", str(tmp_path / "app.db")])
    temperatures = sorted({body["temperature"] for body in srv.bodies()})
    assert temperatures == [0.0, 1.0]
    assert {body["model"] for body in srv.bodies()} == {"stub"}
    assert "max_retries" not in caplog.text
