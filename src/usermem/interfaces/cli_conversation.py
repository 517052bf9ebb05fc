"""Conversation commands: `usermem plan|extract|ingest|assemble|pushback`, `usermem onboarding …`,
`usermem verifications …` — the understanding pipelines of `Memory` from the shell (docs/understanding.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from usermem.engine.memory import Memory
from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_core import PurposeOpt, StoreOpt, open_memory, show_results
from usermem.interfaces.cli_output import cell, esc, localized, say, shown, table
from usermem.interfaces.cli_params import (
    ActorOpt,
    AtOpt,
    ChangeSetOpt,
    JsonOpt,
    SessionOpt,
    dumps,
    key_values,
    parse_value,
    read_json,
    read_messages,
)

onboarding_app = typer.Typer(help="Onboarding questions: list a user's, set a tenant's, store answers.",
                             no_args_is_help=True)
verifications_app = typer.Typer(help="Reflexive verification: hypotheses from repeated pushback, "
                                     "accepted or rejected by the user.", no_args_is_help=True)
app.add_typer(onboarding_app, name="onboarding")
app.add_typer(verifications_app, name="verifications")

MessagesArg = Annotated[str, typer.Argument(
    help="The conversation: a JSON list of {role, content} messages or strings (file, - for stdin, or inline); "
         "a text file is one user message per line")]
ValueOpt = Annotated[str | None, typer.Option("--value", help="The value (text; --json-value for JSON)")]
JsonValueOpt = Annotated[bool, typer.Option("--json-value", help="--value is JSON, not text")]


@app.command()
def plan(tenant: str, user_id: str, message: str, store: StoreOpt = None) -> None:
    """The recall plan for a message: which facts and preferences to recall, whether context matters.

    Example: usermem plan acme u1 "还是按上次的格式发我"
    """
    with open_memory(store) as m:
        result = m.plan(tenant, user_id, message)
    print(dumps(result))


@app.command()
def extract(
    messages: MessagesArg,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Use this tenant's field contracts")] = None,
    store: StoreOpt = None,
) -> None:
    """Propose memories from a conversation, as JSON. Writes nothing (see ingest).

    Example: usermem extract '["我对花生过敏", "报告请用 markdown"]' --tenant acme
    """
    conversation = read_messages(messages)
    # Without a tenant nothing stored is read: a private in-memory store (no data/usermem.db appears).
    memory = Memory("sqlite://") if tenant is None else open_memory(store)
    with memory as m:
        candidates = m.extract(conversation, tenant=tenant)
    print(dumps(candidates))


@app.command()
def ingest(
    tenant: str, user_id: str, messages: MessagesArg,
    session: SessionOpt = None, change_set: ChangeSetOpt = None, actor: ActorOpt = None, at: AtOpt = None,
    store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Extract memories from a conversation and write them (source `extracted`, one change set).

    Example: usermem ingest acme u1 chat.json --session 01a2…
    """
    conversation = read_messages(messages)
    with open_memory(store, create=True) as m:
        results = m.ingest(tenant, user_id, conversation, now=at, session_id=session, change_set_id=change_set,
                           actor=actor)
    if not results and not as_json:
        console.print(say("nothing to remember in this conversation", "这段对话中没有需要记住的内容"))
        return
    show_results(results, as_json, exit_on_reject=False)


@app.command()
def assemble(
    tenant: str, user_id: str, message: str,
    budget_tokens: Annotated[int, typer.Option("--budget-tokens", "--budget", help="Token budget of the block")] = 800,
    session: SessionOpt = None, actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None,
    as_json: JsonOpt = False, purpose: PurposeOpt = None,
) -> None:
    """The prompt block for a message: <USER_FACTS>…</USER_FACTS> <USER_PREFERENCES>…</USER_PREFERENCES>.

    Example: usermem assemble acme u1 "帮我写周报" --budget-tokens 400
    """
    with open_memory(store) as m:
        assembly = m.assemble(tenant, user_id, message, budget_tokens, now=at, session_id=session, actor=actor,
                              purpose=purpose)
    if as_json:
        print(dumps(assembly))
        return
    print(assembly.prompt)
    extra = []
    if assembly.dropped:
        extra.append(say(f"dropped for the budget: {', '.join(assembly.dropped)}",
                         f"因预算省略：{'、'.join(assembly.dropped)}"))
    injected = [w for w in assembly.withheld if getattr(w, "reason", "instruction_like") == "instruction_like"]
    if injected:
        extra.append(say(f"withheld (read as instructions): {', '.join(injected)}",
                         f"已扣留（疑似指令）：{'、'.join(injected)}"))
    console.print(esc(say(f"{assembly.tokens}/{assembly.budget_tokens} tokens", f"{assembly.tokens}/"
                          f"{assembly.budget_tokens} 个 token") + ("; " + "; ".join(extra) if extra else "")),
                  style="dim", highlight=False)
    from usermem.interfaces.cli_consent import print_withheld

    print_withheld([w for w in assembly.withheld if w not in injected])


@app.command()
def pushback(
    tenant: str, user_id: str, key: str,
    message: Annotated[str, typer.Argument(help="What the user said")] = "",
    value: ValueOpt = None, json_value: JsonValueOpt = False, at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Count one pushback on a field ("too long again"); at the threshold a hypothesis awaits verification.

    Example: usermem pushback acme u1 reply_length "太长了" --value 简短
    """
    with open_memory(store) as m:
        result = m.record_pushback(tenant, user_id, key, message,
                                   value=None if value is None else parse_value(value, json_value), now=at)
    print(dumps(result))


# -- onboarding ---------------------------------------------------------------------------------------

@onboarding_app.command("questions")
def onboarding_questions(
    tenant: str, user_id: str,
    language: Annotated[str | None, typer.Option(help="zh or en (default: the tenant's)")] = None,
    at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """The tenant's onboarding questions in the user's language, with what is answered.

    Example: usermem onboarding questions acme u1 --language zh
    """
    with open_memory(store) as m:
        questions = m.onboarding_questions(tenant, user_id, language, now=at)
    if as_json:
        print(dumps(questions))
        return
    out = table(f"onboarding of {tenant}/{user_id}", "id", "field", "question", "options", "answered")
    for q in questions:
        options = ", ".join(str(o.get("value", o)) if isinstance(o, dict) else str(o) for o in q.get("options") or [])
        out.add_row(cell(q.get("id", "")), cell(q.get("key", "")), cell(localized(q.get("question"))),
                    cell(options), say("yes", "是") if q.get("answered") else "")
    console.print(out)


@onboarding_app.command("set")
def onboarding_set(
    tenant: str,
    questions: Annotated[str, typer.Argument(help="JSON list of {id, field, kind, question: {zh, en}, …}: "
                                                  "a file, - for stdin, or inline")],
    at: AtOpt = None, store: StoreOpt = None,
) -> None:
    """Replace the tenant's onboarding questions.

    Example: usermem onboarding set acme questions.json
    """
    data = read_json(questions, "questions")
    if not isinstance(data, list):
        raise typer.BadParameter("questions must be a JSON list", param_hint="QUESTIONS")
    with open_memory(store, create=True) as m:
        stored = m.set_onboarding_questions(tenant, data, now=at)
    console.print(say(f"{len(stored)} onboarding questions set for {esc(tenant)}",
                      f"已为 {esc(tenant)} 设置 {len(stored)} 个引导问题"))


@onboarding_app.command("answer")
def onboarding_answer(
    tenant: str, user_id: str,
    answers: Annotated[list[str], typer.Argument(help="question-id-or-field=answer … (JSON values allowed)")],
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """Store a user's onboarding answers (source `onboarding`).

    Example: usermem onboarding answer acme u1 reply_length=简洁 report_format=markdown
    """
    with open_memory(store) as m:
        results = m.answer_onboarding(tenant, user_id, key_values(answers, "answers"), now=at, actor=actor)
    show_results(results, as_json)


# -- verifications ------------------------------------------------------------------------------------

@verifications_app.command("list")
def verifications_list(tenant: str, user_id: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Hypotheses waiting for the user's yes or no.

    Example: usermem verifications list acme u1
    """
    with open_memory(store) as m:
        pending = m.pending_verifications(tenant, user_id)
    if as_json:
        print(dumps(pending))
        return
    out = table(f"pending verifications of {tenant}/{user_id}", "id", "key", "hypothesis", "question")
    for v in pending:
        out.add_row(cell(v.get("id", "")), cell(v.get("key", "")), cell(shown(v.get("value"))),
                    cell(localized(v.get("question"))))
    console.print(out)


@verifications_app.command("accept")
def verifications_accept(
    tenant: str, user_id: str, verification_id: str,
    value: ValueOpt = None, json_value: JsonValueOpt = False,
    actor: ActorOpt = None, at: AtOpt = None, store: StoreOpt = None, as_json: JsonOpt = False,
) -> None:
    """The user confirmed: store the hypothesis (or --value, their correction) as user_confirmed.

    Example: usermem verifications accept acme u1 01a2… --value 简短
    """
    with open_memory(store) as m:
        result = m.accept_verification(tenant, user_id, verification_id,
                                       value=None if value is None else parse_value(value, json_value),
                                       now=at, actor=actor)
    show_results([result], as_json)


@verifications_app.command("reject")
def verifications_reject(tenant: str, user_id: str, verification_id: str, at: AtOpt = None,
                         store: StoreOpt = None) -> None:
    """The user said no: drop the hypothesis (exit code 1 when there was none).

    Example: usermem verifications reject acme u1 01a2…
    """
    with open_memory(store) as m:
        ok = m.reject_verification(tenant, user_id, verification_id, now=at)
    console.print(say("rejected", "已否决") if ok else say("no such pending verification", "没有这个待确认项"))
    if not ok:
        raise typer.Exit(1)
