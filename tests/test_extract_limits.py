"""What one extraction call reads is bounded (`Limits.max_extract_chars`), and what is longer than one call is
read in parts: a session's transcript at close, an imported conversation.

Was: a session holding more than 500 messages (it may keep 2,000) lost its whole close-time extraction (the call
refused the transcript; the hook logged it), an imported conversation longer than 500 messages or with one
pasted document over 20,000 characters failed the whole import, and one ingest request could hold
500 x 20,000 characters (~30 minutes of extraction CPU at ~0.2 ms per character)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apihelp import T0, make_api
from usermem import Memory, ValidationError
from usermem.config import load_settings
from usermem.policy.validate import DEFAULT_LIMITS
from usermem.understand.text import coerce_messages, newest_within, parts, pieces

BUDGET = DEFAULT_LIMITS.max_extract_chars
LONG = DEFAULT_LIMITS.max_message_chars - 100  # a message within its own limit


def _memory() -> Memory:
    return Memory("sqlite:///:memory:", settings=load_settings(env={}, embedder="none"))


def _facts(m: Memory, user: str, at: float) -> dict[str, object]:
    return {r.key: r.value for r in m.recall("acme", user, k=50, now=at) if not r.key.startswith("session.")}


def _filler(n: int, size: int = 12) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"ok {i} ".ljust(size, ".")} for i in range(n)]


# -- the limit of one call ---------------------------------------------------------------------------------------

def test_one_call_refuses_more_characters_than_its_budget_and_names_the_field() -> None:
    within = [{"role": "user", "content": "x" * LONG}] * (BUDGET // LONG)
    assert len(coerce_messages(within)) == BUDGET // LONG
    over = [*within, {"role": "user", "content": "x" * LONG}]
    with pytest.raises(ValidationError) as err:
        coerce_messages(over)
    assert err.value.field == "messages" and str(BUDGET) in str(err.value)


def test_ingest_over_the_budget_is_a_422_and_writes_nothing() -> None:
    api = make_api()
    try:
        h = api.h(api.admin_a)
        msgs = [{"role": "user", "content": "我住在成都。" + "今天天气不错。" * (LONG // 7)}] * (BUDGET // LONG + 1)
        r = api.http.post("/v1/users/alice/ingest", headers=h, json={"messages": msgs, "now": T0})
        assert r.status_code == 422, r.text
        assert api.memory.recall("acme", "alice", k=10, now=T0 + 1) == []
        ok = api.http.post("/v1/users/alice/ingest", headers=h, json={"messages": msgs[:1], "now": T0})
        assert ok.status_code == 200 and "成都" in ok.text
    finally:
        api.memory.close()


def test_add_messages_with_extraction_over_the_budget_appends_nothing() -> None:
    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "hello"}], now=T0 + 1)
    too_much = [{"role": "user", "content": "y" * LONG}] * (BUDGET // LONG + 1)
    with pytest.raises(ValidationError):
        m.add_messages(sid, too_much, extract=True, now=T0 + 2)
    doc = m.store.get_doc("acme", "api_session_messages", sid)  # type: ignore[attr-defined]
    assert doc is not None and len(doc["messages"]) == 1  # nothing half-written
    added = m.add_messages(sid, too_much, now=T0 + 3)  # without extraction the transcript takes them
    assert added.added == len(too_much)


# -- longer than one call: read in parts -------------------------------------------------------------------------

def test_a_session_longer_than_one_call_is_extracted_at_close_from_beginning_to_end() -> None:
    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "I'm vegan, by the way."}, *_filler(299)], now=T0 + 1)
    m.add_messages(sid, [*_filler(300), {"role": "user", "content": "I live in Lisbon now."}], now=T0 + 2)
    closed = m.close_session(sid, tenant="acme", now=T0 + 3)
    assert closed.session.messages == 601
    facts = _facts(m, "u1", T0 + 4)
    assert facts.get("city") == "Lisbon" and "vegan" in json.dumps(facts.get("diet"))
    written = [r for r in m.history("acme", "u1", "city")] + [r for r in m.history("acme", "u1", "diet")]
    assert len({r.change_set_id for r in written}) == 1  # one change set for the close


def test_a_later_part_of_the_transcript_replaces_an_earlier_parts_value() -> None:
    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    m.add_messages(sid, [{"role": "user", "content": "我住在杭州。"}, *_filler(450)], now=T0 + 1)
    m.add_messages(sid, [*_filler(100), {"role": "user", "content": "我搬家了，现在住在成都。"}], now=T0 + 2)
    m.close_session(sid, tenant="acme", now=T0 + 3)
    assert _facts(m, "u1", T0 + 4).get("city") == "成都"


def test_close_reads_the_newest_text_within_its_bound_and_logs_what_it_left(caplog: Any) -> None:
    from usermem.understand.service import SESSION_EXTRACT_CHARS

    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    old = [{"role": "user", "content": "I live in Porto."}] + [{"role": "assistant", "content": "z" * LONG}] * 25
    m.add_messages(sid, old, now=T0 + 1)
    assert 25 * LONG > SESSION_EXTRACT_CHARS
    m.add_messages(sid, [{"role": "user", "content": "I'm a nurse."}], now=T0 + 2)
    with caplog.at_level("WARNING", logger="usermem.understand"):
        m.close_session(sid, tenant="acme", now=T0 + 3)
    facts = _facts(m, "u1", T0 + 4)
    assert "nurse" in json.dumps(facts.get("occupation")) and "city" not in facts
    assert any("newest" in r.getMessage() and sid in r.getMessage() for r in caplog.records)


def test_a_transcript_given_as_one_long_text_at_close_is_read_in_pieces() -> None:
    m = _memory()
    sid = m.open_session("acme", "u1", now=T0)
    text = "\n".join(["just chatting about the weather"] * 1500 + ["I live in Lisbon."])
    assert len(text) > DEFAULT_LIMITS.max_message_chars
    m.close_session(sid, transcript=text, tenant="acme", now=T0 + 1)
    assert _facts(m, "u1", T0 + 2).get("city") == "Lisbon"


def test_an_imported_conversation_longer_than_one_call_is_read_and_a_pasted_document_skipped() -> None:
    from usermem.interfaces.importer import import_conversations

    msgs = [{"sender": "human", "text": "I'm allergic to peanuts.", "created_at": "2026-09-21T10:00:00Z"}]
    msgs += [{"sender": "human" if i % 2 else "assistant", "text": f"ok {i}", "created_at": "2026-09-21T10:00:01Z"}
             for i in range(600)]
    msgs += [{"sender": "human", "text": "q" * (DEFAULT_LIMITS.max_message_chars + 1),
              "created_at": "2026-09-21T10:00:02Z"},
             {"sender": "human", "text": "我住在成都。", "created_at": "2026-09-21T10:00:03Z"}]
    m = _memory()
    report = import_conversations(m, "acme", "bob", [{"uuid": "c1", "name": "long", "chat_messages": msgs}])
    assert (report.ingested, report.skipped_messages) == (1, 1)
    export = m.export("acme", "bob")["fields"]
    assert "allergy" in export and "city" in export


# -- the helpers -------------------------------------------------------------------------------------------------

_msgs = st.lists(st.builds(lambda n: {"role": "user", "content": "a" * n}, st.integers(0, 60)), max_size=40)


@given(_msgs, st.integers(1, 7), st.integers(1, 120))
@settings(max_examples=200, deadline=None)
def test_parts_keep_every_message_in_order_each_within_the_limits(msgs: list[dict[str, str]], most: int,
                                                                  budget: int) -> None:
    got = parts(msgs, max_messages=most, max_chars=budget)
    assert [x for p in got for x in p] == msgs
    for p in got:
        assert 1 <= len(p) <= most
        assert sum(len(x["content"]) for x in p) <= budget or len(p) == 1  # one message over the budget alone
    for a, b in itertools.pairwise(got):  # greedy: the next message did not fit
        assert len(a) == most or sum(len(x["content"]) for x in a + b[:1]) > budget


@given(_msgs, st.integers(0, 200))
@settings(max_examples=200, deadline=None)
def test_newest_within_is_the_longest_suffix_within_the_budget(msgs: list[dict[str, str]], budget: int) -> None:
    got = newest_within(msgs, budget)
    assert got == msgs[len(msgs) - len(got):]
    assert sum(len(x["content"]) for x in got) <= budget
    if len(got) < len(msgs):
        assert sum(len(x["content"]) for x in msgs[len(msgs) - len(got) - 1:]) > budget


@given(st.text(alphabet=st.sampled_from("ab \n中"), max_size=300), st.integers(1, 40))
@settings(max_examples=200, deadline=None)
def test_pieces_cut_a_text_into_messages_within_the_limit_losing_only_blank_runs(text: str, most: int) -> None:
    got = pieces(text, most)
    assert all(0 < len(p["content"]) <= most and p["role"] == "user" for p in got)
    assert "".join("".join(p["content"] for p in got).split()) == "".join(text.split())
