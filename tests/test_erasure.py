"""Erasure: forget (user / key / time range) then purge leaves none of the values in the storage bytes.

Runs on every backend of the conformance matrix (make_memory): SQLite file + WAL, PostgreSQL relation
files (after the store's VACUUM, read with pg_read_binary_file), and Redis (every key under the test's
prefix, dumped). A second user's values are planted too and must still be found — the byte search is
shown to work, so "nothing found" means something.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import backends
from usermem import Op

T0 = 1_790_000_000.0
DAY = 86_400.0


def _plant(m, tenant: str, user: str, tag: str, now: float = T0) -> list[str]:
    """Write several kinds and versions for a user; return every distinct value string written."""
    values: list[str] = []

    def w(kind, key, value, **kw):
        r = m.write(tenant, user, kind, key, value, now=kw.pop("now", now), source="user_confirmed", **kw)
        assert r.op in (Op.ADD, Op.UPDATE), (key, r)
        values.append(value)

    w("fact", "city", f"{tag}-city-一号-{uuid.uuid4().hex[:10]}")
    w("fact", "city", f"{tag}-city-二号-{uuid.uuid4().hex[:10]}", now=now + 1)  # a superseded version
    w("fact", "occupation", f"{tag}-occupation-{uuid.uuid4().hex[:10]}")
    w("preference", "reply_length", f"{tag}-reply-{uuid.uuid4().hex[:10]}")
    w("preference", "report_format", f"{tag}-format-{uuid.uuid4().hex[:10]}")
    w("situation", "open_issue", f"{tag}-issue-重复扣款-{uuid.uuid4().hex[:10]}")
    w("fact", "allergy", f"{tag}-allergy-花生-{uuid.uuid4().hex[:10]}")  # L3
    return values


def _storage_bytes(m, backend: str, tmp_path: Path) -> bytes:
    """Every byte the backend holds for this test (files, relation files, Redis dumps)."""
    if backend == "sqlite":
        out = b""
        for p in sorted(tmp_path.glob("conformance.db*")):
            out += p.read_bytes()
        return out
    chunks = [_postgres_bytes(tmp_path)]
    if backend == "tiered":
        chunks.append(_redis_bytes(backends.prefix_for(tmp_path)))
    return b"".join(chunks)


def _postgres_bytes(tmp_path: Path) -> bytes:
    import psycopg

    schema = backends.schema_for(tmp_path)
    out = b""
    with psycopg.connect(backends.require_postgres(), autocommit=True) as c:
        c.execute("CHECKPOINT")  # flush dirty buffers so the files hold what the server holds
        rels = c.execute(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'i', 'm', 't')", (schema,)).fetchall()
        oids = [r[0] for r in rels]
        toast = c.execute("SELECT reltoastrelid FROM pg_class WHERE oid = ANY(%s) AND reltoastrelid <> 0",
                          (oids,)).fetchall()
        for (t,) in toast:
            oids.append(t)
            oids += [r[0] for r in c.execute("SELECT indexrelid FROM pg_index WHERE indrelid = %s", (t,))]
        assert oids, "no relations found: wrong schema?"
        for oid in oids:
            path = c.execute("SELECT pg_relation_filepath(%s)", (oid,)).fetchone()[0]
            if path is None:
                continue
            segment = 0
            while True:
                p = path if segment == 0 else f"{path}.{segment}"
                if c.execute("SELECT (pg_stat_file(%s, true)).size", (p,)).fetchone()[0] is None:
                    break
                out += bytes(c.execute("SELECT pg_read_binary_file(%s)", (p,)).fetchone()[0])
                segment += 1
    return out


def _redis_bytes(prefix: str) -> bytes:
    import redis

    client = redis.Redis.from_url(backends.require_redis())
    out = b""
    try:
        for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            out += name + (client.dump(name) or b"")
    finally:
        client.close()
    return out


def _found(blob: bytes, values: list[str]) -> list[str]:
    """Values present in the bytes, whole or by their unique hex tail (what a lower-cased, tokenised
    search index would keep of them)."""
    return [v for v in values if v.encode("utf-8") in blob or v.rsplit("-", 1)[-1].encode() in blob]


def test_forget_user_and_purge_erase_every_byte(make_memory, backend, tmp_path):
    m = make_memory()
    gone = _plant(m, "acme", "leaver", "LEAVER")
    kept = _plant(m, "acme", "stayer", "STAYER")
    other_tenant = _plant(m, "beta", "leaver", "BETA")  # same user id in another tenant: untouched
    m.grant("acme", "leaver", "L3", "support case", now=T0 + 2)
    exported = json.dumps(m.export("acme", "leaver", now=T0 + 3), ensure_ascii=False)
    assert all(v in exported for v in gone)

    n = m.forget_user("acme", "leaver", now=T0 + 10, actor="dpo")
    assert n == len(gone)
    assert m.recall("acme", "leaver", k=50, now=T0 + 11) == []
    assert m.grants("acme", "leaver", now=T0 + 11) == []
    assert m.export("acme", "leaver", now=T0 + 11)["fields"] == {}
    assert m.purge(now=T0 + 12, retention_days=0) >= len(gone)

    blob = _storage_bytes(m, backend, tmp_path)
    if _found(blob, gone) and backend == "tiered":  # say which part of the storage still holds them
        pytest.fail(f"postgres: {_found(_postgres_bytes(tmp_path), gone)} "
                    f"redis: {_found(_redis_bytes(backends.prefix_for(tmp_path)), gone)}")
    assert _found(blob, gone) == []
    assert _found(blob, kept) == kept  # the search works: what was not erased is there
    assert _found(blob, other_tenant) == other_tenant
    assert len(m.recall("beta", "leaver", k=50, now=T0 + 13)) == len({"city", "occupation", "reply_length",
                                                                         "report_format", "open_issue"})

    # The audit log records that the erasure and purge happened, by whom — never what was erased.
    log = m.audit("acme", user_id="leaver", limit=1000)
    assert any(e.action == "forget_user" and e.actor == "dpo" for e in log)
    dump = json.dumps([[e.action, e.key, e.detail] for e in m.audit("acme", limit=10_000)], ensure_ascii=False)
    assert _found(dump.encode(), gone) == []
    assert m.audit("*", action="purge")


def test_forget_key_and_time_range(make_memory, backend, tmp_path):
    m = make_memory()
    vals = _plant(m, "acme", "u1", "RANGE")
    late = f"LATE-{uuid.uuid4().hex}"
    assert m.write("acme", "u1", "preference", "language", late, now=T0 + 5 * DAY).op is Op.ADD
    # forget one field: every version of it
    assert m.forget("acme", "u1", "city", now=T0 + 6 * DAY) == 2
    assert "city" not in {r.key for r in m.recall("acme", "u1", k=50, now=T0 + 6 * DAY)}
    # forget a time range [T0 + 4 days, T0 + 6 days): only the late write
    assert m.forget_range("acme", "u1", since=T0 + 4 * DAY, until=T0 + 6 * DAY, now=T0 + 6 * DAY) == 1
    left = {r.key for r in m.recall("acme", "u1", k=50, now=T0 + 6 * DAY)}
    assert left == {"occupation", "reply_length", "report_format", "open_issue"}
    m.purge(now=T0 + 6 * DAY, retention_days=0)
    blob = _storage_bytes(m, backend, tmp_path)
    assert _found(blob, [vals[0], vals[1], late]) == []
    assert _found(blob, [vals[2]]) == [vals[2]]
    events = m.audit("acme", action="forget", limit=100)
    assert [e.detail.get("keys") for e in events] == [["city"], None]
    assert events[1].detail["created_from"] == T0 + 4 * DAY


def test_disabled_field_is_still_erasable_and_exported(mem):
    mem.write("acme", "u", "fact", "city", "Lyon", now=T0)
    mem.disable_field("acme", "city", now=T0 + 1)
    assert mem.export("acme", "u", now=T0 + 2)["fields"]["city"]["current"]["value"] == "Lyon"
    assert mem.forget_user("acme", "u", now=T0 + 3) == 1


def test_purge_respects_retention(mem):
    mem.write("acme", "u", "fact", "city", "Oslo", now=T0)
    mem.forget_user("acme", "u", now=T0 + DAY)
    assert mem.purge(now=T0 + 2 * DAY, retention_days=30) == 0
    assert mem.purge(now=T0 + 32 * DAY, retention_days=30) == 1


@pytest.mark.parametrize("bad", [dict(retention_days=-1)])
def test_purge_bad_input(mem, bad):
    from usermem import ValidationError

    with pytest.raises(ValidationError):
        mem.purge(**bad)
