"""Listing commands print JSON with --json (for scripts), and every `list`/`history` command has the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from usermem import Memory
from usermem.interfaces.cli import _register, app

_register()
runner = CliRunner()


def _commands() -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(c: Any, prefix: list[str]) -> None:
        if hasattr(c, "commands"):
            for name, sub in c.commands.items():
                walk(sub, [*prefix, name])
        else:
            found[" ".join(prefix)] = c

    walk(typer.main.get_command(app), [])
    return found


def test_every_listing_command_takes_json() -> None:
    listing = {n: c for n, c in _commands().items() if n.split()[-1] in ("list", "history", "recall", "audit",
                                                                            "episodes", "users")}
    assert {"sessions list", "contracts list", "contracts history", "grants list", "keys list"} <= set(listing)
    missing = [n for n, c in listing.items() if "--json" not in {o for p in c.params for o in getattr(p, "opts", [])}]
    assert missing == []


def _json(args: list[str]) -> Any:
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_listings_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    m = Memory(url)
    t0 = 1_790_000_000.0
    m.write("acme", "u1", "preference", "reply_length", "[简洁]", source="user_confirmed", now=t0)
    sid = m.open_session("acme", "u1", client_id="app", now=t0)
    m.set_contract("acme", {"key": "shoe_size", "kind": "fact", "sensitivity": "L1"}, now=t0)
    gid = m.grant("acme", "u1", "L3", "allergy check", ttl=3600, now=t0)
    m.close()
    at = ["--at", str(t0 + 10)]
    sessions = _json(["sessions", "list", "acme", "u1", "--store", url, "--json", *at])
    assert [(s["id"], s["client_id"], s["status"]) for s in sessions] == [(sid, "app", "open")]
    contracts = _json(["contracts", "list", "--tenant", "acme", "--store", url, "--json"])
    assert contracts["unknown_fields"] == "accept" and "shoe_size" in [c["key"] for c in contracts["contracts"]]
    history = _json(["contracts", "history", "shoe_size", "--tenant", "acme", "--store", url, "--json"])
    assert [h["version"] for h in history] == [1]
    grants = _json(["grants", "list", "acme", "u1", "--store", url, "--json", *at])
    assert [g["id"] for g in grants] == [gid]
    runner.invoke(app, ["keys", "create", "acme", "--store", url])
    keys = _json(["keys", "list", "--store", url, "--json"])
    assert [k["tenant"] for k in keys] == ["acme"] and all("secret" not in json.dumps(k) for k in keys)
