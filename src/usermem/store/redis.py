"""Serving tiers for kinds routed away from the store of record: Redis, and an in-process session tier.

Design (docs/storage.md has the full argument): **every memory lives in the store of record**
(PostgreSQL or SQLite), versions, audit and all. A tier is a *cache in front of it* for the kinds
routed to it (preference and context in the `tiered` preset). Nothing is acknowledged from a tier
alone, so losing Redis loses no memory; a cold or restarted Redis is refilled from the store of
record on the next read of each user.

Redis layout, all keys of one user under one prefix with a hash tag, so that erasure finds them with
SCAN and a Redis Cluster keeps them in one slot (multi-key transactions stay legal)::

    {prefix}:{<tenant>|<user>}:ver            version counter; every change increments it
    {prefix}:{<tenant>|<user>}:loaded         present when the user's cache is complete (value: fill token:nonce)
    {prefix}:{<tenant>|<user>}:fields         SET of the cached memory keys
    {prefix}:{<tenant>|<user>}:f:<key>        HASH: the current record of that memory field
    {prefix}:{<tenant>|<user>}:s:<session>    SET of context keys of that session

Consistency: a reader that misses reads `ver`, loads from the store of record and fills under
WATCH ver, so a fill that raced with any change is dropped. Writers apply their changes while still
holding the store of record's per-user lock (so applies happen in commit order), increment `ver`, and
after commit drop a fill made from a pre-commit snapshot. Anything unexpected invalidates the user.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from usermem.config import missing_extra
from usermem.config import redact_url as redact_url  # moved to usermem.config; re-exported here
from usermem.errors import ConfigError, TierUnavailable
from usermem.model import Kind, MemoryRecord, Source

_KINDS = {k.value: k for k in Kind}
# How long the counter of an erased user outlives the erasure (fences fills that were in flight).
FENCE_SECONDS = 60
_SOURCES = {s.value: s for s in Source}
_FLOATS = ("confidence", "importance", "created_at", "expires_at", "last_used_at", "last_confirmed_at",
           "event_at")
_STRINGS = ("prev_version_id", "session_id", "client_id", "change_set_id", "actor")


@dataclass
class Change:
    """What one committed transaction did to one user's memories, for the tiers."""

    inserted: list[MemoryRecord] = field(default_factory=list)
    superseded: list[tuple[str, str]] = field(default_factory=list)

    def final_by_key(self) -> dict[str, MemoryRecord]:
        out: dict[str, MemoryRecord] = {}
        for r in self.inserted:
            out[r.key] = r
        return out


class Tier(Protocol):
    """A serving cache for some kinds. Every method may raise TierUnavailable (never anything else)."""

    name: str
    kinds: frozenset[Kind]

    def read(self, tenant: str, user_id: str) -> tuple[list[MemoryRecord] | None, Any]:
        """(current cached records of the user, fill token); records is None on a miss."""

    def fill(self, tenant: str, user_id: str, records: Sequence[MemoryRecord], token: Any) -> bool:
        """Cache the user's current records unless something changed since `token` was read."""

    def apply(self, tenant: str, user_id: str, change: Change) -> Any:
        """Write-through of a transaction about to commit (called under the user's lock); returns a token."""

    def committed(self, tenant: str, user_id: str, token: Any) -> None:
        """After commit: drop any fill made from a snapshot older than the change."""

    def invalidate(self, tenant: str, user_id: str) -> None: ...

    def touch(self, record: MemoryRecord, used_at: float | None, confirmed_at: float | None) -> None: ...

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        """Remove the user's cached data (all of it, or these keys); returns keys removed."""

    def ping(self) -> None: ...

    def close(self) -> None: ...


# -- record <-> hash -----------------------------------------------------------------------------------

def record_to_hash(r: MemoryRecord) -> dict[str, str]:
    h = {"id": r.id, "kind": r.kind.value, "key": r.key, "source": r.source.value,
         "value": json.dumps(r.value, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
         "retracted": "1" if r.retracted else "0"}
    if r.canonical is not None:
        h["canonical"] = json.dumps(r.canonical, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    for name in _FLOATS:
        v = getattr(r, name)
        if v is not None:
            h[name] = repr(float(v))
    for name in _STRINGS:
        v = getattr(r, name)
        if v is not None:
            h[name] = v
    return h


def record_from_hash(tenant: str, user_id: str, h: dict[str, str]) -> MemoryRecord:
    def f(name: str) -> float | None:
        v = h.get(name)
        return None if v is None else float(v)

    return MemoryRecord(
        id=h["id"], tenant=tenant, user_id=user_id, kind=_KINDS[h["kind"]], key=h["key"],
        value=json.loads(h["value"]), source=_SOURCES[h["source"]], confidence=float(h["confidence"]),
        importance=float(h["importance"]), created_at=float(h["created_at"]), expires_at=f("expires_at"),
        last_used_at=f("last_used_at"), last_confirmed_at=f("last_confirmed_at"),
        prev_version_id=h.get("prev_version_id"), session_id=h.get("session_id"), client_id=h.get("client_id"),
        event_at=f("event_at"), change_set_id=h.get("change_set_id"), actor=h.get("actor"),
        retracted=h.get("retracted") == "1",
        canonical=json.loads(h["canonical"]) if h.get("canonical") is not None else None,
    )


_TOUCH = """
redis.call('INCR', KEYS[2])
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
local n = 0
for i, name in ipairs({'last_used_at', 'last_confirmed_at'}) do
  local new = ARGV[i + 1]
  if new ~= '' then
    local cur = redis.call('HGET', KEYS[1], name)
    if (not cur) or tonumber(cur) < tonumber(new) then
      redis.call('HSET', KEYS[1], name, new)
      n = n + 1
    end
  end
end
return n
"""

# After commit: bump the counter (a fill that read it before now fails its WATCH) and drop a fill
# that was made between the write-through and the commit (it may hold a pre-commit snapshot).
_COMMITTED = """
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local loaded = redis.call('GET', KEYS[1])
if loaded and string.sub(loaded, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def cluster_seeds(url: str) -> list[tuple[str, int]]:
    """The seed nodes of `redis+cluster://[user:pass@]host:port[,host:port...]/db`: any one that answers is
    enough for the client to discover the cluster (so an instance starts while a listed node is down)."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    seeds = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep:
            host, port = part.strip(), "6379"
        if not host or not port.isdigit():
            raise ConfigError(f"Redis Cluster nodes must be host:port, got {part!r} in {redact_url(url)!r}",
                              setting="redis_url")
        seeds.append((host.strip("[]"), int(port)))
    return seeds


class RedisTier:
    """A Redis serving cache (write-through, rebuilt from the store of record on a miss)."""

    name = "redis"

    def __init__(self, url: str, kinds: Iterable[Kind], *, prefix: str = "usermem", cache_ttl: int = 86_400,
                 grace: int = 60, timeout: float = 0.5, near_users: int = 10_000) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:  # pragma: no cover - depends on installation
            raise missing_extra("redis", exc) from exc

        if "{" in prefix or "}" in prefix or not prefix:
            raise ConfigError(f"key prefix must be non-empty and without braces, got {prefix!r}", setting="key_prefix")
        self.url = url
        self.kinds = frozenset(kinds)
        self.prefix = prefix
        self.cache_ttl = int(cache_ttl)
        self.grace = int(grace)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._watch_error = redis.WatchError
        self.cluster = url.startswith(("redis+cluster://", "rediss+cluster://"))
        # redis.Redis or redis.cluster.RedisCluster: the same commands, but no common typed base class
        # (RedisCluster.pipeline is untyped), so the client is used through its duck-typed API.
        self.client: Any
        try:
            if self.cluster:  # Redis Cluster: keys of a user share one hash slot (docs/scaling.md)
                from redis.cluster import RedisCluster

                options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                                           "retry": Retry(NoBackoff(), 0), "decode_responses": True}
                seeds = cluster_seeds(url)
                if len(seeds) > 1:  # several seed nodes: the client starts while any one of them answers
                    from redis.cluster import ClusterNode

                    parts = urlsplit(url)
                    self.client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in seeds],  # type: ignore[no-untyped-call]
                                               username=unquote(parts.username) if parts.username else None,
                                               password=unquote(parts.password) if parts.password else None,
                                               ssl=url.startswith("rediss"), **options)
                else:
                    self.client = RedisCluster.from_url(url.replace("+cluster", "", 1), **options)
            else:
                self.client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                                   retry=Retry(NoBackoff(), 0), decode_responses=True)
        except (ValueError, *self._errors) as exc:
            raise ConfigError(f"cannot use Redis URL {redact_url(url)!r}: {exc}", setting="redis_url") from None
        # Near cache: the last decoded records per user, used only while the user's `ver` and `loaded`
        # in Redis are exactly what they were when decoded (every change moves `ver`).
        self.near_users = near_users
        self._near: OrderedDict[tuple[str, str], tuple[tuple[Any, Any], list[MemoryRecord]]] = OrderedDict()
        self._near_lock = threading.Lock()
        self._touch = self.client.register_script(_TOUCH)
        self._committed = self.client.register_script(_COMMITTED)

    # -- keys ------------------------------------------------------------------------------------------

    def user_prefix(self, tenant: str, user_id: str) -> str:
        """All keys of a user start with this; the braces make it the Redis Cluster hash tag."""
        return f"{self.prefix}:{{{_tag(tenant)}|{_tag(user_id)}}}"

    def _k(self, tenant: str, user_id: str) -> _Keys:
        return _Keys(self.user_prefix(tenant, user_id))

    def _fail(self, what: str, exc: BaseException) -> TierUnavailable:
        return TierUnavailable(f"redis tier ({redact_url(self.url)}) failed during {what}: {exc}")

    # -- reads -----------------------------------------------------------------------------------------

    def read(self, tenant: str, user_id: str) -> tuple[list[MemoryRecord] | None, Any]:
        k = self._k(tenant, user_id)
        u = (tenant, user_id)
        try:
            token, loaded = self.client.mget(k.ver, k.loaded)  # one command (both keys in the user's slot)
            if loaded is None:
                return None, token
            with self._near_lock:
                near = self._near.get(u)
            if near is not None and near[0] == (token, loaded):
                return list(near[1]), token  # Redis unchanged since this process decoded it
            with self.client.pipeline(transaction=True) as p:  # one consistent snapshot of the user
                p.get(k.ver)
                p.smembers(k.fields)
                token2, keys = p.execute()
            keys = sorted(keys)
            hashes: list[dict[str, str]] = []
            if keys:
                with self.client.pipeline(transaction=True) as p:
                    p.get(k.ver)
                    for key in keys:
                        p.hgetall(k.field(key))
                    token3, *hashes = p.execute()
            else:
                token3 = token2
        except self._errors as exc:
            raise self._fail("read", exc) from exc
        if any(not h for h in hashes):
            return None, token  # a hash expired or was evicted: treat the user as a miss
        try:
            records = [record_from_hash(tenant, user_id, h) for h in hashes]
        except (KeyError, ValueError):
            return None, token  # malformed entry: refill
        if token == token2 == token3:  # nothing changed while reading: remember the decoded records
            with self._near_lock:
                self._near[u] = ((token, loaded), records)
                self._near.move_to_end(u)
                while len(self._near) > self.near_users:
                    self._near.popitem(last=False)
        return list(records), token

    def fill(self, tenant: str, user_id: str, records: Sequence[MemoryRecord], token: Any) -> bool:
        k = self._k(tenant, user_id)
        try:
            with self.client.pipeline(transaction=True) as p:
                p.watch(k.ver, k.loaded)
                if p.get(k.ver) != token:
                    return False
                old = p.smembers(k.fields)
                p.multi()
                for key in old:
                    p.delete(k.field(key))
                p.delete(k.fields)
                for r in records:
                    self._put(p, k, r)
                if records:
                    p.sadd(k.fields, *[r.key for r in records])
                    p.expire(k.fields, self.cache_ttl)
                # "<fill token>:<nonce>": the nonce makes every fill distinct, so after Redis lost the
                # user's keys (restart, flush) and `ver` counts up again, a near-cache entry decoded
                # before can never match the new state (same ver and loaded by coincidence).
                p.set(k.loaded, f"{'0' if token is None else token}:{uuid.uuid4().hex[:16]}", ex=self.cache_ttl)
                p.execute()
                return True
        except self._watch_error:
            return False
        except self._errors as exc:
            raise self._fail("fill", exc) from exc

    def _put(self, p: Any, k: _Keys, r: MemoryRecord) -> None:
        fk = k.field(r.key)
        p.delete(fk)
        p.hset(fk, mapping=record_to_hash(r))
        ttl = self.cache_ttl
        if r.expires_at is not None:
            ttl = min(ttl, max(1, math.ceil(r.expires_at - r.created_at)) + self.grace)
        p.expire(fk, ttl)
        if r.session_id is not None:
            p.sadd(k.session(r.session_id), r.key)
            p.expire(k.session(r.session_id), self.cache_ttl)

    # -- writes ----------------------------------------------------------------------------------------

    def apply(self, tenant: str, user_id: str, change: Change) -> Any:
        k = self._k(tenant, user_id)
        final = change.final_by_key()
        gone = {old for old, _ in change.superseded}
        try:
            with self.client.pipeline(transaction=True) as p:
                p.watch(k.ver, k.loaded, *[k.field(key) for key in final])
                loaded = p.get(k.loaded)
                consistent = loaded is not None
                if consistent:
                    for key, r in final.items():
                        cur = p.hget(k.field(key), "id")
                        if cur is not None and cur != r.id and cur not in gone:
                            consistent = False  # the cache holds a version this change did not replace
                            break
                p.multi()
                p.incr(k.ver)
                p.expire(k.ver, 2 * self.cache_ttl)
                if not consistent:
                    p.delete(k.loaded)
                else:
                    for key, r in final.items():
                        if r.kind in self.kinds:
                            self._put(p, k, r)
                            p.sadd(k.fields, key)
                        else:  # the key moved to a kind this tier does not hold
                            p.delete(k.field(key))
                            p.srem(k.fields, key)
                token = p.execute()[0]
                return token
        except self._watch_error:
            # Someone touched the user meanwhile: drop the cache — and return the counter's new value as the
            # token, so that committed() also drops a fill made from a pre-commit snapshot between this
            # invalidation and the commit (returning no token left such a fill in place: a lost write).
            return self._invalidate(tenant, user_id)
        except self._errors as exc:
            raise self._fail("write-through", exc) from exc

    def committed(self, tenant: str, user_id: str, token: Any) -> None:
        if token is None:
            return
        k = self._k(tenant, user_id)
        try:
            self._committed(keys=[k.loaded, k.ver], args=[str(token), 2 * self.cache_ttl])
        except self._errors as exc:
            raise self._fail("post-commit", exc) from exc

    def drop_local(self, tenant: str, user_id: str) -> int:
        """Forget this process's decoded copy of the user (near cache); Redis itself is untouched.

        Called when another instance reports a change or an erasure of the user (docs/events.md): a
        near entry is never served once Redis changed, but its values should not stay in memory either.
        """
        with self._near_lock:
            return 0 if self._near.pop((tenant, user_id), None) is None else 1

    def invalidate(self, tenant: str, user_id: str) -> None:
        self._invalidate(tenant, user_id)

    def _invalidate(self, tenant: str, user_id: str) -> Any:
        """Bump the counter and drop the `loaded` marker; returns the counter's new value."""
        k = self._k(tenant, user_id)
        try:
            with self.client.pipeline(transaction=True) as p:
                p.incr(k.ver)
                p.delete(k.loaded)
                return p.execute()[0]
        except self._errors as exc:
            raise self._fail("invalidate", exc) from exc

    def touch(self, record: MemoryRecord, used_at: float | None, confirmed_at: float | None) -> None:
        k = self._k(record.tenant, record.user_id)
        try:
            self._touch(keys=[k.field(record.key), k.ver],
                        args=[record.id, "" if used_at is None else repr(float(used_at)),
                              "" if confirmed_at is None else repr(float(confirmed_at))])
        except self._errors as exc:
            raise self._fail("touch", exc) from exc

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        """Delete the user's keys: by name from the index sets, then a SCAN sweep of the user's prefix."""
        k = self._k(tenant, user_id)
        self.drop_local(tenant, user_id)
        try:
            if keys is not None:
                with self.client.pipeline(transaction=True) as p:
                    p.incr(k.ver)
                    for key in keys:
                        p.delete(k.field(key))
                    if keys:
                        p.srem(k.fields, *keys)
                    res = p.execute()
                return int(sum(res[1:1 + len(keys)]))
            n = 0
            with self.client.pipeline(transaction=True) as p:
                p.incr(k.ver)
                p.delete(k.loaded)
                p.execute()
            names = [k.field(key) for key in self.client.smembers(k.fields)]
            names += [k.fields, k.loaded]
            if names:
                n += int(self.client.unlink(*names))
            batch: list[str] = []
            for name in self._scan_user(k):
                if name != k.ver:
                    batch.append(name)
                if len(batch) >= 500:
                    n += int(self.client.unlink(*batch))
                    batch = []
            if batch:
                n += int(self.client.unlink(*batch))
            # The counter goes last, set to a value no fill token can equal, so a fill in flight can
            # never succeed afterwards. It holds no data and expires after FENCE_SECONDS.
            self.client.set(k.ver, str(uuid.uuid4().int >> 68), ex=FENCE_SECONDS)
            return n
        except self._errors as exc:
            raise self._fail("erase", exc) from exc

    def drop_prefix(self) -> int:
        """Delete every key under this tier's prefix (SCAN + UNLINK); for operators and benchmarks."""
        n = 0
        try:
            batch: list[str] = []
            for name in self.client.scan_iter(match=_glob_escape(self.prefix) + ":*", count=1000):
                batch.append(name)
                if len(batch) >= 500:
                    n += int(self.client.unlink(*batch))
                    batch = []
            if batch:
                n += int(self.client.unlink(*batch))
        except self._errors as exc:
            raise self._fail("drop_prefix", exc) from exc
        return n

    def _scan_user(self, k: _Keys) -> Iterable[str]:
        """SCAN for the user's keys; on a cluster only the node that owns the user's hash slot."""
        match = _glob_escape(k.prefix) + ":*"
        if self.cluster:
            node = self.client.get_node_from_key(k.ver)
            return self.client.scan_iter(match=match, count=1000, target_nodes=node)  # type: ignore[no-any-return]
        return self.client.scan_iter(match=match, count=1000)  # type: ignore[no-any-return]

    def keys_of(self, tenant: str, user_id: str) -> list[str]:
        """Every Redis key of the user (SCAN), for tests and operators."""
        k = self._k(tenant, user_id)
        try:
            return sorted(self._scan_user(k))
        except self._errors as exc:
            raise self._fail("scan", exc) from exc

    def ping(self) -> None:
        try:
            self.client.ping()
        except self._errors as exc:
            raise self._fail("ping", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self.client.close()


def _tag(s: str) -> str:
    """Escape what would break the hash tag or the pair separator."""
    return s.replace("%", "%25").replace("|", "%7C").replace("{", "%7B").replace("}", "%7D")


def _glob_escape(s: str) -> str:
    out = []
    for ch in s:
        out.append("\\" + ch if ch in "*?[]\\" else ch)
    return "".join(out)


@dataclass(frozen=True)
class _Keys:
    prefix: str

    @property
    def ver(self) -> str:
        return self.prefix + ":ver"

    @property
    def loaded(self) -> str:
        return self.prefix + ":loaded"

    @property
    def fields(self) -> str:
        return self.prefix + ":fields"

    def field(self, key: str) -> str:
        return f"{self.prefix}:f:{key}"

    def session(self, session_id: str) -> str:
        return f"{self.prefix}:s:{_tag(session_id)}"


class SessionTier:
    """In-process session tier: the same cache protocol held in a dict (one process only).

    For single-process deployments that want session context out of the database's read path
    without running Redis. Other processes do not see its state, so do not route kinds to it when
    several processes write the same users.
    """

    name = "session"

    def __init__(self, kinds: Iterable[Kind], *, max_users: int = 10_000) -> None:
        self.kinds = frozenset(kinds)
        self.max_users = max_users
        self._lock = threading.Lock()
        self._users: dict[tuple[str, str], dict[str, MemoryRecord]] = {}
        self._ver: dict[tuple[str, str], int] = {}
        self._filled: dict[tuple[str, str], int] = {}

    def read(self, tenant: str, user_id: str) -> tuple[list[MemoryRecord] | None, Any]:
        u = (tenant, user_id)
        with self._lock:
            cached = self._users.get(u)
            return (None if cached is None else [cached[k] for k in sorted(cached)]), self._ver.get(u, 0)

    def fill(self, tenant: str, user_id: str, records: Sequence[MemoryRecord], token: Any) -> bool:
        u = (tenant, user_id)
        with self._lock:
            if self._ver.get(u, 0) != token:
                return False
            if len(self._users) >= self.max_users:
                self._users.pop(next(iter(self._users)))
            self._users[u] = {r.key: r for r in records}
            self._filled[u] = token
            return True

    def apply(self, tenant: str, user_id: str, change: Change) -> Any:
        u = (tenant, user_id)
        gone = {old for old, _ in change.superseded}
        with self._lock:
            self._ver[u] = token = self._ver.get(u, 0) + 1
            cached = self._users.get(u)
            if cached is None:
                return token
            for key, r in change.final_by_key().items():
                cur = cached.get(key)
                if cur is not None and cur.id != r.id and cur.id not in gone:
                    self._users.pop(u, None)
                    return token
                if r.kind in self.kinds:
                    cached[key] = r
                else:
                    cached.pop(key, None)
            return token

    def committed(self, tenant: str, user_id: str, token: Any) -> None:
        u = (tenant, user_id)
        with self._lock:
            self._ver[u] = self._ver.get(u, 0) + 1
            if token is not None and self._filled.get(u) == token:
                self._users.pop(u, None)  # filled between write-through and commit: maybe pre-commit data

    def invalidate(self, tenant: str, user_id: str) -> None:
        u = (tenant, user_id)
        with self._lock:
            self._ver[u] = self._ver.get(u, 0) + 1
            self._users.pop(u, None)

    def touch(self, record: MemoryRecord, used_at: float | None, confirmed_at: float | None) -> None:
        u = (record.tenant, record.user_id)
        with self._lock:
            self._ver[u] = self._ver.get(u, 0) + 1
            cached = self._users.get(u)
            cur = cached.get(record.key) if cached else None
            if cached is None or cur is None or cur.id != record.id:
                return
            changes: dict[str, float] = {}
            if used_at is not None and (cur.last_used_at is None or cur.last_used_at < used_at):
                changes["last_used_at"] = used_at
            if confirmed_at is not None and (cur.last_confirmed_at is None or cur.last_confirmed_at < confirmed_at):
                changes["last_confirmed_at"] = confirmed_at
            if changes:
                cached[record.key] = cur.with_changes(**changes)

    def drop_local(self, tenant: str, user_id: str) -> int:
        """Another instance changed or erased the user: this process's copy may be stale, drop it."""
        u = (tenant, user_id)
        with self._lock:
            self._ver[u] = self._ver.get(u, 0) + 1
            return 0 if self._users.pop(u, None) is None else 1

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        u = (tenant, user_id)
        with self._lock:
            self._ver[u] = self._ver.get(u, 0) + 1
            cached = self._users.get(u)
            if cached is None:
                return 0
            if keys is None:
                self._users.pop(u, None)
                return len(cached)
            return sum(1 for key in keys if cached.pop(key, None) is not None)

    def ping(self) -> None:
        return None

    def close(self) -> None:
        with self._lock:
            self._users.clear()
