"""Round trips of one query-free recall (issue 19): counted on the wire's client side, so a change that adds a
statement or a Redis request to the hot path fails here instead of silently costing throughput.

PostgreSQL: a statement outside a pipeline is one round trip; a pipeline block (its statements and one sync,
results read after it) is one. Redis: every request written to a connection (a pipeline is written at once)
is one. The results are checked against the same recall without the read-ahead (PostgreSQL) or the store of
record (tiered), so fewer trips never means other results.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import backends
from usermem.bench.core import T0, synthetic_records
from usermem.config import load_settings
from usermem.engine.compose import Engine, compose
from usermem.model import Kind
from usermem.policy.contracts import DEFAULT_CONTRACTS, ContractSet, FieldContract, Sensitivity

DAY = 86_400.0


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Counter of round trips: "pg" (PostgreSQL) and "redis", while the block runs."""
    import psycopg
    import redis.connection

    seen: Counter[str] = Counter()
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline
    send = redis.connection.AbstractConnection.send_packed_command

    def counted_execute(self: Any, *args: Any, **kw: Any) -> Any:
        if self.connection._pipeline is None:  # inside a pipeline the block counts once
            seen["pg"] += 1
        return execute(self, *args, **kw)

    @contextmanager
    def counted_pipeline(self: Any) -> Iterator[Any]:
        outer = self._pipeline is None
        with pipeline(self) as p:
            yield p
        if outer:
            seen["pg"] += 1

    def counted_send(self: Any, *args: Any, **kw: Any) -> Any:
        seen["redis"] += 1
        return send(self, *args, **kw)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign]
    redis.connection.AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]
        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]


def _summary(got: Any) -> list[tuple[Any, ...]]:
    return [(s.memory.id, s.memory.value, s.score, s.weight, s.needs_confirmation) for s in got] + \
        [("withheld", w.key, w.reason) for w in got.withheld]


# A sensitive field and one with its own half-life: the reads recall predicts for them are exercised too.
_CONTRACTS = ContractSet([*DEFAULT_CONTRACTS, FieldContract("secret", Kind.FACT, sensitivity=Sensitivity.L2),
                          FieldContract("own_half_life", Kind.PREFERENCE, half_life_seconds=2 * DAY)])


def _engine(settings: Any) -> Engine:
    return compose(settings, contracts=_CONTRACTS)


def _load(engine: Engine, user: str, n: int, *, secret: bool = False) -> None:
    records = synthetic_records("local", user, n, T0, random.Random(19))
    if secret:
        records[0] = replace(records[0], key="secret", kind=Kind.FACT)
    records[1] = replace(records[1], key="own_half_life", kind=Kind.PREFERENCE)
    engine.ctx.store.bulk_insert(records)


def test_postgres_recall_is_one_round_trip(tmp_path: Path) -> None:
    engine = _engine(load_settings(env={}, store_url=backends.postgres_url(tmp_path), embedder="none",
                                   hybrid_lexical_weight=0.0))
    try:
        _load(engine, "u", 300)
        _load(engine, "s", 300, secret=True)
        pipe, now = engine.recall, T0 + 3 * DAY
        pipe.scored("local", "u", now=now, limit=5)  # learns the tenant's contract set
        for user, most in (("u", 1), ("s", 4)):
            with counting() as trips:
                got = pipe.scored("local", user, now=now, limit=5)
            # "u": was 4 (contracts, rank index, the withheld keys, the winners' records). "s" holds a value of
            # a sensitive field: its withheld report reads the reader's grants, the consent requests and the
            # user's language after the first trip.
            assert trips["pg"] == most, (user, trips)
            assert bool(got.withheld) == (user == "s")
            pipe.use_index = False
            try:
                assert _summary(got) == _summary(pipe.scored("local", user, now=now, limit=5))
            finally:
                pipe.use_index = True
    finally:
        engine.close()
        backends.postgres_cleanup(tmp_path)


def test_tiered_warm_recall_round_trips(tmp_path: Path) -> None:
    settings = backends.tiered_settings(tmp_path, load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))
    engine = _engine(settings)
    try:
        _load(engine, "u", 300)
        pipe, now = engine.recall, T0 + 3 * DAY
        first = pipe.scored("local", "u", now=now, limit=5)  # fills the Redis tier, learns the contract set
        pipe.scored("local", "u", now=now, limit=5)
        with counting() as trips:
            got = pipe.scored("local", "u", now=now, limit=5)
        assert trips["redis"] == 1, trips  # warm: the version check only (the decoded records are kept)
        assert trips["pg"] == 1, trips
        assert _summary(got) == _summary(first)
    finally:
        engine.close()
        backends.tiered_cleanup(tmp_path)


@pytest.fixture(autouse=True)
def _backends() -> None:
    backends.require_postgres()
