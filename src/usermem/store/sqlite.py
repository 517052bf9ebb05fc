"""Embedded SQLite store: one file, WAL mode, safe for many threads and processes.

Writers take `BEGIN IMMEDIATE`, which serialises them across processes, so reading the head of a
key and superseding it cannot interleave with another writer. `secure_delete` makes SQLite zero the
bytes of deleted rows, and purge checkpoints the WAL and vacuums, so erased values leave the file.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from usermem.errors import IntegrityError, StoreError
from usermem.model import AuditEvent, Kind, MemoryRecord
from usermem.store import migrations
from usermem.store.base import Announce, AuditQuery, LiveQuery, ScoreRow, StoreCapabilities, WriteTx, chunked
from usermem.store.outbox import SqlOutbox
from usermem.store.rows import audit_from_row, audit_params, record_from_row, row_from_record
from usermem.store.sql import SQLITE, users_query

# ScoreRow._make without its Python frame and length check: the statements select exactly SCORE_COLUMNS.
_score_row = partial(tuple.__new__, ScoreRow)
# The connection's page cache, in KiB (SQLite's default is 2 MB). A query recall reads its ~150 candidates' rows by
# key, scattered over the user's pages: at 5,000 memories that read took ≈ 0.6 ms from a 2 MB cache that the
# rows no longer fitted (pages re-read through the OS) and ≈ 0.28 ms from this one (docs/scaling.md, issue 19).
# An upper bound, filled only as pages are read.
CACHE_KIB = 64 << 10
_Q = SQLITE.stmt  # every fixed statement, built once (store/sql.py)
_INSERT, _HEAD, _GET, _SUPERSEDE, _INSERT_AUDIT = (_Q["insert"], _Q["head"], _Q["get"], _Q["supersede"],
                                                   _Q["insert_audit"])


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection, tenant: str, user_id: str) -> None:
        self._conn = conn
        self._tenant = tenant
        self._user_id = user_id

    def head(self, key: str) -> MemoryRecord | None:
        row = self._conn.execute(_HEAD, (self._tenant, self._user_id, key)).fetchone()
        return record_from_row(row) if row else None

    def get(self, memory_id: str) -> MemoryRecord | None:
        row = self._conn.execute(_GET, (self._tenant, memory_id)).fetchone()
        return record_from_row(row) if row else None

    def insert(self, record: MemoryRecord) -> None:
        if record.tenant != self._tenant or record.user_id != self._user_id:
            raise StoreError("a transaction may only write the user it was opened for")
        try:
            self._conn.execute(_INSERT, row_from_record(record))
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(f"refused by the database: {exc}") from exc

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        cur = self._conn.execute(_SUPERSEDE, (new_id, at, self._tenant, old_id))
        if cur.rowcount != 1:
            raise IntegrityError(f"version {old_id} is no longer current")

    def audit(self, event: AuditEvent) -> None:
        _insert_audit(self._conn, event)


def _insert_audit(conn: sqlite3.Connection, e: AuditEvent) -> None:
    conn.execute(_INSERT_AUDIT, audit_params(e, e.detail_json()))



def _commit_or_roll_back(c: sqlite3.Connection) -> None:
    """COMMIT; if SQLite refuses (e.g. a statement still in progress), roll back so the connection is not
    left inside a transaction that every later BEGIN would trip over, and re-raise."""
    try:
        c.execute("COMMIT")
    except sqlite3.Error:
        if c.in_transaction:
            c.execute("ROLLBACK")
        raise

class SQLiteStore:
    """The embedded default. `path` is a file path or ':memory:' (private to this object)."""

    def __init__(self, path: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.url = "sqlite://" if path == ":memory:" else f"sqlite:///{path}"
        if path != ":memory:":
            parent = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as exc:
                from usermem.errors import ConfigError

                raise ConfigError(f"cannot create directory {parent!r}: {exc}", setting="store_url") from exc
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
        except sqlite3.Error as exc:
            from usermem.errors import ConfigError

            raise ConfigError(f"cannot open SQLite database {path!r}: {exc}", setting="store_url") from exc
        c = self._conn
        c.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        if path != ":memory:":
            c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute("PRAGMA secure_delete=ON")
        c.execute("PRAGMA foreign_keys=ON")
        c.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        try:  # the rank index (migration 0006) needs ln(); SQLite builds without math functions get ours
            c.execute("SELECT ln(2)")
        except sqlite3.OperationalError:
            c.create_function("ln", 1, _ln, deterministic=True)
        self._migrate()
        self.capabilities = StoreCapabilities(dialect="sqlite", vectors="sqlite", serialised=True,
                                              ranked=self.ranked,
                                              outbox=SqlOutbox(SQLITE, self._tx_connection, self._plain))

    # -- schema ----------------------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")  # two processes starting at once: the second waits, then sees the work done
            try:
                c.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at REAL)")
                done = {row[0] for row in c.execute("SELECT version FROM schema_migrations")}
                for version, name, sql in migrations.load("sqlite"):
                    if version in done:
                        continue
                    for statement in _split_sql(sql):
                        c.execute(statement)
                    c.execute("INSERT INTO schema_migrations VALUES (?, ?, strftime('%s','now'))", (version, name))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    def _tx_connection(self, tx: WriteTx) -> sqlite3.Connection:
        """The connection `tx` runs on: ours, inside the transaction the calling thread holds (outbox)."""
        if not isinstance(tx, _SQLiteTx) or not self._conn.in_transaction:
            raise StoreError("the outbox needs a transaction opened by this store's transaction()")
        return self._conn

    def _plain(self, write: bool) -> AbstractContextManager[sqlite3.Connection]:
        return self.sql(write=write)

    def schema_version(self) -> int:
        with self._lock:
            row = self._conn.execute(_Q["schema_version"]).fetchone()
            return int(row[0] or 0)

    def analyze(self) -> None:
        with self._lock:
            self._conn.execute("ANALYZE")

    # -- plug-ins ----------------------------------------------------------------------------------------

    @contextmanager
    def sql(self, tenant: str | None = None, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The store's connection under its lock (see Store.sql); `write=True` wraps the block in one
        `BEGIN IMMEDIATE` transaction. Plug-in tables share the file, its transactions and its
        secure_delete setting, so deleting their rows zeroes the bytes too. `tenant` is not used (no RLS).
        Driver errors raised in the block become IntegrityError / StoreError."""
        with self._lock:
            c = self._conn
            try:
                if not write:
                    yield c
                    return
                try:
                    c.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    raise StoreError(f"could not start a write transaction: {exc}") from exc
                try:
                    yield c
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
                _commit_or_roll_back(c)
            except sqlite3.IntegrityError as exc:
                raise IntegrityError(f"refused by the database: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite plug-in statement failed: {exc}") from exc

    # -- writes ----------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, tenant: str, user_id: str) -> Iterator[_SQLiteTx]:
        with self._lock:
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"could not start a write transaction: {exc}") from exc
            try:
                yield _SQLiteTx(c, tenant, user_id)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            else:
                try:
                    _commit_or_roll_back(c)
                except sqlite3.Error as exc:
                    raise StoreError(f"could not commit the write transaction: {exc}") from exc

    def append_audit(self, event: AuditEvent) -> None:
        with self._lock:
            _insert_audit(self._conn, event)

    def touch(self, tenant: str, ids: Sequence[str], *, used_at: float | None = None,
              confirmed_at: float | None = None) -> int:
        if not ids:
            return 0
        n = 0
        with self._lock:
            for part in chunked(list(ids)):
                for column, at in (("last_used_at", used_at), ("last_confirmed_at", confirmed_at)):
                    if at is not None:
                        n += self._conn.execute(SQLITE.touch(column, len(part)), (at, tenant, *part, at)).rowcount
        return n

    def soft_delete(self, tenant: str, user_id: str, at: float, *, keys: Sequence[str] | None = None,
                    created_from: float | None = None, created_until: float | None = None,
                    audit: AuditEvent | None = None, announce: Announce | None = None,
                    ids: Sequence[str] | None = None) -> list[str]:
        if (keys is not None and not keys) or (ids is not None and not ids):
            return []
        where, args = SQLITE.soft_delete_where(tenant, user_id, keys, created_from, created_until, ids)
        with self.transaction(tenant, user_id) as tx:
            ids = [r[0] for r in self._conn.execute(f"SELECT id FROM memories WHERE {where} ORDER BY seq", args)]
            self._conn.execute(f"UPDATE memories SET deleted_at=? WHERE {where}", [at, *args])
            if audit is not None:  # same transaction (issue 12 item 15)
                _insert_audit(self._conn, replace(audit, detail={**audit.detail, "rows": len(ids)}))
            if announce is not None:  # the erasure's outbox event (issue 17): same transaction
                announce(tx, ids)
        return ids

    def purge(self, *, deleted_before: float, expired_before: float) -> int:
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                n = c.execute(f"DELETE FROM memories WHERE {_Q['purge_where']}",
                              (deleted_before, expired_before)).rowcount
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            if n and self.path != ":memory:":
                # Old page images may survive in the WAL; fold it in and truncate, then rebuild the file.
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                c.execute("VACUUM")
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            elif n:
                c.execute("VACUUM")
            return n

    # -- reads -----------------------------------------------------------------------------------------

    def live(self, q: LiveQuery) -> list[MemoryRecord]:
        text, args = SQLITE.live(q)
        with self._lock:
            rows = self._conn.execute(text, args).fetchall()
        return [record_from_row(r) for r in rows]

    def live_scores(self, q: LiveQuery) -> list[ScoreRow]:
        text, args = SQLITE.live(q, scores=True)
        with self._lock:
            rows = self._conn.execute(text, args).fetchall()
        return list(map(_score_row, rows))

    def ranked(self, q: LiveQuery, batches: Sequence[tuple[Kind, int, int]]) -> list[ScoreRow]:
        """See StoreCapabilities.ranked (the `memories_rank` index)."""
        if not batches:
            return []
        text, args = SQLITE.ranked(q, batches)
        with self._lock:
            rows = self._conn.execute(text, args).fetchall()
        return list(map(_score_row, rows))

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        found: dict[str, MemoryRecord] = {}
        with self._lock:
            for part in chunked(list(ids)):
                for row in self._conn.execute(SQLITE.get_many(len(part)), (tenant, *part)):
                    found[row[0]] = record_from_row(row)
        return [found[i] for i in ids if i in found]

    def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        with self._lock:
            row = self._conn.execute(_GET, (tenant, memory_id)).fetchone()
        return record_from_row(row) if row else None

    def history(self, tenant: str, user_id: str, key: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(_Q["history"], (tenant, user_id, key)).fetchall()
        return [record_from_row(r) for r in rows]

    def by_change_set(self, tenant: str, change_set_id: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(_Q["by_change_set"], (tenant, change_set_id)).fetchall()
        return [record_from_row(r) for r in rows]

    def audit_log(self, q: AuditQuery) -> list[AuditEvent]:
        text, args = SQLITE.audit_log(q)
        with self._lock:
            rows = self._conn.execute(text, args).fetchall()
        return [audit_from_row(r, json.loads(r[10])) for r in rows]

    def put_doc(self, tenant: str, namespace: str, key: str, value: dict[str, Any], *, now: float,
                user_id: str | None = None, expires_at: float | None = None) -> None:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        with self._lock:
            self._conn.execute(_Q["put_doc"], (tenant, namespace, key, user_id, text, now, expires_at))

    def get_doc(self, tenant: str, namespace: str, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(_Q["get_doc"], (tenant, namespace, key)).fetchone()
        if row is None or (now is not None and row[1] is not None and row[1] <= now):
            return None
        return dict(json.loads(row[0]))

    def list_docs(self, tenant: str, namespace: str, *, user_id: str | None = None, now: float | None = None,
                  limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        text, args = SQLITE.list_docs(tenant, namespace, user_id, now, limit)
        with self._lock:
            rows = self._conn.execute(text, args).fetchall()
        return [(r[0], dict(json.loads(r[1]))) for r in rows]

    def delete_doc(self, tenant: str, namespace: str, key: str) -> bool:
        with self._lock:
            return self._conn.execute(_Q["delete_doc"], (tenant, namespace, key)).rowcount > 0

    def delete_user_docs(self, tenant: str, user_id: str) -> int:
        with self._lock:
            return int(self._conn.execute(_Q["delete_user_docs"], (tenant, user_id)).rowcount)

    def users(self, tenant: str, limit: int = 1000, *, prefix: str | None = None,
              after: str | None = None) -> list[str]:
        name, args = users_query(tenant, limit, prefix, after)
        with self._lock:
            rows = self._conn.execute(_Q[name], args).fetchall()
        return [r[0] for r in rows]

    def count(self, tenant: str | None = None) -> int:
        with self._lock:
            if tenant is None:
                return int(self._conn.execute(_Q["count"]).fetchone()[0])
            return int(self._conn.execute(_Q["count_tenant"], (tenant,)).fetchone()[0])

    def ping(self) -> None:
        try:
            with self._lock:
                self._conn.execute("SELECT 1").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path!r} does not answer: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- bulk loading for benchmarks and imports -------------------------------------------------------

    def bulk_insert(self, records: Sequence[MemoryRecord]) -> None:
        """Insert pre-validated current records in one transaction (benchmark fixtures, imports)."""
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany(_INSERT, [row_from_record(r) for r in records])
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise


def _ln(x: float | None) -> float | None:
    """SQLite's ln() for builds without math functions: NULL outside its domain, like SQLite's own."""
    return math.log(x) if x is not None and x > 0 else None


def _split_sql(sql: str) -> list[str]:
    """Split a migration into statements (sqlite3 knows where a trigger's BEGIN ... END ends)."""
    statements, buf = [], ""
    for line in sql.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            statements.append(buf)
            buf = ""
    if buf.strip():
        statements.append(buf)
    return statements
