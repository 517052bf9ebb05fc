"""The engine's ports: what the composition root (engine/compose.py) plugs into the pipelines.

Each port is a typed Protocol or a plain callable type. Plug-in packages (relevance, understand,
events) never import the engine: they implement these shapes structurally, and they declare the
host they need as their own Protocol (understand/ports.py, relevance/ports.py, events/ports.py).
Only engine/compose.py builds plug-ins and hands them to the pipelines, through constructor
arguments and registration methods (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from usermem.model import ChangeEvent, EventWindow, Kind, MemoryRecord

# Called after every committed change (relevance indexer, event publisher, session activity...).
# Listeners run after commit; a failing listener is logged and never undoes the change.
Listener = Callable[[ChangeEvent], None]
EventSink = Listener

# Erases derived copies of a user's data (Redis / session tiers, vector index...) after the store of
# record: (tenant, user_id, keys or None for the whole user). Must be idempotent (a failed erasure is
# retried by calling forget again). A tiered store declares its own as `store.capabilities.erase_tiers`
# (store/base.py: TierEraser, like `capabilities.drop_local`: LocalDropper), which compose.py registers.
Eraser = Callable[[str, str, Sequence[str] | None], object]

@dataclass(frozen=True, slots=True)
class ErasureScope:
    """What a forget of part of a user erases: every version of `keys` (None: of any key) created in
    [created_from, created_until) (None: unbounded) — or, for an erasure applied from another instance by ids,
    exactly the versions `memory_ids`. `at`: when (the erasure's `now`)."""

    at: float
    keys: Sequence[str] | None = None
    created_from: float | None = None
    created_until: float | None = None
    memory_ids: Sequence[str] | None = None

    def covers(self, key: str, created_at: float) -> bool:
        return ((self.keys is None or key in self.keys)
                and (self.created_from is None or created_at >= self.created_from)
                and (self.created_until is None or created_at < self.created_until))


# Called before a forget of part of a user (keys, a time range) soft-deletes it, with (tenant, user_id, scope):
# reads what it needs of the versions about to go (their values) and returns the step to run once they are
# erased (or None: nothing to do). Used where a copy of the user's words lives outside the memories: open
# sessions' transcripts.
ErasurePrep = Callable[[str, str, ErasureScope], Callable[[], object] | None]

# Called before the store purges, with (deleted_before, expired_before): derived data of the rows about
# to go (vectors, index terms, expired grants) is removed first. Returns anything (often a count).
Purger = Callable[[float, float], object]


class Relevance(Protocol):
    """Query relevance for recall(query=...): stage 1 picks candidate keys, stage 2 scores records."""

    @property
    def indexed_kinds(self) -> Collection[Kind]:
        """Kinds `candidates` covers; live memories of other kinds are always loaded and scored."""
        ...

    def candidates(self, tenant: str, user_id: str, query: str, *, kinds: Sequence[Kind] | None = None,
                   at_from: float | None = None, at_until: float | None = None,
                   limit: int | None = None) -> list[str] | None:
        """Keys worth scoring for the query, or None (score every live memory)."""
        ...

    def __call__(self, query: str, records: Sequence[MemoryRecord]) -> Sequence[float]:
        """Relevance in [0, 1] per record, same order."""
        ...

    def combine(self, relevance: float, importance: float, weight: float) -> float:
        """The recall score of a record from its relevance and its query-free importance × weight."""
        ...

    def time_window(self, query: str, now: float) -> EventWindow | None:
        """The event-time window a time expression in the query names ("last week"), or None."""
        ...


class Indexer(Protocol):
    """Write-side indexing: a change listener that embeds written memories off the caller's path."""

    def __call__(self, event: ChangeEvent) -> None: ...

    def flush(self, timeout: float = 60.0) -> None: ...

    def close(self) -> None: ...


class DerivedIndex(Protocol):
    """Data derived from memories (a vector index) that erasure and purge must reach."""

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> object: ...

    def drop_orphans(self, deleted_before: float, expired_before: float) -> object: ...


class RelevancePlugin(Relevance, Protocol):
    """A relevance plug-in as the composition root wires it: the scorer, plus its indexer and the
    index erasure must reach (either may be None: lexical-only relevance keeps no index)."""

    @property
    def indexer(self) -> Indexer | None: ...

    @property
    def index(self) -> DerivedIndex | None: ...
