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
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from starlette.types import ASGIApp, Receive, Scope, Send

from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.api.middleware import RateLimiter
from usermem.interfaces.api.problems import problem_response
from usermem.interfaces.catalog import OPERATIONS, describe
from usermem.model import Kind, MemoryRecord, ScoredMemory, Source
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
            raise ToolError(f"rate_limited: rate limit of {self.limiter.per_minute} requests/minute exceeded; "
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
                raise ToolError("unauthorized: invalid or revoked API key")
            self._take(key.id)
            tenant, actor = key.tenant, f"mcp:key:{key.id}"
            bound_user = key.user_id or (self.user_id if key.tenant == self.tenant else None)
        if tenant is None:
            raise ToolError("no tenant: start `usermem mcp --tenant T` or connect with an API key")
        if bound_user is not None:
            if user_id not in (None, "", bound_user):
                raise ToolError(f"this server is bound to one user; user_id {user_id!r} is not available")
            return tenant, bound_user, actor
        if not user_id:
            raise ToolError("user_id is required (or start the server with --user)")
        return tenant, user_id, actor


def _presented_key(headers: Any) -> str | None:
    auth = headers.get("authorization") or headers.get("Authorization")
    if auth and auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    key = headers.get("x-api-key") or headers.get("X-API-Key")
    return str(key) if key else None


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UsermemError as exc:
        raise ToolError(f"{exc.code}: {exc}") from exc


def _tool_doc(op_name: str, text: str) -> str:
    """A tool's description: its own guidance for agents, then the catalogue operation it runs."""
    op = OPERATIONS[op_name]
    return f"{text} (usermem operation `{op.name}`.)"


def _arg(param: str, extra: str = "") -> Any:
    return Field(description=(describe(param) + (" " + extra if extra else "")).strip())


UserArg = Annotated[str | None, _arg("user_id", "Omit when the server or key is bound to one user.")]


def build_server(memory: Memory, *, tenant: str | None = None, user_id: str | None = None,
                 keys: KeyRing | None = None, name: str = "usermem", limiter: RateLimiter | None = None,
                 on_limited: Callable[[], None] | None = None) -> MCPServer:
    """An MCPServer exposing `memory` as tools. See the module docstring for how calls are bound.

    The tools are the catalogue operations that declare an MCP tool (`usermem.interfaces.catalog`,
    `Operation.mcp`); their arguments carry the catalogue's descriptions, and `kind` / `source` are enums.
    `limiter` (optional) is the per-key rate limiter tool calls made with an API key draw from;
    `on_limited` is called for each refused call (the REST app counts them in its metrics).
    """
    bind = Binding(tenant=tenant, user_id=user_id, keys=keys or KeyRing(memory.store), limiter=limiter,
                   on_limited=on_limited)
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=_version())

    @server.tool(description=_tool_doc("write", "Remember one attribute of the user (key like 'city' or "
                                                "'reply_length'). Returns the decision: ADD, UPDATE, NOOP or "
                                                "REJECT with a reason."))
    def remember(key: Annotated[str, _arg("key")], value: Annotated[Any, _arg("value")],
                 kind: Annotated[Kind, _arg("kind")] = Kind.FACT,
                 source: Annotated[Source, _arg("source")] = Source.EXTRACTED,
                 user_id: UserArg = None,
                 ttl_seconds: Annotated[float | None, _arg("ttl_seconds")] = None,
                 ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        r = _call(lambda: memory.write(t, u, Kind(kind).value, key, value, source=Source(source).value,
                                       ttl_seconds=ttl_seconds, actor=actor))
        return {"op": r.op.value, "reason": r.reason.value if r.reason else None, "detail": r.detail,
                "memory": _compact(r.memory) if r.memory else None}

    @server.tool(description=_tool_doc("recall_scored", "Recall what is known about the user, best first, with "
                                                        "weights; entries with needs_confirmation should be "
                                                        "confirmed with the user before relying on them. "
                                                        "`withheld` lists fields that exist but were not shown "
                                                        "(never their values): ask the `question` of a "
                                                        "needs_grant entry (unless `declined`), then call "
                                                        "request_consent; never treat a withheld field as "
                                                        "unknown."))
    def recall(query: Annotated[str | None, _arg("query")] = None,
               k: Annotated[int, Field(ge=1, le=1000, description=describe("k"))] = 10,
               kinds: Annotated[list[Kind] | None, _arg("kinds")] = None,
               user_id: UserArg = None,
               purpose: Annotated[str | None, Field(None, max_length=500, description=describe("purpose"))] = None,
               ctx: Context | None = None) -> dict[str, Any]:
        t, u, _ = bind.resolve(ctx, user_id)
        wanted = [Kind(x).value for x in kinds] if kinds is not None else None
        items = _call(lambda: memory.recall_scored(t, u, k, kinds=wanted, query=query, mark_used=True,
                                                   purpose=purpose))
        return {"user_id": u, "memories": [_scored(s) for s in items],
                "withheld": [w.to_dict() for w in items.withheld]}

    @server.tool(description=_tool_doc("assemble", "A ready-to-insert prompt block (<USER_FACTS>, "
                                                   "<USER_PREFERENCES>) with what the current message needs, "
                                                   "within a token budget; `withheld` as in recall."))
    def assemble(message: Annotated[str, _arg("message")] = "",
                 budget_tokens: Annotated[int, Field(ge=1, le=MAX_BUDGET_TOKENS, description=describe("budget_tokens"))]
                 = 800,
                 user_id: UserArg = None,
                 purpose: Annotated[str | None, Field(None, max_length=500, description=describe("purpose"))] = None,
                 ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        out = _call(lambda: memory.assemble(t, u, message, budget_tokens, actor=actor, purpose=purpose))
        return {"user_id": u, "text": out.prompt, "tokens": out.tokens, "dropped": list(out.dropped),
                "withheld": [w.to_dict() for w in out.withheld]}

    @server.tool(description=_tool_doc("request_consent", "Ask the user to let withheld fields (recall's "
                                                          "`withheld`, reason needs_grant) be used for a purpose. "
                                                          "Returns the request with its question; the user "
                                                          "approves or declines it themself (their /me page or "
                                                          "their token), never the agent. A declined field is "
                                                          "returned declined: do not ask again this session."))
    def request_consent(fields: Annotated[list[str], Field(min_length=1, max_length=20,
                                                           description=describe("fields"))],
                        purpose: Annotated[str, Field(min_length=1, max_length=500, description=describe("purpose"))],
                        user_id: UserArg = None,
                        ttl_seconds: Annotated[float, Field(gt=0, le=7 * 86400,
                                                            description=describe("ttl"))] = 1800.0,
                        ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        req = _call(lambda: memory.request_consent(t, u, fields, purpose, ttl_seconds, actor=actor))
        return req.to_dict()  # type: ignore[no-any-return]

    @server.tool(description=_tool_doc("forget", "Forget one key about the user (every version). Returns how "
                                                 "many rows were deleted."))
    def forget(key: Annotated[str, _arg("key")], user_id: UserArg = None,
               ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        return {"deleted": _call(lambda: memory.forget(t, u, key, actor=actor))}

    @server.tool(description=_tool_doc("confirm", "Record that the user confirmed the current value of a key "
                                                  "(resets its decay)."))
    def confirm(key: Annotated[str, _arg("key", "Its current version is confirmed.")], user_id: UserArg = None,
                ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        current = [r for r in _call(lambda: memory.history(t, u, key)) if r.is_current and not r.retracted]
        if not current:
            raise ToolError(f"not_found: nothing is remembered under {key!r}")
        rec = _call(lambda: memory.confirm(t, u, current[-1].id, actor=actor))
        return {"confirmed": key, "memory": _compact(rec)}

    @server.tool(description=_tool_doc("history", "Every version of a key, oldest first: how a value changed "
                                                  "and who said so."))
    def history(key: Annotated[str, _arg("key")], user_id: UserArg = None,
                ctx: Context | None = None) -> dict[str, Any]:
        t, u, actor = bind.resolve(ctx, user_id)
        versions = _call(lambda: memory.history(t, u, key, actor=actor))
        return {"key": key, "versions": [dict(_compact(r), current=r.is_current, retracted=r.retracted)
                                         for r in versions]}

    return server


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
             limiter: RateLimiter | None = None, on_limited: Callable[[], None] | None = None) -> MCPServer:
    """Serve the MCP tools on an existing Starlette/FastAPI app at `path` (streamable HTTP, API key required).
    The caller must run `server.session_manager.run()` for the app's lifetime (create_app's lifespan does).
    Pass the app's own `limiter` so tool calls and REST requests share each key's bucket."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from starlette.routing import Route

    server = build_server(memory, keys=keys, limiter=limiter, on_limited=on_limited)
    server.streamable_http_app(streamable_http_path=path, host=host)  # creates the session manager
    endpoint = RequireKey(StreamableHTTPASGIApp(server.session_manager), keys)
    app.router.routes.append(Route(path, endpoint=endpoint, methods=["GET", "POST", "DELETE"],
                                   include_in_schema=False))
    return server
