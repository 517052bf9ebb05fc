"""Storage benchmarks: SQLite, PostgreSQL and the tiered preset (PostgreSQL + Redis), side by side.

For each backend: single-write and batched-write throughput; recall p50/p95 (k=5) for a user with
1,000 memories in a database of >= 1,000,000 rows (all kinds, and preferences only, the tier's
path); erasure latency (`forget_user`) for users with 1,000 memories each, every tier warmed first.

The PostgreSQL fixture lives in a dedicated database (``usermem_bench``, or USERMEM_BENCH_PG_URL),
never the test database, loaded with COPY and reused while it holds the rows; the SQLite fixture
is the core benchmark's file (data/bench). Relevance plug-ins are switched off: this measures storage.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles, timed
from usermem.bench.core import TARGET_USER, fixture_db, synthetic_records
from usermem.config import load_settings
from usermem.engine.memory import Memory

T0 = 1_790_000_000.0
PER_USER = 1000
BENCH_DB = "usermem_bench"
REDIS_PREFIX = "usermem-bench"
ERASE_TENANT = "bench-erase"


def _pg_base() -> str:
    return os.environ.get("USERMEM_BENCH_PG_URL", f"postgresql://postgres@127.0.0.1:5432/{BENCH_DB}")


def _redis_url() -> str:
    return os.environ.get("USERMEM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def _ensure_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    from usermem.store.postgres import split_url

    conninfo, _ = split_url(url)
    name = psycopg.conninfo.conninfo_to_dict(conninfo).get("dbname")
    admin = psycopg.conninfo.make_conninfo(conninfo, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))


def _settings(store_url: str, **kw: Any) -> Any:
    return load_settings(env={}, store_url=store_url, embedder="none", hybrid_lexical_weight=0.0, **kw)


def pg_fixture(ctx: BenchContext, total_rows: int) -> str:
    """The bench database's URL (a schema per size), holding `total_rows` rows of tenant 'bench' (COPY)."""
    from usermem.store.postgres import PostgresStore

    url = f"{_pg_base()}?schema=bench_{total_rows}"
    _ensure_database(url)
    store = PostgresStore(url)
    try:
        if store.count("bench") >= total_rows:
            return url
        with store.sql("bench", write=True) as c:
            c.execute("DELETE FROM memories WHERE tenant=%s", ("bench",))
        rng = random.Random(7)
        users = total_rows // PER_USER
        progress = ctx.progress
        task = progress.add_task(f"COPY {total_rows:,}-row PostgreSQL fixture", total=users) if progress else None
        batch: list[Any] = []
        for u in range(users):
            batch.extend(synthetic_records("bench", TARGET_USER if u == 0 else f"user-{u:07d}", PER_USER, T0, rng))
            if len(batch) >= 50_000 or u == users - 1:
                store.bulk_insert(batch)  # one COPY per 50 users
                batch = []
            if progress:
                progress.advance(task)
        store.vacuum(full=False)  # visibility map + statistics, so the scoring index is index-only
    finally:
        store.close()
    return url


def _erase_users(m: Memory, n: int, per_user: int) -> list[str]:
    """Fresh users of the erase tenant with `per_user` memories each (previous runs' rows removed)."""
    store = m.store
    if store.capabilities.dialect == "postgres":  # the fixture database outlives runs (SQLite: a fresh file)
        with store.sql(ERASE_TENANT, write=True) as c:  # on the tiered preset: the store of record
            c.execute("DELETE FROM memories WHERE tenant=%s", (ERASE_TENANT,))
    users = [f"erase-{i:04d}" for i in range(n)]
    rng = random.Random(11)
    for user in users:
        store.bulk_insert(synthetic_records(ERASE_TENANT, user, per_user, T0, rng))
    return users


def _measure(m: Memory, ctx: BenchContext) -> dict[str, Any]:
    out = _measure_writes(m, ctx)
    out.update(_measure_recall(m, ctx))
    return out


def _measure_writes(m: Memory, ctx: BenchContext) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = ctx.size(2000, 200)
    tenant = f"bench-w-{time.time_ns()}"
    t = time.perf_counter()
    for i in range(n):
        kind = "preference" if i % 2 else "fact"
        m.write(tenant, f"u{i % 50}", kind, f"k{i % 40}", f"value {i}", source="user_confirmed", now=T0 + i)
    single = time.perf_counter() - t
    batch = 100
    t = time.perf_counter()
    for b in range(0, n, batch):
        m.write_many(tenant, "batch-user", [{"kind": "preference" if j % 2 else "fact", "key": f"b{(b + j) % 300}",
                                             "value": f"v{b + j}", "source": "user_confirmed"}
                                            for j in range(batch)], now=T0 + n + b)
    batched = time.perf_counter() - t
    out["single_writes_per_s"] = round(n / single, 1)
    out["batched_writes_per_s"] = round(n / batched, 1)
    return out


def _measure_recall(m: Memory, ctx: BenchContext) -> dict[str, Any]:
    """Recall of a user with 1,000 memories among >= 1M rows: all kinds, and preferences only."""
    now = T0 + 86400
    out: dict[str, Any] = {}
    repeat = ctx.size(500, 60)
    for _ in range(20):
        m.recall("bench", TARGET_USER, k=5, now=now)
        m.recall("bench", TARGET_USER, k=5, now=now, kinds=["preference"])
    out["recall_k5"] = percentiles(timed(lambda: m.recall("bench", TARGET_USER, k=5, now=now), repeat))
    out["recall_k5_preferences"] = percentiles(
        timed(lambda: m.recall("bench", TARGET_USER, k=5, now=now, kinds=["preference"]), repeat))
    return out


def _commit_cost(url: str) -> dict[str, float]:
    """Milliseconds per single-row autocommit INSERT with synchronous_commit on and off: the WAL flush
    each durable commit waits for (SQLite in WAL mode with synchronous=NORMAL does not wait for one)."""
    import psycopg

    from usermem.store.postgres import split_url

    conninfo, _ = split_url(url)
    out = {}
    table = f"usermem_commit_probe_{os.getpid()}"  # a logged table: temporary ones skip the WAL
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (a int)")
        try:
            for mode in ("on", "off"):
                c.execute(f"SET synchronous_commit = {mode}")
                t = time.perf_counter()
                for i in range(200):
                    c.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
                out[f"synchronous_commit_{mode}"] = round((time.perf_counter() - t) / 200 * 1000, 3)
        finally:
            c.execute(f"DROP TABLE {table}")
    return out


def _measure_erasure(m: Memory, users: list[str]) -> dict[str, Any]:
    """forget_user latency; each user's tiers are warmed by a recall first, and checked empty after."""
    now = T0 + 86400
    samples = []
    rows = 0
    for user in users:
        m.recall(ERASE_TENANT, user, k=5, now=now)
        t = time.perf_counter()
        rows = m.forget_user(ERASE_TENANT, user, now=now)
        samples.append(time.perf_counter() - t)
        if m.recall(ERASE_TENANT, user, k=5, now=now):
            raise AssertionError(f"{user} still readable after forget_user")
    return {"forget_user": percentiles(samples), "forget_user_rows": rows}


@benchmark("storage", targets=[
    Target(f"{backend}.{metric}", "<=", limit, f"{backend}: {label}")
    for backend in ("sqlite", "postgres", "tiered")
    for metric, limit, label in (("recall_k5.p95_ms", 10.0, "recall k=5 p95 in a large store"),
                                 ("forget_user.p99_ms", 200.0, "forget_user p99"))],
    load_generator="in the benchmark process; PostgreSQL and Redis on 127.0.0.1 (the same machine)")
def bench_storage(ctx: BenchContext) -> dict[str, Any]:
    total = ctx.size(1_000_000, 20_000)
    n_erase = ctx.size(30, 5)
    erase_per_user = ctx.size(PER_USER, 200)
    results: dict[str, Any] = {"rows_in_database": total, "memories_of_user": PER_USER,
                               "erase_users": n_erase, "erase_memories_per_user": erase_per_user}
    # SQLite: the core fixture (>= 1M rows) for recall; erasure users in a separate file.
    path = fixture_db(ctx, total, PER_USER)
    m = Memory(settings=_settings(f"sqlite:///{path}"))
    with tempfile.TemporaryDirectory() as d:
        e = Memory(settings=_settings(f"sqlite:///{d}/erase.db"))
        sqlite = _measure(m, ctx)
        sqlite.update(_measure_erasure(e, _erase_users(e, n_erase, erase_per_user)))
        e.close()
    m.close()
    results["sqlite"] = sqlite
    # PostgreSQL and the tiered preset share the fixture database.
    try:
        url = pg_fixture(ctx, total)
    except Exception as exc:  # report, keep SQLite's numbers
        results["postgres"] = results["tiered"] = {"error": f"PostgreSQL unavailable: {exc}"}
        return results
    results["postgres_commit_ms"] = _commit_cost(url)
    m = Memory(settings=_settings(url))
    results["postgres"] = _measure(m, ctx)
    results["postgres"].update(_measure_erasure(m, _erase_users(m, n_erase, erase_per_user)))
    m.close()
    # Same writes without waiting for the WAL flush (a server crash may lose the last acknowledged writes).
    m = Memory(settings=_settings(url + "&options=-c%20synchronous_commit%3Doff"))
    results["postgres_synchronous_commit_off"] = _measure_writes(m, ctx)
    m.close()
    try:
        from usermem.store.redis import RedisTier

        RedisTier(_redis_url(), [], prefix=REDIS_PREFIX).drop_prefix()
        m = Memory(settings=_settings(url, preset="tiered", redis_url=_redis_url(), key_prefix=REDIS_PREFIX))
    except Exception as exc:
        results["tiered"] = {"error": f"Redis unavailable: {exc}"}
        return results
    results["tiered"] = _measure(m, ctx)
    results["tiered"].update(_measure_erasure(m, _erase_users(m, n_erase, erase_per_user)))
    results["tiered"]["tier_stats"] = dict(m.store.stats)  # type: ignore[attr-defined]
    m.close()
    ctx.notes.append("storage: recall among >=1M rows, k=5; erasure = forget_user of a user with "
                     f"{erase_per_user} memories, tiers warmed first; relevance plug-ins off. PostgreSQL "
                     "commits are durable (synchronous_commit=on, one WAL flush per write, see "
                     "postgres_commit_ms); add ?options=-c%20synchronous_commit%3Doff to the URL to trade "
                     "the last moments of acknowledged writes on a server crash for throughput.")
    return results

