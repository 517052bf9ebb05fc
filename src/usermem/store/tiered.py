"""Routing by kind: the store of record behind one Store interface, with serving tiers in front.

`build_store(settings)` is what `Memory` calls. Presets:

* ``embedded`` (default): everything in the store of record (SQLite unless ``store_url`` says otherwise);
* ``tiered`` (seed 004's layout): fact, situation, episode → store of record (PostgreSQL);
  preference and context → served from Redis.

``routes`` overrides per kind (``record`` | ``redis`` | ``session``). Every record is written to the
store of record, which keeps versions, audit and history; a tier is a write-through cache in front
of it (store/redis.py explains the protocol, docs/storage.md the durability argument).

When a tier fails: reads of its kinds fall back to the store of record, writes still commit there
(the acknowledgement point) and the user is marked *dirty* in the store of record; the tier is not
read again until those marks are reconciled (the users' cached data erased), which every instance
checks at most every `dirty_check_interval` seconds; in between, a read of a user marked dirty goes to
the store of record (every tier read checks that user's mark). Erasure that cannot reach a tier raises
TierUnavailable after the store of record is erased; a retry finishes the job.
"""

from __future__ import annotations

import json
import logging
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from usermem.config import redact_url
from usermem.errors import ConfigError, TierUnavailable
from usermem.model import KIND_REGISTRY, AuditEvent, Kind, MemoryRecord, parse_kind
from usermem.policy.decay import rank_time, time_constant
from usermem.store.base import (
    Announce,
    AuditQuery,
    LiveQuery,
    ReadAhead,
    ScoreRow,
    Store,
    WriteTx,
    fresh_reads,
    open_store,
)
from usermem.store.redis import Change, RedisTier, SessionTier, Tier

log = logging.getLogger("usermem.store")

ROUTES = ("record", "redis", "session")
PRESETS: Mapping[str, Mapping[Kind, str]] = {
    "embedded": {},
    "tiered": {Kind.PREFERENCE: "redis", Kind.CONTEXT: "redis"},
}
# Tier bookkeeping lives in the store of record's documents under this reserved tenant.
DIRTY_TENANT = "_usermem"
_RANK_MEMO = 10_000  # users × tiers whose rank orders are kept (TieredStore._rank_orders)
_EVERYTHING = -1e300  # a `now` before every expiry: loads every current record, expired or not
# Inside a read_ahead block: (store, {(tier, tenant, user): the tier's records of the user}) — one tier read
# (and one dirty-mark check) per user and block, whatever the number of reads that need the tier.
_TIER_READS: ContextVar[tuple[TieredStore, dict[tuple[str, str, str], list[MemoryRecord]]] | None] = \
    ContextVar("usermem_tier_reads", default=None)


def resolve_routes(preset: str, routes: Mapping[str, str]) -> dict[Kind, str]:
    """Kind -> route for a preset with per-kind overrides. Raises ConfigError naming the setting."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; use 'embedded' or 'tiered'", setting="preset")
    out = {k: PRESETS[preset].get(k, "record") for k in Kind}
    for name, route in routes.items():
        try:
            kind = parse_kind(name)
        except ValueError:
            raise ConfigError(f"unknown kind {name!r}; kinds are {[k.value for k in Kind]}", setting="routes") from None
        if route not in ROUTES:
            raise ConfigError(f"route for {name!r} must be record, redis or session, got {route!r}",
                              setting="routes")
        out[kind] = route
    return out


def build_store(settings: Any) -> Store:
    """The configured store: the store of record, wrapped in a TieredStore when a kind is routed to a tier."""
    routes = resolve_routes(settings.preset, settings.routes)
    url = settings.store_url
    record = open_store(None if url in (None, "", "sqlite://") else url)
    wanted = {route for route in routes.values() if route != "record"}
    if not wanted:
        return record
    tiers: list[Tier] = []
    try:
        if "redis" in wanted:
            if not settings.redis_url:
                raise ConfigError(f"preset {settings.preset!r} routes "
                                  f"{sorted(k.value for k, r in routes.items() if r == 'redis')} to Redis, "
                                  "but no redis_url is set (USERMEM_REDIS_URL)", setting="redis_url")
            if not str(settings.redis_url).startswith(("redis://", "rediss://", "unix://", "redis+cluster://",
                                                       "rediss+cluster://")):
                raise ConfigError(f"unknown Redis URL scheme in {redact_url(settings.redis_url)!r}; use "
                                  "redis://host:6379/0 (or redis+cluster://host:7000 for Redis Cluster)",
                                  setting="redis_url")
            tier = RedisTier(settings.redis_url, [k for k, r in routes.items() if r == "redis"],
                             prefix=settings.key_prefix)
            try:
                tier.ping()
            except TierUnavailable as exc:
                tier.close()
                raise ConfigError(f"cannot reach Redis at {redact_url(settings.redis_url)}: {exc}",
                                  setting="redis_url") from None
            tiers.append(tier)
        if "session" in wanted:
            tiers.append(SessionTier([k for k, r in routes.items() if r == "session"]))
    except BaseException:
        record.close()
        raise
    return TieredStore(record, tiers)


@dataclass
class _Health:
    healthy: bool = False
    checked: float = -1e18
    attempted: float = -1e18
    last_error: str | None = None


class _TrackingTx:
    """The store of record's transaction, noting what changed for the tiers."""

    def __init__(self, tx: WriteTx) -> None:
        self._tx = tx
        self.change = Change()
        self.heads: dict[str, Kind] = {}

    @property
    def inner(self) -> WriteTx:
        """The store of record's transaction (its outbox writes beside the change)."""
        return self._tx

    def head(self, key: str) -> MemoryRecord | None:
        r = self._tx.head(key)
        if r is not None:
            self.heads[r.id] = r.kind
        return r

    def get(self, memory_id: str) -> MemoryRecord | None:
        r = self._tx.get(memory_id)
        if r is not None:
            self.heads[r.id] = r.kind
        return r

    def insert(self, record: MemoryRecord) -> None:
        self._tx.insert(record)
        self.change.inserted.append(record)

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        self._tx.supersede(old_id, new_id, at)
        self.change.superseded.append((old_id, new_id))

    def audit(self, event: AuditEvent) -> None:
        self._tx.audit(event)

    def __getattr__(self, name: str) -> Any:  # backend extras (e.g. savepoints) pass through
        return getattr(self._tx, name)


class TieredStore:
    """One Store: the store of record plus serving tiers for the kinds routed to them."""

    def __init__(self, record: Store, tiers: Sequence[Tier], *, retry_interval: float = 1.0,
                 dirty_check_interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.record = record
        self.url = record.url
        self.tiers = list(tiers)
        self.route: dict[Kind, Tier] = {k: t for t in self.tiers for k in t.kinds}
        self.retry_interval = retry_interval
        self.dirty_check_interval = dirty_check_interval
        self._clock = clock
        self._health = {t.name: _Health() for t in self.tiers}
        self._checking = {t.name: threading.Lock() for t in self.tiers}
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[str, str, Kind]] = OrderedDict()  # id -> (user, key, kind)
        # (tier, tenant, user) -> (the tier's records last ranked, their order per kind): _rank_orders.
        self._ranks: OrderedDict[tuple[str, str, str],
                                 tuple[tuple[MemoryRecord, ...], dict[Kind, list[MemoryRecord]]]] = OrderedDict()
        self._stash = threading.local()
        self.stats = {"hits": 0, "misses": 0, "fills": 0, "fallbacks": 0, "tier_errors": 0, "dirty_marked": 0,
                      "reconciled": 0}
        # The store of record's SQL (and vector tables) plus tiers, whose erasure runs after the record's.
        # ranked: the store of record's rank index for its kinds, the tiers' records ranked here for theirs.
        caps = record.capabilities
        self.capabilities = replace(caps, tiers=True, erase_tiers=self.erase_tiers,
                                    drop_local=self.drop_local, serialised=False,  # tiers answer on their own
                                    ranked=self.ranked if caps.ranked is not None else None,
                                    read_ahead=self.read_ahead if caps.read_ahead is not None else None)

    # -- tier health -------------------------------------------------------------------------------

    def _ns(self, tier: Tier) -> str:
        return f"tier_dirty:{tier.name}"

    def _usable(self, tier: Tier) -> bool:
        """Whether to use the tier now; reconciles dirty users first when due.

        One thread at a time checks a tier: while the tier is healthy the others keep using it; while it
        is not, they wait for the check in progress instead of treating the tier as down.
        """
        h = self._health[tier.name]
        now = self._clock()
        if h.healthy and now - h.checked < self.dirty_check_interval:
            return True
        if not h.healthy and h.last_error is not None and now - h.attempted < self.retry_interval:
            return False  # failed recently: do not wait for another timeout
        lock = self._checking[tier.name]
        if not lock.acquire(blocking=not h.healthy):
            return True  # healthy, and another thread is looking at the dirty marks right now
        try:
            now = self._clock()
            if h.healthy and now - h.checked < self.dirty_check_interval:
                return True
            if not h.healthy and h.last_error is not None and now - h.attempted < self.retry_interval:
                return False  # another thread just tried and failed
            h.attempted = now
            try:
                self.reconcile(tier)
            except TierUnavailable as exc:
                self._down(tier, exc)
                return False
            h.healthy, h.checked, h.last_error = True, now, None
            return True
        finally:
            lock.release()

    def _down(self, tier: Tier, exc: BaseException) -> None:
        h = self._health[tier.name]
        if h.healthy:
            log.warning("tier %s unavailable, serving from the store of record: %s", tier.name, exc)
        h.healthy, h.attempted, h.last_error = False, self._clock(), str(exc)
        self.stats["tier_errors"] += 1

    def reconcile(self, tier: Tier) -> int:
        """Erase the cached data of every user marked dirty for this tier, then clear the marks."""
        tier.ping()
        n = 0
        while True:
            docs = self.record.list_docs(DIRTY_TENANT, self._ns(tier), limit=1000)
            if not docs:
                return n
            for key, value in docs:
                tier.erase(str(value["tenant"]), str(value["user_id"]), None)
                self.record.delete_doc(DIRTY_TENANT, self._ns(tier), key)
                n += 1
                self.stats["reconciled"] += 1

    def _is_dirty(self, tier: Tier, tenant: str, user_id: str) -> bool:
        return self.record.get_doc(DIRTY_TENANT, self._ns(tier), json.dumps([tenant, user_id], ensure_ascii=False)) \
            is not None

    def _mark_dirty(self, tier: Tier, tenant: str, user_id: str) -> None:
        self.record.put_doc(DIRTY_TENANT, self._ns(tier), json.dumps([tenant, user_id], ensure_ascii=False),
                            {"tenant": tenant, "user_id": user_id}, now=time.time())
        self.stats["dirty_marked"] += 1

    def tier_status(self) -> dict[str, dict[str, Any]]:
        """Per tier: healthy, last error, kinds; plus counters. For health endpoints and operators."""
        return {t.name: {"healthy": self._health[t.name].healthy, "last_error": self._health[t.name].last_error,
                         "kinds": sorted(k.value for k in t.kinds)} for t in self.tiers}

    # -- writes ------------------------------------------------------------------------------------

    def _relevant(self, tier: Tier, tx: _TrackingTx) -> bool:
        if any(r.kind in tier.kinds for r in tx.change.inserted):
            return True
        return any(tx.heads.get(old) in tier.kinds or old not in tx.heads for old, _ in tx.change.superseded)

    @contextmanager
    def transaction(self, tenant: str, user_id: str) -> Iterator[_TrackingTx]:
        applied: list[tuple[Tier, Any]] = []
        body_done = False
        try:
            with self.record.transaction(tenant, user_id) as tx:
                tracking = _TrackingTx(tx)
                yield tracking
                body_done = True
                # Still inside the store of record's transaction and its per-user lock: tiers see the
                # changes of one user in commit order.
                for tier in self.tiers:
                    if not tracking.change.inserted or not self._relevant(tier, tracking):
                        continue
                    if not self._usable(tier):
                        self._mark_dirty(tier, tenant, user_id)
                        continue
                    try:
                        applied.append((tier, tier.apply(tenant, user_id, tracking.change)))
                    except TierUnavailable as exc:
                        self._down(tier, exc)
                        self._mark_dirty(tier, tenant, user_id)
                self._remember_all(tracking.change.inserted)
        except BaseException:
            if body_done:  # the commit itself failed after the tiers saw the change: drop their copy
                for tier, _ in applied:
                    try:
                        tier.invalidate(tenant, user_id)
                    except TierUnavailable as exc:
                        self._down(tier, exc)
            raise
        for tier, token in applied:
            try:
                tier.committed(tenant, user_id, token)
            except TierUnavailable as exc:
                self._down(tier, exc)
                self._mark_dirty(tier, tenant, user_id)

    def soft_delete(self, tenant: str, user_id: str, at: float, *, keys: Sequence[str] | None = None,
                    created_from: float | None = None, created_until: float | None = None,
                    audit: AuditEvent | None = None, announce: Announce | None = None,
                    ids: Sequence[str] | None = None) -> list[str]:
        """Soft-delete in the store of record, then erase the tiers' copies.

        A tier that cannot be reached does not fail this call: the user is marked dirty (no read uses
        that tier for the user until it is reconciled) and the failure is kept for `erase_tiers`, which
        the erasure pipeline calls after deleting the user's documents and which raises it.
        """
        ids = self.record.soft_delete(tenant, user_id, at, keys=keys, created_from=created_from,
                                      created_until=created_until, audit=audit, announce=announce,
                                      ids=ids)
        by_key = keys if keys is not None and created_from is None and created_until is None and ids is None else None
        failed: dict[str, str] = {}
        for tier in self.tiers:
            try:
                tier.erase(tenant, user_id, by_key)
            except TierUnavailable as exc:
                self._down(tier, exc)
                self._mark_dirty(tier, tenant, user_id)
                failed[tier.name] = str(exc)
        pending = self._pending_erasures()
        pending[(tenant, user_id)] = failed
        with self._lock:
            for i in ids:
                self._seen.pop(i, None)
        return ids

    def _pending_erasures(self) -> dict[tuple[str, str], dict[str, str]]:
        pending = getattr(self._stash, "erasures", None)
        if pending is None:
            pending = self._stash.erasures = {}
        return pending

    def erase_tiers(self, tenant: str, user_id: str, keys: Sequence[str] | None = None) -> None:
        """The erasure pipeline's extra eraser: finish erasing the user's copies in every tier, or raise.

        Retries the tiers the preceding soft_delete could not reach (all tiers when called on its own);
        raises TierUnavailable naming the tiers still unreachable. Idempotent: a retry finishes the job.
        """
        failed = self._pending_erasures().pop((tenant, user_id), None)
        todo = self.tiers if failed is None else [t for t in self.tiers if t.name in failed]
        errors: list[str] = []
        for tier in todo:
            try:
                tier.erase(tenant, user_id, keys)
            except TierUnavailable as exc:
                self._down(tier, exc)
                self._mark_dirty(tier, tenant, user_id)
                errors.append(f"{tier.name} ({exc})")
        if errors:
            raise TierUnavailable(
                f"erasure incomplete: the store of record is erased for {user_id!r}, but tier "
                f"{', '.join(errors)} could not be erased. Reads no longer use that tier for this user; "
                "retry the call to finish the erasure.")

    def drop_local(self, tenant: str, user_id: str) -> int:
        """Drop what this process caches about the user in memory (events from other instances call this)."""
        n = 0
        for tier in self.tiers:
            drop = getattr(tier, "drop_local", None)
            if drop is not None:
                n += int(drop(tenant, user_id))
        return n

    def touch(self, tenant: str, ids: Sequence[str], *, used_at: float | None = None,
              confirmed_at: float | None = None) -> int:
        n = self.record.touch(tenant, ids, used_at=used_at, confirmed_at=confirmed_at)
        if not ids or (used_at is None and confirmed_at is None):
            return n
        with self._lock:
            known = {i: self._seen[i] for i in ids if i in self._seen}
        missing = [i for i in ids if i not in known]
        if missing:
            for r in self.record.get_many(tenant, missing):
                known[r.id] = (r.user_id, r.key, r.kind)
        for memory_id, (user, key, kind) in known.items():
            tier = self.route.get(kind)
            if tier is None or not self._usable(tier):
                if tier is not None:
                    self._mark_dirty(tier, tenant, user)
                continue
            stub = _stub(tenant, user, key, kind, memory_id)
            try:
                tier.touch(stub, used_at, confirmed_at)
            except TierUnavailable as exc:
                self._down(tier, exc)
                self._mark_dirty(tier, tenant, user)
        return n

    def purge(self, *, deleted_before: float, expired_before: float) -> int:
        # Tiers never serve deleted or expired rows (reads filter on `now`), and erasure already
        # removed deleted ones; purge is the store of record's business.
        return self.record.purge(deleted_before=deleted_before, expired_before=expired_before)

    def bulk_insert(self, records: Sequence[MemoryRecord]) -> None:
        self.record.bulk_insert(records)
        for tenant, user in sorted({(r.tenant, r.user_id) for r in records}):
            for tier in self.tiers:
                try:
                    tier.invalidate(tenant, user)
                except TierUnavailable as exc:
                    self._down(tier, exc)
                    self._mark_dirty(tier, tenant, user)

    def append_audit(self, event: AuditEvent) -> None:
        self.record.append_audit(event)

    # -- the store of record's SQL, for plug-ins and operators -----------------------------------------

    def sql(self, tenant: str | None = None, *, write: bool = False) -> AbstractContextManager[Any]:
        return self.record.sql(tenant, write=write)

    def analyze(self) -> None:
        self.record.analyze()

    def schema_version(self) -> int:
        return self.record.schema_version()

    # -- reads -------------------------------------------------------------------------------------

    def _remember_all(self, records: Sequence[MemoryRecord]) -> None:
        """id -> (user, key, kind) for touch(), which gets ids only; insertion-ordered, bounded."""
        seen = self._seen
        with self._lock:
            for r in records:
                if r.id not in seen:
                    seen[r.id] = (r.user_id, r.key, r.kind)
            while len(seen) > 100_000:
                seen.popitem(last=False)

    def _tier_records(self, tier: Tier, q: LiveQuery) -> list[MemoryRecord]:
        """Live records of the tier's kinds matching q: from the tier, else from the store of record."""
        kinds = [k for k in (q.kinds if q.kinds is not None else list(Kind)) if k in tier.kinds]
        cached = self._tier_all(tier, q)
        if cached is not None:
            return _matching(cached, q, kinds)
        self.stats["fallbacks"] += 1
        return self.record.live(replace(q, kinds=kinds))

    def _tier_all(self, tier: Tier, q: LiveQuery) -> list[MemoryRecord] | None:
        """Every current record (expired and retracted ones too) the tier holds for q's user, filling it from
        the store of record on a miss; None when the tier may not serve the user (down, or the user dirty)."""
        # A user marked dirty (a write of any instance skipped the tier) is served from the store of record
        # until reconciled, also by instances that checked the marks less than dirty_check_interval ago
        # (issue 12 item 7). One primary-key read of the marks per tier read.
        held = _TIER_READS.get()
        memo = held[1] if held is not None and held[0] is self else None
        if memo is not None and (tier.name, q.tenant, q.user_id) in memo:
            self.stats["hits"] += 1
            return memo[(tier.name, q.tenant, q.user_id)]
        if self._usable(tier) and not self._is_dirty(tier, q.tenant, q.user_id):
            try:
                cached, token = tier.read(q.tenant, q.user_id)
                if cached is None:
                    self.stats["misses"] += 1
                    # The fill is accepted only if no change reached the tier since `read` (its token), so
                    # the store of record must show every write committed before it: inside a read scope
                    # whose replica fence predates a write, a replica read could miss that write and the
                    # tier would keep the gap until the next change (seen in the cluster load test).
                    fresh_reads()
                    cached = self.record.live(LiveQuery(q.tenant, q.user_id, _EVERYTHING, kinds=sorted(tier.kinds),
                                                        include_retracted=True))
                    if not cached and not self._holds_anything(q.tenant, q.user_id):
                        pass  # erased or unknown: no `loaded` marker naming the user (issue 12 item 6)
                    elif tier.fill(q.tenant, q.user_id, cached, token):
                        self.stats["fills"] += 1
                else:
                    self.stats["hits"] += 1
                if memo is not None:
                    memo[(tier.name, q.tenant, q.user_id)] = cached
                return cached
            except TierUnavailable as exc:
                self._down(tier, exc)
        return None

    def _holds_anything(self, tenant: str, user_id: str) -> bool:
        """The store of record holds a live row of any kind for the user (an empty fill is worth caching)."""
        return bool(self.record.live_scores(LiveQuery(tenant, user_id, _EVERYTHING, include_retracted=True)))

    def _split(self, q: LiveQuery) -> tuple[list[Kind] | None, list[Tier]]:
        kinds = list(q.kinds) if q.kinds is not None else list(Kind)
        rest = [k for k in kinds if k not in self.route]
        tiers = [t for t in self.tiers if any(k in t.kinds for k in kinds)]
        return rest, tiers

    def live(self, q: LiveQuery) -> list[MemoryRecord]:
        rest, tiers = self._split(q)
        out = self.record.live(replace(q, kinds=rest)) if rest else []
        for tier in tiers:
            out.extend(self._tier_records(tier, q))
        self._remember_all(out)
        return out

    def _note_untiered(self, user_id: str, rows: Sequence[ScoreRow]) -> None:
        """Remember that the store of record's rows belong to no tier, so touch() need not ask it."""
        if not rows:
            return
        seen = self._seen
        with self._lock:
            for row in rows:
                if row.id not in seen:
                    seen[row.id] = (user_id, row.key, Kind(row.kind))
            while len(seen) > 100_000:
                seen.popitem(last=False)

    def live_scores(self, q: LiveQuery) -> list[ScoreRow]:
        rest, tiers = self._split(q)
        out = self.record.live_scores(replace(q, kinds=rest)) if rest else []
        self._note_untiered(q.user_id, out)
        stash: dict[str, MemoryRecord] = {}
        for tier in tiers:
            records = self._tier_records(tier, q)
            self._remember_all(records)
            for r in records:
                stash[r.id] = r
                out.append(ScoreRow(r.id, r.kind.value, r.key, r.confidence, r.importance, r.created_at,
                                    r.last_used_at, r.last_confirmed_at))
        held = getattr(self._stash, "records", None) if self._in_block() else None
        self._stash.records = {**held, **stash} if held else stash  # recall asks get_many for the winners next
        return out

    def ranked(self, q: LiveQuery, batches: Sequence[tuple[Kind, int, int]]) -> list[ScoreRow]:
        """See StoreCapabilities.ranked: the store of record's index for its kinds; a tier's kinds from the
        tier's records (the same ones live_scores serves), in descending rank_time (ties by id), sliced."""
        reader = self.record.capabilities.ranked
        assert reader is not None
        own = [b for b in batches if b[0] not in self.route]
        out = reader(q, own) if own else []
        self._note_untiered(q.user_id, out)
        stash: dict[str, MemoryRecord] = {}
        for tier in self.tiers:
            mine = [b for b in batches if b[0] in tier.kinds]
            if not mine:
                continue
            picked: list[MemoryRecord] = []
            cached = self._tier_all(tier, q)
            if cached is None:  # the store of record serves the tier's kinds: rank what it returns
                self.stats["fallbacks"] += 1
                records = self.record.live(replace(q, kinds=[b[0] for b in mine], keys=None))
                self._remember_all(records)
                for kind, limit, offset in mine:
                    picked += _rank(kind, [r for r in records if r.kind is kind])[offset:offset + limit]
            else:
                orders = self._rank_orders(tier, q.tenant, q.user_id, cached)
                wanted = replace(q, keys=None)
                for kind, limit, offset in mine:
                    picked += _first_matching(orders.get(kind, ()), wanted, offset, limit)
            for r in picked:
                stash[r.id] = r
                out.append(ScoreRow(r.id, r.kind.value, r.key, r.confidence, r.importance, r.created_at,
                                    r.last_used_at, r.last_confirmed_at))
        held = getattr(self._stash, "records", None) if self._in_block() else None
        self._stash.records = {**held, **stash} if held else stash  # the recall path asks get_many next
        return out

    def _rank_orders(self, tier: Tier, tenant: str, user_id: str,
                     cached: list[MemoryRecord]) -> dict[Kind, list[MemoryRecord]]:
        """The tier's records of the user (all of them, `_tier_all`) per kind in descending rank_time, ties by
        id. The order depends on the records only (rank_time does not depend on `now`), so it is kept per user
        and reused while the tier serves the identical (immutable) record objects again, as RedisTier's near
        cache does; any other list (a change, a fresh decode) is remembered for touch() and sorted anew."""
        memo_key = (tier.name, tenant, user_id)
        with self._lock:
            hit = self._ranks.get(memo_key)
        if hit is not None and len(hit[0]) == len(cached) and all(map(operator.is_, hit[0], cached)):
            return hit[1]
        self._remember_all(cached)
        orders = {kind: _rank(kind, [r for r in cached if r.kind is kind]) for kind in {r.kind for r in cached}}
        with self._lock:
            self._ranks[memo_key] = (tuple(cached), orders)
            self._ranks.move_to_end(memo_key)
            while len(self._ranks) > _RANK_MEMO:
                self._ranks.popitem(last=False)
        return orders

    def _in_block(self) -> bool:
        held = _TIER_READS.get()
        return held is not None and held[0] is self

    @contextmanager
    def read_ahead(self, reads: Sequence[ReadAhead]) -> Iterator[None]:
        """See base.ReadAheadRunner: the store of record's parts of `reads` (and the tiers' dirty marks of
        their users) in one round trip of the store of record; each tier is read once per user in the block."""
        runner = self.record.capabilities.read_ahead
        assert runner is not None
        mine: list[ReadAhead] = []
        users: set[tuple[str, str]] = set()
        for read in reads:
            if read.method in ("list_docs", "sql"):
                mine.append(read)
                continue
            q = read.args[0]
            if read.method == "ranked":
                own = [b for b in read.args[1] if b[0] not in self.route]
                if own:
                    mine.append(ReadAhead("ranked", (q, own)))
                if len(own) < len(read.args[1]):
                    users.add((q.tenant, q.user_id))
            else:
                rest, tiers = self._split(q)
                if rest:
                    mine.append(ReadAhead(read.method, (replace(q, kinds=rest),)))
                if tiers:
                    users.add((q.tenant, q.user_id))
        for tenant, user_id in sorted(users):
            key = json.dumps([tenant, user_id], ensure_ascii=False)
            mine += [ReadAhead("get_doc", (DIRTY_TENANT, self._ns(t), key)) for t in self.tiers]
        token = _TIER_READS.set((self, {})) if _TIER_READS.get() is None else None
        try:
            with runner(mine):
                yield
        finally:
            if token is not None:
                _TIER_READS.reset(token)
            self._stash.records = None

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        stash: dict[str, MemoryRecord] = getattr(self._stash, "records", None) or {}
        if not self._in_block():  # inside a read_ahead block the stash lasts until its end
            self._stash.records = None
        found = {i: stash[i] for i in ids if i in stash and stash[i].tenant == tenant}
        missing = [i for i in ids if i not in found]
        if missing:
            for r in self.record.get_many(tenant, missing):
                found[r.id] = r
        return [found[i] for i in ids if i in found]

    def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        return self.record.get(tenant, memory_id)

    def history(self, tenant: str, user_id: str, key: str) -> list[MemoryRecord]:
        return self.record.history(tenant, user_id, key)

    def by_change_set(self, tenant: str, change_set_id: str) -> list[MemoryRecord]:
        return self.record.by_change_set(tenant, change_set_id)

    def audit_log(self, q: AuditQuery) -> list[AuditEvent]:
        return self.record.audit_log(q)

    # -- documents and the rest: the store of record's ----------------------------------------------

    def put_doc(self, tenant: str, namespace: str, key: str, value: dict[str, Any], *, now: float,
                user_id: str | None = None, expires_at: float | None = None) -> None:
        self.record.put_doc(tenant, namespace, key, value, now=now, user_id=user_id, expires_at=expires_at)

    def get_doc(self, tenant: str, namespace: str, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        return self.record.get_doc(tenant, namespace, key, now=now)

    def list_docs(self, tenant: str, namespace: str, *, user_id: str | None = None, now: float | None = None,
                  limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        return self.record.list_docs(tenant, namespace, user_id=user_id, now=now, limit=limit)

    def delete_doc(self, tenant: str, namespace: str, key: str) -> bool:
        return self.record.delete_doc(tenant, namespace, key)

    def delete_user_docs(self, tenant: str, user_id: str) -> int:
        return self.record.delete_user_docs(tenant, user_id)

    def users(self, tenant: str, limit: int = 1000, *, prefix: str | None = None,
              after: str | None = None) -> list[str]:
        return self.record.users(tenant, limit, prefix=prefix, after=after)

    def count(self, tenant: str | None = None) -> int:
        return self.record.count(tenant)

    def ping(self) -> None:
        """The store of record must answer; a tier that does not only degrades (see tier_status)."""
        self.record.ping()
        for tier in self.tiers:
            self._usable(tier)

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()
        self.record.close()

    def __getattr__(self, name: str) -> Any:  # backend extras (schema_version, vacuum, path...)
        if name == "record":
            raise AttributeError(name)
        return getattr(self.record, name)


def _rank(kind: Kind, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """`records` (all of `kind`) best first: descending rank_time, ties by id (the rank index's order)."""
    tau = time_constant(KIND_REGISTRY[kind].half_life_seconds)
    keyed = sorted(((-rank_time(r.confidence, r.importance, tau, r.created_at, r.last_confirmed_at, r.last_used_at),
                     r.id, r) for r in records), key=lambda t: (t[0], t[1]))
    return [t[2] for t in keyed]


def _first_matching(order: Sequence[MemoryRecord], q: LiveQuery, offset: int, limit: int) -> list[MemoryRecord]:
    """Records `offset` to `offset + limit` of those in `order` that q asks for (`_asked_for`, kinds aside):
    the walk stops once it has them, so a recall reads a few records, not the user's all."""
    out: list[MemoryRecord] = []
    if limit <= 0:
        return out
    asked = _asked_for(q)
    for r in order:
        if asked(r):
            if offset > 0:
                offset -= 1
                continue
            out.append(r)
            if len(out) == limit:
                break
    return out


def _asked_for(q: LiveQuery) -> Callable[[MemoryRecord], bool]:
    """Whether q asks for a record, kinds aside: current, not expired at q.now, not retracted (unless
    q.include_retracted), of q.keys and q.session_id when given."""
    keys = None if q.keys is None else set(q.keys)
    now, retracted, session = q.now, q.include_retracted, q.session_id

    def asked(r: MemoryRecord) -> bool:
        return (r.superseded_by is None and r.deleted_at is None and (r.expires_at is None or r.expires_at > now)
                and (retracted or not r.retracted) and (keys is None or r.key in keys)
                and (session is None or r.session_id == session))
    return asked


def _matching(records: Sequence[MemoryRecord], q: LiveQuery, kinds: Sequence[Kind]) -> list[MemoryRecord]:
    """The records of `records` that q asks for: of `kinds`, current, not expired at q.now, not retracted
    (unless q.include_retracted), of q.keys and q.session_id when given."""
    wanted, asked = set(kinds), _asked_for(q)
    return [r for r in records if r.kind in wanted and asked(r)]


def _stub(tenant: str, user_id: str, key: str, kind: Kind, memory_id: str) -> MemoryRecord:
    from usermem.model import Source

    return MemoryRecord(memory_id, tenant, user_id, kind, key, None, Source.SYSTEM, 1.0, 1.0, 0.0)
