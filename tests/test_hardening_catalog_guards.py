"""Issue 12 item 5, exhaustively: every identifier parameter of every operation in the catalogue refuses personal
data (an ID-card number, a phone number, an e-mail address) with a typed error naming the field — in the library
and over HTTP (422) — and nothing is written (audit included).

The parameter list is derived from `interfaces/catalog.py`: every parameter name any operation takes must be
classified below, so a new operation is covered automatically and a new parameter name fails until it is
classified."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from apihelp import T0, make_api
from usermem import Memory, Op, Reason
from usermem.config import load_settings
from usermem.engine.federation import NOTICES, Notice
from usermem.errors import InvalidArgument, ValidationError
from usermem.interfaces.catalog import OPERATIONS

PII = {"cn_id": "11010519491231002X", "phone": "13800138000", "email": "li.ming@example.com"}
TYPED = (ValidationError, InvalidArgument)

# Identifiers (and identifier lists): refused when they hold personal data. Free text that is stored is listed
# too (`purpose` is refused; transcripts and messages are redacted — tests/test_hardening_sessions.py).
IDENTIFIERS = {"tenant", "user_id", "session_id", "client_id", "actor", "change_set_id", "grantee", "memory_id",
               "grant_id", "tenant_or_grant_id", "verification_id", "domain", "key", "keys", "fields", "purpose",
               "to_version", "action", "fields_or_level", "request_id", "procedure_id", "proposed_by", "after",
               "prefix", "webhook_id", "notice_id"}
REDACTED_TEXT = {
    "transcript": "redacted before it is stored (test_close_session_transcript_is_redacted)",
    "messages": "redacted before storing (add_messages); extract/ingest store only guarded write values",
    "evidence": "a procedure's evidence: kept as redacted excerpts (tests/test_usermodel.py)",
}
NOT_IDENTIFIERS = {
    # numbers and flags: finite and range-checked (tests/test_hardening_numbers.py)
    "now": "number", "since": "number", "until": "number", "event_at": "number", "event_from": "number",
    "event_until": "number", "ttl_seconds": "number", "ttl": "number", "importance": "number",
    "confidence": "number", "budget_tokens": "number", "k": "number", "limit": "number", "after_seq": "number",
    "retention_days": "number", "idle_seconds": "number", "mark_used": "flag", "include_expired": "flag",
    "partial": "flag", "extract": "flag",
    # closed vocabularies
    "kind": "enum", "kinds": "enum", "source": "enum", "status": "enum", "policy": "enum", "language": "enum",
    "mode": "enum", "decision": "enum", "agree": "flag", "threshold": "number", "suppress_days": "number",
    # the user model (tests/test_usermodel.py): schema-validated, keys checked, texts through the value guards
    "rule": "derivation rule (schema-validated; its fields are field keys; its texts pass the value guards)",
    "text": "procedure text (the value guards refuse personal data)",
    "evaluation": "a review's evaluation record {name, passed, result} (schema-validated)",
    # values: the write guards (PII → REJECT sensitive_value), tests/test_privacy_guards.py
    "value": "write value", "writes": "write values", "answers": "write values",
    "canonical": "write value (the same guards as `value`, tests/test_canonical.py)",
    "contract": "field contract (schema-validated; its key is a field key)",
    "questions": "onboarding questions written by the tenant's admin, not about a user",
    # webhooks (tests/test_webhooks*.py): an operator's endpoint, a closed vocabulary, a signing secret
    "url": "a webhook receiver URL (http(s) only, at most 2048 characters; the audit keeps its host only)",
    "events": "enum",
    "secret": "a signing secret (16-256 printable characters; never returned after creation, never audited)",
    # read-only text, never stored
    "query": "recall ranking text, never stored", "message": "the current message, never stored",
}


def test_every_catalogue_parameter_is_classified():
    names = {p.name for op in OPERATIONS.values() for p in op.parameters}
    classified = IDENTIFIERS | set(REDACTED_TEXT) | set(NOT_IDENTIFIERS)
    assert names - classified == set(), "classify the new parameter(s) in this file"
    assert not (IDENTIFIERS & set(NOT_IDENTIFIERS)) and not (IDENTIFIERS & set(REDACTED_TEXT))


def _cases() -> list[tuple[str, str]]:
    return sorted((op.name, p.name) for op in OPERATIONS.values() for p in op.parameters if p.name in IDENTIFIERS)


# --- a world in which every call below would succeed with its valid arguments ----------------------------------

@dataclasses.dataclass
class World:
    memory: Memory
    ids: dict[str, str]


def _world(memory: Memory) -> World:
    m = memory
    m.write("acme", "u", "fact", "city", "杭州", source="user_confirmed", now=T0)
    r = m.write("acme", "u", "fact", "city", "上海", source="user_confirmed", now=T0 + 1)
    sid = m.open_session("acme", "u", "web", now=T0)
    gid = m.grant("acme", "u", "L2", "support ticket", now=T0)
    m.write("acme", "u", "fact", "occupation", "教师", source="user_confirmed", now=T0, change_set_id="cs-1")
    for i in range(3):
        pushback = m.record_pushback("acme", "u", "reply_length", "太长了", value="concise", now=T0 + i)
    assert r.memory is not None and pushback["verification"] is not None
    m.write("acme", "u", "fact", "allergy", "花生", source="user_confirmed", now=T0)
    req = m.request_consent("acme", "u", ["allergy"], "lunch", now=T0)
    proposed = m.propose_procedure("acme", "先给发票表", user_id="u", now=T0)
    approved = m.propose_procedure("acme", "先给摘要", user_id="u", now=T0)
    m.review_procedure("acme", approved["id"], "approve", evaluation={"name": "e2e", "passed": True}, now=T0)
    hook = m.create_webhook("acme", "http://127.0.0.1:9/hook", now=T0).webhook  # port 9: nothing answers
    # A "changed on another device" notice about city (federation), as a remote apply leaves it.
    notice = Notice("ab" * 16, "city", T0, "mini", r.memory.id, "cd" * 16, {"zh": "…", "en": "…"})
    m.store.put_doc("acme", NOTICES, notice.id, notice.to_dict(), now=T0, user_id="u")
    return World(m, {"webhook_id": hook.id, "memory_id": r.memory.id, "session_id": sid, "grant_id": gid,
                     "verification_id": pushback["verification"]["id"], "request_id": req.id,
                     "procedure_id": proposed["id"], "approved_procedure_id": approved["id"]})


def _valid(world: World, op: str, name: str) -> Any:
    ids = world.ids
    table: dict[str, Any] = {
        "tenant": "acme", "user_id": "u", "kind": "fact", "key": "city", "value": "杭州", "actor": "agent-1",
        "change_set_id": "cs-1", "client_id": "web", "grantee": "key:abc", "domain": "logistics",
        "fields": ["city"], "keys": ["city"], "purpose": "support ticket", "fields_or_level": "L2",
        "tenant_or_grant_id": ids["grant_id"], "grant_id": ids["grant_id"], "memory_id": ids["memory_id"],
        "session_id": ids["session_id"], "verification_id": ids["verification_id"], "to_version": 1, "action": "write",
        "messages": [{"role": "user", "content": "hi"}], "message": "hi", "policy": "accept",
        "writes": [{"kind": "fact", "key": "city", "value": "杭州"}], "answers": {"reply_length": "concise"},
        "questions": [], "contract": {"key": "city", "kind": "fact"}, "transcript": "hi",
        "request_id": ids["request_id"], "procedure_id": ids["procedure_id"], "proposed_by": "ops",
        "after": "a", "prefix": "u", "text": "先给发票表", "decision": "reject",
        "webhook_id": ids["webhook_id"], "url": "http://127.0.0.1:9/hook",
        "notice_id": "ab" * 16,
        "rule": {"id": "r.x", "when": {"occupation": ["教师"]}, "then_key": "expertise", "then": {"zh": "熟悉课堂"}},
    }
    if op == "opt_in" and name == "request_id":
        return None  # opt_in(fields, domain) — the request_id form is approve_consent's
    if op == "rollback_procedure" and name == "procedure_id":
        return ids["approved_procedure_id"]
    if op == "revoke" and name == "grant_id":
        return None  # revoke(grant_id) — the one-argument form
    return table[name]


def _call(world: World, op: str, bad_param: str, bad_value: str) -> Any:
    params = OPERATIONS[op].parameters
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.name == bad_param:
            value: Any = [bad_value] if p.name in ("keys", "fields", "fields_or_level") else bad_value
        elif op == "revoke" and p.name == "tenant_or_grant_id" and bad_param == "grant_id":
            value = "acme"  # revoke(tenant, grant_id)
        elif p.required or p.name in IDENTIFIERS:
            value = _valid(world, op, p.name)
            if value is None:
                continue
        else:
            continue
        if p.keyword_only:
            kwargs[p.name] = value
        else:
            args.append(value)
    if "now" in {p.name for p in params}:
        kwargs["now"] = T0 + 10
    if op == "forget_range":
        kwargs["since"] = T0
    return getattr(world.memory, op)(*args, **kwargs)


def _lean() -> Memory:
    return Memory(settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))


@pytest.fixture(scope="module")
def world():
    """One world for the refusals (a refused call changes nothing, which each case checks)."""
    m = _lean()
    yield _world(m)
    m.close()


@pytest.fixture
def fresh_world():
    m = _lean()
    yield _world(m)
    m.close()


# Operations that need a configured LLM (the user model's proposals); these tests run without one.
NEEDS_LLM = frozenset({"suggest_procedures", "suggest_derivation_rules"})

# Which field a refusal may name for a parameter (the engine's own name for it).
FIELD_OF = {"keys": ("keys", "key"), "fields": ("fields", "key")}


def _refused(world: World, op: str, param: str, value: str) -> None:
    before = len(world.memory.audit("acme", limit=100_000))
    sessions_before = world.memory.sessions("acme", "u", now=T0 + 10)
    try:
        result = _call(world, op, param, value)
    except TYPED as exc:
        field = getattr(exc, "field", None)
        if isinstance(exc, ValidationError):
            assert field in FIELD_OF.get(param, (param,)), (op, param, field, str(exc))
        assert value not in str(exc)
    else:
        # write-side request fields answer REJECT invalid_input (the batch's other writes go on)
        ok = (getattr(result, "op", None) is Op.REJECT
              and result.reason in (Reason.INVALID_INPUT, Reason.SENSITIVE_VALUE))
        assert ok, f"{op}({param}={value!r}) was accepted: {result!r}"
        assert value not in (result.detail or "")
    after = world.memory.audit("acme", limit=100_000)
    assert world.memory.sessions("acme", "u", now=T0 + 10) == sessions_before
    for e in after:
        assert value not in json.dumps(dataclasses.asdict(e), ensure_ascii=False, default=str), (op, param, e)
    if op not in ("write", "write_many"):
        assert len(after) == before, f"{op}({param}=PII) wrote an audit entry"


@pytest.mark.parametrize("op,param", _cases(), ids=[f"{o}-{p}" for o, p in _cases()])
def test_library_refuses_personal_data_in_every_identifier(world, op, param):
    for value in PII.values():
        _refused(world, op, param, value)


@pytest.mark.parametrize("op", sorted({o for o, _ in _cases()}))
def test_the_same_calls_with_ordinary_identifiers_succeed(fresh_world, op):
    """The refusals above are the guards', not a broken call: with ordinary values every call goes through."""
    if op in NEEDS_LLM:  # past the identifier guards, the call stops at "no LLM is configured"
        with pytest.raises(ValidationError) as exc:
            _call(fresh_world, op, "", "")
        assert exc.value.field == "llm"
        return
    result = _call(fresh_world, op, "", "")
    assert getattr(result, "reason", None) not in (Reason.INVALID_INPUT, Reason.SENSITIVE_VALUE), result


# --- over HTTP: the same parameters answer 422 (the tenant travels in the API key, never in the request) ---------

def _http_cases() -> list[tuple[str, str]]:
    out = []
    for op, param in _cases():
        h = OPERATIONS[op].http
        if h is not None and param not in h.from_key and param not in h.fixed:
            out.append((op, param))
    return out


@pytest.fixture(scope="module")
def http_world():
    from fastapi.testclient import TestClient

    import usermem

    api = make_api(_lean(), rate_limit_per_minute=0)
    statuses: list[int] = []

    class Recorded(TestClient):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            response = super().request(*args, **kwargs)
            statuses.append(response.status_code)
            return response

    http = Recorded(api.app, raise_server_exceptions=False)
    client = usermem.Client("http://testserver", api.admin_a, http=http)
    world = _world(api.memory)
    yield world, client, statuses
    client.close()
    api.memory.close()


def test_every_http_identifier_is_exercised():
    cases = _http_cases()
    assert len(cases) >= 100 and {p for _, p in cases} >= {"user_id", "actor", "session_id", "purpose", "key"}


@pytest.mark.parametrize("op,param", _http_cases(), ids=[f"{o}-{p}" for o, p in _http_cases()])
def test_http_answers_422_to_personal_data_in_every_identifier(http_world, op, param):
    world, client, statuses = http_world
    m = world.memory
    before = len(m.audit("acme", limit=100_000))
    for value in PII.values():
        remote = World(client, world.ids)  # the Client offers Memory's signature over HTTP
        statuses.clear()
        try:
            result = _call(remote, op, param, value)
        except TYPED:
            assert statuses and statuses[-1] == 422, (op, param, statuses)
            continue
        # a write's request fields answer 200 with REJECT invalid_input, as in the library
        assert getattr(result, "op", None) is Op.REJECT, (op, param, value, result)
        assert result.reason in (Reason.INVALID_INPUT, Reason.SENSITIVE_VALUE)
    assert 500 not in statuses
    after = m.audit("acme", limit=100_000)
    for e in after[before:]:
        for value in PII.values():
            assert value not in json.dumps(dataclasses.asdict(e), ensure_ascii=False, default=str), (op, param, e)
    if op not in ("write", "write_many"):
        assert len(after) == before, f"{op}({param}=PII) wrote an audit entry"
