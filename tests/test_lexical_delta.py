"""BM25 indexes derived from an earlier one (relevance/lexical.py, BM25Index.derived; issue 19).

A user's snapshot after a write builds its BM25 index from the previous snapshot's, tokenizing only the rows
that changed. The property: after any sequence of documents added, rewritten, removed or moved (including
empty documents, Chinese single characters that make bigrams, and terms whose last document went), an index
derived step by step — from the last index built, through steps where none was built — scores every query
exactly as a fresh `BM25Index` over the same documents (bit for bit: `np.array_equal` on float32), with the
same idf and `score_doc`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem.relevance.lexical import BIGRAM_MARK, BM25Index, tokenize, with_bigrams

# English words, Chinese words, and single Chinese characters (neighbouring ones make bigrams)
_TERMS = ["coffee", "tea", "parcel", "refund", "berlin", "late", "咖啡", "包裹", "北京", "豆", "花", "猫", "狗", "x"]
_doc = st.lists(st.sampled_from(_TERMS), max_size=8).map(tuple)
_op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 1000), _doc),
    st.tuples(st.just("rewrite"), st.integers(0, 1000), _doc),
    st.tuples(st.just("remove"), st.integers(0, 1000), st.just(())),
    st.tuples(st.just("move"), st.integers(0, 1000), st.just(())),  # a document to the end: order not kept
    st.tuples(st.just("build"), st.just(0), st.just(())),  # the index is built here (a query recall)
)
_query = st.lists(st.sampled_from([*_TERMS, "absent"]), min_size=1, max_size=5)


def _postings(index: BM25Index) -> dict[str, tuple[list[int], list[float]]]:
    """term -> (documents, term frequencies) in the index's order, terms without documents left out."""
    out = {}
    for term, t in index.postings_vocab.items():
        lo, hi = int(index.postings_ptr[t]), int(index.postings_ptr[t + 1])
        if hi > lo:
            out[term] = (index.postings_doc[lo:hi].tolist(), index.postings_tf[lo:hi].tolist())
    return out


def _textbook(docs: Sequence[tuple[str, ...]], query: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 per document, straight from the formula (float64), bigrams on both sides."""
    bg = [with_bigrams(d) for d in docs]
    n = len(bg)
    avgdl = sum(map(len, bg)) / n if n and any(bg) else 1.0
    out = []
    for d in bg:
        tf = Counter(d)
        total = 0.0
        for term, qtf in Counter(with_bigrams(query)).items():
            df = sum(term in e for e in bg)
            if tf[term]:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += qtf * idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(total)
    return out


def _assert_same(got: BM25Index, docs: Sequence[tuple[str, ...]], queries: list[list[str]]) -> None:
    want = BM25Index(docs)
    for q in queries:  # the fresh index itself: the formula, to float32 rounding
        assert want.scores(q).tolist() == pytest.approx(_textbook(docs, q), rel=1e-5, abs=1e-6)
    assert got.n == want.n == len(docs)
    assert _postings(got) == _postings(want)  # documents ascending in each term, as a fresh build's
    assert np.array_equal(got._norm, want._norm) and got._avgdl == want._avgdl
    for q in [*queries, [t for d in docs for t in d][:6], ["豆", "花"]]:
        assert np.array_equal(got.scores(q), want.scores(q)), q
        assert got.score_doc(q, ("豆", "花", "tea")) == want.score_doc(q, ("豆", "花", "tea"))
        for t in [*q, BIGRAM_MARK + "豆花"]:
            assert got.idf(t) == want.idf(t)


@pytest.mark.parametrize("slack", [1024, 0])  # 0: the vocabulary is renewed once dead terms outnumber live ones
@settings(max_examples=examples(200, floor=40), deadline=None)
@given(start=st.lists(_doc, max_size=6), ops=st.lists(_op, max_size=14), queries=st.lists(_query, max_size=4))
def test_a_derived_index_scores_as_a_fresh_one(slack: int, start: list[tuple[str, ...]],
                                               ops: list[tuple[str, int, tuple[str, ...]]],
                                               queries: list[list[str]]) -> None:
    before = BM25Index.VOCAB_SLACK
    BM25Index.VOCAB_SLACK = slack
    try:
        docs = list(start)
        index = BM25Index(docs)
        origin = list(range(len(docs)))  # per document: its position in the docs `index` was built over (-1: new)
        for op, at, doc in ops:
            if op == "build":
                index = BM25Index.derived(index, np.array(origin, dtype=np.int64), docs)
                origin = list(range(len(docs)))
                _assert_same(index, docs, queries)
                continue
            if op == "add":
                p = at % (len(docs) + 1)
                docs.insert(p, doc)
                origin.insert(p, -1)
            elif not docs:
                continue
            p = at % len(docs)
            if op == "rewrite":
                docs[p] = doc
                origin[p] = -1
            elif op == "remove":
                del docs[p], origin[p]
            elif op == "move":
                docs.append(docs.pop(p))
                origin.append(origin.pop(p))
        _assert_same(BM25Index.derived(index, np.array(origin, dtype=np.int64), docs), docs, queries)
    finally:
        BM25Index.VOCAB_SLACK = before


def test_derived_tokenizes_only_the_changed_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [tokenize(t) for t in ["late parcel", "我的包裹还没到", "coffee in Berlin", "豆豆是我的猫"]]
    base = BM25Index(docs)
    seen: list[tuple[str, ...]] = []
    import usermem.relevance.lexical as lexical

    real = lexical.with_bigrams
    monkeypatch.setattr(lexical, "with_bigrams", lambda d: seen.append(tuple(d)) or real(d))
    new = [docs[0], tokenize("refund for the parcel"), docs[2], docs[3], ()]
    got = BM25Index.derived(base, np.array([0, -1, 2, 3, -1]), new)
    assert seen == [new[1], ()]
    monkeypatch.setattr(lexical, "with_bigrams", real)
    _assert_same(got, new, [list(tokenize("parcel refund")), list(tokenize("豆豆的包裹"))])


def test_derived_refuses_a_mapping_of_another_length() -> None:
    base = BM25Index([("tea",)])
    with pytest.raises(ValueError):
        BM25Index.derived(base, np.array([0]), [("tea",), ("coffee",)])
