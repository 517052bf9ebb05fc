"""The query embedding overlapped with the candidates' other work (HybridRelevance.overlap_embedding, issue 19).

`candidates()` hands the work that does not need the query vector (tokens, concept words, BM25 over the
index snapshot, the best keys by BM25) to a worker thread and embeds the query meanwhile in the caller's
thread (the bundled engine releases the GIL); the planner and the dense scan then read the vector. On
random users, queries and k, recall with the overlap returns exactly what the sequential path (embed first,
in the caller's thread) returns: the same candidates, ids in the same order, equal scores and relevances.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from toy_embedder import CrcBow32
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.errors import ProviderError
from usermem.relevance.hybrid import HybridRelevance

T0 = 1_790_000_000.0
DAY = 86_400.0
_WORDS = ["coffee", "tea", "parcel", "late", "berlin", "paris", "dog", "cat", "allergy", "peanut", "city",
          "diet", "vegan", "phone", "meeting", "monday", "咖啡", "包裹", "北京", "狗", "refund", "退款"]
_KINDS = ["episode", "fact", "preference"]
_KEYS = ["city", "diet", "allergy", "phone", "likes", "pets"]


class _SlowEmbedder(CrcBow32):
    """CrcBow32 whose query takes a while and releases the GIL meanwhile (as the bundled engine's C call does),
    and which records the thread each query ran in."""

    def __init__(self, delay: float = 0.002) -> None:
        self.delay = delay
        self.threads: list[str] = []
        self.fail = False

    def query(self, text: str) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise ProviderError("embedding endpoint failed: scripted")
        return super().query(text)


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    d: Path = tmp_path_factory.mktemp("overlap")
    s = load_settings(env={}, store_url=f"sqlite:///{d}/m.db", hybrid_candidates=5)
    m = Memory(settings=s)
    m.use_relevance("hybrid", embedder=_SlowEmbedder(0.0005), background=False)  # type: ignore[arg-type]
    yield m
    m.close()


def _rel(m: Memory) -> HybridRelevance:
    rel = m.relevance
    assert isinstance(rel, HybridRelevance)
    return rel


def _run(m: Memory, user: str, query: str, k: int, overlap: bool) -> tuple[list[str] | None, list[tuple]]:
    rel = _rel(m)
    rel.overlap_embedding = overlap
    try:
        cands = rel.candidates("t", user, query)
        got = m.recall_scored("t", user, k, query=query, now=T0)
    finally:
        rel.overlap_embedding = False
    return cands, [(s.memory.id, s.score, s.relevance) for s in got]


_text = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=5).map(" ".join)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.sampled_from(_KINDS), st.sampled_from(_KEYS) | st.none(), _text,
                               st.floats(-200 * DAY, 0.0)), max_size=25),
       query=_text, k=st.integers(1, 8))
def test_overlapped_embedding_gives_the_sequential_results(memory: Memory, rows: list[tuple], query: str,
                                                           k: int) -> None:
    user = uuid.uuid4().hex
    for i, (kind, key, text, created) in enumerate(rows):
        r = memory.write("t", user, kind, key or f"k{i}", text, source="user_confirmed", now=T0 + created)
        assert r.ok, r
    memory.flush()
    seq_cands, sequential = _run(memory, user, query, k, False)
    ovl_cands, overlapped = _run(memory, user, query, k, True)
    assert ovl_cands == seq_cands
    assert overlapped == sequential  # ids, order, scores and relevances to the bit


def test_bm25_runs_on_the_worker_thread_while_the_query_is_embedded(tmp_path: Path) -> None:
    emb = _SlowEmbedder(0.05)
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/m.db"))
    m.use_relevance("hybrid", embedder=emb, background=False)  # type: ignore[arg-type]
    for i in range(30):
        m.write("t", "u", "episode", f"e{i}", f"parcel {_WORDS[i % len(_WORDS)]} late", now=T0 - i)
    m.flush()
    rel = _rel(m)
    rel.overlap_embedding = True  # off by default (docs/relevance.md)
    seen: list[tuple[float, str]] = []
    bm25 = HybridRelevance._bm25

    def timed_bm25(ux, state):  # type: ignore[no-untyped-def]
        seen.append((time.perf_counter(), threading.current_thread().name))
        return bm25(ux, state)

    rel._bm25 = timed_bm25  # type: ignore[method-assign]  # an instance attribute of the test's own plug-in
    emb.threads.clear()
    start = time.perf_counter()
    got = m.recall("t", "u", 3, query="parcel late", now=T0)
    here = threading.current_thread().name
    assert got and emb.threads == [here]  # one embedding per recall, in the caller's thread
    assert seen[0][1].startswith("usermem-query-lexical")
    assert seen[0][0] - start < 0.04  # BM25 did not wait for the 50 ms embedding
    rel.overlap_embedding = False
    seen.clear()
    emb.threads.clear()
    m.recall("t", "u", 3, query="parcel late", now=T0)
    assert emb.threads == [here] and [name for _, name in seen] == [here]
    m.close()


def test_a_failing_overlapped_embedding_degrades_to_lexical(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    emb = _SlowEmbedder(0.0)
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/m.db"))
    m.use_relevance("hybrid", embedder=emb, background=False)  # type: ignore[arg-type]
    m.write("t", "u", "episode", "e1", "the parcel was late", now=T0)
    m.write("t", "u", "episode", "e2", "coffee with tea", now=T0)
    m.flush()
    emb.fail = True
    _rel(m).overlap_embedding = True
    got = m.recall("t", "u", 1, query="parcel", now=T0)
    assert [r.key for r in got] == ["e1"]
    assert any("BM25 only" in r.message for r in caplog.records)
    m.close()




def test_the_overlap_is_off_by_default(tmp_path: Path) -> None:
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/m.db"))
    emb = _SlowEmbedder(0.0)
    m.use_relevance("hybrid", embedder=emb, background=False)  # type: ignore[arg-type]
    m.write("t", "u", "episode", "e1", "the parcel was late", now=T0)
    m.flush()
    rel = _rel(m)
    ux = rel.index.load("t", "u") if rel.index is not None else None
    assert ux is not None and ux.keys
    assert rel.overlap_embedding is False
    assert rel._start_lexical(ux, "t", "u", "parcel", None, None, None, 5) is None
    rel.overlap_embedding = True
    job = rel._start_lexical(ux, "t", "u", "parcel", None, None, None, 5)
    assert job is not None and job.result()[2] == ["e1"]
    m.close()
