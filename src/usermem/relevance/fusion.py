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

    c_s      = clip(sep_s / (sep_d + sep_l), lo, hi)              (dispersion share, per signal)
    g        = floor + (1 − floor) · |top_k(d) ∩ top_k(l)| / k     (agreement gain, lexical only)
    f(m)     = w_d · c_d · norm(d(m)) + w_l · g · c_l · norm(l(m))
    fused(m) = f(m) + w_f · max(f) · field(m)
    rel(m)   = minmax(fused) over the candidates

`norm` is the per-query min-max (or z-score) of the candidates; `field(m)` is 1 when the memory's
key is one the recall planner named for the query (cross-lingual bridging), else 0. The parameters
(`FusionParams`) were chosen on the dev splits (docs/relevance.md); the test splits only report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def _present(values: Sequence[float | None], positive_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """(mask of present values, values with missing as 0)."""
    arr = np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    mask = ~np.isnan(arr)
    if positive_only:
        mask &= np.nan_to_num(arr, nan=0.0) > 0
    return mask, np.where(mask, np.nan_to_num(arr, nan=0.0), 0.0)


def _normalise(arr: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    out = np.zeros_like(arr)
    if not mask.any():
        return out
    vals = arr[mask]
    if how == "zscore":
        sd = float(vals.std())
        if sd <= 0:  # one value, or all equal: every present item counts fully
            out[mask] = 1.0
            return out
        z = (vals - float(vals.mean())) / sd
        out[mask] = z - float(z.min())  # shift so the weakest present item is 0 (missing stays 0)
        return out
    lo, hi = float(vals.min()), float(vals.max())
    out[mask] = 1.0 if hi == lo else (vals - lo) / (hi - lo)
    return out


def separation(arr: np.ndarray, mask: np.ndarray, top: int) -> float:
    """How far the best present score stands out from the rest of the top list, in standard deviations."""
    vals = np.sort(arr[mask])[::-1]
    if len(vals) < 2:
        return 0.0
    sd = float(vals.std())
    if sd <= 0:
        return 0.0
    rest = vals[1:top]
    return float((vals[0] - rest.mean()) / sd)


def _top(arr: np.ndarray, mask: np.ndarray, k: int) -> set[int]:
    """The present items scoring at least the k-th best score (ties all in: the input order never matters)."""
    idx = np.flatnonzero(mask)
    if len(idx) == 0 or k <= 0:
        return set()
    kth = float(np.sort(arr[idx])[::-1][min(k, len(idx)) - 1])
    return set(idx[arr[idx] >= kth].tolist())


def adaptive_fuse(dense: Sequence[float | None], lexical: Sequence[float], fields: Sequence[bool] | None = None,
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
    if p.adapt_dispersion and dmask.any() and lmask.any() and wd > 0 and wl > 0:
        sd_, sl_ = separation(d, dmask, p.top), separation(lex, lmask, p.top)
        total = sd_ + sl_
        if total > 0:
            wd *= float(np.clip(2 * sd_ / total, p.share_lo, p.share_hi))
            wl *= float(np.clip(2 * sl_ / total, p.share_lo, p.share_hi))
    if p.adapt_agreement and dmask.any() and lmask.any() and wl > 0:
        k = min(p.top, int(dmask.sum()), int(lmask.sum()))
        overlap = min(1.0, len(_top(d, dmask, k) & _top(lex, lmask, k)) / k) if k else 0.0
        wl *= p.agreement_floor + (1.0 - p.agreement_floor) * overlap
    raw = wd * _normalise(d, dmask, p.norm) + wl * _normalise(lex, lmask, p.norm)
    if fields is not None and p.field_weight > 0:
        # Scale-free: a share of this query's best fused score (z-scores have no fixed range).
        scale = float(raw.max()) if float(raw.max()) > 0 else 1.0
        raw = raw + p.field_weight * scale * np.asarray(fields, dtype=np.float64)
    lo, hi = float(raw.min()), float(raw.max())
    if hi <= 0:
        return [0.0] * n
    if hi == lo:
        return [1.0] * n
    return [float(x) for x in (raw - lo) / (hi - lo)]
