"""The operator console (`/console`), the "my memory" page (`/me`) and the landing page (`/`).

Server-rendered (Jinja2 templates, htmx for partial updates, SVG charts drawn on the server); every
asset is in this package (static/, vendored with its version and licence in static/vendor/VENDOR.md),
so the pages work offline with no build step. docs/console.md describes them.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from usermem.interfaces.console.web import STATIC_DIR, render

STATIC_PATH = "/console/static"


def mount_console(app: FastAPI) -> None:
    """Add `/`, `/console/...`, `/me/...` and the static assets to an app built by `create_app`."""
    from usermem.interfaces.console.views_console import router as console_router
    from usermem.interfaces.console.views_me import router as me_router

    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="console-static")
    app.include_router(console_router)
    app.include_router(me_router)

    @app.get("/", include_in_schema=False)
    def landing(request: Request) -> Response:
        return render(request, "landing.html")


__all__ = ["mount_console"]
