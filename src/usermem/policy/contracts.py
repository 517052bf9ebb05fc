"""Field contracts: what may be collected about a user, how sensitive it is, and who may override it.

A contract is plain data. The default set covers the fields the design documents talk about;
deployments edit, add or disable contracts (stored and versioned by the engine).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any

from usermem.model import KIND_REGISTRY, Kind, Source, parse_kind
from usermem.policy.pii import PIIKind


class Sensitivity(StrEnum):
    L1 = "L1"  # public profile: name, city, occupation, preferences
    L2 = "L2"  # identifiers: phone, address, ID-like data
    L3 = "L3"  # special categories: health, religion, finances


class Sharing(StrEnum):
    PRIVATE = "private"  # only the domain that collected it
    SHARED = "shared"  # any domain of the tenant
    EXPLICIT_OPT_IN = "explicit_opt_in"  # other domains only after the user agrees


class UnknownFieldPolicy(StrEnum):
    ACCEPT = "accept"  # accept as L1 with the kind's defaults
    REJECT = "reject"


SENSITIVITY_ORDER: Mapping[Sensitivity, int] = {Sensitivity.L1: 1, Sensitivity.L2: 2, Sensitivity.L3: 3}


@dataclass(frozen=True, slots=True)
class FieldContract:
    key: str
    kind: Kind
    description: str = ""
    aliases: tuple[str, ...] = ()
    sensitivity: Sensitivity = Sensitivity.L1
    domain: str = "general"
    sharing: Sharing = Sharing.SHARED
    ttl_seconds: float | None = None  # None: the kind's default (see ttl_override)
    ttl_override: bool = False  # True: ttl_seconds applies even when None (= never expires)
    half_life_seconds: float | None = None
    default_importance: float | None = None
    # Highest authority first; None means the global Source order.
    authority: tuple[Source, ...] | None = None
    storable: bool = True  # False: never stored; a `live` field is read from the system of record
    live: bool = False
    resolver: str | None = None  # dotted Python path or http(s) URL for live fields
    enabled: bool = True
    standing: bool = False  # never dropped or flagged by decay (allergies, language, contact channel)
    allowed_pii: frozenset[PIIKind] = frozenset()
    questions: Mapping[str, str] = field(default_factory=dict)  # confirmation question per language
    # What people read instead of the key, per language ({"zh": "过敏信息", "en": "allergy information"}): a noun
    # phrase that fits "您的{label}…" and "your {label}…" (policy/wording.py builds the questions from it).
    labels: Mapping[str, str] = field(default_factory=dict)
    version: int = 1

    def label(self, language: str) -> str:
        """The field's name for people in `language` ("zh"/"en"): the contract's label, else the other
        language's, else the description (or key) made readable. Never empty."""
        text = self.labels.get(language) or self.labels.get("en" if language == "zh" else "zh")
        if text:
            return text
        return readable_key(self.description.split(":")[0].split(" / ")[0].strip() or self.key)

    def effective_ttl(self) -> float | None:
        if self.ttl_override or self.ttl_seconds is not None:
            return self.ttl_seconds
        return KIND_REGISTRY[self.kind].ttl_seconds

    def effective_half_life(self) -> float:
        return self.half_life_seconds or KIND_REGISTRY[self.kind].half_life_seconds

    def effective_importance(self) -> float:
        if self.default_importance is not None:
            return self.default_importance
        return KIND_REGISTRY[self.kind].default_importance

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind.value,
            "description": self.description,
            "aliases": list(self.aliases),
            "sensitivity": self.sensitivity.value,
            "domain": self.domain,
            "sharing": self.sharing.value,
            "ttl_seconds": self.ttl_seconds,
            "ttl_override": self.ttl_override,
            "half_life_seconds": self.half_life_seconds,
            "default_importance": self.default_importance,
            "authority": [s.value for s in self.authority] if self.authority else None,
            "storable": self.storable,
            "live": self.live,
            "resolver": self.resolver,
            "enabled": self.enabled,
            "standing": self.standing,
            "allowed_pii": sorted(p.value for p in self.allowed_pii),
            "questions": dict(self.questions),
            "labels": dict(self.labels),
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FieldContract:
        authority = data.get("authority")
        return cls(
            key=str(data["key"]),
            kind=parse_kind(str(data["kind"])),
            description=str(data.get("description", "")),
            aliases=tuple(str(a) for a in data.get("aliases", ())),
            sensitivity=Sensitivity(data.get("sensitivity", "L1")),
            domain=str(data.get("domain", "general")),
            sharing=Sharing(data.get("sharing", "shared")),
            ttl_seconds=_opt_float(data.get("ttl_seconds")),
            ttl_override=bool(data.get("ttl_override", False)),
            half_life_seconds=_opt_float(data.get("half_life_seconds")),
            default_importance=_opt_float(data.get("default_importance")),
            authority=tuple(Source(s) for s in authority) if authority else None,
            storable=bool(data.get("storable", True)),
            live=bool(data.get("live", False)),
            resolver=data.get("resolver"),
            enabled=bool(data.get("enabled", True)),
            standing=bool(data.get("standing", False)),
            allowed_pii=frozenset(PIIKind(p) for p in data.get("allowed_pii", ())),
            questions=dict(data.get("questions", {})),
            labels=dict(data.get("labels") or {}),
            version=int(data.get("version", 1)),
        )

    def evolve(self, **changes: Any) -> FieldContract:
        return replace(self, **changes)


def readable_key(key: str) -> str:
    """`news_push` → `news push`: a key shown to people when no label exists."""
    return re.sub(r"[_.\-]+", " ", key).strip() or key


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# --- forbidden keys -------------------------------------------------------------------------------------

# Normalised (lower-case, separators removed) key names that may never be stored, in any spelling.
DEFAULT_FORBIDDEN_KEYS: frozenset[str] = frozenset(
    {
        "card_number", "password", "id_number",
        "cardnumber", "creditcard", "creditcardnumber", "bankcard", "bankcardnumber", "debitcard", "cardno", "cvv",
        "cvv2", "cvc", "securitycode", "pin", "pincode", "passwd", "pwd", "passcode", "passphrase", "idnumber",
        "idno", "idcard", "idcardnumber", "ssn", "nationalid", "passport", "passportno", "passportnumber", "secret",
        "secretkey", "privatekey", "apikey", "accesstoken", "authtoken", "refreshtoken", "apitoken", "otp",
        "verificationcode",
        "卡号", "银行卡", "银行卡号", "信用卡号", "密码", "登录密码", "支付密码", "口令",
        "身份证", "身份证号", "身份证号码", "证件号", "证件号码", "护照号", "验证码", "安全码",
    }
)
# Substrings that make any key containing them forbidden, wherever they sit (login_password, 银行卡号码...).
_FORBIDDEN_SUBSTRINGS = ("password", "passwd", "密码", "卡号", "身份证", "验证码", "口令")
_TOKEN_SPLIT = re.compile(r"[\s_\-.:/]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise_key(key: str) -> str:
    return re.sub(r"[\s_\-.]", "", key).lower()


@lru_cache(maxsize=64)
def _normalised(forbidden: frozenset[str]) -> frozenset[str]:
    return frozenset(normalise_key(k) for k in forbidden)


def is_forbidden_key(key: str, forbidden: Iterable[str] = DEFAULT_FORBIDDEN_KEYS) -> bool:
    """Is `key` a name under which nothing may be stored, in any spelling?

    Matches whole words, not letters: `user_id_number`, `cardNumber`, `my_idcard` and `bank-card-no` are
    forbidden; `valid_number`, `paid_card`, `secret_santa` and `spin` are not. The last one to three words
    are compared with the forbidden names; a few unmistakable fragments (password, 密码, 身份证...) match
    anywhere.
    """
    frozen = forbidden if isinstance(forbidden, frozenset) else frozenset(forbidden)
    if isinstance(key, str) and len(key) <= _CACHED_KEY_CHARS:
        return _is_forbidden_cached(str(key), frozen)
    return _is_forbidden(key, frozen)


_CACHED_KEY_CHARS = 128


@lru_cache(maxsize=16_384)
def _is_forbidden_cached(key: str, forbidden: frozenset[str]) -> bool:
    """`_is_forbidden` remembered: a pure function of the key and the forbidden set, asked at least twice
    per write (the write pipeline, then the value guard) for the same few keys."""
    return _is_forbidden(key, forbidden)


def _is_forbidden(key: str, forbidden: frozenset[str]) -> bool:
    norm = normalise_key(key)
    names = _normalised(forbidden)
    if norm in names or any(s in norm for s in _FORBIDDEN_SUBSTRINGS):
        return True
    # The last words name what the key holds (user_id_number, client_secret, bank_card_no); earlier words
    # only qualify it (secret_santa, pin_color are not secrets).
    words = [w for w in _TOKEN_SPLIT.split(_CAMEL.sub(" ", key).lower()) if w]
    return any("".join(words[-size:]) in names for size in (1, 2, 3) if size <= len(words))


# --- the default contract set ----------------------------------------------------------------------------

_SYS_FIRST = (Source.SYSTEM, Source.AGENT_CONFIRMED, Source.USER_CONFIRMED, Source.ONBOARDING, Source.EXTRACTED,
              Source.INFERRED)
# The user is the authority on how they want to be contacted, above what a CRM import says.
_USER_FIRST = (Source.USER_CONFIRMED, Source.AGENT_CONFIRMED, Source.SYSTEM, Source.ONBOARDING, Source.EXTRACTED,
               Source.INFERRED)


# The built-in fields' labels (zh, en): noun phrases read in "您的{label}还是…吗？" / "Is your {label} still…?"
# and "可以使用您的{label}来…吗？" / "May I use your {label} to…?".
DEFAULT_LABELS: Mapping[str, tuple[str, str]] = {
    "name": ("姓名", "name"),
    "plan": ("订阅套餐", "subscription plan"),
    "occupation": ("职业", "occupation"),
    "city": ("居住城市", "city"),
    "email": ("邮箱地址", "e-mail address"),
    "phone": ("手机号码", "phone number"),
    "address": ("住址", "address"),
    "allergy": ("过敏信息", "allergy information"),
    "medical_history": ("病史", "medical history"),
    "contact": ("联系方式", "contact preference"),
    "contact_channel": ("联系渠道", "preferred contact channel"),
    "language": ("回复语言", "reply language"),
    "report_format": ("报告格式", "report format"),
    "reply_length": ("回复长度", "reply length"),
    "reply_format": ("回复格式", "reply format"),
    "task_types": ("常用任务类型", "usual tasks"),
    "likes": ("喜好", "likes"),
    "dislikes": ("不喜欢的东西", "dislikes"),
    "news_topics": ("新闻推送偏好", "news preferences"),
    "open_issue": ("待处理的问题", "open issue"),
    "current_task": ("当前任务", "current task"),
    "preferred_name": ("称呼", "preferred form of address"),
    "work_city": ("工作城市", "work city"),
    "hometown": ("老家", "hometown"),
    "timezone": ("时区", "time zone"),
    "employer": ("工作单位", "employer"),
    "spouse": ("配偶信息", "spouse or partner"),
    "children": ("子女信息", "children"),
    "pets": ("宠物", "pets"),
    "diet": ("饮食习惯", "diet"),
    "accessibility": ("无障碍需求", "accessibility needs"),
    "languages_spoken": ("会说的语言", "languages spoken"),
    "reply_tone": ("回复语气", "reply tone"),
    "contact_hours": ("联系时间", "contact hours"),
    "birthday": ("生日", "birthday"),
    "budget": ("预算", "budget"),
    "usual_order": ("常点的东西", "usual order"),
    "brands": ("常用品牌", "preferred brands"),
    "hobbies": ("爱好", "hobbies"),
    "schedule": ("日程习惯", "schedule"),
    "travel_preferences": ("出行偏好", "travel preferences"),
    "education": ("教育背景", "education"),
}


def _c(key: str, kind: Kind, description: str, aliases: Iterable[str], **kw: Any) -> FieldContract:
    zh, en = DEFAULT_LABELS[key]
    return FieldContract(key=key, kind=kind, description=description, aliases=tuple(aliases),
                         labels={"zh": zh, "en": en}, **kw)


DEFAULT_CONTRACTS: tuple[FieldContract, ...] = (
    _c("name", Kind.FACT, "the user's name", ["名字", "姓名", "叫什么", "称呼", "name", "call me"]),
    _c("plan", Kind.FACT, "subscription plan held by the billing system", ["套餐", "年付", "月付", "订阅", "plan",
       "subscription", "billing"], authority=_SYS_FIRST, domain="billing"),
    _c("occupation", Kind.FACT, "job or role", ["职业", "工作", "职位", "岗位", "我是", "job", "occupation", "role",
       "profession", "work as"]),
    _c("city", Kind.FACT, "city the user lives in", ["城市", "住在", "所在地", "city", "live in", "based in"]),
    _c("email", Kind.FACT, "e-mail address for sending things", ["邮箱", "邮件地址", "电子邮件", "发邮箱", "发我邮箱",
       "email", "e-mail", "mail"], allowed_pii=frozenset({PIIKind.EMAIL}), standing=True),
    _c("phone", Kind.FACT, "mobile phone number", ["手机", "手机号", "电话", "phone", "mobile"],
       sensitivity=Sensitivity.L2, allowed_pii=frozenset({PIIKind.CN_MOBILE})),
    _c("address", Kind.FACT, "postal address", ["地址", "住址", "收货地址", "address"], sensitivity=Sensitivity.L2),
    _c("allergy", Kind.FACT, "allergies", ["过敏", "过敏原", "allergy", "allergic"], sensitivity=Sensitivity.L3,
       domain="health", standing=True, sharing=Sharing.EXPLICIT_OPT_IN),
    _c("medical_history", Kind.FACT, "medical history", ["病史", "既往病", "medical history", "diagnosis"],
       sensitivity=Sensitivity.L3, domain="health", sharing=Sharing.EXPLICIT_OPT_IN),
    _c("contact", Kind.PREFERENCE, "how the user wants to be contacted", ["联系方式", "联系", "打电话", "邮件联系",
       "contact", "call me", "reach me"], authority=_USER_FIRST, standing=True,
       questions={"zh": "您还是希望我们通过这种方式联系您吗？", "en": "Should we still contact you this way?"}),
    _c("contact_channel", Kind.PREFERENCE, "preferred contact channel", ["联系渠道", "联系方式", "contact channel",
       "channel"], authority=_USER_FIRST, standing=True),
    _c("language", Kind.PREFERENCE, "language for replies", ["语言", "中文", "英文", "英语", "language", "in english",
       "in chinese"], standing=True),
    _c("report_format", Kind.PREFERENCE, "format for reports and documents", ["格式", "报告格式", "markdown", "word",
       "pdf", "format", "report"],
       questions={"zh": "报告还用这个格式吗？", "en": "Should reports still use this format?"}),
    _c("reply_length", Kind.PREFERENCE, "preferred length of replies", ["回复长度", "简洁", "精简", "详细", "太长",
       "长一点", "短一点", "length", "concise", "brief", "detailed", "too long", "shorter"],
       questions={"zh": "回复还保持这个长度吗？", "en": "Should replies keep this length?"}),
    _c("reply_format", Kind.PREFERENCE, "format of replies (bullets, tables, prose)", ["列表", "表格", "要点",
       "bullet", "table", "bullets"]),
    _c("task_types", Kind.PREFERENCE, "what the user wants help with", ["写作", "查询", "规划", "任务", "writing",
       "research", "planning", "tasks"]),
    _c("likes", Kind.PREFERENCE, "things the user likes", ["喜欢", "爱", "偏爱", "like", "love", "prefer"]),
    _c("dislikes", Kind.PREFERENCE, "things the user dislikes", ["讨厌", "不喜欢", "不要", "别", "hate", "dislike",
       "don't like"]),
    _c("news_topics", Kind.PREFERENCE, "news topics to pause or follow", ["新闻", "资讯", "推送", "科技新闻", "news",
       "topics"], questions={"zh": "是否需要恢复科技资讯推送？", "en": "Do you still want tech news paused?"}),
    _c("open_issue", Kind.SITUATION, "an open support issue", ["问题", "工单", "退款", "扣款", "issue", "refund",
       "ticket", "problem"]),
    _c("current_task", Kind.CONTEXT, "what the current session is working on", ["当前", "正在", "这次", "current",
       "right now", "this session"]),
    # Fields of the labelled utterance bank (issue 13; usermem/data/bank/fields.json). The description starts
    # with the field's English and Chinese label ("home city / 居住城市: ...").
    _c("preferred_name", Kind.PREFERENCE, "form of address / 称呼: how the user wants to be addressed",
       ["称呼", "叫我", "怎么称呼", "form of address", "address me", "nickname"]),
    _c("work_city", Kind.FACT, "work city / 工作城市: city the user works in", ["工作城市", "在哪上班", "work city",
       "work in", "office is in"]),
    _c("hometown", Kind.FACT, "hometown / 老家: where the user grew up or comes from", ["老家", "家乡", "故乡",
       "hometown", "grew up", "come from"]),
    _c("timezone", Kind.FACT, "time zone / 时区: the user's time zone", ["时区", "time zone", "timezone"],
       standing=True),
    _c("employer", Kind.FACT, "employer / 工作单位: company or organisation the user works for or studies at",
       ["公司", "单位", "雇主", "employer", "company", "work for"]),
    _c("spouse", Kind.FACT, "spouse or partner / 配偶/伴侣", ["老婆", "老公", "爱人", "妻子", "丈夫", "对象",
       "spouse", "wife", "husband", "partner"], sensitivity=Sensitivity.L2),
    _c("children", Kind.FACT, "children / 子女", ["孩子", "儿子", "女儿", "小孩", "children", "kids", "son",
       "daughter"], sensitivity=Sensitivity.L2),
    _c("pets", Kind.FACT, "pets / 宠物", ["宠物", "猫", "狗", "pet", "cat", "dog"]),
    _c("diet", Kind.PREFERENCE, "diet / 饮食习惯: dietary regime or rule (vegetarian, halal, low sugar...)",
       ["饮食", "吃素", "素食", "忌口", "清真", "diet", "vegetarian", "vegan", "halal"], standing=True),
    _c("accessibility", Kind.FACT, "accessibility needs / 无障碍需求", ["无障碍", "轮椅", "视力", "听力", "色盲",
       "accessibility", "wheelchair", "low vision", "colour blind", "color blind"], sensitivity=Sensitivity.L3,
       domain="health", standing=True, sharing=Sharing.EXPLICIT_OPT_IN),
    _c("languages_spoken", Kind.FACT, "languages spoken / 会说的语言: languages the user speaks or is learning",
       ["会说", "母语", "在学", "speak", "native language", "learning"]),
    _c("reply_tone", Kind.PREFERENCE, "reply tone / 回复语气: formal, casual, direct, gentle, emoji or not",
       ["语气", "口吻", "正式", "随意", "表情", "tone", "formal", "casual", "emoji"]),
    _c("contact_hours", Kind.PREFERENCE, "contact hours / 联系时间: when the user may or may not be contacted",
       ["联系时间", "几点", "打扰", "contact hours", "call hours", "disturb"], authority=_USER_FIRST, standing=True),
    _c("birthday", Kind.FACT, "birthday / 生日", ["我的生日", "我生日", "出生日期", "my birthday", "date of birth", "when was i born"], sensitivity=Sensitivity.L2),
    _c("budget", Kind.PREFERENCE, "budget / 预算: a standing budget or price limit", ["预算", "价位", "价格",
       "budget", "price range", "afford"]),
    _c("usual_order", Kind.PREFERENCE, "usual order / 常点: what the user usually orders or buys", ["老样子",
       "常点", "照旧", "usual", "the usual", "my order"]),
    _c("brands", Kind.PREFERENCE, "brands / 常用品牌: brands, shops or services the user prefers", ["品牌",
       "牌子", "brand", "brands"]),
    _c("hobbies", Kind.FACT, "hobbies / 爱好: activities the user does for fun", ["爱好", "兴趣", "业余", "周末",
       "hobby", "hobbies", "free time", "weekend"]),
    _c("schedule", Kind.FACT, "schedule / 日程习惯: recurring routine (working hours, regular commitments)",
       ["日程", "作息", "每天", "上班时间", "schedule", "routine", "every day", "working hours"]),
    _c("travel_preferences", Kind.PREFERENCE, "travel preferences / 出行偏好: seat, class, transport, hotel",
       ["出行", "座位", "航班", "酒店", "机票", "高铁", "travel", "flight", "seat", "hotel", "train"]),
    _c("education", Kind.FACT, "education / 教育背景: school, degree or course", ["学历", "学校", "专业", "毕业",
       "education", "degree", "university", "major"]),
)


_UNKNOWN_DEFAULTS_KEPT = 4096  # per ContractSet; keys are at most 64 characters


class ContractSet:
    """An immutable lookup of contracts by key and alias, plus the policy for unknown keys."""

    def __init__(
        self,
        contracts: Iterable[FieldContract] = DEFAULT_CONTRACTS,
        unknown: UnknownFieldPolicy = UnknownFieldPolicy.ACCEPT,
        forbidden_keys: Iterable[str] = DEFAULT_FORBIDDEN_KEYS,
    ) -> None:
        self._by_key: dict[str, FieldContract] = {c.key: c for c in contracts}
        self.unknown = unknown
        self.forbidden_keys = frozenset(forbidden_keys)
        # for_write's L1 contracts of unknown keys, built once per (key, kind): the set is immutable and so
        # are FieldContracts, and a tenant writes the same few keys over and over (bounded; see for_write).
        self._unknown_defaults: dict[tuple[str, Kind], FieldContract] = {}

    def get(self, key: str) -> FieldContract | None:
        return self._by_key.get(key)

    def for_write(self, key: str, kind: Kind) -> FieldContract | None:
        """The contract governing a write, or None when unknown keys are rejected.

        Unknown keys (when accepted) get an L1 contract with the kind's defaults.
        """
        known = self._by_key.get(key)
        if known is not None:
            return known
        if self.unknown is UnknownFieldPolicy.REJECT:
            return None
        made = self._unknown_defaults.get((key, kind))
        if made is None:
            made = FieldContract(key=key, kind=kind)
            if len(self._unknown_defaults) < _UNKNOWN_DEFAULTS_KEPT:
                self._unknown_defaults[(key, kind)] = made
        return made

    def __iter__(self) -> Iterator[FieldContract]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def enabled(self) -> list[FieldContract]:
        return [c for c in self._by_key.values() if c.enabled]

    def with_contract(self, contract: FieldContract) -> ContractSet:
        merged = dict(self._by_key)
        merged[contract.key] = contract
        return ContractSet(merged.values(), self.unknown, self.forbidden_keys)

    def is_forbidden(self, key: str) -> bool:
        return is_forbidden_key(key, self.forbidden_keys)

