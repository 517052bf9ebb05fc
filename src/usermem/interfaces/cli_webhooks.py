"""`usermem webhooks ...`: the tenant's webhook subscriptions for change events, the delivery log, a test ping,
and one delivery pass for deployments that do not run `usermem serve` (docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from usermem.interfaces.cli import app, console, err_console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import cell, say, table
from usermem.interfaces.cli_params import AtOpt, JsonOpt, dumps

webhooks_app = typer.Typer(help="Webhook subscriptions for change events (write, revert, forget, consent).",
                           no_args_is_help=True)
app.add_typer(webhooks_app, name="webhooks")

ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who makes the change (for the audit log)")]


@webhooks_app.command("add")
def webhooks_add(
    tenant: str, url: Annotated[str, typer.Argument(help="The receiver: an http(s) URL")],
    events: Annotated[list[str] | None, typer.Option(
        "--event", help="write | revert | forget | consent (repeat; default: all)")] = None,
    secret: Annotated[str | None, typer.Option(
        help="Signing secret, 16-256 characters (default: a random one; prefer the default: a command line is "
             "visible to other local users)")] = None,
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Subscribe a URL to the tenant's change events; prints the signing secret once (it is never shown again).

    Example: usermem webhooks add acme https://example.com/hook --event write --event forget
    """
    with open_memory(store, create=True) as m:
        created = m.create_webhook(tenant, url, events or None, secret=secret, actor=actor, now=at)
    if as_json:
        print(dumps(created))
        return
    console.print(created.webhook.id, markup=False, highlight=False)
    console.print(f"secret: {created.secret}", markup=False, highlight=False)
    err_console.print(say("Keep the secret now: it is not shown again (receivers check X-Usermem-Signature "
                          "with it).", "请现在保存密钥：之后不再显示（接收方用它校验 X-Usermem-Signature）。"))


@webhooks_app.command("list")
def webhooks_list(tenant: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The tenant's webhook subscriptions (never their secrets).

    Example: usermem webhooks list acme --json
    """
    with open_memory(store) as m:
        hooks = m.list_webhooks(tenant)
    if as_json:
        print(dumps(hooks))
        return
    out = table(f"webhooks of {tenant}", "id", "url", "events", "enabled", "failures")
    for h in hooks:
        out.add_row(cell(h.id), cell(h.url), cell(",".join(h.events)),
                    cell("yes" if h.enabled else f"no ({h.disabled_reason})"), str(h.failures))
    console.print(out)


@webhooks_app.command("show")
def webhooks_show(tenant: str, webhook_id: str, store: StoreOpt = None) -> None:
    """One webhook subscription as JSON (never its secret).

    Example: usermem webhooks show acme wh_0190f3...
    """
    with open_memory(store) as m:
        print(dumps(m.get_webhook(tenant, webhook_id)))


@webhooks_app.command("delete")
def webhooks_delete(tenant: str, webhook_id: str, actor: ActorOpt = None, at: AtOpt = None,
                    store: StoreOpt = None) -> None:
    """Delete a webhook subscription (its pending deliveries are skipped).

    Example: usermem webhooks delete acme wh_0190f3...
    """
    with open_memory(store) as m:
        ok = m.delete_webhook(tenant, webhook_id, actor=actor, now=at)
    console.print(say("deleted", "已删除") if ok else say("no such webhook", "没有这个 webhook"))
    if not ok:
        raise typer.Exit(1)


@webhooks_app.command("enable")
def webhooks_enable(tenant: str, webhook_id: str, actor: ActorOpt = None, at: AtOpt = None,
                    store: StoreOpt = None) -> None:
    """Re-enable a subscription disabled after repeated failures.

    Example: usermem webhooks enable acme wh_0190f3...
    """
    with open_memory(store) as m:
        print(dumps(m.enable_webhook(tenant, webhook_id, actor=actor, now=at)))


@webhooks_app.command("ping")
def webhooks_ping(tenant: str, webhook_id: str, at: AtOpt = None, store: StoreOpt = None) -> None:
    """Send one signed `ping` event now and print the delivery (exit 1 when the receiver did not take it).

    Example: usermem webhooks ping acme wh_0190f3...
    """
    with open_memory(store) as m:
        delivery = m.ping_webhook(tenant, webhook_id, now=at)
    print(dumps(delivery))
    if delivery.state != "delivered":
        raise typer.Exit(1)


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    tenant: str,
    webhook_id: Annotated[str | None, typer.Option("--webhook", help="Only this subscription's deliveries")] = None,
    limit: Annotated[int, typer.Option(help="The last this many deliveries", min=1, max=10_000)] = 100,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """The delivery log, oldest first: event, state and attempts of each delivery.

    Example: usermem webhooks deliveries acme --webhook wh_0190f3... --json
    """
    with open_memory(store) as m:
        rows = m.webhook_deliveries(tenant, webhook_id, limit=limit)
    if as_json:
        print(dumps(rows))
        return
    out = table(f"webhook deliveries of {tenant}", "id", "webhook", "type", "state", "attempts", "last")
    for d in rows:
        last = d.attempts[-1] if d.attempts else None
        out.add_row(cell(d.id), cell(d.webhook_id), cell(d.type), cell(d.state), str(len(d.attempts)),
                    cell("-" if last is None else (last.error or str(last.status))))
    console.print(out)


@webhooks_app.command("deliver")
def webhooks_deliver(at: AtOpt = None, store: StoreOpt = None) -> None:
    """Send every due delivery once (all tenants) and print how many were attempted; `usermem serve` does this
    in the background, this is for deployments that write without it (run it from cron or a loop).

    Example: usermem webhooks deliver --store postgresql://localhost/usermem
    """
    with open_memory(store) as m:
        done = m.webhooks.deliver_due(at)
    delivered = sum(1 for d in done if d.state == "delivered")
    console.print(f"{len(done)} attempted, {delivered} delivered", markup=False, highlight=False)
