"""`usermem.Client(url, api_key)`: the remote twin of `Memory`.

Same methods, same arguments, same result types (`WriteResult`, `MemoryRecord`, `ScoredMemory`,
`AuditEvent`) — switch between embedded and remote by changing one constructor:

    m = usermem.Memory("sqlite:///data/usermem.db")         # embedded
    m = usermem.Client("http://127.0.0.1:8000", "umk_...")  # remote

The `tenant` argument every method takes must be the API key's tenant (the server checks it and
answers 403 `tenant_mismatch` otherwise); the key, not the argument, decides what is reachable.
Errors come back as the same `usermem.errors` classes the embedded engine raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

import httpx

from usermem import errors as E
from usermem.engine.write import check_ids
from usermem.interfaces.wire import audit_from_json, record_from_json, result_from_json, scored_from_json
from usermem.model import AuditEvent, Kind, MemoryRecord, ScoredMemory, WriteRequest, WriteResult

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


def _kinds(kinds: Iterable[str | Kind] | None) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        return [kinds]
    return [k.value if isinstance(k, Kind) else str(k) for k in kinds]


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """HTTP client with the shape of `Memory`. Thread-safe (one pooled `httpx.Client`)."""

    def __init__(self, url: str, api_key: str, *, timeout: float = 30.0, http: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}", "User-Agent": "usermem-client"}
        if http is None:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        else:
            self._http = http
            self._http.headers.update(headers)
        self._owns_http = http is None

    # -- plumbing ------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, tenant: str | None, *, params: Any = None,
                 json: Any = None) -> Any:
        if tenant is not None:
            check_ids(tenant, "-")
        headers = {"X-Usermem-Tenant": tenant} if tenant is not None else None
        try:
            resp = self._http.request(method, path, params=params, json=json, headers=headers)
        except httpx.TimeoutException as exc:
            raise E.StoreError(f"usermem server at {self.url} timed out: {exc}") from exc
        except httpx.TransportError as exc:
            raise E.StoreError(f"cannot reach usermem server at {self.url}: {exc}") from exc
        if resp.status_code < 400:
            return resp.json()
        raise self._error(resp)

    def _error(self, resp: httpx.Response) -> E.UsermemError:
        try:
            body = resp.json()
        except ValueError:
            body = {}
        code = body.get("code") if isinstance(body, dict) else None
        detail = (body.get("detail") if isinstance(body, dict) else None) or resp.reason_phrase
        status = resp.status_code
        if status == 429:
            retry = resp.headers.get("Retry-After")
            return RateLimited(f"rate limited: {detail}", retry_after=float(retry) if retry else None)
        if status in (401, 403):
            return E.PermissionDenied(f"{code or status}: {detail}")
        data_absent = code == "not_found" or ((code or "").endswith("_not_found") and code != "route_not_found")
        if status == 404 and not data_absent:
            # Not a usermem answer about data: a wrong base URL, a proxy, or a server without this endpoint.
            return RemoteError(f"HTTP 404 from {resp.request.url}: no such endpoint (is {self.url} a usermem "
                               f"server of this version?)", status=404, problem_code=code)
        cls = _ERRORS_BY_CODE.get(code or "") or _ERRORS_BY_STATUS.get(status)
        if cls is E.ValidationError:
            return E.ValidationError(str(detail), field=body.get("field") if isinstance(body, dict) else None)
        if cls is E.ConfigError:
            return E.ConfigError(str(detail))
        if cls is not None:
            return cls(str(detail))
        return RemoteError(f"HTTP {status} {code or ''}: {detail}".strip(), status=status, problem_code=code)

    def _absent_ok(self, method: str, path: str, tenant: str, *, params: Any = None, default: Any) -> Any:
        """Calls where the embedded engine answers empty for an absent user/key: map 404 back to empty."""
        try:
            return self._request(method, path, tenant, params=params)
        except E.NotFound:
            return default

    def whoami(self) -> dict[str, Any]:
        """The tenant, key id and rights of this client's key."""
        return dict(self._request("GET", "/v1/whoami", None))

    # -- writes --------------------------------------------------------------------------------------

    def write(self, tenant: str, user_id: str, kind: str, key: str, value: Any, *, source: str = "extracted",
              importance: float | None = None, confidence: float | None = None, now: float | None = None,
              session_id: str | None = None, client_id: str | None = None, event_at: float | None = None,
              ttl_seconds: float | None = None, change_set_id: str | None = None,
              actor: str | None = None) -> WriteResult:
        body = _drop_none({"user_id": user_id, "kind": kind, "key": key, "source": source, "importance": importance,
                           "confidence": confidence, "now": now, "session_id": session_id, "client_id": client_id,
                           "event_at": event_at, "ttl_seconds": ttl_seconds, "change_set_id": change_set_id,
                           "actor": actor})
        body["value"] = value
        return result_from_json(self._request("POST", "/v1/memories", tenant, json=body))

    def write_many(self, tenant: str, user_id: str, writes: Sequence[WriteRequest | dict[str, Any]], *,
                   now: float | None = None, change_set_id: str | None = None,
                   actor: str | None = None) -> list[WriteResult]:
        items = []
        for w in writes:
            d = asdict(w) if isinstance(w, WriteRequest) else w
            if not isinstance(d, dict):
                raise E.InvalidArgument(f"each write must be a WriteRequest or dict, got {type(w).__name__}")
            items.append({k: v for k, v in d.items() if v is not None or k == "value"})
        body = _drop_none({"user_id": user_id, "writes": items, "now": now, "change_set_id": change_set_id,
                           "actor": actor})
        if not items:
            return []
        data = self._request("POST", "/v1/memories/batch", tenant, json=body)
        return [result_from_json(r) for r in data["results"]]

    # -- reads ---------------------------------------------------------------------------------------

    def recall(self, tenant: str, user_id: str, k: int = 5, *, now: float | None = None,
               kinds: Iterable[str | Kind] | None = None, query: str | None = None,
               keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
               event_until: float | None = None, actor: str | None = None,
               domain: str | None = None) -> list[MemoryRecord]:
        return [s.memory for s in self.recall_scored(tenant, user_id, k, now=now, kinds=kinds, query=query,
                                                     keys=keys, mark_used=mark_used, event_from=event_from,
                                                     event_until=event_until, actor=actor, domain=domain)]

    def recall_scored(self, tenant: str, user_id: str, k: int = 5, *, now: float | None = None,
                      kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                      keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
                      event_until: float | None = None, actor: str | None = None,
                      domain: str | None = None) -> list[ScoredMemory]:
        if isinstance(k, bool) or not isinstance(k, int):
            raise E.InvalidArgument(f"k must be an int, got {type(k).__name__}")
        if k < 1:
            raise E.ValidationError("k must be at least 1", field="k")
        params = _drop_none({"k": k, "now": now, "kinds": _kinds(kinds), "query": query,
                             "keys": list(keys) if keys is not None else None,
                             "mark_used": "true" if mark_used else None, "event_from": event_from,
                             "event_until": event_until, "actor": actor, "domain": domain})
        data = self._absent_ok("GET", f"/v1/users/{_seg(user_id)}/memories", tenant, params=params,
                               default={"items": []})
        return [scored_from_json(s) for s in data["items"]]

    def get(self, tenant: str, memory_id: str, *, actor: str | None = None,
            now: float | None = None) -> MemoryRecord | None:
        data = self._absent_ok("GET", f"/v1/memories/{_seg(memory_id)}", tenant,
                               params=_drop_none({"actor": actor, "now": now}), default=None)
        return None if data is None else record_from_json(data)

    def history(self, tenant: str, user_id: str, key: str, *, actor: str | None = None,
                now: float | None = None) -> list[MemoryRecord]:
        data = self._absent_ok("GET", f"/v1/users/{_seg(user_id)}/memories/{_seg(key)}/history", tenant,
                               params=_drop_none({"actor": actor, "now": now}), default={"items": []})
        return [record_from_json(r) for r in data["items"]]

    def audit(self, tenant: str, *, user_id: str | None = None, action: str | None = None,
              since: float | None = None, until: float | None = None, limit: int = 100,
              after_seq: int | None = None) -> list[AuditEvent]:
        """Needs an admin key."""
        params = _drop_none({"user_id": user_id, "action": action, "since": since, "until": until, "limit": limit,
                             "after_seq": after_seq})
        data = self._request("GET", "/v1/audit", tenant, params=params)
        return [audit_from_json(e) for e in data["items"]]

    # -- forgetting ----------------------------------------------------------------------------------

    def forget(self, tenant: str, user_id: str, key: str, *, now: float | None = None,
               actor: str | None = None) -> int:
        data = self._absent_ok("DELETE", f"/v1/users/{_seg(user_id)}/memories/{_seg(key)}", tenant,
                               params=_drop_none({"now": now}), default={"deleted": 0})
        return int(data["deleted"])

    def forget_user(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None) -> int:
        data = self._absent_ok("DELETE", f"/v1/users/{_seg(user_id)}", tenant, params=_drop_none({"now": now}),
                               default={"deleted": 0})
        return int(data["deleted"])

    def forget_range(self, tenant: str, user_id: str, *, since: float | None = None, until: float | None = None,
                     now: float | None = None, actor: str | None = None) -> int:
        if since is None and until is None:  # like Memory.forget_range: no range means everything
            return self.forget_user(tenant, user_id, now=now, actor=actor)
        data = self._absent_ok("DELETE", f"/v1/users/{_seg(user_id)}/memories", tenant,
                               params=_drop_none({"since": since, "until": until, "now": now}),
                               default={"deleted": 0})
        return int(data["deleted"])

    def purge(self, now: float | None = None, *, retention_days: float | None = None) -> int:
        """Purge is global across tenants, so it is an operator command (`usermem purge`), not an API call."""
        raise E.PermissionDenied("purge spans every tenant; run `usermem purge` on the server instead")


    # -- lifecycle -------------------------------------------------------------------------------------

    def confirm(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
                actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        body = _drop_none({"now": now, "source": source})
        data = self._request("POST", f"/v1/users/{_seg(user_id)}/memories/{_seg(memory_id)}/confirm", tenant,
                             json=body)
        return record_from_json(data)

    def deny(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        body = _drop_none({"now": now, "source": source})
        data = self._request("POST", f"/v1/users/{_seg(user_id)}/memories/{_seg(memory_id)}/deny", tenant, json=body)
        return record_from_json(data)

    def revert(self, tenant: str, user_id: str, key: str, to_version: str | int | None = None, *,
               now: float | None = None, actor: str | None = None, source: str = "user_confirmed") -> WriteResult:
        body = _drop_none({"to_version": to_version, "now": now, "source": source})
        return result_from_json(self._request("POST", f"/v1/users/{_seg(user_id)}/memories/{_seg(key)}/revert",
                                              tenant, json=body))

    def revert_change_set(self, tenant: str, change_set_id: str, *, now: float | None = None,
                          actor: str | None = None, source: str = "user_confirmed", partial: bool = False) -> Any:
        from usermem.engine.lifecycle import ChangeSetRevert

        body = _drop_none({"now": now, "source": source, "partial": partial})
        d = self._request("POST", f"/v1/change-sets/{_seg(change_set_id)}/revert", tenant, json=body)
        return ChangeSetRevert(reverted_change_set_id=d["reverted_change_set_id"], change_set_id=d["change_set_id"],
                               results=tuple(result_from_json(r) for r in d["results"]),
                               conflicts=tuple((c["user_id"], c["key"], c["reason"]) for c in d["conflicts"]))

    # -- sessions --------------------------------------------------------------------------------------

    def open_session(self, tenant: str, user_id: str, client_id: str | None = None, *, now: float | None = None,
                     idle_seconds: float | None = None) -> str:
        body = _drop_none({"client_id": client_id, "now": now, "idle_seconds": idle_seconds})
        return str(self._request("POST", f"/v1/users/{_seg(user_id)}/sessions", tenant, json=body)["id"])

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Any:
        from usermem.engine.sessions import Session

        return Session.from_dict(self._request("GET", f"/v1/sessions/{_seg(session_id)}", tenant))

    def sessions(self, tenant: str, user_id: str, *, status: str | None = None, now: float | None = None) -> list[Any]:
        from usermem.engine.sessions import Session

        data = self._request("GET", f"/v1/users/{_seg(user_id)}/sessions", tenant,
                             params=_drop_none({"status": status, "now": now}))
        return [Session.from_dict(d) for d in data["items"]]

    def add_messages(self, session_id: str, messages: Sequence[dict[str, str]], *, tenant: str | None = None,
                     extract: bool = False, now: float | None = None) -> list[WriteResult]:
        """Remote-only: append messages to the session's transcript (and extract memories when `extract`)."""
        body = _drop_none({"messages": list(messages), "extract": extract, "now": now})
        data = self._request("POST", f"/v1/sessions/{_seg(session_id)}/messages", tenant, json=body)
        return [result_from_json(r) for r in data["results"]]

    def close_session(self, session_id: str, transcript: Any = None, *, tenant: str | None = None,
                      now: float | None = None, actor: str | None = None) -> Any:
        from usermem.engine.sessions import Session, SessionClosed

        body = _drop_none({"transcript": transcript, "now": now})
        d = self._request("POST", f"/v1/sessions/{_seg(session_id)}/close", tenant, json=body)
        return SessionClosed(session=Session.from_dict(d["session"]), reason=d["reason"],
                             context=tuple(record_from_json(r) for r in d["context"]),
                             episode=record_from_json(d["episode"]) if d.get("episode") else None,
                             transcript=transcript, already_closed=bool(d["already_closed"]))

    def session_context(self, session_id: str, *, tenant: str | None = None, k: int = 20,
                        now: float | None = None, mark_used: bool = True) -> list[ScoredMemory]:
        data = self._request("GET", f"/v1/sessions/{_seg(session_id)}/context", tenant,
                             params=_drop_none({"k": k, "now": now}))
        return [scored_from_json(x) for x in data["items"]]

    # -- conversations -------------------------------------------------------------------------------

    def plan(self, tenant: str, user_id: str, message: str) -> dict[str, Any]:
        return dict(self._request("POST", f"/v1/users/{_seg(user_id)}/plan", tenant, json={"message": message}))

    def assemble(self, tenant: str, user_id: str, message: str, budget_tokens: int = 800, *,
                 now: float | None = None, session_id: str | None = None, actor: str | None = None) -> RemoteAssembly:
        body = _drop_none({"message": message, "budget_tokens": budget_tokens, "now": now, "session_id": session_id})
        return RemoteAssembly(self._request("POST", f"/v1/users/{_seg(user_id)}/assemble", tenant, json=body))

    def ingest(self, tenant: str, user_id: str, messages: Any, *, now: float | None = None,
               session_id: str | None = None, change_set_id: str | None = None,
               actor: str | None = None) -> list[WriteResult]:
        msgs = [{"role": "user", "content": m} if isinstance(m, str) else dict(m) for m in messages]
        body = _drop_none({"messages": msgs, "now": now, "session_id": session_id, "change_set_id": change_set_id})
        data = self._request("POST", f"/v1/users/{_seg(user_id)}/ingest", tenant, json=body)
        return [result_from_json(r) for r in data["results"]]

    def onboarding_questions(self, tenant: str, user_id: str, language: str | None = None, *,
                             now: float | None = None) -> list[dict[str, Any]]:
        data = self._request("GET", f"/v1/users/{_seg(user_id)}/onboarding", tenant,
                             params=_drop_none({"language": language}))
        return list(data["items"])

    def set_onboarding_questions(self, tenant: str, questions: Sequence[Any], *,
                                 now: float | None = None) -> list[dict[str, Any]]:
        """Needs an admin key."""
        qs = [q.to_dict() if hasattr(q, "to_dict") else dict(q) for q in questions]
        return list(self._request("PUT", "/v1/onboarding", tenant, json={"questions": qs})["items"])

    def answer_onboarding(self, tenant: str, user_id: str, answers: dict[str, Any], *, now: float | None = None,
                          actor: str | None = None) -> list[WriteResult]:
        data = self._request("POST", f"/v1/users/{_seg(user_id)}/onboarding", tenant,
                             json=_drop_none({"answers": answers, "now": now}))
        return [result_from_json(r) for r in data["results"]]

    def record_pushback(self, tenant: str, user_id: str, key: str, message: str = "", *, value: Any = None,
                        now: float | None = None) -> dict[str, Any]:
        body = _drop_none({"key": key, "message": message, "value": value, "now": now})
        return dict(self._request("POST", f"/v1/users/{_seg(user_id)}/pushback", tenant, json=body))

    def pending_verifications(self, tenant: str, user_id: str) -> list[dict[str, Any]]:
        return list(self._request("GET", f"/v1/users/{_seg(user_id)}/verifications", tenant)["items"])

    def accept_verification(self, tenant: str, user_id: str, verification_id: str, *, value: Any = None,
                            now: float | None = None, actor: str | None = None) -> WriteResult:
        body = _drop_none({"value": value, "now": now})
        return result_from_json(self._request(
            "POST", f"/v1/users/{_seg(user_id)}/verifications/{_seg(verification_id)}/accept", tenant, json=body))

    def reject_verification(self, tenant: str, user_id: str, verification_id: str, *,
                            now: float | None = None) -> bool:
        data = self._request("POST", f"/v1/users/{_seg(user_id)}/verifications/{_seg(verification_id)}/reject",
                             tenant, json=_drop_none({"now": now}))
        return bool(data["rejected"])

    def episodes(self, tenant: str, user_id: str, *, since: float | None = None, until: float | None = None,
                 limit: int = 10, now: float | None = None) -> list[MemoryRecord]:
        data = self._absent_ok("GET", f"/v1/users/{_seg(user_id)}/episodes", tenant,
                               params=_drop_none({"since": since, "until": until, "limit": limit, "now": now}),
                               default={"items": []})
        return [record_from_json(r) for r in data["items"]]

    def opt_in(self, tenant: str, user_id: str, fields: Any, domain: str, *, actor: str | None = None,
               now: float | None = None) -> list[str]:
        body = _drop_none({"fields": [fields] if isinstance(fields, str) else list(fields), "domain": domain,
                           "now": now})
        return list(self._request("POST", f"/v1/users/{_seg(user_id)}/consents", tenant, json=body)["fields"])

    def opt_out(self, tenant: str, user_id: str, fields: Any, domain: str, *, actor: str | None = None,
                now: float | None = None) -> int:
        body = _drop_none({"fields": [fields] if isinstance(fields, str) else list(fields), "domain": domain,
                           "now": now})
        return int(self._request("POST", f"/v1/users/{_seg(user_id)}/consents/withdraw", tenant, json=body)["removed"])

    def contract_history(self, tenant: str, key: str) -> list[dict[str, Any]]:
        return list(self._request("GET", f"/v1/contracts/{_seg(key)}/history", tenant)["items"])

    def delete_contract(self, tenant: str, key: str, *, actor: str | None = None, now: float | None = None) -> None:
        self._request("DELETE", f"/v1/contracts/{_seg(key)}", tenant)

    def set_unknown_fields(self, tenant: str, policy: str, *, actor: str | None = None,
                           now: float | None = None) -> str:
        return str(self._request("PUT", "/v1/settings/unknown-fields", tenant, json={"policy": policy})["policy"])

    # -- privacy -------------------------------------------------------------------------------------

    def export(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None) -> dict[str, Any]:
        from usermem.engine.export import FORMAT

        try:
            return dict(self._request("GET", f"/v1/users/{_seg(user_id)}/export", tenant,
                                      params=_drop_none({"now": now})))
        except E.NotFound:  # the engine exports an empty document for an unknown user
            return {"format": FORMAT, "tenant": tenant, "user_id": user_id, "exported_at": now, "fields": {},
                    "documents": {}, "counts": {"fields": 0, "versions": 0}}

    def grant(self, tenant: str, user_id: str, fields_or_level: Any, purpose: str, ttl: float = 30 * 60.0, *,
              actor: str | None = None, grantee: str | None = None, now: float | None = None) -> str:
        """Needs an admin key."""
        if isinstance(fields_or_level, str) and fields_or_level.upper() in ("L1", "L2", "L3"):
            target: dict[str, Any] = {"level": fields_or_level.upper()}
        elif hasattr(fields_or_level, "value"):
            target = {"level": fields_or_level.value}
        else:
            target = {"fields": [fields_or_level] if isinstance(fields_or_level, str) else list(fields_or_level)}
        body = _drop_none({**target, "purpose": purpose, "ttl_seconds": ttl, "grantee": grantee, "now": now})
        return str(self._request("POST", f"/v1/users/{_seg(user_id)}/grants", tenant, json=body)["id"])

    def revoke(self, tenant_or_grant_id: str, grant_id: str | None = None, *, actor: str | None = None,
               now: float | None = None) -> bool:
        """Needs an admin key. revoke(tenant, grant_id) or revoke(grant_id)."""
        tenant, gid = (None, tenant_or_grant_id) if grant_id is None else (tenant_or_grant_id, grant_id)
        try:
            return bool(self._request("DELETE", f"/v1/grants/{_seg(gid)}", tenant)["revoked"])
        except E.NotFound:
            return False

    def grants(self, tenant: str, user_id: str | None = None, *, now: float | None = None,
               include_expired: bool = False) -> list[Any]:
        """Needs an admin key; the HTTP API lists one user's grants at a time."""
        from usermem.engine.grants import Grant

        if user_id is None:
            raise E.ValidationError("the HTTP API lists grants per user: pass user_id", field="user_id")
        data = self._request("GET", f"/v1/users/{_seg(user_id)}/grants", tenant,
                             params=_drop_none({"now": now, "include_expired": "true" if include_expired else None}))
        return [Grant.from_dict(g) for g in data["items"]]

    def contracts_list(self, tenant: str) -> list[Any]:
        """Needs an admin key."""
        from usermem.policy.contracts import FieldContract

        return [FieldContract.from_dict(c) for c in self._request("GET", "/v1/contracts", tenant)["items"]]

    def contract(self, tenant: str, key: str) -> Any:
        from usermem.policy.contracts import FieldContract

        return FieldContract.from_dict(self._request("GET", f"/v1/contracts/{_seg(key)}", tenant))

    def set_contract(self, tenant: str, contract: Any, *, actor: str | None = None, now: float | None = None) -> Any:
        from usermem.policy.contracts import FieldContract

        d = contract.to_dict() if hasattr(contract, "to_dict") else dict(contract)
        return FieldContract.from_dict(self._request("PUT", f"/v1/contracts/{_seg(d['key'])}", tenant, json=d))

    def enable_field(self, tenant: str, key: str, *, actor: str | None = None, now: float | None = None) -> Any:
        from usermem.policy.contracts import FieldContract

        return FieldContract.from_dict(self._request("POST", f"/v1/contracts/{_seg(key)}/enable", tenant))

    def disable_field(self, tenant: str, key: str, *, actor: str | None = None, now: float | None = None) -> Any:
        from usermem.policy.contracts import FieldContract

        return FieldContract.from_dict(self._request("POST", f"/v1/contracts/{_seg(key)}/disable", tenant))

    def redact(self, text: str, placeholder: str | None = None) -> str:
        """Remote-only convenience: PII redaction by the server (same as usermem.privacy.redact)."""
        return str(self._request("POST", "/v1/redact", None, json=_drop_none({"text": text,
                                                                               "placeholder": placeholder}))["text"])


class RemoteAssembly:
    """`Client.assemble`'s result: the same attributes as the engine's Assembly (`prompt`, `tokens`, `plan`,
    `facts`, `preferences`, `context`, `dropped`, `withheld`, `to_dict()`), with selections as plain dicts."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.plan: dict[str, Any] = data.get("plan", {})
        self.plan_mode: str | None = data.get("plan_mode")
        self.facts: list[dict[str, Any]] = data.get("facts", [])
        self.preferences: list[dict[str, Any]] = data.get("preferences", [])
        self.context: list[dict[str, Any]] = data.get("context", [])
        self.prompt: str = data.get("prompt", "")
        self.tokens: int = int(data.get("tokens", 0))
        self.budget_tokens: int = int(data.get("budget_tokens", 0))
        self.dropped: tuple[str, ...] = tuple(data.get("dropped", ()))
        self.withheld: tuple[str, ...] = tuple(data.get("withheld", ()))

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)


def _seg(part: str) -> str:
    if not isinstance(part, str):
        raise E.InvalidArgument(f"expected a str, got {type(part).__name__}")
    if not part.strip():
        raise E.ValidationError("must not be empty", field="user_id")
    return quote(part, safe="")
