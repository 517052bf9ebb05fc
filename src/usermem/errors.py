"""One exception hierarchy, rooted in UsermemError, so callers can catch everything usermem raises.

Write *decisions* (REJECT with a reason) are results, not exceptions; these errors are for
programming mistakes, bad configuration and unavailable backends.
"""

from __future__ import annotations


class UsermemError(Exception):
    """Root of every error usermem raises."""

    code = "usermem_error"


class InvalidArgument(UsermemError, TypeError):
    """A call was made with an argument of the wrong type or shape (a programming error)."""

    code = "invalid_argument"


class ValidationError(UsermemError, ValueError):
    """Input that is well-typed but not acceptable (bad key, oversized batch, unknown kind...)."""

    code = "validation_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ConfigError(UsermemError):
    """Configuration that cannot work. The message names the setting."""

    code = "config_error"

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(f"{setting}: {message}" if setting else message)
        self.setting = setting


class StoreError(UsermemError):
    """A storage backend failed (connection lost, schema missing, ...)."""

    code = "store_error"


class TierUnavailable(StoreError):
    """An optional tier (e.g. Redis) is unreachable; the store of record still answers."""

    code = "tier_unavailable"


class IntegrityError(StoreError):
    """The database refused a write that would break an invariant (e.g. two current versions)."""

    code = "integrity_error"


class NotFound(UsermemError, LookupError):
    """The named memory, session, grant or change set does not exist for this tenant."""

    code = "not_found"


class ConflictError(UsermemError):
    """The operation conflicts with the current state (e.g. reverting to a version of another key)."""

    code = "conflict"


class PermissionDenied(UsermemError):
    """The caller lacks the grant needed for this read (L2/L3 fields) or this admin action."""

    code = "permission_denied"


class ProviderError(UsermemError):
    """An LLM or embedding provider failed. Pipelines fall back instead of raising this to agents."""

    code = "provider_error"
