"""Issue 19 item 2: `usermem serve --workers 2` — two processes behind one port, one SQLite file (WAL).

Both workers answer; a write through one is read through the other; a key's rate limit is shared by the
workers (not N times the limit); MCP works without sessions (a second request needs none).
"""

from __future__ import annotations

import time

import httpx

from apihelp import Server
from usermem.interfaces.api.middleware import SharedRateLimiter


def test_two_workers_share_the_store_and_the_rate_limit(tmp_path) -> None:
    # a longer start-up allowance: two processes import the service on a shared 2-core machine
    srv = Server(tmp_path / "w.db", "--workers", "2", "--rate-limit", "20", env={"USERMEM_EMBEDDER": "none"},
                 start_timeout=150)
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
        assert srv.stop(timeout=60) == 0


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
