"""What federated sync needs from its host, as typed ports. `usermem.events` never imports the engine
(nor the store): the composition root (engine/compose.py) passes these in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from usermem.config import Settings
from usermem.model import ChangeEvent
from usermem.policy.contracts import ContractSet

# The contract set in force for a tenant: which fields are L1 (their values may be published).
ContractsFor = Callable[[str], ContractSet]
# Drop what this process caches about a user (near cache, session tier); returns how many entries.
DropLocal = Callable[[str, str], int]


class SyncHost(Protocol):
    """A host `install()` can wire sync into (a `Memory` has this shape)."""

    @property
    def settings(self) -> Settings: ...

    def contracts_for(self, tenant: str) -> ContractSet: ...

    def subscribe(self, listener: Callable[[ChangeEvent], None]) -> None: ...


# -- federation (issue 17): what the outbox relay and the consumer need -----------------------------------

class Queued(Protocol):
    """One outbox entry as the relay sees it (store.base.OutboxEntry has this shape)."""

    @property
    def event_id(self) -> str: ...

    @property
    def subject(self) -> str: ...

    @property
    def payload(self) -> str: ...


# The outbox's oldest entries (up to n), and the removal of those the bus acknowledged.
PendingOf = Callable[[int], Sequence[Queued]]
RemoveAcked = Callable[[Sequence[str]], int]


class Delivery(Protocol):
    """A message handed to the consumer: acknowledge once applied, or ask for redelivery."""

    @property
    def data(self) -> bytes: ...

    @property
    def attempts(self) -> int:
        """How many times this message was delivered, this time included (1: the first delivery)."""

    def ack(self) -> None: ...

    def nak(self) -> None: ...


class Transport(Protocol):
    """Where federated events travel: NATS JetStream (events.federation.NatsTransport) or, in tests and
    single-process setups, an in-process hub (events.federation.LocalTransport)."""

    def publish(self, subject: str, data: bytes, msg_id: str, done: Callable[[bool], None]) -> None:
        """Send; `done(True)` once the message is durably stored (JetStream ack), `done(False)` if not."""

    def fetch(self, batch: int, timeout: float) -> Sequence[Delivery]:
        """The next messages of this instance's durable consumer ([] when none within `timeout`)."""

    def close(self) -> None: ...
