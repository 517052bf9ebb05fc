"""A/B, interleaved in one process: the SQLite snapshot rebuilt after a write, this tree against `--rev` (issue 19).

    PYTHONPATH=src python scripts/ab_snapshot_delta.py --rev d26658d --memories 1000 -n 30
    PYTHONPATH=src python scripts/ab_snapshot_delta.py --rev d26658d --memories 5000 -n 30 --embedder default

One user with `--memories` synthetic episodes and random unit vectors of the embedder's size (as `usermem
bench semantic_scale`), on two SQLite files: A with this tree's SQLiteVectorIndex, B with the one of `--rev`
(its `vectors.py` and the `BM25Index` of its `lexical.py`, loaded from git; the hybrid plug-in is this
tree's). Each repetition rewrites one existing episode through Memory.write (new version, new vector: the
agent's write of the turn), then times, A and B in alternating order, `index.load()` alone (the snapshot
rebuild), `recall(query, k=5)` (everything after the write: generation check, rebuild, BM25 and language
flags of the new snapshot, scoring; the query vector is cached) and, with `--cold`, `recall(query, k=5)`
after the process's snapshots were dropped (a full build: the first recall of a user). Embedder: `toy` (a
384-dimension hashing bag of words, so blobs have the default model's size) or `default` (the configured
model; its query vectors cached after one pass). `--store pgvector`: both sides on one PostgreSQL +
pgvector server started with pgserver (a dev dependency), each in its own schema, B with `--rev`'s
PgVectorIndex. Prints medians and p90 in ms and the load average before and after.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from toy_embedder import CrcBow32  # the tests' helper module

USER = "bench-semantic"


class Toy384(CrcBow32):
    """The tests' hashing bag of words (tests/toy_embedder.py) at the default model's size (384 float32: 1.5 KB
    blobs)."""

    model_id = "toy/hash@384"
    dim = 384


def _load_from_git(rev: str, file: str, name: str) -> Any:
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(["git", "show", f"{rev}:src/usermem/relevance/{file}"], cwd=root, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _old_module(rev: str) -> Any:
    mod = _load_from_git(rev, "vectors.py", "old_vectors")
    mod.BM25Index = _load_from_git(rev, "lexical.py", "old_lexical").BM25Index  # UserIndex.bm25 builds this one
    if not hasattr(mod.UserIndex, "chinese_seed"):
        mod.UserIndex.chinese_seed = None  # what this tree's row_chinese reads
    return mod


def _memory(url: str, embedder: str) -> Memory:
    m = Memory(settings=load_settings(env={}, store_url=url))
    if embedder == "toy":
        m.use_relevance("hybrid", embedder=Toy384(), background=False)  # type: ignore[arg-type]
    rel = m.relevance
    assert rel is not None and rel.index is not None and rel.embedder is not None
    return m


def _stats(xs: list[float]) -> str:
    s = sorted(xs)
    return f"median {statistics.median(s) * 1000:.2f} p90 {s[int(len(s) * 0.9)] * 1000:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="d26658d")
    ap.add_argument("-n", type=int, default=30, help="repetitions per side and measure")
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--embedder", choices=["toy", "default"], default="toy")
    ap.add_argument("--store", choices=["sqlite", "pgvector"], default="sqlite")
    ap.add_argument("--cold", action="store_true", help="also time a recall after the snapshots were dropped")
    args = ap.parse_args()
    old = _old_module(args.rev)
    data = Path(tempfile.mkdtemp(prefix="usermem-ab-delta-"))
    srv = None
    if args.store == "pgvector":
        import pgserver  # type: ignore[import-not-found]

        data.chmod(0o755)  # as root, pgserver runs the server as its own user
        srv = pgserver.get_server(data / "pgdata", cleanup_mode="delete")
    try:
        sides: dict[str, Memory] = {}
        for name in ("A (this tree)", f"B ({args.rev})"):
            url = (f"sqlite:///{data}/{len(sides)}.db" if srv is None
                   else srv.get_uri() + f"&schema=ab_delta_{len(sides)}")
            m = _memory(url, args.embedder)
            assert m.relevance is not None and m.relevance.index is not None and m.relevance.embedder is not None
            if name.startswith("B"):
                cls = old.SQLiteVectorIndex if srv is None else old.PgVectorIndex
                m.relevance.index = cls(m.store, m.relevance.index.model_id)
            load_semantic_user(m, USER, args.memories)
            m.relevance.embedder = _RepeatedQueries(m.relevance.embedder)
            sides[name] = m
        qs = queries(20)
        for m in sides.values():
            for q in qs:  # embed each query once, build the snapshots
                m.recall("bench", USER, 5, query=q, now=T0)
        keys = sorted(next(iter(sides.values())).relevance.index.indexed("bench", USER))  # type: ignore[union-attr]
        rng = np.random.default_rng(3)
        order = list(sides.items())
        load0 = os.getloadavg()
        for measure in ("load", "recall", *(("cold",) if args.cold else ())):
            took: dict[str, list[float]] = {name: [] for name in sides}
            for i in range(args.n):
                key = keys[int(rng.integers(len(keys)))]
                text = " ".join(rng.choice(["parcel", "refund", "late", "coffee", "berlin", "blender"], 4))
                for name, m in (order if i % 2 == 0 else order[::-1]):
                    assert m.write("bench", USER, "episode", key, f"{text} {i}", now=T0).ok
                    m.flush()
                    index = m.relevance.index  # type: ignore[union-attr]
                    t = time.perf_counter()
                    if measure == "load":
                        index.load("bench", USER)  # type: ignore[union-attr]
                    elif measure == "cold":
                        index._forget_cache()  # type: ignore[union-attr]
                        t = time.perf_counter()
                        m.recall("bench", USER, 5, query=qs[i % len(qs)], now=T0)
                    else:
                        m.recall("bench", USER, 5, query=qs[i % len(qs)], now=T0)
                    took[name].append(time.perf_counter() - t)
            for name, xs in took.items():
                print(f"  {measure} after one write, {name}: {_stats(xs)} ms")
        print(f"{args.store}, {args.memories} memories, embedder {args.embedder}, {args.n} repetitions per side;"
              f" load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
        for m in sides.values():
            m.close()
    finally:
        if srv is not None:
            srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
