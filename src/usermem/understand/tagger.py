"""A learned span tagger: which words of a user message are a value of which field (CRF, python-crfsuite).

Tokens are Chinese characters and Latin words/numbers; each gets a BIO tag per field ("B-city", "I-city",
"O"). Features: the token and its neighbours (±2), Chinese character bigrams, shape (capitalised, digit),
Latin prefixes/suffixes, gazetteer and e-mail/phone membership, word classes (`usermem/data/word_classes.json`:
occupations, brands, hobbies, food and drink, file formats, time and news words, so a value of a listed kind
the bank never labelled still looks like one), and clause cues (a question mark, a
hypothetical or a third person earlier in the clause), so the model learns both *where* a value is and
*when* a mention is not the user's own.

Two stages: a message-level field model (`learned.FieldModel`, logistic regression over character n-grams
and words, shipped as `tagger_fields.json`) says which fields the message is about, and each token gets one
`F=<field>` feature per such field; the CRF then learns where in the message those values sit. On the train
split the field features come from 5-fold out-of-fold predictions (never from the gold labels, and never
from a model that saw the utterance), so the CRF learns to trust them as much as they deserve.

Trained on the bank's train split (`train_tagger`, lbfgs: deterministic), the minimum span probability is
calibrated on the dev split (Platt) and the model file ships as `usermem/data/models/tagger.crfsuite`.
The test split is never read here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from usermem.understand.gazetteer import find_places

MODEL_NAME = "tagger.crfsuite"
FIELDS_NAME = "tagger_fields"  # learned.FieldModel artifact: data/models/tagger_fields.json
WORD_CLASSES = "word_classes.json"  # word lists by class (usermem/data), a feature of the tokens inside them
FIELD_FEATURE_THRESHOLD = 0.3  # a field's calibrated probability from which its F= feature is on
_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[A-Za-z][A-Za-z'’\-]*|\d+(?:[.:]\d+)?|\S")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}")
_PHONE = re.compile(r"(?<!\d)(?:\+?\d[\d\s\-()]{6,16}\d)(?!\d)")
_CLAUSE_END = frozenset("，,。.!！?？；;\n")
_HYPO = re.compile(r"如果|假如|假设|要是|万一|\bif\b|\bsuppose\b|\bimagine\b|\bwould\b", re.IGNORECASE)
_OTHER = re.compile(r"朋友|同事|老板|领导|闺蜜|哥哥|姐姐|弟弟|妹妹|我妈|我爸|爸爸|妈妈|父母|奶奶|爷爷|主角|角色|他|她|"
                    r"\b(?:friend|colleague|boss|manager|brother|sister|mum|mom|dad|parents|he|she|his|her|they|"
                    r"character)\b", re.IGNORECASE)
_NEG = re.compile(r"不是|不在|没有|没|\bnot\b|n't\b|\bnever\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Span:
    field: str
    text: str
    start: int
    end: int
    probability: float


def tokenize(text: str) -> list[Token]:
    return [Token(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _kind(tok: str) -> str:
    if "\u3400" <= tok[0] <= "\ufaff":
        return "cjk"
    if tok[0].isdigit():
        return "num"
    if tok[0].isalpha():
        return "Cap" if tok[0].isupper() else "lat"
    return "punct"


@lru_cache(maxsize=1)
def _word_classes() -> tuple[re.Pattern[str] | None, dict[str, str]]:
    """`usermem/data/word_classes.json` (occupations, brands, hobbies, food, file formats, time and news words) as
    one pattern and a word -> class map; (None, {}) when the file is absent."""
    import json

    res = resources.files("usermem.data").joinpath(WORD_CLASSES)
    if not res.is_file():
        return None, {}
    classes: dict[str, str] = {}
    for name, words in json.loads(res.read_text(encoding="utf-8"))["classes"].items():
        for w in words:
            classes.setdefault(w.lower(), name)
    latin = sorted((w for w in classes if w.isascii()), key=lambda w: (-len(w), w))
    cjk = sorted((w for w in classes if not w.isascii()), key=lambda w: (-len(w), w))
    pattern = re.compile(r"(?<![A-Za-z])(?:" + "|".join(map(re.escape, latin)) + r")(?![A-Za-z])|"
                         + "|".join(map(re.escape, cjk)), re.IGNORECASE)
    return pattern, classes


@lru_cache(maxsize=16)
def word_pattern(name: str) -> re.Pattern[str] | None:
    """The words of one class (`word_classes.json`) as a pattern, or None without the file or the class."""
    words = sorted((w for w, c in _word_classes()[1].items() if c == name), key=lambda w: (-len(w), w))
    if not words:
        return None
    latin = [w for w in words if w.isascii()]
    cjk = [w for w in words if not w.isascii()]
    parts = ([r"(?<![A-Za-z])(?:" + "|".join(map(re.escape, latin)) + r")(?![A-Za-z])"] if latin else []) + \
        (["|".join(map(re.escape, cjk))] if cjk else [])
    return re.compile("|".join(parts), re.IGNORECASE)


def word_class_marks(text: str, tokens: Sequence[Token]) -> list[str]:
    """The word class of each token ("" when it is in no listed word)."""
    pattern, classes = _word_classes()
    out = [""] * len(tokens)
    if pattern is None:
        return out
    i = 0
    for m in pattern.finditer(text):
        name = classes.get(m.group(0).lower(), "")
        while i < len(tokens) and tokens[i].end <= m.start():
            i += 1
        j = i
        while j < len(tokens) and tokens[j].start < m.end():
            if tokens[j].start >= m.start() and tokens[j].end <= m.end():
                out[j] = name
            j += 1
    return out


CUE_WINDOW = 64  # tokens of a clause searched for hypothetical / other-person / negation cues before a token


def featurize(text: str, tokens: Sequence[Token], fields: Sequence[str] = ()) -> list[list[str]]:
    marks = [""] * len(tokens)
    wclass = word_class_marks(text, tokens)
    for p in find_places(text, crf_reading=True):  # the features the shipped CRF was trained with
        for i, t in enumerate(tokens):
            if t.start >= p.start and t.end <= p.end:
                marks[i] = "place"
    for pat, name in ((_EMAIL, "email"), (_PHONE, "phone")):
        for m in pat.finditer(text):
            for i, t in enumerate(tokens):
                if t.start >= m.start() and t.end <= m.end():
                    marks[i] = name
    low = [t.text.lower() for t in tokens]
    out: list[list[str]] = []
    clause_start = 0
    hypo = other = neg = False
    clause_q: list[bool] = []
    # Does the clause each token sits in end with a question mark?
    q = False
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i].text in _CLAUSE_END:
            q = tokens[i].text in "?？"
        clause_q.append(q)
    clause_q.reverse()
    for i, t in enumerate(tokens):
        w = low[i]
        if i and tokens[i - 1].text in _CLAUSE_END:
            clause_start, hypo, other, neg = i, False, False, False
        # the clause so far, at most the last CUE_WINDOW tokens: the flags below stay set once a cue was seen, so a
        # window only bounds the cost of a clause that never ends (quadratic before: "through and through and …"
        # for 20,000 characters took seconds); the bank's clauses are all shorter than the window
        before = text[tokens[max(clause_start, i - CUE_WINDOW)].start:t.start]
        hypo = hypo or bool(_HYPO.search(before))
        other = other or bool(_OTHER.search(before))
        neg = neg or bool(_NEG.search(before))
        f = ["b", "w=" + w, "k=" + _kind(t.text), "pos=" + str(min(i - clause_start, 6))]
        if marks[i]:
            f.append("g=" + marks[i])
        if wclass[i]:
            f.append("x=" + wclass[i])
        if i and wclass[i - 1]:
            f.append("x-1=" + wclass[i - 1])
        if i + 1 < len(tokens) and wclass[i + 1]:
            f.append("x+1=" + wclass[i + 1])
        if _kind(t.text) in ("lat", "Cap"):
            f += ["p3=" + w[:3], "s3=" + w[-3:], "s2=" + w[-2:]]
        for d in (-2, -1, 1, 2):
            j = i + d
            f.append(f"w{d}=" + (low[j] if 0 <= j < len(tokens) else ("<s>" if j < 0 else "</s>")))
            if 0 <= j < len(tokens) and marks[j]:
                f.append(f"g{d}=" + marks[j])
        if i:
            f.append("bg-=" + low[i - 1] + "|" + w)
        if i + 1 < len(tokens):
            f.append("bg+=" + w + "|" + low[i + 1])
        if i >= 2:
            f.append("tg-=" + low[i - 2] + "|" + low[i - 1] + "|" + w)
        if hypo:
            f.append("c:hypo")
        if other:
            f.append("c:other")
        if neg:
            f.append("c:neg")
        if clause_q[i]:
            f.append("c:q")
        f += ["F=" + x for x in fields]
        out.append(f)
    return out


def bio(tokens: Sequence[Token], spans: Iterable[tuple[str, int, int]]) -> list[str]:
    tags = ["O"] * len(tokens)
    for field, start, end in sorted(spans, key=lambda s: s[1]):
        first = True
        for i, t in enumerate(tokens):
            if t.start >= start and t.end <= end and tags[i] == "O":
                tags[i] = ("B-" if first else "I-") + field
                first = False
    return tags


def message_fields(model: Any, text: str) -> list[str]:
    """The fields the stage-1 model finds the message about (sorted), or none without a model."""
    if model is None:
        return []
    return sorted(f for f, p in model.probabilities(text).items() if p >= FIELD_FEATURE_THRESHOLD)


class Tagger:
    def __init__(self, model_path: str | Path, platt: tuple[float, float] = (1.0, 0.0),
                 field_model: Any = None) -> None:
        import pycrfsuite  # type: ignore[import-untyped]

        self._tagger = pycrfsuite.Tagger()
        self._tagger.open(str(model_path))
        self.platt = platt
        self.field_model = field_model  # learned.FieldModel or None

    def spans(self, text: str) -> list[Span]:
        tokens = tokenize(text)
        if not tokens:
            return []
        self._tagger.set(featurize(text, tokens, message_fields(self.field_model, text)))
        tags = self._tagger.tag()
        out: list[Span] = []
        i = 0
        while i < len(tags):
            tag = tags[i]
            if tag == "O":
                i += 1
                continue
            field = tag[2:]
            j = i + 1
            while j < len(tags) and tags[j] == "I-" + field:
                j += 1
            p = min(self._tagger.marginal(tags[k], k) for k in range(i, j))
            start, end = tokens[i].start, tokens[j - 1].end
            out.append(Span(field, text[start:end], start, end, p))
            i = j
        return out


def model_path() -> Path:
    return Path(str(resources.files("usermem.data").joinpath("models").joinpath(MODEL_NAME)))


@lru_cache(maxsize=1)
def load_tagger() -> Tagger | None:
    """The shipped tagger, or None when the model file or python-crfsuite is missing."""
    import json

    path = model_path()
    meta = path.with_suffix(".json")
    if not path.exists():
        return None
    try:
        platt = (1.0, 0.0)
        if meta.exists():
            a, b = json.loads(meta.read_text(encoding="utf-8"))["platt"]
            platt = (float(a), float(b))
        from usermem.understand.learned import FieldModel

        fields_path = path.parent / f"{FIELDS_NAME}.json"
        field_model = FieldModel.from_json(json.loads(fields_path.read_text(encoding="utf-8"))) \
            if fields_path.exists() else None
        return Tagger(path, platt, field_model)
    except ImportError:  # pragma: no cover - python-crfsuite is a core dependency
        return None


def training_turns(item: Any) -> Iterable[tuple[int, str]]:
    """The user turns of a bank item the tagger learns from (in corrected items only the turns with labels)."""
    labelled_turns = {lab.turn for lab in item.labels}
    for t, (role, content) in enumerate(item.turns):
        if role != "user" or not content:
            continue
        if item.negative == "corrected" and t not in labelled_turns:
            continue  # the corrected statement is not what the user means
        yield t, content


def train_tagger(items: Sequence[Any], out: str | Path, *, c1: float = 0.05, c2: float = 0.05,
                 max_iterations: int = 200,
                 fields_of: Mapping[tuple[str, int], Sequence[str]] | None = None) -> None:
    """Fit the CRF on bank items. `fields_of[(item id, turn)]`: the stage-1 fields of each training turn
    (out-of-fold predictions), given to the tokens as F= features."""
    import pycrfsuite

    trainer = pycrfsuite.Trainer(verbose=False)
    for item in items:
        for t, content in training_turns(item):
            tokens = tokenize(content)
            if not tokens:
                continue
            spans = [(lab.field, lab.start, lab.end) for lab in item.labels if lab.turn == t]
            fields = fields_of.get((item.id, t), ()) if fields_of is not None else ()
            trainer.append(featurize(content, tokens, fields), bio(tokens, spans))
    trainer.set_params({"c1": c1, "c2": c2, "max_iterations": max_iterations,
                        "feature.possible_transitions": True})
    trainer.train(str(out))
