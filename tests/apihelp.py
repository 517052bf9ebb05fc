"""Helpers shared by the API, client and MCP tests: an app with keys, and a real server process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from usermem import Memory
from usermem.config import load_settings
from usermem.interfaces.api import create_app

T0 = 1_790_000_000.0


@dataclass
class Api:
    app: FastAPI
    memory: Memory
    http: TestClient
    key_a: str
    key_b: str
    admin_a: str

    def h(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


def fast_memory(url: str | None = None) -> Memory:
    """A Memory without the embedding model (these tests are about the interfaces, not relevance)."""
    settings = load_settings(env={}, embedder="none")
    return Memory(url, settings=settings) if url else Memory(settings=settings)


def make_api(memory: Memory | None = None, **kw: object) -> Api:
    memory = memory or fast_memory()
    app = create_app(memory, **kw)  # type: ignore[arg-type]
    ring = app.state.keys
    key_a, _ = ring.create("acme", name="a")
    key_b, _ = ring.create("globex", name="b")
    admin_a, _ = ring.create("acme", admin=True, name="admin")
    return Api(app, memory, TestClient(app, raise_server_exceptions=False), key_a, key_b, admin_a)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`usermem serve` in a subprocess on a free loopback port."""

    def __init__(self, db: Path, *extra: str, env: dict[str, str] | None = None,
                 start_timeout: float = 90) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = db
        # One process unless a test asks for more (tests/test_serve_workers.py runs several).
        workers = () if "--workers" in extra else ("--workers", "1")
        cmd = [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "serve",
               "--store", f"sqlite:///{db}", "--port", str(self.port), "--log-level", "warning", *workers, *extra]
        full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
        deadline = time.monotonic() + start_timeout  # generous: a loaded 2-core CI machine starts slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if httpx.get(self.url + "/health", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("server did not start")
        self.key = Path(str(db) + ".local-key").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)
