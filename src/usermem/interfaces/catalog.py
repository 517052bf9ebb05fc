"""The operation catalogue: every public operation of `Memory`, defined once.

For each operation (keyed by the `Memory` method name) it says which area it belongs to, what it takes
(derived from `Memory`'s own signature, so it cannot drift), what it returns, which errors it raises, and
how every interface offers it:

- **HTTP**: method, path, and where each parameter travels (path / query / body), which ones the server
  fills itself (the tenant comes from the API key) and how the wire names differ (`ttl` → `ttl_seconds`);
- **MCP**: the tool name and how its arguments map to the operation's parameters (or why there is none);
- **CLI**: declared by the CLI itself in `usermem.interfaces.cli_catalog` (the CLI owns its command names);
- **Client**: notes on how `Client` / `AsyncClient` differ (e.g. a 404 mapped back to "empty").

`tests/test_parity.py` checks `Memory`, `Client`, `AsyncClient`, the HTTP routes, the MCP tools and the CLI
against this table: an operation without a counterpart, or a parameter that an interface accepts and does
not pass on, fails it. The HTTP routers (`usermem.interfaces.api.routes_*`) read their paths from here.

Members of `Memory` that are not operations (properties, in-process hooks and callables) are listed in
`IN_PROCESS` with the reason; every public member of `Memory` is in exactly one of the two tables.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from usermem.model import Kind, Source
from usermem.policy.validate import ID_PATTERN, KEY_PATTERN, MAX_TTL_SECONDS

Area = Literal["memories", "lifecycle", "sessions", "privacy", "contracts", "conversation", "usermodel", "admin",
               "webhooks"]
AREAS: tuple[Area, ...] = ("memories", "lifecycle", "sessions", "privacy", "contracts", "conversation", "usermodel",
                           "admin", "webhooks")
HttpMethod = Literal["GET", "POST", "PUT", "DELETE"]

KINDS: tuple[str, ...] = tuple(k.value for k in Kind)
SOURCES: tuple[str, ...] = tuple(s.value for s in Source)

# One description per parameter name, used by the HTTP schema, the MCP tool schemas and the docs.
PARAM_DOCS: Mapping[str, str] = {
    "tenant": "The tenant. Over HTTP/MCP it is the API key's tenant, never read from the request.",
    "user_id": "The user the memory is about (your own id for them; 1-128 printable characters).",
    "kind": "What the memory is: " + " | ".join(KINDS) + " (profile = fact).",
    "key": "The attribute, one per memory line: [a-z0-9_.-]{1,64}, e.g. 'city', 'reply_length'.",
    "value": "Any JSON value.",
    "source": "Who asserted it, highest authority first: " + " | ".join(SOURCES) + ".",
    "importance": "0..1; defaults to the field contract's or the kind's importance.",
    "confidence": "0..1; defaults by source.",
    "now": "Judge at this time (Unix seconds) instead of the server clock: imports, replays, tests.",
    "session_id": "The session this belongs to (context memories live until it closes).",
    "client_id": "The client or device that produced it.",
    "event_at": "When it happened in the world (Unix seconds); recall can filter on it.",
    "canonical": "Optional normalised form kept beside the value (the user's words), never instead of it.",
    "ttl_seconds": "Expire after this many seconds.",
    "change_set_id": "Group writes so they can be reverted together (default: a new id).",
    "actor": "Who acts, recorded in the audit log (over HTTP after the calling key: key:<id>:<actor>).",
    "writes": "The writes, each {kind, key, value, source?, importance?, ...}.",
    "k": "How many memories at most.",
    "kinds": "Only these kinds (" + " | ".join(KINDS) + ").",
    "query": "Rank by meaning and words for this text (hybrid relevance).",
    "keys": "Only these keys.",
    "mark_used": "Count this read as a use of the returned memories (slows their decay).",
    "event_from": "Only memories whose event time (else write time) is at or after this (Unix seconds).",
    "event_until": "Only memories whose event time (else write time) is before this (Unix seconds).",
    "domain": "The reader's domain (e.g. 'logistics'): fields of other domains follow their sharing rules.",
    "memory_id": "A memory version id.",
    "action": "Only audit entries with this action (write, forget, read, grant, ...).",
    "since": "From this time (Unix seconds, inclusive).",
    "until": "Until this time (Unix seconds, exclusive).",
    "limit": "How many entries at most.",
    "after_seq": "Only audit entries after this sequence number (paging).",
    "retention_days": "Keep soft-deleted and expired rows this many days (default: the server's setting).",
    "fields_or_level": "'L2' or 'L3' (every field up to that sensitivity), a field key, or several keys.",
    "purpose": "Why access is needed (audited; in recall/assemble it shapes the consent question of withheld "
               "fields, e.g. '推荐午餐' / 'recommend lunch').",
    "ttl": "How long the grant lasts, in seconds.",
    "grantee": "Only this reader may use the grant (an API key id: key:<id>).",
    "tenant_or_grant_id": "The tenant (then grant_id follows) or the grant id alone.",
    "grant_id": "The grant id.",
    "include_expired": "Also list expired grants not yet revoked.",
    "contract": "A field contract: {key, kind, sensitivity, enabled, sharing, ...}.",
    "policy": "Keys without a contract: accept (as L1 with the kind's defaults) or reject.",
    "fields": "Field keys.",
    "to_version": "A version id, or a 1-based position in history (default: the previous value).",
    "partial": "Revert what can be reverted and report conflicts, instead of all or nothing.",
    "client_id_session": "The client or device opening the session.",
    "idle_seconds": "Close the session after this much inactivity (default: the server's setting).",
    "session_id_path": "The session id.",
    "transcript": "The conversation ({role, content} messages, or text) to archive as the episode.",
    "status": "Sessions: open or closed. Consent requests: pending (default), approved, declined or all.",
    "message": "The user's current message.",
    "messages": "OpenAI-style {role, content} messages (or plain strings as user turns).",
    "budget_tokens": "Token budget of the prompt block.",
    "language": "zh or en (default: the tenant's setting).",
    "questions": "The onboarding questions: {id, field, kind, question: {zh, en}, ...}.",
    "answers": "{question id or field key: answer}.",
    "verification_id": "A pending verification id.",
    "rule_id": "The derivation rule's id (the same as the body's `id`).",
    "agree": "True: the signal points to this value; false: it speaks against it.",
    "mode": "confirm: an inference waits for the user's yes | active: used at once at low weight.",
    "threshold": "Agreeing signals (net of contradicting ones, each worth two) before an inference is proposed.",
    "suppress_days": "After the user rejects an inference, do not propose it again for this many days.",
    "rule": "A derivation rule: {id, when: {field: [values]}, then_key, then: {zh, en}, status}.",
    "text": "Free text. ingest: what the user said, in their own words (zh or en); the facts and preferences in "
            "it are extracted and remembered (source extracted). A procedure: how the agent should act.",
    "evidence": "Why it is proposed: short texts (message excerpts, session ids), at most 10.",
    "proposed_by": "Who proposes it: rules, llm, an operator's name.",
    "procedure_id": "A procedure id.",
    "decision": "approve | edit | reject.",
    "evaluation": "The recorded evaluation an approval needs: {name: test set, passed: true, result}.",
    "confirm": "Must be true: erasing everything held about the user is deliberate and cannot be undone by a tool.",
    "request_id": "A consent request id (from request_consent, consent_requests or a withheld entry).",
    "prefix": "Only user ids starting with this text.",
    "after": "Only user ids after this one (paging: the previous page's next_after).",
    "url": "The receiver: an http(s) URL (at most 2048 characters) that accepts signed JSON POSTs.",
    "events": "Event types to send: write | revert | forget | consent (default: all four).",
    "secret": "The HMAC-SHA256 signing secret, 16-256 printable characters (default: a random one). Returned "
              "once, at creation; never listed or logged.",
    "webhook_id": "A webhook subscription id (wh_...).",
    "notice_id": "A federation notice id (from federation_notices).",
}

# Constraints per parameter name, stated once (the engine's own rules: policy/validate.py), as pydantic
# `Field` keyword arguments; the MCP tool schemas carry them so a model sees the rule before it calls.
PARAM_RULES: Mapping[str, Mapping[str, Any]] = {
    "key": {"pattern": KEY_PATTERN.pattern, "max_length": 64},
    "user_id": {"pattern": ID_PATTERN.pattern, "max_length": 128},
    "domain": {"pattern": KEY_PATTERN.pattern, "max_length": 64},
    "k": {"ge": 1, "le": 1000},
    "limit": {"ge": 1, "le": 1000},
    "ttl_seconds": {"gt": 0, "le": MAX_TTL_SECONDS, "allow_inf_nan": False},
    "text": {"min_length": 1, "max_length": 20_000},
    "url": {"max_length": 2048},
    "secret": {"min_length": 16, "max_length": 256},
}

# Parameters that are points in time. Over MCP they accept Unix seconds or an ISO-8601 date-time
# ("2026-03-01T09:30:00Z"; a date alone is midnight UTC; no offset means UTC).
TIME_PARAMS: frozenset[str] = frozenset({"now", "event_at", "event_from", "event_until", "since", "until"})


@dataclass(frozen=True)
class Param:
    """One parameter of an operation, as `Memory` declares it."""

    name: str
    annotation: str
    required: bool
    default: Any
    keyword_only: bool


@dataclass(frozen=True)
class Http:
    """How an operation is offered over HTTP (`usermem serve`).

    Every parameter of the operation is in exactly one of `path`, `query`, `body`, `from_key`, `fixed`.
    `wire` renames a parameter on the wire (Memory name → JSON/query name).
    """

    method: HttpMethod
    path: str
    query: tuple[str, ...] = ()
    body: tuple[str, ...] = ()
    from_key: tuple[str, ...] = ("tenant",)
    fixed: Mapping[str, str] = field(default_factory=dict)  # parameter → why it is not on the wire
    wire: Mapping[str, str] = field(default_factory=dict)
    path_from: Mapping[str, str] = field(default_factory=dict)  # path parameter that is not an operation
    # parameter → where its value comes from (e.g. set_contract's {key} is the contract's key)
    admin: bool = False
    user_bound_ok: bool = True  # a key bound to one user may call it (for its own user)

    @property
    def path_params(self) -> tuple[str, ...]:
        import re

        return tuple(re.findall(r"{(\w+)}", self.path))

    def wire_name(self, param: str) -> str:
        return self.wire.get(param, param)


@dataclass(frozen=True)
class Mcp:
    """An MCP tool offering the operation. `args` maps tool argument → operation parameter; parameters the
    server fills (tenant, user binding, actor) or fixes are in `fixed` with the reason."""

    tool: str
    args: Mapping[str, str]
    fixed: Mapping[str, str] = field(default_factory=dict)
    guide: str = ""  # the tool's description for a model: when to call it and what it returns
    read_only: bool = False  # MCP readOnlyHint: the tool changes nothing
    destructive: bool = False  # MCP destructiveHint: the tool may delete or overwrite what was remembered


@dataclass(frozen=True)
class Operation:
    name: str
    area: Area
    result: str  # the result type as Memory declares it (Client and AsyncClient return the same)
    errors: tuple[str, ...]  # usermem.errors codes the operation may raise (besides store_error)
    http: Http | None
    mcp: Mcp | None = None
    no_http: str | None = None  # why there is no HTTP route (then no Client method either)
    no_mcp: str = "not offered to agents as a tool (an application or operator action)"
    client: str = ""  # how Client/AsyncClient differ, if at all
    summary: str = ""

    @property
    def parameters(self) -> tuple[Param, ...]:
        return memory_params(self.name)

    def param(self, name: str) -> Param:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    @property
    def doc(self) -> str:
        return self.summary or _memory_doc(self.name)


@cache
def memory_params(name: str) -> tuple[Param, ...]:
    from usermem.engine.memory import Memory

    sig = inspect.signature(getattr(Memory, name))
    out: list[Param] = []
    for p in list(sig.parameters.values())[1:]:
        required = p.default is inspect.Parameter.empty
        out.append(Param(p.name, str(p.annotation), required, None if required else p.default,
                         p.kind is inspect.Parameter.KEYWORD_ONLY))
    return tuple(out)


@cache
def memory_result(name: str) -> str:
    from usermem.engine.memory import Memory

    return str(inspect.signature(getattr(Memory, name)).return_annotation)


def _memory_doc(name: str) -> str:
    from usermem.engine.memory import Memory

    doc = inspect.getdoc(getattr(Memory, name)) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


# -- the table ----------------------------------------------------------------------------------------

V = "validation_error"
IA = "invalid_argument"
NF = "not_found"
PD = "permission_denied"
CF = "conflict"
PE = "provider_error"
ACTOR = "the calling key: key:<id>, followed by :<actor> when the request passes one"
NOT_A_TOOL = "not offered to agents as a tool (an application or operator action)"
_SESSION_TENANT = ("tenant",)


def _op(name: str, area: Area, errors: tuple[str, ...], http: Http | None, **kw: Any) -> Operation:
    return Operation(name=name, area=area, result=memory_result(name), errors=errors, http=http, **kw)


def _build() -> dict[str, Operation]:
    ops = [
        # -- memories: write, read, forget --------------------------------------------------------------
        _op("write", "memories", (V, IA), Http(
            "POST", "/v1/memories",
            body=("user_id", "kind", "key", "value", "source", "importance", "confidence", "now", "session_id",
                  "client_id", "event_at", "ttl_seconds", "change_set_id", "actor", "canonical")),
            mcp=Mcp("remember", {"key": "key", "value": "value", "kind": "kind", "source": "source",
                                 "user_id": "user_id", "ttl_seconds": "ttl_seconds", "event_at": "event_at"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "importance": "defaults", "confidence": "defaults", "now": "server time",
                           "session_id": "none", "client_id": "none", "change_set_id": "a new one",
                           "canonical": "none"},
                    guide="Remember one attribute of the user (key like 'city' or 'reply_length'). Returns the "
                          "decision: ADD, UPDATE, NOOP or REJECT with a reason (a REJECT is not an error: read "
                          "the reason). For free text the user said, call `ingest` instead.")),
        _op("write_many", "memories", (V, IA), Http(
            "POST", "/v1/memories/batch", body=("user_id", "writes", "now", "change_set_id", "actor"))),
        _op("recall", "memories", (V, IA, PD), Http(
            "GET", "/v1/users/{user_id}/memories",
            query=("k", "now", "kinds", "query", "keys", "mark_used", "event_from", "event_until", "actor",
                   "domain", "purpose")),
            client="same route as recall_scored; returns the records only (with `.withheld`). A 404 user is an "
                   "empty list."),
        _op("recall_scored", "memories", (V, IA, PD), Http(
            "GET", "/v1/users/{user_id}/memories",
            query=("k", "now", "kinds", "query", "keys", "mark_used", "event_from", "event_until", "actor",
                   "domain", "purpose")),
            mcp=Mcp("recall", {"query": "query", "k": "k", "kinds": "kinds", "user_id": "user_id",
                               "event_from": "event_from", "event_until": "event_until", "purpose": "purpose"},
                    fixed={"tenant": "the server's or the key's tenant", "mark_used": "always true (agent use)",
                           "now": "server time", "keys": "all",
                           "actor": "not needed: L2/L3 fields need a grant", "domain": "none"},
                    guide="Recall what is known about the user, best first, with weights; entries with "
                          "needs_confirmation should be confirmed with the user before relying on them. "
                          "`withheld` lists fields that exist but were not shown (never their values): ask the "
                          "`question` of a needs_grant entry (unless `declined`), then call request_consent; "
                          "never treat a withheld field as unknown. Records when each memory was used "
                          "(recency keeps it ranked), and changes nothing else.",
                    read_only=False, destructive=False),
            client="a 404 user is an empty list, as the embedded engine answers; `.withheld` from the response"),
        _op("get", "memories", (V, PD), Http("GET", "/v1/memories/{memory_id}", query=("actor", "now")),
            client="a 404 is None"),
        _op("history", "memories", (V, PD), Http(
            "GET", "/v1/users/{user_id}/memories/{key}/history", query=("actor", "now")),
            mcp=Mcp("history", {"key": "key", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time"},
                    guide="Every version of a key, oldest first: how a value changed and who said so.",
                    read_only=True),
            client="a 404 is an empty list"),
        _op("forget", "memories", (V, IA), Http(
            "DELETE", "/v1/users/{user_id}/memories/{key}", query=("now", "actor")),
            mcp=Mcp("forget", {"key": "key", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time"},
                    guide="Forget one key about the user (every version), when the user asks you to. Returns "
                          "how many rows were deleted.", destructive=True),
            client="a 404 is 0 rows"),
        _op("forget_range", "memories", (V, IA), Http(
            "DELETE", "/v1/users/{user_id}/memories", query=("since", "until", "now", "actor")),
            client="a 404 is 0 rows; without since/until it is a validation_error, as in Memory"),
        _op("forget_user", "memories", (V, IA), Http("DELETE", "/v1/users/{user_id}", query=("now", "actor")),
            mcp=Mcp("forget_user", {"user_id": "user_id", "confirm": "(must be true)"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time"},
                    guide="Erase everything held about the user (every memory, session and episode), only when "
                          "the user asks to be forgotten entirely. Needs confirm=true. Returns the rows deleted.",
                    destructive=True),
            client="a 404 is 0 rows"),
        # -- lifecycle ------------------------------------------------------------------------------------
        _op("confirm", "lifecycle", (V, NF, CF), Http(
            "POST", "/v1/users/{user_id}/memories/{memory_id}/confirm", body=("now", "actor", "source")),
            mcp=Mcp("confirm", {"key": "(its current version is the memory_id)", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "memory_id": "the key's current version "
                           "(the tool takes `key`)", "actor": "mcp[:key:<id>]", "now": "server time",
                           "source": "user_confirmed"},
                    guide="Record that the user confirmed the current value of a key (resets its decay).")),
        _op("deny", "lifecycle", (V, NF, CF), Http(
            "POST", "/v1/users/{user_id}/memories/{memory_id}/deny", body=("now", "actor", "source"))),
        _op("revert", "lifecycle", (V, NF, CF), Http(
            "POST", "/v1/users/{user_id}/memories/{key}/revert", body=("to_version", "now", "actor", "source"))),
        _op("revert_change_set", "lifecycle", (V, NF, CF), Http(
            "POST", "/v1/change-sets/{change_set_id}/revert", body=("now", "actor", "source", "partial"),
            user_bound_ok=False)),
        # -- federation (engine/federation.py, docs/federation.md) ------------------------------------------
        _op("federation_notices", "lifecycle", (V,), Http(
            "GET", "/v1/users/{user_id}/federation/notices", query=("now",)),
            no_mcp="notices are for the user (\"changed on another device\"), shown by the application",
            client="a user without notices (or a server that does not federate) is the empty list"),
        _op("keep_local", "lifecycle", (V, NF), Http(
            "POST", "/v1/users/{user_id}/federation/notices/{notice_id}/keep", body=("now", "actor")),
            no_mcp="the user's own choice after a notice; a model must not make it for them"),
        # -- sessions -------------------------------------------------------------------------------------
        _op("open_session", "sessions", (V,), Http(
            "POST", "/v1/users/{user_id}/sessions", body=("client_id", "now", "idle_seconds")),
            client="returns the session id, like Memory (the route answers the whole session)"),
        _op("close_session", "sessions", (V, NF), Http(
            "POST", "/v1/sessions/{session_id}/close", body=("transcript", "now", "actor"),
            from_key=_SESSION_TENANT),
            client="tenant optional, as in Memory: the key's tenant is used"),
        _op("add_messages", "sessions", (V, NF, CF), Http(
            "POST", "/v1/sessions/{session_id}/messages", body=("messages", "extract", "now", "actor"),
            from_key=_SESSION_TENANT),
            client="returns the extraction's write results (the HTTP response also has stored_messages)"),
        _op("touch_session", "sessions", (V, NF, CF), Http(
            "POST", "/v1/sessions/{session_id}/touch", body=("now",), from_key=_SESSION_TENANT)),
        _op("get_session", "sessions", (V, NF), Http(
            "GET", "/v1/sessions/{session_id}", from_key=_SESSION_TENANT)),
        _op("sessions", "sessions", (V,), Http("GET", "/v1/users/{user_id}/sessions", query=("status", "now"))),
        _op("session_context", "sessions", (V, NF), Http(
            "GET", "/v1/sessions/{session_id}/context", query=("k", "now", "mark_used"),
            from_key=_SESSION_TENANT)),
        _op("expire_idle_sessions", "sessions", (V,), Http(
            "POST", "/v1/sessions/expire", body=("now",), from_key=_SESSION_TENANT, admin=True,
            user_bound_ok=False),
            client="closes the idle sessions of the key's tenant only (embedded: every tenant unless given)"),
        _op("episodes", "sessions", (V,), Http(
            "GET", "/v1/users/{user_id}/episodes", query=("since", "until", "limit", "now")),
            mcp=Mcp("episodes", {"since": "since", "until": "until", "limit": "limit", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "now": "server time"},
                    guide="What happened with the user (archived conversations and events), most recent first, "
                          "optionally within [since, until).", read_only=True),
            client="a 404 user is an empty list"),
        # -- privacy --------------------------------------------------------------------------------------
        _op("grant", "privacy", (V, NF), Http(
            "POST", "/v1/users/{user_id}/grants", body=("fields_or_level", "purpose", "ttl", "actor", "grantee",
                                                        "now"),
            wire={"fields_or_level": "fields|level", "ttl": "ttl_seconds"}, admin=True),
            client="fields_or_level travels as `level` ('L2'/'L3') or `fields` (keys)"),
        _op("revoke", "privacy", (V,), Http(
            "DELETE", "/v1/grants/{grant_id}", query=("actor", "now"), from_key=("tenant_or_grant_id",),
            admin=True),
            client="revoke(grant_id) or revoke(tenant, grant_id); a 404 is False"),
        _op("grants", "privacy", (V,), Http(
            "GET", "/v1/grants", query=("user_id", "now", "include_expired"), admin=True),
            client="GET /v1/users/{user_id}/grants is kept too"),
        _op("export", "privacy", (V, PD), Http("GET", "/v1/users/{user_id}/export", query=("now", "actor")),
            client="a 404 user is the empty export document, as the embedded engine answers; needs a user token "
                   "of that user or an admin key (it holds L2/L3 values): an agent's key gets 403"),
        _op("opt_in", "privacy", (V, NF, PD), Http(
            "POST", "/v1/users/{user_id}/consents", body=("fields", "domain", "request_id", "actor", "now")),
            no_mcp="the user's own decision: a model must not opt the user in (an injected instruction could); "
                   "the application records it (REST, CLI) — withdrawing is a tool (withdraw_consent)",
            client="with request_id it approves a consent request, as approve_consent; either form needs a user "
                   "token of that user or an admin key (an agent's key gets 403)"),
        _op("opt_out", "privacy", (V,), Http(
            "POST", "/v1/users/{user_id}/consents/withdraw", body=("fields", "domain", "actor", "now")),
            mcp=Mcp("withdraw_consent", {"fields": "fields", "domain": "domain", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time"},
                    guide="Withdraw the user's consent that `domain` may use these fields. Returns how many "
                          "consents were removed.", destructive=True)),
        # -- consent for what recall withholds (engine/consent.py) ----------------------------------------
        _op("request_consent", "privacy", (V,), Http(
            "POST", "/v1/users/{user_id}/consent-requests", body=("fields", "purpose", "ttl", "domain", "session_id",
                                                                   "actor", "now"),
            wire={"ttl": "ttl_seconds"}),
            mcp=Mcp("request_consent", {"fields": "fields", "purpose": "purpose", "user_id": "user_id",
                                        "ttl": "ttl"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time", "domain": "none", "session_id": "none"},
                    guide="Ask the user to let withheld fields (recall's `withheld`, reason needs_grant) be used "
                          "for a purpose. Returns the request with its question; the user approves or declines it "
                          "themself (their /me page or their token), never the agent. A declined field is "
                          "returned declined: do not ask again this session.")),
        _op("consent_requests", "privacy", (V,), Http(
            "GET", "/v1/users/{user_id}/consent-requests", query=("status", "now")),
            client="status None (all) travels as status=all"),
        _op("approve_consent", "privacy", (V, NF, PD), Http(
            "POST", "/v1/users/{user_id}/consent-requests/{request_id}/approve", body=("actor", "now")),
            no_mcp="the user's own decision: an agent cannot consent for the user (user token or admin key)",
            client="needs a user token of that user (or an admin key): an agent cannot consent for the user"),
        _op("decline_consent", "privacy", (V, NF, PD), Http(
            "POST", "/v1/users/{user_id}/consent-requests/{request_id}/decline", body=("actor", "now")),
            no_mcp="the user's own decision (user token or admin key)",
            client="needs a user token of that user (or an admin key)"),
        _op("users", "admin", (V,), Http(
            "GET", "/v1/users", query=("prefix", "after", "limit"), user_bound_ok=False),
            client="a key bound to one user (or a user token) is refused (403)"),
        # -- contracts ------------------------------------------------------------------------------------
        _op("contracts_list", "contracts", (V,), Http("GET", "/v1/contracts", admin=True)),
        _op("contract", "contracts", (V, NF), Http("GET", "/v1/contracts/{key}", admin=True)),
        _op("contract_history", "contracts", (V,), Http("GET", "/v1/contracts/{key}/history", admin=True)),
        _op("set_contract", "contracts", (V,), Http(
            "PUT", "/v1/contracts/{key}", body=("contract",), query=("actor", "now"), admin=True,
            wire={"contract": "(the whole body)"}, path_from={"key": "contract.key"}),
            client="the body is the contract itself; its key is also the path"),
        _op("enable_field", "contracts", (V, NF), Http(
            "POST", "/v1/contracts/{key}/enable", query=("actor", "now"), admin=True)),
        _op("disable_field", "contracts", (V, NF), Http(
            "POST", "/v1/contracts/{key}/disable", query=("actor", "now"), admin=True)),
        _op("delete_contract", "contracts", (V, NF), Http(
            "DELETE", "/v1/contracts/{key}", query=("actor", "now"), admin=True)),
        _op("set_unknown_fields", "contracts", (V,), Http(
            "PUT", "/v1/settings/unknown-fields", body=("policy", "actor", "now"), admin=True)),
        # -- conversation ---------------------------------------------------------------------------------
        _op("plan", "conversation", (V, PE), Http("POST", "/v1/users/{user_id}/plan", body=("message",))),
        _op("extract", "conversation", (V, PE), Http(
            "POST", "/v1/extract", body=("messages",), from_key=("tenant",))),
        _op("ingest", "conversation", (V, PE), Http(
            "POST", "/v1/users/{user_id}/ingest", body=("messages", "now", "session_id", "change_set_id",
                                                          "actor")),
            mcp=Mcp("ingest", {"text": "messages", "user_id": "user_id"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time", "session_id": "none", "change_set_id": "a new one"},
                    guide="Remember from free text: pass what the user said; the stable facts and preferences "
                          "in it are extracted and written (guards apply: secrets and personal identifiers are "
                          "refused). Returns one decision per extracted memory.")),
        _op("assemble", "conversation", (V, PE, PD), Http(
            "POST", "/v1/users/{user_id}/assemble", body=("message", "budget_tokens", "now", "session_id",
                                                            "actor", "purpose")),
            mcp=Mcp("assemble", {"message": "message", "budget_tokens": "budget_tokens", "user_id": "user_id",
                                 "purpose": "purpose"},
                    fixed={"tenant": "the server's or the key's tenant", "actor": "mcp[:key:<id>]",
                           "now": "server time", "session_id": "none"},
                    guide="A ready-to-insert prompt block (<USER_FACTS>, <USER_PREFERENCES>) with what the current "
                          "message needs, within a token budget. Records when each memory was used (recency keeps "
                          "it ranked), and changes nothing else.", read_only=False, destructive=False),
            client="returns the engine's Assembly (selections as ScoredMemory)"),
        _op("onboarding_questions", "conversation", (V,), Http(
            "GET", "/v1/users/{user_id}/onboarding", query=("language", "now"))),
        _op("set_onboarding_questions", "conversation", (V,), Http(
            "PUT", "/v1/onboarding", body=("questions", "now"), admin=True)),
        _op("answer_onboarding", "conversation", (V,), Http(
            "POST", "/v1/users/{user_id}/onboarding", body=("answers", "now", "actor"))),
        _op("record_pushback", "conversation", (V,), Http(
            "POST", "/v1/users/{user_id}/pushback", body=("key", "message", "value", "now"))),
        _op("pending_verifications", "conversation", (V,), Http("GET", "/v1/users/{user_id}/verifications")),
        _op("accept_verification", "conversation", (V, NF), Http(
            "POST", "/v1/users/{user_id}/verifications/{verification_id}/accept", body=("value", "now", "actor"))),
        _op("reject_verification", "conversation", (V,), Http(
            "POST", "/v1/users/{user_id}/verifications/{verification_id}/reject", body=("now",))),
        # -- the user model (docs/usermodel.md) -----------------------------------------------------------
        _op("model", "usermodel", (V, PD), Http("GET", "/v1/users/{user_id}/model", query=("now", "actor"))),
        _op("record_signal", "usermodel", (V, IA), Http(
            "POST", "/v1/users/{user_id}/signals", body=("key", "value", "agree", "message", "now"))),
        _op("inference_policy", "usermodel", (V,), Http("GET", "/v1/settings/inference", admin=True)),
        _op("set_inference_policy", "usermodel", (V,), Http(
            "PUT", "/v1/settings/inference", body=("mode", "threshold", "suppress_days", "actor", "now"),
            admin=True)),
        _op("derivation_rules", "usermodel", (V,), Http("GET", "/v1/derivation-rules", admin=True)),
        _op("set_derivation_rule", "usermodel", (V, NF), Http(
            "PUT", "/v1/derivation-rules/{rule_id}", body=("rule",), query=("actor", "now"), admin=True,
            wire={"rule": "(the whole body)"}, path_from={"rule_id": "rule.id"}),
            client="the body is the rule itself; its id is also the path"),
        _op("propose_procedure", "usermodel", (V, IA), Http(
            "POST", "/v1/procedures", body=("text", "user_id", "evidence", "proposed_by", "now"), admin=True)),
        _op("procedures", "usermodel", (V,), Http(
            "GET", "/v1/procedures", query=("user_id", "status"), admin=True)),
        _op("review_procedure", "usermodel", (V, NF), Http(
            "POST", "/v1/procedures/{procedure_id}/review", body=("decision", "evaluation", "text", "actor", "now"),
            admin=True)),
        _op("suggest_procedures", "usermodel", (V, PE), Http(
            "POST", "/v1/users/{user_id}/procedures/suggest", body=("now",), admin=True)),
        _op("suggest_derivation_rules", "usermodel", (V, PE), Http(
            "POST", "/v1/derivation-rules/suggest", body=("now",), admin=True)),
        _op("rollback_procedure", "usermodel", (V, NF), Http(
            "POST", "/v1/procedures/{procedure_id}/rollback", body=("actor", "now"), admin=True)),
        # -- admin ----------------------------------------------------------------------------------------
        _op("audit", "admin", (V,), Http(
            "GET", "/v1/audit", query=("user_id", "action", "since", "until", "limit", "after_seq"), admin=True)),
        _op("purge", "admin", (V,), Http(
            "POST", "/v1/purge", body=("now", "retention_days"), from_key=(), admin=True, user_bound_ok=False),
            client="admin key; server-wide maintenance that can never shorten the server's retention "
                   "(docs/api.md)"),
        # -- webhooks (engine/webhooks.py, docs/webhooks.md): tenant-wide, admin keys not bound to a user ----
        _op("create_webhook", "webhooks", (V,), Http(
            "POST", "/v1/webhooks", body=("url", "events", "secret", "actor", "now"), admin=True,
            user_bound_ok=False),
            client="the result carries the signing secret: the only time it is returned"),
        _op("list_webhooks", "webhooks", (V,), Http("GET", "/v1/webhooks", admin=True, user_bound_ok=False)),
        _op("get_webhook", "webhooks", (V, NF), Http(
            "GET", "/v1/webhooks/{webhook_id}", admin=True, user_bound_ok=False)),
        _op("delete_webhook", "webhooks", (V,), Http(
            "DELETE", "/v1/webhooks/{webhook_id}", query=("actor", "now"), admin=True, user_bound_ok=False)),
        _op("enable_webhook", "webhooks", (V, NF), Http(
            "POST", "/v1/webhooks/{webhook_id}/enable", body=("actor", "now"), admin=True, user_bound_ok=False)),
        _op("ping_webhook", "webhooks", (V, NF), Http(
            "POST", "/v1/webhooks/{webhook_id}/ping", body=("now",), admin=True, user_bound_ok=False)),
        _op("webhook_deliveries", "webhooks", (V,), Http(
            "GET", "/v1/webhook-deliveries", query=("webhook_id", "limit"), admin=True, user_bound_ok=False)),
        _op("contracts_for", "contracts", (V,), None,
            no_http="returns the in-process ContractSet (remote: contracts_list and contract)"),
    ]
    return {op.name: op for op in ops}


OPERATIONS: dict[str, Operation] = _build()

# Public members of `Memory` that are not operations over the wire, with the reason.
IN_PROCESS: Mapping[str, str] = {
    "store": "the storage backend object",
    "contracts": "the default in-process ContractSet (remote: contracts_list / contract)",
    "events": "this process's event-bus state (docs/events.md)",
    "webhooks": "the webhook hub object (engine/webhooks.py): deliver_due is the background worker's step "
                "(`usermem serve`, `usermem webhooks deliver`); subscriptions are the *_webhook operations",
    "understanding": "the in-process conversation pipelines object",
    "subscribe": "registers an in-process change listener",
    "on_session_closed": "registers an in-process close hook",
    "on_remote_change": "in-process callback; other processes subscribe to NATS (usermem.events)",
    "register_resolver": "registers a Python callable",
    "flush": "waits for this process's vector indexer",
    "relevance": "this process's relevance plug-in object (embedder, vector index, indexer)",
    "use_relevance": "wires an in-process relevance plug-in (engine/compose.py)",
    "federate": "configures this process (the server: the federate_domain setting, docs/federation.md)",
    "federation": "this process's federation object (stats, clock)",
    "close": "closes this process's engine (Client.close closes its connection pool)",
    "refresh_derived": "the background worker's step (derived attributes follow changes by themselves; flush() "
                       "waits for them)",
}

# What the clients offer beyond Memory (the HTTP API's own resources), with the route.
CLIENT_EXTRAS: Mapping[str, str] = {
    "whoami": "GET /v1/whoami",
    "redact": "POST /v1/redact",
}


@dataclass(frozen=True)
class CliCommand:
    """A CLI command offering an operation (declared in `usermem.interfaces.cli_catalog`, owned by the CLI).

    `command` is the full command path ("contracts show"); `params` maps an operation parameter to the
    command's parameter name where they differ (`to_version` → `to`); `fixed` names the operation parameters
    the command does not take, with the reason (e.g. `now`: "always the current time").
    """

    command: str
    params: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, str] = field(default_factory=dict)

    def cli_name(self, param: str) -> str:
        return self.params.get(param, param)


def cli_bindings() -> Mapping[str, CliCommand | str]:
    """Operation name → its CLI command, or the reason it has none (from `usermem.interfaces.cli_catalog`)."""
    from usermem.interfaces.cli_catalog import COMMANDS

    return COMMANDS


def by_area(area: Area) -> list[Operation]:
    return [op for op in OPERATIONS.values() if op.area == area]


def http_path(name: str) -> str:
    """The HTTP path of an operation (the routers use this, so paths live only here)."""
    http = OPERATIONS[name].http
    if http is None:
        raise KeyError(f"{name} has no HTTP route")
    return http.path


def route_doc(name: str) -> dict[str, Any]:
    """`summary`/`description` for an operation's HTTP route, from Memory's docstring."""
    op = OPERATIONS[name]
    return {"summary": op.doc.split(". ")[0][:120], "description": f"`Memory.{name}`: {op.doc}"}


def describe(param: str) -> str:
    return PARAM_DOCS.get(param, "")
