"""A faster request path for simple routes, with FastAPI's own path behind it (issue 19).

FastAPI resolves a route's parameters anew on every request: for each declared query parameter it
re-inspects the annotation (is it a sequence? a model?) and validates the value through pydantic, which
was about a third of the app's CPU for `GET /v1/users/{user_id}/memories` (twelve parameters). A
`FastParamsRoute` plans, once per route, how to read each parameter and answers the **plain** requests
itself: every value present is in its canonical form (`5`, `1790000000.5`, `true`) and inside the declared
bounds, and no single-valued parameter is repeated. Anything else — a missing required value, a bound
crossed, `1e3`, ` 5`, a repeated `k` — is handed to FastAPI's handler unchanged, so every 4xx body is
FastAPI's own, and what is accepted is converted exactly as pydantic converts it. The route's declaration
(signature, OpenAPI schema, `route.dependant`) is untouched.

A route is planned only when everything it declares is understood: path and query parameters of type str,
int, float, bool (optionally `| None`) or `list[str] | None` with length, bound and pattern constraints,
dependencies that take only the request, an `async def` endpoint that returns a Response (no response
model validation is skipped: those endpoints build their JSON themselves). Other routes keep FastAPI's path.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from fastapi.routing import APIRoute
from pydantic.fields import FieldInfo
from starlette.requests import Request
from starlette.responses import Response

_INT = re.compile(r"(?:0|[1-9][0-9]{0,14})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,17})?")
_BOOL = {"true": True, "false": False, "1": True, "0": False}
_MISSING: Any = object()
_FALLBACK: Any = object()  # a value the fast path does not decide: FastAPI's handler answers the request


@dataclass(frozen=True, slots=True)
class _Param:
    name: str  # the endpoint's argument
    alias: str  # the wire name
    kind: str  # "str", "int", "float", "bool", "list"
    default: Any  # _MISSING: required
    low: tuple[float, bool] | None = None  # (bound, inclusive)
    high: tuple[float, bool] | None = None
    min_len: int | None = None
    max_len: int | None = None
    pattern: re.Pattern[str] | None = None

    def convert(self, raw: str) -> Any:
        """The value pydantic would produce for `raw`, or _FALLBACK when this path does not decide it."""
        if raw == "":
            return _FALLBACK
        kind = self.kind
        if kind == "str" or kind == "list":
            if (self.max_len is not None and len(raw) > self.max_len) or \
                    (self.min_len is not None and len(raw) < self.min_len):
                return _FALLBACK
            if self.pattern is not None and ("\n" in raw or self.pattern.search(raw) is None):
                return _FALLBACK
            return raw
        value: Any
        if kind == "bool":
            value = _BOOL.get(raw, _FALLBACK)
            return value
        if kind == "int":
            if _INT.fullmatch(raw) is None:
                return _FALLBACK
            value = int(raw)
        elif _FLOAT.fullmatch(raw) is None:
            return _FALLBACK
        else:
            value = float(raw)
        if self.low is not None and (value < self.low[0] or (value == self.low[0] and not self.low[1])):
            return _FALLBACK
        if self.high is not None and (value > self.high[0] or (value == self.high[0] and not self.high[1])):
            return _FALLBACK
        return value


_KINDS = {str: "str", int: "int", float: "float", bool: "bool"}


def _param(name: str, alias: str, info: FieldInfo) -> _Param | None:
    """How to read one declared parameter, or None when the fast path does not understand it."""
    ann = info.annotation
    optional = False
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(ann)) != 2:
            return None
        ann, optional = args[0], True
        origin = typing.get_origin(ann)
    if origin is list:
        if typing.get_args(ann) != (str,) or info.metadata:
            return None
        kind = "list"
    elif ann in _KINDS:
        kind = _KINDS[ann]
    else:
        return None
    if info.default_factory is not None:
        return None
    default = _MISSING if info.is_required() else info.default
    if default is None and not optional:
        return None
    bounds: dict[str, Any] = {}
    for m in info.metadata:
        if isinstance(m, Ge):
            bounds["low"] = (m.ge, True)
        elif isinstance(m, Gt):
            bounds["low"] = (m.gt, False)
        elif isinstance(m, Le):
            bounds["high"] = (m.le, True)
        elif isinstance(m, Lt):
            bounds["high"] = (m.lt, False)
        elif isinstance(m, MaxLen):
            bounds["max_len"] = m.max_length
        elif isinstance(m, MinLen):
            bounds["min_len"] = m.min_length
        elif type(m).__name__ == "AllowInfNan" and getattr(m, "allow_inf_nan", None) is False:
            pass  # the canonical numbers the fast path accepts are finite
        elif type(m).__name__ == "_PydanticGeneralMetadata" and set(vars(m)) == {"pattern"} \
                and isinstance(getattr(m, "pattern", None), str):
            bounds["pattern"] = re.compile(m.pattern)
        else:
            return None
    if kind in ("str", "list", "bool") and ("low" in bounds or "high" in bounds):
        return None
    if kind in ("int", "float", "bool") and ("max_len" in bounds or "min_len" in bounds or "pattern" in bounds):
        return None
    return _Param(name, alias, kind, default, **bounds)


@dataclass(frozen=True, slots=True)
class _Plan:
    path: tuple[_Param, ...]
    query: tuple[_Param, ...]
    deps: tuple[tuple[str, Callable[[Request], Coroutine[Any, Any, Any]]], ...]
    request_name: str | None
    endpoint: Callable[..., Coroutine[Any, Any, Any]]

    def values(self, request: Request) -> dict[str, Any] | None:
        """The endpoint's parameters read from the request, or None: FastAPI's handler decides."""
        out: dict[str, Any] = {}
        path_params = request.path_params
        for p in self.path:
            raw = path_params.get(p.alias)
            value = _FALLBACK if raw is None else p.convert(raw)
            if value is _FALLBACK:
                return None
            out[p.name] = value
        given = request.query_params
        for p in self.query:
            if p.kind == "list":
                raws = given.getlist(p.alias)
                if not raws:
                    out[p.name] = p.default
                    continue
                items = [p.convert(r) for r in raws]
                if any(v is _FALLBACK for v in items):
                    return None
                out[p.name] = items
                continue
            raws = given.getlist(p.alias)
            if not raws:
                if p.default is _MISSING:
                    return None
                out[p.name] = p.default
                continue
            if len(raws) > 1:
                return None
            value = p.convert(raws[0])
            if value is _FALLBACK:
                return None
            out[p.name] = value
        return out


def plan_route(route: APIRoute) -> _Plan | None:
    """The fast plan of `route`, or None when anything it declares is outside what the plan understands."""
    d = route.dependant
    if route.body_field is not None or d.body_params or d.header_params or d.cookie_params:
        return None
    if d.response_param_name or d.background_tasks_param_name or d.websocket_param_name \
            or d.http_connection_param_name or d.security_scopes_param_name:
        return None
    endpoint = d.call
    if endpoint is None or not inspect.iscoroutinefunction(endpoint):
        return None
    try:
        returns = typing.get_type_hints(endpoint).get("return")
    except Exception:  # an annotation that does not resolve: leave the route to FastAPI
        return None
    if not (inspect.isclass(returns) and issubclass(returns, Response)):
        return None
    deps: list[tuple[str, Callable[[Request], Coroutine[Any, Any, Any]]]] = []
    for sub in d.dependencies:
        if sub.name is None or sub.call is None or not inspect.iscoroutinefunction(sub.call) or sub.dependencies \
                or sub.path_params or sub.query_params or sub.header_params or sub.cookie_params or sub.body_params \
                or sub.request_param_name is None or len(inspect.signature(sub.call).parameters) != 1:
            return None
        deps.append((sub.name, sub.call))
    params: list[list[_Param]] = [[], []]
    for group, fields in ((0, d.path_params), (1, d.query_params)):
        for f in fields:
            p = _param(f.name, f.alias, f.field_info)
            if p is None:
                return None
            params[group].append(p)
    return _Plan(tuple(params[0]), tuple(params[1]), tuple(deps), d.request_param_name, endpoint)


class FastParamsRoute(APIRoute):
    """An APIRoute that answers plain requests of a plannable route without FastAPI's per-request parameter
    resolution (module docstring); every other request takes FastAPI's handler."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        slow = super().get_route_handler()
        plan = plan_route(self)
        if plan is None:
            return slow
        deps: Sequence[tuple[str, Callable[[Request], Coroutine[Any, Any, Any]]]] = plan.deps
        request_name, endpoint = plan.request_name, plan.endpoint

        async def handler(request: Request) -> Response:
            values = plan.values(request)
            if values is None:
                return await slow(request)
            for name, call in deps:  # the caller's key first, as FastAPI solves dependencies before the endpoint
                values[name] = await call(request)
            if request_name is not None:
                values[request_name] = request
            response = await endpoint(**values)
            if not isinstance(response, Response):  # pragma: no cover - plan_route admits Response endpoints only
                raise TypeError(f"{self.name} returned {type(response).__name__}, not a Response")
            return response

        return handler
