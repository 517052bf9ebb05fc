"""`Understanding`: the conversation pipelines behind `Memory.plan/extract/ingest/assemble`, onboarding and
reflexive verification. It reaches the engine only through its host port (understand/ports.py:
`MemoryHost`, built by engine/compose.py) and the store's documents table, so the facade stays thin
and this package never imports the engine.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from usermem.errors import ConflictError, InvalidArgument, NotFound, ValidationError
from usermem.model import (
    AuditEvent,
    Candidate,
    Kind,
    ScoredMemory,
    Source,
    Withheld,
    WithheldReason,
    WriteRequest,
    WriteResult,
    new_id,
)
from usermem.policy.contracts import ContractSet
from usermem.policy.guards import check_guards
from usermem.policy.injection import instruction_like
from usermem.policy.validate import DEFAULT_LIMITS, InputProblem, check_key, shown, value_arg
from usermem.store.base import LiveQuery
from usermem.understand import onboarding as ob
from usermem.understand import verification as vf
from usermem.understand.assemble import Assembly, assemble
from usermem.understand.extract import ACCUMULATE, MAX_ITEMS, Extractor
from usermem.understand.llm import LLMClient
from usermem.understand.plan import Planner, RecallPlan
from usermem.understand.ports import ClosedSession, MemoryHost
from usermem.understand.text import check_text, coerce_messages, newest_within, parts, pieces
from usermem.understand.usermodel import LLMProposer, UserModeler

log = logging.getLogger("usermem.understand")
ACTOR = "usermem.understand"
MAX_BUDGET_TOKENS = 32_000
# the newest transcript text extraction at session close reads (two extraction calls' worth; see on_session_closed)
SESSION_EXTRACT_CHARS = 2 * DEFAULT_LIMITS.max_extract_chars


def _language_code(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if v.startswith("en") or "英" in v or "english" in v:
        return "en"
    if v.startswith("zh") or any(t in v for t in ("中", "汉", "chinese", "mandarin")):
        return "zh"
    return None


class Understanding:
    def __init__(self, host: MemoryHost, llm: LLMClient | None = None) -> None:
        self.host = host
        settings = host.settings
        self.llm = llm if llm is not None else LLMClient.from_settings(settings)
        self.llm_tasks = frozenset(settings.llm_tasks)
        self.plan_timeout = settings.llm_plan_timeout
        self.extract_timeout = settings.llm_extract_timeout
        self.pushback_threshold = vf.DEFAULT_THRESHOLD
        self.pushback_window = vf.DEFAULT_WINDOW
        self._planners: weakref.WeakKeyDictionary[ContractSet, Planner] = weakref.WeakKeyDictionary()
        self._extractors: weakref.WeakKeyDictionary[ContractSet, Extractor] = weakref.WeakKeyDictionary()
        self.modeler = UserModeler(host)
        self.proposer = LLMProposer(self.modeler, self.llm, self.extract_timeout)

    # -- plumbing ------------------------------------------------------------------------------------

    def contracts(self, tenant: str | None) -> ContractSet:
        return self.host.contracts if tenant is None else self.host.contracts_for(tenant)

    def planner(self, tenant: str | None = None) -> Planner:
        contracts = self.contracts(tenant)
        p = self._planners.get(contracts)
        if p is None:
            llm = self.llm if "plan" in self.llm_tasks else None
            p = self._planners[contracts] = Planner(contracts, llm, self.plan_timeout)
        return p

    def extractor(self, tenant: str | None = None) -> Extractor:
        contracts = self.contracts(tenant)
        e = self._extractors.get(contracts)
        if e is None:
            llm = self.llm if "extract" in self.llm_tasks else None
            e = self._extractors[contracts] = Extractor(contracts, llm, self.extract_timeout)
        return e

    def _now(self, now: float | None) -> float:
        return self.host.now(now)

    # -- plan / extract / ingest / assemble ------------------------------------------------------------

    def plan(self, tenant: str, user_id: str, message: str, *, use_llm: bool = True, vector: Any = None,
             vector_model: str | None = None, embed: bool = False) -> RecallPlan:
        """The recall plan of `message`. The deterministic recogniser also reads the message's query vector
        when it is given (`vector`, made by the embedder `vector_model` names: recall(query=...) passes the
        one it computed for semantic search) or, with `embed=True`, after one embedding by the host's query
        embedder. By default `Memory.plan` embeds nothing: on the older, narrowly labelled plan set the
        vector head costs precision (docs/understanding.md), and a plan stays well under a millisecond."""
        self.host.check_ids(tenant, user_id)
        check_text("message", message)
        planner = self.planner(tenant)
        if vector is None and embed and not (use_llm and planner.llm is not None):
            vector, vector_model = self.query_vector(planner, message)
        return planner.plan(message, use_llm=use_llm, vector=vector, vector_model=vector_model)

    def query_vector(self, planner: Planner, message: str) -> tuple[Any, str | None]:
        """(the message's query vector, its embedder's model id), or (None, None) when the planner cannot
        read the host embedder's vectors or there is no embedder."""
        wanted = planner.deterministic.vector_model
        embedder = self.host.query_embedder if wanted is not None else None
        if embedder is None or embedder.model_id != wanted:
            return None, None
        try:
            return embedder.query(message), wanted
        except Exception as exc:  # the vector is an aid: plan without it
            log.warning("plan: embedding the message failed (%s); planning without its vector", exc)
            return None, None

    def extract(self, messages: Any, *, tenant: str | None = None, use_llm: bool = True) -> list[Candidate]:
        return self.extractor(tenant).extract(messages, use_llm=use_llm)

    def ingest(self, tenant: str, user_id: str, messages: Any, *, now: float | None = None,
               session_id: str | None = None, change_set_id: str | None = None, actor: str | None = None,
               detect_pushback: bool = True, use_llm: bool = True,
               skip_keys: Collection[str] = ()) -> list[WriteResult]:
        """Extract, then write every candidate (source `extracted`) in one batch with one change set.
        `skip_keys`: fields not written (those the user forgot during the session whose transcript this is)."""
        self.host.check_ids(tenant, user_id)
        msgs = coerce_messages(messages)
        at = self._now(now)
        candidates = [c for c in self.extract(msgs, tenant=tenant, use_llm=use_llm) if c.key not in skip_keys]
        results: list[WriteResult] = []
        if candidates:
            candidates = self._merge_collections(tenant, user_id, candidates, at)
            # the user's words as the value, the canonical form beside it (never instead of it)
            requests = [c.to_request() for c in candidates]
            results = self.host.write_many(tenant, user_id, requests, now=at,
                                             change_set_id=change_set_id or new_id(), actor=actor or ACTOR)
        if detect_pushback:
            for m in msgs:
                if m.role == "user":
                    # The same session's text can arrive twice (per message, then the transcript at
                    # close): within one session, one utterance counts once.
                    seen = _fingerprint(session_id, m.content) if session_id else None
                    for p in vf.detect_pushback(m.content):
                        self.record_pushback(tenant, user_id, p.key, m.content, value=p.value, now=at,
                                             occurrence=seen)
                    # signals for inferred preferences and standing procedural requests (the user model)
                    self.modeler.observe(tenant, user_id, m.role, m.content, at, seen)
        return results

    def _merge_collections(self, tenant: str, user_id: str, candidates: list[Candidate],
                           at: float) -> list[Candidate]:
        """Likes, dislikes and allergies add to what is stored instead of replacing it."""
        keys = [c.key for c in candidates if c.key in ACCUMULATE]
        if not keys:
            return candidates
        current = {r.key: r for r in self.host.store.live(LiveQuery(tenant, user_id, at, keys=keys))}
        out = []
        for c in candidates:
            rec = current.get(c.key)
            if rec is not None and rec.value is not None:
                merged = _items(rec.value)
                # canonical forms stay aligned with the values they belong to (None where there is none)
                canon = _aligned(rec.canonical, len(merged))
                new_canon = _aligned(c.canonical, len(_items(c.value)))
                for v, cv in zip(_items(c.value), new_canon, strict=True):
                    if v not in merged:
                        merged.append(v)
                        canon.append(cv)
                merged, canon = merged[-MAX_ITEMS:], canon[-MAX_ITEMS:]
                one = len(merged) == 1
                c = replace(c, value=merged[0] if one else merged,
                            canonical=(canon[0] if one else canon) if any(x is not None for x in canon) else None)
            out.append(c)
        return out

    def assemble(self, tenant: str, user_id: str, message: str, budget_tokens: int = 800, *,
                 now: float | None = None, session_id: str | None = None, actor: str | None = None,
                 use_llm: bool = True, mark_used: bool = True, purpose: str | None = None) -> Assembly:
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int):
            raise InvalidArgument(f"budget_tokens must be an int, got {type(budget_tokens).__name__}")
        if not 1 <= budget_tokens <= MAX_BUDGET_TOKENS:
            raise ValidationError(f"budget_tokens must be between 1 and {MAX_BUDGET_TOKENS}", field="budget_tokens")
        at = self._now(now)
        plan = self.plan(tenant, user_id, message, use_llm=use_llm)
        keys = list(plan.fact_recall) + list(plan.preference_recall)
        scored: list[ScoredMemory] = []
        held: tuple[Withheld, ...] = ()
        if keys:
            found = self.host.recall_scored(tenant, user_id, max(1, len(keys) * 4), now=at, keys=keys,
                                            actor=actor, purpose=purpose)
            scored, held = list(found), found.withheld
        context: list[ScoredMemory] = []
        if plan.context_recall and session_id is not None:
            # Session context is visible only while its session is open; the recall pipeline decides.
            context = [s for s in self.host.recall_scored(tenant, user_id, 20, now=at, kinds=[Kind.CONTEXT],
                                                          session_id=session_id)
                       if s.memory.session_id == session_id]
        inferred = [s for s in scored if s.memory.source is Source.INFERRED]
        blocks = self.modeler.blocks(tenant, user_id, at, actor, inferred)
        result = assemble(plan, scored, budget_tokens, context, inferences=blocks.inferences,
                          procedures=blocks.procedures)
        if result.withheld or held:
            # Instruction-like values (assemble) carry their field's level; fields this reader may not see
            # (recall) come with their reason and consent question.
            contracts = self.contracts(tenant)
            levels = {w: (c.sensitivity.value if (c := contracts.get(w)) is not None else "L1")
                      for w in result.withheld}
            result = replace(result, withheld=tuple(
                Withheld(w, levels[w], WithheldReason.INSTRUCTION_LIKE) for w in result.withheld) + held)
        if mark_used and result.used_ids:
            self.host.store.touch(tenant, list(result.used_ids), used_at=at)
        return result

    # -- onboarding ----------------------------------------------------------------------------------------

    def questions_config(self, tenant: str) -> list[ob.OnboardingQuestion]:
        doc = self.host.store.get_doc(tenant, ob.NAMESPACE, ob.CONFIG_KEY)
        if not doc:
            return list(ob.DEFAULT_QUESTIONS)
        return [ob.OnboardingQuestion.from_dict(q) for q in doc.get("questions", [])]

    def set_onboarding_questions(self, tenant: str, questions: Sequence[Mapping[str, Any] | ob.OnboardingQuestion],
                                 *, now: float | None = None) -> list[dict[str, Any]]:
        self.host.check_ids(tenant, "-")
        parsed = [q if isinstance(q, ob.OnboardingQuestion) else ob.OnboardingQuestion.from_dict(q)
                  for q in questions]
        ids = [q.id for q in parsed]
        if len(set(ids)) != len(ids):
            raise ValidationError("onboarding question ids must be unique", field="id")
        contracts = self.contracts(tenant)
        for q in parsed:
            try:
                Kind(q.kind)
            except ValueError:
                raise ValidationError(f"question {q.id!r}: unknown kind {q.kind!r}", field="kind") from None
            if contracts.is_forbidden(q.key):
                raise ValidationError(f"question {q.id!r} asks for forbidden field {q.key!r}", field="key")
        self.host.store.put_doc(tenant, ob.NAMESPACE, ob.CONFIG_KEY, {"questions": [q.to_dict() for q in parsed]},
                                  now=self._now(now))
        return [q.to_dict() for q in parsed]

    def user_language(self, tenant: str, user_id: str, now: float) -> str | None:
        found = self.host.store.live(LiveQuery(tenant, user_id, now, keys=["language"]))
        return _language_code(found[0].value) if found else None

    def onboarding_questions(self, tenant: str, user_id: str, language: str | None = None, *,
                             now: float | None = None) -> list[dict[str, Any]]:
        self.host.check_ids(tenant, user_id)
        at = self._now(now)
        lang = language or self.user_language(tenant, user_id, at) or "en"
        if lang not in ob.LANGUAGES:
            raise ValidationError(f"language must be one of {ob.LANGUAGES}, got {lang!r}", field="language")
        questions = self.questions_config(tenant)
        answered = {r.key for r in self.host.store.live(LiveQuery(tenant, user_id, at,
                                                                    keys=[q.key for q in questions]))}
        return [{**q.render(lang), "answered": q.key in answered} for q in questions]

    def answer_onboarding(self, tenant: str, user_id: str, answers: Mapping[str, Any], *,
                          now: float | None = None, actor: str | None = None) -> list[WriteResult]:
        if not isinstance(answers, Mapping):
            raise InvalidArgument(f"answers must be a mapping of question id to answer, got {type(answers).__name__}")
        questions = {q.id: q for q in self.questions_config(tenant)}
        by_key = {q.key: q for q in questions.values()}
        requests = []
        for qid, answer in answers.items():
            q = questions.get(qid) or by_key.get(qid)
            if q is None:  # the id is not repeated unless it is a plain token (it may be anything, PII included)
                raise ValidationError(f"unknown onboarding question {shown(qid)} (known: {sorted(questions)})",
                                      field="answers")
            canonical = ob.option_value(q, answer)  # validates; the option value(s) go beside the user's words
            requests.append(WriteRequest(kind=q.kind, key=q.key, value=ob.answer_words(q, answer),
                                         source="onboarding", canonical=canonical if q.options else None))
        if not requests:
            return []
        return self.host.write_many(tenant, user_id, requests, now=now, actor=actor or ACTOR)

    # -- reflexive verification ----------------------------------------------------------------------------

    def record_pushback(self, tenant: str, user_id: str, key: str, message: str = "", *, value: Any = None,
                        now: float | None = None, occurrence: str | None = None) -> dict[str, Any]:
        self.host.check_ids(tenant, user_id)
        try:
            check_key(key)
        except InputProblem as exc:
            raise ValidationError(str(exc), field="key") from None
        check_text("message", message)
        contracts = self.contracts(tenant)
        if contracts.is_forbidden(key):
            raise ValidationError(f"field {key!r} may never be stored", field="key")
        if value is not None:  # a hypothesis value is held in a document: the write guards apply to it now
            value_arg(value)
            verdict = check_guards(key, value, contracts.get(key), contracts)
            if verdict is not None or instruction_like(value) is not None:
                raise ValidationError(verdict.detail if verdict else "value reads as an instruction", field="value")
        at = self._now(now)
        store = self.host.store
        doc_key = vf.pushback_doc_key(user_id, key)
        doc = store.get_doc(tenant, vf.PUSHBACK_NS, doc_key) or {"key": key, "events": []}
        seen = list(doc.get("seen", []))
        if occurrence is not None and occurrence in seen:
            events = vf.window_events(doc.get("events", []), at, self.pushback_window)
            return {"key": key, "count": len(events), "threshold": self.pushback_threshold,
                    "window_seconds": self.pushback_window, "verification": self._pending_for(tenant, user_id, key)}
        if occurrence is not None:
            seen = [*seen, occurrence][-50:]
        events = vf.window_events([*doc.get("events", []), at], at, self.pushback_window)
        pending = self._pending_for(tenant, user_id, key)
        store.put_doc(tenant, vf.PUSHBACK_NS, doc_key, {"key": key, "events": events, "seen": seen,
                                                        "value": value if value is not None else doc.get("value")},
                      now=at, user_id=user_id, expires_at=at + self.pushback_window)
        created = None
        hypothesis = value if value is not None else doc.get("value")
        # a denied hypothesis is not proposed again within its suppression period
        suppressed = hypothesis is not None and self.modeler.suppressed(tenant, user_id, key, hypothesis, at)
        if pending is None and not suppressed and len(events) >= self.pushback_threshold:
            created = self._hypothesis(tenant, user_id, key, hypothesis, len(events), at)
        return {"key": key, "count": len(events), "threshold": self.pushback_threshold,
                "window_seconds": self.pushback_window, "verification": created or pending}

    def _hypothesis(self, tenant: str, user_id: str, key: str, value: Any, count: int, at: float) -> dict[str, Any]:
        contract = self.contracts(tenant).get(key)
        kind = contract.kind.value if contract is not None else Kind.PREFERENCE.value
        vid = new_id()
        doc = {"id": vid, "user_id": user_id, "key": key, "kind": kind, "value": value, "source": "inferred",
               "confidence": vf.confidence_for(count), "evidence_count": count, "status": "pending",
               "question": vf.questions(key, value, contract), "created_at": at}
        self.host.store.put_doc(tenant, vf.VERIFY_NS, vid, doc, now=at, user_id=user_id)
        self._audit(tenant, user_id, key, "create", at, {"verification_id": vid, "confidence": doc["confidence"]})
        return doc

    def _pending_for(self, tenant: str, user_id: str, key: str) -> dict[str, Any] | None:
        return next((d for d in self.pending_verifications(tenant, user_id) if d["key"] == key), None)

    def pending_verifications(self, tenant: str, user_id: str) -> list[dict[str, Any]]:
        self.host.check_ids(tenant, user_id)
        docs = self.host.store.list_docs(tenant, vf.VERIFY_NS, user_id=user_id)
        return sorted((d for _, d in docs if d.get("status") == "pending"), key=lambda d: d["created_at"])

    def _verification(self, tenant: str, user_id: str, verification_id: str) -> dict[str, Any]:
        if not isinstance(verification_id, str):
            raise InvalidArgument("verification_id must be a str")
        doc = self.host.store.get_doc(tenant, vf.VERIFY_NS, verification_id)
        if doc is None or doc.get("user_id") != user_id:
            raise NotFound(f"no verification {verification_id!r} for this user")
        if doc.get("status") != "pending":
            raise ConflictError(f"verification {verification_id!r} is already {doc.get('status')}")
        return doc

    def accept_verification(self, tenant: str, user_id: str, verification_id: str, *, value: Any = None,
                            now: float | None = None, actor: str | None = None) -> WriteResult:
        """Store the hypothesis (or the user's corrected `value`) as a `user_confirmed` memory."""
        at = self._now(now)
        doc = self._verification(tenant, user_id, verification_id)
        final = value if value is not None else doc.get("value")
        if final is None:
            raise ValidationError("this hypothesis has no value; pass the value the user confirmed", field="value")
        request = WriteRequest(kind=doc["kind"], key=doc["key"], value=final, source="user_confirmed")
        result = self.host.write(tenant, user_id, request, now=at, actor=actor or ACTOR)
        if result.ok:
            self._close(tenant, user_id, doc, "accepted", at)
        return result

    def reject_verification(self, tenant: str, user_id: str, verification_id: str, *,
                            now: float | None = None) -> bool:
        at = self._now(now)
        doc = self._verification(tenant, user_id, verification_id)
        self._close(tenant, user_id, doc, "rejected", at)
        return True

    def _close(self, tenant: str, user_id: str, doc: dict[str, Any], status: str, at: float) -> None:
        store = self.host.store
        if status == "rejected":
            if doc.get("value") is not None:
                self.modeler.suppress(tenant, user_id, doc["key"], doc.get("token") or doc["value"], at)
            if doc.get("active_memory_id"):  # an inference already in use at low weight: retract it
                self.host.deny(tenant, user_id, doc["active_memory_id"], now=at, actor=ACTOR)
        store.put_doc(tenant, vf.VERIFY_NS, doc["id"], {**doc, "status": status, "resolved_at": at}, now=at,
                      user_id=user_id, expires_at=at + self.host.settings.retention_days * 86_400)
        store.delete_doc(tenant, vf.PUSHBACK_NS, vf.pushback_doc_key(user_id, doc["key"]))
        self._audit(tenant, user_id, doc["key"], {"accepted": "accept", "rejected": "reject"}[status], at,
                    {"verification_id": doc["id"]})

    def _audit(self, tenant: str, user_id: str, key: str, op: str, at: float, detail: dict[str, Any]) -> None:
        self.host.store.append_audit(AuditEvent(tenant=tenant, at=at, action="verification", user_id=user_id,
                                                  key=key, op=op, actor=ACTOR, detail=detail))

    # -- hooks -----------------------------------------------------------------------------------------------

    def on_session_closed(self, closed: ClosedSession) -> None:
        """Session-close hook: background extraction over the session's transcript (seed 000)."""
        transcript = closed.transcript
        if not transcript or closed.already_closed:
            return
        # A session keeps up to 2,000 messages, more than one extraction call takes: the newest text within
        # SESSION_EXTRACT_CHARS is read, in consecutive parts (one change set; a later part's value of a field
        # replaces an earlier one's, as a later message's does within a call). Older text is left unread (the
        # bound keeps a close from costing minutes of CPU); that is logged.
        whole = pieces(transcript) if isinstance(transcript, str) else list(cast(Sequence[Any], transcript))
        read = newest_within(whole, SESSION_EXTRACT_CHARS)
        if len(read) < len(whole):
            log.warning("session %s: extraction at close read the newest %d of %d messages (%d characters at most)",
                        closed.session_id, len(read), len(whole), SESSION_EXTRACT_CHARS)
        change_set = new_id()
        try:
            for part in parts(read):
                self.ingest(closed.tenant, closed.user_id, part, now=closed.closed_at, session_id=closed.session_id,
                            change_set_id=change_set, skip_keys=closed.forgotten_keys)
        except Exception:  # a bad transcript must not break closing; it is logged
            log.exception("background extraction failed for session %s", closed.session_id)


def _fingerprint(session_id: str, text: str) -> str:
    return hashlib.sha256(f"{session_id}\x00{text}".encode()).hexdigest()[:24]


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _aligned(canonical: Any, n: int) -> list[Any]:
    """The canonical forms of n collection items: a list of n as stored, else the single form for one item."""
    if isinstance(canonical, list) and len(canonical) == n:
        return list(canonical)
    return [canonical] + [None] * (n - 1) if n and not isinstance(canonical, list) else [None] * n
