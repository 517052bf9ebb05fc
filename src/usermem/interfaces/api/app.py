"""The FastAPI application factory."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from usermem import __version__
from usermem.config import Settings, load_settings
from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.interfaces.api import problems
from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.api.middleware import BodyLimitAndMetrics, Metrics, RateLimiter
from usermem.interfaces.api.routes import AREA_ROUTERS

log = logging.getLogger("usermem.api")
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024

DESCRIPTION = """Long-term user memory for AI agents.

Authenticate with `Authorization: Bearer umk_...` (or `X-API-Key`). The key decides the tenant; a
tenant is never read from a request body. Errors are RFC 9457 `application/problem+json` with a
stable `code`. Write decisions — REJECT included — are 200 responses.
"""


def create_app(memory: Memory | None = None, *, settings: Settings | None = None, keys: KeyRing | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, rate_limit_per_minute: int | None = None,
               readiness_checks: dict[str, Callable[[], None]] | None = None,
               close_memory: bool | None = None, inline_engine: bool | None = None,
               close_timeout: float = 20.0, mcp_path: str | None = None, host: str = "127.0.0.1",
               limiter: RateLimiter | None = None, mcp_stateless: bool = False,
               deliver_webhooks: bool = False, may_deliver: Callable[[], bool] | None = None) -> FastAPI:
    """Build the app. With no `memory`, one is opened from `settings` (or the environment) and closed on shutdown.

    `mcp_path` (e.g. "/mcp") also serves the MCP tools there over streamable HTTP, authenticated by API key.

    `limiter`: the per-key rate limiter (default: a RateLimiter of this process); several worker processes
    pass one SharedRateLimiter each over the same file. `mcp_stateless`: MCP requests carry no session
    (needed when several processes answer the same port: a session would live in one of them only).

    `readiness_checks` adds named callables that raise when a backend is down (the store is always checked).

    `deliver_webhooks`: run the webhook delivery worker (engine/webhooks.py DeliveryWorker) while the app is up,
    every `settings.webhook_poll_seconds` (0 turns it off); `may_deliver` is asked before each pass (several
    worker processes let one deliver). `usermem serve` turns it on.
    """
    owned = memory is None
    if memory is None:
        settings = settings or load_settings()
        memory = Memory(settings=settings)
    settings = memory.settings
    per_minute = settings.rate_limit_per_minute if rate_limit_per_minute is None else rate_limit_per_minute
    close = owned if close_memory is None else close_memory

    mcp_box: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[None]:
        worker = None
        if deliver_webhooks and settings.webhook_poll_seconds > 0:
            from usermem.engine.webhooks import DeliveryWorker

            worker = DeliveryWorker(memory.webhooks, settings.webhook_poll_seconds, may_deliver=may_deliver).start()
        app_.state.webhook_worker = worker
        try:
            if "server" in mcp_box:
                async with mcp_box["server"].session_manager.run():
                    yield
            else:
                yield
        finally:
            if worker is not None:  # stopped before the engine closes: no pass runs on a closed store
                worker.stop()
        # uvicorn has drained in-flight requests by now (graceful shutdown); close the engine last. Every
        # acknowledged write is already committed; closing only drains derived work (the vector-index queue).
        # Bound it, so a long backlog cannot keep a terminating server alive (`usermem reindex` repairs).
        if close:
            _close_bounded(memory, close_timeout)

    app = FastAPI(title="usermem", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.memory = memory
    app.state.webhook_worker = None
    app.state.keys = keys or KeyRing(memory.store)
    app.state.metrics = Metrics()
    app.state.limiter = limiter if limiter is not None else RateLimiter(per_minute)
    app.state.inline_engine = _serialised_store(memory) if inline_engine is None else inline_engine
    app.state.engine_threads = settings.http_engine_threads
    checks = backend_checks(memory)
    checks.update(readiness_checks or {})
    app.state.readiness_checks = checks
    problems.install(app)
    if mcp_path:
        from usermem.interfaces.mcp import mount_on

        mcp_box["server"] = mount_on(app, memory, app.state.keys, path=mcp_path, host=host,
                                     limiter=app.state.limiter, on_limited=app.state.metrics.rate_limited.inc,
                                     stateless=mcp_stateless)
    for area_router in AREA_ROUTERS.values():  # one router per area of the operation catalogue
        app.include_router(area_router)
    _ops_routes(app)
    _docs_routes(app)
    _console_routes(app)
    app.add_middleware(BodyLimitAndMetrics, max_body_bytes=max_body_bytes, metrics=app.state.metrics)
    _declare_security(app)
    return app


def _declare_security(app: FastAPI) -> None:
    """Every /v1 operation takes a key: publish the schemes and the requirement in the OpenAPI schema."""
    from fastapi.openapi.utils import get_openapi

    from usermem.interfaces.api.deps import SECURITY_SCHEMES

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
            for path, ops in schema.get("paths", {}).items():
                if path.startswith("/v1"):
                    for op in ops.values():
                        op["security"] = [{"bearer": []}, {"apiKey": []}]
            _describe_from_catalogue(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _describe_from_catalogue(schema: dict[str, Any]) -> None:
    """Parameters and body fields without their own description get the catalogue's (`PARAM_DOCS`), so the
    OpenAPI schema and the MCP tools describe a parameter with one text."""
    from usermem.interfaces.catalog import describe

    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            for param in op.get("parameters", []) if isinstance(op, dict) else []:
                if not param.get("description") and describe(param.get("name", "")):
                    param["description"] = describe(param["name"])
    for component in schema.get("components", {}).get("schemas", {}).values():
        for name, prop in component.get("properties", {}).items():
            if isinstance(prop, dict) and not prop.get("description") and describe(name):
                prop["description"] = describe(name)


def _close_bounded(memory: Memory, timeout: float) -> None:
    import threading

    done = threading.Event()

    def run() -> None:
        try:
            memory.close()
        except Exception:
            log.exception("closing the engine failed")
        finally:
            done.set()

    threading.Thread(target=run, name="usermem-close", daemon=True).start()
    if not done.wait(timeout):
        log.warning("engine did not close within %.0f s (indexing backlog?); exiting anyway — acknowledged "
                    "writes are committed, run `usermem reindex` if recall(query=...) misses recent memories",
                    timeout)


def backend_checks(memory: Memory) -> dict[str, Callable[[], None]]:
    """One check per configured backend: the store of record, and each serving tier (Redis, session...)
    separately — a tiered store's own ping() only degrades when a tier is down, readiness should say so."""
    store: Any = memory.store
    record = getattr(store, "record", None)
    checks: dict[str, Callable[[], None]] = {"store": record.ping if record is not None else store.ping}
    for tier in getattr(store, "tiers", None) or ():
        ping = getattr(tier, "ping", None)
        if callable(ping):
            checks[f"tier:{getattr(tier, 'name', type(tier).__name__)}"] = ping
    return checks


def _serialised_store(memory: Memory) -> bool:
    """True when every store call is serialised anyway: the embedded SQLite store (one connection, one lock)."""
    from usermem.store.sqlite import SQLiteStore

    return isinstance(memory.store, SQLiteStore)


DOCS_ASSETS = "/docs/assets"


def _console_routes(app: FastAPI) -> None:
    """`/` (landing page), `/console` (operators) and `/me` (users): docs/console.md."""
    from usermem.interfaces.console import mount_console

    mount_console(app)


def _docs_routes(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc with their JavaScript, CSS and icon served from the installed
    `fastapi-offline` package: the pages work without internet access (no CDN)."""
    from importlib.resources import files

    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(openapi_url=f"{root}/openapi.json", title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
                                   swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}/openapi.json", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png", with_google_fonts=False)


def _ops_routes(app: FastAPI) -> None:
    @app.get("/health", tags=["ops"], response_model=S.Health, summary="Liveness: the process answers")
    def health() -> S.Health:
        return S.Health(status="ok", version=__version__, worker=os.getpid())

    @app.get("/ready", tags=["ops"], response_model=S.Readiness,
             responses={503: {"model": S.Readiness, "description": "A backend does not answer"}},
             summary="Readiness: every configured backend answers")
    def ready(request: Request) -> Any:
        results: dict[str, str] = {}
        ok = True
        for name, check in request.app.state.readiness_checks.items():
            try:
                check()
                results[name] = "ok"
            except (UsermemError, OSError, Exception) as exc:
                ok = False
                results[name] = f"error: {type(exc).__name__}: {exc}"[:300]
        body = {"status": "ready" if ok else "unavailable", "checks": results}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    def metrics(request: Request) -> Response:
        return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
