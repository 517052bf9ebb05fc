"""Lifecycle: confirm, deny, revert a key, revert a change set.

Every operation that changes a value adds a *new version* to the key's chain (prev_version_id →
superseded_by), in one store transaction with its audit entry, and then emits a `write` ChangeEvent
so tiers and indexes follow. History is never rewritten:

- `confirm` records the user's "yes": last_confirmed_at moves to now (weight back to base). When the
  confirming source outranks the memory's source, or its confidence is below 1, the confirmation
  is also a provenance upgrade: a new version with the same value, the confirming source and
  confidence 1.0 (so an inferred 0.6 preference is not asked about again three days later).
- `deny` records the user's "no": a *retraction* version (retracted=True, value null) supersedes the
  memory. A retraction is never recalled and never blocks a later write.
- `revert` restores the previous (or a named) version's value as a new version. The restored value
  passes the same validation, guards and source-authority rules as any write.
- `revert_change_set` undoes every key a change set touched, all or nothing: each key gets back the
  value it had before the change set (or a retraction when the change set created it). The revert
  itself is a change set, so it can be undone the same way.

Each of them returns records, so L2/L3 fields pass the same grant gate as `Memory.get/history`
(issue 12 item 15): without an active grant covering the field for `actor`, PermissionDenied is raised
*before* anything is written; with one, the read is audited (`read_sensitive`, via the operation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from usermem.engine.context import EngineContext, new_id
from usermem.engine.grants import AccessGate, is_sensitive
from usermem.engine.write import WritePipeline, check_ids
from usermem.errors import (
    ConflictError,
    IntegrityError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from usermem.model import (
    KIND_REGISTRY,
    AuditEvent,
    ChangeEvent,
    MemoryRecord,
    Op,
    Reason,
    Source,
    WriteRequest,
    WriteResult,
)
from usermem.policy.contracts import ContractSet
from usermem.policy.resolve import Head, authority_rank, resolve
from usermem.policy.validate import canonical_json
from usermem.store.base import WriteTx

DEFAULT_ACTOR_SOURCE = Source.USER_CONFIRMED
_RETRIES = 3
# gate_for(tenant, user_id, now, reader, domain) -> AccessGate (GrantsPipeline.gate), as for recall.
GateFor = Callable[[str, str, float, str | None, str | None], AccessGate]


@dataclass(frozen=True, slots=True)
class ChangeSetRevert:
    """Outcome of `revert_change_set`: one result per key the change set touched."""

    reverted_change_set_id: str
    change_set_id: str  # the revert's own change set: revert_change_set(tenant, this) undoes the undo
    results: tuple[WriteResult, ...] = ()
    conflicts: tuple[tuple[str, str, str], ...] = ()  # (user_id, key, why) skipped with partial=True
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def reverted(self) -> int:
        return sum(1 for r in self.results if r.op in (Op.ADD, Op.UPDATE))

    def to_dict(self) -> dict[str, Any]:
        return {"reverted_change_set_id": self.reverted_change_set_id, "change_set_id": self.change_set_id,
                "results": [r.to_dict() for r in self.results],
                "conflicts": [{"user_id": u, "key": k, "reason": why} for u, k, why in self.conflicts]}


def _source(value: str | Source) -> Source:
    try:
        return value if isinstance(value, Source) else Source(value)
    except ValueError:
        raise ValidationError(f"unknown source {value!r}; use one of {[s.value for s in Source]}",
                              field="source") from None


def new_version(head: MemoryRecord | None, *, tenant: str, user_id: str, key: str, at: float,
                template: MemoryRecord, value: Any, source: Source, confidence: float,
                expires_at: float | None, change_set_id: str | None, actor: str | None, retracted: bool = False,
                last_confirmed_at: float | None = None, last_used_at: float | None = None) -> MemoryRecord:
    """A version that will supersede `head`; kind, importance, session and event time come from `template`,
    and its canonical form too while the value is the template's (a new value drops it: it would not match)."""
    return MemoryRecord(
        id=new_id(), tenant=tenant, user_id=user_id, kind=template.kind, key=key, value=value, source=source,
        confidence=confidence, importance=template.importance, created_at=at, expires_at=expires_at,
        last_used_at=last_used_at, last_confirmed_at=last_confirmed_at,
        prev_version_id=head.id if head else None, session_id=template.session_id, client_id=template.client_id,
        event_at=template.event_at, change_set_id=change_set_id, actor=actor, retracted=retracted,
        canonical=template.canonical if value == template.value else None)


def link(tx: WriteTx, head: MemoryRecord | None, record: MemoryRecord, at: float) -> None:
    """Supersede the head, then insert: the one-current-version index never sees two current rows."""
    if head is not None:
        tx.supersede(head.id, record.id, at)
    tx.insert(record)


def retraction(head: MemoryRecord, *, at: float, source: Source, change_set_id: str | None,
               actor: str | None) -> MemoryRecord:
    """The version that records "this is no longer true": value null, never recalled, expires with the head."""
    return new_version(head, tenant=head.tenant, user_id=head.user_id, key=head.key, at=at, template=head,
                       value=None, source=source, confidence=1.0, expires_at=head.expires_at,
                       change_set_id=change_set_id, actor=actor, retracted=True)


def _audit(tenant: str, user_id: str, action: str, at: float, *, key: str | None, memory_id: str | None,
           op: Op | None, actor: str | None, reason: Reason | None = None, **detail: Any) -> AuditEvent:
    return AuditEvent(tenant=tenant, at=at, action=action, user_id=user_id, key=key, memory_id=memory_id,
                      op=op.value if op else None, reason=reason.value if reason else None, actor=actor,
                      detail={k: v for k, v in detail.items() if v is not None})


class LifecyclePipeline:
    def __init__(self, ctx: EngineContext, write: WritePipeline, *, gate_for: GateFor | None = None) -> None:
        self.ctx = ctx
        self.write = write
        # None (a pipeline built without grants): L2/L3 fields are refused outright, never returned ungated.
        self.gate_for = gate_for

    def _gate(self, tenant: str, user_id: str, keys: Sequence[str], at: float, actor: str | None) -> AccessGate | None:
        """The read gate when any of `keys` is L2/L3: PermissionDenied unless a grant covers it for `actor`."""
        contracts = self._contracts(tenant)
        sensitive = [c for k in dict.fromkeys(keys) if (c := contracts.get(k)) is not None and is_sensitive(c)]
        if not sensitive:
            return None
        if self.gate_for is None:
            raise PermissionDenied(f"field {sensitive[0].key!r} is {sensitive[0].sensitivity.value}: "
                                   "reading it needs an active grant (Memory.grant)")
        gate = self.gate_for(tenant, user_id, at, actor, None)
        for contract in sensitive:
            gate.require(contract)
        return gate

    def _audit_read(self, gate: AccessGate | None, tenant: str, records: Sequence[MemoryRecord], via: str) -> None:
        if gate is not None and records:
            gate.audit_reads(records, self._contracts(tenant), via=via)

    # -- helpers -------------------------------------------------------------------------------------

    def _contracts(self, tenant: str) -> ContractSet:
        """The tenant's contract set (stored per-tenant edits when the engine has them)."""
        return self.ctx.contracts_for(tenant)

    def _order(self, tenant: str, key: str) -> tuple[Source, ...] | None:
        contract = self._contracts(tenant).get(key)
        return contract.authority if contract else None

    def _ttl(self, record: MemoryRecord) -> float | None:
        contract = self._contracts(record.tenant).for_write(record.key, record.kind)
        return contract.effective_ttl() if contract else KIND_REGISTRY[record.kind].ttl_seconds

    def _prepare(self, tenant: str, request: WriteRequest) -> Any:
        """The write pipeline's validation, guards and contract checks, for a restored value."""
        return self.write.prepare(request, self._contracts(tenant))

    def _owned(self, tenant: str, user_id: str, memory_id: str) -> MemoryRecord:
        check_ids(tenant, user_id)
        if not isinstance(memory_id, str) or not memory_id:
            raise InvalidArgument("memory_id must be a non-empty str")
        record = self.ctx.store.get(tenant, memory_id)
        if record is None or record.user_id != user_id:
            # Same answer whether the id is unknown or belongs to another user: no probing.
            raise NotFound(f"memory {memory_id!r} not found for user {user_id!r}")
        return record

    def _emit(self, tenant: str, user_id: str, at: float, records: Sequence[MemoryRecord],
              change_set_id: str | None, action: str = "write") -> None:
        if records:
            self.ctx.emit(ChangeEvent(tenant, user_id, action, at, keys=tuple(r.key for r in records),
                                      memory_ids=tuple(r.id for r in records), client_id=records[0].client_id,
                                      causality_id=change_set_id, records=tuple(records)))

    @staticmethod
    def _require_current(head: MemoryRecord | None, record: MemoryRecord, at: float, verb: str) -> MemoryRecord:
        if head is None or head.id != record.id:
            current = f"; the current version is {head.id}" if head is not None else ""
            raise ConflictError(f"cannot {verb} memory {record.id}: it was replaced{current}")
        if head.retracted:
            raise ConflictError(f"cannot {verb} memory {record.id}: it is a retraction")
        if not head.is_live(at):
            raise ConflictError(f"cannot {verb} memory {record.id}: it expired; write it again instead")
        return head

    # -- confirm / deny ------------------------------------------------------------------------------

    def confirm(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
                actor: str | None = None, source: str | Source = DEFAULT_ACTOR_SOURCE) -> MemoryRecord:
        """Record that the user (or an agent) confirmed a memory; returns the current version afterwards."""
        at = self.ctx.now(now)
        src = _source(source)
        record = self._owned(tenant, user_id, memory_id)
        gate = self._gate(tenant, user_id, [record.key], at, actor)
        order = self._order(tenant, record.key)
        for attempt in range(_RETRIES):
            try:
                with self.ctx.transaction(tenant, user_id) as tx:
                    head = self._require_current(tx.head(record.key), record, at, "confirm")
                    upgrade = authority_rank(src, order) > authority_rank(head.source, order) or (
                        head.confidence < 1.0 and authority_rank(src, order) >= authority_rank(head.source, order))
                    if upgrade:
                        ttl = self._ttl(head)
                        new = new_version(
                            head, tenant=tenant, user_id=user_id, key=head.key, at=at, template=head,
                            value=head.value, source=src, confidence=1.0,
                            expires_at=at + ttl if ttl else None, change_set_id=new_id(), actor=actor,
                            last_confirmed_at=at, last_used_at=head.last_used_at)
                        link(tx, head, new, at)
                        tx.audit(_audit(tenant, user_id, "confirm", at, key=head.key, memory_id=new.id, op=Op.UPDATE,
                                        actor=actor, source=src.value, previous_id=head.id, upgraded=True,
                                        change_set_id=new.change_set_id))
                    else:
                        tx.audit(_audit(tenant, user_id, "confirm", at, key=head.key, memory_id=head.id, op=None,
                                        actor=actor, source=src.value, upgraded=False))
                break
            except IntegrityError:
                if attempt == _RETRIES - 1:
                    raise
        # The confirmed version records when it was confirmed, also when a new version now carries it.
        self.ctx.store.touch(tenant, [record.id], confirmed_at=at)
        if upgrade:
            self._emit(tenant, user_id, at, [new], new.change_set_id)
            self._audit_read(gate, tenant, [new], "confirm")
            return new
        self.ctx.emit(ChangeEvent(tenant, user_id, "touch", at, keys=(record.key,), memory_ids=(record.id,)))
        current = self.ctx.store.get(tenant, record.id)
        out = current if current is not None else record.with_changes(last_confirmed_at=at)
        self._audit_read(gate, tenant, [out], "confirm")
        return out

    def deny(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None, source: str | Source = DEFAULT_ACTOR_SOURCE,
             change_set_id: str | None = None) -> MemoryRecord:
        """Record that the user said the memory is wrong: a retraction version supersedes it (history kept).

        Denying a memory that is already retracted by exactly this denial is a no-op returning the
        retraction. A source that may not override the memory's source (e.g. a user denying the
        billing system's plan) raises ConflictError.
        """
        at = self.ctx.now(now)
        src = _source(source)
        record = self._owned(tenant, user_id, memory_id)
        gate = self._gate(tenant, user_id, [record.key], at, actor)
        order = self._order(tenant, record.key)
        cs = change_set_id or new_id()
        for attempt in range(_RETRIES):
            try:
                with self.ctx.transaction(tenant, user_id) as tx:
                    head = tx.head(record.key)
                    if head is not None and head.retracted and head.prev_version_id == record.id:
                        self._audit_read(gate, tenant, [head], "deny")
                        return head  # already denied
                    head = self._require_current(head, record, at, "deny")
                    if authority_rank(src, order) < authority_rank(head.source, order):
                        raise ConflictError(f"{src.value} may not retract {head.key!r}: it is held by "
                                            f"{head.source.value}")
                    tomb = retraction(head, at=at, source=src, change_set_id=cs, actor=actor)
                    link(tx, head, tomb, at)
                    tx.audit(_audit(tenant, user_id, "deny", at, key=head.key, memory_id=tomb.id, op=Op.UPDATE,
                                    actor=actor, source=src.value, previous_id=head.id, change_set_id=cs))
                break
            except IntegrityError:
                if attempt == _RETRIES - 1:
                    raise
        self._emit(tenant, user_id, at, [tomb], cs)
        self._audit_read(gate, tenant, [tomb], "deny")
        return tomb

    # -- revert ----------------------------------------------------------------------------------------

    def revert(self, tenant: str, user_id: str, key: str, to_version: str | int | None = None, *,
               now: float | None = None, actor: str | None = None, source: str | Source = DEFAULT_ACTOR_SOURCE,
               change_set_id: str | None = None) -> WriteResult:
        """Restore the previous value of `key` (or version `to_version`: an id, or a 1-based position in
        history()) as a new version. Returns UPDATE/ADD, NOOP when it is already the current value, or
        REJECT when the value may no longer be stored or the source may not override the current one."""
        check_ids(tenant, user_id, actor=actor, change_set_id=change_set_id)
        if not isinstance(key, str):
            raise InvalidArgument(f"key must be a str, got {type(key).__name__}")
        if to_version is not None and (isinstance(to_version, bool) or not isinstance(to_version, str | int)):
            raise InvalidArgument("to_version must be a version id (str), a 1-based position (int) or None")
        at = self.ctx.now(now)
        src = _source(source)
        cs = change_set_id or new_id()
        gate = self._gate(tenant, user_id, [key], at, actor)
        for attempt in range(_RETRIES):
            history = self.ctx.store.history(tenant, user_id, key)
            if not history:
                raise NotFound(f"no versions of {key!r} for user {user_id!r}")
            current = next((r for r in reversed(history) if r.is_current), None)
            if current is None:
                raise ConflictError(f"{key!r} has no current version")
            target = self._target(history, current, to_version)
            if target.id == current.id:
                self._audit_read(gate, tenant, [current], "revert")
                return WriteResult(Op.NOOP, memory=current, detail="already the current version",
                                   existing_id=current.id)
            try:
                with self.ctx.transaction(tenant, user_id) as tx:
                    head = tx.head(key)
                    if head is None or head.id != current.id:
                        raise IntegrityError("head moved while reverting")
                    result = self._restore(tx, head, target, at=at, source=src, change_set_id=cs, actor=actor,
                                           action="revert")
                break
            except IntegrityError:
                if attempt == _RETRIES - 1:
                    raise
        if result.op in (Op.ADD, Op.UPDATE) and result.memory is not None:
            self._emit(tenant, user_id, at, [result.memory], cs)
        if result.memory is not None:
            self._audit_read(gate, tenant, [result.memory], "revert")
        return result

    @staticmethod
    def _target(history: list[MemoryRecord], current: MemoryRecord, to_version: str | int | None) -> MemoryRecord:
        if to_version is None:
            current_json = None if current.retracted else canonical_json(current.value)
            for r in reversed(history):
                if r.id == current.id or r.retracted:
                    continue
                if canonical_json(r.value) != current_json:
                    return r
            raise ConflictError(f"{current.key!r} has no earlier value to restore")
        if isinstance(to_version, int):
            if not 1 <= to_version <= len(history):
                raise NotFound(f"{current.key!r} has versions 1..{len(history)}, not {to_version}")
            target = history[to_version - 1]
        else:
            found = next((r for r in history if r.id == to_version), None)
            if found is None:
                raise NotFound(f"version {to_version!r} is not a version of {current.key!r} for this user")
            target = found
        if target.retracted:
            raise ConflictError(f"version {target.id} is a retraction; use deny() to retract a value")
        return target

    def _restore(self, tx: WriteTx, head: MemoryRecord | None, target: MemoryRecord | None, *, at: float,
                 source: Source, change_set_id: str, actor: str | None, action: str,
                 template: MemoryRecord | None = None) -> WriteResult:
        """Make `target`'s value current again (target None: retract). Audited inside `tx`."""
        tenant, user_id = (head or target or template).tenant, (head or target or template).user_id  # type: ignore[union-attr]
        key = (head or target or template).key  # type: ignore[union-attr]
        order = self._order(tenant, key)
        kind = (target or head or template).kind  # type: ignore[union-attr]
        if KIND_REGISTRY[kind].session_bound:
            result = WriteResult(Op.REJECT, Reason.SESSION_REQUIRED,
                                 detail="session context is not restored; it belongs to a session")
        elif target is None:  # the key did not exist before: undo means "no value"
            if head is None or head.retracted:
                result = WriteResult(Op.NOOP, memory=head, existing_id=head.id if head else None)
            elif authority_rank(source, order) < authority_rank(head.source, order):
                result = WriteResult(Op.REJECT, Reason.LOWER_PRIORITY_SOURCE,
                                     detail=f"{source.value} may not retract a value held by {head.source.value}",
                                     existing_id=head.id)
            else:
                tomb = retraction(head, at=at, source=source, change_set_id=change_set_id, actor=actor)
                link(tx, head, tomb, at)
                result = WriteResult(Op.UPDATE, memory=tomb, detail="retracted", existing_id=head.id)
        else:
            request = WriteRequest(kind=target.kind.value, key=key, value=target.value, source=source.value,
                                   importance=target.importance, event_at=target.event_at,
                                   canonical=target.canonical)
            prepared = self._prepare(tenant, request)  # validation, guards, contract: same rules as a write
            if isinstance(prepared, WriteResult):
                result = WriteResult(prepared.op, prepared.reason, detail=prepared.detail,
                                     existing_id=head.id if head else None)
            else:
                head_view = None if head is None else Head(
                    canonical_json(head.value), head.source, head.is_live(at))
                decision = resolve(head_view, prepared.value_json, source, order)
                if decision.op in (Op.NOOP, Op.REJECT):
                    result = WriteResult(decision.op, decision.reason, memory=head if decision.op is Op.NOOP else None,
                                         detail=decision.detail, existing_id=head.id if head else None)
                else:
                    ttl = prepared.contract.effective_ttl()
                    record = new_version(head, tenant=tenant, user_id=user_id, key=key, at=at, template=target,
                                         value=target.value, source=source, confidence=1.0,
                                         expires_at=at + ttl if ttl else None, change_set_id=change_set_id,
                                         actor=actor)
                    record = record.with_changes(session_id=None, client_id=None)
                    link(tx, head, record, at)
                    result = WriteResult(decision.op, memory=record, detail=f"restored {target.id}",
                                         existing_id=head.id if head else None)
        memory = result.memory if result.op in (Op.ADD, Op.UPDATE) else None
        tx.audit(_audit(tenant, user_id, action, at, key=key, memory_id=memory.id if memory else result.existing_id,
                        op=result.op, actor=actor, reason=result.reason, source=source.value,
                        restored_from=target.id if target else None, change_set_id=change_set_id,
                        detail=result.detail if result.op is Op.REJECT else None))
        return result

    # -- change sets -----------------------------------------------------------------------------------

    def revert_change_set(self, tenant: str, change_set_id: str, *, now: float | None = None,
                          actor: str | None = None, source: str | Source = DEFAULT_ACTOR_SOURCE,
                          partial: bool = False) -> ChangeSetRevert:
        """Undo every key a change set touched, in one transaction per user.

        A key is restored to the value it had just before the change set (retracted when the change
        set created it). If any key changed again after the change set, or a restored value is refused,
        nothing is written and ConflictError names the keys, unless `partial=True`, which restores the
        others and reports the conflicts.
        """
        if not isinstance(tenant, str):
            raise InvalidArgument("tenant must be a str")
        if not isinstance(change_set_id, str) or not change_set_id:
            raise InvalidArgument("change_set_id must be a non-empty str")
        at = self.ctx.now(now)
        src = _source(source)
        versions = self.ctx.store.by_change_set(tenant, change_set_id)
        if not versions:
            raise NotFound(f"change set {change_set_id!r} not found")
        # (user, key) -> (first version in the set, last version in the set); by_change_set is in write order.
        spans: dict[tuple[str, str], list[MemoryRecord]] = {}
        for v in versions:
            span = spans.setdefault((v.user_id, v.key), [v, v])
            span[1] = v
        by_user: dict[str, list[tuple[MemoryRecord, MemoryRecord]]] = defaultdict(list)
        for (user, _key), (first, last) in spans.items():
            by_user[user].append((first, last))
        # Every user's L2/L3 keys need a grant before anything is reverted (the results carry records).
        gates = {user: self._gate(tenant, user, [last.key for _, last in items], at, actor)
                 for user, items in sorted(by_user.items())}
        cs = new_id()
        results: list[WriteResult] = []
        conflicts: list[tuple[str, str, str]] = []
        emitted: list[tuple[str, list[MemoryRecord]]] = []
        for user, items in sorted(by_user.items()):
            for attempt in range(_RETRIES):
                try:
                    user_results, user_conflicts, written = self._revert_user(
                        tenant, user, items, at=at, source=src, cs=cs, actor=actor, partial=partial,
                        reverted=change_set_id)
                    break
                except IntegrityError:
                    if attempt == _RETRIES - 1:
                        raise
            results.extend(user_results)
            conflicts.extend(user_conflicts)
            emitted.append((user, written))
        for user, written in emitted:
            self._emit(tenant, user, at, written, cs)
            self._audit_read(gates[user], tenant, written, "revert_change_set")
        return ChangeSetRevert(change_set_id, cs, tuple(results), tuple(conflicts))

    def _revert_user(self, tenant: str, user: str, items: list[tuple[MemoryRecord, MemoryRecord]], *, at: float,
                     source: Source, cs: str, actor: str | None, partial: bool,
                     reverted: str) -> tuple[list[WriteResult], list[tuple[str, str, str]], list[MemoryRecord]]:
        results: list[WriteResult] = []
        conflicts: list[tuple[str, str, str]] = []
        written: list[MemoryRecord] = []
        with self.ctx.transaction(tenant, user) as tx:
            for first, last in items:
                head = tx.head(last.key)
                if head is None or head.id != last.id:
                    conflicts.append((user, last.key, "changed after the change set" if head else "deleted"))
                    continue
                target = tx.get(first.prev_version_id) if first.prev_version_id else None
                if first.prev_version_id and target is None:
                    conflicts.append((user, last.key, "the previous version was erased"))
                    continue
                if target is not None and target.retracted:
                    target = None  # the key had been denied before the change set: undo retracts again
                result = self._restore(tx, head, target, at=at, source=source, change_set_id=cs, actor=actor,
                                       action="revert_change_set", template=head)
                if result.op is Op.REJECT:
                    conflicts.append((user, last.key, result.reason.value if result.reason else "rejected"))
                    continue
                results.append(result)
                if result.op in (Op.ADD, Op.UPDATE) and result.memory is not None:
                    written.append(result.memory)
            if conflicts and not partial:
                names = ", ".join(f"{k} ({why})" for _, k, why in conflicts)
                raise ConflictError(f"change set {reverted} cannot be reverted as a whole: {names}; "
                                    "nothing was changed (partial=True reverts the rest)")
            tx.audit(_audit(tenant, user, "revert_change_set", at, key=None, memory_id=None, op=None, actor=actor,
                            reverted_change_set_id=reverted, change_set_id=cs, keys=len(items),
                            restored=len(written), conflicts=len(conflicts)))
        return results, conflicts, written
