"""SQLite-specific guarantees: bytes on disk, schema-level invariants, multi-process writers."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem import IntegrityError, Memory, Op
from usermem.store.sqlite import SQLiteStore

T0 = 1_790_000_000.0
DAY = 86_400.0


def _file_bytes(db: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(db) + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


def test_wal_mode_and_migrations_are_idempotent(tmp_path):
    path = tmp_path / "m.db"
    a = SQLiteStore(str(path))
    b = SQLiteStore(str(path))  # second open: nothing re-applied
    assert a._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert a.schema_version() == b.schema_version() >= 2
    a.close()
    b.close()


def test_vector_tables_are_migrated_and_a_database_with_the_old_ad_hoc_tables_keeps_its_rows(tmp_path):
    from usermem.store import migrations

    path = tmp_path / "old.db"
    c = sqlite3.connect(path)  # a database written by a version whose vector index made its own tables
    c.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at REAL)")
    for m in migrations.load_migrations("sqlite"):
        if m.version <= 3:
            c.executescript(m.sql)
            c.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (m.version, m.name))
    c.execute("CREATE TABLE relevance_vectors (tenant TEXT NOT NULL, user_id TEXT NOT NULL, key TEXT NOT NULL,"
              " memory_id TEXT NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL, model TEXT NOT NULL, dim INTEGER"
              " NOT NULL, vec BLOB NOT NULL, tokens TEXT NOT NULL, PRIMARY KEY (tenant, user_id, key))")
    c.execute("INSERT INTO relevance_vectors VALUES ('t', 'u', 'k', 'id1', 'fact', 0, 'm', 1, x'0000803f', 'a b')")
    c.commit()
    c.close()
    store = SQLiteStore(str(path))
    assert store.schema_version() == max(m.version for m in migrations.load_migrations("sqlite")) >= 4
    assert store.capabilities.vectors == "sqlite" and store.capabilities.dialect == "sqlite"
    with store.sql() as conn:
        assert conn.execute("SELECT key, tokens FROM relevance_vectors").fetchall() == [("k", "a b")]
        assert conn.execute("SELECT count(*) FROM relevance_generation").fetchone()[0] == 0
    store.close()


def test_sql_write_blocks_are_transactions_of_the_store(tmp_path):
    store = SQLiteStore(str(tmp_path / "t.db"))
    with store.sql(write=True) as c:
        c.execute("INSERT INTO relevance_generation VALUES ('t', 'u', 1)")
    with pytest.raises(IntegrityError), store.sql(write=True) as c:
        c.execute("UPDATE relevance_generation SET gen = 2")
        c.execute("INSERT INTO relevance_generation VALUES ('t', 'u', 3)")  # duplicate key: all rolled back
    with store.sql() as c:
        assert c.execute("SELECT gen FROM relevance_generation").fetchall() == [(1,)]
    store.close()


def test_rejected_sensitive_values_never_reach_the_file(tmp_path):
    db = tmp_path / "m.db"
    m = Memory(f"sqlite:///{db}")
    secrets = ["11010519491231002X", "6222021234567890128", "Qw3rty!9zz", "sk-abcdefghijklmnopqrstuvwx123"]
    results = [
        m.write("t", "u", "fact", "notes", f"身份证 {secrets[0]}", now=T0),
        m.write("t", "u", "fact", "notes", f"卡号 {secrets[1]}", now=T0),
        m.write("t", "u", "fact", "notes", f"我的密码是{secrets[2]}", now=T0),
        m.write("t", "u", "fact", "notes", f"api key {secrets[3]}", now=T0),
        m.write("t", "u", "fact", "password", "plain-secret-value", now=T0),
    ]
    assert [r.op for r in results] == [Op.REJECT] * 5
    m.close()
    raw = _file_bytes(db)
    for s in [*secrets, "plain-secret-value"]:
        assert s.encode() not in raw


def test_purge_removes_value_bytes_from_the_file(tmp_path):
    db = tmp_path / "m.db"
    m = Memory(f"sqlite:///{db}")
    marker = "UNIQUE-MARKER-柠檬-7f3a"
    for i in range(50):
        m.write("t", "gone", "fact", f"k{i}", f"{marker}-{i}", now=T0)
    m.write("t", "stays", "fact", "city", "Hangzhou", now=T0)
    m.flush()  # the background indexer is done before the checkpoint
    with m.store.sql() as c:  # under the store's lock: never beside another thread's statement
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert marker.encode() in _file_bytes(db)
    assert m.forget_user("t", "gone", now=T0 + DAY) == 50
    assert m.recall("t", "gone", now=T0 + DAY) == []
    assert m.purge(now=T0 + DAY, retention_days=0) == 50
    m.close()
    raw = _file_bytes(db)
    assert marker.encode() not in raw
    assert b"Hangzhou" in raw


def test_schema_refuses_a_second_current_version(tmp_path):
    store = SQLiteStore(str(tmp_path / "m.db"))
    m = Memory(store=store)
    first = m.write("t", "u", "fact", "city", "Hangzhou", now=T0).memory
    with pytest.raises(IntegrityError), store.transaction("t", "u") as tx:
        tx.insert(first.with_changes(id="forked-version", value="Shanghai"))
    assert [r.value for r in m.history("t", "u", "city")] == ["Hangzhou"]


def test_audit_log_is_append_only(tmp_path):
    store = SQLiteStore(str(tmp_path / "m.db"))
    m = Memory(store=store)
    m.write("t", "u", "fact", "city", "Hangzhou", now=T0)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("UPDATE audit SET op='NOOP'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("DELETE FROM audit")


def test_failed_batch_leaves_nothing_half_written(tmp_path, monkeypatch):
    store = SQLiteStore(str(tmp_path / "m.db"))
    m = Memory(store=store)
    m.write("t", "u", "fact", "city", "Hangzhou", now=T0)
    class Boom(Exception):
        pass

    calls = {"n": 0}
    from usermem.store import sqlite as sqlite_mod

    real = sqlite_mod._SQLiteTx.insert

    def flaky(self, record):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Boom
        return real(self, record)

    monkeypatch.setattr(sqlite_mod._SQLiteTx, "insert", flaky)
    with pytest.raises(Boom):
        m.write_many("t", "u", [{"kind": "fact", "key": "city", "value": "Shanghai"},
                                {"kind": "fact", "key": "occupation", "value": "doctor"}], now=T0 + 1)
    monkeypatch.setattr(sqlite_mod._SQLiteTx, "insert", real)
    assert [r.value for r in m.history("t", "u", "city")] == ["Hangzhou"]
    assert m.history("t", "u", "occupation") == []
    assert len(m.audit("t")) == 1  # the failed batch's audit entries rolled back with it


def _writer(path: str, worker: int, n: int) -> None:
    m = Memory(f"sqlite:///{path}")
    for i in range(n):
        # overlapping keys, equal authority: every write is an UPDATE or ADD, never a lost one
        m.write("t", "shared-user", "fact", f"k{i % 5}", f"w{worker}-{i}", source="extracted", now=T0 + i)
    m.close()


def test_concurrent_processes_keep_chains_linear(tmp_path):
    path = str(tmp_path / "m.db")
    Memory(f"sqlite:///{path}").close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 60)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    m = Memory(f"sqlite:///{path}")
    total = 0
    for k in range(5):
        chain = m.history("t", "shared-user", f"k{k}")
        total += len(chain)
        assert sum(1 for r in chain if r.is_current) == 1
        # linear: each version points at its predecessor, and only the last is current
        for prev, nxt in itertools.pairwise(chain):
            assert prev.superseded_by == nxt.id and nxt.prev_version_id == prev.id
        assert chain[0].prev_version_id is None
    assert total == 4 * 60  # nothing lost: every write had a distinct value
    writes = [e for e in m.audit("t", limit=1000) if e.action == "write"]
    assert len(writes) == 240


def test_concurrent_threads_share_one_memory(tmp_path):
    m = Memory(f"sqlite:///{tmp_path / 'm.db'}")

    def work(w: int) -> None:
        for i in range(50):
            m.write("t", "u", "preference", f"k{i % 3}", f"t{w}-{i}", now=T0 + i)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        chain = m.history("t", "u", f"k{k}")
        assert sum(1 for r in chain if r.is_current) == 1
    assert sum(len(m.history("t", "u", f"k{k}")) for k in range(3)) == 200


def test_tenants_are_isolated(make_memory):
    m = make_memory()
    m.write("acme", "same-user", "fact", "city", "Hangzhou", now=T0)
    m.write("globex", "same-user", "fact", "city", "Berlin", now=T0)
    assert [r.value for r in m.recall("acme", "same-user", now=T0)] == ["Hangzhou"]
    assert [r.value for r in m.recall("globex", "same-user", now=T0)] == ["Berlin"]
    acme_id = m.recall("acme", "same-user", now=T0)[0].id
    assert m.get("globex", acme_id) is None
    assert m.forget_user("globex", "same-user", now=T0) == 1
    assert [r.value for r in m.recall("acme", "same-user", now=T0)] == ["Hangzhou"]
    assert all(e.tenant == "acme" for e in m.audit("acme"))


# --- random sequences, judged on the file's bytes ------------------------------------------------------

_SENSITIVE = ["11010519491231002X", "6222021234567890128", "Pa55word!x"]
_SENSITIVE_TEXT = {_SENSITIVE[0]: "身份证 {}", _SENSITIVE[1]: "卡号 {}", _SENSITIVE[2]: "密码是{}"}

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(["a", "b"]), st.sampled_from(["city", "likes", "notes"]),
                  st.integers(0, 30)),
        st.tuples(st.just("sensitive"), st.sampled_from(["a", "b"]), st.sampled_from(_SENSITIVE)),
        st.tuples(st.just("forget_user"), st.sampled_from(["a", "b"])),
    ),
    min_size=1, max_size=25,
)


@settings(max_examples=examples(25), deadline=None)
@given(ops=_ops)
def test_file_never_holds_rejected_or_purged_values(ops):
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "m.db"
        m = Memory(f"sqlite:///{db}")
        written: dict[str, set[str]] = {"a": set(), "b": set()}
        forgotten: set[str] = set()
        now = T0
        for op in ops:
            now += 1
            if op[0] == "write":
                value = f"val-{op[1]}-{op[3]}-marker"
                if m.write("t", op[1], "fact", op[2], value, now=now).op in (Op.ADD, Op.UPDATE):
                    written[op[1]].add(value)
            elif op[0] == "sensitive":
                assert m.write("t", op[1], "fact", "notes", _SENSITIVE_TEXT[op[2]].format(op[2]), now=now).op is Op.REJECT
            else:
                m.forget_user("t", op[1], now=now)
                forgotten |= written[op[1]]
                written[op[1]] = set()
        m.purge(now=now, retention_days=0)
        m.close()
        raw = _file_bytes(db)
        for s in _SENSITIVE:
            assert s.encode() not in raw
        for value in forgotten - written["a"] - written["b"]:
            assert value.encode() not in raw
