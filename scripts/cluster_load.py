"""The cluster load run of docs/scaling.md: start a local cluster on loopback, load it in phases while nodes
are killed, measure the capacity figures, write everything into a fresh directory, stop the cluster.

    .venv/bin/python scripts/cluster_load.py --out reports            # -> reports/cluster-<UTC time>/
    .venv/bin/python scripts/cluster_load.py --iterations 100 --seconds 20   # smaller

Bounded: every phase stops after --iterations client iterations (more while its fault runs) or --seconds.
The test-size variant runs in `make test-cluster` (tests/cluster/test_cluster_faults.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from usermem.bench.cluster import Deployment, NatsCluster, PgPair, RedisCluster, temp_root, wait_until
from usermem.bench.cluster_load import LoadRun, Phase, RoundRobin, run_phases, write_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="reports")
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--users", type=int, default=50)
    args = ap.parse_args()
    out = Path(args.out) / time.strftime("cluster-%Y%m%dT%H%M%SZ", time.gmtime())
    root = temp_root()
    pg, rc, nc = PgPair(root / "pg"), RedisCluster(root / "redis"), NatsCluster(root / "nats")
    d: Deployment | None = None
    try:
        pg.start()
        rc.start()
        nc.start()
        d = Deployment.start(pg, rc, nc, root / "serve", instances=2)
        dep = d
        rr = RoundRobin([i.url for i in dep.instances.items], dep.key)
        run = LoadRun()
        redis_victim, nats_victim = rc.primaries()[0], dep.stream_leader()

        def kill_instance() -> None:
            mark = len(run.acked)
            wait_until("writes in this phase", lambda: len(run.acked) >= mark + 20, 60)
            dep.instances.kill(0)

        def kill_redis() -> None:
            rc.stop_node(redis_victim)
            wait_until("Redis failover", rc.failed_over, 60, interval=0.1)

        def kill_nats() -> None:
            nc.stop_node(nats_victim)
            wait_until("a new stream leader", lambda: dep.stream_leader() != nats_victim, 60, interval=0.2)

        n, s = args.iterations, args.seconds
        events = measure_events(dep)
        phases = [Phase("writes only", n, s, writes_only=True), Phase("baseline", n, s), Phase("kill -9 instance", n, s, kill_instance, "kill -9 of instance 1"),
                  Phase("instance restart", n, s, lambda: dep.instances.restart(0), "instance 1 restarted"),
                  Phase("redis node down", n, s, kill_redis, f"Redis primary :{redis_victim} killed"),
                  Phase("nats node down", n, s, kill_nats, f"NATS stream leader :{nats_victim} killed"),
                  Phase("after", n, s)]
        started = time.monotonic()
        run_phases(rr, phases, clients=args.clients, users=args.users, run=run)
        rr.close()
        elapsed = time.monotonic() - started
        wait_until("an event per acknowledged write", lambda: dep.stream_messages() >= len(run.acked), 60)
        missing = set(run.acked) - dep.current_values()
        capacity = {**measure(dep, run, elapsed), **events}
        capacity["acknowledged_writes_lost"] = len(missing)
        paths = write_report(run, out, title="usermem cluster load run", conditions={
            "instances": "2 x usermem serve --workers 1", "clients": args.clients, "users": args.users,
            "store": "PostgreSQL 15 primary + synchronous streaming replica (fsync off)",
            "tier": "Redis Cluster 3 primaries + 3 replicas", "events": "JetStream 3 nodes, R3 stream",
            "machine": f"{os.cpu_count()} cores shared with other work (loaded)",
            "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg())})
        (out / "capacity.json").write_text(json.dumps(capacity, indent=2), encoding="utf-8")
        print(json.dumps({"files": {k: str(v) for k, v in paths.items()}, "capacity": capacity}, indent=2))
    finally:
        if d is not None:
            d.stop()
        for node in (nc, rc, pg):
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


def measure(d: Deployment, run: LoadRun, elapsed: float) -> dict[str, float]:
    """The capacity figures of docs/scaling.md from this run (see the conditions in the report)."""
    import psycopg

    with psycopg.connect(d.pg.url(), autocommit=True) as c:
        c.execute("VACUUM ANALYZE memories")
        rows, users = c.execute("SELECT count(*), count(DISTINCT user_id) FROM memories").fetchone() or (0, 0)
        size = c.execute("SELECT pg_total_relation_size('memories') + pg_total_relation_size('audit')").fetchone()
    total = int(size[0]) if size else 0
    base = next(p for p in run.phases if p.name == "writes only")
    writes = base.by_op["write"].get("n", 0)
    per_memory = total / rows if rows else 0.0
    return {"memory_rows": rows, "users": users, "memories_per_user": round(rows / users, 1) if users else 0,
            "bytes_per_memory_with_audit_and_indexes": round(per_memory),
            "users_per_gb_at_200_memories": round(2**30 / (per_memory * 200)) if per_memory else 0,
            "writes_per_s": round(writes / base.seconds, 1) if base.seconds else 0,
            "writes_per_s_per_core": round(writes / base.seconds / (os.cpu_count() or 1), 1) if base.seconds else 0,
            "write_p95_ms": base.by_op["write"].get("p95_ms", 0),
            "change_events_per_s_over_run": round(d.stream_messages() / elapsed, 1) if elapsed else 0,
            "run_seconds": round(elapsed, 1)}


def measure_events(d: Deployment, n: int = 5000) -> dict[str, float]:
    """usermem's EventBus publishing to the R3 stream (every publish acknowledged by JetStream): events/s."""
    from usermem.events.bus import EventBus

    bus = EventBus(d.nats.url(d.stream_leader()), stream=d.stream, subject_prefix="umcluster", name="capacity")
    try:
        if not bus.wait_connected(30):
            raise RuntimeError("the event bus did not connect")
        started = time.monotonic()
        for i in range(n):
            bus.publish(f"umcluster.capacity.e{i % 50}", b'{"op":"write","seq":%d}' % i)
        if not bus.flush(120):
            raise RuntimeError("the event bus did not publish everything in 120 s")
        elapsed = time.monotonic() - started
        stats = bus.stats()
    finally:
        bus.close()
    return {"events_published": int(stats["published"]), "events_failed": int(stats["failed"]),
            "events_per_s_r3": round(stats["published"] / elapsed, 1)}


if __name__ == "__main__":
    main()
