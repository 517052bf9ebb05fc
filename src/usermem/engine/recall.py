"""The read path: fetch a user's live memories, weigh them, rank them, flag the stale ones.

score = importance × weight(now) [× relevance when a query is given]. Weight decays from the last
confirmation and is lifted by use (policy/decay.py). Only volatile kinds (preference, context) that
are not standing fields are flagged for confirmation or dropped by weight; facts, situations and
episodes live until their TTL and are merely ranked.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import fields, replace
from typing import TYPE_CHECKING

from usermem.engine.context import EngineContext
from usermem.engine.contracts import contract_docs_read
from usermem.engine.ports import Relevance
from usermem.engine.sessions import visible_context
from usermem.model import KIND_REGISTRY, EventWindow, Kind, MemoryRecord, Recalled, ScoredMemory, Withheld
from usermem.policy import wording
from usermem.policy.contracts import ContractSet, FieldContract
from usermem.policy.decay import rank_bound, rank_time, time_constant, weight_of
from usermem.policy.wording import detect_language
from usermem.store.base import LiveQuery, RankedReader, ReadAhead, ScoreRow

if TYPE_CHECKING:
    from usermem.config import Settings
    from usermem.engine.consent import ConsentState
    from usermem.engine.grants import AccessGate
    from usermem.engine.resolvers import LiveResolvers

# (query, records) -> relevance in [0, 1] per record, same order (the call part of ports.Relevance).
RelevanceFn = Callable[[str, Sequence[MemoryRecord]], Sequence[float]]
# (query, tenant, user_id, [(id, key)], load(ids) -> records) -> relevance per row: the optional
# `score_rows` of a relevance plug-in (relevance/hybrid.py), equal to its __call__ on the rows' records.
ScoreRowsFn = Callable[[str, str, str, Sequence[tuple[str, str]], Callable[[Sequence[str]], Sequence[MemoryRecord]]],
                       Sequence[float]]
# Tiered authorization (engine/grants.py): gate_for(tenant, user_id, now, reader, domain) -> AccessGate.
GateFor = Callable[[str, str, float, str | None, str | None], "AccessGate"]
# Consent requests (engine/consent.py): consent_for(tenant, user_id, now) -> declined / pending fields.
ConsentFor = Callable[[str, str, float], "ConsentState"]


def _key_policy(contract: FieldContract | None, kind: Kind) -> tuple[bool, float, bool] | None:
    """(enabled, half-life, judged_by_weight) for a key, or None when the field is disabled."""
    if contract is not None and not contract.enabled:
        return None
    half_life = (contract.half_life_seconds if contract else None) or KIND_REGISTRY[kind].half_life_seconds
    judged = KIND_REGISTRY[kind].volatile and not (contract is not None and contract.standing)
    return True, half_life, judged


def language_code(value: object) -> str | None:
    """'zh' / 'en' from a stored `language` preference ("中文", "English", "zh-CN", "英文"...), else None."""
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if "英" in v or "english" in v or v == "en" or v.startswith("en-") or v.startswith("en_"):
        return "en"
    if any(t in v for t in ("中", "汉", "chinese", "mandarin", "普通话")) or v.startswith("zh"):
        return "zh"
    return None


def confirmation_question(record: MemoryRecord, contract: FieldContract | None, language: str | None = None) -> str:
    """The question asked when a volatile memory fades, in `language` (else the value's script), naming the
    field by its label (policy/wording.py)."""
    value = record.value if isinstance(record.value, str) else str(record.value)
    return wording.confirmation_question(record.key, record.value, contract, language or detect_language(value))


# ScoredMemory built slot by slot, as store/rows.py builds records: a frozen dataclass's __init__ sets each field
# with object.__setattr__ (about twice the cost) and does nothing else; recall builds one per memory returned.
if tuple(f.name for f in fields(ScoredMemory)) != ("memory", "score", "weight", "relevance", "needs_confirmation",
                                                    "question", "time_window") \
        or hasattr(ScoredMemory, "__post_init__"):
    raise ImportError("engine/recall.py builds ScoredMemory slot by slot: update _scored_memory")
_SM_MEMORY, _SM_SCORE, _SM_WEIGHT, _SM_RELEVANCE, _SM_FLAG, _SM_QUESTION, _SM_WINDOW = (
    getattr(ScoredMemory, f.name).__set__ for f in fields(ScoredMemory))


def _scored_memory(memory: MemoryRecord, score: float, weight: float, relevance: float | None,
                   needs_confirmation: bool, question: str | None, time_window: EventWindow | None) -> ScoredMemory:
    """ScoredMemory(memory, score, weight, relevance, needs_confirmation, question, time_window)."""
    s: ScoredMemory = object.__new__(ScoredMemory)
    _SM_MEMORY(s, memory)
    _SM_SCORE(s, score)
    _SM_WEIGHT(s, weight)
    _SM_RELEVANCE(s, relevance)
    _SM_FLAG(s, needs_confirmation)
    _SM_QUESTION(s, question)
    _SM_WINDOW(s, time_window)
    return s


# The first batch of the rank index reads `limit + _SLACK` rows per kind (docs/scaling.md, Per-request cost).
_SLACK = 4

# (score, weight, flagged for confirmation, row): one admitted candidate.
Ranked = tuple[float, float, bool, ScoreRow]


class _Judge:
    """The one place where a row is admitted to recall and scored: its field enabled, L2/L3 only with an
    active grant (`gate`; without one, L1 only), a live field's stored copy never, volatile rows dropped
    below the drop threshold and flagged below the confirm threshold. Both read paths (full scan and
    rank index) admit rows only through this."""

    def __init__(self, contracts: ContractSet, gate: AccessGate | None, settings: Settings,
                 now: float, relevance: dict[str, float] | None = None,
                 combine: Callable[[float, float, float], float] | None = None) -> None:
        self.contracts = contracts
        self.gate = gate
        self.now = now
        self.confirm_at, self.drop_at = settings.confirm_threshold, settings.drop_threshold
        self.relevance = relevance
        self.combine = combine
        # Per-key policy: unknown keys depend only on their kind.
        self.by_kind = {k.value: _key_policy(None, k) for k in Kind}
        self.by_key: dict[tuple[str, str], tuple[bool, float, bool] | None] = {}
        # key -> why it is withheld, for keys with a value this read would otherwise return (never the value)
        self.withheld: dict[str, str] = {}

    def why_hidden(self, contract: FieldContract) -> str | None:
        """Why a reader may not see a field it has a value for (None: it may, or it is a live field)."""
        if contract.live:
            return None
        if not contract.enabled:
            return "disabled"
        if self.gate is not None:
            return self.gate.why_not(contract)
        return None if contract.sensitivity.value == "L1" else "needs_grant"

    def _withhold(self, row: ScoreRow, contract: FieldContract) -> None:
        if row.key in self.withheld:
            return
        reason = self.why_hidden(contract)
        if reason is None:
            return
        # only what this read would return if the reader could see it (not decayed away)
        if KIND_REGISTRY[Kind(row.kind)].volatile and not contract.standing:
            w = weight_of(row.confidence, contract.effective_half_life(), row.created_at, row.last_confirmed_at,
                          row.last_used_at, self.now)
            if w < self.drop_at:
                return
        self.withheld[row.key] = reason

    def may_hide(self, contract: FieldContract) -> bool:
        """False when `why_hidden(contract)` is None whatever the reader's grants: decided without reading
        them (an enabled L1 field of a domain this reader may read, or a live field)."""
        if contract.live:
            return False
        if not contract.enabled:
            return True
        if self.gate is not None:
            return self.gate.may_refuse(contract)
        return contract.sensitivity.value != "L1"

    def visible(self, contract: FieldContract) -> bool:
        """L2/L3 need an active grant (and a field private to another domain is never shared); a live field's
        stored copy is never preferred to the live value."""
        return not contract.live and contract.enabled and self.why_hidden(contract) is None

    def all(self, rows: Sequence[ScoreRow]) -> list[Ranked]:
        """The admitted rows of `rows`, scored: (score, weight, flagged, row) per row whose field is enabled and
        visible to this reader and, if volatile, not decayed below the drop threshold (the others are
        withheld or dropped). One loop for every read path (the index reads judge whole batches)."""
        out: list[Ranked] = []
        get, by_kind, by_key, now = self.contracts.get, self.by_kind, self.by_key, self.now
        drop_at, confirm_at, relevance, combine = self.drop_at, self.confirm_at, self.relevance, self.combine
        for row in rows:
            row_id, kind, key, confidence, importance, created_at, last_used_at, last_confirmed_at = row
            contract = get(key)
            if contract is None:
                pol = by_kind[kind]
            else:
                pk = (kind, key)
                if pk not in by_key:
                    by_key[pk] = _key_policy(contract, Kind(kind)) if self.visible(contract) else None
                pol = by_key[pk]
            if pol is None:
                if contract is not None:
                    self._withhold(row, contract)
                continue
            _, half_life, judged_by_weight = pol
            w = weight_of(confidence, half_life, created_at, last_confirmed_at, last_used_at, now)
            if judged_by_weight and w < drop_at:
                continue
            rel = relevance[row_id] if relevance is not None else 1.0
            score = combine(rel, importance, w) if combine is not None else importance * w * rel
            out.append((score, w, judged_by_weight and w < confirm_at, row))
        return out


class _Cursor:
    """One kind's position in the rank index: what to read next, whether every row was read, and the lowest
    rank_time read so far (its rank_bound bounds the score of every row not read yet)."""

    __slots__ = ("done", "floor", "kind", "offset", "size", "tau")

    def __init__(self, kind: Kind, size: int) -> None:
        self.kind = kind
        self.tau = time_constant(KIND_REGISTRY[kind].half_life_seconds)
        self.size = size
        self.offset = 0
        self.done = False
        self.floor = math.inf


class RecallPipeline:
    def __init__(self, ctx: EngineContext, *, gate_for: GateFor | None = None, live: LiveResolvers | None = None,
                 relevance: Relevance | None = None) -> None:
        self.ctx = ctx
        # Read top-k candidates from the store's rank index when it has one (StoreCapabilities.ranked);
        # False: score every live row (the reference the index path is tested against).
        self.use_index = True
        # Score a query's candidates from ScoreRows and the plug-in's index, loading full records for the
        # winners only (issue 19); False: load every candidate's record (the reference it is tested against).
        self.light_query = True
        # Where the store reads ahead (PostgreSQL), a query recall sends the contract documents with the
        # relevance plug-in's announced reads, and the candidates' ScoreRows with their records (the winners'
        # records need no round trip of their own): 2 round trips. False: one read at a time (4; the reference
        # tests/test_relevance_pg.py compares against).
        self.candidates_ahead = True
        # Query relevance (engine/ports.Relevance, e.g. relevance/hybrid.py); None: no query ranking.
        self.relevance = relevance
        # Tiered authorization (engine/grants.py). Without it, recall fails closed: L2/L3 fields are never
        # returned.
        self.gate_for = gate_for
        # Live fields (engine/resolvers.py): values read from the system of record at recall time.
        self.live = live
        # Consent requests (engine/consent.py): which withheld fields the user declined or was asked about.
        self.consent_for: ConsentFor | None = None
        # (contract set, kind of gate) -> the keys a read may withhold (_maybe_hidden); the set is kept to
        # check its identity (an id can be reused once it is gone).
        self._hidden_cache: dict[tuple[int, bool, str | None], tuple[ContractSet, list[str]]] = {}
        # tenant -> the contract set its last recall used: what the next one predicts its reads from
        # (_reads_ahead); a wrong prediction costs a round trip, never a different result.
        self._last_contracts: dict[str, ContractSet] = {}

    def use_consent(self, consent_for: ConsentFor | None) -> None:
        """Plug in the consent-request state recall marks its withheld fields with (the composition root)."""
        self.consent_for = consent_for

    def use_relevance(self, relevance: Relevance | None) -> None:
        """Plug in (or, with None, remove) query relevance; the composition root calls this."""
        self.relevance = relevance

    def _scoped(self, q: LiveQuery, ranked: list[Ranked], full: dict[str, MemoryRecord] | None) -> list[Ranked]:
        """`ranked` without the context rows whose session is not open (after the weight cut: only context
        still alive is looked up)."""
        if any(t[3].kind == "context" for t in ranked):
            keep = self._scope_context(q.tenant, q.user_id, [t[3] for t in ranked], full, q.now, q.session_id)
            ranked = [t for t in ranked if t[3].kind != "context" or t[3].id in keep]
        return ranked

    def _top_from_index(self, q: LiveQuery, limit: int, judge: _Judge) -> list[Ranked]:
        """The candidates of the best `limit` rows, read from the store's rank index (issue 19): the same
        rows, scores and flags the full scan would rank first, after reading about `limit` rows per kind.

        Each kind's rows come in descending policy.decay.rank_time, whose rank_bound is an upper bound of
        every later row's score. Every row read is admitted (judged) batch by batch; a kind's next batch is
        read only while the bound of the lowest rank_time read so far from it reaches the `limit`-th best
        score admitted (a tie still reads on: ties break on recency then id), all such kinds in one
        statement. Keys whose contract sets its own half-life are ranked in the index by their kind's
        half-life, so they are read directly (a contract's few keys) and skipped in the index.
        """
        reader = self.ctx.store.capabilities.ranked
        assert reader is not None
        if limit <= 0:
            return []
        kinds = list(q.kinds) if q.kinds is not None else list(Kind)
        own_half_life = sorted(c.key for c in judge.contracts if c.half_life_seconds)
        admitted: list[Ranked] = []
        if own_half_life:
            admitted += self._scoped(q, judge.all(self.ctx.store.live_scores(replace(q, keys=own_half_life))), None)
        skip = set(own_half_life)
        cursors = [_Cursor(k, limit + _SLACK) for k in kinds]
        todo = cursors
        best = heapq.nlargest(limit, [t[0] for t in admitted])  # the best `limit` scores admitted, best first
        while todo:
            for got in self._fill(q, reader, todo, skip):
                new = judge.all(got)
                admitted += new
                best = heapq.nlargest(limit, best + [t[0] for t in new])
            kth = best[-1] if len(best) >= limit else -1.0
            # no unread row of a kind can reach the limit-th score once the bound of its lowest row read is below
            todo = [c for c in cursors if not c.done and rank_bound(c.floor, c.tau, q.now) * (1.0 + 1e-7) >= kth]
        return admitted

    def _fill(self, q: LiveQuery, reader: RankedReader, cursors: list[_Cursor], skip: set[str]
              ) -> list[list[ScoreRow]]:
        """Read the next batch of each cursor (one statement): per cursor, the rows recall may judge (not
        skipped, context only in an open session); each cursor's `floor` becomes the rank_time of the last
        row it has read (the lowest: rows come in descending rank_time; a difference in the last bits between
        the database's expression and policy.decay.rank_time is within the caller's 1e-7 slack), its next
        batch twice as large."""
        rows = reader(q, [(c.kind, c.size, c.offset) for c in cursors])
        by_kind: dict[str, list[ScoreRow]] = {c.kind.value: [] for c in cursors}
        for row in rows:
            by_kind[row.kind].append(row)
        out: list[list[ScoreRow]] = []
        for c in cursors:
            got = by_kind[c.kind.value]
            c.done = len(got) < c.size
            c.offset += len(got)
            c.size *= 2
            if got:  # a kind's rows come best first (RankedReader): the last one read has the lowest rank_time
                r = got[-1]
                c.floor = min(c.floor, rank_time(r.confidence, r.importance, c.tau, r.created_at,
                                                 r.last_confirmed_at, r.last_used_at))
            if skip:
                got = [r for r in got if r.key not in skip]
            if c.kind is Kind.CONTEXT and got:
                keep = self._scope_context(q.tenant, q.user_id, got, None, q.now, q.session_id)
                got = [r for r in got if r.id in keep]
            out.append(got)
        return out

    def _maybe_hidden(self, contracts: ContractSet, judge: _Judge) -> list[str]:
        """The keys of `contracts` a read through `judge` may withhold (judge.may_hide), sorted; the same
        for every read with this contract set and the same kind of gate (none / for a domain)."""
        gate = judge.gate
        sig = (id(contracts), gate is not None, gate.domain if gate is not None else None)
        hit = self._hidden_cache.get(sig)
        if hit is not None and hit[0] is contracts:
            return hit[1]
        keys = sorted(c.key for c in contracts if judge.may_hide(c))
        if len(self._hidden_cache) > 64:
            self._hidden_cache.clear()
        self._hidden_cache[sig] = (contracts, keys)
        return keys

    def _scope_context(self, tenant: str, user_id: str, rows: list[ScoreRow], full: dict[str, MemoryRecord] | None,
                       now: float, session_id: str | None) -> set[str]:
        """Ids of the context rows recall may return: only while their session is open (engine/sessions.py)."""
        ids = [r.id for r in rows if r.kind == "context"]
        records = [full[i] for i in ids if i in full] if full is not None else self.ctx.store.get_many(tenant, ids)
        return visible_context(self.ctx.store, tenant, user_id, records, now, session_id)

    def _user_language(self, tenant: str, user_id: str, now: float, cache: dict[str, str | None]) -> str | None:
        """The language confirmation questions are asked in: the user's `language` memory, if any."""
        if "lang" not in cache:
            found = self.ctx.store.live(LiveQuery(tenant, user_id, now, keys=["language"]))
            cache["lang"] = language_code(found[0].value) if found else None
        return cache["lang"]

    def scored(self, tenant: str, user_id: str, *, now: float, kinds: Sequence[Kind] | None = None,
               keys: Sequence[str] | None = None, session_id: str | None = None,
               query: str | None = None, limit: int | None = None, event_from: float | None = None,
               event_until: float | None = None, actor: str | None = None,
               domain: str | None = None, purpose: str | None = None) -> Recalled[ScoredMemory]:
        """Live memories of the user, scored and flagged, best first; the best `limit` (default all).

        `withheld` lists the fields among the candidates this read may not see (disabled, needing a grant,
        private to another domain), with a consent question shaped by `purpose` — never their values.

        With a query and a relevance plug-in, only its candidates are loaded and the score is the
        plug-in's `combine(relevance, importance, weight)` (relevance/hybrid.py). `event_from` /
        `event_until` keep memories whose event time (else write time) lies in [from, until).

        Hot path: scoring reads only the ScoreRow columns (a covering index on SQLite); full
        records, with their values, are fetched for the winners only. A query takes the same path when
        the plug-in scores rows (`score_rows`: its index keeps every indexed memory's tokens and vector);
        an event-time window, or a plug-in without candidates, loads every candidate's record.
        """
        q = LiveQuery(tenant, user_id, now, kinds=kinds, keys=keys, session_id=session_id)
        gate = self.gate_for(tenant, user_id, now, actor, domain) if self.gate_for is not None else None
        read_ahead = self.ctx.store.capabilities.read_ahead
        if read_ahead is not None and limit is not None and self._indexed(q, query, event_from, event_until):
            # The index path's reads go out together (one round trip on PostgreSQL, issue 19): the tenant's
            # contract documents, the first batch of the rank index with its rows' records (the winners'
            # records come from it), the keys that may be withheld, predicted from the last contract set.
            with read_ahead(self._reads_ahead(q, limit, gate)):
                return self._scored(q, query, limit, event_from, event_until, gate, purpose)
        if query and self.relevance is not None:
            # The query's planner asks for the tenant's contract set too: one read for both, pinned. Where the
            # store reads ahead (PostgreSQL), the contract documents go out with the reads the relevance
            # plug-in announces (the vector index's generation check): one round trip; `held` keeps the
            # blocks open until the winners are loaded (the candidates' block opens inside: _light_rows).
            with ExitStack() as held:
                if read_ahead is not None and self.candidates_ahead:
                    reads = [contract_docs_read(tenant)] if self.ctx.contract_provider is not None else []
                    plugin_reads: Callable[[str, str], list[ReadAhead]] | None = \
                        getattr(self.relevance, "reads_ahead", None)
                    if plugin_reads is not None:
                        reads += plugin_reads(tenant, user_id)
                    if len(reads) > 1:
                        held.enter_context(read_ahead(reads))
                with self.ctx.pinned_contracts(tenant, self.ctx.contracts_for(tenant)):
                    return self._scored(q, query, limit, event_from, event_until, gate, purpose, held)
        return self._scored(q, query, limit, event_from, event_until, gate, purpose)

    def _indexed(self, q: LiveQuery, query: str | None, event_from: float | None, event_until: float | None) -> bool:
        """Does a recall of q (with a limit) read the rank index?"""
        return not ((query and self.relevance is not None) or event_from is not None or event_until is not None) \
            and q.keys is None and self.use_index and self.ctx.store.capabilities.ranked is not None

    def _reads_ahead(self, q: LiveQuery, limit: int, gate: AccessGate | None) -> list[ReadAhead]:
        """The reads of an index-path recall of q, as `_scored` will make them (same arguments)."""
        reads = [contract_docs_read(q.tenant)] if self.ctx.contract_provider is not None else []
        contracts = self._last_contracts.get(q.tenant) if self.ctx.contract_provider is not None \
            else self.ctx.contracts
        own: list[str] = []
        if contracts is not None:
            own = sorted(c.key for c in contracts if c.half_life_seconds)
            if own:
                reads.append(ReadAhead("live_scores", (replace(q, keys=own),)))
        if limit > 0:
            kinds = list(q.kinds) if q.kinds is not None else list(Kind)
            reads.append(ReadAhead("ranked", (q, [(k, limit + _SLACK, 0) for k in kinds])))
        if contracts is not None:
            hidden = self._maybe_hidden(contracts, _Judge(contracts, gate, self.ctx.settings, q.now))
            if hidden:
                reads.append(ReadAhead("live_scores", (replace(q, keys=hidden),)))
        return reads

    def _scored(self, q: LiveQuery, query: str | None, limit: int | None, event_from: float | None,
                event_until: float | None, gate: AccessGate | None, purpose: str | None,
                held: ExitStack | None = None) -> Recalled[ScoredMemory]:
        tenant, user_id, now, kinds, keys = q.tenant, q.user_id, q.now, q.kinds, q.keys
        store = self.ctx.store
        contracts = self.ctx.contracts_for(tenant)
        if self._last_contracts.get(tenant) is not contracts:
            if len(self._last_contracts) > 1024:
                self._last_contracts.clear()
            self._last_contracts[tenant] = contracts
        full: dict[str, MemoryRecord] | None = None
        relevance: dict[str, float] | None = None
        timed = event_from is not None or event_until is not None
        window: EventWindow | None = None
        if (query and self.relevance is not None) or timed:
            if query and self.relevance is not None and not timed:
                # A time expression in the query ("上个月", "last week") is an event-time window; when
                # nothing lies inside it, recall falls back to no window (docs/relevance.md).
                window = self.relevance.time_window(query, now)
            records = self._query_records(q, query, window.start, window.end) if window is not None else []
            if window is not None and not records:
                window = None
            light = None
            if window is None:
                if query and self.relevance is not None and not timed and self.light_query:
                    keys = self._candidate_keys(q, query, None, None)
                    light = self._light_rows(q, query, keys, held)
                    if light is None:
                        records = self._records_of(q, keys, None, None)
                else:
                    records = self._query_records(q, query, event_from, event_until)
            if light is not None:  # scored from ScoreRows and the index; full records for the winners only
                rows, relevance = light
            else:
                full = {r.id: r for r in records}
                rows = [ScoreRow(r.id, r.kind.value, r.key, r.confidence, r.importance, r.created_at,
                                 r.last_used_at, r.last_confirmed_at) for r in records]
                if query and self.relevance is not None:
                    relevance = dict(zip(full, self.relevance(query, records), strict=True))
            judge = _Judge(contracts, gate, self.ctx.settings, now, relevance,
                           self.relevance.combine if relevance is not None and self.relevance is not None else None)
            ranked = self._scoped(q, judge.all(rows), full)
        elif limit is not None and q.keys is None and self.use_index and store.capabilities.ranked is not None:
            judge = _Judge(contracts, gate, self.ctx.settings, now)
            ranked = self._top_from_index(q, limit, judge)
            # The index read stops after about `limit` rows: the fields this reader may not see are looked up
            # by key (a contract's few keys), so what is withheld is reported whatever its rank. The keys that
            # may be hidden are known without the reader's grants (cached per contract set and domain); the
            # judge reads the grants only if the user holds a value of a sensitive field.
            hidden = self._maybe_hidden(contracts, judge)
            if hidden:
                judge.all(store.live_scores(replace(q, keys=hidden)))
        else:
            judge = _Judge(contracts, gate, self.ctx.settings, now)
            ranked = self._scoped(q, judge.all(store.live_scores(q)), None)
        if not ranked and self.live is None and not judge.withheld:
            return Recalled()  # live fields are resolved even for a user with no stored memory
        asked: dict[str, str | None] = {}  # the user's language, looked up once when a question is due
        # Ties break on recency then id, so the order is deterministic for equal scores.
        order = lambda t: (-t[0], -t[3].created_at, t[3].id)  # noqa: E731
        if limit is not None and 4 * limit < len(ranked):
            ranked = heapq.nsmallest(limit, ranked, key=order)
        else:  # all, or most of the candidates (a page of a list): one sort costs less than the heap, same order
            ranked.sort(key=order)
            if limit is not None:
                del ranked[limit:]
        if full is None:
            full = {r.id: r for r in store.get_many(tenant, [t[3].id for t in ranked])}
        out: list[ScoredMemory] = []
        for score, w, flag, row in ranked:
            record = full.get(row.id)
            if record is None:  # deleted between the two reads
                continue
            question = confirmation_question(record, contracts.get(row.key),
                                             self._user_language(tenant, user_id, now, asked)) if flag else None
            out.append(_scored_memory(record, score, w, relevance[row.id] if relevance is not None else None,
                                      flag, question, window))
        if self.live is not None:
            why_not = gate.why_not if gate is not None else (
                lambda c: None if c.sensitivity.value == "L1" else "needs_grant")
            extra = self.live.scored(tenant, user_id, now, contracts, why_not, kinds, keys, judge.withheld)
            if extra:
                out = sorted(out + extra, key=lambda s: (-s.score, -s.memory.created_at, s.memory.id))
                out = out[:limit] if limit is not None else out
        if gate is not None and out:
            gate.audit_reads([s.memory for s in out], contracts)
        if not judge.withheld:
            return Recalled(out)
        return Recalled(out, self._withheld(tenant, user_id, now, judge.withheld, contracts, asked, purpose,
                                            [s.memory.value for s in out]))

    def _withheld(self, tenant: str, user_id: str, now: float, reasons: dict[str, str], contracts: ContractSet,
                  asked: dict[str, str | None], purpose: str | None, values: list[object]) -> list[Withheld]:
        """The withheld entries, with a consent question where consent can help, in the user's language: their
        `language` memory, else the purpose's script, else the script of what they told us, else English."""
        state = self.consent_for(tenant, user_id, now) if self.consent_for is not None and \
            "needs_grant" in reasons.values() else None
        texts = [v for v in values if isinstance(v, str)]
        lang = self._user_language(tenant, user_id, now, asked) or (detect_language(purpose) if purpose else None) \
            or ("zh" if texts and 2 * sum(detect_language(t) == "zh" for t in texts) >= len(texts) else "en")
        out: list[Withheld] = []
        for key in sorted(reasons):
            contract = contracts.get(key)
            assert contract is not None
            reason = reasons[key]
            declined = state is not None and key in state.declined
            question = wording.consent_question(contract, key, lang, purpose) \
                if reason == "needs_grant" and not declined else None
            out.append(Withheld(key, contract.sensitivity.value, reason, question, declined=declined,
                                request_id=state.pending.get(key) if state is not None else None))
        return out

    def _candidate_keys(self, q: LiveQuery, query: str | None, event_from: float | None,
                        event_until: float | None) -> list[str] | None:
        """The relevance plug-in's candidate keys (within q.keys), or None: it offers none (score every live
        memory)."""
        rel = self.relevance if query else None
        keys = rel.candidates(q.tenant, q.user_id, query, kinds=q.kinds, at_from=event_from, at_until=event_until) \
            if rel is not None and query else None
        if keys is not None and q.keys is not None:
            wanted = set(q.keys)
            keys = [k for k in keys if k in wanted]
        return keys

    def _other_kinds(self) -> list[Kind]:
        indexed = self.relevance.indexed_kinds if self.relevance is not None else frozenset()
        return [k for k in Kind if k not in indexed]

    def _light_rows(self, q: LiveQuery, query: str, keys: list[str] | None, held: ExitStack | None = None
                    ) -> tuple[list[ScoreRow], dict[str, float]] | None:
        """The candidates as ScoreRows and their relevance, without their values (issue 19): the plug-in
        scores the candidates indexed at their current version from its index (stored tokens for BM25,
        stored vectors) and reads the records of the others only. None when the plug-in offers no
        candidates or cannot score rows: the caller takes the full-record path.

        With `held` and a store that reads ahead (PostgreSQL), the candidates' reads go out as one read
        ahead kept open in `held`: it carries their records too, so the winners' records (and those of
        candidates not indexed yet) need no further round trip."""
        score_rows: ScoreRowsFn | None = getattr(self.relevance, "score_rows", None)
        if keys is None or score_rows is None:
            return None
        store = self.ctx.store
        others = [k for k in (q.kinds or list(Kind)) if k in self._other_kinds()]
        reads = ([replace(q, keys=keys)] if keys else []) + ([replace(q, kinds=others)] if others else [])
        read_ahead = store.capabilities.read_ahead
        if held is not None and read_ahead is not None and reads and self.candidates_ahead:
            held.enter_context(read_ahead([ReadAhead("live_scores", (r,)) for r in reads]))
        rows = [row for r in reads for row in store.live_scores(r)]
        scores = score_rows(query, q.tenant, q.user_id, [(r.id, r.key) for r in rows],
                            lambda ids: store.get_many(q.tenant, ids))
        return rows, dict(zip([r.id for r in rows], scores, strict=True))

    def _query_records(self, q: LiveQuery, query: str | None, event_from: float | None,
                       event_until: float | None) -> list[MemoryRecord]:
        """Full records for a query or an event-time window: the relevance plug-in's candidates when it
        offers them (plus live memories of kinds it does not index), else every live memory."""
        return self._records_of(q, self._candidate_keys(q, query, event_from, event_until), event_from, event_until)

    def _records_of(self, q: LiveQuery, keys: list[str] | None, event_from: float | None,
                    event_until: float | None) -> list[MemoryRecord]:
        store = self.ctx.store
        if keys is None:
            records = store.live(q)
        else:
            records = store.live(replace(q, keys=keys)) if keys else []
            others = [k for k in (q.kinds or list(Kind)) if k in self._other_kinds()]
            if others:
                records += store.live(replace(q, kinds=others))
        if event_from is not None or event_until is not None:
            lo = -math.inf if event_from is None else event_from
            hi = math.inf if event_until is None else event_until
            records = [r for r in records if lo <= (r.event_at if r.event_at is not None else r.created_at) < hi]
        return records

    def recall(self, tenant: str, user_id: str, k: int, *, now: float, kinds: Sequence[Kind] | None = None,
               keys: Sequence[str] | None = None, session_id: str | None = None, query: str | None = None,
               mark_used: bool = False, event_from: float | None = None,
               event_until: float | None = None, actor: str | None = None,
               domain: str | None = None, purpose: str | None = None) -> Recalled[ScoredMemory]:
        top = self.scored(tenant, user_id, now=now, kinds=kinds, keys=keys, session_id=session_id, query=query,
                          limit=k, event_from=event_from, event_until=event_until, actor=actor, domain=domain,
                          purpose=purpose)
        if mark_used and top:
            self.ctx.store.touch(tenant, [s.memory.id for s in top if not s.memory.id.startswith("live:")],
                                 used_at=now)
        return top
