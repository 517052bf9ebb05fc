"""Right tagger spans that used to be dropped (issue 13): plausibility of typed fields, rule-vs-span arbitration,
span boundaries; zh and en."""

from __future__ import annotations

import pytest

from usermem.policy.contracts import ContractSet
from usermem.understand.extract import (
    PatternExtractor,
    _cut_word,
    _plausible,
    _sentence_end,
    _trim,
    _whole_words,
    _zh_whole_words,
    extractable,
)
from usermem.understand.tagger import Span
from usermem.understand.text import Message


@pytest.mark.parametrize(("key", "value"), [
    ("address", "广州市天河区体育西路103号维多利广场B座1208"),  # a block letter and a room number are no password
    ("address", "7 Rue des Lilas, 69003 Lyon"),
    ("address", "55 Elm Row, Edinburgh EH7 4AH"),
    ("budget", "一千五"),
    ("budget", "两千出头"),
    ("budget", "under fifty bucks"),
    ("budget", "price isn't an issue"),
    ("timezone", "GMT"),
    ("timezone", "Pacific"),
    ("timezone", "比北京慢一个小时"),
    ("timezone", "8 hours behind London"),
    ("birthday", "腊月初八"),
    ("birthday", "Christmas Eve"),
    ("city", "São Paulo"),
    ("city", "Bath"),
    ("work_city", "西二旗"),
    ("spouse", "我家那位"),
    ("children", "Lucía"),
    ("allergy", "蟹"),
])
def test_typed_values_in_any_script_are_plausible(key: str, value: str) -> None:
    assert _plausible(key, value)


@pytest.mark.parametrize(("key", "value"), [
    ("email", "wen"),  # a local part cut from its domain
    ("email", "chenlu@starlab"),
    ("children", "my"),
    ("spouse", "the"),
    ("address", "Apt 7B"),  # a fragment without a street
    ("address", "since 2019"),
    ("work_city", "字节"),  # a company, not a place
    ("city", "home"),
    ("city", "downtown"),
    ("allergy", "我"),
    ("likes", "的"),
    ("occupation", "医"),
    ("name", "Tr0ub4dor&3"),
    ("preferred_name", "秦始皇"),
    ("budget", "a lot"),
    ("birthday", "someday"),
    ("timezone", "soon"),
])
def test_the_checks_still_keep_out_what_they_were_for(key: str, value: str) -> None:
    assert not _plausible(key, value)


# --- a tagger span against a rule hit on the same words -------------------------------------------------------

class _Fields:
    def __init__(self, probabilities: dict[str, float]) -> None:
        self.p = probabilities

    def probabilities(self, text: str) -> dict[str, float]:
        return dict(self.p)


class _Tagger:
    """One span where the words are, with a stage-1 field model; Platt scaling off."""

    def __init__(self, field: str, words: str, probability: float, fields: dict[str, float]) -> None:
        self.field, self.words, self.probability = field, words, probability
        self.field_model = _Fields(fields)
        self.platt = (1.0, 0.0)

    def spans(self, text: str) -> list[Span]:
        at = text.find(self.words)
        return [Span(self.field, self.words, at, at + len(self.words), self.probability)] if at >= 0 else []


def _found(text: str, tagger: _Tagger | None) -> set[tuple[str, str]]:
    ex = PatternExtractor(extractable(ContractSet()), tagger=tagger, tagger_threshold=0.3, templates=False)
    return {(c.key, str(c.value)) for c in ex._message(Message("user", text, 0))}


@pytest.mark.parametrize(("text", "rule", "span"), [
    ("初一十五吃素，其他时候无所谓", ("diet", "吃素"), ("diet", "初一十五吃素")),
    ("I play the cello in an amateur orchestra on Thursdays", ("hobbies", "cello"), ("hobbies", "play the cello")),
])
def test_a_span_holding_a_much_shorter_rule_value_of_its_field_takes_the_words(text, rule, span) -> None:
    assert rule in _found(text, None)  # what the rules alone say
    got = _found(text, _Tagger(span[0], span[1], 0.7, {span[0]: 0.9}))
    assert span in got and rule not in got


@pytest.mark.parametrize(("text", "rule", "span"), [
    ("我是素食者", ("diet", "素食"), ("diet", "素食者")),  # the rule's value is most of the span: the rule stands
    ("I'm allergic to peanuts", ("allergy", "peanuts"), ("allergy", "to peanuts")),
])
def test_a_span_barely_longer_than_the_rule_value_leaves_the_rule(text, rule, span) -> None:
    got = _found(text, _Tagger(span[0], span[1], 0.9, {span[0]: 0.9}))
    assert rule in got and span not in got


@pytest.mark.parametrize(("text", "rule", "span"), [
    ("我在字节上班，base 杭州", ("city", "杭州"), ("work_city", "杭州")),
    ("I'm an Android dev at a fintech in Lagos", ("city", "Lagos"), ("work_city", "Lagos")),
    ("汇报我喜欢Keynote做的，好看", ("likes", "Keynote做"), ("report_format", "Keynote")),
])
def test_the_field_model_decides_between_fields_on_the_same_words(text, rule, span) -> None:
    assert rule in _found(text, None)
    # the message is about the span's field and not the rule's: the span's field
    got = _found(text, _Tagger(span[0], span[1], 0.8, {span[0]: 0.95, rule[0]: 0.1}))
    assert span in got and rule not in got
    # the message is about both (or the span's field is unsure): the rule stands
    for fields in ({span[0]: 0.95, rule[0]: 0.6}, {span[0]: 0.4, rule[0]: 0.1}):
        got = _found(text, _Tagger(span[0], span[1], 0.8, fields))
        assert rule in got and span not in got


# --- boundaries ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "raw", "trimmed"), [
    ("diet", "pescatarian —", "pescatarian"),
    ("children", "朵朵——", "朵朵"),
    ("children", "Lucía (6", "Lucía"),  # the span ran into an aside
    ("pets", "三花）今天又不理", "三花"),  # the span ran out of one
    ("contact_hours", "during school runs (8–9 and 3–4)", "during school runs (8–9 and 3–4)"),  # closed
    ("diet", "(vegan)", "vegan"),
    ("phone", "604) 555-0134", "604) 555-0134"),  # an area code's bracket
])
def test_a_span_loses_edge_dashes_and_what_follows_an_unclosed_bracket(key, raw, trimmed) -> None:
    assert _trim(raw, key) == trimmed


@pytest.mark.parametrize(("text", "cut", "whole"), [
    ("we moved to Austin in May", "moved to Aust", "moved to Austin"),
    ("my husband and I are both vegetarians", "my husb", "my husband"),
    ("我住在杭州", "杭", "杭"),  # Chinese characters are words of their own
])
def test_a_proposal_by_position_ends_on_a_whole_word(text, cut, whole) -> None:
    start = text.index(cut)
    a, b = _whole_words(text, start, start + len(cut))
    assert text[a:b] == whole


def test_a_rule_value_cut_inside_a_word_loses_the_cut_word() -> None:
    text = "I'm a huge fan of Studio Ghibli and anything with hand-drawn animation"
    value = "Studio Ghibli and anything with hand-dra"
    assert _cut_word(value, text, text.index(value)) == "Studio Ghibli and anything with"
    assert _cut_word("Studio Ghibli", text, text.index("Studio")) == "Studio Ghibli"
    assert _cut_word("吃素", "初一十五吃素", 4) == "吃素"


# --- a Chinese span cut inside a word by the character tagger ------------------------------------------------

@pytest.mark.parametrize(("text", "span", "value", "not_value"), [
    # the first character of 上班时间 was left outside: the span takes it back
    ("上班时间别打我电话，晚上七点以后随时可以", ("contact_hours", "班时间别打我电话"), "上班时间别打我电话",
     "班时间别打我电话"),
    # the last character of 政策 was left outside
    ("新闻我最关注房地产政策", ("news_topics", "房地产政"), "房地产政策", "房地产政"),
])
def test_a_chinese_span_cut_one_character_inside_a_word_is_widened_to_it(text, span, value, not_value) -> None:
    got = _found(text, _Tagger(span[0], span[1], 0.9, {span[0]: 0.9}))
    assert (span[0], value) in got and (span[0], not_value) not in got


@pytest.mark.parametrize(("text", "words", "expected"), [
    ("上班时间别打我电话", "班时间别打我电话", "上班时间别打我电话"),
    ("新闻我最关注房地产政策", "房地产政", "房地产政策"),
    ("有事给我发邮件", "发邮件", "发邮件"),  # "给我|发" leaves two characters outside: another word, kept out
    ("我只关心房地产政策", "房地产政策", "房地产政策"),  # already whole words
    ("I usually get a chicken shawarma wrap", "hicken shawarma wra", "hicken shawarma wra"),  # Latin: not here
])
def test_chinese_word_edges_of_a_span(text, words, expected) -> None:
    at = text.index(words)
    s, e = _zh_whole_words(text, at, at + len(words))
    assert text[s:e] == expected


# --- two names of a multi-valued field joined by a conjunction ----------------------------------------------

@pytest.mark.parametrize(("text", "span", "second"), [
    ("our twins Ava and Noah start secondary school in September", ("children", "Ava"), "Noah"),
    ("我家两只狗，Lucky和Coco，都是柯基", ("pets", "Lucky"), "Coco"),
    ("我家两只狗，Lucky或者Coco总有一只在叫", ("pets", "Lucky"), "Coco"),
])
def test_a_name_joined_to_a_found_name_of_a_multi_valued_field_is_a_second_value(text, span, second) -> None:
    got = _found(text, _Tagger(span[0], span[1], 0.9, {span[0]: 0.9}))
    assert span in got and (span[0], second) in got


@pytest.mark.parametrize(("text", "span", "not_second"), [
    ("my daughter Ava and Noah's mum are best friends", ("children", "Ava"), "Noah"),  # not a name of a list
    ("我家的狗叫Lucky，和我一起住", ("pets", "Lucky"), "和我一起住"),
])
def test_a_joined_word_is_no_second_value_unless_it_is_a_name_of_a_multi_valued_field(text, span, not_second) -> None:
    got = _found(text, _Tagger(span[0], span[1], 0.9, {span[0]: 0.9}))
    assert span in got and not any(k == span[0] and v.startswith(not_second) for k, v in got)


# --- contact channels listed in one statement: one value, a list ------------------------------------------------

@pytest.mark.parametrize(("text", "tagger", "expected"), [
    ("我在国外，国内的微信不常登，联系我用WhatsApp或者Line", None, ["WhatsApp", "Line"]),  # the rule found WhatsApp
    ("I use WhatsApp and Telegram", _Tagger("contact_channel", "WhatsApp", 0.9, {"contact_channel": 0.9}),
     ["WhatsApp", "Telegram"]),
    ("reach me by email or Slack", None, ["email", "Slack"]),
    ("有事发微信或者钉钉都行", _Tagger("contact_channel", "微信或者钉钉", 0.9, {"contact_channel": 0.9}), ["微信", "钉钉"]),
    ("微信、钉钉、邮件都能找到我", _Tagger("contact_channel", "微信", 0.9, {"contact_channel": 0.9}),
     ["微信", "钉钉", "邮件"]),
])
def test_channels_joined_by_a_conjunction_are_one_list_value(text, tagger, expected) -> None:
    ex = PatternExtractor(extractable(ContractSet()), tagger=tagger, tagger_threshold=0.3, templates=False)
    [got] = [c for c in ex.extract([Message("user", text, 0)]) if c.key == "contact_channel"]
    assert got.value == expected
    assert isinstance(got.canonical, list) and len(got.canonical) == len(expected)


@pytest.mark.parametrize("text", [
    "紧急情况打电话，其他的钉钉留言就好",  # two channels for two purposes, not a list
    "联系我用微信，和同事沟通用钉钉",  # a conjunction that joins clauses, not channel words
    "text me on WhatsApp or phone if it's urgent",  # a device word joined after is no channel on its own
])
def test_channels_not_joined_as_a_list_stay_single(text) -> None:
    ex = PatternExtractor(extractable(ContractSet()), tagger=None, templates=False)
    assert all(not isinstance(c.value, list) for c in ex.extract([Message("user", text, 0)]) if c.key == "contact_channel")


def test_a_listed_channel_value_is_stored_as_one_list_and_replaced_by_a_later_statement(mem) -> None:
    t0 = 1_790_000_000.0
    mem.understanding.ingest("acme", "u-ch", [{"role": "user", "content": "联系我用WhatsApp或者Line"}], now=t0,
                             use_llm=False, detect_pushback=False)
    [rec] = [r for r in mem.recall("acme", "u-ch", k=10, now=t0 + 1) if r.key == "contact_channel"]
    assert rec.value == ["WhatsApp", "Line"] and rec.canonical == ["whatsapp", "line"]
    mem.understanding.ingest("acme", "u-ch", [{"role": "user", "content": "以后只用邮件联系我"}], now=t0 + 10,
                             use_llm=False, detect_pushback=False)
    [rec] = [r for r in mem.recall("acme", "u-ch", k=10, now=t0 + 11) if r.key == "contact_channel"]
    assert rec.value == "邮件"  # a channel is a preference that changes, not a collection that grows


# --- a value of a collection field that lists items: the items ----------------------------------------------------

@pytest.mark.parametrize(("text", "key", "items"), [
    ("我对花粉和尘螨过敏", "allergy", ["花粉", "尘螨"]),
    ("我会说英语、粤语和普通话", "languages_spoken", ["英语", "粤语", "普通话"]),
    # the rule's value was cut by its length cap after "with": the cut part is no item
    ("I'm a huge fan of Studio Ghibli and anything with hand-drawn animation", "likes", ["Studio Ghibli"]),
])
def test_a_collection_value_joined_by_conjunctions_is_split_into_items(text, key, items) -> None:
    ex = PatternExtractor(extractable(ContractSet()), tagger=None, templates=False)
    [got] = [c for c in ex.extract([Message("user", text, 0)]) if c.key == key]
    assert (got.value if isinstance(got.value, list) else [got.value]) == items


@pytest.mark.parametrize(("text", "span"), [
    ("我喜欢吃和牛", ("likes", "吃和牛")),  # 和 inside a word (和牛) joins nothing
    ("出差只住全季或者亚朵", ("travel_preferences", "只住全季或者亚朵")),  # one travel choice, not two
])
def test_a_value_whose_conjunction_joins_no_items_stays_whole(text, span) -> None:
    got = _found(text, _Tagger(span[0], span[1], 0.9, {span[0]: 0.9}))
    assert span in got


# --- a learned span that runs into the next sentence ends at the sentence end --------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("a splash of oat milk these days. stomach issues", "a splash of oat milk these days"),
    ("一周只吃两次肉。其他时候吃素", "一周只吃两次肉"),
    ("vegan now! no exceptions", "vegan now"),
    # no sentence end: a dot without a space after it, or after a title, an abbreviation or an initial
    ("mail me at zhou.yan@example.com now", "mail me at zhou.yan@example.com now"),
    ("send as plain .txt please", "send as plain .txt please"),
    ("I'm Dr. Amara Obi", "I'm Dr. Amara Obi"),
    ("a big J. K. Rowling fan", "a big J. K. Rowling fan"),
])
def test_a_span_ends_at_the_first_sentence_end_inside_it(text, expected) -> None:
    assert text[:_sentence_end(text, 0, len(text))] == expected


def test_a_tagger_span_over_two_sentences_keeps_the_first() -> None:
    text = "well, a splash of oat milk these days. stomach issues"
    got = _found(text, _Tagger("usual_order", "a splash of oat milk these days. stomach issues", 0.9,
                               {"usual_order": 0.9}))
    assert ("usual_order", "a splash of oat milk these days") in got


# --- a bare 的话 marks a topic ("as for …"), not a supposition -------------------------------------------------------

@pytest.mark.parametrize(("text", "hypothetical"), [
    ("新闻的话我只关心房地产政策", False),  # "as for news": a topic
    ("预算的话，一个人一晚三百左右都行", False),
    ("如果下雨的话我就不去了", True),  # the condition word still makes it one
    ("要是我养猫的话，租房会不会很麻烦", True),
    ("假如我住在北京的话", True),
])
def test_a_bare_de_hua_is_a_topic_marker_not_a_supposition(text, hypothetical) -> None:
    from usermem.understand.filters import reasons

    assert ("hypothetical" in reasons(text, "", text)) is hypothetical


def test_a_value_after_a_topic_de_hua_is_kept() -> None:
    text = "新闻的话我只关心新能源车，别的都不用推"
    got = _found(text, _Tagger("news_topics", "新能源车", 0.9, {"news_topics": 0.9}))
    assert ("news_topics", "新能源车") in got
    assert not _found("如果有新闻的话我只关心新能源车", _Tagger("news_topics", "新能源车", 0.9, {"news_topics": 0.9}))
