"""`usermem storage`: check the configured storage and show where each kind is stored and served from."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import esc


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
    from usermem.model import Kind
    from usermem.store.postgres import _redact_url
    from usermem.store.tiered import TieredStore, resolve_routes

    m = open_memory(store)
    try:
        s: Any = m.store
        record = s.record if isinstance(s, TieredStore) else s
        s.ping()
        routes = resolve_routes(m.settings.preset, m.settings.routes)
        console.print(f"store of record: [bold]{esc(_redact_url(record.url))}[/bold] ({type(record).__name__})"
                      + (f", schema version {record.schema_version()}" if hasattr(record, "schema_version") else "")
                      + f", {record.count():,} rows")
        table = Table(title=esc(f"preset {m.settings.preset!r}: where each kind lives"))
        for col in ("kind", "written to", "served from"):
            table.add_column(col)
        for kind in Kind:
            route = routes[kind]
            table.add_row(kind.value, "store of record", esc("store of record" if route == "record" else route))
        console.print(table)
        if isinstance(s, TieredStore):
            for tier in s.tiers:
                if reconcile:
                    n = s.reconcile(tier)
                    console.print(f"tier {esc(tier.name)}: reconciled {n} dirty users")
            for name, st in s.tier_status().items():
                state = "[green]healthy[/green]" if st["healthy"] else f"[red]unavailable[/red]: {esc(st['last_error'])}"
                console.print(f"tier {esc(name)} ({esc(', '.join(st['kinds']))}): {state}")
    finally:
        m.close()
