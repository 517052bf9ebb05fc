"""usermem — long-term user memory for AI agents that is right, safe and fast.

The public surface is what this module exports; everything else is internal.
"""

from usermem.config import Settings, load_settings
from usermem.engine.consent import ConsentRequest
from usermem.engine.memory import Memory
from usermem.engine.webhooks import Delivery, Webhook, WebhookCreated
from usermem.errors import (
    ConfigError,
    ConflictError,
    IntegrityError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProviderError,
    StoreError,
    TierUnavailable,
    UsermemError,
    ValidationError,
)
from usermem.interfaces.client import AsyncClient, Client
from usermem.model import (
    AuditEvent,
    Candidate,
    ChangeEvent,
    Kind,
    MemoryClass,
    MemoryRecord,
    Op,
    Reason,
    Recalled,
    ScoredMemory,
    Source,
    UserPage,
    Withheld,
    WithheldReason,
    WriteRequest,
    WriteResult,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AuditEvent",
    "Candidate",
    "ChangeEvent",
    "Client",
    "ConfigError",
    "ConflictError",
    "ConsentRequest",
    "Delivery",
    "IntegrityError",
    "InvalidArgument",
    "Kind",
    "Memory",
    "MemoryClass",
    "MemoryRecord",
    "NotFound",
    "Op",
    "PermissionDenied",
    "ProviderError",
    "Reason",
    "Recalled",
    "ScoredMemory",
    "Settings",
    "Source",
    "StoreError",
    "TierUnavailable",
    "UserPage",
    "UsermemError",
    "ValidationError",
    "Webhook",
    "WebhookCreated",
    "Withheld",
    "WithheldReason",
    "WriteRequest",
    "WriteResult",
    "load_settings",
]
