"""Options and argument parsers shared by the CLI commands, so every command spells the operation
parameters of `usermem.interfaces.catalog` the same way (`--at` for `now`, `--actor`, `--session`, ...)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer


def parse_time(text: str) -> float:
    """Unix seconds (`1790000000`) or an ISO 8601 date / date-time (`2026-11-30`, `2026-11-30T08:00:00+08:00`;
    without an offset it is UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither Unix seconds nor an ISO 8601 date/time "
                                 "(e.g. 2026-11-30 or 2026-11-30T08:00:00+08:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_value(text: str, as_json: bool) -> Any:
    """A value typed on the command line: JSON when `as_json`, else the text itself."""
    if not as_json:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON ({exc.msg} at {exc.pos}): {text[:60]!r}") from None


def read_json(source: str, what: str) -> Any:
    """JSON from a file path, `-` (stdin), or given inline (text starting with `{` or `[`)."""
    text = source
    if source == "-":
        text = sys.stdin.read()
    elif not source.lstrip().startswith(("{", "[")):
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {what} from {source}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_messages(source: str) -> Any:
    """A conversation: JSON ({role, content} messages or strings) from a file, `-` or inline; a file or stdin
    that is not JSON is one user message per non-empty line."""
    text = sys.stdin.read() if source == "-" else None
    if text is None and not source.lstrip().startswith(("{", "[")):
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read messages from {source}: {exc.strerror or exc}") from None
    text = source if text is None else text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [line for line in text.splitlines() if line.strip()]


def key_values(pairs: list[str], what: str) -> dict[str, Any]:
    """`key=value` arguments; a value that is valid JSON is taken as JSON (`n=3`, `tags=["a"]`), else as text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{what}: expected key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def jsonable(obj: Any) -> Any:
    """Engine results (dataclasses with or without `to_dict`, enums, lists, dicts) as plain JSON data."""
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    if is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(asdict(obj))
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), ensure_ascii=False, indent=2, default=str)


AtOpt = Annotated[float | None, typer.Option(
    "--at", parser=parse_time, metavar="TIME",
    help="Act as of this time instead of the clock (Unix seconds or ISO 8601, UTC unless an offset is given): "
         "replays, imports, tests")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who acts (recorded in history and the audit log)")]
SourceOpt = Annotated[str, typer.Option(help="Authority of the change: user_confirmed, agent_confirmed, system")]
SessionOpt = Annotated[str | None, typer.Option("--session", help="The session this belongs to")]
ChangeSetOpt = Annotated[str | None, typer.Option("--change-set", help="Group writes under this change-set id "
                                                                      "(revert them together)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (for scripts)")]
SinceOpt = Annotated[float | None, typer.Option("--since", parser=parse_time, metavar="TIME",
                                                help="From this time (inclusive; Unix seconds or ISO 8601)")]
UntilOpt = Annotated[float | None, typer.Option("--until", parser=parse_time, metavar="TIME",
                                                help="Until this time (exclusive; Unix seconds or ISO 8601)")]
