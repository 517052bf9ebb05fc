"""What federated sync needs from its host, as typed ports. `usermem.events` never imports the engine
(nor the store): the composition root (engine/compose.py) passes these in."""

from __future__ import annotations

from collections.abc import Callable
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
