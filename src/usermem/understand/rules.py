"""Precise rules for the fields whose values have a type: places, time zones, names and forms of address,
family members and pets, diet, reply tone, spoken languages, phone numbers, birthdays and budgets.

Every rule returns `Found` values in the user's own words (a span of the clause) with a canonical form
beside it where one helps. Whether the clause is the user's own, lasting statement is decided by
`understand.filters`, not here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from usermem.understand.gazetteer import find_places
from usermem.understand.text import cjk_compile, cjk_edges


@dataclass(frozen=True, slots=True)
class Found:
    key: str
    value: str
    start: int
    end: int
    canonical: Any = None
    confidence: float = 0.8
    sure: bool = True  # of its field (places: False when read from a bare "in" / 在, see `places`)


def _all(pattern: re.Pattern[str], text: str, key: str, group: int = 1, canonical: Any = None,
         confidence: float = 0.8) -> list[Found]:
    return [Found(key, m.group(group), m.start(group), m.end(group), canonical, confidence)
            for m in pattern.finditer(text) if m.group(group)]


# --- places ---------------------------------------------------------------------------------------------

_WORK_CUE = cjk_compile(r"上班|工作|办公|公司在|上班在|单位在|返工|打工|\bwork(?:s|ing)?\b|\boffice\b|\bcommute|\bjob\b",
                       re.IGNORECASE)
# words for a workplace ("一家做无人机的公司", "一家小的设计工作室")
_FIRM = r"公司|企业|工厂|厂|店|单位|机构|团队|平台|律所|事务所|工作室|银行|医院|学校|餐厅|酒店"
# "我在深圳一家做无人机的公司上班", "在上海的一家律所做助理": the place, then the workplace, then the work verb
_AT_WORKPLACE = re.compile(r"[^，,。；;!！?？住]{0,14}?(?:公司|单位|工厂|厂|医院|学校|银行|律所|事务所|工作室|门店|店|园区|总部|分公司)"
                           r"[^，,。；;!！?？住]{0,4}?(?:上班|工作|返工|打工|实习|做|当)")
_HOME_CUE = cjk_compile(r"老家|家乡|故乡|出生|长大|\bgrew up\b|\boriginally\b|\bfrom\b|\bborn\b|人，|人$|的人", re.IGNORECASE)
_LIVE_CUE = cjk_compile(r"住|人在|在|喺|屋企|定居|搬|base|\blive|\bliving\b|\bbased\b|\bmoved\b|\bmove\b|\bin\b|\bhere\b",
                       re.IGNORECASE)
_NOT_LIVING = cjk_compile(r"出差|旅游|旅行|玩|度假|路过|转机|\btrip\b|\bvisit|\bholiday|\bvacation|\bflying\b",
                         re.IGNORECASE)


_THIRD_PERSON_VERB = cjk_compile(r"\b(?:lives|works|is living|is working|is based|studies)\b", re.IGNORECASE)


# A place inside a postal address (a street and a number follow it, or a street number and a postcode precede it).
_STREET_AFTER = re.compile(r"[^，,。；;!！?？]{0,14}?(?:路|街|大道|巷|弄|胡同|小区|花园|广场|大厦|园|村|苑|公寓|中心)[^，,。；;]{0,12}?\d+\s*"
                           r"(?:号|栋|幢|室|楼|弄|单元)")
_STREET_BEFORE = cjk_compile(r"\b\d+[A-Za-z]?\s+[A-Z][\w' \-]{2,30}\b(?:Street|St|Road|Rd|Avenue|Ave|Lane|Ln|Rue|Drive|Dr|Way|"
                            r"Court|Ct|Place|Pl|Strasse|Straße|Calle|Via)\b[^.;!?]{0,20}$|\b\d{4,5}\s*$")


_INSTITUTION_AFTER = cjk_compile(r"(?:大学|学院|理工|师范|医科|中学|小学|一中|二中|三中|外国语|研究所|研究院|银行|医院|机场|火车站|"
                                r"东站|西站|南站|北站|(?i:\s+(?:university|college|airport|station|hospital|school)\b))")


def places(clause: str) -> list[Found]:
    out: list[Found] = []
    found = find_places(clause)
    for n, p in enumerate(found):
        weak = False
        if p.district and n and found[n - 1].end == p.start:
            continue  # "我住在厦门思明区": the city is 厦门; the district only says where in it
        if re.match(cjk_edges(r"\s*(?:时间|(?i:time)\b)"), clause[p.end:p.end + 6]):
            continue  # "纽约时间", "Moscow time": the place names a time zone
        if _INSTITUTION_AFTER.match(clause, p.end):
            continue  # "武汉大学", "新东方", "合肥一中": the place names an institution, not where the user lives
        if _STREET_AFTER.match(clause, p.end) or _STREET_BEFORE.search(clause[max(0, p.start - 30):p.start]):
            continue  # "我家在南京鼓楼区中山北路200号", "7 Rue des Lilas, 69003 Lyon": part of a postal address
        before = clause[max(0, p.start - 16):p.start]
        if _THIRD_PERSON_VERB.search(before):
            continue  # "Taylor Swift lives in Nashville": someone else's place
        after = clause[p.end:p.end + 6]
        window = before + "|" + after
        if _NOT_LIVING.search(clause):
            continue
        if re.search(cjk_edges(r"(?i:\bfrom\s*)$"), before) and not re.search(cjk_edges(r"(?i:\b(?:remote|remotely|wfh|working|work) from\s*$)"),
                                                                    before) and not re.search(
                cjk_edges(r"(?i:\b(?:i'?m|i am|i come|we'?re|we are|originally|born|grew up|i'm originally|moved(?: here| over| down)?|"
                r"relocated)\b)|我"), before):
            continue  # "a couple from Melbourne", "a nurse from Leeds": whoever is from there, it is not said of the user
        remote = re.search(cjk_edges(r"(?i:\b(?:remote|remotely|wfh) from\s*$)"), before)
        if remote:
            key = "city"  # "remote from Halifax", "WFH from Porto": where the user lives and works
        elif re.search(cjk_edges(r"(?i:\bwork(?:ing)? from\s*$)"), before):
            key = "work_city"  # "I'm working from Tbilisi for the next few years"
        elif _HOME_CUE.search(before[-8:]) or re.search(r"(?i:\bnative (?:place|town|village)(?: is)?\s*)$", before) or re.match(r"人|的人|老乡|老家|长大|出生|土生土长", after) or \
                re.search(cjk_edges(r"(?i:\braised in\s*|\bgrew up (?:in|near|outside|around)\s*|\bborn and raised in\s*|\bmoved (?:here |over |down )?from\s*)$"), before) or (
                re.search(r"(?:我|俺)(?:是|老家是)$", before) and re.match(r"的|滴|嘞|人", after)):
            key = "hometown"
        elif re.match(cjk_edges(r"\s*-?\s*based\b"), after, re.IGNORECASE) or re.search(cjk_edges(r"(?i:\bwfh\b|work(?:ing)? from home|"
                                                                          r"\bremote from\s*$|\bhome is (?:still )?$|"
                                                                          r"\bhome'?s (?:still )?$)"), before) or \
                re.match(r"\s*[,，]?\s*(?i:that'?s where (?:i|we) live)", clause[p.end:p.end + 30]):
            key = "city"  # "I'm Cape Town based", "WFH from Porto", "home is still Porto", "Shoreditch, that's where I live"
        elif _WORK_CUE.search(window) or _WORK_CUE.search(clause[p.end:p.end + 10]) or \
                (re.search(r"在|喺", before[-3:]) and _AT_WORKPLACE.match(clause, p.end)):
            key = "work_city"
        elif re.search(cjk_edges(r"住|\blive|\bliving\b"), before[-14:], re.IGNORECASE):
            key = "city"
        elif _WORK_CUE.search(clause[max(0, p.start - 30):p.start]):
            key, weak = "work_city", True  # "work for a tiny startup in Bangalore"
        elif _LIVE_CUE.search(before[-14:]):
            key, weak = "city", True
        else:
            continue
        # a place read from a cue next to it is sure of its field; one read from a bare "in" / 在 or a work word
        # further away is not (`sure`: a learned span of another place field may take it)
        out.append(Found(key, p.text, p.start, p.end, p.canonical, 0.75, sure=not weak))
    return out


# --- time zones ---------------------------------------------------------------------------------------------

_TZ_NAMES: Mapping[str, str] = {
    "pacific time": "America/Los_Angeles", "pacific": "America/Los_Angeles", "pst": "America/Los_Angeles",
    "pdt": "America/Los_Angeles", "mountain time": "America/Denver", "mst": "America/Denver",
    "central time": "America/Chicago", "cst": "America/Chicago", "eastern time": "America/New_York",
    "est": "America/New_York", "edt": "America/New_York", "gmt": "Europe/London", "bst": "Europe/London",
    "cet": "Europe/Paris", "cest": "Europe/Paris", "eat": "Africa/Nairobi", "ist": "Asia/Kolkata",
    "jst": "Asia/Tokyo", "aest": "Australia/Sydney", "北京时间": "Asia/Shanghai", "美东时间": "America/New_York",
    "美西时间": "America/Los_Angeles", "美中时间": "America/Chicago", "东京时间": "Asia/Tokyo",
    "伦敦时间": "Europe/London", "悉尼时间": "Australia/Sydney", "hawaii time": "Pacific/Honolulu",
    "alaska time": "America/Anchorage", "atlantic time": "America/Halifax", "india time": "Asia/Kolkata",
    "japan time": "Asia/Tokyo", "uk time": "Europe/London", "东八区": "UTC+8",
    "太平洋时间": "America/Los_Angeles", "美国东部时间": "America/New_York", "东部时间": "America/New_York",
    "中部时间": "America/Chicago", "山地时间": "America/Denver", "格林尼治时间": "Europe/London",
    "中欧时间": "Europe/Paris", "欧洲中部时间": "Europe/Paris", "新西兰时间": "Pacific/Auckland",
    "澳洲东部时间": "Australia/Sydney", "日本时间": "Asia/Tokyo", "韩国时间": "Asia/Seoul", "新加坡时间": "Asia/Singapore",
    "香港时间": "Asia/Hong_Kong", "nz time": "Pacific/Auckland", "new zealand time": "Pacific/Auckland",
    "hst": "Pacific/Honolulu", "akst": "America/Anchorage", "nzst": "Pacific/Auckland", "nzdt": "Pacific/Auckland",
    "sgt": "Asia/Singapore", "hkt": "Asia/Hong_Kong", "kst": "Asia/Seoul", "aedt": "Australia/Sydney",
    "brt": "America/Sao_Paulo", "wib": "Asia/Jakarta",
    "东九区": "UTC+9", "东七区": "UTC+7", "西五区": "UTC-5", "西八区": "UTC-8", "东一区": "UTC+1", "零时区": "UTC+0",
}
_TZ = cjk_compile(r"(?<![A-Za-z])(?:UTC|GMT)\s?[+\-−]\s?\d{1,2}(?::?\d{2})?(?!\d)|[东西][一二三四五六七八九十]{1,2}区|零时区|"
                 r"北京时间|美东时间|美西时间|美中时间|东京时间|伦敦时间|悉尼时间|太平洋时间|美国东部时间|东部时间|中部时间|山地时间|"
                 r"格林尼治时间|欧洲中部时间|中欧时间|新西兰时间|澳洲东部时间|日本时间|韩国时间|新加坡时间|香港时间|"
                 r"\b(?-i:HST|AKST|NZST|NZDT|SGT|HKT|KST|AEDT|BRT|WIB)\b|"
                 r"\b(?:pacific|mountain|central|eastern|hawaii|alaska|atlantic|india|japan|uk|nz|new zealand) time\b|\b(?:PST|PDT|MST|CST|EST|EDT|CET|CEST|EAT|JST|AEST|BST)\b|"
                 r"\b(?-i:America|Europe|Asia|Africa|Australia|Pacific|Atlantic|Indian|Antarctica|Etc)/[A-Z][A-Za-z_]+\b",
                 re.IGNORECASE)
_TZ_CONTEXT = cjk_compile(r"时区|时间|区|time|zone|tz|utc|gmt|\b[A-Z]{3,4}\b", re.IGNORECASE)


def timezone(clause: str) -> list[Found]:
    out = []
    for m in _TZ.finditer(clause):
        word = m.group(0)
        low = word.lower()
        if low in ("cst", "est", "ist", "bst", "eat") and not re.search(cjk_edges(r"时区|time|zone|\bin\b|\bon\b"), clause,
                                                                             re.IGNORECASE):
            continue
        if low == "eat" and word != "EAT":
            continue
        canon = _TZ_NAMES.get(low) or re.sub(r"\s|−", lambda x: "-" if x.group(0) == "−" else "", word.upper())
        out.append(Found("timezone", word, m.start(), m.end(), canon, 0.85))
    return out


# --- names and forms of address ---------------------------------------------------------------------------

_ADDRESS_ZH = re.compile(r"(?:叫我|喊我|称呼我|称我为?)(?:为)?\s?((?:(?:Dr|Mr|Mrs|Ms|Prof)\.?\s?[A-Z][a-z]+)|"
                         r"[A-Z][a-z]{1,11}|[\u4e00-\u9fffA-Za-z]{1,4}?)\s?(?:就行|就好|吧|就可以|即可|好了|$|[，,。.!！~])")
_TITLE = r"(?:(?:Dr|Mr|Mrs|Ms|Prof)\.?\s)?"
_ADDRESS_EN = re.compile(r"(?<![A-Za-z])(?:call me|address me as|you can call me|just call me|just say|you can just say)\s+("
                         + _TITLE + r"(?:[A-Z][a-z'\-]+)(?:\s[A-Z][a-z'\-]+)?)")
_NAME_ZH = re.compile(r"(?:我|我的|(?<![叫喊])(?:本名|真名|大名|全名|身份证上|证件上|护照上))(?:本名|真名|大名|全名)?"
                      r"(?:叫|的名字是|名字叫|名字是|姓名是|名叫|是)(?<!我是)(?<!我的是)"
                      r"([\u4e00-\u9fff]{2,4}?)(?:[，,。.!！\s]|$|，)")
# A name in Latin letters inside Chinese: "我是Hannah Kim，新来的…", "我叫Kevin 张".
_NAME_ZH_LATIN = re.compile(r"我(?:叫|是|的名字是|名字叫)\s?([A-Z][a-z]+(?:\s?(?:[A-Z][a-z]+|[\u4e00-\u9fff]{1,2}(?=[，,。.!！\s]|$)))?)"
                            r"(?=[，,。.!！\s]|$)")
# "my name is Olusegun, but please use Segun", "it's Marguerite but honestly just call me Daisy", "I go by Sam".
_GO_BY_EN = cjk_compile(r"(?<![A-Za-z])(?i:i go by|go by|goes by|known as)\s+([A-Z][a-z'\-]+)|"
                       r"(?i:\bname\b).{0,40}?(?i:\bplease use|\bjust use|\buse)\s+([A-Z][a-z'\-]+)(?![A-Za-z])")
_NAME_BUT_EN = cjk_compile(r"(?:^|(?i:\bit'?s|\bi'?m|\bname is|\bname's)\s+)([A-Z][a-z'\-]+(?:\s[A-Z][a-z'\-]+)?)[,，]?\s+but\s+"
                          r"(?:\w+\s+){0,3}?(?i:call me|go by|use)\b")
_NAME_EN = cjk_compile(r"\b(?i:my name is|my name's|i'm|i am|this is)\s+((?:[A-Z][a-z'\-]+)(?:\s[A-Z][a-z'\-]+)?)(?=[\s,.!]|$)")
# The name in one script besides another ("中文名叫周思彤", "英文名是Kevin", "my Chinese name is 李明"): the user's name.
_NAME_SCRIPT = cjk_compile(r"(?:^|(?<=[，,。.!！\s我]))(?:的)?(?:中文|英文|汉语|大陆|本地)名(?:字)?(?:叫|是)\s?"
                          r"([\u4e00-\u9fff]{2,4}?|[A-Z][a-z]+(?: [A-Z][a-z]+)?)(?=[，,。.!！\s]|$)|"
                          r"\b(?i:my (?:chinese|english|legal|full|real) name is)\s+"
                          r"([\u4e00-\u9fff]{2,4}|[A-Z][a-z'\-]+(?: [A-Z][a-z'\-]+)?)(?=[\s,.!，。]|$)")
_FAMOUS_ZH = re.compile(r"秦始皇|孙悟空|猪八戒|唐僧|玉皇大帝|如来|哪吒|诸葛亮|曹操|李白|杜甫|孔子|雷锋|毛主席|奥特曼|蜘蛛侠|钢铁侠|蝙蝠侠")


def famous_name(value: str) -> bool:
    """A famous character's or person's name ("Batman", "秦始皇"): said as one's own name, a joke."""
    return bool(_FAMOUS_ZH.search(value)) or any(w in _FAMOUS for w in re.findall(r"[A-Za-z][A-Za-z\-]*", value))


_FAMOUS = frozenset({"Batman", "Superman", "Spiderman", "Spider-Man", "Ironman", "Santa", "Sherlock", "Gandalf",
                     "Yoda", "Voldemort", "Shakespeare", "Einstein", "Napoleon", "Beyonce", "Cleopatra"})
_NOT_NAMES = frozenset({*_FAMOUS,
                        "Not", "Just", "So", "Very", "From", "In", "At", "Here", "Still", "Also", "Sorry", "Happy",
                        "Really", "Back", "Going", "Currently", "Based", "Allergic", "Vegan", "Vegetarian", "Fine",
                        "Good", "Tired", "Busy", "Done", "The", "A", "An", "On", "Off", "Working", "Learning",
                        "Retired", "Single", "Married", "Chinese", "English", "Hungry", "Sure", "Okay", "Ok",
                        # nationalities and faiths describe the user, they do not name them
                        "Japanese", "American", "British", "Canadian", "Australian", "Indian", "French", "German",
                        "Spanish", "Italian", "Korean", "Irish", "Scottish", "Welsh", "Mexican", "Brazilian",
                        "Nigerian", "Kenyan", "Vietnamese", "Thai", "Filipino", "Dutch", "Swedish", "Russian",
                        "Polish", "Turkish", "Greek", "Portuguese", "Jewish", "Muslim", "Catholic", "Christian",
                        "Hindu", "Buddhist", "Pregnant", "Deaf", "Blind", "Left", "Right", "Late", "Early", "New"})


def names(clause: str) -> list[Found]:
    out = [f for f in _all(_ADDRESS_ZH, clause, "preferred_name", confidence=0.85)
           if f.value not in ("名字", "全名", "本名", "真名", "什么", "啥", "这个", "那个")]
    out += [f for f in _all(_ADDRESS_EN, clause, "preferred_name", confidence=0.85)
            if f.value.split()[0] not in _NOT_NAMES]
    out += [f for f in _all(_NAME_ZH, clause, "name", confidence=0.8) if not re.match(r"[我你他她它这那什]", f.value)
            and not famous_name(f.value)]
    out += [f for f in _all(_NAME_EN, clause, "name", confidence=0.7) if f.value.split()[0] not in _NOT_NAMES]
    out += [f for f in _all(_NAME_ZH_LATIN, clause, "name", confidence=0.75) if f.value.split()[0] not in _NOT_NAMES]
    out += [f for f in _all(_GO_BY_EN, clause, "preferred_name", confidence=0.8) if f.value not in _NOT_NAMES]
    out += [f for f in _all(_NAME_OFFICIALLY, clause, "name", confidence=0.75) if f.value.split()[0] not in _NOT_NAMES]
    out += [f for f in _all(_WHAT_I_GO_BY, clause, "preferred_name", confidence=0.8) if f.value not in _NOT_NAMES]
    out += [f for g in (1, 2) for f in _all(_NAME_SCRIPT, clause, "name", group=g, confidence=0.85)
            if f.value.split()[0] not in _NOT_NAMES and not famous_name(f.value)]
    return out


# "hiya, Fionnuala here", "Hi all, Priya Shah here": a greeting and a name; "Wenjie Zhou officially"; "Wen is what I go by"
_NAME_HERE = cjk_compile(r"^\s*(?i:hi|hiya|hey|hello|morning|evening)(?:\s+(?i:all|there|everyone))?[,!]?\s+"
                        r"([A-Z][a-z'\-]+(?: [A-Z][a-z'\-]+)?)\s+here\b(?!\s+(?:is|are|was))")
_NAME_OFFICIALLY = cjk_compile(r"^\s*(?:(?i:well|but|or)[,]?\s+)?([A-Z][a-z'\-]+ [A-Z][a-z'\-]+)\s+(?i:officially|on paper|"
                              r"on my passport)\b")
_WHAT_I_GO_BY = cjk_compile(r"\b([A-Z][a-z'\-]+) is what (?i:i go by|people call me|everyone calls me|my friends call me)")


# --- family and pets --------------------------------------------------------------------------------------

SPOUSE: Mapping[str, str] = {
    "老婆": "wife", "妻子": "wife", "太太": "wife", "媳妇": "wife", "爱人": "partner", "老公": "husband",
    "丈夫": "husband", "先生": "husband", "男朋友": "boyfriend", "女朋友": "girlfriend", "对象": "partner",
    "未婚夫": "fiance", "未婚妻": "fiance", "wife": "wife", "husband": "husband", "partner": "partner",
    "boyfriend": "boyfriend", "girlfriend": "girlfriend", "fiancé": "fiance", "fiance": "fiance",
    "fiancée": "fiance", "fiancee": "fiance", "hubby": "husband", "老伴": "partner", "老伴儿": "partner",
    "媳妇儿": "wife", "老婆大人": "wife", "另一半": "partner", "missus": "wife", "missis": "wife", "wifey": "wife",
    "other half": "partner", "spouse": "partner",
}
CHILDREN: Mapping[str, str] = {
    "儿子": "son", "女儿": "daughter", "孩子": "child", "小孩": "child", "娃": "child", "闺女": "daughter",
    "大宝": "child", "二宝": "child", "俩娃": "children", "两个孩子": "children", "son": "son", "daughter": "daughter",
    "kid": "child", "kids": "children", "children": "children", "child": "child", "toddler": "child",
    "baby": "child", "twins": "children", "girl": "daughter", "boy": "son", "little one": "child", "little ones": "children", "stepson": "son",
    "stepdaughter": "daughter", "宝宝": "child", "小儿子": "son", "大儿子": "son",
    "小女儿": "daughter", "大女儿": "daughter",
}
PETS: Mapping[str, str] = {
    "猫": "cat", "猫咪": "cat", "橘猫": "cat", "布偶": "cat", "英短": "cat", "狗": "dog", "狗狗": "dog", "柯基": "dog",
    "金毛": "dog", "泰迪": "dog", "柴犬": "dog", "哈士奇": "dog", "边牧": "dog", "兔子": "rabbit", "仓鼠": "hamster",
    "鹦鹉": "parrot", "乌龟": "turtle", "金鱼": "fish", "cat": "cat", "kitten": "cat", "dog": "dog",
    "puppy": "dog", "pup": "dog", "corgi": "dog", "labrador": "dog", "greyhound": "dog", "poodle": "dog",
    "terrier": "dog", "rabbit": "rabbit", "bunny": "rabbit", "hamster": "hamster", "parrot": "parrot",
    "budgie": "parrot", "tortoise": "turtle", "turtle": "turtle", "goldfish": "fish",
    "萨摩耶": "dog", "拉布拉多": "dog", "比熊": "dog", "博美": "dog", "贵宾": "dog", "法斗": "dog", "雪纳瑞": "dog",
    "德牧": "dog", "阿拉斯加": "dog", "中华田园犬": "dog", "土狗": "dog", "布偶猫": "cat", "暹罗": "cat", "蓝猫": "cat",
    "狸花": "cat", "狸花猫": "cat", "美短": "cat", "加菲": "cat", "奶牛猫": "cat", "三花": "cat", "龙猫": "chinchilla",
    "刺猬": "hedgehog", "荷兰猪": "guinea pig", "蜥蜴": "lizard", "守宫": "gecko", "tabby": "cat", "beagle": "dog",
    "retriever": "dog", "husky": "dog", "dachshund": "dog", "spaniel": "dog", "chihuahua": "dog", "pug": "dog",
    "collie": "dog", "shepherd": "dog", "lab": "dog", "guinea pig": "guinea pig", "gecko": "gecko", "ferret": "ferret",
    "chickens": "chicken", "hens": "chicken", "tetras": "fish", "axolotl": "axolotl", "cockatiel": "parrot",
}
_MINE_ZH = r"(?:我(?:家|的)?|我们家|家里|家)"
_MINE_EN = r"(?:\bmy|\bour)"


@lru_cache(maxsize=8)
def _relation_patterns(key: str) -> tuple[list[str], re.Pattern[str], re.Pattern[str], list[tuple[str, re.Pattern[str]]],
                                          re.Pattern[str]]:
    lexicon = _RELATIONS[key]
    words = sorted(lexicon, key=len, reverse=True)
    zh = "|".join(re.escape(w) for w in words if not w.isascii())
    en = "|".join(re.escape(w) for w in words if w.isascii())
    count = r"(?:[一两二三四俩]只|[一两二三四俩]条|[一两二三四]个|只|条)?"
    pat_zh = re.compile(r"(" + _MINE_ZH + r"?" + count + r"(?:" + zh + r"))(?:叫|名叫|名字叫)?"
                        r"([\u4e00-\u9fff]{2}(?=[，,。.!！\s今刚最才也又都是在昨前每总老就把被已还]|$))?")
    pat_en = cjk_compile(r"((?i:my|our)\s+(?:\w+\s+){0,2}?(?i:" + en + r")s?)\b(?:\s+(?:is\s+)?(?:named|called)?\s*"
                        r"([A-Z][a-z]+))?")
    latin = [(w, cjk_compile(r"\b" + re.escape(w) + r"s?\b", re.IGNORECASE)) for w in words if w.isascii()]
    # code-switched: an English relation word right after a Chinese 我/我家/我的 ("我daughter今年五岁", "我家cat叫Mimi"),
    # with the name after it when one is given
    pat_mix = re.compile(r"(?:我们家|我家|我的|我)\s?((?i:" + en + r")s?)(?![A-Za-z])(?:\s?(?:叫|名叫|名字叫|(?i:is called|"
                         r"called|named))?\s?([A-Z][a-z]+(?![A-Za-z])|(?<=叫)[\u4e00-\u9fff]{2}(?=[，,。.!！\s]|$)))?")
    return words, pat_zh, pat_en, latin, pat_mix


NOT_A_NAME = re.compile(r"放学|上学|上班|下班|睡觉|吃饭|回家|出门|起床|学习|作业|补习|培训|接送|打翻|花盆|幼儿园|小学|中学|"
                        r"昨晚|昨天|今天|今晚|明天|最近|刚才|早上|晚上|一起|"
                         r"生日|过敏|发烧|感冒|生病|考试")


def _relation(clause: str, lexicon: Mapping[str, str], key: str, *, pet: bool = False) -> list[Found]:
    out: list[Found] = []
    words, pat_zh, pat_en, latin, pat_mix = _relation_patterns(key)
    for m in pat_zh.finditer(clause):
        word = m.group(1)
        base = next((w for w in words if w in word), word)
        if not word.startswith(("我", "家")) and not pet and len(base) < 2 and base not in ("娃",):
            continue
        if pet and word == base and len(base) == 1 and "养" not in clause:
            continue  # "夜猫子", "猫冬", "鸡飞狗跳": a bare 猫/狗 with no 我家, count or 养 is no animal of the user's
        if key == "spouse" and base == "先生" and not re.search(r"我(?:跟|和)?我?先生|我先生|我家先生", clause):
            continue
        name = m.group(2) if pet or key == "children" else None
        if name and (re.match(r"[今刚最才也又都是在上了的]", name) or NOT_A_NAME.search(name)):
            name = None  # "接女儿放学": 放学 is what she does, not her name
        if name:
            out.append(Found(key, name, m.start(2), m.end(2), lexicon[base], 0.8))
        else:
            value = word if key != "spouse" else base
            if key == "children":  # "我们家闺女" -> "闺女" (the relation word; "我女儿" keeps its 我)
                value = re.sub(r"^(?:我们家|咱们家|咱家|我家|家里)的?(?=.)", "", value)
            value = re.sub(r"^(?:我们家|我家|我的|我|家里|家)?(?:[一两二三四俩]?[只条个])?(?=.)", "", value) if pet else value
            start = m.start(1) + (word.index(value) if value in word else 0)
            out.append(Found(key, value, start, start + len(value), lexicon[base], 0.7))
    for m in pat_en.finditer(clause):
        phrase = m.group(1)
        base = next((w for w, pat in latin if pat.search(phrase)), None)
        if base is None:
            continue
        name = m.group(2)
        if name and name not in _NOT_NAMES:
            out.append(Found(key, name, m.start(2), m.end(2), lexicon[base], 0.8))
        else:
            out.append(Found(key, phrase, m.start(1), m.end(1), lexicon[base], 0.65))
    for m in pat_mix.finditer(clause):
        word = m.group(1).lower()
        base = word if word in lexicon else word[:-1] if word[:-1] in lexicon else None
        if base is None or any(f.start < m.end(1) and m.start(1) < f.end for f in out):
            continue
        name = m.group(2) if key != "spouse" else None
        if name and name not in _NOT_NAMES and not NOT_A_NAME.search(name):
            out.append(Found(key, name, m.start(2), m.end(2), lexicon[base], 0.8))
        else:
            out.append(Found(key, m.group(1), m.start(1), m.end(1), lexicon[base], 0.65))
    return out


_RELATIONS: Mapping[str, Mapping[str, str]] = {"spouse": SPOUSE, "children": CHILDREN, "pets": PETS}


# Children the user has, counted, without my/our: "we have three kids", "I've got twin boys", "a stay-at-home dad to
# two girls", "mum of a toddler".
_CHILDREN_EN_HAVE = cjk_compile(
    r"(?:\b(?:i|we)(?:'ve| have)?\s+(?:got|have|raised|raising)|\b(?:mum|mom|mother|dad|father|parent)\s+(?:of|to))\s+"
    r"((?:a|one|two|three|four|five|six|twin|\d)\s+(?:(?:little|young|grown|grown-up|teenage|adult|small)\s+)?"
    r"(?:kids?|children|child|sons?|daughters?|boys?|girls?|toddlers?|teens?|teenagers?|twins))\b", re.IGNORECASE)


def counted_children(value: str) -> bool:
    """Whether a children value is a count ("three kids", "twin boys") rather than a name or a relation word."""
    return re.fullmatch(r"(?i:(?:a|one|two|three|four|five|six|twin|\d)\s+\D+)", value) is not None and \
        _CHILDREN_EN_HAVE.search("we have " + value) is not None


def family(clause: str) -> list[Found]:
    out = _relation(clause, SPOUSE, "spouse") + _relation(clause, CHILDREN, "children")
    for m in _CHILDREN_EN_HAVE.finditer(clause):
        if not any(f.key == "children" and f.start < m.end(1) and m.start(1) < f.end for f in out):
            word = m.group(1).split()[-1].lower()
            canonical = "son" if word.startswith(("son", "boy")) and not word.endswith("s") else \
                "daughter" if word.startswith(("daughter", "girl")) and not word.endswith("s") else \
                "children" if word.endswith("s") or word == "children" else "child"
            out.append(Found("children", m.group(1), m.start(1), m.end(1), canonical, 0.7))
    return out


# "we just adopted a bunny", "we've got a couple of chickens", "I have two cats": an animal the user keeps, without my/our.
_PET_EN_KEEP = cjk_compile(r"\b(?:i|we)(?:'ve| have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:adopted|got|have|own|rescued|"
                          r"keep|foster)\s+((?:a|an|two|three|four|some)\b[\w ]{0,30})", re.IGNORECASE)
# "我家布丁是只萨摩耶": the name before the species.
_PET_ZH_NAMED = re.compile(r"(?:我家|我们家|家里|我的)([\u4e00-\u9fff]{2})是(?:一)?(?:只|条|头)")


# Animals counted, then named in a list: "三只猫：大黄、二黑和小白", "两条狗，分别叫旺财和来福", "two cats: Milo and Otis",
# "three hens called Peggy, Dot and Lou". The names are the pets (the species words only say what they are).
_PET_NAME_ZH = r"[\u4e00-\u9fff]{2,3}?"
_PET_NAME_EN = r"[A-Z][a-z]+"
_PETS_LISTED_ZH = re.compile(r"(?:[两二三四五六七八九十几俩]|\d+)\s*[只条头]\s*(?P<species>" + "|".join(
    sorted((re.escape(w) for w in PETS if not w.isascii()), key=len, reverse=True)) + r")\s*(?:[：:]|[，,]\s*(?:分别|名字)?叫)\s*"
    r"(?P<names>" + _PET_NAME_ZH + r"(?:\s*[、，,和跟与及]\s*" + _PET_NAME_ZH + r")+)(?=[，,。.!！?？；;\s都也]|$)")
_PETS_LISTED_EN = re.compile(r"(?i:two|three|four|five|\d+)\s+(?:\w+\s+)?(?P<species>" + "|".join(
    sorted((re.escape(w) for w in PETS if w.isascii()), key=len, reverse=True)) + r")s?\s*(?:[:—–-]|,?\s*(?:named|called))\s*"
    r"(?P<names>" + _PET_NAME_EN + r"(?:,\s*" + _PET_NAME_EN + r")*,?\s+(?:and|&)\s+" + _PET_NAME_EN + r")\b", re.IGNORECASE)


def _listed_pets(clause: str) -> list[Found]:
    out: list[Found] = []
    for pat in (_PETS_LISTED_ZH, _PETS_LISTED_EN):
        for m in pat.finditer(clause):
            species = PETS.get(m.group("species").lower())
            for n in re.finditer(_PET_NAME_EN if pat is _PETS_LISTED_EN else r"[^、，,和跟与及\s]+", m.group("names")):
                name = n.group(0)
                if name.lower() in ("and",) or name in _NOT_NAMES or NOT_A_NAME.search(name):
                    continue
                a = m.start("names") + n.start()
                out.append(Found("pets", name, a, a + len(name), species, 0.8))
    return out


def pets(clause: str) -> list[Found]:
    if not re.search(cjk_edges(r"养|家|我|my|our|have|got|\bi\b|\bwe\b"), clause, re.IGNORECASE):
        return []
    # "猫毛过敏", "狗粮", "cat hair": the animal word names a material or a product, not an animal of the user's
    out = [f for f in _relation(clause, PETS, "pets", pet=True) if not _PET_MATERIAL.match(clause, f.end)]
    for m in _PET_ZH_NAMED.finditer(clause):
        species = next((PETS[w] for w in sorted(PETS, key=len, reverse=True) if clause.startswith(w, m.end())), None)
        if species and not NOT_A_NAME.search(m.group(1)):
            out = [f for f in out if not (f.start >= m.end())]  # the species word names this animal
            out.append(Found("pets", m.group(1), m.start(1), m.end(1), species, 0.8))
    if not out:
        for m in _PET_EN_KEEP.finditer(clause):
            words = list(re.finditer(r"\w+", m.group(1)))
            for w in words[:6]:
                species = PETS.get(w.group(0).lower()) if w.group(0).isascii() else None
                species = species or (PETS.get(w.group(0).lower()[:-1]) if w.group(0).lower().endswith("s") else None)
                if species:
                    end = m.start(1) + w.end()
                    if not _PET_MATERIAL.match(clause, end):
                        name = re.match(r"\s+(?:named|called)\s+([A-Z][a-z]+)", clause[end:])
                        if name:
                            out.append(Found("pets", name.group(1), end + name.start(1), end + name.end(1), species, 0.8))
                        else:
                            out.append(Found("pets", clause[m.start(1):end], m.start(1), end, species, 0.65))
                    break
    # "my old tabby, Gus" / "Pickles (my beagle)": a name given in the clause stands for the species words beside it
    named = [f for f in out if not any(w in f.value.lower() for w in PETS)]
    if named:
        generic = [f for f in out if f not in named]
        if len(generic) <= len(named):
            out = named
    return out


_PET_MATERIAL = cjk_compile(r"毛|粮|砂|咖|罐头|零食|(?i:\s*(?:hair|fur|food|litter|dander|cafe|café)\b)")


# --- enumerable preferences ----------------------------------------------------------------------------

DIETS: Mapping[str, str] = {
    "吃素": "vegetarian", "素食": "vegetarian", "素食主义": "vegetarian", "纯素": "vegan", "全素": "vegan",
    "清真": "halal", "不吃猪肉": "no_pork", "不吃牛肉": "no_beef", "不吃辣": "no_spicy", "低糖": "low_sugar",
    "控糖": "low_sugar", "低碳水": "low_carb", "生酮": "keto", "无麸质": "gluten_free", "少油少盐": "low_fat_low_salt",
    "vegan": "vegan", "vegetarian": "vegetarian", "pescatarian": "pescatarian", "halal": "halal", "kosher": "kosher",
    "gluten-free": "gluten_free", "gluten free": "gluten_free", "dairy-free": "dairy_free", "dairy free": "dairy_free",
    "keto": "keto", "low-carb": "low_carb", "low carb": "low_carb", "don't eat pork": "no_pork",
    "no pork": "no_pork", "plant-based": "vegan",
    # what a diet rules out, said as "不吃…" / "no … for me" / "can't do …"
    "不吃肉": "vegetarian", "不吃荤": "vegetarian", "不吃羊肉": "no_lamb", "不吃海鲜": "no_seafood",
    "不吃生的": "no_raw", "不吃红肉": "no_red_meat", "no red meat": "no_red_meat", "no meat": "vegetarian",
    "vegetarians": "vegetarian", "vegans": "vegan", "can't do gluten": "gluten_free",
    "can't do dairy": "dairy_free", "can't have gluten": "gluten_free", "can't have dairy": "dairy_free",
    "intermittent fasting": "intermittent_fasting",
    "轻断食": "intermittent_fasting", "don't eat meat": "vegetarian", "don't eat beef": "no_beef",
    "不喝酒": "no_alcohol", "戒酒": "no_alcohol", "滴酒不沾": "no_alcohol", "don't drink alcohol": "no_alcohol",
    "teetotal": "no_alcohol", "off gluten": "gluten_free", "only eat fish": "pescatarian", "只吃海鲜": "pescatarian",
    "只吃鱼": "pescatarian", "只吃熟的": "no_raw_food", "减脂": "calorie_limit", "低卡": "calorie_limit",
    "calorie diet": "calorie_limit", "不吃主食": "low_carb", "断碳": "low_carb", "don't eat red meat": "no_red_meat",
    "不喝牛奶": "dairy_free", "乳制品不吃": "dairy_free",
}
TONES: Mapping[str, str] = {
    "正式": "formal", "正式一点": "formal", "随意": "casual", "随便一点": "casual", "轻松": "casual", "直接": "direct",
    "直接点": "direct", "温柔": "gentle", "委婉": "gentle", "幽默": "humorous", "别用表情": "no_emoji",
    "不要表情": "no_emoji", "不要emoji": "no_emoji", "别用emoji": "no_emoji", "多用表情": "emoji",
    "formal": "formal", "casual": "casual", "direct": "direct", "blunt": "direct", "gentle": "gentle",
    "humour": "humorous", "humor": "humorous", "funny": "humorous", "no emoji": "no_emoji", "no emojis": "no_emoji",
    "emojis": "emoji",
}
_LANG_CODES: Mapping[str, str] = {
    "中文": "zh", "汉语": "zh", "普通话": "zh", "粤语": "yue", "英语": "en", "英文": "en", "日语": "ja", "韩语": "ko",
    "法语": "fr", "德语": "de", "西班牙语": "es", "葡萄牙语": "pt", "意大利语": "it", "俄语": "ru", "阿拉伯语": "ar",
    "chinese": "zh", "mandarin": "zh", "cantonese": "yue", "english": "en", "japanese": "ja", "korean": "ko",
    "french": "fr", "german": "de", "spanish": "es", "portuguese": "pt", "italian": "it", "russian": "ru",
    "arabic": "ar", "hindi": "hi", "dutch": "nl", "swahili": "sw", "tamil": "ta", "bengali": "bn", "urdu": "ur",
    "turkish": "tr", "polish": "pl", "greek": "el", "hebrew": "he", "vietnamese": "vi", "thai": "th",
    "indonesian": "id", "malay": "ms", "tagalog": "tl", "farsi": "fa", "persian": "fa", "ukrainian": "uk",
    "swedish": "sv", "norwegian": "no", "danish": "da", "finnish": "fi", "irish": "ga", "welsh": "cy",
    "yoruba": "yo", "igbo": "ig", "hausa": "ha", "amharic": "am", "punjabi": "pa", "gujarati": "gu",
    "asl": "ase", "bsl": "bfi", "sign language": "sgn",
    "越南语": "vi", "泰语": "th", "印尼语": "id", "马来语": "ms", "荷兰语": "nl", "土耳其语": "tr", "波兰语": "pl",
    "希腊语": "el", "印地语": "hi", "闽南语": "nan", "闽南话": "nan", "上海话": "wuu", "客家话": "hak", "四川话": "zh",
    "东北话": "zh", "手语": "sgn", "广东话": "yue",
}


@lru_cache(maxsize=16)
def _lexicon_pattern(key: str) -> tuple[re.Pattern[str], dict[str, str]]:
    """One alternation, longest words first, so a scan finds the longest word at each place."""
    lexicon = _LEXICONS[key]
    words = sorted(lexicon, key=len, reverse=True)
    alt = "|".join((r"(?<![A-Za-z])" + re.escape(w) + r"(?![A-Za-z])") if w.isascii() else re.escape(w)
                   for w in words)
    return re.compile(alt, re.IGNORECASE), {w.lower(): v for w, v in lexicon.items()}


def _lexicon_hits(clause: str, lexicon: Mapping[str, str], key: str, confidence: float) -> list[Found]:
    pat, lower = _lexicon_pattern(key)
    return [Found(key, m.group(0), m.start(), m.end(), lower.get(m.group(0).lower()), confidence)
            for m in pat.finditer(clause)]


def diet(clause: str) -> list[Found]:
    return _lexicon_hits(clause, DIETS, "diet", 0.8)


def tone(clause: str) -> list[Found]:
    if not re.search(r"语气|口吻|说话|回复|回答|聊|跟我|对我|表情|tone|with me|reply|replies|answer|emoji|talk|be ",
                     clause, re.IGNORECASE):
        return []
    out = []
    for f in _lexicon_hits(clause, TONES, "reply_tone", 0.7):
        # the words around the tone word are the user's request: "语气要正式", "随意点", "be blunt", "emojis welcome"
        head = re.search(cjk_edges(r"(?:语气|口吻|说话)(?:要|再|可以)?(?:更|稍微|尽量)?$|(?i:\b(?:be|keep it|more|a bit|a little)\s+)$"),
                         clause[max(0, f.start - 8):f.start])
        tail = re.match(cjk_edges(r"(?:一点|一些|点|些)|(?i:\s+(?:welcome|please|pls|is fine|are fine|ok))\b"), clause[f.end:])
        start = f.start - len(head.group(0)) if head else f.start
        end = f.end + (len(tail.group(0)) if tail else 0)
        out.append(Found(f.key, clause[start:end], start, end, f.canonical, f.confidence))
    return out


_SPEAK = re.compile(r"(?:我会说|我会讲|我说|我讲|母语是|我在学|正在学|在学|会一点|i speak|i'?m learning|i am learning|"
                    r"my native language is|native|fluent in|learning|"
                    # the language of the user's home ("我们家说闽南话", "在家讲粤语", "at home we speak Tagalog")
                    r"(?:我们?|我)家(?:里)?(?:都|一般|平时)?(?:说|讲)|在家(?:里)?(?:都|一般|平时)?(?:说|讲)|"
                    r"at home we speak|we speak)\s*", re.IGNORECASE)
# How well the user speaks it, said after the language: "日语只会一点点", "法语也能凑合", "my Mandarin is rusty".
_LEVEL = cjk_compile(r"会一点|一点点|能凑合|凑合|还行|还可以|流利|不太好|一般般|过了?[四六]级|N[1-5]\b|HSK ?\d|母语|"
                    r"(?<![A-Za-z])(?:fluent|rusty|conversational|basic|native|bilingual|trilingual|heritage speaker|"
                    r"my (?:first|second|mother) (?:language|tongue)|i sign|i can get by|get by in|"
                    r"is (?:ok|okay|decent|good|great|terrible|bad|poor|so-so))(?![A-Za-z])", re.IGNORECASE)
# A reply-language request or a translation is not a language the user speaks.
_NOT_SPOKEN = re.compile(r"翻译|翻成|译成|回复|回答|用.{0,4}(?:回|写|说)|(?<![A-Za-z])(?:translate|reply|answer|respond|write)"
                         r"(?![A-Za-z])|in \w+ please", re.IGNORECASE)


def spoken(clause: str) -> list[Found]:
    m = _SPEAK.search(clause)
    if m:
        return [f for f in _lexicon_hits(clause, _LANG_CODES, "languages_spoken", 0.75) if f.start >= m.start()]
    if _LEVEL.search(clause) and not _NOT_SPOKEN.search(clause):
        return _lexicon_hits(clause, _LANG_CODES, "languages_spoken", 0.7)
    return []


# --- numbers: phone, birthday, budget -----------------------------------------------------------------------

_PHONE = re.compile(r"(?<![\dA-Za-z_])(\+?[\d(][\d \-()]{6,18}\d)(?![\d])")  # a Chinese word may touch it: "手机139…"
_PHONE_CUE = re.compile(r"手机|电话|打我|号码|联系我|call me|phone|mobile|cell|my number|whatsapp|reach me|ring me|text me|"
                        r"(?<![A-Za-z])(?:call|ring|text|tel)(?![A-Za-z])",
                        re.IGNORECASE)
_NOT_PHONE = re.compile(r"卡|订单|单号|身份证|账号|card|order|account|invoice|ticket|tracking", re.IGNORECASE)
_ZH_MD = r"[一二三四五六七八九十]{1,3}月[一二三四五六七八九十]{1,3}[日号]"
_BIRTHDAY = re.compile(r"(?:生日(?:是|在)?|出生于|(?<![A-Za-z])born(?: on)?|birthday(?: is|'s)?(?: on)?|"
                       r"turning \d{1,3} on|(?:i'?ll be|i turn) \d{1,3} on)\s*"
                       r"((?:\d{4}年)?\d{1,2}月\d{1,2}[日号]?|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?!\d)|" + _ZH_MD + r"|农历[^\s，,。]{2,8}|(?<=生日 )\d{1,2}\.\d{1,2}(?!\d)|"
                       r"(?<=生日)\d{1,2}\.\d{1,2}(?!\d)|the \d{1,2}(?:st|nd|rd|th)(?: of (?:january|february|march|april|may|june|july|"
                       r"august|september|october|november|december))?|"
                       r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
                       r"\s+\d{1,2}(?:st|nd|rd|th)?|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:january|february|march|"
                       r"april|may|june|july|august|september|october|november|december))", re.IGNORECASE)
# A number followed by another unit is no amount of money ("一百字以内", "1500大卡", "under 300 words").
_NOT_MONEY_UNIT = (r"(?!\s*(?:字|段|句|行|条|页|个|次|遍|天|周|小时|分钟|公里|米|斤|克|卡|大卡|千卡|人|岁|年|号|楼|层|步|"
                   r"(?i:words?|pages?|lines?|paragraphs?|calories|cals?|kcal|km|kms|miles?|steps|minutes?|mins?|hours?|"
                   r"days?|people|years?|sq|square|ft|feet|meters?|metres?)\b))")
_MONEY = cjk_compile(r"((?:(?:around|about|roughly|under|below|up to|no more than|at most|max|大概|大约|最多|顶多|不超过|不要超过|"
                    r"别超过|控制在)\s*)?"
                    r"(?:(?:[一二两三四五六七八九十][一二两三四五六七八九十百千万]*(?:[百千万](?:[一二两三四五六七八九](?![十百千万]))?"
                    r"(?:块钱?|元)?|块钱?|元))" + _NOT_MONEY_UNIT + "|"
                    r"(?:[$€£¥￥₹]\s?\d[\d,.]*\s?[kKwW万千]?)|(?:\d[\d,.]*\s?(?:k|K)?\s?(?:元|块钱?|万|千|rmb|RMB|人民币|"
                    r"dollars?|bucks|euros?|pounds?|quid|usd|USD|eur|EUR|gbp|GBP))|"
                    # "ten grand", "a couple of hundred quid", "five thousand dollars"
                    r"(?:(?:one|two|three|four|five|six|seven|eight|nine|ten|fifteen|twenty|thirty|forty|fifty|a "
                    r"couple of|a few|\d{1,3})\s+(?:grand|thousand|hundred)(?:\s+(?:dollars|pounds|euros|bucks|quid))?)|"
                    r"(?:(?<![\d.,:])(?:\d{1,3}(?:,\d{3})+|\d{3,})(?:\.\d+)?(?![\d.%:])" + _NOT_MONEY_UNIT + r"))"
                    r"(?:\s(?:a|per) (?:month|week|night|year|person|head))?"
                    r"(?:以内|以下|之内|出头|左右|(?: all in| max| or less| tops| limit| cap)(?![A-Za-z]))?)", re.IGNORECASE)
_BUDGET_CUE = re.compile(r"预算|以内|以下|不超过|不要超过|别超过|之内|价位|最多|顶多|封顶|上限|budget|under|max|at most|"
                         r"no more than|up to|\blimit\b|\bcap\b|\bspend\b", re.IGNORECASE)
_CURRENCY = (("$", "USD"), ("dollar", "USD"), ("buck", "USD"), ("usd", "USD"), ("€", "EUR"), ("euro", "EUR"),
             ("eur", "EUR"), ("£", "GBP"), ("pound", "GBP"), ("gbp", "GBP"), ("元", "CNY"), ("块", "CNY"),
             ("rmb", "CNY"), ("人民币", "CNY"), ("¥", "CNY"), ("￥", "CNY"), ("₹", "INR"), ("rupee", "INR"))


def phone(clause: str) -> list[Found]:
    if not _PHONE_CUE.search(clause) or _NOT_PHONE.search(clause):
        return []
    return [f for f in _all(_PHONE, clause, "phone", confidence=0.85) if 7 <= sum(ch.isdigit() for ch in f.value) <= 15]


# "我是九月二十号生的", "三月十二号是我生日": the date before the cue.
_BIRTHDAY_BEFORE = re.compile(r"((?:\d{4}年)?\d{1,2}月\d{1,2}[日号]|" + _ZH_MD + r")(?:生的|出生的?|是我(?:的)?生日)")


def birthday(clause: str) -> list[Found]:
    out = []
    for f in [*_all(_BIRTHDAY, clause, "birthday", confidence=0.85),
              *_all(_BIRTHDAY_BEFORE, clause, "birthday", confidence=0.8)]:
        out.append(Found(f.key, f.value, f.start, f.end, month_day(f.value), f.confidence))
    return out


def month_day(text: str) -> str | None:
    zh = re.search(r"([一二三四五六七八九十]{1,3})月([一二三四五六七八九十]{1,3})[日号]?", text)
    if zh and not re.search(r"农历|阴历|腊月|正月", text):
        month, day = zh_number(zh.group(1)), zh_number(zh.group(2))
        if month and day and 1 <= month <= 12 and 1 <= day <= 31:
            return f"{int(month):02d}-{int(day):02d}"
    iso = re.fullmatch(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})", text.strip())
    if iso and 1 <= int(iso.group(2)) <= 12 and 1 <= int(iso.group(3)) <= 31:
        return f"{iso.group(1)}-{int(iso.group(2)):02d}-{int(iso.group(3)):02d}"  # "1989-11-22"
    m = re.search(r"(?:(\d{4})年)?(\d{1,2})(?:月|\.(?=\d{1,2}$))(\d{1,2})", text.strip())
    if m:
        md = f"{int(m.group(2)):02d}-{int(m.group(3)):02d}"
        return f"{m.group(1)}-{md}" if m.group(1) else md
    try:
        import dateparser  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover
        return None
    parsed = dateparser.parse(text, languages=["en", "zh"], settings={"PREFER_DATES_FROM": "future"})
    return parsed.strftime("%m-%d") if parsed else None


# A number with a unit that is not money ("1500大卡", "10k steps", "三公里"): what it counts is no budget. Read run by
# run (a run of digits, or of Chinese numerals) with the unit looked for right after it — and, inside a run of
# numerals, before a 千卡 it ends with ("五千卡"). The same answer as searching for
# `(?:\d[\d,.]*|[一…万]+)\s*(?:k\s*)?(?:unit)` (tests/test_extract_patterns.py, property), in linear time: that search
# retried a long run without a unit from each of its characters (quadratic: 20,000 numerals took seconds).
_NUMBER_RUN = re.compile(r"\d[\d,.]*|[一二两三四五六七八九十百千万]+")
_UNIT_AFTER = cjk_compile(r"\s*(?:k\s*)?(?:大卡|千卡|卡路里|公里|斤|克|步|"
                         r"(?i:calories|cals?|kcal|km|kms|miles?|steps|kg|lbs?)\b)")


def _other_unit(value: str) -> bool:
    for run in _NUMBER_RUN.finditer(value):
        if _UNIT_AFTER.match(value, run.end()):
            return True
        if not run.group(0)[0].isdigit() and "千卡" in value[run.start() + 1:run.end() + 1]:
            return True  # "五千卡": the numerals end before the unit's 千
    return False


def counts_no_money(value: str) -> bool:
    """Whether `value`'s numbers count something other than money ("一天摄入控制在1500大卡以内")."""
    return _other_unit(value) and _MONEY.search(value) is None


def budget(clause: str) -> list[Found]:
    if not _BUDGET_CUE.search(clause):
        return []
    out = []
    for f in _all(_MONEY, clause, "budget", confidence=0.75):
        value = f.value.rstrip(" ,.")
        out.append(Found(f.key, value, f.start, f.start + len(value), money(value), f.confidence))
    return out



_ZH_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}


def zh_number(text: str) -> float | None:
    """"八千" -> 8000, "两千五" -> 2500, "一万二" -> 12000 (the common spoken forms; None otherwise)."""
    m = re.search(r"[一二两三四五六七八九十][一二两三四五六七八九十百千万]*", text)
    if not m:
        return None
    total, section, digit, last_unit = 0, 0, 0, 1
    for ch in m.group(0):
        if ch in _ZH_DIGITS:
            digit = _ZH_DIGITS[ch]
        else:
            unit = _ZH_UNITS[ch]
            if unit == 10000:
                total, section = (total + section + digit) * unit, 0
            else:
                section += (digit or 1) * unit
            digit, last_unit = 0, unit
    if digit and last_unit >= 100:  # "两千五": the digit after a unit counts one unit down
        digit *= last_unit // 10
    return float(total + section + digit)


def money(text: str) -> str | None:
    m = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    if not m:
        zh = zh_number(text)
        return None if zh is None else f"{zh:g} CNY"
    amount = float(m.group(0).replace(",", ""))
    low = text.lower()
    if re.search(r"[kK千]|\b(?:grand|thousand)\b", text):
        amount *= 1000
    if re.search(r"[wW万]", text):
        amount *= 10000
    cur = next((code for sign, code in _CURRENCY if sign in low), None)
    value = f"{amount:g}"
    return f"{value} {cur}" if cur else value


# --- free-text fields: the common phrasings -------------------------------------------------------------

# Conditions that shape how the user reads, hears or gets around (the bank's `accessibility`, not `medical_history`):
# sight, hearing, mobility aids, reading and autism. `disability` re-keys a medical value that names one.
DISABILITY = (r"红绿色盲|色盲|色弱|阅读障碍|读写障碍|坐轮椅|轮椅|助听器|听力不好|耳背|眼睛不太好|视力不好|老花眼|腿脚不方便|行动不便|"
              r"自闭症(?:谱系)?|孤独症|阿斯伯格|聋人|耳聋|失聪|听障(?:人士)?|视障(?:人士)?|盲人|失明|读屏(?:软件)?|假肢|义肢|拐杖|助行器|"
              r"(?i:screen reader|partially sighted|colou?r ?blind(?:ness)?|dyslexi[ac]|wheelchair(?: user)?|hearing aids?|"
              r"hard of hearing|low vision|mobility scooter|deaf|blind in one eye|legally blind|autistic|autism|"
              r"on the (?:autism|autistic) spectrum|asperger'?s|prosthetic (?:leg|arm|limb)|walking stick|crutches|"
              r"(?:use|walk with) a (?:cane|walker)|large[- ]print)")
_DISABILITY = re.compile(DISABILITY)


def disability(value: str) -> bool:
    """Whether a value names a disability ("自闭症谱系", "左腿装了假肢", "autistic"): such a value is `accessibility`."""
    return _DISABILITY.search(value) is not None


_END = r"(?=[，,。.!！?？；;]|\s+(?:but|and|so|because|since|lol)\b|但|不过|所以|因为|$)"
# The end of a list of things the user likes or follows: like `_END`, but "X and Y" goes on to Y (the items are split
# later) unless "and" starts a clause of its own ("…hiking and I go every week", "…and it shows").
_END_LIST = (r"(?=[，,。.!！?？；;]|\s+(?:but|so|because|since|lol)\b|\s+(?i:and|or)\s+(?i:i|i'm|i've|we|we're|it|it's|my|"
             r"they|he|she|you|then|that|this|there|so|also|nothing|not)\b|但|不过|所以|因为|$)")
# News topics end before how often the user wants them: "news on X and Y each morning".
_END_NEWS = _END_LIST[:-1] + (r"|\s+(?i:each|every|daily|weekly|in the mornings?|please|religiously|closely|avidly|"
                              r"obsessively|regularly|faithfully|passionately|like a hawk)\b)")
# The topic of news the user asks to be watched, then the news word ("教育政策方面的消息", "比亚迪的动态"): not a pronoun.
_WATCHED_NEWS = (r"(?!他|她|它|你|我|这|那)([\u4e00-\u9fffA-Za-z0-9]{2,8}?)(?:方面|相关|领域|行业)?的?"
                 r"(?:消息|资讯|动态|新闻)")


_FREE: tuple[tuple[str, re.Pattern[str], float], ...] = (
    ("medical_history", cjk_compile(r"(?:我有|我得了|我患有|确诊了?|查出(?:来)?)([\u4e00-\u9fff]{1,8}?(?:病|症|炎|压|糖|瘤|癌|"
                                   r"综合征|障碍|过敏性鼻炎|哮喘|痛风|甲减|甲亢))" + _END), 0.75),
    ("medical_history", cjk_compile(r"(?:diagnosed with|i have|i've got|i suffer from|i'm|had an?|i had)\s+((?:type \d |"
                                   r"chronic |mild |severe )?(?:diabetes|asthma|ibs|crohn's|coeliac|celiac|epilepsy|adhd|"
                                   r"migraines?|hypertension|high blood pressure|arthritis|eczema|anxiety|"
                                   r"depression|a pacemaker|lactose intolerant|pregnant|\d+ weeks pregnant|"
                                   r"gout|psoriasis|sleep apnea|tinnitus|long covid|(?:knee|hip) replacement|"
                                   r"hypothyroidism|hyperthyroidism|endometriosis|pcos|fibromyalgia|ms|copd|glaucoma|"
                                   r"heart condition|bad back|slipped disc|herniated disc|insomnia|vertigo))\b",
                                   re.IGNORECASE), 0.75),
    ("medical_history", cjk_compile(r"^\s*((?:my )?(?:migraines?|asthma|eczema|arthritis|back pain|insomnia|vertigo|"
                                   r"anxiety|ibs|gout|tinnitus))\s+(?:is|are|has been|have been)\s+(?:my|acting|flaring|"
                                   r"killing|bad|worse|back)\b", re.IGNORECASE), 0.65),
    ("medical_history", re.compile(r"((?:我)?(?:在)?备孕|怀孕[\u4e00-\u9fff0-9]{0,4}|孕[早中晚]期|哺乳期|糖尿病|高血压|"
                                   r"痛风|哮喘|甲减|甲亢|胃溃疡|晕车)"), 0.7),
    ("accessibility", re.compile(r"(" + DISABILITY + r")"), 0.8),
    ("hobbies", cjk_compile(r"(?:迷上了?|爱好是|爱好就是|业余(?:时间)?(?:喜欢|爱)?|平时(?:喜欢|爱)|周末(?:一般|常|都|会)"
                           r"(?:去|喜欢)|热衷于?)([\u4e00-\u9fffA-Za-z]{1,8}?)" + _END), 0.65),
    ("hobbies", cjk_compile(r"(?i:in my (?:free|spare) time i|my hobby is|my hobbies are|i'm really into|i'm into|"
                           r"i'm obsessed with|i do|i play|i love)\s+([a-z][a-z\- ]{1,30}?)" + _END_LIST), 0.55),
    ("hobbies", cjk_compile(r"^\s*(?i:i)\s+(knit|paint(?: \w+)?|climb|surf|run|swim|cycle|crochet|bake|garden|"
                           r"fish|skate|box|dance|sing|draw|sew|hike)\b(?!\s+(?:a|an|the|my|our|his|her|their)\b)"), 0.6),
    ("hobbies", cjk_compile(r"^\s*((?:[a-z][a-z\-]* ){0,2}[a-z][a-z\-]*) is my (?:\w+ )?(?:hobby|habit|passion|thing|"
                           r"obsession|happy place|therapy)\b", re.IGNORECASE), 0.6),
    ("hobbies", re.compile(r"^\s*([\u4e00-\u9fff]{2,6})是我的(?:爱好|命|最爱|生活|精神食粮)"), 0.6),
    # "weekends are for bouldering", "Sunday mornings are for the allotment": what the user's free time is for
    ("hobbies", cjk_compile(r"^\s*(?i:(?:my )?(?:weekends|evenings|sundays|saturdays|(?:sunday|saturday) mornings|summers))"
                           r"\s+(?i:are (?:for|all about|reserved for))\s+([a-z][a-z\- ]{1,30}?)" + _END_LIST), 0.55),
    ("likes", cjk_compile(r"(?:i have a soft spot for|can'?t get enough of|i'?m a sucker for|i'?m a (?:big|huge) fan of|"
                         r"i adore|i'?m crazy about|i'?m addicted to)\s+([^,.;!?]{2,40}?)"
                         r"(?:\s+(?:lately|these days|recently|right now))?" + _END_LIST, re.IGNORECASE), 0.6),
    ("likes", cjk_compile(r"(?:就爱|特别爱|最爱|超爱|巨爱|贼爱|超级爱|超喜欢|巨喜欢|最喜欢)((?:吃|喝|看|听|玩)?[\u4e00-\u9fffA-Za-z]{1,6}?)(?:的)?" + _END),
     0.6),
    ("brands", cjk_compile(r"(?i:i'?m an?|we'?re an?)\s+([A-Z][\w&'\-]+)\s+(?:guy|girl|person|fan|family|household|"
                          r"loyalist|user|man|woman)\b"), 0.65),
    ("brands", cjk_compile(r"^\s*([A-Z][\w&'\-]+(?: [A-Z][\w&'\-]+)?) is the only (?:\w+ )?brand\b"), 0.7),
    ("brands", re.compile(r"(?i:shop at|do our (?:big |weekly )?shop at|i buy from|i always buy|only buy)\s+"
                          r"([A-Z][\w&'\-]+)"), 0.6),
    ("brands", re.compile(r"我(?:自己)?(?:一直)?用的是([A-Za-z\u4e00-\u9fff]{2,8}?)的"), 0.6),
    # "洗衣液一直用蓝月亮的", "奶茶我一直点霸王茶姬的伯牙绝弦": the maker before 的 after a habitual verb
    ("brands", re.compile(r"(?:一直|向来|从来都|基本都|都是|一般都|平时都)(?:用|买|喝|穿|点|坐|住|开|订)(?:的是)?"
                          r"([A-Za-z][\w&\-]*(?: [A-Z][\w&\-]*)?|[\u4e00-\u9fff]{2,5}?)(?:家)?的"), 0.6),
    # "我每次去麦当劳都点…", "去喜茶老规矩": the shop the user always goes to
    ("brands", re.compile(r"(?:每次|一般|平时|经常)(?:都)?去([A-Za-z][\w&\-]*|[\u4e00-\u9fff]{2,5}?)(?:都|就|一般)?(?:点|买|喝|吃)"), 0.6),
    ("brands", re.compile(r"^\s*去([A-Za-z][\w&\-]*|[\u4e00-\u9fff]{2,5}?)(?=老规矩|老样子|照旧)"), 0.6),
    # "护肤品只认雅诗兰黛和资生堂", "相机我只认准Canon": the makers the user trusts alone
    ("brands", re.compile(r"只认准?\s*(?![你我他她它这那])((?:[A-Za-z][A-Za-z0-9&\-]*|[\u4e00-\u9fff]{2,5}?)(?:\s*[和跟、/]\s*"
                          r"(?:[A-Za-z][A-Za-z0-9&\-]*|[\u4e00-\u9fff]{2,5}?))?)(?=的|家的|这个|牌|[，,。.!！?？；;\s]|$)"), 0.6),
    # "I always book through Airbnb", "I always buy Asics", "my go-to at Chipotle is", "my usual from Pret"
    ("brands", re.compile(r"(?i:i always (?:book (?:through|with|on)|fly(?: with)?|use|order from|get|wear|drive)|"
                          r"my go-to at|my usual (?:from|at)|i only (?:fly|use|wear|drive|buy))\s+"
                          r"([A-Z][\w&'\-]+(?: [A-Z][\w&'\-]+)?)"), 0.6),
    ("travel_preferences", cjk_compile(r"(?:i'?d (?:always )?rather take|i (?:always )?prefer|always book|i always take)\s+"
                                      r"((?:the |an? )?[\w\- ]{2,25}?)\s+(?:than|over|to)\s+(?:fly|flying|driving|"
                                      r"the train|a train|trains|planes?|buses|the bus)\b", re.IGNORECASE), 0.6),
    ("travel_preferences", cjk_compile(r"(?:坐火车|坐高铁|坐飞机|订票|订机票|出行|出差|坐车)[^，,。]{0,4}?(?:一定要|只坐|都选|只选|要)"
                                      r"([\u4e00-\u9fff]{1,6}?)" + _END), 0.6),
    ("education", cjk_compile(r"(?:在读|读的是|正在读|我读|我在读|考上了?)([\u4e00-\u9fffA-Za-z0-9]{2,10}?)" + _END), 0.65),
    # "北大毕业", "本科毕业" — not when it is about to happen ("马上毕业", "快毕业了", "明年毕业")
    ("education", re.compile(r"([\u4e00-\u9fffA-Za-z]{1,8}毕业)"), 0.6),
    ("education", cjk_compile(r"(?:学的是|专业是|学的|主修)([\u4e00-\u9fffA-Za-z]{1,8}?)" + _END), 0.6),
    ("education", cjk_compile(r"(?i:majoring in|studying|i study|degree in|graduated from|i'm doing|doing|finished)\s+"
                             r"((?:my |an? |a part-time |part-time )?(?:[\w'\-]+ ){0,3}?(?:degree|masters?|master's|"
                             r"phd|mba|bachelor's|a-levels|gcses|bootcamp|course|diploma)(?: (?:in|at) [\w' \-]{2,30})?)"
                             + _END), 0.65),
    # degrees and schools: "大专学历", "在读博", "研二", "本科在武汉大学读的新闻", "研究生去了港大", "a BA in philosophy",
    # "PhD from Cambridge", "a part-time MSc in data science", "third-year medical student"
    ("education", re.compile(r"((?:本科|硕士|研究生|博士|大专|专科|高中|中专|初中)(?=学历|毕业))"), 0.65),
    ("education", re.compile(r"((?:在读|正在读)(?:博士?|研|硕士|本科|大[一二三四])|(?<![\u4e00-\u9fff])(?:研[一二三]|博[一二三四五]|"
                             r"大[一二三四]|高[一二三])(?![\u4e00-\u9fff]{2})|(?<=已经)大[一二三四五](?=了))"), 0.6),
    ("education", re.compile(r"(?:本科|硕士|研究生|博士|读研|读博|大学)(?:是|都是)?(?:在|去了|考到了?|读的是)"
                             r"([\u4e00-\u9fffA-Za-z]{1,10}?(?:大学|学院|大|中科院|研究所))(?=读|念|学|[，,。.!！\s]|$)"), 0.65),
    ("education", cjk_compile(r"(?:大学|学院|大)(?:读的|念的|学的)([\u4e00-\u9fff]{2,8}?)" + _END), 0.6),
    ("education", cjk_compile(r"(?<![A-Za-z])((?:a |an )?(?:part-time |full-time )?(?:BA|BSc|BS|MA|MSc|MS|MBA|PhD|MPhil|BEng|MEng|JD|LLB|LLM|"
                             r"BFA|MFA|DPhil)(?: (?:in|from|at) [\w'&\- ]{2,30}?)?)(?=[,.;!?]|\s+(?:through|which|and|but|so|"
                             r"last|this|next|in \d|from|at)\b|$)"), 0.65),
    ("education", re.compile(r"((?i:(?:first|second|third|fourth|final|1st|2nd|3rd|4th)[- ]year (?:[\w\-]+ ){0,2}student)|"
                             r"(?i:sophomore|freshman|junior|senior|grad student|undergrad|postgrad) at [A-Z][\w&'\-]+"
                             r"(?: [A-Z][\w&'\-]+)?)"), 0.6),
    ("hometown", re.compile(r"(?:老家|家乡|祖籍)(?:是|在)([\u4e00-\u9fff]{2,8}?)(?=的|人|那边|那儿|[，,。.!！\s]|$)"), 0.7),
    ("likes", cjk_compile(r"(?i:i have a thing for|i'?m a (?:huge |big |total )?nerd for|i'?m obsessed with|i'?m a sucker for)\s+"
                         r"([^,.;!?]{2,40}?)" + _END_LIST), 0.6),
    ("news_topics", re.compile(r"([\u4e00-\u9fffA-Za-z0-9]{2,8}(?:的)?新闻)"), 0.6),
    # "帮我留意一下教育政策方面的消息", "关注下新能源相关的资讯": the topic of the news the user asks to be watched
    ("news_topics", re.compile(r"(?:留意|关注|盯着|跟进|盯一下)(?:一下|下)?" + _WATCHED_NEWS), 0.6),
    # "比亚迪的动态都帮我留意": the same, said the other way round
    ("news_topics", re.compile(r"(?:^|[，,。；;])(?:另外|还有)?" + _WATCHED_NEWS
                               + r"(?:都|也)?(?:帮我|给我)?(?:留意|关注|盯着|推给我|推送给我)"), 0.6),
    ("news_topics", cjk_compile(r"(?i:news (?:on|about)|updates on|i follow|headlines about|anything about|anything on|"
                               r"keep me posted on|stories about|stories on)\s+"
                               r"([\w][\w' \-]{1,30}?)" + _END_NEWS), 0.6),
    ("usual_order", re.compile(r"(?:老样子|老规矩|照旧|老三样)(?:点|来|要)?[，,：:\s]*(?:还是)?([^。.!！?？]{2,24}?)(?=[。.!！?？]|$)"),
     0.7),
    ("usual_order", cjk_compile(r"(?i:my usual is|the usual:|the regular:|i always (?:get|order|go for)|"
                               r"i usually (?:get|order)|my go-to is|make that)\s+([^,.;!?]{2,60}?)(?=[.;!?]|, |\s+from\b|$)"),
     0.7),
    # "每次都点麦辣鸡腿堡套餐", "一般就点燕麦拿铁": what the user always orders
    ("usual_order", cjk_compile(r"(?:每次都|一般都|一般就|一直|每回都|基本都)(?:是)?点(?:的是)?([^，,。.!！?？；;]{2,14}?)" + _END), 0.6),
    # "night nurse here", "fellow teacher here" — not what another field introduces ("sesame allergy here", "vegan here")
    ("occupation", cjk_compile(r"^\s*(?!(?:[A-Za-z\-]+ ){0,2}(?i:allerg\w*|vegan|vegetarian|diabetic|coeliac|celiac|"
                              r"pescatarian|newbie|noob|lurker|beginner)\b)((?:[A-Za-z\-]+ ){0,2}[A-Za-z\-]+) here\b"), 0.55),
    ("occupation", cjk_compile(r"(?i:i work as|i'm working as|my job is|i'm employed as)\s+(?:an? |the )?([a-z][a-z \-]{1,30}?)"
                              + _END), 0.7),
    # "我在医院当护士", "我做外贸的" — not what a company does ("在一家做无人机的公司上班")
    ("occupation", re.compile(r"(?:我在[\u4e00-\u9fffA-Za-z0-9]{1,10}?|我)(?:当|做|干)((?:(?!的(?:" + _FIRM + r"))"
                              r"[\u4e00-\u9fffA-Za-z]){1,8}?)(?=[，,。.!！?？；;]|的(?!" + _FIRM + r")|$)"), 0.6),
    ("occupation", re.compile(r"(?:本人|我是)(?:一名|一个|个)?([\u4e00-\u9fffA-Za-z]{1,6}(?:部的|组的|科的))"), 0.6),
    # "做了十年设计", "干了二十多年会计": the work the user has done for years
    ("occupation", re.compile(r"(?:^|[，,。；;]|我|已经|都|但是|不过|可是|以前|之前)(?:做|干)了"
                              r"(?:[一二三四五六七八九十两几多\d]+|好几|十几|二十几|二十多)年(?:的)?"
                              r"(?!饭|家务|梦)([\u4e00-\u9fffA-Za-z]{2,6}?)(?=[，,。.!！?？；;]|了|$)"), 0.6),
    ("employer", re.compile(r"(?:我在|在|入职了?|加入了?|就职于|供职于)([\u4e00-\u9fffA-Za-z0-9]{2,6}?)(?:上班|工作|实习|做|当|搬砖)"),
     0.65),
    ("employer", re.compile(r"(?:跳槽(?:到|去)了?|跳到了?|换工作(?:到|去)了?|换到了?|转到了?|入职了?|加入了?)"
                            r"([\u4e00-\u9fffA-Za-z0-9]{2,8}?)(?:了|啦|啊|上班|工作|，|,|。|！|!|\s|$)"), 0.7),
    ("employer", re.compile(r"(?i:i(?:'ve| have)? (?:just )?(?:switched|changed jobs?) to|i(?:'ve| have)? "
                            r"(?:just )?started (?:a new job )?at|i(?:'ve| have)? (?:just )?joined|i'm now at|now working at)\s+"
                            r"((?:the )?[A-ZÀ-ÖØ-Þ][\w&'.\-]*(?: [A-ZÀ-ÖØ-Þ][\w&'.\-]*){0,3})"), 0.7),
    # "senior SWE at Stripe", "I'm a nurse at St Mary's": a job word, then "at" and a capitalised name
    ("employer", cjk_compile(r"(?i:(?:^\s*|\bi'?m |\bi am )(?:an? )?(?:[\w\-]+ ){0,3}?(?:engineer|developer|dev|swe|sde|sre|"
                            r"designer|manager|nurse|teacher|doctor|analyst|consultant|scientist|researcher|lawyer|"
                            r"accountant|intern|student|sophomore|freshman|fresher|pm|architect|editor|writer|chef|"
                            r"barista|lecturer|professor|recruiter|paralegal|pharmacist)s?\s+at\s+)"
                            r"((?:the )?[A-ZÀ-ÖØ-Þ][\w&'.\-]*(?: [A-ZÀ-ÖØ-Þ][\w&'.\-]*){0,3})"), 0.7),
    ("employer", re.compile(r"(?i:i work at|i work for|i'm at|i've been at|working at|working in|working for|joined|i'm with)\s+"
                            r"((?:the )?[A-Z][\w&'.\-]*(?: [A-Z][\w&'.\-]*){0,3})"), 0.7),
    # "别在周末找我", "不要在工作时间给我打电话": the time the user is not to be reached, with the words that say so
    ("contact_hours", re.compile(r"((?:别|不要|请勿)在(?:工作日|周末|周[一二三四五六日]|晚上|早上|上午|下午|中午|白天|凌晨|上班|下班|工作|休息|午休|"
                                 r"[\d一二三四五六七八九十两]{1,2}点)[^，,。.!！?？；;]{0,8}?(?:给我|跟我)?"
                                 r"(?:找我|联系我|打扰我?|打我电话|打电话|发消息|推送))"), 0.65),
    # when the user may be contacted: a time span next to a contact verb
    ("contact_hours", re.compile(r"((?:工作日|周末|周[一二三四五六日]到周[一二三四五六日]|周[一二三四五六日]|晚上|早上|上午|下午|中午|白天)"
                                 r"[^，,。.!！?？；;才]{0,12}?)才?(?:都?可以|都行|随时)?(?:找我|联系我|打扰|打我电话|给我打电话|回消息|有空)"),
     0.65),
    # the hours and the "don't" said with them are the user's words ("12点到2点别打电话", "晚上十点以后就不要给我推送了")
    ("contact_hours", re.compile(r"((?:晚上|早上|上午|下午|中午|凌晨)?[\d一二三四五六七八九十两]{1,2}点半?(?:到[\d一二三四五六七八九十两]{1,2}点半?)?"
                                 r"(?:以?后|以?前|之前|之后)?[ ]*(?:就)?(?:别|不要|请勿|勿)(?:给我|跟我)?"
                                 r"(?:联系我?|打电话|打扰我?|发消息|找我|推送|发通知))"), 0.65),
    ("contact_hours", cjk_compile(r"(?i:\b((?:do not|don't|dont|never) (?:call|message|text|ping|email|contact|bother) me "
                                 r"(?:before|after|on|during|at|in the)\s[^,.;!?]{1,25}?)" + _END + r")"), 0.65),
    ("contact_hours", cjk_compile(r"(?i:\b(?:reachable|available|around|free|contactable)\s+|\b(?:call|text|message|ping|reach|"
                                 r"contact) me\s+)((?:any ?time |only )?(?:before|after|between|on|during|from|in the)\s"
                                 r"[^,.;!?]{1,30}?|(?:evenings?|mornings?|weekdays?|weekends?)[^,.;!?]{0,30}?)" + _END), 0.65),
    ("contact_hours", cjk_compile(r"(?i:\b(any ?time (?:before|after) \d{1,2}(?::\d{2})?\s?(?:am|pm)?))"), 0.6),
    ("contact_hours", cjk_compile(r"(?i:\b((?:after|before) \d{1,2}(?::\d{2})?\s?(?:am|pm)?) i'?m (?:offline|unavailable|asleep))"),
     0.65),
    ("schedule", cjk_compile(r"((?:每天|每周[一二三四五六日天]?|每个?月|工作日|周末|平时|一般)[^，,。.!！?？；;]{2,20}?)" + _END), 0.55),
    ("schedule", cjk_compile(r"(?i:i'm off|i work|i'm usually|i get up at|i wake up at|up at)\s+([^,.;!?]{2,30}?)" + _END),
     0.55),
)
_TIME_WORD = cjk_compile(r"\d|[点号]|小时|早上|晚上|上午|下午|中午|凌晨|周[一二三四五六日末]|月[初底]|am\b|pm\b|morning|"
                        r"evening|night|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday|shift",
                        re.IGNORECASE)
_REQUEST = cjk_compile(r"帮我|帮忙|看看|查一?下|查查|推荐|天气|做什么|吃什么|(?i:\b(?:can you|could you|please find|"
                      r"what's the weather|forecast)\b)")
_NOT_HOBBY = re.compile(r"^(?:你|您|我|他|她|这|那|什么|哪|it|that|this|you|the idea)", re.IGNORECASE)


_USUAL = cjk_compile(r"^\s*(?:去[^，,。\s]{1,6}?)?(?:还是|按|照)?(?:老样子|老规矩|照旧|老三样|(?i:\bthe usual\b|\bmy usual\b))\s*[，,：:]\s*"
                    r"(?:还是|就)?(?!帮|给|来一?份|再|也|吧|please|pls|thanks)([^，,。.!！?？；;]{2,24}?(?:[，,]\s*[^，,。.!！?？；;]{1,12}?){0,2}?)"
                    r"(?=[，,]\s*(?:谢谢|谢啦|thanks|thank you|ta\b|cheers|你记一下|记一下|麻烦了|去|在|到|送到|from\b|at\b)|"
                    r"[。.!！?？；;]|$)|"
                    # "My go-to at Chipotle is a burrito bowl, double chicken, no sour cream"
                    r"(?i:my go-to at [A-Z][\w&'\- ]{1,25}? is|my usual (?:from|at) [A-Z][\w&'\- ]{1,25}?\s*[—–:-])\s*(?:an? )?"
                    r"([^.;!?]{2,60}?)(?=[.;!?]|$)")


# A kind of news narrowed to what the user wants of it ("体育新闻只要中超的", "加点体育新闻，主要是CBA"): the narrower
# words are the topic in place of the kind (`news_narrowed`).
NEWS_NARROWED = re.compile(r"([\u4e00-\u9fffA-Za-z0-9]{2,8}?(?:的)?新闻)[^，,。.!！?？；;]{0,6}?[，,]?\s*(?:主要是|主要看|只要|只看|"
                           r"就看|重点是|重点看)\s*([\u4e00-\u9fffA-Za-z0-9][\u4e00-\u9fffA-Za-z0-9 ]{0,11}?)"
                           r"(?=的|相关|方面|那块|[，,。.!！?？；;]|$)")


def news_narrowed(sentence: str) -> list[tuple[int, int, int, int]]:
    """(kind start, kind end, topic start, topic end) of each kind of news the sentence narrows ("体育新闻" and
    "中超" in "体育新闻只要中超的")."""
    return [(*m.span(1), *m.span(2)) for m in NEWS_NARROWED.finditer(sentence)]


def sentence_level(sentence: str) -> list[Found]:
    """What only a whole sentence says, across its commas: a usual order after "老样子，" ("老样子，拿铁"), animals
    counted and then named ("两条狗，分别叫旺财和来福"), and a bare place named beside the user's time zone ("我这边是UTC+7，
    曼谷", "I'm UTC+5:30, Bangalore")."""
    out = [Found("usual_order", m.group(g).strip(), m.start(g), m.start(g) + len(m.group(g).strip()), None, 0.7)
           for m in _USUAL.finditer(sentence) for g in (1, 2) if m.group(g)]
    out += [f for f in _all(_NAME_HERE, sentence, "name", confidence=0.75) if f.value.split()[0] not in _NOT_NAMES]
    # "my name is Olusegun, but please use Segun", "it's Marguerite but honestly just call me Daisy"
    out += [f for f in _all(_GO_BY_EN, sentence, "preferred_name", group=2, confidence=0.8) if f.value not in _NOT_NAMES]
    out += [f for f in _all(_NAME_BUT_EN, sentence, "name", confidence=0.75) if f.value.split()[0] not in _NOT_NAMES]
    out += _listed_pets(sentence)  # across the comma: "两条狗，分别叫旺财和来福"
    if timezone(sentence) and not _NOT_LIVING.search(sentence) and not re.search(r"差|ahead|behind", sentence):
        for p in find_places(sentence):
            before = sentence[max(0, p.start - 4):p.start]
            if re.search(cjk_edges(r"(?:[，,]\s*|\bin\s+|^\s*)$"), before) and not _WORK_CUE.search(sentence) and not re.match(
                    cjk_edges(r"\s*(?:时间|(?i:time)\b)"), sentence[p.end:p.end + 6]):
                out.append(Found("city", p.text, p.start, p.end, p.canonical, 0.7))
    return out


# What comes before a news topic in a request ("每天早上给我推一下财经新闻", "我关注新能源汽车的新闻").
_NEWS_LEAD = re.compile(r"^.*(?:推送|推荐|推|关注|发我|发|看|给我|加点|多|些|点|一下)(?=[\u4e00-\u9fffA-Za-z0-9]{2,}(?:的)?新闻$)")


# A routine says when: a clock time, a day of the week, a length of time, or "every …" with an activity that is not
# reading, ordering or receiving something ("每周六下午上课", "一般十点睡", "每天练半小时" — not "周末真的累",
# "一般点鸳鸯锅", "每天早上都要看").
_CLOCK = (r"\d{1,2}[:：.]\d{2}|\d{1,2}\s?点|[一二两三四五六七八九十]{1,3}点|\d{1,2}\s?(?i:am|pm)\b|半小时|小时|分钟|"
          r"\d+号|周[一二三四五六日天]|星期[一二三四五六日天]|礼拜[一二三四五六日天]|每周[一二三四五六日天]")
_ROUTINE = cjk_compile(r"(?:" + _CLOCK + r")|^(?:每天|每周|每个?月|工作日)(?!.{0,8}(?:看|推|发|点|打|路上|通勤|都在|愉快|累))|"
                      r"^(?!周末|平时|一般)[A-Za-z]")


# What a "like" is about decides its field: the way answers are written is a reply preference (other rules read it),
# a seat, a stay or a pace of travel is a travel preference, a listed pastime ("打羽毛球", "钓鱼") a hobby.
_LIKE_ABOUT_REPLIES = cjk_compile(r"回答|回复|解释|讲解|说话|例子|总结|语气|(?i:\b(?:answers?|replies|reply|feedback|reports?|"
                                 r"explanations?|examples?|emails?)\b)")
_LIKE_ABOUT_TRAVEL = cjk_compile(r"住|酒店|民宿|靠窗|过道|节奏|景点|(?i:\b(?:hotels?|hostels?|flights?|seats?|aisle|window|airbnbs?|"
                                r"trains?)\b)")


def like_field(value: str) -> tuple[str, str] | None:
    """(field, value) for something the user says they like, or None when it is about the replies."""
    if _LIKE_ABOUT_REPLIES.search(value):
        return None
    if _LIKE_ABOUT_TRAVEL.search(value):
        return "travel_preferences", value
    from usermem.understand.tagger import word_pattern

    hobby = word_pattern("hobby")
    m = hobby.search(value) if hobby is not None else None
    if m is not None and len(value) - len(m.group(0)) <= 1:  # "打羽毛球" -> 羽毛球, "钓鱼"
        return "hobbies", m.group(0)
    return "likes", value


# Countries said as where one works ("我在日本工作"): no employer (the gazetteer holds cities and regions).
_COUNTRY = cjk_compile(r"中国|美国|英国|日本|韩国|德国|法国|意大利|西班牙|加拿大|澳洲|澳大利亚|新西兰|俄罗斯|印度|泰国|越南|马来西亚|"
                       r"印尼|菲律宾|荷兰|瑞士|瑞典|挪威|丹麦|芬兰|爱尔兰|葡萄牙|巴西|墨西哥|阿根廷|迪拜|阿联酋|以色列|土耳其|埃及|南非|"
                       r"(?i:china|the us|the usa|america|the uk|britain|england|scotland|wales|japan|korea|germany|france|"
                       r"italy|spain|canada|australia|new zealand|russia|india|thailand|vietnam|malaysia|indonesia|"
                       r"the philippines|the netherlands|holland|switzerland|sweden|norway|denmark|finland|ireland|"
                       r"portugal|brazil|mexico|argentina|the uae|israel|turkey|egypt|south africa)")
_NOT_YET = re.compile(r"(?:马上|快要?|就要|即将|明年|今年|下半年|年底|还没|没|还有[一二两三半\d])[\u4e00-\u9fff]{0,4}毕业$")


def free_text(clause: str) -> list[Found]:
    out: list[Found] = []
    for key, pat, conf in _FREE:
        for m in pat.finditer(clause):
            g = m.lastindex or 0
            value = m.group(g).strip() if g else m.group(0).strip()
            if not value or (key == "hobbies" and _NOT_HOBBY.match(value)):
                continue
            if key == "employer" and (places_in := find_places(value)) and places_in[-1].end == len(value) \
                    and re.fullmatch(r"[A-Z][\w&'.\-]*(?: [A-Z&][\w&'.\-]*)*", firm := value[:places_in[-1].start].strip()) \
                    and not find_places(firm):
                value = firm  # "Infosys Bangalore": the firm, then where (the place rules take the place)
            if key == "employer" and (re.search(r"要|想|考虑|换|找|打算|准备|家|这|那", value) or find_places(value)
                                      or _COUNTRY.fullmatch(value) or re.match(r"\s*#?\d", clause[m.end(g):m.end(g) + 3])):
                continue  # "I moved to Chicago", "我在日本工作" name a place; "I'm at Blk 214 …" is an address
            if key == "occupation" and re.match(cjk_edges(r"个|一下|下|点|了|成|完|好|early bird|night owl|newbie|noob|"
                                                r"(?:i|we|you|it|they|he|she|moved|live[sd]?|living|born|been|from|came|"
                                                r"got|am|is|are|was|were)\b"), value, re.I):
                continue  # "帮我做个预算表" is a request, "early bird here" a habit
            if key == "schedule" and not _TIME_WORD.search(value):
                continue  # "每天挤地铁" is a complaint, "每天早上七点起" a routine
            if key == "schedule" and not _ROUTINE.search(value):
                continue  # "周末真的累", "一般点鸳鸯锅", "每天早上都要看": a mood, an order, a habit of reading — no routine
            if key == "contact_hours":
                value = re.sub(r"(?:不要|别|不|请勿)$", "", value).strip()
                if not value or not _TIME_WORD.search(value):
                    continue  # "ping me on Teams" names a channel, not hours
            if key == "schedule" and _REQUEST.search(clause):
                continue  # "帮我看看这个周末苏州的天气" asks for something this weekend; it is no routine
            start = m.start(g) if g else m.start()
            start += len(m.group(g)) - len(m.group(g).lstrip()) if g else 0
            if key == "education" and value.endswith("毕业") and _NOT_YET.search(clause[max(0, start - 2):start] + value):
                continue  # "马上毕业", "快毕业了", "明年毕业": about to happen, no school or degree
            if key == "news_topics" and (lead := _NEWS_LEAD.match(value)):
                value, start = value[lead.end():], start + lead.end()  # "给我推送点篮球新闻": the topic
            if key == "likes":
                routed = like_field(value)
                if routed is None:
                    continue
                start += value.find(routed[1])
                key, value = routed
            out.append(Found(key, value, start, start + len(value), None, conf))
    return out


_LEXICONS: Mapping[str, Mapping[str, str]] = {"diet": DIETS, "reply_tone": TONES, "languages_spoken": _LANG_CODES}


# A habit said about oneself ("我平时喜欢弹吉他", "I do pottery classes on Wednesdays") around a listed activity
# (`word_classes.json`, class "hobby").
_HOBBY_CUE = cjk_compile(r"喜欢|爱|常|经常|每周|每天|每个|平时|周末|一般|迷上|在学|开始|好多年|坚持|业余|没事|闲|练|玩了|"
                        r"(?i:\b(?:love|enjoy|into|play|do|go|every|weekends?|twice|keen|learning|started|hooked|"
                        r"obsessed|practi[cs]e)\b)")
_ME = cjk_compile(r"我|(?i:\bi(?!人)\b|\bi'm\b|\bi've\b|\bmy\b)")
_NOT_HOBBY_CLAUSE = cjk_compile(r"帮我|推荐|[?？吗]|(?i:\b(?:can|could) you\b|\bany (?:good |tips|ideas)|\brecommend\b)")


def hobbies(clause: str) -> list[Found]:
    if not (_HOBBY_CUE.search(clause) and _ME.search(clause)) or _NOT_HOBBY_CLAUSE.search(clause):
        return []
    from usermem.understand.tagger import word_pattern

    pattern = word_pattern("hobby")
    return [] if pattern is None else [Found("hobbies", m.group(0), m.start(), m.end(), None, HOBBY_CONFIDENCE)
                                       for m in pattern.finditer(clause)]


HOBBY_CONFIDENCE = 0.5  # below a schedule's (0.55): "每周六上午都去游泳" stays one schedule


def typed(clause: str) -> list[Found]:
    out: list[Found] = []
    for rule in (places, timezone, names, family, pets, diet, tone, spoken, phone, birthday, budget, free_text,
                 hobbies):
        out += rule(clause)
    return out
