"""The wire format of change events: subjects and the JSON payload (docs/events.md). Pure, no I/O.

Subject: ``<prefix>.<tenant token>.<user hash>.<action>``. The user id never appears in a subject
(subjects show up in monitoring, logs and ACLs); the user hash is an unkeyed SHA-256 prefix of
(tenant, user_id), stable across instances, so a receiver can filter on one user. It keeps ids out of
casual view; it is not anonymisation (a guessable id such as a phone number can be brute-forced).

Payload (JSON, UTF-8), schema version 1::

    {"v": 1, "event_id": str, "causality_id": str, "origin": str, "tenant": str, "user_id": str,
     "action": str, "at": float, "client_id": str | null, "keys": [str], "memory_ids": [str],
     "records": [{"id", "key", "kind", "source", "sensitivity", "client_id", "change_set_id",
                  "prev_version_id", "retracted", "deleted", "value"?}]}

Values: only of L1 fields whose contract does not mark them private, and only with
``nats_values = "l1"``. L2/L3 values never leave the store (they need a grant, every read is audited,
and a message bus has neither).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usermem.model import ChangeEvent, MemoryRecord
from usermem.policy.contracts import ContractSet, Sensitivity, Sharing

SCHEMA_VERSION = 1
ACTIONS = ("write", "forget", "forget_user", "touch", "purge", "session_closed", "confirm", "deny", "revert")
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        data = p.encode("utf-8")
        h.update(len(data).to_bytes(4, "big"))
        h.update(data)
    return h.hexdigest()[:24]


def tenant_token(tenant: str) -> str:
    """The tenant as one subject token: itself when it is a plain name, else `_` + hash.

    Tenants starting with `_` are reserved by usermem, so a hashed token cannot collide with a real one.
    """
    if _SAFE_TOKEN.match(tenant) and not tenant.startswith("_"):
        return tenant
    return "_" + _digest("tenant", tenant)


def user_hash(tenant: str, user_id: str) -> str:
    return _digest("user", tenant, user_id)


def action_token(action: str) -> str:
    return action if _SAFE_TOKEN.match(action) else "other"


def subject_for(prefix: str, tenant: str, user_id: str, action: str) -> str:
    return f"{prefix}.{tenant_token(tenant)}.{user_hash(tenant, user_id)}.{action_token(action)}"


def filter_subject(prefix: str, tenant: str | None = None, user_id: str | None = None) -> str:
    """The subject filter for everything, one tenant, or one user of a tenant."""
    if tenant is None:
        if user_id is not None:
            raise ValueError("filtering on a user needs its tenant")
        return f"{prefix}.>"
    if user_id is None:
        return f"{prefix}.{tenant_token(tenant)}.>"
    return f"{prefix}.{tenant_token(tenant)}.{user_hash(tenant, user_id)}.*"


def _value_allowed(record: MemoryRecord, contracts: ContractSet | None, values: str) -> tuple[str, bool]:
    contract = contracts.get(record.key) if contracts is not None else None
    sensitivity = contract.sensitivity if contract is not None else Sensitivity.L1
    private = contract is not None and contract.sharing is Sharing.PRIVATE
    return sensitivity.value, values == "l1" and sensitivity is Sensitivity.L1 and not private


def record_payload(record: MemoryRecord, contracts: ContractSet | None, values: str,
                   hlc: str | None = None) -> dict[str, Any]:
    sensitivity, with_value = _value_allowed(record, contracts, values)
    out: dict[str, Any] = {
        "id": record.id, "key": record.key, "kind": record.kind.value, "source": record.source.value,
        "sensitivity": sensitivity, "client_id": record.client_id, "change_set_id": record.change_set_id,
        "prev_version_id": record.prev_version_id, "retracted": record.retracted,
        "deleted": record.deleted_at is not None,
    }
    if hlc is not None:  # federation (issue 17): what a receiver needs to rebuild the version, and its clock
        out.update({"hlc": hlc, "confidence": record.confidence, "importance": record.importance,
                    "created_at": record.created_at, "expires_at": record.expires_at, "event_at": record.event_at})
    if with_value and not record.retracted and record.deleted_at is None:
        out["value"] = record.value
        if hlc is not None and record.canonical is not None:
            out["canonical"] = record.canonical
    return out


def to_payload(event: ChangeEvent, *, event_id: str, origin: str, contracts: ContractSet | None,
               values: str = "l1", domain: str | None = None,
               hlcs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON document published for `event`. `causality_id` defaults to the event's own id (a root).
    With `domain` (federation) the event names the domain that made it and each record carries its clock."""
    out = {
        "v": SCHEMA_VERSION, "event_id": event_id, "causality_id": event.causality_id or event_id,
        "origin": origin, "tenant": event.tenant, "user_id": event.user_id, "action": event.action,
        "at": event.at, "client_id": event.client_id, "keys": list(event.keys),
        "memory_ids": list(event.memory_ids),
        "records": [record_payload(r, contracts, values, None if hlcs is None else hlcs.get(r.id))
                    for r in event.records],
    }
    if domain is not None:
        out["domain"] = domain
    return out


def carries_any(data: bytes, memory_ids: frozenset[str]) -> bool:
    """Whether a stored message names any of `memory_ids` among its records (the versions whose values it
    may carry). Erasure of a key or a time range deletes exactly those messages (`EventBus.erase_matching`).
    A message that cannot be read is not matched."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        return False
    return any(isinstance(r, dict) and r.get("id") in memory_ids for r in records)


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class RemoteChange:
    """A change event received from the bus (made by another instance, or by this one for `tail`)."""

    event_id: str
    causality_id: str
    origin: str
    tenant: str
    user_id: str
    action: str
    at: float
    client_id: str | None
    keys: tuple[str, ...]
    memory_ids: tuple[str, ...]
    records: tuple[dict[str, Any], ...] = ()
    subject: str = ""
    stream_seq: int | None = None
    domain: str | None = None  # the federation domain that made the change (None: not federating)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def values(self) -> dict[str, Any]:
        """key -> value for the records that carried one (L1 fields)."""
        return {r["key"]: r["value"] for r in self.records if "value" in r}

    @property
    def is_erasure(self) -> bool:
        return self.action in ("forget", "forget_user")


class BadPayload(ValueError):
    pass


def decode(data: bytes, *, subject: str = "", stream_seq: int | None = None) -> RemoteChange:
    """Parse and check a payload; raises BadPayload (never anything else) on anything malformed."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadPayload(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadPayload("payload is not an object")
    if doc.get("v") != SCHEMA_VERSION:
        raise BadPayload(f"unsupported schema version {doc.get('v')!r}")
    try:
        strings = {k: doc[k] for k in ("event_id", "causality_id", "origin", "tenant", "user_id", "action")}
        if not all(isinstance(v, str) and v for v in strings.values()):
            raise BadPayload("ids and action must be non-empty strings")
        keys, ids, records = doc.get("keys", []), doc.get("memory_ids", []), doc.get("records", [])
        if not (isinstance(keys, list) and isinstance(ids, list) and isinstance(records, list)):
            raise BadPayload("keys, memory_ids and records must be lists")
        if not all(isinstance(r, dict) for r in records):
            raise BadPayload("records must be objects")
        client_id = doc.get("client_id")
        domain = doc.get("domain")
        return RemoteChange(
            event_id=strings["event_id"], causality_id=strings["causality_id"], origin=strings["origin"],
            tenant=strings["tenant"], user_id=strings["user_id"], action=strings["action"],
            at=float(doc["at"]), client_id=client_id if isinstance(client_id, str) else None,
            keys=tuple(str(k) for k in keys), memory_ids=tuple(str(i) for i in ids),
            records=tuple(records), subject=subject, stream_seq=stream_seq,
            domain=domain if isinstance(domain, str) and domain else None, raw=doc)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, BadPayload):
            raise
        raise BadPayload(f"malformed payload: {exc}") from None
