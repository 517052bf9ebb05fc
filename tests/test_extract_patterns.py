"""General phrasings the no-LLM extractor used to miss or mislabel (issue 13, seventh and eighth rounds); zh and en,
written fresh for these tests (not taken from the bank)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.policy.contracts import ContractSet
from usermem.understand import rules
from usermem.understand.extract import PatternExtractor, _plausible, extractable
from usermem.understand.filters import REPLY_FIELDS, allowed, reasons, reply_request
from usermem.understand.text import Message

_EX = PatternExtractor(extractable(ContractSet()))


@pytest.fixture(scope="module")
def ex() -> PatternExtractor:
    return _EX


def _got(ex: PatternExtractor, *turns: str) -> dict[str, object]:
    msgs = [Message("user", t, n) for n, t in enumerate(turns)]
    return {c.key: c.value for c in ex.extract(msgs)}


@pytest.mark.parametrize(("text", "value"), [
    ("我是听障人士，开会的时候麻烦打字给我", "听障人士"),
    ("我右腿是假肢，爬山就算了", "假肢"),
    ("I'm on the autism spectrum, so literal instructions help me", "on the autism spectrum"),
    ("I walk with a cane these days, so pick hotels with lifts", "walk with a cane"),
])
def test_a_disability_is_accessibility_not_medical_history(ex: PatternExtractor, text: str, value: str) -> None:
    got = _got(ex, text)
    assert got.get("accessibility") == value
    assert "medical_history" not in got


@pytest.mark.parametrize("value", ["自闭症谱系", "左手装了义肢", "autistic", "legally blind", "uses crutches"])
def test_a_medical_value_naming_a_disability_is_re_keyed(value: str) -> None:
    assert rules.disability(value)


@pytest.mark.parametrize("value", ["糖尿病", "高血压", "asthma", "a bad back", "migraines"])
def test_an_illness_stays_medical_history(value: str) -> None:
    assert not rules.disability(value)


@pytest.mark.parametrize("text", ["我弟弟是聋人，他想学手语", "my sister is autistic and hates loud places"])
def test_someone_elses_disability_is_not_the_users(ex: PatternExtractor, text: str) -> None:
    got = _got(ex, text)
    assert "accessibility" not in got and "medical_history" not in got


@pytest.mark.parametrize(("text", "key", "value"), [
    ("你说话能不能幽默一点？", "reply_tone", "幽默一点"),
    ("以后能用英文回我吗？", "language", "英文"),
    ("能不能每次都用表格回复？", "reply_format", "表格"),
    ("could you reply in German from now on?", "language", "German"),
    ("can you be a bit more blunt with me?", "reply_tone", "more blunt"),
])
def test_a_request_for_a_way_of_replying_put_as_a_question_is_a_preference(
        ex: PatternExtractor, text: str, key: str, value: str) -> None:
    assert _got(ex, text).get(key) == value


@pytest.mark.parametrize("text", [
    "你能用英文回答吗？我就是好奇",  # curiosity about the assistant, no request
    "can you speak Korean? just curious",
    "你会说日语吗？",
    "能不能帮我查下我是不是对花生过敏？",  # a question about a fact stays a question
    "can you tell me if I live in Paris?",
])
def test_a_question_about_the_assistant_or_a_fact_states_nothing(ex: PatternExtractor, text: str) -> None:
    assert _got(ex, text) == {}


@given(st.sampled_from(["你能用{}回答吗？", "能不能用{}跟我说？", "can you answer in {}?", "could you reply in {}?"]),
       st.sampled_from(["英文", "日语", "粤语", "French", "German", "Spanish"]),
       st.sampled_from(["就是好奇问问", "我就是好奇", "just curious", "just wondering", "do you speak it?"]))
@settings(max_examples=40, deadline=None)
def test_a_reply_request_with_curiosity_anywhere_in_the_message_is_a_question(template: str, language: str,
                                                                              curious: str) -> None:
    text = template.format(language) + " " + curious
    assert not reply_request(text.split("?")[0].split("？")[0] + "？", text)
    got = {c.key for c in _EX.extract([Message("user", text, 0)])}
    assert not got & REPLY_FIELDS


@given(st.sampled_from(["能不能{}？", "can you {}?", "could you {}?"]),
       st.sampled_from(["告诉我我是不是住在北京", "帮我看看我对什么过敏", "tell me whether I'm allergic to nuts",
                        "check if my email is a@example.com", "remind me what my job is"]))
@settings(max_examples=20, deadline=None)
def test_a_request_put_as_a_question_frees_only_reply_style_fields(template: str, body: str) -> None:
    why = reasons(template.format(body), "", template.format(body))
    assert "question" in why
    for key in ("city", "allergy", "email", "occupation", "medical_history"):
        assert not allowed(key, why)
    got = {c.key for c in _EX.extract([Message("user", template.format(body), 0)])}
    assert not got & {"city", "allergy", "email", "occupation"}


@pytest.mark.parametrize(("text", "key"), [
    ("我视力不太好，回答简短一点", "reply_length"),
    ("keep it brief, I check these on my watch", "reply_length"),
])
def test_a_reply_request_with_a_lasting_reason_about_the_user_is_a_standing_preference(
        ex: PatternExtractor, text: str, key: str) -> None:
    assert key in _got(ex, text)


@pytest.mark.parametrize("text", ["再精简一点", "精简一点", "太长了，再短一点，我看不过来", "make this one shorter, I'm in a hurry"])
def test_a_request_about_the_reply_in_front_stays_a_signal(ex: PatternExtractor, text: str) -> None:
    assert "reply_length" not in _got(ex, text)


@pytest.mark.parametrize(("text", "value"), [
    ("快递到了打我手机13812345678就行", "13812345678"),
    ("联系电话021-64001234，白天都在", "021-64001234"),
    ("text me on 07700 900123 when you're outside", "07700 900123"),
])
def test_a_phone_number_touching_a_chinese_word_is_found(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("phone") == value


@given(st.sampled_from(["订单号", "身份证号", "会员卡号", "快递单号"]), st.from_regex(r"[1-9]\d{9,11}", fullmatch=True))
@settings(max_examples=30, deadline=None)
def test_a_number_of_an_order_or_card_is_no_phone_even_beside_a_phone_word(label: str, digits: str) -> None:
    assert "phone" not in {c.key for c in _EX.extract([Message("user", f"打电话问了{label}{digits}的事", 0)])}


@pytest.mark.parametrize(("text", "value"), [
    ("we've got two teenage daughters, so the bathroom is always busy", "two teenage daughters"),
    ("I'm a single mum of a toddler, evenings are chaos", "a toddler"),
    ("家里有三个娃，周末特别忙", "三个娃"),
])
def test_children_the_user_has_counted_without_my_are_children(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("children") == value


@pytest.mark.parametrize("text", ["my sister has three kids", "she's got two girls and a dog",
                                  "if we have two kids someday, we'd need a bigger car"])
def test_someone_elses_or_supposed_children_are_not_the_users(ex: PatternExtractor, text: str) -> None:
    assert "children" not in _got(ex, text)


def test_named_children_stand_for_the_count(ex: PatternExtractor) -> None:
    got = _got(ex, "We have two boys, Felix and Arlo")
    values = got.get("children")
    assert values and not any(rules.counted_children(v) for v in (values if isinstance(values, list) else [values]))
    assert rules.counted_children("two boys") and rules.counted_children("twin girls")
    assert not rules.counted_children("Felix") and not rules.counted_children("my son")


@pytest.mark.parametrize(("text", "key", "items"), [
    ("I'm really into bouldering and salsa", "hobbies", ["bouldering", "salsa"]),
    ("I have a soft spot for jazz and old films", "likes", ["jazz", "old films"]),
    ("I want updates on Formula 1 and cycling", "news_topics", ["Formula 1", "cycling"]),
    ("give me headlines about housing and interest rates daily", "news_topics", ["housing", "interest rates"]),
    ("我平时喜欢徒步和摄影", "hobbies", ["徒步", "摄影"]),
])
def test_things_joined_by_and_after_a_liking_or_following_verb_are_all_items(
        ex: PatternExtractor, text: str, key: str, items: list[str]) -> None:
    assert _got(ex, text).get(key) == items


@pytest.mark.parametrize(("text", "key", "value"), [
    ("I'm into hiking and I go every weekend", "hobbies", "hiking"),  # "and" starts a clause of its own
    ("I love hiking and it shows", "hobbies", "hiking"),
    ("I want news on tennis and it has to be short", "news_topics", "tennis"),
])
def test_and_before_a_new_clause_ends_the_list(ex: PatternExtractor, text: str, key: str, value: str) -> None:
    assert _got(ex, text).get(key) == value


@pytest.mark.parametrize(("text", "value"), [
    ("I usually order a large flat white with an extra shot and oat milk from the kiosk downstairs",
     "a large flat white with an extra shot and oat milk"),  # longer than 40 characters, ends before "from"
    ("my go-to is a spicy tuna roll with brown rice and no cucumber", "a spicy tuna roll with brown rice and no cucumber"),
    ("奶茶我每次都点三分糖的芋泥波波", "三分糖的芋泥波波"),
])
def test_a_long_usual_order_is_kept_whole(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("usual_order") == value


@pytest.mark.parametrize(("text", "key", "value"), [
    ("朋友们都叫我小胖哈哈，你也这么叫吧", "preferred_name", "小胖"),  # the laugh is not part of the name
    ("I've lived in Lisbon for ten years now lol", "city", "Lisbon"),
])
def test_a_value_said_with_a_laugh_is_kept_unless_it_is_a_taste_or_a_job(
        ex: PatternExtractor, text: str, key: str, value: str) -> None:
    assert _got(ex, text).get(key) == value


@given(st.sampled_from(["我最喜欢加班了{}", "I love Mondays {}", "I'm a professional napper {}", "我是专业睡觉选手{}",
                        "my hobby is procrastinating {}", "我超爱堵车{}"]),
       st.sampled_from(["哈哈", "哈哈哈", "lol", "lmao", "😂", "haha"]))
@settings(max_examples=40, deadline=None)
def test_a_taste_or_a_job_said_with_a_laugh_is_irony(template: str, laugh: str) -> None:
    got = {c.key for c in _EX.extract([Message("user", template.format(laugh), 0)])}
    assert not got & {"likes", "dislikes", "hobbies", "occupation"}


@given(st.sampled_from(["pets", "children", "spouse"]),
       st.sampled_from(["饿", "跑", "睡", "笑", "哭", "吵", "累", "玩"]), st.sampled_from(["得", "着", "过"]))
@settings(max_examples=40, deadline=None)
def test_a_chinese_name_ending_in_a_verb_particle_is_no_name(key: str, verb: str, particle: str) -> None:
    assert not _plausible(key, verb + particle)


@pytest.mark.parametrize(("key", "value"), [("pets", "咪咪"), ("pets", "豆腐"), ("children", "乐乐"), ("children", "小满"),
                                            ("pets", "Biscuit")])
def test_names_stay_plausible(key: str, value: str) -> None:
    assert _plausible(key, value)


@pytest.mark.parametrize(("turns", "names"), [
    (("帮我挑个礼物", "我闺女，下周满六岁，叫安安"), ["安安"]),
    (("给我外甥女和我儿子买点文具，我儿子叫石头",), ["石头"]),
    (("our little one, Mia, starts nursery next week",), ["Mia"]),
])
def test_a_childs_name_stands_for_the_relation_word_beside_it(ex: PatternExtractor, turns: tuple[str, ...],
                                                               names: list[str]) -> None:
    got = _got(ex, *turns).get("children")
    assert (got if isinstance(got, list) else [got]) == names


@pytest.mark.parametrize(("text", "kept"), [
    ("my son Leo and my daughter both hate broccoli", "my daughter"),  # the name is the son's, the daughter stays
    ("我儿子和女儿都爱画画，儿子叫阿福", "女儿"),  # more relation words than names: all stay
])
def test_a_relation_word_no_name_stands_for_is_kept(ex: PatternExtractor, text: str, kept: str) -> None:
    got = _got(ex, text).get("children")
    assert kept in (got if isinstance(got, list) else [got])


@pytest.mark.parametrize("text", ["我在准备去墨尔本读书", "I'm planning to move to Oslo next spring",
                                  "thinking of relocating to Lisbon, any tips?"])
def test_a_move_only_planned_is_no_city(ex: PatternExtractor, text: str) -> None:
    got = _got(ex, text)
    assert not {"city", "work_city", "hometown"} & set(got)


def test_the_place_beside_a_planned_move_is_still_the_users(ex: PatternExtractor) -> None:
    assert _got(ex, "明年打算搬到成都，现在还在西安").get("city") == "西安"


@given(st.sampled_from(["准备去{}读研", "打算搬到{}", "计划去{}工作", "planning to move to {}", "thinking of moving to {}"]),
       st.sampled_from(["成都", "杭州", "Oslo", "Lisbon", "Toronto", "墨尔本"]))
@settings(max_examples=30, deadline=None)
def test_a_planned_move_blocks_place_fields_in_its_clause(template: str, place: str) -> None:
    text = template.format(place)
    assert {"hypothetical", "wish"} & reasons(text, "", text)
    assert not allowed("city", reasons(text, "", text))


@pytest.mark.parametrize(("turns", "key", "value"), [
    (("我公司在朝阳", "不对，是海淀，总是记混"), "work_city", "海淀"),
    (("our office is in Leeds", "sorry, no — Bradford. it moved last year"), "work_city", "Bradford"),
    (("I live in Leeds", "no wait, Bradford"), "city", "Bradford"),
])
def test_a_corrected_place_keeps_the_field_it_corrects(ex: PatternExtractor, turns: tuple[str, ...], key: str,
                                                       value: str) -> None:
    got = _got(ex, *turns)
    assert got.get(key) == value
    assert [k for k, v in got.items() if v == value] == [key]


@pytest.mark.parametrize(("text", "value"), [
    ("moved to Leeds in 2012 and never left", "Leeds"),
    ("born in Cork, moved to Dublin for college and never looked back", "Dublin"),
    ("我2010年搬到武汉就再也没离开过", "武汉"),
])
def test_never_leaving_a_place_is_living_there(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("city") == value


@given(st.sampled_from(["moved to {} and never left", "came to {} in 2015 and never left", "搬到{}以后就再也没离开"]),
       st.sampled_from(["Leeds", "Oslo", "成都", "Hobart"]))
@settings(max_examples=20, deadline=None)
def test_never_left_is_no_negation_but_never_lived_is(template: str, place: str) -> None:
    text = template.format(place)
    assert "negation" not in reasons(text, "", text)
    for denied in (f"I never lived in {place}", f"I don't live in {place}", f"我从没在{place}住过"):
        assert "negation" in reasons(denied, "", denied)


@pytest.mark.parametrize(("text", "key", "value"), [
    ("I moved to Denver last year and I don't know anyone yet", "city", "Denver"),  # the negation is the next clause's
    ("I live in Leeds and my sister lives in York", "city", "Leeds"),
    ("I'm vegan but my kids aren't", "diet", "vegan"),
])
def test_a_conjunction_with_a_new_subject_starts_a_clause_of_its_own(ex: PatternExtractor, text: str, key: str,
                                                                     value: str) -> None:
    assert _got(ex, text).get(key) == value


@pytest.mark.parametrize("text", ["my brother is a nurse and he lives in Boston", "my wife is vegan and I'm not",
                                  "我老婆是护士，她住在波士顿"])
def test_the_other_persons_clause_stays_theirs(ex: PatternExtractor, text: str) -> None:
    got = _got(ex, text)
    assert not {"occupation", "city", "diet"} & set(got)


@given(st.sampled_from(["I live in Leeds", "I'm a nurse", "I'm vegan"]), st.sampled_from(["and", "but", "so", "because"]),
       st.sampled_from(["I", "we", "my mum", "she", "they"]),
       st.sampled_from(["can't drive", "don't like it", "never call", "aren't sure"]))
@settings(max_examples=40, deadline=None)
def test_clauses_are_cut_before_a_conjunction_with_a_subject(first: str, conj: str, subject: str, rest: str) -> None:
    from usermem.understand.filters import clause_spans

    text = f"{first} {conj} {subject} {rest}"
    spans = clause_spans(text)
    assert [text[a:b].strip() for a, b in spans] == [first, f"{conj} {subject} {rest}"]
    assert "negation" not in reasons(text[spans[0][0]:spans[0][1]], "", text)


@pytest.mark.parametrize(("text", "key", "value"), [
    ("I speak Cantonese with my grandparents and English at work", "languages_spoken", ["Cantonese", "English"]),
    ("I live in Bristol with my partner", "city", "Bristol"),
    ("我和老婆住在苏州", "city", "苏州"),
])
def test_others_beside_the_user_as_subject_leave_the_users_doings_theirs(
        ex: PatternExtractor, text: str, key: str, value: object) -> None:
    assert _got(ex, text).get(key) == value


@pytest.mark.parametrize("text", ["I cook for my son who is allergic to eggs", "I shop for my mum, she's diabetic",
                                  "我给我儿子做饭，他对鸡蛋过敏"])
def test_health_said_of_the_one_beside_the_user_stays_theirs(ex: PatternExtractor, text: str) -> None:
    assert not {"allergy", "medical_history", "diet"} & set(_got(ex, text))


# --- eighth round ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("财经新闻只看港股的就行", "港股"),
    ("每天推点科技新闻吧，主要是芯片", "芯片"),
    ("娱乐新闻我重点看综艺方面的", "综艺"),
])
def test_a_kind_of_news_narrowed_gives_the_narrower_topic(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("news_topics") == value
    assert _got(ex, "我每天都看财经新闻").get("news_topics") == "财经新闻"  # not narrowed: the kind is the topic


@pytest.mark.parametrize(("text", "key", "value"), [
    ("我son今年上二年级了", "children", "son"),
    ("我的rabbit叫Snow", "pets", "Snow"),
    ("我的wife在医院上班", "spouse", "wife"),
    ("我kids周末都要补课", "children", "kids"),
])
def test_an_english_relation_word_after_a_chinese_my_is_the_users(ex: PatternExtractor, text: str, key: str,
                                                                   value: str) -> None:
    assert _got(ex, text).get(key) == value


@pytest.mark.parametrize("text", ["我的wife是vegan", "我son对花生过敏"])
def test_the_relatives_facts_stay_theirs_when_code_switched(ex: PatternExtractor, text: str) -> None:
    got = _got(ex, text)
    assert not {"diet", "allergy"} & set(got)
    assert {"spouse", "children"} & set(got)


@pytest.mark.parametrize(("text", "value"), [("我在Google Tokyo上班", "Tokyo"),
                                             ("我在Amazon Berlin上班，周末才回家", "Berlin")])
def test_an_employer_glued_before_the_work_city_is_not_the_city(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("work_city") == value


@pytest.mark.parametrize("value", ["每天热量控制在1800大卡以内", "午饭最多600 kcal", "一天走一万步", "under 2000 calories a day"])
def test_a_number_of_calories_or_steps_is_no_budget(value: str) -> None:
    assert not _plausible("budget", value)
    assert _plausible("budget", value.replace("大卡", "块").replace("kcal", "元").replace("步", "块")
                      .replace("calories", "dollars"))


@pytest.mark.parametrize(("text", "names"), [
    ("家里两只兔子：雪球和奶糖，都特别能吃", ["雪球", "奶糖"]),
    ("我养了三条金鱼，分别叫红红、点点和泡泡", ["红红", "点点", "泡泡"]),
    ("we've got two cats - Mango and Kiwi", ["Mango", "Kiwi"]),
])
def test_animals_counted_then_named_are_the_names(ex: PatternExtractor, text: str, names: list[str]) -> None:
    assert _got(ex, text).get("pets") == names


def test_animals_counted_and_named_of_someone_else_stay_theirs(ex: PatternExtractor) -> None:
    assert "pets" not in _got(ex, "我同事养了两只猫：豆豆和花卷")
    assert _got(ex, "我家有两只狗：可乐、雪碧").get("pets") == ["可乐", "雪碧"]


@pytest.mark.parametrize(("text", "value"), [("咖啡豆只认Lavazza", "Lavazza"), ("耳机只认准Bose的", "Bose"),
                                             ("化妆品只认兰蔻和迪奥", ["兰蔻", "迪奥"])])
def test_the_makers_the_user_trusts_alone_are_brands(ex: PatternExtractor, text: str, value: object) -> None:
    assert _got(ex, text).get("brands") == value
    assert "brands" not in _got(ex, "我只认你说的那个")


@pytest.mark.parametrize("value", ["Capricorn", "a Gemini", "天蝎座", "典型的处女座"])
def test_a_star_sign_is_no_occupation(value: str) -> None:
    assert not _plausible("occupation", value)
    assert _plausible("occupation", "cancer researcher")


# --- ninth round ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "key", "value"), [
    ("I hate early flights — nothing before 10am, please", "dislikes", "early flights"),
    ("I love long walks — especially by the sea", "likes", "long walks"),
    ("I love crème brûlée from little French bakeries", "likes", "crème brûlée from little French bakeries"),
])
def test_a_like_ends_at_a_dash_and_latin_words_are_not_cut(ex: PatternExtractor, text: str, key: str,
                                                           value: object) -> None:
    assert _got(ex, text).get(key) == value


def test_a_correction_gives_the_value_said_as_the_better_choice(ex: PatternExtractor) -> None:
    got = _got(ex, "reply in Spanish please", "hmm, English is better actually, my Spanish isn't great")
    assert got.get("language") == "English"
    assert _got(ex, "用英文回复", "不对，还是中文比较好").get("language") == "中文"


def test_a_bare_correction_is_not_cut_inside_a_word() -> None:
    from usermem.understand.extract import _bare_value

    got = _bare_value("no, somewhere considerably quieter please", "likes")
    assert got is not None and got[0] == "somewhere considerably"


def test_a_star_sign_with_an_idiom_of_degree_is_no_education_or_job(ex: PatternExtractor) -> None:
    for text in ("I'm a Leo through and through", "I'm a Scorpio to the core"):
        got = _got(ex, text)
        assert "education" not in got and "occupation" not in got, text


def test_an_idiom_of_degree_is_no_part_of_a_learned_value() -> None:
    from usermem.understand.extract import _trim

    assert _trim("nurse through and through", "occupation") == "nurse"
    assert _trim("teacher at heart", "occupation") == "teacher"


def test_a_short_chinese_name_beside_a_place_in_china_is_local() -> None:
    got = {c.key: c for c in _EX.extract([Message("user", "我工作在苏州工业园区，住在园区旁边的湖东", 0)])}
    assert got["city"].value == "湖东" and got["city"].canonical is None
    assert got["work_city"].canonical == "Suzhou"
    big = {c.key: c for c in _EX.extract([Message("user", "我在杭州上班，住在大阪", 0)])}
    assert big["city"].canonical == "Osaka"


@pytest.mark.parametrize(("text", "value"), [("one sentence answers are perfect for me tbh", "short"),
                                             ("以后回答一两句话就行", "short"),
                                             ("don't be afraid to go long, I read everything you write anyway", "long")])
def test_more_ways_of_saying_a_reply_length(text: str, value: str) -> None:
    got = {c.key: c.canonical for c in _EX.extract([Message("user", text, 0)])}
    assert got.get("reply_length") == value


@pytest.mark.parametrize(("text", "name"), [("hi 我是 Emma，中文名叫周思彤，你叫我 Emma 就可以", "周思彤"),
                                            ("我英文名是Kevin", "Kevin"), ("my Chinese name is 李明", "李明")])
def test_the_name_in_another_script_is_the_users_name(ex: PatternExtractor, text: str, name: str) -> None:
    assert _got(ex, text).get("name") == name
    assert "name" not in _got(ex, "我老婆英文名叫Amy")


@pytest.mark.parametrize(("text", "topic"), [("帮我留意一下教育政策方面的消息", "教育政策"),
                                             ("以后帮我关注新能源车相关的资讯", "新能源车"),
                                             ("give me anything on space exploration, thanks", "space exploration")])
def test_the_news_the_user_asks_to_be_watched_is_a_topic(ex: PatternExtractor, text: str, topic: str) -> None:
    assert _got(ex, text).get("news_topics") == topic
    assert "news_topics" not in _got(ex, "关注一下他的动态")


def test_put_it_in_a_format_asks_for_a_reply_format(ex: PatternExtractor) -> None:
    assert _got(ex, "always put it in a table").get("reply_format") == "table"
    assert "usual_order" not in _got(ex, "put it in a table with pros/cons side by side")


@pytest.mark.parametrize(("text", "lang"), [("我们家说闽南话，我听得懂但说不太溜", "闽南话"), ("at home we speak Tagalog", "Tagalog")])
def test_the_language_of_the_users_home_is_spoken(ex: PatternExtractor, text: str, lang: str) -> None:
    assert _got(ex, text).get("languages_spoken") == lang


@pytest.mark.parametrize(("text", "job"), [("大专学历，但是做了十年设计，简历怎么写比较好", "设计"), ("我干了二十多年会计了", "会计")])
def test_the_work_done_for_years_is_an_occupation(ex: PatternExtractor, text: str, job: str) -> None:
    assert _got(ex, text).get("occupation") == job
    assert "occupation" not in _got(ex, "我老公做了十年销售")


@pytest.mark.parametrize(("text", "value"), [("晚上十点以后就不要给我推送了，我要陪孩子睡觉", "晚上十点以后就不要给我推送"),
                                             ("别在周末找我，除非天塌了", "别在周末找我"),
                                             ("中午12点到2点别打电话", "中午12点到2点别打电话")])
def test_the_hours_not_to_be_reached_keep_the_words_that_say_so(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("contact_hours") == value


def test_the_news_to_be_watched_said_first_is_a_topic(ex: PatternExtractor) -> None:
    assert _got(ex, "我在考虑换车，另外比亚迪的动态都帮我留意").get("news_topics") == "比亚迪"
    assert "news_topics" not in _got(ex, "他的动态帮我关注")


@pytest.mark.parametrize(("text", "key", "value"), [
    ("sourdough is my lockdown hobby that never ended", "hobbies", "sourdough"),
    ("can't get enough of true-crime docs lately", "likes", "true-crime docs"),
])
def test_a_negation_that_says_very_much_is_no_negation(ex: PatternExtractor, text: str, key: str, value: str) -> None:
    assert _got(ex, text).get(key) == value
    assert "negation" in reasons("I never eat pork") and "negation" not in reasons("hiking never gets old")


@pytest.mark.parametrize(("text", "value"), [("weekends are for bouldering and nothing else", "bouldering"),
                                             ("Sunday mornings are for long runs", "long runs")])
def test_what_the_users_free_time_is_for_is_a_hobby(ex: PatternExtractor, text: str, value: str) -> None:
    assert _got(ex, text).get("hobbies") == value


def test_large_print_is_an_accessibility_need(ex: PatternExtractor) -> None:
    assert _got(ex, "I need large print on anything you make for me to print").get("accessibility") == "large print"


def test_a_role_after_a_workplace_is_the_occupation(ex: PatternExtractor) -> None:
    assert _got(ex, "我是律所的合伙人，主要做并购").get("occupation") == "律所的合伙人"


def test_hours_named_as_working_hours_are_the_schedule(ex: PatternExtractor) -> None:
    got = _got(ex, "我的 working hours 是 10 点到 7 点，之后的消息第二天再回")
    assert got.get("schedule") == "10 点到 7 点" and got.get("contact_hours") != "10 点到 7 点"


def test_a_news_topic_ends_before_how_keenly_it_is_followed(ex: PatternExtractor) -> None:
    assert _got(ex, "I follow Formula 1 religiously, send me race results").get("news_topics") == "Formula 1"
    assert _got(ex, "I follow cricket closely").get("news_topics") == "cricket"


def test_the_usual_order_after_a_verb_of_ordering(ex: PatternExtractor) -> None:
    assert _got(ex, "还是按老规矩点：牛肉面，加辣，不要葱").get("usual_order") == "牛肉面，加辣，不要葱"
