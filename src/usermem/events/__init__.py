"""Change events on NATS JetStream: federated sync between instances and the erasure broadcast.

`events.federation` (issue 17) holds the transactional outbox's relay, the durable consumer and the transports
(NATS, in-process); the engine's side is `engine/federation.py` (docs/federation.md).

See docs/events.md. The composition root (engine/compose.py) wires this when `settings.nats_url` is
set, through `events.sync.connect`; this package never imports the engine or the store; `EventBus` can also be
used on its own (e.g. `usermem events tail`).
"""

from usermem.events.bus import EventBus
from usermem.events.payload import RemoteChange, filter_subject, subject_for, user_hash
from usermem.events.sync import FederatedSync, connect, install

__all__ = [
    "EventBus", "FederatedSync", "RemoteChange", "connect", "filter_subject", "install", "subject_for", "user_hash",
]
