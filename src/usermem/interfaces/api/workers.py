"""`usermem serve --workers N`: the app each worker process builds (issue 19).

The parent process (interfaces/cli_service.py) resolves the settings, prints the example key and hands
uvicorn the import string of `worker_app` with a small JSON spec in the environment; uvicorn starts N
processes that share the listening socket, and each one calls `worker_app()`:

* its own Memory: SQLite in WAL mode is shared safely by several processes (writers serialise on
  `BEGIN IMMEDIATE`, readers never block), PostgreSQL gets one connection pool per worker;
* one SharedRateLimiter over the parent's file, so a key's budget is shared by every worker;
* MCP over streamable HTTP without sessions (each request stands alone), because a session kept by one
  worker would be unknown to the next;
* `/metrics` counts the requests of the worker that answers (per worker, documented in docs/scaling.md);
* webhook deliveries (docs/webhooks.md): every worker runs the delivery thread, but only the one holding the
  lock on the parent's lock file (`FileLease`) sends, so one serve does not deliver an event twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import FastAPI

from usermem.config import SERVE_WORKER_SPEC_ENV

SPEC_ENV = SERVE_WORKER_SPEC_ENV


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    overrides: dict[str, Any] = field(default_factory=dict)  # Settings overrides (store_url, host, port...)
    limiter_path: str | None = None  # the SharedRateLimiter file; None: a RateLimiter per worker
    mcp: bool = True
    graceful_seconds: float = 15.0
    webhook_lock_path: str | None = None  # FileLease path: the worker holding it delivers webhooks

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, raw: str) -> WorkerSpec:
        data = json.loads(raw)
        return cls(dict(data.get("overrides", {})), data.get("limiter_path"), bool(data.get("mcp", True)),
                   float(data.get("graceful_seconds", 15.0)), data.get("webhook_lock_path"))


class FileLease:
    """An exclusive `flock` on a file, taken without waiting and then held for the life of the process (the
    kernel releases it when the process ends, so another worker takes over). `__call__` is True while held."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        with self._lock:
            if self._fd is not None:
                return True
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._fd = fd
            return True


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn factory)."""
    from usermem.config import load_settings
    from usermem.engine.memory import Memory
    from usermem.errors import ConfigError
    from usermem.interfaces.api.app import create_app
    from usermem.interfaces.api.middleware import RateLimiter, SharedRateLimiter

    raw = os.environ.get(SPEC_ENV)
    if not raw:
        raise ConfigError(f"{SPEC_ENV} is not set: worker_app is started by `usermem serve --workers N`",
                          setting="workers")
    spec = WorkerSpec.from_env(raw)
    settings = load_settings().with_overrides(**spec.overrides)
    memory = Memory(settings=settings)
    per_minute = settings.rate_limit_per_minute
    limiter = SharedRateLimiter(per_minute, spec.limiter_path) if spec.limiter_path else RateLimiter(per_minute)
    return create_app(memory, close_memory=True, close_timeout=spec.graceful_seconds,
                      mcp_path="/mcp" if spec.mcp else None, host=settings.host, limiter=limiter,
                      mcp_stateless=True, deliver_webhooks=spec.webhook_lock_path is not None,
                      may_deliver=FileLease(spec.webhook_lock_path) if spec.webhook_lock_path else None)
