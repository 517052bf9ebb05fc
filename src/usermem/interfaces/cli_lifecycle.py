"""Lifecycle CLI: confirm, deny, revert, revert a change set, sessions, episodes, and the decay defaults."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import cell, esc, say, shown, table
from usermem.interfaces.cli_params import ActorOpt, AtOpt, JsonOpt, SinceOpt, UntilOpt, dumps, read_messages

sessions_app = typer.Typer(help="Sessions: open, show, touch, context, list, close, expire idle ones.",
                           no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

SourceOpt = Annotated[str, typer.Option(help="Authority of the change: user_confirmed, agent_confirmed, system")]
TenantCheckOpt = Annotated[str | None, typer.Option("--tenant", help="The session's tenant (checked)")]


@app.command()
def confirm(tenant: str, user_id: str, memory_id: str, store: StoreOpt = None, actor: ActorOpt = None,
            source: SourceOpt = "user_confirmed", at: AtOpt = None) -> None:
    """Record that the user confirmed a memory (its weight returns to base).

    Example: usermem confirm acme u1 01a2…
    """
    with open_memory(store) as m:
        r = m.confirm(tenant, user_id, memory_id, actor=actor, source=source, now=at)
    console.print(say(f"confirmed [bold]{esc(r.key)}[/bold] = {esc(shown(r.value))} (version {esc(r.id)}, "
                      f"source {r.source.value})",
                      f"已确认 [bold]{esc(r.key)}[/bold] = {esc(shown(r.value))}（版本 {esc(r.id)}，来源 {r.source.value}）"))


@app.command()
def deny(tenant: str, user_id: str, memory_id: str, store: StoreOpt = None, actor: ActorOpt = None,
         source: SourceOpt = "user_confirmed", at: AtOpt = None) -> None:
    """Record that the user said a memory is wrong: a retraction version supersedes it.

    Example: usermem deny acme u1 01a2…
    """
    with open_memory(store) as m:
        r = m.deny(tenant, user_id, memory_id, actor=actor, source=source, now=at)
    console.print(say(f"retracted [bold]{esc(r.key)}[/bold] (retraction {esc(r.id)}; change set {esc(r.change_set_id)})",
                      f"已撤回 [bold]{esc(r.key)}[/bold]（撤回版本 {esc(r.id)}；变更集 {esc(r.change_set_id)}）"))


@app.command()
def revert(
    tenant: str, user_id: str, key: str, store: StoreOpt = None,
    to: Annotated[str | None, typer.Option("--to", help="Version id, or 1-based position in `usermem history`")] = None,
    actor: ActorOpt = None, source: SourceOpt = "user_confirmed", at: AtOpt = None,
) -> None:
    """Restore the previous (or a named) value of a key as a new version.

    Example: usermem revert edu stu1 report_format --to 1
    """
    target: str | int | None = int(to) if to is not None and to.isdigit() else to
    with open_memory(store) as m:
        r = m.revert(tenant, user_id, key, target, actor=actor, source=source, now=at)
    if r.memory is not None and r.op.value in ("ADD", "UPDATE"):
        console.print(f"[green]{r.op.value}[/green] {esc(key)} = {esc(shown(r.memory.value))} ({esc(r.detail)})")
    else:
        console.print(f"[yellow]{r.op.value}[/yellow] {r.reason.value if r.reason else ''} {esc(r.detail or '')}")
        if r.op.value == "REJECT":
            raise typer.Exit(1)


@app.command("revert-change-set")
def revert_change_set(
    tenant: str, change_set_id: str, store: StoreOpt = None, actor: ActorOpt = None,
    source: SourceOpt = "user_confirmed",
    partial: Annotated[bool, typer.Option(help="Revert what can be reverted and report the rest")] = False,
    at: AtOpt = None,
) -> None:
    """Undo every write of a change set at once ("undo my last settings").

    Example: usermem revert-change-set edu 01a2…
    """
    with open_memory(store) as m:
        out = m.revert_change_set(tenant, change_set_id, actor=actor, source=source, partial=partial, now=at)
    console.print(say(f"reverted [bold]{out.reverted}[/bold] keys; undo this with change set {esc(out.change_set_id)}",
                      f"已还原 [bold]{out.reverted}[/bold] 个键；用变更集 {esc(out.change_set_id)} 可撤销本次还原"))
    for user, key, why in out.conflicts:
        console.print(f"[yellow]{say('skipped', '跳过')}[/yellow] {esc(user)}/{esc(key)}: {esc(why)}")


@sessions_app.command("open")
def sessions_open(
    tenant: str, user_id: str,
    client: Annotated[str | None, typer.Option("--client", help="The client or device opening it")] = None,
    idle_seconds: Annotated[float | None, typer.Option(help="Close after this much inactivity "
                                                            "(default: session_idle_seconds)")] = None,
    at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Open a session for a user and print its id (context memories live until it closes).

    Example: usermem sessions open acme u1 --client web
    """
    with open_memory(store, create=True) as m:
        sid = m.open_session(tenant, user_id, client, now=at, idle_seconds=idle_seconds)
    console.print(sid, markup=False, highlight=False)


@sessions_app.command("show")
def sessions_show(session_id: str, tenant: TenantCheckOpt = None, store: StoreOpt = None) -> None:
    """Show one session as JSON.

    Example: usermem sessions show 01a2… --tenant acme
    """
    with open_memory(store) as m:
        session = m.get_session(session_id, tenant=tenant)
    print(dumps(session))


@sessions_app.command("touch")
def sessions_touch(session_id: str, tenant: TenantCheckOpt = None, at: AtOpt = None,
                   store: StoreOpt = None) -> None:
    """Record activity in a session (postpones its idle close).

    Example: usermem sessions touch 01a2… --tenant acme
    """
    with open_memory(store) as m:
        s = m.touch_session(session_id, tenant=tenant, now=at)
    console.print(say(f"session {esc(s.id)}: last activity {s.last_activity_at:.0f}, status {esc(s.status)}",
                      f"会话 {esc(s.id)}：最近活动 {s.last_activity_at:.0f}，状态 {esc(s.status)}"))


@sessions_app.command("context")
def sessions_context(
    session_id: str, tenant: TenantCheckOpt = None,
    k: Annotated[int, typer.Option("-k", "--k", help="How many context memories at most")] = 20,
    mark_used: Annotated[bool, typer.Option("--mark-used/--no-mark-used", help="Count this read as a use")] = True,
    at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """The session's context memories (what this conversation established), best first.

    Example: usermem sessions context 01a2… --tenant acme
    """
    with open_memory(store) as m:
        scored = m.session_context(session_id, tenant=tenant, k=k, now=at, mark_used=mark_used)
    if as_json:
        print(dumps([{"memory": s.memory, "score": s.score, "weight": s.weight} for s in scored]))
        return
    out = table(f"context of session {session_id}", "key", "value", "source", "score")
    for s in scored:
        out.add_row(cell(s.memory.key), cell(shown(s.memory.value)), s.memory.source.value, f"{s.score:.3f}")
    console.print(out)


@sessions_app.command("list")
def sessions_list(tenant: str, user_id: str, store: StoreOpt = None,
                  status: Annotated[str | None, typer.Option(help="open or closed")] = None,
                  at: AtOpt = None, as_json: JsonOpt = False) -> None:
    """A user's sessions.

    Example: usermem sessions list acme u1 --status open
    """
    out = table(f"sessions of {tenant}/{user_id}", "id", "client", "opened", "last activity", "status", "reason",
                "episode")
    with open_memory(store) as m:
        found = m.sessions(tenant, user_id, status=status, now=at)
    if as_json:
        print(dumps(found))
        return
    for s in found:
        out.add_row(cell(s.id), cell(s.client_id or "-"), f"{s.opened_at:.0f}", f"{s.last_activity_at:.0f}",
                    cell(s.status), cell(s.close_reason or "-"), cell(s.episode_id or "-"))
    console.print(out)


@sessions_app.command("close")
def sessions_close(
    session_id: str, store: StoreOpt = None, tenant: TenantCheckOpt = None,
    transcript: Annotated[str | None, typer.Option(
        "--transcript", help="The conversation to archive as the episode: a JSON list of {role, content} "
                             "(file, - for stdin, or inline), or a text file")] = None,
    actor: ActorOpt = None, at: AtOpt = None,
) -> None:
    """Close a session: archive it as an episode and retire its context.

    Example: usermem sessions close 01a2… --tenant acme --transcript chat.json
    """
    conversation = None if transcript is None else _transcript(transcript)
    with open_memory(store) as m:
        c = m.close_session(session_id, conversation, tenant=tenant, now=at, actor=actor)
    episode = esc(c.episode.id if c.episode else "-")
    if c.already_closed:
        console.print(say(f"session {esc(session_id)} was already closed; episode {episode}",
                          f"会话 {esc(session_id)} 早已关闭；情节 {episode}"))
    else:
        console.print(say(f"session {esc(session_id)} closed ({esc(c.reason)}); episode {episode}; "
                          f"{len(c.context)} context memories retired",
                          f"会话 {esc(session_id)} 已关闭（{esc(c.reason)}）；情节 {episode}；"
                          f"{len(c.context)} 条上下文记忆已退役"))


def _transcript(source: str) -> Any:
    messages = read_messages(source)
    if isinstance(messages, list) and all(isinstance(x, str) for x in messages):
        return "\n".join(messages)  # a plain text file: the transcript is its text
    return messages


@sessions_app.command("expire")
def sessions_expire(store: StoreOpt = None,
                    tenant: Annotated[str | None, typer.Option(help="Only this tenant's sessions")] = None,
                    at: AtOpt = None) -> None:
    """Close every session idle past its timeout (run it from cron or a timer).

    Example: usermem sessions expire --store sqlite:///data/usermem.db
    """
    with open_memory(store) as m, console.status(say("closing idle sessions…", "正在关闭空闲会话…")):
        closed = m.expire_idle_sessions(at, tenant=tenant)
    episodes = sum(1 for c in closed if c.episode is not None)
    console.print(say(f"expired [bold]{len(closed)}[/bold] idle sessions ({episodes} archived as episodes)",
                      f"已关闭 [bold]{len(closed)}[/bold] 个空闲会话（{episodes} 个已归档为情节）"))


@app.command()
def episodes(
    tenant: str, user_id: str, since: SinceOpt = None, until: UntilOpt = None,
    limit: Annotated[int, typer.Option(help="How many episodes at most")] = 10,
    at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """A user's archived sessions (episodes), searchable by event time.

    Example: usermem episodes acme u1 --since 2026-11-01
    """
    with open_memory(store) as m:
        found = m.episodes(tenant, user_id, since=since, until=until, limit=limit, now=at)
    if as_json:
        print(dumps(found))
        return
    out = table(f"episodes of {tenant}/{user_id}", "id", "event time", "summary")
    for r in found:
        out.add_row(cell(r.id), _when(r.event_at or r.created_at), cell(shown(r.value, 100)))
    console.print(out)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@app.command("decay")
def decay_table() -> None:
    """Show the decay defaults per kind and the crossing times they imply (docs/lifecycle.md).

    Example: usermem decay
    """
    from usermem.config import load_settings
    from usermem.model import DAY, KIND_REGISTRY
    from usermem.policy.contracts import ContractSet
    from usermem.policy.decay import USE_BOOST, crossing_time, time_constant

    settings = load_settings()
    confirm_at, drop_at = settings.confirm_threshold, settings.drop_threshold

    def span(seconds: float) -> str:
        if math.isinf(seconds):
            return "never"
        if seconds >= 2 * 365 * DAY:
            return f"{seconds / (365 * DAY):.0f} y"
        return f"{seconds / DAY:.1f} d" if seconds >= DAY else f"{seconds / 60:.1f} min"

    decay = Table(title=f"decay defaults (confirm < {confirm_at}, drop < {drop_at}, use lifts to {USE_BOOST})",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kind", "half-life", "1/λ", "judged", "flag", "drop", "flag*", "TTL"):
        decay.add_column(col, no_wrap=True)
    for kind, spec in KIND_REGISTRY.items():
        hl = spec.half_life_seconds
        judged = spec.volatile
        decay.add_row(kind.value, span(hl), span(time_constant(hl)), "yes" if judged else "no",
                      span(crossing_time(1.0, confirm_at, hl)) if judged else "-",
                      span(crossing_time(1.0, drop_at, hl)) if judged else "-",
                      span(crossing_time(USE_BOOST, confirm_at, hl)) if judged else "-",
                      span(spec.ttl_seconds) if spec.ttl_seconds else "none")
    console.print(decay)
    console.print("flag / drop: age at which a fresh memory is flagged / dropped; flag*: time after a use")
    standing = sorted(c.key for c in ContractSet() if c.standing)
    console.print(f"standing fields (never flagged or dropped): {', '.join(standing)}")


# -- federation notices (docs/federation.md) ---------------------------------------------------------------

federation_app = typer.Typer(help="Federation: the user's \"changed on another device\" notices; dead letters.",
                             no_args_is_help=True)
app.add_typer(federation_app, name="federation")


@federation_app.command("notices")
def federation_notices(tenant: str, user_id: str, store: StoreOpt = None, at: AtOpt = None,
                       as_json: JsonOpt = False) -> None:
    """List the user's open notices: a remote change replaced a value set here moments ago.

    Example: usermem federation notices acme u1
    """
    with open_memory(store) as m:
        items = m.federation_notices(tenant, user_id, now=at)
    if as_json:
        print(dumps(items))
        return
    out = table(f"{tenant}/{user_id}", "id", "key", say("from", "来源"), say("notice", "通知"))
    for n in items:
        out.add_row(cell(n["id"]), cell(n["key"]), cell(n["domain"]),
                    cell(n["questions"].get(say("en", "zh"), "")))
    console.print(out)


@federation_app.command("keep")
def keep_local(tenant: str, user_id: str, notice_id: str, store: StoreOpt = None, actor: ActorOpt = None,
               at: AtOpt = None) -> None:
    """Keep this device's value after a notice: it is written again and wins on every instance.

    Example: usermem federation keep acme u1 01a2…
    """
    with open_memory(store) as m:
        r = m.keep_local(tenant, user_id, notice_id, actor=actor, now=at)
    if r.memory is not None:
        console.print(say(f"kept [bold]{esc(r.memory.key)}[/bold] = {esc(shown(r.memory.value))}",
                          f"已保留 [bold]{esc(r.memory.key)}[/bold] = {esc(shown(r.memory.value))}"))
    else:
        console.print(f"[yellow]{r.op.value}[/yellow] {r.reason.value if r.reason else ''} {esc(r.detail or '')}")


@federation_app.command("dead-letters")
def federation_dead_letters(tenant: str, user_id: Annotated[str | None, typer.Argument()] = None,
                            store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List remote events set aside after `federate_max_deliveries` failed applies (operators): the event id,
    user, source domain, action, keys, attempts and the last error. Reads the store only.

    Example: usermem federation dead-letters acme
    """
    from usermem.config import load_settings
    from usermem.engine.federation import dead_letters
    from usermem.interfaces.cli_output import require_existing_store
    from usermem.store.base import open_store

    configured = load_settings().store_url
    url = store or (configured if configured != "sqlite://" else "sqlite:///data/usermem.db")  # as open_memory
    require_existing_store(url)
    s = open_store(url)
    try:
        items = dead_letters(s, tenant, user_id)
    finally:
        s.close()
    if as_json:
        print(dumps(items))
        return
    out = table(f"{tenant} dead letters", "event", "user", say("from", "来源"), "action", "keys", "attempts", "error")
    for d in items:
        out.add_row(cell(d["event_id"]), cell(d["user_id"]), cell(d.get("domain") or "-"), cell(d["action"]),
                    cell(", ".join(d.get("keys") or [])), cell(str(d["attempts"])), cell(d["error"]))
    console.print(out)
