"""Derived attributes follow their inputs off the request path (issue 18, docs/usermodel.md).

A change listener queues (tenant, user) after every committed write or forget; one daemon thread drains the
queue and asks the user model to recompute that user's derived attributes — only when the change touched a
field some active rule reads. A request never waits for it; `Memory.flush()` does. Reads never show an
attribute whose inputs changed since it was computed (understand/usermodel.py checks the input versions), so
the delay is invisible, only the recompute's cost is moved.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from usermem.model import ChangeEvent

log = logging.getLogger("usermem.usermodel")

Refresh = Callable[[str, str], object]
InputKeys = Callable[[str], frozenset[str]]
_ACTIONS = frozenset({"write", "forget"})


class DerivedRefresher:
    """A change listener: file the user, recompute in the background (bounded; overflow is counted).

    A write only adds its keys to the user's entry in a map under a lock and wakes the worker when it is
    idle; the worker waits `coalesce` seconds so a stream of writes costs one wake-up per batch of users
    rather than one per write (issue 19: a thread switch per write cost the writers a quarter of their
    throughput on a busy 2-core host), and recomputes each user once per batch."""

    def __init__(self, refresh: Refresh, input_keys: InputKeys, *, maxsize: int = 10_000,
                 coalesce: float = 0.02) -> None:
        self._refresh = refresh
        self._input_keys = input_keys
        self._maxsize = maxsize
        self._coalesce = coalesce
        self._todo: dict[tuple[str, str], set[str]] = {}
        self._cond = threading.Condition()
        self._waiting = False
        self._busy = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.dropped = 0
        self.failures = 0

    def __call__(self, event: ChangeEvent) -> None:
        if event.action not in _ACTIONS or self._closed:
            return
        self._start()
        with self._cond:
            user = (event.tenant, event.user_id)
            keys = self._todo.get(user)
            if keys is None:
                if len(self._todo) >= self._maxsize:
                    self.dropped += 1  # the next change of this user recomputes; reads hide stale attributes
                    return
                keys = self._todo[user] = set()
            keys.update(event.keys)
            if self._waiting:
                self._cond.notify()

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="usermem-derived", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._todo and not self._closed:
                    self._waiting = True
                    self._cond.wait()
                    self._waiting = False
                if self._closed and not self._todo:
                    return
            if self._coalesce > 0 and not self._closed:
                time.sleep(self._coalesce)  # background thread: let a batch of writes gather
            with self._cond:
                batch, self._todo = self._todo, {}
                self._busy = True
            try:
                self._recompute(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _recompute(self, batch: dict[tuple[str, str], set[str]]) -> None:
        for (tenant, user_id), keys in batch.items():
            try:
                if keys and not keys & self._input_keys(tenant):
                    continue
                self._refresh(tenant, user_id)
            except Exception:  # a failed recompute never breaks the worker; reads hide stale attributes
                self.failures += 1
                log.exception("derived attributes: recompute failed")

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every filed recompute is done (tests, shutdown)."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._todo or self._busy) and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if self._waiting:
                    self._cond.notify()
                self._cond.wait(timeout=min(left, 0.1))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
