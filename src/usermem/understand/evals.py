"""Evaluations on the labelled data shipped in `usermem/data/`: recall plans, extraction, assembly.

Used by `usermem eval plan|extract|assemble` (full runs, reports under reports/) and by the tests
(small variants). Every number here is computed, nothing is hard-coded; labelled sets carry a
`split` ("dev": used while writing the rules, "test": held out) and results are given per split.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from usermem.model import Kind, Op, Reason
from usermem.understand.text import estimate_tokens, normalise

PLAN_FILE = "plan_eval.jsonl"
DIALOGUE_FILE = "dialogues.json"
TENANT = "eval"


def load_plan_set(path: str | Path | None = None) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8") if path else \
        resources.files("usermem.data").joinpath(PLAN_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_dialogues(path: str | Path | None = None) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8") if path else \
        resources.files("usermem.data").joinpath(DIALOGUE_FILE).read_text(encoding="utf-8")
    data: list[dict[str, Any]] = json.loads(text)
    return data


def _prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
            "tp": tp, "fp": fp, "fn": fn}


def _groups(rows: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"all": list(range(len(rows)))}
    for i, r in enumerate(rows):
        for g in (f"split:{r.get('split', 'dev')}", f"lang:{r.get('lang', '?')}"):
            out.setdefault(g, []).append(i)
    return out


# --- recall plans -----------------------------------------------------------------------------------------

def eval_plan(plan_fn: Callable[[str], Any], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """plan_fn(text) -> RecallPlan. Field-level micro precision/recall, context and priority accuracy."""
    per: list[dict[str, Any]] = []
    latencies: list[float] = []
    for r in rows:
        t = time.perf_counter()
        plan = plan_fn(r["text"])
        latencies.append(time.perf_counter() - t)
        expected = set(r["fact_recall"]) | set(r["preference_recall"])
        got = set(plan.fact_recall) | set(plan.preference_recall)
        per.append({"id": r["id"], "tp": len(expected & got), "fp": len(got - expected), "fn": len(expected - got),
                    "context_ok": plan.context_recall == r["context_recall"],
                    "priority_ok": plan.memory_priority == r["memory_priority"], "mode": plan.mode,
                    "extra": sorted(got - expected), "missing": sorted(expected - got)})
    result: dict[str, Any] = {}
    for name, idx in _groups(rows).items():
        sel = [per[i] for i in idx]
        m = _prf(sum(p["tp"] for p in sel), sum(p["fp"] for p in sel), sum(p["fn"] for p in sel))
        m["n"] = len(sel)
        m["context_accuracy"] = round(sum(p["context_ok"] for p in sel) / len(sel), 4)
        m["priority_accuracy"] = round(sum(p["priority_ok"] for p in sel) / len(sel), 4)
        result[name] = m
    ms = sorted(x * 1000 for x in latencies)
    result["latency_ms"] = {"p50": round(ms[len(ms) // 2], 3), "p95": round(ms[int(0.95 * (len(ms) - 1))], 3)}
    result["modes_used"] = sorted({p["mode"] for p in per})
    result["errors"] = [{"id": p["id"], "extra": p["extra"], "missing": p["missing"]} for p in per
                        if p["extra"] or p["missing"]]
    return result


# --- extraction --------------------------------------------------------------------------------------------

def _matches(expected: Any, got: Any) -> bool:
    a, b = normalise(str(expected)), normalise(str(got))
    return a == b or (bool(a) and bool(b) and (a in b or b in a))


def _contains(value: Any, needle: str) -> bool:
    return normalise(needle) in normalise(json.dumps(value, ensure_ascii=False))


def eval_extract(make_memory: Callable[[], Any], rows: Sequence[dict[str, Any]], *,
                 use_llm: bool = True) -> dict[str, Any]:
    """Precision/recall of extraction, and what the write pipeline did with sensitive and business data.

    The sensitive-data rejection rate counts every candidate carrying an annotated sensitive string —
    those the extractor proposed plus a stress pass that offers each such user message verbatim as a
    memory — and how many the write pipeline rejected; `stored_leaks` scans what was stored.
    """
    from usermem.store.base import LiveQuery

    per: list[dict[str, Any]] = []
    sensitive_total = sensitive_rejected = stored_leaks = business_leaks = 0
    ops: dict[str, int] = {}
    m = make_memory()  # one store; each dialogue is its own user
    for n, d in enumerate(rows):
        try:
            user = f"u{n}"
            candidates = m.understanding.extract(d["messages"], tenant=TENANT, use_llm=use_llm)
            results = m.understanding.ingest(TENANT, user, d["messages"], now=1_790_000_000.0, use_llm=use_llm,
                                             detect_pushback=False)
            for res in results:
                ops[res.op.value] = ops.get(res.op.value, 0) + 1
            expected = list(d["expected"])
            tp = 0
            wrong: list[tuple[str, Any]] = []
            for c in candidates:
                hit = next((e for e in expected if e["key"] == c.key and _matches(e["value"], c.value)), None)
                if hit is not None:
                    expected.remove(hit)
                    tp += 1
                else:
                    wrong.append((c.key, c.value))
            secrets = d.get("sensitive", [])
            for c, res in zip(candidates, results, strict=False):
                if any(_contains(c.value, s) for s in secrets):
                    sensitive_total += 1
                    sensitive_rejected += res.op is Op.REJECT
            for msg in d["messages"]:
                text = msg["content"] if isinstance(msg, dict) else str(msg)
                if (msg.get("role", "user") if isinstance(msg, dict) else "user") != "user":
                    continue
                if any(s in text for s in secrets):  # stress: the whole message offered as a memory
                    res = m.write(TENANT, f"{user}-stress", "preference", "note", text, source="extracted",
                                  now=1_790_000_000.0)
                    sensitive_total += 1
                    sensitive_rejected += res.op is Op.REJECT and res.reason in (
                        Reason.SENSITIVE_VALUE, Reason.FORBIDDEN_KEY)
            stored = [r.value for u in (user, f"{user}-stress")
                      for r in m.store.live(LiveQuery(TENANT, u, 1_790_000_001.0))]
            stored_leaks += sum(1 for v in stored for s in secrets if _contains(v, s))
            business_leaks += sum(1 for v in stored for b in d.get("business", []) if _contains(v, b))
            per.append({"id": d["id"], "split": d.get("split", "dev"), "lang": d.get("lang"), "tp": tp,
                        "fp": len(wrong), "fn": len(expected), "wrong": wrong,
                        "missed": [(e["key"], e["value"]) for e in expected]})
        finally:
            if n == len(rows) - 1:
                m.close()
    result: dict[str, Any] = {}
    for name, idx in _groups(rows).items():
        sel = [per[i] for i in idx]
        result[name] = {**_prf(sum(p["tp"] for p in sel), sum(p["fp"] for p in sel), sum(p["fn"] for p in sel)),
                        "n": len(sel)}
    result["sensitive"] = {"candidates": sensitive_total, "rejected": sensitive_rejected,
                           "rejection_rate": round(sensitive_rejected / sensitive_total, 4) if sensitive_total else 1.0,
                           "stored_leaks": stored_leaks}
    result["business_leaks"] = business_leaks
    result["write_ops"] = ops
    result["errors"] = [{"id": p["id"], "wrong": p["wrong"], "missed": p["missed"]} for p in per
                        if p["wrong"] or p["missed"]]
    return result


# --- assembly ------------------------------------------------------------------------------------------------

def raw_history(messages: Iterable[Any]) -> str:
    lines = []
    for msg in messages:
        if isinstance(msg, dict):
            lines.append(f"{msg.get('role', 'user')}: {msg.get('content', '')}")
        else:
            lines.append(f"user: {msg}")
    return "\n".join(lines)


def eval_assemble(make_memory: Callable[[], Any], rows: Sequence[dict[str, Any]], *, budget_tokens: int = 800,
                  use_llm: bool = True) -> dict[str, Any]:
    """Tokens of the assembled block vs pasting the raw history, per dialogue (estimate_tokens on both).

    Two blocks are measured: the plan-selected block for the dialogue's follow-up message, and the
    full profile (every live memory extracted from the dialogue, as if the plan asked for all).
    """
    from usermem.understand.assemble import render

    per = []
    m = make_memory()  # one store; each dialogue is its own user
    for n, d in enumerate(rows):
        try:
            user = f"u{n}"
            now = 1_790_000_000.0
            m.understanding.ingest(TENANT, user, d["messages"], now=now, use_llm=use_llm, detect_pushback=False)
            grant = getattr(m, "grant", None)
            if callable(grant):  # measure the whole profile, L2/L3 included
                grant(TENANT, user, "L3", "evaluation", 3600.0, now=now)
            follow = d.get("follow_up") or "继续"
            a = m.understanding.assemble(TENANT, user, follow, budget_tokens, now=now + 60, use_llm=use_llm,
                                         mark_used=False)
            live = m.recall_scored(TENANT, user, k=100, now=now + 60)
            facts = {s.memory.key: s.memory.value for s in live if s.memory.kind is not Kind.PREFERENCE}
            prefs = {s.memory.key: s.memory.value for s in live if s.memory.kind is Kind.PREFERENCE}
            raw = estimate_tokens(raw_history(d["messages"]))
            per.append({"id": d["id"], "raw_tokens": raw, "block_tokens": a.tokens,
                        "profile_tokens": estimate_tokens(render(facts, prefs)), "selected": len(a.used_ids)})
        finally:
            if n == len(rows) - 1:
                m.close()
    raw_sum = sum(p["raw_tokens"] for p in per)
    block_sum = sum(p["block_tokens"] for p in per)
    profile_sum = sum(p["profile_tokens"] for p in per)
    changes = [p["block_tokens"] / p["raw_tokens"] - 1 for p in per if p["raw_tokens"]]
    return {
        "n": len(per), "raw_tokens": raw_sum, "block_tokens": block_sum, "profile_tokens": profile_sum,
        "block_vs_raw": round(block_sum / raw_sum - 1, 4) if raw_sum else None,
        "profile_vs_raw": round(profile_sum / raw_sum - 1, 4) if raw_sum else None,
        "median_block_vs_raw": round(statistics.median(changes), 4) if changes else None,
        "seed_claim": -0.62, "per_dialogue": per,
    }


def memorybank_dialogues(path: str | Path) -> list[dict[str, Any]]:
    """MemoryBank (Zhong et al., 2024) users as long dialogues: every day's exchanges, in order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for name, user in data.items():
        messages: list[dict[str, str]] = []
        for day in sorted(user.get("history", {})):
            for turn in user["history"][day]:
                messages += [{"role": "user", "content": str(turn.get("query", ""))},
                             {"role": "assistant", "content": str(turn.get("response", ""))}]
        lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in name + str(messages[:2])) else "en"
        follow = "根据我的喜好推荐点周末活动" if lang == "zh" else "Suggest some weekend activities I'd enjoy"
        out.append({"id": f"memorybank:{name}", "lang": lang, "messages": messages[:500], "expected": [],
                    "follow_up": follow})
    return out


# --- reports ---------------------------------------------------------------------------------------------------

def write_report(out_dir: Path, name: str, payload: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, md = out_dir / f"eval_{name}.json", out_dir / f"eval_{name}.md"
    j.write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    md.write_text(markdown, encoding="utf-8")
    return j, md
