"""/v1 sessions: open, list, read, add messages, touch, close, context, idle expiry, episodes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.engine.sessions import TranscriptFull
from usermem.errors import ConflictError
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, Met, Principal, actor_of, bound_user
from usermem.interfaces.api.problems import ApiProblem
from usermem.interfaces.api.routing import (
    closed_json,
    count_decisions,
    not_user_bound,
    operation,
    session_for,
)
from usermem.interfaces.catalog import describe
from usermem.interfaces.wire import record_to_json, result_to_json, scored_to_json

router = APIRouter()
MESSAGES_NS = "api_session_messages"
MAX_SESSION_MESSAGES = 2000
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


@operation(router, "open_session", S.SessionOut,
           summary="Open a session; context memories written with its id live until it closes")
def open_session(user_id: S.UserPath, body: S.SessionOpenIn, p: Principal, m: Mem) -> JSONResponse:
    user_id = bound_user(p, user_id)
    sid = m.open_session(p.tenant, user_id, body.client_id, now=body.now, idle_seconds=body.idle_seconds)
    return JSONResponse(m.get_session(sid, tenant=p.tenant).to_dict())


@operation(router, "sessions", S.SessionListOut, summary="A user's sessions")
def list_sessions(user_id: S.UserPath, p: Principal, m: Mem,
                  status: Annotated[str | None, Query(pattern="^(open|closed)$", description=describe("status"))]
                  = None, now: NowQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    items = m.sessions(p.tenant, user_id, status=status, now=now)
    return JSONResponse({"items": [s.to_dict() for s in items]})


@operation(router, "expire_idle_sessions", S.SessionClosedListOut,
           summary="Close every session of the tenant idle past its timeout (admin key)")
def expire_idle(body: S.NowIn, p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, "expire the tenant's sessions")
    closed = m.expire_idle_sessions(body.now, tenant=p.tenant)
    return JSONResponse({"items": [closed_json(c) for c in closed]})


@operation(router, "get_session", S.SessionOut, summary="One session")
def get_session(session_id: str, p: Principal, m: Mem) -> JSONResponse:
    return JSONResponse(session_for(m, p, session_id).to_dict())


@operation(router, "add_messages", S.MessagesOut,
           summary="Add conversation messages (PII redacted, kept as the transcript; optionally extracted)")
def add_messages(session_id: str, body: S.MessagesIn, p: Principal, m: Mem, metrics: Met) -> JSONResponse:
    session_for(m, p, session_id)
    # The engine redacts PII and appends atomically (engine/sessions.py, issue 12 item 2).
    try:
        added = m.add_messages(session_id, [msg.model_dump() for msg in body.messages], tenant=p.tenant,
                               now=body.now, actor=actor_of(p, body.actor), extract=body.extract)
    except ConflictError:
        raise ApiProblem(409, "session_closed", "the session is closed") from None
    except TranscriptFull as exc:
        raise ApiProblem(413, "payload_too_large", str(exc), field="messages") from None
    count_decisions(metrics, list(added.results))
    return JSONResponse({"session": added.session.to_dict(), "stored_messages": added.stored_messages,
                         "results": [result_to_json(x) for x in added.results]})


@operation(router, "touch_session", S.SessionOut, summary="Count activity in a session (postpones its idle expiry)")
def touch_session(session_id: str, body: S.NowIn, p: Principal, m: Mem) -> JSONResponse:
    session_for(m, p, session_id)
    return JSONResponse(m.touch_session(session_id, tenant=p.tenant, now=body.now).to_dict())


@operation(router, "close_session", S.SessionClosedOut,
           summary="Close: archive as an episode, retire the session's context. Idempotent")
def close_session(session_id: str, body: S.SessionCloseIn, p: Principal, m: Mem) -> JSONResponse:
    session_for(m, p, session_id)
    transcript: Any = body.transcript
    if isinstance(transcript, list):
        transcript = [msg.model_dump() for msg in transcript]
    if transcript is None:
        doc = m.store.get_doc(p.tenant, MESSAGES_NS, session_id)
        transcript = doc["messages"] if doc else None
    closed = m.close_session(session_id, transcript, tenant=p.tenant, now=body.now, actor=actor_of(p, body.actor))
    m.store.delete_doc(p.tenant, MESSAGES_NS, session_id)
    return JSONResponse(closed_json(closed))


@operation(router, "session_context", S.ScoredListOut, summary="The session's live context memories, best first")
def session_context(session_id: str, p: Principal, m: Mem,
                    k: Annotated[int, Query(ge=1, le=1000, description=describe("k"))] = 20, now: NowQ = None,
                    mark_used: Annotated[bool, Query(description=describe("mark_used"))] = True) -> JSONResponse:
    session_for(m, p, session_id)
    items = m.session_context(session_id, tenant=p.tenant, k=k, now=now, mark_used=mark_used)
    return JSONResponse({"items": [scored_to_json(s) for s in items]})


@operation(router, "episodes", S.MemoryListOut,
           summary="What happened, most recent event first (event time in [since, until))")
def episodes(user_id: S.UserPath, p: Principal, m: Mem,
             since: Annotated[float | None, Query(description=describe("since"))] = None,
             until: Annotated[float | None, Query(description=describe("until"))] = None,
             limit: Annotated[int, Query(ge=1, le=1000, description=describe("limit"))] = 10,
             now: NowQ = None) -> JSONResponse:
    user_id = bound_user(p, user_id)
    items = m.episodes(p.tenant, user_id, since=since, until=until, limit=limit, now=now)
    return JSONResponse({"items": [record_to_json(x) for x in items]})
