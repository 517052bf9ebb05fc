"""Evaluations of understanding (moved from usermem.understand.evals): recall plans, extraction, assembly.

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
from usermem.understand.bank import NON_USER  # re-exported: the trap kinds counted as non-user
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
    # A labelled set knows only the fields it labels: a field no row mentions (a contract added after the
    # set was written) is neither right nor wrong here. The bank's plan queries cover every bank field.
    known = {f for r in rows for f in (*r["fact_recall"], *r["preference_recall"])}
    for r in rows:
        t = time.perf_counter()
        plan = plan_fn(r["text"])
        latencies.append(time.perf_counter() - t)
        expected = set(r["fact_recall"]) | set(r["preference_recall"])
        got = (set(plan.fact_recall) | set(plan.preference_recall)) & known
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


# dialogues.json predates the bank's canonical names for reply length
_LEGACY = {"short": "concise", "long": "detailed"}


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
                # the labels of dialogues.json give enumerable fields in canonical form ("word", "concise"):
                # the user's words or the canonical form beside them may match
                hit = next((e for e in expected if e["key"] == c.key and (
                    _matches(e["value"], c.value) or (c.canonical is not None and _matches(e["value"], c.canonical))
                    or (c.canonical is not None and _matches(e["value"], _LEGACY.get(str(c.canonical), c.canonical))))),
                           None)
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


# --- the utterance bank (issue 13): extraction and recall plans, dev and test reported apart ----------------



def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ms = sorted(values)
    return round(ms[min(len(ms) - 1, int(q * (len(ms) - 1) + 0.5))] * 1000, 3)


def _split_of(row: Any) -> str:
    return str(getattr(row, "split", None) or (row.get("split") if isinstance(row, dict) else None) or "?")


def eval_bank_extraction(extract_fn: Callable[[list[dict[str, str]]], Sequence[Any]], items: Sequence[Any], *,
                         splits: Sequence[str] = ("dev", "test"),
                         sensitivity: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Precision/recall/F1 per split (overall and per field) of `extract_fn(messages) -> candidates`.

    A candidate counts when its field equals a label's and its value matches the label's words
    (`training.value_match`: equal after normalisation, or one contains the other and is at least half as
    long); list values count item by item. Also per split: `non_user_stored` — candidates on question,
    hypothetical, third-party, quote, joke or others'-plan items that match no label (must be 0), and
    the latency of one call per item (p50/p95 ms). The train split is left out unless asked for.
    """
    from usermem.understand.training import score_item

    per_split: dict[str, dict[str, Any]] = {}
    for split in splits:
        rows = [i for i in items if i.split == split]
        tp = fp = fn = 0
        fields: dict[str, list[int]] = {}
        non_user = 0
        latencies: list[float] = []
        errors: list[dict[str, Any]] = []
        canon_ok = canon_n = 0
        for item in rows:
            t = time.perf_counter()
            cands = list(extract_fn(item.messages()))
            latencies.append(time.perf_counter() - t)
            got: list[tuple[str, str]] = []
            canon: dict[tuple[str, str], Any] = {}
            for c in cands:
                values = c.value if isinstance(c.value, list) else [c.value]
                canons = c.canonical if isinstance(c.canonical, list) else [c.canonical] * len(values)
                for v, cv in zip(values, canons, strict=False):
                    got.append((c.key, str(v)))
                    canon[(c.key, str(v))] = cv
            a, b, m = score_item(item, got)
            tp, fp, fn = tp + a, fp + b, fn + m
            if item.negative in NON_USER:
                non_user += b
            gold = [(lab.field, lab.value) for lab in item.labels]
            for key in {k for k, _ in gold} | {k for k, _ in got}:
                ga = [g for g in gold if g[0] == key]
                gg = [g for g in got if g[0] == key]
                fa = fields.setdefault(key, [0, 0, 0])
                sub = type(item)(item.id, item.lang, item.split, item.turns,
                                 tuple(lab for lab in item.labels if lab.field == key), item.negative)
                x, y, z = score_item(sub, gg)
                fa[0], fa[1], fa[2] = fa[0] + x, fa[1] + y, fa[2] + z
                del ga
            for lab in item.labels:
                if lab.canonical is None:
                    continue
                hit = next((v for k, v in got if k == lab.field and _matches_label(lab.value, v)), None)
                if hit is not None:
                    canon_n += 1
                    canon_ok += str(canon.get((lab.field, hit)) or "").lower() == str(lab.canonical).lower()
            if a != len(got) or m:
                errors.append({"id": item.id, "negative": item.negative,
                               "text": " || ".join(c for r, c in item.turns if r == "user"),
                               "got": got, "expected": gold})
        res: dict[str, Any] = dict(_prf(tp, fp, fn))
        res["n"] = len(rows)
        res["non_user_stored"] = non_user
        res["canonical_accuracy"] = round(canon_ok / canon_n, 4) if canon_n else None
        res["latency_ms"] = {"p50": _percentile(latencies, 0.5), "p95": _percentile(latencies, 0.95)}
        res["fields"] = {k: {**_prf(*v), "n": v[0] + v[2]} for k, v in sorted(fields.items())}
        res["errors"] = errors
        per_split[split] = res
    return per_split


def _matches_label(expected: str, got: str) -> bool:
    from usermem.understand.training import value_match

    return value_match(expected, got)


def eval_bank_storage(make_memory: Callable[[], Any], items: Sequence[Any], *,
                      splits: Sequence[str] = ("dev", "test")) -> dict[str, Any]:
    """Ingest every item through the write pipeline (no LLM) and count what must never be stored:
    values carrying PII their field does not allow (`sensitive_stored`), and values stored from
    question / hypothetical / third-party / quote / joke items that match no label (`non_user_stored`)."""
    from usermem.policy.pii import detect
    from usermem.store.base import LiveQuery

    out: dict[str, Any] = {}
    m = make_memory()
    try:
        for split in splits:
            sensitive = non_user = stored = 0
            for n, item in enumerate(i for i in items if i.split == split):
                user = f"{split}{n}"
                m.understanding.ingest(TENANT, user, item.messages(), now=1_790_000_000.0, use_llm=False,
                                       detect_pushback=False)
                for rec in m.store.live(LiveQuery(TENANT, user, 1_790_000_001.0)):
                    stored += 1
                    contract = m.contracts.get(rec.key)
                    ok = contract.allowed_pii if contract is not None else frozenset()
                    text = json.dumps(rec.value, ensure_ascii=False)
                    if any(f.kind not in ok for f in detect(text)):
                        sensitive += 1
                    values = rec.value if isinstance(rec.value, list) else [rec.value]
                    if item.negative in NON_USER:
                        labels = [lab.value for lab in item.labels if lab.field == rec.key]
                        non_user += sum(1 for v in values if not any(_matches_label(lab, str(v)) for lab in labels))
            out[split] = {"stored": stored, "sensitive_stored": sensitive, "non_user_stored": non_user}
    finally:
        m.close()
    return out


def eval_bank_plan(plan_fn: Callable[[str], Any], queries: Sequence[Any], *,
                   splits: Sequence[str] = ("dev", "test")) -> dict[str, Any]:
    """Field-level precision/recall/F1 of `plan_fn(text) -> RecallPlan` on the bank's plan queries, per split
    (overall and per field), with context/priority accuracy where the query says them."""
    out: dict[str, Any] = {}
    for split in splits:
        rows = [q for q in queries if q.split == split]
        tp = fp = fn = 0
        fields: dict[str, list[int]] = {}
        ctx_ok = ctx_n = pri_ok = pri_n = 0
        latencies: list[float] = []
        errors = []
        for q in rows:
            t = time.perf_counter()
            plan = plan_fn(q.text)
            latencies.append(time.perf_counter() - t)
            want, got = set(q.fields), set(plan.fact_recall) | set(plan.preference_recall)
            tp, fp, fn = tp + len(want & got), fp + len(got - want), fn + len(want - got)
            for f in want | got:
                fa = fields.setdefault(f, [0, 0, 0])
                fa[0] += f in want and f in got
                fa[1] += f in got and f not in want
                fa[2] += f in want and f not in got
            if "context_recall" in q.extra:
                ctx_n += 1
                ctx_ok += plan.context_recall == q.extra["context_recall"]
            if "memory_priority" in q.extra:
                pri_n += 1
                pri_ok += plan.memory_priority == q.extra["memory_priority"]
            if want != got:
                errors.append({"id": q.id, "text": q.text, "extra": sorted(got - want), "missing": sorted(want - got)})
        res = dict[str, Any](_prf(tp, fp, fn))
        res.update(n=len(rows), context_accuracy=round(ctx_ok / ctx_n, 4) if ctx_n else None,
                   priority_accuracy=round(pri_ok / pri_n, 4) if pri_n else None,
                   latency_ms={"p50": _percentile(latencies, 0.5), "p95": _percentile(latencies, 0.95)},
                   fields={k: {**_prf(*v), "n": v[0] + v[2]} for k, v in sorted(fields.items())}, errors=errors)
        out[split] = res
    return out


def run_bank_extraction(make_memory: Callable[[], Any], path: str | Path | None = None, *,
                        splits: Sequence[str] | None = None) -> dict[str, Any]:
    """`usermem eval extraction`: the no-LLM extractor on the bank's dev and test splits — and, with the shipped
    bank, on more-dev (the second writer's held-out half, `bank.MORE_DEV`) — plus the storage check (what the
    write pipeline kept). Nothing here chooses anything: the models and thresholds were fixed by
    `usermem train` before."""
    from usermem.understand import bank

    items = bank.load_items(path=path)
    if path is None:
        items += [i for i in bank.load_more_items() if i.split == bank.MORE_DEV]
        items += bank.load_select_items()
        items += bank.load_seventh_items()
    if splits is None:
        splits = ("dev", "test") if path is not None else ("dev", "test", bank.MORE_DEV, bank.SELECT, bank.SEVENTH)
    m = make_memory()
    try:
        scores = eval_bank_extraction(lambda msgs: m.understanding.extract(msgs, tenant=TENANT, use_llm=False),
                                      items, splits=splits)
    finally:
        m.close()
    storage = eval_bank_storage(make_memory, items, splits=splits)
    for split in splits:
        scores[split]["storage"] = storage[split]
    return {"data": str(path or "usermem/data/bank/utterances.jsonl"), "splits": scores}


def _how_fitted() -> str:
    """How the shipped tagger was fitted and chosen (from its metadata), for the report's text."""
    from usermem.understand.tagger import model_path

    path = model_path().with_suffix(".json")
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    splits = meta.get("fit_splits", ["train"])
    chosen = f"{meta.get('threshold')}/{meta.get('template_similarity')}"
    held_out = (meta.get("dev_f1_by_threshold_and_similarity") or {}).get(chosen)
    from usermem.understand.bank import SUPPLEMENT

    used = {"all": "and the train-only supplement `utterances_extra.jsonl` + `utterances_fourth.jsonl`",
            "negatives": "and the trap items (questions, hypotheticals, third parties, ...) of the train-only "
                         "supplement `utterances_extra.jsonl` + `utterances_fourth.jsonl`"}.get(SUPPLEMENT, "only")
    text = ("The rules were written from the errors of the train and dev splits and, since the fourth round "
            "(2026-12-01), of more-train and more-dev too; the learned models (span tagger, its field "
            f"model, value templates) were fitted on `train` (the bank's train split {used}, and more-train: the "
            "half of a second writer's set `utterances_more.jsonl`), C and calibrations were chosen on `dev`, the "
            "tagger threshold and template similarity on `more-dev` (the other half, written by someone who never "
            "saw the rules or their errors, never fitted on; `usermem train`); `test` was never used to choose "
            "anything. `more-dev` is not held out: values were chosen on it and rules written from its errors, so "
            "it overstates like dev. `select` (`utterances_select.jsonl`, a fresh set by a further writer who never saw the "
            "rules, the other items or any errors) is only ever scored: it chose between model variants by its "
            "aggregate F1 and nobody read its individual errors, so it is the least biased number after `test`. "
            "`seventh` (`utterances_seventh.jsonl`, a seventh writer who saw no rule, item or output) has chosen nothing "
            "and nobody has read its items or errors: a held-out check of whether rules written from other sets "
            "carry to an unmined writer; the sixth writer's set (`utterances_sixth.jsonl`) was read while writing the "
            "tenth round's rules and is not reported.")
    if "dev" in splits:
        text += (" After choosing, the shipped models were **refitted on train + dev** with those choices kept, so "
                 "the `dev` row below is not held out (the models saw it); the held-out dev F1 of the same "
                 f"pipeline before the refit was {held_out} (tagger.json). Read `test` as the honest number.")
    more_held = (meta.get("more_dev_f1_by_threshold_and_similarity") or {}).get(chosen)
    if more_held is not None:
        text += f" more-dev F1 of the chosen setting before the refit: {more_held}."
    return text


def bank_extraction_markdown(result: dict[str, Any]) -> str:
    lines = ["# Extraction on the utterance bank (no LLM)", "", _how_fitted(), "",
             "A value counts when the field is right and the words match the "
             "label (equal, or one contains the other and is at least half as long).", "",
             "| split | n | precision | recall | F1 | non-user stored | sensitive stored | canonical acc. | p95 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for split, r in result["splits"].items():
        st = r.get("storage", {})
        lines.append(f"| {split} | {r['n']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | "
                     f"{r['non_user_stored']} / {st.get('non_user_stored', '-')} | {st.get('sensitive_stored', '-')} | "
                     f"{r['canonical_accuracy']} | {r['latency_ms']['p95']} |")
    lines += ["", "non-user stored: candidates / stored memories from question, hypothetical, third-party, quote, "
              "joke and others'-plan items that match no label.", "", "## Per field (test)", "",
              "| field | n | precision | recall | F1 |", "|---|---|---|---|---|"]
    test = result["splits"].get("test") or next(iter(result["splits"].values()))
    for field, r in test["fields"].items():
        lines.append(f"| {field} | {r['n']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} |")
    return "\n".join(lines) + "\n"


def run_bank_plan(plan_fn: Callable[[str], Any], path: str | Path | None = None, *,
                  splits: Sequence[str] = ("dev", "test")) -> dict[str, Any]:
    from usermem.understand import bank

    return {"data": str(path or "usermem/data/bank/plan_queries.jsonl"),
            "splits": eval_bank_plan(plan_fn, bank.load_plan_queries(path=path), splits=splits)}


def bank_plan_markdown(result: dict[str, Any]) -> str:
    lines = ["# Recall plans on the bank's plan queries (deterministic: cues + learned models)", "",
             "The lexical model and the vector head (over the message's query vector, the one recall computes "
             "for semantic search) were fitted on `train`; their regularisation, calibration, mix and thresholds "
             "were chosen on `dev` (`usermem train`); `test` was never used to choose.", "",
             "| embedder | split | n | precision | recall | F1 | p95 ms |", "|---|---|---|---|---|---|---|"]
    for res in (result, result.get("without_vector")):
        if not res:
            continue
        for split, r in res["splits"].items():
            lines.append(f"| {res.get('embedder', '-')} | {split} | {r['n']} | {r['precision']:.3f} | "
                         f"{r['recall']:.3f} | {r['f1']:.3f} | {r['latency_ms']['p95']} |")
    lines += ["", "With an embedder the planner reads the message's query vector, as it does inside "
              "`recall(query=...)` (where the vector is the one recall computes for semantic search: no second "
              "embedding); here the p95 includes embedding the message once. Without one (`embedder = none`, "
              "and `Memory.plan`, which embeds nothing) the planner uses the rules and the lexical model only."]
    return "\n".join(lines) + "\n"
