"""Hybrid logical clock and the federation decisions built on it (issue 17). Pure, no I/O.

A hybrid logical clock (Kulkarni et al., 2014) is a pair (wall milliseconds, counter): it stays close to
the wall clock, never goes backwards, and a change made after another one was *seen* always gets a
higher value, whatever the machines' clocks say. Every version written while federation is on carries
a stamp (clock, client id, origin domain, event id); conflicts are decided by comparing stamps, in the
same way on every instance, so instances that applied the same changes in any order hold the same
current value:

* the higher clock wins;
* on equal clocks the higher client id wins (the issue: "ties by client id"), then the origin domain,
  then the event id — a total order, so two instances never decide a tie differently.

The other decisions of applying a remote change live here too: whether a field may be applied at all
(by its contract's `sharing` and the user's consent), and whether overriding a local value deserves a
notice to the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from usermem.policy.contracts import Sharing

_COUNTER_MAX = 999_999


@dataclass(frozen=True, order=True, slots=True)
class Hlc:
    wall_ms: int
    counter: int = 0

    def text(self) -> str:
        """Fixed-width text that sorts as the clock does (stored, compared as strings)."""
        return f"{self.wall_ms:015d}.{self.counter:06d}"

    @classmethod
    def parse(cls, text: str) -> Hlc:
        try:
            wall, counter = text.split(".")
            out = cls(int(wall), int(counter))
        except (AttributeError, ValueError):
            raise ValueError(f"not a clock value: {text!r:.60}") from None
        if out.wall_ms < 0 or not 0 <= out.counter <= _COUNTER_MAX or len(wall) != 15 or len(counter) != 6:
            raise ValueError(f"not a clock value: {text!r:.60}")
        return out

    @classmethod
    def from_seconds(cls, seconds: float) -> Hlc:
        """The clock value of a moment with no stamp (versions written before federation was on)."""
        return cls(max(0, int(seconds * 1000)), 0)


ZERO = Hlc(0, 0)


def _next(wall: int, counter: int) -> Hlc:
    if counter > _COUNTER_MAX:  # a million events in one millisecond: borrow the next millisecond
        return Hlc(wall + 1, 0)
    return Hlc(wall, counter)


def tick(last: Hlc, now_ms: int) -> Hlc:
    """The clock of a local event at wall time `now_ms`, after `last`."""
    if now_ms > last.wall_ms:
        return Hlc(now_ms, 0)
    return _next(last.wall_ms, last.counter + 1)


def observe(last: Hlc, remote: Hlc, now_ms: int) -> Hlc:
    """The clock after receiving an event stamped `remote` at wall time `now_ms` (never below either)."""
    wall = max(last.wall_ms, remote.wall_ms, now_ms)
    if wall == last.wall_ms == remote.wall_ms:
        return _next(wall, max(last.counter, remote.counter) + 1)
    if wall == last.wall_ms:
        return _next(wall, last.counter + 1)
    if wall == remote.wall_ms:
        return _next(wall, remote.counter + 1)
    return Hlc(wall, 0)


def too_far_ahead(remote: Hlc, now_ms: int, max_drift_ms: int) -> bool:
    """A remote clock more than `max_drift_ms` ahead of this instance's wall time `now_ms` is refused: accepted,
    it would pull every clock that sees it (and every later change) that far into the future, and its change
    would win every conflict until the wall clocks caught up."""
    return remote.wall_ms - now_ms > max_drift_ms


@dataclass(frozen=True, order=True, slots=True)
class Order:
    """The total order of versions: clock, then client id, then origin domain, then event id."""

    hlc: str
    client_id: str
    origin: str
    event_id: str


def wins(incoming: Order, current: Order | None) -> bool:
    """Whether a remote version replaces the current one (identical on every instance)."""
    return current is None or incoming > current


class Skip(StrEnum):
    """Why a remote record is not applied."""

    OWN_DOMAIN = "own_domain"  # written by this domain: the store already has it
    PRIVATE = "private"  # the field never leaves the domain that collected it
    NO_CONSENT = "no_consent"  # explicit_opt_in without the user's consent for the source domain
    NO_VALUE = "no_value"  # the event carried no value (L2/L3, private, or nats_values = "none")
    UNKNOWN_FIELD = "unknown_field"  # no contract here and unknown fields are rejected
    SESSION_BOUND = "session_bound"  # context memories belong to a session of the instance that has it
    REFUSED = "refused"  # this instance's own validation and guards refuse it (forbidden key, PII, limits...)


def admit(*, sharing: Sharing | None, consented: bool, has_value: bool, retracted: bool,
          session_bound: bool) -> Skip | None:
    """May a remote record be applied here? None when it may, else the reason it may not.

    `sharing` is the field's contract here (None: no contract and unknown fields are rejected);
    `consented`: the user opted the field in for the source domain.
    """
    if sharing is None:
        return Skip.UNKNOWN_FIELD
    if sharing is Sharing.PRIVATE:
        return Skip.PRIVATE
    if sharing is Sharing.EXPLICIT_OPT_IN and not consented:
        return Skip.NO_CONSENT
    if session_bound:
        return Skip.SESSION_BOUND
    if not has_value and not retracted:
        return Skip.NO_VALUE
    return None


def deserves_notice(*, head_origin: str, own_domain: str, head_written_at: float, now: float,
                    window: float) -> bool:
    """A remote change that replaces a value this domain wrote within `window` seconds is worth telling
    the user about ("changed on another device"): they may have just set it here."""
    return head_origin == own_domain and 0 <= now - head_written_at <= window
