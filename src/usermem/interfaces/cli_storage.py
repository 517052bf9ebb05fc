"""`usermem storage`: check the configured storage and show where each kind is stored and served from."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import esc, say


@app.command()
def storage(
    store: StoreOpt = None,
    reconcile: Annotated[bool, typer.Option(
        "--reconcile", help="Erase the cached copies of users marked dirty after a tier failure, now")] = False,
) -> None:
    """Open the configured store (usermem.toml / USERMEM_* / --store), check every tier, show the routes.

    Example: USERMEM_PRESET=tiered USERMEM_REDIS_URL=redis://127.0.0.1:6379/0 \\
    usermem storage --store postgresql://postgres@127.0.0.1/usermem
    """
    from usermem.config import redact_url
    from usermem.model import Kind
    from usermem.store.tiered import TieredStore, resolve_routes

    m = open_memory(store)
    try:
        s = m.store
        s.ping()
        # A tiered store declares its tiers; then it is the TieredStore that knows them and its record.
        tiered = s if s.capabilities.tiers and isinstance(s, TieredStore) else None
        record = tiered.record if tiered is not None else s
        dialect = record.capabilities.dialect or "no SQL"
        routes = resolve_routes(m.settings.preset, m.settings.routes)
        console.print(say(f"store of record: [bold]{esc(redact_url(record.url))}[/bold] ({esc(dialect)}), "
                          f"schema version {record.schema_version()}, {record.count():,} rows",
                          f"主存储：[bold]{esc(redact_url(record.url))}[/bold]（{esc(dialect)}），"
                          f"模式版本 {record.schema_version()}，{record.count():,} 行"))
        table = Table(title=esc(f"preset {m.settings.preset!r}: where each kind lives"))
        for col in ("kind", "written to", "served from"):
            table.add_column(col)
        for kind in Kind:
            route = routes[kind]
            table.add_row(kind.value, "store of record", esc("store of record" if route == "record" else route))
        console.print(table)
        if tiered is not None:
            for tier in tiered.tiers:
                if reconcile:
                    n = tiered.reconcile(tier)
                    console.print(say(f"tier {esc(tier.name)}: reconciled {n} dirty users",
                                      f"层 {esc(tier.name)}：已对账 {n} 个脏用户"))
            for name, st in tiered.tier_status().items():
                state = "[green]healthy[/green]" if st["healthy"] else f"[red]unavailable[/red]: {esc(st['last_error'])}"
                console.print(f"tier {esc(name)} ({esc(', '.join(st['kinds']))}): {state}")
    finally:
        m.close()
