"""Conflict resolution: may a new value replace the current one? Source authority decides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from usermem.model import SOURCE_RANK, Op, Reason, Source


@dataclass(frozen=True, slots=True)
class Head:
    """What resolution needs to know about the current version of a key."""

    value_json: str
    source: Source
    live: bool  # False when expired or retracted: then it no longer blocks or matches anything


@dataclass(frozen=True, slots=True)
class Resolution:
    op: Op
    reason: Reason | None = None
    detail: str | None = None


def authority_rank(source: Source, order: Sequence[Source] | None = None) -> int:
    """Higher is more authoritative. A field's own order (e.g. user above system) overrides the global one."""
    if order:
        return len(order) - order.index(source) if source in order else 0
    return SOURCE_RANK[source]


def resolve(head: Head | None, value_json: str, source: Source, order: Sequence[Source] | None = None) -> Resolution:
    """Decide ADD / UPDATE / NOOP / REJECT for a candidate against the current head of its key.

    - no live head: ADD (an expired or retracted head is still linked as prev_version, but does not block);
    - same value from a source of no higher authority: NOOP;
    - same value from a *higher* authority: UPDATE, so provenance is upgraded and later low-authority
      writes cannot displace a value the system has now vouched for;
    - lower authority than the head: REJECT lower_priority_source;
    - otherwise UPDATE (the old version is superseded, never deleted).
    """
    if head is None or not head.live:
        return Resolution(Op.ADD)
    new_rank, old_rank = authority_rank(source, order), authority_rank(head.source, order)
    if head.value_json == value_json:
        if new_rank > old_rank:
            return Resolution(Op.UPDATE, detail="source_upgrade")
        return Resolution(Op.NOOP)
    if new_rank < old_rank:
        return Resolution(
            Op.REJECT, Reason.LOWER_PRIORITY_SOURCE, f"{source.value} may not override {head.source.value}"
        )
    return Resolution(Op.UPDATE)
