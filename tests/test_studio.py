"""``agora studio`` (the documented Studio command: LangGraph's dev server, as ``langgraph dev`` runs it,
without its pickle files) loads every graph of langgraph.json offline on 127.0.0.1, runs the delegation
graph through its HTTP API on the pool its context names, refuses a context it cannot use (a key it
does not have too), scores a run resumed after a breakpoint against its input's gold, pauses the
CUPID graph at its interrupt until a resume command answers it, and never loads a crafted
``.langgraph_api/*.pckl`` from the project folder."""

import importlib
import json
import os
import pickle
import signal
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from ports import free_ports
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def post(url, body, timeout_s: float = 10):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def run_and_wait(base: str, graph_id: str, body: dict) -> tuple[str, dict]:
    """A new thread, one run of ``graph_id`` on it (``body``: input or command, context), its output."""
    thread = post(f"{base}/threads", {})["thread_id"]
    return thread, post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": graph_id, **body}, timeout_s=300)


TINY = {"smollm2-135m", "gemma3-270m"}


def agora_exe() -> str:
    exe = shutil.which("agora") or str(Path(sys.executable).with_name("agora"))
    if not Path(exe).exists():
        pytest.skip("the agora console script is not installed (pip install -e .)")
    try:
        importlib.import_module("langgraph_api")  # only to check that the extra is installed
    except ImportError:
        pytest.skip("langgraph-api is not installed (pip install -e '.[dev]')")
    return exe


def start_studio(tmp_path: Path, cwd: Path, *args: str) -> tuple[subprocess.Popen, str, Path, object]:
    """``agora studio --port P ...`` started in ``cwd``; its log goes to a file (a full pipe would stall it)."""
    port = free_ports()  # below the ephemeral range: GET /ok polls it for minutes before the server binds it
    env = {**os.environ, "LANGSMITH_TRACING": "false", "AGORA_LLAMA_THREADS": os.environ.get("AGORA_LLAMA_THREADS", "1")}
    log = tmp_path / "studio.log"
    sink = log.open("w")
    proc = subprocess.Popen([agora_exe(), "studio", "--port", str(port), *args], cwd=cwd, stdout=sink,
                            stderr=subprocess.STDOUT, env=env)
    return proc, f"http://127.0.0.1:{port}", log, sink


def wait_until_up(proc: subprocess.Popen, base: str, log: Path, timeout_s: float = 600) -> None:
    """Polls ``GET /ok`` until the server answers; fails with the server's log tail if it exits or
    is not up in ``timeout_s`` (generous: on a shared 2-core machine it once took over 120 s)."""

    def up() -> bool:
        try:
            return bool(get(f"{base}/ok")["ok"])
        except OSError:
            return False

    wait_until(up, f"agora studio to answer GET {base}/ok", timeout_s=timeout_s,
               alive=lambda: proc.poll() is None, log=log, interval_s=0.5)


def stop(proc: subprocess.Popen, sink) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        return proc.wait()
    finally:
        sink.close()


@pytest.mark.slow
def test_agora_studio_serves_every_graph_on_the_pool_its_context_names(tmp_path):
    pickles = {p: p.stat().st_mtime_ns for p in ROOT.glob(".langgraph_api/*.pckl")}
    proc, base, log, sink = start_studio(tmp_path, ROOT)
    try:
        expected = set(json.loads((ROOT / "langgraph.json").read_text())["graphs"])
        wait_until_up(proc, base, log)
        assert expected <= {a["graph_id"] for a in post(f"{base}/assistants/search", {"limit": 100})}

        # Studio's context form: a pool named by a string, and the settings
        [assistant] = post(f"{base}/assistants/search", {"graph_id": "align_delegation"})
        schemas = get(f"{base}/assistants/{assistant['assistant_id']}/schemas")
        context_schema = schemas["context_schema"]
        assert set(context_schema["properties"]) == {"pool", "config"}
        assert {"type": "string"} in context_schema["properties"]["pool"]["anyOf"]
        assert schemas["input_schema"]["examples"] and schemas["input_schema"]["properties"]["question"]["description"]

        _, out = run_and_wait(base, "align_delegation", {
            "input": {"question": "What is 2 + 3?", "gold": "5"},
            "context": {"pool": "tiny", "config": {"n_agents": 2, "k_samples": 1, "max_tokens": 24, "shots": 0}}})
        assert set(out) == {"answer", "selection", "proposals", "methods"}, out
        assert {p["model"] for p in out["proposals"]} == TINY, out["proposals"]  # the tiny pool, not the default
        assert out["methods"]["self_consistency"]["samples"] == 2  # the settings were used too

        # a relative pool-file path: read from the folder `agora studio` was started in, not the server's
        (tmp_path / "rel").mkdir()
        (tmp_path / "rel" / "one.toml").write_text('[[models]]\nname = "only"\nbackend = "llamacpp"\n'
                                                   'path = "builtin:smollm2"\n')
        relative = os.path.relpath(tmp_path / "rel" / "one.toml", ROOT)
        _, out = run_and_wait(base, "align_delegation", {
            "input": {"question": "What is 2 + 3?"},
            "context": {"pool": relative, "config": {"n_agents": 1, "k_samples": 1, "max_tokens": 8, "shots": 0}}})
        assert [p["model"] for p in out.get("proposals", [])] == ["only"], out

        # a pool the graph cannot use: the run fails with the one-line error, nothing runs on a default
        _, bad = run_and_wait(base, "align_delegation", {"input": {"question": "What is 2 + 3?"}, "context": {"pool": 3}})
        assert bad["__error__"]["error"] == "ContextError", bad
        assert bad["__error__"]["message"].startswith("DelegationContext.pool: expected a ModelPool"), bad

        # a context key the graph does not have: refused in one line, not dropped by the server
        _, bad = run_and_wait(base, "align_delegation", {"input": {"question": "What is 2 + 3?"},
                                                         "context": {"pol": "pool.toml"}})
        assert bad["__error__"]["error"] == "ContextError", bad
        assert bad["__error__"]["message"] == "DelegationContext: unknown field(s) pol; its fields are pool, config"

        # the form offers gold; a run paused at a breakpoint is scored against it once resumed
        assert "scoring" in schemas["input_schema"]["properties"]["gold"]["description"]
        assert "shared_candidates" not in schemas["input_schema"]["properties"]
        small = {"pool": "tiny", "config": {"n_agents": 2, "k_samples": 1, "max_tokens": 24, "shots": 0}}
        thread, paused = run_and_wait(base, "align_delegation", {
            "input": {"question": "What is 2 + 3?", "gold": "5"}, "context": small,
            "interrupt_before": ["principal_select"]})
        assert "methods" not in paused and get(f"{base}/threads/{thread}/state")["next"] == ["principal_select"]
        done = post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "align_delegation", "input": None,
                                                             "context": small}, timeout_s=300)
        assert {r["correct"] for r in done["methods"].values()} <= {True, False}, done["methods"]

        # CUPID pauses at ask_user (both tiny models answer the one prompt, 8 tokens), a command resumes it
        context = {"pool": "tiny", "config": {"budget_rounds": 1, "max_tokens": 8, "mc_samples": 200}}
        thread, paused = run_and_wait(base, "cupid_selection", {"input": {"prompts": ["Say hi."]},
                                                                "context": context})
        [question] = paused["__interrupt__"]
        assert question["value"]["options"] == ["A", "B", "tie"] and question["value"]["round"] == 1
        assert get(f"{base}/threads/{thread}/state")["next"] == ["ask_user"]
        done = post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "cupid_selection",
                                                             "command": {"resume": "A"}, "context": context},
                    timeout_s=300)
        assert done["recommendation"]["rounds"] == 1 and len(done["history"]) == 1, done
        assert set(done["arms"]) == TINY
    finally:
        stop(proc, sink)
    assert {p: p.stat().st_mtime_ns for p in ROOT.glob(".langgraph_api/*.pckl")} == pickles  # none read or written


class Payload:
    """Unpickling it opens ``marker`` for writing: the file appears iff the pickle was loaded."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


GRAPH = """from typing_extensions import TypedDict
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    n: int


def step(state: State) -> dict:
    return {"n": state["n"] + 1}


builder = StateGraph(State)
builder.add_node("step", step)
builder.add_edge(START, "step")
builder.add_edge("step", END)
graph = builder.compile()
"""

PICKLES = (".langgraph_ops.pckl", ".langgraph_retry_counter.pckl", ".langgraph_checkpoint.1.pckl",
           ".langgraph_checkpoint.2.pckl", "store.pckl", "store.vectors.pckl")
"""Every file langgraph-runtime-inmem's file persistence loads with pickle (0.36)."""


def test_a_crafted_pickle_in_the_project_folder_does_not_run_through_agora_studio(tmp_path):
    project = tmp_path / "project"
    (project / ".langgraph_api").mkdir(parents=True)
    (project / "graph.py").write_text(GRAPH)
    (project / "langgraph.json").write_text(json.dumps({"dependencies": ["."], "graphs": {"counter": "./graph.py:graph"}}))
    marker = tmp_path / "payload-ran"
    for name in PICKLES:
        (project / ".langgraph_api" / name).write_bytes(pickle.dumps(Payload(marker)))
    # the payload is live: loading one of the files as the dev server would (pickle.load) runs it
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))",
                    str(project / ".langgraph_api" / PICKLES[0])], check=False, capture_output=True)
    assert marker.exists()
    marker.unlink()
    before = {p.name: p.read_bytes() for p in (project / ".langgraph_api").iterdir()}

    proc, base, log, sink = start_studio(tmp_path, project)  # the documented command, from the project folder
    try:
        wait_until_up(proc, base, log)
        thread = post(f"{base}/threads", {})["thread_id"]  # threads, runs and checkpoints are used, then shut down
        out = post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "counter", "input": {"n": 1}},
                   timeout_s=300)  # a first run on a busy machine can take far over the default 10 s
        assert out == {"n": 2}
    finally:
        code = stop(proc, sink)
    assert code == 0, log.read_text()[-4000:]
    assert "pickle file(s)" in log.read_text()  # it says it ignores them
    assert not marker.exists(), "a crafted .langgraph_api pickle ran through agora studio"
    assert {p.name: p.read_bytes() for p in (project / ".langgraph_api").iterdir()} == before  # nothing written


def test_allowed_origins_are_studio_the_server_itself_and_the_ones_given():
    from agora.cli.studio import STUDIO_ORIGIN, allowed_origins

    assert allowed_origins("127.0.0.1", 2024) == [STUDIO_ORIGIN, "http://127.0.0.1:2024", "http://localhost:2024"]
    assert allowed_origins("0.0.0.0", 9, ["https://app.example"])[-1] == "https://app.example"


@pytest.mark.slow
def test_a_web_page_of_another_origin_cannot_start_runs_on_agora_studio(tmp_path):
    """langgraph-api answers any origin and a browser sends a ``text/plain`` POST without asking: under
    ``agora studio`` such a request from a foreign page is refused (403) and starts nothing, while
    Studio's origin, ``--allow-origin`` and plain clients without an ``Origin`` header are served."""
    proc, base, log, sink = start_studio(tmp_path, ROOT, "--allow-origin", "https://app.example")
    try:
        wait_until_up(proc, base, log)

        def request(origin):
            headers = {"content-type": "text/plain"} | ({"Origin": origin} if origin else {})
            req = urllib.request.Request(f"{base}/threads", data=b"{}", headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, dict(resp.headers)
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers)

        status, headers = request("https://evil.example")
        assert status == 403 and "access-control-allow-origin" not in {k.lower() for k in headers}
        for origin in ("https://smith.langchain.com", "https://app.example", None):
            status, headers = request(origin)
            assert status == 200, (origin, status)
            if origin:
                assert {k.lower(): v for k, v in headers.items()}["access-control-allow-origin"] == origin
        threads = post(f"{base}/threads/search", {"limit": 100})
        assert len(threads) == 3  # the refused request made none
    finally:
        stop(proc, sink)
