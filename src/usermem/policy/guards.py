"""Write guards: forbidden keys and sensitive values. Deterministic code decides, never a model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from usermem.model import Reason
from usermem.policy.contracts import ContractSet, FieldContract, is_forbidden_key
from usermem.policy.pii import ALL_KINDS, PIIKind, detect
from usermem.policy.validate import KEY_PATTERN

# Kinds that may never be stored under any field. E-mail and mobile numbers are allowed where a
# field contract says so (e.g. `email`, `phone`); everywhere else they are rejected as well.
ALWAYS_BLOCKED: frozenset[PIIKind] = frozenset({PIIKind.CN_ID, PIIKind.BANK_CARD, PIIKind.PASSWORD, PIIKind.API_KEY})


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    reason: Reason
    detail: str  # safe to log: names what was found, never the value


def _strings(value: Any, contracts: ContractSet) -> Iterator[tuple[str, str | None]]:
    """Every string (and integer, as text) inside a JSON value, with the object key it sits under."""
    stack: list[tuple[Any, str | None]] = [(value, None)]
    while stack:
        item, under = stack.pop()
        if isinstance(item, str):
            yield item, under
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            yield str(item), under
        elif isinstance(item, float) and item.is_integer() and abs(item) < 1e20:
            yield str(int(item)), under  # 13800138000.0 is a phone number too
        elif isinstance(item, dict):
            for k, v in item.items():
                yield str(k), "__key__"
                stack.append((v, str(k)))
        elif isinstance(item, list | tuple):
            stack.extend((v, under) for v in item)


def check_guards(key: str, value: Any, contract: FieldContract | None, contracts: ContractSet) -> GuardVerdict | None:
    """None when the write may proceed; otherwise the reason it must be rejected."""
    if contracts.is_forbidden(key):
        return GuardVerdict(Reason.FORBIDDEN_KEY, f"key {key!r} is on the forbidden list")
    allowed = contract.allowed_pii if contract else frozenset()
    blocked = ALL_KINDS - (allowed - ALWAYS_BLOCKED)
    if _key_has_pii(key):
        return GuardVerdict(Reason.SENSITIVE_VALUE, "the key itself contains personal data")
    for text, under in _strings(value, contracts):
        if under == "__key__" and is_forbidden_key(text, contracts.forbidden_keys):
            return GuardVerdict(Reason.SENSITIVE_VALUE, "value contains a forbidden field name")
        findings = detect(text, blocked)
        if findings:
            kinds = sorted({f.kind.value for f in findings})
            return GuardVerdict(Reason.SENSITIVE_VALUE, f"value contains {', '.join(kinds)}")
    return None


@lru_cache(maxsize=16_384)
def _key_has_pii(key: str) -> bool:
    """detect(key), remembered: a pure function of the key, and a tenant writes the same few keys over and
    over (keys are at most 64 characters: the cache stays small). Values are always scanned afresh."""
    return bool(detect(key))


def loggable_key(key: object) -> str | None:
    """The key if it is safe to write to the audit log (a valid key without personal data), else None.

    An invalid key is never logged, not even partly: it may be a value sent in the wrong field (a name,
    an obfuscated phone number) and the audit log outlives erasure.
    """
    if isinstance(key, str) and KEY_PATTERN.match(key) and not detect(key):
        return key
    return None
