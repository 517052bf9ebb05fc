"""Pure-ASGI pieces on the request path: body size limit, latency metrics, per-key rate limiting, the read
scope of each request (store.base.read_scope)."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from usermem.interfaces.api.problems import problem_response
from usermem.store.base import read_scope

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """One registry per app, so several apps (tests) never collide in the global registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram("usermem_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.decisions = Counter("usermem_write_decisions_total", "Write decisions by op and reason",
                                 ["op", "reason"], registry=self.registry)
        self.in_flight = Gauge("usermem_http_requests_in_flight", "Requests being served", registry=self.registry)
        self.rate_limited = Counter("usermem_rate_limited_total", "Requests refused by the rate limiter",
                                    registry=self.registry)

    def decision(self, op: str, reason: str | None) -> None:
        self.decisions.labels(op, reason or "none").inc()


class _TooLarge(Exception):
    pass


class BodyLimitAndMetrics:
    """Refuses bodies above `max_body_bytes` with 413 (by Content-Length, or while streaming) and records
    request latency by route template."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = {"status": 500, "started": False, "too_large": False}
        limit = self.max_body_bytes

        async def send_wrapper(message: Message) -> None:
            if state["too_large"]:
                return  # the app's answer to a truncated body is replaced by the 413 below
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
            await send(message)

        self.metrics.in_flight.inc()
        try:
            length = _content_length(scope)
            if length is not None and length > limit:
                await problem_response(413, "payload_too_large",
                                       f"request body is {length} bytes; the limit is {limit}")(scope, receive, send_wrapper)
                return
            seen = 0

            async def receive_wrapper() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > limit and not state["started"]:
                        state["too_large"] = True
                        raise _TooLarge()
                return message

            # One read scope per request: with a read replica, the primary's WAL position is asked once.
            with contextlib.suppress(_TooLarge), read_scope():
                await self.app(scope, receive_wrapper, send_wrapper)
            if state["too_large"]:
                state["too_large"] = False
                await problem_response(413, "payload_too_large",
                                       f"request body exceeds the limit of {limit} bytes")(scope, receive, send_wrapper)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.latency.labels(scope.get("method", "?"), path,
                                        str(state["status"])).observe(time.perf_counter() - start)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class RateLimiter:
    """Token bucket per key: `per_minute` requests per minute with bursts up to `per_minute`. 0 disables."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key_id: str) -> float | None:
        """None when allowed, else seconds until a token is available."""
        if self.per_minute <= 0:
            return None
        rate = self.per_minute / 60.0
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return None
            self._buckets[key_id] = (tokens, now)
            return (1.0 - tokens) / rate


class SharedRateLimiter(RateLimiter):
    """The token buckets of RateLimiter kept in one small file that every worker process of
    `usermem serve --workers N` maps, so a key's budget is shared by all workers (issue 19).

    The file holds `slots` buckets (key hash, tokens, last refill on the system-wide monotonic clock);
    each take() holds an exclusive flock for a few microseconds. A key lives in one of 16 slots after its
    hash; when all 16 are taken by other keys, the one idle longest is reused (its bucket would be full
    again by then unless it was used within the last minute, the only case where a key regains tokens early).
    """

    _SLOT = struct.Struct("<Qdd")
    _PROBE = 16

    def __init__(self, per_minute: int, path: str, *, slots: int = 4096) -> None:
        super().__init__(per_minute)
        import fcntl  # POSIX only; serve uses one worker (and RateLimiter) where it is missing

        self._flock = fcntl.flock
        self._lock_ex, self._lock_un = fcntl.LOCK_EX, fcntl.LOCK_UN
        self.path = path
        self._slots = slots
        size = slots * self._SLOT.size
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)

    def _slot(self, h: int, now: float) -> tuple[int, float, float]:
        """(offset, tokens, last) of the key's bucket, claiming a slot when it has none."""
        pack, unpack, size = self._SLOT.pack_into, self._SLOT.unpack_from, self._SLOT.size
        oldest, oldest_at = -1, float("inf")
        for i in range(self._PROBE):
            off = ((h + i) % self._slots) * size
            owner, tokens, last = unpack(self._map, off)
            if owner == h:
                return off, tokens, last
            if owner == 0:
                oldest, oldest_at = off, -float("inf")
                break
            if last < oldest_at:
                oldest, oldest_at = off, last
        pack(self._map, oldest, h, float(self.per_minute), now)
        return oldest, float(self.per_minute), now

    def take(self, key_id: str) -> float | None:
        if self.per_minute <= 0:
            return None
        rate = self.per_minute / 60.0
        h = int.from_bytes(hashlib.blake2b(key_id.encode(), digest_size=8).digest(), "little") or 1
        with self._lock:
            self._flock(self._fd, self._lock_ex)
            try:
                now = self.clock()
                off, tokens, last = self._slot(h, now)
                tokens = min(float(self.per_minute), tokens + max(0.0, now - last) * rate)
                if tokens >= 1.0:
                    self._SLOT.pack_into(self._map, off, h, tokens - 1.0, now)
                    return None
                self._SLOT.pack_into(self._map, off, h, tokens, now)
                return (1.0 - tokens) / rate
            finally:
                self._flock(self._fd, self._lock_un)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
