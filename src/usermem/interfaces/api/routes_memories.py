"""/v1 memories: write, read, recall and forget (the hot paths: write and recall run one engine call each,
and answer with pre-encoded JSON instead of re-validating the response model)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Mem, Principal, actor_of, bound_user, run_engine
from usermem.interfaces.api.fastroute import FastParamsRoute
from usermem.interfaces.api.problems import ApiProblem
from usermem.interfaces.api.routing import count_decisions, operation, user_exists
from usermem.interfaces.catalog import describe
from usermem.interfaces.wire import record_to_json, result_to_json, scored_to_json
from usermem.model import WriteRequest

# Plain GET requests (recall, get, history) skip FastAPI's per-request parameter resolution (fastroute.py).
router = APIRouter(route_class=FastParamsRoute)
ActorQ = Annotated[str | None, Query(max_length=128, description=describe("actor"))]
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


def _item(w: S.WriteItem) -> WriteRequest:
    return WriteRequest(**w.model_dump())


@operation(router, "write", S.WriteResultOut, codes=(401, 403, 413, 422, 429, 503),
           summary="Write one memory; the decision (ADD/UPDATE/NOOP/REJECT) is the 200 body")
async def write(body: S.WriteIn, p: Principal, request: Request) -> JSONResponse:
    m, metrics = request.app.state.memory, request.app.state.metrics
    user_id = bound_user(p, body.user_id)
    r = await run_engine(request, lambda: m.write(
        p.tenant, user_id, body.kind, body.key, body.value, source=body.source, importance=body.importance,
        confidence=body.confidence, now=body.now, session_id=body.session_id, client_id=body.client_id,
        event_at=body.event_at, ttl_seconds=body.ttl_seconds, change_set_id=body.change_set_id,
        actor=actor_of(p, body.actor), canonical=body.canonical))
    metrics.decision(r.op.value, r.reason.value if r.reason else None)
    return JSONResponse(result_to_json(r))


@operation(router, "write_many", S.BatchOut, codes=(401, 403, 413, 422, 429, 503),
           summary="Write a batch in one transaction; accepted writes share one change set id")
async def write_batch(body: S.BatchIn, p: Principal, request: Request) -> JSONResponse:
    m, metrics = request.app.state.memory, request.app.state.metrics
    user_id = bound_user(p, body.user_id)
    results = await run_engine(request, lambda: m.write_many(
        p.tenant, user_id, [_item(w) for w in body.writes], now=body.now, change_set_id=body.change_set_id,
        actor=actor_of(p, body.actor)))
    count_decisions(metrics, results)
    cs = next((r.memory.change_set_id for r in results if r.memory is not None and r.op.value in ("ADD", "UPDATE")),
              body.change_set_id)
    return JSONResponse({"change_set_id": cs, "results": [result_to_json(r) for r in results]})


@operation(router, "get", S.MemoryOut, summary="One memory version by id")
async def get_memory(memory_id: str, p: Principal, request: Request, now: NowQ = None,
                     actor: ActorQ = None) -> JSONResponse:
    m = request.app.state.memory
    r = await run_engine(request, lambda: m.get(p.tenant, memory_id, actor=actor_of(p, actor), now=now))
    if r is None or (p.user_id is not None and r.user_id != p.user_id):
        raise ApiProblem(404, "memory_not_found", "no such memory")
    return JSONResponse(record_to_json(r))


@operation(router, "recall_scored", S.RecallOut,
           summary="Recall a user's current memories, best first, with scores")
async def recall(
    user_id: S.UserPath, p: Principal, request: Request,
    k: Annotated[int, Query(ge=1, le=1000, description=describe("k"))] = 5,
    kinds: Annotated[list[str] | None, Query(description=describe("kinds") + " Repeat for several.")] = None,
    query: Annotated[str | None, Query(max_length=4000, description=describe("query"))] = None,
    keys: Annotated[list[str] | None, Query(description=describe("keys"))] = None,
    mark_used: Annotated[bool, Query(description=describe("mark_used"))] = False,
    now: NowQ = None,
    event_from: Annotated[float | None, Query(description=describe("event_from"))] = None,
    event_until: Annotated[float | None, Query(description=describe("event_until"))] = None,
    domain: Annotated[str | None, Query(max_length=128, description=describe("domain"))] = None,
    actor: ActorQ = None,
    purpose: Annotated[str | None, Query(max_length=500, description=describe("purpose"))] = None,
) -> JSONResponse:
    user_id = bound_user(p, user_id)
    m = request.app.state.memory
    items = await run_engine(request, lambda: m.recall_scored(
        p.tenant, user_id, k, now=now, kinds=kinds, query=query, keys=keys, mark_used=mark_used,
        event_from=event_from, event_until=event_until, actor=actor_of(p, actor), domain=domain, purpose=purpose))
    if not items and not items.withheld and not await run_engine(request, lambda: user_exists(m, p.tenant, user_id)):
        raise ApiProblem(404, "user_not_found", "no such user")
    return JSONResponse({"user_id": user_id, "items": [scored_to_json(s) for s in items],
                         "withheld": [w.to_dict() for w in items.withheld]})


@operation(router, "history", S.HistoryOut, summary="Every version of a key, oldest first")
async def history(user_id: S.UserPath, key: str, p: Principal, request: Request, now: NowQ = None,
                  actor: ActorQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    m = request.app.state.memory
    versions = await run_engine(request, lambda: m.history(p.tenant, user_id, key, actor=actor_of(p, actor),
                                                           now=now))
    if not versions:
        raise ApiProblem(404, "key_not_found", "no such key for this user")
    return JSONResponse({"user_id": user_id, "key": key, "items": [record_to_json(r) for r in versions]})


@operation(router, "forget", S.CountOut,
           summary="Forget every version of one key (soft delete; purge removes the bytes)")
def forget_key(user_id: S.UserPath, key: str, p: Principal, m: Mem, now: NowQ = None, actor: ActorQ = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    n = m.forget(p.tenant, user_id, key, now=now, actor=actor_of(p, actor))
    if n == 0:
        raise ApiProblem(404, "key_not_found", "no such key for this user")
    return S.CountOut(deleted=n)


@operation(router, "forget_range", S.CountOut, summary="Forget what was written in [since, until)")
def forget_range(user_id: S.UserPath, p: Principal, m: Mem,
                 since: Annotated[float | None, Query(description=describe("since"))] = None,
                 until: Annotated[float | None, Query(description=describe("until"))] = None,
                 now: NowQ = None, actor: ActorQ = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    if since is None and until is None:
        raise ApiProblem(422, "validation_error", "give since and/or until (use DELETE /v1/users/{id} to erase all)",
                         field="since")
    n = m.forget_range(p.tenant, user_id, since=since, until=until, now=now, actor=actor_of(p, actor))
    if n == 0 and not user_exists(m, p.tenant, user_id):
        raise ApiProblem(404, "user_not_found", "no such user")
    return S.CountOut(deleted=n)


@operation(router, "forget_user", S.CountOut,
           summary="Erase a user: every memory, session, grant and document (one transaction)")
def forget_user(user_id: S.UserPath, p: Principal, m: Mem, now: NowQ = None, actor: ActorQ = None) -> S.CountOut:
    user_id = bound_user(p, user_id)
    n = m.forget_user(p.tenant, user_id, now=now, actor=actor_of(p, actor))
    if n == 0:
        raise ApiProblem(404, "user_not_found", "no such user")
    return S.CountOut(deleted=n)
