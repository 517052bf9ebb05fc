"""/v1 resources over the `Memory` facade. Handlers are sync: they run in the thread pool, one engine call each.

Tenant isolation: the tenant is the calling key's tenant, always. A user or memory of another tenant
is simply not found — the response is the same 404 as for one that never existed.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from usermem.engine.memory import Memory
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Principal, actor_of, bound_user, run_engine
from usermem.interfaces.api.keys import ApiKey
from usermem.interfaces.api.problems import ApiProblem, responses
from usermem.interfaces.wire import audit_to_json, record_to_json, result_to_json, scored_to_json
from usermem.model import WriteRequest
from usermem.store.base import LiveQuery

router = APIRouter(prefix="/v1")
COMMON = responses(401, 403, 413, 422, 429, 503)
WITH_404 = responses(401, 403, 404, 413, 422, 429, 503)


def _params(name: str) -> frozenset[str]:
    fn = getattr(Memory, name, None)
    return frozenset(inspect.signature(fn).parameters) if fn is not None else frozenset()


# Engine keyword arguments the running engine accepts (the API passes only those it knows).
_ACCEPTS = {name: _params(name) for name in ("recall_scored", "history", "get")}


def read_kw(name: str, p: ApiKey, actor: str | None = None, **optional: Any) -> dict[str, Any]:
    """Reads of L2/L3 fields are gated by grants, judged for the reader: the calling key (+ `actor`)."""
    accepted = _ACCEPTS[name]
    out = {k: v for k, v in optional.items() if v is not None and k in accepted}
    if "actor" in accepted:
        out["actor"] = actor_of(p, actor)
    return out


def user_exists(m: Memory, tenant: str, user_id: str) -> bool:
    """Any current version (expired or retracted included) of any key."""
    return bool(m.store.live(LiveQuery(tenant, user_id, now=0.0, include_retracted=True)))


def _item(w: S.WriteItem) -> WriteRequest:
    return WriteRequest(**w.model_dump())


@router.post("/memories", tags=["memories"], response_model=S.WriteResultOut, responses=COMMON,
             summary="Write one memory; the decision (ADD/UPDATE/NOOP/REJECT) is the 200 body")
async def write(body: S.WriteIn, p: Principal, request: Request) -> JSONResponse:
    m, metrics = request.app.state.memory, request.app.state.metrics
    user_id = bound_user(p, body.user_id)
    r = await run_engine(request, lambda: m.write(p.tenant, user_id, body.kind, body.key, body.value, source=body.source,
                importance=body.importance, confidence=body.confidence, now=body.now, session_id=body.session_id,
                client_id=body.client_id, event_at=body.event_at, ttl_seconds=body.ttl_seconds,
                change_set_id=body.change_set_id, actor=actor_of(p, body.actor)))
    metrics.decision(r.op.value, r.reason.value if r.reason else None)
    return JSONResponse(result_to_json(r))


@router.post("/memories/batch", tags=["memories"], response_model=S.BatchOut, responses=COMMON,
             summary="Write a batch in one transaction; accepted writes share one change set id")
async def write_batch(body: S.BatchIn, p: Principal, request: Request) -> JSONResponse:
    m, metrics = request.app.state.memory, request.app.state.metrics
    user_id = bound_user(p, body.user_id)
    results = await run_engine(request, lambda: m.write_many(
        p.tenant, user_id, [_item(w) for w in body.writes], now=body.now, change_set_id=body.change_set_id,
        actor=actor_of(p, body.actor)))
    for r in results:
        metrics.decision(r.op.value, r.reason.value if r.reason else None)
    cs = next((r.memory.change_set_id for r in results if r.memory is not None and r.op.value in ("ADD", "UPDATE")),
              body.change_set_id)
    return JSONResponse({"change_set_id": cs, "results": [result_to_json(r) for r in results]})


@router.get("/memories/{memory_id}", tags=["memories"], response_model=S.MemoryOut, responses=WITH_404,
            summary="One memory version by id")
async def get_memory(memory_id: str, p: Principal, request: Request, now: float | None = None,
                     actor: Annotated[str | None, Query(max_length=128)] = None) -> JSONResponse:
    m = request.app.state.memory
    r = await run_engine(request, lambda: m.get(p.tenant, memory_id, **read_kw("get", p, actor, now=now)))
    if r is None or (p.user_id is not None and r.user_id != p.user_id):
        raise ApiProblem(404, "memory_not_found", "no such memory")
    return JSONResponse(record_to_json(r))


@router.get("/users/{user_id}/memories", tags=["recall"], response_model=S.RecallOut, responses=WITH_404,
            summary="Recall a user's current memories, best first, with scores")
async def recall(
    user_id: str, p: Principal, request: Request,
    k: Annotated[int, Query(ge=1, le=1000)] = 5,
    kinds: Annotated[list[str] | None, Query(description="Repeat to allow several kinds")] = None,
    query: Annotated[str | None, Query(max_length=4000)] = None,
    keys: Annotated[list[str] | None, Query(description="Only these keys")] = None,
    mark_used: bool = False,
    now: Annotated[float | None, Query(description="Judge expiry and decay at this time (Unix seconds)")] = None,
    event_from: Annotated[float | None, Query(description="Episodes: event time from (Unix seconds)")] = None,
    event_until: Annotated[float | None, Query(description="Episodes: event time until (exclusive)")] = None,
    domain: Annotated[str | None, Query(max_length=128, description="The reader's domain (sharing rules)")] = None,
    actor: Annotated[str | None, Query(max_length=128, description="Recorded after the key id")] = None,
) -> JSONResponse:
    user_id = bound_user(p, user_id)
    m = request.app.state.memory
    items = await run_engine(request, lambda: m.recall_scored(
        p.tenant, user_id, k, now=now, kinds=kinds, query=query, keys=keys, mark_used=mark_used,
        **read_kw("recall_scored", p, actor, event_from=event_from, event_until=event_until, domain=domain)))
    if not items and not await run_engine(request, lambda: user_exists(m, p.tenant, user_id)):
        raise ApiProblem(404, "user_not_found", "no such user")
    return JSONResponse({"user_id": user_id, "items": [scored_to_json(s) for s in items]})


@router.get("/users/{user_id}/memories/{key}/history", tags=["recall"], response_model=S.HistoryOut,
            responses=WITH_404, summary="Every version of a key, oldest first")
async def history(user_id: str, key: str, p: Principal, request: Request, now: float | None = None,
                  actor: Annotated[str | None, Query(max_length=128)] = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    m = request.app.state.memory
    versions = await run_engine(request, lambda: m.history(p.tenant, user_id, key,
                                                           **read_kw("history", p, actor, now=now)))
    if not versions:
        raise ApiProblem(404, "key_not_found", "no such key for this user")
    return JSONResponse({"user_id": user_id, "key": key, "items": [record_to_json(r) for r in versions]})


@router.delete("/users/{user_id}/memories/{key}", tags=["forget"], response_model=S.CountOut, responses=WITH_404,
               summary="Forget every version of one key (soft delete; purge removes the bytes)")
def forget_key(user_id: str, key: str, p: Principal, m: Mem,
               now: float | None = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    n = m.forget(p.tenant, user_id, key, now=now, actor=actor_of(p, None))
    if n == 0:
        raise ApiProblem(404, "key_not_found", "no such key for this user")
    return S.CountOut(deleted=n)


@router.delete("/users/{user_id}/memories", tags=["forget"], response_model=S.CountOut, responses=WITH_404,
               summary="Forget what was written in [since, until)")
def forget_range(user_id: str, p: Principal, m: Mem, since: float | None = None, until: float | None = None,
                 now: float | None = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    if since is None and until is None:
        raise ApiProblem(422, "validation_error", "give since and/or until (use DELETE /v1/users/{id} to erase all)",
                         field="since")
    n = m.forget_range(p.tenant, user_id, since=since, until=until, now=now, actor=actor_of(p, None))
    if n == 0 and not user_exists(m, p.tenant, user_id):
        raise ApiProblem(404, "user_not_found", "no such user")
    return S.CountOut(deleted=n)


@router.delete("/users/{user_id}", tags=["forget"], response_model=S.CountOut, responses=WITH_404,
               summary="Erase a user: every memory, session, grant and document (one transaction)")
def forget_user(user_id: str, p: Principal, m: Mem, now: float | None = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    n = m.forget_user(p.tenant, user_id, now=now, actor=actor_of(p, None))
    if n == 0:
        raise ApiProblem(404, "user_not_found", "no such user")
    return S.CountOut(deleted=n)


@router.get("/audit", tags=["admin"], response_model=S.AuditOut, responses=responses(401, 403, 422, 429, 503),
            summary="The tenant's audit log (admin key). Entries never carry memory values")
def audit(
    p: Admin, m: Mem, user_id: str | None = None, action: str | None = None, since: float | None = None,
    until: float | None = None, limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    after_seq: int | None = None,
) -> JSONResponse:
    events = m.audit(p.tenant, user_id=user_id, action=action, since=since, until=until, limit=limit,
                     after_seq=after_seq)
    return JSONResponse({"items": [audit_to_json(e) for e in events]})


@router.get("/whoami", tags=["meta"], response_model=S.WhoAmI, responses=responses(401, 429),
            summary="The tenant and rights of the calling key")
def whoami(p: Principal) -> S.WhoAmI:
    return S.WhoAmI(tenant=p.tenant, key_id=p.id, admin=p.admin, user_id=p.user_id)
