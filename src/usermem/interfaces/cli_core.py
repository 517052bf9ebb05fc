"""Core CLI commands: demo, purge, inspect, history, forget, export."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_output import cell, esc, say, shown, table

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

    run_demo(open_memory(store, create=True) if store else Memory(), console)


@app.command()
def purge(
    store: StoreOpt = None,
    now: Annotated[bool, typer.Option("--now", help="Ignore the retention period: purge everything deleted/expired")] = False,
    retention_days: Annotated[float | None, typer.Option(help="Override the retention period (days)")] = None,
) -> None:
    """Physically delete soft-deleted and expired memories past retention, and compact the store.

    Example: usermem purge --now --store sqlite:///data/usermem.db
    """
    with open_memory(store) as m, console.status(say("purging…", "正在清除…")):
        n = m.purge(retention_days=0.0 if now else retention_days)
    console.print(say(f"purged [bold]{n}[/bold] rows from {esc(m.store.url)}",
                      f"已从 {esc(m.store.url)} 物理删除 [bold]{n}[/bold] 行"))


@app.command()
def inspect(
    tenant: str, user_id: str, store: StoreOpt = None,
    k: Annotated[int, typer.Option(help="How many memories to show")] = 50,
) -> None:
    """Show a user's current memories with weights, sources and expiry.

    Example: usermem inspect cloudledger C007
    """
    out = table(f"{tenant}/{user_id}", "key", "kind", "value", "source", "importance", "weight", "score",
                "expires", "flag")
    with open_memory(store) as m:
        scored = m.recall_scored(tenant, user_id, k=k)
    for s in scored:
        r = s.memory
        out.add_row(cell(r.key), r.kind.value, cell(shown(r.value)), r.source.value,
                    f"{r.importance:.2f}", f"{s.weight:.2f}", f"{s.score:.3f}", _when(r.expires_at),
                    cell(s.question or ""))
    console.print(out)


@app.command()
def history(tenant: str, user_id: str, key: str, store: StoreOpt = None) -> None:
    """Show a key's version timeline, oldest first.

    Example: usermem history cloudledger C007 plan
    """
    out = table(f"{tenant}/{user_id}/{key}", "created", "value", "source", "actor", "state")
    with open_memory(store) as m:
        versions = m.history(tenant, user_id, key)
    for r in versions:
        state = "current" if r.is_current else "superseded"
        out.add_row(_when(r.created_at), cell(shown(r.value)), r.source.value,
                    cell(r.actor or "-"), state + (" (retracted)" if r.retracted else ""))
    console.print(out)


@app.command()
def forget(
    tenant: str, user_id: str,
    key: Annotated[str | None, typer.Option(help="Forget one key only")] = None,
    store: StoreOpt = None,
    yes: YesOpt = False,
    actor: Annotated[str | None, typer.Option(help="Who asked for the erasure (recorded in the audit log)")] = None,
) -> None:
    """Forget a key, or everything about a user (soft delete; purge removes the bytes).

    Forgetting a whole user asks for confirmation at a terminal; scripts pass --yes (without a terminal
    and without --yes the command refuses, exit code 2).

    Example: usermem forget cloudledger C007 --key plan
    """
    with open_memory(store) as m:
        if key is None:
            _confirm_forget_user(tenant, user_id, yes)
        # `--key ""` must not fall through to erasing the whole user.
        n = m.forget(tenant, user_id, key, actor=actor) if key is not None else m.forget_user(tenant, user_id,
                                                                                            actor=actor)
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
