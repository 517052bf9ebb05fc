"""PII detection and output redaction — the public, stable entry point.

    >>> from usermem.privacy import detect, redact
    >>> redact("我的手机号是13800138000")
    '我的手机号是[已脱敏]'
    >>> [f.kind.value for f in detect("card 4111 1111 1111 1111, mail a@b.io")]
    ['bank_card', 'email']

The detectors are deterministic (patterns + validation: GB 11643 check digits and birth dates,
Luhn and issuer prefixes by length, mobile prefixes, order-number context) and shared with the
write guard, so whatever `redact` hides is also what a write refuses to store. Filter model output
with `redact`, or mount `usermem.interfaces.redact_middleware.RedactMiddleware` in a gateway.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from usermem.errors import InvalidArgument
from usermem.policy import pii
from usermem.policy.pii import DEFAULT_PLACEHOLDER, Finding, PIIKind

__all__ = ["DEFAULT_PLACEHOLDER", "Finding", "PIIKind", "contains", "detect", "redact", "redact_json", "summarize"]

Kinds = Iterable[PIIKind | str] | None


def _kinds(kinds: Kinds) -> list[PIIKind] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        return [PIIKind(k) for k in kinds]
    except ValueError:
        raise InvalidArgument(f"unknown PII kind in {list(kinds)!r}; known: {[k.value for k in PIIKind]}") from None


def detect(text: str, kinds: Kinds = None) -> list[Finding]:
    """Every PII span in `text` (non-overlapping, in order): Finding(kind, start, end)."""
    if not isinstance(text, str):
        raise InvalidArgument(f"detect() needs a str, got {type(text).__name__}")
    return pii.detect(text, _kinds(kinds))


def redact(text: str, placeholder: str = DEFAULT_PLACEHOLDER, kinds: Kinds = None) -> str:
    """`text` with every finding replaced by `placeholder` (default "[已脱敏]", e.g. "[REDACTED]")."""
    if not isinstance(text, str):
        raise InvalidArgument(f"redact() needs a str, got {type(text).__name__}")
    if not isinstance(placeholder, str):
        raise InvalidArgument(f"placeholder must be a str, got {type(placeholder).__name__}")
    return pii.redact(text, placeholder, _kinds(kinds))


def contains(text: str, kinds: Kinds = None) -> bool:
    return bool(detect(text, kinds))


def redact_json(value: Any, placeholder: str = DEFAULT_PLACEHOLDER, kinds: Kinds = None) -> Any:
    """A copy of a JSON value with PII redacted in every string, object key and integer.

    An integer that is itself PII (a phone number stored as a number) becomes the placeholder string.
    """
    wanted = _kinds(kinds)
    if isinstance(value, str):
        return pii.redact(value, placeholder, wanted)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return placeholder if pii.detect(str(value), wanted) else value
    if isinstance(value, dict):
        return {pii.redact(str(k), placeholder, wanted): redact_json(v, placeholder, wanted) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, placeholder, wanted) for v in value]
    return value


def summarize(text: str, kinds: Kinds = None) -> dict[str, int]:
    """Counts per kind — what a log line may say about a text without repeating it."""
    out: dict[str, int] = {}
    for f in detect(text, kinds):
        out[f.kind.value] = out.get(f.kind.value, 0) + 1
    return out
