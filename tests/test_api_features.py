"""HTTP endpoints for sessions, conversations, privacy and contracts (beyond what the conformance
scenarios cover): admin-only rights, transcripts kept by the API, problem codes."""

from __future__ import annotations

import time

import pytest

from apihelp import T0, make_api


@pytest.fixture
def api():
    a = make_api()
    yield a
    a.memory.close()


def test_session_messages_become_the_transcript_and_go_with_erasure(api):
    h = api.h(api.key_a)
    sid = api.http.post("/v1/users/u1/sessions", json={"client_id": "web"}, headers=h).json()["id"]
    r = api.http.post(f"/v1/sessions/{sid}/messages", headers=h,
                      json={"messages": [{"role": "user", "content": "我的订单还没到"}]})
    assert r.status_code == 200 and r.json()["stored_messages"] == 1 and r.json()["results"] == []
    r = api.http.post(f"/v1/sessions/{sid}/messages", headers=h,
                      json={"messages": [{"role": "assistant", "content": "I will check order 42"}]})
    assert r.json()["stored_messages"] == 2
    assert api.memory.store.get_doc("acme", "api_session_messages", sid)["messages"][0]["content"] == "我的订单还没到"
    closed = api.http.post(f"/v1/sessions/{sid}/close", json={}, headers=h).json()
    assert closed["session"]["status"] == "closed" and closed["already_closed"] is False
    assert api.memory.store.get_doc("acme", "api_session_messages", sid) is None
    r = api.http.post(f"/v1/sessions/{sid}/messages", headers=h, json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 409 and r.json()["code"] == "session_closed"
    again = api.http.post(f"/v1/sessions/{sid}/close", json={}, headers=h).json()
    assert again["already_closed"] is True
    assert api.http.get("/v1/sessions/nope", headers=h).json()["code"] == "session_not_found"


def test_admin_only_endpoints(api):
    h, ha = api.h(api.key_a), api.h(api.admin_a)
    api.http.post("/v1/memories", headers=h, json={"user_id": "u1", "kind": "fact", "key": "city", "value": "x"})
    for method, url, body in [("GET", "/v1/contracts", None), ("PUT", "/v1/contracts/shoe_size", {"kind": "fact"}),
                              ("POST", "/v1/contracts/city/disable", None), ("GET", "/v1/users/u1/grants", None),
                              ("POST", "/v1/users/u1/grants", {"level": "L2", "purpose": "p"})]:
        r = api.http.request(method, url, headers=h, json=body)
        assert r.status_code == 403 and r.json()["code"] == "admin_required", (method, url)
        assert api.http.request(method, url, headers=ha, json=body).status_code == 200, (method, url)


def test_disabled_field_rejects_writes(api):
    ha = api.h(api.admin_a)
    assert api.http.put("/v1/contracts/shoe_size", headers=ha, json={"kind": "fact"}).status_code == 200
    assert api.http.post("/v1/contracts/shoe_size/disable", headers=ha).json()["enabled"] is False
    r = api.http.post("/v1/memories", headers=ha, json={"user_id": "u1", "kind": "fact", "key": "shoe_size",
                                                        "value": 42})
    assert r.status_code == 200 and r.json()["op"] == "REJECT" and r.json()["reason"] == "field_disabled"
    r = api.http.put("/v1/contracts/shoe_size", headers=ha, json={"key": "other", "kind": "fact"})
    assert r.status_code == 422 and r.json()["field"] == "key"
    r = api.http.put("/v1/contracts/shoe_size", headers=ha, json={"kind": "nonsense"})
    assert r.status_code == 422


def test_grants_lifecycle(api):
    ha = api.h(api.admin_a)
    api.http.post("/v1/memories", headers=ha, json={"user_id": "u1", "kind": "fact", "key": "city", "value": "x"})
    r = api.http.post("/v1/users/u1/grants", headers=ha, json={"purpose": "p"})
    assert r.status_code == 422 and r.json()["field"] == "fields"
    g = api.http.post("/v1/users/u1/grants", headers=ha, json={"fields": ["address"], "purpose": "delivery"}).json()
    assert g["fields"] == ["address"] and g["actor"].startswith("key:")
    assert api.http.delete(f"/v1/grants/{g['id']}", headers=ha).json() == {"revoked": True}
    assert api.http.delete("/v1/grants/nope", headers=ha).status_code == 404


def test_export_plan_assemble_redact(api):
    h = api.h(api.key_a)
    assert api.http.get("/v1/users/ghost/export", headers=api.h(api.admin_a)).status_code == 404
    assert api.http.get("/v1/users/ghost/export", headers=h).status_code == 403  # the same for any user
    api.http.post("/v1/memories", headers=h, json={"user_id": "u1", "kind": "fact", "key": "city", "value": "上海",
                                                   "source": "user_confirmed", "now": T0})
    # an export holds L2/L3 values: the user's token or an admin key (probe 8), not an agent's key
    assert api.http.get("/v1/users/u1/export", headers=h).status_code == 403
    ex = api.http.get("/v1/users/u1/export", headers=api.h(api.admin_a)).json()
    assert ex["fields"]["city"]["current"]["value"] == "上海"
    plan = api.http.post("/v1/users/u1/plan", headers=h, json={"message": "我住在哪个城市?"}).json()
    assert set(plan) >= {"fact_recall", "preference_recall", "context_recall", "memory_priority"}
    asm = api.http.post("/v1/users/u1/assemble", headers=h, json={"message": "where do I live? city", "now": T0 + 1})
    assert asm.status_code == 200 and "<USER_FACTS>" in asm.json()["prompt"]
    r = api.http.post("/v1/redact", headers=h, json={"text": "call 13800138000 or mail a@b.com"}).json()
    assert "13800138000" not in r["text"] and "a@b.com" not in r["text"] and r["findings"]


def test_purge_by_an_admin_key_never_shortens_the_servers_retention(api):
    """POST /v1/purge (Client.purge): admin keys only; it applies the server's retention (or a longer one),
    so one tenant's admin cannot cut another tenant's recovery window."""
    from fastapi.testclient import TestClient

    import usermem

    day = 86_400.0
    m = api.memory
    m.write("acme", "p1", "fact", "city", "Oslo", now=T0)
    m.write("globex", "p2", "fact", "city", "Rome", now=T0)
    m.forget("acme", "p1", "city", now=T0 + 1)
    m.forget("globex", "p2", "city", now=T0 + 20 * day)
    h = api.h(api.admin_a)
    assert api.http.post("/v1/purge", headers=api.h(api.key_a), json={}).status_code == 403
    short = api.http.post("/v1/purge", headers=h, json={"retention_days": 1, "now": T0 + 40 * day})
    assert short.status_code == 422 and short.json()["field"] == "retention_days"
    ahead = api.http.post("/v1/purge", headers=h, json={"now": time.time() + 400 * day})
    assert ahead.status_code == 422 and ahead.json()["field"] == "now"  # would expire others' grants early
    client = usermem.Client("http://testserver", api.admin_a, http=TestClient(api.app))
    assert client.purge(T0 + 40 * day) == 1  # acme's row is 40 days gone (> 30); globex's only 20
    assert client.purge(T0 + 40 * day, retention_days=365) == 0
    assert m.purge(T0 + 60 * day) == 1  # globex's row was still held until its retention condemned it
