"""Regression tests for the defects the adversarial probe of tenant isolation, erasure and consent found
(probe 8, CHANGELOG): one test per defect, through `Memory` (the fix is in the engine) and over HTTP."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from apihelp import T0, make_api
from usermem import Memory
from usermem.config import load_settings
from usermem.model import Op

SECRET = "zanzibarquokka"


@pytest.fixture()
def mem(tmp_path: Path) -> Any:
    m = Memory(f"sqlite:///{tmp_path / 'p.db'}", settings=load_settings(env={}, embedder="none"))
    yield m
    m.close()


def _deliveries_text(m: Memory, tenant: str = "acme") -> str:
    return json.dumps([d.to_dict() for d in m.webhook_deliveries(tenant, limit=1000)], ensure_ascii=False)


# -- 1. forget(key) / forget_range left the erased values in queued and logged webhook deliveries ------------

def test_forget_key_removes_the_erased_values_from_webhook_deliveries(mem: Memory, tmp_path: Path) -> None:
    mem.create_webhook("acme", "http://127.0.0.1:9/hook", ["write", "forget"], now=T0)
    mem.write("acme", "u1", "preference", "hobby", f"collecting {SECRET} stamps", source="user_confirmed", now=T0)
    mem.write("acme", "u1", "preference", "hobby", f"{SECRET} painting", source="user_confirmed", now=T0 + 1)
    mem.write("acme", "u1", "preference", "theme", "dark", source="user_confirmed", now=T0 + 2)
    mem.write("acme", "u2", "preference", "hobby", f"{SECRET} too", source="user_confirmed", now=T0 + 2)
    assert _deliveries_text(mem).count(SECRET) == 3  # queued with their L1 values
    assert mem.forget("acme", "u1", "hobby", now=T0 + 10) == 2
    text = _deliveries_text(mem)
    assert text.count(SECRET) == 1 and f"{SECRET} too" in text  # another user's delivery keeps its value
    assert "dark" in text  # the key that was not erased keeps its value
    assert SECRET not in json.dumps(mem.export("acme", "u1", now=T0 + 11), ensure_ascii=False)
    erased = [r for d in mem.webhook_deliveries("acme", limit=1000) for r in d.payload["records"]
              if r.get("value_erased")]
    assert len(erased) == 2 and all(r["key"] == "hobby" and "value" not in r for r in erased)
    mem.write("acme", "u1", "preference", "city_note", f"{SECRET} again", source="user_confirmed", now=T0 + 20)
    assert mem.forget_range("acme", "u1", since=T0 + 15, now=T0 + 21) == 1
    assert f"{SECRET} again" not in _deliveries_text(mem)
    # and the bytes: after purge nothing of u1's erased values is left in the file
    mem.forget("acme", "u2", "hobby", now=T0 + 30)
    mem.purge(now=T0 + 40, retention_days=0)
    mem.close()
    con = sqlite3.connect(tmp_path / "p.db")
    rows = [repr(r) for (t,) in con.execute("select name from sqlite_master where type='table'")
            for r in con.execute(f'select * from "{t}"')]
    con.close()
    assert not [r for r in rows if SECRET in r]


def test_purge_removes_expired_values_from_webhook_deliveries(mem: Memory) -> None:
    mem.create_webhook("acme", "http://127.0.0.1:9/hook", ["write"], now=T0)
    mem.write("acme", "u1", "situation", "open_issue", f"{SECRET} refund", source="user_confirmed", now=T0,
              ttl_seconds=100)
    mem.write("acme", "u1", "preference", "theme", "dark", source="user_confirmed", now=T0)
    mem.purge(now=T0 + 50, retention_days=0)  # not expired yet: the value stays
    assert SECRET in _deliveries_text(mem)
    mem.purge(now=T0 + 200, retention_days=0)  # expired and purged: so is its value in the (pending) delivery
    text = _deliveries_text(mem)
    assert SECRET not in text and "dark" in text
    assert [d.state for d in mem.webhook_deliveries("acme", limit=1000)] == ["pending", "pending"]


# -- 2. ingest returned the stored L3 collection a new item was merged into, without a grant ----------------

def test_ingest_does_not_show_a_stored_l3_value_without_a_grant(mem: Memory) -> None:
    mem.write("acme", "u1", "fact", "allergy", [SECRET], source="extracted", now=T0)
    got = mem.ingest("acme", "u1", ["我还对尘螨过敏"], now=T0 + 1)
    [r] = [r for r in got if r.existing_id is not None]
    assert r.op is Op.UPDATE and r.memory is None and r.detail == "withheld"  # reported, not dropped
    assert SECRET not in json.dumps([x.to_dict() for x in got], ensure_ascii=False)
    # the write happened: the stored list holds both (read under a grant)
    gid = mem.grant("acme", "u1", ["allergy"], "lunch", now=T0 + 2, grantee="agent-a")
    assert mem.recall("acme", "u1", keys=["allergy"], now=T0 + 3, actor="agent-a")[0].value == [SECRET, "尘螨"]
    # another reader's results stay withheld; the grantee sees the stored list and the read is audited
    again = mem.ingest("acme", "u1", ["I am also allergic to dust mites"], now=T0 + 4, actor="agent-b")
    assert SECRET not in json.dumps([x.to_dict() for x in again], ensure_ascii=False)
    seen = mem.ingest("acme", "u1", ["I am also allergic to cats"], now=T0 + 5, actor="agent-a")
    [shown] = [x for x in seen if x.memory is not None and x.memory.key == "allergy"]
    assert SECRET in shown.memory.value
    reads = mem.audit("acme", user_id="u1", action="read_sensitive")
    assert any(a.detail.get("via") == "ingest" and gid in a.detail.get("grant_ids", []) for a in reads)
    # revoked: withheld again at once
    mem.revoke("acme", gid, now=T0 + 6)
    late = mem.ingest("acme", "u1", ["I am also allergic to wasps"], now=T0 + 7, actor="agent-a")
    assert SECRET not in json.dumps([x.to_dict() for x in late], ensure_ascii=False)


def test_ingest_over_http_and_add_messages_withhold_the_stored_l3_value() -> None:
    api = make_api()
    try:
        h = api.h(api.admin_a)
        api.memory.write("acme", "alice", "fact", "allergy", [SECRET], source="extracted", now=T0)
        r = api.http.post("/v1/users/alice/ingest", headers=h,
                          json={"messages": [{"role": "user", "content": "我还对尘螨过敏"}], "now": T0 + 1})
        assert r.status_code == 200 and SECRET not in r.text and "withheld" in r.text
        sid = api.memory.open_session("acme", "alice", now=T0 + 2)
        added = api.memory.add_messages(sid, [{"role": "user", "content": "我还对芒果过敏"}], tenant="acme",
                                        extract=True, now=T0 + 3)
        assert added.results and SECRET not in json.dumps(added.to_dict(), ensure_ascii=False)
    finally:
        api.memory.close()


# -- 3. an agent's API key exported a user's L2/L3 values without any grant ---------------------------------

def test_export_over_http_is_for_the_user_or_an_admin_not_an_agent_key() -> None:
    api = make_api()
    try:
        api.memory.write("acme", "alice", "fact", "allergy", SECRET, source="user_confirmed", now=T0)
        ring = api.app.state.keys
        bound, _ = ring.create("acme", name="agent-bound", user_id="alice")
        token, _ = ring.create_user_token("acme", "alice")
        other_token, _ = ring.create_user_token("acme", "bob")
        for key in (api.key_a, bound):  # agents read L2/L3 only under a grant (recall): no export
            r = api.http.get("/v1/users/alice/export", headers=api.h(key), params={"now": T0 + 1})
            assert r.status_code == 403 and r.json()["code"] == "user_token_required" and SECRET not in r.text
            listed = api.http.get("/v1/users/alice/memories", headers=api.h(key), params={"now": T0 + 1})
            assert SECRET not in listed.text and [w["key"] for w in listed.json()["withheld"]] == ["allergy"]
        assert api.http.get("/v1/users/alice/export", headers=api.h(other_token)).status_code == 404
        for key in (token, api.admin_a):  # the data subject, or an operator on their behalf
            r = api.http.get("/v1/users/alice/export", headers=api.h(key), params={"now": T0 + 1})
            assert r.status_code == 200 and SECRET in r.text
        assert [a.action for a in api.memory.audit("acme", user_id="alice", action="export")] == ["export"] * 2
    finally:
        api.memory.close()


# -- 4. a session's L3 context value was copied into its (L1) episode and returned by the close ---------------

def test_session_close_keeps_l3_context_out_of_the_episode_and_the_close_result(mem: Memory) -> None:
    mem.set_contract("acme", {"key": "diagnosis_today", "kind": "context", "sensitivity": "L3"})
    seen: list[Any] = []
    mem.on_session_closed(seen.append)
    sid = mem.open_session("acme", "u1", now=T0)
    mem.write("acme", "u1", "context", "diagnosis_today", SECRET, source="user_confirmed", session_id=sid, now=T0 + 1)
    mem.write("acme", "u1", "context", "current_task", "lunch order", source="user_confirmed", session_id=sid,
              now=T0 + 1)
    closed = mem.close_session(sid, tenant="acme", now=T0 + 2, actor="agent-a")
    assert [r.key for r in closed.context] == ["current_task"] and closed.withheld == ("diagnosis_today",)
    assert seen and {r.key for r in seen[0].context} == {"diagnosis_today", "current_task"}  # hooks: all of it
    [episode] = mem.episodes("acme", "u1", now=T0 + 3)
    assert episode.value["points"] == ["current_task: lunch order"]
    for got in (mem.episodes("acme", "u1", now=T0 + 3), mem.recall("acme", "u1", k=50, query=SECRET, now=T0 + 3),
                mem.assemble("acme", "u1", f"what did I have today? {SECRET}", now=T0 + 3).prompt):
        assert SECRET not in json.dumps(got, default=lambda o: o.to_dict(), ensure_ascii=False)
    # with a grant for the closing reader the close shows it (audited); an idle close is read by nobody in particular
    mem.grant("acme", "u1", ["diagnosis_today"], "care", now=T0 + 10, grantee="agent-a")
    sid2 = mem.open_session("acme", "u1", now=T0 + 10)
    mem.write("acme", "u1", "context", "diagnosis_today", SECRET, source="user_confirmed", session_id=sid2,
              now=T0 + 11)
    shown = mem.close_session(sid2, tenant="acme", now=T0 + 12, actor="agent-a")
    assert [r.value for r in shown.context] == [SECRET] and shown.withheld == ()
    assert any(a.detail.get("via") == "close_session" for a in mem.audit("acme", user_id="u1", action="read_sensitive"))
    sid3 = mem.open_session("acme", "u1", now=T0 + 20)
    mem.write("acme", "u1", "context", "diagnosis_today", SECRET, source="user_confirmed", session_id=sid3,
              now=T0 + 21)
    [idle] = mem.expire_idle_sessions(now=T0 + 21 + 1801, tenant="acme")
    assert idle.context == () and idle.withheld == ("diagnosis_today",)


def test_session_close_over_http_withholds_l3_context() -> None:
    api = make_api()
    try:
        api.memory.set_contract("acme", {"key": "diagnosis_today", "kind": "context", "sensitivity": "L3"})
        h = api.h(api.key_a)
        sid = api.http.post("/v1/users/u1/sessions", headers=h, json={"now": T0}).json()["id"]
        api.http.post("/v1/memories", headers=h, json={"user_id": "u1", "kind": "context", "key": "diagnosis_today",
                                                       "value": SECRET, "session_id": sid, "now": T0 + 1})
        r = api.http.post(f"/v1/sessions/{sid}/close", headers=h, json={"now": T0 + 2})
        assert r.status_code == 200 and SECRET not in r.text and r.json()["withheld"] == ["diagnosis_today"]
        eps = api.http.get("/v1/users/u1/episodes", headers=h, params={"now": T0 + 3})
        assert eps.status_code == 200 and SECRET not in eps.text
    finally:
        api.memory.close()
