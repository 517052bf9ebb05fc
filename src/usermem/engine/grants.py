"""Tiered authorization (seed 004 §3.3): L1 fields are readable by default; L2 and L3 need an active grant.

A grant names a user, either a list of fields or a level ("L2" covers every L2 field, "L3" every L2
and L3 field), a purpose, and a lifetime (default 30 minutes). It may be restricted to one reader
(`grantee`, an API key id or agent id); otherwise any reader of the tenant benefits. Grants end on
their own at expiry, or by `revoke`.

Audit, never values: every grant and revoke, and every read that returns L2/L3 data (`read_sensitive`:
who, when, which fields, under which grants and purposes).

Documents: grants/<grant_id> (tenant-scoped, user_id set, expires_at = grant expiry) and, so that
`revoke(grant_id)` works without a tenant, *:grant_index/<grant_id> = {"tenant": ...} (no user data).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from usermem.engine.context import EngineContext, new_id
from usermem.engine.write import check_ids
from usermem.errors import InvalidArgument, NotFound, PermissionDenied, ValidationError
from usermem.model import AuditEvent, MemoryRecord, Op, WriteResult
from usermem.policy.contracts import SENSITIVITY_ORDER, ContractSet, FieldContract, Sensitivity, Sharing
from usermem.policy.pii import detect
from usermem.policy.validate import InputProblem, check_identifier, check_key

NS = "grants"
NS_CONSENTS = "consents"  # consents/<user>|<field>|<domain>: cross-domain opt-in (seed 004 §5)
GENERAL_DOMAIN = "general"
INDEX_TENANT = "*"
NS_INDEX = "grant_index"
DEFAULT_TTL = 30 * 60.0
MAX_TTL = 7 * 86_400.0
MAX_FIELDS = 100


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    tenant: str
    user_id: str
    fields: tuple[str, ...]  # empty when the grant is by level
    level: Sensitivity | None
    purpose: str
    created_at: float
    expires_at: float
    actor: str | None = None  # who granted
    grantee: str | None = None  # only this reader may use it (None: any reader of the tenant)

    def active(self, now: float) -> bool:
        return self.created_at <= now < self.expires_at

    def covers(self, contract: FieldContract, reader: str | None) -> bool:
        if self.grantee is not None and self.grantee != reader:
            return False
        if contract.key in self.fields:
            return True
        return self.level is not None and SENSITIVITY_ORDER[contract.sensitivity] <= SENSITIVITY_ORDER[self.level]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "user_id": self.user_id, "fields": list(self.fields),
                "level": self.level.value if self.level else None, "purpose": self.purpose,
                "created_at": self.created_at, "expires_at": self.expires_at, "actor": self.actor,
                "grantee": self.grantee}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Grant:
        return cls(d["id"], d["tenant"], d["user_id"], tuple(d.get("fields") or ()),
                   Sensitivity(d["level"]) if d.get("level") else None, d["purpose"], float(d["created_at"]),
                   float(d["expires_at"]), d.get("actor"), d.get("grantee"))


def is_sensitive(contract: FieldContract | None) -> bool:
    return contract is not None and contract.sensitivity is not Sensitivity.L1


def _parse_scope(fields_or_level: str | Sensitivity | Iterable[str]) -> tuple[tuple[str, ...], Sensitivity | None]:
    if isinstance(fields_or_level, Sensitivity):
        return (), fields_or_level
    if isinstance(fields_or_level, str):
        if fields_or_level.upper() in ("L1", "L2", "L3"):
            return (), Sensitivity(fields_or_level.upper())
        fields_or_level = [fields_or_level]
    try:
        fields = tuple(dict.fromkeys(fields_or_level))
    except TypeError:
        raise InvalidArgument("fields_or_level must be 'L2'/'L3', a field key or a list of field keys") from None
    if not fields:
        raise ValidationError("a grant needs at least one field or a level", field="fields_or_level")
    if len(fields) > MAX_FIELDS:
        raise ValidationError(f"at most {MAX_FIELDS} fields per grant", field="fields_or_level")
    for f in fields:
        if not isinstance(f, str):
            raise InvalidArgument(f"field keys are strings, got {type(f).__name__}")
        try:
            check_key(f)
        except InputProblem as exc:
            raise ValidationError(str(exc), field="fields_or_level") from None
    return fields, None


class GrantsPipeline:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def grant(self, tenant: str, user_id: str, fields_or_level: str | Sensitivity | Iterable[str], purpose: str,
              ttl: float = DEFAULT_TTL, *, actor: str | None = None, grantee: str | None = None,
              now: float | None = None) -> str:
        check_ids(tenant, user_id)
        fields, level = _parse_scope(fields_or_level)
        if not isinstance(purpose, str) or not purpose.strip():
            raise ValidationError("a grant needs a purpose (why the data is read)", field="purpose")
        if len(purpose) > 500:
            raise ValidationError("purpose is limited to 500 characters", field="purpose")
        if detect(purpose):
            raise ValidationError("the purpose is written to the audit log and must not contain personal data",
                                  field="purpose")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL:
            raise ValidationError(f"ttl must be seconds in (0, {MAX_TTL:.0f}]", field="ttl")
        for name, v in (("actor", actor), ("grantee", grantee)):
            if v is not None:
                try:
                    check_identifier(name, v)
                except (TypeError, InputProblem) as exc:
                    raise ValidationError(str(exc), field=name) from None
        at = self.ctx.now(now)
        g = Grant(new_id(), tenant, user_id, fields, level, purpose.strip(), at, at + float(ttl), actor, grantee)
        store = self.ctx.store
        store.put_doc(tenant, NS, g.id, g.to_dict(), now=at, user_id=user_id, expires_at=g.expires_at)
        store.put_doc(INDEX_TENANT, NS_INDEX, g.id, {"tenant": tenant}, now=at, expires_at=g.expires_at)
        store.append_audit(AuditEvent(
            tenant=tenant, at=at, action="grant", user_id=user_id, actor=actor,
            detail={"grant_id": g.id, "fields": list(fields), "level": level.value if level else None,
                    "purpose": g.purpose, "ttl": float(ttl), "expires_at": g.expires_at, "grantee": grantee}))
        return g.id

    def revoke(self, grant_id: str, tenant: str | None = None, *, actor: str | None = None,
               now: float | None = None) -> bool:
        """End a grant now. True when it existed (active or expired), False otherwise."""
        if not isinstance(grant_id, str) or not grant_id:
            raise InvalidArgument("grant_id must be a non-empty string")
        store = self.ctx.store
        if tenant is None:
            idx = store.get_doc(INDEX_TENANT, NS_INDEX, grant_id)
            if idx is None:
                return False
            tenant = str(idx["tenant"])
        doc = store.get_doc(tenant, NS, grant_id)
        if doc is None:
            return False
        at = self.ctx.now(now)
        store.delete_doc(tenant, NS, grant_id)
        store.delete_doc(INDEX_TENANT, NS_INDEX, grant_id)
        store.append_audit(AuditEvent(tenant=tenant, at=at, action="revoke", user_id=doc.get("user_id"),
                                      actor=actor, detail={"grant_id": grant_id}))
        return True

    def sweep(self, deleted_before: float, expired_before: float) -> int:
        """Physically remove grants that expired before `expired_before` (a purge hook, all tenants)."""
        store = self.ctx.store
        n = 0
        for gid, idx in store.list_docs(INDEX_TENANT, NS_INDEX, limit=1_000_000):
            tenant = str(idx.get("tenant"))
            doc = store.get_doc(tenant, NS, gid)
            if doc is None or float(doc["expires_at"]) <= expired_before:
                if doc is not None:
                    n += int(store.delete_doc(tenant, NS, gid))
                store.delete_doc(INDEX_TENANT, NS_INDEX, gid)
        return n

    def active(self, tenant: str, user_id: str, now: float) -> list[Grant]:
        docs = self.ctx.store.list_docs(tenant, NS, user_id=user_id, now=now)
        return [g for g in (Grant.from_dict(d) for _, d in docs) if g.active(now)]

    def list(self, tenant: str, user_id: str | None = None, *, now: float | None = None,
             include_expired: bool = False) -> list[Grant]:
        at = self.ctx.now(now)
        if user_id is not None:
            check_ids(tenant, user_id)
        docs = self.ctx.store.list_docs(tenant, NS, user_id=user_id, now=None if include_expired else at)
        grants = [Grant.from_dict(d) for _, d in docs]
        return [g for g in grants if include_expired or g.active(at)]

    def gate(self, tenant: str, user_id: str, now: float, reader: str | None,
             domain: str | None = None) -> AccessGate:
        return AccessGate(self, tenant, user_id, now, reader, domain)

    # -- cross-domain opt-in ----------------------------------------------------------------------------

    def opt_in(self, tenant: str, user_id: str, fields: Iterable[str] | str, domain: str, *,
               actor: str | None = None, now: float | None = None) -> builtins.list[str]:
        """The user agrees that `fields` (sharing=explicit_opt_in) may be used by `domain`. Lasts until opt_out."""
        check_ids(tenant, user_id)
        keys, _ = _parse_scope([fields] if isinstance(fields, str) else fields)
        _check_domain(domain)
        at = self.ctx.now(now)
        for key in keys:
            self.ctx.store.put_doc(tenant, NS_CONSENTS, f"{user_id}|{key}|{domain}",
                                   {"field": key, "domain": domain, "at": at, "actor": actor}, now=at,
                                   user_id=user_id)
        self.ctx.store.append_audit(AuditEvent(tenant=tenant, at=at, action="opt_in", user_id=user_id, actor=actor,
                                               detail={"fields": list(keys), "domain": domain}))
        return list(keys)

    def opt_out(self, tenant: str, user_id: str, fields: Iterable[str] | str, domain: str, *,
                actor: str | None = None, now: float | None = None) -> int:
        check_ids(tenant, user_id)
        keys, _ = _parse_scope([fields] if isinstance(fields, str) else fields)
        _check_domain(domain)
        at = self.ctx.now(now)
        n = sum(self.ctx.store.delete_doc(tenant, NS_CONSENTS, f"{user_id}|{k}|{domain}") for k in keys)
        self.ctx.store.append_audit(AuditEvent(tenant=tenant, at=at, action="opt_out", user_id=user_id, actor=actor,
                                               detail={"fields": list(keys), "domain": domain, "removed": n}))
        return n

    def consents(self, tenant: str, user_id: str) -> set[tuple[str, str]]:
        """(field, domain) pairs the user opted in to."""
        return {(d["field"], d["domain"]) for _, d in self.ctx.store.list_docs(tenant, NS_CONSENTS, user_id=user_id)}


def _check_domain(domain: str) -> None:
    try:
        check_key(domain)
    except (TypeError, InputProblem):
        raise ValidationError(f"domain must match [a-z0-9_.-]{{1,64}}, got {domain!r:.80}", field="domain") from None


class AccessGate:
    """What one read may see. Grants are loaded only if a sensitive field turns up."""

    def __init__(self, grants: GrantsPipeline, tenant: str, user_id: str, now: float, reader: str | None,
                 domain: str | None = None) -> None:
        self._grants = grants
        self.tenant, self.user_id, self.now, self.reader, self.domain = tenant, user_id, now, reader, domain
        self._active: list[Grant] | None = None
        self._consents: set[tuple[str, str]] | None = None

    def _load(self) -> list[Grant]:
        if self._active is None:
            self._active = self._grants.active(self.tenant, self.user_id, self.now)
        return self._active

    def allows(self, contract: FieldContract | None) -> bool:
        """May this read see the field? Sensitivity (grants) and, when reading for a domain, sharing."""
        if contract is None:
            return True
        if not self.shares(contract):
            return False
        if not is_sensitive(contract):
            return True
        return any(g.covers(contract, self.reader) for g in self._load())

    def why_not(self, contract: FieldContract) -> str | None:
        """Why this read may not see the field ("private_to_domain", "needs_grant"), or None when it may."""
        if self.domain is not None and contract.domain not in (self.domain, GENERAL_DOMAIN) \
                and contract.sharing is Sharing.PRIVATE:
            return "private_to_domain"
        return None if self.allows(contract) else "needs_grant"

    def may_refuse(self, contract: FieldContract) -> bool:
        """False when `why_not(contract)` is None whatever the grants and consents (an L1 field this reader's
        domain may read): no grant is read to say so. True means it may refuse (ask `why_not`)."""
        return is_sensitive(contract) or (self.domain is not None
                                          and contract.domain not in (self.domain, GENERAL_DOMAIN))

    def shares(self, contract: FieldContract) -> bool:
        """Cross-domain use (seed 004 §5): a reader that names its domain sees a field of another domain
        only if the field is shared, or explicit_opt_in and the user opted in; never if private."""
        if self.domain is None or contract.domain in (self.domain, GENERAL_DOMAIN):
            return True
        if contract.sharing is Sharing.SHARED:
            return True
        if contract.sharing is Sharing.PRIVATE:
            return False
        if self._consents is None:
            self._consents = self._grants.consents(self.tenant, self.user_id)
        return (contract.key, self.domain) in self._consents

    def covering(self, contract: FieldContract) -> list[Grant]:
        return [g for g in self._load() if g.covers(contract, self.reader)]

    def audit_reads(self, records: Sequence[MemoryRecord], contracts: ContractSet, *, via: str = "recall") -> None:
        """One audit entry for the L2/L3 fields a read returned: who, when, fields, grants — no values."""
        sensitive = [(r.key, c) for r in records if is_sensitive(c := contracts.get(r.key))]
        if not sensitive:
            return
        fields = sorted({k for k, _ in sensitive})
        used: dict[str, Grant] = {}
        for _, c in sensitive:
            assert c is not None
            for g in self.covering(c):
                used[g.id] = g
        self._grants.ctx.store.append_audit(AuditEvent(
            tenant=self.tenant, at=self.now, action="read_sensitive", user_id=self.user_id, actor=self.reader,
            detail={"via": via, "fields": fields,
                    "levels": sorted({c.sensitivity.value for _, c in sensitive if c is not None}),
                    "grant_ids": sorted(used), "purposes": sorted({g.purpose for g in used.values()})}))

    def require(self, contract: FieldContract | None) -> None:
        if not self.allows(contract):
            assert contract is not None
            raise PermissionDenied(f"field {contract.key!r} is {contract.sensitivity.value}: reading it needs an "
                                   "active grant (Memory.grant)")


WITHHELD = "withheld"  # WriteResult.detail when the record's value is not shown to this reader


def withhold_stored(gate: AccessGate, contracts: ContractSet, results: Sequence[WriteResult], *,
                    via: str) -> list[WriteResult]:
    """Write results as a reader may see them. A write whose outcome holds what was already stored (NOOP
    against a version, or an UPDATE built on one — ingest adds an allergy to the stored list) would show that
    stored L2/L3 value to a reader without a grant: such a result keeps its op and ids, its `memory` becomes
    None and `detail` is "withheld". With a grant the read is audited (`read_sensitive`, `via`). A first
    version (ADD) holds only the caller's own words and is returned as it is."""
    out: list[WriteResult] = []
    shown: list[MemoryRecord] = []
    for r in results:
        rec = r.memory
        c = contracts.get(rec.key) if rec is not None else None
        built_on_stored = r.op is Op.NOOP or (rec is not None and rec.prev_version_id is not None)
        if rec is None or not built_on_stored or not is_sensitive(c):
            out.append(r)
        elif gate.allows(c):
            out.append(r)
            shown.append(rec)
        else:
            out.append(WriteResult(r.op, r.reason, None, WITHHELD, r.existing_id or rec.prev_version_id))
    if shown:
        gate.audit_reads(shown, contracts, via=via)
    return out


def lookup(grants: GrantsPipeline, tenant: str, grant_id: str, now: float | None = None) -> Grant:
    doc = grants.ctx.store.get_doc(tenant, NS, grant_id, now=None if now is None else now)
    if doc is None:
        raise NotFound(f"no grant {grant_id!r}")
    return Grant.from_dict(doc)
