"""The ASGI redaction middleware in front of a real Starlette app (JSON, text, SSE stream, gzip, binary)."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from usermem.interfaces.redact_middleware import RedactMiddleware

PHONE, CARD = "13800138000", "4111 1111 1111 1111"


async def json_ep(request):
    # ensure_ascii escapes: the Chinese label becomes \uXXXX, which raw-text redaction would trip over
    body = json.dumps({"reply": f"您的手机号{PHONE}", "card": CARD, "n": 42, "phone_int": int(PHONE)})
    return Response(body, media_type="application/json")


async def text_ep(request):
    return PlainTextResponse(f"Call {PHONE} or charge {CARD}." * 3)


async def sse_ep(request):
    async def gen():
        # the number is split across chunks
        yield "data: 我的手机号是138"
        yield "0013"
        yield "8000\n\n"
        yield "data: ok 2024-05-01 ¥1,380.00\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")


async def bin_ep(request):
    return Response(PHONE.encode(), media_type="application/octet-stream")


async def gz_ep(request):
    return Response(gzip.compress(f"secret {PHONE}".encode()), media_type="text/plain",
                    headers={"content-encoding": "gzip"})


async def br_ep(request):
    return Response(b"\x00\x01", media_type="text/plain", headers={"content-encoding": "br"})


def _app(**kw):
    inner = Starlette(routes=[Route("/json", json_ep), Route("/text", text_ep), Route("/sse", sse_ep),
                              Route("/bin", bin_ep), Route("/gz", gz_ep), Route("/br", br_ep)])
    inner.add_middleware(GZipMiddleware, minimum_size=10)
    return RedactMiddleware(inner, **kw)


@pytest.fixture
def client():
    async def make(**kw):
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(**kw)), base_url="http://t")
    return make


@pytest.mark.anyio
async def test_json_bodies_are_parsed_and_redacted(client):
    async with await client() as c:
        r = await c.get("/json", headers={"accept-encoding": "gzip"})
    assert r.status_code == 200
    data = r.json()
    assert data == {"reply": "您的手机号[已脱敏]", "card": "[已脱敏]", "n": 42, "phone_int": "[已脱敏]"}
    assert int(r.headers["content-length"]) == len(r.content)


@pytest.mark.anyio
async def test_text_and_custom_placeholder(client):
    async with await client(placeholder="[REDACTED]") as c:
        r = await c.get("/text", headers={"accept-encoding": "gzip"})
    assert PHONE not in r.text and "1111" not in r.text
    assert r.text.count("[REDACTED]") == 6


@pytest.mark.anyio
async def test_stream_split_across_chunks(client):
    async with await client() as c:
        r = await c.get("/sse")
    assert PHONE not in r.text.replace("\n", "")
    assert "我的手机号是[已脱敏]" in r.text
    assert "¥1,380.00" in r.text  # ordinary numbers survive


@pytest.mark.anyio
async def test_binary_passes_and_encodings(client):
    async with await client() as c:
        assert (await c.get("/bin")).content == PHONE.encode()
        gz = await c.get("/gz")
        assert gz.status_code == 200 and gz.text == "secret [已脱敏]"
        br = await c.get("/br")
        assert br.status_code == 502 and PHONE.encode() not in br.content


@pytest.mark.anyio
async def test_paths_filter(client):
    async with await client(paths=["/json"]) as c:
        assert PHONE in (await c.get("/text")).text
        assert PHONE not in (await c.get("/json")).text
