"""Weights over time: exponential decay from the last confirmation, lifted by recent use.

weight(now) = base · max(e^(−λ·(now − anchor)), USE_BOOST · e^(−λ·(now − last_used)))
where anchor is the latest confirmation (or creation). Properties (tested):
  * weight never rises with time alone;
  * a use or a confirmation never lowers it;
  * a confirmation restores it to base, a use to USE_BOOST · base (the seed's 0.95).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

USE_BOOST = 0.95
CONFIRM_THRESHOLD = 0.55
DROP_THRESHOLD = 0.3


@dataclass(frozen=True, slots=True)
class DecayInput:
    base: float
    half_life_seconds: float
    created_at: float
    last_confirmed_at: float | None = None
    last_used_at: float | None = None


def rate(half_life_seconds: float) -> float:
    """λ per second for a half-life."""
    return math.log(2) / half_life_seconds


def recency(age_seconds: float, half_life_seconds: float) -> float:
    """0.5 ** (age / half-life); ages below zero (clock skew) count as zero."""
    return math.exp(-rate(half_life_seconds) * max(0.0, age_seconds))


def weight(d: DecayInput, now: float) -> float:
    anchor = d.created_at
    if d.last_confirmed_at is not None and d.last_confirmed_at > anchor:
        anchor = d.last_confirmed_at
    w = recency(now - anchor, d.half_life_seconds)
    if d.last_used_at is not None and d.last_used_at > anchor:
        w = max(w, USE_BOOST * recency(now - d.last_used_at, d.half_life_seconds))
    return d.base * w


def crossing_time(base: float, threshold: float, half_life_seconds: float) -> float:
    """Seconds after the anchor at which base · decay falls to `threshold` (inf if it never does)."""
    if threshold <= 0 or base <= threshold:
        return 0.0 if base <= threshold else math.inf
    return math.log(base / threshold) / rate(half_life_seconds)
