"""Privacy commands: `usermem eval pii`, `usermem contracts list|show|enable|disable|history|unknown`,
`usermem export`, `usermem grants list|add|revoke`, `usermem redact`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from usermem.interfaces.cli import app, console, eval_app
from usermem.interfaces.cli_core import StoreOpt, open_memory

contracts_app = typer.Typer(help="Field contracts per tenant: what may be collected and who may read it.",
                            no_args_is_help=True)
grants_app = typer.Typer(help="Time-limited grants to read L2/L3 fields.", no_args_is_help=True)
app.add_typer(contracts_app, name="contracts")
app.add_typer(grants_app, name="grants")

TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="Tenant whose contracts to use")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who makes the change (for the audit log)")]
OutOpt = Annotated[Path, typer.Option("--out", help="Directory for the JSON and markdown reports")]


@eval_app.command("pii")
def eval_pii(
    out: OutOpt = Path("reports"),
    seed: Annotated[int, typer.Option(help="Faker / random seed of the generated corpus")] = 20261130,
    pii: Annotated[int, typer.Option(help="PII-bearing sentences to generate")] = 600,
    benign: Annotated[int, typer.Option(help="Benign sentences (full of ordinary numbers) to generate")] = 700,
) -> None:
    """Recall and false-positive rate of the PII detectors on a generated zh/en corpus.

    Example: usermem eval pii --out reports --pii 2000 --benign 3000
    """
    from usermem.evals.pii import build_corpus, evaluate, render_markdown

    with console.status("generating corpus and detecting…"):
        corpus = build_corpus(seed=seed, pii=pii, benign=benign)
        report = evaluate(corpus)
    report["seed"] = seed
    table = Table(title=f"PII detectors — {report['pii_sentences']} PII / {report['benign_sentences']} benign sentences")
    for col in ("kind", "planted", "detected", "recall", "FP sentences", "FP rate"):
        table.add_column(col, justify="right" if col != "kind" else "left")
    for kind, v in report["per_kind"].items():
        table.add_row(kind, str(v["planted"]), str(v["detected"]), "-" if v["recall"] is None else f"{v['recall']:.2%}",
                      str(v["false_positive_sentences"]), f"{v['false_positive_rate']:.2%}")
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pii.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "pii.md").write_text(render_markdown(report, seed), encoding="utf-8")
    verdict = "[green]targets met[/green]" if report["meets_targets"] else "[red]targets NOT met[/red]"
    console.print(f"{verdict}; wrote {out / 'pii.json'} and {out / 'pii.md'}")
    if not report["meets_targets"]:
        raise typer.Exit(1)


@app.command()
def redact(
    text: Annotated[str | None, typer.Argument(help="Text to filter; read from stdin when omitted")] = None,
    placeholder: Annotated[str, typer.Option(help="Replacement for each finding")] = "[已脱敏]",
) -> None:
    """Print text with personal data (ID, card, mobile numbers, secrets, e-mail) replaced.

    Example: echo "手机 13800138000" | usermem redact --placeholder "[REDACTED]"
    """
    from usermem.privacy import redact as _redact

    data = sys.stdin.read() if text is None else text
    console.print(_redact(data, placeholder), markup=False, highlight=False, end="" if text is None else "\n")


@app.command()
def export(
    tenant: str, user_id: str, store: StoreOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON here instead of stdout")] = None,
    actor: ActorOpt = None,
) -> None:
    """Export everything held about a user (current values, history, documents) as JSON.

    Example: usermem export cloudledger C007 --out C007.json
    """
    m = open_memory(store)
    data = json.dumps(m.export(tenant, user_id, actor=actor), indent=2, ensure_ascii=False)
    if out is None:
        print(data)
    else:
        out.write_text(data, encoding="utf-8")
        console.print(f"wrote {out}")


@contracts_app.command("list")
def contracts_list(tenant: TenantOpt = "default", store: StoreOpt = None) -> None:
    """List the tenant's field contracts.

    Example: usermem contracts list --tenant cloudledger
    """
    m = open_memory(store)
    table = Table(title=f"contracts of {tenant} (unknown fields: {m.contracts_for(tenant).unknown.value})")
    for col in ("key", "kind", "level", "domain", "sharing", "enabled", "live", "version", "description"):
        table.add_column(col)
    for c in m.contracts_list(tenant):
        table.add_row(c.key, c.kind.value, c.sensitivity.value, c.domain, c.sharing.value,
                      "yes" if c.enabled else "[red]no[/red]", "yes" if c.live else "", str(c.version),
                      c.description)
    console.print(table)


@contracts_app.command("show")
def contracts_show(key: str, tenant: TenantOpt = "default", store: StoreOpt = None) -> None:
    """Show one contract as JSON.

    Example: usermem contracts show allergy --tenant cloudledger
    """
    console.print_json(json.dumps(open_memory(store).contract(tenant, key).to_dict(), ensure_ascii=False))


@contracts_app.command("enable")
def contracts_enable(key: str, tenant: TenantOpt = "default", store: StoreOpt = None, actor: ActorOpt = None) -> None:
    """Enable collection and recall of a field (takes effect at once).

    Example: usermem contracts enable reply_length --tenant cloudledger
    """
    c = open_memory(store).enable_field(tenant, key, actor=actor)
    console.print(f"{key}: enabled (version {c.version})")


@contracts_app.command("disable")
def contracts_disable(key: str, tenant: TenantOpt = "default", store: StoreOpt = None,
                      actor: ActorOpt = None) -> None:
    """Stop collecting and recalling a field at once (stored values stay until forgotten).

    Example: usermem contracts disable allergy --tenant cloudledger
    """
    c = open_memory(store).disable_field(tenant, key, actor=actor)
    console.print(f"{key}: disabled (version {c.version})")


@contracts_app.command("set")
def contracts_set(
    file: Annotated[Path, typer.Argument(help="JSON file with one contract (key, kind, sensitivity, ...)")],
    tenant: TenantOpt = "default", store: StoreOpt = None, actor: ActorOpt = None,
) -> None:
    """Add or replace a contract from a JSON file (a new version).

    Example: usermem contracts set shoe_size.json --tenant cloudledger
    """
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}") from None
    c = open_memory(store).set_contract(tenant, data, actor=actor)
    console.print(f"{c.key}: version {c.version}")


@contracts_app.command("history")
def contracts_history(key: str, tenant: TenantOpt = "default", store: StoreOpt = None) -> None:
    """Show the stored versions of a field's contract.

    Example: usermem contracts history reply_length --tenant cloudledger
    """
    table = Table(title=f"{tenant}/{key}")
    for col in ("version", "change", "actor", "at", "enabled"):
        table.add_column(col)
    for h in open_memory(store).contract_history(tenant, key):
        c = h.get("contract") or {}
        table.add_row(str(h["version"]), h["change"], h.get("actor") or "-", f"{h['at']:.0f}",
                      str(c.get("enabled", "-")))
    console.print(table)


@contracts_app.command("unknown")
def contracts_unknown(policy: Annotated[str, typer.Argument(help="accept or reject")], tenant: TenantOpt = "default",
                      store: StoreOpt = None, actor: ActorOpt = None) -> None:
    """Set what happens to keys without a contract: reject, or accept as L1.

    Example: usermem contracts unknown reject --tenant cloudledger
    """
    console.print(f"unknown fields: {open_memory(store).set_unknown_fields(tenant, policy, actor=actor)}")


@grants_app.command("add")
def grants_add(
    tenant: str, user_id: str,
    fields: Annotated[str, typer.Argument(help="L2, L3, or comma-separated field keys")],
    purpose: Annotated[str, typer.Option(help="Why the data is read (audited)")],
    ttl: Annotated[float, typer.Option(help="Seconds until the grant ends")] = 1800.0,
    store: StoreOpt = None, actor: ActorOpt = None,
) -> None:
    """Grant time-limited reads of L2/L3 fields.

    Example: usermem grants add cloudledger C007 L2 --purpose "deliver order"
    """
    scope = fields if fields.upper() in ("L2", "L3", "L1") else [f.strip() for f in fields.split(",") if f.strip()]
    gid = open_memory(store).grant(tenant, user_id, scope, purpose, ttl, actor=actor)
    console.print(gid)


@grants_app.command("revoke")
def grants_revoke(grant_id: str, store: StoreOpt = None, actor: ActorOpt = None) -> None:
    """End a grant now.

    Example: usermem grants revoke 0190f3...
    """
    ok = open_memory(store).revoke(grant_id, actor=actor)
    console.print("revoked" if ok else "no such grant")
    if not ok:
        raise typer.Exit(1)


@grants_app.command("list")
def grants_list(tenant: str, user_id: Annotated[str | None, typer.Argument()] = None, store: StoreOpt = None) -> None:
    """List active grants.

    Example: usermem grants list cloudledger C007
    """
    table = Table(title=f"active grants of {tenant}")
    for col in ("id", "user", "scope", "purpose", "expires", "grantee"):
        table.add_column(col)
    for g in open_memory(store).grants(tenant, user_id):
        table.add_row(g.id, g.user_id, g.level.value if g.level else ",".join(g.fields), g.purpose,
                      f"{g.expires_at:.0f}", g.grantee or "any")
    console.print(table)
