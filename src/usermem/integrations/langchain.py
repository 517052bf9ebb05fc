"""LangChain on usermem: memory tools and a retriever (`pip install usermem[langchain]`).

    from usermem.integrations.langchain import UsermemRetriever, memory_tools

    retriever = UsermemRetriever(memory=memory, tenant="acme", user_id="alice", k=5)
    docs = retriever.invoke("what does the user drink?")   # usermem's hybrid recall as Documents
    tools = memory_tools(memory, tenant="acme", user_id="alice")  # remember / recall / forget

The tools call `Memory.write` / `recall_scored` / `forget`, so the PII and injection guards, source
priority and audit apply; a refused write comes back to the model as the decision and its reason, and a
usermem error as a tool error with the reason (`handle_tool_error`). Argument schemas state the key pattern
and the kind enum.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as exc:  # pragma: no cover - the optional extra is not installed
    raise ImportError(f"usermem.integrations.langchain needs the langchain extra: pip install 'usermem[langchain]' ({exc})") from exc

from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.model import Kind, ScoredMemory
from usermem.policy.validate import KEY_PATTERN


class UsermemRetriever(BaseRetriever):
    """One user's memories, ranked for the query by usermem's hybrid recall, as LangChain `Document`s
    (`page_content` "key: value", metadata key, kind, source, score, weight, id)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    tenant: str
    user_id: str
    k: int = 5
    kinds: list[Kind] | None = None
    mark_used: bool = True
    actor: str = "langchain"
    clock: Callable[[], float] | None = None  # judge at this clock instead of the wall clock (tests, replays)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        kinds = [k.value for k in self.kinds] if self.kinds else None
        items = self.memory.recall_scored(self.tenant, self.user_id, self.k, query=query or None, kinds=kinds,
                                          mark_used=self.mark_used, actor=self.actor,
                                          now=self.clock() if self.clock else None)
        return [_document(s) for s in items]


def _document(s: ScoredMemory) -> Document:
    r = s.memory
    value = r.value if isinstance(r.value, str) else json.dumps(r.value, ensure_ascii=False)
    return Document(page_content=f"{r.key}: {value}", id=r.id,
                    metadata={"key": r.key, "kind": r.kind.value, "source": r.source.value, "score": s.score,
                              "weight": s.weight, "needs_confirmation": s.needs_confirmation,
                              "created_at": r.created_at})


class RememberArgs(BaseModel):
    key: str = Field(description="The attribute, one per memory line, e.g. 'city' or 'reply_length'.",
                     pattern=KEY_PATTERN.pattern, max_length=64)
    value: str = Field(description="The value, in the user's words.")
    kind: Kind = Field(Kind.FACT, description="fact | preference | situation | episode | context")


class RecallArgs(BaseModel):
    query: str = Field("", description="What you need to know about the user (words or a question).")
    k: int = Field(5, ge=1, le=50, description="How many memories at most.")


class ForgetArgs(BaseModel):
    key: str = Field(description="The attribute to forget (every version).", pattern=KEY_PATTERN.pattern,
                     max_length=64)


def memory_tools(memory: Memory, *, tenant: str, user_id: str, actor: str = "langchain",
                 clock: Callable[[], float] | None = None) -> list[BaseTool]:
    """`remember`, `recall` and `forget` as LangChain tools acting for one user."""
    now = clock or time.time

    def remember(key: str, value: str, kind: Kind = Kind.FACT) -> str:
        r = _guarded(lambda: memory.write(tenant, user_id, Kind(kind).value, key, value, now=now(), actor=actor))
        if r.memory is None:
            return f"not remembered: {r.reason.value if r.reason else 'rejected'}: {r.detail or ''}".strip()
        return f"{r.op.value}: {r.memory.key} = {json.dumps(r.memory.value, ensure_ascii=False)}"

    def recall(query: str = "", k: int = 5) -> str:
        items = _guarded(lambda: memory.recall_scored(tenant, user_id, k, query=query or None, now=now(),
                                                      mark_used=True, actor=actor))
        return json.dumps([{"key": s.memory.key, "kind": s.memory.kind.value, "value": s.memory.value,
                            "needs_confirmation": s.needs_confirmation} for s in items], ensure_ascii=False)

    def forget(key: str) -> str:
        n = _guarded(lambda: memory.forget(tenant, user_id, key, now=now(), actor=actor))
        return f"forgot {key} ({n} version(s))"

    return [
        StructuredTool.from_function(remember, name="remember", args_schema=RememberArgs, handle_tool_error=True,
                                     description="Remember one stable attribute of the user (a fact or "
                                                 "preference they stated). Secrets are refused."),
        StructuredTool.from_function(recall, name="recall", args_schema=RecallArgs, handle_tool_error=True,
                                     description="Recall what is known about the user, most relevant first."),
        StructuredTool.from_function(forget, name="forget", args_schema=ForgetArgs, handle_tool_error=True,
                                     description="Forget one attribute of the user, when they ask you to."),
    ]


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UsermemError as exc:
        field = getattr(exc, "field", None)
        raise ToolException(f"{exc.code}: {exc}" + (f" (argument: {field})" if field else "")) from exc
