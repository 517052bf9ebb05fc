"""Two tenants, every /v1 endpoint: another tenant's user or memory is a 404 identical to an absent one,
and nothing of tenant A changes when tenant B calls. New endpoints must be added to CALLS (checked)."""

from __future__ import annotations

import pytest

from apihelp import T0, make_api

# (method, path template) -> request kwargs builder taking the ids of tenant A's data
CALLS = {
    ("POST", "/v1/memories"): lambda ids: {"json": {"user_id": "alice", "kind": "fact", "key": "city",
                                                      "value": "Nowhere", "now": T0 + 5}},
    ("POST", "/v1/memories/batch"): lambda ids: {"json": {"user_id": "alice", "now": T0 + 5, "writes": [
        {"kind": "fact", "key": "city", "value": "Nowhere"}]}},
    ("GET", "/v1/memories/{memory_id}"): lambda ids: {"url": f"/v1/memories/{ids['memory']}"},
    ("GET", "/v1/users/{user_id}/memories"): lambda ids: {"url": "/v1/users/{u}/memories"},
    ("GET", "/v1/users/{user_id}/memories/{key}/history"): lambda ids: {"url": "/v1/users/{u}/memories/city/history"},
    ("DELETE", "/v1/users/{user_id}/memories/{key}"): lambda ids: {"url": "/v1/users/{u}/memories/city"},
    ("DELETE", "/v1/users/{user_id}/memories"): lambda ids: {"url": "/v1/users/{u}/memories",
                                                             "params": {"since": 0}},
    ("DELETE", "/v1/users/{user_id}"): lambda ids: {"url": "/v1/users/{u}"},
    ("GET", "/v1/audit"): lambda ids: {"params": {"user_id": "{u}"}},
    ("GET", "/v1/whoami"): lambda ids: {},
}
# Endpoints that act on the caller's own tenant only (no foreign id in the request can reach tenant A).
OWN_TENANT = {("POST", "/v1/memories"), ("POST", "/v1/memories/batch"), ("GET", "/v1/audit"),
              ("GET", "/v1/whoami")}


@pytest.fixture
def setup():
    api = make_api()
    admin_b, _ = api.app.state.keys.create("globex", admin=True)
    r = api.http.post("/v1/memories", headers=api.h(api.key_a), json={
        "user_id": "alice", "kind": "fact", "key": "city", "value": "Berlin", "source": "system", "now": T0})
    ids = {"memory": r.json()["memory"]["id"]}
    yield api, admin_b, ids
    api.memory.close()


def _v1_routes(app) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in app.openapi()["paths"].items() if path.startswith("/v1")
            for method in ops}


def test_every_v1_endpoint_is_covered(setup):
    api, _, _ = setup
    assert _v1_routes(api.app) == set(CALLS), "add new endpoints to CALLS in this test"


def _request(api, key, method, template, spec, user):
    url = spec.get("url", template).replace("{u}", user)
    params = {k: (v.replace("{u}", user) if isinstance(v, str) else v) for k, v in spec.get("params", {}).items()}
    return api.http.request(method, url, headers=api.h(key), params=params, json=spec.get("json"))


@pytest.mark.parametrize(("method", "template"), sorted(CALLS))
def test_cross_tenant_access_is_refused(setup, method, template):
    api, admin_b, ids = setup
    before = [r.to_dict() for r in api.memory.history("acme", "alice", "city")]
    spec = CALLS[(method, template)](ids)
    r = _request(api, admin_b, method, template, spec, "alice")
    if (method, template) in OWN_TENANT:
        assert r.status_code == 200
        assert "Berlin" not in r.text and "acme" not in r.text
    else:
        assert r.status_code == 404, r.text
        # indistinguishable from a user/memory that does not exist at all
        spec_absent = CALLS[(method, template)]({"memory": "0" * 32})
        absent = _request(api, admin_b, method, template, spec_absent, "nobody")
        assert absent.status_code == 404
        assert {k: v for k, v in r.json().items() if k != "instance"} == \
            {k: v for k, v in absent.json().items() if k != "instance"}
    assert [x.to_dict() for x in api.memory.history("acme", "alice", "city")] == before
    audit_b = api.http.get("/v1/audit", headers=api.h(admin_b)).json()["items"]
    assert all(e["tenant"] == "globex" for e in audit_b)


def test_tenant_a_still_sees_its_data(setup):
    api, admin_b, _ = setup
    for (method, template), build in CALLS.items():
        if method == "DELETE":
            continue
        _request(api, admin_b, method, template, build({"memory": "x"}), "alice")
    items = api.http.get("/v1/users/alice/memories", params={"now": T0 + 10}, headers=api.h(api.key_a)).json()
    assert [i["memory"]["value"] for i in items["items"]] == ["Berlin"]
    theirs = api.http.get("/v1/users/alice/memories", params={"now": T0 + 10}, headers=api.h(api.key_b)).json()
    assert [i["memory"]["value"] for i in theirs["items"]] == ["Nowhere"]
