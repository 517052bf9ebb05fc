"""MCP written for models (issue 16), through the SDK's own client session: every argument described with
the catalogue's text and rules, enums, the key pattern, read-only / destructive hints, ISO-8601 times, the
free-text `ingest`, `forget_user`, `episodes`, `withdraw_consent`, and errors that say what to do."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import anyio
from mcp import Client

from apihelp import fast_memory
from usermem.interfaces import catalog as C
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.mcp import build_server

ERROR = re.compile(r"^(?P<code>[a-z_]+) \((?P<status>\d{3})\): .+ — .+")


def _session(server: Any, body: Any) -> Any:
    async def go() -> Any:
        async with Client(server) as c:
            return await body(c)

    return anyio.run(go)


def _error(r: Any) -> tuple[str, int, str]:
    assert r.is_error, r.content
    text = r.content[0].text
    m = ERROR.match(text)
    assert m, text
    return m["code"], int(m["status"]), text


def test_tool_schemas_state_descriptions_rules_enums_and_hints():
    m = fast_memory()

    async def body(c: Client) -> dict[str, Any]:
        return {t.name: t for t in (await c.list_tools()).tools}

    tools = _session(build_server(m, tenant="acme"), body)
    m.close()
    assert {"ingest", "forget_user", "episodes", "withdraw_consent"} <= set(tools)
    assert "consent" not in tools and "opt_in" not in tools  # a model never opts the user in
    for name, tool in tools.items():
        op = next(o for o in C.OPERATIONS.values() if o.mcp is not None and o.mcp.tool == name)
        assert op.mcp is not None and op.mcp.guide and op.mcp.guide in (tool.description or "")
        ann = tool.annotations
        assert ann is not None and ann.read_only_hint is op.mcp.read_only, name
        if not op.mcp.read_only:
            assert ann.destructive_hint is op.mcp.destructive, name
        props = tool.input_schema["properties"]
        for arg, spec in props.items():
            assert spec.get("description"), (name, arg)
            target = op.mcp.args[arg]
            base = C.describe(arg) or C.describe(target)  # the tool argument's own text, else its parameter's
            if target not in C.TIME_PARAMS:  # one text per parameter, the catalogue's
                assert base and spec["description"].startswith(base), (name, arg, spec["description"])
            if target in C.TIME_PARAMS:
                types = [(x.get("type"), x.get("format")) for x in spec["anyOf"]]
                assert ("number", None) in types and ("string", "date-time") in types, (name, arg, types)
                assert "ISO-8601" in spec["description"]
        if "key" in props:
            assert props["key"]["pattern"] == "^[a-z0-9_.\\-]{1,64}$" and props["key"]["maxLength"] == 64
        if "user_id" in props:
            assert any(x.get("maxLength") == 128 for x in props["user_id"]["anyOf"])
    assert tools["episodes"].annotations.read_only_hint
    # recall and assemble record when each memory was used (decay), so they are not read-only, and not
    # destructive either
    for used in ("recall", "assemble"):
        assert tools[used].annotations.read_only_hint is False and tools[used].annotations.destructive_hint is False
    assert tools["forget_user"].annotations.destructive_hint and tools["forget"].annotations.destructive_hint
    assert tools["remember"].annotations.destructive_hint is False  # an update keeps the old version
    kinds = tools["recall"].input_schema["$defs"]["Kind"]["enum"]
    assert tuple(kinds) == C.KINDS
    # the catalogue's descriptions are the OpenAPI ones too: one text per parameter
    assert props_desc(tools["history"], "key") == C.describe("key")


def props_desc(tool: Any, arg: str) -> str:
    return str(tool.input_schema["properties"][arg]["description"])


def test_free_text_ingest_iso_times_and_episodes():
    # The tools judge at the server clock, so the dates are a few days before today (episodes expire).
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    iso = lambda d: d.date().isoformat()  # noqa: E731
    m = fast_memory()
    sid = m.open_session("acme", "alice", now=(day + timedelta(hours=9)).timestamp())
    m.close_session(sid, [{"role": "user", "content": "we planned the trip to Kyoto"}],
                    now=(day + timedelta(hours=10)).timestamp())
    trip_at = (day + timedelta(days=1, hours=12)).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def body(c: Client) -> None:
        r = await c.call_tool("ingest", {"text": "I live in Berlin and I prefer short answers. "
                                                 "My card number is 4111 1111 1111 1111"})
        assert not r.is_error, r.content
        got = {x["memory"]["key"]: x["memory"]["value"] for x in r.structured_content["results"] if x["memory"]}
        assert got.get("city") == "Berlin" and "reply_length" in got
        assert not any("4111" in str(v) for v in got.values())
        r = await c.call_tool("recall", {"k": 20})
        assert "4111" not in str(r.structured_content)
        # ISO-8601 and Unix seconds name the same instants
        r = await c.call_tool("remember", {"key": "trip", "value": "Kyoto", "kind": "situation",
                                           "event_at": trip_at})
        assert r.structured_content["op"] == "ADD", r.content
        assert r.structured_content["memory"]["key"] == "trip"
        r = await c.call_tool("recall", {"event_from": iso(day + timedelta(days=1)),
                                         "event_until": (day + timedelta(days=2)).isoformat()})
        assert [x["key"] for x in r.structured_content["memories"]] == ["trip"]
        r = await c.call_tool("recall", {"event_from": (day + timedelta(days=2)).timestamp(),
                                         "event_until": iso(day + timedelta(days=3))})
        assert "trip" not in [x["key"] for x in r.structured_content["memories"]]
        r = await c.call_tool("recall", {"event_from": "yesterday-ish"})
        code, status, text = _error(r)
        assert (code, status) == ("validation_error", 422) and "event_from" in text
        r = await c.call_tool("episodes", {"since": day.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                           "until": iso(day + timedelta(days=1))})
        assert not r.is_error, r.content
        assert [e["value"]["session_id"] for e in r.structured_content["episodes"]] == [sid]
        r = await c.call_tool("episodes", {"since": iso(day + timedelta(days=1))})
        assert r.structured_content["episodes"] == []

    _session(build_server(m, tenant="acme", user_id="alice"), body)
    m.close()


def test_forget_user_needs_confirm_and_consent_can_be_withdrawn():
    m = fast_memory()
    m.write("acme", "bob", "fact", "allergy", "peanuts", source="user_confirmed")
    m.write("acme", "bob", "fact", "city", "Oslo", source="user_confirmed")
    m.write("acme", "carol", "fact", "city", "Rome", source="user_confirmed")
    m.opt_in("acme", "bob", ["allergy"], "shop")  # the user's own decision, recorded by the application

    async def body(c: Client) -> None:
        assert ("allergy", "shop") in _consents(m, "bob")
        r = await c.call_tool("withdraw_consent", {"fields": ["Allergy!"], "domain": "shop", "user_id": "bob"})
        assert _error(r)[:2] == ("validation_error", 422)
        r = await c.call_tool("withdraw_consent", {"fields": ["allergy"], "domain": "shop", "user_id": "bob"})
        assert r.structured_content["removed"] == 1 and _consents(m, "bob") == set()
        r = await c.call_tool("forget_user", {"user_id": "bob", "confirm": False})
        code, status, text = _error(r)
        assert (code, status) == ("validation_error", 422) and "confirm" in text
        assert m.recall("acme", "bob")
        r = await c.call_tool("forget_user", {"user_id": "bob"})
        assert _error(r)[:2] == ("validation_error", 422)  # confirm is required
        r = await c.call_tool("forget_user", {"user_id": "bob", "confirm": True})
        assert not r.is_error and r.structured_content["deleted"] >= 2

    _session(build_server(m, tenant="acme"), body)
    assert m.recall("acme", "bob") == [] and [r.value for r in m.recall("acme", "carol")] == ["Rome"]
    m.close()


def _consents(m: Any, user: str) -> set[tuple[str, str]]:
    docs = m.export("acme", user)["documents"].get("consents", [])
    return {(d["value"]["field"], d["value"]["domain"]) for d in docs}


def test_errors_say_what_went_wrong_and_what_to_do():
    m = fast_memory()
    m.write("acme", "alice", "fact", "allergy", "peanuts", source="user_confirmed")

    async def body(c: Client) -> None:
        r = await c.call_tool("history", {"key": "allergy"})  # L3: needs a grant
        code, status, text = _error(r)
        assert (code, status) == ("permission_denied", 403) and "grant" in text and "do not retry" in text
        r = await c.call_tool("remember", {"key": "city", "value": "Paris", "kind": "address"})
        code, status, text = _error(r)
        assert (code, status) == ("validation_error", 422) and "kind" in text and "'preference'" in text
        r = await c.call_tool("remember", {"key": "Home City", "value": "Paris"})
        code, status, text = _error(r)
        assert (code, status) == ("validation_error", 422) and "key" in text and "pattern" in text
        r = await c.call_tool("confirm", {"key": "nothing_here"})
        assert _error(r)[:2] == ("not_found", 404)
        r = await c.call_tool("recall", {"user_id": "mallory"})
        assert _error(r)[:2] == ("bound_user", 403)
        assert "Error executing tool" not in r.content[0].text

    _session(build_server(m, tenant="acme", user_id="alice"), body)
    m.close()


def test_revoked_key_is_a_401_tool_error():
    """A key revoked while its session is open: the next call is `unauthorized (401)`, not a protocol error."""
    from usermem.interfaces.mcp import Binding

    m = fast_memory()
    ring = KeyRing(m.store)
    secret, rec = ring.create("acme", user_id="alice")
    key_id = rec.id

    ctx = SimpleNamespace(headers={"authorization": f"Bearer {secret}"})  # what Context.headers gives a tool
    bind = Binding(tenant=None, user_id=None, keys=ring)
    assert bind.resolve(ctx, None) == ("acme", "alice", f"mcp:key:{key_id}")  # type: ignore[arg-type]
    ring.revoke(key_id)
    try:
        bind.resolve(ctx, None)  # type: ignore[arg-type]
    except Exception as exc:
        assert str(exc).startswith("unauthorized (401): invalid or revoked API key — ")
    else:
        raise AssertionError("a revoked key was accepted")
    m.close()


def test_openapi_parameters_take_the_catalogues_text():
    """The HTTP schema describes every parameter; where a route gives no text of its own it is the
    catalogue's, the same the MCP tools carry."""
    from usermem.interfaces.api.app import create_app

    m = fast_memory()
    schema = create_app(m).openapi()
    m.close()
    params = [p for ops in schema["paths"].values() for op in ops.values() for p in op.get("parameters", [])]
    assert params and all(p.get("description") for p in params)
    episodes = schema["paths"]["/v1/users/{user_id}/episodes"]["get"]["parameters"]
    assert {p["name"]: p["description"] for p in episodes}["limit"] == C.describe("limit")
