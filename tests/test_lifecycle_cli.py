"""The lifecycle CLI commands against a real SQLite file."""

from __future__ import annotations

from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces.cli import _register, app

runner = CliRunner()
_register()


def test_revert_undo_and_sessions_from_the_command_line(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"
    m = Memory(url)
    m.write("edu", "s1", "preference", "report_format", "markdown", source="user_confirmed", now=1000)
    m.write("edu", "s1", "preference", "report_format", "word", source="user_confirmed", now=2000)
    cs = m.write_many("edu", "s1", [{"kind": "preference", "key": "reply_length", "value": "short",
                                     "source": "user_confirmed"}], now=3000)[0].memory.change_set_id
    sid = m.open_session("edu", "s1", now=0, idle_seconds=1)
    m.close()

    out = runner.invoke(app, ["revert", "edu", "s1", "report_format", "--to", "1", "--store", url])
    assert out.exit_code == 0, out.output
    assert "UPDATE" in out.output and "markdown" in out.output
    out = runner.invoke(app, ["revert-change-set", "edu", cs, "--store", url])
    assert out.exit_code == 0 and "reverted 1 keys" in out.output
    out = runner.invoke(app, ["sessions", "expire", "--store", url])
    assert out.exit_code == 0 and "expired 1 idle sessions" in out.output
    out = runner.invoke(app, ["sessions", "close", sid, "--store", url])
    assert out.exit_code == 0 and "already closed" in out.output
    out = runner.invoke(app, ["decay"])
    assert out.exit_code == 0 and "preference" in out.output and "17.9 d" in out.output

    m = Memory(url)
    assert [h.value for h in m.history("edu", "s1", "report_format")] == ["markdown", "word", "markdown"]
    assert m.history("edu", "s1", "reply_length")[-1].retracted
    m.close()
