"""The HTTP API: `create_app(memory)` builds the FastAPI application (see docs/api.md)."""

from usermem.interfaces.api.app import create_app
from usermem.interfaces.api.keys import ApiKey, KeyRing

__all__ = ["ApiKey", "KeyRing", "create_app"]
