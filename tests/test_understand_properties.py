"""Invariants over arbitrary input (hypothesis): plans stay in the whitelist, extraction never crashes or
invents fields, assembled blocks cannot be broken by any stored value."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.model import Kind, MemoryRecord, ScoredMemory, Source
from usermem.policy.contracts import ContractSet
from usermem.understand.assemble import assemble
from usermem.understand.extract import Extractor, extractable
from usermem.understand.plan import DeterministicPlanner, RecallPlan

CONTRACTS = ContractSet()
PLANNER = DeterministicPlanner(CONTRACTS.with_contract(CONTRACTS.get("email").evolve(enabled=False)))
EXTRACTOR = Extractor(CONTRACTS)
ENABLED = {c.key for c in PLANNER.contracts.enabled()}
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200) | st.sampled_from([
    "上次说的方案A能再发我邮箱吗？", "以后都用Markdown", "别打电话", "I'm allergic to peanuts", "我喜欢川菜，哈哈"])


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_plan_fields_are_always_enabled_contracts(text: str) -> None:
    plan = PLANNER.plan(text)
    assert set(plan.fields) <= ENABLED and "email" not in plan.fields
    assert plan.memory_priority in ("high", "medium", "low")
    assert len(set(plan.fields)) == len(plan.fields)


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=6))
def test_extraction_proposes_only_whitelisted_fields(messages: list[str]) -> None:
    allowed = extractable(CONTRACTS)
    for c in EXTRACTOR.extract(messages, use_llm=False):
        assert c.key in allowed and c.kind is allowed[c.key].kind
        assert 0 <= c.confidence <= 1 and c.value not in ("", None, [])


@settings(max_examples=300, deadline=None)
@given(st.recursive(TEXT | st.integers() | st.booleans(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=6))
def test_no_value_can_break_out_of_its_tag(value) -> None:
    rec = MemoryRecord(id="x", tenant="t", user_id="u", kind=Kind.FACT, key="note", value=value,
                       source=Source.USER_CONFIRMED, confidence=1.0, importance=0.9, created_at=0.0)
    a = assemble(RecallPlan(("note",), (), False, "medium"), [ScoredMemory(rec, 0.9, 1.0)], budget_tokens=32_000)
    tags = re.findall(r"</?[A-Z_]+>", a.prompt)
    assert tags == ["<USER_FACTS>", "</USER_FACTS>", "<USER_PREFERENCES>", "</USER_PREFERENCES>"]
    assert a.prompt.count("<") == 4 and a.prompt.count(">") == 4
    body = re.match(r"<USER_FACTS>(.*)</USER_FACTS>", a.prompt, re.S)
    assert body is not None
    facts = json.loads(body.group(1))
    assert facts == ({} if "note" in a.withheld else {"note": value})


# --- the filters (issue 13): a positive utterance rewritten as a question, a hypothetical or another
# person's statement never yields a candidate -----------------------------------------------------------

POSITIVE_ZH = ["我住在杭州", "我对花生过敏", "我是一名儿科医生", "我吃素", "我在成都上班", "我喜欢爬山",
               "以后报告都用Markdown格式", "我的邮箱是 zw@example.com", "我老家是湖南衡阳的", "我有高血压"]
POSITIVE_EN = ["I live in Toronto", "I'm allergic to peanuts", "I'm a nurse", "I'm vegan", "I work out of Lisbon",
               "I really enjoy science fiction", "I have type 2 diabetes", "I grew up in Cork"]
ZH_FORMS = [lambda s: f"如果{s}，会怎么样？", lambda s: f"假如{s}的话", lambda s: f"{s}吗？", lambda s: f"要是{s}就好了",
            lambda s: "我朋友说" + s.replace("我", "他", 1), lambda s: s.replace("我", "我同事", 1) if "我" in s else "我同事说" + s,
            lambda s: f"“{s}”——这是小说主角的台词"]
EN_FORMS = [lambda s: f"If {s[0].lower() + s[1:]}, what would change?", lambda s: f"What if {s[0].lower() + s[1:]}?",
            lambda s: f"Do you think {s[0].lower() + s[1:]}?",
            lambda s: "My friend says he " + s.split(" ", 1)[1].replace("'m", "is").replace("am ", "is ")
            if s.startswith("I ") else "My friend says " + s,
            lambda s: f'Translate: "{s}"']


def _third_person_en(s: str) -> str:
    s = s.replace("I'm", "My sister is").replace("I have", "My sister has").replace("I ", "My sister ", 1)
    return s


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(POSITIVE_ZH), st.sampled_from(ZH_FORMS))
def test_rewritten_chinese_positive_yields_nothing(utterance: str, form) -> None:
    assert EXTRACTOR.extract([utterance], use_llm=False), utterance  # the positive form is a memory
    rewritten = form(utterance)
    assert EXTRACTOR.extract([rewritten], use_llm=False) == [], rewritten


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(POSITIVE_EN), st.sampled_from([*EN_FORMS, _third_person_en]))
def test_rewritten_english_positive_yields_nothing(utterance: str, form) -> None:
    assert EXTRACTOR.extract([utterance], use_llm=False), utterance
    rewritten = form(utterance)
    assert EXTRACTOR.extract([rewritten], use_llm=False) == [], rewritten


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POSITIVE_ZH + POSITIVE_EN))
def test_values_are_the_users_words(utterance: str) -> None:
    """Every extracted value is a span of what the user wrote (a Chinese value stays Chinese)."""
    from usermem.understand.text import normalise

    for c in EXTRACTOR.extract([utterance], use_llm=False):
        for v in c.value if isinstance(c.value, list) else [c.value]:
            assert normalise(str(v)) in normalise(utterance), (utterance, c)


# --- the same property over the bank: every single-clause positive of the train split that yields a candidate
# yields none once asked, supposed, reported as someone else's or quoted -----------------------------------

def _bank_sources() -> list[tuple[str, str]]:
    from usermem.understand import bank

    inner = re.compile(r"[.!?。！？;；\n]|[,，、—–:：]|[\"“”]")
    out = []
    for it in bank.load_items():
        if it.split != "train" or it.negative is not None or len(it.turns) != 1:
            continue
        s = it.turns[0][1].strip().rstrip(".!。！")
        if not inner.search(s) and EXTRACTOR.extract([s], use_llm=False):
            out.append((it.lang, s))
    return out


def _she(s: str) -> str:
    for pat, rep in ((r"\bI'm\b", "she's"), (r"\bI've\b", "she's"), (r"\bI'd\b", "she'd"), (r"\bI'll\b", "she'll"),
                     (r"\bI am\b", "she is"), (r"\bI\b", "she"), (r"\bmy\b", "her"), (r"\bMy\b", "Her"), (r"\bme\b", "her"),
                     (r"\bmine\b", "hers")):
        s = re.sub(pat, rep, s)
    return s


def _low(s: str) -> str:
    return s[0].lower() + s[1:]


BANK_SOURCES = _bank_sources()
BANK_ZH_FORMS = [lambda s: f"如果{s}，会怎么样？", lambda s: f"假如{s}的话，你会怎么安排？", lambda s: f"你觉得{s}吗？",
                 lambda s: f"要是{s}就好了", lambda s: "我朋友说" + s.replace("我", "她"),
                 lambda s: "我同事说" + s.replace("我", "他"), lambda s: f"“{s}”——这是小说主角的台词"]
BANK_EN_FORMS = [lambda s: f"If {_low(s)}, what would change?", lambda s: f"What if {_low(s)}?",
                 lambda s: f"Do you think {_low(s)}?", lambda s: "My friend told me " + _she(s),
                 lambda s: f'Translate this line from the novel: "{s}"', lambda s: f"Suppose {_low(s)} — what then?"]


def test_the_bank_gives_enough_sources() -> None:
    assert len(BANK_SOURCES) >= 60 and {lang for lang, _ in BANK_SOURCES} == {"zh", "en"}


@settings(max_examples=250, deadline=None)
@given(st.sampled_from(BANK_SOURCES), st.integers(min_value=0, max_value=6))
def test_rewritten_bank_positive_yields_nothing(source: tuple[str, str], which: int) -> None:
    lang, utterance = source
    forms = BANK_ZH_FORMS if lang == "zh" else BANK_EN_FORMS
    rewritten = forms[which % len(forms)](utterance)
    assert EXTRACTOR.extract([rewritten], use_llm=False) == [], rewritten


# More ways of making a statement someone else's, a wish or a question (issue 13): another person as the
# subject ("我姐…", "my sister's…"), hearsay, "someday"/"梦想" wishes, "is it true that…". The subject's
# family words may still be the user's relatives ("我姐说…带孩子" does not say whose child): family fields
# are left out of this check, every other field must yield nothing.
def _sister(s: str) -> str:
    x = _she(s)
    if re.match(r"^she\b", x):
        return "my sister" + x[3:]
    if re.match(r"^her\b", x):
        return "my sister's" + x[3:]
    return "My sister says " + x


MORE_ZH_FORMS = [lambda s: s.replace("我", "我姐", 1) if s.startswith("我") else "我姐说" + s.replace("我", "她"),
                 lambda s: f"{s}是真的吗？", lambda s: f"万一{s}呢", lambda s: f"听说{s.replace('我', '他')}",
                 lambda s: f"梦想有一天{s}"]
MORE_EN_FORMS = [_sister, lambda s: f"Is it true that {_low(s)}?", lambda s: f"Imagine {_low(s)}.",
                 lambda s: f"Someday {_low(s)}, maybe.", lambda s: f"My boss thinks {_she(s)}",
                 lambda s: f"Would it matter if {_low(s)}?"]


def _non_family(rewritten: str) -> list[Any]:
    """What the extractor still takes from a rewritten statement, family members aside (a third-party or
    hypothetical rewrite may still say, truly, that the user has a son)."""
    return [c for c in EXTRACTOR.extract([rewritten], use_llm=False) if c.key not in ("spouse", "children", "pets")]


def _leaks(zh_forms: Sequence[Callable[[str], str]], en_forms: Sequence[Callable[[str], str]]
           ) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Every bank source rewritten by every form of its language, with what each rewrite still yields."""
    leaks = []
    for lang, utterance in BANK_SOURCES:
        for form in zh_forms if lang == "zh" else en_forms:
            rewritten = form(utterance)
            if got := _non_family(rewritten):
                leaks.append((rewritten, [(c.key, c.value) for c in got]))
    return leaks


@settings(max_examples=250, deadline=None)
@given(st.sampled_from(BANK_SOURCES), st.integers(min_value=0, max_value=5))
def test_more_rewrites_of_bank_positives_yield_nothing(source: tuple[str, str], which: int) -> None:
    lang, utterance = source
    forms = MORE_ZH_FORMS if lang == "zh" else MORE_EN_FORMS
    rewritten = forms[which % len(forms)](utterance)
    got = _non_family(rewritten)
    assert got == [], rewritten


# Grammar-level rewrites added in the fourth extraction round: someone of the user's circle as the subject
# (a role the user might also hold, "我们组长…", "my coach…"), a subject carried over to the next clause
# ("我室友最近很忙，对花生过敏": the allergy is the roommate's), a recall question ("…来着？") and English
# suppositions ("Say …", "Let's say …", "Assuming …").
def _drop_subject(s: str) -> str:
    return s[1:] if s.startswith("我") and len(s) > 2 else s.replace("我", "她")


ROUND4_ZH_FORMS = [lambda s: "我们组长" + s[1:] if s.startswith("我") else "我们组长说" + s.replace("我", "他"),
                   lambda s: "我室友最近很忙，" + _drop_subject(s), lambda s: f"{s}来着？",
                   lambda s: "我导师" + s[1:] if s.startswith("我") else "我导师觉得" + s.replace("我", "他")]
def _suppose(lead: str, tail: str) -> object:
    """A supposition reads as one only about a statement ("Say I'm vegan"); a request ("text me on …") is asked
    whether it would matter instead."""
    return lambda s: (f"{lead}{_low(s)}{tail}" if re.match(r"(?i)(?:i|i'm|i've|i'd|my)\b", s)
                      else f"Would it matter if {_low(s)}?")


ROUND4_EN_FORMS = [lambda s: "My coach " + _she(s)[4:] if _she(s).startswith("she ") else "My coach says " + _she(s),
                   _suppose("Say ", " — what then?"), _suppose("Let's say ", "."),
                   _suppose("Assuming ", ", how would that work?")]


@settings(max_examples=250, deadline=None)
@given(st.sampled_from(BANK_SOURCES), st.integers(min_value=0, max_value=3))
def test_round4_rewrites_of_bank_positives_yield_nothing(source: tuple[str, str], which: int) -> None:
    lang, utterance = source
    forms = ROUND4_ZH_FORMS if lang == "zh" else ROUND4_EN_FORMS
    rewritten = forms[which % len(forms)](utterance)
    got = _non_family(rewritten)
    assert got == [], rewritten


def test_round4_rewrites_cover_every_bank_source() -> None:
    """The same rewrites, exhaustively (hypothesis samples; this walks every source once per form)."""
    assert _leaks(ROUND4_ZH_FORMS, ROUND4_EN_FORMS) == []


# Marker kinds added in the fifth extraction round (the "nonuser" pass over the trap items of train, dev, more-dev
# and the supplement): suppositions and make-believe the filters lacked (假使 / 若是 / 但愿 / 该多好 / 假装 / 做梦,
# "in another life", "picture this", "hypothetically speaking", "let's play a game where"), questions with neither a
# question mark nor 吗 (难道 / 你觉得, "do you think", "any idea whether"), a sentence taken back or disowned at its
# end (哈哈开玩笑的 / 做梦中, "apparently", "in my dreams", "or so my sister says"), hearsay ("rumour has it") and
# the user denying they said it (我可没说 / "I never said"). Each form leaked on most sources before that round.
ROUND5_ZH_FORMS = [lambda s: f"假使{s}，你会怎么建议", lambda s: f"若是{s}，会怎样", lambda s: f"但愿{s}",
                   lambda s: f"{s}该多好", lambda s: f"假装{s}", lambda s: f"做梦都想{s}",
                   lambda s: f"难道{s}", lambda s: f"你觉得{s}", lambda s: f"{s}，哈哈开玩笑的",
                   lambda s: f"{s}（做梦中）", lambda s: f"我可没说{s}"]
ROUND5_EN_FORMS = [lambda s: f"In another life {_low(s)}", lambda s: f"Picture this: {_low(s)}",
                   lambda s: f"Hypothetically speaking, {_low(s)}", lambda s: f"Let's play a game where {_low(s)}",
                   lambda s: f"do you think {_low(s)}", lambda s: f"any idea whether {_low(s)}",
                   lambda s: f"{s}, apparently", lambda s: f"{s}... in my dreams", lambda s: f"{s}, or so my sister says",
                   lambda s: f"Rumour has it {_low(s)}", lambda s: f"I never said {_low(s)}"]


def test_round5_rewrites_cover_every_bank_source() -> None:
    assert _leaks(ROUND5_ZH_FORMS, ROUND5_EN_FORMS) == []


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(POSITIVE_ZH + POSITIVE_EN), st.integers(min_value=0, max_value=10))
def test_round5_rewrites_of_the_handwritten_positives_yield_nothing(utterance: str, which: int) -> None:
    forms = ROUND5_EN_FORMS if utterance.isascii() else ROUND5_ZH_FORMS
    rewritten = forms[which % len(forms)](utterance)
    got = _non_family(rewritten)
    assert got == [], rewritten


# The same round's scoping fixes, each with the fact that must survive beside it: a denied clause leaves the next
# one the user's, a weakened taste verb blocks a like but not the cat, a denied value is no value, a request made
# for this once sets nothing lasting, a standing word said of someone else does not make the user's one-off request
# standing, a generic person ("吃素的人") is not the user, a noun introducing a quotation ("一句话是“…”") names it.
@pytest.mark.parametrize(("messages", "expected"), [
    (["我并不喜欢喝咖啡，只是为了提神"], {}),
    (["我其实不怎么喜欢爬山，都是被朋友拖去的"], {}),
    (["I'm not really into hiking"], {}),
    (["我喜欢爬山"], {"hobbies": "爬山"}),
    (["I'm not a student anymore, I graduated ages ago"], {}),
    (["I never said I was vegan, just that I like oat milk"], {"likes": "oat milk"}),
    (["for today's email only, make it very formal"], {}),
    (["这一次发我邮箱就行"], {}),
    (["以后都发我邮箱"], {"contact_channel": "邮箱"}),
    (["reply in Spanish this once, I want to forward it"], {}),
    (["明天我在广州，帮我找个吃早茶的地方"], {}),
    (["领导喜欢看PPT，这次汇报帮我做成PPT"], {}),
    (["吃素的人一般怎么补充蛋白质啊"], {}),
    (["我叫天才，来自天才星球，哈哈开玩笑的"], {}),
    (["my hobby is collecting unread books, apparently"], {}),
    (["I'm a nurse, no kidding"], {"occupation": "nurse"}),
    (["我住在杭州。我的邮箱是 zw@example.com，哈哈开玩笑的"], {"city": "杭州"}),
    (["我最喜欢的一句话是“我思故我在”"], {}),
    (["以后都简洁点"], {"reply_length": "简洁"}),
])
def test_round5_scoping(messages: list[str], expected: dict[str, str]) -> None:
    got = {c.key: c.value for c in EXTRACTOR.extract(messages, use_llm=False)}
    assert got == expected


# Sixth round (the "nonuser2" pass over the trap items of dev, more-dev, train, more-train and the train-only files):
# clause-level cues the filters lacked, each with what must survive beside it — a role reached through the user's
# unit as the subject ("我们部门经理…", "our department head…") carried to the next clause, an errand for someone else
# carried the same way ("让我给他订机票，要商务舱"), more people of the user's circle (同桌 / 发小, deskmate / bestie),
# anyone of it as the speaker ("my classmate says…"; the speaker may be the user's spouse), what the user cannot
# have ("不能养猫"), idleness offered as a hobby and impossible skills (躺平 / 摸鱼, "fluent in sarcasm"), an offer to
# answer questions ("ask me anything about…"), a relative's word inside another's title ("孩子他爸") and a comparison
# ("像小孩").
@pytest.mark.parametrize(("messages", "expected"), [
    (["我们项目组组长是广东人，每天六点起床打羽毛球"], {}),
    (["我们部门经理住在苏州，我住在上海"], {"city": "上海"}),
    (["our department head lives in Leeds and cycles in every day"], {}),
    (["My department head is vegan, I'm not"], {}),
    (["我老板要去深圳开会，让我给他订机票，要商务舱"], {}),
    (["my boss flies to Berlin on Monday, I have to book him a hotel, somewhere quiet with a gym"], {}),
    (["我发小在深圳做程序员"], {}),
    (["my deskmate is vegetarian"], {}),
    (["my bestie lives in Paris and I live in Lyon"], {"city": "Lyon"}),
    (["my classmate says Slack is the best way to reach her"], {}),
    (["my missus says I snore like a tractor"], {"spouse": "my missus"}),
    (["我住的公寓不能养猫"], {}),
    (["房东不让养狗，我住在杭州"], {"city": "杭州"}),
    (["我的爱好是摸鱼，我在杭州上班"], {"work_city": "杭州"}),
    (["my hobby is napping, professionally"], {}),
    (["我喜欢爬山"], {"hobbies": "爬山"}),
    (["I speak fluent sarcasm and a bit of German"], {}),
    (["阴阳怪气十级，英语四级"], {"languages_spoken": "英语"}),
    (["ask me anything about Formula 1, I'm obsessed"], {}),
    (["孩子他爸又出差了，我一个人带两个娃"], {"children": "两个娃"}),
    (["我家猫叫起来像小孩哭"], {"pets": "猫"}),
    (["我老公是做金融的"], {"spouse": "老公"}),
])
def test_round6_scoping(messages: list[str], expected: dict[str, str]) -> None:
    got = {c.key: c.value for c in EXTRACTOR.extract(messages, use_llm=False)}
    assert got == expected


# A later turn that gives an earlier value to someone else or takes it back removes it, with or without a correction
# marker; the value it keeps is untouched.
@pytest.mark.parametrize(("messages", "gone", "kept"), [
    (["我家兔子叫雪球", "不对，雪球是我表姐家的，我家的叫奶糖"], "雪球", None),
    (["my dog is called Biscuit", "sorry, Biscuit is my neighbour's. ours is Mango"], "Biscuit", None),
    (["我对芒果过敏", "说错了，不是芒果，是菠萝"], "芒果", None),
    (["I'm allergic to codeine", "wait, it's morphine, codeine's fine"], "codeine", None),
    (["我对芒果过敏", "芒果过敏挺严重的，吃一口就起疹子"], None, "芒果"),
    (["I'm allergic to codeine", "codeine is the worst, I end up in hospital"], None, "codeine"),
])
def test_round6_a_later_turn_disowns_an_earlier_value(messages: list[str], gone: str | None, kept: str | None) -> None:
    values = [str(v) for c in EXTRACTOR.extract(messages, use_llm=False)
              for v in (c.value if isinstance(c.value, list) else [c.value])]
    if gone is not None:
        assert not any(gone.lower() in v.lower() for v in values), values
    if kept is not None:
        assert kept in values, values


def _she_any(s: str) -> str:
    """`_she` for sources that write a lower-case "i" too ("i'm dyslexic so…")."""
    return _she(re.sub(r"\bi\b", "I", s))


def _circle(role: str) -> Callable[[str], str]:
    return lambda s: f"{role} {_she_any(s)[4:]}" if _she_any(s).startswith("she ") else f"{role} says {_she_any(s)}"


ROUND6_ZH_FORMS = [lambda s: "我们部门经理" + s[1:] if s.startswith("我") else "我们部门经理说" + s.replace("我", "他"),
                   lambda s: "我老板下周出差，让我给他订酒店，" + _drop_subject(s),
                   lambda s: "我同桌" + s[1:] if s.startswith("我") else "我同桌说" + s.replace("我", "她"),
                   lambda s: "我发小" + s[1:] if s.startswith("我") else "我发小觉得" + s.replace("我", "他")]
ROUND6_EN_FORMS = [_circle("My department head"), _circle("My classmate"), _circle("My bestie"),
                   lambda s: "Book her a table for Friday, " + _she_any(s)]


def test_round6_rewrites_cover_every_bank_source() -> None:
    assert _leaks(ROUND6_ZH_FORMS, ROUND6_EN_FORMS) == []


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POSITIVE_ZH + POSITIVE_EN), st.integers(min_value=0, max_value=3))
def test_round6_rewrites_of_the_handwritten_positives_yield_nothing(utterance: str, which: int) -> None:
    forms = ROUND6_EN_FORMS if utterance.isascii() else ROUND6_ZH_FORMS
    rewritten = forms[which % len(forms)](utterance)
    assert _non_family(rewritten) == [], rewritten


# --- everyday facts said in passing (issue 13's examples) and what must not come with them ---------------------

@pytest.mark.parametrize(("messages", "expected"), [
    (["我在华为工作", "我跳槽到腾讯了"], {"employer": "腾讯"}),
    (["I work at Shell", "I've just joined Ørsted"], {"employer": "Ørsted"}),
    (["老样子，拿铁"], {"usual_order": "拿铁"}),
    (["帮我订个会议室，下班还得去接女儿放学"], {"children": "女儿"}),
    (["我家那只橘猫又把花盆打翻了"], {"pets": "橘猫"}),
    (["我这边是UTC+7，曼谷"], {"timezone": "UTC+7", "city": "曼谷"}),
    (["我姐在伦敦读书，时差七个小时"], {}),
    (["我同学的狗叫旺仔，超级胖"], {}),
    (["我老公想养条狗，我还在考虑"], {"spouse": "老公"}),
    (["one day I'd love to live in Kyoto"], {}),
    (["我对早起严重过敏"], {}),
    (["我们部门的老规矩，开完会要用飞书发纪要"], {}),
    (["我吃素"], {"diet": "吃素"}),
    (["I'm vegan"], {"diet": "vegan"}),
    (["我不吃猪肉，回民"], {"diet": "不吃猪肉"}),
    (["我不是素食主义者，只是最近不想吃肉"], {}),
    (["周一到周五上午找我都行"], {"contact_hours": "周一到周五上午"}),
    (["pls don't message me on sundays, family day"], {"contact_hours": "don't message me on sundays"}),
    (["ping me on Teams, that's where I live all day"], {"contact_channel": "Teams"}),
    (["我要给儿子办生日会", "六岁，他叫豆豆"], {"children": "豆豆"}),
    (["I'm a software engineer at Shopify"], {"occupation": "software engineer", "employer": "Shopify"}),
    (["I'm staying at Hilton"], {}),
    (["I moved to Chicago"], {"city": "Chicago"}),
    (["我以前住武汉，现在在成都"], {"city": "成都"}),
    (["I'm from Leeds originally"], {"hometown": "Leeds"}),
    (["my wife's from Cork, I'm from Dublin"], {"spouse": "my wife", "hometown": "Dublin"}),
])
def test_everyday_facts_and_their_traps(messages: list[str], expected: dict[str, str]) -> None:
    got = {c.key: c.value for c in EXTRACTOR.extract(messages, use_llm=False)}
    assert got == expected


# Natural statements about other people, questions, wishes and quotes, written for this test (not from the
# bank): none may yield a fact about the user beyond who their spouse or children are.
OTHERS_SAY = [
    '我妹妹在杭州上班，最近老加班',
    '我爸对青霉素过敏，上次差点出事',
    '我闺蜜是素食主义者，聚餐好难选',
    '要是我能在三亚住就好了',
    '你是程序员吗？',
    '如果我换到上海工作，通勤会不会很久',
    '我同事养了一只柯基，叫可乐',
    '我老板喜欢Word格式的报告',
    '他说他住在深圳',
    '“我是医生”——这是电视剧里的台词',
    '我朋友的女儿叫朵朵，今年三岁',
    '我表哥在字节跳动上班',
    '我室友不吃辣',
    '客户要求用PDF发过去',
    '我儿子的同学对花生过敏',
    'My brother lives in Denver and works at Boeing',
    'My mom is allergic to shellfish',
    "If I lived in Tokyo I'd eat sushi every day",
    'Are you a vegetarian?',
    "My coworker's cat is called Mochi",
    'My boss wants everything in PowerPoint',
    "She said she's a nurse in Leeds",
    'My neighbour works as a plumber',
    'What if I moved to Berlin?',
    'Does my wife like sushi?',
    'My friend Tom is vegan',
    '"I live in Paris" is the first line of the song',
    "My daughter's teacher is called Mrs Green",
    'My roommate is from Lagos',
    'One day I want to work at Google',
    '我想搬去成都住',
    '我爸妈住在老家南昌',
    '我女朋友在腾讯上班',
    '我哥的狗叫旺财',
    '他们公司在陆家嘴',
    'Our nanny only speaks Spanish',
    "My sister's birthday is on May 3rd",
    "My husband's email is dan@example.com",
    "My dad's phone number is 0412 555 001",
    '我妈的邮箱是 mama@example.com',
    '我老婆打算下个月去日本出差',
    '换作是我，我会选北京',
    '你知道哪里有好吃的川菜',
    '假设我是一名律师，你会怎么回答',
    '我不住在北京了',
    "I don't live in London anymore",
    "I'm not a teacher, my wife is",
    '小说里的主角是个厨师，住在重庆',
    '我爷爷以前是铁路工人',
    '他对虾过敏，帮他点餐注意一下',
    '我朋友说她最喜欢吃榴莲',
    "My kids' school is in Camden",
    'My colleague prefers short answers',
    'My son wants a puppy for his birthday',
    "If my boss asks, I'm vegetarian today",
    "Let's pretend I'm a pirate called Jack",
    'My mum lives in Glasgow',
    'How do I say "I\'m allergic to nuts" in French?',
    'Translate this: 我住在上海',
    '帮我翻译：我是一名护士',
    'I wonder whether I should move to Lisbon',
    "My flatmate's cat is named Pickles",
    '我老板明天要去深圳',
    '他是做销售的，人挺好',
    '老王家的狗又叫了一晚上',
    '我邻居在阿里上班',
    '我们领导特别喜欢用PPT',
    'Is it cheaper to live in Austin or Denver?',
    'My best friend is a dentist in Cork',
    'Someone told me I look like a teacher',
    '我姐夫在华为做工程师',
    '我前男友是做设计的',
    'Should I become a nurse?',
    '我想学日语，你推荐什么教材',
    "My dad's going vegan this month",
    '我女儿说她以后想当医生',
    'The guy next door works at Tesla',
    "My partner's parents live in Perth",
    '我表妹对猫毛过敏',
    'Can you call me a taxi?',
]


@pytest.mark.parametrize("text", OTHERS_SAY)
def test_what_others_say_is_not_the_users(text: str) -> None:
    got = [c for c in EXTRACTOR.extract([text], use_llm=False) if c.key not in ("spouse", "children")]
    assert got == [], text


# Jokes, others' plans, requests for fiction, what films/news/articles say, the user's past and maybes,
# questions and a correction that hands the fact to someone else (one list per conversation; written for this test).
OTHERS_CONVERSATIONS = [
    ['我是秦始皇，哈哈开玩笑的'],
    ["I'm basically a professional napper lol"],
    ['我的职业是睡觉😂'],
    ['My job? Professional overthinker haha'],
    ['我老公下周要去成都开会'],
    ['My wife is planning to learn Italian'],
    ['我儿子打算明年去英国读书'],
    ['Our team is moving to the Berlin office next year'],
    ['我住在上海', '不对，我说错了，是我哥住在上海'],
    ["I'm a doctor", 'just kidding, I wish'],
    ['听说杭州的房价又涨了'],
    ['They say Lisbon is the new Berlin'],
    ['有人说我长得像演员'],
    ['What would you call a cat that lives in Paris?'],
    ['写一个故事：主角叫李雷，是一名医生，对花生过敏'],
    ['Write a poem about a vegan chef from Rome'],
    ['帮我给我妈写个生日祝福，她喜欢养花'],
    ['Could you recommend a gift for my dad? He loves fishing'],
    ['我同学问我要不要一起去西藏'],
    ["My friend asked if I'm allergic to anything"],
    ['你喜欢猫还是狗？'],
    ['Do you think I should get a cat?'],
    ['能不能帮我查一下北京的天气'],
    ['Which is better for a vegetarian, Thai or Indian food?'],
    ['If you were me, would you move to Canada?'],
    ['我梦见自己住在海边'],
    ['My character in the game is an elf archer named Lira'],
    ['我们公司的客户大多在深圳'],
    ["The client's office is in Manchester"],
    ['她老公是做金融的'],
    ['电影里那个住在纽约的律师好帅'],
    ['看了个纪录片，讲一个素食厨师在京都开店'],
    ['我刚读完一本书，主人公对猫过敏'],
    ['新闻说北京明天下雪'],
    ['Taylor Swift lives in Nashville, right?'],
    ['The article says vegans live longer'],
    ['我们老师今天说他要去上海开会'],
    ['同桌的妈妈是护士'],
    ['隔壁小孩又在弹钢琴了'],
    ["I'd hate to live in Dubai, way too hot"],
    ["Maybe someday I'll own a dog"],
    ['我以前住在武汉，后来搬走了'],
    ['I used to be a teacher'],
    ['我小时候对牛奶过敏，现在好了'],
    ['We might get a cat next year'],
    ["I'm thinking of becoming a vegetarian"],
    ['可能明年会去深圳工作吧，还没定'],
    ['我有个朋友在迪拜当飞行员'],
    ["My uncle's dog bit the postman"],
    ['她家的猫叫煤球'],
    ['Do you know any vegan restaurants in Leeds?'],
    ['Who is the CEO of Tesla?'],
    ['谁是周杰伦的老婆？'],
    ['北京哪家烤鸭最好吃？'],
    ['Are cats allergic to chocolate?'],
    ['我应该换工作吗？'],
    ['Shall I move to Bristol or Bath?'],
    ['要不要养只狗呢'],
    ["What's the best city for a software engineer?"],
    ['My grandma used to say "I\'m too old for this"'],
    ["Lisa is vegan so we're doing a veggie menu"],
    ['小张住在苏州，每天坐高铁来上班'],
    ["Max, the neighbour's dog, barked all night"],
    ['他叫我老李，其实我不姓李'],
    ['她说「我对花粉过敏」'],
    ['Mark said: "I work at Google now"'],
    ['问一下，素食者能吃鸡蛋吗'],
    ['你觉得我适合当老师吗'],
    ['我要是住在海边就好了'],
    ['给我讲讲住在冰岛是什么感觉'],
    ['我男朋友的猫叫芝麻'],
    ['Is Paris a good place to live for a designer?'],
    ['Which is healthier, vegan or keto?'],
    ['My coworker Jane is allergic to peanuts'],
    ["Sam's wife is a doctor in Oslo"],
    ['我老婆的同事在苹果上班'],
    ["I'm writing a novel where the hero lives in Cairo"],
    ['角色设定：我是一个住在长安的剑客'],
    ['我同学下个月要搬去西安'],
    ['Translate "I am a vegetarian" into German'],
    ['我侄子在读大学，学计算机的'],
    ['Ben from accounting is from Toronto'],
    ['My guests are arriving from Madrid tomorrow'],
    ['My date is a nurse from Leeds'],
    ['有个客户说他对海鲜过敏'],
    ['教练说我应该多吃蛋白质'],
    ['Does it rain a lot in Seattle?'],
    ['我儿子的老师叫王芳'],
    ['My manager works from Singapore'],
    ["We're hosting a couple from Melbourne this weekend"],
    ['我老板喜欢简短的汇报'],
    ['my boss likes bullet points, so format it that way for him'],
    ['客户要英文版的'],
    ['帮我用英文写一封给客户的邮件'],
    ['这个回答能不能短一点'],
    ['can you make this one shorter?'],
    ['今天用英文回我吧，练练口语'],
    ['妈妈说她喜欢吃甜的'],
    ['我女朋友喜欢周杰伦'],
    ['他们都叫他老李'],
    ['大家都叫她小甜甜'],
    ['she goes by Jo'],
    ["my sister's email is amy@example.com, send her the invite"],
    ['联系我弟：13800001111'],
    ['我家邻居是四川人'],
    ['我闺蜜在学日语'],
    ['our baby is due in May'],
    ['假如我是你，我会选择上海'],
    ['Would a vegetarian eat fish?'],
    ['为什么猫不能吃巧克力'],
    ['这家店的老板是广东人'],
    ['我们组新来的实习生对花生过敏'],
    ['我爸退休前是医生'],
    ["He's a lawyer in Boston, my cousin"],
]


@pytest.mark.parametrize("messages", OTHERS_CONVERSATIONS)
def test_jokes_plans_fiction_and_handed_over_corrections_yield_nothing(messages: list[str]) -> None:
    got = [c for c in EXTRACTOR.extract(messages, use_llm=False) if c.key not in ("spouse", "children")]
    assert got == [], messages
