"""`EventBus`: the NATS JetStream connection of one process, in a background thread (docs/events.md).

Publishing never blocks or fails the caller: `publish()` hands the message to the bus thread's
asyncio loop and returns; a bounded queue holds messages while NATS is slow or away (beyond
`queue_size` new messages are dropped and counted). The thread connects, creates the stream if it
is missing, publishes in order and waits for each JetStream acknowledgement; a failed publish is
retried after the connection comes back, up to `attempts` times, then counted as failed. Every
failure is logged (the first of a run at WARNING, repeats at DEBUG) and counted in `stats()`.

Subscriptions are ordered push consumers starting at the time `subscribe()` was called, so events
published while the consumer is being created (or while NATS was away, within the stream's
retention) are still delivered. Callbacks run on one dispatcher thread, never on the event loop.

A NATS server that restarts without its JetStream state (issue 12 item 8) has lost the stream: on every
reconnect, and whenever a publish or purge answers "no stream", the bus recreates the stream and
re-creates its subscriptions' consumers (counted as `streams_recreated`), then retries the publish.

Erasure (`purge(subject)`, issue 12 item 6) *securely deletes* every stored message on the subject one
by one (JetStream's message delete without `no_erase`: the server overwrites the message's bytes in its
block file), then purges the subject. A plain purge only drops the messages from the index: their bytes,
L1 values included, stayed in the block files until the block was compacted or expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from usermem.config import missing_extra, redact_url
from usermem.events.payload import BadPayload, RemoteChange, carries_any, decode
from usermem.events.throttle import LogThrottle

log = logging.getLogger("usermem.events")

Callback = Callable[[RemoteChange], None]
Done = Callable[[bool], None]
_BATCH = 256  # publishes in flight at once


@dataclass(frozen=True)
class _Extra:
    """Options of one publish: a JetStream de-duplication id and a callback told the outcome."""

    msg_id: str | None = None
    done: Done | None = None


class Pulled:
    """A message fetched from a durable pull consumer; `ack()` / `nak()` from any thread."""

    def __init__(self, bus: EventBus, msg: Any) -> None:
        self._bus = bus
        self._msg = msg
        self.data: bytes = msg.data or b""
        self.subject: str = msg.subject
        try:  # JetStream's delivery count (redeliveries included)
            self.attempts: int = max(1, int(msg.metadata.num_delivered))
        except Exception:
            self.attempts = 1

    def ack(self) -> None:
        self._bus.call(self._msg.ack(), 5.0)

    def nak(self) -> None:
        """Redeliver later (after a second, so a failing apply does not spin)."""
        self._bus.call(self._msg.nak(delay=1.0), 5.0)


@dataclass
class Subscription:
    subject: str
    callback: Callback
    start: float
    ready: threading.Event = field(default_factory=threading.Event)
    handle: Any = None
    attaching: bool = False


class EventBus:
    """One NATS connection, a publishing queue and the subscriptions of this process."""

    def __init__(self, url: str, *, stream: str = "USERMEM", subject_prefix: str = "usermem",
                 queue_size: int = 10_000, max_age: float = 86_400.0, attempts: int = 3,
                 connect_timeout: float = 2.0, retry_interval: float = 1.0, heartbeat: float = 2.0,
                 name: str = "usermem") -> None:
        if importlib.util.find_spec("nats") is None:  # pragma: no cover - depends on installation
            raise missing_extra("nats", ImportError("nats-py is not installed", name="nats"))
        self.url = url
        self.stream = stream
        self.prefix = subject_prefix
        self.queue_size = queue_size
        self.max_age = max_age
        self.attempts = attempts
        self.connect_timeout = connect_timeout
        self.retry_interval = retry_interval
        self.heartbeat = heartbeat  # consumer idle heartbeat: two missed -> the consumer is recreated
        self.name = name
        self._counts = {"enqueued": 0, "published": 0, "failed": 0, "dropped": 0, "received": 0, "delivered": 0,
                        "bad_payloads": 0, "callback_errors": 0, "connects": 0, "disconnects": 0,
                        "connect_errors": 0, "publish_errors": 0, "purged": 0, "skipped_old": 0,
                        "streams_recreated": 0, "consumers_recreated": 0, "erased_messages": 0}
        self._latencies: deque[float] = deque(maxlen=10_000)  # enqueue -> JetStream ack, seconds
        self._last_error: str | None = None
        self._warned: set[str] = set()
        self.log_throttle = LogThrottle()  # malformed events: one warning per minute (counted in stats())
        self._lock = threading.Lock()
        self._subs: list[Subscription] = []
        self._closed = False
        self._nc: Any = None
        self._js: Any = None
        self._connected = threading.Event()
        self._recovering: asyncio.Lock | None = None  # created on the bus loop
        self._stream_id = ""  # the stream's creation time as NATS reports it: a new value = a new stream
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[tuple[str, str, bytes, float, _Extra | None]] | None = None
        self._pulls: dict[str, Any] = {}
        self._inflight = 0
        self._idle = threading.Condition()
        self._dispatch: queue.Queue[tuple[Subscription, RemoteChange] | None] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name=f"{name}-nats", daemon=True)
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name=f"{name}-events", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._dispatcher.start()
        self._started.wait(5)

    # -- public -------------------------------------------------------------------------------------

    def publish(self, subject: str, data: bytes, *, msg_id: str | None = None, done: Done | None = None) -> bool:
        """Queue one message; returns False when it was dropped (bus closed or queue full). Never raises.

        `msg_id`: JetStream drops a second message with the same id within its duplicate window (the outbox
        relay republishing after a crash). `done(True)` is called on the bus thread once JetStream
        acknowledged the message, `done(False)` when it was given up or dropped."""
        extra = _Extra(msg_id, done) if msg_id is not None or done is not None else None
        ok = self._submit("publish", subject, data, extra)
        if not ok and done is not None:
            done(False)
        return ok

    def purge(self, subject: str) -> bool:
        """Queue the removal of the stream's stored messages on `subject` (erasure), ahead of later publishes."""
        return self._submit("purge", subject, b"")

    def erase_matching(self, subject: str, memory_ids: Iterable[str]) -> bool:
        """Queue the secure deletion of the stored messages on `subject` whose records name any of
        `memory_ids` (erasure of a key or a time range: the events that carried those versions' values),
        ahead of later publishes. Other messages on the subject stay."""
        return self._submit("erase", subject, json.dumps(sorted(set(memory_ids))).encode("utf-8"))

    def _submit(self, op: str, subject: str, data: bytes, extra: _Extra | None = None) -> bool:
        if self._closed:
            self._count("dropped")
            return False
        with self._idle:
            if self._inflight >= self.queue_size:
                full = True
            else:
                full = False
                self._inflight += 1
        if full:
            self._count("dropped")
            self._problem("publish queue full, dropping new events", f"{self.queue_size} waiting")
            return False
        self._count("enqueued")
        try:
            self._loop.call_soon_threadsafe(self._enqueue, op, subject, data, time.perf_counter(), extra)
            return True
        except RuntimeError:  # loop closed under us
            self._settle()
            self._count("dropped")
            return False

    def subscribe(self, callback: Callback, subject: str | None = None, *, ready_timeout: float = 5.0) -> Subscription:
        """Deliver every message on `subject` (default: all of usermem's) published from now on.

        Waits up to `ready_timeout` seconds for the consumer to exist when NATS is reachable; when it is
        not, returns at once and the consumer is created when the connection comes up (events since
        this call are then delivered, within the stream's retention).
        """
        sub = Subscription(subject or f"{self.prefix}.>", callback, time.time())
        with self._lock:
            self._subs.append(sub)
        if self._connected.is_set():
            asyncio.run_coroutine_threadsafe(self._attach(sub), self._loop)
            sub.ready.wait(ready_timeout)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
        if sub.handle is not None and not self._closed:
            asyncio.run_coroutine_threadsafe(self._detach(sub), self._loop)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued message is published, failed or dropped; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._inflight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def reset_latencies(self, keep: int | None = None) -> None:
        """Forget the publish latencies measured so far; keep the last `keep` from now on (benchmarks)."""
        with self._lock:
            self._latencies = deque(maxlen=keep if keep is not None else self._latencies.maxlen)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            lat = sorted(self._latencies)
        out["connected"] = self.connected
        out["queued"] = self._inflight
        out["last_error"] = self._last_error
        if lat:
            out["publish_p50_ms"] = round(lat[len(lat) // 2] * 1000, 3)
            out["publish_p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 3)
        return out

    def close(self, timeout: float = 5.0) -> None:
        """Publish what is queued (up to `timeout` seconds), then disconnect and stop the threads."""
        if self._closed:
            return
        if self._inflight and not self.connected and self._counts["connect_errors"] == 0:
            self._connected.wait(timeout)  # a short-lived process: the first connection is still under way
        if self.connected:  # nothing can be published while NATS is away: do not wait for it
            self.flush(timeout)
        self._closed = True
        try:
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            fut.result(timeout)
        except Exception as exc:  # a close must not raise
            log.debug("event bus shutdown: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._dispatch.put(None)
        self._dispatcher.join(timeout)

    # -- bookkeeping ---------------------------------------------------------------------------------

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _settle(self) -> None:
        with self._idle:
            self._inflight -= 1
            if self._inflight <= 0:
                self._idle.notify_all()

    def _problem(self, what: str, exc: BaseException | str) -> None:
        self._last_error = f"{what}: {exc}"
        if what not in self._warned:
            self._warned.add(what)
            if what in ("cannot connect", "disconnected", "connection error"):
                hint = "events wait in a bounded queue and publishing resumes when NATS is back"
            elif "queue full" in what:
                hint = "dropped events are counted (stats()['dropped']); receivers re-read the store"
            else:
                hint = "see stats() for counters"
            log.warning("usermem events: %s (NATS %s); writes are unaffected, %s", self._last_error,
                        redact_url(self.url), hint)
        else:
            log.debug("usermem events: %s", self._last_error)

    # -- the bus thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.Queue()
        self._loop.create_task(self._publisher())
        self._loop.create_task(self._connector())
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    def _enqueue(self, op: str, subject: str, data: bytes, t0: float, extra: _Extra | None) -> None:
        assert self._queue is not None
        self._queue.put_nowait((op, subject, data, t0, extra))  # unbounded: `_submit` enforces queue_size

    async def _connector(self) -> None:
        import nats

        async def disconnected() -> None:
            self._connected.clear()
            if self._closed:
                return
            self._count("disconnects")
            self._problem("disconnected", "connection lost")

        async def reconnected() -> None:
            self._warned.difference_update({"disconnected", "cannot connect", "connection error"})
            log.info("usermem events: reconnected to NATS %s", redact_url(self.url))
            # The server may have restarted without its JetStream state: make sure the stream is there
            # (and the consumers with it) before publishing resumes.
            try:
                await self._recover()
            except Exception as exc:
                self._problem("stream recreation failed", exc)
            self._connected.set()

        async def error(exc: Exception) -> None:
            if self._connected.is_set():
                self._problem("connection error", exc)
            else:
                self._count("connect_errors")
                self._problem("cannot connect", exc)

        while not self._closed:
            nc: Any = None
            try:
                nc = await nats.connect(self.url, name=self.name, connect_timeout=self.connect_timeout,
                                        allow_reconnect=True, max_reconnect_attempts=-1,
                                        reconnect_time_wait=self.retry_interval, disconnected_cb=disconnected,
                                        reconnected_cb=reconnected, error_cb=error)
                js = nc.jetstream()
                await self._ensure_stream(js)
            except Exception as exc:
                self._count("connect_errors")
                self._problem("cannot connect", exc)
                if nc is not None:
                    with contextlib.suppress(Exception):
                        await nc.close()
                await asyncio.sleep(self.retry_interval)
                continue
            self._nc, self._js = nc, js
            self._count("connects")
            self._warned.discard("cannot connect")
            log.info("usermem events: connected to NATS %s, stream %s", redact_url(self.url), self.stream)
            self._connected.set()
            with self._lock:
                subs = list(self._subs)
            for sub in subs:
                await self._attach(sub)
            return

    async def _ensure_stream(self, js: Any) -> bool:
        """Create the stream when it is missing; True when this call created it. Remembers the stream's
        creation time, so a stream recreated by anyone (another instance) is recognised as new."""
        from nats.js.api import StreamConfig
        from nats.js.errors import NotFoundError

        try:
            info = await js.stream_info(self.stream)
            created = False
        except NotFoundError:
            info = await js.add_stream(StreamConfig(name=self.stream, subjects=[f"{self.prefix}.>"],
                                                    max_age=self.max_age))
            created = True
        self._stream_id = str(getattr(info, "created", None) or "")
        return created

    async def _recover(self) -> None:
        """Recreate a lost stream and, when it was lost, the consumers of every subscription."""
        if self._js is None:
            return
        if self._recovering is None:
            self._recovering = asyncio.Lock()
        async with self._recovering:
            before = self._stream_id
            if await self._ensure_stream(self._js):
                self._count("streams_recreated")
                log.warning("usermem events: stream %s was missing on NATS %s (restarted without its JetStream "
                            "state?); recreated it", self.stream, redact_url(self.url))
            elif self._stream_id == before:
                return  # the same stream as before: the consumers are still there
            # A new stream (ours or another instance's): the old consumers went with the old one.
            self._count("consumers_recreated")
            with self._lock:
                subs = list(self._subs)
            for sub in subs:
                if sub.handle is not None:
                    handle, sub.handle = sub.handle, None
                    with contextlib.suppress(Exception):
                        await handle.unsubscribe()
                await self._attach(sub)

    @staticmethod
    def _stream_missing(exc: BaseException) -> bool:
        from nats.errors import NoRespondersError
        from nats.js.errors import NoStreamResponseError, NotFoundError

        return isinstance(exc, NoRespondersError | NoStreamResponseError | NotFoundError)

    async def _erase(self, subject: str, only: frozenset[str] | None = None) -> None:
        """Securely delete every stored message on `subject` (bytes overwritten), then purge it; with
        `only`, just the messages whose records name one of those memory ids (no purge)."""
        from nats.js.errors import NotFoundError

        seq = 1
        while True:
            try:
                msg = await self._js.get_msg(self.stream, seq=seq, subject=subject, next=True)
            except NotFoundError:  # no more messages on the subject (or no stream: nothing stored)
                break
            if only is None or carries_any(msg.data or b"", only):
                with contextlib.suppress(NotFoundError):  # already gone (expired meanwhile)
                    await self._js.delete_msg(self.stream, msg.seq)
                    self._count("erased_messages")
            seq = msg.seq + 1
        if only is None:
            await self._js.purge_stream(self.stream, subject=subject)

    async def _publisher(self) -> None:
        assert self._queue is not None
        while True:
            # Publishes are pipelined in batches (written to the connection in queue order, acknowledged
            # together); a purge is a barrier that runs alone, after what was queued before it.
            batch = [await self._queue.get()]
            barrier = None
            if batch[0][0] == "publish":
                while len(batch) < _BATCH and not self._queue.empty():
                    item = self._queue.get_nowait()
                    if item[0] != "publish":
                        barrier = item
                        break
                    batch.append(item)
            for group in ([batch] if barrier is None else [batch, [barrier]]):
                try:
                    await asyncio.gather(*(self._publish_one(*item) for item in group))
                finally:
                    for _ in group:
                        self._settle()

    async def _publish_one(self, op: str, subject: str, data: bytes, t0: float, extra: _Extra | None) -> None:
        ok = False
        try:
            ok = await self._publish_attempts(op, subject, data, t0, extra)
        finally:
            if extra is not None and extra.done is not None:
                try:
                    extra.done(ok)
                except Exception:
                    log.exception("usermem events: publish callback failed")

    async def _publish_attempts(self, op: str, subject: str, data: bytes, t0: float, extra: _Extra | None) -> bool:
        headers = {"Nats-Msg-Id": extra.msg_id} if extra is not None and extra.msg_id else None
        for attempt in range(1, self.attempts + 1):
            while not self._connected.is_set():
                if self._closed:
                    self._count("failed")
                    return False
                await asyncio.sleep(0.05)
            try:
                if op == "purge":
                    await self._erase(subject)
                    self._count("purged")
                    return True
                if op == "erase":
                    await self._erase(subject, frozenset(json.loads(data)))
                    self._count("purged")
                    return True
                await self._js.publish(subject, data, stream=self.stream, timeout=2.0, headers=headers)
            except Exception as exc:
                self._count("publish_errors")
                self._problem(f"{op} failed", exc)
                if self._stream_missing(exc):
                    try:
                        await self._recover()
                    except Exception as again:
                        self._problem("stream recreation failed", again)
                if attempt < self.attempts:
                    await asyncio.sleep(min(self.retry_interval, 0.2 * attempt))
                continue
            with self._lock:
                self._counts["published"] += 1
                self._latencies.append(time.perf_counter() - t0)
            return True
        self._count("failed")
        log.error("usermem events: giving up on an event for %s after %d attempts (%s)", subject, self.attempts,
                  self._last_error)
        return False

    # -- durable pull consumers (federation, issue 17) ------------------------------------------------

    def call(self, coro: Any, timeout: float) -> Any:
        """Run a coroutine on the bus loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def fetch(self, durable: str, subject: str, batch: int = 64, timeout: float = 1.0, *,
              ack_wait: float = 30.0) -> list[Pulled]:
        """Up to `batch` messages of the durable pull consumer `durable` on `subject` (created on first use,
        delivering every message the stream holds; acknowledged explicitly, redelivered after a NAK or when
        neither acknowledged nor refused within `ack_wait` seconds — set when the consumer is created). Returns
        [] when none came within `timeout` or NATS is away."""
        if not self._connected.is_set() or self._closed:
            return []
        try:
            msgs = self.call(self._fetch(durable, subject, batch, timeout, ack_wait), timeout + 10.0)
        except Exception as exc:
            self._problem("fetch failed", exc)
            return []
        return [Pulled(self, m) for m in msgs]

    async def _fetch(self, durable: str, subject: str, batch: int, timeout: float, ack_wait: float) -> list[Any]:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        psub = self._pulls.get(durable)
        if psub is None:
            config = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                                    deliver_policy=DeliverPolicy.ALL, ack_wait=ack_wait, max_ack_pending=10_000)
            psub = self._pulls[durable] = await self._js.pull_subscribe(subject, durable=durable, stream=self.stream,
                                                                      config=config)
        try:
            return list(await psub.fetch(batch, timeout=timeout))
        except (TimeoutError, NatsTimeout):
            return []
        except Exception:
            self._pulls.pop(durable, None)  # e.g. the stream was recreated: subscribe again next time
            raise

    def pending(self, durable: str) -> int | None:
        """Messages the durable consumer has not been delivered yet (None: unknown)."""
        if not self._connected.is_set():
            return None
        try:
            info = self.call(self._js.consumer_info(self.stream, durable), 5.0)
        except Exception:
            return None
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    def delete_consumer(self, durable: str) -> None:
        """Remove a durable consumer from the server (tests, decommissioned instances)."""
        self._pulls.pop(durable, None)
        with contextlib.suppress(Exception):
            self.call(self._js.delete_consumer(self.stream, durable), 5.0)

    async def _attach(self, sub: Subscription) -> None:
        if sub.handle is not None or sub.attaching or self._js is None:
            return
        sub.attaching = True
        from nats.js.api import ConsumerConfig, DeliverPolicy

        async def on_message(msg: Any) -> None:
            self._count("received")
            try:
                meta = msg.metadata
                seq, stamp = meta.sequence.stream, meta.timestamp.timestamp()
            except Exception:
                seq, stamp = None, None
            if stamp is not None and stamp < sub.start:
                # An ordered consumer that restarts before its first message replays from the stream's
                # start (nats-py resets to sequence 1): keep "from the moment of subscribe()".
                self._count("skipped_old")
                return
            try:
                change = decode(msg.data, subject=msg.subject, stream_seq=seq)
            except BadPayload as exc:
                self._count("bad_payloads")
                left_out = self.log_throttle.allow("bad_payload")
                if left_out is not None:
                    log.warning("usermem events: ignoring a malformed event on %s: %s%s", msg.subject, exc,
                                f" ({left_out} more since the last warning)" if left_out else "")
                return
            try:
                self._dispatch.put_nowait((sub, change))
            except queue.Full:
                self._count("dropped")
                self._problem("receive queue full, dropping received events", "callbacks too slow")

        start = dt.datetime.fromtimestamp(sub.start, dt.UTC)
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
        try:
            sub.handle = await self._js.subscribe(sub.subject, cb=on_message, stream=self.stream,
                                                  ordered_consumer=True, idle_heartbeat=self.heartbeat, config=config)
            # nats-py keeps this config to recreate the consumer after a gap (server restart, missed
            # heartbeats) "by start sequence"; a start time left in it would make the server refuse that.
            config.opt_start_time = None
        except Exception as exc:
            self._problem("subscribe failed", exc)
        finally:
            sub.attaching = False
            sub.ready.set()

    async def _detach(self, sub: Subscription) -> None:
        try:
            await sub.handle.unsubscribe()
        except Exception as exc:
            log.debug("unsubscribe: %s", exc)

    async def _shutdown(self) -> None:
        nc = self._nc
        pulls, self._pulls = list(self._pulls.values()), {}
        for psub in pulls:  # a pull subscription's pending fetch would hold the drain up
            with contextlib.suppress(Exception):
                await asyncio.wait_for(psub.unsubscribe(), 1.0)
        if nc is not None:
            try:
                await nc.drain()
            except Exception:
                with contextlib.suppress(Exception):
                    await nc.close()
        self._connected.clear()

    # -- the dispatcher thread ----------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        while True:
            item = self._dispatch.get()
            if item is None:
                return
            sub, change = item
            with self._lock:
                active = sub in self._subs
            if not active:
                continue
            try:
                sub.callback(change)
                self._count("delivered")
            except Exception:
                self._count("callback_errors")
                log.exception("usermem events: callback %r failed for %s", sub.callback, change.action)
