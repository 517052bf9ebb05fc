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
from dataclasses import replace
from typing import TYPE_CHECKING

from usermem.engine.context import EngineContext
from usermem.engine.ports import Relevance
from usermem.engine.sessions import visible_context
from usermem.model import KIND_REGISTRY, EventWindow, Kind, MemoryRecord, Recalled, ScoredMemory, Withheld
from usermem.policy import wording
from usermem.policy.contracts import ContractSet, FieldContract
from usermem.policy.decay import weight_of
from usermem.policy.wording import detect_language
from usermem.store.base import LiveQuery, ScoreRow

if TYPE_CHECKING:
    from usermem.engine.consent import ConsentState
    from usermem.engine.grants import AccessGate
    from usermem.engine.resolvers import LiveResolvers

# (query, records) -> relevance in [0, 1] per record, same order (the call part of ports.Relevance).
RelevanceFn = Callable[[str, Sequence[MemoryRecord]], Sequence[float]]
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


class RecallPipeline:
    def __init__(self, ctx: EngineContext, *, gate_for: GateFor | None = None, live: LiveResolvers | None = None,
                 relevance: Relevance | None = None) -> None:
        self.ctx = ctx
        # Query relevance (engine/ports.Relevance, e.g. relevance/hybrid.py); None: no query ranking.
        self.relevance = relevance
        # Tiered authorization (engine/grants.py). Without it, recall fails closed: L2/L3 fields are never
        # returned.
        self.gate_for = gate_for
        # Live fields (engine/resolvers.py): values read from the system of record at recall time.
        self.live = live
        # Consent requests (engine/consent.py): which withheld fields the user declined or was asked about.
        self.consent_for: ConsentFor | None = None

    def use_consent(self, consent_for: ConsentFor | None) -> None:
        """Plug in the consent-request state recall marks its withheld fields with (the composition root)."""
        self.consent_for = consent_for

    def use_relevance(self, relevance: Relevance | None) -> None:
        """Plug in (or, with None, remove) query relevance; the composition root calls this."""
        self.relevance = relevance

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
        records, with their values, are fetched for the winners only. A query needs the values of
        every candidate for relevance, so it takes the full-record path.
        """
        q = LiveQuery(tenant, user_id, now, kinds=kinds, keys=keys, session_id=session_id)
        store = self.ctx.store
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
            if window is None:
                records = self._query_records(q, query, event_from, event_until)
            full = {r.id: r for r in records}
            rows = [ScoreRow(r.id, r.kind.value, r.key, r.confidence, r.importance, r.created_at, r.last_used_at,
                             r.last_confirmed_at) for r in records]
            if query and self.relevance is not None:
                relevance = dict(zip(full, self.relevance(query, records), strict=True))
        else:
            rows = store.live_scores(q)
        if not rows and self.live is None:  # live fields are resolved even for a user with no stored memory
            return Recalled()
        asked: dict[str, str | None] = {}  # the user's language, looked up once when a question is due
        settings = self.ctx.settings
        confirm_at, drop_at = settings.confirm_threshold, settings.drop_threshold
        contracts = self.ctx.contracts_for(tenant)
        gate = self.gate_for(tenant, user_id, now, actor, domain) if self.gate_for is not None else None
        # (score, weight, flagged, row). Per-key policy: unknown keys depend only on their kind.
        ranked: list[tuple[float, float, bool, ScoreRow]] = []
        by_kind = {k.value: _key_policy(None, k) for k in Kind}
        by_key: dict[tuple[str, str], tuple[bool, float, bool] | None] = {}
        get_contract = contracts.get
        combine = self.relevance.combine if relevance is not None and self.relevance is not None else None
        hidden: dict[tuple[str, str], str | None] = {}  # (kind, key) -> why it is withheld (None: not reported)
        withheld: dict[str, str] = {}  # key -> reason, for keys with a value this read would otherwise return
        for row in rows:
            contract = get_contract(row.key)
            if contract is None:
                pol = by_kind[row.kind]
            else:
                pk = (row.kind, row.key)
                if pk not in by_key:
                    # L2/L3 need an active grant; a live field's stored copy is never preferred to the live value.
                    why = None if contract.live else (gate.why_not(contract) if gate is not None
                                                      else (None if contract.sensitivity.value == "L1"
                                                            else "needs_grant"))
                    by_key[pk] = _key_policy(contract, Kind(row.kind)) if not contract.live and why is None else None
                    if by_key[pk] is None and not contract.live:
                        hidden[pk] = "disabled" if not contract.enabled else why
                pol = by_key[pk]
            if pol is None:  # field disabled or not visible to this reader: reported, never returned
                reason = hidden.get((row.kind, row.key)) if contract is not None else None
                if reason is not None and row.key not in withheld and contract is not None \
                        and self._alive(row, contract, now):
                    withheld[row.key] = reason
                continue
            _, half_life, judged_by_weight = pol
            w = weight_of(row.confidence, half_life, row.created_at, row.last_confirmed_at, row.last_used_at, now)
            if judged_by_weight and w < drop_at:
                continue
            rel = relevance[row.id] if relevance is not None else 1.0
            score = combine(rel, row.importance, w) if combine is not None else row.importance * w * rel
            ranked.append((score, w, judged_by_weight and w < confirm_at, row))
        if any(t[3].kind == "context" for t in ranked):  # after the weight cut: only context still alive
            keep = self._scope_context(tenant, user_id, [t[3] for t in ranked], full, now, session_id)
            ranked = [t for t in ranked if t[3].kind != "context" or t[3].id in keep]
        # Ties break on recency then id, so the order is deterministic for equal scores.
        order = lambda t: (-t[0], -t[3].created_at, t[3].id)  # noqa: E731
        if limit is not None and limit < len(ranked):
            ranked = heapq.nsmallest(limit, ranked, key=order)
        else:
            ranked.sort(key=order)
        if full is None:
            full = {r.id: r for r in store.get_many(tenant, [t[3].id for t in ranked])}
        out: list[ScoredMemory] = []
        for score, w, flag, row in ranked:
            record = full.get(row.id)
            if record is None:  # deleted between the two reads
                continue
            question = confirmation_question(record, contracts.get(row.key),
                                             self._user_language(tenant, user_id, now, asked)) if flag else None
            out.append(ScoredMemory(record, score, w, relevance[row.id] if relevance is not None else None,
                                    flag, question, window))
        if self.live is not None:
            allows = gate.allows if gate is not None else (lambda c: c.sensitivity.value == "L1")
            extra = self.live.scored(tenant, user_id, now, contracts, allows, kinds, keys)
            if extra:
                out = sorted(out + extra, key=lambda s: (-s.score, -s.memory.created_at, s.memory.id))
                out = out[:limit] if limit is not None else out
        if gate is not None and out:
            gate.audit_reads([s.memory for s in out], contracts)
        if not withheld:
            return Recalled(out)
        return Recalled(out, self._withheld(tenant, user_id, now, withheld, contracts, asked, purpose,
                                            [s.memory.value for s in out]))

    def _alive(self, row: ScoreRow, contract: FieldContract, now: float) -> bool:
        """Would this row be returned if the reader could see it (not decayed away)?"""
        kind = Kind(row.kind)
        if not KIND_REGISTRY[kind].volatile or contract.standing:
            return True
        w = weight_of(row.confidence, contract.effective_half_life(), row.created_at, row.last_confirmed_at,
                      row.last_used_at, now)
        return w >= self.ctx.settings.drop_threshold

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

    def _query_records(self, q: LiveQuery, query: str | None, event_from: float | None,
                       event_until: float | None) -> list[MemoryRecord]:
        """Full records for a query or an event-time window: the relevance plug-in's candidates when it
        offers them (plus live memories of kinds it does not index), else every live memory."""
        store = self.ctx.store
        rel = self.relevance if query else None
        keys = rel.candidates(q.tenant, q.user_id, query, kinds=q.kinds, at_from=event_from, at_until=event_until) \
            if rel is not None and query else None
        if keys is None:
            records = store.live(q)
        else:
            if q.keys is not None:
                wanted = set(q.keys)
                keys = [k for k in keys if k in wanted]
            records = store.live(replace(q, keys=keys)) if keys else []
            indexed = rel.indexed_kinds if rel is not None else frozenset()
            others = [k for k in (q.kinds or list(Kind)) if k not in indexed]
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
