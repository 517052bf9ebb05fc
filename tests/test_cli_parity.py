"""CLI parity with the operation catalogue: every operation has a command (or a declared reason), every
parameter of the operation is an option or argument of that command, and the command passes every value
on to `Memory` (checked with a recording `Memory`: each operation is invoked with a distinctive value for
every one of its parameters)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces import cli_core
from usermem.interfaces.catalog import IN_PROCESS, OPERATIONS, CliCommand, cli_bindings
from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()
T, U, A = "t1", "u1", "a1"
AT = ["--at", "1790000000"]
NOW = 1790000000.0
CONTRACT = {"key": "shoe_size", "kind": "profile", "sensitivity": "L1"}

# operation → (command line, every parameter of the operation with the value Memory must receive)
CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "write": (["write", T, U, "preference", "tone", "[1, 2]", "--json-value", "--source", "user_confirmed",
               "--importance", "0.7", "--confidence", "0.9", "--session", "s1", "--client", "c1",
               "--event-at", "2026-01-02T00:00:00Z", "--ttl", "60", "--change-set", "cs1", "--actor", A,
               "--canonical", '["short"]', *AT],
              dict(tenant=T, user_id=U, kind="preference", key="tone", value=[1, 2], source="user_confirmed",
                   importance=0.7, confidence=0.9, now=NOW, session_id="s1", client_id="c1",
                   event_at=1767312000.0, ttl_seconds=60.0, change_set_id="cs1", actor=A, canonical=["short"])),
    "write_many": (["write-many", T, U, '[{"kind": "preference", "key": "tone", "value": "warm"}]',
                    "--change-set", "cs1", "--actor", A, *AT],
                   dict(tenant=T, user_id=U, writes=[{"kind": "preference", "key": "tone", "value": "warm"}],
                        now=NOW, change_set_id="cs1", actor=A)),
    "recall": (["recall", T, U, "-k", "3", "--kind", "preference", "--kind", "profile", "--query", "q",
                "--key", "tone", "--mark-used", "--event-from", "1", "--event-until", "2", "--actor", A,
                "--domain", "d1", "--purpose", "推荐午餐", *AT],
               dict(tenant=T, user_id=U, k=3, now=NOW, kinds=["preference", "profile"], query="q", keys=["tone"],
                    mark_used=True, event_from=1.0, event_until=2.0, actor=A, domain="d1", purpose="推荐午餐")),
    "recall_scored": (["inspect", T, U, "-k", "3", "--kind", "preference", "--query", "q", "--key", "tone",
                       "--mark-used", "--event-from", "1", "--event-until", "2", "--actor", A, "--domain", "d1",
                       "--purpose", "recommend lunch", *AT],
                      dict(tenant=T, user_id=U, k=3, now=NOW, kinds=["preference"], query="q", keys=["tone"],
                           mark_used=True, event_from=1.0, event_until=2.0, actor=A, domain="d1",
                           purpose="recommend lunch")),
    "get": (["get", T, "m1", "--actor", A, *AT], dict(tenant=T, memory_id="m1", actor=A, now=NOW)),
    "history": (["history", T, U, "tone", "--actor", A, *AT],
                dict(tenant=T, user_id=U, key="tone", actor=A, now=NOW)),
    "forget": (["forget", T, U, "--key", "tone", "--actor", A, *AT],
               dict(tenant=T, user_id=U, key="tone", now=NOW, actor=A)),
    "forget_range": (["forget", T, U, "--since", "1", "--until", "2", "--actor", A, *AT],
                     dict(tenant=T, user_id=U, since=1.0, until=2.0, now=NOW, actor=A)),
    "forget_user": (["forget", T, U, "--yes", "--actor", A, *AT], dict(tenant=T, user_id=U, now=NOW, actor=A)),
    "confirm": (["confirm", T, U, "m1", "--actor", A, "--source", "system", *AT],
                dict(tenant=T, user_id=U, memory_id="m1", now=NOW, actor=A, source="system")),
    "deny": (["deny", T, U, "m1", "--actor", A, "--source", "system", *AT],
             dict(tenant=T, user_id=U, memory_id="m1", now=NOW, actor=A, source="system")),
    "federation_notices": (["federation", "notices", T, U, "--json", *AT], dict(tenant=T, user_id=U, now=NOW)),
    "keep_local": (["federation", "keep", T, U, "n1", "--actor", A, *AT],
                   dict(tenant=T, user_id=U, notice_id="n1", now=NOW, actor=A)),
    "revert": (["revert", T, U, "tone", "--to", "v1", "--actor", A, "--source", "system", *AT],
               dict(tenant=T, user_id=U, key="tone", to_version="v1", now=NOW, actor=A, source="system")),
    "revert_change_set": (["revert-change-set", T, "cs1", "--actor", A, "--source", "system", "--partial", *AT],
                          dict(tenant=T, change_set_id="cs1", now=NOW, actor=A, source="system", partial=True)),
    "open_session": (["sessions", "open", T, U, "--client", "c1", "--idle-seconds", "60", *AT],
                     dict(tenant=T, user_id=U, client_id="c1", now=NOW, idle_seconds=60.0)),
    "close_session": (["sessions", "close", "s1", "--tenant", T, "--transcript",
                       '[{"role": "user", "content": "hi"}]', "--actor", A, *AT],
                      dict(session_id="s1", transcript=[{"role": "user", "content": "hi"}], tenant=T, now=NOW,
                           actor=A)),
    "touch_session": (["sessions", "touch", "s1", "--tenant", T, *AT], dict(session_id="s1", tenant=T, now=NOW)),
    "get_session": (["sessions", "show", "s1", "--tenant", T], dict(session_id="s1", tenant=T)),
    "sessions": (["sessions", "list", T, U, "--status", "open", *AT],
                 dict(tenant=T, user_id=U, status="open", now=NOW)),
    "session_context": (["sessions", "context", "s1", "--tenant", T, "-k", "3", "--no-mark-used", *AT],
                        dict(session_id="s1", tenant=T, k=3, now=NOW, mark_used=False)),
    "expire_idle_sessions": (["sessions", "expire", "--tenant", T, *AT], dict(now=NOW, tenant=T)),
    "episodes": (["episodes", T, U, "--since", "1", "--until", "2", "--limit", "3", *AT],
                 dict(tenant=T, user_id=U, since=1.0, until=2.0, limit=3, now=NOW)),
    "grant": (["grants", "add", T, U, "tone,city", "--purpose", "p1", "--ttl", "60", "--grantee", "key:k1",
               "--actor", A, *AT],
              dict(tenant=T, user_id=U, fields_or_level=["tone", "city"], purpose="p1", ttl=60.0, actor=A,
                   grantee="key:k1", now=NOW)),
    "revoke": (["grants", "revoke", "g1", "--tenant", T, "--actor", A, *AT],
               dict(tenant_or_grant_id=T, grant_id="g1", actor=A, now=NOW)),
    "grants": (["grants", "list", T, U, "--include-expired", *AT],
               dict(tenant=T, user_id=U, now=NOW, include_expired=True)),
    "export": (["export", T, U, "--actor", A, *AT], dict(tenant=T, user_id=U, now=NOW, actor=A)),
    "opt_in": (["opt-in", T, U, "tone,city", "--domain", "d1", "--request", "r1", "--actor", A, *AT],
               dict(tenant=T, user_id=U, fields=["tone", "city"], domain="d1", request_id="r1", actor=A, now=NOW)),
    "request_consent": (["consents", "request", T, U, "allergy,diet", "推荐午餐", "--ttl", "60", "--domain", "d1",
                         "--session", "s1", "--actor", A, *AT],
                        dict(tenant=T, user_id=U, fields=["allergy", "diet"], purpose="推荐午餐", ttl=60.0,
                             domain="d1", session_id="s1", actor=A, now=NOW)),
    "consent_requests": (["consents", "list", T, U, "--status", "declined", *AT],
                         dict(tenant=T, user_id=U, status="declined", now=NOW)),
    "approve_consent": (["consents", "approve", T, U, "r1", "--actor", A, *AT],
                        dict(tenant=T, user_id=U, request_id="r1", actor=A, now=NOW)),
    "decline_consent": (["consents", "decline", T, U, "r1", "--actor", A, *AT],
                        dict(tenant=T, user_id=U, request_id="r1", actor=A, now=NOW)),
    "users": (["users", T, "--prefix", "C0", "--after", "C001", "--limit", "7"],
              dict(tenant=T, prefix="C0", after="C001", limit=7)),
    "opt_out": (["opt-out", T, U, "tone", "--domain", "d1", "--actor", A, *AT],
                dict(tenant=T, user_id=U, fields=["tone"], domain="d1", actor=A, now=NOW)),
    "contracts_list": (["contracts", "list", "-t", T], dict(tenant=T)),
    "contract": (["contracts", "show", "tone", "-t", T], dict(tenant=T, key="tone")),
    "contract_history": (["contracts", "history", "tone", "-t", T], dict(tenant=T, key="tone")),
    "set_contract": (["contracts", "set", "{contract_file}", "-t", T, "--actor", A, *AT],
                     dict(tenant=T, contract=CONTRACT, actor=A, now=NOW)),
    "enable_field": (["contracts", "enable", "tone", "-t", T, "--actor", A, *AT],
                     dict(tenant=T, key="tone", actor=A, now=NOW)),
    "disable_field": (["contracts", "disable", "tone", "-t", T, "--actor", A, *AT],
                      dict(tenant=T, key="tone", actor=A, now=NOW)),
    "delete_contract": (["contracts", "delete", "tone", "-t", T, "--actor", A, *AT],
                        dict(tenant=T, key="tone", actor=A, now=NOW)),
    "set_unknown_fields": (["contracts", "unknown", "reject", "-t", T, "--actor", A, *AT],
                           dict(tenant=T, policy="reject", actor=A, now=NOW)),
    "plan": (["plan", T, U, "hello"], dict(tenant=T, user_id=U, message="hello")),
    "extract": (["extract", '["hi", "there"]', "--tenant", T], dict(messages=["hi", "there"], tenant=T)),
    "ingest": (["ingest", T, U, '[{"role": "user", "content": "hi"}]', "--session", "s1", "--change-set", "cs1",
                "--actor", A, *AT],
               dict(tenant=T, user_id=U, messages=[{"role": "user", "content": "hi"}], now=NOW, session_id="s1",
                    change_set_id="cs1", actor=A)),
    "assemble": (["assemble", T, U, "hello", "--budget-tokens", "300", "--session", "s1", "--actor", A,
                  "--purpose", "推荐午餐", *AT],
                 dict(tenant=T, user_id=U, message="hello", budget_tokens=300, now=NOW, session_id="s1", actor=A,
                      purpose="推荐午餐")),
    "onboarding_questions": (["onboarding", "questions", T, U, "--language", "zh", *AT],
                             dict(tenant=T, user_id=U, language="zh", now=NOW)),
    "set_onboarding_questions": (["onboarding", "set", T, '[{"id": "q1"}]', *AT],
                                 dict(tenant=T, questions=[{"id": "q1"}], now=NOW)),
    "answer_onboarding": (["onboarding", "answer", T, U, "tone=warm", "n=3", "--actor", A, *AT],
                          dict(tenant=T, user_id=U, answers={"tone": "warm", "n": 3}, now=NOW, actor=A)),
    "record_pushback": (["pushback", T, U, "tone", "too long", "--value", "short", *AT],
                        dict(tenant=T, user_id=U, key="tone", message="too long", value="short", now=NOW)),
    "pending_verifications": (["verifications", "list", T, U], dict(tenant=T, user_id=U)),
    "accept_verification": (["verifications", "accept", T, U, "v1", "--value", "3", "--json-value", "--actor", A,
                             *AT],
                            dict(tenant=T, user_id=U, verification_id="v1", value=3, now=NOW, actor=A)),
    "reject_verification": (["verifications", "reject", T, U, "v1", *AT],
                            dict(tenant=T, user_id=U, verification_id="v1", now=NOW)),
    "model": (["user-model", T, U, "--actor", A, *AT], dict(tenant=T, user_id=U, now=NOW, actor=A)),
    "record_signal": (["signal", T, U, "reply_length", "简洁", "--against", "--message", "再精简", *AT],
                      dict(tenant=T, user_id=U, key="reply_length", value="简洁", agree=False, message="再精简",
                           now=NOW)),
    "inference_policy": (["inference", "show", T], dict(tenant=T)),
    "set_inference_policy": (["inference", "set", T, "--mode", "active", "--threshold", "4", "--suppress-days",
                              "7", "--actor", A, *AT],
                             dict(tenant=T, mode="active", threshold=4, suppress_days=7.0, actor=A, now=NOW)),
    "derivation_rules": (["rules", "list", T], dict(tenant=T)),
    "set_derivation_rule": (["rules", "set", T, '{"id": "r1"}', "--actor", A, *AT],
                            dict(tenant=T, rule={"id": "r1"}, actor=A, now=NOW)),
    "propose_procedure": (["procedures", "propose", T, "invoice first", "--user", U, "--evidence", "e1",
                           "--by", "rules", *AT],
                          dict(tenant=T, text="invoice first", user_id=U, evidence=["e1"], proposed_by="rules",
                               now=NOW)),
    "procedures": (["procedures", "list", T, "--user", U, "--status", "approved"],
                   dict(tenant=T, user_id=U, status="approved")),
    "review_procedure": (["procedures", "review", T, "p1", "edit", "--evaluation", '{"name": "e2e"}', "--text",
                          "t2", "--actor", A, *AT],
                         dict(tenant=T, procedure_id="p1", decision="edit", evaluation={"name": "e2e"}, text="t2",
                              actor=A, now=NOW)),
    "rollback_procedure": (["procedures", "rollback", T, "p1", "--actor", A, *AT],
                           dict(tenant=T, procedure_id="p1", actor=A, now=NOW)),
    "suggest_procedures": (["procedures", "suggest", T, U, *AT], dict(tenant=T, user_id=U, now=NOW)),
    "suggest_derivation_rules": (["rules", "suggest", T, *AT], dict(tenant=T, now=NOW)),
    "create_webhook": (["webhooks", "add", T, "http://127.0.0.1:9/hook", "--event", "write", "--event", "forget",
                        "--secret", "s" * 20, "--actor", A, *AT],
                       dict(tenant=T, url="http://127.0.0.1:9/hook", events=["write", "forget"], secret="s" * 20,
                            actor=A, now=NOW)),
    "list_webhooks": (["webhooks", "list", T], dict(tenant=T)),
    "get_webhook": (["webhooks", "show", T, "wh_1"], dict(tenant=T, webhook_id="wh_1")),
    "delete_webhook": (["webhooks", "delete", T, "wh_1", "--actor", A, *AT],
                       dict(tenant=T, webhook_id="wh_1", actor=A, now=NOW)),
    "enable_webhook": (["webhooks", "enable", T, "wh_1", "--actor", A, *AT],
                       dict(tenant=T, webhook_id="wh_1", actor=A, now=NOW)),
    "ping_webhook": (["webhooks", "ping", T, "wh_1", *AT], dict(tenant=T, webhook_id="wh_1", now=NOW)),
    "webhook_deliveries": (["webhooks", "deliveries", T, "--webhook", "wh_1", "--limit", "7"],
                           dict(tenant=T, webhook_id="wh_1", limit=7)),
    "audit": (["audit", T, "--user", U, "--action", "forget", "--since", "1", "--until", "2", "--limit", "7",
               "--after-seq", "5"],
              dict(tenant=T, user_id=U, action="forget", since=1.0, until=2.0, limit=7, after_seq=5)),
    "purge": (["purge", "--retention-days", "3", *AT], dict(now=NOW, retention_days=3.0)),
}


def _command(path: str) -> Any:
    cmd: Any = typer.main.get_command(app)  # typer's own click: groups are recognised by their `commands`
    for part in path.split():
        commands = getattr(cmd, "commands", None)
        assert isinstance(commands, dict), f"{path}: {part!r} is not under a group"
        sub = commands.get(part)
        assert sub is not None, f"no CLI command {path!r}"
        cmd = sub
    return cmd


def test_every_operation_has_a_command_or_a_reason() -> None:
    bindings = cli_bindings()
    assert set(bindings) == set(OPERATIONS), "cli_catalog.COMMANDS must list exactly the catalogue's operations"
    for name, binding in bindings.items():
        if isinstance(binding, str):
            assert binding.strip(), f"{name}: an empty reason"
            continue
        assert isinstance(binding, CliCommand)
        _command(binding.command)
    assert not set(IN_PROCESS) & set(bindings)


@pytest.mark.parametrize("name", sorted(n for n, b in cli_bindings().items() if isinstance(b, CliCommand)))
def test_every_parameter_is_an_option_or_argument(name: str) -> None:
    binding = cli_bindings()[name]
    assert isinstance(binding, CliCommand)
    cmd = _command(binding.command)
    names = {p.name for p in cmd.params}
    op_params = {p.name for p in OPERATIONS[name].parameters}
    assert set(binding.fixed) <= op_params, f"{name}: fixed names a parameter the operation does not have"
    assert set(binding.params) <= op_params, f"{name}: params names a parameter the operation does not have"
    for p in op_params - set(binding.fixed):
        assert binding.cli_name(p) in names, f"{name}: parameter {p!r} is not offered by `usermem {binding.command}`"


def test_cases_cover_every_parameter_of_every_operation_with_a_command() -> None:
    for name, binding in cli_bindings().items():
        if isinstance(binding, str):
            continue
        assert name in CASES, f"{name}: add a command line to CASES"
        params = {p.name for p in OPERATIONS[name].parameters} - set(binding.fixed)
        assert set(CASES[name][1]) == params, f"{name}: CASES must give every parameter a value"
        for p in OPERATIONS[name].parameters:  # a default value would not show that the option is passed on
            if p.name in CASES[name][1] and not p.required:
                assert CASES[name][1][p.name] != p.default, f"{name}.{p.name}: use a value other than the default"


class Recorded(Exception):
    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        super().__init__(name)
        self.name, self.arguments = name, arguments


def _recording(target: str) -> type[Memory]:
    signature = inspect.signature(getattr(Memory, target))

    def record(self: Memory, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        raise Recorded(target, {k: v for k, v in bound.arguments.items() if k != "self"})

    return type("Recording", (Memory,), {target: record})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("parity")
    Memory(f"sqlite:///{root}/p.db").close()
    (root / "contract.json").write_text(json.dumps(CONTRACT), encoding="utf-8")
    return f"sqlite:///{root}/p.db", root / "contract.json"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_command_passes_every_value_on(name: str, store: tuple[str, Path], monkeypatch) -> None:
    url, contract_file = store
    argv, expected = CASES[name]
    argv = [str(contract_file) if a == "{contract_file}" else a for a in argv]
    monkeypatch.setattr(cli_core, "Memory", _recording(name))
    r = runner.invoke(app, [*argv, "--store", url], env={"COLUMNS": "200"})
    assert isinstance(r.exception, Recorded), f"{argv}: exit {r.exit_code}\n{r.output}"
    assert r.exception.name == name
    got = {k: list(v) if isinstance(v, tuple) else v for k, v in r.exception.arguments.items()}
    assert got == expected


def _leaves(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    commands = getattr(cmd, "commands", None)
    if not isinstance(commands, dict):
        return [(path, cmd)]
    return [leaf for name, sub in sorted(commands.items()) for leaf in _leaves(sub, (*path, name))]


def test_every_command_has_help_with_an_example() -> None:
    leaves = _leaves(typer.main.get_command(app))
    assert len(leaves) >= 60
    for path, _cmd in leaves:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, path
        assert "Example" in r.output and "usermem " in r.output, f"usermem {' '.join(path)} --help has no example"
