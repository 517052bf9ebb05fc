"""Recall plans: the memory recognition sub-agent of seed 004 §2.2.

A plan says which memories the agent should load for the *current message*:
{fact_recall, preference_recall, context_recall, memory_priority}. The planner reads only the
message and the enabled field contracts — never stored memories — and every field it names is
in the whitelist of enabled contracts (anything else is dropped).

Two recognisers:
- deterministic (always available, p95 well under 5 ms): a bilingual cue lexicon plus matching of the
  message against each field's key, aliases and topic cues. Chinese is matched by character n-grams
  (a term of two or more characters is a substring of the normalised message); single-character
  Chinese terms count only outside the compounds listed in `_CJK_COMPOUNDS`. English terms match
  whole words (plural -s allowed). The learned models add what the cues miss: the lexical field model
  (`learned.FieldModel` "plan") and, when the caller passes the message's query vector (recall passes the
  one it computed for semantic search), the vector head (`planvec.VectorFieldModel`), mixed by calibrated
  probability. Without a vector the plan is the cues + the lexical model, as before.
- LLM (when configured): the same inputs in a prompt, JSON-schema output whose field names are
  enumerated from the whitelist, validated, then filtered again; any failure falls back to the
  deterministic recogniser.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from usermem.model import Kind
from usermem.policy.contracts import ContractSet, FieldContract
from usermem.understand.llm import LLMClient
from usermem.understand.planvec import VectorFieldModel
from usermem.understand.text import has_cjk, normalise

Priority = Literal["high", "medium", "low"]
PRIORITIES: tuple[str, ...] = ("high", "medium", "low")
_FACT_KINDS = frozenset({Kind.FACT, Kind.SITUATION, Kind.EPISODE})


@dataclass(frozen=True, slots=True)
class RecallPlan:
    fact_recall: tuple[str, ...] = ()
    preference_recall: tuple[str, ...] = ()
    context_recall: bool = False
    memory_priority: str = "low"
    mode: str = "deterministic"  # which recogniser produced it ("llm" or "deterministic")

    @property
    def fields(self) -> tuple[str, ...]:
        return self.fact_recall + self.preference_recall

    def to_dict(self) -> dict[str, Any]:
        return {"fact_recall": list(self.fact_recall), "preference_recall": list(self.preference_recall),
                "context_recall": self.context_recall, "memory_priority": self.memory_priority}


# --- the cue lexicon ---------------------------------------------------------------------------------

# Phrases that point at earlier conversations: load session context and raise the priority.
# "之前" / "before" are also plain conjunctions ("打电话之前先发短信", "text me before you call"), so
# they count only in the grammatical positions of `_BACK_REFERENCE`.
CONTEXT_CUES: tuple[str, ...] = (
    "上次", "上回", "刚才", "刚刚", "前面说", "先前", "前几天", "昨天", "上周", "还记得", "记得吗", "说过",
    "提到过", "聊过", "聊的", "讲过", "继续", "接着", "那个方案", "那份", "那个文件", "原来的",
    "last time", "previously", "earlier", "we discussed", "we talked", "you said", "i said",
    "i mentioned", "i told you", "remember", "continue", "pick up where", "where we left", "go on with",
    "yesterday", "last week", "the one you", "that plan", "that draft", "as discussed",
)
_BACK_REFERENCE = re.compile(r"(?:你|我|我们|咱们)之前|之前(?:说|聊|讲|提|的|帮|发|做|改|给|问)|"
                             r"(?<![a-z])before(?=\s*[?.!,]|\s*$)")
# Phrases about standing facts or repetition: priority high.
HIGH_CUES: tuple[str, ...] = (
    "一直", "总是", "每次", "老是", "又", "照旧", "老样子", "依然", "紧急", "马上", "务必", "一定要", "千万",
    "always", "every time", "again", "as usual", "urgent", "asap", "right away", "never forget", "make sure",
)
ALWAYS_CUES: tuple[str, ...] = ("一直", "总是", "向来", "从来", "always", "every time", "as usual")

# Topic groups shared by several fields.
_FOOD = ("吃什么", "吃点", "餐厅", "饭店", "外卖", "食物", "零食", "点餐", "菜谱", "食谱", "做饭", "做菜", "蛋糕",
         "晚饭", "午饭", "早饭", "早餐", "午餐", "晚餐", "restaurant", "food", "eat", "dinner", "lunch",
         "breakfast", "recipe", "snack", "meal", "cook", "cake", "dish", "takeaway", "takeout")
_HEALTH = ("药", "用药", "看病", "症状", "体检", "挂号", "挂什么科", "病情", "头疼", "头痛", "发烧", "咳嗽",
           "不舒服", "医院", "医生", "medicine", "medication", "symptom", "checkup", "diagnosis", "prescription",
           "doctor", "headache", "fever", "cough", "hospital", "sick", "pill")
_CHOICE = ("推荐", "建议", "挑", "选一", "口味", "颜色", "风格", "recommend", "suggest", "pick", "taste",
           "colour", "color", "style", "what should i")
_ABOUT_ME = ("辞职信", "简历", "自我介绍", "求职信", "resignation", "resume", "cv", "cover letter", "intro about me",
             "introduce me", "bio")
_FORMAT = ("排版", "版式", "格式化", "format it", "formatting", "layout")

# Topic cues: words that imply a field although they are not its name. Deployments add their own by
# adding aliases to their contracts; these cover the default contracts in both languages.
FIELD_CUES: Mapping[str, tuple[str, ...]] = {
    "name": ("叫我", "我叫", "签名", "署名", "落款", "sign it", "signature", "sign off", "my name", *_ABOUT_ME),
    "occupation": ("面试", "跳槽", "同事", "老板", "升职", "加薪", "述职", "interview", "career", "colleague",
                   "my boss", "promotion", "raise", *_ABOUT_ME),
    "city": ("天气", "附近", "周边", "本地", "同城", "出门", "通勤", "带伞", "下雨", "气温", "weather", "nearby",
             "near me", "local", "around here", "commute", "umbrella", "rain"),
    "email": ("发我", "发到", "发给我", "发送给我", "邮件", "抄送", "send me", "send it", "email it", "mail it",
              "forward it", "forward me", "inbox"),
    "phone": ("短信", "回电", "给我打", "text me", "sms", "call me back", "ring me"),
    "address": ("寄给我", "寄到", "快递", "收货", "送到家", "送货", "配送", "邮寄", "ship", "deliver", "delivery",
                "post it", "my place"),
    "allergy": ("过敏", "allergic", *_FOOD, *_HEALTH),
    "diet": ("饮食", "热量", "卡路里", "减肥", "节食", "低糖", "低脂", "无麸质", "calorie", "calories", "keto",
             "gluten", "low-carb", "low carb", "low sugar", *_FOOD),
    "medical_history": _HEALTH,
    "contact": ("联系我", "通知我", "提醒我", "回复我", "打给我", "找我", "发短信", "打电话", "notify me",
                "remind me", "reach me", "get back to me", "contact me", "let me know", "text me", "call me"),
    "contact_channel": ("联系我", "通知我", "提醒我", "发短信", "打电话", "notify me", "contact me", "reach me",
                        "let me know", "text me", "call me"),
    "language": ("翻译", "中文", "英文", "英语", "汉语", "translate", "english", "chinese", "mandarin"),
    "report_format": ("报告", "文档", "纪要", "周报", "月报", "总结报告", "导出", "方案", "report", "document",
                      "minutes", "write-up", "write up", "export", "slides", "memo", *_FORMAT),
    "reply_length": ("回复", "回答", "解释", "说明", "简单说", "总结一下", "概括", "啰嗦", "太长", "详细",
                     "explain", "answer", "summarize", "summarise", "tl;dr", "tldr", "in short", "brief",
                     "wordy", "too long", "in detail"),
    # a summary is shaped as well as sized (the bank's convention: explanations and summaries → length and format)
    "reply_format": ("列个", "列一下", "列出", "表格", "清单", "分点", "要点", "list", "table", "bullet",
                     "checklist", "outline", "key points", "summarize", "summarise", "总结一下", "概括", *_FORMAT),
    "likes": (*_CHOICE, *_FOOD),
    "dislikes": (*_CHOICE, *_FOOD),
    "news_topics": ("新闻", "资讯", "推送", "头条", "快讯", "news", "headlines", "feed", "briefing"),
    "open_issue": ("退款", "扣款", "工单", "投诉", "进度", "处理得怎么样", "refund", "charged", "charge",
                   "ticket", "complaint", "status of"),
    "task_types": ("能帮我做什么", "帮我做些什么", "你能做什么", "你会什么", "what can you do",
                   "what can you help"),
    "current_task": ("刚才那个", "这个任务", "手头", "this task", "the current task"),
}

# Aliases too generic to trigger a field on their own (they still add to a field's score).
WEAK_TERMS: frozenset[str] = frozenset({
    "问题", "工作", "当前", "正在", "这次", "任务", "格式", "联系", "我是", "爱", "别", "不要", "喜欢", "讨厌",
    "写作", "查询", "规划", "手机", "phone", "mobile",
    "like", "love", "prefer", "hate", "format", "report", "mail", "channel", "topics", "tasks", "plan", "current",
    "right now", "issue", "problem", "role", "work as", "contact", "length", "name", "call me", "this session",
    "writing", "research", "planning", "billing", "subscription", "job", "list", "pick", "style",
    "taste", "color", "colour", "feed", "charge", "answer", "explain", "brief", "local", "ship", "sign it",
    "回复", "回答", "说明", "解释", "挑", "建议", "方案", "导出", "文档", "风格", "颜色", "进度", "附近", "本地",
    "出门", "找我", "回复我", "let me know", "raise", "医生", "doctor",
})
# Single Chinese characters count only when they are not part of one of these words.
_CJK_COMPOUNDS: Mapping[str, tuple[str, ...]] = {
    "爱": ("可爱", "恋爱", "爱人", "热爱生活", "爱好者"),
    "别": ("特别", "区别", "别人", "分别", "别的", "级别", "类别", "识别", "告别", "个别", "差别", "性别", "辨别",
           "别处"),
    "药": ("药方",),
    "又": (),
    "挑": ("挑战", "挑衅", "挑剔"),
}
_TRIGGER = 1.0
_WEAK = 0.5


@dataclass
class _FieldIndex:
    contract: FieldContract
    cjk: list[tuple[str, float]] = field(default_factory=list)
    cjk_first: frozenset[str] = frozenset()  # the first characters of the cjk terms (a term matches only if its own does)
    latin: re.Pattern[str] | None = None
    latin_weak: re.Pattern[str] | None = None


def _latin_pattern(terms: Iterable[str]) -> re.Pattern[str] | None:
    terms = sorted({t for t in terms if t}, key=len, reverse=True)
    if not terms:
        return None
    alt = "|".join(re.escape(t) for t in terms)
    return re.compile(r"(?<![a-z0-9])(?:" + alt + r")(?:s|es|ed|d|ing)?(?![a-z0-9])")


def _phrase_pattern(terms: Iterable[str]) -> tuple[list[str], re.Pattern[str] | None]:
    terms = list(terms)
    return [t for t in terms if has_cjk(t)], _latin_pattern(t for t in terms if not has_cjk(t))


class DeterministicPlanner:
    """Cue lexicon + field names/aliases, plus the learned field model (`learned.FieldModel` "plan", trained on
    the bank's plan queries; its threshold was chosen on the dev split for rules + model together).
    Indexes are built once per contract set. `model=None` plans with the rules alone."""

    def __init__(self, contracts: ContractSet, model: Any = "default", vectors: Any = "default") -> None:
        from usermem.understand.learned import load_model
        from usermem.understand.planvec import load_vector_model

        self.contracts = contracts
        self.model = load_model("plan") if model == "default" else model
        self.model_threshold = float(self.model.meta.get("combined_threshold", self.model.threshold)) \
            if self.model is not None else 1.0
        self.vectors: VectorFieldModel | None = load_vector_model() if vectors == "default" else vectors
        self._enabled_keys = {c.key: c for c in contracts.enabled()}
        self._fields: list[_FieldIndex] = []
        for c in contracts.enabled():
            terms = {normalise(a) for a in c.aliases} | {c.key.replace("_", " "), c.key}
            terms |= {normalise(t) for t in FIELD_CUES.get(c.key, ())}
            idx = _FieldIndex(c)
            latin_strong: list[str] = []
            latin_weak: list[str] = []
            for t in terms:
                weight = _WEAK if t in WEAK_TERMS else _TRIGGER
                if has_cjk(t):
                    idx.cjk.append((t, weight))
                else:
                    (latin_weak if weight < _TRIGGER else latin_strong).append(t)
            idx.cjk_first = frozenset(t[0] for t, _ in idx.cjk)
            idx.latin = _latin_pattern(latin_strong)
            idx.latin_weak = _latin_pattern(latin_weak)
            self._fields.append(idx)
        self._context_cjk, self._context_latin = _phrase_pattern(CONTEXT_CUES)
        self._high_cjk, self._high_latin = _phrase_pattern(HIGH_CUES)
        self._always_cjk, self._always_latin = _phrase_pattern(ALWAYS_CUES)

    @property
    def vector_model(self) -> str | None:
        """The embedder whose query vectors the vector head reads (`Embedder.model_id`), or None."""
        return self.vectors.model_id if self.vectors is not None else None

    def model_fields(self, message: str, vector: Any = None, vector_model: str | None = None) -> dict[str, float]:
        """Fields the learned models name for the message, with their calibrated probability.

        With a query vector the vector head reads (same embedder, same dimension), the head's probability is
        mixed with the lexical model's and cut at the head's threshold (both chosen on dev for rules + models
        together); without one, the lexical model alone at its own combined threshold."""
        head = self.vectors
        if head is not None and head.accepts(vector, vector_model):
            return self.mixed(message, head.fields, head.probabilities(vector), head.mix, head.threshold)
        if self.model is not None:
            return self.model.detect(message, self.model_threshold)
        return {}

    def mixed(self, message: str, fields: Sequence[str], p_vector: Iterable[float], mix: float,
              threshold: float) -> dict[str, float]:
        """mix · p_vector + (1 − mix) · p_lexical per field, kept where it reaches `threshold`."""
        p_lex = self.model.probabilities(message) if self.model is not None and mix < 1.0 else {}
        out: dict[str, float] = {}
        for f, pv in zip(fields, p_vector, strict=True):
            p = mix * float(pv) + (1.0 - mix) * p_lex.get(f, 0.0)
            if p >= threshold:
                out[f] = p
        return out

    def plan(self, message: str, vector: Any = None, vector_model: str | None = None) -> RecallPlan:
        """The plan for `message`. `vector`: the message's query vector, when the caller has one (recall
        computes it for semantic search; `vector_model` names its embedder); the plan is deterministic
        either way, and without a vector it is what the rules and the lexical model say."""
        cues = self._cues(message)
        return self._finish(cues, self.model_fields(message, vector, vector_model))

    def plan_pair(self, message: str, vector: Any, vector_model: str | None) -> tuple[RecallPlan, RecallPlan]:
        """(the plan without the vector, the plan with it) — equal to `plan(message)` and
        `plan(message, vector, vector_model)`, with the cues and the lexical model's scores computed once
        (recall uses both: docs/relevance.md "Planner fields")."""
        cues = self._cues(message)
        head = self.vectors
        if head is None or not head.accepts(vector, vector_model):
            alone = self._finish(cues, self.model_fields(message))
            return alone, alone
        p_lex = self.model.probabilities(message) if self.model is not None else {}
        lexical = {f: p for f, p in p_lex.items() if p >= self.model_threshold}  # = model_fields(message)
        with_vector: dict[str, float] = {}
        for f, pv in zip(head.fields, head.probabilities(vector), strict=True):
            p = head.mix * float(pv) + (1.0 - head.mix) * (p_lex.get(f, 0.0) if head.mix < 1.0 else 0.0)
            if p >= head.threshold:
                with_vector[f] = p
        return self._finish(cues, lexical), self._finish(cues, with_vector)

    def _cues(self, message: str) -> tuple[str, tuple[str, ...], tuple[str, ...], bool, bool]:
        """(normalised text, fact fields, preference fields, context, high) from the rules' cues."""
        text = normalise(message)
        facts: list[str] = []
        prefs: list[str] = []
        context = _hit(text, self._context_cjk, self._context_latin) or bool(_BACK_REFERENCE.search(text))
        high = context or _hit(text, self._high_cjk, self._high_latin)
        chars = set(text)
        for idx in self._fields:
            score = 0.0
            # a term is in the text only if its first character is: most fields (every one, for an English
            # message) skip their term loop (the planner runs on every recall with a query; issue 19)
            for term, weight in (idx.cjk if not idx.cjk_first.isdisjoint(chars) else ()):
                if term in text and (len(term) > 1 or _single_char_ok(text, term)):
                    score += weight
                    if score >= _TRIGGER:
                        break
            if score < _TRIGGER and idx.latin is not None and idx.latin.search(text):
                score += _TRIGGER
            if score < _TRIGGER and idx.latin_weak is not None:
                score += _WEAK * len(idx.latin_weak.findall(text))
            if score < _TRIGGER:
                continue
            c = idx.contract
            if c.kind is Kind.CONTEXT:
                context = True
            elif c.kind is Kind.PREFERENCE:
                prefs.append(c.key)
            else:
                facts.append(c.key)
            if c.standing and c.kind is Kind.FACT and c.sensitivity.value == "L3":
                high = True  # allergies and the like are safety facts
        return text, tuple(facts), tuple(prefs), context, high

    def _finish(self, cues: tuple[str, tuple[str, ...], tuple[str, ...], bool, bool],
                learned: Mapping[str, float]) -> RecallPlan:
        text, cue_facts, cue_prefs, context, high = cues
        facts, prefs = list(cue_facts), list(cue_prefs)
        if learned:  # the learned models add the fields the cues miss
            for key, _p in sorted(learned.items(), key=lambda kv: (-kv[1], kv[0])):
                found = self._enabled_keys.get(key)
                if found is None or key in facts or key in prefs or found.kind is Kind.CONTEXT:
                    continue
                (prefs if found.kind is Kind.PREFERENCE else facts).append(key)
                if found.standing and found.kind is Kind.FACT and found.sensitivity.value == "L3":
                    high = True
        if not facts and not prefs and _hit(text, self._always_cjk, self._always_latin):
            facts = [c.key for c in self.contracts.enabled() if c.standing and c.kind is Kind.FACT]
        priority = "high" if high else ("medium" if facts or prefs or context else "low")
        return RecallPlan(tuple(facts), tuple(prefs), context, priority, "deterministic")


def _hit(text: str, cjk: Sequence[str], latin: re.Pattern[str] | None) -> bool:
    return any(t in text and (len(t) > 1 or _single_char_ok(text, t)) for t in cjk) or bool(
        latin is not None and latin.search(text))


def _single_char_ok(text: str, ch: str) -> bool:
    compounds = _CJK_COMPOUNDS.get(ch, ())
    if not compounds:
        return True
    masked = text
    for word in compounds:
        masked = masked.replace(word, "")
    return ch in masked


# --- the LLM recogniser -------------------------------------------------------------------------------

class _PlanReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    fact_recall: list[str]
    preference_recall: list[str]
    context_recall: bool
    memory_priority: Priority


_SYSTEM = """You are a memory curator for an AI assistant (你是一个记忆策展人).
Read ONLY the user's latest message and decide which stored user memories the assistant must load to answer it.
Answer with JSON only: {"fact_recall": [...], "preference_recall": [...], "context_recall": true|false, "memory_priority": "high"|"medium"|"low"}.
Rules:
- Use only field names from the lists below. Never invent a field, never suggest collecting new information.
- fact_recall: fact fields the answer depends on. preference_recall: preference fields that shape the answer.
- context_recall: true when the message refers to earlier conversation (上次/之前/刚才, last time, earlier, continue).
- memory_priority: high when the message refers back or depends on standing facts (allergies, 一直/总是/always),
  medium when some fields are needed, low when none are.
- Empty lists are fine. The message may be Chinese or English."""


def _describe(contracts: Sequence[FieldContract]) -> str:
    lines = []
    for c in contracts:
        aliases = ", ".join(c.aliases[:8])
        lines.append(f"- {c.key}: {c.description}" + (f" (also: {aliases})" if aliases else ""))
    return "\n".join(lines) or "- (none)"


def _string_array(keys: Sequence[str]) -> dict[str, Any]:
    items: dict[str, Any] = {"type": "string", "enum": list(keys)} if keys else {"type": "string"}
    return {"type": "array", "items": items}


class Planner:
    """Deterministic by default; with an LLM client, asks the model first and falls back on any failure."""

    def __init__(self, contracts: ContractSet, llm: LLMClient | None = None, timeout: float = 2.0) -> None:
        self.contracts = contracts
        self.llm = llm
        self.timeout = timeout
        self.deterministic = DeterministicPlanner(contracts)
        enabled = contracts.enabled()
        self._facts = [c for c in enabled if c.kind in _FACT_KINDS]
        self._prefs = [c for c in enabled if c.kind is Kind.PREFERENCE]
        self._kind_of = {c.key: c.kind for c in enabled}
        self._schema = {
            "type": "object",
            "properties": {
                "fact_recall": _string_array([c.key for c in self._facts]),
                "preference_recall": _string_array([c.key for c in self._prefs]),
                "context_recall": {"type": "boolean"},
                "memory_priority": {"type": "string", "enum": list(PRIORITIES)},
            },
            "required": ["fact_recall", "preference_recall", "context_recall", "memory_priority"],
            "additionalProperties": False,
        }
        self._system = (_SYSTEM + "\n\nFact fields:\n" + _describe(self._facts) + "\n\nPreference fields:\n"
                        + _describe(self._prefs))

    def plan(self, message: str, *, use_llm: bool = True, vector: Any = None,
             vector_model: str | None = None) -> RecallPlan:
        if use_llm and self.llm is not None:
            reply = self.llm.structured("recall_plan", self._system, message, _PlanReply, self._schema,
                                        timeout=self.timeout)
            if reply is not None:
                return self._whitelisted(reply)
        return self.deterministic.plan(message, vector, vector_model)

    def _whitelisted(self, reply: _PlanReply) -> RecallPlan:
        """Keep only enabled fields, each in the bucket its contract's kind says; drop duplicates."""
        facts: list[str] = []
        prefs: list[str] = []
        context = reply.context_recall
        for key in [*reply.fact_recall, *reply.preference_recall]:
            kind = self._kind_of.get(key)
            if kind is None or key in facts or key in prefs:
                continue
            if kind is Kind.PREFERENCE:
                prefs.append(key)
            elif kind is Kind.CONTEXT:
                context = True
            else:
                facts.append(key)
        return RecallPlan(tuple(facts), tuple(prefs), context, reply.memory_priority, "llm")
