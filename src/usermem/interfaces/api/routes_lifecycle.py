"""/v1 lifecycle: confirm, deny, revert a key, revert a change set; federation notices ("keep this device's value")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.errors import NotFound
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Mem, Met, Principal, actor_of, bound_user
from usermem.interfaces.api.problems import ApiProblem
from usermem.interfaces.api.routing import count_decisions, not_user_bound, operation
from usermem.interfaces.catalog import describe
from usermem.interfaces.wire import record_to_json, result_to_json

router = APIRouter()
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


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


@operation(router, "federation_notices", S.NoticeListOut,
           summary="The user's open \"changed on another device\" notices (federation)")
def federation_notices(user_id: S.UserPath, p: Principal, m: Mem, now: NowQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse({"items": m.federation_notices(p.tenant, user_id, now=now)})


@operation(router, "keep_local", S.WriteResultOut,
           summary="Keep this device's value after a notice: written again, it wins on every instance")
def keep_local(user_id: S.UserPath, notice_id: str, body: S.KeepLocalIn, p: Principal, m: Mem,
               metrics: Met) -> JSONResponse:
    user_id = bound_user(p, user_id)
    try:
        res = m.keep_local(p.tenant, user_id, notice_id, now=body.now, actor=actor_of(p, body.actor))
    except NotFound:
        raise ApiProblem(404, "notice_not_found", "no open notice with this id for this user") from None
    count_decisions(metrics, [res])
    return JSONResponse(result_to_json(res))
