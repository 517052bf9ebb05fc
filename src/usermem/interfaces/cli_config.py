"""`usermem config show`: the effective settings and where each value came from."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

from usermem.config import SETTING_HELP, env_name, load_settings_with_origin, shown_value
from usermem.interfaces.cli import app, console
from usermem.interfaces.cli_output import cell, table

config_app = typer.Typer(help="Settings: what is in effect and where each value came from.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def show(
    store: Annotated[str | None, typer.Option(help="As a command's --store flag would set it")] = None,
    host: Annotated[str | None, typer.Option(help="As `serve --host` would set it")] = None,
    port: Annotated[int | None, typer.Option(help="As `serve --port` would set it")] = None,
    config: Annotated[str | None, typer.Option(help="Settings file (default: USERMEM_CONFIG or ./usermem.toml)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: {setting: {value, origin, env}}")] = False,
) -> None:
    """Print every setting's effective value with its origin: default, file:<path>, env:<NAME> or flag.

    Secrets are masked and URL passwords removed. Unknown USERMEM_* variables are warned about (stderr).
    Example: USERMEM_PORT=9000 usermem config show --store sqlite:///data/usermem.db
    """
    flags: dict[str, Any] = {k: v for k, v in (("store_url", store), ("host", host), ("port", port)) if v is not None}
    settings, origin = load_settings_with_origin(config, flags=flags)
    rows = {f.name: {"value": shown_value(f.name, getattr(settings, f.name)), "origin": origin[f.name],
                     "env": env_name(f.name)} for f in dataclasses.fields(settings)}
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    out = table("usermem settings", "setting", "value", "origin", "meaning")
    for name, row in rows.items():
        out.add_row(cell(name), cell(row["value"]), cell(row["origin"]), cell(SETTING_HELP[name]))
    console.print(out)
