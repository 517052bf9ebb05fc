"""Cost curves (issue 19): recall and write latency for a user holding 100 / 1,000 / 10,000 memories.

Recall k=5 through the rank index (the default read path) beside the full scan it replaced (every live
row of the user scored in Python, `RecallPipeline.use_index = False`), on the embedded SQLite store, in
the benchmark process. Writes: one new key for that user (embeddings off: the vector index is measured
by the relevance and write-throughput benchmarks). Each latency has its wall time and the CPU time of
the calling thread (`*_cpu`): on the shared machine the first says what a caller waited, the second
what a call costs. DB size: the file (and its WAL) after the fixture, per memory and scaled to 1M.
The curves are drawn in `<out>/cost-curves.png` (log-log).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles, timed, timed_cpu
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
    plot = plot_cost_curves(out, ctx.out_dir / "cost-curves.png")
    if plot is not None:
        out["plot"] = str(plot)
    return out


def plot_cost_curves(out: dict[str, Any], path: Path) -> Path | None:
    """recall k=5 (index, full scan) and write latency, p50 and p95, against memories per user (log-log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sizes = [n for n in SIZES if f"n{n}" in out]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for series, colour in (("recall_k5", "#1b9e77"), ("recall_k5_full_scan", "#7570b3"), ("write", "#d95f02")):
        for pct, style in (("p50_ms", "-o"), ("p95_ms", "--^")):
            ax.plot(sizes, [out[f"n{n}"][series][pct] for n in sizes], style, color=colour,
                    label=f"{series} {pct[:3]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("memories per user (SQLite, in-process)")
    ax.set_ylabel("milliseconds (wall)")
    ax.legend(fontsize=7)
    ax.set_title("recall and write latency")
    bx.plot(sizes, [out[f"n{n}"]["db_mb_per_million_memories"] for n in sizes], "-o", color="#e7298a")
    bx.set_xscale("log")
    bx.set_xlabel("memories per user")
    bx.set_ylabel("MB per 1M memories")
    bx.set_title("database size")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _one_size(ctx: BenchContext, url: str, n: int) -> dict[str, Any]:
    repeat = ctx.size(500, 60)
    now = T0 + 86_400
    settings = load_settings(env={}, store_url=url, embedder="none", hybrid_lexical_weight=0.0)
    m = Memory(settings=settings)
    m.store.bulk_insert(synthetic_records("bench", USER, n, T0, random.Random(n)))
    m.store.analyze()
    for _ in range(20):
        m.recall("bench", USER, k=5, now=now)
    with m.store.sql() as c:  # fold the WAL into the file: the size of the data, not of a log
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = sum(p.stat().st_size for p in (Path(url[len("sqlite:///"):]), Path(url[len("sqlite:///"):] + "-wal"))
               if p.exists())
    indexed, indexed_cpu = timed_cpu(lambda: m.recall("bench", USER, k=5, now=now), repeat)
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

    writes, writes_cpu = timed_cpu(write, ctx.size(300, 40))
    m.close()
    return {"memories_per_user": n, "recall_k5": percentiles(indexed), "recall_k5_cpu": percentiles(indexed_cpu),
            "recall_k5_full_scan": percentiles(scan), "write": percentiles(writes),
            "write_cpu": percentiles(writes_cpu), "db_bytes": size,
            "db_mb_per_million_memories": round(size / n, 1)}  # bytes per memory = MB per 1M memories
