"""Per-tenant webhook subscriptions for change events (write, revert, forget, consent).

A subscription is a URL, a secret and the event types it wants. Each matching change becomes a pending
delivery (kept in the store's documents, so it survives a restart); `deliver_due(now)` POSTs the due ones:

- body: JSON `{"id", "type", "tenant", "user_id", "at", "keys", "records", ...}` — records carry values of
  L1 fields only (events/payload.py rules, `nats_values = "l1"`); L2/L3 values never leave the store;
- headers: `X-Usermem-Event`, `X-Usermem-Delivery` (the delivery id, for idempotent receivers),
  `X-Usermem-Timestamp` and `X-Usermem-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the
  subscription's secret>`;
- a 2xx answer delivers it; anything else (or no answer) is retried with exponential backoff
  (`base_delay * 2^(attempt-1)`, capped) up to `max_attempts`; a subscription whose deliveries failed
  `disable_after` times in a row is disabled (re-enable with `enable`). Every attempt is in the delivery log.
- `ping` sends one `ping` event at once (no retry, the subscription's failure count untouched), to test a
  receiver; it is in the delivery log too.

The signing secret is returned once, by `add` (`WebhookCreated`); listings and the audit log never carry it
(nor the URL, which may embed a token: the audit keeps its host only).

Time is the caller's (`now`), so tests and replays are deterministic; nothing here sleeps. `DeliveryWorker`
is the background thread `usermem serve` runs: `deliver_due()` every `interval` seconds until stopped.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import itertools
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from usermem.engine.context import Clock
from usermem.errors import NotFound, ValidationError
from usermem.events.payload import record_payload
from usermem.model import AuditEvent, ChangeEvent, new_id
from usermem.policy.contracts import ContractSet
from usermem.store.base import Store

EVENT_TYPES = ("write", "revert", "forget", "consent")
SUBS = "webhooks"
DELIVERIES = "webhook_deliveries"  # the delivery log (the user's documents: exported, erased with the user)
PENDING = "webhook_pending"  # delivery id → {next_at}: what a delivery pass reads, instead of the whole log
INDEX_TENANT, INDEX_NS = "__usermem__", "webhook_tenants"
CACHE_SECONDS = 2.0
_SEQ = itertools.count()
ACTION_TYPES = {"write": "write", "forget": "forget", "forget_user": "forget"}
log = logging.getLogger("usermem.webhooks")


@dataclass(frozen=True)
class Webhook:
    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    created_at: float
    enabled: bool = True
    failures: int = 0  # consecutive failed deliveries
    disabled_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:  # never the secret
        return {**asdict(self), "events": list(self.events)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Webhook:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{**{k: v for k, v in data.items() if k in names}, "events": tuple(data["events"])})


@dataclass(frozen=True)
class WebhookCreated:
    """A new subscription and its signing secret: the only time the secret is handed out."""

    webhook: Webhook
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.webhook.to_dict(), "secret": self.secret}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WebhookCreated:
        return cls(Webhook.from_dict(data), str(data["secret"]))

    def __repr__(self) -> str:  # a printed or logged result does not show the secret
        return f"WebhookCreated(webhook={self.webhook!r}, secret='***')"


@dataclass
class Attempt:
    at: float
    status: int | None
    error: str | None


@dataclass
class Delivery:
    id: str
    webhook_id: str
    type: str
    created_at: float
    payload: dict[str, Any]
    state: str = "pending"  # pending | delivered | failed (gave up) | skipped (subscription disabled)
    next_at: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Delivery:
        return _delivery(data)


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Usermem-Signature value: receivers recompute it over "<timestamp>.<body>" and compare."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookHub:
    def __init__(self, store: Store, contracts_for: Callable[[str], ContractSet], clock: Clock, *,
                 max_attempts: int = 6, base_delay: float = 30.0, max_delay: float = 3600.0,
                 disable_after: int = 10, timeout: float = 5.0, allow_private: bool = True,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._store, self._contracts_for, self._clock = store, contracts_for, clock
        self.max_attempts, self.base_delay, self.max_delay = max_attempts, base_delay, max_delay
        self.disable_after, self.timeout = disable_after, timeout
        self.allow_private = allow_private  # False: loopback / private / link-local receivers are refused
        self._transport = transport
        self._lock = threading.Lock()
        # tenant -> (read at, [(webhook, secret)]): a short cache so writes do not read the subscriptions each
        # time; changes made here drop it at once, changes by another process are seen within CACHE_SECONDS.
        self._subs: dict[str, tuple[float, list[tuple[Webhook, str]]]] = {}

    # -- subscriptions ---------------------------------------------------------------------------------

    def add(self, tenant: str, url: str, events: Iterable[str] | None = None, *, secret: str | None = None,
            actor: str | None = None, now: float | None = None) -> WebhookCreated:
        """Subscribe `url` to `events` (default: all). Returns the webhook and its signing secret (the only
        time the secret is handed out). Audited (the URL's host only: a URL may embed a token)."""
        if not isinstance(url, str):
            raise ValidationError("webhook url must be a string", field="url")
        if isinstance(events, str):
            events = [events]
        scheme, host = "", None
        try:
            parts = urlsplit(url)
            scheme, host = parts.scheme, parts.hostname
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            host = None
        if (len(url) > 2048 or not url.isprintable() or any(c.isspace() for c in url)
                or scheme not in ("http", "https") or not host):
            raise ValidationError("webhook url must be an http(s) URL with a host, without spaces, of at most 2048 "
                                  "characters", field="url")
        if not self.allow_private and _private_host(host):
            raise ValidationError("webhook url must not name a loopback, private or link-local address (or a host "
                                  "that does not resolve): this server refuses them (webhook_allow_private_urls)",
                                  field="url")
        if events is not None and not isinstance(events, list | tuple | set | frozenset):
            events = list(events)
        if events is not None and not all(isinstance(e, str) for e in events):
            raise ValidationError(f"events must be event type names: {list(EVENT_TYPES)}", field="events")
        chosen = tuple(dict.fromkeys(EVENT_TYPES if events is None else events))
        bad = [e for e in chosen if e not in EVENT_TYPES]
        if bad or not chosen:
            raise ValidationError(f"unknown event types {bad}; use {list(EVENT_TYPES)}", field="events")
        if secret is not None and (not isinstance(secret, str) or not 16 <= len(secret) <= 256
                                   or not secret.isprintable()):
            raise ValidationError("secret must be 16-256 printable characters", field="secret")
        t = self._clock() if now is None else now
        hook = Webhook(id="wh_" + new_id(), tenant=tenant, url=url, events=chosen, created_at=t)
        key = secret or secrets.token_urlsafe(32)
        self._save(hook, key, t)
        self._store.put_doc(INDEX_TENANT, INDEX_NS, tenant, {"tenant": tenant}, now=t)
        self._audit(tenant, "create", hook, actor, t, events=list(chosen), host=host)
        return WebhookCreated(hook, key)

    def subscriptions(self, tenant: str) -> list[Webhook]:
        return [h for h, _ in self._load(tenant)]

    def get(self, tenant: str, webhook_id: str) -> Webhook:
        for h, _ in self._load(tenant):
            if h.id == webhook_id:
                return h
        raise NotFound(f"no webhook {webhook_id!r}")

    def remove(self, tenant: str, webhook_id: str, *, actor: str | None = None, now: float | None = None) -> bool:
        """Delete the subscription (its pending deliveries are skipped); False when there was none. Audited."""
        with self._lock:
            self._subs.pop(tenant, None)
        try:
            hook = self.get(tenant, webhook_id)
        except NotFound:
            return False
        removed = self._store.delete_doc(tenant, SUBS, webhook_id)
        with self._lock:
            self._subs.pop(tenant, None)
        if removed:
            self._audit(tenant, "delete", hook, actor, self._clock() if now is None else now)
        return removed

    def enable(self, tenant: str, webhook_id: str, *, actor: str | None = None,
               now: float | None = None) -> Webhook:
        """Re-enable a subscription (after it was disabled for failures): its failure count starts again."""
        hook, key = self._with_secret(tenant, webhook_id)
        t = self._clock() if now is None else now
        hook = Webhook(**{**asdict(hook), "events": hook.events, "enabled": True, "failures": 0,
                          "disabled_reason": None})
        self._save(hook, key, t)
        self._audit(tenant, "enable", hook, actor, t)
        return hook

    def ping(self, tenant: str, webhook_id: str, *, now: float | None = None) -> Delivery:
        """POST one `ping` event to the subscription now (enabled or not) and return the logged delivery:
        `state` delivered or failed, one attempt, no retry; the subscription's failure count is untouched."""
        hook, key = self._with_secret(tenant, webhook_id)
        t = self._clock() if now is None else now
        did = f"whd_{next(_SEQ):010d}_{new_id()}"
        payload: dict[str, Any] = {"id": did, "type": "ping", "tenant": tenant, "user_id": None, "at": t, "keys": [],
                   "records": [], "webhook_id": hook.id}
        d = Delivery(id=did, webhook_id=hook.id, type="ping", created_at=t, payload=payload, next_at=t)
        with httpx.Client(timeout=self.timeout, transport=self._transport) as http:
            self._attempt(http, tenant, d, hook, key, t, track=False)
        return d

    def deliveries(self, tenant: str, webhook_id: str | None = None, *, limit: int = 100) -> list[Delivery]:
        """The delivery log, oldest first."""
        rows = [_delivery(v) for _, v in self._store.list_docs(tenant, DELIVERIES, limit=100_000)]
        rows = [d for d in rows if webhook_id is None or d.webhook_id == webhook_id]
        rows.sort(key=lambda d: (d.created_at, d.id))
        return rows[-limit:] if limit else rows

    def prune(self, deleted_before: float, expired_before: float) -> int:
        """Delete finished deliveries (delivered, failed, skipped) whose last activity is older than
        `deleted_before` — `purge`'s retention (registered as a purger); pending ones stay. Returns how many.
        Values of versions the purge removes (expired or erased before the cutoffs, or already gone) are
        first removed from the deliveries that still carry them, pending ones included."""
        cutoff = min(deleted_before, expired_before)
        tenants = [k for k, _ in self._store.list_docs(INDEX_TENANT, INDEX_NS, limit=1_000_000)]
        n = 0
        for ten in tenants:
            docs = self._store.list_docs(ten, DELIVERIES, limit=1_000_000)
            valued = {r["id"] for _, v in docs for r in v.get("payload", {}).get("records", []) if "value" in r}
            if valued:
                held = {r.id: r for r in self._store.get_many(ten, sorted(valued))}
                gone = {i for i in valued if (r := held.get(i)) is None
                        or (r.deleted_at is not None and r.deleted_at < deleted_before)
                        or (r.expires_at is not None and r.expires_at <= expired_before)}
                self._scrub_docs(ten, docs, gone, at=cutoff)
            for did, v in docs:
                last = max([float(v.get("created_at", 0.0))] + [float(a["at"]) for a in v.get("attempts", [])])
                if v.get("state") != "pending" and last < cutoff:
                    n += self._store.delete_doc(ten, DELIVERIES, did)
        return n

    # -- events ------------------------------------------------------------------------------------------

    def scrub(self, tenant: str, user_id: str | None, memory_ids: Iterable[str], *, at: float) -> int:
        """Remove the values of `memory_ids` from the deliveries that carry them (of `user_id`, or of every
        user): erased versions are not sent later nor kept in the log. A scrubbed record says
        `"value_erased": true`. Returns how many deliveries changed."""
        ids = set(memory_ids)
        if not ids:
            return 0
        return self._scrub_docs(tenant, self._store.list_docs(tenant, DELIVERIES, user_id=user_id, limit=1_000_000),
                                ids, at=at)

    def _scrub_docs(self, tenant: str, docs: Iterable[tuple[str, dict[str, Any]]], ids: set[str], *,
                    at: float) -> int:
        """`scrub` over deliveries already read (id, document): changed documents are written back in place."""
        n = 0
        for did, v in docs:
            records = v.get("payload", {}).get("records", [])
            hit = [r for r in records if r.get("id") in ids and "value" in r]
            if not hit:
                continue
            for r in hit:
                r.pop("value", None)
                r.pop("canonical", None)
                r["value_erased"] = True
            self._store.put_doc(tenant, DELIVERIES, did, v, now=at, user_id=v.get("payload", {}).get("user_id"))
            n += 1
        return n

    def on_change(self, event: ChangeEvent) -> None:
        """Listener for Memory.subscribe: queue a delivery per interested subscription (no network here).
        A `forget` (key or range) first removes the erased versions' values from the user's queued and
        logged deliveries (forget_user deletes them all with the user's documents)."""
        if event.action == "forget" and event.memory_ids:
            self.scrub(event.tenant, event.user_id, event.memory_ids, at=event.at)
        kind = ACTION_TYPES.get(event.action)
        if kind is None:
            return
        if not any(hook.enabled and kind in hook.events for hook, _ in self._load(event.tenant)):
            return  # nobody listens: no payload to build (this runs after every write)
        contracts = self._contracts_for(event.tenant) if event.records else None
        self.notify(event.tenant, event.user_id, kind, at=event.at, keys=event.keys,
                    records=[record_payload(r, contracts, "l1") for r in event.records],
                    extra={"action": event.action, "client_id": event.client_id})

    def notify(self, tenant: str, user_id: str, kind: str, *, at: float, keys: Iterable[str] = (),
               records: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None) -> int:
        """Queue an event of type `kind` for the tenant's subscribers; returns how many were queued."""
        queued = 0
        for hook, _ in self._load(tenant):
            if not hook.enabled or kind not in hook.events:
                continue
            did = f"whd_{next(_SEQ):010d}_{new_id()}"  # orders deliveries queued at the same instant
            payload = {"id": did, "type": kind, "tenant": tenant, "user_id": user_id, "at": at,
                       "keys": list(keys), "records": records or [], **(extra or {})}
            d = Delivery(id=did, webhook_id=hook.id, type=kind, created_at=at, payload=payload, next_at=at)
            self._store.put_doc(tenant, DELIVERIES, did, d.to_dict(), now=at, user_id=user_id)  # erased with the user
            self._store.put_doc(tenant, PENDING, did, {"next_at": at}, now=at, user_id=user_id)
            queued += 1
        return queued

    def deliver_due(self, now: float | None = None, *, tenant: str | None = None) -> list[Delivery]:
        """POST every pending delivery whose time has come; returns the deliveries attempted."""
        t = self._clock() if now is None else now
        tenants = [tenant] if tenant else [k for k, _ in self._store.list_docs(INDEX_TENANT, INDEX_NS,
                                                                                limit=1_000_000)]
        done: list[Delivery] = []
        with httpx.Client(timeout=self.timeout, transport=self._transport) as http:
            for ten in tenants:
                due = self._due(ten, t)
                if not due:
                    continue
                subs = {h.id: (h, key) for h, key in self._load(ten)}
                for d in due:
                    sub = subs.get(d.webhook_id)
                    if sub is None or not sub[0].enabled:
                        d.state = "skipped"
                        self._store.put_doc(ten, DELIVERIES, d.id, d.to_dict(), now=t, user_id=d.payload["user_id"])
                        self._store.delete_doc(ten, PENDING, d.id)
                        continue
                    self._attempt(http, ten, d, sub[0], sub[1], t)
                    try:
                        subs[d.webhook_id] = (self.get(ten, d.webhook_id), sub[1])
                    except NotFound:  # deleted meanwhile (another thread or process)
                        subs.pop(d.webhook_id, None)
                    done.append(d)
        return done

    # -- internals -----------------------------------------------------------------------------------------

    def _due(self, tenant: str, t: float) -> list[Delivery]:
        """The tenant's pending deliveries due at `t`, oldest first (read through the pending index)."""
        rows: list[Delivery] = []
        for did, meta in self._store.list_docs(tenant, PENDING, limit=1_000_000):
            if float(meta.get("next_at", 0.0)) > t:
                continue
            doc = self._store.get_doc(tenant, DELIVERIES, did)
            d = _delivery(doc) if doc is not None else None
            if d is None or d.state != "pending":  # erased, or finished by another pass
                self._store.delete_doc(tenant, PENDING, did)
                continue
            rows.append(d)
        rows.sort(key=lambda d: (d.created_at, d.id))
        return rows

    def _attempt(self, http: httpx.Client, tenant: str, d: Delivery, hook: Webhook, key: str, t: float, *,
                 track: bool = True) -> None:
        body = json.dumps(d.payload, ensure_ascii=False, sort_keys=True).encode()
        stamp = str(int(t))
        headers = {"content-type": "application/json", "user-agent": "usermem-webhooks",
                   "x-usermem-event": d.type, "x-usermem-delivery": d.id, "x-usermem-timestamp": stamp,
                   "x-usermem-signature": sign(key, stamp, body)}
        status: int | None = None
        error: str | None = None
        if not self.allow_private and _private_host(urlsplit(hook.url).hostname):
            error = "private address refused"  # checked again per attempt: DNS may have changed since creation
        else:
            try:
                status = http.post(hook.url, content=body, headers=headers).status_code
                if not 200 <= status < 300:
                    error = f"HTTP {status}"
            except httpx.HTTPError as exc:
                error = type(exc).__name__
        d.attempts.append(Attempt(at=t, status=status, error=error))
        if not track:  # a ping: logged, never retried, the subscription unchanged
            d.state = "delivered" if error is None else "failed"
            self._store.put_doc(tenant, DELIVERIES, d.id, d.to_dict(), now=t)
            return
        if error is None:
            d.state = "delivered"
            hook = Webhook(**{**asdict(hook), "events": hook.events, "failures": 0})
        else:
            if len(d.attempts) >= self.max_attempts:
                d.state = "failed"
            else:
                d.next_at = t + min(self.max_delay, self.base_delay * 2 ** (len(d.attempts) - 1))
            failures = hook.failures + 1
            off = failures >= self.disable_after
            hook = Webhook(**{**asdict(hook), "events": hook.events, "failures": failures,
                              "enabled": hook.enabled and not off,
                              "disabled_reason": f"{failures} failed deliveries in a row" if off
                              else hook.disabled_reason})
        self._store.put_doc(tenant, DELIVERIES, d.id, d.to_dict(), now=t, user_id=d.payload["user_id"])
        if d.state == "pending":
            self._store.put_doc(tenant, PENDING, d.id, {"next_at": d.next_at}, now=t, user_id=d.payload["user_id"])
        else:
            self._store.delete_doc(tenant, PENDING, d.id)
        self._save(hook, key, t)

    def _audit(self, tenant: str, change: str, hook: Webhook, actor: str | None, t: float, **detail: Any) -> None:
        self._store.append_audit(AuditEvent(tenant=tenant, at=t, action="webhook_change", actor=actor,
                                            detail={"change": change, "webhook_id": hook.id, **detail}))

    def _save(self, hook: Webhook, key: str, t: float) -> None:
        self._store.put_doc(hook.tenant, SUBS, hook.id, {**hook.to_dict(), "secret": key}, now=t)
        with self._lock:
            self._subs.pop(hook.tenant, None)

    def _with_secret(self, tenant: str, webhook_id: str) -> tuple[Webhook, str]:
        for h, key in self._load(tenant):
            if h.id == webhook_id:
                return h, key
        raise NotFound(f"no webhook {webhook_id!r}")

    def _load(self, tenant: str) -> list[tuple[Webhook, str]]:
        with self._lock:
            cached = self._subs.get(tenant)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        rows: list[tuple[Webhook, str]] = []
        for _, v in self._store.list_docs(tenant, SUBS):
            data = dict(v)
            key = str(data.pop("secret"))
            rows.append((Webhook.from_dict(data), key))
        with self._lock:
            self._subs[tenant] = (time.monotonic(), rows)
        return rows


def _private_host(host: str | None) -> bool:
    """True when `host` is, or resolves to, an address that is not globally routable (loopback, private,
    link-local, reserved, multicast, unspecified) — or does not resolve."""
    if not host:
        return True
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            return True
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    return not addresses or any(not a.is_global or a.is_multicast for a in addresses)


def _delivery(v: dict[str, Any]) -> Delivery:
    return Delivery(**{**v, "attempts": [Attempt(**a) for a in v.get("attempts", [])]})


class DeliveryWorker:
    """`hub.deliver_due()` every `interval` seconds on a daemon thread, until `stop()` (which wakes it at
    once and waits for an attempt in flight, at most `hub.timeout` per request). `may_deliver` (optional)
    is asked before each pass: several server processes over one store let one of them deliver."""

    def __init__(self, hub: WebhookHub, interval: float, *,
                 may_deliver: Callable[[], bool] | None = None) -> None:
        if not interval > 0:
            raise ValueError("interval must be positive")
        self.hub, self.interval, self._may = hub, interval, may_deliver
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0  # completed passes (tests and /metrics-style inspection)

    def start(self) -> DeliveryWorker:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="usermem-webhooks", daemon=True)
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread; True when it has ended within `timeout` seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.hub.timeout * 2 + self.interval if timeout is None else timeout)
        return not self.running

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._may is None or self._may():
                    self.hub.deliver_due()
            except Exception:  # a store hiccup must not end delivery for good; the next pass retries
                log.exception("webhook delivery pass failed")
            self.passes += 1
            self._stop.wait(self.interval)
