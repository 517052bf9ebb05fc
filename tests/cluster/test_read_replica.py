"""The PostgreSQL store with `read_replica=host:port` on a real primary + streaming replica (usermem.bench.cluster).

Reads go to the replica only when it has replayed what the primary had committed when the read began, so
a user reads their own writes through any instance; lag-tolerant reads (users, count) go there anyway; a
replica that does not answer sends reads back to the primary; replay paused = every fenced read from the
primary, still correct.
"""

from __future__ import annotations

import psycopg
import pytest

from usermem.bench.cluster import PgPair, free_ports, wait_until
from usermem.errors import ConfigError
from usermem.store.base import read_scope
from usermem.store.postgres import PostgresStore, parse_lsn, replica_conninfo

pytestmark = [pytest.mark.postgres, pytest.mark.cluster]
T0 = 1_790_000_000.0


def _memory(url: str):  # type: ignore[no-untyped-def]
    from usermem import Memory
    from usermem.config import load_settings

    return Memory(url, settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))


def _replica_caught_up(pg_pair: PgPair) -> None:
    """Wait until the replica has replayed everything the primary has now (before pausing its replay)."""
    with psycopg.connect(pg_pair.url(), autocommit=True) as primary:
        row = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = parse_lsn(str(row[0]))

    def replayed() -> bool:
        with psycopg.connect(pg_pair.replica_url, autocommit=True) as replica:
            got = replica.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
        return got is not None and got[0] is not None and parse_lsn(str(got[0])) >= target

    wait_until("the replica replayed the primary's WAL", replayed, 30, interval=0.05)


def test_lsn_and_option_parsing() -> None:
    assert parse_lsn("0/0") == 0 and parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("1/0") > parse_lsn("0/FFFFFFFF")
    info = replica_conninfo("postgresql://postgres@127.0.0.1:5432/db?sslmode=disable", "10.0.0.2:6543")
    assert "host=10.0.0.2" in info and "port=6543" in info and "dbname=db" in info and "sslmode=disable" in info
    for bad in ("nohost", "h:0", "h:99999", "h:p", "a b:1"):
        with pytest.raises(ConfigError, match="read_replica"):
            replica_conninfo("postgresql://postgres@127.0.0.1/db", bad)


def test_reads_use_the_replica_and_every_instance_reads_its_own_writes(pg_pair: PgPair) -> None:
    url = pg_pair.url(read_replica=f"127.0.0.1:{pg_pair.replica_port}", schema="ryw")
    a, b = _memory(url), _memory(url)  # two instances behind a load balancer
    try:
        for i in range(40):  # written through one instance, read at once through the other
            writer, reader = (a, b) if i % 2 else (b, a)
            writer.write("acme", f"u{i % 4}", "fact", f"k{i}", f"v{i}", source="user_confirmed", now=T0 + i)
            got = {r.key: r.value for r in reader.recall("acme", f"u{i % 4}", k=100, now=T0 + i)}
            assert got.get(f"k{i}") == f"v{i}", i
            assert [r.value for r in reader.history("acme", f"u{i % 4}", f"k{i}")] == [f"v{i}"]
        stats = [m.store.replica_stats for m in (a, b)]  # type: ignore[attr-defined]
        assert sum(s["replica_reads"] for s in stats) > 0  # the replica served reads
        assert sum(s["replica_errors"] for s in stats) == 0
        # Lag-tolerant reads go to the replica without asking the primary.
        before = a.store.replica_stats["replica_reads"]  # type: ignore[attr-defined]
        assert a.store.count("acme") == 40 and sorted(a.store.users("acme")) == ["u0", "u1", "u2", "u3"]
        assert a.store.replica_stats["replica_reads"] == before + 2  # type: ignore[attr-defined]
    finally:
        a.close()
        b.close()


def test_a_replica_behind_sends_reads_to_the_primary(pg_pair: PgPair) -> None:
    url = pg_pair.url(read_replica=f"127.0.0.1:{pg_pair.replica_port}", schema="behind")
    m = _memory(url)
    with psycopg.connect(pg_pair.replica_url, autocommit=True) as replica:
        try:
            m.write("acme", "u", "fact", "city", "Hangzhou", source="user_confirmed", now=T0)
            m.recall("acme", "u", k=5, now=T0)
            _replica_caught_up(pg_pair)  # the schema and the first value are on the replica before it pauses
            replica.execute("SELECT pg_wal_replay_pause()")
            m.write("acme", "u", "fact", "city", "Shanghai", source="user_confirmed", now=T0 + 1)
            behind = m.store.replica_stats["behind"]  # type: ignore[attr-defined]
            assert [r.value for r in m.recall("acme", "u", k=5, now=T0 + 2)] == ["Shanghai"]
            assert m.store.replica_stats["behind"] > behind  # type: ignore[attr-defined]
            # The replica itself still has the old value: the read really did not come from there.
            rows = replica.execute("SELECT value #>> '{}' FROM behind.memories WHERE key='city'"
                                   " AND superseded_by IS NULL").fetchall()
            assert rows == [("Hangzhou",)]
        finally:
            replica.execute("SELECT pg_wal_replay_resume()")
            m.close()


def test_a_replica_that_does_not_answer_falls_back_to_the_primary(pg_pair: PgPair) -> None:
    nobody = free_ports(59_100, 1)[0]
    store = PostgresStore(pg_pair.url(read_replica=f"127.0.0.1:{nobody}", schema="noreplica"), connect_timeout=1)
    m = _memory(pg_pair.url(schema="noreplica"))
    try:
        m.write("acme", "u", "fact", "city", "Hangzhou", source="user_confirmed", now=T0)
        assert store.count("acme") == 1 and store.users("acme") == ["u"]
        assert store.replica_stats["replica_errors"] == 1  # then skipped for a while, not retried per read
        assert store.replica_stats["primary_reads"] == 2 and store.replica_stats["replica_reads"] == 0
    finally:
        store.close()
        m.close()


def test_a_read_scope_asks_the_primary_once_and_again_after_its_own_write(pg_pair: PgPair) -> None:
    url = pg_pair.url(read_replica=f"127.0.0.1:{pg_pair.replica_port}", schema="scope")
    a, b = _memory(url), _memory(url)
    stats = a.store.replica_stats  # type: ignore[attr-defined]
    try:
        b.write("acme", "u", "fact", "city", "Hangzhou", source="user_confirmed", now=T0)
        a.flush()  # a's own background readers (derived attributes, ...) count on its store too: let them settle
        with read_scope():  # begins after b's acknowledged write: sees it, with one WAL position for all reads
            fences, reads = stats["fences"], stats["replica_reads"] + stats["primary_reads"]
            for _ in range(3):
                assert [r.value for r in a.recall("acme", "u", k=5, now=T0 + 1)] == ["Hangzhou"]
            assert a.history("acme", "u", "city")[0].value == "Hangzhou"
            assert stats["fences"] == fences + 1 and stats["replica_reads"] + stats["primary_reads"] >= reads + 4
            a.write("acme", "u", "fact", "city", "Shanghai", source="user_confirmed", now=T0 + 2)
            a.flush()  # the write's background readers open read scopes of their own: not this one's fences
            assert [r.value for r in a.recall("acme", "u", k=5, now=T0 + 3)] == ["Shanghai"]  # its own write
            assert stats["fences"] >= fences + 2  # asked again after the write (reads inside the write may too)
            after = stats["fences"]
            a.recall("acme", "u", k=5, now=T0 + 3)
            assert stats["fences"] == after
        a.recall("acme", "u", k=5, now=T0 + 4)  # outside a scope: every read asks
        assert stats["fences"] >= after + 2
    finally:
        a.close()
        b.close()


def test_each_http_request_is_one_read_scope(pg_pair: PgPair) -> None:
    import apihelp

    url = pg_pair.url(read_replica=f"127.0.0.1:{pg_pair.replica_port}", schema="httpscope")
    api = apihelp.make_api(_memory(url))
    stats = api.memory.store.replica_stats  # type: ignore[attr-defined]
    try:
        r = api.http.post("/v1/memories", headers=api.h(api.key_a), json={
            "user_id": "u", "kind": "fact", "key": "city", "value": "Hangzhou", "source": "user_confirmed"})
        assert r.status_code == 200, r.text
        # the write's background readers (vector indexer, derived attributes) open read scopes of their own:
        # let them finish so the counters below see this one request only
        api.memory.flush()
        fences, reads = stats["fences"], stats["replica_reads"]
        got = api.http.get("/v1/users/u/memories", headers=api.h(api.key_a), params={"k": 5})
        assert got.status_code == 200 and got.json()["items"][0]["memory"]["value"] == "Hangzhou"
        assert stats["fences"] == fences + 1 and stats["replica_reads"] >= reads + 2, stats
    finally:
        api.memory.close()


@pytest.mark.redis
def test_a_tier_filled_inside_a_read_scope_misses_no_write_committed_before_the_fill(pg_pair: PgPair) -> None:
    """Seen in the cluster load test: a request's first read fixed its replica fence; another instance's
    write then committed (its tier apply found the user not loaded); this request's tier miss loaded the user
    from the replica under the old fence — without that write — and the fill passed its token check, so Redis
    served the user without the write until the next change. The fill's load now asks for a fresh fence."""
    import threading
    import uuid

    from usermem import Memory
    from usermem.config import load_settings

    url = pg_pair.url(read_replica=f"127.0.0.1:{pg_pair.replica_port}", schema="tierfill")
    prefix = f"umtest-{uuid.uuid4().hex[:8]}"

    def tiered() -> Memory:
        return Memory(url, settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0,
                                                  preset="tiered", redis_url="redis://127.0.0.1:6379/0",
                                                  key_prefix=prefix))

    a, b = tiered(), tiered()  # two instances
    with psycopg.connect(pg_pair.replica_url, autocommit=True) as replica:
        try:
            b.write("acme", "u", "fact", "job", "nurse", source="user_confirmed", now=T0)
            a.flush()
            b.flush()
            _replica_caught_up(pg_pair)  # the scope's first read is then served by the replica, at its fence
            with read_scope():
                assert [r.value for r in a.recall("acme", "u", k=5, kinds=["fact"], now=T0 + 1,
                                                 mark_used=False)] == ["nurse"]  # no write: the fence stays
                replica.execute("SELECT pg_wal_replay_pause()")  # the replica stays at the scope's fence
                other = threading.Thread(target=lambda: b.write(  # another instance: not in this read scope
                    "acme", "u", "preference", "drink", "oolong", source="user_confirmed", now=T0 + 2))
                other.start()
                other.join()
                got = a.recall("acme", "u", k=5, kinds=["preference"], now=T0 + 3)
                assert [r.value for r in got] == ["oolong"]
            replica.execute("SELECT pg_wal_replay_resume()")
            # And the tier holds it: a later read, served from Redis, still sees the write.
            hits = a.store.stats["hits"]  # type: ignore[attr-defined]
            assert [r.value for r in a.recall("acme", "u", k=5, kinds=["preference"], now=T0 + 4)] == ["oolong"]
            assert a.store.stats["hits"] > hits  # type: ignore[attr-defined]
        finally:
            replica.execute("SELECT pg_wal_replay_resume()")
            a.forget_user("acme", "u")  # the Redis keys too
            a.close()
            b.close()
