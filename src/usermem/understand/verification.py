"""Reflexive verification (seed 004 §5): repeated pushback on one field becomes a hypothesis to verify.

- Each pushback ("太长了", "too long again", or `record_pushback(...)` for any field) is counted per
  user and field inside a sliding window (default: 3 within 7 days).
- At the threshold a hypothesis is created: source `inferred`, a confidence that grows with the
  evidence (0.5 + 0.04 per pushback, at most 0.9: three pushbacks give 0.62, as in the seed), and a
  question in Chinese and English. It lives in the documents table, not among the memories, so it
  can never be injected into a prompt as a fact.
- Accepting writes the value as a `user_confirmed` preference through the normal write pipeline;
  rejecting discards it. Both reset the counter and are audited (never with the value).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from usermem.model import DAY
from usermem.policy.contracts import FieldContract
from usermem.policy.wording import verification_questions

PUSHBACK_NS = "pushback"
VERIFY_NS = "verifications"
DEFAULT_THRESHOLD = 3
DEFAULT_WINDOW = 7 * DAY


@dataclass(frozen=True, slots=True)
class Pushback:
    key: str
    value: Any | None  # the value the pushback points to, when it says one ("too long" -> concise)


# (pattern, field, implied value). Complaints, not instructions: "以后简短点" is extraction's business.
_PUSHBACK: tuple[tuple[re.Pattern[str], str, Any], ...] = tuple(
    (re.compile(rx, re.IGNORECASE), key, value)
    for rx, key, value in (
        (r"太长|又长|太啰嗦|好啰嗦|太多字|看不完|说重点|字太多|too long|too wordy|so long|tl;?dr|too much text|"
         r"get to the point|way too verbose|too verbose", "reply_length", "concise"),
        (r"太短|太简单了|不够详细|说详细点|太简略|too short|too brief|not enough detail|more detail please|"
         r"that's too thin", "reply_length", "detailed"),
        (r"不要表格|别用表格|又是表格|no tables|stop using tables", "reply_format", "prose"),
        (r"不要列表|别分点|又是列表|no bullet|stop using bullet", "reply_format", "prose"),
    )
)


def detect_pushback(text: str) -> list[Pushback]:
    """Pushback on a known field in one user message (at most one per field)."""
    seen: dict[str, Pushback] = {}
    for pattern, key, value in _PUSHBACK:
        if key not in seen and pattern.search(text):
            seen[key] = Pushback(key, value)
    return list(seen.values())


def confidence_for(count: int) -> float:
    return round(min(0.9, 0.5 + 0.04 * count), 2)


def questions(key: str, value: Any, contract: FieldContract | None = None) -> dict[str, str]:
    """The verification question in Chinese and English, naming the field by its contract's label."""
    return verification_questions(key, value, contract)


def pushback_doc_key(user_id: str, key: str) -> str:
    return f"{user_id}|{key}"


def window_events(events: Sequence[float], now: float, window: float) -> list[float]:
    return sorted(t for t in events if now - window <= t <= now)
