"""Where does no-LLM extraction lose recall? (issue 13) A breakdown of the missed gold (field, value) pairs.

    PYTHONPATH=src python scripts/extraction_misses.py [--split more-dev] [--split dev] [--oracle] [-v]

For every label the shipped `PatternExtractor` misses on the chosen splits (dev, more-dev: never `select`, whose
items nobody reads, nor `test`), one category:
- "nothing found": no tagger span and no candidate with the label's field or value;
- "field right, wrong value/boundary": a span or candidate of the field, but with other words;
- "value found, wrong field": the words were proposed under another field (by the tagger or finally);
- "span right, below threshold": the tagger had it, its calibrated probability under the threshold;
- "span right, filtered": the tagger had it above the threshold, and a filter (`filters.reasons`), `_plausible`,
  a rule hit on the same words or a later step dropped it (`--why` says which).
Each is split by whether the stage-1 field model (`tagger_fields.json`) gave the label's field a probability at or
above `tagger.FIELD_FEATURE_THRESHOLD`, i.e. whether the CRF saw its `F=` feature.

`--oracle`: extraction precision/recall when the tagger's `F=` features come from the gold fields of each turn
(perfect stage 1 at inference; the shipped CRF, trained on out-of-fold predictions) — an upper bound of what a
better message-level field detector can give without retraining the CRF.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Sequence
from typing import Any

from usermem.policy.contracts import ContractSet
from usermem.understand import bank
from usermem.understand import extract as X
from usermem.understand import tagger as tg
from usermem.understand.text import Message
from usermem.understand.training import _flatten, _messages, score_item, value_match

_TRIM = " ,，。.!！~、;；:：\"'“”‘’()（）"


def _missed(item: bank.Item, got: Sequence[tuple[str, str]]) -> list[bank.Label]:
    left = list(got)
    out = []
    for lab in item.labels:
        hit = next((g for g in left if g[0] == lab.field and value_match(lab.value, g[1])), None)
        if hit is None:
            out.append(lab)
        else:
            left.remove(hit)
    return out


def _why_filtered(ex: X.PatternExtractor, lab: bank.Label, content: str) -> str:
    """Re-run the message with `allowed` and `_plausible` recorded: which of them dropped the label's span."""
    log: list[tuple[str, str, tuple[str, ...], bool]] = []
    allowed, plausible = X.allowed, X._plausible

    def rec_allowed(key: str, why: Any) -> bool:
        r = allowed(key, why)
        log.append(("allowed", key, tuple(sorted(why)), r))
        return r

    def rec_plausible(key: str, value: str) -> bool:
        r = plausible(key, value)
        log.append(("plausible", key, (value,), r))
        return r

    X.allowed, X._plausible = rec_allowed, rec_plausible  # type: ignore[assignment]
    try:
        cands = ex._message(Message("user", content, lab.turn))
    finally:
        X.allowed, X._plausible = allowed, plausible  # type: ignore[assignment]
    if any(c.key == lab.field and value_match(lab.value, str(c.value)) for c in cands):
        return "kept in the message, dropped across turns"
    denied = sorted({r for kind, k, why, ok in log if kind == "allowed" and k == lab.field and not ok for r in why})
    if denied:
        return "filter: " + ",".join(denied)
    if any(kind == "plausible" and k == lab.field and not ok for kind, k, _, ok in log):
        return "implausible"
    return "a rule hit on the same words / a later step"


def breakdown(items: Sequence[bank.Item], split: str, verbose: bool) -> None:
    ex = X.PatternExtractor(X.extractable(ContractSet()))
    t = ex.tagger
    assert t is not None and t.field_model is not None
    cats: collections.Counter[tuple[str, str]] = collections.Counter()
    why: collections.Counter[str] = collections.Counter()
    fields: collections.Counter[str] = collections.Counter()
    examples: dict[tuple[str, str], list[Any]] = collections.defaultdict(list)
    tp = fp = fn = 0
    for item in (i for i in items if i.split == split):
        got = _flatten(ex.extract(_messages(item)))
        a, b, c = score_item(item, got)
        tp, fp, fn = tp + a, fp + b, fn + c
        for lab in _missed(item, got):
            fields[lab.field] += 1
            content = item.turns[lab.turn][1]
            masked = X.mask_quotes(content)
            p = t.field_model.probabilities(masked).get(lab.field, 0.0)
            spans = t.spans(masked)
            by_value = [s for s in spans if value_match(lab.value, s.text.strip(_TRIM))]
            right = [s for s in by_value if s.field == lab.field]
            if right:
                calibrated = max(X._calibrate(s.probability, t.platt) for s in right)
                if calibrated < ex.tagger_threshold:
                    cat = "span right, below threshold"
                else:
                    cat = "span right, filtered"
                    why[_why_filtered(ex, lab, content)] += 1
            elif any(k != lab.field and value_match(lab.value, v) for k, v in got) or by_value:
                cat = "value found, wrong field"
            elif any(s.field == lab.field for s in spans) or any(k == lab.field for k, _ in got):
                cat = "field right, wrong value/boundary"
            else:
                cat = "nothing found"
            key = (cat, "F on" if p >= tg.FIELD_FEATURE_THRESHOLD else "F off")
            cats[key] += 1
            examples[key].append((item.id, lab.field, lab.value, round(p, 2), content[:100],
                                  [f"{s.field}:{s.text}" for s in spans][:4]))
    print(f"== {split}: tp {tp} fp {fp} fn {fn}")
    on = sum(v for k, v in cats.items() if k[1] == "F on")
    print(f"   missed labels whose field had its F= feature (p >= {tg.FIELD_FEATURE_THRESHOLD}): {on}/{fn}")
    for (cat, f), v in cats.most_common():
        print(f"   {v:4d}  {cat:36s} {f}")
    print("   filtered, by what:", dict(why.most_common()))
    print("   missed, by field:", fields.most_common(12))
    if verbose:
        for key, rows in examples.items():
            print("   ##", key)
            for row in rows[:10]:
                print("     ", row)


def oracle(items: Sequence[bank.Item], split: str) -> None:
    ex = X.PatternExtractor(X.extractable(ContractSet()))
    t = ex.tagger
    assert t is not None
    shipped = t.field_model
    gold: dict[str, set[str]] = collections.defaultdict(set)
    for item in items:
        for lab in item.labels:
            content = item.turns[lab.turn][1]
            gold[content].add(lab.field)
            gold[X.mask_quotes(content)].add(lab.field)

    class Gold:
        def __init__(self, union: bool) -> None:
            self.union = union

        def probabilities(self, text: str) -> dict[str, float]:
            out = dict(shipped.probabilities(text)) if self.union and shipped is not None else {}
            out.update({f: 1.0 for f in gold.get(text, ())})
            return out

    rows = [i for i in items if i.split == split]
    for name, model in (("shipped stage 1", shipped), ("stage 1 + gold fields", Gold(True)),
                        ("gold fields only", Gold(False))):
        t.field_model = model
        tp = fp = fn = 0
        for item in rows:
            a, b, c = score_item(item, _flatten(ex.extract(_messages(item))))
            tp, fp, fn = tp + a, fp + b, fn + c
        p, r = tp / (tp + fp), tp / (tp + fn)
        print(f"   {split} {name:24s} P {p:.3f} R {r:.3f} F1 {2 * p * r / (p + r):.4f} (tp {tp} fp {fp} fn {fn})")
    t.field_model = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", action="append", choices=("dev", bank.MORE_DEV))
    ap.add_argument("--oracle", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    items = bank.load_items() + [i for i in bank.load_more_items() if i.split == bank.MORE_DEV]
    for split in args.split or (bank.MORE_DEV, "dev"):
        breakdown(items, split, args.verbose)
        if args.oracle:
            oracle(items, split)


if __name__ == "__main__":
    main()
