"""`usermem.Client` and `usermem.AsyncClient`: the remote twins of `Memory`.

Same methods, same arguments, same result types (`WriteResult`, `MemoryRecord`, `ScoredMemory`,
`AuditEvent`, `Session`, `Grant`, `FieldContract`, `Assembly`...) — switch between embedded and remote by
changing one constructor:

    m = usermem.Memory("sqlite:///data/usermem.db")          # embedded
    m = usermem.Client("http://127.0.0.1:8000", "umk_...")   # remote (or USERMEM_URL / USERMEM_API_KEY)
    async with usermem.AsyncClient() as am: await am.recall(None, "alice")

The API key decides the tenant. The `tenant` argument is kept for compatibility with `Memory` calls
(`m.write("local", "alice", ...)`): pass the key's tenant (sent as `X-Usermem-Tenant`, a mismatch is
`PermissionDenied` `tenant_mismatch`) or None to use the key's tenant. Errors come back as the same
`usermem.errors` classes the embedded engine raises. 429 and 503 answers are retried with backoff
(Retry-After honoured, bounded: `retries`, `max_wait`).

Requests are built and answers decoded once, in `usermem.interfaces.client_calls`; the methods below
only send them (the parity test checks both classes against the operation catalogue).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from usermem import errors as E
from usermem.engine.consent import ConsentRequest
from usermem.engine.grants import Grant
from usermem.engine.lifecycle import ChangeSetRevert
from usermem.engine.sessions import Session, SessionClosed, Transcript
from usermem.engine.webhooks import Delivery, Webhook, WebhookCreated
from usermem.interfaces import client_calls as C
from usermem.interfaces.client_calls import Call, RateLimited, RemoteError, RetryPolicy
from usermem.model import (
    AuditEvent,
    Candidate,
    Kind,
    MemoryRecord,
    Recalled,
    ScoredMemory,
    UserPage,
    Withheld,
    WriteRequest,
    WriteResult,
)
from usermem.policy.contracts import FieldContract, Sensitivity

if TYPE_CHECKING:
    from usermem.understand.assemble import Assembly
    from usermem.understand.usermodel import UserModel

__all__ = ["AsyncClient", "Client", "RateLimited", "RemoteAssembly", "RemoteError"]

T = TypeVar("T")
URL_ENV = "USERMEM_URL"
KEY_ENV = "USERMEM_API_KEY"


def _args(scope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in scope.items() if k != "self"}


def _endpoint(url: str | None, api_key: str | None) -> tuple[str, str]:
    url = url or os.environ.get(URL_ENV)
    api_key = api_key or os.environ.get(KEY_ENV)
    if not url:
        raise E.ConfigError(f"no server URL: pass url or set {URL_ENV}")
    if not api_key:
        raise E.ConfigError(f"no API key: pass api_key or set {KEY_ENV}")
    return url.rstrip("/"), api_key


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": "usermem-client"}


class Client:
    """HTTP client with the shape of `Memory`. Thread-safe (one pooled `httpx.Client`).

    `url` / `api_key` default to `USERMEM_URL` / `USERMEM_API_KEY`. `retries`, `backoff`, `max_wait`:
    how 429/503 answers are retried; `sleep` is how the client waits (tests pass a recorder).
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 http: httpx.Client | None = None, retries: int = 3, backoff: float = 0.5, max_wait: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url, api_key = _endpoint(url, api_key)
        self.retry = RetryPolicy(retries, backoff, max_wait)
        self._sleep = sleep
        if http is None:
            self._http = httpx.Client(base_url=self.url, headers=_headers(api_key), timeout=timeout)
        else:
            self._http = http
            self._http.headers.update(_headers(api_key))
        self._owns_http = http is None
        self._tenant: str | None = None

    # -- plumbing ------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tenant(self) -> str:
        """The API key's tenant (asked once from the server)."""
        if self._tenant is None:
            self._tenant = str(self.whoami()["tenant"])
        return self._tenant

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                resp = self._http.request(call.method, call.path, params=call.params, json=call.json,
                                          headers=call.headers)
            except httpx.TransportError as exc:
                raise C.transport_error(exc, self.url) from exc
            wait = self.retry.delay(resp, attempt)
            if wait is None:
                return C.finish(call, resp, self.url)
            attempt += 1
            self._sleep(wait)

    # -- operations (one per catalogue entry; see usermem.interfaces.catalog) --------------------------

    def write(self, tenant: str | None, user_id: str, kind: str, key: str, value: Any, *, source: str = "extracted",
              importance: float | None = None, confidence: float | None = None, now: float | None = None,
              session_id: str | None = None, client_id: str | None = None, event_at: float | None = None,
              ttl_seconds: float | None = None, change_set_id: str | None = None,
              actor: str | None = None, canonical: Any = None) -> WriteResult:
        return self._run(C.write(**_args(locals())))

    def write_many(self, tenant: str | None, user_id: str, writes: Sequence[WriteRequest | dict[str, Any]], *,
                   now: float | None = None, change_set_id: str | None = None,
                   actor: str | None = None) -> list[WriteResult]:
        return self._run(C.write_many(**_args(locals())))

    def recall(self, tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
               kinds: Iterable[str | Kind] | None = None, query: str | None = None,
               keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
               event_until: float | None = None, actor: str | None = None,
               domain: str | None = None, purpose: str | None = None) -> Recalled[MemoryRecord]:
        return self._run(C.recall(**_args(locals())))

    def recall_scored(self, tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
                      kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                      keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
                      event_until: float | None = None, actor: str | None = None,
                      domain: str | None = None,
                      purpose: str | None = None) -> Recalled[ScoredMemory]:
        return self._run(C.recall_scored(**_args(locals())))

    def get(self, tenant: str | None, memory_id: str, *, actor: str | None = None,
            now: float | None = None) -> MemoryRecord | None:
        return self._run(C.get(**_args(locals())))

    def history(self, tenant: str | None, user_id: str, key: str, *, actor: str | None = None,
                now: float | None = None) -> list[MemoryRecord]:
        return self._run(C.history(**_args(locals())))

    def forget(self, tenant: str | None, user_id: str, key: str, *, now: float | None = None,
               actor: str | None = None) -> int:
        return self._run(C.forget(**_args(locals())))

    def forget_range(self, tenant: str | None, user_id: str, *, since: float | None = None,
                     until: float | None = None, now: float | None = None, actor: str | None = None) -> int:
        return self._run(C.forget_range(**_args(locals())))

    def forget_user(self, tenant: str | None, user_id: str, *, now: float | None = None,
                    actor: str | None = None) -> int:
        return self._run(C.forget_user(**_args(locals())))

    def confirm(self, tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
                actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        return self._run(C.confirm(**_args(locals())))

    def deny(self, tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        return self._run(C.deny(**_args(locals())))

    def revert(self, tenant: str | None, user_id: str, key: str, to_version: str | int | None = None, *,
               now: float | None = None, actor: str | None = None, source: str = "user_confirmed") -> WriteResult:
        return self._run(C.revert(**_args(locals())))

    def revert_change_set(self, tenant: str | None, change_set_id: str, *, now: float | None = None,
                          actor: str | None = None, source: str = "user_confirmed",
                          partial: bool = False) -> ChangeSetRevert:
        return self._run(C.revert_change_set(**_args(locals())))

    def federation_notices(self, tenant: str | None, user_id: str, *,
                           now: float | None = None) -> list[dict[str, Any]]:
        return self._run(C.federation_notices(**_args(locals())))

    def keep_local(self, tenant: str | None, user_id: str, notice_id: str, *, now: float | None = None,
                   actor: str | None = None) -> WriteResult:
        return self._run(C.keep_local(**_args(locals())))

    def open_session(self, tenant: str | None, user_id: str, client_id: str | None = None, *,
                     now: float | None = None, idle_seconds: float | None = None) -> str:
        return self._run(C.open_session(**_args(locals())))

    def close_session(self, session_id: str, transcript: Transcript | None = None, *, tenant: str | None = None,
                      now: float | None = None, actor: str | None = None) -> SessionClosed:
        return self._run(C.close_session(**_args(locals())))

    def touch_session(self, session_id: str, *, tenant: str | None = None, now: float | None = None) -> Session:
        return self._run(C.touch_session(**_args(locals())))

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Session:
        return self._run(C.get_session(**_args(locals())))

    def sessions(self, tenant: str | None, user_id: str, *, status: str | None = None,
                 now: float | None = None) -> list[Session]:
        return self._run(C.sessions(**_args(locals())))

    def session_context(self, session_id: str, *, tenant: str | None = None, k: int = 20, now: float | None = None,
                        mark_used: bool = True) -> list[ScoredMemory]:
        return self._run(C.session_context(**_args(locals())))

    def expire_idle_sessions(self, now: float | None = None, *, tenant: str | None = None) -> list[SessionClosed]:
        return self._run(C.expire_idle_sessions(**_args(locals())))

    def episodes(self, tenant: str | None, user_id: str, *, since: float | None = None, until: float | None = None,
                 limit: int = 10, now: float | None = None) -> list[MemoryRecord]:
        return self._run(C.episodes(**_args(locals())))

    def grant(self, tenant: str | None, user_id: str, fields_or_level: str | Sensitivity | Iterable[str],
              purpose: str, ttl: float = 30 * 60.0, *, actor: str | None = None, grantee: str | None = None,
              now: float | None = None) -> str:
        return self._run(C.grant(**_args(locals())))

    def revoke(self, tenant_or_grant_id: str, grant_id: str | None = None, *, actor: str | None = None,
               now: float | None = None) -> bool:
        return self._run(C.revoke(**_args(locals())))

    def grants(self, tenant: str | None, user_id: str | None = None, *, now: float | None = None,
               include_expired: bool = False) -> list[Grant]:
        return self._run(C.grants(**_args(locals())))

    def export(self, tenant: str | None, user_id: str, *, now: float | None = None,
               actor: str | None = None) -> dict[str, Any]:
        return self._run(C.export(**_args(locals())))

    def opt_in(self, tenant: str | None, user_id: str, fields: Iterable[str] | str | None = None,
               domain: str | None = None, *, request_id: str | None = None, actor: str | None = None,
               now: float | None = None) -> list[str]:
        return self._run(C.opt_in(**_args(locals())))

    def request_consent(self, tenant: str | None, user_id: str, fields: Iterable[str] | str, purpose: str,
                        ttl: float = 30 * 60.0, *, domain: str | None = None, session_id: str | None = None,
                        actor: str | None = None, now: float | None = None) -> ConsentRequest:
        return self._run(C.request_consent(**_args(locals())))

    def consent_requests(self, tenant: str | None, user_id: str, *, status: str | None = "pending",
                         now: float | None = None) -> list[ConsentRequest]:
        return self._run(C.consent_requests(**_args(locals())))

    def approve_consent(self, tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        return self._run(C.approve_consent(**_args(locals())))

    def decline_consent(self, tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        return self._run(C.decline_consent(**_args(locals())))

    def users(self, tenant: str | None, *, prefix: str | None = None, after: str | None = None,
              limit: int = 50) -> UserPage:
        return self._run(C.users(**_args(locals())))

    def opt_out(self, tenant: str | None, user_id: str, fields: Iterable[str] | str, domain: str, *,
                actor: str | None = None, now: float | None = None) -> int:
        return self._run(C.opt_out(**_args(locals())))

    def contracts_list(self, tenant: str | None) -> list[FieldContract]:
        return self._run(C.contracts_list(**_args(locals())))

    def contract(self, tenant: str | None, key: str) -> FieldContract:
        return self._run(C.contract(**_args(locals())))

    def contract_history(self, tenant: str | None, key: str) -> list[dict[str, Any]]:
        return self._run(C.contract_history(**_args(locals())))

    def set_contract(self, tenant: str | None, contract: FieldContract | dict[str, Any], *, actor: str | None = None,
                     now: float | None = None) -> FieldContract:
        return self._run(C.set_contract(**_args(locals())))

    def enable_field(self, tenant: str | None, key: str, *, actor: str | None = None,
                     now: float | None = None) -> FieldContract:
        return self._run(C.enable_field(**_args(locals())))

    def disable_field(self, tenant: str | None, key: str, *, actor: str | None = None,
                      now: float | None = None) -> FieldContract:
        return self._run(C.disable_field(**_args(locals())))

    def delete_contract(self, tenant: str | None, key: str, *, actor: str | None = None,
                        now: float | None = None) -> None:
        return self._run(C.delete_contract(**_args(locals())))

    def set_unknown_fields(self, tenant: str | None, policy: str, *, actor: str | None = None,
                           now: float | None = None) -> str:
        return self._run(C.set_unknown_fields(**_args(locals())))

    def plan(self, tenant: str | None, user_id: str, message: str) -> dict[str, Any]:
        return self._run(C.plan(**_args(locals())))

    def extract(self, messages: Any, *, tenant: str | None = None) -> list[Candidate]:
        return self._run(C.extract(**_args(locals())))

    def ingest(self, tenant: str | None, user_id: str, messages: Any, *, now: float | None = None,
               session_id: str | None = None, change_set_id: str | None = None,
               actor: str | None = None) -> list[WriteResult]:
        return self._run(C.ingest(**_args(locals())))

    def assemble(self, tenant: str | None, user_id: str, message: str, budget_tokens: int = 800, *,
                 now: float | None = None, session_id: str | None = None, actor: str | None = None,
                 purpose: str | None = None) -> Assembly:
        return self._run(C.assemble(**_args(locals())))

    def onboarding_questions(self, tenant: str | None, user_id: str, language: str | None = None, *,
                             now: float | None = None) -> list[dict[str, Any]]:
        return self._run(C.onboarding_questions(**_args(locals())))

    def set_onboarding_questions(self, tenant: str | None, questions: Sequence[Any], *,
                                 now: float | None = None) -> list[dict[str, Any]]:
        return self._run(C.set_onboarding_questions(**_args(locals())))

    def answer_onboarding(self, tenant: str | None, user_id: str, answers: dict[str, Any], *,
                          now: float | None = None, actor: str | None = None) -> list[WriteResult]:
        return self._run(C.answer_onboarding(**_args(locals())))

    def record_pushback(self, tenant: str | None, user_id: str, key: str, message: str = "", *, value: Any = None,
                        now: float | None = None) -> dict[str, Any]:
        return self._run(C.record_pushback(**_args(locals())))

    def pending_verifications(self, tenant: str | None, user_id: str) -> list[dict[str, Any]]:
        return self._run(C.pending_verifications(**_args(locals())))

    def accept_verification(self, tenant: str | None, user_id: str, verification_id: str, *, value: Any = None,
                            now: float | None = None, actor: str | None = None) -> WriteResult:
        return self._run(C.accept_verification(**_args(locals())))

    def reject_verification(self, tenant: str | None, user_id: str, verification_id: str, *,
                            now: float | None = None) -> bool:
        return self._run(C.reject_verification(**_args(locals())))

    # -- the user model (docs/usermodel.md) --

    def model(self, tenant: str | None, user_id: str, *, now: float | None = None, actor: str | None = None) -> UserModel:
        return self._run(C.model(**_args(locals())))

    def record_signal(self, tenant: str | None, user_id: str, key: str, value: Any, *, agree: bool = True, message: str = "",
                      now: float | None = None) -> dict[str, Any]:
        return self._run(C.record_signal(**_args(locals())))

    def inference_policy(self, tenant: str | None) -> dict[str, Any]:
        return self._run(C.inference_policy(**_args(locals())))

    def set_inference_policy(self, tenant: str | None, *, mode: str | None = None, threshold: int | None = None,
                             suppress_days: float | None = None, actor: str | None = None, now: float | None = None) -> dict[str, Any]:
        return self._run(C.set_inference_policy(**_args(locals())))

    def derivation_rules(self, tenant: str | None) -> list[dict[str, Any]]:
        return self._run(C.derivation_rules(**_args(locals())))

    def set_derivation_rule(self, tenant: str | None, rule: dict[str, Any], *, actor: str | None = None,
                            now: float | None = None) -> dict[str, Any]:
        return self._run(C.set_derivation_rule(**_args(locals())))

    def propose_procedure(self, tenant: str | None, text: str, *, user_id: str | None = None,
                          evidence: Sequence[str] = (), proposed_by: str = "api", now: float | None = None) -> dict[str, Any]:
        return self._run(C.propose_procedure(**_args(locals())))

    def procedures(self, tenant: str | None, *, user_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        return self._run(C.procedures(**_args(locals())))

    def review_procedure(self, tenant: str | None, procedure_id: str, decision: str, *,
                         evaluation: dict[str, Any] | None = None, text: str | None = None, actor: str | None = None,
                         now: float | None = None) -> dict[str, Any]:
        return self._run(C.review_procedure(**_args(locals())))

    def rollback_procedure(self, tenant: str | None, procedure_id: str, *, actor: str | None = None,
                           now: float | None = None) -> dict[str, Any]:
        return self._run(C.rollback_procedure(**_args(locals())))

    def suggest_procedures(self, tenant: str | None, user_id: str, *, now: float | None = None) -> list[dict[str, Any]]:
        return self._run(C.suggest_procedures(**_args(locals())))

    def suggest_derivation_rules(self, tenant: str | None, *, now: float | None = None) -> list[dict[str, Any]]:
        return self._run(C.suggest_derivation_rules(**_args(locals())))

    def create_webhook(self, tenant: str | None, url: str, events: Iterable[str] | None = None, *,
                       secret: str | None = None, actor: str | None = None, now: float | None = None) -> WebhookCreated:
        return self._run(C.create_webhook(**_args(locals())))

    def list_webhooks(self, tenant: str | None) -> list[Webhook]:
        return self._run(C.list_webhooks(**_args(locals())))

    def get_webhook(self, tenant: str | None, webhook_id: str) -> Webhook:
        return self._run(C.get_webhook(**_args(locals())))

    def delete_webhook(self, tenant: str | None, webhook_id: str, *, actor: str | None = None,
                       now: float | None = None) -> bool:
        return self._run(C.delete_webhook(**_args(locals())))

    def enable_webhook(self, tenant: str | None, webhook_id: str, *, actor: str | None = None,
                       now: float | None = None) -> Webhook:
        return self._run(C.enable_webhook(**_args(locals())))

    def ping_webhook(self, tenant: str | None, webhook_id: str, *, now: float | None = None) -> Delivery:
        return self._run(C.ping_webhook(**_args(locals())))

    def webhook_deliveries(self, tenant: str | None, webhook_id: str | None = None, *,
                           limit: int = 100) -> list[Delivery]:
        return self._run(C.webhook_deliveries(**_args(locals())))

    def audit(self, tenant: str | None, *, user_id: str | None = None, action: str | None = None,
              since: float | None = None, until: float | None = None, limit: int = 100,
              after_seq: int | None = None) -> list[AuditEvent]:
        return self._run(C.audit(**_args(locals())))

    def purge(self, now: float | None = None, *, retention_days: float | None = None) -> int:
        return self._run(C.purge(**_args(locals())))

    def whoami(self) -> dict[str, Any]:
        return self._run(C.whoami(**_args(locals())))

    def add_messages(self, session_id: str, messages: Sequence[Mapping[str, str]], *, tenant: str | None = None,
                     extract: bool = False, now: float | None = None, actor: str | None = None) -> list[WriteResult]:
        return self._run(C.add_messages(**_args(locals())))

    def redact(self, text: str, placeholder: str | None = None) -> str:
        return self._run(C.redact(**_args(locals())))


class AsyncClient:
    """`Client` for asyncio (one pooled `httpx.AsyncClient`): the same methods, awaited.

    `async with AsyncClient(url, key) as m: await m.write(None, "alice", "fact", "city", "Paris")`.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 http: httpx.AsyncClient | None = None, retries: int = 3, backoff: float = 0.5,
                 max_wait: float = 30.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.url, api_key = _endpoint(url, api_key)
        self.retry = RetryPolicy(retries, backoff, max_wait)
        self._sleep = sleep
        if http is None:
            self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(api_key), timeout=timeout)
        else:
            self._http = http
            self._http.headers.update(_headers(api_key))
        self._owns_http = http is None

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(call.method, call.path, params=call.params, json=call.json,
                                                headers=call.headers)
            except httpx.TransportError as exc:
                raise C.transport_error(exc, self.url) from exc
            wait = self.retry.delay(resp, attempt)
            if wait is None:
                return C.finish(call, resp, self.url)
            attempt += 1
            await self._sleep(wait)

    # -- operations (one per catalogue entry; see usermem.interfaces.catalog) --------------------------

    async def write(self, tenant: str | None, user_id: str, kind: str, key: str, value: Any, *,
                    source: str = "extracted", importance: float | None = None, confidence: float | None = None,
                    now: float | None = None, session_id: str | None = None, client_id: str | None = None,
                    event_at: float | None = None, ttl_seconds: float | None = None,
                    change_set_id: str | None = None, actor: str | None = None,
                    canonical: Any = None) -> WriteResult:
        return await self._run(C.write(**_args(locals())))

    async def write_many(self, tenant: str | None, user_id: str, writes: Sequence[WriteRequest | dict[str, Any]], *,
                         now: float | None = None, change_set_id: str | None = None,
                         actor: str | None = None) -> list[WriteResult]:
        return await self._run(C.write_many(**_args(locals())))

    async def recall(self, tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
                     kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                     keys: Sequence[str] | None = None, mark_used: bool = False, event_from: float | None = None,
                     event_until: float | None = None, actor: str | None = None,
                     domain: str | None = None, purpose: str | None = None) -> Recalled[MemoryRecord]:
        return await self._run(C.recall(**_args(locals())))

    async def recall_scored(self, tenant: str | None, user_id: str, k: int = 5, *, now: float | None = None,
                            kinds: Iterable[str | Kind] | None = None, query: str | None = None,
                            keys: Sequence[str] | None = None, mark_used: bool = False,
                            event_from: float | None = None, event_until: float | None = None,
                            actor: str | None = None, domain: str | None = None,
                      purpose: str | None = None) -> Recalled[ScoredMemory]:
        return await self._run(C.recall_scored(**_args(locals())))

    async def get(self, tenant: str | None, memory_id: str, *, actor: str | None = None,
                  now: float | None = None) -> MemoryRecord | None:
        return await self._run(C.get(**_args(locals())))

    async def history(self, tenant: str | None, user_id: str, key: str, *, actor: str | None = None,
                      now: float | None = None) -> list[MemoryRecord]:
        return await self._run(C.history(**_args(locals())))

    async def forget(self, tenant: str | None, user_id: str, key: str, *, now: float | None = None,
                     actor: str | None = None) -> int:
        return await self._run(C.forget(**_args(locals())))

    async def forget_range(self, tenant: str | None, user_id: str, *, since: float | None = None,
                           until: float | None = None, now: float | None = None, actor: str | None = None) -> int:
        return await self._run(C.forget_range(**_args(locals())))

    async def forget_user(self, tenant: str | None, user_id: str, *, now: float | None = None,
                          actor: str | None = None) -> int:
        return await self._run(C.forget_user(**_args(locals())))

    async def confirm(self, tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
                      actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        return await self._run(C.confirm(**_args(locals())))

    async def deny(self, tenant: str | None, user_id: str, memory_id: str, *, now: float | None = None,
                   actor: str | None = None, source: str = "user_confirmed") -> MemoryRecord:
        return await self._run(C.deny(**_args(locals())))

    async def revert(self, tenant: str | None, user_id: str, key: str, to_version: str | int | None = None, *,
                     now: float | None = None, actor: str | None = None,
                     source: str = "user_confirmed") -> WriteResult:
        return await self._run(C.revert(**_args(locals())))

    async def revert_change_set(self, tenant: str | None, change_set_id: str, *, now: float | None = None,
                                actor: str | None = None, source: str = "user_confirmed",
                                partial: bool = False) -> ChangeSetRevert:
        return await self._run(C.revert_change_set(**_args(locals())))

    async def federation_notices(self, tenant: str | None, user_id: str, *,
                                 now: float | None = None) -> list[dict[str, Any]]:
        return await self._run(C.federation_notices(**_args(locals())))

    async def keep_local(self, tenant: str | None, user_id: str, notice_id: str, *, now: float | None = None,
                         actor: str | None = None) -> WriteResult:
        return await self._run(C.keep_local(**_args(locals())))

    async def open_session(self, tenant: str | None, user_id: str, client_id: str | None = None, *,
                           now: float | None = None, idle_seconds: float | None = None) -> str:
        return await self._run(C.open_session(**_args(locals())))

    async def close_session(self, session_id: str, transcript: Transcript | None = None, *,
                            tenant: str | None = None, now: float | None = None,
                            actor: str | None = None) -> SessionClosed:
        return await self._run(C.close_session(**_args(locals())))

    async def touch_session(self, session_id: str, *, tenant: str | None = None, now: float | None = None) -> Session:
        return await self._run(C.touch_session(**_args(locals())))

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> Session:
        return await self._run(C.get_session(**_args(locals())))

    async def sessions(self, tenant: str | None, user_id: str, *, status: str | None = None,
                       now: float | None = None) -> list[Session]:
        return await self._run(C.sessions(**_args(locals())))

    async def session_context(self, session_id: str, *, tenant: str | None = None, k: int = 20,
                              now: float | None = None, mark_used: bool = True) -> list[ScoredMemory]:
        return await self._run(C.session_context(**_args(locals())))

    async def expire_idle_sessions(self, now: float | None = None, *,
                                   tenant: str | None = None) -> list[SessionClosed]:
        return await self._run(C.expire_idle_sessions(**_args(locals())))

    async def episodes(self, tenant: str | None, user_id: str, *, since: float | None = None,
                       until: float | None = None, limit: int = 10, now: float | None = None) -> list[MemoryRecord]:
        return await self._run(C.episodes(**_args(locals())))

    async def grant(self, tenant: str | None, user_id: str, fields_or_level: str | Sensitivity | Iterable[str],
                    purpose: str, ttl: float = 30 * 60.0, *, actor: str | None = None, grantee: str | None = None,
                    now: float | None = None) -> str:
        return await self._run(C.grant(**_args(locals())))

    async def revoke(self, tenant_or_grant_id: str, grant_id: str | None = None, *, actor: str | None = None,
                     now: float | None = None) -> bool:
        return await self._run(C.revoke(**_args(locals())))

    async def grants(self, tenant: str | None, user_id: str | None = None, *, now: float | None = None,
                     include_expired: bool = False) -> list[Grant]:
        return await self._run(C.grants(**_args(locals())))

    async def export(self, tenant: str | None, user_id: str, *, now: float | None = None,
                     actor: str | None = None) -> dict[str, Any]:
        return await self._run(C.export(**_args(locals())))

    async def opt_in(self, tenant: str | None, user_id: str, fields: Iterable[str] | str | None = None,
                     domain: str | None = None, *, request_id: str | None = None, actor: str | None = None,
                     now: float | None = None) -> list[str]:
        return await self._run(C.opt_in(**_args(locals())))

    async def request_consent(self, tenant: str | None, user_id: str, fields: Iterable[str] | str, purpose: str,
                        ttl: float = 30 * 60.0, *, domain: str | None = None, session_id: str | None = None,
                        actor: str | None = None, now: float | None = None) -> ConsentRequest:
        return await self._run(C.request_consent(**_args(locals())))

    async def consent_requests(self, tenant: str | None, user_id: str, *, status: str | None = "pending",
                         now: float | None = None) -> list[ConsentRequest]:
        return await self._run(C.consent_requests(**_args(locals())))

    async def approve_consent(self, tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        return await self._run(C.approve_consent(**_args(locals())))

    async def decline_consent(self, tenant: str | None, user_id: str, request_id: str, *, actor: str | None = None,
                        now: float | None = None) -> ConsentRequest:
        return await self._run(C.decline_consent(**_args(locals())))

    async def users(self, tenant: str | None, *, prefix: str | None = None, after: str | None = None,
              limit: int = 50) -> UserPage:
        return await self._run(C.users(**_args(locals())))

    async def opt_out(self, tenant: str | None, user_id: str, fields: Iterable[str] | str, domain: str, *,
                      actor: str | None = None, now: float | None = None) -> int:
        return await self._run(C.opt_out(**_args(locals())))

    async def contracts_list(self, tenant: str | None) -> list[FieldContract]:
        return await self._run(C.contracts_list(**_args(locals())))

    async def contract(self, tenant: str | None, key: str) -> FieldContract:
        return await self._run(C.contract(**_args(locals())))

    async def contract_history(self, tenant: str | None, key: str) -> list[dict[str, Any]]:
        return await self._run(C.contract_history(**_args(locals())))

    async def set_contract(self, tenant: str | None, contract: FieldContract | dict[str, Any], *,
                           actor: str | None = None, now: float | None = None) -> FieldContract:
        return await self._run(C.set_contract(**_args(locals())))

    async def enable_field(self, tenant: str | None, key: str, *, actor: str | None = None,
                           now: float | None = None) -> FieldContract:
        return await self._run(C.enable_field(**_args(locals())))

    async def disable_field(self, tenant: str | None, key: str, *, actor: str | None = None,
                            now: float | None = None) -> FieldContract:
        return await self._run(C.disable_field(**_args(locals())))

    async def delete_contract(self, tenant: str | None, key: str, *, actor: str | None = None,
                              now: float | None = None) -> None:
        return await self._run(C.delete_contract(**_args(locals())))

    async def set_unknown_fields(self, tenant: str | None, policy: str, *, actor: str | None = None,
                                 now: float | None = None) -> str:
        return await self._run(C.set_unknown_fields(**_args(locals())))

    async def plan(self, tenant: str | None, user_id: str, message: str) -> dict[str, Any]:
        return await self._run(C.plan(**_args(locals())))

    async def extract(self, messages: Any, *, tenant: str | None = None) -> list[Candidate]:
        return await self._run(C.extract(**_args(locals())))

    async def ingest(self, tenant: str | None, user_id: str, messages: Any, *, now: float | None = None,
                     session_id: str | None = None, change_set_id: str | None = None,
                     actor: str | None = None) -> list[WriteResult]:
        return await self._run(C.ingest(**_args(locals())))

    async def assemble(self, tenant: str | None, user_id: str, message: str, budget_tokens: int = 800, *,
                       now: float | None = None, session_id: str | None = None, actor: str | None = None,
                 purpose: str | None = None) -> Assembly:
        return await self._run(C.assemble(**_args(locals())))

    async def onboarding_questions(self, tenant: str | None, user_id: str, language: str | None = None, *,
                                   now: float | None = None) -> list[dict[str, Any]]:
        return await self._run(C.onboarding_questions(**_args(locals())))

    async def set_onboarding_questions(self, tenant: str | None, questions: Sequence[Any], *,
                                       now: float | None = None) -> list[dict[str, Any]]:
        return await self._run(C.set_onboarding_questions(**_args(locals())))

    async def answer_onboarding(self, tenant: str | None, user_id: str, answers: dict[str, Any], *,
                                now: float | None = None, actor: str | None = None) -> list[WriteResult]:
        return await self._run(C.answer_onboarding(**_args(locals())))

    async def record_pushback(self, tenant: str | None, user_id: str, key: str, message: str = "", *,
                              value: Any = None, now: float | None = None) -> dict[str, Any]:
        return await self._run(C.record_pushback(**_args(locals())))

    async def pending_verifications(self, tenant: str | None, user_id: str) -> list[dict[str, Any]]:
        return await self._run(C.pending_verifications(**_args(locals())))

    async def accept_verification(self, tenant: str | None, user_id: str, verification_id: str, *, value: Any = None,
                                  now: float | None = None, actor: str | None = None) -> WriteResult:
        return await self._run(C.accept_verification(**_args(locals())))

    async def reject_verification(self, tenant: str | None, user_id: str, verification_id: str, *,
                                  now: float | None = None) -> bool:
        return await self._run(C.reject_verification(**_args(locals())))

    # -- the user model (docs/usermodel.md) --

    async def model(self, tenant: str | None, user_id: str, *, now: float | None = None, actor: str | None = None) -> UserModel:
        return await self._run(C.model(**_args(locals())))

    async def record_signal(self, tenant: str | None, user_id: str, key: str, value: Any, *, agree: bool = True, message: str = "",
                            now: float | None = None) -> dict[str, Any]:
        return await self._run(C.record_signal(**_args(locals())))

    async def inference_policy(self, tenant: str | None) -> dict[str, Any]:
        return await self._run(C.inference_policy(**_args(locals())))

    async def set_inference_policy(self, tenant: str | None, *, mode: str | None = None, threshold: int | None = None,
                                   suppress_days: float | None = None, actor: str | None = None, now: float | None = None) -> dict[str, Any]:
        return await self._run(C.set_inference_policy(**_args(locals())))

    async def derivation_rules(self, tenant: str | None) -> list[dict[str, Any]]:
        return await self._run(C.derivation_rules(**_args(locals())))

    async def set_derivation_rule(self, tenant: str | None, rule: dict[str, Any], *, actor: str | None = None,
                                  now: float | None = None) -> dict[str, Any]:
        return await self._run(C.set_derivation_rule(**_args(locals())))

    async def propose_procedure(self, tenant: str | None, text: str, *, user_id: str | None = None,
                                evidence: Sequence[str] = (), proposed_by: str = "api", now: float | None = None) -> dict[str, Any]:
        return await self._run(C.propose_procedure(**_args(locals())))

    async def procedures(self, tenant: str | None, *, user_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        return await self._run(C.procedures(**_args(locals())))

    async def review_procedure(self, tenant: str | None, procedure_id: str, decision: str, *,
                               evaluation: dict[str, Any] | None = None, text: str | None = None, actor: str | None = None,
                               now: float | None = None) -> dict[str, Any]:
        return await self._run(C.review_procedure(**_args(locals())))

    async def rollback_procedure(self, tenant: str | None, procedure_id: str, *, actor: str | None = None,
                                 now: float | None = None) -> dict[str, Any]:
        return await self._run(C.rollback_procedure(**_args(locals())))

    async def suggest_procedures(self, tenant: str | None, user_id: str, *, now: float | None = None) -> list[dict[str, Any]]:
        return await self._run(C.suggest_procedures(**_args(locals())))

    async def suggest_derivation_rules(self, tenant: str | None, *, now: float | None = None) -> list[dict[str, Any]]:
        return await self._run(C.suggest_derivation_rules(**_args(locals())))

    async def create_webhook(self, tenant: str | None, url: str, events: Iterable[str] | None = None, *,
                             secret: str | None = None, actor: str | None = None, now: float | None = None) -> WebhookCreated:
        return await self._run(C.create_webhook(**_args(locals())))

    async def list_webhooks(self, tenant: str | None) -> list[Webhook]:
        return await self._run(C.list_webhooks(**_args(locals())))

    async def get_webhook(self, tenant: str | None, webhook_id: str) -> Webhook:
        return await self._run(C.get_webhook(**_args(locals())))

    async def delete_webhook(self, tenant: str | None, webhook_id: str, *, actor: str | None = None,
                             now: float | None = None) -> bool:
        return await self._run(C.delete_webhook(**_args(locals())))

    async def enable_webhook(self, tenant: str | None, webhook_id: str, *, actor: str | None = None,
                             now: float | None = None) -> Webhook:
        return await self._run(C.enable_webhook(**_args(locals())))

    async def ping_webhook(self, tenant: str | None, webhook_id: str, *, now: float | None = None) -> Delivery:
        return await self._run(C.ping_webhook(**_args(locals())))

    async def webhook_deliveries(self, tenant: str | None, webhook_id: str | None = None, *,
                                 limit: int = 100) -> list[Delivery]:
        return await self._run(C.webhook_deliveries(**_args(locals())))

    async def audit(self, tenant: str | None, *, user_id: str | None = None, action: str | None = None,
                    since: float | None = None, until: float | None = None, limit: int = 100,
                    after_seq: int | None = None) -> list[AuditEvent]:
        return await self._run(C.audit(**_args(locals())))

    async def purge(self, now: float | None = None, *, retention_days: float | None = None) -> int:
        return await self._run(C.purge(**_args(locals())))

    async def whoami(self) -> dict[str, Any]:
        return await self._run(C.whoami(**_args(locals())))

    async def add_messages(self, session_id: str, messages: Sequence[Mapping[str, str]], *,
                           tenant: str | None = None, extract: bool = False, now: float | None = None,
                           actor: str | None = None) -> list[WriteResult]:
        return await self._run(C.add_messages(**_args(locals())))

    async def redact(self, text: str, placeholder: str | None = None) -> str:
        return await self._run(C.redact(**_args(locals())))


class RemoteAssembly:
    """Kept for compatibility: what `Client.assemble` returned before it returned the engine's `Assembly`.
    Wraps the JSON of `POST /v1/users/{user_id}/assemble` (selections as plain dicts)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)
        self.plan: dict[str, Any] = dict(data.get("plan", {}))
        self.plan_mode: str | None = data.get("plan_mode")
        self.facts: list[dict[str, Any]] = list(data.get("facts", []))
        self.preferences: list[dict[str, Any]] = list(data.get("preferences", []))
        self.context: list[dict[str, Any]] = list(data.get("context", []))
        self.prompt: str = str(data.get("prompt", ""))
        self.tokens: int = int(data.get("tokens", 0))
        self.budget_tokens: int = int(data.get("budget_tokens", 0))
        self.dropped: tuple[str, ...] = tuple(data.get("dropped", ()))
        self.withheld: tuple[Withheld, ...] = tuple(Withheld.from_dict(w) for w in data.get("withheld", ()))

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)
