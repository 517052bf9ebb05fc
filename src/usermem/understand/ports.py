"""What the conversation pipelines need from their host (the engine), as a typed port.

`usermem.understand` never imports `usermem.engine`: the composition root (engine/compose.py) hands
`Understanding` an object of this shape, built over the engine's write and recall pipelines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from usermem.config import Settings
from usermem.model import Kind, MemoryRecord, Recalled, ScoredMemory, WriteRequest, WriteResult
from usermem.policy.contracts import ContractSet
from usermem.store.base import Store


class QueryEmbedder(Protocol):
    """An embedding model as the recall planner sees it (relevance/embed.Embedder has this shape): the planner
    reads the query vector recall computes, so there is one embedding per request and one model instance."""

    @property
    def model_id(self) -> str: ...

    def query(self, text: str) -> Any:
        """The query vector of `text` (L2-normalised; a numpy array)."""
        ...


class MemoryHost(Protocol):
    """The engine as `Understanding` sees it."""

    @property
    def query_embedder(self) -> QueryEmbedder | None:
        """The embedder recall uses for query vectors (None: no embedder configured)."""
        ...

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store:
        """Documents (onboarding, pushback, verifications), live reads, audit and `touch`."""
        ...

    @property
    def contracts(self) -> ContractSet:
        """The default contract set (no tenant given)."""
        ...

    def contracts_for(self, tenant: str) -> ContractSet:
        """The contract set in force for a tenant (raises ValidationError for a malformed tenant)."""
        ...

    def now(self, now: float | None) -> float:
        """`now`, checked, or the engine clock's time."""
        ...

    def check_ids(self, tenant: object, user_id: object) -> None:
        """Raise InvalidArgument / ValidationError for a malformed tenant or user id."""
        ...

    def write(self, tenant: str, user_id: str, request: WriteRequest, *, now: float | None = None,
              actor: str | None = None) -> WriteResult: ...

    def write_many(self, tenant: str, user_id: str, requests: Sequence[WriteRequest], *, now: float | None = None,
                   change_set_id: str | None = None, actor: str | None = None) -> list[WriteResult]: ...

    def deny(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None) -> object:
        """Retract a memory (lifecycle deny): an active inference the user rejected."""
        ...

    def recall_scored(self, tenant: str, user_id: str, k: int, *, now: float, keys: Sequence[str] | None = None,
                      kinds: Sequence[Kind] | None = None, session_id: str | None = None,
                      actor: str | None = None, purpose: str | None = None) -> Recalled[ScoredMemory]:
        """The recall pipeline (grants, contracts and session scoping apply); marks nothing as used.
        `.withheld` names the fields left out (with a consent question shaped by `purpose`)."""
        ...


class ClosedSession(Protocol):
    """What the session-close hook receives (engine/sessions.SessionClosed has this shape)."""

    @property
    def tenant(self) -> str: ...

    @property
    def user_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def transcript(self) -> object: ...

    @property
    def already_closed(self) -> bool: ...

    @property
    def closed_at(self) -> float | None: ...

    @property
    def forgotten_keys(self) -> tuple[str, ...]: ...

    @property
    def context(self) -> Sequence[MemoryRecord]: ...
