"""A LangGraph agent with long-term memory in usermem (`usermem.integrations.langgraph.UsermemStore`).

Each turn: `recall` searches the user's memories for the message (usermem's hybrid recall), `respond` asks an
OpenAI-compatible model with what was recalled, `remember` keeps the user's statement for later turns (the
store's write goes through usermem's guards: a card number or password is refused, not stored).

    pip install 'usermem[langgraph]'
    OPENAI_BASE_URL=... OPENAI_API_KEY=... python examples/langgraph_agent.py alice "I love green tea"
    python examples/langgraph_agent.py alice "what should I drink?"

`tests/test_integration_langgraph.py` runs it against the scripted local model server (no network).
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from openai import OpenAI

from usermem import Memory
from usermem.errors import ValidationError
from usermem.integrations.langgraph import UsermemStore


class State(TypedDict, total=False):
    user_id: str
    message: str
    memories: list[str]
    reply: str


def build_agent(store: BaseStore, llm: OpenAI, model: str) -> Any:
    def recall(state: State) -> State:
        hits = store.search((state["user_id"], "notes"), query=state["message"], limit=5)
        return {"memories": [str(h.value.get("text", "")) for h in hits]}

    def respond(state: State) -> State:
        known = "\n".join(f"- {m}" for m in state.get("memories", [])) or "(nothing yet)"
        out = llm.chat.completions.create(model=model, messages=[
            {"role": "system", "content": f"You are a helpful assistant. What you know about the user:\n{known}"},
            {"role": "user", "content": state["message"]}])
        return {"reply": out.choices[0].message.content or ""}

    def remember(state: State) -> State:
        # refused by usermem's guards (secrets, personal identifiers): not kept
        with contextlib.suppress(ValidationError):
            store.put((state["user_id"], "notes"), uuid.uuid4().hex, {"text": state["message"]})
        return {}

    graph = StateGraph(State)
    graph.add_node("recall", recall)
    graph.add_node("respond", respond)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "respond")
    graph.add_edge("respond", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


def main(argv: list[str]) -> None:
    user_id, message = argv[1], argv[2]
    memory = Memory(os.environ.get("USERMEM_STORE", "sqlite:///data/usermem.db"))
    agent = build_agent(UsermemStore(memory, tenant="local"), OpenAI(), os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    print(agent.invoke({"user_id": user_id, "message": message})["reply"])
    memory.close()


if __name__ == "__main__":
    main(sys.argv)
