"""Change events on NATS JetStream: federated sync between instances and the erasure broadcast.

See docs/events.md. `Memory` installs this when `settings.nats_url` is set; `EventBus` can also be
used on its own (e.g. `usermem events tail`).
"""

from usermem.events.bus import EventBus
from usermem.events.payload import RemoteChange, filter_subject, subject_for, user_hash
from usermem.events.sync import FederatedSync, install

__all__ = ["EventBus", "FederatedSync", "RemoteChange", "filter_subject", "install", "subject_for", "user_hash"]
