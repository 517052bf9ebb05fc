"""Confirmation, denial, version chains, revert and change-set revert (seed 004 §2.3, §4.1)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from usermem import ConflictError, Memory, NotFound, Op, Reason, Source
from usermem.model import DAY, MemoryRecord
from usermem.store.base import LiveQuery

T0 = 1_790_000_000.0
T, U = "edu", "stu1"


@pytest.fixture
def mem(lean_mem: Memory) -> Memory:
    """These tests are about lifecycle, not relevance (those that rank with recall(query=...) use `hybrid_mem`)."""
    return lean_mem


def chain_ok(history: list[MemoryRecord]) -> None:
    """Linear: each version points back to the one before and forward to the one after; one current."""
    assert history, "empty history"
    assert history[0].prev_version_id is None
    for older, newer in itertools.pairwise(history):
        assert newer.prev_version_id == older.id
        assert older.superseded_by == newer.id and older.superseded_at is not None
    assert [r.is_current for r in history] == [False] * (len(history) - 1) + [True]


def values(m: Memory, user: str = U, now: float = T0 + DAY, **kw) -> dict[str, object]:
    return {r.key: r.value for r in m.recall(T, user, k=50, now=now, **kw)}


# -- confirm -----------------------------------------------------------------------------------------------

def test_confirm_updates_last_confirmed_at_in_place(mem: Memory):
    w = mem.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    got = mem.confirm(T, U, w.memory.id, now=T0 + 10 * DAY, actor="agent-7")
    assert got.id == w.memory.id and got.last_confirmed_at == T0 + 10 * DAY
    assert mem.get(T, w.memory.id).last_confirmed_at == T0 + 10 * DAY
    assert len(mem.history(T, U, "reply_length")) == 1
    # Confirming again earlier never moves the timestamp back.
    mem.confirm(T, U, w.memory.id, now=T0 + 5 * DAY)
    assert mem.get(T, w.memory.id).last_confirmed_at == T0 + 10 * DAY
    entry = mem.audit(T, user_id=U, action="confirm")[0]
    assert entry.memory_id == w.memory.id and entry.actor == "agent-7" and "concise" not in entry.detail_json()


@pytest.mark.parametrize("source, confidence", [("extracted", None), ("inferred", None), ("user_confirmed", 0.7)])
def test_confirm_upgrades_provenance_with_a_new_version(mem: Memory, source, confidence):
    w = mem.write(T, U, "preference", "report_format", "markdown", source=source, confidence=confidence, now=T0)
    at = T0 + 3 * DAY
    got = mem.confirm(T, U, w.memory.id, now=at)
    assert got.id != w.memory.id and got.value == "markdown"
    assert got.source is Source.USER_CONFIRMED and got.confidence == 1.0 and got.last_confirmed_at == at
    assert got.prev_version_id == w.memory.id
    assert mem.get(T, w.memory.id).last_confirmed_at == at  # the confirmed version records it too
    chain_ok(mem.history(T, U, "report_format"))
    s = mem.recall_scored(T, U, keys=["report_format"], now=at)[0]
    assert s.weight == pytest.approx(1.0) and s.memory.id == got.id
    # An extraction can no longer silently replace what the user confirmed.
    r = mem.write(T, U, "preference", "report_format", "pdf", source="extracted", now=at + 1)
    assert r.op is Op.REJECT and r.reason is Reason.LOWER_PRIORITY_SOURCE


def test_a_user_confirming_the_billing_plan_does_not_take_it_over(mem: Memory):
    w = mem.write(T, U, "fact", "plan", "annual pro", source="system", now=T0)
    got = mem.confirm(T, U, w.memory.id, now=T0 + DAY)
    assert got.id == w.memory.id and got.source is Source.SYSTEM and got.last_confirmed_at == T0 + DAY


def test_confirm_errors(mem: Memory):
    w1 = mem.write(T, U, "preference", "likes", "tea", source="user_confirmed", now=T0)
    w2 = mem.write(T, U, "preference", "likes", "coffee", source="user_confirmed", now=T0 + 1)
    with pytest.raises(ConflictError, match="replaced"):
        mem.confirm(T, U, w1.memory.id, now=T0 + 2)
    with pytest.raises(NotFound):
        mem.confirm(T, U, "no-such-id", now=T0 + 2)
    with pytest.raises(NotFound):
        mem.confirm(T, "someone-else", w2.memory.id, now=T0 + 2)
    with pytest.raises(NotFound):
        mem.confirm("other-tenant", U, w2.memory.id, now=T0 + 2)
    s = mem.write(T, U, "situation", "open_issue", "refund pending", now=T0)
    with pytest.raises(ConflictError, match="expired"):
        mem.confirm(T, U, s.memory.id, now=T0 + 31 * DAY)
    d = mem.deny(T, U, w2.memory.id, now=T0 + 3)
    with pytest.raises(ConflictError):
        mem.confirm(T, U, d.id, now=T0 + 4)


# -- deny --------------------------------------------------------------------------------------------------

def test_deny_supersedes_with_a_retraction_and_keeps_history(mem: Memory):
    w = mem.write(T, U, "preference", "news_topics", "pause tech news", source="extracted", now=T0)
    tomb = mem.deny(T, U, w.memory.id, now=T0 + 20 * DAY, actor="user")
    assert tomb.retracted and tomb.value is None and tomb.prev_version_id == w.memory.id
    assert tomb.actor == "user" and tomb.source is Source.USER_CONFIRMED
    history = mem.history(T, U, "news_topics")
    assert [h.value for h in history] == ["pause tech news", None]
    chain_ok(history)
    assert "news_topics" not in values(mem, now=T0 + 20 * DAY)
    assert mem.deny(T, U, w.memory.id, now=T0 + 21 * DAY).id == tomb.id  # idempotent
    assert [e.op for e in mem.audit(T, user_id=U, action="deny")] == ["UPDATE"]
    # A denial does not block a later statement of any source.
    again = mem.write(T, U, "preference", "news_topics", "follow AI chips", source="inferred", now=T0 + 22 * DAY)
    assert again.op is Op.ADD and again.memory.prev_version_id == tomb.id


def test_a_user_cannot_retract_what_the_billing_system_holds(mem: Memory):
    w = mem.write(T, U, "fact", "plan", "annual pro", source="system", now=T0)
    with pytest.raises(ConflictError, match="held by system"):
        mem.deny(T, U, w.memory.id, now=T0 + 1)
    assert values(mem)["plan"] == "annual pro"


def test_a_denial_can_be_undone(mem: Memory):
    w = mem.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    tomb = mem.deny(T, U, w.memory.id, now=T0 + 1)
    r = mem.revert(T, U, "reply_length", now=T0 + 2)
    assert r.op is Op.ADD and r.memory.value == "concise"
    assert values(mem)["reply_length"] == "concise"
    mem.deny(T, U, r.memory.id, now=T0 + 3)
    tomb2 = mem.history(T, U, "reply_length")[-1]
    undo = mem.revert_change_set(T, tomb2.change_set_id, now=T0 + 4)
    assert undo.reverted == 1 and values(mem)["reply_length"] == "concise"
    assert tomb.change_set_id != tomb2.change_set_id
    chain_ok(mem.history(T, U, "reply_length"))


# -- revert ------------------------------------------------------------------------------------------------

def test_revert_restores_the_previous_value_as_a_new_version(mem: Memory):
    a = mem.write(T, U, "preference", "report_format", "markdown", source="user_confirmed", now=T0)
    b = mem.write(T, U, "preference", "report_format", "word", source="user_confirmed", now=T0 + 3 * DAY)
    r = mem.revert(T, U, "report_format", now=T0 + 4 * DAY, actor="stu1")
    assert r.op is Op.UPDATE and r.memory.value == "markdown" and r.memory.actor == "stu1"
    assert r.memory.id not in (a.memory.id, b.memory.id) and r.memory.prev_version_id == b.memory.id
    history = mem.history(T, U, "report_format")
    assert [h.value for h in history] == ["markdown", "word", "markdown"]
    chain_ok(history)
    assert values(mem, now=T0 + 4 * DAY)["report_format"] == "markdown"
    entry = mem.audit(T, user_id=U, action="revert")[0]
    assert entry.detail["restored_from"] == a.memory.id and "markdown" not in entry.detail_json()
    # "Previous value" again means the one before: it toggles back.
    assert mem.revert(T, U, "report_format", now=T0 + 5 * DAY).memory.value == "word"


def test_revert_to_a_named_version(mem: Memory):
    for i, v in enumerate(["v1", "v2", "v3", "v4"]):
        mem.write(T, U, "preference", "reply_format", v, source="user_confirmed", now=T0 + i)
    history = mem.history(T, U, "reply_format")
    assert mem.revert(T, U, "reply_format", 2, now=T0 + 10).memory.value == "v2"
    assert mem.revert(T, U, "reply_format", history[0].id, now=T0 + 11).memory.value == "v1"
    same = mem.revert(T, U, "reply_format", 1, now=T0 + 12)
    assert same.op is Op.NOOP  # v1 is already current (by value): no new version
    current = mem.history(T, U, "reply_format")[-1]
    assert mem.revert(T, U, "reply_format", current.id, now=T0 + 13).op is Op.NOOP
    assert len(mem.history(T, U, "reply_format")) == 6
    chain_ok(mem.history(T, U, "reply_format"))


def test_revert_errors(mem: Memory):
    w = mem.write(T, U, "preference", "likes", "tea", source="user_confirmed", now=T0)
    other = mem.write(T, U, "preference", "dislikes", "noise", source="user_confirmed", now=T0)
    with pytest.raises(ConflictError, match="no earlier value"):
        mem.revert(T, U, "likes", now=T0 + 1)
    with pytest.raises(NotFound):
        mem.revert(T, U, "never_written", now=T0 + 1)
    with pytest.raises(NotFound):
        mem.revert(T, U, "likes", other.memory.id, now=T0 + 1)  # a version of another key
    with pytest.raises(NotFound):
        mem.revert(T, U, "likes", 5, now=T0 + 1)
    with pytest.raises(NotFound):
        mem.revert("other-tenant", U, "likes", now=T0 + 1)
    mem.deny(T, U, w.memory.id, now=T0 + 2)
    with pytest.raises(ConflictError, match="retraction"):
        mem.revert(T, U, "likes", 2, now=T0 + 3)


def test_revert_respects_source_authority_and_guards(mem: Memory):
    mem.write(T, U, "fact", "plan", "monthly basic", source="extracted", now=T0)
    mem.write(T, U, "fact", "plan", "annual pro", source="system", now=T0 + 1)
    r = mem.revert(T, U, "plan", now=T0 + 2)
    assert r.op is Op.REJECT and r.reason is Reason.LOWER_PRIORITY_SOURCE
    assert values(mem)["plan"] == "annual pro"
    ok = mem.revert(T, U, "plan", now=T0 + 3, source="system", actor="billing-sync")
    assert ok.op is Op.UPDATE and ok.memory.value == "monthly basic"
    # A field disabled since: the old value may not come back.
    from usermem.model import Kind
    from usermem.policy.contracts import FieldContract

    m = Memory(settings=mem.settings, contracts=mem.contracts.with_contract(FieldContract("hobby", Kind.PREFERENCE)))
    m.write(T, U, "preference", "hobby", "chess", source="user_confirmed", now=T0)
    m.write(T, U, "preference", "hobby", "go", source="user_confirmed", now=T0 + 1)
    m.disable_field(T, "hobby", now=T0 + 1.5)
    r = m.revert(T, U, "hobby", now=T0 + 2)
    assert r.op is Op.REJECT and r.reason is Reason.FIELD_DISABLED
    assert [h.value for h in m.history(T, U, "hobby")] == ["chess", "go"]
    m.close()


# -- change sets -------------------------------------------------------------------------------------------

def _settings_form(m: Memory, now: float) -> str:
    results = m.write_many(T, U, [
        {"kind": "preference", "key": "reply_length", "value": "detailed", "source": "user_confirmed"},
        {"kind": "preference", "key": "report_format", "value": "pdf", "source": "user_confirmed"},
        {"kind": "preference", "key": "language", "value": "English", "source": "user_confirmed"},
    ], now=now, actor="settings-form")
    ids = {r.memory.change_set_id for r in results}
    assert len(ids) == 1
    return ids.pop()


def test_revert_change_set_undoes_my_last_settings(mem: Memory):
    mem.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    mem.write(T, U, "preference", "report_format", "markdown", source="user_confirmed", now=T0)
    cs = _settings_form(mem, T0 + DAY)
    assert values(mem, now=T0 + DAY) == {"reply_length": "detailed", "report_format": "pdf", "language": "English"}
    undo = mem.revert_change_set(T, cs, now=T0 + 2 * DAY, actor="stu1")
    assert undo.reverted == 3 and not undo.conflicts and undo.change_set_id != cs
    assert values(mem, now=T0 + 2 * DAY) == {"reply_length": "concise", "report_format": "markdown"}
    for key in ("reply_length", "report_format", "language"):
        chain_ok(mem.history(T, U, key))
    assert mem.history(T, U, "language")[-1].retracted  # the form created it: undo retracts it
    assert len(mem.audit(T, user_id=U, action="revert_change_set")) == 4  # 3 keys + the summary
    # The undo is itself a change set: undoing it re-applies the form.
    redo = mem.revert_change_set(T, undo.change_set_id, now=T0 + 3 * DAY)
    assert redo.reverted == 3
    assert values(mem, now=T0 + 3 * DAY) == {"reply_length": "detailed", "report_format": "pdf",
                                             "language": "English"}


def test_revert_change_set_is_all_or_nothing(mem: Memory):
    mem.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    cs = _settings_form(mem, T0 + DAY)
    mem.write(T, U, "preference", "report_format", "word", source="user_confirmed", now=T0 + 2 * DAY)
    before = {k: len(mem.history(T, U, k)) for k in ("reply_length", "report_format", "language")}
    with pytest.raises(ConflictError, match="report_format"):
        mem.revert_change_set(T, cs, now=T0 + 3 * DAY)
    assert {k: len(mem.history(T, U, k)) for k in before} == before
    part = mem.revert_change_set(T, cs, now=T0 + 3 * DAY, partial=True)
    assert part.reverted == 2 and [(c[1], c[2]) for c in part.conflicts] == [
        ("report_format", "changed after the change set")]
    assert values(mem, now=T0 + 3 * DAY) == {"reply_length": "concise", "report_format": "word"}


def test_revert_change_set_lookup_is_per_tenant(mem: Memory):
    cs = _settings_form(mem, T0)
    with pytest.raises(NotFound):
        mem.revert_change_set("another-tenant", cs, now=T0 + 1)
    with pytest.raises(NotFound):
        mem.revert_change_set(T, uuid.uuid4().hex, now=T0 + 1)


# -- the seed's troubleshooting table (§4.1) ---------------------------------------------------------------

def test_two_versions_effective_at_once_is_impossible(mem: Memory):
    for i, v in enumerate(["markdown", "word", "pdf", "word"]):
        mem.write(T, U, "preference", "report_format", v, source="user_confirmed", now=T0 + i)
    mem.revert(T, U, "report_format", now=T0 + 10)
    history = mem.history(T, U, "report_format")
    assert sum(h.is_current for h in history) == 1
    live = mem.store.live(LiveQuery(T, U, T0 + 11))
    assert [r.key for r in live].count("report_format") == 1
    # The database refuses a second current version even if code tried.
    from usermem.errors import IntegrityError

    stale = history[0].with_changes(id=uuid.uuid4().hex, superseded_by=None, superseded_at=None)
    with pytest.raises(IntegrityError), mem.store.transaction(T, U) as tx:
        tx.insert(stale)


def test_after_a_change_the_old_value_is_never_recalled(hybrid_mem: Memory):
    mem = hybrid_mem
    mem.write(T, U, "preference", "report_format", "markdown", source="user_confirmed", now=T0)
    mem.write(T, U, "preference", "report_format", "word", source="user_confirmed", now=T0 + 3 * DAY)
    for day in (3, 4, 10, 30, 60):
        got = [r.value for r in mem.recall(T, U, k=10, now=T0 + day * DAY + 1) if r.key == "report_format"]
        assert "markdown" not in got
    assert [r.value for r in mem.recall(T, U, k=10, now=T0 + 3 * DAY + 1, query="markdown")] != ["markdown"]


def test_confirmation_updates_last_confirmed_at(mem: Memory):
    w = mem.write(T, U, "preference", "reply_length", "concise", source="user_confirmed", now=T0)
    assert w.memory.last_confirmed_at is None
    mem.confirm(T, U, w.memory.id, now=T0 + 7 * DAY)
    assert mem.recall(T, U, now=T0 + 7 * DAY)[0].last_confirmed_at == T0 + 7 * DAY


# -- property: revert keeps the chain linear and the newest version current ---------------------------------

VALS = ["markdown", "word", "pdf", "纯文本"]
ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(VALS), st.sampled_from(["user_confirmed", "extracted", "system"])),
    st.tuples(st.just("revert"), st.none() | st.integers(min_value=1, max_value=12), st.just("")),
    st.tuples(st.just("deny"), st.none(), st.just("")),
    st.tuples(st.just("confirm"), st.none(), st.just("")),
), min_size=1, max_size=14)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_revert_keeps_the_chain_linear_and_the_newest_version_current(mem: Memory, ops):
    user = uuid.uuid4().hex
    now = T0
    for op, arg, source in ops:
        now += 3600
        history = mem.history(T, user, "report_format")
        try:
            if op == "write":
                mem.write(T, user, "preference", "report_format", arg, source=source, now=now)
            elif op == "revert" and history:
                mem.revert(T, user, "report_format", arg, now=now, source="system")
            elif op in ("deny", "confirm") and history:
                getattr(mem, op)(T, user, history[-1].id, now=now, source="system")
        except (ConflictError, NotFound):
            pass  # e.g. nothing earlier to restore, a retraction named, already denied
        history = mem.history(T, user, "report_format")
        if not history:
            continue
        chain_ok(history)
        newest = history[-1]
        got = [r for r in mem.recall(T, user, k=10, now=now) if r.key == "report_format"]
        if newest.retracted:
            assert got == []
        else:
            assert [r.id for r in got] == [newest.id]


def test_revert_skips_versions_that_only_changed_provenance(mem: Memory):
    mem.write(T, U, "preference", "report_format", "markdown", source="extracted", now=T0)
    mem.write(T, U, "preference", "report_format", "word", source="extracted", now=T0 + 1)
    w = mem.write(T, U, "preference", "report_format", "word", source="user_confirmed", now=T0 + 2)
    assert w.op is Op.UPDATE and w.detail == "source_upgrade"
    r = mem.revert(T, U, "report_format", now=T0 + 3)
    assert r.op is Op.UPDATE and r.memory.value == "markdown"
