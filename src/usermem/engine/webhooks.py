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

Time is the caller's (`now`), so tests and replays are deterministic; nothing here sleeps.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
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
from usermem.model import ChangeEvent, new_id
from usermem.policy.contracts import ContractSet
from usermem.store.base import Store

EVENT_TYPES = ("write", "revert", "forget", "consent")
SUBS = "webhooks"
DELIVERIES = "webhook_deliveries"
INDEX_TENANT, INDEX_NS = "__usermem__", "webhook_tenants"
CACHE_SECONDS = 2.0
_SEQ = itertools.count()
ACTION_TYPES = {"write": "write", "forget": "forget", "forget_user": "forget"}


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


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Usermem-Signature value: receivers recompute it over "<timestamp>.<body>" and compare."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookHub:
    def __init__(self, store: Store, contracts_for: Callable[[str], ContractSet], clock: Clock, *,
                 max_attempts: int = 6, base_delay: float = 30.0, max_delay: float = 3600.0,
                 disable_after: int = 10, timeout: float = 5.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._store, self._contracts_for, self._clock = store, contracts_for, clock
        self.max_attempts, self.base_delay, self.max_delay = max_attempts, base_delay, max_delay
        self.disable_after, self.timeout = disable_after, timeout
        self._transport = transport
        self._lock = threading.Lock()
        # tenant -> (read at, [(webhook, secret)]): a short cache so writes do not read the subscriptions each
        # time; changes made here drop it at once, changes by another process are seen within CACHE_SECONDS.
        self._subs: dict[str, tuple[float, list[tuple[Webhook, str]]]] = {}

    # -- subscriptions ---------------------------------------------------------------------------------

    def add(self, tenant: str, url: str, events: Iterable[str] | None = None, *, secret: str | None = None,
            now: float | None = None) -> tuple[Webhook, str]:
        """Subscribe `url` to `events` (default: all). Returns the webhook and its signing secret."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2048:
            raise ValidationError("webhook url must be an http(s) URL of at most 2048 characters", field="url")
        chosen = tuple(dict.fromkeys(events or EVENT_TYPES))
        bad = [e for e in chosen if e not in EVENT_TYPES]
        if bad or not chosen:
            raise ValidationError(f"unknown event types {bad}; use {list(EVENT_TYPES)}", field="events")
        if secret is not None and not 16 <= len(secret) <= 256:
            raise ValidationError("secret must be 16-256 characters", field="secret")
        t = self._clock() if now is None else now
        hook = Webhook(id="wh_" + new_id(), tenant=tenant, url=url, events=chosen, created_at=t)
        key = secret or secrets.token_urlsafe(32)
        self._save(hook, key, t)
        self._store.put_doc(INDEX_TENANT, INDEX_NS, tenant, {"tenant": tenant}, now=t)
        return hook, key

    def subscriptions(self, tenant: str) -> list[Webhook]:
        return [h for h, _ in self._load(tenant)]

    def get(self, tenant: str, webhook_id: str) -> Webhook:
        for h, _ in self._load(tenant):
            if h.id == webhook_id:
                return h
        raise NotFound(f"no webhook {webhook_id!r}")

    def remove(self, tenant: str, webhook_id: str) -> bool:
        with self._lock:
            self._subs.pop(tenant, None)
        return self._store.delete_doc(tenant, SUBS, webhook_id)

    def enable(self, tenant: str, webhook_id: str, *, now: float | None = None) -> Webhook:
        hook, key = self._with_secret(tenant, webhook_id)
        hook = Webhook(**{**asdict(hook), "events": hook.events, "enabled": True, "failures": 0,
                          "disabled_reason": None})
        self._save(hook, key, self._clock() if now is None else now)
        return hook

    def deliveries(self, tenant: str, webhook_id: str | None = None, *, limit: int = 100) -> list[Delivery]:
        """The delivery log, oldest first."""
        rows = [_delivery(v) for _, v in self._store.list_docs(tenant, DELIVERIES, limit=100_000)]
        rows = [d for d in rows if webhook_id is None or d.webhook_id == webhook_id]
        rows.sort(key=lambda d: (d.created_at, d.id))
        return rows[-limit:] if limit else rows

    # -- events ------------------------------------------------------------------------------------------

    def on_change(self, event: ChangeEvent) -> None:
        """Listener for Memory.subscribe: queue a delivery per interested subscription (no network here)."""
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
            queued += 1
        return queued

    def deliver_due(self, now: float | None = None, *, tenant: str | None = None) -> list[Delivery]:
        """POST every pending delivery whose time has come; returns the deliveries attempted."""
        t = self._clock() if now is None else now
        tenants = [tenant] if tenant else [k for k, _ in self._store.list_docs(INDEX_TENANT, INDEX_NS)]
        done: list[Delivery] = []
        with httpx.Client(timeout=self.timeout, transport=self._transport) as http:
            for ten in tenants:
                subs = {h.id: (h, key) for h, key in self._load(ten)}
                for d in self.deliveries(ten, limit=0):
                    if d.state != "pending" or d.next_at > t:
                        continue
                    sub = subs.get(d.webhook_id)
                    if sub is None or not sub[0].enabled:
                        d.state = "skipped"
                        self._store.put_doc(ten, DELIVERIES, d.id, d.to_dict(), now=t, user_id=d.payload["user_id"])
                        continue
                    self._attempt(http, ten, d, sub[0], sub[1], t)
                    subs[d.webhook_id] = (self.get(ten, d.webhook_id), sub[1])
                    done.append(d)
        return done

    # -- internals -----------------------------------------------------------------------------------------

    def _attempt(self, http: httpx.Client, tenant: str, d: Delivery, hook: Webhook, key: str, t: float) -> None:
        body = json.dumps(d.payload, ensure_ascii=False, sort_keys=True).encode()
        stamp = str(int(t))
        headers = {"content-type": "application/json", "user-agent": "usermem-webhooks",
                   "x-usermem-event": d.type, "x-usermem-delivery": d.id, "x-usermem-timestamp": stamp,
                   "x-usermem-signature": sign(key, stamp, body)}
        status: int | None = None
        error: str | None = None
        try:
            status = http.post(hook.url, content=body, headers=headers).status_code
            if not 200 <= status < 300:
                error = f"HTTP {status}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        d.attempts.append(Attempt(at=t, status=status, error=error))
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
        self._save(hook, key, t)

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
            rows.append((Webhook(**{**data, "events": tuple(data["events"])}), key))
        with self._lock:
            self._subs[tenant] = (time.monotonic(), rows)
        return rows


def _delivery(v: dict[str, Any]) -> Delivery:
    return Delivery(**{**v, "attempts": [Attempt(**a) for a in v.get("attempts", [])]})
