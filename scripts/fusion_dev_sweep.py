"""Dev-only sweep of `hybrid_agreement_boost` and `hybrid_dense_floor` through the production path
(docs/relevance.md, "Corroboration" and "Dense floor").

    PYTHONPATH=src python scripts/fusion_dev_sweep.py ../shared/data [--cache DIR] [--cache-mb DIR] [--cache-sem DIR]

Asks only DEV questions: LoCoMo conversations 0-4 and the MemoryBank dev split (test questions are dropped
before anything runs). The semantic check writes all 24 targets as memories and asks every question, but only
its dev counts are read and printed here (the 12 original dev questions and the 36 added ones). Prints R@10 per
LoCoMo category, MemoryBank R@5 / MRR and semantic dev top-1 (1,000 and 100 memories) for each setting.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from usermem.config import load_settings
from usermem.evals import retrieval as R


def _arg(name: str, default: str) -> Path:
    return Path(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else Path(default)


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "../shared/data")
    cache, cache_mb, cache_sem = (_arg("--cache", "reports/cache"), _arg("--cache-mb", "reports/cache"),
                                  _arg("--cache-sem", "reports/cache"))
    locomo, _ = R.load_locomo(data / "locomo" / "locomo10.json", conversations=R.LOCOMO_DEV_CONVERSATIONS)
    labels = str(resources.files("usermem") / "data" / "memorybank_labels.jsonl")
    bank = R.load_memorybank(data / "memorybank", labels)
    for conv in bank:
        conv.questions = [q for q in conv.questions if q.split == "dev"]
    bank = [c for c in bank if c.questions]
    assert all(q.split == "dev" for c in [*locomo, *bank] for q in c.questions)
    grid = [(1.0, 0.0), (1.5, 0.0), (1.0, 0.5), (1.0, 0.75), (1.0, 0.9), (1.5, 0.75)]
    for boost, floor in grid:
        settings = load_settings(env={}).with_overrides(hybrid_agreement_boost=boost, hybrid_dense_floor=floor)
        lo = R.run_retrieval("locomo", locomo, settings=settings, cache_dir=cache).splits["dev"]
        mb = R.run_retrieval("memorybank", bank, settings=settings, cache_dir=cache_mb).splits["dev"]
        n = sum(c["hybrid"]["n"] for c in mb.values())
        r5 = sum(c["hybrid"]["recall@5"] * c["hybrid"]["n"] for c in mb.values()) / n
        mrr = sum(c["hybrid"]["mrr@10"] * c["hybrid"]["n"] for c in mb.values()) / n
        sem = [R.run_semantic_top1(m, settings=settings, cache_dir=cache_sem, added=True) for m in (1000, 100)]
        hits = [f"{s.hits('hybrid', 'dev', added=False)}/12 + {s.hits('hybrid', 'dev', added=True)}/36" for s in sem]
        cats = " ".join(f"{cat} {cells['hybrid']['recall@10']:.3f}" for cat, cells in sorted(lo.items()))
        print(f"boost {boost}, dense floor {floor}: LoCoMo dev R@10 {cats} | MemoryBank dev R@5 {r5:.3f} "
              f"MRR {mrr:.3f} | semantic dev top-1 {hits[0]} (1,000), {hits[1]} (100)")

if __name__ == "__main__":
    main()
