"""What the per-area routers share: routes declared from the operation catalogue, response sets, and the
small lookups several areas need (does a user exist, is this session the caller's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from fastapi import APIRouter

from usermem.engine.memory import Memory
from usermem.engine.sessions import Session, SessionClosed
from usermem.errors import NotFound
from usermem.interfaces.api.keys import ApiKey
from usermem.interfaces.api.middleware import Metrics
from usermem.interfaces.api.problems import ApiProblem, responses
from usermem.interfaces.catalog import OPERATIONS, route_doc
from usermem.interfaces.wire import record_to_json
from usermem.model import WriteResult
from usermem.store.base import LiveQuery

COMMON = responses(401, 403, 404, 409, 413, 422, 429, 503)
F = TypeVar("F", bound=Callable[..., Any])


def operation(router: APIRouter, name: str, response_model: Any, *, codes: Iterable[int] | None = None,
              summary: str | None = None) -> Callable[[F], F]:
    """Declare the route of catalogue operation `name`: method and path come from the catalogue, the route's
    name is the operation's (the parity test finds routes by it), the docs from `Memory`'s docstring."""
    op = OPERATIONS[name]
    if op.http is None:
        raise KeyError(f"{name} has no HTTP binding in the catalogue")
    doc = route_doc(name)
    if summary:
        doc["summary"] = summary
    return router.api_route(op.http.path, methods=[op.http.method], name=name, tags=[op.area],
                            response_model=response_model,
                            responses=responses(*codes) if codes is not None else COMMON, **doc)


def user_exists(m: Memory, tenant: str, user_id: str) -> bool:
    """Any current version (expired or retracted included) of any key."""
    return bool(m.store.live(LiveQuery(tenant, user_id, now=0.0, include_retracted=True)))


def session_for(m: Memory, p: ApiKey, session_id: str) -> Session:
    """The session, if it belongs to the caller's tenant (and bound user); else 404."""
    try:
        s = m.get_session(session_id, tenant=p.tenant)
    except NotFound:
        raise ApiProblem(404, "session_not_found", "no such session") from None
    if p.user_id is not None and s.user_id != p.user_id:
        raise ApiProblem(404, "session_not_found", "no such session")
    return s


def closed_json(c: SessionClosed) -> dict[str, Any]:
    return {"session": c.session.to_dict(), "reason": c.reason, "already_closed": c.already_closed,
            "episode": record_to_json(c.episode) if c.episode is not None else None,
            "context": [record_to_json(r) for r in c.context], "withheld": list(c.withheld)}


def count_decisions(metrics: Metrics, results: Iterable[WriteResult]) -> None:
    for r in results:
        metrics.decision(r.op.value, r.reason.value if r.reason else None)


def not_user_bound(p: ApiKey, what: str) -> None:
    if p.user_id is not None:
        raise ApiProblem(403, "forbidden", f"a user-bound key cannot {what}")
