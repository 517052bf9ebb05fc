"""FieldModel.scores over the weights as a dense matrix equals the sparse loop (`sparse_scores`) to the bit
(issue 19: the planner runs on every recall with a query)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem.understand.learned import FieldModel, features, load_model

_WORDS = ["my", "allergy", "peanuts", "where", "do", "I", "live", "coffee", "diet", "vegan", "phone", "number",
          "birthday", "what", "is", "the", "parcel", "late", "我", "住在", "哪里", "过敏", "花生", "咖啡", "喜欢",
          "生日", "?", "！", "name", "called", "dog", "work", "job", "email"]


def _reference(m: FieldModel, text: str) -> list[float]:
    idx = [m.vocab[f] for f in features(text) if f in m.vocab]
    if not idx:
        return list(m.intercepts)
    return m.sparse_scores(idx, math.sqrt(sum(m.idf[i] ** 2 for i in idx)) or 1.0)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join))
def test_dense_scores_equal_the_sparse_loop_to_the_bit(text: str) -> None:
    m = load_model("plan")
    assert m is not None
    assert m.scores(text) == _reference(m, text)


def test_a_row_naming_a_field_twice_keeps_the_sparse_sum() -> None:
    m = FieldModel("t", ("a", "b"), {"w:x": 0, "w:y": 1}, [1.0, 2.0], [[(0, 0.3), (0, 0.1)], [(1, 0.7)]],
                   [0.1, -0.2], (1.0, 0.0), 0.5, {})
    assert m._dense_rows is None  # two weights of one field in a row: not the same sum as a dense row
    x, y = 1.0 / math.sqrt(5.0), 2.0 / math.sqrt(5.0)
    assert m.scores("x y") == [0.1 + x * 0.3 + x * 0.1, -0.2 + y * 0.7]
    ok = FieldModel("t", ("a", "b"), {"w:x": 0, "w:y": 1}, [1.0, 2.0], [[(0, 0.3), (1, -0.4)], [(1, 0.7)]],
                    [0.1, -0.2], (1.0, 0.0), 0.5, {})
    assert ok._dense_rows is not None
    assert ok.scores("x y") == _reference(ok, "x y") and ok.scores("nothing") == [0.1, -0.2]
