"""The list hot path's row conversions equal the plain ones (issue 19, list 100).

store/rows.py builds a MemoryRecord slot by slot and decodes a plain JSON string value without the decoder;
engine/recall.py builds ScoredMemory slot by slot. These properties check, on random rows and values, that
each gives exactly what the dataclass constructor and json.loads give: same fields, same types, same
equality and hash, same errors for text json.loads refuses.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import FrozenInstanceError, fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem.engine.recall import _scored_memory
from usermem.model import EventWindow, Kind, MemoryRecord, ScoredMemory, Source
from usermem.store.rows import COLUMNS, dumps_value, loads_value, record_from_row, record_with_value

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
_opt_text = st.none() | st.text(max_size=12)
_opt_time = st.none() | st.floats(min_value=0, max_value=4e9)


def _reference(row: tuple[object, ...]) -> MemoryRecord:
    """The conversion before issue 19's list work: the dataclass constructor and json.loads."""
    return MemoryRecord(
        row[0], row[1], row[2], Kind(row[3]), row[4], json.loads(row[5]), Source(row[6]), row[7], row[8], row[9],
        row[10], row[11], row[12], row[13], row[14], row[15], row[16], row[17], row[18], row[19], row[20],
        row[21], bool(row[22]), None if row[23] is None else json.loads(row[23]),
    )


@st.composite
def rows(draw: st.DrawFn) -> tuple[object, ...]:
    value = draw(_json)
    canonical = draw(st.none() | _json)
    return (
        draw(st.text(min_size=1, max_size=8)), draw(st.text(min_size=1, max_size=8)),
        draw(st.text(min_size=1, max_size=8)), draw(st.sampled_from([k.value for k in Kind])),
        draw(st.text(min_size=1, max_size=8)), dumps_value(value), draw(st.sampled_from([s.value for s in Source])),
        draw(st.floats(0, 1)), draw(st.floats(0, 1)), draw(st.floats(0, 4e9)), draw(_opt_time), draw(_opt_time),
        draw(_opt_time), draw(_opt_text), draw(_opt_text), draw(_opt_time), draw(_opt_time), draw(_opt_text),
        draw(_opt_text), draw(_opt_time), draw(_opt_text), draw(_opt_text), draw(st.sampled_from([0, 1])),
        None if canonical is None else dumps_value(canonical),
    )


def _same(a: object, b: object) -> None:
    assert type(a) is type(b)
    for f in fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert type(x) is type(y), f.name
        assert x == y or (x != x and y != y), f.name  # NaN never comes from a store row, but compare it sanely
    assert a == b
    assert repr(a) == repr(b)
    assert _hash(a) == _hash(b)


def _hash(x: object) -> int | str:
    try:
        return hash(x)
    except TypeError as exc:  # a list or dict value: unhashable either way
        return str(exc)


@settings(max_examples=examples(400))
@given(rows())
def test_record_from_row_equals_the_constructor(row: tuple[object, ...]) -> None:
    assert len(row) == len(COLUMNS)
    fast = record_from_row(row)
    _same(fast, _reference(row))
    assert pickle.loads(pickle.dumps(fast)) == fast
    with pytest.raises(FrozenInstanceError):
        fast.key = "other"  # type: ignore[misc]


def _same_as_json_loads(text: str | bytes) -> None:
    """loads_value gives what json.loads gives — the same type and value, or the same kind of error."""
    try:
        expected = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            loads_value(text)
        return
    got = loads_value(text)
    assert type(got) is type(expected)
    assert got == expected


@settings(max_examples=examples(600))
@given(st.text() | _json.map(dumps_value) | st.text().map(lambda t: f'"{t}"')
       | st.text().map(lambda t: json.dumps(t)) | st.text().map(lambda t: json.dumps(t, ensure_ascii=False)))
def test_loads_value_equals_json_loads(text: str) -> None:
    _same_as_json_loads(text)


@pytest.mark.parametrize("text", ['"plain"', '""', '"中文 with spaces"', ' "padded" ', '"a\\"b"', '"tab\\there"',
                                  '"raw\ttab"', '"a"b"', '"unterminated', '"\u2028"', '"\x7f"', b'"bytes"'])
def test_loads_value_edge_cases(text: str | bytes) -> None:
    _same_as_json_loads(text)


def test_record_with_value_keeps_a_decoded_value() -> None:
    row = ("m1", "t", "u", "fact", "city", None, "user_confirmed", 1.0, 0.9, 5.0, *([None] * 12), 0, None)
    rec = record_with_value(row, {"city": "上海"})
    assert rec == MemoryRecord("m1", "t", "u", Kind.FACT, "city", {"city": "上海"}, Source.USER_CONFIRMED, 1.0, 0.9,
                               5.0)


@settings(max_examples=examples(200))
@given(rows(), st.floats(0, 2), st.floats(0, 1), st.none() | st.floats(0, 1), st.booleans(), _opt_text,
       st.none() | st.builds(EventWindow, st.floats(0, 10), st.floats(10, 20), st.text(max_size=5)))
def test_scored_memory_equals_the_constructor(row: tuple[object, ...], score: float, weight: float,
                                              relevance: float | None, flag: bool, question: str | None,
                                              window: EventWindow | None) -> None:
    record = record_from_row(row)
    fast = _scored_memory(record, score, weight, relevance, flag, question, window)
    ref = ScoredMemory(record, score, weight, relevance, flag, question, window)
    assert type(fast) is ScoredMemory
    assert [getattr(fast, f.name) for f in fields(ScoredMemory)] == [getattr(ref, f.name) for f in fields(ref)]
    assert fast == ref and repr(fast) == repr(ref)
