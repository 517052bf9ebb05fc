"""Federation over the real NATS JetStream server (127.0.0.1:4222): durable per-instance consumers, catch-up
after downtime before serving, a partition. Each test has its own stream and subjects; separate SQLite stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import backends
from test_events_nats import _delete_stream, wait_for
from usermem import Memory
from usermem.config import Settings

TENANT, USER = "acme", "u1"
# An event a loaded machine fetched but could not answer in time comes back after the consumer's ack wait:
# waits allow one redelivery.
WAIT = Settings().federate_ack_wait_seconds + 10.0
pytestmark = pytest.mark.nats


@pytest.fixture
def fed_settings(tmp_path: Path) -> Iterator[Settings]:
    backends.require_nats()
    run = uuid.uuid4().hex[:10]
    stream = f"UMFEDN_{run}"
    yield Settings().with_overrides(embedder="none", hybrid_lexical_weight=0.0, nats_url=backends.NATS_URL,
                                    nats_stream=stream, nats_subject_prefix=f"umfedn.{run}")
    _delete_stream(stream)


def _instance(settings: Settings, tmp_path: Path, domain: str, **kw: Any) -> Memory:
    return Memory(settings=settings.with_overrides(store_url=f"sqlite:///{tmp_path}/{domain}.db",
                                                   federate_domain=domain, **kw))


def _value(m: Memory, key: str) -> Any:
    found = [r.value for r in m.recall(TENANT, USER, 20) if r.key == key]
    return found[0] if found else None


def test_changes_travel_between_domains_with_their_own_stores(fed_settings: Settings, tmp_path: Path) -> None:
    app, mini = _instance(fed_settings, tmp_path, "app"), _instance(fed_settings, tmp_path, "mini")
    try:
        app.write(TENANT, USER, "preference", "reply_length", "concise", client_id="app")
        wait_for(lambda: _value(mini, "reply_length") == "concise", timeout=WAIT, what="the change applied by mini")
        mini.write(TENANT, USER, "preference", "reply_length", "detailed", client_id="miniapp")
        wait_for(lambda: _value(app, "reply_length") == "detailed", timeout=WAIT, what="the change applied by app")
        assert app.federation is not None and app.federation.counts["applied"] == 1
    finally:
        app.close()
        mini.close()


def test_an_instance_that_was_down_catches_up_before_serving(fed_settings: Settings, tmp_path: Path) -> None:
    app, mini = _instance(fed_settings, tmp_path, "app"), _instance(fed_settings, tmp_path, "mini")
    app.write(TENANT, USER, "preference", "city", "Paris")
    app.write(TENANT, USER, "preference", "reply_length", "concise")
    wait_for(lambda: _value(mini, "city") == "Paris", timeout=WAIT, what="mini up to date")
    mini.close()  # down: its durable consumer keeps its place on the server
    try:
        app.write(TENANT, USER, "preference", "city", "Lyon")
        app.forget(TENANT, USER, "reply_length")  # the erasure broadcast
        outbox = app.store.capabilities.outbox
        assert outbox is not None
        wait_for(lambda: not outbox.pending(), timeout=WAIT, what="app's outbox published")
        back = _instance(fed_settings, tmp_path, "mini")  # federate_domain: catches up in the constructor
        try:
            # No waiting: what happened while it was down is applied before it serves anyone.
            assert _value(back, "city") == "Lyon"
            assert _value(back, "reply_length") is None
            assert back.federation is not None and back.federation.counts["erasures_applied"] == 1
        finally:
            back.close()
    finally:
        app.close()


def test_a_partition_heals_converged_with_a_notice_and_nothing_lost(fed_settings: Settings, tmp_path: Path) -> None:
    app, mini = _instance(fed_settings, tmp_path, "app"), _instance(fed_settings, tmp_path, "mini")
    try:
        consumer = mini._engine.consumer
        assert consumer is not None
        consumer.stop()
        app.write(TENANT, USER, "preference", "city", "Paris", client_id="app")
        app.write(TENANT, USER, "preference", "reply_length", "concise", client_id="app")
        mini.write(TENANT, USER, "preference", "city", "Lyon", client_id="miniapp")  # later: wins everywhere
        mini.write(TENANT, USER, "preference", "theme", "dark", client_id="miniapp")
        wait_for(lambda: _value(app, "city") == "Lyon", timeout=WAIT, what="app applying mini's changes")
        assert _value(mini, "reply_length") is None  # still cut off
        mini.federate("mini")  # resumes: catches up, then consumes in the background
        for key in ("city", "reply_length", "theme"):
            assert _value(app, key) == _value(mini, key) is not None, key
        assert _value(mini, "city") == "Lyon"
        # Nothing lost: both values of the conflict are in both histories, the loser with its origin.
        for m in (app, mini):
            values = {(r.value, r.actor) for r in m.history(TENANT, USER, "city")}
            assert {v for v, _ in values} == {"Paris", "Lyon"}
        assert ("Paris", "domain:app") in {(r.value, r.actor) for r in mini.history(TENANT, USER, "city")}
        # app's value set moments ago was overridden from the other device: the user is told, once.
        notices = app.federation_notices(TENANT, USER)
        assert [(n["key"], n["domain"]) for n in notices] == [("city", "mini")]
        assert mini.federation_notices(TENANT, USER) == []
        kept = app.keep_local(TENANT, USER, notices[0]["id"])
        assert kept.memory is not None and kept.memory.value == "Paris"
        wait_for(lambda: _value(mini, "city") == "Paris", timeout=WAIT, what="keep_local winning on the other instance")
        assert app.federation_notices(TENANT, USER) == []
    finally:
        app.close()
        mini.close()


def test_a_poison_event_is_dead_lettered_after_jetstream_redeliveries(fed_settings: Settings, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The delivery count is JetStream's own (num_delivered): after federate_max_deliveries failed applies the
    event is set aside and acknowledged; the user's erasure (from the other domain) erases the dead letter.
    A failed apply is NAKed for redelivery a second later; should the server not act on the NAK (seen once in
    CI on a freshly started server), the consumer's ack wait (3 s here) redelivers it: the test allows both."""
    from usermem.engine.federation import dead_letters
    from usermem.errors import StoreError

    app, mini = _instance(fed_settings, tmp_path, "app"), _instance(fed_settings, tmp_path, "mini",
                                                                       federate_max_deliveries=2,
                                                                       federate_ack_wait_seconds=3.0)
    try:
        fed = mini.federation
        assert fed is not None
        real = fed._apply_record

        def poison(tx: Any, change: Any, rec: Any, *args: Any) -> Any:
            if rec["key"] == "city":
                raise StoreError("this row cannot be stored here")
            return real(tx, change, rec, *args)

        monkeypatch.setattr(fed, "_apply_record", poison)
        app.write(TENANT, USER, "preference", "city", "Paris")
        app.write(TENANT, USER, "preference", "reply_length", "concise")
        wait_for(lambda: dead_letters(mini.store, TENANT), timeout=WAIT, what="the poison event set aside")
        (letter,) = dead_letters(mini.store, TENANT)
        # JetStream's delivery count: a delivery that went to a pull request which had already expired counts too
        # (seen in CI: the apply failed twice, num_delivered was 3), so it is at least the limit, not exactly it.
        assert letter["attempts"] >= 2 and letter["keys"] == ["city"] and "cannot be stored" in letter["error"]
        wait_for(lambda: _value(mini, "reply_length") == "concise", timeout=WAIT, what="the other event applied")
        assert _value(mini, "city") is None and fed.counts["dead_letters"] == 1
        app.forget_user(TENANT, USER)
        wait_for(lambda: not dead_letters(mini.store, TENANT), timeout=WAIT, what="the dead letter erased with the user")
    finally:
        app.close()
        mini.close()
