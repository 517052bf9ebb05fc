"""/v1 user model: the user model of one user, signals for inferred preferences, the tenant's inference
policy and derivation rules, and the procedure review queue (docs/usermodel.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Principal, actor_of, bound_user
from usermem.interfaces.api.problems import ApiProblem
from usermem.interfaces.api.routing import operation
from usermem.interfaces.catalog import describe

router = APIRouter()
ActorQ = Annotated[str | None, Query(max_length=128, description=describe("actor"))]
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


@operation(router, "model", S.UserModelOut,
           summary="The user model: known facts and preferences, inferences and derived attributes with evidence")
def model(user_id: S.UserPath, p: Principal, m: Mem, now: NowQ = None, actor: ActorQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse(m.model(p.tenant, user_id, now=now, actor=actor_of(p, actor)).to_dict())


@operation(router, "record_signal", S.SignalOut,
           summary="Count one signal for (or against) a preference value; past the threshold an inference is proposed")
def record_signal(user_id: S.UserPath, body: S.SignalIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse(m.record_signal(p.tenant, user_id, body.key, body.value, agree=body.agree,
                                        message=body.message, now=body.now))


@operation(router, "inference_policy", S.InferencePolicyOut, summary="The tenant's inference policy (admin key)")
def inference_policy(p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.inference_policy(p.tenant))


@operation(router, "set_inference_policy", S.InferencePolicyOut,
           summary="Change the tenant's inference policy: mode, threshold, suppression (admin key; audited)")
def set_inference_policy(body: S.InferencePolicyIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.set_inference_policy(p.tenant, mode=body.mode, threshold=body.threshold,
                                               suppress_days=body.suppress_days, actor=actor_of(p, body.actor),
                                               now=body.now))


@operation(router, "derivation_rules", S.DeriveRuleListOut, summary="The tenant's derivation rules (admin key)")
def derivation_rules(p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse({"items": m.derivation_rules(p.tenant)})


@operation(router, "set_derivation_rule", S.DeriveRuleOut,
           summary="Create or change a derivation rule (admin key; versioned and audited)")
def set_derivation_rule(rule_id: str, body: Annotated[dict[str, Any], Body(description=describe("rule"))],
                        p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    if body.get("id", rule_id) != rule_id:
        raise ApiProblem(422, "validation_error", "the body's id must match the path", field="id")
    return JSONResponse(m.set_derivation_rule(p.tenant, {**body, "id": rule_id}, actor=actor_of(p, actor), now=now))


@operation(router, "propose_procedure", S.ProcedureOut,
           summary="Put a candidate procedure in the review queue (admin key)")
def propose_procedure(body: S.ProcedureIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.propose_procedure(p.tenant, body.text, user_id=body.user_id, evidence=body.evidence,
                                            proposed_by=body.proposed_by, now=body.now))


@operation(router, "procedures", S.ProcedureListOut, summary="Procedures of the tenant or of one user (admin key)")
def procedures(p: Admin, m: Mem,
               user_id: Annotated[str | None, Query(max_length=128, description=describe("user_id"))] = None,
               status: Annotated[str | None, Query(max_length=16, description=describe("status"))] = None,
               ) -> JSONResponse:
    return JSONResponse({"items": m.procedures(p.tenant, user_id=user_id, status=status)})


@operation(router, "review_procedure", S.ProcedureOut,
           summary="Approve (with a recorded evaluation), edit or reject a proposed procedure (admin key; audited)")
def review_procedure(procedure_id: str, body: S.ReviewIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.review_procedure(p.tenant, procedure_id, body.decision, evaluation=body.evaluation,
                                           text=body.text, actor=actor_of(p, body.actor), now=body.now))


@operation(router, "rollback_procedure", S.ProcedureOut,
           summary="Take an approved procedure out of use (admin key; audited)")
def rollback_procedure(procedure_id: str, body: S.RollbackIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse(m.rollback_procedure(p.tenant, procedure_id, actor=actor_of(p, body.actor), now=body.now))
