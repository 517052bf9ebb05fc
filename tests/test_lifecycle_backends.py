"""Lifecycle and sessions on every backend (SQLite, PostgreSQL, tiered SQLite+Redis): the pipelines use
only the store protocol, so the same scenario must hold everywhere."""

from __future__ import annotations

import pytest

from usermem import ConflictError, Op
from usermem.model import DAY, Kind

T0 = 1_790_000_000.0
T, U = "acme", "u-backend"


def test_versions_confirm_deny_revert(make_memory):
    m = make_memory()
    a = m.write(T, U, "preference", "report_format", "markdown", source="extracted", now=T0)
    b = m.write(T, U, "preference", "report_format", "word", source="user_confirmed", now=T0 + DAY)
    confirmed = m.confirm(T, U, b.memory.id, now=T0 + 20 * DAY)
    assert confirmed.id == b.memory.id and confirmed.last_confirmed_at == T0 + 20 * DAY
    scored = m.recall_scored(T, U, keys=["report_format"], now=T0 + 20 * DAY)
    assert scored[0].weight == pytest.approx(1.0)
    r = m.revert(T, U, "report_format", now=T0 + 21 * DAY)
    assert r.op is Op.UPDATE and r.memory.value == "markdown" and r.memory.prev_version_id == b.memory.id
    tomb = m.deny(T, U, r.memory.id, now=T0 + 22 * DAY)
    assert tomb.retracted and [x.key for x in m.recall(T, U, now=T0 + 22 * DAY)] == []
    history = m.history(T, U, "report_format")
    assert [h.id for h in history] == [a.memory.id, b.memory.id, r.memory.id, tomb.id]
    assert sum(h.is_current for h in history) == 1
    with pytest.raises(ConflictError):
        m.confirm(T, U, a.memory.id, now=T0 + 23 * DAY)


def test_change_set_revert(make_memory):
    m = make_memory()
    m.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    results = m.write_many(T, U, [
        {"kind": "preference", "key": "reply_length", "value": "detailed", "source": "user_confirmed"},
        {"kind": "preference", "key": "task_types", "value": "writing", "source": "onboarding"},
    ], now=T0 + 1)
    undo = m.revert_change_set(T, results[0].memory.change_set_id, now=T0 + 2)
    assert undo.reverted == 2
    assert {r.key: r.value for r in m.recall(T, U, now=T0 + 3)} == {"reply_length": "concise"}


def test_session_lifecycle(make_memory):
    m = make_memory()
    sid = m.open_session(T, U, "app", now=T0)
    m.write(T, U, "context", "current_task", "compare two insurance plans", session_id=sid, now=T0 + 5)
    assert [r.key for r in m.recall(T, U, now=T0 + 10) if r.kind is Kind.CONTEXT] == ["current_task"]
    closed = m.close_session(sid, "user: compare plans", now=T0 + 60)
    assert closed.episode is not None and closed.episode.event_at == T0
    assert [r.kind for r in m.recall(T, U, k=10, now=T0 + 61)] == [Kind.EPISODE]
    other = m.open_session(T, U, now=T0 + 100)
    swept = m.expire_idle_sessions(now=T0 + 100 + 31 * 60)
    assert other in [c.session_id for c in swept]
