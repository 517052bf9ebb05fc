"""Learned field detection: text -> {field: calibrated probability}, trained on the utterance bank.

Features are cheap and bilingual: Chinese character 1-3-grams, English words, word pairs and character
3-grams inside words (so "allergic" and "allergy" share evidence), and sentence punctuation. Each text is a
tf-idf vector (binary tf, l2-normalised). One logistic regression per field (scikit-learn, lbfgs:
deterministic) is fitted on the *train* split; a single Platt scaling of the scores and the decision
threshold are fitted on the *dev* split; the test split is never read here.

The fitted model is shipped as a small JSON artifact (`usermem/data/models/<name>.json`) holding the
feature vocabulary, idf, the non-zero weights and the calibration, so inference needs no scikit-learn: a
message's score is a dot product (numpy over the weights as a dense matrix, ≈ 0.03 ms). `train_*` rebuilds
the artifacts (`usermem train`); tests check the shipped artifact equals a rebuild.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from usermem.understand.text import normalise

ARTIFACT_VERSION = 1
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_PUNCT = re.compile(r"[?？!！:：]")


def features(text: str) -> set[str]:
    """The feature strings of one text (order-free)."""
    t = normalise(text)
    out: set[str] = set()
    for run in _CJK_RUN.findall(t):
        padded = run
        for n in (1, 2, 3):
            for i in range(len(padded) - n + 1):
                out.add(padded[i:i + n])
    words = _WORD.findall(t)
    prev = "^"
    for w in words:
        if _CJK_RUN.fullmatch(w):
            prev = "#"
            continue
        w = w.replace("’", "'")
        out.add("w:" + w)
        out.add("b:" + prev + " " + w)
        padded = "<" + w + ">"
        for i in range(len(padded) - 2):
            out.add("c:" + padded[i:i + 3])
        prev = w
    for p in _PUNCT.findall(t):
        out.add("p:" + ("?" if p in "?？" else p))
    return out


@dataclass(frozen=True)
class FieldModel:
    """A fitted multi-label model: feature -> [(field index, weight)], plus idf and calibration."""

    name: str
    fields: tuple[str, ...]
    vocab: Mapping[str, int]
    idf: Sequence[float]
    rows: Sequence[Sequence[tuple[int, float]]]  # per feature: the fields it votes for
    intercepts: Sequence[float]
    platt: tuple[float, float]  # p = sigmoid(a * z + b)
    threshold: float
    meta: Mapping[str, Any]

    def scores(self, text: str) -> list[float]:
        """Raw logits per field."""
        idx = [self.vocab[f] for f in features(text) if f in self.vocab]
        if not idx:
            return list(self.intercepts)
        norm = math.sqrt(sum(self.idf[i] ** 2 for i in idx)) or 1.0
        dense = self._dense_rows
        if dense is None:
            return self.sparse_scores(idx, norm)
        # The same sums as sparse_scores, to the bit: each field's logit is its intercept plus x·w per feature,
        # added in the features' order (a reduction over the first axis of a C-ordered array adds row after
        # row); a field a feature does not vote for adds x·0 = 0. One array operation instead of a Python loop
        # over every (feature, field) weight (≈ 1,000 per query: the planner runs on every recall with a query).
        terms = np.empty((len(idx) + 1, dense.shape[1]), dtype=np.float64)
        terms[0] = self._intercepts
        np.multiply(dense[idx], (np.asarray([self.idf[i] for i in idx], dtype=np.float64) / norm)[:, None],
                    out=terms[1:])
        out: list[float] = np.add.reduce(terms, axis=0).tolist()
        return out

    def sparse_scores(self, idx: Sequence[int], norm: float) -> list[float]:
        """The logits from the sparse rows (the reference `scores` equals; also the path of a model whose
        rows name a field twice)."""
        z = list(self.intercepts)
        for i in idx:
            x = self.idf[i] / norm
            for f, w in self.rows[i]:
                z[f] += x * w
        return z

    @cached_property
    def _intercepts(self) -> np.ndarray:
        return np.asarray(self.intercepts, dtype=np.float64)

    @cached_property
    def _dense_rows(self) -> np.ndarray | None:
        """The rows as a dense (features × fields) matrix, built at first use; None when a row names a field
        twice (its two weights would be added before the multiplication: not the same sum)."""
        dense = np.zeros((len(self.rows), len(self.fields)), dtype=np.float64)
        for i, row in enumerate(self.rows):
            for f, w in row:
                if dense[i, f] != 0.0:
                    return None
                dense[i, f] = w
        return dense

    def probabilities(self, text: str) -> dict[str, float]:
        a, b = self.platt
        return {f: sigmoid(a * z + b) for f, z in zip(self.fields, self.scores(text), strict=True)}

    def detect(self, text: str, threshold: float | None = None) -> dict[str, float]:
        """Fields whose calibrated probability reaches the threshold (chosen on dev)."""
        cut = self.threshold if threshold is None else threshold
        a, b = self.platt
        z = self.scores(text)
        if a > 0 and 0.0 < cut < 1.0:
            # On the recall path (the planner runs per query): the sigmoid only for logits near or above the
            # cut's logit (a margin absorbs rounding), then the exact test, so the result equals the full one.
            floor = (math.log(cut / (1.0 - cut)) - b) / a - 1e-6
            return {f: p for f, v in zip(self.fields, z, strict=True) if v >= floor
                    and (p := sigmoid(a * v + b)) >= cut}
        return {f: p for f, v in zip(self.fields, z, strict=True) if (p := sigmoid(a * v + b)) >= cut}

    def to_json(self) -> dict[str, Any]:
        inv = sorted(self.vocab.items(), key=lambda kv: kv[1])
        return {"version": ARTIFACT_VERSION, "name": self.name, "fields": list(self.fields),
                "features": [f for f, _ in inv], "idf": [round(x, 5) for x in self.idf],
                "rows": [[[f, round(w, 5)] for f, w in r] for r in self.rows],
                "intercepts": [round(x, 5) for x in self.intercepts], "platt": [round(x, 6) for x in self.platt],
                "threshold": round(self.threshold, 4), "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldModel:
        if data.get("version") != ARTIFACT_VERSION:
            raise ValueError(f"model artifact version {data.get('version')!r}, expected {ARTIFACT_VERSION}")
        feats = list(data["features"])
        return cls(str(data["name"]), tuple(data["fields"]), {f: i for i, f in enumerate(feats)},
                   [float(x) for x in data["idf"]],
                   [[(int(f), float(w)) for f, w in r] for r in data["rows"]],
                   [float(x) for x in data["intercepts"]], (float(data["platt"][0]), float(data["platt"][1])),
                   float(data["threshold"]), dict(data.get("meta", {})))


def sigmoid(z: float) -> float:
    """The logistic function without overflow for large |z| (shared by the field models and the veto)."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


# --- artifacts --------------------------------------------------------------------------------------------

def artifact_path(name: str) -> Path:
    return Path(str(resources.files("usermem.data").joinpath("models").joinpath(f"{name}.json")))


@lru_cache(maxsize=8)
def load_model(name: str) -> FieldModel | None:
    """The shipped model `name` ("extract" or "plan"), or None when it is not there."""
    res = resources.files("usermem.data").joinpath("models").joinpath(f"{name}.json")
    if not res.is_file():
        return None
    return FieldModel.from_json(json.loads(res.read_text(encoding="utf-8")))


def dump(model: FieldModel) -> str:
    return json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"


# --- training (scikit-learn, imported lazily) ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Example:
    text: str
    fields: frozenset[str]


def fit(name: str, train: Sequence[Example], dev: Sequence[Example], *, fields: Iterable[str] | None = None,
        min_df: int = 1, c_grid: Sequence[float] = (1.0, 4.0, 16.0), prune: float = 1e-3,
        calibration: FieldModel | None = None) -> FieldModel:
    """Fit one logistic regression per field on `train`; choose C, the Platt scaling and the threshold on `dev`.

    With `calibration` (a model fitted earlier on a subset of `train` and calibrated on a held-out split), its
    C, Platt scaling and threshold are reused and `dev` is not needed: the refit on more data.
    Deterministic: sorted vocabulary, lbfgs, no sampling. Fields without a positive train example are left out.
    """
    if calibration is not None:
        c_grid = (float(calibration.meta["C"]),)
        dev = ()
    try:
        import numpy as np
        from scipy.sparse import csr_matrix  # type: ignore[import-untyped]
        from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise RuntimeError("training needs scikit-learn: pip install 'usermem[train]'") from exc

    train_feats = [features(e.text) for e in train]
    df: dict[str, int] = {}
    for fs in train_feats:
        for f in fs:
            df[f] = df.get(f, 0) + 1
    vocab_list = sorted(f for f, n in df.items() if n >= min_df)
    vocab = {f: i for i, f in enumerate(vocab_list)}
    n_docs = len(train)
    idf = [math.log((1 + n_docs) / (1 + df[f])) + 1.0 for f in vocab_list]
    wanted = sorted(set(fields) if fields is not None else {f for e in train for f in e.fields})
    keep = [f for f in wanted if any(f in e.fields for e in train)]

    def matrix(feats: Sequence[set[str]]) -> Any:
        data: list[float] = []
        cols: list[int] = []
        ptr = [0]
        for fs in feats:
            idx = sorted(vocab[f] for f in fs if f in vocab)
            norm = math.sqrt(sum(idf[i] ** 2 for i in idx)) or 1.0
            cols += idx
            data += [idf[i] / norm for i in idx]
            ptr.append(len(cols))
        return csr_matrix((np.array(data, dtype=np.float64), np.array(cols, dtype=np.int64), np.array(ptr)),
                          shape=(len(feats), len(vocab_list)))

    x_train = matrix(train_feats)
    x_dev = matrix([features(e.text) for e in dev])

    def train_at(c: float) -> tuple[list[list[float]], list[float]]:
        coefs, inter = [], []
        for f in keep:
            y = np.array([f in e.fields for e in train], dtype=np.int64)
            clf = LogisticRegression(C=c, solver="lbfgs", max_iter=2000, class_weight="balanced")
            clf.fit(x_train, y)
            coefs.append([float(w) for w in clf.coef_[0]])
            inter.append(float(clf.intercept_[0]))
        return coefs, inter

    def dev_scores(coefs: list[list[float]], inter: list[float]) -> Any:
        w = np.array(coefs).T  # features x fields
        return x_dev @ w + np.array(inter)

    y_dev = np.array([[f in e.fields for f in keep] for e in dev], dtype=bool)
    best: tuple[float, float, list[list[float]], list[float], Any] | None = None
    for c in c_grid:
        coefs, inter = train_at(c)
        z = dev_scores(coefs, inter)
        f1 = _best_f1(z.ravel(), y_dev.ravel())[0] if len(dev) else 0.0
        if best is None or f1 > best[0] + 1e-9:
            best = (f1, c, coefs, inter, z)
    assert best is not None
    _, c_best, coefs, inter, z_dev = best
    a, b = _platt(z_dev.ravel(), y_dev.ravel()) if len(dev) else (1.0, 0.0)
    probs = 1.0 / (1.0 + np.exp(-(a * z_dev.ravel() + b)))
    threshold = _best_f1(probs, y_dev.ravel())[1] if len(dev) else 0.5
    if calibration is not None:
        (a, b), threshold = calibration.platt, calibration.threshold
    rows: list[list[tuple[int, float]]] = [[] for _ in vocab_list]
    for fi, ws in enumerate(coefs):
        for i, w in enumerate(ws):
            if abs(w) >= prune:
                rows[i].append((fi, round(w, 5)))
    # Drop features that vote for nothing (smaller artifact); re-index.
    used = [i for i, r in enumerate(rows) if r]
    vocab_out = {vocab_list[i]: j for j, i in enumerate(used)}
    meta: dict[str, Any] = {"C": c_best, "train": len(train), "dev": len(dev), "min_df": min_df,
            "dev_f1_at_threshold": round(_f1_at(probs, y_dev.ravel(), threshold), 4) if len(dev) else None}
    if calibration is not None:
        meta["calibrated_before_refit"] = {k: calibration.meta.get(k) for k in ("train", "dev", "dev_f1_at_threshold")}
    return FieldModel(name, tuple(keep), vocab_out, [round(idf[i], 5) for i in used], [rows[i] for i in used],
                      [round(x, 5) for x in inter], (round(a, 6), round(b, 6)), round(threshold, 4), meta)


def _f1_at(p: Any, y: Any, t: float) -> float:
    pred = p >= t
    tp = float((pred & y).sum())
    fp = float((pred & ~y).sum())
    fn = float((~pred & y).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def _best_f1(scores: Any, y: Any) -> tuple[float, float]:
    """(best F1, the cut reaching it) over the distinct scores."""
    best = (0.0, float("inf"))
    for t in sorted({round(float(s), 4) for s in scores}):
        f1 = _f1_at(scores, y, t)
        if f1 > best[0] + 1e-12:
            best = (f1, t)
    return best


def _platt(z: Any, y: Any) -> tuple[float, float]:
    """One-dimensional logistic fit p = sigmoid(a z + b) (Platt scaling), deterministic."""
    from sklearn.linear_model import LogisticRegression

    if y.all() or not y.any():
        return 1.0, 0.0
    clf = LogisticRegression(C=1e4, solver="lbfgs", max_iter=1000)
    clf.fit(z.reshape(-1, 1), y.astype(int))
    return float(clf.coef_[0][0]), float(clf.intercept_[0])
