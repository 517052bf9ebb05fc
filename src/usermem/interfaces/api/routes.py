"""/v1 resources over the `Memory` facade: one router module per area of the operation catalogue
(`usermem.interfaces.catalog`), assembled here. Paths and methods come from the catalogue.

Tenant isolation: the tenant is the calling key's tenant, always. A user or memory of another tenant
is simply not found — the response is the same 404 as for one that never existed.
"""

from __future__ import annotations

from fastapi import APIRouter

from usermem.interfaces.api import (
    routes_admin,
    routes_contracts,
    routes_conversation,
    routes_lifecycle,
    routes_memories,
    routes_privacy,
    routes_sessions,
    routes_usermodel,
    routes_webhooks,
)
from usermem.interfaces.api.routing import user_exists

AREA_ROUTERS: dict[str, APIRouter] = {
    "memories": routes_memories.router,
    "lifecycle": routes_lifecycle.router,
    "sessions": routes_sessions.router,
    "privacy": routes_privacy.router,
    "contracts": routes_contracts.router,
    "conversation": routes_conversation.router,
    "usermodel": routes_usermodel.router,
    "admin": routes_admin.router,
    "webhooks": routes_webhooks.router,
}

router = APIRouter()
for _area in AREA_ROUTERS.values():
    router.include_router(_area)

__all__ = ["AREA_ROUTERS", "router", "user_exists"]
