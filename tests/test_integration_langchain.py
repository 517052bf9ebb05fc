"""LangChain tools and retriever on usermem, through langchain-core's own invoke paths."""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolCall
from langchain_core.retrievers import BaseRetriever
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ValidationError as PydanticValidationError

from apihelp import T0, fast_memory
from usermem.integrations.langchain import UsermemRetriever, memory_tools
from usermem.model import Kind


@pytest.fixture
def memory():
    m = fast_memory()
    m.write("acme", "alice", "preference", "drink", "green tea in the morning", source="user_confirmed", now=T0)
    m.write("acme", "alice", "fact", "city", "Berlin", source="user_confirmed", now=T0)
    m.write("acme", "alice", "fact", "pet", "a cat named Miso", source="user_confirmed", now=T0)
    m.write("acme", "bob", "preference", "drink", "black coffee", source="user_confirmed", now=T0)
    yield m
    m.close()


def test_retriever_is_hybrid_recall_for_one_user(memory):
    r = UsermemRetriever(memory=memory, tenant="acme", user_id="alice", k=2, clock=lambda: T0 + 10)
    assert isinstance(r, BaseRetriever)
    docs = r.invoke("what tea does she drink")
    assert docs[0].page_content == "drink: green tea in the morning" and docs[0].metadata["kind"] == "preference"
    assert len(docs) <= 2 and all("coffee" not in d.page_content for d in docs)
    only_facts = UsermemRetriever(memory=memory, tenant="acme", user_id="alice", k=5, kinds=[Kind.FACT],
                                  clock=lambda: T0 + 10)
    assert {d.metadata["key"] for d in only_facts.invoke("anything")} == {"city", "pet"}


def test_tools_schemas_guards_and_errors(memory):
    tools = {t.name: t for t in memory_tools(memory, tenant="acme", user_id="alice", clock=lambda: T0 + 10)}
    assert set(tools) == {"remember", "recall", "forget"}
    schema = convert_to_openai_tool(tools["remember"])["function"]["parameters"]
    assert schema["properties"]["key"]["pattern"] == "^[a-z0-9_.\\-]{1,64}$"
    assert "description" in schema["properties"]["value"]
    out = tools["remember"].invoke(ToolCall(name="remember", args={"key": "tone", "value": "warm",
                                                                   "kind": "preference"}, id="1", type="tool_call"))
    assert out.content == 'ADD: tone = "warm"'
    assert tools["remember"].invoke({"key": "password", "value": "hunter2"}).startswith(
        "not remembered: forbidden_key")
    with pytest.raises(PydanticValidationError):
        tools["remember"].invoke({"key": "Bad Key", "value": "x"})
    recalled = tools["recall"].invoke({"query": "tone", "k": 3})
    assert '"tone"' in recalled and "hunter2" not in recalled
    assert tools["forget"].invoke({"key": "tone"}) == "forgot tone (1 version(s))"
    assert [r.key for r in memory.recall("acme", "alice", keys=["tone"], now=T0 + 20)] == []
    # a usermem error reaches the model as a tool error with the reason (handle_tool_error)
    bad = memory_tools(memory, tenant="acme", user_id="\x00", clock=lambda: T0)
    msg = bad[1].invoke(ToolCall(name="recall", args={"query": "x"}, id="2", type="tool_call"))
    assert msg.status == "error" and "validation_error" in msg.content
