"""Re-embed what the vector index lacks: new memories, memories embedded by another model, or everything."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from usermem.errors import ConfigError
from usermem.model import MemoryRecord
from usermem.relevance.hybrid import Indexer
from usermem.relevance.ports import RelevanceHost
from usermem.relevance.text import INDEXED_KINDS
from usermem.relevance.vectors import VectorIndex
from usermem.store.base import LiveQuery


@dataclass(frozen=True)
class ReindexPlan:
    users: int
    todo: list[MemoryRecord]
    current: int  # memories already embedded by the current model
    model: str = ""  # the embedder's model id


def _indexed(memory: RelevanceHost) -> tuple[VectorIndex, Indexer]:
    rel = memory.relevance
    if rel is None or rel.index is None or rel.embedder is None or rel.indexer is None:
        raise ConfigError("there is no vector index to rebuild: the embedder is 'none' or the store has no "
                          "vector support (PostgreSQL without pgvector)", setting="embedder")
    return rel.index, rel.indexer


def plan_reindex(memory: RelevanceHost, *, force: bool = False, now: float | None = None) -> ReindexPlan:
    """Which live memories need a (new) vector; also drops vectors of memories that are gone."""
    index, indexer = _indexed(memory)
    embedder = indexer.embedder
    at = time.time() if now is None else now
    todo: list[MemoryRecord] = []
    current = 0
    pairs = index.user_pairs()
    kinds = sorted(INDEXED_KINDS, key=lambda k: k.value)
    for tenant, user_id in pairs:
        index.erase(tenant, user_id, None)  # vectors whose memory is no longer current
        have = index.indexed(tenant, user_id)
        for r in memory.store.live(LiveQuery(tenant, user_id, at, kinds=kinds)):
            if not force and have.get(r.key) == (r.id, embedder.model_id):
                current += 1
            else:
                todo.append(r)
    return ReindexPlan(len(pairs), todo, current, embedder.model_id)


def run_reindex(memory: RelevanceHost, plan: ReindexPlan, *, batch: int = 64,
                progress: Callable[[int], None] | None = None) -> int:
    """Embed and store the planned memories in batches; `progress(n)` after each batch. Returns the count."""
    index, indexer = _indexed(memory)
    done = 0
    for start in range(0, len(plan.todo), batch):
        part = plan.todo[start:start + batch]
        index.upsert(indexer.rows_for(part))
        done += len(part)
        if progress is not None:
            progress(len(part))
    return done
