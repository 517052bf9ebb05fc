"""Write guards: forbidden key spellings, PII anywhere in a value, per-contract allowances; nothing half-written."""

from __future__ import annotations

import json

import pytest

from usermem import Op, Reason
from usermem.policy.contracts import is_forbidden_key

T0 = 1_790_000_000.0


@pytest.mark.parametrize("key", ["user_id_number", "cardNumber", "my_idcard", "bank-card-no", "client_secret",
                                 "login_password", "passport_no", "otp", "验证码", "银行卡号码", "支付密码"])
def test_forbidden_key_spellings(key):
    assert is_forbidden_key(key)


@pytest.mark.parametrize("key", ["valid_number", "paid_card", "secret_santa", "spin", "token_budget", "cardinal",
                                 "passion", "pinned_topic", "idle_minutes"])
def test_words_that_only_contain_letters_of_forbidden_names(key):
    assert not is_forbidden_key(key)


@pytest.mark.parametrize("value", [
    "13800138000", 13800138000, 13800138000.0, {"note": "卡号 6222021234567890128"}, ["ok", {"x": "pwd=Secr3t!"}],
    {"13800138000": "key holds a phone"}, {"password": "x"}, "身份证11010519491231002Xa",
])
def test_sensitive_values_are_rejected_and_never_stored(mem, value):
    r = mem.write("acme", "u", "fact", "city", value, now=T0)
    assert r.op is Op.REJECT and r.reason is Reason.SENSITIVE_VALUE, r
    assert mem.export("acme", "u", now=T0)["fields"] == {}
    audit = mem.audit("acme", action="write")[-1]
    assert audit.reason == "sensitive_value"
    assert "13800138000" not in json.dumps(audit.detail) and "Secr3t" not in json.dumps(audit.detail)


def test_email_only_where_the_contract_allows_it(mem):
    assert mem.write("acme", "u", "fact", "email", "li@example.com", now=T0).op is Op.ADD
    assert mem.write("acme", "u", "fact", "occupation", "li@example.com", now=T0).reason is Reason.SENSITIVE_VALUE
    # an e-mail field still refuses a card number
    assert mem.write("acme", "u", "fact", "email", "4111 1111 1111 1111", now=T0).reason is Reason.SENSITIVE_VALUE


def test_phone_field_allows_mobiles_but_is_l2(mem):
    assert mem.write("acme", "u", "fact", "phone", "+86 138 0013 8000", now=T0).op is Op.ADD
    assert mem.recall("acme", "u", now=T0) == []


def test_batch_with_a_sensitive_item_writes_the_others(mem):
    res = mem.write_many("acme", "u", [{"kind": "fact", "key": "city", "value": "杭州"},
                                       {"kind": "fact", "key": "occupation", "value": "电话13800138000"}], now=T0)
    assert [r.op for r in res] == [Op.ADD, Op.REJECT]
    assert [r.key for r in mem.recall("acme", "u", now=T0)] == ["city"]


def test_corpus_every_pii_sentence_is_refused_and_benign_ones_stored():
    """The seed's write-quality bar: 100 % of sensitive values rejected; ordinary numbers still stored."""
    from usermem import Memory, load_settings
    from usermem.privacy_eval import build_corpus

    m = Memory(settings=load_settings(env={}, embedder="none"))
    try:
        corpus = build_corpus(pii=300, benign=300)
        pii = [s.text for s in corpus if not s.benign]
        benign = [s.text for s in corpus if s.benign]
        res = []
        for i in range(0, len(pii), 100):
            res += m.write_many("acme", "u", [{"kind": "episode", "key": f"note_{i + j}", "value": t}
                                              for j, t in enumerate(pii[i:i + 100])], now=T0)
        refused = [r for r in res if r.op is Op.REJECT and r.reason is Reason.SENSITIVE_VALUE]
        assert len(refused) == len(pii)
        ok = []
        for i in range(0, len(benign), 100):
            ok += m.write_many("acme", "u", [{"kind": "episode", "key": f"fine_{i + j}", "value": t}
                                             for j, t in enumerate(benign[i:i + 100])], now=T0)
        assert [r.detail for r in ok if r.reason is Reason.SENSITIVE_VALUE] == []
    finally:
        m.close()
