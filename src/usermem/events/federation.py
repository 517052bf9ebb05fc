"""Federation transport (issue 17): the outbox relay, the durable consumer and where events travel.

* `encoder(...)`: how the engine's federation (engine/federation.py) turns a change into the subject and JSON
  payload it writes to the outbox (events/payload.py, with the domain and each record's clock).
* `Relay`: publishes the store's outbox in order and removes each event once the transport acknowledged it
  (JetStream's publish ack). Woken after every commit; also polls, so events left by a crash or an outage go
  out later. Each event is published with its event id as JetStream's de-duplication id, and receivers apply
  by event id exactly once, so an event published twice (acknowledged, then the process died before the
  removal) is harmless.
* `Consumer`: reads this instance's durable consumer, applies each event through the engine and acknowledges
  it afterwards (an event whose apply failed is redelivered). `catch_up()` applies the backlog synchronously:
  `Memory.federate()` calls it before returning, so an instance that was down serves no user before it has
  applied what happened meanwhile (within the stream's retention).
* Transports: `NatsTransport` (a durable pull consumer on the `EventBus`) and `LocalTransport` over a
  `LocalHub` (in-process; the property tests drive delivery order, delays and duplicates through it).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from usermem.errors import InvalidArgument, ValidationError
from usermem.events.bus import EventBus
from usermem.events.payload import BadPayload, RemoteChange, decode, encode, subject_for, to_payload
from usermem.events.ports import ContractsFor, Delivery, PendingOf, RemoveAcked, Transport
from usermem.events.throttle import LogThrottle
from usermem.model import ChangeEvent

log = logging.getLogger("usermem.federation")

Apply = Callable[[RemoteChange], object]
# (the event, the error, the deliveries so far): keep an event whose apply keeps failing aside (a dead letter).
Park = Callable[[RemoteChange, str, int], None]


def encoder(prefix: str, contracts_for: ContractsFor, values: str,
            origin: str) -> Callable[[ChangeEvent, str, str | None, Mapping[str, str]], tuple[str, str]]:
    """(event, event_id, domain, clock per memory id) -> (subject, payload text) for the outbox."""

    def encode_event(event: ChangeEvent, event_id: str, domain: str | None,
                     hlcs: Mapping[str, str]) -> tuple[str, str]:
        payload = to_payload(event, event_id=event_id, origin=origin, contracts=contracts_for(event.tenant),
                             values=values, domain=domain, hlcs=hlcs)
        return (subject_for(prefix, event.tenant, event.user_id, event.action),
                encode(payload).decode("utf-8"))

    return encode_event


class Relay:
    """Publishes the outbox; removes what the transport acknowledged."""

    def __init__(self, pending: PendingOf, remove: RemoveAcked, transport: Transport, *, interval: float = 1.0,
                 batch: int = 256) -> None:
        self.pending = pending
        self.remove = remove
        self.transport = transport
        self.interval = interval
        self.batch = batch
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._inflight: set[str] = set()
        self._acked: list[str] = []
        self._stop = False
        self._thread: threading.Thread | None = None
        self.counts = {"published": 0, "acked": 0, "failed": 0, "removed": 0, "errors": 0}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="usermem-outbox", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _done(self, event_id: str, ok: bool) -> None:
        with self._lock:
            if ok:  # stays "in flight" until removed from the outbox, so it is not sent again meanwhile
                self._acked.append(event_id)
                self.counts["acked"] += 1
            else:
                self._inflight.discard(event_id)
                self.counts["failed"] += 1
        if ok:  # a refusal (bus full, NATS away) is retried at the next poll, not in a busy loop
            self._wake.set()

    def pump(self) -> int:
        """Remove what was acknowledged, then publish what is queued and not in flight; returns how many
        were sent now."""
        with self._lock:
            acked, self._acked = self._acked, []
        if acked:
            self.counts["removed"] += self.remove(acked)
            with self._lock:
                self._inflight.difference_update(acked)
        sent = 0
        for entry in self.pending(self.batch):
            with self._lock:
                if entry.event_id in self._inflight:
                    continue
                if len(self._inflight) >= self.batch:  # enough waiting for acks: the rest goes next time
                    break
                self._inflight.add(entry.event_id)
            self.counts["published"] += 1
            sent += 1
            self.transport.publish(entry.subject, entry.payload.encode("utf-8"), entry.event_id,
                                   functools.partial(self._done, entry.event_id))
        return sent

    def drain(self, timeout: float = 10.0) -> bool:
        """Publish until the outbox is empty (True) or `timeout` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            with self._lock:
                busy = bool(self._inflight) or bool(self._acked)
            if not busy and not self.pending(1):
                return True
            if time.monotonic() >= deadline:
                return False
            self._wake.wait(0.02)
            self._wake.clear()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop:
                return
            try:
                self.pump()
            except Exception:
                self.counts["errors"] += 1
                log.exception("usermem federation: publishing the outbox failed; retrying")

    def close(self, timeout: float = 5.0) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)


class Consumer:
    """Applies this instance's durable consumer's events (acknowledged after the apply)."""

    def __init__(self, transport: Transport, apply: Apply, *, batch: int = 64, poll: float = 1.0,
                 park: Park | None = None, max_attempts: int = 5) -> None:
        self.transport = transport
        self.apply = apply
        self.batch = batch
        self.poll = poll
        self.park = park
        self.max_attempts = max(1, max_attempts)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counts = {"delivered": 0, "applied": 0, "bad_payloads": 0, "rejected": 0, "errors": 0,
                       "dead_lettered": 0}
        self.log_throttle = LogThrottle()  # malformed / refused events: one warning per minute and kind

    def handle(self, deliveries: Sequence[Delivery]) -> int:
        for d in deliveries:
            self.counts["delivered"] += 1
            try:
                change = decode(d.data)
            except BadPayload as exc:
                self.counts["bad_payloads"] += 1
                left_out = self.log_throttle.allow("bad_payload")
                if left_out is not None:
                    log.warning("usermem federation: dropping a malformed event: %s%s", exc,
                                f" ({left_out} more since the last warning)" if left_out else "")
                d.ack()
                continue
            try:
                self.apply(change)
            except (ValidationError, InvalidArgument) as exc:  # the event itself is unacceptable: never retried
                self.counts["rejected"] += 1
                left_out = self.log_throttle.allow("rejected")
                if left_out is not None:
                    log.warning("usermem federation: refusing event %s: %s%s", change.event_id, exc,
                                f" ({left_out} more since the last warning)" if left_out else "")
                d.ack()
                continue
            except Exception as exc:
                self.counts["errors"] += 1
                attempts = getattr(d, "attempts", 1)
                # Erasures are never set aside: dropping one would keep what the user asked to erase.
                if self.park is not None and attempts >= self.max_attempts and not change.is_erasure:
                    try:  # a poison event: set aside (a dead letter an operator lists), not retried for ever
                        self.park(change, f"{type(exc).__name__}: {exc}"[:300], attempts)
                    except Exception:
                        log.exception("usermem federation: could not set event %s aside; it will be redelivered",
                                      change.event_id)
                        d.nak()
                        continue
                    self.counts["dead_lettered"] += 1
                    log.error("usermem federation: event %s failed %d times (%s); kept as a dead letter, not "
                              "retried (usermem federation dead-letters)", change.event_id, attempts, exc)
                    d.ack()
                    continue
                log.exception("usermem federation: applying event %s failed (attempt %d of %d); it will be "
                              "redelivered", change.event_id, attempts, self.max_attempts)
                d.nak()
                continue
            self.counts["applied"] += 1
            d.ack()
        return len(deliveries)

    def catch_up(self, timeout: float = 30.0, *, quiet: float = 0.2) -> int:
        """Apply the backlog until a fetch comes back empty (or `timeout`); returns the events handled."""
        deadline = time.monotonic() + timeout
        n = 0
        while time.monotonic() < deadline:
            got = self.handle(self.transport.fetch(self.batch, quiet))
            if not got:
                break
            n += got
        return n

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="usermem-federation", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.handle(self.transport.fetch(self.batch, self.poll))
            except Exception:
                self.counts["errors"] += 1
                log.exception("usermem federation: the consumer failed; retrying")
                self._stop.wait(1.0)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop consuming (the durable consumer keeps this instance's place on the server)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class NatsTransport:
    """Federation over the `EventBus`'s JetStream stream: publishes with the event id as de-duplication id;
    reads a durable pull consumer named after the domain and the instance."""

    def __init__(self, bus: EventBus, durable: str, subject: str | None = None, *, ack_wait: float = 30.0) -> None:
        self.bus = bus
        self.durable = durable
        self.subject = subject or f"{bus.prefix}.>"
        self.ack_wait = ack_wait

    def publish(self, subject: str, data: bytes, msg_id: str, done: Callable[[bool], None]) -> None:
        self.bus.publish(subject, data, msg_id=msg_id, done=done)

    def fetch(self, batch: int, timeout: float) -> Sequence[Delivery]:
        return self.bus.fetch(self.durable, self.subject, batch, timeout, ack_wait=self.ack_wait)

    def backlog(self) -> int | None:
        return self.bus.pending(self.durable)

    def close(self) -> None:
        return None  # the bus belongs to the event sync; it closes it


class _LocalDelivery:
    def __init__(self, inbox: LocalTransport, data: bytes) -> None:
        self._inbox = inbox
        self.data = data
        inbox.deliveries[data] = self.attempts = inbox.deliveries.get(data, 0) + 1

    def ack(self) -> None:
        return None

    def nak(self) -> None:
        self._inbox.inbox.append(self.data)


class LocalHub:
    """An in-process bus: every message published reaches the inbox of every transport on the hub."""

    def __init__(self) -> None:
        self.transports: list[LocalTransport] = []
        self.log: list[tuple[str, bytes]] = []
        self._seen: set[str] = set()
        self._cond = threading.Condition()

    def transport(self, name: str) -> LocalTransport:
        t = LocalTransport(self, name)
        self.transports.append(t)
        return t

    def publish(self, subject: str, data: bytes, msg_id: str) -> None:
        with self._cond:
            if msg_id in self._seen:  # de-duplication by id, like JetStream's
                return
            self._seen.add(msg_id)
            self.log.append((subject, data))
            for t in self.transports:
                if t.connected:
                    t.inbox.append(data)
                else:
                    t.missed.append(data)
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)


class LocalTransport:
    """One instance's end of a `LocalHub`. `inbox` is its undelivered messages, in order (tests may reorder
    or duplicate them); while `connected` is False, new messages wait in `missed` (a partition) and come back
    when `reconnect()` is called — like a durable consumer catching up."""

    def __init__(self, hub: LocalHub, name: str) -> None:
        self.hub = hub
        self.name = name
        self.inbox: deque[bytes] = deque()
        self.missed: list[bytes] = []
        self.connected = True
        self.deliveries: dict[bytes, int] = {}  # how often each message was delivered (Delivery.attempts)

    def publish(self, subject: str, data: bytes, msg_id: str, done: Callable[[bool], None]) -> None:
        if not self.connected:  # refused: the event stays in the outbox and is sent again after reconnect()
            done(False)
            return
        self.hub.publish(subject, data, msg_id)
        done(True)

    def fetch(self, batch: int, timeout: float) -> Sequence[Delivery]:
        if not self.inbox and timeout > 0 and self.connected:
            self.hub.wait(min(timeout, 0.05))
        out: list[Delivery] = []
        while self.inbox and len(out) < batch and self.connected:
            out.append(_LocalDelivery(self, self.inbox.popleft()))
        return out

    def disconnect(self) -> None:
        self.connected = False

    def reconnect(self) -> None:
        self.connected = True
        self.inbox.extend(self.missed)
        self.missed.clear()

    def close(self) -> None:
        return None

    def stats(self) -> dict[str, Any]:
        return {"inbox": len(self.inbox), "missed": len(self.missed)}
