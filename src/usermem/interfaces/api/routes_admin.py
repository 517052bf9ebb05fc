"""/v1 admin: the audit log, purge, and who the calling key is."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Principal
from usermem.interfaces.api.problems import ApiProblem, responses
from usermem.interfaces.api.routing import not_user_bound, operation
from usermem.interfaces.catalog import describe
from usermem.interfaces.wire import audit_to_json

router = APIRouter()


@operation(router, "audit", S.AuditOut, codes=(401, 403, 422, 429, 503),
           summary="The tenant's audit log (admin key). Entries never carry memory values")
def audit(
    p: Admin, m: Mem,
    user_id: Annotated[str | None, Query(description=describe("user_id"))] = None,
    action: Annotated[str | None, Query(description=describe("action"))] = None,
    since: Annotated[float | None, Query(description=describe("since"))] = None,
    until: Annotated[float | None, Query(description=describe("until"))] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description=describe("limit"))] = 100,
    after_seq: Annotated[int | None, Query(description=describe("after_seq"))] = None,
) -> JSONResponse:
    events = m.audit(p.tenant, user_id=user_id, action=action, since=since, until=until, limit=limit,
                     after_seq=after_seq)
    return JSONResponse({"items": [audit_to_json(e) for e in events]})


@operation(router, "purge", S.PurgeOut, codes=(401, 403, 422, 429, 503),
           summary="Physically delete rows soft-deleted or expired longer ago than the retention (admin key)")
def purge(body: S.PurgeIn, p: Admin, m: Mem) -> S.PurgeOut:
    """Server-wide maintenance: it removes only what the server's own retention already condemns, so a
    tenant's admin key can run it without affecting any other tenant's recovery window: a `retention_days`
    shorter than the server's setting, or a `now` ahead of the server clock (which would expire other
    tenants' grants and rows early), is refused; an operator runs `usermem purge` for those."""
    not_user_bound(p, "purge")
    if body.now is not None and body.now > time.time():
        raise ApiProblem(422, "validation_error", "now must not be ahead of the server clock (purge acts on "
                         "every tenant)", field="now")
    floor = m.settings.retention_days
    if body.retention_days is not None and body.retention_days < floor:
        raise ApiProblem(422, "validation_error", f"retention_days must be at least the server's ({floor:g}); "
                         "a shorter retention is an operator command (usermem purge)", field="retention_days")
    return S.PurgeOut(purged=m.purge(body.now, retention_days=body.retention_days))


@router.get("/v1/whoami", tags=["admin"], response_model=S.WhoAmI, responses=responses(401, 429),
            summary="The tenant and rights of the calling key")
def whoami(p: Principal) -> S.WhoAmI:
    return S.WhoAmI(tenant=p.tenant, key_id=p.id, admin=p.admin, user_id=p.user_id)


@operation(router, "users", S.UsersOut, codes=(401, 403, 422, 429, 503),
           summary="The tenant's users, paged, with prefix search (not for user-bound keys or user tokens)")
def users(p: Principal, m: Mem,
          prefix: Annotated[str | None, Query(max_length=256, description=describe("prefix"))] = None,
          after: Annotated[str | None, Query(max_length=256, description=describe("after"))] = None,
          limit: Annotated[int, Query(ge=1, le=1000, description=describe("limit"))] = 50) -> JSONResponse:
    not_user_bound(p, "list the tenant's users")
    return JSONResponse(m.users(p.tenant, prefix=prefix, after=after, limit=limit).to_dict())
