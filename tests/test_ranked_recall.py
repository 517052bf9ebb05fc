"""Issue 19: recall(k) from the rank index returns exactly what scoring every row returns.

The reference is the full scan (RecallPipeline.use_index = False): every live row weighed in Python by
policy.decay.weight_of. The index path reads rows per kind in rank_time order and stops early; on
random rows, times (including times after `now`), contracts (own half-lives, L2 without a grant,
disabled fields, standing fields) and k, both must give the same memories, scores, weights and flags
in the same order (ties break on recency then id).
"""

from __future__ import annotations

import itertools
import math
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import backends
from props import examples
from usermem.config import load_settings
from usermem.engine.compose import Engine, compose
from usermem.model import KIND_REGISTRY, Kind, MemoryRecord, Source
from usermem.policy.contracts import DEFAULT_CONTRACTS, ContractSet, FieldContract, Sensitivity
from usermem.policy.decay import rank_bound, rank_time, time_constant, weight_of
from usermem.policy.validate import check_unit
from usermem.store.sql import POSTGRES, SQLITE

T0 = 1_790_000_000.0
DAY = 86_400.0
_CONTRACTS = [
    FieldContract("own_half_life", Kind.PREFERENCE, half_life_seconds=2 * DAY),
    FieldContract("own_half_life_fact", Kind.FACT, half_life_seconds=400 * DAY),
    FieldContract("secret", Kind.FACT, sensitivity=Sensitivity.L2),
    FieldContract("switched_off", Kind.PREFERENCE, enabled=False),
    FieldContract("always", Kind.PREFERENCE, standing=True),
]
_SPECIAL_KEYS = [c.key for c in _CONTRACTS]
_seq = itertools.count()

# Few distinct values so ties (equal scores, equal times) are common.
_unit = st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.5, 0.8, 1.0]) | st.floats(0.0, 1.0, allow_subnormal=False)
_offset = st.sampled_from([0.0, -DAY, -30 * DAY, 2 * DAY]) | st.floats(-400 * DAY, 5 * DAY, allow_subnormal=False)
_row = st.tuples(
    st.sampled_from(list(Kind)),
    st.sampled_from(_SPECIAL_KEYS) | st.none(),  # None: a key of its own
    _unit, _unit, _offset,
    st.none() | _offset,  # last_used_at
    st.none() | _offset,  # last_confirmed_at
    st.none() | st.floats(-10 * DAY, 10 * DAY, allow_subnormal=False),  # expires_at
    st.booleans(),  # retracted (rarely relevant)
)


def _records(user: str, rows: list[tuple]) -> list[MemoryRecord]:
    out, seen = [], set()
    for kind, special, conf, imp, created, used, confirmed, expires, retracted in rows:
        key = special if special is not None and special not in seen else f"k{next(_seq)}"
        seen.add(key)
        out.append(MemoryRecord(
            id=f"m{next(_seq):08d}", tenant="t", user_id=user, kind=kind, key=key, value="v", source=Source.USER_CONFIRMED,
            # as the write path admits them (check_unit: below UNIT_FLOOR is 0, so the product never underflows)
            confidence=check_unit("confidence", conf), importance=check_unit("importance", imp),
            created_at=T0 + created,
            last_used_at=None if used is None else T0 + used,
            last_confirmed_at=None if confirmed is None else T0 + confirmed,
            expires_at=None if expires is None else T0 + expires,
            session_id=None, retracted=retracted and kind is Kind.PREFERENCE))
    return out


def _engine(url: str) -> Engine:
    s = load_settings(env={}, store_url=url, embedder="none", hybrid_lexical_weight=0.0)
    return compose(s, contracts=ContractSet([*DEFAULT_CONTRACTS, *_CONTRACTS]))


def _compare(engine: Engine, rows: list[tuple], now_offset: float, k: int, kinds: list[Kind] | None,
             again: bool = False) -> None:
    user = uuid.uuid4().hex
    engine.ctx.store.bulk_insert(_records(user, rows))
    pipe = engine.recall
    assert engine.ctx.store.capabilities.ranked is not None
    now = T0 + now_offset

    def run(index: bool) -> list[tuple]:
        pipe.use_index = index
        try:
            got = pipe.scored("t", user, now=now, limit=k, kinds=kinds)
        finally:
            pipe.use_index = True
        return [(s.memory.id, s.score, s.weight, s.needs_confirmation) for s in got]

    assert run(True) == run(False)
    if again:  # a second read (a warm serving tier) gives the same
        assert run(True) == run(False)


@pytest.fixture(scope="module")
def sqlite_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    e = _engine(f"sqlite:///{tmp_path_factory.mktemp('ranked')}/r.db")
    yield e
    e.close()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=60), now_offset=_offset, k=st.integers(1, 12),
       kinds=st.none() | st.lists(st.sampled_from(list(Kind)), min_size=1, max_size=3, unique=True))
def test_index_recall_equals_full_scan_sqlite(sqlite_engine: Engine, rows, now_offset, k, kinds) -> None:
    _compare(sqlite_engine, rows, now_offset, k, kinds)


def test_index_recall_equals_full_scan_postgres(tmp_path: Path) -> None:
    engine = _engine(backends.postgres_url(tmp_path))
    try:
        @settings(max_examples=examples(40), deadline=None)
        @given(rows=st.lists(_row, max_size=40), now_offset=_offset, k=st.integers(1, 8))
        def check(rows, now_offset, k) -> None:
            _compare(engine, rows, now_offset, k, None)

        check()
    finally:
        engine.close()
        backends.postgres_cleanup(tmp_path)


def test_bound_is_exact_when_now_is_after_every_time() -> None:
    """rank_bound equals importance × weight once `now` follows every time of the row (the index order is
    the score order), and never falls below it otherwise."""
    for kind in Kind:
        h = KIND_REGISTRY[kind].half_life_seconds
        tau = time_constant(h)
        for conf, imp, used, confirmed in [(0.9, 0.7, None, None), (0.5, 1.0, T0 + 3600, None),
                                           (1.0, 0.2, T0 + 7200, T0 + 60), (0.3, 0.3, T0 - 10, T0 + 5)]:
            key = rank_time(conf, imp, tau, T0, confirmed, used)
            for now in (T0 + 10_000, T0 + 40 * DAY):
                assert math.isclose(rank_bound(key, tau, now), imp * weight_of(conf, h, T0, confirmed, used, now),
                                    rel_tol=1e-9)
            assert rank_bound(key, tau, T0 - DAY) >= imp * weight_of(conf, h, T0, confirmed, used, T0 - DAY)


def test_migration_holds_the_dialect_rank_expression() -> None:
    """The planner uses the index only when the query orders by the very expression the index keeps."""
    root = Path(__file__).resolve().parent.parent / "src" / "usermem" / "store" / "migrations"
    assert SQLITE.rank_expression() in (root / "sqlite" / "0007_rank_index.sql").read_text(encoding="utf-8")
    assert POSTGRES.rank_expression() in (root / "postgres" / "0007_rank_index.sql").read_text(encoding="utf-8")


def test_sqlite_plan_reads_the_rank_index(sqlite_engine: Engine) -> None:
    from usermem.store.base import LiveQuery

    text, args = SQLITE.ranked(LiveQuery("t", "u", T0), [(Kind.FACT, 5, 0), (Kind.PREFERENCE, 5, 0)])
    with sqlite_engine.ctx.store.sql() as c:
        plan = " ".join(str(r) for r in c.execute(f"EXPLAIN QUERY PLAN {text}", args))
    assert "memories_rank" in plan and "TEMP B-TREE" not in plan


def test_recall_reads_about_k_rows(sqlite_engine: Engine) -> None:
    """With 3,000 rows the index path reads a few batches, not every row."""
    user = uuid.uuid4().hex
    rows = [(Kind.FACT if i % 2 else Kind.PREFERENCE, None, 0.9, 0.5 + (i % 7) / 20, -float(i) * 600, None, None,
             None, False) for i in range(3000)]
    store = sqlite_engine.ctx.store
    store.bulk_insert(_records(user, rows))
    read: list[int] = []
    reader = store.capabilities.ranked
    assert reader is not None

    class Counting:
        def __call__(self, q, batches):
            got = reader(q, batches)
            read.append(len(got))
            return got

    from dataclasses import replace

    original = store.capabilities
    store.capabilities = replace(original, ranked=Counting())  # type: ignore[misc]
    try:
        top = sqlite_engine.recall.scored("t", user, now=T0 + DAY, limit=5)
    finally:
        store.capabilities = original  # type: ignore[misc]
    assert len(top) == 5 and sum(read) <= 60


@pytest.mark.parametrize("now_offset", [0.0, 3600.0, 40 * DAY])
def test_index_recall_equals_full_scan_on_long_ties(sqlite_engine: Engine, now_offset: float) -> None:
    """Hundreds of rows with one score (written together, as a bulk import does) are read over several
    growing batches: the index path still returns what the full scan returns, ties broken by id."""
    rows = [(Kind.FACT if i % 2 else Kind.PREFERENCE, _SPECIAL_KEYS[i] if i < len(_SPECIAL_KEYS) else None,
             1.0, 0.5, 0.0, None, None, None, False) for i in range(400)]
    rows += [(Kind.FACT, None, 0.9, 0.5, -DAY, None, None, None, False) for _ in range(30)]
    for k in (1, 5, 12):
        _compare(sqlite_engine, rows, now_offset, k, None)
        _compare(sqlite_engine, rows, now_offset, k, [Kind.PREFERENCE, Kind.CONTEXT])


def test_index_recall_equals_full_scan_tiered(tmp_path: Path) -> None:
    """The tiered store ranks its tiers' kinds (preference, context) from the tier's records and the others
    from the store of record's index; a warm tier (each user read twice) and a cold one give the same."""
    s = backends.tiered_settings(tmp_path, load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))
    engine = compose(s, contracts=ContractSet([*DEFAULT_CONTRACTS, *_CONTRACTS]))
    try:
        assert engine.ctx.store.capabilities.tiers

        @settings(max_examples=examples(60), deadline=None)
        @given(rows=st.lists(_row, max_size=40), now_offset=_offset, k=st.integers(1, 8),
               kinds=st.none() | st.lists(st.sampled_from(list(Kind)), min_size=1, max_size=3, unique=True))
        def check(rows, now_offset, k, kinds) -> None:
            _compare(engine, rows, now_offset, k, kinds, again=True)

        check()
    finally:
        engine.close()
        backends.tiered_cleanup(tmp_path)
