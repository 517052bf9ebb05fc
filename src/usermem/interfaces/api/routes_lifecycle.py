"""/v1 lifecycle: confirm, deny, revert a key, revert a change set."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Mem, Met, Principal, actor_of, bound_user
from usermem.interfaces.api.routing import count_decisions, not_user_bound, operation
from usermem.interfaces.wire import record_to_json, result_to_json

router = APIRouter()


@operation(router, "confirm", S.MemoryOut,
           summary="The user (or agent) confirmed a memory: its weight is back to base")
def confirm(user_id: S.UserPath, memory_id: str, body: S.ConfirmIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    rec = m.confirm(p.tenant, user_id, memory_id, now=body.now, actor=actor_of(p, body.actor), source=body.source)
    return JSONResponse(record_to_json(rec))


@operation(router, "deny", S.MemoryOut, summary="The user said a memory is wrong: a retraction supersedes it")
def deny(user_id: S.UserPath, memory_id: str, body: S.ConfirmIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    rec = m.deny(p.tenant, user_id, memory_id, now=body.now, actor=actor_of(p, body.actor), source=body.source)
    return JSONResponse(record_to_json(rec))


@operation(router, "revert", S.WriteResultOut,
           summary="Restore the previous (or a given) version of a key as a new version")
def revert(user_id: S.UserPath, key: str, body: S.RevertIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
    user_id = bound_user(p, user_id)
    res = m.revert(p.tenant, user_id, key, body.to_version, now=body.now, actor=actor_of(p, body.actor),
                   source=body.source)
    count_decisions(metrics, [res])
    return JSONResponse(result_to_json(res))


@operation(router, "revert_change_set", S.ChangeSetRevertOut,
           summary="Undo every write of a change set (all or nothing unless partial)")
def revert_change_set(change_set_id: str, body: S.ChangeSetRevertIn, p: Principal, m: Mem) -> JSONResponse:
    not_user_bound(p, "revert change sets")
    out = m.revert_change_set(p.tenant, change_set_id, now=body.now, actor=actor_of(p, body.actor),
                              source=body.source, partial=body.partial)
    return JSONResponse(out.to_dict())
