"""Privacy commands: `usermem eval pii`, `usermem contracts list|show|enable|disable|history|unknown`,
`usermem export`, `usermem grants list|add|revoke`, `usermem redact`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console, eval_app
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import cell, esc, say, table
from usermem.interfaces.cli_params import AtOpt, JsonOpt, dumps

contracts_app = typer.Typer(help="Field contracts per tenant: what may be collected and who may read it.",
                            no_args_is_help=True)
grants_app = typer.Typer(help="Time-limited grants to read L2/L3 fields.", no_args_is_help=True)
app.add_typer(contracts_app, name="contracts")
app.add_typer(grants_app, name="grants")

TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="Tenant whose contracts to use")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who makes the change (for the audit log)")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Directory for the JSON and markdown reports (default: a fresh runs/<name>-<run id>/)")]


@eval_app.command("pii")
def eval_pii(
    out: OutOpt = None,
    seed: Annotated[int, typer.Option(help="Faker / random seed of the generated corpus")] = 20261130,
    pii: Annotated[int, typer.Option(help="PII-bearing sentences to generate")] = 600,
    benign: Annotated[int, typer.Option(help="Benign sentences (full of ordinary numbers) to generate")] = 700,
) -> None:
    """Recall and false-positive rate of the PII detectors on a generated zh/en corpus.

    Example: usermem eval pii --out reports --pii 2000 --benign 3000
    """
    from usermem.evals import fresh_out
    from usermem.evals.pii import build_corpus, evaluate, render_markdown

    out = cli_output.writable_dir(out or fresh_out("eval-pii"))
    with console.status(say("generating corpus and detecting…", "正在生成语料并检测…")):
        corpus = build_corpus(seed=seed, pii=pii, benign=benign)
        report = evaluate(corpus)
    report["seed"] = seed
    pii_table = Table(title=f"PII detectors — {report['pii_sentences']} PII / {report['benign_sentences']} benign sentences")
    for col in ("kind", "planted", "detected", "recall", "FP sentences", "FP rate"):
        pii_table.add_column(col, justify="right" if col != "kind" else "left")
    for kind, v in report["per_kind"].items():
        pii_table.add_row(kind, str(v["planted"]), str(v["detected"]),
                          "-" if v["recall"] is None else f"{v['recall']:.2%}",
                          str(v["false_positive_sentences"]), f"{v['false_positive_rate']:.2%}")
    console.print(pii_table)
    cli_output.write_file(out / "pii.json", json.dumps(report, indent=2, ensure_ascii=False))
    cli_output.write_file(out / "pii.md", render_markdown(report, seed))
    verdict = (say("[green]targets met[/green]", "[green]达到目标[/green]") if report["meets_targets"]
               else say("[red]targets NOT met[/red]", "[red]未达到目标[/red]"))
    console.print(say(f"{verdict}; wrote {esc(out / 'pii.json')} and {esc(out / 'pii.md')}",
                      f"{verdict}；已写入 {esc(out / 'pii.json')} 和 {esc(out / 'pii.md')}"))
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
    actor: ActorOpt = None, at: AtOpt = None,
) -> None:
    """Export everything held about a user (current values, history, documents) as JSON.

    Example: usermem export cloudledger C007 --out C007.json
    """
    if out is not None and out.is_dir():
        cli_output.fail(say(f"--out {out}: is a directory; name a file", f"--out {out}：是目录，请给出文件名"))
    with open_memory(store) as m:
        data = json.dumps(m.export(tenant, user_id, actor=actor, now=at), indent=2, ensure_ascii=False)
    if out is None:
        print(data)
    else:
        cli_output.write_file(out, data)
        console.print(say(f"wrote {esc(out)}", f"已写入 {esc(out)}"))


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A usermem export (usermem export … --out FILE), or the "
                                              "conversations.json of a ChatGPT or Claude export; - for stdin")],
    store: StoreOpt = None,
    tenant: Annotated[str | None, typer.Option(help="Import as this tenant (default: the usermem export's; "
                                                    "required for conversations)")] = None,
    user: Annotated[str | None, typer.Option(help="Import as this user (default: the usermem export's; "
                                                  "required for conversations)")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Recorded in history and the audit log")] = "import",
    as_json: JsonOpt = False,
) -> None:
    """Import into this store: a user's usermem export (memories with their history, consents, consent requests
    and grants, through this store's guards), or ChatGPT / Claude
    conversations (each conversation's messages are ingested: extraction, then guarded writes). A
    conversation import that stops is resumed where it stopped when run again.

    Example: usermem import conversations.json --tenant acme --user alice --store sqlite:///data/usermem.db
    """
    from rich.progress import Progress

    from usermem.interfaces.importer import import_conversations, import_export

    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        cli_output.fail(f"{file}: not JSON ({exc})")
    if isinstance(data, list):
        if not tenant or not user:
            cli_output.fail(say("conversations need --tenant and --user", "导入对话需要 --tenant 和 --user"))
        with open_memory(store, create=True) as m, Progress(console=cli_output.err_console,
                                                             disable=as_json) as bar:
            task = bar.add_task("conversations", total=None)
            chats = import_conversations(m, tenant, user, data, actor=actor,
                                         progress=lambda done, total: bar.update(task, completed=done, total=total))
        if as_json:
            print(dumps(chats))
            return
        console.print(say(f"{chats.source}: {chats.ingested} conversations ingested ({chats.resumed_past} done "
                          f"before), {chats.written} memories written, {chats.rejected} refused"
                          + (f", {chats.skipped_messages} over-long messages not read" if chats.skipped_messages else ""),
                          f"{chats.source}：导入 {chats.ingested} 段对话（之前已完成 {chats.resumed_past}），"
                          f"写入 {chats.written} 条记忆，拒绝 {chats.rejected}"
                          + (f"，{chats.skipped_messages} 条过长的消息未读" if chats.skipped_messages else "")))
        return
    with open_memory(store, create=True) as m:
        report = import_export(m, data, tenant=tenant, user_id=user, actor=actor)
    if as_json:
        print(dumps(report))
        return
    console.print(say(f"{esc(report.tenant)}/{esc(report.user_id)}: {report.written} written ({report.history} "
                      f"earlier versions), {report.unchanged} unchanged, {len(report.rejected)} rejected, "
                      f"{report.skipped} without a current value; {report.grants} grants, {report.consents} "
                      f"consents, {report.consent_requests} consent requests",
                      f"{esc(report.tenant)}/{esc(report.user_id)}：写入 {report.written}（其中历史版本 "
                      f"{report.history}），未变 {report.unchanged}，拒绝 {len(report.rejected)}，无当前值 "
                      f"{report.skipped}；授权 {report.grants}，同意 {report.consents}，同意请求 "
                      f"{report.consent_requests}"))
    if report.not_replayed:
        console.print(say("  not replayed (the source instance's conversations): ", "  未重放（源实例的会话数据）：")
                      + esc(", ".join(f"{ns} {n}" for ns, n in sorted(report.not_replayed.items()))))
    for key, reason in report.rejected:
        console.print(f"  rejected {esc(key)}: {esc(reason)}")


@contracts_app.command("list")
def contracts_list(tenant: TenantOpt = "default", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List the tenant's field contracts.

    Example: usermem contracts list --tenant cloudledger
    """
    with open_memory(store) as m:
        unknown, contracts = m.contracts_for(tenant).unknown.value, m.contracts_list(tenant)
    if as_json:
        print(dumps({"unknown_fields": unknown, "contracts": contracts}))
        return
    out = table(f"contracts of {tenant} (unknown fields: {unknown})", "key", "kind", "level", "domain",
                "sharing", "enabled", "live", "version", "description")
    for c in contracts:
        out.add_row(cell(c.key), c.kind.value, c.sensitivity.value, cell(c.domain), c.sharing.value,
                    "yes" if c.enabled else "[red]no[/red]", "yes" if c.live else "", str(c.version),
                    cell(c.description))
    console.print(out)


@contracts_app.command("show")
def contracts_show(key: str, tenant: TenantOpt = "default", store: StoreOpt = None) -> None:
    """Show one contract as JSON.

    Example: usermem contracts show allergy --tenant cloudledger
    """
    with open_memory(store) as m:
        contract = m.contract(tenant, key).to_dict()
    console.print_json(json.dumps(contract, ensure_ascii=False))


@contracts_app.command("enable")
def contracts_enable(key: str, tenant: TenantOpt = "default", store: StoreOpt = None, actor: ActorOpt = None,
                     at: AtOpt = None) -> None:
    """Enable collection and recall of a field (takes effect at once).

    Example: usermem contracts enable reply_length --tenant cloudledger
    """
    with open_memory(store, create=True) as m:
        c = m.enable_field(tenant, key, actor=actor, now=at)
    console.print(say(f"{esc(key)}: enabled (version {c.version})", f"{esc(key)}：已启用（版本 {c.version}）"))


@contracts_app.command("disable")
def contracts_disable(key: str, tenant: TenantOpt = "default", store: StoreOpt = None,
                      actor: ActorOpt = None, at: AtOpt = None) -> None:
    """Stop collecting and recalling a field at once (stored values stay until forgotten).

    Example: usermem contracts disable allergy --tenant cloudledger
    """
    with open_memory(store, create=True) as m:
        c = m.disable_field(tenant, key, actor=actor, now=at)
    console.print(say(f"{esc(key)}: disabled (version {c.version})", f"{esc(key)}：已停用（版本 {c.version}）"))


@contracts_app.command("set")
def contracts_set(
    file: Annotated[Path, typer.Argument(help="JSON file with one contract (key, kind, sensitivity, ...)")],
    tenant: TenantOpt = "default", store: StoreOpt = None, actor: ActorOpt = None, at: AtOpt = None,
) -> None:
    """Add or replace a contract from a JSON file (a new version).

    Example: usermem contracts set shoe_size.json --tenant cloudledger
    """
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}") from None
    with open_memory(store, create=True) as m:
        c = m.set_contract(tenant, data, actor=actor, now=at)
    console.print(say(f"{esc(c.key)}: version {c.version}", f"{esc(c.key)}：版本 {c.version}"))


@contracts_app.command("history")
def contracts_history(key: str, tenant: TenantOpt = "default", store: StoreOpt = None,
                      as_json: JsonOpt = False) -> None:
    """Show the stored versions of a field's contract.

    Example: usermem contracts history reply_length --tenant cloudledger
    """
    out = table(f"{tenant}/{key}", "version", "change", "actor", "at", "enabled")
    with open_memory(store) as m:
        versions = m.contract_history(tenant, key)
    if as_json:
        print(dumps(versions))
        return
    for h in versions:
        c = h.get("contract") or {}
        out.add_row(str(h["version"]), cell(h["change"]), cell(h.get("actor") or "-"), f"{h['at']:.0f}",
                    str(c.get("enabled", "-")))
    console.print(out)


@contracts_app.command("unknown")
def contracts_unknown(policy: Annotated[str, typer.Argument(help="accept or reject")], tenant: TenantOpt = "default",
                      store: StoreOpt = None, actor: ActorOpt = None, at: AtOpt = None) -> None:
    """Set what happens to keys without a contract: reject, or accept as L1.

    Example: usermem contracts unknown reject --tenant cloudledger
    """
    with open_memory(store, create=True) as m:
        result = m.set_unknown_fields(tenant, policy, actor=actor, now=at)
    console.print(say(f"unknown fields: {esc(result)}", f"未登记字段：{esc(result)}"))


@grants_app.command("add")
def grants_add(
    tenant: str, user_id: str,
    fields: Annotated[str, typer.Argument(help="L2, L3, or comma-separated field keys")],
    purpose: Annotated[str, typer.Option(help="Why the data is read (audited)")],
    ttl: Annotated[float, typer.Option(help="Seconds until the grant ends")] = 1800.0,
    grantee: Annotated[str | None, typer.Option(help="Only this reader may use it (an API key: key:<id>)")] = None,
    store: StoreOpt = None, actor: ActorOpt = None, at: AtOpt = None,
) -> None:
    """Grant time-limited reads of L2/L3 fields.

    Example: usermem grants add cloudledger C007 L2 --purpose "deliver order"
    """
    scope = fields if fields.upper() in ("L2", "L3", "L1") else [f.strip() for f in fields.split(",") if f.strip()]
    with open_memory(store, create=True) as m:
        gid = m.grant(tenant, user_id, scope, purpose, ttl, actor=actor, grantee=grantee, now=at)
    console.print(gid, markup=False, highlight=False)


@grants_app.command("revoke")
def grants_revoke(
    grant_id: str, store: StoreOpt = None, actor: ActorOpt = None, at: AtOpt = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="The grant's tenant (checked)")] = None,
) -> None:
    """End a grant now.

    Example: usermem grants revoke 0190f3... --tenant cloudledger
    """
    with open_memory(store) as m:
        ok = m.revoke(tenant, grant_id, actor=actor, now=at) if tenant else m.revoke(grant_id, actor=actor, now=at)
    console.print(say("revoked", "已撤销") if ok else say("no such grant", "没有这个授权"))
    if not ok:
        raise typer.Exit(1)


@grants_app.command("list")
def grants_list(
    tenant: str, user_id: Annotated[str | None, typer.Argument()] = None, store: StoreOpt = None,
    include_expired: Annotated[bool, typer.Option("--include-expired", help="Also expired grants")] = False,
    at: AtOpt = None, as_json: JsonOpt = False,
) -> None:
    """List active grants.

    Example: usermem grants list cloudledger C007
    """
    out = table(f"{'grants' if include_expired else 'active grants'} of {tenant}", "id", "user", "scope",
                "purpose", "expires", "grantee")
    with open_memory(store) as m:
        active = m.grants(tenant, user_id, now=at, include_expired=include_expired)
    if as_json:
        print(dumps(active))
        return
    for g in active:
        out.add_row(cell(g.id), cell(g.user_id), cell(g.level.value if g.level else ",".join(g.fields)),
                    cell(g.purpose), f"{g.expires_at:.0f}", cell(g.grantee or "any"))
    console.print(out)


@contracts_app.command("delete")
def contracts_delete(key: str, tenant: TenantOpt = "default", store: StoreOpt = None, actor: ActorOpt = None,
                     at: AtOpt = None) -> None:
    """Delete a tenant's contract for a field (the built-in default, if any, applies again).

    Example: usermem contracts delete shoe_size --tenant cloudledger
    """
    with open_memory(store) as m:
        m.delete_contract(tenant, key, actor=actor, now=at)
    console.print(say(f"{esc(key)}: contract deleted", f"{esc(key)}：合约已删除"))


FieldsArg = Annotated[str, typer.Argument(help="Comma-separated field keys")]
DomainArg = Annotated[str, typer.Option("--domain", help="The domain that may read them (e.g. logistics)")]


def _fields(fields: str) -> list[str]:
    return [f.strip() for f in fields.split(",") if f.strip()]


@app.command("opt-in")
def opt_in(tenant: str, user_id: str,
           fields: Annotated[str | None, typer.Argument(help="Comma-separated field keys")] = None,
           domain: Annotated[str | None, typer.Option("--domain", help="The domain that may read them")] = None,
           request_id: Annotated[str | None, typer.Option("--request", help="Approve this consent request "
                                                                          "instead (usermem consents list)")] = None,
           store: StoreOpt = None, actor: ActorOpt = None, at: AtOpt = None) -> None:
    """Record the user's consent to share fields with another domain (opt-in sharing contracts), or
    (--request) the user's approval of a consent request.

    Example: usermem opt-in cloudledger C007 address --domain logistics
    """
    with open_memory(store) as m:
        granted = m.opt_in(tenant, user_id, _fields(fields) if fields is not None else None, domain,
                           request_id=request_id, actor=actor, now=at)
    if request_id is not None:
        console.print(say(f"approved: {esc(', '.join(granted))}", f"已同意：{esc('、'.join(granted))}"))
        return
    console.print(say(f"opted in: {esc(', '.join(granted)) or '-'} for {esc(domain)}",
                      f"已同意向 {esc(domain)} 共享：{esc('、'.join(granted)) or '-'}"))


@app.command("opt-out")
def opt_out(tenant: str, user_id: str, fields: FieldsArg, domain: DomainArg, store: StoreOpt = None,
            actor: ActorOpt = None, at: AtOpt = None) -> None:
    """Withdraw the user's consent to share fields with a domain.

    Example: usermem opt-out cloudledger C007 address --domain logistics
    """
    with open_memory(store) as m:
        n = m.opt_out(tenant, user_id, _fields(fields), domain, actor=actor, now=at)
    console.print(say(f"withdrew {n} consent(s) for {esc(domain)}", f"已撤回对 {esc(domain)} 的 {n} 项同意"))
