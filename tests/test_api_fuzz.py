"""Property-based fuzzing of the HTTP API against its own OpenAPI schema (Schemathesis): no 5xx, every
status code, content type and body as documented. Bounded: EXAMPLES per operation — 30 under
USERMEM_HYPOTHESIS_PROFILE=thorough (about 1,500 calls over the 54 operations, ~48 s of CPU measured on the
2-core machine), 15 in `make test` (tests/props.py) — and every operation of the schema is exercised:
`test_every_operation_of_the_schema_was_exercised` counts them (scripts/run_tests.sh hands whole files to
the pytest-xdist workers, so the module's tests run in one process, in file order)."""

from __future__ import annotations

from collections import Counter

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apihelp import T0, make_api
from props import examples

API = make_api(rate_limit_per_minute=0)
API.memory.write("acme", "u1", "fact", "city", "Berlin", source="system", now=T0)
API.memory.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed", now=T0)
# The coverage phase generates unbounded boundary cases per operation; fuzzing alone keeps this bounded.
CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_asgi("/openapi.json", API.app, config=CONFIG)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
OPERATIONS = [result.ok().label for result in schema.get_all_operations()]
EXAMPLES = examples(30, floor=15)
EXERCISED: Counter[str] = Counter()  # operation label → calls made with the admin key
SERVER_ERRORS: list[str] = []


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_matches_its_schema(case):
    response = case.call(headers={"Authorization": f"Bearer {API.admin_a}"})
    EXERCISED[case.operation.label] += 1
    if response.status_code >= 500:
        SERVER_ERRORS.append(f"{case.operation.label}: {response.status_code}")
    case.validate_response(response, checks=CHECKS)


@schema.parametrize()
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_without_a_key_is_401_and_documented(case):
    case.call_and_validate(checks=CHECKS)


def test_every_operation_of_the_schema_was_exercised():
    """Runs after the fuzzing above (same module): all 54 operations were called, none answered 5xx."""
    assert len(OPERATIONS) >= 54
    missing = sorted(set(OPERATIONS) - set(EXERCISED))
    assert missing == [], f"operations never exercised (run the whole module): {missing}"
    assert len(EXERCISED) == len(OPERATIONS)
    assert sum(EXERCISED.values()) >= len(OPERATIONS) * EXAMPLES // 2, EXERCISED
    assert SERVER_ERRORS == []
