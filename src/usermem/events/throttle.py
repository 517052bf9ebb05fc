"""Warnings about what other parties send (malformed or refused events) are logged at most once per interval
per kind, with the number left out since: a hostile or broken publisher cannot flood the logs. Counters
(stats() / counts) keep the exact numbers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogThrottle:
    """`allow(kind)` → None when this warning should be left out, else how many were left out before it."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def allow(self, kind: str) -> int | None:
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._skipped[kind] = self._skipped.get(kind, 0) + 1
                return None
            self._last[kind] = now
            return self._skipped.pop(kind, 0)
