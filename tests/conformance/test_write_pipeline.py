"""Write pipeline decisions on every backend: ADD/UPDATE/NOOP/REJECT with stable reasons."""

from __future__ import annotations

import pytest

from usermem import InvalidArgument, Op, Reason, ValidationError
from usermem.model import Kind, Source

T0 = 1_790_000_000.0
DAY = 86_400.0


def test_add_update_noop_and_history(make_memory):
    m = make_memory()
    assert m.write("t", "u", "preference", "reply_length", "short", now=T0).op is Op.ADD
    assert m.write("t", "u", "preference", "reply_length", "short", now=T0 + 1).op is Op.NOOP
    r = m.write("t", "u", "preference", "reply_length", "long", now=T0 + 2)
    assert r.op is Op.UPDATE and r.memory.value == "long"
    hist = m.history("t", "u", "reply_length")
    assert [h.value for h in hist] == ["short", "long"]
    assert hist[0].superseded_by == hist[1].id and hist[1].prev_version_id == hist[0].id
    assert hist[0].superseded_at == T0 + 2 and hist[1].is_current


def test_profile_alias_and_kind_defaults(make_memory):
    m = make_memory()
    r = m.write("t", "u", "profile", "occupation", "儿科医生", now=T0)
    assert r.memory.kind is Kind.FACT and r.memory.importance == pytest.approx(0.9)
    s = m.write("t", "u", "situation", "open_issue", "refund pending", now=T0).memory
    assert s.expires_at == pytest.approx(T0 + 30 * DAY)
    e = m.write("t", "u", "episode", "refund_2026_09", "refund submitted", now=T0).memory
    assert e.expires_at == pytest.approx(T0 + 180 * DAY)
    p = m.write("t", "u", "preference", "language", "zh", now=T0).memory
    assert p.expires_at is None


def test_source_priority(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "plan", "annual", source="system", now=T0)
    r = m.write("t", "u", "fact", "plan", "monthly", source="extracted", now=T0 + 1)
    assert r.op is Op.REJECT and r.reason is Reason.LOWER_PRIORITY_SOURCE and r.memory is None
    assert m.write("t", "u", "fact", "plan", "monthly", source="system", now=T0 + 2).op is Op.UPDATE
    # Equal authority may update; higher authority restating the same value upgrades provenance.
    m.write("t", "u", "fact", "city", "Hangzhou", source="extracted", now=T0)
    up = m.write("t", "u", "fact", "city", "Hangzhou", source="user_confirmed", now=T0 + 1)
    assert up.op is Op.UPDATE and up.memory.source is Source.USER_CONFIRMED
    assert m.write("t", "u", "fact", "city", "Shanghai", source="extracted", now=T0 + 2).op is Op.REJECT


def test_field_authority_order_user_over_system_for_contact(make_memory):
    m = make_memory()
    m.write("t", "u", "preference", "contact", "email only", source="user_confirmed", now=T0)
    r = m.write("t", "u", "preference", "contact", "phone", source="system", now=T0 + 1)
    assert r.op is Op.REJECT and r.reason is Reason.LOWER_PRIORITY_SOURCE


def test_expired_head_does_not_block_and_is_linked(make_memory):
    m = make_memory()
    first = m.write("t", "u", "situation", "open_issue", "double charge", source="system", now=T0).memory
    r = m.write("t", "u", "situation", "open_issue", "new issue", source="extracted", now=T0 + 31 * DAY)
    assert r.op is Op.ADD and r.memory.prev_version_id == first.id
    assert [h.value for h in m.history("t", "u", "open_issue")] == ["double charge", "new issue"]


@pytest.mark.parametrize(
    ("kind", "key", "value", "source"),
    [
        ("fact", "", "x", "extracted"),
        ("fact", "Bad Key", "x", "extracted"),
        ("fact", "k" * 65, "x", "extracted"),
        ("fact", "name", "x", "gossip"),
        ("mood", "name", "x", "extracted"),
        ("fact", "name", None, "extracted"),
        ("fact", "name", "   ", "extracted"),
        ("fact", "name", "x" * 20_000, "extracted"),
        ("fact", "name", float("nan"), "extracted"),
        ("fact", "name", {"a": object()}, "extracted"),
    ],
)
def test_invalid_input_is_rejected_not_raised(make_memory, kind, key, value, source):
    m = make_memory()
    r = m.write("t", "u", kind, key, value, source=source, now=T0)
    assert r.op is Op.REJECT and r.reason is Reason.INVALID_INPUT and r.detail
    assert m.recall("t", "u", now=T0) == []
    assert m.audit("t")[-1].reason == "invalid_input"


def test_out_of_range_importance_is_invalid_input(make_memory):
    m = make_memory()
    r = m.write("t", "u", "fact", "name", "Ann", importance=1.5, now=T0)
    assert r.op is Op.REJECT and r.reason is Reason.INVALID_INPUT


@pytest.mark.parametrize("bad", [None, 42, b"bytes"])
def test_wrong_types_raise_typed_errors(make_memory, bad):
    m = make_memory()
    with pytest.raises(InvalidArgument):
        m.write(bad, "u", "fact", "name", "x")
    with pytest.raises(InvalidArgument):
        m.write("t", "u", "fact", bad, "x")


def test_empty_ids_are_validation_errors(make_memory):
    m = make_memory()
    with pytest.raises(ValidationError):
        m.write("", "u", "fact", "name", "x")
    with pytest.raises(ValidationError):
        m.recall("t", "\x00")


@pytest.mark.parametrize("key", ["card_number", "password", "id_number", "login_password", "bank-card", "密码",
                                 "身份证号", "银行卡号"])
def test_forbidden_keys(make_memory, key):
    m = make_memory()
    r = m.write("t", "u", "fact", key, "anything", now=T0)
    assert r.op is Op.REJECT and r.reason is Reason.FORBIDDEN_KEY


@pytest.mark.parametrize(
    "value",
    [
        "我的身份证号是 11010519491231002X",
        "身份证 110105 19491231 002X",
        "card 6222 0212 3456 7890 128",  # UnionPay, Luhn-valid
        "4111-1111-1111-1111",
        "我的密码是abc123456",
        "password: hunter2!",
        {"nested": ["ok", "pwd=S3cret!x"]},
        {"card_number": "redacted"},
    ],
)
def test_sensitive_values_rejected_under_any_key(make_memory, value):
    m = make_memory()
    r = m.write("t", "u", "fact", "notes", value, now=T0)
    assert r.op is Op.REJECT and r.reason is Reason.SENSITIVE_VALUE


@pytest.mark.parametrize(
    "value",
    ["退款 468 元，订单号 202609031234567890", "会议在 2026-09-03 14:30", "快递单号 SF1234567890123",
     "version 3.12.1, postcode 310000", "order 4111111111111111 shipped", 1234567890123, "amount 19,999.00"],
)
def test_ordinary_numbers_pass(make_memory, value):
    m = make_memory()
    r = m.write("t", "u", "fact", "notes", value, now=T0)
    assert r.op is Op.ADD, r.detail


def test_every_decision_is_audited_without_values(make_memory):
    m = make_memory()
    m.write("t", "u", "fact", "name", "Ann", now=T0)
    m.write("t", "u", "fact", "notes", "我的密码是abc123456", now=T0)
    m.write("t", "u", "fact", "password", "abc123456", now=T0)
    events = m.audit("t", user_id="u")
    assert [(e.op, e.reason) for e in events] == [("ADD", None), ("REJECT", "sensitive_value"),
                                                  ("REJECT", "forbidden_key")]
    assert all("abc123456" not in repr(e) and "Ann" not in repr(e) for e in events)


def test_batch_is_one_transaction_with_one_change_set(make_memory):
    m = make_memory()
    results = m.write_many("t", "u", [
        {"kind": "preference", "key": "reply_length", "value": "short"},
        {"kind": "fact", "key": "password", "value": "x"},
        {"kind": "preference", "key": "report_format", "value": "markdown"},
    ], now=T0)
    assert [r.op for r in results] == [Op.ADD, Op.REJECT, Op.ADD]
    assert results[0].memory.change_set_id == results[2].memory.change_set_id is not None


def test_batch_limit_and_bad_items(make_memory):
    m = make_memory()
    with pytest.raises(ValidationError):
        m.write_many("t", "u", [{"kind": "fact", "key": f"k{i}", "value": i} for i in range(501)])
    with pytest.raises(ValidationError):
        m.write_many("t", "u", [{"kind": "fact", "key": "k", "value": 1, "colour": "red"}])
    assert m.recall("t", "u") == []
