"""Tenth round of general phrasings (issue 13), from the errors of the sixth writer's trap-heavy set
(`utterances_sixth.jsonl`, a readable set): each case with its positive control, through the shipped extractor."""

from __future__ import annotations

import pytest

from usermem import Memory
from usermem.config import load_settings

_M = Memory("sqlite:///:memory:", settings=load_settings(env={}, embedder="none"))


def _got(text: str) -> set[tuple[str, str]]:
    out = set()
    for c in _M.understanding.extract([{"role": "user", "content": text}], tenant="t", use_llm=False):
        for v in c.value if isinstance(c.value, list) else [c.value]:
            out.add((c.key, str(v)))
    return out


def _keys(text: str) -> set[str]:
    return {k for k, _ in _got(text)}


@pytest.mark.parametrize("trap, field", [
    ("日语N1到底难不难，零基础一年能过吗", "languages_spoken"),   # A-not-A: a question without a mark
    ("下辈子想当个旅行摄影师，天天满世界跑", "occupation"),        # next life
    ("等退休了我就搬去三亚，天天在海边遛弯", "city"),              # a plan for retirement
    ("你扮演一个住在重庆的出租车司机，跟我用重庆话聊聊天", "city"),  # role-play
    ("组里新来的实习生说转正以后要搬到苏州住", "city"),            # an intern's plan, reported
    ("我哋公司老细话下年要搬去深圳前海", "city"),                  # Cantonese 话 = said
    ("Our CTO moved to Austin last year and now all meetings are at 4pm", "city"),
    ("我不吃素哈，别老给我推素菜", "diet"),                       # a negator right before the value
    ("我没孩子，母婴的广告能不能别推了", "children"),
    ("别叫我老师了，我不是当老师的", "preferred_name"),            # a form of address refused
])
def test_a_trap_stores_nothing_for_its_field(trap: str, field: str) -> None:
    assert field not in _keys(trap)


@pytest.mark.parametrize("said, field, value", [
    ("我住在三亚，天天在海边遛弯", "city", "三亚"),
    ("我是旅行摄影师，天天满世界跑", "occupation", "旅行摄影师"),
    ("我吃素，这周的晚饭帮我排个菜单", "diet", "吃素"),
    ("家里两个孩子，周末带他们去公园", "children", "孩子"),
    ("叫我老李就行", "preferred_name", "老李"),
    ("I moved to Austin last year", "city", "Austin"),
    ("我不吃香菜", "dislikes", "香菜"),
])
def test_the_plain_statement_is_still_taken(said: str, field: str, value: str) -> None:
    assert any(k == field and value in v for k, v in _got(said)), _got(said)


@pytest.mark.parametrize("said, expected, not_expected", [
    # the workplace between the place and the work verb
    ("我在深圳一家做无人机的公司上班，工作日基本没空", ("work_city", "深圳"), ("occupation", "无人机")),
    ("单位在天津滨海新区，我周末才回北京的家", ("work_city", "天津"), ("city", "天津")),
    ("我们公司在广州天河，我自己住番禺", ("work_city", "广州"), ("city", "广州")),      # 我们公司在: the user's workplace
    ("我喺香港返工，屋企喺深圳", ("work_city", "香港"), ("city", "香港")),             # Cantonese 喺 / 返工 / 屋企
    ("我喺香港返工，屋企喺深圳", ("city", "深圳"), ("work_city", "深圳")),
    # a place the rule read from the cue beside it keeps its field against a learned span of another place field
    ("I live in Jersey City and take the PATH to my job in Manhattan", ("city", "Jersey City"), ("city", "Manhattan")),
    ("我是高雄人啦，现在在新竹科学园区上班", ("hometown", "高雄"), ("city", "高雄人")),
])
def test_places_by_their_cues(said: str, expected: tuple[str, str], not_expected: tuple[str, str]) -> None:
    got = _got(said)
    assert expected in got and not_expected not in got, got


def test_a_bare_in_still_yields_to_the_learned_field() -> None:
    """"a fintech in Lagos": no cue beside the place — the message is about work, so it is the work city."""
    assert ("work_city", "Lagos") in _got("I'm an Android dev at a fintech in Lagos")


@pytest.mark.parametrize("said, expected", [
    ("我巨爱螺蛳粉，这附近哪家正宗？", ("likes", "螺蛳粉")),
    ("My native place is Coimbatore but currently staying in Hyderabad only", ("hometown", "Coimbatore")),
    ("My native place is Coimbatore but currently staying in Hyderabad only", ("city", "Hyderabad")),
    ("I was born 1989-11-22 if the form needs it", ("birthday", "1989-11-22")),
])
def test_everyday_phrasings_of_the_sixth_writer(said: str, expected: tuple[str, str]) -> None:
    assert expected in _got(said), _got(said)


def test_an_iso_birthday_keeps_its_year_as_canonical() -> None:
    [c] = [c for c in _M.understanding.extract(["I was born 1989-11-22"], tenant="t", use_llm=False)
           if c.key == "birthday"]
    assert c.canonical == "1989-11-22"


def test_a_correction_opened_with_an_apology_replaces_the_value() -> None:
    got = {(c.key, str(c.value)) for c in _M.understanding.extract(
        [{"role": "user", "content": "我对花生过敏"}, {"role": "user", "content": "不好意思，是腰果，花生其实没事"}],
        tenant="t", use_llm=False)}
    assert ("allergy", "腰果") in got and ("allergy", "花生") not in got


def test_a_hotel_stay_is_still_no_home() -> None:
    assert "city" not in _keys("I'm staying at the Hilton in Paris")


@pytest.mark.parametrize("said, expected", [
    ("I work at Barclays||Correction — I moved to Monzo in June", ("employer", "Monzo")),
    ("I live in Leeds but I'm in Edinburgh for the festival", ("city", "Leeds")),
])
def test_one_offs_and_time_tails(said: str, expected: tuple[str, str]) -> None:
    turns = [{"role": "user", "content": t} for t in said.split("||")]
    got = {(c.key, str(c.value)) for c in _M.understanding.extract(turns, tenant="t", use_llm=False)}
    assert expected in got and not any(k == expected[0] and v != expected[1] for k, v in got), got


def test_a_one_off_said_for_the_whole_sentence_covers_every_clause() -> None:
    assert "report_format" not in _keys("for this report only, do it as a PowerPoint")
    assert "report_format" in _keys("do my reports as PowerPoint from now on")


def test_alis_the_company() -> None:
    assert ("employer", "阿里") in _got("我在阿里上班") and "work_city" not in _keys("我在阿里上班")


def test_languages_joined_by_gen_or_tong_are_items_and_gen_elsewhere_joins_nothing() -> None:
    got = _got("我会说闽南话跟普通话，日语考过N2")
    assert {("languages_spoken", "闽南话"), ("languages_spoken", "普通话")} <= got
    assert ("languages_spoken", "广东话") in _got("我讲广东话同英文")


def test_a_medication_loses_its_frequency_and_a_channel_the_user_does_not_read_is_not_theirs() -> None:
    [med] = [v for k, v in _got("I'm on levothyroxine every morning, can I take it with my iron tablet?")
             if k == "medical_history"]
    assert med == "levothyroxine"
    got = _got("有事钉钉找我，微信下班后我是不看的")
    assert ("contact_channel", "钉钉") in got and ("contact_channel", "微信") not in got


def test_an_allergy_introduced_with_here_is_no_job_and_a_firm_before_its_city_is_the_employer() -> None:
    got = _got("sesame allergy here so hummus is off the table")
    assert "occupation" not in {k for k, _ in got}
    assert ("occupation", "night nurse") in _got("night nurse here, need a sleep schedule")
    got = _got("I am working in Infosys Bangalore since 2019, kindly help me prepare for my appraisal")
    assert ("employer", "Infosys") in got and ("work_city", "Bangalore") in got
    assert "employer" not in _keys("我是上海人，但现在在东京工作")


def test_a_correction_without_le_and_a_graduation_still_ahead() -> None:
    turns = [{"role": "user", "content": "我在读大三"}, {"role": "user", "content": "哦说错，已经大四了，马上毕业"}]
    got = {(c.key, str(c.value)) for c in _M.understanding.extract(turns, tenant="t", use_llm=False)}
    assert got == {("education", "大四")}, got
    assert "education" not in _keys("我快毕业了")


def test_a_usual_order_without_where_it_is_fetched() -> None:
    assert ("usual_order", "生椰拿铁少冰") in _got("瑞幸老样子，生椰拿铁少冰，到公司楼下自提")


@pytest.mark.parametrize("said, field", [
    ("我不是广东人啊，只是在广州读过书", "city"),           # 读过 / 住过 / 待过: a past stay
    ("我能说俄语，在圣彼得堡待过三年", "city"),
    ("我下周在成都，有啥必吃的", "city"),                  # 下周: a visit
])
def test_past_stays_and_next_weeks_visits_are_no_home(said: str, field: str) -> None:
    assert field not in _keys(said)


def test_grew_up_in_and_hours_for_being_reached() -> None:
    assert ("hometown", "Nairobi") in _got("I grew up in Nairobi and came to Manchester for my PhD")
    assert "contact_hours" in _keys("I'm free for calls Tuesday and Thursday afternoons")
    assert "contact_hours" not in _keys("I'm on call every other weekend")


def test_a_country_or_an_address_is_no_employer() -> None:
    assert "employer" not in _keys("以后请用日语回复我，我在日本工作，同事会看")
    assert "employer" not in _keys("I'm at Blk 214 Bishan St 23 #05-112")
    assert ("employer", "Google") in _got("I'm at Google now")


@pytest.mark.parametrize("said, value, canonical", [
    ("I'm after a used car, budget around ten grand", "around ten grand", None),
    ("rent budget is 1,800 a month max", "1,800 a month max", "1800"),
    ("keep it under ₹15,000 please", "under ₹15,000", "15000 INR"),
    ("budget 5 grand", "5 grand", "5000"),
])
def test_budgets_in_words_with_thousands_commas_and_rupees(said: str, value: str, canonical: str | None) -> None:
    [c] = [c for c in _M.understanding.extract([said], tenant="t", use_llm=False) if c.key == "budget"]
    assert (c.value, c.canonical) == (value, canonical)
