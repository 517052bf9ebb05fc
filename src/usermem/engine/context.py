"""What every pipeline shares: the store, the contracts, the clock, the limits and change listeners."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from usermem.config import Settings
from usermem.model import AuditEvent, ChangeEvent, MemoryRecord, new_id
from usermem.policy.contracts import ContractSet
from usermem.policy.validate import Limits, time_arg
from usermem.store.base import Store, WriteTx

Clock = Callable[[], float]
Listener = Callable[[ChangeEvent], None]
# Called inside a change's transaction, before commit, with the versions it inserted: writes the change
# event to the transactional outbox (engine/federation.py). Raising rolls the change back.
Stager = Callable[[WriteTx, str, str, tuple[MemoryRecord, ...]], None]
# Called inside an erasure's soft-delete transaction, before commit, with its change event (the ids erased
# included): writes the erasure's event to the outbox. Raising rolls the erasure back.
ErasureStager = Callable[[WriteTx, ChangeEvent], None]
log = logging.getLogger("usermem")

__all__ = ["Clock", "EngineContext", "ErasureStager", "Listener", "Stager", "new_id"]


class RecordingTx:
    """A store transaction noting the versions inserted through it (for the outbox stager)."""

    def __init__(self, tx: WriteTx) -> None:
        self._tx = tx
        self.inserted: list[MemoryRecord] = []

    @property
    def inner(self) -> WriteTx:
        return self._tx

    def head(self, key: str) -> MemoryRecord | None:
        return self._tx.head(key)

    def insert(self, record: MemoryRecord) -> None:
        self._tx.insert(record)
        self.inserted.append(record)

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        self._tx.supersede(old_id, new_id, at)

    def get(self, memory_id: str) -> MemoryRecord | None:
        return self._tx.get(memory_id)

    def audit(self, event: AuditEvent) -> None:
        self._tx.audit(event)  # new_id lives in usermem.model (re-exported)


# (context, tenant, contract set) pinned by EngineContext.pinned_contracts for the operation in progress.
_PINNED: ContextVar[tuple[EngineContext, str, ContractSet] | None] = ContextVar("usermem_pinned_contracts",
                                                                                default=None)


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

    # The outbox stager (engine/federation.py), when change events go out through the outbox.
    stager: Stager | None = None

    erasure_stager: ErasureStager | None = None

    def use_stager(self, stager: Stager | None, erasure_stager: ErasureStager | None = None) -> None:
        """Write every change's event inside its transaction, erasures' too (None: no outbox)."""
        self.stager = stager
        self.erasure_stager = erasure_stager

    def transaction(self, tenant: str, user_id: str) -> AbstractContextManager[WriteTx]:
        """The store's transaction for one user; with a stager, the versions inserted in it are announced in
        the outbox in the same transaction (no committed change unannounced, no rolled-back one announced).
        Without one it is the store's transaction itself (no extra generator layer on every write)."""
        stager = self.stager
        if stager is None:
            return self.store.transaction(tenant, user_id)
        return self._staged(stager, tenant, user_id)

    @contextmanager
    def _staged(self, stager: Stager, tenant: str, user_id: str) -> Iterator[WriteTx]:
        with self.store.transaction(tenant, user_id) as tx:
            recording = RecordingTx(tx)
            yield recording
            if recording.inserted:
                stager(recording, tenant, user_id, tuple(recording.inserted))

    def use_contract_provider(self, provider: Callable[[str], ContractSet] | None) -> None:
        """Where per-tenant contract sets come from (engine/contracts.py); None: `contracts` for all."""
        self.contract_provider = provider

    def contracts_for(self, tenant: str) -> ContractSet:
        """The contract set in force for `tenant` now (stored edits included); inside `pinned_contracts` of
        this context and tenant, the set pinned there."""
        pinned = _PINNED.get()
        if pinned is not None and pinned[0] is self and pinned[1] == tenant:
            return pinned[2]
        return self.contracts if self.contract_provider is None else self.contract_provider(tenant)

    @contextmanager
    def pinned_contracts(self, tenant: str, contracts: ContractSet) -> Iterator[ContractSet]:
        """Within the block (this thread or task), `contracts_for(tenant)` is `contracts`: one operation reads
        its tenant's contract set once, however many of its parts ask (a query recall and its planner)."""
        token = _PINNED.set((self, tenant, contracts))
        try:
            yield contracts
        finally:
            _PINNED.reset(token)

    # (settings, their limits): built once, not on every write (Settings is frozen, so the identity of
    # `settings` tells whether the limits still hold).
    _limits: tuple[Settings, Limits] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def limits(self) -> Limits:
        settings, cached = self.settings, self._limits
        if cached is None or cached[0] is not settings:
            cached = self._limits = (settings, Limits(max_value_bytes=settings.max_value_bytes,
                                                      max_batch=settings.max_batch))
        return cached[1]

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
