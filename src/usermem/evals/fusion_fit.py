"""Fitting the learned fusion (relevance/fusion.py, `LinearFusionModel`) on the dev splits.

Each dev question contributes its candidate set (the same candidates recall scores: the top-N by
cosine, the top-N by BM25 and the planner's fields) as rows of `fusion_features`, labelled 1 for the
memories that answer it. The model is a logistic regression with non-negative weights (projected
gradient descent, deterministic, numpy only), each question weighted equally and, within a question,
its answers and its non-answers weighted half each. Test questions never enter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from usermem.relevance.fusion import FEATURES, LinearFusionModel, fusion_features


@dataclass
class Group:
    """One question: its candidates' features and labels."""

    x: np.ndarray  # (candidates, features)
    y: np.ndarray  # (candidates,) 0/1
    source: str = ""


def group(dense: Sequence[float | None], lexical: Sequence[float], answers: Sequence[bool], zh: bool,
          source: str = "") -> Group:
    return Group(fusion_features(dense, lexical, zh), np.asarray(answers, dtype=np.float64), source)


def fit(groups: Sequence[Group], *, l2: float = 1e-3, steps: int = 3000, lr: float = 0.5,
        source_weights: dict[str, float] | None = None) -> np.ndarray:
    """Non-negative logistic weights (without the intercept, which does not change a ranking)."""
    usable = [g for g in groups if 0 < g.y.sum() < len(g.y)]
    if not usable:
        raise ValueError("no question has both answers and non-answers among its candidates")
    x = np.concatenate([g.x for g in usable])
    y = np.concatenate([g.y for g in usable])
    sw = np.concatenate([np.where(g.y > 0, 0.5 / g.y.sum(), 0.5 / (len(g.y) - g.y.sum()))
                         * (source_weights or {}).get(g.source, 1.0) for g in usable])
    sw = sw / sw.sum()
    scale = np.maximum(x.std(axis=0), 1e-6)  # condition the descent; weights are mapped back below
    xs = x / scale
    w = np.zeros(x.shape[1])
    b = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(xs @ w + b)))
        r = sw * (p - y)
        w = np.maximum(w - lr * (xs.T @ r + l2 * w), 0.0)
        b -= lr * float(r.sum())
    out: np.ndarray = w / scale
    return out


def model_from(weights: np.ndarray, about: str) -> LinearFusionModel:
    return LinearFusionModel(tuple(round(float(v), 6) for v in weights), about=about)


def describe(weights: np.ndarray) -> dict[str, float]:
    return {name: round(float(v), 4) for name, v in zip(FEATURES, weights, strict=True)}
