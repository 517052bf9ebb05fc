"""HTTP API through httpx against the ASGI app: auth, decisions, errors, limits, metrics, readiness."""

from __future__ import annotations

import json

import pytest

from apihelp import T0, make_api
from usermem.errors import StoreError

PROBLEM = "application/problem+json"


@pytest.fixture
def api():
    a = make_api()
    yield a
    a.memory.close()


def write(api, api_key, **body):
    body.setdefault("user_id", "u1")
    body.setdefault("now", T0)
    return api.http.post("/v1/memories", json=body, headers=api.h(api_key))


def test_write_decisions_are_200s_including_reject(api):
    r = write(api, api.key_a, kind="preference", key="reply_length", value="concise", source="user_confirmed")
    assert r.status_code == 200 and r.json()["op"] == "ADD"
    mem = r.json()["memory"]
    assert mem["tenant"] == "acme" and mem["value"] == "concise" and mem["actor"].startswith("key:")
    r = write(api, api.key_a, kind="preference", key="reply_length", value="detailed", source="inferred")
    assert r.status_code == 200
    assert r.json()["op"] == "REJECT" and r.json()["reason"] == "lower_priority_source"
    r = write(api, api.key_a, kind="fact", key="card_number", value="4111111111111111")
    assert (r.status_code, r.json()["op"], r.json()["reason"]) == (200, "REJECT", "forbidden_key")
    r = write(api, api.key_a, kind="nonsense", key="x", value=1)
    assert (r.status_code, r.json()["op"], r.json()["reason"]) == (200, "REJECT", "invalid_input")
    assert "kind" in r.json()["detail"]


def test_tenant_comes_from_the_key_never_the_body(api):
    r = api.http.post("/v1/memories", headers=api.h(api.key_b),
                      json={"user_id": "u1", "tenant": "acme", "kind": "fact", "key": "city", "value": "Oslo"})
    assert r.status_code == 422 and r.json()["field"] == "tenant"
    r = write(api, api.key_b, kind="fact", key="city", value="Oslo")
    assert r.json()["memory"]["tenant"] == "globex"
    assert api.memory.recall("acme", "u1") == []


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer umk_000000000000_" + "x" * 43, "Basic abc"])
def test_missing_or_wrong_key_is_401_problem(api, header):
    headers = {"Authorization": header} if header else {}
    r = api.http.get("/v1/users/u1/memories", headers=headers)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["code"] == "unauthorized" and body["status"] == 401 and body["type"].endswith("unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"


def test_x_api_key_header_and_revocation(api):
    write(api, api.key_a, kind="fact", key="city", value="Oslo")
    r = api.http.get("/v1/users/u1/memories", headers={"X-API-Key": api.key_a})
    assert r.status_code == 200
    key_id = api.key_a.split("_")[1]
    api.app.state.keys.revoke(key_id)
    assert api.http.get("/v1/users/u1/memories", headers=api.h(api.key_a)).status_code == 401


def test_tenant_header_must_match_the_key(api):
    r = api.http.get("/v1/whoami", headers={**api.h(api.key_a), "X-Usermem-Tenant": "globex"})
    assert r.status_code == 403 and r.json()["code"] == "tenant_mismatch"
    r = api.http.get("/v1/whoami", headers={**api.h(api.key_a), "X-Usermem-Tenant": "acme"})
    assert r.json() == {"tenant": "acme", "key_id": api.key_a.split("_")[1], "admin": False, "user_id": None}


def test_validation_errors_name_the_field(api):
    r = api.http.post("/v1/memories", json={"user_id": "u1", "kind": "fact", "key": "city"}, headers=api.h(api.key_a))
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    assert r.json()["field"] == "value" and r.json()["code"] == "validation_error"
    r = api.http.get("/v1/users/u1/memories", params={"k": 0}, headers=api.h(api.key_a))
    assert r.status_code == 422 and r.json()["field"] == "k"
    r = api.http.post("/v1/memories", content=b"{not json", headers={**api.h(api.key_a),
                                                                      "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "body"
    r = write(api, api.key_a, user_id="", kind="fact", key="city", value="x")
    assert r.status_code == 422 and r.json()["field"] == "user_id"


def test_oversize_bodies_get_413():
    api = make_api(max_body_bytes=2048)
    big = {"user_id": "u1", "kind": "fact", "key": "bio", "value": "x" * 4000}
    r = api.http.post("/v1/memories", json=big, headers=api.h(api.key_a))
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"

    def chunks():  # no Content-Length: the limit applies while streaming
        data = json.dumps(big).encode()
        for i in range(0, len(data), 500):
            yield data[i:i + 500]

    r = api.http.post("/v1/memories", content=chunks(), headers={**api.h(api.key_a),
                                                                 "content-type": "application/json"})
    assert r.status_code == 413
    assert api.memory.recall("acme", "u1") == []
    # values over the engine's own limit but under the body limit are a REJECT decision, not an error
    api2 = make_api()
    r = write(api2, api2.key_a, kind="fact", key="bio", value="y" * 20_000)
    assert (r.status_code, r.json()["op"], r.json()["reason"]) == (200, "REJECT", "invalid_input")


def test_recall_history_forget_and_get(api):
    write(api, api.key_a, kind="fact", key="plan", value="basic", source="system")
    write(api, api.key_a, kind="fact", key="plan", value="pro", source="system", now=T0 + 10)
    write(api, api.key_a, kind="preference", key="tone", value="warm", source="user_confirmed")
    h = api.h(api.key_a)
    items = api.http.get("/v1/users/u1/memories", params={"k": 10, "now": T0 + 20}, headers=h).json()["items"]
    assert {i["memory"]["key"]: i["memory"]["value"] for i in items} == {"plan": "pro", "tone": "warm"}
    assert all(0 < i["weight"] <= 1 for i in items)
    only = api.http.get("/v1/users/u1/memories", params={"kinds": ["preference"], "now": T0 + 20}, headers=h)
    assert [i["memory"]["key"] for i in only.json()["items"]] == ["tone"]
    hist = api.http.get("/v1/users/u1/memories/plan/history", headers=h).json()["items"]
    assert [v["value"] for v in hist] == ["basic", "pro"] and hist[0]["superseded_by"] == hist[1]["id"]
    got = api.http.get(f"/v1/memories/{hist[0]['id']}", headers=h)
    assert got.status_code == 200 and got.json()["value"] == "basic"
    assert api.http.get("/v1/memories/nope", headers=h).json()["code"] == "memory_not_found"
    assert api.http.get("/v1/users/u1/memories/zzz/history", headers=h).status_code == 404
    r = api.http.delete("/v1/users/u1/memories/plan", headers=h)
    assert r.json() == {"deleted": 2}
    assert api.http.delete("/v1/users/u1/memories/plan", headers=h).status_code == 404
    r = api.http.delete("/v1/users/u1", headers=h)
    assert r.json() == {"deleted": 1}
    r = api.http.get("/v1/users/u1/memories", headers=h)
    assert r.status_code == 404 and r.json()["code"] == "user_not_found"
    assert api.http.delete("/v1/users/u1", headers=h).status_code == 404


def test_forget_range_requires_a_range(api):
    write(api, api.key_a, kind="fact", key="a", value=1, now=T0)
    write(api, api.key_a, kind="fact", key="b", value=2, now=T0 + 100)
    h = api.h(api.key_a)
    assert api.http.delete("/v1/users/u1/memories", headers=h).status_code == 422
    r = api.http.delete("/v1/users/u1/memories", params={"since": T0 + 50}, headers=h)
    assert r.json() == {"deleted": 1}
    assert [m.key for m in api.memory.recall("acme", "u1", now=T0 + 200)] == ["a"]


def test_batch_is_one_change_set(api):
    body = {"user_id": "u1", "now": T0, "writes": [
        {"kind": "fact", "key": "city", "value": "Lyon"},
        {"kind": "fact", "key": "password", "value": "hunter2"},
        {"kind": "preference", "key": "tone", "value": "dry", "source": "user_confirmed"}]}
    r = api.http.post("/v1/memories/batch", json=body, headers=api.h(api.key_a))
    assert r.status_code == 200
    out = r.json()
    assert [x["op"] for x in out["results"]] == ["ADD", "REJECT", "ADD"]
    sets = {x["memory"]["change_set_id"] for x in out["results"] if x["memory"]}
    assert sets == {out["change_set_id"]} and out["change_set_id"]
    r = api.http.post("/v1/memories/batch", json={"user_id": "u1", "writes": []}, headers=api.h(api.key_a))
    assert r.status_code == 422 and r.json()["field"] == "writes"


def test_audit_needs_an_admin_key_and_holds_no_values(api):
    write(api, api.key_a, kind="fact", key="city", value="Reykjavik")
    write(api, api.key_a, kind="fact", key="password", value="hunter2")
    r = api.http.get("/v1/audit", headers=api.h(api.key_a))
    assert r.status_code == 403 and r.json()["code"] == "admin_required"
    r = api.http.get("/v1/audit", params={"user_id": "u1"}, headers=api.h(api.admin_a))
    assert r.status_code == 200
    events = r.json()["items"]
    assert {e["op"] for e in events} >= {"ADD", "REJECT"} and all(e["tenant"] == "acme" for e in events)
    assert "Reykjavik" not in r.text and "hunter2" not in r.text


def test_rate_limit_per_key():
    api = make_api(rate_limit_per_minute=3)
    for _ in range(3):
        assert api.http.get("/v1/whoami", headers=api.h(api.key_a)).status_code == 200
    r = api.http.get("/v1/whoami", headers=api.h(api.key_a))
    assert r.status_code == 429 and r.json()["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
    assert api.http.get("/v1/whoami", headers=api.h(api.key_b)).status_code == 200


def test_user_bound_key_sees_only_its_user(api):
    bound, _ = api.app.state.keys.create("acme", user_id="alice")
    write(api, api.key_a, kind="fact", key="city", value="Rome", user_id="bob")
    write(api, bound, kind="fact", key="city", value="Paris", user_id="alice")
    assert api.http.get("/v1/users/bob/memories", headers=api.h(bound)).status_code == 404
    assert write(api, bound, kind="fact", key="city", value="x", user_id="bob").status_code == 404
    r = api.http.get("/v1/users/alice/memories", headers=api.h(bound))
    assert r.json()["items"][0]["memory"]["value"] == "Paris"


def test_metrics_count_requests_and_decisions(api):
    write(api, api.key_a, kind="fact", key="city", value="Oslo")
    write(api, api.key_a, kind="fact", key="password", value="x")
    api.http.get("/v1/users/u1/memories", headers=api.h(api.key_a))
    text = api.http.get("/metrics").text
    assert 'usermem_write_decisions_total{op="ADD",reason="none"} 1.0' in text
    assert 'usermem_write_decisions_total{op="REJECT",reason="forbidden_key"} 1.0' in text
    assert 'usermem_http_request_duration_seconds_count{method="GET",route="/v1/users/{user_id}/memories",status="200"} 1.0' in text


def test_health_and_readiness_check_every_backend():
    from fastapi.testclient import TestClient

    from usermem import Memory
    from usermem.interfaces.api import create_app

    def broken() -> None:
        raise StoreError("redis at 127.0.0.1:1 does not answer")

    m = Memory()
    c = TestClient(create_app(m, readiness_checks={"redis": broken}))
    assert c.get("/health").json()["status"] == "ok"
    r = c.get("/ready")
    assert r.status_code == 503
    assert r.json()["checks"]["store"] == "ok" and "does not answer" in r.json()["checks"]["redis"]
    m.close()
    r = c.get("/ready")
    assert r.status_code == 503 and r.json()["checks"]["store"].startswith("error")


def test_openapi_and_docs(api):
    spec = api.http.get("/openapi.json").json()
    for path in ("/v1/memories", "/v1/users/{user_id}/memories", "/v1/users/{user_id}/memories/{key}/history",
                 "/v1/users/{user_id}"):
        assert path in spec["paths"]
    assert "delete" in spec["paths"]["/v1/users/{user_id}"] and "post" in spec["paths"]["/v1/memories"]
    assert "Problem" in spec["components"]["schemas"]
    assert api.http.get("/docs").status_code == 200


def test_unknown_route_and_method_are_problems(api):
    r = api.http.get("/v1/nothing", headers=api.h(api.key_a))
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
    r = api.http.put("/v1/memories", headers=api.h(api.key_a))
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"


def test_chinese_values_round_trip(api):
    r = write(api, api.key_a, kind="preference", key="greeting", value="请用简体中文回复", source="user_confirmed")
    assert r.json()["op"] == "ADD"
    items = api.http.get("/v1/users/u1/memories", params={"now": T0 + 5}, headers=api.h(api.key_a)).json()["items"]
    assert items[0]["memory"]["value"] == "请用简体中文回复"
    r = write(api, api.key_a, kind="fact", key="id_card", value="身份证 110101199003074578")
    assert r.json()["op"] == "REJECT"


@pytest.mark.redis
def test_readiness_checks_each_tier_of_a_tiered_store():
    import uuid

    import redis
    from fastapi.testclient import TestClient

    from usermem import Memory
    from usermem.config import load_settings
    from usermem.interfaces.api import create_app

    prefix = "apitest" + uuid.uuid4().hex[:8]
    settings = load_settings(env={}, embedder="none", preset="tiered", redis_url="redis://127.0.0.1:6379/0",
                             key_prefix=prefix)
    m = Memory(settings=settings)
    try:
        c = TestClient(create_app(m))
        r = c.get("/ready")
        assert r.status_code == 200 and r.json()["checks"] == {"store": "ok", "tier:redis": "ok"}
        tier = m.store.tiers[0]
        live_client = tier.client
        tier.client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        r = c.get("/ready")
        assert r.status_code == 503 and r.json()["checks"]["store"] == "ok"
        assert r.json()["checks"]["tier:redis"].startswith("error")
        tier.client = live_client
    finally:
        r = redis.Redis(host="127.0.0.1", port=6379)
        for k in r.scan_iter(f"{prefix}*"):
            r.delete(k)
        m.close()


def test_docs_pages_work_offline(api):
    """/docs and /redoc reference only assets the server itself serves (no CDN), and those assets are there."""
    import re

    for page, kinds in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")),
                        ("/redoc", ("redoc.standalone.js", "favicon.png"))):
        html = api.http.get(page).text
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url:\s*'([^']+)'""", html)
        refs = [a or b for a, b in urls]
        assert refs, page
        assert all(r.startswith("/") and not r.startswith("//") for r in refs), (page, refs)
        assert "http://" not in html.replace("http://testserver", "") and "https://" not in html, page
        for name in kinds:
            ref = next(r for r in refs if r.endswith(name))
            got = api.http.get(ref)
            assert got.status_code == 200 and len(got.content) > 1000, ref
    assert api.http.get("/docs/oauth2-redirect").status_code == 200
