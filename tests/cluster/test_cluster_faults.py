"""Two stateless `usermem serve` instances on a PostgreSQL primary + replica, a Redis Cluster and a JetStream
cluster, under a bounded load behind a round-robin client, while nodes are killed (issue 17).

One load run in phases — baseline, kill -9 of an instance mid-load, its restart, a Redis primary killed
(failover), the NATS node holding the stream's leadership killed, baseline again — then the PostgreSQL
primary crashes and the replica is promoted by the runbook (docs/runbook-failover.md). Checked: no
acknowledged write is lost (every one is current in the store of record, before and after the
promotion), each instance reads the writes made through the other (read-your-writes across instances),
errors only where a fault makes them unavoidable and of a clear kind, the stream keeps every event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from usermem.bench.cluster import Deployment, NatsCluster, PgPair, RedisCluster, wait_until
from usermem.bench.cluster_load import LoadRun, Phase, RoundRobin, run_phases, write_report

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.nats, pytest.mark.cluster]
CLIENTS = 4


@pytest.fixture(scope="module")
def deployment(pg_pair: PgPair, redis_cluster: RedisCluster, nats_cluster: NatsCluster,
               cluster_root: Path) -> Iterator[Deployment]:
    d = Deployment.start(pg_pair, redis_cluster, nats_cluster, cluster_root / "serve", instances=2)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def acked() -> list[tuple[str, str, str]]:
    """Every write acknowledged in this module, across tests."""
    return []


def _ready(urls: list[str]) -> bool:
    return all(httpx.get(u + "/ready", timeout=2).status_code == 200 for u in urls)


def test_load_with_node_faults(deployment: Deployment, acked: list[tuple[str, str, str]], tmp_path: Path) -> None:
    d = deployment
    rr = RoundRobin([i.url for i in d.instances.items], d.key)
    run = LoadRun()
    redis_victim = d.redis.primaries()[0]
    nats_victim = d.stream_leader()

    def kill_instance_mid_load() -> None:
        mark = len(run.acked)
        wait_until("writes acknowledged in this phase", lambda: len(run.acked) >= mark + 10, 30)
        d.instances.kill(0)

    def kill_redis_primary() -> None:
        d.redis.stop_node(redis_victim)
        wait_until("a replica took over the stopped primary's slots", d.redis.failed_over, 30, interval=0.1)

    def kill_nats_leader() -> None:
        d.nats.stop_node(nats_victim)
        wait_until("the stream elected a new leader", lambda: d.stream_leader() != nats_victim, 30, interval=0.2)

    phases = [Phase("baseline", 120, 20),
              Phase("kill -9 instance", 120, 20, kill_instance_mid_load, "kill -9 of instance 1 mid-load"),
              Phase("instance restart", 80, 30, lambda: d.instances.restart(0), "instance 1 restarted"),
              Phase("redis node down", 120, 30, kill_redis_primary, f"Redis primary :{redis_victim} killed"),
              Phase("nats node down", 120, 30, kill_nats_leader, f"NATS stream leader :{nats_victim} killed"),
              Phase("after", 90, 20)]
    try:
        run_phases(rr, phases, clients=CLIENTS, users=12, run=run)
    finally:
        rr.close()
    acked.extend(run.acked)
    paths = write_report(run, tmp_path / "report", title="cluster load (test size)",
                         conditions={"instances": 2, "clients": CLIENTS, "machine": "2 cores shared, loaded"})
    by = {p.name: p for p in run.phases}
    summary = json.dumps(run.as_dict(), indent=1)
    assert all(p.fault_error is None for p in run.phases), summary
    # No acknowledged write lost: every one is the current value in the store of record.
    assert len(run.acked) > 300, summary
    missing = set(run.acked) - d.current_values()
    assert not missing, f"{len(missing)} acknowledged writes lost: {sorted(missing)[:5]}"
    # Read-your-writes through the other instance, in every phase (replica reads fenced by the WAL position).
    assert all(p.stale_reads == 0 for p in run.phases), summary
    # Errors only where a fault makes them unavoidable: requests on the killed instance — per client the one in
    # flight, and at most one more sent on its open connection while the dead process's sockets were closing.
    assert by["baseline"].error_count == 0 and by["after"].error_count == 0, summary
    assert by["instance restart"].error_count == 0, summary  # refused connections move on to the other one
    assert by["kill -9 instance"].error_count <= 2 * CLIENTS, summary
    assert set(by["kill -9 instance"].errors) <= {"ReadError", "RemoteProtocolError", "WriteError"}, summary
    assert all(not k.startswith("http_5") for p in run.phases for k in p.errors if p.name != "redis node down"), \
        summary
    # Redis: the tier fails over; requests fall back to the store of record meanwhile (no 5xx).
    assert by["redis node down"].error_count == 0, summary
    # NATS: the R3 stream continues without its old leader and holds an event of every acknowledged write.
    wait_until("the stream holds an event per acknowledged write", lambda: d.stream_messages() >= len(run.acked),
               30, interval=0.2)
    info = d.nats.stream_info(d.stream)
    assert info.config.num_replicas == 3 and info.cluster.leader != f"n{nats_victim}"
    wait_until("every instance is ready again", lambda: _ready(d.instances.urls), 30, interval=0.2)
    for url in d.instances.urls:  # the Redis tier's own readiness check is among them: its errors cleared
        checks = httpx.get(url + "/ready", timeout=5).json()["checks"]
        assert [v for k, v in checks.items() if k.startswith("tier:")] == ["ok"] and checks["store"] == "ok", checks
    assert {"json", "md", "png"} <= set(paths) and paths["png"].stat().st_size > 10_000
    assert "| redis node down |" in paths["md"].read_text(encoding="utf-8")


def test_primary_crash_and_promotion_by_the_runbook(deployment: Deployment,
                                                    acked: list[tuple[str, str, str]]) -> None:
    d = deployment
    rr = RoundRobin(d.instances.urls, d.key, timeout=15)
    try:
        for i in range(20):
            _, r = rr.request("POST", "/v1/memories", json={"user_id": f"p{i % 3}", "kind": "fact", "key": f"pk{i}",
                                                             "value": f"before crash {i}", "source": "user_confirmed"})
            assert r.status_code == 200, r.text
            acked.append((f"p{i % 3}", f"pk{i}", f"before crash {i}"))
        # The fault: the primary crashes. Writes fail with a clear 503, nothing hangs.
        d.pg.crash_primary()
        _, r = rr.request("POST", "/v1/memories", json={"user_id": "p0", "kind": "fact", "key": "lost",
                                                         "value": "x", "source": "user_confirmed"})
        assert r.status_code == 503 and "PostgreSQL" in r.text, r.text
        assert httpx.get(d.instances.urls[0] + "/ready", timeout=15).status_code == 503  # runbook step 1
        # Runbook step 2: promote the replica; step 3: point the instances at it and restart them one by one.
        d.pg.promote()
        d.instances.store_url = d.pg.url(d.pg.replica_port)
        for n in range(len(d.instances.items)):
            d.instances.restart(n)
        rr = RoundRobin(d.instances.urls, d.key, timeout=15)
        # Step 4: check. Synchronous replication: every acknowledged write survived the crash.
        missing = set(acked) - d.current_values(d.pg.replica_port)
        assert not missing, f"{len(missing)} acknowledged writes lost by the failover: {sorted(missing)[:5]}"
        for i in range(6):
            _, r = rr.request("POST", "/v1/memories", json={"user_id": "p1", "kind": "fact", "key": f"after{i}",
                                                             "value": f"after {i}", "source": "user_confirmed"})
            assert r.status_code == 200, r.text
            _, got = rr.request("GET", "/v1/users/p1/memories", params={"keys": f"after{i}", "k": 5})
            assert got.status_code == 200 and f"after {i}" in got.text
    finally:
        rr.close()
