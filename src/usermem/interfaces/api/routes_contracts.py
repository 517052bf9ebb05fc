"""/v1 contracts: the tenant's field contracts and its policy for keys without one (admin key)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, actor_of
from usermem.interfaces.api.problems import ApiProblem
from usermem.interfaces.api.routing import operation
from usermem.interfaces.catalog import describe

router = APIRouter()
ActorQ = Annotated[str | None, Query(max_length=128, description=describe("actor"))]
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


@operation(router, "contracts_list", S.ContractListOut, summary="The tenant's field contracts (admin key)")
def contracts(p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse({"items": [c.to_dict() for c in m.contracts_list(p.tenant)]})


@operation(router, "contract", S.ContractOut, summary="One field contract (admin key)")
def contract(key: str, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.contract(p.tenant, key).to_dict())


@operation(router, "set_contract", S.ContractOut,
           summary="Create or replace a field contract (admin key; versioned and audited)")
def set_contract(key: str, body: Annotated[dict[str, Any], Body(description=describe("contract"))], p: Admin,
                 m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    if body.get("key", key) != key:
        raise ApiProblem(422, "validation_error", "the body's key must match the path", field="key")
    out = m.set_contract(p.tenant, {**body, "key": key}, actor=actor_of(p, actor), now=now)
    return JSONResponse(out.to_dict())


@operation(router, "enable_field", S.ContractOut, summary="Enable a field (admin key)")
def enable_field(key: str, p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    return JSONResponse(m.enable_field(p.tenant, key, actor=actor_of(p, actor), now=now).to_dict())


@operation(router, "disable_field", S.ContractOut, summary="Disable a field: new writes of it are rejected (admin key)")
def disable_field(key: str, p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    return JSONResponse(m.disable_field(p.tenant, key, actor=actor_of(p, actor), now=now).to_dict())


@operation(router, "contract_history", S.ContractHistoryOut, summary="Every version of a field contract (admin key)")
def contract_history(key: str, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse({"items": m.contract_history(p.tenant, key)})


@operation(router, "delete_contract", S.DeletedOut, summary="Remove the tenant's contract for a field (admin key)")
def delete_contract(key: str, p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    m.delete_contract(p.tenant, key, actor=actor_of(p, actor), now=now)
    return JSONResponse({"deleted": True})


@operation(router, "set_unknown_fields", S.PolicyOut,
           summary="What happens to keys without a contract: accept (as L1) or reject (admin key)")
def unknown_fields(body: S.PolicyIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse({"policy": m.set_unknown_fields(p.tenant, body.policy, actor=actor_of(p, body.actor),
                                                        now=body.now)})
