"""`UsermemSession` and the memory tools with the real OpenAI Agents SDK: an `Agent` run by `Runner` against
the scripted local model server (chat-completions protocol, no network)."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.memory import Session
from openai import AsyncOpenAI

from apihelp import T0, fast_memory
from fake_openai import FakeOpenAI, Reply, call_tools
from usermem.errors import ConflictError
from usermem.integrations.openai_agents import UsermemSession, memory_tools

set_tracing_disabled(True)


@pytest.fixture
def memory():
    m = fast_memory()
    yield m
    m.close()


def test_session_protocol(memory):
    s = UsermemSession(memory, tenant="acme", user_id="alice", clock=lambda: T0)
    assert isinstance(s, Session)

    async def go():
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items([{"role": "user", "content": "hi, call me on 13812345678"},
                           {"role": "assistant", "content": "hello"}])
        await s.add_items([{"type": "function_call", "name": "recall", "arguments": "{}", "call_id": "c1"}])
        items = await s.get_items()
        assert [i.get("role", i.get("type")) for i in items] == ["user", "assistant", "function_call"]
        assert "13812345678" not in str(items)  # redacted before it was stored
        assert [i.get("role", i.get("type")) for i in await s.get_items(limit=2)] == ["assistant", "function_call"]
        assert (await s.pop_item())["type"] == "function_call"  # type: ignore[index]
        assert len(await s.get_items()) == 2
        other = UsermemSession(memory, tenant="acme", user_id="alice", session_id=s.session_id)
        assert len(await other.get_items()) == 2  # resumed by id
        with pytest.raises(Exception, match="another user"):
            UsermemSession(memory, tenant="acme", user_id="bob", session_id=s.session_id)
        await s.clear_session()
        assert await s.get_items() == []

    asyncio.run(go())
    closed = s.close()
    assert closed.session.status == "closed"
    with pytest.raises(ConflictError):
        asyncio.run(s.add_items([{"role": "user", "content": "late"}]))


def test_agent_run_with_session_and_memory_tools(memory):
    session = UsermemSession(memory, tenant="acme", user_id="alice")
    with FakeOpenAI() as server:
        server.script(
            call_tools(("remember", {"key": "city", "value": "Berlin", "kind": "fact"})),
            Reply(content="Noted, Berlin."),
            call_tools(("remember", {"key": "password", "value": "hunter2", "kind": "fact"})),
            Reply(content="I can't keep passwords."),
            call_tools(("recall", {"query": "where does the user live", "k": 5})),
            Reply(content="You live in Berlin."),
        )
        model = OpenAIChatCompletionsModel(model="fake", openai_client=AsyncOpenAI(base_url=server.base_url,
                                                                                   api_key="test"))
        agent = Agent(name="assistant", instructions="Use memory.", model=model,
                      tools=memory_tools(memory, tenant="acme", user_id="alice"))

        async def go():
            r1 = await Runner.run(agent, "I live in Berlin and I prefer short answers.", session=session)
            r2 = await Runner.run(agent, "My password is hunter2, remember it", session=session)
            r3 = await Runner.run(agent, "Where do I live?", session=session)
            return r1, r2, r3

        r1, r2, r3 = asyncio.run(go())
        assert r1.final_output == "Noted, Berlin." and r3.final_output == "You live in Berlin."
        assert r2.final_output == "I can't keep passwords."
        chats = server.chat_requests()
        # the guard's REJECT reached the model as the tool's result
        tool_results = [m["content"] for m in chats[3]["messages"] if m["role"] == "tool"]
        assert tool_results and "not remembered" in tool_results[-1] and "forbidden_key" in tool_results[-1]
        recalled = [m["content"] for m in chats[5]["messages"] if m["role"] == "tool"][-1]
        assert '"city"' in recalled and "Berlin" in recalled
        # the session gave the model the earlier turns
        assert any("I live in Berlin" in str(m.get("content")) for m in chats[4]["messages"])
    assert [r.value for r in memory.recall("acme", "alice", keys=["city"])] == ["Berlin"]
    assert memory.recall("acme", "alice", keys=["password"]) == []
    items = asyncio.run(session.get_items())
    assert sum(1 for i in items if i.get("role") == "user") == 3
    closed = session.close()
    assert closed.episode is not None and closed.episode.kind.value == "episode"
    assert asyncio.run(session.get_items()) == []
    # extraction ran over the archived conversation: the stated preference became a memory
    assert "reply_length" in {r.key for r in memory.recall("acme", "alice", k=20)}
    assert [e.id for e in memory.episodes("acme", "alice")] == [closed.episode.id]
