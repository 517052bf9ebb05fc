"""Invariants under random operation sequences (hypothesis), checked against a reference model.

- at most one current version per key;
- a lower-priority source never replaces a higher one (the head always equals the model's head);
- rejected sensitive values are never returned by any read;
- nothing of a forgotten user is returned by any read.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from usermem import Op
from usermem.model import SOURCE_RANK, Source

T0 = 1_790_000_000.0
KEYS = ["occupation", "city", "reply_length", "likes"]
USERS = ["u1", "u2"]
SOURCES = [s.value for s in Source]
SAFE_VALUES = ["teacher", "doctor", "杭州", "上海", "short", "long", "咖啡", "tea"]
SENSITIVE_VALUES = ["身份证 11010519491231002X", "卡号 6222021234567890128", "密码是Qw3rty!9"]

op_strategy = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(USERS), st.sampled_from(KEYS),
              st.sampled_from(SAFE_VALUES + SENSITIVE_VALUES), st.sampled_from(SOURCES)),
    st.tuples(st.just("forget"), st.sampled_from(USERS), st.sampled_from(KEYS)),
    st.tuples(st.just("forget_user"), st.sampled_from(USERS)),
)

KIND = {"occupation": "fact", "city": "fact", "reply_length": "preference", "likes": "preference"}


def _authority(key: str, source: Source) -> int:
    return SOURCE_RANK[source]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_strategy, min_size=1, max_size=30))
def test_random_sequences_keep_invariants(make_memory, ops):
    m = _shared(make_memory)
    tenant = "t-" + uuid.uuid4().hex[:8]
    model: dict[tuple[str, str], tuple[str, Source]] = {}  # (user, key) -> (value, source)
    now = T0
    for op in ops:
        now += 60
        if op[0] == "write":
            _, user, key, value, source = op
            src = Source(source)
            r = m.write(tenant, user, KIND[key], key, value, source=source, now=now)
            if value in SENSITIVE_VALUES:
                assert r.op is Op.REJECT
                continue
            head = model.get((user, key))
            if head is None:
                assert r.op is Op.ADD
                model[(user, key)] = (value, src)
            elif head[0] == value and SOURCE_RANK[src] <= SOURCE_RANK[head[1]]:
                assert r.op is Op.NOOP
            elif SOURCE_RANK[src] < SOURCE_RANK[head[1]]:
                assert r.op is Op.REJECT and r.reason.value == "lower_priority_source"
            else:
                assert r.op is Op.UPDATE
                model[(user, key)] = (value, src)
        elif op[0] == "forget":
            _, user, key = op
            m.forget(tenant, user, key, now=now)
            model.pop((user, key), None)
        else:
            _, user = op
            m.forget_user(tenant, user, now=now)
            for k in [k for k in model if k[0] == user]:
                del model[k]
        # invariants after every step
        for user in USERS:
            recalled = {r.key: r for r in m.recall(tenant, user, k=50, now=now)}
            expected = {key: v for (u, key), v in model.items() if u == user}
            assert {k: (r.value, r.source) for k, r in recalled.items()} == expected
            for key in KEYS:
                versions = m.history(tenant, user, key)
                assert sum(1 for v in versions if v.is_current) <= 1
                assert all(v.value not in SENSITIVE_VALUES for v in versions)
                if (user, key) not in model:
                    assert not any(v.is_current for v in versions) or not versions


_CACHE: dict[int, object] = {}


def _shared(make_memory):
    # One Memory per test function (tenants separate examples): creating a backend per example is slow.
    key = id(make_memory)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = make_memory()
    return _CACHE[key]
