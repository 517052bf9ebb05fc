"""Adapters for the frameworks agents are built on (optional extras; each imports its framework lazily).

- `usermem.integrations.langgraph.UsermemStore` — a LangGraph `BaseStore` (`pip install usermem[langgraph]`)
- `usermem.integrations.anthropic.UsermemMemoryTool` — the Claude memory tool's backend (`usermem[anthropic]`)
- `usermem.integrations.openai_agents.UsermemSession` and memory tools (`usermem[openai-agents]`)
- `usermem.integrations.langchain` — tools and a retriever (`usermem[langchain]`)

`pip install usermem[integrations]` installs all four frameworks. Every adapter calls the public `Memory`
API, so writes go through the same guards, source priority, audit and erasure as any other interface.
"""
