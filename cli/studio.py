"""``agora studio``: LangGraph's development server (what ``langgraph dev`` runs, for LangGraph
Studio and the HTTP API) for every graph of ``langgraph.json``, without the dev server's pickle files.

``langgraph dev`` keeps its threads, runs, store and checkpoints in ``.langgraph_api/*.pckl`` under
the folder it starts in, and loads them with :mod:`pickle` at startup (langgraph-runtime-inmem's
file persistence): a crafted file there runs code before the first request. In langgraph-api
0.16 / langgraph-runtime-inmem 0.36 ``langgraph dev`` always turns that persistence on (it sets
``LANGGRAPH_DISABLE_FILE_PERSISTENCE`` from a ``disable_persistence`` key that ``langgraph.json``
validation drops), and the operations file ``.langgraph_ops.pckl`` is loaded even when it is off.
So this command starts the same server (``langgraph_api.cli.run_server``) itself:

- in a fresh private folder (``mkdtemp``, mode 0700, removed on exit) as its working directory,
  so no ``.langgraph_api`` of the project (or anyone's) is ever read; the graph paths of
  ``langgraph.json`` are made absolute, so the graphs load from the project as before;
- with file persistence off (``disable_persistence=True``: ``LANGGRAPH_DISABLE_FILE_PERSISTENCE=true``),
  so threads and runs live in memory only and end with the server;
- with strict msgpack (``LANGGRAPH_STRICT_MSGPACK=true``: checkpoints deserialize only the types the
  graphs declare) and no pickle fallback in the checkpoint serializer (``pickle_fallback: false``);
- on 127.0.0.1 without reload, browser or tunnel unless asked.

The HTTP API works offline; the Studio web UI (https://smith.langchain.com/studio) is a web page
loaded from the internet that talks to this local server (docs/studio.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import typer

from agora.tasks.errors import InputError
from agora.cli._apps import app
from agora.cli._shared import err_console, user_errors
from agora.graphs.context import POOL_DIR_ENV

STUDIO_URL = "https://smith.langchain.com/studio/?baseUrl=http://{host}:{port}"
"""The Studio web UI for a local server (a web page from the internet; the server itself is local)."""

SAFE_ENV = {
    "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",
    "LANGGRAPH_STRICT_MSGPACK": "true",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "1",
}
"""What the server process starts with (``run_server`` sets the first one again from
``disable_persistence``; the strict-msgpack switch is read when LangGraph's serializer is imported,
so it must be in the environment before the process starts)."""

SERVER_MODULES = ("langgraph_api", "langgraph_runtime_inmem")
"""The dev server's packages (``langgraph-cli[inmem]``, in Agora's ``dev`` extra), checked before anything starts."""
INSTALL_HINT = 'pip install "agora-llm[dev]" (in a checkout: pip install -e ".[dev]")'


def missing_server() -> list[str]:
    """The modules of :data:`SERVER_MODULES` that are not installed (found without importing them)."""
    missing = []
    for name in SERVER_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent that fails to import, or a module set to None
            found = False
        if not found:
            missing.append(name)
    return missing


SAFE_CHECKPOINTER = {"serde": {"pickle_fallback": False}}
"""langgraph-api's checkpoint serializer without its cloudpickle fallback (``langgraph.json``'s
``checkpointer.serde.pickle_fallback``)."""


STUDIO_ORIGIN = "https://smith.langchain.com"
"""The Studio web UI's origin: the one web page, besides the server's own, allowed to call the API."""


def allowed_origins(host: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    """Origins whose browser requests the server answers: Studio's, the server's own address (and
    ``localhost``/``127.0.0.1`` for it), and ``extra`` (``--allow-origin``). Requests without an
    ``Origin`` header (curl, the SDK, scripts) are not browser requests and always pass."""
    own = [f"http://{h}:{port}" for h in dict.fromkeys([host, "127.0.0.1", "localhost"])]
    return list(dict.fromkeys([STUDIO_ORIGIN, *own, *extra]))


def _guard_origins() -> None:
    """Make langgraph-api's CORS middleware refuse (403) a request whose ``Origin`` is not allowed.

    langgraph-api answers any origin (``access-control-allow-origin: *``) and allows private-network
    requests, so any web page a user visits could start runs on this server with a plain
    ``text/plain`` POST (a browser sends it without a preflight; CORS only hides the reply). The server
    builds its middleware from ``starlette.middleware.cors.CORSMiddleware`` when it is imported, so the
    class is replaced here, in the server process, before that import; the allowed origins come from
    ``CORS_ALLOW_ORIGINS`` (:func:`allowed_origins`)."""
    import starlette.middleware.cors as cors
    from starlette.responses import PlainTextResponse

    base = cors.CORSMiddleware
    if getattr(base, "agora_guard", False):
        return

    class OriginGuard(base):  # type: ignore[misc, valid-type]
        agora_guard = True

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                origin = dict(scope.get("headers") or []).get(b"origin")
                if origin is not None and not self.is_allowed_origin(origin.decode("latin-1")):
                    refusal = PlainTextResponse("origin not allowed by agora studio (see --allow-origin)",
                                                status_code=403)
                    await refusal(scope, receive, send)
                    return
            await super().__call__(scope, receive, send)

    cors.CORSMiddleware = OriginGuard


def server_graphs(config_path: Path) -> dict[str, Any]:
    """The ``graphs`` of a ``langgraph.json`` with every relative file path made absolute (relative
    to the file's folder), so the server can start in another folder.

    Raises:
        ValueError: the file is not JSON, or has no ``graphs`` object (the message names the file).
    """
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{config_path}: cannot read the LangGraph config ({exc})") from None
    graphs = config.get("graphs") if isinstance(config, dict) else None
    if not isinstance(graphs, dict) or not graphs:
        raise InputError(f"{config_path}: no 'graphs' object (a langgraph.json lists graph id -> path)")
    root = config_path.resolve().parent

    def absolute(path: str) -> str:
        file, _, attr = path.rpartition(":")
        if file.endswith(".py") and not Path(file).is_absolute():
            return f"{(root / file).resolve()}:{attr}"
        return path

    out: dict[str, Any] = {}
    for graph_id, entry in graphs.items():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            out[graph_id] = {**entry, "path": absolute(entry["path"])}
        elif isinstance(entry, str):
            out[graph_id] = absolute(entry)
        else:
            raise InputError(f"{config_path}: graphs.{graph_id}: expected a path or an object with 'path'")
    return out


def server_command(config_path: Path, host: str, port: int, browser: bool) -> list[str]:
    """The child process that runs the server (``python -m agora.cli.studio CONFIG HOST PORT BROWSER``)."""
    return [sys.executable, "-m", "agora.cli.studio", str(config_path.resolve()), host, str(port), str(int(browser))]


def port_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound now (another server listens there), tested as
    langgraph-api tests it before it falls back to a random port."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def port_taken_message(host: str, port: int) -> str:
    return (f"--port {port}: {host}:{port} is in use (another agora studio or langgraph dev?); "
            "stop it or pick another port with --port")


def _keep_port(host: str, port: int | None) -> int:
    """langgraph-api's ``_resolve_port`` without its fallback: it serves on a random free port when the
    one asked for is taken, after ``agora studio`` printed the asked-for address. Here the server exits
    with one line instead."""
    if port is not None and port_in_use(host, port):
        print(f"error: {port_taken_message(host, port)}", file=sys.stderr)
        raise SystemExit(1)
    return port if port is not None else 2024


def stale_pickles(project: Path) -> list[Path]:
    """``.langgraph_api/*.pckl`` files in ``project`` (left by ``langgraph dev``; never read here)."""
    folder = project / ".langgraph_api"
    return sorted(folder.glob("*.pckl")) if folder.is_dir() else []


@app.command("studio", short_help="LangGraph's dev server for Studio and the HTTP API, without its pickle files.")
def studio(
    config: Path = typer.Option(Path("langgraph.json"), "--config", help="The LangGraph config listing the graphs."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (127.0.0.1: this machine only)."),
    port: int = typer.Option(2024, "--port", min=1, max=65535, help="Port of the HTTP API."),
    browser: bool = typer.Option(False, "--browser/--no-browser", help="Open the Studio web UI (loaded from "
                                 "the internet) in a browser."),
    allow_origin: list[str] = typer.Option([], "--allow-origin", help="Another web origin whose pages may call "
                                           "the API (repeatable). Studio's and the server's own are allowed; "
                                           "browser requests from any other origin are refused."),
) -> None:
    """Serve every graph of CONFIG for LangGraph Studio and the HTTP API (as ``langgraph dev`` does),
    from a fresh private folder, with file persistence off and strict msgpack: no pickle file is
    read or written, threads and runs end with the server. Ctrl-C stops it.

    A run picks its models in its context: {"pool": "tiny"}, {"pool": "default"} or a pool-file path.
    """
    with user_errors():
        missing = missing_server()
        if missing:  # before the URL is printed and a server process fails on its first import
            raise InputError(f"agora studio needs LangGraph's dev server ({', '.join(missing)} not installed), which "
                             f"Agora's dev extra installs: {INSTALL_HINT}")
        config = config.expanduser()
        if not config.is_file():
            raise FileNotFoundError(f"{config}: no such LangGraph config (run from the project folder, or --config)")
        server_graphs(config)  # a bad config fails here, in one line, before a process starts
        if port_in_use(host, port):  # langgraph-api would move to a random port after the URL below was printed
            raise InputError(port_taken_message(host, port))
        stale = stale_pickles(config.resolve().parent)
        if stale:
            err_console.print(f"note: {len(stale)} pickle file(s) in {stale[0].parent} are ignored (never loaded); "
                              "delete the folder if you did not make them", highlight=False, markup=False)
        workdir = tempfile.mkdtemp(prefix="agora-studio-")
        env = {**os.environ, **SAFE_ENV, "CORS_ALLOW_ORIGINS": ",".join(allowed_origins(host, port, allow_origin)),
               POOL_DIR_ENV: os.environ.get(POOL_DIR_ENV) or os.getcwd()}  # relative pool paths: from here
        err_console.print(f"API: http://{host}:{port}  (docs: http://{host}:{port}/docs)\n"
                          f"Studio (web UI from the internet): {STUDIO_URL.format(host=host, port=port)}",
                          highlight=False, markup=False)
        previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the server as Ctrl-C does
        proc = subprocess.Popen(server_command(config, host, port, browser), cwd=workdir, env=env)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()  # uvicorn shuts down on SIGTERM (Ctrl-C in a terminal reached it already)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            err_console.print("stopped", highlight=False)
            code = 0
        finally:
            signal.signal(signal.SIGTERM, previous)
            shutil.rmtree(workdir, ignore_errors=True)
        if code:
            raise typer.Exit(code)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _serve(config: str, host: str, port: str, browser: str) -> None:
    """The server process (started by :func:`studio` in its private folder, with :data:`SAFE_ENV`)."""
    import langgraph_api.cli
    from langgraph_api.cli import run_server

    _guard_origins()
    langgraph_api.cli._resolve_port = _keep_port  # the port taken since the check: exit, do not move
    config_path = Path(config)
    sys.path.insert(0, str(config_path.parent))  # langgraph.json's "dependencies": ["."]
    raw = json.loads(config_path.read_text(encoding="utf-8"))
    run_server(host, int(port), False, server_graphs(config_path), open_browser=browser == "1",
               env=raw.get("env"), store=raw.get("store"), auth=raw.get("auth"), http=raw.get("http"),
               checkpointer={**(raw.get("checkpointer") or {}), **SAFE_CHECKPOINTER}, disable_persistence=True)


if __name__ == "__main__":
    _serve(*sys.argv[1:5])
