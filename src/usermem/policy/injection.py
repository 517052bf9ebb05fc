"""Memory-poisoning guard: values that read like instructions to a model, or that try to close the
prompt tags memories are injected into, are refused on write (reason `instruction_like`).

Deterministic patterns in Chinese and English. The assembler escapes every value as well, so a value
that slips past these patterns still cannot close a tag; this guard keeps such values out of storage.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE))
    for name, rx in (
        ("prompt_tag", r"</?\s*(?:user_facts|user_preferences|user_context|system|assistant|user|instructions?|"
                       r"im_start|im_end|tool|function_call)\b[^>]{0,40}>"),
        ("chat_token", r"<\|[a-z_]{2,20}\|>|\[/?inst\]|<<\s*/?sys\s*>>"),
        ("role_prefix", r"(?:^|\n)\s*(?:system|assistant|developer)\s*[:：]\s*(?:you\b|ignore|forget|from now|"
                        r"new |sure|忽略|你|从现在)"),
        ("override_en", r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
                        r"(?:previous|prior|above|earlier|preceding|system|original)\s+"
                        r"(?:instructions?|prompts?|rules|messages|guidelines|directions)"),
        ("persona_en", r"\byou\s+are\s+now\s+(?:a|an|the|dan|no longer)\b|\bfrom now on,?\s+you\s+(?:will|must|are)\s+"
                       r"(?:ignore|obey|act|pretend|reveal)"),
        ("exfiltrate_en", r"\b(?:reveal|print|output|repeat|show)\s+(?:me\s+)?(?:your|the)\s+(?:system\s+prompt|"
                          r"instructions|hidden\s+prompt)"),
        ("new_instructions", r"\bnew\s+(?:system\s+)?instructions?\s*[:：]|###\s*(?:instruction|system)"),
        ("override_zh", r"(?:忽略|无视|忘记|忘掉|覆盖|绕过)(?:掉)?(?:你)?(?:之前|以上|前面|上面|所有|全部|原来|系统)的?"
                        r"(?:所有)?的?(?:指令|指示|提示词?|规则|要求|设定|约束)"),
        ("persona_zh", r"你现在(?:是|扮演|变成)|从现在起你(?:必须|要|将)(?:忽略|无视|服从|扮演)|扮演一个(?:不受|没有)限制"),
        ("exfiltrate_zh", r"(?:输出|打印|泄露|告诉我|显示)(?:你的|出)?(?:系统提示词?|系统指令|隐藏指令)"),
        ("new_instructions_zh", r"(?:新的|最高)(?:系统)?指令[:：]|系统提示[:：]"),
    )
)


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def instruction_like(value: Any) -> str | None:
    """The name of the first pattern a string inside `value` matches, or None when it reads as plain data."""
    for text in _strings(value):
        folded = unicodedata.normalize("NFKC", text)
        for name, pattern in _PATTERNS:
            if pattern.search(folded):
                return name
    return None
