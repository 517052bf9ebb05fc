"""A/B, interleaved in one process: the vector index of an earlier revision against this tree's (issue 19).

    PYTHONPATH=src python scripts/ab_vector_cache.py --backend pg --rev a2f2b40 -n 600

One user with 5,000 episodes and random unit vectors (as `usermem bench semantic_scale`), the planner's
statistics refreshed (`store.analyze()`), two Memory instances on one store: A with this tree's index, B with
the index class of `--rev` (its `vectors.py`, loaded from git; the hybrid plug-in is this tree's, so B's dense
search is exactly the old one: on pgvector `ORDER BY vec <=> q` in the database). The recalls alternate A/B,
B/A; per side wall and CPU (time.process_time) percentiles of recall(query, k=5) beyond the (cached) query
embedding, the load average before and after, and how often both returned the same top-5 ids. Then the cost
of a snapshot rebuilt after one row's vector was rewritten, and of one built with no stale snapshot.
PostgreSQL: pgserver's PostgreSQL 16 + pgvector in a temp directory (as the benchmark when the local server
has no `vector` extension).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from usermem.bench.core import T0
from usermem.bench.relevance import queries
from usermem.bench.scale import _RepeatedQueries, load_semantic_user
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.relevance.vectors import VectorRow

USER = "bench-semantic"


def _old_module(rev: str) -> Any:
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(["git", "show", f"{rev}:src/usermem/relevance/vectors.py"], cwd=root, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_vectors.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_vectors", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_vectors"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {p: round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 3) for p, q in
            (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def _build(url: str, n: int) -> Memory:
    m = Memory(settings=load_settings(env={}, store_url=url))
    rel = m.relevance
    assert rel is not None and rel.index is not None and rel.embedder is not None
    load_semantic_user(m, USER, n)
    rel.embedder = _RepeatedQueries(rel.embedder)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["pg", "sqlite"], default="pg")
    ap.add_argument("--rev", default="a2f2b40")
    ap.add_argument("-n", type=int, default=600, help="recalls per side")
    ap.add_argument("--memories", type=int, default=5000)
    ap.add_argument("--rebuilds", type=int, default=10)
    args = ap.parse_args()
    old = _old_module(args.rev)
    base = old.PgVectorIndex if args.backend == "pg" else old.SQLiteVectorIndex

    class OldIndex(base):  # type: ignore[misc, valid-type]
        def dense(self, *a: Any, snapshot: Any = None, **kw: Any) -> Any:  # the old signature: validates again
            return super().dense(*a, **kw)

    data = Path(tempfile.mkdtemp(prefix="usermem-ab-"))
    data.chmod(0o755)
    srv = None
    if args.backend == "pg":
        import pgserver

        srv = pgserver.get_server(data / "pgdata", cleanup_mode="delete")  # type: ignore[attr-defined]
        url = srv.get_uri() + "&schema=ab_vector_cache"
    else:
        url = f"sqlite:///{data}/ab.db"
    try:
        a = _build(url, args.memories)
        b = Memory(settings=load_settings(env={}, store_url=url))
        assert a.relevance is not None and b.relevance is not None and a.relevance.index is not None
        b.relevance.embedder = a.relevance.embedder  # the same cached query vectors
        b.relevance.index = OldIndex(b.store, a.relevance.index.model_id)
        qs = queries(40)
        for q in qs * 2:  # embed each query once, build both snapshots
            a.recall("bench", USER, 5, query=q, now=T0)
            b.recall("bench", USER, 5, query=q, now=T0)
        same = sum([r.id for r in a.recall("bench", USER, 5, query=q, now=T0)] ==
                   [r.id for r in b.recall("bench", USER, 5, query=q, now=T0)] for q in qs)
        times: dict[str, tuple[list[float], list[float]]] = {"A (this tree)": ([], []), f"B ({args.rev})": ([], [])}
        sides = list(zip(times, (a, b), strict=True))
        load0 = os.getloadavg()
        for i in range(args.n):
            q = qs[i % len(qs)]
            for name, m in (sides if i % 2 == 0 else sides[::-1]):
                w, c = time.perf_counter(), time.process_time()
                m.recall("bench", USER, 5, query=q, now=T0)
                times[name][0].append(time.perf_counter() - w)
                times[name][1].append(time.process_time() - c)
        print(f"{args.backend}, {args.memories} memories, {args.n} recalls per side, same top-5 ids on {same} of "
              f"{len(qs)} queries; load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
        for name, (wall, cpu) in times.items():
            print(f"  {name}: wall {_pct(wall)} cpu {_pct(cpu)}")
        rng = np.random.default_rng(5)

        def rewrite_one(m: Memory) -> None:
            index = m.relevance.index  # type: ignore[union-attr]
            key, (mid, model) = next(iter(index.indexed("bench", USER).items()))
            v = rng.standard_normal(384).astype(np.float32)
            index.upsert([VectorRow("bench", USER, key, mid, "episode", T0, model, v / np.linalg.norm(v),
                                    ("parcel",))])

        def rebuild(m: Memory, fresh: bool) -> dict[str, float]:
            index = m.relevance.index  # type: ignore[union-attr]
            took = []
            for _ in range(args.rebuilds):
                if fresh:
                    index.close()  # forgets the snapshots
                else:
                    rewrite_one(m)
                t = time.perf_counter()
                index.load("bench", USER)
                took.append(time.perf_counter() - t)
            return _pct(took)

        for fresh in (False, True, False, True):  # interleaved
            what = "no stale snapshot" if fresh else "after one row's vector was rewritten"
            print(f"  snapshot {what}: A {rebuild(a, fresh)} B {rebuild(b, fresh)}")
        a.close()
        b.close()
    finally:
        if srv is not None:
            srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
