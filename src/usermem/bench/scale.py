"""Cost curves (issue 19): recall and write latency for a user holding 100 / 1,000 / 10,000 memories.

Recall k=5 through the rank index (the default read path) beside the full scan it replaced (every live
row of the user scored in Python, `RecallPipeline.use_index = False`), on the embedded SQLite store, in
the benchmark process. Writes: one new key for that user (embeddings off: the vector index is measured
by the relevance and write-throughput benchmarks).
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles, timed
from usermem.bench.core import T0, synthetic_records
from usermem.config import load_settings
from usermem.engine.compose import compose
from usermem.engine.memory import Memory

SIZES = (100, 1_000, 10_000)
USER = "bench-scale"


@benchmark("recall_scale", targets=[
    Target("n1000.recall_k5.p95_ms", "<=", 1.0, "recall k=5 p95, 1,000 memories/user (index)"),
    Target("n10000.recall_k5.p95_ms", "<=", 1.5, "recall k=5 p95, 10,000 memories/user (index)"),
])
def bench_recall_scale(ctx: BenchContext) -> dict[str, Any]:
    out: dict[str, Any] = {"memories_per_user": list(SIZES)}
    with tempfile.TemporaryDirectory() as d:
        for n in SIZES:
            out[f"n{n}"] = _one_size(ctx, f"sqlite:///{d}/scale-{n}.db", n)
    lo, hi = out[f"n{SIZES[0]}"]["recall_k5"]["p95_ms"], out[f"n{SIZES[-1]}"]["recall_k5"]["p95_ms"]
    out["recall_p95_ratio_10k_vs_100"] = round(hi / lo, 2) if lo else None
    return out


def _one_size(ctx: BenchContext, url: str, n: int) -> dict[str, Any]:
    repeat = ctx.size(500, 60)
    now = T0 + 86_400
    settings = load_settings(env={}, store_url=url, embedder="none", hybrid_lexical_weight=0.0)
    m = Memory(settings=settings)
    m.store.bulk_insert(synthetic_records("bench", USER, n, T0, random.Random(n)))
    m.store.analyze()
    for _ in range(20):
        m.recall("bench", USER, k=5, now=now)
    indexed = timed(lambda: m.recall("bench", USER, k=5, now=now), repeat)
    reference = compose(settings)  # the same file, read by scoring every row
    reference.recall.use_index = False
    for _ in range(5):
        reference.recall.recall("bench", USER, 5, now=now)
    scan = timed(lambda: reference.recall.recall("bench", USER, 5, now=now), max(20, repeat // (1 + n // 1000)))
    reference.close()
    counter = iter(range(1, 1 << 30))

    def write() -> None:
        i = next(counter)
        m.write("bench", USER, "preference", f"new_{i}", f"value {i}", now=now + i)

    writes = timed(write, ctx.size(300, 40))
    m.close()
    return {"recall_k5": percentiles(indexed), "recall_k5_full_scan": percentiles(scan), "write": percentiles(writes)}
