"""Column list and row <-> record mapping shared by the SQL backends.

A row is the columns of `COLUMNS` in order (PostgreSQL appends `value_raw`); only how the value is
encoded differs per backend (JSON text in SQLite; JSONB, or UTF-8 JSON bytes, in PostgreSQL), so the
backends decode or encode the value and these functions do the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from usermem.model import KIND_BY_VALUE, SOURCE_BY_VALUE, AuditEvent, MemoryRecord
from usermem.policy.validate import canonical_json

COLUMNS: tuple[str, ...] = (
    "id", "tenant", "user_id", "kind", "key", "value", "source", "confidence", "importance", "created_at",
    "expires_at", "last_used_at", "last_confirmed_at", "prev_version_id", "superseded_by", "superseded_at",
    "deleted_at", "session_id", "client_id", "event_at", "change_set_id", "actor", "retracted",
    "canonical",
)
SELECT_LIST = ", ".join(COLUMNS)
VALUE = COLUMNS.index("value")


# `canonical_json` with NaN and infinities allowed (what json.dumps with these arguments builds per call).
_NAN_OK = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=True)


def dumps_value(value: Any, *, allow_nan: bool = True) -> str:
    """The canonical JSON text of a value (what SQLite stores, what PostgreSQL keeps when JSONB cannot;
    PostgreSQL refuses NaN and infinities, `allow_nan=False`: then it is `policy.validate.canonical_json`)."""
    return _NAN_OK.encode(value) if allow_nan else canonical_json(value)


# A JSON text that is one string without escapes: what most stored values are. The JSON grammar allows any
# character in a string but '"', '\\' and U+0000-U+001F unescaped, so json.loads of such a text is the text
# between its quotes; anything else (whitespace around it, escapes, other JSON) goes through json.loads.
_PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f]*"')


def loads_value(text: str | bytes) -> Any:
    """json.loads(text), without the decoder for a plain string (the list hot path decodes one value per
    record; tests/test_record_rows.py checks it against json.loads)."""
    return text[1:-1] if type(text) is str and _PLAIN_STRING.fullmatch(text) else json.loads(text)


# Each slot of MemoryRecord set through its descriptor: a frozen dataclass's __init__ sets every field with
# object.__setattr__, about twice the cost, and does nothing else (MemoryRecord has no __post_init__), so a row
# from our own store is built without it (issue 19: list 100). The order is checked at import.
_RECORD_ORDER = ("id", "tenant", "user_id", "kind", "key", "value", "source", "confidence", "importance",
                 "created_at", "expires_at", "last_used_at", "last_confirmed_at", "prev_version_id",
                 "superseded_by", "superseded_at", "deleted_at", "session_id", "client_id", "event_at",
                 "change_set_id", "actor", "retracted", "canonical")
if tuple(f.name for f in fields(MemoryRecord)) != _RECORD_ORDER or hasattr(MemoryRecord, "__post_init__"):
    raise ImportError("store/rows.py builds MemoryRecord slot by slot: update _RECORD_ORDER and record_with_value")
(_S_ID, _S_TENANT, _S_USER, _S_KIND, _S_KEY, _S_VALUE, _S_SOURCE, _S_CONFIDENCE, _S_IMPORTANCE, _S_CREATED,
 _S_EXPIRES, _S_USED, _S_CONFIRMED, _S_PREV, _S_SUPERSEDED_BY, _S_SUPERSEDED_AT, _S_DELETED, _S_SESSION,
 _S_CLIENT, _S_EVENT, _S_CHANGE_SET, _S_ACTOR, _S_RETRACTED, _S_CANONICAL) = (
    getattr(MemoryRecord, name).__set__ for name in _RECORD_ORDER)
_new = object.__new__


def record_with_value(row: Sequence[Any], value: Any) -> MemoryRecord:
    """The record of a row whose value the backend has already decoded (the same record as
    MemoryRecord(row[0], ..., value, ...) would be, built without the frozen __init__)."""
    r: MemoryRecord = _new(MemoryRecord)
    _S_ID(r, row[0])
    _S_TENANT(r, row[1])
    _S_USER(r, row[2])
    _S_KIND(r, KIND_BY_VALUE[row[3]])
    _S_KEY(r, row[4])
    _S_VALUE(r, value)
    _S_SOURCE(r, SOURCE_BY_VALUE[row[6]])
    _S_CONFIDENCE(r, row[7])
    _S_IMPORTANCE(r, row[8])
    _S_CREATED(r, row[9])
    _S_EXPIRES(r, row[10])
    _S_USED(r, row[11])
    _S_CONFIRMED(r, row[12])
    _S_PREV(r, row[13])
    _S_SUPERSEDED_BY(r, row[14])
    _S_SUPERSEDED_AT(r, row[15])
    _S_DELETED(r, row[16])
    _S_SESSION(r, row[17])
    _S_CLIENT(r, row[18])
    _S_EVENT(r, row[19])
    _S_CHANGE_SET(r, row[20])
    _S_ACTOR(r, row[21])
    _S_RETRACTED(r, bool(row[22]))
    _S_CANONICAL(r, None if row[23] is None else json.loads(row[23]))
    return r


def record_from_row(row: Sequence[Any], value_is_json_text: bool = True) -> MemoryRecord:
    return record_with_value(row, loads_value(row[5]) if value_is_json_text else row[5])


def record_params(r: MemoryRecord, value: Any, retracted: Any, *extra: Any) -> tuple[Any, ...]:
    """The parameters of an INSERT of `COLUMNS` (+ `extra` columns), with the encoded value."""
    return (
        r.id, r.tenant, r.user_id, r.kind.value, r.key, value, r.source.value, r.confidence, r.importance,
        r.created_at, r.expires_at, r.last_used_at, r.last_confirmed_at, r.prev_version_id, r.superseded_by,
        r.superseded_at, r.deleted_at, r.session_id, r.client_id, r.event_at, r.change_set_id, r.actor,
        retracted, None if r.canonical is None else dumps_value(r.canonical, allow_nan=False), *extra,
    )


def row_from_record(r: MemoryRecord, value_text: str | None = None) -> tuple[Any, ...]:
    """SQLite's INSERT parameters: the value as JSON text, retracted as 0/1."""
    return record_params(r, value_text if value_text is not None else dumps_value(r.value), int(r.retracted))


def audit_params(e: AuditEvent, detail: str) -> tuple[Any, ...]:
    """The parameters of the audit INSERT (columns sql.AUDIT_COLUMNS without seq)."""
    return (e.tenant, e.at, e.action, e.user_id, e.key, e.memory_id, e.op, e.reason, e.actor, detail)


def audit_from_row(row: Sequence[Any], detail: dict[str, Any]) -> AuditEvent:
    """The event of an audit row (columns sql.AUDIT_COLUMNS) whose detail the backend has decoded."""
    return AuditEvent(tenant=row[1], at=row[2], action=row[3], user_id=row[4], key=row[5], memory_id=row[6],
                      op=row[7], reason=row[8], actor=row[9], detail=detail, seq=row[0])
