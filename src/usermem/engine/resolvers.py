"""Live fields: values read from the business system of record at recall time, never stored (seed 000).

A contract marked `live` names a resolver: an http(s) URL (GET with tenant, user_id and key as query
parameters, or `{tenant}`/`{user_id}`/`{key}` placeholders in the URL; the reply is JSON, either
{"value": ...} or the value itself) or `registered:<name>` for a Python callable registered with
`Memory.register_resolver(name, fn)`. A callable registered under the field's own key is used even when
the contract names none. `fn(tenant, user_id, key) -> value | None`.

Writes to a live field are rejected (`live_field`), and a copy stored before the field became live is
never returned instead: recall drops stored records of live fields. When a resolver fails, the field is
simply absent from that recall (logged) — a stale copy is never a fallback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from usermem.engine.context import EngineContext
from usermem.errors import ValidationError
from usermem.model import Kind, MemoryRecord, ScoredMemory, Source
from usermem.policy.contracts import ContractSet, FieldContract

ResolverFn = Callable[[str, str, str], Any]
log = logging.getLogger("usermem.live")


class LiveResolvers:
    def __init__(self, ctx: EngineContext, timeout: float = 2.0) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self._registry: dict[str, ResolverFn | str] = {}
        self._lock = threading.Lock()
        self._client: Any = None

    def register(self, name: str, resolver: ResolverFn | str) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("a resolver needs a name (usually the field key)", field="name")
        if isinstance(resolver, str):
            if not resolver.startswith(("http://", "https://")):
                raise ValidationError("a resolver is a callable or an http(s) URL", field="resolver")
        elif not callable(resolver):
            raise ValidationError("a resolver is a callable or an http(s) URL", field="resolver")
        with self._lock:
            self._registry[name] = resolver

    def _resolver_for(self, contract: FieldContract) -> ResolverFn | str | None:
        with self._lock:
            if contract.key in self._registry:
                return self._registry[contract.key]
            r = contract.resolver
            if r is None:
                return None
            if r.startswith("registered:"):
                return self._registry.get(r[len("registered:"):])
            return r

    def resolve(self, tenant: str, user_id: str, contract: FieldContract) -> Any:
        """The current value from the system of record, or None (no resolver, no value, or failure)."""
        resolver = self._resolver_for(contract)
        if resolver is None:
            log.warning("live field %r has no resolver", contract.key)
            return None
        try:
            if isinstance(resolver, str):
                return self._http(resolver, tenant, user_id, contract.key)
            return resolver(tenant, user_id, contract.key)
        except Exception as exc:  # a failing system of record must not fail recall
            log.warning("resolver for live field %r failed: %s", contract.key, type(exc).__name__)
            return None

    def _http(self, url: str, tenant: str, user_id: str, key: str) -> Any:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        params: dict[str, str] | None = {"tenant": tenant, "user_id": user_id, "key": key}
        if "{" in url:
            url = url.format(tenant=quote(tenant, safe=""), user_id=quote(user_id, safe=""), key=quote(key, safe=""))
            params = None
        resp = self._client.get(url, params=params)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        data = resp.json()
        if isinstance(data, dict) and "value" in data:
            return data["value"]
        return data

    def scored(self, tenant: str, user_id: str, now: float, contracts: ContractSet,
               why_not: Callable[[FieldContract], str | None], kinds: Sequence[Kind] | None,
               keys: Sequence[str] | None, withheld: dict[str, str] | None = None) -> list[ScoredMemory]:
        """Current values of the live fields this recall asks for and may see, as scored memories.

        A live field the reader may not see (`why_not` gives the reason) is resolved all the same, so that
        when the system of record holds a value the field goes into `withheld` with its reason — "allergy
        known but not shown" is never answered as "no allergy known". Its value is not returned."""
        out: list[ScoredMemory] = []
        for c in contracts.enabled():
            if not c.live or (kinds is not None and c.kind not in kinds) or (keys is not None and c.key not in keys):
                continue
            reason = why_not(c)
            value = self.resolve(tenant, user_id, c)
            if value is None:
                continue
            if reason is not None:
                if withheld is not None:
                    withheld.setdefault(c.key, reason)
                continue
            importance = c.effective_importance()
            record = MemoryRecord(id=f"live:{c.key}", tenant=tenant, user_id=user_id, kind=c.kind, key=c.key,
                                  value=value, source=Source.SYSTEM, confidence=1.0, importance=importance,
                                  created_at=now, last_confirmed_at=now, actor="live")
            out.append(ScoredMemory(record, importance, 1.0))
        return out

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
