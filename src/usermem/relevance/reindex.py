"""Re-embed what the vector index lacks: new memories, memories embedded by another model, or everything."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from usermem.errors import ConfigError
from usermem.model import MemoryRecord
from usermem.relevance.text import INDEXED_KINDS
from usermem.store.base import LiveQuery


@dataclass(frozen=True)
class ReindexPlan:
    users: int
    todo: list[MemoryRecord]
    current: int  # memories already embedded by the current model


def plan_reindex(memory: Any, *, force: bool = False, now: float | None = None) -> ReindexPlan:
    """Which live memories need a (new) vector; also drops vectors of memories that are gone."""
    rel = getattr(memory, "_relevance", None)
    index = getattr(rel, "index", None)
    embedder = getattr(rel, "embedder", None)
    if index is None or embedder is None:
        raise ConfigError("there is no vector index to rebuild: the embedder is 'none' or the store has no "
                          "vector support (PostgreSQL without pgvector)", setting="embedder")
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
    return ReindexPlan(len(pairs), todo, current)


def run_reindex(memory: Any, plan: ReindexPlan, *, batch: int = 64,
                progress: Callable[[int], None] | None = None) -> int:
    """Embed and store the planned memories in batches; `progress(n)` after each batch. Returns the count."""
    rel = memory._relevance
    indexer = rel.indexer
    done = 0
    for start in range(0, len(plan.todo), batch):
        part = plan.todo[start:start + batch]
        rel.index.upsert(indexer.rows_for(part))
        done += len(part)
        if progress is not None:
            progress(len(part))
    return done
