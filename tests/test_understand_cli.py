"""`usermem eval plan|extract|assemble` end to end (small data), deterministic and LLM mode (fake server)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fake_openai import FakeOpenAI, reply_json
from usermem.evals import extraction as evals
from usermem.interfaces.cli import _register, app

runner = CliRunner()
_register()


def _small(tmp_path, name: str, rows, jsonl: bool) -> str:
    path = tmp_path / name
    if jsonl:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_eval_commands_write_reports(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ../shared/data here: assemble measures the dialogues only
    plans = _small(tmp_path, "p.jsonl", evals.load_plan_set()[:10], True)
    dialogues = _small(tmp_path, "d.json", [d for d in evals.load_dialogues() if "sensitive" in d["tags"]][:4], False)
    out = tmp_path / "reports"
    r = runner.invoke(app, ["eval", "plan", "--data", plans, "--mode", "deterministic", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", "extract", "--data", dialogues, "--mode", "deterministic", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", "assemble", "--data", dialogues, "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "eval_plan.json").read_text())["results"]["deterministic"]
    assert plan["all"]["n"] == 10
    extract = json.loads((out / "eval_extract.json").read_text())["results"]["deterministic"]
    assert extract["sensitive"]["rejection_rate"] == 1.0 and extract["sensitive"]["candidates"] >= 4
    assert "rejection rate **100%**" in (out / "eval_extract.md").read_text()
    assert json.loads((out / "eval_assemble.json").read_text())["dialogues"]["n"] == 4


def test_eval_plan_llm_mode_uses_the_configured_endpoint(tmp_path, monkeypatch) -> None:
    rows = evals.load_plan_set()[:3]
    answer = reply_json({"fact_recall": ["email"], "preference_recall": [], "context_recall": True,
                         "memory_priority": "high"})
    with FakeOpenAI(default=answer) as server:
        monkeypatch.setenv("USERMEM_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("USERMEM_LLM_MODEL", "fake")
        monkeypatch.chdir(tmp_path)
        out = tmp_path / "reports"
        r = runner.invoke(app, ["eval", "plan", "--data", _small(tmp_path, "p.jsonl", rows, True), "--mode", "llm",
                                "--out", str(out)])
        assert r.exit_code == 0, r.output
        res = json.loads((out / "eval_plan.json").read_text())["results"]["llm"]
        assert res["modes_used"] == ["llm"] and res["llm"]["ok"] == 3
        assert len(server.chat_requests()) == 3


def test_eval_llm_mode_without_endpoint_is_skipped(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("USERMEM_LLM_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["eval", "plan", "--mode", "llm", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0 and "llm mode skipped" in r.output
    assert runner.invoke(app, ["eval", "plan", "--mode", "nonsense"]).exit_code != 0
