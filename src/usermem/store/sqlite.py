"""Embedded SQLite store: one file, WAL mode, safe for many threads and processes.

Writers take `BEGIN IMMEDIATE`, which serialises them across processes, so reading the head of a
key and superseding it cannot interleave with another writer. `secure_delete` makes SQLite zero the
bytes of deleted rows, and purge checkpoints the WAL and vacuums, so erased values leave the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from usermem.errors import IntegrityError, StoreError
from usermem.model import AuditEvent, MemoryRecord
from usermem.store import migrations
from usermem.store.base import SCORE_COLUMNS, AuditQuery, LiveQuery, ScoreRow, StoreCapabilities, chunked
from usermem.store.rows import COLUMNS, SELECT_LIST, record_from_row, row_from_record

_LIVE_WHERE = "superseded_by IS NULL AND deleted_at IS NULL"
_SCORE_LIST = ", ".join(SCORE_COLUMNS)
_INSERT = f"INSERT INTO memories ({SELECT_LIST}) VALUES ({', '.join('?' * len(COLUMNS))})"


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection, tenant: str, user_id: str) -> None:
        self._conn = conn
        self._tenant = tenant
        self._user_id = user_id

    def head(self, key: str) -> MemoryRecord | None:
        row = self._conn.execute(
            f"SELECT {SELECT_LIST} FROM memories WHERE tenant=? AND user_id=? AND key=? AND {_LIVE_WHERE}",
            (self._tenant, self._user_id, key),
        ).fetchone()
        return record_from_row(row) if row else None

    def get(self, memory_id: str) -> MemoryRecord | None:
        row = self._conn.execute(
            f"SELECT {SELECT_LIST} FROM memories WHERE tenant=? AND id=? AND deleted_at IS NULL",
            (self._tenant, memory_id),
        ).fetchone()
        return record_from_row(row) if row else None

    def insert(self, record: MemoryRecord) -> None:
        if record.tenant != self._tenant or record.user_id != self._user_id:
            raise StoreError("a transaction may only write the user it was opened for")
        try:
            self._conn.execute(_INSERT, row_from_record(record))
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(f"refused by the database: {exc}") from exc

    def supersede(self, old_id: str, new_id: str, at: float) -> None:
        cur = self._conn.execute(
            f"UPDATE memories SET superseded_by=?, superseded_at=? WHERE tenant=? AND id=? AND {_LIVE_WHERE}",
            (new_id, at, self._tenant, old_id),
        )
        if cur.rowcount != 1:
            raise IntegrityError(f"version {old_id} is no longer current")

    def audit(self, event: AuditEvent) -> None:
        _insert_audit(self._conn, event)


def _insert_audit(conn: sqlite3.Connection, e: AuditEvent) -> None:
    conn.execute(
        "INSERT INTO audit (tenant, at, action, user_id, key, memory_id, op, reason, actor, detail)"
        " VALUES (?,?,?,?,?,?,?,?,?,?)",
        (e.tenant, e.at, e.action, e.user_id, e.key, e.memory_id, e.op, e.reason, e.actor, e.detail_json()),
    )


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
        self._migrate()
        self.capabilities = StoreCapabilities(dialect="sqlite", vectors="sqlite")

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

    def schema_version(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
            return int(row[0] or 0)

    def analyze(self) -> None:
        with self._lock:
            self._conn.execute("ANALYZE")

    # -- plug-ins ----------------------------------------------------------------------------------------

    @contextmanager
    def sql(self, tenant: str | None = None, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The store's connection under its lock (see Store.sql); `write=True` wraps the block in one
        `BEGIN IMMEDIATE` transaction. Plug-in tables share the file, its transactions and its
        secure_delete setting, so deleting their rows zeroes the bytes too. `tenant` is not used (no RLS)."""
        with self._lock:
            c = self._conn
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
            else:
                c.execute("COMMIT")

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
                c.execute("COMMIT")

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
                marks = ",".join("?" * len(part))
                if used_at is not None:
                    n += self._conn.execute(
                        f"UPDATE memories SET last_used_at=? WHERE tenant=? AND id IN ({marks})"
                        " AND (last_used_at IS NULL OR last_used_at < ?)", (used_at, tenant, *part, used_at)).rowcount
                if confirmed_at is not None:
                    n += self._conn.execute(
                        f"UPDATE memories SET last_confirmed_at=? WHERE tenant=? AND id IN ({marks})"
                        " AND (last_confirmed_at IS NULL OR last_confirmed_at < ?)",
                        (confirmed_at, tenant, *part, confirmed_at)).rowcount
        return n

    def soft_delete(self, tenant: str, user_id: str, at: float, *, keys: Sequence[str] | None = None,
                    created_from: float | None = None, created_until: float | None = None) -> list[str]:
        where = ["tenant=?", "user_id=?", "deleted_at IS NULL"]
        args: list[Any] = [tenant, user_id]
        if keys is not None:
            if not keys:
                return []
            where.append(f"key IN ({','.join('?' * len(keys))})")
            args.extend(keys)
        if created_from is not None:
            where.append("created_at >= ?")
            args.append(created_from)
        if created_until is not None:
            where.append("created_at < ?")
            args.append(created_until)
        clause = " AND ".join(where)
        with self.transaction(tenant, user_id):
            ids = [r[0] for r in self._conn.execute(f"SELECT id FROM memories WHERE {clause}", args)]
            self._conn.execute(f"UPDATE memories SET deleted_at=? WHERE {clause}", [at, *args])
        return ids

    def purge(self, *, deleted_before: float, expired_before: float) -> int:
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                n = c.execute(
                    "DELETE FROM memories WHERE (deleted_at IS NOT NULL AND deleted_at <= ?)"
                    " OR (expires_at IS NOT NULL AND expires_at <= ?)", (deleted_before, expired_before)).rowcount
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
        where, args = _live_where(q)
        with self._lock:
            rows = self._conn.execute(f"SELECT {SELECT_LIST} FROM memories WHERE {where}", args).fetchall()
        return [record_from_row(r) for r in rows]

    def live_scores(self, q: LiveQuery) -> list[ScoreRow]:
        where, args = _live_where(q)
        with self._lock:
            rows = self._conn.execute(f"SELECT {_SCORE_LIST} FROM memories WHERE {where}", args).fetchall()
        return [ScoreRow._make(r) for r in rows]

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryRecord]:
        found: dict[str, MemoryRecord] = {}
        with self._lock:
            for part in chunked(list(ids)):
                marks = ",".join("?" * len(part))
                for row in self._conn.execute(
                        f"SELECT {SELECT_LIST} FROM memories WHERE +tenant=? AND id IN ({marks}) AND deleted_at IS NULL",
                        (tenant, *part)):
                    found[row[0]] = record_from_row(row)
        return [found[i] for i in ids if i in found]

    def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {SELECT_LIST} FROM memories WHERE tenant=? AND id=? AND deleted_at IS NULL",
                (tenant, memory_id)).fetchone()
        return record_from_row(row) if row else None

    def history(self, tenant: str, user_id: str, key: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {SELECT_LIST} FROM memories WHERE tenant=? AND user_id=? AND key=? AND deleted_at IS NULL"
                " ORDER BY seq", (tenant, user_id, key)).fetchall()
        return [record_from_row(r) for r in rows]

    def by_change_set(self, tenant: str, change_set_id: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {SELECT_LIST} FROM memories WHERE tenant=? AND change_set_id=? AND deleted_at IS NULL"
                " ORDER BY seq", (tenant, change_set_id)).fetchall()
        return [record_from_row(r) for r in rows]

    def audit_log(self, q: AuditQuery) -> list[AuditEvent]:
        where, args = ["tenant=?"], [q.tenant]
        for column, op, value in (("user_id", "=", q.user_id), ("action", "=", q.action), ("at", ">=", q.since),
                                  ("at", "<", q.until), ("seq", ">", q.after_seq)):
            if value is not None:
                where.append(f"{column} {op} ?")
                args.append(value)
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, tenant, at, action, user_id, key, memory_id, op, reason, actor, detail FROM audit"
                f" WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?", (*args, q.limit)).fetchall()
        return [AuditEvent(tenant=r[1], at=r[2], action=r[3], user_id=r[4], key=r[5], memory_id=r[6], op=r[7],
                           reason=r[8], actor=r[9], detail=json.loads(r[10]), seq=r[0]) for r in rows]

    def put_doc(self, tenant: str, namespace: str, key: str, value: dict[str, Any], *, now: float,
                user_id: str | None = None, expires_at: float | None = None) -> None:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        with self._lock:
            self._conn.execute(
                "INSERT INTO documents (tenant, namespace, key, user_id, value, updated_at, expires_at)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (tenant, namespace, key) DO UPDATE SET"
                " user_id=excluded.user_id, value=excluded.value, updated_at=excluded.updated_at,"
                " expires_at=excluded.expires_at", (tenant, namespace, key, user_id, text, now, expires_at))

    def get_doc(self, tenant: str, namespace: str, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT value, expires_at FROM documents WHERE tenant=? AND namespace=? AND key=?",
                (tenant, namespace, key)).fetchone()
        if row is None or (now is not None and row[1] is not None and row[1] <= now):
            return None
        return dict(json.loads(row[0]))

    def list_docs(self, tenant: str, namespace: str, *, user_id: str | None = None, now: float | None = None,
                  limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        where, args = ["tenant=?", "namespace=?"], [tenant, namespace]
        if user_id is not None:
            where.append("user_id=?")
            args.append(user_id)
        if now is not None:
            where.append("(expires_at IS NULL OR expires_at > ?)")
            args.append(now)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT key, value FROM documents WHERE {' AND '.join(where)} ORDER BY key LIMIT ?",
                (*args, limit)).fetchall()
        return [(r[0], dict(json.loads(r[1]))) for r in rows]

    def delete_doc(self, tenant: str, namespace: str, key: str) -> bool:
        with self._lock:
            return self._conn.execute("DELETE FROM documents WHERE tenant=? AND namespace=? AND key=?",
                                      (tenant, namespace, key)).rowcount > 0

    def delete_user_docs(self, tenant: str, user_id: str) -> int:
        with self._lock:
            return int(self._conn.execute("DELETE FROM documents WHERE tenant=? AND user_id=?",
                                          (tenant, user_id)).rowcount)

    def users(self, tenant: str, limit: int = 1000) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT user_id FROM memories WHERE tenant=? AND deleted_at IS NULL ORDER BY user_id LIMIT ?",
                (tenant, limit)).fetchall()
        return [r[0] for r in rows]

    def count(self, tenant: str | None = None) -> int:
        with self._lock:
            if tenant is None:
                return int(self._conn.execute("SELECT count(*) FROM memories").fetchone()[0])
            return int(self._conn.execute("SELECT count(*) FROM memories WHERE tenant=?", (tenant,)).fetchone()[0])

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


def _live_where(q: LiveQuery) -> tuple[str, list[Any]]:
    where = [f"tenant=? AND user_id=? AND {_LIVE_WHERE} AND (expires_at IS NULL OR expires_at > ?)"]
    args: list[Any] = [q.tenant, q.user_id, q.now]
    if not q.include_retracted:
        where.append("retracted=0")
    if q.kinds is not None:
        where.append(f"kind IN ({','.join('?' * len(q.kinds))})")
        args.extend(k.value for k in q.kinds)
    if q.keys is not None:
        where.append(f"key IN ({','.join('?' * len(q.keys))})")
        args.extend(q.keys)
    if q.session_id is not None:
        where.append("session_id=?")
        args.append(q.session_id)
    return " AND ".join(where), args


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
