"""/v1 webhooks: the tenant's webhook subscriptions for change events and their delivery log
(engine/webhooks.py, docs/webhooks.md). Admin keys not bound to a user; the signing secret is in the
creation response only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from usermem.interfaces.api import schemas as S
from usermem.interfaces.api.deps import Admin, Mem, actor_of
from usermem.interfaces.api.routing import not_user_bound, operation
from usermem.interfaces.catalog import describe

router = APIRouter()
CODES = (401, 403, 404, 422, 429, 503)
WHAT = "manage the tenant's webhooks"
ActorQ = Annotated[str | None, Query(max_length=128, description=describe("actor"))]
NowQ = Annotated[float | None, Query(description=describe("now"), **S.TIME_BOUNDS)]


@operation(router, "create_webhook", S.WebhookCreatedOut, codes=CODES,
           summary="Subscribe a URL to the tenant's change events (admin key). The response carries the signing "
                   "secret, the only time it is returned")
def create_webhook(body: S.WebhookIn, p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, WHAT)
    created = m.create_webhook(p.tenant, body.url, body.events, secret=body.secret, actor=actor_of(p, body.actor),
                               now=body.now)
    return JSONResponse(created.to_dict())


@operation(router, "list_webhooks", S.WebhookListOut, codes=CODES,
           summary="The tenant's webhook subscriptions (admin key; never their secrets)")
def list_webhooks(p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse({"items": [h.to_dict() for h in m.list_webhooks(p.tenant)]})


@operation(router, "get_webhook", S.WebhookOut, codes=CODES, summary="One webhook subscription (admin key)")
def get_webhook(webhook_id: str, p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse(m.get_webhook(p.tenant, webhook_id).to_dict())


@operation(router, "delete_webhook", S.DeletedOut, codes=CODES,
           summary="Delete a webhook subscription (admin key; audited); deleted=false when there was none")
def delete_webhook(webhook_id: str, p: Admin, m: Mem, actor: ActorQ = None, now: NowQ = None) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse({"deleted": m.delete_webhook(p.tenant, webhook_id, actor=actor_of(p, actor), now=now)})


@operation(router, "enable_webhook", S.WebhookOut, codes=CODES,
           summary="Re-enable a webhook subscription disabled after repeated failures (admin key; audited)")
def enable_webhook(webhook_id: str, body: S.WebhookActIn, p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse(m.enable_webhook(p.tenant, webhook_id, actor=actor_of(p, body.actor), now=body.now)
                        .to_dict())


@operation(router, "ping_webhook", S.DeliveryOut, codes=CODES,
           summary="Send one signed ping event to the subscription now and return the delivery (admin key)")
def ping_webhook(webhook_id: str, body: S.WebhookPingIn, p: Admin, m: Mem) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse(m.ping_webhook(p.tenant, webhook_id, now=body.now).to_dict())


@operation(router, "webhook_deliveries", S.DeliveryListOut, codes=CODES,
           summary="The delivery log, oldest first: each event's state and attempts (admin key)")
def webhook_deliveries(p: Admin, m: Mem,
                       webhook_id: Annotated[str | None, Query(max_length=128,
                                                               description=describe("webhook_id"))] = None,
                       limit: Annotated[int, Query(ge=1, le=10_000, description=describe("limit"))] = 100,
                       ) -> JSONResponse:
    not_user_bound(p, WHAT)
    return JSONResponse({"items": [d.to_dict() for d in m.webhook_deliveries(p.tenant, webhook_id, limit=limit)]})
