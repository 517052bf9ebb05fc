"""How the CLI prints: user data is shown as text, never read as Rich markup; errors are one line.

Stored values, keys, ids, tenant and user names are data. Rich reads `[red]x[/]` inside a string as
markup, so interpolating data into a markup string either restyles it (brackets vanish) or crashes
(`[/]` closes nothing). Every command builds its output from these helpers instead:

- `esc(x)` — data spliced into a markup string (`f"forgot [bold]{esc(key)}[/bold]"`);
- `cell(x)` / `table(title, *columns)` — table cells and titles as `Text` (no markup at all);
- `fail(message)` — one `error: ...` line on stderr and exit code 2;
- `say(en, zh)` — the human text of a message in the reader's language (LANGUAGE / LC_ALL /
  LC_MESSAGES / LANG starting with `zh` → Chinese, otherwise English).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def esc(value: object) -> str:
    """`value` as text safe to splice into a Rich markup string."""
    return escape(str(value))


def cell(value: object) -> Text:
    """A table cell (or title) that shows `value` literally."""
    return Text(str(value))


def shown(value: object, limit: int = 60) -> str:
    """A stored value as compact JSON, cut to `limit` characters (plain text: wrap it in esc/cell)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(title: str, *columns: str) -> Table:
    """A table whose title is shown literally (titles often hold tenant and user ids)."""
    t = Table(title=Text(title, style="table.title"))
    for col in columns:
        t.add_column(col)
    return t


def language() -> str:
    """'zh' when the user's locale is Chinese, else 'en' (the gettext order of variables)."""
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def say(en: str, zh: str) -> str:
    """The message in the reader's language."""
    return zh if language() == "zh" else en


def localized(text: object) -> str:
    """A bilingual text ({"zh": …, "en": …}) in the reader's language; other values as they are."""
    if isinstance(text, dict):
        lang = language()
        chosen = text.get(lang) or text.get("en") or text.get("zh")
        return str(chosen) if chosen is not None else shown(text, 80)
    return "" if text is None else str(text)


def error_line(message: str) -> None:
    """Print `error: message` as one line on stderr, the message shown literally."""
    err_console.print(Text.assemble(("error:", "red"), " ", message.replace("\n", " ")))


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop the command with one `error:` line and exit code `code` (2: the command cannot run as given)."""
    error_line(message)
    raise typer.Exit(code)


def writable_dir(path: Path, option: str = "--out") -> Path:
    """Create the output directory `path` if needed and make sure files can be written in it — before any
    long run, so a bad `--out` fails at once with one line instead of a traceback at the end."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(say(f"{option} {path}: cannot create the directory ({exc.strerror or exc})",
                 f"{option} {path}：无法创建目录（{exc.strerror or exc}）"))
    if not os.access(path, os.W_OK | os.X_OK):
        fail(say(f"{option} {path}: the directory is not writable", f"{option} {path}：目录不可写"))
    return path


def write_file(path: Path, text: str, option: str = "--out") -> None:
    """Write `text` to `path`; a failure is one `error:` line naming the option, not a traceback."""
    try:
        if path.parent != Path():
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(say(f"{option} {path}: cannot write the file ({exc.strerror or exc})",
                 f"{option} {path}：无法写入文件（{exc.strerror or exc}）"))


SQLITE_HINT = ("sqlite:///relative/path.db is relative to the current directory, "
               "sqlite:////absolute/path.db is absolute")


def sqlite_path(url: str) -> Path | None:
    """The database file a `sqlite:///…` URL names (None for in-memory and non-SQLite URLs)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    return Path(url[len("sqlite:///"):])


def require_existing_store(url: str) -> None:
    """Read-only commands refuse a SQLite URL whose file does not exist, instead of creating an empty
    database there (a mistyped path would otherwise look like a store with no data)."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        fail(say(f"no SQLite database at {path} (from {url}); {SQLITE_HINT}. Pass the right --store "
                 f"(or USERMEM_STORE_URL)",
                 f"{path} 处没有 SQLite 数据库（来自 {url}）；sqlite:///相对路径 相对于当前目录，"
                 f"sqlite:////绝对路径 为绝对路径。请传入正确的 --store（或 USERMEM_STORE_URL）"))


def stdin_is_interactive() -> bool:
    """True when a person can answer a question on stdin (a terminal)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def confirm_or_refuse(question: str, *, yes: bool, refusal: str) -> None:
    """Go on when `--yes` was given or the person at the terminal answers yes; otherwise stop.

    Without a terminal (CI, cron, a pipe) and without `--yes` nothing is asked: the command refuses with
    one `error:` line and exit code 2. Answering no stops with exit code 1 and changes nothing."""
    if yes:
        return
    if not stdin_is_interactive():
        fail(refusal)
    if not typer.confirm(question, default=False):
        err_console.print(say("nothing changed", "未做任何更改"))
        raise typer.Exit(1)
