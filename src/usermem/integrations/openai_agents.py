"""OpenAI Agents SDK on usermem: a `Session` backed by a usermem session, and memory function tools.

    from agents import Agent, Runner
    from usermem.integrations.openai_agents import UsermemSession, memory_tools

    session = UsermemSession(memory, tenant="acme", user_id="alice")
    agent = Agent(name="assistant", tools=memory_tools(memory, tenant="acme", user_id="alice"))
    await Runner.run(agent, "I prefer short answers", session=session)
    session.close()  # archived as an episode; extraction writes what the conversation taught

`UsermemSession` implements the SDK's `Session` protocol (`get_items`, `add_items`, `pop_item`,
`clear_session`). It opens a usermem session (`Memory.open_session`) for the user, or resumes one by id.
Items are kept in the tenant's document store, owned by the user (so `forget_user` erases them), with
personal data redacted before they are stored (`usermem.privacy.redact_json`, as `add_messages` does) —
the history the agent reads back is the redacted one. Each `add_items` counts as session activity
(`touch_session`). `close()` archives the conversation's messages as the session's episode
(`Memory.close_session`); the close hook runs extraction over them, so stable facts and preferences become
memories (source `extracted`, through the write guards). The stored items are deleted at close.

`memory_tools(...)` gives the agent `remember`, `recall` and `forget` function tools over the same user;
they call `Memory.write` / `recall_scored` / `forget`, so the same guards apply (a secret is a REJECT the
model reads, not a stored value).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, Literal

try:
    from agents import FunctionTool, function_tool
except ImportError as exc:  # pragma: no cover - the optional extra is not installed
    raise ImportError(f"usermem.integrations.openai_agents needs the openai-agents extra: pip install 'usermem[openai-agents]' ({exc})") from exc

from usermem.engine.memory import Memory
from usermem.engine.sessions import SessionClosed
from usermem.errors import ConflictError, UsermemError, ValidationError
from usermem.privacy import redact_json

ITEMS_NS = "openai_agents_items"
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
KindName = Literal["fact", "preference", "situation", "episode", "context"]


class UsermemSession:
    """The Agents SDK `Session` protocol over a usermem session (see the module docstring)."""

    session_settings: Any = None

    def __init__(self, memory: Memory, *, tenant: str, user_id: str, session_id: str | None = None,
                 client_id: str = "openai-agents", actor: str = "openai-agents",
                 clock: Callable[[], float] | None = None) -> None:
        self.memory = memory
        self.tenant = tenant
        self.user_id = user_id
        self.actor = actor
        self._clock = clock or time.time
        if session_id is None:
            session_id = memory.open_session(tenant, user_id, client_id, now=self._clock())
        else:
            existing = memory.get_session(session_id, tenant=tenant)
            if existing.user_id != user_id:
                raise ValidationError(f"session {session_id!r} belongs to another user", field="session_id")
        self.session_id: str = session_id

    # -- the Session protocol ------------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await asyncio.to_thread(self._items)
        values = [v for _, v in items]
        return values if limit is None else values[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> Any | None:
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self._clear)

    # -- closing -------------------------------------------------------------------------------------

    def close(self) -> SessionClosed:
        """Archive the conversation as the session's episode (extraction runs); the stored items go."""
        transcript = [m for _, item in self._items() if (m := _as_message(item)) is not None]
        closed = self.memory.close_session(self.session_id, transcript or None, tenant=self.tenant,
                                           now=self._clock(), actor=self.actor)
        self._clear()
        return closed

    async def aclose(self) -> SessionClosed:
        return await asyncio.to_thread(self.close)

    # -- storage -------------------------------------------------------------------------------------

    def _items(self) -> list[tuple[str, Any]]:
        prefix = f"{self.session_id}:"
        rows = self.memory.store.list_docs(self.tenant, ITEMS_NS, user_id=self.user_id, limit=100_000)
        return [(k, d["item"]) for k, d in rows if k.startswith(prefix)]

    def _add(self, items: list[Any]) -> None:
        now = self._clock()
        if self.memory.get_session(self.session_id, tenant=self.tenant).status != "open":
            raise ConflictError(f"session {self.session_id!r} is closed; open a new UsermemSession")
        self.memory.touch_session(self.session_id, tenant=self.tenant, now=now)
        existing = self._items()
        seq = int(existing[-1][0].rsplit(":", 1)[1]) + 1 if existing else 0
        for i, item in enumerate(items):
            clean = redact_json(json.loads(json.dumps(item, default=str)))
            self.memory.store.put_doc(self.tenant, ITEMS_NS, f"{self.session_id}:{seq + i:09d}", {"item": clean},
                                      now=now, user_id=self.user_id)

    def _pop(self) -> Any | None:
        items = self._items()
        if not items:
            return None
        key, item = items[-1]
        self.memory.store.delete_doc(self.tenant, ITEMS_NS, key)
        return item

    def _clear(self) -> None:
        for key, _ in self._items():
            self.memory.store.delete_doc(self.tenant, ITEMS_NS, key)


def _as_message(item: Any) -> dict[str, str] | None:
    """A {role, content} message from a Responses input item (text parts only), or None (tool calls...)."""
    if not isinstance(item, dict) or item.get("role") not in MESSAGE_ROLES:
        return None
    content = item.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content
                            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text"))
    if not isinstance(content, str) or not content.strip():
        return None
    return {"role": str(item["role"]), "content": content}


def memory_tools(memory: Memory, *, tenant: str, user_id: str, actor: str = "openai-agents",
                 clock: Callable[[], float] | None = None) -> list[FunctionTool]:
    """`remember`, `recall` and `forget` function tools acting for one user (see the module docstring)."""
    now = clock or time.time

    @function_tool
    def remember(key: str, value: str, kind: KindName) -> str:
        """Remember one stable attribute of the user (a fact or preference they stated).

        Args:
            key: The attribute, [a-z0-9_.-]{1,64}, e.g. 'city' or 'reply_length'.
            value: The value, in the user's words.
            kind: fact, preference, situation, episode or context.
        """
        r = _guarded(lambda: memory.write(tenant, user_id, kind, key, value, now=now(), actor=actor))
        if isinstance(r, str):
            return r
        if r.memory is None:
            return f"not remembered: {r.reason.value if r.reason else 'rejected'}: {r.detail or ''}".strip()
        return f"{r.op.value}: {r.memory.key} = {json.dumps(r.memory.value, ensure_ascii=False)}"

    @function_tool
    def recall(query: str, k: int) -> str:
        """Recall what is known about the user that is relevant to a query, best first.

        Args:
            query: What you need to know (words or a question).
            k: How many memories at most (1-50).
        """
        items = _guarded(lambda: memory.recall_scored(tenant, user_id, max(1, min(int(k), 50)), query=query or None,
                                                      now=now(), mark_used=True, actor=actor))
        if isinstance(items, str):
            return items
        return json.dumps([{"key": s.memory.key, "kind": s.memory.kind.value, "value": s.memory.value,
                            "needs_confirmation": s.needs_confirmation} for s in items], ensure_ascii=False)

    @function_tool
    def forget(key: str) -> str:
        """Forget one attribute of the user (every version), when the user asks you to.

        Args:
            key: The attribute to forget, e.g. 'city'.
        """
        n = _guarded(lambda: memory.forget(tenant, user_id, key, now=now(), actor=actor))
        return n if isinstance(n, str) else f"forgot {key} ({n} version(s))"

    return [remember, recall, forget]


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UsermemError as exc:
        field = getattr(exc, "field", None)
        return f"error: {exc.code}: {exc}" + (f" (argument: {field})" if field else "")
