"""CLI defects of issue 11: user data printed literally (never as Rich markup), an unwritable --out is one
`error:` line, read-only commands refuse a missing SQLite file, and erasing a whole user asks first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces import cli_output
from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()
WIDE = {"COLUMNS": "250", "LANG": "C.UTF-8", "LC_ALL": "", "LANGUAGE": ""}
MARKUP = "[red]x[/]"  # valid markup: brackets would vanish
BROKEN = "a[/]b"  # invalid markup: Rich raises MarkupError


def cli(*args: str, stdin: int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from usermem.interfaces.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120, stdin=stdin,
                          env={**os.environ, **WIDE, **(env or {})})


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/data.db"
    now = time.time()
    with Memory(url) as m:
        m.write("acme", "[u]", "preference", "tone", MARKUP, source="user_confirmed", now=now - 60)
        m.write("acme", "[u]", "preference", "tone", BROKEN, source="user_confirmed", now=now - 30)
        m.write("acme", "[u]", "preference", "style", "[bold]big[/bold]", source="user_confirmed", now=now - 30)
    return url


# --- user data is never markup -------------------------------------------------------------------

def test_inspect_shows_markup_like_values_literally(store: str) -> None:
    r = runner.invoke(app, ["inspect", "acme", "[u]", "--store", store], env=WIDE)
    assert r.exit_code == 0, r.output
    assert json.dumps(BROKEN) in r.output and "[bold]big[/bold]" in r.output
    assert "acme/[u]" in r.output


def test_history_shows_markup_like_values_literally(store: str) -> None:
    r = runner.invoke(app, ["history", "acme", "[u]", "tone", "--store", store], env=WIDE)
    assert r.exit_code == 0, r.output
    assert json.dumps(MARKUP) in r.output and json.dumps(BROKEN) in r.output
    assert "acme/[u]/tone" in r.output


def test_commands_that_echo_values_keep_brackets(store: str) -> None:
    with Memory(store) as m:
        mid = m.recall_scored("acme", "[u]", k=5)[0].memory
    r = runner.invoke(app, ["confirm", "acme", "[u]", mid.id, "--store", store], env=WIDE)
    assert r.exit_code == 0, r.output
    assert json.dumps(mid.value, ensure_ascii=False) in r.output
    r = runner.invoke(app, ["revert", "acme", "[u]", "tone", "--to", "1", "--store", store], env=WIDE)
    assert r.exit_code == 0, r.output
    assert json.dumps(MARKUP) in r.output


def test_error_messages_keep_brackets(store: str) -> None:
    r = cli("keys", "revoke", "[bold]k1[/bold]", "--store", store)
    assert r.returncode == 2
    assert "[bold]k1[/bold]" in one_error_line(r.stderr)


def test_the_helpers_escape_everything() -> None:
    # the output helpers themselves: escaping round-trips through Rich unchanged
    from rich.console import Console

    c = Console(record=True, width=200)
    c.print(f"[bold]{cli_output.esc(BROKEN)}[/bold] {cli_output.esc(MARKUP)}")
    c.print(cli_output.table("t/[u]", "v").title)
    assert c.export_text().splitlines() == [f"{BROKEN} {MARKUP}", "t/[u]"]


# --- an unwritable --out is one error line --------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["export", "acme", "[u]"],
    ["eval", "pii", "--pii", "10", "--benign", "10"],
    ["eval", "plan", "--mode", "deterministic"],
    ["eval", "extraction"],
    ["eval", "assemble"],
    ["bench", "privacy.pii_detect", "--quick"],
])
def test_unwritable_out_is_one_error_line(tmp_path: Path, store: str, args: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    extra = ["--store", store] if args[0] == "export" else []
    r = cli(*args, *extra, "--out", str(blocker / "sub" / "out.json"))
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert "--out" in line and "a-file" in line


def test_export_to_a_directory_is_one_error_line(tmp_path: Path, store: str) -> None:
    r = cli("export", "acme", "[u]", "--store", store, "--out", str(tmp_path))
    assert r.returncode == 2
    assert "--out" in one_error_line(r.stderr)


# --- read-only commands refuse a missing SQLite file ----------------------------------------------

@pytest.mark.parametrize("args", [
    ["inspect", "acme", "u1"], ["history", "acme", "u1", "tone"], ["export", "acme", "u1"],
    ["contracts", "list", "-t", "acme"], ["grants", "list", "acme"], ["sessions", "list", "acme", "u1"],
    ["keys", "list"], ["storage"], ["purge"], ["forget", "acme", "u1", "--key", "tone"],
])
def test_read_only_commands_refuse_a_missing_sqlite_file(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "typo" / "usermem.db"
    r = runner.invoke(app, [*args, "--store", f"sqlite:///{missing}"], env=WIDE)
    assert r.exit_code == 2, r.output
    assert "error:" in r.stderr and "no SQLite database" in r.stderr and "sqlite:////" in r.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_relative_sqlite_url_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Memory("sqlite:///rel.db") as m:
        m.write("acme", "u1", "preference", "tone", "warm", source="user_confirmed")
    assert (tmp_path / "rel.db").is_file()
    r = runner.invoke(app, ["inspect", "acme", "u1", "--store", "sqlite:///rel.db"], env=WIDE)
    assert r.exit_code == 0 and "warm" in r.output
    r = runner.invoke(app, ["inspect", "acme", "u1", "--store", f"sqlite:///{tmp_path}/rel.db"], env=WIDE)
    assert r.exit_code == 0 and "warm" in r.output  # sqlite:////abs/path: four slashes, absolute


def test_commands_that_set_up_a_store_may_create_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/new.db"
    r = runner.invoke(app, ["keys", "create", "acme", "--store", url], env=WIDE)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "new.db").is_file()


# --- forgetting a whole user asks first -----------------------------------------------------------

def _count(store: str) -> int:
    with Memory(store) as m:
        return len(m.recall("acme", "[u]", k=50))


def test_forget_user_without_stdin_or_yes_refuses(store: str) -> None:
    r = cli("forget", "acme", "[u]", "--store", store)  # stdin is /dev/null, as in CI
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert "--yes" in line and "[u]" in line
    assert _count(store) == 2


def test_forget_user_with_yes(store: str) -> None:
    r = runner.invoke(app, ["forget", "acme", "[u]", "--yes", "--store", store], env=WIDE)
    assert r.exit_code == 0, r.output
    assert _count(store) == 0


def test_forget_user_asks_at_a_terminal(store: str, monkeypatch) -> None:
    monkeypatch.setattr(cli_output, "stdin_is_interactive", lambda: True)
    r = runner.invoke(app, ["forget", "acme", "[u]", "--store", store], input="n\n", env=WIDE)
    assert r.exit_code == 1 and "[u]" in r.output
    assert _count(store) == 2
    r = runner.invoke(app, ["forget", "acme", "[u]", "--store", store], input="y\n", env=WIDE)
    assert r.exit_code == 0, r.output
    assert _count(store) == 0


def test_forget_one_key_needs_no_confirmation(store: str) -> None:
    r = cli("forget", "acme", "[u]", "--key", "style", "--store", store)
    assert r.returncode == 0, r.stderr
    assert _count(store) == 1


def test_messages_follow_the_locale(store: str) -> None:
    r = cli("forget", "acme", "[u]", "--store", store, env={"LANG": "zh_CN.UTF-8"})
    assert r.returncode == 2 and "--yes" in r.stderr and "删除" in r.stderr
