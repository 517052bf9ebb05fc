"""The read path: fetch a user's live memories, weigh them, rank them, flag the stale ones.

score = importance × weight(now) [× relevance when a query is given]. Weight decays from the last
confirmation and is lifted by use (policy/decay.py). Only volatile kinds (preference, context) that
are not standing fields are flagged for confirmation or dropped by weight; facts, situations and
episodes live until their TTL and are merely ranked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from usermem.engine.context import EngineContext
from usermem.model import KIND_REGISTRY, Kind, MemoryRecord, ScoredMemory
from usermem.policy.contracts import FieldContract
from usermem.policy.decay import DecayInput, weight
from usermem.store.base import LiveQuery

# (query, records) -> relevance in [0, 1] per record, same order. Plugged in by the relevance package.
RelevanceFn = Callable[[str, Sequence[MemoryRecord]], Sequence[float]]
# Questions asked when a volatile memory's weight falls below the confirm threshold.
_GENERIC_QUESTION = {
    "zh": "关于「{key}」，您还是「{value}」吗？",
    "en": "Is this still right for {key}: {value}?",
}


def detect_language(text: str) -> str:
    """'zh' when the text has CJK characters, else 'en'. Enough to pick a question template."""
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"


def confirmation_question(record: MemoryRecord, contract: FieldContract | None, language: str | None = None) -> str:
    value = record.value if isinstance(record.value, str) else str(record.value)
    lang = language or detect_language(value)
    if contract is not None and lang in contract.questions:
        return contract.questions[lang]
    return _GENERIC_QUESTION.get(lang, _GENERIC_QUESTION["en"]).format(key=record.key, value=value)


class RecallPipeline:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.relevance: RelevanceFn | None = None

    def weigh(self, record: MemoryRecord, now: float) -> float:
        contract = self.ctx.contracts.get(record.key)
        half_life = contract.effective_half_life() if contract else KIND_REGISTRY[record.kind].half_life_seconds
        return weight(DecayInput(record.confidence, half_life, record.created_at, record.last_confirmed_at,
                                 record.last_used_at), now)

    def scored(self, tenant: str, user_id: str, *, now: float, kinds: Sequence[Kind] | None = None,
               keys: Sequence[str] | None = None, session_id: str | None = None,
               query: str | None = None) -> list[ScoredMemory]:
        """Every live memory of the user, scored and flagged, best first (no cut to k)."""
        records = self.ctx.store.live(LiveQuery(tenant, user_id, now, kinds=kinds, keys=keys, session_id=session_id))
        if not records:
            return []
        settings = self.ctx.settings
        relevance: Sequence[float] | None = None
        if query and self.relevance is not None:
            relevance = self.relevance(query, records)
        out: list[ScoredMemory] = []
        for i, r in enumerate(records):
            contract = self.ctx.contracts.get(r.key)
            if contract is not None and not contract.enabled:
                continue  # disabling a field stops recall at once
            w = self.weigh(r, now)
            judged_by_weight = KIND_REGISTRY[r.kind].volatile and not (contract and contract.standing)
            if judged_by_weight and w < settings.drop_threshold:
                continue
            flag = judged_by_weight and w < settings.confirm_threshold
            rel = relevance[i] if relevance is not None else None
            score = r.importance * w * (rel if rel is not None else 1.0)
            out.append(ScoredMemory(r, score, w, rel, flag, confirmation_question(r, contract) if flag else None))
        # Ties break on recency then id, so the order is deterministic for equal scores.
        out.sort(key=lambda s: (-s.score, -s.memory.created_at, s.memory.id))
        return out

    def recall(self, tenant: str, user_id: str, k: int, *, now: float, kinds: Sequence[Kind] | None = None,
               keys: Sequence[str] | None = None, session_id: str | None = None, query: str | None = None,
               mark_used: bool = False) -> list[ScoredMemory]:
        top = self.scored(tenant, user_id, now=now, kinds=kinds, keys=keys, session_id=session_id, query=query)[:k]
        if mark_used and top:
            self.ctx.store.touch(tenant, [s.memory.id for s in top], used_at=now)
        return top
