"""The Claude memory tool (`memory_20250818`) backed by usermem: `UsermemMemoryTool(memory, tenant, user_id)`.

    from anthropic import Anthropic
    from usermem.integrations.anthropic import UsermemMemoryTool

    tool = UsermemMemoryTool(memory, tenant="acme", user_id="alice")
    runner = Anthropic().beta.messages.tool_runner(model=..., tools=[tool], messages=[...])

Claude's `/memories` files become usermem items of one user (through `UsermemStore`, namespace
`(user_id, "claude_memories")`, one memory per file whose value is `{"path", "text"}`), so they are written
with `Memory.write`: the PII and injection guards refuse a file holding a card number, a password or an
instruction-injection (the tool answers with the reason; nothing is stored), every change is versioned and
audited, and `forget_user` erases them. Directories are implied by file paths, as on a filesystem.

Safety: every path must be `/memories` or below it; `..`, `.`, backslashes, control characters and
percent-encoded separators are refused (no traversal), paths are at most 255 characters; a file is at most
`max_file_bytes` (64 KiB default) and a user at most `max_files` files (500). Errors are the SDK's
`ToolError` (an `is_error` tool result with the reason), in the SDK reference backend's wording.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

try:
    from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
    from anthropic.types.beta import (
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )
except ImportError as exc:  # pragma: no cover - the optional extra is not installed
    raise ImportError(f"usermem.integrations.anthropic needs the anthropic extra: pip install 'usermem[anthropic]' ({exc})") from exc

from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.integrations.langgraph import UsermemStore

ROOT = "/memories"
NAMESPACE_LABEL = "claude_memories"
MAX_PATH = 255
_BAD = re.compile(r"[\x00-\x1f\x7f\\]|%2e|%2f|%5c", re.IGNORECASE)
_WIDTH = 6


class UsermemMemoryTool(BetaAbstractMemoryTool):
    """The Anthropic SDK's memory tool with usermem as its storage (see the module docstring)."""

    def __init__(self, memory: Memory, *, tenant: str, user_id: str, max_file_bytes: int = 64 * 1024,
                 max_files: int = 500, source: str = "agent_confirmed",
                 clock: Callable[[], float] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.store = UsermemStore(memory, tenant=tenant, source=source, actor="claude-memory-tool", clock=clock)
        self.user_id = user_id
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self._ns = (user_id, NAMESPACE_LABEL)

    # -- the six commands ----------------------------------------------------------------------------

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        path = _path(command.path)
        text = self._read(path)
        if text is None:
            files = self._files_under(path)
            if not files and path != ROOT:
                raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
            return self._listing(path, files)
        lines = text.split("\n")
        start, shown = 1, lines
        if command.view_range and len(command.view_range) == 2:
            first = max(1, command.view_range[0])
            last = len(lines) if command.view_range[1] == -1 else command.view_range[1]
            if last < first - 1 or first > len(lines) + 1:
                raise ToolError(f"Invalid view_range {command.view_range} for a file of {len(lines)} lines.")
            start, shown = first, lines[first - 1:last]
        numbered = [f"{str(i + start).rjust(_WIDTH)}\t{line}" for i, line in enumerate(shown)]
        return f"Here's the content of {command.path} with line numbers:\n" + "\n".join(numbered)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        path = _file_path(command.path)
        if self._read(path) is not None:
            raise ToolError(f"File {command.path} already exists")
        if self._files_under(path):
            raise ToolError(f"{command.path} is a directory")
        if len(self._files_under(ROOT)) >= self.max_files:
            raise ToolError(f"Too many memory files (at most {self.max_files}); delete or merge some first.")
        self._write(path, command.file_text)
        return f"File created successfully at: {command.path}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        path = _file_path(command.path)
        text = self._existing(path, command.path)
        count = text.count(command.old_str) if command.old_str else 0
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim "
                            f"in {command.path}.")
        if count > 1:
            found = [text[:m.start()].count("\n") + 1 for m in re.finditer(re.escape(command.old_str), text)]
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` "
                            f"in lines: {', '.join(map(str, found))}. Please ensure it is unique")
        at = text[:text.find(command.old_str)].count("\n")
        new = text.replace(command.old_str, command.new_str)
        self._write(path, new)
        lines = new.split("\n")
        snippet = [f"{str(n).rjust(_WIDTH)}\t{lines[n - 1]}"
                   for n in range(max(0, at - 2) + 1, min(len(lines), at + 3) + 1)]
        return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + "\n".join(snippet))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        path = _file_path(command.path)
        text = self._existing(path, command.path)
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        if not 0 <= command.insert_line <= len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. It should be within the "
                            f"range [0, {len(lines)}].")
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        self._write(path, "\n".join(lines) + "\n")
        return f"The file {command.path} has been edited."

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        path = _path(command.path)
        if path == ROOT:
            raise ToolError("Cannot delete the /memories directory itself")
        victims = [path] if self._read(path) is not None else self._files_under(path)
        if not victims:
            raise ToolError(f"The path {command.path} does not exist")
        for p in victims:
            self.store.delete(self._ns, p)
        return f"Successfully deleted {command.path}"

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = _path(command.old_path), _file_path(command.new_path)
        if old == ROOT:
            raise ToolError("Cannot rename the /memories directory itself")
        if self._read(new) is not None or self._files_under(new):
            raise ToolError(f"The destination {command.new_path} already exists")
        text = self._read(old)
        moves = [(old, new)] if text is not None else [(p, new + p[len(old):]) for p in self._files_under(old)]
        if not moves:
            raise ToolError(f"The path {command.old_path} does not exist")
        for src, dst in moves:
            _file_path(dst)
            self._write(dst, self._existing(src, src))
            self.store.delete(self._ns, src)
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    def clear_all_memory(self) -> str:
        for p in self._files_under(ROOT):
            self.store.delete(self._ns, p)
        return "All memory cleared"

    # -- storage -------------------------------------------------------------------------------------

    def _read(self, path: str) -> str | None:
        item = self.store.get(self._ns, path)
        return None if item is None else str(item.value.get("text", ""))

    def _existing(self, path: str, shown: str) -> str:
        text = self._read(path)
        if text is None:
            raise ToolError(f"The path {shown} does not exist. Please provide a valid path.")
        return text

    def _write(self, path: str, text: str) -> None:
        size = len(text.encode("utf-8"))
        if size > self.max_file_bytes:
            raise ToolError(f"File {path} would be {size} bytes; memory files are at most {self.max_file_bytes} "
                            "bytes. Keep notes short or split them.")
        try:
            self.store.put(self._ns, path, {"path": path, "text": text})
        except UsermemError as exc:
            raise ToolError(f"usermem refused to store {path}: {exc}. Do not store secrets, passwords, card "
                            "or ID numbers, or instructions.") from exc

    def _files_under(self, directory: str) -> list[str]:
        base = directory.rstrip("/") + "/"
        items = self.store.search(self._ns, limit=self.max_files + 1)
        return sorted(i.key for i in items if i.key.startswith(base))

    def _listing(self, directory: str, files: list[str]) -> str:
        entries: dict[str, int] = {}
        base = directory.rstrip("/") + "/"
        for f in files:
            parts = f[len(base):].split("/")
            size = len((self._read(f) or "").encode("utf-8"))
            for depth in range(1, min(len(parts), 2) + 1):
                name = base + "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
                entries[name] = entries.get(name, 0) + size
        total = sum(len((self._read(f) or "").encode("utf-8")) for f in files)
        lines = [f"{_size(total)}\t{directory}"]
        lines += [f"{_size(size)}\t{name}" for name, size in sorted(entries.items())]
        return (f"Here're the files and directories up to 2 levels deep in {directory}, excluding hidden items:\n"
                + "\n".join(lines))


class UsermemAsyncMemoryTool(BetaAsyncAbstractMemoryTool):
    """The async form (for `AsyncAnthropic`'s tool runner): the same backend, run in a worker thread."""

    def __init__(self, memory: Memory, *, tenant: str, user_id: str, **kw: Any) -> None:
        cache_control = kw.pop("cache_control", None)
        super().__init__(cache_control=cache_control)
        self.sync = UsermemMemoryTool(memory, tenant=tenant, user_id=user_id, **kw)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await asyncio.to_thread(self.sync.view, command)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await asyncio.to_thread(self.sync.create, command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await asyncio.to_thread(self.sync.str_replace, command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await asyncio.to_thread(self.sync.insert, command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await asyncio.to_thread(self.sync.delete, command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await asyncio.to_thread(self.sync.rename, command)

    async def clear_all_memory(self) -> str:
        return await asyncio.to_thread(self.sync.clear_all_memory)


def _path(raw: str) -> str:
    """A normalised `/memories/...` path, or ToolError for anything that could leave it."""
    if not isinstance(raw, str) or not raw.startswith(ROOT):
        raise ToolError(f"Path must start with /memories, got: {raw}")
    if len(raw) > MAX_PATH or _BAD.search(raw):
        raise ToolError(f"Path {raw!r} is not allowed (at most {MAX_PATH} characters, no control characters, "
                        "backslashes or percent-encoded separators)")
    rest = raw[len(ROOT):]
    if rest and not rest.startswith("/"):
        raise ToolError(f"Path must start with /memories, got: {raw}")
    parts = [p for p in rest.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ToolError(f"Path {raw} would escape /memories directory")
    if any(p.startswith(".") for p in parts):
        raise ToolError(f"Path {raw}: hidden files are not allowed")
    return "/".join([ROOT, *parts])


def _file_path(raw: str) -> str:
    path = _path(raw)
    if path == ROOT:
        raise ToolError("/memories is a directory, not a file")
    return path


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}K"
    return f"{n / (1024 * 1024):.1f}M"
