"""Parity of every interface with the operation catalogue (`usermem.interfaces.catalog`).

Fails when an operation of `Memory` has no counterpart (HTTP route, `Client`, `AsyncClient`, MCP tool or
CLI command — or a declared reason), when the catalogue's HTTP binding does not match the routes, or when
a parameter is dropped: every operation is called through `Client` → HTTP → a recording `Memory` with a
non-default value for every parameter, and each value must arrive.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import asdict
from typing import Any

import anyio
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

import usermem
from apihelp import T0, make_api
from usermem import Memory
from usermem.config import load_settings
from usermem.interfaces import catalog as C
from usermem.interfaces import client_calls
from usermem.model import WriteRequest


def _public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}


# -- the catalogue itself ---------------------------------------------------------------------------------

def test_every_public_member_of_memory_is_catalogued_once():
    ops, local = set(C.OPERATIONS), set(C.IN_PROCESS)
    assert not ops & local
    assert _public(Memory) == ops | local, "add the new Memory member to catalog.OPERATIONS (or IN_PROCESS)"
    assert all(op.area in C.AREAS for op in C.OPERATIONS.values())
    assert all(reason.strip() for reason in C.IN_PROCESS.values())


@pytest.mark.parametrize("name", sorted(C.OPERATIONS))
def test_http_binding_places_every_parameter_exactly_once(name):
    op = C.OPERATIONS[name]
    if op.http is None:
        assert op.no_http and op.no_http.strip()
        return
    h = op.http
    params = [p.name for p in op.parameters]
    slots = [set(h.path_params) - set(h.path_from), set(h.query), set(h.body), set(h.from_key), set(h.fixed)]
    placed = [p for slot in slots for p in slot]
    assert sorted(placed) == sorted(params), f"{name}: every parameter in exactly one of path/query/body/key/fixed"
    assert set(h.path_from) <= set(h.path_params)
    assert set(h.wire) <= set(params)
    assert op.errors and all(isinstance(e, str) for e in op.errors)


# -- HTTP -------------------------------------------------------------------------------------------------

def _api_routes(routes: list[Any]) -> list[APIRoute]:
    """The app's APIRoutes, included routers walked (the area routers carry full paths)."""
    out: list[APIRoute] = []
    for r in routes:
        if isinstance(r, APIRoute):
            out.append(r)
        elif hasattr(r, "original_router"):
            out.extend(_api_routes(r.original_router.routes))
    return out


@pytest.fixture(scope="module")
def app_routes() -> dict[str, APIRoute]:
    api = make_api()
    routes = {r.name: r for r in _api_routes(api.app.routes)}
    api.memory.close()
    return routes


def _wire_names(h: C.Http, params: tuple[str, ...]) -> set[str]:
    out: set[str] = set()
    for p in params:
        out.update(h.wire_name(p).split("|"))
    return out


@pytest.mark.parametrize("name", sorted(n for n, op in C.OPERATIONS.items() if op.http is not None))
def test_route_matches_the_catalogue(name, app_routes):
    op = C.OPERATIONS[name]
    h = op.http
    assert h is not None
    route = app_routes.get(name) or next(
        (r for r in app_routes.values() if r.path == h.path and h.method in r.methods), None)
    assert route is not None, f"no route for {name}"
    assert route.path == h.path and route.methods == {h.method}, name
    dep = route.dependant
    assert {p.name for p in dep.path_params} == set(h.path_params), name
    query = {p.alias for p in dep.query_params}
    assert query == _wire_names(h, h.query), f"{name}: route query {sorted(query)}"
    bodies = dep.body_params
    if not h.body:
        assert not bodies, name
    elif h.wire_name(h.body[0]) == "(the whole body)":
        assert len(bodies) == 1, name
    else:
        assert len(bodies) == 1, name
        fields = set(bodies[0].field_info.annotation.model_fields)  # type: ignore[union-attr]
        assert fields == _wire_names(h, h.body), f"{name}: body fields {sorted(fields)}"
    admin = any(d.call is not None and d.call.__name__ == "admin" for d in dep.dependencies)
    assert admin == h.admin, f"{name}: admin key required? route {admin}, catalogue {h.admin}"
    assert route.response_model is not None and inspect.isclass(route.response_model), name


def test_no_v1_route_without_an_operation(app_routes):
    catalogued = {(op.http.method, op.http.path) for op in C.OPERATIONS.values() if op.http is not None}
    extras = {(m, r.path) for r in app_routes.values() if r.path.startswith("/v1") for m in r.methods}
    documented_extras = {("GET", "/v1/whoami"),
                         ("POST", "/v1/redact"), ("GET", "/v1/users/{user_id}/grants")}
    assert extras - catalogued == documented_extras
    assert {v.split(" ", 1)[1] for v in C.CLIENT_EXTRAS.values()} <= {p for _, p in documented_extras}


def test_no_response_is_an_untyped_dict(app_routes):
    for route in app_routes.values():
        if route.path.startswith("/v1"):
            assert route.response_model is not None and issubclass(route.response_model, usermem_base()), route.path


def usermem_base() -> type:
    from pydantic import BaseModel

    return BaseModel


# -- Client and AsyncClient -------------------------------------------------------------------------------

REMOTE = sorted(n for n, op in C.OPERATIONS.items() if op.http is not None)


@pytest.mark.parametrize("name", REMOTE)
def test_clients_have_memorys_signature(name):
    theirs = inspect.signature(getattr(Memory, name))
    for cls in (usermem.Client, usermem.AsyncClient):
        ours = inspect.signature(getattr(cls, name))
        assert list(ours.parameters) == list(theirs.parameters), (cls.__name__, name)
        for p_name, p in theirs.parameters.items():
            q = ours.parameters[p_name]
            assert q.kind == p.kind, (cls.__name__, name, p_name)
            assert q.default == p.default, (cls.__name__, name, p_name)
    builder = inspect.signature(getattr(client_calls, name))
    assert list(builder.parameters) == [p for p in theirs.parameters if p != "self"], name
    assert inspect.iscoroutinefunction(getattr(usermem.AsyncClient, name)), name


def test_clients_offer_nothing_uncatalogued():
    plumbing = {"close", "tenant", "url", "retry"}
    for cls in (usermem.Client, usermem.AsyncClient):
        extra = _public(cls) - set(C.OPERATIONS) - set(C.CLIENT_EXTRAS) - plumbing
        assert extra == set(), (cls.__name__, extra)
        missing = set(REMOTE) - _public(cls)
        assert missing == set(), (cls.__name__, missing)


# -- no parameter is dropped: Client → HTTP → Memory ------------------------------------------------------

class Recording(Memory):
    """A real Memory that records the arguments of each catalogue operation it is called with."""

    calls: list[tuple[str, dict[str, Any]]]


def _recorder(name: str) -> Any:
    original = getattr(Memory, name)
    sig = inspect.signature(original)

    def method(self: Recording, *args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(self, *args, **kwargs)
        self.calls.append((name, {k: v for k, v in bound.arguments.items() if k != "self"}))
        return original(self, *args, **kwargs)

    return method


for _name in C.OPERATIONS:
    setattr(Recording, _name, _recorder(_name))

# A non-default value for every parameter name the operations use (op-specific ones below).
SAMPLES: dict[str, Any] = {
    "tenant": "acme", "user_id": "par-u", "kind": "preference", "key": "tone", "value": {"v": [1, "二"]},
    "source": "agent_confirmed", "importance": 0.25, "confidence": 0.75, "now": T0 + 7, "session_id": "par-s",
    "client_id": "par-c", "event_at": T0 - 3, "ttl_seconds": 123.0, "change_set_id": "par-cs", "actor": "bob",
    "canonical": {"c": ["short", "短"]},
    "writes": [{"kind": "fact", "key": "city", "value": "Oslo", "source": "system"}], "k": 7,
    "kinds": ["fact", "preference"], "query": "where", "keys": ["city", "tone"], "event_from": T0 - 100,
    "event_until": T0 + 100, "domain": "shop", "memory_id": "ab" * 16, "action": "write", "since": T0 - 50,
    "until": T0 + 50, "limit": 9, "after_seq": 3, "retention_days": 400.0, "fields_or_level": ["city", "tone"],
    "purpose": "support", "ttl": 99.0, "grantee": "key:abc", "tenant_or_grant_id": "acme", "grant_id": "cd" * 16,
    "include_expired": True, "contract": {"key": "tone", "kind": "preference", "description": "语气"},
    "policy": "reject", "fields": ["city"], "to_version": 1, "partial": True, "idle_seconds": 77.0,
    "transcript": [{"role": "user", "content": "hi"}], "status": "closed", "message": "hello 你好",
    "messages": [{"role": "user", "content": "I live in Oslo"}], "budget_tokens": 321, "language": "zh",
    "questions": [{"id": "q1", "key": "tone", "kind": "preference", "text": {"en": "Tone?", "zh": "语气?"}}],
    "answers": {"tone": "warm"}, "verification_id": "ef" * 16, "extract": True,
    "agree": False, "mode": "active", "threshold": 4, "suppress_days": 7.5,
    "rule": {"id": "par-r", "then_key": "expertise", "when": {"occupation": ["x"]}}, "text": "invoice first",
    "evidence": ["e1"], "proposed_by": "rules", "procedure_id": "ab" * 16, "decision": "edit",
    "evaluation": {"name": "e2e", "passed": True},
    "request_id": "ab" * 16, "prefix": "par-", "after": "par-a",
    "url": "http://127.0.0.1:9/par-hook", "events": ["write", "consent"], "secret": "par-secret-0123456789",
    "webhook_id": "wh_par",
    "notice_id": "cd" * 16,
}
SESSION_OPS = {"close_session", "touch_session", "get_session", "session_context", "add_messages"}


def _sample(op: C.Operation, param: C.Param) -> Any:
    if param.name == "mark_used":
        return not param.default
    return SAMPLES[param.name]


def _same(name: str, param: str, sent: Any, got: Any, key_id: str) -> bool:
    if param == "actor":
        return got == f"key:{key_id}:{sent}"
    if param == "writes":
        return [{k: asdict(w)[k] for k in s} for s, w in zip(sent, got, strict=True)] == sent and all(
            isinstance(w, WriteRequest) for w in got)
    if param in ("kinds", "keys", "fields", "fields_or_level", "messages", "transcript", "questions"):
        return [dict(x) if isinstance(x, dict) else x for x in got] == sent
    return bool(got == sent)


@pytest.fixture(scope="module")
def recorded():
    memory = Recording(settings=load_settings(env={}, embedder="none"))
    memory.calls = []
    api = make_api(memory)
    key_id = api.app.state.keys.verify(api.admin_a).id
    client = usermem.Client("http://testserver", api.admin_a, http=TestClient(api.app))
    yield memory, client, key_id
    client.close()
    memory.close()


@pytest.mark.parametrize("name", REMOTE)
def test_client_and_route_pass_every_parameter_on(name, recorded):
    memory, client, key_id = recorded
    op = C.OPERATIONS[name]
    h = op.http
    assert h is not None
    args: dict[str, Any] = {}
    for p in op.parameters:
        if p.name in h.fixed:
            continue
        args[p.name] = _sample(op, p)
    if name in SESSION_OPS:
        args["session_id"] = memory.open_session("acme", "par-u", now=T0)
    positional = [args.pop(p.name) for p in op.parameters if not p.keyword_only and p.name in args]
    memory.calls.clear()
    with contextlib.suppress(usermem.UsermemError):  # the engine may refuse the samples: what reached it counts
        getattr(client, name)(*positional, **args)
    target = name if name != "recall" else "recall_scored"  # recall is recall_scored's route
    calls = [kw for n, kw in memory.calls if n == target]
    assert calls, f"{name}: the route never called Memory.{target}"
    got = calls[0]
    sent = dict(zip([p.name for p in op.parameters if not p.keyword_only], positional, strict=False)) | args
    for param, value in sent.items():
        if param in h.from_key:
            assert got.get(param) == "acme", (name, param, got.get(param))  # the key's tenant
            continue
        assert param in got, f"{name}: {param} was not passed on to Memory"
        assert _same(name, param, value, got[param], key_id), (name, param, value, got[param])


# -- MCP --------------------------------------------------------------------------------------------------

def _tools() -> dict[str, Any]:
    from mcp import Client

    from usermem.interfaces.mcp import build_server

    m = Memory(settings=load_settings(env={}, embedder="none"))

    async def go() -> dict[str, Any]:
        async with Client(build_server(m, tenant="acme")) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    try:
        return anyio.run(go)
    finally:
        m.close()


def test_mcp_tools_are_the_catalogues():
    tools = _tools()
    declared = {op.mcp.tool: op for op in C.OPERATIONS.values() if op.mcp is not None}
    assert set(tools) == set(declared)
    for tool_name, op in declared.items():
        assert op.mcp is not None
        schema = tools[tool_name].input_schema
        props = schema["properties"]
        assert set(props) == set(op.mcp.args), (tool_name, sorted(props))
        params = {p.name for p in op.parameters}
        for arg, target in op.mcp.args.items():
            assert target in params or target.startswith("("), (tool_name, arg, target)
            assert props[arg].get("description"), (tool_name, arg)
        covered = {t for t in op.mcp.args.values() if t in params} | set(op.mcp.fixed)
        assert covered == params, (tool_name, params - covered)
        for enum_arg, enum in (("kind", C.KINDS), ("source", C.SOURCES)):
            if enum_arg in props:
                ref = props[enum_arg]["$ref"].rsplit("/", 1)[-1]
                assert tuple(schema["$defs"][ref]["enum"]) == enum
    assert all(op.no_mcp.strip() for op in C.OPERATIONS.values() if op.mcp is None)


# -- CLI (the CLI declares its mapping in usermem.interfaces.cli_catalog) ----------------------------------

def _cli_commands() -> dict[str, set[str]]:
    import typer.main

    from usermem.interfaces.cli import _register, app

    _register()
    out: dict[str, set[str]] = {}

    def walk(cmd: Any, prefix: str) -> None:
        if hasattr(cmd, "commands"):
            for n, sub in cmd.commands.items():
                walk(sub, f"{prefix} {n}".strip())
        else:
            out[prefix] = {p.name for p in cmd.params}

    walk(typer.main.get_command(app), "")
    return out


def test_cli_offers_each_operation_or_says_why_not():
    bindings = C.cli_bindings()
    assert set(bindings) == set(C.OPERATIONS), "declare each operation in cli_catalog.COMMANDS"
    commands = _cli_commands()
    for name, binding in bindings.items():
        if isinstance(binding, str):
            assert binding.strip(), name
            continue
        assert binding.command in commands, f"{name}: no CLI command {binding.command!r}"
        params = {p.name for p in C.OPERATIONS[name].parameters}
        assert set(binding.fixed) <= params and set(binding.params) <= params, name
        for p in params - set(binding.fixed):
            assert binding.cli_name(p) in commands[binding.command], \
                f"{name}: `usermem {binding.command}` lacks {p} (declare it fixed, with the reason)"


def test_wire_records_carry_every_field_of_the_model_record() -> None:
    """A response model that mirrors a model record (MemoryOut ↔ MemoryRecord, …) has exactly its fields, so
    no interface drops one (CandidateOut once lacked `canonical`: HTTP clients lost the normalised form)."""
    import dataclasses

    from pydantic import BaseModel

    import usermem.model as M
    from usermem.interfaces.api import schemas as S

    pairs = {"MemoryOut": M.MemoryRecord, "WriteResultOut": M.WriteResult, "AuditEventOut": M.AuditEvent,
             "CandidateOut": M.Candidate}
    for name, record in pairs.items():
        out = getattr(S, name)
        assert issubclass(out, BaseModel)
        assert set(out.model_fields) == {f.name for f in dataclasses.fields(record)}, name
