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
WORD_EDGE = (r"(?:\b|(?<=[" + CJK_CHARS + r"])(?=" + _NON_CJK_WORD + r")|(?=[" + CJK_CHARS + r"])(?<="
             + _NON_CJK_WORD + r"))")
# The same edge where the pattern itself puts an ASCII letter or digit on one side of it (`\bboss`, `boss\b`,
# `\b(?:if|when)`): one lookaround, as cheap as `\b`.
WORD_START = r"(?<!" + _NON_CJK_WORD + r")"
WORD_END = r"(?!" + _NON_CJK_WORD + r")"
_EDGES = (WORD_EDGE, WORD_START, WORD_END)
_GROUP_HEAD = re.compile(r"\((?:\?(?:[aiLmsux]*(?:-[imsx]+)?:|P<\w+>))?")


def _brackets(pattern: str) -> dict[int, int]:
    """Matching parentheses of a pattern, both ways (escapes and character classes skipped)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i += 1
            i += pattern[i] == "^" if i < n else 0
            i += pattern[i] == "]" if i < n else 0
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            stack.append(i)
        elif ch == ")" and stack:
            o = stack.pop()
            pairs[o], pairs[i] = i, o
        i += 1
    return pairs


def _alternatives(pattern: str, pairs: dict[int, int], open_at: int) -> list[tuple[int, int]] | None:
    """The top-level alternatives (start, end) of the plain or non-capturing group opening at `open_at`;
    None for a lookaround or a conditional group."""
    head = _GROUP_HEAD.match(pattern, open_at)
    if head is None or (head.end() == open_at + 1 and pattern[open_at + 1:open_at + 2] == "?"):
        return None
    close = pairs[open_at]
    out, start, i = [], head.end(), head.end()
    while i < close:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "(" or ch == "[":
            i = pairs.get(i, i) + 1 if ch == "(" else _class_end(pattern, i) + 1
            continue
        if ch == "|":
            out.append((start, i))
            start = i + 1
        i += 1
    out.append((start, close))
    return out


def _class_end(pattern: str, i: int) -> int:
    i += 1
    i += pattern[i] == "^"
    i += pattern[i] == "]"
    while pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _starts_ascii_word(pattern: str, pairs: dict[int, int], i: int, end: int) -> bool:
    """Whether pattern[i:end] can only start matching at an ASCII letter or digit."""
    if i >= end:
        return False
    ch = pattern[i]
    if ch == "(" and (i not in pairs or pairs[i] >= end):
        return False
    last = pairs[i] if ch == "(" else i
    if ch.isascii() and ch.isalnum():
        atom = True
    elif ch == "(":
        alts = _alternatives(pattern, pairs, i)
        atom = alts is not None and all(_starts_ascii_word(pattern, pairs, a, b) for a, b in alts)
    else:
        return False
    quant = pattern[last + 1:last + 2]
    if quant in ("?", "*"):  # optional: what follows it may come first
        after = last + 2 + (pattern[last + 2:last + 3] in ("?", "+"))
        return atom and _starts_ascii_word(pattern, pairs, after, end)
    return atom and pattern[last + 1:last + 3] != "{0"


def _ends_ascii_word(pattern: str, pairs: dict[int, int], start: int, i: int) -> bool:
    """Whether pattern[start:i] can only end its match with an ASCII letter or digit."""
    if i <= start:
        return False
    ch = pattern[i - 1]
    if ch.isascii() and ch.isalnum():
        return i - 2 < start or pattern[i - 2] != "\\"
    if ch == "?" and i - 2 >= start:  # an optional last atom ("friends?", "(?:ly)?"): it or what precedes it ends
        prev = pattern[i - 2]
        if prev.isascii() and prev.isalnum() and (i - 3 < start or pattern[i - 3] != "\\"):
            atom_start = i - 2
        elif prev == ")" and i - 2 in pairs and pairs[i - 2] >= start and (i - 3 < start or pattern[i - 3] != "\\"):
            atom_start = pairs[i - 2]
        else:
            return False
        return _ends_ascii_word(pattern, pairs, atom_start, i - 1) and _ends_ascii_word(pattern, pairs, start, atom_start)
    if ch != ")" or i - 1 not in pairs or pairs[i - 1] < start or (i - 2 >= 0 and pattern[i - 2] == "\\"):
        return False
    alts = _alternatives(pattern, pairs, pairs[i - 1])
    return alts is not None and all(_ends_ascii_word(pattern, pairs, a, b) for a, b in alts)


@lru_cache(maxsize=2048)
def cjk_edges(pattern: str) -> str:
    r"""`pattern` with every `\b` (outside a character class, not an escaped backslash) turned into WORD_EDGE, so
    an English cue word glued to Chinese still matches ("我的boss说" holds "boss" for `\bboss\b`) — WORD_START or
    WORD_END where the pattern puts an ASCII letter or digit right after or before it. Idempotent: an edge
    already in the pattern (a compiled pattern's `.pattern` spliced into another) is kept as it is."""
    pairs = _brackets(pattern)
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        edge = next((e for e in _EDGES if not in_class and pattern.startswith(e, i)), None)
        if edge is not None:
            out.append(edge)
            i += len(edge)
            continue
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            pair = pattern[i:i + 2]
            if pair == r"\b" and not in_class:
                pair = WORD_START if _starts_ascii_word(pattern, pairs, i + 2, n) else \
                    WORD_END if _ends_ascii_word(pattern, pairs, 0, i) else WORD_EDGE
            out.append(pair)
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
