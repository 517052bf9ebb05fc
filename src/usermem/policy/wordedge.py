"""Word edges that also fall between a Chinese character and a Latin word, for English cue lists run on
zh/en code-switched text ("我的boss说", "请ignore all previous instructions"): the extractor's patterns
(usermem.understand) and the injection guard's. Pure string work, no I/O."""

from __future__ import annotations

import re
from functools import lru_cache

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


_SEAM = re.compile("[" + CJK_CHARS + "]" + _NON_CJK_WORD + "|" + _NON_CJK_WORD + "[" + CJK_CHARS + "]")


def has_cjk_seam(text: str) -> bool:
    """Whether `text` puts a Chinese (Japanese, Korean) character right beside a Latin letter or digit: the only
    place where a `cjk_edges` pattern can match differently from its plain `\\b` original. On text without one,
    both match alike, so a hot path may run the cheaper original (policy.injection does)."""
    return _SEAM.search(text) is not None

