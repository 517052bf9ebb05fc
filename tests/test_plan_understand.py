"""Recall plans: deterministic recogniser, whitelist, LLM mode against the fake OpenAI server."""

from __future__ import annotations

import pytest

from fake_openai import FakeOpenAI, http_error, malformed, reply_json, slow
from usermem import Memory, ValidationError
from usermem.config import load_settings
from usermem.evals import extraction as evals

T0 = 1_790_000_000.0


def _llm_memory(server: FakeOpenAI, **kw) -> Memory:
    settings = load_settings(env={}, llm_base_url=server.base_url, llm_model="fake", llm_plan_timeout=kw.pop(
        "timeout", 2.0), llm_retries=kw.pop("retries", 1))
    return Memory(settings=settings)


@pytest.mark.parametrize(("text", "facts", "prefs", "context", "priority"), [
    ("上次说的方案A能再发我邮箱吗？", ["email"], [], True, "high"),
    ("Can you email me the plan we discussed last time?", ["email"], [], True, "high"),
    # the learned field model adds birthday and budget to what the cues find (threshold chosen on the bank's dev split)
    ("帮我订一个生日蛋糕送到家", ["address", "allergy", "birthday"], ["likes", "dislikes", "budget"], False, "high"),
    ("Do I have any allergies?", ["allergy"], [], False, "high"),
    ("我对什么过敏来着？", ["allergy"], [], False, "high"),
    ("回复简短一点就行", [], ["reply_length"], False, "medium"),
    ("你好", [], [], False, "low"),
    ("以后给我打电话之前先发短信", ["phone"], ["contact", "contact_channel"], False, "medium"),
])
def test_deterministic_plan(mem: Memory, text, facts, prefs, context, priority) -> None:
    plan = mem.plan("acme", "u1", text)
    assert set(plan) == {"fact_recall", "preference_recall", "context_recall", "memory_priority"}
    assert sorted(plan["fact_recall"]) == sorted(facts)
    assert sorted(plan["preference_recall"]) == sorted(prefs)
    assert plan["context_recall"] is context
    assert plan["memory_priority"] == priority


def test_plan_ignores_stored_memories_and_disabled_fields(mem: Memory) -> None:
    mem.write("acme", "u1", "fact", "email", "a@example.com", source="user_confirmed", now=T0)
    before = mem.plan("acme", "u1", "你好")
    assert before["fact_recall"] == []  # what is stored does not change the plan
    if hasattr(mem, "disable_field"):
        mem.disable_field("acme", "email", now=T0)
        assert "email" not in mem.plan("acme", "u1", "把结果发邮件给我")["fact_recall"]
        assert "email" in mem.plan("other", "u1", "把结果发邮件给我")["fact_recall"]


def test_plan_rejects_bad_input(mem: Memory) -> None:
    with pytest.raises(ValidationError):
        mem.plan("acme", "u1", "x" * 30_000)


def test_plan_eval_small_variant(mem: Memory) -> None:
    rows = evals.load_plan_set()
    assert len(rows) >= 80 and {r["lang"] for r in rows} == {"zh", "en"}
    result = evals.eval_plan(lambda t: mem.understanding.plan("acme", "u1", t, use_llm=False), rows)
    # cues + the learned model: the model trades a little precision for recall on this older set
    assert result["all"]["precision"] >= 0.85 and result["all"]["f1"] >= 0.88
    assert result["split:test"]["recall"] >= 0.8  # held-out utterances
    assert result["all"]["context_accuracy"] >= 0.9


def test_llm_plan_is_whitelisted_and_never_shown_memories() -> None:
    with FakeOpenAI() as server:
        server.script(reply_json({"fact_recall": ["email", "home_address_guess", "reply_length"],
                                  "preference_recall": ["report_format", "invented"], "context_recall": True,
                                  "memory_priority": "high", "suggestion": "collect the user's address"}))
        m = _llm_memory(server)
        m.write("acme", "u1", "fact", "email", "secret-marker@example.com", source="user_confirmed", now=T0)
        plan = m.understanding.plan("acme", "u1", "上次说的方案A能再发我邮箱吗？")
        assert plan.mode == "llm"
        assert plan.fact_recall == ("email",)
        assert set(plan.preference_recall) == {"reply_length", "report_format"}  # moved to its kind's bucket
        sent = server.chat_requests()[0]
        text = str(sent["messages"])
        assert "secret-marker" not in text and "上次说的方案A" in text
        assert sent["response_format"]["type"] == "json_schema"
        m.close()


@pytest.mark.parametrize("bad", [malformed(), http_error(500), reply_json({"fact_recall": "email"}),
                                 reply_json({"memory_priority": "urgent", "fact_recall": [],
                                             "preference_recall": [], "context_recall": False})])
def test_llm_failures_fall_back_to_deterministic(bad) -> None:
    with FakeOpenAI(default=bad) as server:
        m = _llm_memory(server, retries=1)
        plan = m.understanding.plan("acme", "u1", "上次说的方案A能再发我邮箱吗？")
        assert plan.mode == "deterministic" and plan.fact_recall == ("email",)
        assert len(server.chat_requests()) == 2  # one retry, bounded
        assert m.understanding.llm.stats.fallbacks == 1
        m.close()


def test_llm_retry_after_malformed_then_valid() -> None:
    with FakeOpenAI() as server:
        server.script(malformed("not json at all"), reply_json({"fact_recall": ["city"], "preference_recall": [],
                                                               "context_recall": False,
                                                               "memory_priority": "medium"}))
        m = _llm_memory(server, retries=1)
        plan = m.understanding.plan("acme", "u1", "今天天气怎么样？")
        assert plan.mode == "llm" and plan.fact_recall == ("city",)
        m.close()


def test_llm_slow_reply_times_out_and_falls_back() -> None:
    ok = reply_json({"fact_recall": [], "preference_recall": [], "context_recall": False, "memory_priority": "low"})
    with FakeOpenAI(default=slow(ok, 1.5)) as server:
        m = _llm_memory(server, timeout=0.3, retries=2)
        plan = m.understanding.plan("acme", "u1", "上次说的方案A能再发我邮箱吗？")
        assert plan.mode == "deterministic" and plan.memory_priority == "high"
        assert m.understanding.llm.stats.timeouts == 1
        assert len(server.chat_requests()) == 1  # no retry past the deadline
        m.close()


def test_server_without_json_schema_gets_json_object() -> None:
    good = reply_json({"fact_recall": ["city"], "preference_recall": [], "context_recall": False,
                       "memory_priority": "medium"})
    with FakeOpenAI() as server:
        server.script(http_error(400, "response_format json_schema is not supported"), good)
        m = _llm_memory(server, retries=1)
        assert m.understanding.plan("acme", "u1", "天气").mode == "llm"
        assert server.chat_requests()[1]["response_format"] == {"type": "json_object"}
        m.close()


def test_unreachable_endpoint_falls_back() -> None:
    import socket

    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = load_settings(env={}, llm_base_url=f"http://127.0.0.1:{port}/v1", llm_model="fake", llm_retries=1)
    m = Memory(settings=settings)
    assert m.plan("acme", "u1", "把结果发邮件给我")["fact_recall"] == ["email"]
    assert m.understanding.llm.stats.http_errors == 2 and m.understanding.llm.stats.fallbacks == 1
    assert m.extract(["我花生过敏"])[0].method == "pattern"
    m.close()


def test_bank_plan_eval_reports_dev_and_test_apart() -> None:
    from usermem.policy.contracts import ContractSet
    from usermem.understand import bank
    from usermem.understand.plan import DeterministicPlanner

    queries = bank.load_plan_queries()
    assert {q.split for q in queries} == {"train", "dev", "test"}
    small = [q for q in queries if q.split in ("dev", "test")]
    with_model = evals.eval_bank_plan(DeterministicPlanner(ContractSet()).plan, small)
    rules_only = evals.eval_bank_plan(DeterministicPlanner(ContractSet(), model=None).plan, small)
    assert set(with_model) == {"dev", "test"} and with_model["test"]["n"] > 0
    for split in ("dev", "test"):
        assert with_model[split]["recall"] > rules_only[split]["recall"]  # the model adds coverage
        assert 0 <= with_model[split]["precision"] <= 1 and with_model[split]["fields"]
