"""PostgreSQL store of record: psycopg 3 with a connection pool, values as JSONB, versioned migrations.

Same semantics as the SQLite reference (store/sqlite.py):

* one transaction per write; the transaction of a user first takes a transaction-scoped advisory
  lock on (schema, tenant, user), so reading the head of a key and superseding it never interleave
  with another writer of that user, on any number of processes or hosts;
* every statement that row-locks more than one row of a user (writes, soft delete, touch, purge)
  takes that same lock first, so row-lock waits cannot form a cycle: no deadlocks;
* the partial unique index `memories_one_current` refuses a second current version of a key even
  if the code were wrong;
* soft delete marks rows; purge deletes them and runs VACUUM FULL, which rewrites the tables into
  new files, so the bytes of erased values leave the database files (the old files are unlinked);
* audit rows are append-only (a trigger refuses UPDATE, DELETE and TRUNCATE);
* optional row-level security by tenant (`?rls=on`).

URL options (stripped before connecting, everything else goes to libpq):
``schema=<name>`` use (and create) that schema instead of the connection's default,
``rls=on`` enable and use row-level security, ``pool_min``/``pool_max`` pool size,
``purge_vacuum=full|plain|none`` what purge runs after deleting (default full),
``read_replica=host:port`` a streaming replica of this database that serves reads (below).

Read replica (``read_replica=host:port``; same database, user and options, another server). Reads that
tolerate lag (`users`, `count`) go to the replica. Every other read must see every write acknowledged
before it began, on any instance (a user reads their own writes, also through another instance behind
a load balancer): it first asks the primary for its current WAL position (``pg_current_wal_lsn()``, a
cheap statement) and goes to the replica only when the replica has replayed that far
(``pg_last_wal_replay_lsn()``, remembered between reads since it only grows), else to the primary.
Inside ``store.base.read_scope()`` (the HTTP API opens one per request) the position is asked once,
at the scope's first read, and asked again after any write of the scope.
Writes always go to the primary. A replica that does not answer sends reads back to the primary
(counted in `replica_stats`); when the primary is down, reads fail like writes (promote the replica:
docs/runbook-failover.md).
"""

from __future__ import annotations

import json
import logging
import math
import operator
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import replace
from functools import lru_cache
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from usermem.config import redact_url
from usermem.errors import ConfigError, IntegrityError, StoreError, UsermemError
from usermem.model import AuditEvent, Kind, MemoryRecord
from usermem.store import migrations
from usermem.store.base import (
    Announce,
    AuditQuery,
    LiveQuery,
    ReadAhead,
    ScoreRow,
    StoreCapabilities,
    WriteTx,
    current_read_scope,
)
from usermem.store.outbox import SqlOutbox
from usermem.store.rows import (
    audit_from_row,
    audit_params,
    dumps_value,
    loads_value,
    record_params,
    record_with_value,
)
from usermem.store.sql import POSTGRES, record_layout, users_query

_Q = POSTGRES.stmt  # every fixed statement, built once (store/sql.py)
_GET_MANY = POSTGRES.get_many()
_TOUCH_USED, _TOUCH_CONFIRMED = POSTGRES.touch("last_used_at", None), POSTGRES.touch("last_confirmed_at", None)
_INSERT, _HEAD, _GET, _SUPERSEDE, _INSERT_AUDIT = (_Q["insert"], _Q["head"], _Q["get"], _Q["supersede"],
                                                   _Q["insert_audit"])
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TABLES = ("memories", "audit", "documents", "outbox", "applied_events", "version_clock")
_VECTOR_TABLES = ("relevance_vectors", "relevance_generation")  # migration 0004, where pgvector exists
log = logging.getLogger("usermem.store")
_T = TypeVar("_T")
_MISSING: Any = object()
_N_SCORE = len(ScoreRow._fields)
_AHEAD_RECORD = operator.itemgetter(*record_layout(POSTGRES))  # a read-ahead row -> the record's columns
_AHEAD_TENANT = record_layout(POSTGRES)[POSTGRES.columns.index("tenant")]


class _Ahead:
    """The results of one read_ahead block: by (statement, arguments), and the full rows of ranked and
    live_scores reads by id (shared with the block it opened in, if any: `outer`)."""

    __slots__ = ("outer", "records", "results", "store")

    def __init__(self, store: PostgresStore, outer: _Ahead | None) -> None:
        self.store = store
        self.outer = outer if outer is not None and outer.store is store else None
        self.results: dict[tuple[str, tuple[Any, ...]], Any] = {}
        self.records: dict[str, Sequence[Any]] = self.outer.records if self.outer is not None else {}


# The read_ahead block this context (thread, task) is in, if any.
_AHEAD: ContextVar[_Ahead | None] = ContextVar("usermem_pg_read_ahead", default=None)


def _ahead_key(text: str, args: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    key = tuple(args)
    try:
        hash(key)
    except TypeError:  # a list argument (keys of a live_scores read): as a tuple
        key = tuple(tuple(a) if isinstance(a, list) else a for a in args)
    return text, key
_NOT_YET = re.compile(r"(\d+) are dead but not yet removable|(\d+) dead row versions cannot be removed yet")
_URL_OPTIONS = ("schema", "rls", "pool_min", "pool_max", "purge_vacuum", "read_replica")
_REPLICA_TIMEOUT = 2.0  # seconds a read waits for a replica connection before it goes to the primary
_REPLICA_BACKOFF = 5.0  # seconds reads skip a replica that failed
_HOST_PORT = re.compile(r"^([A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$")


# -- values ----------------------------------------------------------------------------------------------

def _jsonb_exact(value: Any) -> bool:
    """Whether JSONB gives this value back unchanged (it refuses NUL, prints 1e+16 back as an integer)."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return False  # numeric has no negative zero
        return not (value.is_integer() and "e" in repr(value))
    if isinstance(value, dict):
        return all(_jsonb_exact(k) and _jsonb_exact(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_jsonb_exact(v) for v in value)
    return True


def _dumps(value: Any) -> str:
    return dumps_value(value, allow_nan=False)


def value_params(value: Any) -> tuple[Jsonb | None, bytes | None]:
    """(jsonb, raw) column values: JSONB when exact, else the UTF-8 JSON text as bytea."""
    if _jsonb_exact(value):
        return Jsonb(value, dumps=_dumps), None
    return None, _dumps(value).encode("utf-8")


def _value_of(jsonb: Any, raw: Any) -> Any:
    return jsonb if raw is None else json.loads(bytes(raw).decode("utf-8"))


def _record(row: Sequence[Any]) -> MemoryRecord:
    return record_with_value(row, row[5] if row[24] is None else json.loads(bytes(row[24]).decode("utf-8")))


def _params(r: MemoryRecord) -> tuple[Any, ...]:
    jsonb, raw = value_params(r.value)
    return record_params(r, jsonb, bool(r.retracted), raw)


def _detail_json(e: AuditEvent) -> str:
    # Audit details never carry values, but messages may quote input: JSONB cannot hold NUL.
    return e.detail_json().replace("\\u0000", "\\ufffd")


@contextmanager
def _errors(what: str) -> Iterator[None]:
    """Translate driver errors into the usermem hierarchy; usermem errors pass through."""
    try:
        yield
    except (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation,
            psycopg.errors.RestrictViolation) as exc:
        raise IntegrityError(f"refused by the database: {exc}") from exc
    except PoolTimeout as exc:
        raise StoreError(f"PostgreSQL {what}: no connection available: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"PostgreSQL {what} failed: {exc}") from exc


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Separate usermem's own URL options from the libpq connection string."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(k, v) if k in _URL_OPTIONS else rest.append((k, v)))
    scheme = "postgresql" if parts.scheme in ("postgresql", "postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest, quote_via=quote), parts.fragment)), ours


def parse_lsn(text: str) -> int:
    """A PostgreSQL WAL position ('16/B374D848') as an integer, comparable with <."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def replica_conninfo(conninfo: str, host_port: str) -> str:
    """The primary's connection string with the host and port of the replica (`host:port`)."""
    m = _HOST_PORT.match(host_port)
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise ConfigError(f"read_replica must be host:port, got {host_port!r}", setting="store_url")
    host = m.group(1).strip("[]")
    try:
        return psycopg.conninfo.make_conninfo(conninfo, host=host, port=m.group(2))
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid PostgreSQL URL: {exc}", setting="store_url") from None


def _truthy(v: object) -> bool:
    return str(v).lower() in ("1", "on", "true", "yes")


def _tx_connection(tx: WriteTx) -> psycopg.Connection[Any]:
    """The connection `tx` runs on (the outbox writes beside the change on it)."""
    if not isinstance(tx, _PgTx):
        raise StoreError("the outbox needs a transaction opened by this store's transaction()")
    return tx.connection


class _PgTx:
    def __init__(self, conn: psycopg.Connection[Any], tenant: str, user_id: str) -> None:
        self._conn = conn
        self._tenant = tenant
        self._user_id = user_id
        self.inserted: list[MemoryRecord] = []
        self.superseded: list[tuple[str, str]] = []

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The connection this transaction runs on (the outbox writes beside the change on it)."""
        return self._conn

    def head(self, key: str) -> MemoryRecord | None:
        row = self._conn.execute(_HEAD, (self._tenant, self._user_id, key)).fetchone()
        return _record(row) if row else None

    def get(self, memory_id: str) -> MemoryRecord | None:
        row = self._conn.execute(_GET, (self._tenant, memory_id)).fetchone()
        return _record(row) if row else None

    def insert(self, record: MemoryRecord) -> None:
        if record.tenant != self._tenant or record.user_id != self._user_id:
            raise StoreError("a transaction may only write the user it was opened for")
        try:  # a refused insert aborts the transaction; the caller's retry opens a new one
            self._conn.execute(_INSERT, _params(record))
        except (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation) as exc:
            raise IntegrityError(f"refused by the database: {exc}") from exc
        self.inserted.append(record)

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        row = self._conn.execute(_SUPERSEDE, (new_id, at, self._tenant, old_id)).fetchone()
        if row is None:
            raise IntegrityError(f"version {old_id} is no longer current")
        self.superseded.append((old_id, new_id))

    def audit(self, event: AuditEvent) -> None:
        _insert_audit(self._conn, event)


def _score_rows(conn: psycopg.Connection[Any], text: str, args: Sequence[Any]) -> list[ScoreRow]:
    # The recall hot path: binary results and rows built straight into ScoreRow (about 35% faster
    # than text rows for a user with 1,000 memories).
    with conn.cursor(binary=True, row_factory=lambda _cur: ScoreRow._make) as cur:
        return cur.execute(text, args).fetchall()


# The recall reads of the rank index are planned once per connection (prepared, generic plan): their custom
# plan costs ≈ 0.6 ms of planning per execution (the rank expression matched against the index in each of
# the kinds' subqueries) against ≈ 0.2 ms to run, and PostgreSQL's plan cache keeps choosing custom plans
# for them. The generic plan is the same index scan (docs/scaling.md). Set for the statements of one sync
# only (is_local), so no other statement of the pooled connection is affected.
_GENERIC_PLANS = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"


@lru_cache(maxsize=128)
def _numbered(text: str) -> str:
    """`text` with its `%s` placeholders numbered `$1`, `$2`, ... for a RawCursor, which sends a statement as
    it is. A plain cursor parses a `%s` statement on every execution unless it is under 4 KB (psycopg's cache
    limit); the rank-index reads are ≈ 10 KB (the rank expression once per kind), and parsing them anew was
    ≈ 30 % of the client CPU of a recall's read-ahead block (issue 19)."""
    if "%%" in text or "%(" in text or "$" in text:
        raise ValueError("only statements with plain %s placeholders can be numbered")
    parts = text.split("%s")
    return "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1)) + parts[-1]


def _raw_binary(conn: psycopg.Connection[Any], row_factory: Any = None) -> psycopg.RawCursor[Any]:
    """A binary RawCursor (statements from _numbered) on `conn`."""
    cur: psycopg.RawCursor[Any] = psycopg.RawCursor(conn, row_factory=row_factory) if row_factory is not None \
        else psycopg.RawCursor(conn)
    cur.format = psycopg.pq.Format.BINARY
    return cur


def _ranked_rows(conn: psycopg.Connection[Any], text: str, args: Sequence[Any]) -> list[ScoreRow]:
    """_score_rows of a rank-index read, prepared with a generic plan (one round trip: pipelined)."""
    with conn.pipeline():
        conn.execute(_GENERIC_PLANS)
        cur = _raw_binary(conn, lambda _cur: ScoreRow._make)
        cur.execute(_numbered(text), args, prepare=True)
    with cur:
        return cur.fetchall()


def _record_text(row: Sequence[Any]) -> MemoryRecord:
    """_record of a row whose value column was read as text (a ranked read ahead: decoded for winners only)."""
    return record_with_value(row, loads_value(row[5]) if row[24] is None else json.loads(bytes(row[24]).decode("utf-8")))


def _insert_audit(conn: psycopg.Connection[Any], e: AuditEvent) -> None:
    conn.execute(_INSERT_AUDIT, audit_params(e, _detail_json(e)))


class PostgresStore:
    """The store of record for deployments that outgrow one SQLite file."""

    def __init__(self, url: str, *, schema: str | None = None, rls: bool | None = None,
                 pool_min: int | None = None, pool_max: int | None = None, connect_timeout: float = 5.0,
                 purge_vacuum: str | None = None) -> None:
        conninfo, opts = split_url(url)
        self.url = url
        self.schema = schema if schema is not None else opts.get("schema")
        self.rls = bool(rls) if rls is not None else _truthy(opts.get("rls", "off"))
        self.purge_vacuum = purge_vacuum or opts.get("purge_vacuum", "full")
        if self.purge_vacuum not in ("full", "plain", "none"):
            raise ConfigError(f"purge_vacuum must be full, plain or none, got {self.purge_vacuum!r}",
                              setting="store_url")
        if self.schema is not None and not _SCHEMA_NAME.match(self.schema):
            raise ConfigError(f"schema must match [a-z_][a-z0-9_]*, got {self.schema!r}", setting="store_url")
        try:
            lo = int(pool_min if pool_min is not None else opts.get("pool_min", 1))
            hi = int(pool_max if pool_max is not None else opts.get("pool_max", 8))
        except ValueError as exc:
            raise ConfigError(f"pool_min / pool_max must be integers: {exc}", setting="store_url") from None
        self._conninfo = conninfo
        kwargs: dict[str, Any] = {"connect_timeout": max(1, int(connect_timeout))}
        if self.schema is not None:  # keep libpq options given in the URL (e.g. -c synchronous_commit=off)
            try:
                given = psycopg.conninfo.conninfo_to_dict(conninfo).get("options")
            except psycopg.ProgrammingError as exc:
                raise ConfigError(f"invalid PostgreSQL URL: {exc}", setting="store_url") from None
            kwargs["options"] = f"{given} -c search_path={self.schema}" if given else f"-c search_path={self.schema}"
        self._kwargs = kwargs
        self._closed = False
        self._lock = threading.Lock()
        self._replica: ConnectionPool[psycopg.Connection[Any]] | None = None  # opened below (read_replica)
        safe = _redact_url(url)
        try:
            first = psycopg.connect(conninfo, autocommit=True, **kwargs)
        except psycopg.Error as exc:
            raise ConfigError(f"cannot connect to PostgreSQL at {safe}: {str(exc).strip()}",
                              setting="store_url") from None
        try:
            version = first.info.server_version
            if version < 110000:
                raise ConfigError(f"PostgreSQL {version // 10000} is too old; usermem needs 11 or newer",
                                  setting="store_url")
            self._migrate(first)
            self._schema_name = self.schema or str(first.execute("SELECT current_schema()").fetchone()[0])  # type: ignore[index]
            # Tables of this schema (the optional ones only where their migration was applied).
            self._tables = tuple(t for t in _TABLES + _VECTOR_TABLES
                                 if first.execute("SELECT to_regclass(%s)", (t,)).fetchone() != (None,))
            vectors = all(t in self._tables for t in _VECTOR_TABLES)
            self.capabilities = StoreCapabilities(dialect="postgres", vectors="pgvector" if vectors else None,
                                                  row_level_security=self.rls, ranked=self.ranked,
                                                  read_ahead=self.read_ahead, sql_read=self.sql_read,
                                                  outbox=SqlOutbox(POSTGRES, _tx_connection, self._plain))
            if self.rls:
                self._enable_rls(first)
        finally:
            first.close()
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo, min_size=lo, max_size=max(lo, hi), kwargs={**kwargs, "autocommit": True}, open=False,
            timeout=30.0,
            name=f"usermem-{self._schema_name}")
        try:
            self._pool.open(wait=True, timeout=connect_timeout + 5)
        except PoolTimeout as exc:
            raise ConfigError(f"cannot open a connection pool to {safe}: {exc}", setting="store_url") from None
        # The read replica (module docstring): its own pool, opened without waiting (it may be down now).
        self.read_replica = opts.get("read_replica") or None
        self._replayed = 0  # the replica's replay position last seen (it only grows)
        self._replica_down_until = 0.0  # after a replica error, reads skip it for _REPLICA_BACKOFF seconds
        self._stats_lock = threading.Lock()
        self.replica_stats = {"replica_reads": 0, "primary_reads": 0, "behind": 0, "replica_errors": 0,
                              "fences": 0}  # fences: WAL positions asked of the primary
        if self.read_replica is not None:
            self._replica = ConnectionPool(
                replica_conninfo(conninfo, self.read_replica), min_size=lo, max_size=max(lo, hi),
                kwargs={**kwargs, "autocommit": True}, open=False, timeout=_REPLICA_TIMEOUT,
                name=f"usermem-{self._schema_name}-replica")
            self._replica.open(wait=False)

    # -- schema ----------------------------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Apply pending migrations in one transaction under an advisory lock (two starts at once: the
        second waits for the first, then finds nothing to do)."""
        try:
            with conn.transaction():
                name = self.schema or "public"
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"usermem.migrate:{name}",))
                # Existence is checked first so a role without CREATE privileges can start on a
                # schema its owner already migrated.
                if self.schema is not None:
                    if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname=%s", (self.schema,)).fetchone() is None:
                        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
                    conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema)))
                if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
                    conn.execute("CREATE TABLE schema_migrations"
                                 " (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)")
                done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
                for m in migrations.load_migrations("postgres"):
                    if m.version in done:
                        continue
                    if m.requires:
                        self._apply_optional(conn, m)
                        continue
                    conn.execute(m.sql.encode("utf-8"))  # several statements: simple query protocol
                    conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, now())", (m.version, m.name))
        except UsermemError:
            raise
        except psycopg.Error as exc:
            raise ConfigError(f"cannot apply migrations: {str(exc).strip()}", setting="store_url") from None

    def _apply_optional(self, conn: psycopg.Connection[Any], m: migrations.Migration) -> None:
        """Apply a migration that needs extensions, if they are installed or can be installed here;
        otherwise leave it pending (it is tried again at the next start)."""
        text = m.sql
        for ext in m.requires:
            schema = _extension_schema(conn, ext)
            if schema is None:
                log.info("migration %s left pending: PostgreSQL extension %r is not available", m.name, ext)
                return
            text = text.replace(f"@extschema:{ext}@", sql.Identifier(schema).as_string(conn))
        try:
            with conn.transaction():  # a savepoint: a refusal leaves the other migrations applied
                conn.execute(text.encode("utf-8"))
                conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, now())", (m.version, m.name))
        except psycopg.Error as exc:
            log.warning("migration %s left pending: %s", m.name, str(exc).strip())

    def _enable_rls(self, conn: psycopg.Connection[Any]) -> None:
        for table in self._tables:
            row = conn.execute("SELECT relrowsecurity AND relforcerowsecurity FROM pg_class"
                               " WHERE oid = to_regclass(%s)", (table,)).fetchone()
            if row and row[0]:
                continue
            try:
                conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(sql.Identifier(table)))
                conn.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(sql.Identifier(table)))
            except psycopg.Error as exc:
                raise ConfigError(f"rls=on but row-level security cannot be enabled on {table}: "
                                  f"{str(exc).strip()} (enable it once as the table owner)",
                                  setting="store_url") from None

    def schema_version(self) -> int:
        with self._conn("schema_version") as c:
            row = c.execute(_Q["schema_version"]).fetchone()
        return int(row[0] or 0) if row else 0

    # -- connections -----------------------------------------------------------------------------------

    @contextmanager
    def _conn(self, what: str, tenant: str | None = None, *, write: bool = False,
              pipeline: bool = False, reading: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection; `write=True` wraps the block in one transaction.

        `pipeline=True` sends statements whose results are not read (BEGIN, the lock, inserts, audit,
        COMMIT) without waiting, so a write costs about three round trips instead of eight; an error of
        a queued statement surfaces at the next read or at commit, and the transaction rolls back.
        Unless `reading` (a read of `_reading`), the block may have written: the read scope's WAL fence
        is dropped afterwards, so later reads of the scope see it (module docstring, read replica).
        """
        try:
            with self._connection(what, tenant, write=write, pipeline=pipeline) as conn:
                yield conn
        finally:
            if not reading and self._replica is not None:
                scope = current_read_scope()
                if scope is not None:
                    scope.fence = None

    @contextmanager
    def _connection(self, what: str, tenant: str | None, *, write: bool,
                    pipeline: bool) -> Iterator[psycopg.Connection[Any]]:
        with _errors(what), self._pool.connection() as conn:
            if write and pipeline:
                with conn.pipeline(), conn.transaction():
                    if self.rls:
                        conn.execute("SELECT set_config('usermem.tenant', %s, true)", (tenant or "*",))
                    yield conn
            elif write:
                with conn.transaction():
                    if self.rls:
                        conn.execute("SELECT set_config('usermem.tenant', %s, true)", (tenant or "*",))
                    yield conn
            else:
                if self.rls:  # session-level: every use of a pooled connection sets it again
                    conn.execute("SELECT set_config('usermem.tenant', %s, false)", (tenant or "*",))
                yield conn

    def _plain(self, write: bool) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self.sql(None, write=write)

    @contextmanager
    def sql(self, tenant: str | None = None, *, write: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for plug-ins (see Store.sql): autocommit, or with `write=True` one
        transaction; with row-level security on, scoped to `tenant` (None: every tenant)."""
        with self._conn("plug-in", tenant, write=write) as conn:
            yield conn

    def analyze(self) -> None:
        with self._conn("analyze") as c:
            for table in self._tables:
                c.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in transaction mode (commit on success, rollback on error), for plug-ins
        that keep their own tables in this database. Kept for compatibility: prefer `sql()`."""
        with _errors("plug-in"), self._pool.connection() as conn:
            conn.autocommit = False
            try:
                if self.rls:
                    conn.execute("SELECT set_config('usermem.tenant', '*', true)")
                yield conn
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            finally:
                conn.autocommit = True

    def _user_lock(self, conn: psycopg.Connection[Any], tenant: str, user_id: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                     (f"usermem:{self._schema_name}:{tenant}\x1f{user_id}",))

    # -- writes ----------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, tenant: str, user_id: str) -> Iterator[_PgTx]:
        with self._conn("write transaction", tenant, write=True, pipeline=True) as conn:
            with _errors("write transaction"):
                self._user_lock(conn, tenant, user_id)
            yield _PgTx(conn, tenant, user_id)

    def append_audit(self, event: AuditEvent) -> None:
        with self._conn("audit", event.tenant if event.tenant != "*" else None) as c:
            _insert_audit(c, event)

    def touch(self, tenant: str, ids: Sequence[str], *, used_at: float | None = None,
              confirmed_at: float | None = None) -> int:
        if not ids or (used_at is None and confirmed_at is None):
            return 0
        with self._conn("touch", tenant) as c:
            users = [r[0] for r in c.execute(
                "SELECT DISTINCT user_id FROM memories WHERE tenant=%s AND id = ANY(%s) ORDER BY user_id",
                (tenant, list(ids)))]
        n = 0
        for user in users:  # one transaction per user, under the user's lock (see the module docstring)
            with self._conn("touch", tenant, write=True) as c:
                self._user_lock(c, tenant, user)
                for stmt, at in ((_TOUCH_USED, used_at), (_TOUCH_CONFIRMED, confirmed_at)):
                    if at is not None:
                        n += c.execute(stmt, (at, tenant, user, list(ids), at)).rowcount
        return n

    def soft_delete(self, tenant: str, user_id: str, at: float, *, keys: Sequence[str] | None = None,
                    created_from: float | None = None, created_until: float | None = None,
                    audit: AuditEvent | None = None, announce: Announce | None = None,
                    ids: Sequence[str] | None = None) -> list[str]:
        if (keys is not None and not keys) or (ids is not None and not ids):
            return []
        where, args = POSTGRES.soft_delete_where(tenant, user_id, keys, created_from, created_until, ids)
        with self._conn("soft delete", tenant, write=True) as c:
            self._user_lock(c, tenant, user_id)
            rows = c.execute(f"UPDATE memories SET deleted_at=%s WHERE {where} RETURNING id, seq",
                             [at, *args]).fetchall()
            ids = [r[0] for r in sorted(rows, key=lambda r: r[1])]
            if audit is not None:  # same transaction (issue 12 item 15)
                _insert_audit(c, replace(audit, detail={**audit.detail, "rows": len(rows)}))
            if announce is not None:  # the erasure's outbox event (issue 17): same transaction
                announce(_PgTx(c, tenant, user_id), ids)
        return ids

    def purge(self, *, deleted_before: float, expired_before: float) -> int:
        cond = _Q["purge_where"]
        with self._conn("purge") as c:
            users = c.execute(f"SELECT DISTINCT tenant, user_id FROM memories WHERE {cond} ORDER BY 1, 2",
                              (deleted_before, expired_before)).fetchall()
        n = 0
        for tenant, user in users:
            with self._conn("purge", tenant, write=True) as c:
                self._user_lock(c, tenant, user)
                n += c.execute(f"DELETE FROM memories WHERE tenant=%s AND user_id=%s AND {cond}",
                               (tenant, user, deleted_before, expired_before)).rowcount
        vector_tables = [t for t in _VECTOR_TABLES if t in self._tables]
        if n:
            self.vacuum()
        elif vector_tables:  # vectors erased by forget / drop_orphans since the last purge
            self.vacuum(tables=vector_tables)
        return n

    def vacuum(self, full: bool | None = None, *, attempts: int = 20, tables: Sequence[str] | None = None) -> int:
        """Make deleted rows' bytes leave the table files; returns dead rows that could not be removed.

        `tables`: which of the store's tables (default: memories, documents and the vector tables).

        FULL rewrites the tables into new files (a brief exclusive lock). A dead row that some open
        snapshot might still see (a long transaction, a concurrent ANALYZE) is copied, not removed, so
        the rewrite is retried until none is left or `attempts` run out (then it is logged).
        """
        mode = ("full" if full else "plain") if full is not None else self.purge_vacuum
        if mode == "none":
            return 0
        total = 0
        names = [t for t in (tables if tables is not None else self._tables) if t in self._tables and t != "audit"]
        with _errors("vacuum"), psycopg.connect(self._conninfo, autocommit=True, **self._kwargs) as c:
            notices: list[str] = []
            c.add_notice_handler(lambda d: notices.append(f"{d.message_primary or ''} {d.message_detail or ''}"))
            for table in names:
                kept = 0
                stmt = "VACUUM (FULL, VERBOSE) {}" if mode == "full" else "VACUUM (VERBOSE) {}"
                for attempt in range(attempts):
                    notices.clear()
                    c.execute(sql.SQL(stmt).format(sql.Identifier(table)))
                    kept = sum(int(m.group(1) or m.group(2)) for n in notices for m in [_NOT_YET.search(n)] if m)
                    if not kept or mode != "full":
                        break
                    time.sleep(min(0.05 * (attempt + 1), 0.5))
                if kept:
                    total += kept
                    log.warning("vacuum of %s left %d dead row versions that an open snapshot may still see",
                                table, kept)
                c.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        return total

    # -- read routing (module docstring: read replica) -------------------------------------------------

    def _count_read(self, name: str) -> None:
        with self._stats_lock:
            self.replica_stats[name] += 1

    def _primary_lsn(self) -> int:
        self._count_read("fences")
        with _errors("WAL position"), self._pool.connection() as c:
            row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        return parse_lsn(str(row[0])) if row else 0

    def _replica_has(self, replica: ConnectionPool[psycopg.Connection[Any]], lsn: int) -> bool:
        """Whether the replica has replayed the WAL up to `lsn` (asked only when not known already)."""
        if self._replayed >= lsn:
            return True
        with replica.connection(timeout=_REPLICA_TIMEOUT) as c:
            row = c.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
        if row is None or row[0] is None:  # not (or no longer) a standby: never trusted for fenced reads
            return False
        seen = parse_lsn(str(row[0]))
        with self._stats_lock:
            self._replayed = max(self._replayed, seen)
        return seen >= lsn

    def _reading(self, what: str, tenant: str | None, fn: Callable[[psycopg.Connection[Any]], _T], *,
                 lag_tolerant: bool = False) -> _T:
        """Run the read `fn` on the replica when it may (module docstring), else on the primary."""
        replica = self._replica
        if replica is not None and time.monotonic() >= self._replica_down_until:
            try:
                scope = None if lag_tolerant else current_read_scope()
                if lag_tolerant:
                    need = 0
                elif scope is not None and scope.fence is not None:
                    need = scope.fence  # asked at this operation's first read (store.base.read_scope)
                else:
                    need = self._primary_lsn()
                    if scope is not None:
                        scope.fence = need
                if self._replica_has(replica, need):
                    with replica.connection(timeout=_REPLICA_TIMEOUT) as conn:
                        if self.rls:
                            conn.execute("SELECT set_config('usermem.tenant', %s, false)", (tenant or "*",))
                        result = fn(conn)
                    self._count_read("replica_reads")
                    return result
                self._count_read("behind")
            except (psycopg.OperationalError, PoolTimeout) as exc:  # the replica is away or cancelled the read
                self._count_read("replica_errors")
                self._replica_down_until = time.monotonic() + _REPLICA_BACKOFF
                log.warning("read replica %s failed (%s); reading from the primary for %.0f s", self.read_replica,
                            str(exc).strip() or type(exc).__name__, _REPLICA_BACKOFF)
        with self._conn(what, tenant, reading=True) as c:
            result = fn(c)
        if replica is not None:
            self._count_read("primary_reads")
        return result

    # -- reads -----------------------------------------------------------------------------------------

    def live(self, q: LiveQuery) -> list[MemoryRecord]:
        text, args = POSTGRES.live(q)

        def read(c: psycopg.Connection[Any]) -> list[Any]:
            with c.cursor(binary=True) as cur:
                return cur.execute(text, args).fetchall()
        return [_record(r) for r in self._reading("live", q.tenant, read)]

    def live_scores(self, q: LiveQuery) -> list[ScoreRow]:
        text, args = POSTGRES.live(q, scores=True)
        held = self._held(text, args)
        if held is not _MISSING:
            return held  # type: ignore[no-any-return]
        return self._reading("live_scores", q.tenant, lambda c: _score_rows(c, text, args))

    def ranked(self, q: LiveQuery, batches: Sequence[tuple[Kind, int, int]]) -> list[ScoreRow]:
        """See StoreCapabilities.ranked (the `memories_rank` index)."""
        if not batches:
            return []
        text, args = POSTGRES.ranked(q, batches)
        held = self._held(text, args)
        if held is not _MISSING:
            return held  # type: ignore[no-any-return]
        return self._reading("ranked", q.tenant, lambda c: _ranked_rows(c, text, args))

    # -- reads ahead (StoreCapabilities.read_ahead) ----------------------------------------------------

    def _held(self, text: str, args: Sequence[Any]) -> Any:
        """The result a read_ahead block of this store (or one it opened in) holds for this statement (once),
        else _MISSING."""
        ahead = _AHEAD.get()
        if ahead is None or ahead.store is not self:
            return _MISSING
        key: tuple[str, tuple[Any, ...]] | None = None
        while ahead is not None:
            if ahead.results:
                key = key or _ahead_key(text, args)
                got = ahead.results.pop(key, _MISSING)
                if got is not _MISSING:
                    return got
            ahead = ahead.outer
        return _MISSING

    @contextmanager
    def read_ahead(self, reads: Sequence[ReadAhead]) -> Iterator[None]:
        """See base.ReadAheadRunner: the reads go out in one pipeline (one round trip) on one connection.
        Not with a read replica (its reads choose their server one by one)."""
        if not reads or self._replica is not None:
            yield
            return
        ahead = _Ahead(self, _AHEAD.get())
        cursors: list[tuple[str, tuple[str, tuple[Any, ...]], psycopg.Cursor[Any]]] = []
        cur: psycopg.Cursor[Any]
        with self._conn("read ahead", _ahead_tenant(reads), reading=True) as c:
            with c.pipeline():
                c.execute(_GENERIC_PLANS)
                for read in reads:
                    args = read.args
                    if read.method == "list_docs":
                        text, params = POSTGRES.list_docs(*args)
                        cur = c.cursor()
                    elif read.method == "get_doc":
                        text, params = _Q["get_doc"], list(args)
                        cur = c.cursor()
                    elif read.method == "sql":  # a plug-in's read (sql_read)
                        text, params = args[1], list(args[2])
                        cur = c.cursor()
                    elif read.method == "live_scores":  # with its rows' records, as a ranked read
                        text, params = POSTGRES.live(args[0], scores=True)
                        cur = c.cursor(binary=True)
                        cur.execute(POSTGRES.live(args[0], scores=True, records=True)[0], params, prepare=True)
                        cursors.append((read.method, _ahead_key(text, params), cur))
                        continue
                    elif read.method == "ranked":
                        if not args[1]:
                            continue
                        text, params = POSTGRES.ranked(*args)
                        cur = _raw_binary(c)
                        cur.execute(_numbered(POSTGRES.ranked(*args, records=True)[0]), params, prepare=True)
                        cursors.append((read.method, _ahead_key(text, params), cur))
                        continue
                    else:
                        raise ValueError(f"cannot read ahead {read.method!r}")
                    cur.execute(text, params, prepare=True)
                    cursors.append((read.method, _ahead_key(text, params), cur))
            for method, key, cur in cursors:
                rows = cur.fetchall()
                if method in ("ranked", "live_scores"):
                    ahead.results[key] = [ScoreRow._make(r[:_N_SCORE]) for r in rows]
                    for r in rows:
                        ahead.records[r[0]] = r
                else:
                    ahead.results[key] = rows
                cur.close()
        token = _AHEAD.set(ahead)
        try:
            yield
        finally:
            _AHEAD.reset(token)

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        if not ids:
            return []
        ahead = _AHEAD.get()
        if ahead is not None and ahead.store is self and ahead.records:
            held = ahead.records  # shared by nested blocks
            rows = [held[i] for i in ids if i in held]
            if len(rows) == len(ids) and all(r[_AHEAD_TENANT] == tenant for r in rows):  # rows read ahead
                return [_record_text(_AHEAD_RECORD(r)) for r in rows]
        def read(c: psycopg.Connection[Any]) -> list[Any]:
            with c.cursor(binary=True) as cur:
                return cur.execute(_GET_MANY, (tenant, list(ids))).fetchall()
        rows = self._reading("get_many", tenant, read)
        found = {r[0]: _record(r) for r in rows}
        return [found[i] for i in ids if i in found]

    def sql_read(self, tenant: str | None, text: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """See base.SqlRead: on the primary, as `sql(tenant)`."""
        held = self._held(text, params)
        if held is not _MISSING:
            return held  # type: ignore[no-any-return]
        with self._conn("plug-in read", tenant, reading=True) as c:
            return c.execute(text, params).fetchall()

    def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        row = self._reading("get", tenant, lambda c: c.execute(_GET, (tenant, memory_id)).fetchone())
        return _record(row) if row else None

    def history(self, tenant: str, user_id: str, key: str) -> list[MemoryRecord]:
        rows = self._reading("history", tenant,
                             lambda c: c.execute(_Q["history"], (tenant, user_id, key)).fetchall())
        return [_record(r) for r in rows]

    def by_change_set(self, tenant: str, change_set_id: str) -> list[MemoryRecord]:
        rows = self._reading("by_change_set", tenant,
                             lambda c: c.execute(_Q["by_change_set"], (tenant, change_set_id)).fetchall())
        return [_record(r) for r in rows]

    def audit_log(self, q: AuditQuery) -> list[AuditEvent]:
        text, args = POSTGRES.audit_log(q)
        rows = self._reading("audit_log", q.tenant, lambda c: c.execute(text, args).fetchall())
        return [audit_from_row(r, r[10]) for r in rows]

    # -- documents -------------------------------------------------------------------------------------

    def put_doc(self, tenant: str, namespace: str, key: str, value: dict[str, Any], *, now: float,
                user_id: str | None = None, expires_at: float | None = None) -> None:
        jsonb, raw = value_params(value)
        with self._conn("put_doc", tenant) as c:
            c.execute(_Q["put_doc"], (tenant, namespace, key, user_id, jsonb, raw, now, expires_at))

    def get_doc(self, tenant: str, namespace: str, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        held = self._held(_Q["get_doc"], (tenant, namespace, key))
        row = self._reading("get_doc", tenant, lambda c: c.execute(_Q["get_doc"], (tenant, namespace, key)).fetchone()) \
            if held is _MISSING else (held[0] if held else None)
        if row is None or (now is not None and row[2] is not None and row[2] <= now):
            return None
        return dict(_value_of(row[0], row[1]))

    def list_docs(self, tenant: str, namespace: str, *, user_id: str | None = None, now: float | None = None,
                  limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        text, args = POSTGRES.list_docs(tenant, namespace, user_id, now, limit)
        rows = self._held(text, args)
        if rows is _MISSING:
            rows = self._reading("list_docs", tenant, lambda c: c.execute(text, args).fetchall())
        return [(r[0], dict(_value_of(r[1], r[2]))) for r in rows]

    def delete_doc(self, tenant: str, namespace: str, key: str) -> bool:
        with self._conn("delete_doc", tenant) as c:
            return c.execute(_Q["delete_doc"], (tenant, namespace, key)).rowcount > 0

    def delete_user_docs(self, tenant: str, user_id: str) -> int:
        with self._conn("delete_user_docs", tenant) as c:
            return int(c.execute(_Q["delete_user_docs"], (tenant, user_id)).rowcount)

    # -- misc ------------------------------------------------------------------------------------------

    def users(self, tenant: str, limit: int = 1000, *, prefix: str | None = None,
              after: str | None = None) -> list[str]:
        name, args = users_query(tenant, limit, prefix, after)
        rows = self._reading("users", tenant, lambda c: c.execute(_Q[name], args).fetchall(), lag_tolerant=True)
        return [r[0] for r in rows]

    def count(self, tenant: str | None = None) -> int:
        def read(c: psycopg.Connection[Any]) -> Any:
            if tenant is None:
                return c.execute(_Q["count"]).fetchone()
            return c.execute(_Q["count_tenant"], (tenant,)).fetchone()
        row = self._reading("count", tenant, read, lag_tolerant=True)
        return int(row[0]) if row else 0

    def ping(self) -> None:
        try:
            with self._pool.connection(timeout=5.0) as c:
                c.execute("SELECT 1").fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL store {_redact_url(self.url)} does not answer: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()
                if self._replica is not None:
                    self._replica.close()

    # -- bulk loading for benchmarks and imports -------------------------------------------------------

    def bulk_insert(self, records: Sequence[MemoryRecord]) -> None:
        """Load pre-validated records with COPY in one transaction (benchmark fixtures, imports)."""
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in POSTGRES.columns)
        with self._conn("bulk insert", write=True) as c, c.cursor() as cur, \
                cur.copy(sql.SQL("COPY memories ({}) FROM STDIN").format(cols)) as copy:
            for r in records:
                copy.write_row(_params(r))


def _ahead_tenant(reads: Sequence[ReadAhead]) -> str | None:
    """The one tenant a read_ahead block reads (row-level security scopes the connection to it), else None."""
    tenants = {r.args[0] if r.method in ("list_docs", "get_doc", "sql") else r.args[0].tenant for r in reads}
    return tenants.pop() if len(tenants) == 1 else None


def _extension_schema(conn: psycopg.Connection[Any], name: str) -> str | None:
    """The schema of an installed extension; installs it (in public) when available and allowed."""
    query = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
             " WHERE e.extname = %s")
    row = conn.execute(query, (name,)).fetchone()
    if row is not None:
        return str(row[0])
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name=%s", (name,)).fetchone() is None:
        return None
    # Stores of several schemas may start at once: one creates the extension, the others wait and see it.
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"usermem.extension:{name}",))
    row = conn.execute(query, (name,)).fetchone()
    if row is not None:
        return str(row[0])
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA public").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        log.warning("PostgreSQL extension %r is available but could not be created: %s", name, str(exc).strip())
        return None
    row = conn.execute(query, (name,)).fetchone()
    return str(row[0]) if row is not None else None


_redact_url = redact_url  # moved to usermem.config; the old private name stays as an alias
