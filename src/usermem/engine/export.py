"""Data portability: everything held about one user, as JSON (current values and history, documents).

Every version that is not erased is included — superseded and expired versions too, because they are
still held — and L2/L3 fields as well: the export goes to the data subject. It is audited (`export`,
with counts, never values). Rows already forgotten but not yet purged are reported as a count only.
"""

from __future__ import annotations

from typing import Any

from usermem.engine.context import EngineContext
from usermem.engine.write import check_ids
from usermem.model import AuditEvent
from usermem.store.base import LiveQuery

FORMAT = "usermem.export/1"
# Document namespaces that hold per-user data (sessions, grants, ...). Features that keep per-user
# documents add their namespace here so exports stay complete.
USER_DOC_NAMESPACES: list[str] = ["sessions", "api_session_messages", "grants", "consents", "consent_requests",
                                  "verifications", "pushback", "onboarding", "webhook_deliveries"]


def export_user(ctx: EngineContext, tenant: str, user_id: str, *, now: float | None = None,
                actor: str | None = None) -> dict[str, Any]:
    check_ids(tenant, user_id)
    at = ctx.now(now)
    store = ctx.store
    # Heads of every chain (expired and retracted included), then each chain's full history.
    heads = store.live(LiveQuery(tenant, user_id, float("-inf"), include_retracted=True))
    keys = sorted({r.key for r in heads})
    fields: dict[str, Any] = {}
    versions = 0
    for key in keys:
        chain = store.history(tenant, user_id, key)
        versions += len(chain)
        current = next((r for r in reversed(chain) if r.is_current), None)
        fields[key] = {
            "current": current.to_dict() if current is not None and current.is_live(at) else None,
            "history": [r.to_dict() for r in chain],
        }
    documents: dict[str, list[dict[str, Any]]] = {}
    for ns in USER_DOC_NAMESPACES:
        docs = store.list_docs(tenant, ns, user_id=user_id, limit=100_000)
        if docs:
            documents[ns] = [{"key": k, "value": v} for k, v in docs]
    store.append_audit(AuditEvent(tenant=tenant, at=at, action="export", user_id=user_id, actor=actor,
                                  detail={"fields": len(keys), "versions": versions,
                                          "documents": sum(len(v) for v in documents.values())}))
    return {"format": FORMAT, "tenant": tenant, "user_id": user_id, "exported_at": at, "fields": fields,
            "documents": documents, "counts": {"fields": len(keys), "versions": versions}}
