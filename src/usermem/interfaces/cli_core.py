"""Core CLI commands: demo, purge, inspect, history, forget, export."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.interfaces.cli import app, console

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URL, e.g. sqlite:///data/usermem.db")]


def open_memory(store: str | None) -> Memory:
    settings = load_settings()
    if store:
        settings = settings.with_overrides(store_url=store)
    elif settings.store_url == "sqlite://":
        settings = settings.with_overrides(store_url="sqlite:///data/usermem.db")
    return Memory(settings=settings)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@app.command()
def demo(store: StoreOpt = None) -> None:
    """Replay the C007 support timeline from the design document and print every decision.

    Example: usermem demo --store sqlite:///data/demo.db
    """
    from usermem.interfaces.demo import run_demo

    run_demo(open_memory(store) if store else Memory(), console)


@app.command()
def purge(
    store: StoreOpt = None,
    now: Annotated[bool, typer.Option("--now", help="Ignore the retention period: purge everything deleted/expired")] = False,
    retention_days: Annotated[float | None, typer.Option(help="Override the retention period (days)")] = None,
) -> None:
    """Physically delete soft-deleted and expired memories past retention, and compact the store.

    Example: usermem purge --now --store sqlite:///data/usermem.db
    """
    m = open_memory(store)
    with console.status("purging…"):
        n = m.purge(retention_days=0.0 if now else retention_days)
    console.print(f"purged [bold]{n}[/bold] rows from {m.store.url}")


@app.command()
def inspect(
    tenant: str, user_id: str, store: StoreOpt = None,
    k: Annotated[int, typer.Option(help="How many memories to show")] = 50,
) -> None:
    """Show a user's current memories with weights, sources and expiry.

    Example: usermem inspect cloudledger C007
    """
    m = open_memory(store)
    table = Table(title=f"{tenant}/{user_id}")
    for col in ("key", "kind", "value", "source", "importance", "weight", "score", "expires", "flag"):
        table.add_column(col)
    for s in m.recall_scored(tenant, user_id, k=k):
        r = s.memory
        table.add_row(r.key, r.kind.value, json.dumps(r.value, ensure_ascii=False)[:60], r.source.value,
                      f"{r.importance:.2f}", f"{s.weight:.2f}", f"{s.score:.3f}", _when(r.expires_at),
                      s.question or "")
    console.print(table)


@app.command()
def history(tenant: str, user_id: str, key: str, store: StoreOpt = None) -> None:
    """Show a key's version timeline, oldest first.

    Example: usermem history cloudledger C007 plan
    """
    m = open_memory(store)
    table = Table(title=f"{tenant}/{user_id}/{key}")
    for col in ("created", "value", "source", "actor", "state"):
        table.add_column(col)
    for r in m.history(tenant, user_id, key):
        state = "current" if r.is_current else "superseded"
        table.add_row(_when(r.created_at), json.dumps(r.value, ensure_ascii=False)[:60], r.source.value,
                      r.actor or "-", state + (" (retracted)" if r.retracted else ""))
    console.print(table)


@app.command()
def forget(
    tenant: str, user_id: str,
    key: Annotated[str | None, typer.Option(help="Forget one key only")] = None,
    store: StoreOpt = None,
) -> None:
    """Forget a key, or everything about a user (soft delete; purge removes the bytes).

    Example: usermem forget cloudledger C007 --key plan
    """
    m = open_memory(store)
    # `--key ""` must not fall through to erasing the whole user.
    n = m.forget(tenant, user_id, key) if key is not None else m.forget_user(tenant, user_id)
    console.print(f"forgot [bold]{n}[/bold] rows")
