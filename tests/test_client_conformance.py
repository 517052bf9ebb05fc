"""The same scenarios against the embedded `Memory` and the remote `Client`: identical decisions, values,
orderings, result types and errors — agent code switches by changing one constructor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

import usermem
from apihelp import T0, fast_memory, make_api
from usermem import MemoryRecord, ScoredMemory, WriteRequest, WriteResult
from usermem.errors import InvalidArgument, NotFound, PermissionDenied, ValidationError

DAY = 86_400.0
TENANT = "acme"


@pytest.fixture(params=["embedded", "remote"])
def target(request):
    """(memory-like object, admin-capable object for audit)."""
    if request.param == "embedded":
        m = fast_memory()
        yield m
        m.close()
    else:
        api = make_api()
        client = usermem.Client("http://testserver", api.admin_a, http=TestClient(api.app))
        yield client
        client.close()
        api.memory.close()


def _norm(x: Any) -> Any:
    """Drop what legitimately differs between runs (ids, actors, change set ids)."""
    if isinstance(x, WriteResult):
        return ("result", x.op, x.reason, _norm(x.memory), x.existing_id is not None)
    if isinstance(x, ScoredMemory):
        return ("scored", _norm(x.memory), round(x.score, 9), round(x.weight, 9), x.needs_confirmation, x.question)
    if isinstance(x, MemoryRecord):
        d = x.to_dict()
        d.pop("actor")  # the server records the calling key as the actor
        for k in ("id", "change_set_id", "prev_version_id", "superseded_by"):
            d[k] = d[k] is not None
        return ("record", tuple(sorted(d.items(), key=lambda kv: kv[0])))
    if isinstance(x, list):
        return [_norm(v) for v in x]
    return x


def scenario_c007(m) -> list[Any]:
    out: list[Any] = []
    out.append(m.write(TENANT, "C007", "fact", "plan", "basic", source="system", now=T0))
    out.append(m.write(TENANT, "C007", "preference", "channel", "email", source="user_confirmed", now=T0 + 1))
    out.append(m.write(TENANT, "C007", "situation", "issue", "invoice missing", now=T0 + 2))
    out.append(m.write(TENANT, "C007", "fact", "card_number", "4111 1111 1111 1111", now=T0 + 3))
    out.append(m.write(TENANT, "C007", "fact", "plan", "pro", source="system", now=T0 + DAY))
    out.append(m.write(TENANT, "C007", "fact", "plan", "free", source="inferred", now=T0 + DAY + 1))
    out.append(m.write(TENANT, "C007", "fact", "plan", "pro", source="system", now=T0 + DAY + 2))  # NOOP
    out.append(m.history(TENANT, "C007", "plan"))
    out.append(m.recall(TENANT, "C007", k=10, now=T0 + 3 * DAY))
    out.append(m.recall_scored(TENANT, "C007", k=10, now=T0 + 40 * DAY))
    out.append(m.recall(TENANT, "C007", k=10, now=T0 + 3 * DAY, kinds=["preference", "situation"]))
    out.append(m.recall(TENANT, "C007", k=1, now=T0 + 3 * DAY, keys=["channel"]))
    out.append(m.forget(TENANT, "C007", "issue", now=T0 + 41 * DAY))
    out.append(m.forget(TENANT, "C007", "issue", now=T0 + 41 * DAY))
    out.append(m.forget_user(TENANT, "C007", now=T0 + 42 * DAY))
    out.append(m.recall(TENANT, "C007", now=T0 + 43 * DAY))
    out.append(m.history(TENANT, "C007", "plan"))
    out.append(m.forget_user(TENANT, "C007", now=T0 + 44 * DAY))
    return out


def scenario_batch_and_ranges(m) -> list[Any]:
    out: list[Any] = []
    out.append(m.write_many(TENANT, "u2", [
        WriteRequest(kind="fact", key="city", value="上海", source="user_confirmed"),
        {"kind": "preference", "key": "language", "value": "中文", "source": "user_confirmed"},
        {"kind": "fact", "key": "password", "value": "hunter2"},
        {"kind": "episode", "key": "ticket_1", "value": {"summary": "退款", "n": 1}, "event_at": T0 - DAY},
    ], now=T0))
    out.append(m.write(TENANT, "u2", "context", "draft", "x" * 10, session_id="s1", now=T0 + 10, ttl_seconds=60))
    out.append(m.recall(TENANT, "u2", k=10, now=T0 + 20))
    out.append(m.recall(TENANT, "u2", k=10, now=T0 + 2 * 3600))  # context decayed / expired
    out.append(m.forget_range(TENANT, "u2", since=T0 + 5, until=T0 + 100, now=T0 + 200))
    out.append(m.recall(TENANT, "u2", k=10, now=T0 + 300))
    out.append(m.recall(TENANT, "nobody", now=T0))
    out.append(m.history(TENANT, "u2", "never"))
    return out


def scenario_get_and_audit(m) -> list[Any]:
    r = m.write(TENANT, "u3", "fact", "city", "Oslo", source="system", now=T0)
    got = m.get(TENANT, r.memory.id)
    missing = m.get(TENANT, "0" * 32)
    m.write(TENANT, "u3", "fact", "password", "x", now=T0 + 1)
    events = m.audit(TENANT, user_id="u3")
    return [got == r.memory, missing, [(e.action, e.op, e.reason, e.key) for e in events],
            all(isinstance(e, usermem.AuditEvent) for e in events)]


def scenario_lifecycle(m) -> list[Any]:
    out: list[Any] = []
    first = m.write(TENANT, "u4", "preference", "tone", "warm", source="extracted", now=T0)
    out.append(first)
    out.append(m.confirm(TENANT, "u4", first.memory.id, now=T0 + DAY))
    second = m.write(TENANT, "u4", "preference", "tone", "dry", source="user_confirmed", now=T0 + 2 * DAY)
    out.append(second)
    out.append(m.revert(TENANT, "u4", "tone", now=T0 + 3 * DAY))
    out.append(m.history(TENANT, "u4", "tone"))
    current = m.recall(TENANT, "u4", keys=["tone"], now=T0 + 3 * DAY)[0]
    out.append(m.deny(TENANT, "u4", current.id, now=T0 + 4 * DAY))
    out.append(m.recall(TENANT, "u4", now=T0 + 4 * DAY))
    batch = m.write_many(TENANT, "u4", [{"kind": "fact", "key": "city", "value": "Oslo"},
                                        {"kind": "fact", "key": "pet", "value": "cat"}], now=T0 + 5 * DAY)
    undo = m.revert_change_set(TENANT, batch[0].memory.change_set_id, now=T0 + 6 * DAY)
    out.append((type(undo).__name__, undo.reverted, [_norm(r) for r in undo.results], list(undo.conflicts)))
    out.append(m.recall(TENANT, "u4", now=T0 + 6 * DAY))
    with pytest.raises(NotFound):
        m.confirm(TENANT, "u4", "0" * 32, now=T0)
    return out


def scenario_sessions_and_privacy(m) -> list[Any]:
    sid = m.open_session(TENANT, "u5", "web")
    m.write(TENANT, "u5", "context", "draft", "订单 #42", session_id=sid)
    s = m.get_session(sid, tenant=TENANT)
    ctx = m.session_context(sid, tenant=TENANT)
    listed = m.sessions(TENANT, "u5")
    closed = m.close_session(sid, [{"role": "user", "content": "where is order 42?"}], tenant=TENANT)
    again = m.close_session(sid, tenant=TENANT)
    exported = m.export(TENANT, "u5")
    return [type(s).__name__, s.status, s.client_id, [x.memory.value for x in ctx], [x.id for x in listed] == [sid],
            type(closed).__name__, closed.reason, closed.session.status, [r.key for r in closed.context],
            closed.episode is not None, again.already_closed,
            sorted(k.split(".")[0] for k in exported["fields"]), exported["counts"],
            m.export(TENANT, "nobody")["counts"]]


def scenario_onboarding_and_verification(m) -> list[Any]:
    questions = m.onboarding_questions(TENANT, "u6", "zh")
    answers = m.answer_onboarding(TENANT, "u6", {questions[0]["id"]: questions[0].get("options", ["x"])[0]
                                                 if questions[0].get("options") else "简洁"}, now=T0) if questions else []
    outs = [m.record_pushback(TENANT, "u6", "reply_length", "太长了", value="concise", now=T0 + i) for i in range(3)]
    pending = m.pending_verifications(TENANT, "u6")
    vid = pending[0]["id"]
    accepted = m.accept_verification(TENANT, "u6", vid, now=T0 + 10)
    return [[q["id"] for q in questions], answers, [(o["count"], "verification" in o) for o in outs],
            [(p["key"], p["value"], p["status"]) for p in pending], accepted, m.pending_verifications(TENANT, "u6")]


def scenario_contracts(m) -> list[Any]:
    made = m.set_contract(TENANT, {"key": "shoe_size", "kind": "fact", "description": "鞋码"}, now=T0)
    off = m.disable_field(TENANT, "shoe_size", now=T0 + 1)
    rejected = m.write(TENANT, "u7", "fact", "shoe_size", 42, now=T0 + 2)
    on = m.enable_field(TENANT, "shoe_size", now=T0 + 3)
    accepted = m.write(TENANT, "u7", "fact", "shoe_size", 42, now=T0 + 4)
    hist = [(h.get("version"), h.get("enabled")) for h in m.contract_history(TENANT, "shoe_size")]
    m.delete_contract(TENANT, "shoe_size", now=T0 + 5)
    policy = m.set_unknown_fields(TENANT, "reject", now=T0 + 6)
    unknown = m.write(TENANT, "u7", "fact", "never_heard_of", 1, now=T0 + 7)
    listed = sorted(c.key for c in m.contracts_list(TENANT))
    episodes = m.episodes(TENANT, "u7", now=T0 + 8)
    return [type(made).__name__, made.to_dict(), off.enabled, rejected, on.enabled, accepted, len(hist) >= 3, policy,
            unknown, "shoe_size" in listed, episodes]


def scenario_conversation_and_admin(m) -> list[Any]:
    """The operations the client gained: extract, plan, ingest, assemble (an Assembly), touch, idle expiry,
    tenant-wide grants, consents, purge."""
    from usermem.understand.assemble import Assembly

    m.write(TENANT, "u8", "fact", "city", "Paris", source="user_confirmed", now=T0)
    m.write(TENANT, "u8", "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    candidates = m.extract(["I live in Lyon", {"role": "user", "content": "我住在北京"}], tenant=TENANT)
    plan = m.plan(TENANT, "u8", "where do I live? keep it short")
    ingested = m.ingest(TENANT, "u8", ["I live in Lyon"], now=T0 + 1)
    assembly = m.assemble(TENANT, "u8", "where do I live?", 400, now=T0 + 2)
    sid = m.open_session(TENANT, "u8", "web", now=T0, idle_seconds=60)
    touched = m.touch_session(sid, tenant=TENANT, now=T0 + 30)
    expired = m.expire_idle_sessions(T0 + 1000, tenant=TENANT)
    gid = m.grant(TENANT, "u8", "L2", "support", 600, now=T0)
    tenant_grants = m.grants(TENANT, now=T0 + 1)
    opted = m.opt_in(TENANT, "u8", ["city"], "shop", now=T0)
    withdrawn = m.opt_out(TENANT, "u8", "city", "shop", now=T0 + 1)
    m.forget(TENANT, "u8", "city", now=T0 + 3)
    purged = m.purge(T0 + 40 * DAY)  # the HTTP purge refuses a `now` ahead of the server clock
    return [candidates, plan, ingested, type(assembly) is Assembly, assembly.prompt, assembly.tokens,
            [_norm(s) for s in assembly.facts], [_norm(s) for s in assembly.preferences], assembly.plan,
            (type(touched).__name__, touched.last_activity_at), [(c.reason, c.session.id == sid) for c in expired],
            [(g.id == gid, g.level, g.purpose) for g in tenant_grants], opted, withdrawn, purged]


# Every scenario is registered here, before the parametrised test below reads the keys (a scenario added
# after that line would never run: conversation_and_admin once was, and extract's `canonical` was lost).
SCENARIOS: dict[str, Callable[[Any], list[Any]]] = {
    "conversation_and_admin": scenario_conversation_and_admin,
    "contracts": scenario_contracts,
    "onboarding_and_verification": scenario_onboarding_and_verification,
    "lifecycle": scenario_lifecycle, "sessions_and_privacy": scenario_sessions_and_privacy,
    "c007": scenario_c007, "batch_and_ranges": scenario_batch_and_ranges, "get_and_audit": scenario_get_and_audit,
}
_expected: dict[str, Any] = {}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_results_embedded_and_remote(name):
    m = fast_memory()
    api = make_api()
    client = usermem.Client("http://testserver", api.admin_a, http=TestClient(api.app))
    try:
        embedded = SCENARIOS[name](m)
        remote = SCENARIOS[name](client)
        assert _norm(remote) == _norm(embedded)
        assert [type(x) for x in remote] == [type(x) for x in embedded]
    finally:
        client.close()
        api.memory.close()
        m.close()


ERRORS: list[tuple[str, Callable[[Any], Any], type[Exception]]] = [
    ("k=0", lambda m: m.recall(TENANT, "u", k=0), ValidationError),
    ("k not int", lambda m: m.recall(TENANT, "u", k="3"), InvalidArgument),
    ("empty user", lambda m: m.recall(TENANT, "", k=3), ValidationError),
    ("unknown kind filter", lambda m: m.recall(TENANT, "u", kinds=["nope"]), ValidationError),
    ("forget_range without a bound", lambda m: m.forget_range(TENANT, "u"), ValidationError),
    ("batch unknown field", lambda m: m.write_many(TENANT, "u", [{"kind": "fact", "key": "a", "value": 1,
                                                                   "bogus": 1}]), ValidationError),
]


@pytest.mark.parametrize(("label", "call", "exc"), ERRORS, ids=[e[0] for e in ERRORS])
def test_same_errors(target, label, call, exc):
    with pytest.raises(exc):
        call(target)


def test_client_refuses_another_tenant():
    api = make_api()
    client = usermem.Client("http://testserver", api.key_a, http=TestClient(api.app))
    with pytest.raises(PermissionDenied, match="tenant_mismatch"):
        client.recall("globex", "u1")
    with pytest.raises(PermissionDenied):
        client.audit(TENANT)  # not an admin key
    with pytest.raises(PermissionDenied):
        client.purge()  # not an admin key
    assert client.whoami()["tenant"] == TENANT
    assert client.tenant == TENANT
    assert client.recall(None, "u1") == []  # None: the key's tenant
    bad = usermem.Client("http://testserver", "umk_nope", http=TestClient(api.app))
    with pytest.raises(PermissionDenied, match="unauthorized"):
        bad.recall(TENANT, "u1")
    api.memory.close()


def test_unreachable_server_is_a_store_error():
    from apihelp import free_port

    client = usermem.Client(f"http://127.0.0.1:{free_port()}", "umk_x", timeout=2)
    with pytest.raises(usermem.StoreError, match="cannot reach"):
        client.recall(TENANT, "u1")


def test_a_wrong_base_url_is_an_error_not_an_empty_answer():
    api = make_api()
    client = usermem.Client("http://testserver/not-usermem", api.key_a, http=TestClient(api.app))
    client._http.base_url = "http://testserver/not-usermem"
    with pytest.raises(usermem.UsermemError, match="no such endpoint"):
        client.recall(TENANT, "u1")
    with pytest.raises(usermem.UsermemError, match="no such endpoint"):
        client.get(TENANT, "x")
    api.memory.close()
