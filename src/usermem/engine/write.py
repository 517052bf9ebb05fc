"""The write pipeline: candidate → validation → guards → conflict resolution → store (one tx) → audit → event.

Every decision, REJECTs included, is audited in the same transaction as the change it describes.
The audit entry never carries a value, so a rejected sensitive value never reaches storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from usermem.engine.context import EngineContext, new_id
from usermem.errors import IntegrityError, InvalidArgument, ValidationError
from usermem.model import (
    AuditEvent,
    ChangeEvent,
    Kind,
    MemoryRecord,
    Op,
    Reason,
    Source,
    WriteRequest,
    WriteResult,
)
from usermem.policy.contracts import ContractSet, FieldContract
from usermem.policy.guards import check_guards, loggable_key
from usermem.policy.injection import instruction_like
from usermem.policy.pii import redact
from usermem.policy.resolve import Head, resolve
from usermem.policy.validate import (
    InputProblem,
    canonical_json,
    check_identifier,
    check_optional_identifiers,
    check_ttl,
    check_unit,
    check_value,
    check_write,
    optional_time,
    shown,
)
from usermem.store.base import WriteTx

DEFAULT_CONFIDENCE = {Source.INFERRED: 0.6}


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A candidate that passed validation and guards, ready for conflict resolution."""

    request: WriteRequest
    kind: Kind
    source: Source
    value_json: str
    contract: FieldContract
    importance: float | None
    confidence: float | None


def check_ids(tenant: Any, user_id: Any, **audited: Any) -> None:
    """tenant, user_id and the optional identifiers the audit log keeps (actor=, change_set_id=)."""
    try:
        check_identifier("tenant", tenant)
        check_identifier("user_id", user_id)
        check_optional_identifiers(**audited)  # no personal data in the append-only audit (policy/validate.py)
    except TypeError as exc:
        raise InvalidArgument(str(exc)) from None
    except InputProblem as exc:
        raise ValidationError(str(exc), field=exc.field) from None


# At most this many tenants' last contract sets kept as hints (a dict cleared when full; the registry keeps
# every tenant's parsed set anyway, so an entry is one reference).
_HINTS_KEPT = 65_536


class WritePipeline:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        # The contract set each tenant's last write found, for judging the next one before its transaction
        # on a serialised store (see write_many). Only a guess: the set in force is read inside the write's
        # transaction, and a batch judged under another set is judged again under that one.
        self._contract_hints: dict[str, ContractSet] = {}

    # -- public --------------------------------------------------------------------------------------

    def write(self, tenant: str, user_id: str, request: WriteRequest, *, now: float | None = None,
              change_set_id: str | None = None, actor: str | None = None) -> WriteResult:
        return self.write_many(tenant, user_id, [request], now=now, change_set_id=change_set_id, actor=actor)[0]

    def write_many(self, tenant: str, user_id: str, requests: Sequence[WriteRequest], *, now: float | None = None,
                   change_set_id: str | None = None, actor: str | None = None) -> list[WriteResult]:
        """Decide and apply a batch in one transaction: all accepted writes commit together, or none do."""
        check_ids(tenant, user_id, actor=actor, change_set_id=change_set_id)
        at = self.ctx.now(now)
        if len(requests) > self.ctx.limits.max_batch:
            raise ValidationError(f"batch of {len(requests)} writes exceeds the limit of {self.ctx.limits.max_batch}",
                                  field="writes")
        # On the embedded SQLite store (one connection, `serialised`) the tenant's contract set is read inside
        # the write transaction: the read then needs no read lock of its own (several system calls outside a
        # transaction) and sees exactly the state the write commits on. The batch is judged (validation and
        # guards, no I/O) before the transaction, under the set the tenant's last write found, so the write
        # lock is not held for it; if the set read inside differs, the batch is judged again under it there.
        # Other stores read the set first, as every pipeline does.
        in_tx = self.ctx.store.capabilities.serialised
        contracts = (self._contract_hints.get(tenant, self.ctx.contracts) if in_tx
                     else self.ctx.contracts_for(tenant))
        prepared = [(r, self.prepare(r, contracts)) for r in requests]
        written: list[MemoryRecord] = []
        for attempt in range(3):
            try:
                results, written = self._apply(tenant, user_id, prepared, at, change_set_id, actor,
                                               contracts if in_tx else None)
                break
            except IntegrityError:
                # Another writer won a race the lock should have prevented (e.g. a backend without key
                # locks); the database refused the fork, so re-read the heads and decide again.
                if attempt == 2:
                    raise
        if written:
            self.ctx.emit(ChangeEvent(
                tenant, user_id, "write", at, keys=tuple(r.key for r in written),
                memory_ids=tuple(r.id for r in written), client_id=written[0].client_id,
                causality_id=change_set_id, records=tuple(written)))
        return results

    # -- steps ---------------------------------------------------------------------------------------

    def prepare(self, req: WriteRequest, contracts: ContractSet | None = None) -> _Prepared | WriteResult:
        """Validation and guards, no I/O. Returns a REJECT result for anything that may not be stored."""
        if not isinstance(req, WriteRequest):
            raise InvalidArgument(f"expected WriteRequest, got {type(req).__name__}")
        contracts = self.ctx.contracts if contracts is None else contracts
        if isinstance(req.key, str) and contracts.is_forbidden(req.key):
            return WriteResult(Op.REJECT, Reason.FORBIDDEN_KEY, detail=f"key {shown(req.key)} may never be stored")
        try:
            checked = check_write(req.kind, req.key, req.value, req.source, self.ctx.limits)
            importance = check_unit("importance", req.importance)
            confidence = check_unit("confidence", req.confidence)
            optional_time("event_at", req.event_at)  # finite and in range (policy/validate.py)
            check_ttl("ttl_seconds", req.ttl_seconds)
            if req.canonical is not None:  # the same JSON, size and number rules as the value
                check_value(req.canonical, self.ctx.limits)
            for name in ("session_id", "client_id"):
                if getattr(req, name) is not None:
                    check_identifier(name, getattr(req, name))
        except TypeError as exc:
            raise InvalidArgument(str(exc)) from None
        except InputProblem as exc:
            return WriteResult(Op.REJECT, Reason.INVALID_INPUT, detail=str(exc))
        contract = contracts.for_write(req.key, checked.kind)
        if contract is None:
            return WriteResult(Op.REJECT, Reason.UNKNOWN_FIELD, detail=f"no contract for field {req.key!r}")
        if not contract.enabled:
            return WriteResult(Op.REJECT, Reason.FIELD_DISABLED, detail=f"field {req.key!r} is disabled")
        if contract.live or not contract.storable:
            return WriteResult(Op.REJECT, Reason.LIVE_FIELD,
                               detail=f"field {req.key!r} is read live from its system of record, never stored")
        verdict = check_guards(req.key, req.value, contract, contracts)
        if verdict is None and req.canonical is not None:  # the canonical form is held too: same guards
            verdict = check_guards(req.key, req.canonical, contract, contracts)
        if verdict is not None:
            return WriteResult(Op.REJECT, verdict.reason, detail=verdict.detail)
        injection = instruction_like(req.value) or (instruction_like(req.canonical) if req.canonical is not None
                                                    else None)
        if injection is not None:  # memory poisoning: a value must never read as a prompt instruction
            return WriteResult(Op.REJECT, Reason.INSTRUCTION_LIKE, detail=f"value reads as an instruction ({injection})")
        if checked.kind is Kind.CONTEXT and req.session_id is None:
            return WriteResult(Op.REJECT, Reason.SESSION_REQUIRED, detail="context memories belong to a session")
        return _Prepared(req, checked.kind, checked.source, checked.value_json, contract, importance, confidence)

    def _apply(self, tenant: str, user_id: str, prepared: Sequence[tuple[WriteRequest, _Prepared | WriteResult]],
               at: float, change_set_id: str | None, actor: str | None,
               judged_under: ContractSet | None = None) -> tuple[list[WriteResult], list[MemoryRecord]]:
        """Store a judged batch in one transaction. `judged_under`: the contract set `prepared` was judged
        under, to be checked against the set read inside the transaction (None: read before it)."""
        results: list[WriteResult] = []
        written: list[MemoryRecord] = []
        with self.ctx.transaction(tenant, user_id) as tx:
            if judged_under is not None:
                in_force = self.ctx.contracts_for(tenant)
                if in_force is not judged_under:
                    prepared = [(r, self.prepare(r, in_force)) for r, _ in prepared]
                hints = self._contract_hints
                if len(hints) >= _HINTS_KEPT and tenant not in hints:
                    hints.clear()
                hints[tenant] = in_force
            for request, item in prepared:
                if isinstance(item, WriteResult):  # rejected before any I/O
                    results.append(item)
                    tx.audit(_audit(tenant, user_id, loggable_key(request.key), item, at, actor, change_set_id))
                    continue
                result = self._decide_and_store(tx, tenant, user_id, item, at, change_set_id, actor)
                results.append(result)
                if result.op in (Op.ADD, Op.UPDATE) and result.memory is not None:
                    written.append(result.memory)
                tx.audit(_audit(tenant, user_id, item.request.key, result, at, actor, change_set_id))
        return results, written

    def _decide_and_store(self, tx: WriteTx, tenant: str, user_id: str, p: _Prepared, at: float,
                          change_set_id: str | None, actor: str | None) -> WriteResult:
        req = p.request
        head = tx.head(req.key)
        head_view = None
        if head is not None:
            head_view = Head(canonical_json(head.value), head.source, head.is_live(at))
        decision = resolve(head_view, p.value_json, p.source, p.contract.authority)
        if decision.op in (Op.NOOP, Op.REJECT):
            return WriteResult(decision.op, decision.reason, memory=head if decision.op is Op.NOOP else None,
                               detail=decision.detail, existing_id=head.id if head else None)
        ttl = req.ttl_seconds if req.ttl_seconds is not None else p.contract.effective_ttl()
        record = MemoryRecord(
            id=new_id(), tenant=tenant, user_id=user_id, kind=p.kind, key=req.key, value=req.value,
            source=p.source,
            confidence=p.confidence if p.confidence is not None else DEFAULT_CONFIDENCE.get(p.source, 1.0),
            importance=p.importance if p.importance is not None else p.contract.effective_importance(),
            created_at=at, expires_at=at + ttl if ttl else None,
            prev_version_id=head.id if head else None, session_id=req.session_id, client_id=req.client_id,
            event_at=req.event_at, change_set_id=change_set_id, actor=actor, canonical=req.canonical,
        )
        _link_and_insert(tx, head, record, at)
        return WriteResult(decision.op, None, memory=record, detail=decision.detail,
                           existing_id=head.id if head else None)


def _link_and_insert(tx: WriteTx, head: MemoryRecord | None, record: MemoryRecord, at: float) -> None:
    # Supersede first so the partial unique index never sees two current versions, then insert.
    if head is not None:
        tx.supersede(head.id, record.id, at)
    tx.insert(record)


def _audit(tenant: str, user_id: str, key: str | None, result: WriteResult, at: float, actor: str | None,
           change_set_id: str | None) -> AuditEvent:
    detail: dict[str, Any] = {}
    if result.detail:
        detail["detail"] = redact(result.detail)  # messages may quote input; never let them carry PII
    if change_set_id:
        detail["change_set_id"] = change_set_id
    memory = result.memory
    return AuditEvent(
        tenant=tenant, at=at, action="write", user_id=user_id, key=key or (memory.key if memory else None),
        memory_id=memory.id if memory else result.existing_id, op=result.op.value,
        reason=result.reason.value if result.reason else None, actor=actor,
        detail={**detail, **({"source": memory.source.value, "kind": memory.kind.value} if memory else {})},
    )
