"""One text normalisation for every detector (PII write guard, output redactor, injection guard).

Obfuscation that a person reads straight through must not hide a value from a pattern:

- NFKC: full-width letters and digits (`１３８…`, `ｐａｓｓｗｏｒｄ`), ligatures, circled and super-/subscript
  forms become their plain counterparts;
- every decimal digit of any script (Arabic-Indic `١٣٨`, Devanagari, …) becomes its ASCII digit
  (`unicodedata.decimal`);
- format characters (category Cf: zero-width space/joiners, soft hyphen, BOM, bidi marks) and variation
  selectors are removed;
- every Unicode space and tab becomes one ASCII space, and runs of them collapse to one; line breaks of
  any kind become one `\\n` (patterns anchored at line starts keep working).

`fold` keeps an offset map, so a span found in the folded text maps back to the exact span of the original
text (`Folded.span`): redaction replaces the original characters, however long the obfuscation was.

`confusable_skeleton` additionally maps Cyrillic/Greek (and a few other) look-alikes of Latin letters to
those letters, for the injection guard only: PII detectors need digits, not letters, and mapping letters
would change Chinese/Russian text that is no attack at all.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
# Letters that render as nothing, but are not category Cf.
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5")
_PLAIN = re.compile(r"[\x21-\x7e]*(?: [\x21-\x7e]+)*")  # printable ASCII, single spaces: nothing to fold
# Anything fold() would change in NFKC-normalised text: whitespace other than a single space, digits of other
# scripts, format characters (category Cf, listed by range) and the invisible letters and selectors.
_NEEDS_FOLD = re.compile(
    r"[^\S ]|  |(?![0-9])\d|[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    r"\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    r"\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f\ufe00-\ufe0f\U000e0100-\U000e01ef"
    r"\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5]"
)


@dataclass(frozen=True, slots=True)
class Folded:
    """Normalised text, and for each of its characters the [start, end) of the original it came from."""

    text: str
    starts: tuple[int, ...] | None  # None: identical to the original (nothing was folded)
    ends: tuple[int, ...] | None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that folded text[start:end] came from (end > start)."""
        if self.starts is None or self.ends is None:
            return start, end
        return self.starts[start], self.ends[end - 1]


def _is_dropped(ch: str) -> bool:
    if ch in _INVISIBLE:
        return True
    cat = unicodedata.category(ch)
    if cat == "Cf":
        return True
    # variation selectors (VS1-16, VS17-256) and combining grapheme joiner
    o = ord(ch)
    return 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF


def _fold_char(ch: str) -> str:
    out = unicodedata.normalize("NFKC", ch)
    if out.isascii():
        return out
    chars = []
    for c in out:
        d = unicodedata.decimal(c, None)
        chars.append(str(d) if d is not None else c)
    return "".join(chars)


def fold(text: str) -> Folded:
    """Normalise `text` for detection, keeping the offset map back to the original."""
    if text.isascii() and _PLAIN.fullmatch(text):
        return Folded(text, None, None)
    if unicodedata.is_normalized("NFKC", text) and not _NEEDS_FOLD.search(text):
        return Folded(text, None, None)  # nothing to fold
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for run in _STABLE_RUN.finditer(text):
        if run.start() > pos:
            _fold_span(text, pos, run.start(), out, starts, ends)
        a, b = run.span()
        out.append(text[a:b])  # printable ASCII and CJK ideographs: NFKC leaves them as they are
        starts.extend(range(a, b))
        ends.extend(range(a + 1, b + 1))
        pos = b
    if pos < len(text):
        _fold_span(text, pos, len(text), out, starts, ends)
    return Folded("".join(out), tuple(starts), tuple(ends))


_STABLE_RUN = re.compile(r"[\x21-\x7e\u3400-\u4dbf\u4e00-\u9fff]{2,}")


def _fold_span(text: str, lo: int, hi: int, out: list[str], starts: list[int], ends: list[int]) -> None:
    for i in range(lo, hi):
        ch = text[i]
        last = out[-1][-1:] if out else ""
        if ch in _LINE_BREAKS:
            if ch == "\n" and last == "\n" and i and text[i - 1] == "\r":  # \r\n is one break
                ends[-1] = i + 1
                continue
            out.append("\n")
            starts.append(i)
            ends.append(i + 1)
            continue
        if ch.isspace():
            if last == " ":
                ends[-1] = i + 1  # a run of spaces is one space
                continue
            out.append(" ")
            starts.append(i)
            ends.append(i + 1)
            continue
        folded = _FOLDED.get(ch)
        if folded is None:
            folded = "" if _is_dropped(ch) else ch if ch.isascii() else _fold_char(ch)
            if len(_FOLDED) < 50_000:
                _FOLDED[ch] = folded
        for c in folded:
            out.append(c)
            starts.append(i)
            ends.append(i + 1)


_FOLDED: dict[str, str] = {}


def fold_text(text: str) -> str:
    """Only the normalised text (see `fold`)."""
    return fold(text).text


# Look-alikes of Latin letters (Unicode TR39 confusables, the ones seen in injection payloads): Cyrillic,
# Greek, Armenian, Lisu and a few IPA letters. Upper and lower case both map to lower-case Latin; the patterns
# that use this run case-insensitively.
_CONFUSABLES = str.maketrans({
    # Cyrillic
    "а": "a", "А": "a", "в": "b", "В": "b", "с": "c", "С": "c", "ԁ": "d", "е": "e", "Е": "e", "ё": "e",
    "Ё": "e", "һ": "h", "Н": "h", "н": "h", "і": "i", "І": "i", "ӏ": "l", "Ӏ": "l", "ј": "j", "Ј": "j",
    "к": "k", "К": "k", "м": "m", "М": "m", "о": "o", "О": "o", "р": "p", "Р": "p", "ԛ": "q", "ѕ": "s",
    "Ѕ": "s", "т": "t", "Т": "t", "ц": "u", "у": "y", "У": "y", "х": "x", "Х": "x", "ԝ": "w", "Ԝ": "w",
    "ѵ": "v", "Ѵ": "v", "г": "r", "п": "n", "и": "u", "ь": "b", "Ь": "b", "Ζ": "z",
    # Greek
    "α": "a", "Α": "a", "β": "b", "Β": "b", "ε": "e", "Ε": "e", "η": "n", "Η": "h", "ι": "i", "Ι": "i",
    "κ": "k", "Κ": "k", "ν": "v", "Ν": "n", "ο": "o", "Ο": "o", "ρ": "p", "Ρ": "p", "τ": "t", "Τ": "t",
    "υ": "u", "Υ": "y", "χ": "x", "Χ": "x", "γ": "y", "Μ": "m", "ϲ": "c", "Ϲ": "c", "ϳ": "j", "ω": "w",
    "ѡ": "w", "ς": "c",
    # Armenian and others
    "օ": "o", "ս": "u", "ո": "n", "հ": "h", "ց": "g", "ɑ": "a", "ɡ": "g", "ı": "i", "ȷ": "j",
    "ℓ": "l", "ꓲ": "i", "ꓳ": "o", "ꓴ": "u", "ꓮ": "a", "ꓰ": "e", "ꓢ": "s", "ꓔ": "t", "ꓠ": "n",
    # digits and signs used as letters in "1gnore", "0verride": left alone (they are digits)
})


def confusable_skeleton(text: str) -> str:
    """`fold_text`, then look-alike letters mapped to Latin and combining marks removed (ｉｇｎｏｒｅ, іgnоre,
    i̇gnore → ignore). For pattern matching only; never stored or shown."""
    folded = fold_text(text)
    if folded.isascii():  # every look-alike mapped is non-ASCII, and ASCII has no combining marks
        return folded
    folded = folded.translate(_CONFUSABLES)
    if folded.isascii():
        return folded
    decomposed = unicodedata.normalize("NFD", folded)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))
