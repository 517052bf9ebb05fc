"""`/me`: what usermem remembers about me — for the user, signed in with their own token.

The user is always the token's user (`ApiKey.user_id`); no URL or form names a user, so one user's
token can neither see nor change another user's memories. The list is the user's `export` (every
current value, sensitive ones too: the data goes to its subject; the read is audited), with the
confirmation flags of `recall_scored`. Correcting writes the user's own words as `user_confirmed`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from usermem.errors import UsermemError
from usermem.interfaces.console import i18n
from usermem.interfaces.console.views_console import erasure_receipt, export_response, field_label
from usermem.interfaces.console.web import (
    PageSession,
    csrf_ok,
    current_session,
    end_session,
    error_page,
    form_data,
    is_user_token,
    language,
    op,
    redirect,
    refused,
    render,
    set_session_cookie,
    sign_in,
)
from usermem.model import Kind
from usermem.policy.contracts import ContractSet

router = APIRouter(prefix="/me", include_in_schema=False)
CLEAR_WORD = "CLEAR"


async def _session(request: Request) -> PageSession | None:
    return await current_session(request, "user")


async def _post(request: Request) -> tuple[PageSession, str, dict[str, str]] | Response:
    session = await _session(request)
    if session is None or session.key.user_id is None:
        return refused(request, 401, "not_signed_in", None, "/me")
    form = await form_data(request)
    if not csrf_ok(request, session, form):
        return refused(request, 403, "csrf_failed", session, "/me")
    return session, session.key.user_id, form


def _day(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(float(t), tz=UTC).strftime("%Y-%m-%d")


@router.get("")
async def me_page(request: Request) -> Response:
    session = await _session(request)
    lang = language(request)
    if session is None or session.key.user_id is None:
        return render(request, "login.html", action="/me/login", field="user_token", help="user_token_help",
                      error=None, title=i18n.text("me", lang))
    tenant, user_id = session.tenant, session.key.user_id
    try:
        document = await op(request, "export", tenant, user_id, actor=session.actor)
        scored = await op(request, "recall_scored", tenant, user_id, 1000, actor=session.actor)
        contracts: ContractSet = await op(request, "contracts_for", tenant)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    try:
        consents = await op(request, "consent_requests", tenant, user_id)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    flagged = {s.memory.key: s for s in scored if s.needs_confirmation}
    items: list[dict[str, Any]] = []
    order = {k.value: i for i, k in enumerate(Kind)}
    for key, entry in document.get("fields", {}).items():
        cur = entry.get("current")
        if not cur or cur.get("retracted"):
            continue
        contract = contracts.get(key)
        s = flagged.get(key)
        episode = cur["kind"] == "episode"
        label = (i18n.text("episode_label", lang, when=_day(cur.get("event_at") or cur["created_at"])) if episode
                 else field_label(contracts, key, lang))
        items.append({"key": key, "label": label, "value": cur["value"], "id": cur["id"], "episode": episode,
                      "kind": cur["kind"], "source": cur["source"], "created_at": cur["created_at"],
                      "sensitive": contract is not None and contract.sensitivity.value != "L1",
                      "needs_confirmation": s is not None, "question": s.question if s is not None else None})
    items.sort(key=lambda i: (order.get(i["kind"], 9), i["label"]))
    shown = [{"id": c.id, "question": c.question(lang), "fields": ", ".join(field_label(contracts, f, lang)
                                                                             for f in c.fields),
              "purpose": c.purpose} for c in consents]
    return render(request, "me.html", session=session, user_id=user_id, items=items, consents=shown)


@router.post("/consents/{request_id}/{verb}")
async def me_consent(request: Request, request_id: str, verb: str) -> Response:
    """Approve (a grant of the requested fields and duration is made and audited) or decline a request."""
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, user_id, _ = checked
    if verb not in ("approve", "decline"):
        return refused(request, 404, "error", session, "/me")
    try:
        await op(request, "approve_consent" if verb == "approve" else "decline_consent", session.tenant, user_id, request_id, actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    return redirect("/me", done="approved" if verb == "approve" else "declined")


@router.post("/login")
async def me_login(request: Request) -> Response:
    return await sign_in(request, "user", is_user_token, home="/me", after="/me", field="user_token",
                         help_key="user_token_help", error_key="bad_token", title_key="me")


@router.post("/logout")
async def me_logout(request: Request) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, _, _ = checked
    await end_session(request, session)
    response = redirect("/me")
    set_session_cookie(request, response, "user", None)
    return response


@router.post("/memories/{memory_id}/{verb}")
async def me_confirm_or_deny(request: Request, memory_id: str, verb: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, user_id, _ = checked
    if verb not in ("confirm", "deny"):
        return refused(request, 404, "error", session, "/me")
    try:
        await op(request, "confirm" if verb == "confirm" else "deny", session.tenant, user_id, memory_id, actor=session.actor, source="user_confirmed")
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    return redirect("/me", done="confirmed" if verb == "confirm" else "denied")


@router.post("/fields/{key}/correct")
async def me_correct(request: Request, key: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, user_id, form = checked
    value = form.get("value", "")
    try:
        history = await op(request, "history", session.tenant, user_id, key, actor=session.actor)
        kind = history[-1].kind.value if history else "fact"
        result = await op(request, "write", session.tenant, user_id, kind, key, value, source="user_confirmed",
                          actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    if not result.ok:
        detail = result.detail or (result.reason.value if result.reason else "rejected")
        return render(request, "error.html", status=422, session=session, message=detail,
                      code=result.reason.value if result.reason else "rejected", back="/me")
    return redirect("/me", done="corrected")


@router.get("/export")
async def me_export(request: Request) -> Response:
    session = await _session(request)
    if session is None or session.key.user_id is None:
        return redirect("/me")
    try:
        document = await op(request, "export", session.tenant, session.key.user_id, actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    return export_response(document, session.key.user_id)


@router.post("/clear")
async def me_clear(request: Request) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, user_id, form = checked
    if form.get("confirm_word", "").strip().upper() != CLEAR_WORD:
        return refused(request, 400, "clear_mismatch", session, "/me")
    try:
        rows = await op(request, "forget_user", session.tenant, user_id, actor=session.actor)
        receipt = await erasure_receipt(request, session.tenant, user_id, rows)
    except UsermemError as exc:
        return error_page(request, exc, session, "/me")
    return render(request, "receipt.html", session=session, receipt=receipt, back="/me")
