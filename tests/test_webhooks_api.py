"""Webhooks over HTTP, the Client (sync and async), the CLI and `usermem serve`: a loopback receiver gets signed
write / revert / forget / consent events from the background delivery worker, a receiver that is down is logged
and the subscription disabled, the signing secret is returned once and never listed, audited or logged."""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import usermem
from apihelp import T0, Server, make_api
from usermem import Memory, NotFound, ValidationError
from usermem.config import load_settings
from usermem.interfaces.api.workers import FileLease
from usermem.interfaces.cli import _register, app
from webhookhelp import Receiver, free_port, signed_by

_register()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _memory(**overrides: Any) -> Memory:
    return Memory(settings=load_settings(env={}, embedder="none", webhook_poll_seconds=0.05, **overrides))


def _until(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_over_http_the_worker_delivers_signed_events_and_the_secret_is_shown_once(
        receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = make_api(_memory(), deliver_webhooks=True)
    with TestClient(api.app) as http:  # the lifespan runs: the delivery worker is up
        assert api.app.state.webhook_worker is not None and api.app.state.webhook_worker.running
        c = usermem.Client("http://testserver", api.admin_a, http=http)
        created = c.create_webhook(None, receiver.url, ["write", "revert", "forget", "consent"], actor="ops")
        secret = created.secret
        assert len(secret) >= 32 and created.webhook.tenant == "acme" and created.webhook.enabled
        raw = http.get("/v1/webhooks", headers=api.h(api.admin_a))
        assert raw.status_code == 200 and secret not in raw.text and "secret" not in raw.text
        assert secret not in http.get(f"/v1/webhooks/{created.webhook.id}", headers=api.h(api.admin_a)).text
        assert [h.id for h in c.list_webhooks(None)] == [created.webhook.id]
        assert c.get_webhook(None, created.webhook.id) == created.webhook
        c.write(None, "u1", "preference", "reply_length", "简洁", source="user_confirmed")
        c.write(None, "u1", "preference", "reply_length", "详细", source="user_confirmed")
        c.write(None, "u1", "fact", "allergy", "花生", source="user_confirmed")  # L3
        c.revert(None, "u1", "reply_length")
        req = c.request_consent(None, "u1", ["allergy"], "推荐午餐")
        c.approve_consent(None, "u1", req.id)
        c.forget(None, "u1", "reply_length")
        events = receiver.wait_for(7)
        assert [e["type"] for e in events] == ["write", "write", "write", "write", "revert", "consent", "forget"]
        assert "花生" not in json.dumps(events, ensure_ascii=False)
        assert all(signed_by(secret, h, b) for h, b in receiver.got)
        log = _until(lambda: [d for d in c.webhook_deliveries(None, created.webhook.id)
                              if d.state == "delivered"] if len(receiver.got) >= 7 else None)
        assert len(log) == 7 and all(d.attempts[0].status == 200 for d in log)
        ping = c.ping_webhook(None, created.webhook.id)
        assert ping.state == "delivered" and json.loads(receiver.got[-1][1])["type"] == "ping"
        audit = c.audit(None, action="webhook_change")
        assert [e.actor for e in audit] == [f"key:{api.app.state.keys.verify(api.admin_a).id}:ops"]
        assert secret not in json.dumps([e.detail for e in audit])
        assert c.delete_webhook(None, created.webhook.id) and not c.delete_webhook(None, created.webhook.id)
        with pytest.raises(NotFound):
            c.get_webhook(None, created.webhook.id)
    assert not api.app.state.webhook_worker.running  # stopped with the app
    assert all(secret not in r.getMessage() for r in caplog.records)
    api.memory.close()


def test_over_http_a_receiver_that_is_down_is_logged_and_disabled() -> None:
    api = make_api(_memory(webhook_disable_after=2, webhook_max_attempts=5), deliver_webhooks=True)
    with TestClient(api.app) as http:
        c = usermem.Client("http://testserver", api.admin_a, http=http)
        down = c.create_webhook(None, f"http://127.0.0.1:{free_port()}/hook", ["write"]).webhook
        ping = c.ping_webhook(None, down.id)
        assert ping.state == "failed" and ping.attempts[0].error == "ConnectError"
        assert c.get_webhook(None, down.id).failures == 0  # a ping changes nothing
        c.write(None, "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
        c.write(None, "u1", "preference", "tone", "cool", source="user_confirmed", now=T0 + 1)
        hook = _until(lambda: (h := c.get_webhook(None, down.id)) and not h.enabled and h)
        assert hook.disabled_reason == "2 failed deliveries in a row" and hook.failures == 2
        tried = [d for d in c.webhook_deliveries(None, down.id) if d.type == "write"]
        # each failed once and waits for its retry (backoff: 30 s after the first attempt)
        assert [d.state for d in tried] == ["pending", "pending"]
        assert all(d.attempts[0].error == "ConnectError" and d.next_at == d.attempts[0].at + 30 for d in tried)
        c.write(None, "u1", "preference", "tone", "hot", source="user_confirmed", now=T0 + 2)
        assert len(c.webhook_deliveries(None, down.id)) == 3  # disabled: nothing new queued
        again = c.enable_webhook(None, down.id, actor="ops")
        assert again.enabled and again.failures == 0 and again.disabled_reason is None
        with pytest.raises(NotFound):
            c.enable_webhook(None, "wh_missing")
        with pytest.raises(ValidationError):
            c.create_webhook(None, "ftp://example.com/x")
        for bad in ({"url": "http://127.0.0.1/x", "events": ["bogus"]}, {"url": "http://127.0.0.1/x", "secret": "s"},
                    {"url": "javascript:alert(1)"}, {"url": "http://127.0.0.1/x", "events": []}):
            r = http.post("/v1/webhooks", headers=api.h(api.admin_a), json=bad)
            assert r.status_code == 422, (bad, r.text)
        assert http.get("/v1/webhooks", headers=api.h(api.key_a)).status_code == 403  # admin keys only
        bound, _ = api.app.state.keys.create("acme", admin=True, user_id="u1")
        assert http.get("/v1/webhooks", headers=api.h(bound)).status_code == 403  # not for a user-bound key
    api.memory.close()


def test_async_client_manages_webhooks(receiver: Receiver) -> None:
    api = make_api(_memory())

    async def go() -> None:
        import httpx

        transport = httpx.ASGITransport(app=api.app)
        async with usermem.AsyncClient("http://testserver", api.admin_a,
                                       http=httpx.AsyncClient(transport=transport, base_url="http://testserver")) as c:
            created = await c.create_webhook(None, receiver.url, ["write"], secret="s" * 24, now=T0)
            assert created.secret == "s" * 24
            assert [h.url for h in await c.list_webhooks(None)] == [receiver.url]
            ping = await c.ping_webhook(None, created.webhook.id, now=T0 + 1)
            assert ping.state == "delivered" and ping.created_at == T0 + 1
            assert [d.id for d in await c.webhook_deliveries(None, limit=5)] == [ping.id]
            assert (await c.enable_webhook(None, created.webhook.id)).enabled
            assert await c.delete_webhook(None, created.webhook.id)

    anyio.run(go)
    assert signed_by("s" * 24, *receiver.got[0])
    api.memory.close()


def test_cli_webhooks(tmp_path: Path, receiver: Receiver) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'w.db'}"
    Memory(url).close()

    def run(*args: str, code: int = 0) -> str:
        done = runner.invoke(app, [*args, "--store", url], env={"COLUMNS": "200"})
        assert done.exit_code == code, done.output
        return done.stdout

    created = json.loads(run("webhooks", "add", "acme", receiver.url, "--event", "write", "--json"))
    hid, secret = created["id"], created["secret"]
    listed = json.loads(run("webhooks", "list", "acme", "--json"))
    assert [h["id"] for h in listed] == [hid] and secret not in json.dumps(listed)
    assert secret not in run("webhooks", "list", "acme") and secret not in run("webhooks", "show", "acme", hid)
    m = Memory(url)
    m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed")
    m.close()
    assert "1 attempted, 1 delivered" in run("webhooks", "deliver")
    assert receiver.payloads()[0]["records"][0]["value"] == "warm" and signed_by(secret, *receiver.got[0])
    assert json.loads(run("webhooks", "ping", "acme", hid))["state"] == "delivered"
    log = json.loads(run("webhooks", "deliveries", "acme", "--webhook", hid, "--json"))
    assert [(d["type"], d["state"]) for d in log] == [("write", "delivered"), ("ping", "delivered")]
    assert "ping" in run("webhooks", "deliveries", "acme")
    receiver.status = 500
    assert json.loads(run("webhooks", "ping", "acme", hid, code=1))["attempts"][0]["error"] == "HTTP 500"
    assert json.loads(run("webhooks", "enable", "acme", hid))["enabled"] is True
    assert "deleted" in run("webhooks", "delete", "acme", hid)
    run("webhooks", "delete", "acme", hid, code=1)
    printed = run("webhooks", "add", "acme", receiver.url)
    assert "secret: " in printed  # shown once, in the clear, on creation only


def test_file_lease_lets_one_holder_deliver(tmp_path: Path) -> None:
    path = str(tmp_path / "lease")
    first, second = FileLease(path), FileLease(path)
    assert first() and first() and not second()  # flock: one open file description holds it


def test_serve_runs_the_delivery_worker_and_stops_cleanly(tmp_path: Path, receiver: Receiver) -> None:
    server = Server(tmp_path / "s.db", "--no-mcp", "--graceful-seconds", "5",
                    env={"USERMEM_WEBHOOK_POLL_SECONDS": "0.1", "USERMEM_EMBEDDER": "none"})
    try:
        with usermem.Client(server.url, server.key) as c:
            created = c.create_webhook(None, receiver.url, ["write", "forget"])
            c.write(None, "u1", "preference", "tone", "warm", source="user_confirmed")
            c.forget(None, "u1", "tone")
            events = receiver.wait_for(2)
            assert [e["type"] for e in events] == ["write", "forget"]
            assert all(signed_by(created.secret, h, b) for h, b in receiver.got)
        started = time.monotonic()
        assert server.stop() in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after its graceful shutdown
        assert time.monotonic() - started < 15  # the worker's thread did not hold the process
        _, err = server.proc.communicate(timeout=5)
        assert created.secret not in err and "Traceback" not in err
    finally:
        server.stop()


def test_serve_with_two_workers_sends_each_event_once(tmp_path: Path, receiver: Receiver) -> None:
    server = Server(tmp_path / "w.db", "--no-mcp", "--workers", "2",
                    env={"USERMEM_WEBHOOK_POLL_SECONDS": "0.05", "USERMEM_EMBEDDER": "none"})
    try:
        with usermem.Client(server.url, server.key) as c:
            c.create_webhook(None, receiver.url, ["write"])
            for i in range(5):
                c.write(None, "u1", "preference", f"k{i}", i, source="user_confirmed")
            receiver.wait_for(5)
            # both workers have run many passes by the time one more event arrives: a duplicate of the first
            # five would have been sent by then
            c.write(None, "u1", "preference", "last", 5, source="user_confirmed")
            events = receiver.wait_for(6)
            _until(lambda: all(d.state == "delivered" for d in c.webhook_deliveries(None)))
        ids = [h["x-usermem-delivery"] for h, _ in receiver.got]
        assert len(ids) == len(set(ids)) == 6, ids
        assert sorted(e["keys"][0] for e in events) == ["k0", "k1", "k2", "k3", "k4", "last"]
    finally:
        server.stop()
