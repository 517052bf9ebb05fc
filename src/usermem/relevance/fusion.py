"""Query-adaptive fusion of the dense and lexical signals (and the planner's field match).

Fixed weights were the weak point: on Chinese MemoryBank questions jieba's BM25 matched loosely and
pulled the fused ranking below dense alone. Here each signal's weight is scaled per query by how much
it can be trusted *on this query*, from two observable quantities of the candidate set:

* **dispersion** — how far the signal's best score stands out from the rest of its top list,
  ``sep = (top1 − mean(top2..top_k)) / std(candidates)``. A flat signal (many near-equal scores:
  common words, a vague query) separates little and counts less; a signal with one clear winner counts
  more. Scale-free, so a language's cosine range does not matter.
* **agreement** — the overlap of the two signals' top-k lists. When they agree, the lexical signal
  confirms the dense one at full weight; when they disagree, it falls back to a floor share.
  **Corroboration** (`agreement_boost`, opt-in through `hybrid_agreement_boost`, English queries only):
  when at least `boost_overlap` of the lists is shared, BM25 counts `boost` times more.
* **dense floor** (`dense_floor` = q, `hybrid_dense_floor`, default 0.75, English queries): on such a
  corroborated query the cosine counts only above its q-quantile over the candidates. Below it the cosine separates little (a
  LoCoMo question naming the wrong speaker ranks the turns of that speaker first and the answer 60th), and
  without the floor that tail rank sinks a strong BM25 match below items mediocre on both signals.

    c_s      = clip(sep_s / (sep_d + sep_l), lo, hi)              (dispersion share, per signal)
    o        = |top_k(d) ∩ top_k(l)| / k                           (overlap of the two top lists)
    g        = (floor + (1 − floor) · o) · (boost if o ≥ boost_overlap else 1)   (agreement gain, lexical only)
    d'(m)    = max(norm(d(m)) − quantile_q(norm(d)), 0) if o ≥ boost_overlap else norm(d(m))   (dense floor)
    f(m)     = w_d · c_d · d'(m) + w_l · g · c_l · norm(l(m))
    fused(m) = f(m) + w_f · max(f) · field(m)
    rel(m)   = minmax(fused) over the candidates

`norm` is the per-query min-max (or z-score) of the candidates; `field(m)` is 1 when the memory's
key is one the recall planner named for the query (cross-lingual bridging), else 0. The parameters
(`FusionParams`) were chosen on the dev splits (docs/relevance.md); the test splits only report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np


@dataclass(frozen=True, slots=True)
class FusionParams:
    dense_weight: float = 1.0
    lexical_weight: float = 1.0
    field_weight: float = 0.0
    norm: str = "minmax"  # "minmax" | "zscore"
    adapt_dispersion: bool = True
    adapt_agreement: bool = True
    agreement_floor: float = 0.5
    share_lo: float = 0.25
    share_hi: float = 1.75
    top: int = 10
    # Corroboration: when at least this share of the two top lists is shared, the lexical signal is confirmed
    # by the dense one and its weight is multiplied by `agreement_boost` (1.0 = off).
    agreement_boost: float = 1.0
    boost_overlap: float = 0.2
    # Dense floor: on a corroborated query (overlap >= boost_overlap) the normalised cosine counts only above
    # this quantile of the candidates' (0 = off), so a BM25 match is not sunk by a poor cosine rank.
    dense_floor: float = 0.0


# A signal per candidate: a sequence (None: missing) or a float64 array (NaN: missing), as hybrid's recall path gives it.
DenseSignal = Sequence[float | None] | np.ndarray
LexicalSignal = Sequence[float] | np.ndarray
FieldSignal = Sequence[bool] | np.ndarray


def _present(values: DenseSignal, positive_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """(mask of present values, values with missing as 0)."""
    arr = np.array(values, dtype=np.float64)  # None -> nan
    mask = ~np.isnan(arr)
    if positive_only:
        mask &= arr > 0  # nan compares False, as 0 would
    out = np.where(mask, arr, 0.0)
    if np.isinf(out).any():  # rare: an infinite score counts as the largest finite one (as nan_to_num)
        out = np.nan_to_num(out)
    return mask, out


def _mean(a: np.ndarray) -> float:
    """`a.mean()` to the bit, without numpy's Python-level wrapper (the fusion calls it per signal per query)."""
    return float(np.add.reduce(a) / len(a))


def _std(a: np.ndarray) -> float:
    """`a.std()` to the bit (numpy's own steps: the mean, the squared deviations, their mean, the root)."""
    x = a - np.add.reduce(a) / len(a)
    np.multiply(x, x, out=x)
    return float(np.sqrt(np.add.reduce(x) / len(a)))


def _normalise(arr: np.ndarray, mask: np.ndarray, how: str, desc: np.ndarray | None = None) -> np.ndarray:
    """Per-query min-max or z-score (shifted >= 0) of the present items; missing ones are 0. `desc`: the present
    scores best first, when the caller has them (_descending), saving a sort."""
    out = np.zeros_like(arr)
    if not mask.any():
        return out
    vals = arr[mask]
    if how == "zscore":
        # mean and spread of the sorted scores: floating-point sums depend on their order, and near-equal
        # scores (1.0 vs 0.9999999999999999) z-scored would make the result depend on the input order
        ordered = np.sort(vals) if desc is None else np.ascontiguousarray(desc[::-1])
        sd = _std(ordered)
        if sd <= 0:  # one value, or all equal: every present item counts fully
            out[mask] = 1.0
            return out
        z = (vals - _mean(ordered)) / sd
        out[mask] = z - float(z.min())  # shift so the weakest present item is 0 (missing stays 0)
        return out
    lo, hi = float(vals.min()), float(vals.max())
    out[mask] = 1.0 if hi == lo else (vals - lo) / (hi - lo)
    return out


def separation(arr: np.ndarray, mask: np.ndarray, top: int) -> float:
    """How far the best present score stands out from the rest of the top list, in standard deviations."""
    return _separation(_descending(arr, mask), top)


def _descending(arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The present scores, best first (shared by separation and _top: one sort per signal)."""
    return np.sort(arr[mask])[::-1]


def _separation(vals: np.ndarray, top: int) -> float:
    if len(vals) < 2:
        return 0.0
    sd = _std(vals)
    if sd <= 0:
        return 0.0
    rest = vals[1:top]
    return float((vals[0] - _mean(rest)) / sd)


def _top(arr: np.ndarray, mask: np.ndarray, k: int, desc: np.ndarray | None = None) -> set[int]:
    """The present items scoring at least the k-th best score (ties all in: the input order never matters).
    `desc`: the present scores best first, when the caller has them (_descending)."""
    idx = np.flatnonzero(mask)
    if len(idx) == 0 or k <= 0:
        return set()
    kth = float((_descending(arr, mask) if desc is None else desc)[min(k, len(idx)) - 1])
    return set(idx[arr[idx] >= kth].tolist())


def _floored(norm: np.ndarray, mask: np.ndarray, q: float) -> np.ndarray:
    """The normalised scores minus their q-quantile over the present items (linear interpolation, as
    `np.quantile`), at least 0: below the quantile a signal no longer separates the items. Missing items are
    0 and stay 0 (normalised scores are >= 0, so the quantile is too). Non-decreasing in each item's score and
    independent of the input order. One partial sort instead of `np.quantile` (a third of the fusion's time)."""
    vals = norm[mask]
    pos = q * (len(vals) - 1)
    lo = int(pos)
    frac = pos - lo
    if frac > 0 and lo + 1 < len(vals):
        part = np.partition(vals, (lo, lo + 1))
        a, b = float(part[lo]), float(part[lo + 1])
        t = b - (b - a) * (1.0 - frac) if frac >= 0.5 else a + (b - a) * frac  # numpy's lerp, to the bit
    else:
        t = float(np.partition(vals, lo)[lo])
    out = norm - t
    np.maximum(out, 0.0, out=out)
    return out


LANGUAGE_TOP = 10  # the best cosines per memory language whose means the language calibration compares


def language_calibrated(dense: Sequence[float | None], other: Sequence[bool], share: float,
                        top: int = LANGUAGE_TOP) -> list[float | None]:
    """The cosines with those of the candidates in the other language than the query (`other`) raised by
    `share` of the gap between the two languages' means of their best `top` cosines (lowered when the other
    language scores higher). multilingual-e5 scores a Chinese query against Chinese text higher than against
    an English text of the same meaning (and back), so without it a cross-lingual answer ranks below
    unrelated memories of the query's language. Only when both languages have at least `top` candidates with
    a cosine (a user with a few stray memories in the other language keeps the plain cosine); one shift per
    query, so the order within each language is unchanged. `share` 0: unchanged."""
    if share <= 0 or len(other) != len(dense):
        return list(dense)
    same_vals = sorted((v for v, o in zip(dense, other, strict=True) if v is not None and not o), reverse=True)
    other_vals = sorted((v for v, o in zip(dense, other, strict=True) if v is not None and o), reverse=True)
    if len(same_vals) < top or len(other_vals) < top:
        return list(dense)
    shift = share * (sum(same_vals[:top]) / top - sum(other_vals[:top]) / top)
    return [v + shift if v is not None and o else v for v, o in zip(dense, other, strict=True)]


def calibrated_array(dense: np.ndarray, other: np.ndarray, share: float, top: int = LANGUAGE_TOP) -> np.ndarray:
    """`language_calibrated` on arrays (a missing cosine is NaN): the same shift, to the bit — each language's
    best `top` cosines summed in Python in descending order, as `sorted(..., reverse=True)` gives them — with
    no Python loop over the candidates (the recall path; tests/test_semantic_fast_paths.py)."""
    if share <= 0 or len(other) != len(dense):
        return dense
    present = ~np.isnan(dense)
    theirs = present & other
    same_vals, other_vals = dense[present & ~other], dense[theirs]
    if len(same_vals) < top or len(other_vals) < top:
        return dense
    best_same = np.sort(same_vals)[::-1][:top].tolist()
    best_other = np.sort(other_vals)[::-1][:top].tolist()
    shift = share * (sum(best_same) / top - sum(best_other) / top)
    out = dense.copy()
    out[theirs] += shift
    return out


def adaptive_fuse(dense: DenseSignal, lexical: LexicalSignal, fields: FieldSignal | None = None,
                  params: FusionParams | None = None) -> list[float]:
    """Fused relevance in [0, 1] per item (best = 1); the module docstring has the formula."""
    p = params or FusionParams()
    n = len(dense)
    if n != len(lexical) or (fields is not None and len(fields) != n):
        raise ValueError("dense, lexical and field signals must have the same length")
    if n == 0:
        return []
    dmask, d = _present(dense, positive_only=False)
    lmask, lex = _present(lexical, positive_only=True)
    wd, wl = p.dense_weight, p.lexical_weight
    both = bool(dmask.any()) and bool(lmask.any())
    ddesc = _descending(d, dmask) if both else None
    ldesc = _descending(lex, lmask) if both else None
    if p.adapt_dispersion and both and wd > 0 and wl > 0:
        assert ddesc is not None and ldesc is not None
        sd_, sl_ = _separation(ddesc, p.top), _separation(ldesc, p.top)
        total = sd_ + sl_
        if total > 0:
            wd *= float(np.clip(2 * sd_ / total, p.share_lo, p.share_hi))
            wl *= float(np.clip(2 * sl_ / total, p.share_lo, p.share_hi))
    corroborated = False
    if p.adapt_agreement and both and wl > 0:
        k = min(p.top, int(dmask.sum()), int(lmask.sum()))
        overlap = min(1.0, len(_top(d, dmask, k, ddesc) & _top(lex, lmask, k, ldesc)) / k) if k else 0.0
        wl *= p.agreement_floor + (1.0 - p.agreement_floor) * overlap
        corroborated = overlap >= p.boost_overlap
        if corroborated:
            wl *= p.agreement_boost
    nd = _normalise(d, dmask, p.norm, ddesc)
    if corroborated and p.dense_floor > 0:
        nd = _floored(nd, dmask, p.dense_floor)
    raw = wd * nd + wl * _normalise(lex, lmask, p.norm, ldesc)
    if fields is not None and p.field_weight > 0:
        # Scale-free: a share of this query's best fused score (z-scores have no fixed range).
        scale = float(raw.max()) if float(raw.max()) > 0 else 1.0
        raw = raw + p.field_weight * scale * np.asarray(fields, dtype=np.float64)
    lo, hi = float(raw.min()), float(raw.max())
    if hi <= 0:
        return [0.0] * n
    if hi == lo:
        return [1.0] * n
    out: list[float] = ((raw - lo) / (hi - lo)).tolist()
    return out


# -- learned linear fusion ------------------------------------------------------------------------------------
#
# The same observable per-query quantities as above, but weighted by a linear model fitted on the dev
# splits (usermem.evals.fusion_fit; `usermem eval fit-fusion` rebuilds usermem/data/fusion_model.json).
# Every weight is constrained to be >= 0 and every feature is non-decreasing in each signal of its item,
# so an item at least as good on both signals (and on the field match) never ranks below another. The
# planner-field bonus stays a fixed share (the episodic dev sets carry no field keys to learn it from).

FEATURES: tuple[str, ...] = (
    "z_dense",            # per-query z-score of the cosine over the candidates (shifted >= 0)
    "z_lexical",          # the same for BM25 over the items with a lexical match (0 without one)
    "has_lexical",        # 1 when the item has any lexical match
    "rr_dense",           # 1 / (1 + rank by cosine)
    "rr_lexical",         # 1 / (1 + rank by BM25), 0 without a lexical match
    "z_dense_share",      # z_dense x the dense signal's dispersion share (above)
    "z_lexical_share",    # z_lexical x the lexical signal's dispersion share
    "z_lexical_agree",    # z_lexical x the overlap of the two top-10 lists
    "z_lexical_zh",       # z_lexical for queries with Chinese characters (else 0)
    "z_dense_zh",         # z_dense for queries with Chinese characters
)


def _rr(arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """1 / (1 + competition rank) of the present items (ties share the best rank), 0 for missing ones."""
    out = np.zeros_like(arr)
    vals = arr[mask]
    if len(vals):
        srt = np.sort(vals)[::-1]
        rank = np.searchsorted(-srt, -vals, side="left")  # items strictly better than this one
        out[mask] = 1.0 / (1.0 + rank)
    return out


def fusion_features(dense: DenseSignal, lexical: LexicalSignal, zh: bool, top: int = 10) -> np.ndarray:
    """The (items x FEATURES) matrix of one query's candidates."""
    dmask, d = _present(dense, positive_only=False)
    lmask, lex = _present(lexical, positive_only=True)
    zd, zl = _normalise(d, dmask, "zscore"), _normalise(lex, lmask, "zscore")
    cd = cl = 1.0
    overlap = 0.0
    if dmask.any() and lmask.any():
        ddesc, ldesc = _descending(d, dmask), _descending(lex, lmask)
        sd_, sl_ = _separation(ddesc, top), _separation(ldesc, top)
        if sd_ + sl_ > 0:
            cd = float(np.clip(2 * sd_ / (sd_ + sl_), 0.25, 1.75))
            cl = float(np.clip(2 * sl_ / (sd_ + sl_), 0.25, 1.75))
        k = min(top, int(dmask.sum()), int(lmask.sum()))
        overlap = min(1.0, len(_top(d, dmask, k, ddesc) & _top(lex, lmask, k, ldesc)) / k) if k else 0.0
    z = 1.0 if zh else 0.0
    return np.stack([zd, zl, lmask.astype(np.float64), _rr(d, dmask), _rr(lex, lmask),
                     zd * cd, zl * cl, zl * overlap, zl * z, zd * z], axis=1)


@dataclass(frozen=True, slots=True)
class LinearFusionModel:
    """Non-negative weights over FEATURES, and where they came from."""

    weights: tuple[float, ...]
    field_weight: float = 0.5  # the planner-field bonus, a share of the query's best fused score (as above)
    about: str = ""

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a fusion model needs {len(FEATURES)} weights, got {len(self.weights)}")
        if any(not np.isfinite(w) or w < 0 for w in self.weights):
            raise ValueError("fusion model weights must be finite and >= 0")


def learned_fuse(dense: DenseSignal, lexical: LexicalSignal, fields: FieldSignal | None,
                 model: LinearFusionModel, zh: bool) -> list[float]:
    """Fused relevance in [0, 1] per item (best = 1) from the linear model."""
    n = len(dense)
    if n != len(lexical) or (fields is not None and len(fields) != n):
        raise ValueError("dense, lexical and field signals must have the same length")
    if n == 0:
        return []
    raw = fusion_features(dense, lexical, zh) @ np.asarray(model.weights, dtype=np.float64)
    if fields is not None and model.field_weight > 0:
        scale = float(raw.max()) if float(raw.max()) > 0 else 1.0
        raw = raw + model.field_weight * scale * np.asarray(fields, dtype=np.float64)
    lo, hi = float(raw.min()), float(raw.max())
    if hi <= 0:
        return [0.0] * n
    if hi == lo:
        return [1.0] * n
    return [float(x) for x in (raw - lo) / (hi - lo)]


def load_fusion_model(text: str) -> LinearFusionModel:
    """A model from the JSON text of a fusion model file ({"features", "weights", "field_weight", "about"})."""
    import json

    data = json.loads(text)
    if not isinstance(data, dict) or tuple(data.get("features") or ()) != FEATURES:
        raise ValueError(f"a fusion model file must name the features {list(FEATURES)} in this order")
    weights = data.get("weights")
    if not isinstance(weights, list) or not all(isinstance(w, int | float) for w in weights):
        raise ValueError("a fusion model file needs a list of numeric 'weights'")
    return LinearFusionModel(tuple(float(w) for w in weights), float(data.get("field_weight", 0.5)),
                             str(data.get("about", "")))


@lru_cache(maxsize=1)
def default_fusion_model() -> LinearFusionModel:
    """The bundled model (`usermem/data/fusion_model.json`), loaded once per process."""
    return load_fusion_model((resources.files("usermem") / "data" / "fusion_model.json").read_text(encoding="utf-8"))
