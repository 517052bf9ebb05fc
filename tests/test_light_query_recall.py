"""Issue 19: recall(query=...) scored from ScoreRows and the relevance index equals the full-record path.

The light path (RecallPipeline.light_query, the default) reads the candidates' ScoreRow columns, has
the plug-in score them from its index (stored tokens for BM25, stored vectors; records read only for
candidates not indexed at their current version) and loads full records for the winners only. The
reference (light_query = False) loads every candidate's record and scores the records. On random
users — memories indexed, not indexed yet, or indexed at an older version; keys the planner names,
fields needing a grant, disabled fields; random times and k — both must return the same ids in the
same order, the same scores and relevances (within 1e-9), weights, flags and `withheld`.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from toy_embedder import CrcBow32
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.model import Kind, MemoryRecord, Source, Withheld
from usermem.policy.contracts import DEFAULT_CONTRACTS, ContractSet, FieldContract
from usermem.relevance.hybrid import HybridRelevance

T0 = 1_790_000_000.0
DAY = 86_400.0
_seq = itertools.count()
_WORDS = ["coffee", "tea", "parcel", "late", "berlin", "paris", "dog", "cat", "allergy", "peanut", "city",
          "diet", "vegan", "phone", "meeting", "monday", "咖啡", "包裹", "北京", "狗"]
_KEYS = ["city", "diet", "allergy", "phone", "likes", "pets", "switched_off", "current_task"]


_HashEmbedder = CrcBow32


@pytest.fixture(scope="module", params=["adaptive", "rrf"])
def memory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    d: Path = tmp_path_factory.mktemp("light")
    s = load_settings(env={}, store_url=f"sqlite:///{d}/m.db", hybrid_candidates=6, hybrid_fusion=request.param)
    m = Memory(settings=s, contracts=ContractSet([*DEFAULT_CONTRACTS,
                                                   FieldContract("switched_off", Kind.PREFERENCE, enabled=False)]))
    m.use_relevance("hybrid", embedder=_HashEmbedder(), background=False)  # type: ignore[arg-type]
    yield m
    m.close()


_text = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=5).map(" ".join)
_row = st.tuples(
    st.sampled_from(list(Kind)),
    st.sampled_from(_KEYS) | st.none(),  # None: a key of its own
    _text,
    st.sampled_from([0.3, 0.5, 1.0]) | st.floats(0.05, 1.0),  # confidence
    st.sampled_from([0.2, 0.5, 0.9]),  # importance
    st.sampled_from([0.0, -DAY, -30 * DAY]) | st.floats(-200 * DAY, 0.0),  # created
    st.sampled_from(["indexed", "not_indexed", "stale"]),  # the index holds it / not yet / an older version
)


def _store(m: Memory, user: str, rows: list[tuple]) -> None:
    """Write the rows: "indexed" ones with their vector; "stale" ones as a second version of the key whose
    first version was indexed (the indexer has not caught up); "not_indexed" ones without a vector."""
    rel = m.relevance
    assert isinstance(rel, HybridRelevance) and rel.index is not None and rel.indexer is not None
    current: dict[str, MemoryRecord] = {}
    states: dict[str, str] = {}
    for kind, key, text, conf, imp, created, state in rows:
        key = key if key is not None else f"k{next(_seq)}"
        if key in current:
            continue
        current[key] = MemoryRecord(id=f"m{next(_seq):08d}", tenant="t", user_id=user, kind=kind, key=key,
                                    value=text, source=Source.USER_CONFIRMED, confidence=conf, importance=imp,
                                    created_at=T0 + created)
        states[key] = state
    old = {k: replace(r, id=f"m{next(_seq):08d}", value="old " + str(r.value), created_at=r.created_at - DAY)
           for k, r in current.items() if states[k] == "stale"}
    if old:
        m.store.bulk_insert(list(old.values()))
        rel.index.upsert(rel.indexer.rows_for(list(old.values())))
        store = m.store
        with store._lock:  # type: ignore[attr-defined]  # supersede them as a write would
            store._conn.executemany(  # type: ignore[attr-defined]
                "UPDATE memories SET superseded_by=?, superseded_at=? WHERE id=?",
                [(current[k].id, current[k].created_at, r.id) for k, r in old.items()])
    m.store.bulk_insert(list(current.values()))
    indexed = [r for k, r in current.items() if states[k] == "indexed"]
    if indexed:
        rel.index.upsert(rel.indexer.rows_for(indexed))


def _run(m: Memory, user: str, query: str, k: int, now: float, light: bool) -> tuple[list[tuple], list[Withheld]]:
    pipe = m._engine.recall
    pipe.light_query = light
    try:
        got = pipe.scored("t", user, now=now, query=query, limit=k)
    finally:
        pipe.light_query = True
    return ([(s.memory.id, s.score, s.relevance, s.weight, s.needs_confirmation, s.question) for s in got],
            list(got.withheld))


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=30), query=_text, k=st.integers(1, 8),
       now_offset=st.sampled_from([0.0, 10 * DAY]) | st.floats(0.0, 400 * DAY))
def test_light_query_path_equals_full_record_path(memory: Memory, rows: list[tuple], query: str, k: int,
                                                  now_offset: float) -> None:
    user = uuid.uuid4().hex
    _store(memory, user, rows)
    now = T0 + now_offset
    light, light_withheld = _run(memory, user, query, k, now, True)
    full, full_withheld = _run(memory, user, query, k, now, False)
    assert [t[0] for t in light] == [t[0] for t in full]
    for a, b in zip(light, full, strict=True):
        assert abs(a[1] - b[1]) <= 1e-9 and abs((a[2] or 0.0) - (b[2] or 0.0)) <= 1e-9
        assert a[3:] == b[3:]
    assert light_withheld == full_withheld


def test_light_path_loads_records_of_the_winners_and_the_unindexed_only(memory: Memory,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the light path: with every candidate indexed, only the k winners' records are read."""
    user = uuid.uuid4().hex
    rows = [(Kind.EPISODE, None, f"parcel late {w}", 1.0, 0.5, -DAY, "indexed") for w in _WORDS[:12]]
    _store(memory, user, rows)
    store = memory.store
    calls: list[int] = []
    live_calls: list[int] = []
    get_many, live = store.get_many, store.live

    def counting_get_many(tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        calls.append(len(ids))
        return get_many(tenant, ids)

    def counting_live(q):  # type: ignore[no-untyped-def]
        out = live(q)
        live_calls.append(len(out))
        return out

    monkeypatch.setattr(store, "get_many", counting_get_many)
    monkeypatch.setattr(store, "live", counting_live)
    got = memory.recall("t", user, 3, query="parcel late", now=T0)
    monkeypatch.undo()
    assert len(got) == 3
    assert calls == [3] and live_calls == []
