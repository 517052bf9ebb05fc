"""Onboarding seeding (seed 004 §4.2): a few short questions for a new user, answers stored with source `onboarding`.

Questions are configurable per tenant (stored in the documents table); the defaults ask for the
role, the task types and the preferred reply length, in Chinese and English. An answer must name an
option in either language; the user's words are stored as the value and the option's canonical value beside
them ("简洁", canonical "concise") — no drift from the user's language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from usermem.errors import InvalidArgument, ValidationError
from usermem.understand.text import normalise

NAMESPACE = "onboarding"
CONFIG_KEY = "questions"
LANGUAGES = ("zh", "en")


@dataclass(frozen=True, slots=True)
class OnboardingQuestion:
    id: str
    key: str  # the field the answer is stored under
    kind: str
    text: Mapping[str, str]  # language -> question
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # canonical -> language -> label
    multiple: bool = False

    def render(self, language: str) -> dict[str, Any]:
        lang = language if language in self.text else next(iter(self.text))
        return {"id": self.id, "key": self.key, "kind": self.kind, "question": self.text[lang],
                "options": [{"value": v, "label": labels.get(lang, v)} for v, labels in self.options.items()],
                "multiple": self.multiple, "language": lang}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "key": self.key, "kind": self.kind, "text": dict(self.text),
                "options": {k: dict(v) for k, v in self.options.items()}, "multiple": self.multiple}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OnboardingQuestion:
        if not isinstance(d, Mapping):
            raise InvalidArgument(f"an onboarding question must be a dict, got {type(d).__name__}")
        missing = {"id", "key", "kind", "text"} - set(d)
        if missing:
            raise ValidationError(f"onboarding question lacks {sorted(missing)}", field=sorted(missing)[0])
        text = d["text"]
        if isinstance(text, str):
            text = {"en": text}
        if not isinstance(text, Mapping) or not text or not all(isinstance(v, str) and v for v in text.values()):
            raise ValidationError("question text must be a non-empty {language: text} mapping", field="text")
        options = d.get("options") or {}
        if isinstance(options, Sequence) and not isinstance(options, str):
            options = {str(o): {} for o in options}
        if not isinstance(options, Mapping):
            raise ValidationError("question options must be a list or a {value: labels} mapping", field="options")
        return cls(str(d["id"]), str(d["key"]), str(d["kind"]), dict(text),
                   {str(k): dict(v or {}) for k, v in options.items()}, bool(d.get("multiple", False)))


DEFAULT_QUESTIONS: tuple[OnboardingQuestion, ...] = (
    OnboardingQuestion("role", "occupation", "fact",
                       {"zh": "您目前的职位是？（例：软件工程师）", "en": "What is your current role? (e.g. software engineer)"}),
    OnboardingQuestion("task_types", "task_types", "preference",
                       {"zh": "希望 AI 帮您处理哪类事务？（可多选）", "en": "What should the assistant help you with? (any)"},
                       {"writing": {"zh": "写作", "en": "writing"}, "research": {"zh": "查询", "en": "research"},
                        "planning": {"zh": "规划", "en": "planning"}, "other": {"zh": "其他", "en": "other"}},
                       multiple=True),
    OnboardingQuestion("reply_length", "reply_length", "preference",
                       {"zh": "对回复长度的偏好？", "en": "How long should replies be?"},
                       {"concise": {"zh": "简洁", "en": "concise"}, "balanced": {"zh": "适中", "en": "balanced"},
                        "detailed": {"zh": "详细", "en": "detailed"}}),
)


def answer_words(question: OnboardingQuestion, answer: Any) -> Any:
    """The answer as the user gave it ("简洁", ["写作", "规划"]): stored as the value, the option value beside it
    (call `option_value` first: it validates)."""
    if not question.options:
        return answer.strip() if isinstance(answer, str) else answer
    items = answer if isinstance(answer, list | tuple) else [answer]
    if question.multiple and isinstance(answer, str):
        items = [p for p in (x.strip() for x in answer.replace("，", ",").replace("、", ",").split(",")) if p]
    words: list[str] = []
    for item in items:
        w = str(item).strip()
        if w not in words:
            words.append(w)
    return words if question.multiple else words[0]


def option_value(question: OnboardingQuestion, answer: Any) -> Any:
    """Canonical option value(s) for an answer given as a value or a label in any language."""
    if not question.options:
        if not isinstance(answer, str) or not answer.strip():
            raise ValidationError(f"answer to {question.id!r} must be non-empty text", field=question.id)
        return answer.strip()
    items = answer if isinstance(answer, list | tuple) else [answer]
    if not question.multiple and len(items) != 1:
        raise ValidationError(f"question {question.id!r} takes one answer", field=question.id)
    if question.multiple and isinstance(answer, str):
        items = [p for p in (x.strip() for x in answer.replace("，", ",").replace("、", ",").split(",")) if p]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(f"answer to {question.id!r} must be text, got {type(item).__name__}")
        norm = normalise(item)
        match = next((v for v, labels in question.options.items()
                      if norm == normalise(v) or norm in (normalise(lbl) for lbl in labels.values())), None)
        if match is None:
            known = ", ".join(question.options)
            raise ValidationError(f"{item!r} is not an option of {question.id!r} (options: {known})",
                                  field=question.id)
        if match not in out:
            out.append(match)
    return out if question.multiple else out[0]
