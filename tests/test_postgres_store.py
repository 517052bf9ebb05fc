"""PostgreSQL store of record against a real server: migrations, invariants in the database, purge, RLS."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import subprocess
import threading
import uuid

import psycopg
import pytest

import backends
from usermem import Memory, Op
from usermem.errors import ConfigError, IntegrityError
from usermem.model import AuditEvent, Kind, MemoryRecord, Source
from usermem.store.base import LiveQuery
from usermem.store.postgres import PostgresStore

pytestmark = [pytest.mark.postgres]
T0 = 1_790_000_000.0


@pytest.fixture
def pg_url(tmp_path):
    url = backends.postgres_url(tmp_path)
    yield url
    backends.drop_schema(tmp_path)


def _rec(i: int, user: str = "u1", key: str = "city", **kw) -> MemoryRecord:
    base = dict(id=uuid.uuid4().hex, tenant="acme", user_id=user, kind=Kind.FACT, key=key, value=f"v{i}",
                source=Source.USER_CONFIRMED, confidence=1.0, importance=0.9, created_at=T0 + i)
    base.update(kw)
    return MemoryRecord(**base)


def test_migrations_are_idempotent_and_safe_when_two_instances_start_at_once(pg_url):
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stores.append(PostgresStore(pg_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    from usermem.store.migrations import load_migrations

    every = load_migrations("postgres")
    with stores[0].sql() as c:
        pgvector = c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is not None
    latest = max(m.version for m in every if pgvector or not m.requires)  # optional ones pending without it
    assert {s.schema_version() for s in stores} == {latest}
    with psycopg.connect(backends.require_postgres()) as c:
        schema = pg_url.rsplit("schema=", 1)[1]
        n = c.execute(f'SELECT count(*) FROM "{schema}".schema_migrations').fetchone()[0]
        pgvector = c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is not None
    # every migration once; the optional pgvector one (0004) only where the extension exists
    assert n == len([m for m in every if not m.requires]) + (1 if pgvector else 0)
    for s in stores:
        s.close()
    again = PostgresStore(pg_url)  # a restart applies nothing new
    assert again.schema_version() == latest
    again.close()


def test_tenant_leads_every_primary_key_and_unique_index(pg_url):
    store = PostgresStore(pg_url)
    schema = store.schema
    with psycopg.connect(backends.require_postgres()) as c:
        rows = c.execute(
            "SELECT i.indexrelid::regclass::text, a.attname FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
            " JOIN pg_namespace n ON n.oid = t.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]"
            " WHERE n.nspname = %s AND (i.indisunique OR i.indisprimary) AND t.relname <> 'schema_migrations'",
            (schema,)).fetchall()
    store.close()
    assert len(rows) >= 4
    assert {col for _, col in rows} == {"tenant"}, rows


def test_database_refuses_a_second_current_version(pg_url):
    store = PostgresStore(pg_url)
    with store.transaction("acme", "u1") as tx:
        tx.insert(_rec(1))
    with pytest.raises(IntegrityError), store.transaction("acme", "u1") as tx:
        tx.insert(_rec(2))  # no supersede: a fork of the chain
    with store.transaction("acme", "u1") as tx:  # a refused insert left no half-done transaction
        head = tx.head("city")
        assert head is not None and head.value == "v1"
        with pytest.raises(IntegrityError):
            tx.supersede("not-current", "x", T0)
    assert store.count() == 1
    store.close()


def test_audit_log_is_append_only(pg_url):
    store = PostgresStore(pg_url)
    store.append_audit(AuditEvent(tenant="acme", at=T0, action="write", user_id="u1"))
    with psycopg.connect(backends.require_postgres(), options=f"-c search_path={store.schema}") as c:
        for stmt in ("UPDATE audit SET action='x'", "DELETE FROM audit", "TRUNCATE audit"):
            with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
                c.execute(stmt)
            c.rollback()
    assert len(store.audit_log(__import__("usermem.store.base", fromlist=["AuditQuery"]).AuditQuery("acme"))) == 1
    store.close()


def test_values_round_trip_exactly_including_what_jsonb_cannot_hold(pg_url):
    m = Memory(pg_url)
    odd = {"big": 1e20, "neg_zero": -0.0, "nul": "a\x00b", "zh": "杭州", "n": [1, 2.5, True]}
    plain = {"city": "杭州", "n": 3, "f": 0.1}
    assert m.write("acme", "u1", "fact", "odd", odd, source="user_confirmed", now=T0).op is Op.ADD
    assert m.write("acme", "u1", "fact", "plain", plain, source="user_confirmed", now=T0).op is Op.ADD
    got = {r.key: r.value for r in m.recall("acme", "u1", k=10, now=T0 + 1)}
    assert got["plain"] == plain
    assert got["odd"]["nul"] == "a\x00b" and isinstance(got["odd"]["big"], float)
    assert str(got["odd"]["neg_zero"]) == "-0.0"
    # the same value again is a NOOP (canonical JSON identical after the round trip)
    assert m.write("acme", "u1", "fact", "odd", odd, source="user_confirmed", now=T0 + 2).op is Op.NOOP
    store = m.store
    with store._conn("check") as c:  # ordinary values are JSONB, queryable in SQL
        kinds = dict(c.execute("SELECT key, jsonb_typeof(value) FROM memories").fetchall())
    assert kinds == {"plain": "object", "odd": None}
    m.close()


def test_purge_removes_the_bytes_from_the_table_files(pg_url):
    m = Memory(pg_url)
    secret = "SECRET-" + uuid.uuid4().hex
    m.write("acme", "u9", "fact", "occupation", secret, source="user_confirmed", now=T0)
    for i in range(50):
        m.write("acme", f"other{i}", "fact", "occupation", f"filler {i}", source="user_confirmed", now=T0)
    store = m.store
    paths = _relation_files(store)
    assert any(secret.encode() in p for p in paths.values())
    m.forget_user("acme", "u9", now=T0 + 10)
    assert m.purge(now=T0 + 10 + 31 * 86_400) == 1
    paths = _relation_files(store)
    assert paths and not any(secret.encode() in p for p in paths.values())
    assert m.store.count() == 50
    m.close()


def _relation_files(store: PostgresStore) -> dict[str, bytes]:
    with psycopg.connect(backends.require_postgres(), autocommit=True,
                         options=f"-c search_path={store.schema}") as c:
        c.execute("CHECKPOINT")
        datadir = c.execute("SHOW data_directory").fetchone()[0]
        files = {}
        for rel in ("memories", "documents"):
            path = c.execute("SELECT pg_relation_filepath(%s)", (rel,)).fetchone()[0]
            try:
                with open(f"{datadir}/{path}", "rb") as f:
                    files[rel] = f.read()
            except PermissionError:
                pytest.skip("cannot read PostgreSQL's data directory as this user")
    return files


def test_row_level_security_isolates_tenants_for_a_plain_role(pg_url, tmp_path):
    owner = PostgresStore(pg_url + "&rls=on")  # the owner enables and forces RLS once
    owner.close()
    role = "usermem_app_" + uuid.uuid4().hex[:8]
    schema = backends.schema_for(tmp_path)
    admin = psycopg.connect(backends.require_postgres(), autocommit=True)
    try:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')
        app_url = pg_url.replace(f"{backends.PG_USER}@", f"{role}@") + "&rls=on&purge_vacuum=none"
        m = Memory(app_url)
        m.write("a", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0)
        m.write("b", "u1", "fact", "city", "上海", source="user_confirmed", now=T0)
        assert [r.value for r in m.recall("a", "u1", now=T0 + 1)] == ["杭州"]
        # A query that forgets its tenant filter still sees only the tenant in scope.
        with m.store._conn("probe", "a") as c:
            assert c.execute("SELECT value #>> '{}' FROM memories").fetchall() == [("杭州",)]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("INSERT INTO memories (tenant, id, user_id, kind, key, value, source, confidence,"
                          " importance, created_at) VALUES ('b', 'x', 'u', 'fact', 'k', '1', 'system', 1, 1, 0)")
        with m.store._conn("probe", "nobody") as c:
            assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
        m.close()
    finally:
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.close()


def test_bad_configuration_fails_at_start_with_one_clear_error(pg_url):
    with pytest.raises(ConfigError) as e:
        Memory("postgresql://postgres@127.0.0.1:1/usermem")
    assert e.value.setting == "store_url" and "cannot connect" in str(e.value)
    with pytest.raises(ConfigError, match="store_url"):
        Memory(backends.pg_url("no_such_db_" + uuid.uuid4().hex[:6]))
    with pytest.raises(ConfigError, match="unknown store scheme"):
        Memory("mysql://localhost/x")
    with pytest.raises(ConfigError, match="schema"):
        PostgresStore(pg_url.split("?")[0] + "?schema=Bad-Name")


def test_documents_and_live_queries(pg_url):
    store = PostgresStore(pg_url)
    store.put_doc("acme", "sessions", "s2", {"a": "二"}, now=T0, user_id="u1")
    store.put_doc("acme", "sessions", "s1", {"a": 1}, now=T0, user_id="u1", expires_at=T0 + 10)
    assert store.list_docs("acme", "sessions") == [("s1", {"a": 1}), ("s2", {"a": "二"})]
    assert store.list_docs("acme", "sessions", now=T0 + 10) == [("s2", {"a": "二"})]
    assert store.get_doc("acme", "sessions", "s1", now=T0 + 10) is None
    assert store.delete_user_docs("acme", "u1") == 2
    store.bulk_insert([_rec(i, user=f"u{i % 3}", key=f"k{i}") for i in range(30)])
    assert store.count("acme") == 30
    live = store.live(LiveQuery("acme", "u1", T0 + 100, keys=["k1", "k4", "k5"]))
    assert sorted(r.key for r in live) == ["k1", "k4"]
    scores = store.live_scores(LiveQuery("acme", "u1", T0 + 100))
    assert len(scores) == 10 and {s.id for s in scores} == {r.id for r in store.live(LiveQuery("acme", "u1", T0))}
    assert [r.id for r in store.get_many("acme", [scores[1].id, "nope", scores[0].id])] == [scores[1].id, scores[0].id]
    assert store.users("acme") == ["u0", "u1", "u2"]
    store.close()


# -- concurrency: 8 processes x 500 writes on overlapping keys of a few users ---------------------------

USERS = ["u1", "u2", "u3"]
KEYS = ["city", "occupation", "reply_length", "likes"]
SOURCES = ["user_confirmed", "extracted", "agent_confirmed"]


def _writer(url: str, worker: int, n: int, out: mp.Queue) -> None:
    import random

    rng = random.Random(worker)
    m = Memory(url)
    acked = 0
    try:
        for i in range(n):
            user, key = rng.choice(USERS), rng.choice(KEYS)
            kind = "preference" if key in ("reply_length", "likes") else "fact"
            r = m.write("acme", user, kind, key, f"w{worker}-{i}", source=rng.choice(SOURCES), now=T0 + i)
            acked += r.op in (Op.ADD, Op.UPDATE)
        out.put((worker, acked, None))
    except BaseException as exc:  # reported to the parent
        out.put((worker, acked, f"{type(exc).__name__}: {exc}"))
    finally:
        m.close()


@pytest.mark.timeout(300)
def test_eight_processes_keep_chains_linear(pg_url):
    Memory(pg_url).close()  # migrate once
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(pg_url, w, 500, out)) for w in range(8)]
    for p in procs:
        p.start()
    results = [out.get(timeout=280) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    errors = [r[2] for r in results if r[2]]
    assert not errors, errors
    acked = sum(r[1] for r in results)
    m = Memory(pg_url)
    total_versions = 0
    for user in USERS:
        for key in KEYS:
            versions = m.history("acme", user, key)
            total_versions += len(versions)
            current = [v for v in versions if v.is_current]
            if versions:
                assert len(current) == 1 and current[0] == versions[-1]
            for prev, nxt in itertools.pairwise(versions):  # one linear chain, in order
                assert nxt.prev_version_id == prev.id and prev.superseded_by == nxt.id
            assert versions[0].prev_version_id is None if versions else True
    assert total_versions == acked  # every acknowledged write is a version; nothing lost, nothing extra
    audit = m.audit("acme", limit=100_000)
    assert sum(1 for e in audit if e.op in ("ADD", "UPDATE")) == acked
    assert len([e for e in audit if e.action == "write"]) == 8 * 500
    m.close()


def test_ensure_services_script_is_idempotent():
    r = subprocess.run(["bash", str(backends.ROOT / "scripts" / "ensure_services.sh")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "PostgreSQL: ok" in r.stdout and "Redis: ok" in r.stdout


def test_libpq_options_in_the_url_are_kept_beside_the_schema(pg_url):
    store = PostgresStore(pg_url + "&options=-c%20synchronous_commit%3Doff&application_name=um%20test")
    with store._conn("probe") as c:
        assert c.execute("SHOW synchronous_commit").fetchone() == ("off",)
        assert c.execute("SHOW application_name").fetchone() == ("um test",)
        assert c.execute("SELECT current_schema()").fetchone() == (store.schema,)
    store.close()


def test_migrations_that_need_an_extension_wait_for_it(pg_url, monkeypatch):
    """An optional migration (`-- usermem: requires extension x`) is applied where x is installed, with
    @extschema:x@ replaced; where x is missing it stays pending, and the store still starts."""
    from usermem.store import migrations

    real = migrations.load_migrations("postgres")
    vector = [m for m in real if m.requires]
    assert [(m.name, m.requires) for m in vector] == [("0004_relevance_vectors.sql", ("vector",)),
                                                      ("0009_relevance_row_version.sql", ("vector",))]
    extra = [
        migrations.Migration(98, "0098_plpgsql.sql", "CREATE TABLE t98 (x text DEFAULT '@extschema:plpgsql@')",
                             ("plpgsql",)),
        migrations.Migration(99, "0099_missing.sql", "CREATE TABLE t99 (x int)", ("usermem_no_such_extension",)),
    ]
    monkeypatch.setattr(migrations, "load_migrations", lambda backend: [*real, *extra])
    store = PostgresStore(pg_url)
    with store.sql() as c:
        applied = {r[0] for r in c.execute("SELECT version FROM schema_migrations")}
        assert c.execute("SELECT column_default FROM information_schema.columns WHERE table_name='t98'"
                         " AND table_schema=current_schema()").fetchone()[0] == "'\"pg_catalog\"'::text"
        assert c.execute("SELECT to_regclass('t99')").fetchone()[0] is None
        pgvector = c.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is not None
    assert 98 in applied and 99 not in applied
    # pgvector decides migration 0004 and the declared capability (Debian's PostgreSQL 15 has no pgvector)
    assert (4 in applied) == pgvector and (9 in applied) == pgvector
    assert store.capabilities.vectors == ("pgvector" if pgvector else None)
    store.close()
    again = PostgresStore(pg_url)  # a restart retries the pending one and applies nothing twice
    assert again.schema_version() == 98
    with again.sql() as c:
        assert c.execute("SELECT count(*) FROM schema_migrations WHERE version = 98").fetchone()[0] == 1
    again.close()


def test_read_ahead_holds_a_plug_in_read_and_the_records_of_live_scores_in_nested_blocks(pg_url):
    """One pipeline per block: a plug-in's `sql` read comes back through sql_read once (then it reads again),
    a live_scores read ahead answers get_many of its rows without a round trip, an inner block finds what
    the outer holds; every result equals the same read made outside any block."""
    from dataclasses import replace

    from test_round_trips import counting
    from usermem.store.base import ReadAhead

    store = PostgresStore(pg_url)
    try:
        records = [_rec(i, key=f"k{i}", value={"n": i, "text": f"v\u00e9{i}"}) for i in range(6)]
        store.bulk_insert(records)
        q = LiveQuery("acme", "u1", T0 + 100)
        some = replace(q, keys=["k1", "k3", "k4"])
        text, params = "SELECT count(*) FROM memories WHERE tenant=%s AND user_id=%s", ("acme", "u1")
        plain = (store.live_scores(some), store.sql_read("acme", text, params), store.live_scores(q))
        ids = sorted(r.id for r in plain[0])
        want = store.get_many("acme", ids)
        outer = [ReadAhead("sql", ("acme", text, params)), ReadAhead("live_scores", (some,))]
        with counting() as trips, store.read_ahead(outer):
            with store.read_ahead([ReadAhead("live_scores", (q,)), ReadAhead("get_doc", ("acme", "ns", "x"))]):
                got = (store.live_scores(some), store.sql_read("acme", text, params), store.live_scores(q))
                assert trips["pg"] == 2  # one pipeline per block
                assert store.get_many("acme", ids) == want
                assert trips["pg"] == 2  # the records came with the rows
            assert store.sql_read("acme", text, params) == plain[1]  # held once: read again
            assert trips["pg"] == 3
        assert got == plain and got[1] == [(6,)]
    finally:
        store.close()
