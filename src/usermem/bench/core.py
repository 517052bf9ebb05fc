"""Foundation benchmarks: write throughput and recall latency on the embedded SQLite store.

Baselines run in the same process so ratios survive a noisy shared machine:
- writes: the full pipeline vs. a bare parameterised INSERT into the same schema;
- recall: a user with 1,000 memories in a database of ≥1,000,000 rows vs. the same user alone.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles, timed, timed_cpu
from usermem.engine.context import new_id
from usermem.engine.memory import Memory
from usermem.model import KIND_REGISTRY, Kind, MemoryRecord, Source
from usermem.store.sqlite import SQLiteStore

T0 = 1_790_000_000.0
KINDS = [Kind.FACT, Kind.PREFERENCE, Kind.SITUATION, Kind.EPISODE]
TARGET_USER = "bench-target"


def synthetic_records(tenant: str, user_id: str, n: int, now: float, rng: random.Random) -> list[MemoryRecord]:
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        created = now - rng.uniform(0, 20 * 86400)
        ttl = KIND_REGISTRY[kind].ttl_seconds
        out.append(MemoryRecord(
            id=new_id(), tenant=tenant, user_id=user_id, kind=kind, key=f"field_{i}",
            value=f"用户偏好 value {i} " + "x" * rng.randint(5, 60), source=Source.EXTRACTED, confidence=1.0,
            importance=round(rng.uniform(0.2, 1.0), 3), created_at=created,
            expires_at=created + ttl if ttl else None))
    return out


def fixture_db(ctx: BenchContext, total_rows: int, per_user: int) -> Path:
    """A SQLite file with `total_rows` current memories, reused between runs when already built."""
    cache = Path(os.environ.get("USERMEM_BENCH_CACHE", "data/bench"))
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"core-{total_rows}.db"
    if path.exists():
        store = SQLiteStore(str(path))
        if store.count() >= total_rows:
            store.close()
            return path
        store.close()
        path.unlink()
    store = SQLiteStore(str(path))
    rng = random.Random(7)
    users = total_rows // per_user
    progress = ctx.progress
    task = progress.add_task(f"building {total_rows:,}-row fixture", total=users) if progress else None
    for u in range(users):
        user = TARGET_USER if u == 0 else f"user-{u:07d}"
        store.bulk_insert(synthetic_records("bench", user, per_user, T0, rng))
        if progress:
            progress.advance(task)
    store.analyze()
    store.close()
    return path


@benchmark("sqlite_writes", targets=[Target("single_writes_per_s", ">=", 2000, "single writes per second")])
def bench_writes(ctx: BenchContext) -> dict[str, Any]:
    n = ctx.size(5000, 300)
    with tempfile.TemporaryDirectory() as d:
        m = Memory(f"sqlite:///{d}/w.db")
        keys = [f"k{i % 200}" for i in range(n)]
        t = time.perf_counter()
        for i, key in enumerate(keys):
            m.write("bench", f"u{i % 50}", "preference", key, f"value {i}", now=T0 + i)
        single = time.perf_counter() - t
        batch_size = 100
        t = time.perf_counter()
        for b in range(0, n, batch_size):
            m.write_many("bench", "batch-user", [
                {"kind": "fact", "key": f"b{(b + j) % 300}", "value": f"v{b + j}"} for j in range(batch_size)],
                now=T0 + n + b)
        batched = time.perf_counter() - t
        m.close()
        # Baseline: a bare INSERT per row, autocommit, same pragmas, no pipeline.
        raw = sqlite3.connect(f"{d}/raw.db", isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=NORMAL")
        raw.execute("CREATE TABLE t (id TEXT PRIMARY KEY, tenant TEXT, user_id TEXT, key TEXT, value TEXT, at REAL)")
        t = time.perf_counter()
        for i, key in enumerate(keys):
            raw.execute("INSERT INTO t VALUES (?,?,?,?,?,?)", (new_id(), "bench", f"u{i % 50}", key, f"v{i}", T0))
        baseline = time.perf_counter() - t
        raw.close()
    return {
        "writes": n,
        "single_writes_per_s": round(n / single, 1),
        "batched_writes_per_s": round(n / batched, 1),
        "bare_insert_per_s": round(n / baseline, 1),
        "pipeline_cost_vs_bare_insert": round(single / baseline, 2),
        "memories_per_user": len({i % 200 for i in range(0, n, 50)}),  # the single writes: 50 users, 200 keys
    }


@benchmark("sqlite_recall", targets=[Target("recall_k5.p95_ms", "<=", 1.0,
                                            "recall k=5 p95, 1,000 memories/user in a 1M-row file",
                                            beside="recall_k5_cpu.p95_ms")])
def bench_recall(ctx: BenchContext) -> dict[str, Any]:
    per_user = 1000
    total = ctx.size(1_000_000, 20_000)
    path = fixture_db(ctx, total, per_user)
    big = Memory(f"sqlite:///{path}")
    now = T0 + 86400
    repeat = ctx.size(1000, 100)
    for _ in range(20):  # warm the page cache
        big.recall("bench", TARGET_USER, k=5, now=now)
    large, large_cpu = timed_cpu(lambda: big.recall("bench", TARGET_USER, k=5, now=now), repeat)
    marked = timed(lambda: big.recall("bench", TARGET_USER, k=5, now=now, mark_used=True), ctx.size(300, 50))
    rows = big.store.count()
    big.close()
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    with tempfile.TemporaryDirectory() as d:
        small = Memory(f"sqlite:///{d}/small.db")
        small.store.bulk_insert(synthetic_records("bench", TARGET_USER, per_user, T0, random.Random(7)))
        for _ in range(20):
            small.recall("bench", TARGET_USER, k=5, now=now)
        alone = timed(lambda: small.recall("bench", TARGET_USER, k=5, now=now), repeat)
        small.close()
    lp, ap = percentiles(large), percentiles(alone)
    return {
        "rows_in_database": rows,
        "memories_of_user": per_user,
        "recall_k5": lp,
        "recall_k5_cpu": percentiles(large_cpu),  # CPU time of the calling thread (the machine is shared)
        "recall_k5_mark_used": percentiles(marked),
        "baseline_same_user_alone": ap,
        "p50_ratio_vs_alone": round(lp["p50_ms"] / ap["p50_ms"], 2),
        "db_file_mb": round(size / 1e6, 1),
        "db_mb_per_million_memories": round(size / 1e6 / (rows / 1e6), 1) if rows else None,
    }
