"""Input limits and shape checks for writes. Explicit numbers, clear messages, no I/O."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from usermem.model import Kind, Source, parse_kind

KEY_PATTERN = re.compile(r"^[a-z0-9_.\-]{1,64}$")
ID_PATTERN = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")


@dataclass(frozen=True, slots=True)
class Limits:
    max_value_bytes: int = 16 * 1024
    max_batch: int = 500
    max_json_depth: int = 16
    max_messages: int = 500
    max_message_chars: int = 20_000


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


def check_identifier(name: str, value: Any) -> str:
    """Tenant, user and session ids: non-empty, ≤128 characters, no control characters."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not ID_PATTERN.match(value) or value.strip() == "":
        raise InputProblem(f"{name} must be 1-128 printable characters, got {value!r:.80}", name)
    if name == "tenant" and is_reserved_tenant(value):
        raise InputProblem(f"tenant {value!r} is reserved for usermem's own records", name)
    return value


def is_reserved_tenant(tenant: str) -> bool:
    """`*` and names starting with `_` hold usermem's own index documents (sessions, grants, API keys)."""
    return tenant == "*" or tenant.startswith("_")


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    if not KEY_PATTERN.match(key):
        raise InputProblem(f"key must match [a-z0-9_.-]{{1,64}}, got {key!r:.80}", "key")
    return key


def canonical_json(value: Any) -> str:
    """Stable JSON used for storage and for equality (NOOP) checks."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _depth(value: Any, limit: int, level: int = 0) -> None:
    if level > limit:
        raise InputProblem(f"value nests deeper than {limit} levels", "value")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputProblem("value objects must have string keys", "value")
            _depth(v, limit, level + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _depth(v, limit, level + 1)
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


def check_unit(name: str, value: Any) -> float | None:
    """importance / confidence: None, or a number in [0, 1]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (0.0 <= float(value) <= 1.0) or math.isnan(value):
        raise InputProblem(f"{name} must be between 0 and 1, got {value}", name)
    return float(value)


def check_write(kind: Any, key: Any, value: Any, source: Any, limits: Limits = DEFAULT_LIMITS) -> Checked:
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, got {type(kind).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    check_key(key)
    try:
        parsed_kind = parse_kind(kind)
    except ValueError:
        raise InputProblem(f"unknown kind {kind!r}; expected one of {[k.value for k in Kind]} (or 'profile')",
                           "kind") from None
    try:
        parsed_source = Source(source)
    except ValueError:
        raise InputProblem(f"unknown source {source!r}; expected one of {[s.value for s in Source]}",
                           "source") from None
    return Checked(parsed_kind, parsed_source, check_value(value, limits))
