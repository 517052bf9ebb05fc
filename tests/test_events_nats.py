"""Change events on NATS JetStream (docs/events.md), against the real server on 127.0.0.1:4222.

Each test uses its own stream and subject prefix, deleted afterwards. Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import backends
from usermem import Memory
from usermem.config import Settings
from usermem.errors import InvalidArgument
from usermem.events import RemoteChange
from usermem.events.payload import BadPayload, decode, encode, filter_subject, subject_for, to_payload
from usermem.model import ChangeEvent, Kind, MemoryRecord, Source
from usermem.policy.contracts import ContractSet

NATS_URL = backends.NATS_URL
T0 = 1_790_000_000.0


# -- helpers -----------------------------------------------------------------------------------------------

def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _nats_reachable(url: str = NATS_URL) -> str | None:
    from urllib.parse import urlsplit

    import nats

    parts = urlsplit(url)
    try:  # nats.connect() retries a refused first connect (2 s apart): a closed port answers at once instead
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=2).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"

    async def probe() -> None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        _run(probe())
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _stream_state(stream: str, url: str = NATS_URL, subject: str | None = None) -> tuple[int, dict[str, int]]:
    """(messages, per-subject counts) of a stream; a stream not created yet holds nothing: (0, {}) — a bus
    whose relay is stopped before it connected never creates it (seen in CI under load)."""
    import nats
    from nats.js.errors import NotFoundError

    async def go() -> tuple[int, dict[str, int]]:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            try:
                info = await nc.jetstream().stream_info(stream, subjects_filter=subject)
            except NotFoundError:
                return 0, {}
            return info.state.messages, dict(info.state.subjects or {})
        finally:
            await nc.close()

    return _run(go())  # type: ignore[no-any-return]


def _delete_stream(stream: str, url: str = NATS_URL) -> None:
    import nats
    from nats.js.errors import NotFoundError

    async def go() -> None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            await nc.jetstream().delete_stream(stream)
        except NotFoundError:
            pass
        finally:
            await nc.close()

    _run(go())


def wait_for(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class Inbox:
    def __init__(self) -> None:
        self.items: list[RemoteChange] = []
        self._lock = threading.Lock()

    def __call__(self, change: RemoteChange) -> None:
        with self._lock:
            self.items.append(change)

    def where(self, **match: Any) -> list[RemoteChange]:
        with self._lock:
            return [c for c in self.items if all(getattr(c, k) == v for k, v in match.items())]


@pytest.fixture(scope="module")
def nats_ok() -> None:
    backends.require_nats()  # skips, or fails under USERMEM_REQUIRE_BACKENDS=1


@pytest.fixture
def bus_settings(nats_ok: None, tmp_path: Path) -> Iterator[Settings]:
    run = uuid.uuid4().hex[:10]
    stream = f"UMTEST_{run}"
    yield Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/shared.db", embedder="none",
                                    hybrid_lexical_weight=0.0, nats_url=NATS_URL, nats_stream=stream,
                                    nats_subject_prefix=f"umtest.{run}")
    _delete_stream(stream)


@pytest.fixture
def pair(bus_settings: Settings) -> Iterator[tuple[Memory, Memory]]:
    a, b = Memory(settings=bus_settings), Memory(settings=bus_settings)
    yield a, b
    a.close()
    b.close()


# -- wire format (pure) ------------------------------------------------------------------------------------

def _record(key: str, value: Any, kind: Kind = Kind.FACT) -> MemoryRecord:
    return MemoryRecord(id=uuid.uuid4().hex, tenant="acme", user_id="u1", kind=kind, key=key, value=value,
                        source=Source.USER_CONFIRMED, confidence=1.0, importance=0.5, created_at=T0, client_id="app")


def test_payload_carries_l1_values_only_and_never_the_user_id_in_the_subject():
    records = (_record("reply_length", "concise", Kind.PREFERENCE), _record("phone", "13800138000"),
               _record("allergy", "花生"), _record("unknown_key", "x"))
    event = ChangeEvent("acme", "13800138000", "write", T0, keys=tuple(r.key for r in records),
                        memory_ids=tuple(r.id for r in records), client_id="app", records=records)
    doc = to_payload(event, event_id="e1", origin="o1", contracts=ContractSet())
    by_key = {r["key"]: r for r in doc["records"]}
    assert by_key["reply_length"]["value"] == "concise" and by_key["unknown_key"]["value"] == "x"
    assert "value" not in by_key["phone"] and by_key["phone"]["sensitivity"] == "L2"
    assert "value" not in by_key["allergy"] and by_key["allergy"]["sensitivity"] == "L3"
    raw = encode(doc)
    assert b"13800138000" not in raw.replace(b'"user_id":"13800138000"', b"")  # only as the user id
    assert "花生".encode() not in raw
    assert doc["causality_id"] == "e1"  # a root event is its own cause
    none = to_payload(event, event_id="e2", origin="o1", contracts=ContractSet(), values="none")
    assert all("value" not in r for r in none["records"])
    subject = subject_for("usermem", "acme", "13800138000", "write")
    assert "13800138000" not in subject and subject.startswith("usermem.acme.") and subject.endswith(".write")
    assert subject.rsplit(".", 1)[0] + ".*" == filter_subject("usermem", "acme", "13800138000")
    change = decode(raw, subject=subject)
    assert change.values == {"reply_length": "concise", "unknown_key": "x"} and change.client_id == "app"


_CONTRACTS = ContractSet()
_KEYS = [*sorted(c.key for c in _CONTRACTS), "unknown_a", "unknown_b"]


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(list(Kind)), st.text(min_size=1, max_size=30),
                          st.booleans()), min_size=1, max_size=8),
       st.sampled_from(["l1", "none"]), st.text(min_size=1, max_size=20))
def test_no_l2_or_l3_value_is_ever_encoded(items, values, user):
    # Property: whatever is written, the encoded event holds a value only for L1 fields that are not
    # private, only with values="l1", and never a retracted one.
    records = []
    for i, (key, kind, text, retracted) in enumerate(items):
        r = _record(key, f"SECRET{i}:{text}", kind)
        records.append(r.with_changes(retracted=retracted))
    event = ChangeEvent("acme", user, "write", T0, keys=tuple(r.key for r in records),
                        memory_ids=tuple(r.id for r in records), records=tuple(records))
    raw = encode(to_payload(event, event_id="e", origin="o", contracts=_CONTRACTS, values=values)).decode()
    for r in records:
        contract = _CONTRACTS.get(r.key)
        public = contract is None or (contract.sensitivity.value == "L1" and contract.sharing.value != "private")
        shown = json.dumps(r.value, ensure_ascii=False)[1:-1] in raw
        assert shown == (values == "l1" and public and not r.retracted), (r.key, values, r.retracted)
    assert json.loads(raw)["user_id"] == user


def test_tenants_that_are_not_subject_tokens_are_hashed_and_stay_apart():
    odd = subject_for("usermem", "acme.cn > *", "u1", "write")
    assert odd.count(".") == 3 and "*" not in odd and ">" not in odd and odd.split(".")[1].startswith("_")
    assert subject_for("usermem", "客户甲", "u1", "write") != subject_for("usermem", "客户乙", "u1", "write")
    assert subject_for("usermem", "a", "u1", "write") != subject_for("usermem", "b", "u1", "write")


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"v": 2}', b'{"v": 1, "event_id": "x"}',
                                  b'{"v":1,"event_id":"e","causality_id":"c","origin":"o","tenant":"t",'
                                  b'"user_id":"u","action":"write","at":"soon"}'])
def test_malformed_payloads_are_rejected_with_a_typed_error(data: bytes):
    with pytest.raises(BadPayload):
        decode(data)


def test_remote_changes_need_the_bus():
    with Memory() as m:
        assert m.events is None
        with pytest.raises(InvalidArgument, match="nats_url"):
            m.on_remote_change(lambda change: None)


# -- two instances -----------------------------------------------------------------------------------------

@pytest.mark.nats
def test_a_write_on_the_app_reaches_the_miniapp_with_keys_client_and_causality(pair):
    app, miniapp = pair
    inbox = Inbox()
    miniapp.on_remote_change(inbox)
    app.write("acme", "u1", "preference", "voice_enabled", True, source="user_confirmed", client_id="app",
              change_set_id="cs-voice-1")
    app.write("acme", "u1", "fact", "phone", "13800138000", source="user_confirmed", client_id="app")
    got = wait_for(lambda: len(inbox.where(action="write")) >= 2 and inbox.where(action="write"),
                   what="both writes at the miniapp")
    voice, phone = got[0], got[1]
    assert voice.keys == ("voice_enabled",) and voice.client_id == "app" and voice.tenant == "acme"
    assert voice.user_id == "u1" and voice.causality_id == "cs-voice-1" and voice.values == {"voice_enabled": True}
    assert voice.origin == app.events.instance_id != miniapp.events.instance_id
    assert voice.memory_ids == (app.history("acme", "u1", "voice_enabled")[-1].id,)
    assert phone.keys == ("phone",) and phone.values == {} and phone.records[0]["sensitivity"] == "L2"
    assert phone.causality_id == phone.event_id  # no change set: the event is its own cause
    # The shared store already holds the value (last writer wins); the miniapp can read and notify.
    assert miniapp.get("acme", voice.memory_ids[0]).value is True  # type: ignore[union-attr]
    # The app does not receive its own events back as remote changes.
    wait_for(lambda: app.events.stats()["skipped_own"] == 2, what="the app's own events, skipped")
    assert app.events.stats()["remote"] == 0


@pytest.fixture
def federated(bus_settings: Settings, tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:
    """Two instances with their own stores (seed 004: federation, not a shared database)."""
    a = Memory(settings=bus_settings.with_overrides(store_url=f"sqlite:///{tmp_path}/app.db"))
    b = Memory(settings=bus_settings.with_overrides(store_url=f"sqlite:///{tmp_path}/miniapp.db"))
    yield a, b
    a.close()
    b.close()


@pytest.mark.nats
def test_what_a_receiver_does_with_a_remote_event_is_not_echoed_back(federated):
    app, miniapp = federated
    at_app, at_miniapp = Inbox(), Inbox()
    app.on_remote_change(at_app)

    def apply_locally(change: RemoteChange) -> None:
        # A federated receiver applying the change to its own state: nothing of this may loop back.
        at_miniapp(change)
        if change.action == "forget_user":
            miniapp.forget_user(change.tenant, change.user_id)
        for key, value in change.values.items():
            miniapp.write(change.tenant, change.user_id, "preference", key, value, source="user_confirmed",
                          client_id="miniapp")

    miniapp.on_remote_change(apply_locally)
    app.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", client_id="app")
    wait_for(lambda: at_miniapp.where(action="write"), what="the write at the miniapp")
    wait_for(lambda: miniapp.events.stats()["suppressed"] >= 1, what="the receiver's write to be suppressed")
    # A write carrying a received causality id (e.g. applied later, from a queue) is not published either.
    cause = at_miniapp.items[0].causality_id
    assert miniapp.recall("acme", "u1")[0].value == "concise"  # applied to the miniapp's own store
    miniapp.write("acme", "u1", "preference", "reply_length", "short", source="user_confirmed",
                  client_id="miniapp", change_set_id=cause)
    # A fresh change of the miniapp's own is published; events of one publisher arrive in order, so once it
    # is at the app, anything echoed before it would have arrived too.
    miniapp.write("acme", "u1", "preference", "theme", "dark", source="user_confirmed", client_id="miniapp")
    marker = wait_for(lambda: at_app.where(action="write"), what="the miniapp's own change at the app")
    assert [c.keys for c in at_app.items] == [("theme",)] and marker[0].client_id == "miniapp"
    assert miniapp.events.stats()["suppressed"] == 2 and miniapp.events.stats()["published"] == 1
    # The same for an erasure applied by the receiver to its own store.
    app.forget_user("acme", "u1")
    wait_for(lambda: at_miniapp.where(action="forget_user"), what="the erasure at the miniapp")
    wait_for(lambda: miniapp.events.stats()["suppressed"] == 3, what="the receiver's erasure to be suppressed")
    assert miniapp.recall("acme", "u1") == []
    miniapp.write("acme", "u2", "preference", "theme", "light", source="user_confirmed", client_id="miniapp")
    wait_for(lambda: len(at_app.items) == 2, what="the second marker")
    assert [c.action for c in at_app.items] == ["write", "write"] and at_app.items[1].user_id == "u2"


@pytest.mark.nats
def test_forget_user_reaches_the_other_instance_and_purges_the_users_events(pair, bus_settings):
    app, miniapp = pair
    inbox = Inbox()
    miniapp.on_remote_change(inbox)
    for key, value in (("reply_length", "concise"), ("city", "杭州")):
        app.write("acme", "u1", "preference", key, value, source="user_confirmed", client_id="app")
    app.write("acme", "u2", "preference", "reply_length", "detailed", source="user_confirmed", client_id="app")
    wait_for(lambda: len(inbox.where(action="write")) == 3, what="three writes")
    u1 = filter_subject(bus_settings.nats_subject_prefix, "acme", "u1")
    assert sum(_stream_state(bus_settings.nats_stream, subject=u1)[1].values()) == 2
    assert app.forget_user("acme", "u1") == 2
    erased = wait_for(lambda: inbox.where(action="forget_user"), what="the erasure at the miniapp")
    assert erased[0].user_id == "u1" and erased[0].is_erasure and erased[0].values == {}
    assert len(erased[0].memory_ids) == 2
    # The stream no longer holds u1's earlier events (which carried L1 values), only the erasure itself;
    # u2's events are untouched.
    subjects = _stream_state(bus_settings.nats_stream, subject=u1)[1]
    assert subjects == {subject_for(bus_settings.nats_subject_prefix, "acme", "u1",
                                                        "forget_user"): 1}
    u2 = filter_subject(bus_settings.nats_subject_prefix, "acme", "u2")
    assert sum(_stream_state(bus_settings.nats_stream, subject=u2)[1].values()) == 1
    assert app.events.stats()["bus"]["purged"] == 1


@pytest.mark.nats
def test_a_remote_change_drops_the_in_process_cache_of_the_user(bus_settings):
    # The session tier caches preferences in each process: without the event the miniapp would keep
    # serving the value it cached before the app changed it.
    settings = bus_settings.with_overrides(routes={"preference": "session"})
    app, miniapp = Memory(settings=settings), Memory(settings=settings)
    try:
        inbox = Inbox()
        miniapp.on_remote_change(inbox)
        app.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
        wait_for(lambda: inbox.where(action="write"), what="the first write")
        assert [r.value for r in miniapp.recall("acme", "u1", now=T0 + 1)] == ["concise"]  # now cached
        app.write("acme", "u1", "preference", "reply_length", "detailed", source="user_confirmed", now=T0 + 2)
        wait_for(lambda: len(inbox.where(action="write")) == 2, what="the second write")
        assert [r.value for r in miniapp.recall("acme", "u1", now=T0 + 3)] == ["detailed"]
        assert miniapp.events.stats()["caches_dropped"] >= 1
        app.forget_user("acme", "u1", now=T0 + 4)
        wait_for(lambda: inbox.where(action="forget_user"), what="the erasure")
        tier = miniapp.store.tiers[0]  # type: ignore[attr-defined]
        assert tier.read("acme", "u1")[0] is None  # nothing of u1 left in the miniapp's process
        assert miniapp.recall("acme", "u1", now=T0 + 5) == []
    finally:
        app.close()
        miniapp.close()


@pytest.mark.nats
@pytest.mark.redis
def test_erasure_drops_the_redis_near_cache_of_other_instances(bus_settings):
    redis_url = backends.require_redis()
    prefix = "umtest:events:" + uuid.uuid4().hex[:8]
    settings = bus_settings.with_overrides(routes={"preference": "redis"}, redis_url=redis_url, key_prefix=prefix)
    app, miniapp = Memory(settings=settings), Memory(settings=settings)
    try:
        inbox = Inbox()
        miniapp.on_remote_change(inbox)
        app.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
        wait_for(lambda: inbox.where(action="write"), what="the write")
        for _ in range(2):  # the first read fills Redis, the second decodes it into the near cache
            assert [r.value for r in miniapp.recall("acme", "u1", now=T0 + 1)] == ["concise"]
        tier = miniapp.store.tiers[0]  # type: ignore[attr-defined]
        assert ("acme", "u1") in tier._near  # decoded values held in the miniapp's memory
        app.forget_user("acme", "u1", now=T0 + 2)
        wait_for(lambda: inbox.where(action="forget_user"), what="the erasure")
        assert ("acme", "u1") not in tier._near
    finally:
        app.close()
        miniapp.close()
        backends.delete_prefix(prefix, redis_url)


# -- failures ----------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_writes_succeed_when_nats_is_down_and_the_log_says_why(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="usermem.events")
    port = _free_port()  # closed: nothing listens there
    settings = Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/m.db", embedder="none",
                                         hybrid_lexical_weight=0.0, nats_url=f"nats://127.0.0.1:{port}")
    m = Memory(settings=settings)
    try:
        m.on_remote_change(lambda change: None)
        for i in range(20):
            r = m.write("acme", "u1", "preference", "reply_length", f"v{i}", source="user_confirmed", now=T0 + i)
            assert r.memory is not None
        assert m.forget_user("acme", "u1", now=T0 + 30) == 20  # every version
        assert m.recall("acme", "u1", now=T0 + 31) == []
        wait_for(lambda: any("cannot connect" in r.getMessage() for r in caplog.records), what="the log line")
        line = next(r.getMessage() for r in caplog.records if "cannot connect" in r.getMessage())
        assert f"127.0.0.1:{port}" in line and "writes are unaffected" in line
        stats = m.events.stats()["bus"]
        assert stats["connected"] is False and stats["connect_errors"] >= 1 and stats["published"] == 0
        # Issue 17: changes go out through the transactional outbox. The erasure dropped the user's events not
        # yet handed to the bus (they may carry values); what waits now is the purge and the erasure event,
        # plus whichever writes the relay had already queued on the bus (the purge, queued after them, erases them).
        assert 2 <= stats["queued"] <= 22
        outbox = m.store.capabilities.outbox
        assert outbox is not None
        assert [json.loads(e.payload)["action"] for e in outbox.pending()] == ["forget_user"]
    finally:
        started = time.monotonic()
        m.close()
        assert time.monotonic() - started < 5  # close does not wait for a server that is not there


def test_a_full_queue_drops_new_events_and_counts_them(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="usermem.events")
    settings = Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/m.db", embedder="none",
                                         hybrid_lexical_weight=0.0, nats_url=f"nats://127.0.0.1:{_free_port()}",
                                         nats_queue_size=5)
    with Memory(settings=settings) as m:
        for i in range(8):
            m.write("acme", "u1", "preference", "reply_length", f"v{i}", source="user_confirmed", now=T0 + i)
        stats = wait_for(lambda: (s := m.events.stats()["bus"])["dropped"] >= 3 and s, what="3 drops")
        assert stats["enqueued"] == 5 and stats["queued"] == 5
        wait_for(lambda: any("queue full" in r.getMessage() for r in caplog.records), what="the log line")
        # Issue 17: a dropped event is not lost — it stays in the transactional outbox until JetStream
        # acknowledges it (the relay tries again), so all eight changes are still to be announced.
        outbox = m.store.capabilities.outbox
        assert outbox is not None and len(outbox.pending()) == 8


@pytest.mark.nats
def test_publishing_resumes_after_the_server_comes_back(tmp_path):
    exe = backends.require_binary("nats-server")  # to start and stop a private server
    port = _free_port()
    url = f"nats://127.0.0.1:{port}"
    store_dir = tmp_path / "js"
    cmd = [exe, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store_dir)]

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _nats_reachable(url) is None, what="the private NATS server")
        return proc

    server = start()
    settings = Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/m.db", embedder="none",
                                         hybrid_lexical_weight=0.0, nats_url=url, nats_stream="RESUME",
                                         nats_subject_prefix="resume")
    m = Memory(settings=settings)
    other = Memory(settings=settings.with_overrides(store_url=f"sqlite:///{tmp_path}/other.db"))
    inbox = Inbox()
    other.on_remote_change(inbox)
    try:
        m.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
        wait_for(lambda: m.events.stats()["bus"]["published"] == 1, what="the first publish")
        wait_for(lambda: inbox.items, what="the first event at the other instance")
        server.terminate()
        server.wait(10)
        wait_for(lambda: not m.events.stats()["bus"]["connected"], what="the disconnect")
        r = m.write("acme", "u1", "preference", "reply_length", "detailed", source="user_confirmed", now=T0 + 1)
        assert r.memory is not None  # the write commits while NATS is away
        wait_for(lambda: m.events.stats()["bus"]["queued"] == 1, what="the relay queuing the event")
        server = start()
        wait_for(lambda: m.events.stats()["bus"]["published"] == 2, timeout=30, what="the publish after reconnect")
        assert _stream_state("RESUME", url=url)[0] == 2
        # The receiver's consumer is recreated after the restart and continues after what it saw.
        wait_for(lambda: len(inbox.items) == 2, timeout=30, what="the event after the restart at the receiver")
        assert [c.values["reply_length"] for c in inbox.items] == ["concise", "detailed"]
    finally:
        m.close()
        other.close()
        server.terminate()
        server.wait(10)


# -- CLI -----------------------------------------------------------------------------------------------------

@pytest.mark.nats
def test_events_tail_prints_the_tenants_changes(bus_settings, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from usermem.interfaces.cli import _register, app

    _register()
    monkeypatch.setenv("USERMEM_NATS_STREAM", bus_settings.nats_stream)
    monkeypatch.setenv("USERMEM_NATS_SUBJECT_PREFIX", bus_settings.nats_subject_prefix)
    m = Memory(settings=bus_settings)
    stop = threading.Event()

    def keep_writing() -> None:
        # tail follows events from the moment it subscribes: write until it has printed one.
        i = 0
        while not stop.is_set() and i < 500:
            m.write("other", "x", "preference", "reply_length", f"v{i}", source="user_confirmed")
            m.write("acme", "张三", "preference", "reply_length", f"简洁{i}", source="user_confirmed",
                    client_id="app")
            i += 1
            stop.wait(0.02)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        out = CliRunner().invoke(app, ["events", "tail", "--tenant", "acme", "-n", "2", "--timeout", "20",
                                       "--url", NATS_URL])
    finally:
        stop.set()
        writer.join()
        m.close()
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if "张三" in line]
    assert len(lines) == 2 and all("acme/张三" in line and "write" in line and "client=app" in line for line in lines)
    assert "简洁" in lines[0] and "other/" not in out.output
    out = CliRunner().invoke(app, ["events", "tail", "--user", "u1", "--url", NATS_URL])
    assert out.exit_code != 0


@pytest.mark.nats
def test_events_benchmark_quick_mode(nats_ok, tmp_path):
    from usermem.bench import BenchContext
    from usermem.bench.events import bench_events

    out = bench_events(BenchContext(out_dir=tmp_path, quick=True))
    assert "error" not in out, out
    assert out["delivery_a_to_b"]["lost"] == 0 and out["delivery_a_to_b"]["n"] == 100
    assert out["write_nats_down"]["n"] == 100 and out["write_nats_down"]["published"] == 0
    assert out["burst_publish"]["events"] == 300 and out["burst_publish"]["failed"] == 0
    assert out["bus_only"]["events"] == 1_000
