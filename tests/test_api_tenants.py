"""Two tenants, every /v1 endpoint. Tenant B's (admin) key, aimed at tenant A's users, memories, sessions,
change sets and grants, gets exactly what it would get if they did not exist at all (compared with the
same request on an empty store), and nothing of tenant A changes. New endpoints must be added to CALLS."""

from __future__ import annotations

import pytest

from apihelp import T0, make_api

# (METHOD, path template) -> (url with {ids}, request kwargs). {u} is A's user, {mid} A's memory id,
# {sid} A's session, {cs} A's change set, {gid} A's grant, {vid} A's pending verification.
CALLS: dict[tuple[str, str], tuple[str, dict]] = {
    ("POST", "/v1/memories"): ("/v1/memories", {"json": {"user_id": "{u}", "kind": "fact", "key": "city",
                                                          "value": "Nowhere", "now": T0 + 5}}),
    ("POST", "/v1/memories/batch"): ("/v1/memories/batch", {"json": {"user_id": "{u}", "now": T0 + 5, "writes": [
        {"kind": "fact", "key": "city", "value": "Nowhere"}]}}),
    ("GET", "/v1/memories/{memory_id}"): ("/v1/memories/{mid}", {}),
    ("GET", "/v1/users/{user_id}/federation/notices"): ("/v1/users/alice/federation/notices", {}),
    ("POST", "/v1/users/{user_id}/federation/notices/{notice_id}/keep"): (
        "/v1/users/alice/federation/notices/n1/keep", {"json": {"now": T0 + 5}}),
    ("GET", "/v1/users/{user_id}/memories"): ("/v1/users/{u}/memories", {}),
    ("GET", "/v1/users/{user_id}/memories/{key}/history"): ("/v1/users/{u}/memories/city/history", {}),
    ("DELETE", "/v1/users/{user_id}/memories/{key}"): ("/v1/users/{u}/memories/city", {}),
    ("DELETE", "/v1/users/{user_id}/memories"): ("/v1/users/{u}/memories", {"params": {"since": 0}}),
    ("DELETE", "/v1/users/{user_id}"): ("/v1/users/{u}", {}),
    ("GET", "/v1/audit"): ("/v1/audit", {"params": {"user_id": "{u}"}}),
    ("GET", "/v1/whoami"): ("/v1/whoami", {}),
    ("POST", "/v1/users/{user_id}/memories/{memory_id}/confirm"): ("/v1/users/{u}/memories/{mid}/confirm",
                                                                    {"json": {}}),
    ("POST", "/v1/users/{user_id}/memories/{memory_id}/deny"): ("/v1/users/{u}/memories/{mid}/deny", {"json": {}}),
    ("POST", "/v1/users/{user_id}/memories/{key}/revert"): ("/v1/users/{u}/memories/city/revert", {"json": {}}),
    ("POST", "/v1/change-sets/{change_set_id}/revert"): ("/v1/change-sets/{cs}/revert", {"json": {}}),
    ("POST", "/v1/users/{user_id}/sessions"): ("/v1/users/{u}/sessions", {"json": {}}),
    ("GET", "/v1/users/{user_id}/sessions"): ("/v1/users/{u}/sessions", {}),
    ("GET", "/v1/sessions/{session_id}"): ("/v1/sessions/{sid}", {}),
    ("POST", "/v1/sessions/{session_id}/messages"): ("/v1/sessions/{sid}/messages",
                                                     {"json": {"messages": [{"role": "user", "content": "hi"}]}}),
    ("POST", "/v1/sessions/{session_id}/close"): ("/v1/sessions/{sid}/close", {"json": {}}),
    ("GET", "/v1/sessions/{session_id}/context"): ("/v1/sessions/{sid}/context", {}),
    ("POST", "/v1/users/{user_id}/plan"): ("/v1/users/{u}/plan", {"json": {"message": "where do I live?"}}),
    ("POST", "/v1/users/{user_id}/assemble"): ("/v1/users/{u}/assemble", {"json": {"message": "where do I live?",
                                                                                   "now": T0 + 5}}),
    ("POST", "/v1/users/{user_id}/ingest"): ("/v1/users/{u}/ingest", {"json": {"messages": [
        {"role": "user", "content": "I moved to Nowhere"}], "now": T0 + 5}}),
    ("GET", "/v1/users/{user_id}/export"): ("/v1/users/{u}/export", {}),
    ("POST", "/v1/users/{user_id}/grants"): ("/v1/users/{u}/grants", {"json": {"level": "L2", "purpose": "t"}}),
    ("GET", "/v1/users/{user_id}/grants"): ("/v1/users/{u}/grants", {}),
    ("DELETE", "/v1/grants/{grant_id}"): ("/v1/grants/{gid}", {}),
    ("GET", "/v1/contracts"): ("/v1/contracts", {}),
    ("GET", "/v1/contracts/{key}"): ("/v1/contracts/secret_field", {}),
    ("PUT", "/v1/contracts/{key}"): ("/v1/contracts/other_field", {"json": {"kind": "fact"}}),
    ("POST", "/v1/contracts/{key}/enable"): ("/v1/contracts/secret_field/enable", {}),
    ("POST", "/v1/contracts/{key}/disable"): ("/v1/contracts/secret_field/disable", {}),
    ("POST", "/v1/redact"): ("/v1/redact", {"json": {"text": "13800138000"}}),
    ("GET", "/v1/users/{user_id}/episodes"): ("/v1/users/{u}/episodes", {}),
    ("POST", "/v1/users/{user_id}/consents"): ("/v1/users/{u}/consents", {"json": {"fields": ["city"],
                                                                                  "domain": "shop"}}),
    ("POST", "/v1/users/{user_id}/consents/withdraw"): ("/v1/users/{u}/consents/withdraw",
                                                        {"json": {"fields": ["city"], "domain": "shop"}}),
    ("GET", "/v1/users"): ("/v1/users", {}),
    ("POST", "/v1/users/{user_id}/consent-requests"): ("/v1/users/{u}/consent-requests",
                                                       {"json": {"fields": ["city"], "purpose": "lunch"}}),
    ("GET", "/v1/users/{user_id}/consent-requests"): ("/v1/users/{u}/consent-requests", {"params": {"status": "all"}}),
    ("POST", "/v1/users/{user_id}/consent-requests/{request_id}/approve"): (
        "/v1/users/{u}/consent-requests/{rid}/approve", {"json": {}}),
    ("POST", "/v1/users/{user_id}/consent-requests/{request_id}/decline"): (
        "/v1/users/{u}/consent-requests/{rid}/decline", {"json": {}}),
    ("GET", "/v1/contracts/{key}/history"): ("/v1/contracts/secret_field/history", {}),
    ("DELETE", "/v1/contracts/{key}"): ("/v1/contracts/secret_field", {}),
    ("PUT", "/v1/settings/unknown-fields"): ("/v1/settings/unknown-fields", {"json": {"policy": "reject"}}),
    ("GET", "/v1/users/{user_id}/onboarding"): ("/v1/users/{u}/onboarding", {}),
    ("POST", "/v1/users/{user_id}/onboarding"): ("/v1/users/{u}/onboarding", {"json": {"answers": {}}}),
    ("PUT", "/v1/onboarding"): ("/v1/onboarding", {"json": {"questions": []}}),
    ("POST", "/v1/users/{user_id}/pushback"): ("/v1/users/{u}/pushback", {"json": {"key": "reply_length",
                                                                                  "message": "too long", "now": T0}}),
    ("GET", "/v1/users/{user_id}/verifications"): ("/v1/users/{u}/verifications", {}),
    ("POST", "/v1/users/{user_id}/verifications/{verification_id}/accept"): (
        "/v1/users/{u}/verifications/{vid}/accept", {"json": {"value": "x"}}),
    ("POST", "/v1/users/{user_id}/verifications/{verification_id}/reject"): (
        "/v1/users/{u}/verifications/{vid}/reject", {"json": {}}),
    ("POST", "/v1/sessions/{session_id}/touch"): ("/v1/sessions/{sid}/touch", {"json": {}}),
    ("POST", "/v1/sessions/expire"): ("/v1/sessions/expire", {"json": {"now": T0 + 10**8}}),
    ("GET", "/v1/grants"): ("/v1/grants", {"params": {"user_id": "{u}"}}),
    ("POST", "/v1/extract"): ("/v1/extract", {"json": {"messages": ["I live in Nowhere"]}}),
    ("POST", "/v1/purge"): ("/v1/purge", {"json": {"now": T0 + 10**8}}),
    # the user model (issue 18)
    ("GET", "/v1/users/{user_id}/model"): ("/v1/users/{u}/model", {"params": {"now": T0 + 5}}),
    ("POST", "/v1/users/{user_id}/signals"): ("/v1/users/{u}/signals", {"json": {"key": "reply_length",
                                                                                "value": "简洁", "now": T0}}),
    ("GET", "/v1/settings/inference"): ("/v1/settings/inference", {}),
    ("PUT", "/v1/settings/inference"): ("/v1/settings/inference", {"json": {"mode": "active"}}),
    ("GET", "/v1/derivation-rules"): ("/v1/derivation-rules", {}),
    ("PUT", "/v1/derivation-rules/{rule_id}"): ("/v1/derivation-rules/r.x", {"json": {
        "when": {"occupation": ["x"]}, "then_key": "expertise", "then": {"en": "y"}}}),
    ("POST", "/v1/derivation-rules/suggest"): ("/v1/derivation-rules/suggest", {"json": {}}),
    ("POST", "/v1/procedures"): ("/v1/procedures", {"json": {"text": "invoice first", "user_id": "{u}"}}),
    ("GET", "/v1/procedures"): ("/v1/procedures", {"params": {"user_id": "{u}"}}),
    ("POST", "/v1/procedures/{procedure_id}/review"): ("/v1/procedures/{pid}/review", {"json": {"decision": "reject"}}),
    ("POST", "/v1/procedures/{procedure_id}/rollback"): ("/v1/procedures/{pid}/rollback", {"json": {}}),
    ("POST", "/v1/users/{user_id}/procedures/suggest"): ("/v1/users/{u}/procedures/suggest", {"json": {}}),
    # webhooks (issue 16): {wh} is A's subscription
    ("POST", "/v1/webhooks"): ("/v1/webhooks", {"json": {"url": "http://127.0.0.1:9/b-hook", "now": T0 + 5}}),
    ("GET", "/v1/webhooks"): ("/v1/webhooks", {}),
    ("GET", "/v1/webhooks/{webhook_id}"): ("/v1/webhooks/{wh}", {}),
    ("DELETE", "/v1/webhooks/{webhook_id}"): ("/v1/webhooks/{wh}", {}),
    ("POST", "/v1/webhooks/{webhook_id}/enable"): ("/v1/webhooks/{wh}/enable", {"json": {}}),
    ("POST", "/v1/webhooks/{webhook_id}/ping"): ("/v1/webhooks/{wh}/ping", {"json": {}}),
    ("GET", "/v1/webhook-deliveries"): ("/v1/webhook-deliveries", {"params": {"webhook_id": "{wh}"}}),
}
# Responses that legitimately carry fresh ids or times: compare status and tenant only.
VOLATILE = {("POST", "/v1/memories"), ("POST", "/v1/memories/batch"), ("POST", "/v1/users/{user_id}/sessions"),
            ("GET", "/v1/whoami"), ("POST", "/v1/users/{user_id}/grants"), ("PUT", "/v1/contracts/{key}"),
            ("POST", "/v1/users/{user_id}/ingest"), ("GET", "/v1/audit"), ("POST", "/v1/users/{user_id}/assemble"),
            ("GET", "/v1/users/{user_id}/export"), ("PUT", "/v1/onboarding"),
            ("POST", "/v1/users/{user_id}/consent-requests"),  # a new request in B's own tenant: new id
            ("POST", "/v1/procedures"), ("POST", "/v1/webhooks")}


def _populate(api) -> dict[str, str]:
    """Tenant A's data: alice with a memory, a change set, a session, a grant and a tenant contract."""
    h = api.h(api.admin_a)
    r = api.http.post("/v1/memories/batch", headers=h, json={"user_id": "alice", "now": T0, "writes": [
        {"kind": "fact", "key": "city", "value": "Berlin", "source": "system"}]}).json()
    ids = {"u": "alice", "mid": r["results"][0]["memory"]["id"], "cs": r["change_set_id"]}
    api.http.post("/v1/memories", headers=h, json={"user_id": "alice", "kind": "fact", "key": "city",
                                                   "value": "Munich", "source": "system", "now": T0 + 1})
    ids["sid"] = api.http.post("/v1/users/alice/sessions", headers=h, json={}).json()["id"]
    ids["rid"] = api.http.post("/v1/users/alice/consent-requests", headers=h,
                               json={"fields": ["city"], "purpose": "lunch"}).json()["id"]
    ids["gid"] = api.http.post("/v1/users/alice/grants", headers=h,
                               json={"level": "L2", "purpose": "support"}).json()["id"]
    ids["pid"] = api.http.post("/v1/procedures", headers=h, json={"text": "invoice first", "user_id": "alice"}
                               ).json()["id"]
    ids["wh"] = api.http.post("/v1/webhooks", headers=h, json={"url": "http://127.0.0.1:9/a-hook", "now": T0}
                              ).json()["id"]
    assert api.http.put("/v1/contracts/secret_field", headers=h, json={"kind": "fact"}).status_code == 200
    for i in range(3):
        out = api.http.post("/v1/users/alice/pushback", headers=h, json={
            "key": "reply_length", "message": "too long again", "value": "concise", "now": T0 + i}).json()
    ids["vid"] = out["verification"]["id"]
    return ids


def _snapshot(api) -> dict:
    m = api.memory
    return {"history": [r.to_dict() for r in m.history("acme", "alice", "city")],
            "sessions": [s.to_dict() for s in m.sessions("acme", "alice")],
            "grants": [g.to_dict() for g in m.grants("acme", "alice")],
            "consents": [r.to_dict() for r in m.consent_requests("acme", "alice", status=None)],
            "contract": m.contract("acme", "secret_field").to_dict(),
            "verifications": m.pending_verifications("acme", "alice"),
            "onboarding": m.onboarding_questions("acme", "alice"),
            "procedures": m.procedures("acme", user_id="alice"), "rules": m.derivation_rules("acme"),
            "inference": m.inference_policy("acme"),
            "webhooks": [w.to_dict() for w in m.list_webhooks("acme")],
            "deliveries": [d.to_dict() for d in m.webhook_deliveries("acme")]}


@pytest.fixture
def two():
    populated, empty = make_api(), make_api()
    admin_b, _ = populated.app.state.keys.create("globex", admin=True)
    admin_b_empty, _ = empty.app.state.keys.create("globex", admin=True)
    ids = _populate(populated)
    yield populated, admin_b, empty, admin_b_empty, ids
    populated.memory.close()
    empty.memory.close()


def test_every_v1_endpoint_is_covered():
    api = make_api()
    paths = {(method.upper(), path) for path, ops in api.app.openapi()["paths"].items() if path.startswith("/v1")
             for method in ops}
    assert paths == set(CALLS), "add new endpoints to CALLS in this test"
    api.memory.close()


def _fill(value, ids):
    if isinstance(value, str):
        for k, v in ids.items():
            value = value.replace("{" + k + "}", v)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _call(api, key, method, spec, ids):
    url, kw = spec
    return api.http.request(method, _fill(url, ids), headers=api.h(key), **_fill(kw, ids))


@pytest.mark.parametrize(("method", "template"), sorted(CALLS))
def test_cross_tenant_is_indistinguishable_from_absent(two, method, template):
    populated, admin_b, empty, admin_b_empty, ids = two
    before = _snapshot(populated)
    got = _call(populated, admin_b, method, CALLS[(method, template)], ids)
    absent = _call(empty, admin_b_empty, method, CALLS[(method, template)], ids)
    assert got.status_code == absent.status_code, got.text
    assert got.status_code < 500
    assert "Berlin" not in got.text and "Munich" not in got.text and '"acme"' not in got.text
    if (method, template) not in VOLATILE:
        assert got.json() == absent.json()
    assert _snapshot(populated) == before


def test_tenant_a_still_sees_its_data(two):
    populated, admin_b, _, _, ids = two
    for (method, _template), spec in CALLS.items():
        _call(populated, admin_b, method, spec, ids)
    h = populated.h(populated.admin_a)
    items = populated.http.get("/v1/users/alice/memories", params={"now": T0 + 10}, headers=h).json()["items"]
    assert [i["memory"]["value"] for i in items] == ["Munich"]
    assert populated.http.get(f"/v1/sessions/{ids['sid']}", headers=h).json()["status"] == "open"
    assert [g["id"] for g in populated.http.get("/v1/users/alice/grants", headers=h).json()["items"]] == [ids["gid"]]
