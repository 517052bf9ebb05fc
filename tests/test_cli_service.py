"""`usermem serve|mcp|keys|bench`: help with examples, key management, one-line errors with exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces.api.keys import KeyRing
from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()
MINE = [["serve"], ["mcp"], ["keys"], ["keys", "create"], ["keys", "list"], ["keys", "revoke"], ["bench"]]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from usermem.interfaces.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", "USERMEM_EMBEDDER": "none", **(env or {})})


@pytest.mark.parametrize("cmd", MINE, ids=" ".join)
def test_help_has_an_example(cmd):
    r = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "Example" in r.output and "usermem " in r.output


def test_keys_create_list_revoke(tmp_path):
    store = f"sqlite:///{tmp_path}/k.db"
    r = runner.invoke(app, ["keys", "create", "acme", "--name", "backend", "--admin", "--store", store],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    key = r.output.strip().splitlines()[-1]
    assert key.startswith("umk_")
    key_id = key.split("_")[1]
    m = Memory(store)
    found = KeyRing(m.store).verify(key)
    assert found is not None and found.tenant == "acme" and found.admin and found.name == "backend"
    m.close()
    r = runner.invoke(app, ["keys", "list", "--store", store], env={"COLUMNS": "200"})
    assert key_id in r.output and "acme" in r.output and key.split("_", 2)[2] not in r.output
    r = runner.invoke(app, ["keys", "revoke", key_id, "--store", store])
    assert r.exit_code == 0 and "revoked" in r.output
    m = Memory(store)
    assert KeyRing(m.store, cache_seconds=0).verify(key) is None
    m.close()
    assert "revoked" in runner.invoke(app, ["keys", "list", "--store", store], env={"COLUMNS": "200"}).output


@pytest.mark.parametrize(("args", "needle"), [
    (["keys", "revoke", "nope"], "no API key"),
    (["keys", "create", "_system"], "reserved"),
    (["mcp"], "--tenant"),
    (["mcp", "--transport", "carrier-pigeon", "--tenant", "t"], "transport"),
    (["bench", "no_such_bench"], "unknown benchmark"),
])
def test_errors_are_one_line_and_non_zero(tmp_path, args, needle):
    Memory(f"sqlite:///{tmp_path}/e.db").close()  # read-only commands refuse a missing database file
    r = cli(*args, "--store", f"sqlite:///{tmp_path}/e.db") if args[0] != "bench" else cli(*args)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr


def test_bench_http_quick_writes_a_report(tmp_path):
    r = cli("bench", "http", "--quick", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "recall.c8.p95_ms" in r.stdout
    report = json.loads((tmp_path / "bench-quick.json").read_text())
    http = report["results"]["http"]
    for op in ("recall", "write"):
        for c in ("c1", "c8", "c32"):
            assert http[op][c]["n"] > 0 and http[op][c]["errors"] == 0 and http[op][c]["p99_ms"] >= http[op][c]["p50_ms"]


def test_bench_exits_non_zero_when_a_benchmark_errors(tmp_path):
    from usermem import bench

    def boom(ctx):
        raise RuntimeError("[red]disk on fire[/]")

    bench.load_all()
    bench.benchmark("cli_test.boom")(boom)
    try:
        r = runner.invoke(app, ["bench", "cli_test.boom", "--quick", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    finally:
        bench.REGISTRY.pop("cli_test.boom", None)
        getattr(bench, "SPECS", {}).pop("cli_test.boom", None)
    assert r.exit_code == 1, r.output
    assert "error:" in r.stderr and "cli_test.boom" in r.stderr and "[red]disk on fire[/]" in r.stderr
