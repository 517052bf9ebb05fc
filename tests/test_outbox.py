"""The transactional outbox (issue 17): the change event commits or rolls back with the change, the relay
publishes it and removes it once acknowledged. Store level on SQLite and PostgreSQL; end to end on the real
NATS JetStream server (own stream and subjects per test)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import backends
from test_events_nats import _delete_stream, _stream_state, wait_for
from usermem import Memory
from usermem.config import Settings
from usermem.engine.compose import compose
from usermem.events.federation import LocalHub
from usermem.model import Kind, MemoryRecord, Source
from usermem.store.base import OutboxEntry, Store, VersionStamp
from usermem.store.sqlite import SQLiteStore

T0 = 1_790_000_000.0


def _record(i: int, user: str = "u1") -> MemoryRecord:
    return MemoryRecord(id=f"m{i}-{uuid.uuid4().hex[:6]}", tenant="t", user_id=user, kind=Kind.PREFERENCE,
                        key=f"k{i}", value=i, source=Source.EXTRACTED, confidence=1.0, importance=0.5,
                        created_at=T0 + i)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s: Store = SQLiteStore(str(tmp_path / "o.db"))
        yield s
        s.close()
        return
    from usermem.store.postgres import PostgresStore

    s = PostgresStore(backends.postgres_url(tmp_path))
    yield s
    s.close()
    backends.postgres_cleanup(tmp_path)


def test_outbox_rows_commit_and_roll_back_with_the_change(store: Store) -> None:
    outbox = store.capabilities.outbox
    assert outbox is not None
    r1, r2 = _record(1), _record(2)
    with store.transaction("t", "u1") as tx:
        tx.insert(r1)
        outbox.add(tx, OutboxEntry("e1", "t", "u1", "s.one", '{"n": 1}', T0))
        outbox.stamp(tx, "t", VersionStamp(r1.id, "000000000000001.000000", "app", "dom", "e1"))
    with pytest.raises(RuntimeError), store.transaction("t", "u1") as tx:
        tx.insert(r2)
        outbox.add(tx, OutboxEntry("e2", "t", "u1", "s.two", "{}", T0))
        raise RuntimeError("the change fails after its event was queued")
    assert [e.event_id for e in outbox.pending()] == ["e1"]  # the rolled-back change is not announced
    assert store.get("t", r2.id) is None and store.get("t", r1.id) is not None
    with store.transaction("t", "u1") as tx:
        assert outbox.stamps(tx, "t", [r1.id, r2.id]) == {
            r1.id: VersionStamp(r1.id, "000000000000001.000000", "app", "dom", "e1")}
    assert outbox.max_hlc() == "000000000000001.000000"
    assert outbox.remove(["e1", "nope"]) == 1 and outbox.pending() == []


def test_applied_events_are_recorded_once_and_roll_back_with_the_apply(store: Store) -> None:
    outbox = store.capabilities.outbox
    assert outbox is not None
    with store.transaction("t", "u1") as tx:
        assert outbox.mark_applied(tx, "t", "ev1", T0) is True
        assert outbox.mark_applied(tx, "t", "ev1", T0) is False
    with pytest.raises(RuntimeError), store.transaction("t", "u1") as tx:
        assert outbox.mark_applied(tx, "t", "ev2", T0) is True
        raise RuntimeError("apply failed")
    assert outbox.applied("t", ["ev1", "ev2"]) == {"ev1"}  # a failed apply is applied again on redelivery
    with store.transaction("t", "u1") as tx:
        outbox.add(tx, OutboxEntry("x1", "t", "u1", "s", "{}", T0))
        outbox.add(tx, OutboxEntry("x2", "t", "u2", "s", "{}", T0))
    assert outbox.discard_user("t", "u1") == 1
    assert [e.event_id for e in outbox.pending()] == ["x2"]


def test_soft_delete_by_ids_and_its_announce_hook_share_the_transaction(store: Store) -> None:
    outbox = store.capabilities.outbox
    assert outbox is not None
    r1, r2 = _record(1), _record(2)
    with store.transaction("t", "u1") as tx:
        tx.insert(r1)
        tx.insert(r2)
    seen: list[list[str]] = []

    def announce_then_fail(tx: Any, ids: Any) -> None:
        seen.append(list(ids))
        outbox.add(tx, OutboxEntry("gone", "t", "u1", "s.forget", "{}", T0))
        raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError):
        store.soft_delete("t", "u1", T0 + 5, ids=[r1.id, "not-there"], announce=announce_then_fail)
    assert seen == [[r1.id]] and store.get("t", r1.id) is not None and outbox.pending() == []
    assert store.soft_delete("t", "u1", T0 + 5, ids=[r1.id],
                             announce=lambda tx, ids: outbox.add(tx, OutboxEntry("e", "t", "u1", "s", "{}", T0))
                             ) == [r1.id]
    assert store.get("t", r1.id) is None and store.get("t", r2.id) is not None
    assert [e.event_id for e in outbox.pending()] == ["e"]
    assert store.soft_delete("t", "u1", T0 + 6, ids=[]) == []


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/{uuid.uuid4().hex[:6]}.db", embedder="none",
                                     hybrid_lexical_weight=0.0, **kw)


def test_a_failing_outbox_write_rolls_the_change_back(tmp_path: Path) -> None:
    engine = compose(_settings(tmp_path))
    hub = LocalHub()
    fed = engine.use_outbox(hub.transport("a"), "origin-a")
    assert engine.relay is not None
    engine.relay.close()  # drive the relay by hand

    def broken(*args: Any) -> tuple[str, str]:
        raise RuntimeError("cannot encode")

    fed.encode = broken
    with pytest.raises(RuntimeError):
        engine.write.write("t", "u1", _request("city", "Paris"), now=T0)
    assert [r.key for r in engine.recall.recall("t", "u1", 5, now=T0 + 1)] == []  # no committed change
    assert engine.ctx.store.capabilities.outbox is not None
    assert engine.ctx.store.capabilities.outbox.pending() == []  # and no event
    engine.close()


def _request(key: str, value: Any) -> Any:
    from usermem.model import WriteRequest

    return WriteRequest(kind="preference", key=key, value=value, client_id="app")


def test_the_relay_keeps_events_until_acknowledged(tmp_path: Path) -> None:
    engine = compose(_settings(tmp_path))
    hub = LocalHub()
    transport = hub.transport("a")
    engine.use_outbox(transport, "origin-a")
    relay = engine.relay
    assert relay is not None
    relay.close()
    outbox = engine.ctx.store.capabilities.outbox
    assert outbox is not None
    transport.disconnect()  # the bus refuses (no ack): the events stay queued
    engine.write.write("t", "u1", _request("city", "Paris"), now=T0)
    engine.write.write("t", "u1", _request("city", "Lyon"), now=T0 + 1)
    assert len(outbox.pending()) == 2
    assert relay.drain(0.3) is False and len(outbox.pending()) == 2 and hub.log == []
    transport.reconnect()
    assert relay.drain(5.0) is True
    assert outbox.pending() == []
    payloads = [json.loads(data) for _, data in hub.log]
    assert [p["records"][0]["value"] for p in payloads] == ["Paris", "Lyon"]  # in commit order
    assert payloads[0]["records"][0]["hlc"] < payloads[1]["records"][0]["hlc"]
    relay.pump()  # nothing left: nothing published twice
    assert len(hub.log) == 2
    engine.close()


@pytest.fixture
def nats_settings(tmp_path: Path) -> Iterator[Settings]:
    backends.require_nats()
    run = uuid.uuid4().hex[:10]
    stream = f"UMFED_{run}"
    yield _settings(tmp_path, nats_url=backends.NATS_URL, nats_stream=stream, nats_subject_prefix=f"umfed.{run}")
    _delete_stream(stream)


@pytest.mark.nats
def test_changes_are_published_from_the_outbox_over_nats(nats_settings: Settings) -> None:
    m = Memory(settings=nats_settings)
    try:
        fed = m.federation
        assert fed is not None  # NATS and a store with an outbox: the outbox is on
        m.write("t", "u1", "preference", "city", "Paris", now=T0, client_id="app")
        m.write("t", "u1", "preference", "city", "Lyon", now=T0 + 1, client_id="app")
        m.deny("t", "u1", m.history("t", "u1", "city")[-1].id, now=T0 + 2)
        outbox = m.store.capabilities.outbox
        assert outbox is not None
        wait_for(lambda: not outbox.pending(), what="the outbox to drain (JetStream acks)")
        messages, _ = wait_for(lambda: (s := _stream_state(nats_settings.nats_stream))[0] == 3 and s,
                               what="three events in the stream")
        assert messages == 3
        assert m.events is not None and m.events.stats()["bus"]["published"] == 3
    finally:
        m.close()


@pytest.mark.nats
def test_a_relay_restarted_after_a_crash_publishes_what_was_left(nats_settings: Settings) -> None:
    m = Memory(settings=nats_settings)
    outbox = m.store.capabilities.outbox
    assert outbox is not None
    relay = m._engine.relay
    assert relay is not None
    relay.close()
    m.write("t", "u1", "preference", "city", "Paris", now=T0)
    assert len(outbox.pending()) == 1
    path = m.store.url
    m._engine.relay = None
    m.close()
    assert _stream_state(nats_settings.nats_stream)[0] == 0  # committed, not yet announced
    again = Memory(settings=nats_settings.with_overrides(store_url=path))
    try:
        wait_for(lambda: _stream_state(nats_settings.nats_stream)[0] == 1, what="the left event published")
        left = again.store.capabilities.outbox
        assert left is not None
        wait_for(lambda: not left.pending(), what="the outbox emptied")
    finally:
        again.close()




def _backend_settings(backend: str, path: Path) -> Settings:
    base = Settings().with_overrides(embedder="none", hybrid_lexical_weight=0.0)
    if backend == "sqlite":
        return base.with_overrides(store_url=f"sqlite:///{path}/s.db")
    if backend == "postgres":
        return base.with_overrides(store_url=backends.postgres_url(path))
    return backends.tiered_settings(path, base)  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                                     pytest.param("tiered", marks=[pytest.mark.postgres, pytest.mark.redis])])
def test_staging_and_applying_on_every_backend(backend: str, tmp_path: Path) -> None:
    """The outbox row and the stamps are written through the change's own transaction, also under the tiered
    store's wrapper; a remote event applies once. Two engines with separate stores (schemas / files)."""
    from usermem.events.payload import decode

    paths = [tmp_path / "a", tmp_path / "b"]
    for p in paths:
        p.mkdir()
    engines = [compose(_backend_settings(backend, p)) for p in paths]
    hub = LocalHub()
    try:
        feds = []
        for name, engine in zip(("app", "mini"), engines, strict=True):
            fed = engine.use_outbox(hub.transport(name), name)
            assert engine.relay is not None
            engine.relay.close()
            fed.domain = name
            feds.append(fed)
        a, b = engines
        a.write.write("t", "u1", _request("reply_length", "concise"), now=T0)
        outbox = a.ctx.store.capabilities.outbox
        assert outbox is not None
        (entry,) = outbox.pending()
        record = json.loads(entry.payload)["records"][0]
        assert record["value"] == "concise" and record["hlc"] and json.loads(entry.payload)["domain"] == "app"
        assert a.relay is not None
        a.relay.pump()
        a.relay.pump()
        assert outbox.pending() == []
        change = decode(hub.transports[1].inbox.popleft())
        assert feds[1].apply(change, now=T0 + 1) == "applied"
        assert feds[1].apply(change, now=T0 + 1) == "duplicate"
        got = b.recall.recall("t", "u1", 5, now=T0 + 2)
        assert [(s.memory.key, s.memory.value, s.memory.id) for s in got] == [
            ("reply_length", "concise", record["id"])]
        b_outbox = b.ctx.store.capabilities.outbox
        assert b_outbox is not None and b_outbox.pending() == []  # an applied change is not announced again
    finally:
        for engine in engines:
            engine.close()
        if backend != "sqlite":
            for p in paths:
                backends.drop_schema(p)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                                     pytest.param("tiered", marks=[pytest.mark.postgres, pytest.mark.redis])])
def test_an_erasure_and_its_event_commit_together(backend: str, tmp_path: Path) -> None:
    """The erasure's outbox event is written in the soft delete's transaction: a failure after the rows were
    marked deleted and the event queued, before commit, leaves neither; a committed erasure has its event."""
    engine = compose(_backend_settings(backend, tmp_path))
    try:
        fed = engine.use_outbox(LocalHub().transport("a"), "origin-a")
        assert engine.relay is not None
        engine.relay.close()
        fed.domain = "app"
        outbox = engine.ctx.store.capabilities.outbox
        assert outbox is not None
        engine.write.write("t", "u1", _request("city", "Paris"), now=T0)
        engine.write.write("t", "u1", _request("diet", "vegan"), now=T0)
        real_add = outbox.add

        def add_then_crash(tx: Any, entry: OutboxEntry) -> None:
            real_add(tx, entry)  # the event is written in the transaction, then the process "dies"
            raise RuntimeError("crash before commit")

        fed.outbox = type("Crashing", (), {"add": staticmethod(add_then_crash),
                                           "discard_user": outbox.discard_user})()  # type: ignore[assignment]
        with pytest.raises(RuntimeError):
            engine.erasure.forget("t", "u1", keys=["city"], now=T0 + 1)
        with pytest.raises(RuntimeError):
            engine.erasure.forget("t", "u1", now=T0 + 1)
        fed.outbox = outbox
        assert [json.loads(e.payload)["action"] for e in outbox.pending()] == ["write", "write"]  # no event
        assert {r.key for r in engine.ctx.store.live(_live())} == {"city", "diet"}  # and no deletion
        assert engine.erasure.forget("t", "u1", keys=["city"], now=T0 + 2) == 1
        assert fed.held == set()  # released after the commit (the relay may send it)
        erasure = [json.loads(e.payload) for e in fed.pending() if json.loads(e.payload)["action"] == "forget"]
        assert len(erasure) == 1 and erasure[0]["keys"] == ["city"] and erasure[0]["domain"] == "app"
        engine.erasure.forget("t", "u1", now=T0 + 3)
        # forget_user: the user's queued events were dropped in the same transaction; only its event is left
        assert [json.loads(e.payload)["action"] for e in outbox.pending()] == ["forget_user"]
        assert engine.ctx.store.live(_live()) == []
    finally:
        engine.close()
        if backend != "sqlite":
            backends.drop_schema(tmp_path)


def _live() -> Any:
    from usermem.store.base import LiveQuery

    return LiveQuery("t", "u1", T0 + 10)
