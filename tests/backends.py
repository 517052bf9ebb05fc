"""Real PostgreSQL, Redis and NATS (JetStream) for the test suite: throwaway databases, schemas and key prefixes.

* One throwaway database per test session (``usermem_test_<pid>_<random>``), dropped at exit.
* One schema per test (named from the test's tmp_path, so two Memory objects of one test share it),
  dropped when the test ends.
* One Redis key prefix per test, deleted with SCAN + UNLINK when the test ends.
* NATS tests use their own stream and subject prefix (tests/test_events_nats.py).

When a server does not answer, ``scripts/ensure_services.sh`` is run once to start it from the Debian
packages. If it still does not answer, the tests that need it are skipped with the reason — or, when
``USERMEM_REQUIRE_BACKENDS=1`` (set by ``.ci/run``), they FAIL: in CI a missing backend must never turn
into a green run that tested nothing. Use :func:`unavailable` for every "backend missing" exit.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

PG_HOST = os.environ.get("USERMEM_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("USERMEM_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("USERMEM_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("USERMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("USERMEM_TEST_NATS_URL", "nats://127.0.0.1:4222")
ROOT = Path(__file__).resolve().parent.parent

_lock = threading.Lock()
_state: dict[str, Any] = {"ensured": False, "db": None, "pg_error": None, "redis_error": None, "nats_error": None}


def backends_required() -> bool:
    """True when a missing backend must fail the test run (``USERMEM_REQUIRE_BACKENDS=1``, set by .ci/run)."""
    return os.environ.get("USERMEM_REQUIRE_BACKENDS", "").strip().lower() in {"1", "true", "yes", "on"}


def unavailable(reason: str) -> NoReturn:
    """A backend (server, binary, wheel) the test needs is missing: skip locally, fail when backends are required."""
    if backends_required():
        pytest.fail(f"{reason} — USERMEM_REQUIRE_BACKENDS=1: a missing backend fails the run instead of skipping",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)  # also from a module's import-time check


@contextlib.contextmanager
def pgserver_uri(prefix: str = "usermem-pgvector-") -> Iterator[str]:
    """A PostgreSQL 16 + pgvector server from the `pgserver` wheel (the local server may lack the extension),
    started in a temp directory for the block; yields its URI (add `&schema=...`)."""
    try:
        import pgserver
    except ImportError:
        unavailable("pgserver (PostgreSQL + pgvector wheel, a dev dependency) is not installed")
    # Not under pytest's tmp dir: as root, pgserver runs the server as its own user, who needs access.
    data = Path(tempfile.mkdtemp(prefix=prefix))
    data.chmod(0o755)
    srv = pgserver.get_server(data / "pgdata", cleanup_mode="delete")
    try:
        yield srv.get_uri()
    finally:
        srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def pg_url(database: str = "postgres") -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


def _pg_ok() -> str | None:
    import psycopg

    try:
        with psycopg.connect(pg_url(), connect_timeout=3) as c:
            c.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__


def _redis_ok() -> str | None:
    import redis

    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        client.close()
        return None
    except redis.RedisError as exc:
        return str(exc) or type(exc).__name__


def _nats_ok(url: str = NATS_URL) -> str | None:
    """None when a NATS server with JetStream answers at `url`, else why not."""
    import asyncio
    import socket
    from urllib.parse import urlsplit

    import nats

    parts = urlsplit(url)
    try:  # nats.connect() retries a refused first connect forever: check the port first
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=2).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"

    async def quiet(_exc: Exception) -> None:
        return None

    async def probe() -> None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0,
                                error_cb=quiet)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(probe(), timeout=10))
        return None
    except Exception as exc:  # any failure (refused, timeout, no JetStream) is the reason to report
        return f"{type(exc).__name__}: {exc}".strip()


def _ensure_services() -> None:
    """Run scripts/ensure_services.sh once per session if PostgreSQL, Redis or NATS does not answer."""
    if _state["ensured"]:
        return
    _state["ensured"] = True
    if _pg_ok() is None and _redis_ok() is None and _nats_ok() is None:
        return
    script = ROOT / "scripts" / "ensure_services.sh"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["bash", str(script)], timeout=300, check=False, capture_output=True)


def require_postgres() -> str:
    """The URL of this session's throwaway database (created on first use), or skip the test."""
    with _lock:
        if _state["db"] is not None:
            return str(_state["db"])
        if _state["pg_error"] is not None:
            unavailable(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT}: {_state['pg_error']}")
        _ensure_services()
        err = _pg_ok()
        if err is not None:
            _state["pg_error"] = err
            unavailable(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT} and could not be started: {err}")
        import psycopg

        name = f"usermem_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_url(), autocommit=True) as c:
            _drop_orphans(c)
            c.execute(f'CREATE DATABASE "{name}"')
        _state["db"] = pg_url(name)
        atexit.register(_drop_database, name)
        return str(_state["db"])


def _drop_orphans(c: Any) -> None:
    """Drop throwaway databases left by test sessions that were killed (their process is gone)."""
    if not Path("/proc/self").exists():
        return
    for (name,) in c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'usermem\\_test\\_%'").fetchall():
        m = re.fullmatch(r"usermem_test_(\d+)_[0-9a-f]{8}", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            with contextlib.suppress(Exception):
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_database(name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(pg_url(), autocommit=True, connect_timeout=3) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass


def require_redis() -> str:
    with _lock:
        if _state["redis_error"] is None:
            _ensure_services()
            err = _redis_ok()
            if err is None:
                return REDIS_URL
            _state["redis_error"] = err
        unavailable(f"Redis is not reachable at {REDIS_URL} and could not be started: {_state['redis_error']}")


def require_nats() -> str:
    """The URL of a NATS server with JetStream (started by ensure_services.sh if needed), or skip/fail."""
    with _lock:
        if _state["nats_error"] is None:
            _ensure_services()
            err = _nats_ok()
            if err is None:
                return NATS_URL
            _state["nats_error"] = err
        unavailable(f"NATS JetStream is not reachable at {NATS_URL} and could not be started: {_state['nats_error']}")


def require_binary(name: str) -> str:
    """The path of a server binary a test starts itself (redis-server, nats-server), or skip/fail."""
    import shutil

    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()),
                                      None)
    if path is None:
        unavailable(f"{name} is not installed (scripts/ensure_services.sh installs it)")
    return path


def schema_for(tmp_path: Path) -> str:
    return "t_" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16]


def prefix_for(tmp_path: Path) -> str:
    return "umtest:" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:12]


def postgres_url(tmp_path: Path) -> str:
    """A store URL whose tables live in this test's own schema of the session database."""
    return f"{require_postgres()}?schema={schema_for(tmp_path)}"


def drop_schema(tmp_path: Path) -> None:
    db = _state["db"]
    if db is None:
        return
    import psycopg

    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{schema_for(tmp_path)}" CASCADE')


def delete_prefix(prefix: str, url: str = REDIS_URL) -> int:
    import redis

    client = redis.Redis.from_url(url)
    n = 0
    try:
        batch = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                n += client.unlink(*batch)
                batch = []
        if batch:
            n += client.unlink(*batch)
    finally:
        client.close()
    return n


def tiered_settings(tmp_path: Path, settings: Any = None, **overrides: Any) -> Any:
    from usermem.config import Settings

    base = settings if settings is not None else Settings()
    return base.with_overrides(store_url=postgres_url(tmp_path), redis_url=require_redis(), preset="tiered",
                               key_prefix=prefix_for(tmp_path), **overrides)


def postgres_factory(tmp_path: Path, **kw: Any) -> Any:
    from usermem import Memory

    url = postgres_url(tmp_path)
    if "settings" in kw:
        kw["settings"] = kw["settings"].with_overrides(store_url=url)
        return Memory(**kw)
    return Memory(url, **kw)


def tiered_factory(tmp_path: Path, **kw: Any) -> Any:
    from usermem import Memory

    kw["settings"] = tiered_settings(tmp_path, kw.get("settings"))
    return Memory(**kw)


def postgres_cleanup(tmp_path: Path) -> None:
    drop_schema(tmp_path)


def tiered_cleanup(tmp_path: Path) -> None:
    drop_schema(tmp_path)
    if _state["redis_error"] is None:
        delete_prefix(prefix_for(tmp_path))
