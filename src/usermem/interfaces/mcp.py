"""`usermem mcp`: the memory as MCP tools (remember, recall, assemble, forget, confirm, history).

Built on the official SDK (`mcp.server.mcpserver.MCPServer`). Who the tools act for:
- stdio / in-process: the tenant (and optionally the user) given by configuration (`--tenant`, `--user`);
- streamable HTTP: the connecting API key (`Authorization: Bearer umk_...`) decides the tenant, and a key
  bound to a user (`usermem keys create TENANT --user U`) also decides the user. Requests without a valid
  key are refused with 401 before they reach a tool.
A configured or key-bound user cannot be overridden by a tool argument.
Rate limiting: a tool call made with an API key takes a token from that key's bucket — the same
`RateLimiter` object the REST API uses when the tools are mounted on it (`create_app(mcp_path=...)`), so REST
requests and MCP tool calls share one per-key budget. A call over the limit is answered with an MCP tool
error `rate_limited: ...; retry after N s` (the session stays usable). Keyless stdio calls are not limited.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from pydantic import ValidationError as PydanticValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.api.middleware import RateLimiter
from usermem.interfaces.api.problems import STATUS_BY_ERROR, problem_response
from usermem.interfaces.catalog import OPERATIONS, PARAM_RULES, TIME_PARAMS, Operation, describe
from usermem.model import Kind, MemoryRecord, ScoredMemory, Source, WriteResult
from usermem.policy.validate import shown
from usermem.understand.service import MAX_BUDGET_TOKENS

INSTRUCTIONS = (
    "Long-term memory about the user. Call `recall` at the start of a task to get what is known; call "
    "`remember` when the user states a stable fact or preference (one key per attribute, e.g. key='city'); "
    "call `confirm` when the user confirms a remembered value and `forget` when they ask you to forget it. "
    "Never store secrets: card numbers, passwords and ID numbers are refused. A field listed in `withheld` "
    "exists but is not shown to you: do not assume it is unknown; ask its `question` (unless `declined`) and "
    "record the request with `request_consent`."
)


def _compact(r: MemoryRecord) -> dict[str, Any]:
    return {"key": r.key, "kind": r.kind.value, "value": r.value, "source": r.source.value,
            "created_at": r.created_at, "expires_at": r.expires_at, "id": r.id}


def _scored(s: ScoredMemory) -> dict[str, Any]:
    out = _compact(s.memory)
    out.update(weight=round(s.weight, 4), score=round(s.score, 4), needs_confirmation=s.needs_confirmation)
    if s.question:
        out["question"] = s.question
    return out


def render_block(items: list[ScoredMemory]) -> str:
    """A structured-fields prompt block from recalled memories (a plain alternative to `Memory.assemble`)."""
    facts = [s for s in items if s.memory.kind.value == "fact"]
    prefs = [s for s in items if s.memory.kind.value == "preference" and s.weight >= 0.5]
    other = [s for s in items if s.memory.kind.value not in ("fact", "preference")]
    lines: list[str] = []
    for tag, group in (("USER_FACTS", facts), ("USER_PREFERENCES", prefs), ("USER_CONTEXT", other)):
        if not group:
            continue
        lines.append(f"<{tag}>")
        lines.extend(f"- {s.memory.key}: {json.dumps(s.memory.value, ensure_ascii=False)}" for s in group)
        lines.append(f"</{tag}>")
    return "\n".join(lines)


class Binding:
    """Resolves (tenant, user_id) for one tool call from configuration or the connecting key."""

    def __init__(self, *, tenant: str | None, user_id: str | None, keys: KeyRing | None,
                 limiter: RateLimiter | None = None, on_limited: Callable[[], None] | None = None) -> None:
        self.tenant = tenant
        self.user_id = user_id
        self.keys = keys
        self.limiter = limiter
        self.on_limited = on_limited

    def _take(self, key_id: str) -> None:
        """One token from the key's bucket (shared with REST), or a `rate_limited` tool error."""
        if self.limiter is None:
            return
        wait = self.limiter.take(key_id)
        if wait is not None:
            if self.on_limited is not None:
                self.on_limited()
            raise tool_error("rate_limited", f"rate limit of {self.limiter.per_minute} requests/minute exceeded; "
                                             f"retry after {max(1, int(wait + 0.999))} s")

    def resolve(self, ctx: Context | None, user_id: str | None) -> tuple[str, str, str]:
        """(tenant, user_id, actor)."""
        headers = None
        if ctx is not None:
            try:
                headers = ctx.headers
            except ValueError:
                headers = None
        tenant, bound_user, actor = self.tenant, self.user_id, "mcp"
        presented = _presented_key(headers) if headers else None
        if presented is not None:
            key = self.keys.verify(presented) if self.keys is not None else None
            if key is None:
                raise tool_error("unauthorized", "invalid or revoked API key")
            self._take(key.id)
            tenant, actor = key.tenant, f"mcp:key:{key.id}"
            bound_user = key.user_id or (self.user_id if key.tenant == self.tenant else None)
        if tenant is None:
            raise tool_error("no_tenant", "no tenant: start `usermem mcp --tenant T` or connect with an API key")
        if bound_user is not None:
            if user_id not in (None, "", bound_user):
                raise tool_error("bound_user", f"this server is bound to one user; user_id {user_id!r} is not "
                                               "available", field="user_id")
            return tenant, bound_user, actor
        if not user_id:
            raise tool_error("validation_error", "user_id is required (or start the server with --user)",
                             field="user_id")
        return tenant, user_id, actor


def _presented_key(headers: Any) -> str | None:
    auth = headers.get("authorization") or headers.get("Authorization")
    if auth and auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    key = headers.get("x-api-key") or headers.get("X-API-Key")
    return str(key) if key else None


def tool_error(code: str, message: str, *, status: int | None = None, field: str | None = None) -> ToolError:
    """A tool error a model can act on: `<code> (<HTTP status>): <what was wrong> [field: f] — <what to do>`.

    The code and status are the REST API's (problem+json `code` and `status`), so an agent and an HTTP
    client read the same reason; the hint says whether retrying, fixing an argument or asking helps."""
    status = status if status is not None else _STATUS_BY_CODE.get(code, 500)
    text = f"{code} ({status}): {message}"
    if field:
        text += f" [field: {field}]"
    hint = _HINTS.get(code) or _HINTS_BY_STATUS.get(status)
    return ToolError(f"{text} — {hint}" if hint else text)


_STATUS_BY_CODE = {"unauthorized": 401, "permission_denied": 403, "validation_error": 422,
                   "invalid_argument": 422, "not_found": 404, "conflict": 409, "rate_limited": 429,
                   "provider_error": 502, "store_error": 503, "tier_unavailable": 503, "no_tenant": 401,
                   "bound_user": 403}
_HINTS = {
    "unauthorized": "the API key is missing, invalid or revoked; retrying will not help, a valid key is needed",
    "permission_denied": "the caller lacks the grant this needs (L2/L3 fields need an operator's `usermem grant`); "
                         "do not retry, tell the user it is not available",
    "bound_user": "this connection acts for one user only; omit user_id",
    "not_found": "nothing by that name; call `recall` to see what is remembered",
    "conflict": "the current state does not allow it; read it again (`history`) before retrying",
    "rate_limited": "too many calls; wait as told and retry",
    "no_tenant": "the server has no tenant for this call; the operator must start it with --tenant or a key",
}
_HINTS_BY_STATUS = {422: "correct the argument(s) and call again",
                    502: "a provider failed; retrying later may help", 503: "temporarily unavailable; retry later"}


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UsermemError as exc:
        status = next(s for cls, s in STATUS_BY_ERROR if isinstance(exc, cls))
        raise tool_error(exc.code, str(exc), status=status, field=getattr(exc, "field", None)) from exc


class _Server(MCPServer):
    """MCPServer whose argument-validation failures read as `validation_error (422)` with each field's rule,
    and whose unexpected failures say so without leaking internals (never a protocol-level -32603)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            # An argument the tool does not take is refused, as the REST API refuses an unknown body field
            # (a misspelt `ttl` must not be silently dropped); a name is quoted only when it is a plain token.
            unknown = [a for a in arguments if a not in tool.parameters.get("properties", {})]
            if unknown:
                allowed = ", ".join(sorted(tool.parameters.get("properties", {})))
                raise tool_error("validation_error", f"invalid arguments for {name}: "
                                                     f"{', '.join(shown(a) for a in unknown)}: not an argument of "
                                                     f"this tool (it takes: {allowed})")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            raise tool_error("internal_error", f"the {name} tool failed unexpectedly (a server fault, not your "
                                               "input); retrying may not help") from exc
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, PydanticValidationError):
                problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in cause.errors())
                raise tool_error("validation_error", f"invalid arguments for {name}: {problems}") from exc
            if isinstance(cause, ToolError):  # raised by the tool itself: its own message, without the prefix
                raise ToolError(str(cause)) from cause
            raise


def _op(tool: str) -> Operation:
    for op in OPERATIONS.values():
        if op.mcp is not None and op.mcp.tool == tool:
            return op
    raise KeyError(tool)


def _register(server: MCPServer, fn: Callable[..., Any]) -> None:
    """Register `fn` as the tool of the catalogue operation that names it: description, read-only and
    destructive hints come from the catalogue (`Operation.mcp`), never from here."""
    op = _op(fn.__name__)
    assert op.mcp is not None
    mcp = op.mcp
    server.add_tool(fn, name=mcp.tool, description=f"{mcp.guide} (usermem operation `{op.name}`.)",
                    annotations=ToolAnnotations(read_only_hint=mcp.read_only,
                                                destructive_hint=None if mcp.read_only else mcp.destructive,
                                                open_world_hint=False))


def arg(param: str, extra: str = "") -> Any:
    """A tool argument's `Field`: the catalogue's description and rules (`PARAM_DOCS`, `PARAM_RULES`), plus
    the ISO-8601 note for times (`TIME_PARAMS`)."""
    text = describe(param)
    if param in TIME_PARAMS:
        text = text.replace(" (Unix seconds)", "").replace("(Unix seconds, inclusive)", "(inclusive)").replace(
            "(Unix seconds, exclusive)", "(exclusive)") + " " + TIME_NOTE
    return Field(description=(text + (" " + extra if extra else "")).strip(), **PARAM_RULES.get(param, {}))


TIME_NOTE = ("Unix seconds or ISO-8601 (e.g. '2026-03-01T09:30:00Z' or '2026-03-01'); without an offset the "
             "time is UTC.")
Time = float | datetime | date


def seconds(value: Time | None) -> float | None:
    """A tool's time argument as Unix seconds (ISO-8601 strings arrive parsed by pydantic)."""
    if value is None or isinstance(value, float | int):
        return value
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


UserArg = Annotated[str | None, arg("user_id", "Omit when the server or key is bound to one user.")]


def build_server(memory: Memory, *, tenant: str | None = None, user_id: str | None = None,
                 keys: KeyRing | None = None, name: str = "usermem", limiter: RateLimiter | None = None,
                 on_limited: Callable[[], None] | None = None) -> MCPServer:
    """An MCPServer exposing `memory` as tools. See the module docstring for how calls are bound.

    The tools are the catalogue operations that declare an MCP tool (`usermem.interfaces.catalog`,
    `Operation.mcp`): their descriptions and read-only/destructive hints come from there, and their
    arguments carry the catalogue's descriptions and rules (`kind` / `source` as enums, the key pattern,
    ISO-8601 times). `limiter` (optional) is the per-key rate limiter tool calls made with an API key draw
    from; `on_limited` is called for each refused call (the REST app counts them in its metrics).
    """
    bind = Binding(tenant=tenant, user_id=user_id, keys=keys or KeyRing(memory.store), limiter=limiter,
                   on_limited=on_limited)
    server: MCPServer = _Server(name, instructions=INSTRUCTIONS, version=_version())

    def remember(key: Annotated[str, arg("key")], value: Annotated[Any, arg("value")],
                 kind: Annotated[Kind, arg("kind")] = Kind.FACT,
                 source: Annotated[Source, arg("source")] = Source.EXTRACTED,
                 user_id: UserArg = None,
                 ttl_seconds: Annotated[float | None, arg("ttl_seconds")] = None,
                 event_at: Annotated[Time | None, arg("event_at")] = None,
                 ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        r = _call(lambda: memory.write(t, u, Kind(kind).value, key, value, source=Source(source).value,
                                       ttl_seconds=ttl_seconds, event_at=seconds(event_at), actor=actor))
        return _decision(r)

    def recall(query: Annotated[str | None, arg("query")] = None,
               k: Annotated[int, arg("k")] = 10,
               kinds: Annotated[list[Kind] | None, arg("kinds")] = None,
               event_from: Annotated[Time | None, arg("event_from")] = None,
               event_until: Annotated[Time | None, arg("event_until")] = None,
               user_id: UserArg = None,
               purpose: Annotated[str | None, Field(None, max_length=500, description=describe("purpose"))] = None,
               ctx: Context | None = None) -> dict[str, Any]:
        t, u, _ = bind.resolve(ctx, user_id)
        wanted = [Kind(x).value for x in kinds] if kinds is not None else None
        items = _call(lambda: memory.recall_scored(t, u, k, kinds=wanted, query=query, mark_used=True,
                                                   event_from=seconds(event_from),
                                                   event_until=seconds(event_until), purpose=purpose))
        return {"user_id": u, "memories": [_scored(s) for s in items],
                "withheld": [w.to_dict() for w in items.withheld]}

    def assemble(message: Annotated[str, arg("message")] = "",
                 budget_tokens: Annotated[int, Field(ge=1, le=MAX_BUDGET_TOKENS, description=describe("budget_tokens"))]
                 = 800,
                 user_id: UserArg = None,
                 purpose: Annotated[str | None, Field(None, max_length=500, description=describe("purpose"))] = None,
                 ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        out = _call(lambda: memory.assemble(t, u, message, budget_tokens, actor=actor, purpose=purpose))
        return {"user_id": u, "text": out.prompt, "tokens": out.tokens, "dropped": list(out.dropped),
                "withheld": [w.to_dict() for w in out.withheld]}

    def forget(key: Annotated[str, arg("key")], user_id: UserArg = None,
               ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        return {"deleted": _call(lambda: memory.forget(t, u, key, actor=actor))}

    def forget_user(confirm: Annotated[bool, arg("confirm")], user_id: UserArg = None,
                    ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        if confirm is not True:
            raise tool_error("validation_error", "forget_user erases everything about the user; pass "
                                                 "confirm=true only when the user asked for that", field="confirm")
        return {"user_id": u, "deleted": _call(lambda: memory.forget_user(t, u, actor=actor))}

    def confirm(key: Annotated[str, arg("key", "Its current version is confirmed.")], user_id: UserArg = None,
                ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        current = [r for r in _call(lambda: memory.history(t, u, key)) if r.is_current and not r.retracted]
        if not current:
            raise tool_error("not_found", f"nothing is remembered under {key!r}", field="key")
        rec = _call(lambda: memory.confirm(t, u, current[-1].id, actor=actor))
        return {"confirmed": key, "memory": _compact(rec)}

    def history(key: Annotated[str, arg("key")], user_id: UserArg = None,
                ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        versions = _call(lambda: memory.history(t, u, key, actor=actor))
        return {"key": key, "versions": [dict(_compact(r), current=r.is_current, retracted=r.retracted)
                                         for r in versions]}

    def ingest(text: Annotated[str, arg("text")], user_id: UserArg = None,
               ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        results = _call(lambda: memory.ingest(t, u, [{"role": "user", "content": text}], actor=actor))
        return {"user_id": u, "results": [_decision(r) for r in results]}

    def episodes(since: Annotated[Time | None, arg("since")] = None,
                 until: Annotated[Time | None, arg("until")] = None,
                 limit: Annotated[int, arg("limit")] = 10,
                 user_id: UserArg = None, ctx: Context | None = None) -> dict[str, Any]:
        t, u, _ = bind.resolve(ctx, user_id)
        items = _call(lambda: memory.episodes(t, u, since=seconds(since), until=seconds(until), limit=limit))
        return {"user_id": u, "episodes": [dict(_compact(r), event_at=r.event_at) for r in items]}

    def withdraw_consent(fields: Annotated[list[Annotated[str, arg("key")]], arg("fields")],
                         domain: Annotated[str, arg("domain")], user_id: UserArg = None,
                         ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        return {"user_id": u, "domain": domain,
                "removed": _call(lambda: memory.opt_out(t, u, fields, domain, actor=actor))}

    def request_consent(fields: Annotated[list[str], Field(min_length=1, max_length=20,
                                                           description=describe("fields"))],
                        purpose: Annotated[str, Field(min_length=1, max_length=500, description=describe("purpose"))],
                        user_id: UserArg = None,
                        ttl: Annotated[float, Field(gt=0, le=7 * 86400, description=describe("ttl"))] = 1800.0,
                        ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        req = _call(lambda: memory.request_consent(t, u, fields, purpose, ttl, actor=actor))
        return req.to_dict()  # type: ignore[no-any-return]

    for fn in (remember, recall, assemble, forget, forget_user, confirm, history, ingest, episodes,
               withdraw_consent, request_consent):
        _register(server, fn)
    return server


def _decision(r: WriteResult) -> dict[str, Any]:
    return {"op": r.op.value, "reason": r.reason.value if r.reason else None, "detail": r.detail,
            "memory": _compact(r.memory) if r.memory else None}


def _version() -> str:
    from usermem import __version__

    return __version__


class RequireKey:
    """ASGI guard for the streamable HTTP transport: no valid API key, no MCP session (401 problem+json)."""

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
            if self.keys.verify(_presented_key(headers)) is None:
                await problem_response(401, "unauthorized", "missing, invalid or revoked API key",
                                       headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(memory: Memory, *, keys: KeyRing | None = None, tenant: str | None = None,
             user_id: str | None = None, path: str = "/mcp", limiter: RateLimiter | None = None) -> Any:
    """The streamable-HTTP ASGI app, guarded by API keys; tool calls are rate-limited per key (`limiter`, by
    default one of `settings.rate_limit_per_minute`)."""
    keys = keys or KeyRing(memory.store)
    limiter = limiter or RateLimiter(memory.settings.rate_limit_per_minute)
    server = build_server(memory, tenant=tenant, user_id=user_id, keys=keys, limiter=limiter)
    inner = server.streamable_http_app(streamable_http_path=path)
    return RequireKey(inner, keys)


def mount_on(app: Any, memory: Memory, keys: KeyRing, *, path: str = "/mcp", host: str = "127.0.0.1",
             limiter: RateLimiter | None = None, on_limited: Callable[[], None] | None = None,
             stateless: bool = False) -> MCPServer:
    """Serve the MCP tools on an existing Starlette/FastAPI app at `path` (streamable HTTP, API key required).
    The caller must run `server.session_manager.run()` for the app's lifetime (create_app's lifespan does).
    Pass the app's own `limiter` so tool calls and REST requests share each key's bucket. `stateless`: no
    MCP session is kept between requests (several worker processes behind one port)."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from starlette.routing import Route

    server = build_server(memory, keys=keys, limiter=limiter, on_limited=on_limited)
    server.streamable_http_app(streamable_http_path=path, host=host,  # creates the session manager
                               stateless_http=stateless)
    endpoint = RequireKey(StreamableHTTPASGIApp(server.session_manager), keys)
    app.router.routes.append(Route(path, endpoint=endpoint, methods=["GET", "POST", "DELETE"],
                                   include_in_schema=False))
    return server
