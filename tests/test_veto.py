"""The learned veto (understand/veto.py, measured by scripts/veto_measure.py, not shipped): features, fitting, the
extractor hook, the rows it learns from and the threshold choice."""

from __future__ import annotations

import json

import pytest

from usermem.policy.contracts import ContractSet
from usermem.understand import bank, training, veto
from usermem.understand.extract import PatternExtractor, extractable
from usermem.understand.text import coerce_messages


def _ctx(text: str, value: str, key: str = "allergy", method: str = "pattern") -> veto.Context:
    at = text.find(value)
    return veto.Context(text, key, value, at, at + len(value), method)


def test_features_carry_the_filters_reasons_and_the_words_before_the_value() -> None:
    f = veto.features(_ctx("my sister is allergic to peanuts", "peanuts"))
    assert {"k:allergy", "m:pattern", "r:third_party"} <= f
    assert "s:w:sister" in f and "s:w:x" in f  # the value is blanked out of the sentence features
    assert not any("peanuts" in x for x in f if x.startswith("s:"))
    mine = veto.features(_ctx("I'm allergic to peanuts", "peanuts"))
    assert "r:none" in mine and "r:third_party" not in mine
    assert "q:sentence" in veto.features(_ctx("am I allergic to peanuts?", "peanuts"))
    # a value that cannot be placed still gets features (from the whole message)
    assert "unplaced" in veto.features(veto.Context("I'm allergic to peanuts", "allergy", "nuts!", -1, -1, "model"))


def test_fit_learns_to_veto_values_in_questions_and_round_trips() -> None:
    yes = ["I live in {}", "I moved to {} last year", "my home is in {}", "I'm based in {}"]
    no = ["do you know anything about {}?", "is {} nice in May?", "what's the weather in {}?", "have you been to {}?"]
    cities = ["Lisbon", "Porto", "Oslo", "Lima", "Quito", "Accra"]
    ctxs, ys = [], []
    for c in cities:
        for t in yes:
            ctxs.append(_ctx(t.format(c), c, "city"))
            ys.append(0)
        for t in no:
            ctxs.append(_ctx(t.format(c), c, "city"))
            ys.append(1)
    m = veto.fit(ctxs, ys, c=1.0).with_threshold(0.5)
    assert m.vetoes(_ctx("what's the weather in Hanoi?", "Hanoi", "city"))
    assert not m.vetoes(_ctx("I live in Hanoi", "Hanoi", "city"))
    again = veto.VetoModel.from_json(json.loads(veto.dump(m)))
    for ctx in ctxs[:8]:
        assert again.probability(ctx) == pytest.approx(m.probability(ctx), abs=1e-3)
    assert veto.fit(ctxs, ys, c=1.0).weights == m.weights  # deterministic


class _VetoAll:
    def __init__(self) -> None:
        self.asked: list[veto.Context] = []

    def vetoes(self, ctx: veto.Context, threshold: float | None = None) -> bool:
        self.asked.append(ctx)
        return True


def test_the_extractor_asks_the_veto_about_every_value_with_its_place() -> None:
    allowed = extractable(ContractSet())
    v = _VetoAll()
    ex = PatternExtractor(allowed, veto=v)
    text = "I'm allergic to peanuts and I live in Toronto"
    assert ex.extract(coerce_messages([text])) == []
    assert {c.key for c in v.asked} >= {"allergy", "city"}
    for c in v.asked:
        assert c.text == text and c.text[c.start:c.end].lower() == c.value.lower()
    plain = PatternExtractor(allowed, veto=None)
    assert {c.key for c in plain.extract(coerce_messages([text]))} >= {"allergy", "city"}


def test_filters_off_lets_the_traps_through_for_the_training_rows() -> None:
    item = bank.parse_item({"id": "t-1", "lang": "en", "split": "train",
                            "turns": [{"role": "user", "content": "If I lived in Berlin, would I need a car?"}],
                            "labels": [], "negative": "hypothetical"})
    ex = PatternExtractor(extractable(ContractSet()), veto=None)
    on = training.veto_rows(ex, [item])
    off = training.veto_rows(ex, [item], filters=False)
    assert not [r for r in on if r["key"] == "city"]
    rows = [r for r in off if r["key"] == "city"]
    assert rows and not rows[0]["match"] and rows[0]["filtered"] is False
    assert training._veto_label(rows[0]) == 1
    assert ex.filters and ex.veto is None  # restored


def test_choose_veto_threshold_takes_the_most_vetoing_within_the_budget() -> None:
    def s(dev: float, more: float) -> dict[str, dict[str, float]]:
        return {"dev": {"f1": dev}, bank.MORE_DEV: {"f1": more}}

    scores = {"0.3": s(0.90, 0.70), "0.5": s(0.915, 0.752), "0.7": s(0.92, 0.755), "1.01": s(0.92, 0.755)}
    assert training.choose_veto_threshold(scores) == 0.5
    assert training.choose_veto_threshold({"0.5": s(0.5, 0.5), "1.01": s(0.92, 0.755)}) == 1.01


def test_no_veto_is_on_by_default() -> None:
    """Measured, not shipped (docs/understanding.md): the default extractor has no veto and loads no veto artifact."""
    assert PatternExtractor(extractable(ContractSet())).veto is None
    assert not (training.models_dir() / f"{veto.NAME}.json").exists()
