"""Column list and row <-> record mapping shared by the SQL backends.

A row is the columns of `COLUMNS` in order (PostgreSQL appends `value_raw`); only how the value is
encoded differs per backend (JSON text in SQLite; JSONB, or UTF-8 JSON bytes, in PostgreSQL), so the
backends decode or encode the value and these functions do the rest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from usermem.model import AuditEvent, Kind, MemoryRecord, Source

COLUMNS: tuple[str, ...] = (
    "id", "tenant", "user_id", "kind", "key", "value", "source", "confidence", "importance", "created_at",
    "expires_at", "last_used_at", "last_confirmed_at", "prev_version_id", "superseded_by", "superseded_at",
    "deleted_at", "session_id", "client_id", "event_at", "change_set_id", "actor", "retracted",
    "canonical",
)
SELECT_LIST = ", ".join(COLUMNS)
VALUE = COLUMNS.index("value")

_KINDS = {k.value: k for k in Kind}
_SOURCES = {s.value: s for s in Source}


def dumps_value(value: Any, *, allow_nan: bool = True) -> str:
    """The canonical JSON text of a value (what SQLite stores, what PostgreSQL keeps when JSONB cannot;
    PostgreSQL refuses NaN and infinities, `allow_nan=False`)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=allow_nan)


def record_with_value(row: Sequence[Any], value: Any) -> MemoryRecord:
    """The record of a row whose value the backend has already decoded."""
    return MemoryRecord(
        row[0], row[1], row[2], _KINDS[row[3]], row[4], value, _SOURCES[row[6]], row[7], row[8], row[9],
        row[10], row[11], row[12], row[13], row[14], row[15], row[16], row[17], row[18], row[19], row[20],
        row[21], bool(row[22]), None if row[23] is None else json.loads(row[23]),
    )


def record_from_row(row: Sequence[Any], value_is_json_text: bool = True) -> MemoryRecord:
    return record_with_value(row, json.loads(row[5]) if value_is_json_text else row[5])


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
