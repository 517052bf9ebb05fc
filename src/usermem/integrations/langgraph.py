"""LangGraph long-term memory on usermem: `UsermemStore(memory)` is a `langgraph.store.base.BaseStore`.

    from langgraph.graph import StateGraph
    from usermem import Memory
    from usermem.integrations.langgraph import UsermemStore

    store = UsermemStore(Memory("sqlite:///data/usermem.db"), tenant="acme")
    graph = builder.compile(store=store)  # nodes get `store` and call store.put / search / get

How namespaces map onto usermem:

- the **tenant** is the store's (`tenant=`), never part of a namespace;
- the first label is the **user**: `("alice", ...)`;
- a second label naming a usermem kind (`fact`, `preference`, `situation`, `episode`, `context`) is the
  **kind**; otherwise the kind is `default_kind` (`fact`);
- `("alice", "preference")` + key `"reply_length"` is usermem's own memory `reply_length` of alice (the same
  one `Memory.recall`, the REST API and MCP see, with its field contract). Any other namespace or key (deeper
  paths, keys outside `[a-z0-9_-]`) is stored under a derived key `lg.<digest>`.

Each item is a usermem memory (the value dict is the memory's value), written with `Memory.write` — so the
PII and injection guards, source priority, version history, audit and erasure apply (a refused write raises
`usermem.errors.ValidationError` with the reason). An index document per item (tenant document store,
owned by the user, so `forget_user` erases it) keeps the LangGraph namespace, key, creation time and TTL.

`search(query=...)` is usermem's hybrid recall (meaning + words) over the users the prefix names; `search`
without a query lists items, newest first, with LangGraph's `filter` operators (`$eq`, `$ne`, `$gt`,
`$gte`, `$lt`, `$lte`). TTLs are in minutes (LangGraph's unit); reads refresh them when `refresh_ttl` (or
`ttl={"refresh_on_read": True}`, the default) says so; an expired item reads as absent and is forgotten.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
    )
except ImportError as exc:  # pragma: no cover - the optional extra is not installed
    raise ImportError(f"usermem.integrations.langgraph needs the langgraph extra: pip install 'usermem[langgraph]' ({exc})") from exc

from usermem.engine.memory import Memory
from usermem.errors import ValidationError
from usermem.model import Kind, MemoryRecord
from usermem.model import Op as WriteOp

INDEX_NS = "langgraph_items"  # the tenant document namespace of the item index
_PART = re.compile(r"^[a-z0-9_\-]{1,64}$")
_KINDS = {k.value for k in Kind}


@dataclass(frozen=True)
class _Entry:
    """One item's index document."""

    namespace: tuple[str, ...]
    key: str
    user_id: str
    memory_key: str
    kind: str
    created_at: float
    updated_at: float
    ttl_minutes: float | None = None
    expires_at: float | None = None
    indexed: bool = True  # False: put with index=False, left out of query search (listing still shows it)

    def to_doc(self) -> dict[str, Any]:
        return {"namespace": list(self.namespace), "key": self.key, "memory_key": self.memory_key,
                "kind": self.kind, "created_at": self.created_at, "updated_at": self.updated_at,
                "ttl_minutes": self.ttl_minutes, "expires_at": self.expires_at, "indexed": self.indexed}

    @classmethod
    def from_doc(cls, user_id: str, doc: Mapping[str, Any]) -> _Entry:
        return cls(namespace=tuple(doc["namespace"]), key=str(doc["key"]), user_id=user_id,
                   memory_key=str(doc["memory_key"]), kind=str(doc["kind"]), created_at=float(doc["created_at"]),
                   updated_at=float(doc["updated_at"]), ttl_minutes=doc.get("ttl_minutes"),
                   expires_at=doc.get("expires_at"), indexed=bool(doc.get("indexed", True)))


def memory_key(namespace: tuple[str, ...], key: str) -> str:
    """The usermem key of a LangGraph item: the key itself for the native layout `(user, kind)`, else a
    digest of the whole path (`lg.<24 hex>`)."""
    if len(namespace) == 2 and namespace[1] in _KINDS and _PART.match(key) and not key.startswith("lg."):
        return key
    digest = hashlib.blake2b(json.dumps([list(namespace), key]).encode(), digest_size=12).hexdigest()
    return f"lg.{digest}"


def kind_of(namespace: tuple[str, ...], default: str) -> str:
    return namespace[1] if len(namespace) > 1 and namespace[1] in _KINDS else default


class UsermemStore(BaseStore):
    """A LangGraph `BaseStore` backed by a usermem `Memory` (see the module docstring for the mapping)."""

    supports_ttl: bool = True

    def __init__(self, memory: Memory, *, tenant: str = "default", source: str = "agent_confirmed",
                 default_kind: str = "fact", ttl: TTLConfig | None = None, actor: str = "langgraph",
                 clock: Callable[[], float] | None = None) -> None:
        if default_kind not in _KINDS:
            raise ValidationError(f"default_kind must be one of {sorted(_KINDS)}, got {default_kind!r}",
                                  field="default_kind")
        self.memory = memory
        self.tenant = tenant
        self.source = source
        self.default_kind = default_kind
        self.ttl_config = ttl
        self.actor = actor
        self._clock = clock or time.time
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usermem-langgraph")

    # -- the one primitive ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        now = self._clock()
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op, now))
            elif isinstance(op, SearchOp):
                results.append(self._search(op, now))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op, now))
            elif isinstance(op, PutOp):
                self._put(op, now)
                results.append(None)
            else:
                raise ValidationError(f"unknown store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # One worker thread: concurrent aput/adelete/aget calls run in the order they were made.
        return await asyncio.get_running_loop().run_in_executor(self._worker, self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Forget every expired item now (reads already treat them as absent); returns how many."""
        now = self._clock()
        expired = [e for e in self._entries(None) if e.expires_at is not None and e.expires_at <= now]
        for e in expired:
            self._drop(e, now)
        return len(expired)

    # -- operations ----------------------------------------------------------------------------------

    def _put(self, op: PutOp, now: float) -> None:
        _check_namespace(op.namespace)
        if not op.namespace:
            raise ValidationError("namespace cannot be empty: its first label is the user", field="namespace")
        user = op.namespace[0]
        mk = memory_key(op.namespace, op.key)
        old = self._entry(user, mk)
        if op.value is None:
            if old is not None:
                self._drop(old, now)
            else:
                self.memory.forget(self.tenant, user, mk, now=now, actor=self.actor)
            return
        kind = kind_of(op.namespace, self.default_kind)
        r = self.memory.write(self.tenant, user, kind, mk, dict(op.value), source=self.source, now=now,
                              actor=self.actor)
        if r.op is WriteOp.REJECT:
            raise ValidationError(f"usermem refused the item {op.key!r}: {r.reason.value if r.reason else ''}"
                                  f"{': ' + r.detail if r.detail else ''}", field="value")
        ttl = op.ttl if op.ttl is not None else self._default_ttl()
        created = old.created_at if old is not None and old.namespace == op.namespace else now
        entry = _Entry(op.namespace, op.key, user, mk, kind, created, now, ttl,
                       None if ttl is None else now + ttl * 60.0, indexed=op.index is not False)
        self.memory.store.put_doc(self.tenant, INDEX_NS, _doc_key(user, mk), entry.to_doc(), now=now,
                                  user_id=user)

    def _get(self, op: GetOp, now: float) -> Item | None:
        if not op.namespace:
            return None
        user = op.namespace[0]
        entry = self._live_entry(user, memory_key(op.namespace, op.key), now)
        if entry is None or entry.namespace != tuple(op.namespace) or entry.key != op.key:
            return None
        record = self._current(entry, now)
        if record is None:
            return None
        self._refresh(entry, op.refresh_ttl, now)
        return Item(value=_as_dict(record.value), key=entry.key, namespace=entry.namespace,
                    created_at=_dt(entry.created_at), updated_at=_dt(record.created_at))

    def _search(self, op: SearchOp, now: float) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        entries = [e for e in self._entries(prefix[0] if prefix else None)
                   if e.namespace[:len(prefix)] == prefix and not _expired(e, now)]
        out: list[tuple[SearchItem, _Entry]] = []
        if op.query:
            by_key = {(e.user_id, e.memory_key): e for e in entries if e.indexed}
            users = sorted({e.user_id for e in entries})
            want = op.offset + op.limit
            for user in users:
                for s in self.memory.recall_scored(self.tenant, user, max(want * 4, 50), query=op.query, now=now,
                                                   actor=self.actor):
                    e = by_key.get((user, s.memory.key))
                    if e is None or not _matches(s.memory.value, op.filter):
                        continue
                    out.append((_search_item(e, s.memory, s.relevance if s.relevance is not None else s.score),
                                e))
            out.sort(key=lambda p: -(p[0].score or 0.0))
        else:
            for e in sorted(entries, key=lambda e: -e.updated_at):
                record = self._current(e, now)
                if record is not None and _matches(record.value, op.filter):
                    out.append((_search_item(e, record, None), e))
        page = out[op.offset:op.offset + op.limit]
        for _, e in page:
            self._refresh(e, op.refresh_ttl, now)
        return [item for item, _ in page]

    def _list_namespaces(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        user = None
        for c in conditions:
            if c.match_type == "prefix" and c.path and c.path[0] != "*":
                user = c.path[0]
        found: set[tuple[str, ...]] = set()
        for e in self._entries(user):
            if _expired(e, now) or not all(_path_matches(e.namespace, c) for c in conditions):
                continue
            found.add(e.namespace[:op.max_depth] if op.max_depth is not None else e.namespace)
        return sorted(found)[op.offset:op.offset + op.limit]

    # -- helpers -------------------------------------------------------------------------------------

    def _default_ttl(self) -> float | None:
        return self.ttl_config.get("default_ttl") if self.ttl_config else None

    def _refresh(self, entry: _Entry, refresh: bool, now: float) -> None:
        if entry.ttl_minutes is None:
            return
        if self.ttl_config is not None and not self.ttl_config.get("refresh_on_read", True):
            refresh = False
        if refresh:
            doc = dict(entry.to_doc(), expires_at=now + entry.ttl_minutes * 60.0)
            self.memory.store.put_doc(self.tenant, INDEX_NS, _doc_key(entry.user_id, entry.memory_key), doc,
                                      now=now, user_id=entry.user_id)

    def _entry(self, user: str, mk: str) -> _Entry | None:
        doc = self.memory.store.get_doc(self.tenant, INDEX_NS, _doc_key(user, mk))
        return None if doc is None else _Entry.from_doc(user, doc)

    def _live_entry(self, user: str, mk: str, now: float) -> _Entry | None:
        e = self._entry(user, mk)
        if e is not None and _expired(e, now):
            self._drop(e, now)
            return None
        return e

    def _entries(self, user: str | None) -> list[_Entry]:
        rows = self.memory.store.list_docs(self.tenant, INDEX_NS, user_id=user, limit=100_000)
        return [_Entry.from_doc(_user_of(k), d) for k, d in rows]

    def _current(self, entry: _Entry, now: float) -> MemoryRecord | None:
        for r in reversed(self.memory.history(self.tenant, entry.user_id, entry.memory_key, actor=self.actor,
                                              now=now)):
            if r.is_current and not r.retracted and r.deleted_at is None and r.is_live(now):
                return r
        return None

    def _drop(self, entry: _Entry, now: float) -> None:
        self.memory.forget(self.tenant, entry.user_id, entry.memory_key, now=now, actor=self.actor)
        self.memory.store.delete_doc(self.tenant, INDEX_NS, _doc_key(entry.user_id, entry.memory_key))


def _doc_key(user: str, mk: str) -> str:
    return f"{mk}@{user}"  # a memory key never contains "@", so the first "@" splits it


def _user_of(doc_key: str) -> str:
    return doc_key.split("@", 1)[1]


def _expired(e: _Entry, now: float) -> bool:
    return e.expires_at is not None and e.expires_at <= now


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {"value": value}


def _search_item(e: _Entry, r: MemoryRecord, score: float | None) -> SearchItem:
    return SearchItem(namespace=e.namespace, key=e.key, value=_as_dict(r.value), created_at=_dt(e.created_at),
                      updated_at=_dt(r.created_at), score=score)


def _check_namespace(namespace: tuple[str, ...]) -> None:
    from langgraph.store.base import InvalidNamespaceError

    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"invalid namespace label {label!r} in {namespace}")


def _path_matches(namespace: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(namespace):
        return False
    part = namespace[:len(path)] if cond.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _matches(value: Any, flt: Mapping[str, Any] | None) -> bool:
    if not flt:
        return True
    doc = _as_dict(value)
    return all(_compare(_lookup(doc, k), v) for k, v in flt.items())


def _lookup(doc: Mapping[str, Any], key: str) -> Any:
    if key in doc:
        return doc[key]
    cur: Any = doc
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: bool(a == b), "$ne": lambda a, b: bool(a != b), "$gt": lambda a, b: bool(a > b),
    "$gte": lambda a, b: bool(a >= b), "$lt": lambda a, b: bool(a < b), "$lte": lambda a, b: bool(a <= b),
}


def _compare(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping) and expected and all(str(k).startswith("$") for k in expected):
        try:
            return all(_OPS[op](actual, want) for op, want in expected.items())
        except KeyError as exc:
            raise ValidationError(f"unsupported filter operator {exc.args[0]!r} (use $eq, $ne, $gt, $gte, $lt, "
                                  "$lte)", field="filter") from None
        except TypeError:
            return False
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(_compare(actual.get(k), v) for k, v in expected.items())
    return bool(actual == expected)
