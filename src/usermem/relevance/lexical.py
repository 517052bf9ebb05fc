"""Lexical relevance: BM25 over memory text, with jieba segmentation for Chinese and word tokens for English.

Tokenisation: lower-case; runs of CJK characters are segmented with jieba (search mode, so
"退款申请" also yields "退款" and "申请"); other text is split into words of letters and digits.
A short stop list per language drops function words that would otherwise match everything.
English words get a light plural/"-ing"/"-ed" strip so "refunds" meets "refund".

BM25 (Robertson/Spärck Jones, k1 = 1.2, b = 0.75) with the non-negative idf
log(1 + (N − df + 0.5) / (df + 0.5)).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from typing import Any

import numpy as np

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SPLIT = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")



def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


EN_STOP = _words("""
a an the and or but if then of to in on at by for with from as is are was were be been being am do does did
doing have has had having i me my mine we us our you your yours he him his she her hers it its they them their
this that these those what which who whom whose when where why how all any both each few more most other some
such no nor not only own same so than too very can will just should would could shall may might must about
into over under again further once here there up down out off s t don't i'm it's that's there's
""")
ZH_STOP = _words("""
的 了 是 我 你 他 她 它 们 我们 你们 他们 在 和 与 及 或 也 都 就 还 又 吗 呢 吧 啊 呀 么 什么 怎么 这 那 这个 那个
一个 有 没有 不 很 会 能 要 想 对 给 把 被 让 从 到 说 过 着 上 下 里 之 其 以 而 等 为 所 曾经 曾 可以 哪些 哪 当时
""")

_jieba_lock = threading.Lock()
_jieba_ready = False


def _jieba() -> Any:
    global _jieba_ready
    import jieba  # type: ignore[import-untyped]

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    return jieba


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ied"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@lru_cache(maxsize=50_000)
def tokenize(text: str) -> tuple[str, ...]:
    """Index terms of a text, in order. Chinese through jieba, English as lightly stemmed words."""
    out: list[str] = []
    for part in _SPLIT.split(text.lower()):
        if not part:
            continue
        if _CJK.fullmatch(part):
            for tok in _jieba().lcut_for_search(part):
                if tok and tok not in ZH_STOP:
                    out.append(tok)
        else:
            for w in _WORD.findall(part):
                if w not in EN_STOP:
                    out.append(_stem(w))
    return tuple(out)


_ONE_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
BIGRAM_MARK = "\u2061"  # bigram terms live apart from jieba's words (a two-character word is not counted twice)
CJK_BIGRAMS = True


def with_bigrams(tokens: Sequence[str]) -> tuple[str, ...]:
    """Chinese terms plus character bigrams, derived from `tokenize`'s output only (so stored token lists need
    no rebuild): each pair of neighbouring single-character terms ("豆", "豆" -> "豆豆": a name or a word jieba
    does not know, split into characters). Bigrams inside longer terms were tried and left out: jieba's
    search mode already emits their sub-words, and on the MemoryBank dev split they lowered BM25 MRR
    (0.616 -> 0.594; only inside terms jieba did not split: 0.604); the neighbour bigrams left it and
    semantic top-1 dev unchanged (docs/relevance.md)."""
    if not CJK_BIGRAMS:
        return tuple(tokens)
    out = list(tokens)
    prev = ""
    for t in tokens:
        if len(t) == 1 and _ONE_CJK.fullmatch(t):
            if prev:
                out.append(BIGRAM_MARK + prev + t)
            prev = t
        else:
            prev = ""
    return tuple(out)


class BM25Index:
    """An inverted index over a fixed list of documents (token sequences); `scores(query)` per document.
    Chinese terms are extended with character bigrams (`with_bigrams`) on both sides.

    Postings are flat arrays sorted by (term id, document): term t's documents are
    `postings_doc[postings_ptr[t]:postings_ptr[t+1]]` (ascending) with their term frequencies in `postings_tf`;
    term ids come from `postings_vocab` (read-only: `derived` reads another index's). `derived` builds the index
    of a changed document list from an index of the previous one, tokenizing only the documents that changed
    (the snapshot of a user after a write: relevance/vectors.py); its scores equal a fresh index's bit for bit
    (the same postings, the same length array, so the same idf, avgdl and normalisers)."""

    # A derived index keeps the terms of documents that are gone (no postings) until they outnumber the live
    # terms by this many, then starts a fresh vocabulary (a full build: amortised, the vocabulary stays bounded).
    VOCAB_SLACK = 1024

    n: int
    k1: float
    b: float
    postings_vocab: dict[str, int]  # term -> term id
    postings_ptr: np.ndarray  # int64 (terms + 1): term t's postings are [postings_ptr[t], postings_ptr[t + 1])
    postings_doc: np.ndarray  # int32 per posting: the document
    postings_tf: np.ndarray  # float32 per posting: the term's frequency in it
    doc_lengths: np.ndarray  # float32 per document: its number of terms (bigrams included)
    _avgdl: float
    _norm: np.ndarray  # float32 per document: k1 · (1 − b + b · dl / avgdl)

    def __init__(self, docs: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._build(docs, None, np.full(len(docs), -1, dtype=np.int64))

    @classmethod
    def derived(cls, base: BM25Index, old_of_new: np.ndarray, docs: Sequence[Sequence[str]]) -> BM25Index:
        """The index of `docs`, where `docs[i]` is the document `base` indexed at position `old_of_new[i]` when
        that is ≥ 0 (the caller vouches they are equal; those rows keep their postings) and a new or changed
        one when it is −1 (only these are tokenized). Same scores as `BM25Index(docs)`."""
        out = cls.__new__(cls)
        out.k1, out.b = base.k1, base.b
        old_of_new = np.asarray(old_of_new, dtype=np.int64)
        if len(old_of_new) != len(docs):
            raise ValueError("old_of_new must give one position per document")
        live = int(np.count_nonzero(np.diff(base.postings_ptr)))
        if len(base.postings_vocab) > 2 * live + cls.VOCAB_SLACK:  # many terms of gone documents: a fresh vocabulary
            cls._build(out, docs, None, np.full(len(docs), -1, dtype=np.int64))
        else:
            cls._build(out, docs, base, old_of_new)
        return out

    def _build(self, docs: Sequence[Sequence[str]], base: BM25Index | None, old_of_new: np.ndarray) -> None:
        n = self.n = len(docs)
        kept = np.flatnonzero(old_of_new >= 0)
        fresh = np.flatnonzero(old_of_new < 0)
        lengths = np.empty(n, dtype=np.float32)
        vocab: dict[str, int] = {} if base is None else dict(base.postings_vocab)
        # The fresh documents' postings, sorted by (term id, document): key = term id · n + document.
        bg = [with_bigrams(docs[i]) for i in fresh.tolist()]
        counts = np.fromiter(map(len, bg), dtype=np.int64, count=len(bg))
        lengths[fresh] = counts
        flat = list(chain.from_iterable(bg))
        for t in dict.fromkeys(flat):
            if t not in vocab:
                vocab[t] = len(vocab)
        tids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        keys, tf = np.unique(tids * n + np.repeat(fresh, counts), return_counts=True)
        tf = tf.astype(np.float32)
        if base is not None and len(kept):
            # The kept documents' postings, their documents renumbered (order kept within each term).
            before = old_of_new[kept]
            lengths[kept] = base.doc_lengths[before]
            new_of_old = np.full(base.n, -1, dtype=np.int64)
            new_of_old[before] = kept
            doc = new_of_old[base.postings_doc]
            stay = doc >= 0
            term = np.repeat(np.arange(len(base.postings_ptr) - 1, dtype=np.int64), np.diff(base.postings_ptr))
            old_keys = term[stay] * n + doc[stay]
            old_tf = base.postings_tf[stay]
            if len(before) > 1 and not bool(np.all(before[1:] > before[:-1])):  # reordered: sort again
                order = np.argsort(old_keys, kind="stable")
                old_keys, old_tf = old_keys[order], old_tf[order]
            at = np.searchsorted(old_keys, keys)
            keys = np.insert(old_keys, at, keys)
            tf = np.insert(old_tf, at, tf)
        term, doc = np.divmod(keys, max(n, 1))
        self.postings_vocab = vocab
        self.postings_ptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term, minlength=len(vocab)), out=self.postings_ptr[1:])
        self.postings_doc = doc.astype(np.int32)
        self.postings_tf = tf
        self.doc_lengths = lengths
        avgdl = float(lengths.mean()) if n and lengths.sum() > 0 else 1.0
        # Per-document length normaliser, precomputed: k1 · (1 − b + b · dl / avgdl)
        self._avgdl = avgdl
        self._norm = (self.k1 * (1 - self.b + self.b * lengths / avgdl)).astype(np.float32)

    def _df(self, term: str) -> int:
        t = self.postings_vocab.get(term)
        return 0 if t is None else int(self.postings_ptr[t + 1] - self.postings_ptr[t])

    def idf(self, term: str) -> float:
        df = self._df(term)
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        query_tokens = with_bigrams(query_tokens)
        out = np.zeros(self.n, dtype=np.float32)
        for term, qtf in Counter(query_tokens).items():
            t = self.postings_vocab.get(term)
            if t is None:
                continue
            lo, hi = int(self.postings_ptr[t]), int(self.postings_ptr[t + 1])
            if lo == hi:
                continue
            ids, tfs = self.postings_doc[lo:hi], self.postings_tf[lo:hi]
            idf = math.log(1 + (self.n - (hi - lo) + 0.5) / ((hi - lo) + 0.5))
            out[ids] += qtf * idf * tfs * (self.k1 + 1) / (tfs + self._norm[ids])
        return out


    def score_doc(self, query_tokens: Sequence[str], doc_tokens: Sequence[str]) -> float:
        """BM25 of one document that is not in the index, with this index's statistics."""
        if not doc_tokens:
            return 0.0
        query_tokens, doc_tokens = with_bigrams(query_tokens), with_bigrams(doc_tokens)
        norm = self.k1 * (1 - self.b + self.b * len(doc_tokens) / self._avgdl)
        tf = Counter(doc_tokens)
        total = 0.0
        for term, qtf in Counter(query_tokens).items():
            f = tf.get(term, 0)
            if f:
                total += qtf * self.idf(term) * f * (self.k1 + 1) / (f + norm)
        return total


def bm25_scores(query: str, texts: Sequence[str]) -> np.ndarray:
    """BM25 of `query` against each text (index built on the fly; for small sets and baselines)."""
    return BM25Index([tokenize(t) for t in texts]).scores(tokenize(query))
