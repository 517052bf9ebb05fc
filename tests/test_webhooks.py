"""Webhooks against a real loopback HTTP receiver (and a port where nothing listens): signed deliveries of
write / revert / forget / consent events, L2/L3 values never sent, retries with backoff, the delivery log,
and a subscription disabled after repeated failures — on SQLite and PostgreSQL. Time is given (`now`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from usermem import Memory, NotFound, ValidationError
from webhookhelp import Receiver, free_port, signed_by

T0 = 1_790_000_000.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_signed_events_of_every_type_without_l2_l3_values(receiver: Receiver, make_memory: Any) -> None:
    m = make_memory()
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
    first = m.webhooks.deliver_due(now=T0 + 6)  # sent before the forget: they carry the L1 values
    m.forget("acme", "u1", "reply_length", now=T0 + 7)
    sent = first + m.webhooks.deliver_due(now=T0 + 10)
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
        assert signed_by(secret, headers, body)
        assert not signed_by(secret + "x", headers, body)
        assert headers["x-usermem-delivery"] == json.loads(body)["id"]
    assert m.webhooks.deliver_due(now=T0 + 11) == []  # delivered once
    assert m.store.list_docs("acme", "webhook_pending") == []  # a pass reads the pending index, now empty
    log = m.webhook_deliveries("acme", hook.id)
    assert len(log) == 7 and all(len(d.attempts) == 1 and d.attempts[0].status == 200 for d in log)
    assert m.webhook_deliveries("other", other.id) == []
    # the forget removed reply_length's values from the log (probe 8); the records stay, marked
    logged = [r for d in log for r in d.payload["records"] if r["key"] == "reply_length"]
    assert logged and all(r.get("value_erased") and "value" not in r for r in logged)
    assert "简洁" not in json.dumps([d.to_dict() for d in log], ensure_ascii=False)
    assert "secret" not in json.dumps(hook.to_dict())
    m.forget_user("acme", "u1", now=T0 + 20)  # the log held L1 values of u1: erased with the user
    left = m.webhook_deliveries("acme", hook.id)
    assert [(d.type, d.payload["action"], d.payload["records"]) for d in left] == [("forget", "forget_user", [])]
    assert [d["key"] for d in m.export("acme", "u1", now=T0 + 21)["documents"]["webhook_deliveries"]] == [left[0].id]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_receiver_that_is_down_is_retried_with_backoff_then_disabled(receiver: Receiver, make_memory: Any) -> None:
    m = make_memory()
    m.webhooks.max_attempts, m.webhooks.disable_after, m.webhooks.base_delay = 3, 4, 30.0
    down = m.create_webhook("acme", f"http://127.0.0.1:{free_port()}/hook", ["write"], now=T0).webhook
    m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
    first = m.webhooks.deliver_due(now=T0 + 1)
    assert [d.state for d in first] == ["pending"] and first[0].attempts[0].error == "ConnectError"
    assert first[0].next_at == T0 + 1 + 30
    assert [v for _, v in m.store.list_docs("acme", "webhook_pending")] == [{"next_at": T0 + 1 + 30}]
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
    for url, events in (("ftp://x/y", None), ("http://127.0.0.1/x", ["bogus"]), ("not a url", None),
                        ("http://[::1/x", None), ("http://127.0.0.1:99999/x", None), ("http://a b/x", None),
                        ("http://127.0.0.1/x\ud800", None), ("http://127.0.0.1/x", []), ("http:///x", None),
                        ("http://127.0.0.1/x", [1])):
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


def test_ping_reports_the_receiver_and_leaves_the_subscription_alone(receiver: Receiver) -> None:
    m = Memory()
    created = m.create_webhook("acme", receiver.url, ["consent"], actor="ops", now=T0)
    receiver.status = 204
    ok = m.ping_webhook("acme", created.webhook.id, now=T0 + 1)
    assert ok.state == "delivered" and ok.type == "ping" and ok.attempts[0].status == 204
    headers, body = receiver.got[-1]
    assert signed_by(created.secret, headers, body) and json.loads(body)["type"] == "ping"
    down = m.create_webhook("acme", f"http://127.0.0.1:{free_port()}/x", now=T0).webhook
    m.webhooks.disable_after = 1
    failed = m.ping_webhook("acme", down.id, now=T0 + 2)
    assert failed.state == "failed" and failed.attempts[0].error == "ConnectError"
    assert m.get_webhook("acme", down.id).enabled and m.get_webhook("acme", down.id).failures == 0  # untouched
    assert [d.type for d in m.webhook_deliveries("acme")] == ["ping", "ping"]
    with pytest.raises(NotFound):
        m.ping_webhook("acme", "wh_nope", now=T0)
    # the audit log records who changed subscriptions, with the URL's host only and never the secret
    m.delete_webhook("acme", down.id, actor="ops", now=T0 + 3)
    changes = m.audit("acme", action="webhook_change")
    assert [(e.detail["change"], e.actor) for e in changes] == [("create", "ops"), ("create", None),
                                                                ("delete", "ops")]
    text = json.dumps([e.detail for e in changes])
    assert created.secret not in text and "/hook" not in text and changes[0].detail["host"] == "127.0.0.1"


def test_the_delivery_worker_sends_in_the_background_and_stops(receiver: Receiver) -> None:
    from usermem.engine.webhooks import DeliveryWorker

    m = Memory()
    m.create_webhook("acme", receiver.url, ["write"])
    worker = DeliveryWorker(m.webhooks, 0.02).start()
    try:
        m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed")
        assert receiver.wait_for(1)[0]["records"][0]["value"] == "warm"
    finally:
        assert worker.stop(timeout=10) and not worker.running
    assert worker.passes >= 1
    allowed = DeliveryWorker(m.webhooks, 0.02, may_deliver=lambda: False).start()  # another process delivers
    m.write("acme", "u1", "preference", "tone", "cool", source="user_confirmed")
    until = time.monotonic() + 30
    while allowed.passes < 3 and time.monotonic() < until:  # three passes that were not allowed to send
        time.sleep(0.01)
    assert allowed.stop(timeout=10)
    assert len(receiver.got) == 1 and m.webhook_deliveries("acme")[-1].state == "pending"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_purge_drops_finished_deliveries_past_the_retention(receiver: Receiver, make_memory: Any) -> None:
    m = make_memory()
    day = 86_400.0
    m.create_webhook("acme", receiver.url, ["write"], now=T0)
    m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
    m.webhooks.deliver_due(now=T0 + 1)  # delivered
    m.write("acme", "u1", "preference", "tone", "cool", source="user_confirmed", now=T0 + 10 * day)  # pending
    m.purge(T0 + 40 * day, retention_days=30)
    assert [d.payload["records"][0]["value"] for d in m.webhook_deliveries("acme")] == ["cool"]  # still pending
    m.webhooks.deliver_due(now=T0 + 40 * day)
    m.purge(T0 + 50 * day, retention_days=30)
    assert len(m.webhook_deliveries("acme")) == 1  # delivered 10 days ago: kept
    m.purge(T0 + 71 * day, retention_days=30)
    assert m.webhook_deliveries("acme") == []


def test_private_receivers_can_be_refused(receiver: Receiver) -> None:
    from usermem.config import load_settings

    m = Memory(settings=load_settings(env={}, embedder="none", webhook_allow_private_urls=False))
    for url in ("http://127.0.0.1:9/x", "http://localhost/x", "http://10.1.2.3/x", "http://169.254.169.254/latest",
                "http://[::1]/x", "http://[fe80::1]/x", "http://0.0.0.0/x", "http://192.168.0.1/x"):
        with pytest.raises(ValidationError) as exc:
            m.create_webhook("acme", url, now=T0)
        assert exc.value.field == "url"
    public = m.create_webhook("acme", "http://93.184.216.34/hook", ["write"], now=T0).webhook  # a global address
    assert m.list_webhooks("acme") == [public]
    m.delete_webhook("acme", public.id, now=T0)
    # a subscription made while allowed is refused at delivery once the server turns it off, without a request
    m.webhooks.allow_private = True
    local = m.create_webhook("acme", receiver.url, ["write"], now=T0).webhook
    m.webhooks.allow_private = False
    m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
    sent = m.webhooks.deliver_due(now=T0 + 1)
    assert [d.attempts[0].error for d in sent] == ["private address refused"] and receiver.got == []
    assert m.ping_webhook("acme", local.id, now=T0 + 2).state == "failed" and receiver.got == []
