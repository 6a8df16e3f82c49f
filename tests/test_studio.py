"""``langgraph dev`` loads every graph of langgraph.json offline (LangGraph Studio's server)."""

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


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_langgraph_dev_lists_every_graph():
    exe = shutil.which("langgraph") or str(Path(sys.executable).with_name("langgraph"))
    if not Path(exe).exists():
        pytest.skip("langgraph-cli is not installed (pip install -e '.[dev]')")
    port = free_port()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGGRAPH_NO_VERSION_CHECK": "1"}
    proc = subprocess.Popen([exe, "dev", "--no-browser", "--no-reload", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert expected <= found
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
