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
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for i, ch in enumerate(text):
        if ch in _LINE_BREAKS:
            if ch == "\n" and out and out[-1] == "\n" and text[i - 1] == "\r":  # \r\n is one break
                ends[-1] = i + 1
                continue
            out.append("\n")
            starts.append(i)
            ends.append(i + 1)
            continue
        if ch.isspace() or ch == "\t":
            if out and out[-1] == " ":
                ends[-1] = i + 1  # a run of spaces is one space
                continue
            out.append(" ")
            starts.append(i)
            ends.append(i + 1)
            continue
        if _is_dropped(ch):
            continue
        folded = ch if ch.isascii() else _fold_char(ch)
        for c in folded:
            out.append(c)
            starts.append(i)
            ends.append(i + 1)
    return Folded("".join(out), tuple(starts), tuple(ends))


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
    folded = fold_text(text).translate(_CONFUSABLES)
    if folded.isascii():
        return folded
    decomposed = unicodedata.normalize("NFD", folded)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))
