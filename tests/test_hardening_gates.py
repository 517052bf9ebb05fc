"""Issue 12 item 15: confirm / deny / revert (and revert_change_set) pass the same L2/L3 grant gate as
get/history; an erasure is never committed without its audit entry, and a tier failure and its retry
are audited (a real dedicated redis-server, stopped and restarted)."""

from __future__ import annotations

import pytest

import backends
from test_redis_fault import RedisServer
from usermem import Memory, PermissionDenied
from usermem.config import Settings
from usermem.errors import TierUnavailable
from usermem.store.tiered import TieredStore

T0 = 1_790_000_000.0
PHONE, PHONE2 = "13800138000", "13900139000"


@pytest.fixture
def m(lean_mem: Memory) -> Memory:
    assert lean_mem.write("acme", "u1", "fact", "phone", PHONE, source="user_confirmed", now=T0).ok
    assert lean_mem.write("acme", "u1", "fact", "phone", PHONE2, source="user_confirmed", now=T0 + 1,
                          change_set_id="cs-phone").ok
    assert lean_mem.write("acme", "u1", "fact", "city", "上海", source="extracted", now=T0 + 1).ok
    return lean_mem


def _phone_versions(m: Memory) -> list[object]:
    return [r.value for r in m.store.history("acme", "u1", "phone")]


def test_confirm_deny_revert_of_an_l2_field_need_a_grant_and_write_nothing_without(m: Memory):
    current = m.store.history("acme", "u1", "phone")[-1]
    before = _phone_versions(m)
    with pytest.raises(PermissionDenied):
        m.confirm("acme", "u1", current.id, now=T0 + 2, actor="agent-7", source="agent_confirmed")
    with pytest.raises(PermissionDenied):
        m.deny("acme", "u1", current.id, now=T0 + 2, actor="agent-7")
    with pytest.raises(PermissionDenied):
        m.revert("acme", "u1", "phone", now=T0 + 2, actor="agent-7")
    with pytest.raises(PermissionDenied):
        m.revert_change_set("acme", "cs-phone", now=T0 + 2, actor="agent-7")
    assert _phone_versions(m) == before
    assert m.store.get("acme", current.id).last_confirmed_at is None
    # L1 fields need nothing.
    city = m.store.history("acme", "u1", "city")[-1]
    assert m.confirm("acme", "u1", city.id, now=T0 + 3).value == "上海"
    # Under a grant for that reader: allowed, and the read is audited with the operation.
    m.grant("acme", "u1", "L2", "fix a wrong number", actor="dpo", grantee="agent-7", now=T0 + 4)
    with pytest.raises(PermissionDenied):  # another reader: still refused
        m.revert("acme", "u1", "phone", now=T0 + 5, actor="agent-8")
    reverted = m.revert("acme", "u1", "phone", now=T0 + 5, actor="agent-7")
    assert reverted.memory is not None and reverted.memory.value == PHONE
    denied = m.deny("acme", "u1", reverted.memory.id, now=T0 + 6, actor="agent-7")
    assert denied.retracted
    reads = [e for e in m.audit("acme", user_id="u1", action="read_sensitive")]
    assert {e.detail.get("via") for e in reads} >= {"revert", "deny"}
    assert all(PHONE not in repr(e) and PHONE2 not in repr(e) for e in m.audit("acme", user_id="u1"))


def test_forget_is_audited_in_its_own_transaction(m: Memory):
    assert m.forget_user("acme", "u1", now=T0 + 10, actor="dpo") == 3
    entry = [e for e in m.audit("acme", user_id="u1", action="forget_user")]
    assert len(entry) == 1 and entry[0].detail["rows"] == 3 and entry[0].actor == "dpo"


@pytest.mark.postgres
@pytest.mark.redis
def test_a_failed_tier_step_and_its_retry_are_audited(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    settings = Settings().with_overrides(store_url=backends.postgres_url(tmp_path), redis_url=server.url,
                                         preset="tiered", key_prefix="gatetest", embedder="none")
    mem = Memory(settings=settings)
    try:
        store = mem.store
        assert isinstance(store, TieredStore)
        store.retry_interval = 0.0
        store.dirty_check_interval = 0.0
        mem.write("acme", "u2", "preference", "likes", "coffee", source="user_confirmed", now=T0)
        server.stop()
        with pytest.raises(TierUnavailable):
            mem.forget_user("acme", "u2", now=T0 + 1, actor="dpo")
        actions = [e.action for e in mem.audit("acme", user_id="u2")]
        assert "forget_user" in actions and "erase_tiers_failed" in actions
        forget = next(e for e in mem.audit("acme", user_id="u2", action="forget_user"))
        assert forget.detail["rows"] == 1
        server.start()
        assert mem.forget_user("acme", "u2", now=T0 + 2, actor="dpo") == 0
        done = [e for e in mem.audit("acme", user_id="u2", action="erase_tiers_done")]
        assert len(done) == 1 and done[0].detail["retry"] is True
        # A later erasure with nothing pending is not called a retry.
        mem.forget_user("acme", "u2", now=T0 + 3)
        assert len([e for e in mem.audit("acme", user_id="u2", action="erase_tiers_done")]) == 1
    finally:
        mem.close()
        server.stop()
        backends.drop_schema(tmp_path)
