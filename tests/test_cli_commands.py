"""The operation commands end to end on a real SQLite file: write, recall, get, audit, sessions, episodes,
the conversation pipelines, onboarding and verification — what they print and what they store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()
ENV = {"COLUMNS": "250", "USERMEM_EMBEDDER": "none", "LANG": "C.UTF-8", "LC_ALL": "", "LANGUAGE": ""}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/c.db"


def run(url: str, *args: str, code: int = 0, input: str | None = None) -> str:
    r = runner.invoke(app, [*args, "--store", url], env=ENV, input=input)
    assert r.exit_code == code, f"{args}: {r.output}"
    return r.stdout


def test_write_recall_get_history_audit(url: str) -> None:
    out = run(url, "write", "acme", "u1", "preference", "reply_length", "简洁", "--source", "user_confirmed",
              "--actor", "ops")
    assert out.startswith("ADD") and '"简洁"' in out
    run(url, "write", "acme", "u1", "profile", "shoe_size", "42", "--json-value", "--source", "system")
    out = run(url, "write", "acme", "u1", "preference", "reply_length", "长", code=1)  # extracted < user_confirmed
    assert out.startswith("REJECT lower_priority_source")
    out = run(url, "write-many", "acme", "u1", '[{"kind": "preference", "key": "tone", "value": "warm"}]',
              "--change-set", "cs-1")
    assert "ADD" in out and "change set cs-1" in out
    records = json.loads(run(url, "recall", "acme", "u1", "--json", "-k", "10"))
    assert {r["key"]: r["value"] for r in records} == {"reply_length": "简洁", "shoe_size": 42, "tone": "warm"}
    shown = run(url, "recall", "acme", "u1", "--key", "shoe_size")
    assert "shoe_size" in shown and "reply_length" not in shown
    mid = next(r["id"] for r in records if r["key"] == "shoe_size")
    assert json.loads(run(url, "get", "acme", mid))["value"] == 42
    assert "history" not in run(url, "history", "acme", "u1", "reply_length")
    audit = json.loads(run(url, "audit", "acme", "--user", "u1", "--action", "write", "--json"))
    assert [e["key"] for e in audit][:2] == ["reply_length", "shoe_size"] and audit[0]["actor"] == "ops"
    r = runner.invoke(app, ["get", "acme", "nope", "--store", url], env=ENV)
    assert r.exit_code == 1 and "error:" in r.stderr


def test_forget_range_and_time_travel(url: str) -> None:
    run(url, "write", "acme", "u1", "profile", "a", "1", "--at", "2026-01-01T00:00:00Z")
    run(url, "write", "acme", "u1", "profile", "b", "2", "--at", "2026-03-01T00:00:00Z")
    assert "forgot 1 rows" in run(url, "forget", "acme", "u1", "--since", "2026-02-01", "--at", "2026-03-02")
    left = json.loads(run(url, "recall", "acme", "u1", "--json", "--at", "2026-03-02"))
    assert [r["key"] for r in left] == ["a"]
    r = runner.invoke(app, ["forget", "acme", "u1", "--key", "a", "--since", "1", "--store", url], env=ENV)
    assert r.exit_code == 2 and "error:" in r.stderr


def test_sessions_and_episodes(url: str) -> None:
    sid = run(url, "sessions", "open", "acme", "u1", "--client", "web", "--at", "1790000000").strip()
    assert json.loads(run(url, "sessions", "show", sid, "--tenant", "acme"))["client_id"] == "web"
    assert "status open" in run(url, "sessions", "touch", sid, "--tenant", "acme", "--at", "1790000100")
    run(url, "write", "acme", "u1", "context", "topic", "退款", "--session", sid, "--at", "1790000200")
    assert "退款" in run(url, "sessions", "context", sid, "--tenant", "acme", "--at", "1790000300")
    out = run(url, "sessions", "close", sid, "--tenant", "acme", "--at", "1790000400",
              "--transcript", '[{"role": "user", "content": "我要退款"}]')
    assert "closed" in out and "1 context memories retired" in out
    episodes = json.loads(run(url, "episodes", "acme", "u1", "--json", "--at", "1790000500"))
    assert len(episodes) == 1 and episodes[0]["kind"] == "episode"


def test_conversation_commands(url: str, tmp_path: Path) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text("我对花生过敏\n报告请用 markdown\n", encoding="utf-8")
    candidates = json.loads(run(url, "extract", str(chat)))
    assert {c["key"] for c in candidates} == {"allergy", "report_format"}
    out = run(url, "ingest", "acme", "u2", str(chat))
    assert "allergy" in out and "report_format" in out
    assert json.loads(run(url, "plan", "acme", "u2", "报告还是按上次的格式"))["preference_recall"]
    block = run(url, "assemble", "acme", "u2", "帮我写周报", "--budget-tokens", "300")
    assert "<USER_PREFERENCES>" in block and "markdown" in block
    for said in ("太长了", "又太长了", "还是太长"):
        result = json.loads(run(url, "pushback", "acme", "u2", "reply_length", said))
    vid = result["verification"]["id"]
    assert vid in run(url, "verifications", "list", "acme", "u2")
    assert "rejected" in run(url, "verifications", "reject", "acme", "u2", vid)
    run(url, "verifications", "reject", "acme", "u2", vid, code=1)
    questions = json.loads(run(url, "onboarding", "questions", "acme", "u2", "--language", "zh", "--json"))
    first = questions[0]["id"]
    out = run(url, "onboarding", "answer", "acme", "u2", f"{first}=工程师")
    assert out.startswith("ADD")
    with Memory(url) as m:
        assert any(q["answered"] for q in m.onboarding_questions("acme", "u2"))


def test_contract_and_consent_commands(url: str, tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps({"key": "address", "kind": "profile", "sensitivity": "L1",
                                    "sharing": "explicit_opt_in", "domain": "commerce"}), encoding="utf-8")
    assert "version" in run(url, "contracts", "set", str(contract), "-t", "acme")
    assert "address" in run(url, "opt-in", "acme", "u1", "address", "--domain", "logistics")
    assert "withdrew 1" in run(url, "opt-out", "acme", "u1", "address", "--domain", "logistics")
    assert "contract deleted" in run(url, "contracts", "delete", "address", "-t", "acme")
