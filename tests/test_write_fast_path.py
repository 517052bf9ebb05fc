"""The write path's fixed per-write costs cut without changing what a write does (docs/scaling.md, write path).

- the tenant's contract set is read inside the write transaction on SQLite; a batch judged before it under
  the set the tenant's last write found is judged again when the set read inside differs: a contract change
  by this or another process (another connection to the file) takes effect at the next write, also when it
  lands between the judging and the transaction;
- JSON encoders built once, `new_id` without UUID objects, an unknown key's default contract built once per
  set, the limits built once per settings, `detect`'s kind set converted once, the enum lookups by dict:
  each gives exactly what the code it replaced gave.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem import Memory, Op, Reason
from usermem.config import load_settings
from usermem.model import AuditEvent, Kind, Source, new_id, parse_kind
from usermem.policy.contracts import ContractSet, FieldContract, UnknownFieldPolicy
from usermem.policy.pii import ALL_KINDS, PIIKind, detect
from usermem.policy.validate import canonical_json, check_write
from usermem.store.rows import dumps_value

T0 = 1_790_000_000.0
SRC = Path(__file__).resolve().parents[1] / "src"

# -- the contract set read inside the transaction ------------------------------------------------------------


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:
    """Two Memory instances (two connections) on one SQLite file."""
    url = f"sqlite:///{tmp_path}/w.db"
    a, b = Memory(url), Memory(url)
    yield a, b
    a.close()
    b.close()


def test_a_change_by_another_connection_is_seen_by_the_next_write(pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    assert a.write("acme", "u", "preference", "reply_length", "concise", now=T0).op is Op.ADD
    b.disable_field("acme", "reply_length", now=T0 + 1)
    r = a.write("acme", "u", "preference", "reply_length", "long", now=T0 + 2)
    assert (r.op, r.reason) == (Op.REJECT, Reason.FIELD_DISABLED)
    b.enable_field("acme", "reply_length", now=T0 + 3)
    assert a.write("acme", "u", "preference", "reply_length", "long", now=T0 + 4).op is Op.UPDATE
    b.set_unknown_fields("acme", "reject", now=T0 + 5)
    r = a.write("acme", "u", "preference", "favourite_tea", "oolong", now=T0 + 6)
    assert (r.op, r.reason) == (Op.REJECT, Reason.UNKNOWN_FIELD)
    b.set_unknown_fields("acme", "accept", now=T0 + 7)
    assert a.write("acme", "u", "preference", "favourite_tea", "oolong", now=T0 + 8).op is Op.ADD
    # allowed PII follows the stored contract both ways
    assert a.write("acme", "u", "fact", "email", "a@b.io", now=T0 + 9).op is Op.ADD
    b.set_contract("acme", {**b.contract("acme", "email").to_dict(), "allowed_pii": []}, now=T0 + 10)
    r = a.write("acme", "u", "fact", "email", "c@d.io", now=T0 + 11)
    assert (r.op, r.reason) == (Op.REJECT, Reason.SENSITIVE_VALUE)
    b.set_contract("acme", {**b.contract("acme", "email").to_dict(), "allowed_pii": ["email"]}, now=T0 + 12)
    assert a.write("acme", "u", "fact", "email", "c@d.io", now=T0 + 13).op is Op.UPDATE


def test_a_change_between_judging_and_the_transaction_is_honoured(pair: tuple[Memory, Memory]) -> None:
    """The batch is judged before the transaction under the last set seen; the set read inside wins."""
    a, b = pair
    assert a.write("acme", "u", "preference", "reply_length", "concise", now=T0).op is Op.ADD
    pipeline = a._write
    judge = pipeline.prepare
    calls: list[ContractSet | None] = []

    def judged_then_changed(req, contracts=None):
        calls.append(contracts)
        if len(calls) == 1:  # after the first judging, before the transaction: another writer changes it
            b.disable_field("acme", "reply_length", now=T0 + 1)
        return judge(req, contracts)

    with mock.patch.object(pipeline, "prepare", judged_then_changed):
        r = a.write("acme", "u", "preference", "reply_length", "long", now=T0 + 2)
    assert (r.op, r.reason) == (Op.REJECT, Reason.FIELD_DISABLED)
    assert len(calls) == 2 and calls[0] is not calls[1]  # judged again under the set in force
    assert calls[1].get("reply_length").enabled is False
    assert [v.value for v in a.history("acme", "u", "reply_length")] == ["concise"]
    # the REJECT is audited like any other, in the write's transaction
    last = a.audit("acme", user_id="u", action="write")[-1]
    assert (last.op, last.reason, last.key) == ("REJECT", "field_disabled", "reply_length")


def test_an_unchanged_set_is_not_judged_twice(pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    b.set_unknown_fields("acme", "accept", now=T0)  # a stored policy document: the registry's cached set
    a.write("acme", "u", "preference", "k1", "v0", now=T0)  # learns the tenant's set
    with mock.patch.object(a._write, "prepare", wraps=a._write.prepare) as judge:
        assert a.write("acme", "u", "preference", "k1", "v1", now=T0 + 1).op is Op.UPDATE
        assert a.write_many("acme", "u", [{"kind": "preference", "key": f"k{i}", "value": "x"}
                                          for i in range(2, 5)], now=T0 + 2)[0].op is Op.ADD
    assert judge.call_count == 1 + 3


def test_a_change_in_another_process_is_seen(tmp_path):
    url = f"sqlite:///{tmp_path}/p.db"
    a = Memory(url)
    try:
        assert a.write("acme", "u", "preference", "reply_length", "concise", now=T0).op is Op.ADD
        code = ("import sys; from usermem import Memory; m = Memory(sys.argv[1]); "
                "m.disable_field('acme', 'reply_length'); m.close()")
        subprocess.run([sys.executable, "-c", code, url], check=True, timeout=120,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
        r = a.write("acme", "u", "preference", "reply_length", "long", now=T0 + 2)
        assert (r.op, r.reason) == (Op.REJECT, Reason.FIELD_DISABLED)
    finally:
        a.close()


def test_pinned_and_per_tenant_sets_still_apply(mem):
    mem.disable_field("acme", "reply_length")
    assert mem.write("acme", "u", "preference", "reply_length", "x").reason is Reason.FIELD_DISABLED
    assert mem.write("other", "u", "preference", "reply_length", "x").op is Op.ADD
    assert mem.write("acme", "u", "preference", "reply_length", "x").reason is Reason.FIELD_DISABLED


# -- identical results ------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _old(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        return ("ValueError", str(exc))


@settings(max_examples=examples(400), deadline=None)
@given(_json)
def test_prebuilt_encoders_give_json_dumps_text(value):
    canon = {"ensure_ascii": False, "sort_keys": True, "separators": (",", ":")}
    assert _old(canonical_json, value) == _old(json.dumps, value, allow_nan=False, **canon)
    for nan in (False, True):
        assert _old(dumps_value, value, allow_nan=nan) == _old(json.dumps, value, allow_nan=nan, **canon)
    detail = {"detail": value, "source": "user_confirmed"}
    assert AuditEvent("t", T0, "write", detail=detail).detail_json() == json.dumps(detail, ensure_ascii=False,
                                                                                   sort_keys=True)
    assert math.isnan(json.loads(dumps_value(math.nan)))


def _old_new_id() -> str:
    ms = time.time_ns() // 1_000_000
    rand = uuid.uuid4().int & ((1 << 74) - 1)
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value).hex


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(min_size=16, max_size=16), st.integers(min_value=0, max_value=2**62))
def test_new_id_is_the_old_id_for_the_same_random_bytes_and_time(random_bytes, ns):
    with mock.patch("os.urandom", return_value=random_bytes), mock.patch("time.time_ns", return_value=ns):
        assert new_id() == _old_new_id()


def test_new_ids_keep_their_layout():
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for i in ids:
        u = uuid.UUID(i)
        assert u.hex == i and u.version == 7 and u.variant == uuid.RFC_4122


def test_unknown_key_contract_is_built_once_and_equals_a_fresh_one():
    cs = ContractSet()
    first = cs.for_write("favourite_tea", Kind.PREFERENCE)
    assert first == FieldContract(key="favourite_tea", kind=Kind.PREFERENCE)
    assert cs.for_write("favourite_tea", Kind.PREFERENCE) is first
    assert cs.for_write("favourite_tea", Kind.FACT) == FieldContract(key="favourite_tea", kind=Kind.FACT)
    assert cs.for_write("email", Kind.FACT) is cs.get("email")
    assert ContractSet(cs, UnknownFieldPolicy.REJECT).for_write("favourite_tea", Kind.PREFERENCE) is None
    with mock.patch("usermem.policy.contracts._UNKNOWN_DEFAULTS_KEPT", 2):
        small = ContractSet()
        made = [small.for_write(f"k{i}", Kind.FACT) for i in range(5)]
        assert made == [FieldContract(key=f"k{i}", kind=Kind.FACT) for i in range(5)]
        assert len(small._unknown_defaults) == 2


def test_limits_follow_the_settings(tmp_path):
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/l.db", embedder="none",
                                      max_value_bytes=64))
    try:
        ctx = m._write.ctx
        assert ctx.limits.max_value_bytes == 64 and ctx.limits is ctx.limits
        assert m.write("t", "u", "fact", "note", "x" * 100).reason is Reason.INVALID_INPUT
        ctx.settings = ctx.settings.with_overrides(max_value_bytes=4096)
        assert ctx.limits.max_value_bytes == 4096
        assert m.write("t", "u", "fact", "note", "x" * 100).op is Op.ADD
    finally:
        m.close()


@pytest.mark.parametrize("kinds", [
    ALL_KINDS, frozenset({PIIKind.EMAIL}), frozenset({"email", "cn_mobile"}), frozenset(), ["email"], ("cn_id",),
    None])
def test_detect_kinds_in_any_shape(kinds):
    text = "mail a@b.io or call 13800138000, id 110105194912310021"
    wanted = ALL_KINDS if kinds is None else {PIIKind(k) for k in kinds}
    assert [f.kind for f in detect(text, kinds)] == [f.kind for f in detect(text) if f.kind in wanted]
    with pytest.raises(ValueError):
        detect(text, frozenset({"not_a_kind"}))


@pytest.mark.parametrize("text", ["fact", "preference", "profile", " Fact ", "PROFILE", "Context", "nope", ""])
def test_parse_kind_and_source_lookups_are_the_enum_lookups(text):
    def old_parse(value):
        lowered = value.strip().lower()
        return {"profile": Kind.FACT}.get(lowered) or Kind(lowered)

    assert _old(parse_kind, text) == _old(old_parse, text)
    assert parse_kind(Kind.EPISODE) is Kind.EPISODE
    for source in [*(s.value for s in Source), Source.INFERRED, "User_Confirmed", "bogus"]:
        try:
            expected = Source(source)
        except ValueError:
            with pytest.raises(ValueError):
                check_write("fact", "k", "v", source)
            continue
        assert check_write("fact", "k", "v", source).source is expected


def test_hints_are_bounded_and_only_hints(pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    with mock.patch("usermem.engine.write._HINTS_KEPT", 2):
        for t in ("t1", "t2", "t3", "t1"):
            if t == "t3":
                b.disable_field(t, "reply_length")
            r = a.write(t, "u", "preference", "reply_length", "x", now=T0)
            assert r.reason is (Reason.FIELD_DISABLED if t == "t3" else None)
            assert len(a._write._contract_hints) <= 2
