"""Issue 12 "Done when": a hypothesis property over arbitrary JSON numbers AND strings in every write-side field,
over HTTP — never a 5xx, nothing non-finite stored, and the user is not poisoned (recall, export, history and
the audit still answer 200 with strict JSON). The fields include nested ones (a batch's write, a message of a
list, a contract's alias, a rule's condition) and the bodies whose values are kept in documents rather than
memories (signals, pushbacks, onboarding answers, contracts, derivation rules), where probe 7 found 500s."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apihelp import T0, make_api

API = make_api(rate_limit_per_minute=0)
H = API.h(API.admin_a)
M = API.memory

# Every write-side operation and every field of its body (the wire names); {u} / {s} are filled per example.
WRITE_ITEM = ("kind", "key", "value", "source", "importance", "confidence", "session_id", "client_id", "event_at",
              "ttl_seconds")
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "write": ("/v1/memories", {"user_id": "{u}", "kind": "fact", "key": "city", "value": "杭州", "source": "system",
                               "importance": 0.5, "confidence": 0.9, "now": T0, "session_id": "s-1",
                               "client_id": "web", "event_at": T0 - 10, "ttl_seconds": 3600.0,
                               "change_set_id": "cs-1", "actor": "agent"}),
    "write_many": ("/v1/memories/batch", {"user_id": "{u}", "now": T0, "change_set_id": "cs-2", "actor": "agent",
                                          "writes": [{"kind": "fact", "key": "city", "value": "杭州",
                                                      "source": "system", "importance": 0.5, "confidence": 0.9,
                                                      "session_id": "s-1", "client_id": "web",
                                                      "event_at": T0 - 10, "ttl_seconds": 3600.0}]}),
    "open_session": ("/v1/users/{u}/sessions", {"client_id": "web", "idle_seconds": 600.0, "now": T0}),
    "add_messages": ("/v1/sessions/{s}/messages", {"messages": [{"role": "user", "content": "我住在杭州"}],
                                                  "now": T0 + 1, "actor": "agent"}),
    "close_session": ("/v1/sessions/{s}/close", {"transcript": "我住在杭州", "now": T0 + 2, "actor": "agent"}),
    "grant": ("/v1/users/{u}/grants", {"level": "L2", "purpose": "support", "ttl_seconds": 600.0, "grantee": "key:x",
                                       "now": T0, "actor": "agent"}),
    "confirm": ("/v1/users/{u}/memories/{m}/confirm", {"now": T0 + 5, "actor": "agent", "source": "user_confirmed"}),
    "revert": ("/v1/users/{u}/memories/city/revert", {"to_version": 1, "now": T0 + 5, "actor": "agent"}),
    # bodies whose values are kept in documents, not memories (probe 7: a NaN or a lone surrogate here was a 500)
    "record_signal": ("/v1/users/{u}/signals", {"key": "tone", "value": "warm", "agree": True, "message": "nice",
                                                "now": T0}),
    "record_pushback": ("/v1/users/{u}/pushback", {"key": "reply_length", "message": "too long again",
                                                   "value": "short", "now": T0}),
    "accept_verification": ("/v1/users/{u}/verifications/v-none/accept", {"value": "short", "now": T0,
                                                                          "actor": "agent"}),
    "extract": ("/v1/extract", {"messages": ["我住在杭州", {"role": "user", "content": "I like tea"}]}),
    "ingest": ("/v1/users/{u}/ingest", {"messages": [{"role": "user", "content": "我住在杭州"}], "now": T0,
                                        "session_id": "s-1", "change_set_id": "cs-3", "actor": "agent"}),
    "request_consent": ("/v1/users/{u}/consent-requests", {"fields": ["city"], "purpose": "support",
                                                          "ttl_seconds": 600.0, "now": T0, "actor": "agent"}),
    "answer_onboarding": ("/v1/users/{u}/onboarding", {"answers": {"reply_length": "short"}, "now": T0}),
    "set_contract": ("PUT /v1/contracts/city", {"key": "city", "kind": "fact", "sensitivity": "L1", "enabled": True,
                                                "description": "home city", "aliases": ["town"], "domain": "general",
                                                "ttl_seconds": 3600.0, "questions": {"zh": "你住哪？", "en": "Where?"}}),
    "set_derivation_rule": ("PUT /v1/derivation-rules/r1", {"id": "r1", "when": {"city": ["杭州"]},
                                                           "then_key": "region", "then": {"zh": "华东", "en": "East"},
                                                           "status": "active"}),
}
# Nested fields fuzzed besides the top-level ones: a path of keys and list positions.
NESTED = {"extract": ("messages.0", "messages.1.content"), "ingest": ("messages.0.content",),
          "answer_onboarding": ("answers.reply_length",), "set_contract": ("aliases.0", "questions.zh"),
          "set_derivation_rule": ("when.city.0", "then.en")}
FIELDS = sorted({(op, f) for op, (_, body) in BODIES.items() for f in body}
                | {("write_many", f"writes.{f}") for f in WRITE_ITEM}
                | {(op, f) for op, fields in NESTED.items() for f in fields})

# JSON number literals, written as raw JSON text: huge, tiny, exponent overflow, NaN/Infinity (Python's json
# and many clients emit them), negative zero — and arbitrary finite ones.
NUMBER_LITERALS = st.one_of(
    st.sampled_from(["Infinity", "-Infinity", "NaN", "1e309", "-1e309", "1e308", "-1e308", "1" + "0" * 400,
                     "-0", "-0.0", "5e-324", "9223372036854775808", "18446744073709551616", "0", "1", "0.5",
                     "1790000000", "253402300800", "-62135596801"]),
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
# Arbitrary strings, lone surrogates included (sent as JSON \u escapes).
STRINGS = st.text(alphabet=st.characters(codec=None), max_size=30).map(lambda s: json.dumps(s, ensure_ascii=True))
RAW = st.one_of(NUMBER_LITERALS, STRINGS)


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"non-finite {name} in a response")

    return json.loads(text, parse_constant=refuse)


def _fixtures(user: str) -> dict[str, str]:
    sid = M.open_session("acme", user, now=T0)
    r = M.write("acme", user, "fact", "city", "上海", source="system", now=T0)
    M.write("acme", user, "fact", "city", "北京", source="system", now=T0 + 1)
    assert r.memory is not None
    return {"u": user, "s": sid, "m": M.history("acme", user, "city")[-1].id}


def _body(op: str, field: str, raw: str, ids: dict[str, str]) -> tuple[str, str, str]:
    """(method, path, body text) with `field` (a dotted path; writes.<f> is the batch's first write) set to `raw`."""
    route, template = BODIES[op]
    method, path = route.split(" ", 1) if " " in route else ("POST", route)
    marker = "\x00RAW\x00"
    body = json.loads(json.dumps(template).replace("{u}", ids["u"]))
    parts: list[Any] = ["writes", 0, field.split(".", 1)[1]] if field.startswith("writes.") else [
        int(p) if p.isdigit() else p for p in field.split(".")]
    target = body
    for p in parts[:-1]:
        target = target[p]
    target[parts[-1]] = marker
    text = json.dumps(body).replace(json.dumps(marker), raw)
    return method, path.format(**ids), text


# "Infinity" is among the critical literals through "-Infinity" and 1e309 (which JSON parsers read as infinity).
CRITICAL = ["-Infinity", "NaN", "1e309", '"\\ud800"']


def _check(op: str, field: str, raw: str, ids: dict[str, str]) -> None:
    method, path, text = _body(op, field, raw, ids)
    r = API.http.request(method, path, content=text, headers={**H, "Content-Type": "application/json"})
    assert r.status_code < 500, (op, field, raw, r.status_code, r.text[:300])
    assert r.status_code in (200, 201, 400, 403, 404, 409, 413, 422), (op, field, raw, r.status_code, r.text[:300])
    _strict(r.text)
    # the user is not poisoned, and nothing non-finite was stored
    user = ids["u"]
    for u in {user, *([body_user] if (body_user := _written_user(field, raw)) else [])}:
        got = API.http.get(f"/v1/users/{u}/memories", headers=H)
        assert got.status_code in (200, 404, 422), (u, got.status_code, got.text[:300])
        _strict(got.text)
    for rec in M.history("acme", user, "city"):
        for name in ("created_at", "expires_at", "event_at", "importance", "confidence", "last_confirmed_at"):
            v = getattr(rec, name)
            assert v is None or math.isfinite(v), (op, field, raw, name, v)


def _still_readable(user: str) -> None:
    """Export and the audit of the user answer 200 with strict JSON (no NaN/Infinity anywhere)."""
    for path, params in ((f"/v1/users/{user}/export", {}), ("/v1/audit", {"user_id": user, "limit": 1000})):
        got = API.http.get(path, params=params, headers=H)
        assert got.status_code == 200, (path, got.status_code, got.text[:300])
        _strict(got.text)


@pytest.mark.parametrize("op,field", FIELDS, ids=[f"{o}-{f}" for o, f in FIELDS])
def test_property_any_json_number_or_string_in_any_write_field_is_never_a_5xx(op, field):
    """Per field: the critical literals, then arbitrary JSON numbers and strings (hypothesis)."""
    ids = _fixtures("p" + uuid.uuid4().hex[:16])
    for raw in CRITICAL:
        _check(op, field, raw, {**ids, "s": M.open_session("acme", ids["u"], now=T0)})

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(RAW)
    def prop(raw: str) -> None:
        _check(op, field, raw, {**ids, "s": M.open_session("acme", ids["u"], now=T0)})

    prop()
    _still_readable(ids["u"])


def _written_user(field: str, raw: str) -> str | None:
    """The user a body's own user_id names (when that field is the fuzzed one and it is a plain token)."""
    if field != "user_id":
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, str) and value.isascii() and value.isalnum() else None


def test_every_write_field_is_fuzzed():
    assert len(FIELDS) >= 45 and ("write", "now") in FIELDS and ("write_many", "writes.ttl_seconds") in FIELDS
    assert {("record_signal", "value"), ("record_pushback", "value"), ("extract", "messages.0"),
            ("set_contract", "aliases.0"), ("answer_onboarding", "answers.reply_length")} <= set(FIELDS)
