"""Rebuild usermem/data/fusion_model.json from the DEV splits only (docs/relevance.md, "Learned fusion").

    PYTHONPATH=src python scripts/fit_fusion.py ../shared/data [--cache reports/cache]

Dev questions: LoCoMo conversations 0-4 and the MemoryBank dev split. For each, the candidate set recall
scores (top-50 by cosine, top-50 by BM25 with concept words, the planner's fields, inside the query's time
window) is turned into `fusion_features` rows labelled by the evidence, and `fusion_fit.fit` is run.
Test questions are never read into the fit.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import numpy as np

from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.evals import retrieval as R
from usermem.evals.fusion_fit import Group, fit, model_from
from usermem.model import WriteRequest
from usermem.relevance.embed import make_embedder
from usermem.relevance.fusion import FEATURES, fusion_features
from usermem.relevance.hybrid import has_cjk


def groups(convs: list[R.Conversation], cache: Path, n: int = 50) -> list[Group]:
    settings = load_settings(env={})
    emb = R.CachedEmbedder(make_embedder(settings), cache)  # type: ignore[arg-type]
    mem = Memory(settings=settings.with_overrides(store_url="sqlite://"))
    rel = mem.use_relevance("hybrid", background=False, embedder=emb)
    assert rel is not None and rel.index is not None
    out: list[Group] = []
    for conv in convs:
        qs = [q for q in conv.questions if q.split == "dev"]
        if not qs:
            continue
        now = R.asked_at(conv)
        for s in range(0, len(conv.turns), 250):
            mem.write_many("eval", conv.user_id, [WriteRequest(kind="episode", key=t.key, value=t.text, event_at=t.at,
                           source="extracted", ttl_seconds=3650 * 86400.0) for t in conv.turns[s:s + 250]], now=now)
        mem.flush()
        ux = rel.index.load("eval", conv.user_id)
        ats = {t.key: t.at for t in conv.turns}
        at = np.array([ats[k] for k in ux.keys])
        for q in qs:
            toks = R._tokens(q.question)
            exp = rel.concepts.expand(q.question, toks)
            lex = ux.bm25.scores(toks) + (0.5 * ux.bm25.scores(exp) if exp else 0.0)
            dense = ux.matrix @ emb.query(q.question)
            mask = np.ones(len(ux.keys), bool)
            win = rel.time_window(q.question, now)
            if win is not None and ((at >= win.start) & (at < win.end)).any():
                mask = (at >= win.start) & (at < win.end)
            cand = set(np.argsort(-np.where(mask, dense, -9))[:n].tolist())
            pos = np.flatnonzero(np.where(mask, lex, 0) > 0)
            cand |= set(pos[np.argsort(-lex[pos])[:n]].tolist())
            idx = sorted(i for i in cand if mask[i])
            y = np.array([ux.keys[i] in q.evidence for i in idx], float)
            out.append(Group(fusion_features([float(dense[i]) for i in idx], [float(lex[i]) for i in idx],
                                             has_cjk(q.question)), y, "dev"))
    emb.save()
    mem.close()
    return out


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    cache = Path(sys.argv[sys.argv.index("--cache") + 1]) if "--cache" in sys.argv else Path("reports/cache")
    locomo, _ = R.load_locomo(data / "locomo" / "locomo10.json", conversations=R.LOCOMO_DEV_CONVERSATIONS)
    labels = str(resources.files("usermem") / "data" / "memorybank_labels.jsonl")
    gs = groups(locomo, cache) + groups(R.load_memorybank(data / "memorybank", labels), cache)
    w = fit(gs, l2=1e-3, steps=1500)
    model = model_from(w, "fitted by scripts/fit_fusion.py on the dev splits")
    path = Path(str(resources.files("usermem") / "data" / "fusion_model.json"))
    old = json.loads(path.read_text(encoding="utf-8"))
    old.update({"features": list(FEATURES), "weights": list(model.weights)})
    path.write_text(json.dumps(old, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(dict(zip(FEATURES, model.weights, strict=True)))


if __name__ == "__main__":
    main()
