"""PII detector evaluation: a generated, labelled corpus (Faker zh_CN + en_US, fixed seed) and metrics.

The corpus is built at run time (nothing is downloaded): PII-bearing sentences carry the exact span of
each planted value; benign sentences are full of ordinary numbers (amounts, dates, times, order and
tracking numbers, versions, postcodes, timestamps, ISBNs, IPs, ...) and talk *about* passwords without
stating one. `evaluate()` reports, per kind, recall on the planted values and the false-positive rate
on the benign sentences. `usermem eval pii` writes the report under reports/.

Ground truth never comes from the code under test: valid values come from Faker's own providers
(``ssn`` for resident identity numbers, ``credit_card_number``) and, where Faker has no provider
(UnionPay card ranges, identity numbers ending in X), from the independent check-digit code below
(ISO 7064 MOD 11-2 computed iteratively, Luhn computed from the right) — never from
``usermem.policy.pii``. A fixed set of hand-written real-world forms (published test card numbers,
the GB 11643 sample number, numbers as people type them) is added to every corpus.

Faker belongs to the optional extra ``eval`` (``pip install 'usermem[eval]'``); it is imported only when
a corpus is built, and its absence raises :class:`usermem.evals.MissingExtra`.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from usermem.evals import require
from usermem.policy.pii import PIIKind, detect

DEFAULT_SEED = 20261130
TARGET_RECALL = {PIIKind.CN_ID: 1.0, PIIKind.BANK_CARD: 1.0, PIIKind.CN_MOBILE: 1.0}
TARGET_MAX_FP_RATE = 0.01


@dataclass(frozen=True, slots=True)
class Planted:
    kind: PIIKind
    start: int
    end: int  # text[start:end] must be covered by a finding of this kind


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    lang: str
    category: str  # the PII kind, or the benign category
    planted: tuple[Planted, ...] = ()

    @property
    def benign(self) -> bool:
        return not self.planted


@dataclass
class _Builder:
    rng: random.Random
    zh: Any
    en: Any
    samples: list[Sample] = field(default_factory=list)

    def add(self, lang: str, category: str, template: str, values: Sequence[tuple[PIIKind | None, str]]) -> None:
        """template uses {0}, {1}...; values are (kind or None for benign filler, text)."""
        text, planted = "", []
        parts = template.split("{}")
        if len(parts) != len(values) + 1:
            raise ValueError(f"template {template!r} needs {len(parts) - 1} values")
        for i, part in enumerate(parts):
            text += part
            if i < len(values):
                kind, value = values[i]
                if kind is not None:
                    planted.append(Planted(kind, len(text), len(text) + len(value)))
                text += value
        self.samples.append(Sample(text, lang, category, tuple(planted)))


# --- value generators ---------------------------------------------------------------------------------

def _group(digits: str, sizes: Sequence[int], sep: str) -> str:
    out, i = [], 0
    for s in sizes:
        if i >= len(digits):
            break
        out.append(digits[i : i + s])
        i += s
    if i < len(digits):
        out.append(digits[i:])
    return sep.join(out)


# Independent check-digit code (the ground truth must not come from the detector under test).

def luhn_check_digit(payload: str) -> str:
    """The Luhn (ISO/IEC 7812-1) check digit to append to `payload`: double every second digit from the right."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:  # the rightmost payload digit is doubled (the check digit will sit to its right)
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def gb11643_check_character(first17: str) -> str:
    """The GB 11643-1999 check character (ISO 7064 MOD 11-2, evaluated iteratively; 10 is written X)."""
    p = 0
    for ch in first17:
        p = (p + int(ch)) * 2 % 11
    value = (12 - p) % 11
    return "X" if value == 10 else str(value)


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    return body + luhn_check_digit(body)


def _cn_id(b: _Builder) -> str:
    n = str(b.zh.ssn())
    if b.rng.random() < 0.2:  # some generated with an X check digit
        for _ in range(50):
            first17 = n[:14] + "".join(b.rng.choice(string.digits) for _ in range(3))
            if gb11643_check_character(first17) == "X":
                n = first17 + ("X" if b.rng.random() < 0.7 else "x")
                break
    style = b.rng.random()
    if style < 0.25:
        return _group(n, (6, 8, 4), " ")
    if style < 0.3:
        return _group(n, (6, 4, 4, 4), " ")
    return str(n)


_CARD_TYPES = ("visa16", "visa13", "visa19", "mastercard", "amex", "discover", "jcb16", "jcb15", "diners")
_CN_BINS = ("622202", "621700", "622848", "621483", "622588", "620200", "623668", "625965", "628288", "955880")


def _card(b: _Builder) -> str:
    r = b.rng.random()
    if r < 0.45:  # Chinese UnionPay debit/credit cards: 16-19 digits
        bin_ = b.rng.choice(_CN_BINS)
        digits = _luhn_complete(bin_, 19 if bin_.startswith("9") else b.rng.choice((16, 17, 18, 19)), b.rng)
    else:
        digits = b.en.credit_card_number(card_type=b.rng.choice(_CARD_TYPES))
    style = b.rng.random()
    if style < 0.35:
        return _group(digits, (4, 4, 4, 4), " ")
    if style < 0.45:
        return _group(digits, (4, 4, 4, 4), "-")
    if style < 0.5 and len(digits) == 15:
        return _group(digits, (4, 6, 5), " ")
    return digits


def _mobile(b: _Builder) -> tuple[str, int]:
    """A formatted mobile number and how many leading characters are the country code part."""
    n = b.zh.phone_number()
    if len(n) != 11 or not n.startswith("1"):
        n = "1" + b.rng.choice("3456789") + "".join(b.rng.choice(string.digits) for _ in range(9))
    body_styles = (n, _group(n, (3, 4, 4), " "), _group(n, (3, 4, 4), "-"), f"({n[:3]}) {n[3:7]}-{n[7:]}",
                   _group(n, (3, 8), " "))
    body = b.rng.choice(body_styles) if b.rng.random() < 0.6 else n
    prefix = b.rng.choice(("", "", "", "+86 ", "+86", "+86-", "0086 ", "(+86) ", "（+86）", "86-", "+86 "))
    return prefix + body, len(prefix)


def _password(b: _Builder) -> str:
    r = b.rng.random()
    if r < 0.5:
        return str(b.en.password(length=b.rng.randint(8, 14), special_chars=b.rng.random() < 0.6))
    if r < 0.75:
        return str(b.en.user_name()) + str(b.rng.randint(1, 9999))
    return "".join(b.rng.choice(string.ascii_letters + string.digits) for _ in range(b.rng.randint(6, 12)))


def _api_key(b: _Builder) -> str:
    alnum = string.ascii_letters + string.digits
    shapes: list[Callable[[], str]] = [
        lambda: "sk-" + "".join(b.rng.choice(alnum) for _ in range(48)),
        lambda: "sk-proj-" + "".join(b.rng.choice(alnum + "_-") for _ in range(40)),
        lambda: "ghp_" + "".join(b.rng.choice(alnum) for _ in range(36)),
        lambda: "AKIA" + "".join(b.rng.choice(string.ascii_uppercase + string.digits) for _ in range(16)),
        lambda: "xoxb-" + "-".join("".join(b.rng.choice(string.digits) for _ in range(12)) for _ in range(2))
        + "-" + "".join(b.rng.choice(alnum) for _ in range(24)),
        lambda: "AIza" + "".join(b.rng.choice(alnum + "_-") for _ in range(35)),
        lambda: "sk_live_" + "".join(b.rng.choice(alnum) for _ in range(24)),
        lambda: "glpat-" + "".join(b.rng.choice(alnum) for _ in range(20)),
    ]
    return b.rng.choice(shapes)()


# --- templates --------------------------------------------------------------------------------------------

_ID_ZH = ("我的身份证号是{}，请帮我核对一下。", "身份证号码：{}", "{}是我的身份证号", "办理时填写的证件号码为{}，姓名{}。",
          "客户{}提供了身份证 {} 用于实名认证。")
_ID_EN = ("My Chinese ID number is {}.", "ID: {} (resident identity card)", "Please verify the ID card {} for {}.")
_CARD_ZH = ("我的银行卡号是{}，尾号别搞错。", "请把退款打到这张卡：{}", "信用卡 {} 被重复扣款了", "{} 这张借记卡已经挂失",
            "卡号{}，开户行{}。", "用{}付的款")
_CARD_EN = ("My card number is {}.", "Charge it to {} please.", "The refund should go to card {}.",
            "I paid with {} yesterday.", "Visa {} expires next year, billing name {}.")
_MOBILE_ZH = ("我的手机号是{}，有事打给我。", "电话：{}", "{}是我老婆的号码", "联系人{}，手机{}", "请用{}联系我",
              "新号码 {} 从下周开始用")
_MOBILE_EN = ("Call me on {} after 6pm.", "My mobile: {}", "You can reach {} at {}.", "Text {} when it ships.")
_PW_ZH = ("我的登录密码是{}，你帮我记一下", "密码：{}", "支付密码为{}", "wifi密码是 {} 别告诉别人", "邮箱密码={}",
          "账号{}，密码是{}")
_PW_EN = ("my password is {}", "Password: {}", "pwd={}", "passwd {}", "The login password was {} before the reset.",
          "user {} / password: {}")
_KEY_ZH = ("这是我的API key：{}", "把 {} 配置到环境变量里", "令牌是{}", "密钥：{}")
_KEY_EN = ("Here is my API key {}", "export OPENAI_API_KEY={}", "token: {}", "Use {} to authenticate.")
_EMAIL_ZH = ("我的邮箱是{}，报告发这里。", "邮件发到{}就行", "联系邮箱：{}")
_EMAIL_EN = ("Email me at {}.", "My address for invoices is {}.", "cc {} on the thread, please.")


def _pii_samples(b: _Builder, per_kind: dict[PIIKind, int]) -> None:
    rng = b.rng
    for _ in range(per_kind[PIIKind.CN_ID]):
        zh = rng.random() < 0.6
        t = rng.choice(_ID_ZH if zh else _ID_EN)
        v = _cn_id(b)
        vals: list[tuple[PIIKind | None, str]] = []
        for slot in range(t.count("{}")):
            if "{}" in t and slot == _slot_for(t, ("身份证", "证件号", "ID")):
                vals.append((PIIKind.CN_ID, v))
            else:
                vals.append((None, b.zh.name() if zh else b.en.name()))
        b.add("zh" if zh else "en", PIIKind.CN_ID.value, t, vals)
    for _ in range(per_kind[PIIKind.BANK_CARD]):
        zh = rng.random() < 0.55
        t = rng.choice(_CARD_ZH if zh else _CARD_EN)
        v = _card(b)
        filler = (b.zh.company() if zh else b.en.name())
        vals = [(PIIKind.BANK_CARD, v)] + [(None, filler)] * (t.count("{}") - 1)
        b.add("zh" if zh else "en", PIIKind.BANK_CARD.value, t, vals)
    for _ in range(per_kind[PIIKind.CN_MOBILE]):
        zh = rng.random() < 0.6
        t = rng.choice(_MOBILE_ZH if zh else _MOBILE_EN)
        v, cc = _mobile(b)
        n = t.count("{}")
        name = b.zh.name() if zh else b.en.first_name()
        vals = [(None, name)] * (n - 1) + [(PIIKind.CN_MOBILE, v)]
        if n == 2 and t.index("{}") != t.rindex("{}") and ("联系人" in t or "reach" in t):
            pass  # name first, number last
        elif n == 2:
            vals = [(PIIKind.CN_MOBILE, v), (None, name)]
        b.add("zh" if zh else "en", PIIKind.CN_MOBILE.value, t, vals)
        if cc:  # the planted span must cover the national number; the prefix may or may not be included
            s = b.samples[-1]
            p = next(x for x in s.planted if x.kind is PIIKind.CN_MOBILE)
            b.samples[-1] = Sample(s.text, s.lang, s.category,
                                   tuple(Planted(x.kind, x.start + cc, x.end) if x is p else x for x in s.planted))
    for _ in range(per_kind[PIIKind.PASSWORD]):
        zh = rng.random() < 0.5
        t = rng.choice(_PW_ZH if zh else _PW_EN)
        v = _password(b)
        n = t.count("{}")
        vals = [(None, b.en.user_name())] * (n - 1) + [(PIIKind.PASSWORD, v)]
        b.add("zh" if zh else "en", PIIKind.PASSWORD.value, t, vals)
    for _ in range(per_kind[PIIKind.API_KEY]):
        zh = rng.random() < 0.5
        t = rng.choice(_KEY_ZH if zh else _KEY_EN)
        b.add("zh" if zh else "en", PIIKind.API_KEY.value, t, [(PIIKind.API_KEY, _api_key(b))])
    for _ in range(per_kind[PIIKind.EMAIL]):
        zh = rng.random() < 0.5
        t = rng.choice(_EMAIL_ZH if zh else _EMAIL_EN)
        v = (b.zh if zh else b.en).email() if rng.random() < 0.7 else b.en.company_email()
        b.add("zh" if zh else "en", PIIKind.EMAIL.value, t, [(PIIKind.EMAIL, v)])


def _slot_for(template: str, cues: Sequence[str]) -> int:
    """Which {} slot of a template holds the ID: the one nearest after/before an ID cue."""
    slots = [i for i in range(len(template)) if template.startswith("{}", i)]
    cue_pos = min((template.find(c) for c in cues if c in template), default=-1)
    if cue_pos < 0:
        return 0
    after = [k for k, pos in enumerate(slots) if pos > cue_pos]
    return after[0] if after else len(slots) - 1


# --- benign sentences ---------------------------------------------------------------------------------------

def _digits(rng: random.Random, n: int, first: str = string.digits) -> str:
    return rng.choice(first) + "".join(rng.choice(string.digits) for _ in range(n - 1))


_SPAN = (datetime(2001, 1, 1), datetime(2030, 12, 31))


def _dt(fake: Any) -> datetime:
    """A date-time from a fixed span (Faker's defaults end at *now*, which would make the corpus drift)."""
    value: datetime = fake.date_time_between(start_date=_SPAN[0], end_date=_SPAN[1])
    return value


def _benign_samples(b: _Builder, n: int) -> None:
    rng, zh, en = b.rng, b.zh, b.en
    makers: list[tuple[str, str, Callable[[], str]]] = [
        ("amount", "zh", lambda: f"本月账单金额为¥{rng.randint(1, 99999)}.{rng.randint(0, 99):02d}，已于{_dt(zh).date().isoformat()}扣款。"),
        ("amount", "en", lambda: f"Your invoice total is ${rng.randint(1, 999999):,}.{rng.randint(0, 99):02d} due {_dt(en).date().isoformat()}."),
        ("amount", "zh", lambda: f"共{rng.randint(2, 60)}件商品，合计{rng.randint(100, 9_999_999)}元，优惠{rng.randint(1, 500)}元。"),
        ("amount", "en", lambda: f"Revenue grew to {rng.randint(10_000_000, 99_999_999_999):,} USD in Q{rng.randint(1, 4)}."),
        ("amount", "zh", lambda: f"余额 {rng.randint(1000000, 9999999999)} 分，折合人民币{rng.randint(10000, 99999999)}元"),
        ("date", "zh", lambda: f"会议定在{_dt(zh).strftime('%Y年%m月%d日')} {_dt(zh).time().isoformat()}，地点{zh.city()}。"),
        ("date", "en", lambda: f"The contract runs from {_dt(en).date().isoformat()} to {_dt(en).date().isoformat()} ({_dt(en).isoformat()})."),
        ("date", "zh", lambda: f"日志时间 {_dt(zh).strftime('%Y%m%d%H%M%S')}，共 {rng.randint(1, 99999)} 条记录"),
        ("time", "en", lambda: f"Flight {rng.choice(['CA', 'MU', 'UA', 'BA'])}{rng.randint(100, 9999)} departs at {_dt(en).time().isoformat()} from gate {rng.randint(1, 120)}."),
        ("timestamp", "en", lambda: f"created_at={rng.randint(1_500_000_000, 1_900_000_000)} updated_ms={rng.randint(1_500_000_000_000, 1_900_000_000_000)}"),
        ("order", "zh", lambda: f"订单号：{_digits(rng, rng.choice((16, 17, 18, 19)), '123456789')}，请耐心等待发货。"),
        ("order", "zh", lambda: f"您的订单 {_digits(rng, rng.choice((12, 15, 16, 18, 19)), '123456789')} 已签收"),
        ("order", "en", lambda: f"Order #{_digits(rng, rng.choice((10, 13, 16, 19)), '123456789')} has shipped."),
        ("order", "en", lambda: f"Invoice No. {_digits(rng, rng.choice((13, 16)), '123456789')} was paid on {_dt(en).date().isoformat()}."),
        ("order", "zh", lambda: f"工单编号 {_digits(rng, 16, '123456789')} 已转给二线处理"),
        ("order", "zh", lambda: f"交易流水号{_dt(zh).strftime('%Y%m%d')}{_digits(rng, 10)}"),
        ("tracking", "zh", lambda: f"顺丰运单号 SF{_digits(rng, 13)}，预计{rng.randint(1, 5)}天送达"),
        ("tracking", "zh", lambda: f"快递单号：{_digits(rng, rng.choice((12, 13, 14, 15)), '3456789')}"),
        ("tracking", "en", lambda: f"Tracking number {_digits(rng, rng.choice((12, 15, 20, 22)), '123456789')} via FedEx."),
        ("tracking", "en", lambda: f"UPS tracking: 1Z{''.join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))}"),
        ("version", "en", lambda: f"Upgraded from v{rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 999)} to {rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 99)}-rc{rng.randint(1, 9)}"),
        ("version", "zh", lambda: f"固件版本 {rng.randint(1, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 99)}.{_digits(rng, 5)}，build {_digits(rng, 8)}"),
        ("postcode", "zh", lambda: f"收货地址：{zh.address()}，邮编{zh.postcode()}"),
        ("postcode", "en", lambda: f"Ship to {en.street_address()}, {en.city()}, {en.state_abbr()} {en.zipcode_plus4()}"),
        ("isbn", "en", lambda: f"ISBN {en.isbn13()} / EAN {en.ean13()}, {rng.randint(100, 999)} pages"),
        ("network", "en", lambda: f"Server {en.ipv4()} port {rng.randint(1024, 65535)}, latency {rng.randint(1, 999)} ms"),
        ("quantity", "zh", lambda: f"今天走了{rng.randint(1000, 30000)}步，消耗{rng.randint(100, 3000)}千卡，体重{rng.randint(40, 120)}.{rng.randint(0, 9)}公斤"),
        ("quantity", "en", lambda: f"Population {rng.randint(1_000_000, 1_400_000_000):,}; area {rng.randint(1000, 9_999_999)} km2; {rng.randint(1, 99)}.{rng.randint(0, 99)}% urban"),
        ("id_like", "en", lambda: f"Request id {en.uuid4()} (trace {en.sha1()[:16]})"),
        ("id_like", "zh", lambda: f"合同编号 HT-{rng.randint(2015, 2026)}-{_digits(rng, 6)}，附件 {rng.randint(1, 30)} 页"),
        ("landmark", "zh", lambda: f"{zh.city()}{zh.street_name()}{rng.randint(1, 999)}号{rng.randint(1, 40)}楼{rng.randint(100, 4999)}室"),
        ("password_talk", "zh", lambda: rng.choice(["我忘记密码了，怎么重置？", "密码错误次数太多被锁了", "登录密码是多少位的？",
                                                  "请问支付密码为什么总是提示错误", "密码：请在设置里修改", "修改密码后需要重新登录",
                                                  "密码为空时无法提交", "wifi密码是什么来着"])),
        ("password_talk", "en", lambda: rng.choice(["I forgot my password, how do I reset it?", "Your password must be at least 8 characters.",
                                                  "The password is case-sensitive.", "password: see the vault", "Password reset link sent to your inbox.",
                                                  "Is the password required for guests?", "The password was changed yesterday.",
                                                  "pwd is a Unix command", "password is too short", "the password is correct now"])),
        ("hotline", "zh", lambda: f"客服热线 400-{_digits(rng, 3)}-{_digits(rng, 4)}，工作时间 9:00-18:00，或拨打 95{_digits(rng, 3)}"),
        ("hotline", "zh", lambda: f"办公室电话 0{rng.randint(10, 999)}-{_digits(rng, 8, '2345678')} 转 {rng.randint(100, 9999)}"),
        ("long_id", "zh", lambda: f"微信支付交易单号 {_digits(rng, 28, '4')}，商户单号 {_digits(rng, 24)}"),
        ("long_id", "en", lambda: f"Batch {_digits(rng, rng.choice((20, 24, 32)))} processed {rng.randint(1, 99999)} rows in {rng.randint(1, 999)}.{rng.randint(0, 99)} s"),
        ("masked", "zh", lambda: f"身份证 {_digits(rng, 6, '1234568')}********{_digits(rng, 3)}X 已核验，手机 1{rng.choice('3589')}{_digits(rng, 1)}****{_digits(rng, 4)}"),
        ("masked", "zh", lambda: f"尾号{_digits(rng, 4)}的银行卡已绑定，卡号 6222 **** **** {_digits(rng, 4)}"),
        ("datetime", "en", lambda: f"{_dt(en).isoformat()}+08:00 job {rng.randint(1, 99999)} took {rng.randint(1, 9999)} ms"),
        ("coordinates", "en", lambda: f"lat {en.latitude()}, lng {en.longitude()}, alt {rng.randint(1, 8848)} m"),
        ("token_talk", "en", lambda: rng.choice(["The token expired, please log in again.", "token: none", "Use your API key from the dashboard.",
                                               f"Token count: {rng.randint(1000, 99999)} tokens used"])),
    ]
    for i in range(n):
        category, lang, make = makers[i % len(makers)]
        b.samples.append(Sample(make(), lang, category))


# Hand-written real-world forms: published test values and numbers as people actually type them. Each entry is
# (lang, template with {} slots, values: (kind, text)); every value was checked by hand against its standard.
HANDWRITTEN: tuple[tuple[str, str, tuple[tuple[PIIKind, str], ...]], ...] = (
    ("zh", "身份证号码：{}（GB 11643 标准中的示例号码）", ((PIIKind.CN_ID, "11010519491231002X"),)),
    ("zh", "我身份证是 {}，麻烦登记一下", ((PIIKind.CN_ID, "320311198506150011"),)),
    ("zh", "证件号 {} 尾号是小写x", ((PIIKind.CN_ID, "11010519491231002x"),)),
    ("zh", "身份证 {}，有效期到2030年", ((PIIKind.CN_ID, "5101 0419 7709 1830 63"),)),
    ("en", "My resident ID is {}.", ((PIIKind.CN_ID, "110105 19491231 002X"),)),
    ("en", "Card: {} (Visa test card)", ((PIIKind.BANK_CARD, "4111 1111 1111 1111"),)),
    ("en", "Use my Mastercard {} for the renewal.", ((PIIKind.BANK_CARD, "5555-5555-5555-4444"),)),
    ("en", "Amex {} exp 12/29", ((PIIKind.BANK_CARD, "3782 822463 10005"),)),
    ("en", "Discover card number {}", ((PIIKind.BANK_CARD, "6011111111111117"),)),
    ("en", "JCB {} please", ((PIIKind.BANK_CARD, "3530 1113 3330 0000"),)),
    ("zh", "银联卡号 {}，持卡人本人", ((PIIKind.BANK_CARD, "6200 0000 0000 0005"),)),
    ("zh", "退款请打到 {} 这张招行卡", ((PIIKind.BANK_CARD, "6225 8801 3770 6868"),)),
    ("zh", "我的手机：{}", ((PIIKind.CN_MOBILE, "138 0013 8000"),)),
    ("zh", "电话 {}，晚上打", ((PIIKind.CN_MOBILE, "139-1234-5678"),)),
    ("zh", "有事联系 {}", ((PIIKind.CN_MOBILE, "18612345678"),)),
    ("en", "WhatsApp me at +86 {}", ((PIIKind.CN_MOBILE, "150 1234 5678"),)),
    ("zh", "邮箱 {} 和手机 {} 都可以", ((PIIKind.EMAIL, "zhang.wei@example.com.cn"), (PIIKind.CN_MOBILE, "13712345678"))),
    ("en", "password: {}", ((PIIKind.PASSWORD, "Tr0ub4dor&3"),)),
    ("zh", "我的密码是{}", ((PIIKind.PASSWORD, "woaini1314"),)),
    ("en", "export OPENAI_API_KEY={}", ((PIIKind.API_KEY, "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4"),)),
    ("en", "AWS key {} leaked in the log", ((PIIKind.API_KEY, "AKIAIOSFODNN7EXAMPLE"),)),
)


def _handwritten(b: _Builder) -> None:
    for lang, template, values in HANDWRITTEN:
        b.add(lang, "handwritten", template, list(values))


def _allocate(total: int, shares: dict[PIIKind, float]) -> dict[PIIKind, int]:
    """Split `total` by `shares` (largest remainder, at least one each) so the counts add up to `total`."""
    exact = {k: total * v / sum(shares.values()) for k, v in shares.items()}
    counts = {k: max(1, int(x)) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - int(exact[k]), reverse=True)[: max(0, total - sum(counts.values()))]:
        counts[k] += 1
    return counts


def build_corpus(seed: int = DEFAULT_SEED, pii: int = 600, benign: int = 700) -> list[Sample]:
    """A deterministic corpus of `pii` PII-bearing sentences (the hand-written forms, the rest generated) and
    `benign` benign sentences (zh and en). Needs Faker (the ``eval`` extra); raises MissingExtra without it."""
    faker: Any = require("faker", "the PII evaluation corpus (usermem eval pii)")
    Faker = faker.Faker

    zh, en = Faker("zh_CN"), Faker("en_US")
    zh.seed_instance(seed)
    en.seed_instance(seed + 1)
    b = _Builder(random.Random(seed), zh, en)
    shares = {PIIKind.CN_ID: 0.2, PIIKind.BANK_CARD: 0.22, PIIKind.CN_MOBILE: 0.22, PIIKind.PASSWORD: 0.14,
              PIIKind.API_KEY: 0.08, PIIKind.EMAIL: 0.14}
    _pii_samples(b, _allocate(max(len(shares), pii - len(HANDWRITTEN)), shares))
    _handwritten(b)
    _benign_samples(b, benign)
    return b.samples


# --- metrics ---------------------------------------------------------------------------------------------------

def evaluate(samples: Sequence[Sample]) -> dict[str, Any]:
    """Per-kind recall (planted values fully covered by a finding of the right kind) and false-positive rate.

    false_positive_rate(kind) = benign sentences with a finding of that kind / benign sentences; spurious
    findings inside PII sentences (not overlapping any planted value) are counted as well, per sentence.
    """
    kinds = list(PIIKind)
    planted_n = dict.fromkeys(kinds, 0)
    hit_n = dict.fromkeys(kinds, 0)
    fp_sentences = dict.fromkeys(kinds, 0)
    benign_total = sum(1 for s in samples if s.benign)
    misses: list[dict[str, Any]] = []
    false_pos: list[dict[str, Any]] = []
    for s in samples:
        findings = detect(s.text)
        for p in s.planted:
            planted_n[p.kind] += 1
            if any(f.kind is p.kind and f.start <= p.start and f.end >= p.end for f in findings):
                hit_n[p.kind] += 1
            else:
                misses.append({"kind": p.kind.value, "text": s.text, "value": s.text[p.start : p.end],
                               "found": [(f.kind.value, s.text[f.start : f.end]) for f in findings]})
        spurious = {f.kind for f in findings if not any(f.start < p.end and p.start < f.end for p in s.planted)}
        for kind in spurious:
            fp_sentences[kind] += 1
            false_pos.append({"kind": kind.value, "text": s.text, "category": s.category})
    per_kind: dict[str, Any] = {}
    for k in kinds:
        recall = hit_n[k] / planted_n[k] if planted_n[k] else None
        per_kind[k.value] = {"planted": planted_n[k], "detected": hit_n[k],
                             "recall": None if recall is None else round(recall, 4),
                             "false_positive_sentences": fp_sentences[k],
                             "false_positive_rate": round(fp_sentences[k] / max(1, benign_total), 4)}
    flagged_benign = sum(1 for s in samples if s.benign and detect(s.text))
    meets = all((per_kind[k.value]["recall"] or 0) >= t for k, t in TARGET_RECALL.items()) and all(
        v["false_positive_rate"] <= TARGET_MAX_FP_RATE for v in per_kind.values())
    return {
        "sentences": len(samples), "pii_sentences": len(samples) - benign_total, "benign_sentences": benign_total,
        "benign_flagged": flagged_benign, "benign_flagged_rate": round(flagged_benign / max(1, benign_total), 4),
        "per_kind": per_kind, "meets_targets": meets,
        "targets": {"recall": {k.value: v for k, v in TARGET_RECALL.items()}, "max_false_positive_rate": TARGET_MAX_FP_RATE},
        "misses": misses[:50], "false_positives": false_pos[:50],
    }


def render_markdown(report: dict[str, Any], seed: int) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        faker_version = version("faker")
    except PackageNotFoundError:  # pragma: no cover - a corpus was built, so Faker is installed
        faker_version = "?"
    lines = ["# PII detector evaluation", "",
             f"Generated corpus (Faker {faker_version} zh_CN + en_US, seed {seed}): {report['pii_sentences']} "
             f"PII-bearing sentences ({len(HANDWRITTEN)} of them hand-written real-world forms) and "
             f"{report['benign_sentences']} benign sentences. Valid numbers come from Faker's providers and from "
             "check-digit code independent of the detector under test (usermem/evals/pii.py).", "",
             "| kind | planted | detected | recall | false-positive sentences | false-positive rate |",
             "|---|---|---|---|---|---|"]
    for kind, v in report["per_kind"].items():
        recall = "-" if v["recall"] is None else f"{v['recall']:.2%}"
        lines.append(f"| {kind} | {v['planted']} | {v['detected']} | {recall} | {v['false_positive_sentences']} "
                     f"| {v['false_positive_rate']:.2%} |")
    lines += ["", f"Benign sentences with any finding: {report['benign_flagged']} "
              f"({report['benign_flagged_rate']:.2%}).",
              f"Targets (100 % recall on cn_id, bank_card, cn_mobile; ≤ 1 % false positives per kind): "
              f"{'met' if report['meets_targets'] else 'NOT met'}.", ""]
    if report["misses"]:
        lines += ["## Misses", ""] + [f"- {m['kind']}: `{m['text']}`" for m in report["misses"]] + [""]
    if report["false_positives"]:
        lines += ["## False positives", ""] + [f"- {m['kind']}: `{m['text']}`" for m in report["false_positives"]]
    return "\n".join(lines) + "\n"
