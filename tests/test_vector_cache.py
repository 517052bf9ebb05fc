"""The per-process vector snapshots (relevance/vectors.py) on SQLite and on PostgreSQL + pgvector (pgserver).

Each process keeps a user's vectors as a numpy matrix, validated by the user's generation number before
it is served. These tests run two Memory instances on one store (two processes or workers, as far as the
cache can tell: neither sees the other's writes except through the database) and check that
* a write, a forget or a forget_user by the OTHER instance is seen by the next search (hypothesis: after
  every step both instances' searches equal a fresh index's, and on pgvector the database's own `<=>`);
* the vectors of a forgotten memory are unreachable: never returned, and gone from the snapshot the
  process keeps once it has looked at the user again (at once in the process that forgot);
* a user whose matrix exceeds the byte budget is searched in the database, with the same results.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import backends
from props import examples
from toy_embedder import CrcBow32
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.relevance.lexical import tokenize
from usermem.relevance.vectors import PgVectorIndex, SQLiteVectorIndex, VectorIndex, open_index

T0 = 1_790_000_000.0
_seq = itertools.count()
_WORDS = ["coffee", "tea", "parcel", "late", "berlin", "paris", "dog", "cat", "allergy", "peanut", "refund",
          "blender", "咖啡", "包裹", "北京", "狗"]


_HashEmbedder = CrcBow32


def _memory(url: str) -> Memory:
    m = Memory(settings=load_settings(env={}, store_url=url, hybrid_candidates=8))
    m.use_relevance("hybrid", embedder=_HashEmbedder(), background=False)  # type: ignore[arg-type]
    return m


def _index(m: Memory) -> VectorIndex:
    rel = m.relevance
    assert rel is not None and rel.index is not None
    return rel.index


# Tests of what only the pgvector index does (round trips saved, search in the database, xmin) take the pair
# on pgvector alone; SQLite rebuilds from its own file and always builds its matrices.
PGVECTOR_ONLY = pytest.mark.parametrize("pair", ["pgvector"], indirect=True)


@pytest.fixture(scope="module", params=["sqlite", "pgvector"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, Memory]]:
    """Two Memory instances on one store: `a` writes and forgets, `b` too; neither shares a cache."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('vcache')}/m.db"
        else:
            uri = stack.enter_context(backends.pgserver_uri("usermem-vcache-"))
            url = uri + f"&schema=vc_{uuid.uuid4().hex[:10]}"
        a, b = _memory(url), _memory(url)
        assert type(_index(a)) is (SQLiteVectorIndex if request.param == "sqlite" else PgVectorIndex)
        yield a, b
        a.close()
        b.close()


def _same(got: dict[str, float], want: dict[str, float], tol: float = 1e-6) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert abs(got[k] - v) <= tol, (k, got[k], v)


def _check(pair: tuple[Memory, Memory], user: str, query: str) -> None:
    """Both instances' searches equal a fresh index's (no snapshot yet), and on pgvector the database's."""
    a, b = pair
    q = _HashEmbedder().query(query)
    fresh = open_index(a.store, _HashEmbedder.model_id)
    assert fresh is not None
    want = fresh.dense("t", user, q, limit=1000)
    for m in pair:
        index = _index(m)
        _same(index.dense("t", user, q, limit=1000), want)
        if len(set(np.round(list(want.values()), 5))) == len(want):  # the top 3, where no near-ties make it moot
            _same(index.dense("t", user, q, limit=3), dict(sorted(want.items(), key=lambda kv: -kv[1])[:3]))
        if isinstance(index, PgVectorIndex):
            _same(index.dense_db("t", user, q, limit=1000), want, 1e-5)
    ids_a = [r.id for r in a.recall("t", user, 5, query=query, now=T0)]
    ids_b = [r.id for r in b.recall("t", user, 5, query=query, now=T0)]
    assert ids_a == ids_b
    # BM25 of each snapshot (built from the previous snapshot's where there was one) as a fresh index's
    toks = tokenize(query)
    want_bm25 = fresh.load("t", user).bm25
    for m in pair:
        got = _index(m).load("t", user)
        assert np.array_equal(got.bm25.scores(toks), want_bm25.scores(toks))
        assert [got.bm25.idf(t) for t in toks] == [want_bm25.idf(t) for t in toks]
    fresh.close()


_text = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4).map(" ".join)
_op = st.tuples(st.sampled_from(["write", "write", "forget", "forget_user"]), st.booleans(),
                st.sampled_from(["k1", "k2", "k3", "k4"]), _text)


@settings(max_examples=examples(40, floor=8), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=6), query=_text, delta=st.sampled_from([0, 1, 256]))
def test_a_change_by_another_instance_is_seen_by_the_next_search(pair: tuple[Memory, Memory],
                                                                 ops: list[tuple[str, bool, str, str]],
                                                                 query: str, delta: int) -> None:
    """`delta`: how many changed vectors b's pgvector rebuild reads by key (beyond it: all of the user's)."""
    a, b = pair
    user = f"u{next(_seq)}"
    index = _index(b)
    if isinstance(index, PgVectorIndex):
        index.DELTA_KEYS = delta
    try:
        _check(pair, user, query)  # both hold a snapshot of the (empty) user from here on
        for op, by_a, key, text in ops:
            m = a if by_a else b
            if op == "write":
                assert m.write("t", user, "episode", key, text, now=T0).ok
                m.flush()
            elif op == "forget":
                m.forget("t", user, key, now=T0)
            else:
                m.forget_user("t", user, now=T0)
            _check(pair, user, query)
    finally:
        if isinstance(index, PgVectorIndex):
            del index.DELTA_KEYS


def test_a_vector_replaced_in_place_elsewhere_is_seen(pair: tuple[Memory, Memory]) -> None:
    """Same key, memory and model, another vector (a reindex after the field's description changed): the
    row's version differs, so the other instance's next snapshot reads it again instead of reusing it."""
    from usermem.relevance.vectors import VectorRow

    a, b = pair
    user = f"u{next(_seq)}"
    for key, text in (("k1", "dog cat"), ("k2", "tea coffee"), ("k3", "parcel late")):
        assert a.write("t", user, "episode", key, text, now=T0).ok
    a.flush()
    q = _HashEmbedder().query("refund blender")
    assert _index(b).dense("t", user, q, limit=10)["k2"] < 0.5
    mid = _index(a).indexed("t", user)["k2"][0]
    _index(a).upsert([VectorRow("t", user, "k2", mid, "episode", T0, _HashEmbedder.model_id, q,
                                ("refund", "blender"))])
    assert _index(b).dense("t", user, q, limit=10)["k2"] == pytest.approx(1.0, abs=1e-6)
    assert _index(b).dense("t", user, q, limit=10)["k1"] == pytest.approx(
        float(_HashEmbedder().query("dog cat") @ q), abs=1e-6)


@PGVECTOR_ONLY
def test_after_one_write_the_other_instance_reads_one_vector(pair: tuple[Memory, Memory],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    assert isinstance(_index(b), PgVectorIndex)
    import psycopg

    user = f"u{next(_seq)}"
    for i, w in enumerate(_WORDS):
        assert a.write("t", user, "episode", f"k{i}", w, now=T0).ok
    a.flush()
    q = _HashEmbedder().query("parcel")
    before = _index(b).dense("t", user, q, limit=100)
    assert a.write("t", user, "episode", "k3", "parcel refund", now=T0).ok
    a.flush()
    sent: list[tuple[str, object]] = []
    execute = psycopg.Cursor.execute

    def seen(self, query, params=None, **kw):  # type: ignore[no-untyped-def]
        if "vector_send" in str(query):
            sent.append((str(query), params))
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", seen)
    after = _index(b).dense("t", user, q, limit=100)
    monkeypatch.undo()
    # One statement (migration 0009's row versions): the rows written since b's snapshot, and a count
    assert len(sent) == 1 and "ver > %s" in sent[0][0], sent
    with b.store.sql("t") as conn:  # type: ignore[attr-defined]
        # (no erasure since b's snapshot: no count of the rows it keeps)
        assert [r[0] for r in conn.execute(sent[0][0], sent[0][1]).fetchall()] == ["k3"]
        conn.execute("SET enable_seqscan = off")  # 16 rows: a sequential scan would be the planner's choice
        try:
            plan = " ".join(r[0] for r in conn.execute("EXPLAIN " + sent[0][0], sent[0][1]).fetchall())
        finally:
            conn.execute("RESET enable_seqscan")
    # the rows above the version: a range of the version index; no part scans the table
    assert "ver > " in plan and "using relevance_vectors_version" in plan and "Seq Scan" not in plan, plan
    assert {k: v for k, v in after.items() if k != "k3"} == {k: v for k, v in before.items() if k != "k3"}
    assert after["k3"] > before["k3"]


def test_vectors_of_a_memory_forgotten_elsewhere_are_unreachable(pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    user = f"u{next(_seq)}"
    for key, text in (("ep.refund", "refund blender parcel"), ("ep.dog", "dog cat"), ("ep.tea", "tea coffee")):
        assert a.write("t", user, "episode", key, text, now=T0).ok
    a.flush()
    q = _HashEmbedder().query("refund blender parcel")
    ia, ib = _index(a), _index(b)
    assert "ep.refund" in ib.dense("t", user, q, limit=10)
    before = ib.cached("t", user)
    assert before is not None and "ep.refund" in before.keys
    a.forget("t", user, "ep.refund", now=T0)
    assert ia.cached("t", user) is None  # the process that forgot: at once
    # b never served the old snapshot again: the next search reads the generation, drops it, builds anew
    assert "ep.refund" not in ib.dense("t", user, q, limit=10)
    assert "ep.refund" not in [r.key for r in b.recall("t", user, 3, query="refund blender parcel", now=T0)]
    after = ib.cached("t", user)
    assert after is not None and after is not before and "ep.refund" not in after.keys
    assert after.matrix is not None and len(after.matrix) == len(after.keys) == 2
    a.forget_user("t", user, now=T0)
    assert ib.dense("t", user, q, limit=10) == {}
    assert ib.cached("t", user).keys == []


@PGVECTOR_ONLY
def test_a_matrix_over_the_byte_budget_is_searched_in_the_database(pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    index = _index(b)
    assert isinstance(index, PgVectorIndex)
    user = f"u{next(_seq)}"
    for i, w in enumerate(_WORDS):
        assert a.write("t", user, "episode", f"k{i}", f"{w} {_WORDS[i - 1]}", now=T0).ok
    a.flush()
    q = _HashEmbedder().query("parcel late refund")
    cached = index.dense("t", user, q, limit=100)
    index.CACHE_BYTES = 64  # an instance attribute: this index only
    try:
        a.write("t", user, "episode", "k_new", "dog", now=T0)
        a.flush()
        ux = index.load("t", user)
        assert ux.matrix is None  # 17 x 32 float32 > 64 bytes: not cached
        got = index.dense("t", user, q, limit=100)
        _same({k: v for k, v in got.items() if k != "k_new"}, cached, 1e-5)
        fresh = open_index(a.store, _HashEmbedder.model_id)  # the class's budget: a cached matrix
        assert fresh is not None
        _same(index.dense("t", user, q, limit=100), fresh.dense("t", user, q, limit=100), 1e-5)
        fresh.close()
    finally:
        del index.CACHE_BYTES


def test_the_snapshot_lru_keeps_within_its_byte_budget(tmp_path: Path) -> None:
    m = _memory(f"sqlite:///{tmp_path}/m.db")
    try:
        index = _index(m)
        for u in ("u1", "u2", "u3"):
            for i in range(4):
                assert m.write("t", u, "episode", f"k{i}", f"{_WORDS[i]} {u}", now=T0).ok
        m.flush()
        index.CACHE_BYTES = 2 * 4 * 32 * 4  # two users' 4 x 32 float32 matrices
        for u in ("u1", "u2", "u3"):
            index.load("t", u)
        assert index.cached("t", "u1") is None  # least recently used: evicted
        assert index.cached("t", "u2") is not None and index.cached("t", "u3") is not None
    finally:
        m.close()


@PGVECTOR_ONLY
def test_without_row_versions_snapshots_are_rebuilt_in_full(pair: tuple[Memory, Memory],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A server that refuses the row version (xmin) costs full rebuilds, never wrong or failed searches."""
    a, b = pair
    index = _index(b)
    assert isinstance(index, PgVectorIndex)
    user = f"u{next(_seq)}"
    for i, w in enumerate(_WORDS[:6]):
        assert a.write("t", user, "episode", f"k{i}", w, now=T0).ok
    a.flush()
    index.ROW_VERSION = "no_such_column"  # an instance attribute: this index only
    index._versioned = False  # type: ignore[attr-defined]  # as before migration 0009: xmin is the version
    try:
        q = _HashEmbedder().query("dog parcel")
        fresh = open_index(a.store, _HashEmbedder.model_id)
        assert fresh is not None
        _same(index.dense("t", user, q, limit=100), fresh.dense("t", user, q, limit=100))
        assert index.ROW_VERSION == "" and "row versions unavailable" in caplog.text
        assert index.cached("t", user).versions is None  # type: ignore[union-attr]
        assert a.write("t", user, "episode", "k1", "parcel dog", now=T0).ok
        a.flush()
        _same(index.dense("t", user, q, limit=100), fresh.dense("t", user, q, limit=100))
        fresh.close()
    finally:
        del index.ROW_VERSION
        index._versioned = True  # type: ignore[attr-defined]


def test_over_the_byte_budget_pgvector_sheds_matrices_not_snapshots(pair: tuple[Memory, Memory]) -> None:
    """pgvector keeps the least recently used user's snapshot (keys, index terms) without its matrix when
    matrices exceed the budget: its searches go to the database (as before the cache) until its next
    rebuild, instead of a full rebuild at its next recall. SQLite evicts the snapshot (no search in a DB)."""
    a, b = pair
    index = _index(b)
    users = [f"u{next(_seq)}" for _ in range(2)]
    for u in users:
        for i, w in enumerate(_WORDS[:8]):
            assert a.write("t", u, "episode", f"k{i}", f"{w} {u}", now=T0).ok
    a.flush()
    q = _HashEmbedder().query("dog parcel")
    fresh = open_index(a.store, _HashEmbedder.model_id)
    assert fresh is not None
    index.CACHE_BYTES = 8 * 32 * 4  # one user's 8 x 32 float32 matrix
    try:
        first = index.load("t", users[0])
        assert first.matrix is not None
        index.load("t", users[1])
        kept = index.cached("t", users[0])
        if isinstance(index, PgVectorIndex):
            assert kept is not None and kept.matrix is None and kept.keys == first.keys
            assert index.load("t", users[0]) is kept  # served as it is: no rebuild
        else:
            assert kept is None
        for u in users:
            _same(index.dense("t", u, q, limit=100), fresh.dense("t", u, q, limit=100), 1e-5)
    finally:
        del index.CACHE_BYTES
        fresh.close()
