"""Request and response bodies of the HTTP API. Field names follow the Python API one to one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SOURCES = "system | agent_confirmed | user_confirmed | onboarding | extracted | inferred"
KINDS = "fact | preference | situation | episode | context (profile = fact)"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteItem(_In):
    kind: str = Field(description=KINDS, examples=["preference"], max_length=64)
    key: str = Field(description="[a-z0-9_.-]{1,64}", examples=["reply_length"], max_length=256)
    value: Any = Field(description="Any JSON value", examples=["concise"])
    source: str = Field("extracted", description=SOURCES, max_length=64)
    importance: float | None = Field(None, ge=0, le=1)
    confidence: float | None = Field(None, ge=0, le=1)
    session_id: str | None = Field(None, max_length=256)
    client_id: str | None = Field(None, max_length=256)
    event_at: float | None = Field(None, description="When it happened in the world (Unix seconds)")
    ttl_seconds: float | None = Field(None, gt=0)


class WriteIn(WriteItem):
    user_id: str = Field(max_length=256, examples=["u1"])
    now: float | None = Field(None, description="Decision time (Unix seconds); defaults to server time. For imports.")
    change_set_id: str | None = Field(None, max_length=128)
    actor: str | None = Field(None, max_length=128, description="Recorded after the key id in the audit log")


class BatchIn(_In):
    user_id: str = Field(max_length=256, examples=["u1"])
    writes: list[WriteItem] = Field(min_length=1)
    now: float | None = None
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


class RecallOut(BaseModel):
    user_id: str
    items: list[ScoredOut]


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


class Readiness(BaseModel):
    status: str
    checks: dict[str, str]
