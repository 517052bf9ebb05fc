"""Plain typed records shared by every layer.

Nothing here does I/O or holds business rules beyond the static registries that
describe memory kinds and sources; policy and engine decide what to do with them.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from operator import attrgetter
from typing import Any, TypeAlias, TypeVar

T = TypeVar("T")
# json.dumps(..., ensure_ascii=False, sort_keys=True) without building the encoder on every call (AuditEvent).
_DETAIL_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


_RAND_74 = (1 << 74) - 1
_VARIANT = 0b11 << 62


def new_id() -> str:
    """Time-ordered unique ids (UUIDv7 layout), so ids sort roughly by creation across backends."""
    ms = time.time_ns() // 1_000_000
    # The low 74 bits of uuid.uuid4() from the same 16 random bytes (its variant bits 62-63 set to 0b10),
    # without building two UUID objects (tests/test_write_fast_path.py checks the ids are identical).
    rand = (int.from_bytes(os.urandom(16)) & _RAND_74 & ~_VARIANT) | (0b10 << 62)
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return format(value, "032x")  # uuid.UUID(int=value).hex: 32 lower-case hex digits

JSONValue: TypeAlias = Any
"""A JSON-serialisable value (str, number, bool, None, list, dict)."""

DAY = 86_400.0
HOUR = 3_600.0


class Kind(StrEnum):
    """What a memory is about. `profile` is accepted as an alias of `fact`."""

    FACT = "fact"
    PREFERENCE = "preference"
    SITUATION = "situation"
    EPISODE = "episode"
    CONTEXT = "context"


KIND_ALIASES: Mapping[str, Kind] = {"profile": Kind.FACT}


class MemoryClass(StrEnum):
    """CoALA memory classes (procedural memory is deliberately not offered)."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    WORKING = "working"


class Source(StrEnum):
    """Who asserted a value. Declaration order is authority order, highest first."""

    SYSTEM = "system"
    AGENT_CONFIRMED = "agent_confirmed"
    USER_CONFIRMED = "user_confirmed"
    ONBOARDING = "onboarding"
    EXTRACTED = "extracted"
    INFERRED = "inferred"


# Higher number = more authority. Derived from declaration order so there is one list to edit.
SOURCE_RANK: Mapping[Source, int] = {s: len(Source) - i for i, s in enumerate(Source)}


class Op(StrEnum):
    ADD = "ADD"
    UPDATE = "UPDATE"
    NOOP = "NOOP"
    REJECT = "REJECT"


class Reason(StrEnum):
    """Stable reason codes for write decisions. Values are part of the public API."""

    INVALID_INPUT = "invalid_input"
    FORBIDDEN_KEY = "forbidden_key"
    SENSITIVE_VALUE = "sensitive_value"
    LOWER_PRIORITY_SOURCE = "lower_priority_source"
    FIELD_DISABLED = "field_disabled"
    UNKNOWN_FIELD = "unknown_field"
    LIVE_FIELD = "live_field"
    SESSION_REQUIRED = "session_required"
    INSTRUCTION_LIKE = "instruction_like"


@dataclass(frozen=True, slots=True)
class KindSpec:
    """Defaults for one kind. Field contracts may override ttl, half-life and importance per key."""

    kind: Kind
    memory_class: MemoryClass
    ttl_seconds: float | None
    default_importance: float
    half_life_seconds: float
    # Volatile kinds are flagged for confirmation / dropped by weight; the others only rank by it.
    volatile: bool
    session_bound: bool = False

    @property
    def decay_rate(self) -> float:
        """λ per second for weight = base · e^(−λ·age)."""
        return math.log(2) / self.half_life_seconds


# Half-lives chosen to match the seed's intent (docs/lifecycle.md has the derivation):
#  fact: ~5 % loss in 10 years   -> half-life ≈ 135 years
#  preference: 37 % after 30 days -> time constant 30 d, half-life = 30 d · ln 2 ≈ 20.8 d
#  context: near zero after an hour -> half-life 6 minutes (weight ≈ 0.001 after 1 h)
#  situation/episode: rank by recency only, 30-day half-life as in seed 000.
_TEN_YEARS = 3650 * DAY
KIND_REGISTRY: dict[Kind, KindSpec] = {
    Kind.FACT: KindSpec(
        Kind.FACT, MemoryClass.SEMANTIC, None, 0.9, _TEN_YEARS * math.log(2) / -math.log(0.95), False
    ),
    Kind.PREFERENCE: KindSpec(Kind.PREFERENCE, MemoryClass.SEMANTIC, None, 0.8, 30 * DAY * math.log(2), True),
    Kind.SITUATION: KindSpec(Kind.SITUATION, MemoryClass.EPISODIC, 30 * DAY, 0.7, 30 * DAY, False),
    Kind.EPISODE: KindSpec(Kind.EPISODE, MemoryClass.EPISODIC, 180 * DAY, 0.6, 30 * DAY, False),
    # Context is retracted when its session closes; the one-day TTL lets purge remove it for good.
    Kind.CONTEXT: KindSpec(Kind.CONTEXT, MemoryClass.WORKING, DAY, 0.5, 0.1 * HOUR, True, session_bound=True),
}


# Each enum member by its text, looked up without Enum.__call__ (the write path and the row decoders read these).
KIND_BY_VALUE: Mapping[str, Kind] = {k.value: k for k in Kind}
SOURCE_BY_VALUE: Mapping[str, Source] = {s.value: s for s in Source}
_KIND_TEXT: Mapping[str, Kind] = {**KIND_BY_VALUE, **KIND_ALIASES}


def parse_kind(value: str | Kind) -> Kind:
    """Kind from a string, accepting aliases. Raises ValueError for unknown kinds."""
    if isinstance(value, Kind):
        return value
    exact = _KIND_TEXT.get(value) if type(value) is str else None
    if exact is not None:  # already lower case without spaces: what strip().lower() would look up
        return exact
    lowered = value.strip().lower()
    return _KIND_TEXT.get(lowered) or Kind(lowered)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One version of one memory. Versions of a key form a chain via prev_version_id/superseded_by."""

    id: str
    tenant: str
    user_id: str
    kind: Kind
    key: str
    value: JSONValue
    source: Source
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
    # When the remembered thing happened in the world (episodes); created_at is when we learned it.
    event_at: float | None = None
    change_set_id: str | None = None
    actor: str | None = None
    # A retraction is a version recording that the user denied the previous value.
    retracted: bool = False
    # A normalised form of `value` beside it (reply_length "简洁" -> "short", a city's English name); the
    # user's words stay in `value`. None when the writer gave none.
    canonical: JSONValue = None

    @property
    def memory_class(self) -> MemoryClass:
        return KIND_REGISTRY[self.kind].memory_class

    @property
    def is_current(self) -> bool:
        return self.superseded_by is None and self.deleted_at is None

    def is_live(self, now: float) -> bool:
        """Current, not retracted and not expired at `now`."""
        return self.is_current and not self.retracted and (self.expires_at is None or self.expires_at > now)

    def with_changes(self, **changes: Any) -> MemoryRecord:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        # Every field by name, enums as their values (kind and source are enums by type; value and canonical
        # hold JSON, which an embedded caller may have given as an enum member). One attrgetter call
        # instead of a getattr and a check per field: this runs for every record of every HTTP answer.
        d = dict(zip(_RECORD_FIELDS, _RECORD_VALUES(self), strict=True))
        d["kind"], d["source"] = _plain(self.kind), _plain(self.source)
        d["value"], d["canonical"] = _plain(self.value), _plain(self.canonical)
        return d


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


_RECORD_FIELDS = tuple(MemoryRecord.__dataclass_fields__)
_RECORD_VALUES = attrgetter(*_RECORD_FIELDS)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Outcome of one write. `memory` is the current record after the write (None on REJECT)."""

    op: Op
    reason: Reason | None = None
    memory: MemoryRecord | None = None
    detail: str | None = None
    # For NOOP/REJECT against an existing version: that version's id.
    existing_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.op is not Op.REJECT

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op.value,
            "reason": self.reason.value if self.reason else None,
            "detail": self.detail,
            "existing_id": self.existing_id,
            "memory": self.memory.to_dict() if self.memory else None,
        }


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """One write as a value, for batches and for the interfaces."""

    kind: str
    key: str
    value: JSONValue
    source: str = Source.EXTRACTED.value
    importance: float | None = None
    confidence: float | None = None
    session_id: str | None = None
    client_id: str | None = None
    event_at: float | None = None
    ttl_seconds: float | None = None
    canonical: JSONValue = None  # a normalised form beside `value`, never instead of it


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory proposed by extraction from a conversation. Proposing writes nothing; `ingest` writes it.

    `evidence` is the user message that supports it and `message_index` its position in the
    conversation; `method` says who proposed it ("pattern", "model" or "llm"). `value` is the user's own
    words; `canonical` is an optional normalised form beside it (reply_length "简洁" -> "short", a city's
    English name), never instead of it.
    """

    key: str
    kind: Kind
    value: JSONValue
    confidence: float
    evidence: str = ""
    message_index: int | None = None
    method: str = "pattern"
    canonical: JSONValue = None

    def to_request(self, source: str = "extracted", session_id: str | None = None) -> WriteRequest:
        return WriteRequest(kind=self.kind.value, key=self.key, value=self.value, source=source,
                            confidence=self.confidence, session_id=session_id, canonical=self.canonical)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind.value, "value": self.value, "confidence": self.confidence,
                "evidence": self.evidence, "message_index": self.message_index, "method": self.method,
                "canonical": self.canonical}


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One append-only audit entry. Never carries a memory's value."""

    tenant: str
    at: float
    action: str
    user_id: str | None = None
    key: str | None = None
    memory_id: str | None = None
    op: str | None = None
    reason: str | None = None
    actor: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    seq: int | None = None

    def detail_json(self) -> str:
        return _DETAIL_JSON.encode(dict(self.detail))


@dataclass(frozen=True, slots=True)
class EventWindow:
    """An event-time window `[start, end)` (unix seconds) that a time expression in a recall query named
    ("上个月", "last week"); `expression` is the words that named it."""

    start: float
    end: float
    expression: str

    def contains(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A recalled memory with the scores that ranked it."""

    memory: MemoryRecord
    score: float
    weight: float
    relevance: float | None = None
    needs_confirmation: bool = False
    question: str | None = None
    # The event-time window recall applied because the query named one (relevance/timewindow.py), else None.
    time_window: EventWindow | None = None


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """Emitted after a change commits: caches, tiers, indexes and other instances react to these."""

    tenant: str
    user_id: str
    action: str  # "write" | "forget" | "forget_user" | "touch" | "purge" | "session_closed"
    at: float
    keys: tuple[str, ...] = ()
    memory_ids: tuple[str, ...] = ()
    client_id: str | None = None
    causality_id: str | None = None
    records: tuple[MemoryRecord, ...] = ()


class WithheldReason(StrEnum):
    """Why a field the user has a value for was left out of a recall or an assembly."""

    NEEDS_GRANT = "needs_grant"  # L2/L3 (or another domain's opt-in field): the user can consent
    DISABLED = "disabled"  # the operator disabled the field
    PRIVATE_TO_DOMAIN = "private_to_domain"  # another domain's private field: never shared
    INSTRUCTION_LIKE = "instruction_like"  # (assembly) the value reads as an instruction (policy/injection.py)


class Withheld(str):
    """A field left out of a result, and why — never its value.

    It *is* its key (a `str`), so code that treated withheld entries as keys keeps working
    (`"allergy" in result.withheld`); `.level`, `.reason`, `.question` (a consent question in the user's
    language, None when nothing can be asked), `.declined` (the user said no in this session: do not ask
    again) and `.request_id` (a pending consent request for it) say the rest. Immutable.
    """

    key: str
    level: str
    reason: WithheldReason
    question: str | None
    declined: bool
    request_id: str | None

    def __new__(cls, key: str, level: str = "L1", reason: str | WithheldReason = WithheldReason.NEEDS_GRANT,
                question: str | None = None, *, declined: bool = False,
                request_id: str | None = None) -> Withheld:
        self = super().__new__(cls, key)
        attrs = {"key": str(key), "level": str(level), "reason": WithheldReason(reason), "question": question,
                 "declined": bool(declined), "request_id": request_id}
        self.__dict__.update(attrs)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Withheld is immutable (cannot set {name!r})")

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ((self.key, self.level, self.reason.value, self.question),
                {"declined": self.declined, "request_id": self.request_id})

    def __repr__(self) -> str:
        return (f"Withheld(key={self.key!r}, level={self.level!r}, reason={self.reason.value!r}, "
                f"question={self.question!r}, declined={self.declined!r}, request_id={self.request_id!r})")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "level": self.level, "reason": self.reason.value, "question": self.question,
                "declined": self.declined, "request_id": self.request_id}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str) -> Withheld:
        if isinstance(d, str):  # an older server's assembly: keys withheld as instructions
            return cls(d, reason=WithheldReason.INSTRUCTION_LIKE)
        return cls(str(d["key"]), str(d.get("level") or "L1"), str(d.get("reason") or "needs_grant"),
                   d.get("question"), declined=bool(d.get("declined", False)), request_id=d.get("request_id"))


class Recalled(list[T]):
    """What `recall` / `recall_scored` return: the list of memories, best first, exactly as before — plus
    `withheld`, the fields the user has values for that this read may not see (never their values)."""

    withheld: tuple[Withheld, ...]

    def __init__(self, items: Iterable[T] = (), withheld: Iterable[Withheld] = ()) -> None:
        super().__init__(items)
        self.withheld = tuple(withheld)

    def __reduce__(self) -> Any:
        return (Recalled, (list(self), self.withheld))


@dataclass(frozen=True, slots=True)
class UserPage:
    """A page of a tenant's user ids (`Memory.users`); `next_after` continues it (None: the last page)."""

    users: list[str]
    next_after: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"items": list(self.users), "next_after": self.next_after}
