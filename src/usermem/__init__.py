"""usermem — long-term user memory for AI agents that is right, safe and fast.

The public surface is what this module exports; everything else is internal.
"""

from usermem.config import Settings, load_settings
from usermem.engine.memory import Memory
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
    ScoredMemory,
    Source,
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
    "ScoredMemory",
    "Settings",
    "Source",
    "StoreError",
    "TierUnavailable",
    "UsermemError",
    "ValidationError",
    "WriteRequest",
    "WriteResult",
    "load_settings",
]
