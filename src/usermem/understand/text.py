"""Text helpers shared by the planner, the extractor and the assembler: normalisation, language,
sentence splitting, conversation messages and a token estimate. Pure functions, no I/O."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from usermem.errors import InvalidArgument, ValidationError
from usermem.policy.validate import DEFAULT_LIMITS, SURROGATE
from usermem.policy.wordedge import CJK_CHARS as CJK_CHARS
from usermem.policy.wordedge import WORD_EDGE as WORD_EDGE
from usermem.policy.wordedge import WORD_END as WORD_END
from usermem.policy.wordedge import WORD_START as WORD_START
from usermem.policy.wordedge import cjk_compile as cjk_compile
from usermem.policy.wordedge import cjk_edges as cjk_edges

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])|(?<=[.])\s+")

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

    Raises InvalidArgument for a wrong shape and ValidationError for limits, naming the message: at most
    `Limits.max_messages` messages, each at most `Limits.max_message_chars` characters, together at most
    `Limits.max_extract_chars` (what one extraction call reads; longer transcripts go in `parts`).
    """
    if isinstance(messages, str | Mapping):
        messages = [messages]
    if not isinstance(messages, Sequence):
        raise InvalidArgument(f"messages must be a list of dicts or strings, got {type(messages).__name__}")
    limits = DEFAULT_LIMITS
    budget = limits.max_extract_chars
    if len(messages) > limits.max_messages:
        raise ValidationError(f"{len(messages)} messages exceed the limit of {limits.max_messages}",
                              field="messages")
    out: list[Message] = []
    total = 0
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
        total += len(content)
        if total > budget:
            raise ValidationError(f"the messages hold more than {budget} characters together, over the limit of one "
                                  f"extraction call; send them in parts", field="messages")
        out.append(Message(role, content, i))
    return out


def _content_len(message: Any) -> int:
    content = message.get("content", "") if isinstance(message, Mapping) else getattr(message, "content", message)
    return len(content) if isinstance(content, str) else 0


def parts(messages: Sequence[Any], *, max_messages: int | None = None, max_chars: int | None = None) -> list[list[Any]]:
    """Consecutive runs of `messages` (in order, none left out), each within one extraction call's limits:
    at most `max_messages` messages (default `Limits.max_messages`) and `max_chars` characters together
    (default `Limits.max_extract_chars`). A message longer than `max_chars` alone is a part of its own (the
    call refuses it). For transcripts longer than one call: a session's at close, an imported conversation."""
    most = DEFAULT_LIMITS.max_messages if max_messages is None else max_messages
    budget = DEFAULT_LIMITS.max_extract_chars if max_chars is None else max_chars
    out: list[list[Any]] = []
    run: list[Any] = []
    chars = 0
    for m in messages:
        n = _content_len(m)
        if run and (len(run) >= most or chars + n > budget):
            out.append(run)
            run, chars = [], 0
        run.append(m)
        chars += n
    if run:
        out.append(run)
    return out


def pieces(text: str, max_chars: int | None = None) -> list[dict[str, str]]:
    """A transcript given as one text -> user messages of at most `max_chars` characters (default
    `Limits.max_message_chars`), cut at line ends where a line allows, else inside the line."""
    most = DEFAULT_LIMITS.max_message_chars if max_chars is None else max_chars
    out: list[str] = []
    run = ""
    for line in text.splitlines(keepends=True):
        while len(line) > most:
            if run:
                out.append(run)
                run = ""
            out.append(line[:most])
            line = line[most:]
        if len(run) + len(line) > most:
            out.append(run)
            run = ""
        run += line
    if run:
        out.append(run)
    return [{"role": "user", "content": p} for p in out if p.strip()]


def newest_within(messages: Sequence[Any], max_chars: int) -> list[Any]:
    """The newest messages whose contents together hold at most `max_chars` characters (in their order)."""
    chars = 0
    start = len(messages)
    while start > 0 and chars + _content_len(messages[start - 1]) <= max_chars:
        start -= 1
        chars += _content_len(messages[start])
    return list(messages[start:])


def check_text(name: str, text: Any, max_chars: int = DEFAULT_LIMITS.max_message_chars) -> str:
    if not isinstance(text, str):
        raise InvalidArgument(f"{name} must be a str, got {type(text).__name__}")
    if len(text) > max_chars:
        raise ValidationError(f"{name} has {len(text)} characters, over the limit of {max_chars}", field=name)
    if SURROGATE.search(text):
        raise ValidationError(f"{name} contains a lone surrogate (\\ud800-\\udfff), which is not valid Unicode "
                              f"text", field=name)
    return text
