"""CLI: usermem eval pii, contracts, grants, export, redact — and the privacy benchmarks in quick mode."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()


def test_eval_pii_writes_reports(tmp_path):
    r = runner.invoke(app, ["eval", "pii", "--out", str(tmp_path), "--pii", "520", "--benign", "520"])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "pii.json").read_text(encoding="utf-8"))
    assert report["pii_sentences"] >= 500 and report["benign_sentences"] >= 500 and report["meets_targets"]
    assert "| cn_id |" in (tmp_path / "pii.md").read_text(encoding="utf-8")


def test_contracts_grants_export(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    from usermem import Memory

    with Memory(store) as m:
        m.write("acme", "C007", "fact", "phone", "13800138000", source="user_confirmed")
        m.write("acme", "C007", "preference", "reply_length", "concise")
    r = runner.invoke(app, ["contracts", "disable", "reply_length", "-t", "acme", "--store", store, "--actor", "ops"])
    assert r.exit_code == 0 and "disabled (version 2)" in r.output
    r = runner.invoke(app, ["contracts", "list", "-t", "acme", "--store", store], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "allergy" in r.output
    r = runner.invoke(app, ["contracts", "show", "allergy", "-t", "acme", "--store", store])
    assert json.loads(r.output)["sensitivity"] == "L3"
    r = runner.invoke(app, ["contracts", "show", "nope", "-t", "acme", "--store", store])
    assert r.exit_code != 0
    r = runner.invoke(app, ["grants", "add", "acme", "C007", "L2", "--purpose", "callback", "--store", store])
    assert r.exit_code == 0
    gid = r.output.strip()
    r = runner.invoke(app, ["grants", "revoke", gid, "--store", store])
    assert r.exit_code == 0 and "revoked" in r.output
    out = tmp_path / "C007.json"
    r = runner.invoke(app, ["export", "acme", "C007", "--store", store, "--out", str(out)])
    assert r.exit_code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["fields"]) == {"phone", "reply_length"}
    with Memory(store) as m:
        assert m.recall("acme", "C007") == []  # reply_length disabled, phone is L2 without a grant
        assert [e.action for e in m.audit("acme", action="export")] == ["export"]


def test_redact_command():
    r = runner.invoke(app, ["redact", "卡 4111 1111 1111 1111，手机 13800138000", "--placeholder", "[REDACTED]"])
    assert r.exit_code == 0 and r.output.strip() == "卡 [REDACTED]，手机 [REDACTED]"


def test_privacy_benchmarks_quick(tmp_path):
    from usermem import bench

    report = bench.run(["privacy.forget_user", "privacy.recall_gate", "privacy.pii_detect"], tmp_path, quick=True)
    res = report["results"]
    assert "error" not in res["privacy.forget_user"], res
    assert res["privacy.forget_user"]["forget_user"]["n"] == 5
    assert res["privacy.pii_detect"]["sentences"] == 400
