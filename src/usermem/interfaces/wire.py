"""JSON forms of the engine's result types, shared by the HTTP API (encode) and the client (decode).

Decoding rebuilds the same dataclasses the embedded `Memory` returns, so code written against one
works against the other.
"""

from __future__ import annotations

from typing import Any

from usermem.model import AuditEvent, Kind, MemoryRecord, Op, Reason, ScoredMemory, Source, WriteResult

_RECORD_FIELDS = tuple(MemoryRecord.__dataclass_fields__)


def record_to_json(r: MemoryRecord) -> dict[str, Any]:
    return r.to_dict()


def record_from_json(d: dict[str, Any]) -> MemoryRecord:
    values: dict[str, Any] = {name: d.get(name) for name in _RECORD_FIELDS if name in d}
    values["kind"] = Kind(d["kind"])
    values["source"] = Source(d["source"])
    values["retracted"] = bool(d.get("retracted", False))
    return MemoryRecord(**values)


def result_to_json(r: WriteResult) -> dict[str, Any]:
    return r.to_dict()


def result_from_json(d: dict[str, Any]) -> WriteResult:
    return WriteResult(op=Op(d["op"]), reason=Reason(d["reason"]) if d.get("reason") else None,
                       memory=record_from_json(d["memory"]) if d.get("memory") else None,
                       detail=d.get("detail"), existing_id=d.get("existing_id"))


def scored_to_json(s: ScoredMemory) -> dict[str, Any]:
    return {"memory": s.memory.to_dict(), "score": s.score, "weight": s.weight, "relevance": s.relevance,
            "needs_confirmation": s.needs_confirmation, "question": s.question}


def scored_from_json(d: dict[str, Any]) -> ScoredMemory:
    return ScoredMemory(memory=record_from_json(d["memory"]), score=float(d["score"]), weight=float(d["weight"]),
                        relevance=d.get("relevance"), needs_confirmation=bool(d.get("needs_confirmation")),
                        question=d.get("question"))


def audit_to_json(e: AuditEvent) -> dict[str, Any]:
    return {"seq": e.seq, "tenant": e.tenant, "at": e.at, "action": e.action, "user_id": e.user_id, "key": e.key,
            "memory_id": e.memory_id, "op": e.op, "reason": e.reason, "actor": e.actor, "detail": dict(e.detail)}


def audit_from_json(d: dict[str, Any]) -> AuditEvent:
    return AuditEvent(tenant=d["tenant"], at=float(d["at"]), action=d["action"], user_id=d.get("user_id"),
                      key=d.get("key"), memory_id=d.get("memory_id"), op=d.get("op"), reason=d.get("reason"),
                      actor=d.get("actor"), detail=d.get("detail") or {}, seq=d.get("seq"))
