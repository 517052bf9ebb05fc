"""Issue 12 item 4: obfuscated PII (full-width and Arabic-Indic digits, zero-width and other Unicode spaces, tabs,
double spaces, `.`/`/`/`_` separators, letters glued before a card, spaced or full-width password labels, bare
label + secret) is detected by the write guard and the output redactor alike, spans map back to the original
text, and benign text (dates, order numbers, prices, product codes) stays clean."""

from __future__ import annotations

import re
import string
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem import Memory, Op, Reason
from usermem.config import load_settings
from usermem.policy.normalize import fold, fold_text
from usermem.policy.pii import PIIKind, cn_id_check_digit, luhn_ok
from usermem.privacy import detect, redact, redact_json

T0 = 1_790_000_000.0
FW = str.maketrans(string.digits, "０１２３４５６７８９")
AR = str.maketrans(string.digits, "٠١٢٣٤٥٦٧٨٩")
DEVA = str.maketrans(string.digits, "०१२३४५६७८९")
ZW = "\u200b"
UNDIGITS = {ord(d): str(i) for t in ("٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९") for i, d in enumerate(t)}

OBFUSCATED = [
    # (text, kind, the secret digits/characters that must disappear)
    ("手机１３８００１３８０００", PIIKind.CN_MOBILE, "13800138000"),
    ("电话 ١٣٨٠٠١٣٨٠٠٠", PIIKind.CN_MOBILE, "13800138000"),
    ("call 138\u200b0013\u200b8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138\t0013\t8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138  0013  8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138.0013.8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138/0013/8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138_0013_8000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 138\u30000013\u30008000", PIIKind.CN_MOBILE, "13800138000"),
    ("手机 1 3 8 0 0 1 3 8 0 0 0", PIIKind.CN_MOBILE, "13800138000"),
    ("卡号 ４１１１ １１１１ １１１１ １１１１", PIIKind.BANK_CARD, "4111111111111111"),
    ("card 4111.1111.1111.1111", PIIKind.BANK_CARD, "4111111111111111"),
    ("card 4111/1111/1111/1111", PIIKind.BANK_CARD, "4111111111111111"),
    ("card 4111_1111_1111_1111", PIIKind.BANK_CARD, "4111111111111111"),
    ("card 4111\u00a01111\u00a01111\u00a01111", PIIKind.BANK_CARD, "4111111111111111"),
    ("visa4111111111111111", PIIKind.BANK_CARD, "4111111111111111"),
    ("卡号card6222021234567890128", PIIKind.BANK_CARD, "6222021234567890128"),
    ("card 4111\u200b1111\u200c1111\u200d1111", PIIKind.BANK_CARD, "4111111111111111"),
    ("身份证 １１０１０５１９４９１２３１００２Ｘ", PIIKind.CN_ID, "11010519491231002"),
    ("身份证 110105.19491231.002X", PIIKind.CN_ID, "11010519491231002"),
    ("身份证 ١١٠١٠٥١٩٤٩١٢٣١٠٠٢X", PIIKind.CN_ID, "11010519491231002"),
    ("密 码是 Xy7#pass", PIIKind.PASSWORD, "Xy7#pass"),
    ("ｐａｓｓｗｏｒｄ: Xy7#pass", PIIKind.PASSWORD, "Xy7#pass"),
    ("ｐａｓｓｗｏｒｄ：ｓ３ｃｒｅｔ！", PIIKind.PASSWORD, "ｓ３ｃｒｅｔ！"),
    ("密码 Xy7#pass", PIIKind.PASSWORD, "Xy7#pass"),
    ("口令 K8s!x9", PIIKind.PASSWORD, "K8s!x9"),
    ("PIN 1234", PIIKind.PASSWORD, "1234"),
    ("银行卡PIN码 886622", PIIKind.PASSWORD, "886622"),
    ("wifi password is sunshine99", PIIKind.PASSWORD, "sunshine99"),
    ("pass\u200bword: hunter22", PIIKind.PASSWORD, "hunter22"),
    ("邮箱 li.ming\u200b@example.com", PIIKind.EMAIL, "li.ming"),
    ("mail ｌｉ＠ｅｘａｍｐｌｅ．ｃｏｍ", PIIKind.EMAIL, "ｌｉ＠ｅｘａｍｐｌｅ"),
]


@pytest.mark.parametrize("text,kind,secret", OBFUSCATED)
def test_obfuscated_values_are_detected_and_redacted_in_place(text, kind, secret):
    findings = detect(text)
    assert [f.kind for f in findings] == [kind], (text, findings)
    out = redact(text, "[X]")
    assert secret not in out and "[X]" in out
    f = findings[0]
    # the span is a span of the ORIGINAL text: what is left around it is exactly the original context
    assert out == text[: f.start] + "[X]" + text[f.end :]
    found = fold_text(text[f.start : f.end])
    assert fold_text(secret)[:4] in found or fold_text(secret)[:4] in re.sub(r"[\s\-./_]", "", found)


@pytest.mark.parametrize("text,kind,secret", OBFUSCATED)
def test_the_write_guard_refuses_obfuscated_values(text, kind, secret):
    with Memory(settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0)) as m:
        r = m.write("acme", "u", "fact", "occupation", text, now=T0)
        assert r.op is Op.REJECT and r.reason is Reason.SENSITIVE_VALUE, r
        assert m.export("acme", "u", now=T0)["fields"] == {}


def test_redact_json_uses_the_same_normalisation():
    out = redact_json({"note": "手机１３８００１３８０００", "k": ["card 4111.1111.1111.1111"]}, "[X]")
    assert out == {"note": "手机[X]", "k": ["card [X]"]}


# --- benign corpus: 0 false positives --------------------------------------------------------------------------

BENIGN = [
    # dates and times, in every notation and digit width
    "2024-05-01 13:45:00", "２０２４年５月１日", "2024.05.01", "2024/05/01 08:30", "01/05/2024", "2024_05_01_backup",
    "会议定在 2024 年 5 月 1 日 14:00", "born 1990-01-01", "截止日期 2025.12.31 23:59:59", "٢٠٢٤-٠٥-٠١",
    "created_at=1714550400 ms=1714550400123", "timestamp 1714550400.123456", "Q3 2024 / FY2025",
    "1999年12月31日 到 2000年1月1日", "from 2024-05-01T13:45:00Z to 2024-05-02T13:45:00+08:00",
    # prices and amounts
    "金额 ¥13,800.00", "价格 １３８００ 元", "total $1,234,567.89", "￥ 4,111.11 per month", "1.380.013.800 Rp",
    "salary 138000 CNY/year", "预算 1 380 013 元", "3.1415926535897932", "¥12.50 × 3 = ¥37.50",
    "balance: 4,111,111,111.11", "price 13800.13800", "折扣 0.85，满 300 减 50",
    # order, tracking, invoice and ticket numbers
    "订单号：4111111111111111 已发货", "快递单号 773012345678901", "运单号 SF1234567890123",
    "order #4111 1111 1111 1111 shipped", "tracking 1Z999AA10123456784", "invoice INV-2024-000138",
    "工单编号 138-0013-8000 已关闭", "ticket 13800138000 closed", "发票号码 04403190011112345678",
    "流水号 202405011380013800", "交易号 4200001234202405011380013800", "ref 4111-1111-1111-1111",
    # product codes, SKUs, models, versions
    "型号 RTX-4090-24G", "SKU 138-0013-8000", "ISBN 978-7-111-54742-6", "EAN 6901234567892",
    "条码 6920202888888", "版本 v13.800.138000", "version 4.111.111.111", "固件 1.3.8.0.0.1.3.8.0.0.0",
    "part no. 4111-1111-11", "序列号 C02XL0GTJGH5", "IMEI 356938035643809", "model A2338 / A2337",
    "ip 192.168.100.200", "mac 00:1A:2B:3C:4D:5E", "uuid 1c2442f9-298c-43a5-b0cc-ec313571810a",
    "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "commit 4111111aef1111",
    "hex deadbeef4111111111111111", "id a4111111111111111", "token_budget 4000", "port 6379/tcp",
    # phone-like but not personal: service lines, landlines, short codes
    "客服热线 400-820-8820", "办公室 010-62345678", "fax +86 10 6234 5678", "短信发送到 10086",
    "call 95588 for help", "热线 12345", "分机 8000", "邮编 100080", "门牌 1380 号",
    # numbers inside ordinary sentences
    "我住在 13 号楼 800 室", "跑了 13.8 公里，用时 01:38:00", "体重 138 斤，身高 180 cm",
    "the room is 13 by 800 mm", "page 138 of 800", "第 138 期 第 0013 号", "温度 38.5℃",
    "我忘记密码了", "密码：请在设置里修改", "密码 请在设置里修改", "The password is case-sensitive.",
    "password is too short", "reset your password here", "the spin is fast", "bypass=true",
    "PIN code required", "pin the tab", "Pin it to the board", "pinned topic 1234",
    "口令 已更新", "口令是什么来着", "密码强度 弱", "password manager 1Password",
    "I like 4111 apples", "11010519491231 is not complete", "110105 19491231",
    "Token count: 12345 tokens used", "wifi 名称 Home-5G", "wifi password is saved in the app",
    "邮箱格式不对", "email me at work", "at example dot com", "a@b", "@username on twitter",
    "全角数字 １２３４", "阿拉伯数字 ١٢٣٤", "半角 1234 和全角 １２３４", "零宽\u200b字符\u200b测试",
    "tab\tseparated\tvalues 1\t2\t3", "two  spaces  here 12  34", "\u3000全角空格\u3000", "a_b_c 1_2_3",
    "路径 /usr/local/bin/138", "文件 report_2024_05_01_v13.pdf", "scores 13/80/01/38/00",
    "比分 3:1，第 138 分钟", "车牌 京A·12345", "航班 CA1380 於 08:00 起飞", "room 1380-0013",
    "共 4111 人参加，增长 11.11%", "G7 高速 138 公里处", "WiFi 信号 5 格", "coordinates 31.2304, 121.4737", "ratio 1380:0138", "1e10 ops/s",
]


def test_benign_corpus_is_large_and_has_no_findings():
    assert len(BENIGN) >= 120
    flagged = {t: [f.kind.value for f in detect(t)] for t in BENIGN if detect(t)}
    assert flagged == {}


# --- properties ------------------------------------------------------------------------------------------------

@st.composite
def cn_ids(draw):
    region = draw(st.sampled_from(["110105", "310104", "440305", "510107", "650102"]))
    first17 = (f"{region}{draw(st.integers(1920, 2020)):04d}{draw(st.integers(1, 12)):02d}"
               f"{draw(st.integers(1, 28)):02d}{draw(st.integers(0, 999)):03d}")
    return first17 + cn_id_check_digit(first17)


@st.composite
def cards(draw):
    prefix = draw(st.sampled_from(["4", "51", "55", "62", "6011", "35", "2221", "2720"]))
    body = prefix + "".join(draw(st.sampled_from(string.digits)) for _ in range(15 - len(prefix)))
    return next(body + d for d in string.digits if luhn_ok(body + d))


@st.composite
def mobiles(draw):
    return "1" + draw(st.sampled_from("3456789")) + "".join(draw(st.sampled_from(string.digits)) for _ in range(9))


VALUES = st.one_of(cn_ids().map(lambda v: (PIIKind.CN_ID, v)), cards().map(lambda v: (PIIKind.BANK_CARD, v)),
                   mobiles().map(lambda v: (PIIKind.CN_MOBILE, v)))
SEPARATORS = ["", " ", "-", ".", "/", "_", "\t", "  ", "\u3000", "\u00a0", "\u2009", " \u200b"]
CONTEXT = {PIIKind.CN_ID: "身份证", PIIKind.BANK_CARD: "卡号", PIIKind.CN_MOBILE: "手机"}


@st.composite
def obfuscated(draw):
    """A detected value in a normalised-equivalent form: each digit in some script and width, zero-width
    characters anywhere, one separator (any Unicode space, tab, double space, -./_) between groups."""
    kind, value = draw(VALUES)
    sep = draw(st.sampled_from(SEPARATORS))
    group = draw(st.sampled_from([3, 4]))
    tables = [None, FW, AR, DEVA]
    chars = []
    for i, ch in enumerate(value):
        if i and i % group == 0:
            chars.append(sep)
        t = draw(st.sampled_from(tables))
        chars.append(ch.translate(t) if t else ch)
        if draw(st.integers(0, 5)) == 0:
            chars.append(draw(st.sampled_from([ZW, "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])))
    return kind, value, "".join(chars)


@settings(max_examples=examples(400), deadline=None)
@given(obfuscated(), st.sampled_from(["", "我的", "note: ", "请记住"]), st.sampled_from(["", "。", " thanks", "，谢谢"]))
def test_property_normalised_equivalent_forms_of_a_detected_value_are_detected(case, before, after):
    kind, value, form = case
    plain = f"{before}{CONTEXT[kind]}{value}{after}"
    assert [f.kind for f in detect(plain)] == [kind]
    text = f"{before}{CONTEXT[kind]}{form}{after}"
    assert fold_text(form).replace(" ", "").strip("-./_") != "" and fold_text(value) == value
    found = detect(text)
    assert [f.kind for f in found] == [kind], (text, found)
    out = redact(text, "[X]")
    assert out == text[: found[0].start] + "[X]" + text[found[0].end :]
    # no run of 4 digits of the value survives redaction, in any script
    digits_left = re.sub(r"\D", "", fold_text(out).replace("[X]", ""))
    assert all(value[i : i + 4] not in digits_left for i in range(len(value) - 3))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_property_fold_offsets_are_monotonic_and_inside_the_original(text):
    f = fold(text)
    if f.starts is None:
        assert f.text == text
        return
    assert len(f.starts) == len(f.ends) == len(f.text)
    assert all(0 <= s < e <= len(text) for s, e in zip(f.starts, f.ends, strict=True))
    assert list(f.starts) == sorted(f.starts)
    for finding in detect(text):
        assert 0 <= finding.start < finding.end <= len(text)


# --- the property over every PII kind: any normalised-equivalent form of a detected text is detected alike -----

@st.composite
def emails(draw):
    local = draw(st.from_regex(r"[a-z0-9]([a-z0-9._]{0,8}[a-z0-9])?", fullmatch=True))
    domain = draw(st.from_regex(r"[a-z]{2,10}", fullmatch=True))
    return f"{local}@{domain}.{draw(st.sampled_from(['com', 'cn', 'org', 'io']))}"


@st.composite
def secrets(draw):
    body = draw(st.text(alphabet=string.ascii_letters + string.digits + "#!$%*", min_size=5, max_size=15))
    return body + draw(st.sampled_from(string.digits))  # a digit: it reads as a secret in every label form


@st.composite
def api_keys(draw):
    alnum = string.ascii_letters + string.digits
    kind = draw(st.sampled_from(["sk", "ghp", "akia"]))
    if kind == "sk":
        return "sk-" + draw(st.text(alphabet=alnum, min_size=24, max_size=40))
    if kind == "ghp":
        return "ghp_" + draw(st.text(alphabet=alnum, min_size=36, max_size=36))
    return "AKIA" + draw(st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16))


TEXTS = st.one_of(
    cn_ids().map(lambda v: (PIIKind.CN_ID, f"身份证号 {v}")),
    cards().map(lambda v: (PIIKind.BANK_CARD, f"card {v[:4]} {v[4:8]} {v[8:12]} {v[12:]}")),
    mobiles().map(lambda v: (PIIKind.CN_MOBILE, f"call me on {v} thanks")),
    emails().map(lambda v: (PIIKind.EMAIL, f"my mail is {v}")),
    st.tuples(st.sampled_from(["密码是", "password: ", "口令：", "wifi password is ", "PIN: "]), secrets()).map(
        lambda t: (PIIKind.PASSWORD, f"{t[0]}{t[1]}")),
    api_keys().map(lambda v: (PIIKind.API_KEY, f"key {v} ok")),
)
FORMAT_CHARS = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]
SPACES = ["\u3000", "\u00a0", "\u2009", "\u202f", "\t", "  "]
DIGIT_SCRIPTS = [FW, AR, DEVA]


@st.composite
def equivalent_form(draw, text):
    """`text` rewritten by rules that are normalisation-equivalences by definition (NFKC compatibility
    forms, other scripts' decimal digits, format characters, other whitespace): full-width letters and
    punctuation, digits of another script, zero-width characters between any two characters, any Unicode
    space or a tab or two spaces for a space."""
    out = []
    for ch in text:
        r = draw(st.integers(0, 3))
        if ch == " " and r:
            out.append(draw(st.sampled_from(SPACES)))
        elif ch.isdigit() and ch.isascii() and r:
            out.append(ch.translate(draw(st.sampled_from(DIGIT_SCRIPTS))))
        elif "!" <= ch <= "~" and r == 1:
            out.append(chr(ord(ch) + 0xFEE0))  # the full-width form
        else:
            out.append(ch)
        if draw(st.integers(0, 4)) == 0:
            out.append(draw(st.sampled_from(FORMAT_CHARS)))
    return "".join(out)


def _independent_fold(text: str) -> str:
    """The normalisation written out here, independently of policy/normalize.py: no format characters,
    NFKC, decimal digits of every script as ASCII, one space for any whitespace run."""
    text = re.sub(r"[\u200b-\u200d\u2060\ufeff\u00ad]", "", text)
    return " ".join(unicodedata.normalize("NFKC", text).translate(UNDIGITS).split())


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), TEXTS)
def test_property_every_kind_normalised_equivalent_forms_are_detected(data, case):
    kind, plain = case
    found_plain = detect(plain)
    assert kind in [f.kind for f in found_plain], plain
    form = data.draw(equivalent_form(plain))
    # the generated form is equivalent under the normalisation by the rules above, not by the code's say-so:
    assert _independent_fold(form) == _independent_fold(plain)
    found = detect(form)
    assert [f.kind for f in found] == [f.kind for f in found_plain], (form, found, found_plain)
    out = redact(form, "[X]")
    assert fold_text(out).count("[X]") == len(found_plain)
    for f in found_plain:  # the secret itself is gone, in every script and width
        secret = plain[f.start:f.end].replace(" ", "")
        assert secret not in fold_text(out).replace(" ", ""), (form, out)


# --- a mobile number written with dots that also reads as an IPv4 address (found by the property above) ----------


@pytest.mark.parametrize("text", ["手机130.000.000.00", "手机1\u200b3\u200b0\u200b.000.000.00", "我的手机131.200.100.99",
                                  "mobile: 131.200.100.99"])
def test_a_mobile_number_that_reads_as_an_ipv4_address_is_found_when_it_is_said_to_be_a_phone(text: str) -> None:
    assert [f.kind for f in detect(text)] == [PIIKind.CN_MOBILE]


@pytest.mark.parametrize("text", ["服务器地址131.200.100.99", "the gateway is 177.222.27.140", "ping 131.200.100.99 again"])
def test_an_ipv4_address_without_a_phone_cue_is_not_a_mobile_number(text: str) -> None:
    assert detect(text) == []
