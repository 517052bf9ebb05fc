"""What every pipeline shares: the store, the contracts, the clock, the limits and change listeners."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from usermem.config import Settings
from usermem.model import ChangeEvent, new_id
from usermem.policy.contracts import ContractSet
from usermem.policy.validate import Limits, time_arg
from usermem.store.base import Store

Clock = Callable[[], float]
Listener = Callable[[ChangeEvent], None]
log = logging.getLogger("usermem")

__all__ = ["Clock", "EngineContext", "Listener", "new_id"]  # new_id lives in usermem.model (re-exported)


@dataclass
class EngineContext:
    store: Store
    settings: Settings
    contracts: ContractSet
    clock: Clock = time.time
    listeners: list[Listener] = field(default_factory=list)
    # Per-tenant contract sets (engine/contracts.py); None: every tenant uses `contracts`.
    contract_provider: Callable[[str], ContractSet] | None = None

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(ChangeEvent)` after every committed change."""
        self.listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def use_contract_provider(self, provider: Callable[[str], ContractSet] | None) -> None:
        """Where per-tenant contract sets come from (engine/contracts.py); None: `contracts` for all."""
        self.contract_provider = provider

    def contracts_for(self, tenant: str) -> ContractSet:
        """The contract set in force for `tenant` now (stored edits included)."""
        return self.contracts if self.contract_provider is None else self.contract_provider(tenant)

    @property
    def limits(self) -> Limits:
        return Limits(max_value_bytes=self.settings.max_value_bytes, max_batch=self.settings.max_batch)

    def now(self, now: float | None) -> float:
        # Finite Unix seconds within years 1-9999, else ValidationError/InvalidArgument (policy/validate.py).
        return float(self.clock()) if now is None else time_arg("now", now)

    def emit(self, event: ChangeEvent) -> None:
        # Listeners run after commit; their failure must never undo or fail an acknowledged write.
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.exception("change listener %r failed for %s", listener, event.action)
