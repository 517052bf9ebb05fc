"""Nearest-neighbour value templates learned from the bank: "find the train clauses most like this one and
read the value where they had theirs".

For every labelled value in the splits the shipped models were fitted on (train and the train-only supplement;
dev too after the final refit, see `usermem train`) we keep its clause's features (`learned.features`, tf-idf),
the field, and the words right before and after the value ("我对 | 花生 | 过敏", "allergic to | shellfish |
<end>"). A new clause is compared with the train clauses (cosine over an inverted index); the templates of
the nearest ones (similarity >= a cut chosen on dev) are tried on it: where a template's left context
(its longest suffix present, at least two characters or one word) occurs, the value runs to the template's
right context or the end of the clause, within the template's length. This transfers the bank's phrasings
to unseen values without hand rules. Built at first use from the shipped bank (well under a second).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from usermem.understand import bank
from usermem.understand.filters import clause_spans
from usermem.understand.learned import features
from usermem.understand.text import cjk_compile

_STOP_AFTER = cjk_compile(r"\s+(?:but|and|because|so|though|although|which|since|as|when|if|while|lol|haha)\b|"
                         r"但是|不过|因为|所以|而且|然后|哈哈", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Template:
    field: str
    left: str  # normalised context before the value (up to 6 CJK characters / 3 words)
    right: str  # context after the value ("" = the end of the clause)
    max_len: int  # the longest value this template gives (characters)


@dataclass(frozen=True, slots=True)
class Proposal:
    field: str
    value: str
    start: int
    end: int
    score: float


def _left_context(text: str) -> str:
    text = text.lower()
    words = re.findall(r"[a-z0-9'’\-]+|[\u4e00-\u9fff]|[^\s\w]", text)
    out: list[str] = []
    cjk = 0
    latin = 0
    for w in reversed(words):
        if re.fullmatch(r"[\u4e00-\u9fff]", w):
            cjk += 1
        elif w[0].isalnum():
            latin += 1
        else:
            break
        out.append(w)
        if cjk >= 6 or latin >= 3:
            break
    return _join(list(reversed(out)))


def _right_context(text: str) -> str:
    text = text.lower()
    m = re.match(r"\s*([\u4e00-\u9fff]{1,2}|[a-z0-9'’\-]+)", text)
    return m.group(1) if m else ""


def _join(tokens: Sequence[str]) -> str:
    out = ""
    for t in tokens:
        if out and t[0].isascii() and t[0].isalnum() and out[-1].isascii() and out[-1].isalnum():
            out += " "
        out += t
    return out


class TemplateIndex:
    def __init__(self, items: Sequence[bank.Item], splits: Sequence[str] = ("train",)) -> None:
        self.docs: list[tuple[dict[str, float], list[Template]]] = []
        df: dict[str, int] = {}
        raw: list[tuple[set[str], list[Template]]] = []
        for item in items:
            if item.split not in splits or item.split == "test":
                continue
            for ti, (role, content) in enumerate(item.turns):
                labs = [lab for lab in item.labels if lab.turn == ti]
                if role != "user" or not labs:
                    continue
                for c0, c1 in clause_spans(content):
                    inside = [lab for lab in labs if c0 <= lab.start < c1]
                    if not inside:
                        continue
                    clause = content[c0:c1]
                    temps = []
                    for lab in inside:
                        left = _left_context(content[c0:lab.start])
                        right = _right_context(content[lab.end:c1])
                        if not left and not right:
                            continue
                        temps.append(Template(lab.field, left, right, max(2 * len(lab.value), 8)))
                    if temps:
                        fs = features(clause)
                        raw.append((fs, temps))
                        for f in fs:
                            df[f] = df.get(f, 0) + 1
        n = len(raw) or 1
        self.max_df = max(2, int(0.2 * n))
        self.idf = {f: math.log((1 + n) / (1 + d)) + 1.0 for f, d in df.items()}
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, (fs, temps) in enumerate(raw):
            vec = {f: self.idf[f] for f in fs}
            norm = math.sqrt(sum(w * w for w in vec.values())) or 1.0
            vec = {f: w / norm for f, w in vec.items()}
            self.docs.append((vec, temps))
            for f, w in vec.items():
                if df[f] <= self.max_df:  # features in most clauses ("我", "i") only cost time
                    self.postings.setdefault(f, []).append((i, w))

    def neighbours(self, clause: str, k: int = 5) -> list[tuple[float, int]]:
        fs = [f for f in features(clause) if f in self.idf]  # the norm counts every feature
        if not fs:
            return []
        norm = math.sqrt(sum(self.idf[f] ** 2 for f in fs)) or 1.0
        scores: dict[int, float] = {}
        for f in fs:
            q = self.idf[f] / norm
            for i, w in self.postings.get(f, ()):  # frequent features are left out of the dot product
                scores[i] = scores.get(i, 0.0) + q * w
        return sorted(((s, i) for i, s in scores.items()), reverse=True)[:k]

    def propose(self, clause: str, min_similarity: float, k: int = 5) -> list[Proposal]:
        low = clause.lower()
        out: list[Proposal] = []
        for sim, i in self.neighbours(clause, k):
            if sim < min_similarity:
                break
            for t in self.docs[i][1]:
                p = _apply(t, clause, low)
                if p is not None:
                    out.append(Proposal(t.field, p[0], p[1], p[2], round(sim, 4)))
        return out


def _apply(t: Template, clause: str, low: str) -> tuple[str, int, int] | None:
    if not t.left:  # the value opens the clause: it runs up to the right context
        r = low.find(t.right)
        lead = len(clause) - len(clause.lstrip(" \t,，"))
        if r <= lead:
            return None
        value = clause[lead:r].strip(" \t,，。.!！?？~、;；:：\"'“”‘’()（）")
        return (value, lead, lead + len(value)) if value and len(value) <= t.max_len else None
    left = t.left
    while left:
        pos = low.find(left)
        if pos >= 0:
            break
        # shorten from the left: drop a CJK character or a word
        left = left[1:] if not left[0].isascii() else (left.split(" ", 1)[1] if " " in left else "")
        if len(left) < 2 or (left.isascii() and not left.strip()):
            return None
    else:
        return None
    if left.isascii() and len(left) < 3:
        return None
    start = pos + len(left)
    while start < len(clause) and clause[start] == " ":
        start += 1
    rest = low[start:]
    end = len(clause)
    if t.right:
        r = rest.find(t.right)
        if r > 0:
            end = start + r
    cut = _STOP_AFTER.search(clause, start)
    if cut is not None and cut.start() < end:
        end = cut.start()
    end = min(end, start + t.max_len)
    value = clause[start:end].strip(" \t,，。.!！?？~、;；:：\"'“”‘’()（）")
    if not value or len(value) < 1 or (value.isascii() and len(value) < 2):
        return None
    return value, start, start + len(value)


def fit_splits() -> tuple[str, ...]:
    """The splits the shipped models were fitted on (`fit_splits` in tagger.json; "train" when absent)."""
    import json

    from usermem.understand.tagger import model_path

    meta = model_path().with_suffix(".json")
    data = json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else {}
    return tuple(s for s in data.get("fit_splits", ("train",)) if s != "test")


@lru_cache(maxsize=1)
def index() -> TemplateIndex:
    """Built from the same utterances as the shipped models (the bank and its train-only supplement)."""
    return TemplateIndex(bank.load_training_items(), fit_splits())
