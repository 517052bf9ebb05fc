"""Change-event benchmarks (docs/events.md), against the NATS JetStream server on 127.0.0.1:4222.

* write latency on SQLite with events off, with events on, and with NATS down (a closed port): what
  publishing costs the writer (it only queues);
* publish latency (queued -> JetStream acknowledgement) and publish throughput for a burst of writes;
* delivery latency: a write on instance A until B's `on_remote_change` callback runs.

Each run uses its own stream, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from typing import Any

from usermem.bench import BenchContext, benchmark, percentiles
from usermem.config import Settings
from usermem.engine.memory import Memory
from usermem.events.sync import FederatedSync

NATS_URL = os.environ.get("USERMEM_BENCH_NATS_URL", "nats://127.0.0.1:4222")


def _drain_outbox(m: Memory, timeout: float) -> None:
    """Wait until the relay handed every event of the store's outbox to the bus and JetStream acknowledged it."""
    outbox = m.store.capabilities.outbox
    deadline = time.monotonic() + timeout
    while outbox is not None and outbox.pending(1) and time.monotonic() < deadline:
        time.sleep(0.005)
T0 = 1_790_000_000.0


def _settings(path: str, **kw: Any) -> Settings:
    return Settings().with_overrides(store_url=f"sqlite:///{path}", embedder="none", hybrid_lexical_weight=0.0,
                                     **kw)


def _delete_stream(stream: str) -> None:
    import nats

    async def go() -> None:
        nc = await nats.connect(NATS_URL, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            await nc.jetstream().delete_stream(stream)
        except Exception:
            pass
        finally:
            await nc.close()

    asyncio.run(go())


def _sync(m: Memory) -> FederatedSync:
    """The change-event sync of a Memory built with `nats_url` (always set here)."""
    if m.events is None:
        raise RuntimeError("this Memory has no nats_url: no change events to measure")
    return m.events


def _write_latencies(m: Memory, n: int, user: str) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        m.write("bench", user, "preference", f"k{i % 20}", f"value {i}", source="user_confirmed", now=T0 + i,
                client_id="app")
        out.append(time.perf_counter() - t)
    return out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@benchmark("events", load_generator="in the benchmark process (two Memory instances); NATS JetStream on the URL "
                                     "given (default 127.0.0.1:4222)")
def bench_events(ctx: BenchContext) -> dict[str, Any]:
    n = ctx.size(2_000, 100)
    burst = ctx.size(10_000, 300)
    run = uuid.uuid4().hex[:8]
    stream, prefix = f"UMBENCH_{run}", f"umbench.{run}"
    results: dict[str, Any] = {"writes": n, "burst": burst}
    with tempfile.TemporaryDirectory() as d:
        with Memory(settings=_settings(f"{d}/off.db")) as m:
            _write_latencies(m, 50, "warm")
            results["write_events_off"] = percentiles(_write_latencies(m, n, "u"))
        with Memory(settings=_settings(f"{d}/down.db", nats_url=f"nats://127.0.0.1:{_closed_port()}",
                                       nats_queue_size=n + 100)) as m:
            _write_latencies(m, 50, "warm")
            results["write_nats_down"] = percentiles(_write_latencies(m, n, "u"))
            results["write_nats_down"]["published"] = _sync(m).stats()["bus"]["published"]
        on = _settings(f"{d}/on.db", nats_url=NATS_URL, nats_stream=stream, nats_subject_prefix=prefix,
                       nats_queue_size=burst + 1_000)
        a, b = Memory(settings=on), Memory(settings=on)
        try:
            if not _sync(a).bus.wait_connected(5) or not _sync(b).bus.wait_connected(5):
                results["error"] = f"NATS unreachable at {NATS_URL}: {_sync(a).stats()['bus']['last_error']}"
                return results
            arrived: dict[str, float] = {}
            lock = threading.Lock()

            def on_remote(change: Any) -> None:
                now = time.perf_counter()
                with lock:
                    for mid in change.memory_ids:
                        arrived[mid] = now

            b.on_remote_change(on_remote)
            _write_latencies(a, 50, "warm")
            _sync(a).bus.flush(30)
            # Write latency with events on, and delivery: write, then wait (bounded) for B.
            writes, delivery = [], []
            for i in range(n):
                t = time.perf_counter()
                r = a.write("bench", "u", "preference", f"k{i % 20}", f"value {i}", source="user_confirmed",
                            now=T0 + i, client_id="app")
                writes.append(time.perf_counter() - t)
                mid = r.memory.id if r.memory is not None else None
                deadline = time.monotonic() + 5
                while mid is not None and time.monotonic() < deadline:
                    with lock:
                        got = arrived.get(mid)
                    if got is not None:
                        delivery.append(got - t)
                        break
                    time.sleep(0.0002)
            results["write_events_on"] = percentiles(writes)
            results["delivery_a_to_b"] = percentiles(delivery)
            results["delivery_a_to_b"]["lost"] = n - len(delivery)
            bus = _sync(a).bus
            _drain_outbox(a, 30)
            bus.flush(30)
            single = bus.stats()
            results["publish_one_at_a_time"] = {"queued_to_ack_p50_ms": single.get("publish_p50_ms"),
                                                "queued_to_ack_p99_ms": single.get("publish_p99_ms")}
            bus.reset_latencies()
            # Throughput: a burst of writes, then until every event is acknowledged by JetStream.
            before = bus.stats()["published"]
            t = time.perf_counter()
            for i in range(burst):
                a.write("bench", f"burst{i % 50}", "preference", "reply_length", f"v{i}", source="user_confirmed",
                        now=T0 + n + i)
            write_s = time.perf_counter() - t
            _drain_outbox(a, 120)  # issue 17: events leave through the transactional outbox's relay
            bus.flush(120)
            total_s = time.perf_counter() - t
            stats = bus.stats()
            results["burst_publish"] = {
                "events": stats["published"] - before, "writes_per_s": round(burst / write_s),
                "published_per_s": round((stats["published"] - before) / total_s),
                "queued_to_ack_p50_ms": stats.get("publish_p50_ms"), "queued_to_ack_p99_ms": stats.get("publish_p99_ms"),
                "failed": stats["failed"], "dropped": stats["dropped"]}
            # The publisher alone (no store): how many events per second JetStream acknowledges.
            raw = ctx.size(50_000, 1_000)
            # a well-formed event (the subscribers decode it; a malformed one would log a warning per message)
            payload = json.dumps({"v": 1, "event_id": "bench-synthetic", "causality_id": "bench-synthetic",
                                  "origin": "bench", "tenant": "bench", "user_id": "synthetic", "action": "write",
                                  "at": T0, "keys": ["reply_length"], "memory_ids": [], "records": []}).encode()
            before = bus.stats()["published"]
            bus.reset_latencies(keep=raw)
            t = time.perf_counter()
            for start in range(0, raw, 5_000):  # stay within the bounded queue
                for _ in range(min(5_000, raw - start)):
                    bus.publish(f"{prefix}.bench.synthetic.write", payload)
                bus.flush(120)
            elapsed = time.perf_counter() - t
            stats = bus.stats()
            results["bus_only"] = {"events": stats["published"] - before,
                                   "published_per_s": round((stats["published"] - before) / elapsed),
                                   "queued_to_ack_p50_ms": stats.get("publish_p50_ms"),
                                   "queued_to_ack_p99_ms": stats.get("publish_p99_ms")}
        finally:
            a.close()
            b.close()
            _delete_stream(stream)
    off = results["write_events_off"]["p50_ms"]
    results["write_overhead_p50_ms"] = round(results["write_events_on"]["p50_ms"] - off, 4)
    ctx.notes.append(f"events: delivery A→B p50 {results['delivery_a_to_b'].get('p50_ms')} ms, "
                     f"writes+events {results['burst_publish']['published_per_s']}/s, "
                     f"bus alone {results['bus_only']['published_per_s']} events/s acknowledged")
    return results
