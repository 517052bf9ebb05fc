"""The `usermem` command line (typer + rich). Each command group lives beside its feature;
this module only assembles them. Errors are one clear line and a non-zero exit code."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from usermem.errors import UsermemError
from usermem.interfaces.cli_output import err_console, error_line

app = typer.Typer(
    name="usermem",
    help="Long-term user memory for AI agents. Example: usermem demo --store sqlite:///data/demo.db",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
eval_app = typer.Typer(help="Evaluations on labelled data; each prints a table and writes a fresh runs/<name>-<id>/ "
                       "(--out to choose; `eval all` runs them all).",
                       no_args_is_help=True)
app.add_typer(eval_app, name="eval")
console = Console()


def _version(value: bool) -> None:
    if value:
        from usermem import __version__

        print(f"usermem {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the installed version and exit")] = False,
) -> None:
    """Long-term user memory for AI agents. Example: usermem demo --store sqlite:///data/demo.db"""


__all__ = ["app", "console", "err_console", "eval_app", "main"]


def _register() -> None:
    # Command modules register themselves on `app`; importing them is enough.
    from usermem.interfaces import (  # noqa: F401
        cli_config,
        cli_consent,
        cli_conversation,
        cli_core,
        cli_evals,
        cli_events,
        cli_lifecycle,
        cli_privacy,
        cli_relevance,
        cli_service,
        cli_storage,
        cli_understand,
        cli_usermodel,
        cli_webhooks,
    )


def main() -> None:
    _register()
    try:
        app()
    except UsermemError as exc:
        error_line(str(exc))  # shown literally: messages quote user input ("[x]" must not vanish)
        sys.exit(2)
    except OSError as exc:
        if exc.filename is None:  # not about a file the user named: a real failure, keep the traceback
            raise
        error_line(f"{exc.filename}: {exc.strerror or exc}")
        sys.exit(2)
