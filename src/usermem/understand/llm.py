"""An OpenAI-compatible chat client for structured output (OpenAI, DeepSeek, Qwen, Ollama, vLLM, llama.cpp).

One method matters: `structured(...)` sends a system and a user message, asks for JSON that
follows a JSON schema, validates the reply with pydantic and returns the model — or None.
It never raises to the caller: timeouts, HTTP errors, malformed JSON and replies that fail
validation are logged and counted, retried within the task's time budget, and end in None so
the caller falls back to its deterministic path.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from usermem.config import Settings

log = logging.getLogger("usermem.understand")

M = TypeVar("M", bound=BaseModel)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


@dataclass
class LLMStats:
    """Counters for evaluations and operators: how often the model answered, and why it did not."""

    calls: int = 0
    ok: int = 0
    timeouts: int = 0
    http_errors: int = 0
    invalid: int = 0
    fallbacks: int = 0
    last_error: str | None = None
    latencies_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "ok": self.ok, "timeouts": self.timeouts, "http_errors": self.http_errors,
                "invalid": self.invalid, "fallbacks": self.fallbacks, "last_error": self.last_error}


class LLMClient:
    """Structured chat completions through the official `openai` SDK.

    `retries` extra attempts are made after an error or an invalid reply, but never past the
    task's timeout: the deadline covers all attempts together.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, retries: int = 1) -> None:
        from openai import OpenAI  # imported here so the engine runs without the SDK loaded

        self.model = model
        self.base_url = base_url
        self.retries = retries
        self.stats = LLMStats()
        # The SDK's own retries are off: this class owns the retry budget and the deadline.
        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0)
        self._json_schema_supported = True

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient | None:
        if not settings.llm_base_url or not settings.llm_model:
            return None
        return cls(settings.llm_base_url, settings.llm_model, settings.llm_api_key, retries=settings.llm_retries)

    def close(self) -> None:
        self._client.close()

    def structured(self, task: str, system: str, user: str, schema: type[M], json_schema: dict[str, Any], *,
                   timeout: float) -> M | None:
        """The validated reply, or None after logging why (the caller then uses its deterministic path)."""
        import openai

        deadline = time.monotonic() + timeout
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        for attempt in range(self.retries + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0.01:
                break
            self.stats.calls += 1
            started = time.monotonic()
            try:
                response = self._client.chat.completions.create(  # type: ignore[call-overload]
                    model=self.model, messages=messages,
                    temperature=0, response_format=self._response_format(task, json_schema),
                    timeout=remaining)
                content = response.choices[0].message.content if response.choices else None
            except openai.APITimeoutError:
                self._fail("timeouts", f"{task}: no reply within {timeout:.1f}s")
                break  # the budget is spent; another attempt cannot finish in time
            except openai.BadRequestError as exc:
                if self._json_schema_supported and "response_format" in str(exc):
                    # Servers without JSON-schema output still honour json_object; ask again in that mode.
                    self._json_schema_supported = False
                    self._fail("http_errors", f"{task}: server refused json_schema, using json_object")
                    continue
                self._fail("http_errors", f"{task}: {type(exc).__name__}: {_short(exc)}")
                continue
            except openai.OpenAIError as exc:
                self._fail("http_errors", f"{task}: {type(exc).__name__}: {_short(exc)}")
                continue
            self.stats.latencies_s.append(time.monotonic() - started)
            parsed = self._parse(task, content, schema)
            if parsed is not None:
                self.stats.ok += 1
                return parsed
            log.debug("%s: attempt %d of %d gave an invalid reply", task, attempt + 1, self.retries + 1)
        self.stats.fallbacks += 1
        log.warning("%s: falling back to the deterministic path (%s)", task, self.stats.last_error)
        return None

    # -- helpers -------------------------------------------------------------------------------------

    def _response_format(self, task: str, json_schema: dict[str, Any]) -> dict[str, Any]:
        if self._json_schema_supported:
            return {"type": "json_schema", "json_schema": {"name": task, "schema": json_schema, "strict": True}}
        return {"type": "json_object"}

    def _parse(self, task: str, content: str | None, schema: type[M]) -> M | None:
        if not content:
            self._fail("invalid", f"{task}: empty reply")
            return None
        text = content.strip()
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            self._fail("invalid", f"{task}: reply is not JSON ({exc.msg} at {exc.pos})")
            return None
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            self._fail("invalid", f"{task}: reply does not match the schema ({exc.error_count()} errors: "
                                  f"{_short(exc.errors()[0].get('msg', ''))})")
            return None

    def _fail(self, counter: str, message: str) -> None:
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        self.stats.last_error = message
        log.warning("llm %s", message)


def _short(x: object, n: int = 160) -> str:
    s = str(x).replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"
