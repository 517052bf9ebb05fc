"""A real `usermem serve` app for the console tests: uvicorn on a free loopback port, in a thread, on SQLite."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from usermem import Memory
from usermem.interfaces.api import create_app


@dataclass
class Served:
    memory: Memory
    url: str
    admin_key: str
    other_tenant_admin_key: str
    user_keys: dict[str, str]
    agent_key: str  # bound to alice, but an agent's key, not alice's own token


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(db: Path, users: tuple[str, ...] = ("alice", "bob")) -> Iterator[Served]:
    memory = Memory(f"sqlite:///{db}")
    app = create_app(memory, close_memory=True)
    keys = app.state.keys
    admin, _ = keys.create("acme", admin=True, name="console-test")
    other, _ = keys.create("globex", admin=True, name="other-tenant")
    user_keys = {u: keys.create_user_token("acme", u, name=f"me-{u}")[0] for u in users}
    agent, _ = keys.create("acme", user_id=users[0], name="agent-bound-to-a-user")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="console-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Served(memory, f"http://127.0.0.1:{port}", admin, other, user_keys, agent)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
