"""Prompt assembly (seed 004 §3.1): structured memories into `<USER_FACTS>` / `<USER_PREFERENCES>`, never raw history.

- Facts (fact, situation, episode kinds) go into USER_FACTS; preferences into USER_PREFERENCES, only
  with a current weight ≥ 0.5; session context (when the plan asks for it) into USER_CONTEXT.
- Items are taken in priority order (score = importance × weight) until the token budget is spent.
- Hypotheses (source `inferred`) are never injected as facts or preferences: active inferences and derived
  attributes (understand/usermodel.py) go into their own USER_INFERENCES block, each marked as inferred or
  derived; approved procedures into AGENT_PROCEDURES. Both come after the memories in priority.
- Poisoning defence: every value is JSON-encoded with `<`, `>`, `&` and the Unicode line separators
  escaped (\\u003c ...), so a stored value cannot close a tag or open a new one; values that read as
  instructions (policy/injection.py) are withheld and reported instead of injected, and values addressed to
  the reader ("you must…") are injected only as `{"quoted_user_statement": …}` and reported in `quoted`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from usermem.model import Kind, ScoredMemory, Source, Withheld, WithheldReason
from usermem.policy.injection import quote_if_instruction
from usermem.understand.plan import RecallPlan
from usermem.understand.text import estimate_tokens

PREFERENCE_MIN_WEIGHT = 0.5
FACT_TAG, PREF_TAG, CONTEXT_TAG = "USER_FACTS", "USER_PREFERENCES", "USER_CONTEXT"
INFER_TAG, PROC_TAG = "USER_INFERENCES", "AGENT_PROCEDURES"
_FACT_KINDS = frozenset({Kind.FACT, Kind.SITUATION, Kind.EPISODE})
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def safe_json(value: Any) -> str:
    """Compact JSON (ensure_ascii=False) in which no character can end or start a markup tag."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for ch, esc in _ESCAPES.items():
        text = text.replace(ch, esc)
    return text


@dataclass(frozen=True, slots=True)
class Assembly:
    """What `Memory.assemble` returns: the plan, what was selected, and the prompt block."""

    plan: RecallPlan
    facts: tuple[ScoredMemory, ...]
    preferences: tuple[ScoredMemory, ...]
    context: tuple[ScoredMemory, ...]
    prompt: str
    tokens: int
    budget_tokens: int
    dropped: tuple[str, ...] = ()  # keys left out because the budget was spent
    # Fields left out, each a `Withheld` (a str: the key, with level, reason and question): values that read
    # as an instruction (reason instruction_like) and fields this reader may not see (needs_grant, disabled,
    # private_to_domain). Plain keys from `assemble()` alone; `Understanding.assemble` adds the reasons.
    withheld: tuple[str, ...] = ()
    used_ids: tuple[str, ...] = field(default=())
    quoted: tuple[str, ...] = ()  # keys rendered as a quoted user statement (policy/injection.py), flagged
    inferences: tuple[str, ...] = ()  # keys in USER_INFERENCES (inferred or derived, never known)
    procedures: tuple[str, ...] = ()  # approved procedures in AGENT_PROCEDURES

    def to_dict(self) -> dict[str, Any]:
        def items(sel: Sequence[ScoredMemory]) -> list[dict[str, Any]]:
            return [{"key": s.memory.key, "value": s.memory.value, "kind": s.memory.kind.value,
                     "source": s.memory.source.value, "weight": round(s.weight, 4), "score": round(s.score, 4),
                     "id": s.memory.id} for s in sel]

        return {"plan": self.plan.to_dict(), "plan_mode": self.plan.mode, "facts": items(self.facts),
                "preferences": items(self.preferences), "context": items(self.context), "prompt": self.prompt,
                "tokens": self.tokens, "budget_tokens": self.budget_tokens, "dropped": list(self.dropped),
                "withheld": [w.to_dict() if isinstance(w, Withheld)
                             else Withheld(w, reason=WithheldReason.INSTRUCTION_LIKE).to_dict()
                             for w in self.withheld], "quoted": list(self.quoted),
                "inferences": list(self.inferences), "procedures": list(self.procedures)}


def _block(tag: str, entries: dict[str, Any]) -> str:
    return f"<{tag}>{safe_json(entries)}</{tag}>"


def render(facts: dict[str, Any], prefs: dict[str, Any], context: dict[str, Any] | None = None) -> str:
    parts = [_block(FACT_TAG, facts), _block(PREF_TAG, prefs)]
    if context:
        parts.append(_block(CONTEXT_TAG, context))
    return "\n".join(parts)


def assemble(plan: RecallPlan, candidates: Sequence[ScoredMemory], budget_tokens: int,
             context: Sequence[ScoredMemory] = (), *, inferences: Mapping[str, Any] | None = None,
             procedures: Sequence[str] = ()) -> Assembly:
    """Select and render. `candidates` are the scored live memories of the planned keys (any order);
    `inferences` (key → rendered inference) and `procedures` are added in their own blocks while the budget
    allows."""
    eligible: list[tuple[str, ScoredMemory]] = []
    withheld: list[str] = []
    quoted: list[str] = []
    for s in candidates:
        r = s.memory
        if r.source is Source.INFERRED:
            continue  # a hypothesis is never presented as a fact or preference (see `inferences`)
        if r.kind in _FACT_KINDS:
            eligible.append((FACT_TAG, s))
        elif r.kind is Kind.PREFERENCE and s.weight >= PREFERENCE_MIN_WEIGHT:
            eligible.append((PREF_TAG, s))
    eligible += [(CONTEXT_TAG, s) for s in context]
    # Priority: the plan's priority does not reorder items; score (importance × weight) does, facts
    # first on ties, so the most important memory is the last to be cut.
    tag_rank = {FACT_TAG: 0, PREF_TAG: 1, CONTEXT_TAG: 2}
    eligible.sort(key=lambda t: (-t[1].score, tag_rank[t[0]], t[1].memory.key))
    chosen: dict[str, dict[str, Any]] = {FACT_TAG: {}, PREF_TAG: {}, CONTEXT_TAG: {}}
    picked: dict[str, list[ScoredMemory]] = {FACT_TAG: [], PREF_TAG: [], CONTEXT_TAG: []}
    dropped: list[str] = []
    tokens = estimate_tokens(render({}, {}))
    for tag, s in eligible:
        r = s.memory
        if r.key in chosen[tag]:
            continue
        rendered, flagged = quote_if_instruction(r.value)  # second line of defence (policy/injection.py)
        if rendered is None:
            withheld.append(r.key)
            continue
        trial = {**chosen[tag], r.key: rendered}
        trial_all = {**chosen, tag: trial}
        cost = estimate_tokens(render(trial_all[FACT_TAG], trial_all[PREF_TAG], trial_all[CONTEXT_TAG]))
        if cost > budget_tokens:
            dropped.append(r.key)
            continue
        chosen[tag] = trial
        picked[tag].append(s)
        if flagged:
            quoted.append(r.key)
        tokens = cost
    prompt = render(chosen[FACT_TAG], chosen[PREF_TAG], chosen[CONTEXT_TAG])
    used = tuple(s.memory.id for tag in picked for s in picked[tag])
    if used:
        tokens = estimate_tokens(prompt)
    inferred: dict[str, Any] = {}
    for key, rendered in (inferences or {}).items():
        safe, _flagged = quote_if_instruction(rendered)
        if safe is None:
            withheld.append(key)
            continue
        extra = estimate_tokens(_block(INFER_TAG, {**inferred, key: safe}))
        if tokens + extra + 1 > budget_tokens:
            dropped.append(key)
            continue
        inferred[key] = safe
    if inferred:
        prompt += "\n" + _block(INFER_TAG, inferred)
        tokens = estimate_tokens(prompt)
    procs: list[str] = []
    for text in procedures:
        extra = estimate_tokens(f"<{PROC_TAG}>{safe_json([*procs, text])}</{PROC_TAG}>")
        if tokens + extra + 1 > budget_tokens:
            continue
        procs.append(text)
    if procs:
        prompt += "\n" + f"<{PROC_TAG}>{safe_json(procs)}</{PROC_TAG}>"
        tokens = estimate_tokens(prompt)
    return Assembly(plan, tuple(picked[FACT_TAG]), tuple(picked[PREF_TAG]), tuple(picked[CONTEXT_TAG]), prompt,
                    tokens, budget_tokens, tuple(dropped), tuple(withheld), used, tuple(quoted), tuple(inferred),
                    tuple(procs))
