"""Request building and response decoding shared by `Client` and `AsyncClient` (httpx-style: the two
clients differ only in how they send). One function per catalogue operation, with `Memory`'s own signature;
each returns a `Call`: the HTTP request, how to decode the answer into `Memory`'s result type, and what an
absent user/key (404) means when the embedded engine answers "empty" instead.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from usermem import errors as E
from usermem.engine.consent import ConsentRequest
from usermem.engine.grants import Grant
from usermem.engine.lifecycle import ChangeSetRevert
from usermem.engine.sessions import Session, SessionClosed, Transcript
from usermem.engine.webhooks import Delivery, Webhook, WebhookCreated
from usermem.engine.write import check_ids
from usermem.interfaces.wire import audit_from_json, record_from_json, result_from_json, scored_from_json
from usermem.model import (
    AuditEvent,
    Candidate,
    Kind,
    MemoryRecord,
    Recalled,
    ScoredMemory,
    UserPage,
    Withheld,
    WriteRequest,
    WriteResult,
)
from usermem.policy.contracts import FieldContract, Sensitivity

if TYPE_CHECKING:
    from usermem.understand.assemble import Assembly
    from usermem.understand.usermodel import UserModel

T = TypeVar("T")
_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request of an operation and how to turn the answer into the operation's result."""

    method: str
    path: str
    decode: Callable[[Any], T]
    tenant: str | None = None
    params: Mapping[str, Any] | None = None
    json: Any = None
    absent: Callable[[], T] = _NO_DEFAULT  # the result when the API says the user/key is absent (404)

    @property
    def headers(self) -> dict[str, str] | None:
        return {"X-Usermem-Tenant": self.tenant} if self.tenant is not None else None


# -- errors and retries (shared) ------------------------------------------------------------------------

_ERRORS_BY_CODE: dict[str, type[E.UsermemError]] = {
    cls.code: cls for cls in (E.ValidationError, E.InvalidArgument, E.NotFound, E.ConflictError,
                              E.PermissionDenied, E.StoreError, E.TierUnavailable, E.IntegrityError,
                              E.ProviderError, E.ConfigError)
}
_ERRORS_BY_STATUS: dict[int, type[E.UsermemError]] = {
    401: E.PermissionDenied, 403: E.PermissionDenied, 404: E.NotFound, 409: E.ConflictError,
    413: E.ValidationError, 422: E.ValidationError, 429: E.TierUnavailable, 502: E.ProviderError,
    503: E.StoreError,
}
RETRY_STATUSES = frozenset({429, 503})


class RemoteError(E.UsermemError):
    """An HTTP error that maps to no usermem error class; `status` and `code` say what the server answered."""

    code = "remote_error"

    def __init__(self, message: str, *, status: int, problem_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem_code = problem_code


class RateLimited(E.UsermemError):
    """The server refused the request under its per-key rate limit; retry after `retry_after` seconds."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def retry_after(resp: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date), or None."""
    value = resp.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class RetryPolicy:
    """429 and 503 are retried `retries` times: after Retry-After when the server sends it, else after an
    exponential backoff (`backoff` · 2^attempt); each wait is capped at `max_wait` seconds."""

    retries: int = 3
    backoff: float = 0.5
    max_wait: float = 30.0

    def delay(self, resp: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when the answer is final."""
        if resp.status_code not in RETRY_STATUSES or attempt >= self.retries:
            return None
        after = retry_after(resp)
        wait = after if after is not None else self.backoff * (2 ** attempt)
        return min(wait, self.max_wait)


def error_from(resp: httpx.Response, base_url: str) -> E.UsermemError:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    code = body.get("code") if isinstance(body, dict) else None
    detail = (body.get("detail") if isinstance(body, dict) else None) or resp.reason_phrase
    status = resp.status_code
    if status == 429:
        return RateLimited(f"rate limited: {detail}", retry_after=retry_after(resp))
    if status in (401, 403):
        return E.PermissionDenied(f"{code or status}: {detail}")
    data_absent = code == "not_found" or ((code or "").endswith("_not_found") and code != "route_not_found")
    if status == 404 and not data_absent:
        # Not a usermem answer about data: a wrong base URL, a proxy, or a server without this endpoint.
        return RemoteError(f"HTTP 404 from {resp.request.url}: no such endpoint (is {base_url} a usermem "
                           f"server of this version?)", status=404, problem_code=code)
    cls = _ERRORS_BY_CODE.get(code or "") or _ERRORS_BY_STATUS.get(status)
    if cls is E.ValidationError:
        return E.ValidationError(str(detail), field=body.get("field") if isinstance(body, dict) else None)
    if cls is E.ConfigError:
        return E.ConfigError(str(detail))
    if cls is not None:
        return cls(str(detail))
    return RemoteError(f"HTTP {status} {code or ''}: {detail}".strip(), status=status, problem_code=code)


def finish(call: Call[T], resp: httpx.Response, base_url: str) -> T:
    """Decode a final answer (no more retries) into the operation's result, or raise its error."""
    if resp.status_code < 400:
        return call.decode(resp.json())
    err = error_from(resp, base_url)
    if isinstance(err, E.NotFound) and call.absent is not _NO_DEFAULT:
        return call.absent()
    raise err


def transport_error(exc: httpx.TransportError, base_url: str) -> E.StoreError:
    if isinstance(exc, httpx.TimeoutException):
        return E.StoreError(f"usermem server at {base_url} timed out: {exc}")
    return E.StoreError(f"cannot reach usermem server at {base_url}: {exc}")


# -- helpers --------------------------------------------------------------------------------------------

def _seg(part: str, field: str = "id") -> str:
    if not isinstance(part, str):
        raise E.InvalidArgument(f"{field} must be a str, got {type(part).__name__}")
    if not part.strip():
        raise E.ValidationError("must not be empty", field=field)
    return quote(part, safe="")


def _tenant(tenant: str | None) -> str | None:
    """None: the key's tenant. A tenant given is sent as X-Usermem-Tenant (the server checks it)."""
    if tenant is not None:
        check_ids(tenant, "-")
    return tenant


def _q(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _kinds(kinds: Iterable[str | Kind] | None) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        return [kinds]
    return [k.value if isinstance(k, Kind) else str(k) for k in kinds]


def _fields(fields: Iterable[str] | str) -> list[str]:
    return [fields] if isinstance(fields, str) else list(fields)


def _messages(messages: Any) -> list[Any]:
    if isinstance(messages, str):
        messages = [messages]
    return [m if isinstance(m, str) else dict(m) for m in messages]


def _results(d: Any) -> list[WriteResult]:
    return [result_from_json(r) for r in d["results"]]


def _records(d: Any) -> list[MemoryRecord]:
    return [record_from_json(r) for r in d["items"]]


def _scored(d: Any) -> Recalled[ScoredMemory]:
    return Recalled([scored_from_json(s) for s in d["items"]],
                    [Withheld.from_dict(w) for w in d.get("withheld") or ()])


def _closed(d: Mapping[str, Any], transcript: Transcript | None = None) -> SessionClosed:
    return SessionClosed(session=Session.from_dict(d["session"]), reason=d["reason"],
                         context=tuple(record_from_json(r) for r in d["context"]),
                         episode=record_from_json(d["episode"]) if d.get("episode") else None,
                         transcript=transcript, already_closed=bool(d["already_closed"]),
                         withheld=tuple(d.get("withheld", ())))


def _contract(d: Any) -> FieldContract:
    return FieldContract.from_dict(d)


def _assembly(d: Mapping[str, Any]) -> Assembly:
    from usermem.understand.assemble import Assembly
    from usermem.understand.plan import RecallPlan

    plan = d["plan"]
    sel = d["selected"]
    return Assembly(
        plan=RecallPlan(tuple(plan["fact_recall"]), tuple(plan["preference_recall"]), bool(plan["context_recall"]),
                        str(plan["memory_priority"]), str(d.get("plan_mode") or "deterministic")),
        facts=tuple(scored_from_json(s) for s in sel["facts"]),
        preferences=tuple(scored_from_json(s) for s in sel["preferences"]),
        context=tuple(scored_from_json(s) for s in sel["context"]),
        prompt=str(d["prompt"]), tokens=int(d["tokens"]), budget_tokens=int(d["budget_tokens"]),
        dropped=tuple(d.get("dropped", ())), withheld=tuple(Withheld.from_dict(w) for w in d.get("withheld", ())),
        used_ids=tuple(sel.get("used_ids", ())))


def _candidate(d: Mapping[str, Any]) -> Candidate:
    return Candidate(key=d["key"], kind=Kind(d["kind"]), value=d.get("value"), confidence=float(d["confidence"]),
                     evidence=d.get("evidence", ""), message_index=d.get("message_index"),
                     method=d.get("method", "pattern"), canonical=d.get("canonical"))


# -- memories -------------------------------------------------------------------------------------------

def write(tenant: str | None, user_id: str, kind: str, key: str, value: Any, *, source: str = "extracted",
          importance: float | None = None, confidence: float | None = None, now: float | None = None,
          session_id: str | None = None, client_id: str | None = None, event_at: float | None = None,
          ttl_seconds: float | None = None, change_set_id: str | None = None,
          actor: str | None = None, canonical: Any = None) -> Call[WriteResult]:
    body = _q(user_id=user_id, kind=kind, key=key, source=source, importance=importance, confidence=confidence,
              now=now, session_id=session_id, client_id=client_id, event_at=event_at, ttl_seconds=ttl_seconds,
              change_set_id=change_set_id, actor=actor)
    body["value"] = value
    if canonical is not None:
        body["canonical"] = canonical
    return Call("POST", "/v1/memories", result_from_json, _tenant(tenant), json=body)


def write_many(tenant: str | None, user_id: str, writes: Sequence[WriteRequest | dict[str, Any]], *,
               now: float | None = None, change_set_id: str | None = None,
               actor: str | None = None) -> Call[list[WriteResult]]:
    items = []
    for w in writes:
        d = asdict(w) if isinstance(w, WriteRequest) else w
        if not isinstance(d, dict):
            raise E.InvalidArgument(f"each write must be a WriteRequest or dict, got {type(w).__name__}")
        items.append({k: v for k, v in d.items() if v is not None or k == "value"})
    body = _q(user_id=user_id, writes=items, now=now, change_set_id=change_set_id, actor=actor)
    return Call("POST", "/v1/memories/batch", _results, _tenant(tenant), json=body)


def recall_scored(tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
                  kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                  keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
                  event_until: float | None = None, actor: str | None = None,
                  domain: str | None = None, purpose: str | None = None) -> Call[Recalled[ScoredMemory]]:
    if isinstance(k, bool) or not isinstance(k, int):
        raise E.InvalidArgument(f"k must be an int, got {type(k).__name__}")
    if k < 1:
        raise E.ValidationError("k must be at least 1", field="k")
    params = _q(k=k, now=now, kinds=_kinds(kinds), query=query, keys=list(keys) if keys is not None else None,
                mark_used=mark_used, event_from=event_from, event_until=event_until, actor=actor, domain=domain,
                purpose=purpose)
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/memories", _scored, _tenant(tenant), params=params,
                absent=Recalled)


def recall(tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
           kinds: Iterable[str | Kind] | None = None, query: str | None = None,
           keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
           event_until: float | None = None, actor: str | None = None,
           domain: str | None = None, purpose: str | None = None) -> Call[Recalled[MemoryRecord]]:
    scored = recall_scored(tenant, user_id, k, now=now, kinds=kinds, query=query, keys=keys, mark_used=mark_used,
                           event_from=event_from, event_until=event_until, actor=actor, domain=domain,
                           purpose=purpose)

    def records(d: Any) -> Recalled[MemoryRecord]:
        found = _scored(d)
        return Recalled([s.memory for s in found], found.withheld)

    return Call(scored.method, scored.path, records, scored.tenant, params=scored.params, absent=Recalled)


def get(tenant: str | None, memory_id: str, *, actor: str | None = None,
        now: float | None = None) -> Call[MemoryRecord | None]:
    return Call("GET", f"/v1/memories/{_seg(memory_id, 'memory_id')}", record_from_json, _tenant(tenant),
                params=_q(actor=actor, now=now), absent=lambda: None)


def history(tenant: str | None, user_id: str, key: str, *, actor: str | None = None,
            now: float | None = None) -> Call[list[MemoryRecord]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/memories/{_seg(key, 'key')}/history", _records,
                _tenant(tenant), params=_q(actor=actor, now=now), absent=list)


def audit(tenant: str | None, *, user_id: str | None = None, action: str | None = None,
          since: float | None = None, until: float | None = None, limit: int = 100,
          after_seq: int | None = None) -> Call[list[AuditEvent]]:
    params = _q(user_id=user_id, action=action, since=since, until=until, limit=limit, after_seq=after_seq)
    return Call("GET", "/v1/audit", lambda d: [audit_from_json(e) for e in d["items"]], _tenant(tenant),
                params=params)


def _deleted(d: Any) -> int:
    return int(d["deleted"])


def forget(tenant: str | None, user_id: str, key: str, *, now: float | None = None,
           actor: str | None = None) -> Call[int]:
    return Call("DELETE", f"/v1/users/{_seg(user_id, 'user_id')}/memories/{_seg(key, 'key')}", _deleted,
                _tenant(tenant), params=_q(now=now, actor=actor), absent=lambda: 0)


def forget_user(tenant: str | None, user_id: str, *, now: float | None = None,
                actor: str | None = None) -> Call[int]:
    return Call("DELETE", f"/v1/users/{_seg(user_id, 'user_id')}", _deleted, _tenant(tenant),
                params=_q(now=now, actor=actor), absent=lambda: 0)


def forget_range(tenant: str | None, user_id: str, *, since: float | None = None, until: float | None = None,
                 now: float | None = None, actor: str | None = None) -> Call[int]:
    if since is None and until is None:
        raise E.ValidationError("give since and/or until (forget_user erases everything)", field="since")
    return Call("DELETE", f"/v1/users/{_seg(user_id, 'user_id')}/memories", _deleted, _tenant(tenant),
                params=_q(since=since, until=until, now=now, actor=actor), absent=lambda: 0)


def purge(now: float | None = None, *, retention_days: float | None = None) -> Call[int]:
    return Call("POST", "/v1/purge", lambda d: int(d["purged"]), json=_q(now=now, retention_days=retention_days))


# -- lifecycle ------------------------------------------------------------------------------------------

def confirm(tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
            actor: str | None = None, source: str = "user_confirmed") -> Call[MemoryRecord]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/memories/{_seg(memory_id, 'memory_id')}/confirm",
                record_from_json, _tenant(tenant), json=_q(now=now, actor=actor, source=source))


def deny(tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
         actor: str | None = None, source: str = "user_confirmed") -> Call[MemoryRecord]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/memories/{_seg(memory_id, 'memory_id')}/deny",
                record_from_json, _tenant(tenant), json=_q(now=now, actor=actor, source=source))


def revert(tenant: str | None, user_id: str, key: str, to_version: str | int | None = None, *,
           now: float | None = None, actor: str | None = None, source: str = "user_confirmed") -> Call[WriteResult]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/memories/{_seg(key, 'key')}/revert",
                result_from_json, _tenant(tenant),
                json=_q(to_version=to_version, now=now, actor=actor, source=source))


def federation_notices(tenant: str | None, user_id: str, *, now: float | None = None) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/federation/notices",
                lambda d: [dict(n) for n in d["items"]], _tenant(tenant), params=_q(now=now), absent=list)


def keep_local(tenant: str | None, user_id: str, notice_id: str, *, now: float | None = None,
               actor: str | None = None) -> Call[WriteResult]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/federation/notices/{_seg(notice_id, 'notice_id')}"
                "/keep", result_from_json, _tenant(tenant), json=_q(now=now, actor=actor))


def _change_set_revert(d: Mapping[str, Any]) -> ChangeSetRevert:
    return ChangeSetRevert(reverted_change_set_id=d["reverted_change_set_id"], change_set_id=d["change_set_id"],
                           results=tuple(result_from_json(r) for r in d["results"]),
                           conflicts=tuple((c["user_id"], c["key"], c["reason"]) for c in d["conflicts"]))


def revert_change_set(tenant: str | None, change_set_id: str, *, now: float | None = None,
                      actor: str | None = None, source: str = "user_confirmed",
                      partial: bool = False) -> Call[ChangeSetRevert]:
    return Call("POST", f"/v1/change-sets/{_seg(change_set_id, 'change_set_id')}/revert", _change_set_revert,
                _tenant(tenant), json=_q(now=now, actor=actor, source=source, partial=partial))


# -- sessions -------------------------------------------------------------------------------------------

def open_session(tenant: str | None, user_id: str, client_id: str | None = None, *, now: float | None = None,
                 idle_seconds: float | None = None) -> Call[str]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/sessions", lambda d: str(d["id"]), _tenant(tenant),
                json=_q(client_id=client_id, now=now, idle_seconds=idle_seconds))


def close_session(session_id: str, transcript: Transcript | None = None, *, tenant: str | None = None,
                  now: float | None = None, actor: str | None = None) -> Call[SessionClosed]:
    wire = transcript if transcript is None or isinstance(transcript, str) else [dict(m) for m in transcript]
    return Call("POST", f"/v1/sessions/{_seg(session_id, 'session_id')}/close",
                lambda d: _closed(d, transcript), _tenant(tenant), json=_q(transcript=wire, now=now, actor=actor))


def touch_session(session_id: str, *, tenant: str | None = None, now: float | None = None) -> Call[Session]:
    return Call("POST", f"/v1/sessions/{_seg(session_id, 'session_id')}/touch", Session.from_dict, _tenant(tenant),
                json=_q(now=now))


def get_session(session_id: str, *, tenant: str | None = None) -> Call[Session]:
    return Call("GET", f"/v1/sessions/{_seg(session_id, 'session_id')}", Session.from_dict, _tenant(tenant))


def sessions(tenant: str | None, user_id: str, *, status: str | None = None,
             now: float | None = None) -> Call[list[Session]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/sessions",
                lambda d: [Session.from_dict(s) for s in d["items"]], _tenant(tenant),
                params=_q(status=status, now=now))


def session_context(session_id: str, *, tenant: str | None = None, k: int = 20, now: float | None = None,
                    mark_used: bool = True) -> Call[list[ScoredMemory]]:
    return Call("GET", f"/v1/sessions/{_seg(session_id, 'session_id')}/context", _scored, _tenant(tenant),
                params=_q(k=k, now=now, mark_used=mark_used))


def expire_idle_sessions(now: float | None = None, *, tenant: str | None = None) -> Call[list[SessionClosed]]:
    return Call("POST", "/v1/sessions/expire", lambda d: [_closed(c) for c in d["items"]], _tenant(tenant),
                json=_q(now=now))


def episodes(tenant: str | None, user_id: str, *, since: float | None = None, until: float | None = None,
             limit: int = 10, now: float | None = None) -> Call[list[MemoryRecord]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/episodes", _records, _tenant(tenant),
                params=_q(since=since, until=until, limit=limit, now=now), absent=list)


def add_messages(session_id: str, messages: Sequence[Mapping[str, str]], *, tenant: str | None = None,
                 extract: bool = False, now: float | None = None,
                 actor: str | None = None) -> Call[list[WriteResult]]:
    return Call("POST", f"/v1/sessions/{_seg(session_id, 'session_id')}/messages", _results, _tenant(tenant),
                json=_q(messages=[dict(m) for m in messages], extract=extract, now=now, actor=actor))


# -- privacy --------------------------------------------------------------------------------------------

def grant(tenant: str | None, user_id: str, fields_or_level: str | Sensitivity | Iterable[str], purpose: str,
          ttl: float = 30 * 60.0, *, actor: str | None = None, grantee: str | None = None,
          now: float | None = None) -> Call[str]:
    target: dict[str, Any]
    if isinstance(fields_or_level, Sensitivity):
        target = {"level": fields_or_level.value}
    elif isinstance(fields_or_level, str) and fields_or_level.upper() in ("L1", "L2", "L3"):
        target = {"level": fields_or_level.upper()}
    else:
        target = {"fields": _fields(fields_or_level)}
    body = _q(**target, purpose=purpose, ttl_seconds=ttl, grantee=grantee, now=now, actor=actor)
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/grants", lambda d: str(d["id"]), _tenant(tenant),
                json=body)


def revoke(tenant_or_grant_id: str, grant_id: str | None = None, *, actor: str | None = None,
           now: float | None = None) -> Call[bool]:
    tenant, gid = (None, tenant_or_grant_id) if grant_id is None else (tenant_or_grant_id, grant_id)
    return Call("DELETE", f"/v1/grants/{_seg(gid, 'grant_id')}", lambda d: bool(d["revoked"]), _tenant(tenant),
                params=_q(actor=actor, now=now), absent=lambda: False)


def grants(tenant: str | None, user_id: str | None = None, *, now: float | None = None,
           include_expired: bool = False) -> Call[list[Grant]]:
    return Call("GET", "/v1/grants", lambda d: [Grant.from_dict(g) for g in d["items"]], _tenant(tenant),
                params=_q(user_id=user_id, now=now, include_expired=include_expired))


def export(tenant: str | None, user_id: str, *, now: float | None = None,
           actor: str | None = None) -> Call[dict[str, Any]]:
    from usermem.engine.export import FORMAT

    def empty() -> dict[str, Any]:  # the engine exports an empty document for an unknown user
        return {"format": FORMAT, "tenant": tenant, "user_id": user_id, "exported_at": now, "fields": {},
                "documents": {}, "counts": {"fields": 0, "versions": 0}}

    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/export", dict, _tenant(tenant),
                params=_q(now=now, actor=actor), absent=empty)


def opt_in(tenant: str | None, user_id: str, fields: Iterable[str] | str | None = None, domain: str | None = None,
           *, request_id: str | None = None, actor: str | None = None,
           now: float | None = None) -> Call[list[str]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/consents", lambda d: list(d["fields"]),
                _tenant(tenant), json=_q(fields=_fields(fields) if fields is not None else None, domain=domain,
                                         request_id=request_id, actor=actor, now=now))


def _consent_request(d: Any) -> ConsentRequest:
    return ConsentRequest.from_dict(d)


def request_consent(tenant: str | None, user_id: str, fields: Iterable[str] | str, purpose: str,
                    ttl: float = 30 * 60.0, *, domain: str | None = None, session_id: str | None = None,
                    actor: str | None = None, now: float | None = None) -> Call[ConsentRequest]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/consent-requests", _consent_request,
                _tenant(tenant), json=_q(fields=_fields(fields), purpose=purpose, ttl_seconds=ttl, domain=domain,
                                         session_id=session_id, actor=actor, now=now))


def consent_requests(tenant: str | None, user_id: str, *, status: str | None = "pending",
                     now: float | None = None) -> Call[list[ConsentRequest]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/consent-requests",
                lambda d: [_consent_request(r) for r in d["items"]], _tenant(tenant),
                params=_q(status=status or "all", now=now), absent=list)


def approve_consent(tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                    now: float | None = None) -> Call[ConsentRequest]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/consent-requests/{_seg(request_id, 'request_id')}"
                "/approve", _consent_request, _tenant(tenant), json=_q(actor=actor, now=now))


def decline_consent(tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                    now: float | None = None) -> Call[ConsentRequest]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/consent-requests/{_seg(request_id, 'request_id')}"
                "/decline", _consent_request, _tenant(tenant), json=_q(actor=actor, now=now))


def users(tenant: str | None, *, prefix: str | None = None, after: str | None = None,
          limit: int = 50) -> Call[UserPage]:
    return Call("GET", "/v1/users", lambda d: UserPage(list(d["items"]), d.get("next_after")), _tenant(tenant),
                params=_q(prefix=prefix, after=after, limit=limit))


def opt_out(tenant: str | None, user_id: str, fields: Iterable[str] | str, domain: str, *,
            actor: str | None = None, now: float | None = None) -> Call[int]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/consents/withdraw", lambda d: int(d["removed"]),
                _tenant(tenant), json=_q(fields=_fields(fields), domain=domain, actor=actor, now=now))


def redact(text: str, placeholder: str | None = None) -> Call[str]:
    return Call("POST", "/v1/redact", lambda d: str(d["text"]), json=_q(text=text, placeholder=placeholder))


def whoami() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/whoami", dict)


# -- contracts ------------------------------------------------------------------------------------------

def contracts_list(tenant: str | None) -> Call[list[FieldContract]]:
    return Call("GET", "/v1/contracts", lambda d: [_contract(c) for c in d["items"]], _tenant(tenant))


def contract(tenant: str | None, key: str) -> Call[FieldContract]:
    return Call("GET", f"/v1/contracts/{_seg(key, 'key')}", _contract, _tenant(tenant))


def contract_history(tenant: str | None, key: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/contracts/{_seg(key, 'key')}/history", lambda d: list(d["items"]), _tenant(tenant))


def set_contract(tenant: str | None, contract: FieldContract | dict[str, Any], *, actor: str | None = None,
                 now: float | None = None) -> Call[FieldContract]:
    d = contract.to_dict() if isinstance(contract, FieldContract) else dict(contract)
    key = d.get("key")
    if not isinstance(key, str):
        raise E.ValidationError("a contract needs a key", field="key")
    return Call("PUT", f"/v1/contracts/{_seg(key, 'key')}", _contract, _tenant(tenant), json=d,
                params=_q(actor=actor, now=now))


def enable_field(tenant: str | None, key: str, *, actor: str | None = None,
                 now: float | None = None) -> Call[FieldContract]:
    return Call("POST", f"/v1/contracts/{_seg(key, 'key')}/enable", _contract, _tenant(tenant),
                params=_q(actor=actor, now=now))


def disable_field(tenant: str | None, key: str, *, actor: str | None = None,
                  now: float | None = None) -> Call[FieldContract]:
    return Call("POST", f"/v1/contracts/{_seg(key, 'key')}/disable", _contract, _tenant(tenant),
                params=_q(actor=actor, now=now))


def delete_contract(tenant: str | None, key: str, *, actor: str | None = None,
                    now: float | None = None) -> Call[None]:
    return Call("DELETE", f"/v1/contracts/{_seg(key, 'key')}", lambda d: None, _tenant(tenant),
                params=_q(actor=actor, now=now))


def set_unknown_fields(tenant: str | None, policy: str, *, actor: str | None = None,
                       now: float | None = None) -> Call[str]:
    return Call("PUT", "/v1/settings/unknown-fields", lambda d: str(d["policy"]), _tenant(tenant),
                json=_q(policy=policy, actor=actor, now=now))


# -- conversation ---------------------------------------------------------------------------------------

def plan(tenant: str | None, user_id: str, message: str) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/plan", dict, _tenant(tenant),
                json={"message": message})


def extract(messages: Any, *, tenant: str | None = None) -> Call[list[Candidate]]:
    return Call("POST", "/v1/extract", lambda d: [_candidate(c) for c in d["items"]], _tenant(tenant),
                json={"messages": _messages(messages)})


def ingest(tenant: str | None, user_id: str, messages: Any, *, now: float | None = None,
           session_id: str | None = None, change_set_id: str | None = None,
           actor: str | None = None) -> Call[list[WriteResult]]:
    msgs = [{"role": "user", "content": m} if isinstance(m, str) else m for m in _messages(messages)]
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/ingest", _results, _tenant(tenant),
                json=_q(messages=msgs, now=now, session_id=session_id, change_set_id=change_set_id, actor=actor))


def assemble(tenant: str | None, user_id: str, message: str, budget_tokens: int = 800, *,
             now: float | None = None, session_id: str | None = None, actor: str | None = None,
             purpose: str | None = None) -> Call[Assembly]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/assemble", _assembly, _tenant(tenant),
                json=_q(message=message, budget_tokens=budget_tokens, now=now, session_id=session_id, actor=actor,
                        purpose=purpose))


def onboarding_questions(tenant: str | None, user_id: str, language: str | None = None, *,
                         now: float | None = None) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/onboarding", lambda d: list(d["items"]),
                _tenant(tenant), params=_q(language=language, now=now))


def set_onboarding_questions(tenant: str | None, questions: Sequence[Any], *,
                             now: float | None = None) -> Call[list[dict[str, Any]]]:
    qs = [q.to_dict() if hasattr(q, "to_dict") else dict(q) for q in questions]
    return Call("PUT", "/v1/onboarding", lambda d: list(d["items"]), _tenant(tenant),
                json=_q(questions=qs, now=now))


def answer_onboarding(tenant: str | None, user_id: str, answers: dict[str, Any], *, now: float | None = None,
                      actor: str | None = None) -> Call[list[WriteResult]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/onboarding", _results, _tenant(tenant),
                json=_q(answers=answers, now=now, actor=actor))


def record_pushback(tenant: str | None, user_id: str, key: str, message: str = "", *, value: Any = None,
                    now: float | None = None) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/pushback", dict, _tenant(tenant),
                json=_q(key=key, message=message, value=value, now=now))


def pending_verifications(tenant: str | None, user_id: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/verifications", lambda d: list(d["items"]),
                _tenant(tenant))


def accept_verification(tenant: str | None, user_id: str, verification_id: str, *, value: Any = None,
                        now: float | None = None, actor: str | None = None) -> Call[WriteResult]:
    path = f"/v1/users/{_seg(user_id, 'user_id')}/verifications/{_seg(verification_id, 'verification_id')}/accept"
    return Call("POST", path, result_from_json, _tenant(tenant), json=_q(value=value, now=now, actor=actor))


def reject_verification(tenant: str | None, user_id: str, verification_id: str, *,
                        now: float | None = None) -> Call[bool]:
    path = f"/v1/users/{_seg(user_id, 'user_id')}/verifications/{_seg(verification_id, 'verification_id')}/reject"
    return Call("POST", path, lambda d: bool(d["rejected"]), _tenant(tenant), json=_q(now=now))


# -- the user model (docs/usermodel.md) ---------------------------------------------------------------


def model(tenant: str | None, user_id: str, *, now: float | None = None,
          actor: str | None = None) -> Call[UserModel]:
    from usermem.understand.usermodel import UserModel

    return Call("GET", f"/v1/users/{_seg(user_id, 'user_id')}/model", UserModel.from_dict, _tenant(tenant),
                params=_q(now=now, actor=actor))


def record_signal(tenant: str | None, user_id: str, key: str, value: Any, *, agree: bool = True,
                  message: str = "", now: float | None = None) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/signals", dict, _tenant(tenant),
                json=_q(key=key, value=value, agree=agree, message=message, now=now))


def inference_policy(tenant: str | None) -> Call[dict[str, Any]]:
    return Call("GET", "/v1/settings/inference", dict, _tenant(tenant))


def set_inference_policy(tenant: str | None, *, mode: str | None = None, threshold: int | None = None,
                         suppress_days: float | None = None, actor: str | None = None,
                         now: float | None = None) -> Call[dict[str, Any]]:
    return Call("PUT", "/v1/settings/inference", dict, _tenant(tenant),
                json=_q(mode=mode, threshold=threshold, suppress_days=suppress_days, actor=actor, now=now))


def derivation_rules(tenant: str | None) -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/derivation-rules", lambda d: list(d["items"]), _tenant(tenant))


def set_derivation_rule(tenant: str | None, rule: dict[str, Any], *, actor: str | None = None,
                        now: float | None = None) -> Call[dict[str, Any]]:
    rid = rule.get("id") if isinstance(rule, dict) else None
    if not isinstance(rid, str):
        raise E.ValidationError("a rule needs an id", field="id")
    return Call("PUT", f"/v1/derivation-rules/{_seg(rid, 'id')}", dict, _tenant(tenant), json=dict(rule),
                params=_q(actor=actor, now=now))


def propose_procedure(tenant: str | None, text: str, *, user_id: str | None = None, evidence: Sequence[str] = (),
                      proposed_by: str = "api", now: float | None = None) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/procedures", dict, _tenant(tenant),
                json=_q(text=text, user_id=user_id, evidence=list(evidence), proposed_by=proposed_by, now=now))


def procedures(tenant: str | None, *, user_id: str | None = None,
               status: str | None = None) -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/procedures", lambda d: list(d["items"]), _tenant(tenant),
                params=_q(user_id=user_id, status=status))


def review_procedure(tenant: str | None, procedure_id: str, decision: str, *,
                     evaluation: dict[str, Any] | None = None, text: str | None = None, actor: str | None = None,
                     now: float | None = None) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/procedures/{_seg(procedure_id, 'procedure_id')}/review", dict, _tenant(tenant),
                json=_q(decision=decision, evaluation=evaluation, text=text, actor=actor, now=now))


def rollback_procedure(tenant: str | None, procedure_id: str, *, actor: str | None = None,
                       now: float | None = None) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/procedures/{_seg(procedure_id, 'procedure_id')}/rollback", dict, _tenant(tenant),
                json=_q(actor=actor, now=now))


def suggest_procedures(tenant: str | None, user_id: str, *, now: float | None = None) -> Call[list[dict[str, Any]]]:
    return Call("POST", f"/v1/users/{_seg(user_id, 'user_id')}/procedures/suggest", lambda d: list(d["items"]),
                _tenant(tenant), json=_q(now=now))


def suggest_derivation_rules(tenant: str | None, *, now: float | None = None) -> Call[list[dict[str, Any]]]:
    return Call("POST", "/v1/derivation-rules/suggest", lambda d: list(d["items"]), _tenant(tenant), json=_q(now=now))


# -- webhooks -------------------------------------------------------------------------------------------

def create_webhook(tenant: str | None, url: str, events: Iterable[str] | None = None, *, secret: str | None = None,
                   actor: str | None = None, now: float | None = None) -> Call[WebhookCreated]:
    return Call("POST", "/v1/webhooks", WebhookCreated.from_dict, _tenant(tenant),
                json=_q(url=url, events=None if events is None else _fields(events), secret=secret, actor=actor,
                        now=now))


def list_webhooks(tenant: str | None) -> Call[list[Webhook]]:
    return Call("GET", "/v1/webhooks", lambda d: [Webhook.from_dict(h) for h in d["items"]], _tenant(tenant))


def get_webhook(tenant: str | None, webhook_id: str) -> Call[Webhook]:
    return Call("GET", f"/v1/webhooks/{_seg(webhook_id, 'webhook_id')}", Webhook.from_dict, _tenant(tenant))


def delete_webhook(tenant: str | None, webhook_id: str, *, actor: str | None = None,
                   now: float | None = None) -> Call[bool]:
    return Call("DELETE", f"/v1/webhooks/{_seg(webhook_id, 'webhook_id')}", lambda d: bool(d["deleted"]),
                _tenant(tenant), params=_q(actor=actor, now=now))


def enable_webhook(tenant: str | None, webhook_id: str, *, actor: str | None = None,
                   now: float | None = None) -> Call[Webhook]:
    return Call("POST", f"/v1/webhooks/{_seg(webhook_id, 'webhook_id')}/enable", Webhook.from_dict,
                _tenant(tenant), json=_q(actor=actor, now=now))


def ping_webhook(tenant: str | None, webhook_id: str, *, now: float | None = None) -> Call[Delivery]:
    return Call("POST", f"/v1/webhooks/{_seg(webhook_id, 'webhook_id')}/ping", Delivery.from_dict,
                _tenant(tenant), json=_q(now=now))


def webhook_deliveries(tenant: str | None, webhook_id: str | None = None, *,
                       limit: int = 100) -> Call[list[Delivery]]:
    return Call("GET", "/v1/webhook-deliveries", lambda d: [Delivery.from_dict(x) for x in d["items"]],
                _tenant(tenant), params=_q(webhook_id=webhook_id, limit=limit))
