"""The transactional outbox and federation bookkeeping of the SQL stores (`StoreCapabilities.outbox`).

Three tables of migration 0008: `outbox`, `applied_events`, `version_clock`. Statements only — what an
event means, when a remote change wins and what to publish are the engine's and policy's business.

`tx_conn(tx)` gives the connection a transaction runs on (SQLite: the store's one connection, held under
its lock by the calling thread; PostgreSQL: the pooled connection of the transaction), so rows written
through the `tx` methods commit or roll back with the change. `conn(write)` gives a connection for the
methods outside a transaction (the relay's reads and removals).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from usermem.store.base import OutboxEntry, VersionStamp, WrappingTx, WriteTx, chunked
from usermem.store.sql import SqlDialect

TxConn = Callable[[WriteTx], Any]
Conn = Callable[[bool], AbstractContextManager[Any]]


def innermost(tx: WriteTx) -> WriteTx:
    """The store's own transaction under any wrappers (tiers, the engine's staging)."""
    while isinstance(tx, WrappingTx):
        tx = tx.inner
    return tx


class SqlOutbox:
    """`Outbox` over the tables of migration 0008, for either SQL dialect."""

    def __init__(self, dialect: SqlDialect, tx_conn: TxConn, conn: Conn) -> None:
        self._d = dialect
        self._tx_conn = tx_conn
        self._conn = conn
        p = dialect.mark
        self._insert_applied = (f"INSERT INTO applied_events (event_id, tenant, applied_at) VALUES ({p},{p},{p})"
                                " ON CONFLICT (tenant, event_id) DO NOTHING RETURNING event_id")
        self._insert_stamp = (f"INSERT INTO version_clock (tenant, memory_id, hlc, client_id, origin, event_id)"
                              f" VALUES ({p},{p},{p},{p},{p},{p}) ON CONFLICT (tenant, memory_id) DO NOTHING")

    def _txc(self, tx: WriteTx) -> Any:
        return self._tx_conn(innermost(tx))

    def add(self, tx: WriteTx, entry: OutboxEntry) -> None:
        p = self._d.mark
        self._txc(tx).execute(
            f"INSERT INTO outbox (event_id, tenant, user_id, subject, payload, created_at)"
            f" VALUES ({p},{p},{p},{p},{p},{p})",
            (entry.event_id, entry.tenant, entry.user_id, entry.subject, entry.payload, entry.created_at))

    def pending(self, limit: int = 256) -> list[OutboxEntry]:
        p = self._d.mark
        with self._conn(False) as c:
            rows = c.execute(f"SELECT event_id, tenant, user_id, subject, payload, created_at, seq FROM outbox"
                             f" ORDER BY seq LIMIT {p}", (limit,)).fetchall()
        return [OutboxEntry(r[0], r[1], r[2], r[3], r[4], float(r[5]), int(r[6])) for r in rows]

    def remove(self, event_ids: Sequence[str]) -> int:
        n = 0
        for part in chunked(list(event_ids)):
            cond, args = self._d.in_list("event_id", part)
            with self._conn(True) as c:
                n += int(c.execute(f"DELETE FROM outbox WHERE {cond}", args).rowcount)
        return n

    def discard_user(self, tenant: str, user_id: str, tx: WriteTx | None = None) -> int:
        p = self._d.mark
        stmt = f"DELETE FROM outbox WHERE tenant={p} AND user_id={p} RETURNING event_id"
        if tx is not None:
            return len(self._txc(tx).execute(stmt, (tenant, user_id)).fetchall())
        with self._conn(True) as c:
            return len(c.execute(stmt, (tenant, user_id)).fetchall())

    def mark_applied(self, tx: WriteTx, tenant: str, event_id: str, at: float) -> bool:
        # RETURNING, not rowcount: PostgreSQL's pipelined transactions report rows only once results are read.
        return self._txc(tx).execute(self._insert_applied, (event_id, tenant, at)).fetchone() is not None

    def applied(self, tenant: str, event_ids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        p = self._d.mark
        for part in chunked(list(event_ids)):
            cond, args = self._d.in_list("event_id", part)
            with self._conn(False) as c:
                out.update(r[0] for r in c.execute(f"SELECT event_id FROM applied_events WHERE tenant={p} AND {cond}",
                                                   [tenant, *args]))
        return out

    def stamp(self, tx: WriteTx, tenant: str, stamp: VersionStamp) -> None:
        self._txc(tx).execute(self._insert_stamp, (tenant, stamp.memory_id, stamp.hlc, stamp.client_id,
                                                   stamp.origin, stamp.event_id))

    def stamps(self, tx: WriteTx, tenant: str, memory_ids: Sequence[str]) -> dict[str, VersionStamp]:
        if not memory_ids:
            return {}
        c = self._txc(tx)
        p = self._d.mark
        cond, args = self._d.in_list("memory_id", list(memory_ids))
        rows = c.execute(f"SELECT memory_id, hlc, client_id, origin, event_id FROM version_clock"
                         f" WHERE tenant={p} AND {cond}", [tenant, *args]).fetchall()
        return {r[0]: VersionStamp(r[0], r[1], r[2], r[3], r[4]) for r in rows}

    def max_hlc(self) -> str | None:
        with self._conn(False) as c:
            row = c.execute("SELECT max(hlc) FROM version_clock").fetchone()
        return None if row is None or row[0] is None else str(row[0])

