"""Warnings about what other parties send are throttled (one per minute and kind, with the count left out);
the counters keep the exact numbers. A hostile publisher cannot flood the logs."""

from __future__ import annotations

import logging

import pytest

from usermem.events.federation import Consumer, LocalHub
from usermem.events.throttle import LogThrottle


def test_throttle_lets_one_through_per_interval_and_counts_the_rest() -> None:
    now = [100.0]
    t = LogThrottle(interval=60.0, clock=lambda: now[0])
    assert t.allow("bad") == 0
    assert [t.allow("bad") for _ in range(5)] == [None] * 5
    assert t.allow("other") == 0  # kinds are independent
    now[0] += 59.9
    assert t.allow("bad") is None
    now[0] += 0.2
    assert t.allow("bad") == 6  # the six left out since the last warning
    assert t.allow("bad") is None


def test_a_flood_of_malformed_events_logs_one_warning_and_counts_all(caplog: pytest.LogCaptureFixture) -> None:
    hub = LocalHub()
    transport = hub.transport("mini")
    applied: list[object] = []
    consumer = Consumer(transport, applied.append)
    for i in range(200):
        transport.inbox.append(b"not json %d" % i)
    with caplog.at_level(logging.WARNING, logger="usermem.federation"):
        consumer.catch_up(timeout=5.0, quiet=0.0)
    assert consumer.counts["bad_payloads"] == 200 and applied == []
    warnings = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warnings) == 1
