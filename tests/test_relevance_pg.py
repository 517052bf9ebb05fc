"""Hybrid recall on PostgreSQL: the pgvector path for real (PostgreSQL 16 + pgvector from the
`pgserver` wheel, started in a temp directory), and the announced lexical fallback on a server
without the `vector` extension (Debian's PostgreSQL 15 on 127.0.0.1)."""

from __future__ import annotations

import logging
import uuid

import pytest

import backends
from backends import drop_schema, postgres_url
from usermem import Memory
from usermem.relevance.hybrid import _NOTICED
from usermem.relevance.reindex import plan_reindex, run_reindex
from usermem.relevance.vectors import PgVectorIndex

pytestmark = pytest.mark.postgres

T0 = 1_790_000_000.0
DAY = 86_400.0
EPISODES = [
    ("ep.refund", "Customer asked for a refund of order 8812 (broken blender); we refunded 49 EUR", 60),
    ("ep.login", "Helped the user reset their password after the account was locked", 20),
    ("ep.shipping", "The parcel was late; we contacted the courier and upgraded shipping", 5),
    ("ep.zh.refund", "用户对耳机不满意申请退货退款，我们安排了上门取件并退回了货款", 40),
    ("ep.zh.coupon", "给用户发了一张九折优惠券作为补偿", 2),
]


@pytest.fixture(scope="module")
def pgvector_server():
    with backends.pgserver_uri() as uri:
        yield uri


@pytest.fixture
def pgv_memory(pgvector_server):
    schema = "relv_" + uuid.uuid4().hex[:10]
    m = Memory(pgvector_server + f"&schema={schema}")
    yield m
    m.close()


def _load(m: Memory) -> None:
    for key, text, days_ago in EPISODES:
        assert m.write("acme", "u1", "episode", key, text, now=T0 - days_ago * DAY,
                       event_at=T0 - days_ago * DAY).ok
    m.flush()


def test_pgvector_index_is_used_and_ranks_by_meaning(pgv_memory):
    rel = pgv_memory.relevance
    assert isinstance(rel.index, PgVectorIndex) and rel.use_candidates
    _load(pgv_memory)
    with pgv_memory.store.connection() as conn:  # type: ignore[attr-defined]
        typ = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                           " WHERE attrelid = 'relevance_vectors'::regclass AND attname = 'vec'").fetchone()[0]
        n = conn.execute("SELECT count(*) FROM relevance_vectors").fetchone()[0]
    assert typ.endswith("vector") and n == len(EPISODES)
    top = pgv_memory.recall_scored("acme", "u1", 2, query="what did we do last time about the refund", now=T0)
    assert top[0].memory.key == "ep.refund" and top[0].relevance == 1.0
    assert pgv_memory.recall("acme", "u1", 1, query="上次退货退款怎么处理的", now=T0)[0].key == "ep.zh.refund"
    recent = pgv_memory.recall("acme", "u1", 5, query="refund", now=T0, event_from=T0 - 30 * DAY)
    assert {r.key for r in recent} == {"ep.login", "ep.shipping", "ep.zh.coupon"}
    # the database's own cosine agrees with numpy on the same vectors
    q = rel.embedder.query("refund")
    got = rel.index.dense("acme", "u1", q, limit=5)
    assert max(got, key=got.get) in ("ep.refund", "ep.zh.refund")


def test_pgvector_erasure_and_purge(pgv_memory):
    _load(pgv_memory)
    index = pgv_memory.relevance.index
    pgv_memory.forget("acme", "u1", "ep.refund", now=T0)
    assert "ep.refund" not in index.indexed("acme", "u1")
    pgv_memory.forget_user("acme", "u1", now=T0)
    assert index.indexed("acme", "u1") == {}
    pgv_memory.purge(now=T0 + 1, retention_days=0)
    with pgv_memory.store.connection() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT count(*) FROM relevance_vectors").fetchone()[0] == 0


def test_pgvector_reindex_after_vectors_are_lost(pgv_memory):
    _load(pgv_memory)
    with pgv_memory.store.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("DELETE FROM relevance_vectors WHERE key <> 'ep.login'")
    plan = plan_reindex(pgv_memory, now=T0)
    assert len(plan.todo) == len(EPISODES) - 1 and plan.current == 1
    run_reindex(pgv_memory, plan)
    assert set(pgv_memory.relevance.index.indexed("acme", "u1")) == {k for k, _, _ in EPISODES}


def test_postgres_without_pgvector_falls_back_to_lexical_and_says_so_once(tmp_path, caplog):
    url = postgres_url(tmp_path)
    _NOTICED.clear()
    caplog.set_level(logging.WARNING, logger="usermem.relevance")
    m = Memory(url)
    try:
        import psycopg

        with psycopg.connect(url.split("?")[0]) as c:
            if c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone():
                pytest.skip("this PostgreSQL has pgvector; the fallback cannot be observed here")
        assert m.relevance.index is None and m.relevance.embedder is None
        notices = [r for r in caplog.records if "lexical" in r.message]
        assert len(notices) == 1 and "pgvector" in notices[0].message
        Memory(url).close()  # a second instance in the same process does not repeat it
        assert len([r for r in caplog.records if "lexical" in r.message]) == 1
        _load(m)
        assert m.recall("acme", "u1", 1, query="blender refund", now=T0)[0].key == "ep.refund"
        assert m.recall("acme", "u1", 1, query="优惠券", now=T0)[0].key == "ep.zh.coupon"
    finally:
        m.close()
        drop_schema(tmp_path)


def test_vector_tables_come_from_the_migrations_and_fall_under_row_level_security(pgvector_server):
    """The pgvector tables are made by the store's (optional) migration 0004, declared in the store's
    capabilities, and isolated by tenant for a plain role with rls=on, like the memories."""
    import psycopg

    from usermem.store.postgres import PostgresStore

    base = pgvector_server
    schema = "relv_" + uuid.uuid4().hex[:10]
    owner = PostgresStore(base + f"&schema={schema}&rls=on")
    assert owner.capabilities.vectors == "pgvector" and owner.capabilities.dialect == "postgres"
    with owner.sql() as c:
        assert c.execute("SELECT 1 FROM schema_migrations WHERE version = 4").fetchone() == (1,)
        forced = c.execute("SELECT relname, relrowsecurity AND relforcerowsecurity FROM pg_class WHERE oid IN"
                           " ('relevance_vectors'::regclass, 'relevance_generation'::regclass)").fetchall()
    assert sorted(forced) == [("relevance_generation", True), ("relevance_vectors", True)]
    owner.close()
    role = "usermem_vec_" + uuid.uuid4().hex[:8]
    admin = psycopg.connect(base, autocommit=True)
    try:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')
        app = Memory(base.replace("postgres:@", f"{role}:@", 1) + f"&schema={schema}&rls=on&purge_vacuum=none")
        assert app.store.capabilities.row_level_security
        for tenant in ("a", "b"):
            assert app.write(tenant, "u1", "episode", "ep.refund", f"refund for {tenant}", now=T0).ok
        app.flush()
        index = app._relevance.index
        assert set(index.indexed("a", "u1")) == {"ep.refund"}
        with app.store.sql("a") as c:  # a statement without a tenant filter sees only the tenant in scope
            assert c.execute("SELECT tenant FROM relevance_vectors").fetchall() == [("a",)]
            assert c.execute("SELECT tenant FROM relevance_generation").fetchall() == [("a",)]
        with app.store.sql("nobody") as c:
            assert c.execute("SELECT count(*) FROM relevance_vectors").fetchone()[0] == 0
        with pytest.raises(Exception, match="row-level security"), app.store.sql("a", write=True) as c:
            c.execute("INSERT INTO relevance_generation (tenant, user_id, gen) VALUES ('b', 'x', 1)")
        app.forget_user("a", "u1", now=T0)
        with app.store.sql() as c:  # the maintenance scope sees every tenant
            assert c.execute("SELECT tenant FROM relevance_vectors").fetchall() == [("b",)]
        app.close()
    finally:
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.close()


def test_a_warm_query_recall_searches_the_cached_matrix(pgv_memory, pgvector_server, monkeypatch):
    """The dense search of a query recall runs over the user's cached matrix: the only statement on the
    vector tables is the generation check; the planner reuses the recall's contract set; the round trips are counted (tests/test_round_trips.py's
    counter) so that a statement added to the query path fails here. The ranking equals the database's own
    exact search (`dense_db`, what a user over the cache's byte budget gets)."""
    import psycopg

    from test_round_trips import counting

    _load(pgv_memory)
    query = "what did we do last time about the refund"
    first = pgv_memory.recall_scored("acme", "u1", 3, query=query, now=T0)  # builds the snapshot
    statements: list[str] = []

    with counting() as trips:
        execute = psycopg.Cursor.execute  # the counting one

        def seen(self, query, *args, **kw):  # type: ignore[no-untyped-def]
            statements.append(str(query))
            return execute(self, query, *args, **kw)

        monkeypatch.setattr(psycopg.Cursor, "execute", seen)
        got = pgv_memory.recall_scored("acme", "u1", 3, query=query, now=T0)
        monkeypatch.undo()
    on_vectors = [s for s in statements if "relevance_" in s]
    assert on_vectors == ["SELECT gen, erased FROM relevance_generation WHERE tenant=%s AND user_id=%s"], on_vectors
    # One pipeline: the tenant's contract documents (once: the planner takes the recall's set) and the
    # generation; then one pipeline: the candidates' ScoreRows with their records (the winners' records come
    # from it). Was 4 (each of these a trip, the winners' records a fourth), and 6 before that (the documents
    # twice, the database's vector search: 13-16 ms at 5,000 memories).
    assert trips["pg"] == 2, (trips, statements)
    assert sum("FROM documents" in s for s in statements) == 1, statements
    assert not any("FROM memories WHERE tenant=%s AND id = ANY" in s for s in statements), statements
    assert [(s.memory.id, s.score) for s in got] == [(s.memory.id, s.score) for s in first]
    # the same recall one read at a time (RecallPipeline.candidates_ahead off): 4 round trips, equal results
    recall = pgv_memory._recall
    recall.candidates_ahead = False
    try:
        with counting() as one_by_one:
            reference = pgv_memory.recall_scored("acme", "u1", 3, query=query, now=T0)
    finally:
        recall.candidates_ahead = True
    assert one_by_one["pg"] == 4, one_by_one
    assert reference == got
    # after a write by another instance: one more round trip, the rows written since the snapshot (migration
    # 0009's versions)
    other = Memory(pgvector_server + f"&schema={pgv_memory.store.schema}")
    try:
        assert other.write("acme", "u1", "episode", "ep.refund.extra", "refund of the blender again", now=T0).ok
        other.flush()
    finally:
        other.close()
    statements.clear()
    with counting() as after_write:
        monkeypatch.setattr(psycopg.Cursor, "execute", seen)
        pgv_memory.recall_scored("acme", "u1", 3, query=query, now=T0)
        monkeypatch.undo()
    assert after_write["pg"] <= trips["pg"] + 1, (after_write, statements)
    on_vectors = [s for s in statements if "relevance_" in s]
    assert len(on_vectors) == 2 and "ver > %s" in on_vectors[1], on_vectors  # the generation, the rows since
    index = pgv_memory.relevance.index
    q = pgv_memory.relevance.embedder.query(query)
    local, in_db = index.dense("acme", "u1", q, limit=3), index.dense_db("acme", "u1", q, limit=3)
    assert set(local) == set(in_db) and all(abs(local[k] - in_db[k]) < 1e-5 for k in local)
