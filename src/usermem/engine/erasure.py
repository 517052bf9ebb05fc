"""Erasure: forget a key, a time range or a whole user (soft delete, one transaction), and purge for real."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from usermem.engine.context import EngineContext
from usermem.engine.ports import Eraser, Purger
from usermem.engine.write import check_ids
from usermem.errors import InvalidArgument, ValidationError
from usermem.model import DAY, AuditEvent, ChangeEvent
from usermem.policy.validate import KEY_PATTERN, MAX_TTL_SECONDS, number_arg


class ErasurePipeline:
    def __init__(self, ctx: EngineContext, *, erasers: Iterable[Eraser] = (), purgers: Iterable[Purger] = ()) -> None:
        self.ctx = ctx
        # Extra places a user's data lives (Redis tier, session tier, vector index...). Each gets
        # (tenant, user_id, keys or None) and must be idempotent, so a failed erasure can be retried.
        self._erasers: list[Eraser] = list(erasers)
        # Called before the store purges, with (deleted_before, expired_before): derived data (vectors,
        # index terms) of the rows about to go is removed first, so the store's compaction erases it too.
        self._purgers: list[Purger] = list(purgers)

    def add_eraser(self, eraser: Eraser) -> None:
        self._erasers.append(eraser)

    def remove_eraser(self, eraser: Eraser) -> None:
        if eraser in self._erasers:
            self._erasers.remove(eraser)

    def add_purger(self, purger: Purger) -> None:
        self._purgers.append(purger)

    def remove_purger(self, purger: Purger) -> None:
        if purger in self._purgers:
            self._purgers.remove(purger)

    def forget(self, tenant: str, user_id: str, *, keys: Sequence[str] | None = None,
               created_from: float | None = None, created_until: float | None = None,
               now: float | None = None, actor: str | None = None) -> int:
        """Soft-delete matching versions (all versions of the keys); returns how many rows were deleted."""
        check_ids(tenant, user_id, actor=actor)
        if keys is not None:
            for key in keys:
                if not isinstance(key, str):
                    raise InvalidArgument(f"key must be a str, got {type(key).__name__}")
                if not KEY_PATTERN.match(key):
                    raise ValidationError(f"key must match [a-z0-9_.-]{{1,64}}, got {key!r:.80}", field="key")
        at = self.ctx.now(now)
        ids = self.ctx.store.soft_delete(tenant, user_id, at, keys=keys, created_from=created_from,
                                         created_until=created_until)
        whole_user = keys is None and created_from is None and created_until is None
        if whole_user:
            # Sessions, grants, verifications and other per-user documents go too (hard delete).
            self.ctx.store.delete_user_docs(tenant, user_id)
        for erase in list(self._erasers):
            erase(tenant, user_id, keys)
        action = "forget_user" if whole_user else "forget"
        self.ctx.store.append_audit(AuditEvent(
            tenant=tenant, at=at, action=action, user_id=user_id, actor=actor,
            detail={"rows": len(ids), "keys": list(keys) if keys else None,
                    "created_from": created_from, "created_until": created_until}))
        self.ctx.emit(ChangeEvent(tenant, user_id, action, at, keys=tuple(keys or ()), memory_ids=tuple(ids)))
        return len(ids)

    def purge(self, *, now: float | None = None, retention_days: float | None = None) -> int:
        """Physically remove rows soft-deleted or expired more than `retention_days` ago."""
        at = self.ctx.now(now)
        days = self.ctx.settings.retention_days if retention_days is None else retention_days
        days = number_arg("retention_days", days, 0.0, MAX_TTL_SECONDS / DAY)  # finite, ≥ 0 (policy/validate.py)
        cutoff = at - days * DAY
        for drop in list(self._purgers):
            drop(cutoff, cutoff)
        n = self.ctx.store.purge(deleted_before=cutoff, expired_before=cutoff)
        self.ctx.store.append_audit(AuditEvent(tenant="*", at=at, action="purge",
                                               detail={"rows": n, "cutoff": cutoff}))
        return n
