"""understand/learned.py: `detect` (which skips the sigmoid for logits below the cut) returns exactly the
fields and probabilities of filtering `probabilities` by the threshold, on the shipped planner model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.understand.learned import load_model

_MODEL = load_model("plan")
_WORDS = ["allergy", "allergic", "peanut", "city", "live", "berlin", "my", "phone", "number", "diet", "vegan",
          "birthday", "when", "where", "what", "?", "我", "对", "花生", "过敏", "住在", "北京", "电话", "生日", "喜欢"]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.sampled_from(_WORDS) | st.text(max_size=6), max_size=12),
       cut=st.none() | st.floats(0.0, 1.0) | st.sampled_from([0.5, 0.3, 0.9]))
def test_detect_equals_thresholded_probabilities(words: list[str], cut: float | None) -> None:
    assert _MODEL is not None
    text = " ".join(words)
    threshold = _MODEL.threshold if cut is None else cut
    expected = {f: p for f, p in _MODEL.probabilities(text).items() if p >= threshold}
    assert _MODEL.detect(text, cut) == expected


def test_detect_finds_a_field_the_model_knows() -> None:
    assert _MODEL is not None
    assert _MODEL.detect("I am allergic to peanuts", 0.05)  # a non-empty answer: the fast filter lets hits through
