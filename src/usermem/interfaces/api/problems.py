"""RFC 9457 problem+json errors with stable codes.

Every error body has `type` (urn:usermem:problem:<code>), `title`, `status`, `detail`, `code` and, for
input problems, `field` and `errors` (one entry per offending field). Codes are part of the public API.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from usermem import errors as E

log = logging.getLogger("usermem.api")
MEDIA_TYPE = "application/problem+json"

# usermem error class -> HTTP status. Subclasses come first: the first isinstance match wins.
STATUS_BY_ERROR: list[tuple[type[E.UsermemError], int]] = [
    (E.ValidationError, 422),
    (E.InvalidArgument, 422),
    (E.NotFound, 404),
    (E.ConflictError, 409),
    (E.PermissionDenied, 403),
    (E.TierUnavailable, 503),
    (E.IntegrityError, 409),
    (E.StoreError, 503),
    (E.ProviderError, 502),
    (E.ConfigError, 500),
    (E.UsermemError, 500),
]

TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
    409: "Conflict", 413: "Request body too large", 415: "Unsupported media type", 422: "Invalid input",
    429: "Too many requests", 500: "Internal error", 502: "Provider failed", 503: "Service unavailable",
}
CODES_BY_STATUS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                   405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
                   415: "unsupported_media_type", 422: "validation_error", 429: "rate_limited",
                   500: "internal_error", 502: "provider_error", 503: "unavailable"}


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    type: str = Field(description="urn:usermem:problem:<code>")
    title: str
    status: int
    detail: str | None = None
    code: str = Field(description="Stable machine-readable code, e.g. unauthorized, not_found, validation_error")
    field: str | None = None
    errors: list[FieldProblem] | None = None


def problem_response(status: int, code: str, detail: str | None = None, *, field: str | None = None,
                     errors: list[dict[str, str]] | None = None,
                     headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": f"urn:usermem:problem:{code}", "title": TITLES.get(status, "Error"),
                            "status": status, "detail": detail, "code": code}
    if field is not None:
        body["field"] = field
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


class ApiProblem(Exception):
    """Raised by handlers and dependencies for HTTP-level problems (auth, rate limit, absent resources)."""

    def __init__(self, status: int, code: str, detail: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.field, self.headers = status, code, detail, field, headers


def status_for(exc: E.UsermemError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 500


def _loc_to_field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def _api_problem(_: Request, exc: ApiProblem) -> JSONResponse:
        return problem_response(exc.status, exc.code, exc.detail, field=exc.field, headers=exc.headers)

    @app.exception_handler(E.UsermemError)
    async def _usermem(_: Request, exc: E.UsermemError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("request failed: %s: %s", type(exc).__name__, exc)
        field = getattr(exc, "field", None)
        detail = str(exc) if status < 500 or isinstance(exc, E.StoreError | E.ProviderError) else "internal error"
        errors = [{"field": field, "message": str(exc)}] if field else None
        return problem_response(status, exc.code, detail, field=field, errors=errors)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = []
        for e in exc.errors():
            loc = e.get("loc", ())
            if e.get("type") == "json_invalid":
                errs.append({"field": "body", "message": "body is not valid JSON"})
                continue
            errs.append({"field": _loc_to_field(loc), "message": str(e.get("msg", "invalid"))})
        first = errs[0]["field"] if errs else None
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errs) or "invalid input"
        return problem_response(422, "validation_error", detail, field=first, errors=errs)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        if status == 400:  # an unreadable body (bad encoding, broken JSON): an input problem with a field
            return problem_response(422, "validation_error", str(exc.detail) if exc.detail else "unreadable body",
                                    field="body", errors=[{"field": "body", "message": "unreadable body"}])
        # Raised by routing only (handlers raise ApiProblem): a 404 here means no such endpoint.
        code = "route_not_found" if status == 404 else CODES_BY_STATUS.get(status, "error")
        return problem_response(status, code, str(exc.detail) if exc.detail else None,
                                headers=dict(exc.headers) if exc.headers else None)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error: %s", exc)
        # The server closes the connection after an unhandled error: say so, so that keep-alive clients
        # do not reuse it and fail with ECONNRESET (issue 12 item 12).
        return problem_response(500, "internal_error", "internal error", headers={"Connection": "close"})


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries documenting problem+json for the given statuses."""
    out: dict[int | str, dict[str, Any]] = {}
    for s in statuses:
        out[s] = {"model": Problem, "description": TITLES.get(s, "Error"),
                  "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    return out
