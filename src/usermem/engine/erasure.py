"""Erasure: forget a key, a time range or a whole user (soft delete, one transaction), and purge for real.

The `forget`/`forget_user` audit entry is written in the soft delete's transaction. When a serving tier
(Redis) cannot be erased, `erase_tiers_failed` is audited, the change event still goes out and
TierUnavailable is raised; the retry that finishes the job is audited as `erase_tiers_done`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from usermem.engine.context import EngineContext
from usermem.engine.ports import Eraser, ErasurePrep, ErasureScope, Purger
from usermem.engine.write import check_ids
from usermem.errors import InvalidArgument, TierUnavailable, ValidationError
from usermem.model import DAY, AuditEvent, ChangeEvent
from usermem.policy.validate import KEY_PATTERN, MAX_TTL_SECONDS, number_arg
from usermem.store.base import Announce, AuditQuery, WriteTx

TIER_FAILED = "erase_tiers_failed"  # audit: the store of record is erased, a serving tier is not yet
TIER_DONE = "erase_tiers_done"  # audit: a retry finished erasing the tiers


class ErasurePipeline:
    def __init__(self, ctx: EngineContext, *, erasers: Iterable[Eraser] = (), purgers: Iterable[Purger] = ()) -> None:
        self.ctx = ctx
        # Extra places a user's data lives (Redis tier, session tier, vector index...). Each gets
        # (tenant, user_id, keys or None) and must be idempotent, so a failed erasure can be retried.
        self._erasers: list[Eraser] = list(erasers)
        # Called before the store purges, with (deleted_before, expired_before): derived data (vectors,
        # index terms) of the rows about to go is removed first, so the store's compaction erases it too.
        self._purgers: list[Purger] = list(purgers)
        # Called before a forget of keys or a time range, to read the values about to go; their steps run after the erasure
        # (open sessions' transcripts lose the forgotten words: engine/sessions.py).
        self._preps: list[ErasurePrep] = []

    def add_prep(self, prep: ErasurePrep) -> None:
        self._preps.append(prep)

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
               now: float | None = None, actor: str | None = None, causality_id: str | None = None,
               memory_ids: Sequence[str] | None = None) -> int:
        """Soft-delete matching versions (all versions of the keys); returns how many rows were deleted.
        `causality_id`: the remote event this erasure applies (federation; it is then not announced again).
        `memory_ids`: only these versions (a remote forget_range, applied by the ids its origin erased)."""
        check_ids(tenant, user_id, actor=actor)
        if keys is not None:
            for key in keys:
                if not isinstance(key, str):
                    raise InvalidArgument(f"key must be a str, got {type(key).__name__}")
                if not KEY_PATTERN.match(key):
                    raise ValidationError(f"key must match [a-z0-9_.-]{{1,64}}, got {key!r:.80}", field="key")
        at = self.ctx.now(now)
        whole_user = keys is None and created_from is None and created_until is None and memory_ids is None
        action = "forget_user" if whole_user else "forget"
        # The audit entry commits in the soft-delete's own transaction (detail gets "rows"): an erasure
        # is never committed without it, whatever happens to the tier step below (issue 12 item 15).
        audit = AuditEvent(tenant=tenant, at=at, action=action, user_id=user_id, actor=actor,
                           detail={"keys": list(keys) if keys else None, "created_from": created_from,
                                   "created_until": created_until,
                                   **({"memory_ids": len(memory_ids)} if memory_ids is not None else {})})
        stage = self.ctx.erasure_stager
        announce: Announce | None = None
        if stage is not None:  # the erasure's outbox event commits with it (federation)

            def announce(tx: WriteTx, erased: Sequence[str]) -> None:
                stage(tx, ChangeEvent(tenant, user_id, action, at, keys=tuple(keys or ()), memory_ids=tuple(erased),
                                      causality_id=causality_id))

        # Part of the user (keys, a time range, versions by id): what must follow the versions out, after them.
        scope = ErasureScope(at, keys, created_from, created_until, memory_ids)
        after = [step for prep in (() if whole_user else self._preps)
                 for step in (prep(tenant, user_id, scope),) if step is not None]
        ids = self.ctx.store.soft_delete(tenant, user_id, at, keys=keys, created_from=created_from,
                                         created_until=created_until, audit=audit, announce=announce,
                                         ids=memory_ids)
        if whole_user:
            # Sessions, grants, verifications and other per-user documents go too (hard delete).
            self.ctx.store.delete_user_docs(tenant, user_id)
        for step in after:
            step()
        failure: TierUnavailable | None = None
        for erase in list(self._erasers):
            try:
                erase(tenant, user_id, keys)
            except TierUnavailable as exc:
                failure = failure or exc
        event = ChangeEvent(tenant, user_id, action, at, keys=tuple(keys or ()), memory_ids=tuple(ids),
                            causality_id=causality_id)
        if failure is not None:
            # The store of record is erased and audited; the tiers are not yet. Say so in the audit, tell
            # the other instances (they drop their caches) and raise: retrying the call finishes the job.
            self.ctx.store.append_audit(AuditEvent(
                tenant=tenant, at=at, action=TIER_FAILED, user_id=user_id, actor=actor,
                detail={"erasure": action, "keys": list(keys) if keys else None, "error": str(failure)[:300]}))
            self.ctx.emit(event)
            raise failure
        if self._erasers and not ids and self._retrying(tenant, user_id):
            self.ctx.store.append_audit(AuditEvent(tenant=tenant, at=at, action=TIER_DONE, user_id=user_id,
                                                   actor=actor, detail={"erasure": action, "retry": True}))
        self.ctx.emit(event)
        return len(ids)

    def _retrying(self, tenant: str, user_id: str) -> bool:
        """The user's last tier-erasure outcome in the audit is a failure (this call is its retry)."""
        last = {a: max((e.seq or 0 for e in self.ctx.store.audit_log(AuditQuery(tenant, user_id, action=a,
                                                                                   limit=1000))), default=0)
                for a in (TIER_FAILED, TIER_DONE)}
        return last[TIER_FAILED] > last[TIER_DONE]

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
