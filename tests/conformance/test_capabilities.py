"""Every store declares what it can do, and gives plug-ins SQL access to the store of record."""

from __future__ import annotations

import pytest

from usermem.errors import StoreError
from usermem.store.base import Store, StoreCapabilities

T0 = 1_790_000_000.0
# backend -> (dialect, tiers); vectors: SQLite always; Debian's PostgreSQL 15 has no pgvector.
EXPECTED = {"sqlite": ("sqlite", False), "postgres": ("postgres", False), "tiered": ("postgres", True)}


def test_capabilities_are_declared(make_memory, backend):
    store = make_memory().store
    assert isinstance(store, Store)
    caps = store.capabilities
    assert isinstance(caps, StoreCapabilities)
    dialect, tiers = EXPECTED[backend]
    assert (caps.dialect, caps.tiers) == (dialect, tiers)
    assert caps.vectors == ("sqlite" if dialect == "sqlite" else caps.vectors)
    assert (caps.erase_tiers is not None) == tiers and (caps.drop_local is not None) == tiers
    assert caps.serialised == (backend == "sqlite")
    if tiers:  # erasing the tiers of a user with nothing cached succeeds (and is idempotent)
        caps.erase_tiers("acme", "nobody")
        caps.erase_tiers("acme", "nobody", ["k"])
        assert caps.drop_local("acme", "nobody") == 0
    with pytest.raises(AttributeError):
        caps.tiers = not tiers  # type: ignore[misc]


def test_sql_gives_plugins_the_store_of_record(make_memory):
    m = make_memory()
    store = m.store
    mark = "?" if store.capabilities.dialect == "sqlite" else "%s"
    m.write("acme", "u1", "fact", "city", "Hangzhou", now=T0)
    with store.sql("acme") as c:
        assert c.execute(f"SELECT count(*) FROM memories WHERE tenant={mark}", ("acme",)).fetchone()[0] == 1
    # write=True is one transaction: an error rolls every statement of the block back
    with pytest.raises(RuntimeError), store.sql("acme", write=True) as c:
        c.execute("DELETE FROM documents")
        c.execute(f"UPDATE memories SET importance=0.5 WHERE tenant={mark}", ("acme",))
        raise RuntimeError("abort")
    assert m.recall("acme", "u1", now=T0 + 1)[0].importance != 0.5
    with store.sql("acme", write=True) as c:
        c.execute(f"UPDATE memories SET importance=0.25 WHERE tenant={mark}", ("acme",))
    assert m.recall("acme", "u1", now=T0 + 1)[0].importance == 0.25
    store.analyze()  # refreshes planner statistics; the store keeps answering
    assert store.count("acme") == 1 and store.schema_version() >= 3


def test_sql_errors_are_store_errors(make_memory):
    store = make_memory().store
    with pytest.raises(StoreError), store.sql() as c:
        c.execute("SELECT * FROM no_such_table")
    with pytest.raises(StoreError), store.sql(write=True) as c:
        c.execute("SELECT * FROM no_such_table")
    assert store.count() == 0  # the connection is usable afterwards
