"""Issue 12 item 7: two instances, a dedicated redis-server paused and resumed. A write that skips the
tier while its instance is backing off must never let the other instance serve the old value from
Redis — not even inside that instance's dirty-check interval (the ~0.9 s window the probe found)."""

from __future__ import annotations

import pytest

import backends
from test_redis_fault import RedisServer, _settings, _values
from usermem import Memory, Op
from usermem.store.tiered import TieredStore

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
T0 = 1_790_000_000.0


def test_a_write_skipping_the_tier_in_backoff_is_never_hidden_by_the_other_instances_cache(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    a = Memory(settings=_settings(tmp_path, server))
    b = Memory(settings=_settings(tmp_path, server))
    try:
        assert isinstance(a.store, TieredStore) and isinstance(b.store, TieredStore)
        a.store.retry_interval = 3600.0  # once down, `a` stays in backoff: its writes skip the tier
        b.store.dirty_check_interval = 3600.0  # `b` just checked the dirty marks: the window is open
        a.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
        assert _values(b, "u1", T0 + 1) == {"likes": "tea"}  # cached in Redis (and b's near cache)
        server.pause()
        assert a.write("acme", "u1", "preference", "likes", "milk", source="user_confirmed",
                       now=T0 + 2).op is Op.UPDATE  # the tier times out: `a` marks u1 dirty, backs off
        server.resume()  # Redis is back, still holding 'tea'
        assert a.write("acme", "u1", "preference", "likes", "juice", source="user_confirmed",
                       now=T0 + 3).op is Op.UPDATE  # in backoff: the tier is skipped, u1 marked dirty
        for i in range(3):
            assert _values(b, "u1", T0 + 4 + i) == {"likes": "juice"}
        assert _values(a, "u1", T0 + 7) == {"likes": "juice"}
        # Once reconciled (the dirty check runs), `b` serves from Redis again, refilled with the new value.
        b.store.dirty_check_interval = 0.0
        assert _values(b, "u1", T0 + 8) == {"likes": "juice"}
        assert _values(b, "u1", T0 + 9) == {"likes": "juice"}
    finally:
        a.close()
        b.close()
        server.stop()
        backends.drop_schema(tmp_path)


class PersistentRedis(RedisServer):
    """A dedicated redis-server that keeps its data across a kill -9 (append-only file, fsync always): after
    the restart it holds exactly the stale values it had cached before the outage."""

    def start(self) -> None:
        import subprocess
        import time

        import redis

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        for _ in range(200):
            try:
                client.ping()
                client.close()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("dedicated redis-server did not start")

    def kill(self) -> None:
        import os
        import signal

        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None


@pytest.mark.parametrize("backoff", [True, False], ids=["writer-in-backoff", "writer-retries"])
def test_redis_killed_and_restarted_with_stale_data_two_instances_serve_only_the_new_value(tmp_path, backoff):
    """kill -9 of Redis mid-traffic with two instances; Redis comes back from its append-only file still
    holding the old value. Neither instance ever serves it, whether the writer is still backing off (its
    writes skip the tier) or retries the tier at once (its next write reaches the restarted Redis)."""
    server = PersistentRedis(tmp_path)
    server.start()
    a = Memory(settings=_settings(tmp_path, server))
    b = Memory(settings=_settings(tmp_path, server))
    try:
        assert isinstance(a.store, TieredStore) and isinstance(b.store, TieredStore)
        a.store.retry_interval = 3600.0 if backoff else 0.0
        b.store.dirty_check_interval = 3600.0  # `b` just checked the dirty marks: the window is open
        a.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
        a.write("acme", "u2", "preference", "likes", "coffee", source="user_confirmed", now=T0)
        assert _values(b, "u1", T0 + 1) == {"likes": "tea"}  # cached in Redis (and b's near cache)
        assert _values(b, "u2", T0 + 1) == {"likes": "coffee"}
        server.kill()
        assert a.write("acme", "u1", "preference", "likes", "milk", source="user_confirmed",
                       now=T0 + 2).op is Op.UPDATE  # acknowledged by the store of record; u1 marked dirty
        assert _values(a, "u1", T0 + 3) == {"likes": "milk"}
        server.start()  # back from the append-only file, still holding 'tea'
        for i in range(3):
            assert _values(b, "u1", T0 + 4 + i) == {"likes": "milk"}, i
            assert _values(a, "u1", T0 + 4 + i) == {"likes": "milk"}, i
        assert a.write("acme", "u1", "preference", "likes", "juice", source="user_confirmed",
                       now=T0 + 8).op is Op.UPDATE
        for m in (a, b, a, b):
            assert _values(m, "u1", T0 + 9) == {"likes": "juice"}
        assert _values(b, "u2", T0 + 9) == {"likes": "coffee"}  # an untouched user is still served
        b.store.dirty_check_interval = 0.0  # reconciled: b serves from Redis again, with the new value
        assert _values(b, "u1", T0 + 10) == {"likes": "juice"}
        assert [v.value for v in a.history("acme", "u1", "likes")] == ["tea", "milk", "juice"]  # nothing lost
    finally:
        a.close()
        b.close()
        server.stop()
        backends.drop_schema(tmp_path)
