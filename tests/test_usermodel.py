"""The user model (issue 18): inferred preferences from signals, derived attributes with their evidence,
procedural memory after review — each in zh and en, and the promises as properties:
an inference never replaces a higher-authority value; forgetting an input removes what was derived from it
(bytes gone after purge); a denied inference does not come back within its suppression period."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from usermem import Memory, Op, ValidationError
from usermem.policy.usermodel import inference_confidence

T0 = 1_790_000_000.0
DAY = 86_400.0


def _inferences(m: Memory, user: str) -> list[dict]:
    return [v for v in m.pending_verifications("acme", user) if v.get("origin") == "signals"]


# -- inferred preferences ---------------------------------------------------------------------------------


def test_confidence_formula_matches_the_seed() -> None:
    assert inference_confidence(3) == pytest.approx(0.85, abs=0.002)  # seed 004: three "shorter please" → 0.85
    assert inference_confidence(4) > inference_confidence(3) > inference_confidence(2)
    assert inference_confidence(3, 1) < inference_confidence(3)
    assert inference_confidence(50) <= 0.95  # never as certain as a stated value
    assert inference_confidence(0) == 0.0


def test_three_requests_for_shorter_replies_become_a_question_zh(mem: Memory) -> None:
    mem.write("acme", "u1", "preference", "language", "中文", source="user_confirmed", now=T0)
    for i, text in enumerate(["帮我总结这篇文章，再精简一点", "还是太多了，简短点", "再精简一些吧"]):
        mem.ingest("acme", "u1", [text], now=T0 + i * DAY)
        assert len(_inferences(mem, "u1")) == (1 if i == 2 else 0)
    inf = _inferences(mem, "u1")[0]
    assert inf["key"] == "reply_length" and inf["value"] == "简洁"  # the user's language, not "concise"
    assert inf["confidence"] == pytest.approx(0.85, abs=0.002) and inf["source"] == "inferred"
    assert len(inf["evidence"]) == 3 and "精简" in inf["evidence"][0]["message"]
    assert "简洁" in inf["question"]["zh"]
    # not a memory yet, and shown as inferred (never as known) in the user model
    assert mem.recall("acme", "u1", keys=["reply_length"], now=T0 + 3 * DAY) == []
    model = mem.model("acme", "u1", now=T0 + 3 * DAY)
    assert model.language == "zh"
    assert [i["key"] for i in model.inferred] == ["reply_length"] and model.inferred[0]["status"] == "pending"
    assert not any(p["key"] == "reply_length" for p in model.preferences)
    assert model.open_questions[0]["question"] == inf["question"]["zh"]
    result = mem.accept_verification("acme", "u1", inf["id"], now=T0 + 3 * DAY)
    assert result.op is Op.ADD and result.memory.source.value == "user_confirmed"
    assert result.memory.value == "简洁"


def test_contradicting_signals_lower_confidence_and_evidence_is_redacted_en(mem: Memory) -> None:
    for i in range(2):
        mem.ingest("acme", "u2", ["Shorter, please — call me at 13812345678 if unclear"], now=T0 + i)
    out = mem.record_signal("acme", "u2", "reply_length", "detailed", message="more detail on the second part",
                            now=T0 + 5)
    assert out["agree"] == 1 and out["contradict"] == 2 and out["inference"] is None
    out = mem.record_signal("acme", "u2", "reply_length", "short", message="keep it short", now=T0 + 6)
    assert out["agree"] == 3 and out["contradict"] == 1 and out["inference"] is None
    assert out["confidence"] < inference_confidence(3)
    docs = mem.store.list_docs("acme", "signals", user_id="u2")
    assert docs and "13812345678" not in repr(docs)  # evidence is kept redacted


def test_a_rejected_inference_is_suppressed_then_may_return(mem: Memory) -> None:
    mem.set_inference_policy("acme", suppress_days=10, now=T0)
    for i in range(3):
        mem.record_signal("acme", "u3", "reply_format", "table", message="as a table please", now=T0 + i)
    inf = _inferences(mem, "u3")[0]
    assert mem.reject_verification("acme", "u3", inf["id"], now=T0 + 10)
    for i in range(3):
        out = mem.record_signal("acme", "u3", "reply_format", "table", now=T0 + DAY + i)
    assert out["suppressed_until"] == pytest.approx(T0 + 10 + 10 * DAY) and _inferences(mem, "u3") == []
    for i in range(3):
        out = mem.record_signal("acme", "u3", "reply_format", "table", now=T0 + 11 * DAY + i)
    assert out["suppressed_until"] is None and len(_inferences(mem, "u3")) == 1


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(days=st.floats(min_value=0.0, max_value=59.9), suppress=st.integers(min_value=1, max_value=60),
       signals=st.integers(min_value=3, max_value=8))
def test_property_a_denied_inference_does_not_return_within_its_suppression(days: float, suppress: int,
                                                                            signals: int) -> None:
    m = Memory()
    try:
        m.set_inference_policy("acme", suppress_days=suppress, now=T0)
        for i in range(3):
            m.record_signal("acme", "u", "reply_length", "short", now=T0 + i)
        inf = _inferences(m, "u")[0]
        m.reject_verification("acme", "u", inf["id"], now=T0 + 5)
        at = T0 + 5 + days * DAY
        for i in range(signals):
            m.record_signal("acme", "u", "reply_length", "short", now=at + i)
        back = _inferences(m, "u")
        if days * DAY + signals < suppress * DAY:
            assert back == []
    finally:
        m.close()


def test_active_mode_uses_inferences_at_low_weight_in_their_own_block(mem: Memory) -> None:
    mem.set_inference_policy("acme", mode="active", now=T0)
    for i in range(3):
        mem.record_signal("acme", "u4", "reply_format", "table", message="as a table", now=T0 + i)
    current = mem.recall("acme", "u4", keys=["reply_format"], now=T0 + 10)
    assert current and current[0].source.value == "inferred" and current[0].importance <= 0.2
    out = mem.assemble("acme", "u4", "summarize this report for me", now=T0 + 10)
    assert "<USER_INFERENCES>" in out.prompt and "reply_format" in out.inferences
    facts_and_prefs = out.prompt.split("<USER_INFERENCES>")[0]
    assert "table" not in facts_and_prefs
    model = mem.model("acme", "u4", now=T0 + 10)
    assert model.inferred[0]["status"] == "active" and model.inferred[0]["evidence"]
    # the user says no: the inference is retracted and not proposed again
    assert mem.reject_verification("acme", "u4", model.inferred[0]["verification_id"], now=T0 + 20)
    assert mem.recall("acme", "u4", keys=["reply_format"], now=T0 + 30) == []


_HIGHER = ["system", "agent_confirmed", "user_confirmed", "onboarding", "extracted"]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=st.sampled_from(_HIGHER), stated=st.sampled_from(["详细", "detailed", "medium"]),
       mode=st.sampled_from(["active", "confirm"]), n=st.integers(min_value=3, max_value=6))
def test_property_an_inference_never_replaces_a_higher_authority_value(source: str, stated: str, mode: str,
                                                                       n: int) -> None:
    m = Memory()
    try:
        m.set_inference_policy("acme", mode=mode, now=T0)
        m.write("acme", "u", "preference", "reply_length", stated, source=source, now=T0)
        for i in range(n):
            m.record_signal("acme", "u", "reply_length", "简洁", now=T0 + 1 + i)
        current = m.recall("acme", "u", keys=["reply_length"], now=T0 + 100)
        assert [(r.value, r.source.value) for r in current] == [(stated, source)]
    finally:
        m.close()


# -- derived attributes -------------------------------------------------------------------------------


def test_derived_attributes_follow_their_inputs_with_why(mem: Memory) -> None:
    mem.write("acme", "doc", "fact", "occupation", "儿科医生", source="user_confirmed", now=T0)
    mem.write("acme", "doc", "preference", "language", "中文", source="user_confirmed", now=T0)
    mem.flush()
    model = mem.model("acme", "doc", now=T0 + 1)
    derived = {d["key"]: d for d in model.derived}
    assert derived["expertise"]["value"] == "熟悉儿童用药剂量"
    assert derived["follows"]["value"] == "关注疫苗接种指南"
    assert "pediatrician.dosing" in derived["expertise"]["why"] and derived["expertise"]["inputs"][0]["key"] == \
        "occupation"
    assert not any(f["key"] == "expertise" for f in model.facts)  # never mixed with what is known
    out = mem.assemble("acme", "doc", "给我推荐一本书", now=T0 + 1)
    assert "熟悉儿童用药剂量" in out.prompt.split("<USER_INFERENCES>", 1)[-1]
    assert "熟悉儿童用药剂量" not in out.prompt.split("<USER_INFERENCES>", 1)[0]
    # the input changes: the attribute disappears (at once on reads, from storage after the recompute)
    mem.write("acme", "doc", "fact", "occupation", "程序员", source="user_confirmed", now=T0 + 2)
    assert mem.model("acme", "doc", now=T0 + 3).derived == ()
    mem.flush()
    assert mem.store.list_docs("acme", "derived", user_id="doc") == []


def test_derived_english_and_rule_versions(mem: Memory) -> None:
    rule = {"id": "nurse.shifts", "when": {"occupation": ["nurse", "护士"]}, "then_key": "schedule_pattern",
            "then": {"en": "often works night shifts", "zh": "常上夜班"}, "status": "proposed",
            "proposed_by": "llm"}
    stored = mem.set_derivation_rule("acme", rule, actor="ops", now=T0)
    assert stored["version"] == 1 and stored["status"] == "proposed"
    mem.write("acme", "n1", "fact", "occupation", "Nurse", source="user_confirmed", now=T0)
    assert mem.refresh_derived("acme", "n1", now=T0 + 1) == []  # a proposed rule does not fire
    approved = mem.set_derivation_rule("acme", {**rule, "status": "active"}, actor="reviewer", now=T0 + 2)
    assert approved["version"] == 2
    mem.refresh_derived("acme", "n1", now=T0 + 3)
    derived = mem.model("acme", "n1", now=T0 + 4).derived
    assert [(d["key"], d["value"]) for d in derived] == [("schedule_pattern", "often works night shifts")]
    assert any(e.action == "derive_rule" for e in mem.audit("acme"))
    with pytest.raises(ValidationError):
        mem.set_derivation_rule("acme", {"id": "bad", "when": {"occupation": ["x"]}, "then_key": "password",
                                         "then": {"en": "x"}})


def test_background_refresh_reads_the_tenants_own_rules(mem: Memory) -> None:
    """The worker's input keys come from the tenant's rule documents too (not only the shipped defaults)."""
    mem.set_derivation_rule("acme", {"id": "nurse.shifts", "when": {"occupation": ["nurse"]},
                                     "then_key": "schedule_pattern", "then": {"en": "often works night shifts"},
                                     "status": "active"}, now=T0)
    mem.set_derivation_rule("acme", {"id": "cyclist.commute", "when": {"hobby_sport": ["cycling"]},
                                     "then_key": "commute", "then": {"en": "may commute by bike"}}, now=T0)
    mem.write("acme", "c1", "fact", "hobby_sport", "cycling", source="user_confirmed", now=T0 + 1)
    mem.flush()
    assert [d["key"] for d in mem.model("acme", "c1", now=T0 + 2).derived] == ["commute"]


def test_writes_outside_every_rule_do_not_build_the_understanding(mem: Memory) -> None:
    """The background worker decides "no rule reads this field" from the rules alone: the conversation
    pipelines (a costly first import) are not built by writes that no rule reads."""
    for i in range(5):
        mem.write("acme", f"w{i}", "preference", f"k{i}", f"value {i}", source="user_confirmed", now=T0 + i)
    mem.flush()
    assert mem._engine._understanding is None
    mem.write("acme", "w9", "fact", "occupation", "pediatrician", source="user_confirmed", now=T0 + 9)
    mem.flush()
    assert [d["key"] for d in mem.model("acme", "w9", now=T0 + 10).derived] == ["expertise", "follows"]


def test_derived_from_l3_needs_the_same_grant(mem: Memory) -> None:
    mem.set_derivation_rule("acme", {"id": "peanut.avoid", "when": {"allergy": ["花生", "peanuts"]},
                                     "then_key": "avoids", "then": {"zh": "避免含花生的食物", "en": "avoids peanuts"}},
                            now=T0)
    mem.write("acme", "a1", "fact", "allergy", "花生", source="user_confirmed", now=T0)
    # refresh_derived answers like model(): was, the attribute derived from the allergy without a grant
    assert mem.refresh_derived("acme", "a1", now=T0 + 1) == []
    model = mem.model("acme", "a1", now=T0 + 2)
    assert model.derived == () and model.withheld == ("avoids",)
    mem.grant("acme", "a1", "L3", "lunch order", now=T0 + 2)
    model = mem.model("acme", "a1", now=T0 + 3)
    assert [d["key"] for d in model.derived] == ["avoids"] and model.withheld == ()
    assert [d["key"] for d in mem.refresh_derived("acme", "a1", now=T0 + 3)] == ["avoids"]


def test_forgetting_an_input_removes_everything_derived_from_it_bytes_included(tmp_path: Path) -> None:
    db = tmp_path / "um.db"
    m = Memory(f"sqlite:///{db}")
    try:
        m.set_derivation_rule("acme", {"id": "marker.rule", "when": {"hobby": ["qqzx-hobby"]},
                                       "then_key": "derived_marker", "then": {"en": "QQZX-DERIVED-TEXT"}}, now=T0)
        m.write("acme", "u", "fact", "hobby", "QQZX-HOBBY", source="user_confirmed", now=T0)
        for i in range(3):
            m.record_signal("acme", "u", "hobby", "QQZX-HOBBY", message="QQZX-SIGNAL-EVIDENCE", now=T0 + i)
        m.refresh_derived("acme", "u", now=T0 + 5)
        assert m.model("acme", "u", now=T0 + 6).derived
        m.forget("acme", "u", "hobby", now=T0 + 7)
        m.flush()
        assert m.store.list_docs("acme", "derived", user_id="u") == []
        assert m.store.list_docs("acme", "signals", user_id="u") == []
        m.purge(now=T0 + 400 * DAY)
    finally:
        m.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    # the rule's own text is tenant configuration and stays; the user's derived record, the value it was
    # derived from and the signals' evidence are gone from the file
    assert b"QQZX-DERIVED-TEXT" in raw
    for marker in (b"u|marker.rule", b"QQZX-SIGNAL-EVIDENCE", b"QQZX-HOBBY"):
        assert marker not in raw


# -- procedures ------------------------------------------------------------------------------------------


def test_procedures_are_proposed_reviewed_injected_and_rolled_back_zh(mem: Memory) -> None:
    mem.ingest("acme", "p1", ["以后每次问账单都先给我看发票表"], now=T0)
    queue = mem.procedures("acme", user_id="p1", status="proposed")
    assert len(queue) == 1 and "发票表" in queue[0]["text"] and queue[0]["proposed_by"] == "rules"
    assert queue[0]["evidence"][0]["message"].startswith("以后每次")
    pid = queue[0]["id"]
    assert "<AGENT_PROCEDURES>" not in mem.assemble("acme", "p1", "我的账单怎么样了", now=T0 + 1).prompt
    with pytest.raises(ValidationError):
        mem.review_procedure("acme", pid, "approve", now=T0 + 2)  # no evaluation recorded
    with pytest.raises(ValidationError):
        mem.review_procedure("acme", pid, "approve", evaluation={"name": "e2e-dev", "passed": False}, now=T0 + 2)
    done = mem.review_procedure("acme", pid, "approve", evaluation={"name": "e2e-dev", "passed": True,
                                                                    "result": "40/40"}, actor="lead", now=T0 + 3)
    assert done["status"] == "approved" and done["evaluation"]["name"] == "e2e-dev"
    out = mem.assemble("acme", "p1", "我的账单怎么样了", now=T0 + 4)
    assert "<AGENT_PROCEDURES>" in out.prompt and out.procedures
    assert mem.model("acme", "p1", now=T0 + 4).procedures[0]["id"] == pid
    mem.rollback_procedure("acme", pid, actor="lead", now=T0 + 5)
    assert "<AGENT_PROCEDURES>" not in mem.assemble("acme", "p1", "我的账单怎么样了", now=T0 + 6).prompt
    actions = [(e.action, e.op) for e in mem.audit("acme", action="procedure")]
    assert {op for _, op in actions} >= {"propose", "approve", "rollback"}


def test_tenant_wide_procedure_edit_and_reject_en(mem: Memory) -> None:
    p = mem.propose_procedure("acme", "Answer billing questions with the invoice table first",
                              evidence=["sessions s1-s9: 7 users asked twice"], proposed_by="llm", now=T0)
    edited = mem.review_procedure("acme", p["id"], "edit", text="Show the invoice table first for billing",
                                  actor="ops", now=T0 + 1)
    assert edited["status"] == "proposed" and edited["text"].startswith("Show")
    mem.review_procedure("acme", p["id"], "approve", evaluation={"name": "billing-set", "passed": True}, now=T0 + 2)
    assert "invoice table" in mem.assemble("acme", "anyone", "where is my bill?", now=T0 + 3).prompt
    q = mem.propose_procedure("acme", "Always upsell premium", now=T0 + 4)
    assert mem.review_procedure("acme", q["id"], "reject", now=T0 + 5)["status"] == "rejected"
    with pytest.raises(ValidationError):
        mem.review_procedure("acme", q["id"], "approve", evaluation={"name": "x", "passed": True}, now=T0 + 6)
    with pytest.raises(ValidationError):
        mem.propose_procedure("acme", "call the user at 13812345678 first", now=T0)  # guards apply


def test_forget_user_erases_the_user_model(mem: Memory) -> None:
    mem.ingest("acme", "gone", ["以后每次都先给我看摘要", "再精简一点"], now=T0)
    mem.write("acme", "gone", "fact", "occupation", "儿科医生", source="user_confirmed", now=T0)
    mem.flush()
    mem.forget_user("acme", "gone", now=T0 + 1)
    mem.flush()
    for ns in ("signals", "derived", "procedures", "verifications"):
        assert mem.store.list_docs("acme", ns, user_id="gone") == []


# -- over HTTP and the client -------------------------------------------------------------------------------


def test_user_model_over_http_and_client() -> None:
    from apihelp import make_api
    from usermem import Client
    from usermem.understand.usermodel import UserModel

    api = make_api()
    h, admin, other = api.h(api.key_a), api.h(api.admin_a), api.h(api.key_b)
    for i in range(3):
        r = api.http.post("/v1/users/w1/signals", headers=h, json={"key": "reply_length", "value": "简洁",
                                                                   "message": "再精简一点", "now": T0 + i})
        assert r.status_code == 200, r.text
    assert r.json()["inference"]["confidence"] == pytest.approx(0.85, abs=0.002)
    body = api.http.get("/v1/users/w1/model", headers=h, params={"now": T0 + 5}).json()
    assert body["inferred"][0]["key"] == "reply_length" and body["open_questions"]
    assert api.http.get("/v1/users/w1/model", headers=other).json()["inferred"] == []  # another tenant
    # admin-only resources
    assert api.http.get("/v1/derivation-rules", headers=h).status_code == 403
    rules = api.http.get("/v1/derivation-rules", headers=admin).json()["items"]
    assert any(r["id"] == "pediatrician.dosing" for r in rules)
    r = api.http.put("/v1/settings/inference", headers=admin, json={"mode": "active", "threshold": 2})
    assert r.json() == {"mode": "active", "threshold": 2, "suppress_days": 30.0}
    assert api.http.put("/v1/settings/inference", headers=admin, json={"threshold": 0}).status_code == 422
    assert api.http.put("/v1/settings/inference", headers=admin, json={"mode": "sometimes"}).status_code == 422
    p = api.http.post("/v1/procedures", headers=admin, json={"text": "先给发票表", "user_id": "w1",
                                                              "evidence": ["s1"]}).json()
    r = api.http.post(f"/v1/procedures/{p['id']}/review", headers=admin, json={"decision": "approve"})
    assert r.status_code == 422 and "evaluation" in r.text
    r = api.http.post(f"/v1/procedures/{p['id']}/review", headers=admin,
                      json={"decision": "approve", "evaluation": {"name": "e2e", "passed": True}})
    assert r.json()["status"] == "approved"
    assert api.http.post("/v1/procedures", headers=admin, json={"text": "x", "user_id": "13812345678"}
                         ).status_code == 422  # identifiers carry no personal data
    # the Python client: same operations, same results
    from fastapi.testclient import TestClient

    c = Client("http://testserver", api.key_a, http=TestClient(api.app))
    um = c.model(None, "w1", now=T0 + 6)
    assert isinstance(um, UserModel) and um.procedures[0]["id"] == p["id"]
    out = c.record_signal(None, "w1", "reply_format", "table", agree=False, now=T0 + 7)
    assert out["contradict"] == 1


# -- LLM proposals land as proposed; a person approves ---------------------------------------------------


def test_llm_proposes_procedures_and_rules_for_review() -> None:
    from fake_openai import FakeOpenAI, malformed, reply_json
    from usermem import ProviderError
    from usermem.config import load_settings

    with FakeOpenAI() as server:
        m = Memory(settings=load_settings(env={}, llm_base_url=server.base_url, llm_model="fake", embedder="none"))
        try:
            sid = m.open_session("acme", "b1", now=T0)
            m.close_session(sid, [{"role": "user", "content": "账单问题我每次都要先看发票明细，电话 13812345678"}],
                            tenant="acme", now=T0 + 60)
            server.script(reply_json({"procedures": [
                {"text": "账单问题先给发票明细表", "evidence": [sid]},
                {"text": "an unsupported idea", "evidence": ["no-such-session"]},  # cites nothing shown: dropped
                {"text": "call 13812345678 first", "evidence": [sid]}]}))  # personal data: dropped
            proposed = m.suggest_procedures("acme", "b1", now=T0 + 100)
            assert [p["text"] for p in proposed] == ["账单问题先给发票明细表"]
            assert proposed[0]["status"] == "proposed" and proposed[0]["proposed_by"] == "llm"
            assert proposed[0]["evidence"] == [{"session": sid}]
            sent = server.chat_requests()[-1]["messages"][1]["content"]
            assert "13812345678" not in sent  # the sessions shown to the LLM are redacted
            assert "<AGENT_PROCEDURES>" not in m.assemble("acme", "b1", "我的账单", now=T0 + 101).prompt
            server.script(reply_json({"rules": [
                {"id": "engineer.jargon", "when": {"occupation": ["工程师", "engineer"]}, "then_key": "expertise",
                 "then_zh": "熟悉技术术语", "then_en": "comfortable with technical terms"},
                {"id": "bad.field", "when": {"no_such_field": ["x"]}, "then_key": "x", "then_zh": "x", "then_en": ""}]}))
            rules = m.suggest_derivation_rules("acme", now=T0 + 200)
            assert [(r["id"], r["status"], r["proposed_by"]) for r in rules] == [("engineer.jargon", "proposed", "llm")]
            m.write("acme", "b1", "fact", "occupation", "engineer", source="user_confirmed", now=T0 + 300)
            assert m.refresh_derived("acme", "b1", now=T0 + 301) == []  # proposed: not used until approved
            server.script(malformed("{"), malformed("{"))
            with pytest.raises(ProviderError):
                m.suggest_derivation_rules("acme", now=T0 + 400)
        finally:
            m.close()
    plain = Memory(settings=load_settings(env={}, embedder="none"))
    try:
        with pytest.raises(ValidationError):
            plain.suggest_procedures("acme", "b1")
    finally:
        plain.close()
