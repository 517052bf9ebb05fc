"""Column list and row <-> record mapping shared by the SQL backends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from usermem.model import Kind, MemoryRecord, Source

COLUMNS: tuple[str, ...] = (
    "id", "tenant", "user_id", "kind", "key", "value", "source", "confidence", "importance", "created_at",
    "expires_at", "last_used_at", "last_confirmed_at", "prev_version_id", "superseded_by", "superseded_at",
    "deleted_at", "session_id", "client_id", "event_at", "change_set_id", "actor", "retracted",
)
SELECT_LIST = ", ".join(COLUMNS)

_KINDS = {k.value: k for k in Kind}
_SOURCES = {s.value: s for s in Source}


def record_from_row(row: Sequence[Any], value_is_json_text: bool = True) -> MemoryRecord:
    value = row[5]
    if value_is_json_text:
        value = json.loads(value)
    return MemoryRecord(
        row[0], row[1], row[2], _KINDS[row[3]], row[4], value, _SOURCES[row[6]], row[7], row[8], row[9],
        row[10], row[11], row[12], row[13], row[14], row[15], row[16], row[17], row[18], row[19], row[20],
        row[21], bool(row[22]),
    )


def row_from_record(r: MemoryRecord, value_text: str | None = None) -> tuple[Any, ...]:
    value = value_text if value_text is not None else json.dumps(
        r.value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        r.id, r.tenant, r.user_id, r.kind.value, r.key, value, r.source.value, r.confidence, r.importance,
        r.created_at, r.expires_at, r.last_used_at, r.last_confirmed_at, r.prev_version_id, r.superseded_by,
        r.superseded_at, r.deleted_at, r.session_id, r.client_id, r.event_at, r.change_set_id, r.actor,
        int(r.retracted),
    )
