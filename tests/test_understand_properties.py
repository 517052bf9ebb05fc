"""Invariants over arbitrary input (hypothesis): plans stay in the whitelist, extraction never crashes or
invents fields, assembled blocks cannot be broken by any stored value."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.model import Kind, MemoryRecord, ScoredMemory, Source
from usermem.policy.contracts import ContractSet
from usermem.understand.assemble import assemble
from usermem.understand.extract import Extractor, extractable
from usermem.understand.plan import DeterministicPlanner, RecallPlan

CONTRACTS = ContractSet()
PLANNER = DeterministicPlanner(CONTRACTS.with_contract(CONTRACTS.get("email").evolve(enabled=False)))
EXTRACTOR = Extractor(CONTRACTS)
ENABLED = {c.key for c in PLANNER.contracts.enabled()}
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200) | st.sampled_from([
    "上次说的方案A能再发我邮箱吗？", "以后都用Markdown", "别打电话", "I'm allergic to peanuts", "我喜欢川菜，哈哈"])


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_plan_fields_are_always_enabled_contracts(text: str) -> None:
    plan = PLANNER.plan(text)
    assert set(plan.fields) <= ENABLED and "email" not in plan.fields
    assert plan.memory_priority in ("high", "medium", "low")
    assert len(set(plan.fields)) == len(plan.fields)


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=6))
def test_extraction_proposes_only_whitelisted_fields(messages: list[str]) -> None:
    allowed = extractable(CONTRACTS)
    for c in EXTRACTOR.extract(messages, use_llm=False):
        assert c.key in allowed and c.kind is allowed[c.key].kind
        assert 0 <= c.confidence <= 1 and c.value not in ("", None, [])


@settings(max_examples=300, deadline=None)
@given(st.recursive(TEXT | st.integers() | st.booleans(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=6))
def test_no_value_can_break_out_of_its_tag(value) -> None:
    rec = MemoryRecord(id="x", tenant="t", user_id="u", kind=Kind.FACT, key="note", value=value,
                       source=Source.USER_CONFIRMED, confidence=1.0, importance=0.9, created_at=0.0)
    a = assemble(RecallPlan(("note",), (), False, "medium"), [ScoredMemory(rec, 0.9, 1.0)], budget_tokens=32_000)
    tags = re.findall(r"</?[A-Z_]+>", a.prompt)
    assert tags == ["<USER_FACTS>", "</USER_FACTS>", "<USER_PREFERENCES>", "</USER_PREFERENCES>"]
    assert a.prompt.count("<") == 4 and a.prompt.count(">") == 4
    body = re.match(r"<USER_FACTS>(.*)</USER_FACTS>", a.prompt, re.S)
    assert body is not None
    facts = json.loads(body.group(1))
    assert facts == ({} if "note" in a.withheld else {"note": value})
