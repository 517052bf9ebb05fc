"""Tenant isolation: a randomized run of thousands of mixed operations over 6 tenants that share user ids,
field keys and even values' shapes. Every value carries its tenant's tag, and every result — records,
histories, exports, audit entries, grants, counts, errors — is checked against a per-tenant model:
nothing may ever cross tenants, and no count or error may reveal another tenant's data."""

from __future__ import annotations

import json
import random

import pytest

from usermem import NotFound, Op, PermissionDenied, load_settings

T0 = 1_790_000_000.0
TENANTS = [f"tenant{i}" for i in range(6)]
USERS = ["u1", "u2", "u3", "shared-user"]
FIELDS = [("fact", "city"), ("fact", "occupation"), ("preference", "reply_length"), ("preference", "language"),
          ("situation", "open_issue"), ("fact", "phone_note"), ("fact", "address")]  # address is L2
OPS = {"sqlite": 3000, "postgres": 1000, "tiered": 1000}


def _tag(tenant: str, n: int) -> str:
    return f"<{tenant}>#{n}"


def _owner(value: object) -> str | None:
    text = json.dumps(value, ensure_ascii=False)
    found = [t for t in TENANTS if f"<{t}>" in text]
    assert len(found) <= 1, text
    return found[0] if found else None


def test_randomized_operations_never_cross_tenants(make_memory, backend):
    # No embedder: closing would wait for thousands of embeddings; isolation of the lexical index is still covered.
    m = make_memory(settings=load_settings(env={}, embedder="none"))
    rng = random.Random(20261130)
    model: dict[tuple[str, str, str], str] = {}  # (tenant, user, key) -> current value
    ids: dict[str, list[str]] = {t: [] for t in TENANTS}  # memory ids seen per tenant
    grants: dict[str, list[str]] = {t: [] for t in TENANTS}
    now = T0
    n_ops = OPS.get(backend, 1000)
    for i in range(n_ops):
        now += 1
        tenant, user = rng.choice(TENANTS), rng.choice(USERS)
        op = rng.random()
        if op < 0.45:
            kind, key = rng.choice(FIELDS)
            value = _tag(tenant, i)
            r = m.write(tenant, user, kind, key, value, source="user_confirmed", now=now)
            assert r.op in (Op.ADD, Op.UPDATE)
            assert r.memory.tenant == tenant and _owner(r.memory.value) == tenant
            model[(tenant, user, key)] = value
            ids[tenant].append(r.memory.id)
        elif op < 0.65:
            got = m.recall(tenant, user, k=20, now=now, actor=f"agent-{tenant}")
            assert all(rec.tenant == tenant and rec.user_id == user and _owner(rec.value) == tenant for rec in got)
            visible = {k: v for (t, u, k), v in model.items() if t == tenant and u == user and k != "address"}
            assert {rec.key: rec.value for rec in got if rec.key != "address"} == visible
        elif op < 0.72:
            other = rng.choice(TENANTS)
            if ids[other]:
                mid = rng.choice(ids[other])
                try:
                    rec = m.get(tenant, mid, now=now)
                except PermissionDenied:
                    assert other == tenant  # only an own L2 record can need a grant
                    continue
                if other != tenant:
                    assert rec is None  # another tenant's id: indistinguishable from a missing one
                elif rec is not None:
                    assert rec.tenant == tenant
        elif op < 0.78:
            kind, key = rng.choice(FIELDS)
            try:
                hist = m.history(tenant, user, key, now=now)
            except PermissionDenied:
                assert key == "address"
                continue
            assert all(h.tenant == tenant and _owner(h.value) == tenant for h in hist)
        elif op < 0.82:
            kind, key = rng.choice(FIELDS)
            n = m.forget(tenant, user, key, now=now)
            expected = (tenant, user, key) in model
            assert (n > 0) == expected  # the count reflects this tenant's rows only
            model.pop((tenant, user, key), None)
        elif op < 0.84:
            n = m.forget_user(tenant, user, now=now)
            had = any(t == tenant and u == user for (t, u, _k) in model)
            assert (n > 0) == had
            for k in [k for k in model if k[0] == tenant and k[1] == user]:
                del model[k]
        elif op < 0.88:
            exp = m.export(tenant, user, now=now)
            assert exp["tenant"] == tenant
            for f in exp["fields"].values():
                assert all(_owner(h["value"]) == tenant and h["tenant"] == tenant for h in f["history"])
            current = {k: f["current"]["value"] for k, f in exp["fields"].items() if f["current"]}
            assert current == {k: v for (t, u, k), v in model.items() if t == tenant and u == user}
        elif op < 0.92:
            gid = m.grant(tenant, user, "L2", f"purpose of {tenant}", ttl=600, now=now)
            grants[tenant].append(gid)
            other = rng.choice(TENANTS)
            if other != tenant:
                assert m.revoke(other, gid, now=now) is False  # other tenants can neither use nor end it
            listed = m.grants(tenant, now=now)
            assert all(g.tenant == tenant for g in listed)
            assert gid in {g.id for g in listed}
            assert all(gid not in {g.id for g in m.grants(t, now=now)} for t in TENANTS if t != tenant)
        elif op < 0.95:
            events = m.audit(tenant, limit=200)
            assert all(e.tenant == tenant for e in events)
            dump = json.dumps([e.detail for e in events], ensure_ascii=False)
            assert all(f"<{t}>" not in dump for t in TENANTS)  # never values, so never anyone's tags
        elif op < 0.97:
            other = rng.choice(TENANTS)
            with pytest.raises(NotFound) as exc:
                m.contract(tenant, f"only_in_{other}")
            assert other not in str(exc.value) or other == tenant or f"only_in_{other}" in str(exc.value)
            if rng.random() < 0.5:
                m.disable_field(tenant, "language", now=now)
                assert all(m.contract(t, "language").enabled for t in TENANTS if t != tenant)
                m.enable_field(tenant, "language", now=now)
        else:
            # users listing and counts are per tenant
            users = m.store.users(tenant)
            assert set(users) <= set(USERS)
            live = {u for (t, u, _k) in model if t == tenant}
            assert live <= set(users), (tenant, live, users)
    # final sweep: every tenant sees exactly its own model
    for tenant in TENANTS:
        g = m.grant(tenant, "u1", "L2", "final check", now=now + 1)
        for user in USERS:
            got = {r.key: r.value for r in m.recall(tenant, user, k=50, now=now + 1001)}
            want = {k: v for (t, u, k), v in model.items() if t == tenant and u == user}
            if user != "u1":
                want.pop("address", None)
            assert got == want
        m.revoke(g)
