"""Issue 19 item 2: `usermem serve --workers 2` — two processes behind one port, one SQLite file (WAL).

Both workers answer; a write through one is read through the other; a key's rate limit is shared by the
workers (not N times the limit); MCP works without sessions (a second request needs none).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from apihelp import free_port
from usermem.interfaces.api.middleware import SharedRateLimiter


class Workers:
    """`usermem serve --workers 2` in a subprocess (a longer start-up allowance than apihelp.Server: two
    processes import the service on a shared 2-core machine)."""

    def __init__(self, db: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "serve", "--store",
               f"sqlite:///{db}", "--port", str(self.port), "--log-level", "warning", *extra]
        env = {**os.environ, "COLUMNS": "200", "USERMEM_EMBEDDER": "none"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if httpx.get(self.url + "/health", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("server did not start")
        self.key = Path(str(db) + ".local-key").read_text().strip()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)


def test_two_workers_share_the_store_and_the_rate_limit(tmp_path) -> None:
    srv = Workers(tmp_path / "w.db", "--workers", "2", "--rate-limit", "20")
    try:
        auth = {"Authorization": f"Bearer {srv.key}"}
        pids: set[int] = set()
        deadline = time.monotonic() + 120  # the second worker may still be starting
        while time.monotonic() < deadline:  # a new connection each time: the kernel spreads them over workers
            with httpx.Client(base_url=srv.url, timeout=10) as c:
                pids.add(c.get("/health").json()["worker"])
            if len(pids) == 2:
                break
        assert len(pids) == 2, f"only worker(s) {pids} answered"
        # MCP without sessions: any worker answers initialise and then a request that carries no session id.
        mcp_headers = {**auth, "Accept": "application/json, text/event-stream"}
        for i, (method, params) in enumerate([("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                                              "clientInfo": {"name": "t", "version": "1"}}),
                                              ("tools/list", {})]):
            r = httpx.post(f"{srv.url}/mcp", headers=mcp_headers, timeout=10,
                           json={"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params})
            assert r.status_code == 200, r.text
        assert "recall" in r.text
        # A write through any worker is read through every worker (the same WAL file), and the key's budget
        # of 20 requests per minute is one budget: counting from the first /v1 request to the first 429,
        # at most 20 plus what refilled meanwhile get through (per-worker buckets would let ~40 through).
        started = time.monotonic()
        body = {"user_id": "alice", "kind": "preference", "key": "drink", "value": "tea"}
        w = httpx.post(f"{srv.url}/v1/memories", json=body, headers=auth, timeout=10)
        assert w.status_code in (200, 201), w.text
        allowed, readers = 1, set()
        for _ in range(60):
            with httpx.Client(base_url=srv.url, timeout=10) as c:
                r = c.get("/v1/users/alice/memories", headers=auth)
                if r.status_code == 429:
                    break
                assert r.status_code == 200 and "tea" in r.text
                allowed += 1
                readers.add(c.get("/health").json()["worker"])
        elapsed = time.monotonic() - started
        assert r.status_code == 429
        assert elapsed < 50, "too slow to tell one budget from two"
        assert allowed <= 20 + elapsed / 3 + 1, (allowed, elapsed)
    finally:
        assert srv.stop() == 0


def test_shared_rate_limiter_is_one_budget_across_instances(tmp_path) -> None:
    """Two limiters over one file (two workers) draw from one bucket per key; other keys are separate."""
    now = [1000.0]
    a = SharedRateLimiter(3, str(tmp_path / "rl"))
    b = SharedRateLimiter(3, str(tmp_path / "rl"))
    a.clock = b.clock = lambda: now[0]
    assert [a.take("k"), b.take("k"), a.take("k")] == [None, None, None]
    assert b.take("k") is not None and a.take("k") is not None
    assert b.take("other") is None
    now[0] += 20.0  # 3 per minute: one token back after 20 s
    assert a.take("k") is None and b.take("k") is not None
    a.close()
    b.close()
