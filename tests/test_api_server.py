"""A real `usermem serve` subprocess on a free loopback port: startup output, the client over TCP, and
graceful shutdown on SIGTERM (in-flight writes finish or fail cleanly; nothing half-written)."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time

import httpx
import pytest

import usermem
from apihelp import T0, Server

NO_EMBEDDER = {"USERMEM_EMBEDDER": "none"}


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "usermem.db", "--graceful-seconds", "10", env={"USERMEM_EMBEDDER": "none"})
    yield s
    s.stop()


@pytest.fixture(params=["embeddings-off", "default-config"])
def loaded_server(request, tmp_path):
    """With embeddings on, every write queues vector indexing; the shutdown must still be bounded."""
    env = {"USERMEM_EMBEDDER": "none"} if request.param == "embeddings-off" else {}
    s = Server(tmp_path / "usermem.db", "--graceful-seconds", "5", env=env)
    yield s
    s.stop()


def test_serve_prints_docs_and_a_working_example_key(server):
    assert server.key.startswith("umk_")
    r = httpx.get(server.url + "/v1/whoami", headers={"Authorization": f"Bearer {server.key}"})
    assert r.json()["tenant"] == "local" and r.json()["admin"] is True
    assert httpx.get(server.url + "/openapi.json").json()["info"]["title"] == "usermem"
    assert httpx.get(server.url + "/docs").status_code == 200
    assert httpx.get(server.url + "/ready").json()["checks"] == {"store": "ok"}
    code = server.stop()
    out = server.proc.stdout.read()
    assert code in (0, -signal.SIGTERM)
    assert f"{server.url}/docs" in out and server.key in out


def test_example_key_is_reused_across_restarts(tmp_path):
    first = Server(tmp_path / "u.db", env=NO_EMBEDDER)  # about the key file: the embedding model is not needed
    key = first.key
    with usermem.Client(first.url, key) as c:
        assert c.write("local", "u1", "fact", "city", "Oslo", now=T0).op.value == "ADD"
    first.stop()
    second = Server(tmp_path / "u.db", env=NO_EMBEDDER)
    try:
        assert second.key == key
        with usermem.Client(second.url, key) as c:
            assert [m.value for m in c.recall("local", "u1", now=T0 + 1)] == ["Oslo"]
    finally:
        second.stop()
    stored = sqlite3.connect(tmp_path / "u.db").execute("SELECT value FROM documents").fetchall()
    assert all(key.split("_", 2)[2] not in row[0] for row in stored), "the secret must be stored hashed only"


def test_sigterm_drains_in_flight_writes_without_half_writes(loaded_server):
    server = loaded_server
    keys_per_batch = 40
    results: dict[str, str] = {}
    lock = threading.Lock()
    enough = threading.Event()
    stop = threading.Event()

    def worker(n: int) -> None:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"},
                          timeout=30) as http:
            i = 0
            while not stop.is_set():
                user = f"w{n}-{i}"
                i += 1
                body = {"user_id": user, "now": T0, "writes": [
                    {"kind": "fact", "key": f"k{j}", "value": f"v{j}" * 20} for j in range(keys_per_batch)]}
                try:
                    r = http.post("/v1/memories/batch", json=body)
                    outcome = "ok" if r.status_code == 200 else f"http {r.status_code}"
                except httpx.TransportError:
                    outcome = "failed"
                with lock:
                    results[user] = outcome
                    if sum(v == "ok" for v in results.values()) >= 20:
                        enough.set()
                if outcome != "ok":
                    return

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    assert enough.wait(30)
    t0 = time.monotonic()
    code = server.stop(signal.SIGTERM, timeout=60)
    shutdown_seconds = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(30)
    assert code in (0, -signal.SIGTERM)
    assert shutdown_seconds < 5 + 5 + 10, "graceful period + bounded engine close"
    assert sum(v == "ok" for v in results.values()) >= 20

    conn = sqlite3.connect(server.db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    counts = dict(conn.execute("SELECT user_id, count(*) FROM memories WHERE tenant='local' AND "
                               "superseded_by IS NULL AND deleted_at IS NULL GROUP BY user_id").fetchall())
    for user, outcome in results.items():
        n = counts.get(user, 0)
        assert n in (0, keys_per_batch), f"{user}: half-written batch ({n} rows)"
        if outcome == "ok":
            assert n == keys_per_batch, f"{user}: acknowledged but not stored"
    assert set(counts) <= set(results)
