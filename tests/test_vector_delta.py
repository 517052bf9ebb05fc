"""SQLite snapshots rebuilt from the stale one (relevance/vectors.py, SQLiteVectorIndex._build, issue 19).

After a change of a user's vectors a process rebuilds its snapshot from the one it held: rows whose version
(`ver`), memory id and model are unchanged keep their vectors, index terms and language flags, only the
others are read. The property: after any sequence of writes, in-place vector replacements, rows of another
model or size, forgets, orphan sweeps and hand-made writes that set no version (a process of an earlier
release), by this instance or by a SECOND one on the same file (another process: its own connection and
cache), every snapshot either instance serves equals a fresh full build, field by field.

The same property holds on PostgreSQL + pgvector (PgVectorIndex._delta, migration 0009 there: the rows
above the stale snapshot's version in one statement with the count of the others), on a pgserver database.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import backends
from props import examples
from toy_embedder import CrcBow32
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.relevance.hybrid import HybridRelevance
from usermem.relevance.vectors import PgVectorIndex, SQLiteVectorIndex, UserIndex, VectorRow, _pgvec

T0 = 1_790_000_000.0
_seq = itertools.count()
_WORDS = ["coffee", "tea", "parcel", "late", "berlin", "dog", "cat", "refund", "咖啡", "包裹", "北京", "狗"]
_KEYS = ["k1", "k2", "k3", "k4", "k5"]


def _memory(url: str) -> Memory:
    m = Memory(settings=load_settings(env={}, store_url=url, hybrid_candidates=8))
    m.use_relevance("hybrid", embedder=CrcBow32(), background=False)  # type: ignore[arg-type]
    return m


def _rel(m: Memory) -> HybridRelevance:
    rel = m.relevance
    assert isinstance(rel, HybridRelevance) and isinstance(rel.index, (SQLiteVectorIndex, PgVectorIndex))
    return rel


def _pg(m: Memory) -> bool:
    return isinstance(_rel(m).index, PgVectorIndex)


@pytest.fixture(scope="module", params=["sqlite", "pgvector"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, Memory]]:
    """Two Memory instances on one store (two processes as far as their caches can tell)."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('vdelta')}/m.db"
        else:
            uri = stack.enter_context(backends.pgserver_uri("usermem-vdelta-"))
            _SERVER["uri"] = uri
            url = uri + f"&schema=vd_{uuid.uuid4().hex[:10]}"
        a, b = _memory(url), _memory(url)
        assert _pg(a) == (request.param == "pgvector")
        yield a, b
        a.close()
        b.close()


SQLITE_ONLY = pytest.mark.parametrize("pair", ["sqlite"], indirect=True)
PGVECTOR_ONLY = pytest.mark.parametrize("pair", ["pgvector"], indirect=True)
_SERVER: dict[str, str] = {}  # the pgserver's URI while the pgvector pair is up


def _assert_same(got: UserIndex, want: UserIndex) -> None:
    assert got.keys == want.keys
    assert got.ids == want.ids
    assert got.kinds.tolist() == want.kinds.tolist()
    assert got.at.tolist() == want.at.tolist()
    assert got.models == want.models
    assert got.has_vec.tolist() == want.has_vec.tolist()
    assert got.tokens == want.tokens
    assert got.versions == want.versions
    assert got.position == want.position
    assert got.matrix is not None and want.matrix is not None
    assert got.matrix.shape == want.matrix.shape and np.array_equal(got.matrix, want.matrix)


def _fresh(m: Memory, user: str) -> UserIndex:
    """A full build of the user's snapshot by a new index with no snapshot of its own."""
    index = type(_rel(m).index)(m.store, CrcBow32.model_id)  # type: ignore[arg-type, call-arg]
    try:
        return index.load("t", user)
    finally:
        index.close()


def _vec(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def _apply(m: Memory, user: str, op: str, key: str, text: str, rng: np.random.Generator) -> None:
    index = _rel(m).index
    assert index is not None
    mine = index.indexed("t", user)
    tokens = tuple(text.split())
    if op == "write":
        assert m.write("t", user, "episode", key, text, now=T0).ok
        m.flush()
    elif op == "forget":
        m.forget("t", user, key, now=T0)
    elif op == "forget_user":
        m.forget_user("t", user, now=T0)
    elif op in ("replace", "other_model", "other_size") and key in mine:
        # Same key and memory: another vector (a reindex), another model's vector, or one of another size.
        model = "test/other@32" if op == "other_model" else CrcBow32.model_id
        dim = 16 if op == "other_size" else CrcBow32.dim
        index.upsert([VectorRow("t", user, key, mine[key][0], "episode", T0 + rng.integers(0, 9), model,
                                _vec(rng, dim), tokens)])
    elif op == "orphan" and key in mine:  # the memory expires; its vector stays until a sweep
        with m.store.sql(write=True) as c:  # type: ignore[attr-defined]
            c.execute(_q(m, "UPDATE memories SET expires_at = ? WHERE id = ?"), (T0 - 1, mine[key][0]))
    elif op == "sweep":
        index.drop_orphans(expired_before=T0)
    elif op == "erase_stale":
        index.erase("t", user, None)
    elif op == "unversioned" and key in mine:
        # A writer that sets no version (a process of an earlier release): the triggers unversion the row.
        v = _vec(rng, CrcBow32.dim)
        pg = isinstance(index, PgVectorIndex)
        with m.store.sql(write=True) as c:  # type: ignore[attr-defined]
            c.execute(_q(m, f"UPDATE relevance_vectors SET vec = ?{'::' + index._vector if pg else ''}, tokens = ?"
                            " WHERE tenant='t' AND user_id=? AND key=?"),
                      (_pgvec(v) if pg else v.tobytes(), text, user, key))
            c.execute(_q(m, "UPDATE relevance_generation SET gen = gen + 1 WHERE tenant='t' AND user_id=?"), (user,))
    elif op == "old_writer":
        # A process of the release before row versions on PostgreSQL (xmin; its upsert sets no `ver`): the row
        # it inserts or rewrites is unversioned. SQLite: the same through its triggers.
        if isinstance(index, PgVectorIndex):
            index._versioned = False
            try:
                _apply(m, user, "write", key, text, rng)
            finally:
                index._versioned = True
        else:
            _apply(m, user, "write", key, text, rng)


def _q(m: Memory, text: str) -> str:
    return text.replace("?", "%s") if _pg(m) else text


_text = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4).map(" ".join)
_op = st.tuples(st.sampled_from(["write", "write", "write", "replace", "forget", "forget_user", "other_model",
                                 "other_size", "orphan", "sweep", "erase_stale", "unversioned",
                                 "old_writer"]),
                st.booleans(), st.sampled_from(_KEYS), _text, st.booleans())


@settings(max_examples=examples(60, floor=15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=10), share=st.sampled_from([0.5, 1.0]), seed=st.integers(0, 99))
def test_a_snapshot_rebuilt_from_the_stale_one_equals_a_full_build(
        pair: tuple[Memory, Memory], ops: list[tuple[str, bool, str, str, bool]], share: float, seed: int) -> None:
    a, b = pair
    user = f"u{next(_seq)}"
    rng = np.random.default_rng(seed)
    for m in pair:
        _rel(m).index.DELTA_SHARE = share  # type: ignore[union-attr]
    try:
        for m in pair:
            for key, text in (("k0", "tea"), ("k6", "dog parcel"), ("k7", "北京 late"), ("k8", "cat")):
                m.write("t", user, "episode", key, text, now=T0)  # the rows every example starts from
            m.flush()
            _rel(m).index.load("t", user)  # type: ignore[union-attr]
        for op, by_a, key, text, look in ops:
            _apply(a if by_a else b, user, op, key, text, rng)
            if not look:  # several changes between two snapshots
                continue
            want = _fresh(a, user)
            want_zh = _rel(a).row_chinese(want).tolist()
            for m in pair:
                rel = _rel(m)
                got = rel.index.load("t", user)  # type: ignore[union-attr]
                _assert_same(got, want)
                assert rel.row_chinese(got).tolist() == want_zh
                if rng.random() < 0.5:  # else no BM25 index at this snapshot: the next one's starts further back
                    for q in (text.split(), ["tea"], ["咖啡", "狗", "dog"]):
                        assert np.array_equal(got.bm25.scores(q), want.bm25.scores(q)), q
    finally:
        for m in pair:
            del _rel(m).index.DELTA_SHARE  # type: ignore[union-attr]


@SQLITE_ONLY
def test_after_one_write_the_other_instance_reads_one_row(pair: tuple[Memory, Memory],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    user = f"u{next(_seq)}"
    for i, w in enumerate(_WORDS):
        assert a.write("t", user, "episode", f"w{i:02d}", w, now=T0).ok
    a.flush()
    before = _rel(b).index.load("t", user)  # type: ignore[union-attr]
    zh = _rel(b).row_chinese(before).copy()
    lexical = before.bm25  # a query recall's
    assert a.write("t", user, "episode", "w03", "parcel refund", now=T0).ok
    a.flush()
    seen: list[str] = []
    conn = b.store._conn  # type: ignore[attr-defined]  # b's own connection: another process's view
    conn.set_trace_callback(seen.append)
    monkeypatch.setattr(HybridRelevance, "_head", lambda self, key: pytest.fail(f"flag of {key} recomputed")
                        if key != "w03" else frozenset())
    try:
        after = _rel(b).index.load("t", user)  # type: ignore[union-attr]
        flags = _rel(b).row_chinese(after)
    finally:
        conn.set_trace_callback(None)
    blobs = [s for s in seen if " vec," in s]
    assert len(blobs) == 2 and not any(s.startswith("SELECT key FROM") for s in seen), seen
    assert [r[0] for b in blobs for r in conn.execute(b).fetchall()] == ["w03"]  # the one row written since
    for b in blobs:  # ranges of the version index: no other row of the user is visited
        plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + b))
        assert "relevance_vectors_version (tenant=? AND user_id=? AND ver" in plan, plan
    assert after is not before and after.keys == before.keys
    assert after.tokens[3] == ("parcel", "refund") and after.tokens[:3] == before.tokens[:3]
    assert flags.tolist() == [*zh[:3].tolist(), False, *zh[4:].tolist()]
    # BM25 from the stale snapshot's: every row but the one written keeps its postings
    assert after.bm25_seed is not None and after.bm25_seed[0] is lexical
    assert after.bm25_seed[1].tolist() == [*range(3), -1, *range(4, len(_WORDS))]
    want = _fresh(a, user)
    assert np.array_equal(after.bm25.scores(["parcel", "咖啡"]), want.bm25.scores(["parcel", "咖啡"]))
    assert after.bm25_seed is None
    _assert_same(after, want)


def test_a_file_from_before_row_versions_keeps_its_vectors_and_reuses_them(tmp_path: Path) -> None:
    """Migration 0009 adds `ver` without rewriting rows: rows of an older file read version 0 and are
    reused; a row written afterwards by a writer that sets no version is read again at every rebuild."""
    path = tmp_path / "old.db"
    m = _memory(f"sqlite:///{path}")
    for i, w in enumerate(_WORDS[:6]):
        assert m.write("t", "u", "episode", f"k{i}", w, now=T0).ok
    m.flush()
    m.close()
    c = sqlite3.connect(path)  # back to the schema of the release before: no column, index or triggers
    c.execute("DROP TRIGGER relevance_vectors_unversioned_insert")
    c.execute("DROP TRIGGER relevance_vectors_unversioned_update")
    c.execute("DROP INDEX relevance_vectors_version")
    c.execute("ALTER TABLE relevance_vectors DROP COLUMN ver")
    c.execute("DELETE FROM schema_migrations WHERE version = 9")
    c.commit()
    c.close()
    m = _memory(f"sqlite:///{path}")
    try:
        index = _rel(m).index
        assert isinstance(index, SQLiteVectorIndex)
        first = index.load("t", "u")
        assert first.versions == [0] * 6 and len(first.keys) == 6
        with m.store.sql(write=True) as conn:  # type: ignore[attr-defined]
            conn.execute("INSERT INTO relevance_vectors (tenant, user_id, key, memory_id, kind, at, model, dim,"
                         " vec, tokens) SELECT tenant, user_id, 'k9', memory_id, kind, at, model, dim, vec, 'x'"
                         " FROM relevance_vectors WHERE key = 'k0'")
            conn.execute("UPDATE relevance_vectors SET tokens = 'y' WHERE key = 'k1'")
            conn.execute("UPDATE relevance_generation SET gen = gen + 1")
        second = index.load("t", "u")
        assert second.versions == [0, None, 0, 0, 0, 0, None]
        assert second.tokens[1] == ("y",) and second.tokens[-1] == ("x",)
        _assert_same(second, _fresh(m, "u"))
        assert m.write("t", "u", "episode", "k1", "dog", now=T0).ok
        m.flush()
        third = index.load("t", "u")
        assert third.versions is not None and third.versions[1] not in (0, None)
        _assert_same(third, _fresh(m, "u"))
    finally:
        m.close()



def test_bm25_starts_from_the_last_snapshot_that_built_one(pair: tuple[Memory, Memory]) -> None:
    """Snapshots that no query recall used build no BM25 index: the next one starts from the last that did,
    through both changes (a row rewritten at the first, one rewritten and one added at the second)."""
    a, _ = pair
    user = f"u{next(_seq)}"
    index = _rel(a).index
    assert index is not None
    for i, w in enumerate(_WORDS):
        assert a.write("t", user, "episode", f"w{i:02d}", w, now=T0).ok
    a.flush()
    first = index.load("t", user)
    lexical = first.bm25
    assert a.write("t", user, "episode", "w03", "parcel refund 北京", now=T0).ok
    a.flush()
    second = index.load("t", user)  # no BM25 index of its own
    assert second.bm25_seed is not None and second.bm25_seed[0] is lexical
    assert a.write("t", user, "episode", "w05", "berlin 狗", now=T0).ok
    assert a.write("t", user, "episode", "w00a", "tea dog", now=T0).ok
    a.flush()
    third = index.load("t", user)
    assert third.bm25_seed is not None and third.bm25_seed[0] is lexical
    assert third.bm25_seed[1].tolist() == [0, -1, 1, 2, -1, 4, -1, *range(6, len(_WORDS))]
    want = _fresh(a, user)
    for q in (["parcel"], ["北京", "tea"], ["berlin", "狗", "late"], ["dog"], ["咖啡"]):
        assert np.array_equal(third.bm25.scores(q), want.bm25.scores(q)), q
    _assert_same(third, want)


@PGVECTOR_ONLY
def test_a_postgres_database_from_before_row_versions_keeps_working(pair: tuple[Memory, Memory]) -> None:
    """PostgreSQL migration 0009 adds `ver` without rewriting rows: rows written before read version 0 and
    are reused; a row a process of the earlier release writes afterwards (its upsert sets no version) is
    unversioned (NULL: its insert gets no default, its update goes through the trigger) and read again at
    every rebuild; a versioned write afterwards versions it again."""
    import psycopg

    schema = f"vd_old_{uuid.uuid4().hex[:8]}"
    url = _SERVER["uri"] + f"&schema={schema}"
    m = _memory(url)
    for i, w in enumerate(_WORDS[:6]):
        assert m.write("t", "u", "episode", f"k{i}", w, now=T0).ok
    m.flush()
    m.close()
    with psycopg.connect(_SERVER["uri"], autocommit=True) as c:  # back to the schema of the release before
        c.execute(f"SET search_path TO {schema}")
        c.execute("DROP TRIGGER relevance_vectors_unversioned ON relevance_vectors")
        c.execute("DROP FUNCTION relevance_vectors_unversion()")
        c.execute("DROP TRIGGER relevance_vectors_erasure ON relevance_vectors")
        c.execute("DROP FUNCTION relevance_vectors_erased()")
        c.execute("ALTER TABLE relevance_generation DROP COLUMN erased")
        c.execute("ALTER TABLE relevance_vectors DROP COLUMN ver")  # drops its index too
        c.execute("DELETE FROM schema_migrations WHERE version = 9")
    m, old = _memory(url), _memory(url)
    try:
        index, legacy = _rel(m).index, _rel(old).index
        assert isinstance(index, PgVectorIndex) and isinstance(legacy, PgVectorIndex)
        first = index.load("t", "u")
        assert first.versions == [0] * 6 and first.delta is not None
        legacy._versioned = False  # the earlier release's upsert
        assert old.write("t", "u", "episode", "k1", "dog parcel", now=T0).ok  # an update
        assert old.write("t", "u", "episode", "k9", "late tea", now=T0).ok  # an insert
        old.flush()
        second = index.load("t", "u")
        assert second.versions == [0, None, 0, 0, 0, 0, None]
        assert second.tokens[1] == ("dog", "parcel") and second.tokens[-1] == ("late", "tea")
        _assert_same(second, _fresh(m, "u"))
        assert m.write("t", "u", "episode", "k1", "cat", now=T0).ok
        m.flush()
        third = index.load("t", "u")
        assert third.versions is not None and third.versions[1] not in (0, None) and third.versions[-1] is None
        _assert_same(third, _fresh(m, "u"))
    finally:
        m.close()
        old.close()


@PGVECTOR_ONLY
def test_a_tiered_store_on_postgres_rebuilds_from_the_stale_snapshot(pair: tuple[Memory, Memory],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiered store (Redis over PostgreSQL) keeps its vectors in the store of record: the same index and the
    same incremental rebuild; a second tiered instance sees a write, an erasure and a new row by version."""
    from backends import REDIS_URL, delete_prefix, require_redis

    require_redis()
    prefix = f"vd{uuid.uuid4().hex[:8]}:"
    settings = load_settings(env={}, store_url=_SERVER["uri"] + f"&schema=vd_t_{uuid.uuid4().hex[:8]}",
                             redis_url=REDIS_URL, preset="tiered", key_prefix=prefix, hybrid_candidates=8)
    a, b = Memory(settings=settings), Memory(settings=settings)
    try:
        for m in (a, b):
            m.use_relevance("hybrid", embedder=CrcBow32(), background=False)  # type: ignore[arg-type]
        assert _pg(a) and type(a.store).__name__ == "TieredStore"
        for i, w in enumerate(_WORDS):
            assert a.write("t", "u", "episode", f"w{i:02d}", w, now=T0).ok
        a.flush()
        mine = _rel(b).index
        mine.load("t", "u")  # type: ignore[union-attr]
        full = PgVectorIndex._full

        def no_full(self: PgVectorIndex, *args: Any) -> UserIndex:
            assert self is not mine, "b rebuilt its snapshot in full"
            return full(self, *args)

        monkeypatch.setattr(PgVectorIndex, "_full", no_full)
        for step in (lambda: a.write("t", "u", "episode", "w03", "parcel refund", now=T0),
                     lambda: a.forget("t", "u", "w05", now=T0),
                     lambda: a.write("t", "u", "episode", "w00a", "tea 北京", now=T0)):
            step()
            a.flush()
            got = mine.load("t", "u")  # type: ignore[union-attr]
            want = _fresh(a, "u")
            _assert_same(got, want)
            assert np.array_equal(got.bm25.scores(["parcel", "北京"]), want.bm25.scores(["parcel", "北京"]))
        assert next(r.key for r in b.recall("t", "u", 3, query="parcel refund", now=T0)) == "w03"
    finally:
        a.close()
        b.close()
        delete_prefix(prefix)


@PGVECTOR_ONLY
def test_concurrent_writers_never_hide_a_row_from_the_next_rebuild(pair: tuple[Memory, Memory]) -> None:
    """Versions follow commit order per user (upsert bumps the generation, then writes its rows with it): two
    instances rewriting vectors at once while a third rebuilds its snapshot over and over, the last rebuild
    equals a full build — a row committed after a snapshot's read always has a version above it."""
    import threading

    a, _ = pair
    user = f"u{next(_seq)}"
    for i, w in enumerate(_WORDS):
        assert a.write("t", user, "episode", f"c{i:02d}", w, now=T0).ok
    a.flush()
    reader = type(_rel(a).index)(a.store, CrcBow32.model_id)  # type: ignore[call-arg]
    ids = _rel(a).index.indexed("t", user)  # type: ignore[union-attr]
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(m: Memory, seed: int) -> None:
        rng = np.random.default_rng(seed)
        index = _rel(m).index
        try:
            for n in range(60):
                key = f"c{int(rng.integers(len(_WORDS))):02d}"
                index.upsert([VectorRow("t", user, key, ids[key][0], "episode", T0 + n, CrcBow32.model_id,  # type: ignore[union-attr]
                                        _vec(rng, CrcBow32.dim), (_WORDS[n % len(_WORDS)],))])
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            while not stop.is_set():
                reader.load("t", user)
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=write, args=(m, s)) for s, m in enumerate(pair)]
        looking = threading.Thread(target=read)
        looking.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        looking.join()
        assert not errors, errors
        _assert_same(reader.load("t", user), _fresh(a, user))
    finally:
        stop.set()
        reader.close()
