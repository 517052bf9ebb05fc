"""Questions people read: confirmation, consent and verification, in Chinese and English.

Every question names a field by its contract's label in the asker's language (`FieldContract.label`),
never by its key: "您的居住城市还是「上海」吗？", "May I use your allergy information to recommend lunch?".
A key without a contract is not named at all ("您之前告诉我们「科技资讯」，现在还是这样吗？"). Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from usermem.policy.contracts import FieldContract, readable_key

LANGUAGES: tuple[str, ...] = ("zh", "en")

# Values the engine itself proposes (reflexive verification) shown in words rather than as codes.
VALUE_LABELS: Mapping[str, tuple[str, str]] = {
    "concise": ("简洁", "concise"),
    "detailed": ("详细", "detailed"),
    "prose": ("成段的文字（不用列表和表格）", "prose (no lists or tables)"),
}
_MAX_SHOWN = 80
# Leading words an agent may put in front of a purpose: "to recommend lunch", "用来推荐午餐".
_PURPOSE_LEAD = {"zh": re.compile(r"^(?:来|用来|用于|以便|为了)\s*"), "en": re.compile(r"^(?:to|for|in order to)\s+",
                                                                                  re.IGNORECASE)}


def detect_language(text: str) -> str:
    """'zh' when the text has CJK characters, else 'en'."""
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"


def language_or(language: str | None, default: str = "zh") -> str:
    return language if language in LANGUAGES else default


def shown_value(value: Any, language: str) -> str:
    """A stored value as a person reads it: known codes in words, lists joined, long text cut."""
    if isinstance(value, str) and value in VALUE_LABELS:
        zh, en = VALUE_LABELS[value]
        return zh if language == "zh" else en
    if isinstance(value, list | tuple):
        sep = "、" if language == "zh" else ", "
        text = sep.join(shown_value(v, language) for v in value)
    elif isinstance(value, dict):
        sep = "，" if language == "zh" else "; "
        text = sep.join(f"{k}: {shown_value(v, language)}" for k, v in value.items())
    elif value is None:
        text = ""
    elif isinstance(value, bool):
        text = ("是" if value else "否") if language == "zh" else ("yes" if value else "no")
    else:
        text = str(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def label_of(contract: FieldContract | None, key: str, language: str) -> str:
    return contract.label(language) if contract is not None else readable_key(key)


def confirmation_question(key: str, value: Any, contract: FieldContract | None, language: str) -> str:
    """Is a fading memory still right? The contract's own question when it has one in `language`."""
    lang = language_or(language, "en")
    if contract is not None and contract.questions.get(lang):
        return contract.questions[lang]
    shown = shown_value(value, lang)
    if contract is None:
        if lang == "zh":
            return f"您之前告诉我们「{shown}」，现在还是这样吗？"
        return f"You told us “{shown}” earlier. Is that still right?"
    label = contract.label(lang)
    if lang == "zh":
        return f"您的{label}还是「{shown}」吗？"
    return f"Is “{shown}” still right for your {label}?"


def clean_purpose(purpose: str | None, language: str) -> str | None:
    """The purpose as it fits the question in `language`, or None (absent, or written in another language)."""
    if not purpose or not purpose.strip():
        return None
    text = purpose.strip().rstrip("。.?？!！")
    if detect_language(text) != language:
        return None
    text = _PURPOSE_LEAD[language].sub("", text).strip()
    return text or None


def consent_question(contract: FieldContract | None, key: str, language: str, purpose: str | None = None) -> str:
    """"可以使用您的过敏信息来推荐午餐吗？" / "May I use your allergy information to recommend lunch?"."""
    lang = language_or(language, "en")
    label = label_of(contract, key, lang)
    why = clean_purpose(purpose, lang)
    if lang == "zh":
        return f"可以使用您的{label}来{why}吗？" if why else f"可以使用您的{label}吗？"
    return f"May I use your {label} to {why}?" if why else f"May I use your {label}?"


def consent_questions(contracts: list[tuple[str, FieldContract | None]], purpose: str | None) -> dict[str, str]:
    """One question per language for a request covering several fields ("您的过敏信息和饮食习惯")."""
    out: dict[str, str] = {}
    for lang in LANGUAGES:
        labels = [label_of(c, k, lang) for k, c in contracts]
        if lang == "zh":
            joined = "和".join(labels) if len(labels) <= 2 else "、".join(labels[:-1]) + "和" + labels[-1]
            why = clean_purpose(purpose, lang)
            out[lang] = f"可以使用您的{joined}来{why}吗？" if why else f"可以使用您的{joined}吗？"
        else:
            joined = " and ".join(labels) if len(labels) <= 2 else ", ".join(labels[:-1]) + " and " + labels[-1]
            why = clean_purpose(purpose, lang)
            out[lang] = f"May I use your {joined} to {why}?" if why else f"May I use your {joined}?"
    return out


def verification_questions(key: str, value: Any, contract: FieldContract | None) -> dict[str, str]:
    """Reflexive verification (understand/verification.py): a hypothesis from repeated pushback."""
    zh_label, en_label = label_of(contract, key, "zh"), label_of(contract, key, "en")
    if value is None:
        return {"zh": f"根据您最近的反馈，目前的{zh_label}设置似乎不太适合您，需要调整吗？",
                "en": f"From your recent feedback, the current {en_label} setting does not seem to suit you. "
                      "Shall I adjust it?"}
    return {"zh": f"根据您最近的反馈，系统推测您更希望{zh_label}是「{shown_value(value, 'zh')}」，是否准确？",
            "en": f"From your recent feedback, it seems you would like your {en_label} to be "
                  f"{shown_value(value, 'en')}. Is that right?"}


def changed_elsewhere(key: str, value: Any, contract: FieldContract | None, retracted: bool = False) -> dict[str, str]:
    """The notice after a remote change replaced a value this device set moments ago (issue 17):
    "您的居住城市已在另一台设备上改为「北京」" / "Your home city was changed on another device to “Beijing”"."""
    zh_label, en_label = label_of(contract, key, "zh"), label_of(contract, key, "en")
    if retracted or value is None:
        return {"zh": f"您的{zh_label}已在另一台设备上被撤销。要保留这台设备上的设置吗？",
                "en": f"Your {en_label} was withdrawn on another device. Keep this device's value?"}
    return {"zh": f"您的{zh_label}已在另一台设备上改为「{shown_value(value, 'zh')}」。要保留这台设备上的设置吗？",
            "en": f"Your {en_label} was changed on another device to “{shown_value(value, 'en')}”. "
                  "Keep this device's value?"}
