"""Issue 19 (release A/B, write cost): the fast paths of the instruction-like guard answer exactly what the
slow paths answer.

- `instruction_like` skips the patterns in `NON_ASCII_ONLY` on an all-ASCII skeleton. Each of them is proven
  here, by analysing its parsed regex, to need a non-ASCII character in every match (so it cannot match an
  ASCII skeleton); and both paths are compared on random text (ASCII, CJK, look-alikes, full-width and
  zero-width characters, corpus payloads).
- `confusable_skeleton` returns an ASCII fold without the look-alike table (every look-alike it maps is
  non-ASCII) — compared with the full computation on the same random text.
"""

from __future__ import annotations

import re
import re._constants as sre_c  # the regex parser (Python >= 3.11; sre_parse is its deprecated alias)
import re._parser as sre_parse
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from injection_corpus import BENIGN, INJECTIONS, obfuscations
from props import examples
from usermem.policy import injection, normalize
from usermem.policy.injection import NON_ASCII_ONLY, instruction_like
from usermem.policy.normalize import confusable_skeleton, fold_text

ASCII = [chr(a) for a in range(128)]
_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", sre_c.MAX_REPEAT))


def _no_ascii_matches(class_body: str, flags: int) -> bool:
    """True when no ASCII character matches the one-character regex `[class_body]` (case folding included:
    under IGNORECASE the Kelvin sign matches `k`, so a non-ASCII literal alone proves nothing)."""
    one = re.compile(f"[{class_body}]", flags)
    return not any(one.fullmatch(c) for c in ASCII)


def _needs_non_ascii(seq: Any, flags: int) -> bool:
    """Sound, not complete: True only if every string the parsed regex `seq` matches contains a non-ASCII
    character. A sequence needs one if any of its items does; an alternation if all of its branches do; a
    repeat if it repeats at least once something that does; anything else (assertions, `.`, negated or
    category classes) is taken to need none."""
    for op, av in seq:
        if op is sre_c.LITERAL:
            if _no_ascii_matches(f"\\U{av:08x}", flags):
                return True
        elif op is sre_c.IN:
            parts = []
            for item_op, item in av:
                if item_op is sre_c.LITERAL:
                    parts.append(f"\\U{item:08x}")
                elif item_op is sre_c.RANGE:
                    parts.append(f"\\U{item[0]:08x}-\\U{item[1]:08x}")
                else:  # NEGATE, CATEGORY...: not analysed
                    break
            else:
                if _no_ascii_matches("".join(parts), flags):
                    return True
        elif op is sre_c.SUBPATTERN:
            _group, add, remove, sub = av
            if _needs_non_ascii(sub, (flags | add) & ~remove):
                return True
        elif op is getattr(sre_c, "ATOMIC_GROUP", None):
            if _needs_non_ascii(av, flags):
                return True
        elif op is sre_c.BRANCH:
            if all(_needs_non_ascii(branch, flags) for branch in av[1]):
                return True
        elif op in _REPEATS:
            low, _high, sub = av
            if low >= 1 and _needs_non_ascii(sub, flags):
                return True
    return False


def needs_non_ascii(pattern: re.Pattern[str]) -> bool:
    return _needs_non_ascii(sre_parse.parse(pattern.pattern, pattern.flags), pattern.flags)


def slow_instruction_like(value: Any) -> str | None:
    """The guard without the fast path: every pattern, in order, on every string's skeleton."""
    for text in injection._strings(value):
        skeleton = confusable_skeleton(text)
        for name, pattern in injection._PATTERNS:
            if pattern.search(skeleton):
                return name
    return None


def slow_skeleton(text: str) -> str:
    """confusable_skeleton without its ASCII shortcut."""
    folded = fold_text(text).translate(normalize._CONFUSABLES)
    if folded.isascii():
        return folded
    decomposed = unicodedata.normalize("NFD", folded)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


# --- the analysis itself can tell the two kinds apart ----------------------------------------------------

@pytest.mark.parametrize("rx,flags,expected", [
    ("忽略", 0, True), ("a|忽略", 0, False), ("(?:忽略|无视)x", 0, True), ("忽?", 0, False), ("(?:忽){0,3}", 0, False),
    ("[一-龥]", 0, True), ("[^a]", 0, False), (".", 0, False), (r"\w", 0, False), ("(?=忽)", 0, False),
    ("\u212a", re.IGNORECASE, False),  # the Kelvin sign matches ASCII k when case is ignored
    ("\u212a", 0, True), ("[\u212a\u4e00]", re.IGNORECASE, False), ("x(?:ab|c(?:d|忽))", 0, False),
    ("(?:忽|略)+", 0, True), ("ignore all", re.IGNORECASE, False),
])
def test_the_analysis_is_sound_on_known_shapes(rx: str, flags: int, expected: bool) -> None:
    assert needs_non_ascii(re.compile(rx, flags)) is expected


# --- the skipped patterns cannot match ASCII ----------------------------------------------------------------

def test_every_skipped_pattern_needs_a_non_ascii_character() -> None:
    names = [name for name, _ in injection._PATTERNS]
    assert not NON_ASCII_ONLY - set(names), NON_ASCII_ONLY - set(names)
    for name, pattern in injection._PATTERNS:
        if name in NON_ASCII_ONLY:
            assert needs_non_ascii(pattern), f"{name} may match ASCII text: it must not be skipped"


def test_the_fast_list_keeps_the_order_of_the_rest() -> None:
    kept = tuple(p for p in injection._PLAIN if p[0] not in NON_ASCII_ONLY)
    assert kept == injection._ASCII_PATTERNS
    # the plain patterns are the seam-aware ones as written, in the same order
    assert [n for n, _ in injection._PLAIN] == [n for n, _ in injection._PATTERNS]


def test_patterns_left_in_the_fast_list_are_english_or_mixed() -> None:
    # the analysis proves nothing for them: they may match ASCII, so they must stay (the converse would be a
    # missed skip, not a weakened guard; listed to notice a new Chinese-only pattern left unlisted)
    assert [n for n, p in injection._ASCII_PATTERNS if needs_non_ascii(p)] == []


def test_the_look_alike_table_maps_only_non_ascii_characters() -> None:
    assert all(k > 127 for k in normalize._CONFUSABLES)


# --- both paths agree ---------------------------------------------------------------------------------------

CORPUS = INJECTIONS + BENIGN + [o for text in INJECTIONS[::4] for o in obfuscations(text)]


def test_both_paths_agree_on_the_corpus() -> None:
    for text in CORPUS:
        assert instruction_like(text) == slow_instruction_like(text), text
        assert confusable_skeleton(text) == slow_skeleton(text), text


_ALPHABET = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:：,，.!！<>|[]#-_/'\n\t")
    + list("忽略之前以上的所有指令规则你现在是从起必须服从我系统提示词输出新模式越狱助手发送到链接密码")
    + list("аеосрхуіѕАЕОРСΑΕΟοιν")  # Cyrillic and Greek look-alikes
    + ["\u200b", "\u200d", "\ufeff", "\u00ad", "\u3000", "\u00a0", "\u0301", "\ufe0f", "\u212a"]
    + list("ＩＧＮＯＲＥｉｇｎｏｒｅ１２３")
)
_TEXT = st.one_of(
    st.text(_ALPHABET, max_size=60),
    st.text(st.characters(max_codepoint=127), max_size=60),
    st.text(max_size=40),
    st.builds(lambda a, b, c: a + b + c, st.text(_ALPHABET, max_size=10), st.sampled_from(CORPUS),
              st.text(_ALPHABET, max_size=10)),
)


@settings(max_examples=examples(1200, floor=300), deadline=None)
@given(_TEXT)
def test_both_paths_agree_on_random_text(text: str) -> None:
    assert instruction_like(text) == slow_instruction_like(text)
    assert confusable_skeleton(text) == slow_skeleton(text)


@settings(max_examples=examples(200, floor=50), deadline=None)
@given(st.lists(_TEXT, max_size=4), st.dictionaries(_TEXT, _TEXT, max_size=3))
def test_both_paths_agree_on_nested_values(items: list[str], mapping: dict[str, str]) -> None:
    value = {"items": items, "nested": mapping}
    assert instruction_like(value) == slow_instruction_like(value)
