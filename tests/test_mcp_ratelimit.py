"""Issue 12 item 9: MCP tool calls draw from the same per-key rate-limit bucket as REST requests.

The server runs in this process (uvicorn in a thread) so the test can drive the limiter's clock: no sleeping.
"""

from __future__ import annotations

import threading
import time

import anyio
import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from apihelp import fast_memory, free_port
from usermem.interfaces.api.app import create_app


def _serve(app: object) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    return server, thread, f"http://127.0.0.1:{port}"


def _client(url: str, key: str) -> Client:
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=30)))


def test_mcp_tool_calls_and_rest_share_one_bucket_per_key():
    memory = fast_memory()
    app = create_app(memory, mcp_path="/mcp", rate_limit_per_minute=3)
    clock = [1000.0]
    app.state.limiter.clock = lambda: clock[0]
    key, _ = app.state.keys.create("acme", name="a")
    other, _ = app.state.keys.create("acme", name="b")
    server, thread, base = _serve(app)
    auth = {"Authorization": f"Bearer {key}"}
    try:
        # Two REST requests take two of the key's three tokens.
        for _ in range(2):
            assert httpx.get(base + "/v1/whoami", headers=auth).status_code == 200
        outcome: dict[str, object] = {}

        async def go() -> None:
            async with _client(base + "/mcp", key) as c:
                r = await c.call_tool("remember", {"key": "city", "value": "Paris", "user_id": "u1"})
                assert not r.is_error, r.content  # the third token
                r = await c.call_tool("recall", {"user_id": "u1"})  # the bucket is empty now
                assert r.is_error
                outcome["limited"] = r.content[0].text
                clock[0] += 20.0  # one token refills (3/minute)
                r = await c.call_tool("recall", {"user_id": "u1"})  # same session still usable
                assert not r.is_error, r.content
                outcome["values"] = [m["value"] for m in r.structured_content["memories"]]
            async with _client(base + "/mcp", other) as c:  # another key has its own bucket
                r = await c.call_tool("recall", {"user_id": "u1"})
                assert not r.is_error, r.content

        anyio.run(go)
        limited = str(outcome["limited"])
        assert limited.startswith("rate_limited (429): rate limit of 3 requests/minute exceeded; retry after 20 s")
        assert outcome["values"] == ["Paris"]
        # MCP took the last token: REST with the same key is refused until the bucket refills.
        r = httpx.get(base + "/v1/whoami", headers=auth)
        assert r.status_code == 429 and r.headers["Retry-After"] == "20"
        metrics = httpx.get(base + "/metrics").text
        assert "usermem_rate_limited_total 2.0" in metrics
    finally:
        server.should_exit = True
        thread.join(20)
        memory.close()
