"""Privacy benchmarks: forget_user latency (target ≤ 100 ms for 1,000 memories, promise p99 ≤ 800 ms),
purge, the cost of the L2/L3 gate and per-tenant contracts on recall, and PII detector throughput."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles, timed
from usermem.bench.core import synthetic_records
from usermem.config import load_settings
from usermem.engine.memory import Memory

T0 = 1_790_000_000.0
FORGET_TARGETS = [Target("forget_user.p50_ms", "<=", 100, "forget_user p50"),
                  Target("forget_user.p99_ms", "<=", 800, "forget_user p99 (the promise)")]


def _memory(path: Path) -> Memory:
    # No embedder: the benchmark measures erasure, not embedding; the lexical index (and its eraser) stays on.
    return Memory(settings=load_settings(env={}, store_url=f"sqlite:///{path}", embedder="none"))


@benchmark("privacy.forget_user", targets=FORGET_TARGETS)
def forget_user(ctx: BenchContext) -> dict[str, Any]:
    """forget_user for users holding `per_user` memories each, in a store shared with other users."""
    per_user = ctx.size(1000, 200)
    users = ctx.size(30, 5)
    bystanders = ctx.size(20, 3)
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        m = _memory(Path(tmp) / "forget.db")
        store: Any = m.store
        for u in range(users + bystanders):
            user = f"user-{u}"
            store.bulk_insert(synthetic_records("bench", user, per_user, T0, rng))
            m.grant("bench", user, "L2", "benchmark", now=T0)  # a document to erase as well
        samples = []
        for u in range(users):
            t = time.perf_counter()
            n = m.forget_user("bench", f"user-{u}", now=T0 + 10)
            samples.append(time.perf_counter() - t)
            assert n == per_user, n
        t = time.perf_counter()
        purged = m.purge(now=T0 + 20, retention_days=0)
        purge_s = time.perf_counter() - t
        m.close()
    stats = percentiles(samples)
    return {"memories_per_user": per_user, "users_erased": users, "rows_in_store": (users + bystanders) * per_user,
            "forget_user": stats, "purge_rows": purged, "purge_ms": round(purge_s * 1000, 1)}


@benchmark("privacy.recall_gate")
def recall_gate(ctx: BenchContext) -> dict[str, Any]:
    """Recall latency for a user whose memories are partly L2/L3: no grant vs an active grant (audited)."""
    repeat = ctx.size(300, 30)
    per_user = ctx.size(1000, 100)
    with tempfile.TemporaryDirectory() as tmp:
        m = _memory(Path(tmp) / "gate.db")
        store: Any = m.store
        store.bulk_insert(synthetic_records("bench", "u", per_user, T0, random.Random(3)))
        for key, value in (("phone", "13800138000"), ("address", "人民路 1 号"), ("allergy", "花生")):
            m.write("bench", "u", "fact", key, value, source="user_confirmed", now=T0)
        base = timed(lambda: m.recall("bench", "u", k=10, now=T0 + 1), repeat)
        m.disable_field("bench", "city", now=T0)  # a stored contract edit: the per-tenant set is read per call
        edited = timed(lambda: m.recall("bench", "u", k=10, now=T0 + 1), repeat)
        m.grant("bench", "u", "L3", "benchmark", ttl=3600, now=T0)
        granted = timed(lambda: m.recall("bench", "u", k=10, now=T0 + 2, keys=["phone", "address", "allergy"]),
                        repeat)
        m.close()
    return {"memories_per_user": per_user + 3, "recall_no_grant": percentiles(base), "recall_with_contract_edit": percentiles(edited),
            "recall_sensitive_with_grant_and_audit": percentiles(granted)}


@benchmark("privacy.pii_detect")
def pii_detect(ctx: BenchContext) -> dict[str, Any]:
    """Detector throughput on the generated evaluation corpus (needs Faker: the optional extra `eval`)."""
    from usermem.evals import MissingExtra
    from usermem.evals.pii import build_corpus
    from usermem.privacy import redact

    try:
        corpus = [s.text for s in build_corpus(pii=ctx.size(2000, 200), benign=ctx.size(2000, 200))]
    except MissingExtra as exc:  # Faker is the optional extra `eval`: say so, measure the rest
        return {"skipped": str(exc)}
    chars = sum(len(t) for t in corpus)
    t = time.perf_counter()
    for text in corpus:
        redact(text)
    elapsed = time.perf_counter() - t
    return {"sentences": len(corpus), "sentences_per_s": round(len(corpus) / elapsed),
            "mb_per_s": round(chars / elapsed / 1e6, 2), "us_per_sentence": round(elapsed / len(corpus) * 1e6, 1)}


@benchmark("privacy.forget_user_tiered", targets=FORGET_TARGETS,
           load_generator="in the benchmark process; PostgreSQL and Redis on the URLs given (default 127.0.0.1)")
def forget_user_tiered(ctx: BenchContext) -> dict[str, Any]:
    """forget_user on the tiered preset (PostgreSQL store of record + Redis tier with the user's cache filled).

    Uses USERMEM_BENCH_PG_URL (default postgresql://postgres@127.0.0.1:5432/postgres) and
    USERMEM_BENCH_REDIS_URL (default redis://127.0.0.1:6379/0); a throwaway schema and key prefix.
    """
    import os
    import uuid

    pg = os.environ.get("USERMEM_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    rd = os.environ.get("USERMEM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"bench_privacy_{tag}", f"benchpriv{tag}"
    try:
        import psycopg
        import redis

        with psycopg.connect(pg, connect_timeout=3) as c:
            c.execute("SELECT 1")
        redis.Redis.from_url(rd, socket_connect_timeout=2).ping()
    except Exception as exc:  # no server: report it, do not fail the other benchmarks
        return {"skipped": f"PostgreSQL or Redis not reachable: {type(exc).__name__}"}
    per_user, users = ctx.size(1000, 100), ctx.size(20, 3)
    settings = load_settings(env={}, store_url=f"{pg}?schema={schema}", redis_url=rd, preset="tiered",
                             key_prefix=prefix, embedder="none")
    m = Memory(settings=settings)
    rng = random.Random(5)
    try:
        store: Any = m.store
        for u in range(users):
            store.bulk_insert(synthetic_records("bench", f"user-{u}", per_user, T0, rng))
            m.recall("bench", f"user-{u}", k=10, now=T0 + 1)  # fill the Redis tier for this user
        samples = []
        for u in range(users):
            t = time.perf_counter()
            m.forget_user("bench", f"user-{u}", now=T0 + 10)
            samples.append(time.perf_counter() - t)
        client = redis.Redis.from_url(rd)
        left = sum(1 for k in client.scan_iter(match=f"{prefix}:*") if b":ver" not in k)
        client.close()
    finally:
        m.close()
        with psycopg.connect(pg, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        client = redis.Redis.from_url(rd)
        for k in client.scan_iter(match=f"{prefix}:*"):
            client.unlink(k)
        client.close()
    stats = percentiles(samples)
    return {"memories_per_user": per_user, "users_erased": users, "forget_user": stats,
            "redis_keys_left_besides_version_counters": left}
