"""Settings: the documented table is complete and current, `usermem config show` states each value's origin,
unknown USERMEM_* environment names are warned about with the closest setting."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from usermem.config import (
    SETTING_HELP,
    Settings,
    load_settings_with_origin,
    settings_table,
    unknown_env,
)
from usermem.interfaces.cli import _register, app

_register()
DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_every_setting_is_documented_and_the_table_is_current() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert sorted(SETTING_HELP) == sorted(names)
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- settings-table:start -->\n", 1)[1].split("<!-- settings-table:end -->", 1)[0]
    assert block == settings_table()
    for name in names:
        assert f"| `{name}` | `USERMEM_{name.upper()}` |" in block


def test_origin_of_each_value(tmp_path: Path) -> None:
    file = tmp_path / "u.toml"
    file.write_text('port = 9001\nhost = "0.0.0.0"\n[usermem]\nmax_batch = 7\n', encoding="utf-8")
    env = {"USERMEM_HOST": "127.0.0.2", "USERMEM_RETENTION_DAYS": "3"}
    s, origin = load_settings_with_origin(file, env, flags={"store_url": "sqlite:///x.db"})
    assert (s.port, origin["port"]) == (9001, f"file:{file}")
    assert (s.max_batch, origin["max_batch"]) == (7, f"file:{file}")
    assert (s.host, origin["host"]) == ("127.0.0.2", "env:USERMEM_HOST")  # env beats the file
    assert (s.retention_days, origin["retention_days"]) == (3.0, "env:USERMEM_RETENTION_DAYS")
    assert (s.store_url, origin["store_url"]) == ("sqlite:///x.db", "flag")
    assert origin["embedder"] == "default"


def test_unknown_environment_names_get_a_did_you_mean(caplog: pytest.LogCaptureFixture) -> None:
    env = {"USERMEM_PORTT": "1", "USERMEM_STORE_URL": "sqlite://", "USERMEM_API_KEY": "k",
           "USERMEM_TEST_PG_HOST": "x", "USERMEM_ZZZQQQ": "1", "OTHER": "1",
           "USERMEM_SERVE_WORKER_SPEC": "{}"}  # set by `usermem serve --workers N` for its workers: known
    assert unknown_env(env) == [("USERMEM_PORTT", "USERMEM_PORT"), ("USERMEM_ZZZQQQ", None)]
    with caplog.at_level(logging.WARNING, logger="usermem.config"):
        load_settings_with_origin(None, {**env, "USERMEM_LLM_MODLE": "m"})
    assert "USERMEM_LLM_MODLE is ignored; did you mean USERMEM_LLM_MODEL?" in caplog.text


def test_config_show_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(__import__("os").environ):
        if name.startswith("USERMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("USERMEM_LLM_API_KEY", "sk-secret-value")
    monkeypatch.setenv("USERMEM_REDIS_URL", "redis://:hunter2@127.0.0.1:6379/0")
    (tmp_path / "usermem.toml").write_text("rate_limit_per_minute = 5\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["config", "show", "--port", "9100", "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert set(rows) == set(SETTING_HELP)
    assert rows["port"] == {"value": "9100", "origin": "flag", "env": "USERMEM_PORT"}
    assert rows["rate_limit_per_minute"]["origin"] == "file:usermem.toml"
    assert rows["llm_api_key"] == {"value": "***", "origin": "env:USERMEM_LLM_API_KEY", "env": "USERMEM_LLM_API_KEY"}
    assert "hunter2" not in done.stdout and rows["redis_url"]["origin"] == "env:USERMEM_REDIS_URL"
    assert rows["store_url"]["origin"] == "default"
    table = CliRunner().invoke(app, ["config", "show"])
    assert table.exit_code == 0 and "store_url" in table.stdout and "***" in table.stdout
    assert "sk-secret" not in table.stdout
