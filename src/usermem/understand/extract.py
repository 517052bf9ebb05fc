"""Background extraction (seed 000 exercise 3): conversation -> candidate memories. Proposes, never writes.

Two extractors with one output type (`model.Candidate`):
- deterministic patterns in Chinese and English for the common fields: allergies, contact channel and
  e-mail address, reply format and length, language, occupation, city, likes/dislikes, report format,
  "以后都用X / from now on use X", "别/不要/don't X", "改成/换成/switch to X";
- an LLM prompt restricted to the extractable fields, JSON-schema output (key, kind, value, confidence,
  supporting message), validated; invented fields, unsupported evidence and bad values are dropped,
  and any failure falls back to the patterns.

Only the user's own turns are read. Questions, hypotheticals, jokes ("开玩笑的", "just kidding"), other
people's preferences and one-off requests ("这次", "this time") yield nothing. When the user changes their
mind inside one conversation, the last statement per field wins. Whether a value is *sensitive* is
never decided here: every candidate goes through the write pipeline's deterministic guards.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from usermem.model import Candidate, Kind, Source
from usermem.policy.contracts import ContractSet, FieldContract
from usermem.policy.pii import PIIKind, detect
from usermem.understand import rules
from usermem.understand.filters import (
    ASKS,
    DISOWN_TAIL,
    FICTION,
    NEGATED_VALUE,
    NEGATIVE_OK,
    OTHERS_PARTICULARS,
    QUESTION_START,
    REPLY_FIELDS,
    SPEAKER,
    SUBJECT_OTHER,
    SUPPOSITION,
    UNSAID,
    allowed,
    clause_spans,
    denied_value,
    disowned_earlier,
    errand_for_other,
    hypothetical_only_after,
    is_correction,
    mask_quotes,
    not_a_relative,
    reasons,
    reply_request,
    sentence_spans,
)
from usermem.understand.filters import (
    OTHERS as FILTER_OTHERS,
)
from usermem.understand.filters import (
    REPORTED as FILTER_REPORTED,
)
from usermem.understand.llm import LLMClient
from usermem.understand.text import Message, cjk_compile, cjk_edges, coerce_messages, normalise
from usermem.understand.usermodel import detect_signals

# --- value lexicons (canonical values for enumerable fields) --------------------------------------------

REPORT_FORMATS: Mapping[str, str] = {
    "markdown": "markdown", "md": "markdown", "word": "word", "docx": "word", "pdf": "pdf", "excel": "excel",
    "xlsx": "excel", "ppt": "ppt", "pptx": "ppt", "powerpoint": "ppt", "html": "html", "latex": "latex",
    "纯文本": "plain text", "plain text": "plain text",
}
LANGUAGES: Mapping[str, str] = {
    "中文": "zh", "汉语": "zh", "普通话": "zh", "简体中文": "zh", "chinese": "zh", "mandarin": "zh",
    "英文": "en", "英语": "en", "english": "en", "日语": "ja", "日文": "ja", "japanese": "ja",
    "法语": "fr", "french": "fr", "德语": "de", "german": "de", "西班牙语": "es", "spanish": "es",
    "繁体字": "zh-Hant", "繁体中文": "zh-Hant", "繁体": "zh-Hant", "粤语": "yue", "广东话": "yue", "韩语": "ko",
    "韩文": "ko", "korean": "ko", "dutch": "nl", "荷兰语": "nl", "italian": "it", "意大利语": "it",
    "portuguese": "pt", "葡萄牙语": "pt", "russian": "ru", "俄语": "ru", "cantonese": "yue",
}
_LANG_ZH = "|".join(sorted((w for w in LANGUAGES if not w.isascii()), key=len, reverse=True))
_LANG_EN = "|".join(sorted((w for w in LANGUAGES if w.isascii()), key=len, reverse=True))
CHANNELS: Mapping[str, str] = {
    "邮件": "email", "邮箱": "email", "email": "email", "e-mail": "email", "mail": "email",
    "电话": "phone", "打电话": "phone", "手机": "phone", "call": "phone", "phone": "phone",
    "短信": "sms", "text": "sms", "sms": "sms", "texts": "sms",
    "微信": "wechat", "wechat": "wechat", "whatsapp": "whatsapp", "telegram": "telegram", "slack": "slack",
    "发短信": "sms", "signal": "signal", "viber": "viber", "kakao": "kakao", "line": "line", "钉钉": "dingtalk",
    "飞书": "feishu", "企业微信": "wecom", "qq": "qq", "imessage": "imessage", "messenger": "messenger",
    "discord": "discord", "kakaotalk": "kakao", "teams": "teams",
}
REPLY_FORMATS: Mapping[str, str] = {
    "列表": "bullets", "要点": "bullets", "分点": "bullets", "条目": "bullets", "bullet points": "bullets",
    "bullets": "bullets", "bullet": "bullets", "表格": "table", "table": "table", "tables": "table",
    "段落": "prose", "prose": "prose", "paragraphs": "prose", "plain paragraphs": "prose", "连贯的文字": "prose",
    "整段": "prose", "分步骤": "steps", "分步骤写": "steps", "step-by-step": "steps", "step by step": "steps",
    "numbered": "numbered", "编号": "numbered", "分小标题": "headings", "小标题": "headings", "headings": "headings",
    "headers": "headings",
}
CONCISE = ("简洁", "精简", "简短", "短一点", "短一些", "短点", "简单点", "简单一点", "少说点", "言简意赅", "长话短说",
           "别太长", "不要太长", "别那么长", "不要那么长", "别啰嗦", "不要啰嗦", "一页以内", "一页纸",
           "concise", "brief", "shorter", "short answer", "short replies", "keep it short", "short and sweet",
           "less wordy", "to the point", "tl;dr", "one page", "两行以内", "三行以内", "三句话以内", "一句话说完",
           "一段话说完", "段落短一点", "two lines max", "one line", "a few lines", "in two lines", "tl;dr first",
           "one paragraph", "一段话", "one sentence", "one-sentence", "one-liners", "一两句话")
DETAILED = ("详细", "长一点", "展开说", "多说点", "具体一点", "详尽", "detailed", "more detail", "longer",
            "elaborate", "in depth", "in-depth", "thorough", "go long", "long-form", "越详细越好")

STANDING = ("以后", "今后", "往后", "从现在起", "从现在开始", "从今天起", "一律", "统一", "默认", "一直", "总是",
            "每次", "都用", "都要", "都发", "都给", "习惯", "偏好", "更喜欢", "喜欢", "希望", "请始终",
            "from now on", "going forward", "in future", "in the future", "by default", "always", "every time",
            "prefer", "i like", "please keep", "from here on")
CHANGE = ("改成", "换成", "改为", "换为", "改用", "换用", "还是用", "switch to", "change to", "instead",
          "rather than", "actually use", "no longer")
ONE_OFF = ("这次", "这一次", "这篇", "这个回答", "这份", "今天", "明天", "刚才这", "写一封", "写封", "write an email",
           "write a letter", "this time", "this one", "for now", "this once", "tomorrow",
           "just this", "today")
JOKE = ("开玩笑", "哈哈", "呵呵", "逗你", "骗你", "说着玩", "lol", "lmao", "jk", "just kidding", "kidding", "haha",
        "😂", "🤣", "😜")
# Latin joke words count as words only ("makkelijker" holds no "jk").
_JOKE_RE = re.compile("|".join(rf"(?<![a-z]){re.escape(w)}(?![a-z])" if w.isascii() else re.escape(w) for w in JOKE))
JOKE_RETRACT = re.compile(r"^\s*(?:开玩笑的|开个玩笑|逗你的|骗你的|说着玩的|哈哈+|just kidding|jk|kidding|"
                          r"i'?m kidding|lol)[\s!！.。~]*", re.IGNORECASE)
_JOKE_INLINE = cjk_compile(r"^.*(?:开玩笑的|开个玩笑|逗你的|骗你的|说着玩的|just kidding|i'?m kidding|\bjk\b)"
                          r"[\s,，!！.。~]*", re.IGNORECASE)
HYPOTHETICAL = cjk_compile(r"(如果|假如|假设|要是|万一|梦想|比方说|打个比方|就当|\bif\b|\bsuppose\b|\bimagine\b|\bwhat if\b|"
                          r"\bsomeday\b|\bone day\b|\bi'?d love to\b|\blet'?s say\b|(?:^|[,;:—–-]\s*)say (?:i|i'm|we|my)\b|"
                          r"\bassuming\b|\bin theory\b)", re.IGNORECASE)
QUESTION = re.compile(r"([?？]\s*$|吗\s*[。.]?$|呢\s*[。.]?$)")
# Another person as the subject: their preferences are not the user's.
OTHERS = ("朋友", "同事", "老婆", "老公", "妻子", "丈夫", "儿子", "女儿", "孩子", "父母", "爸爸", "妈妈", "男朋友",
          "女朋友", "friend", "colleague", "wife", "husband", "my son", "daughter", "my kids", "parents",
          "mother", "father", "brother", "sister", "我老婆", "我老公", "我妻子", "我丈夫", "我儿子", "我女儿", "我孩子", "我妈", "我爸", "我朋友", "我同事",
          "我老板", "我男朋友", "我女朋友", "我家人", "my wife", "my husband", "my son", "my daughter", "my kid",
          "my mom", "my mum", "my dad", "my friend", "my colleague", "my boss", "my partner", "my boyfriend",
          "my girlfriend")

OCCUPATIONS_EN = frozenset(["engineer", "developer", "programmer", "doctor", "physician", "surgeon", "nurse", "teacher", "professor", "lecturer", "lawyer", "attorney", "accountant", "auditor", "designer", "manager", "director", "student", "researcher", "scientist", "analyst", "consultant", "writer", "author", "journalist", "editor", "chef", "cook", "driver", "pilot", "pharmacist", "dentist", "architect", "founder", "freelancer", "salesperson", "sales", "marketer", "marketing", "photographer", "artist", "musician", "translator", "interpreter", "therapist", "psychologist", "librarian", "technician", "electrician", "plumber", "mechanic", "farmer", "officer", "clerk", "cashier", "banker", "trader", "investor", "entrepreneur", "ceo", "cto", "cfo", "intern", "tutor", "coach", "pm", "recruiter", "secretary", "assistant", "administrator", "veterinarian", "vet", "paramedic", "firefighter", "policeman", "soldier", "actor", "actress", "dev", "swe", "sde", "sre", "devops", "hr", "paralegal", "midwife",
                            "carer", "caregiver", "barista", "bartender", "waiter", "waitress", "baker", "butcher",
                            "plasterer", "carpenter", "builder", "welder", "courier", "postman", "receptionist",
                            "sommelier", "optometrist", "physio", "physiotherapist", "radiologist", "anaesthetist",
                            "anesthetist", "surveyor", "underwriter", "actuary", "statistician", "economist"])
OCCUPATION_ZH_SUFFIX = re.compile(r"(师|员|生|家|工|者|经理|总监|主管|老板|医生|护士|律师|会计|司机|教授|主任|"
                                  r"销售|顾问|创始人|店主|编辑|记者|厨师|作家|老师|博士|硕士|专家|总裁|总经理|CEO|"
                                  r"ceo|合伙人|实习生|工程师|研究员|分析师|架构师|设计师|程序员|产品经理|会计师)$")
CITIES_ZH = tuple(sorted(["北京", "上海", "天津", "重庆", "广州", "深圳", "杭州", "南京", "苏州", "成都", "武汉", "西安", "长沙", "郑州", "青岛", "大连", "宁波", "厦门", "福州", "济南", "合肥", "沈阳", "哈尔滨", "长春", "石家庄", "太原", "南昌", "南宁", "昆明", "贵阳", "兰州", "西宁", "银川", "乌鲁木齐", "拉萨", "呼和浩特", "海口", "三亚", "无锡", "常州", "佛山", "东莞", "珠海", "中山", "惠州", "温州", "绍兴", "嘉兴", "金华", "台州", "扬州", "徐州", "南通", "烟台", "潍坊", "洛阳", "桂林", "香港", "澳门", "台北", "高雄", "新加坡", "东京", "大阪", "首尔", "纽约", "伦敦", "巴黎", "柏林", "悉尼", "墨尔本", "多伦多", "温哥华", "洛杉矶", "旧金山", "西雅图", "芝加哥", "波士顿"], key=len, reverse=True))
NOT_PLACES = ("公司", "家里", "家", "这里", "那里", "外地", "国外", "国内", "单位", "学校", "路上", "开会", "加班",
              "上班", "出差")
LIKE_OBJECT_STOP = cjk_compile(r"^(你|您|它|他|她|这|那|this|that|it|you|your|the idea|them|him|her|to know)\b",
                              re.IGNORECASE)
NEGATION_STOP = ("忘", "担心", "客气", "着急", "急", "管", "怕", "介意", "生气", "难过", "打扰", "动", "走", "知道",
                 "forget", "worry", "mind", "hesitate", "bother", "panic", "be sorry", "be late", "miss", "know",
                 "have", "want", "think", "understand", "care", "feel", "get me wrong", "let ")

_SELF_EMAIL_CUES = ("邮箱", "邮件", "发到", "发给我", "发我", "email", "e-mail", "mail", "send", "reach me",
                    "contact me", "inbox")
_OTHER_EMAIL_CUES = ("抄送", "同事", "老板", "他的", "她的", "cc ", "colleague", "boss", "his ", "her ")

ACCUMULATE = frozenset({"likes", "dislikes", "allergy", "children", "pets", "hobbies", "brands", "languages_spoken",
                        "medical_history", "accessibility", "news_topics", "education", "travel_preferences"})
# When two fields claim the same words, the more specific meaning wins (an allergy is not also a dislike).
_PRIORITY: Mapping[str, int] = {"allergy": 9, "medical_history": 8, "diet": 7, "email": 7, "phone": 7,
                                "reply_length": 6, "reply_format": 6, "report_format": 6, "language": 6,
                                "contact_channel": 6, "contact": 5, "occupation": 4, "city": 4,
                                "likes": 1, "dislikes": 1}
MAX_ITEMS = 20
# A stage-1 field probability at which the message is taken to be about that field (when a tagger span and a rule
# hit of another field claim the same words; the rule's field must be under `FIELD_FEATURE_THRESHOLD`).
_FIELD_SURE = 0.5
_SPECIFIC = frozenset({"reply_length", "reply_format", "report_format", "language", "contact_channel", "contact"})
# "别/不要/don't X" counts as a standing dislike only with a word that makes it lasting.
_STANDING_NEG = ("以后", "今后", "往后", "再也", "永远", "from now on", "never again", "any more", "anymore", "ever again")
_CONF_EXPLICIT = 0.85  # "以后都用X", "my email is X", "I'm allergic to X"
_CONF_STATED = 0.75  # "我喜欢X", "I'm a nurse"
_CONF_IMPLIED = 0.6


@dataclass(frozen=True, slots=True)
class _Hit:
    key: str
    value: Any  # the user's own words
    confidence: float
    canonical: Any = None  # a normalised form beside the value (enum-like fields)
    sure: bool = True  # a rule hit sure of its field (rules.Found.sure)


def _any(text: str, words: Iterable[str]) -> bool:
    return any(w in text for w in words)


def _lookup(text: str, lexicon: Mapping[str, str]) -> str | None:
    """The canonical value of the longest lexicon word in `text` (word-bounded for Latin words)."""
    found = _lookup_word(text, lexicon)
    return found[1] if found else None


def _lookup_word(text: str, lexicon: Mapping[str, str]) -> tuple[str, str] | None:
    """(the longest lexicon word as written in `text`, its canonical value); case-insensitive."""
    best: tuple[int, str, str] | None = None
    low = text.lower()
    for word, value in lexicon.items():
        if word.lower() not in low:  # cheap pre-check; the compiled pattern decides word boundaries
            continue
        m = _word_pattern(word).search(text)
        if m is not None and (best is None or len(word) > best[0]):
            best = (len(word), m.group(0), value)
    return (best[1], best[2]) if best else None


@lru_cache(maxsize=4096)
def _word_pattern(word: str) -> re.Pattern[str]:
    """One lexicon word as a compiled pattern (word-bounded and case-insensitive for Latin words): compiled
    once, not on every message (the `re` module's own cache is too small for every lexicon)."""
    if word.isascii():
        return re.compile(r"(?<![a-z])" + re.escape(word) + r"(?![a-z])", re.IGNORECASE)
    return re.compile(re.escape(word))


def _as_written(original: str, word: str) -> str:
    """`word` (found in the normalised, lower-cased text) in the user's own spelling."""
    m = re.search(re.escape(word), normalise_keep_case(original), re.IGNORECASE)
    return m.group(0) if m else word


def _clean(value: str) -> str:
    value = value.strip(" \t,，。.!！~、;；:：\"'“”‘’()（）")
    value = re.sub(r"(了|啦|的|吧|呀|哦|喔|嘛|哈)+$", "", value)
    value = re.sub(r"\s+(too|as well|a lot|very much|so much|really)$", "", value, flags=re.IGNORECASE)
    return value.strip(" \t,，。.!！~、")


def _clause_after(text: str, start: int, limit: int = 24) -> str:
    """The rest of the clause from `start`, up to punctuation or a conjunction."""
    rest = text[start:start + limit * 2]
    rest = re.split(cjk_edges(r"[，,。.!！？?；;\n]|(?:但是|不过|而且|因为|所以|\bbut\b|\band\b|\bbecause\b|\bso\b)"), rest)[0]
    return rest[:limit]


# --- per-field patterns -----------------------------------------------------------------------------------

_ALLERGY_ZH = re.compile(r"我(?:对|有)?([^，,。.!！？?；;\s]{1,12}?)(?:严重)?过敏")
_ALLERGY_ZH3 = re.compile(r"(?:^|[，,、])\s*(?:还|也|并且|而且|是|其实是|应该是)?对([^，,。.!！？?；;\s]{1,12}?)(?:严重)?过敏")
# "花生过敏，严重的那种", "医生确认是腰果过敏": the allergen opens the clause (or follows 是), no 我 needed.
_ALLERGY_ZH4 = re.compile(r"(?:^|[，,、])\s*(?:[^，,。]{0,6}?(?:确认|诊断|查出|检查出|测出)(?:了)?(?:是|为|出)?|"
                          r"(?:其实|应该|就)?是)?([\u4e00-\u9fff]{1,6}?)(?:严重|轻微)?过敏(?![原体吗么])")
_NOT_ALLERGY_HEAD = re.compile(r"^[我也还都就又很太更挺]|有点|有些|容易|经常|会|不|没|皮肤|季节|轻微|严重|什么|哪|谁|啥")
_ALLERGY_ZH2 = re.compile(r"我(?:有|是)?过敏(?:原|体质)?(?:是|有)?[:：]?([^，,。.!！？?；;\s]{1,12})")
_ALLERGY_EN = cjk_compile(r"(?:^\s*|\b(?:i'?m|i am|i'?ve always been|i have been|i'?m also|also)\s+)(?:very |severely |"
                         r"really |super |deathly |mildly )?allergic to\s+"
                         r"([a-z][a-z \-]{1,40}?)(?=[,.;!?—–]|\s+(?:and\s+i|so|but|though|which|lol)\b|$)")
_ALLERGY_EN3 = cjk_compile(r"^\s*([a-z][a-z \-]{1,25}?)\s+(?:makes my (?:mouth|throat|lips|skin|face) (?:itch|swell|tingle)|"
                          r"gives me hives|makes me break out|makes me swell up)\b")
_ALLERGY_EN2 = cjk_compile(r"\bi have (?:an? |a severe |severe )?([a-z][a-z \-]{1,30}?) allergy\b|"
                          # "sesame allergy here", "nut allergy over here": the user introducing themself by it
                          r"^\s*(?:(?:severe|bad|mild) )?([a-z][a-z\-]{1,20}(?: [a-z][a-z\-]{1,20})?) allerg(?:y|ies) "
                          r"(?:over )?here\b")

_OCC_ZH = re.compile(r"我(?:现在)?(?:是|是一名|是一个|是个|是名|当|做)(?:一名|一个|个|名)?([^\s，,。.!！？?；;的]{2,10})")
_OCC_ZH2 = re.compile(r"我(?:的工作|的职业)是([^\s，,。.!！？?；;]{2,10})")
_OCC_ZH3 = re.compile(r"我(?:在[^\s，,。]{1,12})?(?:当|做|担任)([^\s，,。.!！？?；;]{2,8})")
_OCC_ZH4 = re.compile(r"我是(?:做|搞)([^\s，,。.!！？?；;]{1,6})的")
_OCC_EN = cjk_compile(r"\b(?:i'?m|i am|i work as|i'?m working as|my job is|i'?ve been working as)\s+"
                     r"(?:an? |the )?((?:[a-z\-]+ ){0,3}[a-z\-]+)")

_CITY_ZH = re.compile(r"(?:我(?:现在|目前|一直|最近)?(?:住在|住|生活在|人在|在)|"
                      r"(?:我|最近|刚|刚刚|已经|前不久)*(?:定居在|定居|搬到了|搬到|搬去了|搬去))"
                      r"([\u4e00-\u9fff]{2,8})")
_CITY_EN = cjk_compile(r"\b(?i:i live in|i'?m based in|i am based in|i moved to|i'?ve moved to|i'?m living in|"
                      r"i relocated to|i'?m now in|i reside in|i recently moved to|i just moved to)\s+((?:[A-Z][a-zA-Z\-]+)(?:\s+[A-Z][a-zA-Z\-]+){0,2})")

_LIKES_ZH = re.compile(r"我(?:自己)?(?:很|也|还|最|特别|非常|超|真的|一直|比较)?(?:喜欢|爱吃|爱喝|爱看|爱听|偏爱|爱)"
                       r"([^，,。.!！？?；;]{1,20})")
_DISLIKES_ZH = re.compile(r"我(?:自己)?(?:很|也|还|最|特别|非常|超|真的|一直|比较)?(?:讨厌|不喜欢|不爱吃|不爱喝|不爱|受不了|"
                          r"不吃|烦)([^，,。.!！？?；;]{1,20})")
# Without 我: "最讨厌别人发六十秒语音", "吃不惯海鲜", "特别怕冷" (at the start of a clause).
_DISLIKES_ZH2 = re.compile(r"(?:^|[，,])\s*(?:我这人|我)?(?:真的|一直|特别|最|很|超|实在)?(?:讨厌|受不了|吃不惯|喝不惯|看不惯|"
                           r"吃不了|怕)([^，,。.!！？?；;的]{1,16})")
_LIKES_EN = cjk_compile(r"\bi (?:really |also |just |absolutely |do )?(?:like|love|enjoy|adore|prefer)\s+"
                       r"([^,.;!?]{1,60})", re.IGNORECASE)
_FAN_EN = cjk_compile(r"\bi'?m (?:a )?(?:big |huge )?fan of\s+([^,.;!?]{1,40})", re.IGNORECASE)
_FAV_EN = cjk_compile(r"\bmy favou?rite [a-z ]{1,20}? is\s+([^,.;!?]{1,30})", re.IGNORECASE)
_DISLIKES_EN = cjk_compile(r"\bi (?:really |also |just )?(?:hate|dislike|can'?t stand|don'?t like|do not like|"
                          r"don'?t eat|never eat)\s+([^,.;!?]{1,40})", re.IGNORECASE)
# Imperatives only: at the start of a clause ("以后别再推荐X", "不要香菜"), never "要不要", "特别", "别人".
_NEG_ZH = re.compile(r"(?:^|[，,、；;。!！\s])[^，,、；;。!！？?\s]{0,5}?(?:以后|今后|往后|你|请你)?(?:都|也|千万|请)?"
                     r"(?<!要)(?:别|不要|不用|甭)"
                     r"(?:再|给我|跟我|帮我|再给我)?([^，,。.!！？?；;]{1,20})")
_NEG_ZH_COMPOUNDS = re.compile(r"特别|区别|别人|分别|别的|级别|类别|识别|告别|个别|差别|性别|辨别|别处|别说|别提|别看")
_NEG_EN = re.compile(r"(?:^|[,;:.!?]\s*)(?:and |also |so )?(?:please )?(?:don'?t|do not|never|stop)\s+(?:ever )?"
                     r"(?:again )?([^,.;!?]{2,40})", re.IGNORECASE)
_NEG_VERB_STRIP = re.compile(r"^(?:再|给我|跟我|帮我|推荐|推|发|用|放|加|说|提|安排|买|点|订|"
                             r"recommend|suggest|send me|send|use|add|put|give me|show me|include|book|order)\s*",
                             re.IGNORECASE)
_USE_ZH = re.compile(r"(?:都|就|还是|全部|统一|一律|默认|改|换|请)?(?:用|使用|改成|换成|改为|换为|改用|换用)"
                     r"([^，,。.!！？?；;吧]{1,16})")
_USE_EN = cjk_compile(r"\b(?:use|switch to|change to|go with|stick to|stick with|in|as)\s+([a-z][a-z \-]{0,24})")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}")


# Things one is "allergic" to only in jest: habits, work, people, times of day.
_NOT_ALLERGEN = cjk_compile(r"早起|起床|上班|加班|开会|工作|学习|考试|周一|星期一|老板|领导|数学|运动|"
                           r"\b(?:mondays?|mornings?|work|meetings?|deadlines?|exercise|maths?|people)\b", re.IGNORECASE)


def _allergy(s: str) -> list[_Hit]:
    out = []
    for m in _ALLERGY_ZH.finditer(s):
        thing = m.group(1)
        if "对" in thing or _any(thing, ("不", "没", "会不会", "是不是")):
            continue  # "我儿子对花生过敏" is someone else; "我不过敏" is no allergy
        if _NOT_ALLERGEN.search(thing):
            continue  # "我对早起严重过敏" is a joke about mornings, not an allergy
        out.append(_Hit("allergy", _clean(thing), _CONF_EXPLICIT))
    if not out and not re.search(r"他|她|朋友|孩子|儿子|女儿|老婆|老公|妈|爸", s):
        for m in _ALLERGY_ZH3.finditer(s):
            out.append(_Hit("allergy", _clean(m.group(1)), _CONF_EXPLICIT))
    if not out and not re.search(r"他|她|朋友|孩子|儿子|女儿|老婆|老公|妈|爸|宝宝|家人", s):
        for m in _ALLERGY_ZH4.finditer(s):
            if not _NOT_ALLERGY_HEAD.search(m.group(1)) and "对" not in m.group(1):  # "主人公对猫过敏": someone else
                out.append(_Hit("allergy", _clean(m.group(1)), _CONF_EXPLICIT))
    if not out:
        for m in _ALLERGY_ZH2.finditer(s):
            out.append(_Hit("allergy", _clean(m.group(1)), _CONF_EXPLICIT))
    low = s.lower()
    for pat in (_ALLERGY_EN, _ALLERGY_EN2, _ALLERGY_EN3):
        for m in pat.finditer(low):
            out.append(_Hit("allergy", _clean(m.group(m.lastindex or 1)), _CONF_EXPLICIT))
    return [h for h in out if h.value and not _NOT_ALLERGEN.search(str(h.value))
            and not re.match(r"(?:点|些|一点|有点|容易|经常|季节性?)$", str(h.value))]


# A time phrase closing a value of a field that names no time ("Monzo in June", "Infosys since 2019").
_MONTHS = r"jan(?:uary)?|feb(?:ruary)?|march|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
_TIME_TAIL = re.compile(r"(?i)\s+(?:(?:back )?in|since|from|as of|starting)\s+(?:(?:early |late |mid-?)?(?:" + _MONTHS + r")\b"
                        r"(?:\s+\d{4})?|\d{4}\b|(?:last|this|next) (?:year|month|week|summer|spring|autumn|fall|winter)\b)"
                        r"[\s,.!]*$")
_FREQUENCY_TAIL = re.compile(r"(?i)\s+(?:every (?:morning|day|night|evening|week)|each (?:morning|day|night)|daily|"
                             r"once a day|twice a day|at night|in the morning)[\s,.!]*$")


# Which tail a field's value loses: the time for fields that name no time, the frequency for a medication.
_TAILS: Mapping[str, re.Pattern[str]] = {
    **dict.fromkeys(("employer", "occupation", "city", "work_city", "hometown", "education", "pets", "children",
                     "spouse", "name", "preferred_name", "diet", "allergy", "likes", "hobbies", "brands",
                     "usual_order"), _TIME_TAIL),
    "medical_history": _FREQUENCY_TAIL}


def _untimed(key: str, value: str) -> str:
    """`value` without the time phrase closing it ("Monzo in June" -> "Monzo", "levothyroxine every morning" ->
    "levothyroxine"), for the fields in `_TAILS`."""
    pattern = _TAILS.get(key)
    tail = pattern.search(value) if pattern is not None else None
    return value[:tail.start()] if tail is not None and tail.start() else value
_REACHED = cjk_compile(r"(?i:(?<!on )\b(?:calls?|chat|notifications?|messages?|texts?|ping|reach(?:ed)?|contact(?:ed)?)\b)|"
                      r"联系我|找我|打电话|打扰|发消息|推送|通知")
_WHAT_THE_FIRM_DOES = re.compile(r"[^\s，,。；;]{1,8}?的(?:公司|企业|工厂|厂|店|单位|机构|团队|平台)")


def _occupation(s: str) -> list[_Hit]:
    out = []
    for pat in (_OCC_ZH2, _OCC_ZH, _OCC_ZH3):
        for m in pat.finditer(s):
            if _WHAT_THE_FIRM_DOES.match(s, m.start(1)):
                continue  # "在一家做无人机的公司上班": what the company makes, not the user's job
            x = _clean(m.group(1))
            x = re.sub(r"^(一名|一个|个|名)", "", x)
            if OCCUPATION_ZH_SUFFIX.search(x) and not _any(x, ("用户", "会员", "客户", "版", "素食", "吃素")):
                out.append(_Hit("occupation", x, _CONF_STATED))
        if out:
            return out[:1]
    m4 = _OCC_ZH4.search(s)
    if m4:
        return [_Hit("occupation", _clean(m4.group(1)), _CONF_IMPLIED)]
    low = s.lower()
    for m in _OCC_EN.finditer(low):
        words = m.group(1).split()
        # the occupation noun is the last word of the phrase that is in the lexicon
        for end in range(len(words), 0, -1):
            if words[end - 1] in OCCUPATIONS_EN:
                return [_Hit("occupation", " ".join(words[:end]), _CONF_STATED)]
    return out


def _city(s: str, original: str) -> list[_Hit]:
    for m in _CITY_ZH.finditer(s):
        x = m.group(1)
        if x.startswith(NOT_PLACES):
            continue
        for city in CITIES_ZH:
            if x.startswith(city):
                return [_Hit("city", city, _CONF_STATED)]
        cm = re.match(r"([\u4e00-\u9fff]{2,4})市", x)
        if cm and not re.search(r"[一个另这那哪某些大小]", cm.group(1)):
            return [_Hit("city", cm.group(1), _CONF_STATED)]
    for m in _CITY_EN.finditer(original):
        return [_Hit("city", m.group(1), _CONF_STATED)]
    return []


def _email(s: str, original: str) -> list[_Hit]:
    low = s.lower()
    if not _any(low, _SELF_EMAIL_CUES) or _any(low, _OTHER_EMAIL_CUES):
        return []
    found = [f for f in detect(original, [PIIKind.EMAIL])]
    if not found:
        return []
    return [_Hit("email", original[found[-1].start:found[-1].end], _CONF_EXPLICIT)]


@lru_cache(maxsize=256)
def _channel_pattern(word: str) -> re.Pattern[str]:
    return re.compile(re.escape(word) if not word.isascii() else r"(?<![a-z@.])" + re.escape(word) + r"(?![a-z])")


# The phone as a device is no channel unless a contact verb holds it ("打我手机", "手机联系", "call my phone").
_DEVICE_WORDS = frozenset({"手机", "phone"})
_DEVICE_BEFORE = re.compile(r"(?:打|拨|联系|找|通知|call|ring|text|reach|contact|by|via|over the|on the|on my)\s*(?:我的?|me on (?:my|the)|"
                            r"my|the)?\s*$")
_DEVICE_AFTER = cjk_compile(r"\s*(?:联系|找我|打给我|号|number|call|calls?\b|is best|works best|only)")


# A channel the user does not read: "微信下班后我是不看的", "email我常常漏看", "WhatsApp I never check".
_UNREAD_AFTER = cjk_compile(r"[^，,。.!！?？;；]{0,10}?(?:我)?(?:是|基本|一般|常常|经常|很少)?(?:不看|不回|看不到|漏看|不怎么看|很少看|"
                            r"不常看|(?i:\s*i (?:never|rarely|hardly ever|don'?t) (?:check|read|look at)))")


def _channels(s: str) -> list[_Hit]:
    """Contact channel (positive) and contact constraints (negative), e.g. "只接受邮件，不要打电话"."""
    low = s.lower()
    positive: list[str] = []
    negative: list[str] = []
    words: dict[str, str] = {}
    for word, channel in sorted(CHANNELS.items(), key=lambda kv: -len(kv[0])):
        if word not in low:
            continue
        for m in _channel_pattern(word).finditer(low):
            before = low[max(0, m.start() - 6):m.start()]
            if word in _DEVICE_WORDS and not (_DEVICE_BEFORE.search(low[max(0, m.start() - 10):m.start()])
                                              or _DEVICE_AFTER.match(low, m.end())):
                continue  # "手机上看表格太宽", "the phone goes in a drawer": the device, not a way to reach the user
            if _UNREAD_AFTER.match(low, m.end()):
                continue  # "微信下班后我是不看的", "email我常常漏看": not the way to reach the user (no rule either)
            if re.search(r"(不要|别|不用|不接|不想|不接受|don'?t|do not|never|no|not)\s*\S{0,3}$", before):
                if channel not in negative:
                    negative.append(channel)
            elif channel not in positive and channel not in negative:
                positive.append(channel)
                words.setdefault(channel, word)
    contact_verbs = ("联系", "通知", "沟通", "找我", "接受", "发我", "给我发", "打给我", "回复我", "reach",
                     "contact", "notify", "get in touch", "email me", "text me", "call me back", "message me",
                     "只", "only", "prefer", "就好", "就行", "最方便", "比较方便", "easiest", "best for me",
                     "works best", "preferred", " > ", "上叫我", "上找我", "上联系我", "留言", "私聊", "私信", "is best",
                     "'s best", "mostly on", "reachable on", "ping me", "hit me up", "dms", "dm me", "slack me",
                     "whatsapp me", "telegram me", "signal me", "teams me")
    if not (positive or negative) or not (_any(low, contact_verbs) or negative):
        return []
    if re.search(r"(?<![a-z])(?:call me|just say|call him|call her)\s+(?:dr\.?\s|mr\.?\s|ms\.?\s|mrs\.?\s)?[a-z]", low) \
            and positive == ["phone"] and not negative:
        return []  # "call me Jo": a form of address, not a channel
    out = []
    if positive and (_any(low, contact_verbs)):
        out.append(_Hit("contact_channel", words[positive[0]], _CONF_EXPLICIT if "只" in low or "only" in low
                        else _CONF_STATED, positive[0]))
    if negative:
        clause = re.search(r"(不要|别|不用|不接|不想|don'?t|do not|never|no)[^，,。.!！？?；;]{0,16}", low)
        out.append(_Hit("contact", _clean(clause.group(0)) if clause else f"no {negative[0]}", _CONF_STATED))
    return out


_REPLY_CONTEXT = ("回复", "回答", "说", "讲", "写", "解释", "总结", "以后", "reply", "replies", "answer", "response",
                  "keep it", "explain", "write", "by default", "from now on", "talk")


def _reply_length(s: str) -> list[_Hit]:
    low = s.lower()
    if not _any(low, _REPLY_CONTEXT):
        return []  # "A Brief History of Time" is a book, not a length preference
    if _any(low, ("太长了", "too long", "又长", "太短了", "too short")) and not _any(low, STANDING):
        return []  # a complaint is pushback (reflexive verification), not yet a stated preference
    m = re.search(cjk_edges(r"\b(?:replies|answers|responses|reply|answer|response|it)\s+(short|brief)\b"), low)
    if m:
        return [_Hit("reply_length", m.group(1), _CONF_STATED, "short")]
    word = _first(low, CONCISE)
    if word and not _any(low, ("不够详细", "不要简", "别简")):
        return [_Hit("reply_length", word, _CONF_STATED, "short")]
    word = _first(low, DETAILED)
    if word and not _any(low, ("不要详细", "别太详细", "不用详细")):
        return [_Hit("reply_length", word, _CONF_STATED, "long")]
    return []


# How the user asks for a format without a standing word ("分步骤写", "give me step-by-step instructions").
_FORMAT_ASK = ("回答", "回复", "写", "给我", "please", "give me", "answers", "replies", "answer", "reply", "put it in",
               "put them in", "lay it out", "format it")


def _first(text: str, words: Iterable[str]) -> str | None:
    """The longest of `words` found in `text`."""
    found = [w for w in words if w in text]
    return max(found, key=len) if found else None


def _reply_format(s: str) -> list[_Hit]:
    low = s.lower()
    if not (_any(low, STANDING) or _any(low, CHANGE) or _any(low, _FORMAT_ASK)):
        return []
    if _any(low, ("报告", "文档", "report", "document", "纪要", "minutes")):
        return []
    found = _lookup_word(low, REPLY_FORMATS)
    if not found:
        return []
    if _any(low, ("xlsx", "excel", "csv", "pdf", "word", "ppt", "导成", "转成", "导出")):
        return []  # "表格都给我导成xlsx", "Excel表格": a file format (report_format), not how replies look
    word = found[0]
    # the words that qualify the format belong to it: "markdown table", "别用表格了", "no wide tables"
    m = re.search(r"((?:别用|不要用?|不用|no|not|never)\s*(?:\w+\s+)?|(?:markdown|numbered|bulleted|short|simple|简单的?|"
                  r"markdown with)\s+)?" + re.escape(word) + r"(了)?", low)
    value = m.group(0).strip() if m and (m.group(1) or m.group(2)) else word
    negated = bool(m and m.group(1) and re.match(cjk_edges(r"别|不|no\b|not\b|never\b"), m.group(1)))
    # a refused format keeps the user's words but gets no canonical form ("no wide tables" is not "table")
    return [_Hit("reply_format", value, _CONF_STATED, None if negated else found[1])]


def _report_format(s: str) -> list[_Hit]:
    low = s.lower()
    found = _lookup_word(low, REPORT_FORMATS)
    if found is None:
        return []
    word, value = found
    docs = _any(low, ("报告", "文档", "纪要", "周报", "月报", "文件", "report", "document", "minutes", "docs",
                      "write-up", "summaries", "summary"))
    if docs and (_any(low, STANDING) or _any(low, CHANGE) or re.search(r"(用|要|是|in|as)\s*" +
                                                                      re.escape(value), low)):
        return [_Hit("report_format", word, _CONF_EXPLICIT if _any(low, CHANGE + STANDING) else _CONF_STATED,
                     value)]
    if _any(low, STANDING) or _any(low, CHANGE):
        return [_Hit("report_format", word, _CONF_STATED, value)]
    return []


def _language(s: str) -> list[_Hit]:
    low = s.lower()
    if _any(low, ("翻译", "translate", "translation")):
        return []
    m = re.search(r"(用|说|讲|改用|换成|改成)(" + _LANG_ZH + r")(回复|回答|交流|沟通|说|写|聊|吧|$)?", low)
    if m is None:  # "英文回复吧", "繁体字回复": the language opens the request
        m = re.search(r"(^|[，,]\s*)(?:请|麻烦|以后|都|就)*(" + _LANG_ZH + r")(回复|回答|回我|跟我聊|和我聊|交流)", low)
    if m and (m.group(3) is not None or _any(low, STANDING + CHANGE)):
        return [_Hit("language", m.group(2), _CONF_EXPLICIT, LANGUAGES[m.group(2)])]
    m = re.search(cjk_edges(r"\b(?:reply|answer|respond|write|speak|talk|talk to me|communicate)\s+(?:to me\s+)?in\s+"
                  r"(" + _LANG_EN + r")\b"), low)
    if m is None:  # "Dutch please from now on", "Korean pls"
        m = re.search(cjk_edges(r"^\s*(" + _LANG_EN + r")\s+(?:please|pls|plz)\b"), low)
    if m:
        return [_Hit("language", m.group(1), _CONF_EXPLICIT, LANGUAGES[m.group(1)])]
    m = re.search(r"(?:我更习惯|我习惯|我偏好|i prefer|my language is|i speak)\s*(中文|英文|english|chinese|mandarin)",
                  low)
    if m:
        return [_Hit("language", m.group(1), _CONF_STATED, LANGUAGES[m.group(1)])]
    return []


# After a value: a quotation it introduces ("一句话是“…”", "the line is '…'", "phrase: \"…\"").
_INTRODUCES_QUOTE = re.compile(r"\s*(?:是|为|叫|：|:|(?i:is|was|goes|reads|says))?\s*[“\"「『]")
# A request limited to this once ("for this email only", "today only", "just this once", "仅此一次").
_ONLY_THIS = cjk_compile(r"\bfor (?:this|that|today'?s|tomorrow'?s|tonight'?s) [\w' ]{1,30}? only\b|"
                        r"\b(?:today|tonight) only\b|\bonly (?:today|tonight)\b|\bthis once\b|仅此一次|就这一次|只这一次")
_NOT_BEFORE_TASTE = re.compile(r"(?:不|并不|不怎么|不太|不是很|没那么|不大)$")


def _likes(s: str, original: str) -> list[_Hit]:
    out = []
    low = s.lower()
    for m in _DISLIKES_ZH.finditer(low):
        out.append(_Hit("dislikes", _clean(m.group(1)), _CONF_STATED))
    if not out:
        for m in _DISLIKES_ZH2.finditer(low):
            thing = re.sub(r"(?:的味道|的气味|的口感)$", "", _clean(m.group(1)))
            if thing and not re.match(r"(?:你|您|麻烦|打扰|我|被你|万一|自己)", thing):
                out.append(_Hit("dislikes", thing, _CONF_IMPLIED))
    for m in _DISLIKES_EN.finditer(low):
        out.append(_Hit("dislikes", _clean(m.group(1)), _CONF_STATED))
    if not out:
        for m in _LIKES_ZH.finditer(low):
            if _NOT_BEFORE_TASTE.search(low[max(0, m.start() - 4):m.start()]) or "不喜欢" in low[m.start():m.end()]:
                continue
            out.append(_Hit("likes", _clean(m.group(1)), _CONF_STATED))
        for pat in (_LIKES_EN, _FAN_EN, _FAV_EN):
            for m in pat.finditer(low):
                out.append(_Hit("likes", _clean(m.group(1)), _CONF_STATED))
    cleaned = []
    for h in out:
        v = h.value
        if v.startswith("的"):  # "我最喜欢的音乐类型是摇滚" -> "摇滚"; "我很喜欢的活动" says nothing
            if "是" not in v:
                continue
            v = _clean(v.split("是", 1)[1])
        # a dash between spaces (or a doubled one) opens an aside: "early flights — nothing before 10am"
        v = re.split(cjk_edges(r"\s+(?:because|when|if|so|which|but|as|since|such|and they|and it|and i)\b|，|,|"
                               r"\s+[-—–]+\s|[—–]{2}|\s*——"), v)[0].strip()
        if h.key == "dislikes":  # "我受不了榴莲的味道": the durian
            v = re.sub(r"(?<=.)(?:的味道|的气味|的口感)$", "", v)
        # words are counted in Latin text, accents or dashes included ("crème brûlée"); characters in Chinese
        v = " ".join(v.split()[:6]) if not _CJK_RUN.search(v) else v[:24]
        if v and not LIKE_OBJECT_STOP.match(v) and not re.match(cjk_edges(r"^(to |用|让|你们|your |doing|being|it\b)"), v) \
                and normalise(v) not in _PRONOUNS:
            cleaned.append(_Hit(h.key, v, h.confidence))
    return [routed for h in cleaned if (routed := _route_like(h)) is not None]


def _route_like(h: _Hit) -> _Hit | None:
    if h.key != "likes" or not isinstance(h.value, str):
        return h
    routed = rules.like_field(h.value)
    return None if routed is None else replace(h, key=routed[0], value=routed[1])


def _negations(s: str) -> list[_Hit]:
    """"别/不要/don't X" as a standing dislike, when X is not a request about now."""
    out = []
    low = s.lower()
    masked = _NEG_ZH_COMPOUNDS.sub(lambda m: "＿" * len(m.group(0)), low)
    for pat in (_NEG_ZH, _NEG_EN):
        for m in pat.finditer(masked):
            x = _clean(low[m.start(1):m.end(1)])
            x = _NEG_VERB_STRIP.sub("", x)
            x = _NEG_VERB_STRIP.sub("", x)  # "别再给我推荐X": two verbs
            x = _clean(x)
            if not x or _any(x, NEGATION_STOP) or len(x) < 2:
                continue
            out.append(_Hit("dislikes", x, _CONF_IMPLIED))
    return out


def _use_x(s: str) -> list[_Hit]:
    """"以后都用X / from now on use X / 改成X / switch to X": X decides the field."""
    low = s.lower()
    if not (_any(low, STANDING) or _any(low, CHANGE)):
        return []
    for pat in (_USE_ZH, _USE_EN):
        for m in pat.finditer(low):
            x = m.group(1)
            for key, lexicon in (("report_format", REPORT_FORMATS), ("language", LANGUAGES),
                                 ("reply_format", REPLY_FORMATS), ("contact_channel", CHANNELS)):
                found = _lookup_word(x, lexicon)
                if found is not None:
                    return [_Hit(key, found[0], _CONF_EXPLICIT, found[1])]
    return []


# --- the deterministic extractor ----------------------------------------------------------------------------

# The user as the subject of a statement ("我有阅读障碍", "我眼睛做过手术", "I read these on my phone"): beside a request
# about replies, a lasting reason for it.
_LASTING_REASON = re.compile(r"我(?!们)|(?<![A-Za-z'])(?i:i|i'm|i've|my)(?![A-Za-z'])")
# A request that compares with the reply in front of the user: "再精简一点", "更短", "still too long", "even shorter".
_COMPARED = cjk_compile(r"再|更|又|还是太|还太|(?i:\b(?:even|still|again|this one|that one|that last|this time)\b)")


# Laughter written right after a value ("小胖哈哈", "Lisbon lol"): never part of it.
_LAUGH_TAIL = re.compile(r"(?<=\S)\s*(?:哈{2,}|呵{2,}|嘿{2,}|(?<![A-Za-z])(?i:lol|lmao|haha+|hehe)(?![A-Za-z]))+\s*$")


# The user as the subject, others only beside them ("I speak Tagalog with my parents", "I've got a standing 1:1 with my
# manager every Monday", "我每周跟我爸去钓鱼"): the clause is the user's for what the user does, not for health, diet or
# identity fields ("I cook for my son, who's allergic to eggs" stays his).
_USER_SUBJECT = re.compile(r"^\s*(?:(?i:i|i'm|i've|i'd|i'll|we|we're|we've)(?![\w'])|我(?!们的)|我们)")
_COMPANION_BEFORE = cjk_compile(r"(?:(?i:\b(?:with|for|to|alongside)\s+(?:my|our|the)?)|(?:跟|和|给|陪|带着?)(?:我的?|我们的?)?)"
                               r"\s*(?:[\w\-]+\s+){0,2}$")
_COMPANION_OK = frozenset({"schedule", "languages_spoken", "likes", "city", "work_city", "brands"})


def _companions_only(clause: str) -> bool:
    from usermem.understand.filters import OTHERS

    others = list(OTHERS.finditer(clause))
    return bool(others) and bool(_USER_SUBJECT.match(clause)) and all(
        _COMPANION_BEFORE.search(clause[:m.start()]) for m in others)


class PatternExtractor:
    """Deterministic extraction over user turns (no LLM). Keys outside `allowed` are never proposed.

    Three proposers, one output: the phrase rules of this module (precise, for the long-standing fields),
    the typed rules of `understand.rules` (places from gazetteers, time zones, names, family, pets, diet,
    tone, numbers) and the learned span tagger (`understand.tagger`, for coverage). A value found by a rule
    wins over the tagger on the same words; each span of the user's words gets one meaning.
    """

    def __init__(self, allowed: Mapping[str, FieldContract], *, tagger: Any = "default",
                 tagger_threshold: float | None = None, templates: bool = True,
                 template_similarity: float | None = None, negation_dislikes: bool = False,
                 veto: Any = None, veto_threshold: float | None = None) -> None:
        from usermem.understand.tagger import load_tagger

        self.allowed = allowed
        # "别/不要/don't X" as a standing dislike: off by default (on the bank's dev split it mostly
        # mislabelled requests and other fields as dislikes).
        self.negation_dislikes = negation_dislikes
        self.tagger = load_tagger() if tagger == "default" else tagger
        meta = _tagger_meta()
        self.tagger_threshold = tagger_threshold if tagger_threshold is not None else float(
            meta.get("threshold", 0.5))
        from usermem.understand.templates import index

        self.templates = index() if templates else None
        self.template_similarity = template_similarity if template_similarity is not None else float(
            meta.get("template_similarity", 0.4))
        # a veto on each value (understand/veto.py: `vetoes(veto.Context, threshold) -> bool`), e.g. the learned one that
        # scripts/veto_measure.py measures; None (the default: none is shipped, see docs/understanding.md) keeps every
        # value the rules, the tagger and the filters let through
        self.veto = veto
        self.veto_threshold = veto_threshold
        # False only to collect the veto's training data (`training.veto_rows`): the clause filters let everything
        # through, so the veto learns from the traps they catch as well as from the ones they miss
        self.filters = True

    def extract(self, messages: Sequence[Message]) -> list[Candidate]:
        per_message: list[tuple[int, list[Candidate]]] = []
        for msg in messages:
            if msg.role != "user":
                continue
            if JOKE_RETRACT.match(normalise(msg.content)) and per_message:
                per_message[-1] = (per_message[-1][0], [])  # "开玩笑的": the previous turn was not meant
            cands = self._message(msg)
            if cands and not _any(normalise(msg.content).lower(), STANDING + CHANGE):
                # "再精简一点" asks about the reply in front of the user: a signal (usermodel.detect_signals),
                # not a standing preference — repeated, it becomes an inferred one that is verified first.
                # The rules already ask for a standing cue; this holds the learned tagger to the same.
                # A lasting reason about the user beside the request ("我有干眼症，…回复短一点", "keep it short, I read these
                # on my phone") makes it a standing preference, unless it compares with the reply in front ("再短一点").
                moment = set() if _LASTING_REASON.search(msg.content) and not _COMPARED.search(msg.content) else {
                    s.key for s in detect_signals(msg.content)}
                cands = [c for c in cands if c.key not in moment]
            before = per_message[-1][1] if per_message else []
            theirs: set[tuple[str, str]] = set()
            if per_message and is_correction(msg.content) and FILTER_OTHERS.search(msg.content):
                # "我住在上海" / "不对，我说错了，是我哥住在上海": the corrected statement was someone else's
                theirs = {(c.key, normalise(str(c.value))) for c in before if c.key not in ("spouse", "children", "pets")
                          and normalise(str(c.value)) in normalise(msg.content)}
                per_message[-1] = (per_message[-1][0],
                                   [c for c in before if (c.key, normalise(str(c.value))) not in theirs])
            if per_message:
                # "团子是我朋友家的", "Luna's my sister's", "不是虾，是蟹": the earlier value was someone else's, or wrong
                gone = {(c.key, normalise(str(c.value))) for c in before if isinstance(c.value, str)
                        and disowned_earlier(msg.content, c.value)}
                if gone:
                    theirs |= gone
                    per_message[-1] = (per_message[-1][0], [c for c in per_message[-1][1]
                                                            if (c.key, normalise(str(c.value))) not in gone])
            if per_message and is_correction(msg.content):
                # a value the turn disowns is no correction either ("Biscuit is my neighbour's", "不是芒果")
                cands = [c for c in self._corrected(before, msg, cands)
                         if (c.key, normalise(str(c.value))) not in theirs
                         and not any(k == c.key and v in normalise(str(c.value)) for k, v in theirs)]
                fixed = {c.key for c in cands}
                per_message[-1] = (per_message[-1][0], [c for c in per_message[-1][1] if c.key not in fixed])
            per_message.append((msg.index, cands))
        per_message = _name_the_relative(per_message, messages)
        # Changes of mind: the last statement per field wins. Collections (likes, dislikes, allergies...)
        # accumulate instead: every distinct item, in order, as a list when there are several.
        latest: dict[str, Candidate] = {}
        items: dict[str, list[Any]] = {}
        canon: dict[str, list[Any]] = {}
        for _, cands in per_message:
            for c in cands:
                if c.key in ACCUMULATE:
                    bag = items.setdefault(c.key, [])
                    cbag = canon.setdefault(c.key, [])
                    if c.value not in bag:
                        bag.append(c.value)
                        cbag.append(c.canonical)
                    many = len(bag) > 1
                    c = replace(c, value=list(bag[:MAX_ITEMS]) if many else bag[0],
                                canonical=(list(cbag[:MAX_ITEMS]) if any(x is not None for x in cbag) else None)
                                if many else cbag[0])
                latest.pop(c.key, None)
                latest[c.key] = c
        return list(latest.values())

    def _allowed(self, key: str, why: set[str]) -> bool:
        if "companion" in why:
            why = why - {"companion"} - ({"third_party", "other_person"} if key in _COMPANION_OK else set())
        if "reply_request" in why:
            why = why - {"reply_request"} - ({"question"} if key in REPLY_FIELDS else set())
        return allowed(key, why) if self.filters else True

    def _corrected(self, previous: list[Candidate], msg: Message, found: list[Candidate]) -> list[Candidate]:
        """"不对，是南宁" / "actually, Katie": a bare value corrects the previous turn's field of its type."""
        have = {c.key for c in found}
        out = list(found)
        for prev in previous:
            if prev.key in have:
                continue
            value = _bare_value(msg.content, prev.key)
            if value is not None and prev.key in _PLACE_KEYS:
                # "my office is in Manchester" / "no wait, Salford": the corrected place keeps the field it corrects
                out = [c for c in out if not (c.key in _PLACE_KEYS and normalise(str(c.value)) == normalise(value[0]))]
            if value is not None:
                words = _untimed(prev.key, value[0])  # "Correction — I moved to Monzo in June": Monzo
                out.append(replace(prev, value=words, canonical=value[1] if words == value[0] else
                                   _canonical_of(prev.key, words), evidence=msg.content, message_index=msg.index))
                have.add(prev.key)
        return out

    def _message(self, msg: Message) -> list[Candidate]:
        text = msg.content
        masked = mask_quotes(text)
        chosen: list[tuple[_Hit, int, int, str]] = []  # hit, start, end, method

        def overlaps(start: int, end: int) -> bool:
            return any(start < e and s < end for _, s, e, _ in chosen if s >= 0)

        field_p: dict[str, float] = {}

        def message_fields() -> dict[str, float]:
            """The stage-1 field model's probabilities for this message (computed once, only when asked)."""
            model = getattr(self.tagger, "field_model", None)
            if not field_p and model is not None:
                field_p.update(model.probabilities(masked))
                field_p.setdefault("", 0.0)
            return field_p

        def displaced(h: _Hit, start: int, end: int) -> list[tuple[_Hit, int, int, str]]:
            """The rule hits a tagger span takes the words from: a rule value of the same field that is less than
            half of the span's words ("吃素" in "初一十五吃素", "cello" in "play the cello": the two cannot both be the
            user's value, and the span holds the rule's), or rule hits of other fields when the message is about the
            span's field and not theirs by the stage-1 field model ("I'm a dev at a fintech in Lagos": work_city,
            not city). Empty when the rule stands."""
            rivals = [c for c in chosen if c[1] >= 0 and start < c[2] and c[1] < end]
            if not rivals or any(c[3] != "pattern" for c in rivals) or not isinstance(h.value, str):
                return []
            words = normalise(h.value)
            if all(c[0].key == h.key and isinstance(c[0].value, str) and normalise(c[0].value) in words
                   and 2 * len(normalise(c[0].value)) < len(words) and not _name_before_place(h.key, h.value, c[0].value)
                   for c in rivals):
                return rivals
            from usermem.understand.tagger import FIELD_FEATURE_THRESHOLD

            if h.key in _PLACE_KEYS and any(c[0].key in _PLACE_KEYS and c[0].key != h.key and c[0].sure
                                            for c in rivals):
                return []  # a place a rule read from the cue beside it (住, 人, "my job in") keeps that field
            p = message_fields()
            if p.get(h.key, 0.0) >= _FIELD_SURE and all(
                    c[0].key != h.key and p.get(c[0].key, 0.0) < FIELD_FEATURE_THRESHOLD for c in rivals):
                return rivals
            return []

        def add(h: _Hit, start: int, end: int, method: str, span: bool = False) -> None:
            if isinstance(h.value, str) and (words := _untimed(h.key, h.value)) != h.value:
                # "I moved to Monzo in June", "on levothyroxine every morning": when is not part of the value
                h, end = replace(h, value=words), (start + len(words) if start >= 0 else end)
            if isinstance(h.value, str) and _LAUGH_TAIL.search(h.value):
                value = _LAUGH_TAIL.sub("", h.value)  # "叫我小胖哈哈": the laugh is not part of the name
                if value:
                    h, end = replace(h, value=value), (start + len(value) if start >= 0 else end)
            if h.key == "medical_history" and isinstance(h.value, str) and rules.disability(h.value) \
                    and "accessibility" in self.allowed:
                # "我有自闭症谱系", "I'm autistic", "左腿装了假肢": a disability is how the user needs things made
                h = replace(h, key="accessibility", canonical=None)
            if h.key not in self.allowed or h.value in ("", None):
                return
            if h.key not in NEGATIVE_OK and isinstance(h.value, str) and NEGATED_VALUE.search(h.value):
                return  # "I'm not a student anymore": a denied value is no fact
            if any(c[0].key == h.key and normalise(str(c[0].value)) == normalise(str(h.value)) for c in chosen):
                return
            if start >= 0 and overlaps(start, end):
                gone = displaced(h, start, end) if span else []
                if not gone:
                    return  # one statement, one meaning
                chosen[:] = [c for c in chosen if c not in gone]
            if not_a_relative(h.key, text, start, end):
                return  # "孩子他爸", "听着像小孩", "我老婆是教英语的": no child, no name
            if denied_value(h.key, text, start):
                return  # "我不吃素", "我没孩子", "别叫我老师": the value is denied or refused
            chosen.append((h, start, end, method))

        # 1. the phrase rules (sentence level, their own filters)
        for h in sorted(self._rule_hits(Message(msg.role, masked, msg.index)), key=lambda h: -_PRIORITY.get(h.key, 0)):
            value = _as_written(text, h.value) if isinstance(h.value, str) else h.value
            at = normalise_keep_case(text).lower().find(str(value).lower()) if isinstance(value, str) else -1
            if isinstance(value, str):
                value = _cut_word(value, normalise_keep_case(text), at)
            add(replace(h, value=value), at, at + len(str(value)) if at >= 0 else -1, "pattern")
        # 2. typed rules and the tagger, clause by clause, through the filters
        spans = self.tagger.spans(masked) if self.tagger is not None and masked.strip() else []
        for s0, s1 in sentence_spans(masked):
            sentence = masked[s0:s1]
            whole = reasons(sentence, "", sentence)
            for f in rules.sentence_level(sentence):
                if self._allowed(f.key, whole):
                    add(_Hit(f.key, f.value, f.confidence, f.canonical), s0 + f.start, s0 + f.end, "pattern")
            subject_other = False  # "我姐在伦敦读书，时差七个小时": the second clause is still about her
            inherited: set[str] = set()
            judged: list[tuple[int, str, set[str]]] = []
            for c0, c1 in clause_spans(sentence):
                clause = sentence[c0:c1]
                why = reasons(clause, sentence[:c0], sentence)
                if "question" in why and reply_request(clause, masked):
                    why.add("reply_request")  # "你说话能不能随意点": its reply-style values are no question
                if "third_party" in why and _companions_only(clause):
                    why.add("companion")  # "I speak Tagalog with my parents": they are with the user, not the subject
                if "other_person" in why and _FIRST_PERSON.search(_OTHER_WORDS.sub("", clause)):
                    why.discard("other_person")  # "我和同事一起遛我家狗": the user is in it too
                if "third_party" in why:
                    # "让我给他订高铁票，要一等座": an errand for someone else carries them as the subject too
                    subject_other = not _FIRST_PERSON.search(_OTHER_WORDS.sub("", clause)) or errand_for_other(clause)
                    inherited = why & {"third_party", "other_person"}
                elif subject_other and not _FIRST_PERSON.search(clause):
                    why |= inherited
                else:
                    subject_other = False
                base = s0 + c0
                for f in sorted(rules.typed(clause), key=lambda f: -f.confidence):
                    fwhy = why - {"other_person"} if re.match(cjk_edges(r"(?i:我|my\b|our\b)"), f.value) else why
                    if "third_party" in fwhy and (_I_GOVERN.search(clause[:f.start]) or (
                            f.key == "preferred_name" and _CALL_ME.search(clause[:f.start]))):
                        # "他在长春我在厦门": 厦门 is said of the user; "the kids at work call me Coach": the user's name
                        fwhy = fwhy - {"third_party", "other_person"}
                    ok = self._allowed(f.key, fwhy) or ("hypothetical" in why and allowed(f.key, why - {"hypothetical"})
                                                 and hypothetical_only_after(sentence[:c0], clause, f.end))
                    if ok:
                        add(_Hit(f.key, f.value, f.confidence, f.canonical, f.sure), base + f.start, base + f.end,
                            "pattern")
                judged.append((base, clause, why))
            # the learned proposers after every clause's rules: a tagger span that runs over a comma must not take
            # the words a rule found in the next clause ("在中科院读研，研二，…": 研二)
            for base, clause, why in judged:
                if self.templates is not None:
                    for tp in self.templates.propose(clause, self.template_similarity):
                        t0, t1 = _whole_words(clause, tp.start, tp.end)
                        tvalue = _trim(clause[t0:t1], tp.field) if (t0, t1) != (tp.start, tp.end) else tp.value
                        if tvalue and self._allowed(tp.field, why) and _plausible(tp.field, tvalue):
                            add(_Hit(tp.field, tvalue, round(min(0.95, 0.4 + tp.score), 3),
                                     _canonical_of(tp.field, tvalue)), base + t0, base + t1, "model")
                for sp in spans:
                    if base <= sp.start < base + len(clause) and self._allowed(sp.field, why):
                        p = _calibrate(sp.probability, getattr(self.tagger, "platt", None))
                        if p >= self.tagger_threshold:
                            start, end = _zh_whole_words(masked, sp.start, sp.end)
                            end = _sentence_end(masked, start, end)
                            value = _trim(masked[start:end], sp.field)
                            if value and _plausible(sp.field, value):
                                add(_Hit(sp.field, value, round(p, 3), _canonical_of(sp.field, value)),
                                    start, end, "model", span=True)
        # "our twins Ava and Noah", "两只狗，Lucky和Coco": a name of a multi-valued field joined to the next name by
        # and / or / 和 / 或者 / 、 / "/" — the second one is a value of the same field when nothing else took it
        for h, _, b, m in list(chosen):
            if h.key in ACCUMULATE and b > 0 and isinstance(h.value, str) and _NAME_LIKE.fullmatch(h.value):
                nxt = _COORDINATED.match(masked, b)
                if nxt and not overlaps(nxt.start(1), nxt.end(1)) and not any(
                        c[0].key == h.key and normalise(str(c[0].value)) == normalise(nxt.group(1)) for c in chosen):
                    chosen.append((replace(h, value=nxt.group(1), canonical=_canonical_of(h.key, nxt.group(1))),
                                   nxt.start(1), nxt.end(1), m))
        # "体育新闻只要中超的", "加点体育新闻，主要是CBA": the kind of news the user narrows is no topic of its own
        # takes the narrower words in its place, judged as the kind was
        for s0, s1 in sentence_spans(masked) if "新闻" in masked else ():
            for a, b, t0, t1 in rules.news_narrowed(masked[s0:s1]):
                kind = next((c for c in chosen if c[0].key == "news_topics" and s0 + a <= c[1] and c[2] <= s0 + b), None)
                if kind is None:
                    continue
                if not overlaps(s0 + t0, s0 + t1):
                    topic = masked[s0 + t0:s0 + t1]
                    chosen[chosen.index(kind)] = (replace(kind[0], value=topic, canonical=None), s0 + t0, s0 + t1, kind[3])
                elif any(c[0].key == "news_topics" and s0 + t0 < c[2] and c[1] < s0 + t1 for c in chosen):
                    chosen.remove(kind)  # the topic is already there ("科技新闻我只看AI相关的")
        # "联系我用WhatsApp或者Line", "email or Slack, either works": channels listed in one statement are all the
        # user's (one value, a list); a later statement replaces the list like any single value
        chosen = _listed_channels(chosen, masked)
        # "Studio Ghibli and anything with…", "花粉和尘螨": a value of a collection field that joins items by a
        # conjunction is those items (the bank labels each item of a list on its own)
        chosen = [part for c in chosen for part in _list_items(c)]
        # "my name is Batman. ok fine it's not": a later retraction takes back what came before it
        retracted = max((m.start() for m in _TAKE_BACK.finditer(masked)), default=-1)
        if retracted > 0:
            chosen = [c for c in chosen if c[1] >= retracted]
        # "我最喜欢的一句话是“我思故我在”", "my favourite line is 'carpe diem'": a noun that introduces a quotation names
        # the quoted words, it says nothing about the user
        chosen = [c for c in chosen if not (c[2] > 0 and _INTRODUCES_QUOTE.match(text, c[2]))]
        # "我叫天才，来自天才星球，哈哈开玩笑的", "…, in my dreams", "…, apparently": the sentence is disowned at its end
        spans_ = sentence_spans(masked)
        disowned = []
        for n, (a, b) in enumerate(spans_):
            tail = DISOWN_TAIL.search(masked[a:b])
            if tail:  # a sentence that is only the marker ("… in my dreams") disowns the one before it too, and so
                # does one cut off inside a token ("我的邮箱是 zw@example.com，哈哈开玩笑的": the dot of a domain)
                k = n - 1 if n and not masked[a:a + tail.start()].strip() else n
                while k > 0 and masked[spans_[k][0] - 1] == "." and masked[spans_[k][0]].isalnum():
                    k -= 1
                disowned.append((spans_[k][0], b))
        if disowned:
            chosen = [c for c in chosen if not (c[1] < 0 or any(a <= c[1] < b for a, b in disowned))]
        # A student's year or degree is their education ("I'm a third-year medical student", "我是在职研究生").
        chosen = [(replace(h, key="education", canonical=None), a, b, m)
                  if h.key == "occupation" and "education" in self.allowed and isinstance(h.value, str)
                  and re.search(cjk_edges(r"(?i:\bstudent\b|学生|研究生|博士生|硕士生)"), h.value) else (h, a, b, m)
                  for h, a, b, m in chosen]
        if _EMAIL.search(text):  # "发我邮箱 a@b.com": the address is what the user gave; "邮箱" is no separate preference
            chosen = [c for c in chosen if not (c[0].key == "contact_channel" and c[0].canonical == "email")]
        # One animal, two mentions ("my old tabby, Gus", "Pickles (my beagle)"): names given in the message stand for
        # the species words beside them when there are no more species words than names.
        pets = [c for c in chosen if c[0].key == "pets" and isinstance(c[0].value, str)]
        named = [c for c in pets if not _names_kind(str(c[0].value), rules.PETS)]
        generic = [c for c in pets if c not in named]
        if named and generic and len(generic) <= len(named):
            chosen = [c for c in chosen if c not in generic]
        # "We have two kids, Maya and Theo": the names are the children; the count only says how many. "我儿子，刚上三年级，
        # 叫豆豆": as for pets, names stand for the relation words when there are no more of those than names.
        kids = [c for c in chosen if c[0].key == "children" and isinstance(c[0].value, str)]
        named_kids = [c for c in kids if not _names_kind(str(c[0].value), rules.CHILDREN)]
        if named_kids:
            chosen = [c for c in chosen if not (c in kids and rules.counted_children(str(c[0].value)))]
            # each name stands for one relation word it may be ("my son Leo and my daughter": the daughter stays)
            free = list(named_kids)
            generic_kids = [c for c in chosen if c in kids and c not in named_kids]
            for g in generic_kids if len(generic_kids) <= len(named_kids) else []:
                stand = next((k for k in free if k[0].canonical in (None, g[0].canonical)
                              or g[0].canonical in ("child", "children")), None)
                if stand is not None:
                    free.remove(stand)
                    chosen = [c for c in chosen if c is not g]
        # "I'm free for calls Tuesday and Thursday afternoons", "no notifications between 10pm and 7am": hours named for
        # being reached are contact hours, not a routine
        chosen = [(replace(h, key="contact_hours", canonical=None), a, b, m)
                  if h.key == "schedule" and "contact_hours" in self.allowed and isinstance(h.value, str)
                  and _REACHED.search(masked[max(0, a - 16):b] if a >= 0 else h.value)
                  and not any(c[0].key == "contact_hours" for c in chosen) else (h, a, b, m) for h, a, b, m in chosen]
        # "我的 working hours 是 10 点到 7 点": hours named as the user's working hours are their schedule
        chosen = [(replace(h, key="schedule", canonical=None), a, b, m)
                  if h.key == "contact_hours" and "schedule" in self.allowed and a > 0
                  and _WORKING_HOURS.search(masked[max(0, a - 20):a]) else (h, a, b, m) for h, a, b, m in chosen]
        # "我是律所的合伙人": an occupation span that stops before "的" and a role word is the workplace; the role is the job
        chosen = [(replace(h, value=masked[a:r.end()], canonical=None), a, r.end(), m)
                  if h.key == "occupation" and isinstance(h.value, str) and a >= 0 and masked[a:b] == h.value
                  and (r := _ROLE_AFTER.match(masked, b)) is not None and not _overlaps_other(chosen, a, r.end())
                  else (h, a, b, m) for h, a, b, m in chosen]
        # "住在园区旁边的湖东": a place's canonical is read in the message's context, where a short Chinese name beside
        # a place in China is a local one, not the foreign city GeoNames also files under it (gazetteer.find_places)
        if any(c[0].key in _PLACE_KEYS and c[0].canonical is not None and c[1] >= 0 for c in chosen):
            from usermem.understand.gazetteer import find_places

            local = {(p.start, p.end) for p in find_places(masked) if p.canonical is None and p.country is None}
            chosen = [(replace(h, canonical=None), a, b, m) if h.key in _PLACE_KEYS and (a, b) in local else (h, a, b, m)
                      for h, a, b, m in chosen]
        if self.veto is not None:
            from usermem.understand.veto import Context

            chosen = [c for c in chosen if not self.veto.vetoes(
                Context(masked, c[0].key, str(c[0].value), c[1], c[2], c[3]), self.veto_threshold)]
        return [Candidate(key=h.key, kind=self.allowed[h.key].kind, value=h.value, confidence=h.confidence,
                          evidence=msg.content, message_index=msg.index, method=method, canonical=h.canonical)
                for h, _, _, method in chosen]

    def _rule_hits(self, msg: Message) -> list[_Hit]:
        hits: dict[str, _Hit] = {}
        bags: dict[str, list[_Hit]] = {}
        for original in _clauses(msg.content):
            s = normalise(original)
            retract = _JOKE_INLINE.search(s)
            if retract:  # "我是程序员，开玩笑的，其实我是设计师": only what follows the retraction counts
                s = s[retract.end():].strip()
                original = original[-len(s):] if s else ""
                if not s:
                    continue
            denied = UNSAID.search(s)
            if denied:  # "我不是说要你简短，是要你别说废话": only what follows the denied clause counts
                cut = re.search(r"[，,;；—–]", s[denied.end():])
                s = s[denied.end() + cut.end():].strip() if cut else ""
                original = original[-len(s):] if s else ""
                if not s:
                    continue
            low = s.lower()
            if self.filters and (_JOKE_RE.search(low) or HYPOTHETICAL.search(low) or SUPPOSITION.search(low) or _any(low, OTHERS) or \
                    FICTION.search(low) or \
                    SUBJECT_OTHER.search(low) or \
                    (FILTER_OTHERS.search(low) and not _FIRST_PERSON.search(_OTHER_WORDS.sub("", low))) or \
                    FILTER_REPORTED.search(low) or SPEAKER.search(low) or OTHERS_PARTICULARS.search(low)):
                continue
            question = self.filters and bool(QUESTION.search(original.strip()) or ASKS.search(low))
            # "你说话能不能短一点": a request for a way of replying put as a question states that preference
            asked = question and reply_request(original.strip(), msg.content)
            # a standing word said of someone else ("领导喜欢看PPT，这次汇报帮我做成PPT") does not make the user's
            # request standing
            one_off = (_any(low, ONE_OFF) or bool(_ONLY_THIS.search(low))) and not any(
                _any(part, STANDING) for part in re.split(r"[，,;；]", low)
                if not (FILTER_OTHERS.search(part) and not _FIRST_PERSON.search(_OTHER_WORDS.sub("", part))))
            found: list[_Hit] = []
            if not question or _any(low, ("发到", "发给", "发我", "寄到", "send", "forward", "email it", "mail it")):
                found += _email(s, original)  # "能发到我邮箱 a@b.com 吗" states it; "我的邮箱是X吗" asks
            if not question and not (self.filters and QUESTION_START.search(low)):
                found += _allergy(s)
                # "for today's email only, make it formal", "这次发我私人邮箱吧": no standing way to reach the user
                found += [h for h in _channels(s) if not (one_off and h.key == "contact_channel")]
                if not one_off:
                    found += _reply_length(s)
                    found += _reply_format(s)
                    found += _report_format(s)
                    found += _language(s)
                    found += _use_x(s)
                found += _occupation(s)
                # places: understand.rules (gazetteers, city / work_city / hometown by their cue)
                if not any(h.key in _SPECIFIC for h in found):
                    found += _likes(s, original)  # "我喜欢简洁的回复" is reply_length, not a like
                if (self.negation_dislikes or _any(low, _STANDING_NEG)) and not one_off and not any(
                        h.key in ("dislikes", "contact", "reply_length", "contact_channel") for h in found):
                    found += _negations(s)
            elif asked and not one_off:
                found += _reply_length(s) + _reply_format(s) + _language(s)
            diets = [f.value.lower() for f in rules.diet(original)]
            if diets:  # "我不吃猪肉" is a diet, not also a dislike of pork (one statement, one meaning)
                found = [h for h in found if not (h.key == "dislikes" and any(str(h.value).lower() in d for d in diets))]
            for h in found:
                if h.key not in self.allowed or h.value in ("", None):
                    continue
                if h.key in ACCUMULATE:  # every item counts: "我喜欢徒步。我也喜欢看书。"
                    if all(prev.value != h.value for prev in bags.setdefault(h.key, [])):
                        bags[h.key].append(h)
                    continue
                prev = hits.get(h.key)
                if prev is None or h.confidence >= prev.confidence:
                    hits[h.key] = h
        return [*hits.values(), *(h for bag in bags.values() for h in bag)]




_PLACE_KEYS = frozenset({"city", "work_city", "hometown"})
_WORKING_HOURS = cjk_compile(r"(?:(?:(?i:\bmy)|我的?)\s*(?i:(?:working|work|office) hours)|我的?(?:上班|工作)时间)\s*"
                             r"(?:是|为|(?i:are|is))?\s*[:：]?\s*$")
# A role said after a workplace and 的 ("律所的合伙人", "医院的护士"): the job.
_ROLE_AFTER = re.compile(r"的(合伙人|老板|经理|主管|总监|负责人|员工|职员|老师|医生|护士|工程师|设计师|会计|律师|助理|实习生|"
                         r"销售|司机|店长|创始人|研究员|程序员|前台|客服|厨师)(?![\u4e00-\u9fff])")


def _overlaps_other(chosen: Sequence[tuple[Any, int, int, str]], a: int, b: int) -> bool:
    """Whether another chosen value lies in [a, b) beyond the one that starts at a."""
    return any(c1 < b and a < c2 and c1 != a for _, c1, c2, _ in chosen)


# The user as the subject right before a value, inside a clause that also names someone else ("他在长春我在厦门",
# "she's in Leeds and I'm in York").
_I_GOVERN = re.compile(r"(?:^|[^\u4e00-\u9fff])?我(?:现在|目前|一直|也|则|就|自己)?(?:住|生活|工作|上班|人)?在\s*$|"
                       r"(?<![A-Za-z])(?i:i'?m|i am|i live|i work|i'm based|i speak)(?: in| at| out of)?\s*$")
# Many people calling the user something makes it their name ("the kids at work call me Coach", "同事们都叫我老李");
# one person doing so does not ("他叫我老李，其实我不姓李").
_CALL_ME = cjk_compile(r"(?i:(?<!\bhe )(?<!\bshe )\bcall me|\bknow me as)\s*$|(?:们|大家|都)(?:叫我|喊我|称呼我)\s*$")
# The user as the subject of a clause (after another person's words are taken out: "我姐" is not "我").
_FIRST_PERSON = cjk_compile(r"我|\b(?!i人)(?:i|i'm|i've|i'd|my|me|mine)\b", re.IGNORECASE)
_OTHER_WORDS = cjk_compile(r"我(?:们)?(?:的|家)?(?:姐姐?|哥哥?|弟弟?|妹妹?|妈妈?|爸爸?|老公|老婆|先生|太太|儿子|女儿|孩子|朋友|同事|同学|"
                          r"男朋友|女朋友|家人|室友|舍友|邻居|老板|领导|上司|客户|闺蜜|兄弟|组长|经理|主管|导师|教练|师傅|队友|"
                          r"组员|搭档|前任|网友|同桌|发小|死党|学长|学姐|师兄|师姐|师弟|师妹|表[哥姐弟妹]|堂[哥姐弟妹]|舅舅|阿姨|叔叔|姑姑|"
                          r"爷爷|奶奶|外婆|外公|公公|婆婆|岳父|岳母|房东)|我们|"
                          r"\bmy\s+(?:\w+\s+)?(?:sister|brother|mum|mom|dad|husband|wife|son|daughter|kids?|friend|mate|"
                          r"colleague|coworker|co-worker|boss|manager|partner|boyfriend|girlfriend|guest|roommate|flatmate|"
                          r"housemate|neighbou?r|cousin|uncle|aunt|grandma|grandpa|parents|in-laws|teammate|coach|"
                          r"teacher|mentor|supervisor|advisor|landlord|landlady)s?\b", re.IGNORECASE)


# "我要给儿子办生日会" … "他叫豆豆": a pronoun naming the relative or animal just mentioned (the last naming wins,
# "他叫朵朵——哦不，…他叫豆豆").
_PRONOUN_NAME = cjk_compile(r"(?:他|她|它)(?:叫|名字叫|的名字是|名叫)([\u4e00-\u9fff]{2,3}?)(?=[，,。.!！?？\s—–-]|$)|"
                           r"\b(?:he|she|it)(?:'s| is) (?:called|named) ([A-Z][a-z]+)\b|\b(?:his|her|its) name(?:'s| is) "
                           r"([A-Z][a-z]+)\b")


@lru_cache(maxsize=16)
def _latin_words(words: tuple[str, ...]) -> re.Pattern[str] | None:
    """Any of `words` (or its plural) as a whole word, glued to Chinese or not ("我的cat")."""
    return cjk_compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")s?\b") if words else None


def _names_kind(value: str, lexicon: Mapping[str, str]) -> bool:
    """Does `value` hold a relation or species word ("my old tabby", "橘猫") rather than a name ("Gus")?"""
    low = value.lower()
    latin = _latin_words(tuple(w for w in lexicon if w.isascii()))
    return bool(latin and latin.search(low)) or any(w in low for w in lexicon if not w.isascii())


def _name_the_relative(per_message: list[tuple[int, list[Candidate]]],
                       messages: Sequence[Message]) -> list[tuple[int, list[Candidate]]]:
    """A child or pet mentioned by relation word only ("儿子", "my dog") takes the name a later user turn gives
    it with a pronoun; the relation word is kept as the canonical form beside the name."""
    lexicons = {"children": rules.CHILDREN, "pets": rules.PETS, "spouse": rules.SPOUSE}
    out = list(per_message)
    for i, (idx, cands) in enumerate(out):
        bare = [c for c in cands if c.key in lexicons and isinstance(c.value, str)
                and any(w in c.value.lower() for w in lexicons[c.key])]
        if len(bare) != 1:
            continue  # which one a pronoun means is clear only when one relative was mentioned
        later = [m for m in messages if m.role == "user" and m.index >= idx]
        names = [g for m in later for hit in _PRONOUN_NAME.finditer(m.content)
                 for g in hit.groups() if g and not rules.NOT_A_NAME.search(g)]
        if not names:
            continue
        c = bare[0]
        named = replace(c, value=names[-1], canonical=c.canonical if c.canonical is not None else c.value)
        out[i] = (idx, [named if x is c else x for x in cands])
    return out


def _tagger_meta() -> dict[str, Any]:
    import json

    from usermem.understand.tagger import model_path

    meta = model_path().with_suffix(".json")
    if not meta.exists():
        return {}
    data: dict[str, Any] = json.loads(meta.read_text(encoding="utf-8"))
    return data


_PLATT: tuple[float, float] | None = None


def reset_calibration() -> None:
    """Forget the cached Platt parameters (after `usermem train` rewrote the tagger's metadata)."""
    global _PLATT
    _PLATT = None


def _calibrate(p: float, platt: tuple[float, float] | None = None) -> float:
    """The tagger's span probability, Platt-scaled on the dev split (see `usermem train`): with the tagger's
    own scaling when it carries one, else the shipped metadata's."""
    global _PLATT
    if platt is None:
        if _PLATT is None:
            a, b = _tagger_meta().get("platt", (1.0, 0.0))
            _PLATT = (float(a), float(b))
        platt = _PLATT
    import math

    p = min(max(p, 1e-6), 1 - 1e-6)
    z = platt[0] * math.log(p / (1 - p)) + platt[1]
    return 1.0 / (1.0 + math.exp(-z))


_TAKE_BACK = cjk_compile(r"(?:^|[.!?。！？，,]\s*)(?:(?:ok(?:ay)?,?\s*)?(?:fine,?\s*)?(?:it'?s not|not really)"
                        r"\s*[.!。！]*\s*$|just kidding|\bkidding\b|\bjk\b|开玩笑的|骗你的|逗你的|瞎说的)", re.IGNORECASE)
_FUNCTION_WORDS = frozenset({"我", "你", "他", "她", "它", "我们", "你们", "他们", "这", "那", "这个", "那个", "的", "了",
                             "i", "me", "my", "you", "your", "he", "she", "it", "they", "we", "us", "the", "a", "an",
                             "this", "that", "and", "or", "is", "am", "are", "be", "to", "of", "in", "on"})
_PRONOUNS = frozenset({"yours", "mine", "hers", "his", "theirs", "ours", "it", "that", "this", "them", "those",
                       "these", "那种", "这种", "那个", "这个", "你说", "它"})
# A credential-like token: Latin letters and digits in one unbroken ASCII string ("Tr0ub4dor&3"). A Chinese address
# with a block letter ("…维多利广场B座1208") is no secret.
_SECRET_LIKE = re.compile(r"^(?=\S*\d)(?=\S*[A-Za-z])[\x21-\x7e]{6,}$")
# Street words (Chinese units; English, French, Dutch, German, Spanish, Italian street types), a P.O. box, or a
# postcode (UK "EH7 4AH", "SG11 2XX"; four or five digits beside a capitalised place: "75011 Paris", "Wellington 6140").
_ADDRESS_LIKE = cjk_compile(r"路|街|道|号|栋|室|单元|小区|村|巷|弄|层|楼|座|大厦|广场|花园|公寓|"
                           r"\d+\w?\s+(?:[\w'-]+\s+){0,3}(?:st|street|rd|road|ave|avenue|lane|ln|drive|dr|way|close|court|"
                           r"place|square|crescent|row|terrace|view|cottages?|gardens?|grove|hill|mews|parade|boulevard|blvd|"
                           r"highway|hwy)\b|"
                           r"\b(?:rue|avenue|boulevard|chemin|via|viale|piazza|calle|avenida|rua|straße|strasse|str\.|weg|"
                           r"platz|gracht|laan|plein|straat|kade)\b|\bp\.?\s?o\.? box\s+\d|"
                           r"(?-i:\b[A-Z]{1,2}\d[A-Z\d]?\s+\d[A-Z]{2}\b|\b\d{4,5}\s+[A-Z][a-z]|\b[A-Z][a-z]+\s+\d{4,5}\b)",
                           re.IGNORECASE)
# A number in any script: digits, Chinese numerals with a unit or a magnitude ("一千五", "两千出头", "八百左右"), or
# English number words ("fifty bucks", "a couple of grand").
_NUMBER_LIKE = cjk_compile(r"\d|[一二两三四五六七八九十几]+\s*[十百千万亿块元]|[十百千万亿]|\b(?:one|two|three|four|five|six|seven|"
                          r"eight|nine|ten|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|grand|"
                          r"k)\b", re.IGNORECASE)
# A budget without a figure still names money or spending ("tight budget", "price isn't an issue", "能省则省").
_MONEY_WORDS = re.compile(r"budget|price|cost|cheap|frugal|afford|spend|splurge|money|expensive|bucks|预算|价|钱|贵|便宜|"
                          r"省|花费|开销|控制在", re.IGNORECASE)
# A date: a number, a month or weekday, a lunar-calendar word or a festival ("腊月初八", "七夕", "Boxing Day").
_DATE_LIKE = cjk_compile(r"\d|january|february|march|april|may|june|july|august|september|october|november|december|"
                        r"\b(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b|monday|tuesday|wednesday|thursday|"
                        r"friday|saturday|sunday|\beve\b|\bday\b|christmas|new year|[一二三四五六七八九十]+月|正月|腊月|冬月|农历|"
                        r"阴历|初[一二三四五六七八九十]|[一二三四五六七八九十]+[号日]|(?:周|星期|礼拜)[一二三四五六日天]|七夕|除夕|元旦|元宵|中秋|"
                        r"端午|重阳|春节|节", re.IGNORECASE)
# A time zone the lexicon of `rules.timezone` does not hold: an abbreviation ("GMT", "IST", "SAST"), a zone name
# ("Pacific", "Central European time", "英国时间", "美西") or an offset from a place ("8 hours behind London",
# "比北京慢一个小时", "跟北京差12个小时").
_TIMEZONE_LIKE = cjk_compile(r"^[A-Z]{2,4}T$|^(?i:pacific|central|eastern|mountain|atlantic)$|\b(?i:time|timezone|"
                            r"time zone)\b|时间$|时区|^美[东西中]|(?i:hours?|hrs?)\s+(?i:ahead|behind)|小时")
# A place name the gazetteer does not hold: capitalised Latin words ("Bath", "Didsbury", "SF") or a Chinese name with
# a place suffix ("西二旗", "天府新区"). Diacritics are folded before the gazetteer is asked ("São Paulo").
_PLACE_NAME = re.compile(r"(?:[A-Z][^\W\d_]+(?:[ '-][A-Z][^\W\d_]+){0,2}|[A-Z]{2,3})|"
                         r"[\u4e00-\u9fff]{1,6}(?:区|县|镇|乡|旗|岛|湾|省|市|州|新区|园区|开发区)")
_LATIN_STOP = frozenset({"i", "me", "my", "the", "a", "an", "it", "home", "work", "here", "there", "downtown", "uptown",
                         "city", "town", "office", "remote", "abroad", "overseas", "monday", "tuesday", "wednesday",
                         "thursday", "friday", "saturday", "sunday", "english", "chinese"})
# A one-character Chinese noun is a value for a few fields ("对蟹过敏", "怕辣"); a one-character function word is not.
_ONE_CHAR_FIELDS = frozenset({"allergy", "dislikes", "likes", "diet", "pets", "children"})
_NOT_ONE_CHAR = re.compile(r"[^\u4e00-\u9fff]|[我你您他她它这那的了吗呢吧啊呀是有在不没都也就还很太把被又和跟给让从向对个些么啥谁哪]")
# The user's own spouse without a relation word of the lexicon: "我家那位", "我们家那口子".
_SPOUSE_PHRASE = re.compile(r"^(?:我|我们)家(?:的)?(?:那位|那口子)$")


def _fold(value: str) -> str:
    """`value` without diacritics ("São Paulo" -> "Sao Paulo"), for the gazetteer's ASCII spellings."""
    import unicodedata

    return "".join(ch for ch in unicodedata.normalize("NFKD", value) if not unicodedata.combining(ch))


# A Latin name glued before a place ("Google London", "Microsoft上海"): an employer's office, said where it is.
_LATIN_NAME_HEAD = re.compile(r"(?:[A-Z][\w&'.\-]*\s?){1,3}")


def _name_before_place(key: str, value: str, place: str) -> bool:
    """Whether a place field's `value` is a Latin name and then the rule's `place` (the span must not take it)."""
    v, p = value.strip(), place.strip()
    if key not in _PLACE_KEYS or not v.lower().endswith(p.lower()) or len(v) == len(p):
        return False
    return _LATIN_NAME_HEAD.fullmatch(v[:len(v) - len(p)]) is not None


def _place_like(value: str) -> bool:
    from usermem.understand.gazetteer import find_places

    v = value.strip()
    if find_places(v) or find_places(_fold(v)):
        return True
    if v.startswith(NOT_PLACES) or normalise(v) in _LATIN_STOP:
        return False
    return bool(_PLACE_NAME.fullmatch(v))


# A Chinese "name" that starts with a preposition or adverb is a cut through a clause ("把花" from "又把花盆打翻了").
_GRAMMAR_HEAD = re.compile(r"[把被又在和跟给让从向对也都就还很太]")


# A Chinese "name" ending in a complement or aspect particle is a verb phrase ("我家咪咪饿得一直叫": 饿得).
_GRAMMAR_TAIL = re.compile(r"(?<=[\u4e00-\u9fff])[得着过]$")


# A star sign ("射手座", "a Sagittarius" — the English word alone: "cancer researcher" is a job).
_ZODIAC = re.compile(r"(?:白羊|金牛|双子|巨蟹|狮子|处女|天秤|天蝎|射手|摩羯|水瓶|双鱼)座|^(?i:(?:an? )?(?:aries|taurus|gemini|cancer|leo|"
                     r"virgo|libra|scorpio|sagittarius|capricorn|aquarius|pisces))$")


def _plausible(key: str, value: str) -> bool:
    """A learned proposal for a typed field must look like a value of that type (and never like a secret).

    What each check keeps out, measured on the train, dev and more-dev splits (2026-12-01): e-mail local parts cut
    from their domain ("wen", "chenlu@starlab"), bare possessives and articles for relatives ("my", "the"),
    address fragments without a street ("Apt 7B", "Flat 4"), credentials, famous names. Value types are read in any
    script: Chinese numerals for money, lunar dates and festivals for birthdays, zone names and offsets for time
    zones, place names the gazetteer lacks when they are written as names."""
    v = value.strip()
    if key not in ("email", "phone") and _SECRET_LIKE.match(v):
        return False  # "Tr0ub4dor&3": credentials are not memories, whatever the model says
    if normalise(value) in _FUNCTION_WORDS:
        return False
    if len(v) == 1 and (key not in _ONE_CHAR_FIELDS or _NOT_ONE_CHAR.match(v)):
        return False
    if key in ("name", "preferred_name") and rules.famous_name(value):
        return False  # "我叫秦始皇", "I'm Batman": a joke
    if key == "address":
        return bool(_ADDRESS_LIKE.search(value))
    if key == "allergy" and _NOT_ALLERGEN.search(value):
        return False
    if key == "contact_channel" and re.fullmatch(r"(?i)\s*call(?: me)?\s*", value):
        return False  # "call me Jo" is a form of address
    if key in ("likes", "dislikes") and normalise(value) in _PRONOUNS:
        return False
    if key in ("spouse", "children", "pets"):  # the relation word itself, or a name
        from usermem.understand.filters import OTHERS

        lexicon = {"spouse": rules.SPOUSE, "children": rules.CHILDREN, "pets": rules.PETS}[key]
        low = value.lower()
        if any(w in low for w in lexicon) or (key == "spouse" and _SPOUSE_PHRASE.match(v)):
            return True
        return bool(re.fullmatch(r"[A-Z][^\W\d_A-Z]+|[\u4e00-\u9fff]{2,3}", v)) and not OTHERS.search(value) \
            and not rules.NOT_A_NAME.search(value) and not _GRAMMAR_HEAD.match(v) and not _GRAMMAR_TAIL.search(v)
    if key in ("occupation", "education", "employer") and _ZODIAC.search(v):
        return False  # "I'm a Sagittarius", "我是射手座": a star sign, not a job
    if key in _PLACE_KEYS:
        return _place_like(value)
    if key == "timezone":
        return bool(rules.timezone(value)) or bool(_TIMEZONE_LIKE.search(v))
    if key == "email":
        return bool(_EMAIL.fullmatch(v))
    if key == "phone":
        return sum(ch.isdigit() for ch in value) >= 7
    if key == "budget":  # money, not calories or steps ("控制在1500大卡以内")
        return bool(_NUMBER_LIKE.search(value) or _MONEY_WORDS.search(value)) and not rules.counts_no_money(value)
    if key == "birthday":
        return bool(_DATE_LIKE.search(value))
    return len(value) <= 60


_EDGE = " \t,，。.!！~、;；:：\"'“”‘’()（）—–…"
# An English idiom of degree closing a span: it says how much, not what ("I'm a Leo through and through").
_DEGREE_IDIOM = re.compile(r"(?i)(?<=\w)[\s,]+(?:through and through|to the core|at heart|by nature|born and bred|"
                           r"(?:100|a hundred) ?(?:%|percent)|all the way)[\s,.!]*$")


def _trim(value: str, key: str = "") -> str:
    """A learned span's words without the punctuation at its edges ("pescatarian —", "朵朵——") and without what
    follows a bracket it does not close ("Lucía (6", "三花）今天又不理": the span ran out of or into an aside).
    A phone number keeps its brackets ("604) 555-0134" is an area code)."""
    plain = _EDGE.replace("()（）", "")
    value = value.strip(plain)
    if value[:1] in "(（" and value[-1:] in ")）":
        value = value[1:-1].strip(plain)  # "(vegan)": the brackets wrap the value
    if key != "phone":
        # an idiom of degree after the value is no part of it ("a Leo through and through", "a teacher at heart")
        value = _DEGREE_IDIOM.sub("", value)
        for open_, close in (("(", ")"), ("（", "）")):
            if value.count(open_) > value.count(close):
                value = value[:value.rindex(open_)]
            elif value.count(close) > value.count(open_):
                value = value[:value.index(close)]
    if key == "usual_order":
        # the order, not where it is fetched or sent ("生椰拿铁少冰，到公司楼下自提", "a large oat cortado at the corner place")
        value = _ORDER_ERRAND.sub("", value)
    return value.strip(plain)


_ORDER_ERRAND = cjk_compile(r"[，,]\s*(?:送到|送去|到|放|寄到|自提|外送|打包)[^，,]*$|"
                            r"(?i:\s+(?:at|from) (?:the|my|our) [\w' \-]{1,30}$|[,]\s*(?:delivered|to go|for pickup)\b.*$)")


_LATIN = re.compile(r"[A-Za-z]")


def _whole_words(text: str, start: int, end: int) -> tuple[int, int]:
    """`start`, `end` moved out to the edges of the Latin words they cut ("Aust" -> "Austin", "my husb" -> "my
    husband"): a proposal by character position can end inside a word."""
    while 0 < start < len(text) and _LATIN.match(text[start - 1]) and _LATIN.match(text[start]):
        start -= 1
    while 0 < end < len(text) and _LATIN.match(text[end - 1]) and _LATIN.match(text[end]):
        end += 1
    return start, end


_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_jieba_lock = threading.Lock()


@lru_cache(maxsize=1)
def _jieba() -> Any:
    import jieba  # type: ignore[import-untyped]

    with _jieba_lock:
        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
    return jieba


@lru_cache(maxsize=4096)
def _zh_word_edges(text: str) -> tuple[frozenset[int], tuple[tuple[int, int], ...]]:
    """The positions in `text` between two Chinese characters of one dictionary word (jieba without its HMM guesses
    for unknown words, which join a verb to its object: "选过|道"), and each such word's (start, end)."""
    inside: set[int] = set()
    words: list[tuple[int, int]] = []
    for run in _CJK_RUN.finditer(text):
        for _, a, b in _jieba().tokenize(run.group(), HMM=False):
            if b - a > 1:
                inside.update(range(run.start() + a + 1, run.start() + b))
                words.append((run.start() + a, run.start() + b))
    return frozenset(inside), tuple(words)


def _zh_whole_words(text: str, start: int, end: int) -> tuple[int, int]:
    """A learned span's edge moved out over the one character of a Chinese word it leaves outside ("班时间别打我电话"
    -> "上班时间别打我电话": the character tagger missed the first character of 上班时间). Only a single orphaned
    character: a longer remainder ("给我|发邮件") is another word in jieba's dictionary merged with it, and cutting
    the span's edge fragment off instead lost recall on more-dev."""
    inside, words = _zh_word_edges(text)
    if start in inside or end in inside:
        for a, b in words:
            if a < start < b and start - a == 1:
                start = a
            if a < end < b and b - end == 1:
                end = b
    return start, end


# a capitalised Latin name of up to three words, and one joined after it by a conjunction (Chinese or English)
_NAME_WORDS = r"[A-Z][A-Za-zÀ-ÖØ-öø-ÿ-]*(?: [A-Z][A-Za-zÀ-ÖØ-öø-ÿ-]*){0,2}(?![A-Za-zÀ-ÖØ-öø-ÿ'’-])"  # no possessive: "Noah's mum"
_NAME_LIKE = re.compile(_NAME_WORDS)
_COORDINATED = re.compile(r"(?:\s*(?:或者|还有|和|、|/)\s*|\s+(?:and|or)\s+)(" + _NAME_WORDS + ")")


# contact channels joined by a conjunction ("WhatsApp或者Line", "微信、钉钉都行", "email or Slack")
_CHANNEL_WORDS = "|".join(re.escape(w) for w in sorted(CHANNELS, key=lambda w: (-len(w), w)))
_CHANNEL_AT = re.compile(r"(?:" + _CHANNEL_WORDS + r")(?![A-Za-z])", re.IGNORECASE)
_COORDINATED_CHANNEL = re.compile(r"(?:\s*(?:或者|或是|或|还有|和|跟|、|/)\s*|\s*,?\s+(?:and|or)\s+)(?:by\s+|via\s+)?"
                                  r"(" + _CHANNEL_WORDS + r")(?![A-Za-z])", re.IGNORECASE)


def _listed_channels(chosen: list[tuple[_Hit, int, int, str]], text: str) -> list[tuple[_Hit, int, int, str]]:
    """A contact channel found at `text[start:end]` — a channel word, or a span that is nothing but channel words
    joined by and / or / 和 / 或者 / 、 / "/" ("微信或者钉钉") — with more channel words joined after it: one value, the
    list of them as written (canonical forms aligned), in place of the channels it covers. A device word ("手机",
    "phone") is a channel only next to a contact verb, so it is not taken here."""
    out: list[tuple[_Hit, int, int, str] | None] = list(chosen)
    for n, (h, start, end, method) in enumerate(chosen):
        if h.key != "contact_channel" or start < 0 or not isinstance(h.value, str) or out[n] is None:
            continue
        first = _CHANNEL_AT.match(text, start)
        if first is None or first.group(0).lower() in _DEVICE_WORDS:
            continue
        values, canon, at = [first.group(0)], [CHANNELS[first.group(0).lower()]], first.end()
        while (nxt := _COORDINATED_CHANNEL.match(text, at)) is not None:
            word = nxt.group(1)
            if word.lower() in _DEVICE_WORDS or CHANNELS[word.lower()] in canon:
                break
            values.append(word)
            canon.append(CHANNELS[word.lower()])
            at = nxt.end()
        if len(values) == 1 or (at < end and text[at:end].strip(_EDGE)):
            continue  # one channel, or a span with other words than the listed channels
        out = [None if o is not None and o[0].key == "contact_channel" and start <= o[1] and o[2] <= at else o
               for o in out]
        out[n] = (replace(h, value=values, canonical=canon), start, max(at, end), method)
    return [o for o in out if o is not None]


# Collection fields whose values are split into items at a conjunction; a travel preference "全季或者亚朵" is one choice.
_SPLIT_ITEMS = ACCUMULATE - {"travel_preferences"}
_ITEM_JOIN = re.compile(r"\s*(?:、|以及|或者|和)\s*|\s*,?\s+(?:and|or|as well as)\s+", re.IGNORECASE)
# between languages 跟 / 同 / 与 join too ("闽南话跟普通话", "广东话同英文"), where elsewhere 跟 is "with" ("跟朋友打球")
_LANGUAGE_JOIN = re.compile(_ITEM_JOIN.pattern.replace("和)", "和|跟|同|与)", 1), re.IGNORECASE)
_DANGLING = cjk_compile(r"(?i)\b(?:with|of|for|to|the|a|an|in|on|at|and|or|my|from|about|like)$")


def _list_items(c: tuple[_Hit, int, int, str]) -> list[tuple[_Hit, int, int, str]]:
    """A value of a collection field (`_SPLIT_ITEMS`) joining items by and / or / 和 / 或者 / 以及 / 、 as its items, each
    with its own position and canonical form; a 和 inside a dictionary word (和牛, 暖和) joins nothing, and a part
    that is no item on its own (under two characters, or cut after a function word: "anything with") is left out.
    Anything else unchanged."""
    h, start, _, method = c
    join = _LANGUAGE_JOIN if h.key == "languages_spoken" else _ITEM_JOIN
    if h.key not in _SPLIT_ITEMS or not isinstance(h.value, str) or not join.search(h.value):
        return [c]
    value = h.value
    inside = _zh_word_edges(value)[0] if _CJK_RUN.search(value) else frozenset()
    cuts = [m for m in join.finditer(value) if m.start() > 0 and m.end() < len(value)
            and not (m.group().strip() == "和" and (m.start() in inside or m.end() in inside))]
    if not cuts:
        return [c]
    parts: list[tuple[str, int]] = []
    at = 0
    for m in cuts:
        parts.append((value[at:m.start()], at))
        at = m.end()
    parts.append((value[at:], at))
    out = []
    for words, offset in parts:
        item = _clean(words)
        if len(normalise(item)) < 2 or _DANGLING.search(item):
            continue
        pos = start + offset + words.find(item) if start >= 0 else -1
        out.append((replace(h, value=item, canonical=_canonical_of(h.key, item)), pos,
                    pos + len(item) if pos >= 0 else -1, method))
    return out if len(out) > 1 or (out and len(parts) > 1 and out[0][0].value != value) else [c]


# A sentence end inside a learned span: a full stop, question or exclamation mark followed by a space (so not the dot of
# an e-mail address, a file type or a decimal), or a Chinese one; not after a title or abbreviation ("Dr. Obi").
_SENTENCE_END = re.compile(r"[.!?](?=\s+\S)|[。！？]")
_ABBREVIATION = re.compile(r"(?i)\b(?:dr|mr|mrs|ms|st|mt|jr|sr|vs|no|etc|approx|e\.g|i\.e|[a-z])$")


def _sentence_end(text: str, start: int, end: int) -> int:
    """`end` moved back to the first sentence end inside `text[start:end]` ("a splash of oat milk these days. stomach
    issues": the character tagger ran into the next sentence); unchanged when there is none."""
    for m in _SENTENCE_END.finditer(text, start, end):
        if m.group() == "." and _ABBREVIATION.search(text, start, m.start()):
            continue
        return m.start() if m.start() > start else end
    return end


def _cut_word(value: str, source: str, at: int) -> str:
    """A rule's value cut inside a word by its length cap ("pork — halal isn't stric", "…with hand-dra") loses the
    cut word; `at` is where the value starts in `source`."""
    end = at + len(value)
    if at < 0 or end >= len(source) or not (_LATIN.match(value[-1:]) and _LATIN.match(source[end])):
        return value
    kept = re.sub(r"\s*[^\s]*$", "", value)
    return _clean(kept) if kept.strip() else value


def canonical_form(key: str, value: Any) -> Any:
    """A normalised form of `value` for enum-like and typed fields (kept beside the user's words), or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    low = normalise(value)
    lexicons: Mapping[str, Mapping[str, str]] = {
        "report_format": REPORT_FORMATS, "language": LANGUAGES, "contact_channel": CHANNELS,
        "reply_format": REPLY_FORMATS, "diet": rules.DIETS, "reply_tone": rules.TONES, "pets": rules.PETS,
        "spouse": rules.SPOUSE, "children": rules.CHILDREN,
    }
    if key in lexicons:
        return _lookup(low, lexicons[key])
    if key == "reply_length":
        if _any(low, CONCISE) or low in ("short", "concise", "brief"):
            return "short"
        if _any(low, DETAILED) or low in ("long", "detailed"):
            return "long"
        return None
    if key in _PLACE_KEYS:
        from usermem.understand.gazetteer import find_places

        found = find_places(value)
        return found[0].canonical if found else None
    if key == "timezone":
        tz = rules.timezone(value)
        return tz[0].canonical if tz else None
    if key == "budget":
        return rules.money(value)
    if key == "birthday":
        return rules.month_day(value)
    return None


_canonical_of = canonical_form


def _bare_value(text: str, key: str) -> tuple[str, Any] | None:
    """The value a correction gives without naming its field: "不对，是南宁" -> ("南宁", "Nanning")."""
    from usermem.understand.filters import CORRECTION

    rest = CORRECTION.sub("", text, count=1)
    for _ in range(2):  # "不对不对，是5月3号"
        rest = CORRECTION.sub("", rest.lstrip(" ,，"), count=1) if CORRECTION.match(rest.lstrip(" ,，")) else rest
    if key in _PLACE_KEYS:
        from usermem.understand.gazetteer import find_places

        found = find_places(rest)
        return (found[0].text, found[0].canonical) if found else None
    # the value opens what is left ("no — Central. I keep forgetting I moved to Chicago": Central, not Chicago)
    m = re.match(cjk_edges(r"[\s,，:：—–-]*(?:是|叫|(?i:it'?s|it is|make (?:that|it)|call me|i'?m)\b)?\s*"
                 r"([^，,。.!！?？；;\s—–][^，,。.!！?？；;—–]{0,20})(?=[，,。.!！?？；;—–]|$)"), rest)
    if m is not None and (len(m.group(1).split()) > 3 or (not m.group(1).isascii() and len(m.group(1)) > 8)):
        m = None
    if m is None:
        m = re.search(cjk_edges(r"(?:是|叫|(?<![A-Za-z])(?i:it'?s|it is|make (?:that|it)|call me|i'?m|to)\b)\s*"
                      r"([^，,。.!！?？；;\s][^，,。.!！?？；;]{0,20})"), rest)
    if m is None:  # the value said as the better choice: "English is better actually", "还是英文比较好"
        m = re.match(cjk_edges(r"[\s,，:：]*(?:还是|用)?([^，,。.!！?？；;\s][^，,。.!！?？；;]{0,20}?)\s*"
                               r"(?:(?i:is|'s|would be|works|'d be)\s+(?i:better|best|fine|preferred)\b|"
                               r"(?:比较好|更好|好一点|好些|就行|就好))"), rest)
    if m is None:
        m = re.match(r"[\s,，:：]*([^，,。.!！?？；;]{1,24})", rest)
        if m is not None and not _CJK_RUN.search(m.group(1)) and re.match(r"[A-Za-z]", rest[m.end():m.end() + 1]):
            # cut at 24 characters inside a word: keep the whole words before it
            whole = m.group(1).rsplit(" ", 1)[0] if " " in m.group(1).strip() else ""
            if not whole.strip():
                return None
            return _bare_result(key, whole)
    if m is None:
        return None
    return _bare_result(key, m.group(1))


def _bare_result(key: str, raw: str) -> tuple[str, Any] | None:
    value = _clean(raw)
    if key in ("name", "preferred_name"):
        value = value.split()[0] if value.isascii() and value.split() else value
    return (value, canonical_form(key, value)) if value else None


def normalise_keep_case(text: str) -> str:
    import unicodedata
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def _clauses(text: str) -> list[str]:
    """Sentences, further split at "但是/不过/but" so "我喜欢X，但是不要Y" is judged part by part."""
    parts = re.split(cjk_edges(r"(?<=[。！？!?；;\n])|(?<=\.)\s+|[，,]\s*(?=但是|不过|可是|but\b)"), text)
    return [p for p in (x.strip() for x in parts if x) if p]


# --- the LLM extractor ------------------------------------------------------------------------------------

class _LLMMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    key: str
    kind: str
    value: str
    confidence: float
    message_index: int
    evidence: str = ""


class _LLMReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    memories: list[_LLMMemory]


_SYSTEM = """You extract long-term memories about the USER from a conversation (你从对话中抽取关于用户的长期记忆).
Return JSON only: {"memories": [{"key", "kind", "value", "confidence", "message_index", "evidence"}]}.
Rules:
- Only these fields may be used; never invent a field:
{fields}
- Only what the user says about themselves and means as lasting (preferences, standing facts). Skip questions,
  hypotheticals, jokes, other people's details and one-off requests ("this time", "这次").
- Skip business data the company's systems already hold (orders, balances, subscription plans, ticket numbers).
- If the user changes their mind, output only the final value.
- value: short text in the user's words; message_index: index of the user message that supports it;
  evidence: a short quote from that message; confidence between 0 and 1.
- Return {"memories": []} when there is nothing to remember."""


def extractable(contracts: ContractSet) -> dict[str, FieldContract]:
    """The extraction whitelist: enabled, storable, not live, not session context, not owned by the system of record."""
    out = {}
    for c in contracts.enabled():
        if not c.storable or c.live or c.kind is Kind.CONTEXT:
            continue
        if c.authority and c.authority[0] is Source.SYSTEM:
            continue  # business data: read it from the system of record, never from chat
        out[c.key] = c
    return out


CANONICAL: Mapping[str, Mapping[str, str]] = {
    "report_format": REPORT_FORMATS, "language": LANGUAGES, "contact_channel": CHANNELS,
    "reply_format": REPLY_FORMATS,
}


def canonical_value(key: str, value: str) -> str:
    """The canonical value of an enumerable field ("Markdown" -> "markdown", "英文" -> "en"), else the value.

    Kept for callers that compare values; extraction stores the user's words and puts `canonical_form`
    beside them instead of calling this."""
    low = normalise(value)
    if key in CANONICAL:
        return _lookup(low, CANONICAL[key]) or value.strip()
    if key == "reply_length":
        if _any(low, CONCISE) or low in ("short", "concise"):
            return "concise"
        if _any(low, DETAILED) or low in ("long", "detailed"):
            return "detailed"
    return value.strip()


class Extractor:
    def __init__(self, contracts: ContractSet, llm: LLMClient | None = None, timeout: float = 30.0) -> None:
        self.allowed = extractable(contracts)
        self.patterns = PatternExtractor(self.allowed)
        self.llm = llm
        self.timeout = timeout
        keys = sorted(self.allowed)
        self._schema: dict[str, Any] = {
            "type": "object",
            "properties": {"memories": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "enum": keys} if keys else {"type": "string"},
                    "kind": {"type": "string", "enum": [k.value for k in Kind]},
                    "value": {"type": "string"},
                    "confidence": {"type": "number"},
                    "message_index": {"type": "integer"},
                    "evidence": {"type": "string"},
                },
                "required": ["key", "kind", "value", "confidence", "message_index", "evidence"],
                "additionalProperties": False,
            }}},
            "required": ["memories"],
            "additionalProperties": False,
        }
        fields = "\n".join(f"  - {c.key} ({c.kind.value}): {c.description}" for c in self.allowed.values())
        self._system = _SYSTEM.replace("{fields}", fields or "  - (none)")

    def extract(self, messages: Any, *, use_llm: bool = True) -> list[Candidate]:
        msgs = coerce_messages(messages)
        if use_llm and self.llm is not None and any(m.role == "user" for m in msgs):
            transcript = "\n".join(f"[{m.index}] {m.role}: {m.content}" for m in msgs)
            reply = self.llm.structured("extract", self._system, transcript, _LLMReply, self._schema,
                                        timeout=self.timeout)
            if reply is not None:
                return self._checked(reply, msgs)
        return self.patterns.extract(msgs)

    def _checked(self, reply: _LLMReply, msgs: Sequence[Message]) -> list[Candidate]:
        """Drop invented fields, evidence that is not in the cited user turn and empty values; canonicalise."""
        by_index = {m.index: m for m in msgs}
        latest: dict[str, Candidate] = {}
        for item in reply.memories:
            contract = self.allowed.get(item.key)
            msg = by_index.get(item.message_index)
            if contract is None or msg is None or msg.role != "user":
                continue
            if item.evidence.strip() and normalise(item.evidence) not in normalise(msg.content):
                continue  # the quoted support is not in that message: an invention
            value = item.value.strip()  # the user's words; a canonical form goes beside them
            if not value or len(value) > 500:
                continue
            confidence = min(1.0, max(0.0, float(item.confidence)))
            latest.pop(item.key, None)
            latest[item.key] = Candidate(key=item.key, kind=contract.kind, value=value, confidence=confidence,
                                         evidence=msg.content, message_index=msg.index, method="llm",
                                         canonical=canonical_form(item.key, value))
        return list(latest.values())
