"""Federation (issue 17, seed 004 §4.3): separate stores that converge through change events.

* **Outgoing (the transactional outbox).** `stage` is the `EngineContext` stager: inside the transaction
  of every change it stamps each inserted version with the hybrid logical clock (policy/hlc.py) and writes
  the change event to the store's outbox (`store.capabilities.outbox`), so the event commits or rolls back
  with the change. A relay (events/federation.py) publishes the outbox and removes what the bus
  acknowledged. Erasures (`forget`, `forget_range`, `forget_user`) write their event in the soft delete's
  own transaction too (`stage_erasure`, through the store's `announce` hook); queued events that carry what
  was erased are dropped.
* **Incoming.** `apply(change)` applies a remote event in one transaction, exactly once (the event id goes
  into `applied_events` in the same transaction; a duplicate applies nothing): each record is admitted by
  the field's contract here (`shared` applies; `explicit_opt_in` only when the user opted the field in for
  the source domain; `private` never), then decided by clock order — the higher stamp becomes current, the
  lower one is kept in the key's history (superseded, with its origin domain as actor) — identically on every
  instance. A remote change replacing a value this domain wrote within `federate_notice_window` seconds
  leaves a notice for the user ("changed on another device"); `keep_local(notice)` writes this device's
  value again, which then wins everywhere. Remote erasures are applied through the erasure pipeline and
  never announced again.

Stores without an outbox cannot federate (ConfigError). Everything takes an injectable `now`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from usermem.engine.context import EngineContext, new_id
from usermem.engine.erasure import ErasurePipeline
from usermem.engine.grants import GrantsPipeline
from usermem.engine.write import WritePipeline, check_ids
from usermem.errors import ConfigError, InvalidArgument, NotFound, ValidationError
from usermem.model import AuditEvent, ChangeEvent, Kind, MemoryRecord, Source, WriteRequest, WriteResult
from usermem.policy.hlc import (
    ZERO,
    Hlc,
    Order,
    Skip,
    admit,
    deserves_notice,
    observe,
    tick,
    too_far_ahead,
    wins,
)
from usermem.policy.validate import InputProblem, check_identifier, check_key
from usermem.policy.wording import changed_elsewhere
from usermem.store.base import Outbox, OutboxEntry, Store, VersionStamp, WriteTx, chunked

if TYPE_CHECKING:
    from usermem.events.payload import RemoteChange

log = logging.getLogger("usermem.federation")

NOTICES = "federation_notices"  # documents: <notice id> -> the notice (user_id set: erased with the user)
NOTICE_TTL = 30 * 86_400.0
# documents: <event id> -> a remote event whose apply kept failing (user_id set: erased with the user; the
# payload is the event as it travelled — values of L1 fields only, docs/events.md)
DEAD_LETTERS = "federation_dead_letters"
WRITE_ACTIONS = frozenset({"write", "confirm", "deny", "revert"})
ERASE_ACTIONS = frozenset({"forget", "forget_user"})
# (event, event_id, domain, clock per memory id) -> (subject, JSON payload): events/federation.encoder.
Encoder = Callable[[ChangeEvent, str, str | None, Mapping[str, str]], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Notice:
    """A remote change replaced a value this device set moments ago."""

    id: str
    key: str
    at: float
    domain: str
    local_memory_id: str
    remote_memory_id: str
    questions: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "key": self.key, "at": self.at, "domain": self.domain,
                "local_memory_id": self.local_memory_id, "remote_memory_id": self.remote_memory_id,
                "questions": dict(self.questions)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Notice:
        return cls(str(d["id"]), str(d["key"]), float(d["at"]), str(d["domain"]), str(d["local_memory_id"]),
                   str(d["remote_memory_id"]), dict(d.get("questions") or {}))


def check_domain(domain: object) -> str:
    if not isinstance(domain, str):
        raise ValidationError(f"domain must be a string, got {type(domain).__name__}", field="domain")
    try:
        check_key(domain)
    except Exception:
        raise ValidationError(f"domain must match [a-z0-9_.-]{{1,64}}, got {domain!r:.80}", field="domain") from None
    return domain


def notices(ctx: EngineContext, tenant: str, user_id: str, *, now: float | None = None) -> list[Notice]:
    """The user's open "changed on another device" notices, oldest first."""
    check_ids(tenant, user_id)
    at = ctx.now(now)
    docs = ctx.store.list_docs(tenant, NOTICES, user_id=user_id, now=at)
    return sorted((Notice.from_dict(d) for _, d in docs), key=lambda n: (n.at, n.id))


def keep_local(ctx: EngineContext, write: WritePipeline, tenant: str, user_id: str, notice_id: str, *,
               now: float | None = None, actor: str | None = None) -> WriteResult:
    """"Keep this device's value": write the value the remote change replaced again, as the user's confirmed
    choice (a newer clock: it then wins on every instance), and close the notice."""
    check_ids(tenant, user_id, actor=actor)
    try:
        check_identifier("notice_id", notice_id)
    except Exception as exc:
        raise ValidationError(str(exc), field="notice_id") from None
    at = ctx.now(now)
    doc = ctx.store.get_doc(tenant, NOTICES, notice_id, now=at)
    notice = Notice.from_dict(doc) if doc is not None else None
    local = ctx.store.get(tenant, notice.local_memory_id) if notice is not None else None
    if notice is None or local is None or local.user_id != user_id:
        raise NotFound(f"no open notice {notice_id!r} for this user")
    if local.retracted:
        raise ValidationError("this device's value was a withdrawal; deny the current value instead",
                              field="notice_id")
    result = write.write(tenant, user_id, WriteRequest(
        kind=local.kind.value, key=local.key, value=local.value, source=Source.USER_CONFIRMED.value,
        importance=local.importance, client_id=local.client_id, event_at=local.event_at,
        canonical=local.canonical), now=at, actor=actor)
    ctx.store.delete_doc(tenant, NOTICES, notice_id)
    return result


def dead_letters(store: Store, tenant: str, user_id: str | None = None, *,
                 limit: int = 1000) -> list[dict[str, Any]]:
    """Remote events set aside after `federate_max_deliveries` failed applies, oldest first (operators:
    `usermem federation dead-letters`). Each: event_id, user_id, domain, action, keys, attempts, error, at,
    payload (the event's JSON text)."""
    if user_id is None:
        check_ids(tenant, "any")  # the tenant alone
    else:
        check_ids(tenant, user_id)
    docs = store.list_docs(tenant, DEAD_LETTERS, user_id=user_id, limit=limit)
    return sorted((d for _, d in docs), key=lambda d: (float(d.get("at", 0.0)), str(d.get("event_id"))))


class Federation:
    def __init__(self, ctx: EngineContext, write: WritePipeline, erasure: ErasurePipeline, grants: GrantsPipeline,
                 *, domain: str | None, encode: Encoder, window: float = 300.0, max_drift: float = 300.0) -> None:
        outbox = ctx.store.capabilities.outbox
        if outbox is None:
            raise ConfigError("federation needs a store with a transactional outbox (SQLite or PostgreSQL)",
                              setting="store_url")
        self.ctx = ctx
        self.write = write
        self.erasure = erasure
        self.grants = grants
        self.outbox: Outbox = outbox
        self.domain: str | None = None if domain is None else check_domain(domain)
        self.encode = encode
        self.window = window
        self.max_drift = max_drift
        self._lock = threading.Lock()
        seeded = outbox.max_hlc()
        self._clock = Hlc.parse(seeded) if seeded else ZERO
        self._applying = threading.local()
        self.counts: dict[str, int] = {"staged": 0, "applied": 0, "duplicates": 0, "won": 0, "lost": 0,
                                       "dead_letters": 0, "clock_refused": 0,
                                       "notices": 0, "erasures_applied": 0, "own_domain": 0, "bad_records": 0,
                                       **{f"skipped_{s.value}": 0 for s in Skip}}
        # Erasure events committed whose stream purge may not be queued yet: the relay leaves them (pending()).
        self.held: set[str] = set()
        self._erasing = threading.local()
        self.wake: Callable[[], None] | None = None  # the relay's nudge (events/federation.Relay.wake)
        self.on_remote_cause: Callable[[str], None] | None = None  # FederatedSync.note_remote_cause
        # FederatedSync.caused_remotely: a change made while handling a remote event is not announced
        self.suppress: Callable[[str | None], bool] | None = None

    # -- the clock -----------------------------------------------------------------------------------

    def tick(self, at: float) -> Hlc:
        with self._lock:
            self._clock = tick(self._clock, int(at * 1000))
            return self._clock

    def observe(self, remote: Hlc, at: float) -> None:
        with self._lock:
            self._clock = observe(self._clock, remote, int(at * 1000))

    @property
    def clock(self) -> Hlc:
        return self._clock

    # -- outgoing ------------------------------------------------------------------------------------

    def stage(self, tx: WriteTx, tenant: str, user_id: str, records: tuple[MemoryRecord, ...]) -> None:
        """The EngineContext stager: stamps and the outbox entry, inside the change's transaction."""
        if getattr(self._applying, "on", False):
            return  # applying a remote change: it is not announced again
        if self.suppress is not None and self.suppress(records[0].change_set_id):
            return  # made by an on_remote_change callback: announcing it would echo the remote change back
        event_id = new_id()
        at = records[0].created_at
        hlcs: dict[str, str] = {}
        for r in records:
            clock = self.tick(r.created_at).text()
            hlcs[r.id] = clock
            self.outbox.stamp(tx, tenant, VersionStamp(r.id, clock, r.client_id or "", self.domain or "", event_id))
        event = ChangeEvent(tenant, user_id, "write", at, keys=tuple(r.key for r in records),
                            memory_ids=tuple(r.id for r in records), client_id=records[0].client_id,
                            causality_id=records[0].change_set_id, records=records)
        subject, payload = self.encode(event, event_id, self.domain, hlcs)
        self.outbox.add(tx, OutboxEntry(event_id, tenant, user_id, subject, payload, at))
        self._bump("staged")

    def _quiet(self, causality_id: str | None) -> bool:
        return getattr(self._applying, "on", False) or (self.suppress is not None and self.suppress(causality_id))

    def stage_erasure(self, tx: WriteTx, event: ChangeEvent) -> None:
        """The EngineContext erasure stager: inside the soft delete's transaction, the erasure's outbox event
        (and, for forget_user, dropping the user's queued events: they may carry values). The event is held
        back from the relay until `on_change` saw the commit — after the event sync queued the stream's
        purge, which would otherwise erase the announcement too."""
        if self._quiet(event.causality_id):
            return  # applying a remote erasure: not announced again
        if event.action == "forget_user":
            self.outbox.discard_user(event.tenant, event.user_id, tx)
        event_id = new_id()
        subject, payload = self.encode(event, event_id, self.domain, {})
        stale = getattr(self._erasing, "held", None)  # an erasure of this thread that rolled back
        with self._lock:
            if stale is not None:
                self.held.discard(stale)
            self.held.add(event_id)
        self._erasing.held = event_id
        self.outbox.add(tx, OutboxEntry(event_id, event.tenant, event.user_id, subject, payload, event.at))
        self._bump("staged")

    def pending(self, limit: int = 256) -> list[OutboxEntry]:
        """The relay's view of the outbox: what is queued, less the erasure events held back (above)."""
        with self._lock:
            held = set(self.held)
        return [e for e in self.outbox.pending(limit) if e.event_id not in held]

    def on_change(self, event: ChangeEvent) -> None:
        """Change listener (after commit): releases an erasure's event (forget(key) / forget_range first drop
        the queued events that carry what was erased); every change wakes the relay."""
        if event.action in ERASE_ACTIONS:  # emitted on the thread that erased, right after its commit
            event_id = getattr(self._erasing, "held", None)
            self._erasing.held = None
            if event.action == "forget" and event.memory_ids and not self._quiet(event.causality_id):
                self._discard_carrying(event.tenant, event.user_id, frozenset(event.memory_ids))
            if event.action == "forget":  # forget_user: delete_user_docs took them
                self._drop_dead_letters(event.tenant, event.user_id, frozenset(event.memory_ids),
                                        frozenset(event.keys))
            if event_id is not None:
                with self._lock:
                    self.held.discard(event_id)
        if self.wake is not None:
            self.wake()

    def _discard_carrying(self, tenant: str, user_id: str, ids: frozenset[str]) -> None:
        """forget(key) / forget_range: drop the user's queued events that carry an erased version (as the
        stream's copies are erased: a batch event that also carried other keys goes whole)."""
        doomed = []
        for entry in self.outbox.pending(100_000):
            if entry.tenant != tenant or entry.user_id != user_id:
                continue
            try:
                records = json.loads(entry.payload).get("records") or []
            except ValueError:
                continue
            if any(isinstance(r, dict) and r.get("id") in ids for r in records):
                doomed.append(entry.event_id)
        if doomed:
            self.outbox.remove(doomed)

    def _drop_dead_letters(self, tenant: str, user_id: str, ids: frozenset[str], keys: frozenset[str]) -> None:
        """An erasure also erases the dead letters that carry an erased version or a version of an erased key."""
        for key, doc in self.ctx.store.list_docs(tenant, DEAD_LETTERS, user_id=user_id, limit=100_000):
            try:
                records = json.loads(str(doc.get("payload") or "{}")).get("records") or []
            except ValueError:
                continue
            if any(isinstance(r, dict) and (r.get("id") in ids or r.get("key") in keys) for r in records):
                self.ctx.store.delete_doc(tenant, DEAD_LETTERS, key)

    # -- incoming ------------------------------------------------------------------------------------

    def park(self, change: RemoteChange, error: str, attempts: int, *, now: float | None = None) -> None:
        """Keep a remote event whose apply keeps failing as a dead letter (the consumer then acknowledges it):
        a document of the user's (erased with them) holding the event as it travelled."""
        at = self.ctx.now(now)
        check_ids(change.tenant, change.user_id)
        self.ctx.store.put_doc(change.tenant, DEAD_LETTERS, change.event_id, {
            "event_id": change.event_id, "user_id": change.user_id, "domain": change.domain,
            "action": change.action, "keys": list(change.keys), "attempts": attempts, "error": error[:300],
            "at": at, "payload": json.dumps(change.raw, ensure_ascii=False)}, now=at, user_id=change.user_id)
        self._bump("dead_letters")

    def apply(self, change: RemoteChange, *, now: float | None = None) -> str:
        """Apply one remote event (exactly once). Returns what happened: "applied", "duplicate",
        "own_domain", "no_domain", "ignored"."""
        if not change.domain or self.domain is None:
            return "no_domain"  # published by (or received by) an instance that does not federate
        domain = self.domain
        if change.domain == domain:
            self._bump("own_domain")
            return "own_domain"
        at = self.ctx.now(now)
        check_ids(change.tenant, change.user_id)
        self._check_drift(change, at)
        if self.on_remote_cause is not None:
            self.on_remote_cause(change.causality_id)
        if change.action in ERASE_ACTIONS:
            return self._apply_erasure(change, at)
        if change.action not in WRITE_ACTIONS:
            with self.ctx.store.transaction(change.tenant, change.user_id) as tx:
                self.outbox.mark_applied(tx, change.tenant, change.event_id, at)
            return "ignored"
        tenant, user_id = change.tenant, change.user_id
        contracts = self.ctx.contracts_for(tenant)
        consents = self.grants.consents(tenant, user_id)
        written: list[MemoryRecord] = []
        notices: list[Notice] = []
        with self.ctx.store.transaction(tenant, user_id) as tx:
            if not self.outbox.mark_applied(tx, tenant, change.event_id, at):
                self._bump("duplicates")
                return "duplicate"
            for rec in change.records:
                try:
                    outcome = self._apply_record(tx, change, rec, at, contracts, consents)
                except (KeyError, TypeError, ValueError, InputProblem, InvalidArgument, ValidationError) as exc:
                    self._bump("bad_records")
                    log.warning("federation: ignoring a malformed record of event %s: %s", change.event_id, exc)
                    continue
                if isinstance(outcome, Skip):
                    self._bump(f"skipped_{outcome.value}")
                    continue
                record, notice = outcome
                written.append(record)
                if notice is not None:
                    notices.append(notice)
        for n in notices:
            self.ctx.store.put_doc(tenant, NOTICES, n.id, n.to_dict(), now=at, user_id=user_id,
                                   expires_at=at + NOTICE_TTL)
            self._bump("notices")
        self._bump("applied")
        if written:
            self._applying.on = True
            try:  # indexes, tiers and session activity follow; the outbox stager stays quiet
                self.ctx.emit(ChangeEvent(tenant, user_id, "write", at, keys=tuple(r.key for r in written),
                                          memory_ids=tuple(r.id for r in written), client_id=change.client_id,
                                          causality_id=change.causality_id, records=tuple(written)))
            finally:
                self._applying.on = False
        return "applied"

    def _check_drift(self, change: RemoteChange, at: float) -> None:
        """Refuse (ValidationError: the consumer acknowledges it as rejected) an event stamped further ahead of
        this instance's wall time than `federate_max_clock_drift_seconds` (policy.hlc.too_far_ahead)."""
        for rec in change.records:
            try:
                clock = Hlc.parse(str(rec["hlc"])) if isinstance(rec, Mapping) and rec.get("hlc") else None
            except ValueError:
                continue  # a malformed record: _apply_record skips it
            if clock is not None and too_far_ahead(clock, int(at * 1000), int(self.max_drift * 1000)):
                self._bump("clock_refused")
                ahead = clock.wall_ms / 1000 - at
                log.warning("federation: refusing event %s from %s: its clock is %.0f s ahead of this instance's "
                            "(federate_max_clock_drift_seconds = %g)", change.event_id, change.domain, ahead,
                            self.max_drift)
                raise ValidationError(f"the event's clock is {ahead:.0f} s ahead of this instance's (more than "
                                      f"federate_max_clock_drift_seconds = {self.max_drift:g})", field="hlc")

    def _apply_record(self, tx: WriteTx, change: RemoteChange, rec: Mapping[str, Any], at: float,
                      contracts: Any, consents: set[tuple[str, str]]) -> Skip | tuple[MemoryRecord, Notice | None]:
        key, kind = str(rec["key"]), Kind(rec["kind"])
        if rec.get("deleted"):
            return Skip.NO_VALUE
        contract = contracts.for_write(key, kind)
        skip = admit(sharing=contract.sharing if contract is not None else None,
                     consented=(key, change.domain) in consents, has_value="value" in rec,
                     retracted=bool(rec.get("retracted")), session_bound=kind is Kind.CONTEXT)
        if skip is not None:
            return skip
        assert change.domain is not None
        retracted = bool(rec.get("retracted"))
        if not retracted:  # this instance's own validation and guards, as for a local write
            checked = self.write.prepare(WriteRequest(
                kind=kind.value, key=key, value=rec.get("value"), source=str(rec["source"]),
                importance=rec.get("importance"), confidence=rec.get("confidence"), client_id=rec.get("client_id"),
                event_at=rec.get("event_at"), canonical=rec.get("canonical")), contracts)
            if isinstance(checked, WriteResult):
                return Skip.REFUSED
        memory_id = str(rec["id"])
        check_identifier("memory id", memory_id)
        clock = Hlc.parse(str(rec["hlc"]))
        self.observe(clock, at)
        if tx.get(memory_id) is not None:  # this version is here already (its event was applied)
            return Skip.OWN_DOMAIN
        incoming = Order(clock.text(), str(rec.get("client_id") or ""), change.domain, change.event_id)
        head = tx.head(key)
        current: Order | None = None
        head_stamp: VersionStamp | None = None
        if head is not None:
            head_stamp = self.outbox.stamps(tx, change.tenant, [head.id]).get(head.id)
            current = (Order(head_stamp.hlc, head_stamp.client_id, head_stamp.origin, head_stamp.event_id)
                       if head_stamp is not None
                       else Order(Hlc.from_seconds(head.created_at).text(), head.client_id or "", "", ""))
        won = wins(incoming, current)
        created = float(rec.get("created_at", change.at))
        expires = rec.get("expires_at")
        record = MemoryRecord(
            id=memory_id, tenant=change.tenant, user_id=change.user_id, kind=kind, key=key,
            value=None if rec.get("retracted") else rec.get("value"), source=Source(rec["source"]),
            confidence=float(rec.get("confidence", 1.0)), importance=float(rec.get("importance", 0.5)),
            created_at=created, expires_at=float(expires) if expires is not None else None,
            prev_version_id=head.id if head is not None else None,
            superseded_by=None if won or head is None else head.id, superseded_at=None if won else at,
            client_id=rec.get("client_id"), event_at=rec.get("event_at"), change_set_id=rec.get("change_set_id"),
            actor=f"domain:{change.domain}", retracted=bool(rec.get("retracted")), canonical=rec.get("canonical"))
        if won and head is not None:
            tx.supersede(head.id, record.id, at)
        tx.insert(record)
        self.outbox.stamp(tx, change.tenant, VersionStamp(memory_id, clock.text(), incoming.client_id, change.domain,
                                                          change.event_id))
        tx.audit(AuditEvent(tenant=change.tenant, at=at, action="federated_apply", user_id=change.user_id, key=key,
                            memory_id=memory_id, op="UPDATE" if won and head else ("ADD" if won else "HISTORY"),
                            detail={"domain": change.domain, "event_id": change.event_id, "won": won}))
        self._bump("won" if won else "lost")
        notice = None
        if won and head is not None and head_stamp is not None and deserves_notice(
                head_origin=head_stamp.origin, own_domain=self.domain or "", head_written_at=head.created_at, now=at,
                window=self.window):
            questions = changed_elsewhere(key, record.value, contracts.get(key), record.retracted)
            notice = Notice(new_id(), key, at, change.domain, head.id, memory_id, questions)
        return record, notice

    def _apply_erasure(self, change: RemoteChange, at: float) -> str:
        tenant, user_id = change.tenant, change.user_id
        # Erase first, mark applied after: erasing is idempotent, so a crash in between re-applies the event
        # at redelivery — marking first would lose the erasure for good.
        if change.event_id in self.outbox.applied(tenant, [change.event_id]):
            self._bump("duplicates")
            return "duplicate"
        self._applying.on = True
        try:
            if change.action == "forget_user":
                self.erasure.forget(tenant, user_id, now=at, actor=f"domain:{change.domain}",
                                    causality_id=change.causality_id)
            elif change.keys:  # forget(key): the keys, every version held here
                self.erasure.forget(tenant, user_id, keys=sorted(set(change.keys)), now=at,
                                    actor=f"domain:{change.domain}", causality_id=change.causality_id)
            else:  # forget_range: exactly the versions erased at the origin (applied versions keep their ids)
                ids = list(dict.fromkeys(change.memory_ids))
                for part in chunked(ids):
                    self.erasure.forget(tenant, user_id, memory_ids=list(part), now=at,
                                        actor=f"domain:{change.domain}", causality_id=change.causality_id)
        finally:
            self._applying.on = False
        with self.ctx.store.transaction(tenant, user_id) as tx:
            if not self.outbox.mark_applied(tx, tenant, change.event_id, at):
                self._bump("duplicates")  # a concurrent delivery of the same event got there first
                return "duplicate"
        self._bump("erasures_applied")
        return "applied"

    # -- plumbing ----------------------------------------------------------------------------------------

    def _bump(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.counts)
        out["domain"] = self.domain
        out["outbox_pending"] = len(self.outbox.pending(10_000))
        out["clock"] = self._clock.text()
        return out
