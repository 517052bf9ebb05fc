"""`usermem serve --workers N`: the app each worker process builds (issue 19).

The parent process (interfaces/cli_service.py) resolves the settings, prints the example key and hands
uvicorn the import string of `worker_app` with a small JSON spec in the environment; uvicorn starts N
processes that share the listening socket, and each one calls `worker_app()`:

* its own Memory: SQLite in WAL mode is shared safely by several processes (writers serialise on
  `BEGIN IMMEDIATE`, readers never block), PostgreSQL gets one connection pool per worker;
* one SharedRateLimiter over the parent's file, so a key's budget is shared by every worker;
* MCP over streamable HTTP without sessions (each request stands alone), because a session kept by one
  worker would be unknown to the next;
* `/metrics` counts the requests of the worker that answers (per worker, documented in docs/scaling.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import FastAPI

SPEC_ENV = "USERMEM_SERVE_WORKER_SPEC"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    overrides: dict[str, Any] = field(default_factory=dict)  # Settings overrides (store_url, host, port...)
    limiter_path: str | None = None  # the SharedRateLimiter file; None: a RateLimiter per worker
    mcp: bool = True
    graceful_seconds: float = 15.0

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, raw: str) -> WorkerSpec:
        data = json.loads(raw)
        return cls(dict(data.get("overrides", {})), data.get("limiter_path"), bool(data.get("mcp", True)),
                   float(data.get("graceful_seconds", 15.0)))


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
                      mcp_stateless=True)
