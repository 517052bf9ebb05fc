"""Faults in the Redis tier, on a dedicated redis-server this test starts and stops (never the shared one).

Documented behaviour (docs/storage.md): the store of record is the acknowledgement point. While Redis is
down, writes of every kind still commit there, reads of tier kinds fall back to it, and erasure reports
the tier it could not reach; when Redis returns — empty after a restart, or with stale data after a
pause — nothing acknowledged is lost and nothing stale or erased is served.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

import backends
from usermem import Memory, Op
from usermem.config import Settings
from usermem.errors import TierUnavailable
from usermem.model import Kind
from usermem.store.tiered import DIRTY_TENANT, TieredStore

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
T0 = 1_790_000_000.0


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.binary = backends.require_binary("redis-server")
        self.workdir = workdir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        for _ in range(100):
            try:
                client.ping()
                client.close()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("dedicated redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
                self.proc.wait(timeout=10)
            self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def commandstats(self) -> dict[str, int]:
        info = redis.Redis(port=self.port).info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


@pytest.fixture
def server(tmp_path):
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


def _settings(tmp_path: Path, server: RedisServer) -> Settings:
    # Only the dedicated server is needed here, not the shared Redis.
    return Settings().with_overrides(store_url=backends.postgres_url(tmp_path), redis_url=server.url,
                                     preset="tiered", key_prefix="faulttest")


@pytest.fixture
def mem(server, tmp_path):
    m = Memory(settings=_settings(tmp_path, server))
    store = m.store
    assert isinstance(store, TieredStore)
    store.retry_interval = 0.0  # retry the tier on every call: deterministic without sleeping
    store.dirty_check_interval = 0.0
    yield m
    m.close()
    backends.drop_schema(tmp_path)


def _values(m: Memory, user: str, now: float, **kw) -> dict[str, object]:
    return {r.key: r.value for r in m.recall("acme", user, k=20, now=now, **kw)}


def test_redis_stopped_mid_run_then_restarted_empty(server, mem):
    mem.write("acme", "u1", "fact", "occupation", "teacher", source="user_confirmed", now=T0)
    mem.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
    mem.write("acme", "u2", "preference", "likes", "coffee", source="user_confirmed", now=T0)
    assert _values(mem, "u1", T0 + 1) == {"occupation": "teacher", "likes": "tea"}
    assert _values(mem, "u2", T0 + 1) == {"likes": "coffee"}

    mem.store.put_doc("acme", "notes", "u2-note", {"text": "u2 的备注"}, now=T0, user_id="u2")

    server.stop()
    # store-of-record kinds keep working
    assert mem.write("acme", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0 + 2).op is Op.ADD
    assert _values(mem, "u1", T0 + 3, kinds=["fact"]) == {"occupation": "teacher", "city": "杭州"}
    # tier kinds: the documented fallback — acknowledged by the store of record, read from it
    assert mem.write("acme", "u1", "preference", "likes", "milk", source="user_confirmed",
                     now=T0 + 4).op is Op.UPDATE
    assert _values(mem, "u1", T0 + 5) == {"occupation": "teacher", "city": "杭州", "likes": "milk"}
    status = mem.store.tier_status()["redis"]
    assert status["healthy"] is False and status["last_error"]
    assert mem.store.stats["fallbacks"] >= 1
    # erasure cannot reach the tier: a clear error, the store of record is erased, nothing is readable
    with pytest.raises(TierUnavailable, match="retry"):
        mem.forget_user("acme", "u2", now=T0 + 6)
    assert _values(mem, "u2", T0 + 7) == {}
    assert mem.store.get_doc("acme", "notes", "u2-note") is None  # the user's documents went too

    server.start()  # a restart without persistence: empty
    assert _values(mem, "u1", T0 + 8) == {"occupation": "teacher", "city": "杭州", "likes": "milk"}
    assert mem.store.tier_status()["redis"]["healthy"] is True
    assert _values(mem, "u2", T0 + 8) == {}
    assert mem.forget_user("acme", "u2", now=T0 + 9) == 0  # the retry finishes the job
    assert [v.value for v in mem.history("acme", "u1", "likes")] == ["tea", "milk"]
    assert mem.store.list_docs(DIRTY_TENANT, "tier_dirty:redis") == []


def test_redis_paused_with_data_never_serves_stale_or_erased_values(server, mem):
    tier = mem.store.route[Kind.PREFERENCE]
    mem.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
    mem.write("acme", "u2", "preference", "likes", "coffee", source="user_confirmed", now=T0)
    assert _values(mem, "u1", T0 + 1) == {"likes": "tea"}
    assert _values(mem, "u2", T0 + 1) == {"likes": "coffee"}  # both users cached in Redis

    server.pause()  # Redis keeps its data but does not answer (timeouts)
    assert mem.write("acme", "u1", "preference", "likes", "milk", source="user_confirmed",
                     now=T0 + 2).op is Op.UPDATE
    with pytest.raises(TierUnavailable):
        mem.forget_user("acme", "u2", now=T0 + 3)
    assert _values(mem, "u1", T0 + 4) == {"likes": "milk"}
    server.resume()  # the old 'tea' and u2's 'coffee' are still in Redis

    assert _values(mem, "u1", T0 + 5) == {"likes": "milk"}
    assert _values(mem, "u2", T0 + 5) == {}
    prefix = tier.user_prefix("acme", "u2")
    # no data left: only the fence counter and the "cached: nothing" marker the read above created
    assert set(tier.keys_of("acme", "u2")) <= {prefix + ":ver", prefix + ":loaded"}
    assert tier.client.hgetall(prefix + ":f:likes") == {}
    assert mem.forget_user("acme", "u2", now=T0 + 6) == 0
    stats = server.commandstats()
    assert "keys" not in stats and stats.get("scan", 0) >= 1  # erasure finds keys with SCAN, never KEYS


def test_a_second_instance_that_never_saw_the_outage_stops_serving_stale_data(server, mem, tmp_path):
    other = Memory(settings=_settings(tmp_path, server))
    other.store.dirty_check_interval = 0.0
    try:
        mem.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
        assert _values(other, "u1", T0 + 1) == {"likes": "tea"}  # cached by the other instance
        server.pause()
        mem.write("acme", "u1", "preference", "likes", "milk", source="user_confirmed", now=T0 + 2)
        server.resume()
        # `other` had no failure of its own; the dirty mark in the store of record tells it.
        assert _values(other, "u1", T0 + 3) == {"likes": "milk"}
    finally:
        other.close()
