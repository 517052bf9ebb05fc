"""Lifecycle CLI: confirm, deny, revert, revert a change set, sessions, and the decay defaults."""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory

sessions_app = typer.Typer(help="Sessions: list, close, expire idle ones.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

ActorOpt = Annotated[str | None, typer.Option(help="Who made the change (recorded in history and audit)")]
SourceOpt = Annotated[str, typer.Option(help="Authority of the change: user_confirmed, agent_confirmed, system")]


def _value(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)[:60]


@app.command()
def confirm(tenant: str, user_id: str, memory_id: str, store: StoreOpt = None, actor: ActorOpt = None,
            source: SourceOpt = "user_confirmed") -> None:
    """Record that the user confirmed a memory (its weight returns to base).

    Example: usermem confirm acme u1 01a2…
    """
    r = open_memory(store).confirm(tenant, user_id, memory_id, actor=actor, source=source)
    console.print(f"confirmed [bold]{r.key}[/bold] = {_value(r.value)} (version {r.id}, source {r.source.value})")


@app.command()
def deny(tenant: str, user_id: str, memory_id: str, store: StoreOpt = None, actor: ActorOpt = None,
         source: SourceOpt = "user_confirmed") -> None:
    """Record that the user said a memory is wrong: a retraction version supersedes it.

    Example: usermem deny acme u1 01a2…
    """
    r = open_memory(store).deny(tenant, user_id, memory_id, actor=actor, source=source)
    console.print(f"retracted [bold]{r.key}[/bold] (retraction {r.id}; change set {r.change_set_id})")


@app.command()
def revert(
    tenant: str, user_id: str, key: str, store: StoreOpt = None,
    to: Annotated[str | None, typer.Option("--to", help="Version id, or 1-based position in `usermem history`")] = None,
    actor: ActorOpt = None, source: SourceOpt = "user_confirmed",
) -> None:
    """Restore the previous (or a named) value of a key as a new version.

    Example: usermem revert edu stu1 report_format --to 1
    """
    target: str | int | None = int(to) if to is not None and to.isdigit() else to
    r = open_memory(store).revert(tenant, user_id, key, target, actor=actor, source=source)
    if r.memory is not None and r.op.value in ("ADD", "UPDATE"):
        console.print(f"[green]{r.op.value}[/green] {key} = {_value(r.memory.value)} ({r.detail})")
    else:
        console.print(f"[yellow]{r.op.value}[/yellow] {r.reason.value if r.reason else ''} {r.detail or ''}")
        if r.op.value == "REJECT":
            raise typer.Exit(1)


@app.command("revert-change-set")
def revert_change_set(
    tenant: str, change_set_id: str, store: StoreOpt = None, actor: ActorOpt = None,
    source: SourceOpt = "user_confirmed",
    partial: Annotated[bool, typer.Option(help="Revert what can be reverted and report the rest")] = False,
) -> None:
    """Undo every write of a change set at once ("undo my last settings").

    Example: usermem revert-change-set edu 01a2…
    """
    out = open_memory(store).revert_change_set(tenant, change_set_id, actor=actor, source=source, partial=partial)
    console.print(f"reverted [bold]{out.reverted}[/bold] keys; undo this with change set {out.change_set_id}")
    for user, key, why in out.conflicts:
        console.print(f"[yellow]skipped[/yellow] {user}/{key}: {why}")


@sessions_app.command("list")
def sessions_list(tenant: str, user_id: str, store: StoreOpt = None,
                  status: Annotated[str | None, typer.Option(help="open or closed")] = None) -> None:
    """A user's sessions.

    Example: usermem sessions list acme u1 --status open
    """
    table = Table(title=f"sessions of {tenant}/{user_id}")
    for col in ("id", "client", "opened", "last activity", "status", "reason", "episode"):
        table.add_column(col)
    for s in open_memory(store).sessions(tenant, user_id, status=status):
        table.add_row(s.id, s.client_id or "-", f"{s.opened_at:.0f}", f"{s.last_activity_at:.0f}", s.status,
                      s.close_reason or "-", s.episode_id or "-")
    console.print(table)


@sessions_app.command("close")
def sessions_close(session_id: str, store: StoreOpt = None,
                   tenant: Annotated[str | None, typer.Option(help="The session's tenant (checked)")] = None) -> None:
    """Close a session: archive it as an episode and retire its context.

    Example: usermem sessions close 01a2… --tenant acme
    """
    c = open_memory(store).close_session(session_id, tenant=tenant)
    state = "was already closed" if c.already_closed else f"closed ({c.reason})"
    console.print(f"session {session_id} {state}; episode {c.episode.id if c.episode else '-'}; "
                  f"{len(c.context)} context memories retired")


@sessions_app.command("expire")
def sessions_expire(store: StoreOpt = None,
                    tenant: Annotated[str | None, typer.Option(help="Only this tenant's sessions")] = None) -> None:
    """Close every session idle past its timeout (run it from cron or a timer).

    Example: usermem sessions expire --store sqlite:///data/usermem.db
    """
    closed = open_memory(store).expire_idle_sessions(tenant=tenant)
    console.print(f"expired [bold]{len(closed)}[/bold] idle sessions")


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

    table = Table(title=f"decay defaults (confirm < {confirm_at}, drop < {drop_at}, use lifts to {USE_BOOST})",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kind", "half-life", "1/λ", "judged", "flag", "drop", "flag*", "TTL"):
        table.add_column(col, no_wrap=True)
    for kind, spec in KIND_REGISTRY.items():
        hl = spec.half_life_seconds
        judged = spec.volatile
        table.add_row(kind.value, span(hl), span(time_constant(hl)), "yes" if judged else "no",
                      span(crossing_time(1.0, confirm_at, hl)) if judged else "-",
                      span(crossing_time(1.0, drop_at, hl)) if judged else "-",
                      span(crossing_time(USE_BOOST, confirm_at, hl)) if judged else "-",
                      span(spec.ttl_seconds) if spec.ttl_seconds else "none")
    console.print(table)
    console.print("flag / drop: age at which a fresh memory is flagged / dropped; flag*: time after a use")
    standing = sorted(c.key for c in ContractSet() if c.standing)
    console.print(f"standing fields (never flagged or dropped): {', '.join(standing)}")
