"""The user model (seed 004 UserMentalModel; seed 000 procedural memory), built so that inferred data never
poses as known data: every inference carries its evidence, confidence and rule, has the lowest authority
(source `inferred`), is shown apart (`<USER_INFERENCES>`), and can be confirmed, rejected or erased.

Three mechanisms, all kept in the documents table beside the memories (so erasing a user erases them):

- **Inferred preferences** — signals ("再精简", "shorter please", an app reporting that the user chose the
  same option again) accumulate per user and field; past the tenant's threshold an inference is proposed
  with `policy.usermodel.inference_confidence`. In `confirm` mode (default) it becomes a pending
  verification with a question in the user's language (accept → `user_confirmed`); in `active` mode it is
  also written as an `inferred` memory at low importance (the write path's source priority keeps it from
  overriding anything stated). A rejection suppresses the same inference for `suppress_days`.
- **Derived attributes** — per-tenant, versioned rules (`policy.usermodel.DeriveRule`, a default set
  shipped) are evaluated when their input fields change (in the background: the engine queues users on
  change events) and stored with their `why`. At read time an attribute whose inputs are no longer current,
  or are withheld from the reader (L2/L3 without a grant), is not shown.
- **Procedures** — proposed by rules (a standing "from now on, always … first") or by an LLM/operator into a
  review queue with evidence; approval needs a recorded evaluation; approved procedures are injected in
  `<AGENT_PROCEDURES>` and can be rolled back. Every transition is audited.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from usermem.errors import InvalidArgument, NotFound, ProviderError, ValidationError
from usermem.model import AuditEvent, Kind, ScoredMemory, Source, WriteRequest, new_id
from usermem.policy import usermodel as um
from usermem.policy.guards import check_guards
from usermem.policy.pii import redact
from usermem.policy.validate import InputProblem, check_key, shown, value_arg
from usermem.store.base import LiveQuery
from usermem.understand import verification as vf
from usermem.understand.llm import LLMClient
from usermem.understand.ports import MemoryHost
from usermem.understand.text import check_text, cjk_compile, detect_language

ACTOR = "usermem.usermodel"
SIGNAL_NS = "signals"
SUPPRESS_NS = "inference_suppressed"
POLICY_NS = "usermodel"
POLICY_KEY = "inference_policy"
RULES_NS = um.RULES_NS
DERIVED_NS = "derived"
PROCEDURES_NS = "procedures"
SIGNAL_WINDOW = 90 * 86_400.0
MAX_EVENTS = 50
EXCERPT = 160
MAX_PROCEDURES = 500


@dataclass(frozen=True, slots=True)
class Signal:
    key: str
    value: dict[str, str]  # the value in each language ({"zh": "简洁", "en": "concise"})
    canonical: str


# Requests about the reply in front of the user ("make this shorter"), as opposed to standing instructions
# ("以后简短点", extraction's business) and complaints ("太长了", reflexive verification's).
_SIGNALS: tuple[tuple[re.Pattern[str], Signal], ...] = tuple(
    (re.compile(rx, re.IGNORECASE), Signal(key, value, canonical))
    for rx, key, value, canonical in (
        (r"再精简|精简一[点些下]|简短[一]?[点些]|短一[点些]|说短点|简单点说|长话短说|"
         r"shorter,? please|make (it|this) shorter|keep it short|more concise|be brief|briefer|shorten (it|this)",
         "reply_length", {"zh": "简洁", "en": "concise"}, "short"),
        (r"详细一[点些]|再详细|展开说说|多讲一[点些]|说具体点|"
         r"more detail|elaborate|go deeper|explain (it )?more|in more depth",
         "reply_length", {"zh": "详细", "en": "detailed"}, "detailed"),
        (r"用表格|做成表格|列个表|表格形式|as a table|in a table|tabulate",
         "reply_format", {"zh": "表格", "en": "table"}, "table"),
        (r"分点列出|列出要点|用列表|分条|bullet points|as a list|in bullets",
         "reply_format", {"zh": "列表", "en": "list"}, "list"),
    )
)
_NEGATED = re.compile(r"(不用|不要|别|无需|不必|don'?t|do not|no need to|never)\s*\S{0,3}$", re.IGNORECASE)

# Standing procedural requests: "以后每次…都先…", "from now on, always … first".
_PROCEDURE = cjk_compile(
    r"(以后|今后|往后|每次)[^。！？!?]{0,12}(都|总是|一律)?[^。！？!?]{0,6}先[^。！？!?]{2,60}"
    r"|(from now on|in future|every time|whenever)[^.!?]{0,80}\b(always|first)\b[^.!?]{0,80}",
    re.IGNORECASE)


def detect_signals(text: str) -> list[Signal]:
    """Signals in one user message (at most one per field; negated requests are not signals)."""
    found: dict[str, Signal] = {}
    for pattern, signal in _SIGNALS:
        if signal.key in found:
            continue
        m = pattern.search(text)
        if m is None or _NEGATED.search(text[: m.start()]):
            continue
        found[signal.key] = signal
    return list(found.values())


def detect_procedure(text: str) -> str | None:
    """The standing procedural request in a message, if it states one (the matched sentence)."""
    m = _PROCEDURE.search(text)
    return m.group(0).strip() if m else None


def excerpt(text: str) -> str:
    """Evidence kept from a message: personal data redacted, at most EXCERPT characters."""
    return redact(text)[:EXCERPT]


# -- records ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DerivedAttribute:
    key: str
    value: str
    rule_id: str
    rule_version: int
    inputs: tuple[dict[str, str], ...]  # [{key, memory_id}]
    computed_at: float

    def why(self, language: str) -> str:
        keys = ", ".join(i["key"] for i in self.inputs)
        if language == "zh":
            return f"由规则「{self.rule_id}」（第 {self.rule_version} 版）根据 {keys} 推导"
        return f"derived by rule {self.rule_id} (version {self.rule_version}) from {keys}"

    def to_dict(self, language: str = "en") -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "rule_id": self.rule_id, "rule_version": self.rule_version,
                "inputs": [dict(i) for i in self.inputs], "computed_at": self.computed_at, "why": self.why(language)}


@dataclass(frozen=True, slots=True)
class UserModel:
    """What `Memory.model` returns: what is known, what is only inferred (with evidence), and what to ask."""

    tenant: str
    user_id: str
    language: str
    facts: tuple[dict[str, Any], ...] = ()
    preferences: tuple[dict[str, Any], ...] = ()  # weighted
    context: tuple[dict[str, Any], ...] = ()
    inferred: tuple[dict[str, Any], ...] = ()  # active inferred memories and pending inferences, with evidence
    derived: tuple[dict[str, Any], ...] = ()  # derived attributes with their `why`
    procedures: tuple[dict[str, Any], ...] = ()  # approved procedures that apply to this user
    open_questions: tuple[dict[str, Any], ...] = ()  # pending verifications (confirmations to ask)
    withheld: tuple[str, ...] = ()  # derived attributes not shown: an input needs a grant

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "user_id": self.user_id, "language": self.language,
                "facts": list(self.facts), "preferences": list(self.preferences), "context": list(self.context),
                "inferred": list(self.inferred), "derived": list(self.derived), "procedures": list(self.procedures),
                "open_questions": list(self.open_questions), "withheld": list(self.withheld)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UserModel:
        return cls(tenant=d["tenant"], user_id=d["user_id"], language=d["language"],
                   facts=tuple(d.get("facts", ())), preferences=tuple(d.get("preferences", ())),
                   context=tuple(d.get("context", ())), inferred=tuple(d.get("inferred", ())),
                   derived=tuple(d.get("derived", ())), procedures=tuple(d.get("procedures", ())),
                   open_questions=tuple(d.get("open_questions", ())), withheld=tuple(d.get("withheld", ())))


def _memory_item(s: ScoredMemory) -> dict[str, Any]:
    r = s.memory
    return {"id": r.id, "key": r.key, "value": r.value, "kind": r.kind.value, "source": r.source.value,
            "weight": round(s.weight, 4), "confidence": r.confidence, "needs_confirmation": s.needs_confirmation}


@dataclass
class Blocks:
    """What assembly adds beside the memories: inferences (key → rendered) and procedures (texts)."""

    inferences: dict[str, Any] = field(default_factory=dict)
    procedures: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)


class UserModeler:
    """The user-model pipelines over the engine host (understand/ports.MemoryHost)."""

    def __init__(self, host: MemoryHost) -> None:
        self.host = host

    # -- plumbing ------------------------------------------------------------------------------------

    def _audit(self, tenant: str, user_id: str | None, action: str, op: str, at: float, *, key: str | None = None,
               detail: Mapping[str, Any] | None = None, actor: str | None = None) -> None:
        self.host.store.append_audit(AuditEvent(tenant=tenant, at=at, action=action, user_id=user_id, key=key,
                                                op=op, actor=actor or ACTOR, detail=dict(detail or {})))

    def _check_key(self, tenant: str, key: object, name: str = "key") -> str:
        if not isinstance(key, str):
            raise InvalidArgument(f"{name} must be a str")
        try:
            check_key(key)
        except InputProblem as exc:
            raise ValidationError(str(exc), field=name) from None
        if self.host.contracts_for(tenant).is_forbidden(key):
            raise ValidationError(f"field {key!r} may never be stored", field=name)
        return key

    def _check_value(self, tenant: str, key: str, value: Any) -> None:
        value_arg(value)  # the value rules of a write first: it is kept in a document (finite, valid text, sized)
        contracts = self.host.contracts_for(tenant)
        verdict = check_guards(key, value, contracts.get(key), contracts)
        if verdict is not None:
            raise ValidationError(verdict.detail, field="value")

    def _language(self, tenant: str, user_id: str, at: float) -> str:
        found = self.host.store.live(LiveQuery(tenant, user_id, at, keys=["language"]))
        if found and isinstance(found[0].value, str):
            v = found[0].value.lower()
            if v.startswith("en") or "english" in v or "英" in v:
                return "en"
            if v.startswith("zh") or "中" in v or "chinese" in v:
                return "zh"
        return "en"

    # -- inference policy ------------------------------------------------------------------------------

    def inference_policy(self, tenant: str) -> um.InferencePolicy:
        self.host.check_ids(tenant, "-")
        doc = self.host.store.get_doc(tenant, POLICY_NS, POLICY_KEY)
        return um.InferencePolicy.from_dict(doc) if doc else um.InferencePolicy()

    def set_inference_policy(self, tenant: str, policy: Mapping[str, Any] | um.InferencePolicy, *,
                             actor: str | None = None, now: float | None = None) -> um.InferencePolicy:
        self.host.check_ids(tenant, "-")
        parsed = policy if isinstance(policy, um.InferencePolicy) else um.InferencePolicy.from_dict(policy)
        at = self.host.now(now)
        self.host.store.put_doc(tenant, POLICY_NS, POLICY_KEY, parsed.to_dict(), now=at)
        self._audit(tenant, None, "usermodel", "inference_policy", at, detail=parsed.to_dict(), actor=actor)
        return parsed

    # -- signals → inferred preferences -------------------------------------------------------------------

    def _suppressed_until(self, tenant: str, user_id: str, key: str, token: str, at: float) -> float | None:
        doc = self.host.store.get_doc(tenant, SUPPRESS_NS, f"{user_id}|{key}|{_digest(token)}", now=at)
        until = doc.get("until") if doc else None
        return float(until) if isinstance(until, int | float) and until > at else None

    def suppressed(self, tenant: str, user_id: str, key: str, value: Any, at: float) -> bool:
        return self._suppressed_until(tenant, user_id, key, um.value_token(value), at) is not None

    def suppress(self, tenant: str, user_id: str, key: str, value: Any, at: float) -> float:
        """A denied inference: the same (field, value) is not proposed again for the tenant's suppress_days."""
        token = um.value_token(value)
        until = at + self.inference_policy(tenant).suppress_days * 86_400.0
        self.host.store.put_doc(tenant, SUPPRESS_NS, f"{user_id}|{key}|{_digest(token)}",
                                {"key": key, "until": until}, now=at, user_id=user_id, expires_at=until)
        # the signals that led to it are spent
        self.host.store.delete_doc(tenant, SIGNAL_NS, f"{user_id}|{key}")
        return until

    def record_signal(self, tenant: str, user_id: str, key: str, value: Any, *, agree: bool = True,
                      message: str = "", memory_id: str | None = None, canonical: str | None = None,
                      now: float | None = None, occurrence: str | None = None) -> dict[str, Any]:
        """Count one signal for `key` = `value` (or against it, `agree=False`); past the threshold, propose."""
        self.host.check_ids(tenant, user_id)
        key = self._check_key(tenant, key)
        if value is None:
            raise ValidationError("a signal names the value it points to", field="value")
        self._check_value(tenant, key, value)
        check_text("message", message)
        if memory_id is not None and (not isinstance(memory_id, str) or len(memory_id) > 64):
            raise InvalidArgument("memory_id must be a memory version id")
        if not isinstance(agree, bool):
            raise InvalidArgument("agree must be true or false")
        at = self.host.now(now)
        policy = self.inference_policy(tenant)
        token = canonical if canonical is not None else um.value_token(value)
        store = self.host.store
        doc_key = f"{user_id}|{key}"
        doc = store.get_doc(tenant, SIGNAL_NS, doc_key, now=at) or {"key": key, "events": [], "seen": []}
        seen = list(doc.get("seen", []))
        events = [e for e in doc.get("events", []) if at - SIGNAL_WINDOW <= e["at"] <= at]
        if occurrence is None or occurrence not in seen:
            evidence = {"message": excerpt(message)} if message else {}
            if memory_id:
                evidence["memory_id"] = memory_id
            events = [*events, {"at": at, "token": token, "value": value, "agree": agree,
                                "evidence": evidence}][-MAX_EVENTS:]
            if occurrence is not None:
                seen = [*seen, occurrence][-MAX_EVENTS:]
            store.put_doc(tenant, SIGNAL_NS, doc_key, {"key": key, "events": events, "seen": seen}, now=at,
                          user_id=user_id, expires_at=at + SIGNAL_WINDOW)
        agreeing = sum(1 for e in events if e["token"] == token and e["agree"])
        contradicting = sum(1 for e in events if (e["token"] == token) != bool(e["agree"]))
        confidence = um.inference_confidence(agreeing, contradicting)
        out: dict[str, Any] = {"key": key, "value": value, "agree": agreeing, "contradict": contradicting,
                               "confidence": confidence, "threshold": policy.threshold, "mode": policy.mode,
                               "inference": None, "suppressed_until": None}
        suppressed = self._suppressed_until(tenant, user_id, key, token, at)
        if suppressed is not None:
            out["suppressed_until"] = suppressed
            return out
        pending = self._pending(tenant, user_id, key)
        evidence_list = [e["evidence"] for e in events if e["token"] == token and e["agree"] and e["evidence"]]
        if pending is not None:
            if pending.get("token", um.value_token(pending.get("value"))) == token and pending.get("origin") == "signals":
                pending = {**pending, "confidence": confidence, "evidence_count": agreeing,
                           "contradicting": contradicting, "evidence": evidence_list[-10:]}
                store.put_doc(tenant, vf.VERIFY_NS, pending["id"], pending, now=at, user_id=user_id)
            out["inference"] = pending
            return out
        if agreeing - 2 * contradicting < policy.threshold:
            return out
        if self._already_current(tenant, user_id, key, token, at):
            return out
        out["inference"] = self._propose(tenant, user_id, key, value, token, confidence, agreeing, contradicting,
                                         evidence_list[-10:], policy, at)
        return out

    def _already_current(self, tenant: str, user_id: str, key: str, token: str, at: float) -> bool:
        for r in self.host.store.live(LiveQuery(tenant, user_id, at, keys=[key])):
            if r.source is not Source.INFERRED and um.value_token(r.value) in {token, um.value_token(token)}:
                return True
            canonical = getattr(r, "canonical", None)
            if canonical is not None and um.value_token(canonical) == token:
                return True
        return False

    def _pending(self, tenant: str, user_id: str, key: str) -> dict[str, Any] | None:
        docs = self.host.store.list_docs(tenant, vf.VERIFY_NS, user_id=user_id)
        return next((d for _, d in docs if d.get("status") == "pending" and d.get("key") == key), None)

    def _propose(self, tenant: str, user_id: str, key: str, value: Any, token: str, confidence: float,
                 agreeing: int, contradicting: int, evidence: list[dict[str, Any]], policy: um.InferencePolicy,
                 at: float) -> dict[str, Any]:
        contract = self.host.contracts_for(tenant).get(key)
        kind = contract.kind.value if contract is not None else Kind.PREFERENCE.value
        memory_id = None
        if policy.mode == "active":
            result = self.host.write(tenant, user_id, WriteRequest(
                kind=kind, key=key, value=value, source=Source.INFERRED.value, confidence=confidence,
                importance=um.ACTIVE_IMPORTANCE), now=at, actor=ACTOR)
            memory_id = result.memory.id if result.ok and result.memory is not None else None
        vid = new_id()
        doc = {"id": vid, "user_id": user_id, "key": key, "kind": kind, "value": value, "token": token,
               "source": "inferred", "origin": "signals", "confidence": confidence, "evidence_count": agreeing,
               "contradicting": contradicting, "evidence": evidence, "status": "pending",
               "active_memory_id": memory_id, "question": vf.questions(key, value), "created_at": at,
               "rule": f"{agreeing} agreeing, {contradicting} contradicting signals; "
                       f"confidence = 1 - {um.MISS}^(agree - 2*contradict)"}
        self.host.store.put_doc(tenant, vf.VERIFY_NS, vid, doc, now=at, user_id=user_id)
        self._audit(tenant, user_id, "verification", "infer", at, key=key,
                    detail={"verification_id": vid, "confidence": confidence, "mode": policy.mode})
        return doc

    def observe(self, tenant: str, user_id: str, role: str, text: str, at: float, occurrence: str | None) -> None:
        """Signals and procedure proposals in one message of a conversation (called by ingestion)."""
        if role != "user":
            return
        lang = detect_language(text)
        for s in detect_signals(text):
            self.record_signal(tenant, user_id, s.key, s.value.get(lang, s.value["en"]), message=text,
                               canonical=s.canonical, now=at, occurrence=occurrence)
        proc = detect_procedure(text)
        if proc is not None and check_guards("procedure", proc, None, self.host.contracts_for(tenant)) is None:
            self.add_procedure(tenant, proc, user_id=user_id, evidence=[{"message": excerpt(text)}],
                                    proposed_by="rules", at=at, dedupe=True)

    # -- derived attributes ---------------------------------------------------------------------------------

    def _rule_docs(self, tenant: str) -> dict[str, dict[str, Any]]:
        return dict(self.host.store.list_docs(tenant, RULES_NS, limit=um.RULE_DOCS_READ))

    def rules(self, tenant: str) -> list[um.DeriveRule]:
        """The tenant's rules: the shipped defaults, overridden by id by the tenant's own versions."""
        self.host.check_ids(tenant, "-")
        return um.tenant_rules(self._rule_docs(tenant))

    def rule_history(self, tenant: str, rule_id: str) -> list[dict[str, Any]]:
        doc = self.host.store.get_doc(tenant, RULES_NS, rule_id)
        return list(doc.get("history", [])) if doc else []

    def set_rule(self, tenant: str, rule: Mapping[str, Any] | um.DeriveRule, *, actor: str | None = None,
                 now: float | None = None) -> um.DeriveRule:
        """Create or change a rule (a new version; the previous one stays in its history)."""
        self.host.check_ids(tenant, "-")
        if isinstance(rule, Mapping) and (unknown := set(rule) - um.RULE_FIELDS):
            # refused, as an unknown contract field is, rather than silently dropped
            raise ValidationError(f"unknown rule fields: {', '.join(sorted(shown(k) for k in unknown))} (a rule has "
                                  f"{', '.join(sorted(um.RULE_FIELDS))})", field="rule")
        parsed = rule if isinstance(rule, um.DeriveRule) else um.DeriveRule.from_dict(rule)
        at = self.host.now(now)
        self._check_key(tenant, parsed.then_key, "then_key")
        for key in parsed.when:
            self._check_key(tenant, key, "when")
        for text in parsed.then.values():
            self._check_value(tenant, parsed.then_key, text)
        current = {r.id: r for r in self.rules(tenant)}
        if parsed.id not in current and len(current) >= um.MAX_RULES:
            raise ValidationError(f"at most {um.MAX_RULES} rules per tenant", field="id")
        previous = current.get(parsed.id)
        version = previous.version + 1 if previous is not None else 1
        stored = um.DeriveRule(parsed.id, parsed.when, parsed.then_key, parsed.then, version, parsed.status,
                               parsed.proposed_by)
        doc = self.host.store.get_doc(tenant, RULES_NS, parsed.id) or {"history": []}
        history = [*doc.get("history", []), {**stored.to_dict(), "at": at, "actor": actor or ACTOR}][-50:]
        self.host.store.put_doc(tenant, RULES_NS, parsed.id, {"current": stored.to_dict(), "history": history},
                                now=at)
        self._audit(tenant, None, "derive_rule", stored.status, at, key=stored.then_key,
                    detail={"rule_id": stored.id, "version": version}, actor=actor)
        return stored

    def approve_rule(self, tenant: str, rule_id: str, *, actor: str | None = None,
                     now: float | None = None) -> um.DeriveRule:
        rule = next((r for r in self.rules(tenant) if r.id == rule_id), None)
        if rule is None:
            raise NotFound(f"no derivation rule {rule_id!r}")
        return self.set_rule(tenant, {**rule.to_dict(), "status": "active"}, actor=actor, now=now)

    def input_keys(self, tenant: str) -> frozenset[str]:
        return um.input_keys(self.rules(tenant))

    def refresh_derived(self, tenant: str, user_id: str, *, now: float | None = None) -> list[DerivedAttribute]:
        """Recompute a user's derived attributes from their current values (the background worker's job)."""
        self.host.check_ids(tenant, user_id)
        at = self.host.now(now)
        rules = self.rules(tenant)
        keys = sorted({k for r in rules if r.status == "active" for k in r.when})
        records = self.host.store.live(LiveQuery(tenant, user_id, at, keys=keys, kinds=self._kinds(tenant, keys))
                                       ) if keys else []
        values = {r.key: r.value for r in records if r.source is not Source.INFERRED and r.value is not None}
        ids = {r.key: r.id for r in records}
        lang = self._language(tenant, user_id, at)
        fired: dict[str, DerivedAttribute] = {}
        for d in um.derive(rules, values):
            fired[d.rule.id] = DerivedAttribute(
                key=d.rule.then_key, value=d.rule.text(lang), rule_id=d.rule.id, rule_version=d.rule.version,
                inputs=tuple({"key": k, "memory_id": ids[k]} for k in d.input_keys), computed_at=at)
        store = self.host.store
        for doc_key, _ in store.list_docs(tenant, DERIVED_NS, user_id=user_id):
            if doc_key.split("|", 1)[1] not in fired:
                store.delete_doc(tenant, DERIVED_NS, doc_key)
        for rid, attr in fired.items():
            rule = next(r for r in rules if r.id == rid)
            store.put_doc(tenant, DERIVED_NS, f"{user_id}|{rid}",
                          {"key": attr.key, "value": dict(rule.then), "rule_id": rid, "rule_version": attr.rule_version,
                           "inputs": [dict(i) for i in attr.inputs], "computed_at": at}, now=at, user_id=user_id)
        return list(fired.values())

    def _kinds(self, tenant: str, keys: Sequence[str]) -> list[Kind] | None:
        """The kinds the input fields are stored as (so a tiered store reads only the tiers that hold them)."""
        contracts = self.host.contracts_for(tenant)
        kinds = set()
        for key in keys:
            c = contracts.get(key)
            if c is None:
                return None  # a field without a contract may be of any kind
            kinds.add(c.kind)
        return sorted(kinds)

    def derived(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None,
                language: str | None = None) -> tuple[list[DerivedAttribute], list[str]]:
        """Derived attributes the reader may see, and the keys withheld (an input needs a grant).

        An attribute whose inputs are no longer the current versions (changed or forgotten, the background
        recompute not yet done) is never shown."""
        at = self.host.now(now)
        docs = [d for _, d in self.host.store.list_docs(tenant, DERIVED_NS, user_id=user_id)]
        if not docs:
            return [], []
        keys = sorted({i["key"] for d in docs for i in d["inputs"]})
        visible = {s.memory.key: s.memory.id for s in self.host.recall_scored(
            tenant, user_id, max(1, len(keys) * 4), now=at, keys=keys, actor=actor)}
        current = {r.key: r.id for r in self.host.store.live(LiveQuery(tenant, user_id, at, keys=keys))}
        lang = language or self._language(tenant, user_id, at)
        out: list[DerivedAttribute] = []
        withheld: list[str] = []
        for d in docs:
            inputs = d["inputs"]
            if any(current.get(i["key"]) != i["memory_id"] for i in inputs):
                continue  # stale: an input changed or was forgotten
            if any(visible.get(i["key"]) != i["memory_id"] for i in inputs):
                withheld.append(d["key"])
                continue
            text = d["value"].get(lang) or next(iter(d["value"].values()))
            out.append(DerivedAttribute(d["key"], text, d["rule_id"], d["rule_version"],
                                        tuple(dict(i) for i in inputs), d["computed_at"]))
        return sorted(out, key=lambda a: (a.key, a.rule_id)), sorted(set(withheld))

    # -- procedures -----------------------------------------------------------------------------------------

    def _procedure(self, tenant: str, procedure_id: str) -> dict[str, Any]:
        if not isinstance(procedure_id, str) or len(procedure_id) > 64:
            raise InvalidArgument("procedure_id must be a procedure id")
        doc = self.host.store.get_doc(tenant, PROCEDURES_NS, procedure_id)
        if doc is None:
            raise NotFound(f"no procedure {procedure_id!r}")
        return doc

    def check_procedure_text(self, tenant: str, text: Any) -> str:
        if not isinstance(text, str):
            raise InvalidArgument("text must be a str")
        check_text("text", text, 2000)
        if not text.strip():
            raise ValidationError("a procedure needs a text", field="text")
        verdict = check_guards("procedure", text, None, self.host.contracts_for(tenant))
        if verdict is not None:
            raise ValidationError(verdict.detail, field="text")
        return text

    def add_procedure(self, tenant: str, text: str, *, user_id: str | None, evidence: Sequence[Mapping[str, Any]],
                           proposed_by: str, at: float, dedupe: bool = False) -> dict[str, Any]:
        store = self.host.store
        token = um.value_token(text)
        existing = [d for _, d in store.list_docs(tenant, PROCEDURES_NS, user_id=user_id, limit=MAX_PROCEDURES)
                    if d.get("user_id") == user_id]
        if dedupe:
            same = next((d for d in existing if d.get("token") == token), None)
            if same is not None:
                return same
        if len(existing) >= MAX_PROCEDURES:
            raise ValidationError(f"at most {MAX_PROCEDURES} procedures per scope", field="text")
        pid = new_id()
        doc = {"id": pid, "user_id": user_id, "text": text, "token": token, "status": "proposed",
               "evidence": [dict(e) for e in evidence][:10], "proposed_by": proposed_by, "created_at": at,
               "history": [{"at": at, "status": "proposed", "actor": proposed_by, "text": text}]}
        store.put_doc(tenant, PROCEDURES_NS, pid, doc, now=at, user_id=user_id)
        self._audit(tenant, user_id, "procedure", "propose", at, detail={"procedure_id": pid,
                                                                         "proposed_by": proposed_by})
        return doc

    def propose_procedure(self, tenant: str, text: str, *, user_id: str | None = None,
                          evidence: Sequence[str] = (), proposed_by: str = "api",
                          now: float | None = None) -> dict[str, Any]:
        self.host.check_ids(tenant, user_id if user_id is not None else "-")
        text = self.check_procedure_text(tenant, text)
        if not isinstance(proposed_by, str) or not 0 < len(proposed_by) <= 200:
            raise ValidationError("proposed_by must be a short string", field="proposed_by")
        if isinstance(evidence, str) or not isinstance(evidence, Sequence) or len(evidence) > 10:
            raise ValidationError("evidence must be a list of at most 10 texts", field="evidence")
        items = [{"note": excerpt(check_text("evidence", e, 1000))} for e in evidence]
        return self.add_procedure(tenant, text, user_id=user_id, evidence=items, proposed_by=proposed_by,
                                       at=self.host.now(now))

    def procedures(self, tenant: str, *, user_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Procedures of the tenant (tenant-wide ones) or of one user, optionally by status, oldest first."""
        self.host.check_ids(tenant, user_id if user_id is not None else "-")
        if status is not None and status not in um.PROCEDURE_STATES:
            raise ValidationError(f"status must be one of {um.PROCEDURE_STATES}", field="status")
        docs = [d for _, d in self.host.store.list_docs(tenant, PROCEDURES_NS, user_id=user_id,
                                                        limit=MAX_PROCEDURES * 4)
                if d.get("user_id") == user_id and (status is None or d.get("status") == status)]
        return sorted(docs, key=lambda d: (d["created_at"], d["id"]))

    def review_procedure(self, tenant: str, procedure_id: str, decision: str, *,
                         evaluation: Mapping[str, Any] | um.Evaluation | None = None, text: str | None = None,
                         actor: str | None = None, now: float | None = None) -> dict[str, Any]:
        """approve (needs a passed, recorded evaluation), edit (new text, stays proposed) or reject."""
        self.host.check_ids(tenant, "-")
        at = self.host.now(now)
        doc = self._procedure(tenant, procedure_id)
        ev = um.Evaluation.from_any(evaluation) if evaluation is not None else None
        state = um.next_procedure_state(doc["status"], decision, ev)
        if decision == "edit":
            if text is None:
                raise ValidationError("an edit needs the new text", field="text")
            doc = {**doc, "text": self.check_procedure_text(tenant, text), "token": um.value_token(text)}
        entry: dict[str, Any] = {"at": at, "status": state, "decision": decision, "actor": actor or ACTOR}
        if ev is not None:
            entry["evaluation"] = ev.to_dict()
        if decision == "edit":
            entry["text"] = doc["text"]
        doc = {**doc, "status": state, "history": [*doc.get("history", []), entry][-50:]}
        if ev is not None and state == "approved":
            doc["evaluation"] = ev.to_dict()
            doc["approved_at"] = at
        self.host.store.put_doc(tenant, PROCEDURES_NS, procedure_id, doc, now=at, user_id=doc.get("user_id"))
        self._audit(tenant, doc.get("user_id"), "procedure", decision, at, actor=actor,
                    detail={"procedure_id": procedure_id, "status": state,
                            **({"evaluation": ev.name, "passed": ev.passed} if ev else {})})
        return doc

    def rollback_procedure(self, tenant: str, procedure_id: str, *, actor: str | None = None,
                           now: float | None = None) -> dict[str, Any]:
        """Take an approved procedure out of use (it stays listed, with its history)."""
        self.host.check_ids(tenant, "-")
        at = self.host.now(now)
        doc = self._procedure(tenant, procedure_id)
        if doc["status"] != "approved":
            raise ValidationError(f"only an approved procedure can be rolled back (this one is {doc['status']})",
                                  field="procedure_id")
        doc = {**doc, "status": "rolled_back",
               "history": [*doc.get("history", []), {"at": at, "status": "rolled_back", "actor": actor or ACTOR}][-50:]}
        self.host.store.put_doc(tenant, PROCEDURES_NS, procedure_id, doc, now=at, user_id=doc.get("user_id"))
        self._audit(tenant, doc.get("user_id"), "procedure", "rollback", at, actor=actor,
                    detail={"procedure_id": procedure_id})
        return doc

    def active_procedures(self, tenant: str, user_id: str) -> list[dict[str, Any]]:
        return [*self.procedures(tenant, status="approved"), *self.procedures(tenant, user_id=user_id,
                                                                               status="approved")]

    # -- the model and the assembly blocks ---------------------------------------------------------------

    def model(self, tenant: str, user_id: str, *, now: float | None = None, actor: str | None = None) -> UserModel:
        self.host.check_ids(tenant, user_id)
        at = self.host.now(now)
        lang = self._language(tenant, user_id, at)
        scored = self.host.recall_scored(tenant, user_id, 200, now=at, actor=actor)
        facts, prefs, context, inferred = [], [], [], []
        for s in scored:
            item = _memory_item(s)
            if s.memory.source is Source.INFERRED:
                inferred.append({**item, "status": "active"})
            elif s.memory.kind is Kind.PREFERENCE:
                prefs.append(item)
            elif s.memory.kind is Kind.CONTEXT:
                context.append(item)
            else:
                facts.append(item)
        pending = sorted((d for _, d in self.host.store.list_docs(tenant, vf.VERIFY_NS, user_id=user_id)
                          if d.get("status") == "pending"), key=lambda d: d["created_at"])
        for d in pending:
            if d.get("origin") == "signals" and d.get("active_memory_id") is None:
                inferred.append({"key": d["key"], "value": d["value"], "confidence": d["confidence"],
                                 "status": "pending", "verification_id": d["id"], "evidence": d.get("evidence", []),
                                 "rule": d.get("rule")})
        for item in inferred:
            if item["status"] == "active":
                doc = next((d for d in pending if d.get("active_memory_id") == item["id"]), None)
                if doc is not None:
                    item.update(evidence=doc.get("evidence", []), rule=doc.get("rule"), verification_id=doc["id"])
        derived, withheld = self.derived(tenant, user_id, now=at, actor=actor, language=lang)
        questions = [{"verification_id": d["id"], "key": d["key"], "question": d["question"].get(lang),
                      "confidence": d["confidence"]} for d in pending]
        procs = [{"id": p["id"], "text": p["text"], "scope": "user" if p.get("user_id") else "tenant"}
                 for p in self.active_procedures(tenant, user_id)]
        return UserModel(tenant, user_id, lang, tuple(facts), tuple(prefs), tuple(context), tuple(inferred),
                         tuple(a.to_dict(lang) for a in derived), tuple(procs), tuple(questions), tuple(withheld))

    def blocks(self, tenant: str, user_id: str, at: float, actor: str | None,
               inferred: Sequence[ScoredMemory]) -> Blocks:
        """The assembly's extra blocks: active inferences and derived attributes, approved procedures."""
        out = Blocks()
        for s in inferred:
            out.inferences[s.memory.key] = {"value": s.memory.value, "confidence": round(s.memory.confidence, 2),
                                            "inferred": True}
        derived, withheld = self.derived(tenant, user_id, now=at, actor=actor)
        for a in derived:
            out.inferences.setdefault(a.key, {"value": a.value, "derived_from": [i["key"] for i in a.inputs]})
        out.withheld = withheld
        out.procedures = [p["text"] for p in self.active_procedures(tenant, user_id)]
        return out


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


def erase_model(store: Any, tenant: str, user_id: str, keys: Sequence[str] | None) -> int:
    """Erasure step (engine/erasure.py eraser): what the user model holds about forgotten fields goes with
    them — signals, pending inferences, suppressions and derived attributes that read them (hard delete).
    `keys=None` (a time range): every derived attribute goes (recomputed from what is left)."""
    removed = 0
    wanted = set(keys) if keys is not None else None
    for doc_key, doc in store.list_docs(tenant, DERIVED_NS, user_id=user_id):
        if wanted is None or wanted & {i["key"] for i in doc.get("inputs", [])}:
            removed += bool(store.delete_doc(tenant, DERIVED_NS, doc_key))
    if wanted is None:
        return removed
    for ns in (SIGNAL_NS, SUPPRESS_NS, vf.PUSHBACK_NS):
        for doc_key, doc in store.list_docs(tenant, ns, user_id=user_id):
            if doc.get("key") in wanted:
                removed += bool(store.delete_doc(tenant, ns, doc_key))
    for doc_key, doc in store.list_docs(tenant, vf.VERIFY_NS, user_id=user_id):
        if doc.get("key") in wanted:
            removed += bool(store.delete_doc(tenant, vf.VERIFY_NS, doc_key))
    return removed


# -- LLM proposals (a person approves them) ----------------------------------------------------------------


class _ProcedureIdea(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str
    evidence: list[str] = []


class _ProcedureIdeas(BaseModel):
    model_config = ConfigDict(extra="ignore")

    procedures: list[_ProcedureIdea]


class _RuleIdea(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    when: dict[str, list[str]]
    then_key: str
    then_zh: str = ""
    then_en: str = ""


class _RuleIdeas(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rules: list[_RuleIdea]


PROCEDURE_SYSTEM = """You review how an assistant serves one user (你在审阅助手如何服务某位用户) and propose at most 3
procedures: short standing instructions for serving THIS user better, each supported by the sessions listed.
Return JSON only: {"procedures": [{"text": "...", "evidence": ["<session or episode id>", ...]}]}.
Only propose what the sessions clearly support; never include personal data; return {"procedures": []} if
nothing is clearly supported. Write each text in the language the user uses."""

RULE_SYSTEM = """You propose derivation rules for a user-memory service (你为用户记忆服务提出推导规则): when a user's
stored fields hold certain values, an attribute can reasonably be derived (e.g. occupation 儿科医生 → familiar
with paediatric dosing). Use only the fields listed. Return JSON only:
{"rules": [{"id": "a.b", "when": {"<field>": ["value", ...]}, "then_key": "<short key>", "then_zh": "...",
"then_en": "..."}]}. At most 5 rules; never derive health, religion, finances or other sensitive traits."""

_PROCEDURE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["procedures"],
    "properties": {"procedures": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["text", "evidence"],
        "properties": {"text": {"type": "string"}, "evidence": {"type": "array", "items": {"type": "string"}}}}}}}
_RULE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["rules"],
    "properties": {"rules": {"type": "array", "items": {
        "type": "object", "additionalProperties": False,
        "required": ["id", "when", "then_key", "then_zh", "then_en"],
        "properties": {"id": {"type": "string"}, "then_key": {"type": "string"}, "then_zh": {"type": "string"},
                       "then_en": {"type": "string"},
                       "when": {"type": "object", "additionalProperties": {"type": "array",
                                                                          "items": {"type": "string"}}}}}}}}


class LLMProposer:
    """Rules and procedures proposed by an LLM land as `proposed`: nothing is used until a person approves."""

    def __init__(self, modeler: UserModeler, llm: LLMClient | None, timeout: float) -> None:
        self.modeler = modeler
        self.llm = llm
        self.timeout = timeout

    def _require(self) -> LLMClient:
        if self.llm is None:
            raise ValidationError("no LLM is configured (USERMEM_LLM_BASE_URL and USERMEM_LLM_MODEL); proposals "
                                  "can still be made through propose_procedure / set_derivation_rule", field="llm")
        return self.llm

    def procedures(self, tenant: str, user_id: str, sessions: Sequence[tuple[str, str]], at: float) -> list[dict[str, Any]]:
        """`sessions`: (id, redacted summary) of the user's recent episodes, oldest first."""
        llm = self._require()
        if not sessions:
            return []
        listing = "\n".join(f"[{sid}] {text}" for sid, text in sessions)
        reply = llm.structured("propose_procedures", PROCEDURE_SYSTEM, listing, _ProcedureIdeas,
                               _PROCEDURE_SCHEMA, timeout=self.timeout)
        if reply is None:
            raise ProviderError("the LLM gave no usable proposal (see the server log); nothing was proposed")
        known = {sid for sid, _ in sessions}
        out = []
        for idea in reply.procedures[:3]:
            evidence = [e for e in idea.evidence if e in known][:10]
            if not evidence:
                continue  # unsupported by the sessions it was shown
            try:
                text = self.modeler.check_procedure_text(tenant, idea.text[:2000])
            except ValidationError:
                continue  # personal data or empty: dropped
            out.append(self.modeler.add_procedure(
                tenant, text, user_id=user_id, evidence=[{"session": e} for e in evidence], proposed_by="llm",
                at=at, dedupe=True))
        return out

    def rules(self, tenant: str, fields: Mapping[str, str], at: float) -> list[um.DeriveRule]:
        llm = self._require()
        listing = "\n".join(f"- {k}: {d}" for k, d in sorted(fields.items()))
        reply = llm.structured("propose_rules", RULE_SYSTEM, listing, _RuleIdeas, _RULE_SCHEMA, timeout=self.timeout)
        if reply is None:
            raise ProviderError("the LLM gave no usable proposal (see the server log); nothing was proposed")
        existing = {r.id for r in self.modeler.rules(tenant)}
        out = []
        for idea in reply.rules[:5]:
            then = {k: v for k, v in (("zh", idea.then_zh), ("en", idea.then_en)) if v}
            if idea.id in existing or not set(idea.when) <= set(fields):
                continue  # never overwrite a rule; only fields that exist
            try:
                out.append(self.modeler.set_rule(tenant, {"id": idea.id, "when": idea.when, "then_key": idea.then_key,
                                                          "then": then, "status": "proposed", "proposed_by": "llm"},
                                                 actor="llm", now=at))
            except ValidationError:
                continue  # malformed or guarded: dropped
        return out
