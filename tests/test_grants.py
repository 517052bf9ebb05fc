"""Tiered authorization: L1 by default, L2/L3 under active grants; expiry, revocation, audit without values."""

from __future__ import annotations

import itertools
import json

import pytest

from props import examples
from usermem import PermissionDenied, ValidationError

T0 = 1_790_000_000.0
PHONE = "13800138000"


@pytest.fixture
def m(mem):
    for key, kind, value in (("phone", "fact", PHONE), ("allergy", "fact", "花生"), ("city", "fact", "上海"),
                             ("address", "fact", "人民路 1 号")):
        assert mem.write("acme", "u1", kind, key, value, source="user_confirmed", now=T0).ok
    return mem


def keys(m, now, **kw):
    return sorted(r.key for r in m.recall("acme", "u1", k=20, now=now, **kw))


def test_l1_only_by_default(m):
    assert keys(m, T0 + 1) == ["city"]


def test_level_grant_and_expiry(m):
    gid = m.grant("acme", "u1", "L2", "deliver an order", actor="agent-7", now=T0 + 10)
    assert keys(m, T0 + 11, actor="agent-7") == ["address", "city", "phone"]
    assert keys(m, T0 + 10 + 30 * 60) == ["city"]  # default ttl: 30 minutes, then gone on its own
    assert [g.id for g in m.grants("acme", "u1", now=T0 + 11)] == [gid]
    assert m.grants("acme", "u1", now=T0 + 10 + 30 * 60) == []
    l3 = m.grant("acme", "u1", "L3", "check allergies", ttl=60, now=T0 + 20)
    assert keys(m, T0 + 21) == ["address", "allergy", "city", "phone"]
    assert m.revoke(l3, now=T0 + 22) is True
    assert m.revoke(l3) is False
    assert keys(m, T0 + 23) == ["address", "city", "phone"]  # the L2 grant is still active


def test_field_grant_and_grantee(m):
    m.grant("acme", "u1", ["allergy"], "menu planning", grantee="agent-a", now=T0)
    assert keys(m, T0 + 1, actor="agent-a") == ["allergy", "city"]
    assert keys(m, T0 + 1, actor="agent-b") == ["city"]
    assert keys(m, T0 + 1) == ["city"]


def test_grant_is_per_user_and_tenant(m):
    m.write("acme", "u2", "fact", "phone", "13900139000", source="user_confirmed", now=T0)
    m.write("beta", "u1", "fact", "phone", "13700137000", source="user_confirmed", now=T0)
    g = m.grant("acme", "u1", "L2", "support call", now=T0)
    assert [r.key for r in m.recall("acme", "u2", now=T0 + 1)] == []
    assert [r.key for r in m.recall("beta", "u1", now=T0 + 1)] == []
    assert m.revoke("beta", g) is False  # another tenant cannot revoke (or see) it
    assert m.revoke("acme", g) is True


def test_history_and_get_need_a_grant(m):
    with pytest.raises(PermissionDenied):
        m.history("acme", "u1", "phone", now=T0)
    rec = m.history("acme", "u1", "city")[0]
    assert m.get("acme", rec.id).value == "上海"
    m.grant("acme", "u1", "phone", "verify identity", now=T0)
    phone = m.history("acme", "u1", "phone", now=T0 + 1)
    assert phone[0].value == PHONE
    assert m.get("acme", phone[0].id, now=T0 + 1).value == PHONE
    with pytest.raises(PermissionDenied):
        m.get("acme", phone[0].id, now=T0 + 3600)


def test_audit_names_who_when_purpose_fields_never_values(m):
    gid = m.grant("acme", "u1", ["phone", "allergy"], "emergency contact", actor="admin", now=T0)
    m.recall("acme", "u1", now=T0 + 5, actor="agent-9")
    grants = m.audit("acme", action="grant")
    assert len(grants) == 1 and grants[0].actor == "admin" and grants[0].detail["purpose"] == "emergency contact"
    reads = m.audit("acme", action="read_sensitive")
    assert len(reads) == 1
    e = reads[0]
    assert (e.actor, e.at, e.user_id) == ("agent-9", T0 + 5, "u1")
    assert e.detail["fields"] == ["allergy", "phone"] and e.detail["grant_ids"] == [gid]
    assert e.detail["purposes"] == ["emergency contact"]
    dump = json.dumps([x.detail for x in m.audit("acme", limit=1000)], ensure_ascii=False)
    assert PHONE not in dump and "花生" not in dump
    m.recall("acme", "u1", now=T0 + 6, keys=["city"])  # L1-only reads are not audited as sensitive
    assert len(m.audit("acme", action="read_sensitive")) == 1


@pytest.mark.parametrize("args", [
    ("acme", "u1", "L2", ""), ("acme", "u1", [], "x"), ("acme", "u1", ["Bad Key"], "x"),
    ("acme", "u1", "L2", "call 13800138000"),
])
def test_bad_grants_are_rejected(m, args):
    with pytest.raises(ValidationError):
        m.grant(*args)
    assert m.audit("acme", action="grant") == []


def test_bad_ttl(m):
    with pytest.raises(ValidationError):
        m.grant("acme", "u1", "L2", "x", ttl=0)
    with pytest.raises(ValidationError):
        m.grant("acme", "u1", "L2", "x", ttl=30 * 86400)


def test_forget_user_removes_grants(m):
    m.grant("acme", "u1", "L2", "x", now=T0)
    m.forget_user("acme", "u1", now=T0 + 1)
    assert m.grants("acme", "u1", now=T0 + 2) == []


def test_cross_domain_sharing_and_opt_in(mem):
    mem.set_contract("acme", {"key": "eco_packaging", "kind": "preference", "domain": "shop",
                              "sharing": "explicit_opt_in"})
    mem.set_contract("acme", {"key": "wishlist", "kind": "preference", "domain": "shop", "sharing": "private"})
    mem.set_contract("acme", {"key": "size", "kind": "fact", "domain": "shop", "sharing": "shared"})
    for key, value in (("eco_packaging", "yes"), ("wishlist", "tent"), ("size", "M"), ("city", "Lyon")):
        mem.write("acme", "u", "preference" if key != "size" and key != "city" else "fact", key, value, now=T0)

    def seen(domain):
        return sorted(r.key for r in mem.recall("acme", "u", k=20, now=T0 + 1, domain=domain))

    assert seen(None) == ["city", "eco_packaging", "size", "wishlist"]  # no domain named: no domain filter
    assert seen("shop") == ["city", "eco_packaging", "size", "wishlist"]
    assert seen("logistics") == ["city", "size"]
    assert mem.opt_in("acme", "u", ["eco_packaging"], "logistics", actor="user", now=T0) == ["eco_packaging"]
    assert seen("logistics") == ["city", "eco_packaging", "size"]
    assert seen("ads") == ["city", "size"]  # the opt-in names one domain
    mem.opt_in("acme", "u", ["wishlist"], "logistics", now=T0)
    assert "wishlist" not in seen("logistics")  # private never leaves its domain
    assert mem.opt_out("acme", "u", "eco_packaging", "logistics", now=T0) == 1
    assert seen("logistics") == ["city", "size"]
    assert [e.action for e in mem.audit("acme", user_id="u") if e.action.startswith("opt_")] == \
        ["opt_in", "opt_in", "opt_out"]
    with pytest.raises(ValidationError):
        mem.opt_in("acme", "u", ["size"], "Bad Domain")


def test_purge_removes_expired_grants_physically(m):
    old = m.grant("acme", "u1", "L2", "old case", ttl=60, now=T0)
    new = m.grant("acme", "u1", "L2", "new case", ttl=3600, now=T0 + 3000)
    m.purge(now=T0 + 3100, retention_days=0)
    kept = m.grants("acme", "u1", now=T0 + 3100, include_expired=True)
    assert [g.id for g in kept] == [new]
    assert m.revoke(old) is False  # its index entry went too


# --- property: what recall shows equals what the active grants allow, whatever the sequence ------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_examples = itertools.count()

_LEVEL = {"phone": 2, "address": 2, "allergy": 3, "city": 1}
_scopes = st.one_of(st.sampled_from(["L2", "L3"]), st.lists(st.sampled_from(["phone", "address", "allergy"]),
                                                            min_size=1, max_size=3, unique=True))
_ops = st.lists(st.one_of(
    st.tuples(st.just("grant"), _scopes, st.integers(1, 120), st.sampled_from([None, "a", "b"])),
    st.tuples(st.just("revoke"), st.integers(0, 20)),
    st.tuples(st.just("wait"), st.integers(1, 90)),
    st.tuples(st.just("read"), st.sampled_from([None, "a", "b"])),
), max_size=25)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_property_visibility_matches_active_grants(m, ops):
    tenant = f"p{next(_examples)}"  # a fresh tenant per example, same store
    for key, value in (("phone", PHONE), ("allergy", "花生"), ("city", "上海"), ("address", "人民路 1 号")):
        m.write(tenant, "u1", "fact", key, value, source="user_confirmed", now=T0)
    now = T0
    model: list[tuple[str, object, float, str | None]] = []  # (id, scope, expires, grantee)
    for op in ops:
        now += 1
        if op[0] == "grant":
            _, scope, ttl, grantee = op
            gid = m.grant(tenant, "u1", scope, "property", ttl=ttl, grantee=grantee, now=now)
            model.append((gid, scope, now + ttl, grantee))
        elif op[0] == "revoke" and model:
            gid = model.pop(op[1] % len(model))[0]
            m.revoke(tenant, gid, now=now)
        elif op[0] == "wait":
            now += op[1]
        elif op[0] == "read":
            reader = op[1]
            seen = {r.key for r in m.recall(tenant, "u1", k=10, now=now, actor=reader)}
            expected = {"city"}
            for _gid, scope, expires, grantee in model:
                if now >= expires or (grantee is not None and grantee != reader):
                    continue
                for key, level in _LEVEL.items():
                    if (isinstance(scope, str) and level <= int(scope[1])) or (isinstance(scope, list) and key in scope):
                        expected.add(key)
            assert seen == expected, (ops, reader)
