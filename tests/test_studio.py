"""``langgraph dev`` loads every graph of langgraph.json offline (LangGraph Studio's server), runs the
delegation graph through its HTTP API with settings sent as context, and pauses the CUPID graph at
its interrupt until a resume command answers it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout_s: float = 10):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def run_and_wait(base: str, graph_id: str, body: dict) -> tuple[str, dict]:
    """A new thread, one run of ``graph_id`` on it (``body``: input or command, context), its output.
    The run uses the embedded pool (real models): a few seconds with the small settings given."""
    thread = post(f"{base}/threads", {})["thread_id"]
    return thread, post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": graph_id, **body}, timeout_s=300)


@pytest.mark.slow
def test_langgraph_dev_lists_every_graph_runs_delegation_and_pauses_cupid(tmp_path):
    exe = shutil.which("langgraph") or str(Path(sys.executable).with_name("langgraph"))
    if not Path(exe).exists():
        pytest.skip("langgraph-cli is not installed (pip install -e '.[dev]')")
    port = free_port()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGGRAPH_NO_VERSION_CHECK": "1"}
    log = tmp_path / "langgraph-dev.log"  # a file, not a pipe: a full pipe would stall the server mid-run
    sink = log.open("w")
    proc = subprocess.Popen([exe, "dev", "--no-browser", "--no-reload", "--port", str(port)], cwd=ROOT,
                            stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        expected = set(json.loads((ROOT / "langgraph.json").read_text())["graphs"])
        found: set[str] = set()
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                found = {a["graph_id"] for a in post(f"http://127.0.0.1:{port}/assistants/search", {"limit": 100})}
                if expected <= found:
                    break
            except OSError:
                pass
            time.sleep(1)
        assert proc.poll() is None, log.read_text()[-4000:]
        assert expected <= found
        base = f"http://127.0.0.1:{port}"

        # Studio's context form: the settings, and a pool that JSON cannot carry (the embedded one runs)
        [assistant] = post(f"{base}/assistants/search", {"graph_id": "align_delegation"})
        context_schema = get(f"{base}/assistants/{assistant['assistant_id']}/schemas")["context_schema"]
        assert set(context_schema["properties"]) == {"pool", "config"}
        _, out = run_and_wait(base, "align_delegation", {
            "input": {"question": "What is 2 + 3?", "gold": "5"},
            "context": {"config": {"n_agents": 1, "k_samples": 1, "max_tokens": 24, "shots": 0}}})
        assert set(out) == {"answer", "selection", "proposals", "methods"}, out
        assert len(out["proposals"]) == 1 and out["methods"]["self_consistency"]["samples"] == 1  # context used
        assert out["answer"] == out["selection"]["answer"] and isinstance(out["methods"]["align"]["correct"], bool)

        # CUPID pauses at ask_user (both models answer the one prompt, 8 tokens), a command resumes it
        context = {"config": {"budget_rounds": 1, "max_tokens": 8, "mc_samples": 200}}
        thread, paused = run_and_wait(base, "cupid_selection", {"input": {"prompts": ["Say hi."]},
                                                                "context": context})
        [question] = paused["__interrupt__"]
        assert question["value"]["options"] == ["A", "B", "tie"] and question["value"]["round"] == 1
        assert get(f"{base}/threads/{thread}/state")["next"] == ["ask_user"]
        done = post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "cupid_selection",
                                                             "command": {"resume": "A"}, "context": context},
                    timeout_s=120)
        assert done["recommendation"]["rounds"] == 1 and len(done["history"]) == 1, done
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
        sink.close()
