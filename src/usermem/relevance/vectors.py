"""Where memory vectors live: beside the memories, in tables the store's migrations create.

`open_index(store, model_id)` picks the index from `store.capabilities.vectors` (never from class names)
and reaches the tables only through the store's public `store.sql(tenant)`, so on PostgreSQL with
row-level security every per-user statement runs scoped to its tenant.

* SQLite: `relevance_vectors` holds one float32 BLOB per (tenant, user, key) — the current version's
  vector — with the model id, the memory's kind, its event time and its index terms.
* PostgreSQL: the same table with a pgvector `vector` column when the `vector` extension is present
  (the store's optional migration 0004 is applied only then). Without pgvector there is no vector table
  and recall falls back to lexical scoring (announced once, see hybrid.py).

Search is exact on both: the user's rows are loaded once into a numpy matrix (cached per process in an
LRU of CACHE_USERS users and CACHE_BYTES of matrices) and scored with one matrix-vector product. Every
change of the user's vectors bumps a per-user generation number in `relevance_generation` in the same
transaction, in whichever process or worker makes it; `load` reads it before it serves a snapshot (the one
statement a query recall already made), so a change made elsewhere is seen by the next recall and a
snapshot taken before an erasure is never served again (it is dropped before its replacement is built).
A rebuild after a change reuses the stale snapshot's rows that did not change and reads only the others: the
rows whose `ver` (the user's generation when the row was written; migration 0009 of either backend) is above
the stale snapshot's highest, through an index (DELTA_SHARE of the rows at most, else all are read), the
others keeping their vectors, index terms and language flags (`_patched`). On PostgreSQL this is one
statement with the count that reveals erasures, and a write bumps the generation before it writes its rows
(versions in commit order); where migration 0009 is still pending there, every row's metadata is read and
the vectors of rows whose xmin, memory id and model are unchanged are reused (DELTA_KEYS at most read by key,
else all). On both, the BM25 index is derived from the stale snapshot's, tokenizing only the rows whose index
terms changed (`seed_bm25`). On
PostgreSQL the vectors travel in binary (`vector_send`) and are scaled to unit length as `<=>` does; a user
whose matrix alone exceeds CACHE_BYTES is searched in the database instead (`dense_db`: `ORDER BY vec <=> q`,
exact, no ANN index).

Rows carry no memory value, only its vector and index terms, and erasure deletes them with the
memory (`erase`, `drop_orphans`).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from usermem.relevance.lexical import BM25Index
from usermem.store.base import ReadAhead, StoreCapabilities

log = logging.getLogger("usermem.relevance")


@dataclass(frozen=True, slots=True)
class VectorRow:
    tenant: str
    user_id: str
    key: str
    memory_id: str
    kind: str
    at: float  # event time when known, else creation time; used by the event-time filter
    model: str
    vec: np.ndarray
    tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RowVersions:
    """SQLite: what rebuilding the next snapshot from this one needs (SQLiteVectorIndex._delta)."""

    model: str | None  # the index's model when the snapshot was built (has_vec)
    top: int  # the highest row version in the snapshot (-1: none)
    unversioned: list[int]  # positions of rows without a version (read again at every rebuild)


@dataclass
class UserIndex:
    """One user's indexed rows, as arrays (a snapshot at generation `gen`)."""

    gen: int
    keys: list[str]
    ids: list[str]
    kinds: np.ndarray  # object array of kind names
    at: np.ndarray  # float64
    models: list[str]
    matrix: np.ndarray | None  # (n, dim) float32 for rows of the current model, else None (dense in the DB)
    has_vec: np.ndarray  # bool: row has a vector of the current model
    tokens: list[tuple[str, ...]]
    _bm25: BM25Index | None = field(default=None, repr=False)
    position: dict[str, int] = field(default_factory=dict)
    _sorted: tuple[list[str], list[int]] | None = field(default=None, repr=False)
    # Each row's version (PostgreSQL: its xmin; SQLite: its `ver` column, the user's generation when the row
    # was written; None: unversioned, never reused), so the next snapshot reuses the vectors of rows that did
    # not change and reads the others only.
    versions: list[int | None] | None = field(default=None, repr=False)
    # SQLite: what the next snapshot is rebuilt from; None: the next build is full (also when a row of the
    # current model held a vector of another size, left zero).
    delta: RowVersions | None = field(default=None, repr=False)
    # Per row: the memory's own words hold Chinese characters (HybridRelevance.row_chinese, once per snapshot).
    chinese: np.ndarray | None = field(default=None, repr=False)
    # (flags, positions): `chinese` of the rows carried over from the previous snapshot, and the positions of
    # the rows whose flag is still to compute (row_chinese computes only those).
    chinese_seed: tuple[np.ndarray, list[int]] | None = field(default=None, repr=False)
    # (index, old_of_new): an earlier snapshot's BM25 index and, per row of this one, the row of that snapshot
    # holding the same index terms (−1: changed or new), so `bm25` tokenizes the changed rows only (seed_bm25).
    bm25_seed: tuple[BM25Index, np.ndarray] | None = field(default=None, repr=False)
    # The last query vector and its cosines with every row (`cosines`): one recall's candidate steps read them twice.
    _last_cosines: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _id_array: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _with_vec: int | None = field(default=None, init=False, repr=False, compare=False)
    # (Chinese rows, other rows) with a vector (HybridRelevance._language_candidates of a recall without filters).
    language_groups: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False,
                                                                  compare=False)

    def __post_init__(self) -> None:
        if len(self.position) != len(self.keys):  # given: the previous snapshot's, for the same keys
            self.position = {k: i for i, k in enumerate(self.keys)}

    @property
    def with_vec(self) -> int:
        """How many rows have a vector of the current model (counted once per snapshot)."""
        got = self._with_vec
        if got is None:
            got = self._with_vec = int(np.count_nonzero(self.has_vec))
        return got

    @property
    def id_array(self) -> np.ndarray:
        """`ids` as an object array (built once per snapshot): the recall path compares its candidates' memory
        ids with their rows' in one array operation."""
        got = self._id_array
        if got is None or len(got) != len(self.ids):
            got = self._id_array = np.array(self.ids, dtype=object)
        return got

    def cosines(self, q: np.ndarray) -> np.ndarray:
        """`matrix @ q` for every row (the matrix must be set), kept for the same query vector object: the
        per-language candidates and the dense top-n of one recall share one product. einsum runs in this
        thread: BLAS's own threads made p95 spike to ~12 ms on a busy 2-core host (0.3 ms here). Another
        thread's query only replaces the pair (one reference assignment), so a caller never gets another
        query's cosines."""
        last = self._last_cosines
        if last is not None and last[0] is q:
            return last[1]
        assert self.matrix is not None
        sims: np.ndarray = np.einsum("ij,j->i", self.matrix, q)
        self._last_cosines = (q, sims)
        return sims

    def under(self, fields: Iterable[str]) -> list[int]:
        """Positions (ascending) of the keys that are one of `fields` or start with "<field>.": a binary
        search in the snapshot's sorted keys instead of a test per row (recall with planner fields)."""
        if self._sorted is None:
            order = sorted(range(len(self.keys)), key=self.keys.__getitem__)
            self._sorted = ([self.keys[i] for i in order], order)
        skeys, order = self._sorted
        out: set[int] = set()
        for f in fields:
            dotted = f + "."
            # Every key == f or starting with f + "." sorts in [f, f + "/"): "/" follows "." in code points.
            for j in range(bisect_left(skeys, f), bisect_left(skeys, f + "/")):
                k = skeys[j]
                if k == f or k.startswith(dotted):
                    out.add(order[j])
        return sorted(out)

    @property
    def bm25(self) -> BM25Index:
        """The BM25 index of the rows' index terms, built at first use: from the earlier snapshot's
        (`bm25_seed`, only the changed rows tokenized) when there is one, else from scratch; the same
        scores either way (BM25Index.derived)."""
        if self._bm25 is None:
            seed = self.bm25_seed
            if seed is not None and len(seed[1]) == len(self.tokens):
                self._bm25 = BM25Index.derived(seed[0], seed[1], self.tokens)
            else:
                self._bm25 = BM25Index(self.tokens)
            self.bm25_seed = None  # the earlier index can go
        return self._bm25

    @property
    def built_bm25(self) -> BM25Index | None:
        """The BM25 index if this snapshot built one already (never builds it: a later snapshot derives from it)."""
        return self._bm25

    @property
    def sorted_keys(self) -> tuple[list[str], list[int]] | None:
        """The sorted keys and their positions, if `under` computed them already."""
        return self._sorted

    def share_sorted_keys(self, stale: UserIndex) -> None:
        """Take the stale snapshot's sorted keys (the caller vouches both have the same keys in the same order)."""
        self._sorted = stale.sorted_keys

    def seed_bm25(self, stale: UserIndex, old_of_new: np.ndarray) -> None:
        """Let `bm25` start from the `stale` snapshot's index: `old_of_new[i]` is the row of `stale` whose index
        terms row i has (equal: the caller vouches), −1 for a changed or new row. When `stale` built no index
        of its own, from the one it was seeded with (the two mappings composed)."""
        if self._bm25 is not None or len(old_of_new) != len(self.tokens):
            return
        base = stale.built_bm25
        if base is None:
            seed = stale.bm25_seed
            if seed is None or len(seed[1]) != len(stale.tokens):
                return
            base, prev = seed
            composed = np.full(len(old_of_new), -1, dtype=np.int64)
            carried = old_of_new >= 0
            composed[carried] = prev[old_of_new[carried]]
            old_of_new = composed
        elif len(old_of_new) == base.n and bool(np.array_equal(old_of_new, np.arange(base.n))):
            self._bm25 = base  # the same index terms in the same order
            return
        self.bm25_seed = (base, old_of_new)

    def mask(self, kinds: Sequence[str] | None, at_from: float | None, at_until: float | None) -> np.ndarray:
        m = np.ones(len(self.keys), dtype=bool)
        if kinds is not None:
            m &= np.isin(self.kinds, list(kinds))
        if at_from is not None:
            m &= self.at >= at_from
        if at_until is not None:
            m &= self.at < at_until
        return m


class VectorIndex(Protocol):
    """Storage of memory vectors. `model_id` is the current embedder's; other models' rows count as missing."""

    model_id: str | None

    def upsert(self, rows: Sequence[VectorRow]) -> None: ...

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        """Remove vectors of the keys, or (keys None) every vector whose memory is no longer current."""

    def drop_orphans(self, deleted_before: float | None = None, expired_before: float | None = None) -> int:
        """Remove vectors whose memory is gone, deleted or superseded, or expired before `expired_before`
        (all tenants). Runs before the store purges, so the store's compaction erases these bytes too."""

    def load(self, tenant: str, user_id: str) -> UserIndex: ...

    def reads_ahead(self, tenant: str, user_id: str) -> list[ReadAhead]:
        """The store reads `load(tenant, user_id)` makes that a caller may announce to the store's read_ahead
        block (StoreCapabilities.read_ahead) with its own: the generation check on PostgreSQL; [] elsewhere."""

    def cached(self, tenant: str, user_id: str) -> UserIndex | None:
        """The snapshot this process holds for the user, as it is (not validated; for tests and diagnostics)."""

    def dense(self, tenant: str, user_id: str, q: np.ndarray, *, limit: int, keys: Sequence[str] | None = None,
              kinds: Sequence[str] | None = None, at_from: float | None = None,
              at_until: float | None = None, also: Sequence[str] = (),
              snapshot: UserIndex | None = None, also_rows: np.ndarray | None = None) -> dict[str, float]:
        """Cosine similarity by key: the best `limit` rows (plus the rows of `also`), or exactly the rows of `keys`.
        `snapshot`: the user's snapshot this caller just had from `load` (saves validating it again); `also_rows`:
        more rows like `also`, given by their positions in `snapshot` (the recall path has positions)."""

    def models(self) -> dict[str, int]:
        """Vectors stored per model id."""

    def indexed(self, tenant: str, user_id: str) -> dict[str, tuple[str, str]]:
        """key -> (memory_id, model) of the user's rows."""

    def user_pairs(self) -> list[tuple[str, str]]:
        """(tenant, user) of every user with current memories (for reindex)."""

    def close(self) -> None: ...


def _blob(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype=np.float32).tobytes()


class _CacheMixin:
    """Per-process LRU of UserIndex snapshots keyed by (tenant, user), checked against the generation.

    A snapshot is only ever returned after its generation was compared with the one just read from the
    database (every write, erase or orphan sweep of the user's vectors bumps it in the same transaction, in
    whichever process ran it), so a snapshot taken before a change is unreachable afterwards: a stale one
    is dropped before its replacement is built, and this process's own erasures drop it at once."""

    CACHE_USERS = 64
    # float32 matrices held per process, beside CACHE_USERS; pgvector: a user whose matrix alone exceeds it is
    # searched in the database (SQLite has no such search: its snapshot is kept however large)
    CACHE_BYTES = 256 << 20

    def _init_cache(self) -> None:
        self._cache: OrderedDict[tuple[str, str], UserIndex] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _cached(self, tenant: str, user_id: str, gen: int,
                build: Callable[[UserIndex | None], UserIndex]) -> UserIndex:
        """The snapshot at `gen`; `build(stale)` makes it, given the stale snapshot it replaces (or None)."""
        k = (tenant, user_id)
        with self._cache_lock:
            hit = self._cache.get(k)
            if hit is not None:
                if hit.gen == gen:
                    self._cache.move_to_end(k)
                    return hit
                del self._cache[k]  # stale: never served again, even if the rebuild fails
        built = build(hit)
        with self._cache_lock:
            self._cache[k] = built
            self._cache.move_to_end(k)
            while len(self._cache) > self.CACHE_USERS:
                self._cache.popitem(last=False)
            held = sum(_nbytes(u) for u in self._cache.values())
            for key in list(self._cache)[:-1]:  # least recently used first, never the one just built
                if held <= self.CACHE_BYTES:
                    break
                old = self._cache[key]
                if old.matrix is None:
                    continue
                held -= _nbytes(old)
                lean = self._shed(old)
                if lean is None:
                    del self._cache[key]
                else:
                    self._cache[key] = lean  # keeps its place in the LRU
        return built

    def _shed(self, ux: UserIndex) -> UserIndex | None:
        """The snapshot without its matrix, to keep when matrices exceed CACHE_BYTES; None: evict it whole."""
        return None

    def _drop(self, pairs: Iterable[tuple[str, str]]) -> None:
        with self._cache_lock:
            for k in pairs:
                self._cache.pop(k, None)

    def cached(self, tenant: str, user_id: str) -> UserIndex | None:
        """The snapshot this process holds for the user, as it is (not validated; for tests and diagnostics)."""
        with self._cache_lock:
            return self._cache.get((tenant, user_id))

    def _forget_cache(self) -> None:
        with self._cache_lock:
            self._cache.clear()


def _nbytes(ux: UserIndex) -> int:
    return 0 if ux.matrix is None else int(ux.matrix.nbytes)


def _dense_local(ux: UserIndex, q: np.ndarray, *, limit: int, keys: Sequence[str] | None,
                 kinds: Sequence[str] | None, at_from: float | None, at_until: float | None,
                 also: Sequence[str], also_rows: np.ndarray | None = None) -> dict[str, float]:
    """VectorIndex.dense over the snapshot's matrix (one matrix-vector product)."""
    if ux.matrix is None or ux.matrix.shape[1] != q.shape[0] or not len(ux.keys):
        return {}
    if keys is not None:
        pos = [ux.position[k] for k in keys if k in ux.position and ux.has_vec[ux.position[k]]]
        sims = np.einsum("ij,j->i", ux.matrix[pos], q)
        return {ux.keys[p]: float(s) for p, s in zip(pos, sims, strict=True)}
    if kinds is None and at_from is None and at_until is None:
        valid, n_valid = ux.has_vec, ux.with_vec
    else:
        valid = ux.mask(kinds, at_from, at_until) & ux.has_vec
        n_valid = int(valid.sum())
    if not n_valid:
        return {}
    # One product over the whole matrix (no copy of the rows), then mask the scores.
    sims = ux.cosines(q)
    masked = sims if n_valid == len(sims) else np.where(valid, sims, -np.inf)  # every row valid: no copy
    take = min(limit, n_valid)
    best = np.argpartition(-masked, take - 1)[:take] if take < len(masked) else np.arange(len(masked))
    keys = ux.keys
    best = best[valid[best]]
    out = dict(zip([keys[i] for i in best.tolist()], sims[best].tolist(), strict=True))
    if also:  # their rows' cosines, from the same product (a key in both gets the same value)
        get = ux.position.get
        at = np.fromiter([get(k, -1) for k in also], dtype=np.intp, count=len(also))
        at = at[at >= 0]
        at = at[ux.has_vec[at]].tolist()
        out.update(zip([keys[i] for i in at], sims[at].tolist(), strict=True))
    if also_rows is not None and len(also_rows):
        rows = np.asarray(also_rows, dtype=np.intp)
        rows = rows[ux.has_vec[rows]].tolist()
        out.update(zip([keys[i] for i in rows], sims[rows].tolist(), strict=True))
    return out


class SqlHost(Protocol):
    """What the vector indexes need of a store: its declared capabilities and its public SQL access."""

    @property
    def capabilities(self) -> StoreCapabilities: ...

    def sql(self, tenant: str | None = None, *, write: bool = False) -> AbstractContextManager[Any]: ...


def open_index(store: SqlHost, model_id: str | None) -> VectorIndex | None:
    """The vector index the store declares (`store.capabilities.vectors`), or None (no vector support).

    A TieredStore declares the capabilities of its store of record, so vectors live beside it."""
    kind = store.capabilities.vectors
    if kind == "sqlite":
        return SQLiteVectorIndex(store, model_id)
    if kind == "pgvector":
        return PgVectorIndex(store, model_id)
    return None


_BUMP = ("INSERT INTO relevance_generation (tenant, user_id, gen) VALUES (?, ?, 1)"
         " ON CONFLICT (tenant, user_id) DO UPDATE SET gen = gen + 1")


class SQLiteVectorIndex(_CacheMixin):
    """Vectors in the SQLite store's own database file, scored exactly with numpy."""

    def __init__(self, store: SqlHost, model_id: str | None) -> None:
        # The tables share the SQLite store's file, its transactions and its secure_delete setting, so
        # erasing a memory's vector zeroes its bytes too.
        if store.capabilities.vectors != "sqlite":
            raise ValueError("this store declares no SQLite vector tables (capabilities.vectors)")
        self._sql = store.sql
        self.model_id = model_id
        self._init_cache()

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        if not rows:
            return
        with self._sql(write=True) as c:
            # Only index a version that is still current: a late write of an old version must not win.
            # `ver`: the row's version, the user's generation after this transaction's bump (below), so the
            # next snapshot of any process reuses the rows whose version it already holds (_build).
            c.executemany(
                "INSERT INTO relevance_vectors (tenant, user_id, key, memory_id, kind, at, model, dim, vec, tokens,"
                " ver) SELECT ?,?,?,?,?,?,?,?,?,?, coalesce((SELECT gen FROM relevance_generation WHERE tenant=?"
                " AND user_id=?), 0) + 1 WHERE EXISTS (SELECT 1 FROM memories WHERE id=? AND"
                " superseded_by IS NULL AND deleted_at IS NULL)"
                " ON CONFLICT (tenant, user_id, key) DO UPDATE SET memory_id=excluded.memory_id,"
                " kind=excluded.kind, at=excluded.at, model=excluded.model, dim=excluded.dim, vec=excluded.vec,"
                " tokens=excluded.tokens, ver=excluded.ver",
                [(r.tenant, r.user_id, r.key, r.memory_id, r.kind, r.at, r.model, int(r.vec.shape[0]), _blob(r.vec),
                  " ".join(r.tokens), r.tenant, r.user_id, r.memory_id) for r in rows])
            c.executemany(_BUMP, sorted({(r.tenant, r.user_id) for r in rows}))

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        with self._sql(tenant, write=True) as c:
            if keys is not None:
                n = 0
                for key in keys:
                    n += c.execute("DELETE FROM relevance_vectors WHERE tenant=? AND user_id=? AND key=?",
                                   (tenant, user_id, key)).rowcount
            else:
                n = c.execute(
                    "DELETE FROM relevance_vectors WHERE tenant=? AND user_id=? AND NOT EXISTS (SELECT 1 FROM"
                    " memories m WHERE m.id = relevance_vectors.memory_id AND m.superseded_by IS NULL"
                    " AND m.deleted_at IS NULL)", (tenant, user_id)).rowcount
            c.execute(_BUMP, (tenant, user_id))
        self._drop([(tenant, user_id)])
        return n

    def drop_orphans(self, deleted_before: float | None = None, expired_before: float | None = None) -> int:
        orphan = ("NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = relevance_vectors.memory_id"
                  " AND m.superseded_by IS NULL AND m.deleted_at IS NULL AND (m.expires_at IS NULL OR ? IS NULL"
                  " OR m.expires_at > ?))")
        args = (expired_before, expired_before)
        with self._sql(write=True) as c:
            users = c.execute(f"SELECT DISTINCT tenant, user_id FROM relevance_vectors WHERE {orphan}",
                              args).fetchall()
            n = int(c.execute(f"DELETE FROM relevance_vectors WHERE {orphan}", args).rowcount)
            c.executemany(_BUMP, users)
        self._drop((str(u[0]), str(u[1])) for u in users)
        return n

    def _gen(self, tenant: str, user_id: str) -> int:
        with self._sql(tenant) as c:
            row = c.execute("SELECT gen FROM relevance_generation WHERE tenant=? AND user_id=?",
                                     (tenant, user_id)).fetchone()
        return int(row[0]) if row else 0

    def load(self, tenant: str, user_id: str) -> UserIndex:
        gen = self._gen(tenant, user_id)
        return self._cached(tenant, user_id, gen, lambda stale: self._build(tenant, user_id, gen, stale))

    def reads_ahead(self, tenant: str, user_id: str) -> list[ReadAhead]:
        return []  # in-process: a read is no round trip

    DELTA_SHARE = 0.5  # a rebuild reads the changed rows alone while they are at most this share, else all

    def _build(self, tenant: str, user_id: str, gen: int, stale: UserIndex | None = None) -> UserIndex:
        """The user's snapshot. With the `stale` one it replaces, only the rows written since are read (their
        version is above the stale snapshot's highest, or unversioned); every other row still there is the
        stale snapshot's, unchanged: its vector, index terms and language flag are carried over. A row that
        is gone (erased) is never carried over. The reads run in one read transaction (one view)."""
        with self._sql(tenant) as c:
            own = not c.in_transaction  # a caller's open transaction already gives one view
            if own:
                c.execute("BEGIN")
            try:
                if stale is not None and stale.versions is not None and stale.delta is not None:
                    ux = self._delta(c, tenant, user_id, gen, stale)
                    if ux is not None:
                        return ux
                return self._full(c, tenant, user_id, gen)
            finally:
                if own:
                    c.execute("COMMIT")

    def _full(self, c: Any, tenant: str, user_id: str, gen: int) -> UserIndex:
        rows = c.execute(
            "SELECT key, memory_id, kind, at, model, ver, vec, tokens FROM relevance_vectors"
            " WHERE tenant=? AND user_id=? ORDER BY key", (tenant, user_id)).fetchall()
        current = [r[4] == self.model_id for r in rows]
        dim = next((len(r[6]) // 4 for r, ok in zip(rows, current, strict=True) if ok), 0)
        matrix = np.zeros((len(rows), dim), dtype=np.float32)
        ragged = False
        for i, (r, ok) in enumerate(zip(rows, current, strict=True)):
            if ok:
                if len(r[6]) == dim * 4:
                    matrix[i] = np.frombuffer(r[6], dtype=np.float32)
                else:
                    ragged = True  # another size under the current model: left zero (the next rebuild is full)
        versions = [r[5] for r in rows]
        delta = None if ragged else RowVersions(
            self.model_id, max((v for v in versions if v is not None), default=-1),
            [i for i, v in enumerate(versions) if v is None])
        return UserIndex(gen=gen, keys=[r[0] for r in rows], ids=[r[1] for r in rows],
                         kinds=np.array([r[2] for r in rows], dtype=object),
                         at=np.array([r[3] for r in rows], dtype=np.float64), models=[r[4] for r in rows],
                         matrix=matrix, has_vec=np.array(current, dtype=bool),
                         tokens=[tuple(r[7].split()) for r in rows], versions=versions, delta=delta)

    _CHANGED = ("SELECT key, memory_id, kind, at, model, ver, vec, tokens FROM relevance_vectors"
                " WHERE tenant=? AND user_id=? AND {}")

    def _delta(self, c: Any, tenant: str, user_id: str, gen: int, stale: UserIndex) -> UserIndex | None:
        """_build from the stale snapshot, or None (a full build is due: many rows changed, another model, ...).

        Versions only grow: a write sets the row's `ver` to the user's generation + 1 and bumps the generation
        in its transaction, so every row written after the stale snapshot was read has a version above all of
        the stale snapshot's (`top`), and a row whose version is at most `top` is still the one the stale
        snapshot holds (generations never go back: relevance_generation rows are never deleted). Each read
        is a range of the (tenant, user_id, ver, key) index: no row of the user is visited but the changed."""
        base, s_keys, s_ver, prev = stale.delta, stale.keys, stale.versions, stale.matrix
        if base is None or s_ver is None or prev is None or base.model != self.model_id:
            return None
        args = (tenant, user_id, base.top)
        changed = c.execute(self._CHANGED.format("ver > ?"), args).fetchall()
        changed += c.execute(self._CHANGED.format("ver IS NULL"), args[:2]).fetchall()
        if len(changed) > self.DELTA_SHARE * len(s_keys):
            return None
        changed.sort(key=lambda r: r[0])  # as ORDER BY key: by code point
        drop = set(base.unversioned)  # stale rows not carried over: unversioned, rewritten, erased
        where = stale.position.get
        for r in changed:
            p = where(r[0])
            if p is not None:
                drop.add(p)
        (still,) = c.execute("SELECT count(*) FROM relevance_vectors WHERE tenant=? AND user_id=? AND ver <= ?",
                             args).fetchone()
        if still != len(s_keys) - len(drop):  # rows were erased since: which of the stale ones are left
            present = {r[0] for r in c.execute(
                "SELECT key FROM relevance_vectors WHERE tenant=? AND user_id=? AND ver <= ?", args)}
            drop.update(p for p, k in enumerate(s_keys) if k not in present)
        gone = sorted(drop)
        ok_changed = [r[4] == self.model_id for r in changed]
        kept_vec = int(stale.has_vec.sum()) - int(stale.has_vec[gone].sum())
        dim = prev.shape[1] if kept_vec else next(  # the vectors kept set the size, else the first new one
            (len(r[6]) // 4 for r, ok in zip(changed, ok_changed, strict=True) if ok), 0)
        if any(ok and len(r[6]) != dim * 4 for r, ok in zip(changed, ok_changed, strict=True)):
            return None  # vectors of another size under one model: as a full build
        block = np.zeros((len(changed), dim), dtype=np.float32)  # the changed rows' vectors
        vec_rows = [i for i, ok in enumerate(ok_changed) if ok]
        if vec_rows and dim:
            block[vec_rows] = np.frombuffer(b"".join([changed[i][6] for i in vec_rows]),
                                            dtype=np.float32).reshape(len(vec_rows), dim)
        return _patched(stale, gen, self.model_id, [(r[0], r[1], r[2], float(r[3]), r[4], r[5], tuple(r[7].split()))
                                                    for r in changed], block, gone)

    def dense(self, tenant: str, user_id: str, q: np.ndarray, *, limit: int, keys: Sequence[str] | None = None,
              kinds: Sequence[str] | None = None, at_from: float | None = None,
              at_until: float | None = None, also: Sequence[str] = (),
              snapshot: UserIndex | None = None, also_rows: np.ndarray | None = None) -> dict[str, float]:
        ux = snapshot if snapshot is not None else self.load(tenant, user_id)
        if also_rows is not None and snapshot is None:
            raise ValueError("also_rows are positions in the snapshot the caller passes")
        return _dense_local(ux, q, limit=limit, keys=keys, kinds=kinds, at_from=at_from,
                            at_until=at_until, also=also, also_rows=also_rows)

    def models(self) -> dict[str, int]:
        with self._sql() as c:
            return {r[0]: int(r[1]) for r in
                    c.execute("SELECT model, count(*) FROM relevance_vectors GROUP BY model")}

    def indexed(self, tenant: str, user_id: str) -> dict[str, tuple[str, str]]:
        with self._sql(tenant) as c:
            return {r[0]: (r[1], r[2]) for r in c.execute(
                "SELECT key, memory_id, model FROM relevance_vectors WHERE tenant=? AND user_id=?",
                (tenant, user_id))}

    def user_pairs(self) -> list[tuple[str, str]]:
        with self._sql() as c:
            return [(r[0], r[1]) for r in c.execute(
                "SELECT DISTINCT tenant, user_id FROM memories WHERE superseded_by IS NULL AND deleted_at IS NULL"
                " ORDER BY tenant, user_id")]

    def close(self) -> None:
        self._forget_cache()


# -- PostgreSQL + pgvector -------------------------------------------------------------------------------

ConnFactory = Callable[[], AbstractContextManager[Any]]  # yields a psycopg connection (commits on exit)


def pgvector_available(connect: ConnFactory) -> bool:
    """True when the `vector` extension is installed in the database or can be created there.

    Kept for callers of earlier versions; the store's migrations decide now (`capabilities.vectors`)."""
    with connect() as conn:
        row = conn.execute("SELECT 1 FROM pg_extension WHERE extname='vector'").fetchone()
        if row:
            return True
        avail = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone()
        if not avail:
            return False
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
            conn.commit()
        except Exception as exc:  # no privilege, etc.
            conn.rollback()
            log.warning("pgvector is available but could not be enabled: %s", exc)
            return False
        return True


def _reused(stale: UserIndex | None, ux: UserIndex, ok: Sequence[bool], dim: int
            ) -> tuple[np.ndarray, list[int]] | None:
    """(the new snapshot's (n, dim) matrix with the rows it can take from the `stale` one — same key, version
    (xmin), memory id and model, both current — and zeros elsewhere, the positions of the other rows), or
    None when there is nothing to reuse."""
    prev = stale.matrix if stale is not None else None
    if stale is None or stale.versions is None or prev is None or prev.shape[1] != dim or not dim:
        return None
    versions = ux.versions
    assert versions is not None
    s_ok, s_ver, s_ids, s_models = stale.has_vec.tolist(), stale.versions, stale.ids, stale.models

    def same(i: int, p: int) -> bool:  # row i of the new snapshot is row p of the stale one, unchanged
        return (ok[i] and s_ok[p] and s_ver[p] is not None and s_ver[p] == versions[i] and s_ids[p] == ux.ids[i]
                and s_models[p] == ux.models[i])

    if stale.keys == ux.keys:  # no key came or went (the usual change: values rewritten): one copy
        out = prev.copy()
        fresh = [i for i in range(len(ok)) if not same(i, i)]
    else:
        out = np.empty((len(ok), dim), dtype=np.float32)
        where = stale.position.get
        here: list[int] = []
        there: list[int] = []
        fresh = []
        for i, k in enumerate(ux.keys):
            p = where(k)
            if p is not None and same(i, p):
                here.append(i)
                there.append(p)
            else:
                fresh.append(i)
        if not here:
            return None
        out[here] = prev[there]
    if fresh:
        out[fresh] = 0.0
    return out, fresh


# A changed row as the rebuild merges it: key, memory id, kind, event time, model, version, index terms.
Changed = tuple[str, str, str, float, str, int | None, tuple[str, ...]]


def _patched(stale: UserIndex, gen: int, model_id: str | None, changed: Sequence[Changed], block: np.ndarray,
             gone: list[int]) -> UserIndex:
    """The snapshot at `gen` rebuilt from the `stale` one (both backends' `_delta`): the stale rows at the
    positions `gone` (rewritten, erased, unversioned; ascending) left out, the `changed` rows (sorted by key,
    code point order; their vectors `block`, unit rows of the snapshot's size, zero where not of the current
    model) merged in by key. Every other row keeps its vector, index terms, language flag and BM25 postings."""
    base, s_keys, s_ver, prev = stale.delta, stale.keys, stale.versions, stale.matrix
    assert base is not None and s_ver is not None and prev is not None
    ok_changed = [r[4] == model_id for r in changed]
    kept_vec = int(stale.has_vec.sum()) - int(stale.has_vec[gone].sum())
    dim = block.shape[1]
    new_keys = [r[0] for r in changed]
    new_ver = [r[5] for r in changed]
    columns: dict[str, list[Any]] = {"ids": [r[1] for r in changed], "models": [r[4] for r in changed],
                                     "tokens": [r[6] for r in changed], "versions": new_ver}
    if new_keys == [s_keys[p] for p in gone]:  # rows rewritten in place (the usual write): one copy each
        at_pos: list[int] = gone
        n = len(s_keys)
        ins: list[int] = []
        lists: dict[str, list[Any]] = {name: list(old) for name, old in (("ids", stale.ids), ("models", stale.models),
                                                   ("tokens", stale.tokens), ("versions", s_ver))}
        for name, new in columns.items():
            out = lists[name]
            for p, item in zip(gone, new, strict=True):
                out[p] = item
        keys, position = s_keys, stale.position
        kinds, at, has_vec = stale.kinds.copy(), stale.at.copy(), stale.has_vec.copy()
        matrix = prev.copy() if kept_vec else np.zeros((n, dim), dtype=np.float32)
        kept = np.delete(np.arange(n), gone)
    else:  # rows came or went: delete, then insert at the merge positions
        kept = np.delete(np.arange(len(s_keys)), gone)

        def merged(old: list[Any], new: list[Any], pos: list[int]) -> list[Any]:
            out = list(old)
            for p in reversed(gone):
                del out[p]
            for p, item in zip(pos, new, strict=True):  # ascending: each counts the inserts before it
                out.insert(p, item)
            return out

        kept_keys = merged(s_keys, [], [])
        ins = [bisect_left(kept_keys, k) for k in new_keys]
        at_pos = [p + i for i, p in enumerate(ins)]
        keys = merged(s_keys, new_keys, at_pos)
        n, position = len(keys), {}
        lists = {name: merged(old, columns[name], at_pos) for name, old in (
            ("ids", stale.ids), ("models", stale.models), ("tokens", stale.tokens), ("versions", s_ver))}
        kinds = np.insert(stale.kinds[kept], ins, np.array([r[2] for r in changed], dtype=object))
        at = np.insert(stale.at[kept], ins, [float(r[3]) for r in changed])
        has_vec = np.insert(stale.has_vec[kept], ins, ok_changed)
        matrix = (np.insert(prev[kept], ins, block, axis=0) if kept_vec
                  else np.zeros((n, dim), dtype=np.float32))
    if at_pos:
        kinds[at_pos] = [r[2] for r in changed]
        at[at_pos] = [r[3] for r in changed]
        has_vec[at_pos] = ok_changed
        if dim:
            matrix[at_pos] = block
    versions = lists["versions"]
    top = max([base.top, *(v for v in new_ver if v is not None)])
    ux = UserIndex(gen=gen, keys=keys, ids=lists["ids"], kinds=kinds, at=at, models=lists["models"],
                   matrix=matrix, has_vec=has_vec, tokens=lists["tokens"], position=position,
                   versions=versions, delta=RowVersions(model_id, top,
                                                        [at_pos[i] for i, v in enumerate(new_ver) if v is None]))
    if stale.chinese is not None and len(stale.chinese) == len(s_keys):
        # row_chinese copies the flags before it sets the changed rows'
        flags = stale.chinese if keys is s_keys else np.insert(stale.chinese[kept], ins, False)
        ux.chinese_seed = (flags, at_pos)  # row_chinese computes the changed rows' flags only
    if keys is s_keys:
        ux.share_sorted_keys(stale)  # the sorted keys (`under`)
    # BM25: the rows carried over keep their postings; only the changed rows are tokenized (at first use)
    old_of_new = np.full(n, -1, dtype=np.int64)
    carried = np.ones(n, dtype=bool)
    carried[at_pos] = False
    old_of_new[carried] = kept
    ux.seed_bm25(stale, old_of_new)
    return ux


def _fill(out: np.ndarray, dim: int, position: dict[str, int], sent: Sequence[tuple[str, bytes]]) -> None:
    """Write the rows `sent` as (key, vector_send blob: dim, unused, dim float4 big-endian) into `out` at the
    keys' positions, each scaled to unit length as `<=>` does; a row of another dimension is left as it is."""
    width = 4 * (dim + 1)
    mine = [(position[k], b) for k, b in sent if k in position and len(b) == width]
    if mine and dim:
        raw = np.frombuffer(b"".join([b for _, b in mine]), dtype=">f4").reshape(len(mine), dim + 1)
        block = raw[:, 1:].astype(np.float32)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out[[p for p, _ in mine]] = block / norms


def _pgvec(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(v, dtype=np.float32)) + "]"


_PG_GEN = "SELECT gen FROM relevance_generation WHERE tenant=%s AND user_id=%s"
# migration 0009: with the generation the user's last erasure marked (the rebuild's erasure check)
_PG_GEN_ERASED = "SELECT gen, erased FROM relevance_generation WHERE tenant=%s AND user_id=%s"
_PG_BUMP = ("INSERT INTO relevance_generation AS g (tenant, user_id, gen) VALUES (%s, %s, 1)"
            " ON CONFLICT (tenant, user_id) DO UPDATE SET gen = g.gen + 1")
_PG_CURRENT = ("EXISTS (SELECT 1 FROM memories m WHERE m.tenant = relevance_vectors.tenant"
               " AND m.id = relevance_vectors.memory_id"
               " AND m.superseded_by IS NULL AND m.deleted_at IS NULL)")


class PgVectorIndex(_CacheMixin):
    """Vectors in PostgreSQL with pgvector. Dense search is exact over one user's rows: in this process, over
    the user's matrix cached beside the rest of the snapshot (read once per generation, in binary, rows
    normalised as `<=>` does), or in the database (`ORDER BY vec <=> q`) for a user whose matrix exceeds
    CACHE_BYTES.

    The store must declare ``capabilities.vectors == "pgvector"`` (its migration 0004 made the tables).
    """

    DELTA_KEYS = 256  # a rebuild reads at most this many changed vectors by key, else all of the user's
    ROW_VERSION = "xmin::text::bigint"  # new with every insert or update of a row; "" after a server refused it

    def __init__(self, store: SqlHost, model_id: str | None) -> None:
        if store.capabilities.vectors != "pgvector":
            raise ValueError("this store declares no pgvector tables (capabilities.vectors)")
        self._sql = store.sql
        # The generation check goes through the store's sql_read where it has one, so a recall can send it
        # with its own first reads (one round trip: reads_ahead); else through store.sql().
        self._sql_read = store.capabilities.sql_read
        self.model_id = model_id
        self._init_cache()
        with self._sql() as conn:
            # The extension lives in one schema of the database; the store may use another (schema=...).
            row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
                               " WHERE e.extname = 'vector'").fetchone()
            # Migration 0009 (optional like 0004): rows carry a version; without it (still pending) snapshots
            # are rebuilt from every row's metadata, reusing the vectors of rows whose xmin did not change.
            self._versioned = conn.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('relevance_vectors') AND attname = 'ver'"
                " AND NOT attisdropped").fetchone() is not None
        vs = '"' + str(row[0]).replace('"', '""') + '"'
        self._vector = f"{vs}.vector"
        self._cos = f"OPERATOR({vs}.<=>)"
        self._send = f"{vs}.vector_send"
        changed = (f"SELECT key, memory_id, kind, at, model, ver, tokens, dim, CASE WHEN model = %s THEN"
                   f" {self._send}(vec) END FROM relevance_vectors WHERE tenant=%s AND user_id=%s AND {{}}")
        # One statement (one round trip, one view): the rows above the stale snapshot's top version, the
        # unversioned ones, and the count of those at or below it (the erasures since, by difference).
        self._changed_sql = (changed.format("ver > %s") + " UNION ALL " + changed.format("ver IS NULL")
                             + " UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, count(*), NULL, NULL, NULL"
                             " FROM relevance_vectors WHERE tenant=%s AND user_id=%s AND ver <= %s")

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        if not rows:
            return
        for tenant in sorted({r.tenant for r in rows}):
            mine = [r for r in rows if r.tenant == tenant]
            users = sorted({(r.tenant, r.user_id) for r in mine})
            if self._versioned:
                with self._sql(tenant, write=True) as conn, conn.cursor() as cur:
                    # The bump first: it holds the user's generation row until commit, so the version it hands
                    # out (the rows' `ver`) is above every version committed before and below every one after.
                    cur.executemany(_PG_BUMP, users)
                    cur.executemany(
                        "INSERT INTO relevance_vectors (tenant, user_id, key, memory_id, kind, at, model, dim, vec,"
                        f" tokens, ver) SELECT %s,%s,%s,%s,%s,%s,%s,%s,%s::{self._vector},%s, (SELECT gen FROM"
                        " relevance_generation WHERE tenant=%s AND user_id=%s) WHERE EXISTS (SELECT 1 FROM memories"
                        " WHERE tenant=%s AND id=%s AND superseded_by IS NULL AND deleted_at IS NULL)"
                        " ON CONFLICT (tenant, user_id, key) DO UPDATE SET memory_id=excluded.memory_id,"
                        " kind=excluded.kind, at=excluded.at, model=excluded.model, dim=excluded.dim,"
                        " vec=excluded.vec, tokens=excluded.tokens, ver=excluded.ver",
                        [(r.tenant, r.user_id, r.key, r.memory_id, r.kind, r.at, r.model, int(r.vec.shape[0]),
                          _pgvec(r.vec), " ".join(r.tokens), r.tenant, r.user_id, r.tenant, r.memory_id)
                         for r in mine])
                continue
            with self._sql(tenant, write=True) as conn, conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO relevance_vectors (tenant, user_id, key, memory_id, kind, at, model, dim, vec,"
                    f" tokens) SELECT %s,%s,%s,%s,%s,%s,%s,%s,%s::{self._vector},%s WHERE EXISTS (SELECT 1"
                    " FROM memories WHERE tenant=%s AND id=%s AND superseded_by IS NULL AND deleted_at IS NULL)"
                    " ON CONFLICT (tenant, user_id, key) DO UPDATE SET memory_id=excluded.memory_id,"
                    " kind=excluded.kind, at=excluded.at, model=excluded.model, dim=excluded.dim, vec=excluded.vec,"
                    " tokens=excluded.tokens",
                    [(r.tenant, r.user_id, r.key, r.memory_id, r.kind, r.at, r.model, int(r.vec.shape[0]),
                      _pgvec(r.vec), " ".join(r.tokens), r.tenant, r.memory_id) for r in mine])
                cur.executemany(_PG_BUMP, users)

    def erase(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
        with self._sql(tenant, write=True) as conn:
            # The generation row first, then the vector rows: the lock order of upsert (no deadlock between them)
            conn.execute(_PG_BUMP, (tenant, user_id))
            if keys is not None:
                n = conn.execute("DELETE FROM relevance_vectors WHERE tenant=%s AND user_id=%s AND key = ANY(%s)",
                                 (tenant, user_id, list(keys))).rowcount
            else:
                n = conn.execute(f"DELETE FROM relevance_vectors WHERE tenant=%s AND user_id=%s AND NOT {_PG_CURRENT}",
                                 (tenant, user_id)).rowcount
        self._drop([(tenant, user_id)])
        return int(n)

    def drop_orphans(self, deleted_before: float | None = None, expired_before: float | None = None) -> int:
        cutoff = expired_before if expired_before is not None else float("-inf")
        orphan = ("NOT EXISTS (SELECT 1 FROM memories m WHERE m.tenant = relevance_vectors.tenant"
                  " AND m.id = relevance_vectors.memory_id AND m.superseded_by IS NULL AND m.deleted_at IS NULL"
                  " AND (m.expires_at IS NULL OR m.expires_at > %s))")
        with self._sql(write=True) as conn, conn.cursor() as cur:  # every tenant: the maintenance scope
            # The users' generation rows first (upsert's lock order), then the rows; users whose orphans
            # appeared in between are bumped after.
            first = sorted({(str(r[0]), str(r[1])) for r in conn.execute(
                f"SELECT DISTINCT tenant, user_id FROM relevance_vectors WHERE {orphan}", (cutoff,)).fetchall()})
            cur.executemany(_PG_BUMP, first)
            users = conn.execute(f"DELETE FROM relevance_vectors WHERE {orphan} RETURNING tenant, user_id",
                                 (cutoff,)).fetchall()
            cur.executemany(_PG_BUMP, sorted({(str(u[0]), str(u[1])) for u in users} - set(first)))
        self._drop((str(u[0]), str(u[1])) for u in users)
        # The dead tuples of these rows and of rows erased earlier (forget) leave the table files when the
        # store's purge, which runs right after, rewrites its tables: the vector tables are among them.
        return len(users)

    def load(self, tenant: str, user_id: str) -> UserIndex:
        text = _PG_GEN_ERASED if self._versioned else _PG_GEN
        if self._sql_read is not None:
            rows = self._sql_read(tenant, text, (tenant, user_id))
            row = rows[0] if rows else None
        else:
            with self._sql(tenant) as conn:
                row = conn.execute(text, (tenant, user_id)).fetchone()
        gen = int(row[0]) if row else 0
        erased = int(row[1]) if row and len(row) > 1 else None
        return self._cached(tenant, user_id, gen, lambda stale: self._build(tenant, user_id, gen, stale, erased))

    def reads_ahead(self, tenant: str, user_id: str) -> list[ReadAhead]:
        text = _PG_GEN_ERASED if self._versioned else _PG_GEN
        return [ReadAhead("sql", (tenant, text, (tenant, user_id)))] if self._sql_read is not None else []

    DELTA_SHARE = 0.5  # versioned rows: a rebuild reads the changed rows alone while they are at most this share

    def _build(self, tenant: str, user_id: str, gen: int, stale: UserIndex | None = None,
               erased: int | None = None) -> UserIndex:
        """The user's snapshot. With the `stale` one it replaces: where rows carry versions (migration 0009),
        only the rows written since it was read (`_delta`), every other row still there carried over; else the
        metadata of every row, and the vectors of rows whose version (xmin), memory id and model are unchanged
        copied from it (after one write, one vector instead of the user's all). A row that is gone (erased) is
        never carried over."""
        with self._sql(tenant) as conn, conn.cursor(binary=True) as cur:
            if self._versioned and stale is not None:
                ux = self._delta(conn, cur, tenant, user_id, gen, stale, erased)
                if ux is not None:
                    return ux
            return self._full(cur, tenant, user_id, gen, stale)

    def _delta(self, conn: Any, cur: Any, tenant: str, user_id: str, gen: int, stale: UserIndex,
               erased: int | None = None) -> UserIndex | None:
        """_build from the stale snapshot, or None (a full build is due: many rows changed, another model, ...).

        Every write bumps the user's generation before it writes its rows, with the bumped value as their
        `ver`, and holds the generation row until it commits: so a row committed after the stale snapshot's
        read has a version above the stale snapshot's highest (`top`), and a row whose version is at most
        `top` is still the one the stale snapshot holds (generations never go back). One statement reads the
        rows above `top`, the unversioned ones and the count of the others, through the (tenant, user_id,
        ver) index; only when that count shows erasures are the keys at or below `top` read, then with the
        changed rows again in one REPEATABLE READ transaction (one view). `erased` (the generation the
        user's last erasure marked, read with `gen`; migration 0009's trigger): when the stale snapshot's
        generation is at or above it, no row it holds was deleted since and the count is left out."""
        base, s_keys, prev = stale.delta, stale.keys, stale.matrix
        if base is None or stale.versions is None or prev is None or base.model != self.model_id:
            return None
        args = (self.model_id, tenant, user_id, base.top, self.model_id, tenant, user_id, tenant, user_id, base.top)
        count = erased is None or stale.gen < erased
        if count:
            rows = cur.execute(self._changed_sql, args).fetchall()
        else:
            rows = cur.execute(self._changed_sql[:self._changed_sql.rindex(" UNION ALL ")], args[:7]).fetchall()
        changed = sorted((r for r in rows if r[0] is not None), key=lambda r: str(r[0]))  # by code point
        if len(changed) > self.DELTA_SHARE * len(s_keys):
            return None
        where = stale.position.get
        drop = set(base.unversioned) | {p for r in changed if (p := where(r[0])) is not None}
        still = next(int(r[5]) for r in rows if r[0] is None) if count else len(s_keys) - len(drop)
        if still != len(s_keys) - len(drop):  # rows were erased since: which of the stale ones are left
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                rows = cur.execute(self._changed_sql, args).fetchall()
                present = {r[0] for r in cur.execute("SELECT key FROM relevance_vectors WHERE tenant=%s AND"
                                                     " user_id=%s AND ver <= %s", args[-3:]).fetchall()}
            finally:
                conn.execute("COMMIT")
            changed = sorted((r for r in rows if r[0] is not None), key=lambda r: str(r[0]))
            drop = set(base.unversioned) | {p for r in changed if (p := where(r[0])) is not None}
            drop.update(p for p, k in enumerate(s_keys) if k not in present)
        gone = sorted(drop)
        ok = [r[4] == self.model_id for r in changed]
        kept_vec = int(stale.has_vec.sum()) - int(stale.has_vec[gone].sum())
        dim = prev.shape[1] if kept_vec else next((int(r[7]) for r, good in zip(changed, ok, strict=True) if good), 0)
        if any(good and (r[7] != dim or len(r[8]) != 4 * (dim + 1)) for r, good in zip(changed, ok, strict=True)):
            return None  # vectors of another size under one model: as a full build
        if (kept_vec + sum(ok)) * dim * 4 > self.CACHE_BYTES:
            return None  # searched in the database (the full build leaves the matrix out)
        block = np.zeros((len(changed), dim), dtype=np.float32)
        if dim:
            _fill(block, dim, {str(r[0]): i for i, r in enumerate(changed)},
                  [(str(r[0]), bytes(r[8])) for r, good in zip(changed, ok, strict=True) if good])
        return _patched(stale, gen, self.model_id, [(str(r[0]), str(r[1]), str(r[2]), float(r[3]), str(r[4]),
                                                     None if r[5] is None else int(r[5]), tuple(str(r[6]).split()))
                                                    for r in changed], block, gone)

    def _full(self, cur: Any, tenant: str, user_id: str, gen: int, stale: UserIndex | None) -> UserIndex:
        meta = "SELECT key, memory_id, kind, at, model, tokens, dim, {} FROM relevance_vectors" \
               " WHERE tenant=%s AND user_id=%s"
        if self._versioned:
            rows = cur.execute(meta.format("ver"), (tenant, user_id)).fetchall()
        else:
            try:
                rows = cur.execute(meta.format(self.ROW_VERSION or "NULL"), (tenant, user_id)).fetchall()
            except Exception as exc:  # a server without row versions (some PostgreSQL-compatible ones)
                if not self.ROW_VERSION:
                    raise
                log.warning("relevance: row versions unavailable (%s); snapshots are rebuilt in full", exc)
                self.ROW_VERSION = ""
                rows = cur.execute(meta.format("NULL"), (tenant, user_id)).fetchall()
        rows.sort(key=lambda r: r[0])  # by code point, whatever the database's collation (as _delta merges)
        ok = [r[4] == self.model_id for r in rows]
        ux = UserIndex(gen=gen, keys=[r[0] for r in rows], ids=[r[1] for r in rows],
                       kinds=np.array([r[2] for r in rows], dtype=object),
                       at=np.array([r[3] for r in rows], dtype=np.float64), models=[r[4] for r in rows],
                       matrix=None, has_vec=np.array(ok, dtype=bool), tokens=[tuple(r[5].split()) for r in rows],
                       versions=[None if r[7] is None else int(r[7]) for r in rows]
                       if self._versioned or self.ROW_VERSION else None)
        if stale is not None:  # BM25 from the stale snapshot's: rows whose index terms did not change
            where, s_tokens = stale.position.get, stale.tokens
            ux.seed_bm25(stale, np.fromiter(
                (p if (p := where(k)) is not None and s_tokens[p] == t else -1
                 for k, t in zip(ux.keys, ux.tokens, strict=True)), dtype=np.int64, count=len(rows)))
        n, dim = len(rows), next((int(r[6]) for r, good in zip(rows, ok, strict=True) if good), 0)
        if self._versioned and not any(good and r[6] != dim for r, good in zip(rows, ok, strict=True)):
            # what the next rebuild starts from (_delta); none when vectors of another size are left zero
            ux.delta = RowVersions(self.model_id, max((int(r[7]) for r in rows if r[7] is not None), default=-1),
                                   [i for i, r in enumerate(rows) if r[7] is None])
        if sum(ok) * dim * 4 > self.CACHE_BYTES:
            return ux  # searched in the database (dense_db)
        reused = _reused(stale, ux, ok, dim)
        wanted: list[str] | None = None  # None: every current vector is read
        if reused is None:
            ux.matrix = np.zeros((n, dim), dtype=np.float32)
        else:
            ux.matrix, wanted = reused[0], [ux.keys[i] for i in reused[1] if ok[i]]
        if not dim or wanted == []:
            return ux
        if wanted is not None and len(wanted) <= self.DELTA_KEYS:
            sent = cur.execute(f"SELECT key, {self._send}(vec) FROM relevance_vectors WHERE tenant=%s"
                               " AND user_id=%s AND model=%s AND key = ANY(%s)",
                               (tenant, user_id, self.model_id, wanted)).fetchall()
        else:
            # All of the user's current vectors (a first build, a reindex), in pgvector's binary form and
            # unordered: sorting these wide rows by key would spill to disk (4 MB work_mem); the order
            # comes from the first read. Fresher than or equal to that read: safe to write over any row.
            sent = cur.execute(f"SELECT key, {self._send}(vec) FROM relevance_vectors WHERE tenant=%s"
                               " AND user_id=%s AND model=%s", (tenant, user_id, self.model_id)).fetchall()
        _fill(ux.matrix, dim, ux.position, sent)
        return ux

    def _shed(self, ux: UserIndex) -> UserIndex | None:
        # Its keys, index terms and BM25 stay; its searches go to the database until its next rebuild.
        return replace(ux, matrix=None)

    def dense(self, tenant: str, user_id: str, q: np.ndarray, *, limit: int, keys: Sequence[str] | None = None,
              kinds: Sequence[str] | None = None, at_from: float | None = None,
              at_until: float | None = None, also: Sequence[str] = (),
              snapshot: UserIndex | None = None, also_rows: np.ndarray | None = None) -> dict[str, float]:
        ux = snapshot if snapshot is not None else self.load(tenant, user_id)
        if also_rows is not None and snapshot is None:
            raise ValueError("also_rows are positions in the snapshot the caller passes")
        if ux.matrix is not None:
            return _dense_local(ux, q, limit=limit, keys=keys, kinds=kinds, at_from=at_from, at_until=at_until,
                                also=also, also_rows=also_rows)
        if also_rows is not None and len(also_rows):
            also = [*also, *(ux.keys[i] for i in np.asarray(also_rows).tolist())]
        return self.dense_db(tenant, user_id, q, limit=limit, keys=keys, kinds=kinds, at_from=at_from,
                             at_until=at_until, also=also)

    def dense_db(self, tenant: str, user_id: str, q: np.ndarray, *, limit: int, keys: Sequence[str] | None = None,
                 kinds: Sequence[str] | None = None, at_from: float | None = None,
                 at_until: float | None = None, also: Sequence[str] = ()) -> dict[str, float]:
        """`dense` computed by the database (`ORDER BY vec <=> q`): for users whose matrix is not cached,
        and the reference the cached matrix is tested against."""
        where = ["tenant=%s", "user_id=%s", "model=%s"]
        args: list[Any] = [tenant, user_id, self.model_id]
        if keys is not None:
            where.append("key = ANY(%s)")
            args.append(list(keys))
        if kinds is not None:
            where.append("kind = ANY(%s)")
            args.append(list(kinds))
        if at_from is not None:
            where.append("at >= %s")
            args.append(at_from)
        if at_until is not None:
            where.append("at < %s")
            args.append(at_until)
        qv = _pgvec(q)
        sim = f"1 - (vec {self._cos} %s::{self._vector})"
        sql = (f"(SELECT key, {sim} FROM relevance_vectors WHERE {' AND '.join(where)}"
               f" ORDER BY vec {self._cos} %s::{self._vector} LIMIT %s)")
        params: list[Any] = [qv, *args, qv, limit if keys is None else len(keys)]
        if also:  # the lexical candidates' cosines, in the same round trip
            sql += (f" UNION (SELECT key, {sim} FROM relevance_vectors WHERE tenant=%s AND user_id=%s AND model=%s"
                    " AND key = ANY(%s))")
            params += [qv, tenant, user_id, self.model_id, list(also)]
        with self._sql(tenant) as conn:
            rows = conn.execute(sql, params).fetchall()
        return {r[0]: float(r[1]) for r in rows}

    def models(self) -> dict[str, int]:
        with self._sql() as conn:
            return {r[0]: int(r[1]) for r in
                    conn.execute("SELECT model, count(*) FROM relevance_vectors GROUP BY model").fetchall()}

    def indexed(self, tenant: str, user_id: str) -> dict[str, tuple[str, str]]:
        with self._sql(tenant) as conn:
            return {r[0]: (r[1], r[2]) for r in conn.execute(
                "SELECT key, memory_id, model FROM relevance_vectors WHERE tenant=%s AND user_id=%s",
                (tenant, user_id)).fetchall()}

    def user_pairs(self) -> list[tuple[str, str]]:
        with self._sql() as conn:
            return [(r[0], r[1]) for r in conn.execute(
                "SELECT DISTINCT tenant, user_id FROM memories WHERE superseded_by IS NULL AND deleted_at IS NULL"
                " ORDER BY tenant, user_id").fetchall()]

    def close(self) -> None:
        self._forget_cache()
