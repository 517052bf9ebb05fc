"""Deterministic PII detectors shared by the write guard and the output filter.

Each detector finds candidate spans with a permissive pattern and then *validates* them
(check digits, dates, Luhn, number prefixes), so that ordinary numbers — amounts, dates,
order and tracking numbers, versions, postcodes — are not flagged.

Detection runs on the folded text (policy/normalize.py: NFKC, digits of every script as ASCII, no
zero-width or other format characters, one space for any run of Unicode spaces and tabs) and maps each
finding back to the span of the original text, so obfuscated values are found and redacted exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from usermem.policy.normalize import fold


class PIIKind(StrEnum):
    CN_ID = "cn_id"
    BANK_CARD = "bank_card"
    CN_MOBILE = "cn_mobile"
    PASSWORD = "password"
    API_KEY = "api_key"
    EMAIL = "email"


@dataclass(frozen=True, slots=True)
class Finding:
    """A detected span: text[start:end] is the sensitive part (for passwords, only the secret itself)."""

    kind: PIIKind
    start: int
    end: int


DEFAULT_PLACEHOLDER = "[已脱敏]"

# --- Chinese resident identity number (GB 11643-1999) -------------------------------------------------

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
# One separator between digits: space (any Unicode space or tab, after folding), hyphen, dot, slash, underscore.
_SEP = r"[ \-./_]?"
# Digit boundaries only: a valid date plus a matching check digit is specific enough that letters glued
# to the number ("身份证110105194912310021a") do not make it anything else.
_ID_RE = re.compile(r"(?<![0-9])(\d(?:" + _SEP + r"\d){16}" + _SEP + r"[\dXx])(?![0-9])")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def cn_id_check_digit(first17: str) -> str:
    total = sum(int(d) * w for d, w in zip(first17, _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11]


def is_valid_cn_id(number: str) -> bool:
    """18 characters, plausible region and birth date, and the GB 11643 check digit."""
    n = number.upper()
    if len(n) != 18 or not n[:17].isdigit():
        return False
    if n[0] not in "1234568" or n[:2] == "00":
        return False
    year, month, day = int(n[6:10]), int(n[10:12]), int(n[12:14])
    if not (1900 <= year <= 2099 and 1 <= month <= 12 and 1 <= day <= _DAYS_IN_MONTH[month - 1]):
        return False
    if month == 2 and day == 29 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return False
    return cn_id_check_digit(n[:17]) == n[17]


def _digits(text: str) -> str:
    return re.sub(r"[^0-9Xx]", "", text)


def _find_cn_id(text: str) -> Iterator[Finding]:
    for m in _ID_RE.finditer(text):
        if is_valid_cn_id(_digits(m.group(1))):
            yield Finding(PIIKind.CN_ID, m.start(1), m.end(1))


# --- Bank cards -----------------------------------------------------------------------------------------

# Letters may be glued in front ("visa4111…", "card:4111…"); _find_bank_cards skips hex-looking runs.
_CARD_RE = re.compile(r"(?<![0-9.])(\d(?:" + _SEP + r"\d){12,18})(?![0-9A-Za-z]|[./_\-]\d)")
_GLUED = re.compile(r"[A-Za-z]+$")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# Issuer prefixes per card length (Visa, Mastercard incl. 2-series, Amex, UnionPay incl. 81 and the
# legacy 9558/9559 debit ranges, Discover, JCB incl. the 15-digit 2131/1800 ranges, Diners, Maestro).
# A 13-digit number must start with 4 (Visa); other 13-digit numbers are barcodes (EAN-13) or
# millisecond timestamps. Numbers starting with 0 or 7 are never cards.
_MC2 = tuple(str(p) for p in range(2221, 2721))
_PREFIXES_BY_LENGTH: dict[int, tuple[str, ...]] = {
    13: ("4",),
    14: ("30", "36", "38", "39", "5"),
    15: ("34", "37", "2131", "1800", "62", "4"),
    16: ("4", "5", "6", "35", "30", "36", "38", "39", "81", *_MC2),
    17: ("62", "81", "4", "5", "6"),
    18: ("62", "81", "4", "5", "6", "9558", "9559"),
    19: ("62", "81", "4", "5", "6", "35", "9558", "9559"),
}


def _card_prefix_ok(d: str) -> bool:
    """Does a digit string of this length start with the prefix of a card network that issues that length?

    Restricting prefixes by length keeps tracking numbers, barcodes and timestamps that happen to pass
    Luhn (one random number in ten does) from being flagged.
    """
    return d.startswith(_PREFIXES_BY_LENGTH.get(len(d), ()))


_ORDER_CUES = re.compile(
    r"(订单|单号|运单|快递|物流|流水|工单|编号|交易号|条码|条形码|"
    r"\b(?:order|tracking|invoice|ticket|ref(?:erence)?|serial|sku|ean|upc|isbn|barcode|imei|meid|iccid)\b)"
    r"[^0-9\n]{0,12}$",
    re.IGNORECASE,
)
_CARD_CUES = re.compile(r"(卡|card|银行|bank|visa|master|银联|借记|信用|账户|account|iban)", re.IGNORECASE)


def _find_bank_cards(text: str) -> Iterator[Finding]:
    for m in _CARD_RE.finditer(text):
        digits = re.sub(r"\D", "", m.group(1))
        if not (13 <= len(digits) <= 19 and luhn_ok(digits) and _card_prefix_ok(digits)):
            continue
        if not _separators_ok(m.group(1)):
            continue  # mixed separators, dotted single digits: dates, versions and numbers, not a card
        glued = _GLUED.search(text, 0, m.start(1))
        if glued and not re.search(r"[g-zG-Z]", glued.group()):
            continue  # digits inside a hex token (ids, hashes), not a card after a word
        before = text[max(0, m.start(1) - 24) : m.start(1)]
        # An explicit "order no." label in front of a number wins unless a card is also mentioned.
        if _ORDER_CUES.search(before) and not _CARD_CUES.search(before):
            continue
        yield Finding(PIIKind.BANK_CARD, m.start(1), m.end(1))


# --- Chinese mobile numbers -----------------------------------------------------------------------------

_MOBILE_RE = re.compile(
    r"(?<![0-9A-Za-z+.])"
    r"((?:(?:\+|00)86[ \-]?|\(\+?86\)[ \-]?|86[ \-])?"
    r"(?P<core>(?:1" + _SEP + r"[3-9]" + _SEP + r"\d|\(1[3-9]\d\))(?:" + _SEP + r"\d){8}))"
    r"(?![0-9A-Za-z]|[./_\-]\d)"
)


def _separators_ok(number: str) -> bool:
    """A number written with separators uses one kind of separator, and with `.`/`/`/`_` at most one group is
    a single digit: "138.0013.8000", "510.000.000.000.000.8" and "1 3 8 0 0 …" are numbers,
    "1.3.8.0.0.1.3.8.0.0.0" is a version."""
    seps = set(re.sub(r"\d", "", number))
    if len(seps) > 1:
        return False
    if seps & {".", "/", "_"}:
        return sum(len(g) == 1 for g in re.split(r"[./_]", number)) <= 1
    return True


_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def _is_ipv4(number: str) -> bool:
    """"177.222.27.140" is an IPv4 address, not a mobile number written with dots; "130.000.000.00" is not one
    (dotted-decimal octets have no leading zero)."""
    return _IPV4_RE.fullmatch(number) is not None and all(
        int(g) <= 255 and (g == "0" or not g.startswith("0")) for g in number.split("."))


_PHONE_CUE = re.compile(r"(手机|电话|联系|mobile|phone|tel|call)", re.I)


def _find_mobiles(text: str) -> Iterator[Finding]:
    for m in _MOBILE_RE.finditer(text):
        core = m.group("core")
        before = text[max(0, m.start(1) - 24) : m.start(1)]
        if not core.startswith("(") and (not _separators_ok(core) or (_is_ipv4(core) and not _PHONE_CUE.search(before))):
            continue  # a number that reads as an IPv4 address is one, unless it is said to be a phone number
        if _ORDER_CUES.search(before) and not _PHONE_CUE.search(before):
            continue
        yield Finding(PIIKind.CN_MOBILE, m.start(1), m.end(1))


# --- E-mail ---------------------------------------------------------------------------------------------

# ASCII boundaries: in Python's Unicode regexes \w matches Chinese characters, and "邮箱是a@b.com就行" has none.
_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+-])([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24})(?![A-Za-z0-9-])"
)


def _find_emails(text: str) -> Iterator[Finding]:
    for m in _EMAIL_RE.finditer(text):
        yield Finding(PIIKind.EMAIL, m.start(1), m.end(1))


# --- Passwords and secrets stated as such ---------------------------------------------------------------

_PW_LABEL = (
    r"(?:(?:登录|登陆|支付|交易|取款|银行卡|账户|账号|邮箱|wifi|WiFi|WIFI)? ?密 ?码|口 ?令|pin ?码|PIN ?码|"
    r"(?<![A-Za-z])(?:pass(?:word|wd|code|phrase)?|pwd|pin))"  # whole English words: not "spin is", "bypass="
)
# Label, then an explicit separator ("是", "为", ":", "=", "is"), then the secret. A secret never
# contains CJK characters, so "密码：请在设置里修改" states no password.
_SECRET_CHARS = r"[^\s\"'”’」，。,;；、\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
_PW_EXPLICIT = re.compile(
    _PW_LABEL + r"(?:\s*(?:是|为|為|:|：|=)\s*|\s+(?:is|was)\s+)[\"'“‘「]?(" + _SECRET_CHARS + r"{3,64})",
    re.IGNORECASE,
)
# "passwd hunter2" / "pwd s3cret!": bare space after a short label, only when the token looks like a secret.
# Chinese labels too: "密码 Xy7#abc", "口令 K8s!x".
_PW_BARE = re.compile(r"(?:(?<![A-Za-z])(?:passwd|pwd|password|passcode)|密 ?码|口 ?令)\s+(" + _SECRET_CHARS + r"{4,64})",
                      re.IGNORECASE)
# "PIN 1234" / "pin码 8866" / "PIN code 123456": a bare PIN is digits only, and the label is written as one.
_PIN_BARE = re.compile(r"(?:(?<![A-Za-z])(?:PIN|Pin)(?: ?code)?|pin ?码|PIN ?码)\s*(\d{4,8})(?![0-9])")
# Words that follow "password is/:" in sentences *about* passwords rather than stating one.
_NOT_A_SECRET = frozenset(
    """
reset resets change changed changes forgot forgotten recovery manager policy field strength hint is was
expired expires expiring incorrect correct wrong invalid valid required optional protected login the a an
your my his her their our its this that not now still too very case-sensitive sensitive empty blank missing
set saved stored encrypted hashed shown hidden visible long short weak strong same different new old none
null n/a na see check below above attached here there ready updated needed mandatory unknown
""".split()  # noqa: SIM905
)


def _looks_secret(token: str) -> bool:
    return bool(re.search(r"\d", token) or re.search(r"[^\w]", token) or (
        re.search(r"[a-z]", token) and re.search(r"[A-Z]", token)))


def _find_passwords(text: str) -> Iterator[Finding]:
    for m in _PW_EXPLICIT.finditer(text):
        if m.group(1).lower().rstrip(".!?)") in _NOT_A_SECRET:
            continue
        yield Finding(PIIKind.PASSWORD, m.start(1), m.end(1))
    for m in _PW_BARE.finditer(text):
        token = m.group(1)
        if token.lower().rstrip(".!?)") not in _NOT_A_SECRET and _looks_secret(token):
            yield Finding(PIIKind.PASSWORD, m.start(1), m.end(1))
    for m in _PIN_BARE.finditer(text):
        yield Finding(PIIKind.PASSWORD, m.start(1), m.end(1))


# --- API keys and tokens, by shape -----------------------------------------------------------------------

_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])("
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{20,}"
    r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"
    r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")(?![A-Za-z0-9])"
)
_KEY_LABELLED = re.compile(
    r"(?:api[_\- ]?key|apikey|access[_\- ]?token|secret(?:[_\- ]?key)?|auth[_\- ]?token|bearer|token|密钥|令牌)"
    r"\s*(?:是|为|:|：|=|\s)\s*[\"']?([A-Za-z0-9_\-./+=]{16,})",
    re.IGNORECASE,
)


def _find_api_keys(text: str) -> Iterator[Finding]:
    for m in _KEY_SHAPES.finditer(text):
        yield Finding(PIIKind.API_KEY, m.start(1), m.end(1))
    for m in _KEY_LABELLED.finditer(text):
        token = m.group(1)
        if re.search(r"\d", token) and re.search(r"[A-Za-z]", token):
            yield Finding(PIIKind.API_KEY, m.start(1), m.end(1))


# --- Public API -----------------------------------------------------------------------------------------

# Order matters for overlaps: an 18-digit ID is checked before a card, a card before a phone.
_DETECTORS: tuple[tuple[PIIKind, Callable[[str], Iterator[Finding]]], ...] = (
    (PIIKind.CN_ID, _find_cn_id),
    (PIIKind.API_KEY, _find_api_keys),
    (PIIKind.PASSWORD, _find_passwords),
    (PIIKind.BANK_CARD, _find_bank_cards),
    (PIIKind.CN_MOBILE, _find_mobiles),
    (PIIKind.EMAIL, _find_emails),
)
ALL_KINDS: frozenset[PIIKind] = frozenset(PIIKind)


@lru_cache(maxsize=64)
def _kinds_of(kinds: frozenset[PIIKind | str]) -> frozenset[PIIKind]:
    return frozenset(PIIKind(k) for k in kinds)


def detect(text: str, kinds: Iterable[PIIKind | str] | None = None) -> list[Finding]:
    """All non-overlapping findings in `text`, in order. Earlier detectors win overlaps."""
    if not isinstance(text, str):
        raise TypeError(f"detect() needs a str, got {type(text).__name__}")
    if kinds is None:
        wanted = ALL_KINDS
    elif type(kinds) is frozenset:
        wanted = _kinds_of(kinds)  # the write guard's sets, converted once
    else:
        wanted = frozenset(PIIKind(k) for k in kinds)
    folded = fold(text)
    taken: list[Finding] = []
    for kind, finder in _DETECTORS:
        if kind not in wanted:
            continue
        for f in finder(folded.text):
            if not any(f.start < t.end and t.start < f.end for t in taken):
                taken.append(f)
    spans = (folded.span(f.start, f.end) for f in sorted(taken, key=lambda f: f.start))
    return [Finding(f.kind, start, end) for f, (start, end) in
            zip(sorted(taken, key=lambda f: f.start), spans, strict=True)]


def redact(
    text: str, placeholder: str = DEFAULT_PLACEHOLDER, kinds: Iterable[PIIKind | str] | None = None
) -> str:
    """`text` with every finding replaced by `placeholder`."""
    out: list[str] = []
    pos = 0
    for f in detect(text, kinds):
        out.append(text[pos : f.start])
        out.append(placeholder)
        pos = f.end
    out.append(text[pos:])
    return "".join(out)


def contains(text: str, kinds: Iterable[PIIKind | str] | None = None) -> bool:
    return bool(detect(text, kinds))
