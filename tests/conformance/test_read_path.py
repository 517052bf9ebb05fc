"""Recall, history, forgetting and purge on every backend."""

from __future__ import annotations

import pytest

from usermem import ValidationError

T0 = 1_790_000_000.0
DAY = 86_400.0


def test_recall_returns_only_current_live_memories_ranked(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "occupation", "teacher", now=T0)
    m.write("t", "u", "fact", "occupation", "doctor", now=T0 + 1)
    m.write("t", "u", "situation", "open_issue", "refund", now=T0)
    m.write("t", "u", "preference", "report_format", "markdown", importance=0.2, now=T0)
    got = m.recall("t", "u", k=10, now=T0 + DAY)
    assert [r.value for r in got] == ["doctor", "refund", "markdown"]
    assert m.recall("t", "u", k=1, now=T0 + DAY)[0].value == "doctor"
    # after 30 days the situation has expired
    assert "refund" not in [r.value for r in m.recall("t", "u", k=10, now=T0 + 31 * DAY)]


def test_recall_kinds_filter_and_k_validation(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "occupation", "doctor", now=T0)
    m.write("t", "u", "preference", "language", "zh", now=T0)
    assert [r.key for r in m.recall("t", "u", now=T0, kinds=["preference"])] == ["language"]
    assert [r.key for r in m.recall("t", "u", now=T0, kinds=["profile"])] == ["occupation"]
    with pytest.raises(ValidationError):
        m.recall("t", "u", k=0)
    with pytest.raises(ValidationError):
        m.recall("t", "u", kinds=["mood"])


def test_recency_decay_orders_equal_importance(make_memory):
    m = make_memory()
    m.write("t", "u", "episode", "old_call", "called about invoice", now=T0)
    m.write("t", "u", "episode", "new_call", "called about refund", now=T0 + 20 * DAY)
    assert [r.key for r in m.recall("t", "u", now=T0 + 21 * DAY)] == ["new_call", "old_call"]


def test_forget_key_and_user(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "occupation", "teacher", now=T0)
    m.write("t", "u", "fact", "occupation", "doctor", now=T0 + 1)
    m.write("t", "u", "fact", "city", "Hangzhou", now=T0)
    assert m.forget("t", "u", "occupation", now=T0 + 2) == 2
    assert m.history("t", "u", "occupation") == []
    assert [r.key for r in m.recall("t", "u", now=T0 + 3)] == ["city"]
    # a forgotten key can be written again, starting a fresh chain
    fresh = m.write("t", "u", "fact", "occupation", "nurse", now=T0 + 4).memory
    assert fresh.prev_version_id is None
    assert m.forget_user("t", "u", now=T0 + 5) == 2
    assert m.recall("t", "u", now=T0 + 6) == []
    assert m.history("t", "u", "city") == []
    assert m.get("t", fresh.id) is None
    assert [e.action for e in m.audit("t", user_id="u")][-3:] == ["forget", "write", "forget_user"]


def test_forget_range(make_memory):
    m = make_memory()
    m.write("t", "u", "episode", "e1", "first", now=T0)
    m.write("t", "u", "episode", "e2", "second", now=T0 + 10 * DAY)
    assert m.forget_range("t", "u", since=T0 + DAY, until=T0 + 20 * DAY, now=T0 + 11 * DAY) == 1
    assert [r.key for r in m.recall("t", "u", now=T0 + 11 * DAY)] == ["e1"]


def test_purge_respects_retention(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "city", "Hangzhou", now=T0)
    m.write("t", "u", "situation", "open_issue", "refund", now=T0)
    m.forget("t", "u", "city", now=T0 + DAY)
    assert m.purge(now=T0 + 10 * DAY) == 0  # within the 30-day retention
    assert m.purge(now=T0 + 61 * DAY) == 2  # deleted 60 days ago; expired (30 d TTL) 31 days ago
    assert m.store.count("t") == 0
    assert m.audit("*", action="purge")[-1].detail["rows"] == 2


def test_forget_rejects_bad_keys_without_touching_anything(make_memory):
    from usermem import InvalidArgument

    m = make_memory()
    m.write("t", "u", "fact", "city", "Hangzhou", now=T0)
    with pytest.raises(ValidationError):
        m.forget("t", "u", "", now=T0)
    with pytest.raises(ValidationError):
        m.forget("t", "u", "Bad Key", now=T0)
    with pytest.raises(InvalidArgument):
        m.forget("t", "u", 42, now=T0)
    assert [r.key for r in m.recall("t", "u", now=T0)] == ["city"]
