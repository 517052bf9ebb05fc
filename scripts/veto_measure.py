"""Does a learned "is this the user's own, lasting statement?" veto pay? (issue 13, non-user values stored)

    PYTHONPATH=src python scripts/veto_measure.py [--rows /tmp/veto_rows.json] [--select] [--test] [--out DIR]

1. Rows (`training.oof_veto_rows`, `training.veto_rows`): every value the extractor proposes, with its place in the
   message, on (a) the veto pool — the train split of the training items and the fifth writer's set — out of fold:
   the tagger, its field model and the value templates fitted without the fold (`training.VETO_FOLDS`), and (b)
   dev + more-dev with the shipped models. Each item twice: with the clause filters on (what the veto would see at
   run time) and off (the traps the filters catch, so the veto learns from thousands of them, not only from the few
   the filters miss). `--rows` caches them (the out-of-fold CRF fits take minutes).
2. For each C in `VETO_C`, a logistic regression (`understand/veto.py`) on the pool's rows (label 1: a value on a
   trap item that matches no label, 0: a value matching a label); on dev and more-dev per threshold: extraction
   F1 of the filtered pipeline with the veto, true values lost, non-user values stored, and how many of the
   non-user values of the *unfiltered* pipeline the veto catches by itself; the threshold chosen by
   `training.choose_veto_threshold` (most vetoing within `training.VETO_BUDGET` F1 of no veto on both).
   Also a 2-fold cross-validation on the pool (veto fitted on one fold's rows, scored on the other's), reported
   for the fifth writer's items (never used to write filters) and for the rest.
3. The veto's probability for a few plain statements of the user's own ("I live in Toronto").
4. `--select`: the fresh selection set, aggregate only (P / R / F1 / non-user stored; no item is printed), without
   a veto and with each C at its chosen threshold. `--test`: the same on the bank's test split — report once, at
   the end; never choose with it.

Writes `veto_measure.json` and `veto_measure.md` to `--out` (default reports/).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from usermem.evals.extraction import eval_bank_extraction
from usermem.policy.contracts import ContractSet
from usermem.understand import bank, training, veto
from usermem.understand.extract import PatternExtractor, _tagger_meta, extractable
from usermem.understand.text import coerce_messages

VETO_C = (0.3, 1.0)
THRESHOLDS = (*training.VETO_THRESHOLDS, 1.01)  # 1.01 vetoes nothing
# plain statements of the user's own (the README's and the tests' everyday examples): a veto must keep them
PLAIN = (("I live in Toronto", "Toronto", "city"), ("I'm allergic to peanuts", "peanuts", "allergy"),
         ("我住在成都", "成都", "city"), ("I'm vegan", "vegan", "diet"), ("call me Jo", "Jo", "preferred_name"),
         ("I work out of Lisbon", "Lisbon", "work_city"), ("我是一名儿科医生", "儿科医生", "occupation"),
         ("I really enjoy science fiction", "science fiction", "likes"))


def rows(cache: Path | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if cache is not None and cache.exists():
        data = json.loads(cache.read_text(encoding="utf-8"))
        return data["pool"], data["chosen_on"]
    t = time.time()
    items = [i for i in bank.load_training_items() if i.split != "test"]
    meta = _tagger_meta()
    th, sim = float(meta["threshold"]), float(meta["template_similarity"])
    ex = PatternExtractor(extractable(ContractSet()))
    sel = [i for i in items if i.split in ("dev", bank.MORE_DEV)]
    chosen_on = training.veto_rows(ex, sel) + training.veto_rows(ex, sel, filters=False)
    pool = training.oof_veto_rows(items, th, sim, log=lambda s: print(f"{s} ({time.time() - t:.0f} s)", flush=True))
    if cache is not None:
        cache.write_text(json.dumps({"pool": pool, "chosen_on": chosen_on}, ensure_ascii=False), encoding="utf-8")
    return pool, chosen_on


def fit(train_rows: Sequence[dict[str, Any]], c: float) -> veto.VetoModel:
    train = [(r, y) for r in train_rows if (y := training._veto_label(r)) is not None]
    return veto.fit([training._veto_context(r) for r, _ in train], [y for _, y in train], c=c)


def cross_validated(pool: Sequence[dict[str, Any]], c: float) -> dict[str, dict[str, dict[str, float]]]:
    """2-fold CV on the pool: counts summed over the folds, for the fifth writer's items and the rest."""
    items = training.veto_pool([i for i in bank.load_training_items() if i.split == "train"])
    gold = {"fifth": sum(len(i.labels) for i in items if i.id.startswith("ff-")),
            "rest": sum(len(i.labels) for i in items if not i.id.startswith("ff-"))}
    total: dict[str, dict[str, dict[str, float]]] = {}
    for k in range(2):
        m = fit([r for r in pool if training._veto_fold(r["id"], 2) != k], c)
        held = [dict(r, split="fifth" if r["id"].startswith("ff-") else "rest") for r in pool
                if training._veto_fold(r["id"], 2) == k]
        for th, per in training.veto_scores(m, held, gold, THRESHOLDS).items():
            for group, d in per.items():
                acc = total.setdefault(th, {}).setdefault(group, {})
                for key, v in d.items():
                    if key != "f1":
                        acc[key] = acc.get(key, 0) + v
    return total


_BASE: dict[str, dict[str, Any]] = {}


def aggregate(split: str, model: veto.VetoModel | None) -> dict[str, Any]:
    if model is None and split in _BASE:
        return _BASE[split]
    items = bank.load_select_items() if split == bank.SELECT else [i for i in bank.load_items() if i.split == split]
    ex = PatternExtractor(extractable(ContractSet()), veto=model)
    res = eval_bank_extraction(lambda msgs: ex.extract(coerce_messages(msgs)), items, splits=(split,))[split]
    out = {k: res[k] for k in ("precision", "recall", "f1", "non_user_stored", "n")}
    if model is None:
        _BASE[split] = out
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, help="cache of the rows (JSON)")
    ap.add_argument("--select", action="store_true", help="aggregate scores on the selection set")
    ap.add_argument("--test", action="store_true", help="aggregate scores on test (once, at the end)")
    ap.add_argument("--out", type=Path, default=Path("reports"))
    ap.add_argument("--write-model", type=Path, help="also write veto.json (training.train_veto_model) to this dir")
    args = ap.parse_args()
    pool, chosen_on = rows(args.rows)
    items = [i for i in bank.load_training_items() if i.split in ("dev", bank.MORE_DEV)]
    gold = {s: sum(len(i.labels) for i in items if i.split == s) for s in ("dev", bank.MORE_DEV)}
    result: dict[str, Any] = {"pool_rows": len(pool), "training_examples": {}, "variants": {}}
    lines = ["# A learned veto on extracted values (scripts/veto_measure.py)", "",
             "`scripts/veto_measure.py` (see its docstring and docs/understanding.md). Counts per threshold; "
             "`lost`: true values the veto drops; `non-user`: values stored from question / hypothetical / "
             "third-party / quote / joke / others'-plan items that match no label (filters on, as shipped); "
             "`caught`: of the non-user values the pipeline proposes with the filters **off**, how many the veto "
             "drops by itself. 1.01 = no veto.", ""]
    for c in VETO_C:
        m = fit(pool, c)
        scores = training.veto_scores(m, chosen_on, gold, THRESHOLDS)
        chosen = training.choose_veto_threshold(scores)
        more_only = training.choose_veto_threshold(scores, (bank.MORE_DEV,))
        cv = cross_validated(pool, c)
        variant: dict[str, Any] = {"features": len(m.vocab), "examples": m.meta, "chosen_threshold": chosen,
                                   "chosen_on_more_dev_only": more_only, "dev_more_dev": scores, "cv_pool": cv}
        lines += [f"## C = {c} ({m.meta['n']} examples, {m.meta['positives']} to veto; {len(m.vocab)} features); "
                  f"threshold chosen within the budget on dev and more-dev: {chosen}; on more-dev alone: {more_only}",
                  "",
                  "| threshold | dev F1 | lost | caught | more-dev F1 | lost | non-user | caught | CV fifth: lost | "
                  "non-user | caught | CV rest: lost | non-user | caught |", "|" + "---|" * 14]
        for th in map(str, THRESHOLDS):
            d, md = scores[th]["dev"], scores[th][bank.MORE_DEV]
            f, r = cv[th]["fifth"], cv[th]["rest"]
            lines.append(f"| {th} | {d['f1']:.4f} | {d['true_lost']} | {d['caught']}/{d['traps']} | {md['f1']:.4f} | "
                         f"{md['true_lost']} | {md['non_user']} | {md['caught']}/{md['traps']} | {f['true_lost']} | "
                         f"{f['non_user']} | {f['caught']}/{f['traps']} | {r['true_lost']} | {r['non_user']} | "
                         f"{r['caught']}/{r['traps']} |")
        lines.append("")
        probs = [(t, max(m.probability(veto.Context(t, k, v, t.find(v), t.find(v) + len(v), how))
                         for how in ("pattern", "model"))) for t, v, k in PLAIN]
        variant["plain_statements"] = {t: round(p, 3) for t, p in probs}
        lines += ["Plain statements (highest veto probability over the two proposers; vetoed at the threshold "
                  f"{more_only} when ≥ it): " + "; ".join(f"\"{t}\" {p:.2f}" for t, p in probs), ""]
        for split, flag in ((bank.SELECT, args.select), ("test", args.test)):
            if flag:
                variant[split] = {"no veto": aggregate(split, None)}
                for th in sorted({chosen, more_only}):
                    variant[split][str(th)] = aggregate(split, m.with_threshold(th)) if th <= 1 else \
                        variant[split]["no veto"]
                for name, a in variant[split].items():
                    lines.append(f"- {split}, {name}: P {a['precision']:.4f} R {a['recall']:.4f} F1 {a['f1']:.4f}, "
                                 f"non-user stored {a['non_user_stored']} (n {a['n']})")
                lines.append("")
        result["variants"][str(c)] = variant
        print("\n".join(lines[-25:]), flush=True)
    if args.write_model is not None:
        meta = _tagger_meta()
        args.write_model.mkdir(parents=True, exist_ok=True)
        training.train_veto_model(args.write_model, [i for i in bank.load_training_items() if i.split != "test"],
                                  training.models_dir(), float(meta["threshold"]), float(meta["template_similarity"]),
                                  rows=pool)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "veto_measure.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n",
                                                encoding="utf-8")
    (args.out / "veto_measure.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
