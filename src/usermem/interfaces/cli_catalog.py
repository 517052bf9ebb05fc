"""The CLI's side of the operation catalogue (`usermem.interfaces.catalog`): for every operation, the command
that offers it, or why there is none. Owned by the CLI; `tests/test_parity.py` checks it against the
typer app (the command exists; every parameter of the operation is a parameter of the command or is
declared `fixed` with the reason).

Initial version written by the catalogue (it describes the CLI as it was); the CLI owner extends it.
"""

from __future__ import annotations

from collections.abc import Mapping

from usermem.interfaces.catalog import CliCommand

NOW = "always the current time"
ACTOR = "recorded as the operator (cli)"
NOT_YET = "not in the CLI yet: use the HTTP API, the Python client or Memory"

COMMANDS: Mapping[str, CliCommand | str] = {
    "write": NOT_YET,
    "write_many": NOT_YET,
    "recall": "the CLI shows scores: see recall_scored (`usermem inspect`)",
    "recall_scored": CliCommand("inspect", fixed={
        "now": NOW, "kinds": "all kinds", "query": "no ranking query", "keys": "every key",
        "mark_used": "inspection is not a use", "event_from": "no filter", "event_until": "no filter",
        "actor": "the operator reads everything", "domain": "the operator reads everything"}),
    "get": NOT_YET,
    "history": CliCommand("history", fixed={"actor": ACTOR, "now": NOW}),
    "forget": CliCommand("forget", fixed={"now": NOW, "actor": ACTOR}),
    "forget_range": NOT_YET,
    "forget_user": CliCommand("forget", fixed={"now": NOW, "actor": ACTOR},
                              params={}),
    "confirm": CliCommand("confirm", fixed={"now": NOW}),
    "deny": CliCommand("deny", fixed={"now": NOW}),
    "revert": CliCommand("revert", params={"to_version": "to"}, fixed={"now": NOW}),
    "revert_change_set": CliCommand("revert-change-set", fixed={"now": NOW}),
    "open_session": NOT_YET,
    "close_session": CliCommand("sessions close", fixed={"transcript": "no transcript from the shell",
                                                         "now": NOW, "actor": ACTOR}),
    "touch_session": NOT_YET,
    "get_session": NOT_YET,
    "sessions": CliCommand("sessions list", fixed={"now": NOW}),
    "session_context": NOT_YET,
    "expire_idle_sessions": CliCommand("sessions expire", fixed={"now": NOW}),
    "episodes": NOT_YET,
    "grant": CliCommand("grants add", params={"fields_or_level": "fields"},
                        fixed={"grantee": "any reader", "now": NOW}),
    "revoke": CliCommand("grants revoke", params={"tenant_or_grant_id": "grant_id"},
                         fixed={"grant_id": "the single-argument form", "now": NOW}),
    "grants": CliCommand("grants list", fixed={"now": NOW, "include_expired": "active grants only"}),
    "export": CliCommand("export", fixed={"now": NOW}),
    "opt_in": NOT_YET,
    "opt_out": NOT_YET,
    "contracts_list": CliCommand("contracts list"),
    "contract": CliCommand("contracts show"),
    "contract_history": CliCommand("contracts history"),
    "set_contract": CliCommand("contracts set", params={"contract": "file"}, fixed={"now": NOW}),
    "enable_field": CliCommand("contracts enable", fixed={"now": NOW}),
    "disable_field": CliCommand("contracts disable", fixed={"now": NOW}),
    "delete_contract": NOT_YET,
    "set_unknown_fields": CliCommand("contracts unknown", fixed={"now": NOW}),
    "contracts_for": "an in-process ContractSet (see contracts list)",
    "plan": NOT_YET,
    "extract": NOT_YET,
    "ingest": NOT_YET,
    "assemble": NOT_YET,
    "onboarding_questions": NOT_YET,
    "set_onboarding_questions": NOT_YET,
    "answer_onboarding": NOT_YET,
    "record_pushback": NOT_YET,
    "pending_verifications": NOT_YET,
    "accept_verification": NOT_YET,
    "reject_verification": NOT_YET,
    "audit": NOT_YET,
    "purge": CliCommand("purge"),
}
