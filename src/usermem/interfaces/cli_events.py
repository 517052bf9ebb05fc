"""`usermem events tail`: print usermem's change events from NATS JetStream as they arrive (docs/events.md)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Annotated

import typer

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_output import esc as escape

events_app = typer.Typer(help="Change events on NATS JetStream (federated sync, erasure broadcast).",
                         no_args_is_help=True)
app.add_typer(events_app, name="events")


def _line(change: object) -> str:
    from usermem.events.payload import RemoteChange

    assert isinstance(change, RemoteChange)
    when = dt.datetime.fromtimestamp(change.at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    colour = "red" if change.is_erasure else "green" if change.action == "write" else "cyan"
    keys = ", ".join(change.keys) if change.keys else "—"
    values = change.values
    shown = f" = {json.dumps(values, ensure_ascii=False)}" if values else ""
    return (f"{when}  [bold]{escape(change.tenant)}[/bold]/{escape(change.user_id)}"
            f"  [{colour}]{escape(change.action)}[/{colour}]"
            f"  {escape(keys)}{escape(shown)}  client={escape(change.client_id or '—')}"
            f"  cause={escape(change.causality_id[:12])}  origin={escape(change.origin[:12])}")


@events_app.command("tail")
def tail(
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant's events")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's events (needs --tenant)")] = None,
    url: Annotated[str | None, typer.Option("--url", help="NATS URL (default: nats_url setting)")] = None,
    stream: Annotated[str | None, typer.Option("--stream", help="JetStream stream (default: nats_stream)")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Subject prefix (default: nats_subject_prefix)")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Stop after this many events (0: never)")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop after this many seconds (0: never)")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print each payload as one JSON line")] = False,
) -> None:
    """Follow change events from now on: keys, client, causality and origin of each change; values only for
    L1 fields (the only ones ever published). Ctrl-C stops.

    Example: usermem events tail --tenant acme --url nats://127.0.0.1:4222
    """
    from usermem.config import load_settings, redact_url
    from usermem.errors import InvalidArgument
    from usermem.events import EventBus, filter_subject

    settings = load_settings()
    nats_url = url or settings.nats_url
    if not nats_url:
        raise InvalidArgument("no NATS URL: pass --url or set nats_url (USERMEM_NATS_URL)")
    if user is not None and tenant is None:
        raise InvalidArgument("--user needs --tenant (the subject holds a hash of tenant and user)")
    bus = EventBus(nats_url, stream=stream or settings.nats_stream,
                   subject_prefix=prefix or settings.nats_subject_prefix, name="usermem-tail")
    seen = 0
    done = threading.Event()
    lock = threading.Lock()

    def show(change: object) -> None:
        nonlocal seen
        with lock:
            if done.is_set():
                return
            if as_json:
                print(json.dumps(getattr(change, "raw", {}), ensure_ascii=False), flush=True)
            else:
                console.print(_line(change), highlight=False, soft_wrap=True)
            seen += 1
            if count and seen >= count:
                done.set()

    try:
        if not bus.wait_connected(min(timeout, 5.0) if timeout else 5.0):
            console.print(f"[yellow]waiting for NATS at {escape(redact_url(nats_url))}[/yellow] "
                          f"({escape(str(bus.stats()['last_error']))})")
        bus.subscribe(show, filter_subject(bus.prefix, tenant, user))
        if not as_json:
            scope = "all tenants" if tenant is None else f"tenant {tenant}" + (f", user {user}" if user else "")
            console.print(f"[dim]following {escape(bus.stream)} ({escape(scope)}) — Ctrl-C to stop[/dim]")
        deadline = time.monotonic() + timeout if timeout else None
        while not done.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            done.wait(0.5 if left is None else min(0.5, left))
    except KeyboardInterrupt:
        pass
    finally:
        done.set()
        bus.close(timeout=2.0)
