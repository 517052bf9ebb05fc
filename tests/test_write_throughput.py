"""Writes that embeddings cannot starve (issue 19): the write-side indexer never embeds in a writer's
thread, bounds its queue by spilling to key-only entries it reads back, embeds a key written many times
once, and a fresh memory is found by recall(query=...) before its vector is stored."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from toy_embedder import ToyEmbedder
from usermem import Memory
from usermem.relevance.hybrid import install

T0 = 1_790_000_000.0


class _CountingEmbedder(ToyEmbedder):
    """A hashing bag-of-words embedder that records which threads embedded passages, and how many."""

    model_id = "test/hash@64"

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.passages_embedded = 0

    def passages(self, texts):  # type: ignore[no-untyped-def]
        self.threads.add(threading.get_ident())
        self.passages_embedded += len(texts)
        return super().passages(texts)


def _gated(tmp_path: Path) -> tuple[Memory, _CountingEmbedder]:
    m = Memory(f"sqlite:///{tmp_path}/w.db")
    emb = _CountingEmbedder()
    install(m, embedder=emb, background=True)
    return m, emb


def test_a_full_queue_spills_key_only_and_never_embeds_in_the_writer(tmp_path):
    m, emb = _gated(tmp_path)
    indexer = m.relevance.indexer
    indexer.max_queue = 3
    # The worker takes nothing off the queue while we write (else it moves entries in flight and more fit).
    gate = threading.Event()
    take = indexer._take
    indexer._take = lambda: (gate.wait(), take())[1]  # type: ignore[method-assign]
    with indexer._work_lock:  # the worker cannot store anything while we write
        for i in range(10):
            assert m.write("acme", "u1", "episode", f"ep.{i}", f"parcel {i} arrived broken, courier {i}",
                           now=T0 + i).ok
        assert threading.get_ident() not in emb.threads  # no embedding in the writer's thread
        assert indexer.spilled == 7  # beyond the bound only the key is kept
        assert set(indexer.pending_keys("acme", "u1")) == {f"ep.{i}" for i in range(10)}
        # Still searchable before any vector is stored: pending keys are candidates.
        got = [r.key for r in m.recall("acme", "u1", 3, query="parcel 9 courier 9", now=T0 + 20)]
        assert got[0] == "ep.9"
    gate.set()
    m.flush()
    indexed = m.relevance.index.indexed("acme", "u1")
    current = {r.key: r.id for r in m.recall("acme", "u1", 20, now=T0 + 20)}
    assert {k: v[0] for k, v in indexed.items()} == current  # spilled keys were read back and embedded
    assert indexer.backlog() == 0
    m.close()


def test_a_key_written_many_times_before_embedding_is_embedded_once_at_its_newest_version(tmp_path):
    m, emb = _gated(tmp_path)
    indexer = m.relevance.indexer
    m.flush()
    before = emb.passages_embedded
    with indexer._work_lock:
        for i in range(20):
            last = m.write("acme", "u1", "episode", "ep.same", f"version {i} of the same note", now=T0 + i)
    m.flush()
    assert emb.passages_embedded - before <= 2  # the worker may have taken one version before the others
    assert m.relevance.index.indexed("acme", "u1")["ep.same"][0] == last.memory.id
    m.close()


def test_at_most_a_few_pending_memories_are_embedded_per_query(tmp_path):
    m, emb = _gated(tmp_path)
    indexer = m.relevance.indexer
    m.flush()
    with indexer._work_lock:
        for i in range(40):
            m.write("acme", "u1", "episode", f"ep.{i}", f"support ticket {i} about billing", now=T0 + i)
        before = emb.passages_embedded
        top = m.recall("acme", "u1", 5, query="billing ticket", now=T0 + 50)
        assert len(top) == 5
        assert emb.passages_embedded - before <= m.relevance.PENDING_EMBED
    m.close()


def test_searchable_after_benchmark_quick(tmp_path):
    from usermem.bench import BenchContext
    from usermem.bench.writes import bench_searchable_after

    out = bench_searchable_after(BenchContext(out_dir=tmp_path, quick=True))
    assert out["not_found_within_30s"] == 0
    assert out["searchable_after"]["n"] == out["trials"] == 10
    assert 0 < out["searchable_after"]["p50_ms"] <= out["searchable_after"]["p95_ms"]
    assert out["vector_stored_after"]["n"] == 10


# -- recall-side: planner fields found by binary search (semantic recall at thousands of memories) ------------


def test_user_index_under_matches_the_per_row_field_test():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from usermem.relevance.hybrid import field_keys
    from usermem.relevance.vectors import UserIndex

    part = st.text(alphabet="ab.-/_z0", min_size=1, max_size=4)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(part, max_size=40, unique=True), st.lists(part, max_size=4))
    def check(keys: list[str], fields: list[str]) -> None:
        n = len(keys)
        ux = UserIndex(gen=1, keys=keys, ids=keys, kinds=np.array(["fact"] * n, dtype=object),
                       at=np.zeros(n), models=["m"] * n, matrix=None, has_vec=np.zeros(n, dtype=bool),
                       tokens=[()] * n)
        assert ux.under(fields) == field_keys(keys, fields)

    check()
