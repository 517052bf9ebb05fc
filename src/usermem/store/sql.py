"""One SQL vocabulary for the SQL backends (store/sqlite.py, store/postgres.py).

`SqlDialect` holds what differs between SQLite and PostgreSQL — the placeholder, how a list parameter
is passed, how booleans and byte order are spelled, the extra `value_raw` column — and builds every
statement of the store once, at import time (`SQLITE`, `POSTGRES`). The query builders that depend on
their arguments (live filter, soft-delete filter, audit filter, document listing) are shared too; the
live filter's SQL is cached per shape, so the recall hot path only assembles its parameters.

The backends keep only what is truly driver-specific: connections, locks, transactions, how values are
encoded (JSON text vs JSONB / bytea), error translation, compaction. No business rule lives here: which
rows are "live" is the store's definition of a current version (not superseded, not deleted, not
expired at `now`, not retracted unless asked), the same on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from usermem.model import KIND_REGISTRY, Kind
from usermem.policy.decay import RANK_FLOOR, USE_SHIFT, time_constant
from usermem.store.base import SCORE_COLUMNS, AuditQuery, LiveQuery, prefix_bounds
from usermem.store.rows import COLUMNS

# A current version: neither replaced by a newer one nor deleted (expiry is judged against `now`).
CURRENT = "superseded_by IS NULL AND deleted_at IS NULL"
AUDIT_COLUMNS = ("seq", "tenant", "at", "action", "user_id", "key", "memory_id", "op", "reason", "actor", "detail")
_AUDIT_INSERT_COLUMNS = AUDIT_COLUMNS[1:]
_AUDIT_FILTERS = (("user_id", "="), ("action", "="), ("at", ">="), ("at", "<"), ("seq", ">"))


@dataclass(frozen=True, eq=False)
class SqlDialect:
    """The differences between the SQL backends, and the statements built from them."""

    name: Literal["sqlite", "postgres"]
    mark: str  # the placeholder: "?" (sqlite3) or "%s" (psycopg)
    list_param: bool  # True: `col = ANY(%s)` with one list parameter; False: `col IN (?,?,...)`
    not_retracted: str  # boolean spelling: "retracted=0" (INTEGER) or "NOT retracted" (boolean)
    byte_order: str  # appended to ORDER BY text columns so both backends sort by code point
    value_columns: tuple[str, ...]  # how a JSON value is stored: ("value",) or ("value", "value_raw")
    detail_cast: str = ""  # cast of the audit detail parameter ("::jsonb")
    returning: bool = False  # UPDATE ... RETURNING is used (PostgreSQL; SQLite's needs 3.35)
    # Built in __post_init__: the fixed statements by name (never modified afterwards), the memory columns
    # in row order (COLUMNS, then value_raw on PostgreSQL) and their SELECT list.
    stmt: dict[str, str] = field(init=False, default_factory=dict, repr=False)
    columns: tuple[str, ...] = field(init=False, default=())
    select_list: str = field(init=False, default="")

    def __post_init__(self) -> None:
        p = self.mark
        columns = COLUMNS + tuple(c for c in self.value_columns if c not in COLUMNS)
        select = ", ".join(columns)
        by_id = f"SELECT {select} FROM memories WHERE tenant={p} AND id={p} AND deleted_at IS NULL"
        docs = ", ".join(("tenant", "namespace", "key", "user_id", *self.value_columns, "updated_at", "expires_at"))
        doc_update = ", ".join(f"{c}=excluded.{c}" for c in ("user_id", *self.value_columns, "updated_at",
                                                                "expires_at"))
        self.stmt.update({
            "insert": f"INSERT INTO memories ({select}) VALUES ({self.marks(len(columns))})",
            "head": f"SELECT {select} FROM memories WHERE tenant={p} AND user_id={p} AND key={p} AND {CURRENT}",
            "get": by_id,
            "history": f"SELECT {select} FROM memories WHERE tenant={p} AND user_id={p} AND key={p}"
                       " AND deleted_at IS NULL ORDER BY seq",
            "by_change_set": f"SELECT {select} FROM memories WHERE tenant={p} AND change_set_id={p}"
                             " AND deleted_at IS NULL ORDER BY seq",
            "supersede": f"UPDATE memories SET superseded_by={p}, superseded_at={p} WHERE tenant={p} AND id={p}"
                         f" AND {CURRENT}" + (" RETURNING id" if self.returning else ""),
            "insert_audit": f"INSERT INTO audit ({', '.join(_AUDIT_INSERT_COLUMNS)})"
                            f" VALUES ({self.marks(len(_AUDIT_INSERT_COLUMNS) - 1)},{p}{self.detail_cast})",
            "purge_where": f"((deleted_at IS NOT NULL AND deleted_at <= {p}) OR (expires_at IS NOT NULL"
                           f" AND expires_at <= {p}))",
            "put_doc": f"INSERT INTO documents ({docs}) VALUES ({self.marks(len(self.value_columns) + 6)})"
                       f" ON CONFLICT (tenant, namespace, key) DO UPDATE SET {doc_update}",
            "get_doc": f"SELECT {', '.join(self.value_columns)}, expires_at FROM documents"
                       f" WHERE tenant={p} AND namespace={p} AND key={p}",
            "delete_doc": f"DELETE FROM documents WHERE tenant={p} AND namespace={p} AND key={p}",
            "delete_user_docs": f"DELETE FROM documents WHERE tenant={p} AND user_id={p}",
            "users": f"SELECT DISTINCT user_id{self.byte_order} FROM memories WHERE tenant={p}"
                     f" AND deleted_at IS NULL ORDER BY 1 LIMIT {p}",
            # A page of user ids after a cursor, optionally starting with a prefix (a code-point range).
            "users_after": f"SELECT DISTINCT user_id{self.byte_order} FROM memories WHERE tenant={p}"
                           f" AND deleted_at IS NULL AND user_id{self.byte_order} > {p} ORDER BY 1 LIMIT {p}",
            "users_prefix": f"SELECT DISTINCT user_id{self.byte_order} FROM memories WHERE tenant={p}"
                            f" AND deleted_at IS NULL AND user_id{self.byte_order} > {p}"
                            f" AND user_id{self.byte_order} >= {p} AND user_id{self.byte_order} < {p}"
                            f" ORDER BY 1 LIMIT {p}",
            "count": "SELECT count(*) FROM memories",
            "count_tenant": f"SELECT count(*) FROM memories WHERE tenant={p}",
            "schema_version": "SELECT max(version) FROM schema_migrations",
        })
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "select_list", select)

    # -- small pieces ------------------------------------------------------------------------------------

    def marks(self, n: int) -> str:
        return ",".join([self.mark] * n)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: (condition, parameters)."""
        if self.list_param:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({self.marks(len(values))})", list(values)

    # -- memories ----------------------------------------------------------------------------------------

    def live(self, q: LiveQuery, *, scores: bool = False, records: bool = False) -> tuple[str, list[Any]]:
        """SELECT of the user's live rows matching q: full records, or the ScoreRow columns (hot path);
        `records` with `scores`: each row's other record columns follow its ScoreRow columns, as in `ranked`."""
        text = _live_sql(self, scores, q.include_retracted, None if q.kinds is None else len(q.kinds),
                         None if q.keys is None else len(q.keys), q.session_id is not None, records)
        args: list[Any] = [q.tenant, q.user_id, q.now]
        if q.kinds is not None:
            kinds = [k.value for k in q.kinds]
            args.append(kinds) if self.list_param else args.extend(kinds)
        if q.keys is not None:
            args.append(list(q.keys)) if self.list_param else args.extend(q.keys)
        if q.session_id is not None:
            args.append(q.session_id)
        return text, args

    def rank_expression(self) -> str:
        """The SQL of policy.decay.rank_time with each kind's own time constant: the expression the
        `memories_rank` index keeps (migration 0006) and the ranked read orders by. Both texts must be
        the same to the byte for the planner to use the index; tests/test_ranked_recall.py checks it."""
        greatest = "GREATEST" if self.name == "postgres" else "MAX"
        f = "::float8" if self.name == "postgres" else ""
        arms = []
        for kind in Kind:
            tau = time_constant(KIND_REGISTRY[kind].half_life_seconds)
            arms.append(f"WHEN '{kind.value}' THEN {greatest}(created_at, COALESCE(last_confirmed_at, created_at),"
                        f" COALESCE(last_used_at + {USE_SHIFT * tau!r}{f}, created_at))"
                        f" + ln({greatest}(importance * confidence, {RANK_FLOOR!r}{f})) * {tau!r}{f}")
        return f"(CASE kind {' '.join(arms)} END)"

    def ranked(self, q: LiveQuery, batches: Sequence[tuple[Kind, int, int]], *,
               records: bool = False) -> tuple[str, list[Any]]:
        """The ScoreRow columns of q's live rows, per kind in `kinds` best rank_time first: one
        `SELECT ... ORDER BY <rank> DESC LIMIT n OFFSET m` per kind (each an index range scan of
        `memories_rank`), joined by UNION ALL; `batches` holds (kind, limit, offset) per kind. q.kinds and
        q.keys are not applied (callers choose the kinds, and read rows of given keys directly). `records`:
        each row's other record columns follow its ScoreRow columns (a read ahead keeps the rows for get_many:
        `record_layout`)."""
        text = _ranked_sql(self, len(batches), q.include_retracted, q.session_id is not None, records)
        args: list[Any] = []
        for kind, limit, offset in batches:
            args += [q.tenant, q.user_id, kind.value, q.now]
            if q.session_id is not None:
                args.append(q.session_id)
            args += [limit, offset]
        return text, args

    def soft_delete_where(self, tenant: str, user_id: str, keys: Sequence[str] | None,
                          created_from: float | None, created_until: float | None,
                          ids: Sequence[str] | None = None) -> tuple[str, list[Any]]:
        """The versions a soft delete marks: every non-deleted version of the user, of `keys`, created in
        [created_from, created_until), among `ids`. `keys=[]` / `ids=[]` match nothing (callers return early)."""
        p = self.mark
        where = [f"tenant={p}", f"user_id={p}", "deleted_at IS NULL"]
        args: list[Any] = [tenant, user_id]
        if ids is not None:
            cond, more = self.in_list("id", ids)
            where.append(cond)
            args.extend(more)
        if keys is not None:
            cond, more = self.in_list("key", keys)
            where.append(cond)
            args.extend(more)
        if created_from is not None:
            where.append(f"created_at >= {p}")
            args.append(created_from)
        if created_until is not None:
            where.append(f"created_at < {p}")
            args.append(created_until)
        return " AND ".join(where), args

    def touch(self, column: str, n_ids: int | None) -> str:
        """UPDATE moving `column` (last_used_at / last_confirmed_at) forward on ids of one tenant.
        Parameters: at, tenant, [user_id when n_ids is None], ids..., at. `n_ids=None`: one list parameter
        and a user filter (PostgreSQL, under the user's lock); else `n_ids` placeholders."""
        if column not in ("last_used_at", "last_confirmed_at"):
            raise ValueError(f"not a touch column: {column}")
        p = self.mark
        ids = f"id = ANY({p})" if n_ids is None else f"id IN ({self.marks(n_ids)})"
        user = f" AND user_id={p}" if n_ids is None else ""
        return (f"UPDATE memories SET {column}={p} WHERE tenant={p}{user} AND {ids}"
                f" AND ({column} IS NULL OR {column} < {p})")

    def get_many(self, n_ids: int = 0) -> str:
        """Non-deleted records of one tenant by id (parameters: tenant, then the ids: `n_ids` of them on
        SQLite, one list on PostgreSQL, where `n_ids` is not used). Built once per size."""
        return _get_many_sql(self, 0 if self.list_param else n_ids)

    # -- audit and documents -----------------------------------------------------------------------------

    def audit_log(self, q: AuditQuery) -> tuple[str, list[Any]]:
        p = self.mark
        where = [f"tenant={p}"]
        args: list[Any] = [q.tenant]
        for (column, op), value in zip(_AUDIT_FILTERS, (q.user_id, q.action, q.since, q.until, q.after_seq),
                                       strict=True):
            if value is not None:
                where.append(f"{column} {op} {p}")
                args.append(value)
        args.append(q.limit)
        return (f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit WHERE {' AND '.join(where)} ORDER BY seq LIMIT {p}",
                args)

    def list_docs(self, tenant: str, namespace: str, user_id: str | None, now: float | None,
                  limit: int) -> tuple[str, list[Any]]:
        p = self.mark
        where = [f"tenant={p}", f"namespace={p}"]
        args: list[Any] = [tenant, namespace]
        if user_id is not None:
            where.append(f"user_id={p}")
            args.append(user_id)
        if now is not None:
            where.append(f"(expires_at IS NULL OR expires_at > {p})")
            args.append(now)
        args.append(limit)
        return (f"SELECT key, {', '.join(self.value_columns)} FROM documents WHERE {' AND '.join(where)}"
                f" ORDER BY key{self.byte_order} LIMIT {p}", args)


@lru_cache(maxsize=512)
def _live_sql(d: SqlDialect, scores: bool, include_retracted: bool, n_kinds: int | None, n_keys: int | None,
              session: bool, records: bool = False) -> str:
    p = d.mark
    where = [f"tenant={p} AND user_id={p} AND {CURRENT} AND (expires_at IS NULL OR expires_at > {p})"]
    if not include_retracted:
        where.append(d.not_retracted)
    if n_kinds is not None:
        where.append(f"kind = ANY({p})" if d.list_param else f"kind IN ({d.marks(n_kinds)})")
    if n_keys is not None:
        where.append(f"key = ANY({p})" if d.list_param else f"key IN ({d.marks(n_keys)})")
    if session:
        where.append(f"session_id={p}")
    columns = ", ".join(SCORE_COLUMNS) if scores else d.select_list
    if scores and records:
        columns += f", {_record_columns(d)}"
    return f"SELECT {columns} FROM memories WHERE {' AND '.join(where)}"


def _record_columns(d: SqlDialect) -> str:
    """The columns of a record that are not ScoreRow columns, read after those (a read ahead keeps such rows
    for get_many and rebuilds a record from one with `record_layout`). With PostgreSQL the value comes as
    text: only the winners' values are decoded (store/postgres.py)."""
    return ", ".join(f"{c}::text" if c == "value" and d.name == "postgres" else c
                     for c in d.columns if c not in SCORE_COLUMNS)


def record_layout(d: SqlDialect) -> tuple[int, ...]:
    """Where each of `d.columns` is in a row of the ScoreRow columns followed by the record's others (a
    `records=True` read of `live` or `ranked`)."""
    combined = [*SCORE_COLUMNS, *(c for c in d.columns if c not in SCORE_COLUMNS)]
    return tuple(combined.index(c) for c in d.columns)


@lru_cache(maxsize=256)
def _get_many_sql(d: SqlDialect, n_ids: int) -> str:
    p = d.mark
    ids = f"id = ANY({p})" if d.list_param else f"id IN ({d.marks(n_ids)})"
    # SQLite: `+tenant` keeps the planner on the id index (unary plus disables the tenant index).
    tenant = "tenant" if d.list_param else "+tenant"
    return f"SELECT {d.select_list} FROM memories WHERE {tenant}={p} AND {ids} AND deleted_at IS NULL"


@lru_cache(maxsize=64)
def _ranked_sql(d: SqlDialect, n_kinds: int, include_retracted: bool, session: bool, records: bool = False) -> str:
    p = d.mark
    where = [f"tenant={p} AND user_id={p} AND kind={p} AND {CURRENT} AND (expires_at IS NULL OR expires_at > {p})"]
    if not include_retracted:
        where.append(d.not_retracted)
    if session:
        where.append(f"session_id={p}")
    hint = " INDEXED BY memories_rank" if d.name == "sqlite" else ""
    columns = ", ".join(SCORE_COLUMNS) + (f", {_record_columns(d)}" if records else "")
    one = (f"SELECT {columns} FROM memories{hint} WHERE {' AND '.join(where)}"
           f" ORDER BY {d.rank_expression()} DESC LIMIT {p} OFFSET {p}")
    if n_kinds == 1:
        return one
    return " UNION ALL ".join(f"SELECT * FROM ({one}) AS r{i}" for i in range(n_kinds))


SQLITE = SqlDialect("sqlite", "?", list_param=False, not_retracted="retracted=0", byte_order="",
                    value_columns=("value",))
POSTGRES = SqlDialect("postgres", "%s", list_param=True, not_retracted="NOT retracted", byte_order=' COLLATE "C"',
                      value_columns=("value", "value_raw"), detail_cast="::jsonb", returning=True)


def users_query(tenant: str, limit: int, prefix: str | None, after: str | None) -> tuple[str, tuple[Any, ...]]:
    """(statement name, arguments) of a users() page: all, after a cursor, or with a prefix."""
    if not prefix and after is None:
        return "users", (tenant, limit)
    if not prefix:
        return "users_after", (tenant, after, limit)
    low, high = prefix_bounds(prefix)
    return "users_prefix", (tenant, after or "", low, high, limit)
