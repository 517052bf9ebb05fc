"""Property-based fuzzing of the HTTP API against its own OpenAPI schema (Schemathesis): no 5xx, every
status code, content type and body as documented. Bounded: a few examples per operation."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apihelp import T0, make_api

API = make_api(rate_limit_per_minute=0)
API.memory.write("acme", "u1", "fact", "city", "Berlin", source="system", now=T0)
API.memory.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
# The coverage phase generates unbounded boundary cases per operation; fuzzing alone keeps this bounded.
CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_asgi("/openapi.json", API.app, config=CONFIG)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_matches_its_schema(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {API.admin_a}"}, checks=CHECKS)


@schema.parametrize()
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_without_a_key_is_401_and_documented(case):
    case.call_and_validate(checks=CHECKS)
