"""Routing by kind and the Redis serving tier, against real PostgreSQL and Redis."""

from __future__ import annotations

import threading

import pytest

import backends
from props import examples
from usermem import Memory, Op
from usermem.config import load_settings
from usermem.errors import ConfigError
from usermem.model import Kind
from usermem.store.migrations import load_migrations
from usermem.store.postgres import PostgresStore
from usermem.store.redis import RedisTier, SessionTier
from usermem.store.sqlite import SQLiteStore
from usermem.store.tiered import DIRTY_TENANT, TieredStore, build_store, resolve_routes

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
T0 = 1_790_000_000.0


@pytest.fixture
def tiered(tmp_path):
    m = Memory(settings=backends.tiered_settings(tmp_path))
    yield m
    m.close()
    backends.tiered_cleanup(tmp_path)


def _redis(m: Memory) -> RedisTier:
    store = m.store
    assert isinstance(store, TieredStore)
    tier = store.route[Kind.PREFERENCE]
    assert isinstance(tier, RedisTier)
    return tier


# -- configuration ---------------------------------------------------------------------------------------

def test_presets_route_kinds(tmp_path):
    assert resolve_routes("embedded", {}) == {k: "record" for k in Kind}
    tiered = resolve_routes("tiered", {})
    assert tiered[Kind.FACT] == tiered[Kind.SITUATION] == tiered[Kind.EPISODE] == "record"
    assert tiered[Kind.PREFERENCE] == tiered[Kind.CONTEXT] == "redis"
    assert resolve_routes("tiered", {"context": "session", "profile": "redis"})[Kind.FACT] == "redis"
    m = Memory()
    assert isinstance(m.store, SQLiteStore)
    m.close()
    store = build_store(backends.tiered_settings(tmp_path))
    try:
        assert isinstance(store, TieredStore) and isinstance(store.record, PostgresStore)
        assert {k for k in Kind if k in store.route} == {Kind.PREFERENCE, Kind.CONTEXT}
    finally:
        store.close()
        backends.tiered_cleanup(tmp_path)


def test_file_and_environment_configure_the_store_env_wins(tmp_path):
    cfg = tmp_path / "usermem.toml"
    cfg.write_text('store_url = "sqlite:///x.db"\npreset = "embedded"\nredis_url = "redis://127.0.0.1:6379/0"\n'
                   '[routes]\ncontext = "session"\n', encoding="utf-8")
    s = load_settings(cfg, env={"USERMEM_PRESET": "tiered", "USERMEM_ROUTES": "preference=redis,context=record"})
    assert s.preset == "tiered" and s.store_url == "sqlite:///x.db"
    assert dict(s.routes) == {"preference": "redis", "context": "record"}


@pytest.mark.parametrize(("overrides", "setting", "words"), [
    ({"preset": "tiered", "redis_url": None}, "redis_url", "no redis_url is set"),
    ({"preset": "tiered", "redis_url": "redis://127.0.0.1:1/0"}, "redis_url", "cannot reach Redis"),
    ({"preset": "tiered", "redis_url": "http://127.0.0.1:6379"}, "redis_url", "unknown Redis URL scheme"),
    ({"routes": {"nonsense": "redis"}}, "routes", "unknown kind"),
    ({"store_url": "mongodb://x/y"}, "store_url", "unknown store scheme"),
    ({"store_url": "postgresql://postgres@127.0.0.1:1/x"}, "store_url", "cannot connect"),
])
def test_bad_configuration_fails_at_start_naming_the_setting(tmp_path, overrides, setting, words):
    settings = load_settings(env={}, store_url=f"sqlite:///{tmp_path}/a.db").with_overrides(**overrides)
    with pytest.raises(ConfigError) as e:
        Memory(settings=settings)
    assert e.value.setting == setting and words in str(e.value)
    assert str(e.value).startswith(f"{setting}: ")


def test_bad_key_prefix_and_route_value_are_config_errors():
    with pytest.raises(ConfigError, match="routes"):
        load_settings(env={}, routes={"fact": "memcached"})
    with pytest.raises(ConfigError, match="key_prefix"):
        RedisTier(backends.require_redis(), [Kind.PREFERENCE], prefix="a{b}")


# -- serving from Redis ------------------------------------------------------------------------------------

def test_preferences_are_served_from_redis_and_written_through(tiered):
    tier = _redis(tiered)
    store = tiered.store
    assert tiered.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed",
                        now=T0).op is Op.ADD
    tiered.write("acme", "u1", "fact", "occupation", "teacher", source="user_confirmed", now=T0)
    tiered.flush()  # the derived-attribute refresher reads (and fills) in the background: let it finish first
    assert {r.key for r in tiered.recall("acme", "u1", k=10, now=T0 + 1)} == {"reply_length", "occupation"}
    assert store.stats["fills"] == 1
    # The Redis hash is what answers: change it behind usermem's back and recall shows the change.
    field = tier.user_prefix("acme", "u1") + ":f:reply_length"
    assert tier.client.hget(field, "kind") == "preference"
    tiered.flush()  # background readers (the derived-attribute refresher) are done
    tier.client.hset(field, "value", '"tampered"')
    # A tamper behind usermem's back does not move Redis's version counter, so this process's decoded copy
    # (the near cache, valid while the counter is unchanged) is dropped by hand: what answers next is Redis.
    assert store.capabilities.drop_local is not None
    store.capabilities.drop_local("acme", "u1")
    assert [r.value for r in tiered.recall("acme", "u1", kinds=["preference"], now=T0 + 2)] == ["tampered"]
    # A write goes to the store of record and through to Redis.
    assert tiered.write("acme", "u1", "preference", "reply_length", "详细", source="user_confirmed",
                        now=T0 + 3).op is Op.UPDATE
    assert [r.value for r in tiered.recall("acme", "u1", kinds=["preference"], now=T0 + 4)] == ["详细"]
    assert store.stats["fills"] == 1 and store.stats["hits"] >= 2
    assert [v.value for v in tiered.history("acme", "u1", "reply_length")] == ["concise", "详细"]
    # Facts never touch Redis.
    assert not any(":f:occupation" in k for k in tier.keys_of("acme", "u1"))


def test_every_key_of_a_user_is_under_one_hash_tagged_prefix_with_ttls(tiered):
    tier = _redis(tiered)
    tiered.write("acme", "u|{1}", "preference", "likes", "咖啡", source="user_confirmed", now=T0)
    tiered.write("acme", "u|{1}", "context", "topic", "refund", session_id="s1", ttl_seconds=600, now=T0)
    tiered.write("acme", "u2", "preference", "likes", "tea", source="user_confirmed", now=T0)
    tiered.recall("acme", "u|{1}", k=10, now=T0 + 1, kinds=["preference"])
    keys = tier.keys_of("acme", "u|{1}")
    prefix = tier.user_prefix("acme", "u|{1}")
    assert prefix.count("{") == 1 and prefix.count("}") == 1  # exactly one hash tag despite the braces in the id
    assert keys and all(k.startswith(prefix + ":") for k in keys)
    assert {prefix + ":f:likes", prefix + ":f:topic", prefix + ":loaded", prefix + ":fields"} <= set(keys)
    assert not any("u2" in k for k in keys)
    assert 0 < tier.client.ttl(prefix + ":f:topic") <= 600 + tier.grace
    assert 0 < tier.client.ttl(prefix + ":f:likes") <= tier.cache_ttl
    assert tier.client.smembers(prefix + ":s:s1") == {"topic"}


def test_cache_is_rebuilt_from_the_store_of_record_when_redis_loses_it(tiered, tmp_path):
    for i, key in enumerate(["likes", "reply_length", "tone"]):
        tiered.write("acme", "u1", "preference", key, f"v{i}", source="user_confirmed", now=T0 + i)
    before = [(r.key, r.value) for r in tiered.recall("acme", "u1", k=10, now=T0 + 10)]
    assert backends.delete_prefix(backends.prefix_for(tmp_path)) > 0  # what a restart without persistence does
    assert [(r.key, r.value) for r in tiered.recall("acme", "u1", k=10, now=T0 + 10)] == before
    assert tiered.store.stats["fills"] == 2


def test_expiry_and_retraction_follow_the_callers_clock_not_redis(tiered):
    tiered.write("acme", "u1", "context", "topic", "refund", session_id="s1", ttl_seconds=60, now=T0)
    assert [r.key for r in tiered.recall("acme", "u1", now=T0 + 59, kinds=["context"])] == ["topic"]
    assert tiered.recall("acme", "u1", now=T0 + 61, kinds=["context"]) == []
    assert [r.key for r in tiered.recall("acme", "u1", now=T0 + 30, kinds=["context"])] == ["topic"]


def test_the_tiers_rank_order_is_reused_only_while_the_tier_serves_the_same_records(tiered):
    """The tiered store keeps the rank order of a user's tier records between recalls (it does not depend on
    `now`); a write, a touch or an expiry in between must still show at once."""
    def top(k: int, now: float) -> list[str]:
        return [r.key for r in tiered.recall("acme", "u1", k=k, kinds=["preference", "context"], now=now)]

    tiered.write("acme", "u1", "preference", "a", "x", importance=0.5, now=T0)
    tiered.write("acme", "u1", "preference", "b", "y", importance=0.9, now=T0)
    tiered.write("acme", "u1", "context", "topic", "refund", session_id="s1", ttl_seconds=60, importance=1.0,
                 now=T0)
    tiered.flush()
    assert top(3, T0 + 10) == top(3, T0 + 10) == ["topic", "b", "a"]  # the second answer from the kept order
    assert top(3, T0 + 61) == ["b", "a"]  # the same records, the context expired at this `now`
    assert top(3, T0 + 30) == ["topic", "b", "a"]
    tiered.write("acme", "u1", "preference", "c", "z", importance=1.0, now=T0 + 100)  # another instance's
    assert top(2, T0 + 101) == ["c", "b"]  # write would do the same: Redis's version moved
    # a use moves `a` ahead of `b` (importance × weight: 0.5 × 1 beats 0.9 × 0.5 after a half-life)
    half = 30 * 86400
    tiered.recall("acme", "u1", k=1, keys=["a"], mark_used=True, now=T0 + half)
    assert top(3, T0 + half + 1)[:2] == ["a", "c"]


def test_forget_user_erases_every_tier(tiered):
    tier = _redis(tiered)
    tiered.write("acme", "u1", "preference", "likes", "咖啡", source="user_confirmed", now=T0)
    tiered.write("acme", "u1", "context", "topic", "refund", session_id="s1", now=T0)
    tiered.write("acme", "u1", "fact", "occupation", "teacher", source="user_confirmed", now=T0)
    tiered.recall("acme", "u1", k=10, now=T0 + 1)
    assert len(tier.keys_of("acme", "u1")) >= 4
    tiered.forget("acme", "u1", "likes", now=T0 + 2)
    assert not any(k.endswith(":f:likes") for k in tier.keys_of("acme", "u1"))
    assert {r.key for r in tiered.recall("acme", "u1", k=10, now=T0 + 3)} == {"topic", "occupation"}
    assert tiered.forget_user("acme", "u1", now=T0 + 4) == 2
    prefix = tier.user_prefix("acme", "u1")
    assert tier.keys_of("acme", "u1") == [prefix + ":ver"]  # only the fence counter, no data, expiring
    assert 0 < tier.client.ttl(prefix + ":ver") <= 60
    assert tiered.recall("acme", "u1", k=10, now=T0 + 5) == []


def test_touch_updates_the_cached_copy(tiered):
    tiered.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
    tiered.recall("acme", "u1", now=T0 + 1, mark_used=True)
    cached = tiered.recall("acme", "u1", now=T0 + 2)[0]
    assert cached.last_used_at == T0 + 1
    assert tiered.store.record.get("acme", cached.id).last_used_at == T0 + 1


def test_a_fill_that_raced_with_a_write_is_dropped(tiered):
    tier = _redis(tiered)
    store = tiered.store
    tiered.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
    cached, token = tier.read("acme", "u1")
    assert cached is None
    from usermem.store.base import LiveQuery

    snapshot = store.record.live(LiveQuery("acme", "u1", T0))
    tiered.write("acme", "u1", "preference", "likes", "coffee", source="user_confirmed", now=T0 + 1)
    assert tier.fill("acme", "u1", snapshot, token) is False  # stale snapshot refused
    assert [r.value for r in tiered.recall("acme", "u1", now=T0 + 2)] == ["coffee"]


def test_concurrent_writers_and_readers_leave_the_cache_equal_to_the_store_of_record(tiered, tmp_path):
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(40):
                tiered.write("acme", "u1", "preference", ["likes", "tone", "reply_length"][i % 3], f"w{w}-{i}",
                             source="user_confirmed", now=T0 + i)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for i in range(60):
                tiered.recall("acme", "u1", k=10, now=T0 + i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)] + [threading.Thread(target=reader)
                                                                               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    plain = Memory(backends.postgres_url(tmp_path))
    want = sorted((r.key, r.value, r.id) for r in plain.recall("acme", "u1", k=10, now=T0 + 100))
    got = sorted((r.key, r.value, r.id) for r in tiered.recall("acme", "u1", k=10, now=T0 + 100))
    plain.close()
    assert got == want and len(got) == 3
    assert tiered.store.list_docs(DIRTY_TENANT, "tier_dirty:redis") == [], tiered.store.tier_status()


def test_in_process_session_tier_on_sqlite(tmp_path):
    settings = load_settings(env={}, store_url=f"sqlite:///{tmp_path}/s.db",
                             routes={"context": "session", "preference": "session"})
    m = Memory(settings=settings)
    assert isinstance(m.store, TieredStore) and isinstance(m.store.route[Kind.CONTEXT], SessionTier)
    m.write("acme", "u1", "context", "topic", "refund", session_id="s1", now=T0)
    m.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
    m.write("acme", "u1", "fact", "occupation", "teacher", source="user_confirmed", now=T0)
    assert {r.key for r in m.recall("acme", "u1", k=10, now=T0 + 1)} == {"topic", "likes", "occupation"}
    m.write("acme", "u1", "preference", "likes", "coffee", source="user_confirmed", now=T0 + 2)
    assert [r.value for r in m.recall("acme", "u1", kinds=["preference"], now=T0 + 3)] == ["coffee"]
    assert m.store.stats["hits"] >= 1
    assert m.forget_user("acme", "u1", now=T0 + 4) == 4
    assert m.recall("acme", "u1", k=10, now=T0 + 5) == []
    m.close()


def test_a_change_made_by_another_instance_is_seen_at_once(tiered, tmp_path):
    other = Memory(settings=backends.tiered_settings(tmp_path))
    try:
        tiered.write("acme", "u1", "preference", "likes", "tea", source="user_confirmed", now=T0)
        for _ in range(3):  # fill, then serve from the near cache
            assert [r.value for r in tiered.recall("acme", "u1", now=T0 + 1)] == ["tea"]
        assert other.write("acme", "u1", "preference", "likes", "coffee", source="user_confirmed",
                           now=T0 + 2).op is Op.UPDATE
        assert [r.value for r in tiered.recall("acme", "u1", now=T0 + 3)] == ["coffee"]
        other.forget("acme", "u1", "likes", now=T0 + 4)
        assert tiered.recall("acme", "u1", now=T0 + 5) == []
    finally:
        other.close()


def test_cli_storage_shows_routes_and_tier_health(tmp_path):
    from typer.testing import CliRunner

    from usermem.interfaces.cli import _register, app

    _register()
    env = {"USERMEM_PRESET": "tiered", "USERMEM_REDIS_URL": backends.require_redis(),
           "USERMEM_KEY_PREFIX": backends.prefix_for(tmp_path), "USERMEM_CONFIG": str(tmp_path / "none.toml")}
    try:
        r = CliRunner().invoke(app, ["storage", "--store", backends.postgres_url(tmp_path), "--reconcile"], env=env)
        assert r.exit_code == 0, r.output
        # Optional migrations (pgvector) stay pending on a server without the extension.
        import psycopg

        with psycopg.connect(backends.require_postgres()) as c:
            pgvector = c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is not None
        latest = max(m.version for m in load_migrations("postgres") if pgvector or not m.requires)
        assert f"schema version {latest}" in r.output and "reconciled 0 dirty users" in r.output
        assert "preference" in r.output and "redis" in r.output and "healthy" in r.output
    finally:
        backends.tiered_cleanup(tmp_path)


# -- property: whatever happens to Redis, the tiered preset answers like the store of record alone --------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KIND = {"likes": "preference", "tone": "preference", "topic": "context", "city": "fact"}
_OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["u1", "u2"]), st.sampled_from(sorted(_KIND)),
              st.sampled_from(["tea", "咖啡", "short", "long"]),
              st.sampled_from(["user_confirmed", "extracted", "agent_confirmed"])),
    st.tuples(st.just("forget"), st.sampled_from(["u1", "u2"]), st.sampled_from(sorted(_KIND))),
    st.tuples(st.just("forget_user"), st.sampled_from(["u1", "u2"])),
    st.tuples(st.just("recall_mark"), st.sampled_from(["u1", "u2"])),
    st.tuples(st.just("evict_field"), st.sampled_from(["u1", "u2"]), st.sampled_from(["likes", "tone", "topic"])),
    st.tuples(st.just("flush")),
)


@pytest.fixture
def pair(tmp_path):
    tiered = Memory(settings=backends.tiered_settings(tmp_path))
    plain = Memory(backends.postgres_url(tmp_path))  # the same schema, no tier
    yield tiered, plain
    tiered.close()
    plain.close()
    backends.tiered_cleanup(tmp_path)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OPS, min_size=1, max_size=25))
def test_tiered_answers_like_the_store_of_record_whatever_redis_does(pair, ops):
    import uuid

    tiered, plain = pair
    tier = _redis(tiered)
    tenant = "p-" + uuid.uuid4().hex[:8]
    now = T0
    for op in ops:
        now += 30
        if op[0] == "write":
            _, user, k, value, source = op
            tiered.write(tenant, user, _KIND[k], k, value, source=source, now=now,
                         session_id="s1" if _KIND[k] == "context" else None)
        elif op[0] == "forget":
            tiered.forget(tenant, op[1], op[2], now=now)
        elif op[0] == "forget_user":
            tiered.forget_user(tenant, op[1], now=now)
        elif op[0] == "recall_mark":
            tiered.recall(tenant, op[1], k=50, now=now, mark_used=True)
        elif op[0] == "evict_field":  # what maxmemory eviction or an expired hash does
            tier.client.delete(tier.user_prefix(tenant, op[1]) + f":f:{op[2]}")
        else:
            tier.drop_prefix()  # a restart without persistence
        for user in ("u1", "u2"):
            got, want = ([(r.key, r.value, r.id, r.last_used_at, r.source.value)
                          for r in m.recall(tenant, user, k=50, now=now)] for m in (tiered, plain))
            assert sorted(got) == sorted(want), op


def test_passwords_never_appear_in_configuration_errors(tmp_path):
    settings = load_settings(env={}, store_url=f"sqlite:///{tmp_path}/a.db", preset="tiered",
                             redis_url="redis://:s3cret-pw@127.0.0.1:1/0")
    with pytest.raises(ConfigError) as e:
        Memory(settings=settings)
    assert "s3cret-pw" not in str(e.value) and "***" in str(e.value)
    with pytest.raises(ConfigError) as e:
        Memory("postgresql://postgres:s3cret-pw@127.0.0.1:1/x")
    assert "s3cret-pw" not in str(e.value)


def test_a_write_through_that_loses_its_watch_still_drops_a_fill_from_before_the_commit(monkeypatch):
    """The write-through's WATCH fails (someone touched the user meanwhile): the cache is dropped — and a
    reader that refills it from a snapshot taken before the write commits must not keep that fill (it lacks
    the write: a lost value, seen as a rare flake of the tenant-isolation test on the tiered store)."""
    import redis as redis_lib

    from usermem.model import MemoryRecord, Source
    from usermem.store.redis import Change

    tier = RedisTier(backends.require_redis(), [Kind.PREFERENCE], prefix=f"umtest-watch-{threading.get_ident()}")

    def rec(key: str, value: str, rid: str) -> MemoryRecord:
        return MemoryRecord(id=rid, tenant="t", user_id="u", kind=Kind.PREFERENCE, key=key, value=value,
                            source=Source.USER_CONFIRMED, confidence=1.0, importance=0.5, created_at=1.0)

    try:
        old = rec("language", "zh", "m1")
        _, token = tier.read("t", "u")
        assert tier.fill("t", "u", [old], token)
        new = rec("reply_length", "简洁", "m2")

        def lose_the_watch(*args, **kw):
            raise redis_lib.WatchError("another client changed a watched key")

        with monkeypatch.context() as mp:
            mp.setattr(tier, "_put", lose_the_watch)  # runs inside MULTI: as if EXEC saw a watched key change
            applied = tier.apply("t", "u", Change(inserted=[new]))
        # before the commit: a reader misses and refills from the store of record's pre-commit snapshot
        cached, fill_token = tier.read("t", "u")
        assert cached is None
        assert tier.fill("t", "u", [old], fill_token)
        tier.committed("t", "u", applied)  # the write commits
        after, _ = tier.read("t", "u")
        assert after is None or any(r.key == "reply_length" for r in after)  # never the stale fill
    finally:
        tier.erase("t", "u", None)
        tier.close()
