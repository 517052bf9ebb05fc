"""/v1 conversation: recall plans, extraction, ingestion, assembly, onboarding, reflexive verification."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Met, Principal, actor_of, bound_user
from usermem.interfaces.api.routing import count_decisions, operation
from usermem.interfaces.catalog import describe
from usermem.interfaces.wire import result_to_json, scored_to_json

router = APIRouter()


def _messages(items: list[S.Message | str] | list[S.Message]) -> list[Any]:
    return [x if isinstance(x, str) else x.model_dump() for x in items]


@operation(router, "plan", S.PlanOut,
           summary="Which fields the current message needs (reads only the message and the contracts)")
def plan(user_id: S.UserPath, body: S.PlanIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse(m.plan(p.tenant, user_id, body.message))


@operation(router, "extract", S.CandidatesOut, summary="Propose memories from messages; writes nothing")
def extract(body: S.ExtractIn, p: Principal, m: Mem) -> JSONResponse:
    out = m.extract(_messages(body.messages), tenant=p.tenant)
    return JSONResponse({"items": [dict(asdict(c), kind=c.kind.value) for c in out]})


@operation(router, "assemble", S.AssemblyOut,
           summary="Plan, select and render memories as a prompt block within a token budget")
def assemble(user_id: S.UserPath, body: S.AssembleIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    out = m.assemble(p.tenant, user_id, body.message, body.budget_tokens, now=body.now,
                     session_id=body.session_id, actor=actor_of(p, body.actor), purpose=body.purpose)
    selected = {"facts": [scored_to_json(s) for s in out.facts],
                "preferences": [scored_to_json(s) for s in out.preferences],
                "context": [scored_to_json(s) for s in out.context], "used_ids": list(out.used_ids)}
    return JSONResponse({**out.to_dict(), "selected": selected})


@operation(router, "ingest", S.ResultsOut, summary="Extract memories from messages and write them (one change set)")
def ingest(user_id: S.UserPath, body: S.IngestIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
    user_id = bound_user(p, user_id)
    results = m.ingest(p.tenant, user_id, _messages(body.messages), now=body.now, session_id=body.session_id,
                       change_set_id=body.change_set_id, actor=actor_of(p, body.actor))
    count_decisions(metrics, results)
    return JSONResponse({"results": [result_to_json(x) for x in results]})


@operation(router, "onboarding_questions", S.QuestionListOut,
           summary="The tenant's onboarding questions in the user's language, each with `answered`")
def onboarding(user_id: S.UserPath, p: Principal, m: Mem,
               language: Annotated[str | None, Query(max_length=8, description=describe("language"))] = None,
               now: Annotated[float | None, Query(description=describe("now"))] = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse({"items": m.onboarding_questions(p.tenant, user_id, language, now=now)})


@operation(router, "answer_onboarding", S.ResultsOut, summary="Store onboarding answers (source `onboarding`)")
def answer_onboarding(user_id: S.UserPath, body: S.AnswersIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
    user_id = bound_user(p, user_id)
    results = m.answer_onboarding(p.tenant, user_id, body.answers, now=body.now, actor=actor_of(p, body.actor))
    count_decisions(metrics, results)
    return JSONResponse({"results": [result_to_json(x) for x in results]})


@operation(router, "set_onboarding_questions", S.QuestionDefListOut,
           summary="Replace the tenant's onboarding questions (admin key)")
def set_onboarding(body: S.QuestionsIn, p: Admin, m: Mem) -> JSONResponse:
    return JSONResponse({"items": m.set_onboarding_questions(p.tenant, body.questions, now=body.now)})


@operation(router, "record_pushback", S.PushbackOut,
           summary="Count one pushback on a field; at the threshold a hypothesis awaits verification")
def pushback(user_id: S.UserPath, body: S.PushbackIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse(m.record_pushback(p.tenant, user_id, body.key, body.message, value=body.value, now=body.now))


@operation(router, "pending_verifications", S.VerificationListOut,
           summary="Hypotheses waiting for the user to confirm or reject")
def verifications(user_id: S.UserPath, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse({"items": m.pending_verifications(p.tenant, user_id)})


@operation(router, "accept_verification", S.WriteResultOut,
           summary="The user confirmed: store the hypothesis (or their value) as user_confirmed")
def accept_verification(user_id: S.UserPath, verification_id: str, body: S.VerificationIn, p: Principal, m: Mem,
                        metrics: Met) -> JSONResponse:
    user_id = bound_user(p, user_id)
    res = m.accept_verification(p.tenant, user_id, verification_id, value=body.value, now=body.now,
                                actor=actor_of(p, body.actor))
    count_decisions(metrics, [res])
    return JSONResponse(result_to_json(res))


@operation(router, "reject_verification", S.RejectedOut, summary="The user rejected the hypothesis")
def reject_verification(user_id: S.UserPath, verification_id: str, body: S.RejectIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    return JSONResponse({"rejected": m.reject_verification(p.tenant, user_id, verification_id, now=body.now)})
