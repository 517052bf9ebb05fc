"""What the relevance package needs from its host, as a typed port. `usermem.relevance` never imports
the engine: `install` / `uninstall` / `reindex` take any object of this shape (a `Memory` has it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from usermem.store.base import Store

if TYPE_CHECKING:
    from usermem.relevance.embed import Embedder
    from usermem.relevance.hybrid import HybridRelevance


class RelevanceHost(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def relevance(self) -> HybridRelevance | None:
        """The relevance plug-in wired into recall, or None."""
        ...

    def use_relevance(self, relevance: HybridRelevance | Literal["hybrid"] | None = "hybrid", *,
                      embedder: Embedder | None = None, background: bool = True) -> HybridRelevance | None:
        """Wire a plug-in into recall and erasure ("hybrid": built from the host's settings), or remove it."""
        ...
