"""A learned veto on extracted values: is this the user's own, lasting statement? (issue 13, the trap round)

The hand-written clause filters (`understand.filters`) fit the sets they were written from and do not generalise
to new writers. This is a logistic regression over one (message, candidate value) pair that says how likely the
value is *not* the user's own lasting fact (a question, hypothetical, third party, quote, joke, others' plan,
one-off, negation, correction): features are the field and proposer, the filters' own reasons for the clause,
the words between the clause start and the value, the words after it, the sentence around it with the value
blanked out, and punctuation. It runs after the rules and the tagger (`PatternExtractor(veto=...)`): a candidate
whose probability reaches the threshold (chosen on more-dev) is dropped.

Fitted by `scripts/veto_measure.py` (`training.train_veto_model`) on out-of-fold candidates of the training items:
what the extractor really proposes on utterances its models did not see, with the clause filters on and off,
labelled 1 (veto: the item holds a trap and the value matches no label) or 0 (a value matching a label).
**Not shipped** (2026-12-01): it removed 2 of select's 5 non-user values and 1 of test's 10, within the F1 budget,
but at its threshold it also vetoed plain statements such as "I live in Toronto" (docs/understanding.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from usermem.understand import learned
from usermem.understand.filters import clause_spans, reasons, sentence_spans
from usermem.understand.text import normalise

NAME = "veto"
ARTIFACT_VERSION = 1
_LEFT = 16  # characters of the clause before the value that make the left-context features
_RIGHT = 12  # characters after the value


@dataclass(frozen=True)
class Context:
    """Where a value sits: the message (quotes masked), the value's offsets in it (-1 when unknown)."""

    text: str
    key: str
    value: str
    start: int
    end: int
    method: str


def _locate(ctx: Context) -> tuple[int, int]:
    if 0 <= ctx.start < ctx.end <= len(ctx.text):
        return ctx.start, ctx.end
    at = ctx.text.lower().find(ctx.value.lower()) if ctx.value else -1
    return (at, at + len(ctx.value)) if at >= 0 else (-1, -1)


# one message's values share its sentences and clauses: the splits and the filters' reasons are computed once
@lru_cache(maxsize=64)
def _sentences(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(sentence_spans(text))


@lru_cache(maxsize=64)
def _clauses(sentence: str) -> tuple[tuple[int, int], ...]:
    return tuple(clause_spans(sentence))


@lru_cache(maxsize=64)
def _reasons(clause: str, before: str, sentence: str) -> frozenset[str]:
    return frozenset(reasons(clause, before, sentence))


def _prefixed(prefix: str, text: str) -> set[str]:
    return {prefix + f for f in learned.features(text)} if text.strip() else set()


def features(ctx: Context) -> set[str]:
    """The feature strings of one candidate in its message."""
    text = ctx.text
    out = {"k:" + ctx.key, "m:" + ctx.method, "bias"}
    start, end = _locate(ctx)
    if start < 0:
        out.add("unplaced")
        out |= _prefixed("s:", text)
        return out
    sentences = _sentences(text)
    sentence, s0 = text, 0
    for a, b in sentences:
        if a <= start < b:
            sentence, s0 = text[a:b], a
            break
    clause, c0 = sentence, 0
    for a, b in _clauses(sentence):
        if a <= start - s0 < b:
            clause, c0 = sentence[a:b], a
            break
    why = _reasons(clause, sentence[:c0], sentence)
    for r in why:
        out.add("r:" + r)
        out.add("r:" + r + "|k:" + ctx.key)
    if not why:
        out.add("r:none")
    left = text[s0 + c0:start]
    out |= _prefixed("L:", left[-_LEFT:])
    out |= _prefixed("P:", sentence[:c0][-_LEFT:])  # the clauses of the sentence before this one
    right_end = s0 + c0 + len(clause)
    out |= _prefixed("R:", text[end:max(end, right_end)][:_RIGHT])
    blank = sentence[:start - s0] + " X " + sentence[end - s0:]
    out |= _prefixed("s:", blank)
    if len(sentences) > 1:
        out.add("multi")
        rest = text[:s0] + " " + text[s0 + len(sentence):]
        if "?" in rest or "？" in rest:
            out.add("q:elsewhere")
    tail = sentence.rstrip()
    if tail.endswith(("?", "？")):
        out.add("q:sentence")
    if not normalise(left).strip():
        out.add("L:empty")
    return out


@dataclass(frozen=True)
class VetoModel:
    """P(not the user's own lasting statement) = sigmoid(intercept + sum of the weights of the features present)."""

    vocab: Mapping[str, int]
    weights: Sequence[float]
    intercept: float
    threshold: float
    meta: Mapping[str, Any]

    def probability(self, ctx: Context) -> float:
        z = self.intercept + sum(self.weights[i] for f in features(ctx) if (i := self.vocab.get(f)) is not None)
        return learned.sigmoid(z)

    def vetoes(self, ctx: Context, threshold: float | None = None) -> bool:
        return self.probability(ctx) >= (self.threshold if threshold is None else threshold)

    def to_json(self) -> dict[str, Any]:
        inv = sorted(self.vocab.items(), key=lambda kv: kv[1])
        return {"version": ARTIFACT_VERSION, "name": NAME, "features": [f for f, _ in inv],
                "weights": [round(w, 5) for w in self.weights], "intercept": round(self.intercept, 5),
                "threshold": round(self.threshold, 4), "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VetoModel:
        if data.get("version") != ARTIFACT_VERSION:
            raise ValueError(f"veto artifact version {data.get('version')!r}, expected {ARTIFACT_VERSION}")
        return cls({f: i for i, f in enumerate(data["features"])}, [float(w) for w in data["weights"]],
                   float(data["intercept"]), float(data["threshold"]), dict(data.get("meta", {})))

    def with_threshold(self, threshold: float, **meta: Any) -> VetoModel:
        return VetoModel(self.vocab, self.weights, self.intercept, threshold, {**self.meta, **meta})


def dump(model: VetoModel) -> str:
    return json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"


def fit(contexts: Sequence[Context], labels: Sequence[int], *, c: float = 1.0, min_df: int = 2,
        weights: Sequence[float] | None = None) -> VetoModel:
    """Logistic regression (liblinear, deterministic) on binary features; label 1 = not the user's (veto)."""
    import numpy as np
    from scipy.sparse import csr_matrix  # type: ignore[import-untyped]
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    feats = [features(x) for x in contexts]
    df: dict[str, int] = {}
    for fs in feats:
        for f in fs:
            df[f] = df.get(f, 0) + 1
    vocab = {f: i for i, f in enumerate(sorted(f for f, n in df.items() if n >= min_df))}
    rows, cols = [], []
    for r, fs in enumerate(feats):
        for f in fs:
            if f in vocab:
                rows.append(r)
                cols.append(vocab[f])
    x = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(feats), len(vocab)))
    clf = LogisticRegression(C=c, solver="liblinear", max_iter=1000, random_state=0)
    clf.fit(x, np.asarray(labels), sample_weight=None if weights is None else np.asarray(weights))
    coef = clf.coef_[0]
    kept = [(f, float(coef[i])) for f, i in vocab.items() if abs(coef[i]) >= 1e-4]
    kept.sort()
    return VetoModel({f: i for i, (f, _) in enumerate(kept)}, [w for _, w in kept], float(clf.intercept_[0]), 1.0,
                     {"c": c, "min_df": min_df, "n": len(labels), "positives": int(sum(labels))})
