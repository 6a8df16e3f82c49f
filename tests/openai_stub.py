"""A stub OpenAI-compatible server on 127.0.0.1 for backend and serving tests.

``StubServer(handler)`` serves ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions``
in threads (one per request, as vLLM accepts requests concurrently). ``handler(path, body)``
returns ``(status, payload)``; the default answers ``"The answer is 4."`` with ``n`` choices.
Every request is recorded in ``.requests`` with its arrival and end times.

Faults (the fault-injection suite, ``test_faults.py``): a payload may be :class:`Raw` (any bytes
with a content type: invalid JSON, an HTML error page) or :data:`DROP` (the connection is closed
without a reply, as a server dying mid-request); ``server.handler`` may be swapped while it runs
(a server that breaks, or is fixed, mid-run).

Run as a script (``python openai_stub.py --port P --served-model-name NAME``) it stands in for
``vllm.entrypoints.openai.api_server`` in the serving tests.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Handler = Callable[[str, dict[str, Any]], tuple[int, Any]]


class Raw:
    """A reply body sent as is (``content_type`` header, plus any ``headers`` such as
    ``{"Retry-After": "0.05"}``), e.g. invalid JSON, an HTML page, or an error with its headers."""

    def __init__(self, body: str | bytes, content_type: str = "application/json",
                 headers: dict[str, str] | None = None):
        self.body = body.encode() if isinstance(body, str) else body
        self.content_type = content_type
        self.headers = dict(headers or {})


DROP = object()
"""A payload: close the connection without sending a reply."""


def chat_reply(body: dict[str, Any], texts: list[str | None] | None = None, choices: int | None = None,
               logprobs: list[tuple[str, float]] | None = None, usage: bool = True) -> dict[str, Any]:
    """A chat completion with ``choices`` (default ``n``; ``choices=1`` is a server that ignores
    ``n``) choices cycling through ``texts`` (``None``: ``content: null``); ``usage=False``
    leaves out the usage block. Usage: 11 prompt tokens, 5 completion tokens per choice."""
    k = body.get("n", 1) if choices is None else choices
    texts = texts or ["The answer is 4."]
    out = []
    for i in range(k):
        choice: dict[str, Any] = {"index": i, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": texts[i % len(texts)]}}
        if logprobs is not None:
            choice["logprobs"] = {"content": [
                {"token": t, "logprob": lp, "bytes": None,
                 "top_logprobs": [{"token": t, "logprob": lp, "bytes": None},
                                  {"token": "x", "logprob": lp - 1.0, "bytes": None}]}
                for t, lp in logprobs]}
        out.append(choice)
    reply = {"id": "cmpl-stub", "object": "chat.completion", "created": 0, "model": body.get("model", "stub"),
             "choices": out, "usage": {"prompt_tokens": 11, "completion_tokens": 5 * k, "total_tokens": 11 + 5 * k}}
    if not usage:
        del reply["usage"]
    return reply


def text_reply(body: dict[str, Any], text: str = " 4") -> dict[str, Any]:
    k = body.get("n", 1)
    return {"id": "cmpl-stub", "object": "text_completion", "created": 0, "model": body.get("model", "stub"),
            "choices": [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(k)],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2 * k, "total_tokens": 7 + 2 * k}}


def default_handler(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 200, (text_reply(body) if path.endswith("/completions") and "chat" not in path else chat_reply(body))


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a burst of concurrent connections (socketserver's default backlog is 5)


class StubServer:
    """A threaded OpenAI-compatible stub; use as a context manager (``.base_url`` ends in ``/v1``)."""

    def __init__(self, handler: Handler = default_handler, port: int = 0, model: str = "stub"):
        self.handler = handler
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        stub = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def setup(self):
                super().setup()
                with stub._lock:
                    stub._connections.append(self.connection)

            def _send(self, status: int, payload: Any) -> None:
                if payload is DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                raw = payload if isinstance(payload, Raw) else Raw(json.dumps(payload))
                data = raw.body
                self.send_response(status)
                self.send_header("Content-Type", raw.content_type)
                for key, value in raw.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/v1/models"):
                    self._send(200, {"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                record = {"path": self.path, "body": body, "start": time.monotonic()}
                with stub._lock:
                    stub.requests.append(record)
                status, payload = stub.handler(self.path, body)
                record["end"] = time.monotonic()
                self._send(status, payload)

        self.httpd = _Listener(("127.0.0.1", port), _H)
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop like a killed server: stop listening and drop open (keep-alive) connections."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]


def main() -> None:  # stands in for ``python -m vllm.entrypoints.openai.api_server``
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="stub")
    args, _unknown = parser.parse_known_args()
    with StubServer(port=args.port, model=args.served_model_name):
        threading.Event().wait()


if __name__ == "__main__":
    main()
