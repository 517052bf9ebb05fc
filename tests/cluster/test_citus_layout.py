"""What the Citus layout of docs/scaling.md needs from the schema, checked on a real PostgreSQL (no Citus here).

Citus distributes a table by one column and can enforce a primary key or unique index only if it contains
that column; a statement is routed to one shard when it filters on it. With `tenant` as the distribution
column: every key of the distributed tables includes `tenant`, and every fixed statement but the listed
multi-shard ones filters on `tenant`.
"""

from __future__ import annotations

import psycopg
import pytest

from usermem.bench.cluster import PgPair
from usermem.store.postgres import PostgresStore
from usermem.store.sql import POSTGRES

pytestmark = [pytest.mark.postgres, pytest.mark.cluster]
DISTRIBUTED = ("memories", "audit", "documents", "relevance_vectors", "relevance_generation")
MULTI_SHARD = {"count", "purge_where", "schema_version"}  # docs/scaling.md, "What changes" items 5 and 1


def test_every_unique_key_of_a_distributed_table_contains_the_tenant(pg_pair: PgPair) -> None:
    PostgresStore(pg_pair.url(schema="citus")).close()  # migrate
    with psycopg.connect(pg_pair.url(), autocommit=True) as c:
        rows = c.execute("""
            SELECT t.relname, i.relname, array_agg(a.attname ORDER BY a.attnum)
            FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_namespace n ON n.oid = t.relnamespace
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(x.indkey)
            WHERE n.nspname = 'citus' AND x.indisunique GROUP BY 1, 2""").fetchall()
    keys = {(table, index): cols for table, index, cols in rows if table in DISTRIBUTED}
    assert {t for t, _ in keys} >= {"memories", "audit", "documents"}
    assert any(i == "memories_one_current" for _, i in keys)  # the partial index that refuses a fork
    assert all("tenant" in cols for cols in keys.values()), keys


def test_every_fixed_statement_but_the_multi_shard_ones_is_routed_by_tenant() -> None:
    for name, text in POSTGRES.stmt.items():
        if name in MULTI_SHARD:
            continue
        assert "tenant=%s" in text.replace(" ", "") or text.startswith("INSERT INTO"), (name, text)
        if text.startswith("INSERT INTO"):
            assert "(tenant," in text or ", tenant," in text, (name, text)
