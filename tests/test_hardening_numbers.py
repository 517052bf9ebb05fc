"""Issue 12 items 1 and 3: non-finite and out-of-range numbers are refused with a typed error before anything is
written, on every backend; a session opened with `now: Infinity` cannot poison the shared idle index."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from usermem import Memory, Op, Reason
from usermem.config import load_settings
from usermem.errors import InvalidArgument, ValidationError
from usermem.policy.validate import (
    MAX_TTL_SECONDS,
    MAX_UNIX_SECONDS,
    MIN_UNIX_SECONDS,
    InputProblem,
    check_number,
    check_ttl,
    finite_time,
)

T0 = 1_790_000_000.0
TYPED = (ValidationError, InvalidArgument)
NON_FINITE = [math.inf, -math.inf, math.nan]
HUGE = [1e308, -1e308, 10**400, 2.6e11]


def _lean() -> Memory:
    return Memory(settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))


def _nothing_stored(m: Memory, user: str) -> None:
    assert m.export("acme", user, now=T0)["fields"] == {}
    assert m.history("acme", user, "city") == []


def _refused(call) -> None:
    """A call is refused when it raises a typed error or answers REJECT invalid_input."""
    try:
        r = call()
    except TYPED:
        return
    assert r.op is Op.REJECT and r.reason is Reason.INVALID_INPUT, r


# --- the policy helpers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("v", [*NON_FINITE, *HUGE])
def test_finite_time_refuses_non_finite_and_out_of_range(v):
    with pytest.raises(InputProblem):
        finite_time("now", v)


@pytest.mark.parametrize("v", [True, "1", None, [1]])
def test_finite_time_refuses_non_numbers_as_type_errors(v):
    with pytest.raises(TypeError):
        finite_time("now", v)


def test_bounds_keep_arithmetic_finite():
    assert math.isfinite(MAX_UNIX_SECONDS + MAX_TTL_SECONDS)
    assert finite_time("now", MIN_UNIX_SECONDS) == MIN_UNIX_SECONDS
    assert finite_time("now", 0) == 0.0 and finite_time("now", T0) == T0
    assert check_ttl("ttl", MAX_TTL_SECONDS) == MAX_TTL_SECONDS
    with pytest.raises(InputProblem):
        check_ttl("ttl", 0)
    with pytest.raises(InputProblem):
        check_ttl("ttl", 1e308)
    with pytest.raises(InputProblem):
        check_number("n", 10**400, 0, 1)  # compared exactly: no OverflowError from float()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**400), 10**400)))
def test_property_finite_time_returns_a_finite_in_range_float_or_refuses(v):
    try:
        out = finite_time("t", v)
    except InputProblem:
        return
    assert math.isfinite(out) and MIN_UNIX_SECONDS <= out <= MAX_UNIX_SECONDS


# --- the library, on every backend -----------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["now", "event_at", "ttl_seconds", "importance", "confidence"])
@pytest.mark.parametrize("bad", [*NON_FINITE, 1e308, 10**400], ids=["inf", "-inf", "nan", "1e308", "10**400"])
def test_write_refuses_non_finite_numbers_before_writing(make_memory, field, bad):
    m = make_memory()
    _refused(lambda: m.write("acme", "u", "fact", "city", "杭州", **{field: bad}))
    _nothing_stored(m, "u")
    # the user is not poisoned: later reads and writes still work
    assert m.write("acme", "u", "fact", "city", "杭州", now=T0).op is Op.ADD
    assert [r.key for r in m.recall("acme", "u", now=T0)] == ["city"]
    json.dumps(m.export("acme", "u", now=T0), allow_nan=False)


def test_huge_now_plus_huge_ttl_cannot_overflow_to_infinity(make_memory):
    m = make_memory()
    _refused(lambda: m.write("acme", "u", "fact", "city", "杭州", now=1e308, ttl_seconds=1e308))
    _refused(lambda: m.write("acme", "u", "fact", "city", "杭州", now=T0, ttl_seconds=1e308))
    _nothing_stored(m, "u")
    r = m.write("acme", "u", "fact", "city", "杭州", now=MAX_UNIX_SECONDS, ttl_seconds=MAX_TTL_SECONDS)
    assert r.op is Op.ADD and math.isfinite(r.memory.expires_at)


def test_tiny_importance_and_confidence_cannot_underflow_the_rank(make_memory):
    """1e-200 × 1e-200 underflows; PostgreSQL refused the row ("value out of range: underflow"), a 5xx."""
    m = make_memory()
    r = m.write("acme", "u", "fact", "city", "杭州", importance=1e-200, confidence=1e-200, now=T0)
    assert r.op is Op.ADD and r.memory.importance == 0.0 and r.memory.confidence == 0.0
    assert [x.key for x in m.recall("acme", "u", now=T0)] in ([], ["city"])  # readable, whatever its weight


def test_batch_with_a_non_finite_item_writes_only_the_valid_ones():
    with _lean() as m:
        res = m.write_many("acme", "u", [{"kind": "fact", "key": "city", "value": "杭州"},
                                         {"kind": "fact", "key": "occupation", "value": "教师", "event_at": math.nan}],
                           now=T0)
        assert [r.op for r in res] == [Op.ADD, Op.REJECT] and res[1].reason is Reason.INVALID_INPUT
        assert [r.key for r in m.recall("acme", "u", now=T0)] == ["city"]


@pytest.mark.parametrize("kw", [{"now": math.nan}, {"now": math.inf}, {"event_from": math.inf},
                                {"event_until": math.nan}, {"event_from": 1e308}, {"now": 10**400}])
def test_recall_refuses_non_finite_times(kw):
    with _lean() as m, pytest.raises(ValidationError):
        m.recall("acme", "u", **kw)


@pytest.mark.parametrize("call", [
    lambda m: m.audit("acme", since=math.nan),
    lambda m: m.audit("acme", until=math.inf),
    lambda m: m.audit("acme", after_seq=2**70),
    lambda m: m.audit("acme", after_seq=-1),
    lambda m: m.forget_range("acme", "u", since=math.nan, now=T0),
    lambda m: m.episodes("acme", "u", until=-math.inf, now=T0),
    lambda m: m.purge(now=T0, retention_days=math.nan),
    lambda m: m.purge(now=T0, retention_days=math.inf),
    lambda m: m.export("acme", "u", now=math.inf),
    lambda m: m.forget_user("acme", "u", now=math.nan),
    lambda m: m.grant("acme", "u", "L2", "support ticket", now=math.inf),
    lambda m: m.assemble("acme", "u", "hi", budget_tokens=math.inf, now=T0),  # type: ignore[arg-type]
    lambda m: m.assemble("acme", "u", "hi", budget_tokens=10**400, now=T0),
], ids=["audit-since", "audit-until", "after_seq-huge", "after_seq-neg", "forget_range", "episodes", "purge-nan",
        "purge-inf", "export", "forget_user", "grant", "assemble-inf", "assemble-huge"])
def test_other_operations_refuse_non_finite_numbers(call):
    with _lean() as m:
        m.write("acme", "u", "fact", "city", "杭州", now=T0)
        with pytest.raises(TYPED):
            call(m)
        assert [r.key for r in m.recall("acme", "u", now=T0)] == ["city"]  # nothing erased or changed


# --- item 3: sessions -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [*NON_FINITE, 1e308])
def test_session_with_non_finite_now_cannot_stop_idle_expiry_for_everyone(make_memory, bad):
    m = make_memory()
    other = m.open_session("other-tenant", "v", now=T0, idle_seconds=60)
    with pytest.raises(TYPED):
        m.open_session("acme", "u", now=bad)
    with pytest.raises(TYPED):
        m.open_session("acme", "u", now=T0, idle_seconds=bad)
    sid = m.open_session("acme", "u", now=T0, idle_seconds=60)
    with pytest.raises(TYPED):
        m.touch_session(sid, now=bad)
    with pytest.raises(TYPED):
        m.expire_idle_sessions(now=bad)
    closed = m.expire_idle_sessions(now=T0 + 3600)
    assert {c.session.id for c in closed} == {other, sid}


# --- property: arbitrary numbers for every numeric write-side field ---------------------------------------------

_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**30), 10**30),
                     st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -0.0, 5e-324]))
_FIELDS = ("now", "event_at", "ttl_seconds", "importance", "confidence")


@pytest.fixture(scope="module")
def shared_mem():
    m = _lean()
    yield m
    m.close()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(_FIELDS), _numbers, min_size=1))
def test_property_numbers_are_refused_or_stored_finite_never_half_written(shared_mem, fields):
    m, user = shared_mem, uuid.uuid4().hex  # a fresh user per example
    kw = {"now": T0, **fields}
    try:
        r = m.write("acme", user, "fact", "city", "杭州", **kw)
    except TYPED:
        r = None
    history = m.history("acme", user, "city")
    if r is None or r.op is Op.REJECT:
        assert r is None or r.reason in (Reason.INVALID_INPUT,), r
        assert history == []
        return
    assert r.op is Op.ADD and len(history) == 1
    rec = history[0]
    for name in ("created_at", "expires_at", "event_at", "importance", "confidence"):
        v = getattr(rec, name)
        assert v is None or math.isfinite(v), (name, v)
    json.dumps(m.export("acme", user, now=rec.created_at), allow_nan=False)


def test_subnormal_numbers_are_flushed_to_zero_before_any_store_sees_them() -> None:
    """PostgreSQL refuses subnormal float8 values ("underflow"): the engine's number check flushes them to 0."""
    import sys

    from usermem.policy.validate import check_number

    tiny = sys.float_info.min / 2**10
    assert tiny > 0 and check_number("importance", tiny, 0.0, 1.0) == 0.0
    assert check_number("importance", -tiny, -1.0, 1.0) == 0.0
    assert check_number("importance", 0.5, 0.0, 1.0) == 0.5
