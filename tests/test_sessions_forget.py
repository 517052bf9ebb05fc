"""forget(key) while a session is open: the session's stored transcript (kept until the close) loses the
forgotten words, and the close — its episode and its background extraction — does not bring the field back.

Was: the transcript kept quoting the forgotten value, and the close-time extraction wrote it again (a user who
said "我住在杭州", then asked to forget their city, had city=杭州 again as soon as the session closed)."""

from __future__ import annotations

import json

from usermem import Memory
from usermem.config import load_settings
from usermem.engine.sessions import FORGOTTEN

T0 = 1_790_000_000.0


def _memory() -> Memory:
    return Memory("sqlite:///:memory:", settings=load_settings(env={}, embedder="none"))


def _keys(m: Memory, user: str, at: float) -> dict[str, object]:
    return {r.key: r.value for r in m.recall("acme", user, k=50, now=at) if not r.key.startswith("session.")}


def test_a_forgotten_field_leaves_the_open_transcript_and_is_not_extracted_again_at_close() -> None:
    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    said = "我住在杭州，平时喜欢爬山。"
    m.add_messages(sid, [{"role": "user", "content": said}], extract=True, now=T0 + 1)
    assert _keys(m, "u1", T0 + 2).get("city") == "杭州"
    assert m.forget("acme", "u1", "city", now=T0 + 3) == 1
    doc = m.store.get_doc("acme", "api_session_messages", sid)  # type: ignore[attr-defined]
    assert doc is not None and doc["forgotten_keys"] == ["city"]
    [message] = doc["messages"]
    assert "杭州" not in message["content"] and FORGOTTEN in message["content"] and "爬山" in message["content"]
    closed = m.close_session(sid, tenant="acme", now=T0 + 4)
    assert "city" not in _keys(m, "u1", T0 + 5)
    assert closed.episode is None or "杭州" not in json.dumps(closed.episode.value, ensure_ascii=False)
    assert closed.forgotten_keys == ("city",)


def test_a_field_forgotten_before_it_was_extracted_is_not_written_at_close() -> None:
    """Without live extraction nothing was stored, so there are no words to take out: the key alone keeps the
    close from writing it; the other fields of the transcript are still extracted."""
    m = _memory()
    sid = m.open_session("acme", "u2", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "I live in Lisbon and I'm vegan."}], now=T0 + 1)
    m.write("acme", "u2", "fact", "diet", "vegan", source="user_confirmed", now=T0 + 2)
    m.forget("acme", "u2", "diet", now=T0 + 3)
    m.close_session(sid, tenant="acme", now=T0 + 4)
    got = _keys(m, "u2", T0 + 5)
    assert "diet" not in got and got.get("city") == "Lisbon"


def test_a_value_stated_again_after_the_forget_and_written_live_stays() -> None:
    m = _memory()
    sid = m.open_session("acme", "u3", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "I live in Lisbon."}], extract=True, now=T0 + 1)
    m.forget("acme", "u3", "city", now=T0 + 2)
    m.add_messages(sid, [{"role": "user", "content": "Actually, I live in Porto now."}], extract=True, now=T0 + 3)
    assert _keys(m, "u3", T0 + 4).get("city") == "Porto"
    doc = m.store.get_doc("acme", "api_session_messages", sid)  # type: ignore[attr-defined]
    assert [x["content"] for x in doc["messages"]] == [f"I live in {FORGOTTEN}.", "Actually, I live in Porto now."]
    m.close_session(sid, tenant="acme", now=T0 + 5)
    assert _keys(m, "u3", T0 + 6).get("city") == "Porto"  # the close neither wrote nor removed it


def test_other_sessions_and_users_are_untouched_and_no_session_means_nothing_to_do() -> None:
    m = _memory()
    mine = m.open_session("acme", "u4", now=T0)
    theirs = m.open_session("acme", "u5", now=T0)
    for sid in (mine, theirs):
        m.add_messages(sid, [{"role": "user", "content": "I live in Lisbon."}], extract=True, now=T0 + 1)
    m.forget("acme", "u4", "city", now=T0 + 2)
    doc = m.store.get_doc("acme", "api_session_messages", theirs)  # type: ignore[attr-defined]
    assert doc["messages"][0]["content"] == "I live in Lisbon." and "forgotten_keys" not in doc
    assert _keys(m, "u5", T0 + 3).get("city") == "Lisbon"
    # a user without an open session: forget works as before, no transcript document appears
    m.write("acme", "u6", "fact", "city", "Rome", source="user_confirmed", now=T0)
    assert m.forget("acme", "u6", "city", now=T0 + 1) == 1
    assert m.store.list_docs("acme", "api_session_messages", user_id="u6") == []  # type: ignore[attr-defined]


def test_forget_range_scrubs_the_words_of_the_versions_it_erases() -> None:
    m = _memory()
    sid = m.open_session("acme", "u7", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "I live in Lisbon."}], extract=True, now=T0 + 10)
    m.add_messages(sid, [{"role": "user", "content": "I'm vegan, by the way."}], extract=True, now=T0 + 100)
    assert {"city", "diet"} <= set(_keys(m, "u7", T0 + 101))
    m.forget_range("acme", "u7", since=T0 + 50, now=T0 + 200)  # the diet, said at T0+100; not the city
    doc = m.store.get_doc("acme", "api_session_messages", sid)  # type: ignore[attr-defined]
    assert [x["content"] for x in doc["messages"]] == ["I live in Lisbon.", f"I'm {FORGOTTEN}, by the way."]
    assert doc["forgotten_keys"] == ["diet"]
    m.close_session(sid, tenant="acme", now=T0 + 300)
    got = _keys(m, "u7", T0 + 301)
    assert "diet" not in got and got.get("city") == "Lisbon"


def test_an_erasure_applied_by_ids_scrubs_the_words_of_those_versions() -> None:
    """How a federated domain applies another domain's forget_range: exactly the versions erased there."""
    m = _memory()
    sid = m.open_session("acme", "u8", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "I live in Lisbon and I'm vegan."}], extract=True, now=T0 + 1)
    diet = next(r for r in m.recall("acme", "u8", k=10, now=T0 + 2) if r.key == "diet")
    engine = m._engine  # type: ignore[attr-defined]  # the federation's applier calls the pipeline like this
    assert engine.erasure.forget("acme", "u8", memory_ids=[diet.id], now=T0 + 3) == 1
    doc = m.store.get_doc("acme", "api_session_messages", sid)  # type: ignore[attr-defined]
    assert doc["messages"][0]["content"] == f"I live in Lisbon and I'm {FORGOTTEN}."
    assert doc["forgotten_keys"] == ["diet"]


def test_a_closed_sessions_episode_loses_the_points_that_quote_a_forgotten_field() -> None:
    """Was: forget("trip_destination") left "trip_destination: Tokyo" in the episode of the session it was said in,
    and recall / episodes() kept showing it."""
    m = _memory()
    sid = m.open_session("acme", "u9", now=T0)
    m.write("acme", "u9", "context", "trip_destination", "Tokyo", session_id=sid, now=T0 + 1)
    m.write("acme", "u9", "context", "current_task", "book a hotel", session_id=sid, now=T0 + 1)
    closed = m.close_session(sid, tenant="acme", now=T0 + 2)
    assert closed.episode is not None and "trip_destination: Tokyo" in closed.episode.value["points"]
    m.forget("acme", "u9", "trip_destination", now=T0 + 3)
    [episode] = m.episodes("acme", "u9", now=T0 + 4)
    assert episode.value["points"] == ["current_task: book a hotel"]
    recalled = json.dumps([r.value for r in m.recall("acme", "u9", k=20, now=T0 + 4)], ensure_ascii=False)
    assert "Tokyo" not in recalled and "book a hotel" in recalled
    versions = m.store.history("acme", "u9", episode.key)  # type: ignore[attr-defined]
    assert versions and all("Tokyo" not in json.dumps(v.value) for v in versions)


def test_forget_range_drops_exactly_the_points_of_the_versions_it_erases() -> None:
    m = _memory()
    first = m.open_session("acme", "u10", now=T0)
    m.write("acme", "u10", "context", "mood", "tired", session_id=first, now=T0 + 1)
    m.close_session(first, tenant="acme", now=T0 + 2)
    second = m.open_session("acme", "u10", now=T0 + 100)
    m.write("acme", "u10", "context", "mood", "cheerful", session_id=second, now=T0 + 101)
    m.close_session(second, tenant="acme", now=T0 + 102)
    third = m.open_session("acme", "u10", now=T0 + 20)  # said inside the range, closed after it
    m.write("acme", "u10", "context", "plan", "call mum", session_id=third, now=T0 + 21)
    m.write("acme", "u10", "context", "errand", "buy milk", session_id=third, now=T0 + 300)
    m.close_session(third, tenant="acme", now=T0 + 301)
    m.forget_range("acme", "u10", since=T0, until=T0 + 50, now=T0 + 400)  # the first mood, the first episode, the plan
    points = sorted(e.value["points"] for e in m.episodes("acme", "u10", now=T0 + 401))
    assert points == [["errand: buy milk"], ["mood: cheerful"]]
