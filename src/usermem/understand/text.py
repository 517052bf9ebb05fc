"""Text helpers shared by the planner, the extractor and the assembler: normalisation, language,
sentence splitting, conversation messages and a token estimate. Pure functions, no I/O."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from usermem.errors import InvalidArgument, ValidationError
from usermem.policy.validate import DEFAULT_LIMITS, SURROGATE

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])|(?<=[.])\s+")

# Chinese (and Japanese, Korean) characters are word characters (\w) to Python's regexes, so `\b` finds no edge
# between "的" and "boss" in code-switched text ("我的boss说", "加班了lol", "下周去Tokyo出差"). WORD_EDGE is `\b`
# or the seam between such a character and a Latin letter or digit; every other seam keeps its meaning: still no
# edge inside an English word ("gift" holds no "if"), none between two Chinese characters, one at a space.
CJK_CHARS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_NON_CJK_WORD = r"[^\W" + CJK_CHARS + r"]"
WORD_EDGE = (r"(?:\b|(?<=[" + CJK_CHARS + r"])(?=" + _NON_CJK_WORD + r")|(?<=" + _NON_CJK_WORD + r")(?=["
             + CJK_CHARS + r"]))")


@lru_cache(maxsize=2048)
def cjk_edges(pattern: str) -> str:
    r"""`pattern` with every `\b` (outside a character class, not an escaped backslash) turned into WORD_EDGE, so
    an English cue word glued to Chinese still matches ("我的boss说" holds "boss" for `\bboss\b`). Idempotent: a
    WORD_EDGE already in the pattern (a compiled pattern's `.pattern` spliced into another) is kept as it is."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        if not in_class and pattern.startswith(WORD_EDGE, i):
            out.append(WORD_EDGE)
            i += len(WORD_EDGE)
            continue
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            pair = pattern[i:i + 2]
            out.append(WORD_EDGE if pair == r"\b" and not in_class else pair)
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            # a "]" right after "[" or "[^" is a literal member, not the end of the class
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def cjk_compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """`re.compile(cjk_edges(pattern), flags)`."""
    return re.compile(cjk_edges(pattern), flags)


def normalise(text: str) -> str:
    """NFKC (full-width letters and digits become ASCII), lower-case, collapsed whitespace."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def detect_language(text: str) -> str:
    """'zh' when the text has Chinese characters, else 'en'."""
    return "zh" if has_cjk(text) else "en"


def sentences(text: str) -> list[str]:
    """Split on sentence punctuation (Chinese and Western); empty pieces dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


_TOKEN_PIECE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[A-Za-z]+|\d{1,3}|[^\sA-Za-z\d]")


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate close to BPE tokenizers (cl100k/o200k) on mixed Chinese/English text.

    One token per Chinese character, per run of up to three digits and per punctuation mark; one
    per four letters of a word (at least one per word). No tokenizer download is needed, and the
    same estimate is applied to both sides of every comparison.
    """
    total = 0
    for piece in _TOKEN_PIECE.findall(text):
        if piece[0].isalpha() and piece.isascii():
            total += max(1, (len(piece) + 3) // 4)
        else:
            total += 1
    return total


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str
    index: int


_ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})
MESSAGE_ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool", "developer")  # public, same set


def coerce_messages(messages: Any) -> list[Message]:
    """OpenAI-style {role, content} dicts or plain strings (taken as user turns) -> Message list.

    Raises InvalidArgument for a wrong shape and ValidationError for limits, naming the message.
    """
    if isinstance(messages, str | Mapping):
        messages = [messages]
    if not isinstance(messages, Sequence):
        raise InvalidArgument(f"messages must be a list of dicts or strings, got {type(messages).__name__}")
    limits = DEFAULT_LIMITS
    if len(messages) > limits.max_messages:
        raise ValidationError(f"{len(messages)} messages exceed the limit of {limits.max_messages}",
                              field="messages")
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            role, content = m.role, m.content
        elif isinstance(m, str):
            role, content = "user", m
        elif isinstance(m, Mapping):
            role = m.get("role", "user")
            content = m.get("content", "")
            if isinstance(content, list):  # OpenAI content parts: keep the text parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            if not isinstance(role, str) or role not in _ROLES:
                raise ValidationError(f"message {i}: unknown role {role!r}", field="role")
            if not isinstance(content, str):
                raise InvalidArgument(f"message {i}: content must be a string, got {type(content).__name__}")
        else:
            raise InvalidArgument(f"message {i} must be a dict or a string, got {type(m).__name__}")
        if len(content) > limits.max_message_chars:
            raise ValidationError(f"message {i} has {len(content)} characters, over the limit of "
                                  f"{limits.max_message_chars}", field="content")
        if SURROGATE.search(content):
            raise ValidationError(f"message {i} contains a lone surrogate (\\ud800-\\udfff), which is not valid "
                                  f"Unicode text", field="content")
        out.append(Message(role, content, i))
    return out


def check_text(name: str, text: Any, max_chars: int = DEFAULT_LIMITS.max_message_chars) -> str:
    if not isinstance(text, str):
        raise InvalidArgument(f"{name} must be a str, got {type(text).__name__}")
    if len(text) > max_chars:
        raise ValidationError(f"{name} has {len(text)} characters, over the limit of {max_chars}", field=name)
    if SURROGATE.search(text):
        raise ValidationError(f"{name} contains a lone surrogate (\\ud800-\\udfff), which is not valid Unicode "
                              f"text", field=name)
    return text
