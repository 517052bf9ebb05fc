"""Federated memory sync (seed 004 §4.3) and the erasure broadcast (issue 6) on top of `EventBus`.

`connect(settings, contracts_for=..., drop_local=...)` builds it; the composition root
(engine/compose.py) does so when `settings.nats_url` is set, subscribes `on_local_change` to the
engine's change events and starts it. `install(host)` does the same for any `SyncHost`. It:

* publishes every committed `ChangeEvent` of this instance (a listener: it only queues, never blocks);
* receives the events of *other* instances, drops this process's caches of the user concerned
  (the Redis tier's near cache, the in-process session tier) and calls the `on_remote_change`
  callbacks, e.g. to tell the user "your setting was changed on another device";
* prevents loops: events carry `origin` (this instance's id) and `causality_id`. Own events are not
  delivered back; anything a callback does while handling a remote event (on the dispatcher
  thread), and any later write whose `change_set_id` is a received causality id, is not published.
* on `forget_user` first purges the user's earlier events from the stream, then publishes the
  erasure, so values published for L1 fields do not outlive the erasure in NATS.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from usermem.config import Settings
from usermem.errors import ConfigError
from usermem.events.bus import EventBus, Subscription
from usermem.events.payload import RemoteChange, encode, filter_subject, subject_for, to_payload
from usermem.events.ports import ContractsFor, DropLocal, SyncHost
from usermem.model import ChangeEvent, new_id

log = logging.getLogger("usermem.events")

RemoteCallback = Callable[[RemoteChange], None]
# Actions worth telling other instances about. `touch` (recall bookkeeping) is local and frequent.
PUBLISHED_ACTIONS = frozenset({"write", "forget", "forget_user", "confirm", "deny", "revert", "session_closed"})


class FederatedSync:
    def __init__(self, bus: EventBus, *, contracts_for: ContractsFor, drop_local: DropLocal | None = None,
                 values: str = "l1", remember: int = 10_000) -> None:
        self.bus = bus
        self.contracts_for = contracts_for
        self.drop_local = drop_local
        self.values = values
        self.instance_id = new_id()
        self._remote_causes: OrderedDict[str, None] = OrderedDict()
        self._remember = remember
        self._handling = threading.local()
        self._lock = threading.Lock()
        self.counts = {"published": 0, "suppressed": 0, "skipped_own": 0, "remote": 0, "caches_dropped": 0}
        self._callbacks: list[RemoteCallback] = []
        self._sub: Subscription | None = None
        self.outbox = False  # True: committed changes go out through the store's outbox (events/federation.py)

    def use_outbox(self, on: bool = True) -> None:
        """Changes and erasure events are published from the transactional outbox by the relay; this
        listener then only erases the stream's earlier messages on an erasure (before the relay publishes it)."""
        self.outbox = on

    def caused_remotely(self, causality_id: str | None) -> bool:
        """A change made while a remote event is handled on this thread, or caused by a received one."""
        return getattr(self._handling, "cause", None) is not None or self._caused_remotely(causality_id)

    def note_remote_cause(self, causality_id: str) -> None:
        """Remember a causality id applied from another instance (federation): never echo it back."""
        with self._lock:
            self._remote_causes[causality_id] = None
            self._remote_causes.move_to_end(causality_id)
            while len(self._remote_causes) > self._remember:
                self._remote_causes.popitem(last=False)

    # -- outgoing ------------------------------------------------------------------------------------

    def on_local_change(self, event: ChangeEvent) -> None:
        """The `Memory` listener: turn a committed change into a queued message. Never raises."""
        if event.action not in PUBLISHED_ACTIONS:
            return
        if getattr(self._handling, "cause", None) is not None or self._caused_remotely(event.causality_id):
            self._bump("suppressed")  # caused by a remote event: publishing it again would loop
            return
        prefix = self.bus.prefix
        if event.action == "forget_user":
            self.bus.purge(filter_subject(prefix, event.tenant, event.user_id))
        elif event.action == "forget" and event.memory_ids:
            # forget(key) / forget_range: securely delete the earlier events that carried the erased versions
            self.bus.erase_matching(filter_subject(prefix, event.tenant, event.user_id), event.memory_ids)
        if self.outbox and event.action != "session_closed":
            self._bump("published")  # written to the outbox in the change's transaction; the relay sends it
            return
        payload = to_payload(event, event_id=new_id(), origin=self.instance_id,
                             contracts=self.contracts_for(event.tenant), values=self.values)
        if self.bus.publish(subject_for(prefix, event.tenant, event.user_id, event.action), encode(payload)):
            self._bump("published")

    def _caused_remotely(self, causality_id: str | None) -> bool:
        if causality_id is None:
            return False
        with self._lock:
            return causality_id in self._remote_causes

    # -- incoming ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._sub = self.bus.subscribe(self._on_message, ready_timeout=2.0)

    def add_callback(self, callback: RemoteCallback) -> None:
        self._callbacks.append(callback)

    def _on_message(self, change: RemoteChange) -> None:
        if change.origin == self.instance_id:
            self._bump("skipped_own")
            return
        self._bump("remote")
        self.note_remote_cause(change.causality_id)
        self._handling.cause = change.causality_id
        try:
            self.drop_local_caches(change.tenant, change.user_id)
            for callback in list(self._callbacks):
                try:
                    callback(change)
                except Exception:
                    log.exception("on_remote_change callback %r failed for %s", callback, change.action)
        finally:
            self._handling.cause = None

    def drop_local_caches(self, tenant: str, user_id: str) -> int:
        """Drop what this process holds in memory about the user (near cache, session tier)."""
        if self.drop_local is None:
            return 0  # no tiers: every read goes to the store of record, nothing is cached in-process
        try:
            n = int(self.drop_local(tenant, user_id))
        except Exception:
            log.exception("dropping local caches of a user failed")
            return 0
        self._bump("caches_dropped", n)
        return n

    # -- plumbing ------------------------------------------------------------------------------------

    def _bump(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.counts)
        out["instance_id"] = self.instance_id
        out["bus"] = self.bus.stats()
        return out

    def close(self, timeout: float = 5.0) -> None:
        self.bus.close(timeout)


def connect(settings: Settings, *, contracts_for: ContractsFor, drop_local: DropLocal | None = None) -> FederatedSync:
    """A FederatedSync on the NATS JetStream named by `settings` (not started, not subscribed yet)."""
    s = settings
    if s.nats_url is None:
        raise ConfigError("change events need a NATS URL", setting="nats_url")
    bus = EventBus(s.nats_url, stream=s.nats_stream, subject_prefix=s.nats_subject_prefix,
                   queue_size=s.nats_queue_size, max_age=s.nats_max_age_seconds)
    return FederatedSync(bus, contracts_for=contracts_for, drop_local=drop_local, values=s.nats_values)


def install(host: SyncHost, *, drop_local: DropLocal | None = None) -> FederatedSync:
    """Wire `host` (e.g. a `Memory`) to the NATS JetStream named by its settings (module docstring)."""
    sync = connect(host.settings, contracts_for=host.contracts_for, drop_local=drop_local)
    host.subscribe(sync.on_local_change)
    sync.start()
    return sync
