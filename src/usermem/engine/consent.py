"""Consent for what is withheld (issue 14): the agent asks, the user approves or declines.

Recall reports the fields it left out (`Withheld`: key, level, reason, question — never the value). For a
field that needs a grant the agent may ask the user through a *consent request*; the user answers it
(`approve` / `decline`, over HTTP with a user token). Approving makes a grant of the requested fields,
purpose and duration through the grants pipeline (engine/grants.py; audited there) — and, when the request
names a reader domain, the opt-in of the fields whose contract says `explicit_opt_in` — so the next recall
includes them. Declining is remembered for the session that asked (or, without one, for `DECLINE_MEMORY`
seconds): recall then marks the field `declined` and gives no question, and asking again returns the
declined request instead of a new one. Every step is audited, never with a value.

Documents (tenant-scoped, user_id set, so erasure removes them):
  consent_requests/<id>  {id, user_id, fields, purpose, ttl_seconds, domain, session_id, requested_by, status,
                          created_at, expires_at, decided_at, decided_by, grant_id, questions}
The document expires with the request (pending), the grant (approved) or the decline memory (declined).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from usermem.engine.context import EngineContext, new_id
from usermem.engine.grants import DEFAULT_TTL, MAX_TTL, GrantsPipeline
from usermem.engine.sessions import SessionClosed
from usermem.engine.write import check_ids
from usermem.errors import NotFound, ValidationError
from usermem.model import AuditEvent
from usermem.policy.contracts import Sharing
from usermem.policy.pii import detect
from usermem.policy.validate import InputProblem, check_identifier, check_key
from usermem.policy.wording import consent_questions

NS = "consent_requests"
PENDING_TTL = 7 * 86_400.0  # an unanswered request is dropped after a week
DECLINE_MEMORY = 12 * 3_600.0  # a decline outside any session is remembered this long
MAX_FIELDS = 20
Status = Literal["pending", "approved", "declined"]
STATUSES: tuple[str, ...] = ("pending", "approved", "declined")  # ended requests are gone (audit keeps them)


@dataclass(frozen=True, slots=True)
class ConsentRequest:
    """An agent's request to use some of the user's withheld fields, and the user's answer."""

    id: str
    tenant: str
    user_id: str
    fields: tuple[str, ...]
    purpose: str
    ttl_seconds: float  # how long the grant lasts once approved
    status: Status
    created_at: float
    expires_at: float  # when this document ends (pending: unanswered; approved: the grant; declined: the memory)
    questions: Mapping[str, str] = field(default_factory=dict)  # {"zh": ..., "en": ...}
    domain: str | None = None
    session_id: str | None = None
    requested_by: str | None = None
    decided_at: float | None = None
    decided_by: str | None = None
    grant_id: str | None = None

    def question(self, language: str) -> str:
        return self.questions.get(language) or self.questions.get("en") or ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "user_id": self.user_id, "fields": list(self.fields),
                "purpose": self.purpose, "ttl_seconds": self.ttl_seconds, "status": self.status,
                "created_at": self.created_at, "expires_at": self.expires_at, "questions": dict(self.questions),
                "domain": self.domain, "session_id": self.session_id, "requested_by": self.requested_by,
                "decided_at": self.decided_at, "decided_by": self.decided_by, "grant_id": self.grant_id}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConsentRequest:
        status = str(d.get("status", "pending"))
        return cls(str(d["id"]), str(d["tenant"]), str(d["user_id"]), tuple(d.get("fields") or ()),
                   str(d.get("purpose", "")), float(d.get("ttl_seconds", DEFAULT_TTL)),
                   status if status in STATUSES else "pending",  # type: ignore[arg-type]
                   float(d["created_at"]), float(d["expires_at"]), dict(d.get("questions") or {}),
                   d.get("domain"), d.get("session_id"), d.get("requested_by"), _opt(d.get("decided_at")),
                   d.get("decided_by"), d.get("grant_id"))


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass(frozen=True, slots=True)
class ConsentState:
    """What recall needs to know about one user's consent requests: declined and pending fields."""

    declined: frozenset[str] = frozenset()
    pending: Mapping[str, str] = field(default_factory=dict)  # field -> request id

    @property
    def empty(self) -> bool:
        return not self.declined and not self.pending


class ConsentPipeline:
    def __init__(self, ctx: EngineContext, grants: GrantsPipeline) -> None:
        self.ctx = ctx
        self.grants = grants

    # -- asking ------------------------------------------------------------------------------------------

    def request(self, tenant: str, user_id: str, fields: Iterable[str] | str, purpose: str,
                ttl: float = DEFAULT_TTL, *, domain: str | None = None, session_id: str | None = None,
                actor: str | None = None, now: float | None = None) -> ConsentRequest:
        check_ids(tenant, user_id)
        keys = _fields(fields)
        purpose = _purpose(purpose)
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL:
            raise ValidationError(f"ttl must be seconds in (0, {MAX_TTL:.0f}]", field="ttl")
        for name, v in (("domain", domain), ("session_id", session_id), ("actor", actor)):
            if v is not None:
                try:
                    check_key(v) if name == "domain" else check_identifier(name, v)
                except (TypeError, InputProblem) as exc:
                    raise ValidationError(str(exc), field=name) from None
        contracts = self.ctx.contracts_for(tenant)
        unknown = [k for k in keys if contracts.get(k) is None]
        if unknown:
            raise ValidationError(f"no field contract for {unknown}: consent is asked for contracted fields",
                                  field="fields")
        at = self.ctx.now(now)
        # Asking again is not a new request: a declined field stays declined; the same pending question is reused.
        for existing in self.list(tenant, user_id, status=None, now=at):
            if existing.status == "declined" and set(existing.fields) & set(keys):
                return existing
            if existing.status == "pending" and set(existing.fields) == set(keys) and existing.purpose == purpose \
                    and existing.domain == domain:
                return existing
        req = ConsentRequest(new_id(), tenant, user_id, keys, purpose, float(ttl), "pending", at, at + PENDING_TTL,
                             consent_questions([(k, contracts.get(k)) for k in keys], purpose), domain, session_id,
                             actor)
        self._put(req, at)
        self._audit(req, "consent_request", at, actor)
        return req

    # -- answering ---------------------------------------------------------------------------------------

    def approve(self, tenant: str, user_id: str, request_id: str, *, actor: str | None = None,
                now: float | None = None) -> ConsentRequest:
        """Grant what the request asks (fields, purpose, duration); a declined request may still be approved."""
        req = self.get(tenant, user_id, request_id, now=now)
        if req.status == "approved":
            return req
        at = self.ctx.now(now)
        contracts = self.ctx.contracts_for(tenant)
        grant_id = self.grants.grant(tenant, user_id, list(req.fields), req.purpose, req.ttl_seconds,
                                     actor=actor, now=at)
        if req.domain is not None:
            opt = [k for k in req.fields if (c := contracts.get(k)) is not None
                   and c.sharing is Sharing.EXPLICIT_OPT_IN and c.domain != req.domain]
            if opt:
                self.grants.opt_in(tenant, user_id, opt, req.domain, actor=actor, now=at)
        done = replace(req, status="approved", decided_at=at, decided_by=actor, grant_id=grant_id,
                       expires_at=at + req.ttl_seconds)
        self._put(done, at)
        self._audit(done, "consent_approve", at, actor)
        return done

    def decline(self, tenant: str, user_id: str, request_id: str, *, actor: str | None = None,
                now: float | None = None) -> ConsentRequest:
        """Say no; remembered for the asking session. Declining an approved request revokes its grant."""
        req = self.get(tenant, user_id, request_id, now=now)
        if req.status == "declined":
            return req
        at = self.ctx.now(now)
        if req.status == "approved" and req.grant_id is not None:
            self.grants.revoke(req.grant_id, tenant, actor=actor, now=at)
        done = replace(req, status="declined", decided_at=at, decided_by=actor, grant_id=None,
                       expires_at=at + DECLINE_MEMORY)
        self._put(done, at)
        self._audit(done, "consent_decline", at, actor)
        return done

    # -- reading -----------------------------------------------------------------------------------------

    def get(self, tenant: str, user_id: str, request_id: str, *, now: float | None = None) -> ConsentRequest:
        check_ids(tenant, user_id)
        if not isinstance(request_id, str) or not request_id or len(request_id) > 128:
            raise ValidationError("request_id must be a request id", field="request_id")
        doc = self.ctx.store.get_doc(tenant, NS, request_id, now=self.ctx.now(now))
        if doc is None or doc.get("user_id") != user_id:
            raise NotFound(f"no consent request {request_id!r} for this user (answered long ago, or expired)")
        return ConsentRequest.from_dict(doc)

    def list(self, tenant: str, user_id: str, *, status: str | None = "pending",
             now: float | None = None) -> builtins.list[ConsentRequest]:
        check_ids(tenant, user_id)
        if status is not None and status not in STATUSES and status != "all":
            raise ValidationError(f"status must be one of {', '.join(STATUSES)} or all", field="status")
        at = self.ctx.now(now)
        docs = self.ctx.store.list_docs(tenant, NS, user_id=user_id, now=at)
        reqs = sorted((ConsentRequest.from_dict(d) for _, d in docs), key=lambda r: (r.created_at, r.id))
        if status in (None, "all"):
            return reqs
        return [r for r in reqs if r.status == status]

    def state(self, tenant: str, user_id: str, now: float) -> ConsentState:
        """Declined and pending fields of the user (recall marks its withheld entries with them)."""
        declined: set[str] = set()
        pending: dict[str, str] = {}
        for r in self.list(tenant, user_id, status=None, now=now):
            if r.status == "declined":
                declined.update(r.fields)
            elif r.status == "pending":
                for f in r.fields:
                    pending.setdefault(f, r.id)
        return ConsentState(frozenset(declined), pending)

    def on_session_closed(self, closed: SessionClosed) -> None:
        """The session-close hook: the session's declines end with it."""
        self.forget_session(closed.session.tenant, closed.session.user_id, closed.session.id)

    def forget_session(self, tenant: str, user_id: str, session_id: str) -> int:
        """The session ended: its declines are no longer remembered (a session-close hook)."""
        store = self.ctx.store
        n = 0
        for key, doc in store.list_docs(tenant, NS, user_id=user_id, limit=100_000):
            if doc.get("session_id") == session_id and doc.get("status") == "declined":
                n += int(store.delete_doc(tenant, NS, key))
        return n

    # -- internals ---------------------------------------------------------------------------------------

    def _put(self, req: ConsentRequest, at: float) -> None:
        self.ctx.store.put_doc(req.tenant, NS, req.id, req.to_dict(), now=at, user_id=req.user_id,
                               expires_at=req.expires_at)

    def _audit(self, req: ConsentRequest, action: str, at: float, actor: str | None) -> None:
        self.ctx.store.append_audit(AuditEvent(
            tenant=req.tenant, at=at, action=action, user_id=req.user_id, actor=actor,
            detail={"request_id": req.id, "fields": list(req.fields), "purpose": req.purpose,
                    "ttl": req.ttl_seconds, "domain": req.domain, "session_id": req.session_id,
                    "status": req.status, "grant_id": req.grant_id}))


def _fields(fields: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(fields, str):
        fields = [fields]
    try:
        keys = tuple(dict.fromkeys(fields))
    except TypeError:
        raise ValidationError("fields must be a field key or a list of field keys", field="fields") from None
    if not keys:
        raise ValidationError("a consent request names at least one field", field="fields")
    if len(keys) > MAX_FIELDS:
        raise ValidationError(f"at most {MAX_FIELDS} fields per consent request", field="fields")
    for k in keys:
        if not isinstance(k, str):
            raise ValidationError(f"field keys are strings, got {type(k).__name__}", field="fields")
        try:
            check_key(k)
        except InputProblem as exc:
            raise ValidationError(str(exc), field="fields") from None
    return keys


def _purpose(purpose: str) -> str:
    if not isinstance(purpose, str) or not purpose.strip():
        raise ValidationError("a consent request needs a purpose (what the data is for)", field="purpose")
    if len(purpose) > 500:
        raise ValidationError("purpose is limited to 500 characters", field="purpose")
    if detect(purpose):
        raise ValidationError("the purpose is shown to the user and audited; it must not contain personal data",
                              field="purpose")
    return purpose.strip()

