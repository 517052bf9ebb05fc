"""Does the fifth writer's train-only file (`utterances_fifth.jsonl`) help the learned extractors? (issue 13)

    PYTHONPATH=src python scripts/ab_fifth_supplement.py [--variant none|negatives|all ...] [--out DIR] [--stage1]

For each variant the whole `usermem train` procedure of the span tagger is run in a scratch directory with the
fifth file's items added to the training items — not at all (`none`), its trap items only (`negatives`: the items
with a negative kind and what they label), or all of it (`all`): the stage-1 fit (train + supplement + more-train),
C and Platt scalings on dev, tagger threshold and template similarity on more-dev (`training.choose_threshold`), the
refit on train + dev with those choices kept, value templates from the same items. Then the refitted pipeline is
scored on more-dev and dev (P/R/F1 and non-user values among the candidates) and on the fresh selection set
`select` as an aggregate only (its items and errors are never printed). `test` is never read.

`--stage1` (what the bank README's 2026-12-01 evening re-measurement ran, the full procedure taking over an hour per
variant on a shared 2-core machine): stop after the stage-1 fit (dev held out) and score it at the shipped tagger
threshold and template similarity (`--threshold`, `--similarity`; not re-chosen per variant), templates from train.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from usermem.evals.extraction import eval_bank_extraction
from usermem.policy.contracts import ContractSet
from usermem.understand import bank, learned, tagger, training
from usermem.understand.extract import PatternExtractor, extractable
from usermem.understand.templates import TemplateIndex
from usermem.understand.text import coerce_messages

VARIANTS = ("none", "negatives", "all")


def variant_items(which: str) -> list[bank.Item]:
    items = [i for i in bank.load_training_items() if i.split != "test"]
    fifth = [i for i in bank.load_fifth_items() if which == "all" or (which == "negatives" and i.negative)]
    assert all(i.split == "train" for i in fifth)
    return [*items, *fifth]


def fit(items: list[bank.Item], out: Path) -> dict[str, Any]:
    """`training.train_all`'s tagger part on `items`, into `out` (stage 1 in out/stage1)."""
    stage1 = out / "stage1"
    stage1.mkdir(parents=True, exist_ok=True)
    meta = training.train_tagger_model(stage1, items, ("train",))
    (stage1 / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    (th, sim), more_scores, scores = training.choose_threshold(items, stage1, ("train",))
    chosen = learned.FieldModel.from_json(json.loads(
        (stage1 / f"{tagger.FIELDS_NAME}.json").read_text(encoding="utf-8")))
    meta = training.train_tagger_model(out, items, ("train", "dev"), (chosen, meta["platt"]))
    meta.update(threshold=th, template_similarity=sim, more_dev_f1_by_threshold_and_similarity=more_scores,
                dev_f1_by_threshold_and_similarity=scores)
    (out / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def fit_stage1(items: list[bank.Item], out: Path, threshold: float, similarity: float) -> dict[str, Any]:
    """The stage-1 fit alone (train + supplement + more-train; C and Platt scalings on dev), into `out`."""
    meta = training.train_tagger_model(out, items, ("train",))
    (out / "tagger.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    meta.update(threshold=threshold, template_similarity=similarity)
    return meta


def score(items: list[bank.Item], out: Path, meta: dict[str, Any],
          fit_splits: tuple[str, ...] = ("train", "dev")) -> dict[str, Any]:
    ex = PatternExtractor(extractable(ContractSet()), tagger=training._load_tagger(out),
                          tagger_threshold=float(meta["threshold"]),
                          template_similarity=float(meta["template_similarity"]))
    ex.templates = TemplateIndex(items, fit_splits)
    rows = [i for i in items if i.split in ("dev", bank.MORE_DEV)] + bank.load_select_items()
    res = eval_bank_extraction(lambda msgs: ex.extract(coerce_messages(msgs)), rows,
                               splits=("dev", bank.MORE_DEV, bank.SELECT))
    return {s: {k: r[k] for k in ("precision", "recall", "f1", "non_user_stored", "latency_ms")}
            for s, r in res.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", choices=VARIANTS)
    ap.add_argument("--out", type=Path, help="keep the fitted models here (one sub-directory per variant)")
    ap.add_argument("--stage1", action="store_true", help="stop after the stage-1 fit and score it (see above)")
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--similarity", type=float, default=0.8)
    args = ap.parse_args()
    for which in args.variant or VARIANTS:
        t = time.perf_counter()
        items = variant_items(which)
        with tempfile.TemporaryDirectory() as tmp:
            out = (args.out / which) if args.out else Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            if args.stage1:
                meta = fit_stage1(items, out, args.threshold, args.similarity)
                result = score(items, out, meta, ("train",))
            else:
                meta = fit(items, out)
                result = score(items, out, meta)
        print(json.dumps({"variant": which, "train_items": len([i for i in items if i.split == "train"]),
                          "stage1_only": args.stage1, "threshold": meta["threshold"],
                          "template_similarity": meta["template_similarity"],
                          "scores": result, "seconds": round(time.perf_counter() - t)}), flush=True)


if __name__ == "__main__":
    main()
