"""`Memory`: the facade. Thin on purpose — each method hands off to one pipeline module."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from usermem.config import Settings, load_settings
from usermem.engine.compose import compose
from usermem.engine.consent import ConsentRequest
from usermem.engine.context import Clock, Listener
from usermem.engine.export import export_user
from usermem.engine.federation import Federation
from usermem.engine.federation import keep_local as fed_keep_local
from usermem.engine.federation import notices as fed_notices
from usermem.engine.grants import Grant, withhold_stored
from usermem.engine.guard import guard_parameters
from usermem.engine.lifecycle import ChangeSetRevert
from usermem.engine.resolvers import ResolverFn
from usermem.engine.sessions import CloseHook, MessagesAdded, Session, SessionClosed, Transcript, episodes
from usermem.engine.webhooks import Delivery, Webhook, WebhookCreated, WebhookHub
from usermem.engine.write import check_ids
from usermem.errors import InvalidArgument, ValidationError
from usermem.events.payload import record_payload
from usermem.model import (
    AuditEvent,
    Candidate,
    Kind,
    MemoryRecord,
    Recalled,
    ScoredMemory,
    UserPage,
    WriteRequest,
    WriteResult,
    new_id,
    parse_kind,
)
from usermem.policy.contracts import ContractSet, FieldContract, Sensitivity
from usermem.policy.validate import MAX_SEQ, int_arg, time_range_arg
from usermem.store.base import AuditQuery, Store
from usermem.understand.text import coerce_messages, parts

if TYPE_CHECKING:
    from usermem.events.payload import RemoteChange
    from usermem.events.ports import Transport
    from usermem.events.sync import FederatedSync
    from usermem.relevance.embed import Embedder
    from usermem.relevance.hybrid import HybridRelevance
    from usermem.understand.service import Understanding
    from usermem.understand.usermodel import UserModel


def _kinds(kinds: Iterable[str | Kind] | None) -> list[Kind] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        return [parse_kind(k) for k in kinds]
    except ValueError as exc:
        raise ValidationError(str(exc), field="kinds") from None


@guard_parameters  # identifier parameters refuse personal data, by name, on every method (engine/guard.py)
class Memory:
    """Long-term user memory.

    >>> m = Memory()        # USERMEM_* settings; no USERMEM_STORE_URL: private in-memory SQLite
    >>> r = m.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed")
    >>> r.op
    <Op.ADD: 'ADD'>
    """

    def __init__(self, url: str | None = None, *, settings: Settings | None = None, store: Store | None = None,
                 clock: Clock | None = None, contracts: ContractSet | None = None) -> None:
        if settings is None:
            # Defaults < usermem.toml (or USERMEM_CONFIG) < USERMEM_* environment < explicit arguments.
            # Without a URL anywhere the store is a private in-memory SQLite database ("sqlite://").
            settings = load_settings() if url is None else load_settings(store_url=url)
        elif url is not None:
            settings = settings.with_overrides(store_url=url)
        self.settings = settings
        # The composition root (engine/compose.py) builds the pipelines and plug-ins and wires them.
        engine = self._engine = compose(settings, store=store, clock=clock, contracts=contracts)
        self._ctx = engine.ctx
        self._write = engine.write
        self._recall = engine.recall
        self._erasure = engine.erasure
        self._lifecycle = engine.lifecycle
        self._sessions = engine.sessions
        self._contracts = engine.contracts
        self._grants = engine.grants
        self._live = engine.live
        self._consent = engine.consent
        # Webhook subscriptions (engine/webhooks.py): change events become signed, retried deliveries.
        self._webhooks = WebhookHub(self._ctx.store, self.contracts_for, self._ctx.clock,
                                    max_attempts=settings.webhook_max_attempts,
                                    disable_after=settings.webhook_disable_after,
                                    allow_private=settings.webhook_allow_private_urls)
        self._ctx.subscribe(self._webhooks.on_change)
        self._erasure.add_purger(self._webhooks.prune)  # purge drops finished deliveries past the retention

    # -- plumbing ------------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self._ctx.store

    @property
    def contracts(self) -> ContractSet:
        return self._ctx.contracts

    @property
    def webhooks(self) -> WebhookHub:
        """The webhook hub (engine/webhooks.py): the operations below use it; `deliver_due(now)` sends what is
        due (`usermem serve` runs it in the background, docs/webhooks.md)."""
        return self._webhooks

    # -- webhooks (docs/webhooks.md) ------------------------------------------------------------------------

    def create_webhook(self, tenant: str, url: str, events: Iterable[str] | None = None, *,
                       secret: str | None = None, actor: str | None = None,
                       now: float | None = None) -> WebhookCreated:
        """Subscribe an http(s) URL to the tenant's change events (write, revert, forget, consent; default all).
        Returns the subscription and its HMAC-SHA256 signing secret — the only time the secret is returned."""
        return self._webhooks.add(tenant, url, events, secret=secret, actor=actor, now=self._ctx.now(now))

    def list_webhooks(self, tenant: str) -> list[Webhook]:
        """The tenant's webhook subscriptions (never their secrets)."""
        return self._webhooks.subscriptions(tenant)

    def get_webhook(self, tenant: str, webhook_id: str) -> Webhook:
        """One webhook subscription: URL, events, enabled, consecutive failures (never its secret)."""
        return self._webhooks.get(tenant, webhook_id)

    def delete_webhook(self, tenant: str, webhook_id: str, *, actor: str | None = None,
                       now: float | None = None) -> bool:
        """Delete a webhook subscription (its pending deliveries are skipped); False when there was none."""
        return self._webhooks.remove(tenant, webhook_id, actor=actor, now=self._ctx.now(now))

    def enable_webhook(self, tenant: str, webhook_id: str, *, actor: str | None = None,
                       now: float | None = None) -> Webhook:
        """Re-enable a webhook subscription disabled after repeated failures (its failure count restarts)."""
        return self._webhooks.enable(tenant, webhook_id, actor=actor, now=self._ctx.now(now))

    def webhook_deliveries(self, tenant: str, webhook_id: str | None = None, *, limit: int = 100) -> list[Delivery]:
        """The delivery log, oldest first (the last `limit`): each delivery's event, state and attempts."""
        limit = int_arg("limit", limit, 1, 10_000)
        return self._webhooks.deliveries(tenant, webhook_id, limit=limit)

    def ping_webhook(self, tenant: str, webhook_id: str, *, now: float | None = None) -> Delivery:
        """Send one signed `ping` event to the subscription now and return the logged delivery (delivered or
        failed, with the receiver's status): a test of the receiver, never retried."""
        return self._webhooks.ping(tenant, webhook_id, now=self._ctx.now(now))

    def _hook(self, tenant: str, user_id: str, kind: str, now: float | None, *, keys: Iterable[str] = (),
              results: Iterable[WriteResult] = (), **extra: Any) -> None:
        records = [r.memory for r in results if r.memory is not None]
        contracts = self.contracts_for(tenant) if records else None
        self._webhooks.notify(tenant, user_id, kind, at=self._ctx.clock() if now is None else now, keys=keys,
                              records=[record_payload(r, contracts, "l1") for r in records], extra=extra)

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(ChangeEvent)` after every committed change."""
        self._ctx.subscribe(listener)

    def on_remote_change(self, callback: Callable[[RemoteChange], None]) -> None:
        """Call `callback(RemoteChange)` for each change made by another instance (needs `nats_url`).

        Runs on the event dispatcher thread after this process's caches of the user are dropped;
        whatever it writes or forgets is not published again (docs/events.md, loop prevention).
        """
        if self._engine.events is None:
            raise InvalidArgument("remote changes need the event bus: set nats_url (USERMEM_NATS_URL)")
        self._engine.events.add_callback(callback)

    @property
    def relevance(self) -> HybridRelevance | None:
        """The hybrid relevance plug-in of recall(query=...) (embedder, vector index, indexer), or None."""
        return self._engine.relevance

    @property
    def _relevance(self) -> HybridRelevance | None:  # the pre-0.2 private name, kept for old callers
        return self._engine.relevance

    def use_relevance(self, relevance: HybridRelevance | Literal["hybrid"] | None = "hybrid", *,
                      embedder: Embedder | None = None, background: bool = True) -> HybridRelevance | None:
        """Wire relevance into recall(query=...), indexing and erasure; returns what is wired.

        "hybrid" builds it from the settings (or with `embedder`); None removes it (stored vectors stay).
        `usermem.relevance.hybrid.install/uninstall` call this.
        """
        return self._engine.use_relevance(relevance, embedder=embedder, background=background)

    @property
    def events(self) -> FederatedSync | None:
        """The FederatedSync of this instance (stats(), instance_id), or None without `nats_url`."""
        return self._engine.events

    # -- federation (docs/federation.md) ----------------------------------------------------------------

    def federate(self, domain: str, *, transport: Transport | None = None, catch_up_timeout: float = 30.0,
                 instance: str | None = None) -> Federation:
        """Apply the changes other domains publish (seed 004 §4.3), by contract and clock order.

        Catches up on the events this instance missed (its durable consumer, within the stream's retention)
        before returning, then keeps applying them in the background. Needs `nats_url` unless a `transport`
        is given (e.g. `usermem.events.federation.LocalHub().transport(name)` in one process). The setting
        `federate_domain` does this at start-up.
        """
        return self._engine.federate(domain, transport=transport, catch_up_timeout=catch_up_timeout,
                                     instance=instance)

    @property
    def federation(self) -> Federation | None:
        """The federation of this instance (stats(), apply(), the clock), or None."""
        return self._engine.federation

    def federation_notices(self, tenant: str, user_id: str, *, now: float | None = None) -> list[dict[str, Any]]:
        """The user's open "changed on another device" notices (a remote change replaced a value set here
        within `federate_notice_window_seconds`): id, key, at, domain, the two memory ids, questions zh/en."""
        return [n.to_dict() for n in fed_notices(self._ctx, tenant, user_id, now=now)]

    def keep_local(self, tenant: str, user_id: str, notice_id: str, *, now: float | None = None,
                   actor: str | None = None) -> WriteResult:
        """"Keep this device's value" for a notice: writes it again (it then wins on every instance)."""
        return fed_keep_local(self._ctx, self._engine.write, tenant, user_id, notice_id, now=now, actor=actor)

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until memories written so far are indexed for recall(query=...) (tests, imports, evals)."""
        self._engine.flush(timeout)

    def close(self) -> None:
        self._engine.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes --------------------------------------------------------------------------------------

    def write(self, tenant: str, user_id: str, kind: str, key: str, value: Any, *, source: str = "extracted",
              importance: float | None = None, confidence: float | None = None, now: float | None = None,
              session_id: str | None = None, client_id: str | None = None, event_at: float | None = None,
              ttl_seconds: float | None = None, change_set_id: str | None = None,
              actor: str | None = None, canonical: Any = None) -> WriteResult:
        """Write one memory. Returns ADD / UPDATE / NOOP / REJECT with a reason; never half-writes.

        `canonical` is an optional normalised form kept beside `value` (the user's words), never instead of it."""
        request = WriteRequest(kind=kind, key=key, value=value, source=source, importance=importance,
                               confidence=confidence, session_id=session_id, client_id=client_id, event_at=event_at,
                               ttl_seconds=ttl_seconds, canonical=canonical)
        return self._write.write(tenant, user_id, request, now=now, change_set_id=change_set_id, actor=actor)

    def write_many(self, tenant: str, user_id: str, writes: Sequence[WriteRequest | dict[str, Any]], *,
                   now: float | None = None, change_set_id: str | None = None,
                   actor: str | None = None) -> list[WriteResult]:
        """Write a batch in one transaction; the accepted writes share one change set id."""
        requests = [w if isinstance(w, WriteRequest) else _request_from_dict(w) for w in writes]
        cs = change_set_id or new_id()
        return self._write.write_many(tenant, user_id, requests, now=now, change_set_id=cs, actor=actor)

    # -- reads ---------------------------------------------------------------------------------------

    def recall(self, tenant: str, user_id: str, k: int = 5, *, now: float | None = None,
               kinds: Iterable[str | Kind] | None = None, query: str | None = None,
               keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
               event_until: float | None = None, actor: str | None = None,
               domain: str | None = None, purpose: str | None = None) -> Recalled[MemoryRecord]:
        """The user's current memories, best first: not superseded, deleted, expired or decayed away.

        `query` ranks by meaning and words (hybrid relevance); `event_from`/`event_until` keep memories
        whose event time (else write time) lies in [event_from, event_until). The result is a list, with
        `.withheld`: the fields left out and why (see recall_scored).
        """
        scored = self.recall_scored(tenant, user_id, k, now=now, kinds=kinds, query=query, keys=keys,
                                    mark_used=mark_used, event_from=event_from, event_until=event_until,
                                    actor=actor, domain=domain, purpose=purpose)
        return Recalled([s.memory for s in scored], scored.withheld)

    def recall_scored(self, tenant: str, user_id: str, k: int = 5, *, now: float | None = None,
                      kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                      keys: Sequence[str] | None = None, mark_used: bool = False,
                      event_from: float | None = None, event_until: float | None = None,
                      actor: str | None = None, domain: str | None = None,
                      purpose: str | None = None) -> Recalled[ScoredMemory]:
        """Like recall, with scores, weights and confirmation flags.

        L2/L3 fields are returned only under an active grant (see `grant`); `actor` (API key or agent
        id) is the reader the audit log names and the grantee a grant may be restricted to. `domain`
        (e.g. "logistics") names the reader's domain: fields of other domains are then returned only
        when their contract shares them, or (explicit_opt_in) after `opt_in`; private ones never.
        What was left out is in `.withheld` (key, level, reason needs_grant / disabled / private_to_domain,
        and a consent question in the user's language shaped by `purpose`) — never the values.
        """
        if purpose is not None:
            purpose = _purpose_arg(purpose)
        event_from, event_until = time_range_arg(event_from, event_until, ("event_from", "event_until"))
        check_ids(tenant, user_id, actor=actor)
        k = _count_arg("k", k)
        return self._recall.recall(tenant, user_id, k, now=self._ctx.now(now), kinds=_kinds(kinds), keys=keys,
                                   query=query, mark_used=mark_used, event_from=event_from,
                                   event_until=event_until, actor=actor, domain=domain, purpose=purpose)

    def get(self, tenant: str, memory_id: str, *, actor: str | None = None,
            now: float | None = None) -> MemoryRecord | None:
        """One record by id. An L2/L3 record needs an active grant (PermissionDenied otherwise)."""
        record = self._ctx.store.get(tenant, memory_id)
        if record is not None:
            self._authorize_read(tenant, record.user_id, record.key, [record], actor, now, "get")
        return record

    def history(self, tenant: str, user_id: str, key: str, *, actor: str | None = None,
                now: float | None = None) -> list[MemoryRecord]:
        """Every version of a key, oldest first, superseded versions included (deleted ones are not).

        An L2/L3 field needs an active grant (PermissionDenied otherwise); the read is audited.
        """
        check_ids(tenant, user_id)
        records = self._ctx.store.history(tenant, user_id, key)
        self._authorize_read(tenant, user_id, key, records, actor, now, "history")
        return records

    def _authorize_read(self, tenant: str, user_id: str, key: str, records: Sequence[MemoryRecord],
                        actor: str | None, now: float | None, via: str) -> None:
        contracts = self._ctx.contracts_for(tenant)
        contract = contracts.get(key)
        if contract is None or contract.sensitivity is Sensitivity.L1 or not records:
            return
        gate = self._grants.gate(tenant, user_id, self._ctx.now(now), actor)
        gate.require(contract)
        gate.audit_reads(records[-1:], contracts, via=via)

    def audit(self, tenant: str, *, user_id: str | None = None, action: str | None = None,
              since: float | None = None, until: float | None = None, limit: int = 100,
              after_seq: int | None = None) -> list[AuditEvent]:
        since, until = time_range_arg(since, until)
        limit = _count_arg("limit", limit)
        after_seq = None if after_seq is None else int_arg("after_seq", after_seq, 0, MAX_SEQ)
        return self._ctx.store.audit_log(AuditQuery(tenant, user_id, action, since, until, limit, after_seq))

    # -- forgetting ----------------------------------------------------------------------------------

    def forget(self, tenant: str, user_id: str, key: str, *, now: float | None = None,
               actor: str | None = None) -> int:
        """Soft-delete every version of one key; returns the rows deleted."""
        return self._erasure.forget(tenant, user_id, keys=[key], now=now, actor=actor)

    def forget_user(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None) -> int:
        """Soft-delete everything held about a user in one transaction; returns the rows deleted."""
        return self._erasure.forget(tenant, user_id, now=now, actor=actor)

    def forget_range(self, tenant: str, user_id: str, *, since: float | None = None, until: float | None = None,
                     now: float | None = None, actor: str | None = None) -> int:
        """Soft-delete what was written in [since, until). At least one bound is required (forget_user
        erases everything)."""
        check_ids(tenant, user_id)
        if since is None and until is None:
            raise ValidationError("forget_range needs a bound: since, until or both (forget_user erases "
                                  "everything)", field="since")
        since, until = time_range_arg(since, until)
        return self._erasure.forget(tenant, user_id, created_from=since, created_until=until, now=now, actor=actor)

    def purge(self, now: float | None = None, *, retention_days: float | None = None) -> int:
        """Physically delete soft-deleted and expired rows older than the retention period."""
        return self._erasure.purge(now=now, retention_days=retention_days)

    # -- privacy and governance (engine/grants.py, engine/contracts.py, engine/export.py) --------------

    def grant(self, tenant: str, user_id: str, fields_or_level: str | Sensitivity | Iterable[str], purpose: str,
              ttl: float = 30 * 60.0, *, actor: str | None = None, grantee: str | None = None,
              now: float | None = None) -> str:
        """Allow reads of L2/L3 fields ("L2", "L3", a key or keys) for `ttl` seconds; returns the grant id."""
        return self._grants.grant(tenant, user_id, fields_or_level, purpose, ttl, actor=actor, grantee=grantee,
                                  now=now)

    def revoke(self, tenant_or_grant_id: str, grant_id: str | None = None, *, actor: str | None = None,
               now: float | None = None) -> bool:
        """End a grant now: revoke(grant_id) or revoke(tenant, grant_id). True when it existed."""
        if grant_id is None:
            return self._grants.revoke(tenant_or_grant_id, actor=actor, now=now)
        return self._grants.revoke(grant_id, tenant_or_grant_id, actor=actor, now=now)

    def grants(self, tenant: str, user_id: str | None = None, *, now: float | None = None,
               include_expired: bool = False) -> list[Grant]:
        """Active grants of a tenant (or one user), optionally with expired ones not yet revoked."""
        return self._grants.list(tenant, user_id, now=now, include_expired=include_expired)

    def export(self, tenant: str, user_id: str, *, now: float | None = None,
               actor: str | None = None) -> dict[str, Any]:
        """Everything held about a user as JSON-ready data: every field's current value and history,
        and the user's documents (sessions, grants...). Audited; includes L2/L3 (it goes to the user)."""
        return export_user(self._ctx, tenant, user_id, now=now, actor=actor)

    def contracts_for(self, tenant: str) -> ContractSet:
        """The contract set in force for a tenant (defaults plus its stored edits)."""
        check_ids(tenant, "-")
        return self._contracts.for_tenant(tenant)

    def contracts_list(self, tenant: str) -> list[FieldContract]:
        return sorted(self.contracts_for(tenant), key=lambda c: c.key)

    def contract(self, tenant: str, key: str) -> FieldContract:
        check_ids(tenant, "-")
        return self._contracts.get(tenant, key)

    def contract_history(self, tenant: str, key: str) -> list[dict[str, Any]]:
        check_ids(tenant, "-")
        return self._contracts.history(tenant, key)

    def set_contract(self, tenant: str, contract: FieldContract | dict[str, Any], *, actor: str | None = None,
                     now: float | None = None) -> FieldContract:
        """Add or replace a field's contract (a new version; audited). Takes effect at once."""
        check_ids(tenant, "-")
        return self._contracts.set(tenant, contract, actor=actor, now=now)

    def enable_field(self, tenant: str, key: str, *, actor: str | None = None,
                     now: float | None = None) -> FieldContract:
        check_ids(tenant, "-")
        return self._contracts.set_enabled(tenant, key, True, actor=actor, now=now)

    def disable_field(self, tenant: str, key: str, *, actor: str | None = None,
                      now: float | None = None) -> FieldContract:
        """Stop collecting and recalling a field at once (stored values are kept, hidden; forget erases)."""
        check_ids(tenant, "-")
        return self._contracts.set_enabled(tenant, key, False, actor=actor, now=now)

    def delete_contract(self, tenant: str, key: str, *, actor: str | None = None, now: float | None = None) -> None:
        check_ids(tenant, "-")
        self._contracts.delete(tenant, key, actor=actor, now=now)

    def set_unknown_fields(self, tenant: str, policy: str, *, actor: str | None = None,
                           now: float | None = None) -> str:
        """Unknown keys: "reject", or "accept" as L1 with the kind's defaults."""
        check_ids(tenant, "-")
        return self._contracts.set_unknown_policy(tenant, policy, actor=actor, now=now).value

    def register_resolver(self, name: str, resolver: ResolverFn | str) -> None:
        """Register how a live field is read: `fn(tenant, user_id, key) -> value` or an http(s) URL.

        Registered under a field key it serves that field; under another name, contracts refer to it
        as resolver="registered:<name>".
        """
        self._live.register(name, resolver)

    def opt_in(self, tenant: str, user_id: str, fields: Iterable[str] | str | None = None, domain: str | None = None,
               *, request_id: str | None = None, actor: str | None = None, now: float | None = None) -> list[str]:
        """The user lets `domain` use `fields` whose contract says sharing=explicit_opt_in (audited).

        With `request_id` instead, the user approves that consent request (as `approve_consent`); the
        fields it covered are returned.
        """
        if request_id is not None:
            if fields is not None or domain is not None:
                raise ValidationError("give either request_id, or fields and domain", field="request_id")
            return list(self.approve_consent(tenant, user_id, request_id, actor=actor, now=now).fields)
        if fields is None or domain is None:
            raise ValidationError("opt_in needs fields and domain (or a request_id)",
                                  field="fields" if fields is None else "domain")
        added = self._grants.opt_in(tenant, user_id, fields, domain, actor=actor, now=now)
        self._hook(tenant, user_id, "consent", now, keys=added, consent="opt_in", domain=domain)
        return added

    def opt_out(self, tenant: str, user_id: str, fields: Iterable[str] | str, domain: str, *,
                actor: str | None = None, now: float | None = None) -> int:
        """Withdraw an opt-in; returns how many consents were removed."""
        removed = self._grants.opt_out(tenant, user_id, fields, domain, actor=actor, now=now)
        self._hook(tenant, user_id, "consent", now, keys=[fields] if isinstance(fields, str) else list(fields),
                   consent="opt_out", domain=domain)
        return removed

    def request_consent(self, tenant: str, user_id: str, fields: Iterable[str] | str, purpose: str,
                        ttl: float = 30 * 60.0, *, domain: str | None = None, session_id: str | None = None,
                        actor: str | None = None, now: float | None = None) -> ConsentRequest:
        """Ask the user to let withheld `fields` be used for `purpose` for `ttl` seconds (audited).

        Returns the pending request with its question in Chinese and English. Asking again returns the
        same pending request, or the declined one when the user already said no in this session.
        """
        return self._consent.request(tenant, user_id, fields, purpose, ttl, domain=domain, session_id=session_id,
                                     actor=actor, now=now)

    def consent_requests(self, tenant: str, user_id: str, *, status: str | None = "pending",
                         now: float | None = None) -> list[ConsentRequest]:
        """The user's consent requests, oldest first: pending (default), approved, declined, or all (None)."""
        return self._consent.list(tenant, user_id, status=status, now=now)

    def approve_consent(self, tenant: str, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        """The user agrees: a grant of the requested fields, purpose and duration is made (audited); the
        next recall includes the fields."""
        req = self._consent.approve(tenant, user_id, request_id, actor=actor, now=now)
        self._hook(tenant, user_id, "consent", now, keys=req.fields, consent="approved", request_id=req.id)
        return req

    def decline_consent(self, tenant: str, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        """The user says no: remembered for the asking session (recall marks the fields `declined` and asks
        nothing); declining an approved request revokes its grant."""
        req = self._consent.decline(tenant, user_id, request_id, actor=actor, now=now)
        self._hook(tenant, user_id, "consent", now, keys=req.fields, consent="declined", request_id=req.id)
        return req

    def users(self, tenant: str, *, prefix: str | None = None, after: str | None = None,
              limit: int = 50) -> UserPage:
        """The tenant's users (ids with a stored memory) in code-point order: `prefix` searches, `after`
        pages (pass the previous page's `next_after`)."""
        check_ids(tenant, "-")
        limit = int_arg("limit", limit, 1, 1000)
        for name, v in (("prefix", prefix), ("after", after)):
            if v is not None and (not isinstance(v, str) or len(v) > 256 or not v.isprintable()):
                raise ValidationError(f"{name} must be printable text of at most 256 characters", field=name)
        ids = self._ctx.store.users(tenant, limit + 1, prefix=prefix or None, after=after)
        more = len(ids) > limit
        ids = ids[:limit]
        return UserPage(ids, ids[-1] if more and ids else None)

    # -- lifecycle: confirmation, denial, revert (engine/lifecycle.py) ---------------------------------

    def confirm(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
                actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        """Record that the user (or an agent: source="agent_confirmed") confirmed a memory.

        last_confirmed_at becomes `now`, so the weight is back to its base. When the confirming
        source outranks the memory's (or its confidence is below 1), a new version carries the
        upgraded provenance; the returned record is the current version either way.
        """
        return self._lifecycle.confirm(tenant, user_id, memory_id, now=now, actor=actor, source=source)

    def deny(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        """Record that the user said a memory is wrong: a retraction version supersedes it; history is kept."""
        return self._lifecycle.deny(tenant, user_id, memory_id, now=now, actor=actor, source=source)

    def revert(self, tenant: str, user_id: str, key: str, to_version: str | int | None = None, *,
               now: float | None = None, actor: str | None = None, source: str = "user_confirmed") -> WriteResult:
        """Restore the previous value of `key` (or `to_version`: a version id or a 1-based position in
        history()) as a new version. History is never rewritten; the revert is audited."""
        result = self._lifecycle.revert(tenant, user_id, key, to_version, now=now, actor=actor, source=source)
        if result.memory is not None and result.op.value in ("ADD", "UPDATE"):
            self._hook(tenant, user_id, "revert", now, keys=[key], results=[result])
        return result

    def revert_change_set(self, tenant: str, change_set_id: str, *, now: float | None = None,
                          actor: str | None = None, source: str = "user_confirmed",
                          partial: bool = False) -> ChangeSetRevert:
        """Undo every write of a change set at once (all or nothing unless partial=True).

        The tenant is required: change-set ids are only unique within a tenant's data.
        """
        out = self._lifecycle.revert_change_set(tenant, change_set_id, now=now, actor=actor, source=source,
                                                partial=partial)
        by_user: dict[str, list[WriteResult]] = {}
        for r in out.results:
            if r.memory is not None and r.op.value in ("ADD", "UPDATE"):
                by_user.setdefault(r.memory.user_id, []).append(r)
        for uid, results in by_user.items():
            self._hook(tenant, uid, "revert", now, keys=[r.memory.key for r in results if r.memory],
                       results=results, change_set_id=change_set_id)
        return out

    # -- sessions (engine/sessions.py) ---------------------------------------------------------------

    def open_session(self, tenant: str, user_id: str, client_id: str | None = None, *, now: float | None = None,
                     idle_seconds: float | None = None) -> str:
        """Start a session; `context` memories written with its id live until it closes or idles out."""
        return self._sessions.open(tenant, user_id, client_id, now=now, idle_seconds=idle_seconds)

    def close_session(self, session_id: str, transcript: Transcript | None = None, *, tenant: str | None = None,
                      now: float | None = None, actor: str | None = None) -> SessionClosed:
        """Archive the session as an episode, retire its context, run the close hooks. Idempotent.

        Pass `tenant` when you have it (the HTTP API always does): the session must then belong to
        it. Without it the id is resolved through the session→tenant index.
        """
        return self._as_read(self._sessions.close(session_id, transcript, tenant=tenant, now=now, actor=actor),
                             actor, now)

    def _as_read(self, closed: SessionClosed, reader: str | None, now: float | None) -> SessionClosed:
        """The close as `reader` may see it: context fields it may not read (L2/L3 without a grant) are left
        out of `context` and named in `withheld` (the close hooks got the whole context)."""
        if not closed.context:
            return closed
        contracts = self._ctx.contracts_for(closed.tenant)
        gate = self._grants.gate(closed.tenant, closed.user_id, self._ctx.now(now), reader)
        shown = [r for r in closed.context if gate.allows(contracts.get(r.key))]
        gate.audit_reads(shown, contracts, via="close_session")
        if len(shown) == len(closed.context):
            return closed
        hidden = tuple(sorted({r.key for r in closed.context} - {r.key for r in shown}))
        return replace(closed, context=tuple(shown), withheld=hidden)

    def add_messages(self, session_id: str, messages: Sequence[Any], *, tenant: str | None = None,
                     extract: bool = False, now: float | None = None, actor: str | None = None) -> MessagesAdded:
        """Append conversation messages ({role, content}) to an open session's transcript.

        PII in the messages is redacted (the policy's redactor, as in `usermem.privacy.redact`) before
        anything is stored; the append is atomic per user; the transcript becomes the close hooks'
        transcript and is deleted when the session closes (explicitly or idle) or its user is erased.
        With `extract=True` memories are also extracted from the redacted messages and written (one
        change set); `results` holds those writes. ConflictError when the
        session is closed; TranscriptFull beyond 2000 messages per session.
        """
        if not isinstance(extract, bool):
            raise InvalidArgument(f"extract must be a bool, got {type(extract).__name__}")
        if extract:  # refused before anything is appended: what one extraction call takes (Limits)
            coerce_messages(messages)
        added = self._sessions.add_messages(session_id, messages, tenant=tenant, now=now, actor=actor)
        if not extract:
            return added
        s = added.session
        # redaction can lengthen a message a little ("[PHONE]"): parts keep each call within the limits
        change_set = new_id()
        results = [r for part in parts([m.to_dict() for m in added.messages])
                   for r in self.ingest(s.tenant, s.user_id, part, now=now, session_id=s.id,
                                        change_set_id=change_set, actor=actor)]
        return MessagesAdded(s, added.stored_messages, added.added, added.redacted, added.messages, tuple(results))

    def expire_idle_sessions(self, now: float | None = None, *, tenant: str | None = None) -> list[SessionClosed]:
        """Close (reason "idle") every session idle past its timeout; run this periodically."""
        return [self._as_read(c, None, now) for c in self._sessions.expire_idle(now=now, tenant=tenant)]

    def touch_session(self, session_id: str, *, tenant: str | None = None, now: float | None = None) -> Session:
        """Count activity in a session (postpones its idle expiry)."""
        return self._sessions.touch(session_id, tenant=tenant, now=now)

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Session:
        return self._sessions.resolve(session_id, tenant)

    def sessions(self, tenant: str, user_id: str, *, status: str | None = None,
                 now: float | None = None) -> list[Session]:
        """A user's sessions (closed ones until their retention ends); status "open" or "closed" filters."""
        return self._sessions.list_sessions(tenant, user_id, status=status, now=now)

    def session_context(self, session_id: str, *, tenant: str | None = None, k: int = 20,
                        now: float | None = None, mark_used: bool = True) -> list[ScoredMemory]:
        """The session's live context memories, best first; empty once it is closed. Counts as activity."""
        return self._sessions.context(session_id, tenant=tenant, now=now, k=_count_arg("k", k), mark_used=mark_used)

    def on_session_closed(self, callback: CloseHook) -> CloseHook:
        """Register `callback(SessionClosed)`, called after each close (explicit or idle). Usable as a decorator."""
        self._sessions.add_close_hook(callback)
        return callback

    def episodes(self, tenant: str, user_id: str, *, since: float | None = None, until: float | None = None,
                 limit: int = 10, now: float | None = None) -> list[MemoryRecord]:
        """What happened, most recent event first: episodes whose event time lies in [since, until)."""
        since, until = time_range_arg(since, until)
        return episodes(self._recall, tenant, user_id, now=self._ctx.now(now), since=since, until=until,
                        limit=_count_arg("limit", limit))


    # -- conversations (understand/: recall plans, extraction, assembly, onboarding, verification) -------

    @property
    def understanding(self) -> Understanding:
        """The conversation pipelines (usermem.understand.service.Understanding), built on first use."""
        return self._engine.understanding()

    def plan(self, tenant: str, user_id: str, message: str) -> dict[str, Any]:
        """Recall plan for the current message: {fact_recall, preference_recall, context_recall, memory_priority}.

        Reads only the message and the enabled field contracts (never stored memories); every field named
        is enabled. Uses the configured LLM when there is one, else (or on any LLM failure) deterministic rules.
        """
        return dict(self.understanding.plan(tenant, user_id, message).to_dict())

    def extract(self, messages: Any, *, tenant: str | None = None) -> list[Candidate]:
        """Propose memories (list[Candidate]) from OpenAI-style {role, content} messages or strings. Writes nothing."""
        return list(self.understanding.extract(messages, tenant=tenant))

    def ingest(self, tenant: str, user_id: str, messages: Any, *, now: float | None = None,
               session_id: str | None = None, change_set_id: str | None = None,
               actor: str | None = None) -> list[WriteResult]:
        """Extract and write (source `extracted`) through the write pipeline, one change set; audited.

        Pushback in the user's turns ("太长了", "too long again") is counted for reflexive verification.
        A result built on a stored L2/L3 value this reader may not read (an allergy added to the stored list)
        has `memory` None and `detail` "withheld" (engine/grants.withhold_stored).
        """
        results = self.understanding.ingest(tenant, user_id, messages, now=now, session_id=session_id,
                                            change_set_id=change_set_id, actor=actor)
        # what was already stored (a collection the new item was added to) passes the read gate
        gate = self._grants.gate(tenant, user_id, self._ctx.now(now), actor)
        return withhold_stored(gate, self._ctx.contracts_for(tenant), results, via="ingest")

    def assemble(self, tenant: str, user_id: str, message: str, budget_tokens: int = 800, *,
                 now: float | None = None, session_id: str | None = None, actor: str | None = None,
                 purpose: str | None = None) -> Any:
        """Plan, select and render memories as <USER_FACTS>{json}</USER_FACTS> <USER_PREFERENCES>{json}</USER_PREFERENCES>.

        Returns an Assembly (plan, facts, preferences, context, prompt, tokens...; `.to_dict()`). Marks
        what it injected as used. `.withheld` names the planned fields left out and why (as recall_scored;
        `purpose` shapes their consent question) and values withheld as instructions.
        """
        if purpose is not None:
            purpose = _purpose_arg(purpose)
        return self.understanding.assemble(tenant, user_id, message, budget_tokens, now=now, session_id=session_id,
                                           actor=actor, purpose=purpose)

    def onboarding_questions(self, tenant: str, user_id: str, language: str | None = None, *,
                             now: float | None = None) -> list[dict[str, Any]]:
        """The tenant's onboarding questions in the user's language ("zh"/"en"), each with `answered`."""
        return list(self.understanding.onboarding_questions(tenant, user_id, language, now=now))

    def set_onboarding_questions(self, tenant: str, questions: Sequence[Any], *,
                                 now: float | None = None) -> list[dict[str, Any]]:
        return list(self.understanding.set_onboarding_questions(tenant, questions, now=now))

    def answer_onboarding(self, tenant: str, user_id: str, answers: dict[str, Any], *, now: float | None = None,
                          actor: str | None = None) -> list[WriteResult]:
        """Store onboarding answers ({question id or field: answer}) with source `onboarding`."""
        return list(self.understanding.answer_onboarding(tenant, user_id, answers, now=now, actor=actor))

    def record_pushback(self, tenant: str, user_id: str, key: str, message: str = "", *, value: Any = None,
                        now: float | None = None) -> dict[str, Any]:
        """Count one pushback on a field; at the threshold a hypothesis awaits verification."""
        return dict(self.understanding.record_pushback(tenant, user_id, key, message, value=value, now=now))

    def pending_verifications(self, tenant: str, user_id: str) -> list[dict[str, Any]]:
        return list(self.understanding.pending_verifications(tenant, user_id))

    def accept_verification(self, tenant: str, user_id: str, verification_id: str, *, value: Any = None,
                            now: float | None = None, actor: str | None = None) -> WriteResult:
        """The user confirmed: store the hypothesis (or their corrected value) as `user_confirmed`."""
        result: WriteResult = self.understanding.accept_verification(tenant, user_id, verification_id, value=value,
                                                                     now=now, actor=actor)
        return result

    def reject_verification(self, tenant: str, user_id: str, verification_id: str, *,
                            now: float | None = None) -> bool:
        return bool(self.understanding.reject_verification(tenant, user_id, verification_id, now=now))

    # -- the user model (understand/usermodel.py, docs/usermodel.md) ----------------------------------

    def model(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None) -> UserModel:
        """The user model: facts, weighted preferences, context, inferred preferences and derived attributes
        with their evidence, approved procedures, and the open confirmation questions.

        Inferred and derived items are marked as such and never mixed with what the user stated; derived
        attributes whose inputs need a grant the reader lacks are listed in `withheld`, never shown."""
        return self.understanding.modeler.model(tenant, user_id, now=now, actor=actor)

    def record_signal(self, tenant: str, user_id: str, key: str, value: Any, *, agree: bool = True,
                      message: str = "", now: float | None = None) -> dict[str, Any]:
        """Count one signal that the user prefers `key` = `value` (`agree=False`: one against it), e.g. the
        user chose the same option again. Past the tenant's threshold an inference is proposed (confirm
        mode: a pending verification with a question; active mode: also an `inferred` memory at low weight)."""
        return self.understanding.modeler.record_signal(tenant, user_id, key, value, agree=agree, message=message,
                                                        now=now)

    def inference_policy(self, tenant: str) -> dict[str, Any]:
        """How the tenant turns signals into inferences: {mode: confirm|active, threshold, suppress_days}."""
        return self.understanding.modeler.inference_policy(tenant).to_dict()

    def set_inference_policy(self, tenant: str, *, mode: str | None = None, threshold: int | None = None,
                             suppress_days: float | None = None, actor: str | None = None,
                             now: float | None = None) -> dict[str, Any]:
        """Change how the tenant turns signals into inferences (only what is given changes; audited)."""
        changes = {k: v for k, v in (("mode", mode), ("threshold", threshold), ("suppress_days", suppress_days))
                   if v is not None}
        modeler = self.understanding.modeler
        merged = {**modeler.inference_policy(tenant).to_dict(), **changes}
        return modeler.set_inference_policy(tenant, merged, actor=actor, now=now).to_dict()

    def derivation_rules(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's derivation rules (shipped defaults overridden by the tenant's versions)."""
        return [r.to_dict() for r in self.understanding.modeler.rules(tenant)]

    def set_derivation_rule(self, tenant: str, rule: dict[str, Any], *, actor: str | None = None,
                            now: float | None = None) -> dict[str, Any]:
        """Create or change a derivation rule {id, when: {field: [values]}, then_key, then: {zh, en}, status}.

        Each change is a new version (audited, kept in its history); `status: proposed` waits for a person
        to set it `active`; `disabled` turns it off. Users' derived attributes follow in the background."""
        stored = self.understanding.modeler.set_rule(tenant, rule, actor=actor, now=now)
        self._engine.forget_rules_cache(tenant)
        return stored.to_dict()

    def refresh_derived(self, tenant: str, user_id: str, *, now: float | None = None,
                        actor: str | None = None) -> list[dict[str, Any]]:
        """Recompute a user's derived attributes now (the background worker does this after changes) and return
        those the reader may see: an attribute derived from an L2/L3 field it holds no grant for is left out,
        as `model()` leaves it out (and lists it in `withheld`)."""
        modeler = self.understanding.modeler
        at = self._ctx.now(now)
        modeler.refresh_derived(tenant, user_id, now=at)
        shown, _withheld = modeler.derived(tenant, user_id, now=at, actor=actor)
        return [a.to_dict() for a in shown]

    def propose_procedure(self, tenant: str, text: str, *, user_id: str | None = None,
                          evidence: Sequence[str] = (), proposed_by: str = "api",
                          now: float | None = None) -> dict[str, Any]:
        """Put a candidate procedure (how to serve this user, or every user without `user_id`) in the review
        queue with its evidence. Nothing is injected until a reviewer approves it."""
        return self.understanding.modeler.propose_procedure(tenant, text, user_id=user_id, evidence=evidence,
                                                            proposed_by=proposed_by, now=now)

    def procedures(self, tenant: str, *, user_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Procedures of the tenant (or of one user), optionally by status: proposed|approved|rejected|rolled_back."""
        return self.understanding.modeler.procedures(tenant, user_id=user_id, status=status)

    def review_procedure(self, tenant: str, procedure_id: str, decision: str, *,
                         evaluation: dict[str, Any] | None = None, text: str | None = None,
                         actor: str | None = None, now: float | None = None) -> dict[str, Any]:
        """Review a proposed procedure: approve (needs `evaluation` {name, passed: true, result}), edit (new
        `text`, stays proposed) or reject. Audited."""
        return self.understanding.modeler.review_procedure(tenant, procedure_id, decision, evaluation=evaluation,
                                                           text=text, actor=actor, now=now)

    def suggest_procedures(self, tenant: str, user_id: str, *, now: float | None = None) -> list[dict[str, Any]]:
        """Ask the configured LLM to propose procedures for this user from their recent sessions (episodes,
        redacted); each lands in the review queue as `proposed` (proposed_by "llm") with the sessions it cites."""
        at = self._ctx.now(now)
        eps = self.episodes(tenant, user_id, limit=20, now=at)
        sessions = [(r.session_id or r.id, privacy_excerpt(r.value)) for r in reversed(eps)]
        return self.understanding.proposer.procedures(tenant, user_id, sessions, at)

    def suggest_derivation_rules(self, tenant: str, *, now: float | None = None) -> list[dict[str, Any]]:
        """Ask the configured LLM to propose derivation rules over the tenant's enabled L1 fields; each is stored
        with `status: proposed` (it does nothing until a person sets it active)."""
        fields = {c.key: c.description for c in self.contracts_for(tenant).enabled()
                  if c.sensitivity.value == "L1" and c.storable}
        return [r.to_dict() for r in self.understanding.proposer.rules(tenant, fields, self._ctx.now(now))]

    def rollback_procedure(self, tenant: str, procedure_id: str, *, actor: str | None = None,
                           now: float | None = None) -> dict[str, Any]:
        """Take an approved procedure out of use (kept with its history). Audited."""
        return self.understanding.modeler.rollback_procedure(tenant, procedure_id, actor=actor, now=now)


def privacy_excerpt(value: Any, limit: int = 600) -> str:
    """An episode's text for an LLM: JSON of the value, personal data redacted, at most `limit` characters."""
    from usermem.policy.pii import redact

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return redact(text)[:limit]


def _count_arg(name: str, value: object) -> int:
    """How many at most (`k`, an audit `limit`): an int ≥ 1 (bools and floats refused, so a negative or
    fractional count never reaches a store's LIMIT, where -1 means "no limit"); a count beyond `_MAX_COUNT`
    means "all" and is clamped to it, so no arithmetic on it overflows a 64-bit LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValidationError(f"{name} must be at least 1", field=name)
    return min(value, _MAX_COUNT)


_MAX_COUNT = 1_000_000_000


def _purpose_arg(purpose: object) -> str:
    if not isinstance(purpose, str) or len(purpose) > 500 or not purpose.isprintable():
        raise ValidationError("purpose must be printable text of at most 500 characters", field="purpose")
    return purpose


_REQUEST_FIELDS = set(WriteRequest.__dataclass_fields__)


def _request_from_dict(d: dict[str, Any]) -> WriteRequest:
    if not isinstance(d, dict):
        raise InvalidArgument(f"each write must be a WriteRequest or dict, got {type(d).__name__}")
    unknown = set(d) - _REQUEST_FIELDS
    if unknown:
        raise ValidationError(f"unknown write fields: {sorted(unknown)}", field=sorted(unknown)[0])
    missing = {"kind", "key", "value"} - set(d)
    if missing:
        raise ValidationError(f"missing write fields: {sorted(missing)}", field=sorted(missing)[0])
    return WriteRequest(**d)
