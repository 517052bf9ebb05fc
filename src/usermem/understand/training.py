"""Rebuild the shipped understanding models from the bank (`usermem train`): deterministic, train split only
for fitting, dev split only for choosing (C, calibration, thresholds); the test split is never read.

- `tagger.crfsuite` + `tagger.json`: the span tagger and its calibration (Platt on the logit of the span
  probability, threshold chosen on dev extraction F1);
- `tagger_fields.json`: the tagger's stage-1 field model (message -> fields it states), fitted on train
  (C and calibration chosen on dev); the CRF's field features on train come from 5-fold out-of-fold fits;
- `plan.json`: the recall planner's field model (message -> fields it needs), `learned.FieldModel`.

Each artifact records the sha256 of the bank files it was built from, so a test can tell a stale one.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from usermem.understand import bank, learned, tagger
from usermem.understand.text import normalise

TAGGER_PARAMS = {"c1": 0.1, "c2": 0.01, "max_iterations": 150}
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(4, 19))
TAGGER_THRESHOLDS = (0.2, 0.3, 0.45)
SIMILARITIES = (0.6, 0.7, 0.8)


def bank_digest(*names: str) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(bank.bank_text(name, None).encode("utf-8"))
    return h.hexdigest()[:16]


def models_dir() -> Path:
    return tagger.model_path().parent


def value_match(expected: str, got: Any) -> bool:
    """The scoring rule of the extraction eval: equal after normalisation, or one contains the other and the
    shorter is at least half as long (so "my son" ~ "son", but "我" never matches "我对花生过敏")."""
    a, b = normalise(str(expected)), normalise(str(got))
    if a == b:
        return True
    if not a or not b or not (a in b or b in a):
        return False
    return min(len(a), len(b)) / max(len(a), len(b)) >= 0.5


FOLDS = 5


def _field_examples(items: Sequence[bank.Item]) -> list[learned.Example]:
    return [learned.Example(content, frozenset(lab.field for lab in item.labels if lab.turn == t))
            for item in items for t, content in tagger.training_turns(item)]


def _fold(item_id: str) -> int:
    return int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8], 16) % FOLDS


def train_field_model(out_dir: Path, items: Sequence[bank.Item]) -> tuple[learned.FieldModel,
                                                                           dict[tuple[str, int], list[str]]]:
    """The stage-1 field model (train, chosen on dev) and out-of-fold field predictions for every train turn."""
    train = [i for i in items if i.split == "train"]
    dev = [i for i in items if i.split == "dev"]
    oof: dict[tuple[str, int], list[str]] = {}
    for k in range(FOLDS):
        fit_on = [i for i in train if _fold(i.id) != k]
        held = [i for i in train if _fold(i.id) == k]
        m = learned.fit("fold", _field_examples(fit_on), _field_examples(held), min_df=2, c_grid=(4.0,), prune=0.05)
        for item in held:
            for t, content in tagger.training_turns(item):
                oof[(item.id, t)] = tagger.message_fields(m, content)
    model = learned.fit(tagger.FIELDS_NAME, _field_examples(train), _field_examples(dev), min_df=2, prune=0.05)
    meta = dict(model.meta, bank=bank_digest("utterances.jsonl"), folds=FOLDS)
    model = learned.FieldModel(model.name, model.fields, model.vocab, model.idf, model.rows, model.intercepts,
                               model.platt, model.threshold, meta)
    (out_dir / f"{tagger.FIELDS_NAME}.json").write_text(learned.dump(model), encoding="utf-8")
    return model, oof


def train_tagger_model(out_dir: Path, items: Sequence[bank.Item]) -> dict[str, Any]:
    train = [i for i in items if i.split == "train"]
    dev = [i for i in items if i.split == "dev"]
    path = out_dir / tagger.MODEL_NAME
    field_model, oof = train_field_model(out_dir, items)
    tagger.train_tagger(train, path, fields_of=oof, **TAGGER_PARAMS)  # type: ignore[arg-type]
    t = tagger.Tagger(path, field_model=field_model)
    # Platt scaling of the span probability on dev: is a predicted span a labelled value?
    zs: list[float] = []
    ys: list[int] = []
    for item in dev:
        for ti, (role, content) in enumerate(item.turns):
            if role != "user":
                continue
            gold = [lab for lab in item.labels if lab.turn == ti]
            for sp in t.spans(content):
                p = min(max(sp.probability, 1e-6), 1 - 1e-6)
                zs.append(math.log(p / (1 - p)))
                ys.append(int(any(g.field == sp.field and value_match(g.value, sp.text) for g in gold)))
    platt = _platt(zs, ys)
    return {"platt": platt, "params": TAGGER_PARAMS, "train": len(train), "dev": len(dev),
            "bank": bank_digest("utterances.jsonl")}


def _platt(z: Sequence[float], y: Sequence[int]) -> list[float]:
    if not z or all(y) or not any(y):
        return [1.0, 0.0]
    import numpy as np
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    clf = LogisticRegression(C=1e4, solver="lbfgs", max_iter=1000)
    clf.fit(np.array(z).reshape(-1, 1), np.array(y))
    return [round(float(clf.coef_[0][0]), 6), round(float(clf.intercept_[0]), 6)]


def choose_threshold(items: Sequence[bank.Item]) -> tuple[tuple[float, float], dict[str, float]]:
    """(tagger threshold, template similarity) maximising end-to-end extraction F1 on the dev split."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand.extract import PatternExtractor, extractable

    dev = [i for i in items if i.split == "dev"]
    allowed_fields = extractable(ContractSet())
    best = (-1.0, (0.5, 0.5))
    scores: dict[str, float] = {}
    for sim in SIMILARITIES:
        for th in TAGGER_THRESHOLDS:
            ex = PatternExtractor(allowed_fields, tagger_threshold=th, template_similarity=sim)
            tp = fp = fn = 0
            for item in dev:
                a, b, c = score_item(item, _flatten(ex.extract(_messages(item))))
                tp, fp, fn = tp + a, fp + b, fn + c
            f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
            scores[f"{th}/{sim}"] = round(f1, 4)
            if f1 > best[0] + 1e-9:
                best = (f1, (th, sim))
    return best[1], scores


def _messages(item: bank.Item) -> list[Any]:
    from usermem.understand.text import coerce_messages

    return coerce_messages(item.messages())


def _flatten(cands: Sequence[Any]) -> list[tuple[str, str]]:
    out = []
    for c in cands:
        for v in c.value if isinstance(c.value, list) else [c.value]:
            out.append((c.key, str(v)))
    return out


def score_item(item: bank.Item, got: Sequence[tuple[str, str]]) -> tuple[int, int, int]:
    gold = [(lab.field, lab.value) for lab in item.labels]
    tp = fp = 0
    for key, value in got:
        hit = next((g for g in gold if g[0] == key and value_match(g[1], value)), None)
        if hit is not None:
            gold.remove(hit)
            tp += 1
        else:
            fp += 1
    return tp, fp, len(gold)


def plan_examples(split: str) -> list[learned.Example]:
    """Plan queries of a split; for training, also the bank's utterances (a statement about a field is
    evidence of the field's topic: "I'm allergic to shellfish" teaches what `allergy` is about)."""
    out = [learned.Example(q.text, frozenset(q.fields)) for q in bank.load_plan_queries() if q.split == split]
    if split == "train":
        for item in bank.load_items():
            if item.split == "train" and item.labels:
                text = " ".join(c for r, c in item.turns if r == "user")
                out.append(learned.Example(text, frozenset(lab.field for lab in item.labels)))
    return out


def train_plan_model(out_dir: Path) -> learned.FieldModel:
    model = learned.fit("plan", plan_examples("train"), plan_examples("dev"), min_df=2, prune=0.05)
    meta = dict(model.meta)
    meta["bank"] = bank_digest("plan_queries.jsonl", "utterances.jsonl")
    meta["combined_threshold"], meta["combined_dev_f1"] = _combined_threshold(model)
    model = learned.FieldModel(model.name, model.fields, model.vocab, model.idf, model.rows, model.intercepts,
                               model.platt, model.threshold, meta)
    (out_dir / "plan.json").write_text(learned.dump(model), encoding="utf-8")
    return model


def _combined_threshold(model: learned.FieldModel) -> tuple[float, dict[str, float]]:
    """The model threshold at which rules + model plan best (F1) on the dev plan queries."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    rules_only = DeterministicPlanner(ContractSet(), model=None)
    dev = [q for q in bank.load_plan_queries() if q.split == "dev"]
    base = [set(rules_only.plan(q.text).fields) for q in dev]
    probs = [model.probabilities(q.text) for q in dev]
    scores: dict[str, float] = {}
    best = (-1.0, 0.5)
    for th in THRESHOLDS:
        tp = fp = fn = 0
        for q, b, p in zip(dev, base, probs, strict=True):
            got = b | {f for f, x in p.items() if x >= th}
            want = set(q.fields)
            tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        scores[str(th)] = round(f1, 4)
        if f1 > best[0] + 1e-9:
            best = (f1, th)
    return best[1], scores


def artifact_digests(out_dir: Path) -> dict[str, str]:
    """sha256 of the tagger's binary artifacts (recorded in tagger.json; a test checks the shipped files)."""
    names = (tagger.MODEL_NAME, f"{tagger.FIELDS_NAME}.json")
    return {n: hashlib.sha256((out_dir / n).read_bytes()).hexdigest() for n in names if (out_dir / n).exists()}


def train_all(out_dir: Path | None = None, *, tagger_too: bool = True) -> dict[str, Any]:
    """Rebuild every model into `out_dir` (default: the package's data/models). Returns what was chosen."""
    out = out_dir or models_dir()
    out.mkdir(parents=True, exist_ok=True)
    items = bank.load_items()
    report: dict[str, Any] = {}
    if tagger_too:
        meta = train_tagger_model(out, items)
        (out / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        if out == models_dir():
            tagger.load_tagger.cache_clear()
            from usermem.understand import extract

            extract.reset_calibration()
            (threshold, similarity), scores = choose_threshold(items)
            meta["threshold"] = threshold
            meta["template_similarity"] = similarity
            meta["dev_f1_by_threshold_and_similarity"] = scores
        meta["sha256"] = artifact_digests(out)
        (out / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        report["tagger"] = meta
    plan = train_plan_model(out)
    learned.load_model.cache_clear()
    report["plan"] = dict(plan.meta, threshold=plan.threshold, fields=len(plan.fields))
    return report
