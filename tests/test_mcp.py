"""The MCP server through the SDK's own client: in-process, over stdio (`usermem mcp`) and over
streamable HTTP with API keys deciding the tenant."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from apihelp import T0, fast_memory, free_port
from usermem import Memory
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.mcp import build_server

TOOLS = {"remember", "recall", "assemble", "forget", "confirm", "history", "ingest", "episodes", "forget_user",
         "withdraw_consent"}


def run(coro_fn):
    return anyio.run(coro_fn)


def test_tools_in_process_bound_to_configured_user():
    m = fast_memory()
    m.write("acme", "bob", "fact", "city", "Rome", source="system")

    async def go():
        async with Client(build_server(m, tenant="acme", user_id="alice")) as c:
            assert {t.name for t in (await c.list_tools()).tools} >= TOOLS
            r = await c.call_tool("remember", {"key": "city", "value": "Paris", "source": "user_confirmed"})
            assert not r.is_error and r.structured_content["op"] == "ADD"
            r = await c.call_tool("remember", {"key": "city", "value": "Lyon", "source": "user_confirmed"})
            assert r.structured_content["op"] == "UPDATE"
            r = await c.call_tool("remember", {"key": "password", "value": "hunter2"})
            assert r.structured_content["op"] == "REJECT" and r.structured_content["reason"] == "forbidden_key"
            r = await c.call_tool("remember", {"key": "language", "value": "简体中文", "kind": "preference",
                                               "source": "user_confirmed"})
            assert r.structured_content["op"] == "ADD"
            r = await c.call_tool("recall", {"k": 10})
            got = {x["key"]: x["value"] for x in r.structured_content["memories"]}
            assert got == {"city": "Lyon", "language": "简体中文"}
            r = await c.call_tool("history", {"key": "city"})
            assert [v["value"] for v in r.structured_content["versions"]] == ["Paris", "Lyon"]
            r = await c.call_tool("assemble", {"message": "which city am I in? answer in my language"})
            assert not r.is_error, r.content
            text = r.structured_content["text"]
            assert "Lyon" in text and "简体中文" in text and "Rome" not in text
            r = await c.call_tool("recall", {"user_id": "bob"})
            assert r.is_error and "bound to one user" in r.content[0].text
            r = await c.call_tool("forget", {"key": "city"})
            assert r.structured_content == {"deleted": 2}
            r = await c.call_tool("recall", {"k": 10})
            assert [x["key"] for x in r.structured_content["memories"]] == ["language"]

    run(go)
    assert [r.value for r in m.recall("acme", "bob")] == ["Rome"]
    m.close()


def test_unbound_server_needs_a_user_and_a_tenant():
    m = Memory()

    async def go():
        async with Client(build_server(m, tenant="acme")) as c:
            r = await c.call_tool("recall", {})
            assert r.is_error and "user_id is required" in r.content[0].text
            r = await c.call_tool("remember", {"key": "city", "value": "Oslo", "user_id": "u9"})
            assert r.structured_content["op"] == "ADD"
        async with Client(build_server(m)) as c:
            r = await c.call_tool("recall", {"user_id": "u9"})
            assert r.is_error and "no tenant" in r.content[0].text
            r = await c.call_tool("remember", {"key": "Bad Key!", "value": 1, "user_id": ""})
            assert r.is_error

    run(go)
    m.close()


def test_confirm_tool_confirms_the_current_version():
    m = Memory()
    m.write("acme", "alice", "preference", "tone", "warm", source="user_confirmed", now=T0)

    async def go():
        async with Client(build_server(m, tenant="acme", user_id="alice")) as c:
            return await c.call_tool("confirm", {"key": "tone"})

    r = run(go)
    assert not r.is_error, r.content
    rec = m.history("acme", "alice", "tone")[-1]
    assert rec.last_confirmed_at is not None and rec.is_current
    m.close()


def test_stdio_with_the_sdk_client(tmp_path):
    db = tmp_path / "mcp.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from usermem.interfaces.cli import main; main()", "mcp", "--tenant", "acme", "--user", "alice",
              "--store", f"sqlite:///{db}"],
        env={**os.environ, "USERMEM_EMBEDDER": "none"})

    async def go():
        async with Client(params) as c:
            assert {t.name for t in (await c.list_tools()).tools} >= TOOLS
            r = await c.call_tool("remember", {"key": "city", "value": "Berlin", "source": "user_confirmed"})
            assert r.structured_content["op"] == "ADD", r.content
            r = await c.call_tool("recall", {})
            assert [x["value"] for x in r.structured_content["memories"]] == ["Berlin"]

    run(go)
    m = Memory(f"sqlite:///{db}")
    assert [r.value for r in m.recall("acme", "alice")] == ["Berlin"]
    m.close()


@pytest.fixture
def http_server(tmp_path):
    db = tmp_path / "mcp-http.db"
    m = Memory(f"sqlite:///{db}")
    ring = KeyRing(m.store)
    key_a, _ = ring.create("acme", user_id="alice")
    key_b, _ = ring.create("globex")
    m.close()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "mcp", "--transport", "http",
         "--port", str(port), "--store", f"sqlite:///{db}"],
        env={**os.environ, "USERMEM_EMBEDDER": "none"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 90  # a loaded 2-core machine can take 20 s+ to start it
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    yield url, key_a, key_b, db
    proc.terminate()
    proc.wait(20)


def _client(url: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=30)))


def test_streamable_http_key_decides_tenant_and_user(http_server):
    url, key_a, key_b, db = http_server
    assert httpx.post(url, json={}).status_code == 401
    assert httpx.post(url, json={}, headers={"Authorization": "Bearer umk_bad"}).status_code == 401

    async def go():
        async with _client(url, key_a) as c:
            r = await c.call_tool("remember", {"key": "city", "value": "Paris", "user_id": "alice"})
            assert r.structured_content["op"] == "ADD", r.content
            r = await c.call_tool("recall", {"user_id": "mallory"})
            assert r.is_error and "bound to one user" in r.content[0].text
        async with _client(url, key_b) as c:
            r = await c.call_tool("recall", {"user_id": "alice"})
            assert not r.is_error and r.structured_content["memories"] == []
            r = await c.call_tool("remember", {"key": "city", "value": "Oslo", "user_id": "alice"})
            assert r.structured_content["memory"]["value"] == "Oslo"

    run(go)
    m = Memory(f"sqlite:///{db}")
    assert [r.value for r in m.recall("acme", "alice")] == ["Paris"]
    assert [r.value for r in m.recall("globex", "alice")] == ["Oslo"]
    m.close()


def test_usermem_serve_also_serves_mcp_at_slash_mcp(tmp_path):
    from apihelp import Server

    server = Server(tmp_path / "both.db", env={"USERMEM_EMBEDDER": "none"})
    try:
        url = server.url + "/mcp"
        assert httpx.post(url, json={}).status_code == 401

        async def go():
            async with _client(url, server.key) as c:
                assert {t.name for t in (await c.list_tools()).tools} >= TOOLS
                r = await c.call_tool("remember", {"key": "city", "value": "Lisbon", "user_id": "zoe",
                                                   "source": "user_confirmed"})
                assert r.structured_content["op"] == "ADD", r.content

        run(go)
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as http:
            items = http.get("/v1/users/zoe/memories").json()["items"]
        assert [i["memory"]["value"] for i in items] == ["Lisbon"]
        assert items[0]["memory"]["tenant"] == "local" and items[0]["memory"]["actor"].startswith("mcp:key:")
    finally:
        server.stop()
