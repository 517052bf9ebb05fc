"""The fusion formula (relevance/hybrid.py): documented properties, checked on examples and with hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from usermem.config import load_settings
from usermem.relevance.hybrid import HybridRelevance, fuse, has_cjk, query_score

# Scores on a grid: ties happen often (they must be handled), while float rounding cannot create new ones.
finite = st.integers(-1000, 1000).map(lambda i: i / 1000)
bm25 = st.integers(0, 3000).map(lambda i: i / 100)
methods = st.sampled_from(["rrf", "minmax"])


def test_ties_share_a_rank():
    out = fuse([0.5, 0.5, 0.1], [0.0, 0.0, 0.0], method="rrf", rrf_k=10)
    assert out[0] == out[1] == 1.0 and out[2] == 0.0


def test_rrf_by_hand():
    # dense ranks: a=1, b=2, c=3; lexical ranks: c=1, a=2, b has no match
    out = fuse([0.9, 0.8, 0.7], [1.0, 0.0, 3.0], dense_weight=1.0, lexical_weight=1.0, method="rrf", rrf_k=10)
    raw = [1 / 11 + 1 / 12, 1 / 12, 1 / 13 + 1 / 11]
    lo, hi = min(raw), max(raw)
    assert out == pytest.approx([(r - lo) / (hi - lo) for r in raw])
    assert out[0] == 1.0 and out[1] == 0.0


def test_minmax_by_hand():
    out = fuse([0.9, 0.5, 0.7], [0.0, 4.0, 2.0], dense_weight=1.0, lexical_weight=0.5, method="minmax")
    raw = [1.0 + 0.0, 0.0 + 0.5 * 1.0, 0.5 + 0.5 * 0.0]
    assert out == pytest.approx([(r - 0.5) / 0.5 for r in raw])


def test_zero_lexical_weight_is_dense_order_and_vice_versa():
    dense, lex = [0.2, 0.9, 0.5, 0.7], [5.0, 0.0, 1.0, 2.0]
    d = fuse(dense, lex, lexical_weight=0.0)
    assert sorted(range(4), key=lambda i: -d[i]) == [1, 3, 2, 0]
    lo = fuse(dense, lex, dense_weight=0.0)
    assert sorted(range(4), key=lambda i: -lo[i])[:3] == [0, 3, 2]


def test_missing_dense_and_empty_inputs():
    assert fuse([], []) == []
    assert fuse([None, None], [0.0, 0.0]) == [0.0, 0.0]  # no signal at all: nothing is relevant
    assert fuse([None, None], [1.0, 0.0]) == [1.0, 0.0]
    assert fuse([0.5], [0.0]) == [1.0]
    with pytest.raises(ValueError):
        fuse([0.1], [])
    with pytest.raises(ValueError):
        fuse([0.1], [0.0], method="borda")


@given(st.lists(st.tuples(finite, bm25), min_size=1, max_size=30), methods,
       st.floats(0.1, 3.0), st.floats(0.0, 3.0), st.floats(1.0, 100.0))
@settings(max_examples=200, deadline=None)
def test_fused_is_in_unit_interval_with_best_one(items, method, wd, wl, k):
    dense = [d for d, _ in items]
    lex = [lx for _, lx in items]
    out = fuse(dense, lex, dense_weight=wd, lexical_weight=wl, method=method, rrf_k=k)
    assert len(out) == len(items)
    assert all(0.0 <= x <= 1.0 for x in out)
    assert math.isclose(max(out), 1.0)


@given(st.lists(st.tuples(finite, bm25), min_size=2, max_size=30), methods, st.floats(0.0, 3.0))
@settings(max_examples=200, deadline=None)
def test_an_item_better_on_both_signals_never_ranks_lower(items, method, wl):
    dense = [d for d, _ in items]
    lex = [lx for _, lx in items]
    out = fuse(dense, lex, lexical_weight=wl, method=method)
    for i in range(len(items)):
        for j in range(len(items)):
            if dense[i] > dense[j] and lex[i] >= lex[j]:
                assert out[i] >= out[j] - 1e-12


@given(st.lists(st.tuples(finite, bm25), min_size=1, max_size=20, unique_by=lambda t: t[0]), methods,
       st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_order_of_input_does_not_matter(items, method, rnd):
    dense = [d for d, _ in items]
    lex = [lx for _, lx in items]
    out = dict(zip(dense, fuse(dense, lex, method=method), strict=True))
    perm = list(items)
    rnd.shuffle(perm)
    out2 = dict(zip([d for d, _ in perm], fuse([d for d, _ in perm], [lx for _, lx in perm], method=method),
                    strict=True))
    assert all(math.isclose(out[d], out2[d], abs_tol=1e-12) for d in out)


@given(st.lists(st.tuples(finite, bm25), min_size=2, max_size=20), st.floats(0.5, 1.0))
@settings(max_examples=100, deadline=None)
def test_shift_of_cosine_scale_does_not_change_the_ranking(items, shift):
    """Only ranks (rrf) or per-query min-max (minmax) enter: a language's cosine offset cannot matter."""
    dense = [d for d, _ in items]
    lex = [lx for _, lx in items]
    for method in ("rrf", "minmax"):
        a = fuse(dense, lex, method=method)
        b = fuse([d * 0.5 + shift for d in dense], lex, method=method)
        assert a == pytest.approx(b, abs=1e-9)


def test_query_score_mixes_relevance_with_importance_and_weight():
    assert query_score(1.0, 0.6, 0.5, share=0.9) == pytest.approx(0.9 + 0.1 * 0.3)
    assert query_score(0.0, 1.0, 1.0, share=1.0) == 0.0
    assert query_score(0.3, 0.8, 1.0, share=0.0) == pytest.approx(0.8)
    # A relevant old episode beats an irrelevant fresh one with the default share.
    s = load_settings(env={}).hybrid_relevance_share
    assert query_score(1.0, 0.6, 0.1, s) > query_score(0.0, 0.6, 1.0, s)


def test_lexical_weight_is_chosen_per_language():
    s = load_settings(env={}, hybrid_lexical_weight=0.7, hybrid_lexical_weight_zh=0.2)
    rel = HybridRelevance(s, embedder=object(), index=None)  # type: ignore[arg-type]
    assert rel.weights("what about the refund") == (s.hybrid_dense_weight, 0.7)
    assert rel.weights("退款怎么样了") == (s.hybrid_dense_weight, 0.2)
    lexical_only = HybridRelevance(s, embedder=None, index=None)
    assert lexical_only.weights("refund")[0] == 0.0
    assert has_cjk("abc退款") and not has_cjk("refund")


# -- adaptive fusion, concept expansion, planner fields, time windows (issue 13) ---------------------------

from datetime import UTC, datetime  # noqa: E402

import numpy as np  # noqa: E402

from usermem.relevance.concepts import default_lexicon, load_lexicon  # noqa: E402
from usermem.relevance.fusion import FusionParams, adaptive_fuse, separation  # noqa: E402
from usermem.relevance.timewindow import parse_window  # noqa: E402

_signal = st.lists(st.tuples(st.floats(-1, 1, allow_nan=False), st.floats(0, 20, allow_nan=False)),
                   min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(_signal, st.sampled_from(["minmax", "zscore"]), st.booleans())
def test_adaptive_fusion_is_in_unit_range_and_order_free(pairs, norm, shipped):
    from dataclasses import replace

    from usermem.relevance.hybrid import ADAPTIVE

    p = replace(ADAPTIVE, norm=norm) if shipped else FusionParams(norm=norm)
    d = [a for a, _ in pairs]
    lex = [b for _, b in pairs]
    out = adaptive_fuse(d, lex, None, p)
    assert all(0.0 <= x <= 1.0 for x in out)
    assert max(out) == pytest.approx(1.0) or max(out) == 0.0
    rev = adaptive_fuse(d[::-1], lex[::-1], None, p)[::-1]
    assert rev == pytest.approx(out)


@settings(max_examples=150, deadline=None)
@given(_signal, st.booleans())
def test_adaptive_fusion_dominance(pairs, shipped):
    """An item at least as good on both signals never ranks below another (also with the shipped parameters:
    the corroboration boost and the dense floor keep it)."""
    from dataclasses import replace

    from usermem.relevance.hybrid import ADAPTIVE

    d = [a for a, _ in pairs]
    lex = [b for _, b in pairs]
    out = adaptive_fuse(d, lex, None, replace(ADAPTIVE, agreement_boost=1.5) if shipped else None)
    for i in range(len(pairs)):
        for j in range(len(pairs)):
            if d[i] >= d[j] and lex[i] >= lex[j]:
                assert out[i] >= out[j] - 1e-9


def test_adaptive_fusion_single_lexical_hit_counts():
    # one memory matches lexically, no dense signal: it must come first (regression: z-score of one value)
    assert adaptive_fuse([None, None, None], [0.0, 3.2, 0.0], None, FusionParams(norm="zscore")) == [0.0, 1.0, 0.0]


def test_field_bonus_lifts_the_planned_field():
    d = [0.80, 0.78, 0.79]
    lex = [0.0, 0.0, 0.0]
    assert max(range(3), key=lambda i: adaptive_fuse(d, lex, [False, False, True])[i]) == 0
    lifted = adaptive_fuse(d, lex, [False, False, True], FusionParams(field_weight=1.0))
    assert max(range(3), key=lambda i: lifted[i]) == 2


def test_agreement_boost_trusts_corroborated_bm25_only():
    """Corroboration (`hybrid_agreement_boost`): BM25 counts more when the two signals' top lists agree, so
    the lexical winner then outranks the dense winner, where a fixed weighting (boost 1.0) keeps the dense
    winner first; when the lists disagree nothing changes; Chinese queries never get the boost."""
    from dataclasses import replace

    from usermem.config import load_settings
    from usermem.relevance.hybrid import ADAPTIVE, HybridRelevance

    boosted_p, fixed = replace(ADAPTIVE, agreement_boost=1.5), replace(ADAPTIVE, agreement_boost=1.0)
    dense = [0.70, 0.90, 0.60, 0.55, 0.50, 0.45, 0.40, 0.35, 0.30, 0.25]
    lex = [3.0, 2.0, 1.0, 0, 0, 0, 0, 0, 0, 0]  # top lists {0, 1, 2} on both sides: they agree
    boosted, plain = adaptive_fuse(dense, lex, None, boosted_p), adaptive_fuse(dense, lex, None, fixed)
    assert max(range(10), key=lambda i: boosted[i]) == 0
    assert max(range(10), key=lambda i: plain[i]) == 1
    # Disagreement: BM25 matches the dense winner's runner-up and eight memories dense ranks last.
    dense20 = [0.70, 0.90, *[0.65 - 0.01 * i for i in range(18)]]
    lex20 = [3.0, *[0.0] * 11, *[2.0 - 0.1 * i for i in range(8)]]
    assert adaptive_fuse(dense20, lex20, None, boosted_p) == pytest.approx(adaptive_fuse(dense20, lex20, None, fixed))
    # The setting reaches English queries only; the default is off.
    on = HybridRelevance(load_settings(env={}).with_overrides(hybrid_agreement_boost=1.5), None, None)
    assert on.fusion_params("what do I do on weekends?").agreement_boost == 1.5
    assert on.fusion_params("我周末做什么？").agreement_boost == 1.0
    assert HybridRelevance(load_settings(env={}), None, None).fusion_params("what?").agreement_boost == 1.0
    from usermem.errors import ConfigError

    with pytest.raises(ConfigError):
        load_settings(env={}).with_overrides(hybrid_agreement_boost=0.0)


def test_dense_floor_keeps_a_corroborated_bm25_match_that_dense_ranks_last():
    """The dense floor (`hybrid_dense_floor`, default 0.75): when the two top lists agree, a cosine below the
    candidates' 0.75-quantile adds nothing, so a BM25 top match that dense ranks last is not sunk below
    memories that only have a middling cosine; when the lists disagree nothing changes."""
    from dataclasses import replace

    from usermem.relevance.hybrid import ADAPTIVE, HybridRelevance

    assert ADAPTIVE.dense_floor == 0.75
    off = replace(ADAPTIVE, dense_floor=0.0)
    dense = [0.20, *[0.90 - 0.02 * i for i in range(19)]]  # item 0: the last by cosine
    lex = [2.0, 2.0, 1.8, *[0.0] * 17]  # BM25 ranks items 0 and 1 first; item 1 is also dense's best: agreement

    def place(params: FusionParams) -> int:
        out = adaptive_fuse(dense, lex, None, params)
        return sorted(range(20), key=lambda i: (-out[i], i)).index(0)

    assert place(off) > 10  # without the floor the BM25 top match falls out of the top 10
    assert place(ADAPTIVE) == 1  # with it, second after the item both signals rank first
    # Disagreement (no shared memory in the two top lists): the floor does not apply.
    lex2 = [2.0, *[0.0] * 12, *[1.5 - 0.1 * i for i in range(7)]]
    assert adaptive_fuse(dense, lex2, None, ADAPTIVE) == pytest.approx(adaptive_fuse(dense, lex2, None, off))
    # The setting reaches queries without Chinese characters; 0 turns it off; it must be a quantile below 1.
    on = HybridRelevance(load_settings(env={}), None, None)
    assert on.fusion_params("what?").dense_floor == 0.75 and on.fusion_params("什么？").dense_floor == 0.0
    assert HybridRelevance(load_settings(env={}).with_overrides(hybrid_dense_floor=0.0), None, None
                           ).fusion_params("what?").dense_floor == 0.0
    from usermem.errors import ConfigError

    for bad in (-0.1, 1.0):
        with pytest.raises(ConfigError):
            load_settings(env={}).with_overrides(hybrid_dense_floor=bad)


def test_dispersion_prefers_the_signal_with_a_clear_winner():
    flat = np.array([1.0, 0.99, 0.98, 0.97, 0.96])
    peaked = np.array([1.0, 0.2, 0.1, 0.1, 0.0])
    mask = np.ones(5, dtype=bool)
    assert separation(peaked, mask, 10) > separation(flat, mask, 10)


def test_concept_expansion_bridges_languages():
    lex = default_lexicon()
    assert {"工作", "职业"} <= set(lex.expand("what's my job?"))
    assert {"allergy", "allergic"} & set(lex.expand("我对什么过敏？"))
    assert {"饮料", "咖啡"} & set(lex.expand("what do I usually drink?"))
    assert lex.expand("大家好") == ()  # 家 inside 大家 is not `home`
    with pytest.raises(ValueError):
        load_lexicon('{"groups": [{"concept": 1}]}')


NOW = datetime(2024, 6, 12, 15, 0, tzinfo=UTC).timestamp()


def _day(text):
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize("query,start,end", [
    ("上个月我去了哪里？", "2024-05-01", "2024-06-01"),
    ("我昨天吃了什么", "2024-06-11", "2024-06-12"),
    ("What did I do last week?", "2024-06-03", "2024-06-10"),
    ("what did we discuss in May?", "2024-05-01", "2024-06-01"),
    ("what did we discuss in July?", "2023-07-01", "2023-08-01"),  # the latest July that has begun
    ("三天前我说了什么", "2024-06-09", "2024-06-10"),
    ("2023年5月我在哪", "2023-05-01", "2023-06-01"),
    ("what did I buy 2 weeks ago", "2024-05-27", "2024-06-03"),
    ("I went to Paris on 8 May, 2023", "2023-05-08", "2023-05-09"),
])
def test_time_expressions_become_windows(query, start, end):
    w = parse_window(query, NOW)
    assert w is not None and (w.start, w.end) == (_day(start), _day(end))
    assert w.expression


@pytest.mark.parametrize("query", ["May I ask about my job?", "我的工作是什么", "what's my name", ""])
def test_no_time_expression_no_window(query):
    assert parse_window(query, NOW) is None


# -- learned linear fusion (weights fitted on the dev splits, usermem/data/fusion_model.json) -----------------

from usermem.evals.fusion_fit import Group, fit  # noqa: E402
from usermem.relevance.fusion import (  # noqa: E402
    FEATURES,
    LinearFusionModel,
    default_fusion_model,
    fusion_features,
    learned_fuse,
    load_fusion_model,
)


@settings(max_examples=150, deadline=None)
@given(_signal, st.booleans())
# dense scores equal up to rounding: a z-score of the noise made the result depend on the input order
@example([(1.0, 0.0), (0.9999999999999999, 0.0), (0.9999999999999999, 0.0), (0.9999999999999999, 1.0)], False)
def test_learned_fusion_is_in_unit_range_order_free_and_monotone(pairs, zh):
    model = default_fusion_model()
    d = [a for a, _ in pairs]
    lex = [b for _, b in pairs]
    out = learned_fuse(d, lex, None, model, zh)
    assert all(0.0 <= x <= 1.0 for x in out)
    assert max(out) == pytest.approx(1.0) or max(out) == 0.0
    assert learned_fuse(d[::-1], lex[::-1], None, model, zh)[::-1] == pytest.approx(out)
    for i in range(len(pairs)):
        for j in range(len(pairs)):
            if d[i] >= d[j] and lex[i] >= lex[j]:
                assert out[i] >= out[j] - 1e-9


def test_learned_fusion_model_is_validated_and_the_field_bonus_applies():
    model = default_fusion_model()
    assert len(model.weights) == len(FEATURES) and all(w >= 0 for w in model.weights)
    assert "dev" in model.about.lower() or "DEV" in model.about
    with pytest.raises(ValueError):
        LinearFusionModel((1.0,) * (len(FEATURES) - 1))
    with pytest.raises(ValueError):
        LinearFusionModel((-1.0,) + (0.0,) * (len(FEATURES) - 1))
    with pytest.raises(ValueError):
        load_fusion_model('{"features": ["z_dense"], "weights": [1.0]}')
    d, lex = [0.80, 0.78, 0.79], [0.0, 0.0, 0.0]
    assert max(range(3), key=lambda i: learned_fuse(d, lex, [False, False, False], model, False)[i]) == 0
    plain = learned_fuse(d, lex, [False, False, False], model, False)
    bonus = learned_fuse(d, lex, [False, False, True], model, False)
    assert bonus[2] > plain[2]
    strong = LinearFusionModel(model.weights, field_weight=1.0)
    assert max(range(3), key=lambda i: learned_fuse(d, lex, [False, False, True], strong, False)[i]) == 2
    assert learned_fuse([None, None, None], [0.0, 3.2, 0.0], None, model, False) == [0.0, 1.0, 0.0]


def test_fusion_fit_learns_which_signal_carries_the_answers():
    """Synthetic questions where only the lexical signal finds the answer: the fit weights lexical features
    above dense ones (and never negative)."""
    rng = np.random.default_rng(7)
    groups = []
    for _ in range(60):
        n = 30
        d = rng.normal(0.8, 0.03, n)
        lex = np.abs(rng.normal(1.0, 0.5, n))
        ans = int(rng.integers(n))
        lex[ans] += 4.0
        y = np.zeros(n)
        y[ans] = 1.0
        groups.append(Group(fusion_features(list(d), list(lex), False), y))
    w = dict(zip(FEATURES, fit(groups, steps=400), strict=True))
    assert min(w.values()) >= 0
    assert w["z_lexical"] + w["rr_lexical"] > w["z_dense"] + w["rr_dense"]


# -- language calibration (issue 13, fourth round) ------------------------------------------------------------

from usermem.relevance.fusion import LANGUAGE_TOP, language_calibrated  # noqa: E402
from usermem.relevance.hybrid import ADAPTIVE  # noqa: E402


def test_language_calibration_shifts_the_other_language_by_a_share_of_the_gap():
    same = [0.90 - 0.01 * i for i in range(LANGUAGE_TOP)]
    other = [0.70 - 0.01 * i for i in range(LANGUAGE_TOP)]
    dense: list[float | None] = [*same, *other, None]
    flags = [False] * LANGUAGE_TOP + [True] * LANGUAGE_TOP + [True]
    out = language_calibrated(dense, flags, 0.5)
    assert out[:LANGUAGE_TOP] == same  # the query's language is left alone
    assert out[LANGUAGE_TOP:-1] == pytest.approx([v + 0.5 * 0.2 for v in other])
    assert out[-1] is None  # no vector stays no vector
    assert language_calibrated(dense, flags, 1.0)[LANGUAGE_TOP] == pytest.approx(same[0])
    assert language_calibrated(dense, flags, 0.0) == dense
    # fewer than LANGUAGE_TOP candidates in one language (a few stray memories): unchanged
    short = dense[:LANGUAGE_TOP] + dense[LANGUAGE_TOP:2 * LANGUAGE_TOP - 1]
    assert language_calibrated(short, flags[:2 * LANGUAGE_TOP - 1], 0.5) == short


@given(st.lists(st.tuples(st.floats(-1, 1), st.booleans()), min_size=2 * LANGUAGE_TOP, max_size=60),
       st.floats(0.0, 1.0))
def test_language_calibration_keeps_the_order_within_each_language(items, share):
    dense = [d for d, _ in items]
    flags = [o for _, o in items]
    out = language_calibrated(dense, flags, share)
    for lang in (True, False):  # one shift per language: never a swap (floating-point rounding may tie)
        idx = [i for i, o in enumerate(flags) if o == lang]
        assert all(out[i] <= out[j] for i in idx for j in idx if dense[i] <= dense[j])


def test_a_cross_lingual_answer_without_lexical_overlap_gets_the_dense_weight():
    """A Chinese query, its answer in English (no word in common; cosine below the Chinese memories', as
    multilingual-e5 scores across languages) against Chinese memories with a loose lexical match: with the
    calibration the answer, best of its language by far, ranks first; without it the lexical match wins."""
    zh_cos = [0.86, 0.85, 0.85, 0.84, 0.84, 0.84, 0.83, 0.83, 0.83, 0.82]
    en_cos = [0.81, 0.74, 0.73, 0.73, 0.72, 0.72, 0.72, 0.71, 0.71, 0.70]
    dense: list[float | None] = [*zh_cos, *en_cos]
    lexical = [0.0, 0.0, 2.5] + [0.0] * 17  # a Chinese memory shares a common word with the query
    other = [False] * 10 + [True] * 10
    plain = adaptive_fuse(dense, lexical, None, ADAPTIVE)
    calibrated = adaptive_fuse(language_calibrated(dense, other, 0.5), lexical, None, ADAPTIVE)
    assert max(range(20), key=plain.__getitem__) != 10
    assert max(range(20), key=calibrated.__getitem__) == 10
