"""Request and response bodies of the HTTP API. Field names follow the Python API one to one."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from usermem.model import KIND_ALIASES, Kind, Source
from usermem.policy.validate import (
    DEFAULT_LIMITS,
    ID_PATTERN,
    KEY_PATTERN,
    MAX_TTL_SECONDS,
    MAX_UNIX_SECONDS,
    MIN_UNIX_SECONDS,
)
from usermem.understand.service import MAX_BUDGET_TOKENS

# The constraints below are the engine's own (policy/validate.py bounds and patterns, the Kind/Source enums,
# the message roles, the assembly budget), so the OpenAPI schema states exactly what the engine enforces.
SOURCES = " | ".join(s.value for s in Source)
KINDS = " | ".join(k.value for k in Kind) + "".join(f" ({a} = {k.value})" for a, k in KIND_ALIASES.items())
KIND_VALUES = [k.value for k in Kind] + list(KIND_ALIASES)
SOURCE_VALUES = [s.value for s in Source]

# Query-string times (`?now=`): the same range, finite.
TIME_BOUNDS: dict[str, Any] = {"ge": MIN_UNIX_SECONDS, "le": MAX_UNIX_SECONDS, "allow_inf_nan": False}
# Numbers: finite, never a boolean (`now: false` is refused, not read as 0), inside the engine's ranges.
Time = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=MIN_UNIX_SECONDS, le=MAX_UNIX_SECONDS)]
Ttl = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_TTL_SECONDS)]
Unit = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1)]
Seconds = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_TTL_SECONDS)]
UserId = Annotated[str, Field(max_length=128, pattern=ID_PATTERN.pattern, examples=["u1"],
                              description="1-128 printable characters, no personal data")]
UserPath = Annotated[str, Path(max_length=128, pattern=ID_PATTERN.pattern,
                               description="The user: 1-128 printable characters (the engine's identifier rule)")]
MemoryKey = Annotated[str, Field(max_length=64, pattern=KEY_PATTERN.pattern, description="[a-z0-9_.-]{1,64}")]
SourceName = Literal[  # = model.Source (tests/test_api_schema.py checks)
    "system", "agent_confirmed", "user_confirmed", "onboarding", "extracted", "inferred"]
Role = Literal[  # = understand.text.MESSAGE_ROLES (tests/test_api_schema.py checks)
    "user", "assistant", "system", "tool", "developer"]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteItem(_In):
    kind: str = Field(description=KINDS + " — another value is a REJECT invalid_input decision",
                      examples=["preference"], max_length=64)
    key: str = Field(description=f"{KEY_PATTERN.pattern} — another key is a REJECT invalid_input decision",
                     examples=["reply_length"], max_length=256)
    value: Any = Field(description="Any JSON value", examples=["concise"])
    source: str = Field("extracted", description=SOURCES + " — another value is a REJECT invalid_input decision",
                        max_length=64)
    importance: Unit | None = None
    confidence: Unit | None = None
    session_id: str | None = Field(None, max_length=256)
    client_id: str | None = Field(None, max_length=256)
    event_at: Time | None = Field(None, description="When it happened in the world (Unix seconds)")
    ttl_seconds: Ttl | None = None
    canonical: Any = Field(None, description="Optional normalised form kept beside the value (the user's words), "
                                             "never instead of it", examples=["short"])


class WriteIn(WriteItem):
    user_id: UserId
    now: Time | None = Field(None, description="Decision time (Unix seconds); defaults to server time. For imports.")
    change_set_id: str | None = Field(None, max_length=128)
    actor: str | None = Field(None, max_length=128, description="Recorded after the key id in the audit log")


class BatchIn(_In):
    user_id: UserId
    writes: list[WriteItem] = Field(min_length=1, max_length=DEFAULT_LIMITS.max_batch)
    now: Time | None = None
    change_set_id: str | None = Field(None, max_length=128)
    actor: str | None = Field(None, max_length=128)


class MemoryOut(BaseModel):
    id: str
    tenant: str
    user_id: str
    kind: str
    key: str
    value: Any = None
    source: str
    confidence: float
    importance: float
    created_at: float
    expires_at: float | None = None
    last_used_at: float | None = None
    last_confirmed_at: float | None = None
    prev_version_id: str | None = None
    superseded_by: str | None = None
    superseded_at: float | None = None
    deleted_at: float | None = None
    session_id: str | None = None
    client_id: str | None = None
    event_at: float | None = None
    change_set_id: str | None = None
    actor: str | None = None
    retracted: bool = False
    canonical: Any = None


class WriteResultOut(BaseModel):
    op: str = Field(description="ADD | UPDATE | NOOP | REJECT")
    reason: str | None = Field(None, description="Stable reason code when REJECT/NOOP")
    detail: str | None = None
    existing_id: str | None = None
    memory: MemoryOut | None = None


class BatchOut(BaseModel):
    change_set_id: str | None
    results: list[WriteResultOut]


class ScoredOut(BaseModel):
    memory: MemoryOut
    score: float
    weight: float
    relevance: float | None = None
    needs_confirmation: bool = False
    question: str | None = None


class WithheldOut(BaseModel):
    """A field left out of the result, and why — never its value."""

    key: str
    level: Literal["L1", "L2", "L3"]
    reason: Literal["needs_grant", "disabled", "private_to_domain", "instruction_like"]
    question: str | None = Field(None, description="A consent question in the user's language (needs_grant, "
                                                   "not declined); ask it, then request_consent")
    declined: bool = Field(False, description="The user declined in this session: do not ask again")
    request_id: str | None = Field(None, description="A pending consent request covering the field")


class RecallOut(BaseModel):
    user_id: str
    items: list[ScoredOut]
    withheld: list[WithheldOut] = Field(default_factory=list)


class HistoryOut(BaseModel):
    user_id: str
    key: str
    items: list[MemoryOut]


class CountOut(BaseModel):
    deleted: int


class AuditEventOut(BaseModel):
    seq: int | None = None
    tenant: str
    at: float
    action: str
    user_id: str | None = None
    key: str | None = None
    memory_id: str | None = None
    op: str | None = None
    reason: str | None = None
    actor: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class AuditOut(BaseModel):
    items: list[AuditEventOut]


class WhoAmI(BaseModel):
    tenant: str
    key_id: str
    admin: bool
    user_id: str | None = None


class Health(BaseModel):
    status: str
    version: str
    worker: int | None = None  # the answering process id (`usermem serve --workers N` runs several)


class Readiness(BaseModel):
    status: str
    checks: dict[str, str]


# -- lifecycle ----------------------------------------------------------------------------------------

ACTOR_FIELD = Field(None, max_length=128, description="Recorded after the key id in the audit log")
NOW_FIELD = Field(None, description="Judge at this time (Unix seconds) instead of the server clock")


class ConfirmIn(_In):
    source: SourceName = Field("user_confirmed", description="user_confirmed or agent_confirmed")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class RevertIn(_In):
    to_version: str | int | None = Field(None, description="A version id, or a 1-based position in history")
    source: SourceName = "user_confirmed"
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ChangeSetRevertIn(_In):
    partial: bool = False
    source: SourceName = "user_confirmed"
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ConflictOut(BaseModel):
    user_id: str
    key: str
    reason: str


class ChangeSetRevertOut(BaseModel):
    reverted_change_set_id: str
    change_set_id: str
    results: list[WriteResultOut]
    conflicts: list[ConflictOut]


# -- sessions -----------------------------------------------------------------------------------------

class Message(_In):
    role: Role = Field(examples=["user"])
    content: str = Field(max_length=DEFAULT_LIMITS.max_message_chars)


class SessionOpenIn(_In):
    client_id: str | None = Field(None, max_length=256)
    idle_seconds: Seconds | None = None
    now: Time | None = NOW_FIELD


class SessionOut(BaseModel):
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


class SessionListOut(BaseModel):
    items: list[SessionOut]


class MessagesIn(_In):
    messages: list[Message] = Field(min_length=1, max_length=DEFAULT_LIMITS.max_messages)
    extract: bool = Field(False, description="Also extract memories from these messages and write them")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class MessagesOut(BaseModel):
    session: SessionOut
    stored_messages: int
    results: list[WriteResultOut]


class SessionCloseIn(_In):
    transcript: list[Message] | str | None = Field(
        None, description="Defaults to the messages added with POST .../messages")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class NowIn(_In):
    now: Time | None = NOW_FIELD


class SessionClosedOut(BaseModel):
    session: SessionOut
    reason: str
    already_closed: bool
    episode: MemoryOut | None = None
    context: list[MemoryOut]
    withheld: list[str] = Field(default_factory=list, description="context fields left out: L2/L3 without a grant")


class SessionClosedListOut(BaseModel):
    items: list[SessionClosedOut]


class ScoredListOut(BaseModel):
    items: list[ScoredOut]


class MemoryListOut(BaseModel):
    items: list[MemoryOut]


# -- conversation -------------------------------------------------------------------------------------

class PlanIn(_In):
    message: str = Field(max_length=64_000)


class PlanOut(BaseModel):
    fact_recall: list[str]
    preference_recall: list[str]
    context_recall: bool
    memory_priority: str


class AssembleIn(_In):
    message: str = Field(max_length=64_000)
    budget_tokens: int = Field(800, strict=True, ge=1, le=MAX_BUDGET_TOKENS)
    session_id: str | None = Field(None, max_length=256)
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD
    purpose: str | None = Field(None, max_length=500, description="What the memories are for ('推荐午餐'): shapes "
                                                                  "the consent question of withheld fields")


class AssemblyItemOut(BaseModel):
    key: str
    value: Any = None
    kind: str
    source: str
    weight: float
    score: float
    id: str


class AssemblySelectedOut(BaseModel):
    """The selections in full (what `Client.assemble` rebuilds the engine's `Assembly` from)."""

    facts: list[ScoredOut]
    preferences: list[ScoredOut]
    context: list[ScoredOut]
    used_ids: list[str]


class AssemblyOut(BaseModel):
    plan: PlanOut
    plan_mode: str
    facts: list[AssemblyItemOut]
    preferences: list[AssemblyItemOut]
    context: list[AssemblyItemOut]
    prompt: str
    tokens: int
    budget_tokens: int
    dropped: list[str]
    withheld: list[WithheldOut]
    selected: AssemblySelectedOut


class IngestIn(_In):
    messages: list[Message] = Field(min_length=1, max_length=DEFAULT_LIMITS.max_messages)
    session_id: str | None = Field(None, max_length=256)
    change_set_id: str | None = Field(None, max_length=128)
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ExtractIn(_In):
    messages: list[Message | str] = Field(min_length=1, max_length=DEFAULT_LIMITS.max_messages,
                                          description="{role, content} messages, or strings (user turns)")


class CandidateOut(BaseModel):
    key: str
    kind: str
    value: Any = None
    confidence: float
    evidence: str = ""
    message_index: int | None = None
    method: str = "pattern"
    canonical: Any = None  # a normalised form beside the user's words (never instead of them)


class CandidatesOut(BaseModel):
    items: list[CandidateOut]


class ResultsOut(BaseModel):
    results: list[WriteResultOut]


class OptionOut(BaseModel):
    value: Any = None
    label: str


class QuestionOut(BaseModel):
    """An onboarding question rendered in one language, for one user."""

    id: str
    key: str
    kind: str
    question: str
    options: list[OptionOut]
    multiple: bool
    language: str
    answered: bool


class QuestionListOut(BaseModel):
    items: list[QuestionOut]


class QuestionDefOut(BaseModel):
    """A stored onboarding question: its text and option labels per language."""

    id: str
    key: str
    kind: str
    text: dict[str, str]
    options: dict[str, dict[str, str]]
    multiple: bool


class QuestionDefListOut(BaseModel):
    items: list[QuestionDefOut]


class QuestionsIn(_In):
    questions: list[dict[str, Any]] = Field(max_length=200, description="{id, key, kind, text: {zh, en}, "
                                                                        "options?, multiple?}")
    now: Time | None = NOW_FIELD


class AnswersIn(_In):
    answers: dict[str, Any] = Field(description="{question id or field key: answer}")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class PushbackIn(_In):
    key: MemoryKey
    message: str = Field("", max_length=64_000)
    value: Any = None
    now: Time | None = NOW_FIELD


class VerificationOut(BaseModel):
    id: str
    user_id: str
    key: str
    kind: str
    value: Any = None
    source: str
    confidence: float
    evidence_count: int
    status: str
    question: dict[str, str]
    created_at: float


class VerificationListOut(BaseModel):
    items: list[VerificationOut]


class PushbackOut(BaseModel):
    key: str
    count: int
    threshold: int
    window_seconds: float
    verification: VerificationOut | None = None


class VerificationIn(_In):
    value: Any = Field(None, description="The value the user confirmed, when it differs from the hypothesis")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class RejectIn(_In):
    now: Time | None = NOW_FIELD


class RejectedOut(BaseModel):
    rejected: bool


# -- privacy ------------------------------------------------------------------------------------------

class GrantIn(_In):
    fields: list[str] | None = Field(None, description="Field keys to open; or give `level`")
    level: str | None = Field(None, description="L2 or L3: every field up to this sensitivity")
    purpose: str = Field(max_length=500)
    ttl_seconds: float = Field(1800.0, strict=True, allow_inf_nan=False, gt=0, le=366 * 86400)
    grantee: str | None = Field(None, max_length=256, description="Only this reader (an API key id: key:<id>)")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class GrantOut(BaseModel):
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


class GrantListOut(BaseModel):
    items: list[GrantOut]


class RevokedOut(BaseModel):
    revoked: bool


class ConsentIn(_In):
    fields: list[str] = Field(min_length=1, max_length=200)
    domain: str = Field(max_length=128)
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class OptInIn(_In):
    fields: list[str] | None = Field(None, min_length=1, max_length=200)
    domain: str | None = Field(None, max_length=128)
    request_id: str | None = Field(None, max_length=128, description="Approve this consent request instead "
                                                                      "(a user token of the user, or an admin key)")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ConsentOut(BaseModel):
    fields: list[str]


class ConsentRequestIn(_In):
    fields: list[str] = Field(min_length=1, max_length=20, description="The withheld field keys to ask for")
    purpose: str = Field(min_length=1, max_length=500, description="What they are for, shown to the user")
    ttl_seconds: float = Field(1800.0, strict=True, allow_inf_nan=False, gt=0, le=7 * 86400,
                               description="How long the grant lasts once approved")
    domain: str | None = Field(None, max_length=64, description="The reader's domain (opt-in fields)")
    session_id: str | None = Field(None, max_length=256, description="The asking session (a decline lasts for it)")
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class NoticeOut(BaseModel):
    id: str
    key: str
    at: float
    domain: str
    local_memory_id: str
    remote_memory_id: str
    questions: dict[str, str]


class NoticeListOut(BaseModel):
    items: list[NoticeOut]


class KeepLocalIn(_In):
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ConsentAnswerIn(_In):
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class ConsentRequestOut(BaseModel):
    id: str
    tenant: str
    user_id: str
    fields: list[str]
    purpose: str
    ttl_seconds: float
    status: Literal["pending", "approved", "declined"]
    created_at: float
    expires_at: float
    questions: dict[str, str]
    domain: str | None = None
    session_id: str | None = None
    requested_by: str | None = None
    decided_at: float | None = None
    decided_by: str | None = None
    grant_id: str | None = None


class ConsentRequestListOut(BaseModel):
    items: list[ConsentRequestOut]


class UsersOut(BaseModel):
    items: list[str]
    next_after: str | None = None


class WithdrawnOut(BaseModel):
    removed: int


class ExportFieldOut(BaseModel):
    current: MemoryOut | None = None
    history: list[MemoryOut]


class ExportDocOut(BaseModel):
    key: str
    value: dict[str, Any]


class ExportCountsOut(BaseModel):
    fields: int
    versions: int


class ExportOut(BaseModel):
    format: str
    tenant: str
    user_id: str
    exported_at: float
    fields: dict[str, ExportFieldOut]
    documents: dict[str, list[ExportDocOut]]
    counts: ExportCountsOut


class RedactIn(_In):
    text: str = Field(max_length=1_000_000)
    placeholder: str | None = Field(None, max_length=64)


class RedactOut(BaseModel):
    text: str
    findings: dict[str, int]


# -- contracts ----------------------------------------------------------------------------------------

class ContractOut(BaseModel):
    key: str
    kind: str
    description: str = ""
    aliases: list[str] = Field(default_factory=list)
    sensitivity: str
    domain: str
    sharing: str
    ttl_seconds: float | None = None
    ttl_override: bool = False
    half_life_seconds: float | None = None
    default_importance: float | None = None
    authority: list[str] | None = None
    storable: bool = True
    live: bool = False
    resolver: str | None = None
    enabled: bool = True
    standing: bool = False
    allowed_pii: list[str] = Field(default_factory=list)
    questions: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="What people read instead of the key: "
                                                                     "{zh, en}")
    version: int | None = None


class ContractListOut(BaseModel):
    items: list[ContractOut]


class ContractVersionOut(BaseModel):
    version: int | None = None
    at: float
    change: str
    actor: str | None = None
    contract: ContractOut | None = None


class ContractHistoryOut(BaseModel):
    items: list[ContractVersionOut]


class DeletedOut(BaseModel):
    deleted: bool


class PolicyIn(_In):
    policy: str = Field(description="accept | reject", max_length=16)
    now: Time | None = NOW_FIELD
    actor: str | None = ACTOR_FIELD


class PolicyOut(BaseModel):
    policy: str


# -- admin --------------------------------------------------------------------------------------------

class PurgeIn(_In):
    now: Time | None = NOW_FIELD
    retention_days: float | None = Field(None, strict=True, allow_inf_nan=False, ge=0, le=MAX_TTL_SECONDS / 86_400,
                                         description="At least the server's retention_days")


class PurgeOut(BaseModel):
    purged: int


# -- the user model (docs/usermodel.md) ----------------------------------------------------------------

class SignalIn(_In):
    key: MemoryKey
    value: Any = Field(description="The value the signal points to (in the user's words)")
    agree: bool = Field(True, description="True: a signal for the value; false: one against it")
    message: str = Field("", max_length=64_000, description="The message the signal came from (kept redacted)")
    now: Time | None = NOW_FIELD


class SignalOut(BaseModel):
    key: str
    value: Any = None
    agree: int
    contradict: int
    confidence: float
    threshold: int
    mode: str
    inference: dict[str, Any] | None = None
    suppressed_until: float | None = None


class InferencePolicyIn(_In):
    mode: Literal["confirm", "active"] | None = Field(None, description="confirm | active")
    threshold: int | None = Field(None, strict=True, ge=1, le=100)
    suppress_days: float | None = Field(None, strict=False, allow_inf_nan=False, ge=0, le=3650)
    actor: str | None = ACTOR_FIELD
    now: Time | None = NOW_FIELD


class InferencePolicyOut(BaseModel):
    mode: str
    threshold: int
    suppress_days: float


class DeriveRuleOut(BaseModel):
    id: str
    when: dict[str, list[str]]
    then_key: str
    then: dict[str, str]
    version: int
    status: str
    proposed_by: str


class DeriveRuleListOut(BaseModel):
    items: list[DeriveRuleOut]


class UserModelOut(BaseModel):
    tenant: str
    user_id: str
    language: str
    facts: list[dict[str, Any]]
    preferences: list[dict[str, Any]]
    context: list[dict[str, Any]]
    inferred: list[dict[str, Any]]
    derived: list[dict[str, Any]]
    procedures: list[dict[str, Any]]
    open_questions: list[dict[str, Any]]
    withheld: list[str]


class ProcedureIn(_In):
    text: str = Field(min_length=1, max_length=2000)
    user_id: UserId | None = Field(None, description="The user it is for; omit for every user of the tenant")
    evidence: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=10)
    proposed_by: str = Field("api", min_length=1, max_length=200)
    now: Time | None = NOW_FIELD


class ReviewIn(_In):
    decision: Literal["approve", "edit", "reject"]
    evaluation: dict[str, Any] | None = Field(None, description="{name, passed, result}: needed to approve")
    text: str | None = Field(None, min_length=1, max_length=2000)
    actor: str | None = ACTOR_FIELD
    now: Time | None = NOW_FIELD


class RollbackIn(_In):
    actor: str | None = ACTOR_FIELD
    now: Time | None = NOW_FIELD


class ProcedureOut(BaseModel):
    id: str
    user_id: str | None = None
    text: str
    status: str
    evidence: list[dict[str, Any]]
    proposed_by: str
    created_at: float
    history: list[dict[str, Any]]
    evaluation: dict[str, Any] | None = None


class ProcedureListOut(BaseModel):
    items: list[ProcedureOut]


class SuggestIn(_In):
    now: Time | None = NOW_FIELD


# -- webhooks (docs/webhooks.md) --------------------------------------------------------------------------

WebhookEvent = Literal["write", "revert", "forget", "consent"]  # = engine.webhooks.EVENT_TYPES


class WebhookIn(_In):
    url: str = Field(max_length=2048, description="The receiver: an http(s) URL that accepts signed JSON POSTs",
                     examples=["https://example.com/usermem-hook"])
    events: list[WebhookEvent] | None = Field(None, min_length=1, max_length=4,
                                              description="write | revert | forget | consent (default: all)")
    secret: str | None = Field(None, min_length=16, max_length=256,
                               description="HMAC-SHA256 signing secret (default: a random one); returned once")
    actor: str | None = ACTOR_FIELD
    now: Time | None = NOW_FIELD


class WebhookOut(BaseModel):
    id: str
    tenant: str
    url: str
    events: list[str]
    created_at: float
    enabled: bool
    failures: int = Field(description="Failed deliveries in a row (reset by a delivered one or enable)")
    disabled_reason: str | None = None


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(description="The signing secret: returned by this response only, never again")


class WebhookListOut(BaseModel):
    items: list[WebhookOut]


class WebhookActIn(_In):
    actor: str | None = ACTOR_FIELD
    now: Time | None = NOW_FIELD


class WebhookPingIn(_In):
    now: Time | None = NOW_FIELD


class AttemptOut(BaseModel):
    at: float
    status: int | None = None
    error: str | None = None


class DeliveryOut(BaseModel):
    id: str
    webhook_id: str
    type: str = Field(description="write | revert | forget | consent | ping")
    created_at: float
    payload: dict[str, Any] = Field(description="The JSON body sent (values of L1 fields only)")
    state: str = Field(description="pending | delivered | failed (gave up) | skipped (subscription gone or "
                                   "disabled)")
    next_at: float
    attempts: list[AttemptOut]


class DeliveryListOut(BaseModel):
    items: list[DeliveryOut]
