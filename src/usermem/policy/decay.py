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
_LN2 = math.log(2)
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
    return weight_of(d.base, d.half_life_seconds, d.created_at, d.last_confirmed_at, d.last_used_at, now)


def weight_of(base: float, half_life_seconds: float, created_at: float, last_confirmed_at: float | None,
              last_used_at: float | None, now: float) -> float:
    """weight() without the record object: the recall hot path calls this once per live memory."""
    lam = _LN2 / half_life_seconds
    anchor = created_at if last_confirmed_at is None or last_confirmed_at <= created_at else last_confirmed_at
    age = now - anchor
    w = math.exp(-lam * age) if age > 0 else 1.0
    if last_used_at is not None and last_used_at > anchor:
        since_use = now - last_used_at
        boosted = USE_BOOST * (math.exp(-lam * since_use) if since_use > 0 else 1.0)
        if boosted > w:
            w = boosted
    return base * w


def crossing_time(base: float, threshold: float, half_life_seconds: float) -> float:
    """Seconds after the anchor at which base · decay falls to `threshold` (inf if it never does)."""
    if threshold <= 0 or base <= threshold:
        return 0.0 if base <= threshold else math.inf
    return math.log(base / threshold) / rate(half_life_seconds)


def time_constant(half_life_seconds: float) -> float:
    """1/λ: the age at which decay alone leaves e^−1 ≈ 37 % of the base weight."""
    return half_life_seconds / _LN2


def half_life_for(time_constant_seconds: float) -> float:
    """The half-life whose decay reaches e^−1 after `time_constant_seconds` (the seed states λ that way)."""
    return time_constant_seconds * _LN2


def crossing_at(d: DecayInput, threshold: float) -> float:
    """Absolute time at which weight(d, t) first falls below `threshold` with no further use or confirmation.

    weight is the max of the confirmation term and the (optional) use term, each a decaying
    exponential, so it falls below the threshold when the later of the two does. Returns -inf
    when the weight is already below the threshold at the anchor, inf when it never falls below
    (threshold ≤ 0).
    """
    if threshold <= 0:
        return math.inf
    anchor = d.created_at
    if d.last_confirmed_at is not None and d.last_confirmed_at > anchor:
        anchor = d.last_confirmed_at
    starts = [(anchor, d.base)]
    if d.last_used_at is not None and d.last_used_at > anchor:
        starts.append((d.last_used_at, USE_BOOST * d.base))
    lam = rate(d.half_life_seconds)
    best = -math.inf
    for start, level in starts:
        if level > threshold:
            best = max(best, start + math.log(level / threshold) / lam)
    return best


# -- ranking in the index (issue 19) ------------------------------------------------------------------------
#
# For one time constant τ = half-life / ln 2 and `now` not before any of a row's times,
#   importance · weight_of(confidence, …, now) = importance · confidence · e^((a* − now) / τ)
# with a* = max(created, confirmed, used + τ·ln USE_BOOST). So the order of a kind's rows by score is the
# order of the time-invariant key  rank_time = a* + τ · ln(importance · confidence),  which a database can
# keep in an expression index (store/sql.py); e^((rank_time − now)/τ) is the score then. When a time lies
# after `now` (clock skew, a `now` in the past), weight_of clamps the age at zero, so the true score is
# only lower: rank_bound is an upper bound in every case, and an exact top-k can stop reading rows once
# the k-th best score is above the bound of every row not yet read (engine/recall.py).

USE_SHIFT = math.log(USE_BOOST)  # ln 0.95 < 0: a use counts as a confirmation τ·|ln 0.95| seconds earlier
RANK_FLOOR = 1e-300  # importance · confidence below this ranks as this (the score is 0 or denormal then)


def rank_time(confidence: float, importance: float, tau: float, created_at: float,
              last_confirmed_at: float | None, last_used_at: float | None) -> float:
    """The time-invariant ranking key of a row whose kind has time constant `tau` (see above)."""
    a = created_at
    if last_confirmed_at is not None and last_confirmed_at > a:
        a = last_confirmed_at
    if last_used_at is not None and last_used_at + USE_SHIFT * tau > a:
        a = last_used_at + USE_SHIFT * tau
    return a + math.log(max(importance * confidence, RANK_FLOOR)) * tau


def rank_bound(key: float, tau: float, now: float) -> float:
    """An upper bound of importance × weight at `now` for a row whose rank_time is `key` (+inf past e^700)."""
    x = (key - now) / tau
    return math.inf if x > 700.0 else math.exp(x)
