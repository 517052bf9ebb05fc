"""The CLI's side of the operation catalogue (`usermem.interfaces.catalog`): for every operation, the command
that offers it, or why there is none. `tests/test_parity.py` and `tests/test_cli_parity.py` check it against
the typer app (the command exists; every parameter of the operation is a parameter of the command, or is
declared `fixed` with the reason) and that each command passes every value on to `Memory`.

The CLI spells some parameters the shell way: `now` is `--at TIME` (Unix seconds or ISO 8601) everywhere,
`session_id` is `--session`, `client_id` `--client`, `change_set_id` `--change-set`, `ttl_seconds` `--ttl`.
"""

from __future__ import annotations

from collections.abc import Mapping

from usermem.interfaces.catalog import CliCommand

AT = {"now": "at"}
RECALL = {**AT, "kinds": "kinds", "keys": "keys"}
WRITE = {**AT, "session_id": "session", "client_id": "client", "ttl_seconds": "ttl",
         "change_set_id": "change_set"}

COMMANDS: Mapping[str, CliCommand | str] = {
    # -- memories
    "write": CliCommand("write", params=WRITE),
    "write_many": CliCommand("write-many", params={**AT, "change_set_id": "change_set"}),
    "recall": CliCommand("recall", params=RECALL),
    "recall_scored": CliCommand("inspect", params=RECALL),
    "get": CliCommand("get", params=AT),
    "history": CliCommand("history", params=AT),
    "forget": CliCommand("forget", params=AT),
    "forget_range": CliCommand("forget", params=AT),  # forget --since/--until
    "forget_user": CliCommand("forget", params=AT),  # forget without --key: asks, or --yes
    # -- lifecycle
    "confirm": CliCommand("confirm", params=AT),
    "deny": CliCommand("deny", params=AT),
    "federation_notices": CliCommand("federation notices", params=AT),
    "keep_local": CliCommand("federation keep", params=AT),
    "revert": CliCommand("revert", params={**AT, "to_version": "to"}),
    "revert_change_set": CliCommand("revert-change-set", params=AT),
    # -- sessions
    "open_session": CliCommand("sessions open", params={**AT, "client_id": "client"}),
    "close_session": CliCommand("sessions close", params=AT),
    "touch_session": CliCommand("sessions touch", params=AT),
    "get_session": CliCommand("sessions show"),
    "sessions": CliCommand("sessions list", params=AT),
    "session_context": CliCommand("sessions context", params=AT),
    "expire_idle_sessions": CliCommand("sessions expire", params=AT),
    "episodes": CliCommand("episodes", params=AT),
    # -- privacy
    "grant": CliCommand("grants add", params={**AT, "fields_or_level": "fields"}),
    # revoke(grant_id) or revoke(tenant, grant_id): `grants revoke GRANT_ID [--tenant T]`
    "revoke": CliCommand("grants revoke", params={**AT, "tenant_or_grant_id": "tenant"}),
    "grants": CliCommand("grants list", params=AT),
    "export": CliCommand("export", params=AT),
    "opt_in": CliCommand("opt-in", params=AT),
    "request_consent": CliCommand("consents request", params={**AT, "session_id": "session"}),
    "consent_requests": CliCommand("consents list", params=AT),
    "approve_consent": CliCommand("consents approve", params=AT),
    "decline_consent": CliCommand("consents decline", params=AT),
    "opt_out": CliCommand("opt-out", params=AT),
    # -- contracts
    "contracts_list": CliCommand("contracts list"),
    "contract": CliCommand("contracts show"),
    "contract_history": CliCommand("contracts history"),
    "set_contract": CliCommand("contracts set", params={**AT, "contract": "file"}),
    "enable_field": CliCommand("contracts enable", params=AT),
    "disable_field": CliCommand("contracts disable", params=AT),
    "delete_contract": CliCommand("contracts delete", params=AT),
    "set_unknown_fields": CliCommand("contracts unknown", params=AT),
    "contracts_for": "returns the in-process ContractSet object; its content is `usermem contracts list`",
    "add_messages": "a conversation's transcript comes from the application talking to the user, over HTTP or "
                    "the library; a shell command has no conversation to add",
    # -- conversation
    "plan": CliCommand("plan"),
    "extract": CliCommand("extract"),
    "ingest": CliCommand("ingest", params={**AT, "session_id": "session", "change_set_id": "change_set"}),
    "assemble": CliCommand("assemble", params={**AT, "session_id": "session"}),
    "onboarding_questions": CliCommand("onboarding questions", params=AT),
    "set_onboarding_questions": CliCommand("onboarding set", params=AT),
    "answer_onboarding": CliCommand("onboarding answer", params=AT),
    "record_pushback": CliCommand("pushback", params=AT),
    "pending_verifications": CliCommand("verifications list"),
    "accept_verification": CliCommand("verifications accept", params=AT),
    "reject_verification": CliCommand("verifications reject", params=AT),
    # -- the user model
    "model": CliCommand("user-model", params=AT),
    "record_signal": CliCommand("signal", params={**AT, "agree": "against"}),
    "inference_policy": CliCommand("inference show"),
    "set_inference_policy": CliCommand("inference set", params=AT),
    "derivation_rules": CliCommand("rules list"),
    "set_derivation_rule": CliCommand("rules set", params=AT),
    "propose_procedure": CliCommand("procedures propose", params=AT),
    "procedures": CliCommand("procedures list"),
    "review_procedure": CliCommand("procedures review", params=AT),
    "rollback_procedure": CliCommand("procedures rollback", params=AT),
    "suggest_procedures": CliCommand("procedures suggest", params=AT),
    "suggest_derivation_rules": CliCommand("rules suggest", params=AT),
    # -- webhooks
    "create_webhook": CliCommand("webhooks add", params=AT),
    "list_webhooks": CliCommand("webhooks list"),
    "get_webhook": CliCommand("webhooks show"),
    "delete_webhook": CliCommand("webhooks delete", params=AT),
    "enable_webhook": CliCommand("webhooks enable", params=AT),
    "ping_webhook": CliCommand("webhooks ping", params=AT),
    "webhook_deliveries": CliCommand("webhooks deliveries", params={"webhook_id": "webhook_id"}),
    # -- admin
    "audit": CliCommand("audit", params={"user_id": "user"}),
    "purge": CliCommand("purge", params=AT),
    "users": CliCommand("users"),
}
