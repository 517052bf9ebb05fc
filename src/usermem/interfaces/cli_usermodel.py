"""User-model commands (docs/usermodel.md): `usermem user-model`, `usermem signal`, `usermem inference …`,
`usermem rules …`, `usermem procedures …` — the user model of `Memory` from the shell."""

from __future__ import annotations

from typing import Annotated

import typer

from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import cell, esc, localized, say, shown, table
from usermem.interfaces.cli_params import ActorOpt, AtOpt, JsonOpt, dumps, parse_value, read_json

inference_app = typer.Typer(help="How signals become inferred preferences (the tenant's inference policy).",
                            no_args_is_help=True)
rules_app = typer.Typer(help="Derivation rules: field values → derived attributes (versioned, audited).",
                        no_args_is_help=True)
procedures_app = typer.Typer(help="Procedural memory: proposals, review (approve needs an evaluation), rollback.",
                             no_args_is_help=True)
app.add_typer(inference_app, name="inference")
app.add_typer(rules_app, name="rules")
app.add_typer(procedures_app, name="procedures")


@app.command("user-model")
def user_model(tenant: str, user_id: str, actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
               as_json: JsonOpt = False) -> None:
    """What is known, inferred and derived about a user, with evidence, and the questions to ask.

    Example: usermem user-model acme u1
    """
    with open_memory(store) as m:
        um = m.model(tenant, user_id, now=at, actor=actor)
    if as_json:
        print(dumps(um.to_dict()))
        return
    known = table(f"known about {tenant}/{user_id}", "kind", "key", "value", "source", "weight")
    for item in [*um.facts, *um.preferences, *um.context]:
        known.add_row(cell(item["kind"]), cell(item["key"]), cell(shown(item["value"])), cell(item["source"]),
                      f"{item['weight']:.2f}")
    console.print(known)
    inferred = table(say("inferred (not known)", "推断（非已知）"), "key", "value", "confidence", "status", "why")
    for item in um.inferred:
        inferred.add_row(cell(item["key"]), cell(shown(item["value"])), f"{item.get('confidence', 0):.2f}",
                         cell(item["status"]), cell(item.get("rule") or ""))
    for d in um.derived:
        inferred.add_row(cell(d["key"]), cell(d["value"]), "", say("derived", "推导"), cell(d["why"]))
    console.print(inferred)
    for q in um.open_questions:
        console.print(say("to ask: ", "待确认：") + esc(str(q["question"] or "")))
    for p in um.procedures:
        console.print(say("procedure: ", "流程：") + esc(p["text"]))
    if um.withheld:
        console.print(say("withheld (needs a grant): ", "已隐去（需授权）：") + esc(", ".join(um.withheld)))


@app.command("signal")
def signal(
    tenant: str, user_id: str, key: str, value: str,
    json_value: Annotated[bool, typer.Option("--json-value", help="VALUE is JSON, not text")] = False,
    against: Annotated[bool, typer.Option("--against", help="The signal speaks against the value")] = False,
    message: Annotated[str, typer.Option("--message", help="The message it came from (kept redacted)")] = "",
    at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Count one signal that the user prefers KEY = VALUE (e.g. they chose the same option again).

    Example: usermem signal acme u1 reply_length 简洁 --message "再精简一点"
    """
    with open_memory(store, create=True) as m:
        out = m.record_signal(tenant, user_id, key, parse_value(value, json_value), agree=not against,
                              message=message, now=at)
    print(dumps(out))


@inference_app.command("show")
def inference_show(tenant: str, store: StoreOpt = None) -> None:
    """The tenant's inference policy.

    Example: usermem inference show acme
    """
    with open_memory(store) as m:
        print(dumps(m.inference_policy(tenant)))


@inference_app.command("set")
def inference_set(
    tenant: str,
    mode: Annotated[str | None, typer.Option("--mode", help="confirm (ask first) | active (use at low weight)")] = None,
    threshold: Annotated[int | None, typer.Option("--threshold", help="Net agreeing signals before proposing")] = None,
    suppress_days: Annotated[float | None, typer.Option("--suppress-days",
                                                        help="Do not propose a rejected inference again for N days")]
    = None,
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Change the tenant's inference policy (only the options given change; audited).

    Example: usermem inference set acme --mode active --threshold 4
    """
    with open_memory(store, create=True) as m:
        print(dumps(m.set_inference_policy(tenant, mode=mode, threshold=threshold, suppress_days=suppress_days,
                                           actor=actor, now=at)))


@rules_app.command("list")
def rules_list(tenant: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The tenant's derivation rules.

    Example: usermem rules list acme
    """
    with open_memory(store) as m:
        rules = m.derivation_rules(tenant)
    if as_json:
        print(dumps(rules))
        return
    out = table(f"derivation rules of {tenant}", "id", "when", "derives", "version", "status")
    for r in rules:
        when = "; ".join(f"{k} ∈ {', '.join(v)}" for k, v in r["when"].items())
        out.add_row(cell(r["id"]), cell(when), cell(f"{r['then_key']}: {localized(r['then'])}"), str(r["version"]),
                    cell(r["status"]))
    console.print(out)


@rules_app.command("set")
def rules_set(
    tenant: str,
    rule: Annotated[str, typer.Argument(help="The rule as JSON {id, when, then_key, then, status}: a file, - for "
                                             "stdin, or inline")],
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Create or change a derivation rule (a new version; `status: proposed` waits for approval).

    Example: usermem rules set acme '{"id": "nurse.shifts", "when": {"occupation": ["护士"]}, "then_key": "schedule_pattern", "then": {"zh": "常上夜班"}}'
    """
    data = read_json(rule, "rule")
    if not isinstance(data, dict):
        raise typer.BadParameter("the rule must be a JSON object", param_hint="RULE")
    with open_memory(store, create=True) as m:
        print(dumps(m.set_derivation_rule(tenant, data, actor=actor, now=at)))


@procedures_app.command("list")
def procedures_list(
    tenant: str,
    user_id: Annotated[str | None, typer.Option("--user", help="One user's procedures (default: tenant-wide)")]
    = None,
    status: Annotated[str | None, typer.Option("--status", help="proposed | approved | rejected | rolled_back")]
    = None,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """The review queue and the procedures in use.

    Example: usermem procedures list acme --status proposed
    """
    with open_memory(store) as m:
        items = m.procedures(tenant, user_id=user_id, status=status)
    if as_json:
        print(dumps(items))
        return
    out = table(f"procedures of {tenant}" + (f"/{user_id}" if user_id else ""), "id", "status", "text",
                "proposed by", "evaluation")
    for p in items:
        ev = p.get("evaluation") or {}
        out.add_row(cell(p["id"]), cell(p["status"]), cell(p["text"]), cell(p["proposed_by"]),
                    cell(f"{ev.get('name', '')} {'passed' if ev.get('passed') else ''}".strip()))
    console.print(out)


@procedures_app.command("propose")
def procedures_propose(
    tenant: str, text: str,
    user_id: Annotated[str | None, typer.Option("--user", help="The user it is for (default: every user)")] = None,
    evidence: Annotated[list[str] | None, typer.Option("--evidence", help="Why (repeatable)")] = None,
    proposed_by: Annotated[str, typer.Option("--by", help="Who proposes it")] = "cli",
    at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Put a candidate procedure in the review queue.

    Example: usermem procedures propose acme "账单问题先给发票表" --user u1 --evidence "session s7"
    """
    with open_memory(store, create=True) as m:
        print(dumps(m.propose_procedure(tenant, text, user_id=user_id, evidence=evidence or [],
                                        proposed_by=proposed_by, now=at)))


@procedures_app.command("review")
def procedures_review(
    tenant: str, procedure_id: str,
    decision: Annotated[str, typer.Argument(help="approve | edit | reject")],
    evaluation: Annotated[str | None, typer.Option("--evaluation", help="JSON {name, passed, result} (approve "
                                                                          "needs one that passed)")] = None,
    text: Annotated[str | None, typer.Option("--text", help="The new text (edit)")] = None,
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Approve (with a recorded evaluation), edit or reject a proposed procedure.

    Example: usermem procedures review acme 01ab… approve --evaluation '{"name": "e2e-dev", "passed": true}'
    """
    ev = read_json(evaluation, "evaluation") if evaluation is not None else None
    with open_memory(store) as m:
        print(dumps(m.review_procedure(tenant, procedure_id, decision, evaluation=ev, text=text, actor=actor,
                                       now=at)))


@procedures_app.command("rollback")
def procedures_rollback(tenant: str, procedure_id: str, actor: ActorOpt = None, at: AtOpt = None,
                        store: StoreOpt = None) -> None:
    """Take an approved procedure out of use.

    Example: usermem procedures rollback acme 01ab…
    """
    with open_memory(store) as m:
        print(dumps(m.rollback_procedure(tenant, procedure_id, actor=actor, now=at)))
