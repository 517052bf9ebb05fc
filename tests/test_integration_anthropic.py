"""`UsermemMemoryTool` through the Anthropic SDK's own dispatch (`BetaAbstractMemoryTool.call`, what the tool
runner calls with Claude's tool input): the six commands, traversal refused, sizes capped, guards applied."""

from __future__ import annotations

import pytest
from anthropic.lib.tools import ToolError

from apihelp import T0, fast_memory
from usermem.integrations.anthropic import UsermemMemoryTool


@pytest.fixture
def tool():
    m = fast_memory()
    yield UsermemMemoryTool(m, tenant="acme", user_id="alice", max_file_bytes=200, max_files=3, clock=lambda: T0)
    m.close()


def call(tool: UsermemMemoryTool, **cmd: object) -> str:
    return str(tool.call(cmd))


def test_tool_param_is_the_memory_tool(tool: UsermemMemoryTool):
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}


def test_commands_round_trip(tool: UsermemMemoryTool):
    assert "does not exist" not in call(tool, command="view", path="/memories")
    assert call(tool, command="create", path="/memories/prefs.md", file_text="tea: green\nreply: short\n") == \
        "File created successfully at: /memories/prefs.md"
    with pytest.raises(ToolError, match="already exists"):
        call(tool, command="create", path="/memories/prefs.md", file_text="x")
    out = call(tool, command="view", path="/memories/prefs.md")
    assert out.splitlines()[1:3] == ["     1\ttea: green", "     2\treply: short"]
    assert call(tool, command="view", path="/memories/prefs.md", view_range=[2, 2]).splitlines()[1:] == [
        "     2\treply: short"]
    assert "edited" in call(tool, command="str_replace", path="/memories/prefs.md", old_str="green",
                            new_str="oolong")
    with pytest.raises(ToolError, match="did not appear verbatim"):
        call(tool, command="str_replace", path="/memories/prefs.md", old_str="coffee", new_str="x")
    call(tool, command="insert", path="/memories/prefs.md", insert_line=0, insert_text="# prefs")
    with pytest.raises(ToolError, match="range"):
        call(tool, command="insert", path="/memories/prefs.md", insert_line=9, insert_text="x")
    assert "# prefs\ntea: oolong\nreply: short" in call(tool, command="view", path="/memories/prefs.md").replace(
        "     1\t", "").replace("     2\t", "").replace("     3\t", "")
    call(tool, command="create", path="/memories/trips/kyoto.md", file_text="spring 2027")
    listing = call(tool, command="view", path="/memories")
    assert "/memories/prefs.md" in listing and "/memories/trips/" in listing and "/memories/trips/kyoto.md" in listing
    assert call(tool, command="rename", old_path="/memories/trips", new_path="/memories/travel") == \
        "Successfully renamed /memories/trips to /memories/travel"
    assert "spring 2027" in call(tool, command="view", path="/memories/travel/kyoto.md")
    with pytest.raises(ToolError, match="does not exist"):
        call(tool, command="view", path="/memories/trips/kyoto.md")
    assert call(tool, command="delete", path="/memories/travel") == "Successfully deleted /memories/travel"
    with pytest.raises(ToolError, match="Cannot delete"):
        call(tool, command="delete", path="/memories")
    # the files are usermem memories of alice: versioned, and erased with her
    m = tool.store.memory
    assert m.forget_user("acme", "alice", now=T0) > 0
    with pytest.raises(ToolError, match="does not exist"):
        call(tool, command="view", path="/memories/prefs.md")


@pytest.mark.parametrize("path", ["/memories/../etc/passwd", "/memories/a/../../x", "/etc/passwd", "/memoriesx/a",
                                  "/memories/%2e%2e/x", "/memories/a\\..\\b", "/memories/a\x00b", "/memories/./a",
                                  "/memories/.hidden", "/memories/" + "a" * 300])
def test_paths_outside_memories_are_refused(tool: UsermemMemoryTool, path: str):
    with pytest.raises(ToolError):
        call(tool, command="create", path=path, file_text="x")
    with pytest.raises(ToolError):
        call(tool, command="view", path=path)
    assert tool.store.search((tool.user_id,)) == []


def test_sizes_and_counts_are_capped_and_guards_apply(tool: UsermemMemoryTool):
    with pytest.raises(ToolError, match="at most 200 bytes"):
        call(tool, command="create", path="/memories/big.md", file_text="x" * 201)
    for i in range(3):
        call(tool, command="create", path=f"/memories/n{i}.md", file_text="ok")
    with pytest.raises(ToolError, match="Too many memory files"):
        call(tool, command="create", path="/memories/n3.md", file_text="ok")
    call(tool, command="delete", path="/memories/n2.md")
    with pytest.raises(ToolError, match="usermem refused"):
        call(tool, command="create", path="/memories/card.md", file_text="card 4111 1111 1111 1111")
    with pytest.raises(ToolError, match="usermem refused"):
        call(tool, command="str_replace", path="/memories/n0.md", old_str="ok", new_str="password: hunter2")
    assert "hunter2" not in call(tool, command="view", path="/memories/n0.md")
    with pytest.raises(ToolError, match="at most 200 bytes"):
        call(tool, command="insert", path="/memories/n0.md", insert_line=1, insert_text="y" * 300)


def test_async_tool_shares_the_backend():
    import asyncio

    from usermem.integrations.anthropic import UsermemAsyncMemoryTool

    m = fast_memory()
    tool = UsermemAsyncMemoryTool(m, tenant="acme", user_id="bob", clock=lambda: T0)

    async def go() -> str:
        await tool.call({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
        try:
            await tool.call({"command": "view", "path": "/memories/../x"})
        except ToolError as exc:
            assert "escape" in str(exc)
        else:
            raise AssertionError("traversal accepted")
        return str(await tool.call({"command": "view", "path": "/memories/a.md"}))

    assert "     1\tone" in asyncio.run(go())
    m.close()
