"""ASGI middleware that redacts PII in response bodies — the output-layer filter of seed 004 §3.3.

Mount it in front of whatever produces model output (an agent gateway, a chat endpoint):

    from usermem.interfaces.redact_middleware import RedactMiddleware
    app = RedactMiddleware(app)                         # Starlette / FastAPI: app.add_middleware(RedactMiddleware)

- JSON bodies are parsed and every string (and integer) is redacted, then re-encoded; redacting the raw
  text would miss PII written with \\uXXXX escapes.
- text/* bodies are redacted as text. Server-sent events (text/event-stream) and other streamed text are
  redacted line by line as lines complete, so a number split across two chunks is still caught.
- Other content types (images, octet streams) pass through untouched.
- The inner app is asked not to compress (Accept-Encoding is removed); a gzip body that arrives anyway is
  decoded and filtered; any other encoding fails closed with 502 rather than leak unfiltered bytes.
- Bodies larger than `max_body_bytes` (non-streamed) fail closed with 502 as well.

No values are logged. `usermem.privacy.redact` is the same filter as a library call.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from usermem.policy.pii import DEFAULT_PLACEHOLDER, PIIKind
from usermem.privacy import _kinds, redact, redact_json

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_FAIL_BODY = b'{"error":"response_not_filterable","detail":"the response could not be checked for personal data"}'


class RedactMiddleware:
    def __init__(self, app: ASGIApp, placeholder: str = DEFAULT_PLACEHOLDER,
                 kinds: Iterable[PIIKind | str] | None = None, max_body_bytes: int = 8 * 1024 * 1024,
                 paths: Iterable[str] | None = None) -> None:
        """`paths`: only responses to requests whose path starts with one of these are filtered (default: all)."""
        self.app = app
        self.placeholder = placeholder
        self.kinds = _kinds(kinds)
        self.max_body_bytes = max_body_bytes
        self.paths = tuple(paths) if paths is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or (self.paths is not None and not str(scope.get("path", "")).startswith(self.paths)):
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"accept-encoding"]
        await self.app(scope, receive, _Filter(self, send))


class _Filter:
    """Per-response state: decides on the start message, then buffers or streams the body."""

    def __init__(self, mw: RedactMiddleware, send: Send) -> None:
        self.mw = mw
        self.send = send
        self.start: Message | None = None
        self.mode = "pass"  # pass | json | text | stream | fail
        self.encoding = ""
        self.charset = "utf-8"
        self.buffer = bytearray()

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self._choose(message)
            if self.mode in ("pass", "stream"):
                if self.mode == "stream":
                    message = dict(message)
                    message["headers"] = _without(message.get("headers", []), b"content-length")
                await self.send(message)
            else:
                self.start = message
            return
        if kind != "http.response.body":
            await self.send(message)
            return
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if self.mode == "pass":
            await self.send(message)
        elif self.mode == "stream":
            await self._stream(body, more)
        else:
            self.buffer += body
            if len(self.buffer) > self.mw.max_body_bytes:
                self.mode = "fail"
            if not more:
                await self._finish()

    def _choose(self, start: Message) -> None:
        headers = {k.lower(): v for k, v in start.get("headers", [])}
        ctype = headers.get(b"content-type", b"").decode("latin-1").lower()
        self.encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").lower().strip()
        if "charset=" in ctype:
            self.charset = ctype.split("charset=", 1)[1].split(";", 1)[0].strip() or "utf-8"
        is_json = "json" in ctype
        is_text = ctype.startswith("text/") or "xml" in ctype or "javascript" in ctype
        if not (is_json or is_text):
            self.mode = "pass"
        elif self.encoding not in ("identity", "", "gzip"):
            self.mode = "fail"
        elif ctype.startswith("text/event-stream") or (is_text and self.encoding in ("identity", "")
                                                        and b"content-length" not in headers):
            self.mode = "stream" if self.encoding in ("identity", "") else "fail"
        else:
            self.mode = "json" if is_json else "text"

    async def _stream(self, body: bytes, more: bool) -> None:
        self.buffer += body
        cut = self.buffer.rfind(b"\n") + 1 if more else len(self.buffer)
        if more and len(self.buffer) > self.mw.max_body_bytes:
            cut = len(self.buffer)  # one enormous line: filter what we have rather than grow without bound
        chunk, self.buffer = bytes(self.buffer[:cut]), bytearray(self.buffer[cut:])
        out = self._redact_text(chunk) if chunk else b""
        if out or not more:
            await self.send({"type": "http.response.body", "body": out, "more_body": more})

    async def _finish(self) -> None:
        assert self.start is not None
        body = bytes(self.buffer)
        out: bytes | None = None
        if self.mode != "fail":
            try:
                if self.encoding == "gzip":
                    body = gzip.decompress(body)
                out = self._redact_json(body) if self.mode == "json" else self._redact_text(body)
            except (OSError, EOFError, UnicodeDecodeError):
                out = None
        headers = _without(self.start.get("headers", []), b"content-length", b"content-encoding")
        status = self.start.get("status", 200)
        if out is None:
            status, out = 502, _FAIL_BODY
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]
            headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(out)).encode()))
        await self.send({**self.start, "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": out, "more_body": False})

    def _redact_text(self, body: bytes) -> bytes:
        text = body.decode(self.charset)
        return redact(text, self.mw.placeholder, self.mw.kinds).encode(self.charset, errors="replace")

    def _redact_json(self, body: bytes) -> bytes:
        try:
            value = json.loads(body.decode(self.charset))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._redact_text(body)  # not really JSON: still filter it as text
        return json.dumps(redact_json(value, self.mw.placeholder, self.mw.kinds), ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")


def _without(headers: Iterable[tuple[bytes, bytes]], *names: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() not in names]
