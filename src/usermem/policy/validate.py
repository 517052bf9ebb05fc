"""Input limits and shape checks for writes. Explicit numbers, clear messages, no I/O."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from usermem.errors import InvalidArgument, ValidationError
from usermem.model import SOURCE_BY_VALUE, Kind, Source, parse_kind
from usermem.policy.pii import detect

KEY_PATTERN = re.compile(r"^[a-z0-9_.\-]{1,64}$")
# Characters that are not printable, or print as nothing: C0 and C1 controls and DEL, the soft hyphen,
# bidirectional marks, embeddings, overrides and isolates (which reorder how an audit line reads),
# zero-width characters and joiners, the line and paragraph separators, the byte-order mark and the
# interlinear annotation marks, the object replacement character and U+FFFD, the replacement character (what an
# undecodable byte becomes: "%FF" in a URL path decodes to it). BMP only, written as \uXXXX, so every regex engine that reads the published
# pattern (OpenAPI / MCP JSON Schema: ECMA, Rust, Python) reads the same class.
UNPRINTABLE_CLASS = (r"\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     r"\ufff9-\ufffd")
ID_PATTERN = re.compile(rf"^[^{UNPRINTABLE_CLASS}]{{1,128}}$")
# The same class plus the invisible Unicode tag characters (U+E0000-U+E007F, "ASCII smuggling"), for the
# checks made in Python (identifiers and short free text such as a grant's purpose).
_UNPRINTABLE = re.compile(rf"[{UNPRINTABLE_CLASS}\U000e0000-\U000e007f]")
SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Limits:
    max_value_bytes: int = 16 * 1024
    max_batch: int = 500
    max_json_depth: int = 16
    max_messages: int = 500
    max_message_chars: int = 20_000
    # characters of all messages one extraction call reads (the no-LLM extractor spends ~0.2 ms per character:
    # this bounds one call to well under a minute of CPU; a request above it is refused, not cut)
    max_extract_chars: int = 200_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Checked:
    """A write whose fields passed validation, with parsed enums and canonical JSON."""

    kind: Kind
    source: Source
    value_json: str


class InputProblem(ValueError):
    """Raised by checks; the write pipeline turns it into REJECT invalid_input with this message."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


_SAFE_TO_QUOTE = re.compile(r"^[A-Za-z0-9_.:\-]{1,40}$")


def shown(value: Any) -> str:
    """How an input may appear in an error message (which also reaches the audit log): quoted only when it
    is a short plain token without personal data, otherwise described by its shape, never repeated."""
    if isinstance(value, str):
        if _SAFE_TO_QUOTE.match(value) and not detect(value):
            return repr(value)
        return f"a {len(value)}-character string (not repeated here)"
    return f"a {type(value).__name__}"


def check_identifier(name: str, value: Any) -> str:
    """Tenant, user, session and client ids, actors, change-set ids: non-empty, ≤128 characters, no control
    characters or lone surrogates, and no personal data (ID/card/phone numbers, e-mail addresses, secrets):
    identifiers are written to the audit log, which outlives erasure."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return _checked_identifier(name, str(value))


@functools.lru_cache(maxsize=65_536)
def _checked_identifier(name: str, value: str) -> str:
    """The checks of `check_identifier` for a str. A pure function of its arguments, so an identifier that
    passed once (the same tenant and user on every write) is not scanned for personal data again;
    failures raise and are never cached."""
    if not ID_PATTERN.match(value) or value.strip() == "" or _UNPRINTABLE.search(value):
        raise InputProblem(f"{name} must be 1-128 printable characters (no control, format or invisible "
                           f"characters, no U+FFFD from bytes that were not UTF-8), got {shown(value)}", name)
    check_text(name, value)
    if detect(value):
        raise InputProblem(f"{name} must not contain personal data (ID, card or phone numbers, e-mail "
                           f"addresses, passwords or keys): identifiers are kept in the audit log", name)
    if name == "tenant" and is_reserved_tenant(value):
        raise InputProblem(f"tenant {value!r} is reserved for usermem's own records", name)
    return value


def check_optional_identifiers(**named: Any) -> None:
    """check_identifier on every named value that is not None (actor=..., change_set_id=...)."""
    for name, value in named.items():
        if value is not None:
            check_identifier(name, value)


def check_field_key(name: str, value: Any) -> str:
    """A field key or domain name used as an argument (history, forget, contracts, opt-in, recall filters...):
    the key pattern and no personal data (a key like "13800138000" would otherwise reach the audit log)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return _checked_field_key(name, str(value))


@functools.lru_cache(maxsize=4096)
def _checked_field_key(name: str, value: str) -> str:
    if not KEY_PATTERN.match(value):
        raise InputProblem(f"{name} must match [a-z0-9_.-]{{1,64}}, got {shown(value)}", name)
    if detect(value):
        raise InputProblem(f"{name} must not contain personal data (ID, card or phone numbers...): keys are kept "
                           f"in the audit log", name)
    return value


def check_free_text(name: str, value: Any) -> Any:
    """Short free text kept in storage or the audit log (a grant's purpose): refused when it holds
    personal data, rather than stored redacted, because the caller can always say it without, and when it
    holds control, format or invisible characters (one line of readable text). (Its type, emptiness and
    length are the operation's own checks.)"""
    if not isinstance(value, str):
        return value
    check_text(name, value)
    if _UNPRINTABLE.search(value):
        raise InputProblem(f"{name} must not contain control, format or invisible characters (NUL, escape "
                           f"sequences, bidirectional overrides, zero-width characters): it is kept in the audit "
                           f"log and shown to the user", name)
    if detect(value):
        raise InputProblem(f"{name} must not contain personal data (ID, card or phone numbers, e-mail addresses, "
                           f"passwords or keys): it is kept in the audit log", name)
    return value


# How each operation parameter that names something (and may be kept in storage or the audit log) is checked;
# `engine/guard.py` applies this to every public `Memory` method by parameter name.
IDENTIFIER = "identifier"
FIELD_KEY = "field_key"
FIELD_KEYS = "field_keys"
FREE_TEXT = "free_text"
PARAMETER_CHECKS: dict[str, str] = {
    "tenant": IDENTIFIER, "user_id": IDENTIFIER, "session_id": IDENTIFIER, "client_id": IDENTIFIER,
    "actor": IDENTIFIER, "change_set_id": IDENTIFIER, "grantee": IDENTIFIER, "memory_id": IDENTIFIER,
    "grant_id": IDENTIFIER, "tenant_or_grant_id": IDENTIFIER, "verification_id": IDENTIFIER,
    "to_version": IDENTIFIER, "action": IDENTIFIER, "request_id": IDENTIFIER, "procedure_id": IDENTIFIER,
    "proposed_by": IDENTIFIER, "after": IDENTIFIER, "prefix": IDENTIFIER, "webhook_id": IDENTIFIER,
    "notice_id": IDENTIFIER,
    "key": FIELD_KEY, "domain": FIELD_KEY,
    "keys": FIELD_KEYS, "fields": FIELD_KEYS, "fields_or_level": FIELD_KEYS,
    "purpose": FREE_TEXT,
}
_LEVELS = frozenset({"L1", "L2", "L3"})


def check_parameter(name: str, value: Any) -> Any:
    """The check `PARAMETER_CHECKS` names for `name`; returns the value to pass on (an iterable of keys that
    is not a list, tuple or set is read once, so it comes back as a tuple). None passes: such a parameter is
    optional, or required by the signature. Raises TypeError or InputProblem, never repeating a refused value."""
    if value is None:
        return None
    how = PARAMETER_CHECKS[name]
    if how == IDENTIFIER:
        if name == "to_version" and isinstance(value, int) and not isinstance(value, bool):
            return value  # a 1-based position in history
        return check_identifier(name, value)
    if how == FIELD_KEY:
        return check_field_key(name, value)
    if how == FREE_TEXT:
        return check_free_text(name, value)
    # one key or several (fields_or_level: also a level; its other shapes are the grants pipeline's to judge)
    if isinstance(value, str):
        if name == "fields_or_level" and value.upper() in _LEVELS:
            return value
        return check_field_key(name, value)
    if isinstance(value, Iterable) and not isinstance(value, list | tuple | set | frozenset | dict):
        value = tuple(value)
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            check_field_key(name, item)
    return value


def check_text(name: str, value: str) -> str:
    """A string that can be stored and encoded: no lone surrogates (they cannot be written as UTF-8)."""
    if SURROGATE.search(value):
        raise InputProblem(f"{name} contains a lone surrogate (\\ud800-\\udfff), which is not valid Unicode text",
                           name)
    return value


def is_reserved_tenant(tenant: str) -> bool:
    """`*` and names starting with `_` hold usermem's own index documents (sessions, grants, API keys)."""
    return tenant == "*" or tenant.startswith("_")


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    if not KEY_PATTERN.match(key):
        raise InputProblem(f"key must match [a-z0-9_.-]{{1,64}}, got {shown(key)}", "key")
    return key


# json.dumps with these arguments builds this same encoder on every call (its own shortcut is for the default
# arguments only); built once, `encode` gives the identical text (tests/test_write_fast_path.py).
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_json(value: Any) -> str:
    """Stable JSON used for storage and for equality (NOOP) checks."""
    return _CANONICAL.encode(value)


def _depth(value: Any, limit: int, level: int = 0) -> None:
    if level > limit:
        raise InputProblem(f"value nests deeper than {limit} levels", "value")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputProblem("value objects must have string keys", "value")
            check_text("value", k)
            _depth(v, limit, level + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _depth(v, limit, level + 1)
    elif isinstance(value, str):
        check_text("value", value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputProblem("value contains NaN or infinity, which JSON cannot hold", "value")
    elif not isinstance(value, str | int | float | bool):
        raise InputProblem(f"value of type {type(value).__name__} is not JSON-serialisable", "value")


def check_value(value: Any, limits: Limits = DEFAULT_LIMITS) -> str:
    if value is None:
        raise InputProblem("value must not be null; use forget() to remove a memory", "value")
    if isinstance(value, str) and value.strip() == "":
        raise InputProblem("value must not be empty", "value")
    _depth(value, limits.max_json_depth)
    encoded = canonical_json(value)
    size = len(encoded.encode("utf-8"))
    if size > limits.max_value_bytes:
        raise InputProblem(f"value is {size} bytes as JSON; the limit is {limits.max_value_bytes}", "value")
    return encoded


# --- numbers ---------------------------------------------------------------------------------------------
# Every number an operation accepts is finite and inside a range in which arithmetic on it stays finite:
# a time plus the longest TTL is still a finite, representable Unix time, so nothing non-finite (nor
# anything that overflows to infinity later, like `now=1e308, ttl_seconds=1e308`) reaches storage.

MIN_UNIX_SECONDS = -62_135_596_800.0  # 0001-01-01T00:00:00Z (the datetime range)
MAX_UNIX_SECONDS = 253_402_300_799.0  # 9999-12-31T23:59:59Z
MAX_TTL_SECONDS = 1000 * 366 * 86_400.0  # a thousand years
MAX_SEQ = 2**63 - 1  # audit sequence numbers are signed 64-bit integers


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_number(name: str, value: Any, lo: float, hi: float) -> float:
    """`value` as a float if it is a finite number in [lo, hi].

    TypeError for a non-number (bools included); InputProblem for NaN, ±infinity and numbers out of
    range. Integers too large for a float are compared exactly, never converted first (no OverflowError).
    """
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputProblem(f"{name} must be a finite number, got {value}", name)
    if not lo <= value <= hi:
        shown = f"{value:.6g}" if isinstance(value, float) else (str(value) if abs(value) < 10**20 else "a huge integer")
        raise InputProblem(f"{name} must be between {lo:.12g} and {hi:.12g}, got {shown}", name)
    out = float(value)
    # A subnormal float (|x| < 2.2e-308) is 0 for every purpose here, and PostgreSQL refuses it ("value out
    # of range: underflow"): flushed to 0 so no store ever sees one.
    return 0.0 if out != 0.0 and abs(out) < sys.float_info.min else out


def finite_time(name: str, value: Any) -> float:
    """A Unix time in seconds (`now`, `event_at`, `since`...): finite, within years 1-9999."""
    return check_number(name, value, MIN_UNIX_SECONDS, MAX_UNIX_SECONDS)


def optional_time(name: str, value: Any) -> float | None:
    return None if value is None else finite_time(name, value)


def check_ttl(name: str, value: Any) -> float | None:
    """A time to live in seconds: None, or finite, > 0 and at most MAX_TTL_SECONDS."""
    if value is None:
        return None
    seconds = check_number(name, value, -math.inf, MAX_TTL_SECONDS)
    if seconds <= 0:
        raise InputProblem(f"{name} must be positive", name)
    return seconds


UNIT_FLOOR = 1e-100  # importance/confidence below this are 0: their product never underflows


def check_unit(name: str, value: Any) -> float | None:
    """importance / confidence: None, or a number in [0, 1]; below UNIT_FLOOR it is 0.

    The store ranks by importance × confidence: two tiny factors (1e-200 × 1e-200) underflow, which
    PostgreSQL refuses ("value out of range: underflow") — a 5xx for a valid-looking write. Values that small
    mean nothing, so they are 0."""
    if value is None:
        return None
    out = check_number(name, value, 0.0, 1.0)
    return 0.0 if out < UNIT_FLOOR else out


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """An integer argument (limits, counts, sequence numbers) in [lo, hi]; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InputProblem(f"{name} must be between {lo} and {hi}", name)
    return value


def typed_error(exc: TypeError | InputProblem) -> InvalidArgument | ValidationError:
    """The usermem error for a check's exception: InputProblem → ValidationError (naming the field),
    TypeError → InvalidArgument. Both answer 422 `invalid_input` over HTTP."""
    if isinstance(exc, InputProblem):
        return ValidationError(str(exc), field=exc.field)
    return InvalidArgument(str(exc))


def time_arg(name: str, value: Any) -> float:
    """`finite_time` for engine entry points: raises ValidationError / InvalidArgument (→ 422 invalid_input)."""
    try:
        return finite_time(name, value)
    except (TypeError, InputProblem) as exc:
        raise typed_error(exc) from None


def optional_time_arg(name: str, value: Any) -> float | None:
    return None if value is None else time_arg(name, value)


def time_range_arg(since: Any, until: Any, names: tuple[str, str] = ("since", "until")) -> tuple[float | None, float | None]:
    """Both bounds of a [since, until) window checked as times (either may be None)."""
    return optional_time_arg(names[0], since), optional_time_arg(names[1], until)


def number_arg(name: str, value: Any, lo: float, hi: float) -> float:
    """`check_number` for engine entry points: raises ValidationError / InvalidArgument."""
    try:
        return check_number(name, value, lo, hi)
    except (TypeError, InputProblem) as exc:
        raise typed_error(exc) from None


def value_arg(value: Any, limits: Limits = DEFAULT_LIMITS) -> str:
    """`check_value` for entry points that hold a value outside a write (a signal's or a pushback's
    hypothesis value, kept in a document): the same rules as a written value (not null or empty, finite
    numbers, no lone surrogates, at most `max_json_depth` deep and `max_value_bytes` as JSON). Raises
    ValidationError (field `value`) / InvalidArgument; returns the canonical JSON."""
    try:
        return check_value(value, limits)
    except (TypeError, InputProblem) as exc:
        raise typed_error(exc) from None


def int_arg(name: str, value: Any, lo: int, hi: int) -> int:
    """`check_int` for engine entry points: raises ValidationError / InvalidArgument."""
    try:
        return check_int(name, value, lo, hi)
    except (TypeError, InputProblem) as exc:
        raise typed_error(exc) from None


def check_write(kind: Any, key: Any, value: Any, source: Any, limits: Limits = DEFAULT_LIMITS) -> Checked:
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, got {type(kind).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    check_key(key)
    try:
        parsed_kind = parse_kind(kind)
    except ValueError:
        raise InputProblem(f"unknown kind {shown(kind)}; expected one of {[k.value for k in Kind]} (or 'profile')",
                           "kind") from None
    try:
        parsed_source = SOURCE_BY_VALUE.get(source) or Source(source)
    except ValueError:
        raise InputProblem(f"unknown source {shown(source)}; expected one of {[s.value for s in Source]}",
                           "source") from None
    return Checked(parsed_kind, parsed_source, check_value(value, limits))
