"""/v1 privacy: grants for L2/L3 fields, cross-domain consents, export, PII redaction."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.engine.memory import Memory
from usermem.errors import NotFound
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import (
    Admin,
    Mem,
    Principal,
    actor_of,
    answering_user,
    bound_user,
    data_subject,
)
from usermem.interfaces.api.keys import ApiKey
from usermem.interfaces.api.problems import ApiProblem, responses
from usermem.interfaces.api.routing import COMMON, operation
from usermem.interfaces.catalog import describe

router = APIRouter()
ActorQ = Annotated[str | None, Query(max_length=128, description=describe("actor"))]
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]
ExpiredQ = Annotated[bool, Query(description=describe("include_expired"))]


@operation(router, "grant", S.GrantOut, summary="Grant time-limited access to L2/L3 fields (admin key; audited)")
def grant(user_id: S.UserPath, body: S.GrantIn, p: Admin, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    if (body.fields is None) == (body.level is None):
        raise ApiProblem(422, "validation_error", "give exactly one of fields or level", field="fields")
    target: Any = body.fields if body.fields is not None else body.level
    gid = m.grant(p.tenant, user_id, target, body.purpose, body.ttl_seconds, actor=actor_of(p, body.actor),
                  grantee=body.grantee, now=body.now)
    found = next((g for g in m.grants(p.tenant, user_id, now=body.now, include_expired=True) if g.id == gid), None)
    if found is None:
        raise ApiProblem(404, "grant_not_found", "grant vanished")
    return JSONResponse(found.to_dict())


@operation(router, "grants", S.GrantListOut, summary="The tenant's grants, or one user's (admin key)")
def list_grants(p: Admin, m: Mem, user_id: Annotated[str | None, Query(description=describe("user_id"))] = None,
                include_expired: ExpiredQ = False, now: NowQ = None) -> JSONResponse:
    if p.user_id is not None:
        user_id = bound_user(p, user_id or p.user_id)
    items = m.grants(p.tenant, user_id, now=now, include_expired=include_expired)
    return JSONResponse({"items": [g.to_dict() for g in items]})


@router.get("/v1/users/{user_id}/grants", tags=["privacy"], response_model=S.GrantListOut, responses=COMMON,
            summary="A user's grants (admin key; same as GET /v1/grants?user_id=)")
def list_user_grants(user_id: S.UserPath, p: Admin, m: Mem, include_expired: ExpiredQ = False,
                     now: NowQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    items = m.grants(p.tenant, user_id, now=now, include_expired=include_expired)
    return JSONResponse({"items": [g.to_dict() for g in items]})


@operation(router, "revoke", S.RevokedOut, summary="Revoke a grant (admin key)")
def revoke_grant(grant_id: str, p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    if not m.revoke(p.tenant, grant_id, actor=actor_of(p, actor), now=now):
        raise ApiProblem(404, "grant_not_found", "no such grant")
    return JSONResponse({"revoked": True})


@operation(router, "opt_in", S.ConsentOut,
           summary="The user consents: approve a consent request ({request_id}, user token) or let a domain use "
                   "explicit-opt-in fields ({fields, domain})")
def opt_in(user_id: S.UserPath, body: S.OptInIn, p: Principal, m: Mem) -> JSONResponse:
    # Both forms are the user's consent: a user token of that user or an admin key (an operator recording what
    # the user decided). An agent's key — even one bound to the user — cannot opt the user in (403).
    user_id = answering_user(p, user_id)
    try:
        out = m.opt_in(p.tenant, user_id, body.fields, body.domain, request_id=body.request_id,
                       actor=actor_of(p, body.actor), now=body.now)
    except NotFound:
        raise ApiProblem(404, "consent_request_not_found", "no such consent request for this user") from None
    return JSONResponse({"fields": list(out)})


# -- consent requests (engine/consent.py) ------------------------------------------------------------------

@operation(router, "request_consent", S.ConsentRequestOut,
           summary="Ask the user to let withheld fields be used for a purpose (pending until they answer)")
def request_consent(user_id: S.UserPath, body: S.ConsentRequestIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    req = m.request_consent(p.tenant, user_id, body.fields, body.purpose, body.ttl_seconds, domain=body.domain,
                            session_id=body.session_id, actor=actor_of(p, body.actor), now=body.now)
    return JSONResponse(req.to_dict())


@operation(router, "consent_requests", S.ConsentRequestListOut,
           summary="A user's consent requests: pending (default), approved, declined or all")
def consent_requests(user_id: S.UserPath, p: Principal, m: Mem,
                     status: Annotated[str, Query(max_length=16, description=describe("status"))] = "pending",
                     now: NowQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    items = m.consent_requests(p.tenant, user_id, status=None if status == "all" else status, now=now)
    return JSONResponse({"items": [r.to_dict() for r in items]})


def _answer(m: Memory, p: ApiKey, user_id: str, request_id: str, body: S.ConsentAnswerIn, approve: bool) -> JSONResponse:
    user_id = answering_user(p, user_id)
    answer = m.approve_consent if approve else m.decline_consent
    try:
        req = answer(p.tenant, user_id, request_id, actor=actor_of(p, body.actor), now=body.now)
    except NotFound:
        raise ApiProblem(404, "consent_request_not_found", "no such consent request for this user") from None
    return JSONResponse(req.to_dict())


@operation(router, "approve_consent", S.ConsentRequestOut,
           summary="The user approves a consent request: a grant of its fields, purpose and duration (audited)")
def approve_consent(user_id: S.UserPath, request_id: str, body: S.ConsentAnswerIn, p: Principal,
                    m: Mem) -> JSONResponse:
    return _answer(m, p, user_id, request_id, body, True)


@operation(router, "decline_consent", S.ConsentRequestOut,
           summary="The user declines a consent request (remembered for the session; an approval is revoked)")
def decline_consent(user_id: S.UserPath, request_id: str, body: S.ConsentAnswerIn, p: Principal,
                    m: Mem) -> JSONResponse:
    return _answer(m, p, user_id, request_id, body, False)


@operation(router, "opt_out", S.WithdrawnOut, summary="Withdraw an opt-in")
def opt_out(user_id: S.UserPath, body: S.ConsentIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    n = m.opt_out(p.tenant, user_id, body.fields, body.domain, actor=actor_of(p, body.actor), now=body.now)
    return JSONResponse({"removed": int(n)})


@operation(router, "export", S.ExportOut,
           summary="Everything held about a user (memories with history, sessions, grants), as JSON (the user's "
                   "token or an admin key: it holds L2/L3 values)")
def export(user_id: S.UserPath, p: Principal, m: Mem, now: NowQ = None, actor: ActorQ = None) -> JSONResponse:
    user_id = data_subject(p, user_id)
    out = m.export(p.tenant, user_id, now=now, actor=actor_of(p, actor))
    if not out.get("counts", {}).get("versions") and not out.get("documents"):
        raise ApiProblem(404, "user_not_found", "no such user")
    return JSONResponse(out)


@router.post("/v1/redact", tags=["privacy"], response_model=S.RedactOut, responses=responses(401, 413, 422, 429),
             summary="Redact PII (ID numbers, phones, cards, e-mail...) from text before it leaves your system")
def redact(body: S.RedactIn, p: Principal) -> S.RedactOut:
    from usermem import privacy

    text = privacy.redact(body.text, body.placeholder) if body.placeholder else privacy.redact(body.text)
    return S.RedactOut(text=text, findings=privacy.summarize(body.text))
