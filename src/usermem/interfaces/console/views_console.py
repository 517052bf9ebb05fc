"""`/console`: the operator console (admin API key; the tenant is the key's).

Every page reads and changes data only through catalogue operations (`web.op`); a POST is refused
without the session's CSRF token, and answers with a redirect to the page it changed (303), so the
pages work with and without JavaScript (htmx boosts links and forms when it is there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from markupsafe import Markup

from usermem.engine.grants import Grant
from usermem.engine.sessions import episode_key
from usermem.errors import UsermemError, ValidationError
from usermem.interfaces.console import i18n
from usermem.interfaces.console.charts import decay_series, decay_svg
from usermem.interfaces.console.web import (
    PageSession,
    csrf_ok,
    current_session,
    end_session,
    error_page,
    form_data,
    language,
    op,
    redirect,
    refused,
    render,
    secure_headers,
    set_session_cookie,
    sign_in,
)
from usermem.model import KIND_REGISTRY, Kind, MemoryRecord, ScoredMemory
from usermem.policy.contracts import ContractSet, FieldContract, Sensitivity, Sharing

router = APIRouter(prefix="/console", include_in_schema=False)
USERS_PAGE = 50
AUDIT_PAGE = 50


async def _session(request: Request) -> PageSession | None:
    return await current_session(request, "admin")


async def _post(request: Request) -> tuple[PageSession, dict[str, str]] | Response:
    """The session and form of a POST, or the refusal (not signed in: 401; no/wrong CSRF token: 403)."""
    session = await _session(request)
    if session is None:
        return refused(request, 401, "not_signed_in", None, "/console")
    form = await form_data(request)
    if not csrf_ok(request, session, form):
        return refused(request, 403, "csrf_failed", session, request.headers.get("referer") or "/console")
    return session, form


def field_label(contracts: ContractSet, key: str, lang: str) -> str:
    """The field's name for people in `lang`: its contract's label (issue 14), else the key."""
    contract = contracts.get(key)
    label = getattr(contract, "label", None) if contract is not None else None
    if callable(label):
        text = label(lang)
        if isinstance(text, str) and text:
            return text
    return key


# -- sign in / out ---------------------------------------------------------------------------------------


@router.get("")
async def console_home(request: Request) -> Response:
    session = await _session(request)
    if session is not None:
        return redirect("/console/users")
    return render(request, "login.html", action="/console/login", field="admin_key", help="admin_key_help",
                  error=None, title=i18n.text("console", language(request)))


@router.post("/login")
async def console_login(request: Request) -> Response:
    return await sign_in(request, "admin", lambda key: key.admin, home="/console", after="/console/users",
                         field="admin_key", help_key="admin_key_help", error_key="bad_key", title_key="console")


@router.post("/logout")
async def console_logout(request: Request) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    await end_session(request, session)
    response = redirect("/console")
    set_session_cookie(request, response, "admin", None)
    return response


# -- users -----------------------------------------------------------------------------------------------


async def _list_users(request: Request, tenant: str, prefix: str, after: str | None) -> tuple[list[str], str | None]:
    """One page of the tenant's users whose id starts with `prefix`, after `after`: (ids, next page's `after`)."""
    page = await op(request, "users", tenant, prefix=prefix or None, after=after or None, limit=USERS_PAGE)
    return list(page.users), page.next_after


@router.get("/users")
async def console_users(request: Request, q: str = "", after: str | None = None) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    q = q.strip()[:256]
    try:
        ids, next_after = await _list_users(request, session.tenant, q, after)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/users")
    return render(request, "users.html", session=session, users=ids, q=q, more=next_after is not None,
                  next_after=next_after)


def _group(scored: Sequence[ScoredMemory]) -> list[tuple[str, list[ScoredMemory]]]:
    groups: dict[str, list[ScoredMemory]] = {}
    for s in scored:
        groups.setdefault(s.memory.kind.value, []).append(s)
    return [(k.value, groups[k.value]) for k in Kind if k.value in groups]


@router.get("/users/{user_id}")
async def console_user_page(request: Request, user_id: str) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    tenant, lang = session.tenant, language(request)
    try:
        scored = await op(request, "recall_scored", tenant, user_id, 1000, actor=session.actor)
        contracts: ContractSet = await op(request, "contracts_for", tenant)
        verifications = await op(request, "pending_verifications", tenant, user_id)
        sessions = await op(request, "sessions", tenant, user_id)
        episodes = await op(request, "episodes", tenant, user_id, limit=20)
        grants = await op(request, "grants", tenant, user_id)
        consents = await op(request, "consent_requests", tenant, user_id)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/users")
    withheld = list(getattr(scored, "withheld", None) or [])
    return render(request, "user.html", session=session, user_id=user_id, groups=_group(scored),
                  label=lambda key: field_label(contracts, key, lang), withheld=withheld,
                  pending=[s for s in scored if s.needs_confirmation], verifications=verifications,
                  sessions=sessions, episodes=episodes, grants=grants, episode_key=episode_key,
                  consents=[(c.question(lang), c.purpose, c.expires_at) for c in consents])


def _judged(contract: FieldContract | None, kind: Kind) -> bool:
    """Whether recall drops/flags this field by weight (volatile kinds, unless the contract is standing)."""
    return KIND_REGISTRY[kind].volatile and not (contract is not None and contract.standing)


def decay_chart(request: Request, record: MemoryRecord, contract: FieldContract | None,
                confirmations: Sequence[float], now: float) -> Markup:
    lang = language(request)
    settings = request.app.state.memory.settings
    half_life = (contract.half_life_seconds if contract else None) or KIND_REGISTRY[record.kind].half_life_seconds
    series = decay_series(base=record.confidence, half_life_seconds=half_life, created_at=record.created_at,
                          confirmations=confirmations, last_used_at=record.last_used_at, now=now)
    labels = {"title": i18n.text("decay_chart", lang) + f" — {record.key}",
              "confirm_line": i18n.text("chart_confirm_line", lang), "drop_line": i18n.text("chart_drop_line", lang),
              "created": i18n.text("chart_created", lang), "confirmed": i18n.text("chart_confirmed", lang),
              "used": i18n.text("chart_used", lang), "now": i18n.text("chart_now", lang),
              "summary": i18n.STRINGS["chart_summary"][lang], "not_judged": i18n.text("chart_not_judged", lang)}
    return decay_svg(series, chart_id=f"decay-{record.id}", labels=labels, confirm_at=settings.confirm_threshold,
                     drop_at=settings.drop_threshold, judged=_judged(contract, record.kind))


@router.get("/users/{user_id}/keys/{key}")
async def console_key_page(request: Request, user_id: str, key: str) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    tenant, lang = session.tenant, language(request)
    back = f"/console/users/{user_id}"
    try:
        versions: list[MemoryRecord] = await op(request, "history", tenant, user_id, key, actor=session.actor)
        contracts: ContractSet = await op(request, "contracts_for", tenant)
        confirms = await op(request, "audit", tenant, user_id=user_id, action="confirm", limit=1000)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    now = time.time()
    current = next((r for r in reversed(versions) if r.is_current and not r.retracted), None)
    chart = None
    if current is not None:
        times = [e.at for e in confirms if e.key == key]
        chart = decay_chart(request, current, contracts.get(key), times, now)
    return render(request, "key.html", session=session, user_id=user_id, key=key,
                  label=field_label(contracts, key, lang), versions=list(reversed(versions)), chart=chart,
                  current=current)


@router.post("/users/{user_id}/keys/{key}/revert")
async def console_revert(request: Request, user_id: str, key: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = f"/console/users/{user_id}/keys/{key}"
    try:
        await op(request, "revert", session.tenant, user_id, key, form.get("to_version") or None,
                 actor=session.actor, source="user_confirmed")
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="reverted")


@router.post("/users/{user_id}/memories/{memory_id}/{verb}")
async def console_confirm_or_deny(request: Request, user_id: str, memory_id: str, verb: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    back = f"/console/users/{user_id}"
    if verb not in ("confirm", "deny"):
        return refused(request, 404, "error", session, back)
    try:
        await op(request, "confirm" if verb == "confirm" else "deny", session.tenant, user_id, memory_id, actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="confirmed" if verb == "confirm" else "denied")


@router.post("/users/{user_id}/verifications/{verification_id}/{verb}")
async def console_verification(request: Request, user_id: str, verification_id: str, verb: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    back = f"/console/users/{user_id}"
    try:
        if verb == "accept":
            await op(request, "accept_verification", session.tenant, user_id, verification_id, actor=session.actor)
        elif verb == "reject":
            await op(request, "reject_verification", session.tenant, user_id, verification_id)
        else:
            return refused(request, 404, "error", session, back)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="verification_done")


# -- grants, export, erasure -----------------------------------------------------------------------------


def _fields_or_level(raw: str) -> str | list[str]:
    raw = raw.strip()
    if raw.upper() in ("L2", "L3"):
        return raw.upper()
    fields = [f.strip() for f in raw.split(",") if f.strip()]
    if not fields:
        raise ValidationError("name a level (L2, L3) or at least one field", field="fields_or_level")
    return fields


@router.post("/users/{user_id}/grants")
async def console_grant(request: Request, user_id: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = f"/console/users/{user_id}"
    try:
        try:
            ttl = float(form.get("ttl") or 1800)
        except ValueError:
            raise ValidationError("the duration must be a number of seconds", field="ttl") from None
        await op(request, "grant", session.tenant, user_id, _fields_or_level(form.get("fields_or_level", "")),
                 form.get("purpose", "").strip() or "console", ttl, actor=session.actor,
                 grantee=f"key:{session.key.id}:console" if form.get("mine") else None)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="granted")


@router.post("/grants/{grant_id}/revoke")
async def console_revoke(request: Request, grant_id: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = form.get("back", "/console/grants")
    if not back.startswith("/console/"):
        back = "/console/grants"
    try:
        await op(request, "revoke", session.tenant, grant_id, actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="revoked")


@router.get("/grants")
async def console_grants_page(request: Request, user_id: str = "") -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    try:
        grants: list[Grant] = await op(request, "grants", session.tenant, user_id.strip() or None)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/grants")
    return render(request, "grants.html", session=session, grants=grants, user_id=user_id)


def export_response(document: dict[str, Any], user_id: str) -> Response:
    body = json.dumps(document, ensure_ascii=False, indent=2, default=str)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in user_id)[:80]
    response = Response(body, media_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="usermem-export-{safe}.json"'})
    secure_headers(response)
    return response


@router.get("/users/{user_id}/export")
async def console_export(request: Request, user_id: str) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    try:
        document = await op(request, "export", session.tenant, user_id, actor=session.actor)
    except UsermemError as exc:
        return error_page(request, exc, session, f"/console/users/{user_id}")
    return export_response(document, user_id)


async def erasure_receipt(request: Request, tenant: str, user_id: str, rows: int) -> dict[str, Any]:
    """The receipt of a `forget_user`: its audit entry (sequence, time, rows) and what recall holds now."""
    entries = await op(request, "audit", tenant, user_id=user_id, action="forget_user", limit=1000)
    last = max(entries, key=lambda e: e.seq or 0) if entries else None
    left = await op(request, "recall", tenant, user_id, 1000)
    at = last.at if last is not None else None
    return {"user_id": user_id, "rows": rows, "at": at, "seq": last.seq if last is not None else None,
            "actor": last.actor if last is not None else None, "remaining": len(left),
            "at_iso": datetime.fromtimestamp(at, tz=UTC).isoformat() if at is not None else None}


@router.post("/users/{user_id}/erase")
async def console_erase(request: Request, user_id: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = f"/console/users/{user_id}"
    if form.get("confirm_user", "") != user_id:
        return refused(request, 400, "erase_mismatch", session, back)
    try:
        rows = await op(request, "forget_user", session.tenant, user_id, actor=session.actor)
        receipt = await erasure_receipt(request, session.tenant, user_id, rows)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return render(request, "receipt.html", session=session, receipt=receipt, back="/console/users")


# -- contracts -------------------------------------------------------------------------------------------


@router.get("/contracts")
async def console_contracts_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    try:
        contracts: list[FieldContract] = await op(request, "contracts_list", session.tenant)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console")
    return render(request, "contracts.html", session=session, contracts=contracts)


@router.get("/contracts/{key}")
async def console_contract_page(request: Request, key: str) -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    try:
        contract: FieldContract = await op(request, "contract", session.tenant, key)
        history = await op(request, "contract_history", session.tenant, key)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/contracts")
    return render(request, "contract.html", session=session, c=contract, history=list(reversed(history)),
                  sensitivities=[s.value for s in Sensitivity], sharings=[s.value for s in Sharing])


@router.post("/contracts/{key}/{verb}")
async def console_contract_toggle(request: Request, key: str, verb: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = "/console/contracts" if form.get("back") != "contract" else f"/console/contracts/{key}"
    try:
        if verb == "enable":
            await op(request, "enable_field", session.tenant, key, actor=session.actor)
        elif verb == "disable":
            await op(request, "disable_field", session.tenant, key, actor=session.actor)
        elif verb == "edit":
            current: FieldContract = await op(request, "contract", session.tenant, key)
            updated = _edited(current, form)
            await op(request, "set_contract", session.tenant, updated, actor=session.actor)
            return redirect(f"/console/contracts/{key}", done="saved")
        else:
            return refused(request, 404, "error", session, back)
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done="field_enabled" if verb == "enable" else "field_disabled")


def _edited(current: FieldContract, form: dict[str, str]) -> FieldContract:
    try:
        sensitivity = Sensitivity(form.get("sensitivity", current.sensitivity.value))
        sharing = Sharing(form.get("sharing", current.sharing.value))
    except ValueError as exc:
        raise ValidationError(str(exc), field="sensitivity") from None
    raw_ttl = form.get("ttl_seconds", "").strip()
    try:
        ttl = float(raw_ttl) if raw_ttl else None
    except ValueError:
        raise ValidationError("the time to live must be a number of seconds", field="ttl_seconds") from None
    return current.evolve(sensitivity=sensitivity, sharing=sharing, ttl_seconds=ttl,
                          enabled=form.get("enabled", "on" if current.enabled else "") == "on")


# -- audit -----------------------------------------------------------------------------------------------


def _day(value: str, field: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    try:
        return datetime.strptime(value[:10], "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise ValidationError(f"{field} must be a date (YYYY-MM-DD)", field=field) from None


@router.get("/audit")
async def console_audit_page(request: Request, user_id: str = "", action: str = "", since: str = "", until: str = "",
                     after_seq: str = "") -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    filters = {"user_id": user_id.strip(), "action": action.strip(), "since": since.strip(), "until": until.strip()}
    try:
        after = int(after_seq) if after_seq.strip().isdigit() else None
        until_t = _day(until, "until")
        entries = await op(request, "audit", session.tenant, user_id=filters["user_id"] or None,
                           action=filters["action"] or None, since=_day(since, "since"),
                           until=None if until_t is None else until_t + 86400.0, limit=AUDIT_PAGE + 1,
                           after_seq=after)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/audit")
    more = len(entries) > AUDIT_PAGE
    entries = entries[:AUDIT_PAGE]
    next_params = {**filters, "after_seq": str(entries[-1].seq)} if more and entries else None
    return render(request, "audit.html", session=session, entries=entries, filters=filters,
                  next_params=next_params)


# -- procedures: the review queue (issue 18, docs/usermodel.md) ----------------------------------------------

PROCEDURE_STATES = ("proposed", "approved", "rejected", "rolled_back")


@router.get("/procedures")
async def console_procedures(request: Request, status: str = "proposed", user_id: str = "") -> Response:
    session = await _session(request)
    if session is None:
        return redirect("/console")
    status = status if status in PROCEDURE_STATES else "proposed"
    try:
        items = await op(request, "procedures", session.tenant, user_id=user_id.strip() or None, status=status)
    except UsermemError as exc:
        return error_page(request, exc, session, "/console/procedures")
    return render(request, "procedures.html", session=session, items=items, wanted=status, user_id=user_id,
                  states=PROCEDURE_STATES)


@router.post("/procedures/{procedure_id}/{verb}")
async def console_procedure_review(request: Request, procedure_id: str, verb: str) -> Response:
    checked = await _post(request)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    back = "/console/procedures"
    try:
        if verb == "approve":
            evaluation = {"name": form.get("evaluation", "").strip(), "passed": form.get("passed") == "yes",
                          "result": form.get("result", "").strip()}
            await op(request, "review_procedure", session.tenant, procedure_id, "approve", evaluation=evaluation,
                     actor=session.actor)
        elif verb == "reject":
            await op(request, "review_procedure", session.tenant, procedure_id, "reject", actor=session.actor)
        elif verb == "edit":
            await op(request, "review_procedure", session.tenant, procedure_id, "edit", text=form.get("text", ""),
                     actor=session.actor)
        elif verb == "rollback":
            await op(request, "rollback_procedure", session.tenant, procedure_id, actor=session.actor)
        else:
            raise ValidationError(f"unknown action {verb!r}", field="verb")
    except UsermemError as exc:
        return error_page(request, exc, session, back)
    return redirect(back, done=verb)
