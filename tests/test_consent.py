"""Issue 14: recall reports what it withheld and why (never the value); the consent flow (agent asks, user
approves or declines with a user token); `users` paging; questions name fields by their label (zh / en)."""

from __future__ import annotations

import pickle

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client as McpClient

import usermem
from apihelp import T0, fast_memory, make_api
from usermem import Memory
from usermem.engine.consent import DECLINE_MEMORY
from usermem.errors import NotFound, ValidationError
from usermem.interfaces.mcp import build_server
from usermem.model import Recalled, Withheld
from usermem.policy.contracts import DEFAULT_CONTRACTS, FieldContract
from usermem.policy.wording import consent_question, verification_questions

LUNCH_ZH, LUNCH_EN = "推荐午餐", "to recommend lunch"


@pytest.fixture()
def mem() -> Memory:
    m = fast_memory()
    m.write("acme", "u1", "fact", "allergy", "花生", source="user_confirmed", now=T0)
    m.write("acme", "u1", "fact", "city", "上海", source="user_confirmed", now=T0)
    m.write("acme", "u2", "fact", "allergy", "peanuts", source="user_confirmed", now=T0)
    m.write("acme", "u2", "preference", "language", "English", source="user_confirmed", now=T0)
    yield m
    m.close()


def _keys(items: list[object]) -> list[str]:
    return sorted(getattr(x, "key", getattr(getattr(x, "memory", None), "key", None)) for x in items)  # type: ignore[misc]


# -- library ------------------------------------------------------------------------------------------------

def test_recall_reports_a_withheld_field_with_a_zh_question_and_never_its_value(mem: Memory) -> None:
    got = mem.recall("acme", "u1", now=T0 + 1, purpose=LUNCH_ZH)
    assert [r.key for r in got] == ["city"]
    assert got.withheld == (Withheld("allergy", "L3", "needs_grant", "可以使用您的过敏信息来推荐午餐吗？"),)
    w = got.withheld[0]
    assert (w.key, w.level, w.reason.value, w.question, w.declined, w.request_id) == (
        "allergy", "L3", "needs_grant", "可以使用您的过敏信息来推荐午餐吗？", False, None)
    assert "花生" not in repr(w) and "花生" not in str(w.to_dict())
    scored = mem.recall_scored("acme", "u1", now=T0 + 1, purpose=LUNCH_ZH)
    assert scored.withheld == got.withheld and [s.memory.key for s in scored] == ["city"]


def test_recall_question_in_english_for_an_english_user(mem: Memory) -> None:
    got = mem.recall("acme", "u2", now=T0 + 1, purpose=LUNCH_EN)
    assert [w.question for w in got.withheld] == ["May I use your allergy information to recommend lunch?"]
    # A purpose in the other language is left out rather than mixed in.
    got = mem.recall("acme", "u2", now=T0 + 1, purpose=LUNCH_ZH)
    assert [w.question for w in got.withheld] == ["May I use your allergy information?"]


def test_results_stay_lists(mem: Memory) -> None:
    got = mem.recall("acme", "u1", now=T0 + 1)
    assert isinstance(got, list) and isinstance(got, Recalled) and got == [got[0]] and len(got) == 1
    again = pickle.loads(pickle.dumps(got))
    assert again == got and again.withheld == got.withheld and again.withheld[0].question == got.withheld[0].question
    assert mem.recall("acme", "nobody", now=T0).withheld == ()
    w = got.withheld[0]
    assert w == "allergy" and "allergy" in got.withheld  # a Withheld is its key
    with pytest.raises(AttributeError):
        w.reason = "disabled"  # type: ignore[misc]


def test_approve_makes_an_audited_grant_and_the_next_recall_includes_the_field(mem: Memory) -> None:
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, 600, actor="agent-7", now=T0 + 2)
    assert req.status == "pending" and req.questions["zh"] == "可以使用您的过敏信息来推荐午餐吗？"
    assert req.questions["en"] == "May I use your allergy information?"
    assert [r.id for r in mem.consent_requests("acme", "u1", now=T0 + 3)] == [req.id]
    # asking again is the same request, not a second one
    assert mem.request_consent("acme", "u1", "allergy", LUNCH_ZH, 600, now=T0 + 3).id == req.id
    assert mem.recall("acme", "u1", now=T0 + 3).withheld[0].request_id == req.id
    done = mem.approve_consent("acme", "u1", req.id, actor="user:u1", now=T0 + 4)
    assert done.status == "approved" and done.grant_id is not None
    got = mem.recall("acme", "u1", now=T0 + 5)
    assert sorted(r.key for r in got) == ["allergy", "city"] and got.withheld == ()
    grants = mem.grants("acme", "u1", now=T0 + 5)
    assert [(g.id, g.fields, g.purpose, g.expires_at) for g in grants] == [
        (done.grant_id, ("allergy",), LUNCH_ZH, T0 + 4 + 600)]
    actions = [e.action for e in mem.audit("acme", user_id="u1")]
    assert {"consent_request", "consent_approve", "grant"} <= set(actions)
    assert all("花生" not in str(e.detail) for e in mem.audit("acme", user_id="u1"))
    # the grant lasts the requested duration, then the field is withheld again
    assert mem.recall("acme", "u1", now=T0 + 4 + 601).withheld[0].key == "allergy"
    assert mem.consent_requests("acme", "u1", now=T0 + 5) == []
    assert [r.status for r in mem.consent_requests("acme", "u1", status=None, now=T0 + 5)] == ["approved"]


def test_decline_is_remembered_for_the_session_and_not_asked_again(mem: Memory) -> None:
    sid = mem.open_session("acme", "u1", now=T0)
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, session_id=sid, now=T0 + 1)
    no = mem.decline_consent("acme", "u1", req.id, actor="user:u1", now=T0 + 2)
    assert no.status == "declined"
    w = mem.recall("acme", "u1", now=T0 + 3, purpose=LUNCH_ZH).withheld[0]
    assert (w.key, w.reason.value, w.declined, w.question) == ("allergy", "needs_grant", True, None)
    # the agent asks again in the same session: it gets the declined request back, nothing new is pending
    again = mem.request_consent("acme", "u1", ["allergy"], "another purpose", now=T0 + 4)
    assert again.id == req.id and again.status == "declined"
    assert mem.consent_requests("acme", "u1", now=T0 + 4) == []
    assert "consent_decline" in [e.action for e in mem.audit("acme", user_id="u1")]
    # the session ends: the decline is no longer remembered, the question comes back
    mem.close_session(sid, tenant="acme", now=T0 + 5)
    w = mem.recall("acme", "u1", now=T0 + 6, purpose=LUNCH_ZH).withheld[0]
    assert not w.declined and w.question == "可以使用您的过敏信息来推荐午餐吗？"


def test_decline_without_a_session_lasts_its_memory_and_declining_an_approval_revokes_it(mem: Memory) -> None:
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, now=T0)
    mem.approve_consent("acme", "u1", req.id, now=T0 + 1)
    assert "allergy" in [r.key for r in mem.recall("acme", "u1", now=T0 + 2)]
    mem.decline_consent("acme", "u1", req.id, now=T0 + 3)  # the user changes their mind
    assert mem.grants("acme", "u1", now=T0 + 4) == []
    assert mem.recall("acme", "u1", now=T0 + 4).withheld[0].declined
    assert not mem.recall("acme", "u1", now=T0 + 3 + DECLINE_MEMORY + 1).withheld[0].declined


def test_disabled_and_private_to_domain_reasons(mem: Memory) -> None:
    mem.write("acme", "u1", "preference", "language", "中文", source="user_confirmed", now=T0)
    mem.set_contract("acme", {"key": "salary", "kind": "fact", "domain": "hr", "sharing": "private",
                              "labels": {"zh": "薪资", "en": "salary"}})
    mem.write("acme", "u1", "fact", "salary", "secret-ish", source="system", now=T0)
    mem.disable_field("acme", "city")
    got = mem.recall("acme", "u1", now=T0 + 1, domain="shop")
    assert [(w.key, w.level, w.reason.value, w.question) for w in got.withheld] == [
        ("allergy", "L3", "needs_grant", "可以使用您的过敏信息吗？"),
        ("city", "L1", "disabled", None),
        ("salary", "L1", "private_to_domain", None)]
    assert [r.key for r in got] == ["language"]
    assert [w.key for w in mem.recall("acme", "u1", now=T0 + 1, domain="hr").withheld] == ["allergy", "city"]


def test_opt_in_with_a_request_id_approves_it(mem: Memory) -> None:
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, domain="food", now=T0)
    assert mem.opt_in("acme", "u1", request_id=req.id, now=T0 + 1) == ["allergy"]
    # allergy is health's explicit_opt_in field: reading for "food" needs the opt-in too, which approval made
    assert "allergy" in [r.key for r in mem.recall("acme", "u1", now=T0 + 2, domain="food")]
    with pytest.raises(ValidationError):
        mem.opt_in("acme", "u1", ["allergy"], "food", request_id=req.id)
    with pytest.raises(ValidationError):
        mem.opt_in("acme", "u1")


def test_bad_consent_input_is_refused(mem: Memory) -> None:
    for fields, purpose, ttl in ((["nope_field"], "x", 60), ([], "x", 60), (["allergy"], " ", 60),
                                 (["allergy"], "x", 0), (["allergy"], "call 13812345678", 60),
                                 (["allergy"], "x", float("nan"))):
        with pytest.raises(ValidationError):
            mem.request_consent("acme", "u1", fields, purpose, ttl, now=T0)
    with pytest.raises(NotFound):
        mem.approve_consent("acme", "u1", "ab" * 16, now=T0)
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, now=T0)
    with pytest.raises(NotFound):  # another user's request is not found
        mem.approve_consent("acme", "u2", req.id, now=T0)
    with pytest.raises(ValidationError):
        mem.consent_requests("acme", "u1", status="maybe")
    with pytest.raises(ValidationError):
        mem.recall("acme", "u1", purpose="\ud800")


def test_users_pages_with_prefix_search_per_tenant(mem: Memory) -> None:
    for u in ("C001", "C002", "C010", "D001", "张三"):
        mem.write("acme", u, "fact", "city", "x", now=T0)
    mem.write("globex", "C003", "fact", "city", "x", now=T0)
    assert mem.users("acme", prefix="C0").users == ["C001", "C002", "C010"]
    first = mem.users("acme", prefix="C0", limit=2)
    assert first.users == ["C001", "C002"] and first.next_after == "C002"
    rest = mem.users("acme", prefix="C0", limit=2, after=first.next_after)
    assert rest.users == ["C010"] and rest.next_after is None
    assert mem.users("acme").users == ["C001", "C002", "C010", "D001", "u1", "u2", "张三"]
    assert mem.users("acme", after="u1", limit=1).users == ["u2"]
    assert mem.users("acme", prefix="张").users == ["张三"]
    assert mem.users("globex").users == ["C003"]
    for bad in ({"limit": 0}, {"limit": 1001}, {"prefix": "a\x00"}):
        with pytest.raises(ValidationError):
            mem.users("acme", **bad)  # type: ignore[arg-type]


def test_assemble_reports_withheld_fields_with_their_reason(mem: Memory) -> None:
    mem.write("acme", "u1", "preference", "diet", "素食", source="user_confirmed", now=T0)
    a = mem.assemble("acme", "u1", "帮我点个午餐，注意过敏和饮食", now=T0 + 1, purpose=LUNCH_ZH)
    assert "花生" not in a.prompt and "素食" in a.prompt
    held = {w.key: w for w in a.withheld}
    assert held["allergy"].reason.value == "needs_grant"
    assert held["allergy"].question == "可以使用您的过敏信息来推荐午餐吗？"
    assert a.to_dict()["withheld"][0]["key"] == "allergy"


# -- labels and questions -------------------------------------------------------------------------------------

def test_every_built_in_field_has_zh_and_en_labels() -> None:
    for c in DEFAULT_CONTRACTS:
        assert c.labels.get("zh") and c.labels.get("en"), c.key
        assert any("\u4e00" <= ch <= "\u9fff" for ch in c.labels["zh"]), c.key
        assert c.key not in c.labels["zh"]
    assert FieldContract.from_dict(DEFAULT_CONTRACTS[0].to_dict()).labels == DEFAULT_CONTRACTS[0].labels


def test_questions_use_labels_never_keys() -> None:
    contract = next(c for c in DEFAULT_CONTRACTS if c.key == "reply_length")
    q = verification_questions("reply_length", "concise", contract)
    assert q == {"zh": "根据您最近的反馈，系统推测您更希望回复长度是「简洁」，是否准确？",
                 "en": "From your recent feedback, it seems you would like your reply length to be concise. "
                       "Is that right?"}
    custom = FieldContract.from_dict({"key": "news_push", "kind": "preference"})
    assert consent_question(custom, "news_push", "en") == "May I use your news push?"
    labelled = custom.evolve(labels={"zh": "资讯推送", "en": "news push setting"})
    assert consent_question(labelled, "news_push", "zh", "用来安排推送") == "可以使用您的资讯推送来安排推送吗？"


def test_labels_are_validated_and_versioned(mem: Memory) -> None:
    out = mem.set_contract("acme", {"key": "shoe_size", "kind": "fact", "labels": {"zh": "鞋码", "en": "shoe size"}})
    assert out.labels == {"zh": "鞋码", "en": "shoe size"} and mem.contract("acme", "shoe_size").label("zh") == "鞋码"
    for bad in ({"fr": "pointure"}, {"zh": ""}, {"en": "x" * 65}, {"zh": 3}, ["鞋码"], {"en": "call 13812345678"}):
        with pytest.raises(ValidationError):
            mem.set_contract("acme", {"key": "shoe_size", "kind": "fact", "labels": bad})


# -- HTTP, user tokens, client, MCP ---------------------------------------------------------------------------

@pytest.fixture()
def api():  # type: ignore[no-untyped-def]
    m = fast_memory()
    m.write("acme", "u1", "fact", "allergy", "花生", source="user_confirmed", now=T0)
    m.write("acme", "u1", "fact", "city", "上海", source="user_confirmed", now=T0)
    m.write("acme", "u2", "fact", "city", "Paris", source="user_confirmed", now=T0)
    a = make_api(m)
    ring = a.app.state.keys
    a.token_u1, rec = ring.create_user_token("acme", "u1", name="me")  # type: ignore[attr-defined]
    assert rec.user_token and rec.user_id == "u1" and not rec.admin
    a.token_u2, _ = ring.create_user_token("acme", "u2")  # type: ignore[attr-defined]
    a.agent_u1, _ = ring.create("acme", user_id="u1", name="agent bound to u1")  # type: ignore[attr-defined]
    yield a
    m.close()


def test_http_recall_reports_withheld_and_the_user_token_flow(api) -> None:  # type: ignore[no-untyped-def]
    h = api.http
    r = h.get("/v1/users/u1/memories", params={"purpose": LUNCH_ZH, "now": T0 + 1}, headers=api.h(api.key_a))
    assert r.status_code == 200
    body = r.json()
    assert [i["memory"]["key"] for i in body["items"]] == ["city"] and "花生" not in r.text
    assert body["withheld"] == [{"key": "allergy", "level": "L3", "reason": "needs_grant",
                                 "question": "可以使用您的过敏信息来推荐午餐吗？", "declined": False,
                                 "request_id": None}]
    r = h.post("/v1/users/u1/consent-requests", headers=api.h(api.key_a),
               json={"fields": ["allergy"], "purpose": LUNCH_ZH, "ttl_seconds": 900, "now": T0 + 2})
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    # the user's page lists it with the user token
    r = h.get("/v1/users/u1/consent-requests", params={"now": T0 + 2}, headers=api.h(api.token_u1))
    assert [x["id"] for x in r.json()["items"]] == [rid]
    path = f"/v1/users/u1/consent-requests/{rid}/approve"
    # an agent key cannot consent for the user, not even one bound to the user
    assert h.post(path, headers=api.h(api.key_a), json={"now": T0 + 3}).status_code == 403
    r = h.post(path, headers=api.h(api.agent_u1), json={"now": T0 + 3})
    assert r.status_code == 403 and r.json()["code"] == "user_token_required"
    # another user's token cannot approve (nor see) it
    assert h.post(path, headers=api.h(api.token_u2), json={"now": T0 + 3}).status_code == 404
    assert h.get("/v1/users/u1/consent-requests", headers=api.h(api.token_u2)).status_code == 404
    assert h.get("/v1/users/u1/memories", headers=api.h(api.token_u2)).status_code == 404
    # another tenant's key is refused before anything is looked up
    assert h.post(path, headers=api.h(api.key_b), json={"now": T0 + 3}).status_code == 403
    r = h.post(path, headers=api.h(api.token_u1), json={"now": T0 + 3, "actor": "me-page"})
    assert r.status_code == 200 and r.json()["status"] == "approved" and r.json()["grant_id"]
    r = h.get("/v1/users/u1/memories", params={"now": T0 + 4}, headers=api.h(api.key_a))
    assert sorted(i["memory"]["key"] for i in r.json()["items"]) == ["allergy", "city"]
    assert r.json()["withheld"] == []
    audit = h.get("/v1/audit", params={"user_id": "u1", "action": "consent_approve"}, headers=api.h(api.admin_a))
    assert audit.json()["items"][0]["actor"].endswith(":me-page")


def test_http_consents_route_with_request_id_and_decline(api) -> None:  # type: ignore[no-untyped-def]
    h = api.http
    rid = h.post("/v1/users/u1/consent-requests", headers=api.h(api.key_a),
                 json={"fields": ["allergy"], "purpose": "recommend lunch", "now": T0}).json()["id"]
    r = h.post("/v1/users/u1/consents", headers=api.h(api.key_a), json={"request_id": rid, "now": T0 + 1})
    assert r.status_code == 403
    r = h.post("/v1/users/u1/consents", headers=api.h(api.token_u1), json={"request_id": rid, "now": T0 + 1})
    assert r.status_code == 200 and r.json() == {"fields": ["allergy"]}
    r = h.post(f"/v1/users/u1/consent-requests/{rid}/decline", headers=api.h(api.token_u1), json={"now": T0 + 2})
    assert r.status_code == 200 and r.json()["status"] == "declined"
    w = h.get("/v1/users/u1/memories", params={"now": T0 + 3}, headers=api.h(api.key_a)).json()["withheld"]
    assert w[0]["declined"] is True and w[0]["question"] is None
    assert h.post("/v1/users/u1/consents", headers=api.h(api.token_u1),
                  json={"request_id": "x" * 129}).status_code == 422
    assert h.post(f"/v1/users/u1/consent-requests/{'ab' * 16}/approve", headers=api.h(api.token_u1),
                  json={}).status_code == 404
    assert h.post("/v1/users/u1/consent-requests", headers=api.h(api.key_a),
                  json={"fields": ["allergy"], "purpose": "x", "ttl_seconds": 0}).status_code == 422


def test_http_users_is_paged_tenant_scoped_and_closed_to_user_tokens(api) -> None:  # type: ignore[no-untyped-def]
    h = api.http
    r = h.get("/v1/users", params={"limit": 1}, headers=api.h(api.key_a))
    assert r.status_code == 200 and r.json() == {"items": ["u1"], "next_after": "u1"}
    r = h.get("/v1/users", params={"after": "u1"}, headers=api.h(api.key_a))
    assert r.json() == {"items": ["u2"], "next_after": None}
    assert h.get("/v1/users", params={"prefix": "u2"}, headers=api.h(api.admin_a)).json()["items"] == ["u2"]
    assert h.get("/v1/users", headers=api.h(api.key_b)).json()["items"] == []
    assert h.get("/v1/users", headers=api.h(api.token_u1)).status_code == 403
    assert h.get("/v1/users", params={"limit": 0}, headers=api.h(api.key_a)).status_code == 422


def test_client_reports_withheld_and_answers_with_a_user_token(api) -> None:  # type: ignore[no-untyped-def]
    agent = usermem.Client("http://testserver", api.key_a, http=TestClient(api.app))
    user = usermem.Client("http://testserver", api.token_u1, http=TestClient(api.app))
    got = agent.recall("acme", "u1", now=T0 + 1, purpose=LUNCH_ZH)
    assert [r.key for r in got] == ["city"] and got.withheld[0].question == "可以使用您的过敏信息来推荐午餐吗？"
    assert agent.recall_scored("acme", "u1", now=T0 + 1).withheld[0].reason.value == "needs_grant"
    req = agent.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, 600, now=T0 + 2)
    assert [r.id for r in user.consent_requests("acme", "u1", now=T0 + 2)] == [req.id]
    with pytest.raises(usermem.PermissionDenied):
        agent.approve_consent("acme", "u1", req.id, now=T0 + 3)
    assert user.approve_consent("acme", "u1", req.id, now=T0 + 3).status == "approved"
    assert "allergy" in [r.key for r in agent.recall("acme", "u1", now=T0 + 4)]
    assert agent.users("acme").users == ["u1", "u2"]
    a = agent.assemble("acme", "u2", "lunch?", now=T0 + 5)
    assert all(isinstance(w, Withheld) for w in a.withheld)


def test_mcp_recall_and_request_consent() -> None:
    m = fast_memory()
    m.write("acme", "u1", "fact", "allergy", "peanuts", source="user_confirmed", now=T0)
    m.write("acme", "u1", "preference", "language", "English", source="user_confirmed", now=T0)

    async def go() -> None:
        async with McpClient(build_server(m, tenant="acme", user_id="u1")) as c:
            r = await c.call_tool("recall", {"purpose": "recommend lunch"})
            assert not r.is_error, r.content
            assert r.structured_content["withheld"] == [
                {"key": "allergy", "level": "L3", "reason": "needs_grant", "declined": False, "request_id": None,
                 "question": "May I use your allergy information to recommend lunch?"}]
            assert "peanuts" not in str(r.structured_content)
            r = await c.call_tool("request_consent", {"fields": ["allergy"], "purpose": "recommend lunch"})
            assert not r.is_error and r.structured_content["status"] == "pending"
            r = await c.call_tool("assemble", {"message": "order lunch, mind my allergy"})
            assert r.structured_content["withheld"][0]["request_id"]

    try:
        anyio.run(go)
    finally:
        m.close()


# -- every backend --------------------------------------------------------------------------------------------

def test_users_and_consent_on_every_backend(make_memory) -> None:  # type: ignore[no-untyped-def]
    m = make_memory()
    ids = ["a%b", "a_c", "ab", "abc", "b", "张三", "张四"]
    for u in ids:
        m.write("t", u, "fact", "city", "x", now=T0)
    m.write("t2", "ab2", "fact", "city", "x", now=T0)
    assert m.users("t").users == sorted(ids)  # code-point order on every backend
    assert m.users("t", prefix="a%").users == ["a%b"] and m.users("t", prefix="a_").users == ["a_c"]
    assert m.users("t", prefix="ab").users == ["ab", "abc"]
    page = m.users("t", prefix="张", limit=1)
    assert page.users == ["张三"] and m.users("t", prefix="张", after=page.next_after).users == ["张四"]
    assert m.users("t", after="b").users == ["张三", "张四"]
    m.write("t", "u", "fact", "allergy", "花生", source="user_confirmed", now=T0)
    assert [w.key for w in m.recall("t", "u", now=T0 + 1).withheld] == ["allergy"]
    req = m.request_consent("t", "u", ["allergy"], LUNCH_ZH, now=T0 + 1)
    m.approve_consent("t", "u", req.id, now=T0 + 2)
    got = m.recall("t", "u", now=T0 + 3)
    assert [r.key for r in got] == ["allergy"] and got.withheld == ()


def test_async_client_reports_withheld_and_answers_with_a_user_token(api) -> None:  # type: ignore[no-untyped-def]
    import httpx

    async def go() -> None:
        def http() -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://testserver")

        async with usermem.AsyncClient("http://testserver", api.key_a, http=http()) as agent, \
                usermem.AsyncClient("http://testserver", api.token_u1, http=http()) as user:
            got = await agent.recall_scored("acme", "u1", now=T0 + 1, purpose="recommend lunch")
            assert [s.memory.key for s in got] == ["city"]
            assert got.withheld[0].question == "May I use your allergy information to recommend lunch?"
            req = await agent.request_consent("acme", "u1", "allergy", "recommend lunch", now=T0 + 2)
            no = await user.decline_consent("acme", "u1", req.id, now=T0 + 3)
            assert no.status == "declined"
            assert (await agent.recall("acme", "u1", now=T0 + 4)).withheld[0].declined
            assert (await agent.users("acme", prefix="u", limit=1)).next_after == "u1"

    anyio.run(go)


def test_user_tokens_expire_and_consent_requests_leave_with_the_user(mem: Memory) -> None:
    from usermem.interfaces.api.keys import KeyRing

    ring = KeyRing(mem.store)
    old, rec = ring.create_user_token("acme", "u1", ttl_seconds=60, now=T0)  # expired long ago (real clock)
    assert rec.expires_at == T0 + 60 and ring.verify(old) is None
    fresh, _ = ring.create_user_token("acme", "u1", ttl_seconds=3600)
    got = ring.verify(fresh)
    assert got is not None and (got.tenant, got.user_id, got.user_token, got.admin) == ("acme", "u1", True, False)
    for bad in ({"user_id": "a\x00"}, {"user_id": "u1", "ttl_seconds": 0}):
        with pytest.raises(ValidationError):
            ring.create_user_token("acme", **bad)  # type: ignore[arg-type]
    req = mem.request_consent("acme", "u1", ["allergy"], LUNCH_ZH, now=T0)
    exported = str(mem.export("acme", "u1", now=T0 + 1))
    assert req.id in exported  # the user's requests are part of their data
    mem.forget_user("acme", "u1", now=T0 + 2)
    assert mem.consent_requests("acme", "u1", status=None, now=T0 + 3) == []


def test_http_domain_opt_in_is_the_users_too(api) -> None:  # type: ignore[no-untyped-def]
    """Was: any agent key (bound to the user or not) could opt the user in for a domain with {fields, domain} —
    consent given by the agent that wants it. Now, like approving a request: a user token of that user or an
    admin key (an operator recording the user's decision)."""
    h = api.http
    body = {"fields": ["city"], "domain": "logistics", "now": T0 + 1}
    for key in (api.key_a, api.agent_u1):
        r = h.post("/v1/users/u1/consents", headers=api.h(key), json=body)
        assert r.status_code == 403 and r.json()["code"] == "user_token_required"
    assert api.memory.audit("acme", action="opt_in") == []
    assert h.post("/v1/users/u1/consents", headers=api.h(api.token_u2), json=body).status_code in (403, 404)
    r = h.post("/v1/users/u1/consents", headers=api.h(api.token_u1), json=body)
    assert r.status_code == 200 and r.json() == {"fields": ["city"]}
    r = h.post("/v1/users/u2/consents", headers=api.h(api.admin_a), json=body)
    assert r.status_code == 200 and r.json() == {"fields": ["city"]}
