"""Derived attributes follow their inputs off the request path (issue 18, docs/usermodel.md).

A change listener queues (tenant, user) after every committed write or forget; one daemon thread drains the
queue and asks the user model to recompute that user's derived attributes — only when the change touched a
field some active rule reads. A request never waits for it; `Memory.flush()` does. Reads never show an
attribute whose inputs changed since it was computed (understand/usermodel.py checks the input versions), so
the delay is invisible, only the recompute's cost is moved.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from usermem.model import ChangeEvent

log = logging.getLogger("usermem.usermodel")

Refresh = Callable[[str, str], object]
InputKeys = Callable[[str], frozenset[str]]
_ACTIONS = frozenset({"write", "forget"})


class DerivedRefresher:
    """A change listener: queue the user, recompute in the background (bounded; overflow is counted)."""

    def __init__(self, refresh: Refresh, input_keys: InputKeys, *, maxsize: int = 10_000) -> None:
        self._refresh = refresh
        self._input_keys = input_keys
        self._queue: queue.Queue[tuple[str, str, frozenset[str]] | None] = queue.Queue(maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.dropped = 0
        self.failures = 0

    def __call__(self, event: ChangeEvent) -> None:
        if event.action not in _ACTIONS or self._closed:
            return
        self._start()
        try:
            self._queue.put_nowait((event.tenant, event.user_id, frozenset(event.keys)))
        except queue.Full:
            self.dropped += 1  # the next change of this user recomputes; reads hide stale attributes meanwhile

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="usermem-derived", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                tenant, user_id, keys = item
                if keys and not keys & self._input_keys(tenant):
                    continue
                self._refresh(tenant, user_id)
            except Exception:  # a failed recompute never breaks the worker; reads hide stale attributes
                self.failures += 1
                log.exception("derived attributes: recompute failed")
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every queued recompute is done (tests, shutdown)."""
        if self._thread is None:
            return
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        done.wait(timeout)

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=5)
            except queue.Full:
                return
            self._thread.join(timeout=5)
