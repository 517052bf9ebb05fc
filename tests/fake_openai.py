"""A tiny OpenAI-protocol server on a free loopback port, with scripted replies, for tests.

    with FakeOpenAI() as server:
        server.script(reply_json({...}), malformed("{not json"), http_error(500), slow(reply_json(...), 1.0))
        client = LLMClient(server.base_url, "fake-model")

Serves POST /v1/chat/completions (one scripted reply per request, in order; when the script runs
out, `default` is used) and POST /v1/embeddings (deterministic hashed vectors). Every request
body is recorded in `server.requests` so tests can check what the model was shown.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    content: str | None = None
    delay: float = 0.0
    body: dict[str, Any] | None = None  # raw body (for HTTP errors)
    tool_calls: list[dict[str, Any]] | None = None  # the assistant asks for these function calls


def call_tools(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """A reply in which the model calls functions: `call_tools(("recall", {"query": "tea"}))`."""
    return Reply(tool_calls=[{"id": f"call_{i}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                             for i, (name, args) in enumerate(calls)])


def reply_json(data: Any) -> Reply:
    return Reply(content=json.dumps(data, ensure_ascii=False))


def malformed(text: str = '{"fact_recall": ["email"') -> Reply:
    return Reply(content=text)


def http_error(status: int = 500, message: str = "internal error") -> Reply:
    return Reply(status=status, body={"error": {"message": message, "type": "server_error"}})


def slow(reply: Reply, seconds: float) -> Reply:
    return Reply(reply.status, reply.content, seconds, reply.body)


class FakeOpenAI:
    def __init__(self, default: Reply | None = None) -> None:
        self.replies: deque[Reply] = deque()
        self.default = default or reply_json({})
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "body": body})
                if self.path.endswith("/embeddings"):
                    self._send(200, _embeddings(body))
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                with server._lock:
                    reply = server.replies.popleft() if server.replies else server.default
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    self._send(reply.status, reply.body or {"error": {"message": "error"}})
                    return
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if reply.tool_calls:
                    message["tool_calls"] = reply.tool_calls
                self._send(200, {
                    "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                                 "message": message}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload, ensure_ascii=False).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> FakeOpenAI:
        with self._lock:
            self.replies.extend(replies)
        return self

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input", [])
    if isinstance(inputs, str):
        inputs = [inputs]
    data = []
    for i, text in enumerate(inputs):
        digest = hashlib.sha256(str(text).encode()).digest()
        data.append({"object": "embedding", "index": i, "embedding": [b / 255.0 for b in digest[:16]]})
    return {"object": "list", "data": data, "model": body.get("model", "fake"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1}}
