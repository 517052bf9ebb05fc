"""Webhooks against a real loopback HTTP receiver (and a port where nothing listens): signed deliveries of
write / revert / forget / consent events, L2/L3 values never sent, retries with backoff, the delivery log,
and a subscription disabled after repeated failures. Time is given (`now`), nothing sleeps."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from usermem import Memory, NotFound, ValidationError

T0 = 1_790_000_000.0


class Receiver:
    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.got]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_signed_events_of_every_type_without_l2_l3_values(receiver: Receiver) -> None:
    m = Memory()
    created = m.create_webhook("acme", receiver.url, now=T0)
    hook, secret = created.webhook, created.secret
    assert "secret='***'" in repr(created) and secret not in repr(created)
    other = m.create_webhook("other", receiver.url, ["write"], now=T0).webhook
    m.write("acme", "u1", "preference", "reply_length", "简洁", source="user_confirmed", now=T0 + 1)
    m.write("acme", "u1", "preference", "reply_length", "详细", source="user_confirmed", now=T0 + 2)
    m.write("acme", "u1", "fact", "allergy", "花生", source="user_confirmed", now=T0 + 3)  # L3
    m.revert("acme", "u1", "reply_length", now=T0 + 4)
    req = m.request_consent("acme", "u1", ["allergy"], "推荐午餐", now=T0 + 5)
    m.approve_consent("acme", "u1", req.id, actor="user", now=T0 + 6)
    m.forget("acme", "u1", "reply_length", now=T0 + 7)
    sent = m.webhooks.deliver_due(now=T0 + 10)
    assert len(sent) == 7 and all(d.state == "delivered" for d in sent)
    events = receiver.payloads()
    # a revert writes a new version: its `write`, then the `revert` itself
    assert [e["type"] for e in events] == ["write", "write", "write", "write", "revert", "consent", "forget"]
    assert all(e["tenant"] == "acme" and e["user_id"] == "u1" for e in events)  # other tenant: nothing
    text = json.dumps(events, ensure_ascii=False)
    assert "花生" not in text  # L3 value never leaves
    allergy = [r for e in events for r in e["records"] if r["key"] == "allergy"]
    assert allergy and all("value" not in r for r in allergy)
    assert events[0]["records"][0]["value"] == "简洁"  # L1 values are carried
    assert events[4]["keys"] == ["reply_length"] and events[4]["records"][0]["value"] == "简洁"
    assert events[5]["consent"] == "approved" and events[5]["keys"] == ["allergy"]
    for headers, body in receiver.got:  # the receiver can check every signature
        expected = hmac.new(secret.encode(), headers["x-usermem-timestamp"].encode() + b"." + body,
                            hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-usermem-signature"], "sha256=" + expected)
        assert headers["x-usermem-delivery"] == json.loads(body)["id"]
    assert m.webhooks.deliver_due(now=T0 + 11) == []  # delivered once
    log = m.webhook_deliveries("acme", hook.id)
    assert len(log) == 7 and all(len(d.attempts) == 1 and d.attempts[0].status == 200 for d in log)
    assert m.webhook_deliveries("other", other.id) == []
    assert "secret" not in json.dumps(hook.to_dict())
    m.forget_user("acme", "u1", now=T0 + 20)  # the log held L1 values of u1: erased with the user
    left = m.webhook_deliveries("acme", hook.id)
    assert [(d.type, d.payload["action"], d.payload["records"]) for d in left] == [("forget", "forget_user", [])]


def test_a_receiver_that_is_down_is_retried_with_backoff_then_disabled(receiver: Receiver) -> None:
    m = Memory()
    m.webhooks.max_attempts, m.webhooks.disable_after, m.webhooks.base_delay = 3, 4, 30.0
    down = m.create_webhook("acme", f"http://127.0.0.1:{_free_port()}/hook", ["write"], now=T0).webhook
    m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
    first = m.webhooks.deliver_due(now=T0 + 1)
    assert [d.state for d in first] == ["pending"] and first[0].attempts[0].error == "ConnectError"
    assert first[0].next_at == T0 + 1 + 30
    assert m.webhooks.deliver_due(now=T0 + 30) == []  # not due yet
    assert m.webhooks.deliver_due(now=T0 + 31)[0].next_at == T0 + 31 + 60  # doubled
    last = m.webhooks.deliver_due(now=T0 + 91)[0]
    assert last.state == "failed" and len(last.attempts) == 3  # gave up after max_attempts
    assert m.get_webhook("acme", down.id).failures == 3 and m.get_webhook("acme", down.id).enabled
    m.write("acme", "u1", "preference", "tone", "cool", source="user_confirmed", now=T0 + 100)
    m.webhooks.deliver_due(now=T0 + 101)
    hook = m.get_webhook("acme", down.id)
    assert not hook.enabled and hook.disabled_reason == "4 failed deliveries in a row"
    m.write("acme", "u1", "preference", "tone", "hot", source="user_confirmed", now=T0 + 200)
    assert m.webhook_deliveries("acme", down.id)[-1].payload["records"][0]["value"] == "cool"  # none queued
    # a receiver answering 500 counts as a failure too; 2xx resets the count
    receiver.status = 500
    ok = m.create_webhook("acme", receiver.url, ["forget"], now=T0 + 300).webhook
    m.forget("acme", "u1", "tone", now=T0 + 301)
    assert m.webhooks.deliver_due(now=T0 + 302)[0].attempts[0].error == "HTTP 500"
    receiver.status = 204
    assert m.webhooks.deliver_due(now=T0 + 332)[0].state == "delivered"
    assert m.get_webhook("acme", ok.id).failures == 0
    m.enable_webhook("acme", down.id, now=T0 + 400)
    assert m.get_webhook("acme", down.id).enabled


def test_bad_subscriptions_are_refused() -> None:
    m = Memory()
    for url, events in (("ftp://x/y", None), ("http://127.0.0.1/x", ["bogus"]), ("not a url", None)):
        with pytest.raises(ValidationError):
            m.create_webhook("acme", url, events, now=T0)
    with pytest.raises(ValidationError):
        m.create_webhook("acme", "http://127.0.0.1/x", secret="short", now=T0)
    assert m.list_webhooks("acme") == []
    hook = m.create_webhook("acme", "http://127.0.0.1/x", now=T0).webhook
    assert m.delete_webhook("acme", hook.id) and m.list_webhooks("acme") == []
    assert not m.delete_webhook("acme", hook.id)
    with pytest.raises(NotFound):
        m.get_webhook("acme", hook.id)
