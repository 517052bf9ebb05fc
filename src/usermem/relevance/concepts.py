"""Bilingual concept expansion for the lexical side of recall(query=...).

BM25 only matches words that are written the same, so "what's my job?" never meets a memory
"职业: 产品经理". The concept lexicon (`usermem/data/concepts.json`, a data file) lists small groups of
zh/en words for the same everyday concept (job / 工作 / 职业, drink / 饮料 / 咖啡, allergy / 过敏, ...).
A query that names a concept gets the group's other words as extra query terms, scored at a reduced
weight (`EXPANSION_WEIGHT`), so a literal match still counts more than a translated one.

Triggers: an English term matches whole words of the lower-cased query; a Chinese term of two or
more characters matches as a substring, a single-character one only when jieba segments it as a
token of its own (so "家" in "大家" does not trigger `home`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from usermem.relevance.lexical import tokenize

EXPANSION_WEIGHT = 0.5  # BM25 weight of an expanded term relative to a term the query wrote itself

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True, slots=True)
class Concept:
    name: str
    terms: tuple[str, ...]
    tokens: tuple[str, ...]  # index terms of all the group's words (tokenize), deduplicated


class ConceptLexicon:
    """Concept groups with their triggers compiled once."""

    def __init__(self, groups: Iterable[tuple[str, Sequence[str]]]) -> None:
        self.concepts: list[Concept] = []
        self._cjk: list[tuple[str, int]] = []  # (term, concept index)
        latin: dict[str, int] = {}
        for i, (name, terms) in enumerate(groups):
            toks: list[str] = []
            for t in terms:
                for tok in tokenize(t):
                    if tok not in toks:
                        toks.append(tok)
            self.concepts.append(Concept(name, tuple(terms), tuple(toks)))
            for t in terms:
                term = t.lower().strip()
                if not term:
                    continue
                if _CJK.search(term):
                    self._cjk.append((term, i))
                else:
                    latin.setdefault(term, i)
        self._latin_of = latin
        alternatives = sorted(latin, key=len, reverse=True)
        self._latin = re.compile(r"(?<![a-z0-9])(" + "|".join(re.escape(t) for t in alternatives)
                                 + r")(?:s|es)?(?![a-z0-9])") if alternatives else None

    def concepts_of(self, query: str) -> list[Concept]:
        """The concepts a query names, in lexicon order."""
        text = query.lower()
        hit: set[int] = set()
        if self._latin is not None:
            for m in self._latin.finditer(text):
                hit.add(self._latin_of[m.group(1)])
        if _CJK.search(text):
            toks = set(tokenize(text))
            for term, i in self._cjk:
                if i not in hit and ((len(term) > 1 and term in text) or term in toks):
                    hit.add(i)
        return [self.concepts[i] for i in sorted(hit)]

    def expand(self, query: str, tokens: Sequence[str] | None = None) -> tuple[str, ...]:
        """Extra index terms for a query: the words of the concepts it names that it did not write."""
        own = set(tokens if tokens is not None else tokenize(query))
        out: list[str] = []
        for c in self.concepts_of(query):
            for tok in c.tokens:
                if tok not in own and tok not in out:
                    out.append(tok)
        return tuple(out)


def load_lexicon(text: str) -> ConceptLexicon:
    """A lexicon from the JSON text of a concepts file ({"groups": [{"concept", "terms"}, ...]})."""
    data = json.loads(text)
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise ValueError("a concepts file needs a list 'groups'")
    parsed: list[tuple[str, list[str]]] = []
    for g in groups:
        if not isinstance(g, dict) or not isinstance(g.get("concept"), str) or not isinstance(g.get("terms"), list):
            raise ValueError(f"bad concept group: {g!r}")
        parsed.append((g["concept"], [str(t) for t in g["terms"]]))
    return ConceptLexicon(parsed)


@lru_cache(maxsize=1)
def default_lexicon() -> ConceptLexicon:
    """The bundled lexicon (`usermem/data/concepts.json`), loaded once per process."""
    return load_lexicon((resources.files("usermem") / "data" / "concepts.json").read_text(encoding="utf-8"))
