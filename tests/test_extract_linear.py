"""Extraction time grows linearly with a message, whatever the message (an adversarial probe of the extractor).

Was: a message of one endless sentence ("two cats: Milo, Milo, …", 18,000 characters) took 68 s of CPU — every clause
was judged against the whole sentence before it, the tagger searched each clause's whole prefix for cues before
every token, and the calorie check retried a run of numerals from each of its characters. Now a sentence is judged
in pieces of at most MAX_SENTENCE_CHARS cut at a clause boundary, the tagger's cue search looks back at most
CUE_WINDOW tokens (cues stay seen once seen), and the unit check reads run by run. No bank item changes: its longest
sentence has 259 characters and its longest clause 27 tokens."""

from __future__ import annotations

import itertools
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from props import examples
from usermem import Memory
from usermem.config import load_settings
from usermem.policy.wordedge import cjk_compile
from usermem.understand import rules
from usermem.understand.filters import _SENTENCE, MAX_SENTENCE_CHARS, sentence_spans
from usermem.understand.tagger import CUE_WINDOW, featurize, tokenize

# The search counts_no_money made before (quadratic on a long run of numerals without a unit): the reference.
_OLD_OTHER_UNIT = cjk_compile(r"(?:\d[\d,.]*|[一二两三四五六七八九十百千万]+)\s*(?:k\s*)?(?:大卡|千卡|卡路里|公里|斤|克|步|"
                              r"(?i:calories|cals?|kcal|km|kms|miles?|steps|kg|lbs?)\b)")
_ALPHABET = "0123456789,. 一二两十百千万卡大路里公斤克步kKcalmoriesteplbg元$天"


@settings(max_examples=examples(2000), deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=24))
def test_the_unit_check_answers_as_the_search_it_replaces(value: str) -> None:
    assert rules._other_unit(value) == (_OLD_OTHER_UNIT.search(value) is not None)


def test_the_unit_check_examples() -> None:
    for said in ("控制在1500大卡以内", "一天一万步", "五千卡", "1,500 calories", "跑三十公里", "10k steps"):
        assert rules.counts_no_money(said), said
    for said in ("预算1500元", "千卡", "十" * 5, "under 2k total"):
        assert not rules.counts_no_money(said), said


@settings(max_examples=examples(400), deadline=None)
@given(st.text(alphabet="ab ，,。.!?；;、我是", max_size=1500))
def test_sentence_pieces_cover_the_text_and_are_bounded(text: str) -> None:
    spans = sentence_spans(text)
    assert all(0 < b - a <= MAX_SENTENCE_CHARS and text[a:b].strip() for a, b in spans)
    assert all(y <= x2 for (_, y), (x2, _) in itertools.pairwise(spans))  # ordered, disjoint
    covered = {i for a, b in spans for i in range(a, b)}
    old = [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.group(0).strip()]
    for a, b in old:
        assert all(i in covered for i in range(a, b) if not text[i].isspace())  # nothing dropped
        if b - a <= MAX_SENTENCE_CHARS:
            assert (a, b) in spans  # a sentence of ordinary length is one piece, as before
    assert covered <= {i for a, b in old for i in range(a, b)}


def test_the_cue_window_changes_no_feature_of_a_clause_shorter_than_it() -> None:
    text = "如果我住在北京，我每天都会去公园跑步，我的朋友说他不喜欢吃辣。If I lived in Rome I'd eat pasta, my sister doesn't."
    tokens = tokenize(text)
    assert max(len(c) for c in re.split(r"[，,。.!！?？；;\n]", text)) < CUE_WINDOW
    feats = featurize(text, tokens)
    assert any("c:hypo" in f for f in feats) and any("c:neg" in f for f in feats)
    # a cue early in a clause longer than the window is still seen at its end
    long_clause = "if I lived in Rome " + "and went out " * 60 + "I'd eat pasta"
    feats = featurize(long_clause, tokenize(long_clause))
    assert "c:hypo" in feats[-1]


def test_an_endless_sentence_costs_linear_time() -> None:
    m = Memory("sqlite:///:memory:", settings=load_settings(env={}, embedder="none"))
    m.extract(["我住在杭州"])
    for text in ("two cats: " + "Milo, " * 3000 + "and", "I love " + "early flights — " * 1200,
                 "三只猫：" + "大黄、" * 6000, "I'm a Leo " + "through and " * 1800, "做了" + "十" * 19000 + "年设计"):
        text = text[:20000]
        began = time.process_time()
        m.extract([text])
        spent = time.process_time() - began
        # before: 68 s, 20 s, 9 s, 7 s and seconds for these; now ≈ 1-3 s each on the 2-core development machine
        assert spent < 20, (text[:30], spent)
