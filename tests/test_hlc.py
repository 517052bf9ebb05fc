"""The hybrid logical clock and the federation decisions of policy/hlc.py (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from usermem.policy.contracts import Sharing
from usermem.policy.hlc import (
    ZERO,
    Hlc,
    Order,
    Skip,
    admit,
    deserves_notice,
    observe,
    tick,
    too_far_ahead,
    wins,
)


def test_tick_follows_the_wall_clock_and_never_goes_back() -> None:
    a = tick(ZERO, 1_000)
    assert a == Hlc(1_000, 0)
    b = tick(a, 900)  # the wall clock stepped back: the counter moves on
    assert b == Hlc(1_000, 1) and b > a
    assert tick(b, 2_000) == Hlc(2_000, 0)


def test_observe_moves_past_a_remote_clock_ahead_of_ours() -> None:
    ours = Hlc(1_000, 3)
    remote = Hlc(5_000, 7)  # another machine's clock runs ahead
    after = observe(ours, remote, 1_001)
    assert after == Hlc(5_000, 8) and after > remote
    assert tick(after, 1_002) > remote  # a later local change is ordered after what was seen


def test_text_sorts_like_the_clock_and_round_trips() -> None:
    values = [Hlc(0, 0), Hlc(1, 999_999), Hlc(2, 0), Hlc(253_402_300_799_000, 5)]
    assert sorted(v.text() for v in values) == [v.text() for v in sorted(values)]
    for v in values:
        assert Hlc.parse(v.text()) == v
    for bad in ("", "1.2", "x" * 15 + ".000000", "000000000000001.0000001", None):
        with pytest.raises(ValueError):
            Hlc.parse(bad)  # type: ignore[arg-type]


def test_a_full_counter_borrows_the_next_millisecond() -> None:
    assert tick(Hlc(10, 999_999), 5) == Hlc(11, 0)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 50)),
                min_size=1, max_size=50))
def test_the_clock_is_strictly_monotonic(steps: list[tuple[bool, int, int, int]]) -> None:
    clock = ZERO
    for local, now, remote_wall, remote_counter in steps:
        remote = Hlc(remote_wall, remote_counter)
        nxt = tick(clock, now) if local else observe(clock, remote, now)
        assert nxt > clock
        if not local:
            assert nxt > remote
        clock = nxt


def test_ties_are_broken_by_client_id_then_origin_then_event() -> None:
    same = Hlc(1_000, 0).text()
    app, mini = Order(same, "app", "d1", "e1"), Order(same, "miniapp", "d2", "e2")
    assert wins(mini, app) and not wins(app, mini)  # "miniapp" > "app"
    assert wins(Order(same, "app", "d2", "e0"), app)  # same client: the origin domain decides
    assert wins(app, None)
    assert not wins(app, app)  # the same version never replaces itself


def test_admission_by_contract_and_consent() -> None:
    ok = {"has_value": True, "retracted": False, "session_bound": False}
    assert admit(sharing=Sharing.SHARED, consented=False, **ok) is None
    assert admit(sharing=Sharing.PRIVATE, consented=True, **ok) is Skip.PRIVATE
    assert admit(sharing=Sharing.EXPLICIT_OPT_IN, consented=False, **ok) is Skip.NO_CONSENT
    assert admit(sharing=Sharing.EXPLICIT_OPT_IN, consented=True, **ok) is None
    assert admit(sharing=None, consented=True, **ok) is Skip.UNKNOWN_FIELD
    assert admit(sharing=Sharing.SHARED, consented=False, has_value=False, retracted=False,
                 session_bound=False) is Skip.NO_VALUE
    assert admit(sharing=Sharing.SHARED, consented=False, has_value=False, retracted=True,
                 session_bound=False) is None  # a withdrawal carries no value
    assert admit(sharing=Sharing.SHARED, consented=False, has_value=True, retracted=False,
                 session_bound=True) is Skip.SESSION_BOUND


def test_a_notice_only_for_a_recent_value_of_this_domain() -> None:
    assert deserves_notice(head_origin="app", own_domain="app", head_written_at=100.0, now=350.0, window=300.0)
    assert not deserves_notice(head_origin="app", own_domain="app", head_written_at=100.0, now=401.0, window=300.0)
    assert not deserves_notice(head_origin="mini", own_domain="app", head_written_at=100.0, now=101.0, window=300.0)


def test_a_remote_clock_too_far_ahead() -> None:
    now = 1_790_000_000_000
    assert not too_far_ahead(Hlc(now + 300_000, 5), now, 300_000)  # exactly the drift: accepted
    assert too_far_ahead(Hlc(now + 300_001, 0), now, 300_000)
    assert not too_far_ahead(Hlc(now - 86_400_000, 0), now, 300_000)  # behind: always accepted
