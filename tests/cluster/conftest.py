"""Fixtures of the cluster tests (`make test-cluster`; `make test` does not collect this directory).

One local cluster per session, on loopback ports away from the shared services: a PostgreSQL primary
with a synchronous streaming replica, a Redis Cluster (3 primaries + 3 replicas), a 3-node JetStream
cluster with an R3 stream, and `usermem serve` instances on them (usermem.bench.cluster). A missing
binary skips locally and fails with USERMEM_REQUIRE_BACKENDS=1 (tests/backends.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import backends
from usermem.bench.cluster import ClusterError, MissingBinary, NatsCluster, PgPair, RedisCluster, temp_root


@pytest.fixture(scope="session")
def cluster_root() -> Iterator[Path]:
    root = temp_root()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _started(make):  # type: ignore[no-untyped-def]
    try:
        return make()
    except MissingBinary as exc:
        backends.unavailable(str(exc))
    except ClusterError as exc:
        pytest.fail(f"the local cluster could not be started: {exc}", pytrace=False)


def _running(make):  # type: ignore[no-untyped-def]
    """Build a cluster piece, start it, hand it to the fixture, stop it afterwards."""
    piece = _started(make)
    try:
        _started(piece.start)
        yield piece
    finally:
        piece.stop()


@pytest.fixture(scope="module")
def pg_pair(cluster_root: Path, request: pytest.FixtureRequest) -> Iterator[PgPair]:
    """A fresh pair per module (the fault tests crash the primary)."""
    yield from _running(lambda: PgPair(cluster_root / f"pg-{request.module.__name__.rpartition('.')[2]}"))


@pytest.fixture(scope="session")
def redis_cluster(cluster_root: Path) -> Iterator[RedisCluster]:
    yield from _running(lambda: RedisCluster(cluster_root / "redis"))


@pytest.fixture(scope="session")
def nats_cluster(cluster_root: Path) -> Iterator[NatsCluster]:
    yield from _running(lambda: NatsCluster(cluster_root / "nats"))
