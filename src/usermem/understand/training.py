"""Rebuild the shipped understanding models from the bank (`usermem train`): deterministic; fitted on the train
split, the train-only supplement (`utterances_extra.jsonl` and `utterances_fourth.jsonl`) and more-train (the
half of the second writer's `utterances_more.jsonl` that `bank.more_half` puts in train); C and calibrations
chosen on dev, the tagger threshold and template similarity on more-dev (the other half, never fitted on: the
bank's dev split is biased, the rules were written from its errors); then — `REFIT` — the tagger and its field
model fitted again on train + dev with those choices kept (more-dev stays out); the test split is never read.

- `tagger.crfsuite` + `tagger.json`: the span tagger and its calibration (Platt on the logit of the span
  probability, threshold chosen on more-dev extraction F1);
- `tagger_fields.json`: the tagger's stage-1 field model (message -> fields it states), fitted on train
  (C and calibration chosen on dev); the CRF's field features on train come from 5-fold out-of-fold fits;
- `plan.json`: the recall planner's field model (message -> fields it needs), `learned.FieldModel`;
- `plan_vectors.json`: the planner's vector head (query vector -> fields it needs), `planvec.VectorFieldModel`,
  built with the embedder passed in (`usermem train` passes the bundled e5-small).

Each artifact records the sha256 of the bank files it was built from, so a test can tell a stale one.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from usermem.model import Kind
from usermem.understand import bank, learned, planvec, tagger
from usermem.understand.ports import QueryEmbedder
from usermem.understand.text import normalise

TAGGER_PARAMS = {"c1": 0.1, "c2": 0.01, "max_iterations": 150}
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(4, 19))
TAGGER_THRESHOLDS = (0.3, 0.45, 0.55)
SIMILARITIES = (0.6, 0.7, 0.8)
TIE = 0.002  # extraction F1 differences below this are ties when choosing the tagger threshold


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
BANK_FILES = ("utterances.jsonl", *bank.SUPPLEMENT_FILES, bank.MORE_FILE)
# What the planner's models read (plan_examples: the plan queries and every labelled train utterance).
PLAN_BANK_FILES = ("plan_queries.jsonl", *BANK_FILES)
# Refit the tagger and its field model on train + dev after choosing on dev (see train_all and the bank README).
REFIT = True


def _field_examples(items: Sequence[bank.Item]) -> list[learned.Example]:
    return [learned.Example(content, frozenset(lab.field for lab in item.labels if lab.turn == t))
            for item in items for t, content in tagger.training_turns(item)]


def _fold(item_id: str) -> int:
    return int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8], 16) % FOLDS


def train_field_model(out_dir: Path, items: Sequence[bank.Item], fit_splits: Sequence[str] = ("train",),
                      calibration: learned.FieldModel | None = None
                      ) -> tuple[learned.FieldModel, dict[tuple[str, int], list[str]]]:
    """The stage-1 field model (fitted on `fit_splits`, chosen on dev — or with `calibration`'s C, Platt scaling
    and threshold when refitting) and out-of-fold field predictions for every turn it was fitted on."""
    assert "test" not in fit_splits
    train = [i for i in items if i.split in fit_splits]
    dev = [i for i in items if i.split == "dev"] if calibration is None else []
    oof: dict[tuple[str, int], list[str]] = {}
    for k in range(FOLDS):
        fit_on = [i for i in train if _fold(i.id) != k]
        held = [i for i in train if _fold(i.id) == k]
        m = learned.fit("fold", _field_examples(fit_on), _field_examples(held), min_df=2, c_grid=(4.0,), prune=0.05)
        for item in held:
            for t, content in tagger.training_turns(item):
                oof[(item.id, t)] = tagger.message_fields(m, content)
    model = learned.fit(tagger.FIELDS_NAME, _field_examples(train), _field_examples(dev), min_df=2, prune=0.05,
                        calibration=calibration)
    meta = dict(model.meta, bank=bank_digest(*BANK_FILES), folds=FOLDS, fit_splits=list(fit_splits))
    model = learned.FieldModel(model.name, model.fields, model.vocab, model.idf, model.rows, model.intercepts,
                               model.platt, model.threshold, meta)
    (out_dir / f"{tagger.FIELDS_NAME}.json").write_text(learned.dump(model), encoding="utf-8")
    return model, oof


def train_tagger_model(out_dir: Path, items: Sequence[bank.Item], fit_splits: Sequence[str] = ("train",),
                       calibrated: tuple[learned.FieldModel, list[float]] | None = None) -> dict[str, Any]:
    """Fit the field model and the CRF on `fit_splits`; Platt-scale the span probability on dev — or, when
    refitting (`calibrated` = the field model and the span scaling of a fit that held dev out), reuse those."""
    assert "test" not in fit_splits
    train = [i for i in items if i.split in fit_splits]
    dev = [i for i in items if i.split == "dev"]
    path = out_dir / tagger.MODEL_NAME
    field_model, oof = train_field_model(out_dir, items, fit_splits, calibrated[0] if calibrated else None)
    tagger.train_tagger(train, path, fields_of=oof, **TAGGER_PARAMS)  # type: ignore[arg-type]
    meta: dict[str, Any] = {"params": TAGGER_PARAMS, "fit_splits": list(fit_splits), "train": len(train),
                            "dev": len(dev), "bank": bank_digest(*BANK_FILES)}
    if calibrated is not None:
        return {"platt": calibrated[1], **meta}
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
    return {"platt": _platt(zs, ys), **meta}


def _platt(z: Sequence[float], y: Sequence[int]) -> list[float]:
    if not z or all(y) or not any(y):
        return [1.0, 0.0]
    import numpy as np
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    clf = LogisticRegression(C=1e4, solver="lbfgs", max_iter=1000)
    clf.fit(np.array(z).reshape(-1, 1), np.array(y))
    return [round(float(clf.coef_[0][0]), 6), round(float(clf.intercept_[0]), 6)]


def choose_threshold(items: Sequence[bank.Item], model_dir: Path | None = None,
                     fit_splits: Sequence[str] = ("train",)
                     ) -> tuple[tuple[float, float], dict[str, float], dict[str, float]]:
    """(tagger threshold, template similarity) maximising end-to-end extraction F1 on the selection set —
    more-dev (`bank.MORE_DEV`, the second writer's held-out half: the bank's dev split is biased, the rules were
    written from its errors), or the bank's dev split when there is no more-dev — with the models in
    `model_dir` (default: the shipped ones) and templates from `fit_splits`. Also returns the F1 grid on both
    sets (more-dev, dev)."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand.extract import PatternExtractor, extractable
    from usermem.understand.templates import TemplateIndex

    assert "dev" not in fit_splits and "test" not in fit_splits and bank.MORE_DEV not in fit_splits
    dev = [i for i in items if i.split == "dev"]
    more_dev = [i for i in items if i.split == bank.MORE_DEV]
    allowed_fields = extractable(ContractSet())
    the_tagger = _load_tagger(model_dir or models_dir())
    index = TemplateIndex(items, fit_splits)
    scores: dict[str, float] = {}
    more_scores: dict[str, float] = {}
    for sim in SIMILARITIES:
        for th in TAGGER_THRESHOLDS:
            ex = PatternExtractor(allowed_fields, tagger=the_tagger, tagger_threshold=th, template_similarity=sim)
            ex.templates = index
            f1s = []
            for rows in (dev, more_dev):
                tp = fp = fn = 0
                for item in rows:
                    a, b, c = score_item(item, _flatten(ex.extract(_messages(item))))
                    tp, fp, fn = tp + a, fp + b, fn + c
                f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
            scores[f"{th}/{sim}"] = round(f1s[0], 4)
            more_scores[f"{th}/{sim}"] = round(f1s[1], 4)
    chosen = more_scores if more_dev else scores
    top = max(chosen.values())
    # Near-ties (within TIE of the best F1, well inside the noise of ~500 items) go to the higher threshold, then
    # the higher similarity: the precision target (0.90) is further away than the recall target.
    best_key = max((k for k, f1 in chosen.items() if f1 >= top - TIE),
                   key=lambda k: (float(k.split("/")[0]), float(k.split("/")[1])))
    th, sim = (float(x) for x in best_key.split("/"))
    return (th, sim), more_scores, scores


def _load_tagger(model_dir: Path) -> tagger.Tagger:
    meta = json.loads((model_dir / "tagger.json").read_text(encoding="utf-8"))
    fm = learned.FieldModel.from_json(json.loads((model_dir / f"{tagger.FIELDS_NAME}.json").read_text(encoding="utf-8")))
    a, b = meta["platt"]
    return tagger.Tagger(model_dir / tagger.MODEL_NAME, (float(a), float(b)), fm)


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
    """Plan queries of a split; for training, also every labelled train utterance (a statement about a field
    is evidence of the field's topic: "I'm allergic to shellfish" teaches what `allergy` is about): the bank's
    train split, the train-only supplement and more-train (`bank.load_training_items`; more-dev, select and
    test are never among them). Chosen on dev over the bank's train split alone (docs/understanding.md)."""
    out = [learned.Example(q.text, frozenset(q.fields)) for q in bank.load_plan_queries() if q.split == split]
    if split == "train":
        for item in bank.load_training_items():
            if item.split == "train" and item.labels:
                text = " ".join(c for r, c in item.turns if r == "user")
                out.append(learned.Example(text, frozenset(lab.field for lab in item.labels)))
    return out


def train_plan_model(out_dir: Path) -> learned.FieldModel:
    model = learned.fit("plan", plan_examples("train"), plan_examples("dev"), min_df=2, prune=0.05)
    meta = dict(model.meta)
    meta["bank"] = bank_digest(*PLAN_BANK_FILES)
    meta["combined_threshold"], meta["combined_dev_f1"] = _combined_threshold(model)
    model = learned.FieldModel(model.name, model.fields, model.vocab, model.idf, model.rows, model.intercepts,
                               model.platt, model.threshold, meta)
    (out_dir / "plan.json").write_text(learned.dump(model), encoding="utf-8")
    return model


def _combined_threshold(model: learned.FieldModel) -> tuple[float, dict[str, float]]:
    """The model threshold at which rules + model plan best (F1) on the dev plan queries, among the thresholds
    that keep the planner's precision on the dev rows of the older plan set (`plan_eval.jsonl`, narrower
    labels) at `PRECISION_BAR` (the best overall when none does; a missed one is marked in the scores)."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    rules_only = DeterministicPlanner(ContractSet(), model=None)
    dev = [q for q in bank.load_plan_queries() if q.split == "dev"]
    base = [set(rules_only.plan(q.text).fields) for q in dev]
    probs = [model.probabilities(q.text) for q in dev]
    older = [r for r in _older_plan_rows() if r.get("split") == "dev"]
    older_known = {f for r in older for f in (*r["fact_recall"], *r["preference_recall"])}
    older_want = [set(r["fact_recall"]) | set(r["preference_recall"]) for r in older]
    older_base = [set(rules_only.plan(str(r["text"])).fields) & older_known for r in older]
    older_probs = [model.probabilities(str(r["text"])) for r in older]
    scores: dict[str, float] = {}
    best = (False, -1.0, 0.5)
    for th in THRESHOLDS:
        tp = fp = fn = 0
        for q, b, p in zip(dev, base, probs, strict=True):
            got = b | {f for f, x in p.items() if x >= th}
            want = set(q.fields)
            tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        otp = ofp = 0
        for want, b, p in zip(older_want, older_base, older_probs, strict=True):
            got = b | {f for f, x in p.items() if x >= th and f in older_known}
            otp, ofp = otp + len(got & want), ofp + len(got - want)
        ok = (otp / (otp + ofp) if otp + ofp else 1.0) >= PRECISION_BAR - 1e-9
        scores[str(th) + ("" if ok else " (constraint missed)")] = round(f1, 4)
        if ok > best[0] or (ok == best[0] and f1 > best[1] + 1e-9):
            best = (ok, f1, th)
    return best[2], scores


PRECISION_BAR = 0.85  # the recall planner's precision on the older plan set (tests/test_plan_understand.py)


def _older_plan_rows() -> list[dict[str, Any]]:
    text = resources.files("usermem.data").joinpath("plan_eval.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def plan_vector_texts() -> tuple[list[learned.Example], list[learned.Example], list[learned.Example]]:
    """(train plan queries, train utterances with labels, dev plan queries): what the vector head learns from
    and is chosen on. The utterances are the user turns of a bank item joined, as `plan_examples` does."""
    train = plan_examples("train")
    n_q = sum(1 for q in bank.load_plan_queries() if q.split == "train")
    return train[:n_q], train[n_q:], plan_examples("dev")


def train_plan_vector_model(out_dir: Path, embedder: QueryEmbedder,
                            lexical: learned.FieldModel | None = None) -> planvec.VectorFieldModel:
    """The planner's vector head (understand/planvec.py): fitted on the train plan queries and utterances,
    embedded with `embedder.query` (the vectors recall computes for a query); C, utterance weight, Platt
    scaling, mix with the lexical model and threshold chosen on dev for rules + models together."""
    import numpy as np

    from usermem.policy.contracts import ContractSet
    from usermem.understand.plan import DeterministicPlanner

    queries, utterances, dev = plan_vector_texts()

    def embed(examples: Sequence[learned.Example]) -> Any:
        return np.stack([np.asarray(embedder.query(e.text), dtype=np.float64) for e in examples])

    x_train = embed([*queries, *utterances])
    x_dev = embed(dev)
    lexical = lexical if lexical is not None else learned.load_model("plan")
    planner = DeterministicPlanner(ContractSet(), model=lexical, vectors=None)
    rules_only = DeterministicPlanner(ContractSet(), model=None, vectors=None)
    enabled = {c.key for c in ContractSet().enabled() if c.kind is not Kind.CONTEXT}
    # Two dev sets: the bank's dev plan queries (F1 is maximised) and the dev rows of the older plan set
    # (usermem/data/plan_eval.jsonl, narrower labels): the planner keeps its precision there (PRECISION_BAR).
    older = [r for r in _older_plan_rows() if r.get("split") == "dev"]
    older_known = {f for r in older for f in (*r["fact_recall"], *r["preference_recall"])}
    older_dev = [learned.Example(str(r["text"]), frozenset((*r["fact_recall"], *r["preference_recall"])))
                 for r in older]
    x_older = embed(older_dev) if older_dev else np.zeros((0, x_dev.shape[1]))
    sets = [(dev, x_dev, [set(rules_only.plan(e.text).fields) for e in dev], None),
            (older_dev, x_older, [set(rules_only.plan(e.text).fields) & older_known for e in older_dev],
             older_known)]

    # The bar: the planner's precision on the older set's dev rows stays at PRECISION_BAR, the bar the lexical
    # model's threshold is held to as well (`_combined_threshold`). Until the eleventh planner round it was the
    # planner-without-vector's own precision when higher; that planner is now held to the bar itself (0.87 on
    # these rows), and matching it cost the head 0.02 of dev F1 (docs/understanding.md).
    bar = PRECISION_BAR

    def evaluate(head: planvec.VectorFieldModel) -> dict[float, tuple[float, bool]]:
        probs = [head.probabilities(x) for x in x_dev], [head.probabilities(x) for x in x_older]
        out: dict[float, tuple[float, bool]] = {}
        for th in planvec.THRESHOLDS:
            prf = []
            for (examples, _, base, known), p_set in zip(sets, probs, strict=True):
                tp = fp = fn = 0
                for e, b, p in zip(examples, base, p_set, strict=True):
                    got = b | {f for f in planner.mixed(e.text, head.fields, p, head.mix, th) if f in enabled
                               and (known is None or f in known)}
                    tp, fp, fn = tp + len(got & e.fields), fp + len(got - e.fields), fn + len(e.fields - got)
                prf.append((2 * tp / (2 * tp + fp + fn) if tp else 0.0, tp / (tp + fp) if tp + fp else 1.0))
            out[th] = (prf[0][0], prf[1][1] >= bar - 1e-9)
        return out

    fields = lexical.fields if lexical is not None else sorted({f for e in queries for f in e.fields})
    model = planvec.fit(embedder.model_id, queries, utterances, x_train, dev, x_dev, fields, evaluate)
    meta = dict(model.meta, bank=bank_digest(*PLAN_BANK_FILES))
    model = planvec.VectorFieldModel(model.model_id, model.fields, model.weights, model.intercepts, model.platt,
                                     model.mix, model.threshold, meta)
    (out_dir / f"{planvec.NAME}.json").write_text(planvec.dump(model), encoding="utf-8")
    return model


def artifact_digests(out_dir: Path) -> dict[str, str]:
    """sha256 of the tagger's binary artifacts (recorded in tagger.json; a test checks the shipped files)."""
    names = (tagger.MODEL_NAME, f"{tagger.FIELDS_NAME}.json")
    return {n: hashlib.sha256((out_dir / n).read_bytes()).hexdigest() for n in names if (out_dir / n).exists()}


def train_all(out_dir: Path | None = None, *, tagger_too: bool = True, refit: bool | None = None,
              embedder: QueryEmbedder | None = None) -> dict[str, Any]:
    """Rebuild every model into `out_dir` (default: the package's data/models). Returns what was chosen.

    The tagger and its field model are first fitted on train (the bank's train split and the train-only
    supplement), and everything that is chosen — C, Platt scalings, thresholds, template similarity — is
    chosen on dev. With `refit` (default `REFIT`) they are then fitted again on train + dev with those
    choices kept (more data, nothing re-chosen); the test split is never read.
    The planner's vector head needs `embedder` (the bundled one: the shipped head reads its vectors);
    without it the head is left as it is.
    """
    out = out_dir or models_dir()
    out.mkdir(parents=True, exist_ok=True)
    items = [i for i in bank.load_training_items() if i.split != "test"]
    report: dict[str, Any] = {}
    if tagger_too:
        import tempfile

        refit = REFIT if refit is None else refit
        with tempfile.TemporaryDirectory() as tmp:
            stage1 = Path(tmp) if refit else out
            meta = train_tagger_model(stage1, items, ("train",))
            (stage1 / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
            (threshold, similarity), more_scores, scores = choose_threshold(items, stage1, ("train",))
            if refit:
                chosen = learned.FieldModel.from_json(json.loads(
                    (stage1 / f"{tagger.FIELDS_NAME}.json").read_text(encoding="utf-8")))
                dev_meta = {k: meta[k] for k in ("train", "dev", "platt")}
                meta = train_tagger_model(out, items, ("train", "dev"), (chosen, meta["platt"]))
                meta["chosen_with"] = dev_meta
        meta["threshold"] = threshold
        meta["template_similarity"] = similarity
        meta["more_dev_f1_by_threshold_and_similarity"] = more_scores
        meta["dev_f1_by_threshold_and_similarity"] = scores
        meta["sha256"] = artifact_digests(out)
        (out / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        if out == models_dir():
            tagger.load_tagger.cache_clear()
            from usermem.understand import extract, templates

            extract.reset_calibration()
            templates.index.cache_clear()
        report["tagger"] = meta
    plan = train_plan_model(out)
    learned.load_model.cache_clear()
    report["plan"] = dict(plan.meta, threshold=plan.threshold, fields=len(plan.fields))
    if embedder is not None:
        head = train_plan_vector_model(out, embedder, plan)
        planvec.load_vector_model.cache_clear()
        report["plan_vectors"] = dict(head.meta, mix=head.mix, threshold=head.threshold, model_id=head.model_id)
    return report


# --- the learned veto (understand/veto.py) ----------------------------------------------------------------------

VETO_THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(6, 20))


class _Recorder:
    """A stand-in veto that vetoes nothing and remembers every value it was asked about (with its context)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def vetoes(self, ctx: Any, threshold: float | None = None) -> bool:
        self.seen.append(ctx)
        return False


def veto_rows(extractor: Any, items: Sequence[bank.Item], filters: bool = True) -> list[dict[str, Any]]:
    """What `extractor` (its veto replaced by a recorder) proposes on `items`: one row per value with its context
    (`veto.Context` fields), whether it matches a gold label (`training.value_match`, each label once, as
    `score_item` counts) and the item's negative kind. A value without a context (a bare correction: the veto never
    sees it) has `text` None. `filters` False: with the clause filters off (`PatternExtractor.filters`)."""
    rec = _Recorder()
    saved = extractor.veto
    extractor.veto = rec
    extractor.filters = filters
    rows: list[dict[str, Any]] = []
    try:
        for item in items:
            rec.seen.clear()
            got = _flatten(extractor.extract(_messages(item)))
            gold = [(lab.field, lab.value) for lab in item.labels]
            for key, value in got:
                hit = next((g for g in gold if g[0] == key and value_match(g[1], value)), None)
                if hit is not None:
                    gold.remove(hit)
                ctx = next((c for c in reversed(rec.seen) if c.key == key and normalise(c.value) == normalise(value)),
                           None)
                row: dict[str, Any] = {"id": item.id, "split": item.split, "negative": item.negative, "filtered": filters,
                                       "match": hit is not None, "key": key, "value": value, "text": None}
                if ctx is not None:
                    row.update(text=ctx.text, value=ctx.value, start=ctx.start, end=ctx.end, method=ctx.method)
                rows.append(row)
    finally:
        extractor.veto = saved
        extractor.filters = True
    return rows


def veto_pool(items: Sequence[bank.Item]) -> list[bank.Item]:
    """The items the veto learns from: the train split of the training items (bank train, the supplement,
    more-train) and the fifth writer's set (`utterances_fifth.jsonl`, when it is not already among them)."""
    pool = [i for i in items if i.split == "train"]
    have = {i.id for i in pool}
    return [*pool, *(i for i in bank.load_fifth_items() if i.id not in have)]


VETO_FOLDS = 2  # CRF fits take minutes: two folds (each fitted on half the train items) for the veto's rows


def _veto_fold(item_id: str, folds: int) -> int:
    return int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8], 16) % folds


def oof_veto_rows(items: Sequence[bank.Item], threshold: float, similarity: float,
                  folds: int = VETO_FOLDS, log: Any = None) -> list[dict[str, Any]]:
    """Out-of-fold candidates on the veto pool: for each fold, the tagger, its field model and the value templates
    are fitted on the training items outside the fold (the shipped recipe, stage 1: train split, dev for the
    calibrations) and the extractor with them proposes values on the fold's items — with the clause filters on
    and off (`filtered` in each row)."""
    import tempfile

    from usermem.policy.contracts import ContractSet
    from usermem.understand.extract import PatternExtractor, extractable
    from usermem.understand.templates import TemplateIndex

    pool = veto_pool(items)
    allowed_fields = extractable(ContractSet())
    rows: list[dict[str, Any]] = []
    for k in range(folds):
        fit_items = [i for i in items if not (i.split == "train" and _veto_fold(i.id, folds) == k)]
        with tempfile.TemporaryDirectory() as tmp:
            meta = train_tagger_model(Path(tmp), fit_items, ("train",))
            (Path(tmp) / "tagger.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
            ex = PatternExtractor(allowed_fields, tagger=_load_tagger(Path(tmp)), tagger_threshold=threshold,
                                  template_similarity=similarity, veto=None)
            ex.templates = TemplateIndex(fit_items, ("train",))
            held = [i for i in pool if _veto_fold(i.id, folds) == k]
            rows += veto_rows(ex, held) + veto_rows(ex, held, filters=False)
        if log is not None:
            log(f"veto fold {k}: {len(held)} items, {len(rows)} rows so far")
    return rows


VETO_BUDGET = 0.005  # the extraction F1 (more-dev, and dev) the veto may cost against no veto


def _veto_label(row: Mapping[str, Any]) -> int | None:
    """1: not the user's (a value on a trap item that matches no label), 0: the user's (matches a label), None: not
    a training example (a wrong value on a plain item is an extraction error, not a trap; a bare correction)."""
    if row.get("text") is None:
        return None
    if row["match"]:
        return 0
    return 1 if row["negative"] is not None else None


def _veto_context(row: Mapping[str, Any]) -> Any:
    from usermem.understand.veto import Context

    return Context(str(row["text"]), str(row["key"]), str(row["value"]), int(row["start"]), int(row["end"]),
                   str(row["method"]))


def veto_scores(model: Any, rows: Sequence[Mapping[str, Any]], gold: Mapping[str, int],
                thresholds: Sequence[float]) -> dict[str, dict[str, dict[str, float]]]:
    """Per threshold and split, the extraction score of the filtered rows once the veto drops what reaches the
    threshold (F1, non-user values stored as `evals.extraction` counts them, other trap values, true values lost) and,
    on the unfiltered rows, how many non-user values the veto catches by itself (`caught` of `traps`)."""
    probs = [model.probability(_veto_context(r)) if r.get("text") is not None else 0.0 for r in rows]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for th in thresholds:
        per: dict[str, dict[str, float]] = {}
        for split in sorted({str(r["split"]) for r in rows}):
            tp = fp = nu = trap = lost = caught = traps = 0
            for r, p in zip(rows, probs, strict=True):
                if r["split"] != split:
                    continue
                vetoed = p >= th
                if not r["filtered"]:
                    if not r["match"] and r["negative"] in bank.NON_USER:
                        traps += 1
                        caught += vetoed
                    continue
                if vetoed:
                    lost += bool(r["match"])
                    continue
                tp += bool(r["match"])
                fp += not r["match"]
                nu += not r["match"] and r["negative"] in bank.NON_USER
                trap += not r["match"] and r["negative"] is not None
            fn = gold[split] - tp
            per[split] = {"f1": round(2 * tp / (2 * tp + fp + fn), 4) if tp else 0.0, "non_user": nu,
                          "trap_values": trap, "true_lost": lost, "caught": caught, "traps": traps}
        out[str(th)] = per
    return out


def choose_veto_threshold(scores: Mapping[str, Mapping[str, Mapping[str, float]]],
                          splits: Sequence[str] | None = None) -> float:
    """The lowest threshold (the most vetoing) whose F1 on each of `splits` (default: all in `scores`, i.e. dev and
    more-dev) is within `VETO_BUDGET` of no veto (the highest threshold in `scores`, which vetoes nothing); that
    highest one when none is."""
    ths = sorted(scores, key=float)
    base = scores[ths[-1]]
    for th in ths:
        if all(scores[th][s]["f1"] >= base[s]["f1"] - VETO_BUDGET for s in (splits or base)):
            return float(th)
    return float(ths[-1])


VETO_C = 0.3  # the better of (0.3, 1.0) by the selection set's aggregate score (scripts/veto_measure.py)
VETO_CHOSEN_ON = (bank.MORE_DEV,)  # the budget binds on more-dev (dev is in the tagger's refit: not held out)


def train_veto_model(out_dir: Path, items: Sequence[bank.Item], model_dir: Path, threshold: float,
                     similarity: float, rows: Sequence[dict[str, Any]] | None = None, log: Any = None) -> Any:
    """Fit the veto (`VETO_C`) on out-of-fold candidates of the veto pool (`oof_veto_rows`, clause filters on and off;
    or `rows` computed by it before) and choose its threshold on more-dev (`VETO_CHOSEN_ON`, `VETO_BUDGET`) with the
    extractor of `model_dir` (the tagger it would run with); writes `veto.json` into `out_dir` (scripts/veto_measure.py
    `--write-model`; nothing loads it by default: no veto is shipped)."""
    from usermem.policy.contracts import ContractSet
    from usermem.understand import veto
    from usermem.understand.extract import PatternExtractor, extractable
    from usermem.understand.templates import TemplateIndex

    if rows is None:
        rows = oof_veto_rows(items, threshold, similarity, log=log)
    train = [(r, y) for r in rows if (y := _veto_label(r)) is not None]
    model = veto.fit([_veto_context(r) for r, _ in train], [y for _, y in train], c=VETO_C)
    chosen_on = [i for i in items if i.split in ("dev", bank.MORE_DEV)]
    ex = PatternExtractor(extractable(ContractSet()), tagger=_load_tagger(model_dir), tagger_threshold=threshold,
                          template_similarity=similarity, veto=None)
    ex.templates = TemplateIndex(items, tuple(json.loads(
        (model_dir / "tagger.json").read_text(encoding="utf-8")).get("fit_splits", ["train"])))
    sel = veto_rows(ex, chosen_on) + veto_rows(ex, chosen_on, filters=False)
    gold = {s: sum(len(i.labels) for i in chosen_on if i.split == s) for s in ("dev", bank.MORE_DEV)}
    scores = veto_scores(model, sel, gold, (*VETO_THRESHOLDS, 1.01))
    th = choose_veto_threshold(scores, VETO_CHOSEN_ON)
    model = model.with_threshold(th, bank=bank_digest(*BANK_FILES, bank.FIFTH_FILE), folds=VETO_FOLDS,
                                 rows=len(rows), chosen_on=list(VETO_CHOSEN_ON), budget=VETO_BUDGET,
                                 tagger=artifact_digests(model_dir), scores=scores)
    (out_dir / f"{veto.NAME}.json").write_text(veto.dump(model), encoding="utf-8")
    return model
