"""`usermem import` of a usermem export (format usermem.export/1, `Memory.export` / `usermem export`).

What is replayed into the target instance, each through the target's own operations and guards (PII,
forbidden keys, contracts, source priority) — what the target refuses is reported, never forced:

- **memories, with their history**: every version of a field, oldest first, at its original time (`now` =
  the version's created_at) with its kind, value, source, importance, confidence, event time, canonical
  form, change set and expiry — so the target has the same chain of versions (new ids), the same current
  value and the same decay. A field the target already holds gets its current value only (a second import
  adds no history: re-running an import changes nothing);
- **consents** (opt-ins per domain) at their original time;
- **consent requests**: asked again at their original time, then approved or declined as the user did
  (`decided_by`, `decided_at`), so an approval makes its grant again; pending ones stay pending;
- **grants** not made by an approval, at their original time and duration, for the same reader (a grant
  bound to a key of the source instance stays bound to that key id: no key of the target can use it until
  an operator grants again).

Change sets keep their grouping under new ids (an id of the source never groups writes of another user).

Not replayed, and reported: sessions and their messages, verifications, pushback and onboarding state
(they belong to the source instance's conversations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from usermem.engine.memory import Memory
from usermem.errors import UsermemError, ValidationError
from usermem.model import new_id
from usermem.policy.validate import DEFAULT_LIMITS
from usermem.understand.text import parts

EXPORT_FORMAT = "usermem.export/1"
REPLAYED_DOCUMENTS = ("grants", "consents", "consent_requests")


@dataclass
class ImportReport:
    tenant: str
    user_id: str
    written: int = 0  # versions written (ADD / UPDATE), history included
    unchanged: int = 0  # NOOP: the target already held it
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (key, reason)
    skipped: int = 0  # fields without a current value and no history replayed (forgotten, expired)
    history: int = 0  # superseded versions replayed (part of `written`)
    grants: int = 0
    consents: int = 0
    consent_requests: int = 0
    not_replayed: dict[str, int] = field(default_factory=dict)  # document namespace → documents left out

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "user_id": self.user_id, "written": self.written,
                "unchanged": self.unchanged, "skipped": self.skipped, "history": self.history,
                "grants": self.grants, "consents": self.consents, "consent_requests": self.consent_requests,
                "not_replayed": dict(self.not_replayed),
                "rejected": [{"key": k, "reason": r} for k, r in self.rejected]}


def import_export(memory: Memory, data: Any, *, tenant: str | None = None, user_id: str | None = None,
                  actor: str | None = "import") -> ImportReport:
    """Replay a usermem export into `memory` (optionally as another tenant/user): memories with their history,
    consents, consent requests and grants (module docstring)."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ValidationError(f"not a usermem export (expected format {EXPORT_FORMAT!r})", field="format")
    fields = data.get("fields")
    if not isinstance(fields, dict):
        raise ValidationError("export has no 'fields' object", field="fields")
    documents = data.get("documents") or {}
    if not isinstance(documents, dict):
        raise ValidationError("export's 'documents' is not an object", field="documents")
    report = ImportReport(tenant=tenant or str(data.get("tenant")), user_id=user_id or str(data.get("user_id")))
    _memories(memory, fields, report, actor)
    approved_grants = _consent_requests(memory, _docs(documents, "consent_requests"), report)
    _consents(memory, _docs(documents, "consents"), report)
    _grants(memory, _docs(documents, "grants"), approved_grants, report, actor)
    for ns, docs in documents.items():
        if ns not in REPLAYED_DOCUMENTS and isinstance(docs, list) and docs:
            report.not_replayed[str(ns)] = len(docs)
    return report


def _docs(documents: dict[str, Any], ns: str) -> list[dict[str, Any]]:
    docs = documents.get(ns) or []
    if not isinstance(docs, list):
        raise ValidationError(f"export's documents.{ns} is not a list", field="documents")
    out = [d.get("value") for d in docs if isinstance(d, dict)]
    if not all(isinstance(v, dict) for v in out):
        raise ValidationError(f"export's documents.{ns} holds a malformed document", field="documents")
    return out  # type: ignore[return-value]


def _memories(memory: Memory, fields: dict[str, Any], report: ImportReport, actor: str | None) -> None:
    """Every version to replay, oldest first across fields (a field the target holds: its current only)."""
    todo: list[tuple[float, str, int, dict[str, Any], bool]] = []  # (at, key, position, version, superseded)
    for key, entry in fields.items():
        if not isinstance(entry, dict):
            raise ValidationError(f"field {key!r} of the export is malformed", field="fields")
        cur, history = entry.get("current"), entry.get("history") or []
        if not isinstance(history, list) or not all(isinstance(v, dict) for v in history):
            raise ValidationError(f"field {key!r} of the export has a malformed history", field="fields")
        held = bool(memory.store.history(report.tenant, report.user_id, str(key)))
        versions = history if history and not held else ([cur] if isinstance(cur, dict) else [])
        if not versions:
            report.skipped += 1
            continue
        current_id = cur.get("id") if isinstance(cur, dict) else None
        for i, v in enumerate(versions):
            superseded = v.get("id") != current_id and bool(v.get("superseded_at") or v.get("superseded_by"))
            todo.append((_time(v.get("created_at"), key), str(key), i, v, superseded))
    change_sets: dict[str, str] = {}  # the source's change sets, as new ids: grouped alike, never shared with
    for at, key, _, v, superseded in sorted(todo, key=lambda t: t[:3]):  # another user's writes in the target
        cs = v.get("change_set_id")
        if cs is not None:
            cs = change_sets.setdefault(str(cs), new_id())
        try:
            expires = v.get("expires_at")
            result = memory.write(
                report.tenant, report.user_id, str(v["kind"]), key, v["value"], source=str(v["source"]),
                importance=float(v["importance"]), confidence=float(v["confidence"]), now=at,
                event_at=v.get("event_at"), canonical=v.get("canonical"), actor=actor,
                change_set_id=cs,
                ttl_seconds=float(expires) - at if expires is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"field {key!r} of the export is malformed: {exc}", field="fields") from None
        if result.op.value in ("ADD", "UPDATE"):
            report.written += 1
            report.history += superseded
        elif result.op.value == "NOOP":
            report.unchanged += 1
        else:
            report.rejected.append((key, result.reason.value if result.reason else (result.detail or "rejected")))


def _time(value: Any, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{where}: a time of the export is not a number", field="fields") from None


def _consent_requests(memory: Memory, docs: list[dict[str, Any]], report: ImportReport) -> set[str]:
    """Ask again and answer as the user did; returns the source's grant ids that the approvals made again."""
    remade: set[str] = set()
    if not docs:
        return remade
    first = min(_time(d.get("created_at"), "consent_requests") for d in docs)  # as of then: none expired yet
    held = {(r.purpose, tuple(r.fields), r.created_at)
            for r in memory.consent_requests(report.tenant, report.user_id, status=None, now=first)}
    # Replayed as they happened, asks and answers in one time order (an ask before an answer at the same
    # time; ties by request id): answering each request right after its ask would let a later-answered
    # request with the same fields be asked while an earlier one was still pending or already declined —
    # which changes what the ask returns.
    events: list[tuple[float, int, str, dict[str, Any]]] = []
    for d in docs:
        created = _time(d.get("created_at"), "consent_requests")
        fields = tuple(str(f) for f in d.get("fields") or ())
        if (d.get("purpose"), fields, created) in held:
            if d.get("grant_id"):
                remade.add(str(d["grant_id"]))
            continue
        events.append((created, 0, str(d.get("id")), d))
        if d.get("status") in ("approved", "declined") and d.get("decided_at") is not None:
            events.append((_time(d.get("decided_at"), "consent_requests"), 1, str(d.get("id")), d))
    asked: dict[str, Any] = {}
    for at, step, rid, d in sorted(events, key=lambda e: e[:3]):
        try:
            if step == 0:
                asked[rid] = memory.request_consent(
                    report.tenant, report.user_id, [str(f) for f in d.get("fields") or ()], str(d.get("purpose")),
                    float(d.get("ttl_seconds") or 1800.0), domain=d.get("domain"), session_id=d.get("session_id"),
                    actor=d.get("requested_by"), now=at)
                report.consent_requests += 1
                if d.get("status") == "approved" and d.get("grant_id"):
                    remade.add(str(d["grant_id"]))
                continue
            req = asked.get(rid)
            if req is None or req.status != "pending":
                continue  # its ask was refused (reported) or answered already
            answer = memory.approve_consent if d.get("status") == "approved" else memory.decline_consent
            asked[rid] = answer(report.tenant, report.user_id, req.id, actor=d.get("decided_by"), now=at)
        except UsermemError as exc:
            report.rejected.append((f"consent_request:{d.get('id')}", str(exc)))
    return remade


def _consents(memory: Memory, docs: list[dict[str, Any]], report: ImportReport) -> None:
    for d in sorted(docs, key=lambda d: _time(d.get("at"), "consents")):
        try:
            memory.opt_in(report.tenant, report.user_id, [str(d.get("field"))], str(d.get("domain")),
                          actor=d.get("actor"), now=_time(d.get("at"), "consents"))
        except UsermemError as exc:
            report.rejected.append((f"consent:{d.get('field')}@{d.get('domain')}", str(exc)))
            continue
        report.consents += 1


def _grants(memory: Memory, docs: list[dict[str, Any]], remade: set[str], report: ImportReport,
            actor: str | None) -> None:
    held = {(g.level.value if g.level else None, tuple(sorted(g.fields)), g.purpose, g.created_at, g.expires_at)
            for g in memory.grants(report.tenant, report.user_id, include_expired=True)}
    for d in sorted(docs, key=lambda d: _time(d.get("created_at"), "grants")):
        if str(d.get("id")) in remade:
            continue  # made again by the approval of its consent request
        created, expires = _time(d.get("created_at"), "grants"), _time(d.get("expires_at"), "grants")
        fields = tuple(sorted(str(f) for f in d.get("fields") or ()))
        if (d.get("level"), fields, d.get("purpose"), created, expires) in held or expires <= created:
            continue
        try:
            memory.grant(report.tenant, report.user_id, d.get("level") or list(fields), str(d.get("purpose")),
                         expires - created, actor=actor, grantee=d.get("grantee"), now=created)
        except UsermemError as exc:
            report.rejected.append((f"grant:{d.get('id')}", str(exc)))
            continue
        report.grants += 1


# -- conversation exports (ChatGPT, Claude) --------------------------------------------------------------

CHAT_DONE_NS = "chat_imports"  # per-user documents: which conversations were ingested (resume; erased with the user)


@dataclass(frozen=True)
class Conversation:
    id: str
    messages: tuple[tuple[str, str], ...]  # (role "user"|"assistant", text), in order
    at: float | None  # time of the last message


def _chatgpt(conv: dict[str, Any]) -> Conversation:
    mapping = conv.get("mapping") or {}
    node = conv.get("current_node")
    chain: list[dict[str, Any]] = []
    while node is not None and node in mapping:  # the branch the user ended on, walked back to the root
        chain.append(mapping[node])
        node = mapping[node].get("parent")
    msgs: list[tuple[str, str]] = []
    at: float | None = None
    for n in reversed(chain):
        msg = n.get("message") or {}
        role = (msg.get("author") or {}).get("role")
        parts = (msg.get("content") or {}).get("parts") or []
        text = "\n".join(p for p in parts if isinstance(p, str)).strip()
        if role in ("user", "assistant") and text:
            msgs.append((role, text))
            at = float(msg["create_time"]) if msg.get("create_time") else at
    return Conversation(str(conv.get("conversation_id") or conv.get("id")), tuple(msgs), at)


def _claude(conv: dict[str, Any]) -> Conversation:
    from datetime import datetime

    msgs: list[tuple[str, str]] = []
    at: float | None = None
    for m in conv.get("chat_messages") or []:
        role = {"human": "user", "assistant": "assistant"}.get(str(m.get("sender")))
        text = str(m.get("text") or "").strip() or "\n".join(
            str(c.get("text", "")) for c in m.get("content") or [] if c.get("type") == "text").strip()
        if role and text:
            msgs.append((role, text))
            if m.get("created_at"):
                at = datetime.fromisoformat(str(m["created_at"]).replace("Z", "+00:00")).timestamp()
    return Conversation(str(conv.get("uuid")), tuple(msgs), at)


def read_conversations(data: Any) -> tuple[str, list[Conversation]]:
    """("chatgpt" | "claude", conversations) from the `conversations.json` of either export."""
    if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
        raise ValidationError("a conversations export is a JSON list of conversations", field="file")
    if all("mapping" in c for c in data):
        return "chatgpt", [_chatgpt(c) for c in data]
    if all("chat_messages" in c for c in data):
        return "claude", [_claude(c) for c in data]
    raise ValidationError("not a ChatGPT or Claude conversations export", field="file")


@dataclass
class ChatImportReport:
    source: str
    conversations: int = 0
    ingested: int = 0
    resumed_past: int = 0  # already ingested by an earlier (interrupted) run
    written: int = 0
    rejected: int = 0
    # messages longer than one message may be (Limits.max_message_chars: a pasted document, say), not read
    skipped_messages: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def import_conversations(memory: Memory, tenant: str, user_id: str, data: Any, *, actor: str | None = "import",
                         progress: Any = None) -> ChatImportReport:
    """Ingest every conversation (its messages → extraction → guarded writes, as `ingest`), oldest first.

    Each finished conversation is recorded in the user's documents, so a run that stops is resumed where it
    stopped. `progress(done, total)` is called after each conversation.
    """
    import hashlib
    import time

    kind, convs = read_conversations(data)
    convs.sort(key=lambda c: (c.at or 0.0, c.id))
    report = ChatImportReport(source=kind, conversations=len(convs))
    for i, conv in enumerate(convs, 1):
        doc = hashlib.sha256(f"{kind}:{conv.id}".encode()).hexdigest()[:32]
        if memory.store.get_doc(tenant, CHAT_DONE_NS, doc) is not None:
            report.resumed_past += 1
        elif conv.messages:
            # a long conversation is read in consecutive parts within one extraction call's limits, one
            # change set; a later part's value of a field replaces an earlier one's, as a later message's does
            msgs = [{"role": r, "content": t} for r, t in conv.messages if len(t) <= DEFAULT_LIMITS.max_message_chars]
            report.skipped_messages += len(conv.messages) - len(msgs)
            change_set = new_id()
            results = [r for part in parts(msgs) for r in memory.ingest(tenant, user_id, part, now=conv.at,
                                                                         change_set_id=change_set, actor=actor)]
            report.ingested += 1
            report.written += sum(1 for r in results if r.op.value in ("ADD", "UPDATE"))
            report.rejected += sum(1 for r in results if r.op.value == "REJECT")
            # marked after its writes: a run stopped in between ingests it again, which only repeats NOOPs
            memory.store.put_doc(tenant, CHAT_DONE_NS, doc, {"source": kind, "at": conv.at},
                                 now=time.time(), user_id=user_id)
        if progress is not None:
            progress(i, len(convs))
    return report
