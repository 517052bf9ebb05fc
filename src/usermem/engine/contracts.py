"""Field contracts per tenant: stored in the documents table, versioned, editable; read on every call.

The effective contract set of a tenant is the code defaults (`policy.contracts.DEFAULT_CONTRACTS` plus
settings) overlaid with the tenant's stored contracts. Every change writes a new version (the old ones
are kept in `contract_versions`) and an audit entry, and takes effect at the next write or recall of any
process sharing the store: the set is re-read (one small query) on each call, parsed only when it changed.

Documents (tenant-scoped):
  contracts/<field>             {"contract": {...}, "version": n, "updated_at": t, "actor": a}
  contracts/*policy             {"unknown_fields": "accept" | "reject", "version": n}
  contract_versions/<field>@<n> {"contract": {...} | None, "version": n, "at": t, "actor": a, "change": c}
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from usermem.engine.context import EngineContext
from usermem.errors import NotFound, ValidationError
from usermem.model import AuditEvent, parse_kind
from usermem.policy.contracts import ContractSet, FieldContract, UnknownFieldPolicy
from usermem.policy.guards import ALWAYS_BLOCKED
from usermem.policy.pii import detect
from usermem.policy.validate import MAX_TTL_SECONDS, SURROGATE, InputProblem, check_field_key, check_key
from usermem.store.base import ReadAhead

NS = "contracts"
NS_VERSIONS = "contract_versions"
_ALL_DOCS = 100_000


def contract_docs_read(tenant: str) -> ReadAhead:
    """The read `ContractRegistry.for_tenant` makes, for a store's read_ahead (engine/recall.py)."""
    return ReadAhead("list_docs", (tenant, NS, None, None, _ALL_DOCS))
POLICY_KEY = "*policy"  # '*' cannot appear in a field key, so this never collides with a field


def validate_contract(contract: FieldContract, base: ContractSet) -> FieldContract:
    """Raise ValidationError for a contract that cannot be honoured; return it otherwise."""
    try:
        check_key(contract.key)
    except InputProblem as exc:
        raise ValidationError(str(exc), field="key") from None
    if base.is_forbidden(contract.key):
        raise ValidationError(f"field {contract.key!r} is on the forbidden list and can have no contract",
                              field="key")
    blocked = contract.allowed_pii & ALWAYS_BLOCKED
    if blocked:
        raise ValidationError(f"{sorted(k.value for k in blocked)} may never be stored under any field",
                              field="allowed_pii")
    for name in ("ttl_seconds", "half_life_seconds"):
        v = getattr(contract, name)
        if v is not None and not (math.isfinite(v) and 0 < v <= MAX_TTL_SECONDS):
            raise ValidationError(f"{name} must be positive, finite and at most {MAX_TTL_SECONDS:.0f} seconds "
                                  f"(1000 years)", field=name)
    try:
        check_field_key("domain", contract.domain)
    except (TypeError, InputProblem) as exc:
        raise ValidationError(str(exc), field="domain") from None
    for name, texts in (("description", [contract.description]), ("aliases", contract.aliases),
                        ("questions", list(contract.questions.values()))):
        for text in texts:
            if not isinstance(text, str) or SURROGATE.search(text):
                raise ValidationError(f"{name} must be text (no lone surrogates)", field=name)
    for alias in contract.aliases:
        if not alias.strip() or not alias.isprintable():
            raise ValidationError("aliases are names people use for the field: printable, not empty",
                                  field="aliases")
    if contract.default_importance is not None and not 0 <= contract.default_importance <= 1:
        raise ValidationError("default_importance must be between 0 and 1", field="default_importance")
    if contract.resolver is not None:
        r = contract.resolver
        if not isinstance(r, str) or not (r.startswith(("http://", "https://")) or r.startswith("registered:")):
            raise ValidationError("resolver must be an http(s) URL or 'registered:<name>' (a callable registered "
                                  "with Memory.register_resolver)", field="resolver")
    if not isinstance(contract.labels, Mapping) or set(contract.labels) - {"zh", "en"} or not all(
            isinstance(v, str) and 0 < len(v.strip()) <= 64 and v.isprintable() for v in contract.labels.values()):
        raise ValidationError("labels are {\"zh\": ..., \"en\": ...}: what people read instead of the key, "
                              "1-64 printable characters each", field="labels")
    for text in (contract.description, *contract.aliases, *contract.questions.values(), *contract.labels.values()):
        if detect(text):
            raise ValidationError("contract texts must not contain personal data", field="description")
    return contract


_BOOL_FIELDS = ("ttl_override", "storable", "live", "enabled", "standing")
_LIST_FIELDS = ("aliases", "authority", "allowed_pii")
_MAPPING_FIELDS = ("questions", "labels")
_NUMBER_FIELDS = ("ttl_seconds", "half_life_seconds", "default_importance")


def contract_from_input(data: Mapping[str, Any] | FieldContract) -> FieldContract:
    if isinstance(data, FieldContract):
        return data
    if not isinstance(data, Mapping):
        raise ValidationError(f"a contract is a mapping or FieldContract, got {type(data).__name__}", field="contract")
    unknown = set(data) - set(FieldContract.__dataclass_fields__)
    if unknown:
        raise ValidationError(f"unknown contract fields: {sorted(unknown)}", field=sorted(unknown)[0])
    if "key" not in data or "kind" not in data:
        raise ValidationError("a contract needs at least 'key' and 'kind'", field="key")
    # JSON types as written, never coerced: "false" is not False, a string is not a list of its letters
    for name in _BOOL_FIELDS:
        if name in data and not isinstance(data[name], bool):
            raise ValidationError(f"{name} must be true or false, got {type(data[name]).__name__}", field=name)
    for name in _LIST_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], list | tuple | set | frozenset):
            raise ValidationError(f"{name} must be a list, got {type(data[name]).__name__}", field=name)
    for name in _NUMBER_FIELDS:
        v = data.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise ValidationError(f"{name} must be a number, got {type(v).__name__}", field=name)
    if "version" in data and (isinstance(data["version"], bool) or not isinstance(data["version"], int)):
        raise ValidationError(f"version must be a whole number, got {type(data['version']).__name__}", field="version")
    for name in _MAPPING_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], Mapping):
            raise ValidationError(f"{name} must be an object, got {type(data[name]).__name__}", field=name)
    try:
        parse_kind(str(data["kind"]))
        return FieldContract.from_dict(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidationError(f"invalid contract: {exc}", field="contract") from None


class ContractRegistry:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[Any, ...], ContractSet]] = {}

    @property
    def base(self) -> ContractSet:
        return self.ctx.contracts

    # -- reading ---------------------------------------------------------------------------------------

    def for_tenant(self, tenant: str) -> ContractSet:
        """The tenant's effective contract set (defaults overlaid with stored changes)."""
        docs = self.ctx.store.list_docs(tenant, NS, user_id=None, now=None, limit=_ALL_DOCS)
        if not docs:
            return self.base
        fingerprint = tuple((k, d.get("version")) for k, d in docs)
        with self._lock:
            hit = self._cache.get(tenant)
        if hit is not None and hit[0] == fingerprint:
            return hit[1]
        base = self.base
        merged = {c.key: c for c in base}
        unknown = base.unknown
        for key, doc in docs:
            if key == POLICY_KEY:
                unknown = UnknownFieldPolicy(doc["unknown_fields"])
            elif doc.get("contract") is None:
                merged.pop(key, None)  # deleted: the key is unknown again
            else:
                merged[key] = FieldContract.from_dict({**doc["contract"], "version": doc["version"]})
        result = ContractSet(merged.values(), unknown, base.forbidden_keys)
        with self._lock:
            self._cache[tenant] = (fingerprint, result)
        return result

    def get(self, tenant: str, key: str) -> FieldContract:
        contract = self.for_tenant(tenant).get(key)
        if contract is None:
            raise NotFound(f"no contract for field {key!r}")
        return contract

    def history(self, tenant: str, key: str) -> list[dict[str, Any]]:
        """Stored versions of a field's contract, oldest first (version 1 is the code default)."""
        prefix = f"{key}@"
        return [d for k, d in self.ctx.store.list_docs(tenant, NS_VERSIONS, limit=100_000) if k.startswith(prefix)]

    # -- changing --------------------------------------------------------------------------------------

    def set(self, tenant: str, contract: Mapping[str, Any] | FieldContract, *, actor: str | None = None,
            now: float | None = None, change: str = "set") -> FieldContract:
        new = validate_contract(contract_from_input(contract), self.base)
        current = self.for_tenant(tenant).get(new.key)
        version = (current.version if current else 0) + 1
        new = replace(new, version=version)
        self._store(tenant, new.key, new.to_dict(), version, actor, self.ctx.now(now), change)
        return new

    def set_enabled(self, tenant: str, key: str, enabled: bool, *, actor: str | None = None,
                    now: float | None = None) -> FieldContract:
        current = self.get(tenant, key)
        return self.set(tenant, current.evolve(enabled=enabled), actor=actor, now=now,
                        change="enable" if enabled else "disable")

    def delete(self, tenant: str, key: str, *, actor: str | None = None, now: float | None = None) -> None:
        """Remove a field's contract (the key becomes unknown; the unknown-fields policy then applies)."""
        current = self.get(tenant, key)
        self._store(tenant, key, None, current.version + 1, actor, self.ctx.now(now), "delete")

    def set_unknown_policy(self, tenant: str, policy: str | UnknownFieldPolicy, *, actor: str | None = None,
                           now: float | None = None) -> UnknownFieldPolicy:
        try:
            value = UnknownFieldPolicy(policy)
        except ValueError:
            raise ValidationError(f"unknown-fields policy must be 'accept' or 'reject', got {policy!r}",
                                  field="unknown_fields") from None
        at = self.ctx.now(now)
        old = self.ctx.store.get_doc(tenant, NS, POLICY_KEY)
        version = int(old["version"]) + 1 if old else 1
        self.ctx.store.put_doc(tenant, NS, POLICY_KEY, {"unknown_fields": value.value, "version": version}, now=at)
        self.ctx.store.append_audit(AuditEvent(tenant=tenant, at=at, action="contract_change", actor=actor,
                                               detail={"change": "unknown_fields", "value": value.value,
                                                       "version": version}))
        return value

    def _store(self, tenant: str, key: str, contract: dict[str, Any] | None, version: int, actor: str | None,
               at: float, change: str) -> None:
        store = self.ctx.store
        store.put_doc(tenant, NS_VERSIONS, f"{key}@{version:06d}",
                      {"contract": contract, "version": version, "at": at, "actor": actor, "change": change}, now=at)
        store.put_doc(tenant, NS, key, {"contract": contract, "version": version, "updated_at": at, "actor": actor},
                      now=at)
        store.append_audit(AuditEvent(tenant=tenant, at=at, action="contract_change", key=key, actor=actor,
                                      detail={"change": change, "version": version}))
