"""Issue 19, semantic recall at 5,000 memories: the array paths of recall(query=...) equal, to the bit, the
per-candidate Python they replaced.

* `HybridRelevance._signals_of` (cosine, BM25, planner-field match, language per candidate) and `_fuse` on its
  arrays equal the per-candidate loop and the list fusion written out below (`_signals_reference`,
  `_fuse_reference`: the code before the change), on random users — memories indexed, not indexed yet, or
  indexed at an older version, English and Chinese — for every fusion method.
* The recall planner's cue loop, which skips the fields none of whose CJK terms can be in the message, plans
  what the loop over every field plans.
* `calibrated_array` equals `language_calibrated`; `top_positive` selects the rows a stable argsort selects;
  `dense(..., also_rows=...)` equals `dense(..., also=keys)`; the cached language groups of a recall without
  filters equal the ones computed from an all-true mask.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from test_light_query_recall import _row, _store, _text
from toy_embedder import CrcBow32
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.errors import ProviderError
from usermem.model import Kind, MemoryRecord
from usermem.policy.contracts import DEFAULT_CONTRACTS, ContractSet
from usermem.relevance.concepts import EXPANSION_WEIGHT
from usermem.relevance.fusion import adaptive_fuse, calibrated_array, language_calibrated, learned_fuse
from usermem.relevance.hybrid import (
    ADAPTIVE,
    HybridRelevance,
    default_fusion_model,
    fuse,
    has_cjk,
    own_words_chinese,
    top_positive,
)
from usermem.relevance.lexical import BM25Index, tokenize
from usermem.relevance.text import memory_text
from usermem.store.base import LiveQuery
from usermem.understand.plan import DeterministicPlanner

T0 = 1_790_000_000.0
_ZH = ["我住在北京", "包裹又晚了", "我喜欢喝咖啡", "我的狗叫小黑", "订单退款问题"]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    d: Path = tmp_path_factory.mktemp("semantic")
    s = load_settings(env={}, store_url=f"sqlite:///{d}/m.db", hybrid_candidates=6)
    m = Memory(settings=s)
    m.use_relevance("hybrid", embedder=CrcBow32(), background=False)  # type: ignore[arg-type]
    yield m
    m.close()


def _signals_reference(rel: HybridRelevance, query: str, tenant: str, user_id: str, ids: Sequence[str],
                       keys: Sequence[str], texts_of: Callable[[Sequence[int]], dict[int, str]]
                       ) -> tuple[list[float | None], list[float], list[bool], list[bool]]:
    """HybridRelevance._signals_of before the change: one Python loop per signal over the candidates."""
    n = len(ids)
    if n == 0:
        return [], [], [], []
    state = rel._state_for(tenant, user_id, query)
    rel._local.state = None
    ux = state.ux
    indexed = ux is not None and bool(ux.keys)
    pos: list[int | None] = [None] * n
    if ux is not None and indexed:
        where, row_ids = ux.position, ux.ids
        for i, (key, mid) in enumerate(zip(keys, ids, strict=True)):
            p = where.get(key)
            if p is not None and row_ids[p] == mid:
                pos[i] = p
    dense_on = rel.embedder is not None
    if dense_on and state.qvec is None and not state.dense_failed:
        state.qvec = rel._query_vector(query, state)
    dense_on = dense_on and state.qvec is not None
    missing: list[int] = []
    if dense_on and ux is not None:
        has_vec = ux.has_vec
        missing = [i for i in range(n) if pos[i] is None or not has_vec[pos[i]]][:rel.PENDING_EMBED]
    elif dense_on:
        missing = list(range(n))[:rel.PENDING_EMBED]
    need = [i for i in range(n) if pos[i] is None] if indexed else list(range(n))
    text = texts_of(sorted(set(need) | set(missing))) if need or missing else {}
    lexical: list[float] = []
    if ux is not None and indexed:
        if state.lexical is None:
            state.lexical = rel._bm25(ux, state)
        lex_all = state.lexical
        for i in range(n):
            p = pos[i]
            if p is not None:
                lexical.append(float(lex_all[p]))
            else:
                doc = tokenize(text[i])
                lexical.append(ux.bm25.score_doc(state.tokens, doc)
                               + EXPANSION_WEIGHT * ux.bm25.score_doc(state.expansion, doc))
    else:
        bm = BM25Index([tokenize(text[i]) for i in range(n)])
        lex_arr = bm.scores(state.tokens)
        if state.expansion:
            lex_arr = lex_arr + EXPANSION_WEIGHT * bm.scores(state.expansion)
        lexical = [float(x) for x in lex_arr]
    if state.fields:
        wanted, prefixes = state.fields, tuple(f + "." for f in state.fields)
        fields = [k in wanted or k.startswith(prefixes) for k in keys]
    else:
        fields = [False] * n
    dense: list[float | None] = [None] * n
    if dense_on and state.qvec is not None:
        q = state.qvec
        known: dict[str, float] = dict(state.dense)
        need_db: list[str] = []
        for i in range(n):
            p = pos[i]
            if p is None or ux is None or not ux.has_vec[p]:
                continue
            if keys[i] in known:
                dense[i] = known[keys[i]]
            elif ux.matrix is not None:
                dense[i] = float(ux.matrix[p] @ q)
            else:
                need_db.append(keys[i])
        if need_db and rel.index is not None:
            got = rel.index.dense(tenant, user_id, q, limit=len(need_db), keys=need_db, snapshot=ux)
            for i in range(n):
                if keys[i] in got and dense[i] is None:
                    dense[i] = got[keys[i]]
        if missing and rel.embedder is not None:
            try:
                mat = rel.embedder.passages([text[i] for i in missing])
            except ProviderError:
                pass
            else:
                for i, row in zip(missing, mat, strict=True):
                    dense[i] = float(row @ q)
    other = [False] * n
    if rel.settings.hybrid_language_calibration > 0 and dense_on:
        zh = has_cjk(query)
        rows_zh = rel.row_chinese(ux) if ux is not None and indexed else None
        for i in range(n):
            p = pos[i]
            if p is not None and rows_zh is not None:
                other[i] = bool(rows_zh[p]) != zh
            elif i in text:
                other[i] = own_words_chinese(tokenize(text[i]), rel._head(keys[i])) != zh
    return dense, lexical, fields, other


def _fuse_reference(rel: HybridRelevance, query: str, dense: list[float | None], lexical: list[float],
                    fields: list[bool], other: list[bool]) -> list[float]:
    """HybridRelevance._fuse before the change (lists, language_calibrated)."""
    dw, lw = rel.weights(query)
    if any(other):
        dense = language_calibrated(dense, other, rel.settings.hybrid_language_calibration)
    method = rel.settings.hybrid_fusion
    if method == "learned":
        if dw == 0 or lw == 0:
            return adaptive_fuse(dense, lexical, fields, replace(ADAPTIVE, dense_weight=dw, lexical_weight=lw))
        return learned_fuse(dense, lexical, fields, default_fusion_model(), has_cjk(query))
    if method == "adaptive":
        return adaptive_fuse(dense, lexical, fields,
                             replace(rel.fusion_params(query), dense_weight=dw, lexical_weight=lw))
    return fuse(dense, lexical, dense_weight=dw, lexical_weight=lw, method=method, rrf_k=rel.settings.hybrid_rrf_k)


_zh_row = st.tuples(st.sampled_from(_ZH), st.sampled_from(["indexed", "not_indexed"]))


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=30), zh_rows=st.lists(_zh_row, max_size=14), query=_text | st.sampled_from(_ZH),
       method=st.sampled_from(["adaptive", "learned", "rrf", "minmax"]), pending=st.sampled_from([0, 2, 16]))
def test_signals_and_fusion_equal_the_per_candidate_loop(memory: Memory, rows: list[tuple], zh_rows: list[tuple],
                                                          query: str, method: str, pending: int) -> None:
    rel = memory.relevance
    assert isinstance(rel, HybridRelevance)
    user = uuid.uuid4().hex
    rows = rows + [(Kind.EPISODE, None, text, 1.0, 0.5, -86_400.0, state) for text, state in zh_rows]
    _store(memory, user, rows)
    rel.settings = replace(rel.settings, hybrid_fusion=method)
    rel.PENDING_EMBED = pending  # type: ignore[misc]  # few: candidates not indexed keep no cosine
    try:
        keys = rel.candidates("t", user, query)
        assert keys is not None
        state = rel._local.state
        live = memory.store.live_scores(LiveQuery("t", user, now=T0, keys=keys))
        ids, ks = [r.id for r in live], [r.key for r in live]

        def texts_of(wanted: Sequence[int]) -> dict[int, str]:
            got: dict[str, MemoryRecord] = {r.id: r for r in memory.store.get_many("t", [ids[i] for i in wanted])}
            return {i: memory_text(got[ids[i]], rel.describe(ks[i])) for i in wanted}

        new = rel._signals_of(query, "t", user, ids, ks, texts_of)
        rel._local.state = state
        ref = _signals_reference(rel, query, "t", user, ids, ks, texts_of)
        assert [None if v != v else v for v in new[0].tolist()] == ref[0]
        assert new[1].tolist() == ref[1]
        assert new[2].tolist() == ref[2] and new[3].tolist() == ref[3]
        assert rel._fuse(query, *new) == _fuse_reference(rel, query, *ref)
    finally:
        rel.settings = replace(rel.settings, hybrid_fusion="adaptive")
        del rel.PENDING_EMBED


_cos = st.sampled_from([0.9, 0.5, 0.5, 0.1, -0.2]) | st.floats(-1.0, 1.0) | st.none()


@settings(max_examples=examples(400), deadline=None)
@given(items=st.lists(st.tuples(_cos, st.booleans()), max_size=40), share=st.sampled_from([0.0, 0.5, 1.0, 0.37]),
       top=st.integers(1, 12))
def test_calibrated_array_equals_language_calibrated(items: list[tuple[float | None, bool]], share: float,
                                                     top: int) -> None:
    dense = [d for d, _ in items]
    other = [o for _, o in items]
    got = calibrated_array(np.array(dense, dtype=np.float64), np.array(other, dtype=bool), share, top)
    assert [None if v != v else v for v in got.tolist()] == language_calibrated(dense, other, share, top)


@settings(max_examples=examples(400), deadline=None)
@given(scores=st.lists(st.sampled_from([0.0, 0.0, 1.5, 2.0, 2.0, 3.25]) | st.floats(0.0, 10.0), max_size=60),
       n=st.integers(0, 20))
def test_top_positive_selects_what_a_stable_argsort_selects(scores: list[float], n: int) -> None:
    arr = np.array(scores, dtype=np.float32)
    hits = np.flatnonzero(arr > 0)
    if len(hits) > n:
        hits = hits[np.argsort(-arr[hits], kind="stable")[:n]]
    assert top_positive(arr, n).tolist() == sorted(hits.tolist())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, min_size=1, max_size=30), query=_text, limit=st.integers(1, 8),
       picks=st.lists(st.integers(0, 1000), max_size=12))
def test_dense_also_rows_equals_also_keys(memory: Memory, rows: list[tuple], query: str, limit: int,
                                          picks: list[int]) -> None:
    rel = memory.relevance
    assert isinstance(rel, HybridRelevance) and rel.index is not None and rel.embedder is not None
    user = uuid.uuid4().hex
    _store(memory, user, rows)
    ux = rel.index.load("t", user)
    q = rel.embedder.query(query)
    if not ux.keys:
        return
    at = np.array([p % len(ux.keys) for p in picks], dtype=np.intp)
    by_rows = rel.index.dense("t", user, q, limit=limit, also_rows=at, snapshot=ux)
    by_keys = rel.index.dense("t", user, q, limit=limit, also=[ux.keys[i] for i in at.tolist()], snapshot=ux)
    assert by_rows == by_keys
    assert rel._language_candidates(ux, q, None, limit).tolist() == \
        rel._language_candidates(ux, q, np.ones(len(ux.keys), dtype=bool), limit).tolist()


@pytest.fixture(scope="module")
def planner() -> DeterministicPlanner:
    return DeterministicPlanner(ContractSet(DEFAULT_CONTRACTS))


def _terms(p: DeterministicPlanner) -> list[str]:
    return [*sorted({t for idx in p._fields for t, _ in idx.cjk}),
            "coffee", "allergy", "my city", "last time", "I", "dog", "the", "always", "上次", "一直"]


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_planner_cues_skip_no_field_that_matches(planner: DeterministicPlanner, data: st.DataObject) -> None:
    """The cue loop skips a field whose CJK terms' first characters are all absent from the message: the plan
    equals the one of a planner that runs every field's loop (first characters: every character)."""
    words = data.draw(st.lists(st.sampled_from(_terms(planner)) | st.sampled_from(["我", "的", "喜欢", "请", "吗"]),
                               max_size=6))
    message = data.draw(st.sampled_from(["", " ", "，"])).join(words)
    got = planner.plan(message), planner.plan_pair(message, None, None)
    every = DeterministicPlanner(ContractSet(DEFAULT_CONTRACTS))
    for idx in every._fields:
        idx.cjk_first = frozenset(message) | idx.cjk_first if idx.cjk else idx.cjk_first
    assert got == (every.plan(message), every.plan_pair(message, None, None))
