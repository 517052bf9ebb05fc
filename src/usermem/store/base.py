"""The storage protocol.

A backend offers a few primitives; the engine composes them into pipelines. Policy never lives
here: a backend does not know what a source is worth, which keys are forbidden or how weights
decay. It knows how to keep versions, find the current one under a lock, and delete for real.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from usermem.model import AuditEvent, Kind, MemoryRecord


@dataclass(frozen=True, slots=True)
class AuditQuery:
    tenant: str
    user_id: str | None = None
    action: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 100
    after_seq: int | None = None


@dataclass(frozen=True, slots=True)
class LiveQuery:
    """Which current memories of one user to fetch. Expiry is judged against `now`."""

    tenant: str
    user_id: str
    now: float
    kinds: Sequence[Kind] | None = None
    keys: Sequence[str] | None = None
    session_id: str | None = None
    include_retracted: bool = False


class ScoreRow(NamedTuple):
    """The columns the recall hot path scores on; full records are fetched only for the winners."""

    id: str
    kind: str
    key: str
    confidence: float
    importance: float
    created_at: float
    last_used_at: float | None
    last_confirmed_at: float | None


SCORE_COLUMNS = ScoreRow._fields


Dialect = Literal["sqlite", "postgres"]
VectorSupport = Literal["sqlite", "pgvector"]


class TierEraser(Protocol):
    """Finish erasing a user's copies in every serving tier, or raise TierUnavailable (idempotent)."""

    def __call__(self, tenant: str, user_id: str, keys: Sequence[str] | None = None) -> None: ...


class RankedReader(Protocol):
    """Read a user's live rows best first by policy.decay.rank_time, per kind, from an index: for each
    (kind, limit, offset) of `batches`, that kind's rows `offset`..`offset+limit` in descending rank_time.
    q.kinds and q.keys are not applied (see SqlDialect.ranked)."""

    def __call__(self, q: LiveQuery, batches: Sequence[tuple[Kind, int, int]]) -> list[ScoreRow]: ...


class ReadAhead(NamedTuple):
    """One read an operation is about to make (`StoreCapabilities.read_ahead`): the store method's name and
    the arguments it will be called with, positionally: list_docs (tenant, namespace, user_id, now, limit),
    live_scores (query,), ranked (query, batches), get_doc (tenant, namespace, key); or a plug-in's own read,
    sql (tenant, text, params), which it makes through `StoreCapabilities.sql_read`."""

    method: Literal["list_docs", "live_scores", "ranked", "get_doc", "sql"]
    args: tuple[Any, ...]


class ReadAheadRunner(Protocol):
    """Send `reads` to the database together (one round trip) and keep their results for the block: a call
    of the same method with the same arguments inside the block returns the kept result once, instead of
    asking again; `ranked` and `live_scores` reads also keep their rows' full records for `get_many` of those
    ids. A read the block does not make is dropped at its end; calls it did not announce read as usual. A
    block may open inside another (its reads go out together when it opens; a call finds what either holds)."""

    def __call__(self, reads: Sequence[ReadAhead]) -> AbstractContextManager[None]: ...


class SqlRead(Protocol):
    """One read-only statement of a plug-in on its own tables (`StoreCapabilities.dialect`'s placeholders),
    scoped to `tenant` like `store.sql(tenant)`: its rows. Inside a read_ahead block that announced it as
    ReadAhead("sql", (tenant, text, params)), the rows read there (once) instead of another round trip."""

    def __call__(self, tenant: str | None, text: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]: ...


class LocalDropper(Protocol):
    """Drop what this process caches in memory about a user; returns the entries dropped."""

    def __call__(self, tenant: str, user_id: str) -> int: ...


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One change event waiting in the transactional outbox: its id, bus subject and JSON payload."""

    event_id: str
    tenant: str
    user_id: str
    subject: str
    payload: str
    created_at: float
    seq: int = 0


@dataclass(frozen=True, slots=True)
class VersionStamp:
    """The hybrid-logical-clock stamp of one version (policy/hlc.py): the order conflicts are decided by.
    `hlc` is the clock's sortable text, `client_id` breaks ties, `origin` is the domain that wrote it,
    `event_id` the event that carried it."""

    memory_id: str
    hlc: str
    client_id: str
    origin: str
    event_id: str


@runtime_checkable
class WrappingTx(Protocol):
    """A transaction that wraps another (tiers, the engine's staging): `inner` is the wrapped one."""

    @property
    def inner(self) -> WriteTx: ...


class Outbox(Protocol):
    """The transactional outbox and the federation bookkeeping of a store (`capabilities.outbox`).

    The `tx` methods write or read inside a transaction opened with `Store.transaction` (or a wrapper of
    one), so they commit or roll back with the change. Storage only: which events exist, which remote
    events were applied and which stamp a version carries; the engine decides what they mean.
    """

    def add(self, tx: WriteTx, entry: OutboxEntry) -> None:
        """Queue an event in the same transaction as the change it announces."""

    def pending(self, limit: int = 256) -> list[OutboxEntry]:
        """Queued events, oldest first."""

    def remove(self, event_ids: Sequence[str]) -> int:
        """Drop events the bus acknowledged; returns how many were removed."""

    def discard_user(self, tenant: str, user_id: str, tx: WriteTx | None = None) -> int:
        """Drop a user's queued events (erasure: they may carry values); in `tx` when given."""

    def mark_applied(self, tx: WriteTx, tenant: str, event_id: str, at: float) -> bool:
        """Record a remote event as applied in `tx`; False when it already was (apply nothing then)."""

    def applied(self, tenant: str, event_ids: Sequence[str]) -> set[str]:
        """Which of `event_ids` were applied."""

    def stamp(self, tx: WriteTx, tenant: str, stamp: VersionStamp) -> None:
        """Keep the clock stamp of a version written in `tx`."""

    def stamps(self, tx: WriteTx, tenant: str, memory_ids: Sequence[str]) -> dict[str, VersionStamp]:
        """The stamps of these versions (those that have one)."""

    def max_hlc(self) -> str | None:
        """The highest clock value stamped in this store (a restarted clock never goes below it)."""


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What a store can do, declared by the store itself (callers never guess from class names).

    * ``dialect``: the SQL dialect `store.sql()` speaks — ``"sqlite"`` (``?`` placeholders, a
      ``sqlite3.Connection``), ``"postgres"`` (``%s`` placeholders, a ``psycopg.Connection``) — or None
      when the store has no SQL database (then `store.sql()` raises StoreError).
    * ``vectors``: where relevance vectors can be kept beside the memories — ``"sqlite"`` (the
      ``relevance_vectors`` table of the SQLite file, float32 BLOBs), ``"pgvector"`` (the same table with a
      pgvector ``vector`` column; only when the extension was available when the store migrated) — or None.
      The tables come from the store's migrations; `relevance.vectors.open_index` picks the index from this.
    * ``row_level_security``: PostgreSQL row-level security by tenant is on (``?rls=on``); `store.sql(tenant)`
      then sees only that tenant's rows (None = the maintenance scope ``*``).
    * ``tiers``: serving tiers (Redis, session) sit in front of the store of record, so some kinds'
      current records may be served from outside the SQL tables.
    * ``erase_tiers``: with tiers, the eraser the erasure pipeline must run after the store of record has
      erased a user (or some keys): it finishes erasing the tiers' copies or raises TierUnavailable.
    * ``drop_local``: with process-local caches, drops one user's entries (change events from other
      instances call it).
    * ``ranked``: reads a user's rows per kind in rank_time order from an index (the SQL stores, issue
      19), so recall(k) reads about k rows instead of all of the user's; None: recall scores every row.
    * ``outbox``: the transactional outbox and federation bookkeeping (`Outbox`, migration 0008), or None.
    * ``read_ahead``: sends the reads an operation is about to make in one round trip (`ReadAheadRunner`;
      PostgreSQL, pipelined); None: each read asks on its own (SQLite in-process, where a read is no trip).
    * ``sql_read``: with ``read_ahead``, how a plug-in makes a read it may announce to a read_ahead block
      (`SqlRead`: the vector index's generation check); None: plug-ins read through `store.sql()`.
    * ``serialised``: every call runs on one connection under one lock (the embedded SQLite store), so
      callers gain nothing by running store calls concurrently (e.g. in a thread pool).
    """

    dialect: Dialect | None = None
    vectors: VectorSupport | None = None
    row_level_security: bool = False
    tiers: bool = False
    erase_tiers: TierEraser | None = None
    drop_local: LocalDropper | None = None
    serialised: bool = False
    ranked: RankedReader | None = None
    outbox: Outbox | None = None
    read_ahead: ReadAheadRunner | None = None
    sql_read: SqlRead | None = None


class WriteTx(Protocol):
    """One transaction over one user's memories. Everything done through it commits or rolls back together."""

    def head(self, key: str) -> MemoryRecord | None:
        """The current version of `key` (not superseded, not deleted; possibly expired), locked for this tx."""

    def insert(self, record: MemoryRecord) -> None: ...

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        """Mark `old_id` as replaced by `new_id`. Refuses if `old_id` is not current (a lost race)."""

    def get(self, memory_id: str) -> MemoryRecord | None: ...

    def audit(self, event: AuditEvent) -> None: ...


# soft_delete's hook inside its transaction: (the transaction, the ids deleted) -> None.
Announce = Callable[["WriteTx", Sequence[str]], None]


@runtime_checkable
class Store(Protocol):
    """What every backend implements. One conformance suite (tests/conformance) runs on all of them."""

    url: str

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this store can do (see StoreCapabilities)."""

    def sql(self, tenant: str | None = None, *, write: bool = False) -> AbstractContextManager[Any]:
        """A DB-API connection of `capabilities.dialect` to the store of record, for plug-ins that keep
        their own (migrated) tables beside the memories, e.g. relevance vectors.

        ``write=True``: the block is one transaction (committed on success, rolled back on error; do not
        call commit yourself). ``write=False``: statements autocommit. `tenant` scopes PostgreSQL
        row-level security (None: the maintenance scope, every tenant). Raises StoreError without SQL.
        """

    def analyze(self) -> None:
        """Refresh the query planner's statistics (after bulk loads; benchmarks)."""

    def schema_version(self) -> int:
        """The highest schema migration applied (0 for stores without migrations)."""

    def bulk_insert(self, records: Sequence[MemoryRecord]) -> None:
        """Insert pre-validated current records in one transaction (benchmark fixtures, imports)."""

    def transaction(self, tenant: str, user_id: str) -> AbstractContextManager[WriteTx]: ...

    def append_audit(self, event: AuditEvent) -> None: ...

    def live(self, q: LiveQuery) -> list[MemoryRecord]: ...

    def live_scores(self, q: LiveQuery) -> list[ScoreRow]:
        """The same rows as live(q), only the scoring columns (the recall hot path)."""

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """Non-deleted records of this tenant by id, in the order of `ids` (missing ones skipped)."""

    def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """A record of this tenant by id, unless soft-deleted."""

    def history(self, tenant: str, user_id: str, key: str) -> list[MemoryRecord]:
        """Every non-deleted version of a key, oldest first."""

    def by_change_set(self, tenant: str, change_set_id: str) -> list[MemoryRecord]: ...

    def touch(
        self, tenant: str, ids: Sequence[str], *, used_at: float | None = None, confirmed_at: float | None = None
    ) -> int:
        """Set last_used_at / last_confirmed_at on records (they only move forward)."""

    def soft_delete(
        self,
        tenant: str,
        user_id: str,
        at: float,
        *,
        keys: Sequence[str] | None = None,
        created_from: float | None = None,
        created_until: float | None = None,
        audit: AuditEvent | None = None,
        announce: Announce | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Mark every matching version deleted (one transaction); returns the ids of all versions deleted.

        `audit`: an entry written in the same transaction, its detail completed with ``rows`` (the number
        of versions deleted), so an erasure is never committed without its audit entry.
        `announce`: called in the same transaction, after the rows are marked and before commit, with the
        transaction and the ids deleted — the engine writes the erasure's outbox event through it (stores
        with `capabilities.outbox`); raising rolls the erasure back.
        `ids`: only versions among these ids (federation applies a remote forget_range by the ids it erased)."""

    def purge(self, *, deleted_before: float, expired_before: float) -> int:
        """Physically remove soft-deleted and expired rows, and make their bytes unrecoverable."""

    def audit_log(self, q: AuditQuery) -> list[AuditEvent]: ...

    # -- documents: small JSON records the engine keeps beside memories (sessions, grants, keys...) --

    def put_doc(self, tenant: str, namespace: str, key: str, value: dict[str, Any], *, now: float,
                user_id: str | None = None, expires_at: float | None = None) -> None:
        """Insert or replace one document."""

    def get_doc(self, tenant: str, namespace: str, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        """The document, unless absent or expired at `now`."""

    def list_docs(self, tenant: str, namespace: str, *, user_id: str | None = None, now: float | None = None,
                  limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        """(key, value) pairs of a namespace, optionally one user's, ordered by key."""

    def delete_doc(self, tenant: str, namespace: str, key: str) -> bool: ...

    def delete_user_docs(self, tenant: str, user_id: str) -> int:
        """Delete every document of a user in every namespace (erasure)."""

    def users(self, tenant: str, limit: int = 1000, *, prefix: str | None = None,
              after: str | None = None) -> list[str]:
        """User ids with a stored memory, in code-point order: those after `after` (paging), starting with
        `prefix` (search)."""

    def count(self, tenant: str | None = None) -> int:
        """Rows stored (all versions, deleted included); for operators and benchmarks."""

    def ping(self) -> None:
        """Raise StoreError when the backend cannot answer."""

    def close(self) -> None: ...


def open_store(url: str | None, **options: object) -> Store:
    """Open a backend by URL: sqlite:///path, sqlite:// (private in-memory), postgresql://..."""
    from usermem.config import missing_extra
    from usermem.errors import ConfigError

    if url is None or url in ("", "sqlite://", "sqlite:///:memory:", ":memory:"):
        from usermem.store.sqlite import SQLiteStore

        return SQLiteStore(":memory:")
    if url.startswith("sqlite:///"):
        from usermem.store.sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite:///") :])
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from usermem.store.postgres import PostgresStore
        except ImportError as exc:  # pragma: no cover - depends on installation
            raise missing_extra("postgres", exc) from exc
        return PostgresStore(url, **options)  # type: ignore[arg-type]
    scheme = url.split(":", 1)[0]
    raise ConfigError(
        f"unknown store scheme {scheme!r} in {url!r}; use sqlite:///path/to/file.db or postgresql://user@host/db",
        setting="store_url",
    )


@dataclass
class ReadScope:
    """The reads of one operation (an HTTP request): a store with a read replica asks the primary for its
    WAL position once per scope instead of once per statement (store/postgres.py). `fence` is that position
    (None: not asked yet, or a write of this scope committed since, so the next read asks again)."""

    fence: int | None = None

    def refresh(self) -> None:
        """The next read must also see every write committed until now, not only those acknowledged before
        the scope began (a cache filled from that read, e.g. a serving tier, must not miss a write that
        committed in between: store/tiered.py)."""
        self.fence = None


def fresh_reads() -> None:
    """Within a read scope, make the next read see every write committed until now (ReadScope.refresh);
    outside a scope, every read does already."""
    scope = _READ_SCOPE.get()
    if scope is not None:
        scope.refresh()


_READ_SCOPE: ContextVar[ReadScope | None] = ContextVar("usermem_read_scope", default=None)


@contextmanager
def read_scope() -> Iterator[ReadScope]:
    """Group the reads of one operation (every write acknowledged before the scope began stays visible)."""
    scope = ReadScope()
    token = _READ_SCOPE.set(scope)
    try:
        yield scope
    finally:
        _READ_SCOPE.reset(token)


def current_read_scope() -> ReadScope | None:
    return _READ_SCOPE.get()


def chunked(items: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """[low, high) of the ids starting with `prefix`, in code-point order (the users() prefix search)."""
    return prefix, prefix + "\U0010ffff"
