"""Issue 19, per-request overhead of recall: the shortcuts keep every result the same.

* The withheld-field lookup of the query-free path takes the keys a read *may* hide without reading the
  reader's grants (`_Judge.may_hide`, `AccessGate.may_refuse`): whatever the grants, a key it leaves out
  is one `why_hidden` lets through — and a user without a sensitive value costs no grant read.
* The adaptive and learned fusions sort each signal once (shared by `separation` and `_top`) and read
  the signals with one conversion: equal, to the bit, to the formulas written out below on random
  signals with ties, zeros, missing cosines and no lexical match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from usermem.config import load_settings
from usermem.engine.grants import AccessGate
from usermem.engine.memory import Memory
from usermem.engine.recall import _Judge
from usermem.model import Kind
from usermem.policy.contracts import ContractSet, FieldContract, Sensitivity, Sharing
from usermem.relevance.fusion import FusionParams, adaptive_fuse, fusion_features

T0 = 1_790_000_000.0


class _Grant:
    def __init__(self, covers: bool) -> None:
        self._covers = covers

    def covers(self, contract: FieldContract, reader: str | None) -> bool:
        return self._covers


class _Grants:
    """The two reads an AccessGate makes of the grants pipeline, answered from fixed values."""

    def __init__(self, covers: bool, consented: bool) -> None:
        self.covers, self.consented = covers, consented

    def active(self, tenant: str, user_id: str, now: float) -> list[_Grant]:
        return [_Grant(self.covers)]

    def consents(self, tenant: str, user_id: str) -> set[tuple[str, str]]:
        return {("f", d) for d in ("general", "logistics", "health")} if self.consented else set()


_contract = st.builds(
    lambda sens, domain, sharing, live, enabled: FieldContract(
        "f", Kind.FACT, sensitivity=sens, domain=domain, sharing=sharing, live=live, enabled=enabled),
    st.sampled_from(list(Sensitivity)), st.sampled_from(["general", "logistics", "health"]),
    st.sampled_from(list(Sharing)), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(contract=_contract, gated=st.booleans(), domain=st.sampled_from([None, "logistics", "health"]),
       covers=st.booleans(), consented=st.booleans())
def test_a_key_may_hide_leaves_out_is_never_hidden(contract: FieldContract, gated: bool, domain: str | None,
                                                   covers: bool, consented: bool) -> None:
    gate = AccessGate(_Grants(covers, consented), "t", "u", T0, "reader", domain) if gated else None  # type: ignore[arg-type]
    judge = _Judge(ContractSet([contract]), gate, load_settings(env={}), T0)
    if not judge.may_hide(contract):
        assert judge.why_hidden(contract) is None


def test_recall_reads_no_grant_when_the_user_holds_no_sensitive_value(tmp_path: Any) -> None:
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/g.db", embedder="none"))
    try:
        m.write("t", "u", "preference", "favourite_colour", "green", now=T0)
        reads: list[str] = []
        real = m.store.list_docs

        def spy(tenant: str, namespace: str, **kw: Any) -> Any:
            reads.append(namespace)
            return real(tenant, namespace, **kw)

        m.store.list_docs = spy  # type: ignore[method-assign]
        assert [r.key for r in m.recall("t", "u", k=5, now=T0 + 1)] == ["favourite_colour"]
        assert "grants" not in reads
        # ... and a sensitive value is still withheld, with the grants read to say so
        m.store.list_docs = real  # type: ignore[method-assign]
        m.write("t", "u", "fact", "allergy", "peanuts", now=T0)
        m.store.list_docs = spy  # type: ignore[method-assign]
        got = m.recall("t", "u", k=5, now=T0 + 1)
        assert "allergy" in [w.key for w in got.withheld]
        assert "grants" in reads
    finally:
        m.close()


# -- fusion: the formulas as they were written before the shared sort -----------------------------------------

def _present_ref(values: Sequence[float | None], positive_only: bool) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    mask = ~np.isnan(arr)
    if positive_only:
        mask &= np.nan_to_num(arr, nan=0.0) > 0
    return mask, np.where(mask, np.nan_to_num(arr, nan=0.0), 0.0)


def _normalise_ref(arr: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    out = np.zeros_like(arr)
    if not mask.any():
        return out
    vals = arr[mask]
    if how == "zscore":  # mean and spread of the sorted scores (order-free sums; fusion._normalise)
        sd = float(np.sort(vals).std())
        if sd <= 0:
            out[mask] = 1.0
            return out
        z = (vals - float(np.sort(vals).mean())) / sd
        out[mask] = z - float(z.min())
        return out
    lo, hi = float(vals.min()), float(vals.max())
    out[mask] = 1.0 if hi == lo else (vals - lo) / (hi - lo)
    return out


def _separation_ref(arr: np.ndarray, mask: np.ndarray, top: int) -> float:
    vals = np.sort(arr[mask])[::-1]
    if len(vals) < 2:
        return 0.0
    sd = float(vals.std())
    if sd <= 0:
        return 0.0
    rest = vals[1:top]
    return float((vals[0] - rest.mean()) / sd)


def _top_ref(arr: np.ndarray, mask: np.ndarray, k: int) -> set[int]:
    idx = np.flatnonzero(mask)
    if len(idx) == 0 or k <= 0:
        return set()
    kth = float(np.sort(arr[idx])[::-1][min(k, len(idx)) - 1])
    return set(idx[arr[idx] >= kth].tolist())


def _adaptive_ref(dense: Sequence[float | None], lexical: Sequence[float], fields: Sequence[bool],
                  p: FusionParams) -> list[float]:
    n = len(dense)
    if n == 0:
        return []
    dmask, d = _present_ref(dense, False)
    lmask, lex = _present_ref(lexical, True)
    wd, wl = p.dense_weight, p.lexical_weight
    if p.adapt_dispersion and dmask.any() and lmask.any() and wd > 0 and wl > 0:
        sd_, sl_ = _separation_ref(d, dmask, p.top), _separation_ref(lex, lmask, p.top)
        total = sd_ + sl_
        if total > 0:
            wd *= float(np.clip(2 * sd_ / total, p.share_lo, p.share_hi))
            wl *= float(np.clip(2 * sl_ / total, p.share_lo, p.share_hi))
    if p.adapt_agreement and dmask.any() and lmask.any() and wl > 0:
        k = min(p.top, int(dmask.sum()), int(lmask.sum()))
        overlap = min(1.0, len(_top_ref(d, dmask, k) & _top_ref(lex, lmask, k)) / k) if k else 0.0
        wl *= p.agreement_floor + (1.0 - p.agreement_floor) * overlap
    raw = wd * _normalise_ref(d, dmask, p.norm) + wl * _normalise_ref(lex, lmask, p.norm)
    if p.field_weight > 0:
        scale = float(raw.max()) if float(raw.max()) > 0 else 1.0
        raw = raw + p.field_weight * scale * np.asarray(fields, dtype=np.float64)
    lo, hi = float(raw.min()), float(raw.max())
    if hi <= 0:
        return [0.0] * n
    if hi == lo:
        return [1.0] * n
    return [float(x) for x in (raw - lo) / (hi - lo)]


def _rr_ref(arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out = np.zeros_like(arr)
    vals = arr[mask]
    if len(vals):
        srt = np.sort(vals)[::-1]
        rank = np.searchsorted(-srt, -vals, side="left")
        out[mask] = 1.0 / (1.0 + rank)
    return out


def _features_ref(dense: Sequence[float | None], lexical: Sequence[float], zh: bool, top: int) -> np.ndarray:
    dmask, d = _present_ref(dense, False)
    lmask, lex = _present_ref(lexical, True)
    zd, zl = _normalise_ref(d, dmask, "zscore"), _normalise_ref(lex, lmask, "zscore")
    cd = cl = 1.0
    overlap = 0.0
    if dmask.any() and lmask.any():
        sd_, sl_ = _separation_ref(d, dmask, top), _separation_ref(lex, lmask, top)
        if sd_ + sl_ > 0:
            cd = float(np.clip(2 * sd_ / (sd_ + sl_), 0.25, 1.75))
            cl = float(np.clip(2 * sl_ / (sd_ + sl_), 0.25, 1.75))
        k = min(top, int(dmask.sum()), int(lmask.sum()))
        overlap = min(1.0, len(_top_ref(d, dmask, k) & _top_ref(lex, lmask, k)) / k) if k else 0.0
    z = 1.0 if zh else 0.0
    return np.stack([zd, zl, lmask.astype(np.float64), _rr_ref(d, dmask), _rr_ref(lex, lmask),
                     zd * cd, zl * cl, zl * overlap, zl * z, zd * z], axis=1)


_score = st.sampled_from([0.0, 0.25, 0.5, 0.5, 0.9, 1.0]) | st.floats(-1.0, 30.0, allow_nan=False)
_item = st.tuples(st.none() | _score, _score, st.booleans())


@settings(max_examples=400, deadline=None)
@given(items=st.lists(_item, max_size=40), norm=st.sampled_from(["zscore", "minmax"]),
       top=st.integers(2, 12), zh=st.booleans(), weights=st.sampled_from([(1.0, 1.0), (1.0, 0.0), (0.0, 1.0),
                                                                          (0.7, 1.3)]))
def test_fusion_equals_the_reference_formulas(items: list[tuple[float | None, float, bool]], norm: str, top: int,
                                              zh: bool, weights: tuple[float, float]) -> None:
    dense = [d for d, _, _ in items]
    lexical = [lx for _, lx, _ in items]
    fields = [f for _, _, f in items]
    p = FusionParams(dense_weight=weights[0], lexical_weight=weights[1], field_weight=0.5, norm=norm, top=top)
    assert adaptive_fuse(dense, lexical, fields, p) == _adaptive_ref(dense, lexical, fields, p)
    if items:
        got, want = fusion_features(dense, lexical, zh, top), _features_ref(dense, lexical, zh, top)
        assert got.shape == want.shape and np.array_equal(got, want)



def test_a_query_recall_reads_the_contract_set_once(tmp_path: Any) -> None:
    """The recall and its query planner share one read of the tenant's contract documents (pinned for the
    operation: EngineContext.pinned_contracts); the next operation reads them again and sees a change."""
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/c.db", embedder="none"))
    try:
        assert m.relevance is not None
        m.write("t", "u", "preference", "favourite_colour", "green", now=T0)
        reads: list[str] = []
        real = m.store.list_docs

        def spy(tenant: str, namespace: str, **kw: Any) -> Any:
            reads.append(namespace)
            return real(tenant, namespace, **kw)

        m.store.list_docs = spy  # type: ignore[method-assign]
        assert [r.key for r in m.recall("t", "u", k=5, query="what colour do I like", now=T0 + 1)] == \
            ["favourite_colour"]
        assert reads.count("contracts") == 1
        m.store.list_docs = real  # type: ignore[method-assign]
        m.set_contract("t", FieldContract("favourite_colour", Kind.PREFERENCE, enabled=False))
        assert m.recall("t", "u", k=5, query="what colour do I like", now=T0 + 3) == []
    finally:
        m.close()
