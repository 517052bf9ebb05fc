"""/v1 resources for lifecycle, sessions, conversations and privacy. Each group is mounted only when the
engine offers it (`Memory` grows as features land), so the API never advertises what it cannot do."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field

from usermem.engine.memory import Memory
from usermem.engine.sessions import TranscriptFull
from usermem.errors import ConflictError, NotFound
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Met, Principal, actor_of, bound_user
from usermem.interfaces.api.problems import ApiProblem, responses
from usermem.interfaces.wire import record_to_json, result_to_json, scored_to_json

COMMON = responses(401, 403, 404, 409, 413, 422, 429, 503)
MESSAGES_NS = "api_session_messages"
MAX_SESSION_MESSAGES = 2000


class ConfirmIn(S._In):
    source: str = Field("user_confirmed", max_length=64, description="user_confirmed or agent_confirmed")
    now: float | None = None


class RevertIn(S._In):
    to_version: str | int | None = Field(None, description="A version id, or a 1-based position in history")
    source: str = Field("user_confirmed", max_length=64)
    now: float | None = None


class ChangeSetRevertIn(S._In):
    partial: bool = False
    source: str = Field("user_confirmed", max_length=64)
    now: float | None = None


class ChangeSetRevertOut(S.BaseModel):
    reverted_change_set_id: str
    change_set_id: str
    results: list[S.WriteResultOut]
    conflicts: list[dict[str, Any]]


class Message(S._In):
    role: str = Field(max_length=32, examples=["user"])
    content: str = Field(max_length=64_000)


class SessionOpenIn(S._In):
    client_id: str | None = Field(None, max_length=256)
    idle_seconds: float | None = Field(None, gt=0)
    now: float | None = None


class SessionOut(S.BaseModel):
    id: str
    tenant: str
    user_id: str
    opened_at: float
    last_activity_at: float
    idle_seconds: float
    client_id: str | None = None
    status: str
    closed_at: float | None = None
    close_reason: str | None = None
    episode_id: str | None = None
    episode_error: str | None = None
    implicit: bool = False
    idle_key: str | None = None
    messages: int | None = None


class SessionListOut(S.BaseModel):
    items: list[SessionOut]


class MessagesIn(S._In):
    messages: list[Message] = Field(min_length=1, max_length=500)
    extract: bool = Field(False, description="Also extract memories from these messages and write them")
    now: float | None = None


class MessagesOut(S.BaseModel):
    session: SessionOut
    stored_messages: int
    results: list[S.WriteResultOut]


class SessionCloseIn(S._In):
    transcript: list[Message] | str | None = Field(
        None, description="Defaults to the messages added with POST .../messages")
    now: float | None = None


class SessionClosedOut(S.BaseModel):
    session: SessionOut
    reason: str
    already_closed: bool
    episode: S.MemoryOut | None = None
    context: list[S.MemoryOut]


class ScoredListOut(S.BaseModel):
    items: list[S.ScoredOut]


class PlanIn(S._In):
    message: str = Field(max_length=64_000)


class AssembleIn(S._In):
    message: str = Field(max_length=64_000)
    budget_tokens: int = Field(800, ge=16, le=100_000)
    session_id: str | None = Field(None, max_length=256)
    now: float | None = None


class IngestIn(S._In):
    messages: list[Message] = Field(min_length=1, max_length=500)
    session_id: str | None = Field(None, max_length=256)
    change_set_id: str | None = Field(None, max_length=128)
    now: float | None = None


class ResultsOut(S.BaseModel):
    results: list[S.WriteResultOut]


class GrantIn(S._In):
    fields: list[str] | None = Field(None, description="Field keys to open; or give `level`")
    level: str | None = Field(None, description="L2 or L3: every field up to this sensitivity")
    purpose: str = Field(max_length=500)
    ttl_seconds: float = Field(1800.0, gt=0, le=366 * 86400)
    grantee: str | None = Field(None, max_length=256, description="Only this reader (an API key id: key:<id>)")
    now: float | None = None


class GrantOut(S.BaseModel):
    id: str
    tenant: str
    user_id: str
    fields: list[str]
    level: str | None = None
    purpose: str
    created_at: float
    expires_at: float
    actor: str | None = None
    grantee: str | None = None


class GrantListOut(S.BaseModel):
    items: list[GrantOut]


class RedactIn(S._In):
    text: str = Field(max_length=1_000_000)
    placeholder: str | None = Field(None, max_length=64)


class RedactOut(S.BaseModel):
    text: str
    findings: dict[str, int]


class ContractListOut(S.BaseModel):
    items: list[dict[str, Any]]


class AnswersIn(S._In):
    answers: dict[str, Any] = Field(description="{question id or field key: answer}")
    now: float | None = None


class QuestionsIn(S._In):
    questions: list[dict[str, Any]] = Field(max_length=200)


class PushbackIn(S._In):
    key: str = Field(max_length=64)
    message: str = Field("", max_length=64_000)
    value: Any = None
    now: float | None = None


class VerificationIn(S._In):
    value: Any = Field(None, description="The value the user confirmed, when it differs from the hypothesis")
    now: float | None = None


class ItemsOut(S.BaseModel):
    items: list[dict[str, Any]]


class PolicyIn(S._In):
    policy: str = Field(description="accept | reject", max_length=16)


class ConsentIn(S._In):
    fields: list[str] = Field(min_length=1, max_length=200)
    domain: str = Field(max_length=128)
    now: float | None = None


class MemoryListOut(S.BaseModel):
    items: list[S.MemoryOut]


def _has(name: str) -> bool:
    return callable(getattr(Memory, name, None))


def _session_for(m: Memory, p: Any, session_id: str) -> Any:
    """The session, if it belongs to the caller's tenant (and bound user); else 404."""
    try:
        s = m.get_session(session_id, tenant=p.tenant)
    except NotFound:
        raise ApiProblem(404, "session_not_found", "no such session") from None
    if p.user_id is not None and s.user_id != p.user_id:
        raise ApiProblem(404, "session_not_found", "no such session")
    return s


def _closed_json(c: Any) -> dict[str, Any]:
    return {"session": c.session.to_dict(), "reason": c.reason, "already_closed": c.already_closed,
            "episode": record_to_json(c.episode) if c.episode is not None else None,
            "context": [record_to_json(r) for r in c.context]}


def build_router() -> APIRouter:
    r = APIRouter(prefix="/v1")

    if _has("confirm"):
        @r.post("/users/{user_id}/memories/{memory_id}/confirm", tags=["lifecycle"], response_model=S.MemoryOut,
                responses=COMMON, summary="The user (or agent) confirmed a memory: its weight is back to base")
        def confirm(user_id: str, memory_id: str, body: ConfirmIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            rec = m.confirm(p.tenant, user_id, memory_id, now=body.now, actor=actor_of(p, None), source=body.source)
            return JSONResponse(record_to_json(rec))

    if _has("deny"):
        @r.post("/users/{user_id}/memories/{memory_id}/deny", tags=["lifecycle"], response_model=S.MemoryOut,
                responses=COMMON, summary="The user said a memory is wrong: a retraction supersedes it")
        def deny(user_id: str, memory_id: str, body: ConfirmIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            rec = m.deny(p.tenant, user_id, memory_id, now=body.now, actor=actor_of(p, None), source=body.source)
            return JSONResponse(record_to_json(rec))

    if _has("revert"):
        @r.post("/users/{user_id}/memories/{key}/revert", tags=["lifecycle"], response_model=S.WriteResultOut,
                responses=COMMON, summary="Restore the previous (or a given) version of a key as a new version")
        def revert(user_id: str, key: str, body: RevertIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
            user_id = bound_user(p, user_id)
            res = m.revert(p.tenant, user_id, key, body.to_version, now=body.now, actor=actor_of(p, None),
                           source=body.source)
            metrics.decision(res.op.value, res.reason.value if res.reason else None)
            return JSONResponse(result_to_json(res))

    if _has("revert_change_set"):
        @r.post("/change-sets/{change_set_id}/revert", tags=["lifecycle"], response_model=ChangeSetRevertOut,
                responses=COMMON, summary="Undo every write of a change set (all or nothing unless partial)")
        def revert_change_set(change_set_id: str, body: ChangeSetRevertIn, p: Principal, m: Mem) -> JSONResponse:
            if p.user_id is not None:
                raise ApiProblem(403, "forbidden", "a user-bound key cannot revert change sets")
            out = m.revert_change_set(p.tenant, change_set_id, now=body.now, actor=actor_of(p, None),
                                      source=body.source, partial=body.partial)
            return JSONResponse(out.to_dict())

    if _has("open_session"):
        @r.post("/users/{user_id}/sessions", tags=["sessions"], response_model=SessionOut, responses=COMMON,
                summary="Open a session; context memories written with its id live until it closes")
        def open_session(user_id: str, body: SessionOpenIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            sid = m.open_session(p.tenant, user_id, body.client_id, now=body.now, idle_seconds=body.idle_seconds)
            return JSONResponse(m.get_session(sid, tenant=p.tenant).to_dict())

        @r.get("/users/{user_id}/sessions", tags=["sessions"], response_model=SessionListOut, responses=COMMON,
               summary="A user's sessions")
        def list_sessions(user_id: str, p: Principal, m: Mem,
                          status: Annotated[str | None, Query(pattern="^(open|closed)$")] = None,
                          now: float | None = None) -> JSONResponse:
            user_id = bound_user(p, user_id)
            items = m.sessions(p.tenant, user_id, status=status, now=now)
            return JSONResponse({"items": [s.to_dict() for s in items]})

        @r.get("/sessions/{session_id}", tags=["sessions"], response_model=SessionOut, responses=COMMON,
               summary="One session")
        def get_session(session_id: str, p: Principal, m: Mem) -> JSONResponse:
            return JSONResponse(_session_for(m, p, session_id).to_dict())

        @r.post("/sessions/{session_id}/messages", tags=["sessions"], response_model=MessagesOut, responses=COMMON,
                summary="Add conversation messages (kept as the transcript; optionally extracted into memories)")
        def add_messages(session_id: str, body: MessagesIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
            _session_for(m, p, session_id)
            # The engine redacts PII and appends atomically (engine/sessions.py, issue 12 item 2).
            try:
                added = m.add_messages(session_id, [msg.model_dump() for msg in body.messages], tenant=p.tenant,
                                       now=body.now, actor=actor_of(p, None), extract=body.extract and _has("ingest"))
            except ConflictError:
                raise ApiProblem(409, "session_closed", "the session is closed") from None
            except TranscriptFull as exc:
                raise ApiProblem(413, "payload_too_large", str(exc), field="messages") from None
            for res in added.results:
                metrics.decision(res.op.value, res.reason.value if res.reason else None)
            return JSONResponse({"session": added.session.to_dict(), "stored_messages": added.stored_messages,
                                 "results": [result_to_json(x) for x in added.results]})

        @r.post("/sessions/{session_id}/close", tags=["sessions"], response_model=SessionClosedOut,
                responses=COMMON, summary="Close: archive as an episode, retire the session's context. Idempotent")
        def close_session(session_id: str, body: SessionCloseIn, p: Principal, m: Mem) -> JSONResponse:
            _session_for(m, p, session_id)
            transcript: Any = body.transcript
            if isinstance(transcript, list):
                transcript = [msg.model_dump() for msg in transcript]
            if transcript is None:
                doc = m.store.get_doc(p.tenant, MESSAGES_NS, session_id)
                transcript = doc["messages"] if doc else None
            closed = m.close_session(session_id, transcript, tenant=p.tenant, now=body.now, actor=actor_of(p, None))
            m.store.delete_doc(p.tenant, MESSAGES_NS, session_id)
            return JSONResponse(_closed_json(closed))

        @r.get("/sessions/{session_id}/context", tags=["sessions"], response_model=ScoredListOut,
               responses=COMMON, summary="The session's live context memories, best first")
        def session_context(session_id: str, p: Principal, m: Mem, k: Annotated[int, Query(ge=1, le=1000)] = 20,
                            now: float | None = None) -> JSONResponse:
            _session_for(m, p, session_id)
            items = m.session_context(session_id, tenant=p.tenant, k=k, now=now)
            return JSONResponse({"items": [scored_to_json(s) for s in items]})

    if _has("plan"):
        @r.post("/users/{user_id}/plan", tags=["conversation"], response_model=dict[str, Any], responses=COMMON,
                summary="Which fields the current message needs (reads only the message and the contracts)")
        def plan(user_id: str, body: PlanIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            return JSONResponse(m.plan(p.tenant, user_id, body.message))

    if _has("assemble"):
        @r.post("/users/{user_id}/assemble", tags=["conversation"], response_model=dict[str, Any],
                responses=COMMON, summary="Plan, select and render memories as a prompt block within a token budget")
        def assemble(user_id: str, body: AssembleIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            out = m.assemble(p.tenant, user_id, body.message, body.budget_tokens, now=body.now,
                             session_id=body.session_id, actor=actor_of(p, None))
            return JSONResponse(out.to_dict())

    if _has("ingest"):
        @r.post("/users/{user_id}/ingest", tags=["conversation"], response_model=ResultsOut, responses=COMMON,
                summary="Extract memories from messages and write them (one change set)")
        def ingest(user_id: str, body: IngestIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
            user_id = bound_user(p, user_id)
            results = m.ingest(p.tenant, user_id, [x.model_dump() for x in body.messages], now=body.now,
                               session_id=body.session_id, change_set_id=body.change_set_id,
                               actor=actor_of(p, None))
            for res in results:
                metrics.decision(res.op.value, res.reason.value if res.reason else None)
            return JSONResponse({"results": [result_to_json(x) for x in results]})

    if _has("onboarding_questions"):
        @r.get("/users/{user_id}/onboarding", tags=["conversation"], response_model=ItemsOut, responses=COMMON,
               summary="The tenant's onboarding questions in the user's language, each with `answered`")
        def onboarding(user_id: str, p: Principal, m: Mem,
                       language: Annotated[str | None, Query(max_length=8)] = None) -> JSONResponse:
            user_id = bound_user(p, user_id)
            return JSONResponse({"items": m.onboarding_questions(p.tenant, user_id, language)})

        @r.post("/users/{user_id}/onboarding", tags=["conversation"], response_model=ResultsOut, responses=COMMON,
                summary="Store onboarding answers (source `onboarding`)")
        def answer_onboarding(user_id: str, body: AnswersIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
            user_id = bound_user(p, user_id)
            results = m.answer_onboarding(p.tenant, user_id, body.answers, now=body.now, actor=actor_of(p, None))
            for res in results:
                metrics.decision(res.op.value, res.reason.value if res.reason else None)
            return JSONResponse({"results": [result_to_json(x) for x in results]})

        @r.put("/onboarding", tags=["conversation"], response_model=ItemsOut, responses=COMMON,
               summary="Replace the tenant's onboarding questions (admin key)")
        def set_onboarding(body: QuestionsIn, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse({"items": m.set_onboarding_questions(p.tenant, body.questions)})

    if _has("pending_verifications"):
        @r.post("/users/{user_id}/pushback", tags=["conversation"], response_model=dict[str, Any],
                responses=COMMON, summary="Count one pushback on a field; at the threshold a hypothesis awaits "
                                          "verification")
        def pushback(user_id: str, body: PushbackIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            return JSONResponse(m.record_pushback(p.tenant, user_id, body.key, body.message, value=body.value,
                                                  now=body.now))

        @r.get("/users/{user_id}/verifications", tags=["conversation"], response_model=ItemsOut, responses=COMMON,
               summary="Hypotheses waiting for the user to confirm or reject")
        def verifications(user_id: str, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            return JSONResponse({"items": m.pending_verifications(p.tenant, user_id)})

        @r.post("/users/{user_id}/verifications/{verification_id}/accept", tags=["conversation"],
                response_model=S.WriteResultOut, responses=COMMON,
                summary="The user confirmed: store the hypothesis (or their value) as user_confirmed")
        def accept_verification(user_id: str, verification_id: str, body: VerificationIn, p: Principal, m: Mem,
                                metrics: Met) -> JSONResponse:
            user_id = bound_user(p, user_id)
            res = m.accept_verification(p.tenant, user_id, verification_id, value=body.value, now=body.now,
                                        actor=actor_of(p, None))
            metrics.decision(res.op.value, res.reason.value if res.reason else None)
            return JSONResponse(result_to_json(res))

        @r.post("/users/{user_id}/verifications/{verification_id}/reject", tags=["conversation"],
                response_model=dict[str, bool], responses=COMMON, summary="The user rejected the hypothesis")
        def reject_verification(user_id: str, verification_id: str, body: VerificationIn, p: Principal,
                                m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            return JSONResponse({"rejected": m.reject_verification(p.tenant, user_id, verification_id, now=body.now)})

    if _has("episodes"):
        @r.get("/users/{user_id}/episodes", tags=["sessions"], response_model=MemoryListOut, responses=COMMON,
               summary="What happened, most recent event first (event time in [since, until))")
        def episodes(user_id: str, p: Principal, m: Mem, since: float | None = None, until: float | None = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 10, now: float | None = None) -> JSONResponse:
            user_id = bound_user(p, user_id)
            items = m.episodes(p.tenant, user_id, since=since, until=until, limit=limit, now=now)
            return JSONResponse({"items": [record_to_json(x) for x in items]})

    if _has("opt_in"):
        @r.post("/users/{user_id}/consents", tags=["privacy"], response_model=dict[str, list[str]],
                responses=COMMON, summary="The user lets a domain use fields whose sharing is explicit opt-in")
        def opt_in(user_id: str, body: ConsentIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            out = m.opt_in(p.tenant, user_id, body.fields, body.domain, actor=actor_of(p, None), now=body.now)
            return JSONResponse({"fields": list(out)})

        @r.post("/users/{user_id}/consents/withdraw", tags=["privacy"], response_model=dict[str, int],
                responses=COMMON, summary="Withdraw an opt-in")
        def opt_out(user_id: str, body: ConsentIn, p: Principal, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            n = m.opt_out(p.tenant, user_id, body.fields, body.domain, actor=actor_of(p, None), now=body.now)
            return JSONResponse({"removed": int(n)})

    if _has("export"):
        @r.get("/users/{user_id}/export", tags=["privacy"], response_model=dict[str, Any], responses=COMMON,
               summary="Everything held about a user (memories with history, sessions, grants), as JSON")
        def export(user_id: str, p: Principal, m: Mem, now: float | None = None) -> JSONResponse:
            user_id = bound_user(p, user_id)
            out = m.export(p.tenant, user_id, now=now, actor=actor_of(p, None))
            if not out.get("counts", {}).get("versions") and not out.get("documents"):
                raise ApiProblem(404, "user_not_found", "no such user")
            return JSONResponse(out)

    if _has("grant"):
        @r.post("/users/{user_id}/grants", tags=["privacy"], response_model=GrantOut, responses=COMMON,
                summary="Grant time-limited access to L2/L3 fields (admin key; audited)")
        def grant(user_id: str, body: GrantIn, p: Admin, m: Mem) -> JSONResponse:
            user_id = bound_user(p, user_id)
            if (body.fields is None) == (body.level is None):
                raise ApiProblem(422, "validation_error", "give exactly one of fields or level", field="fields")
            target: Any = body.fields if body.fields is not None else body.level
            gid = m.grant(p.tenant, user_id, target, body.purpose, body.ttl_seconds, actor=actor_of(p, None),
                          grantee=body.grantee, now=body.now)
            found = next((g for g in m.grants(p.tenant, user_id, now=body.now, include_expired=True) if g.id == gid),
                         None)
            if found is None:
                raise ApiProblem(404, "grant_not_found", "grant vanished")
            return JSONResponse(found.to_dict())

        @r.get("/users/{user_id}/grants", tags=["privacy"], response_model=GrantListOut, responses=COMMON,
               summary="A user's grants (admin key)")
        def list_grants(user_id: str, p: Admin, m: Mem, include_expired: bool = False,
                        now: float | None = None) -> JSONResponse:
            user_id = bound_user(p, user_id)
            items = m.grants(p.tenant, user_id, now=now, include_expired=include_expired)
            return JSONResponse({"items": [g.to_dict() for g in items]})

        @r.delete("/grants/{grant_id}", tags=["privacy"], response_model=dict[str, bool], responses=COMMON,
                  summary="Revoke a grant (admin key)")
        def revoke_grant(grant_id: str, p: Admin, m: Mem) -> JSONResponse:
            if not m.revoke(p.tenant, grant_id, actor=actor_of(p, None)):
                raise ApiProblem(404, "grant_not_found", "no such grant")
            return JSONResponse({"revoked": True})

    if _has("contracts_list"):
        @r.get("/contracts", tags=["contracts"], response_model=ContractListOut, responses=COMMON,
               summary="The tenant's field contracts (admin key)")
        def contracts(p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse({"items": [c.to_dict() for c in m.contracts_list(p.tenant)]})

        @r.get("/contracts/{key}", tags=["contracts"], response_model=dict[str, Any], responses=COMMON,
               summary="One field contract (admin key)")
        def contract(key: str, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse(m.contract(p.tenant, key).to_dict())

        @r.put("/contracts/{key}", tags=["contracts"], response_model=dict[str, Any], responses=COMMON,
               summary="Create or replace a field contract (admin key; versioned and audited)")
        def set_contract(key: str, body: dict[str, Any], p: Admin, m: Mem) -> JSONResponse:
            if body.get("key", key) != key:
                raise ApiProblem(422, "validation_error", "the body's key must match the path", field="key")
            out = m.set_contract(p.tenant, {**body, "key": key}, actor=actor_of(p, None))
            return JSONResponse(out.to_dict())

        @r.post("/contracts/{key}/enable", tags=["contracts"], response_model=dict[str, Any], responses=COMMON,
                summary="Enable a field (admin key)")
        def enable_field(key: str, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse(m.enable_field(p.tenant, key, actor=actor_of(p, None)).to_dict())

        @r.post("/contracts/{key}/disable", tags=["contracts"], response_model=dict[str, Any], responses=COMMON,
                summary="Disable a field: new writes of it are rejected (admin key)")
        def disable_field(key: str, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse(m.disable_field(p.tenant, key, actor=actor_of(p, None)).to_dict())

        @r.get("/contracts/{key}/history", tags=["contracts"], response_model=ItemsOut, responses=COMMON,
               summary="Every version of a field contract (admin key)")
        def contract_history(key: str, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse({"items": m.contract_history(p.tenant, key)})

        @r.delete("/contracts/{key}", tags=["contracts"], response_model=dict[str, bool], responses=COMMON,
                  summary="Remove the tenant's contract for a field (admin key)")
        def delete_contract(key: str, p: Admin, m: Mem) -> JSONResponse:
            m.delete_contract(p.tenant, key, actor=actor_of(p, None))
            return JSONResponse({"deleted": True})

        @r.put("/settings/unknown-fields", tags=["contracts"], response_model=PolicyIn, responses=COMMON,
               summary="What happens to keys without a contract: accept (as L1) or reject (admin key)")
        def unknown_fields(body: PolicyIn, p: Admin, m: Mem) -> JSONResponse:
            return JSONResponse({"policy": m.set_unknown_fields(p.tenant, body.policy, actor=actor_of(p, None))})

    @r.post("/redact", tags=["privacy"], response_model=RedactOut, responses=responses(401, 413, 422, 429),
            summary="Redact PII (ID numbers, phones, cards, e-mail...) from text before it leaves your system")
    def redact(body: RedactIn, p: Principal) -> RedactOut:
        from usermem import privacy

        text = privacy.redact(body.text, body.placeholder) if body.placeholder else privacy.redact(body.text)
        return RedactOut(text=text, findings=privacy.summarize(body.text))

    return r
