"""Sessions and working memory: context lives while its session does, then becomes an episode."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from usermem import Memory, NotFound, Op, ValidationError
from usermem.model import DAY, Kind
from usermem.store.base import LiveQuery

T0 = 1_790_000_000.0
T, U = "acme", "u1"
IDLE = 30 * 60


@pytest.fixture
def mem(lean_mem: Memory) -> Memory:
    """These tests are about lifecycle, not relevance (those that rank with recall(query=...) use `hybrid_mem`)."""
    return lean_mem


def context_keys(m: Memory, user: str = U, now: float = T0, **kw) -> list[str]:
    return [r.key for r in m.recall(T, user, k=50, now=now, **kw) if r.kind is Kind.CONTEXT]


def test_context_lives_while_the_session_is_open_and_becomes_an_episode(mem: Memory):
    closed = []
    mem.on_session_closed(closed.append)
    sid = mem.open_session(T, U, "app", now=T0)
    assert mem.write(T, U, "context", "current_task", "比较两家保险方案", session_id=sid, now=T0 + 10).op is Op.ADD
    mem.write(T, U, "context", "contract_clause", "租房合同第3条修订", session_id=sid, importance=0.9, now=T0 + 20)
    mem.write(T, U, "fact", "occupation", "pediatrician", source="user_confirmed", now=T0 + 30)
    assert sorted(context_keys(mem, now=T0 + 60)) == ["contract_clause", "current_task"]
    assert [s.memory.key for s in mem.session_context(sid, now=T0 + 60)] == ["contract_clause", "current_task"]

    transcript = [{"role": "user", "content": "帮我对比两家保险"}, {"role": "assistant", "content": "好的"}]
    result = mem.close_session(sid, transcript, now=T0 + 600)
    assert result.reason == "closed" and not result.already_closed
    ep = result.episode
    assert ep is not None and ep.kind is Kind.EPISODE and ep.event_at == T0 and ep.created_at == T0 + 600
    assert ep.value["points"] == ["contract_clause: 租房合同第3条修订", "current_task: 比较两家保险方案"]
    assert ep.value["messages"] == 2 and ep.value["client_id"] == "app"
    # After close: no context in long-term recall, the episode and the fact remain.
    after = mem.recall(T, U, k=50, now=T0 + 601)
    assert not [r for r in after if r.kind is Kind.CONTEXT]
    assert {r.key for r in after} == {"occupation", ep.key}
    assert mem.session_context(sid, now=T0 + 601) == []
    # History is kept: the value, then a retraction by the session close.
    history = mem.history(T, U, "current_task")
    assert [h.value for h in history] == ["比较两家保险方案", None] and history[-1].retracted
    # The hook saw everything the background extraction needs.
    assert len(closed) == 1 and closed[0].transcript == transcript and closed[0].episode == ep
    assert {r.key for r in closed[0].context} == {"current_task", "contract_clause"}
    assert closed[0].tenant == T and closed[0].user_id == U and closed[0].session_id == sid
    # Closing again changes nothing and does not re-run hooks.
    again = mem.close_session(sid, now=T0 + 700)
    assert again.already_closed and again.episode is not None and again.episode.id == ep.id and len(closed) == 1
    session = mem.get_session(sid)
    assert session.status == "closed" and session.episode_id == ep.id and session.messages == 2
    audit = mem.audit(T, user_id=U, action="session_close")
    assert len(audit) == 1 and audit[0].detail["retracted"] == 2 and "保险" not in audit[0].detail_json()


def test_session_tenant_resolution(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    assert mem.get_session(sid).tenant == T
    with pytest.raises(NotFound):
        mem.close_session(sid, tenant="other", now=T0 + 1)
    with pytest.raises(NotFound):
        mem.get_session(sid, tenant="other")
    with pytest.raises(NotFound):
        mem.close_session("no-such-session", now=T0 + 1)
    assert mem.close_session(sid, tenant=T, now=T0 + 2).reason == "closed"
    other = mem.open_session("other", U, now=T0)
    assert mem.close_session(other, now=T0 + 3).session.tenant == "other"


def test_context_from_one_session_is_not_recalled_for_another_tenant_or_user(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    mem.write(T, U, "context", "current_task", "x", session_id=sid, now=T0)
    assert context_keys(mem, now=T0 + 1) == ["current_task"]
    assert context_keys(mem, user="u2", now=T0 + 1) == []
    assert [r.key for r in mem.recall("other", U, now=T0 + 1)] == []
    # Another user writing under this session id is retracted at once.
    mem.write(T, "u2", "context", "current_task", "sneaky", session_id=sid, now=T0 + 2)
    assert context_keys(mem, user="u2", now=T0 + 3) == []
    assert mem.history(T, "u2", "current_task")[-1].retracted
    assert mem.audit(T, user_id="u2", action="session_late_write")[0].detail["reason"] == "session belongs to another user"


def test_idle_sessions_hide_their_context_and_are_archived_by_the_sweep(mem: Memory):
    # A short idle timeout, so the session idles out before its context decays below the drop
    # threshold (context has a 6-minute half-life: unused for ~10 minutes it leaves recall anyway).
    idle = 240
    sid = mem.open_session(T, U, now=T0, idle_seconds=idle)
    mem.write(T, U, "context", "current_task", "draft resignation letter", session_id=sid, now=T0 + 60)
    # Activity postpones expiry: a context write at +60 s, a read of the context at +200 s.
    mem.session_context(sid, now=T0 + 200)
    deadline = T0 + 200 + idle
    assert context_keys(mem, now=deadline - 1, kinds=["context"]) == ["current_task"]
    assert mem.expire_idle_sessions(now=deadline - 1) == []
    # Recall hides it the moment the timeout passes, before any sweep.
    assert context_keys(mem, now=deadline + 1) == []
    swept = mem.expire_idle_sessions(now=deadline + 120)
    assert [c.session_id for c in swept] == [sid] and swept[0].reason == "idle"
    ep = swept[0].episode
    assert ep is not None and ep.value["closed_by"] == "idle" and ep.value["ended_at"] == deadline
    assert ep.value["points"] == ["current_task: draft resignation letter"]
    assert mem.get_session(sid).close_reason == "idle"
    assert mem.expire_idle_sessions(now=deadline + 10 * idle) == []  # nothing left to do
    assert context_keys(mem, now=deadline + 200) == []


def test_touch_and_custom_idle_timeout(mem: Memory):
    sid = mem.open_session(T, U, now=T0, idle_seconds=60)
    mem.touch_session(sid, now=T0 + 50)
    assert mem.get_session(sid).is_open(T0 + 100)
    assert mem.expire_idle_sessions(now=T0 + 100) == []
    assert [c.session_id for c in mem.expire_idle_sessions(now=T0 + 111)] == [sid]
    # A touch after the timeout closes instead of reviving.
    late = mem.open_session(T, U, now=T0, idle_seconds=60)
    assert mem.touch_session(late, now=T0 + 61).status == "closed"
    with pytest.raises(ValidationError):
        mem.open_session(T, U, now=T0, idle_seconds=0)


def test_sweep_can_be_limited_to_a_tenant(mem: Memory):
    a = mem.open_session("ta", U, now=T0)
    b = mem.open_session("tb", U, now=T0)
    assert [c.session_id for c in mem.expire_idle_sessions(now=T0 + 2 * IDLE, tenant="ta")] == [a]
    assert mem.get_session(b).status == "open"
    assert [c.session_id for c in mem.expire_idle_sessions(now=T0 + 2 * IDLE)] == [b]


def test_writes_to_a_closed_session_never_surface(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    mem.close_session(sid, now=T0 + 1)
    r = mem.write(T, U, "context", "current_task", "late", session_id=sid, now=T0 + 2)
    assert r.op is Op.ADD  # the pipeline accepted it; the session layer retracted it right after
    assert context_keys(mem, now=T0 + 3) == []
    assert mem.history(T, U, "current_task")[-1].retracted
    assert mem.audit(T, user_id=U, action="session_late_write")[0].detail["reason"] == "session is closed"


def test_a_late_write_to_an_idle_session_closes_and_archives_it(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    mem.write(T, U, "context", "current_task", "a", session_id=sid, now=T0 + IDLE + 5)
    s = mem.get_session(sid)
    assert s.status == "closed" and s.close_reason == "idle"
    assert context_keys(mem, now=T0 + IDLE + 6) == []


def test_unknown_session_ids_open_an_implicit_session(mem: Memory):
    mem.write(T, U, "context", "current_task", "x", session_id="chat-42", now=T0)
    s = mem.get_session("chat-42")
    assert s.implicit and s.user_id == U and s.status == "open"
    assert context_keys(mem, now=T0 + 1) == ["current_task"]
    closed = mem.expire_idle_sessions(now=T0 + IDLE + 1)
    assert [c.session_id for c in closed] == ["chat-42"]
    assert closed[0].episode is not None and closed[0].episode.key == "session.chat-42"
    # A session id with characters a key may not hold still gets a valid, stable episode key.
    mem.write(T, U, "context", "current_task", "y", session_id="Chat #43", now=T0)
    ep = mem.close_session("Chat #43", now=T0 + 1).episode
    assert ep is not None and ep.key.startswith("session.") and len(ep.key) == 40


def test_empty_sessions_leave_no_episode_and_bad_transcripts_are_refused(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    with pytest.raises(ValidationError):
        mem.close_session(sid, [{"role": "user"}], now=T0 + 1)
    with pytest.raises(ValidationError):
        mem.close_session(sid, [{"content": "x" * 20_001}], now=T0 + 1)
    assert mem.get_session(sid).status == "open"  # nothing half-done
    result = mem.close_session(sid, now=T0 + 2)
    assert result.episode is None and mem.episodes(T, U, now=T0 + 3) == []


def test_a_failing_hook_does_not_undo_the_close(mem: Memory):
    calls = []

    @mem.on_session_closed
    def boom(event):
        raise RuntimeError("extraction backend down")

    mem.on_session_closed(calls.append)
    sid = mem.open_session(T, U, now=T0)
    mem.write(T, U, "context", "current_task", "x", session_id=sid, now=T0)
    assert mem.close_session(sid, "hello", now=T0 + 1).episode is not None
    assert len(calls) == 1 and mem.get_session(sid).status == "closed"


def test_erasure_removes_sessions(mem: Memory):
    sid = mem.open_session(T, U, now=T0)
    mem.write(T, U, "context", "current_task", "x", session_id=sid, now=T0)
    mem.forget_user(T, U, now=T0 + 1)
    with pytest.raises(NotFound):
        mem.close_session(sid, now=T0 + 2)
    assert mem.expire_idle_sessions(now=T0 + 2 * IDLE) == []  # the stale index entry is cleaned up
    assert mem.store.list_docs("*", "session_idle") == []


def test_retired_context_is_purged_physically(file_mem: Memory):
    m = file_mem
    sid = m.open_session(T, U, now=T0)
    m.write(T, U, "context", "current_task", "secret-ish working note", session_id=sid, now=T0)
    m.close_session(sid, now=T0 + 60)
    assert len(m.history(T, U, "current_task")) == 2
    m.purge(now=T0 + DAY + 1, retention_days=0)
    assert m.history(T, U, "current_task") == []
    assert len(m.episodes(T, U, now=T0 + DAY + 1)) == 1  # the episode stays (180-day TTL)


def test_episodes_keep_event_time_apart_from_write_time(mem: Memory):
    sep3 = T0 - 60 * DAY
    mem.write(T, "C007", "episode", "ticket.4711", "reported a double charge; refund submitted", event_at=sep3,
              now=T0)
    mem.write(T, "C007", "episode", "ticket.4790", "asked for an invoice copy", event_at=T0 - 10 * DAY,
              now=T0 - 10 * DAY)
    mem.write(T, "C007", "episode", "ticket.4801", "changed delivery address", event_at=T0 - 2 * DAY,
              now=T0 - DAY)
    latest = mem.episodes(T, "C007", now=T0 + 1, limit=1)
    assert [e.key for e in latest] == ["ticket.4801"]  # "what did we do last time"
    window = mem.episodes(T, "C007", since=sep3 - DAY, until=sep3 + DAY, now=T0 + 1)
    assert [e.key for e in window] == ["ticket.4711"]
    assert window[0].event_at == sep3 and window[0].created_at == T0
    ordered = mem.episodes(T, "C007", now=T0 + 1)
    assert [e.key for e in ordered] == ["ticket.4801", "ticket.4790", "ticket.4711"]
    with pytest.raises(ValidationError):
        mem.episodes(T, "C007", limit=0)


def test_concurrent_sessions_of_one_user_keep_their_own_context(mem: Memory):
    app = mem.open_session(T, U, "app", now=T0)
    mini = mem.open_session(T, U, "miniapp", now=T0)
    mem.write(T, U, "context", "app_screen", "settings", session_id=app, now=T0)
    mem.write(T, U, "context", "mini_screen", "checkout", session_id=mini, now=T0)
    assert [s.memory.key for s in mem.session_context(app, now=T0 + 1)] == ["app_screen"]
    mem.close_session(app, now=T0 + 2)
    assert context_keys(mem, now=T0 + 3) == ["mini_screen"]
    assert [s.memory.key for s in mem.session_context(mini, now=T0 + 3)] == ["mini_screen"]


# -- property: a closed session's context never leaks -------------------------------------------------------

actions = st.lists(st.tuples(
    st.sampled_from(["write", "write", "close", "wait", "sweep", "fact"]),
    st.integers(min_value=0, max_value=2),  # which session
    st.sampled_from(["current_task", "draft", "step"]),
    st.floats(min_value=1, max_value=600)), min_size=1, max_size=20)
# Shorter than the ~10 minutes after which unused context decays out of recall, so that sessions
# idling out while their context is still above the drop threshold are exercised too.
SHORT_IDLE = 240


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=actions)
def test_a_closed_sessions_context_never_leaks(mem: Memory, actions):
    user = uuid.uuid4().hex
    now = T0
    sessions = [mem.open_session(T, user, now=now, idle_seconds=SHORT_IDLE) for _ in range(3)]
    for action, which, key, dt in actions:
        sid = sessions[which]
        if action == "write":
            mem.write(T, user, "context", key, f"{key}@{sid[-6:]}", session_id=sid, now=now)
        elif action == "fact":
            mem.write(T, user, "fact", "city", f"c{dt:.0f}", now=now)
        elif action == "close":
            mem.close_session(sid, now=now)
        elif action == "sweep":
            mem.expire_idle_sessions(now=now)
        else:
            now += dt
        open_ids = {s for s in sessions if mem.get_session(s).is_open(now)}
        for r in mem.recall(T, user, k=100, now=now):
            if r.kind is Kind.CONTEXT:
                assert r.session_id in open_ids, "context of a closed or idle session was recalled"
        live = mem.store.live(LiveQuery(T, user, now, kinds=[Kind.CONTEXT]))
        for r in live:
            s = mem.get_session(r.session_id)
            assert s.status == "open", "a closed session left live context behind"


def test_an_episode_refused_by_policy_is_recorded_not_fatal():
    from usermem.config import load_settings

    m = Memory(settings=load_settings(env={}, unknown_fields="reject", embedder="none"))
    try:
        sid = m.open_session(T, U, now=T0)
        m.write(T, U, "context", "current_task", "x", session_id=sid, now=T0)  # a known field
        result = m.close_session(sid, now=T0 + 1)
        assert result.episode is None
        session = m.get_session(sid)
        assert session.status == "closed" and (session.episode_error or "").startswith("unknown_field")
        assert context_keys(m, now=T0 + 2) == []
    finally:
        m.close()


def test_a_session_id_of_another_tenant_cannot_be_borrowed(mem: Memory):
    sid = mem.open_session("other", U, now=T0)
    mem.write(T, U, "context", "current_task", "x", session_id=sid, now=T0 + 1)
    assert context_keys(mem, now=T0 + 2) == []
    assert mem.audit(T, user_id=U, action="session_late_write")[0].detail["reason"] == \
        "session is unknown to this tenant"
    assert mem.get_session(sid).tenant == "other"


def test_concurrent_closers_archive_once(file_mem: Memory):
    import threading

    m = file_mem
    calls = []
    m.on_session_closed(calls.append)
    sid = m.open_session(T, U, now=T0)
    m.write(T, U, "context", "current_task", "x", session_id=sid, now=T0)
    barrier = threading.Barrier(4)

    def closer(i: int) -> None:
        barrier.wait()
        if i % 2:
            m.close_session(sid, now=T0 + IDLE + 10)
        else:
            m.expire_idle_sessions(now=T0 + IDLE + 10)

    threads = [threading.Thread(target=closer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(m.history(T, U, calls[0].episode.key)) == 1


def test_closed_context_does_not_leak_through_query_recall_or_event_windows(hybrid_mem: Memory):
    mem = hybrid_mem
    sid = mem.open_session(T, U, now=T0)
    mem.write(T, U, "context", "current_task", "比较两家保险方案 insurance plans", session_id=sid, now=T0)
    hits = mem.recall(T, U, k=10, now=T0 + 1, query="保险 insurance")
    assert "current_task" in [r.key for r in hits]
    mem.close_session(sid, now=T0 + 2)
    for kw in ({"query": "保险 insurance"}, {"kinds": ["context"]}, {"keys": ["current_task"]}):
        assert [r for r in mem.recall(T, U, k=10, now=T0 + 3, **kw) if r.kind is Kind.CONTEXT] == []
