"""A/B, interleaved in one process: a warm recall(query) on PostgreSQL + pgvector in 2 round trips against 4
(issue 19).

    PYTHONPATH=src python scripts/ab_pg_round_trips.py -n 600 [--url postgresql://...]

One user with 5,000 episodes and random unit vectors (as `usermem bench semantic_scale`, same loader), the
planner's statistics refreshed. One Memory; the recalls alternate A/B, B/A by switching
`RecallPipeline.candidates_ahead`: A (True, the default) sends the contract documents with the vector
index's generation check, then the candidates' ScoreRows with their records (2 round trips); B (False) reads
one statement at a time (the contract documents, the generation, the candidates' ScoreRows, the winners'
records: 4). Per side wall and CPU (time.process_time) percentiles of recall(query, k=5) beyond the (cached)
query embedding, the load average before and after, and whether both sides returned the same memories and
scores for every query. Without --url: pgserver's PostgreSQL 16 + pgvector in a temp directory (unix socket).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from usermem.bench.core import T0
from usermem.bench.relevance import queries
from usermem.bench.scale import _RepeatedQueries, load_semantic_user
from usermem.config import load_settings
from usermem.engine.memory import Memory

USER = "bench-semantic"


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {p: round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 3) for p, q in
            (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=600, help="recalls per side")
    ap.add_argument("--memories", type=int, default=5000)
    ap.add_argument("--url", help="a PostgreSQL URL whose server has the vector extension (default: pgserver)")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="usermem-ab-"))
    data.chmod(0o755)
    srv: Any = None
    if args.url:
        url = args.url
    else:
        import pgserver

        srv = pgserver.get_server(data / "pgdata", cleanup_mode="delete")  # type: ignore[attr-defined]
        url = srv.get_uri() + "&schema=ab_pg_round_trips"
    try:
        m = Memory(settings=load_settings(env={}, store_url=url))
        rel = m.relevance
        assert rel is not None and rel.index is not None and rel.embedder is not None
        m.forget_user("bench", USER)
        load_semantic_user(m, USER, args.memories)
        rel.embedder = _RepeatedQueries(rel.embedder)
        pipeline = m._recall  # the switch under test
        qs = queries(40)

        def run(ahead: bool, q: str) -> list[tuple[str, float]]:
            pipeline.candidates_ahead = ahead
            return [(s.memory.id, s.score) for s in m.recall_scored("bench", USER, 5, query=q, now=T0)]

        for q in qs * 2:  # embed each query once, build the snapshot
            run(True, q)
        same = sum(run(True, q) == run(False, q) for q in qs)
        times: dict[str, tuple[list[float], list[float]]] = {"A (2 round trips)": ([], []),
                                                               "B (4 round trips)": ([], [])}
        sides = list(zip(times, (True, False), strict=True))
        load0 = os.getloadavg()
        for i in range(args.n):
            q = qs[i % len(qs)]
            for name, ahead in (sides if i % 2 == 0 else sides[::-1]):
                pipeline.candidates_ahead = ahead
                w, c = time.perf_counter(), time.process_time()
                m.recall("bench", USER, 5, query=q, now=T0)
                times[name][0].append(time.perf_counter() - w)
                times[name][1].append(time.process_time() - c)
        pipeline.candidates_ahead = True
        print(f"pgvector, {args.memories} memories, {args.n} recalls per side, same memories and scores on {same} "
              f"of {len(qs)} queries; load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
        for name, (wall, cpu) in times.items():
            print(f"  {name}: wall {_pct(wall)} cpu {_pct(cpu)}")
        m.close()
    finally:
        if srv is not None:
            srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
