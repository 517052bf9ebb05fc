"""Issue 12 items 6 and 8 on a private nats-server this test starts (its own -sd store dir, a free port):

* item 6 — after `forget_user`, no byte of the user's published L1 values is left in the JetStream store
  directory (block files included), while another user's values still are (the search works);
* item 8 — a server that restarts *without* its JetStream state (store dir wiped) gets its stream back:
  later writes and the erasure broadcast are delivered to the other instance without restarting ours.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import backends
from test_events_nats import Inbox, _nats_reachable, _stream_state, wait_for
from usermem import Memory
from usermem.config import Settings

T0 = 1_790_000_000.0
SECRET_VALUES = ("靠窗的座位-7f3a", "window-seat-9c1e", "Hangzhou-Xihu-42")
OTHER_VALUE = "aisle-seat-other-5d2b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    def __init__(self, store_dir: Path) -> None:
        exe = backends.require_binary("nats-server")  # skips locally, fails with USERMEM_REQUIRE_BACKENDS=1
        self.store_dir = store_dir
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.cmd = [exe, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(store_dir)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _nats_reachable(self.url) is None, what="the private NATS server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def files_containing(self, needle: str) -> list[str]:
        data = needle.encode("utf-8")
        return sorted(str(p.relative_to(self.store_dir)) for p in self.store_dir.rglob("*")
                      if p.is_file() and data in p.read_bytes())


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "js")
    server.start()
    yield server
    server.stop()


def _settings(tmp_path: Path, url: str, db: str) -> Settings:
    return Settings().with_overrides(store_url=f"sqlite:///{tmp_path}/{db}.db", embedder="none",
                                     hybrid_lexical_weight=0.0, nats_url=url, nats_stream="HARDEN",
                                     nats_subject_prefix="harden")


def test_forget_user_leaves_no_value_bytes_in_the_jetstream_block_files(nats_server, tmp_path):
    m = Memory(settings=_settings(tmp_path, nats_server.url, "a"))
    try:
        for i, value in enumerate(SECRET_VALUES):
            m.write("acme", "leaver", "preference", f"seat_{i}", value, source="user_confirmed", now=T0 + i)
        m.write("acme", "stayer", "preference", "seat", OTHER_VALUE, source="user_confirmed", now=T0)
        wait_for(lambda: m.events.stats()["bus"]["published"] == 4, what="four publishes")
        for value in (*SECRET_VALUES, OTHER_VALUE):  # the values did reach the block files
            assert nats_server.files_containing(value), value
        m.forget_user("acme", "leaver", now=T0 + 10)
        wait_for(lambda: m.events.stats()["bus"]["published"] == 5, what="the erasure broadcast")
        wait_for(lambda: m.events.stats()["bus"]["queued"] == 0, what="the erasure to finish")
        for value in SECRET_VALUES:
            assert nats_server.files_containing(value) == [], value
        assert m.events.stats()["bus"]["erased_messages"] == 3
        assert nats_server.files_containing(OTHER_VALUE)  # the search works: another user's value is there
        assert _stream_state("HARDEN", url=nats_server.url)[0] == 2  # stayer's write + the erasure
    finally:
        m.close()
    nats_server.stop()  # and nothing comes back when the server flushes and stops
    for value in SECRET_VALUES:
        assert nats_server.files_containing(value) == [], value
    assert nats_server.files_containing(OTHER_VALUE)


def test_events_flow_again_after_nats_restarts_without_its_jetstream_state(nats_server, tmp_path):
    m = Memory(settings=_settings(tmp_path, nats_server.url, "a"))
    other = Memory(settings=_settings(tmp_path, nats_server.url, "b"))
    inbox = Inbox()
    other.on_remote_change(inbox)
    try:
        m.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
        wait_for(lambda: inbox.where(action="write"), what="the first event at the other instance")
        nats_server.stop()
        shutil.rmtree(nats_server.store_dir)  # the JetStream state is gone: no stream after the restart
        wait_for(lambda: not m.events.stats()["bus"]["connected"], what="the disconnect")
        nats_server.start()
        wait_for(lambda: m.events.stats()["bus"]["connected"], timeout=30, what="the reconnect")
        m.write("acme", "u1", "preference", "reply_length", "detailed", source="user_confirmed", now=T0 + 1)
        wait_for(lambda: m.events.stats()["bus"]["published"] == 2, timeout=30, what="the publish after the wipe")
        got = wait_for(lambda: [c for c in inbox.where(action="write") if c.values.get("reply_length") == "detailed"],
                       timeout=30, what="the event after the wipe at the other instance")
        assert got[0].user_id == "u1"
        assert m.events.stats()["bus"]["streams_recreated"] >= 1 or other.events.stats()["bus"]["streams_recreated"] >= 1
        # The erasure broadcast is delivered too.
        m.forget_user("acme", "u1", now=T0 + 2)
        wait_for(lambda: inbox.where(action="forget_user"), timeout=30, what="the erasure broadcast")
        assert m.events.stats()["bus"]["failed"] == 0
    finally:
        m.close()
        other.close()


@pytest.mark.postgres
@pytest.mark.redis
def test_a_read_after_erasure_leaves_no_redis_key_naming_the_user(tmp_path):
    import redis

    settings = backends.tiered_settings(tmp_path, Settings().with_overrides(embedder="none",
                                                                            hybrid_lexical_weight=0.0))
    m = Memory(settings=settings)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        m.write("acme", "leaver-77", "preference", "seat", "window", source="user_confirmed", now=T0)
        m.write("acme", "leaver-77", "fact", "city", "杭州", source="user_confirmed", now=T0)
        assert [r.key for r in m.recall("acme", "leaver-77", k=5, now=T0 + 1)]  # fills the tier
        assert client.keys(f"{settings.key_prefix}:*leaver-77*:loaded")
        m.forget_user("acme", "leaver-77", now=T0 + 2)
        for i in range(3):  # reads after the erasure, as an agent that does not know would do
            assert m.recall("acme", "leaver-77", k=5, now=T0 + 3 + i) == []
        names = [n.decode() for n in client.keys(f"{settings.key_prefix}:*leaver-77*")]
        assert [n for n in names if not n.endswith(":ver")] == []  # the version counter guards racing fills
        # A user who holds only non-tier kinds still gets the (empty) tier cached: no store read per recall.
        m.write("acme", "facts-only", "fact", "city", "上海", source="user_confirmed", now=T0)
        m.recall("acme", "facts-only", k=5, now=T0 + 1)
        assert client.keys(f"{settings.key_prefix}:*facts-only*:loaded")
    finally:
        m.close()
        client.close()
        backends.tiered_cleanup(tmp_path)


def test_events_flow_again_after_nats_is_killed_and_restarts_with_its_jetstream_state(nats_server, tmp_path):
    """The other half of the fault pair: kill -9 of the server mid-traffic, restart on the same store
    directory (the stream and its messages survive). The write made while it was down is published on
    reconnect, nothing is duplicated, the other instance's consumer resumes after what it saw."""
    import os
    import signal

    m = Memory(settings=_settings(tmp_path, nats_server.url, "a"))
    other = Memory(settings=_settings(tmp_path, nats_server.url, "b"))
    inbox = Inbox()
    other.on_remote_change(inbox)
    try:
        m.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
        wait_for(lambda: inbox.where(action="write"), what="the first event at the other instance")
        assert nats_server.proc is not None
        os.kill(nats_server.proc.pid, signal.SIGKILL)
        nats_server.proc.wait(10)
        nats_server.proc = None
        wait_for(lambda: not m.events.stats()["bus"]["connected"], what="the disconnect")
        r = m.write("acme", "u1", "preference", "reply_length", "detailed", source="user_confirmed", now=T0 + 1)
        assert r.memory is not None  # the write commits while NATS is away; its event waits in the queue
        nats_server.start()  # same store dir: the JetStream state is back
        wait_for(lambda: m.events.stats()["bus"]["published"] == 2, timeout=30, what="the publish after restart")
        got = wait_for(lambda: [c for c in inbox.where(action="write") if c.values.get("reply_length") == "detailed"],
                       timeout=30, what="the event after the restart at the other instance")
        assert len(got) == 1 and got[0].user_id == "u1"
        assert [c.values.get("reply_length") for c in inbox.where(action="write")] == ["concise", "detailed"]
        assert _stream_state("HARDEN", url=nats_server.url)[0] == 2  # the stream kept the first message
        m.forget_user("acme", "u1", now=T0 + 2)
        wait_for(lambda: inbox.where(action="forget_user"), timeout=30, what="the erasure broadcast")
        assert m.events.stats()["bus"]["failed"] == 0
    finally:
        m.close()
        other.close()
