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
