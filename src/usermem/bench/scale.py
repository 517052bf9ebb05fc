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
    Target("n1000.recall_k5.p95_ms", "<=", 1.0, "recall k=5 p95, 1,000 memories/user (index)",
           beside="n1000.recall_k5_cpu.p95_ms"),
    Target("n10000.recall_k5.p95_ms", "<=", 1.5, "recall k=5 p95, 10,000 memories/user (index)",
           beside="n10000.recall_k5_cpu.p95_ms"),
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


class _RepeatedQueries:
    """The default embedder with a per-text cache of query vectors: after one pass over the queries every
    recall(query=...) costs its work beyond the one query embedding (what the semantic target bounds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cache: dict[str, Any] = {}

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def query(self, text: str) -> Any:
        if text not in self.cache:
            self.cache[text] = self.inner.query(text)
        return self.cache[text]

    def passages(self, texts: Any) -> Any:
        return self.inner.passages(texts)


@benchmark("semantic_scale", targets=[
    Target("recall_query_beyond_embedding.p95_ms", "<=", 2.0,
           "recall(query) k=5 beyond one query embedding, 5,000 memories/user, SQLite (wall)",
           beside="recall_query_beyond_embedding_cpu.p95_ms"),
    Target("pgvector.recall_query_beyond_embedding.p95_ms", "<=", 2.0,
           "recall(query) k=5 beyond one query embedding, 5,000 memories/user, PostgreSQL + pgvector (wall)",
           beside="pgvector.recall_query_beyond_embedding_cpu.p95_ms"),
])
def bench_semantic_scale(ctx: BenchContext) -> dict[str, Any]:
    """recall(query=..., k=5) for a user holding 5,000 indexed episodes, minus the query embedding: the
    time spent in candidates (dense scan of the user's matrix, BM25, the planner), loading and scoring.
    The episodes' vectors are random unit vectors stored directly (the cost of a scan does not depend on
    the values; embedding 5,000 passages would take minutes); the query vectors are the real model's.
    SQLite at the top level, PostgreSQL + pgvector under `pgvector` (measured where the server offers the
    `vector` extension, else on pgserver's; `skipped` with the reason otherwise): on both, numpy over the
    user's matrix cached in the process; `pgvector.dense_top50_in_db` times the database's own exact search
    (`ORDER BY vec <=> q`, what a user whose matrix exceeds the cache's byte budget gets). The planner's
    statistics are refreshed after the bulk load (`store.analyze()`, as the other recall benchmarks do): on
    PostgreSQL, the generic plan of the candidates' read made for a never-analysed table filters the user's
    5,000 rows against the key list one by one (≈ 10–15 ms instead of ≈ 0.3 ms)."""
    n = ctx.size(5000, 500)
    with tempfile.TemporaryDirectory() as d:
        out = _semantic_backend(ctx, f"sqlite:///{d}/semantic.db", n)
    out["backend"] = "sqlite (numpy scan of a cached float32 matrix)"
    out["pgvector"] = _semantic_pgvector(ctx, n)
    return out


def _semantic_pgvector(ctx: BenchContext, n: int) -> dict[str, Any]:
    """The same measurement on PostgreSQL + pgvector (the storage benchmark's database, its own schema)."""
    from usermem.bench.storage import _ensure_database, _pg_base

    url = f"{_pg_base()}?schema=bench_semantic"
    try:
        import psycopg

        from usermem.store.postgres import split_url

        _ensure_database(url)
        conninfo, _ = split_url(url)
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as c:
            if c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is None:
                # as relevance_recall_pgvector: the bundled PostgreSQL 16 + pgvector of the `pgserver` wheel
                return _semantic_pgserver(ctx, n)
    except Exception as exc:  # no server, no driver: say why
        return {"skipped": f"PostgreSQL unavailable: {type(exc).__name__}: {exc}"[:300]}
    try:
        out = _semantic_backend(ctx, url, n)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    out["backend"] = "postgres + pgvector (numpy over the cached matrix)"
    return out


def _semantic_pgserver(ctx: BenchContext, n: int) -> dict[str, Any]:
    """The pgvector measurement on pgserver's PostgreSQL 16 + pgvector (unix socket) when the local server has
    no `vector` extension (Debian's archive here has no postgresql-15-pgvector)."""
    import shutil
    import tempfile
    from pathlib import Path

    try:
        import pgserver
    except ImportError:
        return {"skipped": "this PostgreSQL server has no `vector` extension and pgserver is not installed "
                           "(scripts/ensure_services.sh installs postgresql-<major>-pgvector when the apt archive "
                           "has it)"}
    data = Path(tempfile.mkdtemp(prefix="usermem-bench-semantic-"))
    data.chmod(0o755)
    get_server: Any = pgserver.get_server  # type: ignore[attr-defined]  # re-exported implicitly by pgserver
    srv = get_server(data / "pgdata", cleanup_mode="delete")
    try:
        out = _semantic_backend(ctx, srv.get_uri() + "&schema=bench_semantic", n)
        out["backend"] = "PostgreSQL 16 + pgvector (pgserver, unix socket; numpy over the cached matrix)"
        return out
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def load_semantic_user(m: Memory, user: str, n: int) -> None:
    """`n` synthetic episodes for `user` (tenant "bench") with random unit vectors of the embedder's size,
    bulk-loaded (no embedding), then the planner's statistics refreshed (autovacuum's job in a deployment)."""
    import numpy as np

    from usermem.bench.relevance import synthetic_episodes
    from usermem.engine.context import new_id
    from usermem.model import Kind, MemoryRecord, Source
    from usermem.relevance.lexical import tokenize
    from usermem.relevance.text import memory_text
    from usermem.relevance.vectors import VectorRow

    rel = m.relevance
    assert rel is not None and rel.index is not None and rel.embedder is not None
    records = [MemoryRecord(id=new_id(), tenant="bench", user_id=user, kind=Kind.EPISODE, key=key, value=text,
                            source=Source.EXTRACTED, confidence=1.0, importance=0.5, created_at=T0 - 86_400,
                            event_at=when) for key, text, when in synthetic_episodes(n)]
    m.store.bulk_insert(records)
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((n, rel.embedder.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [VectorRow("bench", user, r.key, r.id, r.kind.value, float(r.event_at or r.created_at),
                      rel.embedder.model_id, v, tokenize(memory_text(r, ""))) for r, v in zip(records, vecs, strict=True)]
    for start in range(0, n, 500):
        rel.index.upsert(rows[start:start + 500])
    m.store.analyze()


def _semantic_backend(ctx: BenchContext, url: str, n: int) -> dict[str, Any]:
    """recall(query) beyond the query embedding on the store at `url`, for a fresh user of `n` episodes."""
    from usermem.bench.relevance import queries
    from usermem.relevance.vectors import PgVectorIndex

    m = Memory(settings=load_settings(env={}, store_url=url))
    try:
        rel = m.relevance
        if rel is None or rel.index is None or rel.embedder is None:
            return {"skipped": "no vector index (embedder none, or a store without vector tables)"}
        user = "bench-semantic"
        m.forget_user("bench", user)  # a database that outlives runs (PostgreSQL) starts from an empty user
        load_semantic_user(m, user, n)
        embedder = rel.embedder
        one = timed(lambda: embedder.query("where is my parcel, it is late again"), ctx.size(20, 5))
        rel.embedder = _RepeatedQueries(embedder)
        qs = queries(ctx.size(40, 10))
        now = T0
        for q in qs * 2:  # embed each query once, warm the user's matrix
            m.recall("bench", user, 5, query=q, now=now)
        it = iter(qs * 1000)
        wall, cpu = timed_cpu(lambda: m.recall("bench", user, 5, query=next(it), now=now), ctx.size(400, 40))
        q0 = rel.embedder.query(qs[0])
        index = rel.index
        dense, dense_cpu = timed_cpu(lambda: index.dense("bench", user, q0, limit=50), ctx.size(400, 40))
        out = {"memories_per_user": n,
               "recall_query_beyond_embedding": percentiles(wall),
               "recall_query_beyond_embedding_cpu": percentiles(cpu),
               "dense_top50": percentiles(dense), "dense_top50_cpu": percentiles(dense_cpu),
               "one_query_embedding": percentiles(one)}
        if isinstance(index, PgVectorIndex):
            in_db, in_db_cpu = timed_cpu(lambda: index.dense_db("bench", user, q0, limit=50), ctx.size(100, 20))
            out |= {"dense_top50_in_db": percentiles(in_db), "dense_top50_in_db_cpu": percentiles(in_db_cpu)}
        return out
    finally:
        m.close()
