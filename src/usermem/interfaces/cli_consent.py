"""Consent commands: `usermem consents request|list|approve|decline`, `usermem users`, and how the recall
commands show what they withheld (engine/consent.py, docs/privacy.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from usermem.engine.consent import ConsentRequest
from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import cell, esc, language, say, table
from usermem.interfaces.cli_params import ActorOpt, AtOpt, JsonOpt, SessionOpt, dumps
from usermem.model import Withheld

consents_app = typer.Typer(help="Consent requests: an agent asks to use withheld fields; the user approves or "
                                "declines (a grant is made on approval).", no_args_is_help=True)
app.add_typer(consents_app, name="consents")

FieldsArg = Annotated[str, typer.Argument(help="Comma-separated field keys (withheld ones, e.g. allergy)")]
PurposeArg = Annotated[str, typer.Argument(help="What they are for, shown to the user (e.g. 推荐午餐)")]


def print_withheld(withheld: Sequence[Withheld]) -> None:
    """One line per withheld field: key, level, reason and the question to ask (never a value)."""
    if not withheld:
        return
    out = table(say("withheld (not shown; ask before using)", "已扣留（未显示；使用前请先征得同意）"),
                "key", "level", "reason", "question")
    for w in withheld:
        note = say("declined in this session", "本次会话中已拒绝") if w.declined else (w.question or "")
        if w.request_id and not w.declined:
            note = f"{note} [{say('pending', '待答复')}: {w.request_id}]"
        out.add_row(cell(w.key), w.level, w.reason.value, cell(note))
    console.print(out)


def _print_request(r: ConsentRequest, as_json: bool) -> None:
    if as_json:
        print(dumps(r.to_dict()))
        return
    console.print(f"{esc(r.id)}  {r.status}  {esc(', '.join(r.fields))}  — {esc(r.question(language()))}")


def _fields(fields: str) -> list[str]:
    return [f.strip() for f in fields.split(",") if f.strip()]


@consents_app.command("request")
def consents_request(
    tenant: str, user_id: str, fields: FieldsArg, purpose: PurposeArg, store: StoreOpt = None,
    ttl: Annotated[float, typer.Option("--ttl", help="Seconds the grant lasts once approved")] = 1800.0,
    domain: Annotated[str | None, typer.Option("--domain", help="The reader's domain (opt-in fields)")] = None,
    session: SessionOpt = None, actor: ActorOpt = None, at: AtOpt = None, as_json: JsonOpt = False,
) -> None:
    """Ask the user to let withheld fields be used for a purpose (pending until they answer).

    Example: usermem consents request acme u1 allergy 推荐午餐 --ttl 3600
    """
    with open_memory(store) as m:
        r = m.request_consent(tenant, user_id, _fields(fields), purpose, ttl, domain=domain, session_id=session,
                              actor=actor, now=at)
    _print_request(r, as_json)


@consents_app.command("list")
def consents_list(
    tenant: str, user_id: str, store: StoreOpt = None,
    status: Annotated[str, typer.Option("--status", help="pending, approved, declined or all")] = "pending",
    at: AtOpt = None, as_json: JsonOpt = False,
) -> None:
    """The user's consent requests (pending by default).

    Example: usermem consents list acme u1 --status all
    """
    with open_memory(store) as m:
        items = m.consent_requests(tenant, user_id, status=None if status == "all" else status, now=at)
    if as_json:
        print(dumps([r.to_dict() for r in items]))
        return
    out = table(f"{tenant}/{user_id}", "id", "status", "fields", "purpose", "question")
    for r in items:
        out.add_row(cell(r.id), r.status, cell(", ".join(r.fields)), cell(r.purpose), cell(r.question(language())))
    console.print(out)


@consents_app.command("approve")
def consents_approve(tenant: str, user_id: str, request_id: str, store: StoreOpt = None, actor: ActorOpt = None,
                     at: AtOpt = None, as_json: JsonOpt = False) -> None:
    """Approve a consent request for the user: a grant of its fields, purpose and duration (audited).

    Example: usermem consents approve acme u1 01a2... --actor user
    """
    with open_memory(store) as m:
        r = m.approve_consent(tenant, user_id, request_id, actor=actor, now=at)
    _print_request(r, as_json)


@consents_app.command("decline")
def consents_decline(tenant: str, user_id: str, request_id: str, store: StoreOpt = None, actor: ActorOpt = None,
                     at: AtOpt = None, as_json: JsonOpt = False) -> None:
    """Decline a consent request for the user (remembered for the session; an approval is revoked).

    Example: usermem consents decline acme u1 01a2...
    """
    with open_memory(store) as m:
        r = m.decline_consent(tenant, user_id, request_id, actor=actor, now=at)
    _print_request(r, as_json)


@app.command("users")
def users(
    tenant: str, store: StoreOpt = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Only user ids starting with this")] = None,
    after: Annotated[str | None, typer.Option("--after", help="Continue after this user id (paging)")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The tenant's users (ids with a stored memory), in order; --prefix searches, --after pages.

    Example: usermem users acme --prefix C00 --limit 20
    """
    with open_memory(store) as m:
        page = m.users(tenant, prefix=prefix, after=after, limit=limit)
    if as_json:
        print(dumps(page.to_dict()))
        return
    for u in page.users:
        console.print(cell(u))
    if page.next_after is not None:
        console.print(say(f"more: --after {esc(page.next_after)}", f"还有更多：--after {esc(page.next_after)}"))
