"""API keys: one or more per tenant, stored hashed in the documents table under the reserved tenant `_system`.

A key reads `umk_<id>_<secret>`. Only sha256(secret) is stored; the id finds the record, the hash is
compared in constant time. The key decides the tenant of every request made with it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from usermem.errors import NotFound, ValidationError
from usermem.policy.validate import InputProblem, check_identifier, is_reserved_tenant
from usermem.store.base import Store

SYSTEM_TENANT = "_system"
NAMESPACE = "api_keys"
PREFIX = "umk_"
_KEY_RE = re.compile(r"^umk_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """What a verified key grants. Never holds the secret."""

    id: str
    tenant: str
    admin: bool
    name: str
    created_at: float
    revoked_at: float | None = None
    user_id: str | None = None  # bind the key to one user (MCP hosts, single-user agents)
    # A user token: held by the user themself (the /me page, consent answers), always bound to that user and
    # never admin. An agent's user-bound key is not one: it cannot answer consent requests for the user.
    user_token: bool = False
    expires_at: float | None = None  # a user token may expire

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or time.time() < self.expires_at)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "admin": self.admin, "name": self.name,
                "created_at": self.created_at, "revoked_at": self.revoked_at, "user_id": self.user_id,
                "user_token": self.user_token, "expires_at": self.expires_at}


def check_user_id(user_id: object) -> None:
    try:
        check_identifier("user_id", user_id)
    except (TypeError, InputProblem) as exc:
        raise ValidationError(str(exc), field="user_id") from None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _from_doc(key_id: str, d: dict[str, Any]) -> ApiKey:
    return ApiKey(id=key_id, tenant=d["tenant"], admin=bool(d.get("admin")), name=d.get("name", ""),
                  created_at=float(d["created_at"]), revoked_at=d.get("revoked_at"), user_id=d.get("user_id"),
                  user_token=bool(d.get("user_token", False)),
                  expires_at=None if d.get("expires_at") is None else float(d["expires_at"]))


class KeyRing:
    """Create, list, revoke and verify keys. Verified keys are cached for `cache_seconds` (revocation in
    this process is immediate; another process's revocation takes effect within that time)."""

    def __init__(self, store: Store, *, cache_seconds: float = 5.0) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, ApiKey | None]] = {}
        self._lock = threading.Lock()

    def create_user_token(self, tenant: str, user_id: str, *, name: str = "", ttl_seconds: float | None = None,
                          now: float | None = None) -> tuple[str, ApiKey]:
        """A token for the user themself: bound to `user_id`, never admin, optionally expiring. It reads and
        corrects only that user's memory and answers their consent requests. Returns (plaintext, record)."""
        check_user_id(user_id)
        if ttl_seconds is not None and (isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float)
                                        or not 0 < ttl_seconds <= 366 * 86_400):
            raise ValidationError("ttl_seconds must be in (0, 366 days]", field="ttl_seconds")
        at = time.time() if now is None else now
        return self._create(tenant, admin=False, name=name, user_id=user_id, now=at, user_token=True,
                            expires_at=None if ttl_seconds is None else at + float(ttl_seconds))

    def create(self, tenant: str, *, admin: bool = False, name: str = "", user_id: str | None = None,
               now: float | None = None) -> tuple[str, ApiKey]:
        """Returns (plaintext key, record). The plaintext is shown once and never stored."""
        if user_id is not None:
            check_user_id(user_id)
        return self._create(tenant, admin=admin, name=name, user_id=user_id, now=now)

    def _create(self, tenant: str, *, admin: bool, name: str, user_id: str | None, now: float | None,
                user_token: bool = False, expires_at: float | None = None) -> tuple[str, ApiKey]:
        if tenant == SYSTEM_TENANT or (isinstance(tenant, str) and is_reserved_tenant(tenant)):
            raise ValidationError(f"tenant {tenant!r} is reserved (`*` and names starting with `_`)", field="tenant")
        if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
            raise ValidationError("tenant must be 1-128 characters of letters, digits and _.:-", field="tenant")
        at = time.time() if now is None else now
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        doc = {"tenant": tenant, "admin": admin, "name": name, "created_at": at, "revoked_at": None,
               "hash": _hash(secret), "user_id": user_id, "user_token": user_token, "expires_at": expires_at}
        self.store.put_doc(SYSTEM_TENANT, NAMESPACE, key_id, doc, now=at)
        return f"{PREFIX}{key_id}_{secret}", _from_doc(key_id, doc)

    def list(self, tenant: str | None = None, *, include_revoked: bool = True) -> list[ApiKey]:
        keys = [_from_doc(k, d) for k, d in self.store.list_docs(SYSTEM_TENANT, NAMESPACE, limit=100_000)]
        return [k for k in keys if (tenant is None or k.tenant == tenant) and (include_revoked or k.active)]

    def get(self, key_id: str) -> ApiKey | None:
        doc = self.store.get_doc(SYSTEM_TENANT, NAMESPACE, key_id)
        return None if doc is None else _from_doc(key_id, doc)

    def revoke(self, key_id: str, *, now: float | None = None) -> ApiKey:
        doc = self.store.get_doc(SYSTEM_TENANT, NAMESPACE, key_id)
        if doc is None:
            raise NotFound(f"no API key with id {key_id!r}")
        if doc.get("revoked_at") is None:
            doc["revoked_at"] = time.time() if now is None else now
            self.store.put_doc(SYSTEM_TENANT, NAMESPACE, key_id, doc, now=doc["revoked_at"])
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if v[1] is None or v[1].id != key_id}
        return _from_doc(key_id, doc)

    def verify(self, presented: str | None) -> ApiKey | None:
        """The active key record for a presented key, or None (absent, malformed, wrong or revoked)."""
        if not presented:
            return None
        m = _KEY_RE.match(presented.strip())
        if m is None:
            return None
        now = time.monotonic()
        cache_key = hashlib.sha256(presented.encode()).hexdigest()
        with self._lock:
            hit = self._cache.get(cache_key)
        if hit is not None and hit[0] > now:
            return hit[1]
        key_id, secret = m.groups()
        doc = self.store.get_doc(SYSTEM_TENANT, NAMESPACE, key_id)
        found: ApiKey | None = None
        if doc is not None and hmac.compare_digest(str(doc.get("hash", "")), _hash(secret)):
            rec = _from_doc(key_id, doc)
            found = rec if rec.active else None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[cache_key] = (now + self.cache_seconds, found)
        return found
