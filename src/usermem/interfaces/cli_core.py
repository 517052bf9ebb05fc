"""Core CLI commands: demo, write, write-many, recall, inspect, get, history, forget, purge, audit."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from usermem.config import load_settings, redact_url
from usermem.engine.memory import Memory
from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_output import cell, esc, say, shown, table
from usermem.interfaces.cli_params import (
    ActorOpt,
    AtOpt,
    ChangeSetOpt,
    JsonOpt,
    SessionOpt,
    SinceOpt,
    UntilOpt,
    dumps,
    parse_time,
    parse_value,
    read_json,
)
from usermem.model import WriteResult

StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Store URL: sqlite:///relative/file.db (relative to the current directory), "
                    "sqlite:////absolute/file.db, or postgresql://user@host/db")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (scripts, CI)")]


def open_memory(store: str | None, *, create: bool = False) -> Memory:
    """The Memory the command works on. Unless `create`, a SQLite URL must name an existing file: a command
    that only reads or changes existing data never creates an empty database at a mistyped path."""
    settings = load_settings()
    if store:
        settings = settings.with_overrides(store_url=store)
    elif settings.store_url == "sqlite://":
        settings = settings.with_overrides(store_url="sqlite:///data/usermem.db")
    if not create:
        cli_output.require_existing_store(settings.store_url)
    return Memory(settings=settings)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@app.command()
def demo(store: StoreOpt = None) -> None:
    """Replay the C007 support timeline from the design document and print every decision.

    Example: usermem demo --store sqlite:///data/demo.db
    """
    from usermem.interfaces.demo import run_demo

    # Without --store: a private in-memory store, never the configured one (the demo erases user C007).
    run_demo(open_memory(store, create=True) if store else Memory("sqlite://"), console)


@app.command()
def purge(
    store: StoreOpt = None,
    now: Annotated[bool, typer.Option("--now", help="Ignore the retention period: purge everything deleted/expired")] = False,
    retention_days: Annotated[float | None, typer.Option(help="Override the retention period (days)")] = None,
    at: AtOpt = None,
) -> None:
    """Physically delete soft-deleted and expired memories past retention, and compact the store.

    Example: usermem purge --now --store sqlite:///data/usermem.db
    """
    if now and retention_days is not None:
        cli_output.fail("--now and --retention-days contradict each other; pass one")
    started = time.monotonic()
    with open_memory(store) as m, console.status(say("purging and compacting…", "正在清除并压缩…")):
        n = m.purge(at, retention_days=0.0 if now else retention_days)
    took = time.monotonic() - started
    console.print(say(f"purged [bold]{n}[/bold] rows from {esc(redact_url(m.store.url))} in {took:.1f} s",
                      f"已从 {esc(redact_url(m.store.url))} 物理删除 [bold]{n}[/bold] 行，用时 {took:.1f} 秒"))


# -- write --------------------------------------------------------------------------------------------

ValueJsonOpt = Annotated[bool, typer.Option("--json-value", help="VALUE is JSON (a number, list, object…), "
                                                                 "not text")]


@app.command()
def write(
    tenant: str, user_id: str,
    kind: Annotated[str, typer.Argument(help="profile, preference, situation, context, … (docs/lifecycle.md)")],
    key: Annotated[str, typer.Argument(help="The field, e.g. reply_length")],
    value: Annotated[str, typer.Argument(help="The value (text; --json-value for JSON)")],
    json_value: ValueJsonOpt = False,
    source: Annotated[str, typer.Option(help="Who asserted it: system, user_confirmed, agent_confirmed, "
                                             "extracted, inferred")] = "extracted",
    importance: Annotated[float | None, typer.Option(help="0..1 (default: the contract's or the kind's)")] = None,
    confidence: Annotated[float | None, typer.Option(help="0..1 (default: by source)")] = None,
    session: SessionOpt = None,
    client: Annotated[str | None, typer.Option("--client", help="The client or device that produced it")] = None,
    event_at: Annotated[float | None, typer.Option("--event-at", parser=parse_time, metavar="TIME",
                                                   help="When it happened in the world")] = None,
    ttl: Annotated[float | None, typer.Option("--ttl", help="Expire after this many seconds")] = None,
    change_set: ChangeSetOpt = None,
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
    canonical: Annotated[str | None, typer.Option(
        help="A normalised form kept beside the value, never instead of it (JSON with --json-value)")] = None,
) -> None:
    """Write one memory through the full write path (validation, guards, source priority) and print the
    decision: ADD, UPDATE, NOOP, or REJECT with its reason (exit code 1).

    Example: usermem write acme u1 preference reply_length 简洁 --source user_confirmed
    """
    with open_memory(store, create=True) as m:
        r = m.write(tenant, user_id, kind, key, parse_value(value, json_value), source=source,
                    importance=importance, confidence=confidence, now=at, session_id=session, client_id=client,
                    event_at=event_at, ttl_seconds=ttl, change_set_id=change_set, actor=actor,
                    canonical=None if canonical is None else parse_value(canonical, json_value))
    show_results([r], as_json)


@app.command("write-many")
def write_many(
    tenant: str, user_id: str,
    writes: Annotated[str, typer.Argument(help="JSON list of {kind, key, value, source?, importance?, …}: "
                                               "a file, - for stdin, or inline")],
    change_set: ChangeSetOpt = None, actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a batch in one transaction under one change set (revert it with revert-change-set).

    Example: usermem write-many acme u1 '[{"kind":"preference","key":"tone","value":"warm"}]'
    """
    batch = read_json(writes, "writes")
    if not isinstance(batch, list):
        raise typer.BadParameter("writes must be a JSON list of {kind, key, value, ...}", param_hint="WRITES")
    with open_memory(store, create=True) as m:
        results = m.write_many(tenant, user_id, batch, now=at, change_set_id=change_set, actor=actor)
    show_results(results, as_json)


def show_results(results: list[WriteResult], as_json: bool, *, exit_on_reject: bool = True) -> None:
    """Write decisions, one line each; exit code 1 when any was rejected (REJECT is a decision, not an
    error) unless `exit_on_reject` is False (ingest: refusing sensitive candidates is its job)."""
    if as_json:
        print(dumps(results))
    else:
        styles = {"ADD": "green", "UPDATE": "cyan", "NOOP": "dim", "REJECT": "red"}
        for r in results:
            op, style = r.op.value, styles.get(r.op.value, "")
            what = (f"{esc(r.memory.key)} = {esc(shown(r.memory.value))} ({esc(r.memory.id)})"
                    if r.memory is not None else "")
            why = f" {r.reason.value}" if r.reason else ""
            detail = f" — {esc(r.detail)}" if r.detail else ""
            console.print(f"[{style}]{op}[/{style}]{why} {what}{detail}".rstrip(), highlight=False)
        if results and results[0].memory is not None and results[0].memory.change_set_id:
            console.print(say(f"change set {esc(results[0].memory.change_set_id)}",
                              f"变更集 {esc(results[0].memory.change_set_id)}"), style="dim")
    if exit_on_reject and any(not r.ok for r in results):
        raise typer.Exit(1)


# -- read ---------------------------------------------------------------------------------------------

KOpt = Annotated[int, typer.Option("-k", "--k", help="How many memories at most")]
KindsOpt = Annotated[list[str] | None, typer.Option("--kind", help="Only this kind (repeatable)")]
QueryOpt = Annotated[str | None, typer.Option("--query", "-q", help="Rank by meaning and words for this text")]
KeysOpt = Annotated[list[str] | None, typer.Option("--key", help="Only this key (repeatable)")]
MarkUsedOpt = Annotated[bool, typer.Option("--mark-used", help="Count this read as a use (slows decay)")]
EventFromOpt = Annotated[float | None, typer.Option("--event-from", parser=parse_time, metavar="TIME",
                                                   help="Only memories whose event time is at or after this")]
EventUntilOpt = Annotated[float | None, typer.Option("--event-until", parser=parse_time, metavar="TIME",
                                                     help="Only memories whose event time is before this")]
DomainOpt = Annotated[str | None, typer.Option("--domain", help="The reader's domain (sharing rules apply)")]
PurposeOpt = Annotated[str | None, typer.Option("--purpose", help="What the memories are for (推荐午餐 / recommend "
                                                                  "lunch): shapes the withheld fields' consent question")]


@app.command()
def inspect(
    tenant: str, user_id: str, store: StoreOpt = None,
    k: KOpt = 50, kinds: KindsOpt = None, query: QueryOpt = None, keys: KeysOpt = None,
    mark_used: MarkUsedOpt = False, event_from: EventFromOpt = None, event_until: EventUntilOpt = None,
    actor: ActorOpt = None, domain: DomainOpt = None, at: AtOpt = None, as_json: JsonOpt = False,
    purpose: PurposeOpt = None,
) -> None:
    """Show a user's current memories with weights, scores, sources, expiry and confirmation flags, and the
    fields withheld from this reader (key, level, reason, consent question — never the value).

    Example: usermem inspect cloudledger C007
    """
    from usermem.interfaces.cli_consent import print_withheld

    with open_memory(store) as m:
        scored = m.recall_scored(tenant, user_id, k=k, now=at, kinds=kinds, query=query, keys=keys,
                                 mark_used=mark_used, event_from=event_from, event_until=event_until,
                                 actor=actor, domain=domain, purpose=purpose)
    if as_json:
        print(dumps([{"memory": s.memory, "score": s.score, "weight": s.weight, "relevance": s.relevance,
                      "needs_confirmation": s.needs_confirmation, "question": s.question} for s in scored]))
        return
    out = table(f"{tenant}/{user_id}", "key", "kind", "value", "source", "importance", "weight", "score",
                "expires", "flag")
    for s in scored:
        r = s.memory
        out.add_row(cell(r.key), r.kind.value, cell(shown(r.value)), r.source.value,
                    f"{r.importance:.2f}", f"{s.weight:.2f}", f"{s.score:.3f}", _when(r.expires_at),
                    cell(s.question or ""))
    console.print(out)
    print_withheld(scored.withheld)


@app.command()
def recall(
    tenant: str, user_id: str, store: StoreOpt = None,
    k: KOpt = 5, kinds: KindsOpt = None, query: QueryOpt = None, keys: KeysOpt = None,
    mark_used: MarkUsedOpt = False, event_from: EventFromOpt = None, event_until: EventUntilOpt = None,
    actor: ActorOpt = None, domain: DomainOpt = None, at: AtOpt = None, as_json: JsonOpt = False,
    purpose: PurposeOpt = None,
) -> None:
    """What an agent would be given: the user's top memories (key = value), best first, then the fields
    withheld from it (never their values) with the consent question to ask.

    Example: usermem recall acme u1 --query "how should I reply?" -k 3
    """
    from usermem.interfaces.cli_consent import print_withheld

    with open_memory(store) as m:
        records = m.recall(tenant, user_id, k=k, now=at, kinds=kinds, query=query, keys=keys,
                           mark_used=mark_used, event_from=event_from, event_until=event_until, actor=actor,
                           domain=domain, purpose=purpose)
    if as_json:
        print(dumps(records))
        return
    out = table(f"{tenant}/{user_id}", "key", "kind", "value", "source", "id")
    for r in records:
        out.add_row(cell(r.key), r.kind.value, cell(shown(r.value, 80)), r.source.value, cell(r.id))
    console.print(out)
    print_withheld(records.withheld)


@app.command()
def get(
    tenant: str, memory_id: str, actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Show one memory version by id, as JSON (exit code 1 when there is none).

    Example: usermem get acme 01a22dde83b3717e98a5ec7dd6acbbb0
    """
    with open_memory(store) as m:
        r = m.get(tenant, memory_id, actor=actor, now=at)
    if r is None:
        cli_output.error_line(say(f"no memory {memory_id!r} in tenant {tenant!r}",
                                  f"租户 {tenant!r} 中没有记忆 {memory_id!r}"))
        raise typer.Exit(1)
    print(dumps(r))


@app.command()
def history(tenant: str, user_id: str, key: str, store: StoreOpt = None, actor: ActorOpt = None,
            at: AtOpt = None, as_json: JsonOpt = False) -> None:
    """Show a key's version timeline, oldest first.

    Example: usermem history cloudledger C007 plan
    """
    with open_memory(store) as m:
        versions = m.history(tenant, user_id, key, actor=actor, now=at)
    if as_json:
        print(dumps(versions))
        return
    out = table(f"{tenant}/{user_id}/{key}", "created", "value", "source", "actor", "state", "id")
    for r in versions:
        state = "current" if r.is_current else "superseded"
        out.add_row(_when(r.created_at), cell(shown(r.value)), r.source.value,
                    cell(r.actor or "-"), state + (" (retracted)" if r.retracted else ""), cell(r.id))
    console.print(out)


@app.command()
def forget(
    tenant: str, user_id: str,
    key: Annotated[str | None, typer.Option(help="Forget one key only")] = None,
    since: SinceOpt = None, until: UntilOpt = None,
    store: StoreOpt = None,
    yes: YesOpt = False,
    actor: ActorOpt = None, at: AtOpt = None,
) -> None:
    """Forget a key, what was written in a time range (--since/--until), or everything about a user
    (soft delete; purge removes the bytes).

    Forgetting a whole user asks for confirmation at a terminal; scripts pass --yes (without a terminal
    and without --yes the command refuses, exit code 2).

    Example: usermem forget cloudledger C007 --key plan
    """
    if key is not None and (since is not None or until is not None):
        cli_output.fail(say("--key and --since/--until are different erasures; pass one",
                            "--key 与 --since/--until 是不同的删除方式，请只用一种"))
    with open_memory(store) as m:
        if key is not None:  # `--key ""` must not fall through to erasing the whole user
            n = m.forget(tenant, user_id, key, now=at, actor=actor)
        elif since is not None or until is not None:
            n = m.forget_range(tenant, user_id, since=since, until=until, now=at, actor=actor)
        else:
            _confirm_forget_user(tenant, user_id, yes)
            n = m.forget_user(tenant, user_id, now=at, actor=actor)
    console.print(say(f"forgot [bold]{n}[/bold] rows", f"已删除 [bold]{n}[/bold] 行"))


def _confirm_forget_user(tenant: str, user_id: str, yes: bool) -> None:
    cli_output.confirm_or_refuse(
        say(f"Erase everything stored about user {user_id!r} of tenant {tenant!r}?",
            f"删除租户 {tenant!r} 中用户 {user_id!r} 的全部记忆？"),
        yes=yes,
        refusal=say(f"refusing to erase everything about user {user_id!r} of tenant {tenant!r} without "
                    "confirmation: stdin is not a terminal; pass --yes (or --key KEY to forget one key)",
                    f"未经确认，不删除租户 {tenant!r} 中用户 {user_id!r} 的全部记忆：标准输入不是终端；"
                    "请加 --yes（或用 --key KEY 只删除一个键）"))


@app.command()
def audit(
    tenant: str,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's entries")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action (write, forget, read, grant, export, …)")] = None,
    since: SinceOpt = None, until: UntilOpt = None,
    limit: Annotated[int, typer.Option(help="How many entries at most")] = 100,
    after_seq: Annotated[int | None, typer.Option("--after-seq", help="Only entries after this sequence "
                                                                      "number (paging)")] = None,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show the audit log (who did what, when; never the values).

    Example: usermem audit acme --user C007 --action forget
    """
    with open_memory(store) as m:
        events = m.audit(tenant, user_id=user, action=action, since=since, until=until, limit=limit,
                         after_seq=after_seq)
    if as_json:
        print(dumps(events))
        return
    out = table(f"audit of {tenant}", "seq", "at", "action", "user", "key", "op", "reason", "actor")
    for e in events:
        out.add_row(str(e.seq or ""), _when(e.at), cell(e.action), cell(e.user_id or "-"), cell(e.key or "-"),
                    cell(e.op or ""), cell(e.reason or ""), cell(e.actor or "-"))
    console.print(out)
