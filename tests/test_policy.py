"""Pure policy functions: resolution, validation, decay. No store involved."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from usermem.model import KIND_REGISTRY, SOURCE_RANK, Kind, Op, Reason, Source
from usermem.policy import decay
from usermem.policy.contracts import is_forbidden_key
from usermem.policy.resolve import Head, resolve
from usermem.policy.validate import InputProblem, canonical_json, check_key, check_value

sources = st.sampled_from(list(Source))
values = st.sampled_from(['"a"', '"b"', "1", '{"x":1}'])


@given(head_source=sources, new_source=sources, old=values, new=values)
def test_lower_priority_never_overrides(head_source, new_source, old, new):
    r = resolve(Head(old, head_source, True), new, new_source)
    if SOURCE_RANK[new_source] < SOURCE_RANK[head_source]:
        assert r.op in (Op.REJECT, Op.NOOP)
        if old != new:
            assert r.reason is Reason.LOWER_PRIORITY_SOURCE
    elif old == new:
        assert r.op is (Op.UPDATE if SOURCE_RANK[new_source] > SOURCE_RANK[head_source] else Op.NOOP)
    else:
        assert r.op is Op.UPDATE


@given(head_source=sources, new_source=sources, old=values, new=values)
def test_dead_head_never_blocks(head_source, new_source, old, new):
    assert resolve(Head(old, head_source, False), new, new_source).op is Op.ADD


def test_field_order_overrides_global_order():
    order = (Source.USER_CONFIRMED, Source.SYSTEM)
    assert resolve(Head('"a"', Source.USER_CONFIRMED, True), '"b"', Source.SYSTEM, order).op is Op.REJECT
    assert resolve(Head('"a"', Source.SYSTEM, True), '"b"', Source.USER_CONFIRMED, order).op is Op.UPDATE


def test_source_order_is_declared_order():
    ranks = [SOURCE_RANK[s] for s in Source]
    assert ranks == sorted(ranks, reverse=True)
    assert next(iter(Source)) is Source.SYSTEM and list(Source)[-1] is Source.INFERRED


@pytest.mark.parametrize("key", ["a", "plan", "reply_length", "x.y-z_1", "k" * 64])
def test_valid_keys(key):
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", "A", "with space", "k" * 65, "中文", "a/b"])
def test_invalid_keys(key):
    with pytest.raises(InputProblem):
        check_key(key)


def test_value_limits_and_canonical_json():
    assert canonical_json({"b": 1, "a": "中"}) == '{"a":"中","b":1}'
    assert check_value("x" * 16_000)
    with pytest.raises(InputProblem, match="limit"):
        check_value("x" * 16_400)
    with pytest.raises(InputProblem):
        check_value(float("inf"))
    nested: list = []
    cur = nested
    for _ in range(20):
        cur.append([])
        cur = cur[0]
    with pytest.raises(InputProblem, match="deeper"):
        check_value(nested)


@pytest.mark.parametrize("key", ["password", "Card-Number", "id_number", "login_password", "银行卡号", "pwd"])
def test_forbidden_key_spellings(key):
    assert is_forbidden_key(key)


@pytest.mark.parametrize("key", ["plan", "city", "reply_length", "passion", "cardinal"])
def test_ordinary_keys_are_not_forbidden(key):
    assert not is_forbidden_key(key)


def test_kind_defaults_match_the_seed_intent():
    fact = KIND_REGISTRY[Kind.FACT]
    assert math.exp(-fact.decay_rate * 3650 * 86400) == pytest.approx(0.95, abs=1e-6)
    pref = KIND_REGISTRY[Kind.PREFERENCE]
    assert math.exp(-pref.decay_rate * 30 * 86400) == pytest.approx(math.exp(-1), abs=1e-6)
    ctx = KIND_REGISTRY[Kind.CONTEXT]
    assert math.exp(-ctx.decay_rate * 3600) < 0.01
    assert KIND_REGISTRY[Kind.SITUATION].ttl_seconds == 30 * 86400
    assert KIND_REGISTRY[Kind.EPISODE].ttl_seconds == 180 * 86400
    assert KIND_REGISTRY[Kind.FACT].ttl_seconds is None


@given(age=st.floats(0, 1e9), extra=st.floats(0, 1e9))
def test_decay_never_rises_with_time(age, extra):
    d = decay.DecayInput(1.0, 30 * 86400.0, 0.0)
    assert decay.weight(d, age + extra) <= decay.weight(d, age)


@pytest.mark.parametrize("tenant", ["*", "_system", "_anything"])
def test_reserved_tenants_are_refused(tenant):
    from usermem import Memory, ValidationError, load_settings

    m = Memory(settings=load_settings(env={}, embedder="none"))
    with pytest.raises(ValidationError, match="reserved"):
        m.write(tenant, "u", "fact", "city", "x")
    with pytest.raises(ValidationError, match="reserved"):
        m.recall(tenant, "u")
