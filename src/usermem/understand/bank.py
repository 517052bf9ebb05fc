"""The labelled zh/en utterance bank (`usermem/data/bank/`): typed loading, no I/O beyond package data.

Files (written by the project, licensed with the code; see usermem/data/bank/README.md when present):
- `fields.json`: the fields the bank covers (key, kind, sensitivity, value type, zh/en labels);
- `utterances.jsonl`: one item per line — `turns` (OpenAI-style messages), `labels` (field, the user's own
  words as `value`, `span` = [turn, start, end], optional `canonical` and `attrs`), `negative` (why nothing
  or less is stored: question, hypothetical, third_party, ... or null) and a fixed `split`
  (train / dev / test; the test split is never used to choose anything);
- `utterances_extra.jsonl`: more hand-written utterances in the same format, every one in the `train` split
  (training data only, never scored: see the bank's README);
- `plan_queries.jsonl`: messages and the fields a recall plan for them needs (`fields`), with a split.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True, slots=True)
class Label:
    field: str
    value: str
    turn: int
    start: int
    end: int
    canonical: str | None = None
    attrs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    lang: str
    split: str
    turns: tuple[tuple[str, str], ...]  # (role, content)
    labels: tuple[Label, ...]
    negative: str | None = None

    def messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.turns]


@dataclass(frozen=True, slots=True)
class PlanQuery:
    id: str
    lang: str
    split: str
    text: str
    fields: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class BankField:
    key: str
    kind: str
    sensitivity: str
    value_type: str
    zh: str
    en: str
    description: str


def bank_text(name: str, root: str | Path | None) -> str:
    if root is not None:
        path = Path(root) / name
        return path.read_text(encoding="utf-8") if path.exists() else ""
    res = resources.files("usermem.data").joinpath("bank").joinpath(name)
    return res.read_text(encoding="utf-8") if res.is_file() else ""


def _jsonl(text: str) -> Iterable[dict[str, Any]]:
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def parse_item(row: dict[str, Any]) -> Item:
    turns = tuple((str(t.get("role", "user")), str(t.get("content", ""))) for t in row.get("turns", ()))
    labels = []
    for lab in row.get("labels") or ():
        span = lab.get("span") or [0, 0, 0]
        attrs = tuple(sorted((str(k), str(v)) for k, v in (lab.get("attrs") or {}).items()))
        labels.append(Label(str(lab["field"]), str(lab["value"]), int(span[0]), int(span[1]), int(span[2]),
                            lab.get("canonical"), attrs))
    return Item(str(row["id"]), str(row.get("lang", "")), str(row.get("split", "train")), turns, tuple(labels),
                row.get("negative"))


def load_items(root: str | Path | None = None, path: str | Path | None = None) -> list[Item]:
    """The bank's utterances (or a file in the same format: `path`)."""
    text = Path(path).read_text(encoding="utf-8") if path else bank_text("utterances.jsonl", root)
    return [parse_item(r) for r in _jsonl(text)]


EXTRA_FILE = "utterances_extra.jsonl"


def load_extra_items(root: str | Path | None = None) -> list[Item]:
    """The train-only supplement (`utterances_extra.jsonl`): more training data for the learned extractors."""
    return [parse_item(r) for r in _jsonl(bank_text(EXTRA_FILE, root))]


# Which items of the supplement the learned extractors train on: "all", or "negatives" (the items with a trap
# kind — questions, hypotheticals, third parties, ... — and what else they say about the user). Chosen on dev
# (2026-12-01, stage-1 fits with word classes; held-out dev F1): bank only 0.7466, + the supplement's
# negatives 0.7462, + its positives 0.7388, + all of it 0.7404 — the hand-written positives made the tagger
# more eager (more right values, more wrong ones) and did not pay on dev, so only the negatives are used.
SUPPLEMENT = "negatives"


def load_training_items(root: str | Path | None = None, supplement: str | None = None) -> list[Item]:
    """Every labelled utterance a model may learn from, with its split: the bank and the train-only supplement
    (`supplement`: "all" | "negatives" | "none", default `SUPPLEMENT`; callers pick the splits they fit on, the
    test split is never among them)."""
    which = SUPPLEMENT if supplement is None else supplement
    extra = [] if which == "none" else [i for i in load_extra_items(root) if which == "all" or i.negative is not None]
    return [*load_items(root), *extra]


def load_plan_queries(root: str | Path | None = None, path: str | Path | None = None) -> list[PlanQuery]:
    text = Path(path).read_text(encoding="utf-8") if path else bank_text("plan_queries.jsonl", root)
    out = []
    for r in _jsonl(text):
        fields = r.get("fields")
        if fields is None:
            fields = [*r.get("fact_recall", ()), *r.get("preference_recall", ())]
        out.append(PlanQuery(str(r["id"]), str(r.get("lang", "")), str(r.get("split", "train")), str(r["text"]),
                             tuple(str(f) for f in fields),
                             {k: v for k, v in r.items() if k not in ("id", "lang", "split", "text", "fields")}))
    return out


@lru_cache(maxsize=4)
def load_fields(root: str | None = None) -> tuple[BankField, ...]:
    text = bank_text("fields.json", root)
    if not text:
        return ()
    data = json.loads(text)
    return tuple(BankField(str(f["key"]), str(f.get("kind", "fact")), str(f.get("sensitivity", "L1")),
                           str(f.get("value_type", "free_text")), str(f.get("zh", "")), str(f.get("en", "")),
                           str(f.get("description", ""))) for f in data.get("fields", ()))


def value_types() -> dict[str, str]:
    return {f.key: f.value_type for f in load_fields()}


def by_split(rows: Sequence[Any], split: str) -> list[Any]:
    return [r for r in rows if getattr(r, "split", None) == split]
