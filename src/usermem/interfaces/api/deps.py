"""Request dependencies: who is calling (API key → tenant), admin checks, rate limiting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, Request

from usermem.engine.memory import Memory
from usermem.interfaces.api.keys import ApiKey, KeyRing
from usermem.interfaces.api.middleware import Metrics, RateLimiter
from usermem.interfaces.api.problems import ApiProblem

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer umk_..."},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "Alternative to the bearer header"},
}
TENANT_HEADER = "x-usermem-tenant"
T = TypeVar("T")


async def get_memory(request: Request) -> Memory:
    return request.app.state.memory  # type: ignore[no-any-return]


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics  # type: ignore[no-any-return]


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, credentials = auth.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    return request.headers.get("x-api-key") or None


async def principal(request: Request) -> ApiKey:
    """The calling key. Headers are read directly (one dependency on the hot path); the OpenAPI security
    schemes `bearer` and `apiKey` are declared by the app factory."""
    keys: KeyRing = request.app.state.keys
    presented = presented_key(request)
    key = keys.verify(presented)
    if key is None:
        detail = "missing API key" if not presented else "invalid or revoked API key"
        raise ApiProblem(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})
    limiter: RateLimiter = request.app.state.limiter
    wait = limiter.take(key.id)
    if wait is not None:
        request.app.state.metrics.rate_limited.inc()
        raise ApiProblem(429, "rate_limited", f"rate limit of {limiter.per_minute} requests/minute exceeded",
                         headers={"Retry-After": str(max(1, int(wait + 0.999)))})
    claimed = request.headers.get(TENANT_HEADER)
    if claimed is not None and claimed != key.tenant:
        raise ApiProblem(403, "tenant_mismatch", "this API key belongs to another tenant than the one named")
    request.state.principal = key
    return key


async def admin(p: Annotated[ApiKey, Depends(principal)]) -> ApiKey:
    if not p.admin:
        raise ApiProblem(403, "admin_required", "this endpoint needs an admin key")
    return p


Principal = Annotated[ApiKey, Depends(principal)]
Admin = Annotated[ApiKey, Depends(admin)]
Mem = Annotated[Memory, Depends(get_memory)]
Met = Annotated[Metrics, Depends(get_metrics)]


async def run_engine(request: Request, fn: Callable[[], T]) -> T:
    """Run one engine call. On the embedded SQLite store (one connection, calls serialised by its lock) the
    call runs inline — a thread hop would only add latency; on networked stores it runs in the thread pool,
    with `http_engine_threads` > 0 at most that many at once (the others wait their turn on the event loop;
    fewer threads contend for the GIL — the experiment on the PostgreSQL p95 in docs/scaling.md)."""
    state = request.app.state
    if state.inline_engine:
        return fn()
    return await anyio.to_thread.run_sync(fn, limiter=engine_limiter(state))


def engine_limiter(state: Any) -> anyio.CapacityLimiter | None:
    """The app's limit on engine calls at once (made on first use, inside the event loop); None: no limit
    beyond anyio's default thread pool."""
    limiter: anyio.CapacityLimiter | None = getattr(state, "engine_limiter", None)
    if limiter is None and state.engine_threads > 0:
        limiter = state.engine_limiter = anyio.CapacityLimiter(state.engine_threads)
    return limiter


def bound_user(p: ApiKey, user_id: str) -> str:
    """A key bound to one user sees no other user: everything else is absent (404)."""
    if p.user_id is not None and user_id != p.user_id:
        raise ApiProblem(404, "user_not_found", "no such user")
    return user_id


def actor_of(p: ApiKey, actor: str | None) -> str:
    return f"key:{p.id}" + (f":{actor}" if actor else "")


def _the_user_or_admin(p: ApiKey, user_id: str, why: str) -> str:
    """`user_id` when `p` is a user token of that user or an admin key (an operator acting on the user's request);
    any other key — an agent's, even one bound to the user — is refused (403, `why` says what is the user's)."""
    user_id = bound_user(p, user_id)
    if not (p.admin or (p.user_token and p.user_id == user_id)):
        raise ApiProblem(403, "user_token_required", f"{why}: use a user token of this user "
                         "(usermem keys create TENANT --user ID --user-token) or an admin key")
    return user_id


def data_subject(p: ApiKey, user_id: str) -> str:
    """What is held about a user, L2/L3 values included (export), goes to the user. An agent's key reads L2/L3
    fields only under a grant (recall), so it is refused here (403)."""
    return _the_user_or_admin(p, user_id, "an export is for the user")


def answering_user(p: ApiKey, user_id: str) -> str:
    """Consent is the user's to give: a user token of that user, or an admin key."""
    return _the_user_or_admin(p, user_id, "consent is answered by the user")
