"""Issue 12 item 14: the OpenAPI schema states the constraints the engine enforces (from the same constants),
and numbers are numbers: `now: false` is refused (422), never read as 0."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from apihelp import make_api
from usermem.interfaces.api import schemas as S
from usermem.model import Source
from usermem.policy.validate import (
    ID_PATTERN,
    KEY_PATTERN,
    MAX_TTL_SECONDS,
    MAX_UNIX_SECONDS,
    MIN_UNIX_SECONDS,
)
from usermem.understand.service import MAX_BUDGET_TOKENS
from usermem.understand.text import MESSAGE_ROLES


@pytest.fixture(scope="module")
def api():
    a = make_api()
    yield a
    a.memory.close()


def _prop(schema: dict, model: str, field: str) -> dict:
    p = schema["components"]["schemas"][model]["properties"][field]
    if "anyOf" in p:  # Optional[...]: the non-null branch
        p = next(x for x in p["anyOf"] if x.get("type") != "null")
    return p


def test_literals_are_the_engine_enums():
    assert list(get_args(S.SourceName)) == [s.value for s in Source]
    assert set(get_args(S.Role)) == set(MESSAGE_ROLES)


def test_openapi_states_the_engine_bounds_patterns_and_enums(api):
    schema = api.http.get("/openapi.json").json()
    budget = _prop(schema, "AssembleIn", "budget_tokens")
    assert (budget["minimum"], budget["maximum"]) == (1, MAX_BUDGET_TOKENS)
    now = _prop(schema, "WriteIn", "now")
    assert (now["minimum"], now["maximum"]) == (MIN_UNIX_SECONDS, MAX_UNIX_SECONDS)
    assert _prop(schema, "WriteIn", "ttl_seconds")["maximum"] == MAX_TTL_SECONDS
    assert _prop(schema, "WriteIn", "importance")["maximum"] == 1
    user = _prop(schema, "WriteIn", "user_id")
    assert user["pattern"] == ID_PATTERN.pattern and user["maxLength"] == 128
    assert _prop(schema, "PushbackIn", "key")["pattern"] == KEY_PATTERN.pattern
    assert set(_prop(schema, "Message", "role")["enum"]) == set(MESSAGE_ROLES)
    assert _prop(schema, "ConfirmIn", "source")["enum"] == [s.value for s in Source]
    for s in Source:  # write sources are a decision (REJECT), documented from the enum
        assert s.value in _prop(schema, "WriteItem", "source")["description"]


def _post_write(api, user="u1", **extra):
    body = {"user_id": user, "kind": "fact", "key": "city", "value": "Paris", **extra}
    return api.http.post("/v1/memories", content=json.dumps(body), headers={**api.h(api.key_a),
                                                                              "content-type": "application/json"})


@pytest.mark.parametrize("extra", [{"now": False}, {"now": True}, {"now": float("inf")}, {"now": float("nan")},
                                   {"now": 1e300}, {"importance": True}, {"ttl_seconds": False},
                                   {"ttl_seconds": float("inf")}, {"event_at": "1700000000"},
                                   {"user_id": "bad\u0001id"}])
def test_booleans_and_non_finite_numbers_are_refused_not_coerced(api, extra):
    r = _post_write(api, **extra)
    assert r.status_code == 422, (extra, r.status_code, r.text)
    assert r.json()["code"] in ("validation_error", "invalid_input")
    assert api.memory.recall("acme", "u1") == []


def test_budget_over_the_engine_max_and_unknown_roles_are_422(api):
    h = api.h(api.key_a)
    for budget in (MAX_BUDGET_TOKENS + 1, 0, True, 800.5):
        r = api.http.post("/v1/users/u1/assemble", json={"message": "hi", "budget_tokens": budget}, headers=h)
        assert r.status_code == 422, (budget, r.text)
    assert api.http.post("/v1/users/u1/assemble", json={"message": "hi", "budget_tokens": MAX_BUDGET_TOKENS},
                         headers=h).status_code == 200
    r = api.http.post("/v1/users/u1/ingest", json={"messages": [{"role": "wizard", "content": "hi"}]}, headers=h)
    assert r.status_code == 422


def test_valid_numbers_still_work(api):
    r = _post_write(api, user="u2", now=1_700_000_000, importance=1, ttl_seconds=3600, event_at=1_699_000_000.5)
    assert r.status_code == 200 and r.json()["op"] == "ADD", r.text


def test_query_now_is_bounded_and_finite(api):
    schema = api.http.get("/openapi.json").json()
    params = schema["paths"]["/v1/users/{user_id}/memories"]["get"]["parameters"]
    now = next(p for p in params if p["name"] == "now")["schema"]
    now = next(x for x in now.get("anyOf", [now]) if x.get("type") != "null")
    assert (now["minimum"], now["maximum"]) == (MIN_UNIX_SECONDS, MAX_UNIX_SECONDS)
    h = api.h(api.key_a)
    for bad in ("nan", "inf", "-Infinity", "1e300", "false"):
        r = api.http.get("/v1/users/u1/memories", params={"now": bad}, headers=h)
        assert r.status_code == 422, (bad, r.text)


def test_path_user_id_carries_the_identifier_pattern(api):
    schema = api.http.get("/openapi.json").json()
    for path, ops in schema["paths"].items():
        if "{user_id}" not in path:
            continue
        for op in ops.values():
            p = next(x for x in op["parameters"] if x["name"] == "user_id")["schema"]
            assert p["pattern"] == ID_PATTERN.pattern and p["maxLength"] == 128, (path, p)
    r = api.http.get("/v1/users/" + "u" * 129 + "/memories", headers=api.h(api.key_a))
    assert r.status_code == 422
