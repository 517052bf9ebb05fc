"""A loopback webhook receiver for the webhook tests (a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.got]


    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The payloads once at least `n` arrived (a background worker sends them), polled until `timeout`."""
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.got) >= n, f"{len(self.got)} of {n} deliveries arrived"
        return self.payloads()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signed_by(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver checks: X-Usermem-Signature is the HMAC-SHA256 of "<timestamp>.<body>"."""
    expected = hmac.new(secret.encode(), headers["x-usermem-timestamp"].encode() + b"." + body,
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-usermem-signature"], "sha256=" + expected)
