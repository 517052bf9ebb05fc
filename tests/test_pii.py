"""PII detectors: the generated corpus meets the targets; specific shapes and non-PII numbers; properties."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.errors import InvalidArgument
from usermem.policy.pii import PIIKind, cn_id_check_digit, is_valid_cn_id, luhn_ok
from usermem.privacy import contains, detect, redact, redact_json, summarize
from usermem.privacy_eval import TARGET_MAX_FP_RATE, build_corpus, evaluate


@pytest.fixture(scope="module")
def report():
    corpus = build_corpus()
    assert sum(1 for s in corpus if not s.benign) >= 500
    assert sum(1 for s in corpus if s.benign) >= 500
    return evaluate(corpus)


@pytest.mark.parametrize("kind", ["cn_id", "bank_card", "cn_mobile"])
def test_corpus_recall_is_total_on_ids_cards_and_mobiles(report, kind):
    v = report["per_kind"][kind]
    assert v["planted"] >= 100
    assert v["recall"] == 1.0, report["misses"]


def test_corpus_false_positive_rate_per_kind(report):
    for kind, v in report["per_kind"].items():
        assert v["false_positive_rate"] <= TARGET_MAX_FP_RATE, (kind, report["false_positives"])
    assert report["meets_targets"]


def test_corpus_other_kinds_are_recalled(report):
    for kind in ("password", "api_key", "email"):
        assert report["per_kind"][kind]["recall"] >= 0.98, report["misses"]


def test_corpus_is_deterministic():
    a = [s.text for s in build_corpus(seed=3, pii=50, benign=50)]
    b = [s.text for s in build_corpus(seed=3, pii=50, benign=50)]
    assert a == b


def _kinds(text):
    return [f.kind.value for f in detect(text)]


@pytest.mark.parametrize("text", [
    "身份证号 11010519491231002X",
    "身份证 110105 19491231 002x",
    "ID 110105-1949-1231-002X please",
])
def test_cn_id_with_separators(text):
    assert _kinds(text) == ["cn_id"]


def test_cn_id_validation():
    assert is_valid_cn_id("11010519491231002X")
    assert not is_valid_cn_id("110105194912310021")  # wrong check digit
    assert not is_valid_cn_id("110105194913310020")  # month 13
    first17 = "11010520010229123"  # 2001-02-29 does not exist
    assert not is_valid_cn_id(first17 + cn_id_check_digit(first17))


@pytest.mark.parametrize("text", [
    "手机13800138000", "+86 138 0013 8000", "(+86)138-0013-8000", "（+86）13800138000", "0086 13800138000",
    "call (138) 0013-8000", "+86-(199) 5265-3374", "电话：138 00138000",
])
def test_mobile_shapes(text):
    assert _kinds(text) == ["cn_mobile"]
    assert "8000" not in redact(text)


@pytest.mark.parametrize("text", [
    "卡号 6222 0212 3456 7890 128", "card 4111-1111-1111-1111", "amex 3782 822463 10005", "4111111111111111",
])
def test_card_shapes(text):
    digits = "".join(ch for ch in text if ch.isdigit())
    assert luhn_ok(digits)
    assert _kinds(text) == ["bank_card"]


@pytest.mark.parametrize("text", [
    "订单号：4111111111111111 已发货",  # passes Luhn, but labelled as an order number
    "ISBN 978-1-169-45346-3 / EAN 6130915520158",
    "金额 ¥13,800.00，日期 2024-05-01 13:45:00", "版本 v13.800.138000", "邮编 100080，门牌 1380 号",
    "created_at=1714550400 ms=1714550400123", "客服热线 400-820-8820", "办公室 010-62345678",
    "快递单号 773012345678901", "trace 9f86d081884c7d65 uuid 1c2442f9-298c-43a5-b0cc-ec313571810a",
    "我忘记密码了", "密码：请在设置里修改", "The password is case-sensitive.", "password is too short",
    "Token count: 12345 tokens used",
])
def test_ordinary_text_is_not_flagged(text):
    assert detect(text) == []


@pytest.mark.parametrize("text,secret", [
    ("我的登录密码是Abc12345", "Abc12345"), ("密码：hunter2", "hunter2"), ("password: s3cr3t!", "s3cr3t!"),
    ("pwd=qwerty123", "qwerty123"), ("passwd p@ss1234", "p@ss1234"), ("my password is sunshine", "sunshine"),
    ("支付密码为 886622", "886622"),
])
def test_passwords_stated_as_such(text, secret):
    findings = detect(text)
    assert [f.kind for f in findings] == [PIIKind.PASSWORD]
    assert text[findings[0].start : findings[0].end] == secret
    assert secret not in redact(text)


def test_api_keys_by_shape():
    key = "sk-" + "a1B2" * 12
    assert _kinds(f"use {key} now") == ["api_key"]
    assert _kinds("AKIAIOSFODNN7EXAMPLE") == ["api_key"]
    assert _kinds("ghp_" + "x1" * 18) == ["api_key"]


def test_email_next_to_chinese():
    assert _kinds("邮件发到tina75@davila.com就行") == ["email"]


def test_redact_placeholder_and_kinds():
    text = "手机13800138000，邮箱a@b.io"
    assert redact(text) == "手机[已脱敏]，邮箱[已脱敏]"
    assert redact(text, placeholder="[REDACTED]") == "手机[REDACTED]，邮箱[REDACTED]"
    assert redact(text, kinds=["cn_mobile"]) == "手机[已脱敏]，邮箱a@b.io"
    assert summarize(text) == {"cn_mobile": 1, "email": 1}
    assert contains(text) and not contains("今天天气不错")


def test_redact_json_walks_values_keys_and_integers():
    out = redact_json({"phone": 13800138000, "note": ["卡 4111111111111111"], "n": 5, "ok": True})
    assert out == {"phone": "[已脱敏]", "note": ["卡 [已脱敏]"], "n": 5, "ok": True}


def test_bad_input_is_a_typed_error():
    with pytest.raises(InvalidArgument):
        detect(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        redact("x", placeholder=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        detect("x", kinds=["nope"])


# --- properties ----------------------------------------------------------------------------------------

_rng_digits = st.text(alphabet=string.digits, min_size=17, max_size=17)


@st.composite
def cn_ids(draw):
    region = draw(st.sampled_from(["110105", "310104", "440305", "510107", "650102"]))
    year = draw(st.integers(1920, 2020))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 28))
    seq = draw(st.integers(0, 999))
    first17 = f"{region}{year:04d}{month:02d}{day:02d}{seq:03d}"
    return first17 + cn_id_check_digit(first17)


@st.composite
def cards(draw):
    prefix = draw(st.sampled_from(["4", "51", "55", "62", "6011", "35", "2221", "2720"]))
    length = 16
    body = prefix + "".join(draw(st.sampled_from(string.digits)) for _ in range(length - len(prefix) - 1))
    return next(body + d for d in string.digits if luhn_ok(body + d))


_filler = st.text(alphabet="这是一些普通的文字 and words ，。", max_size=20)


@settings(max_examples=200, deadline=None)
@given(cn_ids(), _filler, _filler)
def test_property_every_valid_id_is_detected_and_redacted(number, before, after):
    text = f"{before}身份证{number}{after}"
    assert number not in redact(text)


@settings(max_examples=200, deadline=None)
@given(cards(), _filler, st.sampled_from(["", " ", "-"]))
def test_property_every_valid_card_is_redacted(number, before, sep):
    grouped = sep.join(number[i : i + 4] for i in range(0, len(number), 4))
    out = redact(f"{before}卡号{grouped}。")
    assert number[-8:] not in out.replace(sep, "") if sep else number not in out


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_property_redaction_is_idempotent_and_leaves_nothing(text):
    once = redact(text)
    assert detect(once) == [] or redact(once) == once
    assert redact(once) == once


def test_random_mobiles_always_found():
    rng = random.Random(5)
    for _ in range(500):
        n = "1" + rng.choice("3456789") + "".join(rng.choice(string.digits) for _ in range(9))
        assert _kinds(f"我的电话{n}谢谢") == ["cn_mobile"], n


@pytest.mark.parametrize("text", ["the spin is fast", "bypass=true", "opinion: great", "our passport: blue one"])
def test_password_labels_are_whole_words(text):
    assert detect(text) == []


def test_an_ipv4_address_is_not_a_mobile_number():
    """Found by the independent PII corpus: dots are mobile separators ("138.0013.8000"), but four groups of
    at most three digits, each ≤ 255, are an IPv4 address."""
    from usermem.privacy import detect

    assert detect("Server 177.222.27.140 port 31778, latency 95 ms") == []
    assert detect("网关 192.168.13.100") == []
    assert [f.kind.value for f in detect("手机 177.2222.7140")] == ["cn_mobile"]
