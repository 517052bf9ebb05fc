"""`AsyncClient` has the surface of `Client` and gives the same answers; both read USERMEM_URL /
USERMEM_API_KEY and retry 429/503 (Retry-After honoured, bounded) without the caller sleeping for real."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

import usermem
from apihelp import T0, make_api
from usermem.errors import ConfigError, PermissionDenied, StoreError
from usermem.interfaces.client import RateLimited


def _public(cls: type) -> dict[str, object]:
    return {n: v for n, v in inspect.getmembers(cls) if not n.startswith("_")}


def test_async_client_has_the_client_surface():
    sync, asyn = _public(usermem.Client), _public(usermem.AsyncClient)
    assert sorted(set(sync) - set(asyn)) == ["tenant"]  # async: `await whoami()` instead of a property
    for name, fn in sync.items():
        if name == "tenant":
            continue
        other = asyn[name]
        assert inspect.iscoroutinefunction(other), name
        assert list(inspect.signature(other).parameters) == list(inspect.signature(fn).parameters), name  # type: ignore[arg-type]


def test_async_client_answers_like_the_sync_client():
    api = make_api()

    async def remote() -> list[object]:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://testserver")
        async with usermem.AsyncClient("http://testserver", api.admin_a, http=http) as m:
            out: list[object] = [await m.write("acme", "a1", "fact", "city", "Paris", source="system", now=T0)]
            out.append(await m.write(None, "a1", "preference", "tone", "warm", source="user_confirmed", now=T0))
            out.append([r.value for r in await m.recall(None, "a1", now=T0 + 1)])
            out.append(await m.recall(None, "nobody", now=T0 + 1))  # absent user: empty, as embedded
            out.append((await m.whoami())["tenant"])
            sid = await m.open_session(None, "a1", "web", now=T0)
            out.append((await m.get_session(sid)).status)
            out.append((await m.close_session(sid, "bye", now=T0 + 5)).reason)
            with pytest.raises(PermissionDenied, match="tenant_mismatch"):
                await m.recall("globex", "a1")
            await http.aclose()
            return out

    got = asyncio.run(remote())
    assert [x.op.value for x in got[:2]] == ["ADD", "ADD"]  # type: ignore[attr-defined]
    assert sorted(got[2]) == ["Paris", "warm"]  # type: ignore[call-overload]
    assert got[3:] == [[], "acme", "open", "closed"]
    api.memory.close()


def test_url_and_key_from_the_environment(monkeypatch):
    api = make_api()
    monkeypatch.setenv("USERMEM_URL", "http://testserver")
    monkeypatch.setenv("USERMEM_API_KEY", api.key_a)
    with usermem.Client(http=TestClient(api.app)) as c:
        assert c.url == "http://testserver"
        assert c.tenant == "acme"
    monkeypatch.delenv("USERMEM_API_KEY")
    with pytest.raises(ConfigError, match="USERMEM_API_KEY"):
        usermem.Client()
    monkeypatch.delenv("USERMEM_URL")
    with pytest.raises(ConfigError, match="USERMEM_URL"):
        usermem.AsyncClient(api_key="umk_x")
    api.memory.close()


def test_rate_limited_requests_are_retried_after_retry_after():
    """A real server with a 2/minute limit and a fake clock: the client's waits advance the clock."""
    api = make_api(rate_limit_per_minute=2)
    clock = [1000.0]
    api.app.state.limiter.clock = lambda: clock[0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock[0] += s

    c = usermem.Client("http://testserver", api.key_a, http=TestClient(api.app), sleep=sleep)
    for _ in range(4):
        c.recall(None, "u1")
    assert waits == [30.0, 30.0]  # Retry-After: one token every 30 s
    bounded = usermem.Client("http://testserver", api.key_a, http=TestClient(api.app), retries=1,
                             sleep=lambda s: waits.append(s))  # the clock stands still: retrying cannot help
    with pytest.raises(RateLimited) as info:
        bounded.recall(None, "u1")
    assert info.value.retry_after == 30.0
    assert waits[-1] == 30.0 and len(waits) == 3
    api.memory.close()


def _flaky_app(failures: int, headers: dict[str, str] | None = None) -> tuple[FastAPI, list[int]]:
    app = FastAPI()
    calls: list[int] = []

    @app.get("/v1/whoami")
    def whoami() -> JSONResponse:
        calls.append(1)
        if len(calls) <= failures:
            return JSONResponse({"code": "store_error", "detail": "down", "status": 503}, status_code=503,
                                headers=headers)
        return JSONResponse({"tenant": "acme", "key_id": "k", "admin": False, "user_id": None})

    return app, calls


def test_unavailable_is_retried_with_bounded_backoff():
    app, calls = _flaky_app(2)
    waits: list[float] = []
    c = usermem.Client("http://testserver", "umk_x", http=TestClient(app), backoff=0.5, sleep=waits.append)
    assert c.whoami()["tenant"] == "acme"
    assert waits == [0.5, 1.0] and len(calls) == 3

    app, calls = _flaky_app(10, headers={"Retry-After": "3600"})
    waits = []
    c = usermem.Client("http://testserver", "umk_x", http=TestClient(app), retries=2, max_wait=5.0,
                       sleep=waits.append)
    with pytest.raises(StoreError, match="down"):
        c.whoami()
    assert waits == [5.0, 5.0] and len(calls) == 3  # Retry-After honoured but capped; 1 try + 2 retries


def test_async_retries_too():
    app, calls = _flaky_app(1)
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    async def run() -> str:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")
        async with usermem.AsyncClient("http://testserver", "umk_x", http=http, sleep=sleep) as c:
            out = (await c.whoami())["tenant"]
        await http.aclose()
        return str(out)

    assert asyncio.run(run()) == "acme"
    assert waits == [0.5] and len(calls) == 2
