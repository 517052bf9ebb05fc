"""Issue 12 item 1, repair path: rows stored with non-finite numbers before they were refused are repaired by
migration 0005 (both backends) the next time the store opens; afterwards every read of that user works again."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

import backends
from usermem import Memory

T0 = 1_790_000_000.0
INF, NAN = float("inf"), float("nan")


def _poison(execute, dialect: str) -> None:
    """What a pre-fix server stored: infinities (and NaN where the backend keeps it) in every numeric column."""
    nan = NAN if dialect == "postgres" else None  # SQLite stores NaN as NULL (NOT NULL columns refused it)
    # (importance and confidence never held one: both schemas CHECK BETWEEN 0 AND 1)
    execute("UPDATE memories SET created_at = ?, expires_at = ?, event_at = ?, last_used_at = ?"
            " WHERE key = 'city'", (INF, -INF, INF, -INF))
    execute("UPDATE memories SET expires_at = ? WHERE key = 'occupation'", (INF,))
    if nan is not None:
        execute("UPDATE memories SET last_confirmed_at = ?, event_at = ? WHERE key = 'occupation'", (nan, nan))
    execute("INSERT INTO audit (tenant, at, action, user_id) VALUES (?, ?, 'write', 'u')", ("acme", INF))
    execute("INSERT INTO documents (tenant, namespace, key, value, updated_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
            ("*", "session_idle", f"{INF:017.3f}|poisoned", '{"tenant": "acme", "session_id": "poisoned"}', INF,
             None))


def _check_repaired(m: Memory) -> None:
    recs = m.history("acme", "u", "city") + m.history("acme", "u", "occupation")
    assert len(recs) == 2
    for r in recs:
        for name in ("created_at", "expires_at", "event_at", "importance", "confidence", "last_used_at",
                     "last_confirmed_at"):
            v = getattr(r, name)
            assert v is None or math.isfinite(v), (r.key, name, v)
        assert 0.0 <= r.importance <= 1.0 and 0.0 <= r.confidence <= 1.0
    occupation = m.history("acme", "u", "occupation")[0]
    assert occupation.expires_at is None  # +inf expiry: never expires
    json.dumps(m.export("acme", "u", now=T0), allow_nan=False)
    json.dumps([a.at for a in m.audit("acme", limit=1000)], allow_nan=False)
    repaired = list(m.audit("acme", action="repair", limit=100))
    assert {a.key for a in repaired} == {"city", "occupation"}
    # idle expiry works for everyone again
    sid = m.open_session("other", "v", now=T0, idle_seconds=60)
    assert [c.session.id for c in m.expire_idle_sessions(now=T0 + 3600)] == [sid]


def _seed(m: Memory) -> None:
    m.write("acme", "u", "fact", "city", "杭州", now=T0)
    m.write("acme", "u", "fact", "occupation", "教师", now=T0)


def test_sqlite_rows_with_non_finite_numbers_are_repaired_on_open(tmp_path):
    path = tmp_path / "poisoned.db"
    with Memory(f"sqlite:///{path}") as m:
        _seed(m)
    with sqlite3.connect(path) as c:
        _poison(c.execute, "sqlite")
        c.execute("DELETE FROM schema_migrations WHERE version = 5")  # as if written by the release before
    with Memory(f"sqlite:///{path}") as m:
        _check_repaired(m)
    with sqlite3.connect(path) as c, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        c.execute("UPDATE audit SET at = 0")  # the append-only trigger is back


def test_postgres_rows_with_non_finite_numbers_are_repaired_on_open(tmp_path):
    import psycopg

    url = backends.postgres_url(tmp_path)
    try:
        with Memory(url) as m:
            _seed(m)
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(backends.require_postgres(), autocommit=True) as c:
            c.execute(f'SET search_path TO "{schema}"')
            _poison(lambda sql, args: c.execute(sql.replace("?", "%s"), args), "postgres")
            c.execute("DELETE FROM schema_migrations WHERE version = 5")
        with Memory(url) as m:
            _check_repaired(m)
        with psycopg.connect(backends.require_postgres(), autocommit=True) as c:
            c.execute(f'SET search_path TO "{schema}"')
            with pytest.raises(psycopg.Error, match="append-only"):
                c.execute("UPDATE audit SET at = 0")
    finally:
        backends.drop_schema(tmp_path)
