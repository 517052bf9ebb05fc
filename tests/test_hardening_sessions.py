"""Issue 12 item 2: session transcripts go through the PII redaction, are appended atomically and are
erased with the session (explicit or idle close) and with the user."""

from __future__ import annotations

import json
import threading

import pytest

from apihelp import make_api
from usermem import Memory
from usermem.config import load_settings
from usermem.engine.sessions import MAX_SESSION_MESSAGES, MESSAGES_NS, TranscriptFull
from usermem.errors import ConflictError, ValidationError

T0 = 1_790_000_000.0
T, U = "acme", "u1"
CN_ID = "11010519491231002X"
PASSWORD = "Xy7#kP9q!"
CARD = "6222 0212 3456 7894"
SECRETS = (CN_ID, PASSWORD, "6222021234567894", "13800138000")
PII_MESSAGES = [
    {"role": "user", "content": f"我的身份证号是{CN_ID}，密码是{PASSWORD}"},
    {"role": "user", "content": f"card {CARD}, phone 138 0013 8000"},
    {"role": "assistant", "content": "好的，我记下了订单 42"},
]


def lean(make_memory):
    return make_memory(settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))


def raw(m: Memory, tenant: str, user: str) -> str:
    """Everything a user's documents and export hold, as one string."""
    return json.dumps(m.export(tenant, user, now=T0 + 500), ensure_ascii=False)


def leaked(text: str) -> list[str]:
    flat = text.replace(" ", "")
    return [s for s in SECRETS if s in flat]


def test_messages_are_redacted_before_storing_and_in_the_export(make_memory):
    m = lean(make_memory)
    sid = m.open_session(T, U, "web", now=T0)
    added = m.add_messages(sid, PII_MESSAGES, tenant=T, now=T0 + 1)
    assert (added.stored_messages, added.added, added.redacted) == (3, 3, 2)
    doc = m.store.get_doc(T, MESSAGES_NS, sid)
    assert doc is not None and len(doc["messages"]) == 3
    assert leaked(json.dumps(doc, ensure_ascii=False)) == []
    assert "[已脱敏]" in doc["messages"][0]["content"] and doc["messages"][2]["content"] == "好的，我记下了订单 42"
    assert leaked(raw(m, T, U)) == []
    # The audit entry counts, never quotes.
    entries = [e for e in m.audit(T, user_id=U) if e.action == "session_messages"]
    assert len(entries) == 1 and entries[0].detail["redacted"] == 2
    assert leaked(json.dumps([repr(e) for e in m.audit(T, user_id=U)], ensure_ascii=False)) == []
    # The close hooks get the stored (redacted) transcript when none is passed.
    got = []
    m.on_session_closed(got.append)
    closed = m.close_session(sid, tenant=T, now=T0 + 2)
    assert closed.session.messages == 3 and leaked(json.dumps(got[0].transcript, ensure_ascii=False)) == []
    assert m.store.get_doc(T, MESSAGES_NS, sid) is None


def test_idle_close_and_forget_user_delete_the_transcript(make_memory):
    m = lean(make_memory)
    idle = m.open_session(T, U, now=T0, idle_seconds=60)
    m.add_messages(idle, [{"role": "user", "content": "记得我喜欢靠窗座位"}], tenant=T, now=T0 + 1)
    assert m.store.get_doc(T, MESSAGES_NS, idle) is not None
    assert [c.session_id for c in m.expire_idle_sessions(T0 + 3600)] == [idle]
    assert m.store.get_doc(T, MESSAGES_NS, idle) is None
    gone = m.open_session(T, "u2", now=T0)
    m.add_messages(gone, [{"role": "user", "content": "hello"}], tenant=T, now=T0 + 1)
    m.forget_user(T, "u2", now=T0 + 2)
    assert m.store.get_doc(T, MESSAGES_NS, gone) is None
    assert m.store.list_docs(T, MESSAGES_NS, user_id="u2") == []


def test_a_message_to_a_session_that_idled_out_is_refused_and_leaves_nothing(make_memory):
    m = lean(make_memory)
    sid = m.open_session(T, U, now=T0, idle_seconds=60)
    with pytest.raises(ConflictError):
        m.add_messages(sid, [{"role": "user", "content": "late"}], tenant=T, now=T0 + 600)
    assert m.get_session(sid, tenant=T).status == "closed"
    assert m.store.get_doc(T, MESSAGES_NS, sid) is None


def test_bad_messages_and_a_full_transcript_are_typed_errors_with_nothing_written(lean_mem: Memory):
    m = lean_mem
    sid = m.open_session(T, U, now=T0)
    for bad in ([], "text", [{"role": "user"}], [{"role": "", "content": "x"}], [{"content": "\ud800"}],
                [{"role": "user", "content": "x" * 20_001}]):
        with pytest.raises((ValidationError, TypeError)):
            m.add_messages(sid, bad, tenant=T, now=T0 + 1)  # type: ignore[arg-type]
    assert m.store.get_doc(T, MESSAGES_NS, sid) is None
    with pytest.raises(ValidationError):
        m.add_messages(sid, [{"role": "user", "content": "x"}], tenant=T, now=T0 + 1, actor="13800138000")
    batch = [{"role": "user", "content": f"m{i}"} for i in range(500)]
    for i in range(MAX_SESSION_MESSAGES // 500):
        m.add_messages(sid, batch, tenant=T, now=T0 + 2 + i)
    with pytest.raises(TranscriptFull):
        m.add_messages(sid, [{"role": "user", "content": "one more"}], tenant=T, now=T0 + 10)
    assert len(m.store.get_doc(T, MESSAGES_NS, sid)["messages"]) == MAX_SESSION_MESSAGES


# Two instances share one database only on the server backends (SQLite runs the threads test below).
@pytest.mark.parametrize("backend", ["postgres", "tiered"], indirect=True)
def test_concurrent_appends_from_two_instances_lose_nothing(backend, make_memory):
    a, b = lean(make_memory), lean(make_memory)
    sid = a.open_session(T, U, now=T0)
    errors: list[BaseException] = []

    def run(m: Memory, name: str) -> None:
        try:
            for i in range(15):
                m.add_messages(sid, [{"role": "user", "content": f"{name}-{i}"}], tenant=T, now=T0 + 1 + i)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m, f"{n}{j}")) for n, m in (("a", a), ("b", b)) for j in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    contents = [msg["content"] for msg in a.store.get_doc(T, MESSAGES_NS, sid)["messages"]]
    assert len(contents) == 60 and len(set(contents)) == 60


def test_concurrent_appends_in_one_process_lose_nothing(lean_mem: Memory):
    m = lean_mem
    sid = m.open_session(T, U, now=T0)
    threads = [threading.Thread(target=lambda j=j: [m.add_messages(sid, [{"role": "user", "content": f"{j}-{i}"}],
                                                                   tenant=T, now=T0 + 1) for i in range(20)])
               for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(m.store.get_doc(T, MESSAGES_NS, sid)["messages"]) == 80


def test_http_messages_route_redacts_and_answers_409_413():
    api = make_api()
    try:
        h = api.h(api.key_a)
        sid = api.http.post("/v1/users/u1/sessions", json={"client_id": "web"}, headers=h).json()["id"]
        r = api.http.post(f"/v1/sessions/{sid}/messages", headers=h, json={"messages": PII_MESSAGES})
        assert r.status_code == 200 and r.json()["stored_messages"] == 3
        assert leaked(json.dumps(api.memory.store.get_doc("acme", MESSAGES_NS, sid), ensure_ascii=False)) == []
        export = api.http.get("/v1/users/u1/export", headers=api.h(api.admin_a))
        if export.status_code == 200:
            assert leaked(export.text) == []
        api.http.post(f"/v1/sessions/{sid}/close", json={}, headers=h)
        r = api.http.post(f"/v1/sessions/{sid}/messages", headers=h, json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 409 and r.json()["code"] == "session_closed"
    finally:
        api.memory.close()


# --- a transcript passed straight to close_session goes through the same guard ----------------------------------

@pytest.mark.parametrize("transcript", [PII_MESSAGES, "\n".join(m["content"] for m in PII_MESSAGES)],
                         ids=["messages", "text"])
def test_close_session_transcript_is_redacted(lean_mem: Memory, transcript):
    m = lean_mem
    sid = m.open_session(T, U, "web", now=T0)
    got = []
    m.on_session_closed(got.append)
    closed = m.close_session(sid, transcript, tenant=T, now=T0 + 2)
    assert leaked(json.dumps(closed.transcript, ensure_ascii=False)) == []
    assert len(got) == 1 and leaked(json.dumps(got[0].transcript, ensure_ascii=False)) == []
    assert "[已脱敏]" in json.dumps(got[0].transcript, ensure_ascii=False)
    assert "订单 42" in json.dumps(got[0].transcript, ensure_ascii=False)  # benign text is kept as said
    assert closed.session.messages == (3 if isinstance(transcript, list) else 1)
    entry = [e for e in m.audit(T, user_id=U) if e.action == "session_close"][-1]
    assert entry.detail["transcript_redacted"] == (2 if isinstance(transcript, list) else 1)
    assert leaked(raw(m, T, U)) == []
    assert leaked(json.dumps([repr(e) for e in m.audit(T, limit=1000)], ensure_ascii=False)) == []


@pytest.mark.parametrize("bad", [[{"role": "user"}], [{"content": "\ud800"}], "x\udfff", 42,
                                 [{"role": "user", "content": "x" * 20_001}]])
def test_close_session_refuses_a_bad_transcript_and_stays_open(lean_mem: Memory, bad):
    m = lean_mem
    sid = m.open_session(T, U, now=T0)
    with pytest.raises((ValidationError, TypeError)):
        m.close_session(sid, bad, tenant=T, now=T0 + 1)
    assert m.get_session(sid, tenant=T).status == "open"


def test_http_close_with_a_transcript_redacts_it_before_the_hooks():
    api = make_api()
    try:
        got = []
        api.memory.on_session_closed(got.append)
        h = api.h(api.key_a)
        sid = api.http.post("/v1/users/u1/sessions", json={"client_id": "web"}, headers=h).json()["id"]
        r = api.http.post(f"/v1/sessions/{sid}/close", json={"transcript": PII_MESSAGES}, headers=h)
        assert r.status_code == 200, r.text
        assert leaked(r.text) == []
        assert len(got) == 1 and leaked(json.dumps(got[0].transcript, ensure_ascii=False)) == []
        assert r.json()["session"]["messages"] == 3
    finally:
        api.memory.close()
