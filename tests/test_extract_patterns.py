"""General phrasings the no-LLM extractor used to miss or mislabel (issue 13, seventh round); zh and en, written
fresh for these tests (not taken from the bank)."""

from __future__ import annotations

import pytest

from usermem.policy.contracts import ContractSet
from usermem.understand import rules
from usermem.understand.extract import PatternExtractor, extractable
from usermem.understand.text import Message


@pytest.fixture(scope="module")
def ex() -> PatternExtractor:
    return PatternExtractor(extractable(ContractSet()))


def _got(ex: PatternExtractor, *turns: str) -> dict[str, object]:
    msgs = [Message("user", t, n) for n, t in enumerate(turns)]
    return {c.key: c.value for c in ex.extract(msgs)}


@pytest.mark.parametrize(("text", "value"), [
    ("我是听障人士，开会的时候麻烦打字给我", "听障人士"),
    ("我右腿是假肢，爬山就算了", "假肢"),
    ("I'm on the autism spectrum, so literal instructions help me", "on the autism spectrum"),
    ("I walk with a cane these days, so pick hotels with lifts", "walk with a cane"),
])
def test_a_disability_is_accessibility_not_medical_history(ex: PatternExtractor, text: str, value: str) -> None:
    got = _got(ex, text)
    assert got.get("accessibility") == value
    assert "medical_history" not in got


@pytest.mark.parametrize("value", ["自闭症谱系", "左手装了义肢", "autistic", "legally blind", "uses crutches"])
def test_a_medical_value_naming_a_disability_is_re_keyed(value: str) -> None:
    assert rules.disability(value)


@pytest.mark.parametrize("value", ["糖尿病", "高血压", "asthma", "a bad back", "migraines"])
def test_an_illness_stays_medical_history(value: str) -> None:
    assert not rules.disability(value)


@pytest.mark.parametrize("text", ["我弟弟是聋人，他想学手语", "my sister is autistic and hates loud places"])
def test_someone_elses_disability_is_not_the_users(ex: PatternExtractor, text: str) -> None:
    got = _got(ex, text)
    assert "accessibility" not in got and "medical_history" not in got
