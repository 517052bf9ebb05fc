"""`usermem import` of a usermem export (format usermem.export/1, `Memory.export` / `usermem export`).

Each field's current value is written into the target instance as it was: same kind, value, source,
importance, confidence, event time, canonical form and expiry, at its original time (`now` = the version's
created_at), so decay and ranking come out the same. Every write goes through the target's guards (PII,
forbidden keys, contracts, source priority): what the target refuses is reported, never forced. History
and documents (sessions, grants, consents) are not replayed: grants and consents are decisions made in the
source instance, and history keeps its original ids there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from usermem.engine.memory import Memory
from usermem.errors import ValidationError

EXPORT_FORMAT = "usermem.export/1"


@dataclass
class ImportReport:
    tenant: str
    user_id: str
    written: int = 0
    unchanged: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (key, reason)
    skipped: int = 0  # fields without a current value (forgotten, expired)

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "user_id": self.user_id, "written": self.written,
                "unchanged": self.unchanged, "skipped": self.skipped,
                "rejected": [{"key": k, "reason": r} for k, r in self.rejected]}


def import_export(memory: Memory, data: Any, *, tenant: str | None = None, user_id: str | None = None,
                  actor: str | None = "import") -> ImportReport:
    """Write the current memories of a usermem export into `memory` (optionally as another tenant/user)."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ValidationError(f"not a usermem export (expected format {EXPORT_FORMAT!r})", field="format")
    fields = data.get("fields")
    if not isinstance(fields, dict):
        raise ValidationError("export has no 'fields' object", field="fields")
    report = ImportReport(tenant=tenant or str(data.get("tenant")), user_id=user_id or str(data.get("user_id")))
    currents = []
    for key, entry in fields.items():
        cur = entry.get("current") if isinstance(entry, dict) else None
        if not isinstance(cur, dict):
            report.skipped += 1
            continue
        currents.append((key, cur))
    for key, cur in sorted(currents, key=lambda kc: (float(kc[1].get("created_at") or 0), kc[0])):
        try:
            at = float(cur["created_at"])
            expires = cur.get("expires_at")
            result = memory.write(
                report.tenant, report.user_id, str(cur["kind"]), key, cur["value"], source=str(cur["source"]),
                importance=float(cur["importance"]), confidence=float(cur["confidence"]), now=at,
                event_at=cur.get("event_at"), canonical=cur.get("canonical"), actor=actor,
                ttl_seconds=float(expires) - at if expires is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"field {key!r} of the export is malformed: {exc}", field="fields") from None
        if result.op.value in ("ADD", "UPDATE"):
            report.written += 1
        elif result.op.value == "NOOP":
            report.unchanged += 1
        else:
            report.rejected.append((key, result.reason.value if result.reason else (result.detail or "rejected")))
    return report


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
            results = memory.ingest(tenant, user_id, [{"role": r, "content": t} for r, t in conv.messages],
                                    now=conv.at, actor=actor)
            report.ingested += 1
            report.written += sum(1 for r in results if r.op.value in ("ADD", "UPDATE"))
            report.rejected += sum(1 for r in results if r.op.value == "REJECT")
            # marked after its writes: a run stopped in between ingests it again, which only repeats NOOPs
            memory.store.put_doc(tenant, CHAT_DONE_NS, doc, {"source": kind, "at": conv.at},
                                 now=time.time(), user_id=user_id)
        if progress is not None:
            progress(i, len(convs))
    return report
