"""examples/agent_app.py: routes math to ALIGN and multiple choice to COMED, as subgraphs."""

import importlib.util
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


@pytest.mark.slow
def test_app_runs_on_the_embedded_pool():
    out = subprocess.run([sys.executable, str(APP)], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    assert "-> align:" in out.stdout and "-> comed:" in out.stdout
