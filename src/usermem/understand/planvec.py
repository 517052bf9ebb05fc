"""The recall planner's vector head: query vector -> {field: calibrated probability}.

The planner's lexical model (`learned.FieldModel` "plan") sees words; this head sees the *meaning* of the
message through the query vector recall already computes for semantic search (the bundled multilingual
e5-small, `embedder.query(text)`), so "Do I have any allergies?", "我对什么过敏来着？" and a paraphrase in
neither lexicon land near each other. It is one logistic regression per field over the vector (scikit-learn,
lbfgs: deterministic), fitted on the *train* plan queries plus the train utterances of the bank (a statement
about a field is evidence of its topic; weighted lower); the regularisation, the utterance weight, the Platt
scaling of the logits, the mix with the lexical model and the decision threshold are chosen on the *dev* plan
queries (rules + models together, as the planner runs); the test split is never read here.

Inference is one (dim x fields) matrix-vector product and a sigmoid: a few microseconds. The head is only
used with a vector of the model it was fitted on (`model_id`): a deployment with another embedder plans
without it. The artifact (`usermem/data/models/plan_vectors.json`) is rebuilt by `usermem train`; a test
checks the shipped one equals a rebuild.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from usermem.understand.learned import Example

ARTIFACT_VERSION = 1
NAME = "plan_vectors"


@dataclass(frozen=True)
class VectorFieldModel:
    """Per-field logistic weights over a query vector, a Platt scaling, and how it mixes with the lexical model."""

    model_id: str  # the embedder whose vectors it reads (Embedder.model_id)
    fields: tuple[str, ...]
    weights: np.ndarray  # float64, dim x fields
    intercepts: np.ndarray  # float64, fields
    platt: tuple[float, float]  # p = sigmoid(a * z + b)
    mix: float  # p = mix * p_vector + (1 - mix) * p_lexical
    threshold: float  # on the mixed probability, chosen on dev (rules + models)
    meta: Mapping[str, Any]

    @property
    def dim(self) -> int:
        return int(self.weights.shape[0])

    def accepts(self, vector: Any, model_id: str | None) -> bool:
        """True when `vector` can be read by this head: the same embedder (when named) and dimension."""
        if vector is None or (model_id is not None and model_id != self.model_id):
            return False
        shape = getattr(vector, "shape", None)
        return shape == (self.dim,) if shape is not None else len(vector) == self.dim

    def probabilities(self, vector: Any) -> np.ndarray:
        """Calibrated probability per field (order of `fields`)."""
        a, b = self.platt
        z = np.asarray(vector, dtype=np.float64) @ self.weights + self.intercepts
        out: np.ndarray = 1.0 / (1.0 + np.exp(-(a * z + b)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"version": ARTIFACT_VERSION, "model_id": self.model_id, "fields": list(self.fields),
                "weights": [[round(float(w), 5) for w in row] for row in self.weights.T],  # per field
                "intercepts": [round(float(x), 5) for x in self.intercepts],
                "platt": [round(x, 6) for x in self.platt], "mix": self.mix, "threshold": self.threshold,
                "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VectorFieldModel:
        if data.get("version") != ARTIFACT_VERSION:
            raise ValueError(f"vector model artifact version {data.get('version')!r}, expected {ARTIFACT_VERSION}")
        weights = np.asarray(data["weights"], dtype=np.float64).T.copy()
        return cls(str(data["model_id"]), tuple(data["fields"]), weights,
                   np.asarray(data["intercepts"], dtype=np.float64),
                   (float(data["platt"][0]), float(data["platt"][1])), float(data["mix"]),
                   float(data["threshold"]), dict(data.get("meta", {})))


@lru_cache(maxsize=2)
def load_vector_model(name: str = NAME) -> VectorFieldModel | None:
    """The shipped vector head, or None when it is not there."""
    res = resources.files("usermem.data").joinpath("models").joinpath(f"{name}.json")
    if not res.is_file():
        return None
    return VectorFieldModel.from_json(json.loads(res.read_text(encoding="utf-8")))


def dump(model: VectorFieldModel) -> str:
    return json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"


# --- training (scikit-learn, imported lazily) ----------------------------------------------------------------

C_GRID = (4.0, 16.0, 64.0)
UTTERANCE_WEIGHTS = (0.3, 1.0)
MIXES = (0.5, 0.75, 1.0)
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(4, 19))


def fit(model_id: str, queries: Sequence[Example], utterances: Sequence[Example], train_vectors: np.ndarray,
        dev: Sequence[Example], dev_vectors: np.ndarray, fields: Sequence[str],
        evaluate: Callable[[VectorFieldModel], Mapping[float, tuple[float, bool]]]) -> VectorFieldModel:
    """Fit the head on train (queries, then utterances: the rows of `train_vectors` in that order) and choose
    C, the utterance weight, the Platt scaling, the mix and the threshold on dev.

    `evaluate(head)` scores the whole planner (rules + lexical model + this candidate head, its threshold
    varied) on dev: it returns {threshold: (dev F1, whether the dev constraints hold)}. The best F1 among the settings that
    hold the constraints wins (the best overall when none does; `meta` says which). Deterministic: lbfgs,
    fixed grids, the first best kept.
    """
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    n_q = len(queries)
    train = [*queries, *utterances]
    keep = [f for f in fields if any(f in e.fields for e in train)]
    y = np.array([[f in e.fields for f in keep] for e in train], dtype=bool)
    y_dev = np.array([[f in e.fields for f in keep] for e in dev], dtype=bool)
    x = np.asarray(train_vectors, dtype=np.float64)
    x_dev = np.asarray(dev_vectors, dtype=np.float64)
    best: tuple[tuple[bool, float], dict[str, Any]] | None = None
    scores: dict[str, float] = {}
    for c in C_GRID:
        for uw in UTTERANCE_WEIGHTS:
            sw = np.array([1.0] * n_q + [uw] * (len(train) - n_q))
            coefs = np.zeros((x.shape[1], len(keep)))
            inter = np.zeros(len(keep))
            for j in range(len(keep)):
                clf = LogisticRegression(C=c, solver="lbfgs", max_iter=3000, class_weight="balanced")
                clf.fit(x, y[:, j].astype(int), sample_weight=sw)
                coefs[:, j] = clf.coef_[0]
                inter[j] = clf.intercept_[0]
            coefs = np.round(coefs, 5)  # what the artifact holds: choose with the shipped numbers
            inter = np.round(inter, 5)
            z_dev = x_dev @ coefs + inter
            a, b = (round(v, 6) for v in _platt(z_dev.ravel(), y_dev.ravel()))
            for mix in MIXES:
                by_threshold = evaluate(VectorFieldModel(model_id, tuple(keep), coefs, inter, (a, b), mix, 0.5, {}))
                for th, (f1, ok) in by_threshold.items():
                    scores[f"C={c} uw={uw} mix={mix} t={th}" + ("" if ok else " (constraint missed)")] = round(f1, 4)
                    key = (ok, f1)
                    if best is None or key[0] > best[0][0] or (key[0] == best[0][0] and f1 > best[0][1] + 1e-9):
                        best = (key, {"C": c, "uw": uw, "mix": mix, "threshold": th, "coefs": coefs,
                                      "inter": inter, "platt": (a, b)})
    assert best is not None
    (constrained, f1), chosen = best
    top = sorted(scores.items(), key=lambda kv: -kv[1])[:10]
    meta = {"C": chosen["C"], "utterance_weight": chosen["uw"], "train_queries": n_q,
            "train_utterances": len(train) - n_q, "dev": len(dev), "dev_f1": round(f1, 4), "dev_constraints_held": constrained,
            "top_dev_f1": dict(top)}
    return VectorFieldModel(model_id, tuple(keep), chosen["coefs"], chosen["inter"],
                            chosen["platt"], chosen["mix"],
                            chosen["threshold"], meta)


def _platt(z: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression

    if y.all() or not y.any():
        return 1.0, 0.0
    clf = LogisticRegression(C=1e4, solver="lbfgs", max_iter=1000)
    clf.fit(z.reshape(-1, 1), y.astype(int))
    return float(clf.coef_[0][0]), float(clf.intercept_[0])
